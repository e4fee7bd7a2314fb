//! Map nodes: outputs in input order whatever order the items finish in,
//! `concurrency` items started at once, the first failure stopping the
//! items not yet started, each item's retries, and finished items recorded
//! before the node's own commit.

use std::collections::BTreeSet;

use serde_json::{Value, json};
use skillhost_engine::Event;

use crate::{Ran, completed, failed, load, run_both, scenario};

/// The indexes of the items whose `map_item_finished` the run sent.
fn finished_items(ran: &Ran) -> Vec<usize> {
    ran.events
        .iter()
        .filter_map(|e| match e {
            Event::MapItemFinished { index, reused, .. } => {
                assert!(!reused, "{e:?}");
                Some(*index)
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn outputs_keep_the_input_order() {
    let loaded = load(&scenario("map_items"));
    // The first item takes longest, so with four at a time it tends to
    // finish last; the outputs are in input order either way.
    let items = json!(["a".repeat(300), "b", "c", "d", "e", "f"]);
    let (ran, db) = run_both(&loaded, json!({ "items": items })).await;
    completed(&ran);
    let state = ran.state();
    assert_eq!(
        state["echoes"],
        json!(["a".repeat(300), "bb", "ccc", "dddd", "eeeee", "ffffff"])
    );
    assert_eq!(state["lengths"], json!([300, 2, 3, 4, 5, 6]));
    let finished: BTreeSet<usize> = finished_items(&ran).into_iter().collect();
    assert_eq!(finished, (0..6).collect());
    let totals: BTreeSet<usize> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            Event::MapItemFinished { total, .. } => Some(*total),
            _ => None,
        })
        .collect();
    assert_eq!(totals, BTreeSet::from([6]));

    // Every item is recorded, by index, for a resume not to redo it.
    let rows = db
        .store
        .map_items(&ran.outcome.run_id, "fan", 1)
        .await
        .unwrap();
    let recorded: Vec<(u32, Value)> = rows
        .iter()
        .map(|r| (r.item_index, r.output["message"].clone()))
        .collect();
    assert_eq!(
        recorded,
        state["echoes"]
            .as_array()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, m)| (i as u32, m.clone()))
            .collect::<Vec<_>>()
    );
}

#[tokio::test]
async fn a_map_over_an_empty_list_writes_empty_lists() {
    let loaded = load(&scenario("map_items"));
    let (ran, db) = run_both(&loaded, json!({ "items": [] })).await;
    completed(&ran);
    assert_eq!(ran.state()["echoes"], json!([]));
    assert!(finished_items(&ran).is_empty());
    let steps = db.steps(&ran.outcome.run_id).await;
    assert_eq!(steps[0].detail, Some(json!({ "items": 0 })));
}

#[tokio::test]
async fn a_map_over_something_that_is_not_a_list_fails() {
    let loaded = load(&scenario("map_items"));
    let (ran, _db) = run_both(&loaded, json!({ "items": "abc" })).await;
    failed(&ran);
    assert_eq!(
        ran.last_error(),
        json!({
            "code": "map-over-not-a-list",
            "message": "map node `fan`: `over` (input.items) gave a string, not a list",
            "node": "fan",
            "attempt": 1,
        })
    );
}

#[tokio::test]
async fn one_at_a_time_the_first_failure_stops_the_items_after_it() {
    let loaded = load(&scenario("map_failures"));
    let (ran, db) = run_both(&loaded, json!({ "modes": ["error", "ok", "ok"] })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "requested-error");
    assert_eq!(error["node"], "one_at_a_time");
    assert_eq!(
        error["detail"],
        json!({ "kind": "skill-error", "skill": "fail", "item": 0 })
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("map node `one_at_a_time`, item 0: "),
        "{error}"
    );
    // With one item at a time, nothing after the failed item started.
    assert!(finished_items(&ran).is_empty(), "{:?}", ran.events);
    let rows = db
        .store
        .map_items(&ran.outcome.run_id, "one_at_a_time", 1)
        .await
        .unwrap();
    assert!(rows.is_empty(), "{rows:?}");
    assert_eq!(ran.state()["results"], json!([]));
}

#[tokio::test]
async fn all_at_once_every_item_starts_before_the_first_failure_is_seen() {
    let loaded = load(&scenario("map_failures"));
    let (ran, db) = run_both(
        &loaded,
        json!({ "modes": ["error", "ok", "ok"], "all_at_once": true }),
    )
    .await;
    failed(&ran);
    assert_eq!(ran.last_error()["detail"]["item"], 0);
    // Every item was started at once: the ones after the failure finished
    // and are kept, though the node failed.
    let mut finished = finished_items(&ran);
    finished.sort();
    assert_eq!(finished, [1, 2]);
    let rows = db
        .store
        .map_items(&ran.outcome.run_id, "all_at_once", 1)
        .await
        .unwrap();
    let recorded: Vec<(u32, Value)> = rows
        .iter()
        .map(|r| (r.item_index, r.output.clone()))
        .collect();
    assert_eq!(
        recorded,
        [
            (1, json!({ "message": "ok" })),
            (2, json!({ "message": "ok" }))
        ]
    );
    assert_eq!(ran.state()["results"], json!([]));
}

#[tokio::test]
async fn each_item_retries_and_every_failed_attempt_is_a_step() {
    let loaded = load(&scenario("map_failures"));
    let (ran, db) = run_both(&loaded, json!({ "modes": ["ok", "retryable-error"] })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "requested-retryable-error");
    assert_eq!(error["attempt"], 2);
    assert_eq!(error["detail"]["item"], 1);
    assert_eq!(finished_items(&ran), [0]);
    // The retried attempt is a step row of its own, then the node's failure.
    let steps: Vec<(u32, Value)> = db
        .steps(&ran.outcome.run_id)
        .await
        .into_iter()
        .filter(|s| s.node_id == "one_at_a_time")
        .map(|s| (s.attempt, s.error.unwrap()))
        .collect();
    assert_eq!(steps.len(), 2, "{steps:?}");
    assert_eq!(steps[0].0, 1);
    assert_eq!(steps[0].1["code"], "requested-retryable-error");
    assert_eq!(steps[1].1, error);
    let retried: Vec<(u32, bool)> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            Event::NodeFailed {
                attempt,
                will_retry,
                ..
            } => Some((*attempt, *will_retry)),
            _ => None,
        })
        .collect();
    assert_eq!(retried, [(1, true), (2, false)]);

    let (ran, _db) = run_both(&loaded, json!({ "modes": ["ok", "ok"] })).await;
    completed(&ran);
    assert_eq!(ran.state()["results"], json!(["ok", "ok"]));
}

/// A failed node's step row carries the attempt its error names, as a skill
/// node's does (`retryable_errors_are_retried_and_every_attempt_is_a_step`):
/// the node failed on the item's second attempt, so its step is attempt 2,
/// not a second "attempt 1" after the retried one.
#[tokio::test]
async fn a_map_nodes_failed_step_has_the_attempt_of_its_error() {
    let loaded = load(&scenario("map_failures"));
    let (ran, db) = run_both(&loaded, json!({ "modes": ["retryable-error"] })).await;
    failed(&ran);
    assert_eq!(ran.last_error()["attempt"], 2);
    let attempts: Vec<(u32, Option<Value>)> = db
        .steps(&ran.outcome.run_id)
        .await
        .into_iter()
        .filter(|s| s.node_id == "one_at_a_time")
        .map(|s| (s.attempt, s.error.map(|e| e["attempt"].clone())))
        .collect();
    assert_eq!(
        attempts,
        [(1, Some(Value::Null)), (2, Some(json!(2)))],
        "(step attempt, its error's attempt) of every step of the map node"
    );
}
