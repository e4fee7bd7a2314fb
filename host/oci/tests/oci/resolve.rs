//! Resolving a scenario's components: locks, `--locked`, `--offline`.

use skillhost_oci::{ComponentRef, Lock, OciError, ResolveOptions};
use skillhost_tests::registry::TestRegistry;

use super::{cache, no_policy, push, resolver};

#[test]
fn a_lock_pins_a_tag_that_moved_and_locked_refuses_the_move() {
    let registry = TestRegistry::start();
    let first = push(&registry, "echo", "skills/tool:1");
    let text = registry.reference("skills/tool:1");
    let dir = tempfile::tempdir().unwrap();
    let online = resolver(cache(dir.path()), ResolveOptions::default());

    let resolved = online.resolve("tool", &text, None, &no_policy()).unwrap();
    assert_eq!(resolved.digest, first.digest);
    let lock = Lock::new(vec![resolved.lock_entry("tool", &text)]);

    // The tag moves to another component.
    let second = push(&registry, "text-stats", "skills/tool:1");
    assert_ne!(second.digest, first.digest);

    // With the lock, the pinned component runs (from the cache).
    let locked_run = online
        .resolve("tool", &text, Some(&lock), &no_policy())
        .unwrap();
    assert_eq!(
        (locked_run.digest.as_str(), locked_run.downloaded),
        (first.digest.as_str(), 0)
    );
    // Without it, the tag's new component.
    let unlocked = online.resolve("tool", &text, None, &no_policy()).unwrap();
    assert_eq!(unlocked.digest, second.digest);

    // --locked checks the tag against the registry and refuses.
    let strict = resolver(
        cache(dir.path()),
        ResolveOptions {
            locked: true,
            offline: false,
        },
    );
    let err = strict
        .resolve("tool", &text, Some(&lock), &no_policy())
        .unwrap_err();
    assert!(matches!(err, OciError::Lock(_)), "{err}");
    let message = err.to_string();
    assert!(message.contains("skill `tool`"), "{message}");
    assert!(
        message.contains(&second.digest) && message.contains(&first.digest),
        "{message}"
    );
    assert!(message.contains("host lock"), "{message}");
    // … and a skill the lock does not have, or pins under another reference.
    let err = strict
        .resolve("other", &text, Some(&lock), &no_policy())
        .unwrap_err();
    assert!(
        err.to_string().contains("not in the scenario's lock"),
        "{err}"
    );
    let renamed = registry.reference("skills/tool:2");
    let err = strict
        .resolve("tool", &renamed, Some(&lock), &no_policy())
        .unwrap_err();
    assert!(err.to_string().contains("the lock pins"), "{err}");
}

#[test]
fn offline_runs_from_the_cache_and_says_what_is_missing() {
    let registry = TestRegistry::start();
    let pushed = push(&registry, "echo", "skills/echo:1");
    let text = registry.reference("skills/echo:1");
    let dir = tempfile::tempdir().unwrap();
    let online = resolver(cache(dir.path()), ResolveOptions::default());
    let resolved = online.resolve("echo", &text, None, &no_policy()).unwrap();
    let lock = Lock::new(vec![resolved.lock_entry("echo", &text)]);
    registry.stop();

    // The registry is gone: the lock and the cache are enough, with or
    // without --offline.
    let found = online
        .resolve("echo", &text, Some(&lock), &no_policy())
        .unwrap();
    assert_eq!(found.path, resolved.path);
    let offline = resolver(
        cache(dir.path()),
        ResolveOptions {
            locked: false,
            offline: true,
        },
    );
    assert_eq!(
        offline
            .resolve("echo", &text, Some(&lock), &no_policy())
            .unwrap()
            .digest,
        pushed.digest
    );
    // Offline, the tag the cache last resolved is used without a lock.
    assert_eq!(
        offline
            .resolve("echo", &text, None, &no_policy())
            .unwrap()
            .digest,
        pushed.digest
    );
    // Without a lock and online, the stopped registry is the error.
    let err = online
        .resolve("echo", &text, None, &no_policy())
        .unwrap_err();
    assert!(matches!(err, OciError::Unreachable { .. }), "{err}");

    // Never pulled here: offline says so.
    let other = registry.reference("skills/other:1");
    let err = offline
        .resolve("other", &other, None, &no_policy())
        .unwrap_err();
    assert!(matches!(err, OciError::NotCached { .. }), "{err}");
    assert!(err.to_string().contains("--offline"), "{err}");
    let elsewhere = tempfile::tempdir().unwrap();
    let empty = resolver(
        cache(elsewhere.path()),
        ResolveOptions {
            locked: false,
            offline: true,
        },
    );
    let err = empty
        .resolve("echo", &text, Some(&lock), &no_policy())
        .unwrap_err();
    assert!(
        err.to_string().contains("not in the registry cache"),
        "{err}"
    );
    assert!(ComponentRef::parse(&text).is_ok());
}

#[test]
fn a_lock_that_disagrees_with_its_manifest_is_refused() {
    let registry = TestRegistry::start();
    push(&registry, "echo", "skills/echo:1");
    let text = registry.reference("skills/echo:1");
    let dir = tempfile::tempdir().unwrap();
    let online = resolver(cache(dir.path()), ResolveOptions::default());
    let resolved = online.resolve("echo", &text, None, &no_policy()).unwrap();
    let mut entry = resolved.lock_entry("echo", &text);
    entry.size += 1;
    let lock = Lock::new(vec![entry]);
    let err = online
        .resolve("echo", &text, Some(&lock), &no_policy())
        .unwrap_err();
    assert!(matches!(err, OciError::Lock(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("skill `echo`") && message.contains("edited or damaged"),
        "{message}"
    );
}
