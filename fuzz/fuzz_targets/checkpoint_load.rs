//! Fuzz target: loading checkpoints back from a store whose checkpoint rows
//! hold arbitrary text, as a damaged or hand-edited database would. A run is
//! created in a real SQLite store once; each input replaces its checkpoint
//! rows (through a second connection, as another writer would) and reads
//! them back through the store's public reads: the history, the latest
//! state, and the state at every seq. Any `Err` is the store doing its job;
//! a panic, an abort or a stack overflow is a finding.
//!
//! Input: UTF-8 text, five lines per checkpoint (seq 0, 1, …): the snapshot
//! (empty: none), the changes, the state hash, the next nodes and the visit
//! counts. A hash of `auto` (`auto2`) is replaced by the version 1 (2) hash
//! the engine would have recorded for the snapshot and changes so far, so
//! that inputs can get past the hash check to the columns decoded after it.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use skillhost_store::{
    FieldHashes, InitialState, NewRun, StateChange, Store, StoreOptions, SyncMode, apply,
    new_run_id, state_hash,
};

/// At most this many checkpoints per input: a longer history exercises
/// nothing a short one does not.
const MAX_CHECKPOINTS: usize = 24;

struct Fixture {
    _dir: tempfile::TempDir,
    tokio: tokio::runtime::Runtime,
    store: Store,
    /// The second connection, which writes the rows.
    writer: rusqlite::Connection,
    run_id: String,
}

fn fixture() -> &'static std::sync::Mutex<Fixture> {
    static FIXTURE: OnceLock<std::sync::Mutex<Fixture>> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("fuzz.db");
        let tokio = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
        let url = format!("sqlite://{}", path.display());
        let options = StoreOptions {
            sync: SyncMode::Normal,
        };
        let store = tokio
            .block_on(Store::open_with(&url, options))
            .expect("a new SQLite store");
        let run_id = new_run_id();
        let run = NewRun {
            id: run_id.clone(),
            scenario_name: "fuzz".into(),
            scenario_path: "fuzz.toml".into(),
            scenario_digest: "0".repeat(64),
            input: Value::Object(Default::default()),
            initial_state: std::sync::Arc::new(InitialState::new(serde_json::json!({}))),
            start_node: "start".into(),
            start_visits: Default::default(),
            provenance: Default::default(),
        };
        tokio.block_on(store.create_run(&run)).expect("a run");
        let writer = rusqlite::Connection::open(&path).expect("a second connection");
        writer
            .busy_timeout(std::time::Duration::from_secs(10))
            .expect("a busy timeout");
        std::sync::Mutex::new(Fixture {
            _dir: dir,
            tokio,
            store,
            writer,
            run_id,
        })
    })
}

/// One checkpoint row's text columns.
struct Row<'a> {
    state: Option<&'a str>,
    changes: &'a str,
    state_hash: String,
    next_nodes: &'a str,
    visits: &'a str,
}

fn rows(text: &str) -> Vec<Row<'_>> {
    let lines: Vec<&str> = text.split('\n').collect();
    let mut state: Option<Value> = None;
    let mut rows = Vec::new();
    for block in lines.chunks(5).take(MAX_CHECKPOINTS) {
        let line = |i: usize| block.get(i).copied().unwrap_or("");
        let snapshot = Some(line(0)).filter(|s| !s.is_empty());
        if let Some(snapshot) = snapshot {
            state = serde_json::from_str(snapshot).ok();
        }
        if let (Some(state), Ok(changes)) = (
            state.as_mut(),
            serde_json::from_str::<Vec<StateChange>>(line(1)),
        ) {
            apply(state, &changes);
        }
        let state_hash = match (line(2), &state) {
            ("auto", Some(state)) => state_hash(state),
            ("auto2", Some(state)) => FieldHashes::default().hash(state, &[]),
            (hash, _) => hash.to_owned(),
        };
        rows.push(Row {
            state: snapshot,
            changes: line(1),
            state_hash,
            next_nodes: line(3),
            visits: line(4),
        });
    }
    rows
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let rows = rows(text);
    let fixture = fixture().lock().unwrap_or_else(|e| e.into_inner());
    let run_id = fixture.run_id.as_str();
    let writer = &fixture.writer;
    writer
        .execute("DELETE FROM checkpoints WHERE run_id = ?1", [run_id])
        .expect("clearing the run's checkpoints");
    for (seq, row) in rows.iter().enumerate() {
        let seq = seq as i64;
        if seq > 0 {
            // The schema admits a checkpoint only right after the run's last.
            writer
                .execute(
                    "UPDATE runs SET last_seq = ?2 WHERE id = ?1",
                    rusqlite::params![run_id, seq - 1],
                )
                .expect("moving the run's last seq");
        }
        writer
            .execute(
                "INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, \
                 changes, state_hash, visits, bytes, created_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 0, 0)",
                rusqlite::params![
                    run_id,
                    seq,
                    format!("n{seq}"),
                    row.next_nodes,
                    row.state.is_some(),
                    row.state,
                    row.changes,
                    row.state_hash,
                    row.visits,
                ],
            )
            .expect("writing a checkpoint row");
    }
    writer
        .execute(
            "UPDATE runs SET last_seq = ?2 WHERE id = ?1",
            rusqlite::params![run_id, (rows.len() as i64 - 1).max(0)],
        )
        .expect("moving the run's last seq");
    let store = &fixture.store;
    fixture.tokio.block_on(async {
        let _ = store.checkpoints(run_id).await;
        let _ = store.latest_state(run_id).await;
        for seq in 0..rows.len() as u64 {
            let _ = store.state_at(run_id, seq).await;
        }
    });
});
