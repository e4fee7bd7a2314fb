//! The engine on Postgres: the same run leaves the same history as on
//! SQLite (checkpoints, state hashes, steps), and a run stopped on
//! Postgres resumes to the state of an uninterrupted run.

use serde_json::json;
use skillhost_engine::Event;
use skillhost_store::CheckpointRow;

use crate::{Db, completed, crash, e2e_scenario, load, resume, run};

/// What must not depend on the backend: seq, node, route, state hash.
fn route(checkpoints: &[CheckpointRow]) -> Vec<(u64, String, Vec<String>, String)> {
    checkpoints
        .iter()
        .map(|c| {
            (
                c.seq,
                c.node_id.clone(),
                c.next_nodes.clone(),
                c.state_hash.clone(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_run_on_postgres_leaves_the_history_it_leaves_on_sqlite() {
    let loaded = load(&e2e_scenario("pipeline"));
    let input = json!({ "message": "pg", "items": ["a", "b", "c", "d", "e"] });
    let sqlite = Db::sqlite().await;
    let postgres = Db::postgres().await;
    let on_sqlite = run(Some(sqlite.store.clone()), &loaded, input.clone()).await;
    let on_postgres = run(Some(postgres.store.clone()), &loaded, input).await;
    completed(&on_postgres);
    assert_eq!(on_postgres.state(), on_sqlite.state());

    let (a, b) = (&on_sqlite.outcome.run_id, &on_postgres.outcome.run_id);
    assert_eq!(
        route(&postgres.store.checkpoints(b).await.unwrap()),
        route(&sqlite.store.checkpoints(a).await.unwrap())
    );
    assert_eq!(
        postgres.store.latest_state(b).await.unwrap().unwrap().state,
        on_sqlite.state()
    );
    let steps = |rows: Vec<skillhost_store::StepRow>| {
        rows.into_iter()
            .map(|s| (s.node_id, s.seq, s.status, s.input_hash, s.output_hash))
            .collect::<Vec<_>>()
    };
    assert_eq!(steps(postgres.steps(b).await), steps(sqlite.steps(a).await));
    let items = postgres.store.map_items(b, "fan", 1).await.unwrap();
    assert_eq!(items.len(), 5);
}

#[tokio::test]
async fn a_run_stopped_on_postgres_resumes_to_the_uninterrupted_state() {
    let loaded = load(&e2e_scenario("crash"));
    let reference = Db::sqlite().await;
    let expected = run(Some(reference.store.clone()), &loaded, json!({})).await;
    completed(&expected);

    let db = Db::postgres().await;
    let run_id = crash(&db.url, &loaded, json!({}), |e| {
        matches!(e, Event::MapItemFinished { index: 3, .. })
    })
    .await;
    let ran = resume(db.reopen().await, &loaded, &run_id).await.unwrap();
    completed(&ran);
    let row = db.store.run(&run_id).await.unwrap().unwrap();
    assert_eq!(
        serde_json::to_string(&row.result.unwrap()).unwrap(),
        serde_json::to_string(&expected.state()).unwrap()
    );
    let ok: Vec<String> = db
        .attempts(&run_id)
        .await
        .into_iter()
        .filter(|(_, _, status)| status == "ok")
        .map(|(node, _, _)| node)
        .collect();
    assert_eq!(ok, ["first", "second", "fan", "third"]);
    assert!(
        ran.events
            .iter()
            .any(|e| matches!(e, Event::MapItemFinished { reused: true, .. })),
        "{:?}",
        ran.events
    );
}

/// A token of node `write` of run `r`.
fn token(text: &str) -> Event {
    Event::Token {
        run_id: "r".into(),
        node: "write".into(),
        item: None,
        attempt: 1,
        stream: 0,
        text: text.into(),
        under: Vec::new(),
    }
}

/// A relay's `flushed` resolves only once what was queued before it is
/// sent: a process whose async runtime ends right after (`host run`, when
/// its run ended; `drive` awaits it) loses none of its run's last tokens.
/// Without the wait the runtime's end cancels the sender inside its
/// few-millisecond batching delay, and every token is lost.
#[tokio::test(flavor = "multi_thread")]
async fn tokens_flushed_before_a_runtime_ends_all_reach_a_listener() {
    use skillhost_engine::EventSink;
    use skillhost_engine::relay::TokenRelay;
    let postgres = Db::postgres().await;
    let mut listener = postgres
        .store
        .listen_tokens()
        .await
        .unwrap()
        .expect("a listener");
    let url = postgres.url.clone();
    tokio::task::spawn_blocking(move || {
        // A runtime of its own, as a `host run` has, dropped at the end.
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let store = skillhost_store::Store::open(&url).await.unwrap();
            let relay = TokenRelay::over(&store).expect("Postgres relays tokens");
            // Nothing queued: at once.
            relay.flushed(std::time::Duration::from_secs(60)).await;
            for text in ["one ", "two ", "three"] {
                relay.emit(&token(text));
            }
            relay.flushed(std::time::Duration::from_secs(60)).await;
        });
        drop(runtime);
    })
    .await
    .unwrap();
    let mut texts = String::new();
    while texts != "one two three" {
        let payload = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
            .await
            .unwrap_or_else(|_| panic!("every flushed token sent; heard {texts:?}"))
            .unwrap();
        let payload: serde_json::Value = serde_json::from_str(&payload).unwrap();
        for event in payload["events"].as_array().unwrap() {
            texts.push_str(event["text"].as_str().unwrap());
        }
    }
}

/// A relay dropped as soon as it queued a token (its engine's run ended
/// a few milliseconds after its last token) still sends it: a follower in
/// another process hears the run's last token.
#[tokio::test]
async fn a_dropped_relay_still_sends_what_it_queued() {
    use skillhost_engine::EventSink;
    use skillhost_engine::relay::TokenRelay;
    let postgres = Db::postgres().await;
    let other = postgres.reopen().await;
    let mut listener = other.listen_tokens().await.unwrap().expect("a listener");
    let relay = TokenRelay::over(&postgres.store).expect("Postgres relays tokens");
    relay.emit(&token("last"));
    drop(relay);
    let payload = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
        .await
        .expect("the queued token is sent after the relay is dropped")
        .unwrap();
    let payload: serde_json::Value = serde_json::from_str(&payload).unwrap();
    assert_eq!(payload["events"][0]["text"], "last", "{payload}");
}
