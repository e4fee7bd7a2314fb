//! The registry cache: a content-addressed store of what was pulled
//! (`blobs/sha256/<hex>`: manifests, configs, components, signatures), and
//! the tag each reference last resolved to (`tags/<sha256 of the
//! reference>`), so a run can go on with the registry unreachable.
//!
//! Owns: the directory, writing a blob only once its bytes hash to its
//! digest (streamed through a temporary file in the same directory and
//! renamed into place, so a reader never sees half a blob and a blob that
//! does not match is never stored), and checking a blob's digest again
//! before it is used. Must not: talk to a registry.
//!
//! For `host cache list|prune`: [`Cache::entries`] lists the blobs, each
//! with what it is to the tags recorded here (a component, manifest, config
//! of `REF`), the temporary files being written, and the tag records;
//! [`RegistryEntry::remove`] unlinks one. A blob's age is the time since it
//! was stored (pulls of a stored blob do not touch it). Unlinking is safe
//! while another process reads: an open blob stays readable, and one found
//! missing is pulled again (or, offline, reported as not cached). A tag
//! whose manifest is pruned is pruned with it.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{OciError, Result};
use crate::reference::{ComponentRef, parse_digest};

/// Where the cache lives when nothing else is said:
/// `$SKILLHOST_REGISTRY_CACHE`, else `$XDG_CACHE_HOME/skillhost/registry`,
/// else `$HOME/.cache/skillhost/registry` (beside the compiled components
/// of `skillhost_runtime::default_cache_dir`).
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SKILLHOST_REGISTRY_CACHE") {
        return Some(PathBuf::from(dir));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("skillhost").join("registry"))
}

/// The registry cache at one directory.
#[derive(Debug, Clone)]
pub struct Cache {
    root: PathBuf,
}

/// What a tag was last seen to point at.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct TagRecord {
    reference: String,
    digest: String,
}

impl Cache {
    /// The cache at `root`, created if missing.
    pub fn open(root: impl Into<PathBuf>) -> Result<Cache> {
        let root = root.into();
        for dir in [root.join("blobs").join("sha256"), root.join("tags")] {
            std::fs::create_dir_all(&dir).map_err(|e| {
                OciError::cache(&root, format!("cannot create `{}`: {e}", dir.display()))
            })?;
        }
        Ok(Cache { root })
    }

    /// The cache at [`default_cache_dir`].
    pub fn open_default() -> Result<Cache> {
        let dir = default_cache_dir().ok_or_else(|| {
            OciError::cache(
                "~/.cache/skillhost/registry",
                "neither SKILLHOST_REGISTRY_CACHE, XDG_CACHE_HOME nor HOME is set; set \
                 SKILLHOST_REGISTRY_CACHE or pass --registry-cache",
            )
        })?;
        Cache::open(dir)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where the blob `digest` is (or would be) stored.
    pub fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        let digest = parse_digest(digest).map_err(|e| OciError::cache(&self.root, e))?;
        Ok(self
            .root
            .join("blobs")
            .join("sha256")
            .join(&digest["sha256:".len()..]))
    }

    /// True when the blob is stored (not yet verified).
    pub fn has_blob(&self, digest: &str) -> bool {
        self.blob_path(digest).is_ok_and(|p| p.is_file())
    }

    /// The path of the blob `digest` after hashing it again; a blob whose
    /// bytes no longer match (damaged on disk) is removed and reported, so
    /// the next pull fetches it anew. `None` when it is not stored.
    pub fn verified_blob(&self, digest: &str) -> Result<Option<PathBuf>> {
        let path = self.blob_path(digest)?;
        let mut file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(OciError::cache(&path, e)),
        };
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = file.read(&mut buf).map_err(|e| OciError::cache(&path, e))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        let actual = format!("sha256:{}", hex::encode(hasher.finalize()));
        if actual != digest {
            let _ = std::fs::remove_file(&path);
            return Err(OciError::cache(
                &path,
                format!(
                    "the stored blob {digest} hashes to {actual} (damaged on disk); it was \
                     removed, pull it again"
                ),
            ));
        }
        Ok(Some(path))
    }

    /// The bytes of the blob `digest`, verified; `None` when not stored.
    pub fn read_blob(&self, digest: &str) -> Result<Option<Vec<u8>>> {
        let path = self.blob_path(digest)?;
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(OciError::cache(&path, e)),
        };
        let actual = crate::layout::digest_of(&bytes);
        if actual != digest {
            let _ = std::fs::remove_file(&path);
            return Err(OciError::cache(
                &path,
                format!(
                    "the stored blob {digest} hashes to {actual} (damaged on disk); it was \
                     removed, pull it again"
                ),
            ));
        }
        Ok(Some(bytes))
    }

    /// Stores `bytes` as the blob `digest` after checking they hash to it.
    pub fn put_blob(&self, digest: &str, bytes: &[u8], reference: &str) -> Result<PathBuf> {
        let mut writer = self.writer(digest, reference, "blob")?;
        writer.write(bytes)?;
        writer.finish()
    }

    /// A writer that streams the blob `digest` into the cache.
    pub fn writer(&self, digest: &str, reference: &str, what: &'static str) -> Result<BlobWriter> {
        let path = self.blob_path(digest)?;
        let dir = path.parent().expect("a blob path has a directory");
        let file = tempfile::Builder::new()
            .prefix(".partial-")
            .tempfile_in(dir)
            .map_err(|e| OciError::cache(dir, format!("cannot create a temporary file: {e}")))?;
        Ok(BlobWriter {
            file,
            hasher: Sha256::new(),
            written: 0,
            path,
            digest: digest.to_string(),
            reference: reference.to_string(),
            what,
        })
    }

    /// Records that `reference` (a tag) resolved to `digest`.
    pub fn record_tag(&self, reference: &ComponentRef, digest: &str) -> Result<()> {
        let Some(tagged) = reference.without_digest() else {
            return Ok(());
        };
        let record = TagRecord {
            reference: tagged.to_string(),
            digest: digest.to_string(),
        };
        let path = self.tag_path(&tagged);
        let dir = path.parent().expect("a tag path has a directory");
        let mut file = tempfile::NamedTempFile::new_in(dir).map_err(|e| OciError::cache(dir, e))?;
        file.write_all(&serde_json::to_vec(&record).expect("a tag record serialises"))
            .map_err(|e| OciError::cache(&path, e))?;
        file.persist(&path)
            .map_err(|e| OciError::cache(&path, e.error))?;
        Ok(())
    }

    /// The digest `reference` (a tag) last resolved to here.
    pub fn tag(&self, reference: &ComponentRef) -> Result<Option<String>> {
        let Some(tagged) = reference.without_digest() else {
            return Ok(None);
        };
        let path = self.tag_path(&tagged);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(OciError::cache(&path, e)),
        };
        let record: TagRecord = serde_json::from_slice(&text)
            .map_err(|e| OciError::cache(&path, format!("unreadable tag record: {e}")))?;
        // The file name is a hash of the reference: a record for another
        // reference is damage, not an answer.
        if record.reference != tagged.to_string() || parse_digest(&record.digest).is_err() {
            return Err(OciError::cache(
                &path,
                format!("the tag record does not belong to `{tagged}`; delete it"),
            ));
        }
        Ok(Some(record.digest))
    }

    fn tag_path(&self, tagged: &ComponentRef) -> PathBuf {
        let key = hex::encode(Sha256::digest(tagged.to_string().as_bytes()));
        self.root.join("tags").join(key)
    }
}

/// How long a temporary file may be written before it is taken for the
/// leftover of a pull that died.
pub const PARTIAL_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// What a file of the registry cache is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EntryKind {
    /// `blobs/sha256/HEX`.
    Blob,
    /// A blob being written (`.partial-*`), or left by a pull that died.
    Partial,
    /// `tags/HASH`: the digest a reference last resolved to.
    Tag,
}

/// One file of the registry cache.
#[derive(Debug, Clone)]
pub struct RegistryEntry {
    pub path: PathBuf,
    pub kind: EntryKind,
    /// A blob's digest (`sha256:HEX`), or the manifest a tag points at.
    pub digest: Option<String>,
    /// What it is to the tags recorded here: `component of REF`,
    /// `manifest of REF`, `config of REF`; for a tag, its reference.
    pub role: Option<String>,
    pub size: u64,
    pub modified: std::time::SystemTime,
}

impl RegistryEntry {
    /// Time since it was stored, zero if the clock says the future.
    pub fn age(&self, now: std::time::SystemTime) -> std::time::Duration {
        now.duration_since(self.modified).unwrap_or_default()
    }

    /// Whether `prune` removes it: a blob when `all` or at least
    /// `older_than` old; a temporary file only past [`PARTIAL_GRACE`] too;
    /// a tag record only with `all` (a tag whose manifest goes is removed
    /// by [`Cache::prune_dangling_tags`]).
    pub fn prunable(
        &self,
        now: std::time::SystemTime,
        older_than: std::time::Duration,
        all: bool,
    ) -> bool {
        let age = self.age(now);
        match self.kind {
            EntryKind::Blob => all || age >= older_than,
            EntryKind::Partial => age >= PARTIAL_GRACE && (all || age >= older_than),
            EntryKind::Tag => all,
        }
    }

    /// Unlinks it; one already gone is not an error.
    pub fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// The parts of a manifest `entries` reads to name its blobs.
#[derive(Deserialize)]
struct ManifestDigests {
    config: Option<Described>,
    #[serde(default)]
    layers: Vec<Described>,
}

#[derive(Deserialize)]
struct Described {
    digest: String,
}

impl Cache {
    /// Every file of the cache: blobs (named by the tags recorded here where
    /// one leads to them), temporary files and tag records, sorted by kind
    /// and path.
    pub fn entries(&self) -> Result<Vec<RegistryEntry>> {
        let io = |path: &Path, e: std::io::Error| OciError::cache(path, e);
        let mut entries = Vec::new();
        let tags_dir = self.root.join("tags");
        let mut roles: std::collections::HashMap<String, String> = Default::default();
        for file in std::fs::read_dir(&tags_dir).map_err(|e| io(&tags_dir, e))? {
            let file = file.map_err(|e| io(&tags_dir, e))?;
            let path = file.path();
            let Ok(meta) = file.metadata() else { continue };
            let record: Option<TagRecord> = std::fs::read(&path)
                .ok()
                .and_then(|text| serde_json::from_slice(&text).ok());
            if let Some(record) = &record {
                roles.insert(
                    record.digest.clone(),
                    format!("manifest of {}", record.reference),
                );
                let manifest = self
                    .blob_path(&record.digest)
                    .ok()
                    .and_then(|p| std::fs::read(p).ok())
                    .and_then(|m| serde_json::from_slice::<ManifestDigests>(&m).ok());
                if let Some(manifest) = manifest {
                    if let Some(config) = manifest.config {
                        roles.insert(config.digest, format!("config of {}", record.reference));
                    }
                    for layer in manifest.layers {
                        roles.insert(layer.digest, format!("component of {}", record.reference));
                    }
                }
            }
            entries.push(RegistryEntry {
                path,
                kind: EntryKind::Tag,
                digest: record.as_ref().map(|r| r.digest.clone()),
                role: record.map(|r| r.reference),
                size: meta.len(),
                modified: meta.modified().map_err(|e| io(&file.path(), e))?,
            });
        }
        let blobs = self.root.join("blobs").join("sha256");
        for file in std::fs::read_dir(&blobs).map_err(|e| io(&blobs, e))? {
            let file = file.map_err(|e| io(&blobs, e))?;
            let name = file.file_name().to_string_lossy().into_owned();
            let (kind, digest) = if name.starts_with(".partial-") {
                (EntryKind::Partial, None)
            } else if parse_digest(&format!("sha256:{name}")).is_ok() {
                (EntryKind::Blob, Some(format!("sha256:{name}")))
            } else {
                continue;
            };
            // Removed by another process since the listing: not an entry.
            let Ok(meta) = file.metadata() else { continue };
            entries.push(RegistryEntry {
                path: file.path(),
                kind,
                role: digest.as_ref().and_then(|d| roles.get(d).cloned()),
                digest,
                size: meta.len(),
                modified: meta.modified().map_err(|e| io(&file.path(), e))?,
            });
        }
        entries.sort_by(|a, b| (a.kind as u8, &a.path).cmp(&(b.kind as u8, &b.path)));
        Ok(entries)
    }

    /// Removes the tag records whose manifest is no longer stored (after a
    /// prune), so the cache never claims a tag it cannot serve; returns
    /// them. With `dry_run`, `removed` (the blobs a prune would remove) are
    /// taken as gone and nothing is deleted.
    pub fn prune_dangling_tags(
        &self,
        removed: &[String],
        dry_run: bool,
    ) -> Result<Vec<RegistryEntry>> {
        let mut dangling = Vec::new();
        for entry in self.entries()? {
            if entry.kind != EntryKind::Tag {
                continue;
            }
            let gone = match &entry.digest {
                Some(digest) => removed.contains(digest) || !self.has_blob(digest),
                None => false,
            };
            if gone {
                if !dry_run {
                    entry
                        .remove()
                        .map_err(|e| OciError::cache(&entry.path, e))?;
                }
                dangling.push(entry);
            }
        }
        Ok(dangling)
    }
}

/// A blob being streamed into the cache; dropped without
/// [`finish`](BlobWriter::finish), it leaves nothing behind.
pub struct BlobWriter {
    file: tempfile::NamedTempFile,
    hasher: Sha256,
    written: u64,
    path: PathBuf,
    digest: String,
    reference: String,
    what: &'static str,
}

impl BlobWriter {
    pub fn write(&mut self, chunk: &[u8]) -> Result<()> {
        self.hasher.update(chunk);
        self.written += chunk.len() as u64;
        self.file
            .write_all(chunk)
            .map_err(|e| OciError::cache(&self.path, e))
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// Checks the digest, then renames the blob into place.
    pub fn finish(self) -> Result<PathBuf> {
        let actual = format!("sha256:{}", hex::encode(self.hasher.finalize()));
        if actual != self.digest {
            return Err(OciError::DigestMismatch {
                reference: self.reference,
                what: self.what,
                expected: self.digest,
                actual,
            });
        }
        let path = self.path;
        self.file
            .persist(&path)
            .map_err(|e| OciError::cache(&path, e.error))?;
        Ok(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::digest_of;

    #[test]
    fn stores_only_what_matches_and_checks_it_again() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let digest = digest_of(b"hello");
        assert!(cache.read_blob(&digest).unwrap().is_none());

        let err = cache.put_blob(&digest, b"jello", "r:1").unwrap_err();
        assert!(matches!(err, OciError::DigestMismatch { .. }), "{err}");
        assert!(!cache.has_blob(&digest));
        // Nothing half-written is left beside the blobs.
        let leftovers = std::fs::read_dir(dir.path().join("blobs/sha256"))
            .unwrap()
            .count();
        assert_eq!(leftovers, 0);

        let path = cache.put_blob(&digest, b"hello", "r:1").unwrap();
        assert_eq!(cache.read_blob(&digest).unwrap().unwrap(), b"hello");
        assert_eq!(cache.verified_blob(&digest).unwrap().unwrap(), path);

        std::fs::write(&path, b"HELLO").unwrap();
        let err = cache.verified_blob(&digest).unwrap_err().to_string();
        assert!(err.contains("damaged on disk"), "{err}");
        assert!(!cache.has_blob(&digest), "a damaged blob is removed");
    }

    #[test]
    fn remembers_tags_and_refuses_bad_digests_as_paths() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let r = ComponentRef::parse("127.0.0.1:5000/skills/echo:1").unwrap();
        assert_eq!(cache.tag(&r).unwrap(), None);
        let digest = digest_of(b"m");
        cache.record_tag(&r, &digest).unwrap();
        assert_eq!(cache.tag(&r).unwrap(), Some(digest.clone()));
        assert_eq!(cache.tag(&r.pinned(&digest)).unwrap(), Some(digest));
        assert!(cache.blob_path("sha256:../../etc/passwd").is_err());
    }

    #[test]
    fn entries_name_their_blobs_by_tag_and_a_pruned_manifest_takes_its_tag() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let layer = digest_of(b"component bytes");
        let config = digest_of(b"{}");
        let manifest = format!(
            r#"{{"config": {{"digest": "{config}"}}, "layers": [{{"digest": "{layer}"}}]}}"#
        );
        let manifest_digest = digest_of(manifest.as_bytes());
        cache.put_blob(&layer, b"component bytes", "r").unwrap();
        cache.put_blob(&config, b"{}", "r").unwrap();
        cache
            .put_blob(&manifest_digest, manifest.as_bytes(), "r")
            .unwrap();
        let r = ComponentRef::parse("127.0.0.1:5000/skills/echo:1").unwrap();
        cache.record_tag(&r, &manifest_digest).unwrap();
        std::fs::write(dir.path().join("blobs/sha256/.partial-x"), b"half").unwrap();

        let entries = cache.entries().unwrap();
        let role = |digest: &str| {
            entries
                .iter()
                .find(|e| e.kind == EntryKind::Blob && e.digest.as_deref() == Some(digest))
                .and_then(|e| e.role.clone())
                .unwrap()
        };
        assert_eq!(role(&layer), "component of 127.0.0.1:5000/skills/echo:1");
        assert_eq!(role(&config), "config of 127.0.0.1:5000/skills/echo:1");
        assert_eq!(
            role(&manifest_digest),
            "manifest of 127.0.0.1:5000/skills/echo:1"
        );
        let partial = entries
            .iter()
            .find(|e| e.kind == EntryKind::Partial)
            .unwrap();
        let now = std::time::SystemTime::now();
        assert!(!partial.prunable(now, std::time::Duration::ZERO, true));

        // A dry run removes nothing.
        let would = cache
            .prune_dangling_tags(std::slice::from_ref(&manifest_digest), true)
            .unwrap();
        assert_eq!(would.len(), 1);
        assert!(cache.tag(&r).unwrap().is_some());
        let manifest_entry = entries
            .iter()
            .find(|e| {
                e.digest.as_deref() == Some(manifest_digest.as_str()) && e.kind == EntryKind::Blob
            })
            .unwrap();
        manifest_entry.remove().unwrap();
        assert_eq!(cache.prune_dangling_tags(&[], false).unwrap().len(), 1);
        assert_eq!(cache.tag(&r).unwrap(), None);
    }
}
