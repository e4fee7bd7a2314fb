//! Entry points: find a scenario by name, parse it, load its skills, and run
//! every check, so that `host check` and `host run` see the same verdict.
//!
//! A skill whose component is a registry reference (`oci://…`) is loaded
//! from the file a [`ComponentResolver`] gives for it: the caller (the
//! `host` binary, over `skillhost-oci`) pulls, verifies and caches; this
//! crate reaches no registry, so the checker stays pure.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::check;
use super::diagnostic::{Reporter, codes};
use super::parse;
use super::typeflow;
use super::{ComponentSource, Scenario};
use skillhost_model::InitialState;
use skillhost_runtime::{Runtime, Skill};

pub use super::diagnostic::{CheckReport, Diagnostic};

/// A scenario that passed every check, with its skills loaded.
#[derive(Debug, Clone)]
pub struct LoadedScenario {
    pub scenario: Arc<Scenario>,
    /// By alias.
    pub skills: BTreeMap<String, Arc<Skill>>,
    pub warnings: Vec<Diagnostic>,
    /// The state every run starts from, with its checkpoint JSON and hashes.
    pub initial_state: Arc<InitialState>,
    /// The scenario's `[config]` and each node's, as expressions see them:
    /// built once here, shared by every run.
    pub configs: Arc<Configs>,
}

impl LoadedScenario {
    /// The SHA-256 of each loaded component, by skill alias: what a run
    /// records as the code it uses.
    pub fn component_digests(&self) -> BTreeMap<String, String> {
        self.skills
            .iter()
            .map(|(alias, skill)| (alias.clone(), skill.digest.clone()))
            .collect()
    }
}

/// `config` as the expressions of a run see it.
#[derive(Debug)]
pub struct Configs {
    /// The scenario's `[config]`, for rules and the summary.
    pub scenario: Arc<serde_json::Value>,
    /// Each node's `config` (skill defaults under `[config]`), by node id.
    pub nodes: std::collections::HashMap<String, Arc<serde_json::Value>>,
}

impl Configs {
    pub fn of(scenario: &Scenario) -> Configs {
        Configs {
            scenario: Arc::new(serde_json::Value::Object(scenario.config.clone())),
            nodes: scenario
                .nodes
                .iter()
                .map(|n| {
                    (
                        n.id.clone(),
                        Arc::new(serde_json::Value::Object(n.config.clone())),
                    )
                })
                .collect(),
        }
    }
}

/// Turns a skill's registry reference into the file of its component.
pub trait ComponentResolver {
    /// The component `reference` (as written, `oci://…`) of the skill
    /// `alias` in `scenario`, as a file; or why not, naming what to do.
    fn resolve(&self, scenario: &Scenario, alias: &str, reference: &str)
    -> Result<PathBuf, String>;
}

/// The resolver of callers that reach no registry: every registry
/// reference is an error saying so.
pub struct NoRegistry;

impl ComponentResolver for NoRegistry {
    fn resolve(&self, _: &Scenario, alias: &str, reference: &str) -> Result<PathBuf, String> {
        Err(format!(
            "skill `{alias}` is a registry component (`{reference}`), which this caller does not pull; run the scenario with `host run`, or name a local .wasm file"
        ))
    }
}

/// Parses and checks the scenario at `path`, loading every skill it declares
/// through `runtime`. Every problem found is in the error report, not only
/// the first. A registry component is an error ([`NoRegistry`]); see
/// [`load_with`].
pub fn load(path: &Path, runtime: &Runtime) -> Result<LoadedScenario, CheckReport> {
    load_with(path, runtime, &NoRegistry)
}

/// [`load`], with registry components resolved to files by `resolver`.
pub fn load_with(
    path: &Path,
    runtime: &Runtime,
    resolver: &dyn ComponentResolver,
) -> Result<LoadedScenario, CheckReport> {
    let (scenario, reporter) = parse_checked(path)?;
    load_skills(scenario, reporter, runtime, resolver, Providers::Checked)
}

/// Whether loading checks every `llm` grant against the runtime's
/// providers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Providers {
    /// A run will ask them: a provider the host lacks is an error.
    Checked,
    /// A replay answers every completion from the journal and asks no
    /// provider, so it needs none configured (on another machine, say).
    NotNeeded,
}

/// [`load`] of a scenario's text (`path` names it in diagnostics and
/// anchors its relative paths; it need not exist), with the components of
/// the skills in `components` (by alias) read from the paths given there
/// instead of the scenario's: how a replay loads an exported run, whose
/// components are found by digest (registry components included). Its
/// `llm` grants need no provider configured: a replay asks none.
pub fn load_text_with_components(
    text: &str,
    path: &Path,
    runtime: &Runtime,
    components: &BTreeMap<String, PathBuf>,
) -> Result<LoadedScenario, CheckReport> {
    let (mut scenario, reporter) = parse_text(text, path)?;
    for (alias, skill) in &mut scenario.skills {
        if let Some(component) = components.get(alias) {
            skill.component = ComponentSource::File(component.clone());
        }
    }
    load_skills(
        scenario,
        reporter,
        runtime,
        &NoRegistry,
        Providers::NotNeeded,
    )
}

/// Loads a parsed scenario's skills (registry components through
/// `resolver`) and runs the checks that need them.
fn load_skills(
    scenario: Scenario,
    mut reporter: Reporter,
    runtime: &Runtime,
    resolver: &dyn ComponentResolver,
    providers: Providers,
) -> Result<LoadedScenario, CheckReport> {
    let mut files = Vec::new();
    for (alias, skill) in &scenario.skills {
        let file = match &skill.component {
            ComponentSource::File(path) => path.clone(),
            ComponentSource::Registry(reference) => {
                match resolver.resolve(&scenario, alias, reference) {
                    Ok(path) => path,
                    Err(e) => {
                        reporter.error(skill.line, None, codes::SKILL_LOAD, e);
                        continue;
                    }
                }
            }
        };
        files.push((alias, skill, file));
    }
    // The skills that miss the cache compile side by side.
    let paths: Vec<PathBuf> = files.iter().map(|(_, _, file)| file.clone()).collect();
    let mut skills = BTreeMap::new();
    for ((alias, skill, _), loaded) in files.iter().zip(runtime.load_files(&paths)) {
        match loaded {
            Ok(loaded) => {
                skills.insert(alias.to_string(), loaded);
            }
            Err(e) => reporter.error(
                skill.line,
                None,
                codes::SKILL_LOAD,
                format!("skill `{alias}`: {e}"),
            ),
        }
    }
    check::check_skills(&scenario, &skills, &mut reporter);
    if providers == Providers::Checked {
        check::check_llm_providers(&scenario, &runtime.backends().llm, &mut reporter);
    }
    typeflow::check_types(&scenario, &skills, &mut reporter);
    let report = reporter.finish();
    if !report.is_ok() {
        return Err(report);
    }
    Ok(LoadedScenario {
        initial_state: Arc::new(InitialState::new(scenario.initial_state())),
        configs: Arc::new(Configs::of(&scenario)),
        scenario: Arc::new(scenario),
        skills,
        warnings: report.warnings,
    })
}

/// Parses and checks the scenario at `path` without loading its skills: every
/// check except those that need the components (input fit, capabilities, the
/// components themselves; the type flow takes skill inputs and outputs as
/// `dyn`). Enough to draw the graph or validate the format.
/// Returns the scenario and its warnings.
pub fn parse_file(path: &Path) -> Result<(Scenario, Vec<Diagnostic>), CheckReport> {
    let (scenario, mut reporter) = parse_checked(path)?;
    typeflow::check_types(&scenario, &BTreeMap::new(), &mut reporter);
    let report = reporter.finish();
    if report.is_ok() {
        Ok((scenario, report.warnings))
    } else {
        Err(report)
    }
}

/// [`parse_file`] on text already read; `path` names it in diagnostics and
/// anchors its relative paths.
pub fn parse_str(text: &str, path: &Path) -> Result<(Scenario, Vec<Diagnostic>), CheckReport> {
    let (scenario, mut reporter) = parse_text(text, path)?;
    typeflow::check_types(&scenario, &BTreeMap::new(), &mut reporter);
    let report = reporter.finish();
    if report.is_ok() {
        Ok((scenario, report.warnings))
    } else {
        Err(report)
    }
}

/// Reads, parses and checks; errors found so far stay in the reporter.
fn parse_checked(path: &Path) -> Result<(Scenario, Reporter), CheckReport> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) => {
            let mut reporter = Reporter::new(path.to_path_buf());
            reporter.error(
                0,
                None,
                codes::IO,
                format!("cannot read the scenario file: {e}"),
            );
            return Err(reporter.finish());
        }
    };
    parse_text(&text, path)
}

fn parse_text(text: &str, path: &Path) -> Result<(Scenario, Reporter), CheckReport> {
    let mut reporter = Reporter::new(path.to_path_buf());
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let Some(parsed) = parse::parse(text, &absolute, &mut reporter) else {
        return Err(reporter.finish());
    };
    check::check_scenario(&parsed.scenario, &parsed.broken_edges, &mut reporter);
    Ok((parsed.scenario, reporter))
}

/// Finds the scenario `host run NAME` means: an existing file, else
/// `examples/NAME/scenario.toml` (under the current directory, then under the
/// repository this binary was built from), else `./NAME.toml`.
pub fn resolve(name_or_path: &str) -> Result<PathBuf, String> {
    let as_path = Path::new(name_or_path);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut candidates = vec![as_path.to_path_buf()];
    let is_name = !name_or_path.is_empty()
        && !name_or_path.contains(['/', '\\'])
        && !name_or_path.ends_with(".toml");
    if is_name {
        candidates.push(
            Path::new("examples")
                .join(name_or_path)
                .join("scenario.toml"),
        );
        candidates.push(
            normalize_repo(&repo)
                .join("examples")
                .join(name_or_path)
                .join("scenario.toml"),
        );
        candidates.push(PathBuf::from(format!("{name_or_path}.toml")));
    }
    for candidate in &candidates {
        if candidate.is_file() {
            return Ok(candidate.clone());
        }
    }
    Err(format!(
        "no scenario `{name_or_path}`; looked for {}. Pass the path of a scenario file, or the \
         name of a folder of examples/",
        candidates
            .iter()
            .map(|c| format!("`{}`", c.display()))
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

fn normalize_repo(repo: &Path) -> PathBuf {
    repo.canonicalize().unwrap_or_else(|_| repo.to_path_buf())
}
