//! Postgres behind a transaction-pooling PgBouncer (`docs/workers.md`,
//! "Behind PgBouncer"): how every statement reaches the server.
//!
//! A pooler in `pool_mode = transaction` gives a client a server connection
//! for one transaction only, and before PgBouncer 1.21 knows nothing of
//! prepared statements. sqlx prepares each statement (Parse, Sync) before it
//! binds and runs it (Bind, Execute, Sync), and names and caches what it
//! prepared per connection. Through such a pooler that breaks three ways: a
//! named statement is missing on the next server connection ("prepared
//! statement … does not exist"), another client's of the same name is there
//! ("… already exists"), and outside a transaction even the unnamed
//! statement may be bound on another server connection than it was parsed
//! on. So with `pgbouncer=true` in the URL ([`Pooling::Transaction`]):
//! - every statement is unnamed ([`Unnamed`]) and nothing is cached;
//! - every statement runs inside a transaction, so Parse and Bind meet the
//!   same server connection: those the store runs on the pool alone are
//!   wrapped in one of their own ([`Exec`]); the others are in
//!   [`PgStore::transaction`](super::PgStore::transaction)'s already;
//! - no startup parameter the pooler refuses is sent (`extra_float_digits`,
//!   `options`), and `--durability normal`'s `synchronous_commit = off`,
//!   a session setting the pooler would not keep, is set per transaction
//!   (`SET LOCAL`, in the statement that begins it).
//!
//! Nothing else the store does is session-scoped: its advisory locks are
//! transaction-scoped (`pg_advisory_xact_lock`), it uses no LISTEN/NOTIFY,
//! no temporary table and no other `SET`; migrations run in one transaction
//! on a connection of their own (`mod.rs`). Without the option, the
//! pooler's refusals are reported with the fix ([`misconfigured`]).
//!
//! Direct connections (the default) are untouched: [`Exec`] hands each
//! statement to the pool as it is, named and cached by sqlx.

use std::fmt;

use futures_util::future::BoxFuture;
use futures_util::stream::{self, BoxStream, StreamExt, TryStreamExt};
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArguments, PgPool, PgQueryResult, PgRow, PgStatement, PgTypeInfo};
use sqlx::{Describe, Either, Execute, Executor, Postgres, Transaction};

/// The URL query option that says the server is reached through a
/// transaction-pooling PgBouncer.
pub(crate) const URL_OPTION: &str = "pgbouncer";

/// How connections reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pooling {
    /// Straight to Postgres, or through a session-pooling pooler: one
    /// server session per connection.
    Direct,
    /// Through a transaction-pooling PgBouncer: a server connection for one
    /// transaction at a time.
    Transaction,
}

/// Reads and removes `pgbouncer=true|false` from `url`'s query. Anything
/// else for it is refused, naming the values.
pub(crate) fn take_option(url: &str) -> Result<(String, Pooling), String> {
    let Some(q) = url.find('?') else {
        return Ok((url.to_owned(), Pooling::Direct));
    };
    let (base, query) = (&url[..q], &url[q + 1..]);
    let (fragment, query) = match query.find('#') {
        Some(h) => (&query[h..], &query[..h]),
        None => ("", query),
    };
    let mut pooling = Pooling::Direct;
    let mut kept = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != URL_OPTION {
            kept.push(pair);
            continue;
        }
        pooling = match value.to_ascii_lowercase().as_str() {
            "true" | "1" | "on" | "yes" => Pooling::Transaction,
            "false" | "0" | "off" | "no" => Pooling::Direct,
            other => {
                return Err(format!(
                    "`{URL_OPTION}={other}` is not a value it takes; use `{URL_OPTION}=true` \
                     when the URL points at a PgBouncer in transaction pooling, or leave it out"
                ));
            }
        };
    }
    let url = if kept.is_empty() {
        format!("{base}{fragment}")
    } else {
        format!("{base}?{}{fragment}", kept.join("&"))
    };
    Ok((url, pooling))
}

/// The fix for a failure that says the connection goes through a pooler
/// that the URL does not say, or one configured so that the store cannot
/// work through it. None for anything else.
pub(crate) fn misconfigured(code: Option<&str>, message: &str) -> Option<&'static str> {
    let message = message.to_ascii_lowercase();
    // PgBouncer refusing sqlx's startup parameters.
    if message.contains("unsupported startup parameter") {
        return Some(
            "the server is a connection pooler (PgBouncer) that refuses this client's startup \
             parameters: add `pgbouncer=true` to the database URL (docs/workers.md, \"Behind \
             PgBouncer\")",
        );
    }
    // Statement or transaction pooling without the option: prepared
    // statements that are not where they were made.
    let prepared = matches!(code, Some("26000" | "42P05"))
        && message.contains("prepared statement")
        || message.contains("bind message supplies");
    if prepared {
        return Some(
            "the connection goes through a pooler in transaction pooling (PgBouncer), which \
             keeps no prepared statements between transactions: add `pgbouncer=true` to the \
             database URL (docs/workers.md, \"Behind PgBouncer\")",
        );
    }
    if message.contains("statement pooling mode")
        || message.contains("long transactions not allowed")
    {
        return Some(
            "the pooler is in statement pooling, which allows no transaction: the store needs \
             `pool_mode = transaction` (or session) for its database in pgbouncer.ini",
        );
    }
    None
}

/// What the store runs a statement on when it needs no transaction of its
/// own: the pool as it is ([`Pooling::Direct`]), or, behind a
/// transaction-pooling PgBouncer, a transaction around the one statement,
/// run unnamed.
#[derive(Clone)]
pub(super) struct Exec {
    pool: PgPool,
    /// The statement that begins a transaction; None: direct.
    begin: Option<&'static str>,
}

impl fmt::Debug for Exec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Exec")
            .field("pooled", &self.begin.is_some())
            .finish()
    }
}

impl Exec {
    pub(super) fn new(pool: PgPool, pooling: Pooling, begin: &'static str) -> Exec {
        Exec {
            pool,
            begin: (pooling == Pooling::Transaction).then_some(begin),
        }
    }
}

impl<'p> Executor<'p> for &'_ Exec {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let Some(begin) = self.begin else {
            return self.pool.fetch_many(query);
        };
        let pool = self.pool.clone();
        // The rows are read whole inside the transaction: the store reads
        // bounded pages, and the transaction ends before they are handed on.
        stream::once(async move {
            let mut tx = pool.begin_with(begin).await?;
            let rows = (&mut *tx)
                .fetch_many(Unnamed(query))
                .try_collect::<Vec<_>>()
                .await;
            finish(tx, rows).await
        })
        .flat_map(|answer| match answer {
            Ok(rows) => stream::iter(rows.into_iter().map(Ok)).left_stream(),
            Err(e) => stream::iter([Err(e)]).right_stream(),
        })
        .boxed()
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'p: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        let Some(begin) = self.begin else {
            return self.pool.fetch_optional(query);
        };
        let pool = self.pool.clone();
        Box::pin(async move {
            let mut tx = pool.begin_with(begin).await?;
            let row = (&mut *tx).fetch_optional(Unnamed(query)).await;
            finish(tx, row).await
        })
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'p: 'e,
    {
        // The store never prepares explicitly (a named statement would not
        // outlive its transaction behind the pooler).
        self.pool.prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'p: 'e,
    {
        self.pool.describe(sql)
    }
}

/// Commits after a statement that succeeded, rolls back after one that
/// failed (the statement's error is the one reported).
async fn finish<T>(
    tx: Transaction<'static, Postgres>,
    answer: Result<T, sqlx::Error>,
) -> Result<T, sqlx::Error> {
    match answer {
        Ok(value) => {
            tx.commit().await?;
            Ok(value)
        }
        Err(e) => {
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

/// The connection a [`PgStore::transaction`](super::PgStore::transaction)'s
/// work runs on: its statements unnamed behind a transaction-pooling
/// PgBouncer, as they are otherwise.
pub(crate) struct Conn {
    pub(super) tx: Transaction<'static, Postgres>,
    pub(super) unnamed: bool,
}

impl fmt::Debug for Conn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Conn")
            .field("unnamed", &self.unnamed)
            .finish()
    }
}

impl<'c> Executor<'c> for &'c mut Conn {
    type Database = Postgres;

    fn fetch_many<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxStream<'e, Result<Either<PgQueryResult, PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.unnamed {
            (&mut *self.tx).fetch_many(Unnamed(query))
        } else {
            (&mut *self.tx).fetch_many(query)
        }
    }

    fn fetch_optional<'e, 'q: 'e, E>(
        self,
        query: E,
    ) -> BoxFuture<'e, Result<Option<PgRow>, sqlx::Error>>
    where
        'c: 'e,
        E: 'q + Execute<'q, Postgres>,
    {
        if self.unnamed {
            (&mut *self.tx).fetch_optional(Unnamed(query))
        } else {
            (&mut *self.tx).fetch_optional(query)
        }
    }

    fn prepare_with<'e, 'q: 'e>(
        self,
        sql: &'q str,
        parameters: &'e [PgTypeInfo],
    ) -> BoxFuture<'e, Result<PgStatement<'q>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.tx).prepare_with(sql, parameters)
    }

    fn describe<'e, 'q: 'e>(
        self,
        sql: &'q str,
    ) -> BoxFuture<'e, Result<Describe<Postgres>, sqlx::Error>>
    where
        'c: 'e,
    {
        (&mut *self.tx).describe(sql)
    }
}

/// A statement run unnamed: parsed into the server's unnamed statement and
/// not cached, so it leaves nothing on the server connection.
struct Unnamed<E>(E);

impl<'q, E: Execute<'q, Postgres>> Execute<'q, Postgres> for Unnamed<E> {
    fn sql(&self) -> &'q str {
        self.0.sql()
    }

    fn statement(&self) -> Option<&PgStatement<'q>> {
        self.0.statement()
    }

    fn take_arguments(&mut self) -> Result<Option<PgArguments>, BoxDynError> {
        self.0.take_arguments()
    }

    fn persistent(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_removes_the_option() {
        assert_eq!(
            take_option("postgres://u@h:6432/d?pgbouncer=true").unwrap(),
            ("postgres://u@h:6432/d".to_owned(), Pooling::Transaction)
        );
        assert_eq!(
            take_option("postgres://u@h/d?sslmode=disable&pgbouncer=1&application_name=x").unwrap(),
            (
                "postgres://u@h/d?sslmode=disable&application_name=x".to_owned(),
                Pooling::Transaction
            )
        );
        assert_eq!(
            take_option("postgres://u@h/d?pgbouncer=false").unwrap(),
            ("postgres://u@h/d".to_owned(), Pooling::Direct)
        );
        assert_eq!(
            take_option("postgres://u@h/d").unwrap(),
            ("postgres://u@h/d".to_owned(), Pooling::Direct)
        );
        let error = take_option("postgres://u@h/d?pgbouncer=maybe").unwrap_err();
        assert!(
            error.contains("pgbouncer=maybe") && error.contains("pgbouncer=true"),
            "{error}"
        );
    }

    #[test]
    fn names_the_fix_for_a_pooler_it_was_not_told_of() {
        let fix = misconfigured(
            Some("08P01"),
            "unsupported startup parameter: extra_float_digits",
        )
        .unwrap();
        assert!(fix.contains("pgbouncer=true"), "{fix}");
        let fix = misconfigured(
            Some("26000"),
            "prepared statement \"sqlx_s_3\" does not exist",
        )
        .unwrap();
        assert!(fix.contains("pgbouncer=true"), "{fix}");
        let fix = misconfigured(
            Some("42P05"),
            "prepared statement \"sqlx_s_1\" already exists",
        )
        .unwrap();
        assert!(fix.contains("pgbouncer=true"), "{fix}");
        let fix = misconfigured(
            Some("08P01"),
            "transaction blocks not allowed in statement pooling mode",
        )
        .unwrap();
        assert!(fix.contains("pool_mode = transaction"), "{fix}");
        assert!(misconfigured(Some("23505"), "duplicate key value").is_none());
    }
}
