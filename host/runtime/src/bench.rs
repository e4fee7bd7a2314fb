//! The runtime benchmark, shared by `host bench runtime` and `cargo bench -p
//! skillhost-runtime`: a fresh instance of a component plus one call (the
//! hot path of every skill node), compiling it from scratch against loading
//! it from the on-disk cache, and the JSON → component value bridge alone as
//! the baseline of a call. Also the pieces the engine's benchmarks share:
//! [`BenchError`], [`median`], [`round`].
//!
//! Owns: what is measured and how (warm-up, medians, the baseline in the same
//! run), and the figures as JSON and as lines for people. Must not: find
//! files or parse flags (callers pass the component's bytes), print, or read
//! anything outside this crate at compile time.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use wasmtime::component::Val;

use crate::bridge::{self, BridgeError};
use crate::{CallOptions, CallReport, PoolConfig, Runtime, RuntimeConfig, Skill};

/// Why a benchmark could not measure, by whose doing (the command line maps
/// them to its exit codes).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The machine: a temporary directory, the runtime, a database, a
    /// compilation.
    #[error("{0}")]
    Environment(String),
    /// What was given to measure: a component that does not load.
    #[error("{0}")]
    Input(String),
    /// What was measured failed: a call or a run.
    #[error("{0}")]
    Failed(String),
}

/// The median of `samples` (the upper one of an even count); zero for none.
pub fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}

/// `value` rounded to `digits` decimals, as the figures are reported.
pub fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}

/// The ~100-byte record the benchmarks pass to the `echo` skill.
pub fn echo_input() -> Value {
    json!({
        "message": "The quick brown fox jumps over the lazy dog, then checks its citations twice.",
        "repeat": 1
    })
}

/// How much the runtime benchmark measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeBenchSettings {
    /// Calls to time, after 10% as many warm-up calls.
    pub calls: usize,
    /// Compilations, and loads from the cache, to time.
    pub loads: usize,
}

impl Default for RuntimeBenchSettings {
    fn default() -> Self {
        RuntimeBenchSettings {
            calls: 20_000,
            loads: 7,
        }
    }
}

/// A component under measurement: a runtime of its own with an empty
/// component cache in a temporary directory, and the input to call it with.
pub struct RuntimeBench {
    runtime: Runtime,
    component: Arc<[u8]>,
    input: Value,
    options: CallOptions,
    // Declared last: dropped after the runtime that caches into it.
    cache: tempfile::TempDir,
}

impl RuntimeBench {
    /// A benchmark of `component` called with `input`.
    pub fn new(component: impl Into<Arc<[u8]>>, input: Value) -> Result<RuntimeBench, BenchError> {
        let cache = tempfile::tempdir().map_err(|e| {
            BenchError::Environment(format!("cannot create a temporary cache: {e}"))
        })?;
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(cache.path().to_path_buf()),
            pool: PoolConfig::default(),
            ..RuntimeConfig::default()
        })
        .map_err(|e| BenchError::Environment(format!("{e:#}")))?;
        Ok(RuntimeBench {
            runtime,
            component: component.into(),
            input,
            options: CallOptions::default(),
            cache,
        })
    }

    /// A benchmark of the `echo` skill (its component's bytes) with
    /// [`echo_input`].
    pub fn echo(component: impl Into<Arc<[u8]>>) -> Result<RuntimeBench, BenchError> {
        RuntimeBench::new(component, echo_input())
    }

    /// The runtime the component is measured on.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Where compiled components are cached for this benchmark.
    pub fn cache_dir(&self) -> &std::path::Path {
        self.cache.path()
    }

    /// One compilation from scratch, without the cache: what a first-ever
    /// load costs.
    pub fn compile(&self) -> Result<Duration, BenchError> {
        self.runtime
            .compile_uncached(&self.component)
            .map_err(|e| BenchError::Environment(e.to_string()))
    }

    /// One load through the on-disk cache, bypassing the in-memory memo:
    /// what a new process pays for an already-compiled component. The first
    /// one compiles and writes the cache entry.
    pub fn load_from_cache(&self) -> Result<Duration, BenchError> {
        self.runtime
            .load_from_cache(&self.component)
            .map(|stats| stats.elapsed)
            .map_err(|e| BenchError::Environment(e.to_string()))
    }

    /// The component loaded as a skill (once; later loads are memoized).
    pub fn skill(&self) -> Result<Arc<Skill>, BenchError> {
        self.runtime
            .load_bytes(self.component.clone(), "benchmark.wasm")
            .map_err(|e| BenchError::Input(e.to_string()))
    }

    /// What is timed per call: a fresh instance of `skill` and one call with
    /// the input.
    pub fn fresh_call(&self, skill: &Skill) -> CallReport {
        skill.call(&self.input, &self.options)
    }

    /// The baseline of a call: the input converted from JSON to the
    /// component's input type, and nothing else.
    pub fn bridge_json_to_val(&self, skill: &Skill) -> Result<Val, BridgeError> {
        bridge::json_to_val(&skill.input_type, &self.input)
    }

    /// The input as compact JSON, in bytes.
    pub fn input_bytes(&self) -> usize {
        serde_json::to_vec(&self.input)
            .map(|v| v.len())
            .unwrap_or(0)
    }

    /// Measures everything `host bench runtime` reports: `loads`
    /// compilations and cached loads, then `calls` fresh calls after a
    /// warm-up; medians of each.
    pub fn measure(&self, settings: RuntimeBenchSettings) -> Result<RuntimeFigures, BenchError> {
        if settings.calls == 0 || settings.loads == 0 {
            return Err(BenchError::Input(
                "the runtime benchmark needs at least one call and one load".into(),
            ));
        }
        let compile = median(
            (0..settings.loads)
                .map(|_| self.compile())
                .collect::<Result<Vec<_>, _>>()?,
        );
        // The first load compiles and writes the cache entry; the rest read it.
        self.load_from_cache()?;
        let cached_load = median(
            (0..settings.loads)
                .map(|_| self.load_from_cache())
                .collect::<Result<Vec<_>, _>>()?,
        );

        let skill = self.skill()?;
        let failed = |e: crate::CallError| BenchError::Failed(e.to_string());
        for _ in 0..settings.calls / 10 + 1 {
            self.fresh_call(&skill).into_result().map_err(failed)?;
        }
        let mut samples = Vec::with_capacity(settings.calls);
        let mut fuel = Vec::with_capacity(settings.calls);
        for _ in 0..settings.calls {
            let start = Instant::now();
            let report = self.fresh_call(&skill);
            samples.push(start.elapsed());
            fuel.push(report.fuel_consumed);
            report.into_result().map_err(failed)?;
        }
        fuel.sort_unstable();
        Ok(RuntimeFigures {
            fresh_call: median(samples),
            compile,
            cached_load,
            calls: settings.calls,
            input_bytes: self.input_bytes(),
            component_bytes: self.component.len(),
            skill: skill.name.clone(),
            fuel_per_call: fuel[fuel.len() / 2],
        })
    }
}

/// What the runtime benchmark measured (medians).
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeFigures {
    /// A fresh instance and one call.
    pub fresh_call: Duration,
    /// A compilation from scratch.
    pub compile: Duration,
    /// A load of the compiled component from the on-disk cache.
    pub cached_load: Duration,
    pub calls: usize,
    pub input_bytes: usize,
    pub component_bytes: usize,
    /// The skill's name, from its manifest.
    pub skill: String,
    /// Fuel one call consumes, instantiation included (the median): what a
    /// node's `fuel` limit must allow for this skill.
    pub fuel_per_call: u64,
}

impl RuntimeFigures {
    fn compile_ms(&self) -> f64 {
        self.compile.as_secs_f64() * 1e3
    }

    fn cached_load_ms(&self) -> f64 {
        self.cached_load.as_secs_f64() * 1e3
    }

    /// How many times faster a cached load is than compiling.
    pub fn cache_speedup(&self) -> f64 {
        self.compile_ms() / self.cached_load_ms().max(1e-9)
    }

    /// The figures as `host bench runtime --json` prints them.
    pub fn to_json(&self) -> Value {
        json!({
            "fresh_call_us": round(self.fresh_call.as_secs_f64() * 1e6, 2),
            "compile_ms": round(self.compile_ms(), 3),
            "cached_load_ms": round(self.cached_load_ms(), 3),
            "cache_speedup": round(self.cache_speedup(), 1),
            "calls": self.calls,
            "input_bytes": self.input_bytes,
            "component_bytes": self.component_bytes,
            "skill": self.skill,
            "fuel_per_call": self.fuel_per_call,
        })
    }
}

/// The figures as lines for people.
impl fmt::Display for RuntimeFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fresh instance + call: {:.2} µs median over {} calls ({} byte input)",
            self.fresh_call.as_secs_f64() * 1e6,
            self.calls,
            self.input_bytes
        )?;
        writeln!(
            f,
            "compile:              {:.3} ms median",
            self.compile_ms()
        )?;
        writeln!(
            f,
            "load from cache:      {:.3} ms median ({:.1}x faster than compiling)",
            self.cached_load_ms(),
            self.cache_speedup()
        )?;
        write!(f, "fuel per call:        {}", self.fuel_per_call)
    }
}

/// How much `host bench async` measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbiBenchSettings {
    /// ABBA rounds: each times a batch of synchronous calls, two batches of
    /// async ones, and a synchronous batch again.
    pub rounds: usize,
    /// Calls per batch (after a tenth as many warm-up calls of each).
    pub calls: usize,
}

impl Default for AbiBenchSettings {
    fn default() -> Self {
        AbiBenchSettings {
            rounds: 8,
            calls: 2_000,
        }
    }
}

/// What `host bench async` measured: the same skill built for each ABI,
/// called fresh in the same runtime (medians of the batches' medians).
#[derive(Debug, Clone, PartialEq)]
pub struct AbiFigures {
    /// A fresh instance and one call of the synchronous (WASI 0.2) build.
    pub sync_call: Duration,
    /// The same of the async (WASI 0.3) build, on the concurrent engine.
    pub async_call: Duration,
    pub rounds: usize,
    pub calls: usize,
    /// The two skills' names, from their manifests.
    pub sync_skill: String,
    pub async_skill: String,
    /// Fuel one call consumes, each (the median).
    pub sync_fuel: u64,
    pub async_fuel: u64,
}

impl AbiFigures {
    /// The async call's time over the synchronous one's.
    pub fn ratio(&self) -> f64 {
        self.async_call.as_secs_f64() / self.sync_call.as_secs_f64().max(1e-12)
    }

    /// The figures as `host bench async --json` prints them.
    pub fn to_json(&self) -> Value {
        json!({
            "sync_call_us": round(self.sync_call.as_secs_f64() * 1e6, 2),
            "async_call_us": round(self.async_call.as_secs_f64() * 1e6, 2),
            "async_over_sync": round(self.ratio(), 3),
            "rounds": self.rounds,
            "calls": self.calls,
            "sync_skill": self.sync_skill,
            "async_skill": self.async_skill,
            "sync_fuel_per_call": self.sync_fuel,
            "async_fuel_per_call": self.async_fuel,
        })
    }
}

impl fmt::Display for AbiFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "synchronous (WASI 0.2), {}: {:.2} µs a fresh call, {} fuel",
            self.sync_skill,
            self.sync_call.as_secs_f64() * 1e6,
            self.sync_fuel
        )?;
        writeln!(
            f,
            "async (WASI 0.3), {}:       {:.2} µs a fresh call, {} fuel",
            self.async_skill,
            self.async_call.as_secs_f64() * 1e6,
            self.async_fuel
        )?;
        write!(
            f,
            "async / synchronous:  {:.3}x (medians of {} ABBA rounds of {} calls)",
            self.ratio(),
            self.rounds,
            self.calls
        )
    }
}

/// Times fresh calls of `sync` and `r#async`, two builds of one skill
/// that take the same `input`, in ABBA rounds in one runtime: what the
/// async ABI costs a call over the synchronous one.
pub fn measure_abis(
    sync: impl Into<Arc<[u8]>>,
    r#async: impl Into<Arc<[u8]>>,
    input: Value,
    settings: AbiBenchSettings,
) -> Result<AbiFigures, BenchError> {
    if settings.rounds == 0 || settings.calls == 0 {
        return Err(BenchError::Input(
            "the async benchmark needs at least one round and one call".into(),
        ));
    }
    let bench = RuntimeBench::new(sync, input)?;
    let sync = bench.skill()?;
    let r#async = bench
        .runtime
        .load_bytes(r#async.into(), "benchmark-async.wasm")
        .map_err(|e| BenchError::Input(e.to_string()))?;
    for (skill, abi) in [(&sync, crate::Abi::Sync), (&r#async, crate::Abi::Async)] {
        if skill.abi() != abi {
            return Err(BenchError::Input(format!(
                "`{}` has the {} ABI where the benchmark needs the {} one: give a \
                 synchronous component first and an async one second",
                skill.name,
                skill.abi().describe(),
                abi.describe()
            )));
        }
    }
    let failed = |e: crate::CallError| BenchError::Failed(e.to_string());
    let batch = |skill: &Skill, calls: usize| -> Result<(Duration, u64), BenchError> {
        let mut samples = Vec::with_capacity(calls);
        let mut fuel = 0;
        for _ in 0..calls {
            let start = Instant::now();
            let report = bench.fresh_call(skill);
            samples.push(start.elapsed());
            fuel = report.fuel_consumed;
            report.into_result().map_err(failed)?;
        }
        Ok((median(samples), fuel))
    };
    batch(&sync, settings.calls / 10 + 1)?;
    batch(&r#async, settings.calls / 10 + 1)?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let (mut sync_fuel, mut async_fuel) = (0, 0);
    for _ in 0..settings.rounds {
        for skill in [&sync, &r#async, &r#async, &sync] {
            let (time, fuel) = batch(skill, settings.calls)?;
            if Arc::ptr_eq(skill, &sync) {
                a.push(time);
                sync_fuel = fuel;
            } else {
                b.push(time);
                async_fuel = fuel;
            }
        }
    }
    Ok(AbiFigures {
        sync_call: median(a),
        async_call: median(b),
        rounds: settings.rounds,
        calls: settings.calls,
        sync_skill: sync.name.clone(),
        async_skill: r#async.name.clone(),
        sync_fuel,
        async_fuel,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_is_the_middle_sample() {
        let ms = Duration::from_millis;
        assert_eq!(median(vec![ms(3), ms(1), ms(2)]), ms(2));
        assert_eq!(median(vec![ms(4), ms(1), ms(3), ms(2)]), ms(3));
        assert_eq!(median(Vec::new()), Duration::ZERO);
    }

    #[test]
    fn figures_print_as_json_and_lines() {
        let figures = RuntimeFigures {
            fresh_call: Duration::from_nanos(12_346),
            compile: Duration::from_micros(40_000),
            cached_load: Duration::from_micros(400),
            calls: 20,
            input_bytes: 99,
            component_bytes: 1234,
            skill: "echo".into(),
            fuel_per_call: 6_900,
        };
        // The keys in the order `host bench runtime --json` has always printed them.
        assert_eq!(
            figures.to_json().to_string(),
            r#"{"fresh_call_us":12.35,"compile_ms":40.0,"cached_load_ms":0.4,"cache_speedup":100.0,"calls":20,"input_bytes":99,"component_bytes":1234,"skill":"echo","fuel_per_call":6900}"#
        );
        assert_eq!(
            figures.to_string(),
            "fresh instance + call: 12.35 µs median over 20 calls (99 byte input)\n\
             compile:              40.000 ms median\n\
             load from cache:      0.400 ms median (100.0x faster than compiling)\n\
             fuel per call:        6900"
        );
    }
}
