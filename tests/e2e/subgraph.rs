//! Subgraph nodes through the `host` binary: a parent whose child run
//! completes (its state reaching the parent's writes), `runs show` and
//! `runs list` linking the two both ways; a failing child sending the
//! parent to its failure handler; a process killed inside the child and
//! `host resume PARENT` finishing the child, then the parent, with no node
//! run twice, on SQLite and on Postgres; `host runs cancel PARENT`
//! reaching the child left by a killed process; `host check` refusing a
//! missing file, a file that includes itself (directly or not), an input
//! mapping the child does not take and a child with an approval node;
//! `host graph` drawing the child as a cluster. Scenarios: `subgraph/`.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use skillhost_tests::cli::{host_command, json, stderr};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("e2e/subgraph/{name}.toml"))
        .display()
        .to_string()
}

/// `host ARGS` with its database at `db` (`None`: the SQLite file in `dir`).
fn host_on(dir: &Path, db: Option<&str>, args: &[&str], failpoint: Option<&str>) -> Output {
    let mut cmd = host_command(dir, args, failpoint);
    if let Some(db) = db {
        cmd.env("SKILLHOST_DATABASE_URL", db);
    }
    cmd.output().expect("run host")
}

fn shown(dir: &Path, db: Option<&str>, run: &str) -> Value {
    json(&host_on(dir, db, &["runs", "show", run, "--json"], None))
}

/// The nodes of a run's successful steps, in order.
fn ok_nodes(shown: &Value) -> Vec<String> {
    shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "ok")
        .map(|s| s["node"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_parent_gets_its_childs_state_and_runs_show_links_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let out = host_on(
        dir.path(),
        None,
        &[
            "run",
            &fixture("parent"),
            "--input",
            r#"{"text":"ab"}"#,
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let outcome = json(&out);
    let parent = outcome["run_id"].as_str().unwrap().to_string();
    let parent_shown = shown(dir.path(), None, &parent);
    let state = &parent_shown["state"];
    let child = state["child_run"].as_str().unwrap().to_string();
    assert_eq!(state["report"], "abab!");
    assert_eq!(state["report_length"], 5);
    assert_eq!(
        state["trail"],
        json!(["before", "c_check", "c_first", "c_second", "after:abab!"])
    );

    // Parent to child, and back.
    assert_eq!(
        parent_shown["children"],
        json!([{ "id": child, "scenario": "summary", "status": "completed",
                 "node": "summarise", "visit": 1 }])
    );
    assert_eq!(parent_shown["parent"], Value::Null);
    let child_shown = shown(dir.path(), None, &child);
    assert_eq!(
        child_shown["parent"],
        json!({ "run_id": parent, "node": "summarise", "visit": 1 })
    );
    assert_eq!(ok_nodes(&child_shown), ["c_check", "c_first", "c_second"]);
    let text = host_on(dir.path(), None, &["runs", "show", &parent], None);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(text.contains(&format!("child run: {child}")), "{text}");
    let text = host_on(dir.path(), None, &["runs", "show", &child], None);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!(
            "parent    run {parent} (node `summarise`, visit 1)"
        )),
        "{text}"
    );

    // A parent is exported as it is; a replay re-executes its child runs
    // one by one, not inside it.
    let out = host_on(dir.path(), None, &["runs", "export", &parent], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = host_on(dir.path(), None, &["replay", &parent], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("(subgraph node `summarise`), which a replay does not re-execute"),
        "{}",
        stderr(&out)
    );
    let out = host_on(dir.path(), None, &["replay", &child], None);
    assert!(out.status.success(), "{}", stderr(&out));

    // `runs list` lists the child, marked as one.
    let listed = json(&host_on(
        dir.path(),
        None,
        &["runs", "list", "--json"],
        None,
    ));
    let row = |id: &str| {
        listed
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id)
            .cloned()
            .unwrap()
    };
    assert_eq!(row(&child)["parent"]["run_id"], json!(parent));
    assert_eq!(row(&parent)["parent"], Value::Null);
    let text = host_on(dir.path(), None, &["runs", "list"], None);
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!("(child of {parent} at `summarise`)")),
        "{text}"
    );
}

#[test]
fn a_failing_child_sends_the_parent_to_its_failure_handler() {
    let dir = tempfile::tempdir().unwrap();
    let out = host_on(
        dir.path(),
        None,
        &[
            "run",
            &fixture("parent"),
            "--input",
            r#"{"text":"ab","mode":"error"}"#,
            "--json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let parent = json(&out)["run_id"].as_str().unwrap().to_string();
    let parent_shown = shown(dir.path(), None, &parent);
    assert_eq!(parent_shown["status"], "failed");
    assert_eq!(
        parent_shown["error"]["message"],
        "the summary failed: subgraph-failed"
    );
    let failed_step = parent_shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["node"] == "summarise")
        .cloned()
        .unwrap();
    assert_eq!(failed_step["status"], "failed");
    let child = failed_step["error"]["detail"]["child_run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        failed_step["error"]["message"]
            .as_str()
            .unwrap()
            .contains(&child)
    );
    let child_shown = shown(dir.path(), None, &child);
    assert_eq!(child_shown["status"], "failed");
    assert_eq!(child_shown["error"]["code"], "requested-error");
}

/// Kills `host run parent` at the child's failpoint `point`, resumes the
/// parent, and checks both runs ended as an uninterrupted run does, each
/// node committed once.
fn killed_in_the_child_then_resumed(db: Option<&str>, point: &str) {
    let dir = tempfile::tempdir().unwrap();
    let input = r#"{"text":"ab"}"#;
    let out = host_on(
        dir.path(),
        db,
        &["run", &fixture("parent"), "--input", input, "--events"],
        Some(point),
    );
    assert_eq!(
        out.status.signal(),
        Some(9),
        "failpoint `{point}` should kill the process; stderr: {}",
        stderr(&out)
    );
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .expect("run_started"),
    )
    .unwrap();
    let parent = first["run_id"].as_str().unwrap().to_string();
    let before = shown(dir.path(), db, &parent);
    assert_eq!(before["status"], "running");
    let child = before["children"][0]["id"].as_str().unwrap().to_string();
    // The child's last step (`c_second`, before its end node) commits the
    // child's end with it: killed after that commit, the child is
    // completed already; killed earlier, it is running.
    let child_status = if point.ends_with("c_second") {
        "completed"
    } else {
        "running"
    };
    assert_eq!(before["children"][0]["status"], child_status, "{point}");

    let out = host_on(dir.path(), db, &["resume", &parent, "--events"], None);
    assert!(out.status.success(), "resume: {}", stderr(&out));
    let started: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "node_started")
        .map(|e| e["node"].as_str().unwrap().to_string())
        .collect();
    // The child's committed nodes do not run again; the child ends first,
    // then the parent goes on.
    let committed_in_child = if point.ends_with("c_first") {
        vec!["c_second"]
    } else {
        vec![]
    };
    let mut expected = vec!["summarise"];
    expected.extend(committed_in_child);
    expected.push("p_after");
    assert_eq!(started, expected, "after `{point}`");

    let parent_shown = shown(dir.path(), db, &parent);
    assert_eq!(parent_shown["status"], "completed");
    assert_eq!(parent_shown["state"]["child_run"], json!(child));
    assert_eq!(
        parent_shown["state"]["trail"],
        json!(["before", "c_check", "c_first", "c_second", "after:abab!"])
    );
    assert_eq!(
        ok_nodes(&parent_shown),
        ["p_before", "summarise", "p_after"]
    );
    assert_eq!(parent_shown["children"].as_array().unwrap().len(), 1);
    let child_shown = shown(dir.path(), db, &child);
    assert_eq!(child_shown["status"], "completed");
    assert_eq!(ok_nodes(&child_shown), ["c_check", "c_first", "c_second"]);
}

#[test]
fn killed_inside_the_child_resumes_the_child_then_the_parent() {
    killed_in_the_child_then_resumed(None, "after-commit:c_first");
}

#[test]
fn killed_at_the_childs_last_commit_resumes_the_parent_only() {
    killed_in_the_child_then_resumed(None, "after-commit:c_second");
}

#[tokio::test]
async fn killed_inside_the_child_on_postgres_resumes_the_child_then_the_parent() {
    let db = skillhost_tests::pg::fresh_database().await;
    tokio::task::spawn_blocking(move || {
        killed_in_the_child_then_resumed(Some(&db), "after-commit:c_first")
    })
    .await
    .unwrap();
}

/// `host check FILE`: exit 2 and what it printed on stderr.
fn check_refuses(name: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = host_on(dir.path(), None, &["check", &fixture(name)], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    stderr(&out)
}

#[test]
fn host_check_refuses_a_missing_file_a_cycle_an_input_that_does_not_fit_and_a_waiting_child() {
    let err = check_refuses("missing");
    assert!(
        err.contains("node `inner`: subgraph scenario `no_such_child.toml` does not exist"),
        "{err}"
    );

    let err = check_refuses("self");
    assert!(
        err.contains("node `inner`: subgraph scenario `self.toml` includes itself"),
        "{err}"
    );

    let err = check_refuses("cycle_a");
    let a = fixture("cycle_a");
    let b = fixture("cycle_b");
    assert!(err.contains(&format!("`{a}` → `{b}` → `{a}`")), "{err}");
    assert!(
        err.contains("subgraph scenario `cycle_b.toml` does not pass its checks"),
        "{err}"
    );

    let err = check_refuses("waits");
    assert!(
        err.contains(
            "node `ask`: subgraph scenario `../engine/approval.toml` has approval node(s) `approve`"
        ),
        "{err}"
    );

    let err = check_refuses("unknown_input");
    assert!(err.contains("input `txt` is not a field"), "{err}");
    assert!(err.contains("requires input `text`"), "{err}");

    // The child is checked with its parent: a good pair passes.
    let dir = tempfile::tempdir().unwrap();
    let out = host_on(dir.path(), None, &["check", &fixture("parent")], None);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn host_graph_draws_the_child_as_a_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let out = host_on(dir.path(), None, &["graph", &fixture("parent")], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let mermaid = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in [
        "    subgraph summarise [\"summarise<br/>subgraph: child.toml\"]",
        "        summarise__c_first[\"c_first<br/>echo\"]",
        "        summarise__start__((start)) --> summarise__c_check",
        "        summarise__c_first --> summarise__c_second",
        "    end",
        "    p_before --> summarise",
        "    summarise --> p_after",
    ] {
        assert!(mermaid.contains(line), "{line:?} in:\n{mermaid}");
    }

    let out = host_on(
        dir.path(),
        None,
        &["graph", &fixture("parent"), "--format", "dot"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let dot = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in [
        "    compound=true;",
        "    subgraph \"cluster_summarise\" {",
        "        \"summarise__c_first\" [label=\"c_first\\necho\", shape=box];",
        "    \"p_before\" -> \"summarise__c_check\" [lhead=\"cluster_summarise\"];",
        "    \"summarise__c_check\" -> \"p_after\" [ltail=\"cluster_summarise\"];",
    ] {
        assert!(dot.contains(line), "{line:?} in:\n{dot}");
    }
}

/// A process killed inside the child leaves both runs `running`; `host runs
/// cancel PARENT` asks both to stop, and each ends as cancelled, running no
/// node, when it is resumed.
#[test]
fn cancelling_a_parent_left_by_a_killed_process_cancels_its_child() {
    let dir = tempfile::tempdir().unwrap();
    let out = host_on(
        dir.path(),
        None,
        &[
            "run",
            &fixture("parent"),
            "--input",
            r#"{"text":"ab"}"#,
            "--events",
        ],
        Some("after-commit:c_first"),
    );
    assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .expect("run_started"),
    )
    .unwrap();
    let parent = first["run_id"].as_str().unwrap().to_string();
    let child = shown(dir.path(), None, &parent)["children"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    let out = host_on(
        dir.path(),
        None,
        &["runs", "cancel", &parent, "--by", "carol", "--json"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    for id in [&parent, &child] {
        let run = shown(dir.path(), None, id);
        assert_eq!(run["status"], "running", "{run}");
        assert_eq!(run["cancel_requested"]["by"], "carol", "{run}");
    }
    for id in [&parent, &child] {
        let out = host_on(dir.path(), None, &["resume", id, "--json"], None);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let run = shown(dir.path(), None, id);
        assert_eq!(run["status"], "cancelled", "{run}");
    }
    // Nothing ran after the cancel: the child keeps the nodes it had
    // committed, the parent its first.
    assert_eq!(
        ok_nodes(&shown(dir.path(), None, &child)),
        ["c_check", "c_first"]
    );
    assert_eq!(ok_nodes(&shown(dir.path(), None, &parent)), ["p_before"]);
}
