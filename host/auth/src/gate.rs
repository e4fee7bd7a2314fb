//! The checks every request to a server passes before a handler sees it,
//! in order: its `Host` and `Origin` ([`AllowedHosts`]), its token when the
//! server has one ([`TokenGuard`]), and, for a request with a body, that
//! the body says it is JSON. A page of another site can send a `POST`
//! without asking first only as a form or with `text/plain` (a "simple"
//! request); requiring `Content-Type: application/json` leaves it none
//! the server reads.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;

use crate::{AllowedHosts, Refusal, Shape, TokenGuard};

/// What a server requires of every request.
#[derive(Debug, Clone)]
pub struct Gate {
    hosts: AllowedHosts,
    token: Option<TokenGuard>,
    shape: Shape,
}

impl Gate {
    pub fn new(hosts: AllowedHosts, token: Option<TokenGuard>, shape: Shape) -> Self {
        Gate {
            hosts,
            token,
            shape,
        }
    }

    pub fn token(&self) -> Option<&TokenGuard> {
        self.token.as_ref()
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The `Host` and the `Origin`.
    pub fn check_site(&self, request: &Request) -> Result<(), Refusal> {
        self.hosts.check_host(request.headers(), request.uri())?;
        self.hosts.check_origin(request.headers())
    }

    /// The token, when the server has one.
    pub fn check_token(&self, request: &Request) -> Result<(), Refusal> {
        match &self.token {
            Some(guard) => guard.admit(request.headers()),
            None => Ok(()),
        }
    }

    /// A request with a body (any method but GET, HEAD, DELETE and
    /// OPTIONS) says it is JSON.
    pub fn check_body_type(&self, request: &Request) -> Result<(), Refusal> {
        if matches!(
            *request.method(),
            Method::GET | Method::HEAD | Method::DELETE | Method::OPTIONS
        ) || is_json(request.headers())
        {
            return Ok(());
        }
        let given = request
            .headers()
            .get(header::CONTENT_TYPE)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
        Err(Refusal::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "a {} must send its body as JSON with `Content-Type: application/json`, not {}",
                request.method(),
                match given {
                    Some(given) => format!("`{}`", given.escape_debug()),
                    None => "without a Content-Type".into(),
                }
            ),
        ))
    }

    /// Every check, in order.
    pub fn check(&self, request: &Request) -> Result<(), Refusal> {
        self.check_site(request)?;
        self.check_token(request)?;
        self.check_body_type(request)
    }
}

/// Whether the request's `Content-Type` is `application/json` (in any
/// case, with parameters or not).
pub fn is_json(headers: &HeaderMap) -> bool {
    let mut values = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(value), None) = (values.next(), values.next()) else {
        return false;
    };
    let Ok(text) = value.to_str() else {
        return false;
    };
    let essence = text.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
}

/// The middleware (`axum::middleware::from_fn_with_state` with an
/// `Arc<Gate>`): a request that fails a check is answered with its
/// refusal, in the gate's shape.
pub async fn guard(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    match gate.check(&request) {
        Ok(()) => next.run(request).await,
        Err(refusal) => refusal.response(gate.shape),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn gate(token: Option<&str>) -> Gate {
        let hosts = AllowedHosts::new("127.0.0.1:7700".parse().unwrap(), &[]).unwrap();
        Gate::new(hosts, token.map(|t| TokenGuard::new(t.into())), Shape::Json)
    }

    fn request(method: Method, headers: &[(&str, &str)]) -> Request {
        let mut builder = Request::builder()
            .method(method)
            .uri("/api/x")
            .header("host", "127.0.0.1:7700");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::empty()).unwrap()
    }

    #[test]
    fn a_body_must_say_it_is_json() {
        let gate = gate(None);
        for ok in [
            "application/json",
            "Application/JSON",
            "application/json; charset=utf-8",
        ] {
            assert_eq!(
                gate.check(&request(Method::POST, &[("content-type", ok)])),
                Ok(()),
                "{ok}"
            );
        }
        for bad in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonx",
            "application/json-seq",
        ] {
            let refusal = gate
                .check(&request(Method::POST, &[("content-type", bad)]))
                .unwrap_err();
            assert_eq!(refusal.status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{bad}");
            assert!(refusal.message.contains("application/json"), "{refusal:?}");
        }
        assert!(gate.check(&request(Method::POST, &[])).is_err());
        assert!(gate.check(&request(Method::PUT, &[])).is_err());
        assert!(gate.check(&request(Method::GET, &[])).is_ok());
        assert!(gate.check(&request(Method::DELETE, &[])).is_ok());
    }

    #[test]
    fn the_site_is_checked_before_the_token() {
        let gate = gate(Some("s3cret"));
        let refusal = gate
            .check(&request(Method::GET, &[("origin", "http://evil.example")]))
            .unwrap_err();
        assert_eq!(refusal.status, StatusCode::FORBIDDEN);
        let refusal = gate.check(&request(Method::GET, &[])).unwrap_err();
        assert_eq!(refusal.status, StatusCode::UNAUTHORIZED);
        assert!(
            gate.check(&request(Method::GET, &[("authorization", "bearer s3cret")]))
                .is_ok()
        );
        let response = refusal.response(Shape::JsonRpc);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(response.headers()[header::WWW_AUTHENTICATE], "Bearer");
    }
}
