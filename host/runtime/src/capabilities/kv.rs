//! The `kv` capability: a key-value store scoped to the namespace the scenario
//! grants, in the runtime's kv backend ([`Backends::kv`]), which every call of
//! the runtime shares; the default one ([`MemoryKv`]) lives as long as the
//! runtime.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use wasmtime::component::Linker;

use super::bindings::skillhost::skill::kv as wit;
use super::{
    Backends, Capability, GrantError, Grantable, Grants, GuestError, HasHostCall, HostCall,
    HostCapability, guest_error,
};
use crate::call::CallState;
use crate::limits::Limits;

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

    fn new_call(grants: &Grants, backends: &Backends, _limits: &Limits) -> KvCall {
        KvCall {
            access: grants.kv.as_ref().map(|grant| KvAccess {
                grant: grant.clone(),
                backend: backends.kv.clone(),
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

impl HostCall<'_, KvCall> {
    /// The backend and namespace for an operation on `key`, or the error the
    /// guest gets.
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
    fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, GuestError> {
        let (backend, grant) = self.access(&key)?;
        backend.get(&grant.namespace, &key).map_err(backend_error)
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), GuestError> {
        let (backend, grant) = self.access(&key)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(guest_error(
                "too-large",
                format!("values are at most {MAX_VALUE_BYTES} bytes"),
            ));
        }
        backend
            .set(&grant.namespace, &key, value)
            .map_err(backend_error)
    }

    fn delete(&mut self, key: String) -> Result<(), GuestError> {
        let (backend, grant) = self.access(&key)?;
        backend
            .delete(&grant.namespace, &key)
            .map_err(backend_error)
    }

    fn list_keys(&mut self, prefix: String) -> Result<Vec<String>, GuestError> {
        let (backend, grant) = self.access(&prefix)?;
        backend
            .list_keys(&grant.namespace, &prefix)
            .map_err(backend_error)
    }
}
