//! The host config: what this machine decides about registries. The `host`
//! binary reads it from the file the runtime's configuration lookup found
//! (`skillhost.toml` beside the scenario or in the current directory, else
//! `$SKILLHOST_CONFIG`, else the user's `config.toml`), whose `[llm]` the
//! runtime reads; [`default_config_path`] is that lookup without the
//! project file, for a caller without one (a missing file is an empty
//! config):
//!
//! ```toml
//! [registries]
//! insecure = ["registry.internal:5000"]   # plain HTTP besides loopback
//!
//! [trust]
//! keys = ["keys/publisher.pub"]           # relative to this file
//! ```
//!
//! Owns: the file's format and its errors. Must not: reach a registry.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{OciError, Result};

/// The host config.
#[derive(Debug, Clone, Default)]
pub struct HostConfig {
    /// The file it was read from, if any.
    pub path: Option<PathBuf>,
    /// Registries reached over plain HTTP although not on loopback.
    pub insecure_registries: Vec<String>,
    /// Public keys a component must be signed by (none: no policy).
    pub trust_keys: Vec<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    registries: Registries,
    #[serde(default)]
    trust: Trust,
    /// `[llm]`: the model providers, in the same file; the runtime reads
    /// and checks them (`skillhost_runtime::config`), so they are accepted
    /// here unread.
    #[serde(default, rename = "llm")]
    _llm: Option<toml::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Registries {
    #[serde(default)]
    insecure: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Trust {
    #[serde(default)]
    keys: Vec<String>,
}

/// Where the host config is read from.
pub fn default_config_path() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SKILLHOST_CONFIG") {
        return Some(PathBuf::from(path));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("skillhost").join("config.toml"))
}

impl HostConfig {
    /// The config at [`default_config_path`]; empty when there is none.
    pub fn load_default() -> Result<HostConfig> {
        match default_config_path() {
            Some(path) => HostConfig::load(&path),
            None => Ok(HostConfig::default()),
        }
    }

    /// The config at `path`; empty when the file does not exist, unless it
    /// was named by `SKILLHOST_CONFIG` (a name given and not found is a
    /// mistake worth saying).
    pub fn load(path: &Path) -> Result<HostConfig> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && std::env::var_os("SKILLHOST_CONFIG").is_none() =>
            {
                return Ok(HostConfig::default());
            }
            Err(e) => {
                return Err(OciError::file(
                    path,
                    format!("cannot read the host config: {e}"),
                ));
            }
        };
        HostConfig::parse(&text, path)
    }

    /// Parses the text of the config at `path`.
    pub fn parse(text: &str, path: &Path) -> Result<HostConfig> {
        let file: File = toml::from_str(text).map_err(|e| {
            OciError::file(
                path,
                format!(
                    "not a host config: {}. It takes [registries] insecure = [\"HOST:PORT\"] and \
                     [trust] keys = [\"FILE.pub\"]",
                    e.message()
                ),
            )
        })?;
        for registry in &file.registries.insecure {
            if registry.is_empty() || registry.contains('/') || registry.contains("://") {
                return Err(OciError::file(
                    path,
                    format!(
                        "[registries] insecure: `{registry}` is not HOST[:PORT] (no scheme, no path)"
                    ),
                ));
            }
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        Ok(HostConfig {
            path: Some(path.to_path_buf()),
            insecure_registries: file.registries.insecure,
            trust_keys: file.trust.keys.iter().map(|k| dir.join(k)).collect(),
        })
    }

    /// True when `registry` may be reached over plain HTTP.
    pub fn allows_http(&self, registry: &str) -> bool {
        crate::reference::is_loopback_registry(registry)
            || self.insecure_registries.iter().any(|r| r == registry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_insecure_registries_and_trust_keys() {
        let path = Path::new("/etc/skillhost/config.toml");
        let config = HostConfig::parse(
            "[registries]\ninsecure = [\"reg.lan:5000\"]\n[trust]\nkeys = [\"a.pub\", \"/k/b.pub\"]\n",
            path,
        )
        .unwrap();
        assert!(config.allows_http("reg.lan:5000"));
        assert!(config.allows_http("127.0.0.1:5000"));
        assert!(config.allows_http("localhost:1"));
        assert!(!config.allows_http("ghcr.io"));
        assert_eq!(
            config.trust_keys,
            vec![
                PathBuf::from("/etc/skillhost/a.pub"),
                PathBuf::from("/k/b.pub")
            ]
        );
        // The same file's `[llm]` is the runtime's, and left to it.
        let both = HostConfig::parse(
            "[llm.providers.local]\nkind = \"openai\"\n\n[registries]\ninsecure = [\"reg.lan:5000\"]\n",
            path,
        )
        .unwrap();
        assert!(both.allows_http("reg.lan:5000"));
        let err = HostConfig::parse("[registry]\n", path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a host config"), "{err}");
        let err = HostConfig::parse("[registries]\ninsecure = [\"http://x\"]\n", path)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no scheme"), "{err}");
    }
}
