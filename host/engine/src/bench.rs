//! The engine's benchmarks, shared by `host bench engine|postgres` and
//! `cargo bench -p skillhost-engine`: a 10-node linear scenario of `echo`
//! calls whose state holds 20 records of about 300 bytes ([`BenchScenario`]),
//! run without a store and on SQLite ([`engine`]: the per-node time, the
//! call alone as its baseline, the checkpoint bytes per node against the
//! full state, the checkpoint bytes of a 500-step appending loop against its
//! deltas plus its final state ([`loop_scenario`]), and optionally the
//! per-node time with an fsync per checkpoint against one `fdatasync` on the
//! same disk), and durably on Postgres ([`postgres`]: one run's per-node
//! latency and node steps per second over concurrent runs; [`claims`]:
//! many workers claiming a queue with concurrency keys, a limit and
//! priorities, timed and checked for isolation, in `bench/claims.rs`).
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

mod claims;
pub use claims::{ClaimsFigures, ClaimsSettings, claims};

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

/// Steps of the loop scenario ([`loop_scenario`]).
pub const LOOP_STEPS: usize = 500;

/// A gate that appends about 100 bytes to the state and loops back,
/// [`LOOP_STEPS`] times: what the checkpoints of a long run that grows
/// its state cost in bytes.
pub fn loop_scenario() -> String {
    format!(
        "[scenario]\nname = \"bench-loop\"\nversion = \"1\"\n\
         description = \"a loop appending to the state\"\n\n\
         [state]\nlog = {{ type = \"array\" }}\nround = {{ type = \"integer\", default = 0 }}\n\n\
         [[node]]\nid = \"step\"\nkind = \"gate\"\nmax_visits = {LOOP_STEPS}\n\
         writes = [\n  {{ field = \"log\", reducer = \"append\", \
         from = \"'entry ' + string(state.round) + ': {}'\" }},\n  \
         {{ field = \"round\", from = \"state.round + 1\" }},\n]\n\n\
         [[node]]\nid = \"done\"\nkind = \"end\"\n\n\
         [[edge]]\nfrom = \"step\"\nbranches = [{{ when = \"state.round < {LOOP_STEPS}\", \
         to = \"step\" }}, {{ else = \"done\" }}]\n",
        "x".repeat(88)
    )
}

/// The benchmark scenario, loaded: the `echo` component and the scenario
/// file in a temporary directory (with the component cache and, for
/// [`engine`], the SQLite database), on a runtime of its own.
pub struct BenchScenario {
    loaded: Arc<LoadedScenario>,
    /// [`loop_scenario`], loaded.
    looping: Arc<LoadedScenario>,
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
        let loop_path = dir.path().join("bench-loop.toml");
        std::fs::write(&echo_path, echo)
            .and_then(|()| std::fs::write(&scenario_path, engine_scenario(&echo_path)))
            .and_then(|()| std::fs::write(&loop_path, loop_scenario()))
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
        let looping = skillhost_scenario::load(&loop_path, &runtime).map_err(|report| {
            BenchError::Environment(format!("benchmark loop scenario: {report}"))
        })?;
        Ok(BenchScenario {
            loaded: Arc::new(loaded),
            looping: Arc::new(looping),
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
    /// Runs on SQLite with an fsync per checkpoint ([`SyncMode::Full`])
    /// to time, after 2 warm-up runs, against as many `fdatasync`s of one
    /// page on the same disk; None measures neither.
    pub full_runs: Option<usize>,
    /// Runs to time with traces exported and as many without, each way
    /// without a store and on SQLite, in ABBA rounds; None measures
    /// neither.
    pub traced_runs: Option<usize>,
}

impl EngineBenchSettings {
    /// Runs with an fsync per checkpoint when `--durability full` asks for
    /// them: each costs milliseconds on many disks.
    pub const FULL_RUNS: usize = 20;
}

impl Default for EngineBenchSettings {
    fn default() -> Self {
        EngineBenchSettings {
            memory_runs: 2_000,
            sqlite_runs: 200,
            full_runs: None,
            traced_runs: None,
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
    if settings.memory_runs == 0
        || settings.sqlite_runs == 0
        || settings.full_runs == Some(0)
        || settings.traced_runs.is_some_and(|runs| runs < 4)
    {
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
    let looped = loop_bytes(scenario, &durable, &store).await?;
    let traced = match settings.traced_runs {
        Some(runs) => Some(traced(scenario, &memory, &durable, runs).await?),
        None => None,
    };
    store.close().await;
    let full = match settings.full_runs {
        Some(runs) => Some(full_durability(scenario, runs).await?),
        None => None,
    };
    Ok(EngineFigures {
        per_node_memory,
        per_node_sqlite,
        call,
        checkpoint_bytes_per_node: checkpoint_bytes,
        full_state_bytes: full_state,
        memory_runs: settings.memory_runs,
        sqlite_runs: settings.sqlite_runs,
        looped,
        full,
        traced,
    })
}

/// What exporting traces costs per node: runs with spans built and
/// exported against runs without, in ABBA rounds in one process, without
/// a store and on SQLite. Spans go to the collector the process is
/// configured for, else to a local receiver started here
/// ([`SpanSink`]: an HTTP server that reads each export and answers 200).
async fn traced(
    scenario: &BenchScenario,
    memory: &Engine,
    durable: &Engine,
    runs: usize,
) -> Result<Traced, BenchError> {
    let sink = SpanSink::start().map_err(environment)?;
    let config = skillhost_telemetry::TelemetryConfig {
        traces: Some(skillhost_telemetry::TracesConfig {
            endpoint: format!("http://{}/v1/traces", sink.addr),
            protocol: skillhost_telemetry::Protocol::HttpProtobuf,
            headers: Vec::new(),
            timeout: Duration::from_secs(10),
            max_queue: 2048,
            delay: Duration::from_millis(200),
            max_batch: 512,
        }),
        ..skillhost_telemetry::TelemetryConfig::off()
    };
    skillhost_telemetry::install(&config).map_err(environment)?;
    let dropped_before = skillhost_telemetry::spans_dropped();
    let mut figures = Traced {
        runs,
        ..Traced::default()
    };
    for (engine, off, on) in [
        (memory, &mut figures.memory_off, &mut figures.memory_on),
        (durable, &mut figures.sqlite_off, &mut figures.sqlite_on),
    ] {
        let (mut off_samples, mut on_samples) = (Vec::new(), Vec::new());
        // ABBA: off, on, on, off; each a quarter of the runs.
        for exporting in [false, true, true, false] {
            skillhost_telemetry::set_exporting(exporting);
            for _ in 0..runs / 4 {
                let start = Instant::now();
                scenario.run(engine).await.map_err(failed)?;
                match exporting {
                    true => on_samples.push(start.elapsed()),
                    false => off_samples.push(start.elapsed()),
                }
            }
        }
        *off = median(off_samples) / ENGINE_NODES as u32;
        *on = median(on_samples) / ENGINE_NODES as u32;
    }
    skillhost_telemetry::set_exporting(false);
    figures.dropped = skillhost_telemetry::spans_dropped() - dropped_before;
    Ok(figures)
}

/// A local OTLP receiver for the benchmark: reads each HTTP request whole
/// and answers `200` with an empty body, keeping nothing. Not a collector:
/// it stands for one that keeps up.
struct SpanSink {
    addr: std::net::SocketAddr,
}

impl SpanSink {
    fn start() -> std::io::Result<SpanSink> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        std::thread::Builder::new()
            .name("bench-span-sink".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    std::thread::spawn(move || sink_connection(stream));
                }
            })?;
        Ok(SpanSink { addr })
    }
}

/// Answers requests on one connection until it closes.
fn sink_connection(stream: std::net::TcpStream) {
    use std::io::{BufRead, BufReader, Read, Write};
    let mut reader = BufReader::new(match stream.try_clone() {
        Ok(s) => s,
        Err(_) => return,
    });
    let mut writer = stream;
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        if std::io::copy(&mut (&mut reader).take(length as u64), &mut std::io::sink()).is_err() {
            return;
        }
        let answer =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if writer.write_all(answer).is_err() {
            return;
        }
    }
}

/// Per-node medians with traces exported and without.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Traced {
    pub runs: usize,
    pub memory_off: Duration,
    pub memory_on: Duration,
    pub sqlite_off: Duration,
    pub sqlite_on: Duration,
    /// Spans the export queue dropped while they were measured.
    pub dropped: u64,
}

/// Runs [`loop_scenario`] once on `engine` and measures its checkpoints:
/// every row's bytes, the deltas among them (a snapshot's bytes less the
/// state it stores), and the final state.
async fn loop_bytes(
    scenario: &BenchScenario,
    engine: &Engine,
    store: &Store,
) -> Result<LoopBytes, BenchError> {
    let outcome = engine
        .start(&scenario.looping, json!({}), None)
        .await
        .map_err(failed)?;
    let json_len = |state: &Value| serde_json::to_vec(state).map_or(0, |v| v.len() as u64);
    let mut checkpoint_bytes = 0;
    let mut delta_bytes = 0;
    let mut snapshots = 0;
    for row in store
        .checkpoints(&outcome.run_id)
        .await
        .map_err(environment)?
    {
        checkpoint_bytes += row.bytes;
        if !row.is_snapshot {
            delta_bytes += row.bytes;
            continue;
        }
        snapshots += 1;
        let state = store
            .state_at(&outcome.run_id, row.seq)
            .await
            .map_err(environment)?
            .ok_or_else(|| environment(format!("checkpoint {} is gone", row.seq)))?;
        delta_bytes += row.bytes.saturating_sub(json_len(&state.state));
    }
    let final_state = store
        .latest_state(&outcome.run_id)
        .await
        .map_err(environment)?
        .map_or(0, |c| json_len(&c.state));
    Ok(LoopBytes {
        checkpoint_bytes,
        delta_bytes,
        final_state_bytes: final_state,
        snapshots,
    })
}

/// Runs the scenario on SQLite with [`SyncMode::Full`] (a new database in
/// the scenario's directory), one run at a time and then
/// [`FULL_CONCURRENT`] at once, and times `fdatasync` of one page there.
async fn full_durability(
    scenario: &BenchScenario,
    runs: usize,
) -> Result<FullDurability, BenchError> {
    let db_url = format!(
        "sqlite://{}",
        scenario.dir().join("bench-full.db").display()
    );
    let options = StoreOptions {
        sync: SyncMode::Full,
    };
    let store = Store::open_with(&db_url, options)
        .await
        .map_err(environment)?;
    let durable = Arc::new(Engine::new(Some(store.clone()), Arc::new(NoEvents)));
    // The same runs with every node waiting for the sync before it, as a
    // node with effects does: taken in turn with the others (ABAB).
    let strict = Engine::new(Some(store.clone()), Arc::new(NoEvents)).with_run_ahead(false);
    let (mut ahead, mut waiting) = (TimedRuns::default(), TimedRuns::default());
    for i in 0..runs + 2 {
        let warm = i < 2;
        ahead.time(scenario, &durable, &store, warm).await?;
        waiting.time(scenario, &strict, &store, warm).await?;
    }
    let (per_node, wal_fdatasync, wal_syncs_per_node) = ahead.figures();
    let (strict_per_node, _, strict_wal_syncs_per_node) = waiting.figures();
    // Runs in flight together: their commits share syncs (group commit).
    let total = runs.max(FULL_CONCURRENT) * 2;
    let elapsed = in_flight(scenario, &durable, FULL_CONCURRENT, total).await?;
    store.close().await;
    let fdatasync = fdatasync_baseline(scenario.dir(), runs * ENGINE_NODES)?;
    Ok(FullDurability {
        per_node,
        strict_per_node,
        strict_wal_syncs_per_node,
        fdatasync,
        wal_fdatasync,
        wal_syncs_per_node,
        runs,
        concurrent_steps_per_s: (total * ENGINE_NODES) as f64 / elapsed.as_secs_f64(),
    })
}

/// Timed runs of the benchmark scenario on a store with [`SyncMode::Full`]:
/// each run's time, and its WAL syncs (how many, and their mean time).
#[derive(Default)]
struct TimedRuns {
    samples: Vec<Duration>,
    syncs: Vec<(u64, Duration)>,
}

impl TimedRuns {
    /// Runs the scenario once on `engine`, kept unless `warm_up`.
    async fn time(
        &mut self,
        scenario: &BenchScenario,
        engine: &Engine,
        store: &Store,
        warm_up: bool,
    ) -> Result<(), BenchError> {
        let before = store.wal_syncs();
        let start = Instant::now();
        scenario.run(engine).await.map_err(failed)?;
        let elapsed = start.elapsed();
        if warm_up {
            return Ok(());
        }
        self.samples.push(elapsed);
        if let (Some(before), Some(after)) = (before, store.wal_syncs())
            && after.syncs > before.syncs
        {
            let syncs = after.syncs - before.syncs;
            let time = (after.sync_time - before.sync_time) / syncs as u32;
            self.syncs.push((syncs, time));
        }
        Ok(())
    }

    /// A node's time (median), a WAL sync's (each run's mean, median over
    /// the runs), and the WAL syncs per node.
    fn figures(self) -> (Duration, Option<Duration>, f64) {
        let per_node = median(self.samples) / ENGINE_NODES as u32;
        let syncs_per_node = self.syncs.iter().map(|(n, _)| *n as f64).sum::<f64>()
            / (self.syncs.len().max(1) * ENGINE_NODES) as f64;
        let sync =
            (!self.syncs.is_empty()).then(|| median(self.syncs.iter().map(|(_, t)| *t).collect()));
        (per_node, sync, syncs_per_node)
    }
}

/// The median time of writing one 4 KiB page into a file in `dir` and
/// `fdatasync`ing it, `times` times: what one durable commit cannot beat
/// on that disk.
fn fdatasync_baseline(dir: &Path, times: usize) -> Result<Duration, BenchError> {
    use std::io::{Seek, SeekFrom, Write};
    let path = dir.join("fdatasync.bin");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| environment(format!("cannot create {}: {e}", path.display())))?;
    let page = [0x5a_u8; 4096];
    let mut samples = Vec::with_capacity(times);
    for i in 0..times + 5 {
        let start = Instant::now();
        file.seek(SeekFrom::Start(0))
            .and_then(|_| file.write_all(&page))
            .and_then(|()| file.sync_data())
            .map_err(|e| environment(format!("cannot fdatasync {}: {e}", path.display())))?;
        if i >= 5 {
            samples.push(start.elapsed());
        }
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    Ok(median(samples))
}

/// The checkpoints of one run of [`loop_scenario`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopBytes {
    /// All its checkpoints' payload bytes.
    pub checkpoint_bytes: u64,
    /// What its checkpoints would take without any snapshot but seq 0's.
    pub delta_bytes: u64,
    /// Its final state as JSON.
    pub final_state_bytes: u64,
    /// Checkpoints that store the full state (seq 0 included).
    pub snapshots: usize,
}

impl LoopBytes {
    /// Checkpoint bytes over the deltas plus one final state (at most 2).
    pub fn ratio(&self) -> f64 {
        self.checkpoint_bytes as f64 / (self.delta_bytes + self.final_state_bytes).max(1) as f64
    }
}

/// Runs in flight at once for the throughput figure of `--durability full`.
pub const FULL_CONCURRENT: usize = 8;

/// Runs with an fsync per checkpoint, against `fdatasync` on the same disk.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FullDurability {
    /// A node of a run on SQLite with [`SyncMode::Full`] (median): its
    /// nodes have no effects, so each runs while the commit before it
    /// syncs (`ahead.rs`).
    pub per_node: Duration,
    /// The same, with every node waiting for the sync of the commit before
    /// it ([`Engine::with_run_ahead`] off), as a node with effects does.
    pub strict_per_node: Duration,
    /// The WAL's syncs per node of those runs.
    pub strict_wal_syncs_per_node: f64,
    /// One `fdatasync` of a 4 KiB page in the same directory (median).
    pub fdatasync: Duration,
    /// One `fdatasync` of the WAL in those runs: each run's mean, median
    /// over the runs (None if the store did not sync the WAL itself).
    pub wal_fdatasync: Option<Duration>,
    /// The WAL's syncs per node (the run's creation is one more).
    pub wal_syncs_per_node: f64,
    pub runs: usize,
    /// Node steps per second with [`FULL_CONCURRENT`] runs in flight.
    pub concurrent_steps_per_s: f64,
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
    /// The checkpoints of the 500-step loop.
    pub looped: LoopBytes,
    /// With `--durability full`: runs with an fsync per checkpoint.
    pub full: Option<FullDurability>,
    /// With `--traces`: what exporting traces costs per node.
    pub traced: Option<Traced>,
}

impl EngineFigures {
    /// The figures as `host bench engine --json` prints them.
    pub fn to_json(&self) -> Value {
        let us = |d: Duration| d.as_secs_f64() * 1e6;
        let mut figures = json!({
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
        });
        let looped = &self.looped;
        figures["loop_steps"] = json!(LOOP_STEPS);
        figures["loop_checkpoint_bytes"] = json!(looped.checkpoint_bytes);
        figures["loop_delta_bytes"] = json!(looped.delta_bytes);
        figures["loop_final_state_bytes"] = json!(looped.final_state_bytes);
        figures["loop_snapshots"] = json!(looped.snapshots);
        figures["loop_checkpoints_over_deltas_and_state"] = json!(round(looped.ratio(), 2));
        if let Some(full) = &self.full {
            figures["per_node_us_sqlite_full"] = json!(round(us(full.per_node), 2));
            figures["fdatasync_us"] = json!(round(us(full.fdatasync), 2));
            figures["full_over_fdatasync"] = json!(round(
                full.per_node.as_secs_f64() / full.fdatasync.as_secs_f64().max(1e-9),
                2
            ));
            if let Some(wal) = full.wal_fdatasync {
                figures["wal_fdatasync_us"] = json!(round(us(wal), 2));
                figures["wal_fdatasync_over_fdatasync"] = json!(round(
                    wal.as_secs_f64() / full.fdatasync.as_secs_f64().max(1e-9),
                    2
                ));
            }
            figures["wal_syncs_per_node"] = json!(round(full.wal_syncs_per_node, 2));
            figures["per_node_us_sqlite_full_strict"] = json!(round(us(full.strict_per_node), 2));
            figures["full_strict_over_fdatasync"] = json!(round(
                full.strict_per_node.as_secs_f64() / full.fdatasync.as_secs_f64().max(1e-9),
                2
            ));
            figures["wal_syncs_per_node_strict"] = json!(round(full.strict_wal_syncs_per_node, 2));
            figures["full_runs"] = json!(full.runs);
            figures["full_concurrent"] = json!(FULL_CONCURRENT);
            figures["node_steps_per_s_full_concurrent"] =
                json!(round(full.concurrent_steps_per_s, 0));
            figures["full_concurrent_over_one"] = json!(round(
                full.concurrent_steps_per_s * full.per_node.as_secs_f64(),
                2
            ));
        }
        if let Some(traced) = &self.traced {
            let ratio = |on: Duration, off: Duration| {
                round(on.as_secs_f64() / off.as_secs_f64().max(1e-12), 3)
            };
            figures["traced_runs"] = json!(traced.runs);
            figures["per_node_us_memory_untraced"] = json!(round(us(traced.memory_off), 2));
            figures["per_node_us_memory_traced"] = json!(round(us(traced.memory_on), 2));
            figures["traced_over_untraced_memory"] =
                json!(ratio(traced.memory_on, traced.memory_off));
            figures["per_node_us_sqlite_untraced"] = json!(round(us(traced.sqlite_off), 2));
            figures["per_node_us_sqlite_traced"] = json!(round(us(traced.sqlite_on), 2));
            figures["traced_over_untraced_sqlite"] =
                json!(ratio(traced.sqlite_on, traced.sqlite_off));
            figures["traced_spans_dropped"] = json!(traced.dropped);
        }
        figures
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
        )?;
        write!(
            f,
            "\nloop of {LOOP_STEPS} steps:       {} checkpoint bytes for {} bytes of deltas and a \
             final state of {} bytes: {}x ({} snapshots)",
            figures["loop_checkpoint_bytes"],
            figures["loop_delta_bytes"],
            figures["loop_final_state_bytes"],
            figures["loop_checkpoints_over_deltas_and_state"],
            figures["loop_snapshots"]
        )?;
        if let Some(full) = &self.full {
            write!(
                f,
                "\nper node, SQLite FULL:   {} µs median over {} runs (a checkpoint durable before \
                 it is acknowledged)\n\
                 one fdatasync:           {} µs median on the same disk: FULL is {}x\n\
                 FULL, each node waiting: {} µs ({}x), {} WAL syncs per node (as nodes with effects)\n\
                 FULL, {FULL_CONCURRENT} concurrent:      {} node steps per second ({}x one run's)",
                figures["per_node_us_sqlite_full"],
                full.runs,
                figures["fdatasync_us"],
                figures["full_over_fdatasync"],
                figures["per_node_us_sqlite_full_strict"],
                figures["full_strict_over_fdatasync"],
                figures["wal_syncs_per_node_strict"],
                figures["node_steps_per_s_full_concurrent"],
                figures["full_concurrent_over_one"]
            )?;
            if full.wal_fdatasync.is_some() {
                write!(
                    f,
                    "\n  the WAL's fdatasync:   {} µs in those runs ({}x one alone), {} per node",
                    figures["wal_fdatasync_us"],
                    figures["wal_fdatasync_over_fdatasync"],
                    figures["wal_syncs_per_node"]
                )?;
            }
        }
        if let Some(traced) = &self.traced {
            write!(
                f,
                "\ntraces exported, no store: {} µs against {} µs untraced: {}x (ABBA, {} runs each)\n\
                 traces exported, SQLite:   {} µs against {} µs untraced: {}x ({} spans dropped)",
                figures["per_node_us_memory_traced"],
                figures["per_node_us_memory_untraced"],
                figures["traced_over_untraced_memory"],
                traced.runs,
                figures["per_node_us_sqlite_traced"],
                figures["per_node_us_sqlite_untraced"],
                figures["traced_over_untraced_sqlite"],
                traced.dropped
            )?;
        }
        Ok(())
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
    in_flight(scenario, &engine, settings.runs, settings.runs).await?;
    let elapsed = in_flight(
        scenario,
        &engine,
        settings.runs,
        settings.runs * settings.rounds,
    )
    .await?;
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

/// Runs `total` runs of the scenario on `engine` with `runs` in flight,
/// starting the next as soon as one ends; how long they took.
async fn in_flight(
    scenario: &BenchScenario,
    engine: &Arc<Engine>,
    runs: usize,
    total: usize,
) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let remaining = Arc::new(AtomicUsize::new(total));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..runs {
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
    while let Some(done) = tasks.join_next().await {
        done.map_err(failed)?.map_err(failed)?;
    }
    Ok(started.elapsed())
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
            looped: LoopBytes {
                checkpoint_bytes: 250_000,
                delta_bytes: 110_000,
                final_state_bytes: 50_000,
                snapshots: 16,
            },
            full: None,
            traced: None,
        };
        assert_eq!(
            figures.to_json().to_string(),
            r#"{"nodes":10,"per_node_us_memory":14.5,"per_node_us_sqlite":40.25,"call_us":10.0,"engine_us_memory":4.5,"checkpoint_bytes_per_node":160.0,"full_state_bytes":6400.0,"full_state_over_checkpoint":40.0,"memory_runs":3,"sqlite_runs":2,"loop_steps":500,"loop_checkpoint_bytes":250000,"loop_delta_bytes":110000,"loop_final_state_bytes":50000,"loop_snapshots":16,"loop_checkpoints_over_deltas_and_state":1.56}"#
        );
        assert_eq!(
            figures.to_string(),
            "per node, no store:      14.5 µs median over 3 runs of 10 nodes\n  \
             of which the call:     10.0 µs median (the engine adds 4.5 µs)\n\
             per node, SQLite:        40.25 µs median over 2 runs\n\
             checkpoint per node:     160.0 bytes (full state 6400.0 bytes: 40.0x smaller)\n\
             loop of 500 steps:       250000 checkpoint bytes for 110000 bytes of deltas and a \
             final state of 50000 bytes: 1.56x (16 snapshots)"
        );
        let full = EngineFigures {
            full: Some(FullDurability {
                per_node: Duration::from_micros(1_200),
                strict_per_node: Duration::from_micros(2_500),
                strict_wal_syncs_per_node: 1.1,
                fdatasync: Duration::from_micros(1_000),
                wal_fdatasync: Some(Duration::from_micros(1_100)),
                wal_syncs_per_node: 1.1,
                runs: 20,
                concurrent_steps_per_s: 1_250.4,
            }),
            ..figures
        };
        let json = full.to_json();
        assert_eq!(
            (
                &json["per_node_us_sqlite_full"],
                &json["fdatasync_us"],
                &json["full_over_fdatasync"],
                &json["full_runs"],
                &json["node_steps_per_s_full_concurrent"],
                &json["full_concurrent_over_one"],
                &json["wal_fdatasync_us"],
                &json["wal_fdatasync_over_fdatasync"],
                &json["wal_syncs_per_node"],
                &json["per_node_us_sqlite_full_strict"],
                &json["full_strict_over_fdatasync"],
                &json["wal_syncs_per_node_strict"],
            ),
            (
                &json!(1200.0),
                &json!(1000.0),
                &json!(1.2),
                &json!(20),
                &json!(1250.0),
                &json!(1.5),
                &json!(1100.0),
                &json!(1.1),
                &json!(1.1),
                &json!(2500.0),
                &json!(2.5),
                &json!(1.1)
            )
        );
        assert!(full.to_string().ends_with(
            "per node, SQLite FULL:   1200.0 µs median over 20 runs (a checkpoint durable before \
             it is acknowledged)\n\
             one fdatasync:           1000.0 µs median on the same disk: FULL is 1.2x\n\
             FULL, each node waiting: 2500.0 µs (2.5x), 1.1 WAL syncs per node (as nodes with \
             effects)\n\
             FULL, 8 concurrent:      1250.0 node steps per second (1.5x one run's)\n  \
             the WAL's fdatasync:   1100.0 µs in those runs (1.1x one alone), 1.1 per node"
        ));
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
            full_runs: Some(1),
            traced_runs: Some(4),
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
        // The loop's checkpoints grow with what changed.
        assert!(figures.looped.ratio() <= 2.0, "{figures:?}");
        assert!(figures.looped.snapshots > 1, "{figures:?}");
        let full = figures.full.expect("measured with full_runs");
        assert!(full.per_node > Duration::ZERO && full.fdatasync > Duration::ZERO);
        // The store synced the WAL itself. Each node waiting: the run's
        // creation and each node (the last one's commit carries the run's
        // end), and no more. Running ahead: no more than that, and at least
        // the creation and the end; how many commits a sync covers depends
        // on the disk's speed against the nodes'.
        assert!(
            full.wal_fdatasync.is_some_and(|t| t > Duration::ZERO),
            "{full:?}"
        );
        assert!(
            (0.9..=1.2).contains(&full.strict_wal_syncs_per_node),
            "{full:?}"
        );
        assert!((0.2..=1.2).contains(&full.wal_syncs_per_node), "{full:?}");
        assert!(full.strict_per_node > Duration::ZERO, "{full:?}");
        // Traces exported and not, each way, to the local receiver.
        let traced = figures.traced.expect("measured with traced_runs");
        for time in [
            traced.memory_off,
            traced.memory_on,
            traced.sqlite_off,
            traced.sqlite_on,
        ] {
            assert!(time > Duration::ZERO, "{traced:?}");
        }
        assert!(!skillhost_telemetry::enabled(), "left exporting");
        let zero = EngineBenchSettings {
            memory_runs: 0,
            sqlite_runs: 1,
            full_runs: None,
            traced_runs: None,
        };
        assert!(matches!(
            engine(&scenario, zero).await,
            Err(BenchError::Input(_))
        ));
    }
}
