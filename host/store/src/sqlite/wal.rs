//! Durable commits on a SQLite store with [`SyncMode::Full`](crate::SyncMode):
//! an `fdatasync` of the WAL before a commit is acknowledged, one for all
//! the commits that are waiting (group commit).
//!
//! The writer connection commits with `synchronous = NORMAL`: SQLite writes
//! the transaction's frames into the WAL and makes them visible, without a
//! sync. The commit then takes a ticket, and its caller waits until an
//! `fdatasync` that started after the ticket was taken has returned: the
//! first caller to find no sync running starts one, on its own thread, for
//! every ticket taken so far; the others wait for it (or for the next one).
//! A lone run pays one `fdatasync` per commit, as `synchronous = FULL`
//! would; concurrent runs share one. `fdatasync` rather than SQLite's
//! `fsync` (the bundled SQLite is built without `HAVE_FDATASYNC`): the WAL
//! is reused in place (see `writer.rs`), so a sync has data to write and no
//! file size or block map to, and the modification time `fsync` would also
//! write is not needed to read the data back.
//!
//! A commit is visible to other connections from the moment SQLite writes
//! it, before its sync: a reader may see a commit that a power loss then
//! takes away. What is lost is always a suffix of the WAL, so anything that
//! was acknowledged, and everything before it, survives; a process that
//! acted on what it read acknowledges its own write only after a sync that
//! covers what it read.
//!
//! The WAL's file stays the same while the writer connection is open
//! (SQLite deletes it only when the last connection closes, and recreates
//! it only then), so it is opened once, read-only. A failed `fdatasync`
//! leaves the WAL's pages in an unknown state: every waiting commit and
//! every later write fails, naming the file, until the store is opened
//! again (which lets SQLite recover the WAL).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The WAL of one writer connection and its group commits.
#[derive(Debug)]
pub(super) struct WalSync {
    wal: File,
    path: PathBuf,
    state: Mutex<State>,
    /// Bumped after each sync (or failure): wakes the waiting commits.
    synced: watch::Sender<()>,
}

#[derive(Debug, Default)]
struct State {
    /// Tickets taken: commits written into the WAL.
    taken: u64,
    /// Every ticket up to this one is durable.
    durable: u64,
    /// A sync is running.
    syncing: bool,
    /// The sync that failed, if one did.
    failed: Option<String>,
    /// Syncs done, and the time they took (tests count them; the engine's
    /// benchmark times them against a plain file's).
    syncs: u64,
    sync_time: Duration,
}

impl WalSync {
    /// Opens the WAL at `path` (it must exist: the writer connection has
    /// read the database, which opens it).
    pub fn open(path: &Path) -> std::io::Result<WalSync> {
        Ok(WalSync::of(File::open(path)?, path))
    }

    fn of(wal: File, path: &Path) -> WalSync {
        WalSync {
            wal,
            path: path.to_owned(),
            state: Mutex::new(State::default()),
            synced: watch::Sender::new(()),
        }
    }

    /// A commit has been written into the WAL: its ticket for
    /// [`durable`](Self::durable).
    pub fn ticket(&self) -> u64 {
        let mut state = self.lock();
        state.taken += 1;
        state.taken
    }

    /// Why commits cannot be made durable any more, if a sync failed.
    pub fn failed(&self) -> Option<String> {
        self.lock().failed.clone()
    }

    /// Syncs done so far.
    #[cfg(test)]
    pub fn syncs(&self) -> u64 {
        self.lock().syncs
    }

    /// Syncs done so far, and the time spent in them.
    pub fn totals(&self) -> (u64, Duration) {
        let state = self.lock();
        (state.syncs, state.sync_time)
    }

    /// Returns once the commit of `ticket` is on stable storage, syncing
    /// the WAL if no sync that covers it is running; Err if a sync failed.
    pub async fn durable(&self, ticket: u64) -> Result<(), String> {
        // Subscribed before the first look, so that a sync ending between
        // the look and the wait still wakes this one.
        let mut woken = self.synced.subscribe();
        loop {
            let target = {
                let mut state = self.lock();
                if let Some(failed) = &state.failed {
                    return Err(failed.clone());
                }
                if state.durable >= ticket {
                    return Ok(());
                }
                if state.syncing {
                    None
                } else {
                    state.syncing = true;
                    Some(state.taken)
                }
            };
            match target {
                Some(target) => {
                    // No await until the state says the sync is over, so a
                    // dropped caller cannot leave `syncing` set.
                    let started = Instant::now();
                    let synced = self.wal.sync_data();
                    let took = started.elapsed();
                    {
                        let mut state = self.lock();
                        state.syncing = false;
                        state.syncs += 1;
                        state.sync_time += took;
                        match synced {
                            Ok(()) => state.durable = state.durable.max(target),
                            Err(e) => {
                                state.failed = Some(format!(
                                    "fdatasync of {} failed ({e}): the last commits may not be \
                                     on disk; open the store again, which recovers what the \
                                     WAL holds",
                                    self.path.display()
                                ))
                            }
                        }
                    }
                    self.synced.send_replace(());
                }
                None => {
                    // The sender lives as long as `self`.
                    let _ = woken.changed().await;
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is plain counters, consistent after every statement: a
        // panic elsewhere while it was held leaves nothing half-done.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn wal() -> (tempfile::TempDir, Arc<WalSync>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.db-wal");
        std::fs::write(&path, b"frames").unwrap();
        let wal = Arc::new(WalSync::open(&path).unwrap());
        (dir, wal)
    }

    #[tokio::test]
    async fn a_lone_commit_is_synced_once() {
        let (_dir, wal) = wal();
        for expected in 1..=3 {
            let ticket = wal.ticket();
            wal.durable(ticket).await.unwrap();
            assert_eq!(wal.syncs(), expected);
            // Already durable: no second sync.
            wal.durable(ticket).await.unwrap();
            assert_eq!(wal.syncs(), expected);
        }
    }

    #[tokio::test]
    async fn commits_waiting_together_share_a_sync() {
        let (_dir, wal) = wal();
        // Eight commits written before any of them waits: the first to
        // wait syncs for all of them.
        let tickets: Vec<u64> = (0..8).map(|_| wal.ticket()).collect();
        let waits = tickets.into_iter().map(|ticket| {
            let wal = wal.clone();
            tokio::spawn(async move { wal.durable(ticket).await })
        });
        for wait in waits.collect::<Vec<_>>() {
            wait.await.unwrap().unwrap();
        }
        assert_eq!(wal.syncs(), 1);
    }

    #[tokio::test]
    async fn a_failed_sync_fails_the_commits_that_wait_and_every_later_one() {
        // fdatasync of a pipe fails (EINVAL), as one of a file can (EIO).
        let (read, _write) = std::io::pipe().unwrap();
        let fd: std::os::fd::OwnedFd = read.into();
        let wal = WalSync::of(File::from(fd), Path::new("/data/x.db-wal"));
        let first = wal.ticket();
        let failed = wal.durable(first).await.unwrap_err();
        assert!(
            failed.contains("fdatasync of /data/x.db-wal failed")
                && failed.contains("open the store again"),
            "{failed}"
        );
        assert_eq!(wal.failed().as_deref(), Some(failed.as_str()));
        let later = wal.ticket();
        assert_eq!(wal.durable(later).await.unwrap_err(), failed);
        assert_eq!(wal.syncs(), 1);
    }

    #[test]
    fn a_missing_wal_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(WalSync::open(&dir.path().join("none.db-wal")).is_err());
    }
}
