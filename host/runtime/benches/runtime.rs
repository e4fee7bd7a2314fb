//! Criterion benchmark of the runtime's hot path: a fresh instance of the
//! shipped `echo` skill plus one call with a ~100-byte record, and, as the
//! baseline measured in the same run, the JSON -> component value bridge alone.
//! `host bench runtime` measures the same path and prints medians as JSON.

use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::json;
use skillhost_runtime::{CallOptions, PoolConfig, Runtime, RuntimeConfig, bridge};

const ECHO: &[u8] = include_bytes!("../../../skills/dist/echo.wasm");

fn fresh_call(c: &mut Criterion) {
    let cache = tempfile::tempdir().expect("temp dir");
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        pool: PoolConfig::default(),
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let skill = runtime
        .load_bytes(Arc::<[u8]>::from(ECHO), "echo.wasm")
        .expect("load echo");
    let input = json!({
        "message": "The quick brown fox jumps over the lazy dog, then checks its citations twice.",
        "repeat": 1
    });
    let options = CallOptions::default();

    let mut group = c.benchmark_group("runtime");
    group.bench_function("fresh_instance_and_call", |b| {
        b.iter(|| {
            skill
                .call(&input, &options)
                .into_result()
                .expect("echo succeeds")
        })
    });
    group.bench_function("bridge_json_to_val_baseline", |b| {
        b.iter(|| bridge::json_to_val(&skill.input_type, &input).expect("fits"))
    });
    group.finish();
}

criterion_group!(benches, fresh_call);
criterion_main!(benches);
