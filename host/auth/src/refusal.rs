//! A request refused before any handler saw it, and how each server says
//! so: `{"error": "…"}` (`host serve`), or a JSON-RPC error without an id
//! (`host mcp`), which MCP clients show as it is where they would report a
//! bare status as an unspecified failure.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// The body a server's refusals have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `{"error": "…"}`.
    Json,
    /// `{"jsonrpc": "2.0", "id": null, "error": {"code": …, "message": "…"}}`.
    JsonRpc,
}

/// JSON-RPC's code for a request that is not a valid one.
pub const INVALID_REQUEST: i64 = -32600;

/// The code a missing or wrong token gets in a JSON-RPC refusal (in the
/// range JSON-RPC leaves to servers).
pub const UNAUTHORIZED: i64 = -32001;

/// Why a request was refused: its status and a message that says what to
/// send instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Refusal {
            status,
            message: message.into(),
        }
    }

    /// The refusal in `shape`; a 401 carries the `Bearer` challenge RFC
    /// 6750 asks for.
    pub fn response(&self, shape: Shape) -> Response {
        let body = match shape {
            Shape::Json => serde_json::json!({ "error": self.message }),
            Shape::JsonRpc => serde_json::json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {
                    "code": if self.status == StatusCode::UNAUTHORIZED {
                        UNAUTHORIZED
                    } else {
                        INVALID_REQUEST
                    },
                    "message": self.message,
                },
            }),
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}
