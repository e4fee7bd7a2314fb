//! `examples/chat` through the real binary: each tool's path, memory across
//! processes, a page fetched from a real HTTP server under a grant naming
//! it, a tool refused for a host that is not granted, the path without a
//! tool, and a kill and resume giving the same reply.

use std::path::Path;
use std::process::Output;

use serde_json::Value;
use skillhost_tests::cli::{events, host_in_repo as host, json, killed_and_resumed_match, stderr};
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply};
use skillhost_tests::http_server::{HELLO, HttpServer};
use skillhost_tests::repo_root;

/// `host run chat --input {"message": …} --json` (from the repository's
/// root, so `chat` is examples/chat).
fn chat(dir: &Path, scenario: &str, message: &str) -> Output {
    let input = serde_json::json!({ "message": message }).to_string();
    host(dir, &["run", scenario, "--input", &input, "--json"], None)
}

fn completed(out: &Output) -> Value {
    assert!(out.status.success(), "{}", stderr(out));
    let run = json(out);
    assert_eq!(run["status"], "completed", "{run}");
    run
}

/// The nodes a run went through, in order.
fn path(dir: &Path, run: &Value) -> Vec<String> {
    let id = run["run_id"].as_str().unwrap();
    let shown = json(&host(dir, &["runs", "show", id, "--json"], None));
    shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_calculation_goes_through_the_calculator_only() {
    let dir = tempfile::tempdir().unwrap();
    let run = completed(&chat(dir.path(), "chat", "What is (2 + 3) * 4.5?"));
    assert_eq!(run["summary"]["tool"], "calculate", "{run}");
    assert_eq!(run["summary"]["reply"], "(2 + 3) * 4.5 = 22.5");
    assert_eq!(
        path(dir.path(), &run),
        ["detect_tool", "needs_tools", "calculate", "respond"]
    );
}

#[test]
fn a_message_without_a_tool_goes_straight_to_the_reply() {
    let dir = tempfile::tempdir().unwrap();
    let run = completed(&chat(dir.path(), "chat", "hello there"));
    assert_eq!(run["summary"]["tool"], "none");
    assert_eq!(run["summary"]["rule"], "no-rule");
    assert_eq!(
        path(dir.path(), &run),
        ["detect_tool", "needs_tools", "respond"]
    );
}

#[test]
fn memory_lasts_from_one_conversation_to_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let unknown = completed(&chat(dir.path(), "chat", "what is my favourite colour?"));
    assert!(
        unknown["summary"]["reply"]
            .as_str()
            .unwrap()
            .starts_with("I don't know your favourite colour yet"),
        "{unknown}"
    );
    completed(&chat(
        dir.path(),
        "chat",
        "Remember that my favourite colour is green.",
    ));
    // Another process, another run: the value is in the run store.
    let recalled = completed(&chat(dir.path(), "chat", "What is my favourite colour?"));
    assert_eq!(
        recalled["summary"]["reply"],
        "Your favourite colour is green."
    );
    assert_eq!(
        recalled["summary"]["sources"],
        serde_json::json!(["memory:favourite-colour"])
    );
    let changed = completed(&chat(
        dir.path(),
        "chat",
        "remember my favourite colour is blue",
    ));
    assert_eq!(
        changed["summary"]["reply"],
        "Noted: your favourite colour is blue.\n\n(it was green)"
    );
}

#[test]
fn a_file_of_the_granted_folder_is_read_and_one_outside_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = completed(&chat(dir.path(), "chat", "please read welcome.md"));
    let reply = run["summary"]["reply"].as_str().unwrap();
    assert!(reply.starts_with("welcome.md:\n\n# Welcome"), "{reply}");
    assert_eq!(run["summary"]["sources"], serde_json::json!(["welcome.md"]));

    let out = chat(dir.path(), "chat", "read ../scenario.toml");
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let failed = json(&out);
    assert_eq!(failed["status"], "failed", "{failed}");
    let error = failed["failure"].to_string();
    assert!(error.contains("invalid-path"), "{error}");
}

/// The example with its `http` grant naming `server` instead of the public
/// hosts (no network here), its components by absolute path.
fn chat_granting(dir: &Path, server: &HttpServer) -> String {
    let root = repo_root();
    let text = std::fs::read_to_string(root.join("examples/chat/scenario.toml"))
        .unwrap()
        .replace(
            r#"http = ["en.wikipedia.org", "www.gutenberg.org"]"#,
            &format!(r#"http = ["{}"]"#, server.host_port()),
        )
        .replace(
            "../../skills/dist/",
            &format!("{}/", root.join("skills/dist").display()),
        );
    std::fs::create_dir_all(dir.join("files")).unwrap();
    let path = dir.join("chat.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_page_is_fetched_from_a_granted_host_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = HttpServer::start();
    let scenario = chat_granting(dir.path(), &server);
    let url = server.url("/hello");
    let run = completed(&chat(dir.path(), &scenario, &format!("fetch {url} please")));
    assert_eq!(
        run["summary"]["reply"],
        format!("{url}:\n\n{HELLO}\n\n(HTTP 200, text/plain)")
    );
    assert_eq!(server.requests(), 1);

    // The example as shipped does not grant this server: the tool is
    // refused before any request leaves, and the run fails naming the grant.
    let out = chat(dir.path(), "chat", &format!("fetch {url}"));
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let error = json(&out)["failure"].to_string();
    assert!(error.contains("host-not-granted"), "{error}");
    assert!(error.contains("en.wikipedia.org"), "{error}");
    assert_eq!(server.requests(), 1, "a request reached the server");
}

#[test]
fn killed_mid_run_and_resumed_gives_the_same_reply() {
    let dir = tempfile::tempdir().unwrap();
    let input = r#"{"message": "what is 2 ^ 10 - 24"}"#;
    killed_and_resumed_match(
        dir.path(),
        &["run", "chat", "--input", input],
        &["after-commit:calculate", "before-commit:respond"],
    );
}

#[test]
fn the_scenario_passes_the_checker() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(dir.path(), &["check", "examples/chat/scenario.toml"], None);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The Zig calculator on its own (`host skill call`): precedence, right
/// associative powers, remainders and number formatting, and every bad
/// expression refused as `invalid-input` naming what is wrong and where.
#[test]
fn the_calculator_evaluates_and_names_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let calc = repo_root().join("skills/dist/chat-calc.wasm");
    let call = |expression: &str| {
        let input = serde_json::json!({ "expression": expression }).to_string();
        let out = host(
            dir.path(),
            &[
                "skill",
                "call",
                calc.to_str().unwrap(),
                "--input",
                &input,
                "--json",
            ],
            None,
        );
        (out.status.code(), json(&out))
    };
    for (expression, text) in [
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4.5", "22.5"),
        ("2 ^ 3 ^ 2", "512"),
        ("-2 ^ 2", "-4"),
        ("10 - 4 - 3", "3"),
        ("17 % 5", "2"),
        ("1 / 3", "0.333333333333"),
    ] {
        let (code, report) = call(expression);
        assert_eq!(code, Some(0), "{expression}: {report}");
        assert_eq!(report["output"]["text"], text, "{expression}: {report}");
    }
    let deep = format!("{}1{}", "(".repeat(100), ")".repeat(100));
    let long = "1+".repeat(600);
    for (expression, message) in [
        ("1 / 0", "division by zero at character 3"),
        ("2 +", "ends where a number was expected"),
        ("(1 + 2", "the `(` at character 1 is not closed"),
        ("1 + x", "unexpected `x` at character 5"),
        ("1 + é", "unexpected `é` at character 5"),
        ("1..2", "`1..2` at character 1 is not a number"),
        ("", "the expression is empty"),
        ("10 ^ 400", "not a finite number"),
        (deep.as_str(), "nested more than 64 deep"),
        (long.as_str(), "over 1000 characters"),
    ] {
        let (code, report) = call(expression);
        assert_eq!(code, Some(1), "{expression}: {report}");
        assert_eq!(report["error"]["code"], "invalid-input", "{report}");
        let got = report["error"]["message"].as_str().unwrap();
        assert!(got.contains(message), "{expression}: {got}");
    }
}

#[test]
fn the_llm_variant_is_the_scenario_with_only_the_reply_skill_changed() {
    skillhost_tests::assert_variant_of_scenario(
        "chat",
        "llm.toml",
        &[
            ("name = \"chat\"\n", "name = \"chat-llm\"\n"),
            ("chat-respond.wasm", "chat-respond-llm.wasm"),
            (
                "writes = [{ field = \"reply\", from = \"output\" }]\n",
                "capabilities = { llm = { provider = \"local\", model = \"qwen2.5:7b-instruct\", \
                 max_tokens = 400, temperature = 0 } }\n\
                 post = [{ name = \"states_the_value\", when = \"!(state.tool_result.tool in \
                 ['calculate', 'remember', 'recall']) || !state.tool_result.found || \
                 output.text.contains(state.tool_result.outcome)\", message = \"the model's \
                 reply does not state the value the tool returned\" }]\n\
                 writes = [{ field = \"reply\", from = \"output\" }]\n",
            ),
        ],
    );
}

/// `examples/chat/llm.toml` with the `local` provider pointing at a fake
/// model server (a hosted model is not reachable here) that answers every
/// request with `reply`.
fn chat_with_model(dir: &Path, message: &str, reply: &str) -> (Output, FakeLlmServer) {
    let server = FakeLlmServer::start();
    server.push(FakeReply::openai_content(reply));
    server.configure_user(dir);
    (chat(dir, "examples/chat/llm.toml", message), server)
}

#[test]
fn with_a_model_the_reply_is_its_own_and_rests_on_the_tool_result() {
    let dir = tempfile::tempdir().unwrap();
    let (out, server) = chat_with_model(
        dir.path(),
        "what is (2 + 3) * 4.5?",
        "  (2 + 3) * 4.5 comes to 22.5.\n",
    );
    let run = completed(&out);
    assert_eq!(
        run["state"]["reply"]["text"],
        "(2 + 3) * 4.5 comes to 22.5."
    );
    assert_eq!(run["usage"]["calls"], 1, "{run}");
    // The model was shown the calculator's value, computed by the Zig skill.
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].last_message_after("Tool result:\n").as_deref(),
        Some("22.5")
    );
    assert_eq!(
        path(dir.path(), &run),
        ["detect_tool", "needs_tools", "calculate", "respond"]
    );
}

#[test]
fn a_model_reply_that_misstates_the_value_fails_its_postcondition() {
    let dir = tempfile::tempdir().unwrap();
    let (out, _server) = chat_with_model(
        dir.path(),
        "what is (2 + 3) * 4.5?",
        "That is 23, give or take.",
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let run = json(&out);
    let failure = &run["failure"];
    assert_eq!(failure["node"], "respond", "{failure}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("the model's reply does not state the value the tool returned"),
        "{failure}"
    );
    assert!(!dir.path().join("reply.md").exists());
}

/// `host run --events` of `examples/chat/llm.toml` with `message`: the
/// events, one a line.
fn chat_events(dir: &Path, message: &str) -> Vec<Value> {
    let input = serde_json::json!({ "message": message }).to_string();
    let out = host(
        dir,
        &[
            "run",
            "examples/chat/llm.toml",
            "--input",
            &input,
            "--events",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    events(&out.stdout)
}

#[test]
fn with_a_streaming_model_the_reply_arrives_as_tokens_in_both_wire_formats() {
    let pieces = ["(2 + 3) ", "* 4.5 ", "comes ", "to ", "22.5."];
    for anthropic in [false, true] {
        let format = if anthropic { "anthropic" } else { "openai" };
        let dir = tempfile::tempdir().unwrap();
        let mut server = FakeLlmServer::start();
        let pause = std::time::Duration::from_millis(30);
        if anthropic {
            server.push(FakeReply::anthropic_stream(&pieces, pause, true));
            let config = dir.path().join("xdg-config/skillhost");
            std::fs::create_dir_all(&config).unwrap();
            std::fs::write(
                config.join("config.toml"),
                format!(
                    "[llm.providers.local]\nkind = \"anthropic\"\nbase_url = \"{}\"\n",
                    server.base_url()
                ),
            )
            .unwrap();
        } else {
            server.push(FakeReply::openai_stream(&pieces, pause, true));
            server.configure_user(dir.path());
        }
        let events = chat_events(dir.path(), "what is (2 + 3) * 4.5?");
        let run_id = events[0]["run_id"].as_str().unwrap().to_string();
        assert_eq!(server.requests()[0].json()["stream"], true, "{format}");
        // Each piece is a token of `respond`, in order, before it ends.
        let finished = events
            .iter()
            .position(|e| e["event"] == "node_finished" && e["node"] == "respond")
            .expect("respond finished");
        let tokens: Vec<(usize, &str)> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| e["event"] == "token")
            .map(|(i, e)| {
                assert_eq!(e["node"], "respond", "{format}: {e}");
                (i, e["text"].as_str().unwrap())
            })
            .collect();
        assert_eq!(
            tokens.iter().map(|(_, t)| *t).collect::<Vec<_>>(),
            pieces,
            "{format}"
        );
        assert!(tokens.iter().all(|(i, _)| *i < finished), "{format}");
        // The reply is the whole completion, checked as before.
        let shown = json(&host(
            dir.path(),
            &["runs", "show", &run_id, "--json"],
            None,
        ));
        assert_eq!(shown["status"], "completed", "{shown}");
        assert_eq!(
            shown["state"]["reply"]["text"], "(2 + 3) * 4.5 comes to 22.5.",
            "{format}"
        );
        // A replay needs no model.
        server.stop();
        let replay = host(dir.path(), &["replay", &run_id, "--json"], None);
        assert!(replay.status.success(), "{}", stderr(&replay));
        let replay = json(&replay);
        assert_eq!(replay["diverged_at"], Value::Null, "{format}: {replay}");
    }
}
