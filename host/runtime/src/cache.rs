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
//!
//! Beside each entry, `<digest>.origin` names what it was compiled from (a
//! file's path, as the load was given it), for `host cache list`. A hit sets
//! the entry's modification time to now, so an entry's age is the time
//! since it was last used and `host cache prune --older-than` removes what
//! nothing loads any more. [`entries`] lists the directory and
//! [`CompiledEntry::remove`] deletes one by unlinking it: a process that has
//! the file open keeps reading it (the inode lives until closed), and one
//! that opens it next finds it missing and recompiles, so pruning is safe
//! while other hosts run. A temporary file is an entry being written; it is
//! removed only once it is older than [`PARTIAL_GRACE`] (its writer died).

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

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
                    mark_used(&path);
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
        match store(dir, &path, &Entry::header(digest, &compiled), &compiled) {
            // What it came from, for `host cache list`; best effort.
            Ok(()) => {
                let _ = std::fs::write(origin_path(&path), origin);
            }
            // A cache that cannot be written costs time, never correctness.
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot write component cache")
            }
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

/// Sets a cache entry's modification time to now: its age is then the time
/// since it was last used. Best effort (a read-only cache stays as it is).
fn mark_used(path: &Path) {
    if let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// `<digest>.origin`, beside `<digest>.cwasm`.
fn origin_path(entry: &Path) -> PathBuf {
    entry.with_extension("origin")
}

/// How long a temporary file may be written before it is taken for the
/// leftover of a writer that died: compiling the largest components takes
/// well under a minute.
pub const PARTIAL_GRACE: Duration = Duration::from_secs(3600);

/// What a file of the compiled-component cache is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A compiled component (`<digest>.cwasm`).
    Compiled,
    /// A temporary file: an entry being written, or left by a writer that died.
    Partial,
}

/// One file of the compiled-component cache.
#[derive(Debug, Clone)]
pub struct CompiledEntry {
    pub path: PathBuf,
    pub kind: EntryKind,
    /// The SHA-256 (hex) of the component, from the entry's header.
    pub component: Option<String>,
    /// What it was compiled from, when its `.origin` file says.
    pub origin: Option<String>,
    /// Bytes, with its `.origin` file.
    pub size: u64,
    /// When it was last used (a hit) or written.
    pub modified: SystemTime,
    /// Whether this host can load it: written by an engine with the same
    /// compatibility hash (the other directories are other host builds').
    pub current: bool,
}

impl CompiledEntry {
    /// Time since it was last used, zero if the clock says the future.
    pub fn age(&self, now: SystemTime) -> Duration {
        now.duration_since(self.modified).unwrap_or_default()
    }

    /// Whether `prune` removes it: a compiled entry when `all` or at least
    /// `older_than` old; a temporary file only once past [`PARTIAL_GRACE`]
    /// too, so one being written is never touched.
    pub fn prunable(&self, now: SystemTime, older_than: Duration, all: bool) -> bool {
        let age = self.age(now);
        match self.kind {
            EntryKind::Compiled => all || age >= older_than,
            EntryKind::Partial => age >= PARTIAL_GRACE && (all || age >= older_than),
        }
    }

    /// Unlinks the entry and its `.origin` file; one already gone (another
    /// prune) is not an error.
    pub fn remove(&self) -> std::io::Result<()> {
        let gone = |r: std::io::Result<()>| match r {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        gone(std::fs::remove_file(&self.path))?;
        if self.kind == EntryKind::Compiled {
            gone(std::fs::remove_file(origin_path(&self.path)))?;
        }
        Ok(())
    }
}

/// Every entry under the cache root `root` (the directory given as
/// `RuntimeConfig::cache_dir`), in every engine's directory; `current` is
/// the directory of this runtime's engine ([`crate::Runtime::cache_dir`]).
/// Sorted by directory, then file name. A missing root has no entries.
pub fn entries(root: &Path, current: Option<&Path>) -> std::io::Result<Vec<CompiledEntry>> {
    let mut found = Vec::new();
    let dirs = match std::fs::read_dir(root) {
        Ok(dirs) => dirs,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for dir in dirs {
        let dir = dir?;
        if !dir.file_type()?.is_dir() {
            continue;
        }
        let is_current = current.is_some_and(|c| c == dir.path());
        for file in std::fs::read_dir(dir.path())? {
            let file = file?;
            let path = file.path();
            let name = file.file_name();
            let name = name.to_string_lossy();
            let kind = if name.ends_with(".cwasm") {
                EntryKind::Compiled
            } else if name.starts_with(".tmp") {
                EntryKind::Partial
            } else {
                continue;
            };
            // Removed by another process since the listing: not an entry.
            let Ok(meta) = file.metadata() else { continue };
            let mut size = meta.len();
            let (mut component, mut origin) = (None, None);
            if kind == EntryKind::Compiled {
                component = read_header(&path);
                if let Ok(text) = std::fs::read_to_string(origin_path(&path)) {
                    size += text.len() as u64;
                    origin = Some(text);
                }
            }
            found.push(CompiledEntry {
                path,
                kind,
                component,
                origin,
                size,
                modified: meta.modified()?,
                current: is_current,
            });
        }
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The component digest an entry's header names, reading the header only.
fn read_header(path: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let mut file = std::fs::File::open(path).ok()?;
    let n = file.read(&mut head).ok()?;
    let line = head[..n].split(|&b| b == b'\n').next()?;
    let rest = std::str::from_utf8(line).ok()?.strip_prefix(ENTRY_MAGIC)?;
    Some(rest.split(' ').next()?.to_string())
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

    #[test]
    fn entries_are_listed_with_their_component_and_pruned_by_age() {
        let root = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = ComponentCache::new(Some(root.path().to_path_buf()), &engine);
        let component = wat::parse_str("(component)").unwrap();
        let digest = sha256_hex(&component);
        cache
            .load(&engine, &component, &digest, "empty.wasm")
            .unwrap();
        let dir = cache.dir().unwrap();
        // An entry being written, and one of another host build.
        std::fs::write(dir.join(".tmpABC123"), b"half").unwrap();
        let other = root.path().join("0123456789abcdef");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("ff.cwasm"), b"old").unwrap();

        let listed = entries(root.path(), Some(dir)).unwrap();
        assert_eq!(listed.len(), 3, "{listed:?}");
        let compiled: Vec<_> = listed
            .iter()
            .filter(|e| e.kind == EntryKind::Compiled && e.current)
            .collect();
        assert_eq!(compiled.len(), 1);
        assert_eq!(compiled[0].component.as_deref(), Some(digest.as_str()));
        assert_eq!(compiled[0].origin.as_deref(), Some("empty.wasm"));

        let now = SystemTime::now();
        let later = now + Duration::from_secs(40 * 86400);
        let partial = listed
            .iter()
            .find(|e| e.kind == EntryKind::Partial)
            .unwrap();
        // Never a file being written, even with `all`.
        assert!(!partial.prunable(now, Duration::ZERO, true));
        assert!(partial.prunable(later, Duration::from_secs(30 * 86400), false));
        assert!(!compiled[0].prunable(now, Duration::from_secs(86400), false));
        assert!(compiled[0].prunable(now, Duration::from_secs(86400), true));

        compiled[0].remove().unwrap();
        compiled[0].remove().unwrap();
        assert!(!dir.join(format!("{digest}.origin")).exists());
        assert_eq!(entries(root.path(), Some(dir)).unwrap().len(), 2);
    }
}
