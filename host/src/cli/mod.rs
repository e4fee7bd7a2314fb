//! The `host` command line: one module per subcommand. Parses arguments, calls
//! the library, prints for people (or JSON with `--json`), and maps failures to
//! the documented exit codes:
//!
//! | code | meaning |
//! | ---- | ------- |
//! | 0 | success |
//! | 1 | the skill or run failed (a skill error, a trap, a limit) |
//! | 2 | bad invocation or input: usage, a missing or invalid file, JSON that does not fit, a database URL of a scheme this build does not have |
//! | 3 | the environment: a missing toolchain, a cache or runtime that cannot start, a database that cannot be opened or does not exist |

mod bench;
pub mod build;
mod run;
mod runs;
mod skill;
mod worker;

use std::fmt::Display;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use skillhost_runtime::{Runtime, RuntimeConfig};

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
    /// Print debug logs to stderr (or set RUST_LOG).
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
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
    Check(run::CheckArgs),
    /// Print a scenario's graph as Mermaid or DOT.
    Graph(run::GraphArgs),
    /// List and inspect runs.
    #[command(subcommand)]
    Runs(runs::RunsCommand),
    /// The checkpoint history of a run.
    Checkpoints(runs::CheckpointsArgs),
    /// Queue a run for `host worker`s; prints its id.
    Submit(worker::SubmitArgs),
    /// Claim queued runs from the database and run them (scale-out: run many).
    Worker(worker::WorkerArgs),
    /// Measure the runtime and the engine.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

/// A failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    /// The skill or run failed (exit 1).
    pub fn failed(message: impl Display) -> Self {
        Failure {
            code: 1,
            message: message.to_string(),
        }
    }

    /// Bad invocation or input (exit 2).
    pub fn bad_input(message: impl Display) -> Self {
        Failure {
            code: 2,
            message: message.to_string(),
        }
    }

    /// The environment is not fit (exit 3).
    pub fn environment(message: impl Display) -> Self {
        Failure {
            code: 3,
            message: message.to_string(),
        }
    }
}

pub type CliResult = Result<(), Failure>;

/// Global options every subcommand may need.
pub struct Globals {
    cache_dir: Option<PathBuf>,
    no_cache: bool,
}

impl Globals {
    pub fn runtime(&self) -> Result<Runtime, Failure> {
        let mut config = RuntimeConfig::default();
        if self.no_cache {
            config.cache_dir = None;
        } else if let Some(dir) = &self.cache_dir {
            config.cache_dir = Some(dir.clone());
        }
        Runtime::new(config).map_err(|e| Failure::environment(format!("{e:#}")))
    }
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let globals = Globals {
        cache_dir: cli.cache_dir,
        no_cache: cli.no_cache,
    };
    let result = match cli.command {
        Command::Skill(command) => skill::run(command, &globals),
        Command::Run(args) => run::run(args, &globals),
        Command::Resume(args) => run::resume(args, &globals),
        Command::Check(args) => run::check(args, &globals),
        Command::Graph(args) => run::graph(args, &globals),
        Command::Runs(command) => runs::runs(command),
        Command::Submit(args) => worker::submit(args, &globals),
        Command::Worker(args) => worker::worker(args, &globals),
        Command::Checkpoints(args) => runs::checkpoints(args),
        Command::Bench(command) => bench::run(command, &globals),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            if !failure.message.is_empty() {
                eprintln!("error: {}", failure.message);
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

/// Reads `--input`: inline JSON, or `@path` for a file.
pub fn read_json_arg(arg: &str) -> Result<serde_json::Value, Failure> {
    let (text, origin) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::read_to_string(path)
                .map_err(|e| Failure::bad_input(format!("cannot read input file `{path}`: {e}")))?,
            format!("input file `{path}`"),
        ),
        None => (arg.to_string(), "--input".to_string()),
    };
    serde_json::from_str(&text).map_err(|e| {
        Failure::bad_input(format!(
            "{origin} is not valid JSON ({e}); pass an object like '{{\"query\": \"...\"}}' or @file.json"
        ))
    })
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> CliResult {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::environment(format!("cannot encode JSON: {e}")))?;
    println!("{text}");
    Ok(())
}
