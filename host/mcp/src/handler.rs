//! The MCP server's requests: `tools/list` and `tools/call` over the tools
//! of `tools.rs`, and `resources/list`, `resources/templates/list` and
//! `resources/read` over the artifacts of runs. A call's failure is a tool
//! result with `isError` (arguments that do not fit the input schema too,
//! as MCP asks, so a model can correct them); a protocol error is kept for
//! an unknown tool or resource.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
#[allow(deprecated)] // `LoggingLevel`: see `follow.rs`.
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, Implementation, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, LoggingLevel, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ResourceTemplate, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};
use skillhost_engine::queue::RunRequest;
use skillhost_engine::{Continued, Remedies, Remedy, RunOutcome, RunService, Started};
use skillhost_runtime::{CallError, CallOptions};
use skillhost_scenario::LoadedScenario;
use skillhost_scenario::checks::schema::CompiledSchema;
use skillhost_store::{Cancelled, RunStatus, Store, new_run_id};

use crate::compose::{self, Composer, Prepared};
use crate::follow::{Following, Session};
use crate::tasks;
use crate::tools::{self, Entry, Kind};
use crate::{McpError, Offer, SkillTool, Unavailable};

/// The most runs (for `resources/list`) and tasks (for `tasks/list`, and
/// the results kept of the tasks that ended here) one server remembers.
const KEPT_PER_SERVER: usize = 1000;

/// The artifact resources' URI scheme: `skillhost://runs/RUN/artifacts/NAME`.
const ARTIFACT_PREFIX: &str = "skillhost://runs/";

/// The server; cheap to clone (one per HTTP session shares everything).
#[derive(Clone)]
pub struct SkillhostMcp {
    pub(crate) inner: Arc<Inner>,
    /// What this session asked to hear (`logging/setLevel`).
    session: Arc<Session>,
}

pub(crate) struct Inner {
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    /// Each tool's input schema, compiled once.
    validators: Vec<CompiledSchema>,
    /// Each scenario's `[summary]` labels with their schema, compiled once.
    summaries: HashMap<String, Vec<(String, CompiledSchema)>>,
    skills: Vec<SkillTool>,
    pub(crate) scenarios: Vec<Arc<LoadedScenario>>,
    /// The scenarios given that cannot run here, and why.
    unavailable: Vec<Unavailable>,
    /// What `initialize` tells the client: how the tools work, and which
    /// scenarios are not offered, and why.
    instructions: String,
    pub(crate) store: Store,
    /// What it does to runs: start, answer and continue, cancel.
    pub(crate) service: RunService,
    /// The runs this server started or continued, newest last: their
    /// artifacts are the resources it lists (any run's can be read).
    runs: Mutex<Vec<String>>,
    /// The runs started as MCP tasks (`tasks.rs`), by run id (the task id).
    pub(crate) tasks: Mutex<HashMap<String, TaskRun>>,
    /// `scenario_compose`, when the operator set a ceiling.
    pub(crate) composer: Option<Composer>,
    /// The tokens of the runs `tasks/result` requests follow: the events
    /// of `service`'s runs, and what other processes relay (`tasks/`).
    pub(crate) task_tokens: Arc<tasks::TaskTokens>,
    /// The level each HTTP session set with `logging/setLevel`, by session
    /// id, oldest first: the SDK keeps it in the session's handler, which
    /// the tasks' layer in front of it does not reach (`tasks/http.rs`).
    #[allow(deprecated)]
    session_levels: Mutex<Vec<(String, LoggingLevel)>>,
}

/// A call refused before it ran: the isError result for arguments that do
/// not fit, or the protocol error for an unknown tool.
pub(crate) type Refused = Box<Result<CallToolResult, ErrorData>>;

/// A run started as an MCP task.
pub(crate) struct TaskRun {
    pub created_at_ms: i64,
    /// The scenario tool's result once the run ended (here, or through
    /// `run_answer`): what `tasks/result` returns. None while it runs or
    /// waits.
    pub result: Option<CallToolResult>,
    /// The creating call's `progressToken`, valid for the task's lifetime.
    pub progress: Option<Value>,
    /// The progress last sent to it (nodes finished): it only grows.
    pub progress_sent: u64,
}

impl SkillhostMcp {
    pub fn new(offer: Offer) -> Result<Self, McpError> {
        let mut entries = tools::entries(&offer.scenarios, &offer.skills)?;
        let composer = offer
            .compose
            .map(|compose| Composer::new(compose, &offer.scenarios, &offer.skills));
        if let Some(composer) = &composer {
            if entries.iter().any(|e| e.tool.name == compose::TOOL) {
                return Err(McpError::Tools(format!(
                    "a scenario or skill is named `{}`, the compose tool's name: offer it under \
                     another name, or leave out --compose-ceiling",
                    compose::TOOL
                )));
            }
            entries.push(Entry {
                tool: composer.tool(),
                kind: Kind::Compose,
            });
        }
        let mut validators = Vec::with_capacity(entries.len());
        for entry in &entries {
            let schema = Value::Object((*entry.tool.input_schema).clone());
            validators.push(CompiledSchema::compile(&schema).map_err(|e| {
                McpError::Tools(format!(
                    "tool `{}`: its input schema does not compile: {e}",
                    entry.tool.name
                ))
            })?);
        }
        let mut summaries = HashMap::new();
        for loaded in &offer.scenarios {
            let schema = loaded.scenario.summary_schema();
            let mut labels = Vec::new();
            if let Some(properties) = schema["properties"].as_object() {
                for (label, schema) in properties {
                    let compiled = CompiledSchema::compile(schema).map_err(|e| {
                        McpError::Tools(format!(
                            "scenario `{}`: the schema of summary `{label}` does not compile: {e}",
                            loaded.scenario.name
                        ))
                    })?;
                    labels.push((label.clone(), compiled));
                }
            }
            summaries.insert(loaded.scenario.name.clone(), labels);
        }
        let by_name = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.tool.name.to_string(), i))
            .collect();
        let task_tokens = tasks::TaskTokens::new(offer.store.clone());
        Ok(SkillhostMcp {
            inner: Arc::new(Inner {
                entries,
                by_name,
                validators,
                summaries,
                skills: offer.skills,
                scenarios: offer.scenarios,
                instructions: instructions(&offer.unavailable),
                unavailable: offer.unavailable,
                service: tasks::leased(
                    RunService::new(offer.store.clone(), task_tokens.clone()),
                    offer.lease_ttl,
                ),
                store: offer.store,
                runs: Mutex::new(Vec::new()),
                tasks: Mutex::new(HashMap::new()),
                composer,
                task_tokens,
                session_levels: Mutex::new(Vec::new()),
            }),
            session: Arc::new(Session::default()),
        })
    }

    /// The server for a new session: everything shared but what the
    /// session asked to hear.
    pub(crate) fn for_session(&self) -> SkillhostMcp {
        SkillhostMcp {
            inner: self.inner.clone(),
            session: Arc::new(Session::default()),
        }
    }

    /// The tools, as `tools/list` returns them.
    pub fn tools(&self) -> Vec<Tool> {
        self.inner.entries.iter().map(|e| e.tool.clone()).collect()
    }

    /// The tool `name` and `arguments` with defaults applied, checked
    /// against its input schema: Err(Ok(isError result)) when they do not
    /// fit, Err(Err(protocol error)) for an unknown tool.
    fn prepare(&self, name: &str, mut arguments: Value) -> Result<(&Entry, Value), Refused> {
        let inner = &*self.inner;
        let Some(&index) = inner.by_name.get(name) else {
            let message = match inner.unavailable.iter().find(|u| u.name == name) {
                Some(u) => format!(
                    "scenario `{name}` is not offered: it cannot run on this server: {}",
                    u.reason
                ),
                None => {
                    format!("no tool named `{name}`; tools/list names the tools this server offers")
                }
            };
            return Err(Box::new(Err(ErrorData::invalid_params(message, None))));
        };
        let entry = &inner.entries[index];
        if let Kind::Scenario(loaded) = &entry.kind {
            loaded.scenario.apply_input_defaults(&mut arguments);
        }
        if let Err(problem) = inner.validators[index].validate(&arguments) {
            return Err(Box::new(Ok(error_result(format!(
                "invalid arguments for tool `{name}`: {problem}; its inputSchema (tools/list) \
                 says which fields it takes"
            )))));
        }
        Ok((entry, arguments))
    }

    /// Whether `name` is a scenario tool (the tools that run as tasks).
    pub(crate) fn is_scenario_tool(&self, name: &str) -> bool {
        self.inner.by_name.get(name).is_some_and(|&i| {
            matches!(
                self.inner.entries[i].kind,
                Kind::Scenario(_) | Kind::Compose
            )
        })
    }

    async fn call(&self, name: &str, arguments: Value) -> Result<CallToolResult, ErrorData> {
        self.call_following(name, arguments, None).await
    }

    /// [`Self::call`], a scenario's run reporting to `events` (progress
    /// and logs for the client).
    async fn call_following(
        &self,
        name: &str,
        arguments: Value,
        events: Option<Arc<dyn skillhost_engine::EventSink>>,
    ) -> Result<CallToolResult, ErrorData> {
        let (entry, arguments) = match self.prepare(name, arguments) {
            Ok(prepared) => prepared,
            Err(refused) => return *refused,
        };
        // While the database is unreachable (a failover), a call that needs
        // it is refused at once, saying so (a skill's call needs none); the
        // same server answers again once it is back.
        if !matches!(entry.kind, Kind::Skill { .. })
            && let Some(refusal) = self.unreachable()
        {
            return Ok(refusal);
        }
        // A scenario tool's run, or a composed scenario's: started alike.
        let (loaded, input, text) = match &entry.kind {
            Kind::Scenario(loaded) => (loaded.clone(), arguments, None),
            Kind::Compose => match self.composed(&arguments) {
                Ok(ready) => (ready.loaded, ready.input, Some(ready.text)),
                Err(answer) => return Ok(*answer),
            },
            Kind::Skill {
                index,
                input,
                output,
            } => {
                return Ok(self
                    .call_skill(*index, input.unwrap(arguments), *output)
                    .await);
            }
            Kind::RunStatus => {
                return Ok(self
                    .reading(self.status(str_arg(&arguments, "run_id")))
                    .await);
            }
            Kind::RunCancel => {
                let by = by_arg(&arguments);
                return Ok(self.cancel(str_arg(&arguments, "run_id"), &by).await);
            }
            Kind::RunAnswer => {
                let by = by_arg(&arguments);
                let answer = arguments.get("answer").cloned().unwrap_or(json!({}));
                return Ok(self
                    .answer(str_arg(&arguments, "run_id"), answer, &by)
                    .await);
            }
        };
        let followed;
        let service = match events {
            Some(events) => {
                followed = self.inner.service.with_events(events);
                &followed
            }
            None => &self.inner.service,
        };
        Ok(self.start(service, &loaded, input, text).await)
    }

    pub(crate) fn remember(&self, run_id: &str) {
        let mut runs = self.inner.runs.lock().unwrap_or_else(|e| e.into_inner());
        if !runs.iter().any(|r| r == run_id) {
            // Bounded: a server lives long and its clients call without
            // end; an older run's artifacts are still read by URI.
            if runs.len() >= KEPT_PER_SERVER {
                runs.remove(0);
            }
            runs.push(run_id.to_string());
        }
    }

    /// Starts the scenario tool `name` as a task: checks its arguments,
    /// picks the run's id (the task's) and runs it on a task of its own;
    /// returns the id, or the refusal a plain call would have returned.
    pub(crate) fn start_task(
        &self,
        name: &str,
        arguments: Value,
        progress: Option<Value>,
    ) -> Result<String, Refused> {
        let (entry, arguments) = self.prepare(name, arguments)?;
        let (loaded, arguments, text) = match &entry.kind {
            Kind::Scenario(loaded) => (loaded.clone(), arguments, None),
            // A composed scenario the checker refuses is a protocol error
            // carrying the refusal: a task is created only for a run.
            Kind::Compose => match self.composed(&arguments) {
                Ok(ready) => (ready.loaded, ready.input, Some(ready.text)),
                Err(answer) if answer.is_error == Some(true) => {
                    let message = answer
                        .content
                        .first()
                        .and_then(|c| c.as_text())
                        .map(|t| t.text.clone())
                        .unwrap_or_default();
                    return Err(Box::new(Err(ErrorData::invalid_params(
                        message,
                        answer.structured_content.clone(),
                    ))));
                }
                Err(answer) => return Err(Box::new(Ok(*answer))),
            },
            _ => {
                return Err(Box::new(Err(ErrorData::invalid_params(
                    format!("tool `{name}` does not run as a task; call it without `task`"),
                    None,
                ))));
            }
        };
        let run_id = new_run_id();
        let mut tasks = self.lock_tasks();
        // Bounded as `remember` is: the oldest task goes (its run, in the
        // store, is still a task every server answers for).
        if tasks.len() >= KEPT_PER_SERVER
            && let Some(oldest) = tasks
                .iter()
                .min_by_key(|(_, t)| t.created_at_ms)
                .map(|(id, _)| id.clone())
        {
            tasks.remove(&oldest);
        }
        tasks.insert(
            run_id.clone(),
            TaskRun {
                created_at_ms: now_ms(),
                result: None,
                progress,
                progress_sent: 0,
            },
        );
        drop(tasks);
        let (server, id) = (self.clone(), run_id.clone());
        tokio::spawn(async move {
            let result = server.run_task(&loaded, arguments, &id, text).await;
            server.task_ended(&id, result).await;
        });
        Ok(run_id)
    }

    /// A `scenario_compose` call's scenario and input, checked and kept,
    /// or the result that refuses it (or a dry run's verdict).
    fn composed(&self, arguments: &Value) -> Result<compose::Ready, Box<CallToolResult>> {
        let Some(composer) = &self.inner.composer else {
            return Err(Box::new(error_result(
                "this server composes nothing: it was started without --compose-ceiling".into(),
            )));
        };
        match composer.prepare(arguments) {
            Prepared::Run(ready) => Ok(ready),
            Prepared::Answer(value, false) => Err(Box::new(structured_result(value))),
            Prepared::Answer(value, true) => {
                let count = value["errors"].as_array().map_or(0, Vec::len);
                let mut result = error_result(format!(
                    "the composed scenario was refused ({count} error(s)); nothing ran:\n{}",
                    serde_json::to_string_pretty(&value).unwrap_or_default()
                ));
                result.structured_content = Some(value);
                Err(Box::new(result))
            }
        }
    }

    #[allow(deprecated)]
    /// The level this session set with `logging/setLevel` (over stdio,
    /// the one session's).
    pub(crate) fn level(&self) -> Option<LoggingLevel> {
        self.session.level()
    }

    #[allow(deprecated)]
    /// Records the level HTTP session `session` set (bounded as the tasks
    /// are: the oldest session's is forgotten first, and it hears no
    /// tokens on a task's stream until it sets its level again).
    pub(crate) fn set_session_level(&self, session: &str, level: LoggingLevel) {
        let mut levels = self
            .inner
            .session_levels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        levels.retain(|(s, _)| s != session);
        if levels.len() >= KEPT_PER_SERVER {
            levels.remove(0);
        }
        levels.push((session.to_string(), level));
    }

    #[allow(deprecated)]
    /// The level HTTP session `session` set, if it did.
    pub(crate) fn session_level(&self, session: &str) -> Option<LoggingLevel> {
        let levels = self
            .inner
            .session_levels
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        levels.iter().find(|(s, _)| s == session).map(|(_, l)| *l)
    }

    pub(crate) fn lock_tasks(&self) -> std::sync::MutexGuard<'_, HashMap<String, TaskRun>> {
        self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps `result` as the task's if `run_id` is a task's and its run has
    /// ended (a run that waits ends later, through `run_answer`).
    async fn task_ended(&self, run_id: &str, result: CallToolResult) {
        if !self.lock_tasks().contains_key(run_id) {
            return;
        }
        let ended = matches!(
            self.inner.store.run(run_id).await,
            Ok(Some(run)) if run.status.is_finished()
        ) || result.structured_content.is_none();
        if ended && let Some(task) = self.lock_tasks().get_mut(run_id) {
            task.result = Some(result);
        }
    }

    /// A scenario tool's call: a new checkpointed run (with id `run_id`,
    /// else a new one), to its end or its first wait.
    async fn start(
        &self,
        service: &RunService,
        loaded: &Arc<LoadedScenario>,
        input: Value,
        scenario_text: Option<String>,
    ) -> CallToolResult {
        let request = RunRequest {
            scenario_text,
            ..RunRequest::default()
        };
        match service.start(loaded, input, request).await {
            Ok(Started::Ran(outcome)) => {
                self.remember(&outcome.run_id);
                self.outcome_result(&loaded.scenario.name, outcome).await
            }
            Ok(Started::Existing { run_id }) => error_result(format!(
                "scenario `{}`: a run with this key is live already: `{run_id}`",
                loaded.scenario.name
            )),
            Err(e) => error_result(format!(
                "scenario `{}`: the run could not go on: {}",
                loaded.scenario.name,
                e.render(&ToolNames)
            )),
        }
    }

    /// How a run that ended (or waits) is reported.
    pub(crate) async fn outcome_result(
        &self,
        scenario: &str,
        outcome: RunOutcome,
    ) -> CallToolResult {
        let run_id = outcome.run_id.clone();
        match outcome.status {
            RunStatus::Completed => {
                let labels = self.inner.summaries.get(scenario);
                for (label, schema) in labels.into_iter().flatten() {
                    let value = outcome.summary.get(label).cloned().unwrap_or(Value::Null);
                    if let Err(problem) = schema.validate(&value) {
                        return error_result(format!(
                            "run `{run_id}` of scenario `{scenario}` completed, but its summary \
                             `{label}` is {value} and does not fit its type ({problem}); see the \
                             run with `{}`",
                            tools::RUN_STATUS
                        ));
                    }
                }
                let artifacts = self.artifacts(&run_id).await;
                structured_result(json!({
                    "run_id": run_id,
                    "status": "completed",
                    "summary": outcome.summary,
                    "artifacts": artifacts,
                }))
            }
            RunStatus::Waiting => {
                let waiting = outcome.waiting.as_ref().map(|w| {
                    json!({"node": w.node_id, "prompt": w.prompt, "answer_schema": w.answer_schema})
                });
                structured_result(json!({
                    "run_id": run_id,
                    "status": "waiting",
                    "waiting": waiting,
                    "artifacts": self.artifacts(&run_id).await,
                }))
            }
            RunStatus::Failed => {
                let failure = outcome.failure.unwrap_or(Value::Null);
                error_result(format!(
                    "run `{run_id}` of scenario `{scenario}` failed at node `{}` ({}): {}\n{}",
                    failure["node"].as_str().unwrap_or("?"),
                    failure["code"].as_str().unwrap_or("?"),
                    failure["message"].as_str().unwrap_or(""),
                    serde_json::to_string_pretty(&json!({"run_id": run_id, "failure": failure}))
                        .unwrap_or_default()
                ))
            }
            other => error_result(format!(
                "run `{run_id}` of scenario `{scenario}` is {}; see it with run_status",
                other.as_str()
            )),
        }
    }

    /// The artifacts of a run, as the results list them.
    async fn artifacts(&self, run_id: &str) -> Vec<Value> {
        self.inner
            .store
            .artifacts(run_id)
            .await
            .unwrap_or_default()
            .into_iter()
            .map(|a| {
                json!({
                    "uri": artifact_uri(run_id, &a.name),
                    "name": a.name,
                    "mime_type": a.media_type,
                })
            })
            .collect()
    }

    /// A skill tool's call: one fresh instance, with the tool's grants.
    async fn call_skill(&self, index: usize, input: Value, output: tools::Wrap) -> CallToolResult {
        let tool = &self.inner.skills[index];
        let skill = tool.skill.clone();
        let options = CallOptions {
            limits: tool.limits.clone(),
            grants: tool.grants.clone(),
            ..CallOptions::default()
        };
        // A call may block (WASI, `http`, `llm`), never on a runtime thread.
        let report = tokio::task::spawn_blocking(move || skill.call(&input, &options)).await;
        let name = &tool.skill.manifest.id;
        match report.map(|r| r.result) {
            Ok(Ok(value)) => structured_result(output.wrap(value)),
            Ok(Err(CallError::InvalidInput { error, .. })) => error_result(format!(
                "invalid arguments for tool `{name}`: {error}; its inputSchema (tools/list) says \
                 which fields it takes"
            )),
            Ok(Err(e @ CallError::Skill { .. })) => error_result(format!(
                "{e}\n{}",
                serde_json::to_string_pretty(&e.to_json()).unwrap_or_default()
            )),
            Ok(Err(e)) => error_result(format!("[{}] {e}", e.kind())),
            Err(e) => error_result(format!("skill `{name}`: the call did not finish: {e}")),
        }
    }

    /// `run_status`: what the store knows of a run.
    pub(crate) async fn status(&self, run_id: &str) -> CallToolResult {
        let store = &self.inner.store;
        let run = match store.run(run_id).await {
            Ok(Some(run)) => run,
            Ok(None) => return error_result(no_run(run_id)),
            Err(e) => return error_result(format!("run `{run_id}`: cannot read it: {e}")),
        };
        let mut out = Map::new();
        out.insert("run_id".into(), json!(run.id));
        out.insert("scenario".into(), json!(run.scenario_name));
        out.insert("status".into(), json!(run.status.as_str()));
        out.insert("current_node".into(), json!(run.current_node));
        out.insert("last_seq".into(), json!(run.last_seq));
        if let Some(error) = &run.error {
            out.insert("failure".into(), error.clone());
        }
        if run.status == RunStatus::Waiting
            && let Ok(Some(wait)) = store.wait_at(run_id, run.last_seq).await
        {
            out.insert(
                "waiting".into(),
                json!({"node": wait.node_id, "prompt": wait.prompt, "answer_schema": wait.answer_schema}),
            );
        }
        out.insert("artifacts".into(), json!(self.artifacts(run_id).await));
        let out = Value::Object(out);
        match run.status {
            RunStatus::Failed | RunStatus::Cancelled => error_result(format!(
                "run `{run_id}` is {}\n{}",
                run.status.as_str(),
                serde_json::to_string_pretty(&out).unwrap_or_default()
            )),
            _ => structured_result(out),
        }
    }

    /// An error result if the store's database is unreachable now.
    fn unreachable(&self) -> Option<CallToolResult> {
        let (out_for, message) = self.inner.store.link()?.outage()?;
        Some(error_result(format!(
            "the database has been unreachable for {:.1}s ({message}); the server retries \
             with backoff: call again shortly",
            out_for.as_secs_f64()
        )))
    }

    /// `read` (which only reads), or an error result as soon as the
    /// database becomes unreachable while it waits on it.
    async fn reading(&self, read: impl Future<Output = CallToolResult>) -> CallToolResult {
        let Some(link) = self.inner.store.link().cloned() else {
            return read.await;
        };
        tokio::select! {
            result = read => result,
            () = link.down() => self.unreachable().unwrap_or_else(|| {
                error_result("the database became unreachable; call again shortly".into())
            }),
        }
    }

    /// `run_cancel`: as `host runs cancel`.
    pub(crate) async fn cancel(&self, run_id: &str, by: &str) -> CallToolResult {
        match self.inner.service.cancel(run_id, by).await {
            Ok(Cancelled::Now(was)) => structured_result(json!({
                "run_id": run_id, "status": "cancelled", "was": was.as_str(), "by": by,
            })),
            Ok(Cancelled::Requested) => structured_result(json!({
                "run_id": run_id, "status": "cancel-requested", "by": by,
            })),
            Err(e) => error_result(format!(
                "run `{run_id}`: not cancelled: {}",
                e.render(&ToolNames)
            )),
        }
    }

    /// `run_answer`: records the answer, then continues the run here.
    async fn answer(&self, run_id: &str, answer: Value, by: &str) -> CallToolResult {
        let store = &self.inner.store;
        let run = match store.run(run_id).await {
            Ok(Some(run)) => run,
            Ok(None) => return error_result(no_run(run_id)),
            Err(e) => return error_result(format!("run `{run_id}`: cannot read it: {e}")),
        };
        let loaded = match self.scenario_of_run(&run) {
            Some(Ok(loaded)) => Some(loaded),
            Some(Err(problem)) => {
                return error_result(format!(
                    "run `{run_id}` is a run of a composed scenario that cannot be loaded \
                     again: {problem}"
                ));
            }
            None => None,
        };
        let Some(loaded) = &loaded else {
            return error_result(format!(
                "run `{run_id}` is a run of `{}`, which this server does not offer; answer it \
                 where that scenario is offered (another MCP server, the HTTP API, the command \
                 line)",
                run.scenario_path
            ));
        };
        let service = &self.inner.service;
        if let Err(e) = service.answer(run_id, answer, by).await {
            return error_result(format!(
                "run `{run_id}`: the answer was not taken: {}",
                e.render(&ToolNames)
            ));
        }
        let result = match service.continue_run(loaded, run_id, "mcp", false).await {
            Ok(Continued::Ran(outcome)) => {
                self.remember(run_id);
                self.outcome_result(&loaded.scenario.name, outcome).await
            }
            // A worker (or another face) took it between the answer and
            // here: it runs it.
            Ok(Continued::HeldBy { owner, .. }) => {
                return structured_result(json!({
                    "run_id": run_id, "status": "running",
                    "artifacts": self.artifacts(run_id).await,
                    "summary": {"continued_by": owner},
                }));
            }
            Err(e) => {
                self.remember(run_id);
                error_result(format!(
                    "run `{run_id}`: could not continue: {}",
                    e.render(&ToolNames)
                ))
            }
        };
        self.task_ended(run_id, result.clone()).await;
        result
    }

    async fn read_artifact(&self, uri: &str) -> Result<ReadResourceResult, ErrorData> {
        let not_found = || {
            ErrorData::resource_not_found(
                format!(
                    "no resource `{uri}`: artifacts are {ARTIFACT_PREFIX}RUN_ID/artifacts/NAME \
                     (resources/list)"
                ),
                None,
            )
        };
        let (run_id, name) = uri
            .strip_prefix(ARTIFACT_PREFIX)
            .and_then(|rest| rest.split_once("/artifacts/"))
            .ok_or_else(not_found)?;
        let store = &self.inner.store;
        let artifacts = store
            .artifacts(run_id)
            .await
            .map_err(|e| ErrorData::internal_error(format!("run `{run_id}`: {e}"), None))?;
        let artifact = artifacts
            .into_iter()
            .find(|a| a.name == name)
            .ok_or_else(not_found)?;
        let bytes = store
            .artifact_bytes(&artifact.digest)
            .await
            .map_err(|e| ErrorData::internal_error(format!("run `{run_id}`: {e}"), None))?
            .ok_or_else(not_found)?;
        let contents = match String::from_utf8(bytes) {
            Ok(text) => ResourceContents::text(text, uri),
            Err(e) => ResourceContents::blob(
                base64::engine::general_purpose::STANDARD.encode(e.as_bytes()),
                uri,
            ),
        };
        Ok(ReadResourceResult::new(vec![
            contents.with_mime_type(artifact.media_type),
        ]))
    }
}

/// Milliseconds since the Unix epoch, as the store keeps times.
pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn artifact_uri(run_id: &str, name: &str) -> String {
    format!("{ARTIFACT_PREFIX}{run_id}/artifacts/{name}")
}

fn no_run(run_id: &str) -> String {
    format!("no run `{run_id}` in this server's store; a scenario tool's result names its run id")
}

/// Who answers or cancels: `by`, else `mcp`.
fn by_arg(arguments: &Value) -> String {
    arguments
        .get("by")
        .and_then(Value::as_str)
        .filter(|by| !by.trim().is_empty())
        .unwrap_or("mcp")
        .to_string()
}

fn str_arg<'a>(arguments: &'a Value, name: &str) -> &'a str {
    arguments.get(name).and_then(Value::as_str).unwrap_or("")
}

/// What `initialize` says: how the tools work, then each scenario given
/// that is no tool because it cannot run here, with why.
fn instructions(unavailable: &[Unavailable]) -> String {
    let mut text = String::from(
        "Each scenario tool starts a durable, checkpointed run and returns its run id; a run \
         that waits for an approval is answered with run_answer, and run_status reads any run \
         later. Skill tools call one sandboxed WebAssembly skill. Run artifacts (reports) are \
         resources.",
    );
    if !unavailable.is_empty() {
        text.push_str("\n\nScenarios this server was given but cannot run (not offered as tools):");
        for u in unavailable {
            text.push_str(&format!("\n- {}: {}", u.name, u.reason));
        }
    }
    text
}

/// A result with `structuredContent` and the same JSON as text.
fn structured_result(value: Value) -> CallToolResult {
    let text = serde_json::to_string(&value).unwrap_or_default();
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = Some(value);
    result
}

/// The library's remedies as this server's tools: what a client can call
/// about a refusal. What no tool does (resuming, listing runs,
/// checkpoints, exports) the message says in plain words.
pub struct ToolNames;

impl Remedies for ToolNames {
    fn way(&self, remedy: &Remedy) -> Option<String> {
        match remedy {
            Remedy::ShowRun { run } => Some(format!("`{}` (run_id `{run}`)", tools::RUN_STATUS)),
            Remedy::AnswerRun { run } => Some(format!("`{}` (run_id `{run}`)", tools::RUN_ANSWER)),
            Remedy::CancelRun { run } => Some(format!("`{}` (run_id `{run}`)", tools::RUN_CANCEL)),
            Remedy::StartRun => Some("the scenario's tool".into()),
            Remedy::ResumeRun { .. }
            | Remedy::ResumeChanged { .. }
            | Remedy::ListRuns { .. }
            | Remedy::ListCheckpoints { .. }
            | Remedy::ExportRun { .. }
            | Remedy::ReplayExport => None,
        }
    }
}

fn error_result(message: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(message)])
}

impl ServerHandler for SkillhostMcp {
    // `logging` is deprecated by SEP-2577, but clients and the conformance
    // suite still speak it (`follow.rs`).
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        let mut capabilities = ServerCapabilities::builder()
            .enable_tools()
            .enable_resources()
            .enable_logging()
            .build();
        if self.inner.composer.is_some() {
            capabilities.prompts = Some(Default::default());
        }
        ServerConfig::new(capabilities)
            .with_server_info(Implementation::new("skillhost", env!("CARGO_PKG_VERSION")))
            .with_instructions(self.inner.instructions.clone())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        let index = *self.inner.by_name.get(name)?;
        Some(self.inner.entries[index].tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let arguments = Value::Object(request.arguments.unwrap_or_default());
        let progress = context.meta.get_progress_token();
        let level = self.session.level();
        if (progress.is_none() && level.is_none()) || !self.is_scenario_tool(&request.name) {
            return self.call(&request.name, arguments).await.map(Into::into);
        }
        let (following, sender) = Following::start(context.peer.clone(), progress, level);
        let result = self
            .call_following(&request.name, arguments, Some(Arc::new(following)))
            .await;
        // The sink is gone with the run: once what it heard is sent, the
        // result follows.
        let _ = sender.await;
        result.map(Into::into)
    }

    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: rmcp::model::SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.session.set_level(request.level);
        Ok(())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let runs = self
            .inner
            .runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut resources = match &self.inner.composer {
            Some(composer) => composer.resources(),
            None => Vec::new(),
        };
        for run_id in runs.iter().rev() {
            let artifacts = self
                .inner
                .store
                .artifacts(run_id)
                .await
                .map_err(|e| ErrorData::internal_error(format!("run `{run_id}`: {e}"), None))?;
            for a in artifacts {
                resources.push(
                    Resource::new(artifact_uri(run_id, &a.name), a.name.clone())
                        .with_description(format!("artifact `{}` of run {run_id}", a.name))
                        .with_mime_type(a.media_type)
                        .with_size(a.size),
                );
            }
        }
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        Ok(ListResourceTemplatesResult::with_all_items(vec![
            ResourceTemplate::new(
                format!("{ARTIFACT_PREFIX}{{run_id}}/artifacts/{{name}}"),
                "run-artifact",
            )
            .with_description("An artifact of any run in this server's store"),
        ]))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if let Some(contents) = self
            .inner
            .composer
            .as_ref()
            .and_then(|c| c.read(&request.uri))
        {
            return Ok(ReadResourceResult::new(vec![contents]).into());
        }
        self.read_artifact(&request.uri).await.map(Into::into)
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let prompts = match &self.inner.composer {
            Some(_) => vec![Composer::prompt()],
            None => Vec::new(),
        };
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let composer = match &self.inner.composer {
            Some(composer) if request.name == compose::PROMPT => composer,
            _ => {
                return Err(ErrorData::invalid_params(
                    format!(
                        "no prompt named `{}`; prompts/list names them",
                        request.name
                    ),
                    None,
                ));
            }
        };
        let goal = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("goal"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ErrorData::invalid_params(
                    format!("prompt `{}` needs the argument `goal`", compose::PROMPT),
                    None,
                )
            })?;
        Ok(composer.get_prompt(goal).into())
    }
}

#[cfg(test)]
mod tests {
    use skillhost_engine::EngineError;

    use super::ToolNames;

    /// A run that waits: the error says to answer it or cancel it with
    /// this server's tools, and names no `host` command.
    #[test]
    fn a_waiting_runs_error_names_the_tools_and_no_host_command() {
        let waiting = EngineError::Waiting {
            id: "r1".into(),
            node: "approve".into(),
            prompt: "Ship?".into(),
        };
        let said = waiting.render(&ToolNames);
        assert_eq!(
            said,
            "run `r1` is waiting for an answer at node `approve` (Ship?); answer it with \
             `run_answer` (run_id `r1`), or cancel it with `run_cancel` (run_id `r1`)"
        );
        let others = [
            EngineError::UnknownRun("r1".into()),
            EngineError::RunFinished {
                id: "r1".into(),
                status: "completed".into(),
            },
            EngineError::NotWaiting {
                id: "r1".into(),
                status: "completed".into(),
            },
            EngineError::AlreadyAnswered {
                id: "r1".into(),
                node: "approve".into(),
                by: "alice".into(),
                at: "T".into(),
                status: "completed".into(),
            },
            EngineError::WaitTimedOut {
                id: "r1".into(),
                node: "approve".into(),
                deadline: "T".into(),
            },
            EngineError::ComponentsChanged {
                id: "r1".into(),
                changes: "skill `a` changed".into(),
            },
        ];
        for e in others {
            let said = e.render(&ToolNames);
            assert!(!said.contains("host "), "{said}");
        }
    }
}
