//! Criterion benchmark of the runtime, through the same library code as
//! `host bench runtime` (`skillhost_runtime::bench`): a fresh instance of the
//! shipped `echo` skill plus one call with a ~100-byte record and, as the
//! baseline measured in the same run, the JSON -> component value bridge
//! alone; then compiling the component against loading it from the cache.
//!
//! Run it with `cargo bench -p skillhost-runtime` (after
//! `scripts/build-skills.sh` has built `skills/dist/echo.wasm`). `host bench
//! runtime` prints the medians `docs/` quote; this adds criterion's
//! statistics and its comparison with the previous run.

use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use skillhost_runtime::bench::RuntimeBench;

/// The shipped `echo` skill, read when the benchmark runs (so the crate
/// builds on its own): `skills/dist/echo.wasm` of the repository.
fn echo() -> RuntimeBench {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../skills/dist/echo.wasm");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read `{}` ({e}); build the shipped skills with scripts/build-skills.sh",
            path.display()
        )
    });
    RuntimeBench::echo(bytes).expect("a runtime for the benchmark")
}

fn fresh_call(c: &mut Criterion) {
    let bench = echo();
    let skill = bench.skill().expect("load echo");

    let mut group = c.benchmark_group("runtime");
    group.bench_function("fresh_instance_and_call", |b| {
        b.iter(|| {
            bench
                .fresh_call(&skill)
                .into_result()
                .expect("echo succeeds")
        })
    });
    group.bench_function("bridge_json_to_val_baseline", |b| {
        b.iter(|| bench.bridge_json_to_val(&skill).expect("fits"))
    });
    group.finish();
}

fn loads(c: &mut Criterion) {
    let bench = echo();
    // The first load compiles and writes the cache entry; the rest read it.
    bench.load_from_cache().expect("load echo");

    let mut group = c.benchmark_group("load");
    // A compilation takes tens of milliseconds: ten samples are plenty.
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("compile", |b| {
        b.iter(|| bench.compile().expect("echo compiles"))
    });
    group.bench_function("from_cache", |b| {
        b.iter(|| bench.load_from_cache().expect("echo loads"))
    });
    group.finish();
}

criterion_group!(benches, fresh_call, loads);
criterion_main!(benches);
