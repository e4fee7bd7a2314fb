//! `host worker`: claims queued runs from a shared database and runs them,
//! many processes (and machines) side by side. The database is the
//! coordination engine; there is no cluster of our own.
//!
//! A worker loop: claim a run (a dead runner's run whose lease expired
//! first, then a waiting run whose wait timed out, else the queued one of
//! the highest priority, oldest first, an answered run among them; the last
//! two only as their scenario's concurrency limit and key let them start:
//! the store decides, `FOR UPDATE SKIP LOCKED` on Postgres),
//! hold its lease through the lease service ([`crate::lease`]: a store
//! handle fenced by the lease, renewed every third of its time to live), run
//! it from its last checkpoint through the engine on that handle, and stop
//! running a run whose lease was lost. Up to `concurrency` runs at a
//! time. On shutdown it claims nothing more, lets in-flight runs finish for a
//! grace period, then stops them (a node in flight is either committed or
//! discarded whole) and releases their leases so another worker resumes
//! them at once instead of after expiry.
//!
//! With a [`Scheduler`] (`host worker --schedules`), a task beside the
//! loop queues the runs of schedule ticks as they come due.
//!
//! Owns: the claim/run/release cycle. Must not: print (the CLI turns
//! [`WorkerEvent`]s into lines), renew leases itself (the lease service
//! does), or write to a run without its lease.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde_json::json;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

use crate::lease::RunLease;
use crate::schedule::{self, Scheduler};
use crate::{Engine, EngineError, EventSink, FailureCode, NoEvents};
use skillhost_runtime::Runtime;
use skillhost_scenario::LoadedScenario;
use skillhost_store::{
    Backoff, Claim, Lease, Link, LinkEvent, RunRow, RunStatus, Store, StoreError,
};

/// How a worker behaves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The lease owner id (unique per process; see `store::new_owner_id`).
    pub owner: String,
    /// Runs executed at the same time.
    pub concurrency: usize,
    /// How long a lease lives without a heartbeat; a dead worker's runs are
    /// taken over this long after its last heartbeat.
    pub lease_ttl: Duration,
    /// How often to look for work when the queue is empty.
    pub poll_interval: Duration,
    /// On shutdown, how long in-flight runs may take to finish before they
    /// are stopped and released.
    pub grace: Duration,
    /// Exit once nothing is claimable and nothing is in flight.
    pub exit_when_idle: bool,
    /// How the scenario of a claimed run is loaded.
    pub loader: ScenarioLoader,
    /// Where the runs it executes report their events (`host serve` sends
    /// a streaming node's tokens to its clients); `None`: nowhere.
    pub run_events: Option<RunEvents>,
}

/// The event sink of the runs a worker executes ([`WorkerConfig::run_events`]).
#[derive(Clone)]
pub struct RunEvents(pub Arc<dyn EventSink>);

impl fmt::Debug for RunEvents {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunEvents")
    }
}

/// How a worker loads a scenario file: the file alone by default
/// (`skillhost_scenario::load`, local components only); `host worker`
/// gives one that also resolves `oci://` components as `host run` does
/// (the scenario's lock, the registry cache). It is called on a blocking
/// thread and returns the checker's report as text on failure.
#[derive(Clone)]
pub struct ScenarioLoader(Arc<LoadFn>);

type LoadFn = dyn Fn(&Path, &Runtime) -> Result<LoadedScenario, String> + Send + Sync;

impl ScenarioLoader {
    pub fn new(
        load: impl Fn(&Path, &Runtime) -> Result<LoadedScenario, String> + Send + Sync + 'static,
    ) -> Self {
        ScenarioLoader(Arc::new(load))
    }
}

impl Default for ScenarioLoader {
    fn default() -> Self {
        ScenarioLoader::new(|path, runtime| {
            skillhost_scenario::load(path, runtime).map_err(|report| report.to_string())
        })
    }
}

impl fmt::Debug for ScenarioLoader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ScenarioLoader")
    }
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            owner: skillhost_store::new_owner_id("worker"),
            concurrency: 4,
            lease_ttl: crate::lease::DEFAULT_TTL,
            poll_interval: Duration::from_millis(250),
            grace: Duration::from_secs(10),
            exit_when_idle: false,
            loader: ScenarioLoader::default(),
            run_events: None,
        }
    }
}

/// What a worker did, for logs and `--json`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum WorkerEvent {
    Claimed {
        run_id: String,
        scenario: String,
        generation: u64,
        /// The checkpoint it resumes from (0 = a fresh run).
        from_seq: u64,
    },
    Finished {
        run_id: String,
        status: String,
        nodes_run: usize,
    },
    /// Another runner took the run over; this worker stopped running it.
    LeaseLost {
        run_id: String,
        message: String,
    },
    /// Given back to the queue (shutdown, or a database failure).
    Released {
        run_id: String,
        reason: String,
    },
    /// Something went wrong that the worker survives (it retries).
    Error {
        message: String,
    },
    /// The database stopped answering (a failover, a restart): the store
    /// retries every statement with bounded, jittered backoff and the
    /// worker claims nothing new until it answers again.
    DatabaseUnreachable {
        message: String,
    },
    /// The database answers again, after an outage of `out_ms`.
    DatabaseBack {
        out_ms: u64,
    },
    Stopping {
        in_flight: usize,
    },
    /// A schedule's tick was due and this worker queued its run.
    Scheduled {
        run_id: String,
        scenario: String,
        schedule: String,
        /// The tick, UTC ISO 8601.
        tick: String,
    },
    /// A schedule missed more ticks than the catch-up limit: the older
    /// ones, up to and including this one, were not queued.
    TicksSkipped {
        scenario: String,
        schedule: String,
        newest_skipped: String,
        catch_up: usize,
    },
}

/// Counts of what a worker did, returned when it stops.
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct WorkerReport {
    pub completed: usize,
    pub failed: usize,
    /// Runs that stopped to wait for an answer at an approval node.
    pub waiting: usize,
    /// Runs that ended as cancelled (at a node boundary).
    pub cancelled: usize,
    pub released: usize,
    pub lease_lost: usize,
    pub errors: usize,
    /// Schedule ticks whose runs this worker queued.
    pub scheduled: usize,
}

/// Receives worker events (the CLI prints them).
pub type WorkerEvents = Arc<dyn Fn(&WorkerEvent) + Send + Sync>;

/// Loaded scenarios by path, reloaded when the file changes.
#[derive(Default)]
struct Scenarios {
    by_path: Mutex<HashMap<PathBuf, Arc<LoadedScenario>>>,
}

impl Scenarios {
    /// The scenario a run was started from, as loaded by this worker. The
    /// engine then checks that its digest and its components' are the
    /// run's. A scenario loaded earlier is reused while its digest and its
    /// components are the run's; otherwise it is loaded again (the file
    /// changed, or a registry tag now names other code), so one worker
    /// serves runs queued before and after a change.
    async fn get(
        &self,
        runtime: &Runtime,
        loader: &ScenarioLoader,
        run: &RunRow,
    ) -> Result<Arc<LoadedScenario>, String> {
        let path = PathBuf::from(&run.scenario_path);
        if let Some(loaded) = self.by_path.lock().unwrap().get(&path)
            && loaded.scenario.digest == run.scenario_digest
            && run
                .provenance
                .as_ref()
                .is_none_or(|p| p.components == loaded.component_digests())
        {
            return Ok(loaded.clone());
        }
        crate::kept::restore_scenario_file(run)?;
        let runtime = runtime.clone();
        let load_path = path.clone();
        let load = loader.0.clone();
        let loaded = tokio::task::spawn_blocking(move || load(&load_path, &runtime))
            .await
            .map_err(|e| format!("loading scenario `{}` panicked: {e}", path.display()))?
            .map_err(|report| {
                format!(
                    "scenario `{}` of run `{}` cannot be loaded on this worker:\n{report}",
                    path.display(),
                    run.id
                )
            })?;
        let loaded = Arc::new(loaded);
        self.by_path.lock().unwrap().insert(path, loaded.clone());
        Ok(loaded)
    }
}

/// Runs the worker loop until `shutdown` turns true (or, with
/// `exit_when_idle`, until there is nothing left to do).
pub async fn run(
    store: Store,
    runtime: Runtime,
    config: WorkerConfig,
    shutdown: watch::Receiver<bool>,
    events: WorkerEvents,
) -> WorkerReport {
    run_with_schedules(store, runtime, config, None, shutdown, events).await
}

/// [`run`], queueing the runs of `scheduler`'s ticks as they come due
/// (beside the claims, so a worker busy with runs still queues them). A
/// first pass is made before anything is claimed; with `exit_when_idle`
/// it is the only one: the worker runs the ticks due when it started
/// (missed ones, up to the catch-up limit) and exits.
pub async fn run_with_schedules(
    store: Store,
    runtime: Runtime,
    config: WorkerConfig,
    scheduler: Option<Scheduler>,
    shutdown: watch::Receiver<bool>,
    events: WorkerEvents,
) -> WorkerReport {
    let scheduled = Arc::new(AtomicUsize::new(0));
    let scheduling = match scheduler {
        Some(mut scheduler) => {
            let report =
                |events: &WorkerEvents, scheduled: &AtomicUsize, done: Vec<WorkerEvent>| {
                    for event in done {
                        if matches!(event, WorkerEvent::Scheduled { .. }) {
                            scheduled.fetch_add(1, Ordering::Relaxed);
                        }
                        events(&event);
                    }
                };
            report(
                &events,
                &scheduled,
                scheduler.pass(&store, schedule::now_ms()).await,
            );
            // A batch worker queues what was due when it started, runs it
            // and exits: ticks coming due meanwhile would keep it busy.
            if config.exit_when_idle {
                None
            } else {
                let (store, events, scheduled, mut shutdown) = (
                    store.clone(),
                    events.clone(),
                    scheduled.clone(),
                    shutdown.clone(),
                );
                let cap = config.poll_interval.max(Duration::from_millis(10));
                Some(tokio::spawn(async move {
                    loop {
                        let wait = scheduler.wait(schedule::now_ms(), cap);
                        tokio::select! {
                            _ = tokio::time::sleep(wait) => {}
                            _ = shutdown.changed() => return,
                        }
                        report(
                            &events,
                            &scheduled,
                            scheduler.pass(&store, schedule::now_ms()).await,
                        );
                    }
                }))
            }
        }
        None => None,
    };
    let stopping = shutdown.clone();
    let mut report = claim_and_run(store, runtime, config, shutdown, events).await;
    if let Some(scheduling) = scheduling {
        if *stopping.borrow() {
            // Asked to stop: the scheduler sees it too and returns once a
            // pass in flight has reported what it queued. Aborted there, it
            // could queue a tick's run and never say so.
            let _ = scheduling.await;
        } else {
            scheduling.abort();
        }
    }
    report.scheduled = scheduled.load(Ordering::Relaxed);
    report
}

async fn claim_and_run(
    store: Store,
    runtime: Runtime,
    config: WorkerConfig,
    mut shutdown: watch::Receiver<bool>,
    events: WorkerEvents,
) -> WorkerReport {
    let config = Arc::new(config);
    let scenarios = Arc::new(Scenarios::default());
    let slots = Arc::new(Semaphore::new(config.concurrency.max(1)));
    // Tells in-flight runs to stop (after the grace period).
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut tasks: JoinSet<Outcome> = JoinSet::new();
    let mut report = WorkerReport::default();
    // A claim that failed is tried again after a doubling, jittered delay of
    // at most CLAIM_BACKOFF_CAP.
    let mut backoff = Backoff::new(config.poll_interval, CLAIM_BACKOFF_CAP);
    let link = store
        .link()
        .map(|link| tokio::spawn(say_link_changes(link.clone(), events.clone())));

    loop {
        while let Some(done) = tasks.try_join_next() {
            tally(&mut report, done);
        }
        if *shutdown.borrow() {
            break;
        }
        let permit = tokio::select! {
            permit = slots.clone().acquire_owned() => permit.expect("never closed"),
            _ = shutdown.changed() => continue,
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                tally(&mut report, done);
                continue;
            }
        };
        match store.claim(&config.owner, config.lease_ttl).await {
            Ok(Some(Claim {
                run,
                lease,
                took_over,
            })) => {
                if took_over {
                    crate::metered::lease_taken_over();
                }
                backoff.reset();
                events(&WorkerEvent::Claimed {
                    run_id: run.id.clone(),
                    scenario: run.scenario_name.clone(),
                    generation: lease.generation,
                    from_seq: run.last_seq,
                });
                let job = Job {
                    store: store.clone(),
                    runtime: runtime.clone(),
                    scenarios: scenarios.clone(),
                    config: config.clone(),
                    events: events.clone(),
                    stop: stop_rx.clone(),
                };
                tasks.spawn(async move {
                    let outcome = job.run(run, lease).await;
                    drop(permit);
                    outcome
                });
            }
            Ok(None) => {
                drop(permit);
                if config.exit_when_idle && tasks.is_empty() {
                    break;
                }
                idle(&mut shutdown, &mut tasks, &mut report, config.poll_interval).await;
            }
            Err(e) => {
                drop(permit);
                report.errors += 1;
                events(&WorkerEvent::Error {
                    message: format!("cannot claim a run: {e}"),
                });
                let delay = backoff.next_delay();
                idle(&mut shutdown, &mut tasks, &mut report, delay).await;
            }
        }
    }

    // Shutdown: nothing new; in-flight runs get the grace period, then stop.
    if !tasks.is_empty() {
        events(&WorkerEvent::Stopping {
            in_flight: tasks.len(),
        });
        let deadline = tokio::time::Instant::now() + config.grace;
        loop {
            tokio::select! {
                done = tasks.join_next() => match done {
                    Some(done) => tally(&mut report, done),
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => {
                    let _ = stop_tx.send(true);
                    while let Some(done) = tasks.join_next().await {
                        tally(&mut report, done);
                    }
                    break;
                }
            }
        }
    }
    if let Some(link) = link {
        link.abort();
    }
    report
}

/// The longest a worker waits before claiming again after a failed claim.
pub const CLAIM_BACKOFF_CAP: Duration = Duration::from_secs(5);

/// Turns the store's link changes into worker events: the database is
/// unreachable, and later back (with how long it was out).
async fn say_link_changes(link: Link, events: WorkerEvents) {
    let mut changes = link.subscribe();
    loop {
        match changes.recv().await {
            Ok(LinkEvent::Unreachable { message }) => {
                events(&WorkerEvent::DatabaseUnreachable { message })
            }
            Ok(LinkEvent::Back { out_for }) => events(&WorkerEvent::DatabaseBack {
                out_ms: u64::try_from(out_for.as_millis()).unwrap_or(u64::MAX),
            }),
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Waits for `delay`, a shutdown, or a finished run, whichever comes first.
async fn idle(
    shutdown: &mut watch::Receiver<bool>,
    tasks: &mut JoinSet<Outcome>,
    report: &mut WorkerReport,
    delay: Duration,
) {
    tokio::select! {
        _ = tokio::time::sleep(delay) => {}
        _ = shutdown.changed() => {}
        Some(done) = tasks.join_next(), if !tasks.is_empty() => tally(report, done),
    }
}

fn tally(report: &mut WorkerReport, done: Result<Outcome, tokio::task::JoinError>) {
    match done {
        Ok(Outcome::Completed) => report.completed += 1,
        Ok(Outcome::Failed) => report.failed += 1,
        Ok(Outcome::Waiting) => report.waiting += 1,
        Ok(Outcome::Cancelled) => report.cancelled += 1,
        Ok(Outcome::Released) => report.released += 1,
        Ok(Outcome::LeaseLost) => report.lease_lost += 1,
        Ok(Outcome::Error) | Err(_) => report.errors += 1,
    }
}

enum Outcome {
    Completed,
    Failed,
    Waiting,
    Cancelled,
    Released,
    LeaseLost,
    Error,
}

/// One claimed run.
struct Job {
    store: Store,
    runtime: Runtime,
    scenarios: Arc<Scenarios>,
    config: Arc<WorkerConfig>,
    events: WorkerEvents,
    stop: watch::Receiver<bool>,
}

impl Job {
    async fn run(self, run: RunRow, lease: Lease) -> Outcome {
        let run_id = run.id.clone();
        let lease = RunLease::hold(&self.store, lease, self.config.lease_ttl);
        let fenced = lease.store().clone();

        let loaded = match self
            .scenarios
            .get(&self.runtime, &self.config.loader, &run)
            .await
        {
            Ok(loaded) => loaded,
            Err(message) => {
                // The run cannot make progress anywhere this file is missing
                // or broken: fail it with the reason rather than bounce it
                // between workers forever.
                let error = json!({"code": FailureCode::ScenarioUnavailable, "message": message});
                return match fenced
                    .finish_run(&run_id, RunStatus::Failed, None, Some(&error))
                    .await
                {
                    Ok(()) => {
                        crate::metered::claimed_run_failed(&run.scenario_name);
                        (self.events)(&WorkerEvent::Finished {
                            run_id,
                            status: "failed".into(),
                            nodes_run: 0,
                        });
                        Outcome::Failed
                    }
                    Err(e) => self.store_failure(lease, e).await,
                };
            }
        };

        let events: Arc<dyn EventSink> = match &self.config.run_events {
            Some(events) => events.0.clone(),
            None => Arc::new(NoEvents),
        };
        // The worker's kv is the store's, outside the run's lease: a skill's
        // `set` is not a checkpoint of its run.
        let engine = Engine::new(Some(fenced.clone()), events).with_kv(Some(
            crate::kv::StoreKv::over(self.store.clone(), tokio::runtime::Handle::current()),
        ));
        skillhost_store::failpoint::hit(|| "worker-before-resume".into());
        let mut stop = self.stop.clone();
        let result = {
            let resume = engine.resume(&loaded, &run_id);
            tokio::pin!(resume);
            // Whether a renewal that found the lease gone found the run
            // ended by this worker's own last commit, which writes the
            // run's end and so gives the lease up before the engine returned.
            let mut ended_here = false;
            loop {
                let message = tokio::select! {
                    // The engine's result first: a run that waits for an answer
                    // gave its lease back, and a renewal may find it gone at once.
                    biased;
                    result = &mut resume => break Ran::Ended(result),
                    message = lease.lost(), if !ended_here => message,
                    _ = stop.wait_for(|stop| *stop) => break Ran::Stopped,
                };
                if self.ended_under(lease.lease()).await {
                    ended_here = true;
                    continue;
                }
                break Ran::LeaseLost(message);
            }
        };
        match result {
            Ran::Stopped => self.release(lease, "the worker is shutting down").await,
            Ran::LeaseLost(message) => {
                (self.events)(&WorkerEvent::LeaseLost { run_id, message });
                Outcome::LeaseLost
            }
            Ran::Ended(Ok(outcome)) => {
                (self.events)(&WorkerEvent::Finished {
                    run_id,
                    status: outcome.status.as_str().into(),
                    nodes_run: outcome.nodes_run,
                });
                match outcome.status {
                    RunStatus::Completed => Outcome::Completed,
                    RunStatus::Waiting => Outcome::Waiting,
                    RunStatus::Cancelled => Outcome::Cancelled,
                    _ => Outcome::Failed,
                }
            }
            Ran::Ended(Err(EngineError::Store(e))) => self.store_failure(lease, e).await,
            Ran::Ended(Err(
                e @ (EngineError::ScenarioChanged { .. } | EngineError::ComponentsChanged { .. }),
            )) => {
                let code = match e {
                    EngineError::ScenarioChanged { .. } => FailureCode::ScenarioChanged,
                    _ => FailureCode::ComponentsChanged,
                };
                let error = json!({"code": code, "message": e.to_string()});
                match fenced
                    .finish_run(&run_id, RunStatus::Failed, None, Some(&error))
                    .await
                {
                    Ok(()) => {
                        crate::metered::claimed_run_failed(&run.scenario_name);
                        Outcome::Failed
                    }
                    Err(e) => self.store_failure(lease, e).await,
                }
            }
            // Finished before this worker read it, though it held the
            // lease: another runner took the run over (this worker was
            // paused past the lease's expiry) and finished it. This worker
            // wrote nothing; it lost the lease, and says so.
            Ran::Ended(Err(EngineError::RunFinished { id, status })) => {
                (self.events)(&WorkerEvent::LeaseLost {
                    run_id,
                    message: format!(
                        "run `{id}` is {status} already: another runner took it over after \
                         this worker's lease expired"
                    ),
                });
                Outcome::LeaseLost
            }
            Ran::Ended(Err(e)) => {
                (self.events)(&WorkerEvent::Error {
                    message: format!("run `{run_id}`: {e}"),
                });
                self.release(lease, &e.to_string()).await;
                Outcome::Error
            }
        }
    }

    /// Whether the run of `lease` has ended under that very lease: no
    /// other runner took it (its generation is still this lease's), so
    /// the end was written by this worker's engine (a completed run's end
    /// goes with its last checkpoint). False when it cannot be read: the
    /// lease is then taken as lost, as before.
    async fn ended_under(&self, lease: &Lease) -> bool {
        match self.store.run(&lease.run_id).await {
            Ok(Some(run)) => run.status.is_finished() && run.lease_generation == lease.generation,
            _ => false,
        }
    }

    /// A store error while running: a lost lease means another worker has
    /// the run; anything else gives the run back so it is retried.
    async fn store_failure(&self, lease: RunLease, error: StoreError) -> Outcome {
        if error.is_lease_lost() {
            (self.events)(&WorkerEvent::LeaseLost {
                run_id: lease.lease().run_id.clone(),
                message: error.to_string(),
            });
            return Outcome::LeaseLost;
        }
        (self.events)(&WorkerEvent::Error {
            message: error.to_string(),
        });
        self.release(lease, &error.to_string()).await;
        Outcome::Error
    }

    async fn release(&self, lease: RunLease, reason: &str) -> Outcome {
        let run_id = lease.lease().run_id.clone();
        match lease.release().await {
            Ok(true) => {
                (self.events)(&WorkerEvent::Released {
                    run_id,
                    reason: reason.to_owned(),
                });
                Outcome::Released
            }
            // Already gone (finished, or taken over): nothing to give back.
            Ok(false) => Outcome::LeaseLost,
            // The lease will expire and the run be taken over then.
            Err(e) => {
                (self.events)(&WorkerEvent::Error {
                    message: format!("cannot release run `{run_id}`: {e}"),
                });
                Outcome::Error
            }
        }
    }
}

/// How running a claimed run ended.
// One per run, matched at once: boxing the outcome would buy nothing.
#[allow(clippy::large_enum_variant)]
enum Ran {
    /// The engine returned.
    Ended(Result<crate::RunOutcome, EngineError>),
    /// A renewal found the lease gone; the run was dropped mid-way.
    LeaseLost(String),
    /// The worker is shutting down and the grace period is over.
    Stopped,
}
