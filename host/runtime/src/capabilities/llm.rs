//! The `llm` capability: completions from the provider a scenario grants.
//!
//! The contract is designed and linked, but no provider is wired into this host
//! yet: a grant is refused with that reason, and every call is denied.

use super::bindings::skillhost::skill::llm::{Completion, CompletionRequest, Host};
use super::{Capability, GrantError, GuestError, denied};
use crate::call::CallState;

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

impl Host for CallState {
    fn complete(&mut self, _request: CompletionRequest) -> Result<Completion, GuestError> {
        Err(denied(self, Capability::Llm))
    }
}
