//! Text generation through the provider the scenario grants
//! (`llm = "PROVIDER/MODEL"`). The host records every completion in the run's
//! journal, so a replay never calls the model again.
//!
//! On native targets there is no model: a test installs a handler with
//! [`crate::testing::set_llm_handler`]; without one, `complete` returns
//! `capability-not-granted`.

use crate::SkillError;
pub use crate::bindings::skillhost::skill::llm::{Completion, CompletionRequest, Message, Role};

/// Asks the granted model for a completion.
pub fn complete(request: &CompletionRequest) -> Result<Completion, SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::llm::complete(request);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::llm_complete(request);
}

/// One system and one user message, default limits.
pub fn prompt(system: &str, user: &str) -> Result<Completion, SkillError> {
    complete(&CompletionRequest {
        messages: vec![
            Message {
                role: Role::System,
                content: system.to_string(),
            },
            Message {
                role: Role::User,
                content: user.to_string(),
            },
        ],
        max_tokens: None,
        temperature: None,
        json_schema: None,
    })
}
