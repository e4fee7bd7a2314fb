//! The `kv` capability over the run store, on SQLite and Postgres: a
//! scenario reaches only its own namespaces, whatever another scenario
//! calls its own, unless both share a namespace on purpose; and every
//! backend (memory, SQLite, Postgres) answers the same operations alike,
//! keys and prefixes with NUL, `%`, `_` and `\` included.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;
use skillhost_engine::kv::StoreKv;
use skillhost_engine::{Engine, NoEvents};
use skillhost_runtime::{KvBackend, KvFailure, KvGrant, KvNamespace, MemoryKv};
use skillhost_scenario::LoadedScenario;
use skillhost_store::{RunStatus, Store};

use crate::{Db, load};

/// A scenario named `name` whose one node reads `input.key` with the
/// `kv-probe` skill under `grant`, then writes the key it read under
/// `seen`.
fn probe_scenario(dir: &Path, name: &str, grant: &str) -> Arc<LoadedScenario> {
    let component = dir.join("kv-probe.wasm");
    if !component.exists() {
        std::fs::write(&component, skillhost_tests::fixture_component("kv-probe")).unwrap();
    }
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            r#"[scenario]
name = "{name}"
version = "0.1.0"
description = "reads a key of kv and remembers which key it read"

[input]
key = {{ type = "string" }}

[state]
read = {{ type = "string" }}

[skills.probe]
component = "kv-probe.wasm"

[[node]]
id = "read"
skill = "probe"
capabilities = {{ kv = {grant} }}
input = {{ key = "input.key" }}
writes = [{{ field = "read", from = "output.text" }}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "read"
to = "done"
"#
        ),
    )
    .unwrap();
    load(&path)
}

/// What a run of `scenario` read for `key` on `store`, whose `kv` is the
/// store's as every `host` command's is.
async fn read(store: &Store, scenario: &LoadedScenario, key: &str) -> String {
    let engine = Engine::new(Some(store.clone()), Arc::new(NoEvents));
    let outcome = engine
        .start(scenario, json!({ "key": key }), None)
        .await
        .unwrap();
    assert_eq!(
        outcome.status,
        RunStatus::Completed,
        "{:?}",
        outcome.failure
    );
    outcome.state["read"].as_str().unwrap().to_owned()
}

async fn scenarios_reach_only_their_own_namespaces_unless_shared(db: Db) {
    let dir = tempfile::tempdir().unwrap();
    let chat = probe_scenario(dir.path(), "chat", "\"memory\"");
    let other = probe_scenario(dir.path(), "other", "\"memory\"");
    // `chat` writes `seen = "first"` in its own `memory`.
    assert_eq!(read(&db.store, &chat, "first").await, "(none)");
    assert_eq!(read(&db.store, &chat, "seen").await, "first");
    // `other`, granting a namespace of the same name, sees none of it, and
    // its own write leaves `chat`'s alone.
    assert_eq!(read(&db.store, &other, "seen").await, "(none)");
    assert_eq!(read(&db.store, &other, "seen").await, "seen");
    assert_eq!(read(&db.store, &chat, "seen").await, "seen");
    assert_eq!(read(&db.store, &chat, "seen").await, "seen");
    let keys = |owner: &str| {
        let grant = KvGrant::parse("memory").unwrap().owned_by(owner);
        let ns = grant.namespace();
        let store = db.store.clone();
        async move {
            let space = skillhost_store::KvSpace {
                scope: &ns.scope,
                namespace: &ns.name,
            };
            store.kv_keys(space, "", 100).await.unwrap()
        }
    };
    assert_eq!(keys("chat").await, ["seen"]);
    assert_eq!(keys("other").await, ["seen"]);

    // Shared on purpose by both: one namespace, apart from either's own.
    let shared = r#"{ namespace = "memory", shared = true }"#;
    let writer = probe_scenario(dir.path(), "writer", shared);
    let reader = probe_scenario(dir.path(), "reader", shared);
    assert_eq!(read(&db.store, &writer, "w").await, "(none)");
    assert_eq!(read(&db.store, &reader, "seen").await, "w");
    assert_eq!(read(&db.store, &chat, "seen").await, "seen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_reach_only_their_own_namespaces_unless_shared_on_sqlite() {
    scenarios_reach_only_their_own_namespaces_unless_shared(Db::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scenarios_reach_only_their_own_namespaces_unless_shared_on_postgres() {
    scenarios_reach_only_their_own_namespaces_unless_shared(Db::postgres().await).await;
}

/// What a backend answered to one operation, comparable across backends.
#[derive(Debug, PartialEq)]
enum Answer {
    Set(Result<(), &'static str>),
    Get(Result<Option<Vec<u8>>, ()>),
    Keys(Result<Vec<String>, ()>),
}

/// The same operations on `backend`: keys with `%`, `_`, `\`, non-ASCII
/// and NUL set, then read and listed by every prefix that could disagree.
fn exercise(backend: &dyn KvBackend) -> Vec<Answer> {
    let grant = KvGrant::parse("agree").unwrap().owned_by("agreement");
    let ns: KvNamespace = grant.namespace();
    let keys = [
        "a",
        "a%",
        "a_b",
        "a\\b",
        "ab",
        "a\u{e9}",
        "a\u{1f600}",
        "b",
        "a\0",
        "a\0b",
        "\0",
    ];
    let mut answers = Vec::new();
    for key in keys {
        let set = backend.set(&ns, key, key.as_bytes().to_vec(), grant.quota());
        answers.push(Answer::Set(set.map_err(|e| match e {
            KvFailure::OverQuota(_) => "over quota",
            KvFailure::Unavailable(_) => "refused",
        })));
    }
    for key in keys {
        answers.push(Answer::Get(backend.get(&ns, key).map_err(drop)));
    }
    let prefixes = [
        "",
        "a",
        "a%",
        "a_",
        "a\\",
        "a\u{e9}",
        "\u{1f600}",
        "a\0",
        "\0",
        "a\0b",
        "b\0",
        "z",
    ];
    for prefix in prefixes {
        answers.push(Answer::Keys(
            backend.list_keys(&ns, prefix, 100).map_err(drop),
        ));
    }
    answers.push(Answer::Keys(backend.list_keys(&ns, "a", 2).map_err(drop)));
    answers
}

/// Every kv backend answers alike: the memory one, and the store's on
/// SQLite and on Postgres. A key with NUL is refused by each (none can
/// hold it, Postgres's text least of all), so a prefix with NUL lists
/// nothing on each, where SQLite once stopped comparing at the NUL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kv_backend_answers_the_same_operations_alike() {
    let memory = exercise(&MemoryKv::default());
    let listed = |answer: &Answer| match answer {
        Answer::Keys(Ok(keys)) => keys.len(),
        _ => 0,
    };
    // The operations are worth comparing: keys were listed, and NUL refused.
    assert!(memory.iter().map(listed).sum::<usize>() > 10, "{memory:?}");
    assert!(memory.contains(&Answer::Set(Err("refused"))), "{memory:?}");
    assert!(
        memory.contains(&Answer::Keys(Ok(vec!["a%".into()]))),
        "{memory:?}"
    );
    for db in [Db::sqlite().await, Db::postgres().await] {
        let backend = StoreKv::over(db.store.clone(), tokio::runtime::Handle::current()).0;
        let answers = tokio::task::spawn_blocking(move || exercise(&*backend))
            .await
            .unwrap();
        assert_eq!(answers, memory, "{} disagrees with memory", db.url);
    }
}
