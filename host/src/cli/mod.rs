//! The `host` command line: one module per subcommand (a subcommand's own
//! subcommands in it or under its folder, e.g. `skill/build.rs`), and
//! `common/` for what they share. Parses arguments, calls the library,
//! prints for people (or JSON with `--json`), and maps failures to the
//! documented exit codes ([`common::Failure`]):
//!
//! | code | meaning |
//! | ---- | ------- |
//! | 0 | success |
//! | 1 | the skill or run failed (a skill error, a trap, a limit) |
//! | 2 | bad invocation or input: usage, a missing or invalid file, JSON that does not fit, a database URL of a scheme this build does not have |
//! | 3 | the environment: a missing toolchain, a cache or runtime that cannot start, a database that cannot be opened or does not exist |
//!
//! A subcommand's module imports `common` and the library crates, never
//! another subcommand's module (`src/cli_layering.rs` checks it): the work is
//! in the library, so what two commands share is an argument or a helper.

mod bench;
mod cache;
mod check;
mod checkpoints;
mod common;
mod graph;
mod lock;
mod mcp;
mod replay;
mod run;
mod runs;
mod serve;
mod skill;
mod submit;
mod worker;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use common::Globals;

#[derive(Debug, Parser)]
#[command(
    name = "host",
    version,
    about = "Run deterministic, verifiable workflows of sandboxed WebAssembly skills"
)]
pub struct Cli {
    /// Directory for compiled components (default: $SKILLHOST_CACHE_DIR, else ~/.cache/skillhost/components).
    #[arg(long, global = true, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Compile components on every load instead of caching them.
    #[arg(long, global = true)]
    no_cache: bool,
    /// Directory for components pulled from registries (default: $SKILLHOST_REGISTRY_CACHE, else ~/.cache/skillhost/registry).
    #[arg(long, global = true, value_name = "DIR")]
    registry_cache: Option<PathBuf>,
    /// Print debug logs to stderr (or set RUST_LOG).
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

/// `host runs …`: named here, the dispatcher, because `fork` runs a run
/// as `host run` does (`run.rs`) while the others read history
/// (`runs.rs`), and a command's module never imports another's.
#[derive(Debug, Subcommand)]
enum RunsCommand {
    /// List runs, newest first.
    List(runs::ListArgs),
    /// Show one run: steps, timings, errors, components, final state.
    Show(runs::ShowArgs),
    /// Write one stored artifact of a run to stdout, or to a file with --out.
    Artifact(runs::ArtifactArgs),
    /// Write a run as a self-contained audit file (JSON) that `host replay --file` replays without a database.
    Export(runs::ExportArgs),
    /// Start a new run from a checkpoint of RUN, with state fields replaced, and run it to its end.
    Fork(run::ForkArgs),
    /// Answer a run waiting at an approval node, then continue it (SQLite: here; Postgres: a worker).
    Answer(run::AnswerArgs),
    /// Answer `true` to a waiting run whose answer is one yes/no field.
    Approve(run::ShorthandArgs),
    /// Answer `false` to a waiting run whose answer is one yes/no field.
    Reject(run::ShorthandArgs),
    /// Cancel a run: queued or waiting at once, running at its next node boundary.
    Cancel(runs::CancelArgs),
    /// Delete the history of old finished runs (never queued or running ones).
    Prune(runs::PruneArgs),
    /// Per-scenario retention for `prune`: list, or `SCENARIO 30d`, or `SCENARIO off`.
    Retention(runs::RetentionArgs),
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Build, inspect and call single skills.
    #[command(subcommand)]
    Skill(skill::SkillCommand),
    /// Run a scenario: `host run research --input '{"query": "..."}'`.
    Run(run::RunArgs),
    /// Continue an unfinished run from its last checkpoint (after a crash or kill).
    Resume(run::ResumeArgs),
    /// Check a scenario file without running it.
    Check(check::CheckArgs),
    /// Print a scenario's graph as Mermaid or DOT.
    Graph(graph::GraphArgs),
    /// Pin a scenario's registry components: write NAME.lock beside it.
    Lock(lock::LockArgs),
    /// List, inspect, export and fork runs.
    #[command(subcommand)]
    Runs(RunsCommand),
    /// Re-execute a finished run step by step from what it recorded, with no network, and compare every hash.
    Replay(replay::ReplayArgs),
    /// The checkpoint history of a run.
    Checkpoints(checkpoints::CheckpointsArgs),
    /// Queue a run for `host worker`s; prints its id.
    Submit(submit::SubmitArgs),
    /// Claim queued runs from the database and run them (scale-out: run many).
    Worker(worker::WorkerArgs),
    /// Measure the runtime and the engine.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// List or prune the compiled-component and registry caches.
    #[command(subcommand)]
    Cache(cache::CacheCommand),
    /// Serve the HTTP API and the web run inspector over the database.
    Serve(serve::ServeArgs),
    /// Serve scenarios and skills as the tools of a Model Context Protocol server (stdio, or --http ADDR).
    Mcp(mcp::McpArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let globals = Globals {
        cache_dir: cli.cache_dir,
        no_cache: cli.no_cache,
        registry_cache: cli.registry_cache,
    };
    let result = match cli.command {
        Command::Skill(command) => skill::run(command, &globals),
        Command::Run(args) => run::run(args, &globals),
        Command::Serve(args) => serve::serve(args, &globals),
        Command::Resume(args) => run::resume(args, &globals),
        Command::Check(args) => check::check(args, &globals),
        Command::Graph(args) => graph::graph(args, &globals),
        Command::Lock(args) => lock::lock(args, &globals),
        Command::Mcp(args) => mcp::mcp(args, &globals),
        Command::Runs(command) => match command {
            RunsCommand::List(args) => runs::list(args),
            RunsCommand::Show(args) => runs::show(args),
            RunsCommand::Artifact(args) => runs::artifact(args),
            RunsCommand::Export(args) => runs::export(args),
            RunsCommand::Fork(args) => run::fork(args, &globals),
            RunsCommand::Answer(args) => run::answer(args, &globals),
            RunsCommand::Approve(args) => run::verdict(args, true, &globals),
            RunsCommand::Reject(args) => run::verdict(args, false, &globals),
            RunsCommand::Cancel(args) => runs::cancel(args),
            RunsCommand::Prune(args) => runs::prune(args),
            RunsCommand::Retention(args) => runs::retention(args),
        },
        Command::Replay(args) => replay::replay(args, &globals),
        Command::Submit(args) => submit::submit(args, &globals),
        Command::Worker(args) => worker::worker(args, &globals),
        Command::Checkpoints(args) => checkpoints::checkpoints(args),
        Command::Bench(command) => bench::run(command, &globals),
        Command::Cache(command) => cache::run(command, &globals),
    };
    // Spans still queued are sent before the process ends, waiting no
    // longer than this for a collector that does not answer.
    let dropped = skillhost_telemetry::shutdown(std::time::Duration::from_secs(2));
    if dropped > 0 {
        eprintln!(
            "warning: {dropped} trace span(s) were not exported (the export queue was full, \
             or the collector could not be reached in time)"
        );
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if !failure.message.is_empty() {
                // A failure can quote what a run or a scenario wrote.
                eprintln!("error: {}", common::shown_lines(&failure.message));
            }
            ExitCode::from(failure.code)
        }
    }
}

fn init_tracing(verbose: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = if verbose {
        EnvFilter::new("skillhost=debug")
    } else {
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"))
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
