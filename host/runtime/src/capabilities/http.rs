//! The `http` capability: outbound requests to the hosts a scenario lists.
//!
//! The contract is designed and linked, but this host does not perform HTTP
//! yet: a grant is refused with that reason (so no scenario believes it has
//! network access), and every call is denied.

use super::bindings::skillhost::skill::http::{Host, Request, Response};
use super::{Capability, GrantError, GuestError, denied};
use crate::call::CallState;

/// The hosts a skill may reach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpGrant {
    pub hosts: Vec<String>,
}

impl HttpGrant {
    pub fn parse(value: &str) -> Result<Self, GrantError> {
        let _ = value;
        Err(GrantError::new(
            "http",
            "outbound HTTP is part of the skill contract but not implemented by this host yet; \
             ship the data with the scenario (the `fs` capability) instead",
        ))
    }
}

impl Host for CallState {
    fn fetch(&mut self, _request: Request) -> Result<Response, GuestError> {
        Err(denied(self, Capability::Http))
    }
}
