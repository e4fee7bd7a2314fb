//! Postgres: the `kv` capability's writes, each one transaction that locks
//! the namespace's usage row (`FOR UPDATE`) before it reads what the key
//! holds, so concurrent writers of a namespace take turns and its quota
//! holds whatever the number of processes (reads are shared with SQLite, in
//! `store/src/read.rs`). Sets, deletes and adoptions are retried through a
//! lost connection (`PgStore::retrying`): each leaves the same rows however
//! many times it lands.

use super::pooler::Conn;

use super::PgStore;
use crate::codec::{Codec, now_ms};
use crate::error::StoreError;
use crate::kv::{
    KV_ADOPT, KV_ANY, KV_DELETE, KV_DROP_UNSCOPED_USAGE, KV_SET, KV_SET_USAGE, KV_VALUE_LENGTH,
    KvLimits, KvSpace, KvUsage, KvWrite, describe, kv_action,
};
use crate::refusal::Decision;

/// Makes the namespace's usage row exist, then locks it.
const KV_LOCK_USAGE: &str = "INSERT INTO kv_usage (scope, namespace, keys, bytes) \
     VALUES ($1, $2, 0, 0) ON CONFLICT (scope, namespace) DO NOTHING";
const KV_USAGE_FOR_UPDATE: &str =
    "SELECT keys, bytes FROM kv_usage WHERE scope = $1 AND namespace = $2 FOR UPDATE";

/// The usage of namespace ($1, $2) counted from its rows.
const KV_COUNT_USAGE: &str = "SELECT count(*), coalesce(sum(octet_length(key) + \
     length(value)), 0)::bigint FROM kv WHERE scope = $1 AND namespace = $2";

impl PgStore {
    /// Locks and reads namespace `space`'s usage on `conn`'s transaction.
    async fn lock_usage(
        &self,
        conn: &mut Conn,
        space: KvSpace<'_>,
        action: &str,
    ) -> Result<KvUsage, StoreError> {
        sqlx::query(KV_LOCK_USAGE)
            .bind(space.scope)
            .bind(space.namespace)
            .execute(&mut *conn)
            .await
            .map_err(|e| self.error(e, action))?;
        let (keys, bytes): (i64, i64) = sqlx::query_as(KV_USAGE_FOR_UPDATE)
            .bind(space.scope)
            .bind(space.namespace)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| self.error(e, action))?;
        Ok(KvUsage {
            keys: keys as u64,
            bytes: bytes as u64,
        })
    }

    async fn set_usage(
        &self,
        conn: &mut Conn,
        space: KvSpace<'_>,
        usage: KvUsage,
        action: &str,
    ) -> Result<(), StoreError> {
        sqlx::query(KV_SET_USAGE)
            .bind(space.scope)
            .bind(space.namespace)
            .bind(usage.keys as i64)
            .bind(usage.bytes as i64)
            .execute(&mut *conn)
            .await
            .map(drop)
            .map_err(|e| self.error(e, action))
    }

    async fn value_length(
        &self,
        conn: &mut Conn,
        space: KvSpace<'_>,
        key: &str,
        action: &str,
    ) -> Result<Option<u64>, StoreError> {
        let length: Option<i32> = sqlx::query_scalar(KV_VALUE_LENGTH)
            .bind(space.scope)
            .bind(space.namespace)
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|e| self.error(e, action))?;
        Ok(length.map(|n| n as u64))
    }

    pub async fn kv_set(
        &self,
        space: KvSpace<'_>,
        key: &str,
        value: &[u8],
        limits: KvLimits,
    ) -> Result<KvWrite, StoreError> {
        let action = &kv_action("writing", space, key);
        // Retried like a read (a failover mid-write costs a pause, not the
        // skill's call): setting a key to a value twice leaves what once
        // does, its usage counted from the value it replaces.
        self.retrying(|_| async move {
            self.transaction(action, async |conn| {
                let usage = self.lock_usage(conn, space, action).await?;
                let old = self.value_length(conn, space, key, action).await?;
                let after = match usage.after_set(key, old, value.len() as u64, limits) {
                    Ok(after) => after,
                    // Rolled back at once, releasing the usage row: nothing written.
                    Err(over) => return Ok(Decision::Leave(KvWrite::OverQuota(over))),
                };
                sqlx::query(KV_SET)
                    .bind(space.scope)
                    .bind(space.namespace)
                    .bind(key)
                    .bind(value)
                    .bind(now_ms())
                    .execute(&mut *conn)
                    .await
                    .map_err(|e| self.error(e, action))?;
                self.set_usage(conn, space, after, action).await?;
                Ok(Decision::Commit(KvWrite::Written))
            })
            .await
        })
        .await
    }

    pub async fn kv_delete(&self, space: KvSpace<'_>, key: &str) -> Result<(), StoreError> {
        let action = &kv_action("deleting", space, key);
        // Retried: a key deleted twice is as gone as once.
        self.retrying(|_| async move {
            self.transaction(action, async |conn| {
                let usage = self.lock_usage(conn, space, action).await?;
                let Some(old) = self.value_length(conn, space, key, action).await? else {
                    return Ok(Decision::Leave(()));
                };
                sqlx::query(KV_DELETE)
                    .bind(space.scope)
                    .bind(space.namespace)
                    .bind(key)
                    .execute(&mut *conn)
                    .await
                    .map_err(|e| self.error(e, action))?;
                self.set_usage(conn, space, usage.after_delete(key, old), action)
                    .await?;
                Ok(Decision::Commit(()))
            })
            .await
        })
        .await
    }

    pub async fn kv_adopt(&self, space: KvSpace<'_>) -> Result<u64, StoreError> {
        let action = format!(
            "giving the kv rows written before scoping to namespace {}",
            describe(space)
        );
        let action = action.as_str();
        // Retried: a second adoption finds nothing left to adopt (and says
        // 0 rows moved, the first having moved them).
        self.retrying(|_| async move {
            self.transaction(action, async |conn| {
                // The target's usage row, locked, orders this against its writers.
                self.lock_usage(conn, space, action).await?;
                for (scope, adopt_if) in [(space.scope, 0), (crate::kv::UNSCOPED, 1)] {
                    let holds: i64 = sqlx::query_scalar(KV_ANY)
                        .bind(scope)
                        .bind(space.namespace)
                        .fetch_one(&mut *conn)
                        .await
                        .map_err(|e| self.error(e, action))?;
                    if holds != adopt_if {
                        // The namespace has rows of its own, or there is nothing
                        // to adopt: the transaction rolls back, nothing changed.
                        return Ok(Decision::Leave(0));
                    }
                }
                let moved = sqlx::query(KV_ADOPT)
                    .bind(space.scope)
                    .bind(space.namespace)
                    .execute(&mut *conn)
                    .await
                    .map_err(|e| self.error(e, action))?
                    .rows_affected();
                sqlx::query(KV_DROP_UNSCOPED_USAGE)
                    .bind(space.namespace)
                    .execute(&mut *conn)
                    .await
                    .map_err(|e| self.error(e, action))?;
                let (keys, bytes): (i64, i64) = sqlx::query_as(KV_COUNT_USAGE)
                    .bind(space.scope)
                    .bind(space.namespace)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(|e| self.error(e, action))?;
                let usage = KvUsage {
                    keys: keys as u64,
                    bytes: bytes as u64,
                };
                self.set_usage(conn, space, usage, action).await?;
                Ok(Decision::Commit(moved))
            })
            .await
        })
        .await
    }
}
