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
//! A commit may also be acknowledged later than it returns
//! ([`Writer::write_ahead`](super::writer::Writer::write_ahead)): its caller
//! goes on with work that nothing outside the process sees, and waits for
//! the commit's durability only before something does. Its sync then runs
//! on the writer's syncer thread ([`sync_on_request`]), started by the
//! commit, while the caller works; the thread syncs again at once for any
//! commit written while it synced, so a caller that writes faster than the
//! disk syncs shares each sync between several of its commits.
//!
//! The WAL's file stays the same while the writer connection is open
//! (SQLite deletes it only when the last connection closes, and recreates
//! it only then), so it is opened once, read-only. A failed `fdatasync`
//! leaves the WAL's pages in an unknown state: every waiting commit and
//! every later write fails, naming the file, until the store is opened
//! again (which lets SQLite recover the WAL).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Mutex};
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

impl State {
    /// Claims the next sync, for every ticket taken so far: its target, or
    /// None while another one runs.
    fn begin_sync(&mut self) -> Option<u64> {
        if self.syncing {
            return None;
        }
        self.syncing = true;
        Some(self.taken)
    }
}

/// Starts the syncer thread of `wal`: it syncs what has been written
/// ([`WalSync::sync_written`]) each time it is asked, and stops once the
/// returned sender is dropped.
pub(super) fn start_syncer(wal: Arc<WalSync>) -> std::io::Result<SyncSender<()>> {
    let (sender, requests) = std::sync::mpsc::sync_channel(1);
    std::thread::Builder::new()
        .name("skillhost-wal-sync".into())
        .spawn(move || sync_on_request(&wal, &requests))?;
    Ok(sender)
}

/// The syncer thread's loop: one request may stand for several commits
/// (the channel holds one), and [`WalSync::sync_written`] syncs them all.
fn sync_on_request(wal: &WalSync, requests: &Receiver<()>) {
    while requests.recv().is_ok() {
        wal.sync_written();
    }
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

    /// Syncs done so far, the time spent in them, and the commits written
    /// and made durable.
    pub fn totals(&self) -> crate::WalSyncs {
        let state = self.lock();
        crate::WalSyncs {
            syncs: state.syncs,
            sync_time: state.sync_time,
            commits: state.taken,
            durable: state.durable,
        }
    }

    /// Whether the commit of `ticket` is on stable storage already (a
    /// failed sync: no).
    pub fn is_durable(&self, ticket: u64) -> bool {
        let state = self.lock();
        state.failed.is_none() && state.durable >= ticket
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
                state.begin_sync()
            };
            match target {
                // No await until the state says the sync is over, so a
                // dropped caller cannot leave `syncing` set.
                Some(target) => self.sync(target),
                None => {
                    // The sender lives as long as `self`.
                    let _ = woken.changed().await;
                }
            }
        }
    }

    /// Syncs every commit written and not yet durable, again and again
    /// while more are written meanwhile; returns when none is left, when
    /// another sync is running (which covers them or is followed by one
    /// that does), or when a sync failed. The syncer thread's work.
    fn sync_written(&self) {
        loop {
            let target = {
                let mut state = self.lock();
                if state.failed.is_some() || state.durable >= state.taken {
                    return;
                }
                state.begin_sync()
            };
            match target {
                Some(target) => self.sync(target),
                None => return,
            }
        }
    }

    /// One `fdatasync` that makes every ticket up to `target` durable (or
    /// fails them all); the caller has set `syncing`.
    fn sync(&self, target: u64) {
        crate::failpoint::hit(|| "wal-sync".into());
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
                        "fdatasync of {} failed ({e}): the last commits may not be on disk; \
                         open the store again, which recovers what the WAL holds",
                        self.path.display()
                    ))
                }
            }
        }
        self.synced.send_replace(());
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

    #[tokio::test]
    async fn the_syncer_syncs_every_commit_written_in_one_sync_without_a_waiter() {
        let (_dir, wal) = wal();
        let tickets: Vec<u64> = (0..5).map(|_| wal.ticket()).collect();
        assert!(!wal.is_durable(tickets[0]));
        let syncer = start_syncer(wal.clone()).unwrap();
        syncer.send(()).unwrap();
        // Nobody awaits: the thread syncs by itself, once for all five.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !wal.is_durable(tickets[4]) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(tickets.iter().all(|ticket| wal.is_durable(*ticket)));
        assert_eq!(wal.syncs(), 1);
        // A waiter finds them durable and syncs nothing more.
        wal.durable(tickets[4]).await.unwrap();
        assert_eq!(wal.syncs(), 1);
        // Asked with nothing written since: no sync.
        syncer.send(()).unwrap();
        drop(syncer);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(wal.syncs(), 1);
    }

    #[test]
    fn a_sync_of_the_syncers_that_fails_is_not_durable() {
        let (read, _write) = std::io::pipe().unwrap();
        let fd: std::os::fd::OwnedFd = read.into();
        let wal = WalSync::of(File::from(fd), Path::new("/data/x.db-wal"));
        let ticket = wal.ticket();
        wal.sync_written();
        assert!(!wal.is_durable(ticket));
        assert!(
            wal.failed()
                .is_some_and(|f| f.contains("fdatasync of /data/x.db-wal"))
        );
        // Nothing is tried again once a sync failed.
        wal.sync_written();
        assert_eq!(wal.syncs(), 1);
    }

    #[test]
    fn a_missing_wal_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(WalSync::open(&dir.path().join("none.db-wal")).is_err());
    }
}
