//! Test support for the store and worker tests: throwaway Postgres clusters
//! and fresh databases (`pg`). Shared by several test binaries; each uses
//! what it needs.
#![allow(dead_code)]

pub mod fixtures;
pub mod pg;
