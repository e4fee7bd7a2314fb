//! Crash safety with the real binary: the `host` process is killed with
//! SIGKILL at a failpoint (before, inside and after a node's commit, and
//! inside a map node), `host resume` finishes the run, and the final state is
//! byte for byte that of an uninterrupted run, with every node's writes
//! applied exactly once. And what the binary does with a database whose
//! rows were edited or nest too deep (a resume refuses, naming the run, the
//! seq and what no longer matches; `runs list` lists the others and reports
//! the bad one; nothing overflows the stack), and with an input above the
//! size limit. The kills inside a commit and a map node are repeated on
//! Postgres through a PgBouncer in transaction pooling.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use serde_json::Value;
use skillhost_tests::cli::{host, json, sqlite_url, stderr};

fn scenario() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/engine/crash.toml")
        .display()
        .to_string()
}

/// The final state of an uninterrupted run, as the store serializes it.
fn reference_state(dir: &Path) -> String {
    let out = host(dir, &["run", &scenario(), "--json"], None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = json(&out)["run_id"].as_str().unwrap().to_string();
    let shown = json(&host(dir, &["runs", "show", &id, "--json"], None));
    serde_json::to_string(&shown["state"]).unwrap()
}

fn crash_and_resume(point: &str) {
    crash_and_resume_on(point, None);
}

/// [`crash_and_resume`] with the killed run and its resume on `db` (the
/// reference run stays on the test's SQLite file).
fn crash_and_resume_on(point: &str, db: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let reference = reference_state(dir.path());
    let host = |dir: &Path, args: &[&str], failpoint: Option<&str>| {
        let mut command = skillhost_tests::cli::host_command(dir, args, failpoint);
        if let Some(db) = db {
            command.env("SKILLHOST_DATABASE_URL", db);
        }
        command.output().expect("run host")
    };

    let out = host(dir.path(), &["run", &scenario(), "--events"], Some(point));
    assert_eq!(
        out.status.signal(),
        Some(9),
        "failpoint `{point}` should kill the process; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let first: Value = serde_json::from_str(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .expect("run_started"),
    )
    .unwrap();
    let id = first["run_id"].as_str().unwrap().to_string();
    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    assert_eq!(shown["status"], "running", "killed at `{point}`");

    let out = host(dir.path(), &["resume", &id, "--events"], None);
    assert!(
        out.status.success(),
        "resume after `{point}`: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["resumed"], true);

    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    assert_eq!(shown["status"], "completed");
    assert_eq!(
        serde_json::to_string(&shown["state"]).unwrap(),
        reference,
        "state after a kill at `{point}` and a resume differs from an uninterrupted run"
    );
    // Exactly one successful step per node, in order.
    let nodes: Vec<&str> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["status"] == "ok")
        .map(|s| s["node"].as_str().unwrap())
        .collect();
    assert_eq!(
        nodes,
        ["first", "second", "fan", "third"],
        "after `{point}`"
    );

    if point.starts_with("map-item") {
        let reused = events
            .iter()
            .filter(|e| e["event"] == "map_item_finished" && e["reused"] == true)
            .count();
        assert!(
            reused >= 1,
            "items finished before the kill must not run again"
        );
        let total = events
            .iter()
            .filter(|e| e["event"] == "map_item_finished")
            .count();
        assert_eq!(total, 6);
    }
}

#[test]
fn killed_before_a_commit() {
    crash_and_resume("before-commit:second");
}

#[test]
fn killed_inside_a_commit() {
    crash_and_resume("in-commit:second");
}

#[test]
fn killed_after_a_commit() {
    crash_and_resume("after-commit:second");
}

#[test]
fn killed_inside_a_map_node() {
    crash_and_resume("map-item:fan:3");
}

#[test]
fn killed_inside_the_map_nodes_commit() {
    crash_and_resume("in-commit:fan");
}

#[test]
fn killed_before_the_last_commit() {
    crash_and_resume("before-commit:third");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_inside_a_commit_through_pgbouncer() {
    let db = skillhost_tests::pgbouncer::fresh_database().await.url;
    tokio::task::spawn_blocking(move || crash_and_resume_on("in-commit:second", Some(&db)))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_inside_a_map_node_through_pgbouncer() {
    let db = skillhost_tests::pgbouncer::fresh_database().await.url;
    tokio::task::spawn_blocking(move || crash_and_resume_on("map-item:fan:3", Some(&db)))
        .await
        .unwrap();
}

/// A URL that goes through PgBouncer without saying so: the host refuses
/// it at once as a bad `--database` (exit 2), naming the option.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pgbouncer_the_url_does_not_name_is_refused_naming_the_option() {
    let pooled = skillhost_tests::pgbouncer::fresh_database().await;
    let url = pooled.url.replace("?pgbouncer=true", "");
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let out = skillhost_tests::cli::host_command(dir.path(), &["run", &scenario()], None)
            .env("SKILLHOST_DATABASE_URL", &url)
            .output()
            .expect("run host");
        let message = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{message}");
        assert!(message.contains("pgbouncer=true"), "{message}");
    })
    .await
    .unwrap();
}

/// With `--durability full`, a commit that returned is on disk: killed right
/// after `second`'s commit, the run has `second`'s step, and it resumes to
/// the same state as an uninterrupted run.
#[test]
fn killed_after_a_durable_commit() {
    killed_durable_and_resumed("after-commit:second", &[("first", "ok"), ("second", "ok")]);
}

/// Kills a `--durability full` run of the crash scenario at failpoint
/// `point`, checks the steps the run kept (`kept`: node and status), and
/// resumes it to the state of an uninterrupted run; the run as `runs show`
/// shows it then.
fn killed_durable_and_resumed(point: &str, kept: &[(&str, &str)]) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let reference = reference_state(dir.path());
    let id = &killed_at(dir.path(), &scenario(), &["--durability", "full"], point);
    let shown = json(&host(dir.path(), &["runs", "show", id, "--json"], None));
    assert_eq!(step_statuses(&shown), kept, "killed at `{point}`");
    let out = host(dir.path(), &["resume", id], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = json(&host(dir.path(), &["runs", "show", id, "--json"], None));
    assert_eq!(serde_json::to_string(&shown["state"]).unwrap(), reference);
    shown
}

/// A run's last checkpoint and its end are one commit: killed right after
/// `third`'s commit (its next node is the end node), the run is already
/// completed, with the state, steps and result of an uninterrupted run, and
/// a resume is refused as for any finished run. (Killed inside that commit,
/// neither is written: `scorecard.rs`, `in-commit:third`.)
#[test]
fn killed_after_the_last_commit_the_run_is_completed() {
    let dir = tempfile::tempdir().unwrap();
    let reference = reference_state(dir.path());
    let id = &killed_at(
        dir.path(),
        &scenario(),
        &["--durability", "full"],
        "after-commit:third",
    );
    let shown = json(&host(dir.path(), &["runs", "show", id, "--json"], None));
    assert_eq!(shown["status"], "completed", "{shown:#}");
    assert_eq!(serde_json::to_string(&shown["state"]).unwrap(), reference);
    assert_eq!(
        step_statuses(&shown),
        [
            ("first", "ok"),
            ("second", "ok"),
            ("fan", "ok"),
            ("third", "ok")
        ]
    );
    let out = host(dir.path(), &["resume", id], None);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(&format!("run `{id}` is completed")),
        "{}",
        stderr(&out)
    );
}

/// What `strace` saw a process do to one file, in the order the calls
/// started: writes (offset, the bytes as hex) and syncs (`fsync` or
/// `fdatasync`); and the checkpoints it announced on its standard output
/// (`--events`' `checkpoint_written`, by seq).
#[derive(Debug, PartialEq)]
enum FileCall {
    /// `hex`: the first 128 bytes at most.
    Write {
        len: u64,
        offset: u64,
        hex: String,
    },
    Sync(String),
    Announced(u64),
}

/// Runs `host` under `strace -f` (writes and syncs, strings in hex; with
/// failpoint `point` armed) and returns its output with the calls on `file`
/// (a path's file name).
fn traced(
    dir: &Path,
    args: &[&str],
    point: Option<&str>,
    file: &str,
) -> (std::process::Output, Vec<FileCall>) {
    let trace = dir.join("strace.txt");
    let cmd = skillhost_tests::cli::host_command(dir, args, point);
    let host = cmd.get_program().to_owned();
    let mut strace = std::process::Command::new("strace");
    strace
        .args([
            "-f",
            "-y",
            "-xx",
            "-s",
            "128",
            "-e",
            "trace=pwrite64,write,fsync,fdatasync",
            "-o",
        ])
        .arg(&trace)
        .arg(host)
        .args(cmd.get_args())
        .current_dir(dir);
    for (key, value) in cmd.get_envs() {
        match value {
            Some(value) => strace.env(key, value),
            None => strace.env_remove(key),
        };
    }
    let out = strace
        .output()
        .expect("run strace (apt-get install -y strace)");
    let text = std::fs::read_to_string(&trace).unwrap();
    let suffix = format!("/{file}");
    let calls = text
        .lines()
        .filter(|line| !line.contains("resumed>"))
        .filter_map(|line| {
            // "PID call(FD<path, in hex>, args…"
            let (_, call) = line.split_once(' ')?;
            let (name, rest) = call.trim_start().split_once('(')?;
            if name == "write" && rest.starts_with("1<") {
                return announced(rest);
            }
            let (path, args) = rest.split_once('<')?.1.split_once('>')?;
            if !String::from_utf8_lossy(&unhex(path)).ends_with(&suffix) {
                return None;
            }
            match name {
                "fsync" | "fdatasync" => Some(FileCall::Sync(name.to_owned())),
                "pwrite64" => {
                    // `, "\x00…"…, LEN, OFFSET) = …` or `… <unfinished ...>`
                    let (quoted, tail) = args.trim_start_matches(", \"").split_once('"')?;
                    let mut numbers = tail.trim_start_matches("...").split(',').skip(1).map(|s| {
                        s.split([')', ' '])
                            .find(|s| !s.is_empty())
                            .and_then(|n| n.parse().ok())
                    });
                    Some(FileCall::Write {
                        len: numbers.next()??,
                        offset: numbers.next()??,
                        hex: quoted.replace("\\x", ""),
                    })
                }
                _ => None,
            }
        })
        .collect();
    (out, calls)
}

/// The seq of a `checkpoint_written` event line a traced `write` to the
/// standard output carries (`1<pipe:[…]>, "\x7b…"…, LEN) = LEN`).
fn announced(args: &str) -> Option<FileCall> {
    let quoted = args.split_once('"')?.1.split_once('"')?.0;
    let line = String::from_utf8_lossy(&unhex(quoted)).into_owned();
    if !line.starts_with(r#"{"event":"checkpoint_written""#) {
        return None;
    }
    let seq = line.split_once(r#""seq":"#)?.1;
    let digits: String = seq.chars().take_while(char::is_ascii_digit).collect();
    Some(FileCall::Announced(digits.parse().ok()?))
}

/// Bytes written as strace's `-xx` writes them: `\x2f\x74…`.
fn unhex(text: &str) -> Vec<u8> {
    text.split("\\x")
        .filter(|byte| !byte.is_empty())
        .filter_map(|byte| u8::from_str_radix(byte, 16).ok())
        .collect()
}

/// Per commit frame the host wrote into the WAL (a 24-byte frame header
/// whose second word, the database size after the commit, is not zero), the
/// syncs until the next frame is written.
fn commit_syncs(calls: &[FileCall]) -> Vec<Vec<&str>> {
    let mut commits: Vec<Vec<&str>> = Vec::new();
    let mut open = false;
    for call in calls {
        match call {
            FileCall::Write { len: 24, hex, .. } => {
                // A frame header (the WAL's own header is 32 bytes).
                open = false;
                if &hex[8..16] != "00000000" {
                    commits.push(Vec::new());
                    open = true;
                }
            }
            FileCall::Write { .. } | FileCall::Announced(_) => {}
            FileCall::Sync(name) if open => commits.last_mut().unwrap().push(name),
            FileCall::Sync(_) => {}
        }
    }
    commits
}

/// Asserts that each checkpoint announced was on disk first: an `fdatasync`
/// of the WAL started after its commit frame was written (`frame_of(seq)`,
/// counting commit frames from 0) and before the announcement.
fn announced_once_synced(calls: &[FileCall], frame_of: impl Fn(u64) -> usize) -> usize {
    let mut frames = 0;
    // The frames an `fdatasync` started after (all frames before it).
    let mut synced = None;
    let mut announced = 0;
    for call in calls {
        match call {
            FileCall::Write { len: 24, hex, .. } if &hex[8..16] != "00000000" => frames += 1,
            FileCall::Write { .. } => {}
            FileCall::Sync(name) if name == "fdatasync" => synced = Some(frames),
            FileCall::Sync(_) => {}
            FileCall::Announced(seq) => {
                let frame = frame_of(*seq);
                assert!(
                    synced.is_some_and(|synced| synced > frame),
                    "checkpoint {seq} (commit frame {frame}) announced before an fdatasync \
                     that covers it: {calls:#?}"
                );
                announced += 1;
            }
        }
    }
    announced
}

/// With `--durability full`, each checkpoint is on disk before anyone hears
/// of it: traced with strace, the announcement of `first`'s checkpoint on
/// the standard output follows an `fdatasync` of the WAL that started after
/// its commit frame was written, however far `second` (a node without
/// effects, which may run while that sync runs) got meanwhile; and
/// `second`'s commit, whose next node is a map node (one that may act
/// outside the run), is synced before the run goes on: the process is
/// killed right after that commit returned, its frame followed by an
/// `fdatasync`. No commit is synced twice.
#[test]
fn with_durability_full_each_checkpoint_is_synced_before_it_is_announced() {
    let dir = tempfile::tempdir().unwrap();
    // The database exists already: the traced process only commits runs.
    reference_state(dir.path());
    let (out, calls) = traced(
        dir.path(),
        &["run", &scenario(), "--durability", "full", "--events"],
        Some("after-commit:second"),
        "runs.db-wal",
    );
    assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
    let commits = commit_syncs(&calls);
    // The run's row with checkpoint 0, then `first` and `second`.
    assert_eq!(commits.len(), 3, "{calls:#?}");
    // `second`'s frame is followed by an `fdatasync` (the syncer's of
    // `first`'s commit may start after it too, as may its own).
    assert!(!commits[2].is_empty(), "{calls:#?}");
    assert!(
        commits.iter().flatten().all(|s| *s == "fdatasync"),
        "{calls:#?}"
    );
    let syncs: usize = commits.iter().map(Vec::len).sum();
    assert!((2..=3).contains(&syncs), "{calls:#?}");
    // Checkpoint `seq` is commit frame `seq`.
    assert_eq!(announced_once_synced(&calls, |seq| seq as usize), 1);
}

/// A completed run syncs at most once per commit, announces each
/// checkpoint only once it is on disk, and its end rides its last
/// checkpoint's commit: traced with strace (as above), a whole run of the
/// crash scenario (`first`, `second`, the map node `fan` over six items,
/// `third`, then the end node) writes eleven commit frames, the run's row
/// with checkpoint 0, `first`'s and `second`'s checkpoints, the six map
/// items (each stored on its own before `fan` commits), `fan`'s and
/// `third`'s checkpoints, the last of which also marks the run completed:
/// no twelfth commit for the finish, and the last one synced before the
/// process ends.
#[test]
fn with_durability_full_a_completed_run_syncs_at_most_once_per_checkpoint_and_not_for_its_end() {
    let dir = tempfile::tempdir().unwrap();
    reference_state(dir.path());
    let (out, calls) = traced(
        dir.path(),
        &["run", &scenario(), "--durability", "full", "--events"],
        None,
        "runs.db-wal",
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let commits = commit_syncs(&calls);
    assert_eq!(commits.len(), 11, "{calls:#?}");
    // No more `fdatasync`s than commits; after the last commit's own, the
    // process closes the database: SQLite checkpoints the WAL, with an
    // `fsync` of it.
    let fdatasyncs = commits.iter().flatten().filter(|s| **s == "fdatasync");
    assert!(fdatasyncs.count() <= commits.len(), "{calls:#?}");
    let last = commits.last().unwrap();
    let closing = last
        .iter()
        .position(|s| *s == "fsync")
        .unwrap_or(last.len());
    assert!(closing > 0, "{calls:#?}");
    assert!(last[closing..].iter().all(|s| *s == "fsync"), "{calls:#?}");
    // Checkpoints 1 and 2 are frames 1 and 2; the six map items come
    // before `fan`'s (3, frame 9) and `third`'s (4, frame 10).
    let frame_of = |seq: u64| match seq {
        1 | 2 => seq as usize,
        _ => seq as usize + 6,
    };
    assert_eq!(announced_once_synced(&calls, frame_of), 4);
}

/// With `--durability full`, a node without effects runs while the commit
/// before it syncs, and what may act outside the run waits for it: with
/// every sync of the WAL made 600 ms slow (failpoint `pause=600@wal-sync`),
/// `second` (an echo node without grants) is checkpointed well within 600 ms
/// of `first`, whose commit it does not wait for, and `fan` (a map node)
/// 600 ms or more after it: it starts once `second`'s commit, and `first`'s
/// with it, is synced. Each node waiting for the sync before it, `second`
/// would come 600 ms or more after `first`. The run ends as an
/// uninterrupted one.
#[test]
fn with_durability_full_a_node_without_effects_runs_while_the_commit_before_it_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let reference = reference_state(dir.path());
    let out = host(
        dir.path(),
        &["run", &scenario(), "--durability", "full", "--json"],
        Some("pause=600@wal-sync"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("failpoint `wal-sync` reached"),
        "{}",
        stderr(&out)
    );
    let id = json(&out)["run_id"].as_str().unwrap().to_string();
    let checkpoints = json(&host(dir.path(), &["checkpoints", &id, "--json"], None));
    let at = |node: &str| written_at(&checkpoints, "node", node);
    assert!(at("second") - at("first") < 500, "{checkpoints:#}");
    assert!(at("fan") - at("first") >= 600, "{checkpoints:#}");
    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    assert_eq!(serde_json::to_string(&shown["state"]).unwrap(), reference);
}

/// A run is never more than 16 commits ahead of its syncs, whatever the
/// disk: with every sync made 600 ms slow (`pause=600@wal-sync`), a loop of
/// 40 gates (nodes without effects) writes checkpoints 1 to 16 ahead at
/// once, the 17th waits for its sync, and the 18th comes 600 ms or more
/// after the first. So the events a run holds back stay bounded.
#[test]
fn a_run_is_never_more_than_sixteen_commits_ahead_of_its_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loop.toml");
    std::fs::write(
        &path,
        r#"[scenario]
name = "loop"
version = "0.1.0"
description = "a gate that loops 40 times"

[state]
round = { type = "integer", default = 0 }

[[node]]
id = "step"
kind = "gate"
max_visits = 40
writes = [{ field = "round", from = "state.round + 1" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "step"
branches = [{ when = "state.round < 40", to = "step" }, { else = "done" }]
"#,
    )
    .unwrap();
    let out = host(
        dir.path(),
        &[
            "run",
            path.to_str().unwrap(),
            "--durability",
            "full",
            "--json",
        ],
        Some("pause=600@wal-sync"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["status"], "completed");
    let id = json(&out)["run_id"].as_str().unwrap().to_string();
    let checkpoints = json(&host(dir.path(), &["checkpoints", &id, "--json"], None));
    let at = |seq: u64| written_at(&checkpoints, "seq", seq);
    assert!(at(16) - at(1) < 500, "{checkpoints:#}");
    assert!(at(18) - at(1) >= 600, "{checkpoints:#}");
}

/// When the checkpoint whose `key` is `value` was written (its
/// `created_at_ms`), in what `host checkpoints --json` printed.
fn written_at(checkpoints: &Value, key: &str, value: impl Into<Value>) -> i64 {
    let value = value.into();
    checkpoints
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c[key] == value)
        .and_then(|c| c["created_at_ms"].as_i64())
        .unwrap_or_else(|| panic!("no checkpoint with {key} {value}: {checkpoints:#}"))
}

/// Killed while a commit is ahead of its sync (right after `first`'s
/// commit was written, which `second`, a node without effects, does not
/// wait for), the run resumes to the state of an uninterrupted run, each
/// node's step once.
#[test]
fn killed_while_a_commit_is_ahead_of_its_sync() {
    let shown = killed_durable_and_resumed("after-commit:first", &[("first", "ok")]);
    assert_eq!(shown["status"], "completed", "{shown:#}");
    let ok: Vec<&str> = step_statuses(&shown)
        .into_iter()
        .filter(|(_, status)| *status == "ok")
        .map(|(node, _)| node)
        .collect();
    assert_eq!(ok, ["first", "second", "fan", "third"]);
}

/// Runs `sql` on the test's database, beside the host (as a careless or
/// hostile hand would).
fn edit_database(dir: &Path, sql: &str) {
    use sqlx::Connection;
    let url = sqlite_url(dir);
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(async {
            let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
            conn.close().await.unwrap();
        });
}

/// Starts a run killed right after `second`'s checkpoint (seq 2); its id.
fn killed_after_second(dir: &Path) -> String {
    killed_at(dir, &scenario(), &[], "after-commit:second")
}

/// Runs `scenario` (with `args`) in `dir` killed at failpoint `point`, as a
/// SIGKILL there ends it; the run's id, from its first event.
fn killed_at(dir: &Path, scenario: &str, args: &[&str], point: &str) -> String {
    let mut all = vec!["run", scenario];
    all.extend_from_slice(args);
    all.push("--events");
    let out = host(dir, &all, Some(point));
    assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
    let first: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    first["run_id"].as_str().unwrap().to_string()
}

/// A `runs show --json` answer's steps, as (node, status), in order.
fn step_statuses(shown: &Value) -> Vec<(&str, &str)> {
    shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["node"].as_str().unwrap(), s["status"].as_str().unwrap()))
        .collect()
}

/// Asserts the host ended with an error of its own, not a signal.
fn refused(out: &std::process::Output, what: &str) -> String {
    assert_eq!(out.status.signal(), None, "{what}: {}", stderr(out));
    assert!(!out.status.success(), "{what} succeeded");
    stderr(out)
}

#[test]
fn an_edited_run_is_not_resumed_and_runs_list_reports_it_among_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let skipped = killed_after_second(dir.path());
    let edited_input = killed_after_second(dir.path());
    let intact = killed_after_second(dir.path());
    // Next nodes emptied: a resume would "complete" the run at once.
    edit_database(
        dir.path(),
        &format!(
            "UPDATE checkpoints SET next_nodes = '[]' WHERE run_id = '{skipped}' AND seq = 2; \
             UPDATE runs SET input = '{{\"items\": [\"z\"]}}' WHERE id = '{edited_input}'"
        ),
    );

    let out = host(dir.path(), &["resume", &skipped], None);
    let message = refused(&out, "resuming a run with edited next nodes");
    assert!(
        message.contains(&format!("corrupt checkpoint 2 of run `{skipped}`")),
        "{message}"
    );
    assert!(message.contains("its next nodes"), "{message}");
    let out = host(dir.path(), &["resume", &edited_input], None);
    let message = refused(&out, "resuming a run with an edited input");
    assert!(
        message.contains(&format!("corrupt run `{edited_input}`")),
        "{message}"
    );
    assert!(message.contains("its input"), "{message}");

    let out = host(dir.path(), &["runs", "list"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(
        listed.contains(&intact) && listed.contains(&skipped),
        "{listed}"
    );
    let warning = stderr(&out);
    assert!(
        warning.contains(&format!("run `{edited_input}` cannot be listed"))
            && warning.contains("its input"),
        "{warning}"
    );
    let rows = json(&host(dir.path(), &["runs", "list", "--json"], None));
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 3);
    let bad = rows
        .iter()
        .find(|r| r["id"] == edited_input.as_str())
        .unwrap();
    assert!(
        bad["error"].as_str().unwrap().contains("its input"),
        "{bad}"
    );

    // The intact run resumes and completes.
    let out = host(dir.path(), &["resume", &intact], None);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn rows_nested_200_or_20000_levels_deep_never_overflow_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let intact = killed_after_second(dir.path());
    for depth in [200, 20_000] {
        let id = killed_after_second(dir.path());
        // As an older host could have written them.
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        edit_database(
            dir.path(),
            &format!(
                "UPDATE runs SET input = '{nested}', digest = 'legacy' WHERE id = '{id}'; \
                 UPDATE checkpoints SET state = '{{\"trail\": {nested}}}', \
                     next_nodes = '{nested}', digest = NULL WHERE run_id = '{id}'"
            ),
        );
        for args in [
            vec!["runs", "show", &id],
            vec!["resume", &id],
            vec!["checkpoints", &id],
        ] {
            let out = host(dir.path(), &args, None);
            let message = refused(&out, &format!("{args:?} at {depth} levels"));
            assert!(message.contains(&format!("run `{id}`")), "{message}");
        }
        let out = host(dir.path(), &["runs", "list"], None);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(String::from_utf8_lossy(&out.stdout).contains(&intact));
        assert!(
            stderr(&out).contains(&format!("run `{id}` cannot be listed")),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn an_input_above_the_limit_is_refused_before_the_database_is_opened() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.json");
    // An input the scenario's [input] refuses too (an unknown key), once it
    // is read: which refusal comes says which check ran.
    let padding = "p".repeat(1_100_000);
    std::fs::write(
        &big,
        serde_json::to_vec(&serde_json::json!({ "items": ["a"], "padding": padding })).unwrap(),
    )
    .unwrap();
    let size = std::fs::metadata(&big).unwrap().len();
    assert!(size > 1024 * 1024);
    let input = format!("@{}", big.display());

    let out = host(dir.path(), &["run", &scenario(), "--input", &input], None);
    let message = refused(&out, "a 1.1 MB input");
    assert!(
        message.contains(&format!("is {size} bytes, more than the 1048576 bytes"))
            && message.contains(&format!("--max-input-bytes {size}"))
            && message.contains("SKILLHOST_MAX_INPUT_BYTES"),
        "{message}"
    );
    assert!(
        !dir.path().join("runs.db").exists(),
        "the database was opened"
    );

    // Raised by the flag or the environment, the input is read and checked
    // against the scenario's [input] (which refuses its unknown key).
    let limit = (size + 1).to_string();
    let out = host(
        dir.path(),
        &[
            "run",
            &scenario(),
            "--input",
            &input,
            "--max-input-bytes",
            &limit,
        ],
        None,
    );
    let message = refused(&out, "a raised limit");
    assert!(!message.contains("--max-input-bytes"), "{message}");
    assert!(message.contains("[input]"), "{message}");
    let mut command = skillhost_tests::cli::host_command(
        dir.path(),
        &["submit", &scenario(), "--input", &input],
        None,
    );
    let out = command
        .env("SKILLHOST_MAX_INPUT_BYTES", &limit)
        .output()
        .unwrap();
    let message = refused(&out, "a limit raised by the environment");
    assert!(!message.contains("--max-input-bytes"), "{message}");
    assert!(message.contains("[input]"), "{message}");
    let out = host(
        dir.path(),
        &["submit", &scenario(), "--input", &input],
        None,
    );
    assert!(refused(&out, "submit").contains("--max-input-bytes"));
}

/// A run killed part-way is not continued with other code: its component
/// changed on disk (the same skill, one custom section longer), so `host
/// resume` refuses, naming the skill and both digests; `--allow-changed`
/// continues it deliberately, and the run still shows the component it
/// started with.
#[test]
fn resume_refuses_a_run_whose_component_changed_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let echo = skillhost_tests::dist("echo");
    std::fs::copy(&echo, dir.path().join("echo.wasm")).unwrap();
    let text = std::fs::read_to_string(scenario())
        .unwrap()
        .replace("../../../skills/dist/echo.wasm", "echo.wasm");
    let file = dir.path().join("crash.toml");
    std::fs::write(&file, text).unwrap();
    let file = file.display().to_string();

    let id = killed_at(dir.path(), &file, &[], "after-commit:second");
    let started_with =
        json(&host(dir.path(), &["runs", "show", &id, "--json"], None))["components"]["echo"]
            .clone();

    // The same component with an empty custom section appended: it loads
    // and behaves the same, and its SHA-256 is another.
    let mut bytes = std::fs::read(&echo).unwrap();
    bytes.extend_from_slice(&[0x00, 0x05, 0x04, b'n', b'o', b't', b'e']);
    std::fs::write(dir.path().join("echo.wasm"), &bytes).unwrap();

    let out = host(dir.path(), &["resume", &id], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let said = stderr(&out);
    assert!(said.contains("skill `echo` was sha256:"), "{said}");
    assert!(said.contains("--allow-changed"), "{said}");
    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    // Refused before any node ran: still unfinished (its lease given back
    // to the queue), and resumable.
    assert!(
        matches!(shown["status"].as_str(), Some("running" | "queued")),
        "{shown}"
    );
    assert_eq!(shown["steps"].as_array().unwrap().len(), 2, "{shown}");

    let out = host(dir.path(), &["resume", &id, "--allow-changed"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["components"]["echo"], started_with);
}

/// A map item stored before a kill keeps the rows of its retried attempts:
/// they are written with the item, not at the end of the node, so the run
/// resumed past it (the item reused, not run again) has every retried
/// attempt the undisturbed run has. `kv_retry.toml`'s skill fails its first
/// attempt on each key, here the three items' keys.
#[test]
fn a_map_items_retried_attempts_survive_a_kill_after_it() {
    let failed_fan_attempts = |dir: &Path, id: &str| {
        let export = json(&host(dir, &["runs", "export", id], None));
        let rows: Vec<(u64, String)> = export["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["node_id"] == "fan" && s["status"] != "ok")
            .map(|s| {
                let attempt = s["attempt"].as_u64().unwrap();
                (attempt, s["status"].as_str().unwrap().to_owned())
            })
            .collect();
        rows
    };
    let file = |dir: &Path| {
        std::fs::write(
            dir.join("kv-retry.wasm"),
            skillhost_tests::kv_retry_component(),
        )
        .unwrap();
        let toml = Path::new(env!("CARGO_MANIFEST_DIR")).join("e2e/scorecard/kv_retry.toml");
        std::fs::copy(toml, dir.join("kv_retry.toml")).unwrap();
        dir.join("kv_retry.toml").display().to_string()
    };

    let undisturbed = tempfile::tempdir().unwrap();
    let scenario = file(undisturbed.path());
    let out = host(undisturbed.path(), &["run", &scenario, "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let id = json(&out)["run_id"].as_str().unwrap().to_owned();
    let expected = failed_fan_attempts(undisturbed.path(), &id);
    assert_eq!(expected.len(), 3, "{expected:?}");

    let dir = tempfile::tempdir().unwrap();
    let scenario = file(dir.path());
    let id = killed_at(dir.path(), &scenario, &[], "map-item:fan:1");
    let out = host(dir.path(), &["resume", &id, "--events"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let reused = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"map_item_finished\"") && l.contains("\"reused\":true"))
        .count();
    assert_eq!(reused, 2, "items 0 and 1 are not run again");
    assert_eq!(failed_fan_attempts(dir.path(), &id), expected);
}
