//! Outbound HTTP to the hosts the scenario lists (`http = "api.example.org"`).
//! The host records every response in the run's journal, so a replay sees
//! the same bytes.
//!
//! On native targets there is no network: a test installs a handler with
//! [`crate::testing::set_http_handler`]; without one, `fetch` returns
//! `capability-not-granted`.

use crate::SkillError;
pub use crate::bindings::skillhost::skill::http::{Request, Response};

/// Sends `request` and returns the whole response.
pub fn fetch(request: &Request) -> Result<Response, SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::http::fetch(request);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::http_fetch(request);
}

/// A `GET` of `url` with no headers.
pub fn get(url: &str) -> Result<Response, SkillError> {
    fetch(&Request {
        method: "GET".to_string(),
        url: url.to_string(),
        headers: Vec::new(),
        body: None,
        timeout_ms: None,
    })
}
