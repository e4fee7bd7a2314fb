//! The static checker: what can be known about a scenario before it runs.
//!
//! [`check_scenario`] needs only the model: the graph (reachability, ends,
//! bounded cycles), the variables and state fields every expression uses,
//! and what every write does to its field. [`check_skills`] needs the loaded
//! components: whether each node's input mapping fits its skill's WIT input
//! and whether the node grants every capability the skill imports.
//! [`check_llm_providers`] needs the host's configuration: whether every
//! `llm` grant names a provider it defines, whose key is set.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde_json::Value;

use super::diagnostic::{Reporter, codes};
use super::node::BASE_VARS;
use super::parse::list_or_none;
use super::{ERRORS_FIELD, Expr, FieldType, Node, Reducer, Route, Scenario, SkillCall};
use skillhost_runtime::{Capability, LlmProviders, ProviderProblem, Skill};

/// Checks the scenario as a graph and its expressions against what they may
/// use. `broken_edges`: the nodes whose `[[edge]]` was reported as broken.
pub(crate) fn check_scenario(s: &Scenario, broken_edges: &BTreeSet<String>, r: &mut Reporter) {
    graph(s, broken_edges, r);
    references(s, r);
    writes(s, r);
    unused(s, r);
    crate::queue::check_inputs(s, r);
}

// ---- the graph -----------------------------------------------------------

fn graph(s: &Scenario, broken_edges: &BTreeSet<String>, r: &mut Reporter) {
    if s.nodes.is_empty() {
        return;
    }
    let index: BTreeMap<&str, usize> = s
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    let succ: Vec<Vec<usize>> = s
        .nodes
        .iter()
        .map(|n| {
            let mut next: Vec<usize> = n
                .successors()
                .into_iter()
                .filter_map(|id| index.get(id).copied())
                .collect();
            next.dedup();
            next
        })
        .collect();

    // A node whose edge is missing or broken (already reported) could lead
    // anywhere: what is reachable, and what can finish, is unknown. The
    // cycles its valid targets make are still cycles.
    if s.nodes.iter().any(|n| {
        !n.is_terminal() && (matches!(n.route, Route::End) || broken_edges.contains(&n.id))
    }) {
        cycles(s, &succ, r);
        return;
    }

    // Reachable from the start and from the failure handler.
    let roots: Vec<usize> = [Some(s.start.as_str()), s.on_failure.as_deref()]
        .into_iter()
        .flatten()
        .filter_map(|id| index.get(id).copied())
        .collect();
    let reachable = closure(&roots, |i| succ[i].clone());
    for (i, node) in s.nodes.iter().enumerate() {
        if !reachable.contains(&i) && !roots.is_empty() {
            r.error(
                node.line,
                Some(&node.id),
                codes::UNREACHABLE,
                format!(
                    "no path from the start (`{}`){} reaches this node; add an edge to it or \
                     remove it",
                    s.start,
                    s.on_failure
                        .as_ref()
                        .map(|f| format!(" or from `on_failure` (`{f}`)"))
                        .unwrap_or_default()
                ),
            );
        }
    }

    // Every node must be able to finish. Nodes without any edge are
    // reported by the parser already.
    let mut pred = vec![Vec::new(); s.nodes.len()];
    for (from, next) in succ.iter().enumerate() {
        for &to in next {
            pred[to].push(from);
        }
    }
    let terminals: Vec<usize> = s
        .nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| n.is_terminal())
        .map(|(i, _)| i)
        .collect();
    let can_finish = closure(&terminals, |i| pred[i].clone());
    for (i, node) in s.nodes.iter().enumerate() {
        if !can_finish.contains(&i) && !succ[i].is_empty() {
            r.error(
                node.line,
                Some(&node.id),
                codes::NO_END,
                "no end or fail node can be reached from this node, so a run that gets here \
                 never finishes; route it (or the cycle it is in) to an end node",
            );
        }
    }

    cycles(s, &succ, r);
}

/// A cycle needs a bound on one of its nodes.
fn cycles(s: &Scenario, succ: &[Vec<usize>], r: &mut Reporter) {
    for component in strongly_connected(succ) {
        let cyclic = component.len() > 1 || succ[component[0]].contains(&component[0]);
        if !cyclic {
            continue;
        }
        if component.iter().any(|&i| s.nodes[i].max_visits().is_some()) {
            continue;
        }
        let mut members: Vec<usize> = component.clone();
        members.sort_unstable();
        let first = &s.nodes[members[0]];
        let names: Vec<String> = members.iter().map(|&i| s.nodes[i].id.clone()).collect();
        r.error(
            first.line,
            Some(&first.id),
            codes::UNBOUNDED_CYCLE,
            format!(
                "the cycle through {} has no bound; set `max_visits = N` on one of its nodes",
                list_or_none(&names)
            ),
        );
    }
}

/// Every node reachable from `roots` through `next`, roots included.
fn closure(roots: &[usize], next: impl Fn(usize) -> Vec<usize>) -> BTreeSet<usize> {
    let mut seen: BTreeSet<usize> = roots.iter().copied().collect();
    let mut stack: Vec<usize> = roots.to_vec();
    while let Some(i) = stack.pop() {
        for j in next(i) {
            if seen.insert(j) {
                stack.push(j);
            }
        }
    }
    seen
}

/// Tarjan's strongly connected components, iteratively (a scenario can be
/// long, and the checker must not overflow the stack on a big one).
fn strongly_connected(succ: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = succ.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut components = Vec::new();
    let mut counter = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        // (node, next successor position)
        let mut work = vec![(root, 0usize)];
        index[root] = counter;
        low[root] = counter;
        counter += 1;
        stack.push(root);
        on_stack[root] = true;
        while let Some(&mut (v, ref mut pos)) = work.last_mut() {
            if *pos < succ[v].len() {
                let w = succ[v][*pos];
                *pos += 1;
                if index[w] == usize::MAX {
                    index[w] = counter;
                    low[w] = counter;
                    counter += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                work.pop();
                if let Some(&(parent, _)) = work.last() {
                    low[parent] = low[parent].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut component = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        component.push(w);
                        if w == v {
                            break;
                        }
                    }
                    components.push(component);
                }
            }
        }
    }
    components
}

// ---- references ----------------------------------------------------------

fn references(s: &Scenario, r: &mut Reporter) {
    let declared_input: BTreeSet<&str> = s.input.iter().map(|f| f.name.as_str()).collect();
    for node in &s.nodes {
        for e in node.expressions() {
            check_expr(s, &declared_input, Some(node), &e.what, e.expr, e.vars, r);
        }
    }
    for rule in &s.rules {
        let what = format!("rule `{}`", rule.code);
        check_expr(s, &declared_input, None, &what, &rule.when, BASE_VARS, r);
    }
    for (label, expr) in &s.summary {
        let what = format!("summary `{label}`");
        check_expr(s, &declared_input, None, &what, expr, BASE_VARS, r);
    }
    if let Some(key) = &s.queue.concurrency_key {
        let what = "`[scenario] concurrency_key`";
        check_expr(
            s,
            &declared_input,
            None,
            what,
            key,
            crate::queue::KEY_VARS,
            r,
        );
    }
}

fn check_expr(
    s: &Scenario,
    declared_input: &BTreeSet<&str>,
    node: Option<&Node>,
    what: &str,
    expr: &Expr,
    allowed: &[&str],
    r: &mut Reporter,
) {
    let node_id = node.map(|n| n.id.as_str());
    let config_keys: BTreeSet<&str> = match node {
        Some(n) => n.config.keys().map(String::as_str).collect(),
        None => s.config.keys().map(String::as_str).collect(),
    };
    let mut reported = BTreeSet::new();
    for path in expr.references() {
        let root = path[0].as_str();
        let field = path.get(1).map(String::as_str);
        let problem = if !allowed.contains(&root) {
            Some((
                codes::UNKNOWN_VARIABLE,
                format!(
                    "{what}: `{}` uses `{root}`, which is not available here; available: {}",
                    expr.source,
                    allowed.join(", ")
                ),
            ))
        } else {
            match (root, field) {
                ("state", Some(f)) if f != ERRORS_FIELD && s.state_field(f).is_none() => Some((
                    codes::UNDECLARED_STATE,
                    format!(
                        "{what}: `state.{f}` is not declared; declare it under [state] \
                         (declared: {})",
                        list_or_none(&s.state.iter().map(|f| f.name.clone()).collect::<Vec<_>>())
                    ),
                )),
                ("input", Some(f)) if !declared_input.contains(f) => Some((
                    codes::UNDECLARED_INPUT,
                    format!(
                        "{what}: `input.{f}` is not a field of [input] (fields: {})",
                        list_or_none(&s.input.iter().map(|f| f.name.clone()).collect::<Vec<_>>())
                    ),
                )),
                ("config", Some(f)) if !config_keys.contains(f) => Some((
                    codes::UNDECLARED_CONFIG,
                    format!(
                        "{what}: `config.{f}` is neither in [config] nor in the skill's config \
                         defaults"
                    ),
                )),
                _ => None,
            }
        };
        if let Some((code, message)) = problem
            && reported.insert(message.clone())
        {
            r.error(expr.line, node_id, code, message);
        }
    }
}

// ---- writes ----------------------------------------------------------------

fn writes(s: &Scenario, r: &mut Reporter) {
    for node in &s.nodes {
        for write in node.writes() {
            let node_id = Some(node.id.as_str());
            if write.field == ERRORS_FIELD {
                r.error(
                    write.line,
                    node_id,
                    codes::RESERVED_STATE,
                    "`errors` is written by the engine only (node failures); write another field",
                );
                continue;
            }
            let Some(field) = s.state_field(&write.field) else {
                r.error(
                    write.line,
                    node_id,
                    codes::UNDECLARED_STATE,
                    format!(
                        "write into `{}`: not declared under [state]; declare it with its type",
                        write.field
                    ),
                );
                continue;
            };
            let fits = match write.reducer {
                Reducer::Replace => true,
                Reducer::Append => matches!(field.ty, FieldType::Array | FieldType::Any),
                Reducer::Merge => matches!(field.ty, FieldType::Object | FieldType::Any),
            };
            if !fits {
                let needs = if write.reducer == Reducer::Append {
                    "an array"
                } else {
                    "an object"
                };
                r.error(
                    write.line,
                    node_id,
                    codes::REDUCER_TYPE,
                    format!(
                        "write into `{}`: reducer `{}` needs {needs} field, but `{}` is {}",
                        write.field,
                        write.reducer.name(),
                        write.field,
                        field.ty
                    ),
                );
            }
        }
    }
}

fn unused(s: &Scenario, r: &mut Reporter) {
    let written: BTreeSet<&str> = s
        .nodes
        .iter()
        .flat_map(|n| n.writes().iter().map(|w| w.field.as_str()))
        .collect();
    for field in &s.state {
        if !written.contains(field.name.as_str()) {
            r.warning(
                field.line,
                None,
                codes::UNWRITTEN_STATE,
                format!(
                    "state `{}` is declared but no node writes it; it keeps its initial value",
                    field.name
                ),
            );
        }
    }
    let used: BTreeSet<&str> = s.nodes.iter().filter_map(Node::skill).collect();
    for skill in s.skills.values() {
        if !used.contains(skill.alias.as_str()) {
            r.warning(
                skill.line,
                None,
                codes::UNUSED_SKILL,
                format!("skill `{}` is declared but no node runs it", skill.alias),
            );
        }
    }
}

// ---- skills ----------------------------------------------------------------

/// Checks every skill and map node against the component it runs.
pub(crate) fn check_skills(s: &Scenario, skills: &BTreeMap<String, Arc<Skill>>, r: &mut Reporter) {
    let mut bad_interface = BTreeSet::new();
    for node in &s.nodes {
        let Some(call) = node.call() else { continue };
        let alias = &call.skill;
        let Some(skill) = skills.get(alias) else {
            continue;
        };
        let node_id = Some(node.id.as_str());

        // What the manifest declares: an import it does not declare is
        // denied in every call, so it needs no grant.
        for capability in &skill.capabilities {
            if capability.always_granted()
                || call.grants.is_granted(*capability)
                || call.capabilities.contains_key(capability.name())
            {
                continue;
            }
            r.error(
                node.line,
                node_id,
                codes::CAPABILITY_NOT_GRANTED,
                format!(
                    "skill `{alias}` declares capability `{capability}` in its manifest, which \
                     this node does not grant; add it to the node, e.g. `capabilities = {{ \
                     {capability} = {} }}`",
                    capability.example_grant().unwrap_or("\"…\"")
                ),
            );
        }

        if call.cache.is_some() {
            cache_limits(node, call, skill, r);
        }

        let schema = match skill.interface() {
            Ok(interface) => &interface.input_schema,
            Err(e) => {
                if bad_interface.insert(alias.clone()) {
                    let line = s.skills.get(alias).map_or(node.line, |k| k.line);
                    r.error(
                        line,
                        None,
                        codes::SKILL_LOAD,
                        format!("skill `{alias}`: cannot read its input type: {e}"),
                    );
                }
                continue;
            }
        };
        input_fits(node, call, schema, r);
    }
}

/// Every `llm` grant against the host's providers: the provider is one the
/// host's configuration defines, and the variable its key comes from is
/// set. Providers are host configuration, so a scenario that names one the
/// host lacks fails here, before any run, naming where the configuration
/// was looked for.
pub(crate) fn check_llm_providers(s: &Scenario, providers: &LlmProviders, r: &mut Reporter) {
    for node in &s.nodes {
        let Some(call) = node.call() else { continue };
        let Some(grant) = &call.grants.llm else {
            continue;
        };
        let Err(problem) = providers.check(&grant.provider) else {
            continue;
        };
        let code = match problem {
            ProviderProblem::NotConfigured { .. } => codes::LLM_PROVIDER_NOT_CONFIGURED,
            ProviderProblem::MissingKey { .. } => codes::LLM_API_KEY_MISSING,
        };
        r.error(
            call.capabilities_line.unwrap_or(node.line),
            Some(node.id.as_str()),
            code,
            format!("capability `llm`: {problem}"),
        );
    }
}

/// What a cached node's skill can make of its cache: a skill that imports
/// WASI may read random bytes (seeded per run) or the time, so another
/// run's output is not the one it would have made; a call that makes a
/// journaled host call (`Capability::journaled`: kv, http, llm, sql) depends
/// on an answer from outside the run, so it is never cached. Both are
/// warnings: the node runs.
fn cache_limits(node: &Node, call: &SkillCall, skill: &Skill, r: &mut Reporter) {
    let alias = &call.skill;
    let node_id = Some(node.id.as_str());
    if skill
        .imports
        .iter()
        .any(|import| import.starts_with("wasi:"))
    {
        r.warning(
            node.line,
            node_id,
            codes::CACHE_LIMITED,
            format!(
                "node caches the output of skill `{alias}`, which imports WASI: an output it \
                 made from random bytes or the clock in one run is reused in another"
            ),
        );
    }
    let outside: Vec<&str> = Capability::ALL
        .into_iter()
        .filter(|c| c.journaled())
        .filter(|c| skill.capabilities.contains(c) && call.grants.is_granted(*c))
        .map(Capability::name)
        .collect();
    if !outside.is_empty() {
        r.warning(
            node.line,
            node_id,
            codes::CACHE_LIMITED,
            format!(
                "node caches skill `{alias}`, which may call {}: a call that does is never \
                 cached (its answers come from outside the run), only calls that made none",
                outside.join(", ")
            ),
        );
    }
}

/// Whether the node's input mapping gives every field the skill's input
/// requires, and nothing else.
fn input_fits(node: &Node, call: &SkillCall, schema: &Value, r: &mut Reporter) {
    let alias = &call.skill;
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        // Not a record: the whole input is one value, which a field mapping
        // cannot describe. Validation at run time says what is wrong.
        return;
    };
    let node_id = Some(node.id.as_str());
    let fields: Vec<String> = properties.keys().cloned().collect();
    for (field, expr) in &call.input {
        if !properties.contains_key(field) {
            r.error(
                expr.line,
                node_id,
                codes::INPUT_UNKNOWN_FIELD,
                format!(
                    "input `{field}`: skill `{alias}` has no such input field (its fields: {})",
                    list_or_none(&fields)
                ),
            );
        }
    }
    let missing: Vec<String> = schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|required| !call.input.iter().any(|(f, _)| f == required))
        .map(str::to_string)
        .collect();
    if !missing.is_empty() {
        r.error(
            node.line,
            node_id,
            codes::INPUT_MISSING_FIELD,
            format!(
                "the input mapping lacks {} required by skill `{alias}`; add {} to `input`",
                list_or_none(&missing),
                missing
                    .iter()
                    .map(|m| format!("`{m} = \"<CEL>\"`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::strongly_connected;

    #[test]
    fn components() {
        // 0 -> 1 -> 2 -> 1, 2 -> 3, 3 -> 3
        let succ = vec![vec![1], vec![2], vec![1, 3], vec![3]];
        let mut comps: Vec<Vec<usize>> = strongly_connected(&succ)
            .into_iter()
            .map(|mut c| {
                c.sort();
                c
            })
            .collect();
        comps.sort();
        assert_eq!(comps, vec![vec![0], vec![1, 2], vec![3]]);
    }
}
