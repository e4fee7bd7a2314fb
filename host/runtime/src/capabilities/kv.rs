//! The `kv` capability: a key-value store scoped to the namespace the scenario
//! grants. The backend is shared by all calls of a runtime; the in-memory one
//! lives as long as the runtime.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::bindings::skillhost::skill::kv::Host;
use super::{Capability, GrantError, GuestError, denied, guest_error};
use crate::call::CallState;

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

impl CallState {
    fn kv_namespace(&mut self, key: &str) -> Result<String, GuestError> {
        let Some(grant) = self.grants().kv.clone() else {
            return Err(denied(self, Capability::Kv));
        };
        if key.len() > MAX_KEY_BYTES {
            return Err(guest_error(
                "invalid-key",
                format!("keys are at most {MAX_KEY_BYTES} bytes"),
            ));
        }
        Ok(grant.namespace)
    }
}

fn backend_error(e: String) -> GuestError {
    GuestError {
        code: "kv-unavailable".into(),
        message: e,
        retryable: true,
    }
}

impl Host for CallState {
    fn get(&mut self, key: String) -> Result<Option<Vec<u8>>, GuestError> {
        let ns = self.kv_namespace(&key)?;
        self.kv_backend().get(&ns, &key).map_err(backend_error)
    }

    fn set(&mut self, key: String, value: Vec<u8>) -> Result<(), GuestError> {
        let ns = self.kv_namespace(&key)?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(guest_error(
                "too-large",
                format!("values are at most {MAX_VALUE_BYTES} bytes"),
            ));
        }
        self.kv_backend()
            .set(&ns, &key, value)
            .map_err(backend_error)
    }

    fn delete(&mut self, key: String) -> Result<(), GuestError> {
        let ns = self.kv_namespace(&key)?;
        self.kv_backend().delete(&ns, &key).map_err(backend_error)
    }

    fn list_keys(&mut self, prefix: String) -> Result<Vec<String>, GuestError> {
        let ns = self.kv_namespace(&prefix)?;
        self.kv_backend()
            .list_keys(&ns, &prefix)
            .map_err(backend_error)
    }
}
