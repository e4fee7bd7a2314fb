//! What a run reports while it goes: one [`Event`] per transition, delivered to
//! an [`EventSink`]. The CLI prints them as progress lines or as NDJSON
//! (`--events`); tests collect them.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        run_id: String,
        scenario: String,
        resumed: bool,
    },
    NodeStarted {
        run_id: String,
        node: String,
        kind: &'static str,
        visit: u32,
        attempt: u32,
    },
    MapItemFinished {
        run_id: String,
        node: String,
        index: usize,
        total: usize,
        reused: bool,
    },
    NodeFinished {
        run_id: String,
        node: String,
        duration_us: u64,
        fuel_consumed: u64,
        /// Log lines the node's skill wrote past its log budget.
        #[serde(skip_serializing_if = "is_zero")]
        logs_dropped: u64,
    },
    NodeFailed {
        run_id: String,
        node: String,
        attempt: u32,
        error: Value,
        will_retry: bool,
    },
    RuleWarning {
        run_id: String,
        node: String,
        code: String,
        message: String,
    },
    CheckpointWritten {
        run_id: String,
        seq: u64,
        node: String,
        next: Vec<String>,
    },
    /// The run waits at an approval node for an answer (`host runs answer`).
    RunWaiting {
        run_id: String,
        node: String,
        /// The checkpoint it waits at.
        seq: u64,
        prompt: String,
        /// When its wait times out (Unix ms), if it does.
        deadline_ms: Option<i64>,
    },
    /// A waiting run was answered and queued again.
    RunAnswered {
        run_id: String,
        node: String,
        seq: u64,
        by: String,
    },
    RunFinished {
        run_id: String,
        status: String,
        duration_ms: u64,
    },
    /// Text a node's skill was handed by a streamed completion
    /// (`llm-stream`), as the provider sent it: each delta once, in order,
    /// tagged with the attempt that got it. Only an attempt that succeeds
    /// makes its tokens part of the node's output; a failed attempt's are
    /// then [discarded](Event::TokensDiscarded).
    Token {
        run_id: String,
        node: String,
        /// A map node's item.
        #[serde(skip_serializing_if = "Option::is_none")]
        item: Option<usize>,
        attempt: u32,
        /// Which of the attempt's streamed completions (0 for its first).
        stream: u32,
        text: String,
        /// The runs a child run is under, its parent first; none for a
        /// top-level run. Whoever follows one of them hears these tokens.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        under: Vec<String>,
    },
    /// The tokens attempt `attempt` was handed are not the node's output:
    /// the attempt failed (and a retry, if any, streams anew). Sent after
    /// its `node_failed`, before the next attempt's tokens.
    TokensDiscarded {
        run_id: String,
        node: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        item: Option<usize>,
        attempt: u32,
        /// As a token's.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        under: Vec<String>,
    },
    /// A line a node's skill logged (its `log` import, or what it printed),
    /// sent only to a sink that [wants logs](EventSink::wants_logs).
    SkillLog {
        run_id: String,
        node: String,
        /// A map node's item.
        #[serde(skip_serializing_if = "Option::is_none")]
        item: Option<usize>,
        /// The scenario's alias of the skill.
        skill: String,
        level: skillhost_runtime::LogLevel,
        message: String,
    },
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The runs whose followers hear `event`, a [`Event::Token`] or
/// [`Event::TokensDiscarded`] as JSON: its own (first), then those in its
/// `under`. A relayed one is anyone's who can reach the database, so only
/// strings count, each run once, and no more of `under` than subgraphs
/// nest ([`skillhost_scenario::MAX_SUBGRAPH_DEPTH`]) is read. None
/// without a `run_id`.
pub fn token_runs(event: &Value) -> Vec<&str> {
    let Some(run_id) = event["run_id"].as_str() else {
        return Vec::new();
    };
    let mut runs = vec![run_id];
    let under = event["under"].as_array().into_iter().flatten();
    for run in under
        .filter_map(Value::as_str)
        .take(skillhost_scenario::MAX_SUBGRAPH_DEPTH)
    {
        if !runs.contains(&run) {
            runs.push(run);
        }
    }
    runs
}

/// Whether `event` (as [`token_runs`] takes it) is of run `run_id` or of a
/// child run under it.
pub fn is_token_json_of(event: &Value, run_id: &str) -> bool {
    token_runs(event).contains(&run_id)
}

/// A child run's events, as its parent's engine reports them: its tokens
/// say they are under the parent (and, through the parent's own
/// [`UnderParent`], under every run above), so that whoever follows a run
/// hears the tokens of the subgraphs it runs. Everything else goes on as
/// it is.
pub(crate) struct UnderParent {
    pub parent: String,
    pub events: Arc<dyn EventSink>,
}

impl EventSink for UnderParent {
    fn emit(&self, event: &Event) {
        let (Event::Token { .. } | Event::TokensDiscarded { .. }) = event else {
            return self.events.emit(event);
        };
        let mut event = event.clone();
        if let Event::Token { under, .. } | Event::TokensDiscarded { under, .. } = &mut event {
            under.push(self.parent.clone());
        }
        self.events.emit(&event);
    }

    fn listening(&self) -> bool {
        self.events.listening()
    }

    fn may_listen(&self) -> bool {
        self.events.may_listen()
    }

    fn wants_tokens(&self) -> bool {
        self.events.wants_tokens()
    }

    fn wants_logs(&self) -> bool {
        self.events.wants_logs()
    }
}

pub trait EventSink: Send + Sync {
    fn emit(&self, event: &Event);

    /// Whether events are wanted at all: when not, the engine does not build
    /// them.
    fn listening(&self) -> bool {
        true
    }

    /// Whether someone may start listening while a node runs (a server
    /// whose clients come and go): a streaming attempt then hands its
    /// tokens on, each one only if [`listening`](Self::listening) says so
    /// when it comes. By default, whether it listens now.
    fn may_listen(&self) -> bool {
        self.listening()
    }

    /// Whether a streaming node's tokens are wanted now ([`Event::Token`],
    /// [`Event::TokensDiscarded`]), asked as each token comes. By default,
    /// whether it listens; a sink of tokens only (the store's relay,
    /// `relay.rs`) says yes here and no to [`listening`](Self::listening).
    fn wants_tokens(&self) -> bool {
        self.listening()
    }

    /// Whether the skills' log lines are wanted too ([`Event::SkillLog`]):
    /// a run's output and its `--events` stream do not carry them.
    fn wants_logs(&self) -> bool {
        false
    }
}

/// Drops every event.
pub struct NoEvents;

impl EventSink for NoEvents {
    fn emit(&self, _event: &Event) {}

    fn listening(&self) -> bool {
        false
    }
}

/// Writes each event as one JSON line.
pub struct NdjsonEvents<W: Write + Send> {
    out: Mutex<W>,
}

impl<W: Write + Send> NdjsonEvents<W> {
    pub fn new(out: W) -> Self {
        NdjsonEvents {
            out: Mutex::new(out),
        }
    }
}

impl<W: Write + Send> EventSink for NdjsonEvents<W> {
    fn emit(&self, event: &Event) {
        let Ok(line) = serde_json::to_string(event) else {
            return;
        };
        if let Ok(mut out) = self.out.lock() {
            // Progress output is best effort; a closed pipe must not fail the run.
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        }
    }
}

/// Keeps every event, for tests and reports.
#[derive(Default)]
pub struct CollectEvents {
    pub events: Mutex<Vec<Event>>,
}

impl EventSink for CollectEvents {
    fn emit(&self, event: &Event) {
        if let Ok(mut events) = self.events.lock() {
            events.push(event.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A child two levels down reports through two [`UnderParent`]s, as
    /// nested subgraphs' engines do: its tokens and discards name both
    /// runs above it, its parent first, and are of each of them; its other
    /// events pass as they are.
    #[test]
    fn a_grandchilds_tokens_are_under_both_runs_above_it() {
        let collected = Arc::new(CollectEvents::default());
        let child: Arc<dyn EventSink> = Arc::new(UnderParent {
            parent: "top".into(),
            events: collected.clone(),
        });
        let grandchild = UnderParent {
            parent: "child".into(),
            events: child,
        };
        grandchild.emit(&Event::Token {
            run_id: "grandchild".into(),
            node: "write".into(),
            item: None,
            attempt: 1,
            stream: 0,
            text: "hello".into(),
            under: Vec::new(),
        });
        grandchild.emit(&Event::TokensDiscarded {
            run_id: "grandchild".into(),
            node: "write".into(),
            item: None,
            attempt: 1,
            under: Vec::new(),
        });
        let started = Event::RunStarted {
            run_id: "grandchild".into(),
            scenario: "s".into(),
            resumed: false,
        };
        grandchild.emit(&started);
        let events = collected.events.lock().unwrap().clone();
        let [token, discard, other] = &events[..] else {
            panic!("{events:?}")
        };
        for event in [token, discard] {
            let json = serde_json::to_value(event).unwrap();
            assert_eq!(json["under"], json!(["child", "top"]), "{json}");
            for run in ["grandchild", "child", "top"] {
                assert!(is_token_json_of(&json, run), "{json} of {run}");
            }
            assert!(!is_token_json_of(&json, "elsewhere"));
        }
        assert_eq!(other, &started);
        // A top-level run's token names no run above it.
        let own = serde_json::to_value(Event::Token {
            run_id: "top".into(),
            node: "n".into(),
            item: None,
            attempt: 1,
            stream: 0,
            text: "t".into(),
            under: Vec::new(),
        })
        .unwrap();
        assert!(own.get("under").is_none(), "{own}");
        // Relayed JSON is anyone's: an `under` that is not a list of
        // strings makes the token its own run's only.
        let hostile = json!({ "event": "token", "run_id": "r", "under": "top" });
        assert!(!is_token_json_of(&hostile, "top"));
        assert!(is_token_json_of(&hostile, "r"));
        // Each run once, and no deeper than subgraphs nest.
        let twice = json!({ "run_id": "r", "under": ["r", "top", 7, "top"] });
        assert_eq!(token_runs(&twice), ["r", "top"]);
        let mut long: Vec<String> = (0..skillhost_scenario::MAX_SUBGRAPH_DEPTH)
            .map(|i| format!("r{i}"))
            .collect();
        long.push("past".into());
        let deep = json!({ "run_id": "r", "under": long });
        assert_eq!(
            token_runs(&deep).len(),
            1 + skillhost_scenario::MAX_SUBGRAPH_DEPTH
        );
        assert!(!is_token_json_of(&deep, "past"));
        assert!(token_runs(&json!({ "under": ["top"] })).is_empty());
    }
}
