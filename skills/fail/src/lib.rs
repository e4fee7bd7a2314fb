//! `fail`: a test skill for the host's error handling. It succeeds, returns
//! a skill error, returns a retryable skill error, or panics (a trap), as
//! its input says.

skillhost_sdk::generate!("fail");

struct Fail;

impl Guest for Fail {
    // Retries are declared so the host's retry path can be tested with it.
    skillhost_sdk::manifest! {
        capabilities: [],
        retry: { max_attempts: 3, initial_backoff_ms: 10 },
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        match input.mode {
            Mode::Ok => Ok(Output {
                message: "ok".to_string(),
            }),
            Mode::Error => Err(SkillError::new(
                "requested-error",
                "the input asked for an error",
            )),
            Mode::RetryableError => Err(SkillError::retryable(
                "requested-retryable-error",
                "the input asked for a retryable error",
            )),
            Mode::Panic => panic!("the input asked for a panic"),
        }
    }
}

export!(Fail);

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mode: Mode) -> Result<Output, SkillError> {
        Fail::run(Input { mode })
    }

    #[test]
    fn ok_mode_succeeds() {
        assert_eq!(run(Mode::Ok).unwrap().message, "ok");
    }

    #[test]
    fn error_modes_return_skill_errors() {
        let e = run(Mode::Error).unwrap_err();
        assert_eq!((e.code.as_str(), e.retryable), ("requested-error", false));
        let e = run(Mode::RetryableError).unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("requested-retryable-error", true)
        );
    }

    #[test]
    #[should_panic(expected = "asked for a panic")]
    fn panic_mode_panics() {
        let _ = run(Mode::Panic);
    }

    #[test]
    fn manifest_declares_retries() {
        let m = Fail::manifest();
        assert_eq!((m.retry.max_attempts, m.retry.initial_backoff_ms), (3, 10));
    }
}
