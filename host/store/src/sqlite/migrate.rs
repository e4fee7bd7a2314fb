//! SQLite: how migrations read and write a database file (the steps and
//! checks are `store::migrate`'s). The migrating transaction starts with
//! `BEGIN IMMEDIATE`: it holds the write lock from its first read, so two
//! processes opening a new file migrate it one after the other.

use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;

use crate::error::StoreError;
use crate::migrate::{self, META_TABLE, SCHEMA_VERSION, failed, migration_connection};

migration_connection!(
    SqliteConnection,
    // Every table and view but SQLite's own (`sqlite_…`).
    tables: "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             AND type IN ('table', 'view') ORDER BY name",
    meta: format!("SELECT key, value FROM {META_TABLE} WHERE key IN ($1, $2)"),
);

/// Applies pending migrations in one write transaction, re-checking what the
/// database holds under the write lock (another process may have opened it
/// since the first look).
pub(super) async fn migrate(conn: &mut SqliteConnection, db: &str) -> Result<(), StoreError> {
    if migrate::current_version(conn, db).await? == SCHEMA_VERSION {
        return Ok(());
    }
    let mut tx = conn
        .begin_with("BEGIN IMMEDIATE")
        .await
        .map_err(|e| failed(db, e, "starting the migration".into()))?;
    migrate::apply_pending(&mut *tx, migrate::SQLITE, db).await?;
    tx.commit()
        .await
        .map_err(|e| failed(db, e, "committing the migration".into()))
}
