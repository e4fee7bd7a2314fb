//! SQLite: the `kv` capability's writes, each its own transaction on the
//! writer connection, whose `BEGIN IMMEDIATE` holds SQLite's write lock
//! from the first read of the namespace's usage to the commit (reads are
//! shared with Postgres, in `store/src/read.rs`).

use rusqlite::{OptionalExtension, Transaction, params};

use super::SqliteStore;
use crate::codec::now_ms;
use crate::error::StoreError;
use crate::kv::{
    KV_ADOPT, KV_ANY, KV_DELETE, KV_DROP_UNSCOPED_USAGE, KV_SET, KV_SET_USAGE, KV_USAGE,
    KV_VALUE_LENGTH, KvLimits, KvSpace, KvUsage, KvWrite, describe, kv_action,
};
use crate::refusal::Decision;

/// The usage of namespace ($1, $2) counted from its rows (keys by their
/// UTF-8 bytes).
const KV_COUNT_USAGE: &str = "SELECT count(*), coalesce(sum(length(CAST(key AS BLOB)) + \
     length(value)), 0) FROM kv WHERE scope = $1 AND namespace = $2";

impl SqliteStore {
    fn usage_in(
        &self,
        tx: &Transaction<'_>,
        space: KvSpace<'_>,
        action: &str,
    ) -> Result<KvUsage, StoreError> {
        tx.prepare_cached(KV_USAGE)
            .and_then(|mut st| {
                st.query_row(params![space.scope, space.namespace], |row| {
                    Ok(KvUsage {
                        keys: row.get::<_, i64>(0)? as u64,
                        bytes: row.get::<_, i64>(1)? as u64,
                    })
                })
                .optional()
            })
            .map(Option::unwrap_or_default)
            .map_err(|e| self.sq(e, action))
    }

    fn value_length(
        &self,
        tx: &Transaction<'_>,
        space: KvSpace<'_>,
        key: &str,
        action: &str,
    ) -> Result<Option<u64>, StoreError> {
        tx.prepare_cached(KV_VALUE_LENGTH)
            .and_then(|mut st| {
                st.query_row(params![space.scope, space.namespace, key], |row| {
                    row.get::<_, i64>(0)
                })
                .optional()
            })
            .map(|length| length.map(|n| n as u64))
            .map_err(|e| self.sq(e, action))
    }

    fn set_usage(
        &self,
        tx: &Transaction<'_>,
        space: KvSpace<'_>,
        usage: KvUsage,
        action: &str,
    ) -> Result<(), StoreError> {
        tx.prepare_cached(KV_SET_USAGE)
            .and_then(|mut st| {
                st.execute(params![
                    space.scope,
                    space.namespace,
                    usage.keys as i64,
                    usage.bytes as i64
                ])
            })
            .map(drop)
            .map_err(|e| self.sq(e, action))
    }

    pub async fn kv_set(
        &self,
        space: KvSpace<'_>,
        key: &str,
        value: &[u8],
        limits: KvLimits,
    ) -> Result<KvWrite, StoreError> {
        let action = kv_action("writing", space, key);
        let now = now_ms();
        self.transaction(&action, |tx| {
            let usage = self.usage_in(tx, space, &action)?;
            let old = self.value_length(tx, space, key, &action)?;
            let after = match usage.after_set(key, old, value.len() as u64, limits) {
                Ok(after) => after,
                Err(over) => return Ok(Decision::Leave(KvWrite::OverQuota(over))),
            };
            tx.prepare_cached(KV_SET)
                .and_then(|mut st| {
                    st.execute(params![space.scope, space.namespace, key, value, now])
                })
                .map_err(|e| self.sq(e, &action))?;
            self.set_usage(tx, space, after, &action)?;
            Ok(Decision::Commit(KvWrite::Written))
        })
        .await
    }

    pub async fn kv_delete(&self, space: KvSpace<'_>, key: &str) -> Result<(), StoreError> {
        let action = kv_action("deleting", space, key);
        self.transaction(&action, |tx| {
            let Some(old) = self.value_length(tx, space, key, &action)? else {
                return Ok(Decision::Leave(()));
            };
            tx.prepare_cached(KV_DELETE)
                .and_then(|mut st| st.execute(params![space.scope, space.namespace, key]))
                .map_err(|e| self.sq(e, &action))?;
            let usage = self.usage_in(tx, space, &action)?;
            self.set_usage(tx, space, usage.after_delete(key, old), &action)?;
            Ok(Decision::Commit(()))
        })
        .await
    }

    pub async fn kv_adopt(&self, space: KvSpace<'_>) -> Result<u64, StoreError> {
        let action = format!(
            "giving the kv rows written before scoping to namespace {}",
            describe(space)
        );
        self.transaction(&action, |tx| {
            let count = |scope: &str| {
                tx.prepare_cached(KV_ANY)
                    .and_then(|mut st| {
                        st.query_row(params![scope, space.namespace], |row| row.get::<_, i64>(0))
                    })
                    .map_err(|e| self.sq(e, &action))
            };
            if count(space.scope)? > 0 || count(crate::kv::UNSCOPED)? == 0 {
                return Ok(Decision::Leave(0));
            }
            let moved = tx
                .prepare_cached(KV_ADOPT)
                .and_then(|mut st| st.execute(params![space.scope, space.namespace]))
                .map_err(|e| self.sq(e, &action))?;
            tx.prepare_cached(KV_DROP_UNSCOPED_USAGE)
                .and_then(|mut st| st.execute(params![space.namespace]))
                .map_err(|e| self.sq(e, &action))?;
            let usage = tx
                .prepare_cached(KV_COUNT_USAGE)
                .and_then(|mut st| {
                    st.query_row(params![space.scope, space.namespace], |row| {
                        Ok(KvUsage {
                            keys: row.get::<_, i64>(0)? as u64,
                            bytes: row.get::<_, i64>(1)? as u64,
                        })
                    })
                })
                .map_err(|e| self.sq(e, &action))?;
            self.set_usage(tx, space, usage, &action)?;
            Ok(Decision::Commit(moved as u64))
        })
        .await
    }
}
