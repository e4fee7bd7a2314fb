//! `echo-async`: `echo` as an async (WASI 0.3) component. Its world's `run`
//! is an `async func`, so wit-bindgen gives it an `async fn` and lifts it
//! with the component model's async ABI (a callback lift and
//! `task.return`); the host calls it on its concurrent engine. The same
//! input gives the same output and log line as `echo`.

skillhost_sdk::generate!("echo-async");

use skillhost_sdk::log;

/// Larger outputs are refused rather than built, as in `echo`.
const MAX_OUTPUT_BYTES: usize = 1 << 20;

struct Echo;

impl Guest for Echo {
    skillhost_sdk::manifest! {
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    async fn run(input: Input) -> Result<Output, SkillError> {
        let total = input.message.len().saturating_mul(input.repeat as usize);
        if total > MAX_OUTPUT_BYTES {
            return Err(SkillError::invalid_input(format!(
                "{} bytes repeated {} times is {total} bytes, more than {MAX_OUTPUT_BYTES}",
                input.message.len(),
                input.repeat
            )));
        }
        let message = input.message.repeat(input.repeat as usize);
        let length = message.chars().count() as u32;
        log::info(format!("echo: {length} characters"));
        Ok(Output { message, length })
    }
}

export!(Echo);
