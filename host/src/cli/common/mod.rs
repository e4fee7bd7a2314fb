//! What every subcommand shares, and the only module a subcommand may import
//! from the command line besides the library crates, split by what it
//! holds:
//! - [`failures`]: failures and their exit codes, and how library errors
//!   become them (their remedies said as `host` commands);
//! - [`args`]: the global options and the shared arguments (`--input`, the
//!   `--database` and `--durability` arguments and opening a store with the
//!   right exit code, the registry options (`--locked`, `--offline`,
//!   `--username`/`--password-stdin`), idempotency keys, a server's token
//!   and allowed hosts) and how they become library values: the runtime
//!   with the host's configuration (`skillhost.toml` and its precedence,
//!   see `skillhost_runtime::config`);
//! - [`output`]: printing JSON, text a run wrote made safe for a terminal,
//!   progress bars, and writing a file the user named (`--out`) safely;
//! - [`loading`]: loading a scenario with the checker's report (its
//!   registry components resolved through `skillhost-oci`: the lock, the
//!   trust policy), a server's several scenarios, and a run by id;
//! - here: the async runtime, and the signals a long-running command stops
//!   on.
//!
//! Owns: how shared arguments become library values and library errors
//! become [`Failure`]s. Must not: know about any one subcommand (a helper
//! only one command uses stays in that command's module, so this module
//! imports none of them), or print beyond JSON it is handed and the checker's
//! report and warnings of a scenario it loads.

mod args;
mod failures;
mod loading;
mod output;

pub use args::*;
pub use failures::*;
pub use loading::*;
pub use output::*;

/// The multi-threaded async runtime the store and the engine run on.
pub fn tokio_runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Guards, mappings and writes are evaluated on these threads (map
        // items on its blocking threads): give them the stack an expression
        // at the checker's limits needs.
        .thread_stack_size(skillhost_scenario::expr::EVAL_STACK_BYTES)
        .build()
        .map_err(|e| Failure::environment(format!("cannot start the async runtime: {e}")))
}

/// A flag that turns true on SIGTERM or Ctrl-C: what a long-running command
/// (`host worker`, `host serve`) stops on.
pub fn shutdown_on_signals() -> Result<tokio::sync::watch::Receiver<bool>, Failure> {
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| Failure::environment(format!("cannot watch SIGTERM: {e}")))?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        let _ = shutdown_tx.send(true);
    });
    Ok(shutdown_rx)
}
