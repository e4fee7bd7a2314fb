//! Entry points: find a scenario by name, parse it, load its skills, and run
//! every check, so that `host check` and `host run` see the same verdict.
//!
//! A skill whose component is a registry reference (`oci://…`) is loaded
//! from the file a [`ComponentResolver`] gives for it: the caller (the
//! `host` binary, over `skillhost-oci`) pulls, verifies and caches; this
//! crate reaches no registry, so the checker stays pure.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::check;
use super::diagnostic::{Reporter, codes};
use super::parse;
use super::typeflow;
use super::{
    ComponentSource, MAX_SUBGRAPH_DEPTH, MAX_SUBGRAPH_SCENARIOS, Node, NodeKind, Scenario,
    SubgraphNode,
};
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
    /// The child scenario each subgraph node runs, loaded like this one
    /// (same runtime, same resolver), by node id. Its `scenario` is the
    /// same as `scenario.subgraphs`' entry.
    pub subgraphs: BTreeMap<String, Arc<LoadedScenario>>,
}

impl LoadedScenario {
    /// The SHA-256 of each loaded component, by skill alias: what a run
    /// records as the code it uses.
    ///
    /// A subgraph's components are its parent's too, as `NODE/ALIAS`
    /// (nested: `NODE/NODE/ALIAS`): a child's code that changed is a change
    /// to the run that runs it.
    pub fn component_digests(&self) -> BTreeMap<String, String> {
        let mut digests: BTreeMap<String, String> = self
            .skills
            .iter()
            .map(|(alias, skill)| (alias.clone(), skill.digest.clone()))
            .collect();
        for (node, child) in &self.subgraphs {
            for (alias, digest) in child.component_digests() {
                digests.insert(format!("{node}/{alias}"), digest);
            }
        }
        digests
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
    let mut tree = Tree::default();
    load_tree(path, runtime, resolver, &mut tree)
}

/// Loads the scenario at `path` and, first, the scenarios its subgraph
/// nodes run; `tree` holds the files being loaded around it and those
/// loaded already.
fn load_tree(
    path: &Path,
    runtime: &Runtime,
    resolver: &dyn ComponentResolver,
    tree: &mut Tree<Arc<LoadedScenario>>,
) -> Result<LoadedScenario, CheckReport> {
    let (mut scenario, mut reporter) = parse_checked(path)?;
    let entered = tree.enter(path);
    let children = subgraphs(
        &mut scenario,
        &mut reporter,
        tree,
        |child, tree| load_tree(child, runtime, resolver, tree).map(Arc::new),
        |loaded| (loaded.scenario.clone(), loaded.warnings.clone()),
    );
    tree.leave(entered);
    load_skills(
        scenario,
        reporter,
        runtime,
        SkillSource::Files(resolver),
        Providers::Checked,
        children,
    )
}

/// What loading a tree of scenarios keeps between its files: the chain of
/// files being loaded, outermost first (canonical paths; a subgraph naming
/// one of them would include itself), and every child loaded so far, so
/// that a file that several nodes run is loaded once per level it is met
/// at, not once per path to it (which a few files that each run the next
/// twice would make millions). The loading recurses once per level of
/// the chain, and the chain never grows past [`MAX_SUBGRAPH_DEPTH`] levels.
struct Tree<T> {
    chain: Vec<PathBuf>,
    /// The scenarios being loaded, the file given first: the chain's
    /// length, files that cannot be made canonical included.
    open: usize,
    /// By canonical file and the levels left below it.
    loaded: HashMap<(PathBuf, usize), Loaded<T>>,
}

/// A child file loaded once already.
#[derive(Clone)]
enum Loaded<T> {
    Passed(T),
    /// It did not pass its checks; its diagnostics are in the report
    /// already.
    Failed {
        errors: usize,
    },
}

impl<T> Default for Tree<T> {
    fn default() -> Self {
        Tree {
            chain: Vec::new(),
            open: 0,
            loaded: HashMap::new(),
        }
    }
}

impl<T> Tree<T> {
    /// Adds `path`; whether it was added (a file that cannot be made
    /// canonical was not, and its loading reports why).
    fn enter(&mut self, path: &Path) -> bool {
        self.open += 1;
        match path.canonicalize() {
            Ok(path) => {
                self.chain.push(path);
                true
            }
            Err(_) => false,
        }
    }

    fn leave(&mut self, entered: bool) {
        self.open -= 1;
        if entered {
            self.chain.pop();
        }
    }

    /// The files from `path`'s place in the chain to its end, then `path`
    /// again: the cycle a subgraph naming `path` would close; None when it
    /// closes none.
    fn cycle(&self, path: &Path) -> Option<String> {
        let at = self.chain.iter().position(|p| p == path)?;
        Some(files_text(&self.chain[at..], path))
    }

    /// The level a child of the file loaded last would run at (the file
    /// `host check` is given is level 0).
    fn child_level(&self) -> usize {
        self.open
    }
}

/// `files` then `last`, as a chain of inclusions: `` `a` → `b` → `c` ``.
fn files_text(files: &[PathBuf], last: &Path) -> String {
    files
        .iter()
        .map(PathBuf::as_path)
        .chain(std::iter::once(last))
        .map(|p| format!("`{}`", p.display()))
        .collect::<Vec<_>>()
        .join(" → ")
}

/// Loads (with `load`) the child of every subgraph node of `scenario`,
/// reporting a file that does not exist, one that closes a cycle of
/// inclusions, one that would nest deeper than [`MAX_SUBGRAPH_DEPTH`]
/// levels, a tree of more than [`MAX_SUBGRAPH_SCENARIOS`] children, and a
/// child that does not pass its checks (its own diagnostics follow the
/// node's, once however many nodes run it); checks each node's input
/// mapping against its child's `[input]`; puts the children in
/// `scenario.subgraphs`, their digests into `scenario.digest`, and the
/// tree's depth and size in `scenario.subgraph_depth` and
/// `subgraph_scenarios`. `parts` gives a loaded child's scenario and
/// warnings.
fn subgraphs<T: Clone>(
    scenario: &mut Scenario,
    reporter: &mut Reporter,
    tree: &mut Tree<T>,
    mut load: impl FnMut(&Path, &mut Tree<T>) -> Result<T, CheckReport>,
    parts: impl Fn(&T) -> (Arc<Scenario>, Vec<Diagnostic>),
) -> BTreeMap<String, T> {
    let mut children = BTreeMap::new();
    let mut depth = 0;
    let mut expanded = 0usize;
    let level = tree.child_level();
    for node in &scenario.nodes {
        let Some(subgraph) = node.subgraph() else {
            continue;
        };
        if subgraph.written.is_empty() {
            continue; // reported when it parsed
        }
        let id = Some(node.id.as_str());
        let canonical = match subgraph.path.canonicalize() {
            Ok(canonical) if canonical.is_file() => canonical,
            _ => {
                reporter.error(
                    subgraph.path_line,
                    id,
                    codes::SUBGRAPH_NOT_FOUND,
                    format!(
                        "subgraph scenario `{}` does not exist (looked for `{}`); the path is \
                         relative to this scenario's file",
                        subgraph.written,
                        subgraph.path.display()
                    ),
                );
                continue;
            }
        };
        if let Some(cycle) = tree.cycle(&canonical) {
            reporter.error(
                subgraph.path_line,
                id,
                codes::SUBGRAPH_CYCLE,
                format!(
                    "subgraph scenario `{}` includes itself: {cycle}; a scenario cannot run \
                     itself as a step, directly or through others",
                    subgraph.written
                ),
            );
            continue;
        }
        if level > MAX_SUBGRAPH_DEPTH {
            reporter.error(
                subgraph.path_line,
                id,
                codes::SUBGRAPH_TOO_DEEP,
                format!(
                    "subgraph scenario `{}` would run {level} levels of subgraphs deep: {}; \
                     subgraphs nest at most {MAX_SUBGRAPH_DEPTH} levels (a scenario's child \
                     is level 1). Run fewer levels in one tree: merge a child into its \
                     parent, or start the deeper part as a run of its own",
                    subgraph.written,
                    files_text(&tree.chain, &canonical)
                ),
            );
            continue;
        }
        // The levels left below the child decide what it may hold: a file
        // loaded at that level before is not loaded again.
        let key = (canonical, MAX_SUBGRAPH_DEPTH - level);
        let loaded = match tree.loaded.get(&key) {
            Some(earlier) => earlier.clone(),
            // The child's loading adds its own file to the chain.
            None => {
                let loaded = load(&subgraph.path, tree);
                let memo = match &loaded {
                    Ok(child) => Loaded::Passed(child.clone()),
                    Err(report) => Loaded::Failed {
                        errors: report.errors.len(),
                    },
                };
                tree.loaded.insert(key, memo);
                match loaded {
                    Ok(child) => {
                        let (_, warnings) = parts(&child);
                        reporter.report.warnings.extend(warnings);
                        Loaded::Passed(child)
                    }
                    Err(report) => {
                        reporter.error(
                            subgraph.path_line,
                            id,
                            codes::SUBGRAPH_INVALID,
                            format!(
                                "subgraph scenario `{}` does not pass its checks ({} error(s), \
                                 listed with its file)",
                                subgraph.written,
                                report.errors.len()
                            ),
                        );
                        reporter.report.errors.extend(report.errors);
                        reporter.report.warnings.extend(report.warnings);
                        continue;
                    }
                }
            }
        };
        let child = match loaded {
            Loaded::Passed(child) => child,
            // Its diagnostics are listed where it was met first.
            Loaded::Failed { errors } => {
                reporter.error(
                    subgraph.path_line,
                    id,
                    codes::SUBGRAPH_INVALID,
                    format!(
                        "subgraph scenario `{}` does not pass its checks ({errors} error(s), \
                         listed with its file where another node runs it)",
                        subgraph.written,
                    ),
                );
                continue;
            }
        };
        let (child_scenario, _) = parts(&child);
        check_child_input(node, subgraph, &child_scenario, reporter);
        check_child_waits(node, subgraph, &child_scenario, reporter);
        depth = depth.max(child_scenario.subgraph_depth + 1);
        expanded = expanded.saturating_add(child_scenario.subgraph_scenarios.saturating_add(1));
        if expanded > MAX_SUBGRAPH_SCENARIOS {
            reporter.error(
                subgraph.path_line,
                id,
                codes::SUBGRAPH_TOO_MANY,
                format!(
                    "with subgraph scenario `{}` ({} child scenario(s) of its own), this \
                     scenario's subgraphs run {expanded} child scenarios, every node that runs \
                     one counted; a scenario's tree holds at most {MAX_SUBGRAPH_SCENARIOS}. \
                     Run fewer subgraphs, or start some as runs of their own",
                    subgraph.written, child_scenario.subgraph_scenarios
                ),
            );
            break;
        }
        children.insert(node.id.clone(), (child_scenario, child));
    }
    scenario.subgraph_depth = depth;
    scenario.subgraph_scenarios = expanded.min(MAX_SUBGRAPH_SCENARIOS + 1);
    if !children.is_empty() {
        let mut text = format!("scenario {}\n", scenario.digest);
        for (node, (child, _)) in &children {
            text.push_str(&format!("subgraph {node} {}\n", child.digest));
        }
        scenario.digest = skillhost_runtime::cache::sha256_hex(text.as_bytes());
    }
    children
        .into_iter()
        .map(|(node, (child_scenario, child))| {
            scenario.subgraphs.insert(node.clone(), child_scenario);
            (node, child)
        })
        .collect()
}

/// A subgraph's child may not wait for a person: a child run runs inside
/// its parent's node, which has no way to wait with it, so an approval
/// node in the child scenario is refused here rather than failing the run.
/// (A grandchild's approval fails the child's own load, so its direct
/// nodes are all there is to look at.)
fn check_child_waits(
    node: &Node,
    subgraph: &SubgraphNode,
    child: &Scenario,
    reporter: &mut Reporter,
) {
    let approvals: Vec<String> = child
        .nodes
        .iter()
        .filter(|n| n.kind() == NodeKind::Approval)
        .map(|n| format!("`{}`", n.id))
        .collect();
    if approvals.is_empty() {
        return;
    }
    reporter.error(
        subgraph.path_line,
        Some(node.id.as_str()),
        codes::SUBGRAPH_APPROVAL,
        format!(
            "subgraph scenario `{}` has approval node(s) {}: a child run cannot wait for a \
             person; run that scenario on its own, or move the approval into this scenario \
             before or after node `{}`",
            subgraph.written,
            approvals.join(", "),
            node.id
        ),
    );
}

/// A subgraph node's input mapping against its child's `[input]`: every
/// field it maps is declared there, and every required field without a
/// default is mapped. (Values are checked when the child starts.)
fn check_child_input(
    node: &Node,
    subgraph: &SubgraphNode,
    child: &Scenario,
    reporter: &mut Reporter,
) {
    let id = Some(node.id.as_str());
    for (field, expr) in &subgraph.input {
        if !child.input.iter().any(|f| &f.name == field) {
            let declared: Vec<String> = child.input.iter().map(|f| f.name.clone()).collect();
            reporter.error(
                expr.line,
                id,
                codes::INPUT_UNKNOWN_FIELD,
                format!(
                    "input `{field}` is not a field of subgraph scenario `{}`'s [input] \
                     (its fields: {})",
                    subgraph.written,
                    parse::list_or_none(&declared)
                ),
            );
        }
    }
    for field in &child.input {
        if field.required
            && field.default.is_none()
            && !subgraph.input.iter().any(|(name, _)| *name == field.name)
        {
            reporter.error(
                node.line,
                id,
                codes::INPUT_MISSING_FIELD,
                format!(
                    "subgraph scenario `{}` requires input `{}` ({}); map it in `input = {{ {} \
                     = \"<CEL>\" }}`",
                    subgraph.written, field.name, field.ty, field.name
                ),
            );
        }
    }
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
        SkillSource::Files(&NoRegistry),
        Providers::NotNeeded,
        BTreeMap::new(),
    )
}

/// Where a scenario's skills come from.
enum SkillSource<'a> {
    /// Their components' files, registry components through the resolver.
    Files(&'a dyn ComponentResolver),
    /// Loaded already, by alias: a composed scenario's, which are the
    /// server's offered skills.
    Loaded(&'a BTreeMap<String, Arc<Skill>>),
}

/// Loads the skills of `scenario` from their files (registry components
/// through `resolver`), by alias; what fails is reported.
fn load_skill_files(
    scenario: &Scenario,
    reporter: &mut Reporter,
    runtime: &Runtime,
    resolver: &dyn ComponentResolver,
) -> BTreeMap<String, Arc<Skill>> {
    let mut files = Vec::new();
    for (alias, skill) in &scenario.skills {
        let file = match &skill.component {
            ComponentSource::File(path) => path.clone(),
            ComponentSource::Registry(reference) => {
                match resolver.resolve(scenario, alias, reference) {
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
    skills
}

/// Loads a parsed scenario's skills (from `source`) and runs the checks
/// that need them.
fn load_skills(
    scenario: Scenario,
    mut reporter: Reporter,
    runtime: &Runtime,
    source: SkillSource<'_>,
    providers: Providers,
    subgraphs: BTreeMap<String, Arc<LoadedScenario>>,
) -> Result<LoadedScenario, CheckReport> {
    let skills = match source {
        SkillSource::Files(resolver) => {
            load_skill_files(&scenario, &mut reporter, runtime, resolver)
        }
        // What the caller could not give is reported already.
        SkillSource::Loaded(loaded) => loaded.clone(),
    };
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
        subgraphs,
    })
}

/// Parses and checks the scenario at `path` without loading its skills: every
/// check except those that need the components (input fit, capabilities, the
/// components themselves; the type flow takes skill inputs and outputs as
/// `dyn`). Enough to draw the graph or validate the format.
/// Returns the scenario and its warnings.
pub fn parse_file(path: &Path) -> Result<(Scenario, Vec<Diagnostic>), CheckReport> {
    let (scenario, mut reporter) = parse_tree(path, &mut Tree::default())?;
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
    let (scenario, reporter) = parse_text(text, path)?;
    let (scenario, mut reporter) = with_children(path, scenario, reporter, &mut Tree::default());
    typeflow::check_types(&scenario, &BTreeMap::new(), &mut reporter);
    let report = reporter.finish();
    if report.is_ok() {
        Ok((scenario, report.warnings))
    } else {
        Err(report)
    }
}

/// A child scenario as parsing without skills gives it: its scenario and
/// warnings.
type Parsed = (Arc<Scenario>, Vec<Diagnostic>);

/// [`parse_checked`], and the same for every subgraph's scenario, nested.
fn parse_tree(path: &Path, tree: &mut Tree<Parsed>) -> Result<(Scenario, Reporter), CheckReport> {
    let (scenario, reporter) = parse_checked(path)?;
    Ok(with_children(path, scenario, reporter, tree))
}

/// Parses every subgraph's scenario of `scenario` (read from `path`) into
/// `scenario.subgraphs`, nested.
fn with_children(
    path: &Path,
    mut scenario: Scenario,
    mut reporter: Reporter,
    tree: &mut Tree<Parsed>,
) -> (Scenario, Reporter) {
    let entered = tree.enter(path);
    subgraphs(
        &mut scenario,
        &mut reporter,
        tree,
        |child, tree| {
            let (child, mut reporter) = parse_tree(child, tree)?;
            typeflow::check_types(&child, &BTreeMap::new(), &mut reporter);
            let report = reporter.finish();
            if !report.is_ok() {
                return Err(report);
            }
            Ok((Arc::new(child), report.warnings))
        },
        |(child, warnings)| (child.clone(), warnings.clone()),
    );
    tree.leave(entered);
    (scenario, reporter)
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
    parse_text_into(text, path, Reporter::new(path.to_path_buf()))
}

/// [`parse_text`], adding to what `reporter` holds.
fn parse_text_into(
    text: &str,
    path: &Path,
    mut reporter: Reporter,
) -> Result<(Scenario, Reporter), CheckReport> {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let Some(parsed) = parse::parse(text, &absolute, &mut reporter) else {
        return Err(reporter.finish());
    };
    check::check_scenario(&parsed.scenario, &parsed.broken_edges, &mut reporter);
    Ok((parsed.scenario, reporter))
}

/// The report of a scenario text that does not parse (a TOML error, with
/// its line); an empty report if it parses.
pub(crate) fn report_of_text(text: &str, path: &Path) -> CheckReport {
    match parse_text(text, path) {
        Ok((_, reporter)) => reporter.finish(),
        Err(report) => report,
    }
}

/// Loads a scenario composed over MCP (`compose.rs`): its text (`path`
/// names it; it need not exist yet), checked like a file, then by `extra`
/// (the ceiling), with `reporter` holding what was found before; its skills
/// `skills` (the server's, by alias, loaded already) and its subgraphs the
/// offered scenarios `subgraph` gives by file. Instantiates nothing.
pub(crate) fn load_composed(
    text: &str,
    path: &Path,
    runtime: &Runtime,
    reporter: Reporter,
    skills: &BTreeMap<String, Arc<Skill>>,
    subgraph: &dyn Fn(&Path) -> Option<Arc<LoadedScenario>>,
    extra: &dyn Fn(&Scenario, &mut Reporter),
) -> Result<LoadedScenario, CheckReport> {
    let (mut scenario, mut reporter) = parse_text_into(text, path, reporter)?;
    extra(&scenario, &mut reporter);
    let mut tree = Tree::default();
    let entered = tree.enter(path);
    let children = subgraphs(
        &mut scenario,
        &mut reporter,
        &mut tree,
        |child, _| {
            subgraph(child).ok_or_else(|| {
                // Named by the rewrite, so offered; a file that moved since
                // the server started is reported here.
                let mut reporter = Reporter::new(child.to_path_buf());
                reporter.error(
                    0,
                    None,
                    codes::COMPOSE_SUBGRAPH,
                    "not a scenario this server offers",
                );
                reporter.finish()
            })
        },
        |loaded| (loaded.scenario.clone(), loaded.warnings.clone()),
    );
    tree.leave(entered);
    load_skills(
        scenario,
        reporter,
        runtime,
        SkillSource::Loaded(skills),
        Providers::Checked,
        children,
    )
}

/// The id of the first subgraph node of a scenario's text, if it has one:
/// read as TOML only, without looking for its children (a replay, which
/// does not re-execute child runs, asks).
pub fn first_subgraph_node(text: &str) -> Option<String> {
    let file: toml::Value = toml::from_str(text).ok()?;
    file.get("node")?
        .as_array()?
        .iter()
        .find(|node| node.get("kind").and_then(toml::Value::as_str) == Some("subgraph"))?
        .get("id")?
        .as_str()
        .map(str::to_string)
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
