//! `chat-respond-llm`: the chat reply written by a language model through
//! the host's `llm` capability, in place of the template-based
//! `chat-respond` (same input and output). It owns the prompt and reading
//! the answer; the facts it may use are the tool's result, and the reply's
//! `sources` are named here by rule, never by the model. Whether the reply
//! states what the tool returned is the scenario's postcondition to check.
//!
//! An async skill: the completion is streamed (`llm::complete_stream`), so
//! the reply reaches `host run`'s progress line, `--events`, the run page
//! and MCP clients as the model writes it. The reply returned is the whole
//! completion, read and checked as before.

// wit-bindgen's export shim takes the input's fields flattened, one
// argument each.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("chat-respond-llm", streaming);

use skillhost_sdk::llm::{self, CompletionRequest, Message, Role};
use skillhost_sdk::log;

/// The system message, the same for every reply.
pub const SYSTEM: &str = "You reply to a chat message in plain text, in at most 120 words. \
Below the message is what a tool returned for it. State only facts that are in the tool's \
result; when the result is a computed or remembered value, give that value exactly as \
written. When no tool ran, answer from the message alone and say that you can read a file \
of your folder, fetch a page from allowed hosts, calculate, and remember things between \
conversations.";

/// The heading after which the user message holds the tool's result.
pub const RESULT_HEADING: &str = "Tool result:\n";

/// How much of a file's or page's text the model is shown.
const RESULT_CHARS: usize = 4000;

/// The longest reply accepted.
const MAX_REPLY_CHARS: usize = 4000;

const TOOLS: [&str; 6] = [
    "none",
    "file-read",
    "web-fetch",
    "calculate",
    "remember",
    "recall",
];

struct ChatRespondLlm;

impl Guest for ChatRespondLlm {
    skillhost_sdk::manifest! {
        name: "Chat response (LLM)",
        capabilities: ["llm", "log"],
        // A model may answer with nothing once and with a reply the next time.
        retry: { max_attempts: 3, initial_backoff_ms: 1000 },
        estimated_duration_ms: 5000,
    }

    async fn run(input: Input) -> Result<Output, SkillError> {
        if !TOOLS.contains(&input.tool.as_str()) {
            return Err(SkillError::invalid_input(format!(
                "unknown tool `{}`; expected none, file-read, web-fetch, calculate, remember \
                 or recall",
                input.tool
            )));
        }
        let request = CompletionRequest {
            messages: vec![
                Message {
                    role: Role::System,
                    content: SYSTEM.to_string(),
                },
                Message {
                    role: Role::User,
                    content: prompt(&input),
                },
            ],
            max_tokens: None,
            temperature: None,
            json_schema: None,
        };
        let context = |e: SkillError| e.context(format!("the reply to a `{}` message", input.tool));
        let completion = llm::complete_stream(&request)
            .map_err(context)?
            .finish()
            .await
            .map_err(context)?;
        let text = reply(&completion.content).map_err(|problem| {
            SkillError::retryable(
                "invalid-output",
                format!("model `{}`: {problem}", completion.model),
            )
        })?;
        log::info(format!(
            "chat-respond-llm: {} answered with {} input and {} output tokens",
            completion.model, completion.input_tokens, completion.output_tokens
        ));
        Ok(Output {
            text,
            sources: sources(&input),
        })
    }
}

export!(ChatRespondLlm);

/// The user message: the chat message, then the tool's result.
pub fn prompt(input: &Input) -> String {
    let mut result = input.outcome.trim().to_string();
    if let Some((cut, _)) = result.char_indices().nth(RESULT_CHARS) {
        result.truncate(cut);
        result.push_str(" …");
    }
    format!(
        "Message: {}\nTool: {}\nSubject: {}\nFound: {}\nNote: {}\n\n{RESULT_HEADING}{result}",
        input.message.trim(),
        input.tool,
        input.subject,
        input.found,
        input.note
    )
}

/// The reply in the model's answer, or what is wrong with it.
pub fn reply(content: &str) -> Result<String, String> {
    let text = content.trim();
    if text.is_empty() {
        return Err("the reply is empty".to_string());
    }
    let chars = text.chars().count();
    if chars > MAX_REPLY_CHARS {
        return Err(format!(
            "the reply has {chars} characters, over the {MAX_REPLY_CHARS} allowed"
        ));
    }
    Ok(text.to_string())
}

/// Where the reply's facts come from, by the same rule as `chat-respond`:
/// the file or URL read, the memory key used; none for `none`,
/// `calculate` and a key not remembered.
pub fn sources(input: &Input) -> Vec<String> {
    match input.tool.as_str() {
        "file-read" | "web-fetch" => vec![input.subject.clone()],
        "remember" => vec![format!("memory:{}", input.subject)],
        "recall" if input.found => vec![format!("memory:{}", input.subject)],
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(tool: &str, subject: &str, outcome: &str, found: bool) -> Input {
        Input {
            message: " what is my city? ".into(),
            tool: tool.into(),
            subject: subject.into(),
            outcome: outcome.into(),
            found,
            note: String::new(),
        }
    }

    #[test]
    fn the_prompt_ends_with_the_tool_result_cut_to_its_limit() {
        let p = prompt(&input("recall", "city", "Lisbon", true));
        assert!(p.starts_with("Message: what is my city?\nTool: recall\nSubject: city\n"));
        assert!(p.ends_with("\n\nTool result:\nLisbon"));
        let long = "y".repeat(RESULT_CHARS + 5);
        let p = prompt(&input("file-read", "a.md", &long, true));
        assert!(p.ends_with(&format!("{} …", "y".repeat(RESULT_CHARS))));
    }

    #[test]
    fn sources_are_named_by_rule() {
        assert_eq!(
            sources(&input("recall", "city", "Lisbon", true)),
            ["memory:city"]
        );
        assert!(sources(&input("recall", "city", "", false)).is_empty());
        assert_eq!(
            sources(&input("web-fetch", "https://a/", "", true)),
            ["https://a/"]
        );
        assert!(sources(&input("calculate", "1 + 1", "2", true)).is_empty());
    }

    #[test]
    fn empty_and_overlong_replies_are_refused() {
        assert_eq!(reply("  Lisbon.\n").unwrap(), "Lisbon.");
        assert_eq!(reply(" \n ").unwrap_err(), "the reply is empty");
        assert!(
            reply(&"z".repeat(MAX_REPLY_CHARS + 1))
                .unwrap_err()
                .contains("4001 characters")
        );
    }
}
