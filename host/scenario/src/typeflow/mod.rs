//! Static type flow: the type of every CEL expression of a scenario,
//! inferred from the skills' WIT types and the `[input]`, `[state]` and
//! `[config]` declarations, checked where it flows before any run.
//!
//! What is checked: an input mapping against the skill input field's WIT
//! type (a constant through the bridge itself, exactly as the run would
//! convert it); a write against the state field's declared type (and a
//! `merge` takes a map); a condition gives a bool; a map node's `over` gives
//! a list; and inside every expression (summary and rules included), a field
//! a record does not have (`output.nosuch`) and an operator given values it
//! does not take (`'n=' + 1`, `int * double`).
//!
//! This module owns those checks and nothing else: which variables exist
//! where and which state, input and config fields are declared are the
//! reference checks' (`check`), and it reports neither again. It must not
//! guess: whatever cannot be known before the run (`any` fields, `object`
//! contents, unknown functions) is `dyn`, and `dyn` is accepted everywhere.

mod infer;
mod ty;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use wasmtime::component::Type;

use self::infer::{Scope, article, infer};
use self::ty::{Misfit, Ty, Wanted, fits_wit, wanted, wit_name, with_article};
use crate::diagnostic::{Reporter, codes};
use crate::node::{BASE_VARS, NodeExpr, PostCheck, Write};
use crate::{
    Condition, ERRORS_FIELD, Expr, FieldType, Node, NodeBody, Reducer, Route, Scenario, SkillCall,
};
use skillhost_runtime::Skill;
use skillhost_runtime::bridge::{self, snake_case};

/// Checks the type flow of every expression of `s`. `skills`: the loaded
/// components by alias; a skill missing from it (not loaded, or not loaded
/// yet) gives `dyn` outputs and takes any input.
pub(crate) fn check_types(s: &Scenario, skills: &BTreeMap<String, Arc<Skill>>, r: &mut Reporter) {
    let roots = Roots::of(s);
    for node in &s.nodes {
        check_node(s, &roots, node, skills, r);
    }
    let config = roots.config(&s.config);
    for rule in &s.rules {
        let what = format!("rule `{}`", rule.code);
        let scope = roots.scope(BASE_VARS, &config, &Ty::Dyn, &Ty::Dyn);
        if let Some(ty) = typed(&what, &rule.when, scope, None, r) {
            guard(&what, &rule.when, &ty, None, r);
        }
    }
    for (label, expr) in &s.summary {
        let what = format!("summary `{label}`");
        let scope = roots.scope(BASE_VARS, &config, &Ty::Dyn, &Ty::Dyn);
        typed(&what, expr, scope, None, r);
    }
}

/// The JSON Schema (draft 2020-12) of the object a completed run's
/// `[summary]` yields: one property per label, typed as the checker infers
/// its expression (`{}` where it cannot know). Every label is required: the
/// engine evaluates each one. An expression that fails at run time yields
/// an error string instead, which this schema need not allow: a consumer
/// that validates against it sees that label as the one that failed.
pub(crate) fn summary_schema(s: &Scenario) -> Value {
    let roots = Roots::of(s);
    let config = roots.config(&s.config);
    let mut properties = serde_json::Map::new();
    for (label, expr) in &s.summary {
        let mut scope = roots.scope(BASE_VARS, &config, &Ty::Dyn, &Ty::Dyn);
        let (ty, _) = infer(expr.ast(), &mut scope);
        properties.insert(label.clone(), ty.json_schema());
    }
    let required: Vec<&String> = properties.keys().collect();
    serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// The type of a field declared like `[input]`'s.
fn field_ty(f: &crate::InputField) -> Ty {
    // `items` is kept only in the field's schema.
    let items = f
        .schema
        .get("items")
        .and_then(|i| i.get("type"))
        .and_then(|t| serde_json::from_value::<FieldType>(t.clone()).ok());
    Ty::of_field(f.ty, items)
}

/// The types of the variables every expression may see.
struct Roots {
    input: Ty,
    state: Ty,
}

impl Roots {
    fn of(s: &Scenario) -> Roots {
        let input = s
            .input
            .iter()
            .map(|f| {
                // `items` is kept only in the field's schema.
                (f.name.clone(), field_ty(f))
            })
            .collect();
        let mut state: Vec<(String, Ty)> = s
            .state
            .iter()
            .map(|f| (f.name.clone(), Ty::of_field(f.ty, None)))
            .collect();
        state.push((
            ERRORS_FIELD.to_string(),
            Ty::List(Box::new(Ty::Map(Box::new(Ty::Dyn)))),
        ));
        Roots {
            input: Ty::Record {
                fields: input,
                closed: false,
            },
            state: Ty::Record {
                fields: state,
                closed: false,
            },
        }
    }

    /// `config` as a node (or a rule) sees it.
    fn config(&self, config: &serde_json::Map<String, Value>) -> Ty {
        match Ty::of_json(&Value::Object(config.clone())) {
            Ty::Record { fields, .. } => Ty::Record {
                fields,
                closed: false,
            },
            other => other,
        }
    }

    /// The variables named in `vars`, typed.
    fn scope(&self, vars: &[&str], config: &Ty, output: &Ty, item: &Ty) -> Scope {
        Scope::new(
            vars.iter()
                .map(|name| {
                    let ty = match *name {
                        "input" => self.input.clone(),
                        "state" => self.state.clone(),
                        "config" => config.clone(),
                        // An approval's answer stands where a skill's
                        // output would.
                        "output" | "answer" => output.clone(),
                        "item" => item.clone(),
                        "index" => Ty::Int,
                        // The quotes the citation checks verified.
                        "verified" => Ty::List(Box::new(Ty::Map(Box::new(Ty::Dyn)))),
                        _ => Ty::Dyn,
                    };
                    (name.to_string(), ty)
                })
                .collect(),
        )
    }
}

/// What an expression of a node is for, when that constrains its type.
enum Role<'a> {
    Input {
        field: &'a str,
        call: &'a SkillCall,
    },
    Guard,
    Write(&'a Write),
    Over,
    /// An approval's prompt: a string.
    Prompt,
}

fn pre_and_writes<'a>(pre: &'a [Condition], writes: &'a [Write]) -> Vec<(&'a Expr, Role<'a>)> {
    let mut out: Vec<(&Expr, Role<'_>)> = Vec::new();
    out.extend(pre.iter().map(|c| (&c.expr, Role::Guard)));
    out.extend(writes.iter().map(|w| (&w.from, Role::Write(w))));
    out
}

fn roles(node: &Node) -> Vec<(&Expr, Role<'_>)> {
    let mut roles = Vec::new();
    match &node.body {
        NodeBody::Gate(gate) => roles.extend(pre_and_writes(&gate.pre, &gate.writes)),
        NodeBody::Approval(approval) => {
            roles.push((&approval.prompt, Role::Prompt));
            roles.extend(pre_and_writes(&[], &approval.writes));
        }
        NodeBody::Skill(_) | NodeBody::Map(_) => {
            if let NodeBody::Map(map) = &node.body {
                roles.push((&map.over, Role::Over));
            }
            if let Some(call) = node.call() {
                roles.extend(
                    call.input
                        .iter()
                        .map(|(field, expr)| (expr, Role::Input { field, call })),
                );
                roles.extend(pre_and_writes(&call.pre, &call.writes));
                roles.extend(call.post.iter().filter_map(|p| match p {
                    PostCheck::Condition(c) => Some((&c.expr, Role::Guard)),
                    PostCheck::Citations(_) => None,
                }));
            }
        }
        NodeBody::Subgraph(subgraph) => {
            roles.extend(pre_and_writes(&subgraph.pre, &subgraph.writes))
        }
        NodeBody::Fail(_) | NodeBody::End => {}
    }
    if let Route::Branches { branches, .. } = &node.route {
        roles.extend(branches.iter().map(|(guard, _)| (guard, Role::Guard)));
    }
    roles
}

fn check_node(
    s: &Scenario,
    roots: &Roots,
    node: &Node,
    skills: &BTreeMap<String, Arc<Skill>>,
    r: &mut Reporter,
) {
    let node_id = Some(node.id.as_str());
    let config = roots.config(&node.config);
    let skill = node.call().and_then(|call| skills.get(&call.skill));
    let one_output = skill.map_or(Ty::Dyn, |k| Ty::of_wit(&k.output_type));
    // A map node's `item` is an item of `over`; its later expressions see
    // the list of every item's output.
    let (output, item) = match &node.body {
        NodeBody::Map(map) => {
            // Its problems are reported with the node's other expressions.
            let mut scope = roots.scope(BASE_VARS, &config, &Ty::Dyn, &Ty::Dyn);
            let (over, _) = infer(map.over.ast(), &mut scope);
            (
                Ty::List(Box::new(one_output)),
                over.items().unwrap_or(Ty::Dyn),
            )
        }
        // An approval's writes and edges see its answer, typed by `answer`.
        NodeBody::Approval(approval) => (
            Ty::Record {
                fields: approval
                    .answer
                    .iter()
                    .map(|f| (f.name.clone(), field_ty(f)))
                    .collect(),
                closed: true,
            },
            Ty::Dyn,
        ),
        _ => (one_output, Ty::Dyn),
    };
    let roles = roles(node);
    for NodeExpr { what, expr, vars } in node.expressions() {
        let scope = roots.scope(vars, &config, &output, &item);
        let Some(ty) = typed(&what, expr, scope, node_id, r) else {
            continue;
        };
        let role = roles
            .iter()
            .find(|(e, _)| std::ptr::eq(*e, expr))
            .map(|(_, role)| role);
        match role {
            Some(Role::Guard) => guard(&what, expr, &ty, node_id, r),
            Some(Role::Over) if ty.items().is_none() => r.error(
                expr.line,
                node_id,
                codes::OVER_TYPE,
                format!(
                    "over: `{}` is {}, but a map node runs once per item of a list; give a \
                     list (e.g. `state.papers`)",
                    expr.source,
                    article(ty.some())
                ),
            ),
            Some(Role::Write(write)) => write_fits(s, &what, write, &ty, node_id, r),
            Some(Role::Input { field, call }) => {
                if let Some(skill) = skills.get(&call.skill) {
                    input_fits(field, &call.skill, skill, expr, &ty, node_id, r);
                }
            }
            Some(Role::Prompt) if !ty.is_unknown() && *ty.some() != Ty::String => r.error(
                expr.line,
                node_id,
                codes::PROMPT_TYPE,
                format!(
                    "prompt: `{}` is {}, but a prompt is text shown to whoever answers; give a \
                     string (convert with `string(…)`)",
                    expr.source,
                    article(ty.some())
                ),
            ),
            Some(Role::Over | Role::Prompt) | None => {}
        }
    }
}

/// Infers `expr`'s type and reports the type errors inside it. `None`
/// when the expression stands in for one that did not compile or is
/// missing (already reported): nothing more is said about it.
fn typed(
    what: &str,
    expr: &Expr,
    mut scope: Scope,
    node: Option<&str>,
    r: &mut Reporter,
) -> Option<Ty> {
    let stand_in = expr.source == "null"
        && r.report.errors.iter().any(|d| {
            d.line == expr.line && matches!(d.code, codes::CEL_SYNTAX | codes::MISSING_OVER)
        });
    if stand_in {
        return None;
    }
    let (ty, problems) = infer(expr.ast(), &mut scope);
    for problem in problems {
        r.error(
            expr.line,
            node,
            problem.code,
            format!("{what}: `{}`: {}", expr.source, problem.message),
        );
    }
    Some(ty)
}

fn guard(what: &str, expr: &Expr, ty: &Ty, node: Option<&str>, r: &mut Reporter) {
    if ty.is_unknown() || *ty.some() == Ty::Bool {
        return;
    }
    r.error(
        expr.line,
        node,
        codes::GUARD_TYPE,
        format!(
            "{what}: `{}` is {}, but a condition must be true or false; compare it \
             (`== …`, `> 0`, `size(…) > 0`)",
            expr.source,
            article(ty.some())
        ),
    );
}

fn write_fits(
    s: &Scenario,
    what: &str,
    write: &Write,
    ty: &Ty,
    node: Option<&str>,
    r: &mut Reporter,
) {
    // Undeclared and reserved fields, and reducers that do not fit the
    // field, are the write check's (`check`).
    let Some(field) = s.state_field(&write.field) else {
        return;
    };
    let name = &write.field;
    let source = &write.from.source;
    let found = article(ty.some());
    let message = match write.reducer {
        // Appending takes anything: a list extends the field, any other
        // value becomes one item.
        Reducer::Append => return,
        Reducer::Merge if ty.is_map() => return,
        Reducer::Merge => format!(
            "{what}: `{source}` is {found}, but reducer `merge` sets the keys of a map on \
             `{name}`; give a map (e.g. `{{'key': value}}`) or use `replace`"
        ),
        Reducer::Replace if ty.fits_field(field.ty) => return,
        Reducer::Replace => {
            let hint = match field.ty {
                FieldType::String => "convert it with `string(…)`",
                FieldType::Integer if ty.is_numeric() => "convert it with `int(…)`",
                FieldType::Number | FieldType::Integer => "give a number",
                FieldType::Boolean => "compare it (`== …`, `> 0`)",
                FieldType::Array => "wrap it in a list (`[…]`), or use `reducer = \"append\"`",
                FieldType::Object => "give a map (e.g. `{'key': value}`)",
                FieldType::Any => "",
            };
            format!(
                "{what}: `{source}` is {found}, but state `{name}` is declared {}; {hint}, or \
                 declare `{name}` with the type it holds",
                field.ty
            )
        }
    };
    r.error(write.line, node, codes::WRITE_TYPE, message);
}

fn input_fits(
    field: &str,
    alias: &str,
    skill: &Skill,
    expr: &Expr,
    ty: &Ty,
    node: Option<&str>,
    r: &mut Reporter,
) {
    let Type::Record(record) = &skill.input_type else {
        return;
    };
    // A field the skill does not take is the input check's (`check`).
    let Some(target) = record
        .fields()
        .find(|f| snake_case(f.name) == field)
        .map(|f| f.ty)
    else {
        return;
    };
    let source = &expr.source;
    // A constant is converted by the bridge itself, exactly as at run time:
    // `3.0` fits a `u32`, `-1` and `3.5` do not.
    if expr.variables().is_empty() {
        let Ok(value) = expr.eval(&crate::Vars::new()) else {
            return;
        };
        if let Err(e) = bridge::json_to_val(&target, &value) {
            let at = if e.path == "$" {
                String::new()
            } else {
                format!(" at `{}`", e.path)
            };
            r.error(
                expr.line,
                node,
                codes::INPUT_TYPE,
                format!(
                    "input `{field}`: `{source}` gives {value}, which skill `{alias}` cannot \
                     take as {}{at}: {}; {}",
                    wit_name(&target),
                    e.message,
                    hint(wanted(&target))
                ),
            );
        }
        return;
    }
    if let Err(Misfit {
        path,
        found,
        expected,
        wanted,
    }) = fits_wit(ty, &target)
    {
        let what = if path == "$" {
            format!("`{source}` is {}", with_article(&found))
        } else {
            format!("`{source}` holds {} at `{path}`", with_article(&found))
        };
        r.error(
            expr.line,
            node,
            codes::INPUT_TYPE,
            format!(
                "input `{field}`: {what}, but skill `{alias}` takes {expected} there; {}",
                hint(wanted)
            ),
        );
    }
}

fn hint(wanted: Wanted) -> &'static str {
    match wanted {
        Wanted::Integer => "give an integer: drop the quotes, or convert with `int(…)`",
        Wanted::Number => "give a number, or convert with `double(…)`",
        Wanted::String => "give a string, or convert with `string(…)`",
        Wanted::Bool => "give a bool, e.g. a comparison",
        Wanted::List => "give a list",
        Wanted::Map => "give a map, e.g. `{'field': value}`",
        Wanted::Fields => {
            "give a map with exactly the record's fields (fields of an option type may be \
             left out)"
        }
    }
}
