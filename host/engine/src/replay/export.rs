//! A run as a self-contained audit file ([`RunExport`]): the scenario (its
//! name, digest and full text), the digest of every component, the input,
//! the steps, the journal with its digests, the checkpoints (changes,
//! hashes, next nodes, visit counts) and the artifacts' digests. It is what
//! a replay reads, whether from a database ([`RunExport::from_store`]) or
//! from a file with no database at all ([`RunExport::read`]).
//!
//! Owns: the format (`docs/replay.md` documents it; [`EXPORT_FORMAT`],
//! [`EXPORT_VERSION`]), building one from a store, and finding its files:
//! the scenario text read back from the recorded path and checked against
//! its digest, the components copied out by digest. Must not: replay
//! (`replay/mod.rs` does) or write to a store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::ReplayError;
use skillhost_store::{
    CheckpointDelta, ForkOrigin, History, JournalEntry, RunStatus, StepRow, blob_digest,
};

/// What the `format` field of an export says.
pub const EXPORT_FORMAT: &str = "skillhost-run-export";
/// The version of the format this host writes; it reads this one only.
pub const EXPORT_VERSION: u32 = 1;

/// One run, self-contained: everything a replay needs besides the
/// components' bytes (found by digest) and the files the scenario's skills
/// read through `fs` (which ship with the scenario).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunExport {
    /// [`EXPORT_FORMAT`].
    pub format: String,
    /// [`EXPORT_VERSION`].
    pub version: u32,
    pub run: ExportedRun,
    pub scenario: ExportedScenario,
    /// By skill alias.
    pub components: BTreeMap<String, ExportedComponent>,
    /// The state at checkpoint 0.
    pub initial_state: Value,
    /// Every checkpoint, 0 included, by seq.
    pub checkpoints: Vec<CheckpointDelta>,
    /// Every attempt at a node, failed retries included, in the order they
    /// were recorded.
    pub steps: Vec<StepRow>,
    /// Every journaled host call, by seq, then map item and entry.
    pub journal: Vec<ExportedJournalEntry>,
    pub artifacts: Vec<ExportedArtifact>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedRun {
    pub id: String,
    pub status: RunStatus,
    pub input: Value,
    pub error: Option<Value>,
    pub last_seq: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedScenario {
    pub name: String,
    /// The scenario file the run was started from.
    pub path: String,
    /// SHA-256 of `text`.
    pub digest: String,
    /// The scenario file's full text.
    pub text: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedComponent {
    /// SHA-256 of the component's bytes.
    pub digest: String,
    /// Where the scenario had it when the run was exported.
    pub path: String,
}

/// A journal entry with the digests its row carried.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedJournalEntry {
    #[serde(flatten)]
    pub entry: JournalEntry,
    /// SHA-256 of the request's canonical JSON (None for rows older than
    /// the store's schema version 6).
    pub request_digest: Option<String>,
    /// The row's digest ([`JournalEntry::digest`]), or `legacy`.
    pub digest: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportedArtifact {
    pub name: String,
    pub digest: String,
    pub media_type: String,
    pub size: u64,
}

impl RunExport {
    /// Reads run `run_id` from `store`, with its scenario's text read back
    /// from the path it was started from (it must still have the digest
    /// the run recorded) and the paths of its components from that text.
    /// Every row is checked against its digest on the way
    /// ([`skillhost_store::StoreError::Corrupt`]), except the journal's:
    /// a journal row that no longer matches its digest is exported as it
    /// is stored, with the digest it was committed with, so that a replay
    /// reports it as its step's divergence
    /// ([`changed_journal_entries`](Self::changed_journal_entries) lists
    /// them).
    pub async fn from_store(store: &History, run_id: &str) -> Result<RunExport, ReplayError> {
        let run = store
            .run(run_id)
            .await?
            .ok_or_else(|| ReplayError::UnknownRun {
                id: run_id.to_string(),
                db: store.url_for_display(),
            })?;
        let Some(provenance) = run.provenance.clone() else {
            return Err(ReplayError::NoProvenance {
                id: run_id.to_string(),
            });
        };
        let path = Path::new(&run.scenario_path);
        crate::kept::restore_scenario_file(&run).map_err(|message| {
            ReplayError::ScenarioUnreadable {
                path: path.to_path_buf(),
                message,
            }
        })?;
        let bytes = std::fs::read(path).map_err(|e| ReplayError::ScenarioUnreadable {
            path: path.to_path_buf(),
            message: e.to_string(),
        })?;
        let digest = blob_digest(&bytes);
        // A scenario with subgraph nodes has a digest over its children's
        // too (`skillhost_scenario::load`), which only parsing them gives.
        let covers_children = || {
            skillhost_scenario::parse_file(path)
                .is_ok_and(|(scenario, _)| scenario.digest == run.scenario_digest)
        };
        if digest != run.scenario_digest && !covers_children() {
            return Err(ReplayError::ScenarioChanged {
                path: path.to_path_buf(),
                expected: run.scenario_digest.clone(),
                found: digest,
            });
        }
        let text = String::from_utf8(bytes).map_err(|e| ReplayError::ScenarioUnreadable {
            path: path.to_path_buf(),
            message: format!("it is not UTF-8: {e}"),
        })?;
        let (scenario, _) = skillhost_scenario::parse_str(&text, path).map_err(|report| {
            ReplayError::ScenarioInvalid {
                path: path.to_path_buf(),
                report: report.to_string(),
            }
        })?;
        let mut components = BTreeMap::new();
        for (alias, digest) in &provenance.components {
            let path = scenario
                .skills
                .get(alias)
                .map(|skill| skill.component.to_string())
                .unwrap_or_default();
            components.insert(
                alias.clone(),
                ExportedComponent {
                    digest: digest.clone(),
                    path,
                },
            );
        }
        let history = store
            .history(run_id)
            .await?
            .ok_or_else(|| ReplayError::History {
                id: run_id.to_string(),
                message: "it has no checkpoints".into(),
            })?;
        let steps = store.steps(run_id).await?;
        let journal = store
            .journal_rows(run_id)
            .await?
            .into_iter()
            .map(|row| ExportedJournalEntry {
                entry: row.entry,
                request_digest: row.request_digest,
                digest: row.digest,
            })
            .collect();
        let artifacts = store
            .artifacts(run_id)
            .await?
            .into_iter()
            .map(|a| ExportedArtifact {
                name: a.name,
                digest: a.digest,
                media_type: a.media_type,
                size: a.size,
            })
            .collect();
        Ok(RunExport {
            format: EXPORT_FORMAT.to_string(),
            version: EXPORT_VERSION,
            run: ExportedRun {
                id: run.id,
                status: run.status,
                input: run.input,
                error: run.error,
                last_seq: run.last_seq,
                created_at_ms: run.created_at_ms,
                updated_at_ms: run.updated_at_ms,
                forked_from: provenance.forked_from,
            },
            scenario: ExportedScenario {
                name: run.scenario_name,
                path: run.scenario_path,
                digest: run.scenario_digest,
                text,
            },
            components,
            initial_state: history.initial_state,
            checkpoints: history.checkpoints,
            steps,
            journal,
            artifacts,
        })
    }

    /// Reads an export file written by [`to_json`](Self::to_json) (of this
    /// format and version).
    pub fn read(path: &Path) -> Result<RunExport, ReplayError> {
        let unreadable = |message: String| ReplayError::ExportUnreadable {
            path: path.to_path_buf(),
            message,
        };
        let text = std::fs::read_to_string(path).map_err(|e| unreadable(e.to_string()))?;
        let value: Value =
            serde_json::from_str(&text).map_err(|e| unreadable(format!("not JSON: {e}")))?;
        match value.get("format").and_then(Value::as_str) {
            Some(EXPORT_FORMAT) => {}
            other => {
                return Err(unreadable(format!(
                    "its `format` is {}, not \"{EXPORT_FORMAT}\": it is not a run export",
                    other.map_or("missing".to_string(), |f| format!("{f:?}"))
                )));
            }
        }
        match value.get("version").and_then(Value::as_u64) {
            Some(v) if v == u64::from(EXPORT_VERSION) => {}
            Some(v) if v > u64::from(EXPORT_VERSION) => {
                return Err(unreadable(format!(
                    "it is version {v} of the format, written by a newer host; this host reads \
                     version {EXPORT_VERSION}: upgrade host"
                )));
            }
            other => {
                return Err(unreadable(format!(
                    "its `version` is {other:?}, not {EXPORT_VERSION}"
                )));
            }
        }
        serde_json::from_value(value).map_err(|e| unreadable(format!("not a run export: {e}")))
    }

    /// Each journal entry that no longer matches the digests recorded with
    /// it, as `step SEQ (node NODE): …`: what a replay of the export
    /// reports as the divergence of that step.
    pub fn changed_journal_entries(&self) -> Vec<String> {
        let entries: Vec<&ExportedJournalEntry> = self.journal.iter().collect();
        super::changed_entries(&self.run.id, &entries)
            .into_iter()
            .zip(
                entries
                    .iter()
                    .filter(|e| super::entry_changed(&self.run.id, e)),
            )
            .map(|(difference, entry)| {
                format!(
                    "step {} (node `{}`): {difference}",
                    entry.entry.seq, entry.entry.node_id
                )
            })
            .collect()
    }

    /// The export as pretty JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("an export serialises")
    }

    /// Copies every component into `dir` as `<sha256>.wasm`, from the path
    /// the scenario has it at, which must still hold the digest the run
    /// recorded. Returns the files written (a file already there with the
    /// right bytes is kept).
    pub fn write_components(&self, dir: &Path) -> Result<Vec<PathBuf>, ReplayError> {
        let mut written = Vec::new();
        for (alias, component) in &self.components {
            let source = Path::new(&component.path);
            let bytes = std::fs::read(source).map_err(|e| ReplayError::ComponentsMissing {
                missing: vec![MissingComponent {
                    alias: alias.clone(),
                    digest: component.digest.clone(),
                    looked: vec![format!("{} ({e})", source.display())],
                }],
            })?;
            let found = blob_digest(&bytes);
            if found != component.digest {
                return Err(ReplayError::ComponentChanged {
                    alias: alias.clone(),
                    path: source.to_path_buf(),
                    expected: component.digest.clone(),
                    found,
                });
            }
            let target = dir.join(format!("{}.wasm", component.digest));
            let present = std::fs::read(&target).is_ok_and(|b| blob_digest(&b) == found);
            if !present {
                std::fs::write(&target, &bytes).map_err(|e| ReplayError::ExportUnreadable {
                    path: target.clone(),
                    message: format!("cannot write it: {e}"),
                })?;
            }
            written.push(target);
        }
        Ok(written)
    }
}

/// A component a replay could not find, and every place it looked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissingComponent {
    pub alias: String,
    pub digest: String,
    /// Each place looked, with what was there.
    pub looked: Vec<String>,
}

/// Where [`find_components`] looks for a component by its digest.
#[derive(Debug, Clone, Default)]
pub struct ComponentSearch {
    /// Directories holding components as `<sha256>.wasm`, in order.
    pub dirs: Vec<PathBuf>,
    /// Content-addressed directories holding blobs under their bare hex
    /// digest (a registry cache's `blobs/sha256`), where a pulled
    /// component is found by the digest its run recorded.
    pub blob_dirs: Vec<PathBuf>,
}

/// Finds each of the export's components, by digest: `<sha256>.wasm` in
/// each of `search.dirs`, `<sha256>` in each of `search.blob_dirs`, then the
/// path the scenario (its relative paths
/// resolved against `root`) gives the skill, if its bytes have the digest.
/// Every one that is found nowhere is listed in the error, with where it
/// looked.
pub fn find_components(
    export: &RunExport,
    scenario: &skillhost_scenario::Scenario,
    search: &ComponentSearch,
) -> Result<BTreeMap<String, PathBuf>, ReplayError> {
    let mut found = BTreeMap::new();
    let mut missing = Vec::new();
    for (alias, component) in &export.components {
        let mut looked = Vec::new();
        let mut candidates: Vec<PathBuf> = search
            .dirs
            .iter()
            .map(|dir| dir.join(format!("{}.wasm", component.digest)))
            .collect();
        candidates.extend(
            search
                .blob_dirs
                .iter()
                .map(|dir| dir.join(&component.digest)),
        );
        if let Some(skill) = scenario.skills.get(alias)
            && let skillhost_scenario::ComponentSource::File(path) = &skill.component
        {
            candidates.push(path.clone());
        }
        let hit = candidates.into_iter().find(|candidate| {
            match std::fs::read(candidate) {
                Ok(bytes) => {
                    let digest = blob_digest(&bytes);
                    if digest == component.digest {
                        return true;
                    }
                    looked.push(format!(
                        "{} (holds {digest}, another component)",
                        candidate.display()
                    ));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    looked.push(format!("{} (no such file)", candidate.display()));
                }
                Err(e) => looked.push(format!("{} ({e})", candidate.display())),
            }
            false
        });
        match hit {
            Some(path) => {
                found.insert(alias.clone(), path);
            }
            None => missing.push(MissingComponent {
                alias: alias.clone(),
                digest: component.digest.clone(),
                looked,
            }),
        }
    }
    if missing.is_empty() {
        Ok(found)
    } else {
        Err(ReplayError::ComponentsMissing { missing })
    }
}
