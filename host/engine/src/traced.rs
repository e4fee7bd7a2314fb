//! A run's spans (`skillhost-telemetry`), built from what the engine
//! measured, only when traces are exported ([`RunTrace`] exists only then).
//!
//! The trace: the run's root span (`run SCENARIO`, the id kept with the
//! run, from its creation to its end, emitted by the process that ends it,
//! or by the cancel of a run no process held); under it, one `drive`
//! span per process that worked on the run (`resumed` when it continued
//! one), a span per node visit (`node ID`) and a span per wait at an
//! approval node (`wait ID`, emitted when it was answered or timed out);
//! under a node, a span per attempt of its skill's call (`call SKILL`,
//! a map node's items each with theirs); under a call, a span per host call
//! that left the run (the journaled ones: `kv`, `http`, `sql`, `llm`).
//! A node's spans are children of the root, not of the `drive` span: a
//! process killed mid-run never ends its `drive`, and its nodes stay in
//! the tree.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use skillhost_runtime::{CallReport, Capability, JournalRecord, Skill};
use skillhost_store::{Provenance, RunStatus, WaitRow};
use std::sync::Arc;

use skillhost_telemetry::{KeyValue, SpanKind, SpanOut, StringValue, TraceContext};

/// The trace of a run a process works on.
#[derive(Debug)]
pub(crate) struct RunTrace {
    /// The root span's context.
    root: TraceContext,
    /// The span the root belongs under (a child run's parent node).
    root_parent: Option<[u8; 8]>,
    /// When the run was created: the root span's start.
    created: SystemTime,
    scenario: String,
    version: String,
    /// The run's id, shared by its spans' attributes.
    run_id: Arc<str>,
    /// The last attempt of the running node's call, for its span.
    call: std::sync::Mutex<Option<Called>>,
    /// The span of the node being run now (its id as a number), so its
    /// calls can name it as their parent.
    node: AtomicU64,
    /// When this process took the run up, and the checkpoint it went on
    /// from (past 0: it continued the run).
    drive_started: SystemTime,
    from_seq: u64,
}

/// A new run's trace context: under `under` (a W3C `traceparent`: the
/// subgraph node of a child run, or a caller's), else a new trace. The run
/// keeps it in its provenance whether or not traces are exported now: a
/// worker that exports them may continue it.
pub(crate) fn new_run_trace(under: Option<&str>) -> (String, Option<String>) {
    match under.and_then(TraceContext::parse) {
        Some(parent) => (
            parent.child().traceparent(),
            Some(skillhost_telemetry::span_id_hex(&parent.span_id)),
        ),
        None => (TraceContext::new_root().traceparent(), None),
    }
}

fn time_of(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

impl RunTrace {
    /// The trace of run `run_id`, when traces are exported: from its
    /// provenance, or, for a run created before runs kept one, a trace of
    /// this process's own.
    pub(crate) fn of(
        run_id: &str,
        provenance: Option<&Provenance>,
        created_at_ms: i64,
        scenario: &skillhost_scenario::Scenario,
        from_seq: u64,
    ) -> Option<RunTrace> {
        if !skillhost_telemetry::enabled() {
            return None;
        }
        let root = provenance
            .and_then(|p| p.trace.as_deref())
            .and_then(TraceContext::parse);
        let root_parent = provenance
            .and_then(|p| p.trace_parent_span.as_deref())
            .and_then(skillhost_telemetry::parse_span_id);
        Some(RunTrace {
            root: root.unwrap_or_else(TraceContext::new_root),
            root_parent: root_parent.filter(|_| root.is_some()),
            created: time_of(created_at_ms),
            scenario: scenario.name.clone(),
            version: scenario.version.clone(),
            run_id: Arc::from(run_id),
            call: std::sync::Mutex::new(None),
            node: AtomicU64::new(0),
            drive_started: SystemTime::now(),
            from_seq,
        })
    }

    /// A new span for the node about to run, which its calls will name as
    /// their parent.
    pub(crate) fn begin_node(&self) -> TraceContext {
        let span = self.root.child();
        self.node
            .store(u64::from_be_bytes(span.span_id), Ordering::Relaxed);
        if let Ok(mut slot) = self.call.lock() {
            *slot = None;
        }
        span
    }

    /// The running skill node's call ended (its last attempt): its
    /// figures go on the node's span.
    pub(crate) fn called(&self, skill: &Skill, attempt: u32, report: &CallReport) {
        let called = Called::of(skill, attempt, report);
        if let Ok(mut slot) = self.call.lock() {
            *slot = Some(called);
        }
    }

    /// The span of the node being run.
    pub(crate) fn node(&self) -> TraceContext {
        TraceContext {
            trace_id: self.root.trace_id,
            span_id: self.node.load(Ordering::Relaxed).to_be_bytes(),
        }
    }

    /// The W3C `traceparent` of the node being run (a subgraph's child
    /// run goes under it).
    pub(crate) fn node_traceparent(&self) -> String {
        self.node().traceparent()
    }

    fn under_root(&self, name: String, start: SystemTime, end: SystemTime) -> SpanOut {
        SpanOut::new(name, self.root.child(), Some(self.root.span_id), start, end)
    }

    /// The node's span, ended now.
    pub(crate) fn node_ended(
        &self,
        span: TraceContext,
        node: &skillhost_scenario::Node,
        visit: u32,
        started: SystemTime,
        error: Option<(&str, &str)>,
    ) {
        let mut out = SpanOut::new(
            format!("node {}", node.id),
            span,
            Some(self.root.span_id),
            started,
            SystemTime::now(),
        )
        .attribute(KeyValue::new("skillhost.run.id", self.shared_run_id()))
        .attribute(KeyValue::new("skillhost.node", node.id.clone()))
        .attribute(KeyValue::new("skillhost.node.kind", node.kind().name()))
        .attribute(KeyValue::new("skillhost.node.visit", i64::from(visit)));
        if let Some(called) = self.call.lock().ok().and_then(|mut slot| slot.take()) {
            out.attributes.extend(called.attributes());
        }
        if let Some((code, message)) = error {
            out = out.attribute(KeyValue::new("skillhost.error.code", code.to_string()));
            out.error = Some(message.to_string());
        }
        skillhost_telemetry::emit(out);
    }

    /// This process's part of the run, ended with the run `status` (a run
    /// that waits ends its process's part too).
    fn shared_run_id(&self) -> StringValue {
        StringValue::from(self.run_id.clone())
    }

    pub(crate) fn drive_ended(&self, status: RunStatus, nodes_run: usize) {
        let out = self
            .under_root(
                format!("drive {}", self.scenario),
                self.drive_started,
                SystemTime::now(),
            )
            .attribute(KeyValue::new("skillhost.run.id", self.shared_run_id()))
            .attribute(KeyValue::new("skillhost.run.resumed", self.from_seq > 0))
            .attribute(KeyValue::new(
                "skillhost.run.from_seq",
                self.from_seq as i64,
            ))
            .attribute(KeyValue::new("skillhost.run.nodes_run", nodes_run as i64))
            .attribute(KeyValue::new("skillhost.run.status", status.as_str()));
        skillhost_telemetry::emit(out);
    }

    /// The run's root span: the run ended with `status`.
    pub(crate) fn run_ended(&self, run_id: &str, status: RunStatus, error: Option<&Value>) {
        root_span(
            self.root,
            self.root_parent,
            self.created,
            &self.scenario,
            &self.version,
            run_id,
            status,
            error,
        );
    }

    /// The span of a wait at approval node `wait.node_id`, from when it
    /// began until it was answered, or until now (it timed out).
    pub(crate) fn wait_ended(&self, wait: &WaitRow) {
        let end = wait.answered_at_ms.map_or_else(SystemTime::now, time_of);
        let mut out = self
            .under_root(
                format!("wait {}", wait.node_id),
                time_of(wait.created_at_ms),
                end,
            )
            .attribute(KeyValue::new("skillhost.run.id", wait.run_id.clone()))
            .attribute(KeyValue::new("skillhost.node", wait.node_id.clone()))
            .attribute(KeyValue::new("skillhost.wait.seq", wait.seq as i64));
        out = match &wait.answered_by {
            Some(by) => out
                .attribute(KeyValue::new("skillhost.wait.outcome", "answered"))
                .attribute(KeyValue::new("skillhost.wait.answered_by", by.clone())),
            None => out.attribute(KeyValue::new("skillhost.wait.outcome", "timed_out")),
        };
        skillhost_telemetry::emit(out);
    }
}

/// What a call's attempt measured, as its span's attributes.
#[derive(Debug)]
struct Called {
    skill: Arc<str>,
    digest: Arc<str>,
    attempt: u32,
    fuel: u64,
    memory: u64,
}

impl Called {
    fn of(skill: &Skill, attempt: u32, report: &CallReport) -> Called {
        Called {
            skill: skill.shared_name(),
            digest: skill.shared_digest(),
            attempt,
            fuel: report.fuel_consumed,
            memory: report.memory_peak_bytes,
        }
    }

    fn attributes(self) -> [KeyValue; 5] {
        [
            KeyValue::new("skillhost.skill", StringValue::from(self.skill)),
            KeyValue::new("skillhost.skill.digest", StringValue::from(self.digest)),
            KeyValue::new("skillhost.attempt", i64::from(self.attempt)),
            KeyValue::new("skillhost.fuel_consumed", self.fuel as i64),
            KeyValue::new("skillhost.memory_peak_bytes", self.memory as i64),
        ]
    }
}

/// The root span of a run, ended now with `status`.
#[allow(clippy::too_many_arguments)]
fn root_span(
    root: TraceContext,
    parent: Option<[u8; 8]>,
    created: SystemTime,
    scenario: &str,
    version: &str,
    run_id: &str,
    status: RunStatus,
    error: Option<&Value>,
) {
    let mut out = SpanOut::new(
        format!("run {scenario}"),
        root,
        parent,
        created,
        SystemTime::now(),
    )
    .attribute(KeyValue::new("skillhost.scenario", scenario.to_string()))
    .attribute(KeyValue::new(
        "skillhost.scenario.version",
        version.to_string(),
    ))
    .attribute(KeyValue::new("skillhost.run.id", run_id.to_string()))
    .attribute(KeyValue::new("skillhost.run.status", status.as_str()));
    if let Some(error) = error {
        let code = error
            .get("code")
            .and_then(Value::as_str)
            .unwrap_or("failed");
        out = out.attribute(KeyValue::new("skillhost.error.code", code.to_string()));
        if status != RunStatus::Cancelled {
            let message = error.get("message").and_then(Value::as_str).unwrap_or(code);
            out.error = Some(message.to_string());
        }
    }
    skillhost_telemetry::emit(out);
}

/// The root span of a run that ended without a process running it (a
/// queued or waiting run cancelled), from its row.
pub(crate) fn run_ended_unheld(
    row: &skillhost_store::RunRow,
    version: Option<&str>,
    error: Option<&Value>,
) {
    if !skillhost_telemetry::enabled() {
        return;
    }
    let Some(root) = row
        .provenance
        .as_ref()
        .and_then(|p| p.trace.as_deref())
        .and_then(TraceContext::parse)
    else {
        return;
    };
    let parent = row
        .provenance
        .as_ref()
        .and_then(|p| p.trace_parent_span.as_deref())
        .and_then(skillhost_telemetry::parse_span_id);
    root_span(
        root,
        parent,
        time_of(row.created_at_ms),
        &row.scenario_name,
        version.unwrap_or(""),
        &row.id,
        RunStatus::Cancelled,
        error,
    );
}

/// Where a call's spans go: under the node's span, for run `run_id`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallTrace {
    pub node: TraceContext,
}

/// One attempt of a node's call (`item`: a map node's item): with
/// `own_span`, a span of its own under the node's (which names the run and
/// the node) with its host calls under it; without (a skill node's last
/// attempt, whose figures go on the node's span), its host calls under the
/// node's span.
#[allow(clippy::too_many_arguments)]
pub(crate) fn call_attempt(
    trace: CallTrace,
    item: Option<usize>,
    skill: &Skill,
    attempt: u32,
    started: SystemTime,
    report: &CallReport,
    own_span: bool,
) {
    let parent = match own_span {
        true => trace.node.child(),
        false => trace.node,
    };
    if own_span {
        let called = Called::of(skill, attempt, report);
        let mut out = SpanOut::new(
            format!("call {}", skill.name),
            parent,
            Some(trace.node.span_id),
            started,
            started + report.duration,
        );
        out.attributes.extend(called.attributes());
        if let Some(item) = item {
            out = out.attribute(KeyValue::new("skillhost.map.item", item as i64));
        }
        if let Err(error) = &report.result {
            let json = error.to_json();
            let code = json.get("code").and_then(Value::as_str).unwrap_or("error");
            out = out.attribute(KeyValue::new("skillhost.error.code", code.to_string()));
            out.error = Some(error.to_string());
        }
        skillhost_telemetry::emit(out);
    }
    for timing in &report.host_calls {
        let record = timing.entry.and_then(|entry| report.journal.get(entry));
        host_call(
            parent,
            timing.capability,
            timing.started,
            timing.duration,
            record,
        );
    }
}

/// A host call's span, with what its journal record says of it.
fn host_call(
    parent: TraceContext,
    capability: Capability,
    started: SystemTime,
    took: Duration,
    record: Option<&JournalRecord>,
) {
    let request = record.map(|r| &r.request);
    let field = |key: &str| {
        request
            .and_then(|r| r.get(key))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let ok = record.and_then(|r| r.response.get("ok"));
    let mut attributes = vec![KeyValue::new("skillhost.capability", capability.name())];
    let mut kind = SpanKind::Internal;
    let name = match capability {
        Capability::Http => {
            kind = SpanKind::Client;
            let method = field("method").unwrap_or_else(|| "GET".into());
            if let Some(url) = field("url").and_then(|u| url::Url::parse(&u).ok()) {
                // The host and scheme only: a URL's path and query may
                // carry what its skill was given, not for a collector.
                if let Some(host) = url.host_str() {
                    attributes.push(KeyValue::new("server.address", host.to_string()));
                }
                if let Some(port) = url.port_or_known_default() {
                    attributes.push(KeyValue::new("server.port", i64::from(port)));
                }
                attributes.push(KeyValue::new("url.scheme", url.scheme().to_string()));
            }
            if let Some(status) = ok.and_then(|ok| ok.get("status")).and_then(Value::as_i64) {
                attributes.push(KeyValue::new("http.response.status_code", status));
            }
            attributes.push(KeyValue::new("http.request.method", method.clone()));
            method
        }
        Capability::Llm => {
            kind = SpanKind::Client;
            let model = field("model").unwrap_or_default();
            attributes.push(KeyValue::new("gen_ai.operation.name", "chat"));
            if let Some(provider) = field("provider") {
                attributes.push(KeyValue::new("gen_ai.provider.name", provider));
            }
            attributes.push(KeyValue::new("gen_ai.request.model", model.clone()));
            for (key, attribute) in [
                ("input_tokens", "gen_ai.usage.input_tokens"),
                ("output_tokens", "gen_ai.usage.output_tokens"),
            ] {
                if let Some(n) = ok.and_then(|ok| ok.get(key)).and_then(Value::as_i64) {
                    attributes.push(KeyValue::new(attribute, n));
                }
            }
            format!("chat {model}")
        }
        Capability::Kv => {
            let op = field("op").unwrap_or_default();
            attributes.push(KeyValue::new("skillhost.kv.op", op.clone()));
            format!("kv {op}")
        }
        Capability::Sql => {
            attributes.push(KeyValue::new("db.system.name", "sqlite"));
            "sql query".to_string()
        }
        other => other.name().to_string(),
    };
    let mut out = SpanOut::new(
        name,
        parent.child(),
        Some(parent.span_id),
        started,
        started + took,
    );
    out.kind = kind;
    out.attributes = attributes;
    let error = match record {
        None => Some("refused before it was made (the call's host-call budget)".to_string()),
        Some(r) => r.response.get("error").map(|e| {
            let code = e.get("code").and_then(Value::as_str).unwrap_or("error");
            out.attributes
                .push(KeyValue::new("skillhost.error.code", code.to_string()));
            e.get("message")
                .and_then(Value::as_str)
                .unwrap_or(code)
                .to_string()
        }),
    };
    out.error = error;
    skillhost_telemetry::emit(out);
}
