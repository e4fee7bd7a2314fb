//! Schema migrations: numbered SQL files per backend, embedded in the binary
//! and applied on open, plus the rules for which databases we may touch.
//!
//! `skillhost_meta` (created by migration 1) holds the marker
//! (`application = skillhost`) and `schema_version`. A database with tables
//! but no marker is someone else's and is refused before anything is
//! written; one whose version is newer than [`SCHEMA_VERSION`] was written by
//! a newer host and is refused too. Backends supply the SQL dialect (how
//! to list tables and read the marker, how to take the migration lock); the
//! decisions, and the order of the steps, are made here so every backend
//! makes the same ones ([`inspect`], [`current_version`], [`apply_pending`]).

use std::future::Future;
use std::sync::LazyLock;

use super::error::{DatabaseFailure, StoreError};

/// One numbered migration.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Migration {
    pub version: u32,
    pub name: &'static str,
    pub sql: &'static str,
}

/// The SQLite migrations, in order. File `NNNN_name.sql` is version NNNN.
pub(crate) const SQLITE: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../migrations/sqlite/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "leases_queue",
        sql: include_str!("../migrations/sqlite/0002_leases_queue.sql"),
    },
    Migration {
        version: 3,
        name: "run_updates_in_place",
        sql: include_str!("../migrations/sqlite/0003_run_updates_in_place.sql"),
    },
    Migration {
        version: 4,
        name: "explicit_task_rows",
        sql: include_str!("../migrations/sqlite/0004_explicit_task_rows.sql"),
    },
    Migration {
        version: 5,
        name: "row_digests",
        sql: include_str!("../migrations/sqlite/0005_row_digests.sql"),
    },
    Migration {
        version: 6,
        name: "replayable_journal",
        sql: include_str!("../migrations/sqlite/0006_replayable_journal.sql"),
    },
    Migration {
        version: 7,
        name: "node_cache",
        sql: include_str!("../migrations/sqlite/0007_node_cache.sql"),
    },
    Migration {
        version: 8,
        name: "subgraph_runs",
        sql: include_str!("../migrations/sqlite/0008_subgraph_runs.sql"),
    },
    Migration {
        version: 9,
        name: "queue_flow_control",
        sql: include_str!("../migrations/sqlite/0009_queue_flow_control.sql"),
    },
    Migration {
        version: 10,
        name: "approvals_cancel",
        sql: include_str!("../migrations/sqlite/0010_approvals_cancel.sql"),
    },
    Migration {
        version: 11,
        name: "kv",
        sql: include_str!("../migrations/sqlite/0011_kv.sql"),
    },
    Migration {
        version: 12,
        name: "kv_scopes",
        sql: include_str!("../migrations/sqlite/0012_kv_scopes.sql"),
    },
    Migration {
        version: 13,
        name: "steps_by_run",
        sql: include_str!("../migrations/sqlite/0013_steps_by_run.sql"),
    },
];

/// The Postgres migrations: the same versions and names as [`SQLITE`], in
/// Postgres SQL.
pub(crate) const POSTGRES: &[Migration] = &[
    Migration {
        version: 1,
        name: "init",
        sql: include_str!("../migrations/postgres/0001_init.sql"),
    },
    Migration {
        version: 2,
        name: "leases_queue",
        sql: include_str!("../migrations/postgres/0002_leases_queue.sql"),
    },
    Migration {
        version: 3,
        name: "run_updates_in_place",
        sql: include_str!("../migrations/postgres/0003_run_updates_in_place.sql"),
    },
    Migration {
        version: 4,
        name: "explicit_task_rows",
        sql: include_str!("../migrations/postgres/0004_explicit_task_rows.sql"),
    },
    Migration {
        version: 5,
        name: "row_digests",
        sql: include_str!("../migrations/postgres/0005_row_digests.sql"),
    },
    Migration {
        version: 6,
        name: "replayable_journal",
        sql: include_str!("../migrations/postgres/0006_replayable_journal.sql"),
    },
    Migration {
        version: 7,
        name: "node_cache",
        sql: include_str!("../migrations/postgres/0007_node_cache.sql"),
    },
    Migration {
        version: 8,
        name: "subgraph_runs",
        sql: include_str!("../migrations/postgres/0008_subgraph_runs.sql"),
    },
    Migration {
        version: 9,
        name: "queue_flow_control",
        sql: include_str!("../migrations/postgres/0009_queue_flow_control.sql"),
    },
    Migration {
        version: 10,
        name: "approvals_cancel",
        sql: include_str!("../migrations/postgres/0010_approvals_cancel.sql"),
    },
    Migration {
        version: 11,
        name: "kv",
        sql: include_str!("../migrations/postgres/0011_kv.sql"),
    },
    Migration {
        version: 12,
        name: "kv_scopes",
        sql: include_str!("../migrations/postgres/0012_kv_scopes.sql"),
    },
    Migration {
        version: 13,
        name: "steps_by_run",
        sql: include_str!("../migrations/postgres/0013_steps_by_run.sql"),
    },
];

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: u32 = 13;

/// The table that marks a database as ours.
pub(crate) const META_TABLE: &str = "skillhost_meta";
/// `skillhost_meta` key and value of the marker.
pub(crate) const MARKER_KEY: &str = "application";
pub(crate) const MARKER_VALUE: &str = "skillhost";
pub(crate) const VERSION_KEY: &str = "schema_version";

/// What an existing database holds, as read before writing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    /// No tables at all: ours to initialise.
    Empty,
    /// Tables but no (or a wrong) marker. The string says what was seen.
    Foreign(String),
    /// A Skillhost store at this schema version.
    Ours(u32),
}

impl Found {
    /// Reads the verdict from the database's table names and, when there is a
    /// meta table, its marker and version values.
    pub fn classify(tables: &[String], marker: Option<&str>, version: Option<&str>) -> Found {
        if tables.is_empty() {
            return Found::Empty;
        }
        if !tables.iter().any(|t| t == META_TABLE) {
            return Found::Foreign(format!("it has tables {}", list(tables)));
        }
        if marker != Some(MARKER_VALUE) {
            return Found::Foreign(format!(
                "it has a {META_TABLE} table but no `{MARKER_KEY} = {MARKER_VALUE}` marker"
            ));
        }
        match version.and_then(|v| v.parse::<u32>().ok()) {
            Some(version) => Found::Ours(version),
            None => Found::Foreign(format!(
                "its {META_TABLE} has no readable {VERSION_KEY} ({version:?})"
            )),
        }
    }

    /// The schema version to migrate from, or the refusal.
    pub fn current_version(&self, db: &str) -> Result<u32, StoreError> {
        match self {
            Found::Empty => Ok(0),
            Found::Foreign(found) => Err(StoreError::NotOurs {
                db: db.to_owned(),
                found: found.clone(),
            }),
            Found::Ours(version) if *version > SCHEMA_VERSION => Err(StoreError::TooNew {
                db: db.to_owned(),
                found: *version,
                supported: SCHEMA_VERSION,
            }),
            Found::Ours(version) => Ok(*version),
        }
    }
}

/// A connection (or a transaction on one) of a backend, as migrations use
/// it: two reads that say what the database holds, and the two writes of a
/// migration step.
pub(crate) trait MigrationConnection: Send {
    /// The tables (and views) of the schema the store works in.
    fn tables(&mut self) -> impl Future<Output = Result<Vec<String>, sqlx::Error>> + Send;

    /// The [`MARKER_KEY`] and [`VERSION_KEY`] rows of [`META_TABLE`], as
    /// (key, value); fails if that table does not have our columns.
    fn meta(&mut self) -> impl Future<Output = Result<Vec<(String, String)>, sqlx::Error>> + Send;

    /// Runs a migration's SQL.
    fn run_script(
        &mut self,
        sql: &'static str,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;

    /// Records `version` as the schema version.
    fn record_version(
        &mut self,
        version: u32,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send;
}

/// Implements [`MigrationConnection`] for a backend's connection type from
/// its dialect: `tables`, the statement listing the schema's tables, and
/// `meta`, the one reading key and value of the [`MARKER_KEY`] ($1) and
/// [`VERSION_KEY`] ($2) rows. Running a script and recording the version
/// are the same on both backends. (Scripts go through `Executor::execute`,
/// whose future is boxed: `RawSql::execute`'s own does not prove `Send`
/// for every lifetime.)
macro_rules! migration_connection {
    ($connection:ty, tables: $tables:expr, meta: $meta:expr $(,)?) => {
        impl $crate::migrate::MigrationConnection for $connection {
            async fn tables(&mut self) -> Result<Vec<String>, sqlx::Error> {
                sqlx::query_scalar($tables).fetch_all(self).await
            }

            async fn meta(&mut self) -> Result<Vec<(String, String)>, sqlx::Error> {
                let sql: String = $meta;
                sqlx::query_as(&sql)
                    .bind($crate::migrate::MARKER_KEY)
                    .bind($crate::migrate::VERSION_KEY)
                    .fetch_all(self)
                    .await
            }

            async fn run_script(&mut self, sql: &'static str) -> Result<(), sqlx::Error> {
                sqlx::Executor::execute(self, sqlx::raw_sql(sql))
                    .await
                    .map(drop)
            }

            async fn record_version(&mut self, version: u32) -> Result<(), sqlx::Error> {
                sqlx::query(&$crate::migrate::RECORD_VERSION)
                    .bind($crate::migrate::VERSION_KEY)
                    .bind(version.to_string())
                    .execute(self)
                    .await
                    .map(drop)
            }
        }
    };
}
pub(crate) use migration_connection;

/// Sets the schema version ($1 [`VERSION_KEY`], $2 the version), in the
/// SQL both backends read.
pub(crate) static RECORD_VERSION: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO {META_TABLE} (key, value) VALUES ($1, $2) \
         ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    )
});

/// What the database holds, read without writing.
pub(crate) async fn inspect(conn: &mut impl MigrationConnection) -> Result<Found, sqlx::Error> {
    let tables = conn.tables().await?;
    if !tables.iter().any(|t| t == META_TABLE) {
        return Ok(Found::classify(&tables, None, None));
    }
    // A foreign table that happens to have our table's name may lack our
    // columns; that makes it foreign, not an error.
    let Ok(meta) = conn.meta().await else {
        return Ok(Found::Foreign(format!(
            "it has a {META_TABLE} table that is not Skillhost's"
        )));
    };
    let value = |key: &str| meta.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    Ok(Found::classify(
        &tables,
        value(MARKER_KEY),
        value(VERSION_KEY),
    ))
}

/// The schema version to migrate from, read without writing; refuses a
/// database that is not ours or is newer.
pub(crate) async fn current_version(
    conn: &mut impl MigrationConnection,
    db: &str,
) -> Result<u32, StoreError> {
    inspect(conn)
        .await
        .map_err(|e| failed(db, e, "reading the schema version".into()))?
        .current_version(db)
}

/// Applies the migrations after the current version, in order, on `conn`:
/// a transaction that holds the backend's migration lock, so the version is
/// read again here (another process may have migrated since the first
/// look).
pub(crate) async fn apply_pending(
    conn: &mut impl MigrationConnection,
    migrations: &[Migration],
    db: &str,
) -> Result<(), StoreError> {
    let current = current_version(conn, db).await?;
    for migration in migrations.iter().filter(|m| m.version > current) {
        let action = || {
            format!(
                "applying migration {:04}_{}",
                migration.version, migration.name
            )
        };
        conn.run_script(migration.sql)
            .await
            .map_err(|e| failed(db, e, action()))?;
        conn.record_version(migration.version)
            .await
            .map_err(|e| failed(db, e, action()))?;
    }
    Ok(())
}

/// A migration statement failed while `action`.
pub(crate) fn failed(db: &str, source: sqlx::Error, action: String) -> StoreError {
    StoreError::Database {
        db: db.to_owned(),
        action,
        source: DatabaseFailure::from_sqlx(source),
    }
}

fn list(tables: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut shown = tables
        .iter()
        .take(SHOWN)
        .map(|t| format!("`{t}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if tables.len() > SHOWN {
        shown.push_str(&format!(" and {} more", tables.len() - SHOWN));
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_in_order_and_end_at_the_schema_version() {
        for migrations in [SQLITE, POSTGRES] {
            for (i, migration) in migrations.iter().enumerate() {
                assert_eq!(migration.version as usize, i + 1, "{}", migration.name);
            }
            assert_eq!(migrations.last().unwrap().version, SCHEMA_VERSION);
        }
        // Both backends step through the same versions.
        let names = |m: &[Migration]| m.iter().map(|m| (m.version, m.name)).collect::<Vec<_>>();
        assert_eq!(names(SQLITE), names(POSTGRES));
    }

    #[test]
    fn every_migration_file_is_embedded() {
        for (folder, migrations) in [("sqlite", SQLITE), ("postgres", POSTGRES)] {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(folder);
            let mut files: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .filter(|name| name.ends_with(".sql"))
                .collect();
            files.sort();
            let embedded: Vec<String> = migrations
                .iter()
                .map(|m| format!("{:04}_{}.sql", m.version, m.name))
                .collect();
            assert_eq!(files, embedded, "{folder}");
        }
    }

    #[test]
    fn classifies_what_it_finds() {
        let tables = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(Found::classify(&[], None, None), Found::Empty);
        assert!(matches!(
            Found::classify(&tables(&["notes"]), None, None),
            Found::Foreign(_)
        ));
        assert!(matches!(
            Found::classify(&tables(&[META_TABLE]), Some("other"), Some("1")),
            Found::Foreign(_)
        ));
        assert_eq!(
            Found::classify(
                &tables(&[META_TABLE, "runs"]),
                Some(MARKER_VALUE),
                Some("1")
            ),
            Found::Ours(1)
        );
        let too_new = Found::Ours(SCHEMA_VERSION + 1)
            .current_version("db")
            .unwrap_err();
        assert!(too_new.to_string().contains("upgrade host"), "{too_new}");
    }
}
