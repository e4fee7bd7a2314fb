//! Resolving a scenario's registry components to files in the cache, the
//! way `host run`, `host check`, `host lock` and `host skill pull` need:
//!
//! - the digest: the lock's entry when it names the same reference (with
//!   `locked`, the registry must still resolve its tag to that digest, and
//!   a missing or stale entry is refused); else the reference's own digest;
//!   else the tag, resolved by the registry (or, `offline`, by what the
//!   cache last saw it resolve to);
//! - the content: from the cache when it is there and still hashes to its
//!   digests, else pulled (never `offline`);
//! - the trust policy: with keys, the component must carry a signature by
//!   one of them (checked from the cache, then fetched from the registry).
//!
//! Owns: that order and its errors, each naming the skill, the reference and
//! what to do. Must not: read scenarios (the caller passes each alias and
//! reference) or block an async runtime: registry calls run on a thread of
//! their own, and a run whose components are all locked and cached makes
//! none.

use std::path::PathBuf;
use std::sync::Arc;

use crate::cache::Cache;
use crate::error::{OciError, Result};
use crate::layout::ComponentManifest;
use crate::lock::{Lock, LockedComponent};
use crate::reference::ComponentRef;
use crate::registry::{Connection, Progress, Quiet, Registry};
use crate::signature::{self, PublicKey, SignatureLayer};

/// How a run may reach registries.
#[derive(Debug, Clone, Copy, Default)]
pub struct ResolveOptions {
    /// Refuse to run unless the lock pins every component and each tag
    /// still resolves to its pinned digest.
    pub locked: bool,
    /// Never reach a registry: run from the lock and the cache only.
    pub offline: bool,
}

/// The keys a component must be signed by; none means no policy.
#[derive(Debug, Clone, Default)]
pub struct TrustPolicy {
    pub keys: Vec<PublicKey>,
}

impl TrustPolicy {
    /// Reads every key file.
    pub fn load(paths: &[PathBuf]) -> Result<TrustPolicy> {
        Ok(TrustPolicy {
            keys: paths
                .iter()
                .map(|p| PublicKey::load(p))
                .collect::<Result<_>>()?,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }
}

/// A registry component, resolved and in the cache.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// The reference, pinned to the manifest's digest.
    pub reference: ComponentRef,
    /// The manifest's digest.
    pub digest: String,
    /// The component layer's digest and size.
    pub layer: String,
    pub size: u64,
    /// The component's file in the cache.
    pub path: PathBuf,
    /// Bytes downloaded to resolve it (0: all from the cache).
    pub downloaded: u64,
    /// The trusted key that verified its signature, if a policy asked.
    pub signed_by: Option<String>,
    /// The manifest's annotations.
    pub annotations: std::collections::BTreeMap<String, String>,
}

impl Resolved {
    /// Its lock entry under `alias`, for the reference `text`.
    pub fn lock_entry(&self, alias: &str, text: &str) -> LockedComponent {
        LockedComponent {
            alias: alias.to_string(),
            reference: text.to_string(),
            digest: self.digest.clone(),
            layer: self.layer.clone(),
            size: self.size,
        }
    }
}

/// Resolves references against the cache and the registries.
pub struct Resolver {
    cache: Cache,
    connection: Connection,
    options: ResolveOptions,
    progress: Arc<dyn Progress>,
}

impl Resolver {
    pub fn new(cache: Cache, connection: Connection, options: ResolveOptions) -> Resolver {
        Resolver {
            cache,
            connection,
            options,
            progress: Arc::new(Quiet),
        }
    }

    /// Shows downloads through `progress`.
    pub fn with_progress(mut self, progress: Arc<dyn Progress>) -> Resolver {
        self.progress = progress;
        self
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    /// Resolves the skill `alias`, written `text` in its scenario, with the
    /// scenario's lock (if any) and trust policy.
    pub fn resolve(
        &self,
        alias: &str,
        text: &str,
        lock: Option<&Lock>,
        policy: &TrustPolicy,
    ) -> Result<Resolved> {
        let reference = ComponentRef::parse(text)?;
        let rerun = "run `host lock` on the scenario to pin what the scenario names now";
        let entry = lock.and_then(|l| l.get(alias));
        let pinned = match entry {
            Some(entry) if entry.reference == text => Some(entry.digest.clone()),
            Some(entry) if self.options.locked => {
                return Err(OciError::Lock(format!(
                    "skill `{alias}`: the lock pins `{}` but the scenario names `{text}`; {rerun}",
                    entry.reference
                )));
            }
            Some(entry) => {
                tracing::warn!(
                    "skill `{alias}`: the lock pins `{}` but the scenario names `{text}`; \
                     resolving `{text}` ({rerun})",
                    entry.reference
                );
                None
            }
            None if self.options.locked => {
                return Err(OciError::Lock(format!(
                    "skill `{alias}` (`{text}`) is not in the scenario's lock and --locked \
                     was given; {rerun}"
                )));
            }
            None => None,
        };
        let entry = entry.filter(|e| e.reference == text);
        // A tag the lock pins is checked against the registry only under
        // --locked; otherwise the lock is what runs.
        let check_tag =
            self.options.locked && !self.options.offline && reference.digest().is_none();
        let known = match (&pinned, reference.digest()) {
            (Some(digest), _) => Some(digest.clone()),
            (None, Some(digest)) => Some(digest.to_string()),
            (None, None) if self.options.offline => Some(self.cache.tag(&reference)?.ok_or_else(
                || OciError::NotCached {
                    reference: reference.to_string(),
                    reason: format!(
                        "skill `{alias}`: --offline, and this machine never resolved the tag \
                         (no lock entry, nothing in the registry cache {}); run once without \
                         --offline, or `host lock` the scenario",
                        self.cache.root().display()
                    ),
                },
            )?),
            (None, None) => None,
        };
        if !check_tag
            && let Some(digest) = &known
            && let Some(found) = self.cached(&reference, digest, entry, policy)?
        {
            return Ok(found);
        }
        if self.options.offline {
            let digest = known.expect("offline always knows the digest");
            return Err(self.not_cached(alias, &reference, &digest, policy));
        }
        let named = reference.clone();
        self.on_registry_thread(&named, |registry| async move {
            let digest = match known {
                Some(digest) if !check_tag => digest,
                Some(digest) => {
                    let (now, _) = registry.resolve(&reference).await?;
                    if now != digest {
                        return Err(OciError::Lock(format!(
                            "skill `{alias}`: the tag `{reference}` now resolves to {now}, but \
                             the lock pins {digest} and --locked was given. If the new \
                             component is meant, run `host lock` on the scenario; otherwise \
                             tag the pinned one again"
                        )));
                    }
                    digest
                }
                None => registry.resolve(&reference).await?.0,
            };
            self.pull_and_check(&registry, &reference.pinned(&digest), entry, policy)
                .await
        })
    }

    /// Pulls `reference` from its registry now (a tag is resolved afresh,
    /// whatever any lock says) and checks it against `policy`: what
    /// `host skill pull` and `host lock` do.
    pub fn fetch(&self, reference: &ComponentRef, policy: &TrustPolicy) -> Result<Resolved> {
        if self.options.offline {
            return Err(OciError::NotCached {
                reference: reference.to_string(),
                reason: "pulling needs the registry, and --offline was given".to_string(),
            });
        }
        self.on_registry_thread(reference, |registry| async move {
            self.pull_and_check(&registry, reference, None, policy)
                .await
        })
    }

    /// Signs the manifest `reference` names (a tag is resolved first) with
    /// `key`; returns the digest signed and the signature's tag.
    pub fn sign(
        &self,
        reference: &ComponentRef,
        key: &signature::PrivateKey,
    ) -> Result<(String, String)> {
        self.on_registry_thread(reference, |registry| async move {
            let (digest, manifest) = registry.resolve(reference).await?;
            ComponentManifest::parse(&manifest, &reference.to_string())?;
            let tag = registry.sign(reference, &digest, key).await?;
            Ok((digest, tag))
        })
    }

    /// Runs `work` with a client for `reference`'s registry on a thread of
    /// its own with its own runtime, so it may be called from inside an
    /// async runtime (resume loads scenarios there) without blocking it;
    /// `work` is stopped, and the pull fails naming `reference`, when it
    /// runs past `[registries] pull_timeout_ms`.
    pub fn on_registry_thread<T, F, Fut>(&self, reference: &ComponentRef, work: F) -> Result<T>
    where
        T: Send,
        F: FnOnce(Arc<RegistryFor>) -> Fut + Send,
        Fut: std::future::Future<Output = Result<T>>,
    {
        let connection = &self.connection;
        let limit = connection.config.limits.pull_timeout;
        std::thread::scope(|scope| {
            scope
                .spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .map_err(|e| OciError::Machine(format!("cannot start a runtime: {e}")))?;
                    let registry = Arc::new(RegistryFor {
                        connection: connection.clone(),
                        clients: std::sync::Mutex::new(Vec::new()),
                    });
                    runtime
                        .block_on(async { tokio::time::timeout(limit, work(registry)).await })
                        .unwrap_or_else(|_| {
                            Err(OciError::Deadline {
                                reference: reference.to_string(),
                                registry: reference.registry().to_string(),
                                limit: describe_duration(limit),
                                config: connection
                                    .config
                                    .path
                                    .as_ref()
                                    .map(|p| format!(", {}", p.display()))
                                    .unwrap_or_default(),
                            })
                        })
                })
                .join()
                .unwrap_or_else(|_| {
                    Err(OciError::Machine(
                        "the registry thread panicked; run again with RUST_LOG=debug".to_string(),
                    ))
                })
        })
    }

    async fn pull_and_check(
        &self,
        registry: &RegistryFor,
        reference: &ComponentRef,
        entry: Option<&LockedComponent>,
        policy: &TrustPolicy,
    ) -> Result<Resolved> {
        let client = registry.client(reference)?;
        let pulled = client
            .pull(reference, &self.cache, self.progress.as_ref())
            .await?;
        let mut resolved = Resolved {
            reference: pulled.reference.clone(),
            digest: pulled.digest.clone(),
            layer: pulled.manifest.layer.digest.clone(),
            size: pulled.manifest.layer.size,
            path: pulled.path.clone(),
            downloaded: pulled.downloaded,
            signed_by: None,
            annotations: pulled.manifest.manifest.annotations.clone(),
        };
        check_entry(entry, &resolved)?;
        if !policy.is_empty() {
            let cached = cached_signatures(&self.cache, reference, &resolved.digest)?;
            let verified = cached
                .as_deref()
                .and_then(|s| signature::verify(&resolved.digest, s, &policy.keys).ok());
            let key = match verified {
                Some(key) => key,
                None => {
                    let fetched = client
                        .signatures(reference, &resolved.digest, Some(&self.cache))
                        .await?;
                    signature::verify(&resolved.digest, &fetched, &policy.keys).map_err(
                        |reason| OciError::Untrusted {
                            reference: resolved.reference.to_string(),
                            reason,
                        },
                    )?
                }
            };
            resolved.signed_by = Some(key.describe());
        }
        Ok(resolved)
    }

    /// The component from the cache alone, if all of it is there (and,
    /// under a policy, a signature that verifies).
    fn cached(
        &self,
        reference: &ComponentRef,
        digest: &str,
        entry: Option<&LockedComponent>,
        policy: &TrustPolicy,
    ) -> Result<Option<Resolved>> {
        let pinned = reference.pinned(digest);
        // A blob damaged on disk is removed by its check; online, it is
        // pulled again, offline that is the error.
        let damaged = |e: OciError| {
            if self.options.offline {
                Err(e)
            } else {
                tracing::warn!("{e}");
                Ok(None)
            }
        };
        let bytes = match self.cache.read_blob(digest) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Ok(None),
            Err(e) => return damaged(e),
        };
        let manifest = ComponentManifest::parse(&bytes, &pinned.to_string())?;
        let path = match self.cache.verified_blob(&manifest.layer.digest) {
            Ok(Some(path)) => path,
            Ok(None) => return Ok(None),
            Err(e) => return damaged(e),
        };
        let mut resolved = Resolved {
            reference: pinned,
            digest: digest.to_string(),
            layer: manifest.layer.digest.clone(),
            size: manifest.layer.size,
            path,
            downloaded: 0,
            signed_by: None,
            annotations: manifest.manifest.annotations.clone(),
        };
        check_entry(entry, &resolved)?;
        if !policy.is_empty() {
            let Some(signatures) = cached_signatures(&self.cache, reference, digest)? else {
                return Ok(None);
            };
            match signature::verify(digest, &signatures, &policy.keys) {
                Ok(key) => resolved.signed_by = Some(key.describe()),
                // Maybe signed since: the registry is asked (unless offline).
                Err(_) => return Ok(None),
            }
        }
        Ok(Some(resolved))
    }

    /// Why an offline resolution found nothing usable in the cache.
    fn not_cached(
        &self,
        alias: &str,
        reference: &ComponentRef,
        digest: &str,
        policy: &TrustPolicy,
    ) -> OciError {
        let pinned = reference.pinned(digest);
        let complete = self.cache.has_blob(digest);
        if complete && !policy.is_empty() {
            let reason = match cached_signatures(&self.cache, reference, digest) {
                Ok(Some(signatures)) => signature::verify(digest, &signatures, &policy.keys)
                    .err()
                    .unwrap_or_else(|| "its signature could not be read".to_string()),
                _ => "no signature of it is in the registry cache (--offline)".to_string(),
            };
            return OciError::Untrusted {
                reference: pinned.to_string(),
                reason,
            };
        }
        OciError::NotCached {
            reference: pinned.to_string(),
            reason: format!(
                "skill `{alias}`: --offline, and the component is not in the registry cache \
                 {}; run once without --offline (or `host skill pull {reference}`) while the \
                 registry is reachable",
                self.cache.root().display()
            ),
        }
    }
}

/// The registry clients of one resolution, one per registry.
pub struct RegistryFor {
    connection: Connection,
    clients: std::sync::Mutex<Vec<(String, Arc<Registry>)>>,
}

impl RegistryFor {
    /// The client for `reference`'s registry (made on first use).
    pub fn client(&self, reference: &ComponentRef) -> Result<Arc<Registry>> {
        let mut clients = self.clients.lock().expect("registry clients");
        if let Some((_, client)) = clients.iter().find(|(r, _)| r == reference.registry()) {
            return Ok(client.clone());
        }
        let client = Arc::new(Registry::connect(reference, &self.connection)?);
        clients.push((reference.registry().to_string(), client.clone()));
        Ok(client)
    }

    /// The digest `reference` resolves to now.
    pub async fn resolve(&self, reference: &ComponentRef) -> Result<(String, Vec<u8>)> {
        self.client(reference)?.resolve(reference).await
    }

    /// Signs `digest` in `reference`'s repository.
    pub async fn sign(
        &self,
        reference: &ComponentRef,
        digest: &str,
        key: &signature::PrivateKey,
    ) -> Result<String> {
        self.client(reference)?.sign(reference, digest, key).await
    }
}

/// `300 s`, `2.5 s`, `750 ms`.
fn describe_duration(limit: std::time::Duration) -> String {
    let ms = limit.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else if ms > 1000 {
        format!("{:.1} s", limit.as_secs_f64())
    } else {
        format!("{ms} ms")
    }
}

/// A lock entry must agree with the manifest it pins (a lock edited by hand,
/// or a registry that moved a digest, which it cannot).
fn check_entry(entry: Option<&LockedComponent>, resolved: &Resolved) -> Result<()> {
    let Some(entry) = entry else {
        return Ok(());
    };
    if entry.digest == resolved.digest
        && (entry.layer != resolved.layer || entry.size != resolved.size)
    {
        return Err(OciError::Lock(format!(
            "skill `{}`: the lock says manifest {} holds component {} ({} bytes), but it holds \
             {} ({} bytes); the lock was edited or damaged: run `host lock` on the scenario",
            entry.alias, entry.digest, entry.layer, entry.size, resolved.layer, resolved.size
        )));
    }
    Ok(())
}

/// The signatures of `digest` the cache holds, if their manifest and every
/// payload are there.
fn cached_signatures(
    cache: &Cache,
    reference: &ComponentRef,
    digest: &str,
) -> Result<Option<Vec<SignatureLayer>>> {
    let tag = reference.at_tag(&signature::signature_tag(digest));
    let Some(manifest_digest) = cache.tag(&tag)? else {
        return Ok(None);
    };
    let Some(bytes) = cache.read_blob(&manifest_digest)? else {
        return Ok(None);
    };
    let Ok(manifest) = serde_json::from_slice::<crate::layout::Manifest>(&bytes) else {
        return Ok(None);
    };
    let mut layers = Vec::new();
    for layer in manifest
        .layers
        .iter()
        .filter(|l| l.media_type == signature::PAYLOAD_MEDIA_TYPE)
    {
        let Some(payload) = cache.read_blob(&layer.digest)? else {
            return Ok(None);
        };
        layers.push(SignatureLayer {
            payload,
            layer: layer.clone(),
        });
    }
    Ok(Some(layers))
}
