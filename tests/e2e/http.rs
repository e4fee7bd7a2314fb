//! The `http` capability end to end: `host check` and `host run` of a
//! scenario whose `web-fetch` node reaches a real HTTP server on 127.0.0.1,
//! with a secret header that reaches the server and nothing the host writes;
//! and, through `host skill call` of the `http-probe` fixture (a skill that
//! sends the request it is given and returns the answer whole), where a
//! secret and the skill's own credentials go when two origins (127.0.0.1 and
//! 127.0.0.2) are granted and one redirects to the other, and what a
//! server that echoes the request hands back.

use std::path::Path;

use base64::Engine as _;
use serde_json::{Value, json};
use skillhost_tests::cli::{host, host_command, json, stderr};
use skillhost_tests::http_server::{HELLO, HttpServer};

const SECRET: &str = "Bearer e2e-5ecret-91d";

fn scenario(dir: &std::path::Path, grant: &str) -> String {
    std::fs::copy(
        skillhost_tests::dist("web-fetch"),
        dir.join("web-fetch.wasm"),
    )
    .unwrap();
    let path = dir.join("fetch.toml");
    std::fs::write(
        &path,
        format!(
            r#"[scenario]
name = "fetch"
version = "0.1.0"
description = "Fetches one page"

[input]
url = {{ type = "string" }}

[state]
status = {{ type = "integer" }}
text = {{ type = "string" }}

[skills.fetch]
component = "web-fetch.wasm"

[[node]]
id = "fetch"
skill = "fetch"
input = {{ url = "input.url", max_chars = "0" }}
capabilities = {{ http = {grant} }}
writes = [
  {{ field = "status", from = "output.status" }},
  {{ field = "text", from = "output.text" }},
]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "fetch"
to = "done"
"#
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn a_run_fetches_from_a_granted_host_and_stores_no_secret() {
    let server = HttpServer::start();
    let dir = tempfile::tempdir().unwrap();
    let grant = format!(
        r#"{{ hosts = ["{0}"], headers = {{ "http://{0}" = {{ Authorization = "env:SKILLHOST_E2E_TOKEN" }} }} }}"#,
        server.host_port()
    );
    let scenario = scenario(dir.path(), &grant);
    let input = format!(r#"{{"url": "{}"}}"#, server.url("/hello"));

    // Without the variable, the grant is refused when the scenario loads.
    let check = host(dir.path(), &["check", &scenario], None);
    assert_ne!(check.status.code(), Some(0));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        stderr(&check)
    );
    assert!(
        report.contains("SKILLHOST_E2E_TOKEN, which is not set"),
        "{report}"
    );

    let mut run = skillhost_tests::cli::host_command(
        dir.path(),
        &["run", &scenario, "--input", &input, "--json"],
        None,
    );
    run.env("SKILLHOST_E2E_TOKEN", SECRET);
    let out = run.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let seen = server.last_headers();
    assert!(
        seen.iter()
            .any(|h| h.eq_ignore_ascii_case(&format!("authorization: {SECRET}"))),
        "{seen:?}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let summary = json(&out);
    let run_id = summary["run_id"].as_str().unwrap();

    let shown = host(dir.path(), &["runs", "show", run_id, "--json"], None);
    let shown = json(&shown);
    assert_eq!(shown["state"]["text"], HELLO);
    assert_eq!(shown["state"]["status"], 200);
    // The step's journal: the request as the skill made it, the response.
    let journal = shown["journal"].as_array().expect("journal");
    assert_eq!(journal.len(), 1, "{shown}");
    assert_eq!(journal[0]["kind"], "http");
    assert_eq!(journal[0]["node"], "fetch");
    assert_eq!(journal[0]["request"]["url"], server.url("/hello"));
    assert_eq!(journal[0]["response"]["ok"]["status"], 200);
    let human = host(dir.path(), &["runs", "show", run_id], None);
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    let line = format!(
        "journal: http GET {} -> 200, {} bytes",
        server.url("/hello"),
        HELLO.len()
    );
    assert!(human.contains(&line), "{human}");

    // Nothing the host wrote holds the secret: its output, the database and
    // its write-ahead log.
    let mut written = format!("{stdout}{}{shown}{human}", stderr(&out));
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            written.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    assert!(dir.path().join("runs.db").exists());
    assert!(!written.contains("e2e-5ecret"), "the secret was written");
}

#[test]
fn a_bad_http_grant_is_reported_by_check() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path(), r#"["https://example.org/path"]"#);
    let check = host(dir.path(), &["check", "--json", &scenario], None);
    assert_ne!(check.status.code(), Some(0));
    let report = json(&check);
    // One error: the grant, not also a missing grant.
    let errors = report["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{report}");
    assert_eq!(errors[0]["code"], "bad-grant", "{report}");
    let message = errors[0]["message"].as_str().unwrap();
    assert!(message.contains("not a host"), "{report}");
}

/// The secret of the tests below: a bearer token whose credentials, alone,
/// are what a careless echo would show.
const TOKEN: &str = "e2e-t0ken-4a9b27c1";

fn bearer() -> String {
    format!("Bearer {TOKEN}")
}

/// `host skill call` of the `http-probe` fixture with `grant`, sending
/// `request`, the secret in `$SKILLHOST_E2E_TOKEN`: the output (status,
/// headers, body as text) or the error, and everything the command printed.
fn probe(dir: &Path, grant: &str, request: Value) -> (Result<Value, Value>, String) {
    let component = dir.join("http-probe.wasm");
    if !component.exists() {
        std::fs::write(&component, skillhost_tests::fixture_component("http-probe")).unwrap();
    }
    let mut request = request;
    for (key, default) in [("method", json!("GET")), ("headers", json!([]))] {
        if request.get(key).is_none() {
            request[key] = default;
        }
    }
    let grant = format!("http={grant}");
    let input = request.to_string();
    let mut call = host_command(
        dir,
        &[
            "skill",
            "call",
            component.to_str().unwrap(),
            "--input",
            &input,
            "--grant",
            &grant,
            "--json",
        ],
        None,
    );
    call.env("SKILLHOST_E2E_TOKEN", bearer());
    let out = call.output().unwrap();
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    let report = json(&out);
    let answer = if report["error"].is_null() {
        let mut output = report["output"].clone();
        let body = base64::engine::general_purpose::STANDARD
            .decode(output["body"].as_str().expect("a body"))
            .unwrap();
        output["body"] = String::from_utf8_lossy(&body).into_owned().into();
        Ok(output)
    } else {
        Err(report["error"].clone())
    };
    (answer, printed)
}

/// Whether `headers` (lines as the test server read them) hold `name`.
fn has_header(headers: &[String], name: &str) -> bool {
    headers.iter().any(|h| {
        h.split_once(':')
            .is_some_and(|(n, _)| n.eq_ignore_ascii_case(name))
    })
}

/// A grant of both servers, the secret bound to `a`'s origin.
fn two_origin_grant(a: &HttpServer, b: &HttpServer) -> String {
    json!({
        "hosts": [a.host_port(), b.host_port()],
        "headers": { format!("http://{}", a.host_port()): { "Authorization": "env:SKILLHOST_E2E_TOKEN" } },
    })
    .to_string()
}

#[test]
fn a_secret_goes_to_its_origin_only_and_never_through_a_redirect() {
    let a = HttpServer::start();
    let b = HttpServer::start_on("127.0.0.2");
    let dir = tempfile::tempdir().unwrap();
    let grant = two_origin_grant(&a, &b);

    // To its origin: there.
    let (answer, _) = probe(dir.path(), &grant, json!({ "url": a.url("/hello") }));
    assert_eq!(answer.unwrap()["status"], 200);
    let seen = a.last_headers();
    assert!(
        seen.iter()
            .any(|h| h.eq_ignore_ascii_case(&format!("authorization: {}", bearer()))),
        "{seen:?}"
    );

    // To the other granted origin: not there.
    let (answer, _) = probe(dir.path(), &grant, json!({ "url": b.url("/hello") }));
    assert_eq!(answer.unwrap()["status"], 200);
    assert!(
        !has_header(&b.last_headers(), "authorization"),
        "{:?}",
        b.last_headers()
    );

    // Its origin redirecting to the other: the secret stays behind.
    let hop = a.url(&format!("/redirect?to={}", b.url("/headers")));
    let (answer, printed) = probe(dir.path(), &grant, json!({ "url": hop }));
    let answer = answer.unwrap();
    assert_eq!(answer["status"], 200, "{answer}");
    assert!(
        !has_header(&b.last_headers(), "authorization"),
        "{:?}",
        b.last_headers()
    );
    assert!(!printed.contains(TOKEN), "{printed}");

    // A redirect whose location carries the secret is not followed, and
    // the refusal does not show it.
    let before = b.requests();
    let carry = a.url(&format!(
        "/redirect-with?to={}&header=authorization",
        b.url("/hello?token=")
    ));
    let (answer, printed) = probe(dir.path(), &grant, json!({ "url": carry }));
    let error = answer.unwrap_err();
    assert_eq!(error["code"], "redirect-not-granted", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("holds a secret"),
        "{error}"
    );
    assert_eq!(b.requests(), before, "the redirect was followed");
    assert!(!printed.contains(TOKEN), "{printed}");
}

#[test]
fn the_skills_own_credentials_are_dropped_on_a_redirect_to_another_origin() {
    let a = HttpServer::start();
    let b = HttpServer::start_on("127.0.0.2");
    let dir = tempfile::tempdir().unwrap();
    let grant = json!([a.host_port(), b.host_port()]).to_string();
    let credentials = json!([
        ["Authorization", "Basic c2tpbGw6b3du"],
        ["Cookie", "session=skill-own"],
        ["Proxy-Authorization", "Basic cHJveHk="],
        ["X-Trace", "kept"],
    ]);
    // Within one origin they follow the redirect.
    let same = a.url(&format!("/redirect?to={}", a.url("/headers")));
    let (answer, _) = probe(
        dir.path(),
        &grant,
        json!({ "url": same, "headers": credentials }),
    );
    let body = answer.unwrap()["body"].as_str().unwrap().to_lowercase();
    assert!(body.contains("cookie: session=skill-own"), "{body}");
    assert!(body.contains("authorization: basic c2tpbgw6b3du"), "{body}");
    // To another origin they do not; other headers do.
    let cross = a.url(&format!("/redirect?to={}", b.url("/headers")));
    let (answer, _) = probe(
        dir.path(),
        &grant,
        json!({ "url": cross, "headers": credentials }),
    );
    assert_eq!(answer.unwrap()["status"], 200);
    let seen = b.last_headers();
    for name in ["authorization", "cookie", "proxy-authorization"] {
        assert!(
            !has_header(&seen, name),
            "{name} reached the other origin: {seen:?}"
        );
    }
    assert!(has_header(&seen, "x-trace"), "{seen:?}");
    // Another port of the same address is another origin too, and a chain
    // that comes back does not pick them up again.
    let c = HttpServer::start();
    let grant = json!([a.host_port(), c.host_port()]).to_string();
    let back = a.url(&format!(
        "/redirect?to={}",
        c.url(&format!("/redirect?to={}", a.url("/headers")))
    ));
    let (answer, _) = probe(
        dir.path(),
        &grant,
        json!({ "url": back, "headers": credentials }),
    );
    assert_eq!(answer.unwrap()["status"], 200);
    assert!(
        !has_header(&c.last_headers(), "cookie"),
        "{:?}",
        c.last_headers()
    );
    assert!(
        !has_header(&a.last_headers(), "cookie"),
        "{:?}",
        a.last_headers()
    );
}

#[test]
fn a_host_that_echoes_the_secret_hands_the_skill_none_of_it() {
    let a = HttpServer::start();
    let b = HttpServer::start_on("127.0.0.2");
    let dir = tempfile::tempdir().unwrap();
    let grant = two_origin_grant(&a, &b);
    let redacted = "[redacted env:SKILLHOST_E2E_TOKEN]";
    // In the body as sent, and as JSON.
    for path in ["/headers", "/headers.json"] {
        let (answer, printed) = probe(dir.path(), &grant, json!({ "url": a.url(path) }));
        let answer = answer.unwrap();
        let body = answer["body"].as_str().unwrap();
        assert!(body.contains(redacted), "{path}: {body}");
        assert!(!printed.contains(TOKEN), "{path}: {printed}");
    }
    // In the response's headers.
    let (answer, printed) = probe(dir.path(), &grant, json!({ "url": a.url("/reflect") }));
    let answer = answer.unwrap();
    let echoed = answer["headers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| {
            h[0].as_str()
                .unwrap()
                .eq_ignore_ascii_case("x-seen-authorization")
        })
        .unwrap_or_else(|| panic!("no echo: {answer}"))
        .clone();
    assert_eq!(echoed[1], redacted, "{answer}");
    assert!(!printed.contains(TOKEN), "{printed}");
    // Compressed, where no redaction could reach: the skill's own
    // `Accept-Encoding` is replaced, and an encoded answer is refused.
    let (answer, printed) = probe(
        dir.path(),
        &grant,
        json!({ "url": a.url("/headers.gz"), "headers": [["Accept-Encoding", "gzip"]] }),
    );
    let error = answer.unwrap_err();
    assert_eq!(error["code"], "response-encoded", "{error}");
    assert!(!printed.contains(TOKEN), "{printed}");
    let seen = a.last_headers();
    assert!(
        seen.iter()
            .any(|h| h.eq_ignore_ascii_case("accept-encoding: identity")),
        "{seen:?}"
    );
    assert!(
        !seen.iter().any(|h| h.to_lowercase().contains("gzip")),
        "{seen:?}"
    );
    // Without a secret on the request, an encoded answer is the skill's.
    let (answer, _) = probe(dir.path(), &grant, json!({ "url": b.url("/headers.gz") }));
    assert_eq!(answer.unwrap()["status"], 200);
}

#[test]
fn a_run_keeps_no_echoed_secret_in_its_state_journal_or_database() {
    let server = HttpServer::start();
    let dir = tempfile::tempdir().unwrap();
    let grant = format!(
        r#"{{ hosts = ["{0}"], headers = {{ "http://{0}" = {{ Authorization = "env:SKILLHOST_E2E_TOKEN" }} }} }}"#,
        server.host_port()
    );
    let scenario = scenario(dir.path(), &grant);
    let input = format!(r#"{{"url": "{}"}}"#, server.url("/headers"));
    let mut run = host_command(
        dir.path(),
        &["run", &scenario, "--input", &input, "--json"],
        None,
    );
    run.env("SKILLHOST_E2E_TOKEN", bearer());
    let out = run.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        server
            .last_headers()
            .iter()
            .any(|h| h.eq_ignore_ascii_case(&format!("authorization: {}", bearer()))),
        "{:?}",
        server.last_headers()
    );
    let summary = json(&out);
    let run_id = summary["run_id"].as_str().unwrap();
    let shown = json(&host(dir.path(), &["runs", "show", run_id, "--json"], None));
    let text = shown["state"]["text"].as_str().unwrap();
    assert!(
        text.contains("[redacted env:SKILLHOST_E2E_TOKEN]"),
        "{text}"
    );
    let mut written = format!(
        "{}{}{shown}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            written.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    assert!(!written.contains(TOKEN), "the echoed secret was kept");
}

#[test]
fn a_secret_header_that_does_not_say_its_origin_is_refused_by_check_when_ambiguous() {
    let dir = tempfile::tempdir().unwrap();
    for (hosts, why) in [
        (r#"["127.0.0.1:8080"]"#, "has a port"),
        (r#"["api.example.org", "cdn.example.org"]"#, "several hosts"),
        (r#"["*.example.org"]"#, "wildcard"),
    ] {
        let grant = format!(
            r#"{{ hosts = {hosts}, headers = {{ Authorization = "env:SKILLHOST_E2E_TOKEN" }} }}"#
        );
        let path = scenario(dir.path(), &grant);
        let mut check = host_command(dir.path(), &["check", "--json", &path], None);
        check.env("SKILLHOST_E2E_TOKEN", bearer());
        let out = check.output().unwrap();
        assert_ne!(out.status.code(), Some(0), "{hosts}");
        let report = json(&out);
        let errors = report["errors"].as_array().expect("errors");
        assert_eq!(errors.len(), 1, "{report}");
        assert_eq!(errors[0]["code"], "bad-grant", "{report}");
        let message = errors[0]["message"].as_str().unwrap();
        assert!(message.contains(why), "{message}");
        assert!(message.contains(r#"headers = { "https://"#), "{message}");
        assert!(!message.contains(TOKEN), "{message}");
    }
    // One exact host without a port is read as its https origin.
    let path = scenario(
        dir.path(),
        r#"{ hosts = ["api.example.org"], headers = { Authorization = "env:SKILLHOST_E2E_TOKEN" } }"#,
    );
    let mut check = host_command(dir.path(), &["check", &path], None);
    check.env("SKILLHOST_E2E_TOKEN", bearer());
    let out = check.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // An origin the hosts do not allow is refused.
    let path = scenario(
        dir.path(),
        r#"{ hosts = ["api.example.org"], headers = { "https://other.example.org" = { Authorization = "env:SKILLHOST_E2E_TOKEN" } } }"#,
    );
    let mut check = host_command(dir.path(), &["check", "--json", &path], None);
    check.env("SKILLHOST_E2E_TOKEN", bearer());
    let out = check.output().unwrap();
    let report = json(&out);
    let message = report["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("not among the granted hosts"), "{report}");
}
