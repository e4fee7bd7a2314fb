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
//! max_component_bytes = 268435456         # the largest component pulled
//! pull_timeout_ms = 300000                # one pull, start to end
//! redirects = { "registry.internal:5000" = ["blobs.internal"] }
//!
//! [trust]
//! keys = ["keys/publisher.pub"]           # relative to this file
//! ```
//!
//! Owns: the file's format and its errors, and the limits a pull is held to
//! ([`PullLimits`]) and where a registry may send it ([`HostConfig::redirect_allowed`]).
//! Must not: reach a registry.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{OciError, Result};

/// The largest manifest read, as containerd and Docker cap it.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// The largest component pulled unless `[registries] max_component_bytes`
/// says otherwise.
pub const DEFAULT_MAX_COMPONENT_BYTES: u64 = 256 << 20;
/// How long one pull may take unless `[registries] pull_timeout_ms` says
/// otherwise: resolving, every blob, the signatures.
pub const DEFAULT_PULL_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest `pull_timeout_ms` (a day).
pub const MAX_PULL_TIMEOUT_MS: u64 = 86_400_000;

/// The hosts a registry's answers may redirect to besides its own origin,
/// where well-known registries keep their blobs; `[registries] redirects`
/// adds to them.
pub const KNOWN_BLOB_HOSTS: &[(&str, &str)] = &[
    ("ghcr.io", "pkg-containers.githubusercontent.com"),
    ("docker.io", "production.cloudflare.docker.com"),
    ("registry-1.docker.io", "production.cloudflare.docker.com"),
];

/// The host config.
#[derive(Debug, Clone, Default)]
pub struct HostConfig {
    /// The file it was read from, if any.
    pub path: Option<PathBuf>,
    /// Registries reached over plain HTTP although not on loopback.
    pub insecure_registries: Vec<String>,
    /// Public keys a component must be signed by (none: no policy).
    pub trust_keys: Vec<PathBuf>,
    /// What one pull may take.
    pub limits: PullLimits,
    /// Per registry, the hosts (`HOST[:PORT]` or `*.DOMAIN`) its answers
    /// may redirect to besides its own origin ([`KNOWN_BLOB_HOSTS`] too).
    pub redirects: Vec<(String, Vec<String>)>,
}

/// What one pull may take: the manifest is capped at
/// [`MAX_MANIFEST_BYTES`] whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PullLimits {
    /// The largest component, checked against the manifest's declared size
    /// before it is downloaded and against the bytes while they stream.
    pub max_component_bytes: u64,
    /// How long one pull may take, start to end.
    pub pull_timeout: Duration,
}

impl Default for PullLimits {
    fn default() -> Self {
        PullLimits {
            max_component_bytes: DEFAULT_MAX_COMPONENT_BYTES,
            pull_timeout: DEFAULT_PULL_TIMEOUT,
        }
    }
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
    /// `[telemetry]`: `skillhost-telemetry`'s, accepted here unread.
    #[serde(default, rename = "telemetry")]
    _telemetry: Option<toml::Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Registries {
    #[serde(default)]
    insecure: Vec<String>,
    max_component_bytes: Option<u64>,
    pull_timeout_ms: Option<u64>,
    #[serde(default)]
    redirects: toml::Table,
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
                    "not a host config: {}. It takes [registries] insecure = [\"HOST:PORT\"], \
                     max_component_bytes, pull_timeout_ms and redirects = {{ \"REGISTRY\" = \
                     [\"HOST\"] }}, and [trust] keys = [\"FILE.pub\"]",
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
        let bad = |cause: String| OciError::file(path, format!("[registries] {cause}"));
        let mut limits = PullLimits::default();
        if let Some(bytes) = file.registries.max_component_bytes {
            if bytes == 0 {
                return Err(bad(
                    "max_component_bytes must be a number of bytes above 0, e.g. 268435456 \
                     (256 MiB)"
                        .into(),
                ));
            }
            limits.max_component_bytes = bytes;
        }
        if let Some(ms) = file.registries.pull_timeout_ms {
            if !(1..=MAX_PULL_TIMEOUT_MS).contains(&ms) {
                return Err(bad(format!(
                    "pull_timeout_ms must be from 1 to {MAX_PULL_TIMEOUT_MS} (a day), not {ms}"
                )));
            }
            limits.pull_timeout = Duration::from_millis(ms);
        }
        let mut redirects = Vec::new();
        for (registry, hosts) in &file.registries.redirects {
            let hosts = hosts
                .as_array()
                .and_then(|hosts| {
                    hosts
                        .iter()
                        .map(|h| h.as_str().map(str::to_string))
                        .collect::<Option<Vec<String>>>()
                })
                .ok_or_else(|| {
                    bad(format!(
                        "redirects: `{registry}` must name a list of hosts, e.g. \
                         `\"{registry}\" = [\"blobs.example.org\"]`"
                    ))
                })?;
            for host in &hosts {
                check_redirect_host(host)
                    .map_err(|why| bad(format!("redirects: `{host}` (for `{registry}`) {why}")))?;
            }
            redirects.push((registry.clone(), hosts));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        Ok(HostConfig {
            path: Some(path.to_path_buf()),
            insecure_registries: file.registries.insecure,
            trust_keys: file.trust.keys.iter().map(|k| dir.join(k)).collect(),
            limits,
            redirects,
        })
    }

    /// True when an answer of `registry` may redirect to `host_port`
    /// (`HOST[:PORT]` of the target, the port given only when it is not the
    /// scheme's default): listed for it in `[registries] redirects`, or a
    /// well-known blob host of it ([`KNOWN_BLOB_HOSTS`]).
    pub fn redirect_allowed(&self, registry: &str, host_port: &str) -> bool {
        let host_port = host_port.to_ascii_lowercase();
        let listed = self
            .redirects
            .iter()
            .filter(|(r, _)| r == registry)
            .flat_map(|(_, hosts)| hosts.iter().map(String::as_str));
        let known = KNOWN_BLOB_HOSTS
            .iter()
            .filter(|(r, _)| *r == registry)
            .map(|(_, host)| *host);
        listed.chain(known).any(|pattern| {
            let pattern = pattern.to_ascii_lowercase();
            match pattern.strip_prefix("*.") {
                Some(domain) => host_port
                    .strip_suffix(domain)
                    .is_some_and(|rest| rest.len() > 1 && rest.ends_with('.')),
                None => pattern == host_port,
            }
        })
    }

    /// True when `registry` may be reached over plain HTTP.
    pub fn allows_http(&self, registry: &str) -> bool {
        crate::reference::is_loopback_registry(registry)
            || self.insecure_registries.iter().any(|r| r == registry)
    }
}

/// A host a registry may redirect to: `HOST`, `HOST:PORT` or `*.DOMAIN`.
fn check_redirect_host(host: &str) -> std::result::Result<(), &'static str> {
    const FORM: &str = "is not HOST, HOST:PORT or *.DOMAIN (no scheme, no path)";
    if host.contains('/') {
        return Err(FORM);
    }
    let name = host.strip_prefix("*.").unwrap_or(host);
    let (name, port) = match name.rsplit_once(':') {
        Some((name, port)) if !name.contains(':') => (name, Some(port)),
        _ => (name, None),
    };
    if port.is_some_and(|p| p.parse::<u16>().map_or(true, |p| p == 0)) {
        return Err("has a port that is not a number from 1 to 65535");
    }
    let valid = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']'));
    if !valid || (host.starts_with("*.") && !name.contains('.')) {
        return Err(FORM);
    }
    Ok(())
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

    #[test]
    fn reads_the_pull_limits_and_redirect_hosts() {
        let path = Path::new("/etc/skillhost/config.toml");
        let defaults = HostConfig::parse("", path).unwrap();
        assert_eq!(defaults.limits, PullLimits::default());
        assert!(defaults.redirect_allowed("ghcr.io", "pkg-containers.githubusercontent.com"));
        assert!(!defaults.redirect_allowed("ghcr.io", "evil.example"));
        assert!(!defaults.redirect_allowed("reg.lan:5000", "pkg-containers.githubusercontent.com"));
        let config = HostConfig::parse(
            "[registries]\nmax_component_bytes = 1000\npull_timeout_ms = 2500\n\
             redirects = { \"reg.lan:5000\" = [\"blobs.lan\", \"*.cdn.example\", \"127.0.0.1:9000\"] }\n",
            path,
        )
        .unwrap();
        assert_eq!(config.limits.max_component_bytes, 1000);
        assert_eq!(config.limits.pull_timeout, Duration::from_millis(2500));
        assert!(config.redirect_allowed("reg.lan:5000", "blobs.lan"));
        assert!(config.redirect_allowed("reg.lan:5000", "a.b.cdn.example"));
        assert!(config.redirect_allowed("reg.lan:5000", "127.0.0.1:9000"));
        assert!(!config.redirect_allowed("reg.lan:5000", "cdn.example"));
        assert!(!config.redirect_allowed("reg.lan:5000", "xcdn.example"));
        assert!(!config.redirect_allowed("reg.lan:5000", "127.0.0.1:9001"));
        assert!(!config.redirect_allowed("other:5000", "blobs.lan"));
        for (text, says) in [
            ("max_component_bytes = 0", "max_component_bytes"),
            ("pull_timeout_ms = 0", "pull_timeout_ms must be from 1"),
            (
                "redirects = { \"r\" = \"blobs.lan\" }",
                "must name a list of hosts",
            ),
            (
                "redirects = { \"r\" = [\"https://blobs.lan\"] }",
                "no scheme",
            ),
            ("redirects = { \"r\" = [\"*.com\"] }", "*.DOMAIN"),
            ("redirects = { \"r\" = [\"b:0\"] }", "port"),
            ("pull_timeout = 5", "pull_timeout_ms"),
        ] {
            let err = HostConfig::parse(&format!("[registries]\n{text}\n"), path)
                .unwrap_err()
                .to_string();
            assert!(err.contains(says), "{text}: {err}");
        }
    }
}
