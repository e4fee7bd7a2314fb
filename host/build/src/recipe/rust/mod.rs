//! The Rust recipe: a skill is a crate built with cargo into a core module.

pub mod package;
pub mod toolchain;
