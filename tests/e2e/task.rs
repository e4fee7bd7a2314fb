//! The task workflow (examples/task) end to end through the real `host`
//! binary: a task whose parse step fails verification, is dispatched again
//! with the verifier's remediation and passes, ending in the report; a
//! stricter task over the same records that runs out of retries and is
//! marked failed with the findings; a kill at several points of the retry
//! loop and `host resume` giving the same report byte for byte; the task run
//! through `host submit --task-id` and a worker, its task row pointing at
//! the run's last checkpoint; and `host check` of the scenario.

use serde_json::{Value, json};
use skillhost_store::Store;
use skillhost_tests::cli::{
    host_in_repo as host, json, killed_and_resumed_match, run_to_completion, sqlite_url, stderr,
};

const PASSES: &str = "@examples/task/inputs/seattle-precipitation.json";
const FAILS: &str = "@examples/task/inputs/seattle-precipitation-strict.json";
const HAND_ENTERED: &str = "data/seattle-weather/2016-hand-entered.csv";

fn nodes(shown: &Value) -> Vec<&str> {
    shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node"].as_str().unwrap())
        .collect()
}

fn checks(verdict: &Value) -> Vec<&str> {
    verdict["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["check"].as_str().unwrap())
        .collect()
}

#[test]
fn a_step_that_fails_verification_passes_after_remediation() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.md");
    let outcome = run_to_completion(dir.path(), "task", PASSES, &report);
    let state = &outcome["state"];

    // The first parse counted the malformed and the negative amounts; the
    // verifier found them and asked for both rows to be rejected.
    let history = state["history"].as_array().unwrap();
    let steps: Vec<(&str, u64, bool)> = history
        .iter()
        .map(|v| {
            (
                v["step_id"].as_str().unwrap(),
                v["attempt"].as_u64().unwrap(),
                v["passed"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        steps,
        [
            ("parse", 0, false),
            ("parse", 1, true),
            ("aggregate", 0, true),
            ("report", 0, true)
        ]
    );
    let first = &history[0];
    assert_eq!(
        checks(first),
        ["amounts-well-formed", "no-negative-amounts"]
    );
    let malformed = first["findings"][0]["message"].as_str().unwrap();
    for cell in [
        "3 `0,4` counted as 0.4",
        "4 `n/a` counted as 0.0",
        "6 `3.2 mm` counted as 3.2",
    ] {
        assert!(
            malformed.contains(&format!("{HAND_ENTERED}:{cell}")),
            "{malformed}"
        );
    }
    assert_eq!(
        first["findings"][1]["message"],
        format!("1 counted row(s) have a negative amount: {HAND_ENTERED}:5 -1.5")
    );
    assert_eq!(
        first["remediation"],
        json!(["reject-malformed-amounts", "reject-negative-amounts"])
    );

    // The retry applied it: every row of the data is counted or rejected.
    let parsed = &state["accepted"][0];
    assert_eq!(parsed["attempt"], 1);
    assert_eq!(parsed["applied"], first["remediation"]);
    assert_eq!(parsed["rows"].as_array().unwrap().len(), 1463);
    let rejected: Vec<String> = parsed["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| format!("{} {}", r["line"], r["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(
        rejected,
        [
            "3 malformed amount `0,4`",
            "4 malformed amount `n/a`",
            "5 negative amount `-1.5`",
            "6 malformed amount `3.2 mm`",
            "7 4 field(s), the header has 6",
        ]
    );
    assert_eq!(outcome["summary"]["attempts"], 4);
    assert_eq!(outcome["summary"]["retried"], 1);

    // The report: the totals (checked against the NOAA file by hand, plus
    // the two clean hand-entered rows), the rejected rows, and how each step
    // was verified.
    let markdown = std::fs::read_to_string(&report).unwrap();
    for line in [
        "# Seattle precipitation by weather type\n",
        "- Rows read: 1468\n",
        "| drizzle | 54 | 1.0 |\n",
        "| fog | 412 | 2656.0 |\n",
        "| rain | 259 | 1321.8 |\n",
        "| snow | 23 | 208.1 |\n",
        "| sun | 715 | 239.4 |\n",
        "| **all** | 1463 | 4426.3 |\n",
        "## Rejected rows\n",
        "| parse | row-counts-match, amounts-well-formed, no-negative-amounts | 2 | passed with remediation `reject-malformed-amounts`, `reject-negative-amounts` |\n",
        "| aggregate | totals-match-rows, required-categories | 1 | passed |\n",
        "- `parse`, attempt 1:\n",
    ] {
        assert!(markdown.contains(line), "missing {line:?} in\n{markdown}");
    }

    let id = outcome["run_id"].as_str().unwrap();
    let shown = json(&host(dir.path(), &["runs", "show", id, "--json"], None));
    assert_eq!(shown["artifacts"][0]["name"], "report.md");
    assert_eq!(shown["artifacts"][0]["size"], json!(markdown.len()));
    let loop_once = [
        "dispatch_step",
        "collect_result",
        "verify_step",
        "step_passed",
    ];
    let mut expected = vec!["load_context", "plan_steps", "has_next_step"];
    expected.extend(loop_once);
    expected.push("retry_step");
    expected.extend(loop_once);
    for _ in 0..2 {
        expected.push("next_step");
        expected.push("has_next_step");
        expected.extend(loop_once);
    }
    expected.extend(["next_step", "has_next_step", "finalize_summary"]);
    assert_eq!(nodes(&shown), expected);
}

#[test]
fn a_step_out_of_retries_marks_the_task_failed_with_the_findings() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(
        dir.path(),
        &["run", "task", "--input", FAILS, "--json"],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "failed");
    let failure = &outcome["failure"];
    assert_eq!(failure["handler"], "mark_failed");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "task `seattle-precipitation-strict`: step `parse` failed verification in 2 attempt(s); findings: max-rejected-rows: 5 row(s) rejected, at most 0 allowed: "
        ),
        "{message}"
    );
    for row in [
        "2016-hand-entered.csv:3 malformed amount `0,4`",
        "2016-hand-entered.csv:5 negative amount `-1.5`",
        "2016-hand-entered.csv:7 4 field(s), the header has 6",
    ] {
        assert!(message.contains(row), "{message}");
    }
    // Both attempts were verified; the second applied the first's
    // remediation, which no retry can get past: the data must change.
    let history = failure["partial_results"]["history"].as_array().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(
        checks(&history[0]),
        [
            "amounts-well-formed",
            "no-negative-amounts",
            "max-rejected-rows"
        ]
    );
    assert_eq!(checks(&history[1]), ["max-rejected-rows"]);
    assert_eq!(history[1]["remediation"], history[0]["remediation"]);
    assert!(outcome["artifacts"].as_array().unwrap().is_empty());

    let id = outcome["run_id"].as_str().unwrap();
    let shown = json(&host(dir.path(), &["runs", "show", id, "--json"], None));
    assert_eq!(shown["status"], "failed");
    let nodes = nodes(&shown);
    assert_eq!(nodes.iter().filter(|n| **n == "dispatch_step").count(), 2);
    assert_eq!(nodes.iter().filter(|n| **n == "retry_step").count(), 1);
    assert!(!nodes.contains(&"finalize_summary"), "{nodes:?}");
}

#[test]
fn killed_mid_run_and_resumed_gives_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    // Inside the first verification, after the retry was decided, and
    // before the summary's commit.
    let killed = killed_and_resumed_match(
        dir.path(),
        &["run", "task", "--input", PASSES],
        &[
            "in-commit:verify_step",
            "after-commit:retry_step",
            "before-commit:finalize_summary",
        ],
    );
    for (point, id) in killed {
        let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
        let nodes = nodes(&shown);
        assert_eq!(
            nodes.iter().filter(|n| **n == "retry_step").count(),
            1,
            "{point}: {nodes:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submitted_task_keeps_its_current_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(
        dir.path(),
        &[
            "submit",
            "task",
            "--input",
            PASSES,
            "--task-id",
            "seattle-precipitation",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id = String::from_utf8(out.stdout).unwrap().trim().to_string();
    let out = host(dir.path(), &["worker", "--exit-when-idle"], None);
    assert!(out.status.success(), "{}", stderr(&out));

    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    assert_eq!(shown["status"], "completed");
    let seq = shown["steps"].as_array().unwrap().len() as u64;
    let store = Store::open(&sqlite_url(dir.path())).await.unwrap();
    let task = store
        .current_checkpoint("seattle-precipitation")
        .await
        .unwrap()
        .expect("the task's row");
    assert_eq!(task.run_id, id);
    assert_eq!((task.seq, task.node_id.as_str()), (seq, "finalize_summary"));
    store.close().await;
}

#[test]
fn the_scenario_passes_the_checker() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(dir.path(), &["check", "task", "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["ok"], true);
    assert_eq!(report["scenario"], "task");
    assert_eq!(report["nodes"], 13);
    assert_eq!(report["errors"], json!([]));
    assert_eq!(report["warnings"], json!([]), "{report}");
}

#[test]
fn a_task_the_skills_cannot_read_ends_in_the_error_handler() {
    let dir = tempfile::tempdir().unwrap();
    let task = |data_dir: &str, criteria: Value| {
        json!({
            "task_id": "bad",
            "goal": "g",
            "data_dir": data_dir,
            "columns": {"category": "weather", "amount": "precipitation"},
            "criteria": criteria,
        })
        .to_string()
    };
    for (input, expected) in [
        (
            task("data/no-such-folder", json!({})),
            "task-context cannot list the task's folder `data/no-such-folder`",
        ),
        // A misspelt criterion is refused, not silently left unchecked.
        (
            task("data/seattle-weather", json!({"no_negative_amount": true})),
            "$.criteria.no_negative_amount: unknown field",
        ),
    ] {
        let out = host(
            dir.path(),
            &["run", "task", "--input", &input, "--json"],
            None,
        );
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let failure = &json(&out)["failure"];
        assert_eq!(failure["node"], "load_context");
        assert_eq!(failure["handler"], "task_error");
        let message = failure["message"].as_str().unwrap();
        assert!(message.contains(expected), "{message}");
    }
}

/// Two runs of one task submitted together, and a worker with room for
/// both: the scenario's concurrency key (the task's id) runs them one after
/// the other.
#[test]
fn runs_of_one_task_run_one_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let submit = |input: &str| {
        let out = host(
            dir.path(),
            &["submit", "task", "--input", input, "--json"],
            None,
        );
        assert!(out.status.success(), "{}", stderr(&out));
        json(&out)["run_id"].as_str().unwrap().to_owned()
    };
    let first = submit(PASSES);
    let second = submit(PASSES);
    let out = host(
        dir.path(),
        &["worker", "--exit-when-idle", "--concurrency", "2", "--json"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // The worker's events, as (event, run): with room for two runs, the
    // second is claimed only once the first has finished.
    let events: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["run_id"].is_string())
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_owned(),
                e["run_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let at = |event: &str, run: &str| {
        events
            .iter()
            .position(|(e, r)| e == event && r == run)
            .unwrap_or_else(|| panic!("no `{event}` of {run} in {events:?}"))
    };
    for id in [&first, &second] {
        at("claimed", id);
        at("finished", id);
    }
    // When each run's first node started and its last node ended, from its
    // step rows. Not the worker's events: a completed run's end is
    // committed with its last checkpoint, which frees the task's slot, so
    // the second run may be claimed just before the worker says the first
    // finished, without the two ever running at once.
    let span = |id: &str| {
        let shown = json(&host(dir.path(), &["runs", "show", id, "--json"], None));
        assert_eq!(shown["status"], "completed", "{shown}");
        let steps = shown["steps"].as_array().unwrap().clone();
        let ms = |step: &Value, key: &str| step[key].as_i64().unwrap();
        let last = steps.last().unwrap();
        (
            ms(&steps[0], "started_at_ms"),
            ms(last, "started_at_ms") + ms(last, "duration_us") / 1000,
            steps,
        )
    };
    let (a, b) = (span(&first), span(&second));
    let (earlier, later) = if a.0 <= b.0 { (a, b) } else { (b, a) };
    assert!(
        later.0 >= earlier.1,
        "runs of one task overlapped: one started at {} ms, before the other ended at {} ms; \
         their steps: {:?} and {:?}; the worker's events: {events:?}",
        later.0,
        earlier.1,
        earlier.2,
        later.2
    );
}
