//! Scenario files: the model of a scenario, its loader and static checker,
//! and its export to Mermaid and Graphviz.
//!
//! A scenario is read from TOML ([`file`]), turned into the model below with
//! every CEL expression compiled and every reference resolved ([`parse`]),
//! checked as a graph and against the skills it runs ([`check`]), and handed
//! to the engine as an immutable [`Scenario`] ([`load`]). Nothing here runs a
//! skill or touches a store: a scenario that loads is one the engine can walk
//! without meeting an unknown node, field or capability.
//!
//! The format is documented in `docs/scenarios.md` and described for editors
//! by `schemas/scenario.schema.json`.

pub mod check;
pub mod diagnostic;
pub mod expr;
pub mod file;
pub mod graph;
pub mod input;
pub mod load;
mod locate;
pub mod parse;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::checks::schema::CompiledSchema;

pub use diagnostic::{CheckReport, Diagnostic, Level, codes};
pub use expr::{Expr, ExprError, Vars};
pub use graph::{to_dot, to_mermaid};
pub use input::InputField;
pub use load::{Configs, LoadedScenario, load, parse_file, parse_str, resolve};

/// The name of the state field the engine appends node failures to. Always
/// present, never declared.
pub const ERRORS_FIELD: &str = "errors";

/// A checked scenario, ready to run.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub name: String,
    pub version: String,
    pub description: String,
    /// The scenario file, made absolute.
    pub path: PathBuf,
    /// Its directory: relative paths in the file resolve here.
    pub dir: PathBuf,
    /// SHA-256 (hex) of the file's bytes.
    pub digest: String,
    /// The first node: `[scenario] start`, else the first `[[node]]`.
    pub start: String,
    /// The node that receives the run when a node fails for good.
    pub on_failure: Option<String>,
    /// The run input's fields, in file order.
    pub input: Vec<InputField>,
    /// JSON Schema (draft 2020-12) of the run input, from `[input]`.
    pub input_schema: Value,
    /// `input_schema`, compiled on first use.
    pub input_validator: std::sync::OnceLock<Result<Arc<CompiledSchema>, String>>,
    /// The `[config]` table.
    pub config: Map<String, Value>,
    /// Declared state fields, in file order.
    pub state: Vec<StateField>,
    /// Skills by alias.
    pub skills: BTreeMap<String, SkillRef>,
    /// Nodes in file order.
    pub nodes: Vec<Node>,
    pub rules: Vec<Rule>,
    /// `[summary]`: label -> CEL (sees `input`, `state`, `config`), evaluated
    /// when a run completes, in file order.
    pub summary: Vec<(String, Expr)>,
}

impl Scenario {
    /// Checks a run input against `[input]`; the schema is compiled once.
    pub fn validate_input(&self, input: &Value) -> Result<(), String> {
        let compiled = self
            .input_validator
            .get_or_init(|| {
                CompiledSchema::compile(&self.input_schema)
                    .map(Arc::new)
                    .map_err(|e| e.to_string())
            })
            .as_ref()
            .map_err(Clone::clone)?;
        compiled.validate(input).map_err(|v| v.to_string())
    }

    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    pub fn state_field(&self, name: &str) -> Option<&StateField> {
        self.state.iter().find(|f| f.name == name)
    }

    /// Every declared field's initial value, plus `errors: []`.
    pub fn initial_state(&self) -> Value {
        let mut state: Map<String, Value> = self
            .state
            .iter()
            .map(|f| (f.name.clone(), f.initial.clone()))
            .collect();
        state.insert(ERRORS_FIELD.to_string(), Value::Array(Vec::new()));
        Value::Object(state)
    }

    /// Adds the default of every `[input]` field that `input` lacks. Leaves
    /// anything that is not an object alone: validation reports it.
    pub fn apply_input_defaults(&self, input: &mut Value) {
        input::apply_defaults(&self.input, input);
    }

    /// The rules to evaluate after `node` ran, in file order.
    pub fn rules_after<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Rule> + 'a {
        self.rules
            .iter()
            .filter(move |r| r.after.as_deref().is_none_or(|after| after == node))
    }
}

/// A declared state field.
#[derive(Debug, Clone, PartialEq)]
pub struct StateField {
    pub name: String,
    pub ty: FieldType,
    pub initial: Value,
    pub description: String,
    pub line: usize,
}

/// The declared type of a state or input field, checked on every write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    String,
    Integer,
    Number,
    Boolean,
    Array,
    Object,
    Any,
}

impl FieldType {
    pub fn name(self) -> &'static str {
        match self {
            FieldType::String => "string",
            FieldType::Integer => "integer",
            FieldType::Number => "number",
            FieldType::Boolean => "boolean",
            FieldType::Array => "array",
            FieldType::Object => "object",
            FieldType::Any => "any",
        }
    }

    /// Whether `value` has this type. `null` is only an `any`.
    pub fn accepts(self, value: &Value) -> bool {
        match self {
            FieldType::String => value.is_string(),
            FieldType::Integer => value.is_i64() || value.is_u64(),
            FieldType::Number => value.is_number(),
            FieldType::Boolean => value.is_boolean(),
            FieldType::Array => value.is_array(),
            FieldType::Object => value.is_object(),
            FieldType::Any => true,
        }
    }

    /// The initial value of a state field declared without a default.
    pub fn zero(self) -> Value {
        match self {
            FieldType::String => Value::String(String::new()),
            FieldType::Integer => Value::from(0),
            FieldType::Number => Value::from(0.0),
            FieldType::Boolean => Value::Bool(false),
            FieldType::Array => Value::Array(Vec::new()),
            FieldType::Object => Value::Object(Map::new()),
            FieldType::Any => Value::Null,
        }
    }
}

impl std::fmt::Display for FieldType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A `[skills.<alias>]` entry.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillRef {
    pub alias: String,
    /// Absolute path of the component.
    pub component: PathBuf,
    /// Config defaults for the nodes that run this skill.
    pub config: Map<String, Value>,
    pub line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NodeKind {
    /// Runs a skill once.
    Skill,
    /// Runs a skill once per item of a list, results in input order.
    Map,
    /// Runs no skill: conditions, writes and routing only.
    Gate,
    /// Ends the run as failed.
    Fail,
    /// Ends the run as completed.
    End,
}

impl NodeKind {
    pub fn name(self) -> &'static str {
        match self {
            NodeKind::Skill => "skill",
            NodeKind::Map => "map",
            NodeKind::Gate => "gate",
            NodeKind::Fail => "fail",
            NodeKind::End => "end",
        }
    }

    /// End and fail nodes finish the run and have no outgoing edge.
    pub fn is_terminal(self) -> bool {
        matches!(self, NodeKind::End | NodeKind::Fail)
    }

    /// Skill and map nodes run a skill.
    pub fn runs_skill(self) -> bool {
        matches!(self, NodeKind::Skill | NodeKind::Map)
    }
}

impl std::fmt::Display for NodeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    pub kind: NodeKind,
    /// Line of the node's `[[node]]` header.
    pub line: usize,
    pub description: String,
    /// Alias into [`Scenario::skills`] (skill and map nodes).
    pub skill: Option<String>,
    /// Input mapping: skill input field (snake_case JSON key) -> CEL, in file
    /// order. In a map node, `item` and `index` are bound.
    pub input: Vec<(String, Expr)>,
    /// Map nodes only.
    pub map: Option<MapSpec>,
    pub writes: Vec<Write>,
    pub pre: Vec<Condition>,
    pub post: Vec<PostCheck>,
    /// `None`: the skill manifest's retry policy applies.
    pub retry: Option<RetrySpec>,
    pub timeout_ms: Option<u64>,
    pub memory_mb: Option<u64>,
    pub fuel: Option<u64>,
    /// Capability name -> granted value as written, except that `fs` paths
    /// are made absolute against [`Scenario::dir`].
    pub capabilities: BTreeMap<String, String>,
    /// `capabilities`, parsed.
    pub grants: Arc<crate::runtime::Grants>,
    pub max_visits: Option<u32>,
    /// Outgoing edges.
    pub route: Route,
    /// Line of the `[[edge]]` leaving this node.
    pub edge_line: Option<usize>,
    /// Fail nodes: CEL string for the failure message.
    pub message: Option<Expr>,
    /// Fail nodes: what the user can do about it.
    pub suggestions: Vec<String>,
    /// What `config` is for this node's expressions: the skill's config
    /// defaults with the scenario's `[config]` over them.
    pub config: Map<String, Value>,
    /// Files the node produces (skill and map nodes), stored with the run in
    /// the same transaction as the node's checkpoint.
    pub artifacts: Vec<ArtifactSpec>,
    /// Extra JSON Schema the skill's input must satisfy besides its WIT type
    /// (lengths, ranges, patterns): `input_schema = { ... }`.
    pub input_constraints: Option<Arc<CompiledSchema>>,
    /// Extra JSON Schema the skill's output must satisfy: `output_schema`.
    pub output_constraints: Option<Arc<CompiledSchema>>,
}

/// One artifact of a node: `from` (CEL, sees `output`) gives a string, stored
/// as UTF-8 bytes under `name`.
#[derive(Debug, Clone)]
pub struct ArtifactSpec {
    pub name: String,
    pub from: Expr,
    pub media_type: String,
}

impl Node {
    /// Every node this one can route to, in edge order.
    pub fn successors(&self) -> Vec<&str> {
        match &self.route {
            Route::End => Vec::new(),
            Route::Next(next) => vec![next.as_str()],
            Route::Branches {
                branches,
                otherwise,
            } => branches
                .iter()
                .map(|(_, to)| to.as_str())
                .chain(std::iter::once(otherwise.as_str()))
                .collect(),
        }
    }

    /// Every CEL expression of the node, with what it is for (`input.query`,
    /// `pre[0]`, `writes[1]`, …).
    pub fn expressions(&self) -> Vec<(String, &Expr)> {
        let mut all = Vec::new();
        if let Some(map) = &self.map {
            all.push(("over".to_string(), &map.over));
        }
        for (field, expr) in &self.input {
            all.push((format!("input.{field}"), expr));
        }
        for (i, c) in self.pre.iter().enumerate() {
            all.push((format!("pre[{i}]"), &c.expr));
        }
        for (i, check) in self.post.iter().enumerate() {
            match check {
                PostCheck::Condition(c) => all.push((format!("post[{i}]"), &c.expr)),
                PostCheck::Citations(c) => {
                    all.push((format!("post[{i}].claims"), &c.claims));
                    all.push((format!("post[{i}].sources"), &c.sources));
                }
            }
        }
        for (i, w) in self.writes.iter().enumerate() {
            all.push((format!("writes[{i}]"), &w.from));
        }
        if let Route::Branches { branches, .. } = &self.route {
            for (i, (guard, _)) in branches.iter().enumerate() {
                all.push((format!("branches[{i}]"), guard));
            }
        }
        if let Some(message) = &self.message {
            all.push(("message".to_string(), message));
        }
        for (i, a) in self.artifacts.iter().enumerate() {
            all.push((format!("artifacts[{i}]"), &a.from));
        }
        all
    }
}

#[derive(Debug, Clone)]
pub struct MapSpec {
    /// The list to map over.
    pub over: Expr,
    /// How many items run at once; at least 1.
    pub concurrency: usize,
}

pub const DEFAULT_MAP_CONCURRENCY: usize = 4;

/// A write into state after a node succeeds. `from` sees `output` (for map
/// nodes, the list of outputs in input order).
#[derive(Debug, Clone)]
pub struct Write {
    pub field: String,
    pub from: Expr,
    pub reducer: Reducer,
    pub line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reducer {
    /// The field becomes the value.
    Replace,
    /// The field is an array: the value is appended (an array value extends it).
    Append,
    /// The field is an object: the value's keys are set on it (shallow).
    Merge,
}

impl Reducer {
    pub fn name(self) -> &'static str {
        match self {
            Reducer::Replace => "replace",
            Reducer::Append => "append",
            Reducer::Merge => "merge",
        }
    }
}

/// A named condition: `pre`, `post`.
#[derive(Debug, Clone)]
pub struct Condition {
    pub name: String,
    pub expr: Expr,
    /// Shown when the condition is false.
    pub message: String,
}

#[derive(Debug, Clone)]
pub enum PostCheck {
    Condition(Condition),
    Citations(CitationSpec),
}

/// A citation check on a node's output: every claim cites at least
/// `min_per_claim` sources, every cited id is a source, every quote is in a
/// cited source's text.
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
    pub line: usize,
}

impl CitationSpec {
    /// The checker's input, from the evaluated `claims` and `sources`.
    pub fn inputs(
        &self,
        claims: Value,
        sources: Value,
    ) -> Result<crate::checks::citations::CitationInputs, crate::checks::citations::CitationError>
    {
        crate::checks::citations::CitationInputs::from_values(
            claims,
            sources,
            &self.cites,
            &self.source_id,
            &self.quote,
            &self.source_text,
            self.min_per_claim,
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySpec {
    /// Total attempts, the first included.
    pub max_attempts: u32,
    /// Wait before the second attempt; doubled after each further failure.
    pub backoff_ms: u64,
}

/// Where a node goes next.
#[derive(Debug, Clone)]
pub enum Route {
    /// No outgoing edge: only end and fail nodes.
    End,
    Next(String),
    /// The first branch whose guard is true wins; else `otherwise`.
    Branches {
        branches: Vec<(Expr, String)>,
        otherwise: String,
    },
}

/// A validation rule evaluated after nodes run.
#[derive(Debug, Clone)]
pub struct Rule {
    pub when: Expr,
    pub severity: Severity,
    pub code: String,
    pub message: String,
    pub suggestions: Vec<String>,
    /// Evaluated after this node only; `None`: after every node.
    pub after: Option<String>,
    pub line: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Stops the run with the rule's code.
    Fatal,
    /// Recorded; the run goes on.
    Warning,
}
