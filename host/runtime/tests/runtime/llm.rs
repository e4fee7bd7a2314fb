//! The `llm` capability through the `llm-probe` fixture against the fake
//! model provider (`skillhost_tests::fake_llm_server`, a real HTTP server on
//! 127.0.0.1 answering as a provider would: no hosted model is reachable
//! here). Everything else is real: the host configuration, the client, both
//! wire formats, retries, the deadline, the output check, the budget, the
//! journal and its replay.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost_runtime::{
    Backends, CallError, CallOptions, CallReport, Capability, Grants, HostConfig, JournalMode,
    Limits, Lookup, Skill, TokenUsage,
};
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply};

const KEY: &str = "sk-fake-5ecret-0451";
const KEY_VARIABLE: &str = "FAKE_LLM_API_KEY";

/// A provider `local` (OpenAI format) and `claude` (Anthropic format), both
/// at `server`, both with the key, plus `extra` lines for `local`.
fn config_text(server: &FakeLlmServer, extra: &str) -> String {
    format!(
        "[llm.providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\napi_key_env = \"{KEY_VARIABLE}\"\n{extra}\n\
         [llm.providers.claude]\nkind = \"anthropic\"\nbase_url = \"{}\"\napi_key_env = \"{KEY_VARIABLE}\"\n{extra}\n",
        server.openai_base_url(),
        server.base_url()
    )
}

fn backends(config: &str) -> Backends {
    let env = |name: &str| (name == KEY_VARIABLE).then(|| KEY.to_string());
    let looked = vec![Lookup {
        path: Some("/project/skillhost.toml".into()),
        what: "the scenario's directory",
        used: true,
    }];
    let config = HostConfig::parse(config, Path::new("/project/skillhost.toml"), looked, &env)
        .expect("a valid configuration");
    Backends {
        llm: config.llm,
        ..Backends::default()
    }
}

struct Probe {
    _cache: tempfile::TempDir,
    skill: Arc<Skill>,
}

fn probe(backends: Backends) -> Probe {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime_with_backends(cache.path(), backends);
    let skill = runtime
        .load_bytes(
            skillhost_tests::fixture_component("llm-probe"),
            "llm-probe.wasm",
        )
        .expect("load llm-probe");
    Probe {
        _cache: cache,
        skill,
    }
}

fn probe_at(server: &FakeLlmServer, extra: &str) -> Probe {
    probe(backends(&config_text(server, extra)))
}

fn granted(grant: &str) -> CallOptions {
    let mut grants = Grants::default();
    grants.add("llm", grant).expect("a valid grant");
    CallOptions {
        grants: Arc::new(grants),
        ..CallOptions::default()
    }
}

fn ask(prompt: &str) -> Value {
    json!({ "messages": [{ "role": "user", "content": prompt }], "times": 1 })
}

/// The skill error's code, message and retryable of a call that failed.
fn failure(report: &CallReport) -> (String, String, bool) {
    match &report.result {
        Err(CallError::Skill {
            code,
            message,
            retryable,
            ..
        }) => (code.clone(), message.clone(), *retryable),
        other => panic!("expected a skill error, got {other:?}"),
    }
}

#[test]
fn an_openai_provider_answers_and_the_call_is_journaled_without_the_key() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    let input = json!({
        "messages": [
            { "role": "system", "content": "be brief" },
            { "role": "user", "content": "hello there" },
        ],
        "temperature": 0.7,
        "times": 1,
    });
    let report = probe.skill.call(&input, &granted("local/qwen2.5:7b"));
    let journal = report.journal.clone();
    let usage = report.usage;
    let out = report.into_result().expect("the completion succeeds");
    assert_eq!(out["content"], "echo: hello there");
    assert_eq!(out["model"], "qwen2.5:7b");
    assert_eq!(
        (out["input_tokens"].as_u64(), out["output_tokens"].as_u64()),
        (Some(4), Some(3))
    );
    assert_eq!(
        usage,
        TokenUsage {
            input_tokens: 4,
            output_tokens: 3,
            calls: 1
        }
    );

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let sent = &requests[0];
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(
        sent.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    let body = sent.json();
    assert_eq!(body["model"], "qwen2.5:7b");
    assert_eq!(body["max_tokens"], 1024, "the default cap");
    assert_eq!(body["temperature"], json!(0.7), "0.7, not the f32's digits");
    assert_eq!(
        body["messages"][0],
        json!({ "role": "system", "content": "be brief" })
    );

    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].capability, Capability::Llm);
    assert_eq!(
        journal[0].request,
        json!({
            "provider": "local",
            "model": "qwen2.5:7b",
            "messages": [
                { "role": "system", "content": "be brief" },
                { "role": "user", "content": "hello there" },
            ],
            "max_tokens": 1024,
            "temperature": 0.7,
            "json_schema": null,
        })
    );
    assert_eq!(
        journal[0].response,
        json!({ "ok": { "content": "echo: hello there", "model": "qwen2.5:7b", "input_tokens": 4, "output_tokens": 3 } })
    );
    let written = format!("{journal:?}{:?}", probe.skill);
    assert!(!written.contains(KEY), "the key reached the journal");
}

#[test]
fn an_anthropic_provider_gets_its_key_header_and_the_system_prompt_apart() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    let input = json!({
        "messages": [
            { "role": "system", "content": "be brief" },
            { "role": "user", "content": "hello there" },
        ],
        "times": 1,
    });
    let out = probe
        .skill
        .call(&input, &granted("claude/claude-test"))
        .into_result()
        .expect("the completion succeeds");
    assert_eq!(out["content"], "echo: hello there");
    assert_eq!(out["model"], "claude-test");
    let sent = &server.requests()[0];
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.header("x-api-key"), Some(KEY));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    let body = sent.json();
    assert_eq!(body["system"], "be brief");
    assert_eq!(
        body["messages"],
        json!([{ "role": "user", "content": "hello there" }])
    );
}

#[test]
fn the_grant_caps_and_defaults_the_request() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    let grant = r#"{"provider": "local", "model": "m", "max_tokens": 100, "temperature": 0.2}"#;
    let mut asked = ask("hi");
    asked["max_tokens"] = json!(500);
    probe
        .skill
        .call(&asked, &granted(grant))
        .into_result()
        .unwrap();
    let mut below = ask("hi");
    below["max_tokens"] = json!(50);
    below["temperature"] = json!(1);
    probe
        .skill
        .call(&below, &granted(grant))
        .into_result()
        .unwrap();
    let sent: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(
        (
            sent[0]["max_tokens"].clone(),
            sent[0]["temperature"].clone()
        ),
        (json!(100), json!(0.2))
    );
    assert_eq!(
        (
            sent[1]["max_tokens"].clone(),
            sent[1]["temperature"].clone()
        ),
        (json!(50), json!(1.0))
    );
}

#[test]
fn without_a_grant_the_capability_is_denied_and_bad_grants_are_refused() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    let report = probe.skill.call(&ask("hi"), &CallOptions::default());
    assert_eq!(report.denied, [Capability::Llm]);
    assert!(
        matches!(report.result, Err(CallError::CapabilityDenied { .. })),
        "{:?}",
        report.result
    );
    assert!(report.journal.is_empty());
    assert_eq!(server.request_count(), 0);

    let mut grants = Grants::default();
    let error = grants
        .add("llm", r#"{"provider": "local"}"#)
        .unwrap_err()
        .to_string();
    assert!(error.contains("needs `model`"), "{error}");
    assert!(error.contains("llm = \"local/qwen2.5:7b\""), "{error}");
}

#[test]
fn a_provider_missing_from_the_configuration_is_named_with_where_it_was_looked_for() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    let report = probe.skill.call(&ask("hi"), &granted("nowhere/m"));
    let (code, message, retryable) = failure(&report);
    assert_eq!(code, "provider-not-configured");
    assert!(!retryable);
    assert!(
        message.contains("provider `nowhere` is not configured"),
        "{message}"
    );
    assert!(
        message.contains("it defines `claude`, `local`"),
        "{message}"
    );
    assert!(message.contains("[llm.providers.nowhere]"), "{message}");
    assert_eq!(server.request_count(), 0);
}

#[test]
fn structured_output_that_fits_is_returned_in_both_formats() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    let schema = json!({
        "type": "object",
        "properties": { "title": { "type": "string" }, "year": { "type": "integer", "minimum": 1900 } },
        "required": ["title", "year"],
        "additionalProperties": false,
    });
    let mut input = ask("summarize");
    input["json_schema"] = json!(schema.to_string());
    for grant in ["local/m", "claude/m"] {
        let out = probe
            .skill
            .call(&input, &granted(grant))
            .into_result()
            .unwrap_or_else(|e| panic!("{grant}: {e}"));
        let content: Value = serde_json::from_str(out["content"].as_str().unwrap()).unwrap();
        assert_eq!(content, json!({ "title": "fake", "year": 1900 }), "{grant}");
    }
    let sent: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(sent[0]["response_format"]["json_schema"]["schema"], schema);
    assert_eq!(sent[0]["response_format"]["json_schema"]["strict"], true);
    assert_eq!(sent[1]["tools"][0]["input_schema"], schema);
    assert_eq!(
        sent[1]["tool_choice"],
        json!({ "type": "tool", "name": "output" })
    );

    // A schema of something else than an object is asked for wrapped, and
    // answered unwrapped.
    input["json_schema"] =
        json!(json!({ "type": "array", "items": { "type": "string" }, "minItems": 2 }).to_string());
    for grant in ["local/m", "claude/m"] {
        let out = probe
            .skill
            .call(&input, &granted(grant))
            .into_result()
            .unwrap();
        assert_eq!(out["content"], r#"["fake","fake"]"#, "{grant}");
    }
}

#[test]
fn output_that_does_not_fit_the_schema_is_a_retryable_invalid_output() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    let mut input = ask("summarize");
    input["json_schema"] = json!(
        r#"{"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}"#
    );
    server.push(FakeReply::openai_content("Sure! Here is the summary."));
    let report = probe.skill.call(&input, &granted("local/m"));
    let (code, message, retryable) = failure(&report);
    assert_eq!(code, "invalid-output");
    assert!(retryable);
    assert!(message.contains("is not JSON"), "{message}");
    assert!(message.contains("Sure! Here is"), "{message}");
    // The provider answered: its answer is journaled and its tokens count.
    assert_eq!(report.journal.len(), 1);
    assert!(report.journal[0].response.get("ok").is_some());
    assert_eq!(report.usage.calls, 1);

    server.push(FakeReply::anthropic_text(r#"{"name": "x"}"#));
    let (code, message, _) = failure(&probe.skill.call(&input, &granted("claude/m")));
    assert_eq!(code, "invalid-output");
    assert!(
        message.contains("\"title\" is a required property"),
        "{message}"
    );
}

#[test]
fn a_schema_that_is_not_json_schema_is_an_invalid_request_sent_nowhere() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    for schema in ["{not json", r#"{"type": "no-such-type"}"#] {
        let mut input = ask("x");
        input["json_schema"] = json!(schema);
        let report = probe.skill.call(&input, &granted("local/m"));
        let (code, message, retryable) = failure(&report);
        assert_eq!(code, "invalid-request", "{schema}");
        assert!(message.contains("json-schema"), "{message}");
        assert!(!retryable);
        assert!(report.journal.is_empty());
    }
    let report = probe
        .skill
        .call(&json!({ "messages": [], "times": 1 }), &granted("local/m"));
    assert_eq!(failure(&report).0, "invalid-request");
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_429_is_retried_after_what_retry_after_asks() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    server.push(FakeReply::error(429, "slow down").with_header("Retry-After", "1"));
    let start = Instant::now();
    let report = probe.skill.call(&ask("hi"), &granted("local/m"));
    let elapsed = start.elapsed();
    assert_eq!(
        report.journal.len(),
        1,
        "one completion, however many requests"
    );
    report.into_result().expect("the retry succeeds");
    assert!(elapsed >= Duration::from_secs(1), "waited {elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "waited {elapsed:?}");
    assert_eq!(server.request_count(), 2);
}

#[test]
fn a_provider_that_stays_unavailable_fails_after_its_retries() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "max_retries = 2");
    for _ in 0..3 {
        server.push(FakeReply::error(503, "overloaded").with_header("Retry-After", "0"));
    }
    let report = probe.skill.call(&ask("hi"), &granted("claude/m"));
    let (code, message, retryable) = failure(&report);
    assert_eq!(code, "provider-unavailable");
    assert!(retryable, "the node's retry policy may try again later");
    assert!(
        message.contains("answered 503 (overloaded) to each of 3 attempt(s)"),
        "{message}"
    );
    assert_eq!(server.request_count(), 3);
    // The error is what the journal records.
    assert_eq!(
        report.journal[0].response["error"]["code"],
        "provider-unavailable"
    );
}

#[test]
fn errors_of_the_provider_are_named_and_not_retried() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    server.push(FakeReply::error(401, "invalid x-api-key"));
    let (code, message, retryable) = failure(&probe.skill.call(&ask("hi"), &granted("claude/m")));
    assert_eq!(code, "provider-error");
    assert!(!retryable);
    assert!(
        message.contains("refused the request with 401 (invalid x-api-key)"),
        "{message}"
    );
    assert!(
        message.contains(&format!("check the API key in ${KEY_VARIABLE}")),
        "{message}"
    );
    assert!(!message.contains(KEY));

    server.push(FakeReply::error(400, "model `m` does not exist"));
    let (code, message, _) = failure(&probe.skill.call(&ask("hi"), &granted("local/m")));
    assert_eq!(code, "provider-error");
    assert!(
        message.contains("answered 400 to model `m`: model `m` does not exist"),
        "{message}"
    );

    server.push(FakeReply::text(200, "<html>gateway</html>"));
    let (code, message, _) = failure(&probe.skill.call(&ask("hi"), &granted("local/m")));
    assert_eq!(code, "provider-error");
    assert!(message.contains("provider `local` (openai)"), "{message}");
    assert!(message.contains("not JSON"), "{message}");

    server.push(FakeReply::json(
        200,
        json!({ "content": [{ "type": "text", "text": "hi" }] }),
    ));
    let (_, message, _) = failure(&probe.skill.call(&ask("hi"), &granted("claude/m")));
    assert!(message.contains("no `usage.input_tokens`"), "{message}");
    assert_eq!(server.request_count(), 4, "none of them retried");
}

#[test]
fn the_deadline_holds_against_a_provider_that_never_answers() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    server.push(FakeReply::Silent);
    let mut options = granted("local/m");
    options.limits = Limits {
        timeout: Duration::from_millis(800),
        ..Limits::default()
    };
    let start = Instant::now();
    let report = probe.skill.call(&ask("hi"), &options);
    let elapsed = start.elapsed();
    assert!(elapsed < Duration::from_millis(2500), "took {elapsed:?}");
    // The request gives up at the deadline; the guest is stopped there too.
    match &report.result {
        Err(CallError::Timeout { .. }) => {}
        Err(CallError::Skill { code, .. }) if code == "timeout" => {}
        other => panic!("expected a timeout, got {other:?}"),
    }

    // A Retry-After past the deadline is not waited for.
    server.push(FakeReply::error(429, "later").with_header("Retry-After", "60"));
    let start = Instant::now();
    let report = probe.skill.call(&ask("hi"), &options);
    assert!(start.elapsed() < Duration::from_millis(800));
    let (code, message, _) = failure(&report);
    assert_eq!(code, "provider-unavailable");
    assert!(
        message.contains("would pass the call's deadline"),
        "{message}"
    );
}

#[test]
fn a_spent_budget_refuses_the_next_completion() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    let mut options = granted("local/m");
    options.token_budget = Some(0);
    let report = probe.skill.call(&ask("hi"), &options);
    let (code, message, retryable) = failure(&report);
    assert_eq!(code, "token-budget-exceeded");
    assert!(!retryable);
    assert!(message.contains("no tokens are left"), "{message}");
    assert_eq!(server.request_count(), 0);

    // Two completions of 2 + 3 tokens each with 4 left: the first is
    // answered and uses it up, the second is refused.
    options.token_budget = Some(4);
    let mut twice = ask("hi there");
    twice["times"] = json!(2);
    let report = probe.skill.call(&twice, &options);
    assert_eq!(failure(&report).0, "token-budget-exceeded");
    assert_eq!(server.request_count(), 1);
    assert_eq!(
        report.usage,
        TokenUsage {
            input_tokens: 2,
            output_tokens: 3,
            calls: 1
        }
    );
    // Enough for both.
    options.token_budget = Some(10);
    let report = probe.skill.call(&twice, &options);
    assert_eq!(report.usage.calls, 2);
    report.into_result().unwrap();
}

#[test]
fn a_replay_answers_from_the_journal_with_the_provider_gone() {
    let mut server = FakeLlmServer::start();
    let probe_live = probe_at(&server, "");
    let mut input = ask("hello");
    input["times"] = json!(2);
    let recorded = probe_live.skill.call(&input, &granted("local/m"));
    let journal = recorded.journal.clone();
    let usage = recorded.usage;
    let output = recorded.into_result().unwrap();
    assert_eq!(journal.len(), 2);
    server.stop();
    let sent = server.request_count();

    // A runtime without any provider configured: a replay needs none.
    let replaying = probe(Backends::default());
    let mut options = granted("local/m");
    options.journal = JournalMode::Replay(journal.clone().into());
    let replayed = replaying.skill.call(&input, &options);
    assert_eq!(replayed.journal, journal);
    assert_eq!(replayed.usage, usage, "replayed tokens count as recorded");
    assert_eq!(replayed.into_result().unwrap(), output);
    assert_eq!(server.request_count(), sent);

    // A replay that asks something else diverges.
    let mut other = input.clone();
    other["messages"][0]["content"] = json!("something else");
    let diverged = replaying.skill.call(&other, &options);
    match diverged.result {
        Err(CallError::JournalMismatch {
            capability, entry, ..
        }) => {
            assert_eq!((capability.as_str(), entry), ("llm", 0));
        }
        other => panic!("expected a journal mismatch, got {other:?}"),
    }
}

#[test]
fn a_provider_error_of_megabytes_reaches_the_skill_as_a_short_excerpt() {
    let server = FakeLlmServer::start();
    let probe = probe_at(&server, "");
    let huge = "z".repeat(5 << 20);
    for (reply, grant) in [
        (FakeReply::error(400, &huge), "local/m"),
        (FakeReply::error(400, &huge), "claude/m"),
        (FakeReply::text(422, &huge), "local/m"),
    ] {
        server.push(reply);
        let report = probe.skill.call(&ask("hi"), &granted(grant));
        let (code, message, _) = failure(&report);
        assert_eq!(code, "provider-error", "{grant}");
        assert!(message.contains("zzzz"), "{grant}: {message}");
        assert!(
            message.contains("(cut: the provider's message is longer)"),
            "{grant}: {message}"
        );
        assert!(
            message.len() < 2048,
            "{grant}: the error holds {} bytes",
            message.len()
        );
        // The journal records the same short error.
        let recorded = report.journal[0].response.to_string();
        assert!(recorded.len() < 4096, "{grant}: {} bytes", recorded.len());
    }
}
