//! Pushing and pulling through the real registry: bytes, digests, the
//! cache, credentials and what goes wrong.

use skillhost_oci::{
    Cache, ComponentRef, Connection, Credentials, OciError, Registry, ResolveOptions,
};
use skillhost_tests::registry::{PASSWORD, TestRegistry, USER};

use super::{block_on, cache, no_policy, push, push_with, resolver};

#[test]
fn a_pushed_component_pulls_back_byte_for_byte_into_the_cache() {
    let registry = TestRegistry::start();
    let pushed = push(&registry, "echo", "skills/echo:0.1.0");
    let dir = tempfile::tempdir().unwrap();
    let resolver = resolver(cache(dir.path()), ResolveOptions::default());
    let reference = ComponentRef::parse(&registry.reference("skills/echo:0.1.0")).unwrap();

    let first = resolver.fetch(&reference, &no_policy()).unwrap();
    assert_eq!(first.digest, pushed.digest);
    let original = std::fs::read(skillhost_tests::dist("echo")).unwrap();
    assert_eq!(std::fs::read(&first.path).unwrap(), original);
    assert_eq!(first.size, original.len() as u64);
    assert!(first.downloaded >= original.len() as u64, "{first:?}");
    assert_eq!(first.annotations["org.opencontainers.image.title"], "echo");
    assert!(
        first.path.starts_with(dir.path()),
        "the component is in the cache"
    );

    // Again: nothing is downloaded but the manifest.
    let second = resolver.fetch(&reference, &no_policy()).unwrap();
    assert_eq!(
        (second.digest, second.downloaded),
        (pushed.digest.clone(), 0)
    );

    // By digest, too.
    let pinned = reference.pinned(&pushed.digest);
    assert_eq!(
        resolver.fetch(&pinned, &no_policy()).unwrap().path,
        first.path
    );
}

#[test]
fn unknown_tags_and_repositories_are_named() {
    let registry = TestRegistry::start();
    push(&registry, "echo", "skills/echo:1");
    let dir = tempfile::tempdir().unwrap();
    let resolver = resolver(cache(dir.path()), ResolveOptions::default());
    for missing in ["skills/echo:2", "skills/nothing:1"] {
        let reference = ComponentRef::parse(&registry.reference(missing)).unwrap();
        let err = resolver.fetch(&reference, &no_policy()).unwrap_err();
        assert!(matches!(err, OciError::NotFound { .. }), "{err}");
        assert!(!err.is_environment());
        assert!(err.to_string().contains(missing), "{err}");
    }
}

#[test]
fn an_unreachable_registry_is_the_environment() {
    // A port nothing listens on: bind one, then let it go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let resolver = resolver(cache(dir.path()), ResolveOptions::default());
    let reference = ComponentRef::parse(&format!("127.0.0.1:{port}/skills/echo:1")).unwrap();
    let err = resolver.fetch(&reference, &no_policy()).unwrap_err();
    assert!(matches!(err, OciError::Unreachable { .. }), "{err}");
    assert!(err.is_environment());
    let text = err.to_string();
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(text.contains("is running"), "{text}");
}

#[test]
fn credentials_are_presented_and_refusals_name_their_source() {
    let registry = TestRegistry::with_auth();
    let right = Connection {
        credentials: Some(Credentials::basic(USER, PASSWORD, "the test's user")),
        ..Connection::default()
    };
    let pushed = push_with(&registry, "echo", "skills/echo:1", &right);
    let reference = ComponentRef::parse(&registry.reference("skills/echo:1")).unwrap();
    let dir = tempfile::tempdir().unwrap();

    let with = |connection: Connection| {
        skillhost_oci::Resolver::new(cache(dir.path()), connection, ResolveOptions::default())
    };
    let pulled = with(right.clone()).fetch(&reference, &no_policy()).unwrap();
    assert_eq!(pulled.digest, pushed.digest);

    let wrong = Connection {
        credentials: Some(Credentials::basic(
            USER,
            "wrong",
            "--username and --password-stdin",
        )),
        ..Connection::default()
    };
    let fresh = ComponentRef::parse(&registry.reference("skills/echo:1")).unwrap();
    let err = with(wrong).fetch(&fresh, &no_policy()).unwrap_err();
    assert!(matches!(err, OciError::Unauthorized { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("--username and --password-stdin"), "{text}");
    assert!(
        !text.contains("wrong"),
        "the password is never shown: {text}"
    );
    assert!(!err.is_environment());

    let client = Registry::connect(&fresh, &Connection::default()).unwrap();
    let err = block_on(client.resolve(&fresh)).unwrap_err();
    assert!(matches!(err, OciError::Unauthorized { .. }), "{err}");
}

#[test]
fn a_blob_that_does_not_match_its_digest_is_refused_and_not_stored() {
    let registry = TestRegistry::start();
    let pushed = push(&registry, "echo", "skills/echo:1");
    let layer = pushed.manifest.layers[0].digest.clone();
    // Damage the registry's copy, keeping its length.
    let file = registry.blob_file(&layer);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let cache = cache(dir.path());
    let resolver = resolver(cache.clone(), ResolveOptions::default());
    let reference = ComponentRef::parse(&registry.reference("skills/echo:1")).unwrap();
    let err = resolver.fetch(&reference, &no_policy()).unwrap_err();
    assert!(matches!(err, OciError::DigestMismatch { .. }), "{err}");
    assert!(err.to_string().contains(&layer), "{err}");
    assert!(err.to_string().contains("nothing was stored"), "{err}");
    assert!(
        !cache.has_blob(&layer),
        "the damaged component is not in the cache"
    );
    assert!(!cache.has_blob(&pushed.digest), "nor its manifest");
}

#[test]
fn a_damaged_cache_is_noticed_and_pulled_again() {
    let registry = TestRegistry::start();
    push(&registry, "echo", "skills/echo:1");
    let dir = tempfile::tempdir().unwrap();
    let cache: Cache = cache(dir.path());
    let resolver = resolver(cache.clone(), ResolveOptions::default());
    let reference = ComponentRef::parse(&registry.reference("skills/echo:1")).unwrap();
    let first = resolver.fetch(&reference, &no_policy()).unwrap();
    std::fs::write(&first.path, b"\0asm damaged").unwrap();
    let again = resolver.fetch(&reference, &no_policy()).unwrap();
    assert!(again.downloaded > 0, "the damaged blob was fetched again");
    assert_eq!(
        std::fs::read(&again.path).unwrap(),
        std::fs::read(skillhost_tests::dist("echo")).unwrap()
    );
}

#[test]
fn the_token_flow_gets_a_bearer_token_with_the_credentials() {
    let registry = TestRegistry::with_token_auth();
    let right = Connection {
        credentials: Some(Credentials::basic(USER, PASSWORD, "the test's user")),
        ..Connection::default()
    };
    let pushed = push_with(&registry, "echo", "skills/echo:1", &right);
    let reference = ComponentRef::parse(&registry.reference("skills/echo:1")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let with = |connection: Connection| {
        skillhost_oci::Resolver::new(cache(dir.path()), connection, ResolveOptions::default())
    };
    let pulled = with(right).fetch(&reference, &no_policy()).unwrap();
    assert_eq!(pulled.digest, pushed.digest);

    // The token server refuses wrong credentials; anonymous gets no token.
    let wrong = Connection {
        credentials: Some(Credentials::basic(USER, "wrong", "the wrong password")),
        ..Connection::default()
    };
    let err = with(wrong).fetch(&reference, &no_policy()).unwrap_err();
    assert!(matches!(err, OciError::Unauthorized { .. }), "{err}");
    assert!(err.to_string().contains("the wrong password"), "{err}");
    let err = with(Connection::default())
        .fetch(&reference, &no_policy())
        .unwrap_err();
    assert!(matches!(err, OciError::Unauthorized { .. }), "{err}");
}
