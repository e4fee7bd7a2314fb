//! Server-sent events, polled from the store: a run's live events
//! (`/api/runs/{id}/events`: each step as it is recorded, and the run's
//! status whenever it changes, ending after the run finishes) and the runs
//! list's changes (`/api/events`: a run that appeared or moved). Polling
//! the store, rather than listening to an engine in this process, shows
//! runs that any process writes (`host run` on the same SQLite file, the
//! workers of a Postgres database).
//!
//! A run's stream also carries the tokens of its streaming nodes
//! (`token`, `tokens_discarded`: the engine's events, as `host run
//! --events` prints them) as they come: those of the runs this process
//! executes (its embedded worker, or an answer continued here) from its
//! engines, and on Postgres those other processes relay
//! (`skillhost_engine::relay`, heard by [`hear_relayed_tokens`]). Tokens
//! are not kept in the store: a run another process executes on SQLite
//! shows its steps only, and a relayed token sent while this server was
//! not listening is not heard.
//!
//! Must not: keep a stream going after its client left or the server
//! stopped (a send into a closed channel ends the poller).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::stream;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use skillhost_engine::EventSink;
use skillhost_store::{RunFilter, RunRow};

use crate::Shared;
use crate::api::{find_run, run_summary};
use crate::error::ApiError;

/// How many of the newest runs `/api/events` watches.
pub const WATCHED_RUNS: u32 = 200;

type Sender = mpsc::Sender<Event>;

/// How many tokens a slow client's stream may lag behind before it skips
/// ahead (its run's steps, polled from the store, are never skipped).
const LIVE_BACKLOG: usize = 1024;

/// The tokens of the runs this process executes, as they come: an event
/// sink for its engines, a broadcast for the runs' event streams.
pub struct LiveTokens {
    tx: tokio::sync::broadcast::Sender<Arc<LiveToken>>,
}

/// One `token` or `tokens_discarded` event: its name and JSON form, and
/// whether another process relayed it.
pub struct LiveToken {
    name: &'static str,
    data: Value,
    relayed: bool,
}

impl LiveToken {
    /// Whether it is of run `run_id`, or of a child run under it (a run's
    /// stream carries the tokens of the subgraphs it runs).
    fn of(&self, run_id: &str) -> bool {
        skillhost_engine::is_token_json_of(&self.data, run_id)
    }
}

impl Default for LiveTokens {
    fn default() -> Self {
        LiveTokens {
            tx: tokio::sync::broadcast::channel(LIVE_BACKLOG).0,
        }
    }
}

impl EventSink for LiveTokens {
    /// Only while some run's stream is followed: the engine builds no
    /// event otherwise.
    fn listening(&self) -> bool {
        self.tx.receiver_count() > 0
    }

    /// A client may start following a run while its node streams: the
    /// tokens from then on reach it.
    fn may_listen(&self) -> bool {
        true
    }

    fn emit(&self, event: &skillhost_engine::Event) {
        use skillhost_engine::Event as E;
        let name = match event {
            E::Token { .. } => "token",
            E::TokensDiscarded { .. } => "tokens_discarded",
            _ => return,
        };
        // Nobody following: nothing built.
        if self.tx.receiver_count() == 0 {
            return;
        }
        let Ok(data) = serde_json::to_value(event) else {
            return;
        };
        let _ = self.tx.send(Arc::new(LiveToken {
            name,
            data,
            relayed: false,
        }));
    }
}

impl LiveTokens {
    /// The events of a notification another process relayed
    /// (`skillhost_engine::relay`): `{"source", "skipped", "events"}`. Its
    /// `token` and `tokens_discarded` events go to the runs' streams as
    /// this process's own do; anything else in it is ignored. Gives how
    /// many tokens the sender skipped (its queue was full).
    fn relayed(&self, payload: &str) -> u64 {
        let Ok(payload) = serde_json::from_str::<Value>(payload) else {
            return 0;
        };
        // This process's own engines' tokens came here directly.
        if payload["source"].as_str() == Some(skillhost_engine::relay::source()) {
            return 0;
        }
        let skipped = payload["skipped"].as_u64().unwrap_or(0);
        let Some(events) = payload["events"].as_array() else {
            return skipped;
        };
        for data in events {
            let name = match data["event"].as_str() {
                Some("token") if data["text"].is_string() => "token",
                Some("tokens_discarded") => "tokens_discarded",
                _ => continue,
            };
            if !data["run_id"].is_string() {
                continue;
            }
            if self.tx.receiver_count() == 0 {
                break;
            }
            let _ = self.tx.send(Arc::new(LiveToken {
                name,
                data: data.clone(),
                relayed: true,
            }));
        }
        skipped
    }
}

/// Hears the tokens other processes relay through `store` until `shutdown`,
/// and hands them to `live`. A listener that cannot start (a
/// transaction-pooling PgBouncer) or loses its connection is said in the
/// log; a lost one listens again.
pub(crate) async fn hear_relayed_tokens(
    store: skillhost_store::Store,
    live: Arc<LiveTokens>,
    log: Arc<dyn Fn(&str) + Send + Sync>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let hear = async {
        let mut listener = match store.listen_tokens().await {
            Ok(Some(listener)) => listener,
            Ok(None) => return,
            Err(e) => {
                log(&format!("host serve: {e}"));
                return;
            }
        };
        let mut said_lost = false;
        // Skipped tokens are said at most once a minute, with their count.
        let mut skipped = 0;
        let mut said_skipped: Option<std::time::Instant> = None;
        loop {
            match listener.recv().await {
                Ok(payload) => {
                    said_lost = false;
                    skipped += live.relayed(&payload);
                    if skipped > 0
                        && said_skipped.is_none_or(|t| t.elapsed() >= Duration::from_secs(60))
                    {
                        log(&format!(
                            "host serve: workers skipped {skipped} token(s) of streaming nodes \
                             (a relay's queue was full), so followers missed them; the nodes' \
                             outputs are whole"
                        ));
                        skipped = 0;
                        said_skipped = Some(std::time::Instant::now());
                    }
                }
                Err(e) => {
                    if !said_lost {
                        log(&format!("host serve: {e}"));
                        said_lost = true;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    };
    tokio::select! {
        _ = hear => {}
        _ = shutdown.wait_for(|stop| *stop) => {}
    }
}

fn event(name: &str, data: &Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

/// An SSE response fed by `poller`, which gets the channel's sending end.
fn stream_of<F>(state: &Shared, poller: impl FnOnce(Sender) -> F) -> Response
where
    F: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Event>(64);
    let mut shutdown = state.shutdown.clone();
    let task = poller(tx);
    tokio::spawn(async move {
        tokio::select! {
            _ = task => {}
            _ = shutdown.wait_for(|stop| *stop) => {}
        }
    });
    let events = stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|e| (Ok::<_, Infallible>(e), rx))
    });
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// `GET /api/runs/{id}/events`: `run` (the run's summary) first and on
/// every change, `step` for each step row (those already recorded first),
/// and `end` once the run has finished.
pub(crate) async fn run_events(
    State(state): State<Shared>,
    Path(run_id): Path<String>,
) -> Result<Response, ApiError> {
    let first = find_run(&state, &run_id).await?;
    let poll_state = state.clone();
    Ok(stream_of(&state, move |tx| async move {
        follow_run(poll_state, first, tx).await;
    }))
}

/// After a run that another process executed ended, how long no relayed
/// token of it must come before `end` is sent (the relay sends a few
/// milliseconds after the engine, which may commit the run's end first),
/// and how long that wait lasts at most; as `tasks/result` waits in
/// `host mcp`.
const QUIET: Duration = Duration::from_millis(300);
const QUIET_AT_MOST: Duration = Duration::from_secs(3);

async fn follow_run(state: Shared, mut run: RunRow, tx: Sender) {
    let mut steps_sent = 0usize;
    let mut changed = true;
    let mut live = state.live.tx.subscribe();
    // Whether another process relayed tokens of this run: its last ones
    // may then still be on their way when its end is read.
    let mut relayed = false;
    loop {
        if changed {
            match state.store.steps(&run.id).await {
                Ok(steps) => {
                    for step in steps.iter().skip(steps_sent) {
                        if tx.send(event("step", &json!(step))).await.is_err() {
                            return;
                        }
                    }
                    steps_sent = steps.len().max(steps_sent);
                }
                Err(e) => {
                    let _ = tx
                        .send(event("error", &json!({"error": e.to_string()})))
                        .await;
                    return;
                }
            }
            if tx.send(event("run", &run_summary(&run))).await.is_err() {
                return;
            }
            if run.status.is_finished() {
                let quiet = if relayed { QUIET } else { Duration::ZERO };
                if !send_tokens_until_quiet(&mut live, &run.id, &tx, quiet).await {
                    return;
                }
                let _ = tx.send(event("end", &run_summary(&run))).await;
                return;
            }
        }
        // Until the next poll, the run's tokens as they come.
        let poll = tokio::time::sleep(state.poll);
        tokio::pin!(poll);
        loop {
            tokio::select! {
                _ = &mut poll => break,
                heard = live.recv() => match heard {
                    Ok(token) if token.of(&run.id) => {
                        relayed |= token.relayed;
                        if tx.send(event(token.name, &token.data)).await.is_err() {
                            return;
                        }
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        (&mut poll).await;
                        break;
                    }
                },
            }
        }
        match state.store.run(&run.id).await {
            Ok(Some(now)) => {
                changed = now.status != run.status
                    || now.last_seq != run.last_seq
                    || now.updated_at_ms != run.updated_at_ms;
                run = now;
            }
            // Pruned meanwhile.
            Ok(None) => return,
            Err(e) => {
                let _ = tx
                    .send(event("error", &json!({"error": e.to_string()})))
                    .await;
                return;
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// Sends run `run_id`'s tokens already heard, then those that come until
/// none came for `quiet` (at most [`QUIET_AT_MOST`]); false once the
/// client is gone.
async fn send_tokens_until_quiet(
    live: &mut tokio::sync::broadcast::Receiver<Arc<LiveToken>>,
    run_id: &str,
    tx: &Sender,
    quiet: Duration,
) -> bool {
    let until = tokio::time::Instant::now() + QUIET_AT_MOST;
    loop {
        // What was heard already first: with no `quiet`, that is all.
        let heard = tokio::select! {
            biased;
            heard = live.recv() => heard,
            _ = tokio::time::sleep(quiet) => return true,
        };
        match heard {
            Ok(token) if token.of(run_id) => {
                if tx.send(event(token.name, &token.data)).await.is_err() {
                    return false;
                }
            }
            Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return true,
        }
        if tokio::time::Instant::now() >= until {
            return true;
        }
    }
}

/// `GET /api/events`: `ready` once the poller has seen the runs there
/// are, then `run` (the run's summary) for each run that appears or
/// changes among the newest [`WATCHED_RUNS`].
pub(crate) async fn runs_events(State(state): State<Shared>) -> Response {
    let poll_state = state.clone();
    stream_of(&state, move |tx| async move {
        watch_runs(poll_state, tx).await;
    })
}

async fn watch_runs(state: Shared, tx: Sender) {
    let filter = RunFilter {
        status: None,
        scenario: None,
        before: None,
        limit: WATCHED_RUNS,
    };
    let mut seen: HashMap<String, (String, u64, i64)> = HashMap::new();
    let mut first = true;
    loop {
        let rows = match state.store.list_runs_page(&filter).await {
            Ok(rows) => rows,
            Err(e) => {
                let _ = tx
                    .send(event("error", &json!({"error": e.to_string()})))
                    .await;
                return;
            }
        };
        // Oldest first, so that a client applying them in order ends with
        // the newest on top.
        for run in rows.iter().rev().filter_map(|row| row.as_ref().ok()) {
            let mark = (
                run.status.as_str().to_string(),
                run.last_seq,
                run.updated_at_ms,
            );
            if seen.get(&run.id) == Some(&mark) {
                continue;
            }
            seen.insert(run.id.clone(), mark);
            if !first && tx.send(event("run", &run_summary(run))).await.is_err() {
                return;
            }
        }
        // Forget runs that left the watched window.
        if seen.len() > rows.len() {
            let listed: std::collections::HashSet<&str> = rows
                .iter()
                .filter_map(|row| row.as_ref().ok().map(|run| run.id.as_str()))
                .collect();
            seen.retain(|id, _| listed.contains(id.as_str()));
        }
        if first {
            first = false;
            if tx.send(event("ready", &json!({}))).await.is_err() {
                return;
            }
        }
        tokio::time::sleep(state.poll).await;
        if tx.is_closed() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a listener hears of `payload`: each event's name and run.
    fn heard(payload: &str) -> (u64, Vec<(String, &'static str)>) {
        let live = LiveTokens::default();
        let mut rx = live.tx.subscribe();
        let skipped = live.relayed(payload);
        let mut out = Vec::new();
        while let Ok(token) = rx.try_recv() {
            out.push((
                token.data["run_id"].as_str().unwrap().to_string(),
                token.name,
            ));
        }
        (skipped, out)
    }

    /// Anyone who can connect to the database can notify on the channel:
    /// what is not a relay's payload, or not a token of a run, is dropped,
    /// and this process's own relay is not heard twice.
    #[test]
    fn a_relayed_payload_passes_tokens_and_discards_only() {
        let payload = json!({ "source": "elsewhere", "skipped": 3, "events": [
            { "event": "token", "run_id": "r1", "node": "n", "attempt": 1, "text": "a" },
            { "event": "tokens_discarded", "run_id": "r1", "node": "n", "attempt": 1 },
            { "event": "node_finished", "run_id": "r1", "node": "n" },
            { "event": "token", "run_id": "r2", "text": 7 },
            { "event": "token", "text": "no run" },
            "not an object",
        ]});
        assert_eq!(
            heard(&payload.to_string()),
            (
                3,
                vec![("r1".into(), "token"), ("r1".into(), "tokens_discarded")]
            )
        );
        // A subgraph's child run's token is its parents' too (each run's
        // stream carries the tokens of the subgraphs it runs); only a list
        // of run ids says so.
        let live = LiveTokens::default();
        let mut rx = live.tx.subscribe();
        let child = json!({ "source": "elsewhere", "skipped": 0, "events": [
            { "event": "token", "run_id": "child", "under": ["parent", "top"], "text": "a" },
            { "event": "token", "run_id": "other", "under": "top", "text": "b" },
        ]});
        live.relayed(&child.to_string());
        let (a, b) = (rx.try_recv().unwrap(), rx.try_recv().unwrap());
        assert!(a.of("child") && a.of("parent") && a.of("top") && !a.of("other"));
        assert!(b.of("other") && !b.of("top"));
        let own = json!({ "source": skillhost_engine::relay::source(), "skipped": 1,
                          "events": [{ "event": "token", "run_id": "r1", "text": "a" }] });
        assert_eq!(heard(&own.to_string()), (0, vec![]));
        for hostile in ["", "not json", "[]", "{\"events\": 5}", "{\"source\": 1}"] {
            assert_eq!(heard(hostile), (0, vec![]), "{hostile}");
        }
    }
}
