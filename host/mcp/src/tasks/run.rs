//! A task's run, kept so that any server on the same store can answer for
//! it and a worker can finish it: the run is queued in the store before
//! the task is answered (every server then knows the task's id), then
//! continued here under its lease (renewed while it runs; after this
//! process died, a `host worker` on the store takes the run over once the
//! lease expired). A task's result is read back from the store the same
//! way by whichever server is asked: the result a plain call would have
//! given, built from the finished run's row.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{CallToolResult, ContentBlock};
use serde_json::{Value, json};
use skillhost_engine::queue::RunRequest;
use skillhost_engine::{Continued, Queued, RunOutcome, RunService, summary_of};
use skillhost_scenario::LoadedScenario;
use skillhost_store::{RunRow, RunState, RunStatus};

use crate::handler::{SkillhostMcp, ToolNames};

/// `service`, holding its runs' leases for `ttl` when one is given.
pub(crate) fn leased(service: RunService, ttl: Option<Duration>) -> RunService {
    match ttl {
        Some(ttl) => service.with_lease_ttl(ttl),
        None => service,
    }
}

/// Whether `path`, a run's scenario path, is `loaded`'s: as given to the
/// server, or made absolute, as a task's run (a queued run) records it.
pub(crate) fn is_path_of(loaded: &LoadedScenario, path: &str) -> bool {
    let own = &loaded.scenario.path;
    own.display().to_string() == path
        || (Path::new(path).is_absolute()
            && std::fs::canonicalize(own).is_ok_and(|own| own == Path::new(path)))
}

impl SkillhostMcp {
    /// Runs the task `run_id` of `loaded` with `input`: queued in the
    /// store, then continued here under its lease to its end or its first
    /// wait. A worker that claimed it first runs it instead.
    pub(crate) async fn run_task(
        &self,
        loaded: &Arc<LoadedScenario>,
        input: Value,
        run_id: &str,
        scenario_text: Option<String>,
    ) -> CallToolResult {
        let name = &loaded.scenario.name;
        let service = &self.inner.service;
        let request = RunRequest {
            run_id: Some(run_id.to_string()),
            scenario_text,
            ..RunRequest::default()
        };
        match service.enqueue(loaded, input, request).await {
            Ok(Queued::Created { .. }) => {}
            // No idempotency key is given: a task never meets one.
            Ok(Queued::Existing { run_id: live }) => {
                return error_result(format!(
                    "scenario `{name}`: a run with this key is live already: `{live}`"
                ));
            }
            Err(e) => {
                return error_result(format!(
                    "scenario `{name}`: the run could not go on: {}",
                    e.render(&ToolNames)
                ));
            }
        }
        self.remember(run_id);
        match service.continue_run(loaded, run_id, "mcp", false).await {
            Ok(Continued::Ran(outcome)) => self.outcome_result(name, outcome).await,
            // A worker claimed the queued run first: it runs it, and the
            // task's result is read from the store when it has ended.
            Ok(Continued::HeldBy { owner, .. }) => {
                let value = json!({
                    "run_id": run_id, "status": "running",
                    "summary": {"continued_by": owner},
                });
                let mut result =
                    CallToolResult::success(vec![ContentBlock::text(value.to_string())]);
                result.structured_content = Some(value);
                result
            }
            Err(e) => error_result(format!(
                "scenario `{name}`: the run could not go on: {}",
                e.render(&ToolNames)
            )),
        }
    }

    /// The scenario this server offers that `run` is a run of, or the
    /// composed scenario it is a run of, loaded again from where it was
    /// kept (`Err` if that no longer passes here); `None` for neither.
    pub(crate) fn scenario_of_run(
        &self,
        run: &RunRow,
    ) -> Option<Result<Arc<LoadedScenario>, String>> {
        if let Some(loaded) = self
            .inner
            .scenarios
            .iter()
            .find(|l| is_path_of(l, &run.scenario_path))
        {
            return Some(Ok(loaded.clone()));
        }
        let composer = self.inner.composer.as_ref()?;
        if let Err(problem) = skillhost_engine::restore_scenario_file(run) {
            return Some(Err(problem));
        }
        composer.reload(&run.scenario_path)
    }

    /// What a plain call of the finished `run` would have returned, from
    /// the store alone: the `[summary]` evaluated again over its final
    /// state, its failure report, its end. A completed run of a scenario
    /// this server does not offer (it cannot evaluate its summary) is
    /// reported as `run_status` reports it.
    pub(crate) async fn stored_result(&self, run: &RunRow) -> CallToolResult {
        let summary = match run.status {
            RunStatus::Completed => match self.scenario_of_run(run) {
                Some(Ok(loaded)) => {
                    let state = RunState::from_value(run.result.clone().unwrap_or(json!({})));
                    summary_of(&loaded, Arc::new(run.input.clone()), Arc::new(state))
                }
                Some(Err(_)) | None => return self.status(&run.id).await,
            },
            _ => Default::default(),
        };
        let outcome = RunOutcome {
            run_id: run.id.clone(),
            status: run.status,
            state: RunState::default(),
            failure: run.error.clone(),
            warnings: Vec::new(),
            nodes_run: 0,
            last_seq: run.last_seq,
            artifacts: Vec::new(),
            summary,
            tokens_used: Default::default(),
            waiting: None,
        };
        self.outcome_result(&run.scenario_name, outcome).await
    }
}

fn error_result(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}
