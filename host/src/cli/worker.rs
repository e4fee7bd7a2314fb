//! `host worker`: claims queued runs from a shared database and runs them
//! (Postgres for scale-out over machines; SQLite works for one machine). The
//! loop, leases and shutdown are the engine's (`skillhost_engine::worker`);
//! this module turns flags into its configuration, signals into its shutdown,
//! and its events into lines. With `--schedules`, it loads those scenarios
//! and hands their `[[schedule]]` entries to the engine's scheduler
//! (`skillhost_engine::schedule`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::common::{
    AllowedHostArgs, CliResult, DatabaseArgs, Durability, Failure, Globals, RegistryArgs,
    TokenArgs, duration_arg, engine_failure, load_scenario, scenario_loader, shown,
    shutdown_on_signals, tokio_runtime,
};
use skillhost_engine::schedule::{self, DEFAULT_CATCH_UP, Scheduler};
use skillhost_engine::worker::{self, WorkerConfig, WorkerEvent};
use skillhost_serve::{MetricsConfig, MetricsServer};
use skillhost_store::new_owner_id;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// How registry (`oci://`) components are resolved, as for `host run`:
    /// the scenario's lock, the registry cache, then the registry.
    #[command(flatten)]
    pub registry: RegistryArgs,
    /// Runs executed at the same time.
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
    /// How long a lease lives without a heartbeat (heartbeats every third of
    /// it); a dead worker's runs are taken over after this long.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = duration_arg)]
    pub lease_ttl: Duration,
    /// How often to look for work when the queue is empty.
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = duration_arg)]
    pub poll: Duration,
    /// On SIGTERM or Ctrl-C: how long in-flight runs may take to finish
    /// before they are stopped and given back to the queue.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = duration_arg)]
    pub grace: Duration,
    /// Exit once the queue is empty and nothing is in flight (with
    /// --schedules: having queued only the ticks due when it started).
    #[arg(long)]
    pub exit_when_idle: bool,
    /// The lease owner id (default: worker@HOST:PID:RANDOM).
    #[arg(long, value_name = "ID")]
    pub owner: Option<String>,
    /// Also queue the runs of these scenarios' `[[schedule]]` entries, one
    /// per tick, exactly once across all workers doing the same.
    #[arg(long, value_name = "SCENARIO", num_args = 1..)]
    pub schedules: Vec<String>,
    /// When a schedule missed ticks (no worker was running), queue at most
    /// this many of them, the newest; older ones are skipped and reported.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_CATCH_UP, requires = "schedules")]
    pub catch_up: usize,
    /// Print events as NDJSON on stdout (claimed, finished, released, lease_lost, error,
    /// database_unreachable, database_back, scheduled, ticks_skipped).
    #[arg(long)]
    pub json: bool,
    /// Serve the process's metrics at http://ADDR/metrics for Prometheus (runs, node durations, tokens, takeovers, and the store's queue depth and open waits). Any address but a loopback one needs --token or --token-file.
    #[arg(long, value_name = "IP:PORT")]
    pub metrics_addr: Option<SocketAddr>,
    /// The token a scraper of --metrics-addr must send.
    #[command(flatten)]
    pub token: TokenArgs,
    /// Names besides the loopback ones --metrics-addr answers to.
    #[command(flatten)]
    pub allowed_hosts: AllowedHostArgs,
}

pub fn worker(args: WorkerArgs, globals: &Globals) -> CliResult {
    if args.concurrency == 0 {
        return Err(Failure::bad_input("--concurrency must be at least 1"));
    }
    if args.catch_up == 0 {
        return Err(Failure::bad_input(
            "--catch-up must be at least 1 (the tick that is due now counts as one)",
        ));
    }
    let metrics = metrics_config(&args)?;
    // Each scenario loaded and checked now: a bad cron, or an input that
    // does not fit, stops the worker before it starts.
    let scheduled = args
        .schedules
        .iter()
        .map(|name| load_scenario(name, globals, args.registry, args.json).map(Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    let scheduler = match scheduled.is_empty() {
        true => None,
        false => Some(
            Scheduler::new(scheduled, args.catch_up, schedule::now_ms()).map_err(engine_failure)?,
        ),
    };
    // One runtime for every run the worker claims: its providers come from
    // the configuration of the directory it is started in.
    let runtime = globals.runtime_here()?;
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = args.db.open_with(Durability::Full).await?;
        // Listening before anything is claimed: a worker asked for its
        // metrics does not run without them.
        let metrics = match metrics {
            Some(config) => Some(MetricsServer::bind(config).await.map_err(Failure::environment)?),
            None => None,
        };
        let owner = args.owner.clone().unwrap_or_else(|| new_owner_id("worker"));
        let config = WorkerConfig {
            owner: owner.clone(),
            concurrency: args.concurrency,
            lease_ttl: args.lease_ttl,
            poll_interval: args.poll,
            grace: args.grace,
            exit_when_idle: args.exit_when_idle,
            loader: scenario_loader(globals.clone(), args.registry),
            run_events: None,
        };
        let json_out = args.json;
        let events: worker::WorkerEvents = Arc::new(move |event: &WorkerEvent| {
            if json_out {
                if let Ok(line) = serde_json::to_string(event) {
                    println!("{line}");
                }
                return;
            }
            // What a run or its scenario wrote (messages, names) is shown,
            // never printed raw; each event is one line.
            let line = match event {
                WorkerEvent::Claimed {
                    run_id,
                    scenario,
                    generation,
                    from_seq,
                } => format!(
                    "claimed  {run_id} ({scenario}, lease generation {generation}, from checkpoint {from_seq})"
                ),
                WorkerEvent::Finished {
                    run_id,
                    status,
                    nodes_run,
                } => format!("finished {run_id} {status} after {nodes_run} node(s)"),
                WorkerEvent::LeaseLost { run_id, message } => {
                    format!("lost     {run_id}: {message}")
                }
                WorkerEvent::Released { run_id, reason } => {
                    format!("released {run_id}: {reason}")
                }
                WorkerEvent::Error { message } => format!("error    {message}"),
                WorkerEvent::DatabaseUnreachable { message } => {
                    format!("database unreachable, retrying with backoff: {message}")
                }
                WorkerEvent::DatabaseBack { out_ms } => {
                    format!("database back after {:.1}s", *out_ms as f64 / 1000.0)
                }
                WorkerEvent::Stopping { in_flight } => {
                    format!("stopping: waiting for {in_flight} run(s) in flight")
                }
                WorkerEvent::Scheduled {
                    run_id,
                    scenario,
                    schedule,
                    tick,
                } => format!("queued   {run_id} ({scenario}, schedule `{schedule}`, tick {tick})"),
                WorkerEvent::TicksSkipped {
                    scenario,
                    schedule,
                    newest_skipped,
                    catch_up,
                } => format!(
                    "skipped  missed ticks of {scenario} schedule `{schedule}` up to \
                     {newest_skipped} (only the newest {catch_up} are caught up; --catch-up)"
                ),
            };
            eprintln!("{}", shown(&line));
        });
        if !json_out {
            eprintln!(
                "worker {owner} on {} ({} runs at a time, lease {:?})",
                store.url_for_display(),
                args.concurrency,
                args.lease_ttl
            );
        }
        let shutdown_rx = shutdown_on_signals()?;
        let metrics = metrics.map(|server| {
            eprintln!(
                "worker metrics on http://{}/metrics",
                server.local_addr()
            );
            let history = skillhost_store::History::clone(&store);
            tokio::spawn(server.serve(history, shutdown_rx.clone()))
        });
        if let Some(scheduler) = &scheduler
            && !json_out
        {
            eprintln!(
                "queueing the runs of {} schedule(s), catching up at most {} missed tick(s) each",
                scheduler.len(),
                scheduler.catch_up
            );
        }
        let report = worker::run_with_schedules(
            store.clone(),
            runtime,
            config,
            scheduler,
            shutdown_rx,
            events,
        )
        .await;
        // A worker that exits when idle stops its metrics with it; one
        // stopped by a signal has told the server too.
        if let Some(metrics) = metrics {
            metrics.abort();
        }
        store.close().await;
        if json_out {
            println!(
                "{}",
                json!({"event": "stopped", "report": report})
            );
        } else {
            eprintln!(
                "worker stopped: {} completed, {} failed, {} waiting, {} cancelled, {} released, {} lost to other workers, {} errors, {} scheduled",
                report.completed,
                report.failed,
                report.waiting,
                report.cancelled,
                report.released,
                report.lease_lost,
                report.errors,
                report.scheduled
            );
        }
        Ok(())
    })
}

/// `--metrics-addr` with its token and names, checked before anything is
/// opened; a token or a name without it is refused (there is nothing for
/// it to guard).
fn metrics_config(args: &WorkerArgs) -> Result<Option<MetricsConfig>, Failure> {
    let token = args.token.given()?;
    let Some(addr) = args.metrics_addr else {
        if token.is_some() || !args.allowed_hosts.names.is_empty() {
            return Err(Failure::bad_input(
                "--token, --token-file and --allowed-host guard the metrics server: give \
                 --metrics-addr IP:PORT with them, or leave them out",
            ));
        }
        return Ok(None);
    };
    skillhost_serve::check_metrics_bind(addr, token.as_deref()).map_err(Failure::bad_input)?;
    Ok(Some(MetricsConfig {
        addr,
        token,
        allowed_hosts: args.allowed_hosts.checked(addr)?,
    }))
}
