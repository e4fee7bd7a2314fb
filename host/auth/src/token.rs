//! The token: sent as `Authorization: Bearer TOKEN` (the scheme in any
//! case, as RFC 9110 makes it), or, for a server with pages, held by the
//! browser in a sign-in cookie the server set (`HttpOnly`, so no script
//! reads it; `SameSite=Strict`, so no other site's request carries it).
//! The cookie holds a digest of the token, not the token. Both are
//! compared in constant time.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use sha2::{Digest, Sha256};

use crate::Refusal;

/// The token a server requires, and the name of its sign-in cookie if it
/// has one.
#[derive(Debug, Clone)]
pub struct TokenGuard {
    token: Arc<str>,
    cookie: Option<Arc<str>>,
}

impl TokenGuard {
    pub fn new(token: String) -> Self {
        TokenGuard {
            token: Arc::from(token),
            cookie: None,
        }
    }

    /// Accepts the sign-in cookie `name` too (see [`TokenGuard::set_cookie`]).
    pub fn with_cookie(mut self, name: impl Into<String>) -> Self {
        self.cookie = Some(Arc::from(name.into()));
        self
    }

    /// Whether `given` is the token.
    pub fn matches(&self, given: &str) -> bool {
        same(given.trim().as_bytes(), self.token.as_bytes())
    }

    /// Whether the request carries the token, as a bearer token or in the
    /// sign-in cookie; why not when not.
    pub fn admit(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let authorization = headers
            .get(header::AUTHORIZATION)
            .map(|value| value.to_str().ok().and_then(bearer));
        match authorization {
            Some(Some(given)) if self.matches(given) => return Ok(()),
            Some(Some(_)) => {
                return Err(Refusal::new(
                    StatusCode::UNAUTHORIZED,
                    "the bearer token is wrong; send the server's token as \
                     `Authorization: Bearer TOKEN`",
                ));
            }
            // Another scheme, or a value that is not text: as if missing.
            Some(None) | None => {}
        }
        if let Some(value) = self
            .cookie
            .as_deref()
            .and_then(|name| cookie(headers, name))
        {
            if same(value.as_bytes(), self.cookie_value().as_bytes()) {
                return Ok(());
            }
            return Err(Refusal::new(
                StatusCode::UNAUTHORIZED,
                "this browser's sign-in is not for this server's token (was the server \
                 restarted with another?); sign in again with the token",
            ));
        }
        Err(Refusal::new(
            StatusCode::UNAUTHORIZED,
            if self.cookie.is_some() {
                "this server needs its token: send `Authorization: Bearer TOKEN` with every \
                 request, or sign in with it on the inspector's page"
            } else {
                "this server needs a token; send `Authorization: Bearer TOKEN` with every request"
            },
        ))
    }

    /// What the sign-in cookie holds: the token's SHA-256 under a label,
    /// in hex, so a browser never stores the token itself.
    fn cookie_value(&self) -> String {
        let digest = Sha256::new()
            .chain_update(b"skillhost sign-in cookie\n")
            .chain_update(self.token.as_bytes())
            .finalize();
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The `Set-Cookie` that signs a browser in: `HttpOnly` (no script
    /// reads it), `SameSite=Strict` (no request another site starts
    /// carries it), for every path, until the browser closes. None
    /// without a cookie name.
    pub fn set_cookie(&self) -> Option<HeaderValue> {
        let name = self.cookie.as_deref()?;
        let value = format!(
            "{name}={}; Path=/; HttpOnly; SameSite=Strict",
            self.cookie_value()
        );
        HeaderValue::from_str(&value).ok()
    }

    /// The `Set-Cookie` that signs a browser out.
    pub fn clear_cookie(&self) -> Option<HeaderValue> {
        let name = self.cookie.as_deref()?;
        HeaderValue::from_str(&format!(
            "{name}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
        ))
        .ok()
    }
}

/// The credentials of an `Authorization` value whose scheme is `Bearer`,
/// in any case.
pub fn bearer(value: &str) -> Option<&str> {
    let value = value.trim_start();
    let (scheme, rest) = value.split_once([' ', '\t'])?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

/// The value of cookie `name` in the request's `Cookie` headers.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value.trim())
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

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"abcd"));
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        for ok in [
            "Bearer s3cret",
            "bearer s3cret",
            "BEARER s3cret",
            "bEaReR   s3cret ",
        ] {
            assert_eq!(bearer(ok), Some("s3cret"), "{ok}");
        }
        for not in ["Basic czNjcmV0", "Bearers3cret", "Bearer", "s3cret"] {
            assert_eq!(bearer(not), None, "{not}");
        }
    }

    #[test]
    fn a_request_carries_the_token_or_is_told_how() {
        let guard = TokenGuard::new("s3cret".into());
        for ok in ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"] {
            assert_eq!(
                guard.admit(&headers(&[(header::AUTHORIZATION, ok)])),
                Ok(()),
                "{ok}"
            );
        }
        let missing = guard.admit(&HeaderMap::new()).unwrap_err();
        assert_eq!(missing.status, StatusCode::UNAUTHORIZED);
        assert!(
            missing.message.contains("with every request"),
            "{missing:?}"
        );
        let wrong = guard
            .admit(&headers(&[(header::AUTHORIZATION, "Bearer guess")]))
            .unwrap_err();
        assert!(wrong.message.contains("wrong"), "{wrong:?}");
        assert!(!wrong.message.contains("s3cret"), "{wrong:?}");
        let basic = guard
            .admit(&headers(&[(header::AUTHORIZATION, "Basic czNjcmV0")]))
            .unwrap_err();
        assert!(basic.message.contains("Authorization: Bearer"), "{basic:?}");
    }

    #[test]
    fn the_cookie_holds_a_digest_and_signs_in() {
        let guard = TokenGuard::new("s3cret".into()).with_cookie("sh-7700");
        let set = guard.set_cookie().unwrap();
        let set = set.to_str().unwrap();
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(!set.contains("s3cret"), "{set}");
        let pair = set.split(';').next().unwrap();
        let cookie = format!("other=1; {pair}");
        assert_eq!(guard.admit(&headers(&[(header::COOKIE, &cookie)])), Ok(()));
        let stale = guard
            .admit(&headers(&[(header::COOKIE, "sh-7700=0123")]))
            .unwrap_err();
        assert!(stale.message.contains("sign in again"), "{stale:?}");
        // The token itself in the cookie is not a sign-in.
        assert!(
            guard
                .admit(&headers(&[(header::COOKIE, "sh-7700=s3cret")]))
                .is_err()
        );
        // Another server's guard ignores the cookie.
        let other = TokenGuard::new("s3cret".into());
        assert!(other.admit(&headers(&[(header::COOKIE, &cookie)])).is_err());
        assert!(other.set_cookie().is_none());
        assert!(
            guard
                .clear_cookie()
                .unwrap()
                .to_str()
                .unwrap()
                .contains("Max-Age=0")
        );
    }
}
