//! What the engine checks on every boundary: the run input against
//! `[input]` (before anything is written), a node's extra input and output
//! schemas, its pre- and postconditions, and citation checks, whose
//! verified quotes are what the node may write.

use serde_json::{Value, json};
use skillhost_engine::EngineError;

use crate::{Db, completed, e2e_scenario, failed, load, run_both, scenario, start};

#[tokio::test]
async fn input_that_does_not_fit_is_refused_before_anything_is_written() {
    let loaded = load(&e2e_scenario("pipeline"));
    let db = Db::sqlite().await;
    for input in [
        json!({ "message": 3 }),
        json!({}),
        json!({ "message": "hi", "extra": 1 }),
        json!("hi"),
    ] {
        let err = match start(Some(db.store.clone()), &loaded, input.clone()).await {
            Err(err) => err,
            Ok(ran) => panic!("{input} was accepted: {:?}", ran.outcome.status),
        };
        let EngineError::InvalidInput { scenario, message } = &err else {
            panic!("{input}: not an input error: {err}");
        };
        assert_eq!(scenario, "pipeline");
        assert!(!message.is_empty());
        assert_eq!(
            err.to_string(),
            format!("scenario `pipeline`: the run input does not fit [input]: {message}")
        );
        // Without a store it is refused the same way.
        assert!(matches!(
            start(None, &loaded, input).await,
            Err(EngineError::InvalidInput { .. })
        ));
    }
    let err = start(None, &loaded, json!({ "message": 3 }))
        .await
        .err()
        .unwrap();
    assert!(err.to_string().contains("message"), "{err}");
    assert!(db.store.list_runs(None, 10).await.unwrap().is_empty());
}

#[tokio::test]
async fn extra_input_and_output_constraints_are_enforced() {
    let loaded = load(&scenario("constraints"));
    let (ran, _db) = run_both(&loaded, json!({ "message": "abcd", "repeat": 2 })).await;
    completed(&ran);
    assert_eq!(ran.state()["echoed"], "abcdabcd");

    let (ran, db) = run_both(&loaded, json!({ "message": "ab" })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "input-constraint-failed");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("node `shout`: the skill's input does not satisfy `input_schema`: ")
            && message.contains("$.message"),
        "{error}"
    );
    // Refused before the call: the failed step spent no fuel.
    let steps = db.steps(&ran.outcome.run_id).await;
    assert_eq!(steps[0].fuel_consumed, None, "{:?}", steps[0]);

    let (ran, _db) = run_both(&loaded, json!({ "message": "abcdef", "repeat": 2 })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "output-constraint-failed");
    assert!(
        error["message"].as_str().unwrap().contains("$.length"),
        "{error}"
    );
    // The refused output was not written.
    assert_eq!(ran.state()["echoed"], "");
}

#[tokio::test]
async fn a_map_nodes_output_constraint_holds_for_every_item() {
    let loaded = load(&scenario("map_items"));
    let long = "x".repeat(600);
    let (ran, _db) = run_both(&loaded, json!({ "items": ["a", long, "c"] })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "output-constraint-failed");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("$.length") && message.ends_with("(item 1)"),
        "{error}"
    );
    assert_eq!(ran.state()["echoes"], json!([]));
}

#[tokio::test]
async fn a_failed_precondition_stops_the_node_before_its_call() {
    let loaded = load(&e2e_scenario("pipeline"));
    let (ran, db) = run_both(&loaded, json!({ "message": "" })).await;
    failed(&ran);
    assert_eq!(
        ran.last_error()["message"],
        "node `greet`: precondition `message given` failed: the message is empty"
    );
    assert_eq!(ran.last_error()["code"], "precondition-failed");
    assert_eq!(ran.failure()["node"], "greet");
    let steps = db.steps(&ran.outcome.run_id).await;
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].fuel_consumed, None, "{:?}", steps[0]);
}

#[tokio::test]
async fn a_failed_postcondition_keeps_the_output_out_of_the_state() {
    let loaded = load(&scenario("citations"));
    let (ran, _db) = run_both(
        &loaded,
        json!({ "claims": [], "sources": [], "min_length": 100 }),
    )
    .await;
    failed(&ran);
    assert_eq!(
        ran.last_error()["message"],
        "node `cite`: postcondition `long enough` failed: the echo is too short"
    );
    assert_eq!(ran.last_error()["code"], "postcondition-failed");
    assert_eq!(ran.state()["echoed"], "");
}

fn sources() -> Value {
    json!([
        { "id": "p1", "text": "The quick  brown fox jumps." },
        { "id": "p2", "text": "Lazy dogs sleep all day." },
    ])
}

#[tokio::test]
async fn citations_that_hold_are_verified_with_their_offsets() {
    let loaded = load(&scenario("citations"));
    let claims = json!([
        { "cites": ["p1"], "quote": "Quick brown\nfox" },
        { "cites": ["p1", "p2"], "quote": ["dogs sleep all day"] },
        { "cites": "p2" },
    ]);
    let (ran, db) = run_both(&loaded, json!({ "claims": claims, "sources": sources() })).await;
    completed(&ran);
    let quotes = json!([
        {
            "claim_index": 0,
            "source_id": "p1",
            "quote": "Quick brown\nfox",
            "start": 4,
            "end": 20,
            "matched": "quick  brown fox",
        },
        {
            "claim_index": 1,
            "source_id": "p2",
            "quote": "dogs sleep all day",
            "start": 5,
            "end": 23,
            "matched": "dogs sleep all day",
        },
    ]);
    assert_eq!(ran.state()["quotes"], quotes);
    assert_eq!(ran.state()["echoed"], "checked");
    let steps = db.steps(&ran.outcome.run_id).await;
    assert_eq!(steps[0].detail.as_ref().unwrap()["verified_quotes"], quotes);
}

#[tokio::test]
async fn citations_that_do_not_hold_fail_the_node_naming_each_claim() {
    let loaded = load(&scenario("citations"));
    let claims = json!([
        { "cites": ["p1"], "quote": "the slow brown fox" },
        { "cites": ["p9"] },
        { "cites": [] },
    ]);
    let (ran, _db) = run_both(&loaded, json!({ "claims": claims, "sources": sources() })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "citation-check-failed");
    assert_eq!(error["detail"], json!({ "check": "citations" }));
    let message = error["message"].as_str().unwrap();
    assert!(message.starts_with("node `cite`: "), "{message}");
    for named in ["claim 0", "claim 1", "claim 2", "p9", "the slow brown fox"] {
        assert!(message.contains(named), "`{named}` in {message}");
    }
    assert_eq!(ran.state()["quotes"], json!([]));
    assert_eq!(ran.state()["echoed"], "");
}

/// The run-time check holds quotes to the same rule as the checker's
/// declarations: a quote any text holds (`"a"`, `"."`, two short words)
/// is too short, and one that starts or ends inside a word of its source
/// is not a quote of it; neither is verified, and the node fails naming
/// each.
#[tokio::test]
async fn short_quotes_and_quotes_that_split_words_fail_the_node() {
    let loaded = load(&scenario("citations"));
    let claims = json!([
        { "cites": ["p1"], "quote": "a" },
        { "cites": ["p1"], "quote": "." },
        { "cites": ["p2"], "quote": "all day" },
        { "cites": ["p1"], "quote": "uick  brown fox jumps" },
        { "cites": ["p2"], "quote": "Lazy dogs sleep all da" },
        { "cites": ["p1"], "quote": "quick brown fox jumps." },
    ]);
    let (ran, _db) = run_both(&loaded, json!({ "claims": claims, "sources": sources() })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "citation-check-failed");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with("node `cite`: citation check failed (5 problems): "),
        "{message}"
    );
    for named in [
        "claim 0 quotes \"a\", 1 character and 1 word, shorter than a quote may be",
        "claim 1 quotes \".\", 1 character and 0 words",
        "claim 2 quotes \"all day\", 7 characters and 2 words",
        "claim 3 quotes \"uick  brown fox jumps\", which source `p1` holds only as part of \
         longer words (\"quick brown fox jumps\")",
        "claim 4 quotes \"Lazy dogs sleep all da\", which source `p2` holds only as part of \
         longer words (\"lazy dogs sleep all day\")",
    ] {
        assert!(message.contains(named), "`{named}` in {message}");
    }
    assert!(!message.contains("claim 5"), "{message}");
    assert_eq!(ran.state()["quotes"], json!([]));
}
