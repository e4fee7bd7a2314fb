//! The Postgres backend: the same tables, rules and errors as SQLite
//! (`sqlite/`), for production and for many `host worker` processes
//! sharing one database.
//!
//! Files by concern: this one opens the store (connection options, the
//! pool) and holds the retry rule ([`PgStore::retrying`]); `commit.rs`
//! writes a run's history; `group.rs` batches concurrent commits;
//! `queue.rs` has leases, the queue and retention; `migrate.rs` how
//! migrations run here; `pooler.rs` how statements reach the server, also
//! behind a transaction-pooling PgBouncer (`pgbouncer=true` in the URL). Reads and the row codec are shared with SQLite
//! (`store/src/read.rs`, `store/src/codec.rs`).
//!
//! Differences that matter:
//! - The exactly-once guard is part of the commit statement: it moves the
//!   run's row, and writes the checkpoint with it, only if seq is the run's
//!   `last_seq + 1` and the run is active, so of two writers of the same
//!   seq the second waits for the first's row lock and then writes nothing.
//! - A checkpoint commit is one statement (`commit::CHECKPOINT_STATEMENT`) in an
//!   implicit transaction, so one round trip with its COMMIT: it inserts the
//!   checkpoint (guarded, and fenced by the lease when the handle carries
//!   one), moves the run, writes the step row and, for a run with a task
//!   id, upserts the task row.
//!   Journal entries and artifacts (rare) follow in an explicit transaction.
//!   `create_run` and `finish_run` are one statement each too (a run with
//!   flow control, an idempotency key or a schedule tick is created in one
//!   transaction instead, so its key is taken with it). Concurrent
//!   commits are batched (`group.rs`).
//! - Lease times use the database's clock, so workers on different machines
//!   agree on expiry.
//! - Connection failures are retried with backoff for up to [`RETRY_FOR`]
//!   where that is safe: reads, and writes whose outcome can be checked
//!   afterwards. A commit whose COMMIT may have landed before the connection
//!   broke is retried; if the retry meets its own checkpoint (same seq, node
//!   and state hash) it counts as done. So a server restart mid-run costs a
//!   pause, not the run.
//!
//! [`SyncMode::Full`] keeps `synchronous_commit = on` (a commit is on the
//! server's disk before it returns); [`SyncMode::Normal`] sets it `off` for
//! our sessions: a commit survives any crash of the host process, and a
//! crash of the database server may lose the last few (never corrupt).

use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgRow};
use sqlx::{ConnectOptions, Connection};

use crate::codec::Codec;
use crate::error::StoreError;
use crate::link::{Backoff, Link};
use crate::read::{Param, Reads};
use crate::{StoreOptions, SyncMode};
use pooler::Pooling;

mod commit;
mod group;
mod kv;
mod migrate;
pub(crate) mod pooler;
mod queue;
mod tx;
mod wait;

/// How long a connection attempt may take before `open` gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a statement waits for a pooled connection (a reconnect
/// included) before the attempt counts as failed.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long transient failures (lost connections, a restarting server) are
/// retried before the error is reported.
pub(crate) const RETRY_FOR: Duration = Duration::from_secs(60);
/// The first wait before a retry, and the longest (each drawn with jitter:
/// `link::Backoff`).
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_CAP: Duration = Duration::from_secs(1);
/// Connections are opened on demand up to this many: enough for a worker's
/// concurrent runs, each of which holds one only while it commits or reads.
const MAX_CONNECTIONS: u32 = 40;

#[derive(Debug, Clone)]
pub(crate) struct PgStore {
    pool: PgPool,
    /// What statements that need no transaction of their own run on (the
    /// pool, or behind a transaction-pooling PgBouncer a transaction each).
    exec: pooler::Exec,
    /// How connections reach the server (`pgbouncer=true` in the URL).
    pooling: Pooling,
    /// The statement that begins a transaction (`BEGIN`, with
    /// `synchronous_commit = off` for the transaction behind a pooler
    /// under `--durability normal`).
    begin: &'static str,
    /// Display URL (no password), for messages.
    db: String,
    /// Group commit of checkpoint commits (None on the executors' own handle).
    group: Option<Arc<group::Group>>,
    /// Whether the server answers, as the retry loops see it.
    link: Link,
}

impl Codec for PgStore {
    fn db(&self) -> &str {
        &self.db
    }
}

impl Reads for PgStore {
    type Row = PgRow;

    /// Retried like any statement that is safe to repeat: a read outlives a
    /// server restart.
    async fn fetch(
        &self,
        sql: &'static str,
        params: &[Param<'_>],
        action: &str,
    ) -> Result<Vec<PgRow>, StoreError> {
        self.retrying(|_| async move {
            Param::bind_all(params, sqlx::query(sql))
                .fetch_all(&self.exec)
                .await
                .map_err(|e| self.error(e, action))
        })
        .await
    }
}

impl PgStore {
    /// The connection pool (a listener connects with its options).
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// How connections reach the server.
    pub(crate) fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// `pg_notify(channel, payload)`, on a transaction of its own behind
    /// a transaction-pooling pooler.
    pub(crate) async fn notify(&self, channel: &str, payload: &str) -> Result<(), sqlx::Error> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel)
            .bind(payload)
            .fetch_optional(&self.exec)
            .await
            .map(drop)
    }

    pub async fn open(
        url: &str,
        db: &str,
        store_options: StoreOptions,
    ) -> Result<PgStore, StoreError> {
        let (url, pooling) =
            pooler::take_option(url).map_err(|hint| StoreError::UnsupportedUrl {
                url: db.to_owned(),
                hint,
            })?;
        let mut options = PgConnectOptions::from_str(&url)
            .map_err(|_| StoreError::UnsupportedUrl {
                url: db.to_owned(),
                hint: "it is not a valid Postgres URL; use postgres://USER:PASSWORD@HOST:PORT/DATABASE"
                    .into(),
            })?
            .application_name("skillhost")
            .disable_statement_logging();
        let normal = store_options.sync == SyncMode::Normal;
        let begin = match pooling {
            // Session settings and startup parameters reach the server.
            Pooling::Direct => {
                if normal {
                    options = options.options([("synchronous_commit", "off")]);
                }
                "BEGIN"
            }
            // PgBouncer refuses startup parameters it does not know (and
            // would not keep a session setting): the setting goes with each
            // transaction, and nothing is cached per connection.
            Pooling::Transaction => {
                options = options.extra_float_digits(None).statement_cache_capacity(0);
                if normal {
                    "BEGIN; SET LOCAL synchronous_commit TO off"
                } else {
                    "BEGIN"
                }
            }
        };

        let mut conn = match tokio::time::timeout(CONNECT_TIMEOUT, options.connect()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(classify_open_error(e, db)),
            Err(_) => {
                return Err(StoreError::Open {
                    db: db.to_owned(),
                    message: format!(
                        "no answer within {}s; is the server up and the host and port right?",
                        CONNECT_TIMEOUT.as_secs()
                    ),
                });
            }
        };
        let migrated = match pooling {
            Pooling::Direct => migrate::migrate(&mut conn, db).await,
            Pooling::Transaction => migrate::migrate_pooled(&mut conn, db).await,
        };
        let _ = conn.close().await;
        migrated?;

        let pool = PgPoolOptions::new()
            .max_connections(MAX_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // No ping before every use (a round trip per statement): a
            // connection that died with a server restart fails its next
            // statement, is discarded, and the retry gets a fresh one.
            .test_before_acquire(false)
            .connect_lazy_with(options);
        let mut store = PgStore {
            exec: pooler::Exec::new(pool.clone(), pooling, begin),
            pool,
            pooling,
            begin,
            db: db.to_owned(),
            group: None,
            link: Link::default(),
        };
        store.group = Some(group::Group::start(store.clone()));
        Ok(store)
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    pub fn link(&self) -> &Link {
        &self.link
    }

    /// [`retrying`](Self::retrying) for a write that takes its prepared
    /// value `prepared` by value (to queue it for the group commit) and
    /// gets it back with its outcome (None: it was lost with the group), so
    /// that a retry copies nothing.
    async fn retrying_with<P, T, F, Fut>(
        &self,
        prepared: P,
        mut attempt: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut(P, bool) -> Fut,
        Fut: Future<Output = (Option<P>, Result<T, StoreError>)>,
    {
        let deadline = Instant::now() + RETRY_FOR;
        let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
        let mut maybe_done = false;
        let mut prepared = prepared;
        loop {
            match attempt(prepared, maybe_done).await {
                (Some(back), Err(e))
                    if e.is_transient() && Instant::now() + backoff.peek() < deadline =>
                {
                    self.failed(&e);
                    let delay = backoff.next_delay();
                    tracing::warn!("{e}; retrying in {delay:?}");
                    maybe_done |= e.may_have_committed();
                    tokio::time::sleep(delay).await;
                    prepared = back;
                }
                (_, other) => return self.seen(other),
            }
        }
    }

    /// Runs `attempt` until it succeeds, fails for a reason other than the
    /// connection, or [`RETRY_FOR`] has passed. Only for operations that are
    /// safe to repeat. `attempt` is told whether an earlier attempt may have
    /// committed all the same ([`StoreError::may_have_committed`]): only then
    /// may a write that finds itself already done take that as its own.
    async fn retrying<T, F, Fut>(&self, mut attempt: F) -> Result<T, StoreError>
    where
        F: FnMut(bool) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let deadline = Instant::now() + RETRY_FOR;
        let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
        let mut maybe_done = false;
        loop {
            match attempt(maybe_done).await {
                Err(e) if e.is_transient() && Instant::now() + backoff.peek() < deadline => {
                    self.failed(&e);
                    let delay = backoff.next_delay();
                    tracing::warn!("{e}; retrying in {delay:?}");
                    maybe_done |= e.may_have_committed();
                    tokio::time::sleep(delay).await;
                }
                other => return self.seen(other),
            }
        }
    }

    /// Runs `attempt` (a write that must not be repeated once it may have
    /// landed) again only after failures that certainly wrote nothing: no
    /// connection, a server starting, a standby mid-promotion (a failover).
    /// After a connection broken mid-statement its error is returned, as
    /// the write may have committed.
    async fn retrying_while_unwritten<T, F, Fut>(&self, mut attempt: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let deadline = Instant::now() + RETRY_FOR;
        let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
        loop {
            match attempt().await {
                Err(e)
                    if e.is_transient()
                        && !e.may_have_committed()
                        && Instant::now() + backoff.peek() < deadline =>
                {
                    self.failed(&e);
                    let delay = backoff.next_delay();
                    tracing::warn!("{e}; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                }
                other => return self.seen(other),
            }
        }
    }

    /// Tells the link what the last attempt of a statement found: an
    /// answer, or (given up on) a failure.
    fn seen<T>(&self, outcome: Result<T, StoreError>) -> Result<T, StoreError> {
        match &outcome {
            Ok(_) => self.link.answered(),
            Err(e) => self.failed(e),
        }
        outcome
    }

    /// Tells the link a statement failed; if that began an outage, probes
    /// (`SELECT 1`, simple protocol, so also behind PgBouncer) with backoff
    /// until the server answers or the pool is closed.
    fn failed(&self, error: &StoreError) {
        if !self.link.failed(error) {
            return;
        }
        let (pool, link) = (self.pool.clone(), self.link.clone());
        tokio::spawn(async move {
            let mut backoff = Backoff::new(RETRY_FIRST, RETRY_CAP);
            while link.outage().is_some() && !pool.is_closed() {
                tokio::time::sleep(backoff.next_delay()).await;
                let probe = sqlx::raw_sql("SELECT 1").execute(&pool);
                if let Ok(Ok(_)) = tokio::time::timeout(ACQUIRE_TIMEOUT, probe).await {
                    link.answered();
                }
            }
        });
    }
}

/// An `open` failure in words that say what to check. sqlx's own message is
/// kept (it never contains the password).
fn classify_open_error(source: sqlx::Error, db: &str) -> StoreError {
    if let sqlx::Error::Database(e) = &source
        && let Some(fix) = pooler::misconfigured(e.code().as_deref(), e.message())
    {
        // Retrying cannot help: the URL (or the pooler) must change.
        return StoreError::UnsupportedUrl {
            url: db.to_owned(),
            hint: format!("{}; {fix}", e.message()),
        };
    }
    let message = match &source {
        sqlx::Error::Database(e) => match e.code().as_deref() {
            Some("3D000") => format!(
                "{}; create it first (e.g. `createdb NAME` or CREATE DATABASE) or fix the URL",
                e.message()
            ),
            Some("28P01" | "28000") => format!(
                "{}; check the user and password in the URL (or ~/.pgpass)",
                e.message()
            ),
            Some("57P03") => format!("{}; the server is starting or shutting down", e.message()),
            Some("25006") => format!(
                "{}; the server is a standby (read-only): point the URL at the primary, or, \
                 during a failover behind a proxy, try again in a moment",
                e.message()
            ),
            _ => e.message().to_owned(),
        },
        sqlx::Error::Io(e) => format!(
            "cannot reach the server ({e}); is Postgres running, and are the host and port right?"
        ),
        sqlx::Error::Tls(e) => format!("TLS failed ({e}); check sslmode in the URL"),
        other => other.to_string(),
    };
    StoreError::Open {
        db: db.to_owned(),
        message,
    }
}
