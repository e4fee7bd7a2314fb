//! Store errors. Every message names the database (its display URL, never a
//! password) and, where there is one, what to do about it.

/// Something the store refused or could not do.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL names no backend this build has.
    #[error("unsupported database URL `{url}`: {hint}")]
    UnsupportedUrl { url: String, hint: String },

    /// [`Store::open_existing`](super::Store::open_existing) found no SQLite
    /// file at the path; nothing was created.
    #[error("no database at {path}: nothing has been run with it yet (nothing was created)")]
    Missing { db: String, path: String },

    /// The database could not be opened or created at all.
    #[error("cannot open database {db}: {message}")]
    Open { db: String, message: String },

    /// The file or database holds something that is not a Skillhost store.
    #[error(
        "{db} is not a Skillhost database ({found}); nothing was written to it. \
         Pick another path, e.g. --database sqlite://.skillhost/skillhost.db"
    )]
    NotOurs { db: String, found: String },

    /// The database was written by a newer Skillhost.
    #[error(
        "database {db} has schema version {found}, but this host knows only up to \
         version {supported}: upgrade host (nothing was written)"
    )]
    TooNew {
        db: String,
        found: u32,
        supported: u32,
    },

    /// No run with this id.
    #[error("run `{run_id}` not found in {db}")]
    RunNotFound { db: String, run_id: String },

    /// A write that would break the run's history: a checkpoint out of
    /// sequence (another runner got there first, or a step is being redone),
    /// a write to a finished run, or an id that is taken. Nothing was written.
    #[error("conflict on run `{run_id}` in {db}: {message}; nothing was written")]
    Conflict {
        db: String,
        run_id: String,
        message: String,
    },

    /// Another runner holds a live lease on the run: one active runner per run.
    #[error(
        "run `{run_id}` in {db} is being run by `{owner}` (lease until {}); wait for that \
         runner to finish, or for its lease to expire if it died",
        super::lease::format_ms(*expires_at_ms)
    )]
    Leased {
        db: String,
        run_id: String,
        owner: String,
        expires_at_ms: i64,
    },

    /// The runner's lease was taken over (it expired and another runner took
    /// the run): the write is fenced off.
    #[error(
        "lease on run `{run_id}` in {db} was lost: `{owner}` held generation {generation}, \
         but {now}; nothing was written"
    )]
    LeaseLost {
        db: String,
        run_id: String,
        owner: String,
        generation: u64,
        /// Who holds it now, e.g. "`w2` holds generation 4 until …".
        now: String,
    },

    /// Stored history that does not reproduce what was recorded. Never
    /// papered over: the caller decides (fork from an earlier checkpoint,
    /// restore a backup).
    #[error(
        "corrupt {what} in {db}: {detail}. The stored history no longer matches what was \
         written; restore the database from a backup or fork the run from an earlier checkpoint"
    )]
    Corrupt {
        db: String,
        /// What is corrupt, e.g. "checkpoint 7 of run `0190…`".
        what: String,
        detail: String,
    },

    /// A value the store cannot represent (e.g. a counter beyond i64).
    #[error("invalid value for {db}: {message}")]
    Invalid { db: String, message: String },

    /// Any other database failure.
    #[error("database error on {db} while {action}: {source}")]
    Database {
        db: String,
        action: String,
        #[source]
        source: sqlx::Error,
    },

    /// A failure of a SQLite store's writer connection (see
    /// `store::sqlite::writer`).
    #[error("database error on {db} while {action}: {source}")]
    Sqlite {
        db: String,
        action: String,
        #[source]
        source: rusqlite::Error,
    },

    /// The store handle was closed.
    #[error("database {db} is closed; open the store again to write")]
    Closed { db: String },
}

impl StoreError {
    /// True for errors that say "the history moved on without you": the
    /// exactly-once guard fired.
    pub fn is_conflict(&self) -> bool {
        matches!(self, StoreError::Conflict { .. })
    }

    /// True when a write was fenced off because the runner lost its lease.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, StoreError::LeaseLost { .. })
    }

    /// True when the database could not be reached or the connection broke:
    /// worth retrying later, nothing about the run itself is wrong.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Database { source, .. } => is_transient(source),
            // Another process kept the write lock past the busy timeout.
            StoreError::Sqlite { source, .. } => is_sqlite_busy(source),
            StoreError::Open { .. } => true,
            _ => false,
        }
    }

    /// True when stored data failed verification.
    pub fn is_corrupt(&self) -> bool {
        matches!(self, StoreError::Corrupt { .. })
    }

    /// True when the write this error ended may have committed all the
    /// same: the connection broke while its statement was in flight. A
    /// retry that then finds its own write already there may take it as
    /// done; after any other error (one the server reported, a pool that
    /// gave no connection) the write certainly did not commit, and finding
    /// it there means somebody else wrote it.
    pub fn may_have_committed(&self) -> bool {
        match self {
            StoreError::Database { source, .. } => may_have_committed(source),
            _ => false,
        }
    }
}

/// See [`StoreError::may_have_committed`]: I/O and protocol failures, and
/// the server ending the connection (SQLSTATE classes 08 and 57P), leave a
/// statement's outcome unknown.
pub(crate) fn may_have_committed(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(e) => e
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// A copy of a transient error, for each of the writes that shared the
/// statement it ended (group commit): it keeps what [`is_transient`] and
/// [`may_have_committed`] read, the SQLSTATE code and the kind of failure.
pub(crate) fn relay(error: &sqlx::Error) -> sqlx::Error {
    match error {
        sqlx::Error::Database(e) => sqlx::Error::Database(Box::new(Relayed {
            message: e.message().to_owned(),
            code: e.code().map(|code| code.into_owned()),
        })),
        sqlx::Error::PoolTimedOut => sqlx::Error::PoolTimedOut,
        sqlx::Error::WorkerCrashed => sqlx::Error::WorkerCrashed,
        sqlx::Error::Protocol(message) => sqlx::Error::Protocol(message.clone()),
        other => sqlx::Error::Io(std::io::Error::other(other.to_string())),
    }
}

/// An error the server reported, as [`relay`] passes it on.
#[derive(Debug)]
struct Relayed {
    message: String,
    code: Option<String>,
}

impl std::fmt::Display for Relayed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Relayed {}

impl sqlx::error::DatabaseError for Relayed {
    fn message(&self) -> &str {
        &self.message
    }

    fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
        self.code.as_deref().map(std::borrow::Cow::Borrowed)
    }

    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }

    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }

    fn kind(&self) -> sqlx::error::ErrorKind {
        sqlx::error::ErrorKind::Other
    }
}

/// Errors that say "the connection, not the request": I/O, pool timeouts,
/// and the SQLSTATE classes for connection failures, server shutdown and
/// serialisation failures.
pub(crate) fn is_transient(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::Protocol(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(e) => e.code().is_some_and(|code| {
            code.starts_with("08")
                || matches!(
                    code.as_ref(),
                    "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "53300"
                )
        }),
        _ => false,
    }
}

/// SQLITE_BUSY or SQLITE_LOCKED: another connection holds the lock a
/// statement needs.
pub(crate) fn is_sqlite_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(code: &str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(Relayed {
            message: format!("the server said {code}"),
            code: Some(code.to_owned()),
        }))
    }

    #[test]
    fn only_a_broken_connection_leaves_a_write_maybe_committed() {
        let broken = sqlx::Error::Io(std::io::Error::other("connection reset"));
        assert!(is_transient(&broken) && may_have_committed(&broken));
        // Nothing was sent, or the server rolled the statement back.
        for certain in [
            sqlx::Error::PoolTimedOut,
            server_error("40P01"),
            server_error("40001"),
            server_error("53300"),
        ] {
            assert!(is_transient(&certain), "{certain}");
            assert!(!may_have_committed(&certain), "{certain}");
        }
        // The server ended the connection: the statement may have landed.
        for ended in [server_error("57P01"), server_error("08006")] {
            assert!(
                is_transient(&ended) && may_have_committed(&ended),
                "{ended}"
            );
        }
        assert!(!may_have_committed(&server_error("23505")));
    }

    #[test]
    fn a_relayed_error_keeps_its_verdicts() {
        for error in [
            sqlx::Error::Io(std::io::Error::other("connection reset")),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::Protocol("unexpected message".into()),
            server_error("40P01"),
            server_error("57P01"),
        ] {
            let relayed = relay(&error);
            assert_eq!(is_transient(&relayed), is_transient(&error), "{error}");
            assert_eq!(
                may_have_committed(&relayed),
                may_have_committed(&error),
                "{error}"
            );
        }
        // What the server said is passed on word for word.
        assert_eq!(
            relay(&server_error("40P01")).to_string(),
            server_error("40P01").to_string()
        );
    }
}
