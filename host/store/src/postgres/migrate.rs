//! Postgres: how migrations read and write a database (the steps and checks
//! are `store::migrate`'s). Concurrent openers of one database wait for
//! each other on an advisory lock held by the migrating transaction.

use sqlx::postgres::PgConnection;
use sqlx::{Connection, Executor};

use crate::error::StoreError;
use crate::migrate::{
    self, MARKER_KEY, META_TABLE, MigrationConnection, RECORD_VERSION, SCHEMA_VERSION, VERSION_KEY,
    failed,
};

/// Serialises concurrent migrations of one database (`pg_advisory_xact_lock`).
const MIGRATION_LOCK: i64 = 0x736b_696c_6c68_6f73; // "skillhos"

impl MigrationConnection for PgConnection {
    /// Those of the current schema: tables, views, materialized views and
    /// foreign tables, partitioned ones included.
    async fn tables(&mut self) -> Result<Vec<String>, sqlx::Error> {
        sqlx::query_scalar(
            "SELECT c.relname::text FROM pg_catalog.pg_class AS c \
             JOIN pg_catalog.pg_namespace AS n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v', 'm', 'f') \
             ORDER BY 1",
        )
        .fetch_all(self)
        .await
    }

    async fn meta(&mut self) -> Result<Vec<(String, String)>, sqlx::Error> {
        sqlx::query_as(&format!(
            "SELECT key::text, value::text FROM {META_TABLE} WHERE key::text IN ($1, $2)"
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
