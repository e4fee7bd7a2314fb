//! What runs record in the process's metrics once a face installed them
//! (`skillhost_telemetry::metrics`; each test is a process of its own
//! under nextest, so each installs its own): runs started and finished by
//! scenario and status, a duration per node, the tokens of a node's `llm`
//! grant, a capability used without a grant, the journal's bytes, and a
//! worker's takeover of a dead runner's run.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skillhost_engine::replay::{RunExport, replay};
use skillhost_engine::worker::{self, WorkerConfig};
use skillhost_store::RunStatus;
use skillhost_telemetry::metrics::{self, Format};

use crate::{Db, completed, failed, run};

/// The value of the sample `sample` (name and labels exactly as encoded).
fn value(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(sample)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
    })
}

const ASK: &str = r#"[scenario]
name = "metered"

[input]
prompt = { type = "string" }

[state]
answer = { type = "string" }

[skills.probe]
component = "llm-probe.wasm"

[[node]]
id = "ask"
skill = "probe"
capabilities = { llm = "local/m" }
input = { messages = "[{'role': 'user', 'content': input.prompt}]", times = "1" }
writes = [{ field = "answer", from = "output.content" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "ask"
to = "done"
"#;

#[tokio::test]
async fn a_run_records_its_start_end_nodes_tokens_and_journal() {
    metrics::install();
    let setup = crate::llm::setup_scenario(ASK);
    let loaded = &*setup.loaded;

    let db = Db::sqlite().await;
    let ran = run(
        Some(db.store.clone()),
        loaded,
        json!({ "prompt": "one two three" }),
    )
    .await;
    completed(&ran);
    let text = metrics::render(Format::Prometheus, None);
    let sample = |s: &str| value(&text, s).unwrap_or_else(|| panic!("no `{s}` in:\n{text}"));
    assert_eq!(
        sample("skillhost_runs_started_total{scenario=\"metered\"}"),
        1.0
    );
    assert_eq!(
        sample("skillhost_runs_finished_total{scenario=\"metered\",status=\"completed\"}"),
        1.0
    );
    for node in ["ask", "done"] {
        assert_eq!(
            sample(&format!(
                "skillhost_node_duration_seconds_count{{scenario=\"metered\",node=\"{node}\"}}"
            )),
            1.0
        );
    }
    // Three words in, `echo:` and them out (the fake provider's count).
    assert_eq!(
        sample("skillhost_model_tokens_total{provider=\"local\",model=\"m\",direction=\"input\"}"),
        3.0
    );
    assert_eq!(
        sample("skillhost_model_tokens_total{provider=\"local\",model=\"m\",direction=\"output\"}"),
        4.0
    );
    // The completion was journaled: its request and response, as stored.
    let journal = db.store.journal(&ran.outcome.run_id).await.unwrap();
    let stored: usize = journal
        .iter()
        .map(|e| e.request.to_string().len() + e.response.to_string().len())
        .sum();
    assert!(stored > 0);
    assert_eq!(sample("skillhost_journal_bytes_total"), stored as f64);

    // A replay records nothing: its calls were the run's.
    let before = text.clone();
    let export = RunExport::from_store(&db.store, &ran.outcome.run_id)
        .await
        .unwrap();
    let report = replay(&export, loaded, &mut |_| {})
        .await
        .expect("the run replays");
    assert!(
        report
            .steps
            .iter()
            .all(|s| s.calls_served > 0 || s.node != "ask")
    );
    let after = metrics::render(Format::Prometheus, None);
    assert_eq!(before, after, "a replay changed the metrics");
}

const UNGRANTED: &str = r#"[scenario]
name = "ungranted"

[state]
text = { type = "string" }

[skills.probe]
component = "undeclared.wasm"

[[node]]
id = "read"
skill = "probe"
input = { key = "'k'" }
writes = [{ field = "text", from = "output.text" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "read"
to = "done"
"#;

#[tokio::test]
async fn a_capability_used_without_a_grant_is_counted_and_the_run_ends_failed() {
    metrics::install();
    let dir = tempfile::tempdir().unwrap();
    // `kv-probe` with `kv` left out of its manifest: it imports `kv`, which
    // no grant can give it, and uses it.
    let component = skillhost_tests::fixture_component_with("kv-probe", |wat| {
        wat.replace(
            "(i32.store (i32.const 1060) (i32.const 1))",
            "(i32.store (i32.const 1060) (i32.const 0))",
        )
    });
    std::fs::write(dir.path().join("undeclared.wasm"), component).unwrap();
    let path = dir.path().join("scenario.toml");
    std::fs::write(&path, UNGRANTED).unwrap();
    let loaded = crate::load(&path);
    let db = Db::sqlite().await;
    let ran = run(Some(db.store.clone()), &loaded, json!({})).await;
    failed(&ran);
    assert_eq!(ran.last_error()["code"], "capability-denied");
    let text = metrics::render(Format::Prometheus, None);
    let sample = |s: &str| value(&text, s).unwrap_or_else(|| panic!("no `{s}` in:\n{text}"));
    assert_eq!(
        sample("skillhost_capability_denials_total{capability=\"kv\"}"),
        1.0
    );
    assert_eq!(
        sample("skillhost_runs_finished_total{scenario=\"ungranted\",status=\"failed\"}"),
        1.0
    );
    assert_eq!(value(&text, "skillhost_journal_bytes_total"), Some(0.0));
}

#[tokio::test]
async fn a_worker_taking_over_an_expired_lease_counts_a_takeover() {
    metrics::install();
    let db = Db::sqlite().await;
    let store = db.store.clone();
    store
        .enqueue_run(&skillhost_tests::store_fixtures::new_run("late", json!({})))
        .await
        .unwrap();
    // Its first runner claims it and dies: the lease expires.
    let (_, lease) = store
        .claim_run("dying", Duration::from_millis(100))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.generation, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let text = metrics::render(Format::Prometheus, None);
    assert_eq!(value(&text, "skillhost_lease_takeovers_total"), Some(0.0));

    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let report = worker::run(
        store.clone(),
        crate::runtime().clone(),
        WorkerConfig {
            exit_when_idle: true,
            poll_interval: Duration::from_millis(20),
            ..WorkerConfig::default()
        },
        shutdown,
        Arc::new(|_: &worker::WorkerEvent| {}),
    )
    .await;
    // Its scenario is no file here: the heir fails it, having taken it.
    assert_eq!(report.failed, 1, "{report:?}");
    let run = store.run("late").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.lease_generation, 2);
    let text = metrics::render(Format::Prometheus, None);
    assert_eq!(value(&text, "skillhost_lease_takeovers_total"), Some(1.0));
    // Failed without running: it finished, and never started here.
    assert_eq!(
        value(
            &text,
            "skillhost_runs_finished_total{scenario=\"demo\",status=\"failed\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "skillhost_runs_started_total{scenario=\"demo\"}"),
        None
    );
}
