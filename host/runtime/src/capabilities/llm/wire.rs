//! The two wire formats a provider may speak: the request body each wants
//! for a chat, the headers that carry its key, and what its answers (and its
//! errors) look like. Pure functions of their arguments: sending, retrying
//! and timing are `providers.rs`'s.
//!
//! Structured output needs an object at the top: OpenAI's strict JSON
//! schemas and Anthropic's tool inputs both require one. A schema of
//! anything else is wrapped as the one property, `value`, of an object, and
//! the answer unwrapped, so the skill gets what its schema describes.

use serde_json::{Map, Value, json};

use super::providers::ProviderKind;
use crate::capabilities::bindings::skillhost::skill::llm::Completion;

/// The name of the tool (Anthropic) or schema (OpenAI) structured output is
/// asked through.
const OUTPUT_NAME: &str = "output";
/// The property a schema that is not an object's is wrapped in.
const WRAPPED: &str = "value";
/// The Anthropic API version this host speaks.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChatRole {
    System,
    User,
    Assistant,
}

impl ChatRole {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ChatRole::System => "system",
            ChatRole::User => "user",
            ChatRole::Assistant => "assistant",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ChatMessage {
    pub role: ChatRole,
    pub content: String,
}

/// One chat as the capability asks it, before it is put in a wire format.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChatRequest<'a> {
    pub model: &'a str,
    pub messages: &'a [ChatMessage],
    pub max_tokens: u32,
    pub temperature: Option<f64>,
    pub json_schema: Option<&'a Value>,
}

impl ChatRequest<'_> {
    /// The schema sent to the provider, and whether it wraps the requested
    /// one (see the module documentation).
    fn object_schema(&self) -> Option<(Value, bool)> {
        let schema = self.json_schema?;
        let is_object = schema.get("type").and_then(Value::as_str) == Some("object");
        Some(if is_object {
            (schema.clone(), false)
        } else {
            (
                json!({
                    "type": "object",
                    "properties": { WRAPPED: schema },
                    "required": [WRAPPED],
                    "additionalProperties": false,
                }),
                true,
            )
        })
    }

    pub(crate) fn wrapped(&self) -> bool {
        self.object_schema().is_some_and(|(_, wrapped)| wrapped)
    }
}

fn number(value: f64) -> Value {
    serde_json::Number::from_f64(value).map_or(Value::Null, Value::Number)
}

/// The URL a chat is posted to, from the provider's base URL.
pub(crate) fn endpoint(kind: ProviderKind, base: &url::Url) -> String {
    let base = base.as_str().trim_end_matches('/');
    match kind {
        ProviderKind::OpenAi => format!("{base}/chat/completions"),
        ProviderKind::Anthropic => format!("{base}/v1/messages"),
    }
}

/// The headers a request carries besides its content type: the key, and
/// Anthropic's API version.
pub(crate) fn headers(kind: ProviderKind, key: Option<&str>) -> Vec<(&'static str, String)> {
    let mut headers = Vec::with_capacity(2);
    match kind {
        ProviderKind::OpenAi => {
            if let Some(key) = key {
                headers.push(("authorization", format!("Bearer {key}")));
            }
        }
        ProviderKind::Anthropic => {
            if let Some(key) = key {
                headers.push(("x-api-key", key.to_string()));
            }
            headers.push(("anthropic-version", ANTHROPIC_VERSION.to_string()));
        }
    }
    headers
}

/// The request body of `chat` in `kind`'s format.
pub(crate) fn request_body(kind: ProviderKind, chat: &ChatRequest<'_>) -> Result<Value, String> {
    let mut body = Map::new();
    body.insert("model".into(), json!(chat.model));
    body.insert("max_tokens".into(), json!(chat.max_tokens));
    if let Some(t) = chat.temperature {
        body.insert("temperature".into(), number(t));
    }
    match kind {
        ProviderKind::OpenAi => {
            body.insert(
                "messages".into(),
                Value::Array(
                    chat.messages
                        .iter()
                        .map(|m| json!({ "role": m.role.name(), "content": m.content }))
                        .collect(),
                ),
            );
            if let Some((schema, _)) = chat.object_schema() {
                body.insert(
                    "response_format".into(),
                    json!({
                        "type": "json_schema",
                        "json_schema": { "name": OUTPUT_NAME, "schema": schema, "strict": true },
                    }),
                );
            }
        }
        ProviderKind::Anthropic => {
            // The messages API takes the system prompt apart from the turns.
            let system: Vec<&str> = chat
                .messages
                .iter()
                .filter(|m| m.role == ChatRole::System)
                .map(|m| m.content.as_str())
                .collect();
            let turns: Vec<Value> = chat
                .messages
                .iter()
                .filter(|m| m.role != ChatRole::System)
                .map(|m| json!({ "role": m.role.name(), "content": m.content }))
                .collect();
            if turns.is_empty() {
                return Err(
                    "the messages API needs at least one user or assistant message besides \
                     the system messages"
                        .into(),
                );
            }
            if !system.is_empty() {
                body.insert("system".into(), json!(system.join("\n\n")));
            }
            body.insert("messages".into(), Value::Array(turns));
            if let Some((schema, _)) = chat.object_schema() {
                body.insert(
                    "tools".into(),
                    json!([{
                        "name": OUTPUT_NAME,
                        "description": "Give the answer as this tool's input.",
                        "input_schema": schema,
                    }]),
                );
                body.insert(
                    "tool_choice".into(),
                    json!({ "type": "tool", "name": OUTPUT_NAME }),
                );
            }
        }
    }
    Ok(Value::Object(body))
}

/// The completion in a successful answer's `body`, or what is wrong with it.
pub(crate) fn parse_answer(
    kind: ProviderKind,
    body: &[u8],
    chat: &ChatRequest<'_>,
) -> Result<Completion, String> {
    let answer: Value = serde_json::from_slice(body).map_err(|e| {
        format!(
            "the answer is not JSON ({e}); it starts `{}`",
            String::from_utf8_lossy(&body[..body.len().min(120)]).escape_debug()
        )
    })?;
    let model = answer
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(chat.model)
        .to_string();
    let tokens = |path: &[&str]| -> Result<u32, String> {
        let mut value = &answer;
        for key in path {
            value = value
                .get(key)
                .ok_or_else(|| format!("the answer has no `{}`", path.join(".")))?;
        }
        value
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("`{}` is not a token count: {value}", path.join(".")))
    };
    let optional_tokens = |key: &str| {
        answer
            .get("usage")
            .and_then(|u| u.get(key))
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0)
    };
    let content = match kind {
        ProviderKind::OpenAi => {
            let message = answer
                .get("choices")
                .and_then(|c| c.get(0))
                .and_then(|c| c.get("message"))
                .ok_or("the answer has no `choices[0].message`")?;
            match message.get("content") {
                Some(Value::String(text)) => text.clone(),
                _ => {
                    return Err(match message.get("refusal").and_then(Value::as_str) {
                        Some(refusal) => format!("the model refused: {refusal}"),
                        None => "`choices[0].message.content` is not a string".into(),
                    });
                }
            }
        }
        ProviderKind::Anthropic => {
            let blocks = answer
                .get("content")
                .and_then(Value::as_array)
                .ok_or("the answer has no `content` list")?;
            let tool_input = chat.json_schema.and_then(|_| {
                blocks.iter().find_map(|block| {
                    (block.get("type").and_then(Value::as_str) == Some("tool_use")
                        && block.get("name").and_then(Value::as_str) == Some(OUTPUT_NAME))
                    .then(|| block.get("input"))
                    .flatten()
                })
            });
            match tool_input {
                Some(input) => {
                    let input = if chat.wrapped() {
                        input.get(WRAPPED).unwrap_or(input)
                    } else {
                        input
                    };
                    return Ok(Completion {
                        content: input.to_string(),
                        model,
                        input_tokens: tokens(&["usage", "input_tokens"])?
                            .saturating_add(optional_tokens("cache_creation_input_tokens"))
                            .saturating_add(optional_tokens("cache_read_input_tokens")),
                        output_tokens: tokens(&["usage", "output_tokens"])?,
                    });
                }
                // Text where a tool input was asked for is still the
                // model's answer: the schema check says what is wrong.
                None => blocks
                    .iter()
                    .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .collect::<Vec<_>>()
                    .join(""),
            }
        }
    };
    let content = if chat.wrapped() {
        unwrap_value(content)
    } else {
        content
    };
    let (input_tokens, output_tokens) = match kind {
        ProviderKind::OpenAi => (
            tokens(&["usage", "prompt_tokens"])?,
            tokens(&["usage", "completion_tokens"])?,
        ),
        ProviderKind::Anthropic => (
            tokens(&["usage", "input_tokens"])?
                .saturating_add(optional_tokens("cache_creation_input_tokens"))
                .saturating_add(optional_tokens("cache_read_input_tokens")),
            tokens(&["usage", "output_tokens"])?,
        ),
    };
    Ok(Completion {
        content,
        model,
        input_tokens,
        output_tokens,
    })
}

/// `{"value": X}` as `X`; anything else as it is, for the schema check to
/// judge.
pub(crate) fn unwrap_value(content: String) -> String {
    match serde_json::from_str::<Value>(&content) {
        Ok(Value::Object(mut object)) if object.len() == 1 && object.contains_key(WRAPPED) => {
            object.remove(WRAPPED).unwrap_or(Value::Null).to_string()
        }
        _ => content,
    }
}

/// The most of a provider's error message a skill's error keeps.
pub(crate) const ERROR_EXCERPT_CHARS: usize = 500;

/// What follows an error message that was cut.
pub(crate) const CUT_NOTE: &str = "… (cut: the provider's message is longer)";

/// The message of an error answer, cut to [`ERROR_EXCERPT_CHARS`] with
/// [`CUT_NOTE`] after it when it was longer: `error.message` (both
/// formats), the start of that message in a body cut before its end (the
/// host reads at most 64 KiB of an error answer), else the start of the
/// body. Control characters become spaces.
pub(crate) fn error_message(body: &[u8]) -> String {
    let parsed: Option<Value> = serde_json::from_slice(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v.get("error")
            .and_then(|e| e.get("message").or(Some(e)))
            .or_else(|| v.get("message"))
            .and_then(Value::as_str)
    });
    let noted = |(text, cut): (String, bool)| {
        if cut {
            format!("{text}{CUT_NOTE}")
        } else {
            text
        }
    };
    match message {
        Some(message) => noted(excerpt(message)),
        None if body.is_empty() => "no message".to_string(),
        None => match cut_message(body) {
            Some((message, ended)) => {
                let (text, cut) = excerpt(&message);
                noted((text, cut || !ended))
            }
            None => {
                let start = &body[..body.len().min(ERROR_EXCERPT_CHARS * 4)];
                let text = String::from_utf8_lossy(start);
                let (text, cut) = excerpt(text.trim());
                let cut = cut || start.len() < body.len();
                noted((format!("`{}`", text.escape_debug()), cut))
            }
        },
    }
}

/// The start of the `"message"` string of a JSON body cut before its end,
/// and whether that string ended within it.
fn cut_message(body: &[u8]) -> Option<(String, bool)> {
    let text = String::from_utf8_lossy(body);
    let at = text.find("\"message\"")?;
    let rest = text[at + "\"message\"".len()..].trim_start();
    let rest = rest.strip_prefix(':')?.trim_start().strip_prefix('"')?;
    let mut message = String::new();
    let mut chars = rest.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some((message, true)),
            '\\' => {
                chars.next();
                message.push(' ');
            }
            c => message.push(c),
        }
        if message.len() > ERROR_EXCERPT_CHARS * 4 {
            break;
        }
    }
    Some((message, false))
}

/// At most [`ERROR_EXCERPT_CHARS`] of `text`, control characters as spaces,
/// and whether it was cut.
fn excerpt(text: &str) -> (String, bool) {
    let out: String = text
        .chars()
        .take(ERROR_EXCERPT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    (out, text.chars().nth(ERROR_EXCERPT_CHARS).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat<'a>(messages: &'a [ChatMessage], schema: Option<&'a Value>) -> ChatRequest<'a> {
        ChatRequest {
            model: "m",
            messages,
            max_tokens: 100,
            temperature: Some(0.7),
            json_schema: schema,
        }
    }

    fn messages() -> Vec<ChatMessage> {
        vec![
            ChatMessage {
                role: ChatRole::System,
                content: "be brief".into(),
            },
            ChatMessage {
                role: ChatRole::User,
                content: "hi".into(),
            },
        ]
    }

    #[test]
    fn openai_asks_for_a_strict_json_schema() {
        let messages = messages();
        let schema = json!({ "type": "object", "properties": { "a": { "type": "string" } } });
        let body = request_body(ProviderKind::OpenAi, &chat(&messages, Some(&schema))).unwrap();
        assert_eq!(
            body["messages"][0],
            json!({ "role": "system", "content": "be brief" })
        );
        assert_eq!(body["temperature"], json!(0.7));
        assert_eq!(body["max_tokens"], 100);
        assert_eq!(
            body["response_format"],
            json!({ "type": "json_schema",
                    "json_schema": { "name": "output", "schema": schema, "strict": true } })
        );
    }

    #[test]
    fn anthropic_forces_a_tool_and_takes_the_system_prompt_apart() {
        let messages = messages();
        let schema = json!({ "type": "array" });
        let body = request_body(ProviderKind::Anthropic, &chat(&messages, Some(&schema))).unwrap();
        assert_eq!(body["system"], "be brief");
        assert_eq!(
            body["messages"],
            json!([{ "role": "user", "content": "hi" }])
        );
        assert_eq!(
            body["tool_choice"],
            json!({ "type": "tool", "name": "output" })
        );
        assert_eq!(
            body["tools"][0]["input_schema"]["properties"]["value"],
            schema
        );
        // The tool's input is the content, unwrapped.
        let answer = json!({
            "model": "claude-x",
            "content": [{ "type": "tool_use", "name": "output", "input": { "value": [1, 2] } }],
            "usage": { "input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 2 },
        });
        let completion = parse_answer(
            ProviderKind::Anthropic,
            answer.to_string().as_bytes(),
            &chat(&messages, Some(&schema)),
        )
        .unwrap();
        assert_eq!(completion.content, "[1,2]");
        assert_eq!(completion.model, "claude-x");
        assert_eq!((completion.input_tokens, completion.output_tokens), (12, 3));
        // Only system messages: nothing to answer.
        let only_system = &messages[..1];
        assert!(request_body(ProviderKind::Anthropic, &chat(only_system, None)).is_err());
    }

    #[test]
    fn malformed_answers_say_what_is_missing() {
        let messages = messages();
        let chat = chat(&messages, None);
        for (kind, body, says) in [
            (ProviderKind::OpenAi, "not json", "not JSON"),
            (
                ProviderKind::OpenAi,
                r#"{"choices": []}"#,
                "choices[0].message",
            ),
            (
                ProviderKind::OpenAi,
                r#"{"choices": [{"message": {"content": "x"}}]}"#,
                "no `usage.prompt_tokens`",
            ),
            (
                ProviderKind::OpenAi,
                r#"{"choices": [{"message": {"content": null, "refusal": "no"}}]}"#,
                "refused: no",
            ),
            (
                ProviderKind::Anthropic,
                r#"{"content": "x"}"#,
                "no `content` list",
            ),
            (
                ProviderKind::Anthropic,
                r#"{"content": [], "usage": {"input_tokens": -1, "output_tokens": 1}}"#,
                "not a token count",
            ),
        ] {
            let error = parse_answer(kind, body.as_bytes(), &chat).unwrap_err();
            assert!(error.contains(says), "{body}: {error}");
        }
    }

    #[test]
    fn error_messages_come_from_either_format() {
        assert_eq!(
            error_message(br#"{"error": {"message": "bad model", "type": "x"}}"#),
            "bad model"
        );
        let anthropic = json!({
            "type": "error",
            "error": { "type": "invalid_request_error", "message": "too long" },
        });
        assert_eq!(error_message(anthropic.to_string().as_bytes()), "too long");
        assert_eq!(error_message(br#"{"error": "plain"}"#), "plain");
        assert_eq!(error_message(b"<html>"), "`<html>`");
        assert_eq!(error_message(b""), "no message");
    }

    #[test]
    fn a_long_error_message_is_cut_to_an_excerpt() {
        let long = "y".repeat(5 << 20);
        let whole = json!({ "error": { "message": long } }).to_string();
        for body in [
            whole.as_bytes(),
            // As the host reads it: the first 64 KiB.
            &whole.as_bytes()[..64 << 10],
            long.as_bytes(),
            &long.as_bytes()[..64 << 10],
        ] {
            let message = error_message(body);
            assert!(
                message.chars().count() <= ERROR_EXCERPT_CHARS + 2 + CUT_NOTE.chars().count(),
                "{}",
                message.len()
            );
            assert!(message.contains("yyyy"), "{message}");
            assert!(message.ends_with(CUT_NOTE), "{message}");
        }
        // Short, nothing is noted; control characters are spaces.
        assert_eq!(
            error_message(br#"{"error": {"message": "a\r\nb"}}"#),
            "a  b"
        );
        assert_eq!(error_message(b"short\x1b[2J"), "`short [2J`");
        // A cut body whose message is short still says it was cut.
        assert_eq!(
            error_message(br#"{"error": {"message": "abc"#),
            format!("abc{CUT_NOTE}")
        );
    }
}
