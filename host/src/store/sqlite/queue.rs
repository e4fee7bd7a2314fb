//! SQLite: leases, the run queue, task rows and retention. The rules are
//! those of `store::lease`; SQLite has one writer at a time (`BEGIN
//! IMMEDIATE`), so a claim needs no row locks. Times are this machine's clock.

use std::time::Duration;

use sqlx::Row;

use super::{ACTIVE, RUN_COLUMNS, SqliteStore, now_ms};
use crate::store::error::StoreError;
use crate::store::lease::{CurrentCheckpoint, Lease, PruneReport, Retention, ttl_ms};
use crate::store::run::RunRow;

impl SqliteStore {
    pub async fn acquire_lease(
        &self,
        run_id: &str,
        owner: &str,
        ttl: Duration,
    ) -> Result<Lease, StoreError> {
        let action = format!("taking the lease on run `{run_id}`");
        let now = now_ms();
        let mut tx = self.begin_write(&action).await?;
        let row = sqlx::query_as::<_, (i64, i64)>(&format!(
            "UPDATE runs SET \
               lease_generation = CASE WHEN lease_owner = $2 THEN lease_generation \
                                       ELSE lease_generation + 1 END, \
               lease_owner = $2, lease_expires_at = $3 + $4, heartbeat_at = $3, \
               status = CASE WHEN status = 'queued' THEN 'running' ELSE status END, \
               updated_at = $3 \
             WHERE id = $1 AND status IN {ACTIVE} \
               AND (lease_owner IS NULL OR lease_owner = $2 OR lease_expires_at < $3) \
             RETURNING lease_generation, lease_expires_at"
        ))
        .bind(run_id)
        .bind(owner)
        .bind(now)
        .bind(ttl_ms(ttl))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.error(e, &action))?;
        let Some((generation, expires_at_ms)) = row else {
            return Err(self.why_not_leased(&mut tx, run_id, &action).await);
        };
        tx.commit().await.map_err(|e| self.error(e, &action))?;
        Ok(Lease {
            run_id: run_id.to_owned(),
            owner: owner.to_owned(),
            generation: self.uint(generation, "lease generation")?,
            expires_at_ms,
        })
    }

    /// Why a lease could not be taken or kept: no run, a finished run, or
    /// another holder.
    async fn why_not_leased(
        &self,
        conn: &mut sqlx::SqliteConnection,
        run_id: &str,
        action: &str,
    ) -> StoreError {
        let row = sqlx::query_as::<_, (String, Option<String>, Option<i64>)>(
            "SELECT status, lease_owner, lease_expires_at FROM runs WHERE id = $1",
        )
        .bind(run_id)
        .fetch_optional(conn)
        .await;
        match row {
            Err(e) => self.error(e, action),
            Ok(None) => StoreError::RunNotFound {
                db: self.db.clone(),
                run_id: run_id.to_owned(),
            },
            Ok(Some((status, Some(owner), Some(expires_at_ms))))
                if !status
                    .parse()
                    .is_ok_and(crate::store::RunStatus::is_finished) =>
            {
                StoreError::Leased {
                    db: self.db.clone(),
                    run_id: run_id.to_owned(),
                    owner,
                    expires_at_ms,
                }
            }
            Ok(Some((status, ..))) => StoreError::Conflict {
                db: self.db.clone(),
                run_id: run_id.to_owned(),
                message: format!("the run is {status}; it cannot be leased"),
            },
        }
    }

    pub async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<Lease, StoreError> {
        let action = format!("renewing the lease on run `{}`", lease.run_id);
        let now = now_ms();
        let mut tx = self.begin_write(&action).await?;
        let expires = sqlx::query_scalar::<_, i64>(&format!(
            "UPDATE runs SET lease_expires_at = $4 + $5, heartbeat_at = $4 \
             WHERE id = $1 AND lease_owner = $2 AND lease_generation = $3 AND status IN {ACTIVE} \
             RETURNING lease_expires_at"
        ))
        .bind(&lease.run_id)
        .bind(&lease.owner)
        .bind(self.int(lease.generation, "lease generation")?)
        .bind(now)
        .bind(ttl_ms(ttl))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| self.error(e, &action))?;
        let Some(expires_at_ms) = expires else {
            return Err(self.why_lost(&mut tx, lease, &action).await);
        };
        tx.commit().await.map_err(|e| self.error(e, &action))?;
        Ok(Lease {
            expires_at_ms,
            ..lease.clone()
        })
    }

    async fn why_lost(
        &self,
        conn: &mut sqlx::SqliteConnection,
        lease: &Lease,
        action: &str,
    ) -> StoreError {
        let row = sqlx::query_as::<_, (String, Option<String>, i64, Option<i64>)>(
            "SELECT status, lease_owner, lease_generation, lease_expires_at FROM runs WHERE id = $1",
        )
        .bind(&lease.run_id)
        .fetch_optional(conn)
        .await;
        match row {
            Err(e) => self.error(e, action),
            Ok(None) => StoreError::RunNotFound {
                db: self.db.clone(),
                run_id: lease.run_id.clone(),
            },
            Ok(Some((status, holder, generation, expires))) => {
                if status
                    .parse()
                    .is_ok_and(crate::store::RunStatus::is_finished)
                {
                    StoreError::Conflict {
                        db: self.db.clone(),
                        run_id: lease.run_id.clone(),
                        message: format!("the run is {status}"),
                    }
                } else {
                    crate::store::lease::lease_lost(
                        &self.db,
                        lease,
                        holder.as_deref(),
                        generation,
                        expires,
                    )
                }
            }
        }
    }

    pub async fn release_lease(&self, lease: &Lease) -> Result<bool, StoreError> {
        let action = format!("releasing the lease on run `{}`", lease.run_id);
        let mut tx = self.begin_write(&action).await?;
        let done = sqlx::query(
            "UPDATE runs SET lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL, \
               status = CASE WHEN status = 'running' THEN 'queued' ELSE status END, \
               updated_at = $4 \
             WHERE id = $1 AND lease_owner = $2 AND lease_generation = $3",
        )
        .bind(&lease.run_id)
        .bind(&lease.owner)
        .bind(self.int(lease.generation, "lease generation")?)
        .bind(now_ms())
        .execute(&mut *tx)
        .await
        .map_err(|e| self.error(e, &action))?;
        tx.commit().await.map_err(|e| self.error(e, &action))?;
        Ok(done.rows_affected() == 1)
    }

    pub async fn claim_run(
        &self,
        owner: &str,
        ttl: Duration,
    ) -> Result<Option<(RunRow, Lease)>, StoreError> {
        let action = "claiming a run";
        let now = now_ms();
        let mut tx = self.begin_write(action).await?;
        // A dead runner's run first (its lease expired), then the queue.
        for pick in [
            "SELECT id FROM runs WHERE status = 'running' AND lease_owner IS NOT NULL \
             AND lease_expires_at < $2 ORDER BY lease_expires_at LIMIT 1",
            "SELECT id FROM runs WHERE status = 'queued' ORDER BY created_at, id LIMIT 1",
        ] {
            let row = sqlx::query(&format!(
                "UPDATE runs SET lease_owner = $1, lease_generation = lease_generation + 1, \
                   lease_expires_at = $2 + $3, heartbeat_at = $2, status = 'running', \
                   updated_at = $2 \
                 WHERE id = ({pick}) RETURNING {RUN_COLUMNS}"
            ))
            .bind(owner)
            .bind(now)
            .bind(ttl_ms(ttl))
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| self.error(e, action))?;
            if let Some(row) = row {
                let run = self.run_row(&row)?;
                tx.commit().await.map_err(|e| self.error(e, action))?;
                let lease = Lease {
                    run_id: run.id.clone(),
                    owner: owner.to_owned(),
                    generation: run.lease_generation,
                    expires_at_ms: run.lease_expires_at_ms.unwrap_or(now),
                };
                return Ok(Some((run, lease)));
            }
        }
        Ok(None)
    }

    pub async fn current_checkpoint(
        &self,
        task_id: &str,
    ) -> Result<Option<CurrentCheckpoint>, StoreError> {
        let row = sqlx::query(
            "SELECT run_id, seq, node_id, next_nodes, state_hash, updated_at \
             FROM task_checkpoints WHERE task_id = $1",
        )
        .bind(task_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| self.error(e, format_args!("reading task `{task_id}`")))?;
        let Some(row) = row else { return Ok(None) };
        let what = format!("current checkpoint of task `{task_id}`");
        let next_nodes: String = self.get(&row, "next_nodes")?;
        Ok(Some(CurrentCheckpoint {
            task_id: task_id.to_owned(),
            run_id: self.get(&row, "run_id")?,
            seq: self.uint(self.get(&row, "seq")?, &what)?,
            node_id: self.get(&row, "node_id")?,
            next_nodes: serde_json::from_str(&next_nodes)
                .map_err(|e| self.corrupt(&what, format!("next nodes are not valid: {e}")))?,
            state_hash: self.get(&row, "state_hash")?,
            updated_at_ms: self.get(&row, "updated_at")?,
        }))
    }

    pub async fn set_retention(
        &self,
        scenario: &str,
        keep: Option<Duration>,
    ) -> Result<(), StoreError> {
        let action = format!("setting the retention of scenario `{scenario}`");
        let query = match keep {
            Some(keep) => sqlx::query(
                "INSERT INTO retention (scenario_name, keep_ms) VALUES ($1, $2) \
                 ON CONFLICT (scenario_name) DO UPDATE SET keep_ms = excluded.keep_ms",
            )
            .bind(scenario)
            .bind(ttl_ms(keep)),
            None => sqlx::query("DELETE FROM retention WHERE scenario_name = $1").bind(scenario),
        };
        let mut writer = self
            .writer
            .lock()
            .await
            .map_err(|e| self.error(e, &action))?;
        query
            .execute(&mut *writer)
            .await
            .map_err(|e| self.error(e, &action))?;
        Ok(())
    }

    pub async fn retention(&self) -> Result<Vec<Retention>, StoreError> {
        let rows =
            sqlx::query("SELECT scenario_name, keep_ms FROM retention ORDER BY scenario_name")
                .fetch_all(&self.pool)
                .await
                .map_err(|e| self.error(e, "reading retention settings"))?;
        rows.iter()
            .map(|row| {
                Ok(Retention {
                    scenario_name: row
                        .try_get("scenario_name")
                        .map_err(|e| self.error(e, "reading retention settings"))?,
                    keep_ms: row
                        .try_get("keep_ms")
                        .map_err(|e| self.error(e, "reading retention settings"))?,
                })
            })
            .collect()
    }

    pub async fn prune_runs(
        &self,
        older_than: Option<Duration>,
    ) -> Result<PruneReport, StoreError> {
        let action = "pruning finished runs";
        let mut tx = self.begin_write(action).await?;
        let runs: Vec<String> = sqlx::query_scalar(
            "DELETE FROM runs WHERE status IN ('completed', 'failed', 'cancelled') \
             AND updated_at < $1 - COALESCE( \
                 (SELECT keep_ms FROM retention AS r WHERE r.scenario_name = runs.scenario_name), \
                 $2) \
             RETURNING id",
        )
        .bind(now_ms())
        .bind(older_than.map(ttl_ms))
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| self.error(e, action))?;
        let blobs = sqlx::query(
            "DELETE FROM blobs WHERE NOT EXISTS \
             (SELECT 1 FROM artifacts AS a WHERE a.digest = blobs.digest)",
        )
        .execute(&mut *tx)
        .await
        .map_err(|e| self.error(e, action))?
        .rows_affected();
        tx.commit().await.map_err(|e| self.error(e, action))?;
        let mut runs = runs;
        runs.sort();
        Ok(PruneReport { runs, blobs })
    }
}
