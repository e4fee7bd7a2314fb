//! Capabilities against a real component that uses `kv` (the `kv-probe`
//! fixture): the kv backend injected through `RuntimeConfig` is the one its
//! calls reach, and only with a grant.

use std::sync::{Arc, Mutex};

use serde_json::json;
use skillhost_runtime::{
    Backends, CallError, CallOptions, CallReport, Capability, Grants, KvBackend, MemoryKv, Runtime,
    RuntimeConfig, Skill,
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
    fn get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.note(format!("get {namespace}/{key}"));
        self.data.get(namespace, key)
    }

    fn set(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<(), String> {
        self.note(format!("set {namespace}/{key}"));
        self.data.set(namespace, key, value)
    }

    fn delete(&self, namespace: &str, key: &str) -> Result<(), String> {
        self.note(format!("delete {namespace}/{key}"));
        self.data.delete(namespace, key)
    }

    fn list_keys(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, String> {
        self.note(format!("list-keys {namespace}/{prefix}"));
        self.data.list_keys(namespace, prefix)
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
        backends: Backends { kv },
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

fn granted(namespace: &str) -> CallOptions {
    let mut grants = Grants::default();
    grants.add("kv", namespace).expect("grant kv");
    CallOptions {
        grants: Arc::new(grants),
        ..CallOptions::default()
    }
}

fn read(skill: &Skill, key: &str, options: &CallOptions) -> CallReport {
    skill.call(&json!({ "key": key }), options)
}

/// A backend holding `greeting = hello` in namespace `probe`.
fn greeting_kv() -> Arc<WatchedKv> {
    let kv = WatchedKv::default();
    kv.data.set("probe", "greeting", b"hello".to_vec()).unwrap();
    Arc::new(kv)
}

#[test]
fn the_injected_kv_backend_is_the_one_a_skill_reaches() {
    let kv = greeting_kv();
    let probe = probe(kv.clone());
    let options = granted("probe");
    let out = read(&probe.skill, "greeting", &options)
        .into_result()
        .unwrap();
    assert_eq!(out, json!({ "text": "hello" }));
    assert_eq!(kv.seen(), ["get probe/greeting", "set probe/seen"]);
    assert_eq!(
        kv.data.get("probe", "seen").unwrap().as_deref(),
        Some(&b"greeting"[..]),
        "the skill's write is in the injected backend"
    );

    // Another namespace sees none of it.
    let out = read(&probe.skill, "greeting", &granted("other"))
        .into_result()
        .unwrap();
    assert_eq!(out, json!({ "text": "(none)" }));
}

#[test]
fn an_ungranted_kv_is_denied_and_reaches_nothing() {
    let kv = greeting_kv();
    let probe = probe(kv.clone());
    let report = read(&probe.skill, "greeting", &CallOptions::default());
    assert_eq!(report.denied, vec![Capability::Kv]);
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
