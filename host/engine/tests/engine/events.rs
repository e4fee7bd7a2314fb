//! The events a run sends, in order: what `--events` streams and what a
//! progress display relies on.

use serde_json::json;
use skillhost_engine::Event;

use crate::{Db, completed, e2e_scenario, event_trail, failed, load, run};

#[tokio::test]
async fn a_completed_run_reports_every_transition_in_order() {
    let loaded = load(&e2e_scenario("pipeline"));
    let db = Db::sqlite().await;
    let ran = run(Some(db.store.clone()), &loaded, json!({ "message": "e" })).await;
    completed(&ran);
    assert_eq!(
        event_trail(&ran.events),
        [
            "run_started",
            "node_started:greet",
            "checkpoint_written:greet",
            "node_finished:greet",
            "node_started:fan",
            "map_item_finished:fan",
            "map_item_finished:fan",
            "map_item_finished:fan",
            "checkpoint_written:fan",
            "node_finished:fan",
            "node_started:count",
            "checkpoint_written:count",
            "node_finished:count",
            "run_finished",
        ]
    );
    let run_id = ran.outcome.run_id.clone();
    assert_eq!(
        ran.events[0],
        Event::RunStarted {
            run_id: run_id.clone(),
            scenario: "pipeline".into(),
            resumed: false,
        }
    );
    let started: Vec<(&str, &str, u32, u32)> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            Event::NodeStarted {
                node,
                kind,
                visit,
                attempt,
                ..
            } => Some((node.as_str(), *kind, *visit, *attempt)),
            _ => None,
        })
        .collect();
    assert_eq!(
        started,
        [
            ("greet", "skill", 1, 1),
            ("fan", "map", 1, 1),
            ("count", "gate", 1, 1)
        ]
    );
    let checkpoints: Vec<(u64, Vec<String>)> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            Event::CheckpointWritten { seq, next, .. } => Some((*seq, next.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        checkpoints,
        [
            (1, vec!["fan".to_string()]),
            (2, vec!["count".to_string()]),
            (3, vec!["done".to_string()]),
        ]
    );
    let fuel: Vec<(&str, u64)> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            Event::NodeFinished {
                node,
                fuel_consumed,
                ..
            } => Some((node.as_str(), *fuel_consumed)),
            _ => None,
        })
        .collect();
    assert!(fuel[0].1 > 0 && fuel[1].1 > 0 && fuel[2].1 == 0, "{fuel:?}");
    assert!(
        matches!(ran.events.last(), Some(Event::RunFinished { run_id: id, status, .. })
            if *id == run_id && status == "completed"),
        "{:?}",
        ran.events.last()
    );
    // Every event is about this run.
    for event in &ran.events {
        assert_eq!(
            serde_json::to_value(event).unwrap()["run_id"],
            json!(run_id)
        );
    }
}

#[tokio::test]
async fn without_a_store_the_same_run_announces_no_checkpoint() {
    let loaded = load(&e2e_scenario("pipeline"));
    let ran = run(None, &loaded, json!({ "message": "e" })).await;
    completed(&ran);
    assert_eq!(
        event_trail(&ran.events),
        [
            "run_started",
            "node_started:greet",
            "node_finished:greet",
            "node_started:fan",
            "map_item_finished:fan",
            "map_item_finished:fan",
            "map_item_finished:fan",
            "node_finished:fan",
            "node_started:count",
            "node_finished:count",
            "run_finished",
        ]
    );
}

#[tokio::test]
async fn a_failed_run_reports_each_attempt_and_ends_failed() {
    let loaded = load(&e2e_scenario("failing"));
    let db = Db::sqlite().await;
    let ran = run(
        Some(db.store.clone()),
        &loaded,
        json!({ "mode": "retryable-error" }),
    )
    .await;
    failed(&ran);
    // The handler is a fail node: it ends the run and is not a node run.
    assert_eq!(
        event_trail(&ran.events),
        [
            "run_started",
            "node_started:flaky",
            "node_failed:flaky",
            "node_failed:flaky",
            "node_failed:flaky",
            "checkpoint_written:flaky",
            "run_finished",
        ]
    );
    let Some(Event::NodeFailed { error, .. }) = ran.events.get(4) else {
        panic!("{:?}", ran.events);
    };
    assert_eq!(error["code"], "requested-retryable-error");
    assert!(
        matches!(ran.events.last(), Some(Event::RunFinished { status, .. }) if status == "failed")
    );
    assert_eq!(ran.outcome.nodes_run, 1);
}
