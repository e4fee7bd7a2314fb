//! A loaded skill: the compiled component, its `InstancePre`, the types of its
//! `run` export, its manifest, and what it imports.
//!
//! Loading checks everything that can be checked without running the skill:
//! that it is a component, that it imports nothing the host does not provide
//! (what can be told from the bytes is checked before compiling, in
//! [`crate::imports`]), that `run` has the contract's shape and plain-data
//! types, and that its manifest is readable and sane. A skill that loads can
//! be called.
//!
//! What a skill may use is what its manifest declares, not what it imports:
//! the toolchains of Python and JavaScript import every interface of the
//! skill's world whether the code calls it or not. A capability the skill
//! imports without declaring it stays linked to its denying instance in
//! every call, whatever the call grants; one it declares is what a scenario
//! must grant.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock};

use serde::Serialize;
use wasmtime::Store;
use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Type};

use crate::bridge;
use crate::cache::{LoadStats, sha256_hex};
use crate::call::{CallOptions, CallState};
use crate::capabilities::bindings::skillhost::skill::types as wit_types;
use crate::capabilities::{Backends, Capability, Grants, contract_import};
use crate::error::LoadError;
use crate::schema::{self, SkillInterface};

/// What a skill says about itself (its exported `manifest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub id: String,
    pub name: String,
    pub version: String,
    pub description: String,
    pub capabilities: Vec<String>,
    pub retry: RetryPolicy,
    pub estimated_duration_ms: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub initial_backoff_ms: u32,
}

pub struct Skill {
    /// The manifest's id: how errors and logs name the skill.
    pub name: String,
    pub(crate) name_arc: Arc<str>,
    /// `digest`, shared (a trace's spans name it without copying it).
    digest_arc: Arc<str>,
    /// SHA-256 of the component bytes.
    pub digest: String,
    /// Where the component came from (a path, or a label for embedded bytes).
    pub origin: String,
    pub manifest: Manifest,
    /// Every import, by name.
    pub imports: Vec<String>,
    /// Every export, by name.
    pub exports: Vec<String>,
    /// The capabilities the manifest declares: what a scenario must grant
    /// (`log` is always granted), and the only ones a call can use.
    pub capabilities: BTreeSet<Capability>,
    /// The capabilities the component imports (its toolchain may import
    /// more than it uses).
    pub imported_capabilities: BTreeSet<Capability>,
    /// Imported but not declared: linked to their denying instances in every
    /// call, whatever the call grants. Empty for most skills.
    undeclared: Vec<Capability>,
    pub input_type: Type,
    pub output_type: Type,
    pub load_stats: LoadStats,
    pub(crate) pre: InstancePre<CallState>,
    pub(crate) run_index: ComponentExportIndex,
    bytes: Arc<[u8]>,
    /// See [`Skill::needs_blocking_thread`]; known at load, asked every call.
    needs_blocking_thread: bool,
    /// See [`Skill::streams_tokens`]; known at load.
    streams_tokens: bool,
    /// It imports a concurrent host function (WASI 0.3's waits,
    /// `http-stream.fetch-stream`): wasmtime then instantiates it only
    /// asynchronously (on a fiber, which every other component is spared).
    pub(crate) instantiates_async: bool,
    interface: OnceLock<Result<SkillInterface, String>>,
    /// What the runtime shares with its skills: the capabilities' backends.
    /// Holding it also keeps the engine's epoch ticking while the skill is
    /// alive.
    runtime: Arc<crate::Shared>,
}

impl std::fmt::Debug for Skill {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Skill")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .field("origin", &self.origin)
            .finish_non_exhaustive()
    }
}

impl Skill {
    /// The skill's name, shared.
    pub fn shared_name(&self) -> Arc<str> {
        self.name_arc.clone()
    }

    /// The component's SHA-256, shared.
    pub fn shared_digest(&self) -> Arc<str> {
        self.digest_arc.clone()
    }
}

impl Skill {
    /// The component's WIT and the JSON Schemas of its input and output,
    /// decoded on first use.
    pub fn interface(&self) -> Result<&SkillInterface, String> {
        self.interface
            .get_or_init(|| schema::describe(&self.bytes).map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The component's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether the component imports WASI.
    pub fn uses_wasi(&self) -> bool {
        self.imports.iter().any(|name| is_wasi(name))
    }

    /// Whether a call of this skill may block its thread on I/O or on tokio,
    /// and so must not run on an async runtime's worker thread: one that
    /// imports WASI (wasmtime-wasi drives WASI's streams and pollables by
    /// blocking on tokio, which panics there), `http` or `llm` (their
    /// requests block the thread until they answer), or `sql` (a query
    /// runs on the calling thread, up to its time bound). Run such a call on a
    /// blocking thread (`tokio::task::spawn_blocking`) or outside any
    /// runtime. A pure skill never blocks and may be called anywhere.
    pub fn needs_blocking_thread(&self) -> bool {
        self.needs_blocking_thread
    }

    /// Whether the skill imports streamed completions (`llm-stream`) and
    /// declares `llm`: whether its calls may hand it tokens, which the
    /// engine then sends on as they come (`CallOptions::tokens`).
    pub fn streams_tokens(&self) -> bool {
        self.streams_tokens
    }

    /// The capabilities the component imports but its manifest does not
    /// declare: every call of them is denied (`capability-not-granted`).
    pub fn undeclared_imports(&self) -> &[Capability] {
        &self.undeclared
    }

    /// `grants` without the capabilities the skill imports but does not
    /// declare, or `None` when there is nothing to take away (the usual
    /// case, which allocates nothing).
    pub(crate) fn declared_grants(&self, grants: &Grants) -> Option<Grants> {
        if !self.undeclared.iter().any(|c| grants.is_granted(*c)) {
            return None;
        }
        let mut declared = grants.clone();
        for capability in &self.undeclared {
            declared.revoke(*capability);
        }
        Some(declared)
    }

    /// The backends of the runtime that loaded the skill.
    pub(crate) fn backends(&self) -> &Backends {
        &self.runtime.backends
    }

    /// The ABI its calls use, which chose its engine.
    pub fn abi(&self) -> crate::Abi {
        self.runtime.abi
    }
}

/// Checks that `bytes` look like a component before compiling them.
pub(crate) fn check_header(bytes: &[u8], origin: &str) -> Result<(), LoadError> {
    if !bytes.starts_with(b"\0asm") {
        return Err(LoadError::NotWasm {
            origin: origin.to_string(),
        });
    }
    if wasmparser::Parser::is_core_wasm(bytes) {
        return Err(LoadError::CoreModule {
            origin: origin.to_string(),
        });
    }
    Ok(())
}

pub(crate) fn load(
    runtime: Arc<crate::Shared>,
    bytes: Arc<[u8]>,
    digest: String,
    origin: &str,
    component: Component,
    load_stats: LoadStats,
) -> Result<Skill, LoadError> {
    let engine = component.engine().clone();
    // Until the manifest is read, the file name is the best name we have.
    let provisional = provisional_name(origin);
    let ty = component.component_type();

    // The exports first: a `run` that cannot be called is the more specific
    // error, whatever the component imports.
    let mut exports = Vec::new();
    let mut run = None;
    let mut has_manifest = false;
    for (name, item) in ty.exports(&engine) {
        exports.push(name.to_string());
        match (name, item.ty) {
            ("run", ComponentItem::ComponentFunc(func)) => run = Some(func),
            ("manifest", ComponentItem::ComponentFunc(_)) => has_manifest = true,
            _ => {}
        }
    }
    let Some(run) = run else {
        return Err(LoadError::MissingExport {
            skill: provisional,
            export: "run",
        });
    };
    if !has_manifest {
        return Err(LoadError::MissingExport {
            skill: provisional,
            export: "manifest",
        });
    }
    let (input_type, output_type) =
        run_types(&run).map_err(|found| LoadError::BadRunSignature {
            skill: provisional.clone(),
            found,
        })?;
    for (side, ty) in [("input", &input_type), ("output", &output_type)] {
        bridge::check_bridgeable(ty).map_err(|error| LoadError::Unbridgeable {
            skill: provisional.clone(),
            side,
            error,
        })?;
    }

    let mut imports = Vec::new();
    let mut imported_capabilities = BTreeSet::new();
    let mut type_only = Vec::new();
    let mut uses_wasi = false;
    // Concurrent host functions among its imports: WASI 0.3's waits,
    // `http-stream.fetch-stream`.
    let mut instantiates_async = false;
    for (name, item) in ty.imports(&engine) {
        let item = item.ty;
        imports.push(name.to_string());
        if let Some(capability) = Capability::from_import(name) {
            imported_capabilities.insert(capability);
            instantiates_async |= contract_import(name).is_some_and(|(interface, _)| {
                interface == crate::capabilities::http::stream::STREAM_INTERFACE
            });
        } else if is_wasi(name) {
            // WASI is linked, and the linker names any interface it lacks.
            uses_wasi = true;
            instantiates_async |= crate::imports::is_wasi_03(name);
        } else if is_contract_types(name) {
            // The types interface needs no implementation.
        } else if is_type_only(&engine, &item) {
            type_only.push(name.to_string());
        } else {
            return Err(LoadError::UnknownImport {
                skill: provisional,
                import: name.to_string(),
            });
        }
    }

    let pre = if type_only.is_empty() {
        runtime.linker.instantiate_pre(&component)
    } else {
        let mut linker = runtime.linker.clone();
        for name in &type_only {
            linker.instance(name).map_err(|e| LoadError::Link {
                skill: provisional.clone(),
                message: format!("{e:#}"),
            })?;
        }
        linker.instantiate_pre(&component)
    }
    .map_err(|e| LoadError::Link {
        skill: provisional.clone(),
        message: format!("{e:#}"),
    })?;
    let run_index =
        component
            .get_export_index(None, "run")
            .ok_or_else(|| LoadError::MissingExport {
                skill: provisional.clone(),
                export: "run",
            })?;

    // A WASI skill's manifest may print or sleep, which blocks on tokio: on
    // an async runtime's thread that panics, so the manifest is then read on
    // a thread of its own (once per load, next to a compile).
    let read = || {
        read_manifest(
            &pre,
            &runtime.backends,
            runtime.abi,
            instantiates_async,
            &provisional,
        )
    };
    let manifest = if uses_wasi && tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|scope| {
            scope.spawn(read).join().unwrap_or_else(|_| {
                Err(LoadError::Manifest {
                    skill: provisional.clone(),
                    message: "the thread reading the manifest panicked".into(),
                })
            })
        })?
    } else {
        read()?
    };
    let name = manifest.id.clone();
    // `validate_manifest` accepted only known names.
    let capabilities: BTreeSet<Capability> = manifest
        .capabilities
        .iter()
        .filter_map(|c| Capability::from_name(c))
        .collect();
    let undeclared: Vec<Capability> = imported_capabilities
        .iter()
        .filter(|c| !c.always_granted() && !capabilities.contains(c))
        .copied()
        .collect();
    // An undeclared capability that blocks (`http`, `llm`, `sql`) is
    // denied before it could; a declared one waits on the network, a model
    // or a query (each capability's `HostCapability::BLOCKS`).
    let needs_blocking_thread = uses_wasi
        || imported_capabilities
            .iter()
            .any(|c| c.blocks() && capabilities.contains(c));
    let streams_tokens = capabilities.contains(&Capability::Llm)
        && imports.iter().any(|import| {
            contract_import(import).is_some_and(|(interface, _)| {
                interface == crate::capabilities::llm::STREAM_INTERFACE
            })
        });
    Ok(Skill {
        needs_blocking_thread,
        streams_tokens,
        instantiates_async,
        name_arc: Arc::from(name.as_str()),
        digest_arc: Arc::from(digest.as_str()),
        name,
        digest,
        origin: origin.to_string(),
        manifest,
        imports,
        exports,
        capabilities,
        imported_capabilities,
        undeclared,
        input_type,
        output_type,
        load_stats,
        pre,
        run_index,
        bytes,
        interface: OnceLock::new(),
        runtime,
    })
}

/// An instance of `pre` in `store`: asynchronously (on a fiber, driven to
/// its end here) when the component imports a concurrent host function,
/// which wasmtime instantiates no other way.
pub(crate) fn instantiate(
    pre: &InstancePre<CallState>,
    store: &mut Store<CallState>,
    asynchronously: bool,
) -> wasmtime::Result<wasmtime::component::Instance> {
    if asynchronously {
        futures_executor::block_on(pre.instantiate_async(store))
    } else {
        pre.instantiate(store)
    }
}

/// Whether import `name` is a WASI interface.
fn is_wasi(name: &str) -> bool {
    name.starts_with("wasi:")
}

/// The digest used to key caches and memoized skills.
pub(crate) fn digest_of(bytes: &[u8]) -> String {
    sha256_hex(bytes)
}

fn provisional_name(origin: &str) -> String {
    std::path::Path::new(origin)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| origin.to_string())
}

fn is_contract_types(name: &str) -> bool {
    contract_import(name)
        .is_some_and(|(interface, version)| interface == "types" && version.starts_with("0.1."))
}

/// An instance import that carries only types needs no implementation.
fn is_type_only(engine: &wasmtime::Engine, item: &ComponentItem) -> bool {
    match item {
        ComponentItem::ComponentInstance(instance) => instance
            .exports(engine)
            .all(|(_, export)| matches!(export.ty, ComponentItem::Type(_))),
        ComponentItem::Type(_) => true,
        _ => false,
    }
}

/// The input type and the `ok` type of `run: func(input: T) -> result<U, skill-error>`.
fn run_types(run: &wasmtime::component::types::ComponentFunc) -> Result<(Type, Type), String> {
    let params: Vec<_> = run.params().collect();
    let results: Vec<_> = run.results().collect();
    let describe = || format!("{} parameter(s), {} result(s)", params.len(), results.len());
    let [(_, input)] = params.as_slice() else {
        return Err(describe());
    };
    let [Type::Result(result)] = results.as_slice() else {
        return Err(describe());
    };
    let Some(ok) = result.ok() else {
        return Err("result has no ok type".into());
    };
    // By shape, as wasmtime's types have no names; `schema::run_types`
    // applies the same rule to the WIT, so `host check` and `host skill
    // call` accept the same components.
    match result.err() {
        Some(Type::Record(record))
            if record.fields().map(|f| (f.name, f.ty)).collect::<Vec<_>>()
                == [
                    ("code", Type::String),
                    ("message", Type::String),
                    ("retryable", Type::Bool),
                ] => {}
        _ => {
            return Err(
                "the error type is not skill-error (a record of code: string, message: string, \
                 retryable: bool)"
                    .into(),
            );
        }
    }
    Ok((input.clone(), ok))
}

/// How long a skill's `manifest` may run: it returns constant data, so
/// anything longer is a skill that waits or loops, and every load (`skill
/// inspect`, `check`, `run`) would pay for it.
pub const MANIFEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

fn read_manifest(
    pre: &InstancePre<CallState>,
    backends: &Backends,
    abi: crate::Abi,
    instantiates_async: bool,
    provisional: &str,
) -> Result<Manifest, LoadError> {
    let fail = |message: String| LoadError::Manifest {
        skill: provisional.to_string(),
        message,
    };
    let mut options = CallOptions::default();
    options.limits.timeout = MANIFEST_TIMEOUT;
    let state = CallState::new(Arc::from(provisional), &options, &options.grants, backends);
    let mut store = Store::new(pre.engine(), state);
    store.limiter(|state| &mut state.limiter);
    store
        .set_fuel(u64::MAX)
        .map_err(|e| fail(format!("{e:#}")))?;
    crate::engine::Deadline::at(store.data().scope.deadline()).arm(&mut store);
    let stopped = |e: wasmtime::Error| match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::Interrupt) => LoadError::ManifestTimeout {
            skill: provisional.to_string(),
            limit_ms: MANIFEST_TIMEOUT.as_millis() as u64,
        },
        _ => fail(format!("{e:#}")),
    };
    let instance = instantiate(pre, &mut store, instantiates_async).map_err(stopped)?;
    let func = instance
        .get_typed_func::<(), (wit_types::Manifest,)>(&mut store, "manifest")
        .map_err(|e| fail(format!("{e:#}")))?;
    let (m,) = match abi {
        crate::Abi::Sync => func.call(&mut store, ()),
        crate::Abi::Async => futures_executor::block_on(func.call_async(&mut store, ())),
    }
    .map_err(stopped)?;
    let manifest = Manifest {
        id: m.id,
        name: m.name,
        version: m.version,
        description: m.description,
        capabilities: m.capabilities,
        retry: RetryPolicy {
            max_attempts: m.retry.max_attempts,
            initial_backoff_ms: m.retry.initial_backoff_ms,
        },
        estimated_duration_ms: m.estimated_duration_ms,
    };
    validate_manifest(&manifest).map_err(fail)?;
    Ok(manifest)
}

fn validate_manifest(m: &Manifest) -> Result<(), String> {
    let id_ok = !m.id.is_empty()
        && m.id.len() <= 64
        && m.id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !id_ok {
        return Err(format!(
            "id `{}` must be 1-64 characters of lowercase letters, digits, `-` or `_`",
            m.id
        ));
    }
    for capability in &m.capabilities {
        if Capability::from_name(capability).is_none() {
            return Err(format!(
                "declares unknown capability `{capability}`; known: {}",
                Capability::known()
            ));
        }
    }
    if m.retry.max_attempts == 0 {
        return Err("retry.max-attempts must be at least 1 (1 means never retry)".into());
    }
    Ok(())
}
