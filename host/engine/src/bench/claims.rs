//! Claim isolation at scale (`host bench claims`): many workers on one
//! Postgres drain a queue of runs with concurrency keys, a concurrency limit
//! and priorities, and the benchmark both times the claims and checks that
//! the claims were isolated.
//!
//! The queue: `runs` queued runs over three scenarios, created before the
//! clock starts: half under one concurrency key each of `keys` keys
//! (`claims-keyed`: one running run per key), a quarter under a scenario
//! limit (`claims-limited`, [`LIMIT`] running at once), a quarter with no
//! flow control (`claims-plain`); priorities from -2 to 2 spread over all
//! of them. `workers` tasks over `handles` store handles (each its own
//! connection pool, as separate processes would have) claim, hold the run
//! for `hold`, finish it, and claim again, until every run has finished.
//!
//! Checked while it runs, without false alarms: a run claimed twice (a set
//! of claimed ids); a key or the limit exceeded, by counting each run from
//! just after its claim returned to just before its finish is sent, an
//! interval inside the time the database holds it running, so a count above
//! one (the limit) means two runs really ran at once. Any store error ends
//! the benchmark with it (serialisation failures and deadlocks are the
//! store's to retry, never the caller's). The figures: claims per second
//! over the drain, and the latency of a claim that took a run (median and
//! 99th percentile); claims that found nothing are counted apart.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost_store::{
    InitialState, NewRun, Provenance, RunOptions, RunStatus, Store, StoreOptions, SyncMode,
};

use super::{BenchError, environment, failed, median, round};

/// Running runs `claims-limited` allows at once.
pub const LIMIT: u32 = 8;

/// How long the drain may take before the benchmark gives up.
const DRAIN_FOR: Duration = Duration::from_secs(300);

/// A lease long enough that no claim in the benchmark expires.
const TTL: Duration = Duration::from_secs(600);

/// What the claims benchmark runs.
#[derive(Debug, Clone, Copy)]
pub struct ClaimsSettings {
    /// Queued runs to claim.
    pub runs: usize,
    /// Concurrent claiming tasks.
    pub workers: usize,
    /// Store handles (connection pools) the workers are spread over.
    pub handles: usize,
    /// Concurrency keys of the keyed half.
    pub keys: usize,
    /// How long a worker holds a run between its claim and its finish.
    pub hold: Duration,
}

impl Default for ClaimsSettings {
    fn default() -> Self {
        ClaimsSettings {
            runs: 1000,
            workers: 64,
            handles: 8,
            keys: 40,
            hold: Duration::from_millis(1),
        }
    }
}

/// What the claims benchmark measured and checked.
#[derive(Debug, Clone)]
pub struct ClaimsFigures {
    /// Runs claimed (each once: the benchmark fails otherwise).
    pub claimed: usize,
    /// Claims that found nothing claimable (a key or the limit held every
    /// queued run back, or the queue was empty).
    pub empty_claims: u64,
    /// From the first claim to the last finish.
    pub elapsed: Duration,
    pub claims_per_s: f64,
    /// A claim that took a run, median and 99th percentile.
    pub claim_median: Duration,
    pub claim_p99: Duration,
    /// The most runs of one key, and of the limited scenario, seen running
    /// at once (at most 1 and [`LIMIT`]).
    pub most_per_key: usize,
    pub most_limited: usize,
    /// The database, its password replaced by `***`.
    pub database: String,
    pub settings: ClaimsSettings,
}

impl ClaimsFigures {
    /// The figures as `host bench claims --json` prints them.
    pub fn to_json(&self) -> Value {
        json!({
            "runs": self.settings.runs,
            "workers": self.settings.workers,
            "handles": self.settings.handles,
            "keys": self.settings.keys,
            "limit": LIMIT,
            "hold_ms": round(self.settings.hold.as_secs_f64() * 1e3, 3),
            "claimed": self.claimed,
            "claimed_twice": 0,
            "empty_claims": self.empty_claims,
            "elapsed_s": round(self.elapsed.as_secs_f64(), 3),
            "claims_per_s": round(self.claims_per_s, 0),
            "claim_ms_median": round(self.claim_median.as_secs_f64() * 1e3, 3),
            "claim_ms_p99": round(self.claim_p99.as_secs_f64() * 1e3, 3),
            "most_running_per_key": self.most_per_key,
            "most_running_limited": self.most_limited,
            "database": self.database,
        })
    }
}

impl fmt::Display for ClaimsFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "claims on {}: {} runs, {} workers over {} handles, {} keys, limit {}, hold {:?}",
            self.database,
            self.settings.runs,
            self.settings.workers,
            self.settings.handles,
            self.settings.keys,
            LIMIT,
            self.settings.hold
        )?;
        writeln!(
            f,
            "  claims per second      {:>10.0}  ({} claimed in {:.2} s, {} found nothing)",
            self.claims_per_s,
            self.claimed,
            self.elapsed.as_secs_f64(),
            self.empty_claims
        )?;
        writeln!(
            f,
            "  claim latency median   {:>10.3} ms",
            self.claim_median.as_secs_f64() * 1e3
        )?;
        writeln!(
            f,
            "  claim latency p99      {:>10.3} ms",
            self.claim_p99.as_secs_f64() * 1e3
        )?;
        write!(
            f,
            "  isolation              no run claimed twice; at most {} running per key, {} of {} limited",
            self.most_per_key, self.most_limited, LIMIT
        )
    }
}

/// The flow control of queued run `i`: scenario, options.
fn queued(i: usize, keys: usize) -> (&'static str, RunOptions) {
    let priority = (i * 7 % 5) as i64 - 2;
    match i % 4 {
        0 | 1 => (
            "claims-keyed",
            RunOptions {
                priority,
                concurrency_key: Some(format!("key-{}", i % keys.max(1))),
                ..RunOptions::default()
            },
        ),
        2 => (
            "claims-limited",
            RunOptions {
                priority,
                concurrency_limit: Some(LIMIT),
                ..RunOptions::default()
            },
        ),
        _ => (
            "claims-plain",
            RunOptions {
                priority,
                ..RunOptions::default()
            },
        ),
    }
}

/// What the workers share while they drain.
struct Watch {
    /// The runs queued, each with what it counts against: its key, "" for
    /// the limited scenario, None for nothing.
    counted_as: HashMap<String, Option<String>>,
    total: usize,
    hold: Duration,
    deadline: Instant,
    claimed: Mutex<HashSet<String>>,
    /// Runs held now, by concurrency key ("" counts the limited scenario).
    running: Mutex<HashMap<String, usize>>,
    most_per_key: AtomicUsize,
    most_limited: AtomicUsize,
    finished: AtomicUsize,
    empty: AtomicU64,
    latencies: Mutex<Vec<Duration>>,
}

/// Queues the runs on `url`, drains them with the workers, and returns the
/// figures; fails on any store error, a run claimed twice, or a key or the
/// limit exceeded. The runs are left in the database (finished).
pub async fn claims(url: &str, settings: ClaimsSettings) -> Result<ClaimsFigures, BenchError> {
    if settings.runs == 0 || settings.workers == 0 || settings.handles == 0 || settings.keys == 0 {
        return Err(BenchError::Input(
            "the claims benchmark needs at least one run, worker, handle and key".into(),
        ));
    }
    let options = StoreOptions {
        sync: SyncMode::Full,
    };
    let mut handles = Vec::with_capacity(settings.handles);
    for _ in 0..settings.handles {
        handles.push(Store::open_with(url, options).await.map_err(environment)?);
    }
    let database = handles[0].url_for_display().to_owned();

    // The queue, created before the clock starts.
    let initial = Arc::new(InitialState::new(json!({})));
    let mut keyed_of = HashMap::new();
    for i in 0..settings.runs {
        let (scenario, options) = queued(i, settings.keys);
        let id = skillhost_store::new_run_id();
        let run = NewRun {
            id: id.clone(),
            scenario_name: scenario.into(),
            scenario_path: format!("bench/{scenario}.toml"),
            scenario_digest: "0".repeat(64),
            input: json!({ "i": i }),
            initial_state: initial.clone(),
            start_node: "work".into(),
            start_visits: Default::default(),
            provenance: Provenance::default(),
        };
        handles[i % settings.handles]
            .enqueue_run_with(&run, &options)
            .await
            .map_err(failed)?;
        let counted = match (&options.concurrency_key, options.concurrency_limit) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(_)) => Some(String::new()),
            _ => None,
        };
        keyed_of.insert(id, counted);
    }
    let watch = Arc::new(Watch {
        counted_as: keyed_of,
        total: settings.runs,
        hold: settings.hold,
        deadline: Instant::now() + DRAIN_FOR,
        claimed: Mutex::default(),
        running: Mutex::default(),
        most_per_key: AtomicUsize::new(0),
        most_limited: AtomicUsize::new(0),
        finished: AtomicUsize::new(0),
        empty: AtomicU64::new(0),
        latencies: Mutex::default(),
    });
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..settings.workers {
        let store = handles[w % settings.handles].clone();
        let watch = watch.clone();
        tasks.spawn(async move {
            let mut latencies = Vec::new();
            let outcome = work(&store, &format!("bench-claims-{w}"), &watch, &mut latencies).await;
            watch.latencies.lock().unwrap().extend(latencies);
            outcome
        });
    }
    // The first failure stops the others (they would wait for runs that
    // will never finish).
    let mut first_error = None;
    while let Some(done) = tasks.join_next().await {
        let outcome = match done {
            Ok(outcome) => outcome,
            Err(e) if e.is_cancelled() => Ok(()),
            Err(e) => Err(failed(format!("a claiming task failed: {e}"))),
        };
        if let Err(e) = outcome {
            first_error.get_or_insert(e);
            tasks.abort_all();
        }
    }
    let elapsed = start.elapsed();
    for store in &handles {
        store.close().await;
    }
    if let Some(e) = first_error {
        return Err(e);
    }

    let claimed = watch.claimed.lock().unwrap().len();
    let mut latencies = std::mem::take(&mut *watch.latencies.lock().unwrap());
    latencies.sort_unstable();
    let p99 = latencies
        .get((latencies.len() * 99).div_ceil(100).saturating_sub(1))
        .copied()
        .unwrap_or_default();
    Ok(ClaimsFigures {
        claimed,
        empty_claims: watch.empty.load(Ordering::Relaxed),
        elapsed,
        claims_per_s: claimed as f64 / elapsed.as_secs_f64(),
        claim_median: median(latencies),
        claim_p99: p99,
        most_per_key: watch.most_per_key.load(Ordering::Relaxed),
        most_limited: watch.most_limited.load(Ordering::Relaxed),
        database,
        settings,
    })
}

/// One worker: claim, hold, finish, until every run has finished.
async fn work(
    store: &Store,
    owner: &str,
    watch: &Watch,
    latencies: &mut Vec<Duration>,
) -> Result<(), BenchError> {
    let total = watch.total;
    while watch.finished.load(Ordering::Acquire) < total {
        if Instant::now() > watch.deadline {
            return Err(failed(format!(
                "the queue was not drained within {}s ({} of {total} runs finished)",
                DRAIN_FOR.as_secs(),
                watch.finished.load(Ordering::Relaxed)
            )));
        }
        let asked = Instant::now();
        let claim = store.claim_run(owner, TTL).await.map_err(failed)?;
        let took = asked.elapsed();
        let Some((run, _lease)) = claim else {
            watch.empty.fetch_add(1, Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        };
        latencies.push(took);
        if !watch.claimed.lock().unwrap().insert(run.id.clone()) {
            return Err(failed(format!("run `{}` was claimed twice", run.id)));
        }
        let counted = watch
            .counted_as
            .get(&run.id)
            .ok_or_else(|| failed(format!("claimed run `{}` was not queued here", run.id)))?;
        if let Some(key) = counted {
            let now = {
                let mut running = watch.running.lock().unwrap();
                let n = running.entry(key.clone()).or_default();
                *n += 1;
                *n
            };
            let (most, allowed, what) = if key.is_empty() {
                (
                    &watch.most_limited,
                    LIMIT as usize,
                    "the limited scenario".to_owned(),
                )
            } else {
                (&watch.most_per_key, 1, format!("key `{key}`"))
            };
            most.fetch_max(now, Ordering::Relaxed);
            if now > allowed {
                return Err(failed(format!(
                    "{now} runs of {what} ran at once (at most {allowed}), run `{}` among them",
                    run.id
                )));
            }
        }
        if !watch.hold.is_zero() {
            tokio::time::sleep(watch.hold).await;
        }
        if let Some(key) = counted {
            *watch.running.lock().unwrap().get_mut(key).expect("counted") -= 1;
        }
        store
            .finish_run(&run.id, RunStatus::Completed, None, None)
            .await
            .map_err(failed)?;
        watch.finished.fetch_add(1, Ordering::AcqRel);
    }
    Ok(())
}
