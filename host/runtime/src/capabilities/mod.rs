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
use std::sync::Arc;

use wasmtime::component::{HasData, Linker};

use crate::call::{CallOptions, CallScope, CallState};

pub(crate) mod bindings {
    wasmtime::component::bindgen!({
        path: "wit",
        world: "skillhost:skill/base",
        // The capabilities whose answers come from outside the run may trap:
        // a replay that asks something the journal did not record stops the
        // guest there, instead of handing it an answer it never got.
        imports: {
            "skillhost:skill/kv": trappable,
            "skillhost:skill/http": trappable,
            "skillhost:skill/llm": trappable,
            "skillhost:skill/sql": trappable,
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

/// The shape of every capability module.
pub(crate) trait HostCapability {
    /// What one call holds of the capability. The module's generated `Host`
    /// trait is implemented for [`HostCall`]`<'_, Self::Call>`.
    type Call: Send + 'static;

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

    /// The grant `value` stands for, or why it cannot be granted.
    fn parse_grant(value: &str) -> Result<Self::Grant, GrantError>;
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

        /// Links every host import into `linker`.
        pub(crate) fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
            link_contract_types(linker)?;
            $( $always_mod::$always_host::link(linker)?; )*
            $( $granted_mod::$granted_host::link(linker)?; )*
            wasi::link(linker)
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
