//! The server in-process, through the router over a real SQLite store (no
//! sockets): who may ask and what every answer tells the browser
//! (`access.rs`), and its measurements (server time only), here. The
//! measurements are ignored by default, since filling the store takes a
//! while; run them with
//! `cargo test --release -p skillhost-serve --test serve -- --ignored --nocapture`.
//!
//! - the runs list (a page of 50, and filtered by status) with 10,000 runs
//!   in the store answers in at most 50 ms;
//! - a 500-step run's page (the HTML with its graph, and the two API calls
//!   its script makes: the run and its checkpoints) in at most 200 ms.

mod access;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use serde_json::{Value, json};
use tower::ServiceExt;

use skillhost_store::{Store, StoreOptions};
use skillhost_tests::store_fixtures::{commit, new_run};

/// The address the router believes it serves: requests name it as their
/// `Host`.
pub(crate) const HOST: &str = "127.0.0.1:7700";

/// The median time of `n` GETs of `path`, each answered 200.
async fn median_get(app: &axum::Router, path: &str, n: usize) -> Duration {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let response = app
            .clone()
            .oneshot(
                Request::get(path)
                    .header("host", HOST)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        times.push(started.elapsed());
        assert_eq!(
            status,
            200,
            "GET {path}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    times.sort();
    times[n / 2]
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement: fills a store with 10,000 runs"]
async fn runs_list_and_run_page_times() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("runs.db").display());
    let store = Store::open_with(&url, StoreOptions::default())
        .await
        .unwrap();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/e2e/engine/approval.toml")
        .canonicalize()
        .unwrap();

    let filled = Instant::now();
    for i in 0..10_000u32 {
        let mut run = new_run(&skillhost_store::new_run_id(), json!({"n": i}));
        if i % 2 == 0 {
            run.scenario_name = "other".into();
        }
        store.create_run(&run).await.unwrap();
    }
    // The 500-step run, newest.
    let id = skillhost_store::new_run_id();
    let mut state = json!({"log": [], "counter": 0});
    let mut run = new_run(&id, state.clone());
    run.scenario_path = scenario.display().to_string();
    store.create_run(&run).await.unwrap();
    let mut visits = BTreeMap::new();
    for seq in 1..=500u64 {
        let changes = vec![skillhost_store::StateChange::Append {
            field: "log".into(),
            items: vec![json!(format!("step {seq}: {}", "x".repeat(80)))],
        }];
        let step = commit(&id, seq, &mut state, &mut visits, changes);
        store.commit_step(&step).await.unwrap();
    }
    eprintln!("filled the store in {:?}", filled.elapsed());

    let (_stop, shutdown) = tokio::sync::watch::channel(false);
    let gate = skillhost_serve::gate(HOST.parse().unwrap(), &[], None).unwrap();
    let app = skillhost_serve::router(store.clone(), Vec::new(), Vec::new(), gate, shutdown);
    let list = median_get(&app, "/api/runs", 21).await;
    let by_status = median_get(&app, "/api/runs?status=queued&limit=50", 21).await;
    let by_scenario = median_get(&app, "/api/runs?scenario=other&limit=50", 21).await;
    let page = median_get(&app, &format!("/runs/{id}"), 11).await;
    let detail = median_get(&app, &format!("/api/runs/{id}"), 11).await;
    let checkpoints = median_get(&app, &format!("/api/runs/{id}/checkpoints"), 11).await;
    let figures = json!({
        "runs_in_store": 10_001,
        "runs_list_ms": ms(list),
        "runs_list_by_status_ms": ms(by_status),
        "runs_list_by_scenario_ms": ms(by_scenario),
        "run_page_500_steps": {
            "html_ms": ms(page),
            "run_json_ms": ms(detail),
            "checkpoints_json_ms": ms(checkpoints),
            "total_ms": ms(page + detail + checkpoints),
        },
    });
    println!("{}", serde_json::to_string_pretty(&figures).unwrap());
    let limit = |figure: &Value, max: f64, what: &str| {
        let value = figure.as_f64().unwrap();
        assert!(value <= max, "{what}: {value} ms, over {max} ms");
    };
    limit(&figures["runs_list_ms"], 50.0, "the runs list");
    limit(
        &figures["runs_list_by_status_ms"],
        50.0,
        "the runs list by status",
    );
    limit(
        &figures["runs_list_by_scenario_ms"],
        50.0,
        "the runs list by scenario",
    );
    limit(
        &figures["run_page_500_steps"]["total_ms"],
        200.0,
        "a 500-step run's page",
    );
    store.close().await;
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e5).round() / 100.0
}
