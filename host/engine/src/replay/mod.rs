//! Replaying a finished run: re-executing it step by step from what it
//! recorded, with no network and no store writes, and saying at which step
//! (if any) it no longer does what it did.
//!
//! For each checkpoint seq k >= 1 the replay rebuilds the state at k - 1
//! from the recorded history, runs node k exactly as the run loop does
//! (`run::replay_step`: its kind, rules, routing and failure handling), with
//! every journaled host call answered from the journal of step k (each map
//! item's call from its own), as the attempt the step recorded (the
//! `wasi:random` seed derives from it), and compares: the step's input and
//! output hashes, the state hash and the next nodes with checkpoint k's. A
//! call that asks something else than its journal recorded, a call past
//! the journal, entries left unused, or a journal row that no longer
//! matches its digest is a divergence naming the call. The replay stops at
//! the first divergence.
//!
//! What a run is replayed from is a [`RunExport`], read from a store
//! ([`RunExport::from_store`]) or from a file ([`RunExport::read`]); the
//! scenario comes from its recorded text and the components are found by
//! their recorded digests ([`load_exported`]).
//!
//! Must not: write anything, reach a capability's backend (every answer
//! from outside the run comes from the journal), or know how a kind of node
//! works (`kinds::run` does).

pub mod export;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use crate::call::{Attempts, CallPlan, random_seed};
use crate::kinds::map::ITEM_ATTEMPTS;
use crate::remedy::{Plain, Remedies, Remedy, Words};
use crate::run::{ReplayedStep, replay_step};
use crate::run_log::RunLog;
use crate::{EngineError, NoEvents, Position, RunContext};
use skillhost_runtime::{
    CallError, Capability, JournalMode, JournalRecord, Runtime, Skill, TokenUsage,
};
use skillhost_scenario::LoadedScenario;
use skillhost_store::{CheckpointDelta, JournalEntry, RunState, RunStatus, StepRow, StoreError};

pub use export::{
    ComponentSearch, EXPORT_FORMAT, EXPORT_VERSION, ExportedArtifact, ExportedComponent,
    ExportedJournalEntry, ExportedRun, ExportedScenario, MissingComponent, RunExport,
    find_components,
};

/// Why a run could not be replayed (as opposed to a replay that diverged,
/// which is a [`ReplayReport`]). Its `Display` says what to do in plain
/// words; [`ReplayError::render`] in a face's ([`Remedies`]).
#[derive(Debug)]
pub enum ReplayError {
    UnknownRun {
        id: String,
        db: String,
    },
    NotFinished {
        id: String,
        status: String,
    },
    NoProvenance {
        id: String,
    },
    ScenarioUnreadable {
        path: PathBuf,
        message: String,
    },
    ScenarioChanged {
        path: PathBuf,
        expected: String,
        found: String,
    },
    ScenarioInvalid {
        path: PathBuf,
        report: String,
    },
    HasSubgraphs {
        id: String,
        node: String,
    },
    ComponentsMissing {
        missing: Vec<MissingComponent>,
    },
    ComponentChanged {
        alias: String,
        path: PathBuf,
        expected: String,
        found: String,
    },
    ExportUnreadable {
        path: PathBuf,
        message: String,
    },
    History {
        id: String,
        message: String,
    },
    Store(StoreError),
    Engine(EngineError),
}

impl ReplayError {
    /// The message, its remedies in `face`'s words (`Display` is
    /// [`Plain`]'s).
    pub fn render(&self, face: &dyn Remedies) -> String {
        use ReplayError::*;
        let w = Words(face);
        match self {
            UnknownRun { id, db } => format!(
                "run `{id}` does not exist in {db}; list runs{}",
                w.with(Remedy::ListRuns { waiting: false })
            ),
            NotFinished { id, status } => format!(
                "run `{id}` is {status}; only a finished run (completed or failed) can be \
                 replayed. Resume it{} first, or see its steps{}",
                w.with(Remedy::ResumeRun { run: id.clone() }),
                w.with(Remedy::ShowRun { run: id.clone() })
            ),
            NoProvenance { id } => format!(
                "run `{id}` was created by a host that did not record the digests of its \
                 components (before schema version 6), so what code ran cannot be checked; it \
                 cannot be replayed. Runs started from now on can"
            ),
            ScenarioUnreadable { path, message } => format!(
                "cannot read the scenario file `{}`: {message}; a replay reads the scenario the \
                 run was started from. Put it back, or replay an export of the run{}{}",
                path.display(),
                w.aside(
                    Remedy::ExportRun {
                        run: None,
                        components: false
                    },
                    ""
                ),
                w.with(Remedy::ReplayExport)
            ),
            ScenarioChanged {
                path,
                expected,
                found,
            } => format!(
                "the scenario file `{}` has digest {found}, but the run was started from one \
                 with digest {expected}; put back the scenario the run used (replaying needs the \
                 same graph), or replay an export made before it changed",
                path.display()
            ),
            ScenarioInvalid { path, report } => {
                format!("the scenario `{}` does not load:\n{report}", path.display())
            }
            HasSubgraphs { id, node } => format!(
                "run `{id}` runs another scenario as a child run (subgraph node `{node}`), which \
                 a replay does not re-execute; replay each child run on its own{}",
                w.aside(Remedy::ShowRun { run: id.clone() }, " lists them")
            ),
            ComponentsMissing { missing } => format!(
                "{} component(s) the run used cannot be found: {}. Put each one back where the \
                 scenario expects it, or pass --components DIR holding it as <sha256>.wasm{}",
                missing.len(),
                missing
                    .iter()
                    .map(|m| format!(
                        "skill `{}` (sha256 {}; looked at {})",
                        m.alias,
                        m.digest,
                        m.looked.join(", ")
                    ))
                    .collect::<Vec<_>>()
                    .join("; "),
                w.aside(
                    Remedy::ExportRun {
                        run: None,
                        components: true
                    },
                    " writes them"
                )
            ),
            ComponentChanged {
                alias,
                path,
                expected,
                found,
            } => format!(
                "skill `{alias}`: `{}` has digest {found}, but the run used a component with \
                 digest {expected}; put back the component the run used, or pass --components \
                 DIR holding it as {expected}.wasm",
                path.display()
            ),
            ExportUnreadable { path, message } => {
                format!("cannot use the run export `{}`: {message}", path.display())
            }
            History { id, message } => {
                format!("the recorded history of run `{id}` is not whole: {message}")
            }
            Store(e) => e.to_string(),
            Engine(e) => e.render(face),
        }
    }
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render(&Plain))
    }
}

impl std::error::Error for ReplayError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ReplayError::Store(e) => e.source(),
            ReplayError::Engine(e) => e.source(),
            _ => None,
        }
    }
}

impl From<StoreError> for ReplayError {
    fn from(e: StoreError) -> Self {
        ReplayError::Store(e)
    }
}

impl From<EngineError> for ReplayError {
    fn from(e: EngineError) -> Self {
        ReplayError::Engine(e)
    }
}

impl ReplayError {
    /// Whether the environment is at fault (a database that fails, stored
    /// history that is corrupt), rather than what was asked for.
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            ReplayError::Store(_) | ReplayError::Engine(_) | ReplayError::History { .. }
        )
    }
}

/// How one replayed step compares with the recorded one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StepStatus {
    Same,
    Diverged,
}

impl StepStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            StepStatus::Same => "same",
            StepStatus::Diverged => "diverged",
        }
    }
}

/// One host call a divergence is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallRef {
    /// Its capability (`kv`, `http`, `llm`).
    pub capability: String,
    /// Its index in its call's journal, from 0.
    pub entry: usize,
    /// The map item whose call it was; None for a skill node's call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub item: Option<usize>,
}

/// One way a replayed step differs from the recorded one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// What differs: `journal` (a host call), `node`, `output`, `input`,
    /// `status`, `state`, `next`, `visits`.
    pub what: String,
    pub detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<CallRef>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.call {
            Some(call) => {
                write!(
                    f,
                    "{} call `{}` entry {}",
                    self.what, call.capability, call.entry
                )?;
                if let Some(item) = call.item {
                    write!(f, " (item {item})")?;
                }
                write!(f, ": {}", self.detail)
            }
            None => write!(f, "{}: {}", self.what, self.detail),
        }
    }
}

/// One replayed step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepVerdict {
    pub seq: u64,
    pub node: String,
    pub status: StepStatus,
    /// Host calls answered from the journal.
    pub calls_served: usize,
    pub duration_us: u64,
    /// Empty when the step is the same.
    pub differences: Vec<Difference>,
}

/// A whole replay: every step replayed, up to and including the first that
/// diverged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReplayReport {
    pub run_id: String,
    pub scenario: String,
    /// The recorded run's last checkpoint: how many steps there were to
    /// replay.
    pub last_seq: u64,
    pub steps: Vec<StepVerdict>,
    /// The seq of the first step that diverged.
    pub diverged_at: Option<u64>,
}

/// Loads what `export` recorded: the scenario from its embedded text
/// (checked against its digest), as the file at `root` joined with the
/// recorded file name (`root` defaults to the recorded directory), so its
/// relative paths (an `fs` grant's directory) resolve there; every
/// component found by its digest ([`find_components`]) and checked again
/// once loaded.
pub fn load_exported(
    export: &RunExport,
    runtime: &Runtime,
    root: Option<&Path>,
    search: &ComponentSearch,
) -> Result<LoadedScenario, ReplayError> {
    let recorded = Path::new(&export.scenario.path);
    let found = skillhost_store::blob_digest(export.scenario.text.as_bytes());
    // A scenario with subgraph nodes has a digest over its children's too;
    // its runs are not replayed as one.
    if let Some(node) = skillhost_scenario::load::first_subgraph_node(&export.scenario.text) {
        return Err(ReplayError::HasSubgraphs {
            id: export.run.id.clone(),
            node,
        });
    }
    if found != export.scenario.digest {
        return Err(ReplayError::ScenarioChanged {
            path: recorded.to_path_buf(),
            expected: export.scenario.digest.clone(),
            found,
        });
    }
    let file_name = recorded
        .file_name()
        .map_or_else(|| "scenario.toml".into(), |name| name.to_os_string());
    let path = match root {
        Some(root) => root.join(file_name),
        None => recorded.to_path_buf(),
    };
    let invalid = |report: skillhost_scenario::CheckReport| ReplayError::ScenarioInvalid {
        path: path.clone(),
        report: report.to_string(),
    };
    let (scenario, _) =
        skillhost_scenario::parse_str(&export.scenario.text, &path).map_err(invalid)?;
    let components = find_components(export, &scenario, search)?;
    let loaded = skillhost_scenario::load_text_with_components(
        &export.scenario.text,
        &path,
        runtime,
        &components,
    )
    .map_err(invalid)?;
    check_components(export, &loaded, &components)?;
    Ok(loaded)
}

/// Every loaded skill is the component the run recorded, and the run
/// recorded every skill the scenario loads.
fn check_components(
    export: &RunExport,
    loaded: &LoadedScenario,
    paths: &BTreeMap<String, PathBuf>,
) -> Result<(), ReplayError> {
    for (alias, skill) in &loaded.skills {
        let path = paths
            .get(alias)
            .cloned()
            .unwrap_or_else(|| PathBuf::from(&skill.origin));
        match export.components.get(alias) {
            Some(recorded) if recorded.digest == skill.digest => {}
            Some(recorded) => {
                return Err(ReplayError::ComponentChanged {
                    alias: alias.clone(),
                    path,
                    expected: recorded.digest.clone(),
                    found: skill.digest.clone(),
                });
            }
            None => {
                return Err(ReplayError::History {
                    id: export.run.id.clone(),
                    message: format!(
                        "the scenario has skill `{alias}`, but the run recorded no component \
                         for it"
                    ),
                });
            }
        }
    }
    Ok(())
}

/// Only a finished run (completed or failed) is replayed: one still going
/// has steps to come, and one cancelled ended in no step of its own.
pub fn check_finished(export: &RunExport) -> Result<(), ReplayError> {
    if matches!(export.run.status, RunStatus::Completed | RunStatus::Failed) {
        Ok(())
    } else {
        Err(ReplayError::NotFinished {
            id: export.run.id.clone(),
            status: export.run.status.as_str().to_string(),
        })
    }
}

/// Replays `export` (a finished run) with `loaded` (from
/// [`load_exported`]), step by step, calling `on_step` with each verdict as
/// it is reached; stops at the first step that diverged.
pub async fn replay(
    export: &RunExport,
    loaded: &LoadedScenario,
    on_step: &mut (dyn FnMut(&StepVerdict) + Send),
) -> Result<ReplayReport, ReplayError> {
    let run_id = &export.run.id;
    check_finished(export)?;
    let history = |message: String| ReplayError::History {
        id: run_id.clone(),
        message,
    };
    let checkpoints = &export.checkpoints;
    for (expected, checkpoint) in checkpoints.iter().enumerate() {
        if checkpoint.seq != expected as u64 {
            return Err(history(format!(
                "checkpoint {expected} is missing (the history jumps to {})",
                checkpoint.seq
            )));
        }
    }
    let Some(first) = checkpoints.first() else {
        return Err(history("it has no checkpoints".into()));
    };
    let mut state = RunState::from_value(export.initial_state.clone());
    check_hash(&state, first).map_err(history)?;

    let mut by_seq: HashMap<u64, Vec<&ExportedJournalEntry>> = HashMap::new();
    for entry in &export.journal {
        by_seq.entry(entry.entry.seq).or_default().push(entry);
    }
    let input = Arc::new(export.run.input.clone());
    let mut report = ReplayReport {
        run_id: run_id.clone(),
        scenario: export.scenario.name.clone(),
        last_seq: checkpoints.len() as u64 - 1,
        steps: Vec::new(),
        diverged_at: None,
    };
    for pair in checkpoints.windows(2) {
        let (before, recorded) = (&pair[0], &pair[1]);
        let seq = recorded.seq;
        let started = Instant::now();
        let step = export
            .steps
            .iter()
            .find(|s| s.seq == Some(seq))
            .ok_or_else(|| history(format!("checkpoint {seq} has no step row")))?;
        let entries = by_seq.remove(&seq).unwrap_or_default();
        let mut differences = changed_entries(run_id, &entries);
        let mut served = 0;
        if differences.is_empty() {
            let replay = Arc::new(StepReplay::new(&entries, step).map_err(history)?);
            let cx = RunContext {
                loaded,
                scenario: &loaded.scenario,
                run_id: run_id.clone(),
                input: input.clone(),
                configs: &loaded.configs,
                log: RunLog::replaying(replay.clone()),
                events: Arc::new(NoEvents),
                gate: Arc::new(crate::ahead::Gate::new(Arc::new(NoEvents))),
                run_ahead: false,
                // A replay answers kv from the journal; no backend is asked.
                kv: None,
                allow_changed: false,
                level: 0,
                // A replay compares; it is no part of the run's trace.
                trace: None,
                // Nor does it send tokens anywhere.
                relay: None,
            };
            let position = Position {
                seq: before.seq,
                node_id: before.node_id.clone(),
                next_nodes: before.next_nodes.clone(),
                visits: before.visits.clone(),
            };
            let tokens_before = match loaded.scenario.token_budget {
                Some(_) => tokens_before(&export.steps, step),
                None => TokenUsage::default(),
            };
            let replayed = replay_step(&cx, position, state.clone(), tokens_before).await?;
            served = replay.served.load(Ordering::Relaxed);
            differences = replay.divergences();
            let mut after = state.clone();
            after.apply(&recorded.changes);
            differences.extend(compare(recorded, step, &replayed, &after));
        }
        let verdict = StepVerdict {
            seq,
            node: recorded.node_id.clone(),
            status: if differences.is_empty() {
                StepStatus::Same
            } else {
                StepStatus::Diverged
            },
            calls_served: served,
            duration_us: started.elapsed().as_micros() as u64,
            differences,
        };
        on_step(&verdict);
        let diverged = verdict.status == StepStatus::Diverged;
        report.steps.push(verdict);
        if diverged {
            report.diverged_at = Some(seq);
            break;
        }
        state.apply(&recorded.changes);
        check_hash(&state, recorded).map_err(history)?;
    }
    Ok(report)
}

/// What the run's completions had used when the node of `step` started:
/// every step before it, and every retried attempt that started no later
/// (its own node's included: the replay runs only the attempt `step`
/// recorded, so the attempts before it count as used before it).
fn tokens_before(steps: &[StepRow], step: &StepRow) -> TokenUsage {
    let seq = step.seq.unwrap_or(0);
    let before: Vec<StepRow> = steps
        .iter()
        .filter(|s| match s.seq {
            Some(s_seq) => s_seq < seq,
            None => s.started_at_ms <= step.started_at_ms,
        })
        .cloned()
        .collect();
    crate::tokens_used(&before)
}

/// The recorded state at a checkpoint must hash to its recorded hash.
fn check_hash(state: &RunState, checkpoint: &CheckpointDelta) -> Result<(), String> {
    let actual = skillhost_store::state_hash_like(state, &checkpoint.state_hash);
    if actual == checkpoint.state_hash {
        Ok(())
    } else {
        Err(format!(
            "the state its changes rebuild at checkpoint {} hashes to {actual}, but {} was \
             recorded",
            checkpoint.seq, checkpoint.state_hash
        ))
    }
}

/// What of a journal entry no longer matches the digests recorded with it
/// (empty when it matches, or is older than digests).
fn entry_faults(run_id: &str, exported: &ExportedJournalEntry) -> Vec<&'static str> {
    let entry = &exported.entry;
    let mut wrong = Vec::new();
    if exported.digest == LEGACY_JOURNAL {
        return wrong;
    }
    if entry.digest(run_id) != exported.digest {
        wrong.push("its row digest");
    }
    if exported.request_digest.as_deref() != Some(entry.request_digest().as_str()) {
        wrong.push("its request digest");
    }
    wrong
}

/// Whether a journal entry no longer matches the digests recorded with it.
fn entry_changed(run_id: &str, exported: &ExportedJournalEntry) -> bool {
    !entry_faults(run_id, exported).is_empty()
}

/// What a journal row's digest is in rows older than digests.
const LEGACY_JOURNAL: &str = "legacy";

/// The journal entries that no longer match the digests recorded with
/// them, in order: each a divergence of its step.
fn changed_entries(run_id: &str, entries: &[&ExportedJournalEntry]) -> Vec<Difference> {
    entries
        .iter()
        .filter_map(|exported| {
            let entry = &exported.entry;
            let wrong = entry_faults(run_id, exported);
            (!wrong.is_empty()).then(|| Difference {
                what: "journal".into(),
                detail: format!(
                    "the entry was changed after it was committed: {} no longer matches what \
                     it records (request {}, response {})",
                    wrong.join(" and "),
                    entry.request,
                    entry.response
                ),
                call: Some(CallRef {
                    capability: entry.kind.clone(),
                    entry: entry.entry as usize,
                    item: entry.item.map(|i| i as usize),
                }),
            })
        })
        .collect()
}

/// How the replayed node's commit differs from checkpoint `recorded` and
/// its step row; `after` is the recorded state there.
fn compare(
    recorded: &CheckpointDelta,
    step: &StepRow,
    replayed: &ReplayedStep,
    after: &RunState,
) -> Vec<Difference> {
    let mut differences = Vec::new();
    let mut differ = |what: &str, detail: String| {
        differences.push(Difference {
            what: what.into(),
            detail,
            call: None,
        });
    };
    if replayed.node_id != recorded.node_id {
        differ(
            "node",
            format!(
                "the run went to node `{}`, but checkpoint {} records node `{}`",
                replayed.node_id, recorded.seq, recorded.node_id
            ),
        );
        return differences;
    }
    let Some(commit) = &replayed.commit else {
        differ(
            "status",
            format!(
                "node `{}` ended the run, where the recorded run took checkpoint {}",
                recorded.node_id, recorded.seq
            ),
        );
        return differences;
    };
    let show = |hash: &Option<String>| hash.clone().unwrap_or_else(|| "none".into());
    if commit.step.status != step.status {
        let error = |row: &StepRow| {
            row.error
                .as_ref()
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .map(|m| format!(" ({m})"))
                .unwrap_or_default()
        };
        differ(
            "status",
            format!(
                "the step is {}{}, but it was recorded {}{}",
                commit.step.status,
                error(&commit.step),
                step.status,
                error(step)
            ),
        );
    }
    if step.input_hash.is_some() && commit.step.input_hash != step.input_hash {
        differ(
            "input",
            format!(
                "the skill's input hashes to {}, but {} was recorded",
                show(&commit.step.input_hash),
                show(&step.input_hash)
            ),
        );
    }
    if commit.step.output_hash != step.output_hash {
        differ(
            "output",
            format!(
                "the output hashes to {}, but {} was recorded",
                show(&commit.step.output_hash),
                show(&step.output_hash)
            ),
        );
    }
    let actual = skillhost_store::state_hash_like(&commit.full_state, &recorded.state_hash);
    if actual != recorded.state_hash {
        let fields: BTreeSet<&String> = commit
            .full_state
            .iter()
            .chain(after.iter())
            .map(|(name, _)| name)
            .filter(|name| commit.full_state.get(name) != after.get(name))
            .collect();
        let fields: Vec<String> = fields.iter().map(|f| format!("`{f}`")).collect();
        differ(
            "state",
            format!(
                "the state hashes to {actual}, but {} was recorded (fields that differ: {})",
                recorded.state_hash,
                fields.join(", ")
            ),
        );
    }
    if commit.next_nodes != recorded.next_nodes {
        differ(
            "next",
            format!(
                "the run goes on to {:?}, but {:?} was recorded",
                commit.next_nodes, recorded.next_nodes
            ),
        );
    }
    if commit.visits != recorded.visits {
        differ(
            "visits",
            format!(
                "the visit counts are {:?}, but {:?} were recorded",
                commit.visits, recorded.visits
            ),
        );
    }
    differences
}

/// What a replayed step's calls are answered with: each call's recorded
/// journal (a skill node's, or each map item's) and attempt, and what the
/// calls found.
pub(crate) struct StepReplay {
    /// By map item (None: the skill node's call).
    journals: HashMap<Option<usize>, Arc<[JournalRecord]>>,
    /// The attempt each call's output came from, when not the step's.
    attempts: HashMap<usize, u32>,
    /// The attempt of the step's row: a skill node's call's.
    step_attempt: u32,
    /// An approval step's recorded decision (its answer, or its timeout).
    pub(crate) approval: Option<Value>,
    /// Host calls answered from the journal so far.
    served: AtomicUsize,
    /// The calls made (by map item), and the divergences they found.
    found: Mutex<(BTreeSet<Option<usize>>, Vec<Difference>)>,
}

impl StepReplay {
    /// From a step's journal entries and its step row. Fails if the
    /// entries are not a whole journal (an entry missing or of an unknown
    /// capability).
    fn new(entries: &[&ExportedJournalEntry], step: &StepRow) -> Result<StepReplay, String> {
        let mut grouped: BTreeMap<Option<usize>, Vec<&JournalEntry>> = BTreeMap::new();
        for exported in entries {
            let entry = &exported.entry;
            grouped
                .entry(entry.item.map(|i| i as usize))
                .or_default()
                .push(entry);
        }
        let mut journals = HashMap::new();
        for (item, mut entries) in grouped {
            entries.sort_by_key(|e| e.entry);
            let mut records = Vec::with_capacity(entries.len());
            for (index, entry) in entries.into_iter().enumerate() {
                let call = item.map(|i| format!(" (item {i})")).unwrap_or_default();
                if entry.entry as usize != index {
                    return Err(format!(
                        "step {} ({}){call}: journal entry {index} is missing",
                        entry.seq, entry.node_id
                    ));
                }
                let capability = Capability::from_name(&entry.kind).ok_or_else(|| {
                    format!(
                        "step {} ({}){call}: journal entry {index} is of kind `{}`, which this \
                         host has no capability for",
                        entry.seq, entry.node_id, entry.kind
                    )
                })?;
                records.push(JournalRecord {
                    capability,
                    request: entry.request.clone(),
                    response: entry.response.clone(),
                });
            }
            journals.insert(item, Arc::from(records));
        }
        let attempts = step
            .detail
            .as_ref()
            .and_then(|detail| detail.get(ITEM_ATTEMPTS))
            .and_then(Value::as_object)
            .map(|attempts| {
                attempts
                    .iter()
                    .filter_map(|(index, attempt)| {
                        Some((index.parse().ok()?, u32::try_from(attempt.as_u64()?).ok()?))
                    })
                    .collect()
            })
            .unwrap_or_default();
        Ok(StepReplay {
            journals,
            attempts,
            step_attempt: step.attempt,
            approval: step
                .detail
                .as_ref()
                .and_then(|detail| detail.get(crate::kinds::approval::DETAIL))
                .cloned(),
            served: AtomicUsize::new(0),
            found: Mutex::new((BTreeSet::new(), Vec::new())),
        })
    }

    /// Makes one call, as the recorded attempt, answered from its journal;
    /// a journal it diverged from is kept as a divergence.
    pub(crate) fn call(
        &self,
        run_id: &str,
        node_id: &str,
        item: Option<usize>,
        skill: &Skill,
        plan: &CallPlan,
        input: &Value,
    ) -> Attempts {
        let attempt = match item {
            None => self.step_attempt,
            Some(index) => self.attempts.get(&index).copied().unwrap_or(1),
        };
        let mut options = plan.options.clone();
        options.random_seed = random_seed(run_id, node_id, item, attempt);
        let journal = self
            .journals
            .get(&item)
            .cloned()
            .unwrap_or_else(|| Arc::from(Vec::new()));
        options.journal = JournalMode::Replay(journal);
        let report = skill.call(input, &options);
        self.served
            .fetch_add(report.journal.len(), Ordering::Relaxed);
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        found.0.insert(item);
        if let Err(CallError::JournalMismatch {
            capability,
            entry,
            difference,
            ..
        }) = &report.result
        {
            found.1.push(Difference {
                what: "journal".into(),
                detail: difference.clone(),
                call: Some(CallRef {
                    capability: capability.clone(),
                    entry: *entry,
                    item,
                }),
            });
        }
        // Only the attempt the step kept is replayed: the usage of the
        // attempts before it is counted before the node
        // (`tokens_before`).
        Attempts {
            report,
            attempt,
            failed: Vec::new(),
            failed_usage: TokenUsage::default(),
        }
    }

    /// The divergences the calls found, in item order, and every journal
    /// whose call was never made.
    fn divergences(&self) -> Vec<Difference> {
        let (called, mut found) = {
            let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
            std::mem::take(&mut *found)
        };
        found.sort_by_key(|d| d.call.as_ref().map(|c| (c.item, c.entry)));
        let mut unused: Vec<(&Option<usize>, &Arc<[JournalRecord]>)> = self
            .journals
            .iter()
            .filter(|(item, records)| !called.contains(item) && !records.is_empty())
            .collect();
        unused.sort_by_key(|(item, _)| **item);
        for (item, records) in unused {
            found.push(Difference {
                what: "journal".into(),
                detail: format!(
                    "the journal recorded {} host call(s) ({} {}) for a call the replay never \
                     made",
                    records.len(),
                    records[0].capability,
                    records[0].request
                ),
                call: Some(CallRef {
                    capability: records[0].capability.name().to_string(),
                    entry: 0,
                    item: *item,
                }),
            });
        }
        found
    }
}
