//! The wasmtime `Engine`s a runtime shares between all skills: configuration,
//! the pooling allocator, the epoch ticker, and the [`Deadline`] that turns a
//! call's wall-clock timeout into a trap at the first tick past it.
//!
//! There are two, one per [`Abi`]: the synchronous engine every WASI 0.2
//! component runs on, built without the component model's concurrency
//! support (so that its call path is exactly what `host bench runtime`
//! measures), and the concurrent engine of components that use the async
//! ABI (WASI 0.3), built the first time such a component is loaded. An
//! engine is built once and never reconfigured; everything per call lives in
//! the `Store`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap,
    UpdateDeadline,
};

use crate::cache::FunctionStore;
use crate::limits::MAX_MEMORY_BYTES;

/// How often the epoch advances: how late past its deadline a call may stop.
pub const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Sizes of the pooling allocator: how many calls may run at once.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// Component instances alive at once (one per running call).
    pub component_instances: u32,
    /// Core instances alive at once, over all calls.
    pub core_instances: u32,
    pub memories: u32,
    pub tables: u32,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            component_instances: 256,
            core_instances: 2048,
            memories: 512,
            tables: 1024,
        }
    }
}

/// Which calling convention a component's `run` uses, and so which engine
/// and call path serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Abi {
    /// The synchronous canonical ABI (WASI 0.2 components): one blocking
    /// call on a fresh instance.
    Sync,
    /// The component model's async ABI (WASI 0.3 components: an async lift
    /// or lower, `task.return`, streams and futures): the call runs on the
    /// concurrent engine's event loop.
    Async,
}

impl Abi {
    /// How a diagnostic names it.
    pub fn describe(self) -> &'static str {
        match self {
            Abi::Sync => "synchronous (WASI 0.2)",
            Abi::Async => "async (WASI 0.3)",
        }
    }
}

/// The engine for `abi`, with `functions` as Cranelift's incremental
/// compilation store when there is one (`cache::functions`): a function
/// compiled before, in any component, is not compiled again.
pub(crate) fn build_engine(
    pool: &PoolConfig,
    functions: Option<Arc<FunctionStore>>,
    abi: Abi,
) -> wasmtime::Result<Engine> {
    let mut pooling = PoolingAllocationConfig::new();
    pooling
        .total_component_instances(pool.component_instances)
        .total_core_instances(pool.core_instances)
        .total_memories(pool.memories)
        .total_tables(pool.tables)
        .total_stacks(pool.component_instances)
        .max_memory_size(MAX_MEMORY_BYTES as usize)
        .max_memories_per_component(16)
        .max_tables_per_component(64)
        .max_core_instances_per_component(64)
        .table_elements(1_000_000)
        // A fresh instance per call makes the reset of the previous one part of
        // every call. With PAGEMAP_SCAN (Linux 6.7+) wasmtime finds the pages
        // the call dirtied and copies or zeroes just those, up to the resident
        // budget, instead of a blind memset of the low addresses plus an
        // madvise (and its TLB shootdown) for the rest. Skills built here have
        // a 128 KiB stack (see `build::toolchain`), so a small skill dirties a
        // handful of pages.
        .pagemap_scan(Enabled::Auto)
        .linear_memory_keep_resident(1 << 20)
        .table_keep_resident(64 << 10);

    let mut config = Config::new();
    config
        // Explicit bounds checks instead of guard pages: a slot's accessible
        // size then never has to shrink between instances, so neither the
        // reset nor the guest's first memory.grow costs an mprotect and the
        // cross-CPU TLB shootdown that comes with it. That was a quarter of a
        // fresh call; the checks cost far less on skill-sized work.
        .signals_based_traps(false)
        .memory_guard_size(0)
        .wasm_component_model(true)
        .epoch_interruption(true)
        .consume_fuel(true)
        .parallel_compilation(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pooling));
    match abi {
        // Without it a store carries no task state and a call no task
        // bookkeeping: the synchronous path stays as it was measured.
        Abi::Sync => config.concurrency_support(false),
        // The async ABI (callback and stackful lifts, the async built-ins,
        // streams, futures and error contexts); not the cooperative
        // threads, which `imports::check` refuses by name.
        Abi::Async => config
            .concurrency_support(true)
            .wasm_component_model_async(true)
            .wasm_component_model_async_stackful(true)
            .wasm_component_model_error_context(true),
    };
    if let Some(functions) = functions {
        config.enable_incremental_compilation(functions)?;
    }
    Engine::new(&config)
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
pub(crate) struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub(crate) fn start(engine: &Engine) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let engine = engine.weak();
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("skillhost-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })?;
        Ok(EpochTicker {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// When a call must stop, in real time.
///
/// The epoch only says that a tick went by; ticks come late (a thread's
/// 1 ms sleep overshoots, more so on a loaded machine), so counting them
/// would stretch a 30 s timeout past 32 s. Instead every tick asks the store's
/// epoch callback, which compares the clock with the deadline: a call stops
/// within a tick of its deadline however the ticks drift.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    at: Instant,
}

impl Deadline {
    /// The deadline at `at`: a call's, from its `CallScope`, which host calls
    /// that wait read too.
    pub(crate) fn at(at: Instant) -> Self {
        Deadline { at }
    }

    /// Makes `store` trap with [`Trap::Interrupt`] at the first tick past the
    /// deadline.
    pub(crate) fn arm<T: 'static>(self, store: &mut Store<T>) {
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= self.at {
                Err(Trap::Interrupt.into())
            } else {
                Ok(UpdateDeadline::Continue(1))
            }
        });
    }
}
