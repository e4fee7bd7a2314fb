//! The host-call budget as a scenario sets it: a node's `max_host_calls`
//! and `host_call_mb` reach its calls, a skill that loops host calls (the
//! `host-loop` fixture) is stopped by them with an error that names the
//! key to raise, on a real store; out-of-range values are refused by the
//! checker.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use skillhost_engine::{Engine, NoEvents};
use skillhost_store::RunStatus;

use crate::{Db, load, runtime};

/// A scenario whose one node runs `host-loop` with `kv` (and the `http`
/// and `sql` its manifest declares, unused here) and `limits` (TOML lines
/// of the node).
async fn looping_scenario(dir: &Path, limits: &str) -> PathBuf {
    let component = dir.join("host-loop.wasm");
    if !component.exists() {
        std::fs::write(&component, skillhost_tests::fixture_component("host-loop")).unwrap();
        // Any SQLite file will do for the `sql` grant.
        let url = format!("sqlite://{}", dir.join("data.db").display());
        skillhost_store::Store::open(&url)
            .await
            .unwrap()
            .close()
            .await;
    }
    let path = dir.join("looping.toml");
    std::fs::write(
        &path,
        format!(
            r#"[scenario]
name = "looping"
version = "0.1.0"
description = "a skill that makes one host call over and over"

[input]
op = {{ type = "string" }}
times = {{ type = "integer" }}
size = {{ type = "integer" }}

[state]
calls = {{ type = "integer" }}

[skills.loop]
component = "host-loop.wasm"

[[node]]
id = "loop"
skill = "loop"
capabilities = {{ kv = {{ namespace = "loop", max_bytes = 1073741824 }}, http = ["127.0.0.1:9"], sql = "data.db" }}
input = {{ op = "input.op", arg = "'k'", size = "input.size", times = "input.times", keep_going = "false" }}
writes = [{{ field = "calls", from = "output.calls" }}]
{limits}

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "loop"
to = "done"
"#
        ),
    )
    .unwrap();
    path
}

async fn a_node_s_budget_stops_a_skill_that_loops_host_calls(db: Db) {
    let dir = tempfile::tempdir().unwrap();
    let loaded = load(&looping_scenario(dir.path(), "max_host_calls = 25\nhost_call_mb = 2").await);
    let engine = || Engine::new(Some(db.store.clone()), Arc::new(NoEvents));

    // Within the budget the skill runs to its end.
    let outcome = engine()
        .start(
            &loaded,
            json!({ "op": "get", "times": 25, "size": 0 }),
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        RunStatus::Completed,
        "{:?}",
        outcome.failure
    );
    assert_eq!(outcome.state.get("calls"), Some(&json!(25)));

    // The 26th call is refused; the skill returns the refusal, and the run
    // fails naming the budget and the key to raise.
    let outcome = engine()
        .start(
            &loaded,
            json!({ "op": "get", "times": 1000, "size": 0 }),
            None,
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    let failure = serde_json::to_string(&outcome.failure).unwrap();
    for says in ["host-call-budget", "made 25", "`max_host_calls` (now 25"] {
        assert!(failure.contains(says), "{says}: {failure}");
    }

    // Writes of 256 KiB: the values they carry are charged, eight do not
    // fit in 2 MiB, and the store holds only those that did.
    let outcome = engine()
        .start(
            &loaded,
            json!({ "op": "set", "times": 20, "size": 256 << 10 }),
            None,
        )
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    let failure = serde_json::to_string(&outcome.failure).unwrap();
    for says in ["host-call-budget", "`host_call_mb`", "request takes"] {
        assert!(failure.contains(says), "{says}: {failure}");
    }
    let space = skillhost_store::KvSpace {
        scope: "scenario:looping",
        namespace: "loop",
    };
    let written = db.store.kv_keys(space, "", 100).await.unwrap().len();
    assert!((1..8).contains(&written), "{written}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_budget_stops_a_skill_that_loops_host_calls_on_sqlite() {
    a_node_s_budget_stops_a_skill_that_loops_host_calls(Db::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_s_budget_stops_a_skill_that_loops_host_calls_on_postgres() {
    a_node_s_budget_stops_a_skill_that_loops_host_calls(Db::postgres().await).await;
}

#[tokio::test]
async fn the_checker_refuses_budgets_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    for (limits, says) in [
        (
            "max_host_calls = 0",
            "`max_host_calls = 0` must be from 1 to 1000000",
        ),
        (
            "max_host_calls = 2000000",
            "`max_host_calls = 2000000` must be from 1 to 1000000",
        ),
        (
            "host_call_mb = 0",
            "`host_call_mb = 0` must be from 1 to 4096",
        ),
        (
            "host_call_mb = 5000",
            "`host_call_mb = 5000` must be from 1 to 4096",
        ),
    ] {
        let path = looping_scenario(dir.path(), limits).await;
        let report = match skillhost_scenario::load(&path, runtime()) {
            Ok(_) => panic!("{limits} passed the checker"),
            Err(report) => report.to_string(),
        };
        assert!(report.contains(says), "{limits}: {report}");
        assert!(report.contains("Host-call budgets"), "{report}");
    }
}
