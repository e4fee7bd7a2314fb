//! Registry references: `oci://REGISTRY/REPOSITORY:TAG` or
//! `oci://REGISTRY/REPOSITORY@sha256:HEX` (the `oci://` is optional on the
//! command line and required in a scenario, where it tells a registry
//! component from a file).
//!
//! Owns: parsing and printing references, and which registries are on this
//! machine (loopback, where plain HTTP is allowed). Must not: guess a
//! registry (no Docker Hub default) or a tag (no `latest`): a scenario
//! names exactly what it runs.

use std::fmt;
use std::net::IpAddr;

use crate::error::{OciError, Result};

/// The prefix that marks a registry reference in a scenario.
pub const SCHEME: &str = "oci://";

/// A parsed reference to a component in a registry.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ComponentRef {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<String>,
}

impl ComponentRef {
    /// Parses `input`, with or without `oci://`.
    pub fn parse(input: &str) -> Result<ComponentRef> {
        let bad = |reason: &str| OciError::BadReference {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let text = input.strip_prefix(SCHEME).unwrap_or(input);
        if text.is_empty() {
            return Err(bad("it is empty"));
        }
        if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("it contains whitespace"));
        }
        let (name, digest) = match text.split_once('@') {
            Some((name, digest)) => (name, Some(parse_digest(digest).map_err(|r| bad(&r))?)),
            None => (text, None),
        };
        let Some((registry, rest)) = name.split_once('/') else {
            return Err(bad(
                "it has no `/`: a reference names a registry, then a repository",
            ));
        };
        check_registry(registry).map_err(|r| bad(&r))?;
        // The tag follows the last `:` of the repository part (the
        // registry's port has its own `:` before the first `/`).
        let (repository, tag) = match rest.rsplit_once(':') {
            Some((repository, tag)) => (repository, Some(tag)),
            None => (rest, None),
        };
        check_repository(repository).map_err(|r| bad(&r))?;
        if let Some(tag) = tag {
            check_tag(tag).map_err(|r| bad(&r))?;
        }
        if tag.is_none() && digest.is_none() {
            return Err(bad(
                "it has neither a tag nor a digest; add one (`:0.1.0` or `@sha256:…`), no \
                 `latest` is assumed",
            ));
        }
        Ok(ComponentRef {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// True when `text` is written as a registry reference (`oci://…`).
    pub fn is_registry_reference(text: &str) -> bool {
        text.starts_with(SCHEME)
    }

    pub fn registry(&self) -> &str {
        &self.registry
    }

    pub fn repository(&self) -> &str {
        &self.repository
    }

    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    pub fn digest(&self) -> Option<&str> {
        self.digest.as_deref()
    }

    /// `REGISTRY/REPOSITORY`, what a signature's identity names.
    pub fn repository_name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The same repository at `digest` (the tag kept for display).
    pub fn pinned(&self, digest: &str) -> ComponentRef {
        ComponentRef {
            digest: Some(digest.to_string()),
            ..self.clone()
        }
    }

    /// The same repository at another tag, without a digest.
    pub fn at_tag(&self, tag: &str) -> ComponentRef {
        ComponentRef {
            tag: Some(tag.to_string()),
            digest: None,
            ..self.clone()
        }
    }

    /// The same repository and tag, without a digest.
    pub fn without_digest(&self) -> Option<ComponentRef> {
        self.tag.as_ref().map(|tag| self.at_tag(tag))
    }

    /// True when the registry is this machine (`localhost`, 127.0.0.0/8,
    /// `[::1]`): the only registries reached over plain HTTP unless the
    /// host config lists one as insecure.
    pub fn is_loopback(&self) -> bool {
        is_loopback_registry(&self.registry)
    }

    /// The reference as oci-client takes it: by digest when there is one.
    pub(crate) fn to_oci(&self) -> oci_client::Reference {
        match (&self.digest, &self.tag) {
            (Some(digest), _) => oci_client::Reference::with_digest(
                self.registry.clone(),
                self.repository.clone(),
                digest.clone(),
            ),
            (None, Some(tag)) => oci_client::Reference::with_tag(
                self.registry.clone(),
                self.repository.clone(),
                tag.clone(),
            ),
            (None, None) => unreachable!("a parsed reference has a tag or a digest"),
        }
    }
}

impl fmt::Display for ComponentRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// True for `localhost`, a loopback address, with or without a port.
pub fn is_loopback_registry(registry: &str) -> bool {
    let host = host_of(registry);
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The host part of `host[:port]` or `[v6]:port`.
fn host_of(registry: &str) -> &str {
    if registry.starts_with('[') {
        return match registry.find(']') {
            Some(end) => &registry[..=end],
            None => registry,
        };
    }
    registry.split(':').next().unwrap_or(registry)
}

/// `sha256:` and 64 lowercase hex digits; the only algorithm taken.
pub fn parse_digest(text: &str) -> std::result::Result<String, String> {
    let Some(hex) = text.strip_prefix("sha256:") else {
        return Err(format!(
            "the digest `{text}` is not `sha256:` followed by 64 hex digits (only sha256 is taken)"
        ));
    };
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(format!(
            "the digest `{text}` is not `sha256:` followed by 64 lowercase hex digits"
        ));
    }
    Ok(text.to_string())
}

fn check_registry(registry: &str) -> std::result::Result<(), String> {
    let host = host_of(registry);
    let port = registry[host.len()..].strip_prefix(':');
    if host.is_empty() {
        return Err("it names no registry".into());
    }
    if let Some(port) = port
        && (port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) || port.len() > 5)
    {
        return Err(format!("the registry `{registry}` has a bad port"));
    }
    if registry.len() > host.len() && port.is_none() {
        return Err(format!("the registry `{registry}` is not HOST[:PORT]"));
    }
    let bracketed = host.starts_with('[') && host.ends_with(']');
    let valid_host = bracketed
        || host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-');
    if !valid_host {
        return Err(format!("the registry `{registry}` is not a host name"));
    }
    // Without a dot, a port or `localhost`, the first part is a repository
    // path (`skills/echo:1`), and Docker would send it to Docker Hub; say so
    // instead of guessing.
    if !bracketed && !host.contains('.') && port.is_none() && host != "localhost" {
        return Err(format!(
            "`{registry}` does not look like a registry (no `.`, no port); name the registry \
             first, e.g. `ghcr.io/{registry}/…` or `127.0.0.1:5000/{registry}/…`"
        ));
    }
    Ok(())
}

fn check_repository(repository: &str) -> std::result::Result<(), String> {
    if repository.is_empty() {
        return Err("it names no repository after the registry".into());
    }
    if repository.len() > 255 {
        return Err("the repository name is longer than 255 characters".into());
    }
    for part in repository.split('/') {
        let ok = !part.is_empty()
            && part
                .bytes()
                .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'_' | b'-'))
            && part.as_bytes()[0].is_ascii_alphanumeric()
            && part.as_bytes()[part.len() - 1].is_ascii_alphanumeric();
        if !ok {
            return Err(format!(
                "the repository `{repository}` has a bad path component `{part}` (lowercase \
                 letters and digits, separated by `.`, `_` or `-`)"
            ));
        }
    }
    Ok(())
}

fn check_tag(tag: &str) -> std::result::Result<(), String> {
    let ok = !tag.is_empty()
        && tag.len() <= 128
        && (tag.as_bytes()[0].is_ascii_alphanumeric() || tag.as_bytes()[0] == b'_')
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "the tag `{tag}` is not 1 to 128 letters, digits, `_`, `.` or `-` (not starting \
             with `.` or `-`)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEX: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parses_tags_digests_and_ports() {
        let r = ComponentRef::parse("oci://127.0.0.1:5000/skills/echo:0.1.0").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "skills/echo");
        assert_eq!(r.tag(), Some("0.1.0"));
        assert_eq!(r.digest(), None);
        assert!(r.is_loopback());
        assert_eq!(r.to_string(), "127.0.0.1:5000/skills/echo:0.1.0");

        let text = format!("ghcr.io/acme/echo@sha256:{HEX}");
        let r = ComponentRef::parse(&text).unwrap();
        assert_eq!(r.registry(), "ghcr.io");
        assert_eq!(r.tag(), None);
        assert_eq!(r.digest(), Some(format!("sha256:{HEX}").as_str()));
        assert!(!r.is_loopback());
        assert_eq!(r.to_string(), text);

        let r = ComponentRef::parse(&format!("localhost/a/b:v1@sha256:{HEX}")).unwrap();
        assert_eq!((r.tag(), r.repository()), (Some("v1"), "a/b"));
        assert!(ComponentRef::parse("[::1]:5000/x:1").unwrap().is_loopback());
    }

    #[test]
    fn refuses_what_would_be_guessed_or_is_malformed() {
        for (input, needle) in [
            ("", "empty"),
            ("oci://", "empty"),
            ("127.0.0.1:5000/skills/echo", "neither a tag nor a digest"),
            ("skills/echo:1", "does not look like a registry"),
            ("127.0.0.1:5000", "no `/`"),
            ("echo:1", "no `/`"),
            ("127.0.0.1:5000/:1", "no repository"),
            ("127.0.0.1:5000/Skills/echo:1", "bad path component"),
            ("127.0.0.1:5000/skills//echo:1", "bad path component"),
            ("127.0.0.1:5000/echo:-x", "the tag"),
            ("127.0.0.1:5000/echo@sha256:abc", "64 lowercase hex"),
            ("127.0.0.1:5000/echo@md5:abc", "only sha256"),
            ("127.0.0.1:x/echo:1", "bad port"),
            ("127.0.0.1:5000/echo: 1", "whitespace"),
        ] {
            let err = ComponentRef::parse(input).unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?}: {err}");
            assert!(err.contains("REGISTRY/REPOSITORY:TAG"), "{err}");
        }
    }
}
