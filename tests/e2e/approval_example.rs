//! The orchestrator (examples/approval) end to end through the real `host`
//! binary: a safe request, retried once with a smaller rollout batch,
//! completes without waiting; a risky one waits, its process exits 0, and
//! an approval in a new process completes it with nothing before the
//! approval run again; a wrong-shaped answer is exit 2 with the run still
//! waiting, and a replay of the approved run takes its recorded answer;
//! a SIGKILL while waiting, then a rejection, records the change
//! as declined; a request out of retries ends in `execution_failed`; the
//! same approval path on Postgres with a `host worker`; `host check`, and
//! the README's graph being what `host graph` draws.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Value, json};
use skillhost_tests::cli::{host, json, stderr};
use skillhost_tests::repo_root;

use super::approval::{Worker, ok_nodes, out_text, run_host, show, wait_until};

fn example() -> PathBuf {
    repo_root().join("examples/approval")
}

fn scenario() -> String {
    example().join("scenario.toml").display().to_string()
}

/// `@FILE` of one of the example's inputs.
fn input(name: &str) -> String {
    format!("@{}", example().join("inputs").join(name).display())
}

/// The nodes a risky request passes before it waits.
const BEFORE_WAIT: [&str; 5] = [
    "analyze_request",
    "route_agent",
    "execute_finance",
    "executed",
    "needs_approval",
];

const PROMPT: &str = "waiting at node `approve`: Approve request CHG-2042 by sam: \
    refund 1,250.00 EUR to customer `C-1042` for invoice `INV-2207`? \
    Risky: amount 1,250.00 EUR over the threshold of 1,000.00 EUR. \
    It will: debit account `refunds` 1,250.00 EUR; credit customer `C-1042` 1,250.00 EUR";

/// Runs the risky request to its approval: exit 0, the prompt printed, the
/// run waiting with the nodes before the approval each run once. Returns
/// the run id.
fn start_risky(dir: &Path, db: Option<&str>) -> String {
    let out = run_host(
        dir,
        db,
        &["run", &scenario(), "--input", &input("risky.json")],
        0,
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(stdout.contains(PROMPT), "{}", out_text(&out));
    let id = waiting_run(dir, db);
    assert!(
        stdout.contains(&format!("host runs approve {id}")),
        "{stdout}"
    );
    assert_waiting_before_approval(dir, db, &id);
    id
}

/// The only waiting run.
fn waiting_run(dir: &Path, db: Option<&str>) -> String {
    let listed = json(&run_host(
        dir,
        db,
        &["runs", "list", "--status", "waiting", "--json"],
        0,
    ));
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    listed[0]["id"].as_str().unwrap().to_string()
}

fn assert_waiting_before_approval(dir: &Path, db: Option<&str>, id: &str) {
    let shown = show(dir, db, id);
    assert_eq!(shown["status"], "waiting", "{shown}");
    assert_eq!(ok_nodes(&shown), BEFORE_WAIT);
    assert_eq!(shown["steps"].as_array().unwrap().len(), BEFORE_WAIT.len());
    assert_eq!(shown["waits"][0]["node"], "approve", "{shown}");
    assert_eq!(shown["waits"][0]["answer"], Value::Null);
}

/// A wrong-shaped answer: exit 2 naming the node and the field, the run
/// still waiting and nothing written.
fn wrong_shape_is_refused(dir: &Path, db: Option<&str>, id: &str) {
    for data in [
        r#"{"approved": "yes"}"#,
        r#"{"comment": "fine"}"#,
        r#"{"approved": true, "by": "sam"}"#,
    ] {
        let out = run_host(dir, db, &["runs", "answer", id, "--data", data], 2);
        let err = stderr(&out);
        assert!(
            err.contains("does not fit node `approve`'s answer shape"),
            "{data}: {err}"
        );
        assert_waiting_before_approval(dir, db, id);
    }
}

/// The run completed through the approval: every node before it once, then
/// the approval and what follows the answer.
fn assert_completed_through(shown: &Value, after: &[&str]) {
    assert_eq!(shown["status"], "completed", "{shown}");
    let mut expected: Vec<&str> = BEFORE_WAIT.to_vec();
    expected.push("approve");
    expected.extend(after);
    assert_eq!(ok_nodes(shown), expected);
    assert_eq!(shown["steps"].as_array().unwrap().len(), expected.len());
}

fn artifact(dir: &Path, db: Option<&str>, id: &str) -> String {
    let out = run_host(dir, db, &["runs", "artifact", id, "change.md"], 0);
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_safe_request_is_retried_with_a_smaller_batch_and_completes_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let started = Instant::now();
    let out = run_host(
        dir,
        None,
        &["run", &scenario(), "--input", &input("safe.json"), "--json"],
        0,
    );
    eprintln!("safe.json: {:?} (fresh component cache)", started.elapsed());
    let outcome = json(&out);
    assert_eq!(outcome["status"], "completed");
    assert_eq!(
        outcome["summary"],
        json!({
            "request": "CHG-2041",
            "agent": "infra",
            "action": "restart service `search` in staging",
            "risky": false,
            "attempts": 2,
            "outcome": "applied",
        })
    );
    let id = outcome["run_id"].as_str().unwrap();
    let shown = show(dir, None, id);
    assert_eq!(shown["waits"], json!([]), "{shown}");
    assert_eq!(
        ok_nodes(&shown),
        [
            "analyze_request",
            "route_agent",
            "execute_infra",
            "executed",
            "retry_execution",
            "route_agent",
            "execute_infra",
            "executed",
            "needs_approval",
            "apply_change",
            "record_change",
        ]
    );
    let record = artifact(dir, None, id);
    for line in [
        "# Change record CHG-2041\n",
        "- Risk: none of the rules applies\n- Decision: not needed\n- Outcome: applied\n",
        "1. batch 1/2: restart search-0, search-1\n2. batch 2/2: restart search-2, search-3\n",
        "| service search | replicas restarted | 0 of 4 | 4 of 4 |\n",
        "- attempt 0: refused: a batch of 4 would take 4 of the 4 replica(s) of `search` down at once; it allows 2\n- attempt 1: 2 operation(s)\n",
    ] {
        assert!(record.contains(line), "missing {line:?} in\n{record}");
    }

    // Again, with the components compiled: the example's own time.
    let started = Instant::now();
    run_host(
        dir,
        None,
        &["run", &scenario(), "--input", &input("safe.json")],
        0,
    );
    eprintln!("safe.json: {:?} (cached components)", started.elapsed());
}

#[test]
fn a_risky_request_waits_and_an_approval_in_a_new_process_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let id = start_risky(dir, None);
    wrong_shape_is_refused(dir, None, &id);
    let out = run_host(
        dir,
        None,
        &["runs", "approve", &id, "--by", "alice", "--json"],
        0,
    );
    let outcome = json(&out);
    assert_eq!(outcome["status"], "completed");
    assert_eq!(outcome["summary"]["outcome"], "applied");
    assert_eq!(outcome["summary"]["risky"], true);
    let shown = show(dir, None, &id);
    assert_completed_through(&shown, &["apply_change", "record_change"]);
    let wait = &shown["waits"][0];
    assert_eq!(wait["answered_by"], "alice");
    assert_eq!(wait["answer"], json!({"approved": true, "comment": ""}));
    let record = artifact(dir, None, &id);
    for line in [
        "- Agent: finance\n",
        "- Risk: amount 1,250.00 EUR over the threshold of 1,000.00 EUR\n- Decision: approved\n- Outcome: applied\n",
        "## Operations\n\n1. debit account `refunds` 1,250.00 EUR\n",
        "| invoice INV-2207 | refunded | 400.00 EUR | 1,650.00 EUR |\n",
    ] {
        assert!(record.contains(line), "missing {line:?} in\n{record}");
    }
    // A replay re-executes every step from the record, the approval from its
    // recorded answer, and finds the same hashes.
    let out = run_host(dir, None, &["replay", &id], 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("replayed 8 of 8 step(s)"),
        "{}",
        out_text(&out)
    );
    // Answered once: a second answer is refused and changes nothing.
    let out = run_host(dir, None, &["runs", "reject", &id], 2);
    assert!(
        stderr(&out).contains("already answered"),
        "{}",
        stderr(&out)
    );
    assert_eq!(show(dir, None, &id)["steps"], shown["steps"]);
}

#[test]
fn a_risky_request_killed_while_waiting_and_then_rejected_is_recorded_as_declined() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let out = host(
        dir,
        &["run", &scenario(), "--input", &input("risky.json")],
        Some("after-wait:approve"),
    );
    assert_eq!(out.status.signal(), Some(9), "{}", out_text(&out));
    let id = waiting_run(dir, None);
    assert_waiting_before_approval(dir, None, &id);
    let out = run_host(
        dir,
        None,
        &[
            "runs",
            "answer",
            &id,
            "--data",
            r#"{"approved": false, "comment": "refunded by bank transfer already"}"#,
            "--by",
            "bob",
            "--json",
        ],
        0,
    );
    let outcome = json(&out);
    assert_eq!(outcome["status"], "completed");
    assert_eq!(outcome["summary"]["outcome"], "declined");
    let shown = show(dir, None, &id);
    assert_completed_through(&shown, &["decline_change", "record_change"]);
    let record = artifact(dir, None, &id);
    for line in [
        "- Decision: declined: \"refunded by bank transfer already\"\n- Outcome: declined\n",
        "## Operations (not carried out)\n",
    ] {
        assert!(record.contains(line), "missing {line:?} in\n{record}");
    }
}

#[test]
fn a_request_out_of_retries_ends_in_execution_failed() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let out = run_host(
        dir,
        None,
        &[
            "run",
            &scenario(),
            "--input",
            &input("retries.json"),
            "--json",
        ],
        1,
    );
    let outcome = json(&out);
    assert_eq!(outcome["status"], "failed");
    let failure = &outcome["failure"];
    assert_eq!(failure["handler"], "execution_failed");
    assert_eq!(
        failure["message"],
        "request CHG-2043: restart service `ledger-db` in staging failed in 2 attempt(s): \
         attempt 0: a batch of 4 would take 4 of the 5 replica(s) of `ledger-db` down at once; it allows 1; \
         attempt 1: a batch of 2 would take 2 of the 5 replica(s) of `ledger-db` down at once; it allows 1"
    );
    let id = outcome["run_id"].as_str().unwrap();
    let shown = show(dir, None, id);
    let nodes = ok_nodes(&shown);
    assert_eq!(nodes.iter().filter(|n| *n == "execute_infra").count(), 2);
    assert_eq!(nodes.iter().filter(|n| *n == "retry_execution").count(), 1);
    assert!(!nodes.iter().any(|n| n == "needs_approval"), "{nodes:?}");

    // A request the analysis cannot read goes to the error handler.
    let bad = json!({"id": "CHG-9", "requested_by": "dana", "text": "Reboot the search service in staging"});
    let out = run_host(
        dir,
        None,
        &["run", &scenario(), "--input", &bad.to_string(), "--json"],
        1,
    );
    let failure = &json(&out)["failure"];
    assert_eq!(failure["node"], "analyze_request");
    assert_eq!(failure["handler"], "request_error");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("request `CHG-9`: unknown verb `Reboot`"),
        "{failure}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_on_postgres_waits_at_the_approval_and_continues_once_approved() {
    let db = skillhost_tests::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let _worker = Worker::start(dir, &db);
    let out = run_host(
        dir,
        Some(&db),
        &["submit", &scenario(), "--input", &input("risky.json")],
        0,
    );
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    wait_until(dir, Some(&db), &id, "waited", |s| s["status"] == "waiting");
    assert_eq!(waiting_run(dir, Some(&db)), id);
    assert_waiting_before_approval(dir, Some(&db), &id);
    wrong_shape_is_refused(dir, Some(&db), &id);
    let out = run_host(
        dir,
        Some(&db),
        &["runs", "approve", &id, "--by", "alice"],
        0,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("is queued: a worker continues it"),
        "{stdout}"
    );
    wait_until(dir, Some(&db), &id, "completed", |s| {
        s["status"] == "completed"
    });
    let shown = show(dir, Some(&db), &id);
    assert_completed_through(&shown, &["apply_change", "record_change"]);
    assert_eq!(shown["waits"][0]["answered_by"], "alice");
    assert!(artifact(dir, Some(&db), &id).contains("- Decision: approved\n- Outcome: applied\n"));
}

#[test]
fn the_scenario_passes_the_checker_and_the_readme_draws_its_graph() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let report = json(&run_host(dir, None, &["check", &scenario(), "--json"], 0));
    assert_eq!(report["ok"], true);
    assert_eq!(report["scenario"], "approval");
    assert_eq!(report["errors"], json!([]));
    assert_eq!(report["warnings"], json!([]), "{report}");

    let out = run_host(dir, None, &["graph", &scenario(), "--format", "mermaid"], 0);
    let graph = String::from_utf8(out.stdout).unwrap();
    let readme = std::fs::read_to_string(example().join("README.md")).unwrap();
    let block = format!("```mermaid\n{graph}```");
    assert!(
        readme.contains(&block),
        "examples/approval/README.md does not hold `host graph approval --format mermaid`:\n{graph}"
    );
}
