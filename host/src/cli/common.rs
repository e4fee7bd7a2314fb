//! What every subcommand shares, and the only module a subcommand may import
//! from the command line besides the library crates: failures and their exit
//! codes, the global options, reading `--input` and printing JSON, the
//! `--database` and `--durability` arguments and opening a store with the
//! right exit code, the async runtime, the runtime with the host's
//! configuration (`skillhost.toml` and its precedence, see
//! `skillhost_runtime::config`), loading a scenario with the checker's
//! report, and writing a file the user named (`--out`) safely.
//!
//! Owns: how shared arguments become library values and library errors
//! become [`Failure`]s. Must not: know about any one subcommand (a helper
//! only one command uses stays in that command's module, so this module
//! imports none of them), or print beyond JSON it is handed and the checker's
//! report and warnings of a scenario it loads.

use std::fmt::Display;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::Value;

use skillhost_runtime::{HostConfig, Runtime, RuntimeConfig};
use skillhost_scenario::{self as scenario, LoadedScenario};
use skillhost_store::{RunRow, Store, StoreError, StoreOptions, SyncMode, parse_duration};

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
    pub cache_dir: Option<PathBuf>,
    pub no_cache: bool,
}

impl Globals {
    /// The runtime, its capabilities configured by the host's configuration
    /// for a scenario in `dir` (for a command without a scenario, the
    /// current directory), or by none (`None`: commands that call no
    /// skill's `llm`, such as `skill inspect`). A configuration file that
    /// cannot be used is bad input (exit 2).
    pub fn runtime(&self, dir: Option<&Path>) -> Result<Runtime, Failure> {
        let mut config = RuntimeConfig::default();
        if self.no_cache {
            config.cache_dir = None;
        } else if let Some(dir) = &self.cache_dir {
            config.cache_dir = Some(dir.clone());
        }
        if let Some(dir) = dir {
            let host = HostConfig::load(dir).map_err(Failure::bad_input)?;
            config.backends.llm = host.llm;
        }
        Runtime::new(config).map_err(|e| Failure::environment(format!("{e:#}")))
    }

    /// [`Globals::runtime`] configured for the current directory: commands
    /// that run skills without one scenario (`skill call`, `worker`).
    pub fn runtime_here(&self) -> Result<Runtime, Failure> {
        let here = std::env::current_dir()
            .map_err(|e| Failure::environment(format!("cannot read the current directory: {e}")))?;
        self.runtime(Some(&here))
    }
}

/// The directory a scenario file is in: where its `skillhost.toml` is
/// looked for.
pub fn scenario_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

/// Reads `--input`: inline JSON, or `@path` for a file.
pub fn read_json_arg(arg: &str) -> Result<Value, Failure> {
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

/// How large a run's input may be by default (1 MiB): far above what any
/// scenario's `[input]` holds (a query, options, a few ids), and small
/// enough that a mistaken input (a whole dataset) is refused before it is
/// written into every copy of the run's history. Raise it with
/// `--max-input-bytes` or `SKILLHOST_MAX_INPUT_BYTES`.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 1024 * 1024;

/// The `--max-input-bytes` flag of the commands that create runs.
#[derive(Debug, Clone, Copy, Args)]
pub struct InputLimitArgs {
    /// The largest run input accepted, in bytes (default 1 MiB).
    #[arg(
        long,
        value_name = "BYTES",
        env = "SKILLHOST_MAX_INPUT_BYTES",
        default_value_t = DEFAULT_MAX_INPUT_BYTES
    )]
    pub max_input_bytes: u64,
}

/// Reads a run's `--input` like [`read_json_arg`], refusing one larger
/// than `limit.max_input_bytes` before it is read whole or parsed (and so
/// before any database is opened).
pub fn read_run_input(arg: &str, limit: InputLimitArgs) -> Result<Value, Failure> {
    let max = limit.max_input_bytes;
    let (size, origin) = match arg.strip_prefix('@') {
        Some(path) => (
            std::fs::metadata(path)
                .map_err(|e| Failure::bad_input(format!("cannot read input file `{path}`: {e}")))?
                .len(),
            format!("input file `{path}`"),
        ),
        None => (arg.len() as u64, "--input".to_string()),
    };
    if size > max {
        return Err(Failure::bad_input(format!(
            "{origin} is {size} bytes, more than the {max} bytes a run's input may have \
             (it is stored with the run); pass --max-input-bytes {size} (or set \
             SKILLHOST_MAX_INPUT_BYTES) to raise the limit, or pass large data by reference \
             (a path or URL the skill reads)"
        )));
    }
    read_json_arg(arg)
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> CliResult {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::environment(format!("cannot encode JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// The value parser of duration flags (`--lease-ttl 30s`, `--older-than 7d`).
pub fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text)
}

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

/// Where runs are stored when `--database` is not given.
pub const DEFAULT_DATABASE: &str = "sqlite://.skillhost/skillhost.db";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// A checkpoint after every node that survives any crash or kill of the
    /// host process (SQLite WAL, `synchronous = NORMAL`); a power loss may lose
    /// the last few checkpoints but never corrupts the database.
    Normal,
    /// Like `normal`, and every checkpoint is fsynced before the run goes on,
    /// so it also survives power loss (milliseconds per node on most disks).
    Full,
    /// No database at all: nothing is stored, nothing can be resumed.
    None,
}

impl Durability {
    pub fn sync_mode(self) -> SyncMode {
        match self {
            Durability::Full => SyncMode::Full,
            Durability::Normal | Durability::None => SyncMode::Normal,
        }
    }
}

#[derive(Debug, Args)]
pub struct DatabaseArgs {
    /// Database URL: sqlite://PATH (default sqlite://.skillhost/skillhost.db) or postgres://USER:PASSWORD@HOST/DB, or $SKILLHOST_DATABASE_URL.
    #[arg(long, value_name = "URL", env = "SKILLHOST_DATABASE_URL")]
    pub database: Option<String>,
}

impl DatabaseArgs {
    pub fn url(&self) -> String {
        self.database
            .clone()
            .unwrap_or_else(|| DEFAULT_DATABASE.to_string())
    }

    /// True when neither `--database` nor `$SKILLHOST_DATABASE_URL` chose
    /// the database.
    pub fn is_default(&self) -> bool {
        self.database.is_none()
    }

    /// Opens the database, creating it if missing (commands that write runs).
    pub async fn open(&self) -> Result<Store, Failure> {
        self.open_with(Durability::Normal).await
    }

    pub async fn open_with(&self, durability: Durability) -> Result<Store, Failure> {
        Store::open_with(&self.url(), store_options(durability))
            .await
            .map_err(open_failure)
    }

    /// Opens a database that must exist already (reading history, resuming):
    /// a SQLite file that does not exist is an error, and nothing is created.
    pub async fn open_existing(&self) -> Result<Store, Failure> {
        self.try_open_existing().await.map_err(open_failure)
    }

    /// [`open_existing`](Self::open_existing) with the store's own error, for
    /// callers that treat a missing database as empty.
    pub async fn try_open_existing(&self) -> Result<Store, StoreError> {
        Store::open_existing(&self.url(), store_options(Durability::Normal)).await
    }

    /// Opens the database a command about one run reads: it must exist.
    pub async fn open_for_run(&self, id: &str) -> Result<Store, Failure> {
        self.open_existing().await.map_err(|mut f| {
            f.message = format!("cannot look up run `{id}`: {}", f.message);
            f
        })
    }
}

fn store_options(durability: Durability) -> StoreOptions {
    StoreOptions {
        sync: durability.sync_mode(),
    }
}

/// A database that cannot be opened is the environment (exit 3), except a URL
/// this build cannot use, which is a bad invocation (exit 2).
pub fn open_failure(e: StoreError) -> Failure {
    match e {
        StoreError::UnsupportedUrl { .. } => Failure::bad_input(e),
        StoreError::Missing { .. } => Failure::environment(format!(
            "{e}. Runs are stored in {DEFAULT_DATABASE} under the current directory unless \
             --database or SKILLHOST_DATABASE_URL names another; run from the directory the \
             runs were made in, or give their database with --database"
        )),
        _ => Failure::environment(e),
    }
}

/// A store that fails once open is the environment (exit 3).
pub fn store_error(e: StoreError) -> Failure {
    Failure::environment(e.to_string())
}

/// The run `id`; one that does not exist is a bad input (exit 2).
pub async fn fetch_run(store: &Store, id: &str) -> Result<RunRow, Failure> {
    store.run(id).await.map_err(store_error)?.ok_or_else(|| {
        Failure::bad_input(format!(
            "run `{id}` does not exist in {}; list runs with `host runs list`",
            store.url_for_display()
        ))
    })
}

/// Finds, parses, checks and loads a scenario; a check failure is exit 2.
/// With `json`, a check failure also prints the diagnostics on stdout as
/// `host check --json` does.
pub fn load_scenario(name: &str, globals: &Globals, json: bool) -> Result<LoadedScenario, Failure> {
    let path = scenario::resolve(name).map_err(Failure::bad_input)?;
    let runtime = globals.runtime(Some(scenario_dir(&path)))?;
    let loaded = match scenario::load(&path, &runtime) {
        Ok(loaded) => loaded,
        Err(report) if json => {
            print_json(&report.to_json())?;
            return Err(Failure::bad_input(format!(
                "scenario `{}` does not pass the checker ({} error(s), on stdout)",
                path.display(),
                report.errors.len()
            )));
        }
        Err(report) => {
            return Err(Failure::bad_input(format!(
                "scenario `{}` does not pass the checker:\n{report}",
                path.display()
            )));
        }
    };
    for warning in &loaded.warnings {
        eprintln!("warning: {warning}");
    }
    Ok(loaded)
}

/// Fills in `[input]`'s defaults and checks the run input against it, as
/// the engine will, so that input which does not fit is refused (exit 2)
/// before a database is opened or created.
pub fn checked_input(loaded: &LoadedScenario, mut input: Value) -> Result<Value, Failure> {
    let scenario = &*loaded.scenario;
    scenario.apply_input_defaults(&mut input);
    scenario.validate_input(&input).map_err(|message| {
        Failure::bad_input(format!(
            "scenario `{}`: the run input does not fit [input]: {message}; see the [input] \
             section of {} for the fields, their types and which are required",
            scenario.name,
            scenario.path.display()
        ))
    })?;
    Ok(input)
}

/// Checks, before any work, that `path` can take a new file: its directory
/// exists, and nothing is there yet unless `force` (a directory never).
pub fn check_output_path(path: &Path, force: bool) -> Result<(), Failure> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Failure::bad_input(format!(
            "cannot write `{}`: its directory `{}` does not exist; create it first",
            path.display(),
            parent.display()
        )));
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Err(Failure::bad_input(format!(
            "`{}` is a directory; give the path of a file",
            path.display()
        ))),
        Ok(meta) if !force => Err(Failure::bad_input(format!(
            "`{}` already exists{}; pass --force to replace it{}",
            path.display(),
            if meta.is_symlink() {
                " (a symlink)"
            } else {
                ""
            },
            if meta.is_symlink() {
                " (the link is replaced, what it points to is left alone)"
            } else {
                ""
            }
        ))),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Failure::environment(format!(
            "cannot look at `{}`: {e}",
            path.display()
        ))),
    }
}

/// Writes `bytes` to `path` as a new file: checked as
/// [`check_output_path`] does, written to a temporary file in the same
/// directory, then renamed into place. A reader never sees half a file, and
/// a symlink at `path` is replaced (with `force`), never written through.
/// Without `force`, a file that appeared meanwhile is still not replaced.
pub fn write_output_file(path: &Path, bytes: &[u8], force: bool) -> Result<(), Failure> {
    check_output_path(path, force)?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let cannot =
        |e: &dyn Display| Failure::environment(format!("cannot write `{}`: {e}", path.display()));
    let mut file = tempfile::Builder::new()
        .prefix(".skillhost-out-")
        .tempfile_in(parent)
        .map_err(|e| cannot(&e))?;
    file.write_all(bytes).map_err(|e| cannot(&e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        // A temporary file is private; the artifact is an ordinary file.
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| cannot(&e))?;
    }
    let persisted = if force {
        file.persist(path)
    } else {
        file.persist_noclobber(path)
    };
    persisted.map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            Failure::bad_input(format!(
                "`{}` already exists; pass --force to replace it",
                path.display()
            ))
        } else {
            cannot(&e.error)
        }
    })?;
    Ok(())
}
