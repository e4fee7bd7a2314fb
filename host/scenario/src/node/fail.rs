//! `kind = "fail"`: ends the run as failed, with a report of what failed
//! where, a message and suggestions. The scenario's failure handler is
//! usually one.

use toml::Spanned;

use super::{BASE_VARS, NodeContext, NodeExpr};
use crate::Expr;
use crate::file::NodeDecl;
use crate::parse::Parser;

/// The keys a fail node reads.
pub const KEYS: &[&str] = &["message", "suggestions"];

#[derive(Debug, Clone)]
pub struct FailNode {
    /// CEL string for the failure message; without one, the last error's.
    pub message: Option<Expr>,
    /// What the user can do about it.
    pub suggestions: Vec<String>,
}

impl FailNode {
    pub(crate) fn expressions<'a>(&'a self, all: &mut Vec<NodeExpr<'a>>) {
        if let Some(message) = &self.message {
            all.push(NodeExpr {
                what: "message".to_string(),
                expr: message,
                vars: BASE_VARS,
            });
        }
    }
}

pub(crate) fn parse(p: &mut Parser<'_>, decl: &mut NodeDecl, cx: &NodeContext<'_>) -> FailNode {
    FailNode {
        message: decl
            .message
            .take()
            .and_then(|m| p.expr(cx.node(), "`message`", &m)),
        suggestions: decl
            .suggestions
            .take()
            .map(Spanned::into_inner)
            .unwrap_or_default(),
    }
}
