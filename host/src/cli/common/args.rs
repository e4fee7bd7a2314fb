//! The global options and the arguments several subcommands take, and how
//! they become library values: the runtime with the host's configuration,
//! the registry's connection and trust policy, a run's input, an
//! idempotency key, the database (opened with the right exit code), a
//! server's token and allowed hosts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, ValueEnum};
use serde_json::Value;

use skillhost_oci::{
    Cache, Connection, Credentials, HostConfig as RegistryConfig, ResolveOptions, Resolver,
    TrustPolicy,
};
use skillhost_runtime::{HostConfig, Runtime, RuntimeConfig};
use skillhost_store::{IdempotencyKey, Store, StoreError, StoreOptions, SyncMode, parse_duration};
use skillhost_telemetry::TelemetryConfig;

use super::{Failure, oci_failure, open_failure};

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
            // Where this process's traces go, checked before anything runs.
            install_telemetry(&telemetry_config(&host)?)?;
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

/// The value parser of duration flags (`--lease-ttl 30s`, `--older-than 7d`).
pub fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text)
}

/// Where runs are stored when `--database` is not given.
pub const DEFAULT_DATABASE: &str = "sqlite://.skillhost/skillhost.db";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// A checkpoint after every node that survives any crash or kill of the
    /// host process (SQLite WAL, `synchronous = NORMAL`); a power loss may lose
    /// the last few checkpoints but never corrupts the database.
    Normal,
    /// Like `normal`, and every checkpoint is fsynced before anyone hears of
    /// it (its event, the run's end) and before a node that may act outside
    /// the run (a grant of http, llm or kv; a map, subgraph or approval)
    /// starts, so it also survives power loss (a sync costs 0.1 ms to
    /// milliseconds on most disks); a node without effects runs meanwhile.
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
        let token = self.given()?;
        skillhost_auth::check_bind(flag, addr, token.as_deref()).map_err(Failure::bad_input)?;
        Ok(token)
    }

    /// The token given, if any, read from its file for `--token-file`;
    /// where it may be used is the server's to check.
    pub fn given(&self) -> Result<Option<String>, Failure> {
        Ok(match (&self.token, &self.token_file) {
            (Some(token), _) => Some(token.clone()),
            (None, Some(file)) => {
                Some(skillhost_auth::read_token_file(file).map_err(Failure::bad_input)?)
            }
            (None, None) => None,
        })
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

/// Starts exporting traces as the host configuration for the current
/// directory and the OTEL_* variables say: for a command that ends runs
/// without loading a runtime (`runs cancel`).
pub fn install_telemetry_here() -> Result<(), Failure> {
    install_telemetry(&telemetry_here()?)
}

/// The trace viewer's URL template (`{trace_id}` where the id goes), when
/// the host configuration for the current directory (or
/// `SKILLHOST_TRACE_URL`) names one.
pub fn trace_url_template() -> Result<Option<String>, Failure> {
    Ok(telemetry_here()?.trace_url)
}

/// What the host configuration `host` was read from (its `[telemetry]`)
/// and the OTEL_* variables say of traces; a configuration that cannot be
/// used is bad input.
fn telemetry_config(host: &HostConfig) -> Result<TelemetryConfig, Failure> {
    TelemetryConfig::load(host.source.used())
        .map_err(|e| Failure::bad_input(format!("traces: {e}")))
}

/// [`telemetry_config`] of the host configuration for the current
/// directory.
fn telemetry_here() -> Result<TelemetryConfig, Failure> {
    let host = HostConfig::load(&current_dir()?).map_err(Failure::bad_input)?;
    telemetry_config(&host)
}

fn install_telemetry(config: &TelemetryConfig) -> Result<(), Failure> {
    skillhost_telemetry::install(config).map_err(|e| Failure::environment(format!("traces: {e}")))
}

/// The trace viewer's link for `trace_id`, when a template is configured
/// ([`trace_url_template`]).
pub fn trace_link(trace_id: &str) -> Result<Option<String>, Failure> {
    Ok(trace_url_template()?.map(|template| skillhost_telemetry::trace_link(&template, trace_id)))
}
