//! `host worker`, `host submit`, `host runs prune` and `host runs retention`:
//! the run queue and scale-out over a shared database (Postgres in
//! production; SQLite works for one machine).

use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use super::common::{
    CliResult, DatabaseArgs, Durability, Failure, Globals, checked_input, duration_arg,
    load_scenario, print_json, read_json_arg, store_error, tokio_runtime,
};
use skillhost_engine::worker::{self, WorkerConfig, WorkerEvent};
use skillhost_store::{NewRun, Store, new_owner_id, new_run_id, parse_duration};

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
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
    /// Exit once the queue is empty and nothing is in flight.
    #[arg(long)]
    pub exit_when_idle: bool,
    /// The lease owner id (default: worker@HOST:PID:RANDOM).
    #[arg(long, value_name = "ID")]
    pub owner: Option<String>,
    /// Print events as NDJSON on stdout (claimed, finished, released, lease_lost, error).
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// A scenario name (examples/NAME/scenario.toml, ./NAME.toml) or a file.
    pub scenario: String,
    /// The run input: inline JSON, or @FILE.
    #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
    pub input: String,
    /// The task this run works on: its current checkpoint is kept in the
    /// task's row (default: the run is its own task).
    #[arg(long, value_name = "ID")]
    pub task_id: Option<String>,
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Print `{"run_id": …}` instead of the bare id.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Delete finished runs last updated longer ago than this (e.g. 7d, 12h),
    /// except scenarios with their own retention setting. Without it, only
    /// scenarios with a setting are pruned.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub older_than: Option<Duration>,
    /// Print what was pruned as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RetentionArgs {
    /// The scenario name (as in `host runs list`); none lists the settings.
    pub scenario: Option<String>,
    /// How long its finished runs are kept (e.g. 30d), or `off`.
    pub keep: Option<String>,
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Print the settings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn worker(args: WorkerArgs, globals: &Globals) -> CliResult {
    if args.concurrency == 0 {
        return Err(Failure::bad_input("--concurrency must be at least 1"));
    }
    let runtime = globals.runtime()?;
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = args.db.open_with(Durability::Full).await?;
        let owner = args.owner.clone().unwrap_or_else(|| new_owner_id("worker"));
        let config = WorkerConfig {
            owner: owner.clone(),
            concurrency: args.concurrency,
            lease_ttl: args.lease_ttl,
            poll_interval: args.poll,
            grace: args.grace,
            exit_when_idle: args.exit_when_idle,
        };
        let json_out = args.json;
        let events: worker::WorkerEvents = Arc::new(move |event: &WorkerEvent| {
            if json_out {
                if let Ok(line) = serde_json::to_string(event) {
                    println!("{line}");
                }
                return;
            }
            match event {
                WorkerEvent::Claimed {
                    run_id,
                    scenario,
                    generation,
                    from_seq,
                } => eprintln!(
                    "claimed  {run_id} ({scenario}, lease generation {generation}, from checkpoint {from_seq})"
                ),
                WorkerEvent::Finished {
                    run_id,
                    status,
                    nodes_run,
                } => eprintln!("finished {run_id} {status} after {nodes_run} node(s)"),
                WorkerEvent::LeaseLost { run_id, message } => {
                    eprintln!("lost     {run_id}: {message}")
                }
                WorkerEvent::Released { run_id, reason } => {
                    eprintln!("released {run_id}: {reason}")
                }
                WorkerEvent::Error { message } => eprintln!("error    {message}"),
                WorkerEvent::Stopping { in_flight } => {
                    eprintln!("stopping: waiting for {in_flight} run(s) in flight")
                }
            }
        });
        if !json_out {
            eprintln!(
                "worker {owner} on {} ({} runs at a time, lease {:?})",
                store.url_for_display(),
                args.concurrency,
                args.lease_ttl
            );
        }
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
        let report = worker::run(store.clone(), runtime, config, shutdown_rx, events).await;
        store.close().await;
        if json_out {
            println!(
                "{}",
                json!({"event": "stopped", "report": report})
            );
        } else {
            eprintln!(
                "worker stopped: {} completed, {} failed, {} released, {} lost to other workers, {} errors",
                report.completed, report.failed, report.released, report.lease_lost, report.errors
            );
        }
        Ok(())
    })
}

pub fn submit(args: SubmitArgs, globals: &Globals) -> CliResult {
    let input = read_json_arg(&args.input)?;
    let loaded = load_scenario(&args.scenario, globals, args.json)?;
    let input = checked_input(&loaded, input)?;
    let scenario = &*loaded.scenario;
    // Workers may run in another directory: store the absolute path.
    let path = std::fs::canonicalize(&scenario.path).unwrap_or_else(|_| scenario.path.clone());
    let run = NewRun {
        id: new_run_id(),
        scenario_name: scenario.name.clone(),
        scenario_path: path.display().to_string(),
        scenario_digest: scenario.digest.clone(),
        input,
        initial_state: loaded.initial_state.clone(),
        start_node: scenario.start.clone(),
    };
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = args.db.open_with(Durability::Full).await?;
        store
            .enqueue_run_for_task(&run, args.task_id.as_deref())
            .await
            .map_err(store_error)?;
        store.close().await;
        if args.json {
            print_json(&json!({"run_id": run.id, "status": "queued", "task_id": args.task_id}))
        } else {
            println!("{}", run.id);
            Ok(())
        }
    })
}

pub fn prune(args: PruneArgs) -> CliResult {
    let rt = tokio_runtime()?;
    rt.block_on(async {
        // Pruning a database that does not exist would create one to prune.
        let store = args.db.open_existing().await?;
        let report = store
            .prune_runs(args.older_than)
            .await
            .map_err(store_error)?;
        if args.json {
            return print_json(&report);
        }
        println!(
            "pruned {} finished run(s) and {} unreferenced artifact blob(s) from {}",
            report.runs.len(),
            report.blobs,
            store.url_for_display()
        );
        Ok(())
    })
}

pub fn retention(args: RetentionArgs) -> CliResult {
    let rt = tokio_runtime()?;
    rt.block_on(async {
        // Setting a retention may create the database it is kept in; listing
        // the settings reads one that must exist.
        let store = match (&args.scenario, &args.keep) {
            (Some(_), Some(_)) => args.db.open().await?,
            _ => args.db.open_existing().await?,
        };
        match (&args.scenario, &args.keep) {
            (Some(scenario), Some(keep)) => {
                let keep = match keep.as_str() {
                    "off" | "none" => None,
                    text => Some(parse_duration(text).map_err(Failure::bad_input)?),
                };
                store
                    .set_retention(scenario, keep)
                    .await
                    .map_err(store_error)?;
                list_retention(&store, args.json).await
            }
            (Some(_), None) => Err(Failure::bad_input(
                "give how long to keep the scenario's finished runs (e.g. 30d) or `off`",
            )),
            _ => list_retention(&store, args.json).await,
        }
    })
}

async fn list_retention(store: &Store, json_out: bool) -> CliResult {
    let settings = store.retention().await.map_err(store_error)?;
    if json_out {
        return print_json(&settings);
    }
    if settings.is_empty() {
        println!("no per-scenario retention settings");
    }
    for setting in settings {
        let keep = Duration::from_millis(setting.keep_ms.max(0) as u64);
        println!(
            "{:<24} keep finished runs {}",
            setting.scenario_name,
            human(keep)
        );
    }
    Ok(())
}

fn human(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        s if s % 86_400 == 0 && s > 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 && s > 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 && s > 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

/// The lease `host resume` holds while it runs a run: acquired up front
/// (refused, naming the holder and expiry, while another runner has it),
/// renewed in the background, released at the end.
pub(crate) struct CliLease {
    store: Store,
    heartbeat: tokio::task::JoinHandle<()>,
}

/// How long a `host resume` lease lives without a heartbeat.
const CLI_LEASE_TTL: Duration = Duration::from_secs(30);

impl CliLease {
    pub async fn acquire(store: &Store, run_id: &str) -> Result<CliLease, Failure> {
        let lease = store
            .acquire_lease(run_id, &new_owner_id("resume"), CLI_LEASE_TTL)
            .await
            .map_err(|e| match e {
                skillhost_store::StoreError::Leased { .. } => Failure::bad_input(e.to_string()),
                e => store_error(e),
            })?;
        let fenced = store.fenced(lease.clone());
        let renewing = store.clone();
        let heartbeat = tokio::spawn(async move {
            let mut lease = lease;
            loop {
                tokio::time::sleep(CLI_LEASE_TTL / 3).await;
                match renewing.renew_lease(&lease, CLI_LEASE_TTL).await {
                    Ok(renewed) => lease = renewed,
                    Err(e) if e.is_transient() => continue,
                    // Lost or finished: the fenced commits say so.
                    Err(_) => return,
                }
            }
        });
        Ok(CliLease {
            store: fenced,
            heartbeat,
        })
    }

    /// The store handle fenced by this lease.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Stops renewing and gives the lease back if the run is unfinished
    /// (a finished run released it already).
    pub async fn release(self) {
        self.heartbeat.abort();
        if let Some(lease) = self.store.lease() {
            let _ = self.store.release_lease(lease).await;
        }
    }
}

#[derive(Debug, Args)]
pub struct PostgresBenchArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Concurrent runs for the throughput figure.
    #[arg(long, default_value_t = 32)]
    pub runs: usize,
    /// Runs to time for the throughput figure, in multiples of `--runs`
    /// (after one untimed warm-up round). `--runs` stay in flight
    /// throughout: when one ends, the next starts.
    #[arg(long, default_value_t = 20)]
    pub rounds: usize,
    /// Single runs to time for the per-node latency (after 5 warm-up runs).
    #[arg(long, default_value_t = 40)]
    pub single_runs: usize,
    /// `full`: every checkpoint is on the server's disk before the next node
    /// (synchronous_commit = on); `normal`: the server has it
    /// (synchronous_commit = off: survives any crash of the host process).
    #[arg(long, value_enum, default_value_t = Durability::Full)]
    pub durability: Durability,
    /// Print JSON only.
    #[arg(long)]
    pub json: bool,
}

/// `host bench postgres`: the engine benchmark's 10-node scenario of trivial
/// `echo` nodes, durable on Postgres (`synchronous_commit = on`: each node's
/// checkpoint is on the server's disk before the next node starts). Runs are
/// left in the database (scenario `bench`).
pub fn postgres_bench(args: PostgresBenchArgs) -> CliResult {
    use super::bench::{ECHO_COMPONENT, ENGINE_NODES, engine_scenario, median, round};
    use skillhost_engine::{Engine, NoEvents};
    use std::time::Instant;

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
    let dir = tempfile::tempdir()
        .map_err(|e| Failure::environment(format!("cannot create a temporary directory: {e}")))?;
    let echo = dir.path().join("echo.wasm");
    let scenario_path = dir.path().join("bench.toml");
    std::fs::write(&echo, ECHO_COMPONENT)
        .and_then(|()| std::fs::write(&scenario_path, engine_scenario(&echo)))
        .map_err(|e| Failure::environment(format!("cannot write the benchmark scenario: {e}")))?;
    let runtime = skillhost_runtime::Runtime::new(skillhost_runtime::RuntimeConfig {
        cache_dir: Some(dir.path().join("cache")),
        pool: skillhost_runtime::PoolConfig::default(),
    })
    .map_err(|e| Failure::environment(format!("{e:#}")))?;
    let loaded = Arc::new(
        skillhost_scenario::load(&scenario_path, &runtime)
            .map_err(|report| Failure::environment(format!("benchmark scenario: {report}")))?,
    );
    let rt = tokio_runtime()?;
    let result = rt.block_on(async {
        let store = args.db.open_with(args.durability).await?;
        let engine = Arc::new(Engine::new(Some(store.clone()), Arc::new(NoEvents)));
        let input = json!({});

        let mut samples = Vec::with_capacity(args.single_runs);
        for i in 0..args.single_runs + 5 {
            let start = Instant::now();
            engine
                .start(&loaded, input.clone(), None)
                .await
                .map_err(Failure::failed)?;
            if i >= 5 {
                samples.push(start.elapsed());
            }
        }
        let per_node_single = median(samples) / ENGINE_NODES as u32;

        // One untimed round opens the pool's connections and prepares the
        // statements on each; then `runs` stay in flight until the timed
        // total is done, with no barrier between rounds.
        let concurrent = |total: usize| {
            let remaining = Arc::new(std::sync::atomic::AtomicUsize::new(total));
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..args.runs {
                let (engine, loaded, input) = (engine.clone(), loaded.clone(), input.clone());
                let remaining = remaining.clone();
                tasks.spawn(async move {
                    use std::sync::atomic::Ordering;
                    while remaining
                        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        engine.start(&loaded, input.clone(), None).await?;
                    }
                    Ok::<_, skillhost_engine::EngineError>(())
                });
            }
            async move {
                while let Some(done) = tasks.join_next().await {
                    done.map_err(Failure::failed)?.map_err(Failure::failed)?;
                }
                Ok::<_, Failure>(())
            }
        };
        concurrent(args.runs).await?;
        let started = Instant::now();
        concurrent(args.runs * args.rounds).await?;
        let elapsed = started.elapsed();
        let steps = (args.runs * args.rounds * ENGINE_NODES) as f64;
        store.close().await;
        Ok::<_, Failure>(json!({
            "runs": args.runs,
            "nodes": ENGINE_NODES,
            "per_node_us_single": round(per_node_single.as_secs_f64() * 1e6, 1),
            "node_steps_per_s": round(steps / elapsed.as_secs_f64(), 0),
            "rounds": args.rounds,
            "synchronous_commit": if args.durability == Durability::Full { "on" } else { "off" },
            "single_runs": args.single_runs,
            "database": store.url_for_display(),
        }))
    })?;
    if args.json {
        return print_json(&result);
    }
    println!(
        "per node, one durable run:  {} µs (median over {} runs of {ENGINE_NODES} nodes)",
        result["per_node_us_single"], args.single_runs
    );
    println!(
        "throughput, {} concurrent:  {} durable node steps per second",
        args.runs, result["node_steps_per_s"]
    );
    Ok(())
}
