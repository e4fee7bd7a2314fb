//! SQLite: leases, the run queue, task rows and retention. The rules are
//! those of `store::lease`; SQLite has one writer at a time (`BEGIN
//! IMMEDIATE`), so a claim needs no row locks. Times are this machine's clock.

use std::time::Duration;

use rusqlite::{OptionalExtension, Transaction, params};

use super::SqliteStore;
use crate::codec::{ACTIVE, Codec, FINISHED, now_ms};
use crate::error::StoreError;
use crate::lease::{Claim, Lease, PruneReport, ttl_ms};
use crate::queue::{PRUNE_IDEMPOTENCY_KEYS, pick_queued, pick_timed_out_wait};
use crate::read::Reads;
use crate::refusal;

impl SqliteStore {
    pub async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let action = format!("taking the lease on run `{run_id}`");
        let now = now_ms();
        let (generation, expires_at_ms) = self
            .writer
            .write(&action, |tx| {
                let row = tx
                    .prepare_cached(&format!(
                        "UPDATE runs SET \
                           lease_generation = CASE WHEN lease_owner = ?2 THEN lease_generation \
                                                   ELSE lease_generation + 1 END, \
                           lease_owner = ?2, lease_expires_at = ?3 + ?4, heartbeat_at = ?3, \
                           status = CASE WHEN status = 'queued' THEN 'running' ELSE status END, \
                           updated_at = ?3 \
                         WHERE id = ?1 AND status IN {ACTIVE} \
                           AND (lease_owner IS NULL OR lease_owner = ?2 OR lease_expires_at < ?3) \
                         RETURNING lease_generation, lease_expires_at"
                    ))
                    .and_then(|mut statement| {
                        statement
                            .query_row(params![run_id, owner, now, ttl_ms(ttl)], |row| {
                                Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
                            })
                            .optional()
                    })
                    .map_err(|e| self.sq(e, &action))?;
                row.ok_or_else(|| self.why_not_leased(tx, run_id, &action))
            })
            .await?;
        Ok(Lease {
            run_id: run_id.to_owned(),
            owner: owner.to_owned(),
            generation: self.uint(generation, "lease generation")?,
            expires_at_ms,
        })
    }

    /// Why a lease could not be taken or kept: no run, a finished run, or
    /// another holder.
    fn why_not_leased(&self, tx: &Transaction<'_>, run_id: &str, action: &str) -> StoreError {
        let row = tx
            .query_row(
                "SELECT status, lease_owner, lease_expires_at FROM runs WHERE id = ?1",
                params![run_id],
                |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, Option<i64>>(2)?,
                    ))
                },
            )
            .optional();
        match row {
            Err(e) => self.sq(e, action),
            Ok(run) => refusal::not_leased(&self.db, run_id, run),
        }
    }

    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let action = format!("renewing the lease on run `{}`", lease.run_id);
        let now = now_ms();
        let generation = self.int(lease.generation, "lease generation")?;
        let expires_at_ms = self
            .writer
            .write(&action, |tx| {
                let expires = tx
                    .prepare_cached(&format!(
                        "UPDATE runs SET lease_expires_at = ?4 + ?5, heartbeat_at = ?4 \
                         WHERE id = ?1 AND lease_owner = ?2 AND lease_generation = ?3 \
                           AND status IN {ACTIVE} \
                         RETURNING lease_expires_at"
                    ))
                    .and_then(|mut statement| {
                        statement
                            .query_row(
                                params![lease.run_id, lease.owner, generation, now, ttl_ms(ttl)],
                                |row| row.get::<_, i64>(0),
                            )
                            .optional()
                    })
                    .map_err(|e| self.sq(e, &action))?;
                expires.ok_or_else(|| self.why_lost(tx, lease, &action))
            })
            .await?;
        Ok(Lease {
            expires_at_ms,
            ..lease.clone()
        })
    }

    fn why_lost(&self, tx: &Transaction<'_>, lease: &Lease, action: &str) -> StoreError {
        let row = tx
            .query_row(
                "SELECT status, lease_owner, lease_generation, lease_expires_at \
                 FROM runs WHERE id = ?1",
                params![lease.run_id],
                |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, i64>(2)?,
                        row.get::<_, Option<i64>>(3)?,
                    ))
                },
            )
            .optional();
        match row {
            Err(e) => self.sq(e, action),
            Ok(run) => refusal::not_renewed(&self.db, lease, run),
        }
    }

    pub async fn release_lease(&self, lease: &Lease) -> Result<bool, StoreError> {
        let action = format!("releasing the lease on run `{}`", lease.run_id);
        let generation = self.int(lease.generation, "lease generation")?;
        let now = now_ms();
        let released = self
            .writer
            .write(&action, |tx| {
                tx.prepare_cached(
                    "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, \
                       heartbeat_at = NULL, \
                       status = CASE WHEN status = 'running' THEN 'queued' ELSE status END, \
                       updated_at = ?4 \
                     WHERE id = ?1 AND lease_owner = ?2 AND lease_generation = ?3",
                )
                .and_then(|mut statement| {
                    statement.execute(params![lease.run_id, lease.owner, generation, now])
                })
                .map_err(|e| self.sq(e, &action))
            })
            .await?;
        Ok(released == 1)
    }

    pub async fn claim_run(&self, owner: &str, ttl: Duration) -> Result<Option<Claim>, StoreError> {
        let action = "claiming a run";
        let now = now_ms();
        let claimed = self
            .writer
            .write(action, |tx| {
                // A dead runner's run first (its lease expired), then a wait
                // that timed out, then the queue (see `store::queue`). One
                // writer at a time, so the counts the flow-controlled picks
                // read cannot change before it commits.
                let waits = format!("SELECT id FROM ({})", pick_timed_out_wait("?2", ""));
                let queued = format!("SELECT id FROM ({})", pick_queued(""));
                for (index, pick) in [
                    "SELECT id FROM runs WHERE status = 'running' AND lease_owner IS NOT NULL \
                     AND lease_expires_at < ?2 ORDER BY lease_expires_at LIMIT 1",
                    waits.as_str(),
                    queued.as_str(),
                ]
                .into_iter()
                .enumerate()
                {
                    let claimed = tx
                        .prepare_cached(&format!(
                            "UPDATE runs SET lease_owner = ?1, \
                               lease_generation = lease_generation + 1, \
                               lease_expires_at = ?2 + ?3, heartbeat_at = ?2, status = 'running', \
                               wait_deadline = NULL, updated_at = ?2 \
                             WHERE id = ({pick}) RETURNING id"
                        ))
                        .and_then(|mut statement| {
                            statement
                                .query_row(params![owner, now, ttl_ms(ttl)], |row| {
                                    row.get::<_, String>(0)
                                })
                                .optional()
                        })
                        .map_err(|e| self.sq(e, action))?;
                    if let Some(id) = claimed {
                        // The first pick is a dead runner's run.
                        return Ok(Some((id, index == 0)));
                    }
                }
                Ok(None)
            })
            .await?;
        let Some((run_id, took_over)) = claimed else {
            return Ok(None);
        };
        // Read back through the pool once committed: the lease now keeps
        // every other runner off the row.
        let run = self
            .run(&run_id)
            .await?
            .ok_or_else(|| refusal::run_not_found(&self.db, &run_id))?;
        let lease = Lease {
            run_id,
            owner: owner.to_owned(),
            generation: run.lease_generation,
            expires_at_ms: run.lease_expires_at_ms.unwrap_or(now),
        };
        Ok(Some(Claim {
            run,
            lease,
            took_over,
        }))
    }

    pub async fn set_retention(
        &self,
        scenario: &str,
        keep: Option<Duration>,
    ) -> Result<(), StoreError> {
        let action = format!("setting the retention of scenario `{scenario}`");
        self.writer
            .write(&action, |tx| {
                match keep {
                    Some(keep) => tx.execute(
                        "INSERT INTO retention (scenario_name, keep_ms) VALUES (?1, ?2) \
                         ON CONFLICT (scenario_name) DO UPDATE SET keep_ms = excluded.keep_ms",
                        params![scenario, ttl_ms(keep)],
                    ),
                    None => tx.execute(
                        "DELETE FROM retention WHERE scenario_name = ?1",
                        params![scenario],
                    ),
                }
                .map_err(|e| self.sq(e, &action))?;
                Ok(())
            })
            .await
    }

    pub async fn prune_runs(
        &self,
        older_than: Option<Duration>,
    ) -> Result<PruneReport, StoreError> {
        let action = "pruning finished runs";
        let now = now_ms();
        let (mut runs, blobs, cache_entries) = self
            .writer
            .write(action, |tx| {
                let runs = tx
                    .prepare(&format!(
                        "DELETE FROM runs WHERE status IN {FINISHED} \
                         AND updated_at < ?1 - COALESCE( \
                             (SELECT keep_ms FROM retention AS r \
                              WHERE r.scenario_name = runs.scenario_name), \
                             ?2) \
                         RETURNING id"
                    ))
                    .and_then(|mut statement| {
                        statement
                            .query_map(params![now, older_than.map(ttl_ms)], |row| row.get(0))?
                            .collect::<rusqlite::Result<Vec<String>>>()
                    })
                    .map_err(|e| self.sq(e, action))?;
                let cache_entries = tx
                    .execute(crate::cache::PRUNE_CACHE, params![now])
                    .map_err(|e| self.sq(e, action))?;
                tx.execute(PRUNE_IDEMPOTENCY_KEYS, params![now])
                    .map_err(|e| self.sq(e, action))?;
                let blobs = tx
                    .execute(
                        "DELETE FROM blobs WHERE NOT EXISTS \
                         (SELECT 1 FROM artifacts AS a WHERE a.digest = blobs.digest)",
                        [],
                    )
                    .map_err(|e| self.sq(e, action))?;
                Ok((runs, blobs as u64, cache_entries as u64))
            })
            .await?;
        runs.sort();
        Ok(PruneReport {
            runs,
            blobs,
            cache_entries,
        })
    }
}
