//! Tokens reach people as a model generates them, with the real binary: a
//! node running `llm-stream-probe` (an async skill reading a streamed
//! completion) against the fake provider. `host run --events` sends each
//! delta as a `token` event of its attempt; an attempt cut mid-stream has
//! its tokens followed by `tokens_discarded` before the retry streams
//! anew, and the node's output is the retry's text only; `host replay`
//! reproduces the run with no provider; a process killed mid-stream
//! resumes into one complete output; on a terminal the live line shows the
//! text as it comes; an MCP client hears the tokens as log messages.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use skillhost_tests::cli::{
    KilledOnDrop, events, host, host_bin, host_command, json, sqlite_url, stderr,
};
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply};

pub(crate) fn scenario(dir: &Path) -> PathBuf {
    let path = dir.join("stream.toml");
    let text = format!(
        r#"[scenario]
name = "stream"

[state]
text = {{ type = "string" }}

[skills.writer]
component = "{}"

[[node]]
id = "write"
skill = "writer"
input = {{ prompt = "'write it'", streams = "1" }}
capabilities = {{ llm = "local/m" }}
writes = [{{ field = "text", from = "output.text" }}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "write"
to = "done"
"#,
        skillhost_tests::dist("llm-stream-probe").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_cut_attempts_tokens_are_discarded_before_the_retry_streams_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeLlmServer::start();
    server.configure_user(dir.path());
    server.push(FakeReply::openai_stream(
        &["first ", "try "],
        Duration::from_millis(30),
        false,
    ));
    server.push(FakeReply::openai_stream(
        &["second ", "try"],
        Duration::from_millis(30),
        true,
    ));
    let scenario = scenario(dir.path());
    let out = host(
        dir.path(),
        &["run", scenario.to_str().unwrap(), "--events"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let events = events(&out.stdout);
    let run_id = events[0]["run_id"].as_str().unwrap().to_string();
    let seen: Vec<Value> = events
        .iter()
        .filter(|e| {
            matches!(
                e["event"].as_str(),
                Some("token" | "tokens_discarded" | "node_failed" | "node_finished")
            )
        })
        .map(|e| {
            let mut e = e.clone();
            let e = e.as_object_mut().unwrap();
            e.remove("run_id");
            e.remove("duration_us");
            e.remove("fuel_consumed");
            e.remove("error");
            Value::Object(e.clone())
        })
        .collect();
    assert_eq!(
        seen,
        [
            json!({ "event": "token", "node": "write", "attempt": 1, "stream": 0, "text": "first " }),
            json!({ "event": "token", "node": "write", "attempt": 1, "stream": 0, "text": "try " }),
            json!({ "event": "node_failed", "node": "write", "attempt": 1, "will_retry": true }),
            json!({ "event": "tokens_discarded", "node": "write", "attempt": 1 }),
            json!({ "event": "token", "node": "write", "attempt": 2, "stream": 0, "text": "second " }),
            json!({ "event": "token", "node": "write", "attempt": 2, "stream": 0, "text": "try" }),
            json!({ "event": "node_finished", "node": "write" }),
        ],
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // The node's output is the second attempt's only.
    let shown = json(&host(
        dir.path(),
        &["runs", "show", &run_id, "--json"],
        None,
    ));
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["state"]["text"], "second try", "{shown}");
    assert_eq!(server.request_count(), 2);

    // A replay needs no provider and reproduces the run.
    drop(server);
    let out = host(dir.path(), &["replay", &run_id, "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let replay = json(&out);
    assert_eq!(replay["diverged_at"], Value::Null, "{replay}");
    for step in replay["steps"].as_array().unwrap() {
        assert_eq!(step["status"], "same", "{replay}");
    }
}

#[test]
fn the_live_line_shows_the_text_as_it_comes() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeLlmServer::start();
    server.configure_user(dir.path());
    server.push(FakeReply::openai_stream(
        &["streamed ", "words ", "appear"],
        Duration::from_millis(400),
        true,
    ));
    let scenario = scenario(dir.path());
    let shown = crate::progress::run_on_a_terminal(dir.path(), &scenario);
    assert!(shown.contains("· write ▸ streamed "), "{shown}");
    assert!(shown.contains("· write ▸ streamed words "), "{shown}");
}

#[test]
fn an_mcp_client_hears_the_tokens_and_their_discard_as_log_messages() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeLlmServer::start();
    server.configure_user(dir.path());
    server.push(FakeReply::openai_stream(&["cut "], Duration::ZERO, false));
    server.push(FakeReply::openai_stream(
        &["whole ", "answer"],
        Duration::from_millis(20),
        true,
    ));
    let mut config = stdio_server(dir.path());
    config["transport"] = json!("stdio");
    config["exercise"] = json!("stream");
    let out = crate::mcp::python_client("client.py", dir.path(), config);
    assert_eq!(out["result"]["is_error"], false, "{out}");
    assert_eq!(out["result"]["structured"]["status"], "completed", "{out}");
    let heard: Vec<Value> = out["logs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|log| {
            let data = &log["data"];
            json!([
                log["level"],
                data["attempt"],
                data["token"],
                data["tokens_discarded"]
            ])
        })
        .collect();
    assert_eq!(heard, heard_of_a_cut_attempt(), "{out}");
}

#[test]
fn a_process_killed_mid_stream_resumes_into_one_complete_output() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let server = FakeLlmServer::start();
    server.configure_user(dir.path());
    // The first process gets a slow stream and is killed after its first
    // token; the resumed one gets the default answer, whole.
    server.push(FakeReply::openai_stream(
        &["never ", "finished ", "text"],
        Duration::from_millis(2000),
        true,
    ));
    let scenario = scenario(dir.path());
    let mut child = KilledOnDrop::new(
        host_command(
            dir.path(),
            &["run", scenario.to_str().unwrap(), "--events"],
            None,
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start host"),
    );
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut run_id = String::new();
    for line in lines.by_ref() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["event"] == "run_started" {
            run_id = event["run_id"].as_str().unwrap().to_string();
        }
        if event["event"] == "token" {
            assert_eq!(event["text"], "never ");
            break;
        }
    }
    assert!(!run_id.is_empty());
    // SIGKILL, mid-stream.
    child.kill().unwrap();
    child.wait().unwrap();
    drop(lines);

    let out = host(dir.path(), &["resume", &run_id, "--events"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let tokens: Vec<Value> = events(&out.stdout)
        .into_iter()
        .filter(|e| e["event"] == "token")
        .map(|e| e["text"].clone())
        .collect();
    assert_eq!(tokens, [json!("echo: "), json!("write "), json!("it")]);
    let shown = json(&host(
        dir.path(),
        &["runs", "show", &run_id, "--json"],
        None,
    ));
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["state"]["text"], "echo: write it", "{shown}");
    let written: Vec<&Value> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["node"] == "write" && s["status"] == "ok")
        .collect();
    assert_eq!(written.len(), 1, "{shown}");
    assert_eq!(server.request_count(), 2);
}

/// `host bench ttft` runs the real binary on a terminal and with
/// `--events` against its own provider, and reports each face's latency:
/// finite, not negative, and its input checked. (What the figures are on
/// this machine is the benchmark's to say, not this test's.)
#[test]
fn the_time_to_first_token_benchmark_measures_both_faces() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(
        dir.path(),
        &[
            "bench", "ttft", "--rounds", "1", "--tokens", "3", "--lead", "50ms", "--gap", "5ms",
            "--json", "--skill",
        ]
        .into_iter()
        .chain([skillhost_tests::dist("llm-stream-probe").to_str().unwrap()])
        .collect::<Vec<_>>(),
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let figures = json(&out);
    assert_eq!(figures["rounds"], 1, "{figures}");
    assert_eq!(figures["tokens"], 3, "{figures}");
    for face in ["progress_line", "events"] {
        for figure in [
            "first_token_ms_median",
            "first_token_ms_max",
            "later_tokens_ms_median",
            "later_tokens_ms_max",
        ] {
            let value = figures[face][figure].as_f64();
            assert!(
                value.is_some_and(|v| v.is_finite() && v >= 0.0),
                "{face}.{figure}: {figures}"
            );
        }
    }

    for tokens in ["0", "101"] {
        let refused = host(dir.path(), &["bench", "ttft", "--tokens", tokens], None);
        assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
        assert!(
            stderr(&refused).contains("--tokens"),
            "{}",
            stderr(&refused)
        );
    }
    let refused = host(
        dir.path(),
        &["bench", "ttft", "--skill", "no-such.wasm"],
        None,
    );
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("no-such.wasm"),
        "{}",
        stderr(&refused)
    );
}

/// On Postgres a streaming node's tokens are relayed to other processes
/// (`NOTIFY`) once each, also when the node runs in a subgraph's child
/// run, whose engine shares its parent's events (and so its relay) rather
/// than adding a relay of its own.
#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_a_subgraphs_tokens_are_relayed_once_each() {
    let db = skillhost_tests::pg::fresh_database().await;
    let store = skillhost_store::Store::open(&db).await.unwrap();
    let mut listener = store.listen_tokens().await.unwrap().expect("a listener");
    let dir = tempfile::tempdir().unwrap();
    let server = FakeLlmServer::start();
    server.configure_user(dir.path());
    server.push(FakeReply::openai_stream(
        &["one ", "two ", "three"],
        Duration::from_millis(20),
        true,
    ));
    let parent = parent_scenario(dir.path());
    let run = {
        let dir = dir.path().to_path_buf();
        let db = db.clone();
        tokio::task::spawn_blocking(move || {
            host(
                &dir,
                &["run", parent.to_str().unwrap(), "--database", &db, "--json"],
                None,
            )
        })
        .await
        .unwrap()
    };
    assert!(run.status.success(), "{}", stderr(&run));
    assert_eq!(json(&run)["status"], "completed");
    let mut texts = Vec::new();
    while texts.concat() != "one two three" {
        let payload = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .unwrap_or_else(|_| panic!("every token relayed; heard {texts:?}"))
            .unwrap();
        let payload: Value = serde_json::from_str(&payload).unwrap();
        for event in payload["events"].as_array().unwrap() {
            if event["event"] == "token" {
                texts.push(event["text"].as_str().unwrap().to_string());
            }
        }
    }
    // Nothing more: no token twice.
    let more = tokio::time::timeout(Duration::from_millis(500), listener.recv()).await;
    assert!(more.is_err(), "{more:?}");
    assert_eq!(texts, ["one ", "two ", "three"]);
}

/// Writes scenario `parent` into `dir`, beside `stream` (written too): it
/// runs `stream` as a subgraph's child run, then ends.
pub(crate) fn parent_scenario(dir: &Path) -> PathBuf {
    scenario(dir);
    let parent = dir.join("parent.toml");
    std::fs::write(
        &parent,
        "[scenario]\nname = \"parent\"\n\n[[node]]\nid = \"child\"\nkind = \"subgraph\"\n\
         scenario = \"stream.toml\"\n\n[[node]]\nid = \"done\"\nkind = \"end\"\n\n\
         [[edge]]\nfrom = \"child\"\nto = \"done\"\n",
    )
    .unwrap();
    parent
}

/// The replies a task of `stream` and then its plain call get: each a cut
/// attempt (its token slow to come, so that `tasks/result` follows the run
/// before it) and a retry that streams the whole answer.
fn push_cut_then_whole(server: &FakeLlmServer) {
    for _ in 0..2 {
        server.push(FakeReply::openai_stream(
            &["cut "],
            Duration::from_millis(800),
            false,
        ));
        server.push(FakeReply::openai_stream(
            &["whole ", "answer"],
            Duration::from_millis(20),
            true,
        ));
    }
}

/// How an MCP client starts `host mcp` over stdio on the streaming
/// scenario in `dir`, with the test's cache, database and configuration.
fn stdio_server(dir: &Path) -> Value {
    json!({
        "command": host_bin(),
        "args": ["mcp", "--scenario", scenario(dir)],
        "env": {
            "SKILLHOST_CACHE_DIR": skillhost_tests::shared_component_cache(),
            "SKILLHOST_DATABASE_URL": sqlite_url(dir),
            "XDG_CONFIG_HOME": dir.join("xdg-config"),
        },
        "cwd": dir,
    })
}

/// What an MCP client hears of the fake provider's cut stream and its
/// retry, as (level, attempt, token, tokens_discarded) of each log
/// message: the cut attempt's token, its discard, the retry's tokens.
fn heard_of_a_cut_attempt() -> [Value; 4] {
    [
        json!(["info", 1, "cut ", null]),
        json!(["warning", 1, null, true]),
        json!(["info", 2, "whole ", null]),
        json!(["info", 2, "answer", null]),
    ]
}

/// Checks what `task_tokens.mjs` heard: the task's tokens and the first
/// attempt's discard as log messages, in order, each tied to the task
/// (`related-task`), then progress only if `progress` (never going back),
/// all before the result, which is the plain call's; a `tasks/result` of a
/// task no one created an error, with nothing heard. With `child`, the
/// tokens are a subgraph's child run's, under the task's run.
fn check_task_tokens(out: &Value, progress: bool, child: bool) {
    let task_id = out["task_id"].as_str().expect("a task id");
    let heard = out["heard"].as_array().unwrap();
    let related = json!({ "taskId": task_id });
    let (last, before) = heard.split_last().expect("something heard");
    assert_eq!(last["kind"], "result", "the result comes last: {out}");
    let mut logs = Vec::new();
    let mut steps = Vec::new();
    for note in before {
        assert_eq!(
            note["_meta"]["io.modelcontextprotocol/related-task"], related,
            "{note}"
        );
        match note["kind"].as_str() {
            Some("log") => {
                assert_eq!(note["logger"], "tokens", "{note}");
                let data = &note["data"];
                if child {
                    assert_ne!(data["run_id"], task_id, "{note}");
                    assert_eq!(data["under"], json!([task_id]), "{note}");
                } else {
                    assert_eq!(data["run_id"], task_id, "{note}");
                    assert!(data.get("under").is_none(), "{note}");
                }
                logs.push(json!([
                    note["level"],
                    data["attempt"],
                    data["token"],
                    data["tokens_discarded"]
                ]));
            }
            Some("progress") => steps.push(note["progress"].as_f64().unwrap()),
            _ => panic!("unexpected: {note}"),
        }
    }
    assert_eq!(logs, heard_of_a_cut_attempt(), "{out}");
    if progress {
        assert!(!steps.is_empty(), "progress: {out}");
        assert!(steps.windows(2).all(|w| w[0] < w[1]), "{steps:?}");
    } else {
        assert!(steps.is_empty(), "no progress token here: {out}");
    }
    let result = &last["result"];
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"], related,
        "{result}"
    );
    assert_eq!(
        result["structuredContent"]["status"], "completed",
        "{result}"
    );
    assert_eq!(
        result["structuredContent"]["summary"], out["plain"]["structuredContent"]["summary"],
        "{out}"
    );
    assert_eq!(out["plain"]["isError"], json!(false), "{out}");
    let without_id = |r: &Value| {
        let mut r = r["structuredContent"].clone();
        r["run_id"] = Value::Null;
        r
    };
    assert_eq!(without_id(result), without_id(&out["plain"]), "{out}");
    assert_eq!(out["unknown"]["code"], -32602, "{out}");
    assert!(
        out["unknown"]["message"]
            .as_str()
            .unwrap()
            .contains("no task `no-such-task`"),
        "{out}"
    );
    assert_eq!(out["unknown_heard"], json!([]), "{out}");
}

#[test]
fn an_mcp_task_streams_its_tokens_before_its_result_over_http() {
    task_tokens_over_http(false);
}

/// A task whose scenario runs the streaming one as a subgraph: the child
/// run's tokens reach the task's `tasks/result`, each once and in order,
/// before its result, and each names the child run and the task's run it
/// is under.
#[test]
fn an_mcp_task_streams_the_tokens_of_its_subgraphs_child_run() {
    task_tokens_over_http(true);
}

/// `task_tokens.mjs` against `host mcp --http` on the streaming scenario,
/// or (with `child`) on `parent`, which runs it as a subgraph.
fn task_tokens_over_http(child: bool) {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeLlmServer::start();
    server.configure_user(dir.path());
    push_cut_then_whole(&server);
    let (scenario, tool) = match child {
        true => (parent_scenario(dir.path()), "parent"),
        false => (scenario(dir.path()), "stream"),
    };
    let mcp = crate::mcp::HttpServer::start(
        dir.path(),
        &[
            "mcp".into(),
            "--scenario".into(),
            scenario.display().to_string(),
        ],
    );
    let out = crate::mcp::node_client("task_tokens.mjs", &["--tool", tool, &mcp.url]);
    check_task_tokens(&out, true, child);
}

#[test]
fn an_mcp_task_streams_its_tokens_before_its_result_over_stdio() {
    let dir = tempfile::tempdir().unwrap();
    let server = FakeLlmServer::start();
    server.configure_user(dir.path());
    push_cut_then_whole(&server);
    let config = dir.path().join("server.json");
    std::fs::write(&config, stdio_server(dir.path()).to_string()).unwrap();
    let out = crate::mcp::node_client("task_tokens.mjs", &[config.to_str().unwrap()]);
    check_task_tokens(&out, true, false);
}

/// Two `host mcp --http` on one Postgres store: the task is created
/// through the first, which runs it, and its result asked of the second,
/// which hears the tokens through the store's relay (`NOTIFY`), once
/// each, in order, before the result. The progress token is the first
/// server's to know: the second sends none.
#[tokio::test(flavor = "multi_thread")]
async fn on_postgres_a_task_run_by_another_process_streams_its_tokens() {
    let db = skillhost_tests::pg::fresh_database().await;
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let server = FakeLlmServer::start();
        server.configure_user(dir.path());
        push_cut_then_whole(&server);
        let scenario = scenario(dir.path());
        let args: Vec<String> = [
            "mcp",
            "--scenario",
            scenario.to_str().unwrap(),
            "--database",
            &db,
        ]
        .map(String::from)
        .to_vec();
        let runs = crate::mcp::HttpServer::start(dir.path(), &args);
        let asked = crate::mcp::HttpServer::start(dir.path(), &args);
        let out = crate::mcp::node_client("task_tokens.mjs", &[&runs.url, &asked.url]);
        check_task_tokens(&out, false, false);
    })
    .await
    .unwrap();
}

/// One POST to `host mcp --http`'s `/mcp`, spoken by hand (the SDKs hide
/// which answers are event streams, and cannot hold hundreds of them).
struct Raw {
    content_type: String,
    session: Option<String>,
    length: Option<usize>,
    body: std::io::BufReader<std::net::TcpStream>,
}

impl Raw {
    fn post(url: &str, session: Option<&str>, accept: &str, message: &Value) -> Raw {
        use std::io::{BufRead, Write};
        let authority = url
            .trim_start_matches("http://")
            .trim_end_matches("/mcp")
            .to_string();
        let mut stream = std::net::TcpStream::connect(&authority).unwrap();
        let body = message.to_string();
        let session = session
            .map(|s| format!("Mcp-Session-Id: {s}\r\n"))
            .unwrap_or_default();
        write!(
            stream,
            "POST /mcp HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n\
             Accept: {accept}\r\n{session}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut body = std::io::BufReader::new(stream);
        let mut status = String::new();
        body.read_line(&mut status).unwrap();
        assert!(status.starts_with("HTTP/1.1 20"), "{status}");
        let mut raw = Raw {
            content_type: String::new(),
            session: None,
            length: None,
            body,
        };
        loop {
            let mut line = String::new();
            raw.body.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                return raw;
            }
            let (name, value) = line.split_once(':').unwrap();
            let value = value.trim().to_string();
            match name.to_ascii_lowercase().as_str() {
                "content-type" => raw.content_type = value,
                "mcp-session-id" => raw.session = Some(value),
                "content-length" => raw.length = value.parse().ok(),
                _ => {}
            }
        }
    }

    /// The next JSON-RPC message: a JSON body whole, or an event stream's
    /// next `data:`; None at the end.
    fn next(&mut self) -> Option<Value> {
        use std::io::{BufRead, Read};
        if self.content_type.starts_with("application/json") {
            let length = self.length.take()?;
            let mut bytes = vec![0; length];
            self.body.read_exact(&mut bytes).unwrap();
            return Some(serde_json::from_slice(&bytes).unwrap());
        }
        loop {
            let mut line = String::new();
            if self.body.read_line(&mut line).unwrap_or(0) == 0 {
                return None;
            }
            // Chunk sizes, blank lines, comments and empty priming events
            // are not messages.
            if let Some(data) = line.trim_end().strip_prefix("data:")
                && let Ok(message) = serde_json::from_str(data.trim())
            {
                return Some(message);
            }
        }
    }

    /// Messages up to the response to a request, that response last.
    fn until_response(&mut self) -> Vec<Value> {
        let mut messages = Vec::new();
        while let Some(message) = self.next() {
            let done = message.get("id").is_some() && message.get("method").is_none();
            messages.push(message);
            if done {
                break;
            }
        }
        messages
    }
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// Hostile and careless clients of a task's stream, spoken to by hand:
/// a `tasks/result` of a task no one created is a JSON error, not a
/// stream; as many streams as the server follows at once (256) each hear
/// the task's tokens, one more is told it hears none (and still gets its
/// result), and once those clients went away their places are free again
/// (their followers ended: a new stream hears tokens); a client that takes
/// JSON only gets the result alone; a stream hears the task's tokens in
/// order, from when it came, then the result, and nothing after.
#[test]
fn a_tasks_streams_are_bounded_and_end_with_their_clients() {
    const SSE: &str = "application/json, text/event-stream";
    let dir = tempfile::tempdir().unwrap();
    let server = FakeLlmServer::start();
    server.configure_user(dir.path());
    let deltas: Vec<String> = (0..60).map(|i| format!("t{i} ")).collect();
    let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
    server.push(FakeReply::openai_stream(
        &deltas,
        Duration::from_millis(150),
        true,
    ));
    let scenario = scenario(dir.path());
    let mcp = crate::mcp::HttpServer::start(
        dir.path(),
        &[
            "mcp".into(),
            "--scenario".into(),
            scenario.display().to_string(),
        ],
    );
    let url = mcp.url.as_str();
    let request = |id: u64, method: &str, params: Value| json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params });
    let mut init = Raw::post(
        url,
        None,
        SSE,
        &request(
            1,
            "initialize",
            json!({ "protocolVersion": "2025-11-25", "capabilities": {},
                    "clientInfo": { "name": "raw", "version": "0" } }),
        ),
    );
    let session = init.session.clone().expect("a session id");
    init.until_response();
    let session = Some(session.as_str());
    Raw::post(
        url,
        session,
        SSE,
        &json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }),
    );
    let set = Raw::post(
        url,
        session,
        SSE,
        &request(2, "logging/setLevel", json!({ "level": "info" })),
    )
    .until_response();
    assert!(set.last().unwrap().get("result").is_some(), "{set:?}");

    // No such task: an error at once, as JSON, nothing streamed.
    let mut unknown = Raw::post(
        url,
        session,
        SSE,
        &request(3, "tasks/result", json!({ "taskId": "no-such-task" })),
    );
    assert!(unknown.content_type.starts_with("application/json"));
    let answer = unknown.until_response();
    assert_eq!(answer.len(), 1, "{answer:?}");
    assert_eq!(answer[0]["error"]["code"], -32602, "{answer:?}");

    let created = Raw::post(
        url,
        session,
        SSE,
        &request(
            4,
            "tools/call",
            json!({ "name": "stream", "arguments": {}, "task": {} }),
        ),
    )
    .until_response();
    let task_id = created[0]["result"]["task"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("{created:?}"))
        .to_string();
    let related = json!({ "taskId": task_id });
    let result = |id: u64, accept: &str| {
        Raw::post(
            url,
            session,
            accept,
            &request(id, "tasks/result", json!({ "taskId": task_id })),
        )
    };
    let is_token = |message: &Value| {
        message["method"] == "notifications/message"
            && message["params"]["logger"] == "tokens"
            && message["params"]["data"]["token"].is_string()
            && message["params"]["_meta"]["io.modelcontextprotocol/related-task"] == related
    };
    let hears_none = |message: &Value| {
        message["params"]["data"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("hears none"))
    };

    let before = rss_kib(mcp.pid());
    let mut streams: Vec<Raw> = (0..256).map(|i| result(100 + i, SSE)).collect();
    for stream in &mut streams {
        assert!(stream.content_type.starts_with("text/event-stream"));
        let first = stream.next().expect("a token");
        assert!(is_token(&first), "{first}");
    }
    let with_streams = rss_kib(mcp.pid());
    eprintln!("host mcp's resident memory: {before} KiB, with 256 task streams {with_streams} KiB");
    assert!(
        with_streams < before + 64 * 1024,
        "{before} KiB, then {with_streams} KiB"
    );
    let mut one_more = result(400, SSE);
    let first = one_more.next().unwrap();
    assert!(hears_none(&first), "{first}");
    drop(one_more);

    // A client that takes JSON only waits for the result alone.
    let json_only = std::thread::spawn({
        let (url, session) = (url.to_string(), session.map(str::to_string));
        let message = request(401, "tasks/result", json!({ "taskId": task_id }));
        move || {
            let mut plain = Raw::post(&url, session.as_deref(), "application/json", &message);
            assert!(plain.content_type.starts_with("application/json"));
            plain.until_response()
        }
    });

    // The clients go away; their followers end, and a new stream hears
    // tokens again.
    drop(streams);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let (mut stream, first) = loop {
        let mut stream = result(500, SSE);
        let first = stream.next().unwrap();
        if !hears_none(&first) {
            break (stream, first);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the gone clients' followers did not end"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut messages = vec![first];
    messages.extend(stream.until_response());
    assert_eq!(stream.next(), None, "nothing after the result");
    let (last, notes) = messages.split_last().unwrap();
    assert_eq!(last["id"], 500, "{last}");
    assert_eq!(
        last["result"]["_meta"]["io.modelcontextprotocol/related-task"], related,
        "{last}"
    );
    assert_eq!(last["result"]["structuredContent"]["status"], "completed");
    let heard: Vec<&str> = notes
        .iter()
        .inspect(|note| assert!(is_token(note), "{note}"))
        .map(|note| note["params"]["data"]["token"].as_str().unwrap())
        .collect();
    let from = deltas.iter().position(|d| *d == heard[0]).unwrap();
    assert_eq!(heard, deltas[from..], "in order, each once, to the end");

    let plain = json_only.join().unwrap();
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert_eq!(plain[0]["result"], last["result"]);
}
