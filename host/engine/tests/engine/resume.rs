//! Resuming from a checkpoint: a run that stopped anywhere (before a node,
//! after a commit, inside a map node, after a node ran but before its
//! commit) and is resumed ends with the state of an uninterrupted run,
//! every node's writes applied once; and the resumes the engine refuses,
//! each with its documented error.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use skillhost_engine::{Engine, EngineError, Event, NoEvents, Remedy};
use skillhost_scenario::LoadedScenario;
use skillhost_store::RunStatus;

use crate::{Db, Ran, completed, crash, e2e_scenario, failed, load, resume, run, scenario};

/// An uninterrupted run's end, to compare a resumed run with.
struct Reference {
    status: RunStatus,
    /// The final state as the store serializes it.
    state: String,
    /// The last checkpoint's state hash.
    hash: String,
    /// The failure report of a failed run.
    error: Option<Value>,
}

async fn reference(db: &Db, loaded: &LoadedScenario, input: &Value) -> Reference {
    let ran = run(Some(db.store.clone()), loaded, input.clone()).await;
    let row = db.store.run(&ran.outcome.run_id).await.unwrap().unwrap();
    let checkpoints = db.store.checkpoints(&ran.outcome.run_id).await.unwrap();
    Reference {
        status: ran.outcome.status,
        state: serde_json::to_string(&row.result.unwrap()).unwrap(),
        hash: checkpoints.last().unwrap().state_hash.clone(),
        error: row.error,
    }
}

/// Runs `loaded` on `db` until it crashes at `at`, resumes it with a new
/// store handle, and asserts it ends as an uninterrupted run does: status,
/// state, last state hash, failure report. Returns the run's id and what
/// the resume did.
async fn crash_and_resume(
    db: &Db,
    loaded: &Arc<LoadedScenario>,
    input: Value,
    at: impl Fn(&Event) -> bool + Send + Sync + 'static,
) -> (String, Ran) {
    let expected = reference(db, loaded, &input).await;
    let run_id = crash(&db.url, loaded, input, at).await;
    let row = db.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(
        row.status,
        RunStatus::Running,
        "a crashed run is unfinished"
    );

    let ran = resume(db.reopen().await, loaded, &run_id)
        .await
        .unwrap_or_else(|e| panic!("resume: {e}"));
    assert_eq!(ran.outcome.run_id, run_id);
    assert_eq!(ran.outcome.status, expected.status);
    assert!(
        matches!(&ran.events[0], Event::RunStarted { resumed: true, .. }),
        "{:?}",
        ran.events[0]
    );
    let row = db.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(row.status, expected.status);
    assert_eq!(row.error, expected.error);
    assert_eq!(ran.outcome.failure, expected.error);
    assert_eq!(
        serde_json::to_string(&row.result.unwrap()).unwrap(),
        expected.state,
        "a crashed and resumed run ended with another state than an uninterrupted one"
    );
    let checkpoints = db.store.checkpoints(&run_id).await.unwrap();
    assert_eq!(checkpoints.last().unwrap().state_hash, expected.hash);
    (run_id, ran)
}

/// The nodes with a successful step, in order.
async fn ok_nodes(db: &Db, run_id: &str) -> Vec<String> {
    db.attempts(run_id)
        .await
        .into_iter()
        .filter(|(_, _, status)| status == "ok")
        .map(|(node, _, _)| node)
        .collect()
}

fn started(node: &'static str) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::NodeStarted { node: n, .. } if n == node)
}

#[tokio::test]
async fn a_run_stopped_before_a_node_resumes_at_that_node() {
    let db = Db::sqlite().await;
    let loaded = load(&e2e_scenario("crash"));
    let (run_id, ran) = crash_and_resume(&db, &loaded, json!({}), started("second")).await;
    assert_eq!(
        ok_nodes(&db, &run_id).await,
        ["first", "second", "fan", "third"]
    );
    // This process ran only what was left.
    assert_eq!(ran.outcome.nodes_run, 3);
    assert_eq!(ran.outcome.last_seq, 4);
}

#[tokio::test]
async fn a_run_stopped_after_a_commit_resumes_at_the_next_node() {
    let db = Db::sqlite().await;
    let loaded = load(&e2e_scenario("crash"));
    let (run_id, ran) = crash_and_resume(
        &db,
        &loaded,
        json!({}),
        |e| matches!(e, Event::CheckpointWritten { node, .. } if node == "second"),
    )
    .await;
    assert_eq!(
        ok_nodes(&db, &run_id).await,
        ["first", "second", "fan", "third"]
    );
    assert_eq!(ran.outcome.nodes_run, 2);
}

#[tokio::test]
async fn a_map_node_stopped_midway_keeps_the_items_it_finished() {
    let db = Db::sqlite().await;
    let loaded = load(&e2e_scenario("crash"));
    // Each item is recorded before its event: the items whose event was
    // sent before the crash are the ones a resume must not run again.
    let before_crash = Arc::new(AtomicUsize::new(0));
    let counted = before_crash.clone();
    let (run_id, ran) = crash_and_resume(&db, &loaded, json!({}), move |e| match e {
        Event::MapItemFinished { index, .. } => {
            counted.fetch_add(1, Ordering::SeqCst);
            *index == 3
        }
        _ => false,
    })
    .await;
    assert_eq!(
        ok_nodes(&db, &run_id).await,
        ["first", "second", "fan", "third"]
    );
    let items: Vec<bool> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            Event::MapItemFinished { reused, .. } => Some(*reused),
            _ => None,
        })
        .collect();
    assert_eq!(items.len(), 6);
    let reused = items.iter().filter(|r| **r).count();
    assert_eq!(reused, before_crash.load(Ordering::SeqCst));
    assert!(reused >= 1);
}

#[tokio::test]
async fn a_map_node_stopped_after_its_last_item_runs_no_item_again() {
    let db = Db::sqlite().await;
    let loaded = load(&e2e_scenario("crash"));
    let seen = AtomicUsize::new(0);
    let (_, ran) = crash_and_resume(&db, &loaded, json!({}), move |e| {
        matches!(e, Event::MapItemFinished { .. }) && seen.fetch_add(1, Ordering::SeqCst) == 5
    })
    .await;
    let reused: Vec<bool> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            Event::MapItemFinished { reused, .. } => Some(*reused),
            _ => None,
        })
        .collect();
    assert_eq!(reused, [true; 6]);
}

#[tokio::test]
async fn a_map_node_in_a_cycle_reuses_only_the_items_of_its_current_visit() {
    let db = Db::sqlite().await;
    let loaded = load(&scenario("map_cycle"));
    // Stopped at the second item of the second visit.
    let seen = AtomicUsize::new(0);
    let (run_id, ran) = crash_and_resume(&db, &loaded, json!({}), move |e| {
        matches!(e, Event::MapItemFinished { .. }) && seen.fetch_add(1, Ordering::SeqCst) == 4
    })
    .await;
    completed(&ran);
    assert_eq!(
        ran.state()["rounds"],
        json!(["a0,b0,c0", "a1,b1,c1", "a2,b2,c2"])
    );
    let reused: Vec<(usize, bool)> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            Event::MapItemFinished { index, reused, .. } => Some((*index, *reused)),
            _ => None,
        })
        .collect();
    // The second visit keeps its first two items and runs its third; the
    // third visit runs all of its own.
    assert_eq!(
        reused,
        [
            (0, true),
            (1, true),
            (2, false),
            (0, false),
            (1, false),
            (2, false)
        ]
    );
    for visit in 1..=3u32 {
        let messages: Vec<Value> = db
            .store
            .map_items(&run_id, "fan", visit)
            .await
            .unwrap()
            .into_iter()
            .map(|row| row.output["message"].clone())
            .collect();
        let round = visit - 1;
        assert_eq!(
            messages,
            [
                json!(format!("a{round}")),
                json!(format!("b{round}")),
                json!(format!("c{round}"))
            ],
            "visit {visit}"
        );
    }
}

#[tokio::test]
async fn a_node_that_ran_but_did_not_commit_runs_again_once() {
    let db = Db::sqlite().await;
    let loaded = load(&e2e_scenario("rules"));
    // The warning is raised after the node ran, before its commit.
    let (run_id, ran) = crash_and_resume(&db, &loaded, json!({ "message": "ab" }), |e| {
        matches!(e, Event::RuleWarning { .. })
    })
    .await;
    assert_eq!(ok_nodes(&db, &run_id).await, ["one", "two"]);
    assert_eq!(ran.outcome.warnings.len(), 1, "{:?}", ran.outcome.warnings);
    assert_eq!(ran.state()["lengths"], json!([2, 6]));
}

#[tokio::test]
async fn a_resumed_cycle_keeps_counting_its_visits() {
    let db = Db::sqlite().await;
    let loaded = load(&e2e_scenario("loop"));
    // Stopped after the second visit of `bump`: the bound still counts the
    // visits before the crash.
    let (_, ran) = crash_and_resume(
        &db,
        &loaded,
        json!({ "limit": 10 }),
        |e| matches!(e, Event::CheckpointWritten { node, seq, .. } if node == "bump" && *seq == 3),
    )
    .await;
    failed(&ran);
    assert_eq!(ran.last_error()["code"], "max-visits-exceeded");
    assert_eq!(ran.state()["lengths"], json!([1, 2, 3, 4]));
}

#[tokio::test]
async fn a_run_stopped_after_its_failed_node_was_recorded_ends_as_it_would_have() {
    let db = Db::sqlite().await;
    // No failure handler: the checkpoint of the failure leads nowhere, and
    // the resume only ends the run, with the report the last error gives.
    let loaded = load(&e2e_scenario("rules"));
    let (run_id, ran) = crash_and_resume(
        &db,
        &loaded,
        json!({ "message": "abcd" }),
        |e| matches!(e, Event::CheckpointWritten { node, .. } if node == "two"),
    )
    .await;
    failed(&ran);
    assert_eq!(ran.outcome.nodes_run, 0);
    assert_eq!(ran.failure()["code"], "TOO_LONG");
    assert_eq!(db.attempts(&run_id).await.len(), 2);

    // With one, the resume goes on to the handler.
    let loaded = load(&e2e_scenario("failing"));
    let (_, ran) = crash_and_resume(
        &db,
        &loaded,
        json!({ "mode": "error" }),
        |e| matches!(e, Event::CheckpointWritten { node, .. } if node == "flaky"),
    )
    .await;
    failed(&ran);
    assert_eq!(ran.failure()["handler"], "handler");
    assert_eq!(ran.failure()["node"], "flaky");
}

#[tokio::test]
async fn a_finished_run_is_not_resumed() {
    let db = Db::sqlite().await;
    let loaded = load(&e2e_scenario("loop"));
    let done = run(Some(db.store.clone()), &loaded, json!({})).await;
    completed(&done);
    let id = done.outcome.run_id.clone();
    let err = resume(db.reopen().await, &loaded, &id).await.err().unwrap();
    assert!(
        matches!(&err, EngineError::RunFinished { id: i, status } if *i == id && status == "completed"),
        "{err:?}"
    );
    // What to do, in plain words and typed: each face says the remedies
    // its own way (the `host` commands: `cli::failures`' tests).
    assert_eq!(
        err.to_string(),
        format!(
            "run `{id}` is completed; only unfinished runs can be resumed. Start a new run, or \
             see this run's steps"
        )
    );
    assert_eq!(
        err.remedies(),
        vec![Remedy::StartRun, Remedy::ShowRun { run: id.clone() }]
    );

    let over = run(Some(db.store.clone()), &loaded, json!({ "limit": 10 })).await;
    failed(&over);
    let err = resume(db.reopen().await, &loaded, &over.outcome.run_id)
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, EngineError::RunFinished { status, .. } if status == "failed"),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_run_is_resumed_only_with_the_scenario_it_started_with() {
    let db = Db::sqlite().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loop.toml");
    let echo = skillhost_tests::dist("echo");
    let original = std::fs::read_to_string(e2e_scenario("loop"))
        .unwrap()
        .replace("../../../skills/dist/echo.wasm", echo.to_str().unwrap());
    std::fs::write(&path, &original).unwrap();
    let loaded = load(&path);
    let run_id = crash(&db.url, &loaded, json!({}), started("enough")).await;

    std::fs::write(&path, format!("{original}\n# edited\n")).unwrap();
    let changed = load(&path);
    let err = resume(db.reopen().await, &changed, &run_id)
        .await
        .err()
        .unwrap();
    let EngineError::ScenarioChanged {
        id,
        scenario,
        expected,
        found,
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(
        (id, scenario, expected, found),
        (
            &run_id,
            &"loop".to_string(),
            &loaded.scenario.digest,
            &changed.scenario.digest
        )
    );
    assert_eq!(
        err.to_string(),
        format!(
            "run `{run_id}` was started from scenario `loop` with digest {expected}, but the \
             file now has digest {found}; resume it with the scenario it started with, or \
             continue it with the changed scenario"
        )
    );
    assert_eq!(
        err.remedies(),
        vec![Remedy::ResumeChanged {
            run: run_id.clone()
        }]
    );
    // Refused without touching the run: with its own scenario it resumes.
    let ran = resume(db.reopen().await, &loaded, &run_id).await.unwrap();
    completed(&ran);
    assert_eq!(ran.state()["lengths"], json!([1, 2, 3]));
}

#[tokio::test]
async fn an_unknown_run_or_a_run_without_a_store_is_not_resumed() {
    let db = Db::sqlite().await;
    let loaded = load(&e2e_scenario("loop"));
    let err = resume(db.store.clone(), &loaded, "no-such-run")
        .await
        .err()
        .unwrap();
    assert!(
        matches!(&err, EngineError::UnknownRun(id) if id == "no-such-run"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "run `no-such-run` does not exist in this database; list runs"
    );
    assert_eq!(err.remedies(), vec![Remedy::ListRuns { waiting: false }]);

    let err = Engine::new(None, Arc::new(NoEvents))
        .resume(&loaded, "any-run")
        .await
        .err()
        .unwrap();
    assert!(matches!(err, EngineError::Internal { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "run `any-run`: resuming needs a database; --durability none keeps no checkpoints"
    );
}
