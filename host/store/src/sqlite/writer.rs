//! The one connection a SQLite store handle writes through, driven on the
//! calling thread.
//!
//! SQLite lets one connection write at a time, so writing through a pool
//! gains nothing and costs a lot: in WAL mode a connection drops its page
//! cache whenever another connection has committed, so pooled writers that
//! take turns re-read every page they touch, and each connection prepares
//! every statement again. Every write of a handle therefore goes through this
//! connection, in process order (a tokio mutex); other processes are kept out
//! by SQLite's write lock, taken up front with `BEGIN IMMEDIATE`. Reads use
//! the handle's sqlx pool and leave this connection's cache alone.
//!
//! The writer is a rusqlite connection called directly, not an sqlx one.
//! sqlx runs each SQLite connection on its own thread and hands every
//! statement batch over a channel: two thread wake-ups per round trip, about
//! 27 µs on this class of machine, twice per checkpoint, which was more than
//! SQLite's own work for a small commit. Here a transaction is one
//! synchronous call of `work` on the async task's thread: a checkpoint is a
//! few page writes into the WAL (SQLite syncs nothing: the connection runs
//! with `synchronous = NORMAL`), so it blocks the thread for about as long as
//! a hand-over would have. With [`SyncMode::Full`] the commit then waits,
//! outside the connection, for an `fdatasync` of the WAL that covers it
//! (`wal.rs`: one sync for every commit waiting, so concurrent runs share
//! it), before it is acknowledged. What could block for long, waiting for another process's
//! write lock, is not done on the thread: the connection's busy timeout is
//! zero and a busy `BEGIN IMMEDIATE` is retried after an async sleep, up to
//! the store's busy timeout.
//!
//! A transaction cannot outlive `work`: rusqlite's `Transaction` rolls back
//! when dropped, so an error (or a panic) inside `work` leaves nothing
//! written, and no transaction is ever open across an `.await`.
//!
//! Checkpoints (copying the WAL back into the database file, with an fsync of
//! each) are not done by the commit that happens to fill the WAL, as SQLite
//! does by default: that commit would pay for a thousand pages of earlier
//! ones. A checkpointer thread with its own connection runs a PASSIVE
//! checkpoint (it never blocks the writer) every [`CHECKPOINT_EVERY`]
//! commits. The writer keeps SQLite's automatic checkpoint only as a backstop,
//! at [`BACKSTOP_PAGES`], should the thread fall that far behind.
//!
//! With [`SyncMode::Full`] the writer also follows each of the thread's
//! checkpoints with a PASSIVE checkpoint of its own, on its next commit: it
//! copies the few frames committed while the thread's checkpoint ran, so the
//! whole WAL is in the database file and SQLite starts the WAL over from its
//! beginning on the next write. The WAL is then overwritten in place, which
//! an `fdatasync` writes without the file's size or block map; left to the
//! thread alone, commits arriving while it runs keep the WAL from ever being
//! wholly copied, and it grows by appending, at about twice the cost per
//! node (measured: docs/contributing.md, "SQLite with an fsync per
//! checkpoint").

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, Transaction, TransactionBehavior};
use tokio::sync::Mutex;

use super::wal::{WalSync, start_syncer};
use crate::SyncMode;
use crate::error::{DatabaseFailure, FailureKind, StoreError};

/// Statements the writer keeps prepared (every write statement of the store
/// fits, with room to spare).
const STATEMENT_CACHE: usize = 64;

/// Commits between two checkpoints of the checkpointer thread (a step commit
/// writes about eight pages).
const CHECKPOINT_EVERY: u64 = 64;

/// WAL pages at which the writer checkpoints itself (SQLite's default is
/// 1,000): only if the checkpointer thread cannot keep up.
const BACKSTOP_PAGES: u32 = 8_000;

/// The writer connection of one store handle (shared by its clones).
#[derive(Debug, Clone)]
pub(super) struct Writer {
    /// None once closed.
    slot: Arc<Mutex<Option<Slot>>>,
    /// Checkpoints the checkpointer thread has completed.
    checkpoints: Arc<AtomicU64>,
    /// With [`SyncMode::Full`]: the WAL a commit is synced through before it
    /// is acknowledged (see `wal`). None: SQLite syncs (or not) itself.
    wal: Option<Arc<WalSync>>,
    /// Display URL, for messages.
    db: Arc<str>,
    /// How long a write waits for another process's write lock.
    busy_timeout: Duration,
}

#[derive(Debug)]
struct Slot {
    conn: Connection,
    /// Commits since the checkpointer was last asked to run.
    commits: u64,
    /// Asks the checkpointer thread to run; dropping it stops the thread.
    checkpointer: Option<SyncSender<()>>,
    /// The checkpointer thread's count (shared with the Writer).
    checkpoints: Arc<AtomicU64>,
    /// Its checkpoints this connection has followed with the WAL's tail.
    followed: u64,
    /// Whether to follow them: with a WAL synced by `wal`, so that the WAL
    /// is reused in place rather than grown (see `follow_checkpoint`).
    follow: bool,
    /// Asks the WAL's syncer thread to sync ([`Writer::write_ahead`]);
    /// started on the first request; dropping it stops the thread.
    syncer: Option<SyncSender<()>>,
}

impl Writer {
    /// The WAL syncs this writer made for `--durability full` commits, and
    /// the time spent in them; None when SQLite syncs (or not) itself.
    pub fn wal_syncs(&self) -> Option<crate::WalSyncs> {
        self.wal.as_ref().map(|wal| wal.totals())
    }

    /// Opens the writer on a database that exists and is migrated.
    pub fn open(
        path: &Path,
        db: &str,
        sync: SyncMode,
        busy_timeout: Duration,
    ) -> Result<Writer, StoreError> {
        let error = |source, action: &str| sqlite_error(db, source, action);
        let conn = connect(path).map_err(|e| error(e, "opening the writer connection"))?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let wal = match sync {
            SyncMode::Full => open_wal(&conn, db),
            SyncMode::Normal => None,
        };
        // The journal mode is the file's (the opening connection set WAL);
        // these are the connection's own. With a WAL to sync, SQLite's
        // commits need not sync.
        let sync = match (sync, &wal) {
            (SyncMode::Full, None) => "FULL",
            (SyncMode::Full, Some(_)) | (SyncMode::Normal, _) => "NORMAL",
        };
        conn.execute_batch(&format!(
            "PRAGMA synchronous = {sync}; PRAGMA foreign_keys = ON; PRAGMA busy_timeout = 0; \
             PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES};"
        ))
        .map_err(|e| error(e, "configuring the writer connection"))?;
        let checkpoints = Arc::new(AtomicU64::new(0));
        // Without the thread the backstop still checkpoints: a failure here
        // costs speed, not data, so it is logged rather than fatal.
        let checkpointer = match start_checkpointer(path.to_owned(), sync, checkpoints.clone()) {
            Ok(sender) => Some(sender),
            Err(e) => {
                tracing::warn!(db, error = %e, "no checkpointer thread; the writer will checkpoint");
                None
            }
        };
        Ok(Writer {
            slot: Arc::new(Mutex::new(Some(Slot {
                conn,
                commits: 0,
                checkpointer,
                checkpoints: checkpoints.clone(),
                followed: 0,
                follow: wal.is_some(),
                syncer: None,
            }))),
            checkpoints,
            wal: wal.map(Arc::new),
            db: db.into(),
            busy_timeout,
        })
    }

    /// Checkpoints the checkpointer thread has completed so far (not counting
    /// ones that found a lock taken).
    #[cfg(test)]
    fn checkpoints(&self) -> u64 {
        self.checkpoints.load(Ordering::Relaxed)
    }

    /// Runs `work` in a write transaction (`BEGIN IMMEDIATE` … `COMMIT`) and
    /// commits if it returns Ok; an error rolls everything back. While
    /// another process holds the write lock, waits (asynchronously) up to
    /// the busy timeout, then fails with SQLite's "database is locked".
    /// `work` may run more than once: it is retried whole if SQLite reports
    /// the database busy inside it.
    pub async fn write<T>(
        &self,
        action: &str,
        work: impl FnMut(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let (value, unsynced) = self.commit(action, work, false).await?;
        // Outside the slot: the next write goes ahead while this one
        // syncs, and one sync may cover both.
        if let Some(unsynced) = unsynced {
            unsynced.durable().await?;
        }
        Ok(value)
    }

    /// [`write`](Self::write), returning once the commit is written, before
    /// it is durable: what it returns besides says when it is, and a sync
    /// that covers it has been started on the writer's syncer thread
    /// (`wal.rs`). None: the commit is as durable as this store makes
    /// commits already.
    pub async fn write_ahead<T>(
        &self,
        action: &str,
        work: impl FnMut(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<(T, Option<Unsynced>), StoreError> {
        self.commit(action, work, true).await
    }

    /// [`write`](Self::write)'s transaction and its ticket (with a WAL to
    /// sync); `ahead`: the syncer thread is asked to sync it.
    async fn commit<T>(
        &self,
        action: &str,
        mut work: impl FnMut(&Transaction<'_>) -> Result<T, StoreError>,
        ahead: bool,
    ) -> Result<(T, Option<Unsynced>), StoreError> {
        let deadline = Instant::now() + self.busy_timeout;
        let mut wait = Duration::from_micros(500);
        loop {
            let mut slot = self.slot.lock().await;
            let Some(held) = slot.as_mut() else {
                return Err(StoreError::Closed {
                    db: self.db.to_string(),
                });
            };
            if let Some(failed) = self.wal.as_ref().and_then(|wal| wal.failed()) {
                return Err(self.unsynced(action, failed));
            }
            let attempt = held
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(|source| self.error(source, action))
                .and_then(|tx| {
                    let value = work(&tx)?;
                    tx.commit().map_err(|source| self.error(source, action))?;
                    Ok(value)
                });
            match attempt {
                Ok(value) => {
                    held.committed();
                    // Taken while the slot is held: the commit is in the WAL.
                    let unsynced = self.wal.as_ref().map(|wal| {
                        let ticket = wal.ticket();
                        if ahead {
                            held.sync_ahead(wal);
                        }
                        Unsynced {
                            wal: wal.clone(),
                            ticket,
                            db: self.db.clone(),
                            action: action.into(),
                        }
                    });
                    return Ok((value, unsynced));
                }
                Err(error) if is_busy(&error) && Instant::now() < deadline => {
                    drop(slot);
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_millis(50));
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// The error of a statement of this connection.
    pub fn error(&self, source: rusqlite::Error, action: &str) -> StoreError {
        sqlite_error(&self.db, source, action)
    }

    /// A write whose WAL sync failed (or that follows one that did).
    fn unsynced(&self, action: &str, failed: String) -> StoreError {
        unsynced_error(&self.db, action, failed)
    }

    /// Waits for the write in flight, if any, and closes the connection;
    /// later writes fail with [`StoreError::Closed`].
    pub async fn close(&self) {
        let held = self.slot.lock().await.take();
        if let Some(held) = held {
            tracing::debug!(
                db = %self.db,
                checkpoints = self.checkpoints.load(Ordering::Relaxed),
                "closing the writer; the checkpointer thread stops"
            );
            // Dropping the sender stops the checkpointer thread.
            let _ = held.conn.close();
        }
    }
}

/// A commit written into the WAL and not known to be durable yet.
#[derive(Debug, Clone)]
pub(crate) struct Unsynced {
    wal: Arc<WalSync>,
    ticket: u64,
    db: Arc<str>,
    action: Arc<str>,
}

impl Unsynced {
    /// Whether the commit is on stable storage already.
    pub fn is_durable(&self) -> bool {
        self.wal.is_durable(self.ticket)
    }

    /// Returns once the commit is on stable storage; Err if the sync that
    /// was to make it so failed.
    pub async fn durable(&self) -> Result<(), StoreError> {
        self.wal
            .durable(self.ticket)
            .await
            .map_err(|failed| unsynced_error(&self.db, &self.action, failed))
    }
}

/// A write whose WAL sync failed (or that follows one that did).
fn unsynced_error(db: &str, action: &str, failed: String) -> StoreError {
    StoreError::Database {
        db: db.to_string(),
        action: action.to_owned(),
        source: DatabaseFailure::unsynced(failed),
    }
}

impl Slot {
    /// Asks the syncer thread to sync what is written, starting it on the
    /// first request. Without it (it could not be started, or stopped), the
    /// commit's waiter syncs itself (`WalSync::durable`).
    fn sync_ahead(&mut self, wal: &Arc<WalSync>) {
        if self.syncer.is_none() {
            match start_syncer(wal.clone()) {
                Ok(sender) => self.syncer = Some(sender),
                Err(e) => {
                    tracing::warn!(error = %e, "no WAL syncer thread; commits sync when awaited");
                    return;
                }
            }
        }
        if let Some(sender) = &self.syncer
            && let Err(TrySendError::Disconnected(())) = sender.try_send(())
        {
            self.syncer = None;
        }
    }

    /// Counts a commit, and every [`CHECKPOINT_EVERY`] asks the checkpointer
    /// to run (if it is still busy with the last request, this one is moot).
    fn committed(&mut self) {
        self.commits += 1;
        let done = self.checkpoints.load(Ordering::Relaxed);
        if self.follow && done != self.followed {
            self.followed = done;
            self.follow_checkpoint();
        }
        if self.commits < CHECKPOINT_EVERY {
            return;
        }
        self.commits = 0;
        if let Some(sender) = &self.checkpointer
            && let Err(TrySendError::Disconnected(())) = sender.try_send(())
        {
            tracing::warn!("the checkpointer thread stopped; the writer will checkpoint");
            self.checkpointer = None;
        }
    }
}

impl Slot {
    /// Copies what the checkpointer thread's last checkpoint left in the
    /// WAL (the commits made while it ran) into the database file, so that
    /// the next write starts the WAL over from its beginning.
    fn follow_checkpoint(&mut self) {
        match self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            }) {
            Ok(counts) => tracing::trace!(?counts, "the WAL's tail checkpointed"),
            Err(error) => tracing::debug!(%error, "checkpointing the WAL's tail"),
        }
    }
}

/// The WAL of the writer connection's database, to sync commits through;
/// None (SQLite then syncs each commit itself) if the database is not in
/// WAL mode or its WAL cannot be opened.
fn open_wal(conn: &Connection, db: &str) -> Option<WalSync> {
    // A read opens (creating if need be) the WAL of a database in WAL mode.
    let mode = conn
        .query_row("PRAGMA journal_mode", [], |row| row.get::<_, String>(0))
        .and_then(|mode| {
            conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |_| Ok(()))
                .map(|()| mode)
        });
    let path = match (mode, conn.path()) {
        (Ok(mode), Some(path)) if mode.eq_ignore_ascii_case("wal") && !path.is_empty() => {
            PathBuf::from(format!("{path}-wal"))
        }
        (mode, _) => {
            tracing::debug!(db, ?mode, "no WAL to sync: SQLite syncs every commit");
            return None;
        }
    };
    match WalSync::open(&path) {
        Ok(wal) => Some(wal),
        Err(error) => {
            tracing::debug!(db, %error, wal = %path.display(), "cannot open the WAL: SQLite syncs every commit");
            None
        }
    }
}

/// A read-write connection to the database at `path`, for this module's
/// own use on one thread at a time (no SQLite mutex).
fn connect(path: &Path) -> rusqlite::Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    Connection::open_with_flags(path, flags)
}

fn sqlite_error(db: &str, source: rusqlite::Error, action: &str) -> StoreError {
    StoreError::Database {
        db: db.to_owned(),
        action: action.to_owned(),
        source: DatabaseFailure::from_rusqlite(source),
    }
}

/// Starts the checkpointer thread of a writer; it runs until the returned
/// sender is dropped.
fn start_checkpointer(
    path: PathBuf,
    sync: &str,
    checkpoints: Arc<AtomicU64>,
) -> Result<SyncSender<()>, Box<dyn std::error::Error>> {
    let conn = connect(&path)?;
    // A checkpoint syncs (or not) as the writer's commits do.
    conn.execute_batch(&format!("PRAGMA synchronous = {sync};"))?;
    let (sender, requests) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("skillhost-checkpoint".into())
        .spawn(move || checkpoint_on_request(conn, requests, checkpoints))?;
    Ok(sender)
}

/// Tries of one checkpoint request that copied nothing (about 255 ms in all).
const CHECKPOINT_TRIES: u32 = 8;

fn checkpoint_on_request(conn: Connection, requests: Receiver<()>, checkpoints: Arc<AtomicU64>) {
    while requests.recv().is_ok() {
        // PASSIVE copies what no reader still needs and never waits. It can
        // copy nothing and still not report busy (its result's first
        // column): when a reader of the database file alone holds read lock
        // 0, or when this connection could not open the WAL yet (the frame
        // counts are then -1). The counts tell: the WAL's frames, and how
        // many of them are in the database file now. A try that left the
        // file as it was is tried again shortly rather than left to the
        // next request, which a burst of commits that has just ended would
        // never send.
        let mut wait = Duration::from_millis(1);
        for _ in 0..CHECKPOINT_TRIES {
            match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, i64>(1)?,
                    row.get::<_, i64>(2)?,
                ))
            }) {
                Ok((0, frames, copied)) if frames == 0 || (frames > 0 && copied > 0) => {
                    checkpoints.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(_nothing_copied) => {
                    std::thread::sleep(wait);
                    wait *= 2;
                }
                Err(error) => {
                    tracing::debug!(%error, "background WAL checkpoint");
                    break;
                }
            }
        }
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED from the writer: another connection holds
/// the lock this write needs.
pub(super) fn is_busy(error: &StoreError) -> bool {
    matches!(error, StoreError::Database { source, .. } if source.kind() == FailureKind::Busy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::OptionalExtension;

    fn writer(dir: &tempfile::TempDir, busy: Duration) -> Writer {
        let path = dir.path().join("w.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER PRIMARY KEY);")
            .unwrap();
        drop(conn);
        Writer::open(&path, "sqlite://w.db", SyncMode::Normal, busy).unwrap()
    }

    /// Inserts `x` into `t` in a write of its own.
    async fn insert(writer: &Writer, x: i64) -> Result<(), StoreError> {
        writer
            .write("inserting", |tx| {
                tx.execute("INSERT INTO t VALUES (?1)", [x])
                    .map(drop)
                    .map_err(|e| writer.error(e, "inserting"))
            })
            .await
    }

    async fn rows(writer: &Writer) -> i64 {
        writer
            .write("counting", |tx| {
                tx.query_row("SELECT COUNT(*) FROM t", [], |row| row.get(0))
                    .map_err(|e| writer.error(e, "counting"))
            })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn work_that_fails_leaves_nothing_written() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer(&dir, Duration::from_secs(1));
        let failed = writer
            .write("inserting twice", |tx| {
                tx.execute("INSERT INTO t VALUES (1)", [])
                    .and_then(|_| tx.execute("INSERT INTO t VALUES (1)", []))
                    .map_err(|e| writer.error(e, "inserting twice"))
            })
            .await;
        assert!(
            matches!(&failed, Err(StoreError::Database { action, .. }) if action == "inserting twice"),
            "{failed:?}"
        );
        assert_eq!(rows(&writer).await, 0);
        // The connection is usable again: no transaction was left open.
        insert(&writer, 2).await.unwrap();
        assert_eq!(rows(&writer).await, 1);
    }

    #[tokio::test]
    async fn a_write_waits_for_another_connections_lock_then_proceeds() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer(&dir, Duration::from_secs(10));
        let other = Connection::open(dir.path().join("w.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let release = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            other
                .execute_batch("INSERT INTO t VALUES (7); COMMIT")
                .unwrap();
        });
        let started = Instant::now();
        insert(&writer, 8).await.unwrap();
        assert!(started.elapsed() >= Duration::from_millis(90));
        release.join().unwrap();
        assert_eq!(rows(&writer).await, 2);
    }

    #[tokio::test]
    async fn a_lock_held_past_the_busy_timeout_is_a_busy_error() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer(&dir, Duration::from_millis(50));
        let other = Connection::open(dir.path().join("w.db")).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let failed = insert(&writer, 1).await.unwrap_err();
        assert!(is_busy(&failed), "{failed:?}");
        assert!(failed.is_transient());
        assert!(failed.to_string().contains("sqlite://w.db"), "{failed}");
        other.execute_batch("ROLLBACK").unwrap();
        let found: Option<i64> = Connection::open(dir.path().join("w.db"))
            .unwrap()
            .query_row("SELECT x FROM t", [], |row| row.get(0))
            .optional()
            .unwrap();
        assert_eq!(found, None);
    }

    #[tokio::test]
    async fn the_checkpointer_thread_checkpoints_as_commits_go_by() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer(&dir, Duration::from_secs(1));
        for x in 0..CHECKPOINT_EVERY * 3 {
            insert(&writer, x as i64).await.unwrap();
        }
        // The database file itself (read as immutable, which ignores the
        // WAL) holds what was checkpointed, while the writer is still open.
        // The thread works beside the test: the request of a later batch
        // may be the one that copies, so wait for the file, not only for
        // the first checkpoint counted (one of a WAL that was empty then).
        let in_file = || -> i64 {
            Connection::open_with_flags(
                format!("file:{}?immutable=1", dir.path().join("w.db").display()),
                OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI,
            )
            .unwrap()
            .query_row("SELECT COUNT(*) FROM t", [], |row| row.get(0))
            .unwrap()
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while (writer.checkpoints() == 0 || in_file() < CHECKPOINT_EVERY as i64)
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(writer.checkpoints() >= 1);
        assert_eq!(rows(&writer).await, (CHECKPOINT_EVERY * 3) as i64);
        let in_file = in_file();
        assert!(in_file >= CHECKPOINT_EVERY as i64, "{in_file}");
        writer.close().await;
    }

    #[tokio::test]
    async fn a_commit_written_ahead_is_visible_at_once_and_durable_without_a_waiter() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode = WAL; CREATE TABLE t (x INTEGER PRIMARY KEY);")
            .unwrap();
        drop(conn);
        let writer = Writer::open(
            &path,
            "sqlite://w.db",
            SyncMode::Full,
            Duration::from_secs(1),
        )
        .unwrap();
        let mut written = Vec::new();
        for x in 0..4_i64 {
            let ((), unsynced) = writer
                .write_ahead("inserting", |tx| {
                    tx.execute("INSERT INTO t VALUES (?1)", [x])
                        .map(drop)
                        .map_err(|e| writer.error(e, "inserting"))
                })
                .await
                .unwrap();
            written.push(unsynced.expect("a WAL to sync"));
        }
        // Written: another connection reads all four before any is known
        // durable to the writer's caller.
        let read: i64 = Connection::open(&path)
            .unwrap()
            .query_row("SELECT COUNT(*) FROM t", [], |row| row.get(0))
            .unwrap();
        assert_eq!(read, 4);
        // The syncer thread makes them durable with nobody waiting.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !written.iter().all(Unsynced::is_durable) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        assert!(written.iter().all(Unsynced::is_durable));
        let syncs = writer.wal_syncs().unwrap().syncs;
        assert!((1..=4).contains(&syncs), "{syncs} syncs for 4 commits");
        for unsynced in &written {
            unsynced.durable().await.unwrap();
        }
        assert_eq!(writer.wal_syncs().unwrap().syncs, syncs);
        // A plain write still waits for its own sync.
        insert(&writer, 9).await.unwrap();
        assert_eq!(writer.wal_syncs().unwrap().syncs, syncs + 1);
        writer.close().await;
    }

    #[tokio::test]
    async fn a_closed_writer_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let writer = writer(&dir, Duration::from_secs(1));
        writer.close().await;
        let refused = writer.write("counting", |_| Ok(())).await;
        assert!(
            matches!(refused, Err(StoreError::Closed { .. })),
            "{refused:?}"
        );
    }
}
