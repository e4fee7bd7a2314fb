//! The `llm` capability's backend: the providers of the host's
//! configuration ([`LlmProviders`], `Backends::llm`) and the one HTTP client
//! that reaches them, a completion at a time: the request in the provider's
//! wire format, its retries, and its answer or a named error.
//!
//! The client is reqwest's blocking client over rustls with the system's
//! roots, built on first use: no proxy from the environment and no redirects
//! (a provider's API answers where it is configured; a redirect could carry
//! the key elsewhere). Unlike `http`'s client it reaches loopback and
//! private addresses: a provider's address is the host operator's choice,
//! not a scenario's.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use super::retry;
use super::wire::{self, ChatRequest};
use crate::capabilities::GuestError;
use crate::capabilities::bindings::skillhost::skill::llm::Completion;
use crate::config::{ConfigSource, ProviderDecl};

/// Retries of a 429 or 5xx unless the provider's `max_retries` says.
pub const DEFAULT_MAX_RETRIES: u32 = 3;
/// The most `max_retries` a provider may set.
pub const MAX_RETRIES_LIMIT: u32 = 10;
/// The largest `timeout_ms` a provider may set (an hour).
pub const MAX_TIMEOUT_MS: u64 = 3_600_000;
/// The largest answer read from a provider.
pub const MAX_ANSWER_BYTES: u64 = 16 << 20;
/// The most of an error answer (a status other than 2xx) read from a
/// provider: its message is cut to a short excerpt anyway
/// ([`wire::ERROR_EXCERPT_CHARS`]).
pub const MAX_ERROR_BYTES: u64 = 64 << 10;
/// The longest line of a streamed answer (a server-sent event's line).
pub const MAX_LINE_BYTES: usize = 1 << 20;

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderKind {
    /// Chat completions (`POST {base_url}/chat/completions`), as OpenAI,
    /// vLLM, llama.cpp's server, Ollama's `/v1` and LM Studio speak it.
    OpenAi,
    /// Anthropic's messages API (`POST {base_url}/v1/messages`).
    Anthropic,
}

impl ProviderKind {
    pub fn name(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "openai",
            ProviderKind::Anthropic => "anthropic",
        }
    }

    /// The base URL of a provider of this kind that gives none.
    pub fn default_base_url(self) -> &'static str {
        match self {
            ProviderKind::OpenAi => "https://api.openai.com/v1",
            ProviderKind::Anthropic => "https://api.anthropic.com",
        }
    }

    fn parse(kind: &str) -> Option<ProviderKind> {
        match kind {
            "openai" => Some(ProviderKind::OpenAi),
            "anthropic" => Some(ProviderKind::Anthropic),
            _ => None,
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One provider of the host's configuration.
#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: url::Url,
    api_key: Option<ApiKey>,
    /// The longest one request may wait, when shorter than what is left of
    /// the call's deadline.
    pub timeout: Option<Duration>,
    /// Retries of a 429 or 5xx.
    pub max_retries: u32,
}

impl Provider {
    /// What a failing answer (`status`, its error `message`, its
    /// `Retry-After`) to attempt `retry` + 1 means, for a completion and a
    /// streamed one alike: the wait before trying again (a 429 or 5xx,
    /// within `max_retries` and before `deadline`), or the failure the
    /// skill gets.
    fn after_failure(
        &self,
        model: &str,
        status: u16,
        message: &str,
        retry_after: Option<&str>,
        retry: u32,
        deadline: Instant,
    ) -> Result<Duration, LlmFailure> {
        let name = &self.name;
        match status {
            429 | 500..=599 => {
                if retry >= self.max_retries {
                    return Err(unavailable(format!(
                        "provider `{name}` answered {status} ({message}) to each of {} \
                         attempt(s) (max_retries = {})",
                        retry + 1,
                        self.max_retries
                    )));
                }
                let asked = retry_after.and_then(|v| retry::retry_after(v, SystemTime::now()));
                let wait = asked.unwrap_or_else(|| retry::backoff(retry));
                let past_deadline = Instant::now()
                    .checked_add(wait)
                    .is_none_or(|then| then >= deadline);
                if past_deadline {
                    return Err(unavailable(format!(
                        "provider `{name}` answered {status} ({message}); waiting {} ms \
                         to try again{} would pass the call's deadline",
                        wait.as_millis(),
                        if asked.is_some() {
                            ", as its Retry-After asks,"
                        } else {
                            ""
                        }
                    )));
                }
                Ok(wait)
            }
            401 | 403 => {
                let hint = match self.api_key_env() {
                    Some(variable) => format!("check the API key in ${variable}"),
                    None => format!(
                        "the provider may need a key: name the variable holding it in \
                         `api_key_env` of [llm.providers.{name}]"
                    ),
                };
                Err(provider_error(format!(
                    "provider `{name}` refused the request with {status} ({message}); {hint}"
                )))
            }
            _ => Err(provider_error(format!(
                "provider `{name}` answered {status} to model `{model}`: {message}"
            ))),
        }
    }
}

/// An API key read from the environment. Its `Debug` names the variable,
/// never the value.
#[derive(Clone)]
struct ApiKey {
    variable: String,
    value: Option<String>,
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = if self.value.is_some() {
            "set"
        } else {
            "not set"
        };
        write!(f, "env:{} ({state})", self.variable)
    }
}

/// A provider name: what a grant and a `[llm.providers.NAME]` table say.
pub(crate) fn check_provider_name(name: &str) -> Result<(), String> {
    let valid = (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "provider name `{}` must be 1-64 letters, digits, `-` or `_`",
            name.escape_debug()
        ))
    }
}

fn is_variable_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Provider {
    /// A `[llm.providers.NAME]` table as a provider, its key read through
    /// `env`. The error names the key at fault, never a secret.
    pub(crate) fn from_decl(
        name: &str,
        decl: ProviderDecl,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Provider, String> {
        check_provider_name(name)?;
        let kind = ProviderKind::parse(&decl.kind).ok_or_else(|| {
            format!(
                "kind `{}` is not a wire format this host speaks; use \"openai\" (chat \
                 completions: OpenAI, vLLM, llama.cpp's server, Ollama's /v1, LM Studio) or \
                 \"anthropic\" (the messages API)",
                decl.kind.escape_debug()
            )
        })?;
        let text = decl.base_url.as_deref().unwrap_or(kind.default_base_url());
        let base_url = url::Url::parse(text)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| {
                format!(
                    "base_url `{}` is not an http or https URL with a host, e.g. \
                     \"http://127.0.0.1:11434/v1\"",
                    text.escape_debug()
                )
            })?;
        if !base_url.username().is_empty() || base_url.password().is_some() {
            return Err(
                "base_url holds credentials, which are refused in a file; name the variable \
                 holding the key in api_key_env"
                    .into(),
            );
        }
        if base_url.query().is_some() || base_url.fragment().is_some() {
            return Err(format!(
                "base_url `{base_url}` must not have a query or fragment"
            ));
        }
        let api_key = match decl.api_key_env {
            None => None,
            Some(variable) => {
                if !is_variable_name(&variable) {
                    // Not echoed: it may be the key itself, written in the
                    // wrong place.
                    return Err(
                        "api_key_env must name an environment variable (letters, digits and \
                         `_`, e.g. \"ANTHROPIC_API_KEY\"); the key itself is never written in \
                         a file"
                            .into(),
                    );
                }
                let value = env(&variable).filter(|v| !v.is_empty());
                Some(ApiKey { variable, value })
            }
        };
        let timeout = match decl.timeout_ms {
            None => None,
            Some(ms) if (1..=MAX_TIMEOUT_MS).contains(&ms) => Some(Duration::from_millis(ms)),
            Some(ms) => {
                return Err(format!(
                    "timeout_ms must be from 1 to {MAX_TIMEOUT_MS}, not {ms}"
                ));
            }
        };
        let max_retries = match decl.max_retries {
            None => DEFAULT_MAX_RETRIES,
            Some(n) if n <= MAX_RETRIES_LIMIT => n,
            Some(n) => {
                return Err(format!(
                    "max_retries must be from 0 to {MAX_RETRIES_LIMIT}, not {n}"
                ));
            }
        };
        Ok(Provider {
            name: name.to_string(),
            kind,
            base_url,
            api_key,
            timeout,
            max_retries,
        })
    }

    /// The environment variable the provider's key comes from, if it has one.
    pub fn api_key_env(&self) -> Option<&str> {
        self.api_key.as_ref().map(|k| k.variable.as_str())
    }

    /// Whether the provider names a key variable that was not set.
    pub fn api_key_missing(&self) -> bool {
        self.api_key.as_ref().is_some_and(|k| k.value.is_none())
    }

    fn key(&self) -> Option<&str> {
        self.api_key.as_ref().and_then(|k| k.value.as_deref())
    }
}

/// Why a grant's provider cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderProblem {
    /// No `[llm.providers.NAME]` in the host's configuration.
    #[error("{message}")]
    NotConfigured { provider: String, message: String },
    /// The provider's `api_key_env` names a variable that is not set.
    #[error("{message}")]
    MissingKey {
        provider: String,
        variable: String,
        message: String,
    },
}

/// The providers of the host's configuration: the `llm` capability's
/// backend (`Backends::llm`). Shared by every call of a runtime.
pub struct LlmProviders {
    providers: BTreeMap<String, Provider>,
    source: Arc<ConfigSource>,
    client: OnceLock<Result<reqwest::blocking::Client, String>>,
}

impl fmt::Debug for LlmProviders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmProviders")
            .field("providers", &self.providers)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Default for LlmProviders {
    /// No providers, configured in code.
    fn default() -> Self {
        LlmProviders::empty(Arc::new(ConfigSource::none()))
    }
}

impl LlmProviders {
    pub fn new(providers: BTreeMap<String, Provider>, source: Arc<ConfigSource>) -> Self {
        LlmProviders {
            providers,
            source,
            client: OnceLock::new(),
        }
    }

    /// No providers; `source` says where none were found.
    pub fn empty(source: Arc<ConfigSource>) -> Self {
        LlmProviders::new(BTreeMap::new(), source)
    }

    pub fn provider(&self, name: &str) -> Option<&Provider> {
        self.providers.get(name)
    }

    pub fn is_empty(&self) -> bool {
        self.providers.is_empty()
    }

    /// Where the configuration these providers came from was looked for.
    pub fn source(&self) -> &ConfigSource {
        &self.source
    }

    /// The provider `name`, if it is configured and has its key.
    pub fn check(&self, name: &str) -> Result<&Provider, ProviderProblem> {
        let Some(provider) = self.providers.get(name) else {
            let names: Vec<String> = self.providers.keys().map(|n| format!("`{n}`")).collect();
            let configured = match (self.source.used(), names.is_empty()) {
                (Some(_), true) => format!("{}, and it defines no provider", self.source),
                (Some(_), false) => format!("{}, and it defines {}", self.source, names.join(", ")),
                (None, true) => self.source.to_string(),
                (None, false) => format!("the providers configured are {}", names.join(", ")),
            };
            return Err(ProviderProblem::NotConfigured {
                provider: name.to_string(),
                message: format!(
                    "provider `{name}` is not configured: {configured}. Define it in the host's \
                     configuration (`skillhost.toml` beside the scenario, the file \
                     $SKILLHOST_CONFIG names, or ~/.config/skillhost/config.toml), e.g. \
                     `[llm.providers.{name}]` with `kind = \"openai\"` and `base_url = \
                     \"http://127.0.0.1:11434/v1\"` (or `kind = \"anthropic\"` and \
                     `api_key_env = \"ANTHROPIC_API_KEY\"`)"
                ),
            });
        };
        if let Some(key) = &provider.api_key
            && key.value.is_none()
        {
            let place = self
                .source
                .used()
                .map(|p| format!(" in {}", p.display()))
                .unwrap_or_default();
            return Err(ProviderProblem::MissingKey {
                provider: name.to_string(),
                variable: key.variable.clone(),
                message: format!(
                    "provider `{name}` takes its API key from ${} (`api_key_env` of \
                     [llm.providers.{name}]{place}), which is not set in the host's \
                     environment; set it, or remove `api_key_env` if the provider needs no key",
                    key.variable
                ),
            });
        }
        Ok(provider)
    }

    fn client(&self) -> Result<&reqwest::blocking::Client, String> {
        self.client
            .get_or_init(|| {
                reqwest::blocking::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .user_agent(concat!("skillhost/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| format!("cannot set up the HTTP client: {e}"))
            })
            .as_ref()
            .map_err(Clone::clone)
    }

    /// One completion of `chat` from provider `name`, its 429s and 5xx
    /// retried, nothing waited past `deadline`.
    pub(crate) fn complete(
        &self,
        name: &str,
        chat: &ChatRequest<'_>,
        deadline: Instant,
    ) -> Result<Completion, LlmFailure> {
        let provider = self.check(name)?;
        let kind = provider.kind;
        let body = wire::request_body(kind, chat).map_err(|why| {
            LlmFailure::InvalidRequest(format!("provider `{name}` ({kind}): {why}"))
        })?;
        let body = serde_json::to_vec(&body).map_err(|e| {
            LlmFailure::InvalidRequest(format!("the request cannot be encoded: {e}"))
        })?;
        let url = wire::endpoint(kind, &provider.base_url);
        let headers = wire::headers(kind, provider.key());
        let client = self.client().map_err(unavailable)?;
        let mut retry = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out(format!(
                    "provider `{name}` did not answer before the call's deadline"
                )));
            }
            let (timeout, by_provider) = match provider.timeout {
                Some(limit) if limit < left => (limit, true),
                _ => (left, false),
            };
            let reply = match post(client, &url, &headers, &body, timeout) {
                Ok(reply) => reply,
                Err(SendFailure::Timeout) if by_provider => {
                    return Err(timed_out(format!(
                        "provider `{name}` did not answer within its timeout_ms of {} ms",
                        timeout.as_millis()
                    )));
                }
                Err(failure) => return Err(failure.named(name, &url)),
            };
            match reply.status {
                200..=299 => {
                    return wire::parse_answer(kind, &reply.body, chat).map_err(|why| {
                        provider_error(format!(
                            "provider `{name}` ({kind}) at {url} answered with a body this \
                             host cannot read: {why}"
                        ))
                    });
                }
                status => {
                    let message = wire::error_message(&reply.body);
                    let retry_after = reply.retry_after.as_deref();
                    let wait = provider.after_failure(
                        chat.model,
                        status,
                        &message,
                        retry_after,
                        retry,
                        deadline,
                    )?;
                    std::thread::sleep(wait);
                    retry += 1;
                }
            }
        }
    }
}

impl LlmProviders {
    /// One streamed completion of `chat` from provider `name`: `on_delta`
    /// gets each piece of text as it is read (it returns false to stop: the
    /// call that asked has ended), and the whole completion comes back once
    /// the stream's end marker came. A 429 or 5xx before the stream starts
    /// is retried as [`LlmProviders::complete`] retries it; once text has
    /// flowed nothing is retried here (the skill has seen it: a retry is
    /// the node's). Bounded: nothing waited past `deadline` (the stream's
    /// whole time included), no line longer than [`MAX_LINE_BYTES`], no more
    /// than [`MAX_ANSWER_BYTES`] in all.
    pub(crate) fn stream(
        &self,
        name: &str,
        chat: &ChatRequest<'_>,
        deadline: Instant,
        on_delta: &mut dyn FnMut(String) -> bool,
    ) -> Result<Completion, LlmFailure> {
        use std::io::BufRead as _;
        let provider = self.check(name)?;
        let kind = provider.kind;
        let mut body = wire::request_body(kind, chat).map_err(|why| {
            LlmFailure::InvalidRequest(format!("provider `{name}` ({kind}): {why}"))
        })?;
        if let Some(body) = body.as_object_mut() {
            body.insert("stream".into(), serde_json::Value::Bool(true));
            if kind == ProviderKind::OpenAi {
                body.insert(
                    "stream_options".into(),
                    serde_json::json!({ "include_usage": true }),
                );
            }
        }
        let body = serde_json::to_vec(&body).map_err(|e| {
            LlmFailure::InvalidRequest(format!("the request cannot be encoded: {e}"))
        })?;
        let url = wire::endpoint(kind, &provider.base_url);
        let headers = wire::headers(kind, provider.key());
        let client = self.client().map_err(unavailable)?;
        let mut retry = 0;
        let response = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out(format!(
                    "provider `{name}` did not answer before the call's deadline"
                )));
            }
            let mut request = client
                .post(&url)
                .timeout(left)
                .header("content-type", "application/json")
                .header("accept", "text/event-stream")
                .body(body.clone());
            for (header, value) in &headers {
                request = request.header(*header, value);
            }
            let response = match request.send().map_err(failure) {
                Ok(response) => response,
                Err(failure) => return Err(failure.named(name, &url)),
            };
            let status = response.status().as_u16();
            if (200..300).contains(&status) {
                break response;
            }
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            let mut error_body = Vec::new();
            let _ = std::io::Read::read_to_end(
                &mut std::io::Read::take(response, MAX_ERROR_BYTES),
                &mut error_body,
            );
            let message = wire::error_message(&error_body);
            let wait = provider.after_failure(
                chat.model,
                status,
                &message,
                retry_after.as_deref(),
                retry,
                deadline,
            )?;
            std::thread::sleep(wait);
            retry += 1;
        };
        let mut reader = std::io::BufReader::new(response);
        let mut decoder = super::sse::Decoder::new(kind, name);
        if chat.json_schema.is_some() {
            decoder = decoder.for_schema(chat.wrapped());
        }
        let mut line = Vec::new();
        let mut total: u64 = 0;
        loop {
            line.clear();
            let read = std::io::Read::take(&mut reader, MAX_LINE_BYTES as u64 + 1)
                .read_until(b'\n', &mut line)
                .map_err(|e| {
                    let timeout = e.kind() == std::io::ErrorKind::TimedOut
                        || e.get_ref()
                            .and_then(|e| e.downcast_ref::<reqwest::Error>())
                            .is_some_and(reqwest::Error::is_timeout);
                    if timeout {
                        timed_out(format!(
                            "provider `{name}` was still streaming at the call's deadline, \
                             after {} delta(s)",
                            decoder.deltas()
                        ))
                    } else {
                        unavailable(format!(
                            "the stream from provider `{name}` broke after {} delta(s): {e}",
                            decoder.deltas()
                        ))
                    }
                })?;
            if read == 0 {
                break;
            }
            total += read as u64;
            if line.len() > MAX_LINE_BYTES && !line.ends_with(b"\n") {
                return Err(provider_error(format!(
                    "provider `{name}` streamed a line longer than {MAX_LINE_BYTES} bytes, \
                     after {} delta(s); the stream was stopped",
                    decoder.deltas()
                )));
            }
            if total > MAX_ANSWER_BYTES {
                return Err(provider_error(format!(
                    "provider `{name}` streamed more than {MAX_ANSWER_BYTES} bytes, after {} \
                     delta(s); the stream was stopped",
                    decoder.deltas()
                )));
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
            match decoder.line(text)? {
                super::sse::Step::Delta(delta) => {
                    if !on_delta(delta) {
                        return Err(LlmFailure::Unavailable(
                            "the skill dropped the stream, or its call ended, before the stream did".into(),
                        ));
                    }
                }
                super::sse::Step::Done => break,
                super::sse::Step::Nothing => {}
            }
        }
        decoder.finish(chat.model)
    }
}

/// Why a provider gave no completion. The skill gets it as the
/// `skill-error` of its kind ([`LlmFailure::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LlmFailure {
    /// The grant's provider is not configured, or its key is not set.
    #[error(transparent)]
    NotConfigured(#[from] ProviderProblem),
    /// The request cannot be written in the provider's wire format.
    #[error("{0}")]
    InvalidRequest(String),
    /// No answer before the call's deadline or the provider's timeout.
    #[error("{0}")]
    Timeout(String),
    /// Unreachable, or busy past its retries or the deadline.
    #[error("{0}")]
    Unavailable(String),
    /// It refused the request, or answered what this host cannot read.
    #[error("{0}")]
    Provider(String),
}

impl LlmFailure {
    /// The `skill-error` code the skill gets.
    pub fn code(&self) -> &'static str {
        match self {
            LlmFailure::NotConfigured(_) => "provider-not-configured",
            LlmFailure::InvalidRequest(_) => "invalid-request",
            LlmFailure::Timeout(_) => "timeout",
            LlmFailure::Unavailable(_) => "provider-unavailable",
            LlmFailure::Provider(_) => "provider-error",
        }
    }

    /// Whether the same request may succeed later.
    pub fn retryable(&self) -> bool {
        matches!(self, LlmFailure::Timeout(_) | LlmFailure::Unavailable(_))
    }
}

impl From<LlmFailure> for GuestError {
    fn from(failure: LlmFailure) -> GuestError {
        GuestError {
            code: failure.code().into(),
            message: failure.to_string(),
            retryable: failure.retryable(),
        }
    }
}

fn timed_out(message: String) -> LlmFailure {
    LlmFailure::Timeout(message)
}

fn unavailable(message: String) -> LlmFailure {
    LlmFailure::Unavailable(message)
}

fn provider_error(message: String) -> LlmFailure {
    LlmFailure::Provider(message)
}

/// What a provider answered.
struct Reply {
    status: u16,
    retry_after: Option<String>,
    body: Vec<u8>,
}

/// Why a request got no answer.
enum SendFailure {
    Timeout,
    TooLarge,
    Failed(String),
}

impl SendFailure {
    /// The failure of a request to provider `name` at `url`, as the skill
    /// gets it (a timeout here is the call's deadline's).
    fn named(self, name: &str, url: &str) -> LlmFailure {
        match self {
            SendFailure::Timeout => timed_out(format!(
                "provider `{name}` did not answer before the call's deadline"
            )),
            SendFailure::TooLarge => provider_error(format!(
                "provider `{name}` at {url}: the answer is larger than {MAX_ANSWER_BYTES} bytes"
            )),
            SendFailure::Failed(why) => {
                unavailable(format!("cannot reach provider `{name}` at {url}: {why}"))
            }
        }
    }
}

/// Posts `body` to `url` and reads the answer, within `timeout`.
fn post(
    client: &reqwest::blocking::Client,
    url: &str,
    headers: &[(&'static str, String)],
    body: &[u8],
    timeout: Duration,
) -> Result<Reply, SendFailure> {
    use std::io::Read as _;
    let mut request = client
        .post(url)
        .timeout(timeout)
        .header("content-type", "application/json")
        .body(body.to_vec());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().map_err(failure)?;
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // An answer is read to its cap; an error answer only as far as its
    // message needs, however long it is.
    let success = (200..300).contains(&status);
    if success
        && response
            .content_length()
            .is_some_and(|n| n > MAX_ANSWER_BYTES)
    {
        return Err(SendFailure::TooLarge);
    }
    let limit = if success {
        MAX_ANSWER_BYTES + 1
    } else {
        MAX_ERROR_BYTES
    };
    let mut body = Vec::new();
    response.take(limit).read_to_end(&mut body).map_err(|e| {
        match e.get_ref().and_then(|e| e.downcast_ref::<reqwest::Error>()) {
            Some(e) if e.is_timeout() => SendFailure::Timeout,
            _ if e.kind() == std::io::ErrorKind::TimedOut => SendFailure::Timeout,
            _ => SendFailure::Failed(format!("reading the answer: {e}")),
        }
    })?;
    if body.len() as u64 > MAX_ANSWER_BYTES {
        return Err(SendFailure::TooLarge);
    }
    Ok(Reply {
        status,
        retry_after,
        body,
    })
}

/// A reqwest error as a failure: a timeout, or the error with its causes.
fn failure(error: reqwest::Error) -> SendFailure {
    if error.is_timeout() {
        return SendFailure::Timeout;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    let mut text = Vec::new();
    while let Some(e) = source {
        let line = e.to_string();
        if !text.contains(&line) {
            text.push(line);
        }
        source = e.source();
    }
    SendFailure::Failed(text.join(": "))
}
