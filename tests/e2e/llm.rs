//! The `llm` capability end to end: `host check` of a scenario whose
//! provider the host's configuration lacks (or whose key is unset), `host
//! run` and `host runs show` of one that asks the fake model provider
//! (`skillhost_tests::fake_llm_server`: no hosted model is reachable here)
//! through a `skillhost.toml` beside it, and `host skill call --grant llm=…`.

use std::path::Path;

use serde_json::json;
use skillhost_tests::cli::{host, host_command, json, stderr};
use skillhost_tests::fake_llm_server::FakeLlmServer;

const KEY: &str = "sk-e2e-5ecret-7f3";
const KEY_VARIABLE: &str = "SKILLHOST_E2E_LLM_KEY";

/// The `llm-probe` fixture and a scenario asking it about `input.prompt`
/// with `local/qwen2.5:7b`, in `dir`.
fn scenario(dir: &Path) -> String {
    std::fs::write(
        dir.join("llm-probe.wasm"),
        skillhost_tests::fixture_component("llm-probe"),
    )
    .unwrap();
    let path = dir.join("ask.toml");
    std::fs::write(
        &path,
        r#"[scenario]
name = "ask"
version = "0.1.0"
token_budget = 1000

[input]
prompt = { type = "string" }

[state]
answer = { type = "string" }

[skills.probe]
component = "llm-probe.wasm"

[[node]]
id = "ask"
skill = "probe"
capabilities = { llm = "local/qwen2.5:7b" }
input = { messages = "[{'role': 'user', 'content': input.prompt}]", times = "1" }
writes = [{ field = "answer", from = "output.content" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "ask"
to = "done"
"#,
    )
    .unwrap();
    path.display().to_string()
}

/// `skillhost.toml` in `dir`: provider `local` at `server`, its key from
/// [`KEY_VARIABLE`].
fn configure(dir: &Path, server: &FakeLlmServer) {
    std::fs::write(
        dir.join("skillhost.toml"),
        format!(
            "[llm.providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"{KEY_VARIABLE}\"\n",
            server.openai_base_url()
        ),
    )
    .unwrap();
}

#[test]
fn check_reports_a_provider_the_host_does_not_define_and_a_key_that_is_not_set() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());

    let check = host(dir.path(), &["check", "--json", &scenario], None);
    assert_eq!(check.status.code(), Some(2), "{}", stderr(&check));
    let report = json(&check);
    let errors = report["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{report}");
    assert_eq!(errors[0]["code"], "llm-provider-not-configured");
    assert_eq!(errors[0]["node"], "ask");
    assert_eq!(errors[0]["line"], 18);
    let message = errors[0]["message"].as_str().unwrap();
    // Every place looked at, and what to write.
    for said in [
        format!("{}/skillhost.toml", dir.path().display()),
        "$SKILLHOST_CONFIG (not set)".to_string(),
        format!("{}/xdg-config/skillhost/config.toml", dir.path().display()),
        "[llm.providers.local]".to_string(),
        "kind = \"openai\"".to_string(),
    ] {
        assert!(message.contains(&said), "`{said}` not in: {message}");
    }

    // Defined, but its key's variable is not set.
    let server = FakeLlmServer::start();
    configure(dir.path(), &server);
    let check = host(dir.path(), &["check", &scenario], None);
    assert_eq!(check.status.code(), Some(2));
    let text = stderr(&check);
    assert!(
        text.contains(&format!("takes its API key from ${KEY_VARIABLE}")),
        "{text}"
    );

    // Set: the scenario passes.
    let mut check = host_command(dir.path(), &["check", &scenario], None);
    check.env(KEY_VARIABLE, KEY);
    let check = check.output().unwrap();
    assert!(check.status.success(), "{}", stderr(&check));

    // A configuration file with a key the format does not have names it.
    std::fs::write(
        dir.path().join("skillhost.toml"),
        "[llm.providers.local]\nkind = \"openai\"\nmodel = \"x\"\n",
    )
    .unwrap();
    let check = host(dir.path(), &["check", &scenario], None);
    assert_eq!(check.status.code(), Some(2));
    let text = stderr(&check);
    assert!(text.contains("skillhost.toml`, line 3"), "{text}");
    assert!(text.contains("unknown field `model`"), "{text}");
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_run_asks_the_configured_provider_and_shows_its_usage_without_the_key() {
    let server = FakeLlmServer::start();
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    configure(dir.path(), &server);

    let mut run = host_command(
        dir.path(),
        &[
            "run",
            &scenario,
            "--input",
            r#"{"prompt": "three little words"}"#,
            "--json",
        ],
        None,
    );
    run.env(KEY_VARIABLE, KEY);
    let out = run.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = json(&out);
    assert_eq!(summary["state"]["answer"], "echo: three little words");
    assert_eq!(
        summary["usage"],
        json!({ "input_tokens": 3, "output_tokens": 4, "calls": 1 })
    );
    let sent = server.requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let run_id = summary["run_id"].as_str().unwrap();

    let shown = json(&host(dir.path(), &["runs", "show", run_id, "--json"], None));
    assert_eq!(
        shown["usage"],
        json!({ "input_tokens": 3, "output_tokens": 4, "calls": 1 })
    );
    assert_eq!(
        shown["steps"][0]["detail"]["usage"],
        json!({ "input_tokens": 3, "output_tokens": 4, "calls": 1 })
    );
    let journal = shown["journal"].as_array().unwrap();
    assert_eq!(journal[0]["kind"], "llm");
    assert_eq!(journal[0]["request"]["provider"], "local");
    assert_eq!(journal[0]["request"]["model"], "qwen2.5:7b");
    assert_eq!(
        journal[0]["response"]["ok"]["content"],
        "echo: three little words"
    );

    let human = host(dir.path(), &["runs", "show", run_id], None);
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    for said in [
        "llm       7 tokens (3 in, 4 out) in 1 completion(s)",
        "      llm: 7 tokens (3 in, 4 out) in 1 completion(s)",
        "journal: llm local/qwen2.5:7b, 1 message(s) -> 3 in, 4 out tokens",
    ] {
        assert!(human.contains(said), "`{said}` not in:\n{human}");
    }

    // Nothing the host wrote holds the key: its output, the database and
    // its write-ahead log.
    let mut written = format!(
        "{}{}{shown}{human}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() && path.file_name().is_some_and(|n| n != "skillhost.toml") {
            written.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    assert!(dir.path().join("runs.db").exists());
    assert!(!written.contains("5ecret"), "the key was written");
}

#[test]
fn skill_call_grants_a_model_of_the_configuration_where_it_runs() {
    let server = FakeLlmServer::start();
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    configure(dir.path(), &server);
    let input = r#"{"messages": [{"role": "user", "content": "hi there"}], "times": 1}"#;

    let mut call = host_command(
        dir.path(),
        &[
            "skill",
            "call",
            "llm-probe.wasm",
            "--grant",
            "llm=local/m",
            "--input",
            input,
            "--json",
        ],
        None,
    );
    call.current_dir(dir.path()).env(KEY_VARIABLE, KEY);
    let out = call.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["output"]["content"], "echo: hi there");
    assert_eq!(report["output"]["model"], "m");
    assert_eq!(
        report["usage"],
        json!({ "input_tokens": 2, "output_tokens": 3, "calls": 1 })
    );
    assert_eq!(server.request_count(), 1);

    // A provider that is not configured is refused before the skill runs.
    let mut call = host_command(
        dir.path(),
        &[
            "skill",
            "call",
            "llm-probe.wasm",
            "--grant",
            "llm=nowhere/m",
            "--input",
            input,
        ],
        None,
    );
    call.current_dir(dir.path()).env(KEY_VARIABLE, KEY);
    let out = call.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let text = stderr(&out);
    assert!(
        text.contains("provider `nowhere` is not configured"),
        "{text}"
    );
    assert!(text.contains("it defines `local`"), "{text}");
    assert_eq!(server.request_count(), 1);
}
