//! Checks on values crossing a boundary: JSON Schema validation of skill
//! inputs, outputs and run inputs ([`schema`]), and the citation check on
//! claims and their sources ([`citations`]).
//!
//! Every check is a pure function of its inputs: no I/O, no clock, so a
//! replayed run reaches the same verdicts. Nothing here knows about nodes or
//! runs; the engine decides what a failed check does.

pub mod citations;
pub mod schema;
