//! Running ahead of durability. A durable run's node whose next node can
//! do nothing outside the run commits without waiting for its sync
//! ([`skillhost_store::RunWriter::commit_step_ahead`]), and the next node
//! runs while the store syncs; a later sync covers both commits when the
//! disk is slower than the nodes. Nothing leaves the process before what
//! it follows is durable (output commit, as in Nightingale et al.,
//! "Rethink the sync", OSDI 2006):
//!
//! - the run's events wait here, in order, until the last commit written
//!   before each of them is durable ([`Gate`]);
//! - a node that may act outside the run (a grant with effects: `http`,
//!   `llm`, `kv`; a map, a subgraph, an approval, the run's end) starts
//!   only once every earlier commit is durable (`run.rs`, `settle`);
//! - at most [`MAX_AHEAD`] commits are ahead of their sync, so a disk that
//!   stalls holds back a bounded number of events, not a run's worth.
//!
//! A process killed at any point loses nothing that was written (the OS
//! has it). A power loss may take the commits not yet durable, always the
//! last ones; their nodes had no effects and are deterministic given the
//! journal, so a resume runs them again to the same states, and nobody was
//! told they had run.
//!
//! Which nodes qualify is [`runs_ahead`]: a gate, or a skill node whose
//! grants have no effects beyond the call (`fs`, `sql`, `log`: reads only).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use skillhost_scenario::{Node, NodeBody};

use crate::{Event, EventSink};

/// Commits a run may have written ahead of their sync at once.
pub(crate) const MAX_AHEAD: u32 = 16;

/// Whether `node` may run before the commit of the node before it is
/// durable: it can do nothing outside the run.
pub(crate) fn runs_ahead(node: &Node) -> bool {
    match &node.body {
        NodeBody::Gate(_) => true,
        NodeBody::Skill(call) => {
            let effects = call.grants.effects();
            !effects.writes && !effects.open_world
        }
        NodeBody::Map(_)
        | NodeBody::Approval(_)
        | NodeBody::Fail(_)
        | NodeBody::End
        | NodeBody::Subgraph(_) => false,
    }
}

/// A run's events on their way to its sink: sent at once, or held while
/// a commit written before them is not durable yet.
pub(crate) struct Gate {
    sink: Arc<dyn EventSink>,
    state: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    /// The last commit written ahead (numbered from 1 in the run), which
    /// the events sent now wait for.
    waits_for: u64,
    /// Every commit up to this one is durable.
    durable: u64,
    /// Events in the order they were sent, each with the commit it waits
    /// for.
    events: VecDeque<(u64, Event)>,
}

impl Gate {
    pub(crate) fn new(sink: Arc<dyn EventSink>) -> Self {
        Gate {
            sink,
            state: Mutex::new(Held::default()),
        }
    }

    /// Sends `event`, or holds it behind the commits not yet durable.
    pub(crate) fn emit(&self, event: Event) {
        let mut held = self.lock();
        if held.waits_for > held.durable {
            let waits_for = held.waits_for;
            held.events.push_back((waits_for, event));
        } else {
            // Under the lock: an event sent while a release drains cannot
            // pass the ones it drains.
            self.sink.emit(&event);
        }
    }

    /// Commit `commit` was written ahead of its sync: the events sent from
    /// now on wait for it.
    pub(crate) fn written_ahead(&self, commit: u64) {
        self.lock().waits_for = commit;
    }

    /// Every commit up to `commit` is durable: sends the events that
    /// waited for them, in order.
    pub(crate) fn durable(&self, commit: u64) {
        let mut held = self.lock();
        held.durable = held.durable.max(commit);
        while let Some((waits_for, _)) = held.events.front()
            && *waits_for <= held.durable
        {
            if let Some((_, event)) = held.events.pop_front() {
                self.sink.emit(&event);
            }
        }
    }

    /// Every commit written so far is durable.
    pub(crate) fn all_durable(&self) {
        let last = self.lock().waits_for;
        self.durable(last);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        // Consistent after every statement: a panicking sink leaves nothing
        // half-done here.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Kept(Mutex<Vec<u64>>);

    impl EventSink for Kept {
        fn emit(&self, event: &Event) {
            if let Event::CheckpointWritten { seq, .. } = event {
                self.0.lock().unwrap().push(*seq);
            }
        }
    }

    fn event(seq: u64) -> Event {
        Event::CheckpointWritten {
            run_id: "r".into(),
            seq,
            node: "n".into(),
            next: vec![],
        }
    }

    #[test]
    fn events_wait_for_the_commit_written_before_them_and_keep_their_order() {
        let kept = Arc::new(Kept::default());
        let gate = Gate::new(kept.clone());
        gate.emit(event(1));
        gate.written_ahead(1);
        gate.emit(event(2));
        gate.written_ahead(2);
        gate.emit(event(3));
        gate.emit(event(4));
        assert_eq!(*kept.0.lock().unwrap(), [1]);
        // Commit 1 durable: what waited for it goes, not what waits for 2.
        gate.durable(1);
        assert_eq!(*kept.0.lock().unwrap(), [1, 2]);
        // A late report of an earlier commit changes nothing.
        gate.durable(0);
        assert_eq!(*kept.0.lock().unwrap(), [1, 2]);
        gate.durable(2);
        assert_eq!(*kept.0.lock().unwrap(), [1, 2, 3, 4]);
        // Nothing ahead: sent at once.
        gate.emit(event(5));
        assert_eq!(*kept.0.lock().unwrap(), [1, 2, 3, 4, 5]);
    }

    #[test]
    fn all_durable_sends_everything_held() {
        let kept = Arc::new(Kept::default());
        let gate = Gate::new(kept.clone());
        gate.written_ahead(1);
        gate.emit(event(1));
        gate.written_ahead(2);
        gate.emit(event(2));
        gate.all_durable();
        assert_eq!(*kept.0.lock().unwrap(), [1, 2]);
        gate.emit(event(3));
        assert_eq!(*kept.0.lock().unwrap(), [1, 2, 3]);
    }
}
