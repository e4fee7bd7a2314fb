//! What every subcommand shares, and the only module a subcommand may import
//! from the command line besides the library crates: failures and their exit
//! codes, the global options, reading `--input` and printing JSON, the
//! `--database` and `--durability` arguments and opening a store with the
//! right exit code, the async runtime, the runtime with the host's
//! configuration (`skillhost.toml` and its precedence, see
//! `skillhost_runtime::config`), loading a scenario with the checker's
//! report (its registry components resolved through `skillhost-oci`:
//! `--locked`, `--offline`, the lock, the trust policy), the registry
//! options (`--username`/`--password-stdin`, the registry cache, progress
//! bars), and writing a file the user named (`--out`) safely.
//!
//! Owns: how shared arguments become library values and library errors
//! become [`Failure`]s. Must not: know about any one subcommand (a helper
//! only one command uses stays in that command's module, so this module
//! imports none of them), or print beyond JSON it is handed and the checker's
//! report and warnings of a scenario it loads.

use std::fmt::Display;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::Value;

use skillhost_oci::{
    Cache, Connection, Credentials, HostConfig as RegistryConfig, Lock, OciError, ResolveOptions,
    Resolver, TrustPolicy,
};
use skillhost_runtime::{HostConfig, Runtime, RuntimeConfig};
use skillhost_scenario::{self as scenario, CheckReport, LoadedScenario, Scenario};
use skillhost_store::{
    IdempotencyKey, RunRow, Store, StoreError, StoreOptions, SyncMode, parse_duration,
};

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
#[derive(Debug, Clone)]
pub struct Globals {
    pub cache_dir: Option<PathBuf>,
    pub no_cache: bool,
    /// `--registry-cache`: where pulled components are kept.
    pub registry_cache: Option<PathBuf>,
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
        self.runtime(Some(&current_dir()?))
    }

    /// The registry cache (`--registry-cache`, else
    /// `$SKILLHOST_REGISTRY_CACHE`, else `~/.cache/skillhost/registry`).
    pub fn registry_cache(&self) -> Result<Cache, Failure> {
        match &self.registry_cache {
            Some(dir) => Cache::open(dir),
            None => Cache::open_default(),
        }
        .map_err(oci_failure)
    }

    /// A resolver of registry references with the host config's policy on
    /// how registries are reached.
    /// `dir` is where the host configuration is looked for: the
    /// scenario's directory, or for a command without one the current
    /// directory ([`current_dir`]).
    pub fn resolver(
        &self,
        options: ResolveOptions,
        credentials: Option<Credentials>,
        dir: &Path,
    ) -> Result<Resolver, Failure> {
        let connection = connection(credentials, dir)?;
        Ok(Resolver::new(self.registry_cache()?, connection, options))
    }
}

/// A registry failure: the environment's (exit 3: unreachable, a damaged
/// download, the cache) or the input's (exit 2).
pub fn oci_failure(e: OciError) -> Failure {
    if e.is_environment() {
        Failure::environment(e)
    } else {
        Failure::bad_input(e)
    }
}

/// How registries are reached: the host configuration for `dir` (the same
/// file whose `[llm]` the runtime reads: `skillhost.toml` in `dir`, else
/// `$SKILLHOST_CONFIG`, else the user's; its `[registries]` and `[trust]`
/// are `skillhost-oci`'s), and credentials given on the command line (else
/// the environment's or Docker's, per registry).
pub fn connection(credentials: Option<Credentials>, dir: &Path) -> Result<Connection, Failure> {
    let host = HostConfig::load(dir).map_err(Failure::bad_input)?;
    let config = match host.source.used() {
        Some(path) => RegistryConfig::load(path).map_err(oci_failure)?,
        None => RegistryConfig::default(),
    };
    Ok(Connection {
        config,
        credentials,
    })
}

/// The current directory: where a command without a scenario looks for the
/// host configuration.
pub fn current_dir() -> Result<PathBuf, Failure> {
    std::env::current_dir()
        .map_err(|e| Failure::environment(format!("cannot read the current directory: {e}")))
}

/// The trust policy: the host config's keys and `extra` (a scenario's).
pub fn trust_policy(config: &RegistryConfig, extra: &[PathBuf]) -> Result<TrustPolicy, Failure> {
    let mut keys = config.trust_keys.clone();
    keys.extend(extra.iter().cloned());
    TrustPolicy::load(&keys).map_err(oci_failure)
}

/// `--locked` and `--offline`, for the commands that load a scenario.
#[derive(Debug, Clone, Copy, Default, Args)]
pub struct RegistryArgs {
    /// Refuse to run unless the scenario's lock pins every registry component and each tag still resolves to its pinned digest.
    #[arg(long)]
    pub locked: bool,
    /// Reach no registry: registry components come from the lock and the registry cache only.
    #[arg(long)]
    pub offline: bool,
}

impl RegistryArgs {
    pub fn options(self) -> ResolveOptions {
        ResolveOptions {
            locked: self.locked,
            offline: self.offline,
        }
    }
}

/// `--username` and `--password-stdin`: registry credentials for this command.
#[derive(Debug, Args)]
pub struct CredentialArgs {
    /// Registry user name (with --password-stdin); else SKILLHOST_REGISTRY_USERNAME, else ~/.docker/config.json.
    #[arg(long, value_name = "USER", requires = "password_stdin")]
    pub username: Option<String>,
    /// Read the registry password from stdin (one line).
    #[arg(long, requires = "username")]
    pub password_stdin: bool,
}

impl CredentialArgs {
    /// The credentials given, reading the password from stdin.
    pub fn credentials(&self) -> Result<Option<Credentials>, Failure> {
        let Some(user) = &self.username else {
            return Ok(None);
        };
        let mut password = String::new();
        std::io::stdin()
            .read_line(&mut password)
            .map_err(|e| Failure::bad_input(format!("cannot read the password from stdin: {e}")))?;
        let password = password.trim_end_matches(['\n', '\r']);
        if password.is_empty() {
            return Err(Failure::bad_input(
                "--password-stdin read an empty password; pipe it in, e.g.                  `printf %s \"$PASSWORD\" | host skill push … --username USER --password-stdin`",
            ));
        }
        Ok(Some(Credentials::basic(
            user,
            password,
            format!("user `{user}` from --username and --password-stdin"),
        )))
    }
}

/// A progress bar on stderr for registry transfers, when it is a terminal.
pub fn progress() -> std::sync::Arc<dyn skillhost_oci::Progress> {
    use std::io::IsTerminal as _;
    if std::io::stderr().is_terminal() {
        std::sync::Arc::new(TerminalProgress(std::sync::Mutex::new(None)))
    } else {
        std::sync::Arc::new(skillhost_oci::Quiet)
    }
}

struct TerminalProgress(std::sync::Mutex<Option<indicatif::ProgressBar>>);

impl skillhost_oci::Progress for TerminalProgress {
    fn start(&self, what: &str, total: Option<u64>) {
        let bar = match total {
            Some(total) => indicatif::ProgressBar::new(total),
            None => indicatif::ProgressBar::new_spinner(),
        };
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg:>10} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(what.to_string());
        *self.0.lock().expect("progress bar") = Some(bar);
    }

    fn advance(&self, bytes: u64) {
        if let Some(bar) = &*self.0.lock().expect("progress bar") {
            bar.inc(bytes);
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.0.lock().expect("progress bar").take() {
            bar.finish_and_clear();
        }
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

/// `--idempotency-key` and `--idempotency-ttl`, on every command that
/// starts a run.
#[derive(Debug, Clone, Args)]
pub struct IdempotencyArgs {
    /// Start the run only if no run started with this key within its TTL;
    /// otherwise print that run (its id on stdout) and start nothing. Two
    /// starts racing with one key, on any number of hosts, start one run.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<String>,
    /// How long a key holds the run it started.
    #[arg(long, value_name = "DURATION", default_value = "24h", value_parser = duration_arg,
          requires = "idempotency_key")]
    pub idempotency_ttl: Duration,
}

impl IdempotencyArgs {
    /// The key, refusing an empty one.
    pub fn key(&self) -> Result<Option<IdempotencyKey>, Failure> {
        match &self.idempotency_key {
            Some(key) if key.trim().is_empty() => Err(Failure::bad_input(
                "--idempotency-key is empty; give the key that names this request (an order \
                 id, a message id), or leave the flag out",
            )),
            Some(key) => Ok(Some(IdempotencyKey {
                key: key.clone(),
                ttl: self.idempotency_ttl,
            })),
            None => Ok(None),
        }
    }
}

/// Reports that `run_id` already holds `key`, so nothing was started: its
/// id on stdout (as a new run's would be), or `{"run_id", "status",
/// "existing": true}` with `--json`, and a line on stderr saying so.
pub async fn report_existing_run(store: &Store, run_id: &str, key: &str, json: bool) -> CliResult {
    let run = fetch_run(store, run_id).await?;
    if json {
        return print_json(&serde_json::json!({
            "run_id": run.id,
            "status": run.status.as_str(),
            "existing": true,
            "idempotency_key": key,
        }));
    }
    eprintln!(
        "run `{}` ({}) already holds idempotency key `{}`: nothing was started; see it with \
         `host runs show {}`",
        run.id,
        run.status,
        shown(key),
        run.id
    );
    println!("{}", run.id);
    Ok(())
}

/// An engine error as the CLI reports it: the store's and the engine's own
/// failures are the environment's (exit 3), the rest the input's (exit 2).
pub fn engine_failure(e: skillhost_engine::EngineError) -> Failure {
    use skillhost_engine::EngineError::*;
    match e {
        Store(_) | Internal { .. } => Failure::environment(e.render(&HostCommands)),
        _ => Failure::bad_input(e.render(&HostCommands)),
    }
}

/// The library's remedies as `host` commands: what the command line says
/// to do about a refusal.
pub struct HostCommands;

impl skillhost_engine::Remedies for HostCommands {
    fn way(&self, remedy: &skillhost_engine::Remedy) -> Option<String> {
        use skillhost_engine::Remedy::*;
        Some(match remedy {
            ShowRun { run } => format!("`host runs show {run}`"),
            ResumeRun { run } => format!("`host resume {run}`"),
            ResumeChanged { run } => format!("`host resume {run} --allow-changed`"),
            AnswerRun { run } => format!(
                "`host runs answer {run} --data JSON` (or `host runs approve|reject {run}` for a \
                 yes/no answer)"
            ),
            CancelRun { run } => format!("`host runs cancel {run}`"),
            ListRuns { waiting: false } => "`host runs list`".into(),
            ListRuns { waiting: true } => "`host runs list --status waiting`".into(),
            StartRun => "`host run <scenario>`".into(),
            ListCheckpoints { run } => format!("`host checkpoints {run}`"),
            ExportRun { run, components } => format!(
                "`host runs export{}{}`",
                match (run, components) {
                    (Some(run), _) => format!(" {run}"),
                    (None, true) => " RUN".into(),
                    (None, false) => String::new(),
                },
                if *components { " --components DIR" } else { "" }
            ),
            ReplayExport => "`host replay --file`".into(),
        })
    }
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

/// `text` (a skill's output or error, a model's answer, anything a run or
/// a scenario wrote) as one line for a terminal or a log: every character
/// that could move the cursor, start an escape sequence, end the line or
/// reorder what follows is written as a visible `\u{..}` escape (`\u{1b}`
/// for ESC, `\u{d}` for a carriage return, `\u{a}` for a new line), so
/// nothing a run produced can clear the screen, hide text, plant a link or
/// forge a line of the host's own (`error: …`). Tabs stay. `--json` output
/// is never passed through here: it stays exact JSON.
pub fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    escape_for_terminal(text, false)
}

/// [`shown`] for text of several lines (a summary value, a state printed
/// as JSON, a failure with the checker's report): its new lines stay, and
/// every other such character is escaped.
pub fn shown_lines(text: &str) -> std::borrow::Cow<'_, str> {
    escape_for_terminal(text, true)
}

fn escape_for_terminal(text: &str, keep_newlines: bool) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\t' && !(keep_newlines && c == '\n'))
            || matches!(
                c,
                '\u{061c}'
                    | '\u{200e}'
                    | '\u{200f}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{202a}'..='\u{202e}'
                    | '\u{2066}'..='\u{2069}'
            )
    };
    if !text.contains(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut clean = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            clean.extend(c.escape_unicode());
        } else {
            clean.push(c);
        }
    }
    std::borrow::Cow::Owned(clean)
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

/// `--token` / `--token-file`: the bearer token an HTTP server (`host
/// serve`, `host mcp --http`) requires of its clients.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// Clients must send `Authorization: Bearer TOKEN` with every request (host serve's pages sign in with it once and keep an HttpOnly cookie instead). Needed off loopback.
    #[arg(long, value_name = "TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,
    /// --token, read from a file (its first line).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

impl TokenArgs {
    /// The token given, if any; refuses a server on `addr` (named by
    /// `flag`) that is not loopback without one, and an empty one.
    pub fn checked(&self, flag: &'static str, addr: SocketAddr) -> Result<Option<String>, Failure> {
        let token = match (&self.token, &self.token_file) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(file)) => {
                Some(skillhost_auth::read_token_file(file).map_err(Failure::bad_input)?)
            }
            (None, None) => None,
        };
        skillhost_auth::check_bind(flag, addr, token.as_deref()).map_err(Failure::bad_input)?;
        Ok(token)
    }
}

#[derive(Debug, Args)]
pub struct AllowedHostArgs {
    /// A name clients reach the server by besides localhost, 127.0.0.1 and [::1] with the bound port: NAME (any port) or NAME:PORT, e.g. a proxy's or a LAN name. Every request's Host, and Origin if it has one, must be one of them (against DNS rebinding and other sites' pages). Repeatable.
    #[arg(long = "allowed-host", value_name = "NAME[:PORT]")]
    pub names: Vec<String>,
}

impl AllowedHostArgs {
    /// The names given, each checked to be a host name or `HOST:PORT`.
    pub fn checked(&self, addr: SocketAddr) -> Result<Vec<String>, Failure> {
        skillhost_auth::AllowedHosts::new(addr, &self.names).map_err(Failure::bad_input)?;
        Ok(self.names.clone())
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

/// Parses, checks and loads the scenario at `path`, its registry
/// components resolved as `registry` says: the checker's report on failure,
/// and whether that failure is the environment's (an unreachable registry,
/// a component missing from the cache offline).
pub fn load_checked(
    path: &Path,
    globals: &Globals,
    registry: RegistryArgs,
) -> Result<Result<LoadedScenario, (CheckReport, bool)>, Failure> {
    let runtime = globals.runtime(Some(scenario_dir(path)))?;
    Ok(load_with_registry(path, &runtime, globals, registry))
}

/// [`load_checked`] on a runtime the caller made (a worker's, shared by
/// every run it claims).
pub fn load_with_registry(
    path: &Path,
    runtime: &Runtime,
    globals: &Globals,
    registry: RegistryArgs,
) -> Result<LoadedScenario, (CheckReport, bool)> {
    let components = ScenarioComponents {
        globals,
        options: registry.options(),
        state: std::cell::RefCell::new(None),
        environment: std::cell::Cell::new(false),
    };
    scenario::load_with(path, runtime, &components)
        .map_err(|report| (report, components.environment.get()))
}

/// The scenario loader's view of the registry: each `oci://` component
/// through [`Resolver::resolve`], with the scenario's lock and the trust
/// policy of the host config and the scenario. Made on the first registry
/// component, so a scenario of local files opens no cache.
struct ScenarioComponents<'a> {
    globals: &'a Globals,
    options: ResolveOptions,
    /// Made on the first registry component; a failure to make it is
    /// reported once, in full, and named by the later components.
    state: std::cell::RefCell<Option<Result<Resolving, ()>>>,
    /// Whether a failure so far was the environment's.
    environment: std::cell::Cell<bool>,
}

struct Resolving {
    resolver: Resolver,
    lock: Option<Lock>,
    policy: TrustPolicy,
}

impl ScenarioComponents<'_> {
    fn start(&self, scenario: &Scenario) -> Result<Resolving, Failure> {
        let resolver = self
            .globals
            .resolver(self.options, None, scenario_dir(&scenario.path))?;
        let lock_path = skillhost_oci::lock_path(&scenario.path);
        let lock = Lock::read(&lock_path).map_err(oci_failure)?;
        if self.options.locked && lock.is_none() {
            return Err(Failure::bad_input(format!(
                "--locked, and the scenario has no lock `{}`; write it with `host lock {}`",
                lock_path.display(),
                scenario.path.display()
            )));
        }
        let policy = trust_policy(&resolver.connection().config, &scenario.trust_keys)?;
        Ok(Resolving {
            resolver,
            lock,
            policy,
        })
    }
}

impl scenario::ComponentResolver for ScenarioComponents<'_> {
    fn resolve(
        &self,
        scenario: &Scenario,
        alias: &str,
        reference: &str,
    ) -> Result<PathBuf, String> {
        let mut state = self.state.borrow_mut();
        if state.is_none() {
            match self.start(scenario) {
                Ok(started) => *state = Some(Ok(started)),
                Err(failure) => {
                    *state = Some(Err(()));
                    self.environment.set(failure.code == 3);
                    return Err(failure.message);
                }
            }
        }
        let Some(Ok(resolving)) = state.as_ref() else {
            return Err(format!(
                "skill `{alias}` (`{reference}`) is not resolved: see the first registry error"
            ));
        };
        match resolving.resolver.resolve(
            alias,
            reference,
            resolving.lock.as_ref(),
            &resolving.policy,
        ) {
            Ok(resolved) => {
                if resolved.downloaded > 0 {
                    eprintln!(
                        "pulled {} ({} bytes)",
                        shown(&resolved.reference.to_string()),
                        resolved.downloaded
                    );
                }
                Ok(resolved.path)
            }
            Err(e) => {
                if e.is_environment() {
                    self.environment.set(true);
                }
                Err(format!("skill `{alias}`: {e}"))
            }
        }
    }
}

/// Finds, parses, checks and loads a scenario; a check failure is exit 2,
/// a registry that cannot be reached (or, offline, a component that is not
/// in the cache) exit 3. With `json`, a check failure also prints the
/// diagnostics on stdout as `host check --json` does.
pub fn load_scenario(
    name: &str,
    globals: &Globals,
    registry: RegistryArgs,
    json: bool,
) -> Result<LoadedScenario, Failure> {
    let path = scenario::resolve(name).map_err(Failure::bad_input)?;
    let loaded = match load_checked(&path, globals, registry)? {
        Ok(loaded) => loaded,
        Err((report, true)) => {
            if json {
                print_json(&report.to_json())?;
            }
            return Err(Failure::environment(format!(
                "scenario `{}`: a registry component cannot be had:\n{report}",
                path.display()
            )));
        }
        Err((report, false)) => return Err(check_failure(&path, report, json)?),
    };
    for warning in &loaded.warnings {
        eprintln!("warning: {}", shown(&warning.to_string()));
    }
    Ok(loaded)
}

/// The failure of a scenario that does not pass the checker (exit 2); with
/// `json`, the diagnostics go to stdout.
fn check_failure(path: &Path, report: CheckReport, json: bool) -> Result<Failure, Failure> {
    if json {
        print_json(&report.to_json())?;
        return Ok(Failure::bad_input(format!(
            "scenario `{}` does not pass the checker ({} error(s), on stdout)",
            path.display(),
            report.errors.len()
        )));
    }
    Ok(Failure::bad_input(format!(
        "scenario `{}` does not pass the checker:\n{report}",
        path.display()
    )))
}

/// A scenario a server was given that cannot run on this host, and why.
pub struct NotLoaded {
    /// Its `[scenario] name` when the file parses, else its directory's
    /// name (for a `scenario.toml`) or its file's stem.
    pub name: String,
    pub path: PathBuf,
    /// What `host run` would have said: the loader's or checker's report.
    pub reason: String,
}

/// Loads and checks each of `files` as `host run` does, for a server that
/// offers several: one that does not load or does not pass the checker (a
/// TOML error, a cycle, a grant outside its directory, an `llm` provider
/// the host is not configured for, a registry component not to be had) is
/// set aside with why, and said on stderr, instead of refusing them all.
/// Two scenarios of the same name, loaded or not, are refused: which one
/// a name starts would be a guess.
pub fn load_each(
    files: &[PathBuf],
    globals: &Globals,
    registry: RegistryArgs,
) -> Result<(Vec<std::sync::Arc<LoadedScenario>>, Vec<NotLoaded>), Failure> {
    let mut loaded: Vec<std::sync::Arc<LoadedScenario>> = Vec::new();
    let mut unavailable: Vec<NotLoaded> = Vec::new();
    let mut names: Vec<(String, PathBuf)> = Vec::new();
    for path in files {
        let name = match load_scenario(&path.display().to_string(), globals, registry, false) {
            Ok(scenario) => {
                let name = scenario.scenario.name.clone();
                loaded.push(std::sync::Arc::new(scenario));
                name
            }
            Err(failure) => {
                let name = name_of(path);
                eprintln!(
                    "warning: scenario `{}` ({}) is unavailable: {}",
                    shown(&name),
                    path.display(),
                    shown_lines(&failure.message)
                );
                unavailable.push(NotLoaded {
                    name: name.clone(),
                    path: path.clone(),
                    reason: failure.message,
                });
                name
            }
        };
        if let Some((_, other)) = names.iter().find(|(n, _)| *n == name) {
            return Err(Failure::bad_input(format!(
                "two scenarios are named `{}`: {} and {}; give only one of them",
                shown(&name),
                other.display(),
                path.display()
            )));
        }
        names.push((name, path.clone()));
    }
    Ok((loaded, unavailable))
}

/// The name a scenario that does not load is listed by: its own when its
/// file parses, else its directory's (a `scenario.toml`) or its file's.
fn name_of(path: &Path) -> String {
    if let Ok((scenario, _)) = skillhost_scenario::parse_file(path) {
        return scenario.name;
    }
    let stem = if path.file_name().is_some_and(|f| f == "scenario.toml") {
        path.parent().and_then(|dir| dir.file_name())
    } else {
        path.file_stem()
    };
    stem.map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into_owned(),
    )
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

/// Loads a claimed run's scenario with its `oci://` components resolved as
/// `host run` resolves them (the scenario's lock and trust policy, the
/// registry cache, `--locked`, `--offline`). The engine then refuses a run
/// whose components are not the ones it was started with.
pub fn scenario_loader(
    globals: Globals,
    registry: RegistryArgs,
) -> skillhost_engine::worker::ScenarioLoader {
    skillhost_engine::worker::ScenarioLoader::new(move |path, runtime| {
        load_with_registry(path, runtime, &globals, registry)
            .map_err(|(report, _)| report.to_string())
    })
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

#[cfg(test)]
mod tests {
    use skillhost_engine::EngineError;
    use skillhost_engine::replay::ReplayError;

    use super::HostCommands;

    fn said(e: &EngineError) -> String {
        e.render(&HostCommands)
    }

    /// The engine's remedies, said as `host` commands, are the messages
    /// the command line has always printed, word for word.
    #[test]
    fn the_engines_remedies_are_said_as_host_commands() {
        let id = || "r1".to_string();
        assert_eq!(
            said(&EngineError::UnknownRun(id())),
            "run `r1` does not exist in this database; list runs with `host runs list`"
        );
        assert_eq!(
            said(&EngineError::RunFinished {
                id: id(),
                status: "completed".into()
            }),
            "run `r1` is completed; only unfinished runs can be resumed. Start a new run with \
             `host run <scenario>`, or see this run's steps with `host runs show r1`"
        );
        assert_eq!(
            said(&EngineError::ScenarioChanged {
                id: id(),
                scenario: "loop".into(),
                expected: "aa".into(),
                found: "bb".into()
            }),
            "run `r1` was started from scenario `loop` with digest aa, but the file now has \
             digest bb; resume it with the scenario it started with, or continue it with the \
             changed scenario with `host resume r1 --allow-changed`"
        );
        assert_eq!(
            said(&EngineError::ComponentsChanged {
                id: id(),
                changes: "skill `a` changed".into()
            }),
            "run `r1` started with other code than it would continue with: skill `a` changed; a \
             run in flight never switches code silently: resume it with the components it \
             started with (`host runs show r1` lists them), or continue it with the new ones \
             with `host resume r1 --allow-changed`"
        );
        assert_eq!(
            said(&EngineError::Waiting {
                id: id(),
                node: "approve".into(),
                prompt: "Ship?".into()
            }),
            "run `r1` is waiting for an answer at node `approve` (Ship?); answer it with `host \
             runs answer r1 --data JSON` (or `host runs approve|reject r1` for a yes/no \
             answer), or cancel it with `host runs cancel r1`"
        );
        assert_eq!(
            said(&EngineError::NotWaiting {
                id: id(),
                status: "completed".into()
            }),
            "run `r1` is completed, not waiting for an answer; only a run waiting at an \
             approval node can be answered (`host runs list --status waiting`)"
        );
        assert_eq!(
            said(&EngineError::AlreadyAnswered {
                id: id(),
                node: "approve".into(),
                by: "alice".into(),
                at: "T".into(),
                status: "queued".into()
            }),
            "run `r1` was already answered at node `approve` by `alice` at T and is queued now; \
             an answer is given once (see it with `host runs show r1`)"
        );
        assert_eq!(
            said(&EngineError::WaitTimedOut {
                id: id(),
                node: "approve".into(),
                deadline: "T".into()
            }),
            "run `r1` stopped waiting at node `approve`: its wait timed out at T, so it takes \
             the node's `on_timeout` route; continue it with `host resume r1` (a worker does \
             that by itself)"
        );
        assert_eq!(
            said(&EngineError::NoSuchCheckpoint {
                id: id(),
                seq: 9,
                last: 3
            }),
            "run `r1` has no checkpoint 9 (its checkpoints are 0 to 3); see them with `host \
             checkpoints r1`"
        );
        assert_eq!(
            said(&EngineError::ForkGoesNowhere { id: id(), seq: 3 }),
            "checkpoint 3 of run `r1` leads to no node (the run failed there with no failure \
             handler); fork at an earlier checkpoint (`host checkpoints r1`)"
        );
    }

    #[test]
    fn a_replays_remedies_are_said_as_host_commands() {
        let said = |e: ReplayError| e.render(&HostCommands);
        assert_eq!(
            said(ReplayError::UnknownRun {
                id: "r1".into(),
                db: "sqlite://x.db".into()
            }),
            "run `r1` does not exist in sqlite://x.db; list runs with `host runs list`"
        );
        assert_eq!(
            said(ReplayError::NotFinished {
                id: "r1".into(),
                status: "running".into()
            }),
            "run `r1` is running; only a finished run (completed or failed) can be replayed. \
             Resume it with `host resume r1` first, or see its steps with `host runs show r1`"
        );
        assert_eq!(
            said(ReplayError::ScenarioUnreadable {
                path: "s.toml".into(),
                message: "gone".into()
            }),
            "cannot read the scenario file `s.toml`: gone; a replay reads the scenario the run \
             was started from. Put it back, or replay an export of the run (`host runs export`) \
             with `host replay --file`"
        );
        assert_eq!(
            said(ReplayError::HasSubgraphs {
                id: "r1".into(),
                node: "child".into()
            }),
            "run `r1` runs another scenario as a child run (subgraph node `child`), which a \
             replay does not re-execute; replay each child run on its own (`host runs show r1` \
             lists them)"
        );
        assert_eq!(
            said(ReplayError::ComponentsMissing { missing: vec![] }),
            "0 component(s) the run used cannot be found: . Put each one back where the \
             scenario expects it, or pass --components DIR holding it as <sha256>.wasm (`host \
             runs export RUN --components DIR` writes them)"
        );
    }
}
