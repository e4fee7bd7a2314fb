//! The `kv` capability's data as the store keeps it: one row per key of a
//! namespace, and one usage row per namespace (its keys, and the bytes of
//! its keys and values), written by a skill's `set` and `delete` (each its
//! own transaction, outside any run's checkpoint: kv is the outside world a
//! run's journal records, see `docs/replay.md`), read by any run on any
//! process or worker of the store.
//!
//! A namespace is a scope and a name ([`KvSpace`]): `scenario:NAME` for a
//! scenario's own namespaces, `shared` for those shared on purpose, and the
//! empty scope for namespaces outside any scenario and for every row
//! written before namespaces were scoped (schema version 12). Those older
//! rows are *adopted*: the first scenario that uses a namespace of their
//! name after the upgrade, while its own namespace of that name is still
//! empty, takes them ([`Store::kv_adopt`](crate::Store::kv_adopt)), so the
//! scenario that wrote them keeps them unless another used the name first.
//!
//! Quotas are checked here, in the write's transaction, against the usage
//! row (locked on Postgres, under SQLite's write lock there), so writers on
//! many processes cannot together pass them. The rule is [`KvUsage::after_set`].
//!
//! Must not: check grants, key or value sizes (the `kv` capability does,
//! before a call reaches the store), or know about runs.

/// A namespace: its scope and its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvSpace<'a> {
    pub scope: &'a str,
    pub namespace: &'a str,
}

/// How much a namespace may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvLimits {
    pub max_keys: u64,
    pub max_bytes: u64,
}

/// What a namespace holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KvUsage {
    pub keys: u64,
    /// Bytes of its keys (UTF-8) and values.
    pub bytes: u64,
}

/// What a `set` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvWrite {
    Written,
    /// Refused, nothing written: the namespace would have held this much.
    OverQuota(KvUsage),
}

impl KvUsage {
    /// The usage after `key`, holding a value of `old` bytes (if any), is
    /// set to one of `new` bytes; `Err` with it when that passes `limits`.
    /// A write that does not grow the namespace is always allowed, so one
    /// over a lowered quota can still shrink.
    pub fn after_set(
        self,
        key: &str,
        old: Option<u64>,
        new: u64,
        limits: KvLimits,
    ) -> Result<KvUsage, KvUsage> {
        let key_bytes = key.len() as u64;
        let after = KvUsage {
            keys: self.keys + u64::from(old.is_none()),
            bytes: (self.bytes + key_bytes + new).saturating_sub(old.map_or(0, |o| key_bytes + o)),
        };
        let grows = after.keys > self.keys || after.bytes > self.bytes;
        if grows && (after.keys > limits.max_keys || after.bytes > limits.max_bytes) {
            Err(after)
        } else {
            Ok(after)
        }
    }

    /// The usage after `key`, holding a value of `old` bytes, is deleted.
    pub fn after_delete(self, key: &str, old: u64) -> KvUsage {
        KvUsage {
            keys: self.keys.saturating_sub(1),
            bytes: self.bytes.saturating_sub(key.len() as u64 + old),
        }
    }
}

/// The scope of rows written before namespaces were scoped.
pub(crate) const UNSCOPED: &str = "";

/// Sets a key, replacing its value. The same statement on both backends
/// (SQLite binds `$n` by position).
pub(crate) const KV_SET: &str = "INSERT INTO kv (scope, namespace, key, value, updated_at) \
     VALUES ($1, $2, $3, $4, $5) \
     ON CONFLICT (scope, namespace, key) DO UPDATE SET value = excluded.value, \
     updated_at = excluded.updated_at";

pub(crate) const KV_DELETE: &str =
    "DELETE FROM kv WHERE scope = $1 AND namespace = $2 AND key = $3";

/// The length in bytes of a key's value (`length` of a BLOB or `bytea`).
pub(crate) const KV_VALUE_LENGTH: &str =
    "SELECT length(value) FROM kv WHERE scope = $1 AND namespace = $2 AND key = $3";

pub(crate) const KV_USAGE: &str =
    "SELECT keys, bytes FROM kv_usage WHERE scope = $1 AND namespace = $2";

pub(crate) const KV_SET_USAGE: &str = "INSERT INTO kv_usage (scope, namespace, keys, bytes) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (scope, namespace) DO UPDATE SET keys = excluded.keys, bytes = excluded.bytes";

/// Whether namespace ($1, $2) holds a key.
pub(crate) const KV_ANY: &str =
    "SELECT count(*) FROM (SELECT 1 FROM kv WHERE scope = $1 AND namespace = $2 LIMIT 1) AS one";

/// Moves the unscoped rows of namespace $2 into scope $1.
pub(crate) const KV_ADOPT: &str = "UPDATE kv SET scope = $1 WHERE scope = '' AND namespace = $2";

pub(crate) const KV_DROP_UNSCOPED_USAGE: &str =
    "DELETE FROM kv_usage WHERE scope = '' AND namespace = $1";

/// What a kv statement was doing, for its error.
pub(crate) fn kv_action(doing: &str, space: KvSpace<'_>, key: &str) -> String {
    format!("{doing} key `{key}` of kv namespace {}", describe(space))
}

/// A namespace for messages.
pub(crate) fn describe(space: KvSpace<'_>) -> String {
    match space.scope.strip_prefix("scenario:") {
        Some(owner) => format!("`{}` of scenario `{owner}`", space.namespace),
        None if space.scope.is_empty() => format!("`{}`", space.namespace),
        None => format!("`{}` ({})", space.namespace, space.scope),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: KvLimits = KvLimits {
        max_keys: 2,
        max_bytes: 20,
    };

    #[test]
    fn usage_counts_keys_and_bytes_and_allows_what_shrinks() {
        let empty = KvUsage::default();
        let one = empty.after_set("ab", None, 8, LIMITS).unwrap();
        assert_eq!(one, KvUsage { keys: 1, bytes: 10 });
        // Replacing a value changes the bytes only.
        let replaced = one.after_set("ab", Some(8), 3, LIMITS).unwrap();
        assert_eq!(replaced, KvUsage { keys: 1, bytes: 5 });
        let two = replaced.after_set("c", None, 1, LIMITS).unwrap();
        assert_eq!(
            two.after_set("d", None, 0, LIMITS),
            Err(KvUsage { keys: 3, bytes: 8 })
        );
        assert_eq!(
            two.after_set("c", Some(1), 20, LIMITS),
            Err(KvUsage { keys: 2, bytes: 26 })
        );
        // Over a quota that was lowered, a write that shrinks still works.
        let tight = KvLimits {
            max_keys: 1,
            max_bytes: 1,
        };
        assert_eq!(
            two.after_set("ab", Some(3), 0, tight),
            Ok(KvUsage { keys: 2, bytes: 4 })
        );
        assert_eq!(two.after_delete("c", 1), KvUsage { keys: 1, bytes: 5 });
    }
}
