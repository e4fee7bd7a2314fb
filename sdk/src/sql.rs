//! Read-only SQL over the SQLite database file the scenario grants
//! (`sql = "FILE"`). One statement per query, parameters bound (`?1`, `?2`…
//! or `?`), at most 1000 rows, 1 MiB of values and 5 seconds a query; the
//! host refuses anything but reading (`not-allowed`) and records every
//! answer in the run's journal, so a replay never reads the database again.
//!
//! On native targets there is no database: a test installs a handler with
//! [`crate::testing::set_sql_handler`]; without one, `query` returns
//! `capability-not-granted`.

use crate::SkillError;
pub use crate::bindings::skillhost::skill::sql::{QueryResult, Value};

/// Runs `statement` with `params` bound to its parameters.
pub fn query(statement: &str, params: &[Value]) -> Result<QueryResult, SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::sql::query(statement, params);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::sql_query(statement, params);
}
