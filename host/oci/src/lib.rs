//! Skill components in OCI registries: publishing a component as a CNCF
//! Wasm OCI artifact (`layout.rs`), pushing it through oci-client and
//! pulling one into a content-addressed local cache (`registry.rs`,
//! `cache.rs`) through the host's own bounded client of the distribution
//! API (`distribution.rs`), the credentials and host config that decide how
//! a registry is reached and what a pull may take (`credentials.rs`,
//! `config.rs`), scenario locks (`lock.rs`), resolving a
//! scenario's `oci://` components for a run (`resolve.rs`), and signatures
//! in cosign's key-based layout with a trust policy (`signature.rs`).
//!
//! Knows nothing of scenarios, the runtime or the store: a caller hands it
//! references (and aliases), it hands back files in the cache. Every blob
//! it hands back was checked against its digest when it was stored and is
//! checked again before it is used.

pub mod cache;
pub mod config;
pub mod credentials;
pub mod distribution;
mod error;
pub mod layout;
pub mod lock;
pub mod reference;
pub mod registry;
pub mod resolve;
pub mod signature;

pub use cache::Cache;
pub use config::{HostConfig, PullLimits};
pub use credentials::Credentials;
pub use error::{OciError, Result};
pub use lock::{Lock, LockedComponent, lock_path};
pub use reference::ComponentRef;
pub use registry::{Connection, Progress, Pulled, Pushed, Quiet, Registry};
pub use resolve::{ResolveOptions, Resolved, Resolver, TrustPolicy};
pub use signature::{PrivateKey, PublicKey};
