//! Host imports, one module per capability, each with the same shape:
//!
//! - **grant**: `parse_grant` turns the scenario's (or `--grant`'s) value into a
//!   typed grant, rejecting bad values before any skill runs;
//! - **link**: the module implements its generated `Host` trait for
//!   [`CallState`], and [`link`] adds every interface to the shared linker once;
//! - **deny**: every function first asks the call's [`Grants`] for its grant and,
//!   when there is none, returns a `capability-not-granted` error to the guest
//!   and records the denial, so an ungranted capability is unreachable even by
//!   accident.
//!
//! Linking every interface once and checking grants per call keeps one
//! `InstancePre` per skill whatever each node grants.

pub mod fs;
pub mod http;
pub mod kv;
pub mod llm;
pub mod log;
pub mod wasi;

use std::fmt;
use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker};

use crate::call::CallState;

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "skillhost:skill/base",
    });
}

pub use bindings::skillhost::skill::types::SkillError as GuestError;

/// The version of the skill contract this host implements.
pub const CONTRACT_PACKAGE: &str = "skillhost:skill";
pub const CONTRACT_VERSION: &str = "0.1.0";

/// A capability a scenario can grant to a skill.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Capability {
    Log,
    Fs,
    Kv,
    Http,
    Llm,
}

impl Capability {
    pub const ALL: [Capability; 5] = [
        Capability::Log,
        Capability::Fs,
        Capability::Kv,
        Capability::Http,
        Capability::Llm,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Capability::Log => "log",
            Capability::Fs => "fs",
            Capability::Kv => "kv",
            Capability::Http => "http",
            Capability::Llm => "llm",
        }
    }

    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The capability behind an import name such as `skillhost:skill/fs@0.1.0`.
    pub fn from_import(import: &str) -> Option<Capability> {
        let rest = import.strip_prefix("skillhost:skill/")?;
        let (interface, version) = rest.split_once('@')?;
        if !version.starts_with("0.1.") {
            return None;
        }
        Capability::from_name(interface)
    }

    /// `log` is granted to every skill: it is bounded per call and cannot reach
    /// anything outside the host.
    pub fn always_granted(self) -> bool {
        self == Capability::Log
    }
}

impl fmt::Display for Capability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A grant that could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("capability `{capability}`: {message}")]
pub struct GrantError {
    pub capability: String,
    pub message: String,
}

impl GrantError {
    pub(crate) fn new(capability: &str, message: impl Into<String>) -> Self {
        GrantError {
            capability: capability.to_string(),
            message: message.into(),
        }
    }
}

/// What one call may use. Cheap to clone; shared by every call of a node.
#[derive(Debug, Clone, Default)]
pub struct Grants {
    pub fs: Option<fs::FsGrant>,
    pub kv: Option<kv::KvGrant>,
    pub http: Option<http::HttpGrant>,
    pub llm: Option<llm::LlmGrant>,
}

impl Grants {
    /// Adds one grant given as `CAP=VALUE` (or `CAP` for capabilities without a
    /// value).
    pub fn add_spec(&mut self, spec: &str) -> Result<(), GrantError> {
        let (name, value) = match spec.split_once('=') {
            Some((n, v)) => (n.trim(), v.trim()),
            None => (spec.trim(), ""),
        };
        self.add(name, value)
    }

    /// Adds the grant of capability `name` with `value`.
    pub fn add(&mut self, name: &str, value: &str) -> Result<(), GrantError> {
        let known = Capability::ALL.map(Capability::name).join(", ");
        let Some(capability) = Capability::from_name(name) else {
            return Err(GrantError::new(
                name,
                format!("unknown capability; known capabilities are {known}"),
            ));
        };
        match capability {
            Capability::Log => {}
            Capability::Fs => set_once(&mut self.fs, fs::FsGrant::parse(value)?, name)?,
            Capability::Kv => set_once(&mut self.kv, kv::KvGrant::parse(value)?, name)?,
            Capability::Http => set_once(&mut self.http, http::HttpGrant::parse(value)?, name)?,
            Capability::Llm => set_once(&mut self.llm, llm::LlmGrant::parse(value)?, name)?,
        }
        Ok(())
    }

    pub fn is_granted(&self, capability: Capability) -> bool {
        match capability {
            Capability::Log => true,
            Capability::Fs => self.fs.is_some(),
            Capability::Kv => self.kv.is_some(),
            Capability::Http => self.http.is_some(),
            Capability::Llm => self.llm.is_some(),
        }
    }
}

fn set_once<T>(slot: &mut Option<T>, grant: T, name: &str) -> Result<(), GrantError> {
    if slot.is_some() {
        return Err(GrantError::new(
            name,
            "granted twice; grant it once per skill",
        ));
    }
    *slot = Some(grant);
    Ok(())
}

/// The error a denied import returns to the guest.
pub(crate) fn denied(state: &mut CallState, capability: Capability) -> GuestError {
    state.record_denial(capability);
    GuestError {
        code: "capability-not-granted".into(),
        message: format!(
            "capability `{capability}` is not granted to skill `{}`",
            state.skill_name()
        ),
        retryable: false,
    }
}

pub(crate) fn guest_error(code: &str, message: impl Into<String>) -> GuestError {
    GuestError {
        code: code.into(),
        message: message.into(),
        retryable: false,
    }
}

/// Links every host import into `linker`.
pub(crate) fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    bindings::Base::add_to_linker::<CallState, HasSelf<CallState>>(linker, |state| state)?;
    wasi::link(linker)
}

impl bindings::skillhost::skill::types::Host for CallState {}

/// Shared handle to the key-value backend the `kv` capability uses.
pub type KvBackendRef = Arc<dyn kv::KvBackend>;
