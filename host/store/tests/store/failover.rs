//! Postgres failover under Patroni (issue 34, item 1; the harness's first
//! part): the store, through HAProxy, keeps writing while the primary is
//! SIGKILLed and a synchronous replica is promoted, twice, and loses
//! nothing it acknowledged (`support/patroni.rs`).

use serde_json::json;
use skillhost_store::Store;
use skillhost_tests::patroni::Ha;
use skillhost_tests::store_fixtures::new_run;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_rides_out_two_failovers_under_patroni_losing_nothing() {
    let mut ha = tokio::task::spawn_blocking(|| {
        let ha = Ha::start(2);
        ha.wait_sync_standby();
        ha
    })
    .await
    .unwrap();
    ha.create_database("failover").await;
    let store = Store::open(&ha.url("failover")).await.unwrap();
    let mut written = 0;
    for round in 0..3 {
        for i in 0..5 {
            store
                .create_run(&new_run(&format!("r{round}-{i}"), json!({})))
                .await
                .unwrap_or_else(|e| panic!("round {round}: {e}\n{}", ha.logs()));
            written += 1;
        }
        if round == 2 {
            break;
        }
        // Every run written so far was acknowledged with a synchronous
        // replica: kill the primary, wait for the promotion, go on.
        ha = tokio::task::spawn_blocking(move || {
            ha.wait_sync_standby();
            let killed = ha.kill_primary();
            let promoted = ha.wait_primary();
            assert_ne!(killed, promoted);
            ha.restart(killed);
            ha
        })
        .await
        .unwrap();
    }
    for round in 0..3 {
        for i in 0..5 {
            let id = format!("r{round}-{i}");
            assert!(
                store.run(&id).await.unwrap().is_some(),
                "run {id} was acknowledged and then lost"
            );
        }
    }
    assert_eq!(written, 15);
    store.close().await;
    tokio::task::spawn_blocking(move || drop(ha)).await.unwrap();
}
