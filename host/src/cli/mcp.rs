//! `host mcp`: scenarios and skill components as the tools of a Model
//! Context Protocol server, over stdio (default) or streamable HTTP
//! (`--http ADDR`, at `/mcp`). Loads what it is given and opens the store
//! as `host run` and `host skill call` do (a scenario that does not load
//! or pass the checker here is left out with why, as `host serve` does,
//! unless nothing else is offered); the server is `skillhost-mcp`'s.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use super::common::duration_arg;
use super::common::{
    AllowedHostArgs, CliResult, DatabaseArgs, Failure, Globals, RegistryArgs, TokenArgs, load_each,
    tokio_runtime,
};
use skillhost_mcp::{ComposeOffer, Offer, SkillTool, Unavailable};
use skillhost_runtime::{Grants, Limits};
use skillhost_scenario::compose::Ceiling;

#[derive(Debug, Args)]
pub struct McpArgs {
    /// A scenario to offer as a tool (a name as for `host run`, or a file). Repeatable.
    #[arg(long = "scenario", value_name = "FILE")]
    scenarios: Vec<String>,
    /// A skill component (.wasm) to offer as a tool. Repeatable.
    #[arg(long = "skill", value_name = "FILE")]
    skills: Vec<PathBuf>,
    /// Grant the skill tools a capability, as `host skill call --grant` does: fs=DIR, kv=NAMESPACE, http=HOST[:PORT], llm=PROVIDER/MODEL. Repeatable. Scenarios keep their own grants.
    #[arg(long = "grant", value_name = "CAP=VALUE")]
    grants: Vec<String>,
    /// Wall-clock limit for one skill tool call.
    #[arg(long, value_name = "N", default_value_t = 30_000)]
    timeout_ms: u64,
    /// Serve streamable HTTP at http://ADDR/mcp instead of stdio, e.g. 127.0.0.1:7701 (port 0 picks one; the address is printed on stderr). Any address but a loopback one needs --token or --token-file.
    #[arg(long, value_name = "IP:PORT")]
    http: Option<SocketAddr>,
    /// Offer `scenario_compose`, a tool that runs scenarios the client writes, bounded by this ceiling (TOML: the skills, grants and limits composed scenarios may use at most; docs/mcp.md). Off unless given.
    #[arg(long, value_name = "FILE")]
    compose_ceiling: Option<PathBuf>,
    /// Where composed scenarios are kept, each under its SHA-256 (the scenario files of their runs). Default: .skillhost/composed.
    #[arg(long, value_name = "DIR", requires = "compose_ceiling")]
    compose_dir: Option<PathBuf>,
    #[command(flatten)]
    token: TokenArgs,
    #[command(flatten)]
    allowed_hosts: AllowedHostArgs,
    #[command(flatten)]
    db: DatabaseArgs,
    #[command(flatten)]
    registry: RegistryArgs,
    /// Keep no sessions over HTTP: every request stands alone, so several `host mcp --http` on one Postgres store can sit behind a round-robin proxy (docs/mcp.md, "Several servers behind a proxy"). Log messages are then not sent (progress notifications are).
    #[arg(long, requires = "http")]
    stateless: bool,
    /// How long the lease of a task's run lives without a renewal (renewed every third of it): a `host worker` on the same store takes over the runs of a server that died once their leases expired.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration_arg)]
    lease_ttl: Duration,
}

pub fn mcp(args: McpArgs, globals: &Globals) -> CliResult {
    if args.lease_ttl.is_zero() {
        return Err(Failure::bad_input(
            "--lease-ttl 0: a lease must live a while (e.g. 30s): a task's run would be taken \
             over while it runs",
        ));
    }
    let (token, allowed_hosts) = match args.http {
        Some(addr) => (
            args.token.checked("--http", addr)?,
            args.allowed_hosts.checked(addr)?,
        ),
        None if args.token.token.is_some() || args.token.token_file.is_some() => {
            return Err(Failure::bad_input(
                "--token and --token-file are for --http: over stdio the client that starts \
                 the server is the only one that can reach it",
            ));
        }
        None if !args.allowed_hosts.names.is_empty() => {
            return Err(Failure::bad_input(
                "--allowed-host is for --http: over stdio there is no Host to check",
            ));
        }
        None => (None, Vec::new()),
    };
    if args.scenarios.is_empty() && args.skills.is_empty() {
        return Err(Failure::bad_input(
            "give at least one --scenario FILE or --skill FILE to offer as a tool",
        ));
    }
    let mut grants = Grants::default();
    for spec in &args.grants {
        grants.add_spec(spec).map_err(Failure::bad_input)?;
    }
    let limits = Limits {
        timeout: Duration::from_millis(args.timeout_ms),
        ..Limits::default()
    };
    limits.validate().map_err(Failure::bad_input)?;
    // A name or path that is no scenario file is the command line's
    // mistake; one that does not load or pass the checker here is left
    // out with why (its tool is not offered), unless nothing is left.
    let mut files = Vec::new();
    for name in &args.scenarios {
        files.push(skillhost_scenario::resolve(name).map_err(Failure::bad_input)?);
    }
    let (scenarios, unavailable) = load_each(&files, globals, args.registry)?;
    if scenarios.is_empty() && args.skills.is_empty() {
        let reasons: Vec<String> = unavailable
            .iter()
            .map(|u| format!("scenario `{}`: {}", u.name, u.reason))
            .collect();
        return Err(Failure::bad_input(format!(
            "no scenario given can run here, and no --skill is given: nothing to offer\n{}",
            reasons.join("\n")
        )));
    }
    let unavailable: Vec<Unavailable> = unavailable
        .into_iter()
        .map(|u| Unavailable {
            name: u.name,
            reason: u.reason,
        })
        .collect();
    let runtime = globals.runtime_here()?;
    if let Some(grant) = &grants.llm {
        runtime
            .backends()
            .llm
            .check(&grant.provider)
            .map_err(|problem| Failure::bad_input(format!("--grant llm: {problem}")))?;
    }
    let compose = match &args.compose_ceiling {
        None => None,
        Some(file) => {
            let ceiling = Ceiling::read(file).map_err(Failure::bad_input)?;
            let dir = args
                .compose_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(".skillhost/composed"));
            std::fs::create_dir_all(&dir).map_err(|e| {
                Failure::environment(format!(
                    "--compose-dir `{}`: cannot create it: {e}",
                    dir.display()
                ))
            })?;
            let dir = dir.canonicalize().map_err(|e| {
                Failure::environment(format!("--compose-dir `{}`: {e}", dir.display()))
            })?;
            ceiling.check_host(&dir).map_err(Failure::bad_input)?;
            Some(ComposeOffer {
                ceiling,
                dir,
                runtime: runtime.clone(),
            })
        }
    };
    let grants = Arc::new(grants);
    let mut skills = Vec::new();
    for path in &args.skills {
        let skill = runtime.load_file(path).map_err(Failure::bad_input)?;
        skills.push(SkillTool {
            skill,
            grants: grants.clone(),
            limits: limits.clone(),
        });
    }
    tokio_runtime()?.block_on(async {
        let store = args.db.open().await?;
        let offer = Offer {
            scenarios,
            unavailable,
            skills,
            lease_ttl: Some(args.lease_ttl),
            store,
            compose,
        };
        let served = match args.http {
            None => skillhost_mcp::serve_stdio(offer).await,
            Some(addr) => {
                let shutdown = async {
                    let _ = tokio::signal::ctrl_c().await;
                };
                skillhost_mcp::serve_http(
                    offer,
                    skillhost_mcp::HttpAccess {
                        addr,
                        token,
                        allowed_hosts,
                        stateless: args.stateless,
                    },
                    |bound| eprintln!("MCP server at http://{bound}/mcp"),
                    shutdown,
                )
                .await
            }
        };
        served.map_err(|e| match e {
            skillhost_mcp::McpError::Tools(message) | skillhost_mcp::McpError::Auth(message) => {
                Failure::bad_input(message)
            }
            e => Failure::environment(e),
        })
    })
}
