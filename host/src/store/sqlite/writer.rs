//! The one connection a SQLite store handle writes through.
//!
//! SQLite lets one connection write at a time, so writing through a pool
//! gains nothing and costs a lot: in WAL mode a connection drops its page
//! cache whenever another connection has committed, so pooled writers that
//! take turns re-read every page they touch; each connection prepares every
//! statement again; and a pool checkout pings the connection (one more round
//! trip to its thread) before handing it out. Every write of a handle
//! therefore goes through this connection, in process order (a tokio
//! mutex); other processes are kept out by SQLite's write lock, taken up
//! front with `BEGIN IMMEDIATE`. Reads use the handle's pool and leave this
//! connection's cache alone.
//!
//! Transactions here are SQL (`BEGIN IMMEDIATE` … `COMMIT`) rather than
//! sqlx's `Transaction`, so that a commit can send its `BEGIN` in the same
//! statement batch as its writes: one round trip to the connection's thread
//! instead of two. What sqlx's `Transaction` guarantees still holds: a
//! transaction that ends without COMMIT (an error, a dropped future) is
//! rolled back before the connection is used for anything else.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Executor};
use tokio::sync::{Mutex, OwnedMutexGuard};

/// Starts a write transaction, taking the write lock up front (batches that
/// open their own transaction start with the same statement).
pub(super) const BEGIN: &str = "BEGIN IMMEDIATE";

/// The writer connection of one store handle (shared by its clones).
#[derive(Debug, Clone)]
pub(super) struct Writer {
    /// None once closed.
    slot: Arc<Mutex<Option<Slot>>>,
}

#[derive(Debug)]
struct Slot {
    conn: SqliteConnection,
    /// A transaction may be open: set before anything that can open one is
    /// sent, cleared once COMMIT or ROLLBACK returned. A stale `true` costs a
    /// ROLLBACK that SQLite answers with "no transaction is active".
    open: bool,
}

impl Writer {
    /// The connection, outside any transaction: for one autocommit statement.
    pub async fn lock(&self) -> Result<WriteGuard, sqlx::Error> {
        let mut slot = self.slot.clone().lock_owned().await;
        match slot.as_mut() {
            None => return Err(sqlx::Error::PoolClosed),
            Some(held) if held.open => rollback(held).await?,
            Some(_) => {}
        }
        Ok(WriteGuard { slot: Some(slot) })
    }

    /// The connection in a new write transaction (`BEGIN IMMEDIATE`).
    pub async fn begin(&self) -> Result<WriteGuard, sqlx::Error> {
        let mut guard = self.lock().await?;
        guard.opening().execute(BEGIN).await?;
        Ok(guard)
    }

    /// Waits for the statement in flight, if any, and closes the connection;
    /// later writes fail with [`sqlx::Error::PoolClosed`].
    pub async fn close(&self) {
        let held = self.slot.lock().await.take();
        if let Some(mut held) = held {
            if held.open {
                let _ = rollback(&mut held).await;
            }
            let _ = held.conn.close().await;
        }
    }
}

impl From<SqliteConnection> for Writer {
    fn from(conn: SqliteConnection) -> Writer {
        Writer {
            slot: Arc::new(Mutex::new(Some(Slot { conn, open: false }))),
        }
    }
}

/// Exclusive use of the writer connection. Dereferences to the connection;
/// dropping it with a transaction open rolls the transaction back (in a task
/// that keeps the connection until it is done).
#[derive(Debug)]
pub(super) struct WriteGuard {
    /// Some until dropped.
    slot: Option<OwnedMutexGuard<Option<Slot>>>,
}

impl WriteGuard {
    fn held(&mut self) -> &mut Slot {
        self.slot
            .as_mut()
            .and_then(|slot| slot.as_mut())
            .expect("a WriteGuard holds an open writer until dropped")
    }

    /// The connection, for a batch that starts with [`BEGIN`]: from here on
    /// the transaction counts as open, so it is rolled back unless
    /// [`commit`](Self::commit) succeeds, even if the batch fails half way.
    pub fn opening(&mut self) -> &mut SqliteConnection {
        let held = self.held();
        held.open = true;
        &mut held.conn
    }

    /// Commits the transaction this guard opened.
    pub async fn commit(mut self) -> Result<(), sqlx::Error> {
        let held = self.held();
        held.conn.execute("COMMIT").await?;
        held.open = false;
        Ok(())
    }
}

impl Deref for WriteGuard {
    type Target = SqliteConnection;

    fn deref(&self) -> &SqliteConnection {
        let slot = self.slot.as_ref().and_then(|slot| slot.as_ref());
        &slot.expect("a WriteGuard holds an open writer").conn
    }
}

impl DerefMut for WriteGuard {
    fn deref_mut(&mut self) -> &mut SqliteConnection {
        &mut self.held().conn
    }
}

impl Drop for WriteGuard {
    fn drop(&mut self) {
        let Some(mut slot) = self.slot.take() else {
            return;
        };
        if !slot.as_ref().is_some_and(|held| held.open) {
            return;
        }
        // Roll back now rather than at the next write, so that the database's
        // write lock is not held meanwhile. Without a runtime (never in
        // practice) the flag makes the next `lock` do it.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Some(held) = slot.as_mut()
                    && let Err(error) = rollback(held).await
                {
                    tracing::warn!(%error, "rolling back an abandoned SQLite write transaction");
                }
            });
        }
    }
}

/// Rolls back whatever transaction may be open on `held`.
async fn rollback(held: &mut Slot) -> Result<(), sqlx::Error> {
    match held.conn.execute("ROLLBACK").await {
        Ok(_) => {}
        // SQLite already ended it (it does on some errors), or it never began.
        Err(sqlx::Error::Database(e)) if e.message().contains("no transaction is active") => {}
        Err(e) => return Err(e),
    }
    held.open = false;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sqlx::sqlite::SqliteConnectOptions;

    async fn writer(dir: &tempfile::TempDir) -> Writer {
        let options = SqliteConnectOptions::new()
            .filename(dir.path().join("w.db"))
            .create_if_missing(true);
        let mut conn = SqliteConnection::connect_with(&options).await.unwrap();
        conn.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
            .await
            .unwrap();
        Writer::from(conn)
    }

    async fn rows(writer: &Writer) -> i64 {
        let mut guard = writer.lock().await.unwrap();
        sqlx::query_scalar("SELECT COUNT(*) FROM t")
            .fetch_one(&mut *guard)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_transaction_dropped_without_commit_is_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer(&dir).await;
        let mut tx = writer.begin().await.unwrap();
        tx.execute("INSERT INTO t VALUES (1)").await.unwrap();
        drop(tx);
        // The next user waits for the rollback and finds no transaction open.
        let mut tx = writer.begin().await.unwrap();
        tx.execute("INSERT INTO t VALUES (2)").await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(rows(&writer).await, 1);
    }

    #[tokio::test]
    async fn a_batch_that_fails_after_its_begin_is_rolled_back() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer(&dir).await;
        let mut tx = writer.lock().await.unwrap();
        let failed = tx
            .opening()
            .execute(concat!(
                "BEGIN IMMEDIATE; ",
                "INSERT INTO t VALUES (1); INSERT INTO t VALUES (1);"
            ))
            .await;
        assert!(failed.is_err());
        drop(tx);
        assert_eq!(rows(&writer).await, 0);
        // A stale flag (nothing open) costs nothing but a refused ROLLBACK.
        let mut guard = writer.lock().await.unwrap();
        guard.opening();
        drop(guard);
        let mut tx = writer.begin().await.unwrap();
        tx.execute("INSERT INTO t VALUES (3)").await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(rows(&writer).await, 1);
    }

    #[tokio::test]
    async fn a_closed_writer_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer(&dir).await;
        writer.close().await;
        assert!(matches!(
            writer.begin().await.err(),
            Some(sqlx::Error::PoolClosed)
        ));
    }
}
