//! The run service: what every face (the `host` command line, the MCP
//! server, the HTTP API) does to the runs of one store, written once.
//! Start a run here or queue it for a worker, record an answer, continue
//! an answered run, resume one, cancel one. A face parses its request,
//! calls the service and renders the result and the errors' remedies in
//! its own words ([`crate::Remedies`]); none of them takes a lease or
//! builds an [`Engine`] over a fenced store itself.
//!
//! Continuing a run is one flow: take the run's lease (or learn who holds
//! it: then that runner, a worker or another face, continues it, and this
//! call runs nothing), resume the run on the store fenced by the lease, give
//! the lease back. The lease decides between racing continues: a second
//! continue of the same answered run gets [`Continued::HeldBy`] while the
//! first runs, and a refusal once it has ended (the store leases no
//! finished run) or while it waits again ([`EngineError::Waiting`]); the
//! run is never run twice.
//!
//! Must not: print, or name a face.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::lease::{self, RunLease};
use crate::queue::{self, RunRequest};
use crate::{Answered, Engine, EngineError, EventSink, RunOutcome, Started};
use skillhost_scenario::LoadedScenario;
use skillhost_store::{Admission, Cancelled, Store, StoreError, new_owner_id};

/// What [`RunService::continue_run`] did.
#[derive(Debug, Clone)]
// One per call, matched at once: boxing the outcome would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Continued {
    /// This process held the run's lease and ran it to its end or its next
    /// wait.
    Ran(RunOutcome),
    /// Another runner (`owner`: a worker, another face's continue) holds
    /// the run's lease: it continues the run there, and nothing ran here.
    /// `message` is the store's refusal, naming the holder and the expiry.
    HeldBy { owner: String, message: String },
}

/// What [`RunService::enqueue`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Queued {
    /// It queued a new run.
    Created { run_id: String },
    /// A live run holds the request's idempotency key: nothing was queued.
    Existing { run_id: String },
}

/// The runs of one store, as every face acts on them.
pub struct RunService {
    store: Store,
    events: Arc<dyn EventSink>,
    /// The lease's time to live while this process runs a run.
    ttl: Duration,
}

impl RunService {
    /// The service over `store`, whose runs report their events to `events`.
    pub fn new(store: Store, events: Arc<dyn EventSink>) -> Self {
        RunService {
            store,
            events,
            ttl: lease::DEFAULT_TTL,
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The same service, holding the leases of the runs it continues for
    /// `ttl` (renewed every third of it): how long a run this process was
    /// running waits, after the process died, before a worker takes it
    /// over (`host mcp --lease-ttl`).
    pub fn with_lease_ttl(mut self, ttl: Duration) -> RunService {
        self.ttl = ttl;
        self
    }

    /// The same service, its runs reporting to `events` instead (a face
    /// that follows one call's run: MCP's progress and log notifications).
    pub fn with_events(&self, events: Arc<dyn EventSink>) -> RunService {
        RunService {
            store: self.store.clone(),
            events,
            ttl: self.ttl,
        }
    }

    /// An engine over the store (unfenced): for what takes no lease.
    fn engine(&self) -> Engine {
        Engine::new(Some(self.store.clone()), self.events.clone())
    }

    /// Creates a run of `loaded` and runs it here to its end or its first
    /// wait ([`Engine::start_with`]).
    pub async fn start(
        &self,
        loaded: &LoadedScenario,
        input: Value,
        request: RunRequest,
    ) -> Result<Started, EngineError> {
        self.engine().start_with(loaded, input, request).await
    }

    /// Creates a run of `loaded` queued for a worker (the HTTP API's
    /// start): its id, or the live run that holds the request's
    /// idempotency key.
    pub async fn enqueue(
        &self,
        loaded: &LoadedScenario,
        input: Value,
        request: RunRequest,
    ) -> Result<Queued, EngineError> {
        let (run, options) = queue::new_queued_run(loaded, input, request)?;
        Ok(match self.store.enqueue_run_with(&run, &options).await? {
            Admission::Created => Queued::Created { run_id: run.id },
            Admission::Existing { run_id } => Queued::Existing { run_id },
        })
    }

    /// Records `answer` by `by` for the run waiting at an approval node
    /// ([`Engine::answer`]); the run is queued again, to be continued
    /// ([`RunService::continue_run`]) or claimed by a worker.
    pub async fn answer(
        &self,
        run_id: &str,
        answer: Value,
        by: &str,
    ) -> Result<Answered, EngineError> {
        self.engine().answer(run_id, answer, by).await
    }

    /// Whether an answered run is continued by the face that answered it
    /// (`false`: left queued for a worker), unless the face is asked
    /// otherwise: the store's policy ([`Store::queues_for_workers`]).
    pub fn continues_answered_runs(&self) -> bool {
        !self.store.queues_for_workers()
    }

    /// Continues an unfinished run (an answered one, one a crash left):
    /// takes its lease as `who` (or learns who holds it:
    /// [`Continued::HeldBy`]), resumes it on the store fenced by the lease,
    /// with its scenario or components changed when `allow_changed`, and
    /// gives the lease back. A run that finished gives it back itself; one
    /// that goes on waiting goes back to the queue at once. Failing to give
    /// it back only delays that until the lease expires, so the outcome is
    /// returned either way.
    pub async fn continue_run(
        &self,
        loaded: &LoadedScenario,
        run_id: &str,
        who: &str,
        allow_changed: bool,
    ) -> Result<Continued, EngineError> {
        let lease = match RunLease::acquire(&self.store, run_id, &new_owner_id(who), self.ttl).await
        {
            Ok(lease) => lease,
            Err(e) => {
                if let StoreError::Leased { owner, .. } = &e {
                    return Ok(Continued::HeldBy {
                        owner: owner.clone(),
                        message: e.to_string(),
                    });
                }
                return Err(e.into());
            }
        };
        let engine = Engine::new(Some(lease.store().clone()), self.events.clone());
        let outcome = engine.resume_with(loaded, run_id, allow_changed).await;
        let _ = lease.release().await;
        outcome.map(Continued::Ran)
    }

    /// Cancels the run (and its unfinished child runs) on behalf of `by`
    /// ([`Engine::cancel`]).
    pub async fn cancel(&self, run_id: &str, by: &str) -> Result<Cancelled, EngineError> {
        self.engine().cancel(run_id, by).await
    }
}
