//! Requests while the database is unreachable (a failover, a restart):
//! answered 503 with `Retry-After`, at once, instead of held until the
//! store's retries give up. The same server answers again as soon as the
//! store's [`Link`](skillhost_store::Link) sees the database back; nothing
//! restarts.
//!
//! A read (`GET`, `HEAD`) that is waiting on the database when it becomes
//! unreachable is answered 503 then (its statements are dropped: a read
//! changes nothing). Any other request is refused only if an outage is
//! already open when it arrives; once it has begun it is left to finish
//! (its writes are retried by the store), so a client is never told "not
//! done" about a write that was done.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::Shared;
use crate::error::ApiError;

/// Seconds a client is asked to wait before trying again.
const RETRY_AFTER_SECONDS: &str = "2";

/// The middleware.
pub(crate) async fn unavailable(
    State(state): State<Shared>,
    request: Request,
    next: Next,
) -> Response {
    let Some(link) = state.store.link().cloned() else {
        return next.run(request).await;
    };
    if let Some((out_for, message)) = link.outage() {
        return refusal(&format!(
            "the database has been unreachable for {:.1}s ({message}); the server retries \
             with backoff: try again shortly",
            out_for.as_secs_f64()
        ));
    }
    if !matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    tokio::select! {
        response = next.run(request) => response,
        () = link.down() => {
            let message = link.outage().map(|(_, m)| m).unwrap_or_default();
            refusal(&format!(
                "the database became unreachable while this was read ({message}); the server \
                 retries with backoff: try again shortly"
            ))
        }
    }
}

fn refusal(message: &str) -> Response {
    let mut response = ApiError::new(
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        message.to_owned(),
    )
    .into_response();
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}
