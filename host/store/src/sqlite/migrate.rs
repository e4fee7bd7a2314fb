//! SQLite: how migrations read and write a database file (the steps and
//! checks are `store::migrate`'s). The migrating transaction starts with
//! `BEGIN IMMEDIATE`: it holds the write lock from its first read, so two
//! processes opening a new file migrate it one after the other.

use sqlx::sqlite::SqliteConnection;
use sqlx::{Connection, Executor};

use crate::error::StoreError;
use crate::migrate::{
    self, MARKER_KEY, META_TABLE, MigrationConnection, RECORD_VERSION, SCHEMA_VERSION, VERSION_KEY,
    failed,
};

impl MigrationConnection for SqliteConnection {
    /// Every table and view but SQLite's own (`sqlite_…`).
    async fn tables(&mut self) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE name NOT LIKE 'sqlite\\_%' ESCAPE '\\' \
             AND type IN ('table', 'view') ORDER BY name",
        )
        .fetch_all(self)
        .await
    }

    async fn meta(&mut self) -> Result<Vec<(String, String)>, sqlx::Error> {
        sqlx::query_as(&format!(
            "SELECT key, value FROM {META_TABLE} WHERE key IN ($1, $2)"
        ))
        .bind(MARKER_KEY)
        .bind(VERSION_KEY)
        .fetch_all(self)
        .await
    }

    async fn run_script(&mut self, sql: &'static str) -> Result<(), sqlx::Error> {
        // Through `Executor` (a boxed future): `RawSql::execute`'s own
        // future does not prove `Send` for every lifetime.
        self.execute(sqlx::raw_sql(sql)).await.map(drop)
    }

    async fn record_version(&mut self, version: u32) -> Result<(), sqlx::Error> {
        sqlx::query(&RECORD_VERSION)
            .bind(VERSION_KEY)
            .bind(version.to_string())
            .execute(self)
            .await
            .map(drop)
    }
}

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
