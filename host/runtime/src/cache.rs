//! Compiled components cached on disk, keyed by the SHA-256 of the component
//! bytes and by the engine's compatibility hash, so a second load of the same
//! component never recompiles.
//!
//! Entries are written to a temporary file and renamed into place, so a crash
//! or a concurrent writer never leaves a torn entry. Each entry starts with a
//! header naming the SHA-256 of the component it was compiled from and of
//! the compiled artifact that follows ([`Entry`]); both are checked before
//! wasmtime sees a byte of it, since deserializing compiled code trusts its
//! input (it is native code). An entry that does not match (edited,
//! truncated, written for another component or by an older host) is never
//! executed: it is recompiled and replaced, with a warning. The digests catch
//! damage and mix-ups, not an attacker who can write the cache directory and
//! recompute them: that directory must still be trusted.

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
        if let Ok(file) = std::fs::read(&path) {
            match Entry::verify(&file, digest) {
                Ok(artifact) => {
                    // SAFETY: the artifact hashes to the digest recorded when
                    // `store` wrote it from wasmtime's own
                    // `precompile_component` output, for this component and an
                    // engine with the same compatibility hash (the directory's
                    // key); wasmtime checks its own header again.
                    match unsafe { Component::deserialize(engine, artifact) } {
                        Ok(component) => return Ok((component, stats(LoadSource::Cache, start))),
                        Err(e) => tracing::warn!(
                            path = %path.display(), error = %e,
                            "unusable cache entry; recompiling"
                        ),
                    }
                }
                Err(why) => tracing::warn!(
                    path = %path.display(), %why,
                    "cache entry does not match its component; recompiling (it was not executed)"
                ),
            }
        }
        let compiled = engine
            .precompile_component(bytes)
            .map_err(|e| compile_error(origin, e))?;
        // SAFETY: `compiled` was produced just now by this engine.
        let component = unsafe { Component::deserialize(engine, &compiled) }
            .map_err(|e| compile_error(origin, e))?;
        if let Err(e) = store(dir, &path, &Entry::header(digest, &compiled), &compiled) {
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

/// A cache entry: a one-line header, then wasmtime's compiled artifact.
/// The header is `skillhost-cwasm 1 <component sha256> <artifact sha256>\n`.
struct Entry;

const ENTRY_MAGIC: &str = "skillhost-cwasm 1 ";

impl Entry {
    fn header(component_digest: &str, artifact: &[u8]) -> Vec<u8> {
        format!("{ENTRY_MAGIC}{component_digest} {}\n", sha256_hex(artifact)).into_bytes()
    }

    /// The artifact in `file`, if the header says it was compiled from the
    /// component with `component_digest` and the artifact still hashes to
    /// what the header recorded; else why not.
    fn verify<'f>(file: &'f [u8], component_digest: &str) -> Result<&'f [u8], String> {
        let end = file
            .iter()
            .take(256)
            .position(|&b| b == b'\n')
            .ok_or("no skillhost header (an entry of an older host, or not an entry)")?;
        let header = std::str::from_utf8(&file[..end]).map_err(|_| "the header is not text")?;
        let artifact = &file[end + 1..];
        let (component, recorded) = header
            .strip_prefix(ENTRY_MAGIC)
            .and_then(|rest| rest.split_once(' '))
            .ok_or("the header is not one this host writes")?;
        if component != component_digest {
            return Err(format!(
                "it was compiled from component {component}, not {component_digest}"
            ));
        }
        let actual = sha256_hex(artifact);
        if actual != recorded {
            return Err(format!(
                "the compiled code hashes to {actual}, but {recorded} was recorded"
            ));
        }
        Ok(artifact)
    }
}

fn store(dir: &Path, path: &Path, header: &[u8], compiled: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(header)?;
    tmp.write_all(compiled)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_accepted_only_for_its_component_and_unchanged() {
        let artifact = b"\x7fELF compiled code".to_vec();
        let component = sha256_hex(b"component");
        let mut file = Entry::header(&component, &artifact);
        file.extend_from_slice(&artifact);
        assert_eq!(Entry::verify(&file, &component).unwrap(), &artifact[..]);

        let other = sha256_hex(b"another component");
        let why = Entry::verify(&file, &other).unwrap_err();
        assert!(why.contains("compiled from component"), "{why}");

        let mut edited = file.clone();
        *edited.last_mut().unwrap() ^= 1;
        let why = Entry::verify(&edited, &component).unwrap_err();
        assert!(why.contains("hashes to"), "{why}");

        let why = Entry::verify(&artifact, &component).unwrap_err();
        assert!(why.contains("no skillhost header"), "{why}");
    }
}
