//! The API's one error shape: `{"error": "…"}` with its HTTP status, and
//! the mapping of the library's errors onto statuses (an unknown run is
//! 404, a bad request 400, input that does not fit 422, a conflict with
//! the run's state 409, the store's own failure 500 or 503).
//!
//! Must not: hide which run, field or node a message is about.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use skillhost_engine::{EngineError, Remedies, Remedy};
use skillhost_store::StoreError;

/// An error answered as JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, message)
    }

    pub fn unknown_run(run_id: &str) -> Self {
        ApiError::not_found(format!(
            "no run `{run_id}` in this database; GET /api/runs lists the runs there are"
        ))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response =
            (self.status, axum::Json(json!({ "error": self.message }))).into_response();
        if self.status == StatusCode::PAYLOAD_TOO_LARGE {
            // The rest of the body was never read, so the connection cannot
            // carry another request: say so, or a client that reuses it
            // (reqwest's pool does) sends its next request into a closed
            // socket.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let status = if error.is_conflict() {
            StatusCode::CONFLICT
        } else if error.is_unreachable() {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        ApiError::new(status, error.to_string())
    }
}

impl From<EngineError> for ApiError {
    fn from(error: EngineError) -> Self {
        let status = match &error {
            EngineError::UnknownRun(_) => StatusCode::NOT_FOUND,
            EngineError::InvalidAnswer { .. } | EngineError::InvalidInput { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            EngineError::NotWaiting { .. }
            | EngineError::AlreadyAnswered { .. }
            | EngineError::WaitTimedOut { .. }
            | EngineError::NothingToCancel { .. } => StatusCode::CONFLICT,
            EngineError::Store(e) if e.is_conflict() => StatusCode::CONFLICT,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError::new(status, error.render(&Routes))
    }
}

/// The library's remedies as this API's routes: what a client can request
/// about a refusal. What no route does (resuming: the server's worker
/// does it; exports) the message says in plain words.
pub struct Routes;

impl Remedies for Routes {
    fn way(&self, remedy: &Remedy) -> Option<String> {
        // A run id is a path segment: one that is not plain text is
        // written percent-encoded, so the route names that run only.
        let run = |id: &str| crate::pages::path_segment(id);
        match remedy {
            Remedy::ShowRun { run: id } => Some(format!("GET /api/runs/{}", run(id))),
            Remedy::AnswerRun { run: id } => Some(format!("POST /api/runs/{}/answer", run(id))),
            Remedy::CancelRun { run: id } => Some(format!("POST /api/runs/{}/cancel", run(id))),
            Remedy::ListRuns { waiting: false } => Some("GET /api/runs".into()),
            Remedy::ListRuns { waiting: true } => Some("GET /api/runs?status=waiting".into()),
            Remedy::StartRun => Some("POST /api/runs".into()),
            Remedy::ListCheckpoints { run: id } => {
                Some(format!("GET /api/runs/{}/checkpoints", run(id)))
            }
            Remedy::ResumeRun { .. }
            | Remedy::ResumeChanged { .. }
            | Remedy::ExportRun { .. }
            | Remedy::ReplayExport => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run that waits: the JSON error says to answer it or cancel it with
    /// this API's routes (a hostile run id percent-encoded in them), and
    /// names no `host` command.
    #[test]
    fn a_waiting_runs_error_names_the_routes_and_no_host_command() {
        let error = ApiError::from(EngineError::Waiting {
            id: "r1".into(),
            node: "approve".into(),
            prompt: "Ship?".into(),
        });
        assert_eq!(
            error.message,
            "run `r1` is waiting for an answer at node `approve` (Ship?); answer it with POST \
             /api/runs/r1/answer, or cancel it with POST /api/runs/r1/cancel"
        );
        let hostile = ApiError::from(EngineError::AlreadyAnswered {
            id: "../x y?\n".into(),
            node: "approve".into(),
            by: "alice".into(),
            at: "T".into(),
            status: "completed".into(),
        });
        assert_eq!(hostile.status, StatusCode::CONFLICT);
        assert!(
            hostile
                .message
                .ends_with("(see it with GET /api/runs/..%2Fx%20y%3F%0A)"),
            "{}",
            hostile.message
        );
        assert!(!hostile.message.contains("host "), "{}", hostile.message);
    }
}
