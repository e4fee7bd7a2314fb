//! Compiled components cached on disk, keyed by the SHA-256 of the component
//! bytes and by the engine's compatibility hash, so a second load of the same
//! component never recompiles.
//!
//! Entries are written to a temporary file and renamed into place, so a crash
//! or a concurrent writer never leaves a torn entry. An entry that fails to
//! deserialize (another wasmtime, a truncated file) is recompiled and replaced.
//! The cache directory must be trusted: deserializing compiled code is only as
//! safe as the files in it.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::LoadError;

/// Where the cache lives when nothing else is said: `$SKILLHOST_CACHE_DIR`,
/// else `$XDG_CACHE_HOME/skillhost/components`, else
/// `$HOME/.cache/skillhost/components`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SKILLHOST_CACHE_DIR") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("skillhost").join("components"))
}

/// SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// How a component was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadSource {
    /// Compiled now (and written to the cache when there is one).
    Compiled,
    /// Deserialized from the on-disk cache.
    Cache,
}

#[derive(Debug, Clone, Copy)]
pub struct LoadStats {
    pub source: LoadSource,
    pub elapsed: Duration,
}

pub(crate) struct ComponentCache {
    /// `<dir>/<engine key>`; `None` disables caching.
    dir: Option<PathBuf>,
}

impl ComponentCache {
    pub(crate) fn new(dir: Option<PathBuf>, engine: &Engine) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        let key = format!("{:016x}", hasher.finish());
        ComponentCache {
            dir: dir.map(|d| d.join(key)),
        }
    }

    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// The compiled component for `bytes`, from the cache when possible.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        digest: &str,
        origin: &str,
    ) -> Result<(Component, LoadStats), LoadError> {
        let start = Instant::now();
        let Some(dir) = &self.dir else {
            let component = compile(engine, bytes, origin)?;
            return Ok((component, stats(LoadSource::Compiled, start)));
        };
        let path = dir.join(format!("{digest}.cwasm"));
        if path.exists() {
            // SAFETY: the file was written by `store` below from wasmtime's own
            // `precompile_component` output for an engine with the same
            // compatibility hash; wasmtime checks the header again on load.
            if let Ok(component) = unsafe { Component::deserialize_file(engine, &path) } {
                return Ok((component, stats(LoadSource::Cache, start)));
            }
            tracing::warn!(path = %path.display(), "unusable cache entry; recompiling");
        }
        let compiled = engine
            .precompile_component(bytes)
            .map_err(|e| compile_error(origin, e))?;
        // SAFETY: `compiled` was produced just now by this engine.
        let component = unsafe { Component::deserialize(engine, &compiled) }
            .map_err(|e| compile_error(origin, e))?;
        if let Err(e) = store(dir, &path, &compiled) {
            // A cache that cannot be written costs time, never correctness.
            tracing::warn!(path = %path.display(), error = %e, "cannot write component cache");
        }
        Ok((component, stats(LoadSource::Compiled, start)))
    }
}

fn stats(source: LoadSource, start: Instant) -> LoadStats {
    LoadStats {
        source,
        elapsed: start.elapsed(),
    }
}

fn compile(engine: &Engine, bytes: &[u8], origin: &str) -> Result<Component, LoadError> {
    Component::new(engine, bytes).map_err(|e| compile_error(origin, e))
}

fn compile_error(origin: &str, e: wasmtime::Error) -> LoadError {
    LoadError::Compile {
        origin: origin.to_string(),
        message: format!("{e:#}"),
    }
}

fn store(dir: &Path, path: &Path, compiled: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(compiled)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}
