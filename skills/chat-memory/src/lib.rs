//! `chat-memory`: keeps or looks up a value under a key in the granted `kv`
//! namespace. The host keeps kv in the run store, so what one conversation
//! remembers, the next one recalls.

skillhost_sdk::generate!("chat-memory");

use skillhost_sdk::{kv, log};

struct ChatMemory;

const MAX_KEY_CHARS: usize = 200;
const MAX_VALUE_CHARS: usize = 10_000;

impl Guest for ChatMemory {
    skillhost_sdk::manifest! {
        name: "Chat memory",
        capabilities: ["kv", "log"],
        retry: { max_attempts: 3, initial_backoff_ms: 50 },
        estimated_duration_ms: 2,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let key = input.key.trim();
        if key.is_empty() || key.chars().count() > MAX_KEY_CHARS {
            return Err(SkillError::invalid_input(format!(
                "`key` must be 1 to {MAX_KEY_CHARS} characters"
            )));
        }
        let stored = kv::get_text(key).map_err(|e| e.context(format!("reading `{key}`")))?;
        match input.op {
            Op::Recall => Ok(Output {
                key: key.to_string(),
                value: stored,
                previous: None,
            }),
            Op::Remember => {
                let value = input.value.trim();
                if value.is_empty() || value.chars().count() > MAX_VALUE_CHARS {
                    return Err(SkillError::invalid_input(format!(
                        "`value` must be 1 to {MAX_VALUE_CHARS} characters"
                    )));
                }
                kv::set_text(key, value).map_err(|e| e.context(format!("writing `{key}`")))?;
                log::info(format!("remembered `{key}`"));
                Ok(Output {
                    key: key.to_string(),
                    value: Some(value.to_string()),
                    previous: stored.filter(|old| old != value),
                })
            }
        }
    }
}

export!(ChatMemory);
