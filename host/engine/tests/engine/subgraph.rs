//! Subgraph nodes: another scenario run as one step, as a child run linked
//! to its parent. A child that completes gives its state and summary to
//! the node's writes; one that fails fails the node, which the parent
//! routes to its failure handler; a run stopped inside its child, or after
//! the child ended but before the parent's checkpoint, resumes the child
//! and then the parent with nothing run twice, on SQLite and Postgres; and
//! the scenarios the loader refuses: a missing file, a file that includes
//! itself (directly or not), an input mapping that does not fit, a child
//! with an approval node. Cancelling a parent cancels the child it runs.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use skillhost_engine::{CollectEvents, Engine, EngineError, Event, EventSink};
use skillhost_scenario::LoadedScenario;
use skillhost_scenario::codes;
use skillhost_store::{Cancelled, RunStatus, Store};

use crate::{Db, completed, crash, event_trail, failed, load, resume, run, run_both, runtime};

fn fixture(name: &str) -> PathBuf {
    skillhost_tests::repo_root()
        .join("tests/e2e/subgraph")
        .join(format!("{name}.toml"))
}

fn input() -> Value {
    json!({ "text": "ab" })
}

/// The state an uninterrupted run of `parent.toml` on `input()` ends with.
fn expected_state(child_run: &str) -> Value {
    json!({
        "trail": ["before", "c_check", "c_first", "c_second", "after:abab!"],
        "report": "abab!",
        "child_run": child_run,
        "report_length": 5,
        "errors": [],
    })
}

/// `(node, status)` of each step of a run, in order.
async fn steps(db: &Db, run_id: &str) -> Vec<(String, String)> {
    db.steps(run_id)
        .await
        .into_iter()
        .map(|s| (s.node_id, s.status.to_string()))
        .collect()
}

fn ok_steps(nodes: &[&str]) -> Vec<(String, String)> {
    nodes
        .iter()
        .map(|n| (n.to_string(), "ok".to_string()))
        .collect()
}

#[tokio::test]
async fn a_completed_child_gives_its_state_and_summary_to_the_writes() {
    let loaded = load(&fixture("parent"));
    let db = Db::sqlite().await;
    let ran = run(Some(db.store.clone()), &loaded, input()).await;
    completed(&ran);
    let parent = &ran.outcome.run_id;
    let state = ran.state();
    let child_run = state["child_run"].as_str().unwrap().to_string();
    assert_eq!(state, expected_state(&child_run));
    // Without a store the child runs the same (with an id of its own).
    let memory = run(None, &loaded, input()).await;
    let memory_child = memory.state()["child_run"].as_str().unwrap().to_string();
    assert_ne!(memory_child, child_run);
    assert_eq!(memory.state(), expected_state(&memory_child));

    // The child is a run of its own, linked to the parent's node and visit.
    let children = db.store.children(parent).await.unwrap();
    assert_eq!(children.len(), 1);
    let child = &children[0];
    assert_eq!(child.id, child_run);
    assert_eq!(child.status, RunStatus::Completed);
    assert_eq!(child.scenario_name, "summary");
    assert_eq!(child.input, json!({ "text": "ab", "mode": "ok" }));
    let link = child.parent().unwrap();
    assert_eq!(
        (link.run_id.as_str(), link.node.as_str(), link.visit),
        (parent.as_str(), "summarise", 1)
    );
    assert_eq!(
        db.store
            .child(parent, "summarise", 1)
            .await
            .unwrap()
            .map(|r| r.id),
        Some(child_run.clone())
    );
    assert!(
        db.store
            .child(parent, "summarise", 2)
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        db.store
            .run(parent)
            .await
            .unwrap()
            .unwrap()
            .parent()
            .is_none()
    );

    // Each run keeps its own history.
    assert_eq!(
        steps(&db, &child_run).await,
        ok_steps(&["c_check", "c_first", "c_second"])
    );
    assert_eq!(
        steps(&db, parent).await,
        ok_steps(&["p_before", "summarise", "p_after"])
    );
    let node_step = db
        .steps(parent)
        .await
        .into_iter()
        .find(|s| s.node_id == "summarise")
        .unwrap();
    assert_eq!(node_step.detail, Some(json!({ "child_run_id": child_run })));

    // The parent records its child's components as its own, by node.
    let provenance = db.store.run(parent).await.unwrap().unwrap().provenance;
    let components = provenance.unwrap().components;
    assert_eq!(
        components.keys().collect::<Vec<_>>(),
        ["echo", "summarise/echo", "summarise/fail"]
    );
}

#[tokio::test]
async fn a_failed_child_fails_the_node_and_the_parent_routes_it_to_on_failure() {
    let loaded = load(&fixture("parent"));
    let db = Db::sqlite().await;
    let ran = run(
        Some(db.store.clone()),
        &loaded,
        json!({ "text": "ab", "mode": "error" }),
    )
    .await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "subgraph-failed");
    assert_eq!(error["node"], "summarise");
    let child_run = error["detail"]["child_run_id"].as_str().unwrap();
    assert_eq!(error["detail"]["child_status"], "failed");
    assert_eq!(error["detail"]["child_error"]["code"], "requested-error");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(child_run)
            && message.contains("child.toml")
            && message.contains("c_check")
            && message.contains("requested-error"),
        "{message}"
    );
    // The parent went to its failure handler, whose report is the run's.
    assert_eq!(
        ran.failure()["message"],
        "the summary failed: subgraph-failed"
    );
    let child = db.store.run(child_run).await.unwrap().unwrap();
    assert_eq!(child.status, RunStatus::Failed);
    assert_eq!(child.parent().unwrap().node, "summarise");
    assert_eq!(
        steps(&db, &ran.outcome.run_id).await,
        [
            ("p_before".to_string(), "ok".to_string()),
            ("summarise".to_string(), "failed".to_string())
        ]
    );
}

#[tokio::test]
async fn a_child_input_that_does_not_fit_its_input_fails_the_node() {
    let loaded = load(&fixture("bad_input"));
    let (ran, db) = run_both(&loaded, json!({})).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "subgraph-input");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("summarise") && message.contains("child.toml") && message.contains("text"),
        "{message}"
    );
    // Nothing was started for it.
    assert!(
        db.store
            .children(&ran.outcome.run_id)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Starts `parent.toml` on `db`, stops it at the first event `at` matches,
/// resumes the parent, and checks it ends as an uninterrupted run, with
/// one child run, every node of both committed once. Returns the events of
/// the resume.
async fn crash_and_resume_parent(
    db: &Db,
    at: impl Fn(&Event) -> bool + Send + Sync + 'static,
) -> Vec<Event> {
    let loaded = load(&fixture("parent"));
    let parent = crash(&db.url, &loaded, input(), at).await;
    let children = db.store.children(&parent).await.unwrap();
    assert_eq!(children.len(), 1, "the child started before the crash");
    let child_run = children[0].id.clone();

    let ran = resume(db.reopen().await, &loaded, &parent).await.unwrap();
    completed(&ran);
    assert_eq!(ran.state(), expected_state(&child_run));
    let children = db.store.children(&parent).await.unwrap();
    assert_eq!(
        children
            .iter()
            .map(|r| (r.id.as_str(), r.status))
            .collect::<Vec<_>>(),
        [(child_run.as_str(), RunStatus::Completed)]
    );
    assert_eq!(
        steps(db, &child_run).await,
        ok_steps(&["c_check", "c_first", "c_second"])
    );
    assert_eq!(
        steps(db, &parent).await,
        ok_steps(&["p_before", "summarise", "p_after"])
    );
    ran.events
}

fn checkpoint_of(node: &'static str) -> impl Fn(&Event) -> bool + Send + Sync + 'static {
    move |e| matches!(e, Event::CheckpointWritten { node: n, .. } if n == node)
}

#[tokio::test]
async fn a_run_stopped_inside_its_child_resumes_the_child_then_the_parent() {
    let db = Db::sqlite().await;
    let events = crash_and_resume_parent(&db, checkpoint_of("c_first")).await;
    // Only what had not committed runs: the child's last node, then the
    // parent's.
    let started: Vec<String> = event_trail(&events)
        .into_iter()
        .filter(|e| e.starts_with("node_started"))
        .collect();
    assert_eq!(
        started,
        [
            "node_started:summarise",
            "node_started:c_second",
            "node_started:p_after"
        ]
    );
}

#[tokio::test]
async fn a_run_stopped_after_its_child_ended_reads_the_child_back() {
    let db = Db::sqlite().await;
    // The child's end is written; the parent's checkpoint of its node is not.
    let events = crash_and_resume_parent(
        &db,
        |e| matches!(e, Event::RunFinished { status, .. } if status == "completed"),
    )
    .await;
    let started: Vec<String> = event_trail(&events)
        .into_iter()
        .filter(|e| e.starts_with("node_started"))
        .collect();
    assert_eq!(started, ["node_started:summarise", "node_started:p_after"]);
}

#[tokio::test]
async fn a_run_stopped_inside_its_child_on_postgres_resumes_the_child_then_the_parent() {
    let db = Db::postgres().await;
    crash_and_resume_parent(&db, checkpoint_of("c_second")).await;
}

/// Copies the subgraph fixtures into a directory of their own, with the
/// components they name at the same relative place.
fn copy_fixtures() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let scenarios = dir.path().join("tests/e2e/subgraph");
    std::fs::create_dir_all(&scenarios).unwrap();
    for name in ["parent", "child"] {
        std::fs::copy(fixture(name), scenarios.join(format!("{name}.toml"))).unwrap();
    }
    let dist = dir.path().join("skills/dist");
    std::fs::create_dir_all(&dist).unwrap();
    for skill in ["echo", "fail"] {
        let from = skillhost_tests::repo_root().join(format!("skills/dist/{skill}.wasm"));
        std::fs::copy(from, dist.join(format!("{skill}.wasm"))).unwrap();
    }
    dir
}

#[tokio::test]
async fn a_changed_child_is_a_changed_parent() {
    let dir = copy_fixtures();
    let parent_path = dir.path().join("tests/e2e/subgraph/parent.toml");
    let child_path = dir.path().join("tests/e2e/subgraph/child.toml");
    let before = load(&parent_path);
    let file_digest = skillhost_runtime::cache::sha256_hex(&std::fs::read(&parent_path).unwrap());
    assert_ne!(
        before.scenario.digest, file_digest,
        "the digest covers the child"
    );

    let db = Db::sqlite().await;
    let parent = crash(&db.url, &before, input(), checkpoint_of("c_first")).await;

    // The child's file changes; the parent's does not.
    let text = std::fs::read_to_string(&child_path).unwrap();
    std::fs::write(&child_path, text.replace("'!'", "'?'")).unwrap();
    let after = load(&parent_path);
    assert_ne!(after.scenario.digest, before.scenario.digest);
    let refused = resume(db.reopen().await, &after, &parent).await.err();
    assert!(
        matches!(refused, Some(EngineError::ScenarioChanged { .. })),
        "{refused:?}"
    );
    // Nothing moved.
    let child = &db.store.children(&parent).await.unwrap()[0];
    assert_eq!(child.status, RunStatus::Running);
    assert_eq!(child.last_seq, 2);
}

fn refused(path: &Path) -> skillhost_scenario::CheckReport {
    match skillhost_scenario::load(path, runtime()) {
        Ok(_) => panic!("{} loaded", path.display()),
        Err(report) => report,
    }
}

#[test]
fn a_subgraph_file_that_does_not_exist_is_an_error_naming_node_and_file() {
    let report = refused(&fixture("missing"));
    let error = report.find(codes::SUBGRAPH_NOT_FOUND).expect("not found");
    assert_eq!(error.node.as_deref(), Some("inner"));
    assert!(error.file.ends_with("missing.toml"));
    assert!(
        error.message.contains("no_such_child.toml"),
        "{}",
        error.message
    );
    // The parse-only path (graphs) says the same.
    let parsed = skillhost_scenario::parse_file(&fixture("missing")).unwrap_err();
    assert!(parsed.find(codes::SUBGRAPH_NOT_FOUND).is_some());
}

#[test]
fn a_scenario_that_includes_itself_is_an_error_naming_the_cycle() {
    let report = refused(&fixture("self"));
    let error = report.find(codes::SUBGRAPH_CYCLE).expect("cycle");
    assert_eq!(error.node.as_deref(), Some("inner"));
    assert_eq!(
        error.message.matches("self.toml").count(),
        3,
        "{}",
        error.message
    );

    // Through another file: the cycle names both, in order.
    let report = refused(&fixture("cycle_a"));
    let error = report.find(codes::SUBGRAPH_CYCLE).expect("cycle");
    assert!(error.file.ends_with("cycle_b.toml"), "{error}");
    let message = &error.message;
    let a = message.find("cycle_a.toml").unwrap();
    let b = message.find("cycle_b.toml").unwrap();
    assert!(
        a < b && message.rfind("cycle_a.toml").unwrap() > b,
        "{message}"
    );
    // The outer file says which of its nodes leads there.
    let invalid = report.find(codes::SUBGRAPH_INVALID).expect("invalid child");
    assert!(invalid.file.ends_with("cycle_a.toml"), "{invalid}");
    assert!(
        skillhost_scenario::parse_file(&fixture("cycle_b"))
            .unwrap_err()
            .find(codes::SUBGRAPH_CYCLE)
            .is_some()
    );
}

#[test]
fn an_input_mapping_that_does_not_fit_the_child_is_an_error() {
    let report = refused(&fixture("unknown_input"));
    let unknown = report.find(codes::INPUT_UNKNOWN_FIELD).expect("unknown");
    assert!(unknown.message.contains("`txt`"), "{}", unknown.message);
    assert!(unknown.message.contains("text, mode") || unknown.message.contains("`text`"));
    let missing = report.find(codes::INPUT_MISSING_FIELD).expect("missing");
    assert!(missing.message.contains("`text`"), "{}", missing.message);
    assert_eq!(missing.node.as_deref(), Some("summarise"));
}

#[test]
fn a_child_with_an_approval_node_is_an_error_naming_node_and_approval() {
    let report = refused(&fixture("waits"));
    let error = report.find(codes::SUBGRAPH_APPROVAL).expect("refused");
    assert_eq!(error.node.as_deref(), Some("ask"));
    assert!(error.file.ends_with("waits.toml"), "{error}");
    assert!(error.message.contains("`approve`"), "{}", error.message);
    assert!(error.message.contains("approval.toml"), "{}", error.message);
}

/// Cancels the parent run (the first run started), from another thread
/// with its own store handle, when the child's node `at` starts.
struct CancelParentAt {
    url: String,
    at: &'static str,
    parent: Mutex<Option<String>>,
    events: CollectEvents,
}

impl EventSink for CancelParentAt {
    fn emit(&self, event: &Event) {
        self.events.emit(event);
        match event {
            Event::RunStarted { run_id, .. } => {
                self.parent.lock().unwrap().get_or_insert(run_id.clone());
            }
            Event::NodeStarted { node, .. } if node == self.at => {
                let parent = self.parent.lock().unwrap().clone().unwrap();
                let url = self.url.clone();
                let cancelled = std::thread::spawn(move || {
                    tokio::runtime::Runtime::new().unwrap().block_on(async {
                        let store = Store::open(&url).await.unwrap();
                        let engine = Engine::new(Some(store), Arc::new(CollectEvents::default()));
                        engine.cancel(&parent, "dave").await.unwrap()
                    })
                })
                .join()
                .unwrap();
                assert_eq!(cancelled, Cancelled::Requested);
            }
            _ => {}
        }
    }
}

async fn cancelling_a_parent_cancels_the_child_it_runs(db: Db) {
    let sink = Arc::new(CancelParentAt {
        url: db.url.clone(),
        at: "c_second",
        parent: Mutex::new(None),
        events: CollectEvents::default(),
    });
    // Each node waits for the sync before it, so that `c_second`'s start
    // is heard while it runs: running ahead, it may have committed by then
    // (`ahead.rs`).
    let outcome = Engine::new(Some(db.store.clone()), sink.clone())
        .with_run_ahead(false)
        .start(&load(&fixture("parent")), input(), None)
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        RunStatus::Cancelled,
        "{:?}",
        outcome.failure
    );
    let children = db.store.children(&outcome.run_id).await.unwrap();
    assert_eq!(children.len(), 1);
    let child = &children[0];
    // The child's node in flight when the cancel came was not committed.
    assert_eq!((child.status, child.last_seq), (RunStatus::Cancelled, 2));
    assert_eq!(child.cancel_requested_by.as_deref(), Some("dave"));
    assert_eq!(
        steps(&db, &child.id).await,
        ok_steps(&["c_check", "c_first"])
    );
    let parent = db.store.run(&outcome.run_id).await.unwrap().unwrap();
    assert_eq!((parent.status, parent.last_seq), (RunStatus::Cancelled, 1));
}

#[tokio::test]
async fn cancelling_a_parent_cancels_the_child_it_runs_sqlite() {
    cancelling_a_parent_cancels_the_child_it_runs(Db::sqlite().await).await;
}

#[tokio::test]
async fn cancelling_a_parent_cancels_the_child_it_runs_postgres() {
    cancelling_a_parent_cancels_the_child_it_runs(Db::postgres().await).await;
}

/// A parent and child left `running` by a process that died inside the
/// child: cancelling the parent asks both to stop, and each ends as
/// cancelled, without running a node, when it is resumed.
#[tokio::test]
async fn a_cancelled_parent_left_by_a_crash_and_its_child_end_when_resumed() {
    let db = Db::sqlite().await;
    let loaded = load(&fixture("parent"));
    let parent = crash(&db.url, &loaded, input(), checkpoint_of("c_first")).await;
    let child = db.store.children(&parent).await.unwrap()[0].id.clone();
    let engine = Engine::new(Some(db.reopen().await), Arc::new(CollectEvents::default()));
    assert_eq!(
        engine.cancel(&parent, "erin").await.unwrap(),
        Cancelled::Requested
    );
    let row = db.store.run(&child).await.unwrap().unwrap();
    assert_eq!(row.cancel_requested_by.as_deref(), Some("erin"));
    let resumed = resume(db.reopen().await, &loaded, &parent).await.unwrap();
    assert_eq!(resumed.outcome.status, RunStatus::Cancelled);
    assert_eq!(resumed.outcome.nodes_run, 0);
    let child_loaded = load(&fixture("child"));
    let resumed = resume(db.reopen().await, &child_loaded, &child)
        .await
        .unwrap();
    assert_eq!(resumed.outcome.status, RunStatus::Cancelled);
    assert_eq!(resumed.outcome.nodes_run, 0);
}

/// A scenario of one subgraph node, `down`, running `leaf.toml`, and the
/// leaf (one gate), written in `dir`: the rungs of the deep trees below.
fn rung_and_leaf(dir: &Path) -> (Arc<LoadedScenario>, Arc<LoadedScenario>) {
    std::fs::write(
        dir.join("rung.toml"),
        "[scenario]\nname = \"rung\"\n\n[[node]]\nid = \"down\"\nkind = \"subgraph\"\n\
         scenario = \"leaf.toml\"\n\n[[node]]\nid = \"done\"\nkind = \"end\"\n\n\
         [[edge]]\nfrom = \"down\"\nto = \"done\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("leaf.toml"),
        "[scenario]\nname = \"leaf\"\n\n[[node]]\nid = \"bottom\"\nkind = \"gate\"\n\n\
         [[node]]\nid = \"done\"\nkind = \"end\"\n\n[[edge]]\nfrom = \"bottom\"\nto = \"done\"\n",
    )
    .unwrap();
    (load(&dir.join("rung.toml")), load(&dir.join("leaf.toml")))
}

/// `levels` rungs, each running the next as its `down` node, over the
/// leaf: a tree built in memory, as a library user could, past the
/// loader's limit on files.
fn tree_of(levels: usize, rung: &LoadedScenario, leaf: Arc<LoadedScenario>) -> Arc<LoadedScenario> {
    (0..levels).fold(leaf, |below, _| {
        let mut level = rung.clone();
        level.subgraphs.insert("down".to_string(), below);
        Arc::new(level)
    })
}

/// The engine holds the nesting limit itself, whatever loaded the
/// scenario: in a tree deeper than `MAX_SUBGRAPH_DEPTH` levels, the run at
/// the limit fails its subgraph node (`subgraph-too-deep`) before starting
/// a child, every run above fails in turn, and none is left running.
#[tokio::test]
async fn a_child_run_past_the_depth_limit_fails_its_node_and_no_run_is_left_running() {
    let dir = tempfile::tempdir().unwrap();
    let (rung, leaf) = rung_and_leaf(dir.path());
    let limit = skillhost_scenario::MAX_SUBGRAPH_DEPTH;
    let db = Db::sqlite().await;

    // At the limit, the whole tree runs: levels 0 to `limit`.
    let fits = tree_of(limit, &rung, leaf.clone());
    let ran = run(Some(db.store.clone()), &fits, json!({})).await;
    completed(&ran);
    let all = db.store.list_runs(None, 1000).await.unwrap();
    assert_eq!(all.len(), limit + 1);
    assert!(all.iter().all(|r| r.status == RunStatus::Completed));

    // One level more: the run at level `limit` refuses to start its child.
    let db = Db::sqlite().await;
    let deep = tree_of(limit + 5, &rung, leaf);
    let ran = run(Some(db.store.clone()), &deep, json!({})).await;
    failed(&ran);
    let all = db.store.list_runs(None, 1000).await.unwrap();
    assert_eq!(all.len(), limit + 1, "a run past the limit was created");
    assert!(
        all.iter().all(|r| r.status == RunStatus::Failed),
        "{:?}",
        all.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    let deepest = all
        .iter()
        .find(|r| db_children_empty(&all, &r.id))
        .expect("a deepest run");
    let error = deepest.error.as_ref().unwrap();
    assert_eq!(error["code"], "subgraph-too-deep", "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains(&format!(
            "would run as a child run {} levels below its top-level run; subgraphs nest at \
             most {limit} levels",
            limit + 1
        )),
        "{message}"
    );
    // The top-level run's failure names its child's.
    assert_eq!(ran.failure()["code"], "subgraph-failed");
}

/// Whether no run of `all` has `id` as its parent.
fn db_children_empty(all: &[skillhost_store::RunRow], id: &str) -> bool {
    !all.iter()
        .any(|r| r.parent().is_some_and(|p| p.run_id == id))
}

/// A tree at the depth limit runs on a thread whose stack is far smaller
/// than nesting each child's poll in its parent's would need: each child
/// run's loop is a task of its own, polled from the runtime's loop.
#[test]
fn nested_child_runs_do_not_grow_the_stack() {
    let dir = tempfile::tempdir().unwrap();
    let (rung, leaf) = rung_and_leaf(dir.path());
    let tree = tree_of(skillhost_scenario::MAX_SUBGRAPH_DEPTH, &rung, leaf);
    // A debug build's run loop takes about 600 KiB of this stack at its
    // top level; polled inside its parent's, each child took some 250 KiB
    // more, so the old engine overflowed here by the eighth level.
    let ran = std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async {
                    Engine::new(None, Arc::new(skillhost_engine::NoEvents))
                        .start(&tree, json!({}), None)
                        .await
                        .map(|outcome| outcome.status)
                })
        })
        .unwrap()
        .join()
        .expect("the run's thread");
    assert_eq!(ran.unwrap(), RunStatus::Completed);
}
