//! Every way talking to a registry, the registry cache, a lock or a key can
//! fail, each naming the reference (or file) and what to do about it.
//!
//! Owns: the error type and which failures are the environment's (an
//! unreachable registry, a cache that cannot be written, a registry that
//! served damaged bytes) rather than the input's (a reference that does not
//! parse, an unknown tag, wrong credentials, an untrusted signature).

use std::path::PathBuf;

/// A failure of a registry operation.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// A reference that does not parse.
    #[error(
        "`{input}` is not a registry reference: {reason}. Write REGISTRY/REPOSITORY:TAG or \
         REGISTRY/REPOSITORY@sha256:DIGEST, e.g. `oci://127.0.0.1:5000/skills/echo:0.1.0`"
    )]
    BadReference { input: String, reason: String },

    /// The registry did not answer (refused, timed out, TLS failed).
    #[error(
        "cannot reach the registry `{registry}` for `{reference}`: {cause}. Check that the \
         registry is running at that address{hint}"
    )]
    Unreachable {
        reference: String,
        registry: String,
        cause: String,
        hint: String,
    },

    /// The repository, tag or digest is not in the registry.
    #[error(
        "`{reference}` is not in the registry ({cause}). Check the repository and tag \
         (`host skill push FILE {reference}` publishes one)"
    )]
    NotFound { reference: String, cause: String },

    /// The registry refused the credentials (or wanted some).
    #[error(
        "the registry refused access to `{reference}` ({cause}) with {credentials}. Give \
         credentials with --username and --password-stdin, SKILLHOST_REGISTRY_USERNAME and \
         SKILLHOST_REGISTRY_PASSWORD, or an `auths` entry in ~/.docker/config.json"
    )]
    Unauthorized {
        reference: String,
        cause: String,
        credentials: String,
    },

    /// The manifest does not describe a Wasm component.
    #[error(
        "`{reference}` is not a Wasm component artifact: {reason}. A skill is published with \
         `host skill push FILE REF` (config `application/vnd.wasm.config.v0+json`, one \
         `application/wasm` layer)"
    )]
    NotAComponent { reference: String, reason: String },

    /// Bytes that do not hash to the digest they were asked for by.
    #[error(
        "`{reference}`: the registry sent {what} {expected} whose bytes hash to {actual}; \
         nothing was stored. Its copy is damaged or it served other content: push the \
         component again"
    )]
    DigestMismatch {
        reference: String,
        what: &'static str,
        expected: String,
        actual: String,
    },

    /// Any other answer of the registry.
    #[error("registry error for `{reference}`: {cause}")]
    Registry { reference: String, cause: String },

    /// An answer larger than the host reads: a manifest past its cap, a
    /// component past `[registries] max_component_bytes`, a token or a
    /// small blob past theirs. Read no further than the cap.
    #[error(
        "`{reference}`: the registry's {what} is {found}, more than the {limit} bytes {rule}; \
         nothing was stored"
    )]
    TooLarge {
        reference: String,
        what: String,
        found: String,
        limit: u64,
        rule: String,
    },

    /// A pull that did not finish within `[registries] pull_timeout_ms`.
    #[error(
        "pulling `{reference}` from the registry `{registry}` did not finish within {limit} \
         (`pull_timeout_ms` under [registries] in the host config{config}); nothing was stored. \
         The registry is stalled or too slow; raise pull_timeout_ms if it is only slow"
    )]
    Deadline {
        reference: String,
        registry: String,
        limit: String,
        config: String,
    },

    /// A redirect the host does not follow.
    #[error(
        "the registry `{registry}` redirected the pull of `{reference}` to `{target}`, which \
         the host does not follow: {reason}"
    )]
    Redirect {
        reference: String,
        registry: String,
        target: String,
        reason: String,
    },

    /// The registry cache (the local content-addressed store).
    #[error("registry cache `{}`: {cause}", path.display())]
    Cache { path: PathBuf, cause: String },

    /// A component that must come from the cache and is not there.
    #[error("`{reference}`: {reason}")]
    NotCached { reference: String, reason: String },

    /// A lock that disagrees with the scenario or the registry.
    #[error("{0}")]
    Lock(String),

    /// A component the trust policy refuses.
    #[error(
        "`{reference}` is not trusted: {reason}. The trust policy ([trust] keys in the host \
         config or the scenario) accepts only components signed by one of its keys \
         (`host skill sign REF --key KEY`)"
    )]
    Untrusted { reference: String, reason: String },

    /// A key, host config or other file the user gave.
    #[error("`{}`: {cause}", path.display())]
    File { path: PathBuf, cause: String },

    /// Bad input that names itself (an annotation, a component file).
    #[error("{0}")]
    Invalid(String),

    /// The machine could not do what a registry call needs (start a
    /// runtime or a thread).
    #[error("{0}")]
    Machine(String),
}

impl OciError {
    /// True when the machine or the registry is at fault (exit 3), false
    /// when the input is (exit 2).
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            OciError::Unreachable { .. }
                | OciError::DigestMismatch { .. }
                | OciError::Registry { .. }
                | OciError::TooLarge { .. }
                | OciError::Deadline { .. }
                | OciError::Redirect { .. }
                | OciError::Cache { .. }
                | OciError::NotCached { .. }
                | OciError::Machine(_)
        )
    }

    pub(crate) fn cache(path: impl Into<PathBuf>, cause: impl std::fmt::Display) -> OciError {
        OciError::Cache {
            path: path.into(),
            cause: cause.to_string(),
        }
    }

    pub(crate) fn file(path: impl Into<PathBuf>, cause: impl std::fmt::Display) -> OciError {
        OciError::File {
            path: path.into(),
            cause: cause.to_string(),
        }
    }
}

pub type Result<T, E = OciError> = std::result::Result<T, E>;
