//! The `http` capability: outbound requests to the hosts a scenario lists.
//!
//! The contract is designed and linked, but this host does not perform HTTP
//! yet: a grant is refused with that reason (so no scenario believes it has
//! network access), and every call is denied. The module has the shape of a
//! capability with a backend: once [`Backends`] has an HTTP client, a call
//! with a grant gets it in `HttpCall`, and `fetch` journals each request and
//! response through the call's journal like `kv` does, so a replay sees the
//! same bytes.

use wasmtime::component::Linker;

use super::bindings::skillhost::skill::http::{self as wit, Request, Response};
use super::{
    Backends, Capability, GrantError, Grantable, Grants, GuestError, HasHostCall, HostCall,
    HostCapability,
};
use crate::call::CallState;
use crate::limits::Limits;

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

pub(crate) struct Http;

/// One call's `http`. Empty while this host has no HTTP client: a grant
/// cannot be made (every value is refused), so there is nothing to hold. With
/// a backend it will hold the granted hosts and the client, like
/// `KvCall`.
pub(crate) struct HttpCall;

impl HostCapability for Http {
    type Call = HttpCall;

    fn new_call(_grants: &Grants, _backends: &Backends, _limits: &Limits) -> HttpCall {
        HttpCall
    }

    fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<CallState, HasHostCall<HttpCall>>(linker, |state| HostCall {
            cap: &mut state.capabilities.http,
            scope: &mut state.scope,
        })
    }
}

impl Grantable for Http {
    type Grant = HttpGrant;

    fn parse_grant(value: &str) -> Result<HttpGrant, GrantError> {
        HttpGrant::parse(value)
    }
}

impl wit::Host for HostCall<'_, HttpCall> {
    fn fetch(&mut self, _request: Request) -> wasmtime::Result<Result<Response, GuestError>> {
        Ok(Err(self.deny(Capability::Http)))
    }
}
