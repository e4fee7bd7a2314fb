//! Who may ask, checked before any handler reads a request
//! (`skillhost-auth`'s [`Gate`](skillhost_auth::Gate)): the `Host` and
//! the `Origin` of every request, against DNS rebinding and other sites'
//! pages; with `--token`, the token on every request but what a browser
//! needs to sign in (the runs list's page, the assets and
//! `/api/session`); and a body sent as JSON. The pages sign in with the
//! token once (`POST /api/session`), and the server answers with an
//! `HttpOnly`, `SameSite=Strict` cookie: no script on the page, and no
//! other site, can read it or send it, and the token is stored nowhere in
//! the browser.
//!
//! An API request is refused as the API refuses (`{"error": …}`); a page
//! without the token is answered with the sign-in page (401), and any
//! other refused page with a short HTML page saying why.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use serde_json::{Value, json};

use skillhost_auth::{Refusal, Shape};

use crate::Shared;
use crate::api::JsonObject;
use crate::error::ApiError;

/// The sign-in page: what a page that needs the token answers without it.
const SIGNIN_HTML: &str = include_str!("../assets/signin.html");

/// The middleware: every check, in order.
pub(crate) async fn admit(State(state): State<Shared>, request: Request, next: Next) -> Response {
    let gate = &state.gate;
    let path = request.uri().path();
    // A scraper of `/metrics` is refused as the API refuses.
    let api = path.starts_with("/api/") || path == "/metrics";
    let refused = if let Err(refusal) = gate.check_site(&request) {
        Some(refusal)
    } else if let (false, Err(refusal)) = (open(path), gate.check_token(&request)) {
        if !api {
            return (StatusCode::UNAUTHORIZED, Html(SIGNIN_HTML)).into_response();
        }
        Some(refusal)
    } else {
        gate.check_body_type(&request).err()
    };
    match refused {
        None => next.run(request).await,
        Some(refusal) if api => refusal.response(Shape::Json),
        Some(refusal) => crate::pages::page_error(refusal.status, &refusal.message),
    }
}

/// What a browser that has not signed in may reach: the runs list's page
/// (it holds no run; its script asks `/api/session` first), the assets
/// and the session itself.
fn open(path: &str) -> bool {
    path == "/" || path.starts_with("/assets/") || path == "/api/session"
}

/// Whether the request carries the token (always, on a server without).
fn signed_in(state: &Shared, headers: &HeaderMap) -> bool {
    state
        .gate
        .token()
        .is_none_or(|guard| guard.admit(headers).is_ok())
}

/// `GET /api/session`: whether the server needs a token, and whether this
/// request carries it.
pub(crate) async fn session(State(state): State<Shared>, headers: HeaderMap) -> Response {
    axum::Json(json!({
        "token_required": state.gate.token().is_some(),
        "signed_in": signed_in(&state, &headers),
    }))
    .into_response()
}

/// `POST /api/session` `{"token": "…"}`: the sign-in cookie, for the
/// right token.
pub(crate) async fn sign_in(
    State(state): State<Shared>,
    JsonObject(mut body): JsonObject,
) -> Result<Response, ApiError> {
    let Some(guard) = state.gate.token() else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "this server has no token (it was started without --token): there is nothing to \
             sign in to",
        ));
    };
    let given = match body.remove("token") {
        Some(Value::String(token)) => token,
        _ => {
            return Err(ApiError::bad_request(
                "give the server's token as {\"token\": \"…\"}",
            ));
        }
    };
    if let Some(extra) = body.keys().next() {
        return Err(ApiError::bad_request(format!(
            "unknown field `{extra}` in the request; give only `token`"
        )));
    }
    if !guard.matches(&given) {
        let refusal = Refusal::new(
            StatusCode::UNAUTHORIZED,
            "the token is wrong; give the one the server was started with (--token or \
             --token-file)",
        );
        return Ok(refusal.response(Shape::Json));
    }
    let mut response = axum::Json(json!({ "signed_in": true })).into_response();
    if let Some(cookie) = guard.set_cookie() {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    Ok(response)
}

/// `DELETE /api/session`: the sign-in cookie removed.
pub(crate) async fn sign_out(State(state): State<Shared>) -> Response {
    let signed_in = state.gate.token().is_none();
    let mut response = axum::Json(json!({ "signed_in": signed_in })).into_response();
    if let Some(cookie) = state.gate.token().and_then(|guard| guard.clear_cookie()) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}
