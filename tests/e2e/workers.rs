//! `host submit` and `host worker` as real processes on real databases,
//! including the fault tests: a worker SIGKILLed mid-run, Postgres restarted
//! mid-run, and a worker paused (SIGSTOP) past its lease expiry that must
//! not write after another worker took its run over. Every run must end
//! completed, with every node's writes applied exactly once and the final
//! state equal to an uninterrupted run's.

use skillhost_tests::cli::KilledOnDrop;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost_store::{RunStatus, Store};

pub(crate) fn fixture(path: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e")
        .join(path)
        .display()
        .to_string()
}

pub(crate) fn host_command(db: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(skillhost_tests::cli::host_bin());
    cmd.args(args)
        .env(
            "SKILLHOST_CACHE_DIR",
            skillhost_tests::shared_component_cache(),
        )
        .env("SKILLHOST_DATABASE_URL", db)
        // The schedule tests tick every second, below the host's default
        // minimum of a minute: their operator allows it.
        .env("SKILLHOST_MIN_SCHEDULE_INTERVAL", "1s")
        .env_remove("SKILLHOST_FAILPOINT")
        .stdin(Stdio::null());
    cmd
}

pub(crate) fn host(db: &str, args: &[&str]) -> Output {
    host_command(db, args).output().expect("run host")
}

pub(crate) fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "host failed ({:?}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn submit(db: &str, scenario: &str, input: &Value) -> String {
    let out = ok(host(
        db,
        &["submit", scenario, "--input", &input.to_string()],
    ));
    let id = out.trim().to_string();
    assert_eq!(id.len(), 36, "submit prints the run id, got {out:?}");
    id
}

/// A `host worker` process, its NDJSON events collected as they come.
pub(crate) struct Worker {
    child: KilledOnDrop,
    events: Receiver<Value>,
    seen: Vec<Value>,
}

impl Worker {
    pub(crate) fn start(db: &str, extra: &[&str]) -> Worker {
        Worker::start_at(db, extra, None)
    }

    /// A worker with `SKILLHOST_FAILPOINT=failpoint`.
    fn start_at(db: &str, extra: &[&str], failpoint: Option<&str>) -> Worker {
        let mut args = vec!["worker", "--json", "--poll", "50ms"];
        args.extend_from_slice(extra);
        let mut command = host_command(db, &args);
        if let Some(point) = failpoint {
            command.env("SKILLHOST_FAILPOINT", point);
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn host worker");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<Value>(&line) {
                    let _ = tx.send(event);
                }
            }
        });
        Worker {
            child: KilledOnDrop::new(child),
            events: rx,
            seen: Vec::new(),
        }
    }

    /// Waits for an event named `name`; returns it.
    pub(crate) fn wait_for(&mut self, name: &str, timeout: Duration) -> Value {
        if let Some(event) = self.seen.iter().find(|e| e["event"] == name) {
            return event.clone();
        }
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(event) => {
                    self.seen.push(event.clone());
                    if event["event"] == name {
                        return event;
                    }
                }
                Err(_) => panic!("no `{name}` event within {timeout:?}; saw {:?}", self.seen),
            }
        }
    }

    /// Waits until the process has stopped itself; panics after 30 s.
    fn wait_until_stopped(&self) {
        skillhost_tests::cli::wait_until_stopped(self.child.id(), "the worker");
    }

    fn signal(&self, signal: i32) {
        skillhost_tests::cli::send_signal(self.child.id(), signal);
    }

    /// SIGTERM, then the exit status and every event it printed.
    pub(crate) fn stop(mut self) -> (std::process::ExitStatus, Vec<Value>) {
        self.signal(libc::SIGTERM);
        let status = self.child.wait().unwrap();
        while let Ok(event) = self.events.recv_timeout(Duration::from_millis(500)) {
            self.seen.push(event);
        }
        (status, std::mem::take(&mut self.seen))
    }
}

/// Waits until every run in `ids` is finished; panics after `timeout`.
pub(crate) async fn wait_finished(store: &Store, ids: &[String], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let mut pending = Vec::new();
        for id in ids {
            let run = store.run(id).await.unwrap().unwrap();
            if !run.status.is_finished() {
                pending.push(format!("{id}: {} at {}", run.status, run.last_seq));
            }
        }
        if pending.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "runs not finished after {timeout:?}: {pending:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The state of an uninterrupted run of `scenario` with `input`.
fn reference_state(scenario: &str, input: &Value) -> Value {
    let out = ok(host(
        "sqlite:///nonexistent/unused.db",
        &[
            "run",
            scenario,
            "--durability",
            "none",
            "--json",
            "--input",
            &input.to_string(),
        ],
    ));
    serde_json::from_str::<Value>(&out).unwrap()["state"].clone()
}

/// Every run completed, with exactly one successful step and one checkpoint
/// per node, in order, and the state of an uninterrupted run.
async fn assert_exactly_once(
    store: &Store,
    ids: &[(String, Value)],
    scenario: &str,
    nodes: &[&str],
) {
    let mut references = std::collections::HashMap::new();
    for (id, input) in ids {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!(
            run.status,
            RunStatus::Completed,
            "run {id}: {:?}",
            run.error
        );
        let ok_steps: Vec<String> = store
            .steps(id)
            .await
            .unwrap()
            .into_iter()
            .filter(|s| s.status == skillhost_store::StepStatus::Ok)
            .map(|s| s.node_id)
            .collect();
        assert_eq!(ok_steps, nodes, "steps of run {id}");
        let checkpoints: Vec<u64> = store
            .checkpoints(id)
            .await
            .unwrap()
            .iter()
            .map(|c| c.seq)
            .collect();
        assert_eq!(
            checkpoints,
            (0..=nodes.len() as u64).collect::<Vec<_>>(),
            "checkpoints of run {id}"
        );
        let reference = references
            .entry(input.to_string())
            .or_insert_with(|| reference_state(scenario, input))
            .clone();
        let state = store.latest_state(id).await.unwrap().unwrap().state;
        assert_eq!(
            serde_json::to_string(&state).unwrap(),
            serde_json::to_string(&reference).unwrap(),
            "final state of run {id}"
        );
        assert_eq!(run.result.as_ref(), Some(&reference), "result of run {id}");
    }
}

const CRASH_NODES: &[&str] = &["first", "second", "fan", "third"];
const SLOW_NODES: &[&str] = &[
    "n01", "n02", "n03", "n04", "n05", "n06", "n07", "n08", "n09", "n10",
];

async fn submit_and_drain(db: &str) {
    let scenario = fixture("engine/crash.toml");
    let inputs = [json!({}), json!({"items": ["x", "yy"]}), json!({})];
    let ids: Vec<(String, Value)> = inputs
        .iter()
        .map(|input| (submit(db, &scenario, input), input.clone()))
        .collect();
    // A task-driven submission.
    let task_run = ok(host(
        db,
        &["submit", &scenario, "--task-id", "task-7", "--json"],
    ));
    let task_run: Value = serde_json::from_str(&task_run).unwrap();
    let task_run_id = task_run["run_id"].as_str().unwrap().to_string();

    let queued: Value = serde_json::from_str(&ok(host(
        db,
        &["runs", "list", "--status", "queued", "--json"],
    )))
    .unwrap();
    assert_eq!(queued.as_array().unwrap().len(), 4, "{queued}");

    let out = host(
        db,
        &["worker", "--exit-when-idle", "--concurrency", "2", "--json"],
    );
    let events = ok(out);
    assert_eq!(
        events
            .lines()
            .filter(|l| l.contains("\"finished\""))
            .count(),
        4,
        "{events}"
    );

    let completed: Value = serde_json::from_str(&ok(host(
        db,
        &["runs", "list", "--status", "completed", "--json"],
    )))
    .unwrap();
    assert_eq!(completed.as_array().unwrap().len(), 4, "{completed}");
    let store = Store::open(db).await.unwrap();
    let mut all = ids.clone();
    all.push((task_run_id.clone(), json!({})));
    assert_exactly_once(&store, &all, &scenario, CRASH_NODES).await;
    let task = store.current_checkpoint("task-7").await.unwrap().unwrap();
    assert_eq!((task.run_id.as_str(), task.seq), (task_run_id.as_str(), 4));
    assert!(
        store
            .list_runs(Some(RunStatus::Queued), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_and_worker_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    submit_and_drain(&format!("sqlite://{}", dir.path().join("q.db").display())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_and_worker_on_postgres() {
    submit_and_drain(&skillhost_tests::pg::fresh_database().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_and_worker_through_pgbouncer() {
    submit_and_drain(&skillhost_tests::pgbouncer::fresh_database().await.url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_run_is_replaced_by_the_other() {
    worker_killed_mid_run(skillhost_tests::pg::fresh_database().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_run_is_replaced_by_the_other_through_pgbouncer() {
    worker_killed_mid_run(skillhost_tests::pgbouncer::fresh_database().await.url).await;
}

async fn worker_killed_mid_run(db: String) {
    let scenario = fixture("workers/slow.toml");
    let ids: Vec<(String, Value)> = (0..6)
        .map(|i| {
            let input = json!({"label": format!("r{i}")});
            (submit(&db, &scenario, &input), input)
        })
        .collect();
    let ttl = ["--lease-ttl", "1s", "--concurrency", "2"];
    let mut doomed = Worker::start(&db, &ttl);
    let claimed = doomed.wait_for("claimed", Duration::from_secs(30));
    let survivor = Worker::start(&db, &ttl);
    // Mid-node of its first run(s).
    std::thread::sleep(Duration::from_millis(250));
    doomed.signal(libc::SIGKILL);
    let status = doomed.child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );

    let store = Store::open(&db).await.unwrap();
    let victim = claimed["run_id"].as_str().unwrap().to_string();
    let at_kill = store.run(&victim).await.unwrap().unwrap();
    assert_eq!(at_kill.status, RunStatus::Running);

    let all: Vec<String> = ids.iter().map(|(id, _)| id.clone()).collect();
    wait_finished(&store, &all, Duration::from_secs(120)).await;
    let (status, events) = survivor.stop();
    assert!(status.success(), "survivor exit: {status:?}");
    // The survivor took the victim over (new lease generation) and
    // resumed it from its last checkpoint.
    let takeover = events
        .iter()
        .find(|e| e["event"] == "claimed" && e["run_id"] == victim.as_str())
        .unwrap_or_else(|| panic!("no takeover of {victim}: {events:?}"));
    assert!(takeover["generation"].as_u64().unwrap() >= 2, "{takeover}");
    assert_exactly_once(&store, &ids, &scenario, SLOW_NODES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_ride_out_a_postgres_restart() {
    // Its own cluster: this test restarts it.
    let cluster = skillhost_tests::pg::Cluster::start();
    skillhost_tests::pg::create_database(&cluster.url("postgres"), "restart").await;
    let db = cluster.url("restart");
    let scenario = fixture("workers/slow.toml");
    let ids: Vec<(String, Value)> = (0..6)
        .map(|i| {
            let input = json!({"label": format!("p{i}")});
            (submit(&db, &scenario, &input), input)
        })
        .collect();
    let args = ["--lease-ttl", "5s", "--concurrency", "2"];
    let mut a = Worker::start(&db, &args);
    let b = Worker::start(&db, &args);
    a.wait_for("claimed", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(300));

    cluster.stop_fast();
    std::thread::sleep(Duration::from_secs(2));
    cluster.start_again();

    let store = Store::open(&db).await.unwrap();
    let all: Vec<String> = ids.iter().map(|(id, _)| id.clone()).collect();
    wait_finished(&store, &all, Duration::from_secs(120)).await;
    for worker in [a, b] {
        let (status, _) = worker.stop();
        assert!(status.success(), "{status:?}");
    }
    assert_exactly_once(&store, &ids, &scenario, SLOW_NODES).await;
    store.close().await;
}

/// The runs the failover test drains beside its 30 `slow` ones: the
/// research example's default review (a report artifact), approval runs
/// answered (`host runs approve`/`reject`) while the primary is down, and
/// chat runs that remember a value (a kv write), in the order a worker
/// claims them (queued first, claimed first). `research` of the research
/// runs (all with the same input).
fn mixed_runs(db: &str, research: usize) -> Vec<(String, &'static str, Value)> {
    let root = skillhost_tests::repo_root();
    let review = root.join("examples/research/scenario.toml");
    let chat = root.join("examples/chat/scenario.toml");
    let approval = fixture("engine/approval.toml");
    let mut runs = Vec::new();
    for i in 0..4 {
        let input = json!({"action": format!("deploy-{i}")});
        runs.push((submit(db, &approval, &input), "approval", input));
    }
    for i in 0..4 {
        let input = json!({"message": format!("remember my colour {i} is green-{i}")});
        runs.push((submit(db, chat.to_str().unwrap(), &input), "chat", input));
    }
    for _ in 0..research {
        let input = json!({"query": "retrieval augmented generation"});
        runs.push((
            submit(db, review.to_str().unwrap(), &input),
            "research",
            input,
        ));
    }
    runs
}

/// Answers approval run `index` of [`mixed_runs`]: the even ones approved,
/// the odd ones rejected. Through HAProxy, possibly while the primary is
/// down: a command that cannot reach the database when it starts (or that
/// reaches a node mid-promotion, still a standby) fails with a clear error
/// (never a panic) and is run again, for up to 90 s.
fn answer_approval(db: &str, id: &str, index: usize) {
    let args: Vec<&str> = if index.is_multiple_of(2) {
        vec!["runs", "approve", id, "--by", "alice"]
    } else {
        vec!["runs", "reject", id, "--by", "bob"]
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut tried = false;
    loop {
        let out = host(db, &args);
        if out.status.success() {
            return;
        }
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        // An earlier attempt's connection broke after its answer landed.
        if tried && stderr.contains("already answered") {
            return;
        }
        tried = true;
        assert_ne!(out.status.code(), Some(101), "host panicked: {stderr}");
        assert!(
            [
                "cannot reach",
                "unreachable",
                "standby (read-only)",
                "error communicating with database",
            ]
            .iter()
            .any(|outage| stderr.contains(outage)),
            "{args:?} failed, not for the outage: {stderr}"
        );
        assert!(
            Instant::now() < deadline,
            "{args:?} never got through: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// What a run left in the store, by the counts the exactly-once promise is
/// about: its ok steps and every step row, checkpoints, journal rows (kv
/// writes among them) and artifacts (bytes), and its result.
#[derive(Debug, PartialEq)]
struct RunRecord {
    status: RunStatus,
    ok_steps: Vec<String>,
    /// Every step row: node, status and attempt (a failed attempt too).
    step_rows: Vec<(String, String, u32)>,
    checkpoints: Vec<u64>,
    journal: Vec<(u64, String, String, Value, Value)>,
    kv_writes: usize,
    artifacts: Vec<(String, Vec<u8>)>,
    result: Option<Value>,
}

async fn run_record(store: &Store, id: &str) -> RunRecord {
    let run = store.run(id).await.unwrap().unwrap();
    let steps = store.steps(id).await.unwrap();
    let journal = store.journal(id).await.unwrap();
    let mut artifacts = Vec::new();
    for artifact in store.artifacts(id).await.unwrap() {
        let bytes = store
            .artifact_bytes(&artifact.digest)
            .await
            .unwrap()
            .unwrap();
        artifacts.push((artifact.name, bytes));
    }
    RunRecord {
        status: run.status,
        ok_steps: steps
            .iter()
            .filter(|s| s.status == skillhost_store::StepStatus::Ok)
            .map(|s| s.node_id.clone())
            .collect(),
        step_rows: steps
            .iter()
            .map(|s| (s.node_id.clone(), s.status.to_string(), s.attempt))
            .collect(),
        checkpoints: store
            .checkpoints(id)
            .await
            .unwrap()
            .iter()
            .map(|c| c.seq)
            .collect(),
        kv_writes: journal
            .iter()
            .filter(|e| e.kind == "kv" && e.request["op"] == "set")
            .count(),
        journal: journal
            .into_iter()
            .map(|e| (e.seq, e.node_id, e.kind, e.request, e.response))
            .collect(),
        artifacts,
        result: run.result,
    }
}

/// Two workers drain 30 queued `slow` runs, four research, four approval
/// and four chat runs (kv writes) through HAProxy while the Patroni primary
/// is SIGKILLed (its Patroni and its postmaster) twice and the synchronous
/// standby promoted each time (`support/patroni.rs`); the approvals are
/// answered while the primary is down. Every run completes, each node
/// applied once, with an uninterrupted run's state; every research, approval
/// and chat run left the same steps, checkpoints, journal rows, kv writes
/// and artifacts (byte for byte) as the same run drained undisturbed on
/// another database of the same cluster; and each worker said, in its
/// events, that the database was unreachable and when it was back.
///
/// Two Patroni nodes, not three: a third only adds a replica that is never
/// promoted (synchronous mode promotes the synchronous standby) and another
/// Postgres on CI's two cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_ride_out_two_patroni_failovers() {
    use skillhost_tests::patroni::Ha;
    let mut ha = tokio::task::spawn_blocking(|| {
        let ha = Ha::start(2);
        ha.wait_sync_standby();
        ha
    })
    .await
    .unwrap();
    ha.create_database("failover").await;
    ha.create_database("reference").await;

    // The undisturbed runs: the same inputs, drained before any failover.
    let reference_db = ha.url("reference");
    // One research run: the four disturbed ones share its input.
    let references = mixed_runs(&reference_db, 1);
    let drain = ["worker", "--exit-when-idle", "--concurrency", "4", "--json"];
    ok(host(&reference_db, &drain));
    for (i, (id, _, _)) in references.iter().filter(|r| r.1 == "approval").enumerate() {
        answer_approval(&reference_db, id, i);
    }
    ok(host(&reference_db, &drain));
    let reference_store = Store::open(&reference_db).await.unwrap();
    let mut expected = std::collections::HashMap::new();
    for (id, kind, input) in &references {
        let record = run_record(&reference_store, id).await;
        assert_eq!(
            record.status,
            RunStatus::Completed,
            "reference {kind} run {id}"
        );
        expected.insert(input.to_string(), record);
    }
    reference_store.close().await;

    let db = ha.url("failover");
    let mixed = mixed_runs(&db, 4);
    let scenario = fixture("workers/slow.toml");
    let ids: Vec<(String, Value)> = (0..30)
        .map(|i| {
            let input = json!({"label": format!("f{i}")});
            (submit(&db, &scenario, &input), input)
        })
        .collect();
    // Leases (30 s, the default) outlive a failover (about 10 s): the
    // database's clock runs on through the outage, and a shorter lease
    // expires meanwhile and is taken over after it, the node in flight run
    // again by its new runner (its kv write repeated; docs/workers.md).
    let args = ["--lease-ttl", "30s", "--concurrency", "2"];
    let mut a = Worker::start(&db, &args);
    let b = Worker::start(&db, &args);
    a.wait_for("claimed", Duration::from_secs(30));
    let store = Store::open(&db).await.unwrap();
    let approvals: Vec<String> = mixed
        .iter()
        .filter(|r| r.1 == "approval")
        .map(|r| r.0.clone())
        .collect();
    // The approvals wait before the first kill: their answers go in while
    // the primary is down.
    let deadline = Instant::now() + Duration::from_secs(60);
    for id in &approvals {
        while store.run(id).await.unwrap().unwrap().status != RunStatus::Waiting {
            assert!(Instant::now() < deadline, "approval run {id} never waited");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    for kill in 0..2 {
        let mut finished = 0;
        for (id, _) in &ids {
            finished += usize::from(store.run(id).await.unwrap().unwrap().status.is_finished());
        }
        eprintln!("failover {kill}: {finished} of {} runs finished", ids.len());
        if kill == 0 {
            assert!(finished < ids.len(), "the first kill came after the drain");
        }
        let answering: Vec<(usize, String)> = approvals
            .iter()
            .cloned()
            .enumerate()
            .filter(|(i, _)| i / 2 == kill)
            .collect();
        let answer_db = db.clone();
        ha = tokio::task::spawn_blocking(move || {
            ha.wait_sync_standby();
            let killed = ha.kill_primary();
            // Answered while there is no primary: each command rides the
            // outage out or fails clearly and is run again.
            let answers = std::thread::spawn(move || {
                for (i, id) in answering {
                    answer_approval(&answer_db, &id, i);
                }
            });
            let promoted = ha.wait_primary();
            assert_ne!(killed, promoted);
            ha.restart(killed);
            answers.join().expect("the approvals were answered");
            ha
        })
        .await
        .unwrap();
    }
    let mut all: Vec<String> = ids.iter().map(|(id, _)| id.clone()).collect();
    all.extend(mixed.iter().map(|r| r.0.clone()));
    wait_finished(&store, &all, Duration::from_secs(180)).await;
    let mut outages = Vec::new();
    for worker in [a, b] {
        let (status, events) = worker.stop();
        assert!(status.success(), "{status:?}\n{}", ha.logs());
        let unreachable = events
            .iter()
            .filter(|e| e["event"] == "database_unreachable")
            .count();
        let back: Vec<u64> = events
            .iter()
            .filter(|e| e["event"] == "database_back")
            .map(|e| e["out_ms"].as_u64().unwrap())
            .collect();
        assert!(
            unreachable >= 2,
            "two outages, {unreachable} said: {events:?}"
        );
        assert_eq!(back.len(), unreachable, "every outage ends: {events:?}");
        // Each failover is an outage of seconds. Besides them a worker may
        // see a blip under a millisecond (reported as 0 ms; seen once in
        // CI, beside two of 10.7 and 11.0 s): a statement refused (the
        // demoted primary answers `read-only transaction`) just before
        // another one is answered.
        assert!(back.iter().all(|&ms| ms < 60_000), "outages of {back:?} ms");
        assert!(
            back.iter().filter(|&&ms| ms >= 100).count() >= 2,
            "two failovers, each out for a while: outages of {back:?} ms"
        );
        outages.extend(back);
    }
    eprintln!("the workers saw outages of {outages:?} ms");
    assert_exactly_once(&store, &ids, &scenario, SLOW_NODES).await;
    for (id, kind, input) in &mixed {
        let reference = &expected[&input.to_string()];
        let record = run_record(&store, id).await;
        let failed: Vec<Value> = store
            .steps(id)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|s| s.error)
            .collect();
        assert_eq!(
            &record, reference,
            "{kind} run {id} ({input}) differs from its undisturbed run; failed attempts: {failed:?}"
        );
    }
    let kv_writes: usize = expected.values().map(|r| r.kv_writes).sum();
    assert_eq!(kv_writes, 4, "each chat run remembers one value");
    assert_eq!(
        expected
            .values()
            .filter(|r| !r.artifacts.is_empty())
            .count(),
        5,
        "the research report and the chat replies are compared"
    );
    store.close().await;
    tokio::task::spawn_blocking(move || drop(ha)).await.unwrap();
}

/// With asynchronous replication a failover can lose acknowledged commits
/// (docs/workers.md): the primary's WAL sender is stopped while a worker
/// runs `slow` runs, so the checkpoints it commits then reach no replica,
/// and the primary is SIGKILLed (its Patroni, postmaster and WAL sender). The promoted replica holds older
/// checkpoints than the worker wrote; the worker's next commit is refused
/// by the sequence guard, it gives the run back, and the run is claimed
/// again from the checkpoint that survived and completes with each node
/// applied once and an uninterrupted run's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_commits_a_patroni_failover_lost_resumes_from_what_survived() {
    use skillhost_tests::patroni::Ha;
    let ha = tokio::task::spawn_blocking(|| Ha::start_asynchronous(2))
        .await
        .unwrap();
    ha.create_database("lossy").await;
    let db = ha.url("lossy");
    let scenario = fixture("workers/slow.toml");
    let ids: Vec<(String, Value)> = (0..2)
        .map(|i| {
            let input = json!({"label": format!("a{i}")});
            (submit(&db, &scenario, &input), input)
        })
        .collect();
    let store = Store::open(&db).await.unwrap();
    let mut worker = Worker::start(&db, &["--lease-ttl", "5s", "--concurrency", "2"]);
    worker.wait_for("claimed", Duration::from_secs(30));
    let last_seqs = async |store: &Store| {
        let mut seqs = Vec::new();
        for (id, _) in &ids {
            seqs.push(store.run(id).await.unwrap().unwrap().last_seq);
        }
        seqs
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while last_seqs(&store).await.iter().all(|&seq| seq < 2) {
        assert!(Instant::now() < deadline, "no run got going");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // From here on nothing the primary commits reaches the replica.
    let (ha, paused) = tokio::task::spawn_blocking(move || {
        let paused = ha.pause_replication();
        (ha, paused)
    })
    .await
    .unwrap();
    let at_pause = last_seqs(&store).await;
    let wal_at_pause = ha.wal_position().await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let at_kill = loop {
        let now = last_seqs(&store).await;
        // Two more checkpoints of a run still going (or its finish).
        if now
            .iter()
            .zip(&at_pause)
            .any(|(now, then)| *now >= then + 2)
        {
            break now;
        }
        assert!(Instant::now() < deadline, "the runs made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // What the replica lacks at the kill (Patroni promotes it only if
    // that is under `maximum_lag_on_failover`).
    let unreplicated = ha
        .wal_position()
        .await
        .zip(wal_at_pause)
        .map(|(now, then)| now.saturating_sub(then));
    let ha = tokio::task::spawn_blocking(move || {
        let mut ha = ha;
        ha.kill_primary();
        ha.kill_paused(&paused);
        ha.wait_primary();
        ha
    })
    .await
    .unwrap();
    eprintln!(
        "last checkpoints at the pause {at_pause:?}, at the kill {at_kill:?}; \
         {unreplicated:?} bytes of WAL written while replication was paused"
    );

    let all: Vec<String> = ids.iter().map(|(id, _)| id.clone()).collect();
    wait_finished(&store, &all, Duration::from_secs(120)).await;
    let (status, events) = worker.stop();
    assert!(status.success(), "{status:?}\n{}", ha.logs());
    // A run that lost checkpoints was claimed again from an older one than
    // the worker had written.
    let reclaimed = ids.iter().enumerate().any(|(i, (id, _))| {
        events.iter().any(|e| {
            e["event"] == "claimed"
                && e["run_id"] == id.as_str()
                && e["from_seq"]
                    .as_u64()
                    .is_some_and(|seq| seq > 0 && seq < at_kill[i])
        })
    });
    for event in events.iter().filter(|e| e["event"] != "finished") {
        eprintln!("{event}");
    }
    // Checkpoints only move forward: a claim from one older than the
    // primary acknowledged at the kill found them lost.
    assert!(
        reclaimed,
        "no run resumed from a surviving checkpoint: {events:?}"
    );
    assert_exactly_once(&store, &ids, &scenario, SLOW_NODES).await;
    store.close().await;
    tokio::task::spawn_blocking(move || drop(ha)).await.unwrap();
}

/// A completed run's last commit writes its end and gives its lease back,
/// so a renewal between that commit and the engine's return finds the
/// lease gone. Held there (`pause=…@after-commit:n10`: the run's task
/// waits 2 s while its lease, of 300 ms, is renewed every 100 ms), the
/// worker finds the run ended under its own lease: it reports the run
/// finished, completed, and no lost lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_after_the_workers_own_last_commit_is_not_a_lost_lease() {
    let db = skillhost_tests::pg::fresh_database().await;
    let scenario = fixture("workers/slow.toml");
    let id = submit(&db, &scenario, &json!({"label": "own end"}));
    let mut worker = Worker::start_at(
        &db,
        &["--lease-ttl", "300ms"],
        Some("pause=2000@after-commit:n10"),
    );
    let finished = worker.wait_for("finished", Duration::from_secs(60));
    assert_eq!(finished["run_id"], id.as_str(), "{finished}");
    assert_eq!(finished["status"], "completed", "{finished}");
    let (_, events) = worker.stop();
    assert!(
        !events.iter().any(|e| e["event"] == "lease_lost"),
        "{events:?}"
    );
    let store = Store::open(&db).await.unwrap();
    let run = store.run(&id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_exactly_once(
        &store,
        std::slice::from_ref(&(id, json!({"label": "own end"}))),
        &scenario,
        SLOW_NODES,
    )
    .await;
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_worker_cannot_write_after_a_takeover() {
    paused_worker_after_a_takeover(Pause::MidRun).await;
}

/// Paused after its claim but before it read the run, the worker wakes to
/// a run the heir has finished: it says it lost the lease there too, and
/// does not count the run as its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_paused_before_it_read_its_run_reports_the_lost_lease() {
    paused_worker_after_a_takeover(Pause::BeforeResume).await;
}

/// Where the first worker is paused.
enum Pause {
    /// By SIGSTOP from the test, 150 ms into the run.
    MidRun,
    /// By itself, at the `stop@worker-before-resume` failpoint.
    BeforeResume,
}

/// A worker paused with its run's lease, the run taken over and finished
/// by another: woken, it reports `lease_lost` and writes nothing.
async fn paused_worker_after_a_takeover(pause: Pause) {
    let db = skillhost_tests::pg::fresh_database().await;
    let scenario = fixture("workers/slow.toml");
    let input = json!({"label": "paused"});
    let id = submit(&db, &scenario, &input);
    let ttl = ["--lease-ttl", "1s"];
    let mut paused = match pause {
        Pause::MidRun => {
            let mut worker = Worker::start(&db, &ttl);
            worker.wait_for("claimed", Duration::from_secs(30));
            std::thread::sleep(Duration::from_millis(150));
            worker.signal(libc::SIGSTOP);
            worker
        }
        Pause::BeforeResume => {
            let mut worker = Worker::start_at(&db, &ttl, Some("stop@worker-before-resume"));
            worker.wait_for("claimed", Duration::from_secs(30));
            worker.wait_until_stopped();
            worker
        }
    };

    let store = Store::open(&db).await.unwrap();
    let at_pause = store.run(&id).await.unwrap().unwrap();
    assert!(!at_pause.status.is_finished(), "the run finished too soon");

    // Another worker takes the run over once the lease expires, and finishes it.
    let mut heir = Worker::start(&db, &ttl);
    let takeover = heir.wait_for("claimed", Duration::from_secs(30));
    assert_eq!(takeover["generation"], 2, "{takeover}");
    wait_finished(&store, std::slice::from_ref(&id), Duration::from_secs(60)).await;
    let history = (
        store.checkpoints(&id).await.unwrap(),
        store.steps(&id).await.unwrap(),
    );

    // The paused worker wakes up holding a stale lease: it is told so, and
    // writes nothing.
    paused.signal(libc::SIGCONT);
    let lost = paused.wait_for("lease_lost", Duration::from_secs(30));
    assert_eq!(lost["run_id"], id.as_str());
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        (
            store.checkpoints(&id).await.unwrap(),
            store.steps(&id).await.unwrap()
        ),
        history
    );
    // Each worker's report counts the run once: the heir's completed, the
    // paused one's lost.
    for (worker, completed, lost) in [(paused, 0, 1), (heir, 1, 0)] {
        let (status, events) = worker.stop();
        assert!(status.success(), "{status:?}");
        let stopped = events.iter().find(|e| e["event"] == "stopped").unwrap();
        assert_eq!(stopped["report"]["completed"], completed, "{stopped}");
        assert_eq!(stopped["report"]["lease_lost"], lost, "{stopped}");
    }
    assert_exactly_once(&store, &[(id, input)], &scenario, SLOW_NODES).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_releases_runs_in_flight() {
    let db = skillhost_tests::pg::fresh_database().await;
    let scenario = fixture("workers/slow.toml");
    let input = json!({"label": "term"});
    let id = submit(&db, &scenario, &input);
    // No grace: the in-flight run is stopped and handed back at once.
    let mut worker = Worker::start(&db, &["--grace", "0s"]);
    worker.wait_for("claimed", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(150));
    let (status, events) = worker.stop();
    assert!(status.success(), "{status:?}");
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "released" && e["run_id"] == id.as_str()),
        "{events:?}"
    );
    let store = Store::open(&db).await.unwrap();
    let run = store.run(&id).await.unwrap().unwrap();
    assert_eq!((run.status, run.lease_owner), (RunStatus::Queued, None));
    let resumed_from = run.last_seq;

    // The next worker resumes it from its last checkpoint.
    let out = ok(host(&db, &["worker", "--exit-when-idle", "--json"]));
    let claimed: Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_eq!(claimed["from_seq"], resumed_from);
    assert_exactly_once(&store, &[(id, input)], &scenario, SLOW_NODES).await;
}

/// `host bench postgres` on a real server: it keeps `--runs` in flight for
/// one untimed round and `--rounds` timed ones, and every run it starts
/// completes with all its nodes checkpointed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_benchmark_completes_every_run_it_starts() {
    let db = skillhost_tests::pg::fresh_database().await;
    let out = ok(host(
        &db,
        &[
            "bench",
            "postgres",
            "--json",
            "--runs",
            "3",
            "--rounds",
            "2",
            "--single-runs",
            "1",
        ],
    ));
    let figures: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (figures["runs"].as_u64(), figures["nodes"].as_u64()),
        (Some(3), Some(10))
    );
    for key in ["per_node_us_single", "node_steps_per_s"] {
        assert!(
            figures[key].as_f64().is_some_and(|v| v > 0.0),
            "{key}: {figures}"
        );
    }
    // 5 warm-up and 1 timed single runs, then 3 warm-up and 3 x 2 timed ones.
    let store = Store::open(&db).await.unwrap();
    let runs = store.list_runs(None, 100).await.unwrap();
    assert_eq!(runs.len(), 6 + 3 + 6, "{runs:?}");
    for run in &runs {
        assert_eq!(
            (run.status, run.last_seq),
            (RunStatus::Completed, 10),
            "{}",
            run.id
        );
    }
}

#[test]
fn runs_prune_keeps_unfinished_runs() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("p.db").display());
    let scenario = fixture("engine/crash.toml");
    let done = submit(&db, &scenario, &json!({}));
    ok(host(&db, &["worker", "--exit-when-idle"]));
    let queued = submit(&db, &scenario, &json!({}));
    // Nothing is old enough yet.
    let report: Value = serde_json::from_str(&ok(host(
        &db,
        &["runs", "prune", "--older-than", "7d", "--json"],
    )))
    .unwrap();
    assert_eq!(report["runs"], json!([]));
    let report: Value = serde_json::from_str(&ok(host(
        &db,
        &["runs", "prune", "--older-than", "0s", "--json"],
    )))
    .unwrap();
    assert_eq!(report["runs"], json!([done]));
    let listed = ok(host(&db, &["runs", "list", "--json"]));
    assert!(
        listed.contains(&queued) && !listed.contains(&done),
        "{listed}"
    );
    ok(host(&db, &["runs", "retention", "crash", "30d"]));
    let settings = ok(host(&db, &["runs", "retention", "--json"]));
    assert!(settings.contains("2592000000"), "{settings}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_is_refused_while_a_worker_runs_the_run() {
    resume_refused_while_a_worker_runs(skillhost_tests::pg::fresh_database().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_is_refused_while_a_worker_runs_the_run_through_pgbouncer() {
    resume_refused_while_a_worker_runs(skillhost_tests::pgbouncer::fresh_database().await.url)
        .await;
}

async fn resume_refused_while_a_worker_runs(db: String) {
    let scenario = fixture("workers/slow.toml");
    let input = json!({"label": "busy"});
    let id = submit(&db, &scenario, &input);
    let mut worker = Worker::start(&db, &["--owner", "worker-busy"]);
    worker.wait_for("claimed", Duration::from_secs(30));
    let out = host(&db, &["resume", &id]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(
        message.contains("being run by `worker-busy`") && message.contains("lease until"),
        "{message}"
    );
    worker.wait_for("finished", Duration::from_secs(60));
    let (status, _) = worker.stop();
    assert!(status.success(), "{status:?}");
    let store = Store::open(&db).await.unwrap();
    assert_exactly_once(&store, &[(id, input)], &scenario, SLOW_NODES).await;
}

/// Workers creating and finishing many runs at once share statements (group
/// commit), yet each write keeps its own verdict: a duplicate run id is
/// refused, a fenced finish of a run taken over is told its lease was lost,
/// a second finish is a conflict, and two runs of one task leave one task row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grouped_creates_and_finishes_keep_their_own_verdicts() {
    use skillhost_tests::store_fixtures::new_run;
    let db = skillhost_tests::pg::fresh_database().await;
    let store = Store::open(&db).await.unwrap();
    let ids: Vec<String> = (0..40).map(|i| format!("r{i:02}")).collect();

    // Every run created twice at once, r00 and r01 for one task.
    let mut creating = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        for _ in 0..2 {
            let (store, run) = (store.clone(), new_run(id, json!({"n": i})));
            let task = (i < 2).then_some("shared");
            creating.push(tokio::spawn(async move {
                store.enqueue_run_for_task(&run, task).await
            }));
        }
    }
    let mut created = 0;
    for task in creating {
        match task.await.unwrap() {
            Ok(()) => created += 1,
            Err(e) => assert!(e.is_conflict(), "{e}"),
        }
    }
    assert_eq!(created, ids.len());
    for id in &ids {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!((run.status, run.last_seq), (RunStatus::Queued, 0), "{id}");
        assert_eq!(store.latest_state(id).await.unwrap().unwrap().seq, 0);
    }
    let shared = store.current_checkpoint("shared").await.unwrap().unwrap();
    assert!(
        ["r00", "r01"].contains(&shared.run_id.as_str()),
        "{shared:?}"
    );

    // r39's first holder lost its lease to a second one.
    let first = store
        .acquire_lease("r39", "first", Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    store
        .acquire_lease("r39", "second", Duration::from_secs(60))
        .await
        .unwrap();
    let stale = store.fenced(first);

    // Every run finished twice at once (r39 once, by its stale holder).
    let mut finishing = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let copies = if i == 39 { 1 } else { 2 };
        for _ in 0..copies {
            let handle = if i == 39 {
                stale.clone()
            } else {
                store.clone()
            };
            let (id, result) = (id.clone(), json!({"n": i}));
            finishing.push((
                i,
                tokio::spawn(async move {
                    handle
                        .finish_run(&id, RunStatus::Completed, Some(&result), None)
                        .await
                }),
            ));
        }
    }
    let mut finished = vec![0; ids.len()];
    for (i, task) in finishing {
        match task.await.unwrap() {
            Ok(()) => finished[i] += 1,
            Err(e) if i == 39 => assert!(e.is_lease_lost(), "{e}"),
            Err(e) => assert!(e.is_conflict(), "{e}"),
        }
    }
    for (i, id) in ids.iter().enumerate() {
        let run = store.run(id).await.unwrap().unwrap();
        if i == 39 {
            assert_eq!(finished[i], 0);
            assert_eq!(run.status, RunStatus::Running);
            assert_eq!(run.lease_owner.as_deref(), Some("second"));
        } else {
            assert_eq!(finished[i], 1, "{id}");
            assert_eq!(run.status, RunStatus::Completed);
            assert_eq!(run.result, Some(json!({"n": i})));
            assert_eq!(run.lease_owner, None);
        }
    }
    store.close().await;
}

/// SIGTERM with enough grace: the worker claims nothing more, but the run
/// in flight finishes on it (nothing is released) before it exits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_runs_in_flight_finish_within_the_grace() {
    let db = skillhost_tests::pg::fresh_database().await;
    let scenario = fixture("workers/slow.toml");
    let input = json!({"label": "grace"});
    let id = submit(&db, &scenario, &input);
    let mut worker = Worker::start(&db, &["--grace", "60s"]);
    worker.wait_for("claimed", Duration::from_secs(30));
    std::thread::sleep(Duration::from_millis(150));
    // Queued after the signal: the stopping worker must leave it alone.
    worker.signal(libc::SIGTERM);
    worker.wait_for("stopping", Duration::from_secs(30));
    let late = submit(&db, &scenario, &json!({"label": "late"}));
    let (status, events) = worker.stop();
    assert!(status.success(), "{status:?}");
    assert!(
        events.iter().any(|e| e["event"] == "finished"
            && e["run_id"] == id.as_str()
            && e["status"] == "completed"),
        "{events:?}"
    );
    assert!(
        !events.iter().any(|e| e["event"] == "released"),
        "{events:?}"
    );
    let store = Store::open(&db).await.unwrap();
    let queued = store.run(&late).await.unwrap().unwrap();
    assert_eq!(
        (queued.status, queued.lease_owner),
        (RunStatus::Queued, None)
    );
    assert_exactly_once(&store, &[(id, input)], &scenario, SLOW_NODES).await;
    store.close().await;
}

/// Claim isolation at scale: `host bench claims` with its defaults, 64
/// workers over 8 connection pools claiming 1,000 queued runs (half under
/// 40 concurrency keys, a quarter under a scenario limit of 8, priorities
/// -2 to 2), holding each for 2 ms. The benchmark fails on any store error
/// (a serialisation failure or deadlock included), a run claimed twice, or
/// a key or the limit exceeded while it runs; afterwards the database shows
/// every run finished after exactly one claim (lease generation 1).
async fn claims_stay_isolated(db: &str, direct: &str) {
    let out = host(db, &["bench", "claims", "--json", "--hold", "2ms"]);
    let figures: Value = serde_json::from_str(&ok(out)).unwrap();
    // The figures, for the test's log (a debug build's: not to compare).
    eprintln!("host bench claims on {db}: {figures}");
    assert_eq!(figures["runs"], 1000, "{figures}");
    assert_eq!(figures["workers"], 64, "{figures}");
    assert_eq!(figures["claimed"], 1000, "{figures}");
    assert_eq!(figures["claimed_twice"], 0, "{figures}");
    assert_eq!(figures["most_running_per_key"], 1, "{figures}");
    let limited = figures["most_running_limited"].as_u64().unwrap();
    assert!((1..=8).contains(&limited), "{figures}");
    for figure in ["claims_per_s", "claim_ms_median", "claim_ms_p99"] {
        assert!(figures[figure].as_f64().unwrap() > 0.0, "{figures}");
    }
    assert!(
        figures["claim_ms_p99"].as_f64() >= figures["claim_ms_median"].as_f64(),
        "{figures}"
    );

    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(direct).await.unwrap();
    let (total, once): (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE status = 'completed' AND lease_generation = 1) \
         FROM runs WHERE scenario_name LIKE 'claims-%'",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!((total, once), (1000, 1000));
    conn.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_stay_isolated_across_64_workers_on_postgres() {
    let db = skillhost_tests::pg::fresh_database().await;
    claims_stay_isolated(&db, &db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_stay_isolated_across_64_workers_through_pgbouncer() {
    let pooled = skillhost_tests::pgbouncer::fresh_database().await;
    claims_stay_isolated(&pooled.url, &pooled.direct).await;
}
