//! Validation rules over the state a node leaves: a warning is recorded
//! with its suggestions and the run goes on; a fatal rule undoes the node's
//! writes and fails it, to the failure handler or to the end of the run; a
//! rule that cannot be evaluated fails its node.

use serde_json::json;
use skillhost_engine::Event;

use crate::{completed, e2e_scenario, event_name, event_node, failed, load, run_both, scenario};

#[tokio::test]
async fn a_warning_is_recorded_with_its_suggestions_and_the_run_goes_on() {
    let loaded = load(&e2e_scenario("rules"));
    let (ran, db) = run_both(&loaded, json!({ "message": "ab" })).await;
    completed(&ran);
    let expected = json!({
        "node": "one",
        "code": "SHORT_MESSAGE",
        "message": "the message is short",
        "suggestions": ["a longer message says more"],
    });
    assert_eq!(ran.outcome.warnings, std::slice::from_ref(&expected));
    let steps = db.steps(&ran.outcome.run_id).await;
    assert_eq!(steps[0].node_id, "one");
    assert_eq!(
        steps[0].detail.as_ref().unwrap()["warnings"],
        json!([expected])
    );
    // Only the node the rule is `after` is checked.
    assert!(steps[1].detail.as_ref().unwrap().get("warnings").is_none());
    let warned: Vec<&Event> = ran
        .events
        .iter()
        .filter(|e| matches!(e, Event::RuleWarning { .. }))
        .collect();
    assert_eq!(
        warned,
        [&Event::RuleWarning {
            run_id: ran.outcome.run_id.clone(),
            node: "one".into(),
            code: "SHORT_MESSAGE".into(),
            message: "the message is short".into(),
        }]
    );
}

#[tokio::test]
async fn a_fatal_rule_undoes_the_writes_of_its_node() {
    let loaded = load(&e2e_scenario("rules"));
    let (ran, db) = run_both(&loaded, json!({ "message": "abcd" })).await;
    failed(&ran);
    // What earlier nodes wrote is kept; the node the rule fired after wrote
    // nothing.
    assert_eq!(ran.state()["lengths"], json!([4]));
    let failure = ran.failure();
    assert_eq!(failure["node"], "two");
    assert_eq!(failure["code"], "TOO_LONG");
    assert_eq!(failure["message"], "the tripled message is too long");
    assert_eq!(failure["suggestions"], json!(["use a shorter message"]));
    assert_eq!(failure["partial_results"], json!({ "lengths": [4] }));
    assert_eq!(failure["errors"], ran.state()["errors"]);

    let of_two: Vec<String> = ran
        .events
        .iter()
        .filter(|e| event_node(e) == Some("two"))
        .map(event_name)
        .collect();
    assert_eq!(
        of_two,
        ["node_started", "node_failed", "checkpoint_written"]
    );

    let steps = db.steps(&ran.outcome.run_id).await;
    let two = steps.iter().find(|s| s.node_id == "two").unwrap();
    assert_eq!(two.status.as_str(), "failed");
    assert_eq!(two.error.as_ref().unwrap()["code"], "TOO_LONG");
    // The node's call happened and is accounted for.
    assert!(
        two.duration_us > 0 && two.fuel_consumed.unwrap() > 0,
        "{two:?}"
    );
}

#[tokio::test]
async fn a_fatal_rule_hands_the_run_to_the_failure_handler() {
    let loaded = load(&scenario("rule_routing"));
    let (ran, _db) = run_both(&loaded, json!({ "repeat": 3 })).await;
    failed(&ran);
    assert_eq!(ran.state()["lengths"], json!([]));
    assert_eq!(
        ran.last_error(),
        json!({
            "code": "TOO_LONG",
            "message": "an echo is longer than 4",
            "node": "one",
            "attempt": 1,
            "suggestions": ["use a smaller repeat"],
        })
    );
    // A fail node without a message takes the last error's, and adds that
    // error's suggestions after its own.
    let failure = ran.failure();
    assert_eq!(failure["handler"], "handler");
    assert_eq!(failure["node"], "one");
    assert_eq!(failure["message"], "an echo is longer than 4");
    assert_eq!(
        failure["suggestions"],
        json!(["repeat less", "use a smaller repeat"])
    );

    let (ran, _db) = run_both(&loaded, json!({ "repeat": 2 })).await;
    completed(&ran);
    assert_eq!(ran.state()["lengths"], json!([4]));
}

#[tokio::test]
async fn a_rule_that_cannot_be_evaluated_fails_its_node() {
    let loaded = load(&scenario("rule_routing"));
    let (ran, _db) = run_both(&loaded, json!({ "repeat": 1, "broken_rule": true })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "rule-error");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("rule `BROKEN`: "),
        "{error}"
    );
    assert_eq!(ran.state()["lengths"], json!([]));
    assert!(ran.outcome.warnings.is_empty());
}
