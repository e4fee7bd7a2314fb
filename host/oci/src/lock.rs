//! `scenario.lock`: the digest each registry component of a scenario was
//! resolved to by `host lock`, written beside the scenario (`NAME.lock` for
//! `NAME.toml`), so every run of it runs the same code:
//!
//! ```toml
//! version = 1
//!
//! [[component]]
//! alias = "search"
//! reference = "oci://127.0.0.1:5000/skills/paper-discovery:0.1.0"
//! digest = "sha256:…"   # the manifest
//! layer = "sha256:…"    # the component it names
//! size = 187342         # the component's bytes
//! ```
//!
//! Owns: the format, reading it with errors that name the file, and writing
//! it atomically. Must not: reach a registry.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{OciError, Result};
use crate::reference::parse_digest;

const VERSION: u32 = 1;

/// A scenario's lock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Lock {
    pub version: u32,
    #[serde(default, rename = "component")]
    pub components: Vec<LockedComponent>,
}

/// One registry component, pinned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LockedComponent {
    pub alias: String,
    /// As the scenario writes it (`oci://…`).
    pub reference: String,
    /// The manifest's digest.
    pub digest: String,
    /// The component layer's digest.
    pub layer: String,
    /// The component's size in bytes.
    pub size: u64,
}

/// The lock file of the scenario at `scenario` (`x/NAME.toml` → `x/NAME.lock`).
pub fn lock_path(scenario: &Path) -> PathBuf {
    scenario.with_extension("lock")
}

impl Lock {
    pub fn new(mut components: Vec<LockedComponent>) -> Lock {
        components.sort_by(|a, b| a.alias.cmp(&b.alias));
        Lock {
            version: VERSION,
            components,
        }
    }

    /// Reads the lock at `path`; `None` when there is none.
    pub fn read(path: &Path) -> Result<Option<Lock>> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(OciError::file(path, format!("cannot read the lock: {e}"))),
        };
        let redo = "delete it and run `host lock` on the scenario to write it again";
        let lock: Lock = toml::from_str(&text)
            .map_err(|e| OciError::file(path, format!("not a lock ({}); {redo}", e.message())))?;
        if lock.version != VERSION {
            return Err(OciError::file(
                path,
                format!(
                    "lock version {} is not {VERSION}, the one this host reads; {redo}",
                    lock.version
                ),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        for c in &lock.components {
            if !seen.insert(c.alias.as_str()) {
                return Err(OciError::file(
                    path,
                    format!("skill `{}` is locked twice; {redo}", c.alias),
                ));
            }
            for digest in [&c.digest, &c.layer] {
                parse_digest(digest).map_err(|e| {
                    OciError::file(path, format!("skill `{}`: {e}; {redo}", c.alias))
                })?;
            }
        }
        Ok(Some(lock))
    }

    /// The entry for `alias`.
    pub fn get(&self, alias: &str) -> Option<&LockedComponent> {
        self.components.iter().find(|c| c.alias == alias)
    }

    /// Writes the lock to `path` (a temporary file renamed into place).
    pub fn write(&self, path: &Path) -> Result<()> {
        let mut text = String::from(
            "# Written by `host lock`: the digest every registry component of the scenario\n\
             # resolved to. `host run` and `host check` run these; commit it with the scenario.\n",
        );
        text.push_str(&toml::to_string(self).map_err(|e| OciError::file(path, e))?);
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut file = tempfile::NamedTempFile::new_in(dir)
            .map_err(|e| OciError::file(path, format!("cannot write the lock: {e}")))?;
        file.write_all(text.as_bytes())
            .map_err(|e| OciError::file(path, format!("cannot write the lock: {e}")))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let _ = file
                .as_file()
                .set_permissions(std::fs::Permissions::from_mode(0o644));
        }
        file.persist(path)
            .map_err(|e| OciError::file(path, format!("cannot write the lock: {}", e.error)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(alias: &str) -> LockedComponent {
        LockedComponent {
            alias: alias.to_string(),
            reference: format!("oci://127.0.0.1:5000/skills/{alias}:1"),
            digest: format!("sha256:{}", "a".repeat(64)),
            layer: format!("sha256:{}", "b".repeat(64)),
            size: 42,
        }
    }

    #[test]
    fn round_trips_and_names_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let path = lock_path(&dir.path().join("scenario.toml"));
        assert_eq!(path.file_name().unwrap(), "scenario.lock");
        assert_eq!(Lock::read(&path).unwrap(), None);
        let lock = Lock::new(vec![entry("zeta"), entry("alpha")]);
        lock.write(&path).unwrap();
        let back = Lock::read(&path).unwrap().unwrap();
        assert_eq!(back, lock);
        assert_eq!(back.components[0].alias, "alpha");
        assert_eq!(back.get("zeta").unwrap().size, 42);

        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, text.replace("version = 1", "version = 9")).unwrap();
        let err = Lock::read(&path).unwrap_err().to_string();
        assert!(
            err.contains("lock version 9") && err.contains("host lock"),
            "{err}"
        );
        std::fs::write(&path, text.replace(&"a".repeat(64), "xyz")).unwrap();
        let err = Lock::read(&path).unwrap_err().to_string();
        assert!(
            err.contains("skill `alpha`") && err.contains("digest"),
            "{err}"
        );
        std::fs::write(&path, "version = 1\n[[component]]\nalias = 1\n").unwrap();
        let err = Lock::read(&path).unwrap_err().to_string();
        assert!(err.contains("not a lock"), "{err}");
    }
}
