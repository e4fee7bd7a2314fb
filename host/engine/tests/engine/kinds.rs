//! Each kind of node doing its job: a skill node's call and writes, a gate's
//! preconditions and writes, the reducers and their type checks, an end
//! node, and a fail node's report; and what a run leaves in the store.

use serde_json::{Value, json};
use skillhost_store::RunStatus;

use crate::{completed, e2e_scenario, failed, load, run_both, scenario};

#[tokio::test]
async fn a_skill_a_map_a_gate_and_an_end_run_in_order() {
    let loaded = load(&e2e_scenario("pipeline"));
    let (ran, db) = run_both(
        &loaded,
        json!({ "message": "hi", "items": ["x", "y", "z", "w"] }),
    )
    .await;
    completed(&ran);
    let state = ran.state();
    assert_eq!(state["greeting"], json!({ "message": "hihi", "length": 4 }));
    assert_eq!(
        state["echoes"].as_array().unwrap().len(),
        4,
        "one echo per item: {state}"
    );
    assert_eq!(state["lengths"], json!([4, 2, 4, 6, 8]));
    assert_eq!(state["errors"], json!([]));
    // The end node finishes the run; it is not a node run.
    assert_eq!((ran.outcome.nodes_run, ran.outcome.last_seq), (3, 3));
    assert!(ran.outcome.failure.is_none() && ran.outcome.warnings.is_empty());

    let run_id = &ran.outcome.run_id;
    let steps = db.steps(run_id).await;
    let rows: Vec<(&str, Option<u64>, u32, &str)> = steps
        .iter()
        .map(|s| (&*s.node_id, s.seq, s.attempt, s.status.as_str()))
        .collect();
    assert_eq!(
        rows,
        [
            ("greet", Some(1), 1, "ok"),
            ("fan", Some(2), 1, "ok"),
            ("count", Some(3), 1, "ok"),
        ]
    );
    // A skill node's step records what went in and out, what it cost, and
    // the skill's log lines.
    let greet = &steps[0];
    assert!(greet.input_hash.is_some() && greet.output_hash.is_some());
    assert!(greet.fuel_consumed.unwrap() > 0, "{greet:?}");
    assert!(greet.memory_peak_bytes.unwrap() > 0, "{greet:?}");
    assert!(
        greet.detail.as_ref().unwrap()["logs"]
            .to_string()
            .contains("echo: 4 characters"),
        "{greet:?}"
    );
    // A map node's step counts its items and sums their fuel.
    assert_eq!(steps[1].detail, Some(json!({ "items": 4 })));
    assert!(steps[1].fuel_consumed.unwrap() > greet.fuel_consumed.unwrap());
    // A gate calls nothing.
    assert_eq!(steps[2].fuel_consumed, None);

    let checkpoints = db.store.checkpoints(run_id).await.unwrap();
    let route: Vec<(u64, &str, Vec<String>)> = checkpoints
        .iter()
        .map(|c| (c.seq, &*c.node_id, c.next_nodes.clone()))
        .collect();
    assert_eq!(
        route,
        [
            (0, skillhost_store::START_NODE, vec!["greet".to_string()]),
            (1, "greet", vec!["fan".to_string()]),
            (2, "fan", vec!["count".to_string()]),
            (3, "count", vec!["done".to_string()]),
        ]
    );
    let row = db.store.run(run_id).await.unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Completed);
    assert_eq!(row.scenario_name, "pipeline");
    assert_eq!(row.scenario_digest, loaded.scenario.digest);
    assert_eq!(row.result.as_ref(), Some(&state));
    assert_eq!(row.last_seq, 3);
    let latest = db.store.latest_state(run_id).await.unwrap().unwrap();
    assert_eq!(latest.state, state);
    assert_eq!(latest.visits.get("count"), Some(&1));
}

#[tokio::test]
async fn the_run_input_gets_its_defaults_and_is_stored_with_them() {
    let loaded = load(&e2e_scenario("pipeline"));
    let (ran, db) = run_both(&loaded, json!({ "message": "e" })).await;
    completed(&ran);
    let echoes: Vec<Value> = ran.state()["echoes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].clone())
        .collect();
    assert_eq!(echoes, [json!("a!"), json!("b!b!"), json!("c!c!c!")]);
    let row = db.store.run(&ran.outcome.run_id).await.unwrap().unwrap();
    assert_eq!(
        row.input,
        json!({ "message": "e", "items": ["a", "b", "c"] })
    );
}

#[tokio::test]
async fn a_gate_checks_its_preconditions_before_it_writes() {
    let loaded = load(&scenario("branches"));
    let (ran, _db) = run_both(&loaded, json!({ "repeat": 2 })).await;
    completed(&ran);
    assert_eq!(ran.state()["label"], "measured 2: small");

    let (ran, db) = run_both(&loaded, json!({ "repeat": 120 })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(
        error,
        json!({
            "code": "precondition-failed",
            "message": "node `classify`: precondition `not huge` failed: the echo is longer than 100",
            "node": "classify",
            "attempt": 1,
        })
    );
    // Nothing the gate would have written is in the state.
    assert_eq!(ran.state()["label"], "");
    let failure = ran.failure();
    assert_eq!(failure["node"], "classify");
    assert_eq!(failure["code"], "precondition-failed");
    assert_eq!(failure["partial_results"], json!({ "length": 120 }));
    assert_eq!(
        db.attempts(&ran.outcome.run_id).await,
        [
            ("measure".to_string(), 1, "ok".to_string()),
            ("classify".to_string(), 1, "failed".to_string()),
        ]
    );
}

#[tokio::test]
async fn writes_replace_append_and_merge() {
    let loaded = load(&scenario("writes"));
    let (ran, _db) = run_both(&loaded, json!({})).await;
    completed(&ran);
    let state = ran.state();
    assert_eq!(state["count"], 1);
    assert_eq!(state["log"], json!(["start", "a"]));
    assert_eq!(state["meta"], json!({ "kept": true, "k": "v" }));

    // An array extends the field; anything else is one more item.
    let (ran, _db) = run_both(
        &loaded,
        json!({ "log": ["x", "y"], "meta": { "kept": false } }),
    )
    .await;
    assert_eq!(ran.state()["log"], json!(["start", "x", "y"]));
    assert_eq!(ran.state()["meta"], json!({ "kept": false }));
    let (ran, _db) = run_both(&loaded, json!({ "log": "z" })).await;
    assert_eq!(ran.state()["log"], json!(["start", "z"]));
}

#[tokio::test]
async fn a_write_that_does_not_fit_its_field_fails_the_node_and_writes_nothing() {
    let loaded = load(&scenario("writes"));
    for (input, message) in [
        (
            json!({ "count": "three" }),
            "node `write`: state field `count` is declared as Integer but the write produced a string",
        ),
        (
            json!({ "meta": "flat" }),
            "node `write`: cannot merge a string into `meta`: merge takes an object",
        ),
    ] {
        let (ran, _db) = run_both(&loaded, input.clone()).await;
        failed(&ran);
        let error = ran.last_error();
        assert_eq!(error["code"], "write-failed", "{input}");
        assert_eq!(error["message"], message, "{input}");
        let state = ran.state();
        assert_eq!(
            (&state["count"], &state["log"], &state["meta"]),
            (&json!(0), &json!(["start"]), &json!({ "kept": true })),
            "{input}"
        );
    }
}

#[tokio::test]
async fn a_fail_node_reached_by_routing_reports_the_node_before_it() {
    let loaded = load(&scenario("branches"));
    let (ran, db) = run_both(&loaded, json!({ "repeat": 0 })).await;
    failed(&ran);
    let failure = ran.failure();
    assert_eq!(
        failure,
        &json!({
            "node": "classify",
            "handler": "empty",
            "code": "routed-to-failure",
            "message": "nothing was echoed (measured 0)",
            "errors": [],
            "partial_results": { "length": 0, "label": "measured 0" },
            "suggestions": ["give a repeat above 0"],
        })
    );
    // A failed run has no summary; the store keeps the report.
    assert!(ran.outcome.summary.is_empty());
    let row = db.store.run(&ran.outcome.run_id).await.unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Failed);
    assert_eq!(row.error.as_ref(), Some(failure));
    assert_eq!(row.result, Some(ran.state()));
}
