//! The two streaming wire formats, decoded a line of server-sent events at a
//! time: OpenAI-compatible chat completions with `stream: true` (`data:
//! {choices[0].delta.content}` chunks, usage in a last chunk when
//! `stream_options.include_usage` is honoured, `data: [DONE]` at the end)
//! and Anthropic's event stream (`message_start` with the model and the
//! input tokens, `content_block_delta` with `text_delta`s, `message_delta`
//! with the output tokens, `message_stop` at the end, `ping`s, and `error`
//! events). Pure: reading the lines, and bounding them, is `providers.rs`'s.
//!
//! Structured output ([`Decoder::for_schema`]) streams too: an
//! OpenAI-compatible server's deltas are then the JSON text itself (its
//! `response_format`), and Anthropic's forced tool streams its input as
//! `input_json_delta`s (`partial_json`), whose concatenation is the tool
//! input. A schema that is not an object's was wrapped in `{"value": …}`
//! for the provider (`wire.rs`): the deltas are the wrapper's text, and the
//! completion's content the value unwrapped, as `complete` gives it. A
//! refusal (OpenAI's `delta.refusal`) with no content is the provider's
//! error, as `complete` says it.
//!
//! A stream is a completion only once its end marker came: a stream that
//! stops before (a connection cut, a server that closes early) is an error,
//! whatever text it carried.

use serde_json::Value;

use super::providers::{LlmFailure, ProviderKind};
use crate::capabilities::bindings::skillhost::skill::llm::Completion;

/// What one line of the stream said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Text for the skill (never empty).
    Delta(String),
    /// Nothing the skill sees (a comment, a `ping`, an `event:` line,
    /// usage, the model).
    Nothing,
    /// The end marker: the completion is whole.
    Done,
}

/// The state of one stream being decoded.
#[derive(Debug)]
pub(crate) struct Decoder {
    kind: ProviderKind,
    provider: String,
    content: String,
    model: Option<String>,
    input_tokens: u32,
    output_tokens: u32,
    deltas: usize,
    done: bool,
    /// A `json-schema` was asked for: Anthropic's tool input is the text.
    structured: bool,
    /// The schema was wrapped in `{"value": …}`: the content is unwrapped.
    wrapped: bool,
    /// What an OpenAI-compatible model said instead of answering.
    refusal: String,
}

impl Decoder {
    pub(crate) fn new(kind: ProviderKind, provider: &str) -> Decoder {
        Decoder {
            kind,
            provider: provider.to_string(),
            content: String::new(),
            model: None,
            input_tokens: 0,
            output_tokens: 0,
            deltas: 0,
            done: false,
            structured: false,
            wrapped: false,
            refusal: String::new(),
        }
    }

    /// The decoder of a structured completion (a `json-schema` was sent);
    /// `wrapped` when the schema went to the provider wrapped in
    /// `{"value": …}`.
    pub(crate) fn for_schema(mut self, wrapped: bool) -> Decoder {
        self.structured = true;
        self.wrapped = wrapped;
        self
    }

    /// How many deltas the stream carried so far.
    pub(crate) fn deltas(&self) -> usize {
        self.deltas
    }

    /// One line (without its line ending).
    pub(crate) fn line(&mut self, line: &str) -> Result<Step, LlmFailure> {
        if self.done {
            // Whatever a server sends after its end marker is not read as
            // part of the completion.
            return Ok(Step::Nothing);
        }
        let Some(data) = line.strip_prefix("data:") else {
            // Blank lines end events; `event:`, `id:`, `retry:` and `:`
            // comments say nothing the data does not.
            return Ok(Step::Nothing);
        };
        let data = data.strip_prefix(' ').unwrap_or(data);
        if self.kind == ProviderKind::OpenAi && data.trim() == "[DONE]" {
            self.done = true;
            return Ok(Step::Done);
        }
        let event: Value = serde_json::from_str(data).map_err(|e| {
            self.malformed(format!(
                "an event is not JSON ({e}): `{}`",
                data.chars().take(120).collect::<String>().escape_debug()
            ))
        })?;
        match self.kind {
            ProviderKind::OpenAi => self.openai(&event),
            ProviderKind::Anthropic => self.anthropic(&event),
        }
    }

    fn openai(&mut self, event: &Value) -> Result<Step, LlmFailure> {
        if let Some(error) = event.get("error") {
            return Err(self.mid_stream_error(error, false));
        }
        if let Some(model) = event.get("model").and_then(Value::as_str) {
            self.model.get_or_insert_with(|| model.to_string());
        }
        if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
            self.input_tokens = count(usage, "prompt_tokens");
            self.output_tokens = count(usage, "completion_tokens");
        }
        let delta = event
            .get("choices")
            .and_then(|c| c.get(0))
            .and_then(|c| c.get("delta"));
        if let Some(Value::String(refusal)) = delta.and_then(|d| d.get("refusal"))
            && self.refusal.len() < super::wire::ERROR_EXCERPT_CHARS
        {
            self.refusal.push_str(refusal);
        }
        match delta.and_then(|d| d.get("content")) {
            Some(Value::String(text)) if !text.is_empty() => Ok(self.delta(text)),
            _ => Ok(Step::Nothing),
        }
    }

    fn anthropic(&mut self, event: &Value) -> Result<Step, LlmFailure> {
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                let message = event.get("message").unwrap_or(&Value::Null);
                if let Some(model) = message.get("model").and_then(Value::as_str) {
                    self.model = Some(model.to_string());
                }
                if let Some(usage) = message.get("usage") {
                    self.input_tokens = count(usage, "input_tokens")
                        .saturating_add(count(usage, "cache_creation_input_tokens"))
                        .saturating_add(count(usage, "cache_read_input_tokens"));
                    self.output_tokens = count(usage, "output_tokens");
                }
                Ok(Step::Nothing)
            }
            "content_block_delta" => {
                let delta = event.get("delta").unwrap_or(&Value::Null);
                let text = match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => delta.get("text").and_then(Value::as_str),
                    // The forced tool's input, as JSON text in pieces.
                    Some("input_json_delta") if self.structured => {
                        delta.get("partial_json").and_then(Value::as_str)
                    }
                    _ => None,
                };
                match text {
                    Some(text) if !text.is_empty() => Ok(self.delta(text)),
                    _ => Ok(Step::Nothing),
                }
            }
            "message_delta" => {
                if let Some(usage) = event.get("usage") {
                    // Cumulative, as the API documents it.
                    self.output_tokens = count(usage, "output_tokens");
                }
                Ok(Step::Nothing)
            }
            "message_stop" => {
                self.done = true;
                Ok(Step::Done)
            }
            "error" => Err(self.mid_stream_error(event.get("error").unwrap_or(event), true)),
            // `ping`, `content_block_start`, `content_block_stop`, and event
            // types added later.
            _ => Ok(Step::Nothing),
        }
    }

    fn delta(&mut self, text: &str) -> Step {
        self.content.push_str(text);
        self.deltas += 1;
        Step::Delta(text.to_string())
    }

    /// The whole completion, once the end marker came; else what cut it.
    pub(crate) fn finish(self, requested_model: &str) -> Result<Completion, LlmFailure> {
        if !self.done {
            return Err(LlmFailure::Unavailable(format!(
                "the stream from provider `{}` ended after {} delta(s) without its end marker \
                 ({}): the completion is incomplete",
                self.provider,
                self.deltas,
                match self.kind {
                    ProviderKind::OpenAi => "`data: [DONE]`",
                    ProviderKind::Anthropic => "`message_stop`",
                }
            )));
        }
        if self.content.is_empty() && !self.refusal.is_empty() {
            return Err(LlmFailure::Provider(format!(
                "provider `{}`: the model refused: {}",
                self.provider, self.refusal
            )));
        }
        let content = if self.wrapped {
            super::wire::unwrap_value(self.content)
        } else {
            self.content
        };
        Ok(Completion {
            content,
            model: self.model.unwrap_or_else(|| requested_model.to_string()),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
        })
    }

    /// An `error` event (Anthropic) or an `error` object in a chunk
    /// (OpenAI-compatible servers): overloaded and server errors may pass,
    /// the rest is the provider's refusal.
    fn mid_stream_error(&self, error: &Value, anthropic: bool) -> LlmFailure {
        let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map(|m| m.chars().take(super::wire::ERROR_EXCERPT_CHARS).collect())
            .unwrap_or_else(|| error.to_string().chars().take(200).collect::<String>());
        let text = format!(
            "provider `{}` sent an error mid-stream after {} delta(s): {kind}: {message}",
            self.provider, self.deltas
        );
        let passing = matches!(
            kind,
            "overloaded_error" | "api_error" | "server_error" | "rate_limit_error"
        ) || (!anthropic && kind == "error" && error.get("code").is_none());
        if passing {
            LlmFailure::Unavailable(text)
        } else {
            LlmFailure::Provider(text)
        }
    }

    fn malformed(&self, why: String) -> LlmFailure {
        LlmFailure::Provider(format!(
            "provider `{}` ({}) streamed what this host cannot read after {} delta(s): {why}",
            self.provider, self.kind, self.deltas
        ))
    }
}

fn count(usage: &Value, key: &str) -> u32 {
    usage
        .get(key)
        .and_then(Value::as_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(kind: ProviderKind, lines: &[&str]) -> (Vec<String>, Result<Completion, LlmFailure>) {
        let mut decoder = Decoder::new(kind, "p");
        let mut deltas = Vec::new();
        for line in lines {
            match decoder.line(line) {
                Ok(Step::Delta(text)) => deltas.push(text),
                Ok(_) => {}
                Err(e) => return (deltas, Err(e)),
            }
        }
        (deltas, decoder.finish("asked"))
    }

    #[test]
    fn openai_chunks_make_a_completion_at_done() {
        let (deltas, done) = feed(
            ProviderKind::OpenAi,
            &[
                r#"data: {"model":"m1","choices":[{"delta":{"role":"assistant","content":""}}]}"#,
                "",
                r#"data: {"choices":[{"delta":{"content":"Hel"}}]}"#,
                ": keep-alive",
                r#"data:{"choices":[{"delta":{"content":"lo"}}]}"#,
                r#"data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
                "data: [DONE]",
            ],
        );
        assert_eq!(deltas, ["Hel", "lo"]);
        let completion = done.unwrap();
        assert_eq!(completion.content, "Hello");
        assert_eq!(completion.model, "m1");
        assert_eq!((completion.input_tokens, completion.output_tokens), (3, 2));
    }

    #[test]
    fn anthropic_events_make_a_completion_at_message_stop() {
        let (deltas, done) = feed(
            ProviderKind::Anthropic,
            &[
                "event: message_start",
                r#"data: {"type":"message_start","message":{"model":"c1","usage":{"input_tokens":5,"output_tokens":1}}}"#,
                r#"data: {"type":"ping"}"#,
                r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}"#,
                r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" you"}}"#,
                r#"data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}"#,
                r#"data: {"type":"message_stop"}"#,
            ],
        );
        assert_eq!(deltas, ["Hi", " you"]);
        let completion = done.unwrap();
        assert_eq!(
            (completion.content.as_str(), completion.model.as_str()),
            ("Hi you", "c1")
        );
        assert_eq!((completion.input_tokens, completion.output_tokens), (5, 2));
    }

    #[test]
    fn a_forced_tools_input_json_deltas_are_the_structured_text() {
        let lines = [
            r#"data: {"type":"message_start","message":{"model":"c1","usage":{"input_tokens":5}}}"#,
            r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"output","input":{}}}"#,
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":""}}"#,
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\": "}}"#,
            r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"1}"}}"#,
            r#"data: {"type":"message_delta","usage":{"output_tokens":4}}"#,
            r#"data: {"type":"message_stop"}"#,
        ];
        let run = |decoder: Decoder| {
            let mut decoder = decoder;
            let mut deltas = Vec::new();
            for line in lines {
                if let Step::Delta(text) = decoder.line(line).unwrap() {
                    deltas.push(text);
                }
            }
            (deltas, decoder.finish("asked").unwrap())
        };
        let (deltas, completion) =
            run(Decoder::new(ProviderKind::Anthropic, "p").for_schema(false));
        assert_eq!(deltas, ["{\"a\": ", "1}"]);
        assert_eq!(completion.content, "{\"a\": 1}");
        assert_eq!((completion.input_tokens, completion.output_tokens), (5, 4));
        // Without a schema asked, a tool's input is not the answer.
        let (deltas, completion) = run(Decoder::new(ProviderKind::Anthropic, "p"));
        assert!(deltas.is_empty());
        assert_eq!(completion.content, "");
    }

    #[test]
    fn a_wrapped_schemas_value_is_unwrapped_and_a_refusal_is_the_providers_error() {
        let mut decoder = Decoder::new(ProviderKind::OpenAi, "p").for_schema(true);
        for line in [
            r#"data: {"choices":[{"delta":{"content":"{\"value\": "}}]}"#,
            r#"data: {"choices":[{"delta":{"content":"[1, 2]}"}}]}"#,
            "data: [DONE]",
        ] {
            decoder.line(line).unwrap();
        }
        assert_eq!(decoder.finish("m").unwrap().content, "[1,2]");

        let mut decoder = Decoder::new(ProviderKind::OpenAi, "p").for_schema(false);
        for line in [
            r#"data: {"choices":[{"delta":{"refusal":"I can't "}}]}"#,
            r#"data: {"choices":[{"delta":{"refusal":"help with that."}}]}"#,
        ] {
            assert_eq!(decoder.line(line).unwrap(), Step::Nothing, "{line}");
        }
        assert_eq!(decoder.line("data: [DONE]").unwrap(), Step::Done);
        let error = decoder.finish("m").unwrap_err();
        assert_eq!(error.code(), "provider-error");
        assert!(
            error
                .to_string()
                .contains("the model refused: I can't help with that."),
            "{error}"
        );
    }

    #[test]
    fn a_stream_without_its_end_is_never_a_completion() {
        for kind in [ProviderKind::OpenAi, ProviderKind::Anthropic] {
            let line = match kind {
                ProviderKind::OpenAi => r#"data: {"choices":[{"delta":{"content":"half"}}]}"#,
                ProviderKind::Anthropic => {
                    r#"data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"half"}}"#
                }
            };
            let (deltas, done) = feed(kind, &[line]);
            assert_eq!(deltas, ["half"]);
            let error = done.unwrap_err();
            assert!(error.retryable(), "{error}");
            assert!(
                error.to_string().contains("without its end marker"),
                "{error}"
            );
        }
    }

    #[test]
    fn errors_mid_stream_are_named_and_retryable_when_they_may_pass() {
        let (deltas, done) = feed(
            ProviderKind::Anthropic,
            &[
                r#"data: {"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}"#,
                r#"data: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ],
        );
        assert_eq!(deltas, ["a"]);
        let error = done.unwrap_err();
        assert!(error.retryable());
        assert!(
            error.to_string().contains("overloaded_error: Overloaded"),
            "{error}"
        );
        let (_, done) = feed(
            ProviderKind::Anthropic,
            &[r#"data: {"type":"error","error":{"type":"invalid_request_error","message":"no"}}"#],
        );
        assert!(!done.unwrap_err().retryable());
        let (_, done) = feed(ProviderKind::OpenAi, &["data: {not json"]);
        let error = done.unwrap_err();
        assert_eq!(error.code(), "provider-error");
        assert!(error.to_string().contains("not JSON"), "{error}");
    }
}
