//! Crash injection for the crash-safety tests: when `SKILLHOST_FAILPOINT`
//! names a point the process reaches, the process kills itself with SIGKILL
//! right there, as a power cut or an OOM killer would. The variable is read
//! once; an unset variable costs one relaxed load per point.
//!
//! Points: `before-commit:<node>`, `in-commit:<node>` (on SQLite inside the
//! store's transaction, after its writes, before COMMIT; on Postgres, where a
//! commit is one statement, just before that statement), `after-commit:<node>`,
//! `map-item:<node>:<index>` (after the item is stored; `before-map-item:`
//! just before), `before-wait:<node>`
//! and `after-wait:<node>` (around the write that puts a run in `waiting` at
//! an approval node), `worker-before-resume` (a worker's claimed run, its
//! scenario loaded, before the engine reads the run).
//!
//! Around what people and skills do from outside the run loop:
//! `before-answer:<node>` and `after-answer:<node>` (around the transaction
//! that records an approval node's answer and queues its run again),
//! `before-cancel` and `after-cancel` (around the write of a cancel: the end
//! of a queued or waiting run, the request of a running one),
//! `before-cancel-end` (a runner that found its run's cancel request, before
//! it writes the run's end as cancelled), `before-kv-set:<key>` and
//! `after-kv-set:<key>` (around a `kv` set, its own transaction: durable
//! when it returns, before the node's commit), `journaled:<node>` (a skill
//! node's call returned with journaled host calls, the rows of its retried
//! attempts written, its kept attempt's journal held in memory: the
//! journal is written by the node's commit, so this is "after the host
//! calls ran, before the commit"; a map item's journal is stored with the
//! item, `map-item`), `child-ended:<node>` (a subgraph node's child run
//! ended, or was read back, before the parent's node is applied and
//! committed). Inside a child run the points fire with the child's node ids
//! (`after-commit:<child node>`). `wal-sync`: on SQLite with
//! `--durability full`, just before an `fdatasync` of the WAL, on whichever
//! thread makes it (a commit's waiter, or the syncer thread for commits
//! written ahead of their sync); `pause=MS@wal-sync` makes every such sync
//! MS slower.
//!
//! `tests/e2e/scorecard.rs` kills the host at each of them on SQLite and
//! Postgres; `docs/replay.md` has the table it writes.
//!
//! `stop@POINT` stops the process there with SIGSTOP instead, as a frozen VM
//! or a long GC pause would: it goes on from that point when sent SIGCONT,
//! which is how the lease tests wake a worker whose lease has expired.
//!
//! `pause=MS@POINT` holds only what reached the point for MS milliseconds,
//! while the rest of the process goes on: at a point reached by async code
//! through [`hit_async`] (`after-commit:<node>`), the task waits and yields,
//! so the worker's lease renewals, which share its task, keep running. That
//! is how a test holds a worker between its run's last commit and the
//! engine's return, the window in which a renewal finds the lease the
//! commit gave back.

use std::sync::OnceLock;

/// What an armed point does to the process.
#[derive(Clone, Copy)]
enum Action {
    Kill,
    Stop,
    Pause(std::time::Duration),
}

fn armed() -> Option<(&'static str, Action)> {
    static POINT: OnceLock<Option<(String, Action)>> = OnceLock::new();
    POINT
        .get_or_init(|| {
            let value = std::env::var("SKILLHOST_FAILPOINT").ok()?;
            let (point, action) = if let Some(point) = value.strip_prefix("stop@") {
                (point.to_string(), Action::Stop)
            } else if let Some((ms, point)) = value
                .strip_prefix("pause=")
                .and_then(|rest| rest.split_once('@'))
            {
                let ms = ms.parse().unwrap_or_else(|_| {
                    panic!("SKILLHOST_FAILPOINT={value}: `pause=` takes milliseconds")
                });
                (
                    point.to_string(),
                    Action::Pause(std::time::Duration::from_millis(ms)),
                )
            } else {
                (value, Action::Kill)
            };
            (!point.is_empty()).then_some((point, action))
        })
        .as_ref()
        .map(|(point, action)| (point.as_str(), *action))
}

/// Kills (or stops) the process if `point` is the armed failpoint.
pub fn hit(point: impl FnOnce() -> String) {
    let Some((armed, action)) = armed() else {
        return;
    };
    if armed != point() {
        return;
    }
    match action {
        Action::Kill => {
            eprintln!("failpoint `{armed}` reached: killing the process");
            // SAFETY: raising a signal on our own process has no
            // memory-safety preconditions; SIGKILL cannot be caught, so
            // nothing runs after it.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
        }
        Action::Stop => {
            eprintln!("failpoint `{armed}` reached: stopping the process until SIGCONT");
            // SAFETY: as above; the process resumes here on SIGCONT.
            unsafe {
                libc::raise(libc::SIGSTOP);
            }
        }
        Action::Pause(pause) => {
            eprintln!("failpoint `{armed}` reached: this thread sleeps {pause:?}");
            std::thread::sleep(pause);
        }
    }
}

/// [`hit`] for async code: a `pause=` waits without holding its thread, so
/// the other futures of its task (a worker's lease renewals) go on.
pub async fn hit_async(point: impl FnOnce() -> String) {
    let Some((armed, action)) = armed() else {
        return;
    };
    let point = point();
    if armed != point {
        return;
    }
    match action {
        Action::Pause(pause) => {
            eprintln!("failpoint `{armed}` reached: this task waits {pause:?}");
            tokio::time::sleep(pause).await;
        }
        Action::Kill | Action::Stop => hit(|| point),
    }
}
