//! A streaming node's tokens, sent on to other processes through the store
//! (`skillhost_store::live`: Postgres' `NOTIFY`), so a `host serve` shows
//! the tokens of a run a `host worker` executes, as it shows its own.
//!
//! An [`Engine`](crate::Engine) whose store relays tokens sends its events
//! through a [`Tee`] of its own sink and a [`TokenRelay`]. The relay wants
//! tokens only (`token`, `tokens_discarded`): the per-node path builds no
//! event for it. Each token is queued, and one task per relay sends the
//! queue a few milliseconds later, in order, packed into notifications of
//! at most [`MAX_PAYLOAD_BYTES`]:
//!
//! ```json
//! {"source": "…", "skipped": 0, "events": [{"event": "token", "run_id": "…", …}, …]}
//! ```
//!
//! `source` names this process, so a server skips the notifications of its
//! own engines, whose tokens it has already. Bounded: at most
//! [`MAX_QUEUED_BYTES`] of tokens wait at once. Past it a token is dropped
//! and counted in the next notification's `skipped`, so a provider or a
//! skill that floods cannot grow this process's memory or the database's
//! notification queue without end. A `tokens_discarded` is never dropped:
//! without it a follower would take a failed attempt's text for the node's.
//! Best effort throughout: a notification that fails is dropped (the run's
//! steps and its journal, not its tokens, are its record). A relay dropped
//! with tokens queued (its engine's run ended, the last tokens a few
//! milliseconds behind its commit) still sends them, then its task ends.
//! And a run does not end before its tokens are sent: `run.rs`'s `drive`
//! awaits [`TokenRelay::flushed`], bounded by [`FLUSH_WAIT`], so a `host
//! run` that exits right after its run does not cut its last tokens off
//! with its async runtime.
//!
//! Must not: block the skill's call on the database (the call only
//! queues), or reorder a relay's tokens.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serde_json::{Value, json};
use skillhost_store::Store;
use skillhost_store::live::MAX_PAYLOAD_BYTES;

use crate::events::{Event, EventSink};

/// How long a token waits for others to share its notification.
const FLUSH_DELAY: Duration = Duration::from_millis(5);

/// The most token text a relay holds at once.
pub const MAX_QUEUED_BYTES: usize = 256 * 1024;

/// The longest a run's end waits for its tokens to be sent: a database
/// that does not answer costs a run at most this.
pub const FLUSH_WAIT: Duration = Duration::from_secs(2);

/// This process's name in the notifications it sends.
pub fn source() -> &'static str {
    static SOURCE: OnceLock<String> = OnceLock::new();
    SOURCE.get_or_init(|| uuid::Uuid::now_v7().to_string())
}

/// Sends a streaming node's tokens to the store's listeners.
pub struct TokenRelay {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    runtime: tokio::runtime::Handle,
    queue: Mutex<Queue>,
    wake: tokio::sync::Notify,
    /// Told whenever the sender has sent what it took.
    idle: tokio::sync::Notify,
    /// The relay is gone: what is queued is sent, then the sender ends.
    closed: std::sync::atomic::AtomicBool,
}

#[derive(Default)]
struct Queue {
    events: Vec<Value>,
    bytes: usize,
    skipped: u64,
    /// Whether the sending task has been started.
    started: bool,
    /// Whether the sender is sending what it took from `events`.
    sending: bool,
}

impl Queue {
    /// Queues `event` of `bytes` of text, unless it is `droppable` and
    /// the queue is full: then it is counted as skipped. Whether it was
    /// queued.
    fn push(&mut self, event: Value, bytes: usize, droppable: bool) -> bool {
        if droppable && self.bytes + bytes > MAX_QUEUED_BYTES {
            self.skipped += 1;
            return false;
        }
        self.bytes += bytes;
        self.events.push(event);
        true
    }
}

impl TokenRelay {
    /// A relay over `store`, when it relays tokens and an async runtime is
    /// at hand to send them from.
    pub fn over(store: &Store) -> Option<TokenRelay> {
        if !store.relays_tokens() {
            return None;
        }
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        Some(TokenRelay {
            inner: Arc::new(Inner {
                store: store.clone(),
                runtime,
                queue: Mutex::new(Queue::default()),
                wake: tokio::sync::Notify::new(),
                idle: tokio::sync::Notify::new(),
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// Resolves once every token queued before the call has been sent (or
    /// its notification failed), or after `bound`: at once when nothing is
    /// queued.
    pub async fn flushed(&self, bound: Duration) {
        let inner = &self.inner;
        let sent = async {
            loop {
                let idle = inner.idle.notified();
                tokio::pin!(idle);
                // Listening before looking, so a send that ends in between
                // is not missed.
                idle.as_mut().enable();
                let done = inner
                    .queue
                    .lock()
                    .map(|q| q.events.is_empty() && !q.sending)
                    .unwrap_or(true);
                if done {
                    return;
                }
                idle.await;
            }
        };
        if tokio::time::timeout(bound, sent).await.is_err() {
            tracing::debug!(
                "a streaming node's last tokens were not relayed within {bound:?}; the run ends without waiting for them"
            );
        }
    }
}

impl EventSink for TokenRelay {
    fn emit(&self, event: &Event) {
        let (bytes, droppable) = match event {
            Event::Token { text, .. } => (text.len(), true),
            Event::TokensDiscarded { .. } => (0, false),
            _ => return,
        };
        let Ok(value) = serde_json::to_value(event) else {
            return;
        };
        let start = {
            let mut queue = self.inner.queue.lock().unwrap_or_else(|p| p.into_inner());
            if !queue.push(value, bytes, droppable) {
                return;
            }
            !std::mem::replace(&mut queue.started, true)
        };
        if start {
            self.inner.runtime.spawn(send_loop(self.inner.clone()));
        }
        self.inner.wake.notify_one();
    }

    /// Only tokens: the engine builds no other event for it.
    fn listening(&self) -> bool {
        false
    }

    fn may_listen(&self) -> bool {
        true
    }

    fn wants_tokens(&self) -> bool {
        true
    }
}

impl Drop for TokenRelay {
    /// The engine is done with it (its run ended): the sender still sends
    /// what is queued (the run's last tokens, likely queued after its
    /// commit), then ends.
    fn drop(&mut self) {
        self.inner
            .closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.inner.wake.notify_one();
    }
}

/// Sends the queue whenever it has something, until the relay is gone and
/// nothing is left to send.
async fn send_loop(relay: Arc<Inner>) {
    loop {
        let empty = relay
            .queue
            .lock()
            .map(|q| q.events.is_empty())
            .unwrap_or(true);
        if empty {
            if relay.closed.load(std::sync::atomic::Ordering::Acquire) {
                return;
            }
            // Woken by a token or the relay's drop; looked at again every
            // second whatever happens.
            let _ = tokio::time::timeout(Duration::from_secs(1), relay.wake.notified()).await;
            continue;
        }
        tokio::time::sleep(FLUSH_DELAY).await;
        let (events, skipped) = {
            let mut queue = relay.queue.lock().unwrap_or_else(|p| p.into_inner());
            queue.bytes = 0;
            queue.sending = true;
            (
                std::mem::take(&mut queue.events),
                std::mem::take(&mut queue.skipped),
            )
        };
        for payload in payloads(events, skipped) {
            if let Err(e) = relay.store.notify_tokens(&payload).await {
                tracing::debug!("a streaming node's tokens were not relayed: {e}");
            }
        }
        relay
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sending = false;
        relay.idle.notify_waiters();
    }
}

/// `events` packed into notifications of at most [`MAX_PAYLOAD_BYTES`],
/// in order; a token too long for one is split over several.
fn payloads(events: Vec<Value>, skipped: u64) -> Vec<String> {
    let envelope = |events: &[Value], skipped: u64| {
        json!({ "source": source(), "skipped": skipped, "events": events }).to_string()
    };
    // The envelope's own bytes, with room for the count.
    let overhead = envelope(&[], u64::MAX).len();
    let budget = MAX_PAYLOAD_BYTES - overhead;
    let mut out = Vec::new();
    let mut batch: Vec<Value> = Vec::new();
    let mut size = 0;
    let mut skipped = Some(skipped);
    let mut flush = |batch: &mut Vec<Value>, size: &mut usize| {
        if !batch.is_empty() {
            out.push(envelope(batch, skipped.take().unwrap_or(0)));
            batch.clear();
            *size = 0;
        }
    };
    for event in events.into_iter().flat_map(|e| split(e, budget)) {
        let len = event.to_string().len() + 1;
        if size + len > budget {
            flush(&mut batch, &mut size);
        }
        size += len;
        batch.push(event);
    }
    flush(&mut batch, &mut size);
    out
}

/// A token event whose JSON is longer than `budget`, as several of the
/// same token with its text in pieces; any other event as it is.
fn split(event: Value, budget: usize) -> Vec<Value> {
    let length = event.to_string().len();
    let Some(text) = event.get("text").and_then(Value::as_str) else {
        return vec![event];
    };
    if length <= budget {
        return vec![event];
    }
    // Escaping can make a character up to six times as long (`\u0001`),
    // so pieces are cut to a sixth of what is left after the rest.
    let rest = length - Value::from(text).to_string().len();
    let piece = (budget.saturating_sub(rest + 2) / 6).max(1);
    let mut pieces = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + piece).min(text.len());
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        if end == start {
            // One character longer than the piece: take it whole.
            end = start + text[start..].chars().next().map_or(1, char::len_utf8);
        }
        let mut part = event.clone();
        part["text"] = Value::from(&text[start..end]);
        pieces.push(part);
        start = end;
    }
    pieces
}

/// Events to several sinks: each gets what it wants (tokens, logs, the
/// rest while it listens).
pub struct Tee(pub Vec<Arc<dyn EventSink>>);

impl EventSink for Tee {
    fn emit(&self, event: &Event) {
        for sink in &self.0 {
            let wanted = match event {
                Event::Token { .. } | Event::TokensDiscarded { .. } => sink.wants_tokens(),
                Event::SkillLog { .. } => sink.wants_logs(),
                _ => sink.listening(),
            };
            if wanted {
                sink.emit(event);
            }
        }
    }

    fn listening(&self) -> bool {
        self.0.iter().any(|s| s.listening())
    }

    fn may_listen(&self) -> bool {
        self.0.iter().any(|s| s.may_listen())
    }

    fn wants_tokens(&self) -> bool {
        self.0.iter().any(|s| s.wants_tokens())
    }

    fn wants_logs(&self) -> bool {
        self.0.iter().any(|s| s.wants_logs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(text: &str) -> Value {
        json!({ "event": "token", "run_id": "r", "node": "n", "attempt": 1, "stream": 0,
                "text": text })
    }

    fn texts(payloads: &[String]) -> String {
        payloads
            .iter()
            .flat_map(|p| {
                let p: Value = serde_json::from_str(p).unwrap();
                p["events"].as_array().unwrap().clone()
            })
            .map(|e| e["text"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn a_full_queue_skips_tokens_and_counts_them_but_keeps_every_discard() {
        let mut queue = Queue::default();
        let chunk = "x".repeat(64 * 1024);
        for _ in 0..4 {
            assert!(queue.push(token(&chunk), chunk.len(), true));
        }
        assert!(!queue.push(token("y"), 1, true));
        assert!(!queue.push(token(&chunk), chunk.len(), true));
        assert_eq!(queue.skipped, 2);
        let discarded = json!({ "event": "tokens_discarded", "run_id": "r", "node": "n",
                                "attempt": 1 });
        assert!(queue.push(discarded, 0, false));
        assert_eq!(queue.events.len(), 5);
        assert_eq!(queue.bytes, MAX_QUEUED_BYTES);
    }

    #[test]
    fn small_tokens_share_one_notification_in_order() {
        let payloads = payloads(vec![token("a"), token("b"), token("c")], 2);
        assert_eq!(payloads.len(), 1);
        let p: Value = serde_json::from_str(&payloads[0]).unwrap();
        assert_eq!(p["skipped"], 2);
        assert_eq!(p["source"], source());
        assert_eq!(texts(&payloads), "abc");
    }

    #[test]
    fn a_token_too_long_for_one_notification_is_split_and_every_piece_fits() {
        // Control characters escape to six bytes each; multi-byte
        // characters must not be cut.
        let long: String = "é\u{1}x€".repeat(5_000);
        let payloads = payloads(vec![token("start "), token(&long), token(" end")], 0);
        assert!(payloads.len() > 1);
        for p in &payloads {
            assert!(p.len() <= MAX_PAYLOAD_BYTES, "{}", p.len());
        }
        assert_eq!(texts(&payloads), format!("start {long} end"));
        // The skipped count is said once, in the first.
        let counts: Vec<u64> = payloads
            .iter()
            .map(|p| {
                serde_json::from_str::<Value>(p).unwrap()["skipped"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert!(counts.iter().all(|c| *c == 0));
    }

    #[test]
    fn many_tokens_fill_several_notifications_each_within_the_limit() {
        let tokens: Vec<Value> = (0..2_000).map(|i| token(&format!("{i} "))).collect();
        let expected: String = (0..2_000).map(|i| format!("{i} ")).collect();
        let payloads = payloads(tokens, 0);
        assert!(payloads.len() > 1);
        assert!(payloads.iter().all(|p| p.len() <= MAX_PAYLOAD_BYTES));
        assert_eq!(texts(&payloads), expected);
    }
}
