//! The tokens of task runs, for the `tasks/result` requests that wait on
//! them (`stream.rs`): a streaming node's deltas and a failed attempt's
//! discard, by run id, from wherever the run executes.
//!
//! Two sources, each token from exactly one: the engines of this process
//! (the server's `RunService` reports to [`TaskTokens`], an event sink that
//! wants tokens only), and on Postgres the other processes' (`host mcp`
//! servers, `host worker`s), heard through the store's token relay
//! (`Store::listen_tokens`, the payloads of `skillhost_engine::relay`), one
//! listener per server, started when the first `tasks/result` follows a
//! run. A relayed payload this process sent itself is skipped: its tokens
//! came from its engines already.
//!
//! Bounded: at most [`MAX_FOLLOWERS`] requests follow at once (past it a
//! `tasks/result` waits and answers without tokens), and each follower's
//! backlog holds at most [`BACKLOG_BYTES`] of tokens. A follower whose
//! client reads slower than the tokens come (the response stream is a
//! bounded channel, so a slow client stops the follower) has the tokens
//! past that dropped and counted, and its client is told how many before
//! the next token it hears. A discard is not dropped while its backlog is
//! under twice the bound, since without it a client could take a failed
//! attempt's text for the node's; past that it is counted as well, and the
//! client told that what it heard may include a failed attempt's tokens.
//! The task's result is whole either way.
//!
//! Must not: block an engine's thread (a token is queued, never sent from
//! there), or hand a follower a token of another run.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::follow::token_data;
use serde_json::Value;
use skillhost_engine::{Event, EventSink};
use skillhost_store::{RunRow, Store, StoreError};
use tokio::sync::{Notify, OnceCell};

/// The most `tasks/result` requests one server streams tokens to at once.
pub(crate) const MAX_FOLLOWERS: usize = 256;

/// The most token text one follower holds for its client.
pub(crate) const BACKLOG_BYTES: usize = 64 * 1024;

/// What a queued note costs besides its text (its fields, the queue's slot).
const NOTE_COST: usize = 128;

/// How old a run's row may be for a follower's poll: one read serves all
/// the streams of a run polling within it, so that many streams of one
/// task do not multiply the store's reads.
pub(crate) const SHARED_READ: Duration = Duration::from_millis(100);

/// One thing a follower hears: the `data` of a log message of logger
/// `tokens`, the same fields a followed plain call's has (`follow.rs`).
#[derive(Clone)]
pub(crate) enum Heard {
    /// `{run_id, node, item?, attempt, stream, token}`: info.
    Token(Value),
    /// `{run_id, node, item?, attempt, tokens_discarded, message}`: warning.
    Discarded(Value),
}

impl Heard {
    /// What an event (as the engine serialises it: `{"event": "token", …}`)
    /// is, and the runs whose followers hear it: its own, then those it is
    /// under (a subgraph's child run's tokens are its parents' too). None
    /// for anything else or a malformed one (a relayed payload is anyone's
    /// who can reach the database).
    fn of(event: &Value) -> Option<(Vec<&str>, Heard)> {
        let run_id = event["run_id"].as_str()?;
        let node = event["node"].as_str()?;
        let attempt = event["attempt"].as_u64()?;
        let item = event["item"].as_u64();
        // Bounded and each run once: the payload may be anyone's.
        let runs = skillhost_engine::token_runs(event);
        let under = &runs[1..];
        let heard = match event["event"].as_str()? {
            "token" => {
                let streamed = (
                    event["stream"].as_u64().unwrap_or(0),
                    event["text"].as_str()?,
                );
                Heard::Token(token_data(
                    run_id,
                    under,
                    node,
                    item,
                    attempt,
                    Some(streamed),
                ))
            }
            "tokens_discarded" => {
                Heard::Discarded(token_data(run_id, under, node, item, attempt, None))
            }
            _ => return None,
        };
        Some((runs, heard))
    }

    /// What it costs in a backlog.
    fn cost(&self) -> usize {
        match self {
            Heard::Token(data) => NOTE_COST + data["token"].as_str().map_or(0, str::len),
            Heard::Discarded(_) => NOTE_COST,
        }
    }
}

/// The tokens of the runs this server's `tasks/result` requests follow.
pub(crate) struct TaskTokens {
    store: Store,
    /// The followers of each run, by run id.
    followers: Mutex<HashMap<String, Vec<Arc<Backlog>>>>,
    /// How many there are in all.
    count: AtomicUsize,
    /// Set once the relay's listener has started (or could not).
    relay: OnceCell<()>,
    /// The rows of runs as followers last read them, and when.
    rows: Mutex<HashMap<String, (Instant, Option<RunRow>)>>,
}

/// What one follower has heard and not yet sent on.
pub(crate) struct Backlog {
    queue: Mutex<Queue>,
    wake: Notify,
}

#[derive(Default)]
struct Queue {
    heard: VecDeque<Heard>,
    bytes: usize,
    /// Tokens dropped since the client was last told.
    skipped: u64,
    /// Whether a discard was among them.
    skipped_discard: bool,
}

impl Queue {
    fn push(&mut self, heard: Heard) {
        let cost = heard.cost();
        let bound = match heard {
            Heard::Token(_) => BACKLOG_BYTES,
            Heard::Discarded(_) => 2 * BACKLOG_BYTES,
        };
        if self.bytes + cost > bound {
            self.skipped += 1;
            self.skipped_discard |= matches!(heard, Heard::Discarded(_));
            return;
        }
        self.bytes += cost;
        self.heard.push_back(heard);
    }
}

/// What a follower takes from its backlog.
pub(crate) enum Next {
    /// Tokens were dropped before what comes next (how many; whether a
    /// discard was among them).
    Skipped(u64, bool),
    Heard(Heard),
}

/// One `tasks/result`'s hold on a run's tokens; let go when dropped.
pub(crate) struct Follower {
    tokens: Arc<TaskTokens>,
    run_id: String,
    backlog: Arc<Backlog>,
}

impl TaskTokens {
    pub(crate) fn new(store: Store) -> Arc<TaskTokens> {
        Arc::new(TaskTokens {
            store,
            followers: Mutex::new(HashMap::new()),
            count: AtomicUsize::new(0),
            relay: OnceCell::new(),
            rows: Mutex::new(HashMap::new()),
        })
    }

    /// Run `run_id`'s row, as read less than [`SHARED_READ`] ago by any
    /// follower, else from the store.
    pub(crate) async fn run(&self, run_id: &str) -> Result<Option<RunRow>, StoreError> {
        let rows = || self.rows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, row)) = rows().get(run_id)
            && at.elapsed() < SHARED_READ
        {
            return Ok(row.clone());
        }
        let row = self.store.run(run_id).await?;
        let mut rows = rows();
        rows.retain(|_, (at, _)| at.elapsed() < SHARED_READ);
        rows.insert(run_id.to_string(), (Instant::now(), row.clone()));
        Ok(row)
    }

    /// Follows the tokens of run `run_id` from now on, and (on Postgres)
    /// those other processes relay, once the listener has started. None
    /// when [`MAX_FOLLOWERS`] already follow.
    pub(crate) async fn follow(self: &Arc<Self>, run_id: &str) -> Option<Follower> {
        let backlog = Arc::new(Backlog {
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
        });
        {
            let mut followers = self.lock();
            if self.count.load(Ordering::Relaxed) >= MAX_FOLLOWERS {
                return None;
            }
            self.count.fetch_add(1, Ordering::Relaxed);
            followers
                .entry(run_id.to_string())
                .or_default()
                .push(backlog.clone());
        }
        let follower = Follower {
            tokens: self.clone(),
            run_id: run_id.to_string(),
            backlog,
        };
        self.relay
            .get_or_init(|| start_relay(Arc::downgrade(self), self.store.clone()))
            .await;
        Some(follower)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<Arc<Backlog>>>> {
        self.followers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `event` (its JSON form) for its run's followers.
    fn deliver(&self, event: &Value) {
        let Some((runs, heard)) = Heard::of(event) else {
            return;
        };
        let followers = self.lock();
        for run_id in runs {
            for backlog in followers.get(run_id).into_iter().flatten() {
                backlog.push(heard.clone());
            }
        }
    }

    /// Whether `run_id`, or a run in `under`, has a follower (nothing is
    /// built for a run without).
    fn followed(&self, run_id: &str, under: &[String]) -> bool {
        let followers = self.lock();
        followers.contains_key(run_id) || under.iter().any(|above| followers.contains_key(above))
    }

    /// The events of a payload another process relayed
    /// (`{"source", "skipped", "events"}`), to their runs' followers. One
    /// this process sent is skipped: its engines' tokens came here already.
    fn relayed(&self, payload: &str) {
        let Ok(payload) = serde_json::from_str::<Value>(payload) else {
            return;
        };
        if payload["source"].as_str() == Some(skillhost_engine::relay::source()) {
            return;
        }
        for event in payload["events"].as_array().into_iter().flatten() {
            self.deliver(event);
        }
    }
}

impl Backlog {
    fn push(&self, heard: Heard) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(heard);
        self.wake.notify_one();
    }
}

impl Follower {
    /// Waits until something was queued since the last call.
    pub(crate) async fn changed(&self) {
        self.backlog.wake.notified().await
    }

    /// The next thing to send the client, if any: a note of what was
    /// dropped first.
    pub(crate) fn next(&self) -> Option<Next> {
        let mut queue = self.backlog.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.skipped > 0 {
            let skipped = (
                std::mem::take(&mut queue.skipped),
                std::mem::take(&mut queue.skipped_discard),
            );
            return Some(Next::Skipped(skipped.0, skipped.1));
        }
        let heard = queue.heard.pop_front()?;
        queue.bytes -= heard.cost();
        Some(Next::Heard(heard))
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut followers = self.tokens.lock();
        if let Some(backlogs) = followers.get_mut(&self.run_id) {
            backlogs.retain(|b| !Arc::ptr_eq(b, &self.backlog));
            if backlogs.is_empty() {
                followers.remove(&self.run_id);
            }
        }
        self.tokens.count.fetch_sub(1, Ordering::Relaxed);
    }
}

impl EventSink for TaskTokens {
    fn emit(&self, event: &Event) {
        let (run_id, under) = match event {
            Event::Token { run_id, under, .. } | Event::TokensDiscarded { run_id, under, .. } => {
                (run_id, under)
            }
            _ => return,
        };
        if !self.followed(run_id, under) {
            return;
        }
        if let Ok(event) = serde_json::to_value(event) {
            self.deliver(&event);
        }
    }

    /// Tokens only: the engine builds no other event for it.
    fn listening(&self) -> bool {
        false
    }

    /// A `tasks/result` may start following while a node streams.
    fn may_listen(&self) -> bool {
        true
    }

    fn wants_tokens(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 0
    }
}

/// Starts hearing what other processes relay through `store`, for as long
/// as `tokens` lives: nothing on SQLite. A listener that cannot start (a
/// transaction-pooling PgBouncer) is said in the log once, and tasks then
/// hear the tokens of the runs this process executes only.
async fn start_relay(tokens: Weak<TaskTokens>, store: Store) {
    let mut listener = match store.listen_tokens().await {
        Ok(Some(listener)) => listener,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(
                "host mcp: tasks/result hears the tokens of this process's runs only: {e}"
            );
            return;
        }
    };
    tokio::spawn(async move {
        let mut said_lost = false;
        loop {
            let heard = listener.recv().await;
            let Some(tokens) = tokens.upgrade() else {
                return;
            };
            match heard {
                Ok(payload) => {
                    said_lost = false;
                    tokens.relayed(&payload);
                }
                Err(e) => {
                    if !said_lost {
                        tracing::warn!("host mcp: relayed tokens: {e}");
                        said_lost = true;
                    }
                    drop(tokens);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn tokens() -> (Arc<TaskTokens>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("runs.db").display());
        (TaskTokens::new(Store::open(&url).await.unwrap()), dir)
    }

    fn token(run_id: &str, text: &str) -> Event {
        Event::Token {
            run_id: run_id.into(),
            node: "write".into(),
            item: None,
            attempt: 1,
            stream: 0,
            text: text.into(),
            under: Vec::new(),
        }
    }

    fn discard(run_id: &str) -> Event {
        Event::TokensDiscarded {
            run_id: run_id.into(),
            node: "write".into(),
            item: None,
            attempt: 1,
            under: Vec::new(),
        }
    }

    /// What a follower has, as text: `t:TEXT`, `d` (a discard),
    /// `skipped:N:DISCARD`.
    fn drained(follower: &Follower) -> Vec<String> {
        std::iter::from_fn(|| follower.next())
            .map(|next| match next {
                Next::Heard(Heard::Token(data)) => format!("t:{}", data["token"].as_str().unwrap()),
                Next::Heard(Heard::Discarded(data)) => {
                    assert_eq!(data["tokens_discarded"], true);
                    "d".into()
                }
                Next::Skipped(count, discard) => format!("skipped:{count}:{discard}"),
            })
            .collect()
    }

    #[tokio::test]
    async fn a_follower_hears_its_runs_tokens_only_in_order_and_no_relayed_copy_of_its_own() {
        let (tokens, _dir) = tokens().await;
        assert!(!tokens.wants_tokens(), "no follower, no tokens built");
        let a = tokens.follow("a").await.unwrap();
        let b = tokens.follow("b").await.unwrap();
        assert!(tokens.wants_tokens());
        for event in [token("a", "one "), token("b", "other"), discard("a")] {
            tokens.emit(&event);
        }
        tokens.emit(&token("a", "two"));
        tokens.emit(&token("c", "nobody's"));
        // Relayed: another process's are heard; this process's own, and
        // anything that is not a run's token, are not.
        let relayed = |source: &str, text: &str| {
            json!({ "source": source, "skipped": 0, "events": [
                { "event": "token", "run_id": "a", "node": "n", "attempt": 2, "stream": 0,
                  "text": text },
                { "event": "node_finished", "run_id": "a", "node": "n" },
                { "event": "token", "run_id": "a", "node": "n", "attempt": 2, "text": 7 },
                { "event": "token", "node": "n", "attempt": 2, "text": "no run" },
                "not an event",
            ]})
            .to_string()
        };
        tokens.relayed(&relayed("elsewhere", "three"));
        tokens.relayed(&relayed(skillhost_engine::relay::source(), "twice"));
        for hostile in ["", "not json", "[]", "{\"events\": 5}"] {
            tokens.relayed(hostile);
        }
        assert_eq!(drained(&a), ["t:one ", "d", "t:two", "t:three"]);
        assert_eq!(drained(&b), ["t:other"]);
    }

    /// A task's run that runs a subgraph: the child run's tokens (which
    /// name the runs they are under) reach the task's followers, from
    /// this process's engines and relayed alike, each once, and say which
    /// run they came from. A relayed `under` longer than subgraphs nest is
    /// cut there (a run named past it hears nothing), and one that names a
    /// run twice gives it the token once.
    #[tokio::test]
    async fn a_follower_hears_the_tokens_of_child_runs_under_its_run() {
        let (tokens, _dir) = tokens().await;
        let top = tokens.follow("top").await.unwrap();
        let child = tokens.follow("child").await.unwrap();
        let deep = tokens.follow("deep").await.unwrap();
        let under = |mut event: Event, runs: &[&str]| {
            if let Event::Token { under, .. } = &mut event {
                *under = runs.iter().map(|r| r.to_string()).collect();
            }
            event
        };
        tokens.emit(&under(token("grandchild", "one "), &["child", "top"]));
        tokens.emit(&token("top", "two "));
        let relayed = json!({ "source": "elsewhere", "skipped": 0, "events": [
            { "event": "token", "run_id": "child", "under": ["top"], "node": "n",
              "attempt": 1, "stream": 0, "text": "three" },
            { "event": "tokens_discarded", "run_id": "child", "under": ["top"], "node": "n",
              "attempt": 1 },
        ]});
        tokens.relayed(&relayed.to_string());
        let mut long: Vec<String> = (0..skillhost_scenario::MAX_SUBGRAPH_DEPTH)
            .map(|i| format!("r{i}"))
            .collect();
        long.push("deep".into());
        let hostile = json!({ "source": "elsewhere", "skipped": 0, "events": [
            { "event": "token", "run_id": "x", "under": long, "node": "n", "attempt": 1,
              "stream": 0, "text": "too deep" },
            { "event": "token", "run_id": "x", "under": "top", "node": "n", "attempt": 1,
              "stream": 0, "text": "not a list" },
            { "event": "token", "run_id": "child", "under": ["child", "top", "top"],
              "node": "n", "attempt": 1, "stream": 0, "text": "once" },
        ]});
        tokens.relayed(&hostile.to_string());
        assert_eq!(
            drained(&top),
            ["t:one ", "t:two ", "t:three", "d", "t:once"]
        );
        assert_eq!(drained(&child), ["t:one ", "t:three", "d", "t:once"]);
        assert!(drained(&deep).is_empty());
        // Each says whose it is, and what it is under.
        tokens.emit(&under(token("grandchild", "four"), &["child", "top"]));
        let Some(Next::Heard(Heard::Token(data))) = top.next() else {
            panic!("a token")
        };
        assert_eq!(data["run_id"], "grandchild");
        assert_eq!(data["under"], json!(["child", "top"]));
    }

    #[tokio::test]
    async fn a_full_backlog_drops_tokens_and_counts_them_but_keeps_discards() {
        let (tokens, _dir) = tokens().await;
        let follower = tokens.follow("a").await.unwrap();
        let chunk = "x".repeat(1024);
        let fits = BACKLOG_BYTES / (NOTE_COST + chunk.len());
        for _ in 0..fits + 5 {
            tokens.emit(&token("a", &chunk));
        }
        tokens.emit(&discard("a"));
        let heard = drained(&follower);
        assert_eq!(heard[0], "skipped:5:false");
        assert_eq!(heard.len(), 1 + fits + 1, "{heard:?}");
        assert_eq!(heard.last().unwrap(), "d");
        // Emptied, it takes tokens again, and says nothing more was lost.
        tokens.emit(&token("a", "after"));
        assert_eq!(drained(&follower), ["t:after"]);
        // Past twice the bound even a discard is dropped, and said so.
        for _ in 0..fits {
            tokens.emit(&token("a", &chunk));
        }
        let mut discards = 0;
        while follower.backlog.queue.lock().unwrap().skipped == 0 {
            tokens.emit(&discard("a"));
            discards += 1;
        }
        assert!(discards > 1);
        let heard = drained(&follower);
        assert_eq!(heard[0], "skipped:1:true", "{:?}", &heard[..3]);
    }

    #[tokio::test]
    async fn followers_are_bounded_and_a_dropped_one_lets_go() {
        let (tokens, _dir) = tokens().await;
        let mut held = Vec::new();
        for i in 0..MAX_FOLLOWERS {
            held.push(tokens.follow(&format!("run{}", i % 3)).await.unwrap());
        }
        assert!(tokens.follow("run0").await.is_none());
        held.pop();
        let again = tokens.follow("run0").await.expect("a place was freed");
        drop(again);
        drop(held);
        assert!(!tokens.wants_tokens());
        assert!(tokens.lock().is_empty(), "no run is left followed");
        assert_eq!(tokens.count.load(Ordering::Relaxed), 0);
    }
}
