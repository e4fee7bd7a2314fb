//! The JSON API under `/api/`: the runs list (paged by cursor), one run
//! with its steps, waits, artifacts and token usage, its checkpoints with
//! what each changed, the state at one, the difference between two, an
//! artifact's bytes with their media type (served as `headers.rs` says:
//! sandboxed or as an attachment); starting a run of a known scenario,
//! answering a waiting run, cancelling one; the scenarios it can start
//! and those it cannot run here, with why;
//! signing a browser in and out (`access.rs`); the OpenAPI document
//! (`assets/openapi.json`).
//!
//! Must not: write on a request it refuses. Bodies are read whole (up to
//! the body limit) and parsed here, so that every refusal is the API's
//! JSON error rather than the framework's text.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{Map, Value, json};
use std::collections::HashMap;

use skillhost_engine::Queued;
use skillhost_engine::queue::RunRequest;
use skillhost_store::{Cancelled, RunCursor, RunFilter, RunRow, RunStatus};

use crate::Shared;
use crate::error::ApiError;

/// The most runs one page of the list holds.
pub const MAX_PAGE: u32 = 500;
const DEFAULT_PAGE: u32 = 50;

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/api/runs", get(list_runs).post(start_run))
        .route("/api/runs/{id}", get(run_detail))
        .route("/api/runs/{id}/checkpoints", get(checkpoints))
        .route("/api/runs/{id}/checkpoints/{seq}/state", get(state_at))
        .route("/api/runs/{id}/diff", get(diff))
        .route("/api/runs/{id}/artifacts/{name}", get(artifact))
        .route("/api/runs/{id}/answer", post(answer))
        .route("/api/runs/{id}/cancel", post(cancel))
        .route("/api/runs/{id}/events", get(crate::events::run_events))
        .route("/api/events", get(crate::events::runs_events))
        .route(
            "/api/session",
            get(crate::access::session)
                .post(crate::access::sign_in)
                .delete(crate::access::sign_out),
        )
        .route("/api/scenarios", get(scenarios))
        .route("/api/openapi.json", get(openapi))
        .fallback(|| async {
            ApiError::not_found("no such API route; GET /api/openapi.json lists the routes")
        })
}

/// A request body that must be a JSON object; a body over the limit is
/// 413, one that is not JSON 400, both as the API's error. (That it was
/// sent as `application/json` is checked before, for every request, by
/// `access.rs`.)
pub(crate) struct JsonObject(pub Map<String, Value>);

impl<S: Send + Sync> FromRequest<S> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                let status = rejection.status();
                let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
                    format!(
                        "the request body is larger than {} bytes, the most this server reads",
                        crate::MAX_BODY_BYTES
                    )
                } else {
                    format!("cannot read the request body: {}", rejection.body_text())
                };
                ApiError::new(status, message)
            })?;
        if bytes.is_empty() {
            return Ok(JsonObject(Map::new()));
        }
        match serde_json::from_slice::<Value>(&bytes) {
            Ok(Value::Object(object)) => Ok(JsonObject(object)),
            Ok(other) => Err(ApiError::bad_request(format!(
                "the request body must be a JSON object, not {}",
                kind_of(&other)
            ))),
            Err(e) => Err(ApiError::bad_request(format!(
                "the request body is not valid JSON: {e}"
            ))),
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The query string's parameters; one that does not parse is the API's 400.
pub(crate) struct Params(pub HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map(|Query(params)| Params(params))
            .map_err(|rejection| {
                ApiError::bad_request(format!(
                    "the query string does not parse: {}",
                    rejection.body_text()
                ))
            })
    }
}

/// A run's row, or 404.
pub(crate) async fn find_run(state: &Shared, run_id: &str) -> Result<RunRow, ApiError> {
    state
        .store
        .run(run_id)
        .await?
        .ok_or_else(|| ApiError::unknown_run(run_id))
}

/// What the runs list shows of a run.
pub(crate) fn run_summary(run: &RunRow) -> Value {
    json!({
        "id": run.id,
        "scenario": run.scenario_name,
        "status": run.status.as_str(),
        "current_node": run.current_node,
        "last_seq": run.last_seq,
        "created_at_ms": run.created_at_ms,
        "updated_at_ms": run.updated_at_ms,
        "error": run.error,
        "parent_run_id": run.parent().map(|p| &p.run_id),
    })
}

/// The filter a runs-list request asks for.
fn run_filter(params: &HashMap<String, String>) -> Result<RunFilter, ApiError> {
    let status = match params.get("status").filter(|s| !s.is_empty()) {
        Some(s) => Some(s.parse::<RunStatus>().map_err(|_| {
            let known: Vec<&str> = RunStatus::ALL.iter().map(|s| s.as_str()).collect();
            ApiError::bad_request(format!(
                "unknown status `{s}`; one of: {}",
                known.join(", ")
            ))
        })?),
        None => None,
    };
    let limit = match params.get("limit") {
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
            _ => {
                return Err(ApiError::bad_request(format!(
                    "limit must be a whole number from 1 to {MAX_PAGE}, not `{text}`"
                )));
            }
        },
        None => DEFAULT_PAGE,
    };
    let before = match params.get("cursor").filter(|s| !s.is_empty()) {
        Some(text) => Some(RunCursor::parse(text).ok_or_else(|| {
            ApiError::bad_request(format!(
                "cursor `{text}` is not one this server gave; use the `next_cursor` of the \
                 previous page"
            ))
        })?),
        None => None,
    };
    Ok(RunFilter {
        status,
        scenario: params.get("scenario").filter(|s| !s.is_empty()).cloned(),
        before,
        limit,
    })
}

async fn list_runs(
    State(state): State<Shared>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let filter = run_filter(&params)?;
    let page = filter.limit as usize;
    // One more than the page: whether there is a next one.
    let mut rows = state
        .store
        .list_runs_page(&RunFilter {
            limit: filter.limit + 1,
            ..filter
        })
        .await?;
    let more = rows.len() > page;
    rows.truncate(page);
    let mut next_cursor = None;
    let runs: Vec<Value> = rows
        .iter()
        .map(|row| match row {
            Ok(run) => {
                next_cursor = Some(RunCursor::after(run).to_string());
                run_summary(run)
            }
            Err(unreadable) => json!({"id": unreadable.id, "unreadable": unreadable.to_string()}),
        })
        .collect();
    Ok(Json(json!({
        "runs": runs,
        "next_cursor": if more { next_cursor } else { None },
    }))
    .into_response())
}

async fn run_detail(
    State(state): State<Shared>,
    Path(run_id): Path<String>,
) -> Result<Response, ApiError> {
    let run = find_run(&state, &run_id).await?;
    let store = &state.store;
    let (steps, waits, artifacts, children) = tokio::try_join!(
        store.steps(&run_id),
        store.waits(&run_id),
        store.artifacts(&run_id),
        store.children(&run_id),
    )?;
    let usage = skillhost_engine::tokens_used(&steps);
    let waiting = waits
        .last()
        .filter(|w| run.status == RunStatus::Waiting && w.seq == run.last_seq)
        .map(|w| {
            json!({
                "node": w.node_id, "seq": w.seq, "prompt": w.prompt,
                "answer_schema": w.answer_schema, "deadline_ms": w.deadline_ms,
                "fields": skillhost_engine::describe_fields(&w.answer_schema),
            })
        });
    let scenario_known = state.scenarios.contains_key(&run.scenario_name);
    let trace = trace_of(&state, &run);
    Ok(Json(json!({
        "run": run,
        "summary": run_summary(&run),
        "steps": steps,
        "waits": waits,
        "waiting": waiting,
        "artifacts": artifacts,
        "children": children.iter().map(run_summary).collect::<Vec<_>>(),
        "usage": usage.to_json(),
        "scenario_known": scenario_known,
        "trace_id": trace.as_ref().map(|(id, _)| id),
        "trace_url": trace.and_then(|(_, url)| url),
    }))
    .into_response())
}

async fn checkpoints(
    State(state): State<Shared>,
    Path(run_id): Path<String>,
) -> Result<Response, ApiError> {
    find_run(&state, &run_id).await?;
    let history = state
        .store
        .history(&run_id)
        .await?
        .ok_or_else(|| ApiError::unknown_run(&run_id))?;
    let rows = state.store.checkpoints(&run_id).await?;
    let changes: HashMap<u64, _> = history
        .checkpoints
        .into_iter()
        .map(|c| (c.seq, c.changes))
        .collect();
    let checkpoints: Vec<Value> = rows
        .iter()
        .map(|row| {
            let mut value = json!(row);
            value["changes"] = json!(changes.get(&row.seq).cloned().unwrap_or_default());
            value
        })
        .collect();
    Ok(Json(json!({ "run_id": run_id, "checkpoints": checkpoints })).into_response())
}

fn parse_seq(text: &str, what: &str) -> Result<u64, ApiError> {
    text.parse().map_err(|_| {
        ApiError::bad_request(format!(
            "{what} must be a checkpoint number (0, 1, …), not `{text}`"
        ))
    })
}

/// The rebuilt state at `seq`, or 404 naming the run's last checkpoint.
async fn state_of(state: &Shared, run: &RunRow, seq: u64) -> Result<Value, ApiError> {
    if seq > run.last_seq {
        return Err(ApiError::not_found(format!(
            "run `{}` has no checkpoint {seq}; its last is {}",
            run.id, run.last_seq
        )));
    }
    let loaded =
        state.store.state_at(&run.id, seq).await?.ok_or_else(|| {
            ApiError::not_found(format!("run `{}` has no checkpoint {seq}", run.id))
        })?;
    Ok(loaded.state)
}

async fn state_at(
    State(state): State<Shared>,
    Path((run_id, seq)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let seq = parse_seq(&seq, "the checkpoint")?;
    let run = find_run(&state, &run_id).await?;
    let value = state_of(&state, &run, seq).await?;
    Ok(Json(json!({ "run_id": run_id, "seq": seq, "state": value })).into_response())
}

async fn diff(
    State(state): State<Shared>,
    Path(run_id): Path<String>,
    Params(params): Params,
) -> Result<Response, ApiError> {
    let bound = |name: &str| -> Result<u64, ApiError> {
        let text = params.get(name).ok_or_else(|| {
            ApiError::bad_request(format!("give `{name}`: /api/runs/ID/diff?from=SEQ&to=SEQ"))
        })?;
        parse_seq(text, name)
    };
    let (from, to) = (bound("from")?, bound("to")?);
    let run = find_run(&state, &run_id).await?;
    let before = state_of(&state, &run, from).await?;
    let after = state_of(&state, &run, to).await?;
    Ok(Json(json!({
        "run_id": run_id,
        "from": from,
        "to": to,
        "fields": state_diff(&before, &after),
    }))
    .into_response())
}

/// The top-level fields that differ between two states: each with its
/// value before and after (absent on the side that lacks it), by name.
pub(crate) fn state_diff(before: &Value, after: &Value) -> Map<String, Value> {
    let empty = Map::new();
    let before = before.as_object().unwrap_or(&empty);
    let after = after.as_object().unwrap_or(&empty);
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    let mut fields = Map::new();
    for name in names {
        let (b, a) = (before.get(name), after.get(name));
        if b != a {
            let mut field = Map::new();
            if let Some(b) = b {
                field.insert("before".into(), b.clone());
            }
            if let Some(a) = a {
                field.insert("after".into(), a.clone());
            }
            fields.insert(name.clone(), Value::Object(field));
        }
    }
    fields
}

async fn artifact(
    State(state): State<Shared>,
    Path((run_id, name)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    find_run(&state, &run_id).await?;
    let artifacts = state.store.artifacts(&run_id).await?;
    let Some(row) = artifacts.iter().find(|a| a.name == name) else {
        let names: Vec<&str> = artifacts.iter().map(|a| a.name.as_str()).collect();
        return Err(ApiError::not_found(format!(
            "run `{run_id}` has no artifact `{name}`; it has: {}",
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )));
    };
    let bytes = state
        .store
        .artifact_bytes(&row.digest)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "artifact `{name}` of run `{run_id}` points at blob sha256:{} that the store \
                     does not hold",
                    row.digest
                ),
            )
        })?;
    Ok((
        crate::headers::artifact_headers(&row.media_type, &name),
        bytes,
    )
        .into_response())
}

async fn start_run(
    State(state): State<Shared>,
    JsonObject(mut body): JsonObject,
) -> Result<Response, ApiError> {
    let known = || {
        state
            .scenarios
            .keys()
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    };
    let name = match body.remove("scenario") {
        Some(Value::String(name)) => name,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "`scenario` must be a scenario's name (a string), not {}",
                kind_of(&other)
            )));
        }
        None => {
            return Err(ApiError::bad_request(format!(
                "give `scenario`, one of: {}",
                known()
            )));
        }
    };
    if let Some(unavailable) = state.unavailable.get(&name) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            format!(
                "scenario `{name}` cannot run on this server: {}\nfix it (`host check {}` \
                 shows the same) and restart `host serve`; GET /api/scenarios lists what it \
                 can start",
                unavailable.reason,
                unavailable.path.display()
            ),
        ));
    }
    let loaded = state.scenarios.get(&name).ok_or_else(|| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!(
                "this server does not know scenario `{name}`; it can start: {} (add one with \
                 `host serve --scenarios DIR`)",
                if state.scenarios.is_empty() {
                    "none".to_string()
                } else {
                    known()
                }
            ),
        )
    })?;
    let input = body.remove("input").unwrap_or_else(|| json!({}));
    if !input.is_object() {
        return Err(ApiError::bad_request(format!(
            "`input` must be a JSON object with the fields of scenario `{name}`'s [input], not {}",
            kind_of(&input)
        )));
    }
    if let Some(extra) = body.keys().next() {
        return Err(ApiError::bad_request(format!(
            "unknown field `{extra}` in the request; give `scenario` and `input`"
        )));
    }
    let id = match state
        .service
        .enqueue(loaded, input, RunRequest::default())
        .await?
    {
        Queued::Created { run_id } | Queued::Existing { run_id } => run_id,
    };
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, format!("/api/runs/{id}"))],
        Json(json!({ "id": id, "scenario": name, "status": "queued" })),
    )
        .into_response())
}

/// `by` from a body, default `api`: who answered or cancelled.
fn who(body: &mut Map<String, Value>) -> Result<String, ApiError> {
    match body.remove("by") {
        None | Some(Value::Null) => Ok("api".into()),
        Some(Value::String(by)) if !by.trim().is_empty() && by.len() <= 200 => Ok(by),
        Some(_) => Err(ApiError::bad_request(
            "`by` must be a non-empty name of at most 200 bytes",
        )),
    }
}

async fn answer(
    State(state): State<Shared>,
    Path(run_id): Path<String>,
    JsonObject(mut body): JsonObject,
) -> Result<Response, ApiError> {
    let by = who(&mut body)?;
    let answer = body.remove("answer").ok_or_else(|| {
        ApiError::bad_request(
            "give the answer as {\"answer\": {FIELD: VALUE, …}}; GET /api/runs/ID shows the \
             fields a waiting run asks for",
        )
    })?;
    if !answer.is_object() {
        return Err(ApiError::bad_request(format!(
            "`answer` must be a JSON object of the wait's fields, not {}",
            kind_of(&answer)
        )));
    }
    let answered = state.service.answer(&run_id, answer, &by).await?;
    Ok(Json(json!({
        "run_id": answered.run_id,
        "node": answered.node_id,
        "seq": answered.seq,
        "answer": answered.answer,
        "by": answered.by,
        "status": "queued",
    }))
    .into_response())
}

async fn cancel(
    State(state): State<Shared>,
    Path(run_id): Path<String>,
    JsonObject(mut body): JsonObject,
) -> Result<Response, ApiError> {
    let by = who(&mut body)?;
    let result = match state.service.cancel(&run_id, &by).await? {
        Cancelled::Now(_) => "cancelled",
        Cancelled::Requested => "cancel-requested",
    };
    Ok(Json(json!({ "run_id": run_id, "result": result, "by": by })).into_response())
}

/// The scenarios it can start (`available: true`), then those it was
/// given but cannot run, each with the loader's or checker's `reason`.
async fn scenarios(State(state): State<Shared>) -> Json<Value> {
    let ready = state.scenarios.values().map(|loaded| {
        let s = &loaded.scenario;
        json!({
            "name": s.name,
            "available": true,
            "description": s.description,
            "version": s.version,
            "input_schema": s.input_schema,
        })
    });
    let unavailable = state.unavailable.values().map(|u| {
        json!({
            "name": u.name,
            "available": false,
            "reason": u.reason,
        })
    });
    let list: Vec<Value> = ready.chain(unavailable).collect();
    Json(json!({ "scenarios": list }))
}

pub(crate) const OPENAPI: &str = include_str!("../assets/openapi.json");

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// The id of the trace a run's spans go to (32 hex digits, from its
/// provenance; None for a run created before runs kept one), with its link
/// to the trace viewer when the server was given a template.
pub(crate) fn trace_of(state: &Shared, run: &RunRow) -> Option<(String, Option<String>)> {
    let id = run
        .provenance
        .as_ref()
        .and_then(|p| p.trace.as_deref())
        .and_then(skillhost_telemetry::trace_id_of)?;
    let url = state
        .trace_url
        .as_deref()
        .map(|template| skillhost_telemetry::trace_link(template, &id));
    Some((id, url))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_describes_every_route() {
        let doc: Value = serde_json::from_str(OPENAPI).expect("assets/openapi.json is JSON");
        assert_eq!(doc["openapi"].as_str().map(|v| &v[..3]), Some("3.1"));
        let paths = doc["paths"].as_object().expect("paths");
        for (method, path) in crate::API_ROUTES {
            assert!(
                paths.get(*path).and_then(|p| p.get(*method)).is_some(),
                "assets/openapi.json lacks {method} {path}"
            );
        }
        let described: usize = paths
            .values()
            .map(|p| p.as_object().map_or(0, |m| m.len()))
            .sum();
        assert_eq!(
            described,
            crate::API_ROUTES.len(),
            "routes the server lacks"
        );
    }

    #[test]
    fn a_diff_names_changed_added_and_removed_fields() {
        let before = json!({"a": 1, "b": [1], "gone": true});
        let after = json!({"a": 1, "b": [1, 2], "new": "x"});
        let fields = state_diff(&before, &after);
        assert_eq!(
            Value::Object(fields),
            json!({
                "b": {"before": [1], "after": [1, 2]},
                "gone": {"before": true},
                "new": {"after": "x"},
            })
        );
    }

    #[test]
    fn bad_list_parameters_are_refused_by_name() {
        let params = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<HashMap<_, _>>()
        };
        let err = run_filter(&params(&[("status", "done")])).unwrap_err();
        assert!(
            err.message.contains("unknown status `done`"),
            "{}",
            err.message
        );
        let err = run_filter(&params(&[("limit", "0")])).unwrap_err();
        assert!(err.message.contains("limit"), "{}", err.message);
        let err = run_filter(&params(&[("cursor", "nope")])).unwrap_err();
        assert!(err.message.contains("cursor"), "{}", err.message);
        let ok = run_filter(&params(&[
            ("status", "completed"),
            ("scenario", "research"),
        ]))
        .unwrap();
        assert_eq!(ok.status, Some(RunStatus::Completed));
        assert_eq!(ok.scenario.as_deref(), Some("research"));
        assert_eq!(ok.limit, DEFAULT_PAGE);
    }
}
