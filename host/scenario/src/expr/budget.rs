//! The budget of a CEL expression: limits on its form, checked when it
//! compiles, and on the work one evaluation may do, metered while it runs.
//!
//! This module owns the limits, the rewrite of an expression's syntax tree
//! into the tree that is evaluated (the same expression with meters at the
//! places where work or values can grow), the meter functions that rewrite
//! calls, and the per-evaluation meter. It must not change what an
//! expression means: a rewritten expression gives the same value as the
//! original whenever it stays within the budget.
//!
//! The `cel` crate has no hook for limits: its interpreter evaluates `+`,
//! indexing and comprehensions itself, and functions are plain `fn`
//! pointers with no state. So the budget is added from outside:
//!
//! - **Form**, at compile time: the source length, the number of syntax
//!   nodes, the depth of the tree (evaluation recurses once per level, on
//!   the caller's stack) and how deeply comprehensions (`all`, `exists`,
//!   `exists_one`, `map`, `filter`, `sortBy`) nest.
//! - **Steps**: every comprehension's range goes through `@budget_iterate`,
//!   which charges the range's size when the comprehension starts, before it
//!   iterates (so one that stops early, as `exists` can, is charged for the
//!   whole range). Nothing else in CEL loops. Once the budget is spent,
//!   `all` and `exists`, which would carry on past an error, stop at their
//!   next condition (`@budget_within`).
//! - **Values**: the values an evaluation produces are charged by their
//!   weight (a string or bytes its length, a list or map 8 per element plus
//!   its elements, anything else 8): the results of `+`, of function calls
//!   that can build a value, of list and map literals with non-literal
//!   elements, and each element a `map`/`filter` appends. A value is charged
//!   once it exists, so one call can allocate at most the weight of its
//!   inputs beyond the budget; the calls whose result can be many times
//!   their inputs, `replace`, `join` and `lists.range`, are evaluated by this
//!   module, which computes the result's size first and refuses it before
//!   allocating.
//!
//! - **Reads**: the calls that read their operands without building a
//!   value, but take time in their size (`==`, `!=`, `<`, `<=`, `>`, `>=`,
//!   `in`, `contains`, `startsWith`, `endsWith`, `matches`, `indexOf`,
//!   `lastIndexOf`), have each operand that is not a literal go through
//!   `@budget_read`, which charges a step per [`READ_BYTES_PER_STEP`] bytes
//!   of its weight before handing it on (`matches`, through
//!   `@budget_read_regex`, a step per [`REGEX_BYTES_PER_STEP`]). So `lists.range(1000000).all(i,
//!   state.a == state.b)` over two 1 MiB strings stops after a few hundred
//!   comparisons rather than running for a minute. Small operands cost
//!   nothing (the charge rounds down), which keeps the hot guards
//!   (`state.status == 'done'`) free. The right side of `in` is charged only
//!   when it is a list: a map's lookup hashes its key, not the map. `size`,
//!   `charAt` and `substring` walk a string's characters, so a string they
//!   read is charged the same way (a list or map is not: its size is known).
//!   `indexOf` and `lastIndexOf` are evaluated by this module
//!   (`@budget_index_of`, `@budget_last_index_of`), in linear time where
//!   the extension compares the needle at every position, and charged for
//!   both strings. `distinct` compares every pair of elements, so its list
//!   is charged a step per 64 pairs (`@budget_read_squared`).
//!
//! The meter is a thread-local: `cel` functions are `fn` pointers, and an
//! evaluation runs on one thread from start to end. [`metered`] sets it up
//! around one evaluation and reports whether the budget was exceeded, even if
//! CEL absorbed the error (`error || true` is `true` in CEL): an evaluation
//! that went over the budget fails whatever its value.

use std::cell::Cell;

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr as Ast, IdedEntryExpr, IdedExpr, ListExpr,
    MapEntryExpr, MapExpr, SelectExpr, StructExpr, StructFieldExpr, operators,
};
use cel::common::types::{
    CelBytes, CelInt, CelList, CelMap, CelOptional, CelString, DYN_TYPE, Kind, Type,
};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

/// The longest expression source, in bytes.
pub const MAX_SOURCE_BYTES: usize = 16 * 1024;
/// The most syntax nodes an expression may have, its macros expanded.
pub const MAX_NODES: usize = 4096;
/// The deepest an expression's syntax tree may be, its macros expanded.
pub const MAX_DEPTH: usize = 64;
/// How deeply comprehensions may nest.
pub const MAX_COMPREHENSION_NESTING: usize = 4;
/// The most comprehension steps (elements iterated over) of one evaluation.
pub const MAX_STEPS: u64 = 1_000_000;
/// The most weight of values one evaluation may produce, in bytes.
pub const MAX_VALUE_BYTES: u64 = 64 * 1024 * 1024;

const ITERATE: &str = "@budget_iterate";
const CHARGE: &str = "@budget_charge";
const REPLACE: &str = "@budget_replace";
const JOIN: &str = "@budget_join";
const RANGE: &str = "@budget_range";
const WITHIN: &str = "@budget_within";
const READ: &str = "@budget_read";
const READ_LIST: &str = "@budget_read_list";
const READ_STRING: &str = "@budget_read_string";
const READ_REGEX: &str = "@budget_read_regex";
const READ_SQUARED: &str = "@budget_read_squared";
const INDEX_OF: &str = "@budget_index_of";
const LAST_INDEX_OF: &str = "@budget_last_index_of";

/// Operand bytes one step of the budget pays for, when a call reads them.
pub const READ_BYTES_PER_STEP: u64 = 256;
/// The same for `matches`, which compiles its pattern and runs it over the
/// string, several times slower per byte than a comparison.
pub const REGEX_BYTES_PER_STEP: u64 = 32;

/// The calls whose time grows with their operands' size (see the module
/// docs, "Reads").
const READ_FUNCTIONS: &[&str] = &[
    operators::EQUALS,
    operators::NOT_EQUALS,
    operators::LESS,
    operators::LESS_EQUALS,
    operators::GREATER,
    operators::GREATER_EQUALS,
    "contains",
    "startsWith",
    "endsWith",
];

/// The calls whose time grows with the size of their receiver when it is a
/// string (they walk its characters), and not otherwise.
const STRING_READ_FUNCTIONS: &[&str] = &["size", "charAt", "substring"];

/// Functions whose result is a scalar, or a part of an input: not charged,
/// to keep the hot expressions (`size(state.papers) > 0`) free of meters.
const SCALAR_FUNCTIONS: &[&str] = &[
    "size",
    "contains",
    "startsWith",
    "endsWith",
    "matches",
    "int",
    "uint",
    "double",
    "bool",
    "type",
    "indexOf",
    "lastIndexOf",
    "hasValue",
];

// ---- form ----------------------------------------------------------------

/// Checks the length of an expression's source, before it is parsed.
pub fn check_source(source: &str) -> Result<(), String> {
    if source.len() > MAX_SOURCE_BYTES {
        return Err(format!(
            "it is {} bytes long; an expression may be at most {MAX_SOURCE_BYTES} bytes: \
             compute large values in a skill",
            source.len()
        ));
    }
    Ok(())
}

/// Checks the form of a parsed expression: `Err` says which limit it breaks.
pub fn check_form(root: &IdedExpr) -> Result<(), String> {
    // Iterative, so that the check itself never recurses as deep as the tree.
    let mut nodes = 0usize;
    let mut stack: Vec<(&IdedExpr, usize, usize)> = vec![(root, 1, 0)];
    while let Some((expr, depth, nesting)) = stack.pop() {
        nodes += 1;
        if nodes > MAX_NODES {
            return Err(format!(
                "it has more than {MAX_NODES} syntax nodes (macros expanded): split it, \
                 or compute the value in a skill"
            ));
        }
        if depth > MAX_DEPTH {
            return Err(format!(
                "it nests more than {MAX_DEPTH} levels deep (macros expanded): split it, \
                 or compute the value in a skill"
            ));
        }
        let mut push = |child, nesting| stack.push((child, depth + 1, nesting));
        match &expr.expr {
            Ast::Unspecified | Ast::Literal(_) | Ast::Ident(_) => {}
            Ast::Select(select) => push(&select.operand, nesting),
            Ast::Call(call) => {
                if let Some(target) = &call.target {
                    push(target, nesting);
                }
                for arg in &call.args {
                    push(arg, nesting);
                }
            }
            Ast::List(list) => list.elements.iter().for_each(|e| push(e, nesting)),
            Ast::Map(map) => entries(&map.entries).for_each(|e| push(e, nesting)),
            Ast::Struct(st) => entries(&st.entries).for_each(|e| push(e, nesting)),
            Ast::Comprehension(c) => {
                let inner = nesting + 1;
                if inner > MAX_COMPREHENSION_NESTING {
                    return Err(format!(
                        "it nests comprehensions (all, exists, exists_one, map, filter, \
                         sortBy) more than {MAX_COMPREHENSION_NESTING} deep"
                    ));
                }
                push(&c.iter_range, nesting);
                push(&c.accu_init, nesting);
                push(&c.loop_cond, inner);
                push(&c.loop_step, inner);
                push(&c.result, inner);
            }
        }
    }
    Ok(())
}

fn entries(entries: &[IdedEntryExpr]) -> impl Iterator<Item = &IdedExpr> {
    entries.iter().flat_map(|entry| match &entry.expr {
        EntryExpr::StructField(field) => vec![&field.value],
        EntryExpr::MapEntry(entry) => vec![&entry.key, &entry.value],
    })
}

// ---- the metered tree --------------------------------------------------

/// The tree that is evaluated: `root` with the meters of the module docs.
/// Its depth is at most twice the original's (a meter wraps a node once).
pub fn instrument(root: &IdedExpr) -> IdedExpr {
    let expr = match &root.expr {
        Ast::Unspecified | Ast::Literal(_) | Ast::Ident(_) => root.expr.clone(),
        Ast::Select(select) => Ast::Select(SelectExpr {
            operand: Box::new(instrument(&select.operand)),
            field: select.field.clone(),
            test: select.test,
        }),
        Ast::Call(call) => return instrument_call(root.id, call),
        Ast::List(list) => {
            let instrumented = Ast::List(ListExpr {
                elements: list.elements.iter().map(instrument).collect(),
                optional_indices: list.optional_indices.clone(),
            });
            return charged_if(root.id, instrumented, !all_literals(&list.elements));
        }
        Ast::Map(map) => {
            let dynamic = entries(&map.entries).any(|e| !matches!(e.expr, Ast::Literal(_)));
            let instrumented = Ast::Map(MapExpr {
                entries: map.entries.iter().map(instrument_entry).collect(),
            });
            return charged_if(root.id, instrumented, dynamic);
        }
        Ast::Struct(st) => Ast::Struct(StructExpr {
            type_name: st.type_name.clone(),
            entries: st.entries.iter().map(instrument_entry).collect(),
        }),
        Ast::Comprehension(c) => Ast::Comprehension(Box::new(instrument_comprehension(c))),
    };
    IdedExpr { id: root.id, expr }
}

fn instrument_call(id: u64, call: &CallExpr) -> IdedExpr {
    let args = || call.args.iter().map(instrument).collect::<Vec<_>>();
    let receiver_and_args = |target: &IdedExpr| {
        let mut all = vec![instrument(target)];
        all.extend(args());
        all
    };
    let name = call.func_name.as_str();
    match (&call.target, name, call.args.len()) {
        (Some(target), "replace", 2 | 3) => return global(id, REPLACE, receiver_and_args(target)),
        (Some(target), "join", 0 | 1) => return global(id, JOIN, receiver_and_args(target)),
        (Some(target), "range", 1) if matches!(&target.expr, Ast::Ident(n) if n == "lists") => {
            return global(id, RANGE, args());
        }
        (Some(target), "indexOf", 1 | 2) => {
            return global(id, INDEX_OF, receiver_and_args(target));
        }
        (Some(target), "lastIndexOf", 1 | 2) => {
            return global(id, LAST_INDEX_OF, receiver_and_args(target));
        }
        _ => {}
    }
    // An operand that is read goes through its meter, unless it is a
    // literal, whose size the expression's length already bounds.
    let metered = |position: Option<usize>, operand: IdedExpr| match read_meter(call, position) {
        Some(meter) if !matches!(operand.expr, Ast::Literal(_)) => {
            global(operand.id, meter, vec![operand])
        }
        _ => operand,
    };
    let target = call.target.as_ref().map(|t| metered(None, instrument(t)));
    let args = call
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| metered(Some(i), instrument(a)))
        .collect();
    let instrumented = Ast::Call(CallExpr {
        func_name: call.func_name.clone(),
        target: target.map(Box::new),
        args,
    });
    // Operators other than `+` give a scalar or one of their operands.
    let grows = name == operators::ADD || !(is_operator(name) || SCALAR_FUNCTIONS.contains(&name));
    charged_if(id, instrumented, grows)
}

/// The meter that operand `position` of `call` (`None`: its receiver) goes
/// through when it is read (see the module docs, "Reads"), if any.
fn read_meter(call: &CallExpr, position: Option<usize>) -> Option<&'static str> {
    let name = call.func_name.as_str();
    match (name, position) {
        (operators::IN, Some(1)) if call.args.len() == 2 => Some(READ_LIST),
        (operators::IN, Some(0)) if call.args.len() == 2 => Some(READ),
        ("matches", _) => Some(READ_REGEX),
        _ if READ_FUNCTIONS.contains(&name) => Some(READ),
        // The string: the receiver of `s.size()` or `s.charAt(i)`, the
        // argument of `size(s)`.
        (_, None) if STRING_READ_FUNCTIONS.contains(&name) => Some(READ_STRING),
        (_, Some(_)) if call.target.is_none() && STRING_READ_FUNCTIONS.contains(&name) => {
            Some(READ_STRING)
        }
        ("distinct", None) if call.args.is_empty() => Some(READ_SQUARED),
        _ => None,
    }
}

fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('!') || name.starts_with('-') || name.starts_with('@')
}

fn instrument_entry(entry: &IdedEntryExpr) -> IdedEntryExpr {
    let expr = match &entry.expr {
        EntryExpr::StructField(field) => EntryExpr::StructField(StructFieldExpr {
            field: field.field.clone(),
            value: instrument(&field.value),
            optional: field.optional,
        }),
        EntryExpr::MapEntry(e) => EntryExpr::MapEntry(MapEntryExpr {
            key: instrument(&e.key),
            value: instrument(&e.value),
            optional: e.optional,
        }),
    };
    IdedEntryExpr { id: entry.id, expr }
}

/// A comprehension with its range metered. The loop step of `map` and
/// `filter` (`@result + [e]`, maybe under a condition) keeps its shape, which
/// the interpreter recognises to append in place, and `e` is charged instead.
fn instrument_comprehension(c: &ComprehensionExpr) -> ComprehensionExpr {
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Ast::Ident(name) if *name == c.accu_var);
    let append = |step: &IdedExpr| -> Option<IdedExpr> {
        let Ast::Call(call) = &step.expr else {
            return None;
        };
        let [lhs, rhs] = call.args.as_slice() else {
            return None;
        };
        let Ast::List(list) = &rhs.expr else {
            return None;
        };
        if call.func_name != operators::ADD || call.target.is_some() || !is_accu(lhs) {
            return None;
        }
        let elements = list
            .elements
            .iter()
            .map(|e| charged(instrument(e)))
            .collect();
        Some(IdedExpr {
            id: step.id,
            expr: Ast::Call(CallExpr {
                func_name: call.func_name.clone(),
                target: None,
                args: vec![
                    lhs.clone(),
                    IdedExpr {
                        id: rhs.id,
                        expr: Ast::List(ListExpr {
                            elements,
                            optional_indices: list.optional_indices.clone(),
                        }),
                    },
                ],
            }),
        })
    };
    let loop_step = match &c.loop_step.expr {
        Ast::Call(call)
            if call.func_name == operators::CONDITIONAL
                && call.target.is_none()
                && call.args.len() == 3
                && is_accu(&call.args[2]) =>
        {
            match append(&call.args[1]) {
                Some(step) => IdedExpr {
                    id: c.loop_step.id,
                    expr: Ast::Call(CallExpr {
                        func_name: call.func_name.clone(),
                        target: None,
                        args: vec![instrument(&call.args[0]), step, call.args[2].clone()],
                    }),
                },
                None => instrument(&c.loop_step),
            }
        }
        _ => append(&c.loop_step).unwrap_or_else(|| instrument(&c.loop_step)),
    };
    ComprehensionExpr {
        iter_range: global(c.iter_range.id, ITERATE, vec![instrument(&c.iter_range)]),
        iter_var: c.iter_var.clone(),
        iter_var2: c.iter_var2.clone(),
        accu_var: c.accu_var.clone(),
        accu_init: instrument(&c.accu_init),
        // `all` and `exists` carry on past an error in a step (a later
        // element may decide the result), so their condition, evaluated
        // before each step, stops them once the budget is spent. `map` and
        // `filter` (a literal condition) stop at the error itself.
        loop_cond: match &c.loop_cond.expr {
            Ast::Literal(_) => c.loop_cond.clone(),
            _ => global(c.loop_cond.id, WITHIN, vec![instrument(&c.loop_cond)]),
        },
        loop_step,
        result: instrument(&c.result),
    }
}

fn all_literals(elements: &[IdedExpr]) -> bool {
    elements.iter().all(|e| matches!(e.expr, Ast::Literal(_)))
}

fn global(id: u64, name: &str, args: Vec<IdedExpr>) -> IdedExpr {
    IdedExpr {
        id,
        expr: Ast::Call(CallExpr {
            func_name: name.to_string(),
            target: None,
            args,
        }),
    }
}

fn charged_if(id: u64, expr: Ast, charge: bool) -> IdedExpr {
    let expr = IdedExpr { id, expr };
    if charge { charged(expr) } else { expr }
}

/// `expr`, charged for the value it gives: once, however it was built.
fn charged(expr: IdedExpr) -> IdedExpr {
    match &expr.expr {
        Ast::Literal(_) => expr,
        Ast::Call(call) if [CHARGE, REPLACE, JOIN, RANGE].contains(&call.func_name.as_str()) => {
            expr
        }
        _ => global(expr.id, CHARGE, vec![expr]),
    }
}

// ---- the meter ---------------------------------------------------------

/// Which part of the budget an evaluation went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    Steps,
    Values,
}

impl Exceeded {
    pub fn describe(self) -> String {
        match self {
            Exceeded::Steps => format!(
                "it iterates over more than {MAX_STEPS} elements in one evaluation \
                 (the comprehensions all, exists, exists_one, map, filter and sortBy count \
                 the size of their list or map; comparisons, `in` and the string searches \
                 one per {READ_BYTES_PER_STEP} bytes they read): iterate over less, or \
                 compute it in a skill"
            ),
            Exceeded::Values => format!(
                "it builds more than {} MiB of strings, lists and maps in one evaluation: \
                 build less, or compute it in a skill",
                MAX_VALUE_BYTES / (1024 * 1024)
            ),
        }
    }
}

struct Meter {
    steps: Cell<u64>,
    bytes: Cell<u64>,
    exceeded: Cell<Option<Exceeded>>,
}

thread_local! {
    static METER: Meter = const {
        Meter {
            steps: Cell::new(0),
            bytes: Cell::new(0),
            exceeded: Cell::new(None),
        }
    };
}

/// Runs one evaluation with a fresh budget; reports whether it went over.
pub fn metered<T>(evaluate: impl FnOnce() -> T) -> (T, Option<Exceeded>) {
    // A nested evaluation (none happens today) gets its own budget and gives
    // the outer one back.
    let outer = METER.with(|m| {
        (
            m.steps.replace(MAX_STEPS),
            m.bytes.replace(MAX_VALUE_BYTES),
            m.exceeded.replace(None),
        )
    });
    let result = evaluate();
    let exceeded = METER.with(|m| {
        m.steps.set(outer.0);
        m.bytes.set(outer.1);
        m.exceeded.replace(outer.2)
    });
    (result, exceeded)
}

fn exceed(what: Exceeded) -> ExecutionError {
    METER.with(|m| {
        // Spent: whatever follows (CEL may absorb this error) fails too.
        m.steps.set(0);
        m.bytes.set(0);
        if m.exceeded.get().is_none() {
            m.exceeded.set(Some(what));
        }
    });
    ExecutionError::function_error("budget", what.describe())
}

fn spend_steps(steps: u64) -> Result<(), ExecutionError> {
    METER
        .with(|m| match m.steps.get().checked_sub(steps) {
            Some(left) => {
                m.steps.set(left);
                Ok(())
            }
            None => Err(()),
        })
        .map_err(|()| exceed(Exceeded::Steps))
}

fn spend_bytes(bytes: u64) -> Result<(), ExecutionError> {
    METER
        .with(|m| match m.bytes.get().checked_sub(bytes) {
            Some(left) => {
                m.bytes.set(left);
                Ok(())
            }
            None => Err(()),
        })
        .map_err(|()| exceed(Exceeded::Values))
}

/// The weight of a value, counted up to `limit` (past it the walk stops).
fn weight(value: &dyn Val, limit: u64) -> u64 {
    const SLOT: u64 = 8;
    if let Some(s) = value.downcast_ref::<CelString>() {
        return s.inner().len() as u64;
    }
    if let Some(b) = value.downcast_ref::<CelBytes>() {
        return b.inner().len() as u64;
    }
    let mut total = SLOT;
    if let Some(list) = value.downcast_ref::<CelList>() {
        for item in list.inner() {
            total += SLOT + weight(item.as_ref(), limit.saturating_sub(total));
            if total > limit {
                break;
            }
        }
    } else if let Some(map) = value.downcast_ref::<CelMap>() {
        for (key, item) in map.inner() {
            total += SLOT + weight(key.inner(), limit) + weight(item.as_ref(), limit);
            if total > limit {
                break;
            }
        }
    } else if let Some(optional) = value.downcast_ref::<CelOptional>()
        && let Some(inner) = optional.inner()
    {
        total += weight(inner, limit);
    }
    total
}

fn charge(value: &dyn Val) -> Result<(), ExecutionError> {
    let left = METER.with(|m| m.bytes.get());
    spend_bytes(weight(value, left))
}

// ---- the meter functions ---------------------------------------------------

/// Registers the meter functions on `env`. Their names start with `@`, so no
/// expression can call them.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(ITERATE, "@budget_iterate(dyn)", vec![DYN_TYPE], iterate)?;
    env.add_overload(CHARGE, "@budget_charge(dyn)", vec![DYN_TYPE], charge_result)?;
    for arity in 3..=4 {
        env.add_overload(
            REPLACE,
            &format!("@budget_replace/{arity}"),
            dyn_args(arity),
            replace,
        )?;
    }
    for arity in 1..=2 {
        env.add_overload(
            JOIN,
            &format!("@budget_join/{arity}"),
            dyn_args(arity),
            join,
        )?;
    }
    env.add_overload(RANGE, "@budget_range(dyn)", dyn_args(1), range)?;
    env.add_overload(WITHIN, "@budget_within(dyn)", dyn_args(1), within)?;
    env.add_overload(READ, "@budget_read(dyn)", dyn_args(1), read)?;
    env.add_overload(READ_LIST, "@budget_read_list(dyn)", dyn_args(1), read_list)?;
    env.add_overload(
        READ_STRING,
        "@budget_read_string(dyn)",
        dyn_args(1),
        read_string,
    )?;
    env.add_overload(
        READ_REGEX,
        "@budget_read_regex(dyn)",
        dyn_args(1),
        read_regex,
    )?;
    env.add_overload(
        READ_SQUARED,
        "@budget_read_squared(dyn)",
        dyn_args(1),
        read_squared,
    )?;
    for arity in 2..=3 {
        env.add_overload(
            INDEX_OF,
            &format!("@budget_index_of/{arity}"),
            dyn_args(arity),
            index_of,
        )?;
        env.add_overload(
            LAST_INDEX_OF,
            &format!("@budget_last_index_of/{arity}"),
            dyn_args(arity),
            last_index_of,
        )?;
    }
    Ok(())
}

/// A comprehension's condition, handed on while the budget holds.
fn within<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let condition = single(args)?;
    match METER.with(|m| m.exceeded.get()) {
        Some(exceeded) => Err(exceed(exceeded)),
        None => Ok(condition),
    }
}

/// `lists.range(n)`, as the `lists` extension does it (at most 1,000,000
/// elements), charged 8 per element before the list is built.
fn range<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    const MAX_RANGE_SIZE: i64 = 1_000_000;
    let Some(n) = args.first().and_then(|n| n.downcast_ref::<CelInt>()) else {
        return Err(ExecutionError::no_such_overload(
            "lists.range",
            args.iter()
                .map(|a| a.get_type().name().to_owned())
                .collect(),
        ));
    };
    let n = *n.inner();
    if n < 0 {
        return Err(ExecutionError::function_error(
            "lists.range",
            format!("size must be non-negative, got {n}"),
        ));
    }
    if n > MAX_RANGE_SIZE {
        return Err(ExecutionError::function_error(
            "lists.range",
            format!("size {n} exceeds maximum allowed ({MAX_RANGE_SIZE})"),
        ));
    }
    spend_bytes(8 + 16 * n as u64)?;
    let items: Vec<Box<dyn Val>> = (0..n)
        .map(|i| Box::new(CelInt::from(i)) as Box<dyn Val>)
        .collect();
    Ok(CowVal::owned(CelList::from(items)))
}

/// `n` parameters of any type: the meter functions check types themselves,
/// to report them under the name the expression used.
fn dyn_args(n: usize) -> Vec<Type> {
    (0..n).map(|_| DYN_TYPE).collect()
}

fn single<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    match (args.pop(), args.is_empty()) {
        (Some(arg), true) => Ok(arg),
        _ => Err(ExecutionError::invalid_argument_count(1, args.len() + 1)),
    }
}

/// A comprehension's range: charged its size, handed on as it is.
fn iterate<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let range = single(args)?;
    if let Some(sizer) = range.as_sizer() {
        spend_steps(u64::try_from(*sizer.size().inner()).unwrap_or(0))?;
    }
    Ok(range)
}

/// An operand about to be read: charged a step per
/// [`READ_BYTES_PER_STEP`] of its weight, handed on as it is.
fn read<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = single(args)?;
    charge_read(value.as_ref())?;
    Ok(value)
}

/// The right side of `in`: charged as [`read`] when it is a list (searched
/// element by element), free when it is a map (one lookup).
fn read_list<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = single(args)?;
    if value.downcast_ref::<CelList>().is_some() {
        charge_read(value.as_ref())?;
    }
    Ok(value)
}

/// The receiver of `size`, `charAt` or `substring`: charged as [`read`]
/// when it is a string or bytes, free otherwise.
fn read_string<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = single(args)?;
    if value.downcast_ref::<CelString>().is_some() || value.downcast_ref::<CelBytes>().is_some() {
        charge_read(value.as_ref())?;
    }
    Ok(value)
}

/// The receiver of `distinct`, which compares every pair of its elements:
/// a step per 64 pairs.
fn read_squared<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    const PAIRS_PER_STEP: u64 = 64;
    let value = single(args)?;
    if let Some(list) = value.downcast_ref::<CelList>() {
        let n = list.inner().len() as u64;
        spend_steps(n.saturating_mul(n.saturating_sub(1)) / 2 / PAIRS_PER_STEP)?;
        charge_read(value.as_ref())?;
    }
    Ok(value)
}

/// An operand of `matches`: charged a step per [`REGEX_BYTES_PER_STEP`].
fn read_regex<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = single(args)?;
    charge_read_at(value.as_ref(), REGEX_BYTES_PER_STEP)?;
    Ok(value)
}

fn charge_read(value: &dyn Val) -> Result<(), ExecutionError> {
    charge_read_at(value, READ_BYTES_PER_STEP)
}

fn charge_read_at(value: &dyn Val, bytes_per_step: u64) -> Result<(), ExecutionError> {
    let left = METER.with(|m| m.steps.get());
    let limit = left.saturating_add(1).saturating_mul(bytes_per_step);
    spend_steps(weight(value, limit) / bytes_per_step)
}

/// A value just produced: charged its weight, handed on as it is.
fn charge_result<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = single(args)?;
    charge(value.as_ref())?;
    Ok(value)
}

/// `s.indexOf(needle[, offset])`, as the `strings` extension answers it (a
/// code-point index, -1 when absent; an offset past the end or negative is
/// an error), found in linear time and charged as a read of both strings.
fn index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    search("indexOf", args, |this, needle, offset| {
        let from = byte_of_char(this, offset);
        this[from..]
            .find(needle)
            .map(|at| offset + this[from..from + at].chars().count())
    })
}

/// `s.lastIndexOf(needle[, offset])`, as the `strings` extension answers it:
/// the last occurrence that starts at or before the offset (the end by
/// default), found in linear time and charged as a read of both strings.
fn last_index_of<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    search("lastIndexOf", args, |this, needle, offset| {
        let (chars, needle_chars) = (this.chars().count(), needle.chars().count());
        if needle_chars > chars {
            return None;
        }
        let last = offset.min(chars - needle_chars);
        // A match that starts at or before `last` ends by `end`; matches end
        // on character boundaries, so `end` can be rounded down to one.
        let mut end = (byte_of_char(this, last) + needle.len()).min(this.len());
        while !this.is_char_boundary(end) {
            end -= 1;
        }
        this[..end]
            .rfind(needle)
            .map(|at| this[..at].chars().count())
    })
}

/// The byte where character `index` starts (the length past the end).
fn byte_of_char(s: &str, index: usize) -> usize {
    s.char_indices().nth(index).map_or(s.len(), |(at, _)| at)
}

/// The argument checks and charges `indexOf` and `lastIndexOf` share;
/// `find(this, needle, offset)` gives the code-point index of the match.
/// Without an offset, `indexOf` starts at 0 and `lastIndexOf` at the end.
fn search<'b, 'v>(
    function: &str,
    args: Vec<CowVal<'b, 'v>>,
    find: impl Fn(&str, &str, usize) -> Option<usize>,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let string = |i: usize| args.get(i).and_then(|a| a.downcast_ref::<CelString>());
    let (Some(this), Some(needle)) = (string(0), string(1)) else {
        return Err(member_overload_error(function, &args));
    };
    charge_read(this)?;
    charge_read(needle)?;
    let (this, needle) = (this.inner(), needle.inner());
    let chars = this.chars().count();
    let offset = match args.get(2) {
        None if function == "indexOf" => 0,
        None => chars,
        Some(offset) => {
            let Some(offset) = offset.downcast_ref::<CelInt>() else {
                return Err(member_overload_error(function, &args));
            };
            let offset = *offset.inner();
            let out_of_range = || {
                ExecutionError::function_error(function, format!("index out of range: {offset}"))
            };
            if offset < 0 {
                return Err(out_of_range());
            }
            if needle.is_empty() {
                return Ok(CowVal::owned(CelInt::from(offset.min(chars as i64))));
            }
            if offset >= chars as i64 {
                return Err(out_of_range());
            }
            offset as usize
        }
    };
    if needle.is_empty() && function == "indexOf" {
        return Ok(CowVal::owned(CelInt::from(offset as i64)));
    }
    let found = find(this, needle, offset).map_or(-1, |i| i as i64);
    Ok(CowVal::owned(CelInt::from(found)))
}

fn member_overload_error(function: &str, args: &[CowVal<'_, '_>]) -> ExecutionError {
    ExecutionError::no_such_member_overload(
        function,
        args.iter()
            .map(|a| a.get_type().name().to_owned())
            .collect(),
    )
}

/// `s.replace(from, to[, n])`, as the `strings` extension does it (all
/// occurrences, or the first `n` when `n` is not negative), its size known
/// and charged before the new string is built.
fn replace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let string = |i: usize| args.get(i).and_then(|a| a.downcast_ref::<CelString>());
    let (Some(this), Some(from), Some(to)) = (string(0), string(1), string(2)) else {
        return Err(member_overload_error("replace", &args));
    };
    let limit = match args.get(3) {
        None => None,
        Some(n) => match n.downcast_ref::<CelInt>() {
            Some(n) => usize::try_from(*n.inner()).ok(),
            None => return Err(member_overload_error("replace", &args)),
        },
    };
    let (this, from, to) = (this.inner(), from.inner(), to.inner());
    let found = if from.is_empty() {
        // An empty pattern matches before every character and at the end.
        this.chars().count() + 1
    } else {
        this.matches(from).count()
    };
    let replaced = limit.map_or(found, |n| n.min(found)) as u64;
    // Each replaced occurrence of `from` is in `this`, so this never
    // underflows.
    let size = (this.len() as u64 - replaced * from.len() as u64)
        .saturating_add(replaced.saturating_mul(to.len() as u64));
    spend_bytes(size)?;
    let result = match limit {
        Some(n) => this.replacen(from, to, n),
        None => this.replace(from, to),
    };
    Ok(CowVal::owned(CelString::from(result)))
}

/// `list.join([separator])`, as the `strings` extension does it, its size
/// known and charged before the string is built.
fn join<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let separator = match args.get(1) {
        None => "",
        Some(sep) => match sep.downcast_ref::<CelString>() {
            Some(sep) => sep.inner(),
            None => return Err(member_overload_error("join", &args)),
        },
    };
    let list = match args[0].as_iterable() {
        Some(list) if args[0].get_type().kind() == Kind::List => list,
        _ => return Err(member_overload_error("join", &args)),
    };
    let mut parts = Vec::new();
    let mut items = list.iter();
    while let Some(item) = items.next() {
        match item.downcast_ref::<CelString>() {
            Some(s) => parts.push(s.inner()),
            None => {
                return Err(ExecutionError::function_error(
                    "join",
                    format!(
                        "expected a list of strings, found a {}",
                        item.get_type().name()
                    ),
                ));
            }
        }
    }
    let size = parts.iter().map(|p| p.len() as u64).sum::<u64>()
        + (parts.len().saturating_sub(1) * separator.len()) as u64;
    spend_bytes(size)?;
    Ok(CowVal::owned(CelString::from(parts.join(separator))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cel::common::types::CelMapKey;

    #[test]
    fn weights_count_strings_and_slots() {
        let list = CelList::from(vec![
            Box::new(CelString::from("abcd")) as Box<dyn Val>,
            Box::new(CelInt::from(1)),
        ]);
        assert_eq!(weight(&list, u64::MAX), 8 + (8 + 4) + (8 + 8));
        let map = CelMap::from(
            [(
                CelMapKey::from("k"),
                Box::new(CelString::from("vv")) as Box<dyn Val>,
            )]
            .into_iter()
            .collect::<std::collections::HashMap<_, _>>(),
        );
        assert_eq!(weight(&map, u64::MAX), 8 + 8 + 1 + 2);
    }
}
