//! Streamed response bodies (`http-stream`) with the real binary: `host
//! run` of a scenario whose `http-stream-probe` node streams bodies from a
//! real HTTP server on 127.0.0.1, one of them echoing the grant's secret in
//! two pieces; the run's state, journal and database hold no secret, and
//! `host replay` reproduces every step with the server gone.

use serde_json::{Value, json};
use skillhost_tests::cli::{host, host_command, json, stderr};
use skillhost_tests::http_server::HttpServer;

const SECRET: &str = "Bearer e2e-stream-5ecret-7c4";

fn scenario(dir: &std::path::Path, grant: &str) -> String {
    let path = dir.join("stream.toml");
    std::fs::write(
        &path,
        format!(
            r#"[scenario]
name = "stream-fetch"
version = "0.1.0"
description = "Streams response bodies"

[input]
urls = {{ type = "array" }}

[state]
responses = {{ type = "array" }}

[skills.fetch]
component = "{component}"

[[node]]
id = "fetch"
skill = "fetch"
input = {{ urls = "input.urls", together = "true", read_size = "0", headers = "[]", drop_after = "0", abandon = "[]" }}
capabilities = {{ http = {grant} }}
writes = [{{ field = "responses", from = "output.responses" }}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "fetch"
to = "done"
"#,
            component = skillhost_tests::dist("http-stream-probe").display()
        ),
    )
    .unwrap();
    path.display().to_string()
}

#[test]
fn a_run_streams_bodies_keeps_no_secret_and_replays_with_the_server_gone() {
    let mut server = HttpServer::start();
    let dir = tempfile::tempdir().unwrap();
    let grant = format!(
        r#"{{ hosts = ["{0}"], max_streams = 2, headers = {{ "http://{0}" = {{ Authorization = "env:SKILLHOST_E2E_STREAM_TOKEN" }} }} }}"#,
        server.host_port()
    );
    let scenario = scenario(dir.path(), &grant);
    let input = json!({ "urls": [
        server.url("/slow?pieces=3&size=400&pause=50"),
        server.url("/drip?header=Authorization&at=12&pause=50"),
    ]})
    .to_string();
    let mut run = host_command(
        dir.path(),
        &["run", &scenario, "--input", &input, "--json"],
        None,
    );
    run.env("SKILLHOST_E2E_STREAM_TOKEN", SECRET);
    let out = run.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = json(&out);
    let run_id = summary["run_id"].as_str().unwrap().to_string();

    let shown = json(&host(
        dir.path(),
        &["runs", "show", &run_id, "--json"],
        None,
    ));
    assert_eq!(shown["status"], "completed", "{shown}");
    let responses = shown["state"]["responses"].as_array().expect("responses");
    assert_eq!(responses.len(), 2, "{shown}");
    assert_eq!(responses[0]["size"], 1200);
    assert_eq!(responses[0]["error"], Value::Null);
    let echoed: String = responses[1]["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        echoed,
        "before [redacted env:SKILLHOST_E2E_STREAM_TOKEN] after"
    );
    let journal = shown["journal"].as_array().expect("journal");
    assert_eq!(journal.len(), 2, "{shown}");
    assert_eq!(journal[0]["kind"], "http");
    assert_eq!(journal[0]["request"]["stream"], true);
    let human = host(dir.path(), &["runs", "show", &run_id], None);
    let human = String::from_utf8_lossy(&human.stdout).into_owned();
    let line = format!(
        "journal: http GET {} -> 200, 1200 bytes",
        server.url("/slow?pieces=3&size=400&pause=50")
    );
    assert!(human.contains(&line), "{human}");

    // Nothing the host wrote holds the secret.
    let mut written = format!(
        "{}{}{shown}{human}",
        String::from_utf8_lossy(&out.stdout),
        stderr(&out)
    );
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            written.push_str(&String::from_utf8_lossy(&std::fs::read(&path).unwrap()));
        }
    }
    assert!(!written.contains("stream-5ecret"), "the secret was written");

    // A replay needs no server and reproduces every step.
    let asked = server.requests();
    server.stop();
    let mut replay = host_command(dir.path(), &["replay", &run_id, "--json"], None);
    replay.env("SKILLHOST_E2E_STREAM_TOKEN", SECRET);
    let out = replay.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let replay = json(&out);
    assert_eq!(replay["diverged_at"], Value::Null, "{replay}");
    for step in replay["steps"].as_array().unwrap() {
        assert_eq!(step["status"], "same", "{replay}");
    }
    assert_eq!(server.requests(), asked);
}
