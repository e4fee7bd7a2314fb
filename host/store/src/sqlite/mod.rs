//! The SQLite backend: one database file in WAL mode. With the default
//! [`SyncMode::Full`] a commit that returned survives a crash or power loss
//! (its WAL is synced with `fdatasync`, one sync for the commits waiting
//! together: `wal.rs`); [`SyncMode::Normal`] trades power-loss durability of
//! the last commits for no fsync per commit.
//!
//! Opening never writes to a file that is not ours: an existing file is
//! first read on a plain connection (no journal-mode change, no DDL) and
//! refused if it is foreign or newer; only then is it switched to WAL and
//! migrated. Write transactions start with `BEGIN IMMEDIATE` so they take the
//! write lock up front (a deferred transaction that reads first can fail
//! with SQLITE_BUSY instead of waiting when another process writes).
//!
//! Files by concern: this one opens the store (file checks, connection
//! options, the read pool); `writer.rs` is the one connection every write
//! goes through, with its checkpointer thread; `commit.rs` writes a run's
//! history; `queue.rs` has leases, the queue and retention; `migrate.rs`
//! how migrations run here. Reads and the row codec are shared with
//! Postgres (`store/src/read.rs`, `store/src/codec.rs`).

use std::path::Path;
use std::time::Duration;

use sqlx::Connection;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteRow, SqliteSynchronous,
};

use crate::codec::Codec;
use crate::error::StoreError;
use crate::read::{Param, Reads};
use crate::{StoreOptions, SyncMode};

mod commit;
mod kv;
mod migrate;
mod queue;
mod wait;
mod wal;
mod writer;

pub(crate) use writer::Unsynced;
use writer::Writer;

/// How long a statement waits for another process's write lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections for reads (writes have their own, see `writer`): a few let
/// reads proceed beside each other without one OS thread per concurrent run.
const MAX_CONNECTIONS: u32 = 4;
/// SQLITE_NOTADB: the file is not a SQLite database.
const SQLITE_NOTADB: &str = "26";

#[derive(Debug, Clone)]
pub(crate) struct SqliteStore {
    /// Reads.
    pool: SqlitePool,
    /// Every write (see `writer`).
    writer: Writer,
    /// Display URL, for messages.
    db: String,
}

impl Codec for SqliteStore {
    fn db(&self) -> &str {
        &self.db
    }
}

impl Reads for SqliteStore {
    type Row = SqliteRow;

    /// Reads go through the pool, beside the writer: WAL readers see the
    /// last commit and never wait for a write.
    async fn fetch(
        &self,
        sql: &'static str,
        params: &[Param<'_>],
        action: &str,
    ) -> Result<Vec<SqliteRow>, StoreError> {
        Param::bind_all(params, sqlx::query(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.error(e, action))
    }
}

impl SqliteStore {
    /// See [`Writer::wal_syncs`].
    pub fn wal_syncs(&self) -> Option<crate::WalSyncs> {
        self.writer.wal_syncs()
    }

    /// Opens the file at `path`; unless `create`, a file that does not exist
    /// is [`StoreError::Missing`] and nothing is created.
    pub async fn open(
        path: &Path,
        db: &str,
        store_options: StoreOptions,
        create: bool,
    ) -> Result<SqliteStore, StoreError> {
        // Handles and processes may open the same file at once. SQLite answers
        // some of those races (the switch to WAL, WAL recovery) with
        // SQLITE_BUSY without waiting on the busy timeout, so the whole open
        // is retried for as long as that timeout would have waited.
        let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
        let mut wait = Duration::from_millis(5);
        loop {
            match Self::open_once(path, db, store_options, create).await {
                Ok(store) => return Ok(store),
                Err((_, true)) if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(200));
                }
                Err((error, _)) => return Err(error),
            }
        }
    }

    /// One attempt at [`open`](Self::open); the flag says SQLite was busy.
    async fn open_once(
        path: &Path,
        db: &str,
        store_options: StoreOptions,
        create: bool,
    ) -> Result<SqliteStore, (StoreError, bool)> {
        let open_error = |message: String| {
            (
                StoreError::Open {
                    db: db.to_owned(),
                    message,
                },
                false,
            )
        };
        let classify = |e: sqlx::Error| {
            let busy = is_busy(&e);
            (classify_open_error(e, db), busy)
        };
        let exists = path
            .try_exists()
            .map_err(|e| open_error(format!("cannot look at {}: {e}", path.display())))?;
        if exists {
            if path.is_dir() {
                return Err(open_error(format!(
                    "{} is a directory; give a file path, e.g. sqlite://{}/skillhost.db",
                    path.display(),
                    path.display()
                )));
            }
            // Read-only look before anything that writes (even the WAL switch).
            let plain = SqliteConnectOptions::new()
                .filename(path)
                .create_if_missing(false)
                .busy_timeout(BUSY_TIMEOUT);
            let mut conn = SqliteConnection::connect_with(&plain)
                .await
                .map_err(classify)?;
            let found = crate::migrate::inspect(&mut conn).await;
            let _ = conn.close().await;
            found
                .map_err(classify)?
                .current_version(db)
                .map_err(|e| (e, false))?;
        } else if !create {
            return Err((
                StoreError::Missing {
                    db: db.to_owned(),
                    path: path.display().to_string(),
                },
                false,
            ));
        } else if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|e| {
                open_error(format!("cannot create directory {}: {e}", parent.display()))
            })?;
        }

        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(match store_options.sync {
                SyncMode::Full => SqliteSynchronous::Full,
                SyncMode::Normal => SqliteSynchronous::Normal,
            })
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        // This connection creates the file, switches it to WAL and migrates
        // it; the writer (see `writer`) opens only once all that is done.
        let mut conn = SqliteConnection::connect_with(&options)
            .await
            .map_err(classify)?;
        let migrated = migrate::migrate(&mut conn, db).await;
        let _ = conn.close().await;
        migrated.map_err(|error| (error, false))?;
        let writer = Writer::open(path, db, store_options.sync, BUSY_TIMEOUT).map_err(|error| {
            let busy = writer::is_busy(&error);
            (error, busy)
        })?;

        let pool = SqlitePoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .min_connections(1)
            .connect_with(options)
            .await;
        let pool = match pool {
            Ok(pool) => pool,
            Err(error) => {
                writer.close().await;
                return Err(classify(error));
            }
        };
        Ok(SqliteStore {
            pool,
            writer,
            db: db.to_owned(),
        })
    }

    pub async fn close(&self) {
        self.writer.close().await;
        self.pool.close().await;
    }

    /// The error of a statement on the writer connection.
    fn sq(&self, source: rusqlite::Error, action: &str) -> StoreError {
        self.writer.error(source, action)
    }
}

/// SQLITE_BUSY and its extended codes (recovery, snapshot, timeout).
fn is_busy(error: &sqlx::Error) -> bool {
    matches!(
        error,
        sqlx::Error::Database(e) if matches!(e.code().as_deref(), Some("5" | "261" | "517" | "773"))
    )
}

fn classify_open_error(source: sqlx::Error, db: &str) -> StoreError {
    if let sqlx::Error::Database(e) = &source
        && e.code().as_deref() == Some(SQLITE_NOTADB)
    {
        return StoreError::NotOurs {
            db: db.to_owned(),
            found: "it is not a SQLite database".into(),
        };
    }
    StoreError::Open {
        db: db.to_owned(),
        message: source.to_string(),
    }
}
