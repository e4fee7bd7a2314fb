//! `/metrics` on `host serve` and on `host worker --metrics-addr`, scraped
//! by a real Prometheus (Debian's, `skillhost_tests::prometheus`) while they
//! drain runs queued with `host submit` on Postgres, and asked through its
//! query API for what the runs must have counted: runs finished by
//! scenario and status, node durations, the queue back to empty. And the
//! hostile side: a scrape without the token is refused, a worker will not
//! serve its metrics off loopback without one, and a scenario with a
//! flood of node names does not grow the label sets past the cap.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost_telemetry::metrics::MAX_LABEL_SETS;
use skillhost_tests::cli::KilledOnDrop;
use skillhost_tests::free_port;
use skillhost_tests::prometheus::{Prometheus, Sample, Target};

use crate::workers::{fixture, host, host_command, ok};

const TOKEN: &str = "scrape-s3cret";

/// A `host serve` or `host worker` process with its metrics on
/// `127.0.0.1:port`, killed when dropped.
struct Scraped {
    process: KilledOnDrop,
    address: String,
}

impl Scraped {
    /// `host ARGS` whose metrics answer at `address` (with the token)
    /// once it is up; waits until they do.
    fn start(db: &str, args: &[&str], address: String) -> Scraped {
        let child = host_command(db, args)
            .current_dir(skillhost_tests::repo_root())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start host");
        let scraped = Scraped {
            process: KilledOnDrop::new(child),
            address,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while scraped.scrape(Some(TOKEN)).0 != 200 {
            assert!(
                Instant::now() < deadline,
                "`host {}` did not answer /metrics",
                args.join(" ")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        scraped
    }

    fn serve(db: &str, port: u16, extra: &[&str]) -> Scraped {
        let address = format!("127.0.0.1:{port}");
        let mut args = vec!["serve", "--addr", &address, "--token", TOKEN];
        args.extend_from_slice(extra);
        Scraped::start(db, &args, address.clone())
    }

    fn worker(db: &str, port: u16) -> Scraped {
        let address = format!("127.0.0.1:{port}");
        let args = [
            "worker",
            "--poll",
            "50ms",
            "--metrics-addr",
            &address,
            "--token",
            TOKEN,
        ];
        Scraped::start(db, &args, address.clone())
    }

    /// GET /metrics, with `Authorization: Bearer token` if given: the
    /// status and the body (0 when nothing answers). Over HTTP/1.0 on a
    /// plain socket: the tests are async, where a blocking client's own
    /// runtime may not be dropped.
    fn scrape(&self, token: Option<&str>) -> (u16, String) {
        use std::io::{Read as _, Write as _};
        let get = || -> std::io::Result<(u16, String)> {
            let mut stream = std::net::TcpStream::connect(&self.address)?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            let authorization = token
                .map(|token| format!("Authorization: Bearer {token}\r\n"))
                .unwrap_or_default();
            write!(
                stream,
                "GET /metrics HTTP/1.0\r\nHost: {}\r\n{authorization}\r\n",
                self.address
            )?;
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer)?;
            let answer = String::from_utf8_lossy(&answer).into_owned();
            let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
            let body = answer
                .split_once("\r\n\r\n")
                .map(|(_, body)| body.to_string())
                .unwrap_or_default();
            Ok((status, body))
        };
        get().unwrap_or((0, String::new()))
    }

    /// SIGTERM, and waits until it exits.
    fn stop(mut self) {
        skillhost_tests::cli::send_signal(self.process.id(), libc::SIGTERM);
        let _ = self.process.wait();
    }
}

fn submit(db: &str, scenario: &str, input: &Value) -> String {
    let out = ok(host(
        db,
        &["submit", scenario, "--input", &input.to_string()],
    ));
    out.trim().to_string()
}

/// The one value of `samples` (panics on none or several).
fn only(samples: &[Sample]) -> f64 {
    assert_eq!(samples.len(), 1, "{samples:?}");
    samples[0].value
}

fn equals(expected: f64) -> impl Fn(&[Sample]) -> bool {
    move |samples| samples.len() == 1 && samples[0].value == expected
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_a_worker_and_serve_draining_queued_runs() {
    let db = skillhost_tests::pg::fresh_database().await;
    let (serve_port, worker_port) = (free_port(), free_port());
    let prometheus = Prometheus::start(&[
        Target::new("serve", &format!("127.0.0.1:{serve_port}")).with_token(TOKEN),
        Target::new("worker", &format!("127.0.0.1:{worker_port}")).with_token(TOKEN),
    ]);

    // Runs queued while no one runs them: the store's gauges say so.
    let slow = fixture("workers/slow.toml");
    let failing = fixture("engine/failing.toml");
    let mut ids = Vec::new();
    for i in 0..4 {
        ids.push(submit(&db, &slow, &json!({"label": format!("r{i}")})));
    }
    for _ in 0..2 {
        ids.push(submit(&db, &failing, &json!({"mode": "retryable-error"})));
    }
    let serve = Scraped::serve(&db, serve_port, &["--no-worker"]);
    let timeout = Duration::from_secs(60);
    prometheus.wait_for("skillhost_queue_depth{job=\"serve\"}", timeout, equals(6.0));
    prometheus.wait_for(
        "skillhost_queue_oldest_age_seconds{job=\"serve\"}",
        timeout,
        |s| s.len() == 1 && s[0].value > 0.0,
    );

    // `host serve` again with its worker, on the same port, and a `host
    // worker`: they drain the queue between them.
    serve.stop();
    let serve = Scraped::serve(&db, serve_port, &[]);
    let worker = Scraped::worker(&db, worker_port);
    let finished = "sum by (scenario, status) (skillhost_runs_finished_total)";
    let samples = prometheus.wait_for(finished, Duration::from_secs(180), |samples| {
        samples.iter().map(|s| s.value).sum::<f64>() == 6.0
    });
    let mut counts: Vec<(String, String, f64)> = samples
        .iter()
        .map(|s| {
            (
                s.label("scenario").to_string(),
                s.label("status").to_string(),
                s.value,
            )
        })
        .collect();
    counts.sort_by(|a, b| a.partial_cmp(b).unwrap());
    assert_eq!(
        counts,
        [
            ("failing".to_string(), "failed".to_string(), 2.0),
            ("slow".to_string(), "completed".to_string(), 4.0),
        ]
    );
    // Each run began in one of the two processes, once.
    let started = prometheus.query("sum(skillhost_runs_started_total)");
    assert_eq!(only(&started), 6.0);
    // Every node of every slow run: ten echo nodes and the end.
    let nodes = prometheus.wait_for(
        "sum(skillhost_node_duration_seconds_count{scenario=\"slow\"})",
        timeout,
        equals(44.0),
    );
    assert_eq!(only(&nodes), 44.0);
    let per_node = prometheus.query(
        "sum by (node) (skillhost_node_duration_seconds_count{scenario=\"slow\",node=~\"n.*\"})",
    );
    assert_eq!(per_node.len(), 10, "{per_node:?}");
    assert!(per_node.iter().all(|s| s.value == 4.0), "{per_node:?}");
    // The slow nodes took tens of milliseconds, not nothing.
    let slowest = prometheus
        .query("sum(skillhost_node_duration_seconds_sum{scenario=\"slow\",node=~\"n.*\"})");
    assert!(only(&slowest) > 0.0, "{slowest:?}");
    // Both see the queue empty, and no wait open.
    for job in ["serve", "worker"] {
        prometheus.wait_for(
            &format!("skillhost_queue_depth{{job=\"{job}\"}}"),
            timeout,
            equals(0.0),
        );
        prometheus.wait_for(
            &format!("skillhost_waits_open{{job=\"{job}\"}}"),
            timeout,
            equals(0.0),
        );
    }
    // No run id is a label anywhere.
    let (status, text) = worker.scrape(Some(TOKEN));
    assert_eq!(status, 200);
    for id in &ids {
        assert!(!text.contains(id.as_str()), "{id} in:\n{text}");
    }
    assert_eq!(
        prometheus.targets_up(),
        [("serve".to_string(), 1.0), ("worker".to_string(), 1.0)]
    );
    worker.stop();
    serve.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_refuse_a_scraper_without_the_token_and_cap_a_flood_of_node_names() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("runs.db").display());

    // A worker will not serve its metrics off loopback without a token.
    let out = host(&db, &["worker", "--metrics-addr", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--metrics-addr 0.0.0.0:0 is not a loopback address")
            && stderr.contains("--token"),
        "{stderr}"
    );
    // Nor take a token with nothing for it to guard.
    let out = host(&db, &["worker", "--token", TOKEN]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("give --metrics-addr"),
        "{out:?}"
    );

    // A scenario of 260 gates, each a node name of its own.
    let nodes = 260;
    let mut toml = String::from(
        "[scenario]\nname = \"flood\"\nversion = \"0.1.0\"\ndescription = \"many names\"\n\n",
    );
    for i in 0..nodes {
        toml.push_str(&format!(
            "[[node]]\nid = \"gate_{i:03}\"\nkind = \"gate\"\n\n"
        ));
    }
    toml.push_str("[[node]]\nid = \"done\"\nkind = \"end\"\n\n");
    for i in 0..nodes {
        let to = match i + 1 {
            next if next < nodes => format!("gate_{next:03}"),
            _ => "done".to_string(),
        };
        toml.push_str(&format!(
            "[[edge]]\nfrom = \"gate_{i:03}\"\nto = \"{to}\"\n\n"
        ));
    }
    let scenario = dir.path().join("flood.toml");
    std::fs::write(&scenario, toml).unwrap();
    submit(&db, &scenario.display().to_string(), &json!({}));

    let serve = Scraped::serve(&db, free_port(), &[]);
    // Refused without the token, or with another: nothing of the metrics
    // in the answer.
    for token in [None, Some("guess")] {
        let (status, body) = serve.scrape(token);
        assert_eq!(status, 401, "{token:?}: {body}");
        assert!(!body.contains("skillhost_"), "{body}");
        assert!(!body.contains(TOKEN), "{body}");
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    let text = loop {
        let (status, text) = serve.scrape(Some(TOKEN));
        assert_eq!(status, 200, "{text}");
        if text.contains("skillhost_runs_finished_total{scenario=\"flood\",status=\"completed\"} 1")
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "the flood did not finish:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let series: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("skillhost_node_duration_seconds_count{"))
        .collect();
    let cap = MAX_LABEL_SETS;
    assert_eq!(series.len(), cap + 1, "{series:#?}");
    assert!(
        series.contains(
            &"skillhost_node_duration_seconds_count{scenario=\"other\",node=\"other\"} 61"
        ),
        "{series:#?}"
    );
    assert!(
        text.contains(&format!(
            "skillhost_metric_label_sets_folded_total{{metric=\"skillhost_node_duration_seconds\"}} {}",
            nodes + 1 - cap
        )),
        "{text}"
    );
    serve.stop();
}
