//! The `sql` capability: read-only queries over one SQLite database file.
//!
//! The grant names the file (`sql = "data/penguins.db"`); it must exist and
//! start with SQLite's header, checked when the grant is parsed, so a missing
//! or foreign file fails before any skill runs. Each call opens the file on
//! its first query, read-only (`SQLITE_OPEN_READ_ONLY`, `query_only`), with an
//! authorizer that allows reading and nothing else: a write, `ATTACH`,
//! `DETACH`, a transaction, a pragma that changes something, DDL or
//! `load_extension` is refused with `not-allowed`, naming what the statement
//! would have done. A statement the authorizer lets through must also be a
//! query by its first word ([`QUERY_WORDS`]): `REINDEX` of a table without
//! an index, `VACUUM` (and `VACUUM INTO`, which writes a new file) reach
//! no authorizer code that says they write. One statement per query;
//! parameters are bound by SQLite, never written into the text.
//!
//! Every query is bounded, and passing a bound is an error, never a silent
//! truncation: at most [`MAX_ROWS`] rows, at most [`MAX_RESULT_BYTES`] of
//! values (and no more than the call's host-call budget has room for, as
//! the journal holds them), and at most [`QUERY_TIME`] of wall time or the
//! call's deadline, whichever comes first. The time bound is a progress
//! handler that checks the deadline every few thousand virtual-machine
//! instructions, so a runaway recursive CTE stops with `timeout`; wasmtime's
//! epoch interruption cannot reach host code, so this is the only thing that
//! stops it. One SQL function call runs without the progress handler, so
//! SQLite's own limits ([`connection_limits`]) keep each value, the
//! statement and its parts small: a `randomblob(999999999)`, a
//! `printf('%.*c', …)` or a `zeroblob` of a gigabyte fails at once with
//! `result-too-large` instead of allocating it. What else a query holds is
//! SQLite's page cache (its default 2 MB) and its sorter, which spills to
//! temporary files past that; `hard_heap_limit` is process-wide (the store
//! shares the library), so it is not used.
//!
//! Every query is journaled (its statement and parameters, and its result or
//! error): the database is outside the run, and may change between a run and
//! its replay, which answers from the journal and never opens the file. The
//! grant check comes first and depends on the call alone.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::types::{Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};
use wasmtime::component::Linker;

use super::bindings::skillhost::skill::sql::{self as wit, QueryResult, Value as WitValue};
use super::{
    Backends, Capability, Effects, GrantError, Grantable, Grants, GuestError, HasHostCall,
    HostCall, HostCapability, guest_error, text_of,
};
use crate::call::{CallOptions, CallState};
use crate::journal::{JournalValue, array_bytes, object_bytes, string_bytes};
use crate::limits::AnswerRoom;

/// The most rows one query may return.
pub const MAX_ROWS: usize = 1000;
/// The most bytes of values one query may return: text and blobs by their
/// length, numbers and nulls as 8 bytes, column names by their length.
pub const MAX_RESULT_BYTES: usize = 1 << 20;
/// The longest one query may run, if the call's deadline is not sooner.
pub const QUERY_TIME: Duration = Duration::from_secs(5);
/// How long before the call's deadline a query is stopped, at most (a
/// quarter of what is left, if less): time for the guest to get the error
/// and return it.
const DEADLINE_MARGIN: Duration = Duration::from_millis(100);
/// SQLite virtual-machine instructions between two looks at the clock.
const PROGRESS_OPS: i32 = 4096;
/// The longest string or blob a query may make (`SQLITE_LIMIT_LENGTH`; also
/// bounds each row SQLite builds to sort or group): room for any one value
/// of a result and its row.
pub const MAX_VALUE_BYTES: i32 = 2 * MAX_RESULT_BYTES as i32;
/// The longest statement (`SQLITE_LIMIT_SQL_LENGTH`).
pub const MAX_STATEMENT_BYTES: i32 = 100_000;
/// The most parameters a statement may take (`SQLITE_LIMIT_VARIABLE_NUMBER`).
const MAX_PARAMS: i32 = 999;

/// What a statement may start with: the words of a query. Everything else
/// is refused even when no authorizer code says it writes.
pub const QUERY_WORDS: [&str; 5] = ["SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"];

/// SQLite's limits on one read-only connection: values and rows near the
/// result's cap, a short statement, no attached database and no helper
/// threads for sorting.
fn connection_limits() -> [(rusqlite::limits::Limit, i32); 5] {
    use rusqlite::limits::Limit;
    [
        (Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES),
        (Limit::SQLITE_LIMIT_SQL_LENGTH, MAX_STATEMENT_BYTES),
        (Limit::SQLITE_LIMIT_VARIABLE_NUMBER, MAX_PARAMS),
        (Limit::SQLITE_LIMIT_ATTACHED, 0),
        (Limit::SQLITE_LIMIT_WORKER_THREADS, 0),
    ]
}

/// The first 16 bytes of every SQLite database file.
const SQLITE_HEADER: &[u8; 16] = b"SQLite format 3\0";

/// The database a skill may query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlGrant {
    /// Canonical path of the database file.
    pub path: PathBuf,
}

impl SqlGrant {
    /// Parses a grant: `value` must name an existing regular file that
    /// starts with SQLite's header. Paths in `/proc`, `/sys` and `/dev` are
    /// refused as for `fs`; where else a scenario may point the grant is the
    /// checker's policy, as for `fs`.
    pub fn parse(value: &str) -> Result<Self, GrantError> {
        if value.is_empty() {
            return Err(GrantError::new(
                "sql",
                "needs a SQLite database file, e.g. `sql = \"data/penguins.db\"`",
            ));
        }
        if let Some(reason) = super::fs::never_granted(Path::new(value)) {
            return Err(GrantError::new("sql", format!("`{value}` {reason}")));
        }
        let path = Path::new(value).canonicalize().map_err(|e| {
            GrantError::new(
                "sql",
                format!("cannot use database `{value}`: {e}; grant an existing SQLite file"),
            )
        })?;
        if let Some(reason) = super::fs::never_granted(&path) {
            return Err(GrantError::new(
                "sql",
                format!("`{value}` resolves to `{}`, which {reason}", path.display()),
            ));
        }
        if !path.is_file() {
            return Err(GrantError::new(
                "sql",
                format!("`{value}` is not a regular file; grant a SQLite database file"),
            ));
        }
        let mut header = [0u8; 16];
        let read = std::fs::File::open(&path).and_then(|mut file| {
            use std::io::Read as _;
            file.read(&mut header)
        });
        match read {
            Ok(16) if &header == SQLITE_HEADER => Ok(SqlGrant { path }),
            Ok(_) => Err(GrantError::new(
                "sql",
                format!(
                    "`{value}` is not a SQLite database (it does not start with \
                     `SQLite format 3`); grant a database file made by SQLite"
                ),
            )),
            Err(e) => Err(GrantError::new(
                "sql",
                format!("cannot read database `{value}`: {e}"),
            )),
        }
    }
}

pub(crate) struct Sql;

/// One call's `sql`: the granted database, if any, and its connection once
/// the call has made a query.
pub(crate) struct SqlCall {
    grant: Option<Arc<SqlGrant>>,
    connection: Option<ReadOnly>,
}

impl HostCapability for Sql {
    type Call = SqlCall;

    /// A query runs on the calling thread for up to its time bound.
    const BLOCKS: bool = true;
    const JOURNALED: bool = true;
    /// Reads a database file that ships with the scenario, like `fs`.
    const EFFECTS: Effects = Effects::NONE;
    const ASK_LESS: &'static str = "select fewer rows or columns";

    fn grant_schema() -> Value {
        json!({
            "type": "string",
            "description": "A SQLite database file, relative to the scenario file, queried read-only."
        })
    }

    /// The statement (`SELECT …`).
    fn describe_request(request: &Value) -> String {
        text_of(request, "statement")
    }

    /// The rows' count (`6 row(s)`).
    fn describe_answer(ok: &Value) -> String {
        format!(
            "{} row(s)",
            ok.get("rows").and_then(Value::as_array).map_or(0, Vec::len)
        )
    }

    fn new_call(_options: &CallOptions, grants: &Grants, _backends: &Backends) -> SqlCall {
        SqlCall {
            grant: grants.sql.clone(),
            connection: None,
        }
    }

    fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<CallState, HasHostCall<SqlCall>>(linker, |state| HostCall {
            cap: &mut state.capabilities.sql,
            scope: &mut state.scope,
        })
    }
}

impl Grantable for Sql {
    type Grant = SqlGrant;

    const EXAMPLE: &'static str = "\"data/analytics.db\"";
    const FLAG_VALUE: &'static str = "FILE (a SQLite database, read-only)";
    const NAMES_PATH: bool = true;

    fn path(grant: &SqlGrant) -> Option<&Path> {
        Some(&grant.path)
    }

    fn parse_grant(value: &str) -> Result<SqlGrant, GrantError> {
        SqlGrant::parse(value)
    }
}

/// A read-only connection and what its hooks share with the query running
/// on it.
struct ReadOnly {
    connection: Connection,
    /// What the authorizer refused last, for the error the guest gets.
    refused: Arc<Mutex<Option<String>>>,
    /// When the running query must stop; the progress handler reads it.
    deadline: Arc<Mutex<Instant>>,
}

impl ReadOnly {
    fn open(path: &Path) -> Result<Self, GuestError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW;
        let connection = Connection::open_with_flags(path, flags).map_err(|e| {
            guest_error(
                "sql-unavailable",
                format!("cannot open the granted database: {e}"),
            )
        })?;
        for (limit, value) in connection_limits() {
            connection.set_limit(limit, value);
        }
        // Set before the authorizer, which refuses every pragma that sets.
        connection
            .pragma_update(None, "query_only", true)
            .map_err(|e| guest_error("sql-unavailable", format!("cannot open read-only: {e}")))?;
        let refused = Arc::new(Mutex::new(None));
        let seen = refused.clone();
        connection.authorizer(Some(move |context: AuthContext<'_>| {
            match refusal(&context.action) {
                None => Authorization::Allow,
                Some(what) => {
                    if let Ok(mut slot) = seen.lock() {
                        slot.get_or_insert(what);
                    }
                    Authorization::Deny
                }
            }
        }));
        let deadline = Arc::new(Mutex::new(Instant::now()));
        let until = deadline.clone();
        connection.progress_handler(
            PROGRESS_OPS,
            Some(move || until.lock().map_or(true, |d| Instant::now() >= *d)),
        );
        Ok(ReadOnly {
            connection,
            refused,
            deadline,
        })
    }

    /// Runs one statement with `params`, stopping it at `deadline`, its
    /// result held within `room`.
    fn query(
        &self,
        statement: &str,
        params: &[WitValue],
        deadline: Instant,
        time_limit: Duration,
        room: AnswerRoom,
    ) -> Result<QueryResult, GuestError> {
        if let Ok(mut slot) = self.refused.lock() {
            *slot = None;
        }
        if let Ok(mut d) = self.deadline.lock() {
            *d = deadline;
        }
        let failed = |e: rusqlite::Error| self.error(e, time_limit);
        let mut batch = rusqlite::Batch::new(&self.connection, statement);
        let Some(mut prepared) = batch.next().map_err(failed)? else {
            return Err(guest_error("invalid-query", "the query holds no statement"));
        };
        // Whatever follows the first statement, but blanks and comments, is
        // a second one: refused whether or not it would prepare.
        if !matches!(batch.next(), Ok(None)) {
            if let Ok(mut slot) = self.refused.lock() {
                *slot = None;
            }
            return Err(guest_error(
                "invalid-query",
                "one statement per query: remove everything after the first `;`",
            ));
        }
        // The authorizer allows a pragma that only reads, but not one that
        // sets; a statement SQLite itself deems writing is refused too.
        if !prepared.readonly() {
            return Err(guest_error(
                "not-allowed",
                "`sql` is read-only: the statement would change the database",
            ));
        }
        if let Some(word) = not_a_query(statement) {
            return Err(guest_error(
                "not-allowed",
                format!(
                    "`sql` is read-only: a `{word}` statement is refused; a query starts with \
                     one of {}",
                    QUERY_WORDS.join(", ")
                ),
            ));
        }
        let columns: Vec<String> = prepared
            .column_names()
            .into_iter()
            .map(String::from)
            .collect();
        let mut bytes: usize = columns.iter().map(String::len).sum();
        // What the journal will hold of the result (`{"ok": {"columns": …,
        // "rows": …}}`), counted as it grows, so a result the call's budget
        // cannot hold stops before it is built.
        let mut held = 3 * object_bytes(2)
            + array_bytes(columns.len())
            + columns.iter().map(|c| string_bytes(c.len())).sum::<u64>();
        let bound: Vec<SqlValue> = params.iter().map(to_sql).collect();
        let mut rows_out = Vec::new();
        let mut rows = prepared
            .query(rusqlite::params_from_iter(bound.iter()))
            .map_err(failed)?;
        while let Some(row) = rows.next().map_err(failed)? {
            if rows_out.len() == MAX_ROWS {
                return Err(guest_error(
                    "too-many-rows",
                    format!(
                        "the query returns more than {MAX_ROWS} rows, the most one query may \
                         return; aggregate, filter, or add a LIMIT"
                    ),
                ));
            }
            let mut values = Vec::with_capacity(columns.len());
            held += 32 + array_bytes(columns.len());
            for index in 0..columns.len() {
                let value = row.get_ref(index).map_err(failed)?;
                bytes += value_bytes(&value);
                held += held_value_bytes(&value);
                if held > room.bytes {
                    return Err(room.refuse(Capability::Sql, None));
                }
                if bytes > MAX_RESULT_BYTES {
                    return Err(guest_error(
                        "result-too-large",
                        format!(
                            "the query returns more than {MAX_RESULT_BYTES} bytes of values, the \
                             most one query may return; select fewer or shorter columns, or fewer \
                             rows"
                        ),
                    ));
                }
                values.push(from_sql(value));
            }
            rows_out.push(values);
        }
        Ok(QueryResult {
            columns,
            rows: rows_out,
        })
    }

    /// The guest's error for a failed prepare or step.
    fn error(&self, e: rusqlite::Error, time_limit: Duration) -> GuestError {
        let refused = self.refused.lock().ok().and_then(|mut slot| slot.take());
        if let Some(what) = refused {
            return guest_error(
                "not-allowed",
                format!("`sql` is read-only: the statement is refused because it would {what}"),
            );
        }
        match &e {
            rusqlite::Error::SqliteFailure(code, _)
                if code.code == rusqlite::ErrorCode::OperationInterrupted =>
            {
                GuestError {
                    code: "timeout".into(),
                    message: format!(
                        "the query did not finish within {} ms (the per-query limit, or the \
                         node's deadline if sooner); a recursive query without a bound runs \
                         forever: add a LIMIT or a stopping condition",
                        time_limit.as_millis()
                    ),
                    retryable: false,
                }
            }
            rusqlite::Error::SqliteFailure(code, _) if code.code == rusqlite::ErrorCode::TooBig => {
                guest_error(
                    "result-too-large",
                    format!(
                        "the query makes a string or blob longer than {MAX_VALUE_BYTES} bytes, or \
                         a statement longer than {MAX_STATEMENT_BYTES}, the most `sql` allows \
                         (a result holds at most {MAX_RESULT_BYTES} bytes of values); make \
                         shorter values"
                    ),
                )
            }
            rusqlite::Error::InvalidParameterCount(given, wanted) => guest_error(
                "invalid-query",
                format!("the statement takes {wanted} parameter(s) but {given} were given"),
            ),
            // SQLite's own refusal of a function a view or trigger of the
            // file calls that only a statement may (`load_extension`).
            rusqlite::Error::SqliteFailure(_, Some(message))
                if message.starts_with("unsafe use of") =>
            {
                guest_error(
                    "not-allowed",
                    format!("`sql` is read-only: the statement is refused: SQLite: {message}"),
                )
            }
            rusqlite::Error::SqliteFailure(_, Some(message)) => {
                guest_error("invalid-query", format!("SQLite: {message}"))
            }
            other => guest_error("invalid-query", format!("SQLite: {other}")),
        }
    }
}

/// What a statement would do that `sql` does not allow, as words for the
/// error, or `None` when the action only reads.
fn refusal(action: &AuthAction<'_>) -> Option<String> {
    Some(match action {
        AuthAction::Select | AuthAction::Read { .. } | AuthAction::Recursive => return None,
        AuthAction::Function { function_name } => {
            if function_name.eq_ignore_ascii_case("load_extension") {
                "load an extension (`load_extension`)".into()
            } else {
                return None;
            }
        }
        // A pragma that describes the schema reads, whatever its argument
        // (a table or index name); a table-valued pragma function
        // (`pragma_table_info`) reaches here too.
        AuthAction::Pragma { pragma_name, .. }
            if READABLE_PRAGMAS.contains(&pragma_name.to_ascii_lowercase().as_str()) =>
        {
            return None;
        }
        AuthAction::Pragma { pragma_name, .. } => format!("run `PRAGMA {pragma_name}`"),
        // DDL reaches the authorizer first as a write of the schema table.
        AuthAction::Insert { table_name }
        | AuthAction::Update { table_name, .. }
        | AuthAction::Delete { table_name }
            if table_name.starts_with("sqlite_") =>
        {
            "change the schema (CREATE, DROP or ALTER)".into()
        }
        AuthAction::Insert { table_name } => format!("INSERT into `{table_name}`"),
        AuthAction::Update { table_name, .. } => format!("UPDATE `{table_name}`"),
        AuthAction::Delete { table_name } => format!("DELETE from `{table_name}`"),
        AuthAction::Attach { filename } => format!("ATTACH `{filename}`"),
        AuthAction::Detach { database_name } => format!("DETACH `{database_name}`"),
        AuthAction::Transaction { .. } | AuthAction::Savepoint { .. } => {
            "open or end a transaction".into()
        }
        AuthAction::CreateTable { .. }
        | AuthAction::CreateTempTable { .. }
        | AuthAction::CreateIndex { .. }
        | AuthAction::CreateTempIndex { .. }
        | AuthAction::CreateView { .. }
        | AuthAction::CreateTempView { .. }
        | AuthAction::CreateTrigger { .. }
        | AuthAction::CreateTempTrigger { .. }
        | AuthAction::CreateVtable { .. } => "change the schema (CREATE)".into(),
        AuthAction::DropTable { .. }
        | AuthAction::DropTempTable { .. }
        | AuthAction::DropIndex { .. }
        | AuthAction::DropTempIndex { .. }
        | AuthAction::DropView { .. }
        | AuthAction::DropTempView { .. }
        | AuthAction::DropTrigger { .. }
        | AuthAction::DropTempTrigger { .. }
        | AuthAction::DropVtable { .. } => "change the schema (DROP)".into(),
        AuthAction::AlterTable { table_name, .. } => format!("ALTER TABLE `{table_name}`"),
        AuthAction::Reindex { .. } => "REINDEX".into(),
        AuthAction::Analyze { .. } => "ANALYZE".into(),
        _ => "do something other than read".into(),
    })
}

/// Pragmas that only describe the schema; their argument names a table or
/// an index. Every other pragma is refused, read or not: most of them set
/// when given a value, and a skill needs none of them to query.
const READABLE_PRAGMAS: [&str; 7] = [
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
];

fn to_sql(value: &WitValue) -> SqlValue {
    match value {
        WitValue::Null => SqlValue::Null,
        WitValue::Integer(i) => SqlValue::Integer(*i),
        WitValue::Real(r) => SqlValue::Real(*r),
        WitValue::Text(t) => SqlValue::Text(t.clone()),
        WitValue::Blob(b) => SqlValue::Blob(b.clone()),
    }
}

fn from_sql(value: ValueRef<'_>) -> WitValue {
    match value {
        ValueRef::Null => WitValue::Null,
        ValueRef::Integer(i) => WitValue::Integer(i),
        ValueRef::Real(r) => WitValue::Real(r),
        ValueRef::Text(t) => WitValue::Text(String::from_utf8_lossy(t).into_owned()),
        ValueRef::Blob(b) => WitValue::Blob(b.to_vec()),
    }
}

fn value_bytes(value: &ValueRef<'_>) -> usize {
    match value {
        ValueRef::Text(t) | ValueRef::Blob(t) => t.len(),
        _ => 8,
    }
}

/// What the journal holds for `value` ([`value_to_json`], parsed; see
/// `journal::held_bytes`), besides its slot in its row.
fn held_value_bytes(value: &ValueRef<'_>) -> u64 {
    let (kind, len) = match value {
        ValueRef::Null => return 0,
        ValueRef::Integer(_) => ("integer", 0),
        ValueRef::Real(_) => ("real", 0),
        ValueRef::Text(t) => ("text", t.len()),
        ValueRef::Blob(b) => ("blob", b.len().div_ceil(3) * 4),
    };
    object_bytes(1) + string_bytes(kind.len()) + string_bytes(len)
}

/// The first word of `statement` (after blanks and comments) when it is not
/// one a query starts with ([`QUERY_WORDS`]).
fn not_a_query(statement: &str) -> Option<String> {
    let mut rest = statement;
    loop {
        rest = rest.trim_start();
        if let Some(comment) = rest.strip_prefix("--") {
            rest = comment.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(comment) = rest.strip_prefix("/*") {
            rest = comment.split_once("*/").map_or("", |(_, after)| after);
        } else {
            break;
        }
    }
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect::<String>()
        .to_ascii_uppercase();
    (!QUERY_WORDS.contains(&word.as_str())).then_some(word)
}

/// A value as the journal writes it: `null`, `{"integer": N}`, `{"real":
/// X}`, `{"text": "…"}`, `{"blob": "base64"}`.
fn value_to_json(value: &WitValue) -> Value {
    use base64::Engine as _;
    match value {
        WitValue::Null => Value::Null,
        WitValue::Integer(i) => json!({ "integer": i }),
        WitValue::Real(r) => json!({ "real": r }),
        WitValue::Text(t) => json!({ "text": t }),
        WitValue::Blob(b) => {
            json!({ "blob": base64::engine::general_purpose::STANDARD.encode(b) })
        }
    }
}

fn value_from_json(value: &Value) -> Option<WitValue> {
    use base64::Engine as _;
    if value.is_null() {
        return Some(WitValue::Null);
    }
    let (kind, inner) = value.as_object()?.iter().next()?;
    Some(match kind.as_str() {
        "integer" => WitValue::Integer(inner.as_i64()?),
        "real" => WitValue::Real(inner.as_f64()?),
        "text" => WitValue::Text(inner.as_str()?.to_string()),
        "blob" => WitValue::Blob(
            base64::engine::general_purpose::STANDARD
                .decode(inner.as_str()?)
                .ok()?,
        ),
        _ => return None,
    })
}

impl JournalValue for QueryResult {
    fn to_journal(&self) -> Value {
        json!({
            "columns": self.columns,
            "rows": self.rows.iter().map(|row| row.iter().map(value_to_json).collect::<Vec<_>>()).collect::<Vec<_>>(),
        })
    }

    fn from_journal(value: &Value) -> Option<Self> {
        let columns = serde_json::from_value(value.get("columns")?.clone()).ok()?;
        let rows = value
            .get("rows")?
            .as_array()?
            .iter()
            .map(|row| row.as_array()?.iter().map(value_from_json).collect())
            .collect::<Option<Vec<Vec<WitValue>>>>()?;
        Some(QueryResult { columns, rows })
    }
}

impl wit::Host for HostCall<'_, SqlCall> {
    fn query(
        &mut self,
        statement: String,
        params: Vec<WitValue>,
    ) -> wasmtime::Result<Result<QueryResult, GuestError>> {
        let Some(grant) = self.cap.grant.clone() else {
            return Ok(Err(self.deny(Capability::Sql)));
        };
        // The query stops a little before the call's deadline, so the guest
        // still gets the `timeout` error back before the call is cut off.
        let now = Instant::now();
        let call_left = self.scope.deadline().saturating_duration_since(now);
        let margin = DEADLINE_MARGIN.min(call_left / 4);
        let time_limit = QUERY_TIME.min(call_left - margin);
        let deadline = now + time_limit;
        let request = json!({
            "statement": statement,
            "params": params.iter().map(value_to_json).collect::<Vec<_>>(),
        });
        let connection = &mut self.cap.connection;
        self.scope.journaled(Capability::Sql, request, 0, |room| {
            if connection.is_none() {
                *connection = Some(ReadOnly::open(&grant.path)?);
            }
            let open = connection.as_ref().expect("opened above");
            open.query(&statement, &params, deadline, time_limit, room)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::wit::Host as _;
    use super::*;
    use crate::journal::{Journal, JournalMode, JournalRecord};

    /// A real SQLite file with a small table, in a directory of its own.
    fn database() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("birds.db");
        let db = Connection::open(&path).unwrap();
        db.execute_batch(
            "CREATE TABLE birds (name TEXT, mass INTEGER, wing REAL, tag BLOB);
             INSERT INTO birds VALUES ('Adelie', 3700, 189.5, x'00ff'), ('Gentoo', 5000, NULL, NULL);",
        )
        .unwrap();
        (dir, path)
    }

    fn call_state(path: Option<&Path>, timeout: Duration, journal: JournalMode) -> CallState {
        let mut grants = Grants::default();
        if let Some(path) = path {
            grants.add("sql", path.to_str().unwrap()).unwrap();
        }
        let mut options = CallOptions {
            grants: Arc::new(grants),
            journal,
            ..CallOptions::default()
        };
        options.limits.timeout = timeout;
        CallState::new(
            Arc::from("unit"),
            &options,
            &options.grants,
            &Backends::default(),
        )
    }

    fn sql(state: &mut CallState) -> HostCall<'_, SqlCall> {
        HostCall {
            cap: &mut state.capabilities.sql,
            scope: &mut state.scope,
        }
    }

    fn query(
        state: &mut CallState,
        statement: &str,
        params: Vec<WitValue>,
    ) -> Result<QueryResult, GuestError> {
        sql(state)
            .query(statement.into(), params)
            .expect("recording never traps")
    }

    fn journal(state: &mut CallState) -> Vec<JournalRecord> {
        let (records, mismatch) =
            std::mem::replace(&mut state.scope.journal, Journal::new(&JournalMode::Record))
                .finish();
        assert_eq!(mismatch, None);
        records
    }

    #[test]
    fn grants_name_a_sqlite_file() {
        let (dir, path) = database();
        assert_eq!(
            SqlGrant::parse(path.to_str().unwrap()).unwrap().path,
            path.canonicalize().unwrap()
        );
        let missing = dir.path().join("missing.db");
        let err = SqlGrant::parse(missing.to_str().unwrap()).unwrap_err();
        assert_eq!(err.capability, "sql");
        assert!(err.message.contains("cannot use database"), "{err}");
        let text = dir.path().join("notes.csv");
        std::fs::write(&text, "species,mass\nAdelie,3700\n").unwrap();
        let err = SqlGrant::parse(text.to_str().unwrap()).unwrap_err();
        assert!(err.message.contains("is not a SQLite database"), "{err}");
        let err = SqlGrant::parse(dir.path().to_str().unwrap()).unwrap_err();
        assert!(err.message.contains("not a regular file"), "{err}");
        let err = SqlGrant::parse("").unwrap_err();
        assert!(err.message.contains("e.g. `sql = "), "{err}");
        let err = SqlGrant::parse("/proc/self/root/etc/passwd").unwrap_err();
        assert!(err.message.contains("never granted"), "{err}");
    }

    #[test]
    fn a_query_returns_typed_rows_with_bound_parameters() {
        let (_dir, path) = database();
        let mut state = call_state(Some(&path), Duration::from_secs(5), JournalMode::Record);
        let result = query(
            &mut state,
            "SELECT name, mass, wing, tag FROM birds WHERE mass >= ?1 OR name = ?2 ORDER BY name",
            vec![WitValue::Integer(4000), WitValue::Text("Adelie".into())],
        )
        .unwrap();
        assert_eq!(result.columns, ["name", "mass", "wing", "tag"]);
        assert_eq!(
            format!("{:?}", result.rows),
            format!(
                "{:?}",
                vec![
                    vec![
                        WitValue::Text("Adelie".into()),
                        WitValue::Integer(3700),
                        WitValue::Real(189.5),
                        WitValue::Blob(vec![0, 255]),
                    ],
                    vec![
                        WitValue::Text("Gentoo".into()),
                        WitValue::Integer(5000),
                        WitValue::Null,
                        WitValue::Null,
                    ],
                ]
            )
        );
        // A parameter is a value, never SQL: the quote does not end a string.
        let injected = query(
            &mut state,
            "SELECT count(*) FROM birds WHERE name = ?",
            vec![WitValue::Text("x' OR '1'='1".into())],
        )
        .unwrap();
        assert_eq!(format!("{:?}", injected.rows), "[[Value::Integer(0)]]");
        let err = query(&mut state, "SELECT ?1, ?2", vec![WitValue::Null]).unwrap_err();
        assert_eq!(err.code, "invalid-query");
        assert!(
            err.message.contains("2 parameter(s) but 1"),
            "{}",
            err.message
        );
    }

    #[test]
    fn anything_but_reading_is_refused_naming_what_it_would_do() {
        let (dir, path) = database();
        let mut state = call_state(Some(&path), Duration::from_secs(5), JournalMode::Record);
        let other = dir.path().join("other.db");
        let attach = format!("ATTACH DATABASE '{}' AS other", other.display());
        for (statement, says) in [
            (
                "INSERT INTO birds (name) VALUES ('Chinstrap')",
                "INSERT into `birds`",
            ),
            ("UPDATE birds SET mass = 0", "UPDATE `birds`"),
            ("DELETE FROM birds", "DELETE from `birds`"),
            ("CREATE TABLE t (x)", "change the schema"),
            ("DROP TABLE birds", "change the schema"),
            ("ALTER TABLE birds ADD COLUMN x", "ALTER"),
            (attach.as_str(), "ATTACH"),
            ("PRAGMA user_version = 7", "PRAGMA user_version"),
            ("PRAGMA query_only = 0", "PRAGMA query_only"),
            ("PRAGMA journal_mode = DELETE", "PRAGMA journal_mode"),
            ("SELECT load_extension('libevil')", "load_extension"),
            ("BEGIN IMMEDIATE", "transaction"),
        ] {
            let err = query(&mut state, statement, Vec::new()).unwrap_err();
            assert_eq!(err.code, "not-allowed", "{statement}: {}", err.message);
            assert!(
                err.message.contains("read-only") && err.message.contains(says),
                "{statement}: {}",
                err.message
            );
        }
        assert!(!other.exists(), "ATTACH created a file");
        // Reading pragmas still answer, and the data is unchanged.
        let info = query(&mut state, "PRAGMA table_info(birds)", Vec::new()).unwrap();
        assert_eq!(info.rows.len(), 4);
        let count = query(&mut state, "SELECT count(*) FROM birds", Vec::new()).unwrap();
        assert_eq!(format!("{:?}", count.rows), "[[Value::Integer(2)]]");
        let err = query(&mut state, "SELECT 1; DELETE FROM birds", Vec::new()).unwrap_err();
        assert_eq!(err.code, "invalid-query");
        assert!(
            err.message.contains("one statement per query"),
            "{}",
            err.message
        );
    }

    #[test]
    fn the_row_and_byte_bounds_are_errors_not_truncations() {
        let (_dir, path) = database();
        let mut state = call_state(Some(&path), Duration::from_secs(5), JournalMode::Record);
        let rows = |n: usize| {
            format!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) SELECT i FROM n"
            )
        };
        assert_eq!(
            query(&mut state, &rows(MAX_ROWS), Vec::new())
                .unwrap()
                .rows
                .len(),
            MAX_ROWS
        );
        let err = query(&mut state, &rows(MAX_ROWS + 1), Vec::new()).unwrap_err();
        assert_eq!(err.code, "too-many-rows");
        assert!(
            err.message.contains("more than 1000 rows"),
            "{}",
            err.message
        );
        let err = query(
            &mut state,
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3) \
             SELECT printf('%.*c', 400000, 'x') FROM n",
            Vec::new(),
        )
        .unwrap_err();
        assert_eq!(err.code, "result-too-large");
        assert!(err.message.contains("1048576 bytes"), "{}", err.message);
    }

    #[test]
    fn statements_that_write_without_an_authorizer_code_are_refused() {
        let (dir, path) = database();
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE INDEX birds_by_mass ON birds (mass)")
            .unwrap();
        let mut state = call_state(Some(&path), Duration::from_secs(5), JournalMode::Record);
        let copy = dir.path().join("copy.db");
        let vacuum_into = format!("VACUUM INTO '{}'", copy.display());
        for statement in [
            "REINDEX",
            "REINDEX birds",
            "REINDEX nocase",
            "reindex birds_by_mass",
            "/* first */ REINDEX",
            "-- a comment\nREINDEX",
            "VACUUM",
            vacuum_into.as_str(),
            "ANALYZE",
            "ANALYZE birds",
            "PRAGMA optimize",
            "PRAGMA wal_checkpoint",
            "PRAGMA incremental_vacuum",
            "PRAGMA shrink_memory",
            "PRAGMA integrity_check",
        ] {
            let err = query(&mut state, statement, Vec::new()).unwrap_err();
            assert_eq!(err.code, "not-allowed", "{statement}: {}", err.message);
            assert!(
                err.message.contains("read-only"),
                "{statement}: {}",
                err.message
            );
        }
        assert!(!copy.exists(), "VACUUM INTO wrote a file");
        // Queries, however they open, still run.
        for statement in [
            "  select count(*) FROM birds",
            "/* c */ WITH b AS (SELECT 1) SELECT * FROM b",
            "VALUES (1), (2)",
            "EXPLAIN SELECT 1",
            "PRAGMA index_list(birds)",
        ] {
            query(&mut state, statement, Vec::new())
                .unwrap_or_else(|e| panic!("{statement}: {}", e.message));
        }
    }

    #[test]
    fn expression_bombs_fail_at_once_within_the_length_limit() {
        let (_dir, path) = database();
        let mut state = call_state(Some(&path), Duration::from_secs(10), JournalMode::Record);
        let long = format!("SELECT 1 {}", " ".repeat(MAX_STATEMENT_BYTES as usize));
        for bomb in [
            "SELECT randomblob(999999999)",
            "SELECT length(randomblob(999999999))",
            "SELECT zeroblob(999999999)",
            "SELECT length(zeroblob(999999999))",
            "SELECT replace(hex(zeroblob(1000000)), '0', '00000000')",
            "SELECT length(group_concat(hex(randomblob(100000)))) FROM \
             (WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100) \
              SELECT i FROM n)",
            long.as_str(),
        ] {
            let started = Instant::now();
            let err = query(&mut state, bomb, Vec::new()).unwrap_err();
            assert_eq!(err.code, "result-too-large", "{bomb:.80}: {}", err.message);
            assert!(
                err.message.contains(&MAX_VALUE_BYTES.to_string()),
                "{}",
                err.message
            );
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{bomb:.80} took {:?}",
                started.elapsed()
            );
        }
        // `printf` stops at the limit and answers NULL, at once.
        let started = Instant::now();
        let capped = query(
            &mut state,
            "SELECT printf('%.*c', 999999999, 'x')",
            Vec::new(),
        );
        assert_eq!(format!("{:?}", capped.unwrap().rows), "[[Value::Null]]");
        assert!(started.elapsed() < Duration::from_secs(2));
        // A value within the limit is still made.
        let fits = query(&mut state, "SELECT length(randomblob(1000000))", Vec::new()).unwrap();
        assert_eq!(format!("{:?}", fits.rows), "[[Value::Integer(1000000)]]");
    }

    #[test]
    fn a_result_the_budget_cannot_hold_stops_before_it_is_built() {
        let (_dir, path) = database();
        let grants = Grants {
            sql: Some(Arc::new(SqlGrant::parse(path.to_str().unwrap()).unwrap())),
            ..Grants::default()
        };
        let mut options = CallOptions {
            grants: Arc::new(grants),
            ..CallOptions::default()
        };
        options.limits.host_call_bytes = Some(200 << 10);
        let mut state = CallState::new(
            Arc::from("unit"),
            &options,
            &options.grants,
            &Backends::default(),
        );
        let rows = |n: usize| {
            format!(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {n}) \
                 SELECT i, i FROM n"
            )
        };
        // A hundred rows of two integers fit in 200 KiB as the journal
        // holds them; a thousand do not, though they are far below 1 MiB.
        assert_eq!(
            query(&mut state, &rows(100), Vec::new())
                .unwrap()
                .rows
                .len(),
            100
        );
        let err = query(&mut state, &rows(1000), Vec::new()).unwrap_err();
        assert_eq!(err.code, crate::limits::BUDGET_EXCEEDED, "{}", err.message);
        assert!(
            err.message.contains("`sql` answer") && err.message.contains("host_call_mb"),
            "{}",
            err.message
        );
        let records = journal(&mut state);
        assert_eq!(records[1].response["error"]["code"], "budget-exceeded");
    }

    #[test]
    fn a_runaway_recursive_query_stops_at_the_deadline() {
        let (_dir, path) = database();
        let mut state = call_state(Some(&path), Duration::from_millis(300), JournalMode::Record);
        let started = Instant::now();
        let err = query(
            &mut state,
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT count(*) FROM n",
            Vec::new(),
        )
        .unwrap_err();
        assert_eq!(err.code, "timeout", "{}", err.message);
        assert!(
            err.message.contains("did not finish within"),
            "{}",
            err.message
        );
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn ungranted_is_denied() {
        let mut state = call_state(None, Duration::from_secs(5), JournalMode::Record);
        let err = query(&mut state, "SELECT 1", Vec::new()).unwrap_err();
        assert_eq!(err.code, "capability-not-granted");
        assert!(err.message.contains("`sql`"), "{}", err.message);
        assert!(journal(&mut state).is_empty());
    }

    #[test]
    fn queries_are_journaled_and_a_replay_never_opens_the_file() {
        let (_dir, path) = database();
        let mut state = call_state(Some(&path), Duration::from_secs(5), JournalMode::Record);
        let statement = "SELECT name, wing FROM birds WHERE mass > ?";
        let recorded = query(&mut state, statement, vec![WitValue::Integer(4000)]).unwrap();
        let refused = query(&mut state, "DELETE FROM birds", Vec::new()).unwrap_err();
        let records = journal(&mut state);
        assert_eq!(records.len(), 2);
        assert_eq!(records[0].capability, Capability::Sql);
        assert_eq!(
            records[0].request,
            json!({ "statement": statement, "params": [{ "integer": 4000 }] })
        );
        assert_eq!(
            records[0].response,
            json!({ "ok": { "columns": ["name", "wing"], "rows": [[{ "text": "Gentoo" }, null]] } })
        );
        assert_eq!(records[1].response["error"]["code"], "not-allowed");

        // The database is gone: the replay answers from the records alone.
        std::fs::remove_file(&path).unwrap();
        let grants = Grants {
            sql: Some(Arc::new(SqlGrant { path: path.clone() })),
            ..Grants::default()
        };
        let options = CallOptions {
            grants: Arc::new(grants),
            journal: JournalMode::Replay(records.into()),
            ..CallOptions::default()
        };
        let mut state = CallState::new(
            Arc::from("unit"),
            &options,
            &options.grants,
            &Backends::default(),
        );
        let replayed = query(&mut state, statement, vec![WitValue::Integer(4000)]).unwrap();
        assert_eq!(format!("{replayed:?}"), format!("{recorded:?}"));
        let again = query(&mut state, "DELETE FROM birds", Vec::new()).unwrap_err();
        assert_eq!((again.code, again.message), (refused.code, refused.message));
        // A different statement diverges and traps the guest.
        assert!(
            sql(&mut state)
                .query("SELECT 2".into(), Vec::new())
                .is_err()
        );
    }

    #[test]
    fn values_round_trip_through_the_journal() {
        let result = QueryResult {
            columns: vec!["a".into(), "b".into()],
            rows: vec![
                vec![WitValue::Null, WitValue::Integer(-3)],
                vec![WitValue::Real(1.5), WitValue::Text("x".into())],
                vec![WitValue::Blob(vec![0, 255]), WitValue::Null],
            ],
        };
        let back = QueryResult::from_journal(&result.to_journal()).expect("decodes");
        assert_eq!(format!("{back:?}"), format!("{result:?}"));
    }
}
