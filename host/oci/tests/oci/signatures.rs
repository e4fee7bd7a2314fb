//! Signatures in cosign's layout and the trust policy, against the real
//! registry.

use skillhost_oci::{ComponentRef, OciError, PrivateKey, ResolveOptions, TrustPolicy};
use skillhost_tests::registry::TestRegistry;

use super::{cache, push, resolver};

fn key_pair(dir: &std::path::Path, name: &str) -> (PrivateKey, std::path::PathBuf) {
    let (private, public) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    );
    PrivateKey::generate()
        .write(&private, &public, false)
        .unwrap();
    (PrivateKey::load(&private).unwrap(), public)
}

#[test]
fn the_policy_takes_signed_components_and_refuses_the_rest() {
    let registry = TestRegistry::start();
    let signed = push(&registry, "echo", "skills/echo:1");
    push(&registry, "text-stats", "skills/stats:1");
    let dir = tempfile::tempdir().unwrap();
    let (alice, alice_pub) = key_pair(dir.path(), "alice");
    let (_, mallory_pub) = key_pair(dir.path(), "mallory");
    let online = resolver(cache(dir.path()), ResolveOptions::default());

    let echo = ComponentRef::parse(&registry.reference("skills/echo:1")).unwrap();
    let (digest, tag) = online.sign(&echo, &alice).unwrap();
    assert_eq!(digest, signed.digest);
    assert_eq!(tag, format!("sha256-{}.sig", &digest[7..]));
    // Signing again with the same key keeps one signature of that key.
    online.sign(&echo, &alice).unwrap();

    let trust_alice = TrustPolicy::load(std::slice::from_ref(&alice_pub)).unwrap();
    let resolved = online.fetch(&echo, &trust_alice).unwrap();
    assert!(
        resolved.signed_by.as_deref().unwrap().contains("alice.pub"),
        "{resolved:?}"
    );

    let trust_mallory = TrustPolicy::load(std::slice::from_ref(&mallory_pub)).unwrap();
    let err = online.fetch(&echo, &trust_mallory).unwrap_err();
    assert!(matches!(err, OciError::Untrusted { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("key the policy does not list"), "{text}");
    assert!(text.contains("mallory.pub"), "{text}");
    assert!(!err.is_environment());

    let stats = ComponentRef::parse(&registry.reference("skills/stats:1")).unwrap();
    let err = online.fetch(&stats, &trust_alice).unwrap_err();
    assert!(err.to_string().contains("not signed"), "{err}");

    // The signature is kept in the cache: with the registry gone, a
    // locked, offline resolution still verifies it.
    let text = registry.reference("skills/echo:1");
    let lock = skillhost_oci::Lock::new(vec![resolved.lock_entry("echo", &text)]);
    registry.stop();
    let offline = resolver(
        cache(dir.path()),
        ResolveOptions {
            locked: false,
            offline: true,
        },
    );
    let again = offline
        .resolve("echo", &text, Some(&lock), &trust_alice)
        .unwrap();
    assert!(again.signed_by.is_some());
    let err = offline
        .resolve("echo", &text, Some(&lock), &trust_mallory)
        .unwrap_err();
    assert!(matches!(err, OciError::Untrusted { .. }), "{err}");
}
