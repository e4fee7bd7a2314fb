//! The runtime's errors. Every variant names the skill (or the file) and says
//! what to do; `kind()` is the stable identifier printed by the CLI and stored
//! with a failed step.

use std::path::PathBuf;

use crate::bridge::BridgeError;

/// Why a component could not be loaded as a skill.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "cannot read skill component `{path}`: {source}; check the path, or build the skill with `host skill build <dir>`"
    )]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "`{origin}` is not a WebAssembly file (it does not start with the `\\0asm` magic); pass a component built with `host skill build`"
    )]
    NotWasm { origin: String },
    #[error(
        "`{origin}` is a core WebAssembly module, not a component; componentize it (`host skill build` does this, or `wasm-tools component new`)"
    )]
    CoreModule { origin: String },
    #[error("`{origin}` is not a valid component: {message}")]
    Compile { origin: String, message: String },
    /// Found before compiling: an import the host cannot link, with the fix.
    #[error("`{origin}` imports `{import}`, which Skillhost does not provide: {fix}")]
    Unprovided {
        origin: String,
        import: String,
        fix: String,
    },
    /// Found before compiling: the component-model async ABI.
    #[error(
        "`{origin}` uses the component model's threads ({what}), which Skillhost does not run: a skill is one task on a fresh instance, which may be async (WASI 0.3) but not threaded; rebuild it without threads"
    )]
    Threads { origin: String, what: String },
    #[error(
        "skill `{skill}` does not export `{export}`; a skill's world must include `skillhost:skill/base` and `export run: func(input: T) -> result<U, skill-error>`"
    )]
    MissingExport { skill: String, export: &'static str },
    #[error(
        "skill `{skill}`: `run` has the wrong signature ({found}); it must be `run: func(input: T) -> result<U, skill-error>` with one parameter"
    )]
    BadRunSignature { skill: String, found: String },
    #[error(
        "skill `{skill}` imports `{import}`, which Skillhost does not provide; skills may import skillhost:skill/{{{capabilities}}}@0.1 and WASI 0.2 interfaces",
        capabilities = crate::Capability::ALL.map(crate::Capability::name).join(",")
    )]
    UnknownImport { skill: String, import: String },
    #[error("skill `{skill}`: its {side} type cannot cross the skill boundary: {error}")]
    Unbridgeable {
        skill: String,
        side: &'static str,
        error: BridgeError,
    },
    #[error("skill `{skill}` cannot be instantiated: {message}")]
    Link { skill: String, message: String },
    #[error("skill `{skill}`: calling `manifest` failed: {message}")]
    Manifest { skill: String, message: String },
    #[error(
        "skill `{skill}`: `manifest` did not return within {limit_ms} ms; it must return constant data, without waiting or computing"
    )]
    ManifestTimeout { skill: String, limit_ms: u64 },
    #[error("component cache at `{path}`: {message}")]
    Cache { path: PathBuf, message: String },
}

/// Why one call of a skill failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum CallError {
    #[error("skill `{skill}` returned error `{code}`: {message}")]
    Skill {
        skill: String,
        code: String,
        message: String,
        retryable: bool,
    },
    #[error("skill `{skill}`: input does not fit its WIT type: {error}")]
    InvalidInput { skill: String, error: BridgeError },
    #[error("skill `{skill}` exceeded its timeout of {limit_ms} ms")]
    Timeout { skill: String, limit_ms: u64 },
    #[error(
        "skill `{skill}` exceeded its memory limit of {limit_mib} MiB (it asked for {requested_bytes} bytes); raise `memory_mb` if the skill really needs it"
    )]
    MemoryLimit {
        skill: String,
        limit_mib: u64,
        requested_bytes: u64,
    },
    #[error(
        "skill `{skill}` ran out of fuel (limit {limit} units); raise `fuel` or look for a runaway loop"
    )]
    FuelExhausted { skill: String, limit: u64 },
    #[error(
        "skill `{skill}` waits on futures or streams that nothing can ever complete (a deadlock of the async ABI: it reads a future or stream whose writing end it holds itself or has dropped, or waits on an empty set); the call was stopped. Fix the skill"
    )]
    Deadlock { skill: String },
    #[error("skill `{skill}` exceeded the {limit_name} limit of {limit}")]
    ResourceLimit {
        skill: String,
        limit_name: &'static str,
        limit: u64,
    },
    #[error(
        "skill `{skill}` produced {actual_bytes} bytes of output, over the limit of {limit_bytes} bytes"
    )]
    OutputTooLarge {
        skill: String,
        limit_bytes: u64,
        /// The output's size as JSON; for an output too large for the host
        /// to lift at all, the bytes it had lifted when it stopped.
        actual_bytes: u64,
    },
    #[error("skill `{skill}` returned a value that does not fit its WIT type: {message}")]
    InvalidOutput { skill: String, message: String },
    #[error("skill `{skill}` trapped: {message}")]
    Trap { skill: String, message: String },
    #[error(
        "skill `{skill}` exited with code {code} instead of returning from `run` (a WASI `exit`, e.g. Rust's `std::process::exit`); return an error from `run` instead"
    )]
    Exited { skill: String, code: i32 },
    #[error(
        "skill `{skill}` called `{capability}`, which was not granted: {message}; grant it to the node (`capabilities`) or with `--grant {capability}=VALUE`"
    )]
    CapabilityDenied {
        skill: String,
        capability: String,
        message: String,
    },
    /// A host call refused for the call's host-call budget, after which
    /// the skill failed.
    #[error("skill `{skill}` ran out of its host-call budget: {budget}; then {message}")]
    HostCallBudget {
        skill: String,
        /// The budget's refusal: which capability, what was left, what to
        /// raise.
        budget: String,
        /// How the skill failed afterwards.
        message: String,
    },
    #[error("skill `{skill}`: the host could not run it: {message}")]
    Host {
        skill: String,
        message: String,
        retryable: bool,
    },
    #[error(
        "skill `{skill}` diverged from its journal at entry {entry} (`{capability}`): {difference}; a replay must make the host calls the recorded call made, in the same order"
    )]
    JournalMismatch {
        skill: String,
        /// The capability of the host call (or of the recorded entry) that
        /// did not match.
        capability: String,
        /// The 0-based index of the journal entry.
        entry: usize,
        /// What differed, with the recorded request.
        difference: String,
    },
}

impl CallError {
    /// Every [`CallError::kind`], in the order of its match (a variant
    /// added there is added here): for those who check that a code is one
    /// the host can give.
    pub const KINDS: &'static [&'static str] = &[
        "skill-error",
        "invalid-input",
        "timeout",
        "memory-limit",
        "fuel-exhausted",
        "deadlock",
        "resource-limit",
        "output-too-large",
        "invalid-output",
        "trap",
        "exited",
        "capability-denied",
        "host-call-budget",
        "host",
        "journal-mismatch",
    ];

    /// A stable, kebab-case name for the kind of failure.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Skill { .. } => "skill-error",
            CallError::InvalidInput { .. } => "invalid-input",
            CallError::Timeout { .. } => "timeout",
            CallError::MemoryLimit { .. } => "memory-limit",
            CallError::FuelExhausted { .. } => "fuel-exhausted",
            CallError::Deadlock { .. } => "deadlock",
            CallError::ResourceLimit { .. } => "resource-limit",
            CallError::OutputTooLarge { .. } => "output-too-large",
            CallError::InvalidOutput { .. } => "invalid-output",
            CallError::Trap { .. } => "trap",
            CallError::Exited { .. } => "exited",
            CallError::CapabilityDenied { .. } => "capability-denied",
            CallError::HostCallBudget { .. } => "host-call-budget",
            CallError::Host { .. } => "host",
            CallError::JournalMismatch { .. } => "journal-mismatch",
        }
    }

    /// The skill the error is about.
    pub fn skill(&self) -> &str {
        match self {
            CallError::Skill { skill, .. }
            | CallError::InvalidInput { skill, .. }
            | CallError::Timeout { skill, .. }
            | CallError::MemoryLimit { skill, .. }
            | CallError::FuelExhausted { skill, .. }
            | CallError::Deadlock { skill }
            | CallError::ResourceLimit { skill, .. }
            | CallError::OutputTooLarge { skill, .. }
            | CallError::InvalidOutput { skill, .. }
            | CallError::Trap { skill, .. }
            | CallError::Exited { skill, .. }
            | CallError::CapabilityDenied { skill, .. }
            | CallError::HostCallBudget { skill, .. }
            | CallError::Host { skill, .. }
            | CallError::JournalMismatch { skill, .. } => skill,
        }
    }

    /// Whether trying the same call again may succeed. Only errors the skill
    /// itself marks retryable, and transient host conditions, are.
    pub fn retryable(&self) -> bool {
        match self {
            CallError::Skill { retryable, .. } | CallError::Host { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// The error as a JSON object: kind, skill, code, message, retryable.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": self.kind(),
            "skill": self.skill(),
            "code": self.code(),
            "message": self.to_string(),
            "retryable": self.retryable(),
        })
    }

    /// The skill's own error code, or the kind for host-detected failures.
    pub fn code(&self) -> &str {
        match self {
            CallError::Skill { code, .. } => code,
            other => other.kind(),
        }
    }
}
