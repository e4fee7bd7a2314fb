//! `host serve`: the HTTP API and web run inspector of `skillhost-serve`
//! over a database. Turns flags into its configuration (the address and
//! token checked before anything is opened, the `--scenarios` loaded and
//! checked as `host run` loads them: one that does not load or pass the
//! checker is served as unavailable, with why, rather than refused:
//! `common/loading.rs`'s `load_each`, which `host mcp` shares), signals into its
//! shutdown.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::common::{
    AllowedHostArgs, CliResult, DatabaseArgs, Durability, Failure, Globals, RegistryArgs,
    TokenArgs, load_each, scenario_loader, shutdown_on_signals, tokio_runtime, trace_url_template,
};
use skillhost_serve::{ServeConfig, UnavailableScenario};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Where to listen. Any address but a loopback one needs --token or --token-file.
    #[arg(long, value_name = "IP:PORT", default_value = "127.0.0.1:7700")]
    pub addr: SocketAddr,
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Scenarios the API and pages may start: a scenario file, or a directory
    /// holding scenario.toml, or a directory of such directories (e.g. examples).
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub scenarios: Vec<PathBuf>,
    #[command(flatten)]
    pub token: TokenArgs,
    #[command(flatten)]
    pub allowed_hosts: AllowedHostArgs,
    /// Leave queued and answered runs to `host worker`s instead of running them here.
    #[arg(long)]
    pub no_worker: bool,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

pub fn serve(args: ServeArgs, globals: &Globals) -> CliResult {
    let token = args.token.checked("--addr", args.addr)?;
    let allowed_hosts = args.allowed_hosts.checked(args.addr)?;
    let files = scenario_files(&args.scenarios)?;
    let (scenarios, unavailable) = load_each(&files, globals, args.registry)?;
    let unavailable: Vec<UnavailableScenario> = unavailable
        .into_iter()
        .map(|u| UnavailableScenario {
            name: u.name,
            path: u.path,
            reason: u.reason,
        })
        .collect();
    let runtime = globals.runtime_here()?;
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = args.db.open_with(Durability::Full).await?;
        eprintln!(
            "host serve: {} on {}, {} scenario(s){}{}",
            store.backend_name(),
            store.url_for_display(),
            scenarios.len(),
            match unavailable.len() {
                0 => String::new(),
                n => format!(", {n} unavailable"),
            },
            if args.no_worker {
                "; runs are left to `host worker`s"
            } else {
                ""
            }
        );
        let config = ServeConfig {
            addr: args.addr,
            token,
            allowed_hosts,
            scenarios,
            unavailable,
            worker: !args.no_worker,
            loader: scenario_loader(globals.clone(), args.registry),
            log: Arc::new(|line: &str| eprintln!("{line}")),
            trace_url: trace_url_template()?,
        };
        let shutdown = shutdown_on_signals()?;
        let served = skillhost_serve::serve(store.clone(), runtime, config, shutdown).await;
        store.close().await;
        served.map_err(Failure::environment)
    })
}

/// The scenario files `--scenarios` names: a file as it is; a directory's
/// `scenario.toml`, else each of its subdirectories' `scenario.toml`.
fn scenario_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, Failure> {
    let mut files = Vec::new();
    for path in paths {
        if path.is_file() {
            files.push(path.clone());
            continue;
        }
        if !path.is_dir() {
            return Err(Failure::bad_input(format!(
                "--scenarios {}: no such file or directory",
                path.display()
            )));
        }
        let own = path.join("scenario.toml");
        if own.is_file() {
            files.push(own);
            continue;
        }
        let entries = std::fs::read_dir(path).map_err(|e| {
            Failure::bad_input(format!("cannot read --scenarios {}: {e}", path.display()))
        })?;
        let mut found: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|entry| entry.path().join("scenario.toml"))
            .filter(|file| file.is_file())
            .collect();
        if found.is_empty() {
            return Err(Failure::bad_input(format!(
                "--scenarios {}: holds no scenario.toml, nor do its subdirectories; give a \
                 scenario file or such a directory",
                path.display()
            )));
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}
