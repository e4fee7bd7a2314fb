//! Store errors. Every message names the database (its display URL, never a
//! password) and, where there is one, what to do about it.
//!
//! Owns: [`StoreError`] and [`DatabaseFailure`], the driver's failure in our
//! own terms, with the verdicts the retry rules read
//! ([`is_transient`](DatabaseFailure::is_transient),
//! [`may_have_committed`](DatabaseFailure::may_have_committed)). Must not:
//! let a driver's error type (sqlx, rusqlite) into the store's API; they are
//! converted where they arise.

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

    /// A checkpoint of a run whose cancel was asked for (`host runs cancel`
    /// while it was running): the run ends at this node boundary.
    #[error(
        "run `{run_id}` in {db}: cancelled by `{by}` at {}; its next checkpoint was refused \
         and nothing was written",
        super::lease::format_ms(*at_ms)
    )]
    CancelRequested {
        db: String,
        run_id: String,
        by: String,
        at_ms: i64,
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

    /// Any other database failure, on either backend: a statement the
    /// database refused, a connection that broke, a value that did not
    /// decode.
    #[error("database error on {db} while {action}: {source}")]
    Database {
        db: String,
        action: String,
        #[source]
        source: DatabaseFailure,
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

    /// True when a checkpoint was refused because the run's cancel was
    /// asked for: the run ends as cancelled.
    pub fn is_cancel_requested(&self) -> bool {
        matches!(self, StoreError::CancelRequested { .. })
    }

    /// True when a write was fenced off because the runner lost its lease.
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, StoreError::LeaseLost { .. })
    }

    /// True when the database could not be reached or the connection broke:
    /// worth retrying later, nothing about the run itself is wrong.
    pub fn is_transient(&self) -> bool {
        match self {
            StoreError::Database { source, .. } => source.is_transient(),
            StoreError::Open { .. } => true,
            _ => false,
        }
    }

    /// True when the server could not be reached or the connection to it
    /// broke (a failover, a restart): [`is_transient`](Self::is_transient)
    /// less the failures the server itself reported for one statement
    /// (serialisation failures, deadlocks, too many connections, a busy
    /// SQLite lock). The store's [`Link`](crate::link::Link) reads it.
    pub fn is_unreachable(&self) -> bool {
        match self {
            StoreError::Database { source, .. } => source.is_unreachable(),
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
            StoreError::Database { source, .. } => source.may_have_committed(),
            _ => false,
        }
    }
}

/// A failure the database reported, or of the connection to it, in the
/// store's own terms: the driver's message word for word, the code the
/// database gave (a SQLSTATE on Postgres, an extended result code on
/// SQLite), and what kind of failure it was. That is all that messages and
/// the retry rules read. Being our own (and `Clone`), no driver's error type
/// is part of the store's API, and one failure can be handed to each of the
/// writes it ended (group commit) as an exact copy, verdicts included.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct DatabaseFailure {
    kind: FailureKind,
    code: Option<String>,
    message: String,
}

/// What kind of failure a [`DatabaseFailure`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The connection broke while a statement was in flight (I/O, TLS, a
    /// protocol error, the driver's worker gone): whether it committed is
    /// unknown.
    ConnectionLost,
    /// No connection came from the pool in time: nothing was sent.
    NoConnection,
    /// The database refused the statement; its code says why.
    Refused,
    /// Another connection held the lock a write needed past the busy
    /// timeout (SQLITE_BUSY or SQLITE_LOCKED on a SQLite store's writer).
    Busy,
    /// A SQLite commit was written into the WAL (and is visible) but the
    /// sync that was to make it durable failed: it may or may not survive
    /// a power loss, and the store handle refuses writes from then on.
    Unsynced,
    /// Anything else: a closed pool, a value that does not decode, …
    Other,
}

impl DatabaseFailure {
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The database's code for a refusal: a SQLSTATE (Postgres) or an
    /// extended result code in decimal (SQLite).
    pub fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }

    /// The connection, not the request: worth retrying later. Lost or
    /// unavailable connections, a busy SQLite lock, and the SQLSTATEs of
    /// connection failures (class 08), server shutdown (57P01..57P03),
    /// serialisation failures and deadlocks (40001, 40P01), too many
    /// connections (53300) and a write on a standby (25006: during a
    /// failover, a node not yet promoted). SQLite's codes are plain numbers, which none of
    /// these SQLSTATEs is.
    pub fn is_transient(&self) -> bool {
        match self.kind {
            FailureKind::ConnectionLost | FailureKind::NoConnection | FailureKind::Busy => true,
            FailureKind::Refused => self.code().is_some_and(|code| {
                code.starts_with("08")
                    || matches!(
                        code,
                        "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "53300" | "25006"
                    )
            }),
            FailureKind::Unsynced | FailureKind::Other => false,
        }
    }

    /// See [`StoreError::is_unreachable`]: a lost or unavailable
    /// connection, a connection failure (SQLSTATE class 08), the server
    /// shutting down or starting (57P01..57P03), or a standby where the
    /// primary was expected (25006, a write in a read-only transaction: a
    /// proxy's connection that reached a node mid-promotion, during a
    /// failover).
    pub fn is_unreachable(&self) -> bool {
        match self.kind {
            FailureKind::ConnectionLost | FailureKind::NoConnection => true,
            FailureKind::Refused => self.code().is_some_and(|code| {
                code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03" | "25006")
            }),
            _ => false,
        }
    }

    /// See [`StoreError::may_have_committed`]: a connection lost mid-statement,
    /// or the server ending the connection (SQLSTATE classes 08 and 57P),
    /// leaves a statement's outcome unknown.
    pub fn may_have_committed(&self) -> bool {
        match self.kind {
            FailureKind::ConnectionLost | FailureKind::Unsynced => true,
            FailureKind::Refused => self
                .code()
                .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
            _ => false,
        }
    }

    /// An sqlx failure (Postgres, and SQLite's reads and migrations).
    /// A connection that broke outside a statement, saying `message`.
    pub(crate) fn lost(message: &str) -> DatabaseFailure {
        DatabaseFailure {
            kind: FailureKind::ConnectionLost,
            code: None,
            message: message.to_owned(),
        }
    }

    pub(crate) fn from_sqlx(error: sqlx::Error) -> DatabaseFailure {
        let (kind, code) = match &error {
            sqlx::Error::Io(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => (FailureKind::ConnectionLost, None),
            sqlx::Error::PoolTimedOut => (FailureKind::NoConnection, None),
            sqlx::Error::Database(e) => (FailureKind::Refused, e.code().map(|c| c.into_owned())),
            _ => (FailureKind::Other, None),
        };
        let mut message = error.to_string();
        // A pooler in the way that the URL does not name (or one that cannot
        // work): not transient, and said with its fix.
        if kind == FailureKind::Refused
            && let Some(fix) = crate::postgres::pooler::misconfigured(code.as_deref(), &message)
        {
            message = format!("{message}; {fix}");
            return DatabaseFailure {
                kind: FailureKind::Other,
                code,
                message,
            };
        }
        DatabaseFailure {
            kind,
            code,
            message,
        }
    }

    /// A SQLite commit whose WAL sync failed (`message` says which file
    /// and why).
    pub(crate) fn unsynced(message: String) -> DatabaseFailure {
        DatabaseFailure {
            kind: FailureKind::Unsynced,
            code: None,
            message,
        }
    }

    /// A failure of a SQLite store's writer connection (rusqlite).
    pub(crate) fn from_rusqlite(error: rusqlite::Error) -> DatabaseFailure {
        let kind = match error.sqlite_error_code() {
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                FailureKind::Busy
            }
            Some(_) => FailureKind::Refused,
            None => FailureKind::Other,
        };
        let code = match &error {
            rusqlite::Error::SqliteFailure(failure, _) => Some(failure.extended_code.to_string()),
            _ => None,
        };
        DatabaseFailure {
            kind,
            code,
            message: error.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error as a server reports it, with a SQLSTATE.
    #[derive(Debug)]
    struct ServerSaid {
        message: String,
        code: String,
    }

    impl std::fmt::Display for ServerSaid {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(&self.message)
        }
    }

    impl std::error::Error for ServerSaid {}

    impl sqlx::error::DatabaseError for ServerSaid {
        fn message(&self) -> &str {
            &self.message
        }

        fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
            Some(std::borrow::Cow::Borrowed(&self.code))
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

    fn server_error(code: &str) -> sqlx::Error {
        sqlx::Error::Database(Box::new(ServerSaid {
            message: format!("the server said {code}"),
            code: code.to_owned(),
        }))
    }

    fn failure(error: sqlx::Error) -> DatabaseFailure {
        DatabaseFailure::from_sqlx(error)
    }

    #[test]
    fn only_a_broken_connection_leaves_a_write_maybe_committed() {
        let broken = failure(sqlx::Error::Io(std::io::Error::other("connection reset")));
        assert!(broken.is_transient() && broken.may_have_committed());
        // Nothing was sent, or the server rolled the statement back.
        for certain in [
            sqlx::Error::PoolTimedOut,
            server_error("40P01"),
            server_error("40001"),
            server_error("53300"),
        ] {
            let certain = failure(certain);
            assert!(certain.is_transient(), "{certain}");
            assert!(!certain.may_have_committed(), "{certain}");
        }
        // The server ended the connection: the statement may have landed.
        for ended in [server_error("57P01"), server_error("08006")] {
            let ended = failure(ended);
            assert!(
                ended.is_transient() && ended.may_have_committed(),
                "{ended}"
            );
        }
        let refused = failure(server_error("23505"));
        assert!(!refused.is_transient() && !refused.may_have_committed());
        assert_eq!(refused.code(), Some("23505"));
        assert!(!failure(sqlx::Error::PoolClosed).is_transient());
    }

    #[test]
    fn a_failure_keeps_the_drivers_words_and_its_verdicts() {
        for error in [
            sqlx::Error::Io(std::io::Error::other("connection reset")),
            sqlx::Error::PoolTimedOut,
            sqlx::Error::PoolClosed,
            sqlx::Error::Protocol("unexpected message".into()),
            server_error("40P01"),
            server_error("57P01"),
        ] {
            let words = error.to_string();
            let kept = failure(error);
            // What the driver said is passed on word for word, and a copy
            // (each write of a failed group statement gets one) says the same.
            assert_eq!(kept.to_string(), words);
            let copy = kept.clone();
            assert_eq!(
                (copy.is_transient(), copy.may_have_committed(), copy.code()),
                (kept.is_transient(), kept.may_have_committed(), kept.code())
            );
        }
    }

    #[test]
    fn a_busy_sqlite_writer_is_transient_and_certainly_not_committed() {
        let busy = rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY),
            Some("database is locked".into()),
        );
        let words = busy.to_string();
        let busy = DatabaseFailure::from_rusqlite(busy);
        assert_eq!(busy.kind(), FailureKind::Busy);
        assert!(busy.is_transient() && !busy.may_have_committed());
        assert_eq!(busy.to_string(), words);

        let refused = DatabaseFailure::from_rusqlite(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CONSTRAINT_FOREIGNKEY),
            None,
        ));
        assert_eq!(refused.kind(), FailureKind::Refused);
        assert_eq!(refused.code(), Some("787"));
        assert!(!refused.is_transient() && !refused.may_have_committed());
    }
}
