//! Running ahead of durability (`src/ahead.rs`) on a real SQLite file with
//! every commit synced (the default `SyncMode::Full`): a node without
//! effects may run while the commit before it syncs, but nothing leaves the
//! engine before what it follows is durable. An event sink that reads the
//! store's WAL counters at each event checks both promises: every event
//! that says a checkpoint was written comes once that checkpoint is
//! durable, and a node with effects (`kv`) starts only once every commit
//! before it is. The events are the same, in the same order, as a run whose
//! every node waits for its sync.

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::json;
use skillhost_engine::{Engine, Event, EventSink};
use skillhost_scenario::LoadedScenario;
use skillhost_store::{Store, WalSyncs};

use crate::{Db, load};

/// Three nodes without effects, a node that reads `kv`, one more without
/// effects, then the end: each echo node appends its message to `trail`.
fn scenario(dir: &Path) -> Arc<LoadedScenario> {
    std::fs::write(
        dir.join("kv-probe.wasm"),
        skillhost_tests::fixture_component("kv-probe"),
    )
    .unwrap();
    let echo = skillhost_tests::repo_root().join("skills/dist/echo.wasm");
    let mut toml = format!(
        r#"[scenario]
name = "ahead"
version = "0.1.0"
description = "nodes without effects around one with them"

[state]
trail = {{ type = "array" }}
read = {{ type = "string" }}

[skills.echo]
component = {echo:?}

[skills.probe]
component = "kv-probe.wasm"
"#
    );
    let line = ["p1", "p2", "p3", "k", "p4", "done"];
    for id in line {
        toml.push_str(&match id {
            "k" => "\n[[node]]\nid = \"k\"\nskill = \"probe\"\ncapabilities = { kv = \"memory\" }\n\
                    input = { key = \"'greeting'\" }\n\
                    writes = [{ field = \"read\", from = \"output.text\" }]\n"
                .to_string(),
            "done" => "\n[[node]]\nid = \"done\"\nkind = \"end\"\n".to_string(),
            _ => format!(
                "\n[[node]]\nid = \"{id}\"\nskill = \"echo\"\n\
                 input = {{ message = \"'{id}'\", repeat = \"1\" }}\n\
                 writes = [{{ field = \"trail\", from = \"output.message\", reducer = \"append\" }}]\n"
            ),
        });
    }
    for pair in line.windows(2) {
        toml.push_str(&format!(
            "\n[[edge]]\nfrom = \"{}\"\nto = \"{}\"\n",
            pair[0], pair[1]
        ));
    }
    let path = dir.join("ahead.toml");
    std::fs::write(&path, toml).unwrap();
    load(&path)
}

/// Every event, with the store's WAL counters when it came.
struct Watching {
    store: Store,
    seen: Mutex<Vec<(Event, WalSyncs)>>,
}

impl EventSink for Watching {
    fn emit(&self, event: &Event) {
        let counters = self.store.wal_syncs().expect("a WAL synced by the store");
        self.seen.lock().unwrap().push((event.clone(), counters));
    }
}

/// Runs the scenario on a fresh SQLite file, running ahead or not; its
/// events with the counters, and its final state.
async fn watched(loaded: &LoadedScenario, run_ahead: bool) -> (Vec<(Event, WalSyncs)>, String) {
    let db = Db::sqlite().await;
    let sink = Arc::new(Watching {
        store: db.store.clone(),
        seen: Mutex::new(Vec::new()),
    });
    let outcome = Engine::new(Some(db.store.clone()), sink.clone())
        .with_runtime_kv()
        .with_run_ahead(run_ahead)
        .start(loaded, json!({}), None)
        .await
        .expect("the run starts");
    assert_eq!(
        outcome.status.as_str(),
        "completed",
        "{:?}",
        outcome.failure
    );
    let seen = std::mem::take(&mut *sink.seen.lock().unwrap());
    (seen, outcome.state.to_value().to_string())
}

/// What an event is, without its run id and times: `started p1`, …
fn shape(event: &Event) -> String {
    match event {
        Event::RunStarted { .. } => "run started".into(),
        Event::NodeStarted { node, .. } => format!("started {node}"),
        Event::NodeFinished { node, .. } => format!("finished {node}"),
        Event::CheckpointWritten { seq, node, .. } => format!("checkpoint {seq} {node}"),
        Event::RunFinished { status, .. } => format!("run {status}"),
        other => format!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_leaves_the_engine_before_the_commit_it_follows_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let loaded = scenario(dir.path());
    let (ahead, state) = watched(&loaded, true).await;
    let (waiting, strict_state) = watched(&loaded, false).await;
    assert_eq!(state, strict_state);
    assert!(
        state.contains(r#""trail":["p1","p2","p3","p4"]"#),
        "{state}"
    );

    // The same events in the same order, whichever way the run went.
    let shapes = |seen: &[(Event, WalSyncs)]| seen.iter().map(|(e, _)| shape(e)).collect();
    let shapes: (Vec<String>, Vec<String>) = (shapes(&ahead), shapes(&waiting));
    assert_eq!(shapes.0, shapes.1);
    assert_eq!(
        shapes
            .0
            .iter()
            .filter(|s| s.starts_with("checkpoint"))
            .count(),
        5,
        "{:?}",
        shapes.0
    );

    for seen in [&ahead, &waiting] {
        // Commit 1 is the run's creation; checkpoint `seq` is commit
        // `seq + 1` (the node that reads kv writes nothing of its own).
        let mut checkpoints = 0;
        for (event, at) in seen.iter() {
            if let Event::CheckpointWritten { seq, .. } = event {
                checkpoints += 1;
                assert_eq!(*seq, checkpoints);
                assert!(
                    at.durable > *seq,
                    "checkpoint {seq} was announced with only {} commits durable: {seen:#?}",
                    at.durable
                );
            }
            // The node with effects starts once every commit is durable.
            if let Event::NodeStarted { node, .. } = event
                && node == "k"
            {
                assert_eq!(
                    at.durable, at.commits,
                    "the node with effects started before every commit was durable"
                );
            }
        }
    }
}
