//! The journal a run leaves of its host calls, on the `kv-journal`
//! scenario (`tests/e2e/engine/kv_journal.toml`: a skill node and a map node
//! whose `kv-probe` skill reads a key and writes `seen`), which the replay
//! tests here and `host replay`'s end-to-end test run too: a node's calls are committed with its step, a map node's
//! item by item, and a node that fails after its calls commits them with
//! the failure.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::json;
use skillhost_engine::{Engine, NoEvents, RunOutcome};
use skillhost_runtime::{
    Backends, KvBackend, KvGrant, MemoryKv, PoolConfig, Runtime, RuntimeConfig,
};
use skillhost_store::{RunStatus, Store};

use crate::Db;

/// The scenario, written once for every test that runs it.
const KV_SCENARIO: &str = include_str!("../../../../tests/e2e/engine/kv_journal.toml");

/// The `kv-journal` scenario (or a variant of its text) in its own
/// directory, next to the `kv-probe` component.
pub struct KvScenario {
    pub dir: tempfile::TempDir,
}

impl KvScenario {
    pub fn new() -> KvScenario {
        KvScenario::with_text(KV_SCENARIO)
    }

    /// The scenario with `text` in place of the file's.
    pub fn with_text(text: &str) -> KvScenario {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("kv-probe.wasm"),
            skillhost_tests::fixture_component("kv-probe"),
        )
        .unwrap();
        std::fs::write(dir.path().join("kv-journal.toml"), text).unwrap();
        KvScenario { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("kv-journal.toml")
    }

    /// Runs it on `store` with input `key = "greeting"` and a runtime whose
    /// kv (namespace `shared`) holds `greeting`, `a` and `b`, and checks
    /// that it completed with what those hold.
    pub async fn run(&self, store: &Store) -> RunOutcome {
        let outcome = self.start(store).await;
        assert_eq!(
            outcome.status,
            RunStatus::Completed,
            "{:?}",
            outcome.failure
        );
        assert_eq!(
            outcome.state.get("readings"),
            Some(&json!(["1", "2", "(none)"]))
        );
        outcome
    }

    /// Runs it as [`KvScenario::run`] does, whatever the outcome.
    pub async fn start(&self, store: &Store) -> RunOutcome {
        let loaded = self.loaded_with_kv();
        Engine::new(Some(store.clone()), Arc::new(NoEvents))
            .with_runtime_kv()
            .start(&loaded, json!({ "key": "greeting" }), None)
            .await
            .unwrap()
    }

    /// The scenario loaded by a runtime of its own whose kv (the
    /// scenario's namespace `shared`) holds `greeting`, `a` and `b`.
    pub fn loaded_with_kv(&self) -> skillhost_scenario::LoadedScenario {
        let kv = MemoryKv::default();
        let grant = KvGrant::parse("shared").unwrap().owned_by("kv-journal");
        for (key, value) in [("greeting", "hello"), ("a", "1"), ("b", "2")] {
            kv.set(
                &grant.namespace(),
                key,
                value.as_bytes().to_vec(),
                grant.quota(),
            )
            .unwrap();
        }
        let recording = Runtime::new(RuntimeConfig {
            cache_dir: Some(self.dir.path().join("cache")),
            pool: PoolConfig {
                component_instances: 16,
                core_instances: 128,
                memories: 32,
                tables: 64,
            },
            backends: Backends {
                kv: Arc::new(kv),
                ..Backends::default()
            },
        })
        .unwrap();
        skillhost_scenario::load(&self.path(), &recording).expect("scenario loads")
    }
}

#[tokio::test]
async fn a_nodes_kv_calls_are_committed_to_the_journal_with_its_step() {
    let db = Db::sqlite().await;
    let outcome = KvScenario::new().start(&db.store).await;
    let journal = db.store.journal(&outcome.run_id).await.unwrap();
    assert_eq!(
        outcome.status,
        RunStatus::Completed,
        "{:?}",
        outcome.failure
    );
    assert_eq!(outcome.state.get("greeting"), Some(&json!("hello")));
    assert_eq!(
        outcome.state.get("readings"),
        Some(&json!(["1", "2", "(none)"]))
    );
    let rows: Vec<(u64, &str, &str, String, &serde_json::Value)> = journal
        .iter()
        .map(|e| {
            let what = e.request["key"].as_str().unwrap_or_default();
            (
                e.seq,
                e.node_id.as_str(),
                e.kind.as_str(),
                format!("{} {what}", e.request["op"].as_str().unwrap()),
                &e.response,
            )
        })
        .collect();
    let ok_null = json!({ "ok": null });
    assert_eq!(
        rows,
        [
            (
                1,
                "read_one",
                "kv",
                "get greeting".to_string(),
                &json!({ "ok": "aGVsbG8=" })
            ),
            (1, "read_one", "kv", "set seen".to_string(), &ok_null),
            (
                2,
                "read_many",
                "kv",
                "get a".to_string(),
                &json!({ "ok": "MQ==" })
            ),
            (2, "read_many", "kv", "set seen".to_string(), &ok_null),
            (
                2,
                "read_many",
                "kv",
                "get b".to_string(),
                &json!({ "ok": "Mg==" })
            ),
            (2, "read_many", "kv", "set seen".to_string(), &ok_null),
            (
                2,
                "read_many",
                "kv",
                "get c".to_string(),
                &json!({ "ok": null })
            ),
            (2, "read_many", "kv", "set seen".to_string(), &ok_null),
        ]
    );
    // Each write's request names the value it wrote, by length and digest.
    assert_eq!(journal[1].request["value_bytes"], json!("greeting".len()));
    assert_eq!(journal[7].request["value_bytes"], json!(1));
}

#[tokio::test]
async fn a_node_that_fails_after_its_kv_calls_commits_them_with_the_failure() {
    let scenario = KV_SCENARIO.replace(
        "writes = [{ field = \"greeting\", from = \"output.text\" }]",
        "post = [{ name = \"says hi\", when = \"output.text == 'hi'\", message = \"it did not say hi\" }]\n\
         writes = [{ field = \"greeting\", from = \"output.text\" }]",
    );
    assert_ne!(scenario, KV_SCENARIO);
    let db = Db::sqlite().await;
    let outcome = KvScenario::with_text(&scenario).start(&db.store).await;
    let journal = db.store.journal(&outcome.run_id).await.unwrap();
    assert_eq!(outcome.status, RunStatus::Failed);
    let rows: Vec<(u64, &str, &serde_json::Value)> = journal
        .iter()
        .map(|e| (e.seq, e.node_id.as_str(), &e.request["op"]))
        .collect();
    assert_eq!(
        rows,
        [
            (1, "read_one", &json!("get")),
            (1, "read_one", &json!("set"))
        ]
    );
    assert_eq!(journal[0].response, json!({ "ok": "aGVsbG8=" }));
}
