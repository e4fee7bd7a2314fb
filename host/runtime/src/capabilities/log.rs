//! The `log` capability: structured log lines, bounded per call and kept with
//! the call's report. Always granted.

use super::bindings::skillhost::skill::log::{Host, Level};
use crate::call::{CallState, LogLevel};

impl Host for CallState {
    fn log(&mut self, level: Level, message: String) {
        let level = match level {
            Level::Trace => LogLevel::Trace,
            Level::Debug => LogLevel::Debug,
            Level::Info => LogLevel::Info,
            Level::Warn => LogLevel::Warn,
            Level::Error => LogLevel::Error,
        };
        self.push_log(level, message);
    }
}
