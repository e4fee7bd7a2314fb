//! Postgres: the one way a write transaction is opened here, so that every
//! way out of it ends it at once (the rule is `refusal.rs`'s: a refusal
//! rolls its transaction back before it is returned).
//!
//! A dropped `sqlx::Transaction` is rolled back only when its connection is
//! next used: until then whatever it locked stays locked (a run's row read
//! `FOR UPDATE`, a kv namespace's usage row), and a claim, which skips
//! locked rows, passes over a run it may take. [`PgStore::transaction`]
//! runs `work` on the transaction's connection and, whatever `work`
//! returns, a refusal, a database error or a [`Decision`], commits or rolls
//! back before it returns. Must not: be bypassed (a unit test below fails
//! on a `begin()` anywhere else in `postgres/` but the migrations).

use sqlx::{Postgres, Transaction};

use super::PgStore;
use super::pooler::{Conn, Pooling};
use crate::codec::Codec;
use crate::error::StoreError;
use crate::refusal::Decision;

impl PgStore {
    /// Runs `work` in a transaction of its own: COMMIT after
    /// [`Decision::Commit`], ROLLBACK after [`Decision::Leave`] or an
    /// error, in both cases before returning.
    pub(super) async fn transaction<T>(
        &self,
        action: &str,
        work: impl AsyncFnOnce(&mut Conn) -> Result<Decision<T>, StoreError>,
    ) -> Result<T, StoreError> {
        let tx = match self.pooling {
            Pooling::Direct => self.pool.begin().await,
            Pooling::Transaction => self.pool.begin_with(self.begin).await,
        };
        let mut conn = Conn {
            tx: tx.map_err(|e| self.error(e, action))?,
            unnamed: self.pooling == Pooling::Transaction,
        };
        match work(&mut conn).await {
            Ok(Decision::Commit(value)) => {
                conn.tx.commit().await.map_err(|e| self.error(e, action))?;
                Ok(value)
            }
            Ok(Decision::Leave(value)) => {
                end(conn.tx).await;
                Ok(value)
            }
            Err(refused) => {
                end(conn.tx).await;
                Err(refused)
            }
        }
    }
}

/// Rolls back a transaction, releasing its locks now. A failed rollback
/// leaves nothing to undo: the connection is closed and the server ends its
/// transaction.
async fn end(tx: Transaction<'_, Postgres>) {
    let _ = tx.rollback().await;
}

#[cfg(test)]
mod tests {
    /// Every transaction of the Postgres backend goes through
    /// `PgStore::transaction` (the migrations, which run before the store
    /// exists, and the one-statement transactions of `pooler.rs` excepted).
    #[test]
    fn no_transaction_is_opened_beside_the_wrapper() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/postgres");
        let mut offenders = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            // pooler.rs: behind a transaction-pooling PgBouncer, a statement
            // the store runs without a transaction gets one of its own,
            // ended before its answer is returned (`pooler::finish`).
            if name == "tx.rs" || name == "migrate.rs" || name == "pooler.rs" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            if text.contains(".begin()") || text.contains("Transaction<") {
                offenders.push(name);
            }
        }
        assert!(
            offenders.is_empty(),
            "open transactions through PgStore::transaction (postgres/tx.rs): {offenders:?}"
        );
    }
}
