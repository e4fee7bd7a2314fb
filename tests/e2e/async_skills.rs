//! Async (WASI 0.3) skills in scenarios, with the real binary: a scenario
//! mixing `echo-async`, a map node over it, `async-probe` and `wasi3-probe`
//! (WASI 0.3's own interfaces) with the synchronous `echo` runs, checkpoints each node, replays byte for byte
//! with `host replay`, and, killed right after an async node's commit or
//! inside the map over the async skill, resumes to the state of an
//! uninterrupted run with each node applied once.

use std::path::Path;

use serde_json::{Value, json};
use skillhost_tests::cli::{host, json, run_killed_at, stderr};

use crate::approval::ok_nodes;

fn scenario() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/engine/async.toml")
        .display()
        .to_string()
}

/// A finished run of the scenario: its id and `runs show`.
fn run_to_the_end(dir: &Path) -> (String, Value) {
    let out = host(dir, &["run", &scenario(), "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = json(&out)["run_id"].as_str().unwrap().to_string();
    let shown = json(&host(dir, &["runs", "show", &id, "--json"], None));
    (id, shown)
}

#[test]
fn async_and_sync_skills_run_in_one_scenario_and_replay_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let (id, shown) = run_to_the_end(dir.path());
    assert_eq!(shown["status"], "completed", "{shown}");
    assert_eq!(
        shown["state"],
        json!({
            "trail": ["firstfirst", "fan", "40"],
            "echoes": ["aaa", "bbbbbb", "ccccccccc", "dddddddddddd"],
            "resumed": 40,
            "remembered": "40",
            "drawn": 16,
            "waited": 60_000_001_000u64,
            "errors": [],
        })
    );
    assert_eq!(
        ok_nodes(&shown),
        ["first", "fan", "suspend", "remember", "wasi3", "last"]
    );

    let out = host(dir.path(), &["replay", &id, "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let replay = json(&out);
    assert_eq!(replay["diverged_at"], Value::Null, "{replay}");
    let steps = replay["steps"].as_array().unwrap();
    assert!(!steps.is_empty(), "{replay}");
    for step in steps {
        assert_eq!(step["status"], "same", "{replay}");
    }
}

fn killed_and_resumed(point: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (_, reference) = run_to_the_end(dir.path());
    let scenario = scenario();
    let id = run_killed_at(
        dir.path(),
        dir.path(),
        &["run", &scenario, "--events"],
        point,
    );
    let out = host(dir.path(), &["resume", &id, "--json"], None);
    assert!(
        out.status.success(),
        "resume after `{point}`: {}",
        stderr(&out)
    );
    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    assert_eq!(shown["status"], "completed");
    assert_eq!(
        shown["state"], reference["state"],
        "after a kill at `{point}` and a resume"
    );
    assert_eq!(
        ok_nodes(&shown),
        ["first", "fan", "suspend", "remember", "wasi3", "last"]
    );
}

#[test]
fn killed_after_an_async_nodes_commit_resumes_to_the_same_state() {
    killed_and_resumed("after-commit:first");
}

#[test]
fn killed_inside_a_map_over_an_async_skill_resumes_to_the_same_state() {
    killed_and_resumed("map-item:fan:1");
}
