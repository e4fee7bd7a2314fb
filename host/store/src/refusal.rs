//! Why a write was refused, in the same words on both backends: the
//! run is missing, finished, already there, past the checkpoint being
//! committed, or leased by another runner.
//!
//! Each backend finds out its own way (SQLite reads the run's row inside
//! the refused transaction, Postgres after a statement that wrote nothing)
//! and passes what it read here; what that means is decided once. Lost
//! leases are `lease::lease_lost`'s. Must not: read or write anything.
//!
//! One rule for returning them: **a refusal rolls its transaction back
//! before it is returned.** Every write transaction of either backend is a
//! function of its `work` (SQLite's `Writer::write`, Postgres's
//! `PgStore::transaction`): `work` returns a refusal as its `Err`, or a
//! [`Decision`], and the backend ends the transaction (ROLLBACK, or COMMIT
//! of a kept decision) before the call returns, so no refused transaction
//! keeps a lock until its connection is next used. Nothing else in a
//! backend opens a transaction (a test of `postgres/` holds it to that).

use std::fmt::Display;

use crate::error::StoreError;
use crate::lease::{Lease, lease_lost};
use crate::run::RunStatus;

/// What a write transaction's `work` decided, when it did not refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision<T> {
    /// Keep what it wrote: COMMIT, then answer `T`.
    Commit(T),
    /// It wrote nothing (nothing to do, or a verdict that is not an error,
    /// such as a kv write over its quota): end the transaction now and
    /// answer `T`.
    Leave(T),
}

impl<T> Decision<T> {
    /// The answer, whichever way the transaction ended.
    pub fn into_inner(self) -> T {
        match self {
            Decision::Commit(value) | Decision::Leave(value) => value,
        }
    }
}

pub(crate) fn is_finished(status: &str) -> bool {
    status.parse().is_ok_and(RunStatus::is_finished)
}

fn conflict(db: &str, run_id: &str, message: String) -> StoreError {
    StoreError::Conflict {
        db: db.to_owned(),
        run_id: run_id.to_owned(),
        message,
    }
}

pub(crate) fn run_not_found(db: &str, run_id: &str) -> StoreError {
    StoreError::RunNotFound {
        db: db.to_owned(),
        run_id: run_id.to_owned(),
    }
}

/// A second run with a taken id.
pub(crate) fn run_exists(db: &str, run_id: &str) -> StoreError {
    conflict(db, run_id, "a run with this id already exists".into())
}

/// A step commit at seq 0, which is `create_run`'s.
pub(crate) fn seq_zero(db: &str, run_id: &str) -> StoreError {
    conflict(
        db,
        run_id,
        "checkpoint 0 is the initial state written by create_run; steps start at 1".into(),
    )
}

/// Why checkpoint `seq` was not taken, from the run's (status, last seq)
/// (None: no such run): the run is finished, or the checkpoint is not the
/// next (the exactly-once guard).
pub(crate) fn not_next(
    db: &str,
    run_id: &str,
    seq: impl Display,
    run: Option<(&str, i64)>,
) -> StoreError {
    match run {
        None => run_not_found(db, run_id),
        Some((status, _)) if is_finished(status) => conflict(
            db,
            run_id,
            format!("the run is {status}; it takes no more checkpoints"),
        ),
        Some((_, last)) => conflict(
            db,
            run_id,
            format!(
                "checkpoint {seq} does not follow the last one ({last}); another runner may \
                 have taken this run, or this step was already committed"
            ),
        ),
    }
}

/// A checkpoint refused because a cancel was asked for at `at_ms` by `by`
/// (None: the run has no cancel request, so this is not why).
pub(crate) fn cancel_requested(
    db: &str,
    run_id: &str,
    request: (Option<i64>, Option<String>),
) -> Option<StoreError> {
    let (Some(at_ms), by) = request else {
        return None;
    };
    Some(StoreError::CancelRequested {
        db: db.to_owned(),
        run_id: run_id.to_owned(),
        by: by.unwrap_or_else(|| "someone".to_owned()),
        at_ms,
    })
}

/// Why an answer was not recorded, from the run's status (`answered`:
/// its wait was answered already) and its wait's deadline.
pub(crate) fn not_waiting(
    db: &str,
    run_id: &str,
    status: &str,
    deadline: Option<i64>,
) -> StoreError {
    let why = match (status, deadline) {
        ("answered", _) => "its wait was answered already".to_owned(),
        ("waiting", Some(deadline)) => format!(
            "its wait timed out at {}; it goes on along its approval node's `on_timeout` \
             route when it is resumed",
            crate::lease::format_ms(deadline)
        ),
        (status, _) => format!("it is {status}, not waiting for an answer"),
    };
    conflict(db, run_id, format!("the answer was not recorded: {why}"))
}

/// A cancel of a run that already finished.
pub(crate) fn nothing_to_cancel(db: &str, run_id: &str, status: RunStatus) -> StoreError {
    conflict(
        db,
        run_id,
        format!(
            "the run is already {status}; only queued, waiting and running runs can be cancelled"
        ),
    )
}

/// Why a run was not finished, from its current status (None: no such
/// run): it already was.
pub(crate) fn already_finished(db: &str, run_id: &str, current: Option<&str>) -> StoreError {
    match current {
        None => run_not_found(db, run_id),
        Some(current) => conflict(db, run_id, format!("the run is already {current}")),
    }
}

/// Why a lease could not be taken, from the run's (status, lease owner,
/// lease expiry) (None: no such run): another runner holds it, or the run
/// is finished.
pub(crate) fn not_leased(
    db: &str,
    run_id: &str,
    run: Option<(String, Option<String>, Option<i64>)>,
) -> StoreError {
    match run {
        None => run_not_found(db, run_id),
        Some((status, Some(owner), Some(expires_at_ms))) if !is_finished(&status) => {
            StoreError::Leased {
                db: db.to_owned(),
                run_id: run_id.to_owned(),
                owner,
                expires_at_ms,
            }
        }
        Some((status, ..)) => conflict(
            db,
            run_id,
            format!("the run is {status}; it cannot be leased"),
        ),
    }
}

/// Why `lease` could not be renewed, from the run's (status, lease owner,
/// generation, expiry) (None: no such run): the run is finished, or the
/// lease changed hands.
pub(crate) fn not_renewed(
    db: &str,
    lease: &Lease,
    run: Option<(String, Option<String>, i64, Option<i64>)>,
) -> StoreError {
    match run {
        None => run_not_found(db, &lease.run_id),
        Some((status, ..)) if is_finished(&status) => {
            conflict(db, &lease.run_id, format!("the run is {status}"))
        }
        Some((_, holder, generation, expires)) => {
            lease_lost(db, lease, holder.as_deref(), generation, expires)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_checkpoint_is_refused_for_what_the_run_row_says() {
        let missing = not_next("db", "r", 3, None);
        assert!(
            matches!(missing, StoreError::RunNotFound { .. }),
            "{missing}"
        );
        let finished = not_next("db", "r", 3, Some(("completed", 2))).to_string();
        assert!(
            finished.contains("the run is completed; it takes no more"),
            "{finished}"
        );
        let taken = not_next("db", "r", 3, Some(("running", 5)));
        assert!(taken.is_conflict());
        assert!(
            taken
                .to_string()
                .contains("checkpoint 3 does not follow the last one (5)"),
            "{taken}"
        );
    }

    #[test]
    fn a_lease_is_refused_to_a_second_runner_and_on_a_finished_run() {
        let held = not_leased(
            "db",
            "r",
            Some(("running".into(), Some("w1".into()), Some(0))),
        );
        assert!(matches!(&held, StoreError::Leased { owner, .. } if owner == "w1"));
        // A finished run's stale lease columns do not make it leased.
        let done = not_leased(
            "db",
            "r",
            Some(("failed".into(), Some("w1".into()), Some(0))),
        );
        assert!(
            done.to_string()
                .contains("the run is failed; it cannot be leased")
        );

        let lease = Lease {
            run_id: "r".into(),
            owner: "w1".into(),
            generation: 2,
            expires_at_ms: 0,
        };
        let lost = not_renewed(
            "db",
            &lease,
            Some(("running".into(), Some("w2".into()), 3, None)),
        );
        assert!(lost.is_lease_lost(), "{lost}");
        let finished = not_renewed("db", &lease, Some(("completed".into(), None, 2, None)));
        assert!(finished.is_conflict(), "{finished}");
        assert!(matches!(
            not_renewed("db", &lease, None),
            StoreError::RunNotFound { .. }
        ));
    }
}
