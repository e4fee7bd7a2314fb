//! What is SQLite-only about the store: files (refusing foreign files and
//! non-databases without touching a byte, creating parent directories), WAL
//! mode and sync modes. Everything both backends share is tested against
//! both in `store.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::json;
use skillhost_store::{Store, StoreError, StoreOptions, SyncMode};
use sqlx::{Connection, SqliteConnection};

use skillhost_tests::store_fixtures::{commit, new_run, varied_change};

fn url(path: &Path) -> String {
    format!("sqlite://{}", path.display())
}

async fn raw(path: &Path) -> SqliteConnection {
    SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap()
}

fn files_in(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn a_foreign_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.db");
    let mut conn = SqliteConnection::connect(&format!("sqlite://{}?mode=rwc", path.display()))
        .await
        .unwrap();
    sqlx::query("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO notes (body) VALUES ('keep me')")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let before = files_in(dir.path());

    let error = Store::open(&url(&path)).await.unwrap_err();
    assert!(matches!(error, StoreError::NotOurs { .. }), "{error}");
    let message = error.to_string();
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert!(message.contains("`notes`"), "{message}");
    assert!(message.contains("Pick another path"), "{message}");
    assert_eq!(
        files_in(dir.path()),
        before,
        "the foreign database was touched"
    );

    // Not a database at all.
    let text = dir.path().join("readme.txt");
    std::fs::write(
        &text,
        "this is not sqlite, just some text that is long enough ".repeat(20),
    )
    .unwrap();
    let before = files_in(dir.path());
    let error = Store::open(&url(&text)).await.unwrap_err();
    assert!(matches!(error, StoreError::NotOurs { .. }), "{error}");
    assert!(
        error.to_string().contains("not a SQLite database"),
        "{error}"
    );
    assert_eq!(files_in(dir.path()), before);

    // A directory.
    let error = Store::open(&url(dir.path())).await.unwrap_err();
    assert!(error.to_string().contains("directory"), "{error}");
}

#[tokio::test]
async fn a_newer_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let store = Store::open(&url(&path)).await.unwrap();
    store.create_run(&new_run("r", json!({}))).await.unwrap();
    store.close().await;
    let mut conn = raw(&path).await;
    sqlx::query("UPDATE skillhost_meta SET value = '99' WHERE key = 'schema_version'")
        .execute(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    let before = std::fs::read(&path).unwrap();

    let error = Store::open(&url(&path)).await.unwrap_err();
    assert!(
        matches!(
            error,
            StoreError::TooNew {
                found: 99,
                supported: skillhost_store::SCHEMA_VERSION,
                ..
            }
        ),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("99")
            && message.contains(&format!("version {}", skillhost_store::SCHEMA_VERSION))
            && message.contains("upgrade host"),
        "{message}"
    );
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

#[tokio::test]
async fn reopening_keeps_the_schema_and_urls_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("re.db");
    for _ in 0..2 {
        let store = Store::open(&url(&path)).await.unwrap();
        store.close().await;
    }
    let mut conn = raw(&path).await;
    let version: String =
        sqlx::query_scalar("SELECT value FROM skillhost_meta WHERE key = 'schema_version'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(version, skillhost_store::SCHEMA_VERSION.to_string());
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    conn.close().await.unwrap();

    let error = Store::open("mysql://app:s3cret@localhost/db")
        .await
        .unwrap_err();
    assert!(matches!(error, StoreError::UnsupportedUrl { .. }));
    assert!(!error.to_string().contains("s3cret"), "{error}");

    // Parent directories are created.
    let nested = dir.path().join("nested/deeper/skillhost.db");
    Store::open(&url(&nested)).await.unwrap().close().await;
    assert!(nested.is_file());
}

#[tokio::test]
async fn normal_sync_mode_keeps_the_same_behaviour() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("normal.db");
    let options = StoreOptions {
        sync: SyncMode::Normal,
    };
    let store = Store::open_with(&url(&path), options).await.unwrap();
    let mut state = json!({});
    store
        .create_run(&new_run("n", state.clone()))
        .await
        .unwrap();
    let mut visits = BTreeMap::new();
    let c = commit("n", 1, &mut state, &mut visits, varied_change(1));
    store.commit_step(&c).await.unwrap();
    assert!(store.commit_step(&c).await.unwrap_err().is_conflict());
    store.close().await;
    let store = Store::open(&url(&path)).await.unwrap();
    assert_eq!(store.latest_state("n").await.unwrap().unwrap().state, state);
}

/// With an fsync per commit (the default), the WAL is started over once it
/// has been copied into the database file, so a store that commits for a
/// long time writes into the same WAL pages again (overwriting in place,
/// which a sync does without writing the file's size or block map) instead
/// of appending to the WAL for as long as commits keep coming.
#[tokio::test]
async fn durable_commits_reuse_the_wal_instead_of_growing_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("full.db");
    let store = Store::open(&url(&path)).await.unwrap();
    let wal = dir.path().join("full.db-wal");
    let (runs, steps) = (60, 10);
    for r in 0..runs {
        let id = format!("r{r}");
        let mut state = json!({});
        store
            .create_run(&new_run(&id, state.clone()))
            .await
            .unwrap();
        let mut visits = BTreeMap::new();
        for seq in 1..=steps {
            let c = commit(&id, seq, &mut state, &mut visits, varied_change(seq));
            store.commit_step(&c).await.unwrap();
        }
    }
    // 660 commits of four to five frames of 4 KiB each: about 12 MiB of
    // WAL had none of it been started over.
    let size = std::fs::metadata(&wal).unwrap().len();
    assert!(size < 4 << 20, "the WAL grew to {size} bytes");
    let last = store.latest_state(&format!("r{}", runs - 1)).await.unwrap();
    assert_eq!(last.unwrap().seq, steps);
    store.close().await;
}

/// Schema version 13 clusters a run's steps in one B-tree keyed by (run,
/// id). A version-12 database, whose steps of two runs interleave in a
/// rowid table with an index, is upgraded in place: every step is kept,
/// each run's in its order; a new step of an old run comes after its
/// last; and the table has no rowid and no index of its own left.
#[tokio::test]
async fn steps_of_a_version_12_database_are_clustered_by_run_in_order() {
    use skillhost_store::{SCHEMA_VERSION, StepStatus};
    use skillhost_tests::store_fixtures::ok_step;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v12.db");
    let store = Store::open(&url(&path)).await.unwrap();
    for id in ["a", "b"] {
        store.create_run(&new_run(id, json!({}))).await.unwrap();
    }
    store.close().await;
    // Back to version 12's table, with steps of both runs interleaved.
    let mut conn = raw(&path).await;
    sqlx::raw_sql(
        "DROP TABLE steps; \
         CREATE TABLE steps (id INTEGER PRIMARY KEY, \
             run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE, seq INTEGER, \
             node_id TEXT NOT NULL, attempt INTEGER NOT NULL, status TEXT NOT NULL, \
             started_at INTEGER NOT NULL, duration_us INTEGER NOT NULL, input_hash TEXT, \
             output_hash TEXT, error TEXT, fuel_consumed INTEGER, memory_peak_bytes INTEGER, \
             detail TEXT) STRICT; \
         CREATE INDEX steps_by_run ON steps (run_id, id); \
         INSERT INTO steps (run_id, node_id, attempt, status, started_at, duration_us) VALUES \
             ('a', 'a1', 1, 'failed', 1, 1), ('b', 'b1', 1, 'failed', 2, 1), \
             ('a', 'a2', 1, 'failed', 3, 1), ('b', 'b2', 1, 'failed', 4, 1), \
             ('a', 'a3', 1, 'failed', 5, 1); \
         UPDATE skillhost_meta SET value = '12' WHERE key = 'schema_version';",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();

    let store = Store::open(&url(&path)).await.unwrap();
    let nodes = |steps: Vec<skillhost_store::StepRow>| -> Vec<String> {
        steps.into_iter().map(|s| s.node_id).collect()
    };
    assert_eq!(nodes(store.steps("a").await.unwrap()), ["a1", "a2", "a3"]);
    assert_eq!(nodes(store.steps("b").await.unwrap()), ["b1", "b2"]);
    store
        .record_failed_step(&skillhost_store::StepRow {
            status: StepStatus::Failed,
            ..ok_step("b", "b3")
        })
        .await
        .unwrap();
    assert_eq!(nodes(store.steps("b").await.unwrap()), ["b1", "b2", "b3"]);
    assert_eq!(nodes(store.steps("a").await.unwrap()), ["a1", "a2", "a3"]);
    store.close().await;

    let mut conn = raw(&path).await;
    let (table,): (String,) =
        sqlx::query_as("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'steps'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert!(table.contains("WITHOUT ROWID"), "{table}");
    let (indexes,): (i64,) = sqlx::query_as(
        "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = 'steps' \
         AND sql IS NOT NULL",
    )
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(indexes, 0);
    let (version,): (String,) =
        sqlx::query_as("SELECT value FROM skillhost_meta WHERE key = 'schema_version'")
            .fetch_one(&mut conn)
            .await
            .unwrap();
    assert_eq!(version, SCHEMA_VERSION.to_string());
    // Ids of the copied rows are kept; the new one follows its run's last.
    let ids: Vec<(String, i64)> =
        sqlx::query_as("SELECT node_id, id FROM steps ORDER BY run_id, id")
            .fetch_all(&mut conn)
            .await
            .unwrap();
    assert_eq!(
        ids,
        [
            ("a1".to_string(), 1),
            ("a2".to_string(), 3),
            ("a3".to_string(), 5),
            ("b1".to_string(), 2),
            ("b2".to_string(), 4),
            ("b3".to_string(), 5),
        ]
    );
}
