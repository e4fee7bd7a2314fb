//! What the engine records for the process's metrics
//! (`skillhost_telemetry::metrics`), all of it here: the run loop, the
//! kinds, the run log and the worker call these with one line each.
//!
//! Until a face installs the metrics (`host serve`, `host worker
//! --metrics-addr`), every function is one atomic load and returns: the
//! per-node path builds nothing and allocates nothing. Installed, a node
//! costs a family lookup (its scenario's and its own name as labels). A
//! replay records nothing: its calls were made, and counted, by the run it
//! replays.

use std::time::Duration;

use skillhost_runtime::{Capability, TokenUsage};
use skillhost_scenario::{Node, SkillCall};
use skillhost_store::JournalEntry;
use skillhost_telemetry::metrics;

use crate::{EngineError, RunContext, RunOutcome};

/// Whether `cx`'s run is recorded: metrics are installed, and it is no
/// replay.
fn recorded(cx: &RunContext<'_>) -> bool {
    metrics::installed() && !cx.log.is_replay()
}

/// A run began executing here (started, forked, or resumed from a
/// checkpoint).
pub(crate) fn run_started(cx: &RunContext<'_>) {
    if recorded(cx) {
        metrics::run_started(&cx.scenario.name);
    }
}

/// The run loop of `cx`'s run returned `ended`: its status, or
/// `interrupted` when it stopped here with an error, without an end (a
/// commit refused under a lost lease, a database failure; another runner
/// or a resume goes on with it). A run loop dropped in flight (a worker's
/// shutdown, a lease found lost by a renewal) returns nothing, and counts
/// as started only.
pub(crate) fn run_ended(cx: &RunContext<'_>, ended: &Result<RunOutcome, EngineError>) {
    if recorded(cx) {
        let status = match ended {
            Ok(outcome) => outcome.status.as_str(),
            Err(_) => "interrupted",
        };
        metrics::run_finished(&cx.scenario.name, status);
    }
}

/// `node` ran for `elapsed`.
pub(crate) fn node_finished(cx: &RunContext<'_>, node: &Node, elapsed: Duration) {
    if recorded(cx) {
        metrics::node_finished(&cx.scenario.name, &node.id, elapsed.as_secs_f64());
    }
}

/// A call of `call`'s skill (its retries included) used `usage` of the
/// model its `llm` grant names, and was refused the capabilities in
/// `denied`.
pub(crate) fn call_made(
    cx: &RunContext<'_>,
    call: &SkillCall,
    denied: &[Capability],
    usage: TokenUsage,
) {
    if !recorded(cx) {
        return;
    }
    for capability in denied {
        metrics::capability_denied(capability.name());
    }
    if let (false, Some(grant)) = (usage.is_zero(), &call.grants.llm) {
        metrics::tokens_used(
            &grant.provider,
            &grant.model,
            usage.input_tokens,
            usage.output_tokens,
        );
    }
}

/// The bytes `journal`'s rows add to the store (their requests' and
/// responses' JSON, as the store writes them), counted before its commit
/// ([`journal_committed`] records them once it is made); 0 without
/// metrics, without measuring.
pub(crate) fn journal_bytes(journal: &[JournalEntry]) -> u64 {
    if journal.is_empty() || !metrics::installed() {
        return 0;
    }
    let mut counted = Counted(0);
    for entry in journal {
        // Writing to a counter cannot fail, nor can a JSON value.
        let _ = serde_json::to_writer(&mut counted, &entry.request);
        let _ = serde_json::to_writer(&mut counted, &entry.response);
    }
    counted.0
}

/// A commit wrote `bytes` of journal ([`journal_bytes`]).
pub(crate) fn journal_committed(bytes: u64) {
    if bytes > 0 {
        metrics::journal_written(bytes);
    }
}

/// A worker failed a run it claimed without running it: its scenario
/// cannot be loaded on the worker, or is no longer the run's.
pub(crate) fn claimed_run_failed(scenario: &str) {
    metrics::run_finished(scenario, "failed");
}

/// A worker's claim took over a run whose lease expired.
pub(crate) fn lease_taken_over() {
    metrics::lease_taken_over();
}

/// Counts what is written to it.
struct Counted(u64);

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
