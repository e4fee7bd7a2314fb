//! `host replay`, `host runs export` and `host runs fork` end to end: a run
//! whose `web-fetch` node reached a real HTTP server replays after the
//! server is stopped; a `kv` run replays, and a journal entry edited in the
//! database is named as its step's divergence (exit 1); the research run
//! replays clean, from its database and from an exported file in a fresh
//! directory with no database; a fork starts from a middle checkpoint and
//! runs like `host run`; and what is refused (a running run, a changed
//! component, a fork that does not fit) is refused with exit 2, writing
//! nothing.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;
use skillhost_tests::cli::{host, host_command, json, sqlite_url, stderr};
use skillhost_tests::http_server::{HELLO, HttpServer};

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        stdout(out),
        stderr(out)
    );
}

fn exit(out: &Output, code: i32) -> String {
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {}\nstderr: {}",
        stdout(out),
        stderr(out)
    );
    stderr(out)
}

fn edit_database(dir: &Path, sql: &str) {
    use sqlx::Connection;
    let url = sqlite_url(dir);
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            conn.close().await.unwrap();
        });
}

/// A scenario whose one node fetches `input.url` with `web-fetch`, granted
/// `host`.
fn fetch_scenario(dir: &Path, host: &str) -> String {
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
capabilities = {{ http = ["{host}"] }}
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

/// The run's id from `host run --json`.
fn run_id(out: &Output) -> String {
    ok(out);
    json(out)["run_id"].as_str().unwrap().to_string()
}

#[test]
fn an_http_run_replays_after_its_server_is_stopped() {
    let mut server = HttpServer::start();
    let dir = tempfile::tempdir().unwrap();
    let scenario = fetch_scenario(dir.path(), &server.host_port());
    let input = format!(r#"{{"url": "{}"}}"#, server.url("/hello"));
    let id = run_id(&host(
        dir.path(),
        &["run", &scenario, "--input", &input, "--json"],
        None,
    ));
    assert_eq!(server.requests(), 1);
    server.stop();

    let out = host(dir.path(), &["replay", &id], None);
    ok(&out);
    let text = stdout(&out);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("1  fetch"))
        .unwrap_or_else(|| panic!("{text}"));
    let columns: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(&columns[..4], ["1", "fetch", "same", "1"], "{text}");
    assert!(text.contains("replayed 1 of 1 step(s)"), "{text}");

    let out = host(dir.path(), &["replay", &id, "--json"], None);
    ok(&out);
    let report = json(&out);
    assert_eq!(report["diverged_at"], Value::Null);
    assert_eq!(report["steps"][0]["calls_served"], 1);
    assert_eq!(report["steps"][0]["status"], "same");

    // The shown run names the component it ran.
    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    let sums = std::fs::read_to_string(skillhost_tests::repo_root().join("skills/dist/SHA256SUMS"))
        .unwrap();
    let digest = sums
        .lines()
        .find_map(|line| line.strip_suffix("  web-fetch.wasm"))
        .unwrap();
    assert_eq!(shown["components"]["fetch"], digest);
    assert_eq!(shown["state"]["text"], HELLO);

    // Another component in its place: refused, naming the file.
    std::fs::copy(
        skillhost_tests::dist("echo"),
        dir.path().join("web-fetch.wasm"),
    )
    .unwrap();
    let out = host(dir.path(), &["replay", &id], None);
    let error = exit(&out, 2);
    assert!(error.contains("skill `fetch`"), "{error}");
    assert!(error.contains("web-fetch.wasm (holds"), "{error}");
    assert!(error.contains("--components DIR"), "{error}");
}

/// The `kv-journal` scenario of the engine's tests
/// (`tests/e2e/engine/kv_journal.toml`: a skill node and a map node that
/// read and write `kv`), its map one item at a time over `a`, `b` and
/// `seen`, so the last item reads what the one before it wrote.
fn kv_scenario(dir: &Path) -> String {
    std::fs::write(
        dir.join("kv-probe.wasm"),
        skillhost_tests::fixture_component("kv-probe"),
    )
    .unwrap();
    let mut text = std::fs::read_to_string(
        skillhost_tests::repo_root().join("tests/e2e/engine/kv_journal.toml"),
    )
    .unwrap();
    for (from, to) in [
        (
            "over = \"['a', 'b', 'c']\"",
            "over = \"['a', 'b', 'seen']\"",
        ),
        ("concurrency = 3", "concurrency = 1"),
    ] {
        assert!(text.contains(from), "kv_journal.toml has no `{from}`");
        text = text.replace(from, to);
    }
    let path = dir.join("kv.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[test]
fn a_kv_run_replays_and_an_edited_journal_entry_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = kv_scenario(dir.path());
    let id = run_id(&host(
        dir.path(),
        &[
            "run",
            &scenario,
            "--input",
            r#"{"key": "greeting"}"#,
            "--json",
        ],
        None,
    ));
    // One item at a time: the last one reads what the one before it wrote.
    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    assert_eq!(
        shown["state"]["readings"],
        serde_json::json!(["(none)", "(none)", "b"])
    );
    let journal = shown["journal"].as_array().unwrap();
    assert_eq!(journal.len(), 8);
    assert_eq!(journal[2]["item"], 0);
    assert_eq!(journal[3]["entry"], 1);
    let human = stdout(&host(dir.path(), &["runs", "show", &id], None));
    assert!(
        human.contains("journal: item 2: kv get seen -> ok"),
        "{human}"
    );

    let out = host(dir.path(), &["replay", &id, "--json"], None);
    ok(&out);
    let report = json(&out);
    let served: Vec<&Value> = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["calls_served"])
        .collect();
    assert_eq!(served, [2, 6]);

    // The third item's read, answered differently by hand.
    edit_database(
        dir.path(),
        "UPDATE journal SET response = '{\"ok\":\"aGk=\"}' \
         WHERE seq = 2 AND item_index = 2 AND entry_index = 0",
    );
    let out = host(dir.path(), &["replay", &id], None);
    let error = exit(&out, 1);
    assert!(
        error.contains("diverged from its record at step 2"),
        "{error}"
    );
    let text = stdout(&out);
    assert!(text.contains("read_many"), "{text}");
    assert!(text.contains("diverged"), "{text}");
    assert!(
        text.contains(
            "journal call `kv` entry 0 (item 2): the entry was changed after it was committed"
        ),
        "{text}"
    );
    assert!(
        text.contains("diverged at step 2 (node `read_many`)"),
        "{text}"
    );
    // The history commands refuse the edited row, naming it.
    let out = host(dir.path(), &["runs", "show", &id], None);
    let error = exit(&out, 3);
    assert!(
        error.contains("corrupt journal entry 0 of step 2 (node `read_many`, item 2)"),
        "{error}"
    );
    // An export keeps it as stored, and says so.
    let file = dir.path().join("run.json");
    let out = host(
        dir.path(),
        &["runs", "export", &id, "--out", file.to_str().unwrap()],
        None,
    );
    ok(&out);
    assert!(
        stderr(&out).contains("warning: step 2 (node `read_many`)"),
        "{}",
        stderr(&out)
    );
}

/// The research run replays clean; exported with its components, it
/// replays from a fresh directory with no database; without them, the
/// error lists every component and where it looked.
#[test]
fn the_research_run_replays_clean_and_from_an_export_without_a_database() {
    let repo = skillhost_tests::repo_root();
    let dir = tempfile::tempdir().unwrap();
    let research = |args: &[&str]| {
        host_command(dir.path(), args, None)
            .current_dir(&repo)
            .output()
            .unwrap()
    };
    let out = research(&[
        "run",
        "research",
        "--input",
        r#"{"query": "retrieval augmented generation"}"#,
        "--json",
        "--out",
        dir.path().join("report.md").to_str().unwrap(),
    ]);
    let id = run_id(&out);
    let out = research(&["replay", &id]);
    ok(&out);
    assert!(
        stdout(&out).contains("replayed 6 of 6 step(s)"),
        "{}",
        stdout(&out)
    );

    let export_dir = tempfile::tempdir().unwrap();
    let file = export_dir.path().join("run.json");
    let components = export_dir.path().join("components");
    let out = research(&[
        "runs",
        "export",
        &id,
        "--out",
        file.to_str().unwrap(),
        "--components",
        components.to_str().unwrap(),
    ]);
    ok(&out);
    let export: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(export["format"], "skillhost-run-export");
    assert_eq!(export["version"], 1);
    assert_eq!(export["scenario"]["name"], "research");
    assert!(
        export["scenario"]["text"]
            .as_str()
            .unwrap()
            .contains("[[node]]")
    );
    let digests: Vec<PathBuf> = export["components"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| components.join(format!("{}.wasm", c["digest"].as_str().unwrap())))
        .collect();
    assert!(!digests.is_empty());
    for path in &digests {
        assert!(path.is_file(), "{}", path.display());
    }

    // A fresh directory, no database: the host must not create one.
    let fresh = tempfile::tempdir().unwrap();
    let replay = |extra: &[&str]| {
        let mut args = vec!["replay", "--file", file.to_str().unwrap()];
        args.extend_from_slice(extra);
        host_command(fresh.path(), &args, None)
            .current_dir(fresh.path())
            .output()
            .unwrap()
    };
    let out = replay(&["--components", components.to_str().unwrap(), "--json"]);
    ok(&out);
    assert_eq!(json(&out)["diverged_at"], Value::Null);
    assert_eq!(json(&out)["steps"].as_array().unwrap().len(), 6);
    assert!(!fresh.path().join("runs.db").exists());

    // The scenario's paths resolved in the fresh directory (which has a
    // corpus directory, for the scenario's `fs` grant to be checked), no
    // components given: each one is listed with where it was looked for.
    std::fs::create_dir(fresh.path().join("corpus")).unwrap();
    let out = replay(&["--root", fresh.path().to_str().unwrap()]);
    let error = exit(&out, 2);
    assert!(
        error.contains("component(s) the run used cannot be found"),
        "{error}"
    );
    for path in &digests {
        let digest = path.file_stem().unwrap().to_str().unwrap();
        assert!(error.contains(&format!("sha256 {digest}")), "{error}");
    }
    assert!(error.contains("(no such file)"), "{error}");
}

#[test]
fn a_fork_runs_from_a_middle_checkpoint_like_host_run() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = skillhost_tests::repo_root()
        .join("tests/e2e/engine/loop.toml")
        .display()
        .to_string();
    let id = run_id(&host(dir.path(), &["run", &scenario, "--json"], None));
    let out = host(
        dir.path(),
        &[
            "runs",
            "fork",
            &id,
            "--at",
            "2",
            "--set",
            "lengths=[5, 6]",
            "--json",
        ],
        None,
    );
    ok(&out);
    let forked = json(&out);
    assert_eq!(forked["status"], "completed");
    assert_eq!(forked["state"]["lengths"], serde_json::json!([5, 6, 3]));
    let fork_id = forked["run_id"].as_str().unwrap();
    let runs = json(&host(dir.path(), &["runs", "list", "--json"], None));
    let listed = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == fork_id)
        .unwrap();
    assert_eq!(listed["forked_from"]["run_id"], id.as_str());
    assert_eq!(listed["forked_from"]["seq"], 2);
    let shown = stdout(&host(dir.path(), &["runs", "show", fork_id], None));
    assert!(
        shown.contains(&format!("forked    from run {id} at checkpoint 2")),
        "{shown}"
    );
    ok(&host(dir.path(), &["replay", fork_id], None));

    // What does not fit is refused, and nothing is written.
    for (args, expected) in [
        (
            vec!["--at", "99"],
            "has no checkpoint 99 (its checkpoints are 0 to 6)",
        ),
        (
            vec!["--at", "2", "--set", "nope=1"],
            "--set nope: state field `nope` is not declared",
        ),
        (
            vec!["--at", "2", "--set", "lengths=three"],
            "--set lengths: `three` is not valid JSON",
        ),
        (
            vec!["--at", "2", "--set", "lengths=\"three\""],
            "--set lengths:",
        ),
        (
            vec!["--at", "2", "--set", "lengths"],
            "give a state field and a JSON value as FIELD=JSON",
        ),
    ] {
        let mut all = vec!["runs", "fork", id.as_str()];
        all.extend(args);
        let error = exit(&host(dir.path(), &all, None), 2);
        assert!(error.contains(expected), "{error}");
    }
    let runs = json(&host(dir.path(), &["runs", "list", "--json"], None));
    assert_eq!(runs.as_array().unwrap().len(), 2);
}

#[test]
fn a_run_that_is_not_finished_is_not_replayed() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = skillhost_tests::repo_root()
        .join("tests/e2e/engine/loop.toml")
        .display()
        .to_string();
    let out = host(
        dir.path(),
        &["run", &scenario, "--events"],
        Some("after-commit:bump"),
    );
    assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
    let first: Value = serde_json::from_str(stdout(&out).lines().next().unwrap()).unwrap();
    let id = first["run_id"].as_str().unwrap();
    let error = exit(&host(dir.path(), &["replay", id], None), 2);
    assert!(error.contains("is running; only a finished run"), "{error}");
    assert!(error.contains(&format!("host resume {id}")), "{error}");
    let error = exit(&host(dir.path(), &["replay", "no-such-run"], None), 2);
    assert!(error.contains("does not exist"), "{error}");
}

/// A cached node's second run reuses the first run's output; `runs show`
/// says where it came from, and `runs prune` deletes the entry with the
/// run that wrote it.
#[test]
fn a_cached_step_is_shown_with_where_its_output_came_from() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(skillhost_tests::dist("echo"), dir.path().join("echo.wasm")).unwrap();
    let scenario = dir.path().join("cached.toml");
    std::fs::write(
        &scenario,
        r#"[scenario]
name = "cached"

[state]
echoed = { type = "string" }

[skills.echo]
component = "echo.wasm"

[[node]]
id = "shout"
skill = "echo"
input = { message = "'hey'", repeat = "3" }
cache = { ttl = "1h" }
writes = [{ field = "echoed", from = "output.message" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "shout"
to = "done"
"#,
    )
    .unwrap();
    let scenario = scenario.to_str().unwrap();
    let first = run_id(&host(dir.path(), &["run", scenario, "--json"], None));
    let second = run_id(&host(dir.path(), &["run", scenario, "--json"], None));
    let shown = stdout(&host(dir.path(), &["runs", "show", &second], None));
    assert!(
        shown.contains(&format!(
            "cached: the output of run {first}, step 1 (node `shout`); the skill was not called"
        )),
        "{shown}"
    );
    let shown = json(&host(
        dir.path(),
        &["runs", "show", &second, "--json"],
        None,
    ));
    assert_eq!(
        shown["steps"][0]["detail"]["cached"]["run_id"],
        first.as_str()
    );
    assert_eq!(shown["state"]["echoed"], "heyheyhey");
    let first_shown = stdout(&host(dir.path(), &["runs", "show", &first], None));
    assert!(!first_shown.contains("cached:"), "{first_shown}");

    let pruned = json(&host(
        dir.path(),
        &["runs", "prune", "--older-than", "0s", "--json"],
        None,
    ));
    assert_eq!(pruned["runs"].as_array().unwrap().len(), 2);
    assert_eq!(pruned["cache_entries"], 1);
}
