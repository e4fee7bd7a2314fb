//! `host mcp` driven by the official MCP Python SDK (`mcp` on PyPI, pinned
//! in .ci/run), a client nobody here wrote, over stdio and over streamable
//! HTTP: it lists the tools, runs the research scenario (a real
//! checkpointed run, whose report it reads as a resource), calls skills,
//! and sends arguments that do not fit. `mcp/client.py` does the talking
//! and prints what the server answered; the checks are here. MCP tasks are
//! driven by the official TypeScript SDK (`mcp/tasks.mjs`, pinned in
//! `mcp/package-lock.json`), the SDK that has client calls for them. Raw
//! HTTP requests check what no SDK sends: other names and other sites'
//! origins refused, bodies that are not JSON or not JSON-RPC, the token's
//! scheme in any case.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use skillhost_tests::cli::{KilledOnDrop, host_bin, host_command, sqlite_url, stderr};
use skillhost_tests::repo_root;

mod conformance;
mod scale_out;

/// What `host mcp` offers in these tests.
fn offer() -> Vec<String> {
    let dist = repo_root().join("skills/dist");
    vec![
        "mcp".into(),
        "--scenario".into(),
        "examples/research/scenario.toml".into(),
        "--scenario".into(),
        "tests/e2e/engine/approval.toml".into(),
        "--skill".into(),
        dist.join("echo.wasm").display().to_string(),
        "--skill".into(),
        dist.join("fail.wasm").display().to_string(),
    ]
}

/// Runs the Python client with `config`, returning what it printed.
fn client(dir: &Path, config: Value) -> Value {
    python_client("client.py", dir, config)
}

/// Runs `python3 mcp/SCRIPT CONFIG` (an official Python SDK client) with
/// `config` written into `dir`, returning the JSON object it printed.
pub(crate) fn python_client(script: &str, dir: &Path, config: Value) -> Value {
    let file = dir.join(format!("{script}.json"));
    std::fs::write(&file, config.to_string()).unwrap();
    let out = Command::new("python3")
        .arg(repo_root().join("tests/e2e/mcp").join(script))
        .arg(&file)
        .output()
        .expect("python3 with the `mcp` package (see .ci/run)");
    assert!(
        out.status.success(),
        "the MCP client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// What both transports must show.
fn check(out: &Value, dir: &Path) {
    assert_eq!(out["server"], "skillhost");
    let tools = out["tools"].as_object().unwrap();
    let mut names: Vec<&str> = tools.keys().map(String::as_str).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "approval",
            "echo",
            "fail",
            "research",
            "run_answer",
            "run_cancel",
            "run_status"
        ]
    );

    // The scenario: [input] as the input schema, [summary] in the output
    // schema, hints from its grants (fs only: read-only, idempotent, closed).
    let research = &tools["research"];
    assert_eq!(research["input_schema"]["required"], json!(["query"]));
    assert_eq!(
        research["input_schema"]["properties"]["query"]["type"],
        "string"
    );
    assert_eq!(
        research["output_schema"]["required"],
        json!(["run_id", "status"])
    );
    assert!(research["output_schema"]["properties"]["summary"]["properties"].is_object());
    assert_eq!(research["annotations"]["read_only_hint"], true);
    assert_eq!(research["annotations"]["idempotent_hint"], true);
    assert_eq!(research["annotations"]["open_world_hint"], false);

    // A skill: its WIT's doc comments (world, then `run`) as its
    // description, its fields' as theirs (written into the component by
    // `host skill build`), its input and output as schemas.
    let echo = &tools["echo"];
    assert_eq!(
        echo["description"],
        "Repeats a message: the demo and benchmark skill.\n\n\
         Fails with `invalid-input` when the output would exceed 1 MiB."
    );
    assert_eq!(
        echo["input_schema"]["properties"]["message"]["description"],
        "The text to repeat."
    );
    // A `run` without docs: the world's alone, and the enum's cases'.
    assert_eq!(
        tools["fail"]["description"],
        "A test skill for the host's error handling: it does what `mode` says."
    );
    assert_eq!(
        echo["input_schema"]["properties"]["message"]["type"],
        "string"
    );
    assert_eq!(
        echo["input_schema"]["properties"]["repeat"]["type"],
        "integer"
    );
    assert_eq!(
        echo["output_schema"]["properties"]["length"]["type"],
        "integer"
    );

    // The research run: completed, checkpointed in the store the server
    // was given, its report readable as a resource.
    let run = &out["research"];
    assert_eq!(run["is_error"], false, "{}", run["text"]);
    let structured = &run["structured"];
    assert_eq!(structured["status"], "completed");
    let run_id = structured["run_id"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(run["text"].as_str().unwrap()).unwrap(),
        *structured
    );
    let artifact = &structured["artifacts"][0];
    let uri = artifact["uri"].as_str().unwrap();
    assert_eq!(
        uri,
        format!(
            "skillhost://runs/{run_id}/artifacts/{}",
            artifact["name"].as_str().unwrap()
        )
    );
    assert!(
        out["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r == uri)
    );
    let report = out["report"][0]["text"].as_str().unwrap();
    assert!(
        report.starts_with('#') && report.contains("retrieval"),
        "{report}"
    );
    assert_eq!(out["status"]["structured"]["status"], "completed");
    let shown = host_command(dir, &["runs", "show", run_id, "--json"], None)
        .output()
        .unwrap();
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["status"], "completed", "{shown}");

    // A run waiting at an approval node: its id and what it asks; an answer
    // that does not fit is refused and leaves it waiting; a good one
    // continues it to its end.
    let waiting = &out["approval"]["structured"];
    assert_eq!(waiting["status"], "waiting", "{}", out["approval"]);
    assert_eq!(waiting["waiting"]["node"], "approve");
    assert_eq!(waiting["waiting"]["prompt"], "Run deploy (12 bytes)?");
    assert_eq!(out["approval_bad_answer"]["is_error"], true);
    assert!(
        out["approval_bad_answer"]["text"]
            .as_str()
            .unwrap()
            .contains("approved"),
        "{}",
        out["approval_bad_answer"]
    );
    assert_eq!(
        out["approval_waiting_status"]["structured"]["status"],
        "waiting"
    );
    let answered = &out["approval_answered"];
    assert_eq!(answered["is_error"], false, "{answered}");
    assert_eq!(answered["structured"]["status"], "completed");
    assert_eq!(answered["structured"]["run_id"], waiting["run_id"]);
    assert_eq!(
        answered["structured"]["summary"]["outcome"],
        "executed deploy"
    );

    // A waiting run cancelled: at once, and its status says so.
    assert_eq!(
        out["cancel"]["structured"]["status"], "cancelled",
        "{}",
        out["cancel"]
    );
    assert_eq!(out["cancel"]["structured"]["was"], "waiting");
    assert_eq!(out["cancelled_status"]["is_error"], true);
    assert!(
        out["cancelled_status"]["text"]
            .as_str()
            .unwrap()
            .contains("is cancelled"),
        "{}",
        out["cancelled_status"]
    );

    // A failed run: isError naming the node it failed at and the run.
    let failed = &out["research_failed"];
    assert_eq!(failed["is_error"], true);
    let text = failed["text"].as_str().unwrap();
    assert!(
        text.contains("failed at node `discovery_validation`"),
        "{text}"
    );
    assert!(text.contains("\"run_id\""), "{text}");

    // Arguments that do not fit: an isError result naming the field.
    let bad = &out["research_bad"];
    assert_eq!(bad["is_error"], true);
    assert!(
        bad["text"]
            .as_str()
            .unwrap()
            .contains("invalid arguments for tool `research`"),
        "{bad}"
    );
    let echo_bad = &out["echo_bad"];
    assert_eq!(echo_bad["is_error"], true);
    assert!(
        echo_bad["text"].as_str().unwrap().contains("repeat"),
        "{echo_bad}"
    );

    // Skills: an answer, and an `err` as an isError result naming the code.
    assert_eq!(out["echo"]["is_error"], false);
    assert_eq!(out["echo"]["structured"]["message"], "hihi");
    let fail = &out["fail"];
    assert_eq!(fail["is_error"], true);
    assert!(
        fail["text"].as_str().unwrap().contains("requested-error"),
        "{fail}"
    );

    // Unknown things: a run (isError), a tool and a resource (protocol errors).
    assert_eq!(out["unknown_run"]["is_error"], true);
    assert!(
        out["unknown_tool"]
            .as_str()
            .unwrap()
            .contains("no_such_tool")
    );
    assert!(
        out["unknown_resource"]
            .as_str()
            .unwrap()
            .contains("no resource")
    );
}

/// How a client starts `host mcp` over stdio (the SDKs' server parameters),
/// with the environment [`host_command`] gives, so `host runs` reads the
/// same store.
fn stdio_server(dir: &Path) -> Value {
    json!({
        "command": host_bin(),
        "args": offer(),
        "env": {
            "SKILLHOST_CACHE_DIR": skillhost_tests::shared_component_cache(),
            "SKILLHOST_DATABASE_URL": sqlite_url(dir),
            "XDG_CONFIG_HOME": dir.join("xdg-config"),
            "SKILLHOST_REGISTRY_CACHE": dir.join("registry-cache"),
            "DOCKER_CONFIG": dir.join("docker"),
        },
        "cwd": repo_root(),
    })
}

#[test]
fn python_sdk_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = stdio_server(dir.path());
    config["transport"] = json!("stdio");
    let out = client(dir.path(), config);
    assert_eq!(out["transport"], "stdio");
    check(&out, dir.path());
}

/// A `host mcp --http 127.0.0.1:0` process, killed when dropped.
pub(crate) struct HttpServer {
    _process: KilledOnDrop,
    /// `http://127.0.0.1:PORT/mcp`, as the server printed it.
    pub(crate) url: String,
}

impl HttpServer {
    /// Starts `host ARGS --http 127.0.0.1:0` in the repository and waits
    /// for the address it prints.
    pub(crate) fn start(dir: &Path, args: &[String]) -> HttpServer {
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend(["--http", "127.0.0.1:0"]);
        let child = host_command(dir, &args, None)
            .current_dir(repo_root())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (process, url) = serving(child);
        HttpServer {
            _process: process,
            url,
        }
    }

    /// The server's process id.
    pub(crate) fn pid(&self) -> u32 {
        self._process.id()
    }
}

/// Waits until `host mcp --http`, spawned with its stderr piped, prints
/// where it serves; returns the process, killed when dropped, and that
/// `http://ADDR/mcp`. Its stderr is drained from then on, so the server
/// never blocks on a full pipe.
pub(crate) fn serving(mut child: std::process::Child) -> (KilledOnDrop, String) {
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    let mut line = String::new();
    while stderr.read_line(&mut line).unwrap_or(0) > 0 {
        if let Some(at) = line.trim().strip_prefix("MCP server at ") {
            let url = at.to_string();
            std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
            return (KilledOnDrop::new(child), url);
        }
        seen.push_str(&line);
        line.clear();
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("`host mcp --http` printed no address:\n{seen}");
}

#[test]
fn python_sdk_over_streamable_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = HttpServer::start(dir.path(), &offer());
    let out = client(dir.path(), json!({"transport": "http", "url": server.url}));
    drop(server);
    assert_eq!(out["transport"], "http");
    check(&out, dir.path());
}

/// An echo-only offer behind a token.
fn token_offer(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = vec![
        "mcp".into(),
        "--skill".into(),
        repo_root()
            .join("skills/dist/echo.wasm")
            .display()
            .to_string(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

#[test]
fn a_token_guards_every_http_request() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let server = HttpServer::start(
        dir.path(),
        &token_offer(&["--token-file", token_file.to_str().unwrap()]),
    );

    // The official SDK with the header: a whole session goes through.
    let with = client(
        dir.path(),
        json!({
            "transport": "http",
            "url": server.url,
            "headers": {"Authorization": "Bearer s3cret-token"},
            "exercise": "brief",
        }),
    );
    assert_eq!(with["server"], "skillhost", "{with}");
    assert_eq!(
        with["tools"],
        json!(["echo", "run_answer", "run_cancel", "run_status"])
    );
    assert_eq!(with["echo"]["structured"]["message"], "hihi");

    // Without it, or with another: refused before any session exists.
    for headers in [json!({}), json!({"Authorization": "Bearer s3cret-guess"})] {
        let without = client(
            dir.path(),
            json!({
                "transport": "http",
                "url": server.url,
                "headers": headers,
                "exercise": "brief",
            }),
        );
        let refused = without["refused"]
            .as_str()
            .unwrap_or_else(|| panic!("the SDK got through with headers {headers}: {without}"));
        // The refusal is a JSON-RPC error, so the SDK shows its message.
        assert!(refused.contains("Authorization: Bearer"), "{refused}");
    }

    // Raw requests: every method needs the token; a refusal says why (a
    // JSON-RPC error) with a Bearer challenge, and says nothing of the token.
    let http = reqwest::blocking::Client::new();
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    });
    let post = |authorization: Option<&str>| {
        let mut request = http
            .post(&server.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(initialize.to_string());
        if let Some(value) = authorization {
            request = request.header("authorization", value);
        }
        request.send().unwrap()
    };
    for authorization in [None, Some("Bearer wrong"), Some("Basic czNjcmV0LXRva2Vu")] {
        let refused = post(authorization);
        assert_eq!(refused.status().as_u16(), 401, "{authorization:?}");
        assert_eq!(refused.headers()["www-authenticate"], "Bearer");
        let body: Value = serde_json::from_str(&refused.text().unwrap()).unwrap();
        assert_eq!(body["jsonrpc"], "2.0");
        let error = body["error"]["message"].as_str().unwrap();
        assert!(error.contains("Authorization: Bearer"), "{error}");
        assert!(!error.contains("s3cret"), "{error}");
    }
    let get = http.get(&server.url).send().unwrap();
    assert_eq!(get.status().as_u16(), 401);
    // The scheme is case-insensitive (RFC 9110).
    for authorization in [
        "Bearer s3cret-token",
        "bearer s3cret-token",
        "BEARER s3cret-token",
    ] {
        let accepted = post(Some(authorization));
        assert_eq!(accepted.status().as_u16(), 200, "{authorization}");
        assert!(accepted.headers().contains_key("mcp-session-id"));
    }
}

#[test]
fn http_refuses_other_names_other_sites_and_what_is_not_json_rpc() {
    let dir = tempfile::tempdir().unwrap();
    let server = HttpServer::start(dir.path(), &offer());
    let own = server.url.trim_end_matches("/mcp").to_string();
    let port = own.rsplit(':').next().unwrap().to_string();
    let http = reqwest::blocking::Client::new();
    let send = |headers: &[(&str, &str)], body: &str| {
        let mut request = http
            .post(&server.url)
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        if !headers.iter().any(|(name, _)| *name == "content-type") {
            request = request.header("content-type", "application/json");
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = request.send().unwrap();
        let status = response.status().as_u16();
        let session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_string());
        let text = response.text().unwrap();
        (status, session, text)
    };
    let rpc_error = |text: &str| -> Value {
        let body: Value =
            serde_json::from_str(text).unwrap_or_else(|_| panic!("not JSON-RPC: {text}"));
        assert_eq!(body["jsonrpc"], "2.0", "{text}");
        body["error"].clone()
    };
    let initialize = json!({
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    })
    .to_string();

    // Another site's page, an opaque one, a name of its own (DNS
    // rebinding): refused, as the MCP specification requires, with a
    // JSON-RPC error.
    let bad_origin = format!("http://localhost:{port}.evil.example");
    for headers in [
        [("origin", "http://evil.example")],
        [("origin", "null")],
        [("origin", "http://127.0.0.1:1")],
        [("origin", bad_origin.as_str())],
        [("host", "evil.example")],
        [("host", "localhost:1")],
    ] {
        let (status, _, text) = send(&headers, &initialize);
        assert_eq!(status, 403, "{headers:?}: {text}");
        let error = rpc_error(&text);
        assert!(
            error["message"].as_str().unwrap().contains(headers[0].1),
            "{headers:?}: {text}"
        );
    }
    let refused = http
        .get(&server.url)
        .header("origin", "http://evil.example")
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 403);

    // Its own pages' origin, and none (a client that is not a browser).
    let (status, _, text) = send(&[("origin", &own)], &initialize);
    assert_eq!(status, 200, "{text}");
    let (status, session, text) = send(&[], &initialize);
    assert_eq!(status, 200, "{text}");
    let session = session.expect("a session id");
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let (status, _, text) = send(&[("mcp-session-id", &session)], &initialized);
    assert!(status == 202 || status == 200, "{status}: {text}");

    // A task request is answered in front of the SDK: behind the same
    // checks.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/list", "params": {}}).to_string();
    for headers in [
        [
            ("mcp-session-id", session.as_str()),
            ("host", "evil.example"),
        ],
        [
            ("mcp-session-id", session.as_str()),
            ("origin", "http://evil.example"),
        ],
    ] {
        let (status, _, text) = send(&headers, &list);
        assert_eq!(status, 403, "{headers:?}: {text}");
    }
    let (status, _, text) = send(&[("mcp-session-id", &session)], &list);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("\"tasks\""), "{text}");

    // A body sent as anything but JSON: 415, as a JSON-RPC error.
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let (status, _, text) = send(&[("content-type", content_type)], &initialize);
        assert_eq!(status, 415, "{content_type}: {text}");
        assert!(
            rpc_error(&text)["message"]
                .as_str()
                .unwrap()
                .contains("application/json"),
            "{text}"
        );
    }
    // A truncated body is a parse error; JSON that is no JSON-RPC message
    // an invalid request.
    let truncated = &initialize[..initialize.len() / 2];
    for body in [
        truncated,
        "",
        "{\"jsonrpc\": \"2.0\", \"id\": 3, \"method\"",
    ] {
        let (status, _, text) = send(&[("mcp-session-id", &session)], body);
        assert_eq!(status, 400, "{body}: {text}");
        let error = rpc_error(&text);
        assert_eq!(error["code"], -32700, "{body}: {text}");
    }
    for body in [r#"{"hello": 1}"#, "[1, 2]", "42"] {
        let (status, _, text) = send(&[("mcp-session-id", &session)], body);
        assert_eq!(status, 400, "{body}: {text}");
        assert_eq!(rpc_error(&text)["code"], -32600, "{body}: {text}");
    }
    // The session still works.
    let (status, _, text) = send(&[("mcp-session-id", &session)], &list);
    assert_eq!(status, 200, "{text}");
}

#[test]
fn allowed_hosts_are_for_http_and_must_be_names() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let args = token_offer(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        host_command(dir.path(), &args, None).output().unwrap()
    };
    let out = run(&["--allowed-host", "mcp.example.com"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--allowed-host is for --http"),
        "{}",
        stderr(&out)
    );
    let out = run(&["--http", "127.0.0.1:0", "--allowed-host", "a b"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--allowed-host `a b`"),
        "{}",
        stderr(&out)
    );
    // A name given is answered.
    let server = HttpServer::start(
        dir.path(),
        &token_offer(&["--allowed-host", "mcp.example.com"]),
    );
    let response = reqwest::blocking::Client::new()
        .post(&server.url)
        .header("host", "mcp.example.com")
        .header("origin", "https://mcp.example.com")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            json!({
                "jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "raw", "version": "0"}},
            })
            .to_string(),
        )
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
}

#[test]
fn a_non_loopback_http_address_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let args = token_offer(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        host_command(dir.path(), &args, None).output().unwrap()
    };
    let out = run(&["--http", "0.0.0.0:0"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--http 0.0.0.0:0 is not a loopback address")
            && stderr(&out).contains("--token"),
        "{}",
        stderr(&out)
    );
    let out = run(&["--http", "127.0.0.1:0", "--token", " "]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("token is empty"), "{}", stderr(&out));
    let out = run(&["--token", "s3cret"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("are for --http"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_through_mcp_live_in_postgres() {
    runs_through_mcp_live_in(skillhost_tests::pg::fresh_database().await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_through_mcp_live_in_postgres_through_pgbouncer() {
    runs_through_mcp_live_in(skillhost_tests::pgbouncer::fresh_database().await.url).await;
}

async fn runs_through_mcp_live_in(db: String) {
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let mut args = offer();
        args.extend(["--database".into(), db.clone()]);
        let server = HttpServer::start(dir.path(), &args);
        let out = client(
            dir.path(),
            json!({"transport": "http", "url": server.url, "exercise": "runs"}),
        );
        drop(server);

        let research = &out["research"]["structured"];
        assert_eq!(research["status"], "completed", "{}", out["research"]);
        let run_id = research["run_id"].as_str().unwrap();
        let status = &out["status"]["structured"];
        assert_eq!(status["status"], "completed", "{}", out["status"]);
        assert_eq!(status["run_id"], run_id);
        assert_eq!(out["approval"]["structured"]["status"], "waiting");
        assert_eq!(
            out["approval_status"]["structured"]["status"], "waiting",
            "{}",
            out["approval_status"]
        );
        assert_eq!(
            out["approval_answered"]["structured"]["status"], "completed",
            "{}",
            out["approval_answered"]
        );

        // Both runs are Postgres's: `host runs show` finds them there, and
        // not in the SQLite file the command would use otherwise.
        let approval_id = out["approval"]["structured"]["run_id"].as_str().unwrap();
        for (id, steps_at_least) in [(run_id, 5), (approval_id, 2)] {
            let shown = host_command(
                dir.path(),
                &["runs", "show", id, "--json", "--database", &db],
                None,
            )
            .output()
            .unwrap();
            assert!(shown.status.success(), "{}", stderr(&shown));
            let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
            assert_eq!(shown["status"], "completed", "{shown}");
            assert!(
                shown["steps"].as_array().unwrap().len() >= steps_at_least,
                "{shown}"
            );
        }
        let elsewhere = host_command(dir.path(), &["runs", "show", run_id], None)
            .output()
            .unwrap();
        assert!(!elsewhere.status.success(), "{}", stderr(&elsewhere));
    })
    .await
    .unwrap();
}

/// Runs the TypeScript SDK's task client against `target`: a URL, or a
/// file with the [`stdio_server`] parameters.
fn typescript_client(target: &str) -> Value {
    node_client("tasks.mjs", &[target])
}

/// Runs `node mcp/SCRIPT ARGS…` (an official TypeScript SDK client),
/// returning the JSON object it printed.
pub(crate) fn node_client(script: &str, args: &[&str]) -> Value {
    let dir = repo_root().join("tests/e2e/mcp");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/sdk").is_dir(),
        "the MCP TypeScript SDK is not installed: run `npm ci` in tests/e2e/mcp (.ci/run does)"
    );
    let out = Command::new("node")
        .arg(dir.join(script))
        .args(args)
        .current_dir(&dir)
        .output()
        .expect("node (see .ci/run)");
    assert!(
        out.status.success(),
        "the TypeScript MCP client failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "client output is not JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The structured result without what differs between two runs (ids).
fn without_ids(result: &Value) -> Value {
    let mut result = result["structuredContent"].clone();
    result["run_id"] = Value::Null;
    for artifact in result["artifacts"].as_array_mut().into_iter().flatten() {
        artifact["uri"] = Value::Null;
    }
    result
}

#[test]
fn typescript_sdk_drives_scenarios_as_tasks_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = HttpServer::start(dir.path(), &offer());
    let out = typescript_client(&server.url);
    drop(server);
    check_tasks(&out, dir.path());
}

#[test]
fn typescript_sdk_drives_scenarios_as_tasks_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.json");
    std::fs::write(&config, stdio_server(dir.path()).to_string()).unwrap();
    let out = typescript_client(config.to_str().unwrap());
    check_tasks(&out, dir.path());
}

/// What the TypeScript SDK's task client must see, on either transport.
fn check_tasks(out: &Value, dir: &Path) {
    assert!(
        out["tools"]
            .as_array()
            .unwrap()
            .contains(&json!("research"))
    );
    // Advertised as the spec says: the capability, and task support on
    // the scenario tools only (a skill's call is short; it takes none).
    assert_eq!(
        out["tasks_capability"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}})
    );
    let support = out["task_support"].as_object().unwrap();
    assert_eq!(support["research"], "optional", "{support:?}");
    assert_eq!(support["echo"], Value::Null, "{support:?}");

    // Created at once (working), polled to completed, its result fetched:
    // the same as a plain call's, tied to its task.
    let stream = out["stream"].as_array().unwrap();
    let created = &stream[0];
    assert_eq!(created["type"], "taskCreated", "{stream:?}");
    assert_eq!(created["task"]["status"], "working");
    let id = created["task"]["taskId"].as_str().unwrap();
    let statuses: Vec<&Value> = stream[1..]
        .iter()
        .filter(|m| m["type"] == "taskStatus")
        .map(|m| &m["status"])
        .collect();
    assert_eq!(statuses.last(), Some(&&json!("completed")), "{stream:?}");
    let last = stream.last().unwrap();
    assert_eq!(last["type"], "result", "{last}");
    let result = &last["result"];
    assert_eq!(result["isError"], false, "{result}");
    assert_eq!(result["structuredContent"]["run_id"], id);
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    assert_eq!(out["research_task"]["status"], "completed");
    assert_eq!(
        out["research_result"]["structuredContent"],
        result["structuredContent"]
    );
    assert_eq!(without_ids(result), without_ids(&out["plain"]));
    assert_eq!(result["structuredContent"]["status"], "completed");

    // The task's id is the run's: the store has it.
    let shown = host_command(dir, &["runs", "show", id, "--json"], None)
        .output()
        .unwrap();
    assert!(shown.status.success(), "{}", stderr(&shown));
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["status"], "completed");

    // An approval run: input_required with its question, answered with
    // run_answer, then completed with the plain call's result.
    let waiting = &out["approval_waiting"];
    assert_eq!(waiting["status"], "input_required", "{waiting}");
    assert!(
        waiting["statusMessage"]
            .as_str()
            .unwrap()
            .contains("Run deploy (12 bytes)?"),
        "{waiting}"
    );
    assert_eq!(
        out["approval_answer"]["structuredContent"]["status"],
        "completed"
    );
    assert_eq!(out["approval_task"]["status"], "completed");
    assert_eq!(
        out["approval_result"]["structuredContent"]["summary"]["outcome"],
        "executed deploy"
    );

    // Cancelled while it waits; a second cancel is refused.
    assert_eq!(out["cancel_waiting"]["status"], "input_required");
    assert_eq!(
        out["cancelled"]["status"], "cancelled",
        "{}",
        out["cancelled"]
    );
    assert_eq!(out["cancelled_task"]["status"], "cancelled");
    let again = out["cancel_again"].as_str().unwrap();
    assert!(
        again.contains("-32602") && again.contains("cancelled already"),
        "{again}"
    );
    let cancelled_id = out["ids"]["cancel"].as_str().unwrap();
    let shown = host_command(dir, &["runs", "show", cancelled_id, "--json"], None)
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(shown["status"], "cancelled");

    let unknown = out["unknown_task"].as_str().unwrap();
    assert!(unknown.contains("no task `no-such-task`"), "{unknown}");
    assert_eq!(
        out["listed"],
        json!([
            {"taskId": id, "status": "completed"},
            {"taskId": out["ids"]["approval"], "status": "completed"},
            {"taskId": cancelled_id, "status": "cancelled"},
        ])
    );
}

/// A `host mcp` over stdio, spoken to line by line.
struct StdioSession {
    child: KilledOnDrop,
    stdin: Option<std::process::ChildStdin>,
    stdout: BufReader<std::process::ChildStdout>,
    /// Messages read while looking for another.
    unread: Vec<Value>,
}

impl StdioSession {
    fn start(dir: &Path) -> StdioSession {
        let args = offer();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = host_command(dir, &args, None)
            .current_dir(repo_root())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        StdioSession {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()),
            child: KilledOnDrop::new(child),
            unread: Vec::new(),
        }
    }

    fn send_raw(&mut self, line: &[u8]) {
        use std::io::Write;
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    fn send(&mut self, message: Value) {
        self.send_raw(message.to_string().as_bytes());
    }

    /// The next message from the server.
    fn next(&mut self) -> Value {
        let mut line = String::new();
        let read = self.stdout.read_line(&mut line).unwrap();
        assert!(read > 0, "the server closed stdout");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
    }

    /// The response to request `id`; the messages before it are kept.
    fn response(&mut self, id: Value) -> Value {
        if let Some(at) = self.unread.iter().position(|m| m["id"] == id) {
            return self.unread.remove(at);
        }
        loop {
            let message = self.next();
            if message["id"] == id && message.get("method").is_none() {
                return message;
            }
            self.unread.push(message);
        }
    }

    fn request(&mut self, id: i64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(json!(id))
    }
}

#[test]
fn stdio_answers_tasks_in_front_of_the_sdk_and_refuses_what_does_not_fit() {
    let dir = tempfile::tempdir().unwrap();
    let mut session = StdioSession::start(dir.path());

    // Before initialize: refused, and the session is still there for it.
    let early = session.request(1, "tasks/list", json!({}));
    assert_eq!(early["error"]["code"], -32600, "{early}");
    assert!(
        early["error"]["message"]
            .as_str()
            .unwrap()
            .contains("send initialize first"),
        "{early}"
    );

    let init = session.request(
        2,
        "initialize",
        json!({
            "protocolVersion": "2025-11-25",
            "capabilities": {"tasks": {}},
            "clientInfo": {"name": "raw", "version": "0"},
        }),
    );
    assert_eq!(init["result"]["serverInfo"]["name"], "skillhost", "{init}");
    assert_eq!(
        init["result"]["capabilities"]["tasks"],
        json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
        "{init}"
    );
    session.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    let listed = session.request(3, "tools/list", json!({}));
    let tools = listed["result"]["tools"].as_array().unwrap();
    let support = |name: &str| {
        tools.iter().find(|t| t["name"] == name).unwrap()["execution"]["taskSupport"].clone()
    };
    assert_eq!(support("approval"), "optional");
    assert_eq!(support("echo"), Value::Null);

    // A line over 16 MiB: skipped with an error, the session goes on.
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"echo","arguments":{{"message":"{}"}}}}}}"#,
        "x".repeat(17 << 20)
    );
    session.send_raw(huge.as_bytes());
    let skipped = session.response(Value::Null);
    assert_eq!(skipped["error"]["code"], -32600, "{skipped}");
    assert!(
        skipped["error"]["message"]
            .as_str()
            .unwrap()
            .contains("over 16 MiB"),
        "{skipped}"
    );
    // A line that is not JSON: a parse error, the session goes on.
    session.send_raw(b"this is not json");
    let garbled = session.response(Value::Null);
    assert_eq!(garbled["error"]["code"], -32700, "{garbled}");
    let unknown = session.request(5, "tasks/get", json!({"taskId": "nope"}));
    assert_eq!(unknown["error"]["code"], -32602, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no task `nope`"),
        "{unknown}"
    );
    // Arguments that do not fit: the plain call's isError result, no task.
    let bad = session.request(
        6,
        "tools/call",
        json!({"name": "approval", "arguments": {"action": 5}, "task": {}}),
    );
    assert_eq!(bad["result"]["isError"], true, "{bad}");
    assert!(bad["result"].get("task").is_none(), "{bad}");

    // A task that waits for a person: tasks/result waits with it while
    // other requests are answered, then ends with the run.
    let created = session.request(
        7,
        "tools/call",
        json!({"name": "approval", "arguments": {}, "task": {"ttl": 60000}}),
    );
    let id = created["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("no task: {created}"))
        .to_string();
    assert_eq!(created["result"]["task"]["status"], "working");
    let waiting = loop {
        let got = session.request(8, "tasks/get", json!({"taskId": id}));
        if got["result"]["status"] != "working" {
            break got;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(waiting["result"]["status"], "input_required", "{waiting}");
    session.send(
        json!({"jsonrpc": "2.0", "id": 9, "method": "tasks/result", "params": {"taskId": id}}),
    );
    // Another tasks/result the client gives up on: never answered.
    session.send(
        json!({"jsonrpc": "2.0", "id": 11, "method": "tasks/result", "params": {"taskId": id}}),
    );
    session.send(json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": 11, "reason": "the client gave up"},
    }));
    let answered = session.request(
        10,
        "tools/call",
        json!({"name": "run_answer", "arguments": {"run_id": id, "answer": {"approved": true}}}),
    );
    assert_eq!(
        answered["result"]["structuredContent"]["status"], "completed",
        "{answered}"
    );
    let result = session.response(json!(9));
    assert_eq!(
        result["result"]["structuredContent"]["summary"]["outcome"], "executed deploy",
        "{result}"
    );
    assert_eq!(
        result["result"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id
    );
    // Answered twice: refused, and what to do is said as this server's
    // tools, never as a `host` command.
    let again = session.request(
        13,
        "tools/call",
        json!({"name": "run_answer", "arguments": {"run_id": id, "answer": {"approved": true}}}),
    );
    assert_eq!(again["result"]["isError"], true, "{again}");
    let text = again["result"]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains("already answered"), "{text}");
    assert!(
        text.contains(&format!("see it with `run_status` (run_id `{id}`)")),
        "{text}"
    );
    assert!(!text.contains("host "), "{text}");
    // Time for the cancelled request's answer to come, had it not been
    // cancelled; a ping answered after it shows nothing came.
    std::thread::sleep(std::time::Duration::from_millis(800));
    let pong = session.request(12, "ping", json!({}));
    assert_eq!(pong["result"], json!({}), "{pong}");
    assert!(
        session.unread.iter().all(|m| m["id"] != 11),
        "a cancelled request was answered: {:?}",
        session.unread
    );

    // The client closes stdin: the server ends, cleanly.
    drop(session.stdin.take());
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut session.stdout, &mut rest).unwrap();
    assert!(rest.trim().is_empty(), "after the end: {rest}");
    let status = session.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// `host mcp` given a scenario that cannot run here (`research-llm`,
/// whose `llm` provider this host has no configuration for) and broken
/// ones (not TOML, an unbounded cycle, a grant outside their directory)
/// beside one that can: it starts, offers no tool for them, says why in
/// its instructions, and a call by such a name is refused with the
/// reason; the rest work. Given only scenarios that cannot run, it
/// refuses to start, with every reason.
#[test]
fn scenarios_that_cannot_run_are_no_tools_and_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let broken = crate::serve::broken_scenarios(dir.path());
    let hostile = broken
        .join(crate::serve::HOSTILE_NAME)
        .join("scenario.toml");
    let mut args: Vec<String> = vec![
        "mcp".into(),
        "--scenario".into(),
        "examples/research/scenario.toml".into(),
        "--scenario".into(),
        "examples/research-llm/scenario.toml".into(),
    ];
    for file in [
        hostile.clone(),
        broken.join("cycle/scenario.toml"),
        broken.join("outside/scenario.toml"),
    ] {
        args.push("--scenario".into());
        args.push(file.display().to_string());
    }
    args.push("--skill".into());
    args.push(
        repo_root()
            .join("skills/dist/echo.wasm")
            .display()
            .to_string(),
    );
    let mut config = stdio_server(dir.path());
    config["args"] = json!(args);
    config["transport"] = json!("stdio");
    config["exercise"] = json!("unavailable");
    let out = client(dir.path(), config);
    assert_eq!(
        out["tools"],
        json!(["echo", "research", "run_answer", "run_cancel", "run_status"]),
        "{out}"
    );
    let instructions = out["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("cannot run (not offered as tools)"),
        "{instructions}"
    );
    for says in [
        "- research-llm: ",
        "- cycle: ",
        "- outside: ",
        "outside the scenario's directory",
        "max_visits",
    ] {
        assert!(instructions.contains(says), "{says}: {instructions}");
    }
    assert!(
        instructions.contains(&format!("- {}: ", crate::serve::HOSTILE_NAME)),
        "{instructions}"
    );
    let refused = out["unavailable_call"].as_str().unwrap();
    assert!(
        refused.contains("scenario `research-llm` is not offered: it cannot run on this server"),
        "{refused}"
    );
    assert!(refused.contains("local"), "{refused}");
    assert_eq!(out["echo"]["is_error"], false, "{out}");

    // Nothing that can run: refused at start, with every reason.
    let out = host_command(
        dir.path(),
        &[
            "mcp",
            "--scenario",
            "examples/research-llm/scenario.toml",
            "--scenario",
            &broken.join("cycle/scenario.toml").display().to_string(),
        ],
        None,
    )
    .current_dir(repo_root())
    .stdin(Stdio::null())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("nothing to offer"), "{said}");
    assert!(said.contains("scenario `research-llm`"), "{said}");
    assert!(said.contains("scenario `cycle`"), "{said}");
}

/// What the Python SDK heard while it followed research runs
/// (`client.py`'s `follow`).
fn check_followed(out: &Value) {
    for run in ["quiet", "loud", "warning"] {
        assert_eq!(out[run]["is_error"], false, "{run}: {out}");
    }
    // The research run's six nodes (discovery, validation, summaries,
    // comparison, synthesis, report).
    let nodes = 6;
    // A progress notification per node, increasing, each naming its node,
    // before the result; the total is unknown (a graph may branch).
    for key in ["quiet_progress", "loud_progress"] {
        let progress = out[key].as_array().unwrap();
        assert_eq!(progress.len() as u64, nodes, "{key}: {out}");
        for (i, note) in progress.iter().enumerate() {
            assert_eq!(note["progress"], json!((i + 1) as f64), "{note}");
            assert_eq!(note["total"], Value::Null);
            assert!(note["message"].as_str().unwrap().starts_with("node `"));
        }
    }
    // No level set: no log messages. At info: the skills' info lines, each
    // naming its skill, run and node. At warning: none of them. (Each log
    // names its run: over HTTP they may arrive after their call's result.)
    let logs_of = |run: &str| -> Vec<&Value> {
        let run_id = &out[run]["structured"]["run_id"];
        out["logs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| &l["data"]["run_id"] == run_id)
            .collect()
    };
    assert_eq!(logs_of("quiet"), Vec::<&Value>::new(), "{out}");
    assert_eq!(logs_of("warning"), Vec::<&Value>::new(), "{out}");
    let logs = logs_of("loud");
    assert!(!logs.is_empty(), "{out}");
    assert_eq!(logs.len(), out["logs"].as_array().unwrap().len(), "{out}");
    for log in &logs {
        assert_eq!(log["level"], "info", "{log}");
        assert!(log["logger"].is_string(), "{log}");
        assert!(log["data"]["node"].is_string(), "{log}");
        assert!(log["data"]["message"].is_string(), "{log}");
    }
    assert!(
        logs.iter().any(|l| l["logger"] == "discovery"),
        "the discovery skill's line: {out}"
    );
}

#[test]
fn python_sdk_follows_a_run_with_progress_and_log_messages_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = stdio_server(dir.path());
    config["transport"] = json!("stdio");
    config["exercise"] = json!("follow");
    check_followed(&client(dir.path(), config));
}

#[test]
fn python_sdk_follows_a_run_with_progress_and_log_messages_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let server = HttpServer::start(dir.path(), &offer());
    let out = client(
        dir.path(),
        json!({"transport": "http", "url": server.url, "exercise": "follow"}),
    );
    check_followed(&out);
}
