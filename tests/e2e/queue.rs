//! The queue's flow control and schedules through the real `host` binary:
//! `host worker --schedules` on two workers queueing each tick exactly once
//! and a later worker catching up on missed ticks to its limit; the same
//! idempotency key submitted by racing processes giving one run (and
//! `host run` with it getting that run); a concurrency key holding a
//! second run until the first ends across two workers; claims in priority
//! order; and the bad inputs (a cron that does not parse, a zero
//! concurrency, a key that does not compile, an empty key) refused with
//! exit 2. Both backends, Postgres for several workers at once.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use skillhost_store::{RunStatus, Store};

use crate::workers::{Worker, fixture, host, host_command, ok, wait_finished};

fn sqlite_db(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("queue.db").display())
}

/// Every run in the database, as `runs list --json` shows them.
fn runs(db: &str) -> Vec<Value> {
    let listed: Value = serde_json::from_str(&ok(host(
        db,
        &["runs", "list", "--json", "--limit", "1000"],
    )))
    .unwrap();
    listed.as_array().unwrap().clone()
}

/// The `tick`s of the `scheduled` events among `events`, as Unix ms.
fn scheduled_ticks(events: &[Value]) -> Vec<i64> {
    events
        .iter()
        .filter(|e| e["event"] == "scheduled")
        .map(|e| {
            let tick = e["tick"].as_str().unwrap();
            chrono::DateTime::parse_from_rfc3339(tick)
                .unwrap_or_else(|err| panic!("tick `{tick}`: {err}"))
                .timestamp_millis()
        })
        .collect()
}

fn events_of(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}

/// Two workers with the same every-second schedule: each tick is queued by
/// exactly one of them, none is missed, and every run completes. Then,
/// after a gap of missed ticks, a worker with `--catch-up 2` queues the
/// newest two and reports the older ones skipped.
async fn two_workers_queue_each_tick_once_and_a_late_one_catches_up(db: &str) {
    let scenario = fixture("queue/scheduled.toml");
    let a = Worker::start(db, &["--schedules", &scenario]);
    let b = Worker::start(db, &["--schedules", &scenario]);
    // Until a few ticks came due (the workers start from when they
    // started, which a busy machine makes late).
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // (On SQLite the file appears with the first run.)
    let queued = || {
        let out = host(db, &["runs", "list", "--json", "--limit", "1000"]);
        match out.status.success() {
            true => serde_json::from_slice::<Vec<Value>>(&out.stdout)
                .unwrap()
                .len(),
            false => 0,
        }
    };
    while queued() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "no three ticks in 60 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_millis(1_100));
    let (status_a, events_a) = a.stop();
    let (status_b, events_b) = b.stop();
    assert!(status_a.success() && status_b.success());

    let (from_a, from_b) = (scheduled_ticks(&events_a), scheduled_ticks(&events_b));
    let mut ticks: Vec<i64> = from_a.iter().chain(&from_b).copied().collect();
    ticks.sort();
    let count = ticks.len();
    ticks.dedup();
    assert_eq!(
        ticks.len(),
        count,
        "a tick queued twice: {from_a:?} {from_b:?}"
    );
    assert!(
        count >= 3,
        "ticks in 4.3 s of an every-second schedule: {ticks:?}"
    );
    for pair in ticks.windows(2) {
        assert_eq!(pair[1] - pair[0], 1_000, "a tick missed: {ticks:?}");
    }
    assert!(ticks.iter().all(|t| t % 1_000 == 0), "{ticks:?}");
    // One run per tick in the database, each of the schedule's input.
    let listed = runs(db);
    assert_eq!(listed.len(), count, "{listed:?}");
    let store = Store::open(db).await.unwrap();
    let ids: Vec<String> = listed
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect();
    // A run queued just before the workers stopped may still be queued:
    // the catch-up worker below runs it.
    let last = *ticks.last().unwrap();

    // No worker for four seconds: four or five ticks missed. A worker with
    // --catch-up 2 queues the newest two (the one due now among them) and
    // says the others were skipped.
    std::thread::sleep(Duration::from_millis(4_200));
    let out = ok(host(
        db,
        &[
            "worker",
            "--json",
            "--exit-when-idle",
            "--schedules",
            &scenario,
            "--catch-up",
            "2",
        ],
    ));
    let events = events_of(&out);
    let caught_up = scheduled_ticks(&events);
    assert_eq!(caught_up.len(), 2, "{out}");
    assert_eq!(caught_up[1] - caught_up[0], 1_000, "{out}");
    assert!(caught_up[0] >= last + 3_000, "older ticks skipped: {out}");
    let skipped = events
        .iter()
        .find(|e| e["event"] == "ticks_skipped")
        .unwrap_or_else(|| panic!("no ticks_skipped event: {out}"));
    let newest_skipped =
        chrono::DateTime::parse_from_rfc3339(skipped["newest_skipped"].as_str().unwrap())
            .unwrap()
            .timestamp_millis();
    assert_eq!(newest_skipped, caught_up[0] - 1_000, "{out}");
    assert_eq!(skipped["catch_up"], 2);

    let mut all = ids;
    all.extend(
        events
            .iter()
            .filter(|e| e["event"] == "scheduled")
            .map(|e| e["run_id"].as_str().unwrap().to_string()),
    );
    assert_eq!(runs(db).len(), count + 2);
    wait_finished(&store, &all, Duration::from_secs(30)).await;
    for id in &all {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{id}");
        assert_eq!(run.input, json!({"label": "tick"}));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_with_two_workers_queues_each_tick_once_on_postgres() {
    let db = skillhost_tests::pg::fresh_database().await;
    two_workers_queue_each_tick_once_and_a_late_one_catches_up(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_with_two_workers_queues_each_tick_once_through_pgbouncer() {
    let db = skillhost_tests::pgbouncer::fresh_database().await.url;
    two_workers_queue_each_tick_once_and_a_late_one_catches_up(&db).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_with_two_workers_queues_each_tick_once_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    two_workers_queue_each_tick_once_and_a_late_one_catches_up(&sqlite_db(&dir)).await;
}

/// Four `host submit`s with one key, started at once, print one run id,
/// and only that run exists; `host run` with the key gets it too, and
/// another key starts another run.
fn one_key_gives_one_run(db: &str) {
    let scenario = fixture("queue/prioritized.toml");
    let racers: Vec<_> = (0..4)
        .map(|i| {
            host_command(
                db,
                &[
                    "submit",
                    &scenario,
                    "--input",
                    &json!({"label": format!("racer {i}")}).to_string(),
                    "--idempotency-key",
                    "order-1",
                ],
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    let mut ids: Vec<String> = racers
        .into_iter()
        .map(|child| ok(child.wait_with_output().unwrap()).trim().to_string())
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), 1, "one run for one key: {ids:?}");
    assert_eq!(ids[0].len(), 36, "{ids:?}");
    assert_eq!(runs(db).len(), 1);

    let again: Value = serde_json::from_str(&ok(host(
        db,
        &[
            "run",
            &scenario,
            "--input",
            r#"{"label": "late"}"#,
            "--idempotency-key",
            "order-1",
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(
        (
            again["run_id"].as_str(),
            &again["existing"],
            &again["status"]
        ),
        (Some(ids[0].as_str()), &json!(true), &json!("queued"))
    );
    assert_eq!(runs(db).len(), 1, "nothing started");

    // Another key is another run; `host run` runs it to the end.
    let other: Value = serde_json::from_str(&ok(host(
        db,
        &[
            "run",
            &scenario,
            "--input",
            r#"{"label": "other"}"#,
            "--idempotency-key",
            "order-2",
            "--json",
        ],
    )))
    .unwrap();
    assert_eq!(other["status"], "completed", "{other}");
    assert_eq!(runs(db).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotency_key_submitted_concurrently_gives_one_run_on_postgres() {
    one_key_gives_one_run(&skillhost_tests::pg::fresh_database().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_idempotency_key_submitted_concurrently_gives_one_run_through_pgbouncer() {
    one_key_gives_one_run(&skillhost_tests::pgbouncer::fresh_database().await.url);
}

#[test]
fn the_same_idempotency_key_submitted_concurrently_gives_one_run_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    one_key_gives_one_run(&sqlite_db(&dir));
}

/// Two runs for one customer and one for another, two workers with room
/// for all three: the other customer's run starts beside the first, the
/// customer's other run only once the first has ended.
async fn a_concurrency_key_holds_a_second_run(db: &str, workers: usize) {
    let scenario = fixture("queue/per_customer.toml");
    let submit = |customer: &str| {
        let id = ok(host(
            db,
            &[
                "submit",
                &scenario,
                "--input",
                &json!({"customer": customer}).to_string(),
            ],
        ));
        id.trim().to_string()
    };
    let first = submit("acme");
    let second = submit("acme");
    let other = submit("globex");
    let started: Vec<Worker> = (0..workers)
        .map(|_| Worker::start(db, &["--concurrency", "2"]))
        .collect();
    let store = Store::open(db).await.unwrap();
    let ids = [first.clone(), second.clone(), other.clone()];
    wait_finished(&store, &ids, Duration::from_secs(60)).await;
    let events: Vec<Value> = started
        .into_iter()
        .flat_map(|worker| worker.stop().1)
        .collect();
    // When each run's first node started and its last node ended, from its
    // own step rows: the run row's `updated_at` is not it, since releasing
    // the lease after the final commit moves it again, after the next run
    // may have started.
    let span = |id: String| {
        let store = store.clone();
        async move {
            let steps = store.steps(&id).await.unwrap();
            let last = steps.last().unwrap();
            (
                steps.first().unwrap().started_at_ms,
                last.started_at_ms + i64::try_from(last.duration_us / 1000).unwrap(),
            )
        }
    };
    let (a, b) = (span(first.clone()).await, span(second.clone()).await);
    // Two workers claiming at once may start either acme run first (a
    // claimer skips the run another holds locked and takes the next one,
    // then the key holds back the older one): the key's promise is that
    // they never overlap.
    let (earlier, later) = if a.0 <= b.0 { (a, b) } else { (b, a) };
    assert!(
        later.0 >= earlier.1,
        "an acme run started at {} ms, before the other ended at {} ms; the first's steps: \
         {:?}; the second's: {:?}; the workers' events: {events:?}",
        later.0,
        earlier.1,
        store.steps(&first).await.unwrap(),
        store.steps(&second).await.unwrap()
    );
    assert!(
        span(other.clone()).await.0 < earlier.1,
        "the globex run waited for acme's, though its key is another"
    );
    for id in &ids {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{id}");
        assert_eq!(run.last_seq, 6, "{id}: one checkpoint per slow node");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_key_holds_a_second_run_across_two_workers_on_postgres() {
    let db = skillhost_tests::pg::fresh_database().await;
    a_concurrency_key_holds_a_second_run(&db, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_key_holds_a_second_run_across_two_workers_through_pgbouncer() {
    let db = skillhost_tests::pgbouncer::fresh_database().await.url;
    a_concurrency_key_holds_a_second_run(&db, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrency_key_holds_a_second_run_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    a_concurrency_key_holds_a_second_run(&sqlite_db(&dir), 1).await;
}

/// A worker taking one run at a time claims by priority: `--priority`
/// over the scenario's `priority`, over the default 0, oldest first among
/// equals.
fn claims_follow_priority(db: &str) {
    let prioritized = fixture("queue/prioritized.toml");
    let plain = fixture("queue/scheduled.toml");
    let submit = |scenario: &str, label: &str, extra: &[&str]| {
        let input = json!({ "label": label }).to_string();
        let mut args = vec!["submit", scenario, "--input", &input];
        args.extend_from_slice(extra);
        ok(host(db, &args)).trim().to_string()
    };
    let default = submit(&plain, "default", &[]);
    let lowered = submit(&prioritized, "lowered", &["--priority", "-2"]);
    let scenario_5 = submit(&prioritized, "scenario", &[]);
    let urgent = submit(&prioritized, "urgent", &["--priority", "9"]);
    let also_5 = submit(&prioritized, "scenario again", &["--priority", "5"]);
    let out = ok(host(
        db,
        &["worker", "--json", "--exit-when-idle", "--concurrency", "1"],
    ));
    let claimed: Vec<String> = events_of(&out)
        .iter()
        .filter(|e| e["event"] == "claimed")
        .map(|e| e["run_id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        claimed,
        [urgent, scenario_5, also_5, default, lowered],
        "{out}"
    );
}

#[test]
fn claims_follow_priority_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    claims_follow_priority(&sqlite_db(&dir));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_follow_priority_on_postgres() {
    claims_follow_priority(&skillhost_tests::pg::fresh_database().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_follow_priority_through_pgbouncer() {
    claims_follow_priority(&skillhost_tests::pgbouncer::fresh_database().await.url);
}

/// A scenario with this `[scenario]` tail and these tables, written into
/// `dir` (its skill by absolute path).
fn scenario_file(dir: &tempfile::TempDir, name: &str, header: &str, tables: &str) -> String {
    let echo = skillhost_tests::dist("echo");
    let text = format!(
        "[scenario]\nname = \"{name}\"\n{header}\n\n\
         [input]\ncustomer = {{ type = \"string\" }}\n\n\
         [skills.echo]\ncomponent = \"{}\"\n\n\
         [[node]]\nid = \"say\"\nskill = \"echo\"\n\
         input = {{ message = \"input.customer\", repeat = \"1\" }}\n\n\
         [[node]]\nid = \"done\"\nkind = \"end\"\n\n\
         [[edge]]\nfrom = \"say\"\nto = \"done\"\n\n{tables}",
        echo.display()
    );
    let path = dir.path().join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn refused(out: std::process::Output) -> String {
    assert_eq!(
        out.status.code(),
        Some(2),
        "expected exit 2: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A cron that never fires, and one that fires more often than the host
/// allows (once a minute unless its operator sets
/// `SKILLHOST_MIN_SCHEDULE_INTERVAL`), are refused by `host check` and by a
/// worker asked to run their schedules, naming the schedule and why; the
/// operator's variable lowers the minimum (to a second at the least), a
/// scenario cannot.
#[test]
fn crons_that_never_fire_or_fire_too_often_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let schedule = |cron: &str| {
        format!(
            "[[schedule]]\nname = \"often\"\ncron = \"{cron}\"\ninput = {{ customer = \"x\" }}\n"
        )
    };
    let never = scenario_file(&dir, "never", "", &schedule("0 0 30 2 *"));
    let often = scenario_file(&dir, "often", "", &schedule("*/10 * * * * *"));
    // The host's default: no minimum set by the test's environment.
    let by_default = |args: &[&str]| {
        host_command(&db, args)
            .env_remove("SKILLHOST_MIN_SCHEDULE_INTERVAL")
            .output()
            .unwrap()
    };
    for (file, says) in [
        (
            &never,
            "[[schedule]] `often`: cron `0 0 30 2 *` never fires",
        ),
        (
            &often,
            "[[schedule]] `often`: cron `*/10 * * * * *` fires 10s after a tick",
        ),
    ] {
        for args in [
            vec!["check", file.as_str()],
            vec!["worker", "--schedules", file.as_str(), "--exit-when-idle"],
        ] {
            let text = refused(by_default(&args));
            assert!(text.contains(says), "{text}");
        }
    }
    let text = refused(by_default(&["check", &often]));
    assert!(text.contains("at most once every 1m"), "{text}");
    assert!(!dir.path().join("queue.db").exists());

    // The operator allows ten seconds: accepted; a second is the floor.
    let with = |interval: &str| {
        host_command(&db, &["check", &often])
            .env("SKILLHOST_MIN_SCHEDULE_INTERVAL", interval)
            .output()
            .unwrap()
    };
    ok(with("10s"));
    let text = refused(with("11s"));
    assert!(text.contains("at most once every 11s"), "{text}");
    let text = refused(with("500ms"));
    assert!(
        text.contains("SKILLHOST_MIN_SCHEDULE_INTERVAL is `500ms`"),
        "{text}"
    );
}

#[test]
fn bad_schedules_and_flow_control_are_refused_naming_the_file_and_entry() {
    let dir = tempfile::tempdir().unwrap();
    let db = sqlite_db(&dir);
    let bad_cron = scenario_file(
        &dir,
        "bad-cron",
        "",
        "[[schedule]]\nname = \"nightly\"\ncron = \"0 25 * * *\"\ninput = { customer = \"x\" }\n",
    );
    for args in [
        vec!["check", bad_cron.as_str()],
        vec![
            "worker",
            "--schedules",
            bad_cron.as_str(),
            "--exit-when-idle",
        ],
    ] {
        let text = refused(host(&db, &args));
        assert!(text.contains("bad-cron.toml:"), "{text}");
        assert!(
            text.contains("[[schedule]] `nightly`: cron `0 25 * * *` does not parse"),
            "{text}"
        );
    }
    // The database was not even created by the refused worker.
    assert!(!dir.path().join("queue.db").exists());

    let bad_input = scenario_file(
        &dir,
        "bad-input",
        "",
        "[[schedule]]\ncron = \"0 * * * *\"\ninput = { client = \"x\" }\n",
    );
    let text = refused(host(&db, &["check", &bad_input]));
    assert!(
        text.contains("[[schedule]] `1`: its `input` does not fit [input]"),
        "{text}"
    );

    let no_schedule = scenario_file(&dir, "no-schedule", "", "");
    let text = refused(host(&db, &["worker", "--schedules", &no_schedule]));
    assert!(text.contains("has no [[schedule]]"), "{text}");

    for (name, header, says) in [
        ("zero", "concurrency = 0", "`[scenario] concurrency` is 0"),
        (
            "negative",
            "concurrency = -2",
            "`[scenario] concurrency` is -2",
        ),
        (
            "bad-key",
            "concurrency_key = \"input.customer +\"",
            "`[scenario] concurrency_key`: `input.customer +` is not valid CEL",
        ),
    ] {
        let file = scenario_file(&dir, name, header, "");
        let text = refused(host(&db, &["check", &file]));
        assert!(
            text.contains(&format!("{name}.toml:")) && text.contains(says),
            "{text}"
        );
    }

    let ok_file = scenario_file(&dir, "fine", "", "");
    let text = refused(host(
        &db,
        &[
            "submit",
            &ok_file,
            "--input",
            r#"{"customer": "a"}"#,
            "--idempotency-key",
            " ",
        ],
    ));
    assert!(text.contains("--idempotency-key is empty"), "{text}");
    let text = refused(host(
        &db,
        &[
            "run",
            &ok_file,
            "--input",
            r#"{"customer": "a"}"#,
            "--durability",
            "none",
            "--idempotency-key",
            "k",
        ],
    ));
    assert!(text.contains("needs a database"), "{text}");
    let text = refused(host(
        &db,
        &["worker", "--schedules", &ok_file, "--catch-up", "0"],
    ));
    assert!(text.contains("--catch-up must be at least 1"), "{text}");
    // Nothing was queued by any of them.
    assert!(!dir.path().join("queue.db").exists());
}
