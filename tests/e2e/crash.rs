//! Crash safety with the real binary: the `host` process is killed with
//! SIGKILL at a failpoint (before, inside and after a node's commit, and
//! inside a map node), `host resume` finishes the run, and the final state is
//! byte for byte that of an uninterrupted run, with every node's writes
//! applied exactly once.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use serde_json::Value;
use skillhost_tests::cli::{host, json};

fn scenario() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/engine/crash.toml")
        .display()
        .to_string()
}

/// The final state of an uninterrupted run, as the store serializes it.
fn reference_state(dir: &Path) -> String {
    let out = host(dir, &["run", &scenario(), "--json"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = json(&out)["run_id"].as_str().unwrap().to_string();
    let shown = json(&host(dir, &["runs", "show", &id, "--json"], None));
    serde_json::to_string(&shown["state"]).unwrap()
}

fn crash_and_resume(point: &str) {
    let dir = tempfile::tempdir().unwrap();
    let reference = reference_state(dir.path());

    let out = host(dir.path(), &["run", &scenario(), "--events"], Some(point));
    assert_eq!(
        out.status.signal(),
        Some(9),
        "failpoint `{point}` should kill the process; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .expect("run_started"),
    )
    .unwrap();
    let id = first["run_id"].as_str().unwrap().to_string();
    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    assert_eq!(shown["status"], "running", "killed at `{point}`");

    let out = host(dir.path(), &["resume", &id, "--events"], None);
    assert!(
        out.status.success(),
        "resume after `{point}`: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["resumed"], true);

    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    assert_eq!(shown["status"], "completed");
    assert_eq!(
        serde_json::to_string(&shown["state"]).unwrap(),
        reference,
        "state after a kill at `{point}` and a resume differs from an uninterrupted run"
    );
    // Exactly one successful step per node, in order.
    let nodes: Vec<&str> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "ok")
        .map(|s| s["node"].as_str().unwrap())
        .collect();
    assert_eq!(
        nodes,
        ["first", "second", "fan", "third"],
        "after `{point}`"
    );

    if point.starts_with("map-item") {
        let reused = events
            .iter()
            .filter(|e| e["event"] == "map_item_finished" && e["reused"] == true)
            .count();
        assert!(
            reused >= 1,
            "items finished before the kill must not run again"
        );
        let total = events
            .iter()
            .filter(|e| e["event"] == "map_item_finished")
            .count();
        assert_eq!(total, 6);
    }
}

#[test]
fn killed_before_a_commit() {
    crash_and_resume("before-commit:second");
}

#[test]
fn killed_inside_a_commit() {
    crash_and_resume("in-commit:second");
}

#[test]
fn killed_after_a_commit() {
    crash_and_resume("after-commit:second");
}

#[test]
fn killed_inside_a_map_node() {
    crash_and_resume("map-item:fan:3");
}

#[test]
fn killed_inside_the_map_nodes_commit() {
    crash_and_resume("in-commit:fan");
}

#[test]
fn killed_before_the_last_commit() {
    crash_and_resume("before-commit:third");
}
