//! Talking to one registry: resolving a tag to a digest and pulling a
//! component into the [`Cache`] through the host's bounded client
//! ([`Distribution`]), pushing a component (and its signatures) through
//! oci-client.
//!
//! Owns: the connection policy (HTTPS with the system's roots; plain HTTP
//! only for loopback and the host config's insecure registries), the
//! credentials it presents, and turning the registry's answers into
//! [`OciError`]s that name the reference. Every blob pulled is hashed as it
//! streams to disk and stored only if it matches its digest, and is held to
//! the size its manifest declares: a component to `[registries]
//! max_component_bytes` before a byte of it is downloaded, its config and a
//! signature's payload to [`MAX_SMALL_BLOB_BYTES`]; manifests are read to
//! at most 4 MiB and hashed before they are parsed.

use std::collections::BTreeMap;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use oci_client::{Client, RegistryOperation};

use crate::cache::Cache;
use crate::config::{HostConfig, PullLimits};
use crate::credentials::Credentials;
use crate::distribution::Distribution;
use crate::error::{OciError, Result};
use crate::layout::{Artifact, ComponentManifest, MANIFEST_MEDIA_TYPE, Manifest, digest_of};
use crate::reference::ComponentRef;
use crate::signature::{self, PrivateKey, SignatureLayer};

/// Progress of a transfer, for a terminal's progress bar. Every method has
/// a default that does nothing.
pub trait Progress: Send + Sync {
    /// A transfer of `what` starts, `total` bytes if known.
    fn start(&self, _what: &str, _total: Option<u64>) {}
    /// `bytes` more were moved.
    fn advance(&self, _bytes: u64) {}
    /// The transfer is over.
    fn finish(&self) {}
}

/// Ends a transfer's progress however its function returns.
struct Finish<'a>(&'a dyn Progress);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        self.0.finish();
    }
}

/// The largest config or signature payload pulled: both are a little JSON.
pub const MAX_SMALL_BLOB_BYTES: u64 = 1 << 20;

/// No progress shown.
pub struct Quiet;

impl Progress for Quiet {}

/// How to reach registries: the host config (insecure registries) and
/// credentials given on the command line, if any.
#[derive(Debug, Clone, Default)]
pub struct Connection {
    pub config: HostConfig,
    /// `--username` and `--password-stdin`; else the environment and
    /// Docker's config are looked up per registry.
    pub credentials: Option<Credentials>,
}

/// A client for the registry of one reference.
pub struct Registry {
    /// Pushes.
    client: Client,
    /// Pulls.
    distribution: Distribution,
    credentials: Credentials,
    registry: String,
    insecure: bool,
    limits: PullLimits,
    /// The host config's file, for messages.
    config_path: Option<std::path::PathBuf>,
}

/// A component pulled into the cache.
#[derive(Debug, Clone)]
pub struct Pulled {
    /// The reference, pinned to the manifest's digest.
    pub reference: ComponentRef,
    /// The manifest's digest.
    pub digest: String,
    pub manifest: ComponentManifest,
    /// The component in the cache.
    pub path: std::path::PathBuf,
    /// How many bytes were downloaded (0 when all was in the cache).
    pub downloaded: u64,
}

/// What a push wrote.
#[derive(Debug, Clone)]
pub struct Pushed {
    pub reference: ComponentRef,
    /// The manifest's digest.
    pub digest: String,
    pub manifest: Manifest,
}

impl Registry {
    /// A client for the registry `reference` names.
    pub fn connect(reference: &ComponentRef, connection: &Connection) -> Result<Registry> {
        let registry = reference.registry().to_string();
        let insecure = connection.config.allows_http(&registry);
        let protocol = if insecure {
            ClientProtocol::HttpsExcept(vec![registry.clone()])
        } else {
            ClientProtocol::Https
        };
        let client = Client::new(ClientConfig {
            protocol,
            // A component is one layer; the registries' own defaults (16)
            // would open connections for nothing.
            max_concurrent_download: 2,
            max_concurrent_upload: 2,
            connect_timeout: Some(std::time::Duration::from_secs(10)),
            read_timeout: Some(std::time::Duration::from_secs(60)),
            // Docker Hub's platform choice means nothing for a component.
            platform_resolver: None,
            ..ClientConfig::default()
        });
        let credentials = Credentials::find(&registry, connection.credentials.as_ref())?;
        let distribution = Distribution::new(
            &registry,
            insecure,
            credentials.clone(),
            connection.config.clone(),
        )?;
        Ok(Registry {
            client,
            distribution,
            credentials,
            registry,
            insecure,
            limits: connection.config.limits,
            config_path: connection.config.path.clone(),
        })
    }

    /// What a pull may take.
    pub fn limits(&self) -> PullLimits {
        self.limits
    }

    /// Authenticates for `op` on `reference` (the token flow when the
    /// registry asks for it), so a failure names the credentials.
    async fn authenticate(&self, reference: &ComponentRef, op: RegistryOperation) -> Result<()> {
        let oci = reference.to_oci();
        self.client
            .auth(&oci, &self.credentials.auth, op)
            .await
            .map(|_| ())
            .map_err(|e| self.error(reference, e))
    }

    /// The digest `reference` resolves to now, and its manifest's bytes
    /// (at most 4 MiB, checked against that digest).
    pub async fn resolve(&self, reference: &ComponentRef) -> Result<(String, Vec<u8>)> {
        let (bytes, header_digest) = self
            .distribution
            .manifest(reference, MANIFEST_MEDIA_TYPE)
            .await?;
        let digest = digest_of(&bytes);
        let expected = reference.digest().or(header_digest.as_deref());
        if let Some(expected) = expected
            && digest != expected
        {
            return Err(OciError::DigestMismatch {
                reference: reference.to_string(),
                what: "manifest",
                expected: expected.to_string(),
                actual: digest,
            });
        }
        Ok((digest, bytes))
    }

    /// Pulls the component `reference` names into `cache`: the manifest
    /// (resolving a tag), the config and the component layer, each stored
    /// once its digest is checked; what the cache holds already is not
    /// downloaded again. Records the tag's digest.
    pub async fn pull(
        &self,
        reference: &ComponentRef,
        cache: &Cache,
        progress: &dyn Progress,
    ) -> Result<Pulled> {
        let (digest, manifest_bytes) = self.resolve(reference).await?;
        let pinned = reference.pinned(&digest);
        let manifest = ComponentManifest::parse(&manifest_bytes, &reference.to_string())?;
        self.check_sizes(&pinned, &manifest)?;
        let mut downloaded = 0;
        for (descriptor, what) in [
            (&manifest.manifest.config, "config"),
            (&manifest.layer, "component"),
        ] {
            // A blob damaged on disk was removed by the check: fetch it anew.
            let cached = cache.verified_blob(&descriptor.digest).unwrap_or_else(|e| {
                tracing::warn!("{e}");
                None
            });
            if cached.is_none() {
                downloaded += self
                    .pull_blob(&pinned, descriptor, cache, what, progress)
                    .await?;
            }
        }
        let path = cache
            .verified_blob(&manifest.layer.digest)?
            .expect("the layer was just stored");
        // The manifest last: a manifest in the cache means its blobs are.
        cache.put_blob(&digest, &manifest_bytes, &pinned.to_string())?;
        cache.record_tag(reference, &digest)?;
        Ok(Pulled {
            reference: pinned,
            digest,
            manifest,
            path,
            downloaded,
        })
    }

    /// Refuses a manifest whose component is larger than
    /// `max_component_bytes`, or whose config is larger than a config is,
    /// before anything is downloaded.
    fn check_sizes(&self, reference: &ComponentRef, manifest: &ComponentManifest) -> Result<()> {
        let limit = self.limits.max_component_bytes;
        if manifest.layer.size > limit {
            let config = match &self.config_path {
                Some(path) => format!("in {}", path.display()),
                None => "in the host config".to_string(),
            };
            return Err(OciError::TooLarge {
                reference: reference.to_string(),
                what: "component".into(),
                found: format!("{} bytes, as its manifest declares", manifest.layer.size),
                limit,
                rule: format!(
                    "a component may be (`max_component_bytes` under [registries] {config}; \
                     raise it to pull this one)"
                ),
            });
        }
        if manifest.manifest.config.size > MAX_SMALL_BLOB_BYTES {
            return Err(OciError::TooLarge {
                reference: reference.to_string(),
                what: "config".into(),
                found: format!(
                    "{} bytes, as its manifest declares",
                    manifest.manifest.config.size
                ),
                limit: MAX_SMALL_BLOB_BYTES,
                rule: "a component's config may be".into(),
            });
        }
        Ok(())
    }

    /// Streams one blob into the cache, no further than its declared size;
    /// a component layer must start as a component, or nothing is stored.
    async fn pull_blob(
        &self,
        reference: &ComponentRef,
        descriptor: &crate::layout::Descriptor,
        cache: &Cache,
        what: &'static str,
        progress: &dyn Progress,
    ) -> Result<u64> {
        let mut response = self
            .distribution
            .blob(reference, &descriptor.digest)
            .await?;
        let larger = || OciError::DigestMismatch {
            reference: reference.to_string(),
            what,
            expected: format!("{} ({} bytes)", descriptor.digest, descriptor.size),
            actual: format!("more than {} bytes", descriptor.size),
        };
        if response
            .content_length()
            .is_some_and(|n| n > descriptor.size)
        {
            return Err(larger());
        }
        let mut writer = cache.writer(&descriptor.digest, &reference.to_string(), what)?;
        progress.start(what, Some(descriptor.size));
        let _bar = Finish(progress);
        // The first bytes, to refuse a layer that is not a component
        // before it is stored.
        let mut head = Vec::with_capacity(8);
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.stream_error(reference, descriptor, &e))?
        {
            if writer.written() + chunk.len() as u64 > descriptor.size {
                return Err(larger());
            }
            if head.len() < 8 {
                let take = (8 - head.len()).min(chunk.len());
                head.extend_from_slice(&chunk[..take]);
            }
            writer.write(&chunk)?;
            progress.advance(chunk.len() as u64);
        }
        if what == "component"
            && let Err(reason) = crate::layout::check_component_header(&head)
        {
            return Err(OciError::NotAComponent {
                reference: reference.to_string(),
                reason: format!("its `application/wasm` layer: {reason}"),
            });
        }
        let written = writer.written();
        writer.finish()?;
        Ok(written)
    }

    /// Pushes `artifact` (the component `component`'s bytes) as `reference`'s
    /// tag; returns the manifest's digest.
    pub async fn push(
        &self,
        reference: &ComponentRef,
        artifact: &Artifact,
        component: &[u8],
        progress: &dyn Progress,
    ) -> Result<Pushed> {
        if reference.digest().is_some() {
            return Err(OciError::BadReference {
                input: reference.to_string(),
                reason: "a push names a tag, not a digest (the digest is the push's result)".into(),
            });
        }
        self.authenticate(reference, RegistryOperation::Push)
            .await?;
        let oci = reference.to_oci();
        progress.start("config", Some(artifact.config.len() as u64));
        self.client
            .push_blob(&oci, &artifact.config, &artifact.manifest.config.digest)
            .await
            .map_err(|e| self.error(reference, e))?;
        progress.advance(artifact.config.len() as u64);
        progress.finish();
        // oci-client sends a blob from memory in chunks; the bar moves per
        // blob, the component being the one that takes time.
        progress.start("component", Some(component.len() as u64));
        self.client
            .push_blob(&oci, component, &artifact.layer.digest)
            .await
            .map_err(|e| self.error(reference, e))?;
        progress.advance(component.len() as u64);
        progress.finish();
        let digest = self
            .push_manifest(reference, &artifact.manifest.to_bytes())
            .await?;
        Ok(Pushed {
            reference: reference.pinned(&digest),
            digest,
            manifest: artifact.manifest.clone(),
        })
    }

    async fn push_manifest(&self, reference: &ComponentRef, bytes: &[u8]) -> Result<String> {
        let content_type = reqwest::header::HeaderValue::from_static(MANIFEST_MEDIA_TYPE);
        self.client
            .push_manifest_raw(&reference.to_oci(), bytes.to_vec(), content_type)
            .await
            .map_err(|e| self.error(reference, e))?;
        Ok(digest_of(bytes))
    }

    /// The signatures stored next to the manifest `digest` of `reference`'s
    /// repository (none when there is no signature manifest), each payload
    /// checked against its digest. Stored in `cache` when given.
    pub async fn signatures(
        &self,
        reference: &ComponentRef,
        digest: &str,
        cache: Option<&Cache>,
    ) -> Result<Vec<SignatureLayer>> {
        let tag = reference.at_tag(&signature::signature_tag(digest));
        let (manifest_digest, bytes) = match self.resolve(&tag).await {
            Ok(found) => found,
            Err(OciError::NotFound { .. }) => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| OciError::Registry {
                reference: tag.to_string(),
                cause: format!("the signature manifest is not an OCI manifest: {e}"),
            })?;
        let mut layers = Vec::new();
        for layer in manifest
            .layers
            .iter()
            .filter(|l| l.media_type == signature::PAYLOAD_MEDIA_TYPE)
        {
            let payload = self.fetch_small_blob(&tag, layer).await?;
            if let Some(cache) = cache {
                cache.put_blob(&layer.digest, &payload, &tag.to_string())?;
            }
            layers.push(SignatureLayer {
                payload,
                layer: layer.clone(),
            });
        }
        if let Some(cache) = cache {
            cache.put_blob(&manifest_digest, &bytes, &tag.to_string())?;
            cache.record_tag(&tag, &manifest_digest)?;
        }
        Ok(layers)
    }

    /// A small blob (a payload, a config) in memory, checked.
    async fn fetch_small_blob(
        &self,
        reference: &ComponentRef,
        layer: &crate::layout::Descriptor,
    ) -> Result<Vec<u8>> {
        const LIMIT: u64 = MAX_SMALL_BLOB_BYTES;
        if layer.size > LIMIT {
            return Err(OciError::Registry {
                reference: reference.to_string(),
                cause: format!(
                    "blob {} is {} bytes, more than a signature payload may be",
                    layer.digest, layer.size
                ),
            });
        }
        let response = self.distribution.blob(reference, &layer.digest).await?;
        let bytes = crate::distribution::read_capped(
            reference,
            response,
            layer.size,
            "signature payload",
            "its manifest declares",
        )
        .await?;
        let actual = digest_of(&bytes);
        if actual != layer.digest {
            return Err(OciError::DigestMismatch {
                reference: reference.to_string(),
                what: "payload",
                expected: layer.digest.clone(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Signs the manifest `digest` of `reference`'s repository with `key`,
    /// adding the signature to those already there (cosign's behaviour; the
    /// same key signing again replaces nothing, it adds an equal layer only
    /// if the payload differs).
    pub async fn sign(
        &self,
        reference: &ComponentRef,
        digest: &str,
        key: &PrivateKey,
    ) -> Result<String> {
        self.authenticate(reference, RegistryOperation::Push)
            .await?;
        let existing = self.signatures(reference, digest, None).await?;
        let new = SignatureLayer::new(key, &reference.repository_name(), digest);
        let oci = reference.to_oci();
        let mut layers: Vec<crate::layout::Descriptor> =
            existing.iter().map(|s| s.layer.clone()).collect();
        // ECDSA signatures differ each time; one per key is enough, so a
        // signature by the same key (same public half) is replaced.
        let public = key.public_key();
        let trusted = [crate::signature::PublicKey::from_key(public)];
        layers.retain(|layer| {
            let mine = existing
                .iter()
                .find(|s| &s.layer == layer)
                .is_some_and(|s| {
                    signature::verify(digest, std::slice::from_ref(s), &trusted).is_ok()
                });
            !mine
        });
        layers.push(new.layer.clone());
        self.client
            .push_blob(&oci, &new.payload, &new.layer.digest)
            .await
            .map_err(|e| self.error(reference, e))?;
        let (manifest, config) = signature::signature_manifest(&layers);
        self.client
            .push_blob(&oci, &config, &manifest.config.digest)
            .await
            .map_err(|e| self.error(reference, e))?;
        let tag = reference.at_tag(&signature::signature_tag(digest));
        self.push_manifest(&tag, &manifest.to_bytes()).await?;
        Ok(signature::signature_tag(digest))
    }

    fn stream_error(
        &self,
        reference: &ComponentRef,
        descriptor: &crate::layout::Descriptor,
        e: &reqwest::Error,
    ) -> OciError {
        OciError::Unreachable {
            reference: reference.to_string(),
            registry: self.registry.clone(),
            cause: format!(
                "the download of {} broke off: {}",
                descriptor.digest,
                error_chain(e)
            ),
            hint: String::new(),
        }
    }

    /// The registry's answer as an error naming `reference`.
    fn error(&self, reference: &ComponentRef, e: OciDistributionError) -> OciError {
        let reference_text = reference.to_string();
        let unauthorized = |cause: String| OciError::Unauthorized {
            reference: reference_text.clone(),
            cause,
            credentials: self.credentials.source().to_string(),
        };
        let not_found = |cause: String| OciError::NotFound {
            reference: reference_text.clone(),
            cause,
        };
        match e {
            OciDistributionError::RequestError(e) => {
                if let Some(status) = e.status() {
                    return match status.as_u16() {
                        401 | 403 => unauthorized(format!("HTTP {status}")),
                        404 => not_found(format!("HTTP {status}")),
                        _ => OciError::Registry {
                            reference: reference_text,
                            cause: format!("HTTP {status}"),
                        },
                    };
                }
                let hint = if self.insecure {
                    String::new()
                } else {
                    format!(
                        " and serves HTTPS; a registry on another machine that speaks plain \
                         HTTP must be listed under [registries] insecure in the host config \
                         ({})",
                        crate::config::default_config_path()
                            .map(|p| p.display().to_string())
                            .unwrap_or_else(|| "$SKILLHOST_CONFIG".into())
                    )
                };
                OciError::Unreachable {
                    reference: reference_text,
                    registry: self.registry.clone(),
                    cause: error_chain(&e),
                    hint,
                }
            }
            OciDistributionError::AuthenticationFailure(cause) => unauthorized(cause),
            OciDistributionError::UnauthorizedError { .. } => {
                unauthorized("HTTP 401 Unauthorized".into())
            }
            OciDistributionError::ImageManifestNotFoundError(cause) => not_found(cause),
            OciDistributionError::RegistryError { envelope, .. } => {
                let codes: Vec<&OciErrorCode> = envelope.errors.iter().map(|e| &e.code).collect();
                let cause = envelope
                    .errors
                    .iter()
                    .map(|e| format!("{:?}: {}", e.code, e.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                if codes.iter().any(|c| {
                    matches!(
                        c,
                        OciErrorCode::ManifestUnknown
                            | OciErrorCode::NameUnknown
                            | OciErrorCode::BlobUnknown
                            | OciErrorCode::NotFound
                    )
                }) {
                    not_found(cause)
                } else if codes
                    .iter()
                    .any(|c| matches!(c, OciErrorCode::Unauthorized | OciErrorCode::Denied))
                {
                    unauthorized(cause)
                } else {
                    OciError::Registry {
                        reference: reference_text,
                        cause,
                    }
                }
            }
            OciDistributionError::ServerError { code, message, .. } => match code {
                401 | 403 => unauthorized(format!("HTTP {code}: {}", message.trim())),
                404 => not_found(format!("HTTP 404: {}", message.trim())),
                _ => OciError::Registry {
                    reference: reference_text,
                    cause: format!("HTTP {code}: {}", message.trim()),
                },
            },
            OciDistributionError::DigestError(DigestError::VerificationError {
                expected,
                actual,
            }) => OciError::DigestMismatch {
                reference: reference_text,
                what: "manifest",
                expected,
                actual,
            },
            other => OciError::Registry {
                reference: reference_text,
                cause: other.to_string(),
            },
        }
    }
}

/// An error and its causes, `a: b: c` (reqwest's own message is only
/// "error sending request").
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Annotations given on the command line, parsed.
pub fn annotations(pairs: &[String]) -> Result<BTreeMap<String, String>> {
    pairs
        .iter()
        .map(|p| crate::layout::parse_annotation(p))
        .collect()
}
