//! Host imports, one module per capability, each with the same shape
//! (`HostCapability`):
//!
//! - **grant**: a capability a scenario grants with a value declares its grant
//!   type and parses the scenario's (or `--grant`'s) string into it
//!   (`Grantable`), rejecting bad values before any skill runs;
//! - **backend**: what the capability reaches outside the call comes from the
//!   runtime's [`Backends`], injected through `RuntimeConfig`, never built by
//!   the module itself;
//! - **per call**: the module builds its per-call instance from the call's
//!   grant and the backend, and implements its generated `Host` trait on that
//!   instance (seen through a `HostCall`, which adds what every capability
//!   of the call shares: the skill's name, the denials, the journal);
//! - **link**: the module adds its interface to the shared linker once;
//! - **deny**: an instance built without a grant answers every function with
//!   a `capability-not-granted` error and records the denial, so an ungranted
//!   capability is unreachable even by accident: it has no backend to reach.
//!
//! The list of capabilities is stated once, in the `capabilities!`
//! invocation below: the [`Capability`] enum, [`Grants`], the per-call
//! instances and the linking all come from it.
//!
//! What the rest of the host must know of a capability without calling it is
//! stated once too, in its module, as associated items of its
//! `HostCapability` (and `Grantable`) impl, and read through [`Capability`]:
//! whether a skill that uses it needs a blocking thread (`BLOCKS`), whether
//! its host calls are journaled (`JOURNALED`), what they may do beyond the
//! call ([`Effects`], MCP's tool annotations), how a journal entry of it
//! prints (`describe_request`, `describe_answer`: `host runs show`), what to
//! ask for less of past the host-call budget (`ASK_LESS`), the JSON Schema
//! of its value in a scenario file (`grant_schema`, which
//! `schemas/scenario.schema.json` is checked against), an example grant
//! (`EXAMPLE`), its value as `--grant` takes it (`FLAG_VALUE`) and whether
//! the grant names a path resolved against the scenario's directory
//! (`NAMES_PATH`, `path`). The checker, the loader, the MCP server
//! and the CLI read these; none of them names a capability to decide.
//!
//! Linking every interface once and building the per-call instances from each
//! call's grants keeps one `InstancePre` per skill whatever each node grants.

pub mod fs;
pub mod http;
pub mod kv;
pub mod llm;
pub mod log;
pub mod sql;
pub mod wasi;

use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use wasmtime::component::{HasData, Linker};

use crate::call::{CallOptions, CallScope, CallState};

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "skillhost:skill/streaming",
        // The capabilities whose answers come from outside the run may trap:
        // a replay that asks something the journal did not record stops the
        // guest there, instead of handing it an answer it never got.
        imports: {
            "skillhost:skill/kv": trappable,
            "skillhost:skill/http": trappable,
            "skillhost:skill/llm": trappable,
            "skillhost:skill/sql": trappable,
            // Returns a stream and a future, so it needs the store; linked
            // on the concurrent engine only.
            "skillhost:skill/llm-stream": store | trappable,
            "skillhost:skill/http-stream": store | trappable,
        },
    });
}

pub use bindings::skillhost::skill::types::SkillError as GuestError;
pub use http::{HttpBackend, ReqwestHttp};
pub use kv::{KvBackend, KvFailure, KvGrant, KvNamespace, KvOverride, KvQuota, KvUsage, MemoryKv};
pub use llm::{LlmProviders, TokenUsage};
pub use sql::SqlGrant;

/// The version of the skill contract this host implements.
pub const CONTRACT_PACKAGE: &str = "skillhost:skill";
pub const CONTRACT_VERSION: &str = "0.1.0";

/// The interface and version of an import of the skill contract
/// (`skillhost:skill/NAME@VERSION`); None for any other import.
pub(crate) fn contract_import(import: &str) -> Option<(&str, &str)> {
    import
        .strip_prefix(CONTRACT_PACKAGE)?
        .strip_prefix('/')?
        .split_once('@')
}

/// The shape of every capability module, and what it states of itself.
pub(crate) trait HostCapability {
    /// What one call holds of the capability. The module's generated `Host`
    /// trait is implemented for [`HostCall`]`<'_, Self::Call>`.
    type Call: Send + 'static;

    /// Whether a skill that may use it (imports and declares it) is called
    /// on a blocking thread: its host calls wait on something outside the
    /// host (the network, a model, a query) longer than an async worker may
    /// be held ([`crate::Skill::needs_blocking_thread`]).
    const BLOCKS: bool = false;

    /// Whether its answers come from outside the run, so each of its host
    /// calls is journaled (a replay answers it from the journal, and a node
    /// call that makes one is never cached). Such a capability is
    /// `trappable` in [`bindings`].
    const JOURNALED: bool = false;

    /// What its host calls may do beyond the call.
    const EFFECTS: Effects = Effects::NONE;

    /// What a skill past the host-call budget's bytes can ask for less of.
    const ASK_LESS: &'static str = "ask for less";

    /// The JSON Schema of its value in a scenario's `capabilities` table;
    /// `schemas/scenario.schema.json` holds these, checked by a test.
    fn grant_schema() -> Value;

    /// What one of its journal entries asked, on one line, from the
    /// entry's `request` (`host runs show`).
    fn describe_request(request: &Value) -> String {
        request.to_string()
    }

    /// What an `ok` answer of one of its journal entries holds, on one line.
    fn describe_answer(_ok: &Value) -> String {
        "ok".to_string()
    }

    /// The per-call instance for a call with `options` (its grants, limits
    /// and budget), reaching `backends`. Runs once per call: a capability
    /// the call is not granted must cost nothing here.
    fn new_call(options: &CallOptions, grants: &Grants, backends: &Backends) -> Self::Call;

    /// Adds the capability's interface to `linker`.
    fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()>;
}

/// A capability a scenario grants with a value (`fs = "DIR"`, `kv = "NS"`).
pub(crate) trait Grantable: HostCapability {
    type Grant: fmt::Debug + Clone + PartialEq + Send + Sync;

    /// An example of its value, as TOML, for messages that say how to
    /// grant it.
    const EXAMPLE: &'static str;

    /// Its value as `--grant NAME=VALUE` takes it (`DIR`), with what else
    /// the flag accepts, for the flag's help.
    const FLAG_VALUE: &'static str;

    /// Whether its value names a path, which a scenario's loader resolves
    /// against the scenario's directory and holds to the `fs` grant's rules.
    const NAMES_PATH: bool = false;

    /// The path a parsed grant names, for a capability that `NAMES_PATH`.
    fn path(_grant: &Self::Grant) -> Option<&Path> {
        None
    }

    /// The grant `value` stands for, or why it cannot be granted.
    fn parse_grant(value: &str) -> Result<Self::Grant, GrantError>;
}

/// What a capability's host calls may do beyond the call, as MCP's tool
/// annotations say it (`docs/mcp.md`). A tool's effects are the union of
/// those of what it is granted. A run's own history in the store is not
/// counted as a write: it is Skillhost's record of the call, not the
/// caller's world.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Effects {
    /// It may change what it reaches (a `kv` set, an HTTP request): the
    /// tool is not read-only.
    pub writes: bool,
    /// A write may overwrite or delete what was there (`kv`).
    pub destructive: bool,
    /// It reaches beyond the host (the network, a model).
    pub open_world: bool,
    /// The same input may get another answer (a model, what others wrote):
    /// the tool is not idempotent even where it writes nothing.
    pub varies: bool,
}

impl Effects {
    /// Reaches nothing: the same input gives the same output.
    pub const NONE: Effects = Effects {
        writes: false,
        destructive: false,
        open_world: false,
        varies: false,
    };

    /// What either does.
    pub const fn union(self, other: Effects) -> Effects {
        Effects {
            writes: self.writes || other.writes,
            destructive: self.destructive || other.destructive,
            open_world: self.open_world || other.open_world,
            varies: self.varies || other.varies,
        }
    }

    pub fn read_only(self) -> bool {
        !self.writes
    }

    pub fn idempotent(self) -> bool {
        !self.writes && !self.varies
    }
}

/// What one capability states of itself, gathered from its impls by
/// `capabilities!` (see [`Capability`]'s accessors).
struct Facts {
    blocks: bool,
    journaled: bool,
    effects: Effects,
    ask_less: &'static str,
    example: Option<&'static str>,
    flag_value: Option<&'static str>,
    names_path: bool,
    grant_schema: fn() -> Value,
    describe_request: fn(&Value) -> String,
    describe_answer: fn(&Value) -> String,
}

impl Facts {
    const fn of<C: HostCapability>() -> Facts {
        Facts {
            blocks: C::BLOCKS,
            journaled: C::JOURNALED,
            effects: C::EFFECTS,
            ask_less: C::ASK_LESS,
            example: None,
            flag_value: None,
            names_path: false,
            grant_schema: C::grant_schema,
            describe_request: C::describe_request,
            describe_answer: C::describe_answer,
        }
    }

    const fn of_granted<C: Grantable>() -> Facts {
        Facts {
            example: Some(C::EXAMPLE),
            flag_value: Some(C::FLAG_VALUE),
            names_path: C::NAMES_PATH,
            ..Facts::of::<C>()
        }
    }
}

/// What a host function of capability `C` sees: the call's instance of `C`
/// and what all capabilities of the call share.
pub(crate) struct HostCall<'a, C> {
    pub cap: &'a mut C,
    pub scope: &'a mut CallScope,
}

impl<C> HostCall<'_, C> {
    /// The error a denied import returns to the guest; records the denial.
    pub(crate) fn deny(&mut self, capability: Capability) -> GuestError {
        self.scope.record_denial(capability);
        GuestError {
            code: "capability-not-granted".into(),
            message: format!(
                "capability `{capability}` is not granted to skill `{}`",
                self.scope.skill_name()
            ),
            retryable: false,
        }
    }
}

/// The [`HasData`] that projects a call's store data onto a [`HostCall`] of
/// capability instance `C`, for the generated `add_to_linker`.
pub(crate) struct HasHostCall<C>(PhantomData<fn() -> C>);

impl<C: 'static> HasData for HasHostCall<C> {
    type Data<'a> = HostCall<'a, C>;
}

/// Where the capabilities that keep data outside a call keep it, or reach
/// outside the host. One value per runtime, shared by every call of every
/// skill it loads; set it in `RuntimeConfig::backends`.
#[derive(Clone)]
pub struct Backends {
    /// The `kv` store. Defaults to one held in memory for the life of the
    /// runtime ([`MemoryKv`]).
    pub kv: Arc<dyn KvBackend>,
    /// Where `http` requests go. Defaults to [`ReqwestHttp`], whose client is
    /// built on the first request.
    pub http: Arc<dyn HttpBackend>,
    /// The model providers `llm` reaches, from the host's configuration
    /// (`config::HostConfig`). Defaults to none: every `llm` grant then
    /// names a provider that is not configured.
    pub llm: Arc<LlmProviders>,
}

impl Default for Backends {
    fn default() -> Self {
        Backends {
            kv: Arc::new(MemoryKv::default()),
            http: Arc::new(ReqwestHttp::default()),
            llm: Arc::new(LlmProviders::default()),
        }
    }
}

impl fmt::Debug for Backends {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Backends").finish_non_exhaustive()
    }
}

/// States the list of capabilities once and derives from it everything that
/// enumerates them. `always` capabilities need no grant; each `granted` one
/// is a `Grantable` module whose grant (the type in parentheses, its
/// `Grantable::Grant`) is a field of [`Grants`] named like the module.
macro_rules! capabilities {
    (
        always: { $( $(#[$always_doc:meta])* $always:ident = $always_name:literal => $always_mod:ident::$always_host:ident, )* }
        granted: { $( $(#[$granted_doc:meta])* $granted:ident = $granted_name:literal => $granted_mod:ident::$granted_host:ident($grant:ident), )* }
    ) => {
        /// A capability a scenario can grant to a skill.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum Capability {
            $( $(#[$always_doc])* $always, )*
            $( $(#[$granted_doc])* $granted, )*
        }

        impl Capability {
            pub const ALL: [Capability; Capability::COUNT] =
                [$( Capability::$always, )* $( Capability::$granted, )*];
            const COUNT: usize = [$( $always_name, )* $( $granted_name, )*].len();

            pub fn name(self) -> &'static str {
                match self {
                    $( Capability::$always => $always_name, )*
                    $( Capability::$granted => $granted_name, )*
                }
            }

            /// Granted to every skill, whatever the scenario says: bounded
            /// per call and unable to reach anything outside the host.
            pub fn always_granted(self) -> bool {
                matches!(self, $( Capability::$always )|*)
            }

            /// What the capability's module states of it.
            fn facts(self) -> &'static Facts {
                match self {
                    $( Capability::$always => {
                        const FACTS: Facts = Facts::of::<$always_mod::$always_host>();
                        &FACTS
                    } )*
                    $( Capability::$granted => {
                        const FACTS: Facts = Facts::of_granted::<$granted_mod::$granted_host>();
                        &FACTS
                    } )*
                }
            }
        }

        /// What one call may use. Cheap to clone; shared by every call of a
        /// node.
        #[derive(Debug, Clone, Default)]
        pub struct Grants {
            $( pub $granted_mod: Option<Arc<$granted_mod::$grant>>, )*
        }

        impl Grants {
            /// Adds the grant of capability `name` with `value`.
            pub fn add(&mut self, name: &str, value: &str) -> Result<(), GrantError> {
                let Some(capability) = Capability::from_name(name) else {
                    return Err(GrantError::new(
                        name,
                        format!("unknown capability; known capabilities are {}", Capability::known()),
                    ));
                };
                match capability {
                    $( Capability::$always => Ok(()), )*
                    $( Capability::$granted => set_once(
                        &mut self.$granted_mod,
                        <$granted_mod::$granted_host as Grantable>::parse_grant(value)?,
                        name,
                    ), )*
                }
            }

            /// Takes the grant of `capability` away, if it has one.
            pub(crate) fn revoke(&mut self, capability: Capability) {
                match capability {
                    $( Capability::$always => {} )*
                    $( Capability::$granted => self.$granted_mod = None, )*
                }
            }

            pub fn is_granted(&self, capability: Capability) -> bool {
                match capability {
                    $( Capability::$always => true, )*
                    $( Capability::$granted => self.$granted_mod.is_some(), )*
                }
            }

            /// The path the grant of `capability` names, if it is granted
            /// and its value is a path (`Capability::names_path`).
            pub fn path(&self, capability: Capability) -> Option<&Path> {
                match capability {
                    $( Capability::$always => None, )*
                    $( Capability::$granted => self
                        .$granted_mod
                        .as_deref()
                        .and_then(<$granted_mod::$granted_host as Grantable>::path), )*
                }
            }
        }

        /// Each capability's instance for one call, in fields named like
        /// their modules.
        pub(crate) struct CapabilityCalls {
            $( pub $always_mod: <$always_mod::$always_host as HostCapability>::Call, )*
            $( pub $granted_mod: <$granted_mod::$granted_host as HostCapability>::Call, )*
        }

        impl CapabilityCalls {
            /// `grants`: the call's, less what the skill's manifest does
            /// not declare (`options.grants` is what the node granted).
            pub(crate) fn new(options: &CallOptions, grants: &Grants, backends: &Backends) -> Self {
                CapabilityCalls {
                    $( $always_mod: $always_mod::$always_host::new_call(options, grants, backends), )*
                    $( $granted_mod: $granted_mod::$granted_host::new_call(options, grants, backends), )*
                }
            }
        }

        /// Links every host import into `linker`, the streaming ones
        /// (`llm-stream`, `http-stream`) only for the async ABI's engine.
        pub(crate) fn link(linker: &mut Linker<CallState>, abi: crate::Abi) -> wasmtime::Result<()> {
            link_contract_types(linker)?;
            $( $always_mod::$always_host::link(linker)?; )*
            $( $granted_mod::$granted_host::link(linker)?; )*
            if abi == crate::Abi::Async {
                llm::Llm::link_streaming(linker)?;
                http::Http::link_streaming(linker)?;
            }
            wasi::link(linker, abi)
        }
    };
}

capabilities! {
    always: {
        /// Structured log lines, bounded per call.
        Log = "log" => log::Log,
    }
    granted: {
        /// Read-only access to one directory.
        Fs = "fs" => fs::Fs(FsGrant),
        /// A key-value store scoped to a namespace.
        Kv = "kv" => kv::Kv(KvGrant),
        /// Outbound HTTP to the granted hosts.
        Http = "http" => http::Http(HttpGrant),
        /// Completions from a model provider of the host's configuration.
        Llm = "llm" => llm::Llm(LlmGrant),
        /// Read-only queries over one SQLite database file.
        Sql = "sql" => sql::Sql(SqlGrant),
    }
}

impl Capability {
    /// Whether a skill that may use it is called on a blocking thread.
    pub fn blocks(self) -> bool {
        self.facts().blocks
    }

    /// Whether its host calls are journaled: their answers come from
    /// outside the run.
    pub fn journaled(self) -> bool {
        self.facts().journaled
    }

    /// What its host calls may do beyond the call.
    pub fn effects(self) -> Effects {
        self.facts().effects
    }

    /// What a skill past the host-call budget's bytes can ask for less of.
    pub(crate) fn ask_less(self) -> &'static str {
        self.facts().ask_less
    }

    /// An example of a grant's value, as TOML; `None` for a capability
    /// that is always granted.
    pub fn example_grant(self) -> Option<&'static str> {
        self.facts().example
    }

    /// What `--grant` accepts, for its help: each granted capability's
    /// `NAME=VALUE` and what else it takes.
    pub fn grant_flag_help() -> String {
        let values: Vec<String> = Capability::ALL
            .into_iter()
            .filter_map(|c| c.facts().flag_value.map(|v| format!("{c}={v}")))
            .collect();
        let always: Vec<&str> = Capability::ALL
            .into_iter()
            .filter(|c| c.always_granted())
            .map(Capability::name)
            .collect();
        format!(
            "Grant a capability: {}, see docs/scenarios.md; {} is always granted. Repeatable.",
            values.join(", "),
            always.join(", ")
        )
    }

    /// Whether a grant's value is a path, resolved against the scenario's
    /// directory and held to the `fs` grant's rules.
    pub fn names_path(self) -> bool {
        self.facts().names_path
    }

    /// The JSON Schema of its value in a scenario's `capabilities` table.
    pub fn grant_schema(self) -> Value {
        (self.facts().grant_schema)()
    }

    /// One journal entry of it on one line: what was asked, and what came
    /// back (`GET URL -> 200, 26 bytes`; `get KEY -> ok`). `response` is
    /// `{"ok": ...}` or `{"error": {"code", ...}}`.
    pub fn describe_entry(self, request: &Value, response: &Value) -> String {
        let facts = self.facts();
        format!(
            "{} -> {}",
            (facts.describe_request)(request),
            describe_response(response, facts.describe_answer)
        )
    }

    /// The `capabilities` table of a scenario's JSON Schema: every
    /// capability's value, by name.
    pub fn grants_schema() -> serde_json::Map<String, Value> {
        Capability::ALL
            .into_iter()
            .map(|c| (c.name().to_string(), c.grant_schema()))
            .collect()
    }

    pub fn from_name(name: &str) -> Option<Capability> {
        Capability::ALL.into_iter().find(|c| c.name() == name)
    }

    /// The capability behind an import name such as `skillhost:skill/fs@0.1.0`.
    pub fn from_import(import: &str) -> Option<Capability> {
        let (interface, version) = contract_import(import)?;
        if !version.starts_with("0.1.") {
            return None;
        }
        if interface == llm::STREAM_INTERFACE {
            return Some(Capability::Llm);
        }
        if interface == http::stream::STREAM_INTERFACE {
            return Some(Capability::Http);
        }
        Capability::from_name(interface)
    }

    /// Every capability's name, comma-separated, for error messages.
    pub fn known() -> String {
        Capability::ALL.map(Capability::name).join(", ")
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
}

impl Grants {
    /// What the calls with these grants may do beyond the call: the union
    /// of the granted capabilities' effects.
    pub fn effects(&self) -> Effects {
        Capability::ALL
            .into_iter()
            .filter(|c| self.is_granted(*c))
            .fold(Effects::NONE, |effects, c| effects.union(c.effects()))
    }
}

/// A journal entry's `response` on one line: `error CODE`, or what
/// `describe_answer` makes of its `ok`.
fn describe_response(response: &Value, describe_answer: fn(&Value) -> String) -> String {
    match (response.get("ok"), response.get("error")) {
        (_, Some(error)) => format!(
            "error {}",
            error.get("code").and_then(Value::as_str).unwrap_or("")
        ),
        (Some(ok), None) => describe_answer(ok),
        (None, None) => "ok".to_string(),
    }
}

/// One journal entry of capability `kind` (a [`Capability`]'s name, as the
/// store keeps it) on one line: what was asked and what came back. A kind
/// this host does not know prints its request as JSON.
pub fn describe_journal_entry(kind: &str, request: &Value, response: &Value) -> String {
    match Capability::from_name(kind) {
        Some(capability) => capability.describe_entry(request, response),
        None => format!(
            "{request} -> {}",
            describe_response(response, |_| "ok".to_string())
        ),
    }
}

/// A string field of a journal entry's JSON, or nothing.
pub(crate) fn text_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string()
}

fn set_once<T>(slot: &mut Option<Arc<T>>, grant: T, name: &str) -> Result<(), GrantError> {
    if slot.is_some() {
        return Err(GrantError::new(
            name,
            "granted twice; grant it once per skill",
        ));
    }
    *slot = Some(Arc::new(grant));
    Ok(())
}

pub(crate) fn guest_error(code: &str, message: impl Into<String>) -> GuestError {
    GuestError {
        code: code.into(),
        message: message.into(),
        retryable: false,
    }
}

/// The contract's `types` interface declares records only; components that
/// import it get an instance with nothing to call.
struct ContractTypes;

impl bindings::skillhost::skill::types::Host for ContractTypes {}

impl HasData for ContractTypes {
    type Data<'a> = ContractTypes;
}

fn link_contract_types(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
    bindings::skillhost::skill::types::add_to_linker::<CallState, ContractTypes>(linker, |_| {
        ContractTypes
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_contract_import_is_named_by_its_interface_and_version() {
        assert_eq!(
            contract_import("skillhost:skill/http-stream@0.1.0"),
            Some(("http-stream", "0.1.0"))
        );
        assert_eq!(
            contract_import("skillhost:skill/http-streamed@0.1.0"),
            Some(("http-streamed", "0.1.0"))
        );
        for other in [
            "other:skill/http-stream@0.1.0",
            "skillhost:skills/http-stream@0.1.0",
            "skillhost:skill/http-stream",
            "wasi:cli/stdout@0.2.0",
        ] {
            assert_eq!(contract_import(other), None, "{other}");
        }
    }

    /// What each capability states of itself, as the host relied on it
    /// before the facts moved into the modules.
    #[test]
    fn each_capability_states_its_facts() {
        let blocking: Vec<_> = Capability::ALL.into_iter().filter(|c| c.blocks()).collect();
        assert_eq!(
            blocking,
            [Capability::Http, Capability::Llm, Capability::Sql]
        );
        let journaled: Vec<_> = Capability::ALL
            .into_iter()
            .filter(|c| c.journaled())
            .collect();
        assert_eq!(
            journaled,
            [
                Capability::Kv,
                Capability::Http,
                Capability::Llm,
                Capability::Sql
            ]
        );
        let paths: Vec<_> = Capability::ALL
            .into_iter()
            .filter(|c| c.names_path())
            .collect();
        assert_eq!(paths, [Capability::Fs, Capability::Sql]);
        for capability in Capability::ALL {
            // Every capability a scenario grants has an example grant, and
            // only those.
            assert_eq!(
                capability.example_grant().is_none(),
                capability.always_granted(),
                "{capability}"
            );
            assert!(
                capability.grant_schema().is_object(),
                "{capability}: its grant schema"
            );
        }
        assert_eq!(Capability::Log.effects(), Effects::NONE);
        assert_eq!(Capability::Fs.effects(), Effects::NONE);
        assert_eq!(Capability::Sql.effects(), Effects::NONE);
        assert!(Capability::Kv.effects().destructive && !Capability::Kv.effects().open_world);
        assert!(!Capability::Http.effects().read_only() && Capability::Http.effects().open_world);
        assert!(Capability::Llm.effects().read_only() && !Capability::Llm.effects().idempotent());
        assert_eq!(
            Capability::Http.ask_less(),
            "fetch less (a smaller page or range)"
        );
        assert_eq!(Capability::Log.ask_less(), "ask for less");
    }

    /// `host skill call --grant`'s help, as it read when the CLI wrote it.
    #[test]
    fn the_grant_flag_help_lists_every_granted_capability() {
        assert_eq!(
            Capability::grant_flag_help(),
            "Grant a capability: fs=DIR, kv=NAMESPACE, http=HOST[:PORT],… (or a JSON list or \
             table of host patterns), llm=PROVIDER/MODEL (or a JSON table; the provider from \
             the host's configuration, skillhost.toml here, $SKILLHOST_CONFIG or \
             ~/.config/skillhost/config.toml), sql=FILE (a SQLite database, read-only), see \
             docs/scenarios.md; log is always granted. Repeatable."
        );
    }

    #[test]
    fn grants_reach_what_their_capabilities_do() {
        let mut grants = Grants::default();
        assert_eq!(grants.effects(), Effects::NONE);
        grants.add_spec("kv=notes").unwrap();
        assert_eq!(grants.effects(), Capability::Kv.effects());
        grants.add_spec("llm=local/m").unwrap();
        assert_eq!(
            grants.effects(),
            Capability::Kv.effects().union(Capability::Llm.effects())
        );
        assert_eq!(grants.path(Capability::Kv), None);
        assert_eq!(grants.path(Capability::Fs), None);
        let dir = tempfile::tempdir().unwrap();
        grants
            .add_spec(&format!("fs={}", dir.path().display()))
            .unwrap();
        assert_eq!(
            grants.path(Capability::Fs),
            Some(dir.path().canonicalize().unwrap().as_path())
        );
    }

    /// Each capability's journal entries on one line, as `host runs show`
    /// prints them.
    #[test]
    fn journal_entries_print_as_their_capability_says() {
        let line = |kind: &str, request: Value, response: Value| {
            describe_journal_entry(kind, &request, &response)
        };
        assert_eq!(
            line(
                "http",
                json!({"method": "GET", "url": "https://a.example/x"}),
                json!({"ok": {"status": 200, "headers": [], "body": "aGVsbG8="}})
            ),
            "GET https://a.example/x -> 200, 5 bytes"
        );
        assert_eq!(
            line(
                "kv",
                json!({"op": "get", "key": "seen"}),
                json!({"ok": null})
            ),
            "get seen -> ok"
        );
        assert_eq!(
            line(
                "kv",
                json!({"op": "list-keys", "prefix": "p/"}),
                json!({"ok": []})
            ),
            "list-keys p/ -> ok"
        );
        assert_eq!(
            line(
                "llm",
                json!({"provider": "local", "model": "m", "messages": [{}, {}]}),
                json!({"ok": {"input_tokens": 5, "output_tokens": 7}})
            ),
            "local/m, 2 message(s) -> 5 in, 7 out tokens"
        );
        assert_eq!(
            line(
                "sql",
                json!({"statement": "SELECT 1", "params": []}),
                json!({"ok": {"columns": ["1"], "rows": [[1], [1]]}})
            ),
            "SELECT 1 -> 2 row(s)"
        );
        assert_eq!(
            line(
                "http",
                json!({"method": "GET", "url": "u"}),
                json!({"error": {"code": "timeout", "message": "m", "retryable": true}})
            ),
            "GET u -> error timeout"
        );
        // A kind this host does not know: its request as JSON.
        assert_eq!(
            line("mq", json!({"topic": "t"}), json!({"ok": 1})),
            r#"{"topic":"t"} -> ok"#
        );
    }
}
