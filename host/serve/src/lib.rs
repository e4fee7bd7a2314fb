//! `host serve`: an HTTP server over a run store, SQLite or Postgres. It
//! owns the JSON API under `/api/` (`api.rs`), its server-sent events
//! (`events.rs`: polled from the store, so runs written by any process
//! show), the web run inspector (`pages.rs`, every asset embedded from
//! `assets/`), the scenario graph drawn as SVG (`svg.rs`), the API's error
//! shape (`error.rs`) and who may change things (`skillhost-auth`'s bearer
//! token, required off loopback, of every request but GET and HEAD).
//!
//! Runs it starts are queued in the store like `host submit`'s, and the
//! server runs them with an embedded worker (the engine's, with the
//! scenario loader the command line gives), unless told to leave them to
//! `host worker`s; answered runs continue the same way. Answering and
//! cancelling go through the engine's `control.rs`, as the `host runs`
//! commands do.
//!
//! Must not: write anything on a request that fails, run a scenario it
//! was not given with `--scenarios`, or reach the network for a page.

mod api;
mod error;
mod events;
mod pages;
mod svg;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::sync::watch;

use skillhost_auth::{Guarded, TokenGuard};
use skillhost_engine::worker::{self, ScenarioLoader, WorkerConfig, WorkerEvent};
use skillhost_engine::{Engine, NoEvents};
use skillhost_runtime::Runtime;
use skillhost_scenario::LoadedScenario;
use skillhost_store::Store;

pub use error::ApiError;
pub use skillhost_auth::{BindError, check_bind};
pub use svg::graph_svg;

/// The largest request body the API reads (a run input or an answer);
/// a larger one is refused with 413 before it is parsed.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// How often the event streams look at the store for changes.
pub const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// The API's routes, method and path as the OpenAPI document names them.
/// `assets/openapi.json` must describe each (a unit test checks it), and
/// the router serves each.
pub const API_ROUTES: &[(&str, &str)] = &[
    ("get", "/api/runs"),
    ("post", "/api/runs"),
    ("get", "/api/runs/{id}"),
    ("get", "/api/runs/{id}/checkpoints"),
    ("get", "/api/runs/{id}/checkpoints/{seq}/state"),
    ("get", "/api/runs/{id}/diff"),
    ("get", "/api/runs/{id}/artifacts/{name}"),
    ("post", "/api/runs/{id}/answer"),
    ("post", "/api/runs/{id}/cancel"),
    ("get", "/api/runs/{id}/events"),
    ("get", "/api/events"),
    ("get", "/api/scenarios"),
    ("get", "/api/openapi.json"),
];

/// What the server is given.
pub struct ServeConfig {
    pub addr: SocketAddr,
    /// Required of every request that changes something, when set.
    pub token: Option<String>,
    /// The scenarios `POST /api/runs` may start, by name.
    pub scenarios: Vec<Arc<LoadedScenario>>,
    /// Run queued and answered runs here (else `host worker`s do).
    pub worker: bool,
    /// How the embedded worker loads a claimed run's scenario.
    pub loader: ScenarioLoader,
    /// What the server prints when it is listening and what its worker
    /// does (the command line prints to stderr).
    pub log: Arc<dyn Fn(&str) + Send + Sync>,
}

/// What every handler shares.
pub(crate) struct AppState {
    pub store: Store,
    pub engine: Engine,
    pub scenarios: BTreeMap<String, Arc<LoadedScenario>>,
    /// Scenario files parsed to draw their graphs, by path and digest.
    pub graphs: Mutex<HashMap<(String, String), Arc<GraphView>>>,
    pub poll: Duration,
    /// Turns true when the server stops: event streams end then, so that
    /// a graceful shutdown does not wait for their clients.
    pub shutdown: watch::Receiver<bool>,
}

/// A scenario's graph as the run page draws it.
pub(crate) struct GraphView {
    pub svg: String,
}

pub(crate) type Shared = Arc<AppState>;

/// The router over `store`, without a worker or a listener: what
/// [`serve`] serves, and what a measurement calls in-process.
pub fn router(
    store: Store,
    scenarios: Vec<Arc<LoadedScenario>>,
    token: Option<String>,
    shutdown: watch::Receiver<bool>,
) -> Router {
    let state = Arc::new(AppState {
        engine: Engine::new(Some(store.clone()), Arc::new(NoEvents)).with_store_kv(),
        store,
        scenarios: scenarios
            .into_iter()
            .map(|s| (s.scenario.name.clone(), s))
            .collect(),
        graphs: Mutex::new(HashMap::new()),
        poll: POLL_INTERVAL,
        shutdown,
    });
    Router::new()
        .merge(api::routes())
        .merge(pages::routes())
        .layer(axum::middleware::from_fn_with_state(
            TokenGuard::new(token, Guarded::Changes),
            skillhost_auth::require_token,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

/// Serves until `shutdown` turns true: the API and pages on
/// `config.addr`, and the embedded worker when `config.worker`. Refuses a
/// non-loopback address without a token ([`check_bind`]).
pub async fn serve(
    store: Store,
    runtime: Runtime,
    config: ServeConfig,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    check_bind("--addr", config.addr, config.token.as_deref()).map_err(|e| e.to_string())?;
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.addr))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the address listened on: {e}"))?;
    let log = config.log.clone();
    let worker = config.worker.then(|| {
        let log = log.clone();
        let events: worker::WorkerEvents = Arc::new(move |event: &WorkerEvent| {
            if let Ok(line) = serde_json::to_string(event) {
                log(&format!("worker: {line}"));
            }
        });
        let worker_config = WorkerConfig {
            owner: skillhost_store::new_owner_id("serve"),
            loader: config.loader.clone(),
            ..WorkerConfig::default()
        };
        tokio::spawn(worker::run(
            store.clone(),
            runtime,
            worker_config,
            shutdown.clone(),
            events,
        ))
    });
    let app = router(store, config.scenarios, config.token, shutdown.clone());
    log(&format!("host serve: listening on http://{local}/"));
    let served = axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            while !*shutdown.borrow() {
                if shutdown.changed().await.is_err() {
                    break;
                }
            }
        })
        .await
        .map_err(|e| format!("the server stopped: {e}"));
    if let Some(worker) = worker {
        let _ = worker.await;
    }
    served
}
