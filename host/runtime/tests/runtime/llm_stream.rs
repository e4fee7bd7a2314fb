//! Streamed completions (`skillhost:skill/llm-stream`) through the
//! `llm-stream-probe` skill (an async Rust component, shipped in
//! `skills/dist`) against the fake model provider streaming both wire
//! formats: OpenAI-compatible `stream: true` server-sent events and
//! Anthropic's event stream, with pauses, a connection cut mid-stream, an
//! `error` event, and hostile providers (a stream that never ends, a giant
//! line, too many bytes). The journal records the deltas as the skill was
//! handed them, so a replay with no provider reproduces the output byte for
//! byte.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost_runtime::{
    Backends, CallError, CallOptions, CallReport, Grants, HostConfig, JournalMode, LoadError,
    Lookup, Skill, TokenSink,
};
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply};

struct Probe {
    _cache: tempfile::TempDir,
    skill: Arc<Skill>,
}

fn backends(server: &FakeLlmServer) -> Backends {
    let config = format!(
        "[llm.providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\nmax_retries = 0\n\
         [llm.providers.claude]\nkind = \"anthropic\"\nbase_url = \"{}\"\nmax_retries = 0\n",
        server.openai_base_url(),
        server.base_url()
    );
    let looked = vec![Lookup {
        path: Some("/project/skillhost.toml".into()),
        what: "the scenario's directory",
        used: true,
    }];
    let config = HostConfig::parse(
        &config,
        Path::new("/project/skillhost.toml"),
        looked,
        &|_| None,
    )
    .expect("a valid configuration");
    Backends {
        llm: config.llm,
        ..Backends::default()
    }
}

impl Probe {
    /// After a failed or abandoned stream, the skill's next call streams as
    /// usual (the fake provider echoes what it is asked).
    fn still_streams(&self) {
        let out = self
            .skill
            .call(&ask("fine"), &granted("local/m"))
            .into_result()
            .expect("the next call works");
        assert_eq!(out["text"], "echo: fine");
    }
}

fn probe(backends: Backends) -> Probe {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime_with_backends(cache.path(), backends);
    let skill = runtime
        .load_file(&skillhost_tests::dist("llm-stream-probe"))
        .expect("load llm-stream-probe");
    Probe {
        _cache: cache,
        skill,
    }
}

fn granted(grant: &str) -> CallOptions {
    let mut grants = Grants::default();
    grants.add("llm", grant).expect("a valid grant");
    CallOptions {
        grants: Arc::new(grants),
        ..CallOptions::default()
    }
}

/// Every delta a sink was handed: the stream's index and the text.
type Seen = Arc<Mutex<Vec<(u32, String)>>>;

/// The options of `granted`, with a sink that keeps every delta.
fn watched(grant: &str) -> (CallOptions, Seen) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let keep = seen.clone();
    let options = CallOptions {
        tokens: Some(TokenSink::new(move |delta| {
            keep.lock()
                .unwrap()
                .push((delta.stream, delta.text.to_string()))
        })),
        ..granted(grant)
    };
    (options, seen)
}

fn ask(prompt: &str) -> Value {
    json!({ "prompt": prompt, "streams": 1 })
}

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
fn an_openai_stream_reaches_the_skill_delta_by_delta_and_is_journaled() {
    let server = FakeLlmServer::start();
    let probe = probe(backends(&server));
    let (options, seen) = watched("local/qwen2.5:7b");
    let report = probe.skill.call(&ask("hello there world"), &options);
    let journal = report.journal.clone();
    let usage = report.usage;
    let out = report.into_result().expect("the stream completes");
    assert_eq!(out["text"], "echo: hello there world");
    assert_eq!(
        out["chunks"],
        json!(["echo: ", "hello ", "there ", "world"])
    );
    assert_eq!(out["model"], "qwen2.5:7b");
    assert_eq!(
        (out["input_tokens"].as_u64(), out["output_tokens"].as_u64()),
        (Some(3), Some(4))
    );
    assert_eq!(
        (usage.input_tokens, usage.output_tokens, usage.calls),
        (3, 4, 1)
    );
    // What people are shown is what the skill was handed, in order.
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen,
        [(0, "echo: "), (0, "hello "), (0, "there "), (0, "world")]
            .map(|(i, t)| (i, t.to_string()))
    );
    // The provider was asked to stream, with usage.
    let sent = server.requests()[0].json();
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"], json!({ "include_usage": true }));
    // The journal: the request (marked as streamed) and the deltas as
    // handed out, then the completion.
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].request["stream"], true);
    assert_eq!(journal[0].request["model"], "qwen2.5:7b");
    assert_eq!(
        journal[0].response["deltas"],
        json!(["echo: ", "hello ", "there ", "world"])
    );
    assert_eq!(
        journal[0].response["ok"]["content"],
        "echo: hello there world"
    );
}

#[test]
fn an_anthropic_stream_with_pauses_arrives_as_it_is_sent() {
    let server = FakeLlmServer::start();
    server.push(FakeReply::anthropic_stream(
        &["Once ", "upon ", "a time"],
        Duration::from_millis(150),
        true,
    ));
    let probe = probe(backends(&server));
    let (options, seen) = watched("claude/claude-sonnet-4");
    let started = Instant::now();
    let report = probe.skill.call(&ask("tell me"), &options);
    assert!(started.elapsed() >= Duration::from_millis(450));
    let out = report.into_result().expect("the stream completes");
    assert_eq!(out["text"], "Once upon a time");
    assert_eq!(out["chunks"], json!(["Once ", "upon ", "a time"]));
    assert_eq!(out["model"], "fake-model");
    assert_eq!(
        (out["input_tokens"].as_u64(), out["output_tokens"].as_u64()),
        (Some(1), Some(4))
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
    let sent = server.requests()[0].json();
    assert_eq!(sent["stream"], true);
    assert!(sent.get("stream_options").is_none(), "{sent}");
}

#[test]
fn a_stream_cut_mid_way_is_a_retryable_error_never_a_completion() {
    for (grant, reply) in [
        (
            "local/m",
            FakeReply::openai_stream(&["half ", "a "], Duration::from_millis(20), false),
        ),
        (
            "claude/m",
            FakeReply::anthropic_stream(&["half ", "a "], Duration::from_millis(20), false),
        ),
    ] {
        let server = FakeLlmServer::start();
        server.push(reply);
        let probe = probe(backends(&server));
        let report = probe.skill.call(&ask("go"), &granted(grant));
        let journal = report.journal.clone();
        assert!(report.usage.is_zero(), "{grant}: no completion, no tokens");
        let (code, message, retryable) = failure(&report);
        assert_eq!(code, "provider-unavailable", "{grant}: {message}");
        assert!(retryable, "{grant}");
        assert!(message.contains("without its end marker"), "{message}");
        assert!(message.contains("after 2 delta(s)"), "{message}");
        // The journal says what the skill saw: two deltas, then the error.
        assert_eq!(journal[0].response["deltas"], json!(["half ", "a "]));
        assert_eq!(
            journal[0].response["error"]["code"], "provider-unavailable",
            "{grant}"
        );
        assert!(journal[0].response.get("ok").is_none());
    }
}

#[test]
fn an_error_event_mid_stream_ends_the_future_with_it() {
    let server = FakeLlmServer::start();
    let mut pieces = match FakeReply::anthropic_stream(&["par", "tial"], Duration::ZERO, false) {
        FakeReply::Stream { pieces } => pieces,
        _ => unreachable!(),
    };
    pieces.push((
        Duration::from_millis(10),
        "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n".into(),
    ));
    server.push(FakeReply::Stream { pieces });
    let probe = probe(backends(&server));
    let report = probe.skill.call(&ask("go"), &granted("claude/m"));
    let (code, message, retryable) = failure(&report);
    assert_eq!(code, "provider-unavailable");
    assert!(retryable);
    assert!(
        message.contains("overloaded_error: Overloaded"),
        "{message}"
    );
    assert!(message.contains("after 2 delta(s)"), "{message}");

    // Malformed JSON mid-stream: the provider's fault, not retried.
    server.push(FakeReply::Stream {
        pieces: vec![(Duration::ZERO, "data: {\"choices\": [\n\n".into())],
    });
    let report = probe.skill.call(&ask("go"), &granted("local/m"));
    let (code, message, retryable) = failure(&report);
    assert_eq!(code, "provider-error");
    assert!(!retryable);
    assert!(message.contains("not JSON"), "{message}");
}

#[test]
fn hostile_providers_are_stopped_and_named() {
    let server = FakeLlmServer::start();
    let probe = probe(backends(&server));

    // A line of 2 MiB without an end.
    server.push(FakeReply::Stream {
        pieces: vec![(Duration::ZERO, format!("data: {}", "x".repeat(2 << 20)))],
    });
    let report = probe.skill.call(&ask("go"), &granted("local/m"));
    let (code, message, _) = failure(&report);
    assert_eq!(code, "provider-error");
    assert!(
        message.contains("a line longer than 1048576 bytes"),
        "{message}"
    );

    // Well-formed deltas without end: stopped at the answer's bound.
    let delta = format!(
        "data: {}\n\n",
        json!({ "choices": [{ "delta": { "content": "y".repeat(64 << 10) } }] })
    );
    server.push(FakeReply::Endless {
        piece: delta,
        pause: Duration::ZERO,
    });
    let report = probe.skill.call(&ask("go"), &granted("local/m"));
    match &report.result {
        Err(CallError::Skill { code, message, .. }) => {
            assert_eq!(code, "provider-error");
            assert!(message.contains("more than 16777216 bytes"), "{message}");
        }
        // The deltas it was handed before may not fit its output.
        Err(CallError::OutputTooLarge { .. }) => {}
        other => panic!("expected the stream stopped, got {other:?}"),
    }

    // A slow stream that never ends: the call's deadline stops it.
    server.push(FakeReply::Endless {
        piece: "data: {\"choices\":[{\"delta\":{\"content\":\"z\"}}]}\n\n".into(),
        pause: Duration::from_millis(50),
    });
    let mut options = granted("local/m");
    options.limits.timeout = Duration::from_millis(1500);
    let started = Instant::now();
    let report = probe.skill.call(&ask("go"), &options);
    assert!(
        matches!(report.result, Err(CallError::Timeout { .. })),
        "{:?}",
        report.result
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // After each, the skill answers its next call.
    probe.still_streams();
}

#[test]
fn a_replay_with_no_provider_reproduces_the_output_byte_for_byte() {
    let mut server = FakeLlmServer::start();
    server.push(FakeReply::openai_stream(
        &["Zwei", " Wörter", " 🙂"],
        Duration::from_millis(20),
        true,
    ));
    let probe = probe(backends(&server));
    let recorded = probe.skill.call(&ask("go"), &granted("local/m"));
    let journal = recorded.journal.clone();
    let out = recorded.into_result().expect("recorded");
    server.stop();
    let (mut options, seen) = watched("local/m");
    options.journal = JournalMode::Replay(journal.clone().into());
    let replayed = probe.skill.call(&ask("go"), &options);
    assert_eq!(replayed.journal, journal);
    assert_eq!(replayed.usage.output_tokens, 3);
    let again = replayed.into_result().expect("replayed");
    assert_eq!(again.to_string(), out.to_string());
    assert_eq!(again["chunks"], json!(["Zwei", " Wörter", " 🙂"]));
    assert_eq!(seen.lock().unwrap().len(), 3);
    // A replay that asks something else stops where it diverges.
    let mut options = granted("local/m");
    options.journal = JournalMode::Replay(journal.into());
    let report = probe.skill.call(&ask("something else"), &options);
    assert!(
        matches!(report.result, Err(CallError::JournalMismatch { .. })),
        "{:?}",
        report.result
    );
}

#[test]
fn streams_in_flight_are_bounded_per_call_by_default_and_by_the_grant() {
    let server = FakeLlmServer::start();
    let probe = probe(backends(&server));
    // Four at once: the default bound.
    let out = probe
        .skill
        .call(&json!({ "prompt": "p", "streams": 4 }), &granted("local/m"))
        .into_result()
        .expect("four streams at once");
    assert_eq!(
        out["text"],
        "echo: p\n\necho: p #2\n\necho: p #3\n\necho: p #4"
    );
    // A fifth is refused, named, and says how to raise the bound.
    let report = probe
        .skill
        .call(&json!({ "prompt": "p", "streams": 5 }), &granted("local/m"));
    let (code, message, retryable) = failure(&report);
    assert_eq!(code, "too-many-streams");
    assert!(!retryable);
    assert!(message.contains("`max_streams` = 4"), "{message}");
    assert!(message.contains("llm-stream-probe"), "{message}");
    // The grant raises it.
    let out = probe
        .skill
        .call(
            &json!({ "prompt": "p", "streams": 5 }),
            &granted(r#"{"provider": "local", "model": "m", "max_streams": 5}"#),
        )
        .into_result()
        .expect("five streams with max_streams = 5");
    assert!(out["text"].as_str().unwrap().ends_with("echo: p #5"));
    let error = Grants::default()
        .add(
            "llm",
            r#"{"provider": "local", "model": "m", "max_streams": 0}"#,
        )
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("`max_streams` must be a whole number from 1 to 64"),
        "{error}"
    );
}

#[test]
fn without_a_grant_a_stream_is_denied() {
    let server = FakeLlmServer::start();
    let probe = probe(backends(&server));
    let report = probe.skill.call(&ask("go"), &CallOptions::default());
    assert!(
        matches!(&report.result, Err(CallError::CapabilityDenied { capability, .. }) if capability == "llm"),
        "{:?}",
        report.result
    );
    assert_eq!(server.request_count(), 0);
}

#[test]
fn a_synchronous_component_that_imports_it_is_refused_at_load() {
    let wasm = skillhost_tests::dummy_component(
        r#"package test:sync-stream;
        world sync-stream {
            include skillhost:skill/streaming@0.1.0;
            use skillhost:skill/types@0.1.0.{skill-error};
            export run: func(input: string) -> result<string, skill-error>;
        }"#,
    );
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let error = runtime.load_bytes(wasm, "sync-stream.wasm").unwrap_err();
    assert!(matches!(error, LoadError::Unprovided { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("sync-stream.wasm"), "{text}");
    assert!(text.contains("skillhost:skill/llm-stream@0.1.0"), "{text}");
    assert!(text.contains("async func"), "{text}");
}

/// A schema of one required string field, nothing else.
const ANSWER_SCHEMA: &str = r#"{"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"],"additionalProperties":false}"#;

fn ask_structured(prompt: &str) -> Value {
    json!({ "prompt": prompt, "streams": 1, "json_schema": ANSWER_SCHEMA })
}

/// The reply streaming `pieces` of JSON text in `grant`'s wire format:
/// OpenAI-compatible content deltas, or Anthropic's forced tool input.
fn structured(grant: &str, pieces: &[&str], end: bool) -> FakeReply {
    let pause = Duration::from_millis(10);
    if grant.starts_with("claude/") {
        FakeReply::anthropic_tool_stream(pieces, pause, end)
    } else {
        FakeReply::openai_stream(pieces, pause, end)
    }
}

#[test]
fn structured_output_streams_in_both_formats_and_replays_byte_for_byte() {
    let pieces = ["{\"answer\": ", "\"forty", "-two\"}"];
    for grant in ["local/m", "claude/m"] {
        let mut server = FakeLlmServer::start();
        server.push(structured(grant, &pieces, true));
        let probe = probe(backends(&server));
        let (options, seen) = watched(grant);
        let recorded = probe.skill.call(&ask_structured("the answer?"), &options);
        let journal = recorded.journal.clone();
        let out = recorded
            .into_result()
            .expect("the structured stream completes");
        assert_eq!(out["text"], "{\"answer\": \"forty-two\"}", "{grant}");
        assert_eq!(out["chunks"], json!(pieces), "{grant}");
        assert_eq!(
            seen.lock().unwrap().len(),
            3,
            "{grant}: people saw each piece"
        );
        // Asked for structured output as `complete` asks, streamed.
        let sent = server.requests()[0].json();
        assert_eq!(sent["stream"], true, "{grant}");
        if grant.starts_with("claude/") {
            assert_eq!(
                sent["tool_choice"],
                json!({ "type": "tool", "name": "output" })
            );
            assert_eq!(
                sent["tools"][0]["input_schema"]["required"],
                json!(["answer"])
            );
        } else {
            assert_eq!(sent["response_format"]["type"], "json_schema");
            assert_eq!(sent["response_format"]["json_schema"]["strict"], true);
        }
        // The journal has the schema, the pieces and the completion.
        assert_eq!(journal[0].request["stream"], true);
        assert_eq!(
            journal[0].request["json_schema"]["required"],
            json!(["answer"])
        );
        assert_eq!(journal[0].response["deltas"], json!(pieces));
        assert_eq!(
            journal[0].response["ok"]["content"],
            "{\"answer\": \"forty-two\"}"
        );
        server.stop();
        let mut options = granted(grant);
        options.journal = JournalMode::Replay(journal.clone().into());
        let replayed = probe.skill.call(&ask_structured("the answer?"), &options);
        assert_eq!(replayed.journal, journal, "{grant}");
        let again = replayed.into_result().expect("replayed");
        assert_eq!(again.to_string(), out.to_string(), "{grant}");
    }
}

#[test]
fn a_streamed_answer_that_does_not_fit_the_schema_is_a_retryable_invalid_output() {
    for grant in ["local/m", "claude/m"] {
        // Valid JSON, but not the schema's.
        let mut server = FakeLlmServer::start();
        server.push(structured(grant, &["{\"answer\": ", "42}"], true));
        let probe = probe(backends(&server));
        let report = probe.skill.call(&ask_structured("go"), &granted(grant));
        let journal = report.journal.clone();
        // The completion reached the host: its tokens count, as `complete`'s.
        assert_eq!(report.usage.calls, 1, "{grant}");
        let (code, message, retryable) = failure(&report);
        let provider = grant.split('/').next().unwrap();
        assert_eq!(code, "invalid-output", "{grant}: {message}");
        assert!(retryable, "{grant}");
        assert!(
            message.starts_with(&format!(
                "the completion from provider `{provider}` does not fit the requested JSON \
                 Schema: /answer: "
            )),
            "{grant}: {message}"
        );
        // The journal keeps what the provider said; the check is on it, so
        // a replay answers the same error without a provider.
        assert_eq!(journal[0].response["ok"]["content"], "{\"answer\": 42}");
        assert_eq!(
            journal[0].response["deltas"],
            json!(["{\"answer\": ", "42}"])
        );
        server.stop();
        let mut options = granted(grant);
        options.journal = JournalMode::Replay(journal.clone().into());
        let replayed = probe.skill.call(&ask_structured("go"), &options);
        assert_eq!(replayed.journal, journal);
        assert_eq!(failure(&replayed), (code, message, retryable), "{grant}");
    }

    // Not JSON at all: the same error `complete` gives.
    let server = FakeLlmServer::start();
    server.push(structured("local/m", &["Sure! ", "Here it is"], true));
    let probe = probe(backends(&server));
    let (code, message, retryable) =
        failure(&probe.skill.call(&ask_structured("go"), &granted("local/m")));
    assert_eq!((code.as_str(), retryable), ("invalid-output", true));
    assert!(
        message.contains("it is not JSON") && message.contains("Sure! Here it is"),
        "{message}"
    );
}

#[test]
fn a_structured_stream_cut_mid_json_or_never_closing_is_never_a_completion() {
    for grant in ["local/m", "claude/m"] {
        let server = FakeLlmServer::start();
        server.push(structured(grant, &["{\"answer\": ", "\"for"], false));
        let probe = probe(backends(&server));
        let report = probe.skill.call(&ask_structured("go"), &granted(grant));
        let journal = report.journal.clone();
        let (code, message, retryable) = failure(&report);
        assert_eq!(code, "provider-unavailable", "{grant}: {message}");
        assert!(retryable);
        assert!(message.contains("without its end marker"), "{message}");
        assert!(journal[0].response.get("ok").is_none(), "{grant}");
    }

    // JSON that never closes: stopped at the call's deadline.
    let server = FakeLlmServer::start();
    server.push(FakeReply::Endless {
        piece: "data: {\"choices\":[{\"delta\":{\"content\":\"[[\"}}]}\n\n".into(),
        pause: Duration::from_millis(20),
    });
    let probe = probe(backends(&server));
    let mut options = granted("local/m");
    options.limits.timeout = Duration::from_millis(1500);
    let started = Instant::now();
    let report = probe.skill.call(&ask_structured("go"), &options);
    assert!(
        matches!(report.result, Err(CallError::Timeout { .. })),
        "{:?}",
        report.result
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn a_bad_schema_is_refused_at_once_as_complete_refuses_it() {
    let server = FakeLlmServer::start();
    let probe = probe(backends(&server));
    let report = probe.skill.call(
        &json!({ "prompt": "go", "streams": 1, "json_schema": "{not json" }),
        &granted("local/m"),
    );
    let (code, message, _) = failure(&report);
    assert_eq!(code, "invalid-request");
    assert!(message.contains("`json-schema` is not JSON"), "{message}");
    assert!(server.requests().is_empty(), "the provider was never asked");
}

/// The host's threads reading a provider's stream, in this process.
fn stream_readers() -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                // `comm` keeps 15 bytes of `skillhost-llm-stream`.
                .filter(|name| name.trim_end().starts_with("skillhost-llm-s"))
                .count()
        })
        .unwrap_or(0)
}

#[test]
fn a_skill_that_drops_its_stream_early_stops_the_host_reading() {
    let server = FakeLlmServer::start();
    // A provider that would stream forever.
    server.push(FakeReply::Endless {
        piece: "data: {\"choices\":[{\"delta\":{\"content\":\"more \"}}]}\n\n".into(),
        pause: Duration::from_millis(10),
    });
    let probe = probe(backends(&server));
    let (options, seen) = watched("local/m");
    let started = Instant::now();
    let report = probe.skill.call(
        &json!({ "prompt": "go", "streams": 1, "stop_after": 2 }),
        &options,
    );
    let journal = report.journal.clone();
    let out = report.into_result().expect("the skill ends as it wants");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out["chunks"], json!(["more ", "more "]));
    assert_eq!(
        seen.lock().unwrap().len(),
        2,
        "people saw what the skill read"
    );
    // The journal has what the skill was handed, and no completion.
    assert_eq!(journal[0].response["deltas"], json!(["more ", "more "]));
    assert!(
        journal[0].response.get("ok").is_none(),
        "{}",
        journal[0].response
    );
    // The host stopped reading the provider: its reading thread ends.
    let deadline = Instant::now() + Duration::from_secs(5);
    while stream_readers() > 0 {
        assert!(
            Instant::now() < deadline,
            "a thread still reads the abandoned stream"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // And the skill's next call streams as usual.
    probe.still_streams();
}

/// A streamed completion's answer is charged to the host-call budget when
/// the call ends, as the journal gets it; a replay charges it at the same
/// point, not when the skill asks. So a second stream asked while the
/// first's long answer is not yet charged is admitted in the replay as it
/// was in the recording, under a budget the requests fit and the answers
/// do not: the replay reproduces the call instead of diverging.
#[test]
fn a_replay_charges_a_streamed_answer_when_the_recording_did() {
    let mut server = FakeLlmServer::start();
    let long = "x".repeat(4096);
    for _ in 0..2 {
        server.push(FakeReply::openai_stream(
            &[long.as_str()],
            Duration::from_millis(5),
            true,
        ));
    }
    let probe = probe(backends(&server));
    let two = json!({ "prompt": "go", "streams": 2 });
    let mut options = granted("local/m");
    // Room for both requests (a few hundred bytes each), not for an answer
    // of 4 KiB besides.
    options.limits.host_call_bytes = Some(3000);
    let recorded = probe.skill.call(&two, &options);
    let journal = recorded.journal.clone();
    assert_eq!(journal.len(), 2, "{:?}", recorded.result);
    let out = recorded.into_result().expect("recorded");
    server.stop();
    options.journal = JournalMode::Replay(journal.clone().into());
    let replayed = probe.skill.call(&two, &options);
    assert_eq!(replayed.journal, journal);
    let again = replayed
        .into_result()
        .expect("the replay reproduces the call");
    assert_eq!(again.to_string(), out.to_string());
}
