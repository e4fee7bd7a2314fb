//! Approval nodes and cancels through the real `host` binary: a run that
//! waits exits 0 and prints how to answer; `host runs answer|approve`
//! continues it in a later process from the node's boundary (SQLite: in
//! process; Postgres: a worker picks it up); a wrong-shaped answer is exit
//! 2 with the run still waiting; a second answer is refused; a SIGKILL
//! around the wait leaves a run that is waiting and answerable (or running
//! and resumable to the wait); `host runs cancel` of each status.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use skillhost_tests::cli::{
    KilledOnDrop, host, host_command, json, send_signal, stderr, wait_until_stopped,
};

/// The failpoint that stops a process right after the commit of node `n02`
/// of `workers/slow.toml`, until it is sent SIGCONT.
const STOP_AFTER_N02: &str = "stop@after-commit:n02";

fn fixture(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e")
        .join(path)
        .display()
        .to_string()
}

fn approval() -> String {
    fixture("engine/approval.toml")
}

pub(super) fn out_text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `host ARGS` with `--database DB` (None: the test directory's SQLite
/// file); asserts the exit code.
pub(super) fn run_host(dir: &Path, db: Option<&str>, args: &[&str], code: i32) -> Output {
    let mut all: Vec<&str> = args.to_vec();
    if let Some(db) = db {
        all.extend(["--database", db]);
    }
    let out = host(dir, &all, None);
    assert_eq!(
        out.status.code(),
        Some(code),
        "host {all:?}: {}",
        out_text(&out)
    );
    out
}

pub(super) fn show(dir: &Path, db: Option<&str>, id: &str) -> Value {
    json(&run_host(dir, db, &["runs", "show", id, "--json"], 0))
}

/// Starts the approval scenario: it waits at `approve`, and `host run`
/// exits 0 saying how to answer. Returns the run id.
fn start_waiting(dir: &Path, db: Option<&str>) -> String {
    let out = run_host(dir, db, &["run", &approval()], 0);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        stdout.contains("waiting at node `approve`: Run deploy (12 bytes)?"),
        "{stdout}"
    );
    let listed = json(&run_host(
        dir,
        db,
        &["runs", "list", "--status", "waiting", "--json"],
        0,
    ));
    let id = listed[0]["id"]
        .as_str()
        .expect("the waiting run")
        .to_string();
    assert!(
        stdout.contains(&format!("answer with: host runs answer {id} --data ")),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("host runs approve {id}")),
        "{stdout}"
    );
    id
}

/// A wrong-shaped answer is exit 2, names the node and the fields, and
/// writes nothing.
fn wrong_shape_is_refused(dir: &Path, db: Option<&str>, id: &str) {
    let out = run_host(
        dir,
        db,
        &["runs", "answer", id, "--data", r#"{"approved": "yes"}"#],
        2,
    );
    let err = stderr(&out);
    assert!(
        err.contains("does not fit node `approve`'s answer shape"),
        "{err}"
    );
    assert!(err.contains("`approved` (boolean, required)"), "{err}");
    let shown = show(dir, db, id);
    assert_eq!(shown["status"], "waiting");
    assert_eq!(shown["waits"][0]["answer"], Value::Null);
}

pub(super) fn ok_nodes(shown: &Value) -> Vec<String> {
    shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "ok")
        .map(|s| s["node"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn an_approval_waits_across_a_process_exit_and_the_answer_continues_it() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let id = start_waiting(dir, None);
    wrong_shape_is_refused(dir, None, &id);
    // A resume before the answer is refused, saying how to answer.
    let out = run_host(dir, None, &["resume", &id], 2);
    assert!(
        stderr(&out).contains("is waiting for an answer"),
        "{}",
        stderr(&out)
    );

    let out = run_host(dir, None, &["runs", "approve", &id, "--by", "alice"], 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("executed deploy"),
        "{}",
        out_text(&out)
    );
    let shown = show(dir, None, &id);
    assert_eq!(shown["status"], "completed");
    assert_eq!(ok_nodes(&shown), ["prepare", "approve", "execute"]);
    let wait = &shown["waits"][0];
    assert_eq!(wait["answered_by"], "alice");
    assert_eq!(
        wait["answer"],
        serde_json::json!({"approved": true, "comment": ""})
    );
    assert!(wait["answered_at_ms"].is_i64());

    // A replay takes the recorded answer.
    let out = run_host(dir, None, &["replay", &id], 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("replayed 3 of 3 step(s)"),
        "{}",
        out_text(&out)
    );

    // Twice: refused, nothing changed.
    let out = run_host(dir, None, &["runs", "reject", &id, "--by", "bob"], 2);
    assert!(
        stderr(&out).contains("already answered"),
        "{}",
        stderr(&out)
    );
    assert_eq!(show(dir, None, &id)["waits"][0]["answered_by"], "alice");
}

#[test]
fn an_answer_with_data_takes_the_edge_it_chooses() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let id = start_waiting(dir, None);
    let out = run_host(
        dir,
        None,
        &[
            "runs",
            "answer",
            &id,
            "--data",
            r#"{"approved": false, "comment": "not today"}"#,
            "--json",
        ],
        0,
    );
    let outcome = json(&out);
    assert_eq!(outcome["status"], "completed");
    assert_eq!(outcome["state"]["outcome"], "declined: not today");
}

#[test]
fn a_run_killed_around_its_wait_is_answerable() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // Killed after the wait was written: it waits, and an answer continues it.
    let out = host(dir, &["run", &approval()], Some("after-wait:approve"));
    assert_eq!(out.status.signal(), Some(9), "{}", out_text(&out));
    let listed = json(&run_host(
        dir,
        None,
        &["runs", "list", "--status", "waiting", "--json"],
        0,
    ));
    let id = listed[0]["id"].as_str().unwrap().to_string();
    run_host(dir, None, &["runs", "approve", &id], 0);
    let shown = show(dir, None, &id);
    assert_eq!(shown["status"], "completed");
    assert_eq!(ok_nodes(&shown), ["prepare", "approve", "execute"]);

    // Killed before it: still running at the approval; a resume waits.
    let out = host(dir, &["run", &approval()], Some("before-wait:approve"));
    assert_eq!(out.status.signal(), Some(9), "{}", out_text(&out));
    let listed = json(&run_host(
        dir,
        None,
        &["runs", "list", "--status", "running", "--json"],
        0,
    ));
    let id = listed[0]["id"].as_str().unwrap().to_string();
    let out = run_host(dir, None, &["resume", &id], 0);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("answer with: host runs answer"),
        "{}",
        out_text(&out)
    );
    run_host(dir, None, &["runs", "approve", &id], 0);
    let shown = show(dir, None, &id);
    assert_eq!(shown["status"], "completed");
    assert_eq!(ok_nodes(&shown), ["prepare", "approve", "execute"]);
}

/// Waits until `check` holds for the run's `runs show`; panics after 60 s.
pub(super) fn wait_until(
    dir: &Path,
    db: Option<&str>,
    id: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let shown = show(dir, db, id);
        if check(&shown) {
            return;
        }
        assert!(Instant::now() < deadline, "run {id} never {what}: {shown}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Cancels run `id`; returns what `--json` said (`cancelled` or
/// `cancel-requested`).
fn cancel(dir: &Path, db: Option<&str>, id: &str) -> String {
    let out = run_host(
        dir,
        db,
        &["runs", "cancel", id, "--by", "carol", "--json"],
        0,
    );
    json(&out)["result"].as_str().unwrap().to_string()
}

/// Cancel of each status: queued and waiting at once, running at its next
/// node boundary (a `host run` process, or a worker), finished refused.
fn cancel_each_status(dir: &Path, db: Option<&str>) {
    let slow = fixture("workers/slow.toml");
    // Queued.
    let out = run_host(dir, db, &["submit", &slow], 0);
    let queued = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert_eq!(cancel(dir, db, &queued), "cancelled");
    let shown = show(dir, db, &queued);
    assert_eq!(shown["status"], "cancelled");
    assert_eq!(shown["error"]["by"], "carol");
    // Waiting.
    let waiting = start_waiting(dir, db);
    assert_eq!(cancel(dir, db, &waiting), "cancelled");
    assert_eq!(show(dir, db, &waiting)["status"], "cancelled");
    let out = run_host(dir, db, &["runs", "approve", &waiting], 2);
    assert!(
        stderr(&out).contains("cancelled, not waiting"),
        "{}",
        stderr(&out)
    );
    // Finished: refused, nothing changed.
    let out = run_host(dir, db, &["runs", "cancel", &waiting], 2);
    assert!(
        stderr(&out).contains("already cancelled"),
        "{}",
        stderr(&out)
    );
    assert_eq!(show(dir, db, &waiting)["error"]["by"], "carol");
}

/// Runs `slow.toml` in a `host run` process, cancels it once it has
/// committed a node, and checks it ended as cancelled before its last node.
fn cancel_a_running_run(dir: &Path, db: Option<&str>) {
    let mut args = vec![
        "run".to_string(),
        fixture("workers/slow.toml"),
        "--events".into(),
    ];
    if let Some(db) = db {
        args.extend(["--database".into(), db.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Stopped after its second node's commit, so the cancel certainly
    // finds it running however loaded the machine is.
    let child = host_command(dir, &args, Some(STOP_AFTER_N02))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_stopped(child.id(), "the run");
    let id = first_run_id(dir, db);
    assert_eq!(show(dir, db, &id)["last_seq"], 2);
    assert_eq!(cancel(dir, db, &id), "cancel-requested");
    send_signal(child.id(), libc::SIGCONT);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", out_text(&out));
    // Said as a cancel between nodes, not as a failure at a node.
    let said = stderr(&out);
    assert!(
        said.contains("cancelled [cancelled]: cancelled by `carol`") && !said.contains("node ``"),
        "{said}"
    );
    let shown = show(dir, db, &id);
    assert_eq!(shown["status"], "cancelled", "{shown}");
    assert_eq!(shown["error"]["code"], "cancelled");
    assert_eq!(shown["error"]["by"], "carol");
    assert!(shown["last_seq"].as_u64().unwrap() < 10, "{shown}");
}

/// The id of the only run in the database, once it is there.
fn first_run_id(dir: &Path, db: Option<&str>) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let out = host(
            dir,
            &[
                &["runs", "list", "--status", "running", "--json"][..],
                &db_args(db),
            ]
            .concat(),
            None,
        );
        if out.status.success()
            && let Some(id) = json(&out)[0]["id"].as_str()
        {
            return id.to_string();
        }
        assert!(
            Instant::now() < deadline,
            "no running run: {}",
            out_text(&out)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn db_args(db: Option<&str>) -> Vec<&str> {
    match db {
        Some(db) => vec!["--database", db],
        None => Vec::new(),
    }
}

#[test]
fn cancel_of_each_status_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    cancel_each_status(dir.path(), None);
    cancel_a_running_run(dir.path(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_each_status_postgres() {
    let db = skillhost_tests::pg::fresh_database().await;
    let dir = tempfile::tempdir().unwrap();
    cancel_each_status(dir.path(), Some(&db));
    cancel_a_running_run(dir.path(), Some(&db));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_of_each_status_through_pgbouncer() {
    let db = skillhost_tests::pgbouncer::fresh_database().await.url;
    let dir = tempfile::tempdir().unwrap();
    cancel_each_status(dir.path(), Some(&db));
    cancel_a_running_run(dir.path(), Some(&db));
}

/// A `host worker` on `db`, killed when dropped.
pub(super) struct Worker {
    process: KilledOnDrop,
}

impl Worker {
    pub(super) fn start(dir: &Path, db: &str) -> Worker {
        Worker::start_at(dir, db, None)
    }

    /// A worker with a failpoint armed (`SKILLHOST_FAILPOINT`).
    fn start_at(dir: &Path, db: &str, failpoint: Option<&str>) -> Worker {
        let child = host_command(
            dir,
            &["worker", "--poll", "50ms", "--database", db],
            failpoint,
        )
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn host worker");
        Worker {
            process: KilledOnDrop::new(child),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_continues_an_answered_run_on_postgres() {
    a_worker_continues_an_answered_run(skillhost_tests::pg::fresh_database().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_continues_an_answered_run_through_pgbouncer() {
    a_worker_continues_an_answered_run(skillhost_tests::pgbouncer::fresh_database().await.url)
        .await;
}

async fn a_worker_continues_an_answered_run(db: String) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    // It stops itself after the `slow` run's second node (below); the
    // approval scenario has no node of that name.
    let worker = Worker::start_at(dir, &db, Some(STOP_AFTER_N02));
    // Submitted: the worker runs it to the approval, where it waits
    // holding no lease.
    let out = run_host(dir, Some(&db), &["submit", &approval()], 0);
    let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
    wait_until(dir, Some(&db), &id, "waited", |s| s["status"] == "waiting");
    wrong_shape_is_refused(dir, Some(&db), &id);
    // The answer only queues it (Postgres); the worker continues it.
    let out = run_host(
        dir,
        Some(&db),
        &["runs", "approve", &id, "--by", "alice"],
        0,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("is queued: a worker continues it"),
        "{stdout}"
    );
    wait_until(dir, Some(&db), &id, "completed", |s| {
        s["status"] == "completed"
    });
    let shown = show(dir, Some(&db), &id);
    assert_eq!(ok_nodes(&shown), ["prepare", "approve", "execute"]);
    assert_eq!(shown["state"]["outcome"], "executed deploy");
    assert_eq!(shown["waits"][0]["answered_by"], "alice");

    // A run the worker is running is cancelled at its next node boundary.
    let out = run_host(
        dir,
        Some(&db),
        &["submit", &fixture("workers/slow.toml")],
        0,
    );
    let slow = String::from_utf8_lossy(&out.stdout).trim().to_string();
    wait_until_stopped(worker.process.id(), "the worker");
    assert_eq!(show(dir, Some(&db), &slow)["last_seq"], 2);
    assert_eq!(cancel(dir, Some(&db), &slow), "cancel-requested");
    send_signal(worker.process.id(), libc::SIGCONT);
    wait_until(dir, Some(&db), &slow, "was cancelled", |s| {
        s["status"] == "cancelled"
    });
    assert!(show(dir, Some(&db), &slow)["last_seq"].as_u64().unwrap() < 10);
}
