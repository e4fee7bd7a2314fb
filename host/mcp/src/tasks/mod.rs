//! MCP tasks (protocol 2025-11-25, the `tasks` utility) for the scenario
//! tools, over both transports: a `tools/call` of a scenario tool with
//! `params.task` answers at once with a task whose id is the run's id, and
//! `tasks/get`, `tasks/result`, `tasks/cancel` and `tasks/list` read and
//! steer the run through the store.
//!
//! `rmcp` 3.11 implements a later, incompatible tasks design (the
//! `io.modelcontextprotocol/tasks` extension of protocol 2026-07-28: no
//! `tasks/result`, a different task shape, a capability the 2025-11-25
//! clients do not send), so this module answers the 2025-11-25 requests
//! itself, in front of the SDK, and passes every other message through
//! untouched: over streamable HTTP as an axum layer (`http.rs`), over
//! stdio as a filter on the newline-delimited JSON-RPC streams between the
//! process's stdin/stdout and the SDK (`stdio.rs`). What a request is and
//! what it is answered (this file) is the same for both. It must not keep a
//! run's state outside the store: a task's status is its run's, read at
//! each request, and its result (what `tasks/result` returns, the same as a
//! plain call's) is built from the finished run's row (`run.rs`), so any
//! server on the store answers `tasks/get`, `tasks/result` and
//! `tasks/cancel` for any task, and a task's run is queued in the store
//! before the task is answered and run under its lease, so a worker
//! finishes it if its server dies. What stays in one process: the tool
//! result the task ended with there (the same as the stored one), a
//! refusal of a run that never started, and which tasks `tasks/list` lists.
//!
//! Both also advertise them, since rmcp's types have no place for it: the
//! `tasks` capability in the `initialize` result (list, cancel, and
//! task-augmented `tools/call`) and `execution.taskSupport = "optional"` on
//! each scenario tool in `tools/list` results, so a client that follows the
//! spec offers tasks by itself.
//!
//! While a task works, its `tasks/result` carries what its run streams
//! before the result, each message with the `related-task` meta: the
//! tokens of its streaming nodes and a failed attempt's discard as log
//! messages (at or above the session's `logging/setLevel`), and its
//! progress when the creating call carried a `progressToken`
//! (`stream.rs`), over HTTP as an event stream, over stdio as lines. The
//! tokens come from this process's engines and, on Postgres, from the
//! other processes' through the store's relay (`tokens.rs`), so a run a
//! worker or another server executes is heard too; they are not in the
//! store, so a `tasks/result` hears the run from when it came. Bounded:
//! so many followers per server, a backlog each, and a slow client's
//! excess tokens dropped and counted, never buffered without end.
//!
//! Statuses: a queued or running run is `working`; a run waiting at an
//! approval node is `input_required` (answered with the `run_answer` tool,
//! which continues it); `completed`, `failed` and `cancelled` are the
//! run's own.

mod http;
mod run;
mod stdio;
mod stream;
mod tokens;

pub(crate) use http::{HttpTasks, intercept};
pub(crate) use run::leased;
pub(crate) use stdio::serve as serve_stdio;
pub(crate) use tokens::TaskTokens;

use std::time::Duration;

use rmcp::model::CallToolResult;
use serde_json::{Value, json};
use skillhost_store::{RunRow, RunStatus};

use crate::handler::SkillhostMcp;

/// The largest message read (an HTTP request body, a line on stdin); the
/// SDK reads the ones passed on the same way.
const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// How often `tasks/result` looks at a run that has not ended, and the
/// poll interval tasks suggest to clients.
const POLL: Duration = Duration::from_millis(200);

/// How often a task's creation looks for its run's row, which it waits
/// for before it answers, and for how long at most.
const WRITTEN_POLL: Duration = Duration::from_millis(5);
const WRITTEN_WAIT: Duration = Duration::from_secs(10);

/// `_meta` key that ties a result to its task.
const RELATED_TASK: &str = "io.modelcontextprotocol/related-task";

/// JSON-RPC error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const INVALID_PARAMS: i64 = -32602;
const INTERNAL_ERROR: i64 = -32603;

/// A request answered here.
enum TaskRequest {
    Create {
        name: String,
        arguments: Value,
        /// The call's `progressToken`: the task's progress goes to it.
        progress: Option<Value>,
    },
    Get(String),
    Result(String),
    Cancel(String),
    List,
}

/// The request `message` is, if it is answered here: a `tools/call` of
/// a scenario tool with `task`, or a `tasks/*` request.
fn classify(server: &SkillhostMcp, message: &Value) -> Option<(Value, TaskRequest)> {
    let id = message.get("id")?.clone();
    let params = message.get("params").cloned().unwrap_or(json!({}));
    let task_id = || params["taskId"].as_str().unwrap_or("").to_string();
    let request = match message.get("method")?.as_str()? {
        "tools/call" if params.get("task").is_some_and(Value::is_object) => {
            let name = params["name"].as_str()?;
            if !server.is_scenario_tool(name) {
                return None;
            }
            TaskRequest::Create {
                name: name.to_string(),
                arguments: params.get("arguments").cloned().unwrap_or(json!({})),
                progress: params["_meta"]
                    .get("progressToken")
                    .filter(|t| t.is_string() || t.is_i64() || t.is_u64())
                    .cloned(),
            }
        }
        "tasks/get" => TaskRequest::Get(task_id()),
        "tasks/result" => TaskRequest::Result(task_id()),
        "tasks/cancel" => TaskRequest::Cancel(task_id()),
        "tasks/list" => TaskRequest::List,
        _ => return None,
    };
    Some((id, request))
}

/// A result the tasks are added to.
#[derive(Clone, Copy)]
enum Advert {
    /// `initialize`: the `tasks` capability.
    Capability,
    /// `tools/list`: `execution.taskSupport` on the scenario tools.
    Tools,
}

impl Advert {
    fn of(message: &Value) -> Option<(Advert, Value)> {
        let advert = match message.get("method")?.as_str()? {
            "initialize" => Advert::Capability,
            "tools/list" => Advert::Tools,
            _ => return None,
        };
        Some((advert, message.get("id")?.clone()))
    }

    /// Adds the tasks to the result of the request `id`, if `message` is it.
    fn apply(self, server: &SkillhostMcp, id: &Value, message: &mut Value) -> bool {
        if message.get("id") != Some(id) {
            return false;
        }
        let Some(result) = message.get_mut("result").and_then(Value::as_object_mut) else {
            return false;
        };
        match self {
            Advert::Capability => {
                let Some(capabilities) = result
                    .get_mut("capabilities")
                    .and_then(Value::as_object_mut)
                else {
                    return false;
                };
                capabilities.insert(
                    "tasks".into(),
                    json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}),
                );
            }
            Advert::Tools => {
                let Some(tools) = result.get_mut("tools").and_then(Value::as_array_mut) else {
                    return false;
                };
                for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
                    if tool
                        .get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|name| server.is_scenario_tool(name))
                    {
                        tool.insert("execution".into(), json!({"taskSupport": "optional"}));
                    }
                }
            }
        }
        true
    }
}

type Answer = Result<Value, (i64, String)>;

async fn answer(server: &SkillhostMcp, request: TaskRequest) -> Answer {
    match request {
        TaskRequest::Create {
            name,
            arguments,
            progress,
        } => match server.start_task(&name, arguments, progress) {
            Ok(run_id) => {
                written(server, &run_id).await;
                // A task begins `working`, as the protocol says, whatever
                // its run reached while its creation was being answered (an
                // approval at once, say); tasks/get tells where it is now.
                let mut created = task(server, &run_id).await?;
                if let Some(fields) = created.as_object_mut() {
                    fields.insert("status".into(), json!("working"));
                    fields.remove("statusMessage");
                }
                Ok(json!({ "task": created }))
            }
            Err(refused) => match *refused {
                // Arguments that do not fit: the same isError result as a
                // plain call, not a task.
                Ok(result) => {
                    serde_json::to_value(result).map_err(|e| (INTERNAL_ERROR, e.to_string()))
                }
                Err(error) => Err((error.code.0 as i64, error.message.to_string())),
            },
        },
        TaskRequest::Get(id) => task(server, &id).await,
        TaskRequest::Result(id) => result(server, &id).await,
        TaskRequest::Cancel(id) => cancel(server, &id).await,
        TaskRequest::List => {
            let mut ids: Vec<(i64, String)> = server
                .lock_tasks()
                .iter()
                .map(|(id, t)| (t.created_at_ms, id.clone()))
                .collect();
            ids.sort();
            let mut tasks = Vec::with_capacity(ids.len());
            for (_, id) in ids {
                tasks.push(task(server, &id).await?);
            }
            Ok(json!({ "tasks": tasks }))
        }
    }
}

/// Waits until the run of the task `id` just started here is in the store
/// (or was refused), so that the task is known to every server on the
/// store once its creation is answered.
async fn written(server: &SkillhostMcp, id: &str) {
    let deadline = tokio::time::Instant::now() + WRITTEN_WAIT;
    while tokio::time::Instant::now() < deadline {
        let refused = server
            .lock_tasks()
            .get(id)
            .is_none_or(|t| t.result.is_some());
        if refused || matches!(server.inner.store.run(id).await, Ok(Some(_))) {
            return;
        }
        tokio::time::sleep(WRITTEN_POLL).await;
    }
}

/// How the run of a task is read: from the store, or as its followers
/// last read it (`tokens.rs`: at most every [`tokens::SHARED_READ`] for
/// all the streams of one run).
#[derive(Clone, Copy)]
enum Read {
    Now,
    Shared,
}

/// The run of task `id`; None while a task started here has no row yet.
async fn run_of(server: &SkillhostMcp, id: &str) -> Result<Option<RunRow>, (i64, String)> {
    run_read(server, id, Read::Now).await
}

async fn run_read(
    server: &SkillhostMcp,
    id: &str,
    read: Read,
) -> Result<Option<RunRow>, (i64, String)> {
    let row = match read {
        Read::Now => server.inner.store.run(id).await,
        Read::Shared => server.inner.task_tokens.run(id).await,
    };
    match row {
        Ok(Some(run)) => Ok(Some(run)),
        Ok(None) if server.lock_tasks().contains_key(id) => Ok(None),
        Ok(None) => Err((
            INVALID_PARAMS,
            format!(
                "no task `{id}`: a task's id is its run's, as a scenario tool called with \
                 `task` answered (tasks/list lists this server's)"
            ),
        )),
        Err(e) => Err((INTERNAL_ERROR, format!("run `{id}`: cannot read it: {e}"))),
    }
}

/// `tasks/get`: the task of run `id` as it is now.
async fn task(server: &SkillhostMcp, id: &str) -> Answer {
    let run = run_of(server, id).await?;
    let created = server.lock_tasks().get(id).map(|t| t.created_at_ms);
    let Some(run) = run else {
        let at = created.unwrap_or_else(crate::handler::now_ms);
        // No row: the run has not been written yet, or could not start.
        let refused = server
            .lock_tasks()
            .get(id)
            .and_then(|t| t.result.as_ref().map(result_text));
        return Ok(match refused {
            Some(why) => task_json(id, "failed", Some(why), at, at),
            None => task_json(id, "working", None, at, at),
        });
    };
    let (status, message) = match run.status {
        RunStatus::Queued => ("working", Some("queued".to_string())),
        // The same progress a followed call hears: the nodes finished (a
        // checkpoint each), and where the run is.
        RunStatus::Running => (
            "working",
            Some(match &run.current_node {
                Some(node) => format!("{} node(s) finished; at node `{node}`", run.last_seq),
                None => format!("{} node(s) finished", run.last_seq),
            }),
        ),
        RunStatus::Waiting => {
            let wait = server
                .inner
                .store
                .wait_at(id, run.last_seq)
                .await
                .ok()
                .flatten();
            // The progress so far, then what the run waits for.
            let done = run.last_seq;
            let message = match wait {
                Some(wait) => format!(
                    "{done} node(s) finished; waiting at node `{}`: {}; answer with the \
                     run_answer tool (run_id `{id}`)",
                    wait.node_id, wait.prompt
                ),
                None => format!(
                    "{done} node(s) finished; waiting; answer with the run_answer tool \
                     (run_id `{id}`)"
                ),
            };
            ("input_required", Some(message))
        }
        RunStatus::Completed => ("completed", None),
        RunStatus::Failed => (
            "failed",
            run.error.as_ref().map(|e| {
                format!(
                    "failed at node `{}` ({}): {}",
                    e["node"].as_str().unwrap_or("?"),
                    e["code"].as_str().unwrap_or("?"),
                    e["message"].as_str().unwrap_or("")
                )
            }),
        ),
        RunStatus::Cancelled => ("cancelled", None),
    };
    Ok(task_json(
        id,
        status,
        message,
        created.unwrap_or(run.created_at_ms),
        run.updated_at_ms,
    ))
}

fn task_json(id: &str, status: &str, message: Option<String>, created: i64, updated: i64) -> Value {
    let mut task = json!({
        "taskId": id,
        "status": status,
        "createdAt": iso(created),
        "lastUpdatedAt": iso(updated.max(created)),
        // Kept as long as the run is in the store.
        "ttl": null,
        "pollInterval": POLL.as_millis() as u64,
    });
    if let Some(message) = message {
        task["statusMessage"] = json!(message);
    }
    task
}

fn iso(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_default()
}

/// Where task `id` is: its run (None while a task started here has no
/// row yet) and, once it has ended, what `tasks/result` returns: the
/// result a plain call would have given, the one kept here if the run
/// ended here (`ended_here`), else built from the store (the run ended in
/// another server or a worker), with the task's id in `_meta`.
struct Position {
    run: Option<RunRow>,
    result: Option<Value>,
    ended_here: bool,
}

async fn position(server: &SkillhostMcp, id: &str, read: Read) -> Result<Position, (i64, String)> {
    let run = run_read(server, id, read).await?;
    let kept = server.lock_tasks().get(id).and_then(|t| t.result.clone());
    let ended_here = kept.is_some();
    // Ended: the run did, or it never started (its refusal is kept).
    let result = match (&run, kept) {
        (Some(run), kept) if run.status.is_finished() => match kept {
            Some(result) => Some(result),
            None => Some(server.stored_result(run).await),
        },
        (None, Some(refusal)) => Some(refusal),
        _ => None,
    };
    let result = match result {
        Some(result) => {
            let mut value =
                serde_json::to_value(result).map_err(|e| (INTERNAL_ERROR, e.to_string()))?;
            value["_meta"] = json!({ RELATED_TASK: { "taskId": id } });
            Some(value)
        }
        None => None,
    };
    Ok(Position {
        run,
        result,
        ended_here,
    })
}

/// `tasks/result` answered once, without notifications: waits for the
/// run to end, then its result (`stream.rs` sends what the run streams
/// meanwhile, where the transport can carry it).
async fn result(server: &SkillhostMcp, id: &str) -> Answer {
    loop {
        if let Some(result) = position(server, id, Read::Now).await?.result {
            return Ok(result);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `tasks/cancel`: cancels the run as `run_cancel` does; a task that has
/// ended cannot be.
async fn cancel(server: &SkillhostMcp, id: &str) -> Answer {
    if let Some(run) = run_of(server, id).await?
        && run.status.is_finished()
    {
        return Err((
            INVALID_PARAMS,
            format!(
                "task `{id}` is {} already; only a working or input_required task can be \
                 cancelled",
                run.status.as_str()
            ),
        ));
    }
    let cancelled = server.cancel(id, "mcp").await;
    if cancelled.is_error == Some(true) {
        return Err((INVALID_PARAMS, result_text(&cancelled)));
    }
    task(server, id).await
}

/// The text of a tool result (what an isError result says).
fn result_text(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The JSON-RPC response to request `id`.
fn envelope(id: &Value, answer: Answer) -> Value {
    match answer {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err((code, message)) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
        }
    }
}
