//! What a replay and an audit read from the store, on both backends: journal
//! rows with their map item, entry index and digests (an edited row is
//! named, never served silently), a run's provenance (its components and
//! fork origin, pinned by its digest), map items that keep their journal
//! and attempt for a resumed map node, a run's whole checkpoint history,
//! and a version 5 database upgraded with its journal kept as it was.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use skillhost_store::{
    ForkOrigin, JournalEntry, MapItemRow, NewCacheEntry, Provenance, RunStatus, SCHEMA_VERSION,
    StateChange, Store, StoreError, state_hash,
};
use skillhost_tests::store_fixtures::{commit, new_run, varied_change};

use crate::backends::{Db, Kind, UNDO_6, UNDO_7, UNDO_8, UNDO_9, UNDO_11, undo_10, undo_12};

both!(
    journal_rows_keep_their_item_and_entry_and_are_checked_against_their_digests,
    a_runs_provenance_and_start_are_recorded_and_pinned_by_its_digest,
    map_items_keep_their_journal_and_attempt,
    a_runs_whole_history_is_read_with_every_change,
    a_version_5_database_keeps_its_journal_as_legacy_rows,
    node_cache_entries_are_committed_with_their_step_and_served_until_they_expire,
);

fn entry(node: &str, item: Option<u32>, index: u32, key: &str, answer: Value) -> JournalEntry {
    JournalEntry {
        seq: 1,
        node_id: node.into(),
        item,
        entry: index,
        kind: "kv".into(),
        request: json!({"op": "get", "key": key}),
        response: json!({"ok": answer}),
    }
}

/// A run `r` whose step 1 (node `n1`) committed `journal`.
async fn run_with_journal(store: &Store, journal: Vec<JournalEntry>) {
    let mut state = json!({"log": []});
    store
        .create_run(&new_run("r", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let mut step = commit("r", 1, &mut state, &mut visits, varied_change(1));
    step.journal = journal;
    store.commit_step(&step).await.unwrap();
}

fn corrupt_message(error: StoreError) -> String {
    assert!(error.is_corrupt(), "{error}");
    error.to_string()
}

/// A map node's items keep their own journals (entries numbered per item)
/// beside a skill node's; every row comes back as it was committed, with
/// its request digest, and a row edited in the database afterwards is
/// reported, naming the run, the step, the item, the entry and the part.
async fn journal_rows_keep_their_item_and_entry_and_are_checked_against_their_digests(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let journal = vec![
        entry("n1", Some(0), 0, "a", json!("MQ==")),
        entry("n1", Some(0), 1, "b", json!(null)),
        entry("n1", Some(1), 0, "c", json!("Mg==")),
        entry("n1", Some(2), 0, "d", json!(null)),
    ];
    run_with_journal(&store, journal.clone()).await;
    assert_eq!(store.journal("r").await.unwrap(), journal);
    let rows = store.journal_rows("r").await.unwrap();
    assert_eq!(rows.len(), 4);
    for (row, entry) in rows.iter().zip(&journal) {
        assert_eq!(&row.entry, entry);
        assert_eq!(row.fault, None);
        assert_eq!(
            row.request_digest.as_deref(),
            Some(&*state_hash(&entry.request))
        );
        assert_eq!(row.digest, entry.digest("r"));
    }
    store.close().await;

    // The answer item 0's second call got, edited by hand.
    db.exec(
        "UPDATE journal SET response = '{\"ok\":\"aGk=\"}' \
         WHERE run_id = 'r' AND item_index = 0 AND entry_index = 1",
    )
    .await;
    let store = db.open().await;
    let message = corrupt_message(store.journal("r").await.unwrap_err());
    assert!(
        message.contains(&format!(
            "corrupt journal entry 1 of step 1 (node `n1`, item 0) of run `r` in {}",
            db.url
        )),
        "{message}"
    );
    assert!(message.contains("committed: its response"), "{message}");
    let rows = store.journal_rows("r").await.unwrap();
    let faults: Vec<(Option<u32>, u32)> = rows
        .iter()
        .filter(|row| row.fault.is_some())
        .map(|row| (row.entry.item, row.entry.entry))
        .collect();
    assert_eq!(faults, [(Some(0), 1)]);
    assert_eq!(rows[1].entry.response, json!({"ok": "aGk="}));
    store.close().await;

    // An entry moved to another item; a row without its digest.
    db.exec("UPDATE journal SET item_index = 3 WHERE run_id = 'r' AND item_index = 2")
        .await;
    db.exec("UPDATE journal SET digest = NULL WHERE run_id = 'r' AND item_index = 1")
        .await;
    let store = db.open().await;
    let rows = store.journal_rows("r").await.unwrap();
    let fault = |item: u32| {
        rows.iter()
            .find(|row| row.entry.item == Some(item))
            .and_then(|row| row.fault.clone())
            .unwrap()
    };
    assert!(fault(1).contains("has no digest"), "{}", fault(1));
    assert!(
        fault(3).ends_with("its run, seq, node, item, entry index or kind"),
        "{}",
        fault(3)
    );
}

/// A run records the components it uses and where it was forked from; a
/// fork starts with the visit counts of the checkpoint it came from. The
/// provenance is pinned by the run's digest: an edit is refused.
async fn a_runs_provenance_and_start_are_recorded_and_pinned_by_its_digest(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut fork = new_run("fork", json!({"log": ["kept"]}));
    fork.provenance = Provenance {
        components: BTreeMap::from([
            ("fetch".into(), "a".repeat(64)),
            ("probe".into(), "b".repeat(64)),
        ]),
        forked_from: Some(ForkOrigin {
            run_id: "origin".into(),
            seq: 7,
        }),
        parent: None,
        ..Provenance::default()
    };
    fork.start_node = "n3".into();
    fork.start_visits = BTreeMap::from([("n1".into(), 2), ("n2".into(), 1)]);
    store.create_run(&fork).await.unwrap();
    store
        .create_run(&new_run("plain", json!({})))
        .await
        .unwrap();

    let run = store.run("fork").await.unwrap().unwrap();
    assert_eq!(run.provenance.as_ref(), Some(&fork.provenance));
    let listed = store.list_runs(None, 10).await.unwrap();
    let plain = listed.iter().find(|r| r.id == "plain").unwrap();
    assert_eq!(plain.provenance.as_ref().unwrap().forked_from, None);
    let start = store.state_at("fork", 0).await.unwrap().unwrap();
    assert_eq!(start.next_nodes, ["n3"]);
    assert_eq!(start.visits, fork.start_visits);
    assert_eq!(start.state, json!({"log": ["kept"]}));
    store.close().await;

    db.exec(&format!(
        "UPDATE runs SET provenance = '{}' WHERE id = 'fork'",
        r#"{"components":{"fetch":"0000","probe":"1111"}}"#
    ))
    .await;
    let store = db.open().await;
    let message = corrupt_message(store.run("fork").await.unwrap_err());
    assert!(message.contains("corrupt run `fork`"), "{message}");
    assert!(
        message.ends_with(
            "created: its components or fork origin. The stored history no longer matches what \
         was written; restore the database from a backup or fork the run from an earlier \
         checkpoint"
        ),
        "{message}"
    );
    assert!(store.run("plain").await.unwrap().is_some());
}

/// A finished map item keeps the host calls its call made and the attempt
/// its output came from, so a resumed map node that reuses it commits them;
/// both are pinned by the item's digest.
async fn map_items_keep_their_journal_and_attempt(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    store.create_run(&new_run("r", json!({}))).await.unwrap();
    let item = |index: u32, journal: Vec<JournalEntry>, attempt: u32| MapItemRow {
        run_id: "r".into(),
        node_id: "fan".into(),
        visit: 1,
        item_index: index,
        output: json!({"i": index}),
        output_hash: state_hash(&json!({"i": index})),
        duration_us: 5,
        fuel_consumed: 50,
        journal,
        attempt,
    };
    let mut calls = vec![
        entry("fan", Some(0), 0, "a", json!("MQ==")),
        entry("fan", Some(0), 1, "b", json!(null)),
    ];
    for call in &mut calls {
        call.seq = 0;
    }
    store
        .record_map_item(&item(0, calls.clone(), 3))
        .await
        .unwrap();
    store
        .record_map_item(&item(1, Vec::new(), 1))
        .await
        .unwrap();
    let items = store.map_items("r", "fan", 1).await.unwrap();
    assert_eq!(items, [item(0, calls, 3), item(1, Vec::new(), 1)]);
    store.close().await;

    db.exec("UPDATE map_items SET attempt = 1 WHERE run_id = 'r' AND item_index = 0")
        .await;
    let store = db.open().await;
    let message = corrupt_message(store.map_items("r", "fan", 1).await.unwrap_err());
    assert!(
        message.contains("item 0 of map node `fan` of run `r`"),
        "{message}"
    );
    assert!(
        message.contains("its attempt or journal no longer matches"),
        "{message}"
    );
}

/// A run's whole history: the state it started from and every checkpoint
/// with the changes its node made, next nodes and visit counts, each
/// checked against its digest.
async fn a_runs_whole_history_is_read_with_every_change(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let initial = json!({"log": [], "counter": 0, "notes": {}});
    let mut state = initial.clone();
    store
        .create_run(&new_run("r", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let mut commits = Vec::new();
    for seq in 1..=6 {
        let c = commit("r", seq, &mut state, &mut visits, varied_change(seq));
        store.commit_step(&c).await.unwrap();
        commits.push(c);
    }
    let history = store.history("r").await.unwrap().unwrap();
    assert_eq!(history.initial_state, initial);
    assert_eq!(history.checkpoints.len(), 7);
    assert_eq!(history.checkpoints[0].next_nodes, ["n1"]);
    for (checkpoint, c) in history.checkpoints[1..].iter().zip(&commits) {
        assert_eq!(checkpoint.seq, c.seq);
        assert_eq!(checkpoint.node_id, c.node_id);
        assert_eq!(checkpoint.changes, c.changes);
        assert_eq!(checkpoint.next_nodes, c.next_nodes);
        assert_eq!(checkpoint.visits, c.visits);
        assert_eq!(checkpoint.state_hash, c.state_hash);
    }
    // Replaying the changes from the start gives every recorded hash.
    let mut rebuilt = history.initial_state.clone();
    for checkpoint in &history.checkpoints[1..] {
        skillhost_store::apply(&mut rebuilt, &checkpoint.changes);
        assert_eq!(state_hash(&rebuilt), checkpoint.state_hash);
    }
    assert_eq!(store.history("missing").await.unwrap(), None);
    store.close().await;

    db.exec(&format!(
        "UPDATE checkpoints SET changes = '{}' WHERE run_id = 'r' AND seq = 4",
        serde_json::to_string(&vec![StateChange::Set {
            field: "counter".into(),
            value: json!(99),
        }])
        .unwrap()
    ))
    .await;
    let store = db.open().await;
    let message = corrupt_message(store.history("r").await.unwrap_err());
    assert!(message.contains("checkpoint 4 of run `r`"), "{message}");
    assert!(message.contains("its changes"), "{message}");
}

/// A database of schema version 5 is upgraded: its journal rows are kept
/// as they were (marked `legacy`, their entries numbered by their place in
/// their step, no item), its map items read as first attempts without a
/// journal, and its runs show no provenance.
async fn a_version_5_database_keeps_its_journal_as_legacy_rows(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut state = json!({"log": []});
    let mut old = new_run("old", state.clone());
    old.provenance = Provenance::default();
    store.create_run(&old).await.unwrap();
    let mut visits = BTreeMap::new();
    let mut step = commit("old", 1, &mut state, &mut visits, varied_change(1));
    step.journal = vec![
        entry("n1", None, 0, "a", json!("MQ==")),
        entry("n1", None, 1, "b", json!(null)),
    ];
    store.commit_step(&step).await.unwrap();
    store
        .record_map_item(&MapItemRow {
            run_id: "old".into(),
            node_id: "fan".into(),
            visit: 1,
            item_index: 0,
            output: json!(1),
            output_hash: state_hash(&json!(1)),
            duration_us: 1,
            fuel_consumed: 1,
            journal: Vec::new(),
            attempt: 1,
        })
        .await
        .unwrap();
    store.close().await;
    // What a host of schema version 5 would have left: no journal digests,
    // item or entry indexes, no provenance (a run older than digests here,
    // whose checkpoints keep theirs), map items without attempt or journal.
    db.exec(undo_12(db.kind)).await;
    db.exec(UNDO_11).await;
    db.exec(undo_10(db.kind)).await;
    db.exec(UNDO_9).await;
    db.exec(UNDO_8).await;
    db.exec(UNDO_7).await;
    db.exec(UNDO_6).await;
    db.exec(
        "UPDATE runs SET digest = 'legacy'; \
         UPDATE skillhost_meta SET value = '5' WHERE key = 'schema_version'",
    )
    .await;

    let store = db.open().await;
    let run = store.run("old").await.unwrap().unwrap();
    assert_eq!(run.provenance, None);
    let rows = store.journal_rows("old").await.unwrap();
    let read: Vec<(Option<u32>, u32, &str, Option<&str>)> = rows
        .iter()
        .map(|row| {
            (
                row.entry.item,
                row.entry.entry,
                row.digest.as_str(),
                row.fault.as_deref(),
            )
        })
        .collect();
    assert_eq!(read, [(None, 0, "legacy", None), (None, 1, "legacy", None)]);
    assert_eq!(store.journal("old").await.unwrap().len(), 2);
    let items = store.map_items("old", "fan", 1).await.unwrap();
    assert_eq!((items[0].attempt, items[0].journal.len()), (1, 0));
    assert_eq!(store.latest_state("old").await.unwrap().unwrap().seq, 1);
    store.close().await;
    assert_eq!(
        db.count("SELECT CAST(value AS BIGINT) FROM skillhost_meta WHERE key = 'schema_version'")
            .await,
        i64::from(SCHEMA_VERSION)
    );
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A node cache entry is written by its step's commit (with the run, seq
/// and node that recorded it), served to any handle until it expires,
/// replaced by a later commit of the same key, refused when edited, and
/// pruned with its run or once expired.
async fn node_cache_entries_are_committed_with_their_step_and_served_until_they_expire(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut visits = BTreeMap::new();
    let mut state = json!({"log": []});
    store
        .create_run(&new_run("first", state.clone()))
        .await
        .unwrap();
    let output = json!({"text": "cached", "n": 3});
    let mut step = commit("first", 1, &mut state, &mut visits, varied_change(1));
    step.journal.clear();
    step.cache = Some(NewCacheEntry {
        key: "k-live".into(),
        output: output.clone(),
        expires_at_ms: now_ms() + 3_600_000,
    });
    store.commit_step(&step).await.unwrap();
    let mut step = commit("first", 2, &mut state, &mut visits, varied_change(2));
    step.cache = Some(NewCacheEntry {
        key: "k-expired".into(),
        output: json!("old"),
        expires_at_ms: now_ms() - 1,
    });
    store.commit_step(&step).await.unwrap();

    let other = db.open().await;
    let hit = other.cached_output("k-live").await.unwrap().unwrap();
    assert_eq!(hit.output, output);
    assert_eq!(hit.output_hash, state_hash(&output));
    assert_eq!(
        (hit.run_id.as_str(), hit.seq, hit.node_id.as_str()),
        ("first", 1, "n1")
    );
    assert_eq!(other.cached_output("k-expired").await.unwrap(), None);
    assert_eq!(other.cached_output("k-missing").await.unwrap(), None);

    // A second run records the same key: its entry replaces the first.
    let mut state = json!({"log": []});
    store
        .create_run(&new_run("second", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let mut step = commit("second", 1, &mut state, &mut visits, varied_change(1));
    step.cache = Some(NewCacheEntry {
        key: "k-expired".into(),
        output: json!("new"),
        expires_at_ms: now_ms() + 3_600_000,
    });
    store.commit_step(&step).await.unwrap();
    let hit = store.cached_output("k-expired").await.unwrap().unwrap();
    assert_eq!((hit.output, hit.run_id.as_str()), (json!("new"), "second"));

    // A commit refused by the sequence guard writes no entry.
    let mut stale = commit("second", 1, &mut state, &mut visits, varied_change(1));
    stale.cache = Some(NewCacheEntry {
        key: "k-refused".into(),
        output: json!(1),
        expires_at_ms: now_ms() + 3_600_000,
    });
    assert!(store.commit_step(&stale).await.is_err());
    assert_eq!(store.cached_output("k-refused").await.unwrap(), None);
    store.close().await;

    db.exec("UPDATE node_cache SET output = '{\"text\":\"edited\",\"n\":3}' WHERE key = 'k-live'")
        .await;
    let store = db.open().await;
    let message = corrupt_message(store.cached_output("k-live").await.unwrap_err());
    assert!(
        message.contains("corrupt node cache entry k-live"),
        "{message}"
    );
    assert!(
        message.contains("run `first` wrote it at checkpoint 1"),
        "{message}"
    );

    // Pruning the first run takes its entry; the second run's stays.
    store
        .finish_run("first", RunStatus::Completed, None, None)
        .await
        .unwrap();
    // Finished strictly before the prune's "now".
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let report = store
        .prune_runs(Some(std::time::Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(report.runs, ["first"]);
    assert_eq!(report.cache_entries, 1);
    assert_eq!(db.count("SELECT COUNT(*) FROM node_cache").await, 1);
    assert!(store.cached_output("k-expired").await.unwrap().is_some());
}
