//! The engine's benchmarks, through the same library code as `host bench
//! engine` and `host bench postgres` (`skillhost_engine::bench`), printing
//! the same figures with their default settings: the 10-node `echo` scenario
//! without a store and on SQLite, and, when `SKILLHOST_BENCH_DATABASE_URL`
//! names a Postgres database, durably there (`synchronous_commit = on`; the
//! runs are left in that database, scenario `bench`).
//!
//! Run it with `cargo bench -p skillhost-engine` (after
//! `scripts/build-skills.sh` has built `skills/dist/echo.wasm`).

use std::path::Path;

use skillhost_engine::bench::{self, BenchScenario};
use skillhost_store::{Store, StoreOptions, SyncMode};

/// Where the Postgres benchmark runs; without it, it is skipped.
const DATABASE_VARIABLE: &str = "SKILLHOST_BENCH_DATABASE_URL";

fn main() {
    // Read when the benchmark runs, so the crate builds on its own.
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../skills/dist/echo.wasm");
    let echo = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "cannot read `{}` ({e}); build the shipped skills with scripts/build-skills.sh",
            path.display()
        )
    });
    let scenario = BenchScenario::new(&echo).expect("the benchmark scenario loads");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("an async runtime");
    runtime.block_on(async {
        let figures = bench::engine(&scenario, Default::default())
            .await
            .expect("the engine benchmark runs");
        println!("{figures}");

        let Ok(url) = std::env::var(DATABASE_VARIABLE) else {
            println!(
                "postgres: skipped; set {DATABASE_VARIABLE}=postgres://USER:PASSWORD@HOST/DB \
                 to measure durable runs there"
            );
            return;
        };
        assert!(
            url.starts_with("postgres://") || url.starts_with("postgresql://"),
            "{DATABASE_VARIABLE} must name a Postgres database"
        );
        let store = Store::open_with(
            &url,
            StoreOptions {
                sync: SyncMode::Full,
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{DATABASE_VARIABLE}: {e}"));
        let figures = bench::postgres(&scenario, store, SyncMode::Full, Default::default())
            .await
            .expect("the Postgres benchmark runs");
        println!("{figures}");
    });
}
