//! The queue's flow control on both backends: idempotency keys (a live key
//! returns its run, an expired one starts anew, racing starts create one
//! run), schedule ticks (one run per tick across racing workers, the last
//! tick read back), and the claim's order and limits (priority, a
//! concurrency key holding a second run until the first ends, a concurrency
//! limit across concurrent claimers on several handles), and waits under
//! those limits (a waiting run does not count; an answered run is claimed
//! by its priority; a timed-out wait comes before queued runs, but within
//! its scenario's limit), and what a metrics scrape reads of them (the
//! queue's depth, its oldest run, the open waits).

use std::time::Duration;

use serde_json::json;
use skillhost_store::{
    Admission, IdempotencyKey, NewWait, QueueStats, RunOptions, RunStatus, ScheduleTick, Store,
    new_run_id,
};
use skillhost_tests::store_fixtures::new_run;

use crate::backends::{Db, Kind};

both!(
    a_live_idempotency_key_returns_its_run_and_an_expired_one_starts_anew,
    racing_starts_with_one_idempotency_key_create_one_run,
    a_schedule_tick_is_queued_once_across_racing_workers,
    claims_take_the_highest_priority_first_then_the_oldest,
    a_concurrency_key_holds_a_second_run_until_the_first_ends,
    a_concurrency_limit_caps_running_runs_across_concurrent_claimers,
    waiting_runs_do_not_count_and_answered_or_timed_out_ones_obey_the_limits,
    queue_stats_count_queued_and_waiting_runs_and_date_the_oldest_queued_one,
);

const TTL: Duration = Duration::from_secs(60);

fn keyed(key: &str, ttl: Duration) -> RunOptions {
    RunOptions {
        idempotency: Some(IdempotencyKey {
            key: key.into(),
            ttl,
        }),
        ..RunOptions::default()
    }
}

/// Claims until nothing is claimable; the ids in claim order.
async fn drain(store: &Store, owner: &str) -> Vec<String> {
    let mut got = Vec::new();
    while let Some((run, _)) = store.claim_run(owner, TTL).await.unwrap() {
        got.push(run.id);
    }
    got
}

async fn a_live_idempotency_key_returns_its_run_and_an_expired_one_starts_anew(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let day = keyed("order-7", Duration::from_secs(86_400));
    assert_eq!(
        store
            .enqueue_run_with(&new_run("first", json!({})), &day)
            .await
            .unwrap(),
        Admission::Created
    );
    // A second submit, and a direct start, with the key: the first run,
    // and nothing written.
    for admission in [
        store
            .enqueue_run_with(&new_run("second", json!({})), &day)
            .await,
        store
            .create_run_with(&new_run("third", json!({})), &day)
            .await,
    ] {
        assert_eq!(
            admission.unwrap(),
            Admission::Existing {
                run_id: "first".into()
            }
        );
    }
    assert!(store.run("second").await.unwrap().is_none());
    assert!(store.run("third").await.unwrap().is_none());
    assert_eq!(db.count("SELECT COUNT(*) FROM runs").await, 1);

    // A key whose time is up holds nothing: the next start takes it over.
    let brief = keyed("brief", Duration::from_millis(1));
    store
        .enqueue_run_with(&new_run("old", json!({})), &brief)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        store
            .create_run_with(&new_run("new", json!({})), &brief)
            .await
            .unwrap(),
        Admission::Created
    );
    assert_eq!(
        store.run("new").await.unwrap().unwrap().status,
        RunStatus::Running
    );
    assert_eq!(
        store
            .enqueue_run_with(&new_run("newer", json!({})), &day)
            .await
            .unwrap(),
        Admission::Existing {
            run_id: "first".into()
        }
    );
    assert_eq!(
        db.count("SELECT COUNT(*) FROM idempotency_keys WHERE key = 'brief' AND run_id = 'new'")
            .await,
        1
    );
    // Pruning drops expired keys; a live one stays.
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.prune_runs(None).await.unwrap();
    assert_eq!(db.count("SELECT COUNT(*) FROM idempotency_keys").await, 1);
    store.close().await;
}

async fn racing_starts_with_one_idempotency_key_create_one_run(kind: Kind) {
    let db = Db::new(kind).await;
    let stores = [db.open().await, db.open().await];
    let starts = (0..12).map(|i| {
        let store = stores[i % 2].clone();
        tokio::spawn(async move {
            let id = format!("racer-{i}");
            let options = keyed("the-one", TTL);
            let admission = if i % 3 == 0 {
                store
                    .create_run_with(&new_run(&id, json!({})), &options)
                    .await
            } else {
                store
                    .enqueue_run_with(&new_run(&id, json!({})), &options)
                    .await
            };
            match admission.unwrap() {
                Admission::Created => id,
                Admission::Existing { run_id } => run_id,
            }
        })
    });
    let mut winners = Vec::new();
    for start in starts {
        winners.push(start.await.unwrap());
    }
    winners.dedup();
    assert_eq!(
        winners.len(),
        1,
        "every start names the one run: {winners:?}"
    );
    assert_eq!(db.count("SELECT COUNT(*) FROM runs").await, 1);
    assert!(stores[0].run(&winners[0]).await.unwrap().is_some());
}

async fn a_schedule_tick_is_queued_once_across_racing_workers(kind: Kind) {
    let db = Db::new(kind).await;
    let stores = [db.open().await, db.open().await];
    assert_eq!(
        stores[0]
            .last_schedule_tick("demo", "hourly")
            .await
            .unwrap(),
        None
    );
    for tick_ms in [3_600_000_i64, 7_200_000] {
        let races = (0..8).map(|i| {
            let store = stores[i % 2].clone();
            tokio::spawn(async move {
                let options = RunOptions {
                    schedule_tick: Some(ScheduleTick {
                        schedule: "hourly".into(),
                        tick_ms,
                    }),
                    ..RunOptions::default()
                };
                store
                    .enqueue_run_with(&new_run(&new_run_id(), json!({})), &options)
                    .await
                    .unwrap()
            })
        });
        let mut created = 0;
        for race in races {
            if race.await.unwrap() == Admission::Created {
                created += 1;
            }
        }
        assert_eq!(created, 1, "tick {tick_ms}");
    }
    assert_eq!(db.count("SELECT COUNT(*) FROM runs").await, 2);
    assert_eq!(
        stores[1]
            .last_schedule_tick("demo", "hourly")
            .await
            .unwrap(),
        Some(7_200_000)
    );
    // Another schedule's, or another scenario's, ticks are their own.
    assert_eq!(
        stores[1]
            .last_schedule_tick("demo", "nightly")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        stores[1]
            .last_schedule_tick("other", "hourly")
            .await
            .unwrap(),
        None
    );
}

async fn claims_take_the_highest_priority_first_then_the_oldest(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    for (id, priority) in [
        ("low", -1),
        ("plain", 0),
        ("high-1", 10),
        ("mid", 5),
        ("high-2", 10),
    ] {
        let options = RunOptions {
            priority,
            ..RunOptions::default()
        };
        store
            .enqueue_run_with(&new_run(id, json!({})), &options)
            .await
            .unwrap();
        // Distinct creation times, so "oldest first" is not a tie.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    assert_eq!(
        drain(&store, "w").await,
        ["high-1", "high-2", "mid", "plain", "low"]
    );
}

async fn a_concurrency_key_holds_a_second_run_until_the_first_ends(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let per_customer = |customer: &str| RunOptions {
        concurrency_key: Some(customer.into()),
        ..RunOptions::default()
    };
    for (id, customer) in [("acme-1", "acme"), ("acme-2", "acme"), ("globex", "globex")] {
        store
            .enqueue_run_with(&new_run(id, json!({})), &per_customer(customer))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    // The second acme run waits; the other customer's does not.
    assert_eq!(drain(&store, "w").await, ["acme-1", "globex"]);
    assert_eq!(
        store.run("acme-2").await.unwrap().unwrap().status,
        RunStatus::Queued
    );
    store
        .finish_run("acme-1", RunStatus::Completed, None, None)
        .await
        .unwrap();
    assert_eq!(drain(&store, "w").await, ["acme-2"]);
}

async fn a_concurrency_limit_caps_running_runs_across_concurrent_claimers(kind: Kind) {
    let db = Db::new(kind).await;
    let stores = [db.open().await, db.open().await, db.open().await];
    let limited = RunOptions {
        concurrency_limit: Some(2),
        ..RunOptions::default()
    };
    for i in 0..6 {
        stores[0]
            .enqueue_run_with(&new_run(&format!("limited-{i}"), json!({})), &limited)
            .await
            .unwrap();
    }
    // Another scenario's runs are not counted against this one's limit.
    let mut other = new_run("other-scenario", json!({}));
    other.scenario_name = "other".into();
    stores[0].enqueue_run(&other).await.unwrap();

    // Twelve claimers over three handles, at once.
    let claims = (0..12).map(|i| {
        let store = stores[i % 3].clone();
        tokio::spawn(async move { drain(&store, &format!("w{i}")).await })
    });
    let mut claimed = Vec::new();
    for claim in claims {
        claimed.extend(claim.await.unwrap());
    }
    claimed.sort();
    assert_eq!(claimed, ["limited-0", "limited-1", "other-scenario"]);
    let running = "SELECT COUNT(*) FROM runs WHERE status = 'running' AND scenario_name = 'demo'";
    assert_eq!(db.count(running).await, 2);

    // One ends: exactly one more starts, the next oldest.
    stores[1]
        .finish_run("limited-0", RunStatus::Completed, None, None)
        .await
        .unwrap();
    let claims = (0..6).map(|i| {
        let store = stores[i % 3].clone();
        tokio::spawn(async move { drain(&store, &format!("v{i}")).await })
    });
    let mut claimed = Vec::new();
    for claim in claims {
        claimed.extend(claim.await.unwrap());
    }
    assert_eq!(claimed, ["limited-2"]);
    assert_eq!(db.count(running).await, 2);
}

/// Puts running run `id` (at checkpoint 0) in `waiting`.
async fn wait_at_start(store: &Store, id: &str, timeout_ms: Option<u64>) {
    store
        .wait_run(&NewWait {
            run_id: id.into(),
            seq: 0,
            node_id: "ask".into(),
            prompt: "go?".into(),
            answer_schema: json!({"type": "object", "properties": {"go": {"type": "boolean"}}}),
            timeout_ms,
        })
        .await
        .unwrap();
    assert_eq!(
        store.run(id).await.unwrap().unwrap().status,
        RunStatus::Waiting
    );
}

async fn waiting_runs_do_not_count_and_answered_or_timed_out_ones_obey_the_limits(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    let one_at_a_time = |priority: i64| RunOptions {
        priority,
        concurrency_limit: Some(1),
        ..RunOptions::default()
    };
    let enqueue = |id: &'static str, options: RunOptions| {
        let store = store.clone();
        async move {
            store
                .enqueue_run_with(&new_run(id, json!({})), &options)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
    };
    let finish = |id: &'static str| {
        let store = store.clone();
        async move {
            store
                .finish_run(id, RunStatus::Completed, None, None)
                .await
                .unwrap();
        }
    };

    // `a` waits: it holds no slot, so `b` starts under a limit of 1.
    enqueue("a", one_at_a_time(0)).await;
    assert_eq!(drain(&store, "w").await, ["a"]);
    wait_at_start(&store, "a", None).await;
    enqueue("b", one_at_a_time(0)).await;
    assert_eq!(drain(&store, "w").await, ["b"]);
    enqueue("c", one_at_a_time(5)).await;

    // Answered, `a` is queued again: held back while `b` runs, then
    // claimed after `c`, whose priority is higher, although `a` is older.
    store
        .answer_wait("a", 0, &json!({"go": true}), "alice")
        .await
        .unwrap();
    assert_eq!(drain(&store, "w").await, Vec::<String>::new());
    finish("b").await;
    assert_eq!(drain(&store, "w").await, ["c"]);
    finish("c").await;
    assert_eq!(drain(&store, "w").await, ["a"]);
    finish("a").await;

    // `t`'s wait times out while `u` holds the only slot: it is not
    // claimed until `u` ends (a queued run of another scenario is), and
    // then before a queued run with a higher priority.
    // The timeout is long enough that `u` is claimed before it passes even
    // on a loaded machine (at 50 ms, `t` was sometimes claimed first).
    const TIMEOUT: Duration = Duration::from_millis(1500);
    enqueue("t", one_at_a_time(0)).await;
    assert_eq!(drain(&store, "w").await, ["t"]);
    let waited = std::time::Instant::now();
    wait_at_start(&store, "t", Some(TIMEOUT.as_millis() as u64)).await;
    enqueue("u", one_at_a_time(0)).await;
    assert_eq!(drain(&store, "w").await, ["u"]);
    let mut other = new_run("v", json!({}));
    other.scenario_name = "other".into();
    store
        .enqueue_run_with(
            &other,
            &RunOptions {
                priority: 100,
                ..RunOptions::default()
            },
        )
        .await
        .unwrap();
    tokio::time::sleep((TIMEOUT + Duration::from_millis(70)).saturating_sub(waited.elapsed()))
        .await;
    let claimed = store.claim_run("w", TTL).await.unwrap().map(|(r, _)| r.id);
    assert_eq!(claimed.as_deref(), Some("v"), "t is held back by u");
    assert_eq!(
        store.run("t").await.unwrap().unwrap().status,
        RunStatus::Waiting
    );
    finish("u").await;
    let mut queued = new_run("x", json!({}));
    queued.scenario_name = "other".into();
    store
        .enqueue_run_with(
            &queued,
            &RunOptions {
                priority: 100,
                ..RunOptions::default()
            },
        )
        .await
        .unwrap();
    let (run, _) = store.claim_run("w", TTL).await.unwrap().expect("t");
    assert_eq!((run.id.as_str(), run.status), ("t", RunStatus::Running));
    assert_eq!(run.wait_deadline_ms, None);
}

async fn queue_stats_count_queued_and_waiting_runs_and_date_the_oldest_queued_one(kind: Kind) {
    let db = Db::new(kind).await;
    let store = db.open().await;
    assert_eq!(store.queue_stats().await.unwrap(), QueueStats::default());

    let before = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    for id in ["q1", "q2", "q3"] {
        store.enqueue_run(&new_run(id, json!({}))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
    let stats = store.queue_stats().await.unwrap();
    assert_eq!((stats.queued, stats.waiting), (3, 0));
    let oldest = stats.oldest_queued_at_ms.expect("three runs are queued");
    assert!(oldest >= before - 1000, "{oldest} vs {before}");
    assert_eq!(
        Some(oldest),
        store.run("q1").await.unwrap().map(|r| r.updated_at_ms)
    );

    // Claimed, a run leaves the queue; waiting, it counts as a wait; one
    // that finishes counts as neither.
    let (first, _) = store.claim_run("w", TTL).await.unwrap().unwrap();
    assert_eq!(first.id, "q1");
    wait_at_start(&store, "q1", None).await;
    let (second, _) = store.claim_run("w", TTL).await.unwrap().unwrap();
    store
        .finish_run(&second.id, RunStatus::Completed, None, None)
        .await
        .unwrap();
    let stats = store.queue_stats().await.unwrap();
    assert_eq!((stats.queued, stats.waiting), (1, 1), "{stats:?}");
    assert_eq!(
        stats.oldest_queued_at_ms,
        store.run("q3").await.unwrap().map(|r| r.updated_at_ms)
    );

    // Answered, the waiting run is queued again, and dated from then.
    store
        .answer_wait("q1", 0, &json!({"go": true}), "alice")
        .await
        .unwrap();
    let stats = store.queue_stats().await.unwrap();
    assert_eq!((stats.queued, stats.waiting), (2, 0), "{stats:?}");
    assert_eq!(
        stats.oldest_queued_at_ms,
        store.run("q3").await.unwrap().map(|r| r.updated_at_ms),
        "q1 counts from its answer, after q3 was queued"
    );
}
