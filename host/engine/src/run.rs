//! The core of the executor: one run loop that asks each node's kind what
//! happened ([`kinds::run`]) and applies it: a node that advances has its
//! changes applied, the rules run over the new state, its edge followed and
//! the step committed; a node that failed is recorded in `state.errors` and
//! routed to the failure handler; a node that finishes the run ends it.
//!
//! Nothing here knows what a kind does: adding one is a module in
//! [`kinds`] returning an [`Outcome`]. What a run does with each outcome is
//! here, once, for a run ([`drive`]) and for a replay, which runs one node
//! the same way, its commit kept by the replay's run log instead of written
//! ([`replay_step`]). Where each commit goes is the run log's business
//! ([`crate::run_log`]): nothing here knows whether there is a store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Map, Value, json};

use crate::failure::FailureCode;
use crate::kinds::{self, Finish, NodeFailure, NodeSuccess, Outcome, Wait};
use crate::node::node_config;
use crate::{EngineError, Event, Position, RunContext, RunOutcome, Waiting, state};
use crate::{ahead, metered};
use skillhost_runtime::TokenUsage;
use skillhost_scenario::{Node, NodeBody, Route, Severity, Vars};
use skillhost_store::{
    FieldHashes, NewArtifact, NewWait, RunState, RunStatus, StateChange, StepCommit, StepRow,
    StepStatus, StoreError, Written,
};

/// The run loop, from `checkpoint` with `state` until an end or fail node.
/// `hashes` has the digests of the state's fields that are known already;
/// it hashes each new state, re-hashing only the fields a step changed.
/// `tokens_used`: what the run's completions used before `checkpoint`.
pub(crate) async fn drive(
    cx: &RunContext<'_>,
    checkpoint: Position,
    state: RunState,
    hashes: FieldHashes,
    tokens_used: TokenUsage,
) -> Result<RunOutcome, EngineError> {
    metered::run_started(cx);
    let ended = run_loop(cx, checkpoint, state, hashes, tokens_used).await;
    // Its last tokens sent before it is reported ended: a process that
    // exits then would otherwise cut them off with its async runtime.
    if let Some(relay) = &cx.relay {
        relay.flushed(crate::relay::FLUSH_WAIT).await;
    }
    metered::run_ended(cx, &ended);
    ended
}

/// [`drive`]'s loop.
async fn run_loop(
    cx: &RunContext<'_>,
    checkpoint: Position,
    state: RunState,
    hashes: FieldHashes,
    tokens_used: TokenUsage,
) -> Result<RunOutcome, EngineError> {
    let mut run = Run::new(
        cx,
        checkpoint.seq,
        checkpoint.visits,
        state,
        hashes,
        tokens_used,
    );
    run.came_from = checkpoint.node_id;
    // A checkpoint with nowhere to go records a failure with no handler: the
    // process died before it could mark the run failed.
    let Some(mut current) = checkpoint.next_nodes.first().cloned() else {
        return run.failed(None).await;
    };
    loop {
        match run.run_node(&current).await {
            Ok(NodeEnd::Next(Some(next))) => current = next,
            Ok(NodeEnd::Next(None)) => return run.failed(None).await,
            Ok(NodeEnd::Finish(Finish::Completed)) => return run.completed().await,
            Ok(NodeEnd::Finish(Finish::Failed(report))) => return run.failed(Some(report)).await,
            Ok(NodeEnd::Wait(node, wait)) => return run.waiting(node, wait).await,
            // A cancel asked for while the run ran: the store refused the
            // checkpoint of the node that just ended, and the run ends at
            // that boundary.
            Err(EngineError::Store(StoreError::CancelRequested { by, at_ms, .. })) => {
                return run.cancelled(&by, at_ms).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// Ends a run whose cancel was asked for before it was resumed, at
/// `checkpoint`, without running a node.
pub(crate) async fn cancel(
    cx: &RunContext<'_>,
    checkpoint: &Position,
    state: RunState,
    by: &str,
    at_ms: i64,
) -> Result<RunOutcome, EngineError> {
    let run = Run::new(
        cx,
        checkpoint.seq,
        checkpoint.visits.clone(),
        state,
        FieldHashes::default(),
        TokenUsage::default(),
    );
    metered::run_started(cx);
    let ended = run.cancelled(by, at_ms).await;
    metered::run_ended(cx, &ended);
    ended
}

/// What one node of a replayed step did: the commit the run loop would have
/// made for it (None when the node finished the run instead), with the
/// node's id.
pub(crate) struct ReplayedStep {
    pub node_id: String,
    pub commit: Option<StepCommit>,
}

/// Runs the one node `position` leads to over `state`, exactly as the run
/// loop does (its kind, its rules, its routing, the failure handling), and
/// returns the commit the loop would have made instead of making it. For a
/// replay: `cx`'s log is a replay's ([`crate::run_log::RunLog::replaying`]),
/// which answers the node's calls from their journals and keeps its commit.
/// `tokens_used` is what the run's completions had used when the node
/// started, so a token budget judges the replayed node as it judged it.
pub(crate) async fn replay_step(
    cx: &RunContext<'_>,
    position: Position,
    state: RunState,
    tokens_used: TokenUsage,
) -> Result<ReplayedStep, EngineError> {
    let mut run = Run::new(
        cx,
        position.seq,
        position.visits,
        state,
        FieldHashes::default(),
        tokens_used,
    );
    run.came_from = position.node_id;
    let Some(current) = position.next_nodes.first() else {
        return Err(EngineError::Internal {
            run: cx.run_id.clone(),
            message: format!("checkpoint {} leads to no node", position.seq),
        });
    };
    let ended = run.run_node(current).await?;
    let commit = cx.log.take_commit();
    // A node that finished the run (or made it wait) is not a step; one that
    // went on was recorded.
    debug_assert!(matches!(ended, NodeEnd::Finish(_) | NodeEnd::Wait(..)) != commit.is_some());
    Ok(ReplayedStep {
        node_id: current.clone(),
        commit,
    })
}

/// How running one node ended for the run loop.
enum NodeEnd {
    /// Go on with this node; None: the run failed here with no handler.
    Next(Option<String>),
    /// The node ended the run.
    Finish(Finish),
    /// The run waits at this node for an answer.
    Wait(String, Wait),
}

/// A run in progress: its live state and everything its checkpoints carry.
struct Run<'c, 'a> {
    cx: &'c RunContext<'a>,
    state: Arc<RunState>,
    /// The digests of the state's fields, to hash each new state with.
    hashes: FieldHashes,
    /// What the run's `llm` completions used, the nodes before a resume
    /// included.
    tokens_used: TokenUsage,
    seq: u64,
    visits: BTreeMap<String, u32>,
    warnings: Vec<Value>,
    artifacts: Vec<NewArtifact>,
    /// Nodes executed by this process.
    nodes_run: usize,
    /// The node the run came from, for a fail node's report.
    came_from: String,
    started: Instant,
    /// The run's end was written with its last commit (its next node is an
    /// end node): [`Self::completed`] writes nothing more.
    ended_at_commit: bool,
    /// The last commit written ahead of its sync, while it may not be
    /// durable (`ahead.rs`), and how many commits are ahead with it.
    unsynced: Option<Written>,
    ahead: u32,
    /// Commits written ahead so far: each one's number for the events
    /// that wait for it.
    written_ahead: u64,
}

impl<'c, 'a> Run<'c, 'a> {
    fn new(
        cx: &'c RunContext<'a>,
        seq: u64,
        visits: BTreeMap<String, u32>,
        state: RunState,
        hashes: FieldHashes,
        tokens_used: TokenUsage,
    ) -> Self {
        Run {
            cx,
            state: Arc::new(state),
            hashes,
            tokens_used,
            seq,
            visits,
            warnings: Vec::new(),
            artifacts: Vec::new(),
            nodes_run: 0,
            came_from: String::new(),
            started: Instant::now(),
            ended_at_commit: false,
            unsynced: None,
            ahead: 0,
            written_ahead: 0,
        }
    }

    /// Runs node `current`: asks its kind what happened and applies it
    /// (changes, rules, routing, the commit, or the failure handling).
    async fn run_node(&mut self, current: &str) -> Result<NodeEnd, EngineError> {
        let cx = self.cx;
        let node = cx
            .scenario
            .node(current)
            .ok_or_else(|| EngineError::Internal {
                run: cx.run_id.clone(),
                message: format!("node `{current}` is not in the scenario"),
            })?;
        // A node that may act outside the run waits until every commit
        // before it is durable.
        if self.unsynced.is_some() && !ahead::runs_ahead(node) {
            self.settle().await?;
        }
        let visit = self.visit(node);
        let node_started = Instant::now();
        // The node's span: its id now, so its calls can go under it.
        let span = match &cx.trace {
            Some(trace) if !node.is_terminal() => {
                Some((trace.begin_node(), std::time::SystemTime::now()))
            }
            _ => None,
        };
        let outcome = match node.max_visits() {
            Some(max) if visit > max => Outcome::Fail(
                NodeFailure::new(
                    FailureCode::MaxVisitsExceeded,
                    format!(
                        "node `{}` was reached {visit} times, more than its max_visits of {max}",
                        node.id
                    ),
                ),
                None,
            ),
            _ => {
                // A node that finishes the run is not a step of its own.
                if !node.is_terminal() {
                    cx.emit(|| Event::NodeStarted {
                        run_id: cx.run_id.clone(),
                        node: node.id.clone(),
                        kind: node.kind().name(),
                        visit,
                        attempt: 1,
                    });
                    self.nodes_run += 1;
                }
                let tokens_left = cx
                    .scenario
                    .token_budget
                    .map(|budget| budget.saturating_sub(self.tokens_used.total()));
                let outcome = kinds::run(
                    cx,
                    node,
                    &self.state,
                    visit,
                    &self.came_from,
                    tokens_left,
                    self.seq,
                )
                .await;
                self.charge(node, outcome)
            }
        };

        // A step row records the node's time so far, whether it commits or
        // fails (the commit measures again, to include its rules and routing).
        let elapsed_us = node_started.elapsed().as_micros() as u64;
        if let (Some(trace), Some((span, started))) = (&cx.trace, span) {
            let error = match &outcome {
                Outcome::Fail(failure, _) => Some((&*failure.code, failure.message.as_str())),
                _ => None,
            };
            trace.node_ended(span, node, visit, started, error);
        }
        metered::node_finished(cx, node, std::time::Duration::from_micros(elapsed_us));
        let next = match outcome {
            Outcome::Finish(finish) => return Ok(NodeEnd::Finish(finish)),
            Outcome::Wait(wait) => return Ok(NodeEnd::Wait(node.id.clone(), wait)),
            Outcome::Fail(failure, mut step) => {
                if let Some(step) = &mut step {
                    step.duration_us = elapsed_us;
                }
                self.node_failed(node, failure, step).await?
            }
            Outcome::Advance(mut success) => {
                success.step.duration_us = elapsed_us;
                self.advance(node, success, node_started).await?
            }
        };
        if next.is_some() {
            self.came_from = node.id.clone();
        }
        Ok(NodeEnd::Next(next))
    }

    /// Hands a step's commit to the run log; whether it was written to a
    /// store. `last`: the next node is an end node, so the run's end goes
    /// in the same commit. `ahead`: the next node runs ahead of this
    /// commit's sync (`ahead.rs`).
    async fn record(
        &mut self,
        commit: StepCommit,
        artifacts: &[NewArtifact],
        last: bool,
        ahead: bool,
    ) -> Result<bool, EngineError> {
        let seq = commit.seq;
        let log = &self.cx.log;
        let written = if last {
            log.commit_last_step(commit, artifacts).await
        } else if ahead {
            log.commit_step_ahead(commit, artifacts)
                .await
                .map(|written| written.map(|written| self.wrote_ahead(written)).is_some())
        } else {
            log.commit_step(commit, artifacts).await
        };
        if !ahead && matches!(written, Ok(true)) {
            // Durable, and every commit written ahead before it with it.
            self.all_durable();
        }
        self.ended_at_commit = last && matches!(written, Ok(true));
        written.map_err(|e| {
            // The run ends at the checkpoint before this one.
            if e.is_cancel_requested() {
                self.seq = seq - 1;
            }
            e.into()
        })
    }

    /// A commit was written ahead of its sync: until it is durable, the
    /// run's events wait for it, and a task sends them once it is.
    fn wrote_ahead(&mut self, written: Written) {
        if written.is_durable() {
            self.all_durable();
            return;
        }
        self.written_ahead += 1;
        let commit = self.written_ahead;
        let cx = self.cx;
        cx.gate.written_ahead(commit);
        if cx.events.listening()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (gate, written) = (cx.gate.clone(), written.clone());
            runtime.spawn(async move {
                // A failed sync sends nothing; the run learns of it when it
                // settles, or from its next write.
                if written.durable().await.is_ok() {
                    gate.durable(commit);
                }
            });
        }
        self.unsynced = Some(written);
        self.ahead += 1;
    }

    /// Every commit written so far is durable: nothing waits any more.
    /// Nothing to do unless a commit was written ahead: only then are
    /// events held.
    fn all_durable(&mut self) {
        if self.unsynced.take().is_none() {
            return;
        }
        self.ahead = 0;
        self.cx.gate.all_durable();
    }

    /// Waits until every commit written so far is durable, and sends the
    /// events that waited for them. Err if a sync failed.
    async fn settle(&mut self) -> Result<(), EngineError> {
        if let Some(written) = &self.unsynced {
            written.durable().await?;
            self.all_durable();
        }
        Ok(())
    }

    /// Counts a visit of `node`; returns the count, this one included.
    fn visit(&mut self, node: &Node) -> u32 {
        let count = self.visits.entry(node.id.clone()).or_insert(0);
        *count += 1;
        *count
    }

    /// Adds what `node`'s completions used to the run's tokens; a success
    /// that brings the run past its `token_budget` fails the node, with its
    /// step, journal and usage kept.
    fn charge(&mut self, node: &Node, outcome: Outcome) -> Outcome {
        let usage = match &outcome {
            Outcome::Advance(success) => success.usage,
            Outcome::Fail(failure, _) => failure.usage,
            Outcome::Finish(_) | Outcome::Wait(_) => return outcome,
        };
        if usage.is_zero() {
            return outcome;
        }
        self.tokens_used.add(usage);
        let total = self.tokens_used.total();
        let (budget, success) = match (self.cx.scenario.token_budget, outcome) {
            (Some(budget), Outcome::Advance(success)) if total > budget => (budget, success),
            (_, outcome) => return outcome,
        };
        let mut failure = NodeFailure::new(
            FailureCode::TokenBudgetExceeded,
            format!(
                "node `{}` used {} tokens ({} in, {} out, in {} completion(s)), which brings \
                 the run to {total} tokens, past its token_budget of {budget}",
                node.id,
                usage.total(),
                usage.input_tokens,
                usage.output_tokens,
                usage.calls,
            ),
        );
        failure.suggestions = vec![format!(
            "raise `[scenario] token_budget` above {budget}, or ask for fewer tokens \
             (`max_tokens` in the node's llm grant)"
        )];
        failure.detail = json!({
            "token_budget": budget,
            "run_tokens": total,
            "node_usage": usage.to_json(),
        });
        failure.attempt = success.step.attempt;
        failure.journal = success.journal;
        failure.usage = usage;
        Outcome::Fail(failure, Some(success.step))
    }

    /// Applies a successful node: its changes, the rules over the new state,
    /// its edge, one commit. Returns the next node, or, when a rule or the
    /// routing fails the node after all, what [`Self::node_failed`] returns.
    async fn advance(
        &mut self,
        node: &Node,
        mut success: NodeSuccess,
        node_started: Instant,
    ) -> Result<Option<String>, EngineError> {
        let cx = self.cx;
        // A value nested deeper than the store keeps could be neither stored
        // nor read back, and hashing it recurses once per level: the node
        // fails before anything touches it.
        if let Some(too_deep) = success
            .changes
            .iter()
            .find_map(|change| skillhost_store::check_change_nesting(change).err())
        {
            let mut failure = NodeFailure::new(
                FailureCode::OutputTooDeep,
                format!("node `{}`: {too_deep}", node.id),
            );
            failure.journal = std::mem::take(&mut success.journal);
            return self.node_failed(node, failure, Some(success.step)).await;
        }
        // The node's own variables are gone, so the state is not shared and
        // the changes apply in place; `undo` restores it if they are refused.
        let undo = state::apply_with_undo(Arc::make_mut(&mut self.state), &success.changes);

        let step_warnings = match self.rules(node) {
            Ok(warnings) => warnings,
            Err(mut failure) => {
                undo.revert(Arc::make_mut(&mut self.state));
                // The node's host calls were made: they are committed with
                // the failure.
                failure.journal = success.journal;
                return self.node_failed(node, failure, Some(success.step)).await;
            }
        };
        if !step_warnings.is_empty() {
            let detail = success.step.detail.get_or_insert_with(|| json!({}));
            if let Some(obj) = detail.as_object_mut() {
                obj.insert("warnings".into(), Value::Array(step_warnings));
            }
        }

        let route = match success.route.take() {
            Some(to) => Ok(to),
            None => next_node(cx, node, &self.state, success.answer.as_ref()),
        };
        let next = match route {
            Ok(next) => next,
            Err(mut failure) => {
                undo.revert(Arc::make_mut(&mut self.state));
                failure.journal = success.journal;
                return self.node_failed(node, failure, Some(success.step)).await;
            }
        };

        self.seq += 1;
        let seq = self.seq;
        success.step.seq = Some(seq);
        for entry in &mut success.journal {
            entry.seq = seq;
        }
        success.step.duration_us = node_started.elapsed().as_micros() as u64;
        skillhost_store::failpoint::hit(|| format!("before-commit:{}", node.id));
        if cx.log.keeps_records() {
            // A durable run that goes on to an end node completes at this
            // commit: its end is written with it, one transaction and one
            // sync ([`crate::run_log::RunLog::commit_last_step`]).
            let last = cx.log.is_durable()
                && cx
                    .scenario
                    .node(&next)
                    .is_some_and(|to| matches!(to.body, NodeBody::End));
            let commit = StepCommit {
                run_id: cx.run_id.clone(),
                seq,
                node_id: node.id.clone(),
                next_nodes: vec![next.clone()],
                // Before `changes` moves: fields are evaluated in order.
                state_hash: self.hashes.hash_state(&self.state, &success.changes),
                changes: success.changes,
                full_state: self.state.clone(),
                step: success.step,
                visits: self.visits.clone(),
                journal: success.journal,
                cache: success.cache,
            };
            // The next node runs while this commit syncs when it can do
            // nothing outside the run (`ahead.rs`).
            let ahead = !last
                && cx.run_ahead
                && cx.log.is_durable()
                && self.ahead < ahead::MAX_AHEAD
                && cx.scenario.node(&next).is_some_and(ahead::runs_ahead);
            if self.record(commit, &success.artifacts, last, ahead).await? {
                skillhost_store::failpoint::hit_async(|| format!("after-commit:{}", node.id)).await;
                cx.emit(|| Event::CheckpointWritten {
                    run_id: cx.run_id.clone(),
                    seq,
                    node: node.id.clone(),
                    next: vec![next.clone()],
                });
            }
        }
        cx.emit(|| Event::NodeFinished {
            run_id: cx.run_id.clone(),
            node: node.id.clone(),
            duration_us: node_started.elapsed().as_micros() as u64,
            fuel_consumed: success.fuel_consumed,
            logs_dropped: success.logs_dropped,
        });
        self.artifacts.append(&mut success.artifacts);
        Ok(Some(next))
    }

    /// The validation rules after `node`, over the state as it leaves it: the
    /// warnings they raised, or the failure of the first fatal one.
    fn rules(&mut self, node: &Node) -> Result<Vec<Value>, NodeFailure> {
        let cx = self.cx;
        let mut step_warnings = Vec::new();
        for rule in cx.scenario.rules_after(&node.id) {
            let mut vars = Vars::new();
            vars.set_shared("input", cx.input.clone())
                .set_state("state", self.state.clone())
                .set_shared("config", cx.configs.scenario.clone());
            match rule.when.eval_bool(&vars) {
                Ok(false) => {}
                Ok(true) => match rule.severity {
                    Severity::Fatal => {
                        let mut failure =
                            NodeFailure::coded(rule.code.clone(), rule.message.clone());
                        failure.suggestions = rule.suggestions.clone();
                        return Err(failure);
                    }
                    Severity::Warning => {
                        cx.emit(|| Event::RuleWarning {
                            run_id: cx.run_id.clone(),
                            node: node.id.clone(),
                            code: rule.code.clone(),
                            message: rule.message.clone(),
                        });
                        let mut warning =
                            json!({ "node": node.id, "code": rule.code, "message": rule.message });
                        if !rule.suggestions.is_empty() {
                            warning["suggestions"] = json!(rule.suggestions);
                        }
                        step_warnings.push(warning.clone());
                        self.warnings.push(warning);
                    }
                },
                Err(e) => {
                    return Err(NodeFailure::new(
                        FailureCode::RuleError,
                        format!("rule `{}`: {e}", rule.code),
                    ));
                }
            }
        }
        Ok(step_warnings)
    }

    /// The node failed for good: says so, records it in `state.errors`,
    /// commits that, and returns the failure handler to continue with, or
    /// `None` when the run fails here.
    async fn node_failed(
        &mut self,
        node: &Node,
        mut failure: NodeFailure,
        step: Option<StepRow>,
    ) -> Result<Option<String>, EngineError> {
        let cx = self.cx;
        cx.emit(|| Event::NodeFailed {
            run_id: cx.run_id.clone(),
            node: node.id.clone(),
            attempt: failure.attempt,
            error: json!({ "code": failure.code, "message": failure.message }),
            will_retry: false,
        });
        let mut entry = json!({
            "code": failure.code,
            "message": failure.message,
            "node": node.id,
            "attempt": failure.attempt,
        });
        if !failure.suggestions.is_empty() {
            entry["suggestions"] = json!(failure.suggestions);
        }
        if !failure.detail.is_null() {
            entry["detail"] = failure.detail.clone();
        }
        let changes = vec![StateChange::Append {
            field: "errors".into(),
            items: vec![entry.clone()],
        }];
        Arc::make_mut(&mut self.state).apply(&changes);
        let handler = cx
            .scenario
            .on_failure
            .clone()
            .filter(|handler| *handler != node.id);
        self.seq += 1;
        let seq = self.seq;
        if cx.log.keeps_records() {
            let mut step = step.unwrap_or_else(|| empty_step(cx, node, failure.attempt));
            step.seq = Some(seq);
            for entry in &mut failure.journal {
                entry.seq = seq;
            }
            step.status = StepStatus::Failed;
            step.error = Some(entry);
            let commit = StepCommit {
                run_id: cx.run_id.clone(),
                seq,
                node_id: node.id.clone(),
                next_nodes: handler.iter().cloned().collect(),
                state_hash: self.hashes.hash_state(&self.state, &changes),
                changes,
                full_state: self.state.clone(),
                step,
                visits: self.visits.clone(),
                journal: failure.journal,
                cache: None,
            };
            if self.record(commit, &[], false, false).await? {
                cx.emit(|| Event::CheckpointWritten {
                    run_id: cx.run_id.clone(),
                    seq,
                    node: node.id.clone(),
                    next: handler.iter().cloned().collect(),
                });
            }
        }
        Ok(handler)
    }

    /// The run waits at `node_id` for an answer: records the wait at the
    /// run's last checkpoint (the run holds no lease while it waits) and
    /// ends the run loop.
    async fn waiting(mut self, node_id: String, wait: Wait) -> Result<RunOutcome, EngineError> {
        let cx = self.cx;
        self.settle().await?;
        skillhost_store::failpoint::hit(|| format!("before-wait:{node_id}"));
        let recorded = cx
            .log
            .record_wait(&NewWait {
                run_id: cx.run_id.clone(),
                seq: self.seq,
                node_id: node_id.clone(),
                prompt: wait.prompt.clone(),
                answer_schema: wait.answer_schema.clone(),
                timeout_ms: wait.timeout_ms,
            })
            .await;
        let deadline_ms = match recorded {
            Ok(deadline) => deadline,
            Err(EngineError::Store(StoreError::CancelRequested { by, at_ms, .. })) => {
                return self.cancelled(&by, at_ms).await;
            }
            Err(e) => return Err(e),
        };
        skillhost_store::failpoint::hit(|| format!("after-wait:{node_id}"));
        if let Some(trace) = &cx.trace {
            trace.drive_ended(RunStatus::Waiting, self.nodes_run);
        }
        cx.emit(|| Event::RunWaiting {
            run_id: cx.run_id.clone(),
            node: node_id.clone(),
            seq: self.seq,
            prompt: wait.prompt.clone(),
            deadline_ms,
        });
        Ok(RunOutcome {
            run_id: cx.run_id.clone(),
            status: RunStatus::Waiting,
            state: Arc::unwrap_or_clone(self.state),
            failure: None,
            warnings: self.warnings,
            nodes_run: self.nodes_run,
            last_seq: self.seq,
            artifacts: self.artifacts,
            summary: Map::new(),
            tokens_used: self.tokens_used,
            waiting: Some(Waiting {
                node_id,
                seq: self.seq,
                prompt: wait.prompt,
                answer_schema: wait.answer_schema,
                deadline_ms,
            }),
        })
    }

    /// Ends the run as cancelled by `by` (asked at `at_ms`), at its last
    /// checkpoint: the node whose checkpoint was refused is not kept.
    async fn cancelled(mut self, by: &str, at_ms: i64) -> Result<RunOutcome, EngineError> {
        let cx = self.cx;
        self.settle().await?;
        let error = json!({
            "code": FailureCode::Cancelled,
            "message": format!(
                "cancelled by `{by}`; the run stopped at its node boundary after checkpoint {}",
                self.seq
            ),
            "by": by,
            "requested_at": at_ms,
        });
        skillhost_store::failpoint::hit(|| "before-cancel-end".into());
        cx.log
            .finish_run(&cx.run_id, RunStatus::Cancelled, None, Some(&error))
            .await?;
        self.finished(RunStatus::Cancelled, Some(&error));
        Ok(RunOutcome {
            run_id: cx.run_id.clone(),
            status: RunStatus::Cancelled,
            state: Arc::unwrap_or_clone(self.state),
            failure: Some(error),
            warnings: self.warnings,
            nodes_run: self.nodes_run,
            last_seq: self.seq,
            artifacts: self.artifacts,
            summary: Map::new(),
            tokens_used: self.tokens_used,
            waiting: None,
        })
    }

    /// Ends the run as completed.
    async fn completed(mut self) -> Result<RunOutcome, EngineError> {
        let cx = self.cx;
        self.settle().await?;
        let summary = summarize(cx, &self.state);
        if !self.ended_at_commit {
            cx.log
                .finish_run(&cx.run_id, RunStatus::Completed, Some(&*self.state), None)
                .await?;
        }
        self.finished(RunStatus::Completed, None);
        Ok(RunOutcome {
            run_id: cx.run_id.clone(),
            status: RunStatus::Completed,
            // Nothing else holds the state now: move it out.
            state: Arc::unwrap_or_clone(self.state),
            failure: None,
            warnings: self.warnings,
            nodes_run: self.nodes_run,
            last_seq: self.seq,
            artifacts: self.artifacts,
            summary,
            tokens_used: self.tokens_used,
            waiting: None,
        })
    }

    /// Ends the run as failed with `report`, or, without one (no failure
    /// handler took the run), with a report built from the last error.
    async fn failed(mut self, report: Option<Value>) -> Result<RunOutcome, EngineError> {
        let cx = self.cx;
        self.settle().await?;
        let state = &self.state;
        let report = report.unwrap_or_else(|| {
            let last = state
                .get("errors")
                .and_then(Value::as_array)
                .and_then(|errors| errors.last())
                .cloned()
                .unwrap_or(Value::Null);
            json!({
                "node": last.get("node").cloned().unwrap_or(Value::Null),
                "code": last.get("code").cloned().unwrap_or(Value::Null),
                "message": last.get("message").cloned().unwrap_or(Value::Null),
                "errors": state.get("errors").cloned().unwrap_or(json!([])),
                "partial_results": partial_results(state),
                "suggestions": last.get("suggestions").cloned().unwrap_or(json!([])),
            })
        });
        cx.log
            .finish_run(&cx.run_id, RunStatus::Failed, Some(&**state), Some(&report))
            .await?;
        self.finished(RunStatus::Failed, Some(&report));
        Ok(RunOutcome {
            run_id: cx.run_id.clone(),
            status: RunStatus::Failed,
            state: RunState::clone(&self.state),
            failure: Some(report),
            warnings: self.warnings,
            nodes_run: self.nodes_run,
            last_seq: self.seq,
            artifacts: self.artifacts,
            summary: Map::new(),
            tokens_used: self.tokens_used,
            waiting: None,
        })
    }

    /// The run ended with `status` (and `error`, its failure or cancel).
    fn finished(&self, status: RunStatus, error: Option<&Value>) {
        let cx = self.cx;
        cx.emit(|| Event::RunFinished {
            run_id: cx.run_id.clone(),
            status: status.as_str().to_string(),
            duration_ms: self.started.elapsed().as_millis() as u64,
        });
        if let Some(trace) = &cx.trace {
            trace.drive_ended(status, self.nodes_run);
            trace.run_ended(&cx.run_id, status, error);
        }
    }
}

/// The node a successful node leads to. An approval's edges see its
/// `answer`.
fn next_node(
    cx: &RunContext<'_>,
    node: &Node,
    state: &Arc<RunState>,
    answer: Option<&Arc<Value>>,
) -> Result<String, NodeFailure> {
    match &node.route {
        Route::Next(to) => Ok(to.clone()),
        Route::Branches {
            branches,
            otherwise,
        } => {
            let mut vars = Vars::new();
            vars.set_shared("input", cx.input.clone())
                .set_state("state", state.clone())
                .set_shared("config", node_config(cx, node));
            if let Some(answer) = answer {
                vars.set_shared("answer", answer.clone());
            }
            for (guard, to) in branches {
                match guard.eval_bool(&vars) {
                    Ok(true) => return Ok(to.clone()),
                    Ok(false) => {}
                    Err(e) => {
                        return Err(NodeFailure::new(
                            FailureCode::BranchError,
                            format!("node `{}`: branch guard failed: {e}", node.id),
                        ));
                    }
                }
            }
            Ok(otherwise.clone())
        }
        Route::End => Err(NodeFailure::new(
            FailureCode::NoRoute,
            format!("node `{}` has no outgoing edge", node.id),
        )),
    }
}

/// The scenario's `[summary]`; an expression that fails shows its error.
pub(crate) fn summarize(cx: &RunContext<'_>, state: &Arc<RunState>) -> Map<String, Value> {
    summary_over(cx.scenario, cx.configs, &cx.input, state)
}

/// The `[summary]` of `loaded` over a finished run's `input` and final
/// `state` as the store keeps them: what the run's outcome said when it
/// completed, for a face that reads the run later, in another process (an
/// MCP server's `tasks/result`).
pub fn summary_of(
    loaded: &skillhost_scenario::LoadedScenario,
    input: Arc<Value>,
    state: Arc<RunState>,
) -> Map<String, Value> {
    summary_over(&loaded.scenario, &loaded.configs, &input, &state)
}

fn summary_over(
    scenario: &skillhost_scenario::Scenario,
    configs: &skillhost_scenario::Configs,
    input: &Arc<Value>,
    state: &Arc<RunState>,
) -> Map<String, Value> {
    if scenario.summary.is_empty() {
        return Map::new();
    }
    let mut vars = Vars::new();
    vars.set_shared("input", input.clone())
        .set_state("state", state.clone())
        .set_shared("config", configs.scenario.clone());
    scenario
        .summary
        .iter()
        .map(|(label, expr)| {
            let value = expr
                .eval(&vars)
                .unwrap_or_else(|e| json!(format!("(error: {e})")));
            (label.clone(), value)
        })
        .collect()
}

/// The state fields that hold something, without `errors`.
pub(crate) fn partial_results(state: &RunState) -> Value {
    let mut out = Map::new();
    for (name, value) in state.iter() {
        let empty = match value {
            Value::Null => true,
            Value::Array(a) => a.is_empty(),
            Value::Object(o) => o.is_empty(),
            Value::String(s) => s.is_empty(),
            _ => false,
        };
        if name != "errors" && !empty {
            out.insert(name.clone(), value.clone());
        }
    }
    Value::Object(out)
}

/// A step row for `node` with nothing measured yet.
pub(crate) fn empty_step(cx: &RunContext<'_>, node: &Node, attempt: u32) -> StepRow {
    StepRow {
        run_id: cx.run_id.clone(),
        seq: None,
        node_id: node.id.clone(),
        attempt,
        status: StepStatus::Ok,
        started_at_ms: now_ms(),
        duration_us: 0,
        input_hash: None,
        output_hash: None,
        error: None,
        fuel_consumed: None,
        memory_peak_bytes: None,
        detail: None,
    }
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
