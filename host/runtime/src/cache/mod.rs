//! Compiled components cached on disk, keyed by the SHA-256 of the component
//! bytes and by the engine's compatibility hash, so a second load of the same
//! component never recompiles; and, under it, the functions Cranelift
//! compiled ([`functions`]), so a component that shares code with one
//! compiled before (every Python skill shares CPython) compiles only the
//! rest.
//!
//! An entry is three files: `<digest>.cwasm`, wasmtime's compiled artifact
//! as it wrote it; `<digest>.meta`, which names the SHA-256 of the
//! component it was compiled from and of the artifact ([`Meta`]); and
//! `<digest>.origin`, what it was compiled from (a file's path, as the load
//! was given it), for `host cache list`. Each is written to a temporary file
//! and renamed into place, so a crash or a concurrent writer never leaves a
//! torn one, and the artifact is never written in place after that.
//!
//! Deserializing compiled code trusts its input (it is native code), so an
//! artifact is checked against the meta's digests before wasmtime sees it.
//! Hashing 80 MB (a Python skill's artifact) on every load was most of a
//! warm `host skill call`, so the check is done once per file identity: a
//! verified artifact's device, inode, size, modification and change times
//! are recorded in its meta, and a load whose artifact still has exactly
//! that identity trusts the check already made. Any write to the file, by
//! any means, sets its change time to the current time, which nobody can
//! set back (`touch` and `utimensat` set the modification time, and set the
//! change time to now); a file replaced by another has another inode. An
//! identity is recorded only for a file whose change time is at least
//! [`SETTLED`] before the check started, so a write in the same clock tick
//! as the check, which could leave the change time as it was, cannot pass
//! (git's "racily clean" rule). An artifact whose identity differs is
//! hashed again; one that does not match is never executed: it is
//! recompiled and replaced, with a warning.
//!
//! A hit maps the artifact (`Component::deserialize_file`, through the open
//! file descriptor that was checked, so a rename in between cannot swap
//! it): nothing is read or copied up front, and a skill's memory image
//! (a Python skill's 11 MB heap snapshot) is mapped copy-on-write from the
//! file. A mapped file stays what was checked as long as nobody writes into
//! it in place, which no host does. The digests catch damage and mix-ups,
//! not an attacker who can write the cache directory and recompute them (or
//! write into a mapped artifact): that directory must still be trusted.
//!
//! A hit sets the meta's modification time to now, so an entry's age is
//! the time since it was last used and `host cache prune --older-than`
//! removes what nothing loads any more. [`entries`] lists the directory and
//! [`CompiledEntry::remove`] deletes one by unlinking it: a process that has
//! the file open keeps reading it (the inode lives until closed), and one
//! that opens it next finds it missing and recompiles, so pruning is safe
//! while other hosts run. A temporary file is an entry being written; it is
//! removed only once it is older than [`PARTIAL_GRACE`] (its writer died).

pub mod functions;

use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::error::LoadError;
pub use functions::{FunctionCounts, FunctionStore};

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
    /// What the compiled-function store did while this component compiled
    /// (zero for a cache hit). Counted over the runtime: exact when one
    /// component compiles at a time, as in `host skill build`.
    pub functions: FunctionCounts,
}

/// The on-disk layout this host writes; part of the engine directory's
/// name, so another layout's entries are another build's (listed, pruned,
/// never loaded).
const LAYOUT: &str = "cwasm-2";

pub(crate) struct ComponentCache {
    /// `<dir>/<engine key>`; `None` disables caching.
    dir: Option<PathBuf>,
    /// The compiled functions under `dir`, when there is a `dir`.
    functions: Option<Arc<FunctionStore>>,
}

impl ComponentCache {
    /// The cache under `dir` for `engine`, which was built with
    /// `functions` as its incremental compilation store (when there is a
    /// `dir`).
    pub(crate) fn new(
        dir: Option<PathBuf>,
        engine: &Engine,
        functions: Option<Arc<FunctionStore>>,
    ) -> Self {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        LAYOUT.hash(&mut hasher);
        let key = format!("{:016x}", hasher.finish());
        let dir = dir.map(|d| d.join(key));
        if let (Some(dir), Some(functions)) = (&dir, &functions) {
            functions.place(dir);
        }
        ComponentCache { dir, functions }
    }

    pub(crate) fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    pub(crate) fn functions(&self) -> Option<&FunctionStore> {
        self.functions.as_deref()
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
        let paths = EntryPaths::new(dir, digest);
        match hit(engine, &paths, digest) {
            Ok(Some(component)) => return Ok((component, stats(LoadSource::Cache, start))),
            Ok(None) => {}
            Err(why) => tracing::warn!(
                path = %paths.artifact.display(), %why,
                "cache entry does not match its component; recompiling (it was not executed)"
            ),
        }
        let before = self.functions().map(FunctionStore::counts);
        if let Some(functions) = self.functions() {
            functions.refresh();
        }
        let compiled = engine.precompile_component(bytes);
        if let Some(functions) = self.functions() {
            functions.flush();
        }
        let compiled = compiled.map_err(|e| compile_error(origin, e))?;
        // SAFETY: `compiled` was produced just now by this engine.
        let component = unsafe { Component::deserialize(engine, &compiled) }
            .map_err(|e| compile_error(origin, e))?;
        match store(dir, &paths, digest, &compiled) {
            // What it came from, for `host cache list`; best effort.
            Ok(()) => {
                let _ = std::fs::write(&paths.origin, origin);
            }
            // A cache that cannot be written costs time, never correctness.
            Err(e) => tracing::warn!(
                path = %paths.artifact.display(), error = %e,
                "cannot write component cache"
            ),
        }
        let mut stats = stats(LoadSource::Compiled, start);
        if let (Some(before), Some(functions)) = (before, self.functions()) {
            stats.functions = functions.counts().since(before);
        }
        Ok((component, stats))
    }
}

fn stats(source: LoadSource, start: Instant) -> LoadStats {
    LoadStats {
        source,
        elapsed: start.elapsed(),
        functions: FunctionCounts::default(),
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

/// The files of the entry for one component.
struct EntryPaths {
    artifact: PathBuf,
    meta: PathBuf,
    origin: PathBuf,
}

impl EntryPaths {
    fn new(dir: &Path, digest: &str) -> Self {
        let artifact = dir.join(format!("{digest}.cwasm"));
        EntryPaths {
            meta: artifact.with_extension("meta"),
            origin: artifact.with_extension("origin"),
            artifact,
        }
    }
}

/// The cached component for `digest`: `Ok(None)` when there is no entry,
/// `Err(why)` when there is one that must not be executed.
fn hit(engine: &Engine, paths: &EntryPaths, digest: &str) -> Result<Option<Component>, String> {
    let text = match std::fs::read_to_string(&paths.meta) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot read {}: {e}", paths.meta.display())),
    };
    let meta = Meta::parse(&text)?;
    if meta.component != digest {
        return Err(format!(
            "it was compiled from component {}, not {digest}",
            meta.component
        ));
    }
    let file = match File::open(&paths.artifact) {
        Ok(file) => file,
        // Pruned, or its writer has not renamed it into place yet.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(format!("cannot open it: {e}")),
    };
    let identity = Identity::of(&file).map_err(|e| format!("cannot read its metadata: {e}"))?;
    if meta.verified != Some(identity) {
        verify(&file, &meta, identity)?;
        if identity.settled(SystemTime::now()) {
            // Later loads trust this check while the file stays as it is.
            let _ = write_meta(
                paths,
                &Meta {
                    verified: Some(identity),
                    ..meta
                },
            );
        }
    } else {
        mark_used(&paths.meta);
    }
    // SAFETY: the artifact `file` holds hashes to the digest its meta
    // recorded when `store` wrote it from wasmtime's own
    // `precompile_component` output (checked now, or before for this very
    // file identity), for this component and an engine with the same
    // compatibility hash (the directory's key); wasmtime checks its own
    // header again. No host writes into an entry in place.
    unsafe { deserialize_open(engine, &file) }
        .map(Some)
        .map_err(|e| format!("wasmtime refused it: {e:#}"))
}

/// Hashes the artifact in `file` against `meta`, and checks that it did not
/// change while it was hashed.
fn verify(file: &File, meta: &Meta, identity: Identity) -> Result<(), String> {
    if identity.size != meta.artifact_len {
        return Err(format!(
            "it is {} bytes, but {} were recorded",
            identity.size, meta.artifact_len
        ));
    }
    let actual = sha256_file(file).map_err(|e| format!("cannot read it: {e}"))?;
    if actual != meta.artifact {
        return Err(format!(
            "the compiled code hashes to {actual}, but {} was recorded",
            meta.artifact
        ));
    }
    match Identity::of(file) {
        Ok(after) if after == identity => Ok(()),
        _ => Err("it changed while it was checked".into()),
    }
}

/// Deserializes the artifact in `file`, mapping that very file.
///
/// # Safety
///
/// As [`Component::deserialize_file`]: the file must hold an artifact this
/// engine's wasmtime produced, and must not be written while mapped.
unsafe fn deserialize_open(engine: &Engine, file: &File) -> wasmtime::Result<Component> {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd as _;
        // The descriptor's own path: wasmtime opens and maps the inode that
        // was checked, whatever has been renamed over its name since.
        let fd_path = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
        if fd_path.exists() {
            // SAFETY: the caller's.
            return unsafe { Component::deserialize_file(engine, &fd_path) };
        }
    }
    // No /proc: read the checked file into memory.
    let mut bytes = Vec::new();
    (&*file).read_to_end(&mut bytes)?;
    // SAFETY: the caller's.
    unsafe { Component::deserialize(engine, &bytes) }
}

/// SHA-256 of what `file` holds, read from its start.
fn sha256_file(file: &File) -> std::io::Result<String> {
    use std::os::unix::fs::FileExt as _;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut offset = 0u64;
    loop {
        let n = file.read_at(&mut buf, offset)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        offset += n as u64;
    }
    Ok(hex::encode(hasher.finalize()))
}

/// How long before a check a file's change time must be for the check to
/// be recorded against its identity: well over a filesystem timestamp's
/// granularity (a clock tick), and over the clock skew of a network
/// filesystem whose server sets the times.
pub const SETTLED: Duration = Duration::from_secs(2);

/// What identifies a file's content without reading it: any write changes
/// its size or its change time, a replacement its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(file: &File) -> std::io::Result<Identity> {
        let m = file.metadata()?;
        Ok(Identity {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        })
    }

    /// Whether the file last changed at least [`SETTLED`] before `now`.
    fn settled(&self, now: SystemTime) -> bool {
        let Ok(now) = now.duration_since(SystemTime::UNIX_EPOCH) else {
            return false;
        };
        let (secs, nanos) = self.ctime;
        let Ok(secs) = u64::try_from(secs) else {
            return false;
        };
        let ctime = Duration::new(secs, nanos.clamp(0, 999_999_999) as u32);
        ctime + SETTLED <= now
    }

    fn to_line(self) -> String {
        format!(
            "verified {} {} {} {}.{:09} {}.{:09}",
            self.dev, self.ino, self.size, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }

    fn parse(line: &str) -> Option<Identity> {
        let mut words = line.strip_prefix("verified ")?.split(' ');
        let mut number = || words.next()?.parse::<u64>().ok();
        let (dev, ino, size) = (number()?, number()?, number()?);
        let mut time = || {
            let (s, ns) = words.next()?.split_once('.')?;
            Some((s.parse().ok()?, ns.parse().ok()?))
        };
        let (mtime, ctime) = (time()?, time()?);
        words.next().is_none().then_some(Identity {
            dev,
            ino,
            size,
            mtime,
            ctime,
        })
    }
}

/// An entry's `.meta`: `skillhost-cwasm 2 <component sha256> <artifact
/// sha256> <artifact bytes>`, and once the artifact has been checked with
/// a settled identity, a second line `verified <dev> <inode> <size>
/// <mtime> <ctime>`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Meta {
    component: String,
    artifact: String,
    artifact_len: u64,
    verified: Option<Identity>,
}

const META_MAGIC: &str = "skillhost-cwasm 2 ";

impl Meta {
    fn for_artifact(component: &str, artifact: &[u8]) -> Meta {
        Meta {
            component: component.to_string(),
            artifact: sha256_hex(artifact),
            artifact_len: artifact.len() as u64,
            verified: None,
        }
    }

    fn parse(text: &str) -> Result<Meta, String> {
        let mut lines = text.lines();
        let first = lines.next().unwrap_or_default();
        let rest = first
            .strip_prefix(META_MAGIC)
            .ok_or("its meta is not one this host writes")?;
        let mut words = rest.split(' ');
        let (Some(component), Some(artifact), Some(len), None) =
            (words.next(), words.next(), words.next(), words.next())
        else {
            return Err("its meta is not one this host writes".into());
        };
        let artifact_len = len
            .parse()
            .map_err(|_| "its meta's artifact size is not a number")?;
        let verified = match lines.next() {
            None => None,
            Some(line) => Some(Identity::parse(line).ok_or("its meta's identity line is damaged")?),
        };
        Ok(Meta {
            component: component.to_string(),
            artifact: artifact.to_string(),
            artifact_len,
            verified,
        })
    }

    fn to_text(&self) -> String {
        let mut text = format!(
            "{META_MAGIC}{} {} {}\n",
            self.component, self.artifact, self.artifact_len
        );
        if let Some(identity) = self.verified {
            text += &identity.to_line();
            text.push('\n');
        }
        text
    }
}

/// Writes a new entry: the artifact, then its meta (a reader that finds the
/// meta of an older artifact refuses the pair and recompiles).
fn store(dir: &Path, paths: &EntryPaths, digest: &str, compiled: &[u8]) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    write_atomically(&paths.artifact, compiled, true)?;
    write_meta(paths, &Meta::for_artifact(digest, compiled))
}

fn write_meta(paths: &EntryPaths, meta: &Meta) -> std::io::Result<()> {
    write_atomically(&paths.meta, meta.to_text().as_bytes(), false)
}

/// Writes `bytes` to `path` through a temporary file beside it renamed
/// into place; `sync` flushes it to the disk first.
fn write_atomically(path: &Path, bytes: &[u8], sync: bool) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
    tmp.write_all(bytes)?;
    if sync {
        tmp.as_file().sync_all()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Sets a file's modification time to now: an entry's age is then the time
/// since it was last used. Best effort (a read-only cache stays as it is).
fn mark_used(path: &Path) {
    if let Ok(file) = std::fs::OpenOptions::new().write(true).open(path) {
        let _ = file.set_modified(SystemTime::now());
    }
}

/// How long a temporary file may be written before it is taken for the
/// leftover of a writer that died: compiling the largest components takes
/// well under a minute.
pub const PARTIAL_GRACE: Duration = Duration::from_secs(3600);

/// What a file of the compiled-component cache is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A compiled component (`<digest>.cwasm`, with its `.meta` and
    /// `.origin`).
    Compiled,
    /// A pack of compiled functions (`functions/<name>.pack`), which any
    /// compile may reuse.
    Functions,
    /// A temporary file: an entry being written, or left by a writer that died.
    Partial,
}

/// One entry of the compiled-component cache.
#[derive(Debug, Clone)]
pub struct CompiledEntry {
    pub path: PathBuf,
    pub kind: EntryKind,
    /// The SHA-256 (hex) of the component, from the entry's meta.
    pub component: Option<String>,
    /// What it was compiled from, when its `.origin` file says.
    pub origin: Option<String>,
    /// How many functions a pack holds.
    pub functions: Option<u64>,
    /// Bytes, with its `.meta` and `.origin` files.
    pub size: u64,
    /// When it was last used (a hit, or a compile that reused a pack's
    /// functions) or written.
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

    /// Whether `prune` removes it: a compiled component or a pack when
    /// `all` or at least `older_than` old; a temporary file only once past
    /// [`PARTIAL_GRACE`] too, so one being written is never touched.
    pub fn prunable(&self, now: SystemTime, older_than: Duration, all: bool) -> bool {
        let age = self.age(now);
        match self.kind {
            EntryKind::Compiled | EntryKind::Functions => all || age >= older_than,
            EntryKind::Partial => age >= PARTIAL_GRACE && (all || age >= older_than),
        }
    }

    /// Unlinks the entry (a compiled component's artifact first, then its
    /// `.meta` and `.origin` files); one already gone (another prune) is not
    /// an error.
    pub fn remove(&self) -> std::io::Result<()> {
        let gone = |r: std::io::Result<()>| match r {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        gone(std::fs::remove_file(&self.path))?;
        if self.kind == EntryKind::Compiled {
            gone(std::fs::remove_file(self.path.with_extension("meta")))?;
            gone(std::fs::remove_file(self.path.with_extension("origin")))?;
        }
        Ok(())
    }
}

/// Every entry under the cache root `root` (the directory given as
/// `RuntimeConfig::cache_dir`), in every engine's directory, its packs of
/// compiled functions included; `current` are the directories of this
/// runtime's engines ([`crate::Runtime::cache_dirs`]). Sorted by path. A
/// missing root has no entries.
pub fn entries(root: &Path, current: &[&Path]) -> std::io::Result<Vec<CompiledEntry>> {
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
        let is_current = current.iter().any(|c| *c == dir.path());
        list_dir(&dir.path(), is_current, false, &mut found)?;
        list_dir(
            &dir.path().join(functions::FUNCTIONS_DIR),
            is_current,
            true,
            &mut found,
        )?;
    }
    found.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(found)
}

/// The entries of one engine directory, or of its `functions/` (`packs`).
fn list_dir(
    dir: &Path,
    current: bool,
    packs: bool,
    found: &mut Vec<CompiledEntry>,
) -> std::io::Result<()> {
    let files = match std::fs::read_dir(dir) {
        Ok(files) => files,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for file in files {
        let file = file?;
        let path = file.path();
        let name = file.file_name();
        let name = name.to_string_lossy();
        let extension = if packs {
            functions::PACK_EXTENSION
        } else {
            "cwasm"
        };
        let kind = if path.extension().is_some_and(|e| e == extension) {
            if packs {
                EntryKind::Functions
            } else {
                EntryKind::Compiled
            }
        } else if name.starts_with(".tmp") {
            EntryKind::Partial
        } else {
            continue;
        };
        // Removed by another process since the listing: not an entry.
        let Ok(meta) = file.metadata() else { continue };
        let mut entry = CompiledEntry {
            kind,
            component: None,
            origin: None,
            functions: None,
            size: meta.len(),
            modified: meta.modified()?,
            current,
            path,
        };
        match kind {
            EntryKind::Compiled => {
                let meta_path = entry.path.with_extension("meta");
                if let Ok(text) = std::fs::read_to_string(&meta_path) {
                    entry.size += text.len() as u64;
                    entry.component = Meta::parse(&text).ok().map(|m| m.component);
                    // A hit sets the meta's time.
                    if let Ok(modified) = std::fs::metadata(&meta_path).and_then(|m| m.modified()) {
                        entry.modified = entry.modified.max(modified);
                    }
                }
                if entry.component.is_none() {
                    entry.component = read_old_header(&entry.path);
                }
                if let Ok(text) = std::fs::read_to_string(entry.path.with_extension("origin")) {
                    entry.size += text.len() as u64;
                    entry.origin = Some(text);
                }
            }
            EntryKind::Functions => entry.functions = functions::pack_count(&entry.path),
            EntryKind::Partial => {}
        }
        found.push(entry);
    }
    Ok(())
}

/// The component digest an entry of the previous layout (`skillhost-cwasm
/// 1`, a header line inside the `.cwasm`) names, for listing another host
/// build's entries.
fn read_old_header(path: &Path) -> Option<String> {
    let mut head = [0u8; 256];
    let mut file = File::open(path).ok()?;
    let n = file.read(&mut head).ok()?;
    let line = head[..n].split(|&b| b == b'\n').next()?;
    let rest = std::str::from_utf8(line)
        .ok()?
        .strip_prefix("skillhost-cwasm 1 ")?;
    Some(rest.split(' ').next()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn component(wat: &str) -> (Vec<u8>, String) {
        let bytes = wat::parse_str(wat).unwrap();
        let digest = sha256_hex(&bytes);
        (bytes, digest)
    }

    const ADD: &str = r#"(component
        (core module $m (func (export "add") (param i32) (result i32)
            local.get 0 i32.const 1 i32.add))
        (core instance (instantiate $m)))"#;

    /// Flips one byte of `path` in place, keeping its size, and puts its
    /// modification time back.
    fn tamper(path: &Path) {
        use std::os::unix::fs::FileExt as _;
        let before = std::fs::metadata(path).unwrap();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .read(true)
            .open(path)
            .unwrap();
        let at = before.len() / 2;
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, at).unwrap();
        file.write_all_at(&[byte[0] ^ 0x5a], at).unwrap();
        file.set_modified(before.modified().unwrap()).unwrap();
        let after = std::fs::metadata(path).unwrap();
        assert_eq!(
            (after.len(), after.modified().unwrap()),
            (before.len(), before.modified().unwrap())
        );
    }

    #[test]
    fn an_entry_is_used_only_for_its_component_and_unchanged() {
        let root = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = ComponentCache::new(Some(root.path().to_path_buf()), &engine, None);
        let (bytes, digest) = component(ADD);
        let load = || {
            cache
                .load(&engine, &bytes, &digest, "add.wasm")
                .unwrap()
                .1
                .source
        };
        assert_eq!(load(), LoadSource::Compiled);
        assert_eq!(load(), LoadSource::Cache);
        let paths = EntryPaths::new(cache.dir().unwrap(), &digest);
        let original = std::fs::read(&paths.artifact).unwrap();

        // Edited in place, same size and modification time: refused,
        // recompiled and replaced.
        tamper(&paths.artifact);
        let file = File::open(&paths.artifact).unwrap();
        let meta = Meta::parse(&std::fs::read_to_string(&paths.meta).unwrap()).unwrap();
        let why = verify(&file, &meta, Identity::of(&file).unwrap()).unwrap_err();
        assert!(why.contains("hashes to"), "{why}");
        assert_eq!(load(), LoadSource::Compiled);
        assert_eq!(std::fs::read(&paths.artifact).unwrap(), original);
        assert_eq!(load(), LoadSource::Cache);

        // The entry of another component under this one's name.
        let (other, other_digest) = component("(component)");
        let other_cache = ComponentCache::new(Some(root.path().to_path_buf()), &engine, None);
        other_cache
            .load(&engine, &other, &other_digest, "empty.wasm")
            .unwrap();
        let other_paths = EntryPaths::new(cache.dir().unwrap(), &other_digest);
        std::fs::copy(&other_paths.meta, &paths.meta).unwrap();
        let why = hit(&engine, &paths, &digest).unwrap_err();
        assert!(why.contains("compiled from component"), "{why}");
        assert_eq!(load(), LoadSource::Compiled);

        // A meta this host does not write, or a damaged identity line.
        std::fs::write(&paths.meta, "skillhost-cwasm 1 x y\n").unwrap();
        assert!(
            hit(&engine, &paths, &digest)
                .unwrap_err()
                .contains("not one this host writes")
        );
        let mut text = Meta::for_artifact(&digest, &original).to_text();
        text += "verified 1 2 three\n";
        std::fs::write(&paths.meta, text).unwrap();
        assert!(
            hit(&engine, &paths, &digest)
                .unwrap_err()
                .contains("identity")
        );
        assert_eq!(load(), LoadSource::Compiled);

        // Truncated: refused by its size before it is hashed.
        let len = std::fs::metadata(&paths.artifact).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&paths.artifact)
            .unwrap()
            .set_len(len - 1)
            .unwrap();
        assert!(
            hit(&engine, &paths, &digest)
                .unwrap_err()
                .contains("bytes, but")
        );
        assert_eq!(load(), LoadSource::Compiled);
    }

    #[test]
    fn a_recorded_identity_spares_the_hash_until_the_file_changes() {
        let root = tempfile::tempdir().unwrap();
        let engine = Engine::default();
        let cache = ComponentCache::new(Some(root.path().to_path_buf()), &engine, None);
        let (bytes, digest) = component(ADD);
        cache.load(&engine, &bytes, &digest, "add.wasm").unwrap();
        let paths = EntryPaths::new(cache.dir().unwrap(), &digest);
        let file = File::open(&paths.artifact).unwrap();
        let identity = Identity::of(&file).unwrap();
        // Just written: not settled, so a check now is not recorded.
        assert!(!identity.settled(SystemTime::now()));
        assert!(identity.settled(SystemTime::now() + SETTLED + Duration::from_millis(10)));
        assert_eq!(Identity::parse(&identity.to_line()), Some(identity));

        // A meta that records this identity with a wrong artifact digest:
        // trusted without hashing, which shows the hash is spared...
        let mut meta = Meta::for_artifact(&digest, &std::fs::read(&paths.artifact).unwrap());
        meta.artifact = "0".repeat(64);
        meta.verified = Some(identity);
        write_meta(&paths, &meta).unwrap();
        assert!(hit(&engine, &paths, &digest).unwrap().is_some());
        // ... until the file is written, even without a change of size or
        // modification time: its change time moved, so it is hashed again.
        tamper(&paths.artifact);
        let why = hit(&engine, &paths, &digest).unwrap_err();
        assert!(why.contains("hashes to"), "{why}");
    }

    /// An engine with a compiled-function store, and its cache in `root`:
    /// what a new process has.
    fn with_functions(root: &Path) -> (Engine, ComponentCache) {
        let functions = FunctionStore::new();
        let mut config = wasmtime::Config::new();
        config
            .enable_incremental_compilation(functions.clone())
            .unwrap();
        let engine = Engine::new(&config).unwrap();
        let cache = ComponentCache::new(Some(root.to_path_buf()), &engine, Some(functions));
        (engine, cache)
    }

    #[test]
    fn entries_are_listed_with_their_component_and_pruned_by_age() {
        let root = tempfile::tempdir().unwrap();
        let (engine, cache) = with_functions(root.path());
        let (bytes, digest) = component(ADD);
        let (_, stats) = cache.load(&engine, &bytes, &digest, "add.wasm").unwrap();
        assert!(stats.functions.compiled > 0, "{stats:?}");
        let dir = cache.dir().unwrap();
        // An entry being written, and one of another host build.
        std::fs::write(dir.join(".tmpABC123"), b"half").unwrap();
        let other = root.path().join("0123456789abcdef");
        std::fs::create_dir(&other).unwrap();
        std::fs::write(other.join("ff.cwasm"), b"skillhost-cwasm 1 ff 00\nold").unwrap();

        let listed = entries(root.path(), &[dir]).unwrap();
        assert_eq!(listed.len(), 4, "{listed:?}");
        let compiled: Vec<_> = listed
            .iter()
            .filter(|e| e.kind == EntryKind::Compiled && e.current)
            .collect();
        assert_eq!(compiled.len(), 1);
        assert_eq!(compiled[0].component.as_deref(), Some(digest.as_str()));
        assert_eq!(compiled[0].origin.as_deref(), Some("add.wasm"));
        let pack = listed
            .iter()
            .find(|e| e.kind == EntryKind::Functions)
            .unwrap();
        assert!(pack.current);
        assert_eq!(pack.functions, Some(stats.functions.compiled));
        let old = listed.iter().find(|e| !e.current).unwrap();
        assert_eq!(old.component.as_deref(), Some("ff"));

        let now = SystemTime::now();
        let later = now + Duration::from_secs(40 * 86400);
        let partial = listed
            .iter()
            .find(|e| e.kind == EntryKind::Partial)
            .unwrap();
        // Never a file being written, even with `all`.
        assert!(!partial.prunable(now, Duration::ZERO, true));
        assert!(partial.prunable(later, Duration::from_secs(30 * 86400), false));
        for entry in [compiled[0], pack] {
            assert!(!entry.prunable(now, Duration::from_secs(86400), false));
            assert!(entry.prunable(now, Duration::from_secs(86400), true));
            assert!(entry.prunable(later, Duration::from_secs(30 * 86400), false));
        }

        compiled[0].remove().unwrap();
        compiled[0].remove().unwrap();
        pack.remove().unwrap();
        for extension in ["meta", "origin"] {
            assert!(!dir.join(format!("{digest}.{extension}")).exists());
        }
        assert_eq!(entries(root.path(), &[dir]).unwrap().len(), 2);
        // A new process compiles it again from scratch: nothing left to
        // reuse.
        let (engine, cache) = with_functions(root.path());
        let (_, stats) = cache.load(&engine, &bytes, &digest, "add.wasm").unwrap();
        assert_eq!(
            (stats.source, stats.functions.reused),
            (LoadSource::Compiled, 0)
        );
    }
}
