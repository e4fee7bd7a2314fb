//! Replaying finished runs and forking them, on real components and both
//! stores: a run's `kv` calls (a skill node's, and a map node's, item by
//! item) are answered from its journal by a runtime whose kv is empty, so
//! every hash matches only if the journal answered; a journal entry
//! changed in the database is a divergence naming the step and the call;
//! an export replays in a fresh directory with no database; a fork starts
//! from a middle checkpoint with fields replaced and its visit counts.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use skillhost_engine::replay::{
    ComponentSearch, ReplayError, ReplayReport, RunExport, StepStatus, StepVerdict, load_exported,
    replay,
};
use skillhost_engine::{Engine, EngineError, NoEvents, RunOutcome};
use skillhost_store::{RunStatus, Store};

use crate::journal::KvScenario;
use crate::{Db, completed, e2e_scenario, load, runtime};

/// Replays run `run_id` of `store` as `host replay RUN` does, with the
/// binary's runtime, whose kv is empty.
async fn replay_from_store(store: &Store, run_id: &str) -> Result<ReplayReport, ReplayError> {
    let export = RunExport::from_store(store, run_id).await?;
    let loaded = load_exported(&export, runtime(), None, &ComponentSearch::default())?;
    replay(&export, &loaded, &mut |_| {}).await
}

fn verdicts(report: &ReplayReport) -> Vec<(u64, &str, StepStatus, usize)> {
    report
        .steps
        .iter()
        .map(|s| (s.seq, s.node.as_str(), s.status, s.calls_served))
        .collect()
}

async fn a_run_with_kv_calls_replays_from_its_journal(db: Db) {
    let scenario = KvScenario::new();
    let outcome = scenario.run(&db.store).await;
    let run = db.store.run(&outcome.run_id).await.unwrap().unwrap();
    let provenance = run.provenance.unwrap();
    let probe = skillhost_store::blob_digest(&skillhost_tests::fixture_component("kv-probe"));
    assert_eq!(
        provenance.components,
        BTreeMap::from([("probe".to_string(), probe)])
    );

    let mut seen = Vec::new();
    let export = RunExport::from_store(&db.store, &outcome.run_id)
        .await
        .unwrap();
    let loaded = load_exported(&export, runtime(), None, &ComponentSearch::default()).unwrap();
    let report = replay(&export, &loaded, &mut |verdict: &StepVerdict| {
        seen.push(verdict.seq)
    })
    .await
    .unwrap();
    assert_eq!(report.diverged_at, None, "{report:#?}");
    assert_eq!(report.last_seq, 2);
    // Two calls of the skill node, two per item of the map node.
    assert_eq!(
        verdicts(&report),
        [
            (1, "read_one", StepStatus::Same, 2),
            (2, "read_many", StepStatus::Same, 6)
        ]
    );
    assert_eq!(seen, [1, 2]);
    // Each item has its own journal.
    let items: Vec<(Option<u32>, u32)> = export
        .journal
        .iter()
        .filter(|e| e.entry.seq == 2)
        .map(|e| (e.entry.item, e.entry.entry))
        .collect();
    assert_eq!(
        items,
        [
            (Some(0), 0),
            (Some(0), 1),
            (Some(1), 0),
            (Some(1), 1),
            (Some(2), 0),
            (Some(2), 1)
        ]
    );
    // Nothing was written: the run is as it was.
    assert_eq!(
        db.store.checkpoints(&outcome.run_id).await.unwrap().len(),
        3
    );
    assert_eq!(db.store.list_runs(None, 10).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_run_with_kv_calls_replays_from_its_journal_on_sqlite() {
    a_run_with_kv_calls_replays_from_its_journal(Db::sqlite().await).await;
}

#[tokio::test]
async fn a_run_with_kv_calls_replays_from_its_journal_on_postgres() {
    a_run_with_kv_calls_replays_from_its_journal(Db::postgres().await).await;
}

/// SQL that sets a journal row's column, by item (NULL: the skill node's).
fn edit_entry(seq: u64, item: Option<u32>, entry: u32, set: &str) -> String {
    let item = item.map_or("item_index IS NULL".to_string(), |i| {
        format!("item_index = {i}")
    });
    format!("UPDATE journal SET {set} WHERE seq = {seq} AND {item} AND entry_index = {entry}")
}

async fn exec(url: &str, sql: &str) {
    use sqlx::Connection;
    if url.starts_with("sqlite:") {
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    } else {
        let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    }
}

async fn an_edited_journal_entry_is_a_divergence_naming_the_step(db: Db) {
    let scenario = KvScenario::new();
    let run_id = scenario.run(&db.store).await.run_id;

    // Item 1's answer changed by hand: its row no longer matches its digest.
    exec(
        &db.url,
        &edit_entry(2, Some(1), 0, r#"response = '{"ok":"OQ=="}'"#),
    )
    .await;
    let report = replay_from_store(&db.reopen().await, &run_id)
        .await
        .unwrap();
    assert_eq!(report.diverged_at, Some(2), "{report:#?}");
    let step = &report.steps[1];
    assert_eq!(
        (step.node.as_str(), step.status),
        ("read_many", StepStatus::Diverged)
    );
    let difference = &step.differences[0];
    assert_eq!(difference.what, "journal");
    let call = difference.call.as_ref().unwrap();
    assert_eq!(
        (call.capability.as_str(), call.entry, call.item),
        ("kv", 0, Some(1))
    );
    assert!(
        difference.detail.contains("changed after it was committed"),
        "{difference}"
    );

    // The same edit by someone who also recomputed the row's digest: the
    // skill gets the edited answer, and its output tells.
    let store = db.reopen().await;
    let mut rows = store.journal_rows(&run_id).await.unwrap();
    let row = rows
        .iter_mut()
        .find(|r| r.entry.seq == 2 && r.entry.item == Some(1) && r.entry.entry == 0)
        .unwrap();
    let digest = row.entry.digest(&run_id);
    exec(
        &db.url,
        &edit_entry(2, Some(1), 0, &format!("digest = '{digest}'")),
    )
    .await;
    let report = replay_from_store(&db.reopen().await, &run_id)
        .await
        .unwrap();
    assert_eq!(report.diverged_at, Some(2), "{report:#?}");
    let whats: Vec<&str> = report.steps[1]
        .differences
        .iter()
        .map(|d| d.what.as_str())
        .collect();
    assert_eq!(whats, ["output", "state"], "{report:#?}");
    assert!(
        report.steps[1].differences[1]
            .detail
            .contains("fields that differ: `readings`"),
        "{report:#?}"
    );
    // The steps before it are the same.
    assert_eq!(report.steps[0].status, StepStatus::Same);

    // A request changed (and re-digested): the skill asks for `b`, the
    // journal now says it asked for `z`.
    let db2 = Db::sqlite().await;
    let run_id = scenario.run(&db2.store).await.run_id;
    let mut rows = db2.store.journal_rows(&run_id).await.unwrap();
    let row = &mut rows[0];
    row.entry.request = json!({"op": "get", "key": "other"});
    let set = format!(
        "request = '{}', request_digest = '{}', digest = '{}'",
        row.entry.request,
        row.entry.request_digest(),
        row.entry.digest(&run_id)
    );
    exec(&db2.url, &edit_entry(1, None, 0, &set)).await;
    let report = replay_from_store(&db2.reopen().await, &run_id)
        .await
        .unwrap();
    assert_eq!(report.diverged_at, Some(1));
    let difference = &report.steps[0].differences[0];
    let call = difference.call.as_ref().unwrap();
    assert_eq!(
        (call.capability.as_str(), call.entry, call.item),
        ("kv", 0, None)
    );
    assert!(
        difference
            .detail
            .contains(r#"the skill asked {"key":"greeting"}"#),
        "{difference}"
    );
}

#[tokio::test]
async fn an_edited_journal_entry_is_a_divergence_naming_the_step_on_sqlite() {
    an_edited_journal_entry_is_a_divergence_naming_the_step(Db::sqlite().await).await;
}

#[tokio::test]
async fn an_edited_journal_entry_is_a_divergence_naming_the_step_on_postgres() {
    an_edited_journal_entry_is_a_divergence_naming_the_step(Db::postgres().await).await;
}

/// An export written to a file replays from a fresh directory with no
/// database: the scenario from its text, the component by its digest from
/// the directory next to it. Without the component, the error lists its
/// alias, its digest and every place looked.
#[tokio::test]
async fn an_export_replays_in_a_fresh_directory_without_a_database() {
    let scenario = KvScenario::new();
    let db = Db::sqlite().await;
    let run_id = scenario.run(&db.store).await.run_id;
    let export = RunExport::from_store(&db.store, &run_id).await.unwrap();
    let fresh = tempfile::tempdir().unwrap();
    let file = fresh.path().join("run.json");
    std::fs::write(&file, export.to_json()).unwrap();
    let written = export.write_components(fresh.path()).unwrap();
    assert_eq!(written.len(), 1);
    drop(db);
    drop(scenario);

    let read = RunExport::read(&file).unwrap();
    assert_eq!(read, export);
    let search = ComponentSearch {
        dirs: vec![fresh.path().to_path_buf()],
        ..ComponentSearch::default()
    };
    let loaded = load_exported(&read, runtime(), Some(fresh.path()), &search).unwrap();
    let report = replay(&read, &loaded, &mut |_| {}).await.unwrap();
    assert_eq!(report.diverged_at, None, "{report:#?}");
    assert_eq!(report.steps.len(), 2);

    std::fs::remove_file(&written[0]).unwrap();
    let error = load_exported(&read, runtime(), Some(fresh.path()), &search).unwrap_err();
    let message = error.to_string();
    let digest = &read.components["probe"].digest;
    assert!(
        message.contains(&format!("skill `probe` (sha256 {digest}")),
        "{message}"
    );
    assert!(
        message.contains(&format!("{}.wasm (no such file)", digest)),
        "{message}"
    );
    assert!(
        message.contains("kv-probe.wasm (no such file)"),
        "{message}"
    );
    assert!(!error.is_environment());

    // An edited file: a changed response is the step's divergence.
    let mut edited = read.clone();
    edited.journal[0].entry.response = json!({"ok": "aGk="});
    std::fs::write(&written[0], skillhost_tests::fixture_component("kv-probe")).unwrap();
    let report = replay(&edited, &loaded, &mut |_| {}).await.unwrap();
    assert_eq!(report.diverged_at, Some(1));
}

/// A run that is not finished, or whose component changed since, is not
/// replayed; nothing is written either way.
#[tokio::test]
async fn only_a_finished_run_with_its_own_components_is_replayed() {
    let scenario = KvScenario::new();
    let db = Db::sqlite().await;
    let run_id = scenario.run(&db.store).await.run_id;
    // Another component under the recorded name.
    std::fs::write(
        scenario.dir.path().join("kv-probe.wasm"),
        skillhost_tests::fixture_component("own-error"),
    )
    .unwrap();
    let error = replay_from_store(&db.store, &run_id).await.unwrap_err();
    assert!(
        matches!(error, ReplayError::ComponentsMissing { .. }),
        "{error}"
    );
    let message = error.to_string();
    assert!(message.contains("another component"), "{message}");

    let mut export = RunExport::from_store(&db.store, &run_id).await.unwrap();
    export.run.status = RunStatus::Running;
    let loaded = load(&e2e_scenario("loop"));
    let error = replay(&export, &loaded, &mut |_| {}).await.unwrap_err();
    assert!(matches!(error, ReplayError::NotFinished { .. }), "{error}");
    assert!(error.to_string().contains("only a finished run"), "{error}");
}

/// A map node's items replay from their own journals; the research run
/// (six skills, fs reads, a citation check) replays clean.
#[tokio::test]
async fn the_research_run_replays_clean() {
    let path = skillhost_tests::repo_root().join("examples/research/scenario.toml");
    let loaded = load(&path);
    let db = Db::sqlite().await;
    let outcome = crate::run(
        Some(db.store.clone()),
        &loaded,
        json!({"query": "retrieval augmented generation"}),
    )
    .await;
    completed(&outcome);
    let report = replay_from_store(&db.store, &outcome.outcome.run_id)
        .await
        .unwrap();
    assert_eq!(report.diverged_at, None, "{report:#?}");
    assert_eq!(report.steps.len() as u64, outcome.outcome.last_seq);
    assert!(report.steps.iter().all(|s| s.status == StepStatus::Same));
}

fn lengths(outcome: &RunOutcome) -> Value {
    outcome.state.get("lengths").cloned().unwrap_or(Value::Null)
}

/// Forking a run at a middle checkpoint: its state there with a field
/// replaced, its next node and its visit counts (so `max_visits` still
/// counts the visits before the fork); where it came from is recorded.
#[tokio::test]
async fn a_fork_starts_from_a_middle_checkpoint_with_its_visit_counts() {
    let loaded = load(&e2e_scenario("loop"));
    let db = Db::sqlite().await;
    let original = crate::run(Some(db.store.clone()), &loaded, json!({})).await;
    completed(&original);
    assert_eq!(lengths(&original.outcome), json!([1, 2, 3]));
    let engine = Engine::new(Some(db.store.clone()), Arc::new(NoEvents));
    let from = &original.outcome.run_id;

    // At 2 (`enough` ran once, `bump` is next, lengths [1]).
    let fork = engine
        .fork(&loaded, from, 2, &[("lengths".into(), json!([5, 6]))])
        .await
        .unwrap();
    assert_eq!(fork.status, RunStatus::Completed);
    assert_eq!(lengths(&fork), json!([5, 6, 3]));
    let row = db.store.run(&fork.run_id).await.unwrap().unwrap();
    let origin = row.provenance.unwrap().forked_from.unwrap();
    assert_eq!((origin.run_id.as_str(), origin.seq), (from.as_str(), 2));
    let start = db.store.state_at(&fork.run_id, 0).await.unwrap().unwrap();
    assert_eq!(start.next_nodes, ["bump"]);
    assert_eq!(
        start.visits,
        BTreeMap::from([("bump".into(), 1), ("enough".into(), 1)])
    );
    // A fork replays like any run.
    let report = replay_from_store(&db.store, &fork.run_id).await.unwrap();
    assert_eq!(report.diverged_at, None, "{report:#?}");

    // At 4 (`bump` visited twice) with lengths emptied: three more visits
    // would be needed, and `bump` allows four in all.
    let fork = engine
        .fork(&loaded, from, 4, &[("lengths".into(), json!([]))])
        .await
        .unwrap();
    assert_eq!(fork.status, RunStatus::Failed);
    let errors = fork.state.get("errors").unwrap();
    assert_eq!(errors[0]["code"], json!("max-visits-exceeded"), "{errors}");
}

/// A seq that does not exist, a field that is not declared, a value that
/// does not fit its field: refused before anything is written.
#[tokio::test]
async fn a_fork_that_does_not_fit_writes_nothing() {
    let loaded = load(&e2e_scenario("loop"));
    let db = Db::sqlite().await;
    let original = crate::run(Some(db.store.clone()), &loaded, json!({})).await;
    let engine = Engine::new(Some(db.store.clone()), Arc::new(NoEvents));
    let from = &original.outcome.run_id;
    let refused = [
        engine.fork(&loaded, from, 99, &[]).await.unwrap_err(),
        engine
            .fork(&loaded, from, 2, &[("nope".into(), json!(1))])
            .await
            .unwrap_err(),
        engine
            .fork(&loaded, from, 2, &[("lengths".into(), json!("three"))])
            .await
            .unwrap_err(),
        engine.fork(&loaded, "missing", 1, &[]).await.unwrap_err(),
    ];
    let messages: Vec<String> = refused.iter().map(ToString::to_string).collect();
    assert!(matches!(
        refused[0],
        EngineError::NoSuchCheckpoint {
            seq: 99,
            last: 6,
            ..
        }
    ));
    assert!(
        messages[1].contains("--set nope: state field `nope` is not declared"),
        "{}",
        messages[1]
    );
    assert!(messages[2].starts_with("--set lengths:"), "{}", messages[2]);
    assert!(matches!(refused[3], EngineError::UnknownRun(_)));
    assert_eq!(db.store.list_runs(None, 10).await.unwrap().len(), 1);

    // A scenario that is not the one the run used.
    let other = load(&e2e_scenario("pipeline"));
    let error = engine.fork(&other, from, 1, &[]).await.unwrap_err();
    assert!(
        matches!(error, EngineError::ScenarioChanged { .. }),
        "{error}"
    );
}

/// A run killed inside its map node, after some items finished, resumes
/// reusing them: their journals come back from their map item rows, so the
/// node's commit holds every item's calls and the run replays clean.
#[tokio::test]
async fn a_map_node_resumed_after_a_crash_keeps_every_items_journal() {
    let scenario = KvScenario::new();
    let db = Db::sqlite().await;
    let reference = scenario.run(&db.store).await;
    let loaded = Arc::new(scenario.loaded_with_kv());
    let run_id = crate::crash(&db.url, &loaded, json!({ "key": "greeting" }), |event| {
        matches!(
            event,
            skillhost_engine::Event::MapItemFinished { reused: false, .. }
        )
    })
    .await;
    let items = db.store.map_items(&run_id, "read_many", 1).await.unwrap();
    assert!(!items.is_empty() && items.len() < 3, "{items:?}");
    let resumed = crate::resume(db.reopen().await, &loaded, &run_id)
        .await
        .unwrap();
    completed(&resumed);
    assert_eq!(resumed.outcome.state, reference.state);
    let journal = db.store.journal(&run_id).await.unwrap();
    let items: Vec<(u64, Option<u32>, u32)> =
        journal.iter().map(|e| (e.seq, e.item, e.entry)).collect();
    assert_eq!(
        items,
        [
            (1, None, 0),
            (1, None, 1),
            (2, Some(0), 0),
            (2, Some(0), 1),
            (2, Some(1), 0),
            (2, Some(1), 1),
            (2, Some(2), 0),
            (2, Some(2), 1)
        ]
    );
    let report = replay_from_store(&db.store, &run_id).await.unwrap();
    assert_eq!(report.diverged_at, None, "{report:#?}");
}
