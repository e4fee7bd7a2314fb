//! Calling a node's skill: its limits and grants, retries with exponential
//! backoff (each failed attempt a step row of its own), and where the call
//! runs (inline when it cannot sleep, else on a blocking thread). In a
//! replay ([`crate::replay`]) each call is made once, as its recorded
//! attempt, answered from its recorded journal.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::replay::StepReplay;
use crate::run::now_ms;
use crate::traced::{self, CallTrace};
use crate::{Event, EventSink, RunContext};
use skillhost_runtime::{
    CallError, CallOptions, CallReport, JournalMode, JournalRecord, KvOverride, Limits, RandomSeed,
    Skill, TokenUsage, derive_random_seed,
};
use skillhost_scenario::SkillCall;
use skillhost_store::{JournalEntry, StepRow, StepStatus};

/// How a node's skill is called: the limits and grants of each attempt, and
/// how often to try. Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct CallPlan {
    pub options: CallOptions,
    /// Total attempts, the first included.
    pub max_attempts: u32,
    /// Wait before the second attempt; doubled after each further failure.
    pub backoff_ms: u64,
    /// Where each attempt's span goes, when traces are exported.
    pub trace: Option<CallTrace>,
}

impl CallPlan {
    /// The node's limits and grants; its `retry`, else the skill manifest's;
    /// `tokens_left` of the run's token budget.
    pub(crate) fn new(
        call: &SkillCall,
        skill: &Skill,
        tokens_left: Option<u64>,
        kv: Option<&KvOverride>,
        trace: Option<CallTrace>,
    ) -> Self {
        let mut limits = Limits::default();
        if let Some(ms) = call.timeout_ms {
            limits.timeout = Duration::from_millis(ms);
        }
        if let Some(mb) = call.memory_mb {
            limits.memory_bytes = mb << 20;
        }
        limits.fuel = call.fuel;
        if let Some(calls) = call.max_host_calls {
            limits.max_host_calls = calls;
        }
        if let Some(mb) = call.host_call_mb {
            limits.host_call_bytes = Some(mb << 20);
        }
        let (max_attempts, backoff_ms) = match &call.retry {
            Some(retry) => (retry.max_attempts.max(1), retry.backoff_ms),
            None => (
                skill.manifest.retry.max_attempts.max(1),
                u64::from(skill.manifest.retry.initial_backoff_ms),
            ),
        };
        CallPlan {
            options: CallOptions {
                limits,
                grants: call.grants.clone(),
                journal: JournalMode::Record,
                // Set per attempt (`call_with_retries`).
                random_seed: RandomSeed::default(),
                // What is left when the node starts; each retry gets what
                // the attempts before it left (`call_with_retries`).
                token_budget: tokens_left,
                // Only a call that may use `kv` carries the store's.
                kv: kv.filter(|_| call.grants.kv.is_some()).cloned(),
                time_host_calls: trace.is_some(),
                tokens: None,
            },
            max_attempts,
            backoff_ms,
            trace,
        }
    }
}

/// A call's journal as the store's rows for node `node_id` (and map item
/// `item`), each with its index in the call's journal. Their `seq` is the
/// step's, which only the core knows when it commits: it sets it there
/// (`run.rs`). No allocation for a call that journaled nothing.
pub(crate) fn journal_entries(
    node_id: &str,
    item: Option<usize>,
    records: Vec<JournalRecord>,
) -> Vec<JournalEntry> {
    records
        .into_iter()
        .enumerate()
        .map(|(entry, record)| JournalEntry {
            seq: 0,
            node_id: node_id.to_string(),
            item: item.map(|i| i as u32),
            entry: entry as u32,
            kind: record.capability.name().to_string(),
            request: record.request,
            response: record.response,
        })
        .collect()
}

/// The outcome of a call and its retries.
pub(crate) struct Attempts {
    pub report: CallReport,
    /// The attempt `report` came from, 1-based.
    pub attempt: u32,
    /// One step row per failed attempt that was retried.
    pub failed: Vec<StepRow>,
    /// The tokens the failed attempts used (each row's `detail.usage`);
    /// `report.usage` is the last attempt's.
    pub failed_usage: TokenUsage,
}

impl Attempts {
    /// The tokens every attempt used.
    pub(crate) fn usage(&self) -> TokenUsage {
        let mut usage = self.failed_usage;
        usage.add(self.report.usage);
        usage
    }
}

/// A step row's `detail` holding `usage`, when there is any: a node whose
/// skill made no completion stores nothing for it.
pub(crate) fn usage_detail(usage: TokenUsage) -> Option<Value> {
    (!usage.is_zero()).then(|| json!({ "usage": usage.to_json() }))
}

/// Adds `usage` to a step row's detail, when there is any.
/// The tokens the `llm` completions in `journal` used, read back from
/// their recorded answers: a map item reused on resume brings its journal
/// but no usage of its own, and its completions were paid for all the same.
pub(crate) fn journal_usage(journal: &[JournalEntry]) -> TokenUsage {
    let mut usage = TokenUsage::default();
    for entry in journal.iter().filter(|e| e.kind == "llm") {
        let Some(ok) = entry.response.get("ok") else {
            continue;
        };
        let tokens = |key: &str| ok.get(key).and_then(Value::as_u64).unwrap_or(0);
        usage.add(TokenUsage {
            input_tokens: tokens("input_tokens"),
            output_tokens: tokens("output_tokens"),
            calls: 1,
        });
    }
    usage
}

pub(crate) fn add_usage(step: &mut StepRow, usage: TokenUsage) {
    if usage.is_zero() {
        return;
    }
    match &mut step.detail {
        Some(Value::Object(detail)) => {
            detail.insert("usage".into(), usage.to_json());
        }
        _ => step.detail = usage_detail(usage),
    }
}

/// The seed of an attempt's `wasi:random`: a function of what its step row
/// records (run, node, attempt) and, in a map node, the item's index, so
/// every step gets its own bytes and a resumed or replayed run the same ones.
pub(crate) fn random_seed(
    run_id: &str,
    node_id: &str,
    item: Option<usize>,
    attempt: u32,
) -> RandomSeed {
    let item = item.map_or(u64::MAX, |i| i as u64).to_le_bytes();
    derive_random_seed(&[
        run_id.as_bytes(),
        node_id.as_bytes(),
        &item,
        &attempt.to_le_bytes(),
    ])
}

/// Calls the skill, retrying retryable errors with exponential backoff. Blocks
/// (the call and the backoff sleep); run it on a blocking thread whenever a
/// retry may sleep. Only the last attempt's journal is kept (in its report):
/// a retried attempt is stored as a failed step row, which has no journal.
/// `item` is the index of a map node's item. In a replay, the call is made
/// once, as its recorded attempt, from its recorded journal.
#[allow(clippy::too_many_arguments)]
pub(crate) fn call_with_retries(
    run_id: &str,
    node_id: &str,
    item: Option<usize>,
    skill: &Skill,
    plan: &CallPlan,
    input: &Value,
    events: &Arc<dyn EventSink>,
    replay: Option<&StepReplay>,
) -> Attempts {
    if let Some(replay) = replay {
        return replay.call(run_id, node_id, item, skill, plan, input);
    }
    let mut failed = Vec::new();
    let mut failed_usage = TokenUsage::default();
    let mut attempt = 1;
    let mut options = plan.options.clone();
    // Only a skill that streams completions, granted `llm`, with someone
    // who listens or may come to (`host serve` listens while a client
    // follows, and a client may come mid-attempt), has its tokens sent on
    // as they come, each while someone listens.
    let streams_tokens = skill.streams_tokens() && options.grants.llm.is_some();
    loop {
        let started_at_ms = now_ms();
        let started = plan.trace.map(|_| std::time::SystemTime::now());
        options.random_seed = random_seed(run_id, node_id, item, attempt);
        let tokens = (streams_tokens && events.may_listen())
            .then(|| TokenEvents::new(events, run_id, node_id, item, attempt));
        options.tokens = tokens.as_ref().map(TokenEvents::sink);
        let report = skill.call(input, &options);
        // A failed attempt's tokens are not the node's: say so before the
        // next attempt streams its own.
        let discard = tokens.is_some_and(|t| t.sent()) && report.result.is_err();
        let discarded = || {
            if discard {
                events.emit(&Event::TokensDiscarded {
                    run_id: run_id.to_string(),
                    node: node_id.to_string(),
                    item,
                    attempt,
                    under: Vec::new(),
                });
            }
        };
        if let (Some(trace), Some(started)) = (plan.trace, started) {
            // A skill node's last attempt is its node's span (`kinds/skill.rs`
            // hands its figures over); a retried one, or a map item's, has a
            // span of its own.
            let retried =
                matches!(&report.result, Err(e) if e.retryable() && attempt < plan.max_attempts);
            let own_span = retried || item.is_some();
            traced::call_attempt(trace, item, skill, attempt, started, &report, own_span);
        }
        let error = match &report.result {
            Err(e) if e.retryable() && attempt < plan.max_attempts => e.to_json(),
            _ => {
                discarded();
                return Attempts {
                    report,
                    attempt,
                    failed,
                    failed_usage,
                };
            }
        };
        failed_usage.add(report.usage);
        if let Some(left) = &mut options.token_budget {
            *left = left.saturating_sub(report.usage.total());
        }
        events.emit(&Event::NodeFailed {
            run_id: run_id.to_string(),
            node: node_id.to_string(),
            attempt,
            error: error.clone(),
            will_retry: true,
        });
        discarded();
        failed.push(StepRow {
            run_id: run_id.to_string(),
            seq: None,
            node_id: node_id.to_string(),
            attempt,
            status: StepStatus::Failed,
            started_at_ms,
            duration_us: report.duration.as_micros() as u64,
            input_hash: None,
            output_hash: None,
            error: Some(error),
            fuel_consumed: Some(report.fuel_consumed),
            memory_peak_bytes: Some(report.memory_peak_bytes),
            detail: usage_detail(report.usage),
        });
        let wait = plan.backoff_ms.saturating_mul(1 << (attempt - 1).min(16));
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait));
        }
        attempt += 1;
    }
}

/// Where one attempt's streamed deltas go: a [`Event::Token`] each, sent as
/// the skill is handed it.
struct TokenEvents {
    sink: skillhost_runtime::TokenSink,
    sent: Arc<std::sync::atomic::AtomicBool>,
}

impl TokenEvents {
    fn new(
        events: &Arc<dyn EventSink>,
        run_id: &str,
        node_id: &str,
        item: Option<usize>,
        attempt: u32,
    ) -> TokenEvents {
        let sent = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (events, run_id, node_id, flag) = (
            events.clone(),
            run_id.to_string(),
            node_id.to_string(),
            sent.clone(),
        );
        let sink = skillhost_runtime::TokenSink::new(move |delta| {
            if !events.wants_tokens() {
                return;
            }
            flag.store(true, std::sync::atomic::Ordering::Relaxed);
            events.emit(&Event::Token {
                run_id: run_id.clone(),
                node: node_id.clone(),
                item,
                attempt,
                stream: delta.stream,
                text: delta.text.to_string(),
                // A child run's engine reports under its parent
                // (`events::UnderParent`).
                under: Vec::new(),
            });
        });
        TokenEvents { sink, sent }
    }

    fn sink(&self) -> skillhost_runtime::TokenSink {
        self.sink.clone()
    }

    /// Whether any token was sent.
    fn sent(&self) -> bool {
        self.sent.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// [`call_with_retries`] off the async runtime when a retry could sleep or the
/// skill may block its thread (WASI, whose streams and timers block on tokio,
/// which panics on a runtime's worker thread; `http`, `llm`), inline
/// otherwise: a single call of a pure skill costs less than a thread
/// hand-off.
pub(crate) async fn call_node_skill(
    cx: &RunContext<'_>,
    node_id: &str,
    skill: &Arc<Skill>,
    plan: &CallPlan,
    input: &Value,
) -> Attempts {
    let replay = cx.log.replay().map(|replay| &**replay);
    // A call whose `kv` is the store's blocks on the store's async API.
    if (plan.max_attempts <= 1 || replay.is_some())
        && !skill.needs_blocking_thread()
        && plan.options.kv.is_none()
    {
        return call_with_retries(
            &cx.run_id, node_id, None, skill, plan, input, &cx.events, replay,
        );
    }
    let (run_id, node_id, skill, plan, input, events, replay) = (
        cx.run_id.clone(),
        node_id.to_string(),
        skill.clone(),
        plan.clone(),
        input.clone(),
        cx.events.clone(),
        cx.log.replay().cloned(),
    );
    let skill_name = skill.name.clone();
    let task = tokio::task::spawn_blocking(move || {
        call_with_retries(
            &run_id,
            &node_id,
            None,
            &skill,
            &plan,
            &input,
            &events,
            replay.as_deref(),
        )
    });
    match task.await {
        Ok(attempts) => attempts,
        Err(e) => Attempts {
            report: CallReport {
                result: Err(CallError::Host {
                    skill: skill_name,
                    message: format!("the call's thread failed: {e}"),
                    retryable: false,
                }),
                logs: Vec::new(),
                logs_dropped: 0,
                fuel_consumed: 0,
                memory_peak_bytes: 0,
                denied: Vec::new(),
                journal: Vec::new(),
                usage: TokenUsage::default(),
                duration: Duration::ZERO,
                host_calls: Vec::new(),
            },
            attempt: 1,
            failed: Vec::new(),
            failed_usage: TokenUsage::default(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::random_seed;

    #[test]
    fn every_step_gets_its_own_seed_and_a_replay_the_same() {
        let seed = random_seed("run-1", "fetch", None, 1);
        assert_eq!(seed, random_seed("run-1", "fetch", None, 1));
        let others = [
            random_seed("run-2", "fetch", None, 1),
            random_seed("run-1", "parse", None, 1),
            random_seed("run-1", "fetch", Some(0), 1),
            random_seed("run-1", "fetch", None, 2),
            // Parts are hashed with their lengths: moving a byte between the
            // run id and the node id is another scope.
            random_seed("run-1f", "etch", None, 1),
        ];
        for other in others {
            assert_ne!(seed, other);
        }
    }
}
