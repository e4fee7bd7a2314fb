//! `host bench …`: measurements printed as JSON, medians over many samples,
//! with the baseline measured in the same run where a ratio matters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::json;

use super::common::{
    CliResult, DatabaseArgs, Durability, Failure, Globals, print_json, read_json_arg, tokio_runtime,
};
use skillhost_runtime::{CallOptions, PoolConfig, Runtime, RuntimeConfig};

/// The component the runtime benchmark calls: the shipped `echo` skill.
pub const ECHO_COMPONENT: &[u8] = include_bytes!("../../../skills/dist/echo.wasm");

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Fresh-instance call latency, compile time and cached load time.
    Runtime(RuntimeBenchArgs),
    /// Per-node latency of a 10-node scenario, without a store and on SQLite.
    Engine(EngineBenchArgs),
    /// Durable runs on Postgres: one run's per-node latency, and node steps
    /// per second over concurrent runs.
    Postgres(PostgresBenchArgs),
}

#[derive(Debug, Args)]
pub struct EngineBenchArgs {
    /// Runs without a store to time (after warm-up).
    #[arg(long, default_value_t = 2_000)]
    memory_runs: usize,
    /// Durable runs on SQLite to time.
    #[arg(long, default_value_t = 200)]
    sqlite_runs: usize,
    /// Print JSON only.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct RuntimeBenchArgs {
    /// Calls to time (after 10% as many warm-up calls).
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// Compilations and cached loads to time.
    #[arg(long, default_value_t = 7)]
    loads: usize,
    /// Benchmark this component instead of the embedded `echo` skill.
    #[arg(long, value_name = "WASM", requires = "input")]
    component: Option<std::path::PathBuf>,
    /// The input for `--component`: inline JSON or @FILE.
    #[arg(long, value_name = "JSON|@FILE")]
    input: Option<String>,
    /// Print JSON only.
    #[arg(long)]
    json: bool,
}

pub fn run(command: BenchCommand, _globals: &Globals) -> CliResult {
    match command {
        BenchCommand::Runtime(args) => runtime_bench(args),
        BenchCommand::Engine(args) => engine_bench(args),
        BenchCommand::Postgres(args) => postgres_bench(args),
    }
}

/// The ~100-byte record the benchmark passes.
pub fn echo_input() -> serde_json::Value {
    json!({
        "message": "The quick brown fox jumps over the lazy dog, then checks its citations twice.",
        "repeat": 1
    })
}

fn runtime_bench(args: RuntimeBenchArgs) -> CliResult {
    if args.calls == 0 || args.loads == 0 {
        return Err(Failure::bad_input("--calls and --loads must be at least 1"));
    }
    let cache = tempfile::tempdir()
        .map_err(|e| Failure::environment(format!("cannot create a temporary cache: {e}")))?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        pool: PoolConfig::default(),
    })
    .map_err(|e| Failure::environment(format!("{e:#}")))?;

    let (component, input): (Vec<u8>, serde_json::Value) = match (&args.component, &args.input) {
        (Some(path), Some(input)) => (
            std::fs::read(path).map_err(|e| {
                Failure::bad_input(format!("cannot read component `{}`: {e}", path.display()))
            })?,
            read_json_arg(input)?,
        ),
        _ => (ECHO_COMPONENT.to_vec(), echo_input()),
    };
    let compile = median(
        (0..args.loads)
            .map(|_| runtime.compile_uncached(&component))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Failure::environment)?,
    );
    // The first load compiles and writes the cache entry; the rest read it.
    runtime
        .load_from_cache(&component)
        .map_err(Failure::environment)?;
    let cached = median(
        (0..args.loads)
            .map(|_| runtime.load_from_cache(&component).map(|s| s.elapsed))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Failure::environment)?,
    );

    let component_bytes = component.len();
    let skill = runtime
        .load_bytes(component, "benchmark.wasm")
        .map_err(Failure::bad_input)?;
    let options = CallOptions::default();
    let input_bytes = serde_json::to_vec(&input).map(|v| v.len()).unwrap_or(0);
    for _ in 0..args.calls / 10 + 1 {
        skill
            .call(&input, &options)
            .into_result()
            .map_err(Failure::failed)?;
    }
    let mut samples = Vec::with_capacity(args.calls);
    for _ in 0..args.calls {
        let start = Instant::now();
        let report = skill.call(&input, &options);
        samples.push(start.elapsed());
        report.into_result().map_err(Failure::failed)?;
    }
    let fresh = median(samples);

    let compile_ms = compile.as_secs_f64() * 1e3;
    let cached_ms = cached.as_secs_f64() * 1e3;
    let result = json!({
        "fresh_call_us": round(fresh.as_secs_f64() * 1e6, 2),
        "compile_ms": round(compile_ms, 3),
        "cached_load_ms": round(cached_ms, 3),
        "cache_speedup": round(compile_ms / cached_ms.max(1e-9), 1),
        "calls": args.calls,
        "input_bytes": input_bytes,
        "component_bytes": component_bytes,
        "skill": skill.name,
    });
    if args.json {
        return print_json(&result);
    }
    println!(
        "fresh instance + call: {:.2} µs median over {} calls ({} byte input)",
        fresh.as_secs_f64() * 1e6,
        args.calls,
        input_bytes
    );
    println!("compile:              {compile_ms:.3} ms median");
    println!(
        "load from cache:      {cached_ms:.3} ms median ({:.1}x faster than compiling)",
        compile_ms / cached_ms.max(1e-9)
    );
    Ok(())
}

pub(super) fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

pub(super) fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// Nodes in the engine benchmark's linear scenario.
pub(super) const ENGINE_NODES: usize = 10;

/// A 10-node linear scenario of `echo` calls whose state holds 20 records of
/// about 300 bytes; each node changes one small field.
pub(super) fn engine_scenario(echo: &std::path::Path) -> String {
    let mut toml = String::from(
        "[scenario]\nname = \"bench\"\nversion = \"1\"\ndescription = \"engine benchmark\"\n\n\
         [state]\nlast = { type = \"string\" }\nrecords = { type = \"array\", default = [\n",
    );
    for i in 0..20 {
        toml.push_str(&format!(
            "  {{ id = \"rec-{i:02}\", title = \"Record {i} of the benchmark state\", \
             body = \"{}\", tags = [\"bench\", \"state\", \"record\"] }},\n",
            "lorem ipsum dolor sit amet ".repeat(8).trim_end()
        ));
    }
    toml.push_str("] }\n\n");
    toml.push_str(&format!(
        "[skills.echo]\ncomponent = {:?}\n\n",
        echo.display().to_string()
    ));
    for i in 0..ENGINE_NODES {
        toml.push_str(&format!(
            "[[node]]\nid = \"n{i}\"\nskill = \"echo\"\n\
             input = {{ message = \"state.records[{i}].title\", repeat = \"1\" }}\n\
             writes = [{{ field = \"last\", from = \"output.message\" }}]\n\n"
        ));
    }
    toml.push_str("[[node]]\nid = \"done\"\nkind = \"end\"\n\n");
    for i in 0..ENGINE_NODES {
        let to = if i + 1 == ENGINE_NODES {
            "done".to_string()
        } else {
            format!("n{}", i + 1)
        };
        toml.push_str(&format!("[[edge]]\nfrom = \"n{i}\"\nto = \"{to}\"\n\n"));
    }
    toml
}

fn engine_bench(args: EngineBenchArgs) -> CliResult {
    use skillhost_engine::{Engine, NoEvents};
    if args.memory_runs == 0 || args.sqlite_runs == 0 {
        return Err(Failure::bad_input(
            "--memory-runs and --sqlite-runs must be at least 1",
        ));
    }
    let dir = tempfile::tempdir()
        .map_err(|e| Failure::environment(format!("cannot create a temporary directory: {e}")))?;
    let echo = dir.path().join("echo.wasm");
    let scenario_path = dir.path().join("bench.toml");
    std::fs::write(&echo, ECHO_COMPONENT)
        .and_then(|()| std::fs::write(&scenario_path, engine_scenario(&echo)))
        .map_err(|e| Failure::environment(format!("cannot write the benchmark scenario: {e}")))?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().join("cache")),
        pool: PoolConfig::default(),
    })
    .map_err(|e| Failure::environment(format!("{e:#}")))?;
    let loaded = skillhost_scenario::load(&scenario_path, &runtime)
        .map_err(|report| Failure::environment(format!("benchmark scenario: {report}")))?;
    let rt = tokio_runtime()?;
    let db_url = format!("sqlite://{}", dir.path().join("bench.db").display());

    let result = rt.block_on(async {
        let input = json!({});
        let memory = Engine::new(None, Arc::new(NoEvents));
        for _ in 0..args.memory_runs / 10 + 1 {
            memory
                .start(&loaded, input.clone(), None)
                .await
                .map_err(Failure::failed)?;
        }
        let mut samples = Vec::with_capacity(args.memory_runs);
        for _ in 0..args.memory_runs {
            let start = Instant::now();
            memory
                .start(&loaded, input.clone(), None)
                .await
                .map_err(Failure::failed)?;
            samples.push(start.elapsed());
        }
        let per_node_memory = median(samples) / ENGINE_NODES as u32;

        // The same call the nodes make, alone: what the engine adds per node
        // is the difference.
        let echo = loaded
            .skills
            .get("echo")
            .ok_or_else(|| Failure::environment("the benchmark scenario has no `echo` skill"))?;
        let node_input = json!({ "message": "Record 3 of the benchmark state", "repeat": 1 });
        let options = CallOptions::default();
        let mut samples = Vec::with_capacity(args.memory_runs * ENGINE_NODES);
        for _ in 0..args.memory_runs * ENGINE_NODES {
            let start = Instant::now();
            let report = echo.call(&node_input, &options);
            samples.push(start.elapsed());
            report.into_result().map_err(Failure::failed)?;
        }
        let call = median(samples);

        let options = skillhost_store::StoreOptions {
            sync: skillhost_store::SyncMode::Normal,
        };
        let store = skillhost_store::Store::open_with(&db_url, options)
            .await
            .map_err(|e| Failure::environment(e.to_string()))?;
        let durable = Engine::new(Some(store), Arc::new(NoEvents));
        let mut samples = Vec::with_capacity(args.sqlite_runs);
        let mut last_run = String::new();
        for i in 0..args.sqlite_runs + 5 {
            let start = Instant::now();
            let outcome = durable
                .start(&loaded, input.clone(), None)
                .await
                .map_err(Failure::failed)?;
            if i >= 5 {
                samples.push(start.elapsed());
            }
            last_run = outcome.run_id;
        }
        let per_node_sqlite = median(samples) / ENGINE_NODES as u32;
        let Some(store) = durable.store() else {
            return Err(Failure::environment("the durable engine has no store"));
        };
        let checkpoints = store
            .checkpoints(&last_run)
            .await
            .map_err(|e| Failure::environment(e.to_string()))?;
        let node_checkpoints: Vec<_> = checkpoints.iter().filter(|c| c.seq > 0).collect();
        let delta_bytes = node_checkpoints.iter().map(|c| c.bytes).sum::<u64>() as f64
            / node_checkpoints.len().max(1) as f64;
        let full_state = store
            .latest_state(&last_run)
            .await
            .map_err(|e| Failure::environment(e.to_string()))?
            .map(|c| serde_json::to_vec(&c.state).map(|v| v.len()).unwrap_or(0))
            .unwrap_or(0) as f64;
        Ok::<_, Failure>(json!({
            "nodes": ENGINE_NODES,
            "per_node_us_memory": round(per_node_memory.as_secs_f64() * 1e6, 2),
            "per_node_us_sqlite": round(per_node_sqlite.as_secs_f64() * 1e6, 2),
            "call_us": round(call.as_secs_f64() * 1e6, 2),
            "engine_us_memory": round(
                (per_node_memory.as_secs_f64() - call.as_secs_f64()) * 1e6,
                2
            ),
            "checkpoint_bytes_per_node": round(delta_bytes, 1),
            "full_state_bytes": full_state,
            "full_state_over_checkpoint": round(full_state / delta_bytes.max(1.0), 1),
            "memory_runs": args.memory_runs,
            "sqlite_runs": args.sqlite_runs,
        }))
    })?;
    if args.json {
        return print_json(&result);
    }
    println!(
        "per node, no store:      {} µs median over {} runs of {ENGINE_NODES} nodes",
        result["per_node_us_memory"], args.memory_runs
    );
    println!(
        "  of which the call:     {} µs median (the engine adds {} µs)",
        result["call_us"], result["engine_us_memory"]
    );
    println!(
        "per node, SQLite:        {} µs median over {} runs",
        result["per_node_us_sqlite"], args.sqlite_runs
    );
    println!(
        "checkpoint per node:     {} bytes (full state {} bytes: {}x smaller)",
        result["checkpoint_bytes_per_node"],
        result["full_state_bytes"],
        result["full_state_over_checkpoint"]
    );
    Ok(())
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
