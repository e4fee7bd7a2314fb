//! The engine's benchmarks, shared by `host bench engine|postgres` and
//! `cargo bench -p skillhost-engine`: a 10-node linear scenario of `echo`
//! calls whose state holds 20 records of about 300 bytes ([`BenchScenario`]),
//! run without a store and on SQLite ([`engine`]: the per-node time, the
//! call alone as its baseline, the checkpoint bytes per node against the
//! full state), and durably on Postgres ([`postgres`]: one run's per-node
//! latency and node steps per second over concurrent runs).
//!
//! Owns: the benchmark scenario, what is measured and how, and the figures
//! as JSON and as lines for people. Must not: find files or parse flags
//! (callers pass the `echo` component's bytes and an open Postgres store),
//! print, or read anything outside this crate at compile time.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use skillhost_runtime::bench::{BenchError, median, round};
use skillhost_runtime::{CallOptions, PoolConfig, Runtime, RuntimeConfig};
use skillhost_scenario::LoadedScenario;
use skillhost_store::{Store, StoreOptions, SyncMode};

use crate::{Engine, EngineError, NoEvents, RunOutcome};

/// Nodes in the benchmark scenario (each one an `echo` call).
pub const ENGINE_NODES: usize = 10;

/// The benchmark scenario's TOML: [`ENGINE_NODES`] nodes in a line, each
/// calling the component at `echo` with one record's title and writing the
/// echoed message to one small field, over a state of 20 records of about
/// 300 bytes.
pub fn engine_scenario(echo: &Path) -> String {
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

/// The benchmark scenario, loaded: the `echo` component and the scenario
/// file in a temporary directory (with the component cache and, for
/// [`engine`], the SQLite database), on a runtime of its own.
pub struct BenchScenario {
    loaded: Arc<LoadedScenario>,
    runtime: Runtime,
    // Declared last: dropped after the runtime and scenario that use it.
    dir: tempfile::TempDir,
}

impl BenchScenario {
    /// Writes `echo` (the `echo` skill's component bytes) and the scenario
    /// into a temporary directory and loads them.
    pub fn new(echo: &[u8]) -> Result<BenchScenario, BenchError> {
        let dir = tempfile::tempdir().map_err(|e| {
            BenchError::Environment(format!("cannot create a temporary directory: {e}"))
        })?;
        let echo_path = dir.path().join("echo.wasm");
        let scenario_path = dir.path().join("bench.toml");
        std::fs::write(&echo_path, echo)
            .and_then(|()| std::fs::write(&scenario_path, engine_scenario(&echo_path)))
            .map_err(|e| {
                BenchError::Environment(format!("cannot write the benchmark scenario: {e}"))
            })?;
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(dir.path().join("cache")),
            pool: PoolConfig::default(),
            ..RuntimeConfig::default()
        })
        .map_err(|e| BenchError::Environment(format!("{e:#}")))?;
        let loaded = skillhost_scenario::load(&scenario_path, &runtime)
            .map_err(|report| BenchError::Environment(format!("benchmark scenario: {report}")))?;
        Ok(BenchScenario {
            loaded: Arc::new(loaded),
            runtime,
            dir,
        })
    }

    pub fn loaded(&self) -> &Arc<LoadedScenario> {
        &self.loaded
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The temporary directory the scenario lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// What is timed per run: one run of the scenario, start to end, on
    /// `engine`.
    pub async fn run(&self, engine: &Engine) -> Result<RunOutcome, EngineError> {
        engine.start(&self.loaded, json!({}), None).await
    }
}

fn failed(e: impl fmt::Display) -> BenchError {
    BenchError::Failed(e.to_string())
}

fn environment(e: impl fmt::Display) -> BenchError {
    BenchError::Environment(e.to_string())
}

/// How much the engine benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineBenchSettings {
    /// Runs without a store to time, after 10% as many warm-up runs; the
    /// call baseline times ten times as many calls.
    pub memory_runs: usize,
    /// Durable runs on SQLite to time, after 5 warm-up runs.
    pub sqlite_runs: usize,
}

impl Default for EngineBenchSettings {
    fn default() -> Self {
        EngineBenchSettings {
            memory_runs: 2_000,
            sqlite_runs: 200,
        }
    }
}

/// Runs the scenario without a store and durably on SQLite (`synchronous =
/// NORMAL`, in the scenario's directory), and the nodes' call alone as the
/// baseline in the same run.
pub async fn engine(
    scenario: &BenchScenario,
    settings: EngineBenchSettings,
) -> Result<EngineFigures, BenchError> {
    if settings.memory_runs == 0 || settings.sqlite_runs == 0 {
        return Err(BenchError::Input(
            "the engine benchmark needs at least one run without a store and one on SQLite".into(),
        ));
    }
    let memory = Engine::new(None, Arc::new(NoEvents));
    for _ in 0..settings.memory_runs / 10 + 1 {
        scenario.run(&memory).await.map_err(failed)?;
    }
    let mut samples = Vec::with_capacity(settings.memory_runs);
    for _ in 0..settings.memory_runs {
        let start = Instant::now();
        scenario.run(&memory).await.map_err(failed)?;
        samples.push(start.elapsed());
    }
    let per_node_memory = median(samples) / ENGINE_NODES as u32;

    // The same call the nodes make, alone: what the engine adds per node
    // is the difference.
    let echo = scenario
        .loaded
        .skills
        .get("echo")
        .ok_or_else(|| environment("the benchmark scenario has no `echo` skill"))?;
    let node_input = json!({ "message": "Record 3 of the benchmark state", "repeat": 1 });
    let options = CallOptions::default();
    let mut samples = Vec::with_capacity(settings.memory_runs * ENGINE_NODES);
    for _ in 0..settings.memory_runs * ENGINE_NODES {
        let start = Instant::now();
        let report = echo.call(&node_input, &options);
        samples.push(start.elapsed());
        report.into_result().map_err(failed)?;
    }
    let call = median(samples);

    let db_url = format!("sqlite://{}", scenario.dir().join("bench.db").display());
    let options = StoreOptions {
        sync: SyncMode::Normal,
    };
    let store = Store::open_with(&db_url, options)
        .await
        .map_err(environment)?;
    let durable = Engine::new(Some(store.clone()), Arc::new(NoEvents));
    let mut samples = Vec::with_capacity(settings.sqlite_runs);
    let mut last_run = String::new();
    for i in 0..settings.sqlite_runs + 5 {
        let start = Instant::now();
        let outcome = scenario.run(&durable).await.map_err(failed)?;
        if i >= 5 {
            samples.push(start.elapsed());
        }
        last_run = outcome.run_id;
    }
    let per_node_sqlite = median(samples) / ENGINE_NODES as u32;

    let checkpoints = store.checkpoints(&last_run).await.map_err(environment)?;
    let node_checkpoints: Vec<_> = checkpoints.iter().filter(|c| c.seq > 0).collect();
    let checkpoint_bytes = node_checkpoints.iter().map(|c| c.bytes).sum::<u64>() as f64
        / node_checkpoints.len().max(1) as f64;
    let full_state = store
        .latest_state(&last_run)
        .await
        .map_err(environment)?
        .map(|c| serde_json::to_vec(&c.state).map(|v| v.len()).unwrap_or(0))
        .unwrap_or(0) as f64;
    Ok(EngineFigures {
        per_node_memory,
        per_node_sqlite,
        call,
        checkpoint_bytes_per_node: checkpoint_bytes,
        full_state_bytes: full_state,
        memory_runs: settings.memory_runs,
        sqlite_runs: settings.sqlite_runs,
    })
}

/// What the engine benchmark measured (medians).
#[derive(Debug, Clone, PartialEq)]
pub struct EngineFigures {
    /// A node of a run without a store (the run's time over its nodes).
    pub per_node_memory: Duration,
    /// A node of a durable run on SQLite.
    pub per_node_sqlite: Duration,
    /// The nodes' call alone: a fresh instance of `echo` and one call.
    pub call: Duration,
    /// The mean size of the last run's checkpoints after checkpoint 0.
    pub checkpoint_bytes_per_node: f64,
    /// The size of the last run's final state as JSON.
    pub full_state_bytes: f64,
    pub memory_runs: usize,
    pub sqlite_runs: usize,
}

impl EngineFigures {
    /// The figures as `host bench engine --json` prints them.
    pub fn to_json(&self) -> Value {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        json!({
            "nodes": ENGINE_NODES,
            "per_node_us_memory": round(us(self.per_node_memory), 2),
            "per_node_us_sqlite": round(us(self.per_node_sqlite), 2),
            "call_us": round(us(self.call), 2),
            "engine_us_memory": round(
                (self.per_node_memory.as_secs_f64() - self.call.as_secs_f64()) * 1e6,
                2
            ),
            "checkpoint_bytes_per_node": round(self.checkpoint_bytes_per_node, 1),
            "full_state_bytes": self.full_state_bytes,
            "full_state_over_checkpoint": round(
                self.full_state_bytes / self.checkpoint_bytes_per_node.max(1.0),
                1
            ),
            "memory_runs": self.memory_runs,
            "sqlite_runs": self.sqlite_runs,
        })
    }
}

/// The figures as lines for people (numbers as in the JSON).
impl fmt::Display for EngineFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let figures = self.to_json();
        writeln!(
            f,
            "per node, no store:      {} µs median over {} runs of {ENGINE_NODES} nodes",
            figures["per_node_us_memory"], self.memory_runs
        )?;
        writeln!(
            f,
            "  of which the call:     {} µs median (the engine adds {} µs)",
            figures["call_us"], figures["engine_us_memory"]
        )?;
        writeln!(
            f,
            "per node, SQLite:        {} µs median over {} runs",
            figures["per_node_us_sqlite"], self.sqlite_runs
        )?;
        write!(
            f,
            "checkpoint per node:     {} bytes (full state {} bytes: {}x smaller)",
            figures["checkpoint_bytes_per_node"],
            figures["full_state_bytes"],
            figures["full_state_over_checkpoint"]
        )
    }
}

/// How much the Postgres benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostgresBenchSettings {
    /// Runs in flight at once for the throughput figure.
    pub runs: usize,
    /// Runs to time for the throughput figure, in multiples of `runs`
    /// (after one untimed round).
    pub rounds: usize,
    /// Single runs to time for the per-node latency (after 5 warm-up runs).
    pub single_runs: usize,
}

impl Default for PostgresBenchSettings {
    fn default() -> Self {
        PostgresBenchSettings {
            runs: 32,
            rounds: 20,
            single_runs: 40,
        }
    }
}

/// Runs the scenario durably on `store` (a Postgres database, opened with
/// `sync`, which the figures report as `synchronous_commit`): one run at a
/// time for the per-node latency, then `runs` in flight, starting the next as
/// soon as one ends, for the node steps per second. The runs are left in the
/// database (scenario `bench`); the store is closed at the end.
pub async fn postgres(
    scenario: &BenchScenario,
    store: Store,
    sync: SyncMode,
    settings: PostgresBenchSettings,
) -> Result<PostgresFigures, BenchError> {
    if settings.runs == 0 || settings.rounds == 0 || settings.single_runs == 0 {
        return Err(BenchError::Input(
            "the Postgres benchmark needs at least one run, one round and one single run".into(),
        ));
    }
    let engine = Arc::new(Engine::new(Some(store.clone()), Arc::new(NoEvents)));

    let mut samples = Vec::with_capacity(settings.single_runs);
    for i in 0..settings.single_runs + 5 {
        let start = Instant::now();
        scenario.run(&engine).await.map_err(failed)?;
        if i >= 5 {
            samples.push(start.elapsed());
        }
    }
    let per_node_single = median(samples) / ENGINE_NODES as u32;

    // One untimed round opens the pool's connections and prepares the
    // statements on each; then `runs` stay in flight until the timed
    // total is done, with no barrier between rounds.
    let concurrent = |total: usize| {
        let remaining = Arc::new(AtomicUsize::new(total));
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..settings.runs {
            let (engine, loaded) = (engine.clone(), scenario.loaded.clone());
            let remaining = remaining.clone();
            tasks.spawn(async move {
                while remaining
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
                {
                    engine.start(&loaded, json!({}), None).await?;
                }
                Ok::<_, EngineError>(())
            });
        }
        async move {
            while let Some(done) = tasks.join_next().await {
                done.map_err(failed)?.map_err(failed)?;
            }
            Ok::<_, BenchError>(())
        }
    };
    concurrent(settings.runs).await?;
    let started = Instant::now();
    concurrent(settings.runs * settings.rounds).await?;
    let elapsed = started.elapsed();
    let steps = (settings.runs * settings.rounds * ENGINE_NODES) as f64;
    store.close().await;
    Ok(PostgresFigures {
        per_node_single,
        node_steps_per_s: steps / elapsed.as_secs_f64(),
        synchronous_commit: sync == SyncMode::Full,
        database: store.url_for_display(),
        settings,
    })
}

/// What the Postgres benchmark measured.
#[derive(Debug, Clone, PartialEq)]
pub struct PostgresFigures {
    /// A node of one durable run at a time (median).
    pub per_node_single: Duration,
    /// Durable node steps per second with `settings.runs` in flight.
    pub node_steps_per_s: f64,
    /// Whether each checkpoint was on the server's disk before the next node.
    pub synchronous_commit: bool,
    /// The database, its password replaced by `***`.
    pub database: String,
    pub settings: PostgresBenchSettings,
}

impl PostgresFigures {
    /// The figures as `host bench postgres --json` prints them.
    pub fn to_json(&self) -> Value {
        json!({
            "runs": self.settings.runs,
            "nodes": ENGINE_NODES,
            "per_node_us_single": round(self.per_node_single.as_secs_f64() * 1e6, 1),
            "node_steps_per_s": round(self.node_steps_per_s, 0),
            "rounds": self.settings.rounds,
            "synchronous_commit": if self.synchronous_commit { "on" } else { "off" },
            "single_runs": self.settings.single_runs,
            "database": self.database,
        })
    }
}

/// The figures as lines for people (numbers as in the JSON).
impl fmt::Display for PostgresFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let figures = self.to_json();
        writeln!(
            f,
            "per node, one durable run:  {} µs (median over {} runs of {ENGINE_NODES} nodes)",
            figures["per_node_us_single"], self.settings.single_runs
        )?;
        write!(
            f,
            "throughput, {} concurrent:  {} durable node steps per second",
            self.settings.runs, figures["node_steps_per_s"]
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys and lines `host bench engine` has always printed, and the
    /// numbers printed as in the JSON (`6400.0`, not `6400`).
    #[test]
    fn engine_figures_print_as_json_and_lines() {
        let figures = EngineFigures {
            per_node_memory: Duration::from_nanos(14_500),
            per_node_sqlite: Duration::from_nanos(40_250),
            call: Duration::from_nanos(10_000),
            checkpoint_bytes_per_node: 160.0,
            full_state_bytes: 6400.0,
            memory_runs: 3,
            sqlite_runs: 2,
        };
        assert_eq!(
            figures.to_json().to_string(),
            r#"{"nodes":10,"per_node_us_memory":14.5,"per_node_us_sqlite":40.25,"call_us":10.0,"engine_us_memory":4.5,"checkpoint_bytes_per_node":160.0,"full_state_bytes":6400.0,"full_state_over_checkpoint":40.0,"memory_runs":3,"sqlite_runs":2}"#
        );
        assert_eq!(
            figures.to_string(),
            "per node, no store:      14.5 µs median over 3 runs of 10 nodes\n  \
             of which the call:     10.0 µs median (the engine adds 4.5 µs)\n\
             per node, SQLite:        40.25 µs median over 2 runs\n\
             checkpoint per node:     160.0 bytes (full state 6400.0 bytes: 40.0x smaller)"
        );
    }

    #[test]
    fn postgres_figures_print_as_json_and_lines() {
        let figures = PostgresFigures {
            per_node_single: Duration::from_nanos(619_040),
            node_steps_per_s: 5291.4,
            synchronous_commit: true,
            database: "postgres://bench:***@db/bench".into(),
            settings: PostgresBenchSettings::default(),
        };
        assert_eq!(
            figures.to_json().to_string(),
            r#"{"runs":32,"nodes":10,"per_node_us_single":619.0,"node_steps_per_s":5291.0,"rounds":20,"synchronous_commit":"on","single_runs":40,"database":"postgres://bench:***@db/bench"}"#
        );
        assert_eq!(
            figures.to_string(),
            "per node, one durable run:  619.0 µs (median over 40 runs of 10 nodes)\n\
             throughput, 32 concurrent:  5291.0 durable node steps per second"
        );
    }

    /// The benchmark on the shipped `echo` skill, a few runs of each kind:
    /// every figure is measured, and the checkpoints are deltas smaller than
    /// the state.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_engine_benchmark_measures_every_figure() {
        // Read at run time from the repository (the crate builds on its own).
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../skills/dist/echo.wasm");
        let echo = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let scenario = BenchScenario::new(&echo).expect("the benchmark scenario loads");
        assert_eq!(scenario.loaded().scenario.name, "bench");
        let settings = EngineBenchSettings {
            memory_runs: 2,
            sqlite_runs: 1,
        };
        let figures = engine(&scenario, settings)
            .await
            .expect("the benchmark runs");
        for (name, time) in [
            ("per node without a store", figures.per_node_memory),
            ("per node on SQLite", figures.per_node_sqlite),
            ("call", figures.call),
        ] {
            assert!(time > Duration::ZERO, "{name}: {figures:?}");
        }
        assert!(
            figures.checkpoint_bytes_per_node > 0.0
                && figures.full_state_bytes > 10.0 * figures.checkpoint_bytes_per_node,
            "{figures:?}"
        );
        let zero = EngineBenchSettings {
            memory_runs: 0,
            sqlite_runs: 1,
        };
        assert!(matches!(
            engine(&scenario, zero).await,
            Err(BenchError::Input(_))
        ));
    }
}
