//! Approval nodes and cancels through the library: a run waits at an
//! approval node's boundary holding no lease, an answer that fits is
//! recorded once and the run continues from that boundary (nothing before
//! it runs again, its writes and edges see the answer), a wait times out to
//! `on_timeout`, and a cancel ends a waiting run at once and a running one
//! at its next node boundary. On SQLite and Postgres.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use skillhost_engine::lease::{self, RunLease};
use skillhost_engine::{
    CollectEvents, Continued, Engine, EngineError, Event, EventSink, Remedy, RunOutcome, RunService,
};
use skillhost_scenario::LoadedScenario;
use skillhost_store::{Cancelled, RunStatus, Store};

use crate::{Db, e2e_scenario, event_trail, load, resume, run, scenario};

fn approval() -> Arc<LoadedScenario> {
    load(&e2e_scenario("approval"))
}

/// Starts the approval scenario on `db`: it waits at `approve`.
async fn waiting(db: &Db) -> RunOutcome {
    let ran = run(Some(db.store.clone()), &approval(), json!({})).await;
    assert_eq!(ran.outcome.status, RunStatus::Waiting, "{:?}", ran.outcome);
    assert!(
        event_trail(&ran.events).contains(&"run_waiting:approve".to_string()),
        "{:?}",
        ran.events
    );
    ran.outcome
}

/// Answers run `run_id` from another handle, as `host runs answer` would.
async fn answer(db: &Db, run_id: &str, data: Value, by: &str) -> Result<(), EngineError> {
    let engine = Engine::new(Some(db.reopen().await), Arc::new(CollectEvents::default()));
    engine.answer(run_id, data, by).await.map(drop)
}

async fn waits_then_continues_from_its_boundary(db: Db) {
    let outcome = waiting(&db).await;
    let run_id = outcome.run_id.clone();
    let wait = outcome.waiting.expect("where it waits");
    assert_eq!(
        (wait.node_id.as_str(), wait.seq, wait.prompt.as_str()),
        ("approve", 1, "Run deploy (12 bytes)?")
    );
    assert_eq!(wait.deadline_ms, None);
    let row = db.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Waiting);
    assert_eq!(
        (row.lease_owner, row.last_seq),
        (None, 1),
        "no lease while it waits"
    );

    answer(&db, &run_id, json!({"approved": true}), "alice")
        .await
        .unwrap();
    let row = db.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(
        row.status,
        RunStatus::Queued,
        "an answered run is queued again"
    );
    let waits = db.store.waits(&run_id).await.unwrap();
    assert_eq!(waits.len(), 1);
    assert_eq!(
        waits[0].answer,
        Some(json!({"approved": true, "comment": ""})),
        "defaults are filled in"
    );
    assert_eq!(waits[0].answered_by.as_deref(), Some("alice"));
    assert!(waits[0].answered_at_ms.is_some());

    // Another process continues it: only what follows the boundary runs.
    let resumed = resume(db.reopen().await, &approval(), &run_id)
        .await
        .unwrap();
    assert_eq!(resumed.outcome.status, RunStatus::Completed);
    assert_eq!(resumed.state()["approved"], json!(true));
    assert_eq!(resumed.state()["outcome"], json!("executed deploy"));
    assert_eq!(
        db.attempts(&run_id).await,
        [
            ("prepare".to_string(), 1, "ok".to_string()),
            ("approve".to_string(), 1, "ok".to_string()),
            ("execute".to_string(), 1, "ok".to_string()),
        ],
        "nothing before the approval ran again"
    );
    let steps = db.steps(&run_id).await;
    let detail = steps[1].detail.as_ref().expect("the approval's detail");
    assert_eq!(detail["approval"]["answered_by"], json!("alice"));
}

#[tokio::test]
async fn an_approval_waits_and_the_answer_continues_it_from_its_boundary_sqlite() {
    waits_then_continues_from_its_boundary(Db::sqlite().await).await;
}

#[tokio::test]
async fn an_approval_waits_and_the_answer_continues_it_from_its_boundary_postgres() {
    waits_then_continues_from_its_boundary(Db::postgres().await).await;
}

#[tokio::test]
async fn the_edges_after_an_approval_see_the_answer() {
    let db = Db::sqlite().await;
    let run_id = waiting(&db).await.run_id;
    answer(
        &db,
        &run_id,
        json!({"approved": false, "comment": "not on a Friday"}),
        "bob",
    )
    .await
    .unwrap();
    let resumed = resume(db.reopen().await, &approval(), &run_id)
        .await
        .unwrap();
    assert_eq!(
        resumed.state()["outcome"],
        json!("declined: not on a Friday")
    );
}

#[tokio::test]
async fn an_answer_that_does_not_fit_is_refused_and_nothing_is_written() {
    let db = Db::sqlite().await;
    let run_id = waiting(&db).await.run_id;
    for bad in [
        json!({"approved": "yes"}),
        json!({"comment": "no verdict"}),
        json!({"approved": true, "extra": 1}),
        json!(true),
    ] {
        let refused = answer(&db, &run_id, bad.clone(), "mallory").await;
        let Err(EngineError::InvalidAnswer { node, message, .. }) = &refused else {
            panic!("{bad} was not refused as not fitting: {refused:?}");
        };
        assert_eq!(node, "approve");
        assert!(!message.is_empty());
        let text = refused.unwrap_err().to_string();
        assert!(text.contains("still waiting"), "{text}");
        assert!(text.contains("`approved` (boolean, required)"), "{text}");
    }
    let row = db.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Waiting);
    let waits = db.store.waits(&run_id).await.unwrap();
    assert_eq!(waits[0].answer, None);
}

#[tokio::test]
async fn answering_twice_or_a_run_that_does_not_wait_is_refused() {
    let db = Db::sqlite().await;
    let run_id = waiting(&db).await.run_id;
    answer(&db, &run_id, json!({"approved": true}), "alice")
        .await
        .unwrap();
    let twice = answer(&db, &run_id, json!({"approved": false}), "bob").await;
    let Err(EngineError::AlreadyAnswered { by, status, .. }) = &twice else {
        panic!("a second answer was not refused: {twice:?}");
    };
    assert_eq!((by.as_str(), status.as_str()), ("alice", "queued"));
    let waits = db.store.waits(&run_id).await.unwrap();
    assert_eq!(waits[0].answered_by.as_deref(), Some("alice"));

    // A run that never waited.
    let loaded = load(&e2e_scenario("pipeline"));
    let other = run(
        Some(db.store.clone()),
        &loaded,
        json!({"message": "m", "items": ["a"]}),
    )
    .await;
    let refused = answer(&db, &other.outcome.run_id, json!({}), "alice").await;
    assert!(
        matches!(&refused, Err(EngineError::NotWaiting { status, .. }) if status == "completed"),
        "{refused:?}"
    );
    let unknown = answer(&db, "no-such-run", json!({}), "alice").await;
    assert!(
        matches!(unknown, Err(EngineError::UnknownRun(_))),
        "{unknown:?}"
    );
}

#[tokio::test]
async fn a_waiting_run_is_not_resumed_until_it_is_answered() {
    let db = Db::sqlite().await;
    let run_id = waiting(&db).await.run_id;
    let refused = resume(db.reopen().await, &approval(), &run_id).await;
    let Err(e @ EngineError::Waiting { .. }) = refused else {
        panic!(
            "a waiting run was resumed: {:?}",
            refused.map(|r| r.outcome)
        );
    };
    // It says to answer it (or cancel it), typed for each face to name
    // its own way (the `host runs answer` command: `cli::failures`' tests).
    assert!(e.to_string().contains("answer it, or cancel it"), "{e}");
    assert_eq!(
        e.remedies(),
        vec![
            Remedy::AnswerRun {
                run: run_id.clone()
            },
            Remedy::CancelRun {
                run: run_id.clone()
            }
        ]
    );
    assert_eq!(db.attempts(&run_id).await.len(), 1);
}

/// Two faces continue the same answered run (an MCP client's `run_answer`
/// and a `host resume`, or a web page's answer and a worker): the lease
/// decides. While one holds it the other is told who
/// ([`Continued::HeldBy`]) and runs nothing; after the run ended a late
/// continue is refused (the store leases no finished run). Racing, exactly one of them runs it:
/// its nodes run once.
async fn a_second_continue_is_told_who_holds_the_run(db: Db) {
    let run_id = waiting(&db).await.run_id;
    answer(&db, &run_id, json!({"approved": true}), "alice")
        .await
        .unwrap();
    let store = db.reopen().await;
    let service = RunService::new(store.clone(), Arc::new(CollectEvents::default()));
    // Another face's continue, mid-run: it holds the run's lease.
    let held = RunLease::acquire(&store, &run_id, "cli-resume-1", lease::DEFAULT_TTL)
        .await
        .unwrap();
    let second = service
        .continue_run(&approval(), &run_id, "mcp", false)
        .await
        .unwrap();
    let Continued::HeldBy { owner, message } = second else {
        panic!("it ran beside the lease's holder: {second:?}");
    };
    assert_eq!(owner, "cli-resume-1");
    assert!(
        message.contains("is being run by `cli-resume-1`"),
        "{message}"
    );
    assert_eq!(db.attempts(&run_id).await.len(), 1, "nothing ran");
    let row = db.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(row.lease_owner.as_deref(), Some("cli-resume-1"));
    assert!(held.release().await.unwrap());

    let first = service
        .continue_run(&approval(), &run_id, "mcp", false)
        .await
        .unwrap();
    let Continued::Ran(outcome) = first else {
        panic!("the lease was given back: {first:?}");
    };
    assert_eq!(outcome.status, RunStatus::Completed);
    let steps = db.attempts(&run_id).await;
    let late = service
        .continue_run(&approval(), &run_id, "mcp", false)
        .await;
    // The store refuses a lease on a finished run.
    assert!(
        matches!(&late, Err(EngineError::Store(e)) if e.is_conflict()),
        "{late:?}"
    );
    assert_eq!(db.attempts(&run_id).await, steps, "nothing ran again");

    // Two continues at once, through two handles.
    let run_id = waiting(&db).await.run_id;
    answer(&db, &run_id, json!({"approved": true}), "alice")
        .await
        .unwrap();
    let other = RunService::new(db.reopen().await, Arc::new(CollectEvents::default()));
    let loaded = approval();
    let (a, b) = tokio::join!(
        service.continue_run(&loaded, &run_id, "mcp", false),
        other.continue_run(&loaded, &run_id, "serve", false),
    );
    let ran = [&a, &b]
        .iter()
        .filter(|c| matches!(c, Ok(Continued::Ran(_))))
        .count();
    assert_eq!(ran, 1, "{a:?} / {b:?}");
    for c in [&a, &b] {
        assert!(
            matches!(c, Ok(Continued::Ran(_)) | Ok(Continued::HeldBy { .. }))
                || matches!(c, Err(EngineError::Store(e)) if e.is_conflict()),
            "{c:?}"
        );
    }
    assert_eq!(
        db.attempts(&run_id).await,
        steps,
        "the raced run's steps are those of a run continued once"
    );
}

#[tokio::test]
async fn a_second_continue_is_told_who_holds_the_run_sqlite() {
    a_second_continue_is_told_who_holds_the_run(Db::sqlite().await).await;
}

#[tokio::test]
async fn a_second_continue_is_told_who_holds_the_run_postgres() {
    a_second_continue_is_told_who_holds_the_run(Db::postgres().await).await;
}

#[tokio::test]
async fn an_approval_without_a_database_fails_the_node() {
    let ran = run(None, &approval(), json!({})).await;
    assert_eq!(ran.outcome.status, RunStatus::Failed);
    assert_eq!(ran.last_error()["code"], json!("approval-needs-database"));
}

async fn times_out_to_on_timeout(db: Db) {
    let loaded = load(&scenario("approval_timeout"));
    let ran = run(Some(db.store.clone()), &loaded, json!({})).await;
    let run_id = ran.outcome.run_id.clone();
    assert_eq!(ran.outcome.status, RunStatus::Waiting);
    assert!(ran.outcome.waiting.unwrap().deadline_ms.is_some());
    // Before its deadline a worker does not take it.
    let owner = "test-worker";
    assert!(
        db.store
            .claim_run(owner, Duration::from_secs(30))
            .await
            .unwrap()
            .is_none()
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let late = answer(&db, &run_id, json!({"go": true}), "alice").await;
    assert!(
        matches!(late, Err(EngineError::WaitTimedOut { .. })),
        "{late:?}"
    );
    // A worker claims the timed-out wait and runs it on to `on_timeout`.
    let (claimed, lease) = db
        .store
        .claim_run(owner, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the timed-out wait is claimable");
    assert_eq!(claimed.id, run_id);
    let resumed = resume(db.store.fenced(lease), &loaded, &run_id)
        .await
        .unwrap();
    assert_eq!(resumed.outcome.status, RunStatus::Completed);
    assert_eq!(resumed.state()["outcome"], json!("nobody answered"));
    let steps = db.steps(&run_id).await;
    assert_eq!(steps[0].node_id, "ask");
    assert!(steps[0].detail.as_ref().unwrap()["approval"]["timed_out_at"].is_i64());
}

#[tokio::test]
async fn a_wait_that_times_out_takes_on_timeout_sqlite() {
    times_out_to_on_timeout(Db::sqlite().await).await;
}

#[tokio::test]
async fn a_wait_that_times_out_takes_on_timeout_postgres() {
    times_out_to_on_timeout(Db::postgres().await).await;
}

#[tokio::test]
async fn a_waiting_run_is_cancelled_at_once_and_a_finished_one_is_refused() {
    let db = Db::sqlite().await;
    let run_id = waiting(&db).await.run_id;
    let engine = Engine::new(Some(db.reopen().await), Arc::new(CollectEvents::default()));
    assert_eq!(
        engine.cancel(&run_id, "carol").await.unwrap(),
        Cancelled::Now(RunStatus::Waiting)
    );
    let row = db.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(row.status, RunStatus::Cancelled);
    assert_eq!(row.error.as_ref().unwrap()["by"], json!("carol"));
    let again = engine.cancel(&run_id, "carol").await;
    assert!(
        matches!(&again, Err(EngineError::NothingToCancel { status, .. }) if status == "cancelled"),
        "{again:?}"
    );
    let answered = answer(&db, &run_id, json!({"approved": true}), "alice").await;
    assert!(
        matches!(answered, Err(EngineError::NotWaiting { .. })),
        "{answered:?}"
    );
}

/// Cancels the run, from another thread with its own store handle, when
/// the node named `at` starts: the run is running there, and its next
/// checkpoint is the boundary where it ends.
struct CancelWhenStarted {
    url: String,
    at: &'static str,
    events: CollectEvents,
}

impl EventSink for CancelWhenStarted {
    fn emit(&self, event: &Event) {
        self.events.emit(event);
        if let Event::NodeStarted { run_id, node, .. } = event
            && node == self.at
        {
            let (url, run_id) = (self.url.clone(), run_id.clone());
            let cancelled = std::thread::spawn(move || {
                tokio::runtime::Runtime::new().unwrap().block_on(async {
                    let store = Store::open(&url).await.unwrap();
                    let engine = Engine::new(Some(store), Arc::new(CollectEvents::default()));
                    engine.cancel(&run_id, "dave").await.unwrap()
                })
            })
            .join()
            .unwrap();
            assert_eq!(cancelled, Cancelled::Requested);
        }
    }
}

async fn a_running_run_ends_at_its_next_boundary(db: Db) {
    let sink = Arc::new(CancelWhenStarted {
        url: db.url.clone(),
        at: "prepare",
        events: CollectEvents::default(),
    });
    let outcome = Engine::new(Some(db.store.clone()), sink.clone())
        .start(&approval(), json!({}), None)
        .await
        .unwrap();
    assert_eq!(outcome.status, RunStatus::Cancelled);
    assert_eq!(
        outcome.failure.as_ref().unwrap()["code"],
        json!("cancelled")
    );
    let row = db.store.run(&outcome.run_id).await.unwrap().unwrap();
    assert_eq!((row.status, row.last_seq), (RunStatus::Cancelled, 0));
    assert!(
        db.steps(&outcome.run_id).await.is_empty(),
        "the node that ended when the cancel came was not committed"
    );
    assert_eq!(
        event_trail(&sink.events.events.lock().unwrap()),
        ["run_started", "node_started:prepare", "run_finished"]
    );
}

#[tokio::test]
async fn a_running_run_ends_at_its_next_boundary_sqlite() {
    a_running_run_ends_at_its_next_boundary(Db::sqlite().await).await;
}

#[tokio::test]
async fn a_running_run_ends_at_its_next_boundary_postgres() {
    a_running_run_ends_at_its_next_boundary(Db::postgres().await).await;
}

#[tokio::test]
async fn a_cancel_asked_for_while_nothing_ran_it_ends_the_run_when_it_is_resumed() {
    let db = Db::sqlite().await;
    let loaded = approval();
    let run_id = crate::crash(
        &db.url,
        &loaded,
        json!({}),
        |e| matches!(e, Event::CheckpointWritten { node, .. } if node == "prepare"),
    )
    .await;
    let engine = Engine::new(Some(db.reopen().await), Arc::new(CollectEvents::default()));
    assert_eq!(
        engine.cancel(&run_id, "erin").await.unwrap(),
        Cancelled::Requested
    );
    let resumed = resume(db.reopen().await, &loaded, &run_id).await.unwrap();
    assert_eq!(resumed.outcome.status, RunStatus::Cancelled);
    assert_eq!(resumed.outcome.nodes_run, 0);
    let row = db.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!((row.status, row.last_seq), (RunStatus::Cancelled, 1));
}
