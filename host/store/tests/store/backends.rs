//! The store's test suite, run against BOTH backends for real: a SQLite file
//! in a temporary directory, and a fresh database on a real Postgres (a
//! throwaway cluster, or `SKILLHOST_TEST_DATABASE_URL`; see `support/pg.rs`).
//! Every test is written once against `Db` and instantiated per backend by
//! `both!`, on Postgres twice: straight and through a real PgBouncer in
//! transaction pooling (`support/pgbouncer.rs`, `pgbouncer=true`). History round trips across snapshots, the exactly-once guard,
//! corruption detection, refusal of foreign and newer databases, artifacts,
//! map items, listing, delta sizes, racing runners; leases, fencing, the
//! queue, task rows and retention. SQLite-only behaviour (files, WAL, sync
//! modes) is in `sqlite.rs` beside this file; Postgres-only behaviour (URLs, unreachable
//! servers) is at the end of this file.

use skillhost_tests::store_fixtures::{commit, new_run, ok_step, records_state, varied_change};

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};
use skillhost_store::{
    KvLimits, KvSpace, KvUsage, KvWrite, MapItemRow, NewArtifact, RunStatus, SCHEMA_VERSION,
    START_NODE, StateChange, StepRow, StepStatus, Store, StoreError, state_hash,
};
use sqlx::{Connection, PgConnection, SqliteConnection};

/// What schema version 5 added, taken out again (both backends), to make
/// a database of an older version.
pub(crate) const UNDO_5: &str =
    "ALTER TABLE runs DROP COLUMN digest; ALTER TABLE checkpoints DROP COLUMN digest;";

/// What schema version 8 added, taken out again (both backends).
pub(crate) const UNDO_8: &str = "DROP INDEX runs_by_parent; \
     ALTER TABLE runs DROP COLUMN parent_run_id; \
     ALTER TABLE runs DROP COLUMN parent_node; \
     ALTER TABLE runs DROP COLUMN parent_visit;";

/// What schema version 9 added, taken out again (both backends).
pub(crate) const UNDO_9: &str = "DROP TABLE schedule_ticks; DROP TABLE idempotency_keys; \
     DROP INDEX runs_running_by_scenario; DROP INDEX runs_queued; \
     ALTER TABLE runs DROP COLUMN priority; \
     ALTER TABLE runs DROP COLUMN concurrency_limit; \
     ALTER TABLE runs DROP COLUMN concurrency_key; \
     CREATE INDEX runs_queued ON runs (created_at, id) WHERE status = 'queued';";

/// What schema version 11 added (the `kv` table), taken out again.
pub(crate) const UNDO_11: &str = "DROP TABLE kv;";

/// What schema version 12 added (kv scopes and usage), taken out again: the
/// `kv` table as version 11 made it, empty.
pub(crate) fn undo_12(kind: Kind) -> &'static str {
    match kind {
        Kind::Sqlite => {
            "DROP TABLE kv_usage; DROP TABLE kv; \
             CREATE TABLE kv (namespace TEXT NOT NULL, key TEXT NOT NULL, value BLOB NOT NULL, \
                 updated_at INTEGER NOT NULL, PRIMARY KEY (namespace, key));"
        }
        Kind::Postgres | Kind::PgBouncer => {
            "DROP TABLE kv_usage; DROP TABLE kv; \
             CREATE TABLE kv (namespace TEXT NOT NULL, key TEXT COLLATE \"C\" NOT NULL, \
                 value BYTEA NOT NULL, updated_at BIGINT NOT NULL, PRIMARY KEY (namespace, key));"
        }
    }
}

/// What schema version 7 added, taken out again (both backends).
pub(crate) const UNDO_7: &str = "DROP TABLE node_cache;";

/// What schema version 10 added (waits, cancel requests), taken out again.
/// SQLite's sequence trigger goes back to version 1's first: a column it
/// reads cannot be dropped.
pub(crate) fn undo_10(kind: Kind) -> &'static str {
    match kind {
        Kind::Sqlite => {
            "DROP TRIGGER checkpoints_in_sequence; \
             CREATE TRIGGER checkpoints_in_sequence BEFORE INSERT ON checkpoints \
             WHEN NEW.seq > 0 AND NOT EXISTS ( \
                 SELECT 1 FROM runs WHERE id = NEW.run_id AND last_seq = NEW.seq - 1 \
                   AND status IN ('queued', 'running', 'waiting')) \
             BEGIN SELECT RAISE(ABORT, 'skillhost: checkpoint out of sequence'); END; \
             DROP TABLE waits; DROP INDEX runs_wait_due; \
             ALTER TABLE runs DROP COLUMN wait_deadline; \
             ALTER TABLE runs DROP COLUMN cancel_requested_at; \
             ALTER TABLE runs DROP COLUMN cancel_requested_by;"
        }
        Kind::Postgres | Kind::PgBouncer => {
            "DROP TABLE waits; DROP INDEX runs_wait_due; \
             ALTER TABLE runs DROP COLUMN wait_deadline; \
             ALTER TABLE runs DROP COLUMN cancel_requested_at; \
             ALTER TABLE runs DROP COLUMN cancel_requested_by;"
        }
    }
}

/// What schema version 6 added, taken out again (both backends).
pub(crate) const UNDO_6: &str = "ALTER TABLE journal DROP COLUMN item_index; \
     ALTER TABLE journal DROP COLUMN entry_index; \
     ALTER TABLE journal DROP COLUMN request_digest; \
     ALTER TABLE journal DROP COLUMN digest; \
     ALTER TABLE runs DROP COLUMN provenance; \
     ALTER TABLE map_items DROP COLUMN attempt; \
     ALTER TABLE map_items DROP COLUMN journal; \
     ALTER TABLE map_items DROP COLUMN digest;";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Sqlite,
    Postgres,
    /// Postgres through a PgBouncer in transaction pooling.
    PgBouncer,
}

/// One test's database: a fresh SQLite file or a fresh Postgres database.
pub(crate) struct Db {
    pub(crate) kind: Kind,
    /// What the store is given.
    pub(crate) url: String,
    /// What a test's own plain connection uses (past the pooler).
    pub(crate) direct: String,
    _dir: Option<tempfile::TempDir>,
}

impl Db {
    pub(crate) async fn new(kind: Kind) -> Db {
        match kind {
            Kind::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                let path: PathBuf = dir.path().join("store.db");
                let url = format!("sqlite://{}", path.display());
                Db {
                    kind,
                    direct: url.clone(),
                    url,
                    _dir: Some(dir),
                }
            }
            Kind::Postgres => {
                let url = skillhost_tests::pg::fresh_database().await;
                Db {
                    kind,
                    direct: url.clone(),
                    url,
                    _dir: None,
                }
            }
            Kind::PgBouncer => {
                let pooled = skillhost_tests::pgbouncer::fresh_database().await;
                Db {
                    kind,
                    url: pooled.url,
                    direct: pooled.direct,
                    _dir: None,
                }
            }
        }
    }

    pub(crate) async fn open(&self) -> Store {
        Store::open(&self.url)
            .await
            .unwrap_or_else(|e| panic!("open {}: {e}", self.url))
    }

    /// Runs SQL on a plain connection, beside the store (to tamper with it).
    pub(crate) async fn exec(&self, sql: &str) {
        match self.kind {
            Kind::Sqlite => {
                let mut conn = SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
            Kind::Postgres | Kind::PgBouncer => {
                let mut conn = PgConnection::connect(&self.direct).await.unwrap();
                sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
                conn.close().await.unwrap();
            }
        }
    }

    /// One integer from a plain connection.
    pub(crate) async fn count(&self, sql: &str) -> i64 {
        match self.kind {
            Kind::Sqlite => {
                let mut conn = SqliteConnection::connect(&self.url).await.unwrap();
                sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
            }
            Kind::Postgres | Kind::PgBouncer => {
                let mut conn = PgConnection::connect(&self.direct).await.unwrap();
                sqlx::query_scalar(sql).fetch_one(&mut conn).await.unwrap()
            }
        }
    }

    /// A SQL literal for these bytes.
    fn bytes_literal(&self, hex: &str) -> String {
        match self.kind {
            Kind::Sqlite => format!("X'{hex}'"),
            Kind::Postgres | Kind::PgBouncer => format!("'\\x{hex}'::bytea"),
        }
    }
}

/// Instantiates each `async fn name(kind: Kind)` once per backend (in the
/// module that invokes it, which names `Kind`).
macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Kind::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Kind::Postgres).await
                }
            )*
        }
        mod pgbouncer {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::Kind::PgBouncer).await
                }
            )*
        }
    };
}

both!(
    history_round_trips_over_forty_steps_across_snapshots,
    a_checkpoint_out_of_sequence_writes_nothing,
    the_last_step_and_the_runs_end_are_one_commit,
    tampered_history_is_reported_as_corrupt,
    a_newer_schema_is_refused,
    artifacts_round_trip_and_are_stored_once,
    map_items_are_idempotent_and_ordered,
    runs_are_listed_newest_first_and_filtered,
    checkpoints_store_what_changed_not_the_whole_state,
    racing_runners_commit_each_checkpoint_once,
    one_runner_per_run_and_fencing_by_generation,
    workers_claim_queued_and_abandoned_runs_once,
    each_task_has_one_current_checkpoint,
    prune_deletes_only_old_finished_runs,
    reopening_keeps_the_schema,
    a_version_2_database_is_upgraded_in_place,
    a_stale_runner_writes_no_failed_steps_map_items_or_artifacts,
    every_read_reports_a_tampered_value_as_corrupt,
    everything_a_resume_trusts_is_checked_against_its_digest,
    values_nested_too_deep_are_refused_at_write_and_never_overflow_a_read,
    checkpoint_bytes_stay_within_twice_the_deltas_plus_the_final_state,
    kv_values_outlive_the_store_handle_and_list_by_prefix,
    kv_quotas_hold_across_writers,
    kv_rows_written_before_scoping_go_to_the_first_scenario_that_uses_them,
    tokens_are_relayed_between_handles_on_postgres_only,
);

/// A streaming node's tokens travel between processes on Postgres
/// (`NOTIFY`, `skillhost_store::live`): what one handle notifies, another
/// handle's listener hears, in order, whole up to the limit; a payload over
/// it is refused without being sent. SQLite relays nothing. Behind a
/// transaction-pooling PgBouncer a handle may notify (the direct listener
/// hears it) but not listen, and says why.
async fn tokens_are_relayed_between_handles_on_postgres_only(kind: Kind) {
    use skillhost_store::live::MAX_PAYLOAD_BYTES;
    let db = Db::new(kind).await;
    let store = db.open().await;
    if kind == Kind::Sqlite {
        assert!(!store.relays_tokens());
        assert!(store.listen_tokens().await.unwrap().is_none());
        store.notify_tokens("{}").await.unwrap();
        return;
    }
    assert!(store.relays_tokens());
    // The listener is always direct: through the pooler it is refused.
    let direct = Store::open(&db.direct).await.unwrap();
    let mut listener = direct.listen_tokens().await.unwrap().expect("a listener");
    if kind == Kind::PgBouncer {
        let refused = store.listen_tokens().await.unwrap_err().to_string();
        assert!(
            refused.contains("LISTEN") && refused.contains("pgbouncer=true"),
            "{refused}"
        );
    }
    let largest = "x".repeat(MAX_PAYLOAD_BYTES);
    for payload in ["first", "second", largest.as_str()] {
        store.notify_tokens(payload).await.unwrap();
    }
    let too_long = "x".repeat(MAX_PAYLOAD_BYTES + 1);
    let refused = store.notify_tokens(&too_long).await.unwrap_err();
    assert!(refused.to_string().contains("over the"), "{refused}");
    for expected in ["first", "second", largest.as_str()] {
        let heard = tokio::time::timeout(Duration::from_secs(10), listener.recv())
            .await
            .expect("a notification within 10 s")
            .unwrap();
        assert_eq!(heard, expected);
    }
    // Nothing more: the refused one was not sent.
    store.notify_tokens("last").await.unwrap();
    let heard = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(heard, "last");
}

const NOTES: KvSpace<'static> = KvSpace {
    scope: "scenario:memo",
    namespace: "notes",
};
const ROOMY: KvLimits = KvLimits {
    max_keys: 1000,
    max_bytes: 1 << 20,
};

/// Sets `key` of `space` to `value` within [`ROOMY`], which it must fit.
async fn set(store: &Store, space: KvSpace<'_>, key: &str, value: &[u8]) {
    assert_eq!(
        store.kv_set(space, key, value, ROOMY).await.unwrap(),
        KvWrite::Written
    );
}

/// The `kv` capability's data: set, replace, list by a prefix (whose `%`,
/// `_` and `\` are literal), delete, namespaces and scopes apart, any bytes,
/// and all of it there again after the store is closed and reopened.
async fn kv_values_outlive_the_store_handle_and_list_by_prefix(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let other = KvSpace {
        namespace: "other",
        ..NOTES
    };
    let elsewhere = KvSpace {
        scope: "scenario:someone-else",
        ..NOTES
    };
    assert_eq!(store.kv_get(NOTES, "colour").await.unwrap(), None);
    set(&store, NOTES, "colour", b"blue").await;
    set(&store, NOTES, "colour", b"green").await;
    set(&store, NOTES, "c%t", b"1").await;
    set(&store, NOTES, "cat", b"2").await;
    set(&store, NOTES, "c_t", &[0, 255, 1]).await;
    set(&store, NOTES, "c\\t", b"3").await;
    set(&store, other, "colour", b"red").await;
    set(&store, elsewhere, "colour", b"grey").await;
    assert_eq!(
        store.kv_keys(NOTES, "c", 100).await.unwrap(),
        ["c%t", "c\\t", "c_t", "cat", "colour"]
    );
    assert_eq!(store.kv_keys(NOTES, "c%", 100).await.unwrap(), ["c%t"]);
    assert_eq!(store.kv_keys(NOTES, "c_", 100).await.unwrap(), ["c_t"]);
    assert_eq!(store.kv_keys(NOTES, "c\\", 100).await.unwrap(), ["c\\t"]);
    assert_eq!(store.kv_keys(NOTES, "", 100).await.unwrap().len(), 5);
    assert_eq!(store.kv_keys(NOTES, "", 2).await.unwrap(), ["c%t", "c\\t"]);
    assert_eq!(
        store
            .kv_keys(
                KvSpace {
                    namespace: "nobody",
                    ..NOTES
                },
                "",
                100
            )
            .await
            .unwrap(),
        Vec::<String>::new()
    );
    store.kv_delete(NOTES, "cat").await.unwrap();
    store.kv_delete(NOTES, "never-set").await.unwrap();
    store.close().await;

    let store = db.open().await;
    assert_eq!(
        store.kv_get(NOTES, "colour").await.unwrap().as_deref(),
        Some(&b"green"[..])
    );
    assert_eq!(
        store.kv_get(NOTES, "c_t").await.unwrap().as_deref(),
        Some(&[0u8, 255, 1][..])
    );
    assert_eq!(
        store.kv_get(other, "colour").await.unwrap().as_deref(),
        Some(&b"red"[..])
    );
    assert_eq!(
        store.kv_get(elsewhere, "colour").await.unwrap().as_deref(),
        Some(&b"grey"[..])
    );
    assert_eq!(store.kv_get(NOTES, "cat").await.unwrap(), None);
    // What the quota counts: keys, and their bytes and their values'.
    assert_eq!(
        store.kv_usage(NOTES).await.unwrap(),
        KvUsage {
            keys: 4,
            bytes: (6 + 5) + (3 + 1) + (3 + 3) + (3 + 1)
        }
    );
}

/// A namespace's quota of keys and bytes, held by the store in the write's
/// transaction: a write past it changes nothing, one that shrinks always
/// goes through, a delete gives room back; writers racing on one namespace
/// never pass it together.
async fn kv_quotas_hold_across_writers(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let tight = KvLimits {
        max_keys: 3,
        max_bytes: 40,
    };
    for key in ["a", "b", "c"] {
        assert_eq!(
            store
                .kv_set(NOTES, key, b"0123456789", tight)
                .await
                .unwrap(),
            KvWrite::Written
        );
    }
    assert_eq!(
        store.kv_set(NOTES, "d", b"", tight).await.unwrap(),
        KvWrite::OverQuota(KvUsage { keys: 4, bytes: 34 })
    );
    assert_eq!(
        store.kv_set(NOTES, "a", &[7; 20], tight).await.unwrap(),
        KvWrite::OverQuota(KvUsage { keys: 3, bytes: 43 })
    );
    assert_eq!(store.kv_get(NOTES, "d").await.unwrap(), None);
    assert_eq!(
        store.kv_get(NOTES, "a").await.unwrap().as_deref(),
        Some(&b"0123456789"[..])
    );
    assert_eq!(
        store.kv_set(NOTES, "a", b"", tight).await.unwrap(),
        KvWrite::Written
    );
    store.kv_delete(NOTES, "b").await.unwrap();
    assert_eq!(
        store.kv_usage(NOTES).await.unwrap(),
        KvUsage { keys: 2, bytes: 12 }
    );

    // Sixteen writers at once, each its own key, into room for five.
    let racy = KvSpace {
        namespace: "racy",
        ..NOTES
    };
    let five = KvLimits {
        max_keys: 5,
        max_bytes: 1 << 20,
    };
    let writes = (0..16).map(|i| {
        let store = store.clone();
        tokio::spawn(async move {
            let key = format!("k{i:02}");
            store.kv_set(racy, &key, b"v", five).await.unwrap()
        })
    });
    let mut written = 0;
    for write in writes.collect::<Vec<_>>() {
        if write.await.unwrap() == KvWrite::Written {
            written += 1;
        }
    }
    assert_eq!(written, 5);
    assert_eq!(store.kv_keys(racy, "", 100).await.unwrap().len(), 5);
    assert_eq!(
        store.kv_usage(racy).await.unwrap(),
        KvUsage { keys: 5, bytes: 20 }
    );
}

/// A version 11 store's kv rows (before namespaces were scoped) upgrade
/// unscoped, with their usage counted, and the first scenario that uses a
/// namespace of their name takes them; a second finds nothing to take.
async fn kv_rows_written_before_scoping_go_to_the_first_scenario_that_uses_them(kind: Kind) {
    let db = Db::new(kind).await;
    db.open().await.close().await;
    db.exec(undo_12(kind)).await;
    db.exec(&format!(
        "INSERT INTO kv (namespace, key, value, updated_at) VALUES \
             ('chat-memory', 'name', {}, 1), ('chat-memory', 'city', {}, 1), \
             ('other', 'x', {}, 1); \
         UPDATE skillhost_meta SET value = '11' WHERE key = 'schema_version'",
        db.bytes_literal("416461"),
        db.bytes_literal("4c796f6e"),
        db.bytes_literal("00")
    ))
    .await;
    let store = db.open().await;
    let legacy = KvSpace {
        scope: "",
        namespace: "chat-memory",
    };
    assert_eq!(
        store.kv_usage(legacy).await.unwrap(),
        KvUsage {
            keys: 2,
            bytes: 4 + 3 + 4 + 4
        }
    );
    let chat = KvSpace {
        scope: "scenario:chat",
        namespace: "chat-memory",
    };
    assert_eq!(store.kv_adopt(chat).await.unwrap(), 2);
    assert_eq!(
        store.kv_get(chat, "name").await.unwrap().as_deref(),
        Some(&b"Ada"[..])
    );
    assert_eq!(
        store.kv_usage(chat).await.unwrap(),
        KvUsage { keys: 2, bytes: 15 }
    );
    assert_eq!(store.kv_usage(legacy).await.unwrap(), KvUsage::default());
    assert_eq!(store.kv_keys(legacy, "", 10).await.unwrap().len(), 0);
    // Taken once: a second scenario, and the first again, take nothing.
    let thief = KvSpace {
        scope: "scenario:thief",
        ..chat
    };
    assert_eq!(store.kv_adopt(thief).await.unwrap(), 0);
    assert_eq!(store.kv_get(thief, "name").await.unwrap(), None);
    assert_eq!(store.kv_adopt(chat).await.unwrap(), 0);
    // A namespace with rows of its own takes none.
    let other = KvSpace {
        scope: "scenario:chat",
        namespace: "other",
    };
    set(&store, other, "mine", b"1").await;
    assert_eq!(store.kv_adopt(other).await.unwrap(), 0);
    assert_eq!(store.kv_get(other, "x").await.unwrap(), None);
}

async fn history_round_trips_over_forty_steps_across_snapshots(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    assert_eq!(store.url_for_display(), db.url);
    assert_eq!(
        store.backend_name(),
        if kind == Kind::Sqlite {
            "sqlite"
        } else {
            "postgres"
        }
    );

    let mut state = records_state();
    store
        .create_run(&new_run("r1", state.clone()))
        .await
        .unwrap();
    let mut states = vec![state.clone()];
    let mut all_visits = vec![BTreeMap::new()];
    let mut visits = BTreeMap::new();
    for seq in 1..=40 {
        let c = commit("r1", seq, &mut state, &mut visits, varied_change(seq));
        store.commit_step(&c).await.unwrap();
        states.push(state.clone());
        all_visits.push(visits.clone());
    }

    let run = store.run("r1").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.last_seq, 40);
    assert_eq!(run.current_node.as_deref(), Some("n1"));
    assert_eq!(run.input, json!({"topic": "store"}));

    let history = store.checkpoints("r1").await.unwrap();
    assert_eq!(history.len(), 41);
    // A snapshot exactly when the deltas since the last one reach its size.
    let state_bytes = |seq: usize| serde_json::to_string(&states[seq]).unwrap().len() as u64;
    let (mut last_snapshot, mut since) = (0, 0);
    for (seq, row) in history.iter().enumerate() {
        assert_eq!(row.seq, seq as u64);
        if seq == 0 {
            assert!(row.is_snapshot);
            last_snapshot = state_bytes(0);
            continue;
        }
        let delta = row.bytes - if row.is_snapshot { state_bytes(seq) } else { 0 };
        since += delta;
        assert_eq!(row.is_snapshot, since >= last_snapshot, "seq {seq}");
        if row.is_snapshot {
            (last_snapshot, since) = (state_bytes(seq), 0);
        }
        assert_eq!(row.state_hash, state_hash(&states[seq]));
    }
    assert_eq!(history[0].node_id, START_NODE);
    assert_eq!(history[0].next_nodes, vec!["n1".to_string()]);

    // Reopen: what was committed is what comes back.
    store.close().await;
    let store = db.open().await;
    for (seq, expected) in states.iter().enumerate() {
        let loaded = store.state_at("r1", seq as u64).await.unwrap().unwrap();
        assert_eq!(loaded.seq, seq as u64);
        assert_eq!(&loaded.state, expected, "state at seq {seq}");
        // Byte for byte, key order included.
        assert_eq!(
            serde_json::to_string(&loaded.state).unwrap(),
            serde_json::to_string(expected).unwrap(),
            "serialised state at seq {seq}"
        );
        assert_eq!(loaded.visits, all_visits[seq], "visits at seq {seq}");
        assert_eq!(loaded.state_hash, state_hash(expected));
    }
    let latest = store.latest_state("r1").await.unwrap().unwrap();
    assert_eq!(latest.seq, 40);
    assert_eq!(latest.state, states[40]);
    assert_eq!(latest.node_id, "n4");
    assert_eq!(latest.next_nodes, vec!["n1".to_string()]);
    assert!(store.state_at("r1", 41).await.unwrap().is_none());
    assert!(store.state_at("nope", 0).await.unwrap().is_none());
    assert!(store.latest_state("nope").await.unwrap().is_none());

    let steps = store.steps("r1").await.unwrap();
    assert_eq!(steps.len(), 40);
    for (i, step) in steps.iter().enumerate() {
        assert_eq!(step.seq, Some(i as u64 + 1));
        assert_eq!(step.run_id, "r1");
    }
    assert_eq!(
        steps[0],
        StepRow {
            seq: Some(1),
            ..ok_step("r1", "n1")
        }
    );
    let journal = store.journal("r1").await.unwrap();
    assert_eq!(journal.len(), 40);
    assert_eq!(journal[9].response, json!({"now_ms": 10}));

    // Finishing is final: no more checkpoints, no second finish.
    store
        .finish_run("r1", RunStatus::Completed, Some(&json!({"ok": true})), None)
        .await
        .unwrap();
    let run = store.run("r1").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.result, Some(json!({"ok": true})));
    let late = commit("r1", 41, &mut state, &mut visits, varied_change(41));
    let error = store.commit_step(&late).await.unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert!(error.to_string().contains("completed"), "{error}");
    let error = store
        .finish_run("r1", RunStatus::Failed, None, None)
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert_eq!(store.checkpoints("r1").await.unwrap().len(), 41);
}

async fn a_checkpoint_out_of_sequence_writes_nothing(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut state = json!({"n": 0, "log": []});
    store
        .create_run(&new_run("r", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let first = commit("r", 1, &mut state, &mut visits, varied_change(1));
    store.commit_step(&first).await.unwrap();

    let counts = |store: Store| async move {
        (
            store.checkpoints("r").await.unwrap().len(),
            store.steps("r").await.unwrap().len(),
            store.journal("r").await.unwrap().len(),
            store.artifacts("r").await.unwrap().len(),
            store.run("r").await.unwrap().unwrap(),
            store.latest_state("r").await.unwrap().unwrap(),
            store.current_checkpoint("r").await.unwrap().unwrap(),
        )
    };
    let before = counts(store.clone()).await;

    // The same step again (a resumed runner redoing it), with everything a
    // commit can carry: refused as a whole.
    let mut again_state = json!({"n": 0, "log": []});
    let mut again_visits = BTreeMap::new();
    let mut again = commit(
        "r",
        1,
        &mut again_state,
        &mut again_visits,
        varied_change(3),
    );
    again.journal.push(again.journal[0].clone());
    let artifact = NewArtifact {
        name: "report.md".into(),
        media_type: "text/markdown".into(),
        bytes: b"# never".to_vec(),
    };
    let error = store
        .commit_step_with_artifacts(&again, std::slice::from_ref(&artifact))
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("`r`") && message.contains(&db.url),
        "{message}"
    );

    // Skipping ahead and rewriting checkpoint 0 are refused too.
    let mut ahead = commit(
        "r",
        3,
        &mut state.clone(),
        &mut visits.clone(),
        varied_change(3),
    );
    let error = store.commit_step(&ahead).await.unwrap_err();
    assert!(error.is_conflict(), "{error}");
    ahead.seq = 0;
    assert!(store.commit_step(&ahead).await.unwrap_err().is_conflict());
    ahead.run_id = "missing".into();
    ahead.seq = 1;
    assert!(matches!(
        store.commit_step(&ahead).await.unwrap_err(),
        StoreError::RunNotFound { .. }
    ));

    assert_eq!(counts(store.clone()).await, before);
    assert_eq!(
        store
            .artifact_bytes(&skillhost_store::blob_digest(b"# never"))
            .await
            .unwrap(),
        None
    );

    // The right next seq still goes through, with its artifact.
    let second = commit("r", 2, &mut state, &mut visits, varied_change(2));
    store
        .commit_step_with_artifacts(&second, &[artifact])
        .await
        .unwrap();
    assert_eq!(store.latest_state("r").await.unwrap().unwrap().state, state);
    assert_eq!(store.artifacts("r").await.unwrap().len(), 1);

    // A duplicate run id is a conflict, not an overwrite.
    let error = store
        .create_run(&new_run("r", json!({})))
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert_eq!(store.run("r").await.unwrap().unwrap().last_seq, 2);
}

/// `commit_last_step` writes a run's last checkpoint and its end (status,
/// result, the lease released) in one transaction, with or without a
/// journal, artifacts or a lease fence (on Postgres: in its transaction, or
/// as the one statement); refused, it writes neither: out of sequence, a
/// cancel asked for, a lost lease, a run already finished.
async fn the_last_step_and_the_runs_end_are_one_commit(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let long = Duration::from_secs(60);
    let snapshot = |store: Store, id: &'static str| async move {
        (
            store.checkpoints(id).await.unwrap(),
            store.steps(id).await.unwrap(),
            store.journal(id).await.unwrap(),
            store.artifacts(id).await.unwrap(),
            store.run(id).await.unwrap().unwrap(),
        )
    };
    let artifact = NewArtifact {
        name: "report.md".into(),
        media_type: "text/markdown".into(),
        bytes: b"# the end".to_vec(),
    };

    // A run with a journal and an artifact in its last commit.
    let mut state = json!({"n": 0, "log": []});
    store
        .create_run(&new_run("r", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let first = commit("r", 1, &mut state, &mut visits, varied_change(1));
    store.commit_step(&first).await.unwrap();
    let before = snapshot(store.clone(), "r").await;
    // Out of sequence: refused, nothing written, the run still running.
    let ahead = commit(
        "r",
        3,
        &mut state.clone(),
        &mut visits.clone(),
        varied_change(3),
    );
    let error = store
        .commit_last_step(&ahead, &[], RunStatus::Completed, Some(&state), None)
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert_eq!(snapshot(store.clone(), "r").await, before);
    assert_eq!(before.4.status, RunStatus::Running);

    let last = commit("r", 2, &mut state, &mut visits, varied_change(2));
    store
        .commit_last_step(
            &last,
            std::slice::from_ref(&artifact),
            RunStatus::Completed,
            Some(&state),
            None,
        )
        .await
        .unwrap();
    let run = store.run("r").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.result, Some(state.clone()));
    assert_eq!((run.last_seq, run.lease_owner), (2, None));
    assert_eq!(store.latest_state("r").await.unwrap().unwrap().state, state);
    assert_eq!(store.journal("r").await.unwrap().len(), 2);
    assert_eq!(store.artifacts("r").await.unwrap().len(), 1);
    // Finished: no further checkpoint, last step or finish.
    let finished = snapshot(store.clone(), "r").await;
    let late = commit(
        "r",
        3,
        &mut state.clone(),
        &mut visits.clone(),
        varied_change(3),
    );
    let error = store
        .commit_last_step(&late, &[], RunStatus::Failed, None, Some(&json!({})))
        .await
        .unwrap_err();
    assert!(
        error.is_conflict() && error.to_string().contains("completed"),
        "{error}"
    );
    let error = store
        .finish_run("r", RunStatus::Failed, None, None)
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");
    assert_eq!(snapshot(store.clone(), "r").await, finished);

    // A leased run whose last commit carries nothing else (on Postgres the
    // one statement): a stale lease refuses it, then a cancel asked for.
    let mut state = json!({"n": 0, "log": []});
    store
        .enqueue_run(&new_run("L", state.clone()))
        .await
        .unwrap();
    let a = store.acquire_lease("L", "worker-a", long).await.unwrap();
    let fenced_a = store.fenced(a.clone());
    let mut visits = BTreeMap::new();
    let mut first = commit("L", 1, &mut state, &mut visits, varied_change(1));
    first.journal.clear();
    fenced_a.commit_step(&first).await.unwrap();
    let mut last = commit("L", 2, &mut state, &mut visits, varied_change(2));
    last.journal.clear();
    let before = snapshot(store.clone(), "L").await;
    let stale = store.fenced(skillhost_store::Lease {
        generation: a.generation + 1,
        ..a.clone()
    });
    let error = stale
        .commit_last_step(&last, &[], RunStatus::Completed, Some(&state), None)
        .await
        .unwrap_err();
    assert!(error.is_lease_lost(), "{error}");
    assert_eq!(snapshot(store.clone(), "L").await, before);
    let cancel = json!({"code": "cancelled"});
    store.cancel_run("L", "tester", &cancel).await.unwrap();
    let error = fenced_a
        .commit_last_step(&last, &[], RunStatus::Completed, Some(&state), None)
        .await
        .unwrap_err();
    assert!(error.is_cancel_requested(), "{error}");
    let (checkpoints, steps, journal, artifacts, run) = snapshot(store.clone(), "L").await;
    assert_eq!(
        (checkpoints, steps, journal, artifacts),
        (before.0, before.1, before.2, before.3)
    );
    assert_eq!((run.status, run.last_seq), (RunStatus::Running, 1));
    // The cancel taken back (as a test may): the same commit goes through.
    db.exec("UPDATE runs SET cancel_requested_at = NULL WHERE id = 'L'")
        .await;
    fenced_a
        .commit_last_step(&last, &[], RunStatus::Completed, Some(&state), None)
        .await
        .unwrap();
    let run = store.run("L").await.unwrap().unwrap();
    assert_eq!((run.status, run.last_seq), (RunStatus::Completed, 2));
    assert_eq!((run.result, run.lease_owner), (Some(state), None));
    assert_eq!(store.checkpoints("L").await.unwrap().len(), 3);
}

async fn tampered_history_is_reported_as_corrupt(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    // Large enough that five small deltas take no snapshot after seq 0.
    let mut state = json!({"log": [], "pad": "p".repeat(2_000)});
    store
        .create_run(&new_run("run-t", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    for seq in 1..=5 {
        let changes = vec![StateChange::Append {
            field: "log".into(),
            items: vec![json!(seq)],
        }];
        let c = commit("run-t", seq, &mut state, &mut visits, changes);
        store.commit_step(&c).await.unwrap();
    }
    store.close().await;

    db.exec(
        "UPDATE checkpoints SET changes = '[{\"op\":\"append\",\"field\":\"log\",\"items\":[999]}]' \
         WHERE run_id = 'run-t' AND seq = 3",
    )
    .await;

    let store = db.open().await;
    assert_eq!(
        store.state_at("run-t", 2).await.unwrap().unwrap().state["log"],
        json!([1, 2])
    );
    // Loading 3 or anything rebuilt through it names the edited row and
    // what in it no longer matches its digest.
    for seq in [3, 5] {
        let error = store.state_at("run-t", seq).await.unwrap_err();
        assert!(error.is_corrupt(), "{error}");
        let message = error.to_string();
        assert!(message.contains("checkpoint 3 of run `run-t`"), "{message}");
        assert!(message.contains("committed: its changes"), "{message}");
        assert!(message.contains(&db.url), "{message}");
    }
    let error = store.latest_state("run-t").await.unwrap_err();
    assert!(error.is_corrupt(), "{error}");

    // A damaged snapshot and unreadable changes are caught the same way.
    store.close().await;
    db.exec("UPDATE checkpoints SET state = '{\"log\":[0],\"pad\":\"\"}' WHERE seq = 0")
        .await;
    db.exec("UPDATE checkpoints SET changes = 'not json' WHERE seq = 4")
        .await;
    // Checkpoint 3 as it was written.
    db.exec(
        "UPDATE checkpoints SET changes = '[{\"op\":\"append\",\"field\":\"log\",\"items\":[3]}]' \
         WHERE run_id = 'run-t' AND seq = 3",
    )
    .await;
    let store = db.open().await;
    assert!(store.state_at("run-t", 0).await.unwrap_err().is_corrupt());
    let error = store.state_at("run-t", 4).await.unwrap_err();
    assert!(error.to_string().contains("checkpoint 4"), "{error}");
}

async fn a_newer_schema_is_refused(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    store.create_run(&new_run("r", json!({}))).await.unwrap();
    store.close().await;
    db.exec("UPDATE skillhost_meta SET value = '99' WHERE key = 'schema_version'")
        .await;

    let error = Store::open(&db.url).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::TooNew {
                found: 99,
                supported: SCHEMA_VERSION,
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("99")
            && message.contains(&format!("version {SCHEMA_VERSION}"))
            && message.contains("upgrade host"),
        "{message}"
    );
    assert!(message.contains(&db.url), "{message}");
    // Nothing was written: the run is still there, the version still 99.
    assert_eq!(db.count("SELECT COUNT(*) FROM runs").await, 1);
    assert_eq!(
        db.count("SELECT CAST(value AS BIGINT) FROM skillhost_meta WHERE key = 'schema_version'")
            .await,
        99
    );
}

async fn reopening_keeps_the_schema(kind: Kind) {
    let db = Db::new(kind).await;
    // Two handles opening (and migrating) a fresh database at the same time.
    let (a, b) = tokio::join!(Store::open(&db.url), Store::open(&db.url));
    a.unwrap().close().await;
    b.unwrap().close().await;
    for _ in 0..2 {
        db.open().await.close().await;
    }
    assert_eq!(
        db.count("SELECT CAST(value AS BIGINT) FROM skillhost_meta WHERE key = 'schema_version'")
            .await,
        i64::from(SCHEMA_VERSION)
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM skillhost_meta WHERE key = 'application'")
            .await,
        1
    );
}

async fn artifacts_round_trip_and_are_stored_once(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    store.create_run(&new_run("a", json!({}))).await.unwrap();
    store.create_run(&new_run("b", json!({}))).await.unwrap();
    let deck = vec![7u8; 10_000];

    let d1 = store
        .put_artifact("a", "deck.pptx", "application/vnd.ms-powerpoint", &deck)
        .await
        .unwrap();
    let d2 = store
        .put_artifact("b", "copy.pptx", "application/vnd.ms-powerpoint", &deck)
        .await
        .unwrap();
    let d3 = store
        .put_artifact("a", "notes.txt", "text/plain", b"notes")
        .await
        .unwrap();
    assert_eq!(d1, d2);
    assert_eq!(d1, skillhost_store::blob_digest(&deck));
    assert_eq!(d1.len(), 64);
    assert_ne!(d1, d3);

    let listed = store.artifacts("a").await.unwrap();
    assert_eq!(
        listed
            .iter()
            .map(|a| (a.name.as_str(), a.size, a.digest.as_str()))
            .collect::<Vec<_>>(),
        vec![
            ("deck.pptx", 10_000, d1.as_str()),
            ("notes.txt", 5, d3.as_str())
        ]
    );
    assert_eq!(store.artifact_bytes(&d1).await.unwrap(), Some(deck.clone()));
    assert_eq!(store.artifact_bytes(&"0".repeat(64)).await.unwrap(), None);

    // Writing a name again points it at the new bytes.
    let d4 = store
        .put_artifact("a", "notes.txt", "text/plain", b"notes v2")
        .await
        .unwrap();
    let notes = store.artifacts("a").await.unwrap();
    assert_eq!((notes[1].digest.as_str(), notes[1].size), (d4.as_str(), 8));

    let error = store
        .put_artifact("missing", "x", "text/plain", b"x")
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::RunNotFound { .. }), "{error}");

    store.close().await;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM blobs").await,
        3,
        "deck stored once, two versions of the notes"
    );
    db.exec(&format!(
        "UPDATE blobs SET bytes = {} WHERE digest = '{d3}'",
        db.bytes_literal("00")
    ))
    .await;
    let store = db.open().await;
    assert!(store.artifact_bytes(&d3).await.unwrap_err().is_corrupt());
}

async fn map_items_are_idempotent_and_ordered(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    store.create_run(&new_run("m", json!({}))).await.unwrap();
    let item = |visit: u32, index: u32, output: Value| MapItemRow {
        run_id: "m".into(),
        node_id: "fan".into(),
        visit,
        item_index: index,
        output_hash: state_hash(&output),
        output,
        duration_us: 10,
        fuel_consumed: 100,
        journal: Vec::new(),
        attempt: 1,
    };
    for index in [2, 0, 1] {
        store
            .record_map_item(&item(1, index, json!({"i": index})))
            .await
            .unwrap();
    }
    // Recorded again after a resume, even with another output: the first stays.
    store
        .record_map_item(&item(1, 1, json!({"i": "again"})))
        .await
        .unwrap();
    store
        .record_map_item(&item(2, 0, json!({"visit": 2})))
        .await
        .unwrap();

    let items = store.map_items("m", "fan", 1).await.unwrap();
    assert_eq!(
        items,
        vec![
            item(1, 0, json!({"i": 0})),
            item(1, 1, json!({"i": 1})),
            item(1, 2, json!({"i": 2}))
        ]
    );
    assert_eq!(store.map_items("m", "fan", 2).await.unwrap().len(), 1);
    assert!(store.map_items("m", "other", 1).await.unwrap().is_empty());
    let error = store
        .record_map_item(&MapItemRow {
            run_id: "missing".into(),
            ..item(1, 0, json!(0))
        })
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::RunNotFound { .. }), "{error}");
}

async fn runs_are_listed_newest_first_and_filtered(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let ids: Vec<String> = (0..4).map(|_| skillhost_store::new_run_id()).collect();
    for id in &ids[..3] {
        store.create_run(&new_run(id, json!({}))).await.unwrap();
    }
    // An id that is taken is a conflict, and writes nothing.
    let taken = store
        .create_run(&new_run(&ids[0], json!({"again": true})))
        .await
        .unwrap_err();
    assert!(
        taken.is_conflict() && taken.to_string().contains("already exists"),
        "{taken}"
    );
    store
        .enqueue_run(&new_run(&ids[3], json!({})))
        .await
        .unwrap();

    let failed_step = StepRow {
        status: StepStatus::Failed,
        error: Some(json!({"code": "timeout", "message": "took too long"})),
        output_hash: None,
        ..ok_step(&ids[1], "n1")
    };
    store.record_failed_step(&failed_step).await.unwrap();
    store
        .finish_run(&ids[0], RunStatus::Completed, Some(&json!(1)), None)
        .await
        .unwrap();
    store
        .finish_run(
            &ids[1],
            RunStatus::Failed,
            None,
            Some(&json!({"node": "n1"})),
        )
        .await
        .unwrap();

    let all = store.list_runs(None, 10).await.unwrap();
    let listed: Vec<&str> = all.iter().map(|r| r.id.as_str()).collect();
    let newest_first: Vec<&str> = ids.iter().rev().map(String::as_str).collect();
    assert_eq!(listed, newest_first);
    assert_eq!(all[0].status, RunStatus::Queued);

    let only =
        |runs: Vec<skillhost_store::RunRow>| runs.into_iter().map(|r| r.id).collect::<Vec<_>>();
    assert_eq!(
        only(
            store
                .list_runs(Some(RunStatus::Completed), 10)
                .await
                .unwrap()
        ),
        vec![ids[0].clone()]
    );
    let failed = store.list_runs(Some(RunStatus::Failed), 10).await.unwrap();
    assert_eq!(failed[0].error, Some(json!({"node": "n1"})));
    assert_eq!(
        only(store.list_runs(Some(RunStatus::Running), 10).await.unwrap()),
        vec![ids[2].clone()]
    );
    assert_eq!(
        only(store.list_runs(Some(RunStatus::Queued), 10).await.unwrap()),
        vec![ids[3].clone()]
    );
    assert_eq!(store.list_runs(None, 2).await.unwrap().len(), 2);
    assert!(
        store
            .list_runs(Some(RunStatus::Cancelled), 10)
            .await
            .unwrap()
            .is_empty()
    );

    assert_eq!(store.steps(&ids[1]).await.unwrap(), vec![failed_step]);
    let error = store
        .record_failed_step(&ok_step("missing", "n1"))
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::RunNotFound { .. }), "{error}");
    assert!(matches!(
        store
            .finish_run("missing", RunStatus::Failed, None, None)
            .await
            .unwrap_err(),
        StoreError::RunNotFound { .. }
    ));
}

async fn checkpoints_store_what_changed_not_the_whole_state(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut state = records_state();
    let full = serde_json::to_string(&state).unwrap().len() as u64;
    assert!(full > 6_000, "the state is {full} bytes");
    store
        .create_run(&new_run("b", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let steps = 40;
    let started = std::time::Instant::now();
    for seq in 1..=steps {
        let changes = vec![StateChange::Set {
            field: "counter".into(),
            value: json!(seq),
        }];
        let c = commit("b", seq, &mut state, &mut visits, changes);
        store.commit_step(&c).await.unwrap();
    }
    let per_commit = started.elapsed() / steps as u32;

    let history = store.checkpoints("b").await.unwrap();
    let deltas: Vec<u64> = history
        .iter()
        .filter(|c| !c.is_snapshot)
        .map(|c| c.bytes)
        .collect();
    let total: u64 = history.iter().map(|c| c.bytes).sum();
    let largest_delta = *deltas.iter().max().unwrap();
    eprintln!(
        "{kind:?}: state {full} B; delta checkpoints at most {largest_delta} B; {total} B for {} \
         checkpoints ({} B each on average, vs {} B as full copies); {per_commit:?} per commit",
        history.len(),
        total / history.len() as u64,
        full * history.len() as u64,
    );
    // The deltas never add up to the state's size: no snapshot after seq 0.
    assert_eq!(deltas.len(), 40);
    assert!(
        largest_delta * 30 < full,
        "a delta checkpoint takes {largest_delta} B"
    );
    assert!(total * 4 < full * history.len() as u64, "{total} B in all");
    assert_eq!(store.latest_state("b").await.unwrap().unwrap().state, state);
}

async fn racing_runners_commit_each_checkpoint_once(kind: Kind) {
    let db = Db::new(kind).await;
    // Two handles on one database behave like two host processes: separate
    // pools, and both open (and migrate) a fresh database at the same time.
    let (a, b) = tokio::join!(Store::open(&db.url), Store::open(&db.url));
    let stores = [a.unwrap(), b.unwrap()];
    let mut state = json!({"log": []});
    stores[0]
        .create_run(&new_run("race", state.clone()))
        .await
        .unwrap();

    let mut visits = BTreeMap::new();
    for seq in 1..=5 {
        let c = commit("race", seq, &mut state, &mut visits, varied_change(seq));
        // Eight attempts at the same checkpoint, split over both handles.
        let attempts = (0..8).map(|i| {
            let store = stores[i % 2].clone();
            let c = c.clone();
            tokio::spawn(async move { store.commit_step(&c).await })
        });
        let mut won = 0;
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(()) => won += 1,
                Err(e) => assert!(e.is_conflict(), "{e}"),
            }
        }
        assert_eq!(won, 1, "checkpoint {seq} was committed {won} times");
    }
    assert_eq!(stores[1].steps("race").await.unwrap().len(), 5);
    assert_eq!(stores[1].journal("race").await.unwrap().len(), 5);
    let latest = stores[1].latest_state("race").await.unwrap().unwrap();
    assert_eq!((latest.seq, latest.state), (5, state));
}

async fn one_runner_per_run_and_fencing_by_generation(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut state = json!({"log": []});
    store
        .enqueue_run(&new_run("L", state.clone()))
        .await
        .unwrap();
    let long = Duration::from_secs(60);

    // The first runner takes it; the run is now running.
    let a = store.acquire_lease("L", "worker-a", long).await.unwrap();
    assert_eq!(a.generation, 1);
    let run = store.run("L").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    assert_eq!(run.lease_owner.as_deref(), Some("worker-a"));
    assert_eq!(run.lease_generation, 1);

    // A second runner is refused, with the holder and the expiry named.
    let error = store
        .acquire_lease("L", "worker-b", long)
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::Leased { .. }), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("`worker-a`")
            && message.contains(&skillhost_store::format_ms(a.expires_at_ms))
            && message.contains("`L`")
            && message.contains(&db.url),
        "{message}"
    );
    // The holder re-acquiring just renews, same generation.
    let again = store.acquire_lease("L", "worker-a", long).await.unwrap();
    assert_eq!(again.generation, 1);

    // Fenced commits go through while the lease is held.
    let fenced_a = store.fenced(a.clone());
    let mut visits = BTreeMap::new();
    let c1 = commit("L", 1, &mut state, &mut visits, varied_change(1));
    fenced_a.commit_step(&c1).await.unwrap();
    let a = store
        .renew_lease(&a, Duration::from_millis(300))
        .await
        .unwrap();

    // worker-a stalls past its expiry; worker-b takes the run over.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let b = store.acquire_lease("L", "worker-b", long).await.unwrap();
    assert_eq!(b.generation, 2);

    // worker-a wakes up: its commit, renewal and finish are all refused,
    // and nothing of them is written.
    let before = (
        store.checkpoints("L").await.unwrap(),
        store.steps("L").await.unwrap(),
        store.current_checkpoint("L").await.unwrap(),
    );
    let mut a_state = state.clone();
    let mut a_visits = visits.clone();
    let c2a = commit("L", 2, &mut a_state, &mut a_visits, varied_change(2));
    let error = fenced_a.commit_step(&c2a).await.unwrap_err();
    assert!(error.is_lease_lost(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("worker-a") && message.contains("`worker-b` holds generation 2"),
        "{message}"
    );
    let error = store
        .renew_lease(&a, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(error.is_lease_lost(), "{error}");
    let error = fenced_a
        .finish_run("L", RunStatus::Completed, Some(&json!({})), None)
        .await
        .unwrap_err();
    assert!(error.is_lease_lost(), "{error}");
    assert!(!store.release_lease(&a).await.unwrap());
    let after = (
        store.checkpoints("L").await.unwrap(),
        store.steps("L").await.unwrap(),
        store.current_checkpoint("L").await.unwrap(),
    );
    assert_eq!(before, after);
    assert_eq!(
        store.run("L").await.unwrap().unwrap().status,
        RunStatus::Running
    );

    // worker-b carries on from the last checkpoint and finishes.
    let fenced_b = store.fenced(b.clone());
    let c2 = commit("L", 2, &mut state, &mut visits, varied_change(2));
    fenced_b.commit_step(&c2).await.unwrap();
    fenced_b
        .finish_run("L", RunStatus::Completed, Some(&state), None)
        .await
        .unwrap();
    let run = store.run("L").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Completed);
    assert_eq!(run.lease_owner, None);
    let error = store
        .acquire_lease("L", "worker-c", long)
        .await
        .unwrap_err();
    assert!(error.is_conflict(), "{error}");

    // Releasing puts an unfinished run back in the queue.
    store.create_run(&new_run("R", json!({}))).await.unwrap();
    let r = store.acquire_lease("R", "worker-a", long).await.unwrap();
    assert!(store.release_lease(&r).await.unwrap());
    let run = store.run("R").await.unwrap().unwrap();
    assert_eq!((run.status, run.lease_owner), (RunStatus::Queued, None));
    assert!(matches!(
        store.acquire_lease("nope", "w", long).await.unwrap_err(),
        StoreError::RunNotFound { .. }
    ));
}

async fn workers_claim_queued_and_abandoned_runs_once(kind: Kind) {
    let db = Db::new(kind).await;
    let (a, b) = tokio::join!(Store::open(&db.url), Store::open(&db.url));
    let stores = [a.unwrap(), b.unwrap()];
    let ids: Vec<String> = (0..12).map(|_| skillhost_store::new_run_id()).collect();
    for id in &ids {
        stores[0]
            .enqueue_run(&new_run(id, json!({})))
            .await
            .unwrap();
    }
    // A run started in-process (no lease) is never claimed by workers.
    stores[0]
        .create_run(&new_run("direct", json!({})))
        .await
        .unwrap();

    // Sixteen claimers racing over two handles: every queued run is claimed
    // exactly once, oldest first per claimer.
    let claims = (0..16).map(|i| {
        let store = stores[i % 2].clone();
        tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some((run, lease)) = store
                .claim_run(&format!("w{i}"), Duration::from_secs(60))
                .await
                .unwrap()
            {
                assert_eq!(run.status, RunStatus::Running);
                assert_eq!(run.lease_owner.as_deref(), Some(lease.owner.as_str()));
                got.push(run.id);
            }
            got
        })
    });
    let mut claimed = Vec::new();
    for claim in claims {
        let got = claim.await.unwrap();
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(got, sorted, "a claimer got runs out of queue order");
        claimed.extend(got);
    }
    claimed.sort();
    assert_eq!(claimed, ids);

    // A claimed run whose lease expires (its worker died) is taken over,
    // with a new generation, and the claim says so; live leases are left
    // alone.
    let first = {
        stores[0]
            .enqueue_run(&new_run("late", json!({})))
            .await
            .unwrap();
        stores[0]
            .claim("dying", Duration::from_millis(200))
            .await
            .unwrap()
            .unwrap()
    };
    assert!(!first.took_over, "a queued run is no takeover");
    let (run, lease) = (first.run, first.lease);
    assert_eq!((run.id.as_str(), lease.generation), ("late", 1));
    assert!(
        stores[1]
            .claim_run("heir", Duration::from_secs(60))
            .await
            .unwrap()
            .is_none()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let taken = stores[1]
        .claim("heir", Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert!(taken.took_over, "the dead runner's run is taken over");
    let (run, lease) = (taken.run, taken.lease);
    assert_eq!((run.id.as_str(), lease.generation), ("late", 2));
    assert_eq!(run.lease_owner.as_deref(), Some("heir"));
    assert!(
        stores[0]
            .claim_run("other", Duration::from_secs(60))
            .await
            .unwrap()
            .is_none()
    );
}

async fn each_task_has_one_current_checkpoint(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut state = json!({"log": []});
    store
        .enqueue_run_for_task(&new_run("t-run-1", state.clone()), Some("task-42"))
        .await
        .unwrap();
    let current = store.current_checkpoint("task-42").await.unwrap().unwrap();
    assert_eq!(
        (
            current.run_id.as_str(),
            current.seq,
            current.node_id.as_str()
        ),
        ("t-run-1", 0, START_NODE)
    );
    let mut visits = BTreeMap::new();
    for seq in 1..=3 {
        let c = commit("t-run-1", seq, &mut state, &mut visits, varied_change(seq));
        store.commit_step(&c).await.unwrap();
        let current = store.current_checkpoint("task-42").await.unwrap().unwrap();
        assert_eq!(current.seq, seq);
        assert_eq!(current.node_id, c.node_id);
        assert_eq!(current.next_nodes, c.next_nodes);
        assert_eq!(current.state_hash, state_hash(&state));
    }
    // A second run on the same task takes the row over; still one row.
    store
        .enqueue_run_for_task(&new_run("t-run-2", json!({})), Some("task-42"))
        .await
        .unwrap();
    assert_eq!(
        store
            .current_checkpoint("task-42")
            .await
            .unwrap()
            .unwrap()
            .run_id,
        "t-run-2"
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM task_checkpoints WHERE task_id = 'task-42'")
            .await,
        1
    );
    // Without a task id a run is its own task: its current checkpoint is
    // its latest one, at every step.
    let mut state = json!({"log": []});
    let mut visits = BTreeMap::new();
    store
        .create_run(&new_run("solo", state.clone()))
        .await
        .unwrap();
    for seq in 0..=3 {
        if seq > 0 {
            let mut c = commit("solo", seq, &mut state, &mut visits, varied_change(seq));
            // Both commit paths: alone with a journal, grouped without.
            if seq % 2 == 0 {
                c.journal.clear();
            }
            store.commit_step(&c).await.unwrap();
        }
        let current = store.current_checkpoint("solo").await.unwrap().unwrap();
        let latest = store.checkpoints("solo").await.unwrap().pop().unwrap();
        assert_eq!(current.task_id, "solo");
        assert_eq!(current.run_id, "solo");
        assert_eq!(current.seq, seq);
        assert_eq!(current.node_id, latest.node_id);
        assert_eq!(current.next_nodes, latest.next_nodes);
        assert_eq!(current.state_hash, state_hash(&state));
        assert_eq!(current.updated_at_ms, latest.created_at_ms);
    }
    // It needs no row of its own: the run and its checkpoints say it.
    assert_eq!(
        db.count("SELECT COUNT(*) FROM task_checkpoints WHERE run_id = 'solo'")
            .await,
        0
    );
    // A run that names a task wins over a run whose id is that task's.
    store
        .enqueue_run_for_task(&new_run("solo-2", json!({})), Some("solo"))
        .await
        .unwrap();
    assert_eq!(
        store
            .current_checkpoint("solo")
            .await
            .unwrap()
            .unwrap()
            .run_id,
        "solo-2"
    );
    // A run with a task id is not a task of its own id.
    assert!(store.current_checkpoint("t-run-1").await.unwrap().is_none());
    assert!(store.current_checkpoint("nope").await.unwrap().is_none());
}

async fn prune_deletes_only_old_finished_runs(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut runs = Vec::new();
    for (id, scenario) in [
        ("done-old", "demo"),
        ("failed-old", "demo"),
        ("running-old", "demo"),
        ("queued-old", "demo"),
        ("done-new", "demo"),
        ("keep-old", "kept"),
    ] {
        let mut run = new_run(id, json!({"log": []}));
        run.scenario_name = scenario.into();
        if id.starts_with("queued") {
            store.enqueue_run(&run).await.unwrap();
        } else if id == "failed-old" {
            // With a task row of its own.
            store
                .enqueue_run_for_task(&run, Some("task-old"))
                .await
                .unwrap();
        } else {
            store.create_run(&run).await.unwrap();
        }
        let mut state = json!({"log": []});
        let mut visits = BTreeMap::new();
        if !id.starts_with("queued") {
            let c = commit(id, 1, &mut state, &mut visits, varied_change(1));
            store
                .commit_step_with_artifacts(
                    &c,
                    &[NewArtifact {
                        name: "out.txt".into(),
                        media_type: "text/plain".into(),
                        bytes: id.as_bytes().to_vec(),
                    }],
                )
                .await
                .unwrap();
            // A map item and a failed attempt too: history of every kind.
            store
                .record_map_item(&MapItemRow {
                    run_id: id.into(),
                    node_id: "fan".into(),
                    visit: 1,
                    item_index: 0,
                    output: json!({"item": 0}),
                    output_hash: state_hash(&json!({"item": 0})),
                    duration_us: 1,
                    fuel_consumed: 1,
                    journal: Vec::new(),
                    attempt: 1,
                })
                .await
                .unwrap();
            store
                .record_failed_step(&StepRow {
                    status: StepStatus::Failed,
                    error: Some(json!({"code": "skill-error"})),
                    ..ok_step(id, "n2")
                })
                .await
                .unwrap();
        }
        runs.push(id);
    }
    for id in ["done-old", "done-new", "keep-old"] {
        store
            .finish_run(id, RunStatus::Completed, None, None)
            .await
            .unwrap();
    }
    store
        .finish_run("failed-old", RunStatus::Failed, None, None)
        .await
        .unwrap();
    // Age everything but done-new by ten days.
    db.exec("UPDATE runs SET updated_at = updated_at - 864000000 WHERE id <> 'done-new'")
        .await;
    store
        .set_retention("kept", Some(Duration::from_secs(30 * 86_400)))
        .await
        .unwrap();
    assert_eq!(store.retention().await.unwrap().len(), 1);

    // Without --older-than only scenarios with a setting are pruned: none is old enough.
    assert!(store.prune_runs(None).await.unwrap().runs.is_empty());
    let report = store
        .prune_runs(Some(Duration::from_secs(7 * 86_400)))
        .await
        .unwrap();
    assert_eq!(report.runs, vec!["done-old", "failed-old"]);
    assert_eq!(report.blobs, 2);
    for id in ["done-old", "failed-old"] {
        assert!(store.run(id).await.unwrap().is_none());
        assert!(store.checkpoints(id).await.unwrap().is_empty());
        assert!(store.steps(id).await.unwrap().is_empty());
        assert!(store.journal(id).await.unwrap().is_empty());
        assert!(store.map_items(id, "fan", 1).await.unwrap().is_empty());
        assert!(store.artifacts(id).await.unwrap().is_empty());
        assert!(store.current_checkpoint(id).await.unwrap().is_none());
    }
    assert!(
        store
            .current_checkpoint("task-old")
            .await
            .unwrap()
            .is_none()
    );
    // Nothing is left behind that names a run that is gone, in any table.
    for table in [
        "checkpoints",
        "steps",
        "journal",
        "map_items",
        "artifacts",
        "task_checkpoints",
    ] {
        let orphans = db
            .count(&format!(
                "SELECT COUNT(*) FROM {table} WHERE run_id NOT IN (SELECT id FROM runs)"
            ))
            .await;
        assert_eq!(orphans, 0, "{table} keeps rows of pruned runs");
    }
    // And what the kept runs wrote is all still there.
    for id in ["running-old", "done-new", "keep-old"] {
        assert_eq!(store.checkpoints(id).await.unwrap().len(), 2, "{id}");
        assert_eq!(store.steps(id).await.unwrap().len(), 2, "{id}");
        assert_eq!(store.journal(id).await.unwrap().len(), 1, "{id}");
        assert_eq!(
            store.map_items(id, "fan", 1).await.unwrap().len(),
            1,
            "{id}"
        );
        assert_eq!(store.artifacts(id).await.unwrap().len(), 1, "{id}");
    }
    for id in ["running-old", "queued-old", "done-new", "keep-old"] {
        assert!(store.run(id).await.unwrap().is_some(), "{id} was pruned");
    }
    assert_eq!(
        store
            .latest_state("running-old")
            .await
            .unwrap()
            .unwrap()
            .seq,
        1
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM blobs").await, 3);

    // A shorter per-scenario setting prunes that scenario without --older-than.
    store
        .set_retention("kept", Some(Duration::from_secs(86_400)))
        .await
        .unwrap();
    assert_eq!(store.prune_runs(None).await.unwrap().runs, vec!["keep-old"]);
    store.set_retention("kept", None).await.unwrap();
    assert!(store.retention().await.unwrap().is_empty());
}

// ---- Postgres only ---------------------------------------------------------

#[tokio::test]
async fn postgres_refuses_a_foreign_database_and_leaves_it_untouched() {
    let url = skillhost_tests::pg::fresh_database().await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE notes (id SERIAL PRIMARY KEY, body TEXT); \
         INSERT INTO notes (body) VALUES ('keep me');",
    )
    .execute(&mut conn)
    .await
    .unwrap();

    let error = Store::open(&url).await.unwrap_err();
    assert!(matches!(error, StoreError::NotOurs { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains(&url), "{message}");
    assert!(message.contains("`notes`"), "{message}");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() ORDER BY 1",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    assert_eq!(tables, vec!["notes"]);

    // A table called skillhost_meta that is not ours is foreign too.
    sqlx::raw_sql("CREATE TABLE skillhost_meta (x INT)")
        .execute(&mut conn)
        .await
        .unwrap();
    let error = Store::open(&url).await.unwrap_err();
    assert!(matches!(error, StoreError::NotOurs { .. }), "{error}");
    conn.close().await.unwrap();
}

#[tokio::test]
async fn postgres_connection_errors_name_the_database_without_the_password() {
    // Nothing listens on this port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://app:s3cret@127.0.0.1:{port}/runs");
    let error = Store::open(&url).await.unwrap_err();
    let message = error.to_string();
    assert!(matches!(error, StoreError::Open { .. }), "{message}");
    assert!(!message.contains("s3cret"), "{message}");
    assert!(
        message.contains(&format!("postgres://app:***@127.0.0.1:{port}/runs")),
        "{message}"
    );
    assert!(message.contains("is Postgres running"), "{message}");

    // A database that does not exist on a server that does.
    let existing = skillhost_tests::pg::fresh_database().await;
    let missing = skillhost_tests::pg::with_database(&existing, "no_such_db");
    let error = Store::open(&missing).await.unwrap_err();
    assert!(error.to_string().contains("create it first"), "{error}");

    // A malformed URL.
    let error = Store::open("postgres://app:s3cret@127.0.0.1:notaport/x")
        .await
        .unwrap_err();
    assert!(
        matches!(error, StoreError::UnsupportedUrl { .. }),
        "{error}"
    );
    assert!(!error.to_string().contains("s3cret"), "{error}");
}

#[tokio::test]
async fn postgres_migrates_a_version_1_database() {
    // A database as the previous release left it: schema 1 only.
    let url = skillhost_tests::pg::fresh_database().await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    sqlx::raw_sql(include_str!("../../migrations/postgres/0001_init.sql"))
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::raw_sql(
        "INSERT INTO skillhost_meta (key, value) VALUES ('schema_version', '1'); \
         INSERT INTO runs (id, scenario_name, scenario_path, scenario_digest, status, input, \
             created_at, updated_at) VALUES ('old', 's', 'p', 'd', 'running', '{}', 1, 1);",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = Store::open(&url).await.unwrap();
    let run = store.run("old").await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Running);
    let lease = store
        .acquire_lease("old", "w", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(lease.generation, 1);
}

/// On SQLite, schema 4 keeps task rows only for runs with a task id: a
/// version 3 database loses its runs' own task rows and keeps answering for
/// them.
#[tokio::test]
async fn sqlite_migrates_a_version_3_database() {
    let db = Db::new(Kind::Sqlite).await;
    let store = db.open().await;
    store.create_run(&new_run("solo", json!({}))).await.unwrap();
    store
        .enqueue_run_for_task(&new_run("tasked", json!({})), Some("T"))
        .await
        .unwrap();
    store.close().await;
    // What version 3 wrote for a run without a task id.
    db.exec(
        "INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, state_hash, \
             updated_at) \
         SELECT run_id, run_id, seq, node_id, next_nodes, state_hash, created_at \
         FROM checkpoints WHERE run_id = 'solo'; \
         UPDATE skillhost_meta SET value = '3' WHERE key = 'schema_version'; ",
    )
    .await;
    db.exec(undo_12(db.kind)).await;
    db.exec(UNDO_11).await;
    db.exec(undo_10(db.kind)).await;
    db.exec(UNDO_9).await;
    db.exec(UNDO_8).await;
    db.exec(UNDO_7).await;
    db.exec(UNDO_6).await;
    db.exec(UNDO_5).await;
    assert_eq!(db.count("SELECT COUNT(*) FROM task_checkpoints").await, 2);

    let store = db.open().await;
    assert_eq!(
        db.count("SELECT COUNT(*) FROM task_checkpoints WHERE task_id = 'T'")
            .await,
        1
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM task_checkpoints").await, 1);
    let solo = store.current_checkpoint("solo").await.unwrap().unwrap();
    assert_eq!((solo.run_id.as_str(), solo.seq), ("solo", 0));
    let tasked = store.current_checkpoint("T").await.unwrap().unwrap();
    assert_eq!((tasked.run_id.as_str(), tasked.seq), ("tasked", 0));
    store.close().await;
    assert_eq!(
        db.count("SELECT CAST(value AS BIGINT) FROM skillhost_meta WHERE key = 'schema_version'")
            .await,
        i64::from(SCHEMA_VERSION)
    );
}

/// Schema 4 moves the sequence guard into the commit statements, drops the
/// per-row trigger and the history's foreign keys, and keeps task rows only
/// for runs with a task id: a version 3 database loses its runs' own task
/// rows and keeps answering for them.
#[tokio::test]
async fn postgres_migrates_a_version_3_database() {
    let url = skillhost_tests::pg::fresh_database().await;
    let mut conn = PgConnection::connect(&url).await.unwrap();
    for sql in [
        include_str!("../../migrations/postgres/0001_init.sql"),
        include_str!("../../migrations/postgres/0002_leases_queue.sql"),
        include_str!("../../migrations/postgres/0003_run_updates_in_place.sql"),
    ] {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    }
    let state = json!({"log": []});
    let hash = state_hash(&state);
    sqlx::raw_sql(&format!(
        "INSERT INTO skillhost_meta (key, value) VALUES ('schema_version', '3'); \
         INSERT INTO runs (id, scenario_name, scenario_path, scenario_digest, status, input, \
             current_node, created_at, updated_at, task_id) VALUES \
             ('solo', 's', 'p', 'd', 'running', '{{}}', 'n1', 1, 1, NULL), \
             ('tasked', 's', 'p', 'd', 'running', '{{}}', 'n1', 1, 1, 'T'); \
         INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, \
             changes, state_hash, visits, bytes, created_at) VALUES \
             ('solo', 0, '{START_NODE}', '[\"n1\"]', true, '{state}', '[]', '{hash}', '{{}}', 1, 7), \
             ('tasked', 0, '{START_NODE}', '[\"n1\"]', true, '{state}', '[]', '{hash}', '{{}}', 1, 7); \
         INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, state_hash, \
             updated_at) VALUES \
             ('solo', 'solo', 0, '{START_NODE}', '[\"n1\"]', '{hash}', 7), \
             ('T', 'tasked', 0, '{START_NODE}', '[\"n1\"]', '{hash}', 7);"
    ))
    .execute(&mut conn)
    .await
    .unwrap();

    let store = Store::open(&url).await.unwrap();
    let rows: Vec<String> = sqlx::query_scalar("SELECT task_id FROM task_checkpoints")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    assert_eq!(rows, ["T"]);
    let solo = store.current_checkpoint("solo").await.unwrap().unwrap();
    assert_eq!(
        (solo.run_id.as_str(), solo.seq, solo.updated_at_ms),
        ("solo", 0, 7)
    );
    assert_eq!(solo.next_nodes, ["n1"]);
    let tasked = store.current_checkpoint("T").await.unwrap().unwrap();
    assert_eq!((tasked.run_id.as_str(), tasked.seq), ("tasked", 0));
    let leftovers: i64 = sqlx::query_scalar(
        "SELECT (SELECT COUNT(*) FROM pg_trigger WHERE NOT tgisinternal \
                 AND tgrelid = 'checkpoints'::regclass) \
              + (SELECT COUNT(*) FROM pg_constraint WHERE contype = 'f' AND conrelid IN \
                 ('checkpoints'::regclass, 'steps'::regclass, 'task_checkpoints'::regclass))",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(leftovers, 0);
    conn.close().await.unwrap();

    // The guard is the statement's now: the next checkpoint goes through,
    // the same one again or one ahead writes nothing.
    let mut state = state;
    let mut visits = BTreeMap::new();
    let first = commit("solo", 1, &mut state, &mut visits, varied_change(1));
    store.commit_step(&first).await.unwrap();
    let error = store.commit_step(&first).await.unwrap_err();
    assert!(error.to_string().contains("does not follow"), "{error}");
    let ahead = commit("solo", 3, &mut state, &mut visits, varied_change(3));
    let error = store.commit_step(&ahead).await.unwrap_err();
    assert!(
        error
            .to_string()
            .contains("does not follow the last one (1)"),
        "{error}"
    );
    assert_eq!(store.checkpoints("solo").await.unwrap().len(), 2);
    assert_eq!(store.steps("solo").await.unwrap().len(), 1);
    assert_eq!(
        store.current_checkpoint("solo").await.unwrap().unwrap().seq,
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_group_commit_keeps_each_commit_its_own_verdict() {
    let url = skillhost_tests::pg::fresh_database().await;
    let store = Store::open(&url).await.unwrap();
    let runs: Vec<String> = (0..40).map(|i| format!("g{i:02}")).collect();
    for (i, id) in runs.iter().enumerate() {
        let task = (i < 2).then_some("shared");
        store
            .enqueue_run_for_task(&new_run(id, json!({"log": []})), task)
            .await
            .unwrap();
    }
    // g39 is fenced by a lease it does not hold.
    let lease = store
        .acquire_lease("g39", "holder", Duration::from_secs(60))
        .await
        .unwrap();
    let stale = store.fenced(skillhost_store::Lease {
        generation: lease.generation + 7,
        ..lease
    });

    let mut states: Vec<Value> = runs.iter().map(|_| json!({"log": []})).collect();
    let mut visits: Vec<BTreeMap<String, u32>> = runs.iter().map(|_| BTreeMap::new()).collect();
    for seq in 1..=8 {
        let mut tasks = Vec::new();
        for (i, id) in runs.iter().enumerate() {
            let mut c = commit(id, seq, &mut states[i], &mut visits[i], varied_change(seq));
            // Commits without journal entries are grouped; one in four keeps
            // its entry and goes alone, beside the groups.
            if i % 4 != 0 {
                c.journal.clear();
            }
            // Every commit twice, concurrently: one of each pair wins.
            for _ in 0..2 {
                let handle = if i == 39 {
                    stale.clone()
                } else {
                    store.clone()
                };
                let c = c.clone();
                tasks.push((i, tokio::spawn(async move { handle.commit_step(&c).await })));
            }
        }
        let mut wins = vec![0; runs.len()];
        for (i, task) in tasks {
            match task.await.unwrap() {
                Ok(()) => wins[i] += 1,
                Err(e) if i == 39 => assert!(e.is_lease_lost(), "{e}"),
                Err(e) => assert!(e.is_conflict(), "{e}"),
            }
        }
        for (i, won) in wins.iter().enumerate() {
            let expected = if i == 39 { 0 } else { 1 };
            assert_eq!(*won, expected, "run {} checkpoint {seq}", runs[i]);
        }
    }
    for (i, id) in runs.iter().enumerate().take(39) {
        let latest = store.latest_state(id).await.unwrap().unwrap();
        assert_eq!((latest.seq, &latest.state), (8, &states[i]), "{id}");
        assert_eq!(store.steps(id).await.unwrap().len(), 8);
    }
    assert_eq!(store.run("g39").await.unwrap().unwrap().last_seq, 0);
    let shared = store.current_checkpoint("shared").await.unwrap().unwrap();
    assert_eq!(shared.seq, 8);
    assert!(["g00", "g01"].contains(&shared.run_id.as_str()));
}

/// A racing write of a run: its verdict, when it comes.
type Write = tokio::task::JoinHandle<Result<(), skillhost_store::StoreError>>;

/// How many times each run's racing writes were written; every other
/// write must have been refused as a conflict.
async fn tally(writes: Vec<(String, Write)>) -> BTreeMap<String, u32> {
    let mut written: BTreeMap<String, u32> = BTreeMap::new();
    for (id, write) in writes {
        match write.await.unwrap() {
            Ok(()) => *written.entry(id).or_default() += 1,
            Err(e) => {
                assert!(e.is_conflict(), "{id}: {e}");
                written.entry(id).or_default();
            }
        }
    }
    written
}

/// Concurrent last steps (`commit_last_step`) of many runs are batched
/// beside ordinary commits of others (their own statement), each written
/// once, with its run's end: a second runner's copy of each is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_group_commit_batches_last_steps_with_their_runs_ends() {
    let url = skillhost_tests::pg::fresh_database().await;
    let store = Store::open(&url).await.unwrap();
    let ids: Vec<String> = (0..16).map(|i| format!("r{i:02}")).collect();
    let mut states = Vec::new();
    let mut visits = Vec::new();
    for id in &ids {
        store
            .enqueue_run(&new_run(id, json!({"log": []})))
            .await
            .unwrap();
        let (mut state, mut seen) = (json!({"log": []}), BTreeMap::new());
        let mut first = commit(id, 1, &mut state, &mut seen, varied_change(1));
        first.journal.clear();
        store.commit_step(&first).await.unwrap();
        states.push(state);
        visits.push(seen);
    }
    let mut writes: Vec<(String, Write)> = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        let mut c = commit(id, 2, &mut states[i], &mut visits[i], varied_change(2));
        c.journal.clear();
        for _ in 0..2 {
            let (store, c) = (store.clone(), c.clone());
            // Even runs end with their last step; odd ones go on.
            writes.push((
                id.clone(),
                tokio::spawn(async move {
                    if i % 2 == 1 {
                        return store.commit_step(&c).await;
                    }
                    let (status, error) = match i % 4 {
                        0 => (RunStatus::Completed, None),
                        _ => (RunStatus::Failed, Some(json!({"code": "x"}))),
                    };
                    let result = c.full_state.clone();
                    store
                        .commit_last_step(&c, &[], status, Some(&*result), error.as_ref())
                        .await
                }),
            ));
        }
    }
    let written = tally(writes).await;
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(written[id], 1, "{id} written {} times", written[id]);
        let run = store.run(id).await.unwrap().unwrap();
        let latest = store.latest_state(id).await.unwrap().unwrap();
        assert_eq!((latest.seq, &latest.state), (2, &states[i]), "{id}");
        assert_eq!(store.steps(id).await.unwrap().len(), 2, "{id}");
        let want = match i % 4 {
            0 => (RunStatus::Completed, Some(states[i].clone()), None),
            2 => (
                RunStatus::Failed,
                Some(states[i].clone()),
                Some(json!({"code": "x"})),
            ),
            _ => (RunStatus::Running, None, None),
        };
        assert_eq!((run.status, run.result, run.error), want, "{id}");
        if i % 2 == 0 {
            assert_eq!(run.lease_owner, None, "{id}");
        }
    }
}

/// Creates, checkpoint commits and finishes queued at once are grouped
/// side by side, and each write still hears its own verdict: of two copies
/// of each, one is written and the other is refused as a conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_group_commit_mixes_creates_commits_and_finishes() {
    let url = skillhost_tests::pg::fresh_database().await;
    let store = Store::open(&url).await.unwrap();
    let committing: Vec<String> = (0..12).map(|i| format!("c{i:02}")).collect();
    let finishing: Vec<String> = (0..12).map(|i| format!("f{i:02}")).collect();
    for id in committing.iter().chain(&finishing) {
        // c00's task also gets a new run in every round: c00's checkpoints
        // and the new runs write one task row at once.
        let task = (id == "c00").then_some("mix");
        store
            .enqueue_run_for_task(&new_run(id, json!({"log": []})), task)
            .await
            .unwrap();
    }
    let mut states: Vec<Value> = committing.iter().map(|_| json!({"log": []})).collect();
    let mut visits: Vec<BTreeMap<String, u32>> =
        committing.iter().map(|_| BTreeMap::new()).collect();
    let rounds = 4;
    for round in 1..=rounds {
        let mut writes: Vec<(String, Write)> = Vec::new();
        for (i, id) in committing.iter().enumerate() {
            let mut c = commit(
                id,
                round,
                &mut states[i],
                &mut visits[i],
                varied_change(round),
            );
            c.journal.clear();
            for _ in 0..2 {
                let (store, c) = (store.clone(), c.clone());
                writes.push((
                    id.clone(),
                    tokio::spawn(async move { store.commit_step(&c).await }),
                ));
            }
        }
        for i in 0..13 {
            let id = format!("n{round}-{i:02}");
            let task = match i {
                0 | 1 => Some(format!("task-{round}")),
                12 => Some("mix".to_string()),
                _ => None,
            };
            for _ in 0..2 {
                let (store, run, task) =
                    (store.clone(), new_run(&id, json!({"n": i})), task.clone());
                writes.push((
                    id.clone(),
                    tokio::spawn(
                        async move { store.enqueue_run_for_task(&run, task.as_deref()).await },
                    ),
                ));
            }
        }
        for id in finishing.iter().skip(3 * (round as usize - 1)).take(3) {
            for _ in 0..2 {
                let (store, id2) = (store.clone(), id.clone());
                writes.push((
                    id.clone(),
                    tokio::spawn(async move {
                        store
                            .finish_run(
                                &id2,
                                RunStatus::Completed,
                                Some(&json!({"done": id2})),
                                None,
                            )
                            .await
                    }),
                ));
            }
        }
        let written = tally(writes).await;
        for (id, count) in &written {
            assert_eq!(*count, 1, "round {round}: {id} written {count} times");
        }
        let shared = store
            .current_checkpoint(&format!("task-{round}"))
            .await
            .unwrap()
            .unwrap();
        assert!(
            [format!("n{round}-00"), format!("n{round}-01")].contains(&shared.run_id),
            "{shared:?}"
        );
        let mix = store.current_checkpoint("mix").await.unwrap().unwrap();
        assert!(
            [("c00".to_string(), round), (format!("n{round}-12"), 0)]
                .contains(&(mix.run_id.clone(), mix.seq)),
            "{mix:?}"
        );
    }
    for (i, id) in committing.iter().enumerate() {
        let latest = store.latest_state(id).await.unwrap().unwrap();
        assert_eq!((latest.seq, &latest.state), (rounds, &states[i]), "{id}");
        assert_eq!(
            store.steps(id).await.unwrap().len(),
            rounds as usize,
            "{id}"
        );
    }
    for round in 1..=rounds {
        for i in 0..13 {
            let id = format!("n{round}-{i:02}");
            let run = store.run(&id).await.unwrap().unwrap();
            assert_eq!((run.status, run.last_seq), (RunStatus::Queued, 0), "{id}");
            assert_eq!(
                store.latest_state(&id).await.unwrap().unwrap().state,
                json!({"n": i})
            );
        }
    }
    for id in &finishing {
        let run = store.run(id).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Completed, "{id}");
        assert_eq!(run.result, Some(json!({"done": id})), "{id}");
    }
}

/// A database written by a build of schema version 2 (the index on
/// `runs.updated_at` still there) is migrated to the current version when it
/// is opened, and keeps its runs.
async fn a_version_2_database_is_upgraded_in_place(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    store.create_run(&new_run("kept", json!({}))).await.unwrap();
    store.close().await;
    let undo_10 = undo_10(kind);
    let undo_12 = undo_12(kind);
    let undo_3 = match kind {
        Kind::Sqlite => "",
        Kind::Postgres | Kind::PgBouncer => "ALTER TABLE runs RESET (fillfactor);",
    };
    db.exec(&format!(
        "CREATE INDEX runs_by_updated ON runs (updated_at) \
         WHERE status IN ('completed', 'failed', 'cancelled'); {undo_3} {undo_12} {UNDO_11} {undo_10} {UNDO_9} {UNDO_8} \
         {UNDO_7} {UNDO_6} {UNDO_5} \
         UPDATE skillhost_meta SET value = '2' WHERE key = 'schema_version'"
    ))
    .await;
    let index_count = match kind {
        Kind::Sqlite => {
            "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND name = 'runs_by_updated'"
        }
        Kind::Postgres | Kind::PgBouncer => {
            "SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'runs_by_updated'"
        }
    };
    assert_eq!(db.count(index_count).await, 1);

    let store = db.open().await;
    assert!(store.run("kept").await.unwrap().is_some());
    // Its checkpoint 0 has no digest: the run is marked as older than them.
    assert_eq!(store.latest_state("kept").await.unwrap().unwrap().seq, 0);
    store.close().await;
    assert_eq!(db.count(index_count).await, 0);
    assert_eq!(
        db.count("SELECT CAST(value AS BIGINT) FROM skillhost_meta WHERE key = 'schema_version'")
            .await,
        i64::from(SCHEMA_VERSION)
    );
}

/// A runner that lost its lease writes nothing for the run:
/// not a failed attempt, not a map item, not an artifact. The holder can.
async fn a_stale_runner_writes_no_failed_steps_map_items_or_artifacts(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    store.enqueue_run(&new_run("f1", json!({}))).await.unwrap();
    let first = store
        .acquire_lease("f1", "first", Duration::from_millis(1))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = store
        .acquire_lease("f1", "second", Duration::from_secs(60))
        .await
        .unwrap();
    let (stale, holder) = (store.fenced(first), store.fenced(second));

    let item = |index: u32| MapItemRow {
        run_id: "f1".into(),
        node_id: "fan".into(),
        visit: 1,
        item_index: index,
        output: json!({"item": index}),
        output_hash: state_hash(&json!({"item": index})),
        duration_us: 1,
        fuel_consumed: 1,
        journal: Vec::new(),
        attempt: 1,
    };
    let failed = StepRow {
        status: StepStatus::Failed,
        error: Some(json!({"code": "skill-error"})),
        ..ok_step("f1", "n1")
    };
    let refused = [
        stale.record_map_item(&item(0)).await.unwrap_err(),
        stale.record_failed_step(&failed).await.unwrap_err(),
        stale
            .put_artifact("f1", "report.md", "text/markdown", b"stale")
            .await
            .unwrap_err(),
    ];
    for e in &refused {
        assert!(e.is_lease_lost(), "{e}");
        assert!(e.to_string().contains("second"), "{e}");
    }
    assert!(store.map_items("f1", "fan", 1).await.unwrap().is_empty());
    assert!(store.steps("f1").await.unwrap().is_empty());
    assert!(store.artifacts("f1").await.unwrap().is_empty());

    holder.record_map_item(&item(1)).await.unwrap();
    holder.record_failed_step(&failed).await.unwrap();
    holder
        .put_artifact("f1", "report.md", "text/markdown", b"held")
        .await
        .unwrap();
    let items = store.map_items("f1", "fan", 1).await.unwrap();
    assert_eq!(items.iter().map(|i| i.item_index).collect::<Vec<_>>(), [1]);
    assert_eq!(store.steps("f1").await.unwrap().len(), 1);
    assert_eq!(store.artifacts("f1").await.unwrap().len(), 1);
    store.close().await;
}

/// Both backends decode rows with one codec: whatever table a read comes
/// from, a stored value that fails its check (JSON that does not parse, a
/// count below zero, next nodes that are not a list) is reported as
/// corrupt, naming the row and the database, with the same words.
async fn every_read_reports_a_tampered_value_as_corrupt(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut state = json!({"log": []});
    store
        .enqueue_run_for_task(&new_run("r", state.clone()), Some("t"))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let changes = vec![StateChange::Append {
        field: "log".into(),
        items: vec![json!(1)],
    }];
    let step = commit("r", 1, &mut state, &mut visits, changes);
    let artifact = NewArtifact {
        name: "a.txt".into(),
        media_type: "text/plain".into(),
        bytes: b"kept".to_vec(),
    };
    store
        .commit_step_with_artifacts(&step, std::slice::from_ref(&artifact))
        .await
        .unwrap();
    store
        .record_map_item(&MapItemRow {
            run_id: "r".into(),
            node_id: "m".into(),
            visit: 1,
            item_index: 0,
            output: json!({"i": 0}),
            output_hash: state_hash(&json!({"i": 0})),
            duration_us: 10,
            fuel_consumed: 100,
            journal: Vec::new(),
            attempt: 1,
        })
        .await
        .unwrap();
    store.close().await;

    for tamper in [
        "UPDATE runs SET input = 'not json' WHERE id = 'r'",
        "UPDATE steps SET duration_us = -1 WHERE run_id = 'r'",
        "UPDATE map_items SET output = 'nope' WHERE run_id = 'r'",
        "UPDATE journal SET response = '{' WHERE run_id = 'r'",
        "UPDATE checkpoints SET next_nodes = '\"n2\"' WHERE run_id = 'r' AND seq = 1",
        "UPDATE artifacts SET size = -7 WHERE run_id = 'r'",
        "UPDATE task_checkpoints SET next_nodes = 'x' WHERE task_id = 't'",
    ] {
        db.exec(tamper).await;
    }
    let store = db.open().await;
    let corrupt = |error: StoreError, what: &str, detail: &str| {
        assert!(error.is_corrupt(), "{error}");
        let message = error.to_string();
        let expected = format!("corrupt {what} in {}: {detail}", db.url);
        assert!(
            message.contains(&expected),
            "{message}\nexpected: {expected}"
        );
    };
    let input = (
        "run `r`",
        "what it stores no longer matches the digest recorded when it was created: its input",
    );
    corrupt(store.run("r").await.unwrap_err(), input.0, input.1);
    corrupt(
        store.list_runs(None, 10).await.unwrap_err(),
        input.0,
        input.1,
    );
    // A step is named by its row id, which the database chose.
    let error = store.steps("r").await.unwrap_err();
    assert!(error.is_corrupt(), "{error}");
    let message = error.to_string();
    assert!(
        message.contains("corrupt duration_us of step "),
        "{message}"
    );
    let tail = format!(" of run `r` in {}: -1 is out of range", db.url);
    assert!(message.contains(&tail), "{message}");
    corrupt(
        store.map_items("r", "m", 1).await.unwrap_err(),
        "item 0 of map node `m` of run `r`",
        "not valid JSON",
    );
    corrupt(
        store.journal("r").await.unwrap_err(),
        "journal entry 0 of step 1 of run `r`",
        "not valid JSON",
    );
    corrupt(
        store.checkpoints("r").await.unwrap_err(),
        "checkpoint 1 of run `r`",
        "next nodes are not valid",
    );
    corrupt(
        store.artifacts("r").await.unwrap_err(),
        "size of artifact `a.txt` of run `r`",
        "-7 is out of range",
    );
    corrupt(
        store.current_checkpoint("t").await.unwrap_err(),
        "current checkpoint of task `t`",
        "next nodes are not valid",
    );
    // What was not tampered with still reads.
    assert_eq!(
        store.state_at("r", 0).await.unwrap().unwrap().state,
        json!({"log": []})
    );
    let digest = skillhost_store::blob_digest(b"kept");
    assert_eq!(
        store.artifact_bytes(&digest).await.unwrap().unwrap(),
        b"kept".to_vec()
    );
}

/// A run with a state large enough that three small steps take no snapshot
/// after seq 0.
async fn three_steps(store: &Store, run_id: &str) {
    let mut state = json!({"log": [], "pad": "p".repeat(2_000)});
    store
        .create_run(&new_run(run_id, state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    for seq in 1..=3 {
        let changes = vec![StateChange::Append {
            field: "log".into(),
            items: vec![json!(seq)],
        }];
        let c = commit(run_id, seq, &mut state, &mut visits, changes);
        store.commit_step(&c).await.unwrap();
    }
}

/// What a resume reads (the run's input and scenario, the last checkpoint's
/// next nodes and visit counts, every delta replayed, the snapshot) is
/// pinned: an edit of any of them, made in the database directly, is
/// refused with an error naming the run, the seq and what no longer
/// matches, and a listing still lists the other runs.
async fn everything_a_resume_trusts_is_checked_against_its_digest(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let edits = [
        (
            "e-next",
            "UPDATE checkpoints SET next_nodes = '[]' WHERE run_id = 'e-next' AND seq = 3",
            "checkpoint 3 of run `e-next`",
            "committed: its next nodes",
        ),
        (
            "e-visits",
            "UPDATE checkpoints SET visits = '{\"n1\":0}' WHERE run_id = 'e-visits' AND seq = 3",
            "checkpoint 3 of run `e-visits`",
            "committed: its visit counts",
        ),
        (
            "e-delta",
            "UPDATE checkpoints SET changes = '[]' WHERE run_id = 'e-delta' AND seq = 2",
            "checkpoint 2 of run `e-delta`",
            "committed: its changes",
        ),
        (
            "e-node",
            "UPDATE checkpoints SET node_id = 'n4' WHERE run_id = 'e-node' AND seq = 3",
            "checkpoint 3 of run `e-node`",
            "committed: its run, seq, node or state hash",
        ),
        (
            "e-snapshot",
            "UPDATE checkpoints SET state = '{\"log\":[],\"pad\":\"q\"}' \
             WHERE run_id = 'e-snapshot' AND seq = 0",
            "checkpoint 3 of run `e-snapshot`",
            "the rebuilt state hashes to",
        ),
        (
            "e-unsigned",
            "UPDATE checkpoints SET digest = NULL WHERE run_id = 'e-unsigned' AND seq = 3",
            "checkpoint 3 of run `e-unsigned`",
            "it has no digest",
        ),
    ];
    let run_edits = [
        (
            "e-input",
            "UPDATE runs SET input = '{\"topic\":\"other\"}' WHERE id = 'e-input'",
            "its input",
        ),
        (
            "e-scenario",
            "UPDATE runs SET scenario_digest = 'x' WHERE id = 'e-scenario'",
            "its id or scenario (name, path, digest)",
        ),
    ];
    three_steps(&store, "intact").await;
    // A map node's finished item, which a resumed map node reuses.
    let output = json!({"i": 0});
    store
        .record_map_item(&MapItemRow {
            run_id: "intact".into(),
            node_id: "m".into(),
            visit: 1,
            item_index: 0,
            output_hash: state_hash(&output),
            output,
            duration_us: 10,
            fuel_consumed: 100,
            journal: Vec::new(),
            attempt: 1,
        })
        .await
        .unwrap();
    for (run_id, ..) in edits.iter().chain(&[]) {
        three_steps(&store, run_id).await;
    }
    for (run_id, ..) in run_edits {
        three_steps(&store, run_id).await;
    }
    store.close().await;
    for (_, sql, ..) in edits {
        db.exec(sql).await;
    }
    for (_, sql, _) in run_edits {
        db.exec(sql).await;
    }
    db.exec("UPDATE map_items SET output = '{\"i\":1}' WHERE run_id = 'intact'")
        .await;

    let store = db.open().await;
    assert_eq!(store.latest_state("intact").await.unwrap().unwrap().seq, 3);
    let error = store.map_items("intact", "m", 1).await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("corrupt item 0 of map node `m` of run `intact`")
            && message.contains("its output hashes to"),
        "{message}"
    );
    for (run_id, _, what, detail) in edits {
        let error = store.latest_state(run_id).await.unwrap_err();
        assert!(error.is_corrupt(), "{error}");
        let message = error.to_string();
        assert!(message.contains(&format!("corrupt {what}")), "{message}");
        assert!(message.contains(detail), "{message}");
    }
    for (run_id, _, detail) in run_edits {
        let error = store.run(run_id).await.unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&format!("corrupt run `{run_id}`")),
            "{message}"
        );
        assert!(message.contains(&format!("created: {detail}")), "{message}");
    }
    // One bad row is its own error; the others are listed.
    let listed = store.list_runs_each(None, 100).await.unwrap();
    assert_eq!(listed.len(), 9);
    let bad: Vec<String> = listed
        .iter()
        .filter_map(|row| {
            row.as_ref()
                .err()
                .map(|bad| format!("{:?}: {}", bad.id, bad.error))
        })
        .collect();
    assert_eq!(bad.len(), 2, "{bad:?}");
    assert!(
        bad.iter()
            .any(|e| e.starts_with("Some(\"e-input\")") && e.contains("run `e-input`")),
        "{bad:?}"
    );
    assert!(
        bad.iter().any(|e| e.contains("run `e-scenario`")),
        "{bad:?}"
    );
}

/// A value nested deeper than the store keeps is refused when it is
/// written (input, changes), naming what and the limit, and writes
/// nothing; one already in the database (written by an older host, or by
/// hand) makes its own row unreadable, never the others, and never
/// overflows the stack.
async fn values_nested_too_deep_are_refused_at_write_and_never_overflow_a_read(kind: Kind) {
    use skillhost_model::nesting::{deep_array, drop_deep};
    let db = Db::new(kind).await;
    let store = db.open().await;

    let error = store
        .record_map_item(&MapItemRow {
            run_id: "r".into(),
            node_id: "m".into(),
            visit: 1,
            item_index: 2,
            output: deep_array(200),
            output_hash: "h".into(),
            duration_us: 1,
            fuel_consumed: 1,
            journal: Vec::new(),
            attempt: 1,
        })
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the output of item 2 of map node `m` nests"),
        "{error}"
    );

    let mut deep_input = new_run("deep-input", json!({}));
    deep_input.input = json!({"nested": deep_array(200)});
    let error = store.create_run(&deep_input).await.unwrap_err();
    let message = error.to_string();
    assert!(
        message.contains("run `deep-input` was not created"),
        "{message}"
    );
    assert!(message.contains("the run's input nests"), "{message}");
    assert!(message.contains("more than 100 levels"), "{message}");
    assert!(store.run("deep-input").await.unwrap().is_none());

    three_steps(&store, "r").await;
    for depth in [200, 20_000] {
        let mut state = store.latest_state("r").await.unwrap().unwrap().state;
        let mut visits = BTreeMap::new();
        // Built from the state before the change: the fixture would hash
        // (recursively) the state the change leads to.
        let mut c = commit("r", 4, &mut state, &mut visits, vec![]);
        c.changes = vec![StateChange::Set {
            field: "tree".into(),
            value: deep_array(depth),
        }];
        let error = store.commit_step(&c).await.unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains("checkpoint 4 of run `r` was not written"),
            "{message}"
        );
        assert!(message.contains("state field `tree` nests"), "{message}");
        for change in std::mem::take(&mut c.changes) {
            if let StateChange::Set { value, .. } = change {
                drop_deep(value);
            }
        }
    }
    assert_eq!(store.run("r").await.unwrap().unwrap().last_seq, 3);

    // Rows nested 200 and 20,000 levels, as an older host could write them.
    three_steps(&store, "deep-200").await;
    three_steps(&store, "deep-20000").await;
    store.close().await;
    for (run_id, depth) in [("deep-200", 200), ("deep-20000", 20_000)] {
        let nested = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
        db.exec(&format!(
            "UPDATE runs SET input = '{nested}', digest = 'legacy', provenance = NULL \
                 WHERE id = '{run_id}'; \
             UPDATE checkpoints SET state = '{{\"log\":{nested}}}', next_nodes = '{nested}', \
                 digest = NULL WHERE run_id = '{run_id}'"
        ))
        .await;
    }
    let store = db.open().await;
    let listed = store.list_runs_each(None, 100).await.unwrap();
    assert_eq!(listed.len(), 3);
    let bad: Vec<String> = listed
        .iter()
        .filter_map(|row| {
            row.as_ref()
                .err()
                .map(|bad| format!("{:?}: {}", bad.id, bad.error))
        })
        .collect();
    assert_eq!(bad.len(), 2, "{bad:?}");
    for (run_id, _) in [("deep-200", 200), ("deep-20000", 20_000)] {
        let error = store.run(run_id).await.unwrap_err();
        assert!(error.is_corrupt(), "{error}");
        assert!(error.to_string().contains("recursion limit"), "{error}");
        assert!(store.latest_state(run_id).await.unwrap_err().is_corrupt());
        assert!(store.checkpoints(run_id).await.unwrap_err().is_corrupt());
    }
    assert_eq!(store.latest_state("r").await.unwrap().unwrap().seq, 3);
}

/// A 500-step loop that appends about 100 bytes a step stores its
/// checkpoints in at most twice the bytes of its deltas plus one final
/// state, and any seq rebuilds from less than one state's worth of deltas.
async fn checkpoint_bytes_stay_within_twice_the_deltas_plus_the_final_state(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let mut state = json!({"log": [], "round": 0});
    store
        .create_run(&new_run("loop", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let mut deltas = 0;
    for seq in 1..=500 {
        let changes = vec![
            StateChange::Append {
                field: "log".into(),
                items: vec![json!(format!("{seq:>5}: {}", "x".repeat(90)))],
            },
            StateChange::Set {
                field: "round".into(),
                value: json!(seq),
            },
        ];
        let c = commit("loop", seq, &mut state, &mut visits, changes);
        deltas += (serde_json::to_string(&c.next_nodes).unwrap().len()
            + serde_json::to_string(&c.changes).unwrap().len()
            + serde_json::to_string(&c.visits).unwrap().len()) as u64;
        store.commit_step(&c).await.unwrap();
    }
    let final_state = serde_json::to_string(&state).unwrap().len() as u64;
    let history = store.checkpoints("loop").await.unwrap();
    let total: u64 = history.iter().map(|c| c.bytes).sum();
    let snapshots = history.iter().filter(|c| c.is_snapshot).count();
    let ratio = total as f64 / (deltas + final_state) as f64;
    eprintln!(
        "{kind:?}: {total} B of checkpoints for {deltas} B of deltas and a final state of \
         {final_state} B: {ratio:.2}x, {snapshots} snapshots"
    );
    assert!(ratio <= 2.0, "{ratio:.2}x");
    assert!(snapshots > 1 && snapshots < 20, "{snapshots} snapshots");
    // Replaying from the last snapshot reads less than one state's worth.
    let last_snapshot = history.iter().rposition(|c| c.is_snapshot).unwrap();
    let replayed: u64 = history[last_snapshot + 1..].iter().map(|c| c.bytes).sum();
    assert!(replayed < final_state, "{replayed} B replayed");
    let latest = store.latest_state("loop").await.unwrap().unwrap();
    assert_eq!(latest.state, state);
    // A resume in another process (a fresh handle) goes on from the plan
    // the history implies: no snapshot just because it was reopened.
    store.close().await;
    let store = db.open().await;
    store.latest_state("loop").await.unwrap().unwrap();
    let changes = vec![StateChange::Set {
        field: "round".into(),
        value: json!(501),
    }];
    let c = commit("loop", 501, &mut state, &mut visits, changes);
    store.commit_step(&c).await.unwrap();
    let after = store.checkpoints("loop").await.unwrap();
    assert!(!after.last().unwrap().is_snapshot);
}

/// Behind a transaction-pooling PgBouncer without `pgbouncer=true`: refused
/// at once (not retried as a lost connection), naming the option.
#[tokio::test]
async fn pgbouncer_without_the_option_is_refused_naming_it() {
    let pooled = skillhost_tests::pgbouncer::fresh_database().await;
    let name = pooled.direct.rsplit('/').next().unwrap().to_owned();
    let url = skillhost_tests::pgbouncer::shared().url_without_option(&name);
    let started = std::time::Instant::now();
    let error = Store::open(&url).await.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, StoreError::UnsupportedUrl { .. }),
        "{message}"
    );
    assert!(!error.is_transient(), "{message}");
    assert!(
        message.contains("pgbouncer=true") && message.contains("Behind PgBouncer"),
        "{message}"
    );
    assert!(started.elapsed() < Duration::from_secs(5), "{message}");

    // An option value it does not take, before any connection.
    let error = Store::open(&format!("{url}?pgbouncer=maybe"))
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(error, StoreError::UnsupportedUrl { .. }),
        "{message}"
    );
    assert!(message.contains("pgbouncer=maybe"), "{message}");
}

/// A pooler told to ignore sqlx's startup parameters, but not named in the
/// URL: the named statements sqlx caches are not where it left them (one
/// server connection shared by every client), and the failure names the
/// option instead of being retried.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_prepared_statement_trap_names_the_option() {
    use skillhost_tests::pgbouncer::{Bouncer, Config};
    let direct = skillhost_tests::pg::fresh_database().await;
    let name = direct.rsplit('/').next().unwrap().to_owned();
    let bouncer = Bouncer::start(
        &skillhost_tests::pg::server_url(),
        Config {
            pool_size: 1,
            ignore_startup_parameters: "extra_float_digits",
            ..Config::default()
        },
    );
    let url = bouncer.url_without_option(&name);
    let outcome = async {
        let store = Store::open(&url).await?;
        for i in 0..20 {
            store
                .create_run(&new_run(&format!("r{i}"), json!({})))
                .await?;
            store.run(&format!("r{i}")).await?;
        }
        Ok::<_, StoreError>(())
    }
    .await;
    let error = outcome.expect_err("named statements cannot survive transaction pooling");
    let message = error.to_string();
    assert!(!error.is_transient(), "{message}");
    assert!(message.contains("pgbouncer=true"), "{message}");

    // The same pooler with the option: works.
    let store = Store::open(&bouncer.url(&name)).await.unwrap();
    for i in 0..20 {
        store
            .create_run(&new_run(&format!("p{i}"), json!({})))
            .await
            .unwrap();
        assert!(store.run(&format!("p{i}")).await.unwrap().is_some());
    }
}

/// A pooler in statement pooling allows no transaction: refused, naming
/// the pool mode the store needs.
#[tokio::test]
async fn pgbouncer_in_statement_pooling_is_refused_naming_the_pool_mode() {
    use skillhost_tests::pgbouncer::{Bouncer, Config};
    let direct = skillhost_tests::pg::fresh_database().await;
    let name = direct.rsplit('/').next().unwrap().to_owned();
    let bouncer = Bouncer::start(
        &skillhost_tests::pg::server_url(),
        Config {
            pool_mode: "statement",
            ..Config::default()
        },
    );
    let error = Store::open(&bouncer.url(&name)).await.unwrap_err();
    let message = error.to_string();
    assert!(!error.is_transient(), "{message}");
    assert!(message.contains("pool_mode = transaction"), "{message}");
}

/// `--durability normal` behind the pooler: `synchronous_commit = off`,
/// which the pooler refuses as a startup parameter (as it refuses every
/// one it does not know: a plain sqlx client is turned away) and would not
/// keep as a session setting, goes with each transaction instead, and the
/// store opens, writes and reads; the server's sessions keep its default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_durability_normal_sets_synchronous_commit_per_transaction() {
    let pooled = skillhost_tests::pgbouncer::fresh_database().await;
    let plain = PgConnection::connect(&pooled.url.replace("?pgbouncer=true", "")).await;
    let refused = plain.expect_err("PgBouncer refuses sqlx's startup parameters");
    assert!(
        refused
            .to_string()
            .contains("unsupported startup parameter"),
        "{refused}"
    );
    let store = Store::open_with(
        &pooled.url,
        skillhost_store::StoreOptions {
            sync: skillhost_store::SyncMode::Normal,
        },
    )
    .await
    .unwrap();
    store.create_run(&new_run("r", json!({}))).await.unwrap();
    assert!(store.run("r").await.unwrap().is_some());
    let mut conn = PgConnection::connect(&pooled.direct).await.unwrap();
    let setting: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(setting, "on");
}
