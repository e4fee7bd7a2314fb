//! The `llm` capability: completions from a model provider the host is
//! configured with, for the model a scenario grants.
//!
//! Providers are host configuration, not scenario data: the host's
//! configuration file (`crate::config`) names each provider, its wire format
//! (`openai`: chat completions, as OpenAI, vLLM, llama.cpp's server, Ollama's
//! `/v1` and LM Studio speak it; `anthropic`: the messages API), its base URL
//! and the environment variable holding its key. They reach the runtime as
//! its `llm` backend ([`LlmProviders`] in `Backends::llm`). A scenario grants
//! a provider and a model:
//!
//! ```toml
//! capabilities = { llm = "local/qwen2.5:7b" }
//! capabilities = { llm = { provider = "local", model = "qwen2.5:7b", max_tokens = 1024, temperature = 0 } }
//! ```
//!
//! What one `complete` does:
//!
//! - **the request**: the skill's messages to the granted model; its
//!   `max-tokens` capped by the grant's `max_tokens` (which is also the
//!   default; without either, [`DEFAULT_MAX_TOKENS`]); its `temperature`, else
//!   the grant's, else the provider's default. A `json-schema` asks for
//!   structured output (OpenAI's `response_format` with a strict JSON
//!   schema; Anthropic's forced tool whose input is the schema, its input
//!   returned as the content) and the host validates the content against
//!   it: content that does not fit is `invalid-output`, retryable, so the
//!   node's retry policy applies. A schema that is not valid JSON Schema,
//!   no messages, or a `max-tokens` of 0 is `invalid-request`;
//! - **time**: each request gets what is left of the call's deadline (less,
//!   if the provider's `timeout_ms` says so); a 429 or 5xx is retried at
//!   most `max_retries` times with exponential backoff, waiting what a
//!   `Retry-After` asks (seconds or an HTTP date) when it asks, and never
//!   past the deadline (`providers.rs`);
//! - **errors**: another 4xx is `provider-error` with the provider's message
//!   (a 401 or 403 says which variable holds the key), as is a body that is
//!   not what the wire format promises; a provider that stays unavailable is
//!   `provider-unavailable` and one that does not answer in time `timeout`,
//!   both retryable;
//! - **the journal**: every `complete` that reaches the provider is
//!   journaled: the request (provider, model, messages, max_tokens,
//!   temperature, json_schema) and the provider's completion, or the error.
//!   A replay answers from the journal, never reaching the provider (nor
//!   needing it configured); checks that depend only on the request and
//!   the call (the grant, the schema, the budget) come before the journal
//!   and answer the same in both modes, and the output check comes after it,
//!   on the recorded content;
//! - **usage and budget**: each completion's tokens are added to the call's
//!   [`TokenUsage`] (`CallReport::usage`). A call given a token budget
//!   (`CallOptions::token_budget`, what is left of its run's) refuses a
//!   completion once nothing is left (`token-budget-exceeded`);
//! - **secrets**: a provider's API key is sent to that provider only, in
//!   its wire format's header, and appears in no journal entry, error, log
//!   or `Debug` output.
//!
//! Provider base URLs are trusted host configuration: loopback and private
//! addresses are allowed there (a local model server), unlike `http`'s
//! grants. The client blocks its thread, so the engine calls a skill that
//! imports `llm` on a blocking thread (`Skill::needs_blocking_thread`).

mod providers;
mod retry;
mod sse;
pub mod stream;
mod wire;

use std::sync::Arc;

use serde_json::{Map, Value, json};
use wasmtime::component::Linker;

use super::bindings::skillhost::skill::llm::{self as wit, Completion, CompletionRequest, Role};
use super::{
    Backends, Capability, Effects, GrantError, Grantable, Grants, GuestError, HasHostCall,
    HostCall, HostCapability, guest_error, text_of,
};
use crate::call::{CallOptions, CallState};
use crate::journal::JournalValue;

pub use providers::{LlmFailure, LlmProviders, Provider, ProviderKind, ProviderProblem};
pub use stream::{DEFAULT_MAX_STREAMS, MAX_STREAMS_LIMIT, TokenDelta, TokenSink};
pub(crate) use wire::{ChatMessage, ChatRequest, ChatRole};

/// The most tokens a completion may generate when neither the request nor
/// the grant says.
pub const DEFAULT_MAX_TOKENS: u32 = 1024;
/// The largest `max_tokens` a grant may set.
pub const MAX_TOKENS_LIMIT: u32 = 1_000_000;

const GRANT_EXAMPLE: &str = "e.g. `llm = \"local/qwen2.5:7b\"` or `llm = { provider = \"local\", \
    model = \"qwen2.5:7b\", max_tokens = 1024, temperature = 0 }`, where `local` is a provider \
    of the host's configuration";

/// The provider and model a skill may use, and the grant's caps.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmGrant {
    /// A provider of the host's configuration (`[llm.providers.NAME]`).
    pub provider: String,
    /// The model, as the provider names it.
    pub model: String,
    /// Caps a request's `max-tokens`, and is its default.
    pub max_tokens: Option<u32>,
    /// The temperature of a request that gives none.
    pub temperature: Option<f64>,
    /// How many streamed completions (`llm-stream`) one call may have in
    /// flight at once; `None`: [`DEFAULT_MAX_STREAMS`].
    pub max_streams: Option<u32>,
}

impl LlmGrant {
    /// Parses a grant: `PROVIDER/MODEL` (the model may hold `/` itself), or a
    /// table with `provider`, `model` and optionally `max_tokens` and
    /// `temperature` (the scenario's TOML table arrives as JSON).
    pub fn parse(value: &str) -> Result<Self, GrantError> {
        let text = value.trim();
        let grant = if text.starts_with('{') {
            LlmGrant::from_table(text)
        } else {
            match text.split_once('/') {
                Some((provider, model)) => Ok(LlmGrant {
                    provider: provider.to_string(),
                    model: model.to_string(),
                    max_tokens: None,
                    temperature: None,
                    max_streams: None,
                }),
                None => Err(format!("`{text}` is not `PROVIDER/MODEL` (or a table)")),
            }
        };
        grant
            .and_then(|grant| {
                providers::check_provider_name(&grant.provider)?;
                check_model(&grant.model)?;
                Ok(grant)
            })
            .map_err(|message| GrantError::new("llm", format!("{message}; {GRANT_EXAMPLE}")))
    }

    fn from_table(text: &str) -> Result<LlmGrant, String> {
        let table = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(table)) => table,
            Ok(other) => return Err(format!("`{other}` is not a table")),
            Err(e) => return Err(format!("the grant is not a table: {e}")),
        };
        let mut grant = LlmGrant {
            provider: String::new(),
            model: String::new(),
            max_tokens: None,
            temperature: None,
            max_streams: None,
        };
        for (key, value) in &table {
            match key.as_str() {
                "provider" => grant.provider = text_value(key, value)?,
                "model" => grant.model = text_value(key, value)?,
                "max_tokens" => {
                    let tokens = value
                        .as_u64()
                        .filter(|n| (1..=u64::from(MAX_TOKENS_LIMIT)).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "`max_tokens` must be a whole number from 1 to \
                                 {MAX_TOKENS_LIMIT}, not {value}"
                            )
                        })?;
                    grant.max_tokens = Some(tokens as u32);
                }
                "temperature" => {
                    let temperature = value
                        .as_f64()
                        .filter(|t| (0.0..=2.0).contains(t))
                        .ok_or_else(|| {
                            format!("`temperature` must be a number from 0 to 2, not {value}")
                        })?;
                    grant.temperature = Some(temperature);
                }
                "max_streams" => {
                    let streams = value
                        .as_u64()
                        .filter(|n| (1..=u64::from(MAX_STREAMS_LIMIT)).contains(n))
                        .ok_or_else(|| {
                            format!(
                                "`max_streams` must be a whole number from 1 to \
                                 {MAX_STREAMS_LIMIT}, not {value}"
                            )
                        })?;
                    grant.max_streams = Some(streams as u32);
                }
                other => {
                    return Err(format!(
                        "unknown key `{other}`; a grant table has `provider`, `model`, \
                         `max_tokens`, `temperature` and `max_streams`"
                    ));
                }
            }
        }
        if grant.provider.is_empty() {
            return Err("the grant table needs `provider`".into());
        }
        if grant.model.is_empty() {
            return Err("the grant table needs `model`".into());
        }
        Ok(grant)
    }
}

fn text_value(key: &str, value: &Value) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| format!("`{key}` must be a string, not {value}"))
}

fn check_model(model: &str) -> Result<(), String> {
    if model.is_empty() {
        return Err("the model is missing".into());
    }
    if model.len() > 256 || model.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "model `{}` must be 1-256 characters without spaces",
            model.escape_debug()
        ));
    }
    Ok(())
}

/// Tokens used by completions: one call's (`CallReport::usage`), a step's
/// or a run's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Completions that answered.
    pub calls: u64,
}

impl TokenUsage {
    /// Input and output tokens together: what a token budget counts.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    pub fn is_zero(&self) -> bool {
        *self == TokenUsage::default()
    }

    /// Adds `other` to this usage.
    pub fn add(&mut self, other: TokenUsage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.calls = self.calls.saturating_add(other.calls);
    }

    /// `{input_tokens, output_tokens, calls}`, as a step row's
    /// `detail.usage` holds it.
    pub fn to_json(&self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "calls": self.calls,
        })
    }

    /// The usage [`TokenUsage::to_json`] wrote; `None` for anything else.
    pub fn from_json(value: &Value) -> Option<TokenUsage> {
        Some(TokenUsage {
            input_tokens: value.get("input_tokens")?.as_u64()?,
            output_tokens: value.get("output_tokens")?.as_u64()?,
            calls: value.get("calls")?.as_u64()?,
        })
    }
}

pub(crate) struct Llm;

/// One call's `llm`: the grant and the providers (nothing when the call has
/// no `llm` grant), what is left of the run's token budget, and what the
/// call's completions used.
pub(crate) struct LlmCall {
    access: Option<(Arc<LlmGrant>, Arc<LlmProviders>)>,
    tokens_left: Option<u64>,
    pub(crate) usage: TokenUsage,
    /// The call's streamed completions (`llm-stream`), in the order asked;
    /// empty (and unallocated) for a call that streams none.
    streams: Vec<stream::OpenStream>,
    /// Where the deltas handed to the skill go (`CallOptions::tokens`).
    sink: Option<TokenSink>,
}

impl HostCapability for Llm {
    type Call = LlmCall;

    /// A completion waits on the provider, on its own blocking client.
    const BLOCKS: bool = true;
    const JOURNALED: bool = true;
    /// Asks a model beyond the host, which may answer otherwise next time.
    const EFFECTS: Effects = Effects {
        writes: false,
        destructive: false,
        open_world: true,
        varies: true,
    };

    fn grant_schema() -> Value {
        json!({
            "description": "A model of a provider the host's configuration defines: `PROVIDER/MODEL`, or a table with `provider`, `model`, and optionally `max_tokens` (caps and defaults a request's), `temperature` (for requests that give none) and `max_streams` (streamed completions one call may have in flight at once, default 4).",
            "oneOf": [
                {
                    "type": "string",
                    "pattern": "^[A-Za-z0-9_-]{1,64}/\\S+$"
                },
                {
                    "type": "object",
                    "additionalProperties": false,
                    "required": [
                        "provider",
                        "model"
                    ],
                    "properties": {
                        "provider": {
                            "type": "string",
                            "pattern": "^[A-Za-z0-9_-]{1,64}$"
                        },
                        "model": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": 256
                        },
                        "max_tokens": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 1000000
                        },
                        "temperature": {
                            "type": "number",
                            "minimum": 0,
                            "maximum": 2
                        },
                        "max_streams": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 64
                        }
                    }
                }
            ]
        })
    }

    /// The provider, the model and how many messages (`local/MODEL, 2
    /// message(s)`).
    fn describe_request(request: &Value) -> String {
        format!(
            "{}/{}, {} message(s)",
            text_of(request, "provider"),
            text_of(request, "model"),
            request
                .get("messages")
                .and_then(Value::as_array)
                .map_or(0, Vec::len)
        )
    }

    /// The tokens used (`5 in, 7 out tokens`).
    fn describe_answer(ok: &Value) -> String {
        let tokens = |key: &str| ok.get(key).and_then(Value::as_u64).unwrap_or(0);
        format!(
            "{} in, {} out tokens",
            tokens("input_tokens"),
            tokens("output_tokens")
        )
    }

    fn new_call(options: &CallOptions, grants: &Grants, backends: &Backends) -> LlmCall {
        LlmCall {
            access: grants
                .llm
                .as_ref()
                .map(|grant| (grant.clone(), backends.llm.clone())),
            tokens_left: options.token_budget,
            usage: TokenUsage::default(),
            streams: Vec::new(),
            sink: grants.llm.as_ref().and(options.tokens.clone()),
        }
    }

    fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<CallState, HasHostCall<LlmCall>>(linker, |state| HostCall {
            cap: &mut state.capabilities.llm,
            scope: &mut state.scope,
        })
    }
}

/// The interface of streamed completions, as a component imports it.
pub const STREAM_INTERFACE: &str = "llm-stream";

impl Llm {
    /// Adds `llm-stream` to `linker`: the concurrent engine's only.
    pub(crate) fn link_streaming(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        super::bindings::skillhost::skill::llm_stream::add_to_linker::<
            CallState,
            HasHostCall<LlmCall>,
        >(linker, |state| HostCall {
            cap: &mut state.capabilities.llm,
            scope: &mut state.scope,
        })
    }
}

impl Grantable for Llm {
    type Grant = LlmGrant;

    const EXAMPLE: &'static str = "\"local/qwen2.5:7b\"";
    const FLAG_VALUE: &'static str = "PROVIDER/MODEL (or a JSON table; the provider from the host's configuration, skillhost.toml here, $SKILLHOST_CONFIG or ~/.config/skillhost/config.toml)";

    fn parse_grant(value: &str) -> Result<LlmGrant, GrantError> {
        LlmGrant::parse(value)
    }
}

impl JournalValue for Completion {
    fn to_journal(&self) -> Value {
        json!({
            "content": self.content,
            "model": self.model,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
        })
    }

    fn from_journal(value: &Value) -> Option<Self> {
        Some(Completion {
            content: value.get("content")?.as_str()?.to_string(),
            model: value.get("model")?.as_str()?.to_string(),
            input_tokens: u32::try_from(value.get("input_tokens")?.as_u64()?).ok()?,
            output_tokens: u32::try_from(value.get("output_tokens")?.as_u64()?).ok()?,
        })
    }
}

/// A request checked and completed by the grant: what is sent, journaled,
/// and checked on the way back.
struct Prepared {
    messages: Vec<ChatMessage>,
    max_tokens: u32,
    temperature: Option<f64>,
    schema: Option<(Value, jsonschema::Validator)>,
}

fn invalid(message: impl Into<String>) -> GuestError {
    guest_error("invalid-request", message)
}

impl Prepared {
    fn new(grant: &LlmGrant, request: CompletionRequest) -> Result<Prepared, GuestError> {
        if request.messages.is_empty() {
            return Err(invalid("a completion needs at least one message"));
        }
        let max_tokens = match (request.max_tokens, grant.max_tokens) {
            (Some(0), _) => return Err(invalid("`max-tokens` must be at least 1")),
            (Some(asked), Some(cap)) => asked.min(cap),
            (Some(asked), None) => asked,
            (None, Some(cap)) => cap,
            (None, None) => DEFAULT_MAX_TOKENS,
        };
        let temperature = match request.temperature {
            Some(t) if !(t.is_finite() && (0.0..=2.0).contains(&t)) => {
                return Err(invalid(format!(
                    "`temperature` must be a number from 0 to 2, not {t}"
                )));
            }
            // Through its shortest decimal form, so 0.7 is sent (and
            // journaled) as 0.7, not as the f32's 0.699999988079071.
            Some(t) => Some(t.to_string().parse::<f64>().unwrap_or(f64::from(t))),
            None => grant.temperature,
        };
        let schema = match &request.json_schema {
            None => None,
            Some(text) => {
                let schema: Value = serde_json::from_str(text)
                    .map_err(|e| invalid(format!("`json-schema` is not JSON: {e}")))?;
                let validator = jsonschema::validator_for(&schema).map_err(|e| {
                    invalid(format!("`json-schema` is not a valid JSON Schema: {e}"))
                })?;
                Some((schema, validator))
            }
        };
        let messages = request
            .messages
            .into_iter()
            .map(|m| ChatMessage {
                role: match m.role {
                    Role::System => ChatRole::System,
                    Role::User => ChatRole::User,
                    Role::Assistant => ChatRole::Assistant,
                },
                content: m.content,
            })
            .collect();
        Ok(Prepared {
            messages,
            max_tokens,
            temperature,
            schema,
        })
    }

    /// What the journal records of the request: everything that decides
    /// the answer, never the provider's address or key.
    fn journal_request(&self, grant: &LlmGrant) -> Value {
        let mut record = Map::new();
        record.insert("provider".into(), json!(grant.provider));
        record.insert("model".into(), json!(grant.model));
        record.insert(
            "messages".into(),
            Value::Array(
                self.messages
                    .iter()
                    .map(|m| json!({ "role": m.role.name(), "content": m.content }))
                    .collect(),
            ),
        );
        record.insert("max_tokens".into(), json!(self.max_tokens));
        record.insert("temperature".into(), json!(self.temperature));
        record.insert(
            "json_schema".into(),
            self.schema.as_ref().map_or(Value::Null, |(s, _)| s.clone()),
        );
        Value::Object(record)
    }

    fn chat<'a>(&'a self, grant: &'a LlmGrant) -> ChatRequest<'a> {
        ChatRequest {
            model: &grant.model,
            messages: &self.messages,
            max_tokens: self.max_tokens,
            temperature: self.temperature,
            json_schema: self.schema.as_ref().map(|(s, _)| s),
        }
    }

    /// The completion's content checked against the requested schema.
    fn check_output(&self, provider: &str, content: &str) -> Result<(), GuestError> {
        let Some((_, validator)) = &self.schema else {
            return Ok(());
        };
        let not_fitting = |why: String| GuestError {
            code: "invalid-output".into(),
            message: format!(
                "the completion from provider `{provider}` does not fit the requested JSON \
                 Schema: {why}"
            ),
            retryable: true,
        };
        let value: Value = serde_json::from_str(content).map_err(|e| {
            not_fitting(format!(
                "it is not JSON ({e}); it starts `{}`",
                content.chars().take(80).collect::<String>().escape_debug()
            ))
        })?;
        let problems: Vec<String> = validator
            .iter_errors(&value)
            .take(5)
            .map(|e| {
                let at = e.instance_path.as_str();
                format!("{}: {e}", if at.is_empty() { "/" } else { at })
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(not_fitting(problems.join("; ")))
        }
    }
}

impl LlmCall {
    fn count(&mut self, completion: &Completion) {
        let used = TokenUsage {
            input_tokens: u64::from(completion.input_tokens),
            output_tokens: u64::from(completion.output_tokens),
            calls: 1,
        };
        self.usage.add(used);
        if let Some(left) = &mut self.tokens_left {
            *left = left.saturating_sub(used.total());
        }
    }
}

impl wit::Host for HostCall<'_, LlmCall> {
    fn complete(
        &mut self,
        request: CompletionRequest,
    ) -> wasmtime::Result<Result<Completion, GuestError>> {
        let Some((grant, providers)) = self.cap.access.clone() else {
            return Ok(Err(self.deny(Capability::Llm)));
        };
        let prepared = match Prepared::new(&grant, request) {
            Ok(prepared) => prepared,
            Err(e) => return Ok(Err(e)),
        };
        if self.cap.tokens_left == Some(0) {
            return Ok(Err(guest_error(
                "token-budget-exceeded",
                format!(
                    "no tokens are left of the run's token budget, so this completion was \
                     refused before it reached provider `{}` (this call used {} tokens in {} \
                     completion(s))",
                    grant.provider,
                    self.cap.usage.total(),
                    self.cap.usage.calls
                ),
            )));
        }
        let deadline = self.scope.deadline();
        let record = prepared.journal_request(&grant);
        let answer = self.scope.journaled(Capability::Llm, record, 0, |_| {
            providers
                .complete(&grant.provider, &prepared.chat(&grant), deadline)
                .map_err(GuestError::from)
        })?;
        let completion = match answer {
            Ok(completion) => completion,
            Err(e) => return Ok(Err(e)),
        };
        self.cap.count(&completion);
        if let Err(e) = prepared.check_output(&grant.provider, &completion.content) {
            return Ok(Err(e));
        }
        Ok(Ok(completion))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_name_a_provider_and_a_model() {
        assert_eq!(
            LlmGrant::parse("local/qwen2.5:7b").unwrap(),
            LlmGrant {
                provider: "local".into(),
                model: "qwen2.5:7b".into(),
                max_tokens: None,
                temperature: None,
                max_streams: None,
            }
        );
        // A model may have slashes of its own.
        assert_eq!(
            LlmGrant::parse("vllm/meta-llama/Llama-3.1-8B")
                .unwrap()
                .model,
            "meta-llama/Llama-3.1-8B"
        );
        let table = LlmGrant::parse(
            r#"{"provider": "claude", "model": "claude-sonnet-4", "max_tokens": 512, "temperature": 0}"#,
        )
        .unwrap();
        assert_eq!(table.max_tokens, Some(512));
        assert_eq!(table.temperature, Some(0.0));
    }

    #[test]
    fn bad_grants_say_what_is_wrong_and_show_a_good_one() {
        for (value, says) in [
            ("", "is not `PROVIDER/MODEL`"),
            ("local", "is not `PROVIDER/MODEL`"),
            ("/model", "provider name"),
            ("local/", "the model is missing"),
            ("lo cal/m", "provider name"),
            ("local/a model", "without spaces"),
            (r#"{"provider": "local"}"#, "needs `model`"),
            (r#"{"model": "m"}"#, "needs `provider`"),
            (
                r#"{"provider": "local", "model": "m", "top_p": 1}"#,
                "unknown key `top_p`",
            ),
            (
                r#"{"provider": "local", "model": "m", "temperature": -0.5}"#,
                "`temperature`",
            ),
            (
                r#"{"provider": "local", "model": "m", "temperature": "hot"}"#,
                "`temperature`",
            ),
            (
                r#"{"provider": "local", "model": "m", "max_tokens": 0}"#,
                "`max_tokens`",
            ),
            (
                r#"{"provider": "local", "model": "m", "max_tokens": 1.5}"#,
                "`max_tokens`",
            ),
            (
                r#"{"provider": 3, "model": "m"}"#,
                "`provider` must be a string",
            ),
            ("{", "not a table"),
        ] {
            let error = LlmGrant::parse(value).unwrap_err().to_string();
            assert!(error.starts_with("capability `llm`"), "{error}");
            assert!(error.contains(says), "{value}: {error}");
            assert!(error.contains("llm = \"local/qwen2.5:7b\""), "{error}");
        }
    }

    #[test]
    fn usage_round_trips_through_a_step_detail() {
        let usage = TokenUsage {
            input_tokens: 12,
            output_tokens: 5,
            calls: 2,
        };
        assert_eq!(TokenUsage::from_json(&usage.to_json()), Some(usage));
        assert_eq!(usage.total(), 17);
        assert!(TokenUsage::default().is_zero());
        assert_eq!(TokenUsage::from_json(&json!({ "calls": 1 })), None);
    }
}
