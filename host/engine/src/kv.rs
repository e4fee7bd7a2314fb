//! The `kv` capability's backend over the run store ([`StoreKv`]): what a
//! skill sets is a row of the store's `kv` table, so it outlives the process
//! that wrote it, and every process and worker on the store (SQLite file or
//! Postgres database) reads the same data. Commands that run scenarios give
//! it to their engine ([`Engine::with_store_kv`](crate::Engine::with_store_kv));
//! without it, calls use the runtime's backend (by default held in memory
//! for the life of the process).
//!
//! Must not: check grants or sizes (the capability does, before a call gets
//! here), or take part in a run's checkpoint: a `set` is committed when it
//! returns, as an outside system would; the run's journal records what the
//! skill saw (`docs/replay.md`).

use std::sync::Arc;

use skillhost_runtime::{KvBackend, KvOverride};
use skillhost_store::Store;
use tokio::runtime::Handle;

/// A [`KvBackend`] over a [`Store`]. Its calls block the calling thread on
/// the store's async API, so a call that uses it runs on a blocking thread
/// (the engine sees to it), never on one of tokio's workers.
pub struct StoreKv {
    store: Store,
    handle: Handle,
}

impl StoreKv {
    /// The backend for calls of runs driven from `handle`'s tokio runtime.
    pub fn over(store: Store, handle: Handle) -> KvOverride {
        KvOverride(Arc::new(StoreKv { store, handle }))
    }
}

impl KvBackend for StoreKv {
    fn get(&self, namespace: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        self.handle
            .block_on(self.store.kv_get(namespace, key))
            .map_err(|e| e.to_string())
    }

    fn set(&self, namespace: &str, key: &str, value: Vec<u8>) -> Result<(), String> {
        self.handle
            .block_on(self.store.kv_set(namespace, key, &value))
            .map_err(|e| e.to_string())
    }

    fn delete(&self, namespace: &str, key: &str) -> Result<(), String> {
        self.handle
            .block_on(self.store.kv_delete(namespace, key))
            .map_err(|e| e.to_string())
    }

    fn list_keys(&self, namespace: &str, prefix: &str) -> Result<Vec<String>, String> {
        self.handle
            .block_on(self.store.kv_keys(namespace, prefix))
            .map_err(|e| e.to_string())
    }
}
