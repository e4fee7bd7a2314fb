//! A real Prometheus server for the metrics tests: Debian's `prometheus`
//! on a free port of 127.0.0.1, its storage in a temporary directory,
//! scraping the targets a test gives it every [`SCRAPE_INTERVAL`] (with a
//! bearer token where a target has one), and its HTTP query API
//! ([`Prometheus::query`], [`Prometheus::wait_for`]) to ask it what it
//! scraped. A missing `prometheus` fails the test, naming the command that
//! installs it (the one `.ci/run` runs); none skips.
//!
//! The server is stopped when its [`Prometheus`] is dropped, and by a
//! watchdog process if the test process dies first.

use std::io::{Read as _, Write as _};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::free_port;

/// How `.ci/run` installs it (pinned there).
pub const INSTALL_HINT: &str = "apt-get install -y prometheus (what .ci/run does)";

/// How often each target is scraped.
pub const SCRAPE_INTERVAL: Duration = Duration::from_millis(500);

/// A target to scrape: its job name, `HOST:PORT` and the bearer token it
/// wants, if any.
#[derive(Debug, Clone)]
pub struct Target {
    pub job: String,
    pub address: String,
    pub token: Option<String>,
}

impl Target {
    pub fn new(job: &str, address: &str) -> Target {
        Target {
            job: job.into(),
            address: address.into(),
            token: None,
        }
    }

    pub fn with_token(mut self, token: &str) -> Target {
        self.token = Some(token.into());
        self
    }
}

/// One series of a query's answer: its labels and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: serde_json::Map<String, Value>,
    pub value: f64,
}

impl Sample {
    /// The value of label `name` (`""` when the series has none).
    pub fn label(&self, name: &str) -> &str {
        self.labels.get(name).and_then(Value::as_str).unwrap_or("")
    }
}

pub struct Prometheus {
    dir: tempfile::TempDir,
    port: u16,
    child: Option<Child>,
    watchdog: Option<Child>,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` and waits until it is ready.
    pub fn start(targets: &[Target]) -> Prometheus {
        let binary = require("prometheus");
        let dir = tempfile::tempdir().expect("a directory for Prometheus");
        let config = dir.path().join("prometheus.yml");
        std::fs::write(&config, scrape_config(targets)).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--log.level=warn")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start prometheus: {e}; {INSTALL_HINT}"));
        // If this process dies without dropping the server, the watchdog's
        // stdin closes and it stops the server.
        let watchdog = crate::watchdog(
            &format!("cat >/dev/null; kill {} 2>/dev/null", child.id()),
            "prometheus",
        );
        let mut prometheus = Prometheus {
            dir,
            port,
            child: Some(child),
            watchdog: Some(watchdog),
        };
        prometheus.wait_ready();
        prometheus
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Some((200, _)) = get(self.port, "/-/ready") {
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!("prometheus exited ({status}): {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("prometheus was not ready within 60 s: {}", self.log());
    }

    /// What the server logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// The instant query `promql`'s series, from its HTTP API
    /// (`/api/v1/query`); panics on an error answer.
    pub fn query(&self, promql: &str) -> Vec<Sample> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let (status, body) = get(self.port, &path)
            .unwrap_or_else(|| panic!("prometheus did not answer {promql}: {}", self.log()));
        let answer: Value = serde_json::from_str(&body).unwrap_or_else(|e| {
            panic!("prometheus answered {promql} with {status}, not JSON ({e}): {body}")
        });
        assert_eq!(answer["status"], "success", "{promql}: {answer}");
        let result = &answer["data"]["result"];
        match answer["data"]["resultType"].as_str() {
            Some("vector") => result
                .as_array()
                .expect("a vector's result")
                .iter()
                .map(|series| Sample {
                    labels: series["metric"].as_object().cloned().unwrap_or_default(),
                    value: number(&series["value"][1]),
                })
                .collect(),
            Some("scalar") => vec![Sample {
                labels: Default::default(),
                value: number(&result[1]),
            }],
            other => panic!("{promql}: an answer of type {other:?}: {answer}"),
        }
    }

    /// The targets' scrape health (`up`), by job, in the jobs' order.
    pub fn targets_up(&self) -> Vec<(String, f64)> {
        let mut up: Vec<(String, f64)> = self
            .query("up")
            .into_iter()
            .map(|s| (s.label("job").to_string(), s.value))
            .collect();
        up.sort_by(|a, b| a.0.cmp(&b.0));
        up
    }

    /// Queries `promql` until `check` accepts its series, or `timeout`
    /// passes (then panics with the last answer and what is scraped).
    pub fn wait_for(
        &self,
        promql: &str,
        timeout: Duration,
        check: impl Fn(&[Sample]) -> bool,
    ) -> Vec<Sample> {
        let deadline = Instant::now() + timeout;
        loop {
            let samples = self.query(promql);
            if check(&samples) {
                return samples;
            }
            if Instant::now() > deadline {
                panic!(
                    "`{promql}` did not come true within {timeout:?}: it answers {samples:?}; \
                     targets up: {:?}; log: {}",
                    self.targets_up(),
                    self.log()
                );
            }
            std::thread::sleep(SCRAPE_INTERVAL / 2);
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.take() {
            drop(watchdog.stdin.take());
            let _ = watchdog.wait();
        }
    }
}

/// The configuration: every target scraped each [`SCRAPE_INTERVAL`].
fn scrape_config(targets: &[Target]) -> String {
    let interval = format!("{}ms", SCRAPE_INTERVAL.as_millis());
    let mut yaml = format!(
        "global:\n  scrape_interval: {interval}\n  scrape_timeout: {interval}\n  \
         evaluation_interval: {interval}\nscrape_configs:\n"
    );
    for target in targets {
        yaml.push_str(&format!(
            "  - job_name: '{}'\n    static_configs:\n      - targets: ['{}']\n",
            target.job, target.address
        ));
        if let Some(token) = &target.token {
            yaml.push_str(&format!(
                "    authorization:\n      type: Bearer\n      credentials: '{token}'\n"
            ));
        }
    }
    yaml
}

/// `GET path` on 127.0.0.1:`port` over HTTP/1.0 (a whole body, never
/// chunked): its status and body, if it answers.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n"
    )
    .ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.get(9..12)?.parse().ok()?;
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body)?;
    Some((status, body.to_string()))
}

/// A query's value: Prometheus sends numbers as strings.
fn number(value: &Value) -> f64 {
    value
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("not a sample value: {value}"))
}

fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The path of `tool` on `PATH`; panics naming how to install it.
fn require(tool: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin"), PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| panic!("`{tool}` is not installed; {INSTALL_HINT}"))
}
