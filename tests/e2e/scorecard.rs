//! The exactly-once scorecard: the real `host` binary killed (SIGKILL) at
//! every failpoint where the engine and the store hand over
//! (`host/store/src/failpoint.rs`), on SQLite and on Postgres, then
//! continued as a user would (`host resume`, the answer or the cancel given
//! again), and compared with an undisturbed run of the same scenario on a
//! database of its own: the run's status and error, its final state, its
//! checkpoints, its steps, its journal, its artifacts, the kv rows its
//! skills wrote and, for a subgraph, the child run's. Each scenario
//! reproduces, in Skillhost's terms, an exactly-once bug of another durable
//! engine (LangGraph 1.2.16's resume fixes, DBOS's duplicated stream values
//! on retries).
//!
//! The table it makes is `docs/replay.md`'s, between `<!-- scorecard:begin
//! -->` and `<!-- scorecard:end -->`: a difference fails the test with the
//! command that rewrites it (`SKILLHOST_UPDATE_SCORECARD=1`).

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Mutex, OnceLock};

use serde_json::{Value, json};
use skillhost_tests::cli::{
    host_command, json, send_signal, sqlite_url, stderr, wait_until_stopped,
};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Scenario {
    /// `engine/crash.toml`: three appending nodes and a map node.
    Crash,
    /// `scorecard/approval.toml`: an approval node whose answer is appended.
    Approval,
    /// `subgraph/parent.toml`: a subgraph node whose child appends.
    Subgraph,
    /// `scorecard/kv_retry.toml`: kv writes by attempts that fail first.
    KvRetry,
    /// `engine/crash.toml` cancelled while it runs.
    Cancel,
    /// `scorecard/approval.toml` cancelled while it waits.
    CancelWaiting,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Crash => "crash",
            Scenario::Approval => "approval",
            Scenario::Subgraph => "subgraph",
            Scenario::KvRetry => "kv retry",
            Scenario::Cancel => "cancel",
            Scenario::CancelWaiting => "cancel waiting",
        }
    }
}

const LANGGRAPH_UPDATE_ONCE: &str = "LangGraph: apply a resumed command's update once";
const LANGGRAPH_SUBGRAPH: &str = "LangGraph: stop a subgraph from rerunning its finished tasks";
const LANGGRAPH_PENDING_WRITES: &str = "LangGraph: save a resumed run's pending writes once";
const LANGGRAPH_INVALID_RESUME: &str =
    "LangGraph: let other tasks finish when a resume value is invalid";
const DBOS_RETRY: &str = "DBOS: stream values duplicated on every retry";

/// One row of the scorecard: a failpoint, the scenario killed there, and
/// the bug it reproduces (empty: none by name).
struct Row {
    point: &'static str,
    scenario: Scenario,
    bug: &'static str,
}

/// The failpoints, in the table's order. `None` is the invalid answer,
/// which kills nothing.
fn rows() -> Vec<Row> {
    let row = |point, scenario, bug| Row {
        point,
        scenario,
        bug,
    };
    vec![
        row("before-commit:second", Scenario::Crash, ""),
        row("in-commit:second", Scenario::Crash, ""),
        row("after-commit:second", Scenario::Crash, ""),
        row(
            "before-map-item:fan:3",
            Scenario::Crash,
            LANGGRAPH_PENDING_WRITES,
        ),
        row("map-item:fan:3", Scenario::Crash, LANGGRAPH_PENDING_WRITES),
        row("in-commit:fan", Scenario::Crash, LANGGRAPH_PENDING_WRITES),
        // `third` goes on to the end node: its commit ends the run too.
        row("in-commit:third", Scenario::Crash, ""),
        row("after-commit:third", Scenario::Crash, ""),
        row("before-wait:approve", Scenario::Approval, ""),
        row("after-wait:approve", Scenario::Approval, ""),
        row(
            "before-answer:approve",
            Scenario::Approval,
            LANGGRAPH_UPDATE_ONCE,
        ),
        row(
            "after-answer:approve",
            Scenario::Approval,
            LANGGRAPH_UPDATE_ONCE,
        ),
        row(
            "before-commit:approve",
            Scenario::Approval,
            LANGGRAPH_UPDATE_ONCE,
        ),
        row(
            "after-commit:approve",
            Scenario::Approval,
            LANGGRAPH_UPDATE_ONCE,
        ),
        row(
            "after-commit:c_first",
            Scenario::Subgraph,
            LANGGRAPH_SUBGRAPH,
        ),
        row(
            "before-commit:c_second",
            Scenario::Subgraph,
            LANGGRAPH_SUBGRAPH,
        ),
        row(
            "child-ended:summarise",
            Scenario::Subgraph,
            LANGGRAPH_SUBGRAPH,
        ),
        row(
            "before-commit:summarise",
            Scenario::Subgraph,
            LANGGRAPH_SUBGRAPH,
        ),
        row(
            "after-commit:summarise",
            Scenario::Subgraph,
            LANGGRAPH_SUBGRAPH,
        ),
        row("after-kv-set:flag", Scenario::KvRetry, DBOS_RETRY),
        row("before-kv-set:seen", Scenario::KvRetry, DBOS_RETRY),
        row("journaled:flaky", Scenario::KvRetry, DBOS_RETRY),
        row("in-commit:flaky", Scenario::KvRetry, DBOS_RETRY),
        row("before-map-item:fan:1", Scenario::KvRetry, DBOS_RETRY),
        row("map-item:fan:1", Scenario::KvRetry, DBOS_RETRY),
        row("before-cancel", Scenario::Cancel, ""),
        row("after-cancel", Scenario::Cancel, ""),
        row("before-cancel-end", Scenario::Cancel, ""),
        row("before-cancel", Scenario::CancelWaiting, ""),
        row("after-cancel", Scenario::CancelWaiting, ""),
    ]
}

/// A database of one case's own (kv namespaces are per store, so runs of
/// two cases never see each other's rows), and the directory its commands
/// run in.
struct Db {
    backend: Backend,
    dir: tempfile::TempDir,
    url: String,
}

impl Db {
    fn fresh(backend: Backend) -> Db {
        let dir = tempfile::tempdir().unwrap();
        let url = match backend {
            Backend::Sqlite => sqlite_url(dir.path()),
            Backend::Postgres => block_on(skillhost_tests::pg::fresh_database()),
        };
        Db { backend, dir, url }
    }

    fn command(&self, args: &[&str], point: Option<&str>) -> std::process::Command {
        let mut command = host_command(self.dir.path(), args, point);
        command.env("SKILLHOST_DATABASE_URL", &self.url);
        command
    }

    fn host(&self, args: &[&str]) -> Output {
        self.command(args, None).output().expect("run host")
    }

    fn show(&self, id: &str) -> Value {
        json(&self.host(&["runs", "show", id, "--json"]))
    }

    /// What a killed runner's lease would do after its 30 s: expire (the
    /// test plays the clock), so that `host resume` may take the run.
    fn expire_lease(&self, id: &str) {
        let sql = format!("UPDATE runs SET lease_expires_at = 0 WHERE id = '{id}'");
        self.execute(&sql);
    }

    fn execute(&self, sql: &str) {
        use sqlx::Connection;
        let (backend, url, sql) = (self.backend, self.url.clone(), sql.to_owned());
        block_on(async move {
            match backend {
                Backend::Sqlite => {
                    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
                    sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
                    conn.close().await.unwrap();
                }
                Backend::Postgres => {
                    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
                    sqlx::raw_sql(&sql).execute(&mut conn).await.unwrap();
                    conn.close().await.unwrap();
                }
            }
        });
    }

    /// Every kv row: scope, namespace, key and value (as text).
    fn kv_rows(&self) -> Vec<(String, String, String, String)> {
        use sqlx::{Connection, Row};
        let (backend, url) = (self.backend, self.url.clone());
        let sql = "SELECT scope, namespace, key, value FROM kv ORDER BY scope, namespace, key";
        block_on(async move {
            let text = |value: Vec<u8>| String::from_utf8_lossy(&value).into_owned();
            match backend {
                Backend::Sqlite => {
                    let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
                    let rows = sqlx::query(sql).fetch_all(&mut conn).await.unwrap();
                    rows.iter()
                        .map(|r| (r.get(0), r.get(1), r.get(2), text(r.get(3))))
                        .collect()
                }
                Backend::Postgres => {
                    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
                    let rows = sqlx::query(sql).fetch_all(&mut conn).await.unwrap();
                    rows.iter()
                        .map(|r| (r.get(0), r.get(1), r.get(2), text(r.get(3))))
                        .collect()
                }
            }
        })
    }
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// One case: its database, and the failpoint armed in each of its `host`
/// commands until one process was killed there.
struct Case<'a> {
    db: &'a Db,
    point: Option<&'a str>,
    killed: bool,
}

impl Case<'_> {
    /// Runs `host ARGS…` with the failpoint armed (until it has killed a
    /// process); whether this one was killed.
    fn host(&mut self, args: &[&str]) -> (Output, bool) {
        let point = if self.killed { None } else { self.point };
        let out = self.db.command(args, point).output().expect("run host");
        let killed = out.status.signal() == Some(9);
        assert!(
            !killed || point.is_some(),
            "host {args:?} died of SIGKILL unarmed: {}",
            stderr(&out)
        );
        self.killed |= killed;
        (out, killed)
    }

    /// Runs `host ARGS…` (a `resume`) until the run ends or waits: once
    /// more if the failpoint killed it, after its lease ran out, as a user
    /// would. (A run that ends cancelled or failed exits non-zero: what it
    /// ended as is compared afterwards.)
    fn resumed(&mut self, id: &str, args: &[&str]) {
        let (mut out, killed) = self.host(args);
        if killed {
            self.db.expire_lease(id);
            out = self.host(args).0;
        }
        let status = self.db.show(id)["status"].clone();
        assert!(
            !matches!(status.as_str(), Some("running" | "queued")),
            "host {args:?} after `{:?}` left the run {status}: {}",
            self.point,
            stderr(&out)
        );
    }

    /// `host run FILE --events …`: the run's id, resumed to its end (or to
    /// its wait) if the failpoint killed it.
    fn run(&mut self, file: &str, extra: &[&str]) -> String {
        let mut args = vec!["run", file, "--events"];
        args.extend_from_slice(extra);
        let (out, killed) = self.host(&args);
        let id = first_run_id(&out);
        // Killed after its wait was written, the run waits: nothing to
        // resume.
        if killed && self.db.show(&id)["status"] != "waiting" {
            self.resumed(&id, &["resume", &id]);
        } else if !killed {
            assert!(out.status.success(), "host {args:?}: {}", stderr(&out));
        }
        id
    }
}

/// Waits for `child` to exit, at most 60 s (then it is killed on drop and
/// the test fails naming `what`).
fn wait_bounded(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not end within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The run id the first event of `host … --events` names.
fn first_run_id(out: &Output) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    let first = text.lines().next().unwrap_or_else(|| {
        panic!("no event; stderr: {}", stderr(out));
    });
    let event: Value = serde_json::from_str(first).unwrap();
    event["run_id"].as_str().unwrap().to_owned()
}

/// The files the scenarios run from: the repository's, and `kv_retry.toml`
/// copied beside the `kv-retry` component the test builds (once per test
/// process, in a directory every case shares).
struct Files {
    crash: String,
    approval: String,
    parent: String,
    kv_retry: String,
    _dir: tempfile::TempDir,
}

fn files() -> &'static Files {
    static FILES: OnceLock<Files> = OnceLock::new();
    FILES.get_or_init(|| {
        let e2e = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e");
        let path = |p: PathBuf| p.display().to_string();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("kv-retry.wasm"),
            skillhost_tests::kv_retry_component(),
        )
        .unwrap();
        let kv_retry = dir.path().join("kv_retry.toml");
        std::fs::copy(e2e.join("scorecard/kv_retry.toml"), &kv_retry).unwrap();
        Files {
            crash: path(e2e.join("engine/crash.toml")),
            approval: path(e2e.join("scorecard/approval.toml")),
            parent: path(e2e.join("subgraph/parent.toml")),
            kv_retry: path(kv_retry),
            _dir: dir,
        }
    })
}

/// What the scorecard compares of a run (ids and timings taken out).
#[derive(Debug, PartialEq, Clone)]
struct Observed {
    status: Value,
    error: Value,
    state: Value,
    checkpoints: Value,
    /// The checkpointed steps (seq, node, status, hashes, error, detail).
    steps: Value,
    /// Every step row, retried attempts included: node, attempt, status.
    attempts: Value,
    journal: Value,
    artifacts: Value,
    kv: Vec<(String, String, String, String)>,
    /// A subgraph's child run.
    child: Option<Box<Observed>>,
}

/// Keys whose values are times, durations, ids or measurements.
const UNSTABLE: &[&str] = &[
    "started_at_ms",
    "duration_us",
    "fuel_consumed",
    "memory_peak_bytes",
    "run_id",
    "child_run_id",
    "id",
    "created_at_ms",
    "updated_at_ms",
    "answered_at",
    "requested_at",
    "at_ms",
    "digest",
];

fn stable(value: &Value, ids: &[(&str, &str)]) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !UNSTABLE.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), stable(v, ids)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| stable(v, ids)).collect()),
        Value::String(s) => {
            let mut s = s.clone();
            for (id, name) in ids {
                s = s.replace(id, name);
            }
            Value::String(s)
        }
        other => other.clone(),
    }
}

fn observe(db: &Db, id: &str) -> Observed {
    observe_run(db, id, "<run>")
}

fn observe_run(db: &Db, id: &str, name: &str) -> Observed {
    let out = db.host(&["runs", "export", id]);
    assert!(out.status.success(), "export {id}: {}", stderr(&out));
    let export = json(&out);
    let shown = db.show(id);
    let steps = export["steps"].as_array().unwrap();
    let child_id = steps
        .iter()
        .find_map(|s| s["detail"]["child_run_id"].as_str())
        .map(str::to_owned);
    let mut ids = vec![(id, name)];
    if let Some(child) = &child_id {
        ids.push((child.as_str(), "<child>"));
    }
    let child = child_id
        .as_deref()
        .map(|c| Box::new(observe_run(db, c, "<child>")));
    Observed {
        status: export["run"]["status"].clone(),
        error: stable(&export["run"]["error"], &ids),
        state: stable(&shown["state"], &ids),
        checkpoints: {
            let mut checkpoints = stable(&export["checkpoints"], &ids);
            if child.is_some() {
                // The parent's state holds its child's run id (`child_run`),
                // so its state hashes are the run's own; their changes are
                // compared.
                for checkpoint in checkpoints.as_array_mut().unwrap() {
                    checkpoint.as_object_mut().unwrap().remove("state_hash");
                }
            }
            checkpoints
        },
        steps: Value::Array(
            steps
                .iter()
                .filter(|s| !s["seq"].is_null())
                .map(|s| {
                    let mut s = stable(s, &ids);
                    s.as_object_mut().unwrap().remove("attempt");
                    if let Some(detail) = s["detail"].as_object_mut() {
                        detail.remove(ITEM_ATTEMPTS);
                    }
                    s
                })
                .collect(),
        ),
        attempts: Value::Array(steps.iter().flat_map(attempts_of).collect()),
        journal: stable(&export["journal"], &ids),
        artifacts: stable(&export["artifacts"], &ids),
        kv: db.kv_rows(),
        child,
    }
}

/// What an undisturbed run of `scenario` must be in itself (the cases are
/// compared with it): each node applied once, the answer once, the child's
/// nodes once, only the kept attempts' journal, one kv row per key.
fn check_reference(scenario: Scenario, backend: Backend, run: &Observed) {
    let ok_nodes = |o: &Observed| -> Vec<String> {
        o.steps
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["node_id"].as_str().unwrap().to_owned())
            .collect()
    };
    let what = format!("the undisturbed {} run on {backend:?}", scenario.name());
    match scenario {
        Scenario::Crash => {
            assert_eq!(run.status, "completed", "{what}");
            assert_eq!(ok_nodes(run), ["first", "second", "fan", "third"], "{what}");
            assert_eq!(
                run.state["trail"],
                json!(["first", "secondsecond", "fan", "666"]),
                "{what}"
            );
        }
        Scenario::Approval => {
            assert_eq!(run.status, "completed", "{what}");
            assert_eq!(ok_nodes(run), ["prepare", "approve", "execute"], "{what}");
            assert_eq!(
                run.state["trail"],
                json!(["prepare", "answer:yes", "executedexecuted"]),
                "{what}"
            );
        }
        Scenario::Subgraph => {
            assert_eq!(run.status, "completed", "{what}");
            assert_eq!(
                ok_nodes(run),
                ["p_before", "summarise", "p_after"],
                "{what}"
            );
            let child = run.child.as_ref().expect("a child run");
            assert_eq!(
                ok_nodes(child),
                ["c_check", "c_first", "c_second"],
                "{what}"
            );
            assert_eq!(
                run.state["trail"],
                json!([
                    "before",
                    "c_check",
                    "c_first",
                    "c_second",
                    "after:hellohello!"
                ]),
                "{what}"
            );
        }
        Scenario::KvRetry => {
            assert_eq!(run.status, "completed", "{what}");
            // One failed attempt of `flaky` and of each item, each without
            // a journal: the journal is the kept attempts' get and set.
            let failed = run
                .attempts
                .as_array()
                .unwrap()
                .iter()
                .filter(|a| a[2] != "ok")
                .count();
            assert_eq!(failed, 4, "{what}");
            let calls: Vec<(String, Value, String)> = run
                .journal
                .as_array()
                .unwrap()
                .iter()
                .map(|j| {
                    let op = j["request"]["op"].as_str().unwrap();
                    (
                        j["node_id"].as_str().unwrap().to_owned(),
                        j["item"].clone(),
                        op.to_owned(),
                    )
                })
                .collect();
            let call = |node: &str, item: Value, op: &str| (node.to_owned(), item, op.to_owned());
            let mut expected = vec![
                call("flaky", Value::Null, "get"),
                call("flaky", Value::Null, "set"),
            ];
            for item in 0..3 {
                expected.push(call("fan", json!(item), "get"));
                expected.push(call("fan", json!(item), "set"));
            }
            assert_eq!(calls, expected, "{what}");
            let kv: Vec<(&str, &str)> = run
                .kv
                .iter()
                .map(|(_, _, key, value)| (key.as_str(), value.as_str()))
                .collect();
            assert_eq!(
                kv,
                [
                    ("a", "a"),
                    ("b", "b"),
                    ("c", "c"),
                    ("flag", "flag"),
                    ("seen", "c")
                ],
                "{what}"
            );
        }
        Scenario::Cancel => {
            assert_eq!(run.status, "cancelled", "{what}");
            assert_eq!(ok_nodes(run), ["first", "second"], "{what}");
            assert_eq!(run.error["code"], "cancelled", "{what}");
        }
        Scenario::CancelWaiting => {
            assert_eq!(run.status, "cancelled", "{what}");
            assert_eq!(ok_nodes(run), ["prepare"], "{what}");
            assert_eq!(run.error["code"], "cancelled", "{what}");
        }
    }
}

const ITEM_ATTEMPTS: &str = "item_attempts";

/// A step row's attempts: `[node, attempt, status]`, and for a map step
/// one `["NODE item I", attempt, "ok"]` per item (the attempt its output
/// came from).
fn attempts_of(step: &Value) -> Vec<Value> {
    let node = step["node_id"].as_str().unwrap();
    let mut attempts = vec![json!([node, step["attempt"], step["status"]])];
    if let Some(items) = step["detail"]["items"].as_u64() {
        let later = &step["detail"][ITEM_ATTEMPTS];
        attempts.extend((0..items).map(|i| {
            let attempt = later[i.to_string()].as_u64().unwrap_or(1);
            json!([format!("{node} item {i}"), attempt, "ok"])
        }));
    }
    attempts
}

/// Plays `scenario` on `db` as a user would, with `point` armed; the id of
/// its run.
fn play(scenario: Scenario, db: &Db, point: Option<&str>) -> String {
    let files = files();
    let mut case = Case {
        db,
        point,
        killed: false,
    };
    let id = match scenario {
        Scenario::Crash => case.run(&files.crash, &[]),
        Scenario::Subgraph => case.run(&files.parent, &["--input", r#"{"text": "hello"}"#]),
        Scenario::KvRetry => case.run(&files.kv_retry, &[]),
        Scenario::Approval => {
            let id = case.run(&files.approval, &[]);
            assert_eq!(db.show(&id)["status"], "waiting", "{point:?}");
            answer(&mut case, &id);
            case.resumed(&id, &["resume", &id]);
            id
        }
        Scenario::CancelWaiting => {
            let id = case.run(&files.approval, &[]);
            cancel(&mut case, &id);
            id
        }
        Scenario::Cancel if point == Some("before-cancel-end") => {
            // Its runner died after `second`; the cancel is asked, and the
            // resume finds it.
            let out = db
                .command(
                    &["run", &files.crash, "--events"],
                    Some("after-commit:second"),
                )
                .output()
                .unwrap();
            assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
            let id = first_run_id(&out);
            cancel(&mut case, &id);
            case.resumed(&id, &["resume", &id]);
            id
        }
        Scenario::Cancel => {
            // Its runner frozen after `second`, as a long pause would, is
            // cancelled, then goes on: its next checkpoint is refused.
            let runner = frozen_crash_runner(db, files);
            let listed = json(&db.host(&["runs", "list", "--json"]));
            let id = listed[0]["id"].as_str().unwrap().to_owned();
            cancel(&mut case, &id);
            send_signal(runner.id(), libc::SIGCONT);
            let mut runner = runner;
            let status = wait_bounded(&mut runner, "the cancelled runner");
            assert_eq!(status.signal(), None, "the runner after the cancel");
            id
        }
    };
    assert!(
        point.is_none() || case.killed,
        "failpoint `{}` was never reached by scenario {}",
        point.unwrap_or_default(),
        scenario.name()
    );
    id
}

/// Answers the waiting run `id` (again, if the answer's process was killed:
/// then either nothing was written, or the answer was, and the run says
/// it was answered).
/// A `host run` of the crash scenario frozen (SIGSTOP) right after its node
/// `second` committed, as a long pause would freeze it; SIGCONT wakes it.
fn frozen_crash_runner(db: &Db, files: &Files) -> skillhost_tests::cli::KilledOnDrop {
    let runner = db
        .command(
            &["run", &files.crash, "--events"],
            Some("stop@after-commit:second"),
        )
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let runner = skillhost_tests::cli::KilledOnDrop::new(runner);
    wait_until_stopped(runner.id(), "the runner");
    runner
}

fn answer(case: &mut Case, id: &str) {
    let args = [
        "runs",
        "answer",
        id,
        "--data",
        r#"{"approved": true, "comment": "yes"}"#,
        "--by",
        "scorecard",
        "--queue",
    ];
    let (mut out, killed) = case.host(&args);
    if killed {
        out = case.host(&args).0;
        if !out.status.success() {
            assert!(
                stderr(&out).contains("was already answered"),
                "{}",
                stderr(&out)
            );
            return;
        }
    }
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Cancels run `id` (again, if the cancel's process was killed: a cancel
/// already asked is asked once more, which changes nothing, and one already
/// done is refused as such).
fn cancel(case: &mut Case, id: &str) {
    let args = ["runs", "cancel", id, "--by", "scorecard"];
    let (mut out, killed) = case.host(&args);
    if killed {
        out = case.host(&args).0;
        if !out.status.success() && case.db.show(id)["status"] == "cancelled" {
            return;
        }
    }
    assert!(out.status.success(), "{}", stderr(&out));
}

/// How the case compares with the undisturbed run: panics on a difference
/// that breaks a promise; returns the result for the table.
fn judge(row: &Row, backend: Backend, got: &Observed, want: &Observed) -> String {
    let what = format!("`{}` ({}) on {backend:?}", row.point, row.scenario.name());
    assert_eq!(got.status, want.status, "status after {what}");
    assert_eq!(got.error, want.error, "error after {what}");
    assert_eq!(got.state, want.state, "state after {what}");
    assert_eq!(
        got.checkpoints, want.checkpoints,
        "checkpoints after {what}"
    );
    assert_eq!(got.steps, want.steps, "steps after {what}");
    assert_eq!(got.journal, want.journal, "journal after {what}");
    assert_eq!(got.artifacts, want.artifacts, "artifacts after {what}");
    assert_eq!(got.kv, want.kv, "kv rows after {what}");
    assert_eq!(got.child, want.child, "the child run after {what}");
    if got.attempts == want.attempts {
        return "same".into();
    }
    // Only a skill whose behaviour depends on what it wrote outside the run
    // may take other attempts: its kv write before the kill stays (at least
    // once for the outside world), and the attempt after the resume reads
    // it; a node run again counts its attempts from 1.
    assert_eq!(row.scenario, Scenario::KvRetry, "attempts after {what}");
    let kept = |o: &Observed| -> Vec<(String, u64)> {
        o.attempts
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a[2] == "ok")
            .map(|a| (a[0].as_str().unwrap().to_owned(), a[1].as_u64().unwrap()))
            .collect()
    };
    let failed = |o: &Observed| {
        o.attempts
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a[2] != "ok")
            .count()
    };
    let mut differences: Vec<String> = kept(got)
        .into_iter()
        .zip(kept(want))
        .filter(|(g, w)| g != w)
        .map(|((node, g), (_, w))| format!("`{node}` kept attempt {g}, not {w}"))
        .collect();
    if failed(got) != failed(want) {
        differences.push(format!(
            "{} retried attempt(s) recorded, not {}",
            failed(got),
            failed(want)
        ));
    }
    format!("same; {}", differences.join("; "))
}

/// The invalid answer: run A and B wait, C runs (frozen after `second`); A
/// is answered with a value that does not fit. Nothing changes for B and C,
/// which go on to the ends an undisturbed run has; A is still waiting and
/// answerable.
fn invalid_answer(backend: Backend, approval: &Observed, crash: &Observed) -> String {
    let files = files();
    let db = Db::fresh(backend);
    let mut case = Case {
        db: &db,
        point: None,
        killed: false,
    };
    let a = case.run(&files.approval, &[]);
    let b = case.run(&files.approval, &[]);
    let mut runner = frozen_crash_runner(&db, files);
    let runs = json(&db.host(&["runs", "list", "--json"]));
    let c = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .find(|id| *id != a && *id != b)
        .unwrap();
    let before = |id: &str| {
        let shown = db.show(id);
        json!([
            shown["status"],
            shown["steps"],
            shown["state"],
            shown["waits"]
        ])
    };
    let (b_before, c_before) = (before(&b), before(&c));

    let out = db.host(&[
        "runs",
        "answer",
        &a,
        "--data",
        r#"{"approved": "yes"}"#,
        "--queue",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nothing was written"),
        "{}",
        stderr(&out)
    );
    let a_shown = db.show(&a);
    assert_eq!(a_shown["status"], "waiting");
    assert_eq!(a_shown["waits"][0]["answer"], Value::Null);
    assert_eq!(before(&b), b_before, "the other waiting run");
    assert_eq!(before(&c), c_before, "the running run");

    send_signal(runner.id(), libc::SIGCONT);
    assert!(
        wait_bounded(&mut runner, "the running run").success(),
        "the running run"
    );
    for id in [&a, &b] {
        answer(&mut case, id);
        case.resumed(id, &["resume", id]);
    }
    // Neither scenario writes kv: the database's rows are theirs alone.
    assert_eq!(&observe(&db, &c), crash, "the running run on {backend:?}");
    for id in [&a, &b] {
        assert_eq!(
            &observe(&db, id),
            approval,
            "an approval run on {backend:?}"
        );
    }
    "others untouched; answerable".into()
}

const SCENARIOS: [Scenario; 6] = [
    Scenario::Crash,
    Scenario::Approval,
    Scenario::Subgraph,
    Scenario::KvRetry,
    Scenario::Cancel,
    Scenario::CancelWaiting,
];

const BACKENDS: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

/// Runs `jobs` on `threads` threads; their results in order.
fn in_parallel<T: Send>(jobs: Vec<Box<dyn FnOnce() -> T + Send + '_>>, threads: usize) -> Vec<T> {
    let queue = Mutex::new(jobs.into_iter().enumerate().collect::<Vec<_>>());
    let results = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                loop {
                    let job = queue.lock().unwrap().pop();
                    let Some((i, job)) = job else { break };
                    // One failed case does not stop the others: every
                    // failure is reported at the end.
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                    results.lock().unwrap().push((i, result));
                }
            });
        }
    });
    let mut results = results.into_inner().unwrap();
    results.sort_by_key(|(i, _)| *i);
    let failed = results.iter().filter(|(_, r)| r.is_err()).count();
    assert_eq!(failed, 0, "{failed} case(s) failed: see their panics above");
    results.into_iter().map(|(_, r)| r.ok().unwrap()).collect()
}

#[test]
fn every_failpoint_on_sqlite_and_postgres() {
    let started = std::time::Instant::now();
    files();
    let threads = 3;
    // The undisturbed runs, one per scenario and backend.
    let cases: Vec<(Scenario, Backend)> = SCENARIOS
        .iter()
        .flat_map(|s| BACKENDS.iter().map(move |b| (*s, *b)))
        .collect();
    let references = in_parallel(
        cases
            .iter()
            .map(|&(scenario, backend)| {
                Box::new(move || {
                    let db = Db::fresh(backend);
                    let id = play(scenario, &db, None);
                    let run = observe(&db, &id);
                    check_reference(scenario, backend, &run);
                    run
                }) as Box<dyn FnOnce() -> Observed + Send>
            })
            .collect(),
        threads,
    );
    let reference = |scenario: Scenario, backend: Backend| {
        let i = cases
            .iter()
            .position(|c| *c == (scenario, backend))
            .unwrap();
        &references[i]
    };
    // The two backends' undisturbed runs agree.
    for scenario in SCENARIOS {
        let (sqlite, postgres) = (
            reference(scenario, Backend::Sqlite),
            reference(scenario, Backend::Postgres),
        );
        assert_eq!(sqlite, postgres, "{} on both backends", scenario.name());
    }

    let rows = rows();
    let mut jobs: Vec<Box<dyn FnOnce() -> String + Send + '_>> = Vec::new();
    for row in &rows {
        for backend in BACKENDS {
            let want = reference(row.scenario, backend);
            jobs.push(Box::new(move || {
                let db = Db::fresh(backend);
                let id = play(row.scenario, &db, Some(row.point));
                judge(row, backend, &observe(&db, &id), want)
            }));
        }
    }
    for backend in BACKENDS {
        let (approval, crash) = (
            reference(Scenario::Approval, backend),
            reference(Scenario::Crash, backend),
        );
        jobs.push(Box::new(move || invalid_answer(backend, approval, crash)));
    }
    let results = in_parallel(jobs, threads);

    let mut table = String::from(
        "| failpoint | scenario | SQLite | Postgres | reproduces |\n| --- | --- | --- | --- | --- |\n",
    );
    let mut results = results.into_iter();
    for row in &rows {
        let (sqlite, postgres) = (results.next().unwrap(), results.next().unwrap());
        table.push_str(&format!(
            "| `{}` | {} | {sqlite} | {postgres} | {} |\n",
            row.point,
            row.scenario.name(),
            row.bug
        ));
    }
    let (sqlite, postgres) = (results.next().unwrap(), results.next().unwrap());
    table.push_str(&format!(
        "| (none: an invalid answer) | approval | {sqlite} | {postgres} | {LANGGRAPH_INVALID_RESUME} |\n"
    ));
    compare_with_docs(&table);
    eprintln!("scorecard: {:.1} s", started.elapsed().as_secs_f64());
}

/// Compares `table` with `docs/replay.md`'s marked section, or writes it
/// there with `SKILLHOST_UPDATE_SCORECARD=1`.
fn compare_with_docs(table: &str) {
    const BEGIN: &str = "<!-- scorecard:begin -->\n";
    const END: &str = "<!-- scorecard:end -->";
    let path = skillhost_tests::repo_root().join("docs/replay.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text
        .find(BEGIN)
        .expect("docs/replay.md has <!-- scorecard:begin -->")
        + BEGIN.len();
    let end = text[start..]
        .find(END)
        .expect("docs/replay.md has <!-- scorecard:end -->")
        + start;
    if text[start..end] == *table {
        return;
    }
    if std::env::var("SKILLHOST_UPDATE_SCORECARD").is_ok_and(|v| v == "1") {
        let updated = format!("{}{table}{}", &text[..start], &text[end..]);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    panic!(
        "docs/replay.md's scorecard differs from the one this test made.\n\
         --- docs/replay.md\n{}\n+++ this run\n{table}\n\
         Rewrite it with: SKILLHOST_UPDATE_SCORECARD=1 cargo nextest run --workspace \
         -E 'binary(e2e) & test(/^scorecard::/)'",
        &text[start..end]
    );
}
