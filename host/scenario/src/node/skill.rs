//! `kind = "skill"` (the default): runs a skill once. The skill call itself
//! ([`SkillCall`]: the input mapping, conditions, limits, grants, writes and
//! artifacts) is also the body of a map node's per-item call.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use toml::Spanned;

use super::{
    AFTER_POST_VARS, Condition, NodeContext, NodeExpr, OUTPUT_VARS, Write, conditions, max_visits,
    pre_expressions, write_expressions, writes,
};
use crate::Expr;
use crate::checks::citations::{CitationError, CitationInputs, QuoteRule};
use crate::checks::fs_grant::{self, FsPolicy};
use crate::checks::schema::CompiledSchema;
use crate::checks::{artifact_name, media_type};
use crate::diagnostic::codes;
use crate::file::{self, NodeDecl, PostDecl};
use crate::parse::{Parser, list_or_none, normalize, placeholder};
use skillhost_runtime::{Capability, Grants, KvGrant};

/// The keys a skill node reads.
pub const KEYS: &[&str] = &[
    "skill",
    "input",
    "writes",
    "pre",
    "post",
    "retry",
    "timeout_ms",
    "memory_mb",
    "fuel",
    "max_host_calls",
    "host_call_mb",
    "capabilities",
    "max_visits",
    "artifacts",
    "input_schema",
    "output_schema",
    "cache",
];

/// `input = { field = "CEL", … }`: an input mapping, in file order (a
/// skill node's, a map node's, a subgraph node's).
pub(crate) fn input_mapping(
    p: &mut Parser<'_>,
    node: Option<&str>,
    decl: Option<Spanned<file::Entries<Spanned<String>>>>,
) -> Vec<(String, Expr)> {
    decl.map(|entries| {
        entries
            .into_inner()
            .0
            .into_iter()
            .map(|(field, source)| {
                let what = format!("input `{}`", field.get_ref());
                // A field whose expression does not compile is still
                // mapped, so the checker does not also call it missing;
                // the scenario is rejected either way.
                let expr = p
                    .expr(node, &what, &source)
                    .unwrap_or_else(|| placeholder(p.line(&source)));
                (field.into_inner(), expr)
            })
            .collect()
    })
    .unwrap_or_default()
}

/// A call of a skill with everything around it: the input mapping, the
/// checks on both sides, limits, grants, and what the result is written to.
#[derive(Debug, Clone)]
pub struct SkillCall {
    /// Alias into [`Scenario::skills`](crate::Scenario::skills); empty when
    /// the node names none (reported).
    pub skill: String,
    /// Input mapping: skill input field (snake_case JSON key) -> CEL, in file
    /// order. In a map node, `item` and `index` are bound.
    pub input: Vec<(String, Expr)>,
    pub pre: Vec<Condition>,
    pub post: Vec<PostCheck>,
    pub writes: Vec<Write>,
    /// `None`: the skill manifest's retry policy applies.
    pub retry: Option<RetrySpec>,
    pub timeout_ms: Option<u64>,
    pub memory_mb: Option<u64>,
    pub fuel: Option<u64>,
    /// The most journaled host calls (`kv`, `http`, `sql`, `llm`) one call
    /// may make; `None`: the runtime's default.
    pub max_host_calls: Option<u32>,
    /// The MiB one call's journaled host calls may hold; `None`: as many as
    /// its memory.
    pub host_call_mb: Option<u64>,
    /// Capability name -> granted value as written, except that `fs` paths
    /// are made absolute against [`Scenario::dir`](crate::Scenario::dir). A
    /// grant refused as `bad-grant` is here too (and not in `grants`): the
    /// scenario does not load, and the checker reports it once.
    pub capabilities: BTreeMap<String, String>,
    /// `capabilities`, parsed.
    pub grants: Arc<Grants>,
    /// The line of `capabilities`, where what is wrong with a grant is
    /// reported; `None` when the node grants nothing.
    pub capabilities_line: Option<usize>,
    pub max_visits: Option<u32>,
    /// Files the node produces, stored with the run in the same transaction
    /// as the node's checkpoint.
    pub artifacts: Vec<ArtifactSpec>,
    /// Extra JSON Schema the skill's input must satisfy besides its WIT type
    /// (lengths, ranges, patterns): `input_schema = { ... }`.
    pub input_constraints: Option<Arc<CompiledSchema>>,
    /// Extra JSON Schema the skill's output must satisfy: `output_schema`.
    pub output_constraints: Option<Arc<CompiledSchema>>,
    /// `cache = { ttl = "1h" }` (skill nodes only): reuse a recorded output of
    /// the same component with the same grants and input.
    pub cache: Option<CacheSpec>,
}

/// How long a skill node's recorded outputs are reused: the node cache's
/// key is the component's digest, the node's grants and its canonical
/// input; only calls that made no journaled host call are recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSpec {
    /// How long an entry is served after it was recorded, in milliseconds.
    pub ttl_ms: u64,
    pub line: usize,
}

/// One artifact of a node: `from` (CEL, sees `output`) gives a string, stored
/// under `name` as its UTF-8 bytes, or as the bytes it encodes in base64.
#[derive(Debug, Clone)]
pub struct ArtifactSpec {
    pub name: String,
    pub from: Expr,
    pub media_type: String,
    pub encoding: ArtifactEncoding,
}

/// How an artifact's string becomes its bytes (`encoding` in the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ArtifactEncoding {
    /// The string's own UTF-8 bytes (`utf-8`, the default): a text file.
    #[default]
    Utf8,
    /// The bytes the string spells in base64 (standard alphabet, padded),
    /// the form a skill's `list<u8>` output takes: a binary file.
    Base64,
}

impl ArtifactEncoding {
    /// The names `encoding` accepts.
    pub const NAMES: [&'static str; 2] = ["utf-8", "base64"];

    pub fn parse(name: &str) -> Option<ArtifactEncoding> {
        match name {
            "utf-8" => Some(ArtifactEncoding::Utf8),
            "base64" => Some(ArtifactEncoding::Base64),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub enum PostCheck {
    Condition(Condition),
    Citations(CitationSpec),
}

/// A citation check on a node's output: every claim cites at least
/// `min_per_claim` sources, every cited id is a source, every quote is in a
/// cited source's text, as whole words, and at least as long as
/// `quote_rule` says.
#[derive(Debug, Clone)]
pub struct CitationSpec {
    /// The list of claims.
    pub claims: Expr,
    /// Field of a claim holding the cited source ids (a list or one id).
    pub cites: String,
    /// The list of sources.
    pub sources: Expr,
    /// Field of a source holding its id.
    pub source_id: String,
    /// Field of a claim holding its quote(s); empty: quotes are not checked.
    pub quote: String,
    /// Field of a source holding the text quotes must come from.
    pub source_text: String,
    pub min_per_claim: usize,
    /// `min_quote_chars` and `min_quote_words` (defaults
    /// [`QuoteRule::default`]).
    pub quote_rule: QuoteRule,
    pub line: usize,
}

impl CitationSpec {
    /// The checker's input, from the evaluated `claims` and `sources`.
    pub fn inputs(&self, claims: Value, sources: Value) -> Result<CitationInputs, CitationError> {
        let mut inputs = CitationInputs::from_values(
            claims,
            sources,
            &self.cites,
            &self.source_id,
            &self.quote,
            &self.source_text,
            self.min_per_claim,
        )?;
        inputs.quote_rule = self.quote_rule;
        Ok(inputs)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySpec {
    /// Total attempts, the first included.
    pub max_attempts: u32,
    /// Wait before the second attempt; doubled after each further failure.
    pub backoff_ms: u64,
}

impl SkillCall {
    /// Adds the call's expressions to `all`, in the order they run; the
    /// input mapping sees `input_vars`.
    pub(crate) fn expressions<'a>(
        &'a self,
        input_vars: &'static [&'static str],
        all: &mut Vec<NodeExpr<'a>>,
    ) {
        for (field, expr) in &self.input {
            all.push(NodeExpr {
                what: format!("input.{field}"),
                expr,
                vars: input_vars,
            });
        }
        pre_expressions(&self.pre, all);
        for (i, check) in self.post.iter().enumerate() {
            match check {
                PostCheck::Condition(c) => all.push(NodeExpr {
                    what: format!("post[{i}]"),
                    expr: &c.expr,
                    vars: OUTPUT_VARS,
                }),
                PostCheck::Citations(c) => {
                    for (part, expr) in [("claims", &c.claims), ("sources", &c.sources)] {
                        all.push(NodeExpr {
                            what: format!("post[{i}].{part}"),
                            expr,
                            vars: OUTPUT_VARS,
                        });
                    }
                }
            }
        }
        write_expressions(&self.writes, AFTER_POST_VARS, all);
        for (i, a) in self.artifacts.iter().enumerate() {
            all.push(NodeExpr {
                what: format!("artifacts[{i}]"),
                expr: &a.from,
                vars: AFTER_POST_VARS,
            });
        }
    }
}

/// Parses a skill node: its call, and its `cache`.
pub(crate) fn parse(p: &mut Parser<'_>, decl: &mut NodeDecl, cx: &NodeContext<'_>) -> SkillCall {
    let mut call = parse_call(p, decl, cx);
    call.cache = decl.cache.take().and_then(|cache| {
        let line = p.line(&cache);
        let ttl = cache.into_inner().ttl;
        let ttl_line = p.line(&ttl);
        match skillhost_model::parse_duration(ttl.get_ref()) {
            Ok(ttl) if !ttl.is_zero() => Some(CacheSpec {
                ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
                line,
            }),
            Ok(_) => {
                p.reporter.error(
                    ttl_line,
                    cx.node(),
                    codes::INVALID_VALUE,
                    "`cache.ttl` is zero, so nothing would ever be reused; give how long a \
                     recorded output is reused, e.g. `cache = { ttl = \"1h\" }`, or remove \
                     `cache`",
                );
                None
            }
            Err(e) => {
                p.reporter.error(
                    ttl_line,
                    cx.node(),
                    codes::INVALID_VALUE,
                    format!("`cache.ttl`: {e}, as in `cache = {{ ttl = \"1h\" }}`"),
                );
                None
            }
        }
    });
    call
}

/// Parses the call of a skill node or of a map node (everything but a skill
/// node's `cache`).
pub(crate) fn parse_call(
    p: &mut Parser<'_>,
    decl: &mut NodeDecl,
    cx: &NodeContext<'_>,
) -> SkillCall {
    let node = cx.node();
    let kind = decl.kind;
    let skill = match decl.skill.take() {
        None => {
            p.reporter.error(
                cx.line,
                node,
                codes::MISSING_SKILL,
                format!("a {kind} node needs `skill = \"<alias>\"` naming a [skills.<alias>]"),
            );
            String::new()
        }
        Some(alias) => {
            if !cx.skills.contains_key(alias.get_ref()) {
                let known = cx.skills.keys().cloned().collect::<Vec<_>>();
                let line = p.line(&alias);
                p.reporter.error(
                    line,
                    node,
                    codes::UNKNOWN_SKILL,
                    format!(
                        "skill `{}` is not declared; declared skills: {}",
                        alias.get_ref(),
                        list_or_none(&known)
                    ),
                );
            }
            alias.into_inner()
        }
    };

    let input = input_mapping(p, node, decl.input.take());

    let writes = writes(p, node, decl.writes.take());
    let pre = conditions(p, node, decl.pre.take());
    let post = decl
        .post
        .take()
        .map(Spanned::into_inner)
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .filter_map(|(i, decl)| post(p, node, i, decl))
        .collect();

    let retry = decl.retry.take().map(|r| {
        let r_line = p.line(&r);
        let r = r.into_inner();
        let max_attempts = *r.max_attempts.get_ref();
        if !(1..=u32::MAX as i64).contains(&max_attempts) {
            p.reporter.error(
                r_line,
                node,
                codes::INVALID_VALUE,
                format!(
                    "`retry.max_attempts = {max_attempts}`: it counts the first attempt, so \
                     it is at least 1 (1 means never retry)"
                ),
            );
        }
        RetrySpec {
            max_attempts: max_attempts.clamp(1, u32::MAX as i64) as u32,
            backoff_ms: r.backoff_ms,
        }
    });

    let capabilities_line = decl.capabilities.as_ref().map(|caps| p.line(caps));
    let (capabilities, grants) = match decl.capabilities.take() {
        Some(caps) => self::grants(p, node, &caps),
        None => (BTreeMap::new(), Grants::default()),
    };
    let max_visits = max_visits(p, node, decl.max_visits.take());
    let input_constraints = decl
        .input_schema
        .take()
        .and_then(|schema| constraints(p, node, "input_schema", &schema));
    let output_constraints = decl
        .output_schema
        .take()
        .and_then(|schema| constraints(p, node, "output_schema", &schema));
    let artifacts = decl
        .artifacts
        .take()
        .map(Spanned::into_inner)
        .unwrap_or_default()
        .iter()
        .filter_map(|a| artifact(p, node, a.get_ref()))
        .collect();

    SkillCall {
        skill,
        input,
        pre,
        post,
        writes,
        retry,
        timeout_ms: decl.timeout_ms.take().map(Spanned::into_inner),
        memory_mb: decl.memory_mb.take().map(Spanned::into_inner),
        fuel: decl.fuel.take().map(Spanned::into_inner),
        max_host_calls: host_call_limit(
            p,
            node,
            decl.max_host_calls.take(),
            "max_host_calls",
            u64::from(skillhost_runtime::limits::MAX_HOST_CALLS_LIMIT),
        )
        .map(|calls| calls as u32),
        host_call_mb: host_call_limit(
            p,
            node,
            decl.host_call_mb.take(),
            "host_call_mb",
            skillhost_runtime::limits::MAX_HOST_CALL_BYTES >> 20,
        ),
        capabilities,
        grants: Arc::new(grants),
        capabilities_line,
        max_visits,
        artifacts,
        input_constraints,
        output_constraints,
        cache: None,
    }
}

/// `max_host_calls` or `host_call_mb`: from 1 to `max`.
fn host_call_limit(
    p: &mut Parser<'_>,
    node: Option<&str>,
    decl: Option<Spanned<u64>>,
    key: &str,
    max: u64,
) -> Option<u64> {
    let value = decl?;
    let n = *value.get_ref();
    if (1..=max).contains(&n) {
        return Some(n);
    }
    let line = p.line(&value);
    p.reporter.error(
        line,
        node,
        codes::INVALID_VALUE,
        format!(
            "`{key} = {n}` must be from 1 to {max}; leave it out for the default (see \
             docs/scenarios.md, \"Host-call budgets\")"
        ),
    );
    None
}

fn artifact(
    p: &mut Parser<'_>,
    node: Option<&str>,
    a: &file::ArtifactDecl,
) -> Option<ArtifactSpec> {
    let name = a.name.get_ref().clone();
    if let Err(problem) = artifact_name::check(&name) {
        let line = p.line(&a.name);
        p.reporter.error(
            line,
            node,
            codes::INVALID_VALUE,
            format!(
                "artifact name: {problem}; it becomes a file name when the run's artifacts \
                 are written, so it must be a plain file name such as `report.md`"
            ),
        );
        return None;
    }
    let encoding = match &a.encoding {
        None => ArtifactEncoding::default(),
        Some(given) => match ArtifactEncoding::parse(given.get_ref()) {
            Some(encoding) => encoding,
            None => {
                let line = p.line(given);
                p.reporter.error(
                    line,
                    node,
                    codes::INVALID_VALUE,
                    format!(
                        "artifact `{name}`: encoding `{}` is not known; give `utf-8` (the \
                         default: the string is the file) or `base64` (the string spells the \
                         file's bytes, as a skill's `list<u8>` output does)",
                        given.get_ref()
                    ),
                );
                return None;
            }
        },
    };
    let media_type = match &a.media_type {
        None => "application/octet-stream".to_string(),
        Some(given) => match media_type::parse(given.get_ref()) {
            Ok(_) => given.get_ref().clone(),
            Err(problem) => {
                let line = p.line(given);
                p.reporter.error(
                    line,
                    node,
                    codes::INVALID_VALUE,
                    format!(
                        "artifact `{name}`: media_type is not a media type: {problem}; give \
                         TYPE/SUBTYPE with optional `; NAME=VALUE` parameters, e.g. \
                         `text/markdown` or `text/html; charset=utf-8` (`host serve` sends it \
                         as the artifact's Content-Type)"
                    ),
                );
                return None;
            }
        },
    };
    let from = p.expr(node, &format!("artifact `{name}`"), &a.from)?;
    Some(ArtifactSpec {
        name,
        from,
        media_type,
        encoding,
    })
}

/// Compiles a node's extra JSON Schema, reporting one that is invalid.
fn constraints(
    p: &mut Parser<'_>,
    node: Option<&str>,
    what: &str,
    schema: &Spanned<Value>,
) -> Option<Arc<CompiledSchema>> {
    let line = p.line(schema);
    if !schema.get_ref().is_object() {
        p.reporter.error(
            line,
            node,
            codes::INVALID_VALUE,
            format!("`{what}` must be a table holding a JSON Schema, e.g. `{what} = {{ properties = {{ title = {{ minLength = 3 }} }} }}`"),
        );
        return None;
    }
    match CompiledSchema::compile(schema.get_ref()) {
        Ok(compiled) => Some(Arc::new(compiled)),
        Err(e) => {
            p.reporter.error(
                line,
                node,
                codes::INVALID_VALUE,
                format!("`{what}` is not a valid JSON Schema: {e}"),
            );
            None
        }
    }
}

fn post(
    p: &mut Parser<'_>,
    node: Option<&str>,
    index: usize,
    decl: Spanned<PostDecl>,
) -> Option<PostCheck> {
    let line = p.line(&decl);
    let decl = decl.into_inner();
    let kind = decl.kind.as_ref().map(|k| k.get_ref().as_str());
    match kind {
        None | Some("condition") => {
            let stray = [
                ("claims", decl.claims.is_some()),
                ("cites", decl.cites.is_some()),
                ("sources", decl.sources.is_some()),
                ("source_id", decl.source_id.is_some()),
                ("quote", decl.quote.is_some()),
                ("source_text", decl.source_text.is_some()),
                ("min_per_claim", decl.min_per_claim.is_some()),
                ("min_quote_chars", decl.min_quote_chars.is_some()),
                ("min_quote_words", decl.min_quote_words.is_some()),
            ];
            for (field, present) in stray {
                if present {
                    p.reporter.error(
                        line,
                        node,
                        codes::FIELD_NOT_ALLOWED,
                        format!(
                            "post[{index}]: `{field}` belongs to a citations check; add \
                             `kind = \"citations\"` or remove it"
                        ),
                    );
                }
            }
            let Some(when) = &decl.when else {
                p.reporter.error(
                    line,
                    node,
                    codes::INVALID_VALUE,
                    format!("post[{index}]: a condition needs `when = \"<CEL>\"`"),
                );
                return None;
            };
            let name = decl.name.unwrap_or_else(|| format!("post[{index}]"));
            let expr = p.expr(node, &format!("post `{name}`"), when)?;
            Some(PostCheck::Condition(Condition {
                message: decl
                    .message
                    .unwrap_or_else(|| format!("`{}` is false", expr.source)),
                name,
                expr,
            }))
        }
        Some("citations") => {
            for (field, present) in [
                ("when", decl.when.is_some()),
                ("name", decl.name.is_some()),
                ("message", decl.message.is_some()),
            ] {
                if present {
                    p.reporter.error(
                        line,
                        node,
                        codes::FIELD_NOT_ALLOWED,
                        format!("post[{index}]: `{field}` has no meaning on a citations check"),
                    );
                }
            }
            let mut missing = Vec::new();
            if decl.claims.is_none() {
                missing.push("claims");
            }
            if decl.cites.is_none() {
                missing.push("cites");
            }
            if decl.sources.is_none() {
                missing.push("sources");
            }
            if decl.quote.is_some() && decl.source_text.is_none() {
                missing.push("source_text");
            }
            if !missing.is_empty() {
                p.reporter.error(
                    line,
                    node,
                    codes::INVALID_VALUE,
                    format!(
                        "post[{index}]: a citations check needs {}",
                        missing
                            .iter()
                            .map(|m| format!("`{m}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                );
                return None;
            }
            let min_per_claim = match &decl.min_per_claim {
                None => 1,
                Some(m) if *m.get_ref() >= 0 => *m.get_ref() as usize,
                Some(m) => {
                    let m_line = p.line(m);
                    p.reporter.error(
                        m_line,
                        node,
                        codes::INVALID_VALUE,
                        format!("post[{index}]: `min_per_claim` cannot be negative"),
                    );
                    1
                }
            };
            let quote_rule = quote_rule(p, node, index, &decl);
            // Either expression may not compile (reported); the other is
            // still checked, and the scenario is rejected either way.
            let mut compiled = |what: &str, source: &Spanned<String>| {
                p.expr(node, &format!("post[{index}].{what}"), source)
                    .unwrap_or_else(|| placeholder(p.line(source)))
            };
            let claims = compiled("claims", decl.claims.as_ref()?);
            let sources = compiled("sources", decl.sources.as_ref()?);
            Some(PostCheck::Citations(CitationSpec {
                claims,
                cites: decl.cites.unwrap_or_default(),
                sources,
                source_id: decl.source_id.unwrap_or_else(|| "id".to_string()),
                quote: decl.quote.unwrap_or_default(),
                source_text: decl.source_text.unwrap_or_default(),
                min_per_claim,
                quote_rule,
                line,
            }))
        }
        Some(other) => {
            let line = decl.kind.as_ref().map_or(line, |k| p.line(k));
            p.reporter.error(
                line,
                node,
                codes::INVALID_VALUE,
                format!(
                    "post[{index}]: unknown kind `{other}`; a post check is a condition \
                     (`when`) or `kind = \"citations\"`"
                ),
            );
            None
        }
    }
}

/// A citations check's `min_quote_chars` and `min_quote_words`: whole
/// numbers from 1, meaningful only with `quote`; the defaults for those
/// left out.
fn quote_rule(p: &mut Parser<'_>, node: Option<&str>, index: usize, decl: &PostDecl) -> QuoteRule {
    let mut rule = QuoteRule::default();
    for (key, value, into) in [
        (
            "min_quote_chars",
            &decl.min_quote_chars,
            &mut rule.min_chars,
        ),
        (
            "min_quote_words",
            &decl.min_quote_words,
            &mut rule.min_words,
        ),
    ] {
        let Some(value) = value else {
            continue;
        };
        let line = p.line(value);
        if decl.quote.is_none() {
            p.reporter.error(
                line,
                node,
                codes::FIELD_NOT_ALLOWED,
                format!(
                    "post[{index}]: `{key}` applies to quotes, and this citations check has no \
                     `quote` field; add `quote = \"<claim field>\"` or remove `{key}`"
                ),
            );
            continue;
        }
        match usize::try_from(*value.get_ref()) {
            Ok(n) if n >= 1 => *into = n,
            _ => p.reporter.error(
                line,
                node,
                codes::INVALID_VALUE,
                format!(
                    "post[{index}]: `{key}` is {}; a quote must be at least one character and \
                     one word long, so give a whole number from 1 (the default, {}, is used \
                     when it is left out)",
                    value.get_ref(),
                    *into
                ),
            ),
        }
    }
    rule
}

fn grants(
    p: &mut Parser<'_>,
    node: Option<&str>,
    caps: &Spanned<file::Entries<Spanned<file::GrantValue>>>,
) -> (BTreeMap<String, String>, Grants) {
    let mut written = BTreeMap::new();
    let mut grants = Grants::default();
    for (name, value) in &caps.get_ref().0 {
        let line = p.line(name);
        let name = name.get_ref();
        let Some(capability) = Capability::from_name(name) else {
            let known = Capability::ALL.map(Capability::name).join(", ");
            p.reporter.error(
                line,
                node,
                codes::UNKNOWN_CAPABILITY,
                format!("capability `{name}` does not exist; capabilities are {known}"),
            );
            continue;
        };
        let as_written = &value.get_ref().text();
        let mut value = as_written.clone();
        // A path is resolved against the scenario's directory, for the
        // directory `fs` reads and the database file `sql` queries alike.
        if capability.names_path() && !value.is_empty() {
            value = normalize(&p.dir.join(&value))
                .to_string_lossy()
                .into_owned();
        }
        if let Err(e) = grants.add(name, &value) {
            p.reporter
                .error(line, node, codes::BAD_GRANT, format!("{e}"));
            // Kept, so the node is not also reported as lacking the grant.
            written.insert(name.clone(), value);
            continue;
        }
        // A namespace is the scenario's own, unless the grant shares it.
        if capability == Capability::Kv {
            grants.kv = grants
                .kv
                .take()
                .map(|kv| Arc::new(KvGrant::clone(&kv).owned_by(&p.scenario_name)));
        }
        if let Some(resolved) = grants.path(capability)
            && let Err(rule) = fs_grant::check(&fs_policy(&p.dir), as_written, resolved)
        {
            // The grant stays parsed (the load fails anyway), so the node is
            // not also reported as lacking it.
            p.reporter.error(
                line,
                node,
                codes::BAD_GRANT,
                format!("capability `{name}`: {rule}"),
            );
            continue;
        }
        written.insert(name.clone(), value);
    }
    (written, grants)
}

/// What a scenario in `dir` may grant: its directory and the host's allowed
/// roots, resolved.
fn fs_policy(dir: &Path) -> FsPolicy {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    FsPolicy {
        scenario_dir: dir.canonicalize().ok(),
        allowed_roots: fs_grant::allowed_roots(),
    }
}
