//! The sandboxed runtime: a shared wasmtime `Engine` per ABI (WASI 0.2's
//! synchronous one, and the async one of WASI 0.3 components, built when the
//! first such component loads), compiled components cached on disk, a fresh
//! `Store` and instance for every call, per-call limits, and
//! capability-checked host imports.
//!
//! The split follows wasmtime's own: compile once ([`cache`]), link once (one
//! `InstancePre` per [`Skill`]), instantiate per call ([`call`]). Nothing in this
//! module knows about scenarios or the store.

#[cfg(feature = "bench")]
pub mod bench;
pub mod bridge;
pub mod cache;
pub mod call;
pub mod capabilities;
pub mod config;
pub mod engine;
pub mod error;
pub mod imports;
pub mod journal;
pub mod limits;
pub mod schema;
pub mod skill;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use wasmtime::Engine;
use wasmtime::component::Linker;

pub use cache::{LoadSource, LoadStats, default_cache_dir};
pub use call::{CallOptions, CallReport, HostCallTiming, LogLevel, LogLine};
pub use capabilities::http::{HttpFailure, HttpGrant, InboundResponse, OutboundRequest};
pub use capabilities::llm::{
    LlmFailure, LlmGrant, LlmProviders, Provider, ProviderKind, ProviderProblem, TokenDelta,
    TokenSink, TokenUsage,
};
pub use capabilities::wasi::{RandomSeed, derive_random_seed};
pub use capabilities::{
    Backends, Capability, Effects, GrantError, Grants, HttpBackend, KvBackend, KvFailure, KvGrant,
    KvNamespace, KvOverride, KvQuota, KvUsage, MemoryKv, ReqwestHttp, describe_journal_entry,
};
pub use config::{ConfigError, ConfigSource, HostConfig, Lookup};
pub use engine::{Abi, PoolConfig};
pub use error::{CallError, LoadError};
pub use journal::{JournalMode, JournalRecord};
pub use limits::Limits;
pub use skill::{Manifest, RetryPolicy, Skill};

use cache::ComponentCache;
use call::CallState;
use engine::EpochTicker;

/// How to build a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Where compiled components are cached; `None` compiles every load.
    pub cache_dir: Option<PathBuf>,
    pub pool: PoolConfig,
    /// What the capabilities reach outside a call (the `kv` store, the
    /// `http` client, the `llm` providers); every skill the runtime loads
    /// shares them.
    pub backends: Backends,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: default_cache_dir(),
            pool: PoolConfig::default(),
            backends: Backends::default(),
        }
    }
}

/// Loads skills and keeps what they share. Cheap to clone.
#[derive(Clone)]
pub struct Runtime {
    inner: Arc<Inner>,
}

struct Inner {
    /// The synchronous engine: every WASI 0.2 component.
    sync: Flavor,
    /// The concurrent engine, built the first time a component that uses
    /// the async ABI loads (a runtime that never sees one never pays for
    /// its pool or its epoch thread); an error building it is kept and
    /// reported for every such component.
    concurrent: OnceLock<Result<Flavor, String>>,
    /// What the concurrent engine is built from.
    config: RuntimeConfig,
    /// Skills already loaded, by digest: loading the same bytes twice is free.
    loaded: Mutex<HashMap<String, Arc<Skill>>>,
}

/// One engine with its cache and linker.
struct Flavor {
    engine: Engine,
    cache: ComponentCache,
    shared: Arc<Shared>,
}

impl Flavor {
    fn new(config: &RuntimeConfig, abi: Abi) -> anyhow::Result<Flavor> {
        use anyhow::Context as _;
        // Compiled functions are kept beside the compiled components.
        let functions = config.cache_dir.is_some().then(cache::FunctionStore::new);
        let engine = engine::build_engine(&config.pool, functions.clone(), abi)
            .map_err(|e| anyhow::anyhow!("configuring wasmtime: {e:#}"))?;
        let mut linker = Linker::new(&engine);
        capabilities::link(&mut linker, abi)
            .map_err(|e| anyhow::anyhow!("linking host imports: {e:#}"))?;
        let cache = ComponentCache::new(config.cache_dir.clone(), &engine, functions);
        let ticker = EpochTicker::start(&engine).context("starting the epoch thread")?;
        Ok(Flavor {
            engine,
            cache,
            shared: Arc::new(Shared {
                linker,
                backends: config.backends.clone(),
                abi,
                _ticker: ticker,
            }),
        })
    }
}

/// What a runtime shares with the skills it loads, and what they keep alive.
pub(crate) struct Shared {
    pub(crate) linker: Linker<CallState>,
    pub(crate) backends: Backends,
    /// The ABI of the engine the linker belongs to: how a skill is called.
    pub(crate) abi: Abi,
    _ticker: EpochTicker,
}

impl Runtime {
    pub fn new(config: RuntimeConfig) -> anyhow::Result<Runtime> {
        let sync = Flavor::new(&config, Abi::Sync)?;
        Ok(Runtime {
            inner: Arc::new(Inner {
                sync,
                concurrent: OnceLock::new(),
                config,
                loaded: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// The synchronous engine, which every WASI 0.2 component runs on.
    pub fn engine(&self) -> &Engine {
        &self.inner.sync.engine
    }

    /// What the runtime's capabilities reach: the checker asks it whether a
    /// grant's `llm` provider is configured.
    pub fn backends(&self) -> &Backends {
        &self.inner.sync.shared.backends
    }

    /// The directory of the synchronous engine's compiled components, when
    /// caching is on.
    pub fn cache_dir(&self) -> Option<&Path> {
        self.inner.sync.cache.dir()
    }

    /// The directories of both engines' compiled components (what `host
    /// cache` calls current), when caching is on; the concurrent engine's
    /// only if it could be built.
    pub fn cache_dirs(&self) -> Vec<&Path> {
        let mut dirs: Vec<&Path> = self.cache_dir().into_iter().collect();
        if let Ok(concurrent) = self.flavor(Abi::Async)
            && let Some(dir) = concurrent.cache.dir()
        {
            dirs.push(dir);
        }
        dirs
    }

    /// The engine, cache and linker of `abi`, the concurrent one built on
    /// first use.
    fn flavor(&self, abi: Abi) -> Result<&Flavor, String> {
        match abi {
            Abi::Sync => Ok(&self.inner.sync),
            Abi::Async => self
                .inner
                .concurrent
                .get_or_init(|| {
                    Flavor::new(&self.inner.config, Abi::Async).map_err(|e| format!("{e:#}"))
                })
                .as_ref()
                .map_err(Clone::clone),
        }
    }

    /// Loads the component at `path`.
    pub fn load_file(&self, path: &Path) -> Result<Arc<Skill>, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_bytes(bytes, &path.display().to_string())
    }

    /// Loads the components at `paths`, answering in their order: the
    /// distinct files on up to one thread per core, so that the skills of a
    /// scenario that miss the cache compile side by side (a Python or
    /// JavaScript component takes seconds; wasmtime parallelises within one
    /// component's functions, but reading, checking, the module-level work
    /// and writing the cache entry are serial per component). A single file,
    /// or files already loaded, cost no thread.
    pub fn load_files(&self, paths: &[PathBuf]) -> Vec<Result<Arc<Skill>, LoadError>> {
        let mut distinct: Vec<&Path> = Vec::new();
        for path in paths {
            if !distinct.contains(&path.as_path()) {
                distinct.push(path);
            }
        }
        let mut loaded: Vec<Option<Result<Arc<Skill>, LoadError>>> =
            distinct.iter().map(|_| None).collect();
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(distinct.len());
        if workers > 1 {
            let next = std::sync::atomic::AtomicUsize::new(0);
            let slots: Vec<Mutex<Option<_>>> = distinct.iter().map(|_| Mutex::new(None)).collect();
            std::thread::scope(|scope| {
                for _ in 0..workers {
                    scope.spawn(|| {
                        loop {
                            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            let Some(path) = distinct.get(i) else { break };
                            let result = self.load_file(path);
                            *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
                        }
                    });
                }
            });
            for (slot, out) in slots.into_iter().zip(&mut loaded) {
                *out = slot.into_inner().unwrap_or_else(|e| e.into_inner());
            }
        }
        paths
            .iter()
            .map(|path| {
                let i = distinct.iter().position(|d| *d == path.as_path());
                match i.and_then(|i| loaded[i].take()) {
                    Some(Ok(skill)) => {
                        // The same file again later in `paths`.
                        loaded[i.expect("found")] = Some(Ok(skill.clone()));
                        Ok(skill)
                    }
                    Some(Err(e)) => Err(e),
                    // One worker, or an error already handed out.
                    None => self.load_file(path),
                }
            })
            .collect()
    }

    /// Loads a component from memory; `origin` names it in errors.
    pub fn load_bytes(
        &self,
        bytes: impl Into<Arc<[u8]>>,
        origin: &str,
    ) -> Result<Arc<Skill>, LoadError> {
        let bytes: Arc<[u8]> = bytes.into();
        skill::check_header(&bytes, origin)?;
        let digest = skill::digest_of(&bytes);
        if let Some(skill) = self.lock_loaded().get(&digest) {
            return Ok(skill.clone());
        }
        // Milliseconds, before a compile that may take tens of seconds.
        let abi = imports::check(&bytes, origin)?;
        let flavor = self.flavor(abi).map_err(|message| LoadError::Compile {
            origin: origin.to_string(),
            message: format!("the engine for the async ABI could not be built: {message}"),
        })?;
        let (component, stats) = flavor.cache.load(&flavor.engine, &bytes, &digest, origin)?;
        let skill = Arc::new(skill::load(
            flavor.shared.clone(),
            bytes,
            digest.clone(),
            origin,
            component,
            stats,
        )?);
        self.lock_loaded().insert(digest, skill.clone());
        Ok(skill)
    }

    /// Compiles `bytes` without caching or memoizing, on the engine of its
    /// ABI: what a first-ever load costs. Used by benchmarks.
    #[cfg(feature = "bench")]
    pub fn compile_uncached(&self, bytes: &[u8]) -> Result<std::time::Duration, LoadError> {
        let flavor = self.bench_flavor(bytes)?;
        let start = std::time::Instant::now();
        wasmtime::component::Component::new(&flavor.engine, bytes).map_err(|e| {
            LoadError::Compile {
                origin: "benchmark".into(),
                message: format!("{e:#}"),
            }
        })?;
        Ok(start.elapsed())
    }

    /// Loads `bytes` through the on-disk cache only, bypassing the in-memory
    /// memo: what a new process pays for an already-compiled component.
    #[cfg(feature = "bench")]
    pub fn load_from_cache(&self, bytes: &[u8]) -> Result<LoadStats, LoadError> {
        let digest = skill::digest_of(bytes);
        let flavor = self.bench_flavor(bytes)?;
        let (_, stats) = flavor
            .cache
            .load(&flavor.engine, bytes, &digest, "benchmark")?;
        Ok(stats)
    }

    /// The engine a benchmark's component compiles on: its ABI's.
    #[cfg(feature = "bench")]
    fn bench_flavor(&self, bytes: &[u8]) -> Result<&Flavor, LoadError> {
        let abi = imports::check(bytes, "benchmark")?;
        self.flavor(abi).map_err(|message| LoadError::Compile {
            origin: "benchmark".into(),
            message,
        })
    }

    fn lock_loaded(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Skill>>> {
        // The map only ever holds complete entries; a panic elsewhere cannot
        // leave it half-written, so a poisoned lock is still usable.
        self.inner
            .loaded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
