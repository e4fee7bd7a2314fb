//! The queue's flow control, written once for both backends: which queued
//! run a claim takes, and what a prune drops of the idempotency keys.
//!
//! A claim takes, in this order: a run whose lease expired (its runner
//! died; it keeps its slot), then a waiting run whose approval deadline
//! passed ([`pick_timed_out_wait`], so its `on_timeout` route runs), then
//! a queued run ([`pick_queued`]); an answered run is queued again and
//! claimed like any other. The last two both start a run, so both obey
//! the flow control below.
//!
//! A queued run carries its priority, its scenario's concurrency limit and
//! its concurrency key (`runs.priority`, `concurrency_limit`,
//! `concurrency_key`, set when it is created). A claim takes, of the queued
//! runs whose flow control lets them run now, the one with the highest
//! priority, oldest first; one held back by a limit does not hold back the
//! runs behind it. Only `running` runs count: a queued or waiting run holds
//! no worker, and a finished one none. Each backend runs [`PICK_QUEUED`]
//! inside its own claim (`sqlite/queue.rs`, `postgres/queue.rs`), where it
//! is made safe against concurrent claimers.
//!
//! Must not: know about scenarios (the limits are data on the run row).

/// The queued run a claim takes: `id`, its scenario, and whether it is
/// flow-controlled (`limited`: a concurrency limit or key), which Postgres
/// checks again under its scenario's lock. `$N`-free, so both backends
/// take it as written; Postgres adds a condition and its row lock.
pub(crate) const PICK_QUEUED: &str = "\
SELECT q.id, q.scenario_name, \
    (q.concurrency_limit IS NOT NULL OR q.concurrency_key IS NOT NULL) AS limited \
FROM runs AS q WHERE q.status = 'queued' AND (FLOW_ALLOWS) \
ORDER BY q.priority DESC, q.created_at, q.id LIMIT 1";

/// Whether run `q`'s flow control lets it start now: fewer running runs of
/// its scenario than its limit, and none with its key.
pub(crate) const FLOW_ALLOWS: &str = "\
(q.concurrency_limit IS NULL OR q.concurrency_limit > \
    (SELECT COUNT(*) FROM runs AS r \
     WHERE r.status = 'running' AND r.scenario_name = q.scenario_name)) \
AND (q.concurrency_key IS NULL OR NOT EXISTS \
    (SELECT 1 FROM runs AS r \
     WHERE r.status = 'running' AND r.scenario_name = q.scenario_name \
       AND r.concurrency_key = q.concurrency_key))";

/// [`PICK_QUEUED`] with its flow condition spelled out, and `and` (SQL
/// starting with ` AND `, or nothing) added to it.
pub(crate) fn pick_queued(and: &str) -> String {
    PICK_QUEUED.replace("FLOW_ALLOWS", &format!("{FLOW_ALLOWS}{and}"))
}

/// The waiting run whose deadline passed that a claim takes, in the same
/// columns as [`PICK_QUEUED`]: highest priority first, then the earliest
/// deadline, within its scenario's flow control (taking it starts it
/// running again). `now` is the backend's clock or its parameter; `and`
/// as for [`pick_queued`].
pub(crate) fn pick_timed_out_wait(now: &str, and: &str) -> String {
    format!(
        "SELECT q.id, q.scenario_name, \
            (q.concurrency_limit IS NOT NULL OR q.concurrency_key IS NOT NULL) AS limited \
         FROM runs AS q WHERE q.status = 'waiting' AND q.wait_deadline <= {now} \
         AND ({FLOW_ALLOWS}{and}) \
         ORDER BY q.priority DESC, q.wait_deadline, q.id LIMIT 1"
    )
}

/// Deletes the idempotency keys that expired before `$1` (Unix ms): they
/// hold their run no longer.
pub(crate) const PRUNE_IDEMPOTENCY_KEYS: &str =
    "DELETE FROM idempotency_keys WHERE expires_at <= $1";
