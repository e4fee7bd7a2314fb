//! `host bench runtime|async|engine|postgres|claims|compose|ttft`: the library's benchmarks
//! (`skillhost_runtime::bench`, `skillhost_engine::bench`, which `cargo bench`
//! runs too, and `skillhost_mcp::bench`), printed as JSON with `--json` or as lines. This module parses
//! the flags, finds the `echo` component, opens the Postgres database, and
//! prints; what is measured, and how, is the library's. Every mode says
//! which cargo profile the binary was built with (`build_profile`): the
//! fast `release` and the thin-LTO `dist` measure differently, and the
//! figures worth comparing are `dist`'s.

use std::fmt::Display;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

mod ttft;

use super::common::{
    CliResult, DatabaseArgs, Durability, Failure, Globals, duration_arg, print_json, read_json_arg,
    tokio_runtime,
};
use skillhost_engine::bench::{
    self as engine_bench, BenchScenario, ClaimsSettings, EngineBenchSettings, PostgresBenchSettings,
};
use skillhost_runtime::bench::{
    AbiBenchSettings, BenchError, RuntimeBench, RuntimeBenchSettings, echo_input, measure_abis,
};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Fresh-instance call latency, compile time and cached load time.
    Runtime(RuntimeBenchArgs),
    /// A fresh call of an async (WASI 0.3) component against the same skill
    /// built for the synchronous ABI (WASI 0.2), in ABBA rounds.
    Async(AsyncBenchArgs),
    /// Per-node latency of a 10-node scenario, without a store and on SQLite.
    Engine(EngineBenchArgs),
    /// Durable runs on Postgres: one run's per-node latency, and node steps
    /// per second over concurrent runs.
    Postgres(PostgresBenchArgs),
    /// Many workers claiming a queue on Postgres (concurrency keys, a limit,
    /// priorities): claims per second and claim latency, checked for
    /// isolation (no run claimed twice, no key or limit exceeded).
    Claims(ClaimsBenchArgs),
    /// A scenario composed over MCP (`host mcp --compose-ceiling`): from its
    /// text to its first node (every check, keeping it, the run's start),
    /// against the same scenario offered as a tool.
    Compose(ComposeBenchArgs),
    /// Time to first token: from a streamed completion's delta leaving
    /// the provider to its showing on `host run`'s progress line (a
    /// terminal) and as an `--events` line, through the real binary.
    Ttft(ttft::TtftBenchArgs),
}

#[derive(Debug, Args)]
pub struct ClaimsBenchArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Queued runs to claim.
    #[arg(long, default_value_t = ClaimsSettings::default().runs)]
    pub runs: usize,
    /// Concurrent claiming workers.
    #[arg(long, default_value_t = ClaimsSettings::default().workers)]
    pub workers: usize,
    /// Store handles (connection pools, as separate processes have) the
    /// workers are spread over.
    #[arg(long, default_value_t = ClaimsSettings::default().handles)]
    pub handles: usize,
    /// Concurrency keys over the keyed half of the runs.
    #[arg(long, default_value_t = ClaimsSettings::default().keys)]
    pub keys: usize,
    /// How long a worker holds a run between its claim and its finish
    /// (e.g. 1ms, 0s).
    #[arg(long, value_name = "DURATION", default_value = "1ms", value_parser = duration_arg)]
    pub hold: std::time::Duration,
    /// Print JSON only.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ComposeBenchArgs {
    /// Composed runs to time (after a tenth as many, at least 3, untimed),
    /// and as many of the offered scenario, interleaved.
    #[arg(long, default_value_t = 200)]
    runs: usize,
    #[command(flatten)]
    echo: EchoArgs,
    /// Print JSON only.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct EngineBenchArgs {
    /// Runs without a store to time (after warm-up).
    #[arg(long, default_value_t = EngineBenchSettings::default().memory_runs)]
    memory_runs: usize,
    /// Durable runs on SQLite to time.
    #[arg(long, default_value_t = EngineBenchSettings::default().sqlite_runs)]
    sqlite_runs: usize,
    /// `full` also times runs with an fsync per checkpoint (the store's
    /// `--durability full`: an `fdatasync` of the WAL before each commit
    /// returns) against one `fdatasync` on the same disk, and 8 such runs in
    /// flight at once (their commits share syncs);
    /// `normal` (the default) times only what `host run` does by default.
    #[arg(long, value_enum, default_value_t = Durability::Normal)]
    durability: Durability,
    /// Runs to time with `--durability full`.
    #[arg(long, default_value_t = EngineBenchSettings::FULL_RUNS)]
    full_runs: usize,
    /// Also time runs with traces exported against runs without, in ABBA
    /// rounds (without a store and on SQLite): to the collector the
    /// OTEL_* variables name, else to a local receiver the benchmark
    /// starts. The value is the runs each way.
    #[arg(long, value_name = "RUNS")]
    traces: Option<usize>,
    #[command(flatten)]
    echo: EchoArgs,
    /// Print JSON only.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RuntimeBenchArgs {
    /// Calls to time (after 10% as many warm-up calls).
    #[arg(long, default_value_t = RuntimeBenchSettings::default().calls)]
    calls: usize,
    /// Compilations and cached loads to time.
    #[arg(long, default_value_t = RuntimeBenchSettings::default().loads)]
    loads: usize,
    /// Benchmark this component instead of the shipped `echo` skill (any
    /// skill, in any language: `skills/echo-py` builds one that takes echo's
    /// input).
    #[arg(long, value_name = "WASM", conflicts_with = "echo")]
    component: Option<PathBuf>,
    /// The input for `--component`: inline JSON or @FILE [default: the
    /// `echo` input, for the echo skills of every language].
    #[arg(long, value_name = "JSON|@FILE", requires = "component")]
    input: Option<String>,
    #[command(flatten)]
    echo: EchoArgs,
    /// Print JSON only.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct AsyncBenchArgs {
    /// The synchronous build [default: skills/dist/echo.wasm].
    #[arg(long = "sync", value_name = "WASM")]
    sync: Option<PathBuf>,
    /// The async build of the same skill [default:
    /// skills/dist/echo-async.wasm].
    #[arg(long = "async", value_name = "WASM")]
    r#async: Option<PathBuf>,
    /// The input both are called with: inline JSON or @FILE [default: the
    /// `echo` input].
    #[arg(long, value_name = "JSON|@FILE")]
    input: Option<String>,
    /// ABBA rounds.
    #[arg(long, default_value_t = AbiBenchSettings::default().rounds)]
    rounds: usize,
    /// Calls per batch (four batches a round).
    #[arg(long, default_value_t = AbiBenchSettings::default().calls)]
    calls: usize,
    /// Print JSON only.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct PostgresBenchArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Concurrent runs for the throughput figure.
    #[arg(long, default_value_t = PostgresBenchSettings::default().runs)]
    pub runs: usize,
    /// Runs to time for the throughput figure, in multiples of `--runs`
    /// (after one untimed warm-up round). `--runs` stay in flight
    /// throughout: when one ends, the next starts.
    #[arg(long, default_value_t = PostgresBenchSettings::default().rounds)]
    pub rounds: usize,
    /// Single runs to time for the per-node latency (after 5 warm-up runs).
    #[arg(long, default_value_t = PostgresBenchSettings::default().single_runs)]
    pub single_runs: usize,
    /// `full`: every checkpoint is on the server's disk before the next node
    /// (synchronous_commit = on); `normal`: the server has it
    /// (synchronous_commit = off: survives any crash of the host process).
    #[arg(long, value_enum, default_value_t = Durability::Full)]
    pub durability: Durability,
    #[command(flatten)]
    echo: EchoArgs,
    /// Print JSON only.
    #[arg(long)]
    pub json: bool,
}

/// Which `echo` component the benchmarks call.
#[derive(Debug, Args)]
pub struct EchoArgs {
    /// The `echo` skill's component [default: skills/dist/echo.wasm, here or
    /// in the repository the host was built from].
    #[arg(long, value_name = "WASM")]
    echo: Option<PathBuf>,
}

impl EchoArgs {
    /// The component's bytes. The figures in the docs were measured on the
    /// shipped build of `echo`, so the default is that file, found the way
    /// `host run NAME` finds `examples/NAME`.
    fn read(&self) -> Result<Vec<u8>, Failure> {
        match &self.echo {
            Some(path) => read_component(path),
            None => read_shipped("echo"),
        }
    }
}

/// The shipped build of the skill `name` (`skills/dist/NAME.wasm`), found
/// the way `host run NAME` finds `examples/NAME`: here, else in the
/// repository the host was built from. The figures in the docs were
/// measured on these builds.
fn read_shipped(name: &str) -> Result<Vec<u8>, Failure> {
    read_component(&shipped_path(name)?)
}

/// Where the shipped skill `name` is: `skills/dist/NAME.wasm` under the
/// working directory, else in the repository this binary was built from.
fn shipped_path(name: &str) -> Result<PathBuf, Failure> {
    let relative = PathBuf::from(format!("skills/dist/{name}.wasm"));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let repo = repo.canonicalize().unwrap_or(repo);
    let in_repo = repo.join(&relative);
    [relative.clone(), in_repo.clone()]
        .into_iter()
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            Failure::bad_input(format!(
                "the benchmarks call the shipped `{name}` skill, and there is no `{}` here or \
                 `{}`; run from the repository (scripts/build-skills.sh builds it), or give \
                 its component",
                relative.display(),
                in_repo.display()
            ))
        })
}

fn read_component(path: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path)
        .map_err(|e| Failure::bad_input(format!("cannot read component `{}`: {e}", path.display())))
}

/// The cargo profile this binary was built with (`host/build.rs`).
const BUILD_PROFILE: &str = env!("SKILLHOST_BUILD_PROFILE");

/// Prints a benchmark's figures, as lines or as JSON, with the build
/// profile first.
fn print_figures(figures: &impl Display, json: serde_json::Value, as_json: bool) -> CliResult {
    if as_json {
        let mut json = json;
        if let Some(object) = json.as_object_mut() {
            object.insert("build_profile".into(), BUILD_PROFILE.into());
        }
        return print_json(&json);
    }
    let note = match BUILD_PROFILE {
        "dist" => " (thin LTO: the profile of published binaries and of the figures to compare)",
        "release" => " (no LTO; `cargo build --profile dist` for the figures to compare)",
        _ => " (unoptimised host code; build with `--profile dist` for figures worth comparing)",
    };
    println!("build profile: {BUILD_PROFILE}{note}");
    println!("{figures}");
    Ok(())
}

/// A benchmark that could not measure, by the exit code of whose doing.
fn bench_failure(e: BenchError) -> Failure {
    match e {
        BenchError::Environment(message) => Failure::environment(message),
        BenchError::Input(message) => Failure::bad_input(message),
        BenchError::Failed(message) => Failure::failed(message),
    }
}

pub fn run(command: BenchCommand, _globals: &Globals) -> CliResult {
    match command {
        BenchCommand::Runtime(args) => runtime_bench(args),
        BenchCommand::Async(args) => async_bench(args),
        BenchCommand::Engine(args) => engine(args),
        BenchCommand::Postgres(args) => postgres(args),
        BenchCommand::Claims(args) => claims(args),
        BenchCommand::Compose(args) => compose(args),
        BenchCommand::Ttft(args) => ttft::bench(args),
    }
}

fn compose(args: ComposeBenchArgs) -> CliResult {
    if args.runs == 0 {
        return Err(Failure::bad_input("--runs must be at least 1"));
    }
    let echo = args.echo.read()?;
    let figures = tokio_runtime()?
        .block_on(skillhost_mcp::bench::compose(&echo, args.runs))
        .map_err(Failure::failed)?;
    print_figures(&figures, figures.to_json(), args.json)
}

fn runtime_bench(args: RuntimeBenchArgs) -> CliResult {
    if args.calls == 0 || args.loads == 0 {
        return Err(Failure::bad_input("--calls and --loads must be at least 1"));
    }
    let bench = match (&args.component, &args.input) {
        (Some(path), Some(input)) => {
            let component = read_component(path)?;
            RuntimeBench::new(component, read_json_arg(input)?)
        }
        (Some(path), None) => RuntimeBench::echo(read_component(path)?),
        (None, _) => RuntimeBench::echo(args.echo.read()?),
    }
    .map_err(bench_failure)?;
    let figures = bench
        .measure(RuntimeBenchSettings {
            calls: args.calls,
            loads: args.loads,
        })
        .map_err(bench_failure)?;
    print_figures(&figures, figures.to_json(), args.json)
}

fn async_bench(args: AsyncBenchArgs) -> CliResult {
    if args.rounds == 0 || args.calls == 0 {
        return Err(Failure::bad_input(
            "--rounds and --calls must be at least 1",
        ));
    }
    let sync = match &args.sync {
        Some(path) => read_component(path)?,
        None => read_shipped("echo")?,
    };
    let r#async = match &args.r#async {
        Some(path) => read_component(path)?,
        None => read_shipped("echo-async")?,
    };
    let input = match &args.input {
        Some(input) => read_json_arg(input)?,
        None => echo_input(),
    };
    let settings = AbiBenchSettings {
        rounds: args.rounds,
        calls: args.calls,
    };
    let figures = measure_abis(sync, r#async, input, settings).map_err(bench_failure)?;
    print_figures(&figures, figures.to_json(), args.json)
}

fn engine(args: EngineBenchArgs) -> CliResult {
    if args.memory_runs == 0 || args.sqlite_runs == 0 || args.full_runs == 0 {
        return Err(Failure::bad_input(
            "--memory-runs, --sqlite-runs and --full-runs must be at least 1",
        ));
    }
    if args.durability == Durability::None {
        return Err(Failure::bad_input(
            "--durability none keeps no database; use normal (the default) or full",
        ));
    }
    let scenario = BenchScenario::new(&args.echo.read()?).map_err(bench_failure)?;
    let settings = EngineBenchSettings {
        memory_runs: args.memory_runs,
        sqlite_runs: args.sqlite_runs,
        full_runs: (args.durability == Durability::Full).then_some(args.full_runs),
        traced_runs: args.traces,
    };
    let figures = tokio_runtime()?
        .block_on(engine_bench::engine(&scenario, settings))
        .map_err(bench_failure)?;
    print_figures(&figures, figures.to_json(), args.json)
}

/// `host bench postgres`: the engine benchmark's scenario, durable on
/// Postgres (with `--durability full`, `synchronous_commit = on`: each
/// node's checkpoint is on the server's disk before the next node starts).
/// Runs are left in the database (scenario `bench`).
fn postgres(args: PostgresBenchArgs) -> CliResult {
    let url = args.db.url();
    if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
        return Err(Failure::bad_input(
            "give a Postgres database with --database postgres://USER:PASSWORD@HOST:PORT/DATABASE",
        ));
    }
    if args.durability == Durability::None {
        return Err(Failure::bad_input(
            "--durability none keeps no database; use full or normal",
        ));
    }
    if args.runs == 0 || args.rounds == 0 || args.single_runs == 0 {
        return Err(Failure::bad_input(
            "--runs, --rounds and --single-runs must be at least 1",
        ));
    }
    let scenario = BenchScenario::new(&args.echo.read()?).map_err(bench_failure)?;
    let settings = PostgresBenchSettings {
        runs: args.runs,
        rounds: args.rounds,
        single_runs: args.single_runs,
    };
    let figures = tokio_runtime()?.block_on(async {
        let store = args.db.open_with(args.durability).await?;
        engine_bench::postgres(&scenario, store, args.durability.sync_mode(), settings)
            .await
            .map_err(bench_failure)
    })?;
    print_figures(&figures, figures.to_json(), args.json)
}

/// `host bench claims`: the claims benchmark (`skillhost_engine::bench::claims`)
/// on a Postgres database. Its runs are left there (finished; scenarios
/// `claims-keyed`, `claims-limited`, `claims-plain`).
fn claims(args: ClaimsBenchArgs) -> CliResult {
    let url = args.db.url();
    if !url.starts_with("postgres://") && !url.starts_with("postgresql://") {
        return Err(Failure::bad_input(
            "give a Postgres database with --database postgres://USER:PASSWORD@HOST:PORT/DATABASE",
        ));
    }
    if args.runs == 0 || args.workers == 0 || args.handles == 0 || args.keys == 0 {
        return Err(Failure::bad_input(
            "--runs, --workers, --handles and --keys must be at least 1",
        ));
    }
    let settings = ClaimsSettings {
        runs: args.runs,
        workers: args.workers,
        handles: args.handles,
        keys: args.keys,
        hold: args.hold,
    };
    let figures = tokio_runtime()?
        .block_on(engine_bench::claims(&url, settings))
        .map_err(bench_failure)?;
    print_figures(&figures, figures.to_json(), args.json)
}
