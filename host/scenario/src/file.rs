//! The scenario file as written: TOML deserialized with spans, before any
//! name is resolved or expression compiled.
//!
//! Every key the format has is listed here, and unknown keys are refused, so
//! a typo (`timout_ms`) is an error with a line rather than a silent default.
//! Keep `schemas/scenario.schema.json` and `docs/scenarios.md` in step with
//! these types.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};
use toml::Spanned;

use super::{FieldType, NodeKind, Reducer, Severity};

/// A whole scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScenarioFile {
    pub scenario: Spanned<Header>,
    #[serde(default)]
    pub input: Entries<Spanned<InputFieldDecl>>,
    #[serde(default)]
    pub config: Map<String, Value>,
    #[serde(default)]
    pub state: Entries<Spanned<StateFieldDecl>>,
    #[serde(default)]
    pub skills: Entries<Spanned<SkillDecl>>,
    #[serde(default, rename = "node")]
    pub nodes: Vec<Spanned<NodeDecl>>,
    #[serde(default, rename = "edge")]
    pub edges: Vec<Spanned<EdgeDecl>>,
    #[serde(default, rename = "rule")]
    pub rules: Vec<Spanned<RuleDecl>>,
    /// `[summary]`: label -> CEL over the final state, printed after a run.
    #[serde(default)]
    pub summary: Entries<Spanned<String>>,
    /// `[trust]`: the keys its registry components must be signed by.
    #[serde(default)]
    pub trust: TrustDecl,
    /// `[[schedule]]`: cron entries `host worker --schedules` enqueues runs by.
    #[serde(default, rename = "schedule")]
    pub schedules: Vec<Spanned<ScheduleDecl>>,
}

/// `[[schedule]] cron = "0 * * * *", input = { … }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleDecl {
    /// What the schedule's ticks are recorded under (default: its position,
    /// `1`, `2`, …).
    pub name: Option<Spanned<String>>,
    pub cron: Spanned<String>,
    #[serde(default)]
    pub input: Map<String, Value>,
}

/// `[trust] keys = ["publisher.pub"]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrustDecl {
    #[serde(default)]
    pub keys: Vec<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub name: Spanned<String>,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub description: String,
    pub start: Option<Spanned<String>>,
    pub on_failure: Option<Spanned<String>>,
    /// The most tokens (input and output) the `llm` completions of one run
    /// may use.
    pub token_budget: Option<Spanned<u64>>,
    /// Queued runs of a higher priority are claimed first.
    pub priority: Option<Spanned<i64>>,
    /// The most runs of this scenario running at once, across all workers.
    pub concurrency: Option<Spanned<i64>>,
    /// CEL over `input`: runs with the same value run one at a time.
    pub concurrency_key: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputFieldDecl {
    #[serde(rename = "type")]
    pub ty: FieldType,
    #[serde(default = "yes")]
    pub required: bool,
    pub default: Option<Value>,
    #[serde(default)]
    pub description: String,
    pub min_length: Option<u64>,
    pub max_length: Option<u64>,
    pub minimum: Option<serde_json::Number>,
    pub maximum: Option<serde_json::Number>,
    pub pattern: Option<String>,
    /// Allowed values.
    #[serde(rename = "enum")]
    pub allowed: Option<Vec<Value>>,
    /// Type of the items of an array.
    pub items: Option<FieldType>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateFieldDecl {
    #[serde(rename = "type")]
    pub ty: FieldType,
    pub default: Option<Spanned<Value>>,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillDecl {
    pub component: Spanned<String>,
    #[serde(default)]
    pub config: Map<String, Value>,
    #[serde(default)]
    pub description: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeDecl {
    pub id: Spanned<String>,
    #[serde(default = "skill_kind")]
    pub kind: NodeKind,
    #[serde(default)]
    pub description: String,
    pub skill: Option<Spanned<String>>,
    pub input: Option<Spanned<Entries<Spanned<String>>>>,
    pub over: Option<Spanned<String>>,
    pub concurrency: Option<Spanned<i64>>,
    pub writes: Option<Spanned<Vec<Spanned<WriteDecl>>>>,
    pub pre: Option<Spanned<Vec<Spanned<ConditionDecl>>>>,
    pub post: Option<Spanned<Vec<Spanned<PostDecl>>>>,
    pub retry: Option<Spanned<RetryDecl>>,
    pub timeout_ms: Option<Spanned<u64>>,
    pub memory_mb: Option<Spanned<u64>>,
    pub fuel: Option<Spanned<u64>>,
    /// The most journaled host calls (`kv`, `http`, `sql`, `llm`) one call
    /// may make.
    pub max_host_calls: Option<Spanned<u64>>,
    /// The MiB one call's journaled host calls may hold.
    pub host_call_mb: Option<Spanned<u64>>,
    pub capabilities: Option<Spanned<Entries<Spanned<GrantValue>>>>,
    pub max_visits: Option<Spanned<u32>>,
    pub message: Option<Spanned<String>>,
    pub suggestions: Option<Spanned<Vec<String>>>,
    pub artifacts: Option<Spanned<Vec<Spanned<ArtifactDecl>>>>,
    pub input_schema: Option<Spanned<Value>>,
    pub output_schema: Option<Spanned<Value>>,
    pub cache: Option<Spanned<CacheDecl>>,
    /// An approval node's prompt (CEL string).
    pub prompt: Option<Spanned<String>>,
    /// An approval node's answer fields, declared like `[input]`'s.
    pub answer: Option<Spanned<Entries<Spanned<InputFieldDecl>>>>,
    /// Where an approval node goes when nobody answered within `timeout_ms`.
    pub on_timeout: Option<Spanned<String>>,
    /// A subgraph node's scenario file, relative to this one.
    pub scenario: Option<Spanned<String>>,
    /// Whether a subgraph node's child's artifacts become this run's too.
    pub keep_artifacts: Option<Spanned<bool>>,
}

/// `cache = { ttl = "1h" }`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheDecl {
    pub ttl: Spanned<String>,
}

impl NodeDecl {
    /// The kind-specific keys still present, with the byte offset each
    /// starts at. A kind's parser takes the keys it reads, so after it what
    /// is left means nothing on that kind. Lists every field: a key added to
    /// the format cannot be forgotten here.
    pub fn present_keys(&self) -> Vec<(&'static str, usize)> {
        fn at<T>(key: &'static str, value: &Option<Spanned<T>>) -> Option<(&'static str, usize)> {
            value.as_ref().map(|v| (key, v.span().start))
        }
        let NodeDecl {
            id: _,
            kind: _,
            description: _,
            skill,
            input,
            over,
            concurrency,
            writes,
            pre,
            post,
            retry,
            timeout_ms,
            memory_mb,
            fuel,
            max_host_calls,
            host_call_mb,
            capabilities,
            max_visits,
            message,
            suggestions,
            artifacts,
            input_schema,
            output_schema,
            cache,
            prompt,
            answer,
            on_timeout,
            scenario,
            keep_artifacts,
        } = self;
        [
            at("skill", skill),
            at("input", input),
            at("over", over),
            at("concurrency", concurrency),
            at("writes", writes),
            at("pre", pre),
            at("post", post),
            at("retry", retry),
            at("timeout_ms", timeout_ms),
            at("memory_mb", memory_mb),
            at("fuel", fuel),
            at("max_host_calls", max_host_calls),
            at("host_call_mb", host_call_mb),
            at("capabilities", capabilities),
            at("max_visits", max_visits),
            at("message", message),
            at("suggestions", suggestions),
            at("artifacts", artifacts),
            at("input_schema", input_schema),
            at("output_schema", output_schema),
            at("cache", cache),
            at("prompt", prompt),
            at("answer", answer),
            at("on_timeout", on_timeout),
            at("scenario", scenario),
            at("keep_artifacts", keep_artifacts),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// `artifacts = [{ name = "report.md", from = "output.markdown", media_type = "text/markdown" }]`
/// (`encoding = "base64"` when `from` gives a file's bytes in base64).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArtifactDecl {
    pub name: Spanned<String>,
    pub from: Spanned<String>,
    pub media_type: Option<Spanned<String>>,
    pub encoding: Option<Spanned<String>>,
}

fn skill_kind() -> NodeKind {
    NodeKind::Skill
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteDecl {
    pub field: Spanned<String>,
    pub from: Spanned<String>,
    #[serde(default = "replace")]
    pub reducer: Reducer,
}

fn replace() -> Reducer {
    Reducer::Replace
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConditionDecl {
    pub name: Option<String>,
    pub when: Spanned<String>,
    pub message: Option<String>,
}

/// A `post` entry: a condition, or `kind = "citations"` with its fields.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostDecl {
    pub kind: Option<Spanned<String>>,
    // condition
    pub name: Option<String>,
    pub when: Option<Spanned<String>>,
    pub message: Option<String>,
    // citations
    pub claims: Option<Spanned<String>>,
    pub cites: Option<String>,
    pub sources: Option<Spanned<String>>,
    pub source_id: Option<String>,
    pub quote: Option<String>,
    pub source_text: Option<String>,
    pub min_per_claim: Option<Spanned<i64>>,
    pub min_quote_chars: Option<Spanned<i64>>,
    pub min_quote_words: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryDecl {
    pub max_attempts: Spanned<i64>,
    #[serde(default)]
    pub backoff_ms: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EdgeDecl {
    pub from: Spanned<String>,
    pub to: Option<Spanned<String>>,
    pub branches: Option<Vec<Spanned<BranchDecl>>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BranchDecl {
    pub when: Option<Spanned<String>>,
    pub to: Option<Spanned<String>>,
    #[serde(rename = "else")]
    pub otherwise: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleDecl {
    pub when: Spanned<String>,
    #[serde(default = "fatal")]
    pub severity: Severity,
    pub code: String,
    pub message: String,
    #[serde(default)]
    pub suggestions: Vec<String>,
    pub after: Option<Spanned<String>>,
}

fn fatal() -> Severity {
    Severity::Fatal
}

/// A table read in file order, with each key's span.
#[derive(Debug)]
pub struct Entries<V>(pub Vec<(Spanned<String>, V)>);

/// A grant as written: a string (`fs = "corpus"`), or a list or table
/// (`http = ["api.example.org"]`), which the capability receives as JSON.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum GrantValue {
    Text(String),
    Structured(serde_json::Value),
}

impl GrantValue {
    /// The value a capability's grant parser reads.
    pub fn text(&self) -> String {
        match self {
            GrantValue::Text(text) => text.clone(),
            GrantValue::Structured(value) => value.to_string(),
        }
    }
}

impl<V> Default for Entries<V> {
    fn default() -> Self {
        Entries(Vec::new())
    }
}

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Entries<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for EntriesVisitor<V> {
            type Value = Entries<V>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a table")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut entries = Vec::new();
                while let Some(key) = map.next_key::<Spanned<String>>()? {
                    entries.push((key, map.next_value()?));
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(EntriesVisitor(PhantomData))
    }
}
