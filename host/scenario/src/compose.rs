//! Scenarios a client composes (`host mcp`'s `scenario_compose` tool): the
//! operator's ceiling on what they may use, and the one check that turns a
//! client's text into a scenario the engine can run.
//!
//! A composed scenario is untrusted twice over: its author is a model or
//! program on the other side of a protocol, and nothing of it was reviewed.
//! So it passes every check a scenario file passes (types, reachability,
//! bounded cycles, fail routes, the expression budget, the token budget) and
//! then the ceiling ([`Ceiling`]): the skills it names must be ones the
//! server offers ([`Offered`], by tool name or digest), each grant must lie
//! within what the ceiling allows, and its nodes, visits, limits and budget
//! must stay under the ceiling's. It names skills and subgraph scenarios by
//! what the server calls them, never by path: [`compose`] rewrites each to
//! the offered component's or scenario's file in place (lines unchanged), so
//! the text it keeps is an ordinary scenario file, which a worker, a resume,
//! a replay and the inspector read like any other. It is kept under its
//! SHA-256 in the server's directory of composed scenarios, written once.
//!
//! Nothing here instantiates a skill: the skills are the server's, loaded
//! already, and a refused scenario leaves nothing behind.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Value, json};
use skillhost_runtime::capabilities::http::HostPattern;
use skillhost_runtime::{Limits, Runtime, Skill};

use crate::diagnostic::{CheckReport, Diagnostic, Lines, Reporter, codes};
use crate::file::ScenarioFile;
use crate::load::{self, LoadedScenario};
use crate::{NodeBody, Scenario};

/// Every composed scenario's name starts with this: it keeps a composed
/// scenario apart from the operator's in the queue's per-scenario limits,
/// in `kv` namespaces (owned by the scenario's name) and in run lists.
pub const NAME_PREFIX: &str = "composed-";

/// The largest scenario text a ceiling accepts unless it says otherwise.
pub const DEFAULT_MAX_BYTES: usize = 256 << 10;
/// The most nodes a composed scenario has unless the ceiling says otherwise.
pub const DEFAULT_MAX_NODES: usize = 64;

/// What the operator lets composed scenarios use, at most (`host mcp
/// --compose-ceiling FILE`, a TOML file; `docs/mcp.md`). A capability the
/// ceiling does not list is not granted to a composed scenario at all.
#[derive(Debug, Clone)]
pub struct Ceiling {
    /// The ceiling file.
    pub file: PathBuf,
    /// `[skills] allow`: the offered skills a composed scenario may use, by
    /// tool name or `sha256:DIGEST`; `None`: every offered skill.
    pub skills: Option<Vec<String>>,
    /// `[grants] fs`: directories (canonical) an `fs` grant may name or lie
    /// under.
    pub fs: Vec<PathBuf>,
    /// `[grants] sql`: database files, or directories holding them
    /// (canonical).
    pub sql: Vec<PathBuf>,
    /// `[grants] http`: host patterns each granted pattern must lie within.
    pub http: Vec<HostPattern>,
    /// `[grants] llm`: `PROVIDER/MODEL`, the model `*` for any of the
    /// provider's.
    pub llm: Vec<(String, String)>,
    /// `[grants] kv`: namespaces a composed scenario may use (never shared).
    pub kv: Vec<String>,
    pub limits: CeilingLimits,
}

/// `[limits]` of a ceiling: each the most a composed scenario may ask;
/// `None` where the host's own limit is the only one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CeilingLimits {
    pub max_bytes: usize,
    pub max_nodes: usize,
    pub max_visits: Option<u32>,
    pub timeout_ms: Option<u64>,
    pub memory_mb: Option<u64>,
    /// A node that sets no `fuel` runs unmetered, so with this set every
    /// skill and map node must set `fuel` at most this.
    pub fuel: Option<u64>,
    pub max_host_calls: Option<u32>,
    /// A composed scenario with an `llm` grant must set `[scenario]
    /// token_budget`, at most this.
    pub token_budget: Option<u64>,
    /// The most items a map node runs at once.
    pub max_concurrency: Option<usize>,
    /// The highest `[scenario] priority` (default 0: never ahead of the
    /// operator's default runs).
    pub max_priority: i64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CeilingFile {
    #[serde(default)]
    skills: Option<SkillsDecl>,
    #[serde(default)]
    grants: GrantsDecl,
    #[serde(default)]
    limits: LimitsDecl,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SkillsDecl {
    allow: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct GrantsDecl {
    #[serde(default)]
    fs: Vec<String>,
    #[serde(default)]
    sql: Vec<String>,
    #[serde(default)]
    http: Vec<String>,
    #[serde(default)]
    llm: Vec<String>,
    #[serde(default)]
    kv: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LimitsDecl {
    max_bytes: Option<usize>,
    max_nodes: Option<usize>,
    max_visits: Option<u32>,
    timeout_ms: Option<u64>,
    memory_mb: Option<u64>,
    fuel: Option<u64>,
    max_host_calls: Option<u32>,
    token_budget: Option<u64>,
    max_concurrency: Option<usize>,
    max_priority: Option<i64>,
}

impl Ceiling {
    /// Reads and checks the ceiling file at `path`; the error names the
    /// file, and the line and key where there is one.
    pub fn read(path: &Path) -> Result<Ceiling, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read the compose ceiling: {e}", path.display()))?;
        Ceiling::parse(&text, path)
    }

    /// [`Ceiling::read`] of text already read.
    pub fn parse(text: &str, path: &Path) -> Result<Ceiling, String> {
        let shown = path.display();
        let file: CeilingFile = toml::from_str(text).map_err(|e| {
            let line = e.span().map_or(0, |s| Lines::new(text).line(s.start));
            format!(
                "{shown}:{line}: {}; the ceiling has `[skills] allow`, `[grants]` (fs, sql, \
                 http, llm, kv) and `[limits]` (docs/mcp.md)",
                e.message().trim().replace('\n', "; ")
            )
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let canonical = |key: &str, written: &str, dir: bool| {
            let resolved = base.join(written);
            let real = resolved.canonicalize().map_err(|e| {
                format!("{shown}: [grants] {key} `{written}`: {e}; name an existing path")
            })?;
            if let Some(reason) = skillhost_runtime::capabilities::fs::never_granted(&real) {
                return Err(format!("{shown}: [grants] {key} `{written}` {reason}"));
            }
            if dir && !real.is_dir() {
                return Err(format!(
                    "{shown}: [grants] {key} `{written}` is not a directory"
                ));
            }
            Ok(real)
        };
        let fs = file
            .grants
            .fs
            .iter()
            .map(|d| canonical("fs", d, true))
            .collect::<Result<_, _>>()?;
        let sql = file
            .grants
            .sql
            .iter()
            .map(|d| canonical("sql", d, false))
            .collect::<Result<_, _>>()?;
        let http = file
            .grants
            .http
            .iter()
            .map(|p| HostPattern::parse(p).map_err(|e| format!("{shown}: [grants] http {e}")))
            .collect::<Result<_, _>>()?;
        let llm = file
            .grants
            .llm
            .iter()
            .map(|entry| match entry.split_once('/') {
                Some((provider, model)) if !provider.is_empty() && !model.is_empty() => {
                    Ok((provider.to_string(), model.to_string()))
                }
                _ => Err(format!(
                    "{shown}: [grants] llm `{entry}` is not `PROVIDER/MODEL` (`PROVIDER/*` \
                     for any of the provider's models)"
                )),
            })
            .collect::<Result<_, _>>()?;
        let l = file.limits;
        for (key, zero) in [
            ("max_bytes", l.max_bytes == Some(0)),
            ("max_nodes", l.max_nodes == Some(0)),
            ("max_visits", l.max_visits == Some(0)),
            ("timeout_ms", l.timeout_ms == Some(0)),
            ("memory_mb", l.memory_mb == Some(0)),
            ("fuel", l.fuel == Some(0)),
            ("max_concurrency", l.max_concurrency == Some(0)),
        ] {
            if zero {
                return Err(format!(
                    "{shown}: [limits] {key} is 0, which nothing fits; leave it out for the \
                     host's own limit"
                ));
            }
        }
        Ok(Ceiling {
            file: path.to_path_buf(),
            skills: file.skills.map(|s| s.allow),
            fs,
            sql,
            http,
            llm,
            kv: file.grants.kv,
            limits: CeilingLimits {
                max_bytes: l.max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
                max_nodes: l.max_nodes.unwrap_or(DEFAULT_MAX_NODES),
                max_visits: l.max_visits,
                timeout_ms: l.timeout_ms,
                memory_mb: l.memory_mb,
                fuel: l.fuel,
                max_host_calls: l.max_host_calls,
                token_budget: l.token_budget,
                max_concurrency: l.max_concurrency,
                max_priority: l.max_priority.unwrap_or(0),
            },
        })
    }

    /// The ceiling as a client reads it (a resource of `host mcp`).
    pub fn to_json(&self) -> Value {
        let l = &self.limits;
        json!({
            "skills": self.skills,
            "grants": {
                "fs": self.fs.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "sql": self.sql.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
                "http": self.http.iter().map(ToString::to_string).collect::<Vec<_>>(),
                "llm": self.llm.iter().map(|(p, m)| format!("{p}/{m}")).collect::<Vec<_>>(),
                "kv": self.kv,
            },
            "limits": {
                "max_bytes": l.max_bytes,
                "max_nodes": l.max_nodes,
                "max_visits": l.max_visits,
                "timeout_ms": l.timeout_ms,
                "memory_mb": l.memory_mb,
                "fuel": l.fuel,
                "max_host_calls": l.max_host_calls,
                "token_budget": l.token_budget,
                "max_concurrency": l.max_concurrency,
                "max_priority": l.max_priority,
            },
            "name_prefix": NAME_PREFIX,
        })
    }

    /// Checks the ceiling against the host it serves on, at start: the
    /// host's own rule for absolute grants (`SKILLHOST_FS_ROOTS`) must
    /// allow each of its paths too, or no composed scenario could use
    /// them; and no path it grants may hold `dir`, where composed
    /// scenarios are kept, which a composed scenario could then read.
    pub fn check_host(&self, dir: &Path) -> Result<(), String> {
        let roots = crate::checks::fs_grant::allowed_roots();
        let file = self.file.display();
        for (key, path) in self
            .fs
            .iter()
            .map(|p| ("fs", p))
            .chain(self.sql.iter().map(|p| ("sql", p)))
        {
            if !roots.iter().any(|root| path.starts_with(root)) {
                return Err(format!(
                    "{file}: [grants] {key} `{}` is not under a root SKILLHOST_FS_ROOTS \
                     allows, so no scenario could be granted it: add it (or a directory \
                     above it) to SKILLHOST_FS_ROOTS (`:`-separated)",
                    path.display()
                ));
            }
            let kept = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
            if kept.starts_with(path) {
                return Err(format!(
                    "{file}: [grants] {key} `{}` holds `{}`, where composed scenarios are \
                     kept: keep them elsewhere (--compose-dir)",
                    path.display(),
                    dir.display()
                ));
            }
        }
        Ok(())
    }
}

/// An offered skill as a composed scenario may name it.
#[derive(Debug, Clone)]
pub struct OfferedSkill {
    /// What the server calls it (its tool's name, or the skill's id).
    pub name: String,
    /// What the kept text names as its component: the file it was loaded
    /// from (absolute), or its registry reference.
    pub component: String,
    pub skill: Arc<Skill>,
}

/// What composed scenarios may name: the server's skills and scenarios.
#[derive(Debug, Default, Clone)]
pub struct Offered {
    /// Every offered skill, once per digest, in the order added.
    skills: Vec<Arc<OfferedSkill>>,
    /// By each name a composed scenario may give: the offered name,
    /// `sha256:DIGEST`, and the component as kept (so a kept text composes
    /// again to itself).
    skill_names: HashMap<String, Arc<OfferedSkill>>,
    /// Offered scenarios by name and by their file's path.
    scenarios: HashMap<String, Arc<LoadedScenario>>,
}

impl Offered {
    /// Adds a skill; a second skill of the same digest adds only its name.
    pub fn add_skill(&mut self, name: &str, component: String, skill: Arc<Skill>) {
        let digest_name = format!("sha256:{}", skill.digest);
        let offered = match self.skill_names.get(&digest_name) {
            Some(known) => known.clone(),
            None => {
                let offered = Arc::new(OfferedSkill {
                    name: name.to_string(),
                    component,
                    skill,
                });
                self.skills.push(offered.clone());
                self.skill_names.insert(digest_name, offered.clone());
                self.skill_names
                    .insert(offered.component.clone(), offered.clone());
                offered
            }
        };
        self.skill_names.entry(name.to_string()).or_insert(offered);
    }

    /// Adds a scenario a composed scenario may run as a subgraph, and its
    /// skills.
    pub fn add_scenario(&mut self, loaded: &Arc<LoadedScenario>) {
        let scenario = &loaded.scenario;
        self.scenarios.insert(scenario.name.clone(), loaded.clone());
        self.scenarios
            .insert(scenario.path.display().to_string(), loaded.clone());
        if let Ok(canonical) = scenario.path.canonicalize() {
            self.scenarios
                .insert(canonical.display().to_string(), loaded.clone());
        }
        for (alias, skill) in &loaded.skills {
            let component = match scenario.skills.get(alias) {
                Some(declared) => match &declared.component {
                    crate::ComponentSource::File(path) => path.display().to_string(),
                    registry => registry.to_string(),
                },
                None => continue,
            };
            let name = skill.name.clone();
            self.add_skill(&name, component, skill.clone());
        }
    }

    /// Every offered skill, once each.
    pub fn skills(&self) -> &[Arc<OfferedSkill>] {
        &self.skills
    }

    fn skill(&self, name: &str) -> Option<&Arc<OfferedSkill>> {
        self.skill_names.get(name)
    }
}

/// A scenario as a client sends it.
#[derive(Debug, Clone)]
pub enum Source {
    /// TOML text, as a scenario file holds it.
    Toml(String),
    /// The same structure as JSON (tables as objects, `[[node]]` as a list
    /// of objects).
    Json(Value),
}

/// A composed scenario that passed: loaded, ready to run, and the text it
/// is kept as.
#[derive(Debug)]
pub struct Composed {
    pub loaded: LoadedScenario,
    /// The scenario text kept: the client's, with its skills and subgraphs
    /// named by file.
    pub text: String,
    /// Where it is (or is to be) kept: `DIR/SHA256.toml`.
    pub path: PathBuf,
}

/// Why a composed scenario was refused: every error found, and the TOML
/// text their lines refer to when the client sent JSON.
#[derive(Debug)]
pub struct Refusal {
    pub report: CheckReport,
    /// The TOML the lines count in, when it is not the text the client
    /// sent (JSON converted).
    pub toml: Option<String>,
}

/// Checks `source` as a scenario composed over MCP, against every check of
/// a scenario file and against `ceiling`, with `offered`'s skills and
/// scenarios; `dir` is where composed scenarios are kept. Nothing is
/// written and no skill is instantiated: the caller keeps the text at its
/// path before it starts a run.
pub fn compose(
    source: Source,
    offered: &Offered,
    ceiling: &Ceiling,
    dir: &Path,
    runtime: &Runtime,
) -> Result<Composed, Refusal> {
    let sent_path = dir.join("composed.toml");
    let refuse = |code: &'static str, message: String, toml: Option<String>| {
        let mut reporter = Reporter::new(sent_path.clone());
        reporter.error(0, None, code, message);
        Refusal {
            report: reporter.finish(),
            toml,
        }
    };
    let max = ceiling.limits.max_bytes;
    let (text, converted) = match source {
        Source::Toml(text) => {
            if text.len() > max {
                return Err(refuse(
                    codes::COMPOSE_TOO_LARGE,
                    format!(
                        "the scenario is {} bytes; the ceiling takes at most {max}",
                        text.len()
                    ),
                    None,
                ));
            }
            (text, false)
        }
        Source::Json(value) => {
            let size = serde_json::to_vec(&value).map_or(usize::MAX, |v| v.len());
            if size > max {
                return Err(refuse(
                    codes::COMPOSE_TOO_LARGE,
                    format!(
                        "the scenario is {size} bytes as JSON; the ceiling takes at most {max}"
                    ),
                    None,
                ));
            }
            if !value.is_object() {
                return Err(refuse(
                    codes::COMPOSE_FORMAT,
                    "the scenario must be TOML text or a JSON object of its tables".into(),
                    None,
                ));
            }
            match toml::to_string(&value) {
                Ok(text) => (text, true),
                Err(e) => {
                    return Err(refuse(
                        codes::COMPOSE_FORMAT,
                        format!(
                            "the JSON does not make a TOML scenario: {e} (TOML has no null; \
                             leave a key out instead)"
                        ),
                        None,
                    ));
                }
            }
        }
    };
    let toml_for = |text: &str| converted.then(|| text.to_string());
    let mut reporter = Reporter::new(sent_path.clone());
    let mut skills = BTreeMap::new();
    let Some(text) = name_by_file(&text, offered, ceiling, &mut reporter, &mut skills) else {
        // The TOML does not parse: the loader reports it with its line.
        let report = load::report_of_text(&text, &sent_path);
        return Err(Refusal {
            toml: toml_for(&text),
            report,
        });
    };
    let path = dir.join(format!(
        "{}.toml",
        skillhost_runtime::cache::sha256_hex(text.as_bytes())
    ));
    let ceiling_check = |scenario: &Scenario, reporter: &mut Reporter| {
        check_ceiling(scenario, ceiling, reporter);
    };
    let subgraph = |path: &Path| offered.scenarios.get(&path.display().to_string()).cloned();
    match load::load_composed(
        &text,
        &path,
        runtime,
        reporter,
        &skills,
        &subgraph,
        &ceiling_check,
    ) {
        Ok(loaded) => Ok(Composed { loaded, text, path }),
        Err(report) => Err(Refusal {
            report,
            toml: toml_for(&text),
        }),
    }
}

/// The client's text with each `[skills.X] component` and each subgraph
/// node's `scenario` rewritten from what the server calls them to their
/// files, in place; what names nothing offered (or what the ceiling does
/// not allow) reported. `skills` gets the skills allowed, by alias: one
/// refused is not there, and its nodes are not checked against it. `None`
/// when the text is not a scenario's TOML.
fn name_by_file(
    text: &str,
    offered: &Offered,
    ceiling: &Ceiling,
    reporter: &mut Reporter,
    skills: &mut BTreeMap<String, Arc<Skill>>,
) -> Option<String> {
    let file: ScenarioFile = toml::from_str(text).ok()?;
    let lines = Lines::new(text);
    let mut edits: Vec<(std::ops::Range<usize>, String)> = Vec::new();
    let offered_names = || {
        offered
            .skills()
            .iter()
            .map(|s| format!("`{}`", s.name))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (alias, decl) in &file.skills.0 {
        let component = &decl.get_ref().component;
        let line = lines.line(component.span().start);
        let written = component.get_ref();
        let Some(skill) = offered.skill(written) else {
            reporter.error(
                line,
                None,
                codes::COMPOSE_SKILL,
                format!(
                    "skill `{alias}`: component `{written}` is not a skill this server offers; \
                     name one by its name or `sha256:DIGEST` (the skills resource lists them: \
                     {})",
                    offered_names()
                ),
            );
            continue;
        };
        if let Some(allowed) = &ceiling.skills {
            let digest = format!("sha256:{}", skill.skill.digest);
            if !allowed.iter().any(|a| *a == skill.name || *a == digest) {
                reporter.error(
                    line,
                    None,
                    codes::COMPOSE_SKILL,
                    format!(
                        "skill `{alias}`: `{}` ({digest}) is offered, but the compose ceiling \
                         (`{}`) does not allow composed scenarios to use it",
                        skill.name,
                        ceiling.file.display()
                    ),
                );
                continue;
            }
        }
        skills.insert(alias.get_ref().clone(), skill.skill.clone());
        edits.push((component.span(), quoted(&skill.component)));
    }
    for node in &file.nodes {
        let Some(scenario) = &node.get_ref().scenario else {
            continue;
        };
        let written = scenario.get_ref();
        match offered.scenarios.get(written) {
            Some(loaded) => edits.push((
                scenario.span(),
                quoted(&loaded.scenario.path.display().to_string()),
            )),
            None => reporter.error(
                lines.line(scenario.span().start),
                Some(node.get_ref().id.get_ref()),
                codes::COMPOSE_SUBGRAPH,
                format!(
                    "subgraph scenario `{written}` is not a scenario this server offers; a \
                     composed scenario runs offered scenarios only, by their tool names"
                ),
            ),
        }
    }
    for schedule in &file.schedules {
        reporter.error(
            lines.line(schedule.span().start),
            None,
            codes::COMPOSE_NOT_ALLOWED,
            "a composed scenario has no `[[schedule]]`: it runs when a client calls it".to_string(),
        );
    }
    if let Some(key) = file.trust.keys.first() {
        reporter.error(
            lines.line(key.span().start),
            None,
            codes::COMPOSE_NOT_ALLOWED,
            "a composed scenario has no `[trust]`: its skills are the server's, trusted by \
             its operator"
                .to_string(),
        );
    }
    let name = file.scenario.get_ref().name.get_ref();
    if !name.starts_with(NAME_PREFIX) || name.len() == NAME_PREFIX.len() {
        reporter.error(
            lines.line(file.scenario.get_ref().name.span().start),
            None,
            codes::COMPOSE_NAME,
            format!(
                "scenario name `{name}`: a composed scenario's name starts with \
                 `{NAME_PREFIX}` (e.g. `{NAME_PREFIX}{}`), which keeps its runs, queue limits \
                 and `kv` namespaces apart from the operator's scenarios",
                name.trim_start_matches(NAME_PREFIX)
            ),
        );
    }
    edits.sort_by_key(|(range, _)| std::cmp::Reverse(range.start));
    let mut out = text.to_string();
    for (range, replacement) in edits {
        out.replace_range(range, &replacement);
    }
    Some(out)
}

/// `text` as a TOML basic string.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// The ceiling's checks on a parsed composed scenario.
fn check_ceiling(scenario: &Scenario, ceiling: &Ceiling, reporter: &mut Reporter) {
    let l = &ceiling.limits;
    let file = ceiling.file.display();
    if scenario.nodes.len() > l.max_nodes {
        reporter.error(
            0,
            None,
            codes::COMPOSE_LIMIT,
            format!(
                "{} nodes; the compose ceiling (`{file}`) allows at most {}",
                scenario.nodes.len(),
                l.max_nodes
            ),
        );
    }
    if scenario.queue.priority > l.max_priority {
        reporter.error(
            0,
            None,
            codes::COMPOSE_LIMIT,
            format!(
                "`[scenario] priority` {} is above the compose ceiling's {}",
                scenario.queue.priority, l.max_priority
            ),
        );
    }
    let any_llm = scenario
        .nodes
        .iter()
        .filter_map(|n| n.call())
        .any(|c| c.grants.llm.is_some());
    if let Some(max) = l.token_budget {
        match scenario.token_budget {
            Some(budget) if budget > max => reporter.error(
                0,
                None,
                codes::COMPOSE_LIMIT,
                format!("`[scenario] token_budget` {budget} is above the compose ceiling's {max}"),
            ),
            None if any_llm => reporter.error(
                0,
                None,
                codes::COMPOSE_LIMIT,
                format!(
                    "a node grants `llm`, so `[scenario] token_budget` must be set, at most \
                     {max} (the compose ceiling's)"
                ),
            ),
            _ => {}
        }
    }
    let defaults = Limits::default();
    for node in &scenario.nodes {
        let id = Some(node.id.as_str());
        let mut over = |field: &str, message: String| {
            reporter.error(
                node.line,
                id,
                codes::COMPOSE_LIMIT,
                format!("`{field}` {message} (compose ceiling `{file}`)"),
            );
        };
        if let (Some(max), Some(visits)) = (l.max_visits, node.max_visits())
            && visits > max
        {
            over(
                "max_visits",
                format!("{visits} is above the ceiling's {max}"),
            );
        }
        if let NodeBody::Map(map) = &node.body
            && let Some(max) = l.max_concurrency
            && map.concurrency > max
        {
            over(
                "concurrency",
                format!("{} is above the ceiling's {max}", map.concurrency),
            );
        }
        let Some(call) = node.call() else {
            continue;
        };
        let what = |set: bool| if set { "" } else { " (the default)" };
        if let Some(max) = l.timeout_ms {
            let ms = call
                .timeout_ms
                .unwrap_or(defaults.timeout.as_millis() as u64);
            if ms > max {
                over(
                    "timeout_ms",
                    format!(
                        "{ms}{} is above the ceiling's {max}",
                        what(call.timeout_ms.is_some())
                    ),
                );
            }
        }
        if let Some(max) = l.memory_mb {
            let mb = call.memory_mb.unwrap_or(defaults.memory_bytes >> 20);
            if mb > max {
                over(
                    "memory_mb",
                    format!(
                        "{mb}{} is above the ceiling's {max}",
                        what(call.memory_mb.is_some())
                    ),
                );
            }
        }
        if let Some(max) = l.fuel {
            match call.fuel {
                Some(fuel) if fuel > max => {
                    over("fuel", format!("{fuel} is above the ceiling's {max}"))
                }
                None => over(
                    "fuel",
                    format!("is not set, so the call would run unmetered; set it, at most {max}"),
                ),
                _ => {}
            }
        }
        if let Some(max) = l.max_host_calls {
            let calls = call.max_host_calls.unwrap_or(defaults.max_host_calls);
            if calls > max {
                over(
                    "max_host_calls",
                    format!(
                        "{calls}{} is above the ceiling's {max}",
                        what(call.max_host_calls.is_some())
                    ),
                );
            }
        }
        let line = call.capabilities_line.unwrap_or(node.line);
        let mut grant = |capability: &str, message: String| {
            reporter.error(
                line,
                id,
                codes::COMPOSE_GRANT,
                format!("`capabilities.{capability}`: {message} (compose ceiling `{file}`)"),
            );
        };
        let grants = &call.grants;
        if let Some(fs) = &grants.fs
            && !ceiling.fs.iter().any(|d| fs.root.starts_with(d))
        {
            grant(
                "fs",
                format!(
                    "`{}` is not under a directory the ceiling allows ({})",
                    fs.root.display(),
                    listed(ceiling.fs.iter().map(|p| p.display().to_string()))
                ),
            );
        }
        if let Some(sql) = &grants.sql
            && !ceiling.sql.iter().any(|d| sql.path.starts_with(d))
        {
            grant(
                "sql",
                format!(
                    "`{}` is not a database the ceiling allows ({})",
                    sql.path.display(),
                    listed(ceiling.sql.iter().map(|p| p.display().to_string()))
                ),
            );
        }
        if let Some(http) = &grants.http {
            for pattern in &http.hosts {
                if !ceiling.http.iter().any(|outer| pattern.within(outer)) {
                    grant(
                        "http",
                        format!(
                            "host `{pattern}` is not within the hosts the ceiling allows ({})",
                            listed(ceiling.http.iter().map(ToString::to_string))
                        ),
                    );
                }
            }
            if http.has_headers() {
                grant(
                    "http",
                    "`headers` send values from the host's environment, which a composed \
                     scenario may not use"
                        .to_string(),
                );
            }
        }
        if let Some(llm) = &grants.llm
            && !ceiling
                .llm
                .iter()
                .any(|(p, m)| *p == llm.provider && (m == "*" || *m == llm.model))
        {
            grant(
                "llm",
                format!(
                    "`{}/{}` is not a provider and model the ceiling allows ({})",
                    llm.provider,
                    llm.model,
                    listed(ceiling.llm.iter().map(|(p, m)| format!("{p}/{m}")))
                ),
            );
        }
        if let Some(kv) = &grants.kv {
            if kv.shared {
                grant(
                    "kv",
                    format!(
                        "namespace `{}` is shared; a composed scenario's namespaces are its own",
                        kv.namespace
                    ),
                );
            } else if !ceiling.kv.contains(&kv.namespace) {
                grant(
                    "kv",
                    format!(
                        "namespace `{}` is not one the ceiling allows ({})",
                        kv.namespace,
                        listed(ceiling.kv.iter().cloned())
                    ),
                );
            }
        }
    }
}

/// `a`, `b` — or "none" for an empty list.
fn listed(items: impl Iterator<Item = String>) -> String {
    let items: Vec<String> = items.map(|i| format!("`{i}`")).collect();
    if items.is_empty() {
        "it allows none".to_string()
    } else {
        items.join(", ")
    }
}

/// One diagnostic as a client reads it: `code`, `line` (`null` for the
/// whole text), `node`, `message`.
pub fn diagnostic_json(d: &Diagnostic) -> Value {
    json!({
        "code": d.code,
        "line": (d.line > 0).then_some(d.line),
        "node": d.node,
        "message": d.message,
    })
}

/// A refusal as one JSON object for a client: `errors` (each `code`,
/// `line`, `node`, `message`) and the TOML the lines count in when the
/// client sent JSON.
pub fn refusal_json(refusal: &Refusal) -> Value {
    let mut out = json!({
        "ok": false,
        "errors": refusal.report.errors.iter().map(diagnostic_json).collect::<Vec<_>>(),
        "warnings": refusal.report.warnings.iter().map(diagnostic_json).collect::<Vec<_>>(),
    });
    if let Some(toml) = &refusal.toml {
        out["toml"] = json!(toml);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, dir: &Path) -> Result<Ceiling, String> {
        Ceiling::parse(text, &dir.join("ceiling.toml"))
    }

    #[test]
    fn a_ceiling_resolves_its_paths_against_its_own_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("corpus")).unwrap();
        let ceiling = parse(
            "[grants]\nfs = [\"corpus\"]\nllm = [\"local/*\"]\nhttp = [\"*.example.org\"]\n",
            dir.path(),
        )
        .unwrap();
        assert_eq!(
            ceiling.fs,
            [dir.path().join("corpus").canonicalize().unwrap()]
        );
        assert_eq!(ceiling.llm, [("local".to_string(), "*".to_string())]);
        assert_eq!(ceiling.limits.max_nodes, DEFAULT_MAX_NODES);
        assert_eq!(ceiling.limits.max_bytes, DEFAULT_MAX_BYTES);
        assert_eq!(ceiling.limits.max_priority, 0);
        assert_eq!(
            ceiling.to_json()["grants"]["http"],
            json!(["*.example.org"])
        );
    }

    #[test]
    fn a_bad_ceiling_names_its_file_and_what_is_wrong() {
        let dir = tempfile::tempdir().unwrap();
        for (text, says) in [
            ("[grants]\nfs = [\"missing\"]\n", "fs `missing`"),
            ("[grants]\nfs = [\"/proc\"]\n", "never granted"),
            ("[grants]\nllm = [\"local\"]\n", "not `PROVIDER/MODEL`"),
            ("[grants]\nhttp = [\"https://x.org/\"]\n", "not a host"),
            ("[limits]\nfuel = 0\n", "fuel is 0"),
            ("[limits]\nmax_nodes = -1\n", "ceiling.toml:2"),
            ("[grant]\nfs = []\n", "unknown field `grant`"),
        ] {
            let error = parse(text, dir.path()).unwrap_err();
            assert!(
                error.contains(says) && error.contains("ceiling.toml"),
                "{text}: {error}"
            );
        }
        // A ceiling path must lie under the host's roots too (none here).
        std::fs::create_dir(dir.path().join("corpus")).unwrap();
        let ceiling = parse("[grants]\nfs = [\"corpus\"]\n", dir.path()).unwrap();
        let error = ceiling.check_host(&dir.path().join("kept")).unwrap_err();
        assert!(error.contains("SKILLHOST_FS_ROOTS"), "{error}");
    }
}
