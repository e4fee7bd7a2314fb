//! Where a run goes: edges, branch guards in order, bounded cycles, and a
//! node that fails for good going to `on_failure` with its error in
//! `state.errors`.

use serde_json::json;

use crate::{completed, e2e_scenario, failed, load, run_both, scenario};

#[tokio::test]
async fn the_first_branch_whose_guard_holds_wins_and_else_takes_the_rest() {
    let loaded = load(&scenario("branches"));
    // 1 is below both `config.small` (3) and 10: the first branch that
    // holds is taken.
    for (repeat, label, path) in [
        (1, "measured 1: small", "small"),
        (5, "measured 5: medium", "medium"),
        (50, "measured 50: large", "large"),
    ] {
        let (ran, db) = run_both(&loaded, json!({ "repeat": repeat })).await;
        completed(&ran);
        assert_eq!(ran.state()["label"], label);
        let nodes: Vec<String> = db
            .attempts(&ran.outcome.run_id)
            .await
            .into_iter()
            .map(|(node, _, _)| node)
            .collect();
        assert_eq!(nodes, ["measure", "classify", path]);
    }
}

#[tokio::test]
async fn a_branch_guard_that_fails_fails_its_node_and_undoes_its_writes() {
    let loaded = load(&scenario("branches"));
    let (ran, db) = run_both(&loaded, json!({ "repeat": 4, "divisor": 0 })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "branch-error");
    assert_eq!(error["node"], "classify");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("node `classify`: branch guard failed: "),
        "{error}"
    );
    // The gate's write was applied for the guards to see, then taken back.
    assert_eq!(ran.state()["label"], "");
    assert_eq!(ran.state()["length"], 4);
    let steps = db.steps(&ran.outcome.run_id).await;
    assert_eq!(steps[1].status.as_str(), "failed");
    assert_eq!(steps[1].error.as_ref(), Some(&error));
}

#[tokio::test]
async fn cycles_run_until_their_bound() {
    let loaded = load(&e2e_scenario("loop"));
    let (ran, db) = run_both(&loaded, json!({ "limit": 3 })).await;
    completed(&ran);
    assert_eq!(ran.state()["lengths"], json!([1, 2, 3]));
    let latest = db
        .store
        .latest_state(&ran.outcome.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(latest.visits.get("bump"), Some(&3));
    assert_eq!(latest.visits.get("enough"), Some(&3));

    let (ran, db) = run_both(&loaded, json!({ "limit": 10 })).await;
    failed(&ran);
    assert_eq!(ran.state()["lengths"], json!([1, 2, 3, 4]));
    let error = ran.last_error();
    assert_eq!(error["code"], "max-visits-exceeded");
    assert_eq!(
        error["message"],
        "node `bump` was reached 5 times, more than its max_visits of 4"
    );
    assert_eq!(ran.failure()["node"], "bump");
    // The fifth visit is refused before the skill is called: a failed step
    // of its own, after four successful ones.
    let bumps: Vec<(u32, String)> = db
        .attempts(&ran.outcome.run_id)
        .await
        .into_iter()
        .filter(|(node, _, _)| node == "bump")
        .map(|(_, attempt, status)| (attempt, status))
        .collect();
    assert_eq!(bumps.len(), 5);
    assert!(bumps[..4].iter().all(|(_, s)| s == "ok"), "{bumps:?}");
    assert_eq!(bumps[4].1, "failed");
}

#[tokio::test]
async fn a_node_that_fails_goes_to_on_failure_with_its_error_in_the_state() {
    let loaded = load(&e2e_scenario("failing"));
    let (ran, db) = run_both(&loaded, json!({ "mode": "error" })).await;
    failed(&ran);
    let error = json!({
        "code": "requested-error",
        "message": "skill `fail` returned error `requested-error`: the input asked for an error",
        "node": "flaky",
        "attempt": 1,
        "detail": { "kind": "skill-error", "skill": "fail", "retryable": false },
    });
    assert_eq!(ran.state()["errors"], json!([error]));
    // The handler's report: the node that failed, the handler, its message
    // over the state, and its suggestions.
    let failure = ran.failure();
    assert_eq!(failure["node"], "flaky");
    assert_eq!(failure["handler"], "handler");
    assert_eq!(failure["code"], "requested-error");
    assert_eq!(failure["message"], "flaky failed: requested-error");
    assert_eq!(failure["errors"], json!([error]));
    assert_eq!(failure["suggestions"], json!(["try mode ok"]));
    // The failed node's checkpoint leads to the handler.
    let checkpoints = db.store.checkpoints(&ran.outcome.run_id).await.unwrap();
    let last = checkpoints.last().unwrap();
    assert_eq!(
        (last.node_id.as_str(), last.next_nodes.clone()),
        ("flaky", vec!["handler".to_string()])
    );

    let (ran, _db) = run_both(&loaded, json!({ "mode": "ok" })).await;
    completed(&ran);
    assert_eq!(ran.state()["result"], "ok");
}
