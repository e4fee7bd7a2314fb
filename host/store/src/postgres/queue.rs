//! Postgres: leases, the run queue, and retention. The rules are those of
//! `store::lease`; times are the database's clock ([`NOW_MS`]), so workers
//! on different machines agree on expiry, and concurrent claimers skip each
//! other's rows (`FOR UPDATE SKIP LOCKED`). Every statement here is safe to
//! repeat, so each is retried across a broken connection.

use std::time::Duration;

use sqlx::postgres::PgRow;

use super::PgStore;
use crate::codec::{ACTIVE, Codec, FINISHED, RUN_COLUMNS, now_ms};
use crate::error::StoreError;
use crate::lease::{Lease, PruneReport, ttl_ms};
use crate::queue::{FLOW_ALLOWS, PRUNE_IDEMPOTENCY_KEYS, pick_queued, pick_timed_out_wait};
use crate::refusal::{self, Decision};

/// How many flow-controlled runs one claim passes over when a concurrent
/// claim took their last slot; the next poll tries again.
const CLAIM_TRIES: usize = 4;

/// Which flow-controlled pick [`PgStore::claim_flow`] makes.
#[derive(Clone, Copy)]
enum Pick {
    Queued,
    TimedOutWait,
}

/// What a claim sets on the run it takes (`$1` owner, `$2` lease ttl); a
/// waiting run taken past its deadline waits no more.
const CLAIM_SET: &str = "lease_owner = $1, lease_generation = runs.lease_generation + 1, \
    lease_expires_at = (extract(epoch from statement_timestamp()) * 1000)::bigint + $2, \
    heartbeat_at = (extract(epoch from statement_timestamp()) * 1000)::bigint, \
    status = 'running', wait_deadline = NULL, \
    updated_at = (extract(epoch from statement_timestamp()) * 1000)::bigint";

/// The database's clock in Unix milliseconds.
pub(super) const NOW_MS: &str = "(extract(epoch from statement_timestamp()) * 1000)::bigint";

impl PgStore {
    pub async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let action = format!("taking the lease on run `{run_id}`");
        let action = &action;
        let row = self
            .retrying(|_| async move {
                sqlx::query_as::<_, (i64, i64)>(&format!(
                    "UPDATE runs SET \
                       lease_generation = CASE WHEN lease_owner = $2 THEN lease_generation \
                                               ELSE lease_generation + 1 END, \
                       lease_owner = $2, lease_expires_at = {NOW_MS} + $3, \
                       heartbeat_at = {NOW_MS}, \
                       status = CASE WHEN status = 'queued' THEN 'running' ELSE status END, \
                       updated_at = {NOW_MS} \
                     WHERE id = $1 AND status IN {ACTIVE} \
                       AND (lease_owner IS NULL OR lease_owner = $2 \
                            OR lease_expires_at < {NOW_MS}) \
                     RETURNING lease_generation, lease_expires_at"
                ))
                .bind(run_id)
                .bind(owner)
                .bind(ttl_ms(ttl))
                .fetch_optional(&self.exec)
                .await
                .map_err(|e| self.error(e, action))
            })
            .await?;
        let Some((generation, expires_at_ms)) = row else {
            return Err(self.why_not_leased(run_id, action).await);
        };
        Ok(Lease {
            run_id: run_id.to_owned(),
            owner: owner.to_owned(),
            generation: self.uint(generation, "lease generation")?,
            expires_at_ms,
        })
    }

    async fn why_not_leased(&self, run_id: &str, action: &str) -> StoreError {
        let row = sqlx::query_as::<_, (String, Option<String>, Option<i64>)>(
            "SELECT status, lease_owner, lease_expires_at FROM runs WHERE id = $1",
        )
        .bind(run_id)
        .fetch_optional(&self.exec)
        .await;
        match row {
            Err(e) => self.error(e, action),
            Ok(run) => refusal::not_leased(&self.db, run_id, run),
        }
    }

    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let action = format!("renewing the lease on run `{}`", lease.run_id);
        let action = &action;
        let generation = self.int(lease.generation, "lease generation")?;
        let expires = self
            .retrying(|_| async move {
                sqlx::query_scalar::<_, i64>(&format!(
                    "UPDATE runs SET lease_expires_at = {NOW_MS} + $4, heartbeat_at = {NOW_MS} \
                     WHERE id = $1 AND lease_owner = $2 AND lease_generation = $3 \
                       AND status IN {ACTIVE} \
                     RETURNING lease_expires_at"
                ))
                .bind(&lease.run_id)
                .bind(&lease.owner)
                .bind(generation)
                .bind(ttl_ms(ttl))
                .fetch_optional(&self.exec)
                .await
                .map_err(|e| self.error(e, action))
            })
            .await?;
        match expires {
            Some(expires_at_ms) => Ok(Lease {
                expires_at_ms,
                ..lease.clone()
            }),
            None => {
                let row = sqlx::query_as::<_, (String, Option<String>, i64, Option<i64>)>(
                    "SELECT status, lease_owner, lease_generation, lease_expires_at \
                     FROM runs WHERE id = $1",
                )
                .bind(&lease.run_id)
                .fetch_optional(&self.exec)
                .await
                .map_err(|e| self.error(e, action))?;
                Err(refusal::not_renewed(&self.db, lease, row))
            }
        }
    }

    pub async fn release_lease(&self, lease: &Lease) -> Result<bool, StoreError> {
        let action = format!("releasing the lease on run `{}`", lease.run_id);
        let action = &action;
        let generation = self.int(lease.generation, "lease generation")?;
        let done = self
            .retrying(|_| async move {
                sqlx::query(
                    "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, \
                       heartbeat_at = NULL, \
                       status = CASE WHEN status = 'running' THEN 'queued' ELSE status END, \
                       updated_at = $4 \
                     WHERE id = $1 AND lease_owner = $2 AND lease_generation = $3",
                )
                .bind(&lease.run_id)
                .bind(&lease.owner)
                .bind(generation)
                .bind(now_ms())
                .execute(&self.exec)
                .await
                .map_err(|e| self.error(e, action))
            })
            .await?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn claim_run(
        &self,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<crate::lease::Claim>, StoreError> {
        let returning = RUN_COLUMNS
            .split(", ")
            .map(|c| format!("runs.{}", c.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        // A dead runner's run first (its lease expired), then a wait that
        // timed out, then the queue (see `store::queue`). A
        // claim that committed but whose answer was lost leaves a lease that
        // expires and is claimed again, so retrying is safe.
        let takeover = format!(
            "WITH pick AS (SELECT id FROM runs WHERE status = 'running' \
               AND lease_owner IS NOT NULL AND lease_expires_at < {NOW_MS} \
               ORDER BY lease_expires_at LIMIT 1 FOR UPDATE SKIP LOCKED) \
             UPDATE runs SET {CLAIM_SET} FROM pick WHERE runs.id = pick.id RETURNING {returning}"
        );
        let takeover = &takeover;
        let returning = &returning;
        let mut row = self
            .retrying(|_| async move {
                sqlx::query(takeover)
                    .bind(owner)
                    .bind(ttl_ms(ttl))
                    .fetch_optional(&self.exec)
                    .await
                    .map_err(|e| self.error(e, "claiming a run"))
            })
            .await?;
        let took_over = row.is_some();
        if row.is_none() {
            row = self
                .retrying(|_| async move {
                    self.claim_flow(owner, ttl, returning, Pick::TimedOutWait)
                        .await
                })
                .await?;
        }
        if row.is_none() {
            row = self
                .retrying(
                    |_| async move { self.claim_flow(owner, ttl, returning, Pick::Queued).await },
                )
                .await?;
        }
        let Some(row) = row else {
            return Ok(None);
        };
        let run = self.run_row(&row)?;
        let lease = Lease {
            run_id: run.id.clone(),
            owner: owner.to_owned(),
            generation: run.lease_generation,
            expires_at_ms: run.lease_expires_at_ms.unwrap_or_default(),
        };
        Ok(Some(crate::lease::Claim {
            run,
            lease,
            took_over,
        }))
    }

    /// Claims the queued run, or the timed-out waiting run, that
    /// `store::queue` picks, in one transaction: the
    /// pick locks its row (`SKIP LOCKED`: concurrent claimers take
    /// different runs); a flow-controlled run's limits are checked again
    /// under a transaction lock on its scenario's claims, in a statement
    /// that sees every claim committed before the lock was granted, so two
    /// claimers never both count a last free slot. A run found held back
    /// then is passed over for the next.
    async fn claim_flow(
        &self,
        owner: &str,
        ttl: Duration,
        returning: &str,
        which: Pick,
    ) -> Result<Option<PgRow>, StoreError> {
        let (action, pick, status) = match which {
            Pick::Queued => (
                "claiming a queued run",
                pick_queued(" AND q.id <> ALL($1)"),
                "queued",
            ),
            Pick::TimedOutWait => (
                "claiming a waiting run past its deadline",
                pick_timed_out_wait(NOW_MS, " AND q.id <> ALL($1)"),
                "waiting",
            ),
        };
        let pick = format!("{pick} FOR UPDATE OF q SKIP LOCKED");
        let claim = format!(
            "UPDATE runs SET {CLAIM_SET} WHERE runs.id = $3 AND runs.status = '{status}' \
             RETURNING {returning}"
        );
        let recheck = format!("SELECT ({FLOW_ALLOWS}) FROM runs AS q WHERE q.id = $1");
        let mut passed_over: Vec<String> = Vec::new();
        for _ in 0..CLAIM_TRIES {
            let (pick, claim, recheck) = (&pick, &claim, &recheck);
            let passed = &passed_over;
            let claimed = self
                .transaction(action, async |conn| {
                    let picked: Option<(String, String, bool)> = sqlx::query_as(pick)
                        .bind(passed)
                        .fetch_optional(&mut *conn)
                        .await
                        .map_err(|e| self.error(e, action))?;
                    let Some((run_id, scenario, limited)) = picked else {
                        return Ok(Decision::Leave(Claim::Nothing));
                    };
                    if limited {
                        sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                            .bind(format!("skillhost.claim:{scenario}"))
                            .execute(&mut *conn)
                            .await
                            .map_err(|e| self.error(e, action))?;
                        let allowed: bool = sqlx::query_scalar(recheck)
                            .bind(&run_id)
                            .fetch_one(&mut *conn)
                            .await
                            .map_err(|e| self.error(e, action))?;
                        if !allowed {
                            return Ok(Decision::Leave(Claim::PassedOver(run_id)));
                        }
                    }
                    let row = sqlx::query(claim)
                        .bind(owner)
                        .bind(ttl_ms(ttl))
                        .bind(&run_id)
                        .fetch_one(&mut *conn)
                        .await
                        .map_err(|e| self.error(e, action))?;
                    Ok(Decision::Commit(Claim::Claimed(row)))
                })
                .await?;
            match claimed {
                Claim::Nothing => return Ok(None),
                Claim::PassedOver(run_id) => passed_over.push(run_id),
                Claim::Claimed(row) => return Ok(Some(row)),
            }
        }
        Ok(None)
    }

    pub async fn set_retention(
        &self,
        scenario: &str,
        keep: Option<Duration>,
    ) -> Result<(), StoreError> {
        let action = format!("setting the retention of scenario `{scenario}`");
        let action = &action;
        self.retrying(|_| async move {
            let query = match keep {
                Some(keep) => sqlx::query(
                    "INSERT INTO retention (scenario_name, keep_ms) VALUES ($1, $2) \
                     ON CONFLICT (scenario_name) DO UPDATE SET keep_ms = excluded.keep_ms",
                )
                .bind(scenario)
                .bind(ttl_ms(keep)),
                None => {
                    sqlx::query("DELETE FROM retention WHERE scenario_name = $1").bind(scenario)
                }
            };
            query
                .execute(&self.exec)
                .await
                .map_err(|e| self.error(e, action))
        })
        .await?;
        Ok(())
    }

    pub async fn prune_runs(
        &self,
        older_than: Option<Duration>,
    ) -> Result<PruneReport, StoreError> {
        let action = "pruning finished runs";
        let prune = format!(
            "DELETE FROM runs WHERE status IN {FINISHED} \
             AND updated_at < $1 - COALESCE( \
                 (SELECT keep_ms FROM retention AS r \
                  WHERE r.scenario_name = runs.scenario_name), $2::bigint) \
             RETURNING id"
        );
        let prune = prune.as_str();
        // Idempotent: a retry deletes what is still old enough.
        self.retrying(|_| async move {
            self.transaction(action, async |conn| {
                let tx = conn;
                let mut runs: Vec<String> = sqlx::query_scalar(prune)
                    .bind(now_ms())
                    .bind(older_than.map(ttl_ms))
                    .fetch_all(&mut *tx)
                    .await
                    .map_err(|e| self.error(e, action))?;
                // The runs' history goes in the same transaction: checkpoints,
                // steps and task rows have no foreign key to cascade from (their
                // writes insert from the run's locked row instead), so they are
                // deleted here; so is everything else, explicitly. A separate
                // statement, so it sees every write that held the run's row
                // before the DELETE above took it (none can follow: the row is
                // gone once this commits).
                if !runs.is_empty() {
                    sqlx::query(
                        "WITH c AS (DELETE FROM checkpoints WHERE run_id = ANY($1)), \
                     s AS (DELETE FROM steps WHERE run_id = ANY($1)), \
                     j AS (DELETE FROM journal WHERE run_id = ANY($1)), \
                     m AS (DELETE FROM map_items WHERE run_id = ANY($1)), \
                     a AS (DELETE FROM artifacts WHERE run_id = ANY($1)) \
                     DELETE FROM task_checkpoints WHERE run_id = ANY($1)",
                    )
                    .bind(&runs)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.error(e, action))?;
                }
                sqlx::query(PRUNE_IDEMPOTENCY_KEYS)
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.error(e, action))?;
                let cache_entries = sqlx::query(crate::cache::PRUNE_CACHE)
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| self.error(e, action))?
                    .rows_affected();
                let blobs = sqlx::query(
                    "DELETE FROM blobs WHERE NOT EXISTS \
                 (SELECT 1 FROM artifacts AS a WHERE a.digest = blobs.digest)",
                )
                .execute(&mut *tx)
                .await
                .map_err(|e| self.error(e, action))?
                .rows_affected();
                runs.sort();
                Ok(Decision::Commit(PruneReport {
                    runs,
                    blobs,
                    cache_entries,
                }))
            })
            .await
        })
        .await
    }
}

/// What one try of a flow-controlled claim found.
enum Claim {
    /// No run to claim.
    Nothing,
    /// A run its flow control keeps waiting: the next try passes it over.
    PassedOver(String),
    Claimed(PgRow),
}
