//! The `kv` capability's data as the store keeps it: one row per key of a
//! namespace, written by a skill's `set` and `delete` (each its own
//! transaction, outside any run's checkpoint: kv is the outside world a
//! run's journal records, see `docs/replay.md`), read by any run on any
//! process or worker of the store.
//!
//! Must not: check grants, key or value sizes (the `kv` capability does,
//! before a call reaches the store), or know about runs.

/// Sets a key, replacing its value. The same statement on both backends
/// (SQLite binds `$n` by position).
pub(crate) const KV_SET: &str = "INSERT INTO kv (namespace, key, value, updated_at) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (namespace, key) DO UPDATE SET value = excluded.value, \
     updated_at = excluded.updated_at";

pub(crate) const KV_DELETE: &str = "DELETE FROM kv WHERE namespace = $1 AND key = $2";

/// What a kv statement was doing, for its error.
pub(crate) fn kv_action(doing: &str, namespace: &str, key: &str) -> String {
    format!("{doing} key `{key}` of kv namespace `{namespace}`")
}
