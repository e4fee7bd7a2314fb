//! SQLite: the `kv` capability's writes, each its own transaction on the
//! writer connection (reads are shared with Postgres, in `store/src/read.rs`).

use rusqlite::params;

use super::SqliteStore;
use crate::codec::now_ms;
use crate::error::StoreError;
use crate::kv::{KV_DELETE, KV_SET, kv_action};

impl SqliteStore {
    pub async fn kv_set(&self, namespace: &str, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let action = kv_action("writing", namespace, key);
        let now = now_ms();
        self.writer
            .write(&action, |tx| {
                tx.prepare_cached(KV_SET)
                    .and_then(|mut st| st.execute(params![namespace, key, value, now]))
                    .map_err(|e| self.sq(e, &action))
            })
            .await
            .map(drop)
    }

    pub async fn kv_delete(&self, namespace: &str, key: &str) -> Result<(), StoreError> {
        let action = kv_action("deleting", namespace, key);
        self.writer
            .write(&action, |tx| {
                tx.prepare_cached(KV_DELETE)
                    .and_then(|mut st| st.execute(params![namespace, key]))
                    .map_err(|e| self.sq(e, &action))
            })
            .await
            .map(drop)
    }
}
