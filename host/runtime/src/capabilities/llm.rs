//! The `llm` capability: completions from the provider a scenario grants.
//!
//! The contract is designed and linked, but no provider is wired into this host
//! yet: a grant is refused with that reason, and every call is denied. The
//! module has the shape of a capability with a backend: once [`Backends`] has
//! a provider, a call with a grant gets it in `LlmCall`, and `complete`
//! journals each request and completion through the call's journal like `kv`
//! does, so a replay never calls the model again.

use wasmtime::component::Linker;

use super::bindings::skillhost::skill::llm::{self as wit, Completion, CompletionRequest};
use super::{
    Backends, Capability, GrantError, Grantable, Grants, GuestError, HasHostCall, HostCall,
    HostCapability,
};
use crate::call::CallState;
use crate::limits::Limits;

/// The provider and model a skill may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LlmGrant {
    pub provider: String,
}

impl LlmGrant {
    pub fn parse(value: &str) -> Result<Self, GrantError> {
        let _ = value;
        Err(GrantError::new(
            "llm",
            "no LLM provider is implemented by this host yet; use deterministic skills",
        ))
    }
}

pub(crate) struct Llm;

/// One call's `llm`. Empty while this host has no provider: a grant
/// cannot be made (every value is refused), so there is nothing to hold. With
/// a backend it will hold the granted provider and the backend, like
/// `KvCall`.
pub(crate) struct LlmCall;

impl HostCapability for Llm {
    type Call = LlmCall;

    fn new_call(_grants: &Grants, _backends: &Backends, _limits: &Limits) -> LlmCall {
        LlmCall
    }

    fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<CallState, HasHostCall<LlmCall>>(linker, |state| HostCall {
            cap: &mut state.capabilities.llm,
            scope: &mut state.scope,
        })
    }
}

impl Grantable for Llm {
    type Grant = LlmGrant;

    fn parse_grant(value: &str) -> Result<LlmGrant, GrantError> {
        LlmGrant::parse(value)
    }
}

impl wit::Host for HostCall<'_, LlmCall> {
    fn complete(
        &mut self,
        _request: CompletionRequest,
    ) -> wasmtime::Result<Result<Completion, GuestError>> {
        Ok(Err(self.deny(Capability::Llm)))
    }
}
