//! Capabilities against a real component that uses `kv` (the `kv-probe`
//! fixture): the kv backend injected through `RuntimeConfig` is the one its
//! calls reach, record mode journals them, and a replay answers them from the
//! journal without touching any backend, or fails naming what differed.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use skillhost_runtime::{
    Backends, CallError, CallOptions, CallReport, Capability, Grants, JournalMode, JournalRecord,
    KvBackend, KvFailure, KvGrant, KvNamespace, KvQuota, MemoryKv, Runtime, RuntimeConfig, Skill,
};

/// A kv backend that keeps its data in a [`MemoryKv`] and writes down every
/// operation that reaches it, so a test can see what a skill's calls touched.
#[derive(Default)]
struct WatchedKv {
    data: MemoryKv,
    seen: Mutex<Vec<String>>,
}

impl WatchedKv {
    fn note(&self, what: String) {
        self.seen.lock().unwrap().push(what);
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl KvBackend for WatchedKv {
    fn get(&self, namespace: &KvNamespace, key: &str) -> Result<Option<Vec<u8>>, KvFailure> {
        self.note(format!("get {}/{key}", namespace.name));
        self.data.get(namespace, key)
    }

    fn set(
        &self,
        namespace: &KvNamespace,
        key: &str,
        value: Vec<u8>,
        quota: KvQuota,
    ) -> Result<(), KvFailure> {
        self.note(format!("set {}/{key}", namespace.name));
        self.data.set(namespace, key, value, quota)
    }

    fn delete(&self, namespace: &KvNamespace, key: &str) -> Result<(), KvFailure> {
        self.note(format!("delete {}/{key}", namespace.name));
        self.data.delete(namespace, key)
    }

    fn list_keys(
        &self,
        namespace: &KvNamespace,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<String>, KvFailure> {
        self.note(format!("list-keys {}/{prefix}", namespace.name));
        self.data.list_keys(namespace, prefix, limit)
    }
}

/// A kv backend whose store is down: every operation fails.
struct DownKv;

impl KvBackend for DownKv {
    fn get(&self, _: &KvNamespace, _: &str) -> Result<Option<Vec<u8>>, KvFailure> {
        Err(KvFailure::Unavailable("the store is down".into()))
    }
    fn set(&self, _: &KvNamespace, _: &str, _: Vec<u8>, _: KvQuota) -> Result<(), KvFailure> {
        Err(KvFailure::Unavailable("the store is down".into()))
    }
    fn delete(&self, _: &KvNamespace, _: &str) -> Result<(), KvFailure> {
        Err(KvFailure::Unavailable("the store is down".into()))
    }
    fn list_keys(&self, _: &KvNamespace, _: &str, _: usize) -> Result<Vec<String>, KvFailure> {
        Err(KvFailure::Unavailable("the store is down".into()))
    }
}

struct Probe {
    _cache: tempfile::TempDir,
    _runtime: Runtime,
    skill: Arc<Skill>,
}

/// The `kv-probe` skill in a runtime whose kv backend is `kv`.
fn probe(kv: Arc<dyn KvBackend>) -> Probe {
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        backends: Backends {
            kv,
            ..Backends::default()
        },
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let skill = runtime
        .load_bytes(
            skillhost_tests::fixture_component("kv-probe"),
            "kv-probe.wasm",
        )
        .expect("load kv-probe");
    Probe {
        _cache: cache,
        _runtime: runtime,
        skill,
    }
}

/// Namespace `probe` as a grant outside a scenario reaches it.
fn probe_ns() -> KvNamespace {
    KvGrant::parse("probe").unwrap().namespace()
}

const QUOTA: KvQuota = KvQuota {
    max_keys: 100,
    max_bytes: 1 << 20,
};

fn granted(namespace: &str, journal: JournalMode) -> CallOptions {
    let mut grants = Grants::default();
    grants.add("kv", namespace).expect("grant kv");
    CallOptions {
        grants: Arc::new(grants),
        journal,
        ..CallOptions::default()
    }
}

fn read(skill: &Skill, key: &str, options: &CallOptions) -> CallReport {
    skill.call(&json!({ "key": key }), options)
}

/// A backend holding `greeting = hello` in namespace `probe`.
fn greeting_kv() -> Arc<WatchedKv> {
    let kv = WatchedKv::default();
    kv.data
        .set(&probe_ns(), "greeting", b"hello".to_vec(), QUOTA)
        .unwrap();
    Arc::new(kv)
}

/// What `kv-probe` journals when it reads `key` and finds `value`.
fn expected_journal(key: &str, value: Option<&str>) -> Vec<JournalRecord> {
    use base64::Engine as _;
    let found = value.map_or(Value::Null, |v| {
        json!(base64::engine::general_purpose::STANDARD.encode(v))
    });
    vec![
        JournalRecord {
            capability: Capability::Kv,
            request: json!({ "op": "get", "key": key }),
            response: json!({ "ok": found }),
        },
        JournalRecord {
            capability: Capability::Kv,
            request: json!({
                "op": "set",
                "key": "seen",
                "value_bytes": key.len(),
                "value_sha256": hex::encode(Sha256::digest(key.as_bytes())),
            }),
            response: json!({ "ok": null }),
        },
    ]
}

#[test]
fn the_injected_kv_backend_is_the_one_a_skill_reaches() {
    let kv = greeting_kv();
    let probe = probe(kv.clone());
    let options = granted("probe", JournalMode::Record);
    let out = read(&probe.skill, "greeting", &options)
        .into_result()
        .unwrap();
    assert_eq!(out, json!({ "text": "hello" }));
    assert_eq!(kv.seen(), ["get probe/greeting", "set probe/seen"]);
    assert_eq!(
        kv.data.get(&probe_ns(), "seen").unwrap().as_deref(),
        Some(&b"greeting"[..]),
        "the skill's write is in the injected backend"
    );

    // Another namespace sees none of it.
    let out = read(
        &probe.skill,
        "greeting",
        &granted("other", JournalMode::Record),
    )
    .into_result()
    .unwrap();
    assert_eq!(out, json!({ "text": "(none)" }));
}

#[test]
fn record_mode_journals_every_kv_call_in_order() {
    let probe = probe(greeting_kv());
    let report = read(
        &probe.skill,
        "greeting",
        &granted("probe", JournalMode::Record),
    );
    assert_eq!(report.result, Ok(json!({ "text": "hello" })));
    assert_eq!(report.journal, expected_journal("greeting", Some("hello")));
    assert!(report.denied.is_empty());

    let report = read(
        &probe.skill,
        "absent",
        &granted("probe", JournalMode::Record),
    );
    assert_eq!(report.result, Ok(json!({ "text": "(none)" })));
    assert_eq!(report.journal, expected_journal("absent", None));
}

#[test]
fn a_replay_against_an_empty_backend_gives_the_same_output_and_touches_nothing() {
    let recorded = {
        let probe = probe(greeting_kv());
        read(
            &probe.skill,
            "greeting",
            &granted("probe", JournalMode::Record),
        )
    };
    let recorded_output = serde_json::to_vec(recorded.result.as_ref().unwrap()).unwrap();

    let empty = Arc::new(WatchedKv::default());
    let probe = probe(empty.clone());
    let replay = JournalMode::Replay(recorded.journal.clone().into());
    let replayed = read(&probe.skill, "greeting", &granted("probe", replay));
    let replayed_output = serde_json::to_vec(replayed.result.as_ref().unwrap()).unwrap();
    assert_eq!(replayed_output, recorded_output, "byte-identical output");
    assert_eq!(replayed.journal, recorded.journal);
    assert!(
        empty.seen().is_empty(),
        "the replay reached the backend: {:?}",
        empty.seen()
    );
    assert_eq!(empty.data.get(&probe_ns(), "seen").unwrap(), None);

    // The same call recorded against the empty backend answers differently:
    // the output above came from the journal.
    let live = read(
        &probe.skill,
        "greeting",
        &granted("probe", JournalMode::Record),
    );
    assert_eq!(live.result, Ok(json!({ "text": "(none)" })));
}

#[test]
fn a_replay_that_asks_something_else_fails_naming_what_differed() {
    let recorded = {
        let probe = probe(greeting_kv());
        read(
            &probe.skill,
            "greeting",
            &granted("probe", JournalMode::Record),
        )
        .journal
    };
    let empty = Arc::new(WatchedKv::default());
    let probe = probe(empty.clone());
    let replay = JournalMode::Replay(recorded.clone().into());
    let report = read(&probe.skill, "farewell", &granted("probe", replay));
    let err = report.result.unwrap_err();
    match &err {
        CallError::JournalMismatch {
            skill,
            capability,
            entry,
            difference,
        } => {
            assert_eq!(
                (skill.as_str(), capability.as_str(), *entry),
                ("kv-probe", "kv", 0)
            );
            assert!(difference.contains(r#"{"key":"farewell"}"#), "{difference}");
            assert!(difference.contains(r#""key":"greeting""#), "{difference}");
        }
        other => panic!("expected a journal mismatch, got {other:?}"),
    }
    assert_eq!(err.kind(), "journal-mismatch");
    assert!(!err.retryable());
    assert!(
        err.to_string()
            .contains("skill `kv-probe` diverged from its journal at entry 0 (`kv`)"),
        "{err}"
    );
    assert!(report.journal.is_empty(), "nothing was answered");
    assert!(empty.seen().is_empty());

    // A journal that ends early: the skill's write has no entry.
    let short = JournalMode::Replay(recorded[..1].to_vec().into());
    let err = read(&probe.skill, "greeting", &granted("probe", short))
        .result
        .unwrap_err();
    assert!(
        matches!(&err, CallError::JournalMismatch { entry: 1, difference, .. }
            if difference.contains("past the end of the journal (1 entries)")),
        "{err:?}"
    );

    // A journal with an entry the replay never asks for.
    let mut long = recorded.clone();
    long.push(recorded[0].clone());
    let err = read(
        &probe.skill,
        "greeting",
        &granted("probe", JournalMode::Replay(long.into())),
    )
    .result
    .unwrap_err();
    assert!(
        matches!(&err, CallError::JournalMismatch { entry: 2, difference, .. }
            if difference.contains("ended after 2 of the journal's 3 entries")),
        "{err:?}"
    );
    assert!(empty.seen().is_empty());

    // A replay a limit cut short reports the limit, not the unused entries.
    let mut limited = granted("probe", JournalMode::Replay(recorded.clone().into()));
    limited.limits.fuel = Some(1);
    let err = read(&probe.skill, "greeting", &limited).result.unwrap_err();
    assert_eq!(err.kind(), "fuel-exhausted", "{err:?}");
}

#[test]
fn a_backend_failure_is_journaled_and_replayed() {
    let probe_down = probe(Arc::new(DownKv));
    let recorded = read(
        &probe_down.skill,
        "greeting",
        &granted("probe", JournalMode::Record),
    );
    let err = recorded.result.clone().unwrap_err();
    assert_eq!(
        (err.code(), err.retryable()),
        ("kv-unavailable", true),
        "{err:?}"
    );
    assert_eq!(
        recorded.journal,
        [JournalRecord {
            capability: Capability::Kv,
            request: json!({ "op": "get", "key": "greeting" }),
            response: json!({ "error": {
                "code": "kv-unavailable",
                "message": "the store is down",
                "retryable": true,
            }}),
        }]
    );

    let healthy = probe(greeting_kv());
    let replay = JournalMode::Replay(recorded.journal.clone().into());
    let replayed = read(&healthy.skill, "greeting", &granted("probe", replay));
    assert_eq!(replayed.result, recorded.result);
}

#[test]
fn an_ungranted_kv_is_denied_reaches_nothing_and_journals_nothing() {
    let kv = greeting_kv();
    let probe = probe(kv.clone());
    let report = read(&probe.skill, "greeting", &CallOptions::default());
    assert_eq!(report.denied, vec![Capability::Kv]);
    assert!(report.journal.is_empty());
    let err = report.into_result().unwrap_err();
    match &err {
        CallError::CapabilityDenied {
            skill,
            capability,
            message,
        } => {
            assert_eq!((skill.as_str(), capability.as_str()), ("kv-probe", "kv"));
            assert!(message.contains("capability-not-granted"), "{message}");
        }
        other => panic!("expected capability-denied, got {other:?}"),
    }
    assert!(
        kv.seen().is_empty(),
        "an ungranted call reached the backend"
    );
}

#[test]
fn a_call_without_journaled_host_calls_has_an_empty_unallocated_journal() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let echo = runtime
        .load_file(&skillhost_tests::dist("echo"))
        .expect("load echo");
    let report = echo.call(
        &json!({ "message": "hi", "repeat": 2 }),
        &CallOptions::default(),
    );
    assert!(report.result.is_ok(), "{:?}", report.result);
    assert!(report.journal.is_empty());
    assert_eq!(report.journal.capacity(), 0);
}

/// `kv-probe` with a manifest that declares no capability: its toolchain
/// imported `kv`, its author did not ask for it.
fn undeclared_probe(kv: Arc<dyn KvBackend>) -> Probe {
    let cache = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(cache.path().to_path_buf()),
        backends: Backends {
            kv,
            ..Backends::default()
        },
        ..RuntimeConfig::default()
    })
    .expect("runtime");
    let component = skillhost_tests::fixture_component_with("kv-probe", |wat| {
        let declared = "(i32.store (i32.const 1060) (i32.const 1))";
        assert!(wat.contains(declared));
        wat.replace(declared, "(i32.store (i32.const 1060) (i32.const 0))")
    });
    let skill = runtime
        .load_bytes(component, "undeclared.wasm")
        .expect("load the probe");
    Probe {
        _cache: cache,
        _runtime: runtime,
        skill,
    }
}

#[test]
fn capabilities_are_what_the_manifest_declares_not_what_is_imported() {
    let declared = probe(greeting_kv());
    assert_eq!(declared.skill.capabilities, [Capability::Kv].into());
    assert!(declared.skill.undeclared_imports().is_empty());

    let kv = greeting_kv();
    let probe = undeclared_probe(kv.clone());
    assert!(probe.skill.capabilities.is_empty());
    assert!(probe.skill.imported_capabilities.contains(&Capability::Kv));
    assert_eq!(probe.skill.undeclared_imports(), [Capability::Kv]);
}

#[test]
fn an_undeclared_import_is_denied_even_when_the_call_grants_it() {
    let kv = greeting_kv();
    let probe = undeclared_probe(kv.clone());
    let report = read(
        &probe.skill,
        "greeting",
        &granted("probe", JournalMode::Record),
    );
    assert_eq!(report.denied, [Capability::Kv]);
    match report.result {
        Err(CallError::CapabilityDenied { capability, .. }) => assert_eq!(capability, "kv"),
        other => panic!("expected capability-denied, got {other:?}"),
    }
    // The denying instance has no backend to reach.
    assert!(kv.seen().is_empty(), "{:?}", kv.seen());
    assert!(report.journal.is_empty());
}

/// The guest SDK cannot read the host's list of capabilities (it is built
/// for the guest, without the runtime), so its names are held to the list
/// here: `skillhost_sdk::manifest!` accepts exactly the capabilities the
/// host knows and names them all when it refuses one, and the contract's
/// manifest record lists them.
#[test]
fn the_sdk_and_the_contract_name_every_capability() {
    let root = skillhost_tests::repo_root();
    let names = Capability::ALL.map(Capability::name);
    let sdk = std::fs::read_to_string(root.join("sdk/src/lib.rs")).unwrap();
    let listed = sdk
        .lines()
        .find(|line| line.contains("pub const CAPABILITIES"))
        .expect("sdk/src/lib.rs: `CAPABILITIES`");
    let listed: Vec<&str> = listed
        .split_once('=')
        .unwrap()
        .1
        .split('"')
        .skip(1)
        .step_by(2)
        .collect();
    assert_eq!(listed, names, "sdk/src/lib.rs: `CAPABILITIES`");
    let refusal = sdk
        .lines()
        .find(|line| line.contains("unknown capability in skillhost_sdk::manifest!"))
        .expect("sdk/src/lib.rs: `check_capability`'s message");
    for name in names {
        assert!(
            refusal.contains(&format!("\\\"{name}\\\"")),
            "sdk/src/lib.rs: `check_capability`'s message does not name `{name}`"
        );
    }
    let wit = std::fs::read_to_string(root.join("wit/skill.wit")).unwrap();
    let start = wit
        .find("/// The host capabilities the skill needs:")
        .expect("wit/skill.wit: the manifest's `capabilities`");
    let doc = &wit[start..start + wit[start..].find("capabilities:").unwrap()];
    for name in names {
        assert!(
            doc.contains(&format!("`{name}`")),
            "wit/skill.wit: the manifest's `capabilities` does not name `{name}`"
        );
    }
}
