//! Group commit for Postgres: the writes of concurrent runs (checkpoint
//! commits, new runs, finished runs) are batched into shared transactions.
//!
//! Writes queue on a channel; an executor takes whatever is queued (up to
//! [`MAX_BATCH`], one write per run) and writes it as ONE statement in one
//! implicit transaction ([`group_statement`]): one round trip and one WAL
//! flush for the whole batch, whatever its mix of kinds. A worker that keeps
//! runs in flight creates and finishes runs between other runs'
//! checkpoints, so a batch usually holds all three; as three statements
//! they cost three transactions and three flushes. The statement moves (and
//! so locks) the runs' rows and leaves out a write the run does not take
//! (its lease fence does not hold, the run is not active, it is not the
//! run's next checkpoint, or a new run's id is taken): that write writes
//! nothing. Then every write that was left out, or all of them if the
//! database refused the statement, is written alone and hears its own
//! verdict. Refusals are rare (a lost lease, a second runner), so they pay
//! and the common case does not. Each caller waits for the COMMIT that
//! carries its write, so a node still proceeds only once its own checkpoint
//! is durable. There is no timer: the wait is bounded by one batch in
//! flight (up to [`EXECUTORS`] run at once), so a lone run pays nothing but
//! a channel hop (a batch of one takes the ordinary path), and under load
//! batches fill while the previous ones commit. Reads, leases and every
//! other write go straight to the pool.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::{Semaphore, mpsc, oneshot};

use sqlx::postgres::PgArguments;

use super::{PgStore, Prepared, PreparedFinish, PreparedRun, START_NODE, now_ms};
use crate::store::error::{StoreError, is_transient};

/// Most writes in one statement.
pub(super) const MAX_BATCH: usize = 64;
/// Batches in flight at once (one can be in its fsync while the next builds).
pub(super) const EXECUTORS: usize = 2;

/// A queued write and where its outcome goes.
pub(super) struct Queued<T> {
    item: T,
    reply: oneshot::Sender<Result<(), StoreError>>,
}

/// The writes that are grouped: checkpoint commits, new runs, finished runs.
enum Op {
    Checkpoint(Queued<Prepared>),
    Create(Queued<PreparedRun>),
    Finish(Queued<PreparedFinish>),
}

/// The queue in front of the executors.
#[derive(Debug)]
pub(super) struct Group {
    tx: mpsc::UnboundedSender<Op>,
}

impl Group {
    /// Starts the executors for `store` (a handle without a group of its own).
    pub fn start(store: PgStore) -> Arc<Group> {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(collect(store, rx));
        Arc::new(Group { tx })
    }

    /// Queues a checkpoint commit and waits for its transaction's outcome.
    pub async fn commit(&self, prepared: Prepared, db: &str) -> Result<(), StoreError> {
        self.queue(Op::Checkpoint, prepared, db).await
    }

    /// Queues a new run and waits for its transaction's outcome.
    pub async fn create(&self, run: PreparedRun, db: &str) -> Result<(), StoreError> {
        self.queue(Op::Create, run, db).await
    }

    /// Queues a run's final status and waits for its transaction's outcome.
    pub async fn finish(&self, finish: PreparedFinish, db: &str) -> Result<(), StoreError> {
        self.queue(Op::Finish, finish, db).await
    }

    async fn queue<T>(&self, op: fn(Queued<T>) -> Op, item: T, db: &str) -> Result<(), StoreError> {
        let (reply, answer) = oneshot::channel();
        let closed = || StoreError::Database {
            db: db.to_owned(),
            action: "writing to the database (group commit)".into(),
            source: sqlx::Error::PoolClosed,
        };
        self.tx
            .send(op(Queued { item, reply }))
            .map_err(|_| closed())?;
        answer.await.map_err(|_| closed())?
    }
}

async fn collect(store: PgStore, mut rx: mpsc::UnboundedReceiver<Op>) {
    let slots = Arc::new(Semaphore::new(EXECUTORS));
    while let Some(first) = rx.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        // Everything that queued while the executors were busy.
        let mut batch = Batch::default();
        let mut next = Some(first);
        while let Some(op) = next.take() {
            match op {
                Op::Checkpoint(q) => batch.checkpoints.push(q),
                Op::Create(q) => batch.creates.push(q),
                Op::Finish(q) => batch.finishes.push(q),
            }
            if batch.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        let store = store.clone();
        tokio::spawn(async move {
            store.settle(batch).await;
            drop(slot);
        });
    }
}

/// The writes of every kind that one statement carries.
#[derive(Default)]
struct Batch {
    checkpoints: Vec<Queued<Prepared>>,
    creates: Vec<Queued<PreparedRun>>,
    finishes: Vec<Queued<PreparedFinish>>,
}

impl Batch {
    fn len(&self) -> usize {
        self.checkpoints.len() + self.creates.len() + self.finishes.len()
    }

    /// Splits off every write to a run that an earlier write of the batch
    /// already names: two writes to one run never share a statement (two
    /// come only from two runners, one of them fenced out, or a run created
    /// twice). The later ones go alone once the batch is done, and meet its
    /// result.
    fn split_repeats(self) -> (Batch, Batch) {
        fn split<T: Batched>(
            items: Vec<Queued<T>>,
            seen: &mut HashSet<String>,
        ) -> (Vec<Queued<T>>, Vec<Queued<T>>) {
            items
                .into_iter()
                .partition(|q| seen.insert(q.item.run_id().to_owned()))
        }
        let mut seen = HashSet::new();
        let (checkpoints, again_checkpoints) = split(self.checkpoints, &mut seen);
        let (creates, again_creates) = split(self.creates, &mut seen);
        let (finishes, again_finishes) = split(self.finishes, &mut seen);
        (
            Batch {
                checkpoints,
                creates,
                finishes,
            },
            Batch {
                checkpoints: again_checkpoints,
                creates: again_creates,
                finishes: again_finishes,
            },
        )
    }
}

/// A kind of grouped write: how one is written alone (the ordinary path,
/// with its own verdict) and where its rows are in the group statement.
trait Batched: Sized {
    /// Its `kind` in the rows the group statement returns.
    const KIND: i32;
    /// The run it writes to: a run appears at most once per statement.
    fn run_id(&self) -> &str;
    fn describe(&self) -> String;
    async fn alone(&self, store: &PgStore) -> Result<(), StoreError>;
}

impl Batched for Prepared {
    const KIND: i32 = CHECKPOINT;
    fn run_id(&self) -> &str {
        &self.run_id
    }
    fn describe(&self) -> String {
        format!(
            "committing checkpoint {} of run `{}` (in a group of commits)",
            self.seq, self.run_id
        )
    }
    async fn alone(&self, store: &PgStore) -> Result<(), StoreError> {
        store.commit_prepared(self).await
    }
}

impl Batched for PreparedRun {
    const KIND: i32 = CREATE;
    fn run_id(&self) -> &str {
        &self.id
    }
    fn describe(&self) -> String {
        format!("creating run `{}` (in a group of writes)", self.id)
    }
    async fn alone(&self, store: &PgStore) -> Result<(), StoreError> {
        store.insert_run(self).await
    }
}

impl Batched for PreparedFinish {
    const KIND: i32 = FINISH;
    fn run_id(&self) -> &str {
        &self.run_id
    }
    fn describe(&self) -> String {
        format!(
            "finishing run `{}` as {} (in a group of writes)",
            self.run_id, self.status
        )
    }
    async fn alone(&self, store: &PgStore) -> Result<(), StoreError> {
        store.update_finished(self).await
    }
}

/// How the group statement went, for the writes it carried.
enum Outcome {
    /// It committed; these (kind, ordinal from 1) wrote, the others wrote
    /// nothing.
    Wrote(HashSet<(i32, i64)>),
    /// The connection failed or the server went away: nothing is known
    /// written, and each write may be retried.
    Transient(String),
    /// The database refused the statement as a whole.
    Refused,
}

impl PgStore {
    /// Writes `batch` and answers every caller.
    async fn settle(&self, batch: Batch) {
        if batch.len() <= 1 {
            self.alone_all(batch).await;
            return;
        }
        let (batch, again) = batch.split_repeats();
        let outcome = match self.write_group(&batch).await {
            Ok(rows) => Outcome::Wrote(rows.into_iter().collect()),
            Err(e) if is_transient(&e) => Outcome::Transient(e.to_string()),
            Err(_) => Outcome::Refused,
        };
        self.answer(batch.checkpoints, &outcome).await;
        self.answer(batch.creates, &outcome).await;
        self.answer(batch.finishes, &outcome).await;
        self.alone_all(again).await;
    }

    /// Tells each write of one kind how the group statement went for it.
    async fn answer<T: Batched>(&self, items: Vec<Queued<T>>, outcome: &Outcome) {
        for (i, queued) in items.into_iter().enumerate() {
            match outcome {
                Outcome::Wrote(rows) if rows.contains(&(T::KIND, i as i64 + 1)) => {
                    let _ = queued.reply.send(Ok(()));
                }
                // Every write of the failed transaction hears why, with the
                // same transient verdict, so each retries on its own.
                Outcome::Transient(message) => {
                    let error = self.error(
                        sqlx::Error::Io(std::io::Error::other(message.clone())),
                        queued.item.describe(),
                    );
                    let _ = queued.reply.send(Err(error));
                }
                // Left out (fenced out, its run is gone, finished or already
                // there), or the whole statement was refused (say a
                // checkpoint that is already there although its run's
                // last_seq does not say so): alone, it hears why.
                Outcome::Wrote(_) | Outcome::Refused => self.alone(queued).await,
            }
        }
    }

    async fn alone_all(&self, batch: Batch) {
        for queued in batch.checkpoints {
            self.alone(queued).await;
        }
        for queued in batch.creates {
            self.alone(queued).await;
        }
        for queued in batch.finishes {
            self.alone(queued).await;
        }
    }

    async fn alone<T: Batched>(&self, queued: Queued<T>) {
        let result = queued.item.alone(self).await;
        let _ = queued.reply.send(result);
    }

    /// Writes the batch in one statement (one implicit transaction) and
    /// returns the (kind, ordinal from 1) of each write it made: the others
    /// were fenced out, out of sequence, for a finished run, a missing one
    /// or one that exists already, and wrote nothing.
    async fn write_group(&self, batch: &Batch) -> Result<Vec<(i32, i64)>, sqlx::Error> {
        let (checkpoints, creates, finishes) = (
            !batch.checkpoints.is_empty(),
            !batch.creates.is_empty(),
            !batch.finishes.is_empty(),
        );
        let mut query = sqlx::query_as(group_statement(checkpoints, creates, finishes));
        if checkpoints {
            let c: Vec<&Prepared> = batch.checkpoints.iter().map(|q| &q.item).collect();
            for p in &c {
                crate::failpoint::hit(|| format!("in-commit:{}", p.node_id));
            }
            query = bind_checkpoints(query, &c);
        }
        if creates {
            let c: Vec<&PreparedRun> = batch.creates.iter().map(|q| &q.item).collect();
            query = bind_creates(query, &c);
        }
        if finishes {
            let c: Vec<&PreparedFinish> = batch.finishes.iter().map(|q| &q.item).collect();
            query = bind_finishes(query, &c);
        }
        query.fetch_all(&self.pool).await
    }
}

type GroupQuery<'q> = sqlx::query::QueryAs<'q, sqlx::Postgres, (i32, i64), PgArguments>;

/// The columns of [`CHECKPOINTS`]; they borrow from the batch: nothing is
/// copied but into the statement's buffer.
fn bind_checkpoints<'q>(query: GroupQuery<'q>, c: &[&'q Prepared]) -> GroupQuery<'q> {
    let text =
        |f: fn(&'q Prepared) -> &'q str| -> Vec<&'q str> { c.iter().map(|p| f(p)).collect() };
    let opt = |f: fn(&'q Prepared) -> Option<&'q str>| -> Vec<Option<&'q str>> {
        c.iter().map(|p| f(p)).collect()
    };
    let int = |f: fn(&Prepared) -> i64| -> Vec<i64> { c.iter().map(|p| f(p)).collect() };
    let opt_int =
        |f: fn(&Prepared) -> Option<i64>| -> Vec<Option<i64>> { c.iter().map(|p| f(p)).collect() };
    query
        .bind(text(|p| &p.run_id))
        .bind(int(|p| p.seq))
        .bind(opt(|p| p.current_node.as_deref()))
        .bind(now_ms())
        .bind(opt(|p| p.fence.as_ref().map(|f| f.owner.as_str())))
        .bind(opt_int(|p| {
            p.fence
                .as_ref()
                .map(|f| i64::try_from(f.generation).unwrap_or(i64::MAX))
        }))
        .bind(text(|p| &p.node_id))
        .bind(text(|p| &p.next_nodes))
        .bind(c.iter().map(|p| p.is_snapshot).collect::<Vec<bool>>())
        .bind(opt(|p| p.state.as_deref()))
        .bind(text(|p| &p.changes))
        .bind(text(|p| &p.state_hash))
        .bind(text(|p| &p.visits))
        .bind(int(|p| p.bytes))
        .bind(text(|p| &p.step.node_id))
        .bind(int(|p| p.step.attempt))
        .bind(text(|p| &p.step.status))
        .bind(int(|p| p.step.started_at))
        .bind(int(|p| p.step.duration_us))
        .bind(opt(|p| p.step.input_hash.as_deref()))
        .bind(opt(|p| p.step.output_hash.as_deref()))
        .bind(opt(|p| p.step.error.as_deref()))
        .bind(opt_int(|p| p.step.fuel_consumed))
        .bind(opt_int(|p| p.step.memory_peak_bytes))
        .bind(opt(|p| p.step.detail.as_deref()))
}

/// The columns of [`CREATES`].
fn bind_creates<'q>(query: GroupQuery<'q>, c: &[&'q PreparedRun]) -> GroupQuery<'q> {
    let text =
        |f: fn(&'q PreparedRun) -> &'q str| -> Vec<&'q str> { c.iter().map(|r| f(r)).collect() };
    let opt = |f: fn(&'q PreparedRun) -> Option<&'q str>| -> Vec<Option<&'q str>> {
        c.iter().map(|r| f(r)).collect()
    };
    query
        .bind(text(|r| &r.id))
        .bind(text(|r| &r.scenario_name))
        .bind(text(|r| &r.scenario_path))
        .bind(text(|r| &r.scenario_digest))
        .bind(text(|r| &r.status))
        .bind(text(|r| &r.input))
        .bind(text(|r| &r.start_node))
        .bind(opt(|r| r.task_id.as_deref()))
        .bind(text(|r| &r.next_nodes))
        .bind(c.iter().map(|r| r.is_snapshot).collect::<Vec<bool>>())
        .bind(opt(|r| r.state.as_deref()))
        .bind(text(|r| &r.changes))
        .bind(text(|r| &r.state_hash))
        .bind(text(|r| &r.visits))
        .bind(c.iter().map(|r| r.bytes).collect::<Vec<i64>>())
        .bind(now_ms())
        .bind(START_NODE)
}

/// The columns of [`FINISHES`].
fn bind_finishes<'q>(query: GroupQuery<'q>, c: &[&'q PreparedFinish]) -> GroupQuery<'q> {
    let opt = |f: fn(&'q PreparedFinish) -> Option<&'q str>| -> Vec<Option<&'q str>> {
        c.iter().map(|p| f(p)).collect()
    };
    query
        .bind(c.iter().map(|p| p.run_id.as_str()).collect::<Vec<&str>>())
        .bind(c.iter().map(|p| p.status.as_str()).collect::<Vec<&str>>())
        .bind(opt(|p| p.result.as_deref()))
        .bind(opt(|p| p.error.as_deref()))
        .bind(opt(|p| p.fence.as_ref().map(|f| f.owner.as_str())))
        .bind(
            c.iter()
                .map(|p| p.fence_generation)
                .collect::<Vec<Option<i64>>>(),
        )
        .bind(now_ms())
}

/// `kind` of a checkpoint commit, a new run and a finished run in the rows
/// the group statement returns.
const CHECKPOINT: i32 = 0;
const CREATE: i32 = 1;
const FINISH: i32 = 2;

/// One part of the group statement: its common table expressions, the
/// SELECT of the (kind, ordinal) of each write it made, and how many
/// parameters it takes (numbered from 1 here; the statement renumbers).
struct Part {
    ctes: &'static str,
    written: &'static str,
    params: usize,
}

/// The group statement for the kinds present, built once for each of the
/// seven combinations: a batch of one kind leaves the others out, so
/// the statement opens only the tables it writes.
fn group_statement(checkpoints: bool, creates: bool, finishes: bool) -> &'static str {
    static STATEMENTS: std::sync::LazyLock<Vec<String>> = std::sync::LazyLock::new(|| {
        (0..8)
            .map(|mask: usize| {
                let parts = [&CHECKPOINTS, &CREATES, &FINISHES];
                let mut ctes = Vec::new();
                let mut written = Vec::new();
                let mut base = 0;
                for (i, part) in parts.into_iter().enumerate() {
                    if mask & (1 << i) != 0 {
                        ctes.push(renumber(part.ctes, base));
                        written.push(renumber(part.written, base));
                        base += part.params;
                    }
                }
                format!("WITH {} {}", ctes.join(", "), written.join(" UNION ALL "))
            })
            .collect()
    });
    let mask = usize::from(checkpoints) | usize::from(creates) << 1 | usize::from(finishes) << 2;
    &STATEMENTS[mask]
}

/// `sql` with every parameter `$n` moved to `$(n + base)`.
fn renumber(sql: &str, base: usize) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            Ok(n) => out.push_str(&(n + base).to_string()),
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
    out
}

/// [`CHECKPOINT_STATEMENT`](super::CHECKPOINT_STATEMENT) for many runs (one
/// commit per run): every column is an array, `u` numbers the commits
/// (`ord`) and sorts them by run id. The UPDATE moves only the runs that
/// take their commit (fence, status, `last_seq + 1`, each re-checked on the
/// row as a lock holder left it); a commit left out writes nothing. The
/// runs' rows are locked as the join meets them, which with `u` sorted is
/// in id order, so two batches do not deadlock; should one ever (Postgres
/// detects it), the statement fails and its commits are retried. The task
/// rows (runs with a task id only) get the batch's last commit for each
/// task. `$4` is the time.
const CHECKPOINTS: Part = Part {
    ctes: "\
    u AS ( \
        SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::text[], $5::text[], \
            $6::bigint[], $7::text[], $8::text[], $9::bool[], $10::text[], $11::text[], \
            $12::text[], $13::text[], $14::bigint[], $15::text[], $16::bigint[], \
            $17::text[], $18::bigint[], $19::bigint[], $20::text[], $21::text[], \
            $22::text[], $23::bigint[], $24::bigint[], $25::text[]) WITH ORDINALITY \
        AS u(run_id, seq, current_node, owner, generation, node_id, next_nodes, \
            is_snapshot, state, changes, state_hash, visits, bytes, step_node, attempt, \
            status, started_at, duration_us, input_hash, output_hash, error, fuel, \
            memory, detail, ord) \
        ORDER BY run_id), \
    r AS ( \
        UPDATE runs SET last_seq = u.seq, current_node = u.current_node, updated_at = $4, \
            status = 'running' \
        FROM u \
        WHERE runs.id = u.run_id AND runs.last_seq = u.seq - 1 \
            AND runs.status IN ('queued', 'running', 'waiting') \
            AND (u.owner IS NULL \
                OR (runs.lease_owner = u.owner AND runs.lease_generation = u.generation)) \
        RETURNING runs.id, runs.task_id, u.ord), \
    c AS ( \
        INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, \
            changes, state_hash, visits, bytes, created_at) \
        SELECT u.run_id, u.seq, u.node_id, u.next_nodes, u.is_snapshot, u.state, \
            u.changes, u.state_hash, u.visits, u.bytes, $4 \
        FROM r JOIN u ON u.ord = r.ord), \
    s AS ( \
        INSERT INTO steps (run_id, seq, node_id, attempt, status, started_at, \
            duration_us, input_hash, output_hash, error, fuel_consumed, \
            memory_peak_bytes, detail) \
        SELECT u.run_id, u.seq, u.step_node, u.attempt, u.status, u.started_at, \
            u.duration_us, u.input_hash, u.output_hash, u.error, u.fuel, u.memory, \
            u.detail \
        FROM r JOIN u ON u.ord = r.ord), \
    t AS ( \
        INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, \
            state_hash, updated_at) \
        SELECT DISTINCT ON (r.task_id) r.task_id, u.run_id, u.seq, u.node_id, \
            u.next_nodes, u.state_hash, $4 \
        FROM r JOIN u ON u.ord = r.ord WHERE r.task_id IS NOT NULL \
        ORDER BY r.task_id, u.ord DESC \
        ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, \
            seq = excluded.seq, node_id = excluded.node_id, \
            next_nodes = excluded.next_nodes, state_hash = excluded.state_hash, \
            updated_at = excluded.updated_at)",
    written: "SELECT 0 AS kind, ord FROM r",
    params: 25,
};

/// `insert_run` for many runs: a run whose id exists already is left out
/// (`ON CONFLICT DO NOTHING`) and then created alone, which reports it.
/// The task rows get the batch's last run for each task. `$16` is the time,
/// `$17` the start node.
const CREATES: Part = Part {
    ctes: "\
    nu AS ( \
        SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::text[], $7::text[], $8::text[], $9::text[], $10::bool[], $11::text[], \
            $12::text[], $13::text[], $14::text[], $15::bigint[]) WITH ORDINALITY \
        AS nu(id, scenario_name, scenario_path, scenario_digest, status, input, start_node, \
            task_id, next_nodes, is_snapshot, state, changes, state_hash, visits, bytes, \
            ord)), \
    nr AS ( \
        INSERT INTO runs (id, scenario_name, scenario_path, scenario_digest, status, input, \
            current_node, last_seq, created_at, updated_at, task_id) \
        SELECT id, scenario_name, scenario_path, scenario_digest, status, input, \
            start_node, 0, $16, $16, task_id FROM nu ORDER BY ord \
        ON CONFLICT (id) DO NOTHING \
        RETURNING id, task_id), \
    nc AS ( \
        INSERT INTO checkpoints (run_id, seq, node_id, next_nodes, is_snapshot, state, \
            changes, state_hash, visits, bytes, created_at) \
        SELECT nu.id, 0, $17, nu.next_nodes, nu.is_snapshot, nu.state, nu.changes, \
            nu.state_hash, nu.visits, nu.bytes, $16 \
        FROM nr JOIN nu ON nu.id = nr.id), \
    nt AS ( \
        INSERT INTO task_checkpoints (task_id, run_id, seq, node_id, next_nodes, \
            state_hash, updated_at) \
        SELECT DISTINCT ON (nr.task_id) nr.task_id, nr.id, 0, $17, nu.next_nodes, \
            nu.state_hash, $16 \
        FROM nr JOIN nu ON nu.id = nr.id WHERE nr.task_id IS NOT NULL \
        ORDER BY nr.task_id, nu.ord DESC \
        ON CONFLICT (task_id) DO UPDATE SET run_id = excluded.run_id, \
            seq = excluded.seq, node_id = excluded.node_id, \
            next_nodes = excluded.next_nodes, state_hash = excluded.state_hash, \
            updated_at = excluded.updated_at)",
    written: "SELECT 1, nu.ord FROM nr JOIN nu ON nu.id = nr.id",
    params: 17,
};

/// `update_finished` for many runs: a run that is not active, or whose
/// fence does not hold, is left out and then finished alone, which says
/// why. `$7` is the time.
const FINISHES: Part = Part {
    ctes: "\
    fr AS ( \
        UPDATE runs SET status = fu.status, result = fu.result, error = fu.error, \
            lease_owner = NULL, lease_expires_at = NULL, heartbeat_at = NULL, \
            updated_at = $7 \
        FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], \
            $6::bigint[]) WITH ORDINALITY AS fu(id, status, result, error, owner, \
            generation, ord) \
        WHERE runs.id = fu.id AND runs.status IN ('queued', 'running', 'waiting') \
            AND (fu.owner IS NULL \
                OR (runs.lease_owner = fu.owner AND runs.lease_generation = fu.generation)) \
        RETURNING fu.ord)",
    written: "SELECT 2, ord FROM fr",
    params: 7,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renumbering_moves_every_parameter() {
        assert_eq!(
            renumber("$1, $4::text[], $25)", 17),
            "$18, $21::text[], $42)"
        );
        assert_eq!(renumber("no parameters", 5), "no parameters");
        assert_eq!(renumber("a $ alone", 5), "a $ alone");
    }

    #[test]
    fn each_statement_numbers_its_parameters_in_order() {
        for mask in 1..8usize {
            let statement = group_statement(mask & 1 != 0, mask & 2 != 0, mask & 4 != 0);
            let mut expected = 0;
            for (i, part) in [&CHECKPOINTS, &CREATES, &FINISHES].into_iter().enumerate() {
                if mask & (1 << i) != 0 {
                    expected += part.params;
                }
            }
            let mut numbers: Vec<usize> = statement
                .split('$')
                .skip(1)
                .filter_map(|s| {
                    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
                    s[..digits].parse().ok()
                })
                .collect();
            numbers.sort_unstable();
            numbers.dedup();
            assert_eq!(numbers, (1..=expected).collect::<Vec<_>>(), "{statement}");
        }
    }
}
