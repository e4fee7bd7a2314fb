//! The tasks over streamable HTTP: an axum layer in front of the SDK's
//! service at `/mcp` (behind `skillhost-auth`'s gate). A POST whose body
//! is a task request is answered here (after the session check the SDK
//! would make); an `initialize` or `tools/list` goes on to the SDK and its
//! answer, JSON or an event stream, comes back with the tasks advertised.
//! A `tasks/result` of a task that has not ended, from a client that
//! accepts `text/event-stream`, is answered with an event stream: what the
//! run streams (`stream.rs`), then the result; a client that accepts JSON
//! only gets the result alone when the run ends. The layer also notes the
//! level each session sets with `logging/setLevel` (passed on to the SDK
//! too), which decides what a task's stream carries.
//! A body that is not JSON is a JSON-RPC parse error (-32700) and one that
//! is JSON but no JSON-RPC message the SDK reads an invalid request
//! (-32600), both with a 400, where the SDK would answer 415 as if the
//! media type were wrong.

// MCP's logging is deprecated by SEP-2577 but still spoken (`follow.rs`).
#![allow(deprecated)]
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::model::{ClientJsonRpcMessage, LoggingLevel};
use serde_json::Value;
use tokio::sync::mpsc;

use super::stream::{MESSAGES_QUEUED, stream_result};
use super::{
    Advert, Answer, INTERNAL_ERROR, INVALID_REQUEST, MAX_MESSAGE_BYTES, PARSE_ERROR, Position,
    Read, TaskRequest, answer, classify, envelope, position,
};
use crate::handler::SkillhostMcp;

/// What the layer answers for: the server, and whether it keeps sessions.
#[derive(Clone)]
pub(crate) struct HttpTasks {
    pub server: SkillhostMcp,
    /// `--stateless`: no request carries a session id.
    pub stateless: bool,
}

/// The layer: answers the task requests, passes everything else on.
pub(crate) async fn intercept(
    State(HttpTasks { server, stateless }): State<HttpTasks>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() != Method::POST {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let bytes: Bytes = match axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                &Value::Null,
                Err((
                    INVALID_REQUEST,
                    format!("the request body is unreadable or over 16 MiB: {e}"),
                )),
            );
        }
    };
    let message: Value = match serde_json::from_slice(&bytes) {
        Ok(message) => message,
        Err(e) => {
            return reply(
                StatusCode::BAD_REQUEST,
                &Value::Null,
                Err((
                    PARSE_ERROR,
                    format!("the request body is not JSON ({e}); send one JSON-RPC message"),
                )),
            );
        }
    };
    // The SDK keeps a session's level where this layer cannot see it.
    if message.get("method").and_then(Value::as_str) == Some("logging/setLevel")
        && let Some(session) = session_of(&parts.headers)
        && let Ok(level) =
            serde_json::from_value::<LoggingLevel>(message["params"]["level"].clone())
    {
        server.set_session_level(session, level);
    }
    let Some((id, task)) = classify(&server, &message) else {
        if let Err(e) = serde_json::from_value::<ClientJsonRpcMessage>(message.clone()) {
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            return reply(
                StatusCode::BAD_REQUEST,
                &id,
                Err((
                    INVALID_REQUEST,
                    format!(
                        "the request body is JSON but not a JSON-RPC message this server \
                         reads ({e}); send one request, notification or response object"
                    ),
                )),
            );
        }
        let advertised = Advert::of(&message);
        let response = next
            .run(Request::from_parts(parts, Body::from(bytes)))
            .await;
        return match advertised {
            Some((advert, id)) => advertise(&server, advert, &id, response).await,
            None => response,
        };
    };
    if !stateless && !parts.headers.contains_key("mcp-session-id") {
        return reply(
            StatusCode::BAD_REQUEST,
            &id,
            Err((
                INVALID_REQUEST,
                "no Mcp-Session-Id header: send initialize first, then the session id it \
                 answered with every request"
                    .into(),
            )),
        );
    }
    if let TaskRequest::Result(task_id) = &task
        && accepts_event_stream(&parts.headers)
    {
        // Ended, or no task: answered at once, as JSON.
        match position(&server, task_id, Read::Now).await {
            Err(e) => return reply(StatusCode::OK, &id, Err(e)),
            Ok(Position {
                result: Some(result),
                ..
            }) => return reply(StatusCode::OK, &id, Ok(result)),
            Ok(_) => {
                let level = session_of(&parts.headers).and_then(|s| server.session_level(s));
                return event_stream(server, id, task_id.clone(), level);
            }
        }
    }
    let answer = answer(&server, task).await;
    reply(StatusCode::OK, &id, answer)
}

/// How long an event stream may go without a message before a comment
/// line keeps it (and proxies in front) open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The session id a request carries.
fn session_of(headers: &HeaderMap) -> Option<&str> {
    headers.get("mcp-session-id")?.to_str().ok()
}

/// Whether the client takes an event stream in answer to its POST.
fn accepts_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| media.trim().starts_with("text/event-stream"))
}

/// `tasks/result` of a task that works, as an event stream: a `data:`
/// event for each notification the follower sends (`stream.rs`), then one
/// for the response, then the end. When the client goes away the body is
/// dropped, the channel closes, and the follower ends.
fn event_stream(
    server: SkillhostMcp,
    id: Value,
    task_id: String,
    level: Option<LoggingLevel>,
) -> Response {
    let (out, messages) = mpsc::channel::<Value>(MESSAGES_QUEUED);
    tokio::spawn(async move {
        stream_result(&server, &id, &task_id, level, &out).await;
    });
    let events = futures_util::stream::unfold(messages, |mut messages| async move {
        let event = match tokio::time::timeout(KEEP_ALIVE, messages.recv()).await {
            Ok(Some(message)) => Bytes::from(format!("data: {message}\n\n")),
            Ok(None) => return None,
            Err(_) => Bytes::from_static(b": keep-alive\n\n"),
        };
        Some((Ok::<_, Infallible>(event), messages))
    });
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(events),
    )
        .into_response()
}

/// The SDK's answer to an `initialize` or `tools/list`, with the tasks
/// added: a JSON body, or an event stream whose `data:` line holds the
/// result (the stream of a request ends with its response). Anything else
/// (an error, a body that is neither) passes unchanged.
async fn advertise(
    server: &SkillhostMcp,
    advert: Advert,
    id: &Value,
    response: Response,
) -> Response {
    if response.status() != StatusCode::OK {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_MESSAGE_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) => {
            return reply(
                StatusCode::INTERNAL_SERVER_ERROR,
                id,
                Err((INTERNAL_ERROR, format!("reading the server's answer: {e}"))),
            );
        }
    };
    let event_stream = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let text = String::from_utf8_lossy(&bytes);
    let rewritten = if event_stream {
        let mut changed = false;
        let lines: Vec<String> = text
            .split('\n')
            .map(|line| {
                let Some(data) = line.strip_prefix("data:") else {
                    return line.to_string();
                };
                let Ok(mut message) = serde_json::from_str::<Value>(data.trim_start()) else {
                    return line.to_string();
                };
                if !advert.apply(server, id, &mut message) {
                    return line.to_string();
                }
                changed = true;
                format!("data: {message}")
            })
            .collect();
        changed.then(|| lines.join("\n"))
    } else {
        serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|mut message| {
                advert
                    .apply(server, id, &mut message)
                    .then(|| message.to_string())
            })
    };
    let body = match rewritten {
        Some(text) => {
            parts.headers.remove(header::CONTENT_LENGTH);
            Body::from(text)
        }
        None => Body::from(bytes),
    };
    Response::from_parts(parts, body)
}

fn reply(status: StatusCode, id: &Value, answer: Answer) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        envelope(id, answer).to_string(),
    )
        .into_response()
}
