//! Crash injection for the crash-safety tests: when `SKILLHOST_FAILPOINT`
//! names a point the process reaches, the process kills itself with SIGKILL
//! right there, as a power cut or an OOM killer would. The variable is read
//! once; an unset variable costs one relaxed load per point.
//!
//! Points: `before-commit:<node>`, `in-commit:<node>` (on SQLite inside the
//! store's transaction, after its writes, before COMMIT; on Postgres, where a
//! commit is one statement, just before that statement), `after-commit:<node>`,
//! `map-item:<node>:<index>` (after the item is stored), `before-wait:<node>`
//! and `after-wait:<node>` (around the write that puts a run in `waiting` at
//! an approval node).

use std::sync::OnceLock;

fn armed() -> Option<&'static str> {
    static POINT: OnceLock<Option<String>> = OnceLock::new();
    POINT
        .get_or_init(|| {
            std::env::var("SKILLHOST_FAILPOINT")
                .ok()
                .filter(|p| !p.is_empty())
        })
        .as_deref()
}

/// Kills the process if `point` is the armed failpoint.
pub fn hit(point: impl FnOnce() -> String) {
    let Some(armed) = armed() else { return };
    if armed == point() {
        eprintln!("failpoint `{armed}` reached: killing the process");
        // SAFETY: raising a signal on our own process has no memory-safety
        // preconditions; SIGKILL cannot be caught, so nothing runs after it.
        unsafe {
            libc::raise(libc::SIGKILL);
        }
    }
}
