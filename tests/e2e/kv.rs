//! The `kv` capability's data lives in the run store: a value a skill set
//! in one `host` process is read by the next, on SQLite and on Postgres,
//! and by a worker taking a queued run.

use std::path::Path;

use serde_json::Value;
use skillhost_tests::cli::{host_command, json, stderr};

/// One node whose `kv-probe` skill reads `input.key`, then writes the key
/// it read under `seen`; the state keeps what it read.
fn scenario(dir: &Path) -> String {
    std::fs::write(
        dir.join("kv-probe.wasm"),
        skillhost_tests::fixture_component("kv-probe"),
    )
    .unwrap();
    let path = dir.join("memory.toml");
    std::fs::write(
        &path,
        r#"[scenario]
name = "memory"
version = "0.1.0"
description = "reads a key of kv and remembers which key it read"

[input]
key = { type = "string" }

[state]
read = { type = "string" }

[skills.probe]
component = "kv-probe.wasm"

[[node]]
id = "read"
skill = "probe"
capabilities = { kv = "memory" }
input = { key = "input.key" }
writes = [{ field = "read", from = "output.text" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "read"
to = "done"
"#,
    )
    .unwrap();
    path.display().to_string()
}

/// `host run SCENARIO --input {"key": KEY} --json` on `db` (the test's
/// SQLite file when `None`): what the run read.
fn read_in_a_new_process(dir: &Path, db: Option<&str>, scenario: &str, key: &str) -> Value {
    let input = format!(r#"{{"key": "{key}"}}"#);
    let mut args = vec!["run", scenario, "--input", &input, "--json"];
    if let Some(db) = db {
        args.extend(["--database", db]);
    }
    let out = host_command(dir, &args, None).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    json(&out)["state"]["read"].clone()
}

#[test]
fn a_value_set_in_one_process_is_read_by_the_next_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    // Nothing under `seen` yet; the run writes `seen = "first"`.
    assert_eq!(
        read_in_a_new_process(dir.path(), None, &scenario, "first"),
        "(none)"
    );
    // A new process reads what the last one wrote.
    assert_eq!(
        read_in_a_new_process(dir.path(), None, &scenario, "seen"),
        "first"
    );
    // `--durability none` keeps no store, so its kv is the process's own.
    let input = r#"{"key": "seen"}"#;
    let out = host_command(
        dir.path(),
        &[
            "run",
            &scenario,
            "--input",
            input,
            "--durability",
            "none",
            "--json",
        ],
        None,
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["state"]["read"], "(none)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_and_workers_on_one_postgres_share_kv_data() {
    processes_and_workers_share_kv_data(skillhost_tests::pg::fresh_database().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_and_workers_through_pgbouncer_share_kv_data() {
    processes_and_workers_share_kv_data(skillhost_tests::pgbouncer::fresh_database().await.url)
        .await;
}

async fn processes_and_workers_share_kv_data(db: String) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = scenario(dir.path());
    assert_eq!(
        read_in_a_new_process(dir.path(), Some(&db), &scenario, "from-run"),
        "(none)"
    );
    // A queued run, taken by a worker, reads what `host run` wrote.
    let submitted = host_command(
        dir.path(),
        &[
            "submit",
            &scenario,
            "--input",
            r#"{"key": "seen"}"#,
            "--database",
            &db,
            "--json",
        ],
        None,
    )
    .output()
    .unwrap();
    assert!(submitted.status.success(), "{}", stderr(&submitted));
    let id = json(&submitted)["run_id"].as_str().unwrap().to_owned();
    let worked = host_command(
        dir.path(),
        &["worker", "--exit-when-idle", "--database", &db],
        None,
    )
    .output()
    .unwrap();
    assert!(worked.status.success(), "{}", stderr(&worked));
    let shown = host_command(
        dir.path(),
        &["runs", "show", &id, "--json", "--database", &db],
        None,
    )
    .output()
    .unwrap();
    assert!(shown.status.success(), "{}", stderr(&shown));
    let shown = json(&shown);
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(shown["state"]["read"], "from-run", "{shown}");
    // And the next process reads what the worker's run wrote.
    assert_eq!(
        read_in_a_new_process(dir.path(), Some(&db), &scenario, "seen"),
        "seen"
    );
}
