//! `/metrics`: the process's metrics in Prometheus' text format
//! (`skillhost_telemetry::metrics`), OpenMetrics or 0.0.4 as the scraper's
//! `Accept` asks, with the queue's depth, its oldest run's age and the open
//! waits read from the store at each scrape (so they are true across every
//! process on it). `host serve` answers it behind the same gate as every
//! other route; [`MetricsServer`] is the same answer alone on a server of
//! its own, for `host worker --metrics-addr`.
//!
//! Must not: label anything with a run id, or answer without the token a
//! server was given.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::sync::watch;

use skillhost_auth::{AllowedHosts, BindError, Gate, Shape, TokenGuard, check_bind};
use skillhost_store::History;
use skillhost_telemetry::metrics::{self, Format, StoreGauges};

use crate::Shared;

/// The route on `host serve`'s router.
pub(crate) fn routes() -> Router<Shared> {
    Router::new().route("/metrics", get(scrape))
}

async fn scrape(State(state): State<Shared>, headers: HeaderMap) -> Response {
    answer(&state.store, &headers).await
}

/// The metrics as `headers` ask for them, the store's gauges read from
/// `store` now. A store that cannot be read leaves its gauges out (and
/// says why in the log); the process's own metrics are answered anyway.
pub async fn answer(store: &History, headers: &HeaderMap) -> Response {
    let format = Format::from_accept(
        headers
            .get(header::ACCEPT)
            .and_then(|value| value.to_str().ok()),
    );
    let gauges = match store.queue_stats().await {
        Ok(stats) => Some(StoreGauges {
            queued: stats.queued,
            oldest_queued_age_seconds: stats
                .oldest_queued_at_ms
                .map_or(0.0, |at| (now_ms() - at).max(0) as f64 / 1000.0),
            waiting: stats.waiting,
        }),
        Err(e) => {
            tracing::warn!("/metrics: the queue's gauges are left out: {e}");
            None
        }
    };
    let body = metrics::render(format, gauges);
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        )],
        body,
    )
        .into_response()
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Refuses a metrics server on a non-loopback `addr` without a token, and
/// an empty token, as `host serve` refuses its own address
/// ([`check_bind`]).
pub fn check_metrics_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), String> {
    check_bind("--metrics-addr", addr, token).map_err(|e| match e {
        BindError::TokenRequired { addr, .. } => format!(
            "--metrics-addr {addr} is not a loopback address: anyone who reaches it could read \
             the metrics (scenario and node names, the queue). Give a token with --token T or \
             --token-file FILE (a scraper sends `Authorization: Bearer T`; Prometheus: \
             `authorization: {{credentials: T}}`), or bind 127.0.0.1"
        ),
        other => other.to_string(),
    })
}

/// What a metrics server is given (`host worker --metrics-addr`).
pub struct MetricsConfig {
    pub addr: SocketAddr,
    /// Required of every scrape when set (`Authorization: Bearer TOKEN`).
    pub token: Option<String>,
    /// Names besides the loopback ones the server answers to.
    pub allowed_hosts: Vec<String>,
}

/// `/metrics` alone on a server of its own (`host worker --metrics-addr`),
/// every request through the same gate as `host serve`'s: its `Host` and
/// `Origin`, and the token when one is given.
pub struct MetricsServer {
    listener: tokio::net::TcpListener,
    local: SocketAddr,
    gate: Arc<Gate>,
}

impl MetricsServer {
    /// Checks the address and the token, installs the process's metrics
    /// and listens: everything that can fail before it serves, so a worker
    /// stops at once rather than run without the metrics it was asked
    /// for. A non-loopback address without a token is refused, as `host
    /// serve` refuses it.
    pub async fn bind(config: MetricsConfig) -> Result<MetricsServer, String> {
        check_metrics_bind(config.addr, config.token.as_deref())?;
        let listener = tokio::net::TcpListener::bind(config.addr)
            .await
            .map_err(|e| format!("cannot listen on --metrics-addr {}: {e}", config.addr))?;
        let local = listener
            .local_addr()
            .map_err(|e| format!("cannot read the address listened on: {e}"))?;
        let hosts = AllowedHosts::new(local, &config.allowed_hosts)?;
        metrics::install();
        Ok(MetricsServer {
            listener,
            local,
            gate: Arc::new(Gate::new(
                hosts,
                config.token.map(TokenGuard::new),
                Shape::Json,
            )),
        })
    }

    /// Where it listens.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Serves until `shutdown` turns true, the store's gauges read from
    /// `store`.
    pub async fn serve(
        self,
        store: History,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), String> {
        let app = Router::new()
            .route(
                "/metrics",
                get(
                    |State(store): State<History>, headers: HeaderMap| async move {
                        answer(&store, &headers).await
                    },
                ),
            )
            .layer(axum::middleware::from_fn_with_state(
                self.gate,
                skillhost_auth::guard,
            ))
            .layer(axum::middleware::map_response(crate::headers::secure))
            .with_state(store);
        axum::serve(self.listener, app)
            .with_graceful_shutdown(async move {
                while !*shutdown.borrow() {
                    if shutdown.changed().await.is_err() {
                        break;
                    }
                }
            })
            .await
            .map_err(|e| format!("the metrics server stopped: {e}"))
    }
}
