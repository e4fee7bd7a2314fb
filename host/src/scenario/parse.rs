//! From TOML text to the [`Scenario`] model: names resolved, expressions
//! compiled, grants parsed, edges attached to their nodes.
//!
//! Parsing reports every problem it can find in one pass rather than
//! stopping at the first, so a user fixes a file in one round. Checks that
//! need the whole model (reachability, references, skills) are in
//! [`check`](super::check).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};
use toml::Spanned;

use super::diagnostic::{Lines, Reporter, codes};
use super::file::{self, EdgeDecl, NodeDecl, PostDecl, ScenarioFile};
use super::input::{self, InputField};
use super::locate;
use super::{
    ArtifactSpec, CitationSpec, Condition, DEFAULT_MAP_CONCURRENCY, ERRORS_FIELD, Expr, MapSpec,
    Node, NodeKind, PostCheck, RetrySpec, Route, Rule, Scenario, SkillRef, StateField, Write,
};
use crate::runtime::{Capability, Grants};

/// A parsed scenario, and what the checks that follow need to know about the
/// problems already reported.
pub(crate) struct Parsed {
    pub scenario: Scenario,
    /// The nodes whose `[[edge]]` was reported as broken (an unknown target,
    /// a malformed branch, no `else`). Their route keeps what could be read,
    /// so the other checks still see its guards and its cycles, but where
    /// such a node may lead is not known.
    pub broken_edges: BTreeSet<String>,
}

/// Parses `text`, the content of the scenario file at `path` (absolute), into
/// a scenario, reporting problems to `reporter`. `None` when the file is not
/// even a scenario (bad TOML, a missing `[scenario]`).
pub(crate) fn parse(text: &str, path: &Path, reporter: &mut Reporter) -> Option<Parsed> {
    let lines = Lines::new(text);
    let file: ScenarioFile = match toml::from_str(text) {
        Ok(file) => file,
        Err(e) => {
            let line = e.span().map_or(0, |s| lines.line(s.start));
            let table = locate::table_at(text, line);
            let message = e.message().trim().replace('\n', "; ");
            let message = match table.as_ref().and_then(locate::Table::prefix) {
                Some(prefix) => format!("{prefix}{message}"),
                None => message,
            };
            reporter.error(
                line,
                table.as_ref().and_then(locate::Table::node),
                codes::TOML,
                message,
            );
            return None;
        }
    };
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let digest = crate::runtime::cache::sha256_hex(text.as_bytes());
    let mut p = Parser {
        lines,
        reporter,
        dir,
        broken_edges: BTreeSet::new(),
    };
    let scenario = p.scenario(file, path.to_path_buf(), digest);
    Some(Parsed {
        scenario,
        broken_edges: p.broken_edges,
    })
}

struct Parser<'r> {
    lines: Lines,
    reporter: &'r mut Reporter,
    dir: PathBuf,
    broken_edges: BTreeSet<String>,
}

impl Parser<'_> {
    fn line<T>(&self, spanned: &Spanned<T>) -> usize {
        self.lines.line(spanned.span().start)
    }

    fn scenario(&mut self, file: ScenarioFile, path: PathBuf, digest: String) -> Scenario {
        let header_line = self.line(&file.scenario);
        let header = file.scenario.into_inner();
        if header.name.get_ref().trim().is_empty() {
            let line = self.line(&header.name);
            self.reporter.error(
                line,
                None,
                codes::INVALID_VALUE,
                "`[scenario] name` is empty; give the scenario a name",
            );
        }

        let inputs = self.inputs(file.input);
        let state = self.state(file.state);
        let skills = self.skills(file.skills);
        let config = file.config;

        let mut nodes = Vec::new();
        let mut ids = BTreeSet::new();
        for decl in file.nodes {
            let line = self.line(&decl);
            let decl = decl.into_inner();
            let id = decl.id.get_ref().clone();
            if !ids.insert(id.clone()) {
                self.reporter.error(
                    line,
                    Some(&id),
                    codes::DUPLICATE_NODE,
                    "a node with this id is already declared; node ids must be unique",
                );
                continue;
            }
            if !is_identifier(&id) {
                self.reporter.error(
                    self.line(&decl.id),
                    Some(&id),
                    codes::INVALID_VALUE,
                    "a node id is letters, digits, `_` and `-`, starting with a letter or `_`",
                );
            }
            nodes.push(self.node(decl, line, &skills, &config));
        }

        let mut has_edge_decl = BTreeSet::new();
        for edge in file.edges {
            self.edge(edge, &mut nodes, &mut has_edge_decl);
        }
        for node in &nodes {
            if !node.kind.is_terminal() && !has_edge_decl.contains(&node.id) {
                self.reporter.error(
                    node.line,
                    Some(&node.id),
                    codes::MISSING_EDGE,
                    format!(
                        "a {} node needs an outgoing [[edge]] (`from = \"{}\"`); only end and \
                         fail nodes finish a run",
                        node.kind, node.id
                    ),
                );
            }
        }

        let rules = file
            .rules
            .into_iter()
            .filter_map(|rule| self.rule(rule, &ids))
            .collect();

        let summary = file
            .summary
            .0
            .into_iter()
            .filter_map(|(label, source)| {
                let what = format!("summary `{}`", label.get_ref());
                let expr = self.expr(None, &what, &source)?;
                Some((label.into_inner(), expr))
            })
            .collect();

        let start = match &header.start {
            Some(start) => {
                if !ids.contains(start.get_ref()) {
                    self.reporter.error(
                        self.line(start),
                        None,
                        codes::UNKNOWN_NODE,
                        format!(
                            "`start` names node `{}`, which is not declared",
                            start.get_ref()
                        ),
                    );
                }
                start.get_ref().clone()
            }
            None => match nodes.first() {
                Some(node) => node.id.clone(),
                None => {
                    self.reporter.error(
                        header_line,
                        None,
                        codes::NO_NODES,
                        "the scenario has no [[node]]; add at least one node and an end node",
                    );
                    String::new()
                }
            },
        };
        if let Some(on_failure) = &header.on_failure
            && !ids.contains(on_failure.get_ref())
        {
            self.reporter.error(
                self.line(on_failure),
                None,
                codes::UNKNOWN_NODE,
                format!(
                    "`on_failure` names node `{}`, which is not declared",
                    on_failure.get_ref()
                ),
            );
        }

        Scenario {
            name: header.name.into_inner(),
            version: header.version,
            description: header.description,
            dir: self.dir.clone(),
            path,
            digest,
            start,
            on_failure: header.on_failure.map(Spanned::into_inner),
            input_schema: input::schema(&inputs),
            input_validator: std::sync::OnceLock::new(),
            input: inputs,
            config,
            state,
            skills,
            nodes,
            rules,
            summary,
        }
    }

    fn inputs(&mut self, decls: file::Entries<Spanned<file::InputFieldDecl>>) -> Vec<InputField> {
        let mut fields = Vec::new();
        for (name, decl) in decls.0 {
            let line = self.line(&name);
            let decl = decl.into_inner();
            if let Some(default) = &decl.default
                && !decl.ty.accepts(default)
            {
                self.reporter.error(
                    line,
                    None,
                    codes::TYPE_MISMATCH,
                    format!(
                        "input `{}`: default {default} is not of type {}",
                        name.get_ref(),
                        decl.ty
                    ),
                );
            }
            if let Some(pattern) = &decl.pattern
                && let Err(e) = crate::checks::schema::CompiledSchema::compile(
                    &serde_json::json!({ "pattern": pattern }),
                )
            {
                self.reporter.error(
                    line,
                    None,
                    codes::INVALID_VALUE,
                    format!("input `{}`: bad pattern: {e}", name.get_ref()),
                );
            }
            fields.push(InputField::from_decl(name.get_ref(), &decl, line));
        }
        fields
    }

    fn state(&mut self, decls: file::Entries<Spanned<file::StateFieldDecl>>) -> Vec<StateField> {
        let mut fields = Vec::new();
        for (name, decl) in decls.0 {
            let line = self.line(&name);
            let decl = decl.into_inner();
            let name = name.into_inner();
            if name == ERRORS_FIELD {
                self.reporter.error(
                    line,
                    None,
                    codes::RESERVED_STATE,
                    "`errors` is the engine's own state field (a list of node failures); \
                     declare another name",
                );
                continue;
            }
            let initial = match decl.default {
                Some(default) => {
                    let default_line = self.line(&default);
                    let default = default.into_inner();
                    if !decl.ty.accepts(&default) {
                        self.reporter.error(
                            default_line,
                            None,
                            codes::TYPE_MISMATCH,
                            format!(
                                "state `{name}`: default {default} is not of type {}",
                                decl.ty
                            ),
                        );
                    }
                    default
                }
                None => decl.ty.zero(),
            };
            fields.push(StateField {
                name,
                ty: decl.ty,
                initial,
                description: decl.description,
                line,
            });
        }
        fields
    }

    fn skills(
        &mut self,
        decls: file::Entries<Spanned<file::SkillDecl>>,
    ) -> BTreeMap<String, SkillRef> {
        let mut skills = BTreeMap::new();
        for (alias, decl) in decls.0 {
            let line = self.line(&alias);
            let alias = alias.into_inner();
            let decl = decl.into_inner();
            if !is_identifier(&alias) {
                self.reporter.error(
                    line,
                    None,
                    codes::INVALID_VALUE,
                    format!(
                        "skill alias `{alias}`: use letters, digits, `_` and `-`, starting with \
                         a letter or `_`"
                    ),
                );
            }
            let component = normalize(&self.dir.join(decl.component.get_ref()));
            skills.insert(
                alias.clone(),
                SkillRef {
                    alias,
                    component,
                    config: decl.config,
                    line: self.line(&decl.component),
                },
            );
        }
        skills
    }

    /// Compiles a node's extra JSON Schema, reporting one that is invalid.
    fn constraints(
        &mut self,
        node: Option<&str>,
        what: &str,
        schema: &Spanned<Value>,
    ) -> Option<Arc<crate::checks::schema::CompiledSchema>> {
        if !schema.get_ref().is_object() {
            self.reporter.error(
                self.line(schema),
                node,
                codes::INVALID_VALUE,
                format!("`{what}` must be a table holding a JSON Schema, e.g. `{what} = {{ properties = {{ title = {{ minLength = 3 }} }} }}`"),
            );
            return None;
        }
        match crate::checks::schema::CompiledSchema::compile(schema.get_ref()) {
            Ok(compiled) => Some(Arc::new(compiled)),
            Err(e) => {
                self.reporter.error(
                    self.line(schema),
                    node,
                    codes::INVALID_VALUE,
                    format!("`{what}` is not a valid JSON Schema: {e}"),
                );
                None
            }
        }
    }

    fn expr(&mut self, node: Option<&str>, what: &str, source: &Spanned<String>) -> Option<Expr> {
        let line = self.line(source);
        match Expr::compile_at(source.get_ref(), line) {
            Ok(expr) => Some(expr),
            Err(e) => {
                let detail = match &e {
                    super::ExprError::Syntax { message, .. } => message.clone(),
                    other => other.to_string(),
                };
                self.reporter.error(
                    line,
                    node,
                    codes::CEL_SYNTAX,
                    format!("{what}: `{}` is not valid CEL: {detail}", source.get_ref()),
                );
                None
            }
        }
    }

    fn node(
        &mut self,
        decl: NodeDecl,
        line: usize,
        skills: &BTreeMap<String, SkillRef>,
        scenario_config: &Map<String, Value>,
    ) -> Node {
        let id = decl.id.get_ref().clone();
        let node = Some(id.as_str());
        let kind = decl.kind;
        self.fields_allowed(&decl, &id);

        let skill = decl.skill.as_ref().map(|s| s.get_ref().clone());
        if kind.runs_skill() {
            match &decl.skill {
                None => self.reporter.error(
                    line,
                    node,
                    codes::MISSING_SKILL,
                    format!("a {kind} node needs `skill = \"<alias>\"` naming a [skills.<alias>]"),
                ),
                Some(alias) if !skills.contains_key(alias.get_ref()) => {
                    let known = skills.keys().cloned().collect::<Vec<_>>();
                    self.reporter.error(
                        self.line(alias),
                        node,
                        codes::UNKNOWN_SKILL,
                        format!(
                            "skill `{}` is not declared; declared skills: {}",
                            alias.get_ref(),
                            list_or_none(&known)
                        ),
                    )
                }
                Some(_) => {}
            }
        }

        let mut config = skill
            .as_ref()
            .and_then(|alias| skills.get(alias))
            .map(|s| s.config.clone())
            .unwrap_or_default();
        for (key, value) in scenario_config {
            config.insert(key.clone(), value.clone());
        }

        let input = decl
            .input
            .map(|entries| {
                entries
                    .into_inner()
                    .0
                    .into_iter()
                    .map(|(field, source)| {
                        let what = format!("input `{}`", field.get_ref());
                        // A field whose expression does not compile is still
                        // mapped, so the checker does not also call it missing;
                        // the scenario is rejected either way.
                        let expr = self
                            .expr(node, &what, &source)
                            .unwrap_or_else(|| placeholder(self.line(&source)));
                        (field.into_inner(), expr)
                    })
                    .collect()
            })
            .unwrap_or_default();

        let map = if kind == NodeKind::Map {
            let concurrency = match &decl.concurrency {
                None => DEFAULT_MAP_CONCURRENCY,
                Some(c) if *c.get_ref() >= 1 => *c.get_ref() as usize,
                Some(c) => {
                    self.reporter.error(
                        self.line(c),
                        node,
                        codes::INVALID_VALUE,
                        format!("`concurrency = {}`: it must be at least 1", c.get_ref()),
                    );
                    DEFAULT_MAP_CONCURRENCY
                }
            };
            match &decl.over {
                None => {
                    self.reporter.error(
                        line,
                        node,
                        codes::MISSING_OVER,
                        "a map node needs `over = \"<CEL list>\"`, e.g. `over = \"state.papers\"`",
                    );
                    None
                }
                Some(over) => self
                    .expr(node, "`over`", over)
                    .map(|over| MapSpec { over, concurrency }),
            }
        } else {
            None
        };

        let writes = decl
            .writes
            .map(|w| w.into_inner())
            .unwrap_or_default()
            .into_iter()
            .map(|w| {
                let w = w.into_inner();
                let what = format!("write into `{}`", w.field.get_ref());
                // A write whose expression does not compile is kept, so that
                // its field is still checked; the scenario is rejected anyway.
                let from = self
                    .expr(node, &what, &w.from)
                    .unwrap_or_else(|| placeholder(self.line(&w.from)));
                Write {
                    line: self.line(&w.field),
                    field: w.field.into_inner(),
                    from,
                    reducer: w.reducer,
                }
            })
            .collect();

        let pre = decl
            .pre
            .map(|p| p.into_inner())
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let c = c.into_inner();
                let name = c.name.unwrap_or_else(|| format!("pre[{i}]"));
                let expr = self.expr(node, &format!("pre `{name}`"), &c.when)?;
                Some(Condition {
                    message: c
                        .message
                        .unwrap_or_else(|| format!("`{}` is false", expr.source)),
                    name,
                    expr,
                })
            })
            .collect();

        let post = decl
            .post
            .map(|p| p.into_inner())
            .unwrap_or_default()
            .into_iter()
            .enumerate()
            .filter_map(|(i, p)| self.post(node, i, p))
            .collect();

        let retry = decl.retry.map(|r| {
            let r_line = self.line(&r);
            let r = r.into_inner();
            let max_attempts = *r.max_attempts.get_ref();
            if !(1..=u32::MAX as i64).contains(&max_attempts) {
                self.reporter.error(
                    r_line,
                    node,
                    codes::INVALID_VALUE,
                    format!(
                        "`retry.max_attempts = {max_attempts}`: it counts the first attempt, so \
                         it is at least 1 (1 means never retry)"
                    ),
                );
            }
            RetrySpec {
                max_attempts: max_attempts.clamp(1, u32::MAX as i64) as u32,
                backoff_ms: r.backoff_ms,
            }
        });

        let (capabilities, grants) = match &decl.capabilities {
            Some(caps) => self.grants(node, caps),
            None => (BTreeMap::new(), Grants::default()),
        };

        let max_visits = decl.max_visits.as_ref().map(|m| {
            if *m.get_ref() == 0 {
                self.reporter.error(
                    self.line(m),
                    node,
                    codes::INVALID_VALUE,
                    "`max_visits = 0` would forbid the node; it must be at least 1",
                );
            }
            *m.get_ref()
        });

        let message = decl
            .message
            .as_ref()
            .and_then(|m| self.expr(node, "`message`", m));

        let input_constraints = decl
            .input_schema
            .as_ref()
            .and_then(|schema| self.constraints(node, "input_schema", schema));
        let output_constraints = decl
            .output_schema
            .as_ref()
            .and_then(|schema| self.constraints(node, "output_schema", schema));

        let artifacts = decl
            .artifacts
            .as_ref()
            .map(|a| a.get_ref().as_slice())
            .unwrap_or_default()
            .iter()
            .filter_map(|a| {
                let a = a.get_ref();
                let name = a.name.get_ref().clone();
                if name.is_empty() || name.contains('/') || name.contains('\\') || name == ".." {
                    self.reporter.error(
                        self.line(&a.name),
                        node,
                        codes::INVALID_VALUE,
                        format!(
                            "artifact name `{name}` must be a plain file name such as `report.md`"
                        ),
                    );
                    return None;
                }
                let from = self.expr(node, &format!("artifact `{name}`"), &a.from)?;
                Some(ArtifactSpec {
                    name,
                    from,
                    media_type: a
                        .media_type
                        .clone()
                        .unwrap_or_else(|| "application/octet-stream".to_string()),
                })
            })
            .collect();

        Node {
            id,
            kind,
            line,
            description: decl.description,
            skill,
            input,
            map,
            writes,
            pre,
            post,
            retry,
            timeout_ms: decl.timeout_ms.map(Spanned::into_inner),
            memory_mb: decl.memory_mb.map(Spanned::into_inner),
            fuel: decl.fuel.map(Spanned::into_inner),
            capabilities,
            grants: Arc::new(grants),
            max_visits,
            route: Route::End,
            edge_line: None,
            message,
            suggestions: decl
                .suggestions
                .map(Spanned::into_inner)
                .unwrap_or_default(),
            config,
            artifacts,
            input_constraints,
            output_constraints,
        }
    }

    /// Reports fields that mean nothing on this kind of node.
    fn fields_allowed(&mut self, decl: &NodeDecl, id: &str) {
        use NodeKind::*;
        let kind = decl.kind;
        let present: [(&str, Option<usize>, &[NodeKind]); 18] = [
            (
                "skill",
                decl.skill.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            (
                "input",
                decl.input.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            ("over", decl.over.as_ref().map(|s| self.line(s)), &[Map]),
            (
                "concurrency",
                decl.concurrency.as_ref().map(|s| self.line(s)),
                &[Map],
            ),
            (
                "writes",
                decl.writes.as_ref().map(|s| self.line(s)),
                &[Skill, Map, Gate],
            ),
            (
                "pre",
                decl.pre.as_ref().map(|s| self.line(s)),
                &[Skill, Map, Gate],
            ),
            (
                "post",
                decl.post.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            (
                "retry",
                decl.retry.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            (
                "timeout_ms",
                decl.timeout_ms.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            (
                "memory_mb",
                decl.memory_mb.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            (
                "fuel",
                decl.fuel.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            (
                "capabilities",
                decl.capabilities.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            (
                "max_visits",
                decl.max_visits.as_ref().map(|s| self.line(s)),
                &[Skill, Map, Gate],
            ),
            (
                "message",
                decl.message.as_ref().map(|s| self.line(s)),
                &[Fail],
            ),
            (
                "suggestions",
                decl.suggestions.as_ref().map(|s| self.line(s)),
                &[Fail],
            ),
            (
                "artifacts",
                decl.artifacts.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            (
                "input_schema",
                decl.input_schema.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
            (
                "output_schema",
                decl.output_schema.as_ref().map(|s| self.line(s)),
                &[Skill, Map],
            ),
        ];
        for (field, line, allowed) in present {
            if let Some(line) = line
                && !allowed.contains(&kind)
            {
                let on = allowed
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", ");
                self.reporter.error(
                    line,
                    Some(id),
                    codes::FIELD_NOT_ALLOWED,
                    format!("`{field}` has no meaning on a {kind} node (only on: {on})"),
                );
            }
        }
    }

    fn post(
        &mut self,
        node: Option<&str>,
        index: usize,
        p: Spanned<PostDecl>,
    ) -> Option<PostCheck> {
        let line = self.line(&p);
        let p = p.into_inner();
        let kind = p.kind.as_ref().map(|k| k.get_ref().as_str());
        match kind {
            None | Some("condition") => {
                let stray = [
                    ("claims", p.claims.is_some()),
                    ("cites", p.cites.is_some()),
                    ("sources", p.sources.is_some()),
                    ("source_id", p.source_id.is_some()),
                    ("quote", p.quote.is_some()),
                    ("source_text", p.source_text.is_some()),
                    ("min_per_claim", p.min_per_claim.is_some()),
                ];
                for (field, present) in stray {
                    if present {
                        self.reporter.error(
                            line,
                            node,
                            codes::FIELD_NOT_ALLOWED,
                            format!(
                                "post[{index}]: `{field}` belongs to a citations check; add \
                                 `kind = \"citations\"` or remove it"
                            ),
                        );
                    }
                }
                let Some(when) = &p.when else {
                    self.reporter.error(
                        line,
                        node,
                        codes::INVALID_VALUE,
                        format!("post[{index}]: a condition needs `when = \"<CEL>\"`"),
                    );
                    return None;
                };
                let name = p.name.unwrap_or_else(|| format!("post[{index}]"));
                let expr = self.expr(node, &format!("post `{name}`"), when)?;
                Some(PostCheck::Condition(Condition {
                    message: p
                        .message
                        .unwrap_or_else(|| format!("`{}` is false", expr.source)),
                    name,
                    expr,
                }))
            }
            Some("citations") => {
                for (field, present) in [
                    ("when", p.when.is_some()),
                    ("name", p.name.is_some()),
                    ("message", p.message.is_some()),
                ] {
                    if present {
                        self.reporter.error(
                            line,
                            node,
                            codes::FIELD_NOT_ALLOWED,
                            format!("post[{index}]: `{field}` has no meaning on a citations check"),
                        );
                    }
                }
                let mut missing = Vec::new();
                if p.claims.is_none() {
                    missing.push("claims");
                }
                if p.cites.is_none() {
                    missing.push("cites");
                }
                if p.sources.is_none() {
                    missing.push("sources");
                }
                if p.quote.is_some() && p.source_text.is_none() {
                    missing.push("source_text");
                }
                if !missing.is_empty() {
                    self.reporter.error(
                        line,
                        node,
                        codes::INVALID_VALUE,
                        format!(
                            "post[{index}]: a citations check needs {}",
                            missing
                                .iter()
                                .map(|m| format!("`{m}`"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                    return None;
                }
                let min_per_claim = match &p.min_per_claim {
                    None => 1,
                    Some(m) if *m.get_ref() >= 0 => *m.get_ref() as usize,
                    Some(m) => {
                        self.reporter.error(
                            self.line(m),
                            node,
                            codes::INVALID_VALUE,
                            format!("post[{index}]: `min_per_claim` cannot be negative"),
                        );
                        1
                    }
                };
                // Either expression may not compile (reported); the other is
                // still checked, and the scenario is rejected either way.
                let mut compiled = |what: &str, source: &Spanned<String>| {
                    self.expr(node, &format!("post[{index}].{what}"), source)
                        .unwrap_or_else(|| placeholder(self.line(source)))
                };
                let claims = compiled("claims", p.claims.as_ref()?);
                let sources = compiled("sources", p.sources.as_ref()?);
                Some(PostCheck::Citations(CitationSpec {
                    claims,
                    cites: p.cites.unwrap_or_default(),
                    sources,
                    source_id: p.source_id.unwrap_or_else(|| "id".to_string()),
                    quote: p.quote.unwrap_or_default(),
                    source_text: p.source_text.unwrap_or_default(),
                    min_per_claim,
                    line,
                }))
            }
            Some(other) => {
                let line = p.kind.as_ref().map_or(line, |k| self.line(k));
                self.reporter.error(
                    line,
                    node,
                    codes::INVALID_VALUE,
                    format!(
                        "post[{index}]: unknown kind `{other}`; a post check is a condition \
                         (`when`) or `kind = \"citations\"`"
                    ),
                );
                None
            }
        }
    }

    fn grants(
        &mut self,
        node: Option<&str>,
        caps: &Spanned<file::Entries<Spanned<String>>>,
    ) -> (BTreeMap<String, String>, Grants) {
        let mut written = BTreeMap::new();
        let mut grants = Grants::default();
        for (name, value) in &caps.get_ref().0 {
            let line = self.line(name);
            let name = name.get_ref();
            let Some(capability) = Capability::from_name(name) else {
                let known = Capability::ALL.map(Capability::name).join(", ");
                self.reporter.error(
                    line,
                    node,
                    codes::UNKNOWN_CAPABILITY,
                    format!("capability `{name}` does not exist; capabilities are {known}"),
                );
                continue;
            };
            let mut value = value.get_ref().clone();
            if capability == Capability::Fs && !value.is_empty() {
                value = normalize(&self.dir.join(&value))
                    .to_string_lossy()
                    .into_owned();
            }
            if let Err(e) = grants.add(name, &value) {
                self.reporter
                    .error(line, node, codes::BAD_GRANT, format!("{e}"));
                continue;
            }
            written.insert(name.clone(), value);
        }
        (written, grants)
    }

    fn edge(
        &mut self,
        edge: Spanned<EdgeDecl>,
        nodes: &mut [Node],
        has_edge_decl: &mut BTreeSet<String>,
    ) {
        let line = self.line(&edge);
        let edge = edge.into_inner();
        let from = edge.from.get_ref().clone();
        let known: BTreeSet<String> = nodes.iter().map(|n| n.id.clone()).collect();
        let Some(index) = nodes.iter().position(|n| n.id == from) else {
            self.reporter.error(
                self.line(&edge.from),
                None,
                codes::UNKNOWN_NODE,
                format!("[[edge]] from `{from}`: no node has this id"),
            );
            return;
        };
        let node = Some(from.as_str());
        if !has_edge_decl.insert(from.clone()) {
            self.reporter.error(
                line,
                node,
                codes::MULTIPLE_EDGES,
                format!(
                    "a second [[edge]] from `{from}`; a node has one outgoing [[edge]], use \
                     `branches` to go to several places"
                ),
            );
            return;
        }
        if nodes[index].kind.is_terminal() {
            self.reporter.error(
                line,
                node,
                codes::TERMINAL_HAS_EDGE,
                format!(
                    "an {} node finishes the run and cannot have an outgoing [[edge]]",
                    nodes[index].kind
                ),
            );
            return;
        }
        let target_ok = |p: &mut Self, to: &Spanned<String>| -> bool {
            if known.contains(to.get_ref()) {
                return true;
            }
            p.reporter.error(
                p.line(to),
                node,
                codes::UNKNOWN_NODE,
                format!("[[edge]] to `{}`: no node has this id", to.get_ref()),
            );
            false
        };
        // A broken edge (reported) keeps what could be read of its route:
        // its guards are still checked, and its valid targets still make
        // cycles. `broken_edges` says that where it leads is not known.
        let mut ok = true;
        let route = match (&edge.to, &edge.branches) {
            (Some(to), None) => {
                ok = target_ok(self, to);
                Some(Route::Next(to.get_ref().clone()))
            }
            (None, Some(branches)) => {
                let mut guarded = Vec::new();
                let mut otherwise = None;
                for (i, branch) in branches.iter().enumerate() {
                    let b_line = self.line(branch);
                    let b = branch.get_ref();
                    match (&b.when, &b.to, &b.otherwise) {
                        (Some(when), Some(to), None) => {
                            if otherwise.is_some() {
                                self.reporter.error(
                                    b_line,
                                    node,
                                    codes::INVALID_EDGE,
                                    format!(
                                        "branch {i} comes after `else`; `else` must be the last \
                                         branch"
                                    ),
                                );
                                ok = false;
                            }
                            ok &= target_ok(self, to);
                            // A guard that does not compile (reported) stands
                            // in as `null`: the route, and the other guards,
                            // are still checked.
                            let expr = self
                                .expr(node, &format!("branch {i} `when`"), when)
                                .unwrap_or_else(|| placeholder(self.line(when)));
                            guarded.push((expr, to.get_ref().clone()));
                        }
                        (None, None, Some(to)) => {
                            if otherwise.is_some() {
                                self.reporter.error(
                                    b_line,
                                    node,
                                    codes::INVALID_EDGE,
                                    "a second `else` branch; there is exactly one, last",
                                );
                                ok = false;
                            }
                            ok &= target_ok(self, to);
                            otherwise = Some(to.get_ref().clone());
                        }
                        _ => {
                            self.reporter.error(
                                b_line,
                                node,
                                codes::INVALID_EDGE,
                                format!(
                                    "branch {i} must be `{{ when = \"<CEL>\", to = \"<node>\" }}` \
                                     or `{{ else = \"<node>\" }}`"
                                ),
                            );
                            ok = false;
                        }
                    }
                }
                match otherwise {
                    None => {
                        self.reporter.error(
                            line,
                            node,
                            codes::MISSING_ELSE,
                            "branches need a last `{ else = \"<node>\" }` so that every case \
                             goes somewhere",
                        );
                        ok = false;
                        // The route the guards make; the last one's target
                        // stands in for the missing `else`.
                        let last = guarded.last().map(|(_, to)| to.clone());
                        last.map(|otherwise| Route::Branches {
                            branches: guarded,
                            otherwise,
                        })
                    }
                    Some(otherwise) => Some(Route::Branches {
                        branches: guarded,
                        otherwise,
                    }),
                }
            }
            _ => {
                self.reporter.error(
                    line,
                    node,
                    codes::INVALID_EDGE,
                    "an [[edge]] has either `to = \"<node>\"` or `branches = [...]`, not both or \
                     neither",
                );
                ok = false;
                None
            }
        };
        if !ok {
            self.broken_edges.insert(from.clone());
        }
        if let Some(route) = route {
            nodes[index].route = route;
            nodes[index].edge_line = Some(line);
        }
    }

    fn rule(&mut self, rule: Spanned<file::RuleDecl>, ids: &BTreeSet<String>) -> Option<Rule> {
        let line = self.line(&rule);
        let rule = rule.into_inner();
        if let Some(after) = &rule.after
            && !ids.contains(after.get_ref())
        {
            self.reporter.error(
                self.line(after),
                None,
                codes::UNKNOWN_NODE,
                format!(
                    "rule `{}`: `after` names node `{}`, which is not declared",
                    rule.code,
                    after.get_ref()
                ),
            );
        }
        let when = self.expr(None, &format!("rule `{}`", rule.code), &rule.when)?;
        Some(Rule {
            when,
            severity: rule.severity,
            code: rule.code,
            message: rule.message,
            suggestions: rule.suggestions,
            after: rule.after.map(Spanned::into_inner),
            line,
        })
    }
}

/// Stands in for an expression that did not compile.
fn placeholder(line: usize) -> Expr {
    Expr::compile_at("null", line).expect("`null` is valid CEL")
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

pub(crate) fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items
            .iter()
            .map(|i| format!("`{i}`"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// `a/./b/../c` -> `a/c`, without touching the file system (the file need
/// not exist yet for the path to be reported).
fn normalize(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}
