//! The `log` capability: structured log lines, bounded per call and kept with
//! the call's report. Always granted: it reaches nothing outside the host, so
//! it has no grant, no backend and no journal. Every line is sanitised on the
//! way in ([`sanitize`]): what a skill logs is shown on terminals.
//!
//! Unlike the other capabilities, its host functions see the call's WASI
//! state besides its own instance: the lines a guest finished printing on
//! stdout or stderr join the log before each `log` line, so the log keeps
//! the order in which both were written.

use serde_json::{Value, json};
use wasmtime::component::{HasData, Linker};

use super::bindings::skillhost::skill::log::{self as wit, Level};
use super::wasi::WasiState;
use super::{Backends, Grants, HostCapability};
use crate::call::{CallOptions, CallScope, CallState, LogLevel, LogLine};

pub(crate) struct Log;

/// One call's log: the lines kept and what the budget dropped. WASI's
/// captured stdout and stderr end up here too.
pub(crate) struct LogCall {
    pub lines: Vec<LogLine>,
    pub dropped: u64,
    bytes: u64,
    max_bytes: u64,
}

impl LogCall {
    /// The call's log budget in bytes.
    pub(crate) fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    pub(crate) fn push(&mut self, skill: &str, level: LogLevel, message: String) {
        let message = sanitize(message);
        let size = message.len() as u64;
        if self.bytes + size > self.max_bytes {
            self.dropped += 1;
            return;
        }
        self.bytes += size;
        tracing::debug!(skill = %skill, ?level, "{message}");
        self.lines.push(LogLine { level, message });
    }
}

/// The line with every character that could move a terminal's cursor, start
/// an escape sequence, or fake another line (control characters other than
/// tab, line and paragraph separators, bidirectional overrides) written as a
/// `\u{..}` escape. Lines end up on terminals and in stored reports; a skill
/// must not be able to forge either.
pub(crate) fn sanitize(message: String) -> String {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !message.contains(unsafe_char) {
        return message;
    }
    let mut clean = String::with_capacity(message.len() + 8);
    for c in message.chars() {
        if unsafe_char(c) {
            clean.extend(c.escape_unicode());
        } else {
            clean.push(c);
        }
    }
    clean
}

impl HostCapability for Log {
    type Call = LogCall;

    fn grant_schema() -> Value {
        json!({
            "type": "string",
            "description": "Always granted; accepted for explicitness (any value)."
        })
    }

    fn new_call(options: &CallOptions, _grants: &Grants, _backends: &Backends) -> LogCall {
        LogCall {
            lines: Vec::new(),
            dropped: 0,
            bytes: 0,
            max_bytes: options.limits.max_log_bytes,
        }
    }

    fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<CallState, LogHost<'static>>(linker, |state| LogHost {
            log: &mut state.capabilities.log,
            scope: &state.scope,
            // `None` for a skill that has not touched WASI: nothing to do.
            wasi: state.wasi.as_deref(),
        })
    }
}

/// What a `log` call sees: the call's log, its scope, and its WASI state.
struct LogHost<'a> {
    log: &'a mut LogCall,
    scope: &'a CallScope,
    wasi: Option<&'a WasiState>,
}

impl HasData for LogHost<'static> {
    type Data<'a> = LogHost<'a>;
}

impl wit::Host for LogHost<'_> {
    fn log(&mut self, level: Level, message: String) {
        let skill = self.scope.skill_name();
        if let Some(wasi) = self.wasi {
            wasi.take_lines(&mut |level, line| self.log.push(skill, level, line));
        }
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        self.log.push(skill, level, message);
    }
}
