//! The `http` capability through the shipped `web-fetch` skill against a real
//! HTTP server on 127.0.0.1 (`skillhost_tests::http_server`): what a grant
//! allows and refuses, redirects, size and time limits, names that resolve
//! to loopback, secret headers, and a replay with the server stopped.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost_runtime::{
    CallError, CallOptions, CallReport, Capability, Grants, JournalMode, Skill,
};
use skillhost_tests::http_server::{HELLO, HttpServer};

fn web_fetch() -> (tempfile::TempDir, Arc<Skill>) {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let skill = runtime
        .load_file(&skillhost_tests::dist("web-fetch"))
        .expect("load web-fetch");
    (cache, skill)
}

fn options(grant: &str) -> CallOptions {
    let mut grants = Grants::default();
    grants.add("http", grant).expect("a valid grant");
    CallOptions {
        grants: Arc::new(grants),
        ..CallOptions::default()
    }
}

fn fetch(skill: &Skill, url: &str, options: &CallOptions) -> CallReport {
    skill.call(&json!({ "url": url, "max_chars": 0 }), options)
}

/// The skill error's code and message of a call that failed.
fn failure(report: CallReport) -> (String, String) {
    match report.result {
        Err(CallError::Skill { code, message, .. }) => (code, message),
        other => panic!("expected a skill error, got {other:?}"),
    }
}

#[test]
fn a_granted_host_answers_and_the_call_is_journaled() {
    let server = HttpServer::start();
    let (_cache, skill) = web_fetch();
    let report = fetch(&skill, &server.url("/hello"), &options(&server.host_port()));
    let journal = report.journal.clone();
    let out = report.into_result().expect("the fetch succeeds");
    assert_eq!(out["status"], 200);
    assert_eq!(out["content_type"], "text/plain");
    assert_eq!(out["text"], HELLO);
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].capability, Capability::Http);
    assert_eq!(journal[0].request["method"], "GET");
    assert_eq!(journal[0].request["url"], server.url("/hello"));
    assert_eq!(journal[0].response["ok"]["status"], 200);
    // A status is an answer, not an error.
    let out = fetch(
        &skill,
        &server.url("/status/404"),
        &options(&server.host_port()),
    );
    assert_eq!(out.into_result().unwrap()["status"], 404);
}

#[test]
fn hosts_and_ports_outside_the_grant_are_refused_before_any_request() {
    let server = HttpServer::start();
    let (_cache, skill) = web_fetch();
    let other_port = format!("127.0.0.1:{}", server.port() + 1);
    let (code, message) = failure(fetch(&skill, &server.url("/hello"), &options(&other_port)));
    assert_eq!(code, "host-not-granted");
    assert!(message.contains(&server.host_port()), "{message}");
    assert!(message.contains(&other_port), "{message}");
    // Without an `http` grant at all, the capability is denied.
    let report = fetch(&skill, &server.url("/hello"), &CallOptions::default());
    assert_eq!(report.denied, [Capability::Http]);
    assert!(
        matches!(report.result, Err(CallError::CapabilityDenied { .. })),
        "{:?}",
        report.result
    );
    assert_eq!(server.requests(), 0);
}

#[test]
fn redirects_are_followed_only_to_granted_hosts() {
    let server = HttpServer::start();
    let (_cache, skill) = web_fetch();
    let grant = options(&server.host_port());
    let inside = server.url(&format!("/redirect?to={}", server.url("/hello")));
    let out = fetch(&skill, &inside, &grant).into_result().unwrap();
    assert_eq!(out["text"], HELLO);
    // A relative location, and a 307.
    let relative = server.url("/redirect?to=/hello&status=307");
    assert_eq!(
        fetch(&skill, &relative, &grant).into_result().unwrap()["text"],
        HELLO
    );
    let outside = server.url("/redirect?to=http://127.0.0.2:9/secret");
    let before = server.requests();
    let (code, message) = failure(fetch(&skill, &outside, &grant));
    assert_eq!(code, "redirect-not-granted");
    assert!(message.contains("127.0.0.2:9"), "{message}");
    assert_eq!(
        server.requests(),
        before + 1,
        "only the redirecting request"
    );
    // A redirect to itself stops after the limit.
    let (code, _) = failure(fetch(
        &skill,
        &server.url("/redirect?to=/redirect?to="),
        &grant,
    ));
    assert_eq!(code, "too-many-redirects");
}

#[test]
fn a_body_over_the_grant_limit_is_refused() {
    let server = HttpServer::start();
    let (_cache, skill) = web_fetch();
    let grant = options(&format!(
        r#"{{"hosts": ["{}"], "max_response_bytes": 1000}}"#,
        server.host_port()
    ));
    let out = fetch(&skill, &server.url("/big?bytes=1000"), &grant);
    assert_eq!(
        out.into_result().unwrap()["text"].as_str().unwrap().len(),
        1000
    );
    for path in ["/big?bytes=1001", "/stream?bytes=5000000"] {
        let (code, message) = failure(fetch(&skill, &server.url(path), &grant));
        assert_eq!(code, "response-too-large", "{path}");
        assert!(message.contains("1000 bytes"), "{message}");
    }
}

#[test]
fn a_server_that_never_answers_is_cut_at_the_call_deadline() {
    let server = HttpServer::start();
    let (_cache, skill) = web_fetch();
    let mut options = options(&server.host_port());
    options.limits.timeout = Duration::from_millis(700);
    let started = Instant::now();
    let report = fetch(&skill, &server.url("/silent"), &options);
    let took = started.elapsed();
    // Either the request's own timeout answers the skill (`timeout`), or the
    // call's deadline stops the guest right after: never the server's pace.
    match report.result {
        Err(CallError::Skill { code, .. }) => assert_eq!(code, "timeout"),
        Err(CallError::Timeout { .. }) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn a_granted_name_that_resolves_to_loopback_is_refused() {
    let server = HttpServer::start();
    let (_cache, skill) = web_fetch();
    let grant = options(&format!("localhost:{}", server.port()));
    let url = format!("http://localhost:{}/hello", server.port());
    let (code, message) = failure(fetch(&skill, &url, &grant));
    assert_eq!(code, "address-not-allowed");
    assert!(message.contains("not a public address"), "{message}");
    assert_eq!(server.requests(), 0);
}

#[test]
fn secret_headers_reach_the_server_and_nothing_else() {
    const SECRET: &str = "Bearer tok-7c1f0e";
    // SAFETY: no other test of this binary reads or writes this variable.
    unsafe { std::env::set_var("SKILLHOST_TEST_HTTP_TOKEN", SECRET) };
    let server = HttpServer::start();
    let (_cache, skill) = web_fetch();
    let grant = format!(
        r#"{{"hosts": ["{0}"], "headers": {{"http://{0}": {{"Authorization": "env:SKILLHOST_TEST_HTTP_TOKEN"}}}}}}"#,
        server.host_port()
    );
    let options = options(&grant);
    assert!(!format!("{:?}", options.grants).contains("tok-7c1f0e"));
    let report = fetch(&skill, &server.url("/hello"), &options);
    let seen = server.last_headers();
    assert!(
        seen.iter()
            .any(|h| h.eq_ignore_ascii_case(&format!("authorization: {SECRET}"))),
        "{seen:?}"
    );
    let everything = format!("{:?} {:?} {:?}", report.journal, report.logs, report.result);
    assert!(!everything.contains("tok-7c1f0e"), "{everything}");
}

#[test]
fn a_replay_answers_from_the_journal_with_the_server_gone() {
    let mut server = HttpServer::start();
    let (_cache, skill) = web_fetch();
    let url = server.url("/hello");
    let recorded = fetch(&skill, &url, &options(&server.host_port()));
    let journal = recorded.journal.clone();
    let first: Value = recorded.into_result().unwrap();
    server.stop();
    let mut replay = options(&server.host_port());
    replay.journal = JournalMode::Replay(journal.into());
    let again = fetch(&skill, &url, &replay).into_result().unwrap();
    assert_eq!(again, first);
    assert_eq!(server.requests(), 1);
    // Asking for another URL is a divergence, not a request.
    let other = skill.call(
        &json!({ "url": server.url("/other"), "max_chars": 0 }),
        &replay,
    );
    assert!(
        matches!(other.result, Err(CallError::JournalMismatch { .. })),
        "{:?}",
        other.result
    );
}
