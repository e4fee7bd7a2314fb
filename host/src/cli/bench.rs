//! `host bench …`: measurements printed as JSON, medians over many samples,
//! with the baseline measured in the same run where a ratio matters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use serde_json::json;

use super::{CliResult, Failure, Globals, print_json};
use crate::runtime::{CallOptions, PoolConfig, Runtime, RuntimeConfig};

/// The component the runtime benchmark calls: the shipped `echo` skill.
pub const ECHO_COMPONENT: &[u8] = include_bytes!("../../../skills/dist/echo.wasm");

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Fresh-instance call latency, compile time and cached load time.
    Runtime(RuntimeBenchArgs),
}

#[derive(Debug, Args)]
pub struct RuntimeBenchArgs {
    /// Calls to time (after 10% as many warm-up calls).
    #[arg(long, default_value_t = 20_000)]
    calls: usize,
    /// Compilations and cached loads to time.
    #[arg(long, default_value_t = 7)]
    loads: usize,
    /// Print JSON only.
    #[arg(long)]
    json: bool,
}

pub fn run(command: BenchCommand, _globals: &Globals) -> CliResult {
    match command {
        BenchCommand::Runtime(args) => runtime_bench(args),
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

    let compile = median(
        (0..args.loads)
            .map(|_| runtime.compile_uncached(ECHO_COMPONENT))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Failure::environment)?,
    );
    // The first load compiles and writes the cache entry; the rest read it.
    runtime
        .load_from_cache(ECHO_COMPONENT)
        .map_err(Failure::environment)?;
    let cached = median(
        (0..args.loads)
            .map(|_| runtime.load_from_cache(ECHO_COMPONENT).map(|s| s.elapsed))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Failure::environment)?,
    );

    let skill = runtime
        .load_bytes(Arc::<[u8]>::from(ECHO_COMPONENT), "echo.wasm")
        .map_err(Failure::environment)?;
    let input = echo_input();
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
        "component_bytes": ECHO_COMPONENT.len(),
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

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort_unstable();
    samples[samples.len() / 2]
}

fn round(value: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (value * scale).round() / scale
}
