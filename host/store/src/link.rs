//! Whether the database answers, as the store's own retries see it, and the
//! bounded, jittered backoff they (and a worker's claim loop) wait with.
//!
//! A Postgres store retries a statement that failed for the connection's
//! sake (a failover, a restart: `postgres::PgStore::retrying`). The first
//! such failure marks the store's [`Link`] down; the next statement the
//! server answers marks it up again, and so does a probe (`SELECT 1`) the
//! store runs with backoff while it is down, so the link comes back even
//! when nothing else is asked of the database (a server refusing requests
//! during the outage asks nothing). Both changes are broadcast as
//! [`LinkEvent`]s, so a worker can say the database is unreachable and,
//! later, that it is back and how long it was out, and `host serve` can
//! answer 503 at once instead of holding a request through the outage.
//!
//! Costs nothing on the per-statement path while the database answers: one
//! relaxed atomic load. A SQLite store has no link (a file does not fail
//! over).

use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::broadcast;

use crate::StoreError;

/// A change of whether the database answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkEvent {
    /// A statement failed because the server could not be reached or the
    /// connection broke; the store keeps retrying.
    Unreachable { message: String },
    /// A statement was answered again after an outage of `out_for`.
    Back { out_for: Duration },
}

/// Whether the database answers; cheap to clone, shared by a store's
/// clones.
#[derive(Debug, Clone)]
pub struct Link(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    /// Set while an outage is open (read on every answered statement).
    down: AtomicBool,
    outage: Mutex<Option<Outage>>,
    events: broadcast::Sender<LinkEvent>,
}

#[derive(Debug)]
struct Outage {
    since: Instant,
    message: String,
}

impl Default for Link {
    fn default() -> Self {
        Link(Arc::new(Inner {
            down: AtomicBool::new(false),
            outage: Mutex::new(None),
            events: broadcast::channel(16).0,
        }))
    }
}

impl Link {
    /// A statement failed with `error`: an outage begins if the error says
    /// the server could not be reached and none is open (then true: the
    /// caller starts probing for the server's return).
    pub(crate) fn failed(&self, error: &StoreError) -> bool {
        if !error.is_unreachable() {
            self.answered();
            return false;
        }
        let mut outage = self.0.outage.lock().unwrap();
        let began = outage.is_none();
        if began {
            let message = error.to_string();
            *outage = Some(Outage {
                since: Instant::now(),
                message: message.clone(),
            });
            self.0.down.store(true, Ordering::Release);
            let _ = self.0.events.send(LinkEvent::Unreachable { message });
        }
        began
    }

    /// The server answered a statement: an open outage ends.
    pub(crate) fn answered(&self) {
        if !self.0.down.load(Ordering::Relaxed) {
            return;
        }
        let mut outage = self.0.outage.lock().unwrap();
        if let Some(ended) = outage.take() {
            self.0.down.store(false, Ordering::Release);
            let _ = self.0.events.send(LinkEvent::Back {
                out_for: ended.since.elapsed(),
            });
        }
    }

    /// The open outage, if any: how long it has lasted and the failure
    /// that began it.
    pub fn outage(&self) -> Option<(Duration, String)> {
        if !self.0.down.load(Ordering::Acquire) {
            return None;
        }
        let outage = self.0.outage.lock().unwrap();
        outage
            .as_ref()
            .map(|o| (o.since.elapsed(), o.message.clone()))
    }

    /// The changes from now on (a receiver that fell 16 behind skips the
    /// oldest).
    pub fn subscribe(&self) -> broadcast::Receiver<LinkEvent> {
        self.0.events.subscribe()
    }

    /// Resolves once an outage is open (at once if one is).
    pub async fn down(&self) {
        let mut events = self.subscribe();
        if self.outage().is_some() {
            return;
        }
        loop {
            match events.recv().await {
                Ok(LinkEvent::Unreachable { .. }) => return,
                Ok(LinkEvent::Back { .. }) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    if self.outage().is_some() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
            }
        }
    }
}

/// Delays that double from `first` up to `cap`, each drawn at random from
/// its upper half ("equal jitter"), so that many processes that lost the
/// database at the same moment do not all come back at the same moment.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    next: Duration,
}

impl Backoff {
    pub fn new(first: Duration, cap: Duration) -> Backoff {
        let first = first.min(cap);
        Backoff {
            first,
            cap,
            next: first,
        }
    }

    /// The delay to wait now; the next one doubles (up to the cap). Never
    /// more than the cap, never less than half of the undrawn delay.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (delay * 2).min(self.cap);
        let half = delay / 2;
        let spread = (delay - half).as_nanos() as u64;
        let drawn = if spread == 0 {
            0
        } else {
            random_u64() % (spread + 1)
        };
        half + Duration::from_nanos(drawn)
    }

    /// The largest delay [`next_delay`](Self::next_delay) can return next.
    pub fn peek(&self) -> Duration {
        self.next
    }

    /// Back to the first delay (the database answered).
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A random number for jitter (not for anything secret): std's hasher keys
/// are drawn at random per process and moved on per instance.
fn random_u64() -> u64 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap_with_jitter_in_the_upper_half() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let mut bounds = Vec::new();
        for _ in 0..8 {
            let undrawn = backoff.peek();
            let delay = backoff.next_delay();
            assert!(
                delay >= undrawn / 2 && delay <= undrawn,
                "{delay:?} of {undrawn:?}"
            );
            bounds.push(undrawn.as_millis());
        }
        assert_eq!(bounds, [100, 200, 400, 800, 1000, 1000, 1000, 1000]);
        backoff.reset();
        assert_eq!(backoff.peek(), Duration::from_millis(100));
        let draws: std::collections::HashSet<Duration> = (0..20)
            .map(|_| Backoff::new(Duration::from_secs(1), Duration::from_secs(1)).next_delay())
            .collect();
        assert!(draws.len() > 1, "no jitter: {draws:?}");
    }

    #[test]
    fn an_outage_is_reported_once_and_its_end_with_its_length() {
        let link = Link::default();
        let mut events = link.subscribe();
        let lost = StoreError::Open {
            db: "postgres://x".into(),
            message: "cannot reach the server".into(),
        };
        link.answered();
        assert!(link.failed(&lost));
        assert!(!link.failed(&lost));
        assert!(link.outage().is_some());
        std::thread::sleep(Duration::from_millis(20));
        link.answered();
        link.answered();
        assert!(link.outage().is_none());
        match events.try_recv().unwrap() {
            LinkEvent::Unreachable { message } => assert!(message.contains("cannot reach")),
            other => panic!("{other:?}"),
        }
        match events.try_recv().unwrap() {
            LinkEvent::Back { out_for } => assert!(out_for >= Duration::from_millis(20)),
            other => panic!("{other:?}"),
        }
        assert!(events.try_recv().is_err());
    }
}
