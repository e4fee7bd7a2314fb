//! Waits, answers and cancels on both backends: a run waits at its last
//! checkpoint without a lease; an answer is recorded once, only while it
//! waits there and before its deadline, and queues the run; a cancel ends
//! a queued or waiting run at once, refuses a running run's next
//! checkpoint, and refuses a finished run; a timed-out wait is claimable.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use skillhost_store::{Cancelled, NewWait, RunStatus, StateChange, StoreError};
use skillhost_tests::store_fixtures::{commit, new_run};

use crate::backends::{Db, Kind};

fn wait(run_id: &str, seq: u64, timeout_ms: Option<u64>) -> NewWait {
    NewWait {
        run_id: run_id.into(),
        seq,
        node_id: "ask".into(),
        prompt: "go?".into(),
        answer_schema: json!({"type": "object", "properties": {"go": {"type": "boolean"}}}),
        timeout_ms,
    }
}

async fn a_wait_is_answered_once_and_queues_the_run(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    store
        .create_run(&new_run("r", json!({"log": []})))
        .await
        .unwrap();
    // Not at its last checkpoint: refused.
    let behind = store.wait_run(&wait("r", 1, None)).await;
    assert!(
        matches!(behind, Err(StoreError::Conflict { .. })),
        "{behind:?}"
    );
    assert_eq!(store.wait_run(&wait("r", 0, None)).await.unwrap(), None);
    let run = store.run("r").await.unwrap().unwrap();
    assert_eq!((run.status, run.lease_owner), (RunStatus::Waiting, None));

    let answer = json!({"go": true});
    // Only at the checkpoint it waits at.
    let elsewhere = store.answer_wait("r", 3, &answer, "alice").await;
    assert!(elsewhere.is_err());
    store.answer_wait("r", 0, &answer, "alice").await.unwrap();
    let twice = store
        .answer_wait("r", 0, &json!({"go": false}), "bob")
        .await;
    let text = twice.unwrap_err().to_string();
    assert!(text.contains("not waiting"), "{text}");
    let waits = store.waits("r").await.unwrap();
    assert_eq!(waits.len(), 1);
    assert_eq!(waits[0].answer, Some(answer));
    assert_eq!(waits[0].answered_by.as_deref(), Some("alice"));
    assert_eq!(
        store.run("r").await.unwrap().unwrap().status,
        RunStatus::Queued
    );
    assert_eq!(store.wait_at("r", 0).await.unwrap(), Some(waits[0].clone()));
}

async fn a_timed_out_wait_takes_no_answer_and_is_claimable(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    store
        .create_run(&new_run("r", json!({"log": []})))
        .await
        .unwrap();
    // Two seconds: the claim just below must come before the deadline
    // however loaded the machine is.
    let deadline = store.wait_run(&wait("r", 0, Some(2_000))).await.unwrap();
    assert!(deadline.is_some());
    assert_eq!(
        store.run("r").await.unwrap().unwrap().wait_deadline_ms,
        deadline
    );
    assert!(
        store
            .claim_run("w", Duration::from_secs(5))
            .await
            .unwrap()
            .is_none()
    );
    // Past the deadline, by the wall clock the store compares it with.
    let deadline_ms = deadline.unwrap();
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    while now_ms() <= deadline_ms + 20 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let late = store
        .answer_wait("r", 0, &json!({"go": true}), "alice")
        .await;
    let text = late.unwrap_err().to_string();
    assert!(text.contains("timed out"), "{text}");
    assert_eq!(store.waits("r").await.unwrap()[0].answer, None);
    let (run, _) = store
        .claim_run("w", Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the timed-out wait is claimed");
    assert_eq!((run.id.as_str(), run.status), ("r", RunStatus::Running));
    assert_eq!(run.wait_deadline_ms, None);
}

async fn cancel_ends_queued_and_waiting_runs_and_stops_running_ones(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let error = json!({"code": "cancelled"});
    store
        .enqueue_run(&new_run("queued", json!({"log": []})))
        .await
        .unwrap();
    assert_eq!(
        store.cancel_run("queued", "carol", &error).await.unwrap(),
        Cancelled::Now(RunStatus::Queued)
    );
    store
        .create_run(&new_run("waiting", json!({"log": []})))
        .await
        .unwrap();
    store
        .wait_run(&wait("waiting", 0, Some(60_000)))
        .await
        .unwrap();
    assert_eq!(
        store.cancel_run("waiting", "carol", &error).await.unwrap(),
        Cancelled::Now(RunStatus::Waiting)
    );
    for id in ["queued", "waiting"] {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!(
            (run.status, run.error),
            (RunStatus::Cancelled, Some(error.clone()))
        );
        assert_eq!(run.wait_deadline_ms, None);
    }
    // A finished run: refused, nothing changed.
    let again = store
        .cancel_run("queued", "carol", &json!({"code": "x"}))
        .await;
    let text = again.unwrap_err().to_string();
    assert!(text.contains("already cancelled"), "{text}");
    assert_eq!(
        store.run("queued").await.unwrap().unwrap().error,
        Some(error.clone())
    );

    // A running run: its next checkpoint is refused, naming who cancelled.
    let mut state = json!({"log": []});
    store
        .create_run(&new_run("running", state.clone()))
        .await
        .unwrap();
    assert_eq!(
        store.cancel_run("running", "dave", &error).await.unwrap(),
        Cancelled::Requested
    );
    let mut visits = BTreeMap::new();
    let changes = vec![StateChange::Append {
        field: "log".into(),
        items: vec![json!(1)],
    }];
    let next = commit("running", 1, &mut state, &mut visits, changes);
    let refused = store.commit_step(&next).await;
    assert!(
        matches!(&refused, Err(e @ StoreError::CancelRequested { by, .. })
            if by == "dave" && e.is_cancel_requested()),
        "{refused:?}"
    );
    let run = store.run("running").await.unwrap().unwrap();
    assert_eq!((run.status, run.last_seq), (RunStatus::Running, 0));
    assert_eq!(run.cancel_requested_by.as_deref(), Some("dave"));
    assert!(store.checkpoints("running").await.unwrap().len() == 1);
    // Nor can it start waiting.
    let wait_refused = store.wait_run(&wait("running", 0, None)).await;
    assert!(matches!(
        wait_refused,
        Err(StoreError::CancelRequested { .. })
    ));
    store
        .finish_run("running", RunStatus::Cancelled, None, Some(&error))
        .await
        .unwrap();
    let missing = store.cancel_run("nope", "x", &error).await;
    assert!(
        matches!(missing, Err(StoreError::RunNotFound { .. })),
        "{missing:?}"
    );
}

both!(
    a_wait_is_answered_once_and_queues_the_run,
    a_timed_out_wait_takes_no_answer_and_is_claimable,
    cancel_ends_queued_and_waiting_runs_and_stops_running_ones,
);
