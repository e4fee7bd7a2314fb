//! `[[schedule]]`: turns the cron entries of the scenarios a worker was
//! given (`host worker --schedules`) into queued runs, one per tick,
//! exactly once whatever the number of workers doing the same.
//!
//! Each tick's run is created with the tick as its key
//! ([`ScheduleTick`]): the store writes the run and the tick's row in one
//! transaction, and a tick that already has a row (another worker queued
//! it) writes nothing. Catch-up: a schedule's ticks since its newest
//! recorded one are due, at most the newest [`Scheduler::catch_up`] of them
//! (older ones are skipped and reported); a schedule with no recorded tick
//! starts from when this scheduler was made, so a new schedule does not
//! replay its past. Times are UTC; the caller passes the clock to
//! [`Scheduler::pass`], so tests choose it.
//!
//! Owns: which ticks are due and queueing their runs. Must not: run
//! anything (workers claim the runs like any other), or print (the worker
//! reports [`WorkerEvent`]s).

use std::sync::Arc;
use std::time::Duration;

use crate::EngineError;
use crate::queue::{RunRequest, new_queued_run};
use crate::worker::WorkerEvent;
use skillhost_scenario::LoadedScenario;
use skillhost_store::{Admission, ScheduleTick, Store, format_ms};

/// How many missed ticks of one schedule a worker queues when it finds
/// more (the newest ones), unless told otherwise.
pub const DEFAULT_CATCH_UP: usize = 10;

/// The schedules of some scenarios, and when each is next due.
pub struct Scheduler {
    entries: Vec<Entry>,
    /// At most this many missed ticks per schedule are queued, the newest.
    pub catch_up: usize,
    /// When this scheduler was made (Unix ms): where a schedule with no
    /// recorded tick starts.
    started_ms: i64,
}

struct Entry {
    loaded: Arc<LoadedScenario>,
    /// Its index in the scenario's `schedules`.
    index: usize,
    /// No tick is due before this (Unix ms); 0: look now.
    next_due_ms: i64,
}

impl Scheduler {
    /// A scheduler for every `[[schedule]]` of `scenarios`. Refuses a
    /// scenario without one, or whose runs a worker could not start, naming
    /// it; `now_ms` is when it starts (see the module's catch-up rule).
    pub fn new(
        scenarios: Vec<Arc<LoadedScenario>>,
        catch_up: usize,
        now_ms: i64,
    ) -> Result<Scheduler, EngineError> {
        let mut entries = Vec::new();
        for loaded in scenarios {
            let scenario = &*loaded.scenario;
            if scenario.schedules.is_empty() {
                return Err(EngineError::NotQueueable {
                    scenario: scenario.path.display().to_string(),
                    message: "it has no [[schedule]]; add one (`[[schedule]]` with \
                              `cron = \"0 * * * *\"` and its `input`) or leave it out of \
                              --schedules"
                        .into(),
                });
            }
            for (index, schedule) in scenario.schedules.iter().enumerate() {
                // Every tick's run is this one with another key: refuse
                // now what would fail at every tick.
                new_queued_run(&loaded, schedule.input.clone(), RunRequest::default())?;
                entries.push(Entry {
                    loaded: loaded.clone(),
                    index,
                    next_due_ms: 0,
                });
            }
        }
        Ok(Scheduler {
            entries,
            catch_up: catch_up.max(1),
            started_ms: now_ms,
        })
    }

    /// How many schedules it keeps.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How long from `now_ms` until a schedule is next due, at most `cap`.
    pub fn wait(&self, now_ms: i64, cap: Duration) -> Duration {
        let next = self.entries.iter().map(|e| e.next_due_ms).min();
        match next {
            Some(next) if next > now_ms => {
                Duration::from_millis(u64::try_from(next - now_ms).unwrap_or(0)).min(cap)
            }
            Some(_) => Duration::ZERO,
            None => cap,
        }
    }

    /// Queues in `store` the run of every tick due at `now_ms` (Unix ms)
    /// that no worker has queued yet, and says what it did. A schedule whose store
    /// calls fail is tried again at the next pass.
    pub async fn pass(&mut self, store: &Store, now_ms: i64) -> Vec<WorkerEvent> {
        let mut events = Vec::new();
        for entry in &mut self.entries {
            if now_ms < entry.next_due_ms {
                continue;
            }
            let loaded = &entry.loaded;
            let scenario = &*loaded.scenario;
            let schedule = &scenario.schedules[entry.index];
            let failed = |message: String| WorkerEvent::Error {
                message: format!(
                    "schedule `{}` of scenario `{}`: {message}",
                    schedule.name,
                    scenario.path.display()
                ),
            };
            let last = match store
                .last_schedule_tick(&scenario.name, &schedule.name)
                .await
            {
                Ok(last) => last,
                Err(e) => {
                    events.push(failed(e.to_string()));
                    continue;
                }
            };
            let due = schedule.due_ticks(last.unwrap_or(self.started_ms), now_ms, self.catch_up);
            if let Some(newest) = due.skipped_newest {
                events.push(WorkerEvent::TicksSkipped {
                    scenario: scenario.name.clone(),
                    schedule: schedule.name.clone(),
                    newest_skipped: format_ms(newest),
                    catch_up: self.catch_up,
                });
            }
            let mut ok = true;
            for tick_ms in due.ticks {
                let request = RunRequest {
                    schedule_tick: Some(ScheduleTick {
                        schedule: schedule.name.clone(),
                        tick_ms,
                    }),
                    ..RunRequest::default()
                };
                let queued = match new_queued_run(loaded, schedule.input.clone(), request) {
                    Ok((run, options)) => store
                        .enqueue_run_with(&run, &options)
                        .await
                        .map(|admission| (run.id, admission))
                        .map_err(|e| e.to_string()),
                    Err(e) => Err(e.to_string()),
                };
                match queued {
                    Ok((run_id, Admission::Created)) => events.push(WorkerEvent::Scheduled {
                        run_id,
                        scenario: scenario.name.clone(),
                        schedule: schedule.name.clone(),
                        tick: format_ms(tick_ms),
                    }),
                    // Another worker queued this tick.
                    Ok((_, Admission::Existing { .. })) => {}
                    Err(message) => {
                        events.push(failed(message));
                        ok = false;
                        break;
                    }
                }
            }
            if ok {
                entry.next_due_ms = schedule.next_after(now_ms).unwrap_or(i64::MAX);
            }
        }
        events
    }
}

/// This machine's clock, Unix milliseconds.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
