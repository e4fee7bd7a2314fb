//! The engine as a library, on real parts: the shipped skills
//! (`skills/dist/*.wasm`) and the WAT test fixtures, real SQLite files,
//! real Postgres where a test is about the store, and no store at all
//! (`--durability none`). One test binary, one module per area of what the
//! engine promises (see `src/lib.rs` and `src/run.rs`).
//!
//! The end-to-end tests (`tests/e2e/`) keep what is about the `host`
//! binary: flags, exit codes, output formats, the history commands, and
//! crashes at failpoints. A crash here is a task that dies at an event
//! ([`CrashAt`]), which stops the run between two of its awaits just as a
//! killed process would, without leaving the test process.
//!
//! Scenario files: those of `tests/e2e/engine/` where they fit (by path,
//! never copied), and `scenarios/` next to this file for the rest.

mod ahead;
mod approval;
mod artifacts;
mod boundaries;
mod budgets;
mod cache;
mod codes;
mod events;
mod failures;
mod integrity;
mod journal;
mod kinds;
mod kv;
mod llm;
mod map;
mod metrics;
mod postgres;
mod replay;
mod resume;
mod routing;
mod rules;
mod subgraph;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::Value;
use skillhost_engine::{CollectEvents, Engine, EngineError, Event, EventSink, RunOutcome};
use skillhost_runtime::Runtime;
use skillhost_scenario::LoadedScenario;
use skillhost_store::{RunStatus, StepRow, Store};

/// One runtime for the whole binary, with the component cache the tests
/// share, so every component compiles once however many tests load it.
fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| skillhost_tests::runtime(skillhost_tests::shared_component_cache()))
}

/// A scenario of the end-to-end tests, `tests/e2e/engine/<name>.toml`.
pub fn e2e_scenario(name: &str) -> PathBuf {
    skillhost_tests::repo_root()
        .join("tests/e2e/engine")
        .join(format!("{name}.toml"))
}

/// A scenario of these tests, `scenarios/<name>.toml`.
pub fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/engine/scenarios")
        .join(format!("{name}.toml"))
}

/// Loads and checks the scenario at `path`; a scenario that does not pass
/// the checker is a broken test.
pub fn load(path: &Path) -> Arc<LoadedScenario> {
    let loaded = skillhost_scenario::load(path, runtime())
        .unwrap_or_else(|report| panic!("{} does not load:\n{report}", path.display()));
    Arc::new(loaded)
}

/// A database for one test, and the store open on it.
pub struct Db {
    pub url: String,
    pub store: Store,
    _dir: Option<tempfile::TempDir>,
}

impl Db {
    /// A fresh SQLite file in its own directory.
    pub async fn sqlite() -> Db {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("runs.db").display());
        let store = Store::open(&url).await.expect("open SQLite");
        Db {
            url,
            store,
            _dir: Some(dir),
        }
    }

    /// A fresh database on this binary's throwaway Postgres server.
    pub async fn postgres() -> Db {
        let url = skillhost_tests::pg::fresh_database().await;
        let store = Store::open(&url).await.expect("open Postgres");
        Db {
            url,
            store,
            _dir: None,
        }
    }

    /// A second handle on the same database, as another process would open.
    pub async fn reopen(&self) -> Store {
        Store::open(&self.url).await.expect("reopen the store")
    }

    pub async fn steps(&self, run_id: &str) -> Vec<StepRow> {
        self.store.steps(run_id).await.unwrap()
    }

    /// `(node, attempt, status)` of every step row of the run, in order.
    pub async fn attempts(&self, run_id: &str) -> Vec<(String, u32, String)> {
        self.steps(run_id)
            .await
            .into_iter()
            .map(|s| (s.node_id, s.attempt, s.status.to_string()))
            .collect()
    }
}

/// A finished run and every event it sent.
pub struct Ran {
    pub outcome: RunOutcome,
    pub events: Vec<Event>,
}

impl Ran {
    /// The run's state as JSON.
    pub fn state(&self) -> Value {
        self.outcome.state.to_value()
    }

    pub fn failure(&self) -> &Value {
        self.outcome
            .failure
            .as_ref()
            .unwrap_or_else(|| panic!("the run has no failure report: {:?}", self.outcome))
    }

    /// The run's last entry in `state.errors`.
    pub fn last_error(&self) -> Value {
        let state = self.state();
        state["errors"]
            .as_array()
            .and_then(|e| e.last())
            .cloned()
            .unwrap_or_else(|| panic!("no error recorded in {state}"))
    }
}

/// Starts a run of `loaded` on `store` (`None`: no durability) and runs it
/// to its end.
pub async fn start(
    store: Option<Store>,
    loaded: &LoadedScenario,
    input: Value,
) -> Result<Ran, EngineError> {
    let events = Arc::new(CollectEvents::default());
    // The runtime's kv, whose backend these tests fill with what their
    // skills read (`kv.rs` tests the store's, an engine's default).
    let engine = Engine::new(store, events.clone()).with_runtime_kv();
    let outcome = engine.start(loaded, input, None).await?;
    let events = events.events.lock().unwrap().clone();
    Ok(Ran { outcome, events })
}

/// [`start`] for a run that must start.
pub async fn run(store: Option<Store>, loaded: &LoadedScenario, input: Value) -> Ran {
    start(store, loaded, input)
        .await
        .unwrap_or_else(|e| panic!("the run did not start: {e}"))
}

/// Runs `loaded` on a fresh SQLite file and again with no store, asserts
/// both runs end the same way with the same state, and returns the durable
/// one with its database: what a node does must not depend on durability.
pub async fn run_both(loaded: &LoadedScenario, input: Value) -> (Ran, Db) {
    let db = Db::sqlite().await;
    let durable = run(Some(db.store.clone()), loaded, input.clone()).await;
    let memory = run(None, loaded, input).await;
    assert_eq!(
        (memory.outcome.status, memory.state()),
        (durable.outcome.status, durable.state()),
        "the same run with and without a store ended differently"
    );
    assert_eq!(memory.outcome.failure, durable.outcome.failure);
    assert_eq!(memory.outcome.warnings, durable.outcome.warnings);
    assert_eq!(memory.outcome.summary, durable.outcome.summary);
    assert_eq!(memory.outcome.artifacts, durable.outcome.artifacts);
    assert_eq!(memory.outcome.nodes_run, durable.outcome.nodes_run);
    assert_eq!(memory.outcome.last_seq, durable.outcome.last_seq);
    // Only a durable run writes checkpoints.
    assert!(
        !memory
            .events
            .iter()
            .any(|e| matches!(e, Event::CheckpointWritten { .. })),
        "{:?}",
        memory.events
    );
    (durable, db)
}

/// Asserts the run completed.
pub fn completed(ran: &Ran) {
    assert_eq!(
        ran.outcome.status,
        RunStatus::Completed,
        "the run did not complete: {:?}",
        ran.outcome.failure
    );
}

/// Asserts the run failed.
pub fn failed(ran: &Ran) {
    assert_eq!(
        ran.outcome.status,
        RunStatus::Failed,
        "the run did not fail: {}",
        ran.state()
    );
}

/// An event sink that records every event and panics at the first one
/// `at` matches. Run in a task of its own, the run stops right there, as
/// it would if its process were killed: what it committed is in the store,
/// nothing after it is, and the run is still `running`.
pub struct CrashAt {
    events: Mutex<Vec<Event>>,
    at: Box<dyn Fn(&Event) -> bool + Send + Sync>,
}

impl CrashAt {
    pub fn new(at: impl Fn(&Event) -> bool + Send + Sync + 'static) -> Arc<CrashAt> {
        Arc::new(CrashAt {
            events: Mutex::new(Vec::new()),
            at: Box::new(at),
        })
    }
}

impl EventSink for CrashAt {
    fn emit(&self, event: &Event) {
        // The lock is released before the panic, so the events stay readable.
        self.events.lock().unwrap().push(event.clone());
        if (self.at)(event) {
            panic!("simulated crash at {event:?}");
        }
    }
}

/// Starts a run of `loaded` on the database at `url` that crashes at the
/// first event `at` matches; returns the run's id.
pub async fn crash(
    url: &str,
    loaded: &Arc<LoadedScenario>,
    input: Value,
    at: impl Fn(&Event) -> bool + Send + Sync + 'static,
) -> String {
    let store = Store::open(url).await.unwrap();
    let sink = CrashAt::new(at);
    let run_id = skillhost_store::new_run_id();
    let task = tokio::spawn({
        let (loaded, run_id, sink) = (loaded.clone(), run_id.clone(), sink.clone());
        async move {
            // Each node waits for the sync of the commit before it, so that
            // an event is sent where the engine is: running ahead, a node's
            // events wait for that sync and come later (`ahead.rs`).
            Engine::new(Some(store), sink)
                .with_runtime_kv()
                .with_run_ahead(false)
                .start(&loaded, input, Some(run_id))
                .await
        }
    });
    match task.await {
        Err(e) if e.is_panic() => run_id,
        Err(e) => panic!("the run's task failed without crashing: {e}"),
        Ok(outcome) => panic!(
            "the run ended without reaching its crash point: {:?}; events: {:?}",
            outcome.map(|o| o.status),
            sink.events.lock().unwrap()
        ),
    }
}

/// Resumes run `run_id` on `store` and runs it to its end.
pub async fn resume(
    store: Store,
    loaded: &LoadedScenario,
    run_id: &str,
) -> Result<Ran, EngineError> {
    let events = Arc::new(CollectEvents::default());
    let engine = Engine::new(Some(store), events.clone()).with_runtime_kv();
    let outcome = engine.resume(loaded, run_id).await?;
    let events = events.events.lock().unwrap().clone();
    Ok(Ran { outcome, events })
}

/// The node an event is about, if any.
pub fn event_node(event: &Event) -> Option<&str> {
    match event {
        Event::NodeStarted { node, .. }
        | Event::MapItemFinished { node, .. }
        | Event::NodeFinished { node, .. }
        | Event::NodeFailed { node, .. }
        | Event::RuleWarning { node, .. }
        | Event::CheckpointWritten { node, .. }
        | Event::RunWaiting { node, .. }
        | Event::RunAnswered { node, .. }
        | Event::SkillLog { node, .. }
        | Event::Token { node, .. }
        | Event::TokensDiscarded { node, .. } => Some(node),
        Event::RunStarted { .. } | Event::RunFinished { .. } => None,
    }
}

/// The event's name, as `--events` prints it.
pub fn event_name(event: &Event) -> String {
    serde_json::to_value(event).unwrap()["event"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Every event as `name` or `name:node`, in order.
pub fn event_trail(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| match event_node(e) {
            Some(node) => format!("{}:{node}", event_name(e)),
            None => event_name(e),
        })
        .collect()
}
