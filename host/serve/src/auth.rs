//! Who may change things: a server bound to a loopback address trusts its
//! machine; any other address needs a token, and with a token set every
//! request that changes something (any method but GET and HEAD) must carry
//! it as `Authorization: Bearer TOKEN`.
//!
//! Must not: start on a non-loopback address without a token, or say
//! anything about the token in an error beyond that it is missing or wrong.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::ApiError;

/// Why the server will not listen where it was asked to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BindError {
    #[error(
        "--addr {0} is not a loopback address: anyone who reaches it could start, answer and \
         cancel runs. Give a token with --token T or --token-file FILE (clients send \
         `Authorization: Bearer T`), or bind 127.0.0.1"
    )]
    TokenRequired(SocketAddr),
    #[error("the token is empty; give a non-empty --token or a --token-file that holds one")]
    EmptyToken,
}

/// Refuses a non-loopback `addr` without a token, and an empty token.
pub fn check_bind(addr: SocketAddr, token: Option<&str>) -> Result<(), BindError> {
    match token {
        Some(token) if token.trim().is_empty() => Err(BindError::EmptyToken),
        Some(_) => Ok(()),
        None if addr.ip().is_loopback() => Ok(()),
        None => Err(BindError::TokenRequired(addr)),
    }
}

/// The middleware: a request that changes something carries the token.
pub(crate) async fn require_token(
    State(token): State<Arc<Option<String>>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(token) = token.as_deref() else {
        return next.run(request).await;
    };
    if matches!(*request.method(), Method::GET | Method::HEAD) {
        return next.run(request).await;
    }
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match given {
        Some(given) if same(given.trim().as_bytes(), token.as_bytes()) => next.run(request).await,
        Some(_) => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "the bearer token is wrong; send the server's token as `Authorization: Bearer TOKEN`",
        )
        .into_response(),
        None => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "this server needs a token for requests that change something; send \
             `Authorization: Bearer TOKEN`",
        )
        .into_response(),
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

    #[test]
    fn loopback_needs_no_token_and_others_do() {
        let local: SocketAddr = "127.0.0.1:7700".parse().unwrap();
        let v6: SocketAddr = "[::1]:7700".parse().unwrap();
        let any: SocketAddr = "0.0.0.0:7700".parse().unwrap();
        let lan: SocketAddr = "192.168.1.2:7700".parse().unwrap();
        assert_eq!(check_bind(local, None), Ok(()));
        assert_eq!(check_bind(v6, None), Ok(()));
        assert_eq!(check_bind(any, None), Err(BindError::TokenRequired(any)));
        assert_eq!(check_bind(lan, None), Err(BindError::TokenRequired(lan)));
        assert_eq!(check_bind(any, Some("s3cret")), Ok(()));
        assert_eq!(check_bind(local, Some("  ")), Err(BindError::EmptyToken));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }
}
