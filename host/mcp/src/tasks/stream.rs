//! What a `tasks/result` hears while its task works, before its result:
//! the run's tokens as log messages (logger `tokens`: each delta at info,
//! a failed attempt's discard at warning; the same `data` a followed plain
//! call's have, `follow.rs`), when the session set a level with
//! `logging/setLevel` that lets them through, and, when the `tools/call`
//! that created the task carried a `progressToken` (the protocol keeps it
//! valid for the task's lifetime), `notifications/progress` with the nodes
//! finished. Each carries `_meta["io.modelcontextprotocol/related-task"]`,
//! and the response comes after all of them.
//!
//! The tokens come from the moment the request follows the run on (a
//! `tasks/result` called late hears the rest of the run, not what went
//! before: tokens are not part of a run's record, `skillhost_store::live`,
//! and what the journal keeps of a streamed completion is written with its
//! node's step, which the result covers); progress is read from the store
//! (the run's checkpoints), so it is the same wherever the run executes,
//! and never goes back, also across several `tasks/result` of one task.
//! The progress token is this server's to know: a `tasks/result` sent to
//! another server on the store hears the tokens, not the progress.
//!
//! The messages go to a bounded channel, which the transport drains (an
//! HTTP event stream, stdout): a client that reads slowly holds the
//! follower up, and the tokens it cannot take are dropped and counted
//! (`tokens.rs`), never queued without bound. A client that goes away
//! (the channel closes) ends the follower at once.

// MCP's logging is deprecated by SEP-2577 but still spoken (`follow.rs`).
#![allow(deprecated)]
use std::time::Duration;

use rmcp::model::LoggingLevel;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::tokens::{Follower, Heard, MAX_FOLLOWERS, Next};
use super::{POLL, RELATED_TASK, Read, envelope, position};
use crate::follow::rank;
use crate::handler::SkillhostMcp;

/// How many messages wait for the transport at most.
pub(crate) const MESSAGES_QUEUED: usize = 16;

/// After a run that ended in another process, how long no relayed token
/// must come before the result is sent (the relay sends a few
/// milliseconds after the engine, which may commit the run's end first),
/// and how long that wait lasts at most.
const QUIET: Duration = Duration::from_millis(300);
const QUIET_AT_MOST: Duration = Duration::from_secs(3);

/// Answers `tasks/result` (request `request_id`) for task `task_id` on
/// `out`: what the run streams and its progress while it works, then the
/// response (the result, or the error of a task that is not one). `level`
/// is the session's, from `logging/setLevel`.
pub(crate) async fn stream_result(
    server: &SkillhostMcp,
    request_id: &Value,
    task_id: &str,
    level: Option<LoggingLevel>,
    out: &mpsc::Sender<Value>,
) {
    // Unknown: answered before anything is followed.
    let first = match position(server, task_id, Read::Now).await {
        Ok(position) => position,
        Err(e) => {
            let _ = out.send(envelope(request_id, Err(e))).await;
            return;
        }
    };
    if let Some(result) = first.result {
        let _ = out.send(envelope(request_id, Ok(result))).await;
        return;
    }
    let follower = match level {
        Some(level) if rank(level) <= rank(LoggingLevel::Warning) => {
            let follower = server.inner.task_tokens.follow(task_id).await;
            if follower.is_none() {
                let data = json!({
                    "run_id": task_id,
                    "message": format!(
                        "this server streams tokens to {MAX_FOLLOWERS} tasks/result requests at \
                         once; this one hears none (the result is whole)"
                    ),
                });
                let note = log_message(task_id, LoggingLevel::Warning, data);
                if out.send(note).await.is_err() {
                    return;
                }
            }
            follower
        }
        _ => None,
    };
    let hearing = Hearing {
        task_id,
        level,
        follower,
        out,
    };
    let progress = server
        .lock_tasks()
        .get(task_id)
        .and_then(|t| t.progress.clone());
    // The run was read just now; it is read again each poll, and what was
    // heard is sent as it comes.
    let mut next_poll = Instant::now();
    loop {
        if !hearing.send_heard().await {
            return;
        }
        if Instant::now() >= next_poll {
            let position = match position(server, task_id, Read::Shared).await {
                Ok(position) => position,
                Err(e) => {
                    let _ = out.send(envelope(request_id, Err(e))).await;
                    return;
                }
            };
            if let (Some(token), Some(run)) = (&progress, &position.run)
                && let Some(note) = progressed(server, task_id, token, run)
                && out.send(note).await.is_err()
            {
                return;
            }
            if let Some(result) = position.result {
                // Tokens relayed by the process that ran it may still be
                // on their way.
                if !position.ended_here
                    && server.inner.store.relays_tokens()
                    && hearing.follower.is_some()
                    && !hearing.quiet().await
                {
                    return;
                }
                if hearing.send_heard().await {
                    let _ = out.send(envelope(request_id, Ok(result))).await;
                }
                return;
            }
            next_poll = Instant::now() + POLL;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(next_poll) => {}
            _ = hearing.changed() => {}
            _ = out.closed() => return,
        }
    }
}

/// A follower and where what it hears goes.
struct Hearing<'a> {
    task_id: &'a str,
    level: Option<LoggingLevel>,
    follower: Option<Follower>,
    out: &'a mpsc::Sender<Value>,
}

impl Hearing<'_> {
    /// Waits until the follower heard something (never, without one).
    async fn changed(&self) {
        match &self.follower {
            Some(follower) => follower.changed().await,
            None => std::future::pending().await,
        }
    }

    /// Sends what was heard, in order; false once the client is gone.
    async fn send_heard(&self) -> bool {
        let Some(follower) = &self.follower else {
            return true;
        };
        while let Some(next) = follower.next() {
            let (level, data) = match next {
                Next::Heard(Heard::Token(data)) => (LoggingLevel::Info, data),
                Next::Heard(Heard::Discarded(data)) => (LoggingLevel::Warning, data),
                Next::Skipped(count, discard) => {
                    let mut message = format!(
                        "{count} token(s) were dropped here: this stream fell behind the run \
                         (the result is whole)"
                    );
                    if discard {
                        message.push_str(
                            "; a failed attempt's discard was among them, so what was heard \
                             may include a failed attempt's tokens",
                        );
                    }
                    let data = json!({
                        "run_id": self.task_id, "tokens_skipped": count, "message": message,
                    });
                    (LoggingLevel::Warning, data)
                }
            };
            if self.level.is_none_or(|lowest| rank(level) < rank(lowest)) {
                continue;
            }
            if self
                .out
                .send(log_message(self.task_id, level, data))
                .await
                .is_err()
            {
                return false;
            }
        }
        true
    }

    /// Sends what is heard until none came for [`QUIET`] (at most
    /// [`QUIET_AT_MOST`]); false once the client is gone.
    async fn quiet(&self) -> bool {
        let until = Instant::now() + QUIET_AT_MOST;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(QUIET) => return true,
                _ = self.changed() => {
                    if !self.send_heard().await {
                        return false;
                    }
                    if Instant::now() >= until {
                        return true;
                    }
                }
                _ = self.out.closed() => return false,
            }
        }
    }
}

/// The progress of task `task_id` as its run's row says, if it moved on
/// since this server last said it for the task.
fn progressed(
    server: &SkillhostMcp,
    task_id: &str,
    token: &Value,
    run: &skillhost_store::RunRow,
) -> Option<Value> {
    let done = run.last_seq;
    {
        let mut tasks = server.lock_tasks();
        let task = tasks.get_mut(task_id)?;
        if done <= task.progress_sent {
            return None;
        }
        task.progress_sent = done;
    }
    let message = match &run.current_node {
        Some(node) if !run.status.is_finished() => {
            format!("{done} node(s) finished; at node `{node}`")
        }
        _ => format!("{done} node(s) finished"),
    };
    Some(json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": {
            "progressToken": token,
            "progress": done,
            "message": message,
            "_meta": { RELATED_TASK: { "taskId": task_id } },
        },
    }))
}

/// A `notifications/message` of logger `tokens` about task `task_id`.
fn log_message(task_id: &str, level: LoggingLevel, data: Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/message",
        "params": {
            "level": level,
            "logger": "tokens",
            "data": data,
            "_meta": { RELATED_TASK: { "taskId": task_id } },
        },
    })
}
