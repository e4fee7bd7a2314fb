//! The one rule for refusals, on both backends: a refusal rolls its
//! transaction back before it is returned. So what the refused write read
//! under its lock (the run's row, a kv namespace's usage row) is free the
//! moment the call returns: another connection locks it without waiting
//! (Postgres `SELECT … FOR UPDATE NOWAIT`; on SQLite the write lock, `BEGIN
//! IMMEDIATE` with no busy timeout), and no connection of the store is left
//! idle in a transaction (Postgres).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use skillhost_store::{
    KvLimits, KvSpace, KvWrite, MapItemRow, NewWait, RunStatus, Store, StoreError,
};
use skillhost_tests::store_fixtures::{commit, new_run, varied_change};
use sqlx::{Connection, PgConnection, SqliteConnection};

use crate::backends::{Db, Kind};

const NOTES: KvSpace<'static> = KvSpace {
    scope: "scenario:memo",
    namespace: "notes",
};

/// A connection beside the store's, opened before the refusals, so that
/// each check runs the moment a refusal has returned.
enum Checker {
    Postgres(PgConnection),
    Sqlite(SqliteConnection),
}

impl Checker {
    async fn new(db: &Db) -> Checker {
        match db.kind {
            Kind::Postgres | Kind::PgBouncer => {
                Checker::Postgres(PgConnection::connect(&db.direct).await.unwrap())
            }
            Kind::Sqlite => {
                let mut conn = SqliteConnection::connect(&db.url).await.unwrap();
                sqlx::raw_sql("PRAGMA busy_timeout = 0")
                    .execute(&mut conn)
                    .await
                    .unwrap();
                Checker::Sqlite(conn)
            }
        }
    }

    /// Fails unless run `run_id`'s row and NOTES' usage row can be locked
    /// at once, and (Postgres) no other connection is idle inside a
    /// transaction.
    async fn free_at_once(&mut self, run_id: &str, after: &str) {
        match self {
            Checker::Postgres(conn) => {
                let open: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE datname = current_database() AND pid <> pg_backend_pid() \
                     AND state LIKE 'idle in transaction%'",
                )
                .fetch_one(&mut *conn)
                .await
                .unwrap();
                assert_eq!(open, 0, "after {after}, a transaction was left open");
                let locked = sqlx::query_scalar::<_, String>(
                    "SELECT id FROM runs WHERE id = $1 FOR UPDATE NOWAIT",
                )
                .bind(run_id)
                .fetch_optional(&mut *conn)
                .await;
                assert!(
                    matches!(locked, Ok(Some(_))),
                    "after {after}, run `{run_id}`'s row is still locked: {locked:?}"
                );
                let usage = sqlx::query_scalar::<_, i64>(
                    "SELECT keys FROM kv_usage WHERE scope = $1 AND namespace = $2 \
                     FOR UPDATE NOWAIT",
                )
                .bind(NOTES.scope)
                .bind(NOTES.namespace)
                .fetch_optional(&mut *conn)
                .await;
                assert!(
                    usage.is_ok(),
                    "after {after}, the kv usage row is still locked: {usage:?}"
                );
            }
            Checker::Sqlite(conn) => {
                let began = sqlx::raw_sql("BEGIN IMMEDIATE").execute(&mut *conn).await;
                assert!(
                    began.is_ok(),
                    "after {after}, the write lock is still held: {began:?}"
                );
                sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await.unwrap();
            }
        }
    }
}

/// A run whose lease `worker-a` lost to `worker-b`; `worker-a`'s fenced
/// handle.
async fn taken_over(store: &Store, run_id: &str) -> Store {
    store
        .enqueue_run(&new_run(run_id, json!({"log": []})))
        .await
        .unwrap();
    let a = store
        .acquire_lease(run_id, "worker-a", Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    store
        .acquire_lease(run_id, "worker-b", Duration::from_secs(60))
        .await
        .unwrap();
    store.fenced(a)
}

async fn a_refusal_releases_what_it_locked_before_it_returns(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let fenced = taken_over(&store, "F").await;
    let mut checker = Checker::new(&db).await;
    let mut state = json!({"log": []});
    let mut visits = BTreeMap::new();

    // A commit with a journal entry (a transaction of several statements).
    let with_journal = commit("F", 1, &mut state, &mut visits, varied_change(1));
    let refused = fenced.commit_step(&with_journal).await.unwrap_err();
    assert!(refused.is_lease_lost(), "{refused}");
    checker
        .free_at_once("F", "a fenced commit with a journal")
        .await;

    // A commit without one (one statement; on Postgres the group commit).
    let mut plain = with_journal.clone();
    plain.journal.clear();
    let refused = fenced.commit_step(&plain).await.unwrap_err();
    assert!(refused.is_lease_lost(), "{refused}");
    checker.free_at_once("F", "a fenced commit").await;

    let refused = fenced
        .put_artifact("F", "report.md", "text/markdown", b"# late")
        .await
        .unwrap_err();
    assert!(refused.is_lease_lost(), "{refused}");
    checker.free_at_once("F", "a fenced artifact").await;

    let item = MapItemRow {
        run_id: "F".into(),
        node_id: "fan".into(),
        visit: 1,
        item_index: 0,
        output: json!({"i": 0}),
        output_hash: skillhost_store::state_hash(&json!({"i": 0})),
        duration_us: 1,
        fuel_consumed: 1,
        journal: Vec::new(),
        attempt: 1,
    };
    let refused = fenced.record_map_item(&item).await.unwrap_err();
    assert!(refused.is_lease_lost(), "{refused}");
    checker.free_at_once("F", "a fenced map item").await;

    // A wait reads the run's row under its lock first.
    let wait = NewWait {
        run_id: "F".into(),
        seq: 0,
        node_id: "ask".into(),
        prompt: "go?".into(),
        answer_schema: json!({"type": "object"}),
        timeout_ms: None,
    };
    let refused = fenced.wait_run(&wait).await.unwrap_err();
    assert!(refused.is_lease_lost(), "{refused}");
    checker.free_at_once("F", "a fenced wait").await;

    let refused = fenced
        .finish_run("F", RunStatus::Completed, Some(&json!({})), None)
        .await
        .unwrap_err();
    assert!(refused.is_lease_lost(), "{refused}");
    checker.free_at_once("F", "a fenced finish").await;

    // Refusals without a fence: an answer to a run that does not wait, a
    // cancel of a finished run.
    let refused = store
        .answer_wait("F", 0, &json!({}), "alice")
        .await
        .unwrap_err();
    assert!(refused.is_conflict(), "{refused}");
    checker.free_at_once("F", "a refused answer").await;
    store
        .create_run(&new_run("done", json!({"log": []})))
        .await
        .unwrap();
    store
        .finish_run("done", RunStatus::Completed, Some(&json!({})), None)
        .await
        .unwrap();
    let refused = store
        .cancel_run("done", "bob", &json!({"code": "cancelled"}))
        .await
        .unwrap_err();
    assert!(matches!(refused, StoreError::Conflict { .. }), "{refused}");
    checker.free_at_once("done", "a refused cancel").await;

    // A kv write over its quota, which locked the namespace's usage row.
    let tight = KvLimits {
        max_keys: 1,
        max_bytes: 64,
    };
    assert_eq!(
        store.kv_set(NOTES, "a", b"1", tight).await.unwrap(),
        KvWrite::Written
    );
    assert!(matches!(
        store.kv_set(NOTES, "b", b"2", tight).await.unwrap(),
        KvWrite::OverQuota(_)
    ));
    checker.free_at_once("F", "a kv write over its quota").await;

    // Nothing of the refused writes is there; worker-b goes on.
    assert_eq!(store.checkpoints("F").await.unwrap().len(), 1);
    assert!(store.artifacts("F").await.unwrap().is_empty());
    assert!(store.waits("F").await.unwrap().is_empty());
    assert_eq!(
        store.run("F").await.unwrap().unwrap().status,
        RunStatus::Running
    );
}

// On one thread (not `both!`'s two): a rollback left to a task of the pool
// (as when a transaction is dropped) cannot run before the check has been
// sent, so only a refusal that rolled back before returning passes.
mod sqlite {
    #[tokio::test]
    async fn a_refusal_releases_what_it_locked_before_it_returns() {
        super::a_refusal_releases_what_it_locked_before_it_returns(super::Kind::Sqlite).await
    }
}

mod postgres {
    #[tokio::test]
    async fn a_refusal_releases_what_it_locked_before_it_returns() {
        super::a_refusal_releases_what_it_locked_before_it_returns(super::Kind::Postgres).await
    }
}

mod pgbouncer {
    #[tokio::test]
    async fn a_refusal_releases_what_it_locked_before_it_returns() {
        super::a_refusal_releases_what_it_locked_before_it_returns(super::Kind::PgBouncer).await
    }
}
