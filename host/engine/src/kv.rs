//! The `kv` capability's backend over the run store ([`StoreKv`]): what a
//! skill sets is a row of the store's `kv` table, so it outlives the process
//! that wrote it, and every process and worker on the store (SQLite file or
//! Postgres database) reads the same data. It is the backend of every engine
//! that has a store, unless the engine was given another
//! ([`Engine::with_kv`](crate::Engine::with_kv),
//! [`Engine::with_runtime_kv`](crate::Engine::with_runtime_kv)); without a
//! store, calls use the runtime's backend (by default held in memory for
//! the life of the process).
//!
//! Before it first touches a scoped namespace, a process lets it adopt the
//! rows its name had before namespaces were scoped
//! ([`Store::kv_adopt`]), once per namespace and process.
//!
//! Must not: check grants or sizes (the capability does, before a call gets
//! here), or take part in a run's checkpoint: a `set` is committed when it
//! returns, as an outside system would; the run's journal records what the
//! skill saw (`docs/replay.md`). Quotas are the store's to enforce, in the
//! write's own transaction.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use skillhost_runtime::{KvBackend, KvFailure, KvNamespace, KvOverride, KvQuota, KvUsage};
use skillhost_store::{KvLimits, KvSpace, KvWrite, Store};
use tokio::runtime::Handle;

/// A [`KvBackend`] over a [`Store`]. Its calls block the calling thread on
/// the store's async API, so a call that uses it runs on a blocking thread
/// (the engine sees to it), never on one of tokio's workers.
pub struct StoreKv {
    store: Store,
    handle: Handle,
    /// The scoped namespaces this process has let adopt their older rows.
    adopted: Mutex<HashSet<KvNamespace>>,
}

impl StoreKv {
    /// The backend for calls of runs driven from `handle`'s tokio runtime.
    pub fn over(store: Store, handle: Handle) -> KvOverride {
        KvOverride(Arc::new(StoreKv {
            store,
            handle,
            adopted: Mutex::new(HashSet::new()),
        }))
    }

    /// `namespace` as the store addresses it, once it has adopted what it
    /// may.
    fn space<'a>(&self, namespace: &'a KvNamespace) -> Result<KvSpace<'a>, String> {
        let space = KvSpace {
            scope: &namespace.scope,
            namespace: &namespace.name,
        };
        if namespace.scope.is_empty() {
            return Ok(space);
        }
        let known = self
            .adopted
            .lock()
            .is_ok_and(|adopted| adopted.contains(namespace));
        if !known {
            self.handle
                .block_on(self.store.kv_adopt(space))
                .map_err(|e| e.to_string())?;
            if let Ok(mut adopted) = self.adopted.lock() {
                adopted.insert(namespace.clone());
            }
        }
        Ok(space)
    }
}

impl KvBackend for StoreKv {
    fn get(&self, namespace: &KvNamespace, key: &str) -> Result<Option<Vec<u8>>, KvFailure> {
        let space = self.space(namespace)?;
        self.handle
            .block_on(self.store.kv_get(space, key))
            .map_err(|e| KvFailure::Unavailable(e.to_string()))
    }

    fn set(
        &self,
        namespace: &KvNamespace,
        key: &str,
        value: Vec<u8>,
        quota: KvQuota,
    ) -> Result<(), KvFailure> {
        let space = self.space(namespace)?;
        let limits = KvLimits {
            max_keys: quota.max_keys,
            max_bytes: quota.max_bytes,
        };
        skillhost_store::failpoint::hit(|| format!("before-kv-set:{key}"));
        match self
            .handle
            .block_on(self.store.kv_set(space, key, &value, limits))
        {
            Ok(KvWrite::Written) => {
                skillhost_store::failpoint::hit(|| format!("after-kv-set:{key}"));
                Ok(())
            }
            Ok(KvWrite::OverQuota(after)) => Err(KvFailure::OverQuota(KvUsage {
                keys: after.keys,
                bytes: after.bytes,
            })),
            Err(e) => Err(KvFailure::Unavailable(e.to_string())),
        }
    }

    fn delete(&self, namespace: &KvNamespace, key: &str) -> Result<(), KvFailure> {
        let space = self.space(namespace)?;
        self.handle
            .block_on(self.store.kv_delete(space, key))
            .map_err(|e| KvFailure::Unavailable(e.to_string()))
    }

    fn list_keys(
        &self,
        namespace: &KvNamespace,
        prefix: &str,
        limit: usize,
    ) -> Result<Vec<String>, KvFailure> {
        let space = self.space(namespace)?;
        self.handle
            .block_on(self.store.kv_keys(space, prefix, limit as u64))
            .map_err(|e| KvFailure::Unavailable(e.to_string()))
    }
}
