//! `llm-stream-probe`: a test skill for streamed completions
//! (`skillhost:skill/llm-stream`). It starts the completions it is asked
//! for at once, reads each stream a delta at a time to its end, then its
//! future, checks that the final content is the deltas concatenated, and
//! returns the text, every delta and the token counts.

// `skillhost_sdk::generate!`, with bindings of its own for `llm-stream`,
// which the SDK's world (`base`) does not import.
mod bindings {
    skillhost_sdk::__private::wit_bindgen::generate!({
        world: "llm-stream-probe",
        runtime_path: "::skillhost_sdk::__private::wit_bindgen::rt",
        with: {
            "skillhost:skill/types@0.1.0": ::skillhost_sdk::bindings::skillhost::skill::types,
            "skillhost:skill/log@0.1.0": ::skillhost_sdk::bindings::skillhost::skill::log,
            "skillhost:skill/fs@0.1.0": ::skillhost_sdk::bindings::skillhost::skill::fs,
            "skillhost:skill/kv@0.1.0": ::skillhost_sdk::bindings::skillhost::skill::kv,
            "skillhost:skill/http@0.1.0": ::skillhost_sdk::bindings::skillhost::skill::http,
            "skillhost:skill/llm@0.1.0": ::skillhost_sdk::bindings::skillhost::skill::llm,
            "skillhost:skill/sql@0.1.0": ::skillhost_sdk::bindings::skillhost::skill::sql,
            "skillhost:skill/llm-stream@0.1.0": generate,
            "skillhost:skill/http-stream@0.1.0": generate,
        },
        pub_export_macro: true,
    });
}

use bindings::skillhost::skill::llm_stream;
use bindings::{Guest, Input, Output, SkillError};
use skillhost_sdk::__private::wit_bindgen::StreamResult;
use skillhost_sdk::llm::{CompletionRequest, Message, Role};

struct Probe;

impl Guest for Probe {
    skillhost_sdk::manifest! {
        capabilities: ["log", "llm"],
        retry: { max_attempts: 3, initial_backoff_ms: 10 },
        estimated_duration_ms: 1000,
    }

    async fn run(input: Input) -> Result<Output, SkillError> {
        let count = input.streams.max(1);
        let mut open = Vec::new();
        for i in 0..count {
            let prompt = if i == 0 {
                input.prompt.clone()
            } else {
                format!("{} #{}", input.prompt, i + 1)
            };
            let request = CompletionRequest {
                messages: vec![Message {
                    role: Role::User,
                    content: prompt,
                }],
                max_tokens: None,
                temperature: None,
                json_schema: None,
            };
            open.push(llm_stream::complete_stream(&request)?);
        }
        let mut texts = Vec::new();
        let mut output = Output {
            text: String::new(),
            chunks: Vec::new(),
            model: String::new(),
            input_tokens: 0,
            output_tokens: 0,
        };
        for (mut deltas, end) in open {
            let mut text = String::new();
            loop {
                let (result, mut read) = deltas.read(Vec::with_capacity(1)).await;
                for delta in read.drain(..) {
                    text.push_str(&delta);
                    output.chunks.push(delta);
                }
                if matches!(result, StreamResult::Dropped) {
                    break;
                }
            }
            let completion = end.await?;
            if completion.content != text {
                return Err(SkillError {
                    code: "mismatch".into(),
                    message: format!(
                        "the completion's content {:?} is not its deltas {text:?}",
                        completion.content
                    ),
                    retryable: false,
                });
            }
            output.model = completion.model;
            output.input_tokens += completion.input_tokens;
            output.output_tokens += completion.output_tokens;
            texts.push(text);
        }
        output.text = texts.join("\n\n");
        Ok(output)
    }
}

bindings::export!(Probe with_types_in bindings);
