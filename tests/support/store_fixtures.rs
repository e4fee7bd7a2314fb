//! Fixtures shared by the store tests of both backends and the worker tests:
//! runs, steps, commits and state changes of a known shape.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use skillhost_store::{
    InitialState, JournalEntry, NewRun, Provenance, RunState, StateChange, StepCommit, StepRow,
    StepStatus, apply, state_hash,
};

pub fn new_run(id: &str, initial_state: Value) -> NewRun {
    NewRun {
        id: id.to_owned(),
        scenario_name: "demo".into(),
        scenario_path: "examples/demo/scenario.toml".into(),
        scenario_digest: "d".repeat(64),
        input: json!({"topic": "store"}),
        initial_state: std::sync::Arc::new(InitialState::new(initial_state)),
        start_node: "n1".into(),
        start_visits: BTreeMap::new(),
        provenance: Provenance {
            components: BTreeMap::from([("probe".into(), "c".repeat(64))]),
            forked_from: None,
            parent: None,
            ..Provenance::default()
        },
    }
}

pub fn ok_step(run_id: &str, node_id: &str) -> StepRow {
    StepRow {
        run_id: run_id.to_owned(),
        seq: None,
        node_id: node_id.to_owned(),
        attempt: 1,
        status: StepStatus::Ok,
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
pub fn commit(
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
        full_state: std::sync::Arc::new(RunState::from_value(state.clone())),
        step: ok_step(run_id, &node_id),
        visits: visits.clone(),
        journal: vec![JournalEntry {
            seq,
            node_id: node_id.clone(),
            item: None,
            entry: 0,
            kind: "clock".into(),
            request: json!({}),
            response: json!({"now_ms": seq}),
        }],
        cache: None,
        node_id,
    }
}

/// Twenty records of about 300 bytes each, plus small fields nodes change.
pub fn records_state() -> Value {
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
pub fn varied_change(seq: u64) -> Vec<StateChange> {
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
