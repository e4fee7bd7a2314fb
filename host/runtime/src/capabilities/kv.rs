//! The `kv` capability: a key-value store scoped to the namespace the scenario
//! grants, in the runtime's kv backend ([`Backends::kv`]), which every call of
//! the runtime shares; the default one ([`MemoryKv`]) lives as long as the
//! runtime.
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

use serde_json::json;
use sha2::{Digest, Sha256};
use wasmtime::component::Linker;

use super::bindings::skillhost::skill::kv as wit;
use super::{
    Backends, Capability, GrantError, Grantable, Grants, GuestError, HasHostCall, HostCall,
    HostCapability, guest_error,
};
use crate::call::{CallOptions, CallState};

const MAX_KEY_BYTES: usize = 1024;
const MAX_VALUE_BYTES: usize = 1 << 20;

/// The namespace a skill may use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvGrant {
    pub namespace: String,
}

impl KvGrant {
    pub fn parse(value: &str) -> Result<Self, GrantError> {
        let valid = !value.is_empty()
            && value.len() <= 128
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(GrantError::new(
                "kv",
                format!(
                    "namespace `{value}` must be 1-128 characters of letters, digits, `-`, `_` or `.`, e.g. `kv=cache`"
                ),
            ));
        }
        Ok(KvGrant {
            namespace: value.to_string(),
        })
    }
}

/// Where `kv` data lives.
pub trait KvBackend: Send + Sync {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, String>;
    fn set(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<(), String>;
    fn delete(&self, namespace: &str, key: &str) -> Result<(), String>;
    fn list_keys(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, String>;
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

type Entries = BTreeMap<(String, String), Vec<u8>>;

/// A backend held in memory for the life of the runtime.
#[derive(Default)]
pub struct MemoryKv {
    entries: Mutex<Entries>,
}

impl MemoryKv {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Entries>, String> {
        self.entries
            .lock()
            .map_err(|_| "the key-value store is unavailable after a panic".to_string())
    }
}

impl KvBackend for MemoryKv {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        Ok(self.lock()?.get(&(namespace.into(), key.into())).cloned())
    }

    fn set(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<(), String> {
        self.lock()?.insert((namespace.into(), key.into()), value);
        Ok(())
    }

    fn delete(&self, namespace: &str, key: &str) -> Result<(), String> {
        self.lock()?.remove(&(namespace.into(), key.into()));
        Ok(())
    }

    fn list_keys(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, String> {
        Ok(self
            .lock()?
            .range((namespace.to_string(), prefix.to_string())..)
            .take_while(|((ns, key), _)| ns == namespace && key.starts_with(prefix))
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

struct KvAccess {
    grant: Arc<KvGrant>,
    backend: Arc<dyn KvBackend>,
}

impl HostCapability for Kv {
    type Call = KvCall;

    fn new_call(options: &CallOptions, grants: &Grants, backends: &Backends) -> KvCall {
        KvCall {
            access: grants.kv.as_ref().map(|grant| KvAccess {
                grant: grant.clone(),
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

    fn parse_grant(value: &str) -> Result<KvGrant, GrantError> {
        KvGrant::parse(value)
    }
}

fn backend_error(e: String) -> GuestError {
    GuestError {
        code: "kv-unavailable".into(),
        message: e,
        retryable: true,
    }
}

/// A host function's answer: the guest's result, or a trap when a replay
/// diverged.
type Answer<T> = wasmtime::Result<Result<T, GuestError>>;

impl HostCall<'_, KvCall> {
    /// The backend and namespace for an operation on `key`, or the error the
    /// guest gets before anything is journaled.
    fn access(&mut self, key: &str) -> Result<(Arc<dyn KvBackend>, Arc<KvGrant>), GuestError> {
        let Some(access) = &self.cap.access else {
            return Err(self.deny(Capability::Kv));
        };
        if key.len() > MAX_KEY_BYTES {
            return Err(guest_error(
                "invalid-key",
                format!("keys are at most {MAX_KEY_BYTES} bytes"),
            ));
        }
        Ok((access.backend.clone(), access.grant.clone()))
    }
}

impl wit::Host for HostCall<'_, KvCall> {
    fn get(&mut self, key: String) -> Answer<Option<Vec<u8>>> {
        let (backend, grant) = match self.access(&key) {
            Ok(access) => access,
            Err(e) => return Ok(Err(e)),
        };
        let request = json!({ "op": "get", "key": key });
        self.scope.journal.call(Capability::Kv, request, || {
            backend.get(&grant.namespace, &key).map_err(backend_error)
        })
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Answer<()> {
        let (backend, grant) = match self.access(&key) {
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
        self.scope.journal.call(Capability::Kv, request, || {
            backend
                .set(&grant.namespace, &key, value)
                .map_err(backend_error)
        })
    }

    fn delete(&mut self, key: String) -> Answer<()> {
        let (backend, grant) = match self.access(&key) {
            Ok(access) => access,
            Err(e) => return Ok(Err(e)),
        };
        let request = json!({ "op": "delete", "key": key });
        self.scope.journal.call(Capability::Kv, request, || {
            backend
                .delete(&grant.namespace, &key)
                .map_err(backend_error)
        })
    }

    fn list_keys(&mut self, prefix: String) -> Answer<Vec<String>> {
        let (backend, grant) = match self.access(&prefix) {
            Ok(access) => access,
            Err(e) => return Ok(Err(e)),
        };
        let request = json!({ "op": "list-keys", "prefix": prefix });
        self.scope.journal.call(Capability::Kv, request, || {
            backend
                .list_keys(&grant.namespace, &prefix)
                .map_err(backend_error)
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::wit::Host as _;
    use super::*;
    use crate::call::CallOptions;
    use crate::capabilities::Grants;
    use crate::journal::{JournalMode, JournalRecord};

    fn call_state(backend: Arc<MemoryKv>, journal: JournalMode) -> CallState {
        let mut grants = Grants::default();
        grants.add("kv", "ns").unwrap();
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

    fn kv(state: &mut CallState) -> HostCall<'_, KvCall> {
        HostCall {
            cap: &mut state.capabilities.kv,
            scope: &mut state.scope,
        }
    }

    #[test]
    fn list_keys_and_delete_are_journaled_and_replayed() {
        let backend = Arc::new(MemoryKv::default());
        for key in ["a/1", "a/2", "b/1"] {
            backend.set("ns", key, b"x".to_vec()).unwrap();
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
        assert_eq!(backend.get("ns", "a/1").unwrap(), None);

        // The replay answers from the journal: the backend (now without
        // `a/1`, and emptied below) is not asked, nor written.
        backend.delete("ns", "a/2").unwrap();
        let mut state = call_state(backend.clone(), JournalMode::Replay(journal.into()));
        let keys = kv(&mut state).list_keys("a/".into()).unwrap().unwrap();
        assert_eq!(keys, ["a/1", "a/2"]);
        backend.set("ns", "a/1", b"back".to_vec()).unwrap();
        kv(&mut state).delete("a/1".into()).unwrap().unwrap();
        assert_eq!(
            backend.get("ns", "a/1").unwrap().as_deref(),
            Some(&b"back"[..])
        );
    }
}
