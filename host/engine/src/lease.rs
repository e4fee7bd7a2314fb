//! One runner's hold on one run: the lease service `host worker` and `host
//! resume` share. A [`RunLease`] is a lease taken ([`RunLease::acquire`],
//! which takes over an expired one) or handed over by a claim
//! ([`RunLease::hold`]), a store handle fenced by it, and a heartbeat task
//! renewing it in the background every third of its time to live, so that
//! two renewals in a row may fail before it expires.
//!
//! The heartbeat's one error policy:
//! - a renewal refused because the lease is gone (another runner took the
//!   run over, or the run finished or was released: the store's lease-lost
//!   or conflict errors) marks the lease lost, with the store's message,
//!   and ends the heartbeat: [`RunLease::lost`] resolves and
//!   [`RunLease::lost_message`] says why;
//! - any other failure (a lost connection, a database restarting, a busy
//!   SQLite) is logged as a warning and the renewal is tried again at the
//!   next tick with the lease as last renewed. Either the database is back
//!   before the lease expires and nothing was lost, or another runner takes
//!   the run over after the expiry and the next renewal finds it gone.
//!
//! What to do once the lease is lost is the holder's call: the worker stops
//! running the run at once; `host resume` lets its next write, fenced by the
//! lease, be refused. Either way no write of a lost lease reaches the run.
//!
//! Owns: acquiring, renewing and releasing one run's lease. Must not: run the
//! run, print, or write to the run except through the fenced handle it
//! gives out.

use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use skillhost_store::{Lease, Store, StoreError};

/// How long a lease lives without a heartbeat when nothing else is said
/// (`host resume`; `host worker --lease-ttl`'s default).
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// The shortest time between two renewals, however short the time to live.
const MIN_RENEWAL_INTERVAL: Duration = Duration::from_millis(50);

/// A lease held on one run, renewed in the background until it is released,
/// lost, or dropped (dropping stops the renewals and leaves the lease to
/// expire, or to the finish that already released it).
pub struct RunLease {
    lease: Lease,
    /// The store without the fence, to release through.
    unfenced: Store,
    /// The handle fenced by the lease, for the run's writes.
    store: Store,
    lost: watch::Receiver<Option<String>>,
    heartbeat: JoinHandle<()>,
}

impl RunLease {
    /// Takes the lease on `run_id` for `owner` for `ttl` (taking over an
    /// expired one) and starts renewing it. Refused with
    /// [`StoreError::Leased`], naming the holder and the expiry, while
    /// another owner holds a live lease.
    pub async fn acquire(
        store: &Store,
        run_id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<RunLease, StoreError> {
        let lease = store.acquire_lease(run_id, owner, ttl).await?;
        Ok(RunLease::hold(store, lease, ttl))
    }

    /// Starts renewing `lease`, already taken (by a claim of the run queue),
    /// for `ttl` at a time.
    pub fn hold(store: &Store, lease: Lease, ttl: Duration) -> RunLease {
        let (lost_tx, lost) = watch::channel(None);
        let heartbeat = tokio::spawn(heartbeat(store.clone(), lease.clone(), ttl, lost_tx));
        RunLease {
            store: store.fenced(lease.clone()),
            unfenced: store.clone(),
            lease,
            lost,
            heartbeat,
        }
    }

    /// The lease as taken: its run, owner and generation.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// A store handle whose writes for the run carry this lease: the
    /// database refuses them once the lease changed hands.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Resolves, with the store's message, once a renewal found the lease
    /// gone; pending forever while it holds. Safe to cancel (in `select!`).
    pub async fn lost(&self) -> String {
        let mut lost = self.lost.clone();
        // The message is copied out at once: the watch's read guard must not
        // live across an await, or this future could not move between threads.
        let message = match lost.wait_for(Option::is_some).await {
            Ok(message) => message.clone(),
            Err(_) => None,
        };
        match message {
            Some(message) => message,
            // The heartbeat ended without losing the lease (only when it
            // panicked): there is nothing more to wait for.
            None => std::future::pending().await,
        }
    }

    /// Why the lease was lost, once a renewal found it gone.
    pub fn lost_message(&self) -> Option<String> {
        self.lost.borrow().clone()
    }

    /// Stops renewing and gives the lease back, so that an unfinished run
    /// goes back to the queue at once instead of after the expiry. `Ok(false)`
    /// when there was nothing to give back: the run finished (which releases
    /// its lease) or another runner has it.
    pub async fn release(self) -> Result<bool, StoreError> {
        self.heartbeat.abort();
        self.unfenced.release_lease(&self.lease).await
    }
}

impl Drop for RunLease {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

/// Renews `lease` every third of `ttl` until aborted or the lease is found
/// gone, which it reports on `lost` (the policy in the module docs).
async fn heartbeat(
    store: Store,
    mut lease: Lease,
    ttl: Duration,
    lost: watch::Sender<Option<String>>,
) {
    let every = (ttl / 3).max(MIN_RENEWAL_INTERVAL);
    loop {
        tokio::time::sleep(every).await;
        match store.renew_lease(&lease, ttl).await {
            Ok(renewed) => lease = renewed,
            Err(e) if e.is_lease_lost() || e.is_conflict() => {
                let _ = lost.send(Some(e.to_string()));
                return;
            }
            Err(e) => tracing::warn!("heartbeat of run `{}`: {e}", lease.run_id),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use skillhost_store::{InitialState, NewRun, RunStatus};

    use super::*;

    const SHORT_TTL: Duration = Duration::from_millis(600);

    /// A SQLite store in `dir` holding one queued run, `run-1`.
    async fn store_with_a_queued_run(dir: &std::path::Path) -> Store {
        let url = format!("sqlite://{}", dir.join("lease.db").display());
        let store = Store::open(&url).await.expect("open the store");
        store
            .enqueue_run(&NewRun {
                id: "run-1".into(),
                scenario_name: "lease".into(),
                scenario_path: "lease.toml".into(),
                scenario_digest: "d".repeat(64),
                input: json!({}),
                initial_state: Arc::new(InitialState::new(json!({}))),
                start_node: "n1".into(),
                start_visits: Default::default(),
                provenance: Default::default(),
            })
            .await
            .expect("queue a run");
        store
    }

    fn is_leased(result: &Result<RunLease, StoreError>) -> bool {
        matches!(result, Err(StoreError::Leased { owner, .. }) if owner == "first")
    }

    #[tokio::test]
    async fn a_held_lease_is_renewed_and_keeps_other_runners_out() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_a_queued_run(dir.path()).await;
        let held = RunLease::acquire(&store, "run-1", "first", SHORT_TTL)
            .await
            .expect("the lease of a queued run");
        assert_eq!(held.store().lease(), Some(held.lease()));
        // Three lifetimes later the lease still holds: it was renewed.
        tokio::time::sleep(SHORT_TTL * 3).await;
        let second = RunLease::acquire(&store, "run-1", "second", SHORT_TTL).await;
        assert!(is_leased(&second), "{:?}", second.err());
        assert_eq!(held.lost_message(), None);
        let run = store.run("run-1").await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Running);
        assert!(run.lease_expires_at_ms > Some(held.lease().expires_at_ms));
    }

    #[tokio::test]
    async fn a_lease_taken_over_is_reported_lost_and_fences_its_writes() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_a_queued_run(dir.path()).await;
        let first = RunLease::acquire(&store, "run-1", "first", SHORT_TTL)
            .await
            .unwrap();
        // Another runner gets the run (as after the first one's lease
        // expired): the generation moves on.
        assert!(store.release_lease(first.lease()).await.unwrap());
        let second = RunLease::acquire(&store, "run-1", "second", SHORT_TTL)
            .await
            .unwrap();
        assert!(second.lease().generation > first.lease().generation);

        let message = tokio::time::timeout(SHORT_TTL * 3, first.lost())
            .await
            .expect("the next renewal finds the lease gone");
        assert!(message.contains("lost"), "{message}");
        assert_eq!(first.lost_message(), Some(message));
        let refused = first
            .store()
            .finish_run("run-1", RunStatus::Completed, None, None)
            .await
            .expect_err("a write under the lost lease");
        assert!(refused.is_lease_lost(), "{refused}");
        // The holder now is unaffected.
        assert_eq!(second.lost_message(), None);
        assert!(!first.release().await.unwrap(), "nothing to give back");
        let run = store.run("run-1").await.unwrap().unwrap();
        assert_eq!(run.lease_owner.as_deref(), Some("second"));
    }

    #[tokio::test]
    async fn a_released_lease_gives_the_run_back_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_a_queued_run(dir.path()).await;
        let first = RunLease::acquire(&store, "run-1", "first", DEFAULT_TTL)
            .await
            .unwrap();
        assert!(first.release().await.unwrap());
        let run = store.run("run-1").await.unwrap().unwrap();
        assert_eq!((run.status, run.lease_owner), (RunStatus::Queued, None));
        RunLease::acquire(&store, "run-1", "second", DEFAULT_TTL)
            .await
            .expect("taken at once, long before the first lease would expire");
    }

    #[tokio::test]
    async fn a_dropped_lease_is_no_longer_renewed_and_expires() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_a_queued_run(dir.path()).await;
        let first = RunLease::acquire(&store, "run-1", "first", SHORT_TTL)
            .await
            .unwrap();
        let generation = first.lease().generation;
        drop(first);
        tokio::time::sleep(SHORT_TTL * 2).await;
        let second = RunLease::acquire(&store, "run-1", "second", SHORT_TTL)
            .await
            .expect("the expired lease is taken over");
        assert!(second.lease().generation > generation);
    }
}
