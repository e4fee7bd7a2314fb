//! Skillhost: a WebAssembly host for deterministic, verifiable workflows of
//! atomic skills. The `host` binary is a thin layer over this library.

pub mod build;
pub mod checks;
pub mod cli;
pub mod engine;
pub mod failpoint;
pub mod runtime;
pub mod scenario;
pub mod store;
pub mod worker;
