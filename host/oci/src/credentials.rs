//! Registry credentials, first found wins: the command line
//! (`--username` with `--password-stdin`), the environment
//! (`SKILLHOST_REGISTRY_USERNAME` and `SKILLHOST_REGISTRY_PASSWORD`), the
//! `auths` of Docker's config (`$DOCKER_CONFIG/config.json`, else
//! `~/.docker/config.json`), else anonymous. A registry that answers with a
//! token challenge gets them in oci-client's token flow; one that asks for
//! HTTP basic authentication gets them directly.
//!
//! Owns: finding the credentials and saying where they came from (errors
//! name the source, never the secret). Must not: run credential helpers
//! (`credsStore`, `credHelpers`): a registry whose only credentials are in a
//! helper is reached anonymously, with a warning.

use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use crate::error::{OciError, Result};

/// Credentials for one registry.
#[derive(Clone)]
pub struct Credentials {
    pub(crate) auth: oci_client::secrets::RegistryAuth,
    source: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        write!(f, "Credentials({})", self.source)
    }
}

impl Credentials {
    pub fn anonymous() -> Credentials {
        Credentials {
            auth: oci_client::secrets::RegistryAuth::Anonymous,
            source: "no credentials (anonymous)".to_string(),
        }
    }

    pub fn basic(username: &str, password: &str, source: impl Into<String>) -> Credentials {
        Credentials {
            auth: oci_client::secrets::RegistryAuth::Basic(
                username.to_string(),
                password.to_string(),
            ),
            source: source.into(),
        }
    }

    /// Where the credentials came from, for messages (never the secret).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The credentials for `registry`: `explicit` (from the command line),
    /// else the environment, else Docker's config, else anonymous.
    pub fn find(registry: &str, explicit: Option<&Credentials>) -> Result<Credentials> {
        if let Some(explicit) = explicit {
            return Ok(explicit.clone());
        }
        let user = std::env::var("SKILLHOST_REGISTRY_USERNAME").ok();
        let password = std::env::var("SKILLHOST_REGISTRY_PASSWORD").ok();
        match (user, password) {
            (Some(user), Some(password)) => {
                return Ok(Credentials::basic(
                    &user,
                    &password,
                    format!(
                        "user `{user}` from SKILLHOST_REGISTRY_USERNAME/SKILLHOST_REGISTRY_PASSWORD"
                    ),
                ));
            }
            (Some(_), None) | (None, Some(_)) => {
                return Err(OciError::Invalid(
                    "only one of SKILLHOST_REGISTRY_USERNAME and SKILLHOST_REGISTRY_PASSWORD is \
                     set; set both, or neither"
                        .to_string(),
                ));
            }
            (None, None) => {}
        }
        if let Some(path) = docker_config_path()
            && let Some(found) = from_docker_config(&path, registry)?
        {
            return Ok(found);
        }
        Ok(Credentials::anonymous())
    }
}

/// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`.
fn docker_config_path() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("DOCKER_CONFIG") {
        return Some(PathBuf::from(dir).join("config.json"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".docker").join("config.json"))
}

#[derive(Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: std::collections::BTreeMap<String, DockerAuth>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct DockerAuth {
    auth: Option<String>,
    username: Option<String>,
    password: Option<String>,
}

/// The `auths` entry of `path` for `registry` (keys may carry a scheme and a
/// path, as `docker login` writes them: `https://host/v1/`).
fn from_docker_config(path: &Path, registry: &str) -> Result<Option<Credentials>> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(OciError::file(path, format!("cannot read: {e}"))),
    };
    let config: DockerConfig = serde_json::from_slice(&text).map_err(|e| {
        OciError::file(
            path,
            format!("not a Docker config ({e}); fix it, or set DOCKER_CONFIG to another directory"),
        )
    })?;
    let entry = config.auths.iter().find(|(key, _)| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://");
        key.split('/').next() == Some(registry)
    });
    let Some((_, entry)) = entry else {
        if config.cred_helpers.contains_key(registry) || config.creds_store.is_some() {
            tracing::warn!(
                "{}: credentials for `{registry}` may be in a credential helper, which the \
                 host does not run; going anonymous (use SKILLHOST_REGISTRY_USERNAME and \
                 SKILLHOST_REGISTRY_PASSWORD, or --username and --password-stdin)",
                path.display()
            );
        }
        return Ok(None);
    };
    let source = format!("the `auths` entry for `{registry}` in {}", path.display());
    if let Some(auth) = &entry.auth {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|text| {
                text.split_once(':')
                    .map(|(u, p)| (u.to_string(), p.to_string()))
            });
        let Some((user, password)) = decoded else {
            return Err(OciError::file(
                path,
                format!(
                    "the `auth` of `{registry}` is not base64 of USER:PASSWORD; log in again \
                     (`docker login {registry}`) or remove the entry"
                ),
            ));
        };
        return Ok(Some(Credentials::basic(
            &user,
            &password,
            format!("user `{user}` from {source}"),
        )));
    }
    match (&entry.username, &entry.password) {
        (Some(user), Some(password)) => Ok(Some(Credentials::basic(
            user,
            password,
            format!("user `{user}` from {source}"),
        ))),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_docker_auths_by_registry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        let auth = base64::engine::general_purpose::STANDARD.encode("alice:s3cret:x");
        std::fs::write(
            &path,
            format!(
                r#"{{"auths": {{"https://127.0.0.1:5000/v1/": {{"auth": "{auth}"}},
                    "other.example": {{"username": "bob", "password": "pw"}}}}}}"#
            ),
        )
        .unwrap();
        let found = from_docker_config(&path, "127.0.0.1:5000")
            .unwrap()
            .unwrap();
        match &found.auth {
            oci_client::secrets::RegistryAuth::Basic(u, p) => {
                assert_eq!((u.as_str(), p.as_str()), ("alice", "s3cret:x"))
            }
            _ => panic!("basic"),
        }
        assert!(!format!("{found:?}").contains("s3cret"));
        assert!(found.source().contains("alice"));
        let bob = from_docker_config(&path, "other.example").unwrap().unwrap();
        assert!(bob.source().contains("bob"));
        assert!(from_docker_config(&path, "nowhere:1").unwrap().is_none());

        std::fs::write(&path, r#"{"auths": {"h:1": {"auth": "!!"}}}"#).unwrap();
        let err = from_docker_config(&path, "h:1").unwrap_err().to_string();
        assert!(err.contains("not base64 of USER:PASSWORD"), "{err}");
        std::fs::write(&path, "not json").unwrap();
        let err = from_docker_config(&path, "h:1").unwrap_err().to_string();
        assert!(err.contains("not a Docker config"), "{err}");
    }
}
