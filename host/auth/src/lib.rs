//! The bearer-token rule of the host's HTTP servers (`host serve`,
//! `host mcp --http`): a server bound to a loopback address trusts its
//! machine; any other address needs a token; with a token set, the
//! requests a server guards must carry it as `Authorization: Bearer TOKEN`,
//! compared in constant time.
//!
//! Must not: let a server start on a non-loopback address without a
//! token, or say anything about the token in an error beyond that it is
//! missing or wrong. Which requests are guarded is the server's choice
//! ([`Guarded`]); the refusal is always a 401 with a `Bearer` challenge and
//! a JSON body saying what to send: `{"error": "…"}`, or for a JSON-RPC
//! endpoint (MCP) a JSON-RPC error, which clients show as it is.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// Why a server will not listen where it was asked to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error(
        "{flag} {addr} is not a loopback address: anyone who reaches it could start, answer and \
         cancel runs. Give a token with --token T or --token-file FILE (clients send \
         `Authorization: Bearer T`), or bind 127.0.0.1"
    )]
    TokenRequired {
        /// The flag that named the address (`--addr`, `--http`).
        flag: &'static str,
        addr: SocketAddr,
    },
    #[error("the token is empty; give a non-empty --token or a --token-file that holds one")]
    EmptyToken,
}

/// Refuses a non-loopback `addr` (named by `flag`) without a token, and an
/// empty token.
pub fn check_bind(
    flag: &'static str,
    addr: SocketAddr,
    token: Option<&str>,
) -> Result<(), BindError> {
    match token {
        Some(token) if token.trim().is_empty() => Err(BindError::EmptyToken),
        Some(_) => Ok(()),
        None if addr.ip().is_loopback() => Ok(()),
        None => Err(BindError::TokenRequired { flag, addr }),
    }
}

/// A `--token-file`'s token: its first line, trimmed.
pub fn read_token_file(file: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("cannot read --token-file {}: {e}", file.display()))?;
    Ok(text.lines().next().unwrap_or("").trim().to_string())
}

/// Which requests must carry the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guarded {
    /// Every request.
    All,
    /// Every request but GET and HEAD (reading is open, changing is not).
    Changes,
}

/// The token a server requires, and of which requests.
#[derive(Debug, Clone)]
pub struct TokenGuard {
    token: Option<Arc<str>>,
    guarded: Guarded,
    json_rpc: bool,
}

impl TokenGuard {
    /// `token` None lets every request through.
    pub fn new(token: Option<String>, guarded: Guarded) -> Self {
        TokenGuard {
            token: token.map(Arc::from),
            guarded,
            json_rpc: false,
        }
    }

    /// Refusals as a JSON-RPC error (`id` null, code -32001) instead of
    /// `{"error": "…"}`: an MCP client surfaces its message, where it would
    /// report a bare 401 as an unspecified failure.
    pub fn json_rpc(mut self) -> Self {
        self.json_rpc = true;
        self
    }

    /// Whether `request` may go on; why not when not.
    fn admit(&self, request: &Request) -> Result<(), &'static str> {
        let Some(token) = self.token.as_deref() else {
            return Ok(());
        };
        if self.guarded == Guarded::Changes
            && matches!(*request.method(), Method::GET | Method::HEAD)
        {
            return Ok(());
        }
        let given = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        match given {
            Some(given) if same(given.trim().as_bytes(), token.as_bytes()) => Ok(()),
            Some(_) => Err("the bearer token is wrong; send the server's token as \
                 `Authorization: Bearer TOKEN`"),
            None => Err(match self.guarded {
                Guarded::All => {
                    "this server needs a token; send `Authorization: Bearer TOKEN` \
                     with every request"
                }
                Guarded::Changes => {
                    "this server needs a token for requests that change something; send \
                     `Authorization: Bearer TOKEN`"
                }
            }),
        }
    }

    /// A 401 in the server's error shape, with the challenge RFC 6750 asks
    /// for.
    fn unauthorized(&self, message: &str) -> Response {
        let body = if self.json_rpc {
            serde_json::json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": { "code": -32001, "message": message },
            })
        } else {
            serde_json::json!({ "error": message })
        };
        let mut response = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        response
    }
}

/// The middleware (`axum::middleware::from_fn_with_state` with a
/// [`TokenGuard`]): a guarded request without the token is answered 401.
pub async fn require_token(
    State(guard): State<TokenGuard>,
    request: Request,
    next: Next,
) -> Response {
    match guard.admit(&request) {
        Ok(()) => next.run(request).await,
        Err(why) => guard.unauthorized(why),
    }
}

/// Compares without stopping at the first difference, so the time taken
/// says nothing about how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    #[test]
    fn loopback_needs_no_token_and_others_do() {
        let local: SocketAddr = "127.0.0.1:7700".parse().unwrap();
        let v6: SocketAddr = "[::1]:7700".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7700".parse().unwrap();
        let lan: SocketAddr = "192.168.1.2:7700".parse().unwrap();
        assert_eq!(check_bind("--addr", local, None), Ok(()));
        assert_eq!(check_bind("--addr", v6, None), Ok(()));
        assert_eq!(
            check_bind("--addr", any, None),
            Err(BindError::TokenRequired {
                flag: "--addr",
                addr: any
            })
        );
        let lan_refused = check_bind("--http", lan, None).unwrap_err().to_string();
        assert!(lan_refused.starts_with("--http 192.168.1.2:7700 is not a loopback address"));
        assert_eq!(check_bind("--addr", any, Some("s3cret")), Ok(()));
        assert_eq!(
            check_bind("--addr", local, Some("  ")),
            Err(BindError::EmptyToken)
        );
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }

    fn request(method: Method, authorization: Option<&str>) -> Request {
        let mut builder = Request::builder().method(method).uri("/x");
        if let Some(value) = authorization {
            builder = builder.header(header::AUTHORIZATION, value);
        }
        builder.body(Body::empty()).unwrap()
    }

    #[test]
    fn guarded_requests_carry_the_token() {
        let all = TokenGuard::new(Some("s3cret".into()), Guarded::All);
        let changes = TokenGuard::new(Some("s3cret".into()), Guarded::Changes);
        let open = TokenGuard::new(None, Guarded::All);
        assert!(
            all.admit(&request(Method::POST, Some("Bearer s3cret")))
                .is_ok()
        );
        assert!(
            all.admit(&request(Method::GET, Some("Bearer s3cret")))
                .is_ok()
        );
        let missing = all.admit(&request(Method::GET, None)).unwrap_err();
        assert!(missing.contains("with every request"), "{missing}");
        let refusal = all.unauthorized(missing);
        assert_eq!(refusal.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(refusal.headers()[header::WWW_AUTHENTICATE], "Bearer");
        let wrong = all
            .admit(&request(Method::POST, Some("Bearer guess")))
            .unwrap_err();
        assert!(wrong.contains("wrong"), "{wrong}");
        assert!(changes.admit(&request(Method::GET, None)).is_ok());
        assert!(changes.admit(&request(Method::POST, None)).is_err());
        assert!(open.admit(&request(Method::POST, None)).is_ok());
    }
}
