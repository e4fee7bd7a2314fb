//! What a run produces besides its state: artifacts (in the outcome and in
//! the store, with the node's checkpoint) and the `[summary]` of a
//! completed run.

use serde_json::json;
use skillhost_store::{NewArtifact, blob_digest};

use crate::{completed, e2e_scenario, failed, load, run_both, scenario};

#[tokio::test]
async fn artifacts_come_with_the_outcome_and_are_stored_with_the_run() {
    let loaded = load(&e2e_scenario("summary"));
    let (ran, db) = run_both(&loaded, json!({ "message": "ab" })).await;
    completed(&ran);
    let expected = NewArtifact {
        name: "echo.txt".into(),
        media_type: "text/plain".into(),
        bytes: b"abab\n".to_vec(),
    };
    assert_eq!(ran.outcome.artifacts, std::slice::from_ref(&expected));

    let stored = db.store.artifacts(&ran.outcome.run_id).await.unwrap();
    assert_eq!(stored.len(), 1, "{stored:?}");
    let row = &stored[0];
    assert_eq!(
        (&*row.name, &*row.media_type, row.size),
        ("echo.txt", "text/plain", 5)
    );
    assert_eq!(row.digest, blob_digest(&expected.bytes));
    assert_eq!(
        db.store.artifact_bytes(&row.digest).await.unwrap(),
        Some(expected.bytes)
    );
}

#[tokio::test]
async fn a_completed_run_has_its_summary() {
    let loaded = load(&e2e_scenario("summary"));
    let (ran, _db) = run_both(&loaded, json!({})).await;
    completed(&ran);
    assert_eq!(
        serde_json::Value::Object(ran.outcome.summary.clone()),
        json!({ "echoed_text": "hihi", "length": 4 })
    );
}

#[tokio::test]
async fn a_map_nodes_artifacts_see_every_output_and_a_failing_summary_line_shows_its_error() {
    let loaded = load(&scenario("artifacts"));
    let (ran, _db) = run_both(&loaded, json!({})).await;
    completed(&ran);
    assert_eq!(
        ran.outcome.artifacts,
        [
            NewArtifact {
                name: "lines.txt".into(),
                media_type: "text/plain".into(),
                bytes: b"hi\nhihi".to_vec(),
            },
            NewArtifact {
                name: "count".into(),
                media_type: "application/octet-stream".into(),
                bytes: b"2".to_vec(),
            },
            // `encoding = "base64"`: the bytes the string spells.
            NewArtifact {
                name: "blob.bin".into(),
                media_type: "application/x-test".into(),
                bytes: vec![0x00, 0xff, 0x0a],
            },
        ]
    );
    let summary = &ran.outcome.summary;
    assert_eq!(summary["lines"], 2);
    assert_eq!(summary["first"], "hi");
    // An expression that fails does not fail the run.
    assert!(
        summary["tenth"].as_str().unwrap().starts_with("(error: "),
        "{summary:?}"
    );
    let labels: Vec<&str> = summary.keys().map(String::as_str).collect();
    assert_eq!(labels, ["lines", "first", "tenth"], "in file order");
}

#[tokio::test]
async fn an_artifact_that_is_not_a_string_fails_its_node() {
    let loaded = load(&scenario("artifacts"));
    let (ran, db) = run_both(&loaded, json!({ "count_as_number": true })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "artifact-failed");
    assert_eq!(
        error["message"],
        "node `fan`: artifact `count` (input.count_as_number ? size(output) : string(size(output))) gave a number, not a string"
    );
    // Nothing of the node is kept: no artifact, no write, no summary.
    assert!(ran.outcome.artifacts.is_empty());
    assert!(
        db.store
            .artifacts(&ran.outcome.run_id)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(ran.state()["lines"], json!([]));
    assert!(ran.outcome.summary.is_empty());
}

#[tokio::test]
async fn a_base64_artifact_whose_string_is_not_base64_fails_its_node() {
    let loaded = load(&scenario("artifacts"));
    let (ran, db) = run_both(&loaded, json!({ "blob": "not base64" })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "artifact-failed");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "node `fan`: artifact `blob.bin` (input.blob) is declared `encoding = \"base64\"` \
             but its string is not base64"
        ),
        "{message}"
    );
    assert!(
        db.store
            .artifacts(&ran.outcome.run_id)
            .await
            .unwrap()
            .is_empty()
    );
}
