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
pub mod checks;
pub mod compose;
pub mod diagnostic;
pub mod expr;
pub mod file;
pub mod graph;
pub mod input;
pub mod load;
mod locate;
pub mod node;
pub mod parse;
pub mod queue;
mod typeflow;

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
pub use load::{
    ComponentResolver, Configs, LoadedScenario, NoRegistry, load, load_text_with_components,
    load_with, parse_file, parse_str, resolve,
};
pub use node::{
    ANSWER_VARS, ApprovalNode, ApprovalTimeout, ArtifactEncoding, ArtifactSpec, CacheSpec,
    CitationSpec, Condition, DEFAULT_MAP_CONCURRENCY, FailNode, GateNode, MAX_SUBGRAPH_DEPTH,
    MAX_SUBGRAPH_SCENARIOS, MapNode, Node, NodeBody, NodeExpr, NodeKind, PostCheck, Reducer,
    RetrySpec, Route, SkillCall, SubgraphNode, Write,
};
pub use queue::{DueTicks, QueuePolicy, Schedule};

/// The name of the state field the engine appends node failures to. Always
/// present, never declared.
pub const ERRORS_FIELD: &str = "errors";

/// What starts a registry reference in `[skills.x] component`.
pub const REGISTRY_SCHEME: &str = "oci://";

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
    /// SHA-256 (hex) of the file's bytes; for a scenario with subgraph
    /// nodes, of those bytes and every child's digest (`load.rs`), so that
    /// a change to a child is a change to its parent.
    pub digest: String,
    /// The first node: `[scenario] start`, else the first `[[node]]`.
    pub start: String,
    /// The node that receives the run when a node fails for good.
    pub on_failure: Option<String>,
    /// `[scenario] token_budget`: the most tokens, input and output, the
    /// `llm` completions of one run may use.
    pub token_budget: Option<u64>,
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
    /// `[scenario] priority`, `concurrency`, `concurrency_key`: how its
    /// runs are claimed from the queue.
    pub queue: QueuePolicy,
    /// `[[schedule]]`: the cron entries `host worker --schedules` enqueues
    /// its runs by, in file order.
    pub schedules: Vec<Schedule>,
    /// `[trust] keys`: public keys (absolute paths) that every registry
    /// component must be signed by, besides the host config's.
    pub trust_keys: Vec<PathBuf>,
    /// The scenario each subgraph node runs, by node id: filled in by the
    /// loader once the child has parsed and passed its checks.
    pub subgraphs: BTreeMap<String, Arc<Scenario>>,
    /// How many levels of subgraphs nest below this scenario (0: it has
    /// none; at most [`MAX_SUBGRAPH_DEPTH`]), and how many child scenarios
    /// its tree holds, every branch counted (at most
    /// [`MAX_SUBGRAPH_SCENARIOS`]); set by the loader with `subgraphs`.
    pub subgraph_depth: usize,
    pub subgraph_scenarios: usize,
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

    /// JSON Schema of the object `[summary]` yields over a completed run,
    /// each label typed as the checker infers its expression.
    pub fn summary_schema(&self) -> Value {
        typeflow::summary_schema(self)
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
    /// Where the component comes from.
    pub component: ComponentSource,
    /// Config defaults for the nodes that run this skill.
    pub config: Map<String, Value>,
    pub line: usize,
}

/// Where a skill's component comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComponentSource {
    /// A file: its absolute path.
    File(PathBuf),
    /// A registry reference as the scenario writes it (`oci://…`), resolved
    /// to a file by the caller's [`ComponentResolver`] when it loads.
    Registry(String),
}

impl std::fmt::Display for ComponentSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ComponentSource::File(path) => write!(f, "{}", path.display()),
            ComponentSource::Registry(reference) => f.write_str(reference),
        }
    }
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
