//! The registry client against a real registry (Debian's `docker-registry`
//! on 127.0.0.1), and against clients nobody here wrote: `skopeo` and the
//! `oras` Python SDK read what this crate pushes, this crate pulls what
//! `oras` pushes, and Python's `cryptography` verifies the signatures.

mod interop;
mod pull;
mod resolve;
mod signatures;

use std::path::Path;
use std::sync::Arc;

use skillhost_oci::{Cache, ComponentRef, Connection, Pushed, Quiet, Registry};
use skillhost_tests::registry::TestRegistry;

/// A runtime for the async client calls.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Pushes the shipped skill `skill` as `repository_and_tag`.
pub fn push(registry: &TestRegistry, skill: &str, repository_and_tag: &str) -> Pushed {
    push_with(registry, skill, repository_and_tag, &Connection::default())
}

pub fn push_with(
    registry: &TestRegistry,
    skill: &str,
    repository_and_tag: &str,
    connection: &Connection,
) -> Pushed {
    let bytes = std::fs::read(skillhost_tests::dist(skill)).unwrap();
    let reference = ComponentRef::parse(&registry.reference(repository_and_tag)).unwrap();
    let artifact =
        skillhost_oci::layout::Artifact::build(&bytes, "2026-01-01T00:00:00Z", &Default::default())
            .unwrap();
    let client = Registry::connect(&reference, connection).unwrap();
    block_on(client.push(&reference, &artifact, &bytes, &Quiet)).expect("push")
}

/// A cache in `dir`.
pub fn cache(dir: &Path) -> Cache {
    Cache::open(dir.join("cache")).unwrap()
}

/// A resolver over `cache` with default options.
pub fn resolver(cache: Cache, options: skillhost_oci::ResolveOptions) -> skillhost_oci::Resolver {
    skillhost_oci::Resolver::new(cache, Connection::default(), options)
}

pub fn no_policy() -> skillhost_oci::TrustPolicy {
    skillhost_oci::TrustPolicy::default()
}

pub fn quiet() -> Arc<Quiet> {
    Arc::new(Quiet)
}
