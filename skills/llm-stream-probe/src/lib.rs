//! `llm-stream-probe`: a test skill for streamed completions
//! (`skillhost:skill/llm-stream`). It starts the completions it is asked
//! for at once, reads each stream a delta at a time to its end, then its
//! future, checks that the final content is the deltas concatenated, and
//! returns the text, every delta and the token counts.

// wit-bindgen's export shim takes the input's fields flattened, one
// argument each.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("llm-stream-probe", streaming);

use skillhost_sdk::llm::{self, CompletionRequest, Message, Role};

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
                json_schema: input.json_schema.clone(),
            };
            open.push(llm::complete_stream(&request)?);
        }
        let mut texts = Vec::new();
        let mut output = Output {
            text: String::new(),
            chunks: Vec::new(),
            model: String::new(),
            input_tokens: 0,
            output_tokens: 0,
        };
        for mut stream in open {
            let mut text = String::new();
            if let Some(most) = input.stop_after {
                for _ in 0..most {
                    let Some(delta) = stream.next().await else {
                        break;
                    };
                    text.push_str(&delta);
                    output.chunks.push(delta);
                }
                // Abandoned: the host stops reading the provider.
                drop(stream);
                texts.push(text);
                continue;
            }
            while let Some(delta) = stream.next().await {
                text.push_str(&delta);
                output.chunks.push(delta);
            }
            let completion = stream.finish().await?;
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

export!(Probe);
