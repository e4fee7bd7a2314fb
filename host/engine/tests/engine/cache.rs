//! The node cache on real components and both stores: a cached node's
//! output is recorded by its step's commit and reused by a later run (the
//! skill is not called, the step says where the output came from), a
//! different input or an expired entry is a miss, a call that made a
//! journaled host call is never recorded, an edited entry is not served,
//! and a run with a cached step replays clean.

use serde_json::{Value, json};
use skillhost_engine::replay::{ComponentSearch, RunExport, load_exported, replay};
use skillhost_store::{RunStatus, StepRow};

use crate::{Db, Ran, completed, load, run, runtime, scenario};

/// The step row of `node` in run `ran`, and its detail.
async fn step_of(db: &Db, ran: &Ran, node: &str) -> (StepRow, Value) {
    let step = db
        .steps(&ran.outcome.run_id)
        .await
        .into_iter()
        .find(|s| s.node_id == node && s.seq.is_some())
        .unwrap();
    let detail = step.detail.clone().unwrap_or(Value::Null);
    (step, detail)
}

async fn a_cached_node_reuses_an_output_another_run_recorded(db: Db) {
    let loaded = load(&scenario("cached"));
    let first = run(Some(db.store.clone()), &loaded, json!({"message": "hi"})).await;
    completed(&first);
    let (recorded, detail) = step_of(&db, &first, "shout").await;
    assert_eq!(detail.get("cached"), None, "{detail}");
    assert!(recorded.fuel_consumed.unwrap() > 0);

    // Another handle, as another worker: the same input is a hit.
    let second = run(Some(db.reopen().await), &loaded, json!({"message": "hi"})).await;
    completed(&second);
    assert_eq!(second.state(), first.state());
    let (step, detail) = step_of(&db, &second, "shout").await;
    assert_eq!(detail["cached"]["run_id"], json!(first.outcome.run_id));
    assert_eq!(detail["cached"]["seq"], 1);
    assert_eq!(detail["cached"]["node"], "shout");
    assert_eq!(step.fuel_consumed, Some(0));
    assert_eq!(step.output_hash, recorded.output_hash);
    // The uncached node after it ran.
    let (count, detail) = step_of(&db, &second, "count").await;
    assert_eq!(detail.get("cached"), None);
    assert!(count.fuel_consumed.unwrap() > 0);

    // Another input is a miss.
    let third = run(Some(db.store.clone()), &loaded, json!({"message": "ho"})).await;
    let (_, detail) = step_of(&db, &third, "shout").await;
    assert_eq!(detail.get("cached"), None);
    assert_eq!(third.state()["echoed"], "hoho");

    // A run whose step was a hit replays clean: the skill is called, and
    // gives the recorded output.
    let export = RunExport::from_store(&db.store, &second.outcome.run_id)
        .await
        .unwrap();
    let reloaded = load_exported(&export, runtime(), None, &ComponentSearch::default()).unwrap();
    let report = replay(&export, &reloaded, &mut |_| {}).await.unwrap();
    assert_eq!(report.diverged_at, None, "{report:#?}");
}

#[tokio::test]
async fn a_cached_node_reuses_an_output_another_run_recorded_on_sqlite() {
    a_cached_node_reuses_an_output_another_run_recorded(Db::sqlite().await).await;
}

#[tokio::test]
async fn a_cached_node_reuses_an_output_another_run_recorded_on_postgres() {
    a_cached_node_reuses_an_output_another_run_recorded(Db::postgres().await).await;
}

/// An entry past its ttl is a miss; the run's own output replaces it.
#[tokio::test]
async fn an_expired_entry_is_not_served() {
    let text = std::fs::read_to_string(scenario("cached"))
        .unwrap()
        .replace(r#"ttl = "1h""#, r#"ttl = "2s""#);
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("cached.toml");
    std::fs::write(
        &copy,
        text.replace(
            "../../../../../skills/dist/echo.wasm",
            &skillhost_tests::dist("echo").display().to_string(),
        ),
    )
    .unwrap();
    let loaded = load(&copy);
    let db = Db::sqlite().await;
    let first = run(Some(db.store.clone()), &loaded, json!({"message": "hi"})).await;
    tokio::time::sleep(std::time::Duration::from_millis(2200)).await;
    let second = run(Some(db.store.clone()), &loaded, json!({"message": "hi"})).await;
    let (_, detail) = step_of(&db, &second, "shout").await;
    assert_eq!(detail.get("cached"), None, "{detail}");
    // The second run's own entry is served now (the TTL is long enough for
    // the third run to start within it on a loaded machine: 50 ms was not).
    let third = run(Some(db.store.clone()), &loaded, json!({"message": "hi"})).await;
    let (_, detail) = step_of(&db, &third, "shout").await;
    assert_eq!(detail["cached"]["run_id"], json!(second.outcome.run_id));
    assert_ne!(first.outcome.run_id, second.outcome.run_id);
}

/// An entry edited in the database is not served: the step says why, calls
/// the skill, and its commit replaces the entry.
#[tokio::test]
async fn an_edited_entry_is_refused_and_replaced() {
    use sqlx::Connection;
    let loaded = load(&scenario("cached"));
    let db = Db::sqlite().await;
    run(Some(db.store.clone()), &loaded, json!({"message": "hi"})).await;
    let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
    sqlx::raw_sql(r#"UPDATE node_cache SET output = '{"message":"pwned","length":5}'"#)
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let second = run(Some(db.store.clone()), &loaded, json!({"message": "hi"})).await;
    assert_eq!(second.state()["echoed"], "hihi");
    let (_, detail) = step_of(&db, &second, "shout").await;
    assert_eq!(detail.get("cached"), None);
    let refused = detail["cache_refused"].as_str().unwrap();
    assert!(refused.contains("corrupt node cache entry"), "{refused}");
    let third = run(Some(db.store.clone()), &loaded, json!({"message": "hi"})).await;
    let (_, detail) = step_of(&db, &third, "shout").await;
    assert_eq!(detail["cached"]["run_id"], json!(second.outcome.run_id));
}

/// A cached node whose call made a journaled host call (kv) is never
/// recorded: the next run calls again. Without a store nothing is cached.
#[tokio::test]
async fn a_call_with_journaled_host_calls_is_never_cached() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("kv-probe.wasm"),
        skillhost_tests::fixture_component("kv-probe"),
    )
    .unwrap();
    let path = dir.path().join("kv-cached.toml");
    std::fs::write(
        &path,
        r#"[scenario]
name = "kv-cached"
version = "0.1.0"
description = "a cached node whose skill reads kv"

[state]
text = { type = "string" }

[skills.probe]
component = "kv-probe.wasm"

[[node]]
id = "read"
skill = "probe"
capabilities = { kv = "shared" }
input = { key = "'k'" }
cache = { ttl = "1h" }
writes = [{ field = "text", from = "output.text" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "read"
to = "done"
"#,
    )
    .unwrap();
    let loaded = load(&path);
    let db = Db::sqlite().await;
    for _ in 0..2 {
        let ran = run(Some(db.store.clone()), &loaded, json!({})).await;
        assert_eq!(ran.outcome.status, RunStatus::Completed);
        let (_, detail) = step_of(&db, &ran, "read").await;
        assert_eq!(detail.get("cached"), None, "{detail}");
    }
    let count = {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&db.url).await.unwrap();
        sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM node_cache")
            .fetch_one(&mut conn)
            .await
            .unwrap()
    };
    assert_eq!(count, 0);

    // No store: the node runs every time, and nothing is looked up.
    let loaded = load(&scenario("cached"));
    let ran = run(None, &loaded, json!({"message": "hi"})).await;
    completed(&ran);
}
