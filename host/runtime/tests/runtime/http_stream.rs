//! Streamed response bodies (`skillhost:skill/http-stream`) through the
//! `http-stream-probe` skill (an async Rust component, shipped in
//! `skills/dist`) against a real HTTP server on 127.0.0.1
//! (`skillhost_tests::http_server`) that streams slowly, cuts the
//! connection, sends more than the limit, never ends, redirects outside the
//! grant, and echoes a secret split across reads at every offset. The
//! journal records the head, the chunks as the skill was handed them and
//! the outcome, so a replay with the server gone reproduces the output byte
//! for byte.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost_runtime::{
    CallError, CallOptions, CallReport, Capability, Grants, JournalMode, LoadError, Skill,
};
use skillhost_tests::http_server::HttpServer;

fn probe() -> (tempfile::TempDir, Arc<Skill>) {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let skill = runtime
        .load_file(&skillhost_tests::dist("http-stream-probe"))
        .expect("load http-stream-probe");
    (cache, skill)
}

fn granted(grant: &str) -> CallOptions {
    let mut grants = Grants::default();
    grants.add("http", grant).expect("a valid grant");
    CallOptions {
        grants: Arc::new(grants),
        ..CallOptions::default()
    }
}

/// The probe's input: `urls`, read one after another unless `together`.
fn input(urls: &[String], together: bool) -> Value {
    json!({
        "urls": urls, "together": together, "read_size": 0, "headers": [], "drop_after": 0,
        "abandon": [],
    })
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

/// FNV-1a, 64 bits, as the probe computes it.
fn fnv1a(bytes: &[u8]) -> String {
    let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("{hash:016x}")
}

/// The body `/slow` sends: `pieces` pieces of `size` bytes, `a`, `b`, ….
fn slow_body(pieces: usize, size: usize) -> Vec<u8> {
    (0..pieces)
        .flat_map(|i| vec![b'a' + (i % 26) as u8; size])
        .collect()
}

/// A streamed entry's chunks, decoded and joined.
fn journaled_body(response: &Value) -> Vec<u8> {
    use base64::Engine as _;
    response["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .flat_map(|c| {
            base64::engine::general_purpose::STANDARD
                .decode(c.as_str().unwrap())
                .unwrap()
        })
        .collect()
}

#[test]
fn a_body_reaches_the_skill_chunk_by_chunk_as_the_server_sends_it_and_is_journaled() {
    let server = HttpServer::start();
    let (_cache, skill) = probe();
    let url = server.url("/slow?pieces=4&size=1000&pause=150");
    let started = Instant::now();
    let report = skill.call(
        &input(std::slice::from_ref(&url), false),
        &granted(&server.host_port()),
    );
    assert!(started.elapsed() >= Duration::from_millis(600));
    let journal = report.journal.clone();
    let out = report.into_result().expect("the body streams");
    let fetched = &out["responses"][0];
    let body = slow_body(4, 1000);
    assert_eq!(fetched["status"], 200);
    assert_eq!(fetched["size"], 4000);
    assert_eq!(fetched["digest"], fnv1a(&body));
    assert_eq!(fetched["error"], Value::Null);
    // Each piece was handed on as it came, not the body at its end.
    let chunks: Vec<&str> = fetched["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(chunks.len() >= 4, "{} chunk(s)", chunks.len());
    assert_eq!(chunks.concat().as_bytes(), body);
    // The journal: the request (marked as streamed), the head, the chunks
    // as handed out, and the outcome.
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].capability, Capability::Http);
    assert_eq!(journal[0].request["stream"], true);
    assert_eq!(journal[0].request["url"], url);
    let response = &journal[0].response;
    assert_eq!(response["ok"]["status"], 200);
    assert_eq!(response["ok"]["body_bytes"], 4000);
    assert_eq!(response["end"], json!({ "ok": null }));
    assert_eq!(response["chunks"].as_array().unwrap().len(), chunks.len());
    assert_eq!(journaled_body(response), body);
    assert_eq!(
        Capability::Http.describe_entry(&journal[0].request, response),
        format!("GET {url} -> 200, 4000 bytes")
    );
    // Small reads: the skill gets at most what it asks for.
    let mut small = input(&[server.url("/slow?pieces=2&size=100&pause=10")], false);
    small["read_size"] = json!(7);
    let out = skill
        .call(&small, &granted(&server.host_port()))
        .into_result()
        .unwrap();
    let chunks = out["responses"][0]["chunks"].as_array().unwrap();
    assert!(chunks.iter().all(|c| c.as_str().unwrap().len() <= 7));
    assert_eq!(out["responses"][0]["size"], 200);
}

#[test]
fn several_bodies_stream_at_once_bounded_per_call_by_default_and_by_the_grant() {
    let server = HttpServer::start();
    let (_cache, skill) = probe();
    let urls = |n: usize| -> Vec<String> {
        (0..n)
            .map(|_| server.url("/slow?pieces=3&size=10&pause=300"))
            .collect()
    };
    // Four at once, the default bound: read together, not one by one.
    let started = Instant::now();
    let out = skill
        .call(&input(&urls(4), true), &granted(&server.host_port()))
        .into_result()
        .expect("four bodies at once");
    let elapsed = started.elapsed();
    assert_eq!(out["responses"].as_array().unwrap().len(), 4);
    for fetched in out["responses"].as_array().unwrap() {
        assert_eq!(fetched["size"], 30);
        assert_eq!(fetched["error"], Value::Null);
    }
    assert!(
        elapsed < Duration::from_millis(2700),
        "four bodies of 900 ms each took {elapsed:?}: not in flight at once"
    );
    // A fifth is refused, named, and says how to raise the bound; the
    // first four were asked, the fifth never reached the server.
    let before = server.requests();
    let report = skill.call(&input(&urls(5), true), &granted(&server.host_port()));
    let (code, message, retryable) = failure(&report);
    assert_eq!(code, "too-many-streams");
    assert!(!retryable);
    assert!(message.contains("`max_streams` = 4"), "{message}");
    assert!(message.contains("http-stream-probe"), "{message}");
    assert!(message.contains("`http` grant"), "{message}");
    assert_eq!(server.requests(), before + 4);
    // One after another, five are fine: a body read to its end is no
    // longer in flight.
    skill
        .call(&input(&urls(5), false), &granted(&server.host_port()))
        .into_result()
        .expect("five bodies one after another");
    // The grant raises it.
    let grant = json!({ "hosts": [server.host_port()], "max_streams": 5 }).to_string();
    let out = skill
        .call(&input(&urls(5), true), &granted(&grant))
        .into_result()
        .expect("five bodies at once with max_streams = 5");
    assert_eq!(out["responses"].as_array().unwrap().len(), 5);
    for bad in [0, 65] {
        let error = Grants::default()
            .add(
                "http",
                &json!({ "hosts": ["a.example.org"], "max_streams": bad }).to_string(),
            )
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("`max_streams` must be a whole number from 1 to 64"),
            "{error}"
        );
    }
}

#[test]
fn requests_started_together_wait_for_their_heads_at_once_and_are_journaled_in_order() {
    let mut server = HttpServer::start();
    let (_cache, skill) = probe();
    // The server holds each head until all three requests have arrived:
    // a skill whose requests waited for each other's heads would get a 504
    // after five seconds.
    let urls: Vec<String> = (0..3)
        .map(|i| server.url(&format!("/gate?n=3&i={i}")))
        .collect();
    let started = Instant::now();
    let report = skill.call(&input(&urls, true), &granted(&server.host_port()));
    let elapsed = started.elapsed();
    let journal = report.journal.clone();
    let out = report.into_result().expect("three heads at once");
    for fetched in out["responses"].as_array().unwrap() {
        assert_eq!(fetched["status"], 200, "{fetched}");
        assert_eq!(fetched["size"], 6);
        assert_eq!(fetched["error"], Value::Null);
    }
    assert!(
        elapsed < Duration::from_secs(4),
        "three heads held until all three requests came took {elapsed:?}"
    );
    // One entry per request, in the order the skill started them.
    assert_eq!(journal.len(), 3);
    for (entry, url) in journal.iter().zip(&urls) {
        assert_eq!(entry.request["url"], *url);
        assert_eq!(entry.response["ok"]["status"], 200);
        assert_eq!(journaled_body(&entry.response), b"gate 3");
    }
    // A replay serves all three heads with the server gone.
    server.stop();
    let mut options = granted(&server.host_port());
    options.journal = JournalMode::Replay(journal.clone().into());
    let replayed = skill.call(&input(&urls, true), &options);
    assert_eq!(replayed.journal, journal);
    assert_eq!(
        replayed.into_result().expect("replayed").to_string(),
        out.to_string()
    );

    // One after another, the first request waits at the gate alone.
    let server = HttpServer::start();
    let out = skill
        .call(
            &input(
                &[
                    server.url("/gate?n=2&wait=300"),
                    server.url("/gate?n=2&wait=300"),
                ],
                false,
            ),
            &granted(&server.host_port()),
        )
        .into_result()
        .expect("a 504 is a response");
    assert_eq!(out["responses"][0]["status"], 504);
    assert_eq!(
        out["responses"][0]["chunks"][0],
        "gate: only 1 of 2 arrived"
    );
}

#[test]
fn a_request_dropped_before_its_head_is_cancelled_counts_until_the_call_ends_and_replays_alike() {
    let mut server = HttpServer::start();
    let (_cache, skill) = probe();
    let host = server.host_port();
    let grant = |bound: u32| json!({ "hosts": [host], "max_streams": bound }).to_string();
    // Two requests to a server that never answers, each polled once and
    // dropped, then one that is read.
    let mut asked = input(&[server.url("/hello")], false);
    asked["abandon"] = json!([server.url("/silent"), server.url("/silent")]);
    // The dropped ones still count: with room for two, the third is refused.
    let report = skill.call(&asked, &granted(&grant(2)));
    let (code, message, _) = failure(&report);
    assert_eq!(code, "too-many-streams");
    assert!(
        message.contains("dropped before its head came counts until the call ends"),
        "{message}"
    );
    // With room for three, the call does not wait for the silent server.
    let started = Instant::now();
    let report = skill.call(&asked, &granted(&grant(3)));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the call waited {:?} for heads it had dropped",
        started.elapsed()
    );
    let journal = report.journal.clone();
    let out = report.into_result().expect("two dropped, one read");
    assert_eq!(out["responses"][0]["status"], 200);
    assert_eq!(journal.len(), 3);
    for entry in &journal[..2] {
        assert_eq!(entry.response["abandoned"], true, "{}", entry.response);
        assert_eq!(entry.response["error"]["code"], "cancelled");
    }
    assert_eq!(journal[2].response["ok"]["status"], 200);
    // A replay leaves the dropped requests waiting as the recording did
    // (a head served at once would change what the skill does), and
    // reaches no server.
    server.stop();
    let asked_before = server.requests();
    let mut options = granted(&grant(3));
    options.journal = JournalMode::Replay(journal.clone().into());
    let started = Instant::now();
    let replayed = skill.call(&asked, &options);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(replayed.journal, journal);
    assert_eq!(
        replayed.into_result().expect("replayed").to_string(),
        out.to_string()
    );
    assert_eq!(server.requests(), asked_before);
}

#[test]
fn a_connection_cut_mid_body_ends_the_stream_with_a_retryable_error() {
    let server = HttpServer::start();
    let (_cache, skill) = probe();
    let report = skill.call(
        &input(&[server.url("/cut?bytes=1000")], false),
        &granted(&server.host_port()),
    );
    let journal = report.journal.clone();
    let out = report.into_result().expect("the head came");
    let fetched = &out["responses"][0];
    assert_eq!(fetched["status"], 200);
    assert!(fetched["size"].as_u64().unwrap() <= 1000, "{fetched}");
    assert_eq!(fetched["error"]["code"], "request-failed", "{fetched}");
    assert_eq!(fetched["error"]["retryable"], true);
    // The journal says what the skill saw: the bytes, then the error.
    assert_eq!(
        journal[0].response["end"]["error"]["code"],
        "request-failed"
    );
    assert_eq!(
        journaled_body(&journal[0].response).len() as u64,
        fetched["size"].as_u64().unwrap()
    );
}

#[test]
fn a_body_past_the_limit_ends_one_byte_past_it() {
    let server = HttpServer::start();
    let (_cache, skill) = probe();
    let grant = json!({ "hosts": [server.host_port()], "max_response_bytes": 5000 }).to_string();
    // No length: the stream is counted, and ends with an error one byte
    // past the limit, the skill handed the limit's bytes and no more.
    let out = skill
        .call(
            &input(
                &[
                    server.url("/stream?bytes=100000"),
                    server.url("/stream?bytes=5000"),
                ],
                false,
            ),
            &granted(&grant),
        )
        .into_result()
        .unwrap();
    let over = &out["responses"][0];
    assert_eq!(over["size"], 5000);
    assert_eq!(over["error"]["code"], "response-too-large", "{over}");
    let message = over["error"]["message"].as_str().unwrap();
    assert!(message.contains("5000 bytes"), "{message}");
    assert!(message.contains("max_response_bytes"), "{message}");
    // Exactly the limit is fine.
    let at = &out["responses"][1];
    assert_eq!(at["size"], 5000);
    assert_eq!(at["error"], Value::Null);
    // A length past the limit is refused before the body.
    let report = skill.call(
        &input(&[server.url("/big?bytes=6000")], false),
        &granted(&grant),
    );
    let (code, message, _) = failure(&report);
    assert_eq!(code, "response-too-large", "{message}");
}

#[test]
fn a_body_that_never_ends_is_stopped_at_the_deadline_and_a_dropped_one_at_once() {
    let server = HttpServer::start();
    let (_cache, skill) = probe();
    let mut options = granted(&server.host_port());
    options.limits.timeout = Duration::from_millis(1500);
    let started = Instant::now();
    let report = skill.call(&input(&[server.url("/endless?pause=50")], false), &options);
    let elapsed = started.elapsed();
    match &report.result {
        Err(CallError::Timeout { .. }) => {}
        Ok(out) => assert_eq!(out["responses"][0]["error"]["code"], "timeout", "{out}"),
        other => panic!("expected the body stopped at the deadline, got {other:?}"),
    }
    assert!(elapsed >= Duration::from_millis(1400), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");

    // A skill that drops the stream: its future says so, at once.
    let mut dropping = input(&[server.url("/endless?pause=20")], false);
    dropping["drop_after"] = json!(10);
    let started = Instant::now();
    let out = skill
        .call(&dropping, &granted(&server.host_port()))
        .into_result()
        .expect("a dropped stream ends the body");
    assert!(started.elapsed() < Duration::from_secs(3));
    let fetched = &out["responses"][0];
    assert!(fetched["size"].as_u64().unwrap() >= 10);
    assert_eq!(fetched["error"]["code"], "cancelled", "{fetched}");

    // After each, the skill answers its next call.
    let out = skill
        .call(
            &input(&[server.url("/slow?pieces=1&size=5&pause=0")], false),
            &granted(&server.host_port()),
        )
        .into_result()
        .unwrap();
    assert_eq!(out["responses"][0]["chunks"], json!(["aaaaa"]));
}

#[test]
fn redirects_are_followed_within_the_grant_and_refused_outside_it() {
    let server = HttpServer::start();
    let (_cache, skill) = probe();
    let relative = server.url("/redirect?to=/hello&status=307");
    let out = skill
        .call(&input(&[relative], false), &granted(&server.host_port()))
        .into_result()
        .unwrap();
    assert_eq!(
        out["responses"][0]["chunks"]
            .as_array()
            .unwrap()
            .concat_text(),
        skillhost_tests::http_server::HELLO
    );
    let before = server.requests();
    let outside = server.url("/redirect?to=http://127.0.0.2:9/secret");
    let report = skill.call(&input(&[outside], false), &granted(&server.host_port()));
    let (code, message, _) = failure(&report);
    assert_eq!(code, "redirect-not-granted");
    assert!(message.contains("127.0.0.2:9"), "{message}");
    assert_eq!(
        server.requests(),
        before + 1,
        "only the redirecting request"
    );
    // Outside the grant from the start: refused before any request.
    let other = format!("127.0.0.1:{}", server.port() + 1);
    let report = skill.call(&input(&[server.url("/hello")], false), &granted(&other));
    assert_eq!(failure(&report).0, "host-not-granted");
    // Without an `http` grant at all, the capability is denied.
    let report = skill.call(
        &input(&[server.url("/hello")], false),
        &CallOptions::default(),
    );
    assert_eq!(report.denied, [Capability::Http]);
    assert!(
        matches!(report.result, Err(CallError::CapabilityDenied { .. })),
        "{:?}",
        report.result
    );
    assert_eq!(server.requests(), before + 1);
}

trait ConcatText {
    fn concat_text(&self) -> String;
}

impl ConcatText for Vec<Value> {
    fn concat_text(&self) -> String {
        self.iter().map(|c| c.as_str().unwrap()).collect()
    }
}

/// The grant of `server` with `Authorization` from `variable` for its
/// origin.
fn secret_grant(server: &HttpServer, variable: &str) -> String {
    json!({
        "hosts": [server.host_port()],
        "headers": { server.url(""): { "Authorization": format!("env:{variable}") } },
    })
    .to_string()
}

#[test]
fn a_secret_echoed_slowly_and_split_at_every_offset_never_reaches_the_skill() {
    const VARIABLE: &str = "SKILLHOST_TEST_HTTP_STREAM_ECHO";
    const SECRET: &str = "Bearer s3cr3t-t0ken/with space";
    // SAFETY: tests in this binary do not read this variable elsewhere.
    unsafe { std::env::set_var(VARIABLE, SECRET) };
    let server = HttpServer::start();
    let (_cache, skill) = probe();
    let grant = secret_grant(&server, VARIABLE);
    let expected = format!("before [redacted env:{VARIABLE}] after");
    let mut split = 0;
    for (form, echoed) in [
        ("raw", SECRET.to_string()),
        ("json", SECRET.to_string()),
        ("url", "Bearer%20s3cr3t-t0ken%2Fwith%20space".to_string()),
    ] {
        let body = format!("before {echoed} after");
        // The secret split at every offset, the two pieces 30 ms apart.
        let urls: Vec<String> = (0..=body.len())
            .map(|at| {
                server.url(&format!(
                    "/drip?header=Authorization&form={form}&pause=30&at={at}"
                ))
            })
            .collect();
        let report = skill.call(&input(&urls, false), &granted(&grant));
        let journal = report.journal.clone();
        let out = report.into_result().expect("the bodies stream");
        for (at, fetched) in out["responses"].as_array().unwrap().iter().enumerate() {
            let chunks = fetched["chunks"].as_array().unwrap();
            assert_eq!(chunks.concat_text(), expected, "{form}, cut at {at}");
            if chunks.len() > 1 {
                split += 1;
            }
        }
        for entry in &journal {
            let text = String::from_utf8(journaled_body(&entry.response)).unwrap();
            assert_eq!(text, expected);
            assert!(!entry.response.to_string().contains("s3cr3t"));
        }
    }
    assert!(
        split > 0,
        "no body reached the skill in more than one chunk"
    );
    // The head is redacted too, and an encoded body refused.
    let out = skill
        .call(&input(&[server.url("/reflect")], false), &granted(&grant))
        .into_result()
        .unwrap();
    let head = out["responses"][0]["headers"].to_string();
    assert!(!head.contains("s3cr3t"), "{head}");
    assert!(
        head.contains(&format!("[redacted env:{VARIABLE}]")),
        "{head}"
    );
    assert!(head.contains("identity"), "asked for no encoding: {head}");
    let report = skill.call(
        &input(&[server.url("/headers.gz")], false),
        &granted(&grant),
    );
    assert_eq!(failure(&report).0, "response-encoded");
}

#[test]
fn a_replay_with_the_server_gone_reproduces_the_output_byte_for_byte() {
    const VARIABLE: &str = "SKILLHOST_TEST_HTTP_STREAM_REPLAY";
    // SAFETY: tests in this binary do not read this variable elsewhere.
    unsafe { std::env::set_var(VARIABLE, "Bearer replay-secret-value") };
    let mut server = HttpServer::start();
    let (_cache, skill) = probe();
    let grant = secret_grant(&server, VARIABLE);
    let urls = vec![
        server.url("/slow?pieces=3&size=700&pause=30"),
        server.url("/drip?header=Authorization&at=20&pause=30"),
        server.url("/cut?bytes=300"),
    ];
    let recorded = skill.call(&input(&urls, true), &granted(&grant));
    let journal = recorded.journal.clone();
    let out = recorded.into_result().expect("recorded");
    assert_eq!(journal.len(), 3);
    let asked = server.requests();
    server.stop();
    let mut options = granted(&grant);
    options.journal = JournalMode::Replay(journal.clone().into());
    let replayed = skill.call(&input(&urls, true), &options);
    assert_eq!(replayed.journal, journal);
    let again = replayed.into_result().expect("replayed");
    assert_eq!(again.to_string(), out.to_string());
    assert_eq!(server.requests(), asked);
    // A replay that asks something else stops where it diverges.
    let mut options = granted(&grant);
    options.journal = JournalMode::Replay(journal.into());
    let report = skill.call(&input(&urls[..1], false), &options);
    assert!(
        matches!(report.result, Err(CallError::JournalMismatch { .. })),
        "{:?}",
        report.result
    );
}

#[test]
fn a_synchronous_component_that_imports_it_is_refused_at_load() {
    let wasm = skillhost_tests::dummy_component(
        r#"package test:sync-http-stream;
        world sync-http-stream {
            import skillhost:skill/http-stream@0.1.0;
            use skillhost:skill/types@0.1.0.{skill-error};
            export run: func(input: string) -> result<string, skill-error>;
        }"#,
    );
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let error = runtime
        .load_bytes(wasm, "sync-http-stream.wasm")
        .unwrap_err();
    assert!(matches!(error, LoadError::Unprovided { .. }), "{error:?}");
    let text = error.to_string();
    assert!(text.contains("sync-http-stream.wasm"), "{text}");
    assert!(text.contains("skillhost:skill/http-stream@0.1.0"), "{text}");
    assert!(text.contains("async func"), "{text}");
    assert!(text.contains("`http.fetch`"), "{text}");
}

#[test]
fn a_body_is_read_no_further_than_the_host_call_budget_has_room() {
    let server = HttpServer::start();
    let (_cache, skill) = probe();
    let grant = json!({ "hosts": [server.host_port()], "max_response_bytes": 1u64 << 30 });
    let mut options = granted(&grant.to_string());
    options.limits.host_call_bytes = Some(1 << 20);
    // A 5 MB body, allowed by the grant, stops at the budget's room (as
    // base64, as the journal keeps it), with the budget's refusal.
    let report = skill.call(
        &input(&[server.url("/stream?bytes=5000000")], false),
        &options,
    );
    let journal = report.journal.clone();
    let out = report.into_result().expect("the head came");
    let fetched = &out["responses"][0];
    assert_eq!(fetched["error"]["code"], "budget-exceeded", "{fetched}");
    let message = fetched["error"]["message"].as_str().unwrap();
    assert!(message.contains("`http` answer"), "{message}");
    assert!(fetched["size"].as_u64().unwrap() <= (1 << 20) / 4 * 3);
    assert!(journal[0].response.to_string().len() <= 1 << 20);
}
