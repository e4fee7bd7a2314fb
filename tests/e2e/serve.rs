//! `host serve` through the real binary, over HTTP on 127.0.0.1: every API
//! route on SQLite and on Postgres (a run started through the API, followed
//! on the runs list's event stream from before it started, waiting at its
//! approval node, refused answers that change nothing, answered, its own
//! event stream to its end; checkpoints, states, diffs, artifacts of a
//! research run that `host run` wrote into the same database; cancels; bad
//! input of each kind), the token rules, and the pages.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost_tests::cli::{KilledOnDrop, host_command, json as out_json, stderr};
use skillhost_tests::{free_port, repo_root};

fn approval() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/engine/approval.toml")
        .display()
        .to_string()
}

/// A `host serve` process, killed when dropped.
struct Server {
    _process: KilledOnDrop,
    base: String,
    client: reqwest::blocking::Client,
}

impl Server {
    /// Starts `host serve ARGS` on a free loopback port with the test
    /// directory's database (or `db`), and waits until it answers.
    fn start(dir: &Path, db: Option<&str>, args: &[&str]) -> Server {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let mut all = vec!["serve", "--addr", &addr];
        all.extend_from_slice(args);
        if let Some(db) = db {
            all.extend(["--database", db]);
        }
        let child = host_command(dir, &all, None)
            .current_dir(repo_root())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start host serve");
        let server = Server {
            _process: KilledOnDrop::new(child),
            base: format!("http://{addr}"),
            client: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while server
            .client
            .get(server.url("/api/openapi.json"))
            .send()
            .is_err()
        {
            assert!(Instant::now() < deadline, "host serve did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// GET, the status and the body as JSON.
    fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(self.url(path)).send().unwrap();
        let status = response.status().as_u16();
        let text = response.text().unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// POST of raw bytes as JSON, with an optional bearer token.
    fn post_raw(&self, path: &str, body: Vec<u8>, token: Option<&str>) -> (u16, Value) {
        let mut request = self
            .client
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        let text = response.text().unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.post_raw(path, body.to_string().into_bytes(), None)
    }

    /// Opens an event stream; its events (name, data) arrive on the
    /// receiver, read on a thread of their own.
    fn events(&self, path: &str) -> mpsc::Receiver<(String, Value)> {
        let client = reqwest::blocking::Client::builder()
            .timeout(None)
            .build()
            .unwrap();
        let response = client.get(self.url(path)).send().unwrap();
        assert_eq!(response.status().as_u16(), 200, "GET {path}");
        assert!(
            response.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut name = String::new();
            for line in BufReader::new(response).lines() {
                let Ok(line) = line else { return };
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(data) = line.strip_prefix("data: ") {
                    let data = serde_json::from_str(data).unwrap_or(Value::Null);
                    if tx.send((std::mem::take(&mut name), data)).is_err() {
                        return;
                    }
                }
            }
        });
        rx
    }
}

/// The first event on `rx` that `want` accepts, within a minute.
fn wait_for(
    rx: &mpsc::Receiver<(String, Value)>,
    what: &str,
    want: impl Fn(&str, &Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((name, data)) if want(&name, &data) => return data,
            Ok(_) => {}
            Err(e) => panic!("no event {what}: {e}"),
        }
    }
}

/// Waits until GET `path` answers a JSON value that `done` accepts.
fn poll(server: &Server, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, body) = server.get(path);
        if status == 200 && done(&body) {
            return body;
        }
        assert!(Instant::now() < deadline, "GET {path}: {status} {body}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn error_of(reply: &(u16, Value)) -> &str {
    reply.1["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {reply:?}"))
}

/// Every route against one database (None: the test directory's SQLite
/// file; else a Postgres URL).
fn every_route(db: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let approval = approval();
    let server = Server::start(
        dir.path(),
        db,
        &["--scenarios", &approval, "examples/research"],
    );

    // The OpenAPI document, and the scenarios with their input schema.
    let (status, doc) = server.get("/api/openapi.json");
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert!(doc["paths"]["/api/runs/{id}/answer"]["post"].is_object());
    let (_, scenarios) = server.get("/api/scenarios");
    let names: Vec<&str> = scenarios["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["approval", "research"]);
    assert_eq!(
        scenarios["scenarios"][0]["input_schema"]["properties"]["action"]["type"],
        "string"
    );

    // Bad starts write nothing.
    let reply = server.post(
        "/api/runs",
        &json!({"scenario": "approval", "input": {"action": 5}}),
    );
    assert_eq!(reply.0, 422, "{reply:?}");
    assert!(error_of(&reply).contains("action"), "{reply:?}");
    let reply = server.post("/api/runs", &json!({"scenario": "nope"}));
    assert_eq!(reply.0, 422);
    assert!(error_of(&reply).contains("approval, research"), "{reply:?}");
    let reply = server.post_raw("/api/runs", b"{not json".to_vec(), None);
    assert_eq!(reply.0, 400);
    assert!(error_of(&reply).contains("not valid JSON"), "{reply:?}");
    let reply = server.post("/api/runs", &json!(["approval"]));
    assert_eq!(reply.0, 400);
    let reply = server.post_raw("/api/runs", vec![b' '; 2 * 1024 * 1024], None);
    assert_eq!(reply.0, 413, "{reply:?}");
    assert!(error_of(&reply).contains("larger than"), "{reply:?}");
    // The rest of that body was never read: the server says the connection
    // is done, so no client sends its next request into it.
    let response = server
        .client
        .post(server.url("/api/runs"))
        .header("content-type", "application/json")
        .body(vec![b' '; 2 * 1024 * 1024])
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 413);
    assert_eq!(
        response.headers().get("connection").map(|v| v.as_bytes()),
        Some(&b"close"[..])
    );
    drop(response);
    assert_eq!(server.get("/api/runs").1["runs"], json!([]));

    // A run started after the list's stream connected shows on it, and
    // runs to its approval node.
    let list_events = server.events("/api/events");
    wait_for(&list_events, "ready", |name, _| name == "ready");
    let (status, started) = server.post(
        "/api/runs",
        &json!({"scenario": "approval", "input": {"action": "ship"}}),
    );
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    wait_for(&list_events, "of the new run waiting", |name, data| {
        name == "run" && data["id"] == id.as_str() && data["status"] == "waiting"
    });
    let (status, detail) = server.get(&format!("/api/runs/{id}"));
    assert_eq!(status, 200);
    assert_eq!(detail["run"]["status"], "waiting");
    assert_eq!(detail["waiting"]["node"], "approve");
    assert_eq!(detail["waiting"]["prompt"], "Run ship (8 bytes)?");
    assert_eq!(detail["steps"][0]["node_id"], "prepare");

    // Answers that do not fit are refused, and the run still waits.
    let answer = format!("/api/runs/{id}/answer");
    let reply = server.post(&answer, &json!({"answer": {"approved": "yes"}}));
    assert_eq!(reply.0, 422, "{reply:?}");
    assert!(error_of(&reply).contains("approved"), "{reply:?}");
    let reply = server.post(&answer, &json!({"approved": true}));
    assert_eq!(reply.0, 400);
    let reply = server.post_raw(&answer, b"{\"answer\":".to_vec(), None);
    assert_eq!(reply.0, 400);
    assert_eq!(
        server.get(&format!("/api/runs/{id}")).1["run"]["status"],
        "waiting"
    );

    // The run's own stream, connected while it waits, follows the answer
    // to its end.
    let run_events = server.events(&format!("/api/runs/{id}/events"));
    let (status, answered) = server.post(
        &answer,
        &json!({"answer": {"approved": true}, "by": "tester"}),
    );
    assert_eq!(status, 200, "{answered}");
    assert_eq!(answered["by"], "tester");
    wait_for(&run_events, "step of `execute`", |name, data| {
        name == "step" && data["node_id"] == "execute"
    });
    let end = wait_for(&run_events, "end", |name, _| name == "end");
    assert_eq!(end["status"], "completed");
    let reply = server.post(&answer, &json!({"answer": {"approved": true}}));
    assert_eq!(reply.0, 409, "{reply:?}");

    // Checkpoints, the state at one, a diff.
    let (_, checkpoints) = server.get(&format!("/api/runs/{id}/checkpoints"));
    let list = checkpoints["checkpoints"].as_array().unwrap();
    assert_eq!(list[0]["seq"], 0);
    assert_eq!(list[1]["node_id"], "prepare");
    assert_eq!(list[1]["changes"][0]["field"], "length");
    let (status, state) = server.get(&format!("/api/runs/{id}/checkpoints/1/state"));
    assert_eq!(status, 200);
    assert_eq!(state["state"]["length"], 8);
    let (_, diff) = server.get(&format!("/api/runs/{id}/diff?from=0&to=1"));
    assert_eq!(diff["fields"]["length"]["after"], 8);
    let reply = server.get(&format!("/api/runs/{id}/checkpoints/99/state"));
    assert_eq!(reply.0, 404);
    assert!(error_of(&reply).contains("no checkpoint 99"), "{reply:?}");
    assert_eq!(
        server.get(&format!("/api/runs/{id}/checkpoints/x/state")).0,
        400
    );
    assert_eq!(server.get(&format!("/api/runs/{id}/diff?from=0")).0, 400);

    // Cancel: a waiting run at once; a finished one is a conflict.
    let (_, second) = server.post("/api/runs", &json!({"scenario": "approval"}));
    let second = second["id"].as_str().unwrap().to_string();
    poll(&server, &format!("/api/runs/{second}"), |d| {
        d["run"]["status"] == "waiting"
    });
    let (status, cancelled) = server.post(&format!("/api/runs/{second}/cancel"), &json!({}));
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["result"], "cancelled");
    let reply = server.post(&format!("/api/runs/{second}/cancel"), &json!({}));
    assert_eq!(reply.0, 409, "{reply:?}");

    // The list: filters and pages.
    let (_, waiting) = server.get("/api/runs?status=waiting");
    assert_eq!(waiting["runs"], json!([]));
    let (_, page) = server.get("/api/runs?limit=1");
    assert_eq!(page["runs"][0]["id"], second.as_str());
    let cursor = page["next_cursor"].as_str().unwrap().to_string();
    let (_, next) = server.get(&format!("/api/runs?limit=1&cursor={cursor}"));
    assert_eq!(next["runs"][0]["id"], id.as_str());
    assert_eq!(next["next_cursor"], Value::Null);
    assert_eq!(
        server.get("/api/runs?scenario=research").1["runs"],
        json!([])
    );
    assert_eq!(server.get("/api/runs?status=done").0, 400);

    // A research run by `host run` on the same database: its report.
    let mut args = vec![
        "run",
        "research",
        "--input",
        r#"{"query": "retrieval augmented generation"}"#,
    ];
    if let Some(db) = db {
        args.extend(["--database", db]);
    }
    let out = host_command(dir.path(), &args, None)
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let (_, research) = server.get("/api/runs?scenario=research");
    let rid = research["runs"][0]["id"].as_str().unwrap().to_string();
    let (_, detail) = server.get(&format!("/api/runs/{rid}"));
    let artifact = detail["artifacts"][0]["name"].as_str().unwrap().to_string();
    let response = server
        .client
        .get(server.url(&format!("/api/runs/{rid}/artifacts/{artifact}")))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/markdown"),
        "{:?}",
        response.headers()
    );
    assert!(response.text().unwrap().contains("retrieval"));
    let reply = server.get(&format!("/api/runs/{rid}/artifacts/nope.md"));
    assert_eq!(reply.0, 404);
    assert!(error_of(&reply).contains(&artifact), "{reply:?}");

    // The run page: the graph with every node, the report rendered.
    let page = server
        .client
        .get(server.url(&format!("/runs/{rid}")))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(
        page.contains("<svg xmlns=\"http://www.w3.org/2000/svg\""),
        "{page}"
    );
    assert!(page.contains("data-node=\"claim_synthesis\""), "{page}");
    assert!(page.contains("<h1>") || page.contains("<h2>"), "{page}");
    assert!(!page.contains("http://") || !page.contains("<script src=\"http"));

    // Unknown runs and routes.
    for path in [
        "/api/runs/nope",
        "/api/runs/nope/checkpoints",
        "/api/runs/nope/checkpoints/0/state",
        "/api/runs/nope/diff?from=0&to=0",
        "/api/runs/nope/artifacts/report.md",
        "/api/runs/nope/events",
        "/api/nothing",
    ] {
        let reply = server.get(path);
        assert_eq!(reply.0, 404, "GET {path}: {reply:?}");
        assert!(reply.1["error"].is_string(), "GET {path}: {reply:?}");
    }
    for path in ["/api/runs/nope/answer", "/api/runs/nope/cancel"] {
        let reply = server.post(path, &json!({"answer": {"approved": true}}));
        assert_eq!(reply.0, 404, "POST {path}: {reply:?}");
        assert!(error_of(&reply).contains("nope"), "{reply:?}");
    }
    // `host runs list` sees the same runs the API does.
    let mut list = vec!["runs", "list", "--json"];
    if let Some(db) = db {
        list.extend(["--database", db]);
    }
    let listed = out_json(&host_command(dir.path(), &list, None).output().unwrap());
    assert_eq!(listed.as_array().unwrap().len(), 3);
}

#[test]
fn every_route_on_sqlite() {
    every_route(None);
}

#[tokio::test(flavor = "multi_thread")]
async fn every_route_on_postgres() {
    let db = skillhost_tests::pg::fresh_database().await;
    tokio::task::spawn_blocking(move || every_route(Some(&db)))
        .await
        .unwrap();
}

#[test]
fn a_non_loopback_address_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("0.0.0.0:{}", free_port());
    let out = host_command(dir.path(), &["serve", "--addr", &addr], None)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is not a loopback address") && stderr(&out).contains("--token"),
        "{}",
        stderr(&out)
    );
    let empty = dir.path().join("token");
    std::fs::write(&empty, "\n").unwrap();
    let out = host_command(
        dir.path(),
        &[
            "serve",
            "--addr",
            &addr,
            "--token-file",
            empty.to_str().unwrap(),
        ],
        None,
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("token is empty"), "{}", stderr(&out));
}

#[test]
fn with_a_token_every_change_needs_it() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let approval = approval();
    let server = Server::start(
        dir.path(),
        None,
        &[
            "--token-file",
            token_file.to_str().unwrap(),
            "--scenarios",
            &approval,
        ],
    );
    let start = json!({"scenario": "approval"}).to_string().into_bytes();
    let reply = server.post_raw("/api/runs", start.clone(), None);
    assert_eq!(reply.0, 401, "{reply:?}");
    assert!(error_of(&reply).contains("Bearer"), "{reply:?}");
    let reply = server.post_raw("/api/runs", start.clone(), Some("guess"));
    assert_eq!(reply.0, 401, "{reply:?}");
    assert!(!error_of(&reply).contains("s3cret"), "{reply:?}");
    // Nothing was written; reading needs no token.
    assert_eq!(server.get("/api/runs").1["runs"], json!([]));
    let reply = server.post_raw("/api/runs", start, Some("s3cret-token"));
    assert_eq!(reply.0, 201, "{reply:?}");
    let id = reply.1["id"].as_str().unwrap().to_string();
    let reply = server.post_raw(&format!("/api/runs/{id}/cancel"), b"{}".to_vec(), None);
    assert_eq!(reply.0, 401);
}

/// The run inspector in a real Chromium, driven through chromedriver's
/// WebDriver protocol (plain HTTP/JSON): the research run's page shows
/// every node it ran as completed and the report rendered; a waiting run
/// is answered from its page and completes. Screenshots go to
/// `target/serve-screenshots/`. Without Chromium the test says so and
/// passes, except under `CI=true`, where it fails.
mod browser {
    use super::*;
    use base64::Engine as _;

    const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

    struct Driver {
        child: Child,
        base: String,
        session: String,
        client: reqwest::blocking::Client,
    }

    impl Driver {
        /// chromedriver on a free port, with a headless Chromium session;
        /// None when either is not installed (outside CI).
        fn start() -> Option<Driver> {
            let found = |name: &str| {
                std::env::var_os("PATH").is_some_and(|path| {
                    std::env::split_paths(&path).any(|dir| dir.join(name).is_file())
                })
            };
            if !found("chromedriver") || !found("chromium") {
                let message = "Chromium and chromedriver are not installed: `apt-get install \
                               chromium chromium-driver` (.ci/run installs them)";
                assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
                eprintln!("skipping the browser test: {message}");
                return None;
            }
            let port = free_port();
            let child = std::process::Command::new("chromedriver")
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start chromedriver");
            let client = reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .unwrap();
            let base = format!("http://127.0.0.1:{port}");
            let deadline = Instant::now() + Duration::from_secs(30);
            while client.get(format!("{base}/status")).send().is_err() {
                assert!(Instant::now() < deadline, "chromedriver did not start");
                std::thread::sleep(Duration::from_millis(100));
            }
            let mut driver = Driver {
                child,
                base,
                session: String::new(),
                client,
            };
            let created = driver.call(
                "POST",
                "/session",
                json!({"capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": "/usr/bin/chromium",
                        "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                                 "--disable-dev-shm-usage", "--window-size=1400,1100"],
                    },
                }}}),
            );
            driver.session = created["sessionId"].as_str().unwrap().to_string();
            Some(driver)
        }

        fn call(&self, method: &str, path: &str, body: Value) -> Value {
            let url = if self.session.is_empty() {
                format!("{}{path}", self.base)
            } else {
                format!("{}/session/{}{path}", self.base, self.session)
            };
            let request = match method {
                "GET" => self.client.get(url),
                "DELETE" => self.client.delete(url),
                _ => self
                    .client
                    .post(url)
                    .header("content-type", "application/json")
                    .body(body.to_string()),
            };
            let response = request.send().expect("chromedriver answers");
            let ok = response.status().is_success();
            let value: Value = serde_json::from_str(&response.text().unwrap()).unwrap();
            assert!(ok, "WebDriver {method} {path}: {value}");
            value.get("value").cloned().unwrap_or(value)
        }

        fn open(&self, url: &str) {
            self.call("POST", "/url", json!({ "url": url }));
        }

        fn script(&self, script: &str) -> Value {
            self.call(
                "POST",
                "/execute/sync",
                json!({"script": script, "args": []}),
            )
        }

        /// Waits until `script` returns true.
        fn until(&self, what: &str, script: &str) {
            let deadline = Instant::now() + Duration::from_secs(60);
            while self.script(script) != json!(true) {
                assert!(Instant::now() < deadline, "the page never showed {what}");
                std::thread::sleep(Duration::from_millis(200));
            }
        }

        fn click(&self, css: &str) {
            let found = self.call(
                "POST",
                "/element",
                json!({"using": "css selector", "value": css}),
            );
            let id = found[ELEMENT]
                .as_str()
                .unwrap_or_else(|| panic!("no element {css}: {found}"))
                .to_string();
            self.call("POST", &format!("/element/{id}/click"), json!({}));
        }

        fn screenshot(&self, name: &str) {
            let png = self.call("GET", "/screenshot", Value::Null);
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(png.as_str().unwrap())
                .unwrap();
            let dir = repo_root().join("target/serve-screenshots");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{name}.png")), bytes).unwrap();
        }
    }

    impl Drop for Driver {
        fn drop(&mut self) {
            if !self.session.is_empty() {
                let _ = self
                    .client
                    .delete(format!("{}/session/{}", self.base, self.session))
                    .send();
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    #[test]
    fn the_run_inspector_in_chromium() {
        let Some(driver) = Driver::start() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let approval = approval();
        let server = Server::start(dir.path(), None, &["--scenarios", &approval]);
        let out = host_command(
            dir.path(),
            &[
                "run",
                "research",
                "--input",
                r#"{"query": "retrieval augmented generation"}"#,
            ],
            None,
        )
        .current_dir(repo_root())
        .output()
        .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let (_, runs) = server.get("/api/runs?scenario=research");
        let rid = runs["runs"][0]["id"].as_str().unwrap().to_string();

        // The runs list shows it.
        driver.open(&server.url("/"));
        driver.until(
            "the research run in the list",
            &format!("return !!document.querySelector('tr[data-run=\"{rid}\"]')"),
        );
        driver.screenshot("runs-list");

        // Its page: every node it ran completed, the rest pending; the
        // report rendered.
        driver.open(&server.url(&format!("/runs/{rid}")));
        driver.until(
            "the run loaded",
            "return document.body.dataset.loaded === 'completed'",
        );
        let statuses = driver.script(
            "return Object.fromEntries([...document.querySelectorAll('svg.graph .node')]\
             .map(n => [n.dataset.node, n.dataset.status]))",
        );
        for node in [
            "paper_discovery",
            "discovery_validation",
            "paper_summarize",
            "paper_compare",
            "claim_synthesis",
            "report_writer",
            "done",
        ] {
            assert_eq!(statuses[node], "completed", "{node}: {statuses}");
        }
        assert_eq!(statuses["failure_handler"], "pending", "{statuses}");
        let report = driver.script(
            "const r = document.querySelector('.report'); \
             return r ? [r.querySelectorAll('h1,h2').length, r.innerText] : null",
        );
        assert!(report[0].as_u64().unwrap() >= 1, "{report}");
        assert!(report[1].as_str().unwrap().contains("etrieval"), "{report}");
        let cited = driver.script("return document.querySelectorAll('#citations tbody tr').length");
        assert!(cited.as_u64().unwrap() >= 1, "no citation rows");
        driver.screenshot("research-run");

        // A run started from the form the list page generates from the
        // scenario's [input], then answered from its page.
        driver.open(&server.url("/"));
        driver.until(
            "the start form of `approval`",
            "return !!document.querySelector('form[data-scenario=\"approval\"] input[name=\"action\"]')",
        );
        driver.script(
            "document.querySelector('form[data-scenario=\"approval\"] input[name=\"action\"]').value = 'ship'",
        );
        driver.click("form[data-scenario=\"approval\"] button");
        driver.until(
            "the new run's page",
            "return location.pathname.startsWith('/runs/')",
        );
        let path = driver.script("return location.pathname");
        let id = path
            .as_str()
            .unwrap()
            .trim_start_matches("/runs/")
            .to_string();
        let detail = poll(&server, &format!("/api/runs/{id}"), |d| {
            d["run"]["status"] == "waiting"
        });
        assert_eq!(detail["run"]["input"]["action"], "ship");
        driver.open(&server.url(&format!("/runs/{id}")));
        driver.until(
            "the answer form",
            "return !document.querySelector('#waiting').hidden && \
             !!document.querySelector('#answer button')",
        );
        driver.screenshot("approval-waiting");
        driver.click("#answer button");
        driver.until(
            "the answered run completed",
            "return document.body.dataset.loaded === 'completed'",
        );
        let (_, detail) = server.get(&format!("/api/runs/{id}"));
        assert_eq!(detail["run"]["status"], "completed");
        assert_eq!(detail["waits"][0]["answer"]["approved"], true);
        assert_eq!(detail["waits"][0]["answered_by"], "api");
        driver.screenshot("approval-answered");
    }
}
