//! The store's integration tests: the suite that runs on both backends
//! (SQLite files and real Postgres servers), and what only SQLite has.

mod backends;
mod sqlite;
