//! What the checker reports: a [`Diagnostic`] names the file, the line, the
//! node when there is one, a stable code, and what is wrong; a
//! [`CheckReport`] is every error and warning of one scenario.
//!
//! Codes are part of the interface (scripts match on them, the docs list
//! them): add new ones, never reuse or rename one.

use std::fmt;
use std::path::PathBuf;

use serde_json::{Value, json};

/// The stable codes of every diagnostic, one per class of problem.
pub mod codes {
    /// The file cannot be read.
    pub const IO: &str = "io";
    /// TOML syntax, or a key or value the format does not have.
    pub const TOML: &str = "toml";
    /// A value the format has but that is out of range or inconsistent.
    pub const INVALID_VALUE: &str = "invalid-value";
    /// A field that means nothing on this kind of node.
    pub const FIELD_NOT_ALLOWED: &str = "field-not-allowed";
    /// No `[[node]]` at all.
    pub const NO_NODES: &str = "no-nodes";
    pub const DUPLICATE_NODE: &str = "duplicate-node";
    /// A node id, `start`, `on_failure`, edge end or rule `after` that names
    /// no node.
    pub const UNKNOWN_NODE: &str = "unknown-node";
    /// A node's `skill` that names no `[skills.<alias>]`.
    pub const UNKNOWN_SKILL: &str = "unknown-skill";
    /// A granted capability the host does not have.
    pub const UNKNOWN_CAPABILITY: &str = "unknown-capability";
    /// A grant whose value is refused (a missing directory, …).
    pub const BAD_GRANT: &str = "bad-grant";
    /// A skill or map node without `skill`.
    pub const MISSING_SKILL: &str = "missing-skill";
    /// A map node without `over`.
    pub const MISSING_OVER: &str = "missing-over";
    /// An approval node without `prompt`.
    pub const MISSING_PROMPT: &str = "missing-prompt";
    /// An approval node without `answer`, or with no field in it.
    pub const MISSING_ANSWER: &str = "missing-answer";
    /// An approval node's `prompt` that is not a string.
    pub const PROMPT_TYPE: &str = "prompt-type";
    /// A skill component that is missing or does not load.
    pub const SKILL_LOAD: &str = "skill-load";
    /// A node no path from `start` or `on_failure` reaches.
    pub const UNREACHABLE: &str = "unreachable";
    /// A node from which no end or fail node can be reached.
    pub const NO_END: &str = "no-end";
    /// A cycle none of whose nodes has `max_visits`.
    pub const UNBOUNDED_CYCLE: &str = "unbounded-cycle";
    /// Branches without a final `{ else = "…" }`.
    pub const MISSING_ELSE: &str = "missing-else";
    /// An `[[edge]]` that is neither `to` nor `branches`, or a malformed branch.
    pub const INVALID_EDGE: &str = "invalid-edge";
    /// A second `[[edge]]` from the same node.
    pub const MULTIPLE_EDGES: &str = "multiple-edges";
    /// An end or fail node with an outgoing edge.
    pub const TERMINAL_HAS_EDGE: &str = "terminal-has-edge";
    /// A skill, map or gate node without an outgoing edge.
    pub const MISSING_EDGE: &str = "missing-edge";
    pub const CEL_SYNTAX: &str = "cel-syntax";
    /// A `[[schedule]]` cron expression that does not parse.
    pub const BAD_CRON: &str = "bad-cron";
    /// A `[[schedule]]` cron expression that matches no date ever.
    pub const CRON_NEVER_FIRES: &str = "cron-never-fires";
    /// A `[[schedule]]` cron expression whose ticks come less than a
    /// minute apart.
    pub const CRON_TOO_FREQUENT: &str = "cron-too-frequent";
    /// A `[[schedule]]` input that does not fit `[input]`.
    pub const SCHEDULE_INPUT: &str = "schedule-input";
    /// An expression over the expression budget: too long, too deep, too
    /// many nested comprehensions, or a constant that does too much work.
    pub const CEL_BUDGET: &str = "cel-budget";
    /// A variable that is not available where the expression runs.
    pub const UNKNOWN_VARIABLE: &str = "unknown-variable";
    /// `state.X` (or a write into `X`) where `X` is not declared in `[state]`.
    pub const UNDECLARED_STATE: &str = "undeclared-state";
    /// `input.X` where `X` is not in `[input]`.
    pub const UNDECLARED_INPUT: &str = "undeclared-input";
    /// `config.X` where `X` is neither in `[config]` nor in the node skill's config.
    pub const UNDECLARED_CONFIG: &str = "undeclared-config";
    /// A write into `errors`, or a state field declared as `errors`.
    pub const RESERVED_STATE: &str = "reserved-state";
    /// An input mapping without a field the skill's input requires.
    pub const INPUT_MISSING_FIELD: &str = "input-missing-field";
    /// An input mapping with a field the skill's input does not have.
    pub const INPUT_UNKNOWN_FIELD: &str = "input-unknown-field";
    /// A skill declares a capability the node does not grant.
    pub const CAPABILITY_NOT_GRANTED: &str = "capability-not-granted";
    /// A reducer that does not fit the field's type (append into a string).
    pub const REDUCER_TYPE: &str = "reducer-type";
    /// A default that does not have the field's declared type.
    pub const TYPE_MISMATCH: &str = "type-mismatch";
    /// An input mapping whose value cannot have the skill input field's WIT
    /// type (`repeat = "'3'"` for a `u32`).
    pub const INPUT_TYPE: &str = "input-type";
    /// A write whose value cannot have the state field's declared type, or a
    /// `merge` of something that is not a map.
    pub const WRITE_TYPE: &str = "write-type";
    /// A condition (`pre`, `post`, a branch, a rule) that does not give a bool.
    pub const GUARD_TYPE: &str = "guard-type";
    /// A map node's `over` that does not give a list.
    pub const OVER_TYPE: &str = "over-type";
    /// A field a record does not have (`output.nosuch` on a skill's output).
    pub const UNKNOWN_FIELD: &str = "unknown-field";
    /// An operator or function given values it does not take (`'a' + 1`).
    pub const OPERATOR_TYPE: &str = "operator-type";
    /// An `llm` grant naming a provider the host's configuration does not
    /// define.
    pub const LLM_PROVIDER_NOT_CONFIGURED: &str = "llm-provider-not-configured";
    /// An `llm` grant's provider takes its key from an environment variable
    /// that is not set.
    pub const LLM_API_KEY_MISSING: &str = "llm-api-key-missing";
    /// A subgraph node without `scenario`.
    pub const MISSING_SCENARIO: &str = "missing-scenario";
    /// A subgraph's scenario file does not exist or cannot be read.
    pub const SUBGRAPH_NOT_FOUND: &str = "subgraph-not-found";
    /// A scenario that runs itself, directly or through others.
    pub const SUBGRAPH_CYCLE: &str = "subgraph-cycle";
    /// A subgraph's scenario does not pass its own checks.
    pub const SUBGRAPH_INVALID: &str = "subgraph-invalid";
    /// A subgraph's scenario has an approval node: a child run cannot wait.
    pub const SUBGRAPH_APPROVAL: &str = "subgraph-approval";
    /// Subgraphs nested deeper than `MAX_SUBGRAPH_DEPTH` levels.
    pub const SUBGRAPH_TOO_DEEP: &str = "subgraph-too-deep";
    /// A scenario whose subgraphs expand to more than
    /// `MAX_SUBGRAPH_SCENARIOS` child scenarios.
    pub const SUBGRAPH_TOO_MANY: &str = "subgraph-too-many";

    // A composed scenario (`host mcp`'s `scenario_compose`) against the
    // server's offer and the operator's ceiling (`compose.rs`).
    /// Larger than the ceiling's `max_bytes`.
    pub const COMPOSE_TOO_LARGE: &str = "compose-too-large";
    /// Neither TOML text nor a JSON object that makes one.
    pub const COMPOSE_FORMAT: &str = "compose-format";
    /// A component that is not an offered skill, or one the ceiling does
    /// not allow.
    pub const COMPOSE_SKILL: &str = "compose-skill";
    /// A subgraph that is not an offered scenario.
    pub const COMPOSE_SUBGRAPH: &str = "compose-subgraph";
    /// A grant beyond what the ceiling allows.
    pub const COMPOSE_GRANT: &str = "compose-grant";
    /// Nodes, visits, limits, concurrency, priority or token budget above
    /// the ceiling's.
    pub const COMPOSE_LIMIT: &str = "compose-limit";
    /// A name without the composed scenarios' prefix.
    pub const COMPOSE_NAME: &str = "compose-name";
    /// What a composed scenario may not have: schedules, trust keys,
    /// secret headers.
    pub const COMPOSE_NOT_ALLOWED: &str = "compose-not-allowed";

    // Warnings.
    /// A declared state field that no node writes.
    pub const UNWRITTEN_STATE: &str = "unwritten-state";
    /// A declared skill that no node runs.
    pub const UNUSED_SKILL: &str = "unused-skill";
    /// A cached node whose skill's output may not be a function of its
    /// input (WASI's random bytes), or whose calls that reach outside the
    /// run (kv, http, llm, sql) are never cached.
    pub const CACHE_LIMITED: &str = "cache-limited";
}

/// One problem in a scenario file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The scenario file, as the user named it.
    pub file: PathBuf,
    /// 1-based; 0 when the problem is the whole file.
    pub line: usize,
    /// The node concerned, if any.
    pub node: Option<String>,
    /// One of [`codes`].
    pub code: &'static str,
    pub message: String,
}

/// Whether a diagnostic stops the scenario from loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// The scenario does not load.
    Error,
    /// Reported; the scenario loads and runs.
    Warning,
}

impl Level {
    pub fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warning => "warning",
        }
    }
}

impl Diagnostic {
    /// The diagnostic as one JSON object, for `--json`: `code`, `severity`
    /// (`error` or `warning`), `message`, `file`, `line` (`null` when the
    /// problem is the whole file) and `node` (`null` when there is none).
    pub fn to_json(&self, level: Level) -> Value {
        json!({
            "code": self.code,
            "severity": level.name(),
            "message": self.message,
            "file": self.file.display().to_string(),
            "line": (self.line > 0).then_some(self.line),
            "node": self.node,
        })
    }

    fn write(&self, f: &mut fmt::Formatter<'_>, label: &str) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        write!(f, ": {label}")?;
        if let Some(node) = &self.node {
            write!(f, "node `{node}`: ")?;
        }
        f.write_str(&self.message)
    }
}

/// `path:line: node `x`: message`
impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write(f, "")
    }
}

/// Every error and warning found in one scenario. Any error means the
/// scenario does not load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    pub errors: Vec<Diagnostic>,
    pub warnings: Vec<Diagnostic>,
}

impl CheckReport {
    pub fn is_ok(&self) -> bool {
        self.errors.is_empty()
    }

    /// `{"ok": …, "errors": [...], "warnings": [...]}`, each diagnostic as
    /// [`Diagnostic::to_json`] makes it.
    pub fn to_json(&self) -> Value {
        json!({
            "ok": self.is_ok(),
            "errors": self.errors.iter().map(|d| d.to_json(Level::Error)).collect::<Vec<_>>(),
            "warnings": self
                .warnings
                .iter()
                .map(|d| d.to_json(Level::Warning))
                .collect::<Vec<_>>(),
        })
    }

    /// The first diagnostic with `code`, errors first.
    pub fn find(&self, code: &str) -> Option<&Diagnostic> {
        self.errors
            .iter()
            .chain(&self.warnings)
            .find(|d| d.code == code)
    }
}

/// One line per diagnostic: errors as [`Diagnostic`] displays them, then
/// warnings marked `warning:`.
impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (diagnostic, label) in self
            .errors
            .iter()
            .map(|d| (d, ""))
            .chain(self.warnings.iter().map(|d| (d, "warning: ")))
        {
            if !first {
                writeln!(f)?;
            }
            first = false;
            diagnostic.write(f, label)?;
        }
        Ok(())
    }
}

impl std::error::Error for CheckReport {}

/// Collects diagnostics for one file.
#[derive(Debug)]
pub(crate) struct Reporter {
    pub file: PathBuf,
    pub report: CheckReport,
}

impl Reporter {
    pub fn new(file: PathBuf) -> Self {
        Reporter {
            file,
            report: CheckReport::default(),
        }
    }

    pub fn error(
        &mut self,
        line: usize,
        node: Option<&str>,
        code: &'static str,
        message: impl Into<String>,
    ) {
        let d = self.diagnostic(line, node, code, message.into());
        self.report.errors.push(d);
    }

    pub fn warning(
        &mut self,
        line: usize,
        node: Option<&str>,
        code: &'static str,
        message: impl Into<String>,
    ) {
        let d = self.diagnostic(line, node, code, message.into());
        self.report.warnings.push(d);
    }

    fn diagnostic(
        &self,
        line: usize,
        node: Option<&str>,
        code: &'static str,
        message: String,
    ) -> Diagnostic {
        Diagnostic {
            file: self.file.clone(),
            line,
            node: node.map(str::to_string),
            code,
            message,
        }
    }

    /// The report, diagnostics in file order (stable for equal lines).
    pub fn finish(mut self) -> CheckReport {
        self.report.errors.sort_by_key(|d| d.line);
        self.report.warnings.sort_by_key(|d| d.line);
        self.report
    }
}

/// Byte offset -> 1-based line.
#[derive(Debug)]
pub(crate) struct Lines {
    starts: Vec<usize>,
}

impl Lines {
    pub fn new(text: &str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        Lines { starts }
    }

    pub fn line(&self, offset: usize) -> usize {
        self.starts.partition_point(|&start| start <= offset)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_one_based() {
        let lines = Lines::new("a\nbc\n\nd");
        assert_eq!(lines.line(0), 1);
        assert_eq!(lines.line(1), 1);
        assert_eq!(lines.line(2), 2);
        assert_eq!(lines.line(5), 3);
        assert_eq!(lines.line(6), 4);
    }

    fn unknown_node() -> Diagnostic {
        Diagnostic {
            file: "s.toml".into(),
            line: 3,
            node: Some("a".into()),
            code: codes::UNKNOWN_NODE,
            message: "edge to `b`: no such node".into(),
        }
    }

    #[test]
    fn display() {
        let d = unknown_node();
        assert_eq!(
            d.to_string(),
            "s.toml:3: node `a`: edge to `b`: no such node"
        );
        let report = CheckReport {
            errors: vec![d.clone()],
            warnings: vec![Diagnostic {
                node: None,
                line: 0,
                ..d
            }],
        };
        assert_eq!(
            report.to_string(),
            "s.toml:3: node `a`: edge to `b`: no such node\n\
             s.toml: warning: edge to `b`: no such node"
        );
    }

    #[test]
    fn json() {
        let d = unknown_node();
        let report = CheckReport {
            errors: vec![d.clone()],
            warnings: vec![Diagnostic {
                node: None,
                line: 0,
                code: codes::UNUSED_SKILL,
                ..d
            }],
        };
        assert_eq!(
            report.to_json(),
            json!({
                "ok": false,
                "errors": [{
                    "code": "unknown-node",
                    "severity": "error",
                    "message": "edge to `b`: no such node",
                    "file": "s.toml",
                    "line": 3,
                    "node": "a",
                }],
                "warnings": [{
                    "code": "unused-skill",
                    "severity": "warning",
                    "message": "edge to `b`: no such node",
                    "file": "s.toml",
                    "line": null,
                    "node": null,
                }],
            })
        );
    }
}
