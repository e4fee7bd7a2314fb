//! Postgres: the `kv` capability's writes, each one statement on the pool
//! (reads are shared with SQLite, in `store/src/read.rs`).

use super::PgStore;
use crate::codec::{Codec, now_ms};
use crate::error::StoreError;
use crate::kv::{KV_DELETE, KV_SET, kv_action};

impl PgStore {
    pub async fn kv_set(&self, namespace: &str, key: &str, value: &[u8]) -> Result<(), StoreError> {
        let action = kv_action("writing", namespace, key);
        sqlx::query(KV_SET)
            .bind(namespace)
            .bind(key)
            .bind(value)
            .bind(now_ms())
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| self.error(e, &action))
    }

    pub async fn kv_delete(&self, namespace: &str, key: &str) -> Result<(), StoreError> {
        let action = kv_action("deleting", namespace, key);
        sqlx::query(KV_DELETE)
            .bind(namespace)
            .bind(key)
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(|e| self.error(e, &action))
    }
}
