//! Postgres: how migrations read and write a database (the steps and checks
//! are `store::migrate`'s). Concurrent openers of one database wait for
//! each other on an advisory lock held by the migrating transaction.

use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor};

use crate::error::StoreError;
use crate::migrate::{self, META_TABLE, SCHEMA_VERSION, failed, migration_connection};

/// Serialises concurrent migrations of one database (`pg_advisory_xact_lock`).
const MIGRATION_LOCK: i64 = 0x736b_696c_6c68_6f73; // "skillhos"

migration_connection!(
    PgConnection,
    // Those of the current schema: tables, views, materialized views and
    // foreign tables, partitioned ones included.
    tables: "SELECT c.relname::text FROM pg_catalog.pg_class AS c \
             JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f') \
             ORDER BY 1",
    meta: format!("SELECT key::text, value::text FROM {META_TABLE} WHERE key::text IN ($1, $2)"),
);

/// Refuses a foreign or newer database before writing anything, then
/// applies pending migrations in one transaction under an advisory lock,
/// re-checking what the database holds once the lock is held.
pub(super) async fn migrate(conn: &mut PgConnection, db: &str) -> Result<(), StoreError> {
    if migrate::current_version(conn, db).await? == SCHEMA_VERSION {
        return Ok(());
    }
    let mut tx = conn
        .begin()
        .await
        .map_err(|e| failed(db, e, "starting the migration".into()))?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *tx)
        .await
        .map_err(|e| failed(db, e, "waiting for other migrations".into()))?;
    migrate::apply_pending(&mut *tx, migrate::POSTGRES, db).await?;
    tx.commit()
        .await
        .map_err(|e| failed(db, e, "committing the migration".into()))
}

/// Migrations behind a transaction-pooling PgBouncer: the migration's
/// statements are prepared (named) on their own connection, so they run in
/// one transaction, which keeps one server connection, between two
/// `DEALLOCATE ALL`s, so that they neither meet another client's statements
/// nor leave theirs to the next client. The connection is closed after.
pub(super) async fn migrate_pooled(conn: &mut PgConnection, db: &str) -> Result<(), StoreError> {
    let failed = |e, what: &str| failed(db, e, what.into());
    let mut tx = conn
        .begin()
        .await
        .map_err(|e| failed(e, "starting the migration"))?;
    tx.execute("DEALLOCATE ALL")
        .await
        .map_err(|e| failed(e, "clearing prepared statements"))?;
    migrate(&mut tx, db).await?;
    tx.execute("DEALLOCATE ALL")
        .await
        .map_err(|e| failed(e, "clearing prepared statements"))?;
    tx.commit()
        .await
        .map_err(|e| failed(e, "committing the migration"))
}
