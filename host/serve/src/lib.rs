//! `host serve`: an HTTP server over a run store, SQLite or Postgres. It
//! owns the JSON API under `/api/` (`api.rs`), its server-sent events
//! (`events.rs`: polled from the store, so runs written by any process
//! show), the web run inspector (`pages.rs`, every asset embedded from
//! `assets/`; a report's Markdown rendered with only `http`, `https`,
//! `mailto` and relative links, `markdown.rs`), the scenario graph drawn
//! as SVG (`svg.rs`), the process's metrics at `/metrics` (`metrics.rs`,
//! also served alone for `host worker --metrics-addr`), the API's error
//! shape (`error.rs`), who may ask
//! (`access.rs`: the `Host` and `Origin` of every request, the token when
//! one is set, of every request but the sign-in page's own, with a
//! sign-in cookie for the pages, and JSON bodies, through
//! `skillhost-auth`) and what every answer tells the browser
//! (`headers.rs`: a `Content-Security-Policy` that runs only the
//! server's own script, `nosniff`, and artifacts under `CSP: sandbox` or
//! as attachments).
//!
//! Runs it starts are queued in the store like `host submit`'s, and the
//! server runs them with an embedded worker (the engine's, with the
//! scenario loader the command line gives), unless told to leave them to
//! `host worker`s; answered runs continue the same way. Starting,
//! answering and cancelling go through the engine's run service
//! (`service.rs`), as the `host` commands and the MCP server do; the
//! errors' remedies are said as this API's routes (`error.rs`).
//!
//! A scenario it was given that cannot run on this host (it does not load
//! or pass the checker: [`UnavailableScenario`]) does not stop it: it is
//! listed with why, and its starts are refused (409).
//!
//! Must not: write anything on a request that fails, run a scenario it
//! was not given with `--scenarios` or one that cannot run here, reach
//! the network for a page, or let a script from a run (an artifact, a
//! report) run on its origin.

mod access;
mod api;
mod error;
mod events;
mod headers;
mod markdown;
mod metrics;
mod outage;
mod pages;
mod svg;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use tokio::sync::watch;

use skillhost_auth::{AllowedHosts, Gate, Shape, TokenGuard};
use skillhost_engine::RunService;
use skillhost_engine::worker::{self, ScenarioLoader, WorkerConfig, WorkerEvent};
use skillhost_runtime::Runtime;
use skillhost_scenario::LoadedScenario;
use skillhost_store::Store;

pub use error::ApiError;
pub use metrics::{MetricsConfig, MetricsServer, check_metrics_bind};
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
    ("get", "/api/session"),
    ("post", "/api/session"),
    ("delete", "/api/session"),
    ("get", "/api/runs/{id}/events"),
    ("get", "/api/events"),
    ("get", "/api/scenarios"),
    ("get", "/api/openapi.json"),
    ("get", "/metrics"),
];

/// What the server is given.
pub struct ServeConfig {
    pub addr: SocketAddr,
    /// Required of every request when set (but the sign-in page's).
    pub token: Option<String>,
    /// Names besides the loopback ones the server answers to
    /// (`--allowed-host`): the `Host` and `Origin` it accepts.
    pub allowed_hosts: Vec<String>,
    /// The scenarios `POST /api/runs` may start, by name.
    pub scenarios: Vec<Arc<LoadedScenario>>,
    /// The scenarios given that cannot run here (they do not load or do
    /// not pass the checker on this host): listed with why, never started.
    pub unavailable: Vec<UnavailableScenario>,
    /// Run queued and answered runs here (else `host worker`s do).
    pub worker: bool,
    /// How the embedded worker loads a claimed run's scenario.
    pub loader: ScenarioLoader,
    /// What the server prints when it is listening and what its worker
    /// does (the command line prints to stderr).
    pub log: Arc<dyn Fn(&str) + Send + Sync>,
    /// A trace viewer's URL with `{trace_id}` where a run's trace id goes
    /// (the host configuration's `[telemetry] trace_url`): the run page
    /// links each run's trace there.
    pub trace_url: Option<String>,
}

/// A scenario the server was given that cannot run on this host: it does
/// not load, or does not pass the checker (an `llm` provider the host is
/// not configured for, a TOML error, a cycle, a grant outside its
/// directory). The server still starts; `GET /api/scenarios` and the
/// start form list it with `reason`, and `POST /api/runs` refuses it (409).
#[derive(Debug, Clone)]
pub struct UnavailableScenario {
    /// Its `[scenario] name` when the file says one, else its directory's
    /// (or file's) name.
    pub name: String,
    pub path: PathBuf,
    /// The loader's or checker's report, as `host check` would print it.
    pub reason: String,
}

/// What every handler shares.
pub(crate) struct AppState {
    pub store: Store,
    pub service: RunService,
    pub scenarios: BTreeMap<String, Arc<LoadedScenario>>,
    /// The scenarios given that cannot run here, by name.
    pub unavailable: BTreeMap<String, UnavailableScenario>,
    /// Who may ask: names, token, bodies.
    pub gate: Arc<Gate>,
    /// Scenario files parsed to draw their graphs, by path and digest.
    pub graphs: Mutex<HashMap<(String, String), Arc<GraphView>>>,
    pub poll: Duration,
    /// Turns true when the server stops: event streams end then, so that
    /// a graceful shutdown does not wait for their clients.
    pub shutdown: watch::Receiver<bool>,
    /// The trace viewer's URL, `{trace_id}` where a run's trace id goes:
    /// the run page links to it.
    pub trace_url: Option<String>,
    /// The tokens of the runs this process executes, as they come
    /// (`events.rs`).
    pub live: Arc<events::LiveTokens>,
}

/// A scenario's graph as the run page draws it.
pub(crate) struct GraphView {
    pub svg: String,
}

pub(crate) type Shared = Arc<AppState>;

/// Who may ask a server bound to `bound`: the loopback names and
/// `allowed_hosts`, and the token (also as the pages' sign-in cookie,
/// named after the port, since a browser sends a host's cookies to all of
/// its ports).
pub fn gate(
    bound: SocketAddr,
    allowed_hosts: &[String],
    token: Option<String>,
) -> Result<Gate, String> {
    let hosts = AllowedHosts::new(bound, allowed_hosts)?;
    let token =
        token.map(|t| TokenGuard::new(t).with_cookie(format!("skillhost-serve-{}", bound.port())));
    Ok(Gate::new(hosts, token, Shape::Json))
}

/// The router over `store`, without a worker or a listener: what
/// [`serve`] serves, and what a measurement calls in-process.
pub fn router(
    store: Store,
    scenarios: Vec<Arc<LoadedScenario>>,
    unavailable: Vec<UnavailableScenario>,
    gate: Gate,
    shutdown: watch::Receiver<bool>,
) -> Router {
    app(
        store,
        scenarios,
        unavailable,
        gate,
        shutdown,
        None,
        Arc::new(events::LiveTokens::default()),
    )
}

/// [`router`], its run pages linking to `trace_url`'s trace viewer.
fn app(
    store: Store,
    scenarios: Vec<Arc<LoadedScenario>>,
    unavailable: Vec<UnavailableScenario>,
    gate: Gate,
    shutdown: watch::Receiver<bool>,
    trace_url: Option<String>,
    live: Arc<events::LiveTokens>,
) -> Router {
    let state = Arc::new(AppState {
        service: RunService::new(store.clone(), live.clone()),
        store,
        scenarios: scenarios
            .into_iter()
            .map(|s| (s.scenario.name.clone(), s))
            .collect(),
        unavailable: unavailable
            .into_iter()
            .map(|u| (u.name.clone(), u))
            .collect(),
        gate: Arc::new(gate),
        graphs: Mutex::new(HashMap::new()),
        poll: POLL_INTERVAL,
        shutdown,
        trace_url,
        live,
    });
    // Layers wrap what is above them: every answer gets the headers, even
    // a refusal; then who may ask is checked, before any body is read; then
    // whether the database answers (503 while it does not).
    Router::new()
        .merge(api::routes())
        .merge(pages::routes())
        .merge(metrics::routes())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            outage::unavailable,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::admit,
        ))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::map_response(headers::secure))
        .with_state(state)
}

/// Serves until `shutdown` turns true: the API and pages on
/// `config.addr`, and the embedded worker when `config.worker`. Refuses a
/// non-loopback address without a token ([`check_bind`]), and an
/// `--allowed-host` that is not a host name.
pub async fn serve(
    store: Store,
    runtime: Runtime,
    config: ServeConfig,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), String> {
    check_bind("--addr", config.addr, config.token.as_deref()).map_err(|e| e.to_string())?;
    skillhost_telemetry::metrics::install();
    let listener = tokio::net::TcpListener::bind(config.addr)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.addr))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot read the address listened on: {e}"))?;
    let gate = gate(local, &config.allowed_hosts, config.token)?;
    let log = config.log.clone();
    let live = Arc::new(events::LiveTokens::default());
    // The tokens of runs other processes execute (workers on the same
    // Postgres database).
    if store.relays_tokens() {
        tokio::spawn(events::hear_relayed_tokens(
            store.clone(),
            live.clone(),
            log.clone(),
            shutdown.clone(),
        ));
    }
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
            run_events: Some(worker::RunEvents(live.clone())),
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
    let app = app(
        store,
        config.scenarios,
        config.unavailable,
        gate,
        shutdown.clone(),
        config.trace_url,
        live,
    );
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
