//! The `kv` capability: a key-value store in the runtime's kv backend
//! ([`Backends::kv`]), which every call of the runtime shares; the default
//! one ([`MemoryKv`]) lives as long as the runtime.
//!
//! **Namespaces are scoped.** A grant names a namespace (`kv = "memory"`);
//! the data a call reaches is that namespace *of its scenario*: two
//! scenarios that both grant `memory` never see each other's keys. The
//! scenario's name is the owner, set when the scenario is loaded
//! ([`KvGrant::owned_by`]): a new version of a scenario keeps its data, a
//! renamed one starts afresh, and a subgraph's skills use the child
//! scenario's namespaces, whichever parent runs it. An operator who means a
//! namespace to be shared says so in every scenario that uses it
//! (`kv = { namespace = "memory", shared = true }`): shared namespaces form
//! a scope of their own, which no private namespace reaches. A grant with
//! no owner (a call outside a scenario, `host skill call`) is unscoped, as
//! every namespace was before scoping ([`KvNamespace::scope`]).
//!
//! **Quotas.** A namespace holds at most `max_keys` keys and `max_bytes` of
//! keys and values ([`DEFAULT_MAX_KEYS`], [`DEFAULT_MAX_BYTES`], raised in
//! the grant up to [`MAX_KEYS_LIMIT`] and [`MAX_BYTES_LIMIT`]). The backend
//! enforces them, atomically with the write, since only it knows what the
//! namespace holds; a write past one is `quota-exceeded`, and one that does
//! not grow the namespace is always allowed. Within one call, writes are
//! bounded as all host calls are (the call's budget counts each, and
//! charges the bytes each value carries). A `list-keys` answers at most as
//! many keys as the grant's `max_keys`.
//!
//! **Keys** are 1 to [`MAX_KEY_BYTES`] bytes of UTF-8 without NUL (which
//! Postgres cannot store), and so are prefixes (but for the empty prefix,
//! which lists every key): every backend then lists the same keys for the
//! same prefix.
//!
//! All four functions are journaled. Reads (`get`, `list-keys`) bring data
//! into the run that the run did not make: another run, or an earlier
//! process, may have written it. Writes (`set`, `delete`) are journaled too,
//! so that a replay touches the backend not at all (it writes nothing to the
//! store it replays against, and gets the recorded outcome, a backend failure
//! included) and so that a replayed skill that writes something else is
//! caught at that write. A write's request carries the value's length and
//! SHA-256, not the value: the journal is kept with every step, and a value
//! may be a megabyte. Grant and size checks come before the journal: they
//! depend only on the call, and answer the same in both modes.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use wasmtime::component::Linker;

use super::bindings::skillhost::skill::kv as wit;
use super::{
    Backends, Capability, Effects, GrantError, Grantable, Grants, GuestError, HasHostCall,
    HostCall, HostCapability, guest_error, text_of,
};
use crate::call::{CallOptions, CallState};

/// The longest key (or prefix), in bytes.
pub const MAX_KEY_BYTES: usize = 1024;
/// The longest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 1 << 20;
/// The most keys a namespace holds unless its grant says otherwise.
pub const DEFAULT_MAX_KEYS: u64 = 10_000;
/// The most bytes (keys and values) a namespace holds unless its grant says
/// otherwise.
pub const DEFAULT_MAX_BYTES: u64 = 64 << 20;
/// The largest `max_keys` a grant may set.
pub const MAX_KEYS_LIMIT: u64 = 1_000_000;
/// The largest `max_bytes` a grant may set.
pub const MAX_BYTES_LIMIT: u64 = 4 << 30;

const GRANT_EXAMPLE: &str = "e.g. `kv = \"memory\"` or `kv = { namespace = \"memory\", \
    shared = true, max_keys = 10000, max_bytes = 67108864 }`";

/// The namespace a skill may use, whose it is, and its quotas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvGrant {
    /// The namespace as the grant names it.
    pub namespace: String,
    /// Shared with every scenario that grants it `shared` too.
    pub shared: bool,
    /// The scenario whose namespace it is (its name); `None` outside a
    /// scenario.
    pub owner: Option<String>,
    /// The most keys the namespace may hold.
    pub max_keys: u64,
    /// The most bytes of keys and values the namespace may hold.
    pub max_bytes: u64,
}

impl KvGrant {
    /// Parses a grant: a namespace, or a table with `namespace` and
    /// optionally `shared`, `max_keys` and `max_bytes` (the scenario's TOML
    /// table arrives as JSON).
    pub fn parse(value: &str) -> Result<Self, GrantError> {
        let error = |message: String| GrantError::new("kv", format!("{message}; {GRANT_EXAMPLE}"));
        let text = value.trim();
        let mut grant = KvGrant {
            namespace: String::new(),
            shared: false,
            owner: None,
            max_keys: DEFAULT_MAX_KEYS,
            max_bytes: DEFAULT_MAX_BYTES,
        };
        if !text.starts_with('{') {
            grant.namespace = text.to_string();
        } else {
            let table = match serde_json::from_str::<Value>(text) {
                Ok(Value::Object(table)) => table,
                Ok(other) => return Err(error(format!("`{other}` is not a table"))),
                Err(e) => return Err(error(format!("the grant is not a table: {e}"))),
            };
            for (key, value) in &table {
                let number = |max: u64| {
                    value
                        .as_u64()
                        .filter(|n| (1..=max).contains(n))
                        .ok_or_else(|| {
                            error(format!(
                                "`{key}` must be a whole number from 1 to {max}, not {value}"
                            ))
                        })
                };
                match key.as_str() {
                    "namespace" => {
                        grant.namespace = value
                            .as_str()
                            .ok_or_else(|| {
                                error(format!("`namespace` must be a string, not {value}"))
                            })?
                            .to_string();
                    }
                    "shared" => {
                        grant.shared = value.as_bool().ok_or_else(|| {
                            error(format!("`shared` must be true or false, not {value}"))
                        })?;
                    }
                    "max_keys" => grant.max_keys = number(MAX_KEYS_LIMIT)?,
                    "max_bytes" => grant.max_bytes = number(MAX_BYTES_LIMIT)?,
                    other => {
                        return Err(error(format!(
                            "unknown key `{other}`; a grant table has `namespace`, `shared`, \
                             `max_keys` and `max_bytes`"
                        )));
                    }
                }
            }
            if grant.namespace.is_empty() {
                return Err(error("the grant table needs `namespace`".into()));
            }
        }
        let name = &grant.namespace;
        let valid = !name.is_empty()
            && name.len() <= 128
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(error(format!(
                "namespace `{name}` must be 1-128 characters of letters, digits, `-`, `_` or `.`"
            )));
        }
        Ok(grant)
    }

    /// The grant as scenario `owner` holds it: a namespace of its own,
    /// unless the grant shares it.
    pub fn owned_by(mut self, owner: &str) -> Self {
        self.owner = Some(owner.to_string());
        self
    }

    /// Where the grant's data is, as backends address it.
    pub fn namespace(&self) -> KvNamespace {
        let scope = match (&self.owner, self.shared) {
            (_, true) => SHARED_SCOPE.to_string(),
            (Some(owner), false) => format!("{SCENARIO_SCOPE}{owner}"),
            (None, false) => UNSCOPED.to_string(),
        };
        KvNamespace {
            scope,
            name: self.namespace.clone(),
        }
    }

    /// The grant's quotas.
    pub fn quota(&self) -> KvQuota {
        KvQuota {
            max_keys: self.max_keys,
            max_bytes: self.max_bytes,
        }
    }
}

/// The scope of the namespaces every scenario that shares them reaches.
pub const SHARED_SCOPE: &str = "shared";
/// What a scenario's own scope starts with; its name follows.
pub const SCENARIO_SCOPE: &str = "scenario:";
/// The scope of grants outside any scenario, and of every namespace written
/// before namespaces were scoped.
pub const UNSCOPED: &str = "";

/// A namespace as backends address it: its scope (`scenario:NAME`,
/// `shared`, or empty for unscoped) and its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KvNamespace {
    pub scope: String,
    pub name: String,
}

impl std::fmt::Display for KvNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.scope.strip_prefix(SCENARIO_SCOPE) {
            Some(owner) => write!(f, "`{}` of scenario `{owner}`", self.name),
            None if self.scope == SHARED_SCOPE => write!(f, "shared `{}`", self.name),
            None => write!(f, "`{}`", self.name),
        }
    }
}

/// How much a namespace may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvQuota {
    pub max_keys: u64,
    pub max_bytes: u64,
}

/// What a namespace holds: its keys, and the bytes of its keys and values.
/// The rule [`KvUsage::after_set`] is the store's too
/// (`skillhost_store::KvUsage`), which cannot depend on this crate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvUsage {
    pub keys: u64,
    pub bytes: u64,
}

impl KvUsage {
    /// The usage after `key` (which held a value of `old` bytes, if any) is
    /// set to a value of `new` bytes, when the quota allows it: `Err` with
    /// that usage when it does not. A write that does not grow the
    /// namespace is always allowed, so a namespace over a lowered quota can
    /// still shrink.
    pub fn after_set(
        self,
        key: &str,
        old: Option<u64>,
        new: u64,
        quota: KvQuota,
    ) -> Result<KvUsage, KvUsage> {
        let key_bytes = key.len() as u64;
        let after = KvUsage {
            keys: self.keys + u64::from(old.is_none()),
            bytes: (self.bytes + key_bytes + new).saturating_sub(old.map_or(0, |o| key_bytes + o)),
        };
        let grows = after.keys > self.keys || after.bytes > self.bytes;
        if grows && (after.keys > quota.max_keys || after.bytes > quota.max_bytes) {
            Err(after)
        } else {
            Ok(after)
        }
    }

    /// The usage after `key`, holding a value of `old` bytes, is deleted.
    pub fn after_delete(self, key: &str, old: u64) -> KvUsage {
        KvUsage {
            keys: self.keys.saturating_sub(1),
            bytes: self.bytes.saturating_sub(key.len() as u64 + old),
        }
    }
}

/// Why a kv backend did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvFailure {
    /// The write would take the namespace past its quota; what it would
    /// have held.
    #[error(
        "the write would leave the namespace with {} keys and {} bytes, past its quota",
        .0.keys,
        .0.bytes
    )]
    OverQuota(KvUsage),
    /// The backend failed (a database error, a lost connection, a lock a
    /// panic left poisoned, a key with NUL, which no backend stores).
    #[error("{0}")]
    Unavailable(String),
}

impl From<String> for KvFailure {
    fn from(message: String) -> Self {
        KvFailure::Unavailable(message)
    }
}

/// Where `kv` data lives. Each namespace is addressed by its scope and
/// name ([`KvNamespace`]); the backend keeps each namespace's usage and
/// refuses a `set` that takes it past its quota.
pub trait KvBackend: Send + Sync {
    fn get(&self, namespace: &KvNamespace, key: &str) -> Result<Option<Vec<u8>>, KvFailure>;
    fn set(
        &self,
        namespace: &KvNamespace,
        key: &str,
        value: Vec<u8>,
        quota: KvQuota,
    ) -> Result<(), KvFailure>;
    fn delete(&self, namespace: &KvNamespace, key: &str) -> Result<(), KvFailure>;
    /// The keys that start with `prefix`, in byte order, at most `limit` of
    /// them.
    fn list_keys(
        &self,
        namespace: &KvNamespace,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<String>, KvFailure>;
}

/// A call's own kv backend, in place of the runtime's
/// ([`CallOptions::kv`]): the engine gives calls the store's kv, so that
/// the data outlives the process and every worker on the store shares it.
#[derive(Clone)]
pub struct KvOverride(pub Arc<dyn KvBackend>);

impl std::fmt::Debug for KvOverride {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KvOverride(..)")
    }
}

#[derive(Default)]
struct Entries {
    values: BTreeMap<(KvNamespace, String), Vec<u8>>,
    usage: BTreeMap<KvNamespace, KvUsage>,
}

/// A backend held in memory for the life of the runtime.
#[derive(Default)]
pub struct MemoryKv {
    entries: Mutex<Entries>,
}

impl MemoryKv {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Entries>, KvFailure> {
        self.entries.lock().map_err(|_| {
            KvFailure::Unavailable("the key-value store is unavailable after a panic".into())
        })
    }
}

impl KvBackend for MemoryKv {
    fn get(&self, namespace: &KvNamespace, key: &str) -> Result<Option<Vec<u8>>, KvFailure> {
        Ok(self
            .lock()?
            .values
            .get(&(namespace.clone(), key.into()))
            .cloned())
    }

    fn set(
        &self,
        namespace: &KvNamespace,
        key: &str,
        value: Vec<u8>,
        quota: KvQuota,
    ) -> Result<(), KvFailure> {
        // As the run store refuses it: no backend holds a key with NUL, so
        // a prefix with NUL lists nothing on every backend.
        if key.contains('\0') {
            return Err(KvFailure::Unavailable(format!(
                "kv key {key:?} holds NUL (U+0000), which no kv backend stores"
            )));
        }
        let mut entries = self.lock()?;
        let entry = (namespace.clone(), key.to_string());
        let old = entries.values.get(&entry).map(|v| v.len() as u64);
        let usage = entries.usage.get(namespace).copied().unwrap_or_default();
        let after = usage
            .after_set(key, old, value.len() as u64, quota)
            .map_err(KvFailure::OverQuota)?;
        entries.values.insert(entry, value);
        entries.usage.insert(namespace.clone(), after);
        Ok(())
    }

    fn delete(&self, namespace: &KvNamespace, key: &str) -> Result<(), KvFailure> {
        let mut entries = self.lock()?;
        if let Some(old) = entries.values.remove(&(namespace.clone(), key.into())) {
            let usage = entries.usage.entry(namespace.clone()).or_default();
            *usage = usage.after_delete(key, old.len() as u64);
        }
        Ok(())
    }

    fn list_keys(
        &self,
        namespace: &KvNamespace,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<String>, KvFailure> {
        Ok(self
            .lock()?
            .values
            .range((namespace.clone(), prefix.to_string())..)
            .take_while(|((ns, key), _)| ns == namespace && key.starts_with(prefix))
            .take(limit)
            .map(|((_, key), _)| key.clone())
            .collect())
    }
}

pub(crate) struct Kv;

/// One call's `kv`: the granted namespace and the backend, or nothing when
/// the call has no `kv` grant.
pub(crate) struct KvCall {
    access: Option<KvAccess>,
}

#[derive(Clone)]
struct KvAccess {
    grant: Arc<KvGrant>,
    namespace: Arc<KvNamespace>,
    backend: Arc<dyn KvBackend>,
}

impl HostCapability for Kv {
    type Call = KvCall;

    const JOURNALED: bool = true;
    /// Writes state that outlives the call, and a `set` may overwrite a
    /// value; what a `get` answers depends on what others wrote.
    const EFFECTS: Effects = Effects {
        writes: true,
        destructive: true,
        open_world: false,
        varies: true,
    };
    const ASK_LESS: &'static str = "read or write fewer or smaller values";

    fn grant_schema() -> Value {
        json!({
            "description": "A key-value namespace of this scenario's own: its name, or a table with `namespace` and optionally `shared` (the namespace every scenario that shares it reaches), `max_keys` and `max_bytes` (its quotas).",
            "oneOf": [
                {
                    "type": "string"
                },
                {
                    "type": "object",
                    "additionalProperties": false,
                    "required": [
                        "namespace"
                    ],
                    "properties": {
                        "namespace": {
                            "type": "string"
                        },
                        "shared": {
                            "type": "boolean",
                            "default": false
                        },
                        "max_keys": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 1000000,
                            "default": 10000
                        },
                        "max_bytes": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 4294967296_u64,
                            "default": 67108864
                        }
                    }
                }
            ]
        })
    }

    /// The operation and its key or prefix (`get KEY`).
    fn describe_request(request: &Value) -> String {
        let key = text_of(request, "key");
        let key = if key.is_empty() {
            text_of(request, "prefix")
        } else {
            key
        };
        format!("{} {key}", text_of(request, "op"))
    }

    fn new_call(options: &CallOptions, grants: &Grants, backends: &Backends) -> KvCall {
        KvCall {
            access: grants.kv.as_ref().map(|grant| KvAccess {
                grant: grant.clone(),
                namespace: Arc::new(grant.namespace()),
                backend: match &options.kv {
                    Some(KvOverride(backend)) => backend.clone(),
                    None => backends.kv.clone(),
                },
            }),
        }
    }

    fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<CallState, HasHostCall<KvCall>>(linker, |state| HostCall {
            cap: &mut state.capabilities.kv,
            scope: &mut state.scope,
        })
    }
}

impl Grantable for Kv {
    type Grant = KvGrant;

    const EXAMPLE: &'static str = "\"namespace\"";
    const FLAG_VALUE: &'static str = "NAMESPACE";

    fn parse_grant(value: &str) -> Result<KvGrant, GrantError> {
        KvGrant::parse(value)
    }
}

/// The guest's error for what the backend refused: a write past the
/// namespace's quota, or `kv-unavailable` (retryable) with the backend's
/// reason.
fn backend_error(access: &KvAccess, failure: KvFailure) -> GuestError {
    match failure {
        KvFailure::OverQuota(after) => over_quota(access, after),
        KvFailure::Unavailable(message) => GuestError {
            code: "kv-unavailable".into(),
            message,
            retryable: true,
        },
    }
}

/// A host function's answer: the guest's result, or a trap when a replay
/// diverged.
type Answer<T> = wasmtime::Result<Result<T, GuestError>>;

impl HostCall<'_, KvCall> {
    /// The grant, namespace and backend for an operation on `key` (a prefix
    /// when `prefix`), or the error the guest gets before anything is
    /// journaled.
    fn access(&mut self, key: &str, prefix: bool) -> Result<KvAccess, GuestError> {
        let Some(access) = &self.cap.access else {
            return Err(self.deny(Capability::Kv));
        };
        let what = if prefix { "prefixes" } else { "keys" };
        if key.len() > MAX_KEY_BYTES {
            return Err(guest_error(
                "invalid-key",
                format!("{what} are at most {MAX_KEY_BYTES} bytes"),
            ));
        }
        if key.contains('\0') {
            return Err(guest_error(
                "invalid-key",
                format!(
                    "{what} may not contain NUL (U+0000), which not every kv store can hold; \
                     encode the key (hex, base64) if it must carry arbitrary bytes"
                ),
            ));
        }
        if key.is_empty() && !prefix {
            return Err(guest_error("invalid-key", "a key is at least 1 byte"));
        }
        Ok(access.clone())
    }
}

impl wit::Host for HostCall<'_, KvCall> {
    fn get(&mut self, key: String) -> Answer<Option<Vec<u8>>> {
        let access = match self.access(&key, false) {
            Ok(access) => access,
            Err(e) => return Ok(Err(e)),
        };
        let request = json!({ "op": "get", "key": key });
        self.scope.journaled(Capability::Kv, request, 0, |_| {
            access
                .backend
                .get(&access.namespace, &key)
                .map_err(|failure| backend_error(&access, failure))
        })
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Answer<()> {
        let access = match self.access(&key, false) {
            Ok(access) => access,
            Err(e) => return Ok(Err(e)),
        };
        if value.len() > MAX_VALUE_BYTES {
            return Ok(Err(guest_error(
                "too-large",
                format!("values are at most {MAX_VALUE_BYTES} bytes"),
            )));
        }
        let request = json!({
            "op": "set",
            "key": key,
            "value_bytes": value.len(),
            "value_sha256": hex::encode(Sha256::digest(&value)),
        });
        let written = value.len() as u64;
        self.scope.journaled(Capability::Kv, request, written, |_| {
            let quota = access.grant.quota();
            access
                .backend
                .set(&access.namespace, &key, value, quota)
                .map_err(|failure| backend_error(&access, failure))
        })
    }

    fn delete(&mut self, key: String) -> Answer<()> {
        let access = match self.access(&key, false) {
            Ok(access) => access,
            Err(e) => return Ok(Err(e)),
        };
        let request = json!({ "op": "delete", "key": key });
        self.scope.journaled(Capability::Kv, request, 0, |_| {
            access
                .backend
                .delete(&access.namespace, &key)
                .map_err(|failure| backend_error(&access, failure))
        })
    }

    fn list_keys(&mut self, prefix: String) -> Answer<Vec<String>> {
        let access = match self.access(&prefix, true) {
            Ok(access) => access,
            Err(e) => return Ok(Err(e)),
        };
        let request = json!({ "op": "list-keys", "prefix": prefix });
        self.scope.journaled(Capability::Kv, request, 0, |_| {
            let most = usize::try_from(access.grant.max_keys).unwrap_or(usize::MAX);
            let keys = access
                .backend
                .list_keys(&access.namespace, &prefix, most.saturating_add(1))
                .map_err(|failure| backend_error(&access, failure))?;
            if keys.len() > most {
                return Err(guest_error(
                    "too-many-keys",
                    format!(
                        "namespace {} has more than {most} keys starting with `{prefix}`, the \
                         most one list answers (the grant's `max_keys`); list a longer prefix",
                        access.namespace
                    ),
                ));
            }
            Ok(keys)
        })
    }
}

/// The guest's error for a write past its namespace's quota.
fn over_quota(access: &KvAccess, after: KvUsage) -> GuestError {
    let grant = &access.grant;
    guest_error(
        "quota-exceeded",
        format!(
            "the write would leave kv namespace {} with {} keys and {} bytes, past its quota of \
             {} keys and {} bytes; delete keys, or raise `max_keys` or `max_bytes` in the \
             node's `kv` grant ({GRANT_EXAMPLE})",
            access.namespace, after.keys, after.bytes, grant.max_keys, grant.max_bytes
        ),
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::wit::Host as _;
    use super::*;
    use crate::call::CallOptions;
    use crate::capabilities::Grants;
    use crate::journal::{JournalMode, JournalRecord};

    const QUOTA: KvQuota = KvQuota {
        max_keys: DEFAULT_MAX_KEYS,
        max_bytes: DEFAULT_MAX_BYTES,
    };

    fn unscoped(name: &str) -> KvNamespace {
        KvGrant::parse(name).unwrap().namespace()
    }

    fn state_with(backend: Arc<MemoryKv>, grant: KvGrant, journal: JournalMode) -> CallState {
        let grants = Grants {
            kv: Some(Arc::new(grant)),
            ..Grants::default()
        };
        let options = CallOptions {
            grants: Arc::new(grants),
            journal,
            ..CallOptions::default()
        };
        CallState::new(
            Arc::from("unit"),
            &options,
            &options.grants,
            &Backends {
                kv: backend,
                ..Backends::default()
            },
        )
    }

    fn call_state(backend: Arc<MemoryKv>, journal: JournalMode) -> CallState {
        state_with(backend, KvGrant::parse("ns").unwrap(), journal)
    }

    fn kv(state: &mut CallState) -> HostCall<'_, KvCall> {
        HostCall {
            cap: &mut state.capabilities.kv,
            scope: &mut state.scope,
        }
    }

    #[test]
    fn list_keys_and_delete_are_journaled_and_replayed() {
        let backend = Arc::new(MemoryKv::default());
        let ns = unscoped("ns");
        for key in ["a/1", "a/2", "b/1"] {
            backend.set(&ns, key, b"x".to_vec(), QUOTA).unwrap();
        }
        let mut state = call_state(backend.clone(), JournalMode::Record);
        let keys = kv(&mut state).list_keys("a/".into()).unwrap().unwrap();
        assert_eq!(keys, ["a/1", "a/2"]);
        kv(&mut state).delete("a/1".into()).unwrap().unwrap();
        // Refused before the journal: depends on the call alone.
        let long = kv(&mut state).get("k".repeat(1025)).unwrap().unwrap_err();
        assert_eq!(long.code, "invalid-key");
        let (journal, mismatch) = std::mem::replace(
            &mut state.scope.journal,
            crate::journal::Journal::new(&JournalMode::Record),
        )
        .finish();
        assert_eq!(mismatch, None);
        assert_eq!(
            journal,
            [
                JournalRecord {
                    capability: Capability::Kv,
                    request: json!({ "op": "list-keys", "prefix": "a/" }),
                    response: json!({ "ok": ["a/1", "a/2"] }),
                },
                JournalRecord {
                    capability: Capability::Kv,
                    request: json!({ "op": "delete", "key": "a/1" }),
                    response: json!({ "ok": null }),
                },
            ]
        );
        assert_eq!(backend.get(&ns, "a/1").unwrap(), None);

        // The replay answers from the journal: the backend (now without
        // `a/1`, and emptied below) is not asked, nor written.
        backend.delete(&ns, "a/2").unwrap();
        let mut state = call_state(backend.clone(), JournalMode::Replay(journal.into()));
        let keys = kv(&mut state).list_keys("a/".into()).unwrap().unwrap();
        assert_eq!(keys, ["a/1", "a/2"]);
        backend.set(&ns, "a/1", b"back".to_vec(), QUOTA).unwrap();
        kv(&mut state).delete("a/1".into()).unwrap().unwrap();
        assert_eq!(
            backend.get(&ns, "a/1").unwrap().as_deref(),
            Some(&b"back"[..])
        );
    }

    #[test]
    fn grants_name_a_namespace_and_its_quotas() {
        let plain = KvGrant::parse("chat-memory").unwrap();
        assert_eq!(
            (plain.shared, plain.max_keys, plain.max_bytes),
            (false, DEFAULT_MAX_KEYS, DEFAULT_MAX_BYTES)
        );
        let table = KvGrant::parse(
            r#"{"namespace": "memory", "shared": true, "max_keys": 10, "max_bytes": 4096}"#,
        )
        .unwrap();
        assert_eq!(
            (
                table.namespace.as_str(),
                table.shared,
                table.max_keys,
                table.max_bytes
            ),
            ("memory", true, 10, 4096)
        );
        for (value, says) in [
            ("", "namespace ``"),
            ("a/b", "letters, digits"),
            (r#"{"shared": true}"#, "needs `namespace`"),
            (r#"{"namespace": "m", "max_keys": 0}"#, "`max_keys`"),
            (
                r#"{"namespace": "m", "max_bytes": 5000000000}"#,
                "`max_bytes`",
            ),
            (r#"{"namespace": "m", "shared": "yes"}"#, "`shared`"),
            (r#"{"namespace": "m", "ttl": 1}"#, "unknown key `ttl`"),
            ("{", "not a table"),
        ] {
            let error = KvGrant::parse(value).unwrap_err().to_string();
            assert!(error.starts_with("capability `kv`"), "{error}");
            assert!(error.contains(says), "{value}: {error}");
            assert!(error.contains("kv = \"memory\""), "{error}");
        }
    }

    #[test]
    fn scenarios_reach_only_their_own_namespaces_unless_shared() {
        let grant = KvGrant::parse("memory").unwrap();
        let chat = grant.clone().owned_by("chat").namespace();
        let other = grant.clone().owned_by("other").namespace();
        assert_ne!(chat, other);
        assert_ne!(chat, grant.namespace());
        let shared = KvGrant::parse(r#"{"namespace": "memory", "shared": true}"#).unwrap();
        assert_eq!(
            shared.clone().owned_by("chat").namespace(),
            shared.owned_by("other").namespace()
        );
        assert_ne!(
            KvGrant::parse(r#"{"namespace": "memory", "shared": true}"#)
                .unwrap()
                .namespace(),
            chat
        );

        let backend = Arc::new(MemoryKv::default());
        let mut state = state_with(
            backend.clone(),
            grant.clone().owned_by("chat"),
            JournalMode::Record,
        );
        kv(&mut state)
            .set("secret".into(), b"1".to_vec())
            .unwrap()
            .unwrap();
        let mut state = state_with(
            backend.clone(),
            grant.owned_by("other"),
            JournalMode::Record,
        );
        assert_eq!(kv(&mut state).get("secret".into()).unwrap().unwrap(), None);
        assert!(
            kv(&mut state)
                .list_keys(String::new())
                .unwrap()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn quotas_bound_keys_and_bytes_and_a_write_that_shrinks_is_allowed() {
        let backend = Arc::new(MemoryKv::default());
        let grant =
            KvGrant::parse(r#"{"namespace": "q", "max_keys": 2, "max_bytes": 100}"#).unwrap();
        let mut state = state_with(backend.clone(), grant, JournalMode::Record);
        let set = |state: &mut CallState, key: &str, n: usize| {
            kv(state).set(key.into(), vec![1; n]).unwrap()
        };
        set(&mut state, "a", 10).unwrap();
        set(&mut state, "b", 10).unwrap();
        let keys = set(&mut state, "c", 1).unwrap_err();
        assert_eq!(keys.code, "quota-exceeded");
        assert!(!keys.retryable);
        for says in ["3 keys", "quota of 2 keys and 100 bytes", "`max_keys`"] {
            assert!(keys.message.contains(says), "{}", keys.message);
        }
        let bytes = set(&mut state, "a", 90).unwrap_err();
        assert_eq!(bytes.code, "quota-exceeded");
        // Replacing a value with a smaller one, and deleting, always work.
        set(&mut state, "a", 1).unwrap();
        kv(&mut state).delete("b".into()).unwrap().unwrap();
        set(&mut state, "c", 80).unwrap();
    }

    #[test]
    fn keys_and_prefixes_with_nul_are_refused_and_lists_are_bounded() {
        let backend = Arc::new(MemoryKv::default());
        let grant = KvGrant::parse(r#"{"namespace": "n", "max_keys": 3}"#).unwrap();
        let mut state = state_with(backend.clone(), grant, JournalMode::Record);
        for key in ["a\0b", "\0"] {
            let error = kv(&mut state)
                .set(key.into(), b"x".to_vec())
                .unwrap()
                .unwrap_err();
            assert_eq!(error.code, "invalid-key");
            assert!(error.message.contains("NUL"), "{}", error.message);
            let error = kv(&mut state).list_keys(key.into()).unwrap().unwrap_err();
            assert_eq!(error.code, "invalid-key");
        }
        let empty = kv(&mut state).set(String::new(), b"x".to_vec()).unwrap();
        assert_eq!(empty.unwrap_err().code, "invalid-key");
        for key in ["a%", "a_", "a\\"] {
            kv(&mut state)
                .set(key.into(), b"x".to_vec())
                .unwrap()
                .unwrap();
        }
        // `%`, `_` and `\` mean themselves.
        assert_eq!(
            kv(&mut state).list_keys("a%".into()).unwrap().unwrap(),
            ["a%"]
        );
        assert_eq!(
            kv(&mut state).list_keys("a".into()).unwrap().unwrap(),
            ["a%", "a\\", "a_"]
        );
        // A namespace another grant let grow past this one's `max_keys`:
        // its list is refused, not cut short.
        backend
            .set(&unscoped("n"), "ab", b"x".to_vec(), QUOTA)
            .unwrap();
        let error = kv(&mut state).list_keys("a".into()).unwrap().unwrap_err();
        assert_eq!(error.code, "too-many-keys");
        assert!(
            error.message.contains("more than 3 keys"),
            "{}",
            error.message
        );
    }
}
