//! Checks on values crossing a boundary: JSON Schema validation of skill
//! inputs, outputs and run inputs ([`schema`]), the citation check on
//! claims and their sources ([`citations`]), where a scenario may point an
//! `fs` grant ([`fs_grant`]), what an artifact may be called
//! ([`artifact_name`]) and what its media type may be ([`media_type`]).
//!
//! Every check is a pure function of its inputs: no I/O, no clock, so a
//! replayed run reaches the same verdicts. Nothing here knows about nodes or
//! runs; the engine decides what a failed check does.

pub mod artifact_name;
pub mod citations;
pub mod fs_grant;
pub mod media_type;
pub mod schema;
