//! Traces over OTLP, read by a receiver that decodes them with the official
//! protobuf definitions (`skillhost_tests::otlp`): the span tree of a
//! research run, of a run SIGKILLed inside a model call and resumed by
//! another process (one trace, both processes' nodes in it), and of an
//! approval answered in a new process; a collector that is down costs the
//! run nothing; a configuration that cannot be used is an error at start.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use skillhost_tests::cli::{KilledOnDrop, host_command, json, stderr};
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply};
use skillhost_tests::otlp::{OtlpReceiver, named, one};
use skillhost_tests::repo_root;

/// `host ARGS…` in `dir` (from the repository's root) exporting traces to
/// `receiver`, each span sent within 50 ms.
fn traced(dir: &Path, receiver: &OtlpReceiver, args: &[&str]) -> Command {
    exporting_to(dir, &receiver.endpoint(), args)
}

/// [`traced`] with any OTLP `endpoint`.
fn exporting_to(dir: &Path, endpoint: &str, args: &[&str]) -> Command {
    let mut cmd = host_command(dir, args, None);
    cmd.current_dir(repo_root())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .env("OTEL_BSP_SCHEDULE_DELAY", "50")
        .env("OTEL_SERVICE_NAME", "skillhost-test");
    cmd
}

const RESEARCH: [&str; 5] = [
    "run",
    "research",
    "--input",
    r#"{"query": "retrieval augmented generation"}"#,
    "--json",
];

/// A research run that exported to a collector that did not take its
/// spans: it completed all the same, and said it dropped them.
fn completed_having_dropped(out: &std::process::Output, endpoint: &str) {
    assert!(out.status.success(), "{endpoint}: {}", stderr(out));
    assert_eq!(json(out)["status"], "completed");
    let err = stderr(out);
    assert!(
        err.contains("trace span(s) were not exported"),
        "{endpoint}: {err}"
    );
}

/// [`traced`] run to its end, which must be a success.
fn traced_ok(dir: &Path, receiver: &OtlpReceiver, args: &[&str]) -> std::process::Output {
    let out = traced(dir, receiver, args).output().unwrap();
    assert!(out.status.success(), "host {args:?}: {}", stderr(&out));
    out
}

/// The approval example's risky request, run traced to its wait; the
/// run's id.
fn risky_approval(dir: &Path, receiver: &OtlpReceiver) -> String {
    let example = repo_root().join("examples/approval");
    let scenario = example.join("scenario.toml").display().to_string();
    let input = format!("@{}", example.join("inputs/risky.json").display());
    let out = traced_ok(
        dir,
        receiver,
        &["run", &scenario, "--input", &input, "--json"],
    );
    json(&out)["run_id"].as_str().unwrap().to_string()
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    &span["attributes"][key]
}

/// Every span's parent is in `spans` but the root's, which has none.
fn assert_one_tree(spans: &[Value]) {
    let ids: std::collections::HashSet<&str> = spans
        .iter()
        .map(|s| s["span_id"].as_str().unwrap())
        .collect();
    let roots: Vec<&Value> = spans.iter().filter(|s| s["parent_span_id"] == "").collect();
    assert_eq!(roots.len(), 1, "roots: {roots:#?}");
    for span in spans {
        let parent = span["parent_span_id"].as_str().unwrap();
        assert!(
            parent.is_empty() || ids.contains(parent),
            "{} has a parent not in the trace: {span:#}",
            span["name"]
        );
    }
}

#[test]
fn a_research_run_is_one_trace_of_its_nodes_and_their_calls() {
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let out = traced_ok(dir.path(), &receiver, &RESEARCH);
    let outcome = json(&out);
    let run_id = outcome["run_id"].as_str().unwrap();

    // The process sends what it queued before it exits.
    let spans = receiver.spans();
    let root = one(&spans, "run research");
    let trace = root["trace_id"].as_str().unwrap();
    assert!(spans.iter().all(|s| s["trace_id"] == trace), "one trace");
    assert_one_tree(&spans);
    assert_eq!(attr(root, "skillhost.run.id"), run_id);
    assert_eq!(attr(root, "skillhost.run.status"), "completed");
    assert_eq!(attr(root, "skillhost.scenario"), "research");
    assert_eq!(attr(root, "skillhost.scenario.version"), "0.1.0");
    assert_eq!(root["resource"]["service.name"], "skillhost-test");
    assert_eq!(root["scope"], "skillhost");

    let drive = one(&spans, "drive research");
    assert_eq!(drive["parent_span_id"], root["span_id"]);
    assert_eq!(attr(drive, "skillhost.run.resumed"), false);
    assert_eq!(
        attr(drive, "skillhost.run.nodes_run"),
        &outcome["nodes_run"]
    );

    // A span per node under the root; a skill node's carries its call's
    // figures (the skill's digest, the attempt, fuel and memory), a map
    // node's calls each have a span under it naming their item.
    let nodes: Vec<&Value> = spans
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("node "))
        .collect();
    assert_eq!(nodes.len() as u64, outcome["nodes_run"].as_u64().unwrap());
    let shown = json(
        &host_command(dir.path(), &["runs", "show", run_id, "--json"], None)
            .output()
            .unwrap(),
    );
    let components = &shown["components"];
    let ran_the_run_s_component = |span: &Value| {
        let digest = attr(span, "skillhost.skill.digest").as_str().unwrap();
        assert!(
            components
                .as_object()
                .unwrap()
                .values()
                .any(|d| d == digest),
            "{span:#} digest not among the run's components {components}"
        );
        assert_eq!(attr(span, "skillhost.attempt"), 1, "{span:#}");
        assert!(attr(span, "skillhost.fuel_consumed").as_i64().unwrap() > 0);
        assert!(attr(span, "skillhost.memory_peak_bytes").as_i64().unwrap() > 0);
    };
    for node in &nodes {
        assert_eq!(node["parent_span_id"], root["span_id"], "{node:#}");
        assert_eq!(attr(node, "skillhost.run.id"), run_id);
        if attr(node, "skillhost.node.kind") == "skill" {
            ran_the_run_s_component(node);
        }
    }
    assert_eq!(
        nodes
            .iter()
            .filter(|n| attr(n, "skillhost.node.kind") == "skill")
            .count(),
        4,
        "paper_discovery, paper_compare, claim_synthesis, report_writer"
    );
    let summarize = one(&spans, "node paper_summarize");
    assert_eq!(attr(summarize, "skillhost.node.kind"), "map");
    let items: Vec<&Value> = spans
        .iter()
        .filter(|s| s["parent_span_id"] == summarize["span_id"])
        .collect();
    assert!(items.len() > 1, "{items:#?}");
    let mut indexes = Vec::new();
    for item in &items {
        assert_eq!(item["name"], "call paper-summarize", "{item:#}");
        ran_the_run_s_component(item);
        assert!(item["start"].as_u64() >= summarize["start"].as_u64());
        assert!(item["end"].as_u64() <= summarize["end"].as_u64());
        indexes.push(attr(item, "skillhost.map.item").as_i64().unwrap());
    }
    indexes.sort();
    assert_eq!(indexes, (0..items.len() as i64).collect::<Vec<_>>());

    // The run keeps its trace: `runs show` names it.
    assert_eq!(shown["trace_id"], trace, "{shown}");
}

/// A model provider whose answers are held while `hold` is set; `asked`
/// is set once a request came.
fn held_summariser(hold: Arc<AtomicBool>, asked: Arc<AtomicBool>) -> FakeLlmServer {
    FakeLlmServer::start_with(move |request| {
        asked.store(true, Ordering::Relaxed);
        while hold.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let abstract_ = request.last_message_after("Abstract:\n")?;
        let first = match abstract_.trim().find(". ") {
            Some(end) => abstract_.trim()[..=end].to_string(),
            None => abstract_.trim().to_string(),
        };
        let answer = json!({
            "main_contributions": [first],
            "methodology": "A method the fake model describes in its own words.",
            "key_findings": [first],
            "limitations": [],
            "quotes": [first],
        });
        Some(FakeReply::openai_content(&answer.to_string()))
    })
}

#[test]
fn a_run_killed_inside_a_model_call_and_resumed_elsewhere_stays_one_trace() {
    let receiver = OtlpReceiver::start();
    let hold = Arc::new(AtomicBool::new(true));
    let asked = Arc::new(AtomicBool::new(false));
    let server = held_summariser(hold.clone(), asked.clone());
    let dir = tempfile::tempdir().unwrap();
    server.configure_user(dir.path());
    let scenario = repo_root()
        .join("examples/research-llm/scenario.toml")
        .display()
        .to_string();
    let input = r#"{"query": "retrieval augmented generation", "max_papers": 4}"#;

    // The first process: its nodes before the summaries are exported, then
    // it is killed while the model holds its answers.
    let mut first = KilledOnDrop::new(
        traced(
            dir.path(),
            &receiver,
            &["run", &scenario, "--input", input, "--events"],
        )
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.path().join("first.err")).unwrap())
        .spawn()
        .unwrap(),
    );
    let mut events = BufReader::new(first.stdout.take().unwrap());
    let mut line = String::new();
    events.read_line(&mut line).unwrap();
    let started: Value = serde_json::from_str(&line).unwrap();
    // The rest of its events are read (and dropped) so it never writes to
    // a closed pipe.
    std::thread::spawn(move || std::io::copy(&mut events, &mut std::io::sink()));
    let run_id = started["run_id"].as_str().unwrap().to_string();
    receiver.wait_for("the nodes before the summaries", |spans| {
        named(spans, "node paper_discovery").len() == 1
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !asked.load(Ordering::Relaxed) {
        assert!(
            std::time::Instant::now() < deadline,
            "no completion asked: {}",
            std::fs::read_to_string(dir.path().join("first.err")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let first_pid = i64::from(first.id());
    first.kill().unwrap();
    first.wait().unwrap();
    hold.store(false, Ordering::Relaxed);
    let before_kill = receiver.spans();
    assert!(named(&before_kill, &format!("run {}", "research-llm")).is_empty());

    // The second process resumes it.
    let out = traced_ok(dir.path(), &receiver, &["resume", &run_id, "--json"]);
    assert_eq!(json(&out)["status"], "completed");

    let spans = receiver.spans();
    let root = one(&spans, "run research-llm");
    let trace = root["trace_id"].as_str().unwrap();
    assert!(spans.iter().all(|s| s["trace_id"] == trace), "one trace");
    assert_eq!(attr(root, "skillhost.run.id"), run_id.as_str());
    assert_eq!(attr(root, "skillhost.run.status"), "completed");
    // Both processes' nodes are in it, under the root; only the second
    // process ended its part (the first was killed).
    let pids: std::collections::BTreeSet<i64> = spans
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("node "))
        .map(|s| s["resource"]["process.pid"].as_i64().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "nodes from both processes: {pids:?}");
    assert!(pids.contains(&first_pid));
    let drive = one(&spans, "drive research-llm");
    assert_eq!(attr(drive, "skillhost.run.resumed"), true);
    assert_ne!(drive["resource"]["process.pid"], first_pid);
    // The second process's completions are spans with the GenAI
    // conventions' attributes, under their call.
    let chats = named(&spans, "chat fake-model");
    let chats = if chats.is_empty() {
        spans
            .iter()
            .filter(|s| s["name"].as_str().unwrap().starts_with("chat "))
            .collect()
    } else {
        chats
    };
    assert!(!chats.is_empty(), "no model call spans");
    for chat in chats {
        assert_eq!(chat["kind"], "SPAN_KIND_CLIENT");
        assert_eq!(attr(chat, "gen_ai.operation.name"), "chat");
        assert_eq!(attr(chat, "gen_ai.provider.name"), "local");
        assert!(attr(chat, "gen_ai.request.model").is_string());
        assert!(attr(chat, "gen_ai.usage.input_tokens").as_i64().unwrap() > 0);
        assert!(attr(chat, "gen_ai.usage.output_tokens").as_i64().unwrap() > 0);
        let call = spans
            .iter()
            .find(|s| s["span_id"] == chat["parent_span_id"])
            .expect("a completion's span is under its call's");
        assert_eq!(attr(call, "skillhost.skill"), "paper-summarize-llm");
    }
    assert_one_tree(&spans);
}

#[test]
fn an_approval_answered_in_a_new_process_continues_the_trace_with_its_wait() {
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let run_id = risky_approval(dir.path(), &receiver);
    let waiting = receiver.spans();
    let drive = one(&waiting, "drive approval");
    assert_eq!(attr(drive, "skillhost.run.status"), "waiting");
    assert!(named(&waiting, "run approval").is_empty(), "no root yet");

    traced_ok(
        dir.path(),
        &receiver,
        &["runs", "approve", &run_id, "--by", "alice", "--json"],
    );
    let spans = receiver.spans();
    let root = one(&spans, "run approval");
    assert_eq!(attr(root, "skillhost.run.status"), "completed");
    assert!(spans.iter().all(|s| s["trace_id"] == root["trace_id"]));
    let wait = one(&spans, "wait approve");
    assert_eq!(wait["parent_span_id"], root["span_id"]);
    assert_eq!(attr(wait, "skillhost.wait.outcome"), "answered");
    assert_eq!(attr(wait, "skillhost.wait.answered_by"), "alice");
    assert!(wait["end"].as_u64() >= wait["start"].as_u64());
    assert_eq!(named(&spans, "drive approval").len(), 2);
    assert_one_tree(&spans);
}

#[test]
fn a_collector_that_is_down_costs_the_run_nothing_but_the_spans() {
    // One that refuses every export, and an address nobody listens on.
    let refusing = OtlpReceiver::start_failing(1000);
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", listener.local_addr().unwrap())
    };
    for endpoint in [refusing.endpoint(), closed] {
        let dir = tempfile::tempdir().unwrap();
        let out = exporting_to(dir.path(), &endpoint, &RESEARCH)
            .output()
            .unwrap();
        completed_having_dropped(&out, &endpoint);
    }
    assert!(refusing.spans().is_empty());
}

#[test]
fn a_configuration_that_cannot_be_used_is_an_error_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "localhost:4318",
            "OTEL_EXPORTER_OTLP_ENDPOINT: `localhost:4318` is not an http:// or https:// URL",
        ),
        (
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            "grpc",
            "OTEL_EXPORTER_OTLP_PROTOCOL: `grpc` is an OTLP protocol this host is not built with",
        ),
        (
            "OTEL_TRACES_EXPORTER",
            "zipkin",
            "OTEL_TRACES_EXPORTER: `zipkin` is not an exporter this host has",
        ),
    ];
    for (var, value, expected) in cases {
        let out = host_command(
            dir.path(),
            &["run", "research", "--input", r#"{"query": "x"}"#],
            None,
        )
        .current_dir(repo_root())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
        .env(var, value)
        .output()
        .unwrap();
        assert_eq!(
            out.status.code(),
            Some(2),
            "{var}={value}: {}",
            stderr(&out)
        );
        assert!(stderr(&out).contains(expected), "{}", stderr(&out));
    }
    // The host configuration file's `[telemetry]`: a key it does not know.
    std::fs::write(
        dir.path().join("config.toml"),
        "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\nsample_rate = 1\n",
    )
    .unwrap();
    let out = host_command(
        dir.path(),
        &["run", "research", "--input", r#"{"query": "x"}"#],
        None,
    )
    .current_dir(repo_root())
    .env("SKILLHOST_CONFIG", dir.path().join("config.toml"))
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("config.toml:3: [telemetry]: unknown field `sample_rate`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_child_run_hangs_under_its_parent_s_subgraph_node() {
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let input = json!({ "request": "find papers on retrieval augmented generation" }).to_string();
    traced_ok(
        dir.path(),
        &receiver,
        &["run", "router", "--input", &input, "--json"],
    );
    let spans = receiver.spans();
    let parent = one(&spans, "run router");
    let child = one(&spans, "run research");
    let subgraph = one(&spans, "node research");
    assert!(spans.iter().all(|s| s["trace_id"] == parent["trace_id"]));
    assert_eq!(subgraph["parent_span_id"], parent["span_id"]);
    assert_eq!(attr(subgraph, "skillhost.node.kind"), "subgraph");
    assert_eq!(child["parent_span_id"], subgraph["span_id"]);
    assert_ne!(
        attr(child, "skillhost.run.id"),
        attr(parent, "skillhost.run.id")
    );
    // The child's nodes hang from the child's root.
    let discovery = one(&spans, "node paper_discovery");
    assert_eq!(discovery["parent_span_id"], child["span_id"]);
    assert_one_tree(&spans);
}

#[test]
fn a_submitted_run_claimed_by_a_worker_continues_the_trace_it_was_created_with() {
    let db = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(skillhost_tests::pg::fresh_database());
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    // Submitted by a process that exports nothing.
    let out = host_command(
        dir.path(),
        &[
            "submit",
            "research",
            "--input",
            r#"{"query": "retrieval augmented generation"}"#,
            "--database",
            &db,
            "--json",
        ],
        None,
    )
    .current_dir(repo_root())
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let run_id = json(&out)["run_id"].as_str().unwrap().to_string();
    let shown = json(
        &host_command(
            dir.path(),
            &["runs", "show", &run_id, "--database", &db, "--json"],
            None,
        )
        .output()
        .unwrap(),
    );
    let trace = shown["trace_id"]
        .as_str()
        .expect("a queued run keeps its trace");
    assert_eq!(trace.len(), 32);

    traced_ok(
        dir.path(),
        &receiver,
        &["worker", "--database", &db, "--exit-when-idle"],
    );
    let spans = receiver.spans();
    let root = one(&spans, "run research");
    assert_eq!(root["trace_id"], trace);
    assert_eq!(attr(root, "skillhost.run.id"), run_id.as_str());
    assert_eq!(attr(root, "skillhost.run.status"), "completed");
    // The worker started it: it continued nothing.
    let drive = one(&spans, "drive research");
    assert_eq!(attr(drive, "skillhost.run.resumed"), false);
    assert!(spans.iter().all(|s| s["trace_id"] == trace));
    assert_one_tree(&spans);
}

#[test]
fn the_run_page_and_the_api_name_the_trace_and_link_it_to_the_viewer() {
    let dir = tempfile::tempdir().unwrap();
    let out = host_command(dir.path(), &RESEARCH, None)
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let run_id = json(&out)["run_id"].as_str().unwrap().to_string();
    let viewer = "http://jaeger.example:16686/trace/{trace_id}";

    // `runs show`, with and without a viewer configured.
    let shown = json(
        &host_command(dir.path(), &["runs", "show", &run_id, "--json"], None)
            .output()
            .unwrap(),
    );
    let trace = shown["trace_id"].as_str().unwrap().to_string();
    assert_eq!(shown["trace_url"], Value::Null);
    let out = host_command(dir.path(), &["runs", "show", &run_id], None)
        .env("SKILLHOST_TRACE_URL", viewer)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let link = viewer.replace("{trace_id}", &trace);
    assert!(
        text.contains(&format!("trace     {trace} ({link})")),
        "{text}"
    );

    // The run page and the API of a server configured with the viewer.
    let port = skillhost_tests::free_port();
    let addr = format!("127.0.0.1:{port}");
    let _server = KilledOnDrop::new(
        host_command(dir.path(), &["serve", "--addr", &addr, "--no-worker"], None)
            .env("SKILLHOST_TRACE_URL", viewer)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let client = reqwest::blocking::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let page = loop {
        match client.get(format!("http://{addr}/runs/{run_id}")).send() {
            Ok(answer) => break answer.text().unwrap(),
            Err(_) => {
                assert!(
                    std::time::Instant::now() < deadline,
                    "host serve did not start"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    assert!(
        page.contains(&format!("trace <code>{trace}</code>")),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "<a href=\"{link}\" rel=\"noopener noreferrer\" target=\"_blank\">"
        )),
        "{page}"
    );
    let api: Value = client
        .get(format!("http://{addr}/api/runs/{run_id}"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(api["trace_id"], trace.as_str());
    assert_eq!(api["trace_url"], link.as_str());
}

#[test]
fn a_waiting_run_cancelled_ends_its_trace() {
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let run_id = risky_approval(dir.path(), &receiver);
    traced_ok(
        dir.path(),
        &receiver,
        &["runs", "cancel", &run_id, "--by", "bob"],
    );
    let spans = receiver.spans();
    let root = one(&spans, "run approval");
    assert_eq!(attr(root, "skillhost.run.status"), "cancelled");
    assert_eq!(attr(root, "skillhost.error.code"), "cancelled");
    // A cancel is no error of the run's.
    assert_eq!(root["status"], "STATUS_CODE_UNSET");
    assert!(spans.iter().all(|s| s["trace_id"] == root["trace_id"]));
    assert_one_tree(&spans);
}

#[test]
fn a_collector_that_never_answers_costs_a_run_at_most_its_wait_at_exit() {
    // Accepts connections and reads, but never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let out = exporting_to(dir.path(), &endpoint, &RESEARCH)
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "60000")
        .output()
        .unwrap();
    let took = started.elapsed();
    completed_having_dropped(&out, &endpoint);
    // An export may wait a minute for its answer; the process waits 2 s
    // for it at exit, and the run never waited at all.
    assert!(took < Duration::from_secs(30), "took {took:?}");
}

#[test]
fn a_run_started_through_host_serve_is_traced_by_its_embedded_worker() {
    let receiver = OtlpReceiver::start();
    let dir = tempfile::tempdir().unwrap();
    let addr = format!("127.0.0.1:{}", skillhost_tests::free_port());
    let _server = KilledOnDrop::new(
        traced(
            dir.path(),
            &receiver,
            &["serve", "--addr", &addr, "--scenarios", "examples/research"],
        )
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap(),
    );
    let client = reqwest::blocking::Client::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while client
        .get(format!("http://{addr}/api/openapi.json"))
        .send()
        .is_err()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "host serve did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let started: Value = client
        .post(format!("http://{addr}/api/runs"))
        .header("content-type", "application/json")
        .body(
            json!({"scenario": "research", "input": {"query": "retrieval augmented generation"}})
                .to_string(),
        )
        .send()
        .unwrap()
        .json()
        .unwrap();
    let run_id = started["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{started}"))
        .to_string();
    let spans = receiver.wait_for("the run's root span", |spans| {
        !named(spans, "run research").is_empty()
    });
    let api: Value = client
        .get(format!("http://{addr}/api/runs/{run_id}"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let root = one(&spans, "run research");
    assert_eq!(root["trace_id"], api["trace_id"], "{api}");
    assert_eq!(attr(root, "skillhost.run.id"), run_id.as_str());
    assert_eq!(attr(root, "skillhost.run.status"), "completed");
    assert_eq!(named(&spans, "drive research").len(), 1);
    assert_one_tree(&spans);
}
