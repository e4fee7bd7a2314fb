//! The API's one error shape: `{"error": "…"}` with its HTTP status, and
//! the mapping of the library's errors onto statuses (an unknown run is
//! 404, a bad request 400, input that does not fit 422, a conflict with
//! the run's state 409, the store's own failure 500 or 503).
//!
//! Must not: hide which run, field or node a message is about.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use skillhost_engine::EngineError;
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
        ApiError::new(status, error.to_string())
    }
}
