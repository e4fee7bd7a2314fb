//! Nodes whose skill asks a model: what their completions used is in their
//! step rows (`detail.usage`, only when there was any), summed over a map
//! node's items and over retried attempts, and counted against the run's
//! `token_budget`, also after a resume. The `llm-probe` fixture asks the
//! fake model provider (`skillhost_tests::fake_llm_server`), which answers
//! `echo: ` and the prompt and counts words as tokens: a prompt of `n`
//! words costs `n` in and `n + 1` out.

use std::sync::Arc;

use serde_json::{Value, json};
use skillhost_engine::Event;
use skillhost_runtime::{Backends, HostConfig, Runtime, TokenUsage};
use skillhost_scenario::LoadedScenario;
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply};

use crate::{Db, completed, crash, failed, resume, run, run_both};

/// A fake provider, and a scenario next to `llm-probe` and a
/// `skillhost.toml` naming it `local`: a node asking about `input.prompt`,
/// a gate, and a map node asking about each of `['a b', 'c d e']`.
pub(crate) struct Setup {
    pub server: FakeLlmServer,
    pub loaded: Arc<LoadedScenario>,
    _runtime: Runtime,
    _dir: tempfile::TempDir,
}

fn setup(header: &str, ask: &str) -> Setup {
    setup_scenario(&scenario_text(header, ask))
}

/// A fake provider, and scenario `text` next to `llm-probe` and a
/// `skillhost.toml` naming the provider `local`, loaded.
pub(crate) fn setup_scenario(text: &str) -> Setup {
    let server = FakeLlmServer::start();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("llm-probe.wasm"),
        skillhost_tests::fixture_component("llm-probe"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("skillhost.toml"),
        server.local_provider_config(),
    )
    .unwrap();
    let path = dir.path().join("scenario.toml");
    std::fs::write(&path, text).unwrap();
    let config = HostConfig::load_with(dir.path(), &|_: &str| None).expect("the configuration");
    let runtime = skillhost_tests::runtime_with_backends(
        &dir.path().join("cache"),
        Backends {
            llm: config.llm,
            ..Backends::default()
        },
    );
    let loaded = skillhost_scenario::load(&path, &runtime)
        .unwrap_or_else(|report| panic!("the scenario does not load:\n{report}"));
    Setup {
        server,
        loaded: Arc::new(loaded),
        _runtime: runtime,
        _dir: dir,
    }
}

/// `header` goes into `[scenario]`; `ask` ends the first node's input
/// table (` }` when it adds nothing) and may add lines to the node.
fn scenario_text(header: &str, ask: &str) -> String {
    format!(
        r#"[scenario]
name = "llm-usage"
{header}

[input]
prompt = {{ type = "string" }}

[config]
schema = '{{"type": "object", "properties": {{"title": {{"type": "string"}}}}, "required": ["title"]}}'

[state]
answer = {{ type = "string" }}
answers = {{ type = "array" }}

[skills.probe]
component = "llm-probe.wasm"

[[node]]
id = "ask"
skill = "probe"
capabilities = {{ llm = "local/m" }}
input = {{ messages = "[{{'role': 'user', 'content': input.prompt}}]", times = "1"{ask}
writes = [{{ field = "answer", from = "output.content" }}]

[[node]]
id = "check"
kind = "gate"
pre = [{{ name = "answered", when = "state.answer != ''", message = "no answer" }}]

[[node]]
id = "ask_each"
kind = "map"
skill = "probe"
capabilities = {{ llm = {{ provider = "local", model = "m", max_tokens = 64 }} }}
over = "['a b', 'c d e']"
concurrency = 1
input = {{ messages = "[{{'role': 'user', 'content': item}}]", times = "1" }}
writes = [{{ field = "answers", from = "output.map(o, o.content)" }}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "ask"
to = "check"

[[edge]]
from = "check"
to = "ask_each"

[[edge]]
from = "ask_each"
to = "done"
"#
    )
}

fn usage(input_tokens: u64, output_tokens: u64, calls: u64) -> TokenUsage {
    TokenUsage {
        input_tokens,
        output_tokens,
        calls,
    }
}

/// `detail.usage` of each step row, by node and attempt.
fn step_usage(steps: &[skillhost_store::StepRow]) -> Vec<(String, u32, Option<TokenUsage>)> {
    steps
        .iter()
        .map(|s| {
            let usage = s
                .detail
                .as_ref()
                .and_then(|d| d.get("usage"))
                .map(|u| TokenUsage::from_json(u).expect("a usage"));
            (s.node_id.clone(), s.attempt, usage)
        })
        .collect()
}

#[tokio::test]
async fn usage_is_in_the_steps_that_asked_and_summed_over_a_maps_items() {
    let setup = setup("", " }");
    let (ran, db) = run_both(&setup.loaded, json!({ "prompt": "one two three" })).await;
    completed(&ran);
    assert_eq!(ran.state()["answer"], "echo: one two three");
    assert_eq!(ran.state()["answers"], json!(["echo: a b", "echo: c d e"]));
    let steps = db.steps(&ran.outcome.run_id).await;
    assert_eq!(
        step_usage(&steps),
        [
            ("ask".to_string(), 1, Some(usage(3, 4, 1))),
            // A node that asked nothing stores nothing for it.
            ("check".to_string(), 1, None),
            ("ask_each".to_string(), 1, Some(usage(5, 7, 2))),
        ]
    );
    assert_eq!(ran.outcome.tokens_used, usage(8, 11, 3));
    // The map's grant caps each item's request.
    let sent: Vec<Value> = setup.server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(sent.last().unwrap()["max_tokens"], 64);
}

#[tokio::test]
async fn a_retried_attempts_tokens_are_in_its_own_row_and_count() {
    let setup = setup(
        "",
        ", json_schema = \"config.schema\" }\nretry = { max_attempts = 2, backoff_ms = 0 }",
    );
    // Text where a schema was asked for: `invalid-output`, retried; the
    // second answer fits.
    setup
        .server
        .push(FakeReply::openai_content("not json at all"));
    let db = Db::sqlite().await;
    let ran = run(
        Some(db.store.clone()),
        &setup.loaded,
        json!({ "prompt": "one two three" }),
    )
    .await;
    completed(&ran);
    assert_eq!(ran.state()["answer"], r#"{"title":"fake"}"#);
    let steps = db.steps(&ran.outcome.run_id).await;
    assert_eq!(
        step_usage(&steps),
        [
            // The scripted answer reports 1 token in.
            ("ask".to_string(), 1, Some(usage(1, 4, 1))),
            ("ask".to_string(), 2, Some(usage(3, 1, 1))),
            ("check".to_string(), 1, None),
            ("ask_each".to_string(), 1, Some(usage(5, 7, 2))),
        ]
    );
    assert_eq!(steps[0].error.as_ref().unwrap()["code"], "invalid-output");
    assert_eq!(ran.outcome.tokens_used, usage(9, 12, 4));
    assert_eq!(skillhost_engine::tokens_used(&steps), usage(9, 12, 4));
}

#[tokio::test]
async fn a_node_that_brings_the_run_past_its_budget_fails() {
    // `ask` uses 7, leaving 3; the map's items each start with those 3 and
    // use 5 and 7: the run reaches 19, past 10.
    let setup = setup("token_budget = 10", " }");
    let (ran, db) = run_both(&setup.loaded, json!({ "prompt": "one two three" })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "token-budget-exceeded");
    assert_eq!(error["node"], "ask_each");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(
            "node `ask_each` used 12 tokens (5 in, 7 out, in 2 completion(s)), which brings the \
             run to 19 tokens, past its token_budget of 10"
        ),
        "{message}"
    );
    assert_eq!(error["detail"]["token_budget"], 10);
    assert!(
        error["suggestions"][0]
            .as_str()
            .unwrap()
            .contains("token_budget")
    );
    assert_eq!(ran.outcome.tokens_used.total(), 19);
    // The failed node's step keeps what it used, and its completions are
    // journaled with it.
    let steps = db.steps(&ran.outcome.run_id).await;
    let last = steps.last().unwrap();
    assert_eq!(
        (last.node_id.as_str(), last.status.as_str()),
        ("ask_each", "failed")
    );
    assert_eq!(step_usage(&steps)[2].2, Some(usage(5, 7, 2)));
    let journal = db.store.journal(&ran.outcome.run_id).await.unwrap();
    assert_eq!(
        journal.iter().filter(|j| j.node_id == "ask_each").count(),
        2
    );
}

#[tokio::test]
async fn once_the_budget_is_spent_completions_are_refused() {
    // `ask` uses exactly the 7 tokens of the budget: the map's items are
    // refused before they reach the provider.
    let setup = setup("token_budget = 7", " }");
    let ran = run(None, &setup.loaded, json!({ "prompt": "one two three" })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "token-budget-exceeded");
    assert_eq!(error["node"], "ask_each");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("no tokens are left"),
        "{error}"
    );
    assert_eq!(setup.server.request_count(), 1);
    assert_eq!(ran.outcome.tokens_used, usage(3, 4, 1));
}

#[tokio::test]
async fn a_resumed_run_counts_what_it_used_before() {
    // Within 12 if only the map node counted (12); past it with `ask`'s 7.
    let setup = setup("token_budget = 12", " }");
    let db = Db::sqlite().await;
    let input = json!({ "prompt": "one two three" });
    let run_id = crash(
        &db.url,
        &setup.loaded,
        input,
        |event| matches!(event, Event::CheckpointWritten { node, .. } if node == "check"),
    )
    .await;
    let ran = resume(db.reopen().await, &setup.loaded, &run_id)
        .await
        .expect("the run resumes");
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "token-budget-exceeded");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("brings the run to 19 tokens, past its token_budget of 12"),
        "{error}"
    );
    assert_eq!(ran.outcome.tokens_used.total(), 19);
}
