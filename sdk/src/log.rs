//! Structured logging through the host's `log` import (always granted). The
//! host bounds how much one call may log and keeps the lines with the step.
//!
//! On native targets the lines go to stderr and are kept for
//! [`crate::testing::take_logs`].

pub use crate::Level;

/// Logs `message` at `level`.
pub fn log(level: Level, message: impl AsRef<str>) {
    let message = message.as_ref();
    #[cfg(target_arch = "wasm32")]
    crate::bindings::skillhost::skill::log::log(level, message);
    #[cfg(not(target_arch = "wasm32"))]
    crate::native::log(level, message);
}

pub fn trace(message: impl AsRef<str>) {
    log(Level::Trace, message);
}

pub fn debug(message: impl AsRef<str>) {
    log(Level::Debug, message);
}

pub fn info(message: impl AsRef<str>) {
    log(Level::Info, message);
}

pub fn warn(message: impl AsRef<str>) {
    log(Level::Warn, message);
}

pub fn error(message: impl AsRef<str>) {
    log(Level::Error, message);
}
