//! The store against real SQLite files in temporary directories: history
//! round trips across snapshots, the exactly-once guard, corruption
//! detection, refusal of foreign and newer databases, artifacts, map items,
//! listing, and the size of delta checkpoints.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use skillhost::store::{
    JournalEntry, MapItemRow, NewArtifact, NewRun, RunStatus, SNAPSHOT_EVERY, START_NODE,
    StateChange, StepCommit, StepRow, Store, StoreError, StoreOptions, SyncMode, apply, state_hash,
};
use sqlx::{Connection, SqliteConnection};

fn url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

fn new_run(id: &str, initial_state: Value) -> NewRun {
    NewRun {
        id: id.to_owned(),
        scenario_name: "demo".into(),
        scenario_path: "examples/demo/scenario.toml".into(),
        scenario_digest: "d".repeat(64),
        input: json!({"topic": "store"}),
        initial_state,
        start_node: "n1".into(),
    }
}

fn ok_step(run_id: &str, node_id: &str) -> StepRow {
    StepRow {
        run_id: run_id.to_owned(),
        seq: None,
        node_id: node_id.to_owned(),
        attempt: 1,
        status: "ok".into(),
        started_at_ms: 1_700_000_000_000,
        duration_us: 42,
        input_hash: Some("i".repeat(64)),
        output_hash: Some("o".repeat(64)),
        error: None,
        fuel_consumed: Some(1000),
        memory_peak_bytes: Some(65536),
        detail: Some(json!({"logs": ["hello"]})),
    }
}

/// Applies `changes` to `state` the way the engine does and builds the commit.
fn commit(
    run_id: &str,
    seq: u64,
    state: &mut Value,
    visits: &mut BTreeMap<String, u32>,
    changes: Vec<StateChange>,
) -> StepCommit {
    let node_id = format!("n{}", (seq - 1) % 4 + 1);
    apply(state, &changes);
    *visits.entry(node_id.clone()).or_default() += 1;
    StepCommit {
        run_id: run_id.to_owned(),
        seq,
        next_nodes: vec![format!("n{}", seq % 4 + 1)],
        changes,
        state_hash: state_hash(state),
        full_state: state.clone(),
        step: ok_step(run_id, &node_id),
        visits: visits.clone(),
        journal: vec![JournalEntry {
            seq,
            node_id: node_id.clone(),
            kind: "clock".into(),
            request: json!({}),
            response: json!({"now_ms": seq}),
        }],
        node_id,
    }
}

/// Twenty records of about 300 bytes each, plus small fields nodes change.
fn records_state() -> Value {
    let records: Vec<Value> = (0..20)
        .map(|i| {
            json!({
                "id": format!("record-{i:02}"),
                "title": format!("A record of moderate length, number {i}"),
                "body": "x".repeat(200),
                "tags": ["alpha", "beta"],
                "score": i,
            })
        })
        .collect();
    json!({"records": records, "counter": 0, "log": [], "notes": {}})
}

/// The change made at step `seq` of the round-trip scenario: every kind of op.
fn varied_change(seq: u64) -> Vec<StateChange> {
    match seq % 3 {
        0 => vec![StateChange::Set {
            field: "counter".into(),
            value: json!(seq),
        }],
        1 => vec![StateChange::Append {
            field: "log".into(),
            items: vec![json!(format!("step {seq}"))],
        }],
        _ => vec![
            StateChange::Merge {
                field: "notes".into(),
                value: json!({ format!("k{}", seq % 5): seq })
                    .as_object()
                    .unwrap()
                    .clone(),
            },
            StateChange::Set {
                field: format!("extra_{}", seq % 7),
                value: json!({"at": seq}),
            },
        ],
    }
}

async fn raw(path: &Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap()
}

fn files_in(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn history_round_trips_over_forty_steps_across_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    // Parent directories are created.
    let path = dir.path().join("nested/deeper/skillhost.db");
    let store = Store::open(&url(&path)).await.unwrap();
    assert!(path.is_file());
    assert_eq!(store.url_for_display(), url(&path));

    let mut state = records_state();
    store
        .create_run(&new_run("r1", state.clone()))
        .await
        .unwrap();
    let mut states = vec![state.clone()];
    let mut all_visits = vec![BTreeMap::new()];
    let mut visits = BTreeMap::new();
    for seq in 1..=40 {
        let c = commit("r1", seq, &mut state, &mut visits, varied_change(seq));
        store.commit_step(&c).await.unwrap();
        states.push(state.clone());
        all_visits.push(visits.clone());
    }

    let run = store.run("r1").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.last_seq, 40);
    assert_eq!(run.current_node.as_deref(), Some("n1"));
    assert_eq!(run.input, json!({"topic": "store"}));

    let history = store.checkpoints("r1").await.unwrap();
    assert_eq!(history.len(), 41);
    for (seq, row) in history.iter().enumerate() {
        assert_eq!(row.seq, seq as u64);
        assert_eq!(
            row.is_snapshot,
            (seq as u64).is_multiple_of(SNAPSHOT_EVERY),
            "seq {seq}"
        );
        assert_eq!(row.state_hash, state_hash(&states[seq]));
    }
    assert_eq!(history[0].node_id, START_NODE);
    assert_eq!(history[0].next_nodes, vec!["n1".to_string()]);

    // Reopen: what was committed is what comes back.
    store.close().await;
    let store = Store::open(&url(&path)).await.unwrap();
    for (seq, expected) in states.iter().enumerate() {
        let loaded = store.state_at("r1", seq as u64).await.unwrap().unwrap();
        assert_eq!(loaded.seq, seq as u64);
        assert_eq!(&loaded.state, expected, "state at seq {seq}");
        // Byte for byte, key order included.
        assert_eq!(
            serde_json::to_string(&loaded.state).unwrap(),
            serde_json::to_string(expected).unwrap(),
            "serialised state at seq {seq}"
        );
        assert_eq!(loaded.visits, all_visits[seq], "visits at seq {seq}");
        assert_eq!(loaded.state_hash, state_hash(expected));
    }
    let latest = store.latest_state("r1").await.unwrap().unwrap();
    assert_eq!(latest.seq, 40);
    assert_eq!(latest.state, states[40]);
    assert_eq!(latest.node_id, "n4");
    assert_eq!(latest.next_nodes, vec!["n1".to_string()]);
    assert!(store.state_at("r1", 41).await.unwrap().is_none());
    assert!(store.state_at("nope", 0).await.unwrap().is_none());
    assert!(store.latest_state("nope").await.unwrap().is_none());

    let steps = store.steps("r1").await.unwrap();
    assert_eq!(steps.len(), 40);
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step.seq, Some(i as u64 + 1));
        assert_eq!(step.run_id, "r1");
    }
    assert_eq!(
        steps[0],
        StepRow {
            seq: Some(1),
            ..ok_step("r1", "n1")
        }
    );
    let journal = store.journal("r1").await.unwrap();
    assert_eq!(journal.len(), 40);
    assert_eq!(journal[9].response, json!({"now_ms": 10}));

    // Finishing is final: no more checkpoints, no second finish.
    store
        .finish_run("r1", RunStatus::Completed, Some(&json!({"ok": true})), None)
        .await
        .unwrap();
    let run = store.run("r1").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.result, Some(json!({"ok": true})));
    let late = commit("r1", 41, &mut state, &mut visits, varied_change(41));
    let error = store.commit_step(&late).await.unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert!(error.to_string().contains("completed"), "{error}");
    let error = store
        .finish_run("r1", RunStatus::Failed, None, None)
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert_eq!(store.checkpoints("r1").await.unwrap().len(), 41);
}

#[tokio::test]
async fn a_checkpoint_out_of_sequence_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    let store = Store::open(&url(&path)).await.unwrap();
    let mut state = json!({"n": 0, "log": []});
    store
        .create_run(&new_run("r", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let first = commit("r", 1, &mut state, &mut visits, varied_change(1));
    store.commit_step(&first).await.unwrap();

    let counts = |store: Store| async move {
        (
            store.checkpoints("r").await.unwrap().len(),
            store.steps("r").await.unwrap().len(),
            store.journal("r").await.unwrap().len(),
            store.artifacts("r").await.unwrap().len(),
            store.run("r").await.unwrap().unwrap(),
            store.latest_state("r").await.unwrap().unwrap(),
        )
    };
    let before = counts(store.clone()).await;

    // The same step again (a resumed runner redoing it), with everything a
    // commit can carry: refused as a whole.
    let mut again_state = json!({"n": 0, "log": []});
    let mut again_visits = BTreeMap::new();
    let mut again = commit(
        "r",
        1,
        &mut again_state,
        &mut again_visits,
        varied_change(3),
    );
    again.journal.push(again.journal[0].clone());
    let artifact = NewArtifact {
        name: "report.md".into(),
        media_type: "text/markdown".into(),
        bytes: b"# never".to_vec(),
    };
    let error = store
        .commit_step_with_artifacts(&again, std::slice::from_ref(&artifact))
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("`r`") && message.contains(&url(&path)),
        "{message}"
    );

    // Skipping ahead and rewriting checkpoint 0 are refused too.
    let mut ahead = commit(
        "r",
        3,
        &mut state.clone(),
        &mut visits.clone(),
        varied_change(3),
    );
    let error = store.commit_step(&ahead).await.unwrap_err();
    assert!(error.is_conflict(), "{error}");
    ahead.seq = 0;
    assert!(store.commit_step(&ahead).await.unwrap_err().is_conflict());
    ahead.run_id = "missing".into();
    ahead.seq = 1;
    assert!(matches!(
        store.commit_step(&ahead).await.unwrap_err(),
        StoreError::RunNotFound { .. }
    ));

    assert_eq!(counts(store.clone()).await, before);
    assert_eq!(
        store
            .artifact_bytes(&skillhost::store::blob_digest(b"# never"))
            .await
            .unwrap(),
        None
    );

    // The right next seq still goes through, with its artifact.
    let second = commit("r", 2, &mut state, &mut visits, varied_change(2));
    store
        .commit_step_with_artifacts(&second, &[artifact])
        .await
        .unwrap();
    assert_eq!(store.latest_state("r").await.unwrap().unwrap().state, state);
    assert_eq!(store.artifacts("r").await.unwrap().len(), 1);

    // A duplicate run id is a conflict, not an overwrite.
    let error = store
        .create_run(&new_run("r", json!({})))
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert_eq!(store.run("r").await.unwrap().unwrap().last_seq, 2);
}

#[tokio::test]
async fn tampered_history_is_reported_as_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let store = Store::open(&url(&path)).await.unwrap();
    let mut state = json!({"log": []});
    store
        .create_run(&new_run("run-t", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    for seq in 1..=5 {
        let changes = vec![StateChange::Append {
            field: "log".into(),
            items: vec![json!(seq)],
        }];
        let c = commit("run-t", seq, &mut state, &mut visits, changes);
        store.commit_step(&c).await.unwrap();
    }
    store.close().await;

    let mut conn = raw(&path).await;
    sqlx::query(
        "UPDATE checkpoints SET changes = '[{\"op\":\"append\",\"field\":\"log\",\"items\":[999]}]' \
         WHERE run_id = 'run-t' AND seq = 3",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = Store::open(&url(&path)).await.unwrap();
    assert_eq!(
        store.state_at("run-t", 2).await.unwrap().unwrap().state,
        json!({"log": [1, 2]})
    );
    for seq in [3, 5] {
        let error = store.state_at("run-t", seq).await.unwrap_err();
        assert!(error.is_corrupt(), "{error}");
        let message = error.to_string();
        assert!(
            message.contains(&format!("checkpoint {seq} of run `run-t`")),
            "{message}"
        );
        assert!(message.contains(&url(&path)), "{message}");
    }
    let error = store.latest_state("run-t").await.unwrap_err();
    assert!(error.is_corrupt(), "{error}");

    // A damaged snapshot and unreadable changes are caught the same way.
    store.close().await;
    let mut conn = raw(&path).await;
    sqlx::query("UPDATE checkpoints SET state = '{\"log\":[0]}' WHERE seq = 0")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("UPDATE checkpoints SET changes = 'not json' WHERE seq = 4")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let store = Store::open(&url(&path)).await.unwrap();
    assert!(store.state_at("run-t", 0).await.unwrap_err().is_corrupt());
    let error = store.state_at("run-t", 4).await.unwrap_err();
    assert!(error.to_string().contains("checkpoint 4"), "{error}");
}

#[tokio::test]
async fn a_foreign_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.db");
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    sqlx::query("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO notes (body) VALUES ('keep me')")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let before = files_in(dir.path());

    let error = Store::open(&url(&path)).await.unwrap_err();
    assert!(matches!(error, StoreError::NotOurs { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("`notes`"), "{message}");
    assert!(message.contains("Pick another path"), "{message}");
    assert_eq!(
        files_in(dir.path()),
        before,
        "the foreign database was touched"
    );

    // Not a database at all.
    let text = dir.path().join("readme.txt");
    std::fs::write(
        &text,
        "this is not sqlite, just some text that is long enough ".repeat(20),
    )
    .unwrap();
    let before = files_in(dir.path());
    let error = Store::open(&url(&text)).await.unwrap_err();
    assert!(matches!(error, StoreError::NotOurs { .. }), "{error}");
    assert!(
        error.to_string().contains("not a SQLite database"),
        "{error}"
    );
    assert_eq!(files_in(dir.path()), before);

    // A directory.
    let error = Store::open(&url(dir.path())).await.unwrap_err();
    assert!(error.to_string().contains("directory"), "{error}");
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let store = Store::open(&url(&path)).await.unwrap();
    store.create_run(&new_run("r", json!({}))).await.unwrap();
    store.close().await;
    let mut conn = raw(&path).await;
    sqlx::query("UPDATE skillhost_meta SET value = '99' WHERE key = 'schema_version'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let before = std::fs::read(&path).unwrap();

    let error = Store::open(&url(&path)).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::TooNew {
                found: 99,
                supported: 1,
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("99") && message.contains("version 1") && message.contains("upgrade host"),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn reopening_keeps_the_schema_and_urls_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("re.db");
    for _ in 0..2 {
        let store = Store::open(&url(&path)).await.unwrap();
        store.close().await;
    }
    let mut conn = raw(&path).await;
    let version: String =
        sqlx::query_scalar("SELECT value FROM skillhost_meta WHERE key = 'schema_version'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(version, "1");
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    conn.close().await.unwrap();

    let error = Store::open("postgres://app:s3cret@localhost/db")
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::UnsupportedUrl { .. }));
    assert!(!error.to_string().contains("s3cret"), "{error}");
    assert!(Store::open("mysql://x").await.is_err());
}

#[tokio::test]
async fn artifacts_round_trip_and_are_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.db");
    let store = Store::open(&url(&path)).await.unwrap();
    store.create_run(&new_run("a", json!({}))).await.unwrap();
    store.create_run(&new_run("b", json!({}))).await.unwrap();
    let deck = vec![7u8; 10_000];

    let d1 = store
        .put_artifact("a", "deck.pptx", "application/vnd.ms-powerpoint", &deck)
        .await
        .unwrap();
    let d2 = store
        .put_artifact("b", "copy.pptx", "application/vnd.ms-powerpoint", &deck)
        .await
        .unwrap();
    let d3 = store
        .put_artifact("a", "notes.txt", "text/plain", b"notes")
        .await
        .unwrap();
    assert_eq!(d1, d2);
    assert_eq!(d1, skillhost::store::blob_digest(&deck));
    assert_eq!(d1.len(), 64);
    assert_ne!(d1, d3);

    let listed = store.artifacts("a").await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|a| (a.name.as_str(), a.size, a.digest.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("deck.pptx", 10_000, d1.as_str()),
            ("notes.txt", 5, d3.as_str())
        ]
    );
    assert_eq!(store.artifact_bytes(&d1).await.unwrap(), Some(deck.clone()));
    assert_eq!(store.artifact_bytes(&"0".repeat(64)).await.unwrap(), None);

    // Writing a name again points it at the new bytes.
    let d4 = store
        .put_artifact("a", "notes.txt", "text/plain", b"notes v2")
        .await
        .unwrap();
    let notes = store.artifacts("a").await.unwrap();
    assert_eq!((notes[1].digest.as_str(), notes[1].size), (d4.as_str(), 8));

    let error = store
        .put_artifact("missing", "x", "text/plain", b"x")
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::RunNotFound { .. }), "{error}");

    store.close().await;
    let mut conn = raw(&path).await;
    let blobs: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM blobs")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(blobs, 3, "deck stored once, two versions of the notes");
    sqlx::query("UPDATE blobs SET bytes = X'00' WHERE digest = $1")
        .bind(&d3)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let store = Store::open(&url(&path)).await.unwrap();
    assert!(store.artifact_bytes(&d3).await.unwrap_err().is_corrupt());
}

#[tokio::test]
async fn map_items_are_idempotent_and_ordered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&url(&dir.path().join("m.db"))).await.unwrap();
    store.create_run(&new_run("m", json!({}))).await.unwrap();
    let item = |visit: u32, index: u32, output: Value| MapItemRow {
        run_id: "m".into(),
        node_id: "fan".into(),
        visit,
        item_index: index,
        output_hash: state_hash(&output),
        output,
        duration_us: 10,
        fuel_consumed: 100,
    };
    for index in [2, 0, 1] {
        store
            .record_map_item(&item(1, index, json!({"i": index})))
            .await
            .unwrap();
    }
    // Recorded again after a resume, even with another output: the first stays.
    store
        .record_map_item(&item(1, 1, json!({"i": "again"})))
        .await
        .unwrap();
    store
        .record_map_item(&item(2, 0, json!({"visit": 2})))
        .await
        .unwrap();

    let items = store.map_items("m", "fan", 1).await.unwrap();
    assert_eq!(
        items,
        vec![
            item(1, 0, json!({"i": 0})),
            item(1, 1, json!({"i": 1})),
            item(1, 2, json!({"i": 2}))
        ]
    );
    assert_eq!(store.map_items("m", "fan", 2).await.unwrap().len(), 1);
    assert!(store.map_items("m", "other", 1).await.unwrap().is_empty());
    let error = store
        .record_map_item(&MapItemRow {
            run_id: "missing".into(),
            ..item(1, 0, json!(0))
        })
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::RunNotFound { .. }), "{error}");
}

#[tokio::test]
async fn runs_are_listed_newest_first_and_filtered() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&url(&dir.path().join("l.db"))).await.unwrap();
    let ids: Vec<String> = (0..4).map(|_| skillhost::store::new_run_id()).collect();
    for id in &ids[..3] {
        store.create_run(&new_run(id, json!({}))).await.unwrap();
    }
    store
        .enqueue_run(&new_run(&ids[3], json!({})))
        .await
        .unwrap();

    let failed_step = StepRow {
        status: "failed".into(),
        error: Some(json!({"code": "timeout", "message": "took too long"})),
        output_hash: None,
        ..ok_step(&ids[1], "n1")
    };
    store.record_failed_step(&failed_step).await.unwrap();
    store
        .finish_run(&ids[0], RunStatus::Completed, Some(&json!(1)), None)
        .await
        .unwrap();
    store
        .finish_run(
            &ids[1],
            RunStatus::Failed,
            None,
            Some(&json!({"node": "n1"})),
        )
        .await
        .unwrap();

    let all = store.list_runs(None, 10).await.unwrap();
    let listed: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(listed, newest_first);
    assert_eq!(all[0].status, RunStatus::Queued);

    let only =
        |runs: Vec<skillhost::store::RunRow>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        only(
            store
                .list_runs(Some(RunStatus::Completed), 10)
                .await
                .unwrap()
        ),
        vec![ids[0].clone()]
    );
    let failed = store.list_runs(Some(RunStatus::Failed), 10).await.unwrap();
    assert_eq!(failed[0].error, Some(json!({"node": "n1"})));
    assert_eq!(
        only(store.list_runs(Some(RunStatus::Running), 10).await.unwrap()),
        vec![ids[2].clone()]
    );
    assert_eq!(store.list_runs(None, 2).await.unwrap().len(), 2);
    assert!(
        store
            .list_runs(Some(RunStatus::Cancelled), 10)
            .await
            .unwrap()
            .is_empty()
    );

    assert_eq!(store.steps(&ids[1]).await.unwrap(), vec![failed_step]);
    let error = store
        .record_failed_step(&ok_step("missing", "n1"))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::RunNotFound { .. }), "{error}");
    assert!(matches!(
        store
            .finish_run("missing", RunStatus::Failed, None, None)
            .await
            .unwrap_err(),
        StoreError::RunNotFound { .. }
    ));
}

#[tokio::test]
async fn checkpoints_store_what_changed_not_the_whole_state() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&url(&dir.path().join("b.db"))).await.unwrap();
    let mut state = records_state();
    let full = serde_json::to_string(&state).unwrap().len() as u64;
    assert!(full > 6_000, "the state is {full} bytes");
    store
        .create_run(&new_run("b", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let steps = 40;
    let started = std::time::Instant::now();
    for seq in 1..=steps {
        let changes = vec![StateChange::Set {
            field: "counter".into(),
            value: json!(seq),
        }];
        let c = commit("b", seq, &mut state, &mut visits, changes);
        store.commit_step(&c).await.unwrap();
    }
    let per_commit = started.elapsed() / steps as u32;

    let history = store.checkpoints("b").await.unwrap();
    let deltas: Vec<u64> = history
        .iter()
        .filter(|c| !c.is_snapshot)
        .map(|c| c.bytes)
        .collect();
    let total: u64 = history.iter().map(|c| c.bytes).sum();
    let largest_delta = *deltas.iter().max().unwrap();
    eprintln!(
        "state {full} B; delta checkpoints at most {largest_delta} B; {total} B for {} \
         checkpoints ({} B each on average, vs {} B as full copies); {per_commit:?} per commit",
        history.len(),
        total / history.len() as u64,
        full * history.len() as u64,
    );
    assert_eq!(deltas.len(), 38);
    assert!(
        largest_delta * 30 < full,
        "a delta checkpoint takes {largest_delta} B"
    );
    assert!(total * 4 < full * history.len() as u64, "{total} B in all");
    assert_eq!(store.latest_state("b").await.unwrap().unwrap().state, state);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_runners_commit_each_checkpoint_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.db");
    // Two handles on one file behave like two host processes: separate pools,
    // and both open (and migrate) a fresh file at the same time.
    let db = url(&path);
    let (a, b) = tokio::join!(Store::open(&db), Store::open(&db));
    let stores = [a.unwrap(), b.unwrap()];
    let mut state = json!({"log": []});
    stores[0]
        .create_run(&new_run("race", state.clone()))
        .await
        .unwrap();

    let mut visits = BTreeMap::new();
    for seq in 1..=5 {
        let c = commit("race", seq, &mut state, &mut visits, varied_change(seq));
        // Eight attempts at the same checkpoint, split over both handles.
        let attempts = (0..8).map(|i| {
            let store = stores[i % 2].clone();
            let c = c.clone();
            tokio::spawn(async move { store.commit_step(&c).await })
        });
        let mut won = 0;
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(()) => won += 1,
                Err(e) => assert!(e.is_conflict(), "{e}"),
            }
        }
        assert_eq!(won, 1, "checkpoint {seq} was committed {won} times");
    }
    assert_eq!(stores[1].steps("race").await.unwrap().len(), 5);
    assert_eq!(stores[1].journal("race").await.unwrap().len(), 5);
    let latest = stores[1].latest_state("race").await.unwrap().unwrap();
    assert_eq!((latest.seq, latest.state), (5, state));
}

#[tokio::test]
async fn normal_sync_mode_keeps_the_same_behaviour() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("normal.db");
    let options = StoreOptions {
        sync: SyncMode::Normal,
    };
    let store = Store::open_with(&url(&path), options).await.unwrap();
    let mut state = json!({});
    store
        .create_run(&new_run("n", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let c = commit("n", 1, &mut state, &mut visits, varied_change(1));
    store.commit_step(&c).await.unwrap();
    assert!(store.commit_step(&c).await.unwrap_err().is_conflict());
    store.close().await;
    let store = Store::open(&url(&path)).await.unwrap();
    assert_eq!(store.latest_state("n").await.unwrap().unwrap().state, state);
}
