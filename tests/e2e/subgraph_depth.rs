//! How deep subgraphs nest, through the `host` binary: a chain of 300
//! scenario files, each running the next as a subgraph (past the depth at
//! which a host that nested child runs on its stack overflowed and
//! aborted), is refused by `host check` and `host run` naming the file and
//! the chain, before any run exists; a chain at the limit runs, every
//! child run completed; files that each run the next twice, which would
//! expand to millions of child scenarios, are refused at once; and a run
//! queued while its chain was short, whose files then grew to 300 levels,
//! fails in `host serve`'s worker with the checker's diagnostic while the
//! server goes on answering, no run left `running`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use skillhost_tests::cli::{KilledOnDrop, host, host_command, json, stderr};
use skillhost_tests::free_port;

/// How many levels subgraphs may nest (`MAX_SUBGRAPH_DEPTH` in
/// `skillhost-scenario`, as `docs/scenarios.md` states it).
const MAX_SUBGRAPH_DEPTH: usize = 16;

/// How many files the deep chains have: more than the ~248 levels at which
/// `host run` overflowed its stack before the limit.
const CHAIN: usize = 300;

/// `c0.toml` … `cN.toml` in `dir`, each running the next as its subgraph
/// node `down` and counting the levels below it in `state.depth`; `c{last}`
/// is a leaf (one gate). Returns the top file.
fn chain(dir: &Path, last: usize) -> PathBuf {
    for level in 0..=last {
        let body = if level < last {
            rung(level)
        } else {
            leaf(level)
        };
        std::fs::write(dir.join(format!("c{level}.toml")), body).unwrap();
    }
    dir.join("c0.toml")
}

fn rung(level: usize) -> String {
    format!(
        r#"[scenario]
name = "level{level}"

[state]
depth = {{ type = "integer", default = 0 }}

[[node]]
id = "down"
kind = "subgraph"
scenario = "c{next}.toml"
writes = [{{ field = "depth", from = "output.state.depth + 1" }}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "down"
to = "done"

[summary]
depth = "state.depth"
"#,
        next = level + 1
    )
}

fn leaf(level: usize) -> String {
    format!(
        r#"[scenario]
name = "level{level}"

[state]
depth = {{ type = "integer", default = 0 }}

[[node]]
id = "bottom"
kind = "gate"

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "bottom"
to = "done"

[summary]
depth = "state.depth"
"#
    )
}

/// The path of file `c{level}.toml` as the checker names it.
fn named(dir: &Path, level: usize) -> String {
    dir.canonicalize()
        .unwrap()
        .join(format!("c{level}.toml"))
        .display()
        .to_string()
}

/// The diagnostic `code` among `host check --json`'s errors.
fn error_with<'a>(report: &'a Value, code: &str) -> &'a Value {
    report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["code"] == code)
        .unwrap_or_else(|| panic!("no `{code}` error: {report}"))
}

/// `host check` on 300 nested files: exit 2, and the diagnostic in the
/// file at the limit names the file one level too deep and the whole chain
/// from the top; the same for `host run`, which creates no run.
#[test]
fn a_chain_of_300_subgraphs_is_refused_naming_the_file_and_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let top = chain(dir.path(), CHAIN);
    let top = top.to_str().unwrap();

    let out = host(dir.path(), &["check", top, "--json"], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let report = json(&out);
    let deep = error_with(&report, "subgraph-too-deep");
    assert_eq!(deep["file"], named(dir.path(), MAX_SUBGRAPH_DEPTH));
    assert_eq!(deep["node"], "down");
    assert_eq!(deep["line"], 10);
    let message = deep["message"].as_str().unwrap();
    let files: Vec<String> = (0..=MAX_SUBGRAPH_DEPTH + 1)
        .map(|level| format!("`{}`", named(dir.path(), level)))
        .collect();
    assert!(
        message.starts_with(&format!(
            "subgraph scenario `c{}.toml` would run {} levels of subgraphs deep: {}; subgraphs \
             nest at most {MAX_SUBGRAPH_DEPTH} levels",
            MAX_SUBGRAPH_DEPTH + 1,
            MAX_SUBGRAPH_DEPTH + 1,
            files.join(" → ")
        )),
        "{message}"
    );
    // Each file above says its child does not pass; nothing deeper than the
    // limit was read.
    assert_eq!(
        report["errors"].as_array().unwrap().len(),
        MAX_SUBGRAPH_DEPTH + 1
    );
    let top_error = &report["errors"][0];
    assert_eq!(
        (&top_error["code"], &top_error["file"]),
        (&Value::from("subgraph-invalid"), &Value::from(top))
    );

    let out = host(dir.path(), &["check", top], None);
    assert_eq!(out.status.code(), Some(2));
    let text = stderr(&out);
    assert!(
        text.contains("subgraph-too-deep") || text.contains("levels of subgraphs deep"),
        "{text}"
    );

    let out = host(dir.path(), &["run", top], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("would run 17 levels of subgraphs deep"),
        "{}",
        stderr(&out)
    );
    // Refused before the database was opened: no run, no database.
    assert!(
        !dir.path().join("runs.db").exists(),
        "a database was created"
    );
}

/// A chain exactly at the limit runs: a top-level run and one child run a
/// level, all completed, the depth counted up from the leaf.
#[test]
fn a_chain_at_the_limit_runs_every_level() {
    let dir = tempfile::tempdir().unwrap();
    let top = chain(dir.path(), MAX_SUBGRAPH_DEPTH);
    let out = host(dir.path(), &["run", top.to_str().unwrap(), "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "completed");
    assert_eq!(outcome["summary"]["depth"], MAX_SUBGRAPH_DEPTH);
    let listed = json(&host(dir.path(), &["runs", "list", "--json"], None));
    let runs = listed.as_array().unwrap();
    assert_eq!(runs.len(), MAX_SUBGRAPH_DEPTH + 1);
    assert!(runs.iter().all(|r| r["status"] == "completed"), "{listed}");
}

/// Files that each run the next twice: 300 of them expand to 2^300 child
/// scenarios. Each file is read once per level, and the tree is refused
/// for its size (or its depth) at once.
#[test]
fn files_that_each_run_the_next_twice_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    for level in 0..=CHAIN {
        let body = match level {
            CHAIN => "[scenario]\nname = \"end\"\n\n[[node]]\nid = \"done\"\nkind = \"end\"\n"
                .to_string(),
            _ => format!(
                "[scenario]\nname = \"twice{level}\"\n\n[[node]]\nid = \"left\"\nkind = \
                 \"subgraph\"\nscenario = \"d{next}.toml\"\n\n[[node]]\nid = \"right\"\nkind = \
                 \"subgraph\"\nscenario = \"d{next}.toml\"\n\n[[node]]\nid = \"done\"\nkind = \
                 \"end\"\n\n[[edge]]\nfrom = \"left\"\nto = \"right\"\n\n[[edge]]\nfrom = \
                 \"right\"\nto = \"done\"\n",
                next = level + 1
            ),
        };
        std::fs::write(dir.path().join(format!("d{level}.toml")), body).unwrap();
    }
    let started = Instant::now();
    // Eight levels of two: 510 child scenarios, past the 256 a tree holds.
    let out = host(
        dir.path(),
        &[
            "check",
            dir.path()
                .join(format!("d{}.toml", CHAIN - 8))
                .to_str()
                .unwrap(),
            "--json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let report = json(&out);
    let many = error_with(&report, "subgraph-too-many");
    assert_eq!(many["node"], "right");
    assert!(
        many["message"]
            .as_str()
            .unwrap()
            .contains("this scenario's subgraphs run 510 child scenarios"),
        "{report}"
    );
    // Seven levels: 254, which a tree may hold.
    let out = host(
        dir.path(),
        &[
            "check",
            dir.path()
                .join(format!("d{}.toml", CHAIN - 7))
                .to_str()
                .unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // All 300: refused, with a handful of diagnostics, not one per path.
    let out = host(
        dir.path(),
        &[
            "check",
            dir.path().join("d0.toml").to_str().unwrap(),
            "--json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let errors = json(&out)["errors"].as_array().unwrap().len();
    assert!(errors < 100, "{errors} diagnostics");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
}

/// A run queued while its chain was 10 levels deep, whose files then grew
/// to 300: `host serve`'s worker claims it, the checker refuses its
/// scenario, and the run fails with the diagnostic; the server, which a
/// run nested on its stack would have aborted, answers afterwards, and no
/// run is left `running`.
#[test]
fn a_deep_chain_queued_in_host_serve_fails_its_run_and_the_server_stays_up() {
    let dir = tempfile::tempdir().unwrap();
    let top = chain(dir.path(), 10);
    let top = top.to_str().unwrap();
    let out = host(dir.path(), &["submit", top, "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let run_id = json(&out)["run_id"].as_str().unwrap().to_string();
    // The leaf now runs the next file, and so on to 300.
    chain(dir.path(), CHAIN);

    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let child = host_command(dir.path(), &["serve", "--addr", &addr], None)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start host serve");
    let mut server = KilledOnDrop::new(child);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let get = |path: &str| -> Option<Value> {
        let response = client.get(format!("http://{addr}{path}")).send().ok()?;
        if response.status().as_u16() != 200 {
            return None;
        }
        serde_json::from_str(&response.text().ok()?).ok()
    };
    let deadline = Instant::now() + Duration::from_secs(120);
    let run = loop {
        if let Some(run) = get(&format!("/api/runs/{run_id}"))
            && run["run"]["status"] == "failed"
        {
            break run;
        }
        assert!(
            server.try_wait().unwrap().is_none(),
            "host serve exited while its worker ran the deep chain"
        );
        assert!(Instant::now() < deadline, "the run did not fail in 120 s");
        std::thread::sleep(Duration::from_millis(200));
    };
    let error = &run["run"]["error"];
    assert_eq!(error["code"], "scenario-unavailable", "{run}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("would run 17 levels of subgraphs deep"),
        "{run}"
    );
    // Still up, still answering, and nothing running.
    std::thread::sleep(Duration::from_millis(500));
    assert!(server.try_wait().unwrap().is_none(), "host serve exited");
    let listed = get("/api/runs").expect("the runs list");
    let runs = listed["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 1, "{listed}");
    assert!(runs.iter().all(|r| r["status"] != "running"), "{listed}");
    let out = host(dir.path(), &["runs", "list", "--json"], None);
    let statuses: Vec<Value> = json(&out)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].clone())
        .collect();
    assert_eq!(statuses, [Value::from("failed")]);
}

/// `host serve --scenarios` with the 300-level chain among them starts
/// (one scenario that cannot run does not take the server down, issue 30)
/// but never offers it: it is listed as unavailable, naming the file and the
/// chain as `host run` does, and a start of it is refused without a run,
/// while the server keeps answering.
#[test]
fn host_serve_refuses_to_offer_a_chain_past_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let top = chain(dir.path(), CHAIN);
    let addr = format!("127.0.0.1:{}", free_port());
    let child = host_command(
        dir.path(),
        &[
            "serve",
            "--addr",
            &addr,
            "--scenarios",
            top.to_str().unwrap(),
        ],
        None,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("start host serve");
    let mut server = KilledOnDrop::new(child);
    let client = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let base = format!("http://{addr}");
    let deadline = Instant::now() + Duration::from_secs(60);
    let listed: Value = loop {
        assert!(
            server.try_wait().unwrap().is_none(),
            "host serve exited instead of listing the chain as unavailable"
        );
        if let Ok(reply) = client.get(format!("{base}/api/scenarios")).send() {
            break reply.json().unwrap();
        }
        assert!(Instant::now() < deadline, "host serve never answered");
        std::thread::sleep(Duration::from_millis(100));
    };
    let scenarios = listed["scenarios"].as_array().unwrap();
    assert_eq!(scenarios.len(), 1, "{listed}");
    let entry = &scenarios[0];
    assert_eq!(entry["available"], false, "{entry}");
    let text = entry["reason"].as_str().unwrap();
    assert!(
        text.contains("would run 17 levels of subgraphs deep"),
        "{text}"
    );
    assert!(
        text.contains(&named(dir.path(), MAX_SUBGRAPH_DEPTH)),
        "{text}"
    );

    let name = entry["name"].as_str().unwrap();
    let refused = client
        .post(format!("{base}/api/runs"))
        .header("content-type", "application/json")
        .body(serde_json::json!({"scenario": name, "input": {}}).to_string())
        .send()
        .unwrap();
    assert_eq!(refused.status().as_u16(), 409);
    let runs: Value = client
        .get(format!("{base}/api/runs"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    assert_eq!(runs["runs"], serde_json::json!([]), "{runs}");
    assert!(server.try_wait().unwrap().is_none(), "host serve exited");
}
