//! A streaming node's tokens, from the process that executes its run to
//! every process that shows it (`host serve` beside `host worker`s on one
//! Postgres database). Tokens are not part of a run's history: they are
//! not stored, and what the journal keeps of a streamed completion is what
//! replays it. So they travel by Postgres' `NOTIFY` on the channel
//! [`TOKENS_CHANNEL`], best effort: a listener that is not connected when
//! a notification is sent never hears it, and the run's steps (polled from
//! the store) are what a page can rely on.
//!
//! A SQLite store relays nothing: its runs are executed by the process that
//! shows them (`host serve`'s own worker), or by a `host run` whose
//! terminal shows them.
//!
//! Behind a transaction-pooling PgBouncer (`pgbouncer=true`), `NOTIFY`
//! works (it is sent at its transaction's commit) and `LISTEN` cannot (a
//! session's `LISTEN` does not outlive the transaction the pooler lends it):
//! [`Store::listen_tokens`] says so, with the fix.

use sqlx::postgres::PgListener;

use crate::codec::Codec;
use crate::error::StoreError;
use crate::postgres::pooler::Pooling;
use crate::{Backend, Store};

/// The channel tokens are notified on.
pub const TOKENS_CHANNEL: &str = "skillhost_tokens";

/// The longest payload a notification carries: Postgres refuses one of
/// 8,000 bytes or more.
pub const MAX_PAYLOAD_BYTES: usize = 7_900;

/// What listens to [`TOKENS_CHANNEL`] ([`Store::listen_tokens`]).
pub struct TokenListener {
    listener: PgListener,
    db: String,
}

impl std::fmt::Debug for TokenListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenListener")
            .field("db", &self.db)
            .finish()
    }
}

impl TokenListener {
    /// The next notification's payload. A lost connection is made again
    /// (and `LISTEN` said again) before waiting on: what was sent meanwhile
    /// is lost, so a caller may want to know, and gets the error once.
    pub async fn recv(&mut self) -> Result<String, StoreError> {
        match self.listener.try_recv().await {
            Ok(Some(notification)) => Ok(notification.payload().to_owned()),
            // The connection was lost; the next call connects again.
            Ok(None) => Err(StoreError::Database {
                db: self.db.clone(),
                action: format!("listen on `{TOKENS_CHANNEL}`"),
                source: crate::error::DatabaseFailure::lost(
                    "the connection was lost; listening again (tokens sent meanwhile are lost)",
                ),
            }),
            Err(e) => Err(StoreError::Database {
                db: self.db.clone(),
                action: format!("listen on `{TOKENS_CHANNEL}`"),
                source: crate::error::DatabaseFailure::from_sqlx(e),
            }),
        }
    }
}

impl Store {
    /// Whether tokens are relayed between processes through this store
    /// (Postgres).
    pub fn relays_tokens(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// Notifies every listener of `payload` (at most
    /// [`MAX_PAYLOAD_BYTES`]): nothing on SQLite.
    pub async fn notify_tokens(&self, payload: &str) -> Result<(), StoreError> {
        let Backend::Postgres(pg) = &self.backend else {
            return Ok(());
        };
        if payload.len() > MAX_PAYLOAD_BYTES {
            return Err(StoreError::Invalid {
                db: pg.db().to_owned(),
                message: format!(
                    "a token notification of {} bytes, over the {MAX_PAYLOAD_BYTES} one may carry",
                    payload.len()
                ),
            });
        }
        pg.notify(TOKENS_CHANNEL, payload)
            .await
            .map_err(|e| pg.error(e, format!("notify `{TOKENS_CHANNEL}`")))
    }

    /// A listener of the tokens other processes relay: `None` on SQLite.
    pub async fn listen_tokens(&self) -> Result<Option<TokenListener>, StoreError> {
        let Backend::Postgres(pg) = &self.backend else {
            return Ok(None);
        };
        if pg.pooling() == Pooling::Transaction {
            return Err(StoreError::UnsupportedUrl {
                url: pg.db().to_owned(),
                hint: "LISTEN needs a session of its own, which a transaction-pooling PgBouncer \
                       (`pgbouncer=true`) does not keep, so a streaming node's tokens from other \
                       processes are not shown. Point this process at Postgres directly, or at a \
                       pooler in session mode, to show them"
                    .into(),
            });
        }
        let mut listener = PgListener::connect_with(pg.pool())
            .await
            .map_err(|e| pg.error(e, "connect to listen for tokens"))?;
        listener
            .listen(TOKENS_CHANNEL)
            .await
            .map_err(|e| pg.error(e, format!("listen on `{TOKENS_CHANNEL}`")))?;
        Ok(Some(TokenListener {
            listener,
            db: pg.db().to_owned(),
        }))
    }
}
