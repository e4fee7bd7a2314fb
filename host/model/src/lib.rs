//! The run model that the scenario, the store and the engine share: a run's
//! state ([`RunState`]), the changes a node makes to it ([`StateChange`]) and
//! the one [`apply`] of them, the hashes that pin a state
//! ([`state_hash`], [`FieldHashes`]), and how a duration is written
//! ([`parse_duration`]).
//!
//! Owns what both sides of a checkpoint must agree on: what a change does and
//! what a state hashes to. Must not: know about scenarios, skills, the store
//! or the engine; do I/O.

pub mod duration;
pub mod nesting;
pub mod state;

pub use duration::parse_duration;
pub use nesting::{MAX_NESTING, TooDeep, check_change_nesting, check_nesting, nesting_depth};
pub use state::{
    ApplyError, FIELD_HASH_PREFIX, FieldHashes, InitialState, RunState, StateChange, apply,
    canonical_json, hash_like, state_hash, state_hash_like, try_apply,
};
