//! `kind = "end"`: ends the run as completed. It reads no key of its own.

use super::{NodeBody, NodeContext};
use crate::file::NodeDecl;
use crate::parse::Parser;

/// The keys an end node reads: none.
pub const KEYS: &[&str] = &[];

pub(crate) fn parse(_p: &mut Parser<'_>, _decl: &mut NodeDecl, _cx: &NodeContext<'_>) -> NodeBody {
    NodeBody::End
}
