//! From TOML text to the [`Scenario`] model: names resolved, expressions
//! compiled, grants parsed, edges attached to their nodes.
//!
//! Parsing reports every problem it can find in one pass rather than
//! stopping at the first, so a user fixes a file in one round. Checks that
//! need the whole model (reachability, references, skills) are in
//! [`check`](super::check).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use toml::Spanned;

use super::diagnostic::{Lines, Reporter, codes};
use super::file::{self, EdgeDecl, ScenarioFile};
use super::input::{self, InputField};
use super::locate;
use super::{
    ComponentSource, ERRORS_FIELD, Expr, Node, REGISTRY_SCHEME, Route, Rule, Scenario, SkillRef,
    StateField,
};

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
    let digest = skillhost_runtime::cache::sha256_hex(text.as_bytes());
    let mut p = Parser {
        lines,
        reporter,
        dir,
        scenario_name: file.scenario.get_ref().name.get_ref().clone(),
        broken_edges: BTreeSet::new(),
    };
    let scenario = p.scenario(file, path.to_path_buf(), digest);
    Some(Parsed {
        scenario,
        broken_edges: p.broken_edges,
    })
}

/// The state of one parse: where lines start, where problems go, and what the
/// checks after it need to know. The kinds of node parse through it too
/// ([`crate::node`]).
pub(crate) struct Parser<'r> {
    lines: Lines,
    pub reporter: &'r mut Reporter,
    /// The scenario's directory: relative paths resolve here.
    pub dir: PathBuf,
    /// The scenario's name: whose `kv` namespaces its nodes grant.
    pub scenario_name: String,
    broken_edges: BTreeSet<String>,
}

impl<'r> Parser<'r> {
    #[cfg(test)]
    pub(crate) fn for_tests(lines: Lines, reporter: &'r mut Reporter) -> Self {
        Parser {
            lines,
            reporter,
            dir: PathBuf::from("/"),
            scenario_name: "test".into(),
            broken_edges: BTreeSet::new(),
        }
    }

    /// The line `spanned` starts on.
    pub fn line<T>(&self, spanned: &Spanned<T>) -> usize {
        self.lines.line(spanned.span().start)
    }

    /// The line of byte `offset`.
    pub fn line_at(&self, offset: usize) -> usize {
        self.lines.line(offset)
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

        if let Some(budget) = &header.token_budget
            && *budget.get_ref() == 0
        {
            let line = self.line(budget);
            self.reporter.error(
                line,
                None,
                codes::INVALID_VALUE,
                "`[scenario] token_budget` is 0, which would refuse every completion; give the \
                 most tokens (input and output) a run's `llm` completions may use, e.g. 20000, \
                 or leave it out for no budget",
            );
        }

        let queue = self.queue_policy(&header);
        let schedules = self.schedules(file.schedules);
        let inputs = self.inputs(file.input);
        let state = self.state(file.state);
        let skills = self.skills(file.skills);
        let trust_keys = file
            .trust
            .keys
            .iter()
            .map(|key| normalize(&self.dir.join(key.get_ref())))
            .collect();
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
            nodes.push(crate::node::parse(self, decl, line, &skills, &config));
        }

        let mut has_edge_decl = BTreeSet::new();
        for edge in file.edges {
            self.edge(edge, &mut nodes, &mut has_edge_decl);
        }
        for node in &nodes {
            if !node.is_terminal() && !has_edge_decl.contains(&node.id) {
                self.reporter.error(
                    node.line,
                    Some(&node.id),
                    codes::MISSING_EDGE,
                    format!(
                        "a {} node needs an outgoing [[edge]] (`from = \"{}\"`); only end and \
                         fail nodes finish a run",
                        node.kind(),
                        node.id
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

        for node in &nodes {
            if let crate::NodeBody::Approval(crate::ApprovalNode {
                timeout: Some(timeout),
                ..
            }) = &node.body
                && !ids.contains(&timeout.on_timeout)
            {
                self.reporter.error(
                    timeout.line,
                    Some(&node.id),
                    codes::UNKNOWN_NODE,
                    format!(
                        "`on_timeout` names node `{}`, which is not declared",
                        timeout.on_timeout
                    ),
                );
            }
        }

        Scenario {
            name: header.name.into_inner(),
            version: header.version,
            description: header.description,
            dir: self.dir.clone(),
            path,
            digest,
            subgraphs: BTreeMap::new(),
            subgraph_depth: 0,
            subgraph_scenarios: 0,
            start,
            on_failure: header.on_failure.map(Spanned::into_inner),
            token_budget: header.token_budget.map(Spanned::into_inner),
            input_schema: input::schema(&inputs),
            input_validator: std::sync::OnceLock::new(),
            input: inputs,
            config,
            state,
            skills,
            nodes,
            rules,
            summary,
            queue,
            schedules,
            trust_keys,
        }
    }

    fn inputs(&mut self, decls: file::Entries<Spanned<file::InputFieldDecl>>) -> Vec<InputField> {
        self.fields("input", None, decls)
    }

    /// Fields declared like `[input]`'s (the run input, an approval's
    /// answer): `what` names them in messages.
    pub(crate) fn fields(
        &mut self,
        what: &str,
        node: Option<&str>,
        decls: file::Entries<Spanned<file::InputFieldDecl>>,
    ) -> Vec<InputField> {
        let mut fields = Vec::new();
        for (name, decl) in decls.0 {
            let line = self.line(&name);
            let decl = decl.into_inner();
            if let Some(default) = &decl.default
                && !decl.ty.accepts(default)
            {
                self.reporter.error(
                    line,
                    node,
                    codes::TYPE_MISMATCH,
                    format!(
                        "{what} `{}`: default {default} is not of type {}",
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
                    node,
                    codes::INVALID_VALUE,
                    format!("{what} `{}`: bad pattern: {e}", name.get_ref()),
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
            // A registry reference is resolved by the caller when it loads
            // (`load_with`); the parser never reaches a registry.
            let written = decl.component.get_ref();
            let component = if written.starts_with(REGISTRY_SCHEME) {
                ComponentSource::Registry(written.clone())
            } else {
                ComponentSource::File(normalize(&self.dir.join(written)))
            };
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

    /// Compiles `source`, reporting it as `what` when it is not valid CEL.
    pub fn expr(
        &mut self,
        node: Option<&str>,
        what: &str,
        source: &Spanned<String>,
    ) -> Option<Expr> {
        let line = self.line(source);
        match Expr::compile_at(source.get_ref(), line) {
            Ok(expr) => Some(expr),
            Err(super::ExprError::Budget { message, .. }) => {
                self.reporter.error(
                    line,
                    node,
                    codes::CEL_BUDGET,
                    format!(
                        "{what}: `{}` is over the expression budget: {message}",
                        super::expr::shorten(source.get_ref())
                    ),
                );
                None
            }
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
        if nodes[index].is_terminal() {
            self.reporter.error(
                line,
                node,
                codes::TERMINAL_HAS_EDGE,
                format!(
                    "an {} node finishes the run and cannot have an outgoing [[edge]]",
                    nodes[index].kind()
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
pub(crate) fn placeholder(line: usize) -> Expr {
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
pub(crate) fn normalize(path: &Path) -> PathBuf {
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
