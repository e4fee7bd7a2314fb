//! A skill may write its `manifest` export by hand, with the SDK's own
//! `Manifest` and `SkillError` imported by name, next to the bindings
//! `generate!` makes: the names the skill brings in take precedence over
//! the generated aliases of the same types instead of clashing with them.

skillhost_sdk::generate!(
    "hand-written",
    inline: "
        package test:hand-written@0.1.0;

        world hand-written {
            include skillhost:skill/base@0.1.0;
            use skillhost:skill/types@0.1.0.{skill-error};

            record input { word: string }
            record output { shout: string }

            export run: func(input: input) -> result<output, skill-error>;
        }
    ",
);

use skillhost_sdk::{Manifest, RetryPolicy, SkillError};

struct HandWritten;

impl Guest for HandWritten {
    fn manifest() -> Manifest {
        Manifest {
            id: "hand-written".into(),
            name: "Hand-written manifest".into(),
            version: "0.2.0".into(),
            description: "Declares its manifest without the macro".into(),
            capabilities: vec!["log".into()],
            retry: RetryPolicy::new(2, 10),
            estimated_duration_ms: 3,
        }
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        if input.word.is_empty() {
            return Err(SkillError::invalid_input("`word` is empty"));
        }
        Ok(Output {
            shout: input.word.to_uppercase(),
        })
    }
}

export!(HandWritten);

#[test]
fn a_hand_written_manifest_uses_the_sdk_types() {
    let manifest: skillhost_sdk::Manifest = HandWritten::manifest();
    assert_eq!(manifest.id, "hand-written");
    assert_eq!(manifest.version, "0.2.0");
    assert_eq!(manifest.capabilities, ["log"]);
    assert_eq!(
        (
            manifest.retry.max_attempts,
            manifest.retry.initial_backoff_ms
        ),
        (2, 10)
    );
}

#[test]
fn the_generated_types_still_serve_run() {
    let output = HandWritten::run(Input { word: "hi".into() }).unwrap();
    assert_eq!(output.shout, "HI");
    let error = HandWritten::run(Input {
        word: String::new(),
    })
    .unwrap_err();
    assert_eq!(error.code, "invalid-input");
}
