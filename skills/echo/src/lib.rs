//! `echo`: repeats a message. The demo and benchmark skill: one log line,
//! no other capability, a small input.

skillhost_sdk::generate!("echo");

use skillhost_sdk::log;

/// Larger outputs are refused rather than built, so a typo in `repeat`
/// fails clearly instead of exhausting the call's memory.
const MAX_OUTPUT_BYTES: usize = 1 << 20;

struct Echo;

impl Guest for Echo {
    skillhost_sdk::manifest! {
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost_sdk::{Level, testing};

    fn run(message: &str, repeat: u32) -> Result<Output, SkillError> {
        Echo::run(Input {
            message: message.to_string(),
            repeat,
        })
    }

    #[test]
    fn repeats_and_counts_characters() {
        let out = run("héllo ", 3).unwrap();
        assert_eq!(out.message, "héllo héllo héllo ");
        assert_eq!(out.length, 18);
        assert_eq!(
            testing::take_logs(),
            [(Level::Info, "echo: 18 characters".to_string())]
        );
    }

    #[test]
    fn zero_repeats_give_an_empty_message() {
        let out = run("abc", 0).unwrap();
        assert_eq!((out.message.as_str(), out.length), ("", 0));
    }

    #[test]
    fn refuses_huge_outputs() {
        let err = run("0123456789", 200_000).unwrap_err();
        assert_eq!(err.code, "invalid-input");
        assert!(!err.retryable);
        let err = run("x", u32::MAX).unwrap_err();
        assert_eq!(err.code, "invalid-input");
    }

    #[test]
    fn manifest_comes_from_cargo_toml() {
        let m = Echo::manifest();
        assert_eq!(m.id, "echo");
        assert_eq!(m.name, "Echo");
        assert_eq!(m.version, "0.1.0");
        assert_eq!(m.capabilities, ["log"]);
        assert_eq!(m.retry.max_attempts, 1);
    }
}
