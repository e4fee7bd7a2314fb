//! Following one tool call's run: `notifications/progress` as its nodes
//! finish, when the call carries a `progressToken`, and its skills' log
//! lines as `notifications/message`, at or above the level the client set
//! with `logging/setLevel` (none until it sets one), and the tokens a
//! streaming node's skill is handed (logger `tokens`, info; a failed
//! attempt's discard, warning). The engine reports to
//! an event sink on its own threads; the notifications leave in order from
//! one task per call, which the call waits for before it answers, so every
//! notification comes before the result.
// MCP's logging is deprecated by SEP-2577 (rmcp marks it so) but still
// part of the protocol clients and the conformance suite speak.
#![allow(deprecated)]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use skillhost_engine::{Event, EventSink};
use skillhost_runtime::LogLevel;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// What a session asked to hear: the lowest log level (None: no logs).
#[derive(Default)]
pub(crate) struct Session {
    level: Mutex<Option<LoggingLevel>>,
}

impl Session {
    pub(crate) fn set_level(&self, level: LoggingLevel) {
        *self.level.lock().unwrap_or_else(|e| e.into_inner()) = Some(level);
    }

    pub(crate) fn level(&self) -> Option<LoggingLevel> {
        *self.level.lock().unwrap_or_else(|e| e.into_inner())
    }
}

enum Note {
    Progress(ProgressNotificationParam),
    Log(LoggingMessageNotificationParam),
}

/// The event sink of one followed call.
pub(crate) struct Following {
    notes: mpsc::UnboundedSender<Note>,
    progress: Option<ProgressToken>,
    level: Option<LoggingLevel>,
    /// Nodes finished so far: the progress.
    nodes: AtomicU64,
}

impl Following {
    /// A sink for a call with `progress` and the session's `level`, and
    /// the task that sends what it hears to `peer` (it ends once the sink
    /// is dropped and all is sent).
    pub(crate) fn start(
        peer: Peer<RoleServer>,
        progress: Option<ProgressToken>,
        level: Option<LoggingLevel>,
    ) -> (Following, JoinHandle<()>) {
        let (notes, mut heard) = mpsc::unbounded_channel();
        let sender = tokio::spawn(async move {
            while let Some(note) = heard.recv().await {
                // A client that went away stops hearing; the run goes on.
                let _ = match note {
                    Note::Progress(progress) => peer.notify_progress(progress).await,
                    Note::Log(message) => peer.notify_logging_message(message).await,
                };
            }
        });
        let following = Following {
            notes,
            progress,
            level,
            nodes: AtomicU64::new(0),
        };
        (following, sender)
    }
}

impl EventSink for Following {
    fn emit(&self, event: &Event) {
        match event {
            Event::NodeFinished { node, .. } => {
                let Some(token) = &self.progress else { return };
                let done = self.nodes.fetch_add(1, Ordering::Relaxed) + 1;
                // A graph's branches and loops leave the total unknown.
                let note = ProgressNotificationParam::new(token.clone(), done as f64)
                    .with_message(format!("node `{node}` finished ({done} node(s) so far)"));
                let _ = self.notes.send(Note::Progress(note));
            }
            Event::SkillLog {
                run_id,
                node,
                item,
                skill,
                level,
                message,
            } => {
                let Some(lowest) = self.level else { return };
                let level = mcp_level(*level);
                if rank(level) < rank(lowest) {
                    return;
                }
                let mut data = json!({ "run_id": run_id, "node": node, "message": message });
                if let Some(item) = item {
                    data["item"] = json!(item);
                }
                let message = LoggingMessageNotificationParam::new(level, data).with_logger(skill);
                let _ = self.notes.send(Note::Log(message));
            }
            // A streamed completion's text as the skill is handed it, and
            // the discard of a failed attempt's: log messages of logger
            // `tokens` (info and warning), for a client that asked for
            // them. Not progress: its value must grow with each
            // notification, and it counts nodes.
            Event::Token {
                run_id,
                node,
                item,
                attempt,
                stream,
                text,
                under,
            } => {
                let streamed = Some((u64::from(*stream), text.as_str()));
                let data = token_data(
                    run_id,
                    &strs(under),
                    node,
                    item.map(|i| i as u64),
                    (*attempt).into(),
                    streamed,
                );
                self.tokens(LoggingLevel::Info, data);
            }
            Event::TokensDiscarded {
                run_id,
                node,
                item,
                attempt,
                under,
            } => {
                let data = token_data(
                    run_id,
                    &strs(under),
                    node,
                    item.map(|i| i as u64),
                    (*attempt).into(),
                    None,
                );
                self.tokens(LoggingLevel::Warning, data);
            }
            _ => {}
        }
    }

    fn wants_logs(&self) -> bool {
        self.level.is_some()
    }
}

impl Following {
    /// A log message of logger `tokens` at `level`, if the client's level
    /// lets it through.
    fn tokens(&self, level: LoggingLevel, data: Value) {
        let Some(lowest) = self.level else { return };
        if rank(level) < rank(lowest) {
            return;
        }
        let message = LoggingMessageNotificationParam::new(level, data).with_logger("tokens");
        let _ = self.notes.send(Note::Log(message));
    }
}

/// The `data` of a log message of logger `tokens`, the same for a followed
/// call and a task's `tasks/result` (`tasks/tokens.rs`): a streaming node's
/// token (`streamed`: which of the attempt's completions, and its text), or
/// the discard of a failed attempt's tokens (None). A subgraph's child
/// run's carry `under`: the runs it is under, its parent first.
pub(crate) fn token_data(
    run_id: &str,
    under: &[&str],
    node: &str,
    item: Option<u64>,
    attempt: u64,
    streamed: Option<(u64, &str)>,
) -> Value {
    let mut data = match streamed {
        Some((stream, text)) => json!({
            "run_id": run_id, "node": node, "attempt": attempt, "stream": stream,
            "token": text,
        }),
        None => json!({
            "run_id": run_id, "node": node, "attempt": attempt,
            "tokens_discarded": true,
            "message": format!("attempt {attempt} failed: its tokens are not the node's output"),
        }),
    };
    if let Some(item) = item {
        data["item"] = json!(item);
    }
    if !under.is_empty() {
        data["under"] = json!(under);
    }
    data
}

fn strs(strings: &[String]) -> Vec<&str> {
    strings.iter().map(String::as_str).collect()
}

/// A skill's level as MCP's (syslog's) levels name it.
fn mcp_level(level: LogLevel) -> LoggingLevel {
    match level {
        LogLevel::Trace | LogLevel::Debug => LoggingLevel::Debug,
        LogLevel::Info => LoggingLevel::Info,
        LogLevel::Warn => LoggingLevel::Warning,
        LogLevel::Error => LoggingLevel::Error,
    }
}

/// Severity, lowest first.
pub(crate) fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}
