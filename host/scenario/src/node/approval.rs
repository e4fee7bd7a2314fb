//! `kind = "approval"`: the run stops and waits for a person. Reaching the
//! node puts the run in `waiting` with a prompt (a CEL string over the
//! input, state and config) and the shape of the answer it waits for
//! (`answer`, fields declared like `[input]`'s); `host runs answer` gives
//! the answer, and the node's `writes` and edges see it as `answer`. With
//! `timeout_ms`, a wait that lasts longer goes to `on_timeout` instead,
//! without writes.
//!
//! This module owns what the node means and how it is parsed; waiting,
//! answering and the timeout are the engine's (`kinds/approval.rs`) and
//! the store's.

use serde_json::Value;
use toml::Spanned;

use super::{
    BASE_VARS, NodeContext, NodeExpr, Write, max_visits, write_expressions, writes as parse_writes,
};
use crate::diagnostic::codes;
use crate::file::NodeDecl;
use crate::input::{self, InputField};
use crate::parse::{Parser, placeholder};
use crate::{Expr, FieldType};

/// The keys an approval node reads.
pub const KEYS: &[&str] = &[
    "prompt",
    "answer",
    "writes",
    "timeout_ms",
    "on_timeout",
    "max_visits",
];

/// The variables an approval node's writes and edges see: the answer too.
pub const ANSWER_VARS: &[&str] = &["input", "state", "config", "answer"];

#[derive(Debug, Clone)]
pub struct ApprovalNode {
    /// CEL string shown to whoever answers.
    pub prompt: Expr,
    /// The answer's fields, declared like `[input]`'s.
    pub answer: Vec<InputField>,
    /// The JSON Schema of the answer: an object of exactly those fields.
    pub answer_schema: Value,
    /// Writes into state once answered; they see `answer`.
    pub writes: Vec<Write>,
    /// Where a wait that lasted too long goes.
    pub timeout: Option<ApprovalTimeout>,
    pub max_visits: Option<u32>,
}

/// `timeout_ms` and `on_timeout`: how long the run waits, and the node it
/// goes to when nobody answered in time.
#[derive(Debug, Clone)]
pub struct ApprovalTimeout {
    pub after_ms: u64,
    pub on_timeout: String,
    /// Line of `on_timeout`.
    pub line: usize,
}

impl ApprovalNode {
    pub(crate) fn expressions<'a>(&'a self, all: &mut Vec<NodeExpr<'a>>) {
        all.push(NodeExpr {
            what: "prompt".to_string(),
            expr: &self.prompt,
            vars: BASE_VARS,
        });
        write_expressions(&self.writes, ANSWER_VARS, all);
    }

    /// `answer` with the defaults of the fields it lacks (an answer that is
    /// not an object is left for validation to report).
    pub fn apply_answer_defaults(&self, answer: &mut Value) {
        input::apply_defaults(&self.answer, answer);
    }

    /// The yes/no field of the answer, if it has one: what `host runs
    /// approve` and `reject` set.
    pub fn boolean_field(&self) -> Option<&str> {
        boolean_field(&self.answer_schema)
    }
}

/// The yes/no field of an answer schema: its only boolean field that must
/// be given, when every other field may be left out (it has a default, or
/// is optional). An answer of that shape is given by `host runs approve`
/// and `reject` alone.
pub fn boolean_field(schema: &Value) -> Option<&str> {
    let properties = schema.get("properties")?.as_object()?;
    let required: Vec<&str> = schema
        .get("required")?
        .as_array()?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let [name] = required.as_slice() else {
        return None;
    };
    let field = properties.get(*name)?;
    let boolean = field.get("type").and_then(Value::as_str) == Some(FieldType::Boolean.name());
    boolean.then_some(*name)
}

pub(crate) fn parse(p: &mut Parser<'_>, decl: &mut NodeDecl, cx: &NodeContext<'_>) -> ApprovalNode {
    let node = cx.node();
    let prompt = match decl.prompt.take() {
        Some(source) => p
            .expr(node, "`prompt`", &source)
            .unwrap_or_else(|| placeholder(p.line(&source))),
        None => {
            p.reporter.error(
                cx.line,
                node,
                codes::MISSING_PROMPT,
                "an approval node needs `prompt`, a CEL string shown to whoever answers, e.g. \
                 `prompt = \"'Deploy ' + input.service + '?'\"`",
            );
            placeholder(cx.line)
        }
    };
    let answer = match decl.answer.take() {
        Some(fields) => {
            let line = p.line(&fields);
            let fields = p.fields("answer", node, fields.into_inner());
            if fields.is_empty() {
                p.reporter.error(
                    line,
                    node,
                    codes::MISSING_ANSWER,
                    "`answer` declares no field; declare what the answer holds, e.g. \
                     `answer = { approved = { type = \"boolean\" } }`",
                );
            }
            fields
        }
        None => {
            p.reporter.error(
                cx.line,
                node,
                codes::MISSING_ANSWER,
                "an approval node needs `answer`, the fields of the answer it waits for \
                 (declared like [input]'s), e.g. `answer = { approved = { type = \"boolean\" } }`",
            );
            Vec::new()
        }
    };
    let timeout = timeout(p, node, decl.timeout_ms.take(), decl.on_timeout.take());
    ApprovalNode {
        prompt,
        answer_schema: input::schema(&answer),
        answer,
        writes: parse_writes(p, node, decl.writes.take()),
        timeout,
        max_visits: max_visits(p, node, decl.max_visits.take()),
    }
}

/// `timeout_ms` and `on_timeout` come together.
fn timeout(
    p: &mut Parser<'_>,
    node: Option<&str>,
    timeout_ms: Option<Spanned<u64>>,
    on_timeout: Option<Spanned<String>>,
) -> Option<ApprovalTimeout> {
    match (timeout_ms, on_timeout) {
        (None, None) => None,
        (Some(after), Some(to)) => {
            if *after.get_ref() == 0 {
                p.reporter.error(
                    p.line(&after),
                    node,
                    codes::INVALID_VALUE,
                    "`timeout_ms = 0` would time out before anyone could answer; give the \
                     longest wait in milliseconds (e.g. 86400000 for a day)",
                );
            }
            Some(ApprovalTimeout {
                after_ms: after.into_inner(),
                line: p.line(&to),
                on_timeout: to.into_inner(),
            })
        }
        (Some(after), None) => {
            p.reporter.error(
                p.line(&after),
                node,
                codes::INVALID_VALUE,
                "`timeout_ms` needs `on_timeout`, the node a run goes to when nobody answered in \
                 time",
            );
            None
        }
        (None, Some(to)) => {
            p.reporter.error(
                p.line(&to),
                node,
                codes::INVALID_VALUE,
                "`on_timeout` needs `timeout_ms`, how long the run waits for an answer",
            );
            None
        }
    }
}
