//! The `http` capability end to end: `host check` and `host run` of a
//! scenario whose `web-fetch` node reaches a real HTTP server on 127.0.0.1,
//! with a secret header that reaches the server and nothing the host writes.

use skillhost_tests::cli::{host, json, stderr};
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
        r#"{{ hosts = ["{}"], headers = {{ Authorization = "env:SKILLHOST_E2E_TOKEN" }} }}"#,
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
