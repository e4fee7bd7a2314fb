//! CEL expressions over JSON: compiled once when a scenario is loaded,
//! evaluated many times against the run's variables (`input`, `state`,
//! `config`, `output`, `item`, `index`).
//!
//! This module owns the bridge between JSON and CEL values and the analysis
//! the checker needs (which variables and member paths an expression uses).
//! It must not know which variables exist where: that is the checker's job.
//!
//! Conversions: JSON integers become CEL `int` (or `uint` above `i64::MAX`),
//! other numbers `double`, objects `map` with string keys, arrays `list`;
//! back, `int`/`uint` stay integers, `double` stays a number, and map keys
//! come out sorted so that the same expression always yields the same
//! bytes. Two shortcuts keep evaluation cheap and lossless: an expression
//! that is only a member path (`output.papers`) is answered from the JSON
//! directly, keeping the object key order the skill produced; and only the
//! top-level fields of `state` (or any variable) that an expression names are
//! converted to CEL.
//!
//! Every expression has a budget (`budget.rs`): its form is checked when it
//! compiles, and every evaluation, constant folding at load included, is
//! metered; going over is an [`ExprError::Budget`] naming the expression.

mod budget;

pub use budget::{
    MAX_COMPREHENSION_NESTING, MAX_DEPTH, MAX_NODES, MAX_SOURCE_BYTES, MAX_STEPS, MAX_VALUE_BYTES,
};

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, LazyLock};

use cel::common::ast::{Expr as Ast, IdedExpr, LiteralValue, operators};
use cel::common::types::{
    CelBool, CelDouble, CelInt, CelList, CelMap, CelMapKey, CelNull, CelString, CelUInt,
};
use cel::common::value::Val;
use cel::objects::Key;
use cel::{Context, Env, Program, Value as Cel};

use serde_json::Value;

use skillhost_model::RunState;

/// The environment every expression is compiled and run in: the standard
/// library plus the `strings`, `lists` and `math` extensions, and the
/// budget's meters. No function reaches the clock, the network or randomness.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    for (name, result) in [
        ("strings", env.add_extension(cel::extensions::strings)),
        ("lists", env.add_extension(cel::extensions::lists)),
        ("math", env.add_extension(cel::extensions::math)),
        ("budget", env.add_extension(budget::register)),
    ] {
        if let Err(e) = result {
            // The extensions are fixed at build time; failing here is a bug
            // in the set above, not something a scenario can cause.
            panic!("registering the CEL `{name}` extension: {e}");
        }
    }
    Arc::new(env)
});

/// A compiled CEL expression. Cheap to clone.
#[derive(Clone)]
pub struct Expr {
    /// The expression as written.
    pub source: String,
    /// Line of the scenario file it was written on; 0 when compiled from a
    /// string that came from nowhere in particular.
    pub line: usize,
    program: Arc<Program>,
    /// The tree that is evaluated: the program's, with the budget's meters.
    metered: Arc<IdedExpr>,
    analysis: Arc<Analysis>,
}

impl fmt::Debug for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expr").field(&self.source).finish()
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// Why an expression did not compile or evaluate. Every variant names the
/// expression.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    #[error("CEL syntax error in `{expr}`: {message}")]
    Syntax { expr: String, message: String },
    #[error("evaluating `{expr}`: {message}")]
    Eval { expr: String, message: String },
    #[error("`{expr}` must evaluate to true or false, but gave {found}")]
    NotBool { expr: String, found: String },
    /// The expression breaks a limit of its form, or one evaluation of it
    /// went over the work it may do.
    #[error("`{}` is over the expression budget: {message}", shorten(expr))]
    Budget { expr: String, message: String },
}

impl ExprError {
    /// The expression's source.
    pub fn expr(&self) -> &str {
        match self {
            ExprError::Syntax { expr, .. }
            | ExprError::Eval { expr, .. }
            | ExprError::NotBool { expr, .. }
            | ExprError::Budget { expr, .. } => expr,
        }
    }
}

/// The variables an expression is evaluated against: names bound to JSON
/// values, or to a run's live state. Values are held behind `Arc`s, so a
/// caller that keeps its values in an `Arc` binds them without copying
/// ([`Vars::set_shared`], [`Vars::set_state`]).
#[derive(Debug, Clone, Default)]
pub struct Vars {
    entries: Vec<(&'static str, Bound)>,
}

/// What a variable is bound to.
#[derive(Debug, Clone)]
enum Bound {
    Json(Arc<Value>),
    /// An object held as its fields: only the fields an expression names are
    /// looked at.
    State(Arc<RunState>),
}

/// A variable's value, borrowed.
#[derive(Clone, Copy)]
enum Root<'v> {
    Json(&'v Value),
    State(&'v RunState),
}

impl<'v> Root<'v> {
    /// The top-level field `key` of an object.
    fn field(self, key: &str) -> Option<&'v Value> {
        match self {
            Root::Json(value) => value.as_object()?.get(key),
            Root::State(state) => state.get(key),
        }
    }
}

impl Vars {
    pub fn new() -> Self {
        Vars::default()
    }

    /// Binds `name` to a copy of `value`, replacing any earlier binding.
    pub fn set(&mut self, name: &'static str, value: &Value) -> &mut Self {
        self.bind(name, Bound::Json(Arc::new(value.clone())))
    }

    /// Binds `name` to `value`, replacing any earlier binding.
    pub fn set_owned(&mut self, name: &'static str, value: Value) -> &mut Self {
        self.bind(name, Bound::Json(Arc::new(value)))
    }

    /// Binds `name` to a shared value without copying it.
    pub fn set_shared(&mut self, name: &'static str, value: Arc<Value>) -> &mut Self {
        self.bind(name, Bound::Json(value))
    }

    /// Binds `name` to a run's state, shared: the object of its fields.
    pub fn set_state(&mut self, name: &'static str, state: Arc<RunState>) -> &mut Self {
        self.bind(name, Bound::State(state))
    }

    fn root(&self, name: &str) -> Option<Root<'_>> {
        self.entries
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, bound)| match bound {
                Bound::Json(value) => Root::Json(value),
                Bound::State(state) => Root::State(state),
            })
    }

    fn bind(&mut self, name: &'static str, value: Bound) -> &mut Self {
        match self.entries.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.entries.push((name, value)),
        }
        self
    }

    /// The value at `path` (a variable then object keys), when every step is
    /// an object lookup that succeeds.
    fn lookup(&self, path: &[String]) -> Option<&Value> {
        let (root, rest) = path.split_first()?;
        let root = self.root(root)?;
        let (start, rest) = match root {
            Root::Json(value) => (value, rest),
            Root::State(_) => {
                let (field, rest) = rest.split_first()?;
                (root.field(field)?, rest)
            }
        };
        rest.iter().try_fold(start, |value, key| {
            match key.strip_prefix('[').and_then(|k| k.strip_suffix(']')) {
                // A constant list index (`state.papers[3]`); anything else,
                // including an index out of range, is left to CEL to report.
                Some(index) => value.as_array()?.get(index.parse::<usize>().ok()?),
                None => value.as_object()?.get(key),
            }
        })
    }
}

/// What evaluation needs to know about an expression, found once at compile
/// time.
#[derive(Debug, Default)]
struct Analysis {
    /// Free variables, each with the top-level fields the expression uses.
    roots: Vec<(String, Need)>,
    /// Member paths used, root first.
    references: Vec<Vec<String>>,
    /// Set when the whole expression is a member path such as `output.papers`.
    path: Option<Vec<String>>,
    /// The value of an expression with no free variables (`"1"`, `[1, 2]`),
    /// found once at compile time. Nothing in the environment reaches the
    /// clock or randomness, so it can only ever give this value. One that
    /// fails to evaluate is left to report its error when it runs.
    constant: Option<Value>,
}

/// The stack an evaluation at [`MAX_NESTING`] and [`MAX_OPERATORS`] may
/// need: the interpreter recurses once per level of the tree, and the
/// budget's meters add levels of their own. A thread that evaluates
/// expressions (the async runtime's workers and blocking threads) needs this
/// much; unoptimised builds use most of it, and 2 MiB, a tokio worker's
/// default, is not enough for them.
pub const EVAL_STACK_BYTES: usize = 8 << 20;

/// How deeply brackets may nest in one expression.
pub const MAX_NESTING: usize = 16;
/// How many operator characters (`+ - * / % < > = ! & | ?`) one expression
/// may have.
pub const MAX_OPERATORS: usize = 32;

/// Refuses an expression nested or chained beyond what the parser and the
/// interpreter can handle without overflowing the stack: both recurse once
/// per level (the parser through about ten grammar rules per bracket, each
/// a large frame), so a scenario file with 60 nested parentheses or 500
/// terms of `1 + 1 + …` used to abort the process. The limits keep the
/// deepest expression that passes within a tokio worker's 2 MiB stack when
/// the engine evaluates it, in a debug build too, and are well above what a
/// condition needs (the shipped scenarios use at most 9 operator
/// characters). Counted outside string literals.
fn check_shape(source: &str) -> Result<(), String> {
    let bytes = source.as_bytes();
    let (mut depth, mut deepest, mut operators) = (0usize, 0usize, 0usize);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            quote @ (b'"' | b'\'') => {
                let triple = bytes[i..].starts_with(&[quote; 3]);
                let closing: &[u8] = if triple { &[quote; 3] } else { &[quote; 1] };
                i += closing.len();
                while i < bytes.len() && !bytes[i..].starts_with(closing) {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += closing.len();
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'+' | b'-' | b'*' | b'/' | b'%' | b'<' | b'>' | b'=' | b'!' | b'&' | b'|' | b'?' => {
                operators += 1
            }
            _ => {}
        }
        i += 1;
    }
    if deepest > MAX_NESTING {
        return Err(format!(
            "brackets nest {deepest} deep, more than {MAX_NESTING}; split the expression, or \
             compute parts of it in earlier nodes"
        ));
    }
    if operators > MAX_OPERATORS {
        return Err(format!(
            "{operators} operator characters, more than {MAX_OPERATORS}; split the expression, \
             or compute parts of it in earlier nodes"
        ));
    }
    Ok(())
}

/// Runs the CEL parser on a thread with a stack sized for the deepest
/// expression [`check_shape`] lets through, whatever thread compiles (a
/// tokio worker has 2 MiB).
fn on_parser_stack<T: Send>(parse: impl FnOnce() -> T + Send) -> T {
    const PARSER_STACK: usize = 256 << 20;
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("cel-parser".into())
            .stack_size(PARSER_STACK)
            .spawn_scoped(scope, parse)
            .expect("starting the CEL parser thread")
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

#[derive(Debug, Clone, PartialEq)]
enum Need {
    /// The variable is used as a whole (`size(state)`, `item`).
    Whole,
    /// Only these fields are used (`state.papers`, `has(state.report)`).
    Fields(Vec<String>),
}

impl Expr {
    /// Compiles `source`.
    pub fn compile(source: &str) -> Result<Expr, ExprError> {
        let over_budget = |message| ExprError::Budget {
            expr: source.to_string(),
            message,
        };
        // The shape first: it reads the text without recursing, and says
        // how to split an expression too deep to parse, whatever its length.
        check_shape(source).map_err(|message| ExprError::Syntax {
            expr: source.to_string(),
            message,
        })?;
        budget::check_source(source).map_err(over_budget)?;
        // Parsing, the budget's walks over the tree and folding a constant
        // all recurse once per level of the tree: on the parser's stack.
        on_parser_stack(|| Expr::compile_shaped(source))
    }

    /// Compiles `source`, whose shape and size are within the limits.
    fn compile_shaped(source: &str) -> Result<Expr, ExprError> {
        let over_budget = |message| ExprError::Budget {
            expr: source.to_string(),
            message,
        };
        let program = ENV.compile(source).map_err(|errors| ExprError::Syntax {
            expr: source.to_string(),
            message: errors
                .errors
                .iter()
                .map(|e| format!("column {}: {}", e.pos.1 + 1, e.msg))
                .collect::<Vec<_>>()
                .join("; "),
        })?;
        budget::check_form(program.expression()).map_err(over_budget)?;
        let metered = budget::instrument(program.expression());
        let mut analysis = analyse(program.expression());
        if analysis.roots.is_empty() {
            // Folded here, so under `host check` too: the budget stops a
            // constant that would build gigabytes, and as it can only ever
            // give the same result, it is refused now rather than at run time.
            let context = Context::with_env(ENV.clone());
            let (result, exceeded) = budget::metered(|| Cel::resolve(&metered, &context));
            if let Some(exceeded) = exceeded {
                return Err(over_budget(exceeded.describe()));
            }
            analysis.constant = result.ok().and_then(|result| cel_to_json(&result).ok());
        }
        Ok(Expr {
            source: source.to_string(),
            line: 0,
            program: Arc::new(program),
            metered: Arc::new(metered),
            analysis: Arc::new(analysis),
        })
    }

    /// [`compile`](Expr::compile), remembering the line it was written on.
    pub fn compile_at(source: &str, line: usize) -> Result<Expr, ExprError> {
        let mut expr = Expr::compile(source)?;
        expr.line = line;
        Ok(expr)
    }

    /// Evaluates against `vars` and converts the result to JSON.
    pub fn eval(&self, vars: &Vars) -> Result<Value, ExprError> {
        if let Some(value) = &self.analysis.constant {
            return Ok(value.clone());
        }
        if let Some(path) = &self.analysis.path
            && let Some(value) = vars.lookup(path)
        {
            return Ok(value.clone());
        }
        let mut context = Context::with_env(ENV.clone());
        for (name, need) in &self.analysis.roots {
            let Some(root) = vars.root(name) else {
                // CEL reports the undeclared reference, if it is reached.
                continue;
            };
            let val = match (need, root) {
                (Need::Whole, Root::Json(value)) => json_to_val(value),
                (Need::Whole, Root::State(state)) => object_to_val(state.iter()),
                (Need::Fields(fields), Root::Json(value)) if !value.is_object() => {
                    json_to_val(value)
                }
                (Need::Fields(fields), root) => object_to_val(
                    fields
                        .iter()
                        .filter_map(|field| Some((field, root.field(field)?))),
                ),
            };
            context.add_variable_as_val(name.clone(), val);
        }
        let (result, exceeded) = budget::metered(|| Cel::resolve(&self.metered, &context));
        if let Some(exceeded) = exceeded {
            return Err(ExprError::Budget {
                expr: self.source.clone(),
                message: exceeded.describe(),
            });
        }
        let result = result.map_err(|e| self.eval_error(e.to_string()))?;
        cel_to_json(&result).map_err(|message| self.eval_error(message))
    }

    /// Evaluates a condition: the result must be a bool.
    pub fn eval_bool(&self, vars: &Vars) -> Result<bool, ExprError> {
        match self.eval(vars)? {
            Value::Bool(b) => Ok(b),
            other => Err(ExprError::NotBool {
                expr: self.source.clone(),
                found: describe_json(&other),
            }),
        }
    }

    /// The member paths the expression uses, root first, each as long as it
    /// is spelled: `size(state.papers) > 0 && input.query != ""` uses
    /// `["state", "papers"]` and `["input", "query"]`; `item` alone is
    /// `["item"]`. Variables bound by macros (`x` in `l.all(x, …)`) are not
    /// included.
    pub fn references(&self) -> Vec<Vec<String>> {
        self.analysis.references.clone()
    }

    /// The syntax tree as written, macros expanded into comprehensions: what
    /// the checker infers types from; without the budget's meters, which only
    /// evaluation sees.
    pub fn ast(&self) -> &IdedExpr {
        self.program.expression()
    }

    /// The free variables the expression uses.
    pub fn variables(&self) -> Vec<&str> {
        self.analysis
            .roots
            .iter()
            .map(|(name, _)| name.as_str())
            .collect()
    }

    fn eval_error(&self, message: String) -> ExprError {
        ExprError::Eval {
            expr: self.source.clone(),
            message,
        }
    }
}

/// An expression as an error shows it: one longer than a line is cut.
pub(crate) fn shorten(source: &str) -> String {
    const SHOWN: usize = 120;
    if source.chars().count() <= SHOWN {
        return source.to_string();
    }
    let head: String = source.chars().take(SHOWN).collect();
    format!("{head}…")
}

/// A short description of a JSON value for error messages.
fn describe_json(value: &Value) -> String {
    let kind = match value {
        Value::Null => return "null".into(),
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a map",
    };
    let mut text = value.to_string();
    if text.chars().count() > 60 {
        text = text.chars().take(57).collect::<String>() + "...";
    }
    format!("{kind} ({text})")
}

// ---- analysis ----------------------------------------------------------

fn analyse(root: &IdedExpr) -> Analysis {
    let mut analysis = Analysis {
        path: member_path(root, &[], true)
            .filter(|p| p.segments.len() > 1 && !p.test)
            .map(|p| p.segments),
        ..Analysis::default()
    };
    walk(root, &mut Vec::new(), &mut analysis);
    analysis
}

impl Analysis {
    fn record(&mut self, segments: Vec<String>) {
        let root = segments[0].clone();
        let need = match segments.get(1) {
            Some(field) => Need::Fields(vec![field.clone()]),
            None => Need::Whole,
        };
        match self.roots.iter_mut().find(|(name, _)| *name == root) {
            None => self.roots.push((root, need)),
            Some((_, existing)) => match (existing, need) {
                (Need::Whole, _) => {}
                (existing, Need::Whole) => *existing = Need::Whole,
                (Need::Fields(fields), Need::Fields(new)) => {
                    for field in new {
                        if !fields.contains(&field) {
                            fields.push(field);
                        }
                    }
                }
            },
        }
        if !self.references.contains(&segments) {
            self.references.push(segments);
        }
    }
}

/// A member path spelled by an expression: a free variable followed by
/// field selections or constant string indexes.
struct Path {
    segments: Vec<String>,
    /// The outermost selection is a presence test (`has(a.b)`).
    test: bool,
}

/// CEL's type identifiers (`type(x) == int`): constants, not variables.
const TYPE_NAMES: &[&str] = &[
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// With `int_indexes`, constant list indexes are kept as `[n]` segments (for
/// the whole-expression shortcut only; references stop at them).
fn member_path(expr: &IdedExpr, bound: &[String], int_indexes: bool) -> Option<Path> {
    let mut segments = Vec::new();
    let mut test = false;
    let mut current = expr;
    loop {
        match &current.expr {
            Ast::Ident(name) => {
                if bound.contains(name) || TYPE_NAMES.contains(&name.as_str()) {
                    return None;
                }
                segments.push(name.clone());
                segments.reverse();
                return Some(Path { segments, test });
            }
            Ast::Select(select) => {
                if select.test {
                    if !segments.is_empty() {
                        return None;
                    }
                    test = true;
                }
                segments.push(select.field.clone());
                current = &select.operand;
            }
            Ast::Call(call)
                if call.func_name == operators::INDEX
                    && call.target.is_none()
                    && call.args.len() == 2 =>
            {
                match &call.args[1].expr {
                    Ast::Literal(LiteralValue::String(key)) => segments.push(key.to_string()),
                    Ast::Literal(LiteralValue::Int(index))
                        if int_indexes && *index.inner() >= 0 =>
                    {
                        segments.push(format!("[{}]", index.inner()))
                    }
                    _ => return None,
                }
                current = &call.args[0];
            }
            _ => return None,
        }
    }
}

fn walk(expr: &IdedExpr, bound: &mut Vec<String>, out: &mut Analysis) {
    if let Some(path) = member_path(expr, bound, false) {
        out.record(path.segments);
        return;
    }
    match &expr.expr {
        Ast::Unspecified | Ast::Literal(_) => {}
        // A bound identifier (free ones are paths, above).
        Ast::Ident(_) => {}
        Ast::Select(select) => walk(&select.operand, bound, out),
        Ast::Call(call) => {
            if let Some(target) = &call.target
                && !names_a_namespace(target, bound)
            {
                walk(target, bound, out);
            }
            for arg in &call.args {
                walk(arg, bound, out);
            }
        }
        Ast::List(list) => {
            for element in &list.elements {
                walk(element, bound, out);
            }
        }
        Ast::Map(map) => {
            for entry in &map.entries {
                walk_entry(&entry.expr, bound, out);
            }
        }
        Ast::Struct(st) => {
            for entry in &st.entries {
                walk_entry(&entry.expr, bound, out);
            }
        }
        Ast::Comprehension(c) => {
            walk(&c.iter_range, bound, out);
            walk(&c.accu_init, bound, out);
            let before = bound.len();
            bound.push(c.iter_var.clone());
            if let Some(second) = &c.iter_var2 {
                bound.push(second.clone());
            }
            bound.push(c.accu_var.clone());
            walk(&c.loop_cond, bound, out);
            walk(&c.loop_step, bound, out);
            walk(&c.result, bound, out);
            bound.truncate(before);
        }
    }
}

/// The namespaces of the environment's functions (`lists.range(3)`,
/// `strings.quote(s)`, `math.abs(x)`, `optional.of(x)`): as a call's
/// target, a name, not a variable.
const NAMESPACES: &[&str] = &["lists", "strings", "math", "optional"];

fn names_a_namespace(target: &IdedExpr, bound: &[String]) -> bool {
    matches!(&target.expr, Ast::Ident(name)
        if NAMESPACES.contains(&name.as_str()) && !bound.contains(name))
}

fn walk_entry(entry: &cel::common::ast::EntryExpr, bound: &mut Vec<String>, out: &mut Analysis) {
    match entry {
        cel::common::ast::EntryExpr::StructField(field) => walk(&field.value, bound, out),
        cel::common::ast::EntryExpr::MapEntry(entry) => {
            walk(&entry.key, bound, out);
            walk(&entry.value, bound, out);
        }
    }
}

// ---- JSON <-> CEL ------------------------------------------------------

fn json_to_val<'v>(value: &'v Value) -> Box<dyn Val + 'v> {
    match value {
        Value::Null => Box::new(CelNull),
        Value::Bool(b) => Box::new(CelBool::from(*b)),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Box::new(CelInt::from(i))
            } else if let Some(u) = n.as_u64() {
                Box::new(CelUInt::from(u))
            } else {
                Box::new(CelDouble::from(n.as_f64().unwrap_or(f64::NAN)))
            }
        }
        Value::String(s) => Box::new(CelString::from(s.as_str())),
        Value::Array(items) => Box::new(CelList::from(
            items.iter().map(json_to_val).collect::<Vec<_>>(),
        )),
        Value::Object(map) => object_to_val(map.iter()),
    }
}

/// An object's fields (all of them, or only those an expression uses) as a
/// CEL map.
fn object_to_val<'v>(fields: impl Iterator<Item = (&'v String, &'v Value)>) -> Box<dyn Val + 'v> {
    Box::new(CelMap::from(
        fields
            .map(|(k, v)| (CelMapKey::from(k.as_str()), json_to_val(v)))
            .collect::<HashMap<_, _>>(),
    ))
}

fn cel_to_json(value: &Cel) -> Result<Value, String> {
    Ok(match value {
        Cel::Null => Value::Null,
        Cel::Bool(b) => Value::Bool(*b),
        Cel::Int(i) => Value::from(*i),
        Cel::UInt(u) => Value::from(*u),
        Cel::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .ok_or_else(|| format!("the result {f} is not a JSON number"))?,
        Cel::String(s) => Value::String(s.to_string()),
        Cel::Bytes(bytes) => {
            use base64::Engine as _;
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes.as_slice()))
        }
        Cel::List(items) => Value::Array(
            items
                .iter()
                .map(cel_to_json)
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Cel::Map(map) => {
            let mut entries = map
                .map
                .iter()
                .map(|(k, v)| Ok((key_to_string(k), cel_to_json(v)?)))
                .collect::<Result<Vec<_>, String>>()?;
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        other => return Err(format!("the result {other:?} has no JSON form")),
    })
}

fn key_to_string(key: &Key) -> String {
    match key {
        Key::Int(i) => i.to_string(),
        Key::Uint(u) => u.to_string(),
        Key::Bool(b) => b.to_string(),
        Key::String(s) => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(source: &str, vars: &Vars) -> Value {
        Expr::compile(source)
            .unwrap()
            .eval(vars)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn state() -> Value {
        json!({
            "papers": [
                {"id": "p1", "title": "Attention", "year": 2017, "score": 0.5},
                {"id": "p2", "title": "", "year": 2019, "score": 1.25}
            ],
            "count": 3,
            "report": {"b": 1, "a": 2},
            "errors": []
        })
    }

    /// Runs `f` on a thread with a tokio worker's stack (2 MiB), where the
    /// engine evaluates expressions.
    fn on_worker_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| {
            std::thread::Builder::new()
                .stack_size(EVAL_STACK_BYTES)
                .spawn_scoped(scope, f)
                .unwrap()
                .join()
                .unwrap()
        })
    }

    /// Found by fuzzing the scenario checker: these aborted the process with
    /// a stack overflow while `host check` parsed them.
    #[test]
    fn deeply_nested_or_chained_expressions_are_refused_not_a_crash() {
        let nested = |open: &str, close: &str, n: usize| {
            format!("{}true{}", open.repeat(n), close.repeat(n))
        };
        for source in [
            nested("(", ")", 60),
            nested("(", ")", 20_000),
            format!("{}{} == []", "[".repeat(50), "]".repeat(50)),
            format!("{} > 0", vec!["1"; 500].join(" + ")),
        ] {
            let error = on_worker_stack(|| Expr::compile(&source)).unwrap_err();
            let message = error.to_string();
            assert!(
                message.contains("more than") && message.contains("split the expression"),
                "{message}"
            );
        }
        // Brackets inside strings do not count.
        let quoted = format!("'{}' != ''", "(".repeat(100));
        assert!(on_worker_stack(|| Expr::compile(&quoted)).is_ok());
    }

    #[test]
    fn expressions_at_the_limits_compile_and_run_on_a_worker_stack() {
        let vars = Vars::default();
        let nested = format!(
            "{}1{} == 1",
            "(".repeat(MAX_NESTING),
            ")".repeat(MAX_NESTING)
        );
        let lists = format!(
            "size({}{}) == 1",
            "[".repeat(MAX_NESTING - 1),
            "]".repeat(MAX_NESTING - 1)
        );
        // Two of the operator characters are the comparison's.
        let terms = MAX_OPERATORS - 2 + 1;
        let chained = format!("{} == {terms}", vec!["1"; terms].join(" + "));
        // Both limits at once: the deepest tree that passes.
        let both = format!(
            "size({}{}{}) == 1",
            "[".repeat(MAX_NESTING - 1),
            vec!["1"; MAX_OPERATORS - 2 + 1].join(" + "),
            "]".repeat(MAX_NESTING - 1)
        );
        for source in [nested, lists, chained, both] {
            let value = on_worker_stack(|| Expr::compile(&source).unwrap().eval(&vars));
            assert_eq!(value.unwrap(), json!(true), "{source}");
            // The same tree over a variable is not folded at load: it is
            // evaluated, through the budget's meters, on the worker's stack.
            let over_input = source.replacen('1', "input.one", 1);
            let mut vars = Vars::default();
            vars.set_owned("input", json!({ "one": 1 }));
            let value = on_worker_stack(|| Expr::compile(&over_input).unwrap().eval(&vars));
            assert_eq!(value.unwrap(), json!(true), "{over_input}");
        }
    }

    #[test]
    fn scenarios_can_be_shared_between_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Expr>();
        shared::<Vars>();
        shared::<crate::Scenario>();
        shared::<crate::checks::schema::CompiledSchema>();
    }

    #[test]
    fn constants_are_evaluated_once_and_errors_still_surface() {
        let vars = Vars::new();
        for (source, value) in [
            ("1", json!(1)),
            ("'a' + 'b'", json!("ab")),
            ("[1, 2].map(x, x * 2)", json!([2, 4])),
            ("{'b': 1, 'a': 2}", json!({"a": 2, "b": 1})),
        ] {
            let expr = Expr::compile(source).unwrap();
            assert_eq!(expr.analysis.constant, Some(value.clone()), "{source}");
            assert_eq!(expr.eval(&vars).unwrap(), value, "{source}");
        }
        // Not constant: it names a variable.
        assert_eq!(
            Expr::compile("state.count").unwrap().analysis.constant,
            None
        );
        // A constant that fails is reported when it runs, as before.
        let failing = Expr::compile("1 / 0").unwrap();
        assert_eq!(failing.analysis.constant, None);
        let error = failing.eval(&vars).unwrap_err();
        assert!(matches!(error, ExprError::Eval { .. }), "{error}");
    }

    #[test]
    fn integers_stay_integers() {
        let state = state();
        let mut vars = Vars::new();
        vars.set("state", &state);
        assert_eq!(eval("state.count + 2", &vars), json!(5));
        assert_eq!(eval("state.count * 2 - 7", &vars), json!(-1));
        assert_eq!(eval("state.papers[1].score * 2.0", &vars), json!(2.5));
        assert!(eval("state.count", &vars).is_i64());
        assert_eq!(eval("18446744073709551615u", &vars), json!(u64::MAX));
    }

    #[test]
    fn strings_lists_and_maps() {
        let state = state();
        let input = json!({"query": "Transformers"});
        let mut vars = Vars::new();
        vars.set("state", &state).set("input", &input);
        assert_eq!(
            eval("input.query.lowerAscii() + '!'", &vars),
            json!("transformers!")
        );
        assert_eq!(
            eval("state.papers.map(p, p.id)", &vars),
            json!(["p1", "p2"])
        );
        assert_eq!(
            eval(
                "state.papers.filter(p, p.title != '').map(p, p.title)",
                &vars
            ),
            json!(["Attention"])
        );
        // Map keys come out sorted, whatever CEL's hash order.
        assert_eq!(
            eval("{'z': 1, 'a': [1, 2], 'm': {'y': true, 'b': null}}", &vars).to_string(),
            r#"{"a":[1,2],"m":{"b":null,"y":true},"z":1}"#
        );
        assert_eq!(eval("state.papers[0]['title']", &vars), json!("Attention"));
    }

    #[test]
    fn constant_list_indexes_are_read_from_json() {
        let state = json!({ "papers": [{ "title": "a" }, { "title": "b", "n": 1.0 }] });
        let mut vars = Vars::new();
        vars.set("state", &state);
        let e = Expr::compile("state.papers[1]").unwrap();
        assert_eq!(e.eval(&vars).unwrap(), json!({ "title": "b", "n": 1.0 }));
        let e = Expr::compile("state.papers[0].title").unwrap();
        assert_eq!(e.eval(&vars).unwrap(), json!("a"));
        // Out of range is CEL's error, not a silent null.
        assert!(
            Expr::compile("state.papers[5].title")
                .unwrap()
                .eval(&vars)
                .is_err()
        );
        assert_eq!(
            Expr::compile("state.papers[1].title").unwrap().references(),
            vec![vec!["state".to_string(), "papers".to_string()]]
        );
    }

    #[test]
    fn member_paths_keep_json_as_is() {
        let output = json!({"report": {"z": 1, "a": 2}});
        let mut vars = Vars::new();
        vars.set("output", &output);
        // Key order kept: the value is taken from the JSON, not rebuilt.
        assert_eq!(eval("output.report", &vars).to_string(), r#"{"z":1,"a":2}"#);
    }

    #[test]
    fn size_has_and_comparisons() {
        let state = state();
        let mut vars = Vars::new();
        vars.set("state", &state);
        assert_eq!(eval("size(state.papers)", &vars), json!(2));
        assert_eq!(eval("size(state.papers) >= 3", &vars), json!(false));
        assert_eq!(eval("size('héllo')", &vars), json!(5));
        assert_eq!(eval("has(state.report)", &vars), json!(true));
        assert_eq!(eval("has(state.missing)", &vars), json!(false));
        assert_eq!(
            eval("has(state.report.a) && !has(state.report.c)", &vars),
            json!(true)
        );
        assert_eq!(eval("state.papers[0].year < 2018", &vars), json!(true));
        assert_eq!(
            eval("state.papers.all(p, p.year > 2000)", &vars),
            json!(true)
        );
        assert_eq!(
            eval("state.papers.exists(p, p.title == '')", &vars),
            json!(true)
        );
        assert_eq!(
            eval("'Attention' in state.papers.map(p, p.title)", &vars),
            json!(true)
        );
        assert_eq!(eval("size(state)", &vars), json!(4));
    }

    #[test]
    fn eval_bool_requires_a_bool() {
        let state = state();
        let mut vars = Vars::new();
        vars.set("state", &state);
        let expr = Expr::compile("state.count > 1").unwrap();
        assert!(expr.eval_bool(&vars).unwrap());
        let err = Expr::compile("state.count")
            .unwrap()
            .eval_bool(&vars)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "`state.count` must evaluate to true or false, but gave a number (3)"
        );
    }

    #[test]
    fn errors_name_the_expression() {
        let err = Expr::compile("state.papers[").unwrap_err();
        assert!(matches!(err, ExprError::Syntax { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("CEL syntax error in `state.papers[`: column ")
        );

        let state = state();
        let mut vars = Vars::new();
        vars.set("state", &state);
        let err = Expr::compile("state.nope.x == 1")
            .unwrap()
            .eval(&vars)
            .unwrap_err();
        assert_eq!(err.expr(), "state.nope.x == 1");
        assert!(err.to_string().contains("nope"), "{err}");
        let err = Expr::compile("1 / 0").unwrap().eval(&vars).unwrap_err();
        assert!(err.to_string().starts_with("evaluating `1 / 0`: "), "{err}");
        let err = Expr::compile("unknown_var + 1")
            .unwrap()
            .eval(&vars)
            .unwrap_err();
        assert!(err.to_string().contains("unknown_var"), "{err}");
    }

    #[test]
    fn owned_shared_and_replaced_bindings() {
        let mut vars = Vars::new();
        vars.set_shared("state", Arc::new(json!({"n": 4})));
        assert_eq!(eval("state.n", &vars), json!(4));
        vars.set_owned("index", json!(1));
        vars.set_owned("index", json!(2));
        vars.set_owned("item", json!({"id": "p9"}));
        assert_eq!(eval("index * 10", &vars), json!(20));
        assert_eq!(eval("item.id + '-' + string(index)", &vars), json!("p9-2"));
    }

    #[test]
    fn references_are_member_paths() {
        let expr = Expr::compile(
            "size(state.papers) > 0 && input.query != '' && \
             state.papers.all(p, has(p.title) && p.year > config.min_year) && \
             has(state.report) && item['id'] == state.papers[index].id",
        )
        .unwrap();
        assert_eq!(
            expr.references(),
            vec![
                vec!["state".to_string(), "papers".into()],
                vec!["input".into(), "query".into()],
                vec!["config".into(), "min_year".into()],
                vec!["state".into(), "report".into()],
                vec!["item".into(), "id".into()],
                vec!["index".into()],
            ]
        );
        assert_eq!(
            expr.variables(),
            ["state", "input", "config", "item", "index"]
        );
        // Type names and namespaced functions are not variables.
        let expr =
            Expr::compile("math.greatest([1, 2]) == 2 && type(1) == int && type('') == string")
                .unwrap();
        assert!(expr.references().is_empty(), "{:?}", expr.references());
        assert_eq!(expr.eval(&Vars::new()).unwrap(), json!(true));
        let expr = Expr::compile("lists.range(3).map(x, strings.quote(string(x)))").unwrap();
        assert!(expr.references().is_empty(), "{:?}", expr.references());
        assert_eq!(
            expr.eval(&Vars::new()).unwrap(),
            json!(["\"0\"", "\"1\"", "\"2\""])
        );
        // Macro variables are bound, not references.
        let expr = Expr::compile("[1, 2].map(x, x * 2)").unwrap();
        assert!(expr.references().is_empty());
        let expr = Expr::compile("output.claims.exists(c, c.id == state.target)").unwrap();
        assert_eq!(
            expr.references(),
            vec![
                vec!["output".to_string(), "claims".into()],
                vec!["state".into(), "target".into()]
            ]
        );
    }

    fn budget_error(result: Result<impl fmt::Debug, ExprError>) -> String {
        match result {
            Err(e @ ExprError::Budget { .. }) => e.to_string(),
            other => panic!("expected a budget error, got {other:?}"),
        }
    }

    #[test]
    fn constant_folding_stops_a_string_that_doubles() {
        // Each `replace` doubles the string: 2^40 bytes if nothing stopped
        // it; it stops at 64 MiB.
        let source = format!("'a'{}", ".replace('a', 'aa')".repeat(40));
        let message = budget_error(Expr::compile(&source));
        assert!(message.contains("64 MiB"), "{message}");
        assert!(message.starts_with("`'a'.replace('a', 'aa')"), "{message}");
        // One that would jump from 4 MB to 4 GB is refused before it builds it.
        let thousand = "a".repeat(1000);
        let source = format!("'aaaa'.replace('a', '{thousand}').replace('a', '{thousand}')");
        assert_eq!(
            Expr::compile(&source)
                .unwrap()
                .eval(&Vars::new())
                .unwrap()
                .as_str()
                .map(str::len),
            Some(4_000_000)
        );
        let source = format!("{source}.replace('a', '{thousand}')");
        let started = std::time::Instant::now();
        budget_error(Expr::compile(&source));
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Concatenation and `join` are metered the same way.
        let source = format!("lists.range(1000).map(x, '{}').join()", "x".repeat(100_000));
        budget_error(Expr::compile(&source));
    }

    #[test]
    fn nested_comprehensions_are_bounded_in_steps() {
        // 10^10 steps: refused after about a million.
        let expr = Expr::compile(
            "state.n > 0 && lists.range(100000).exists(x, lists.range(100000).exists(y, y < 0))",
        )
        .unwrap();
        let state = json!({"n": 1});
        let mut vars = Vars::new();
        vars.set("state", &state);
        // Without the budget this would not end for hours.
        let error = expr.eval(&vars).unwrap_err();
        assert_eq!(error.expr(), expr.source);
        let message = budget_error(Err::<(), _>(error));
        assert!(message.contains("1000000 elements"), "{message}");
        // The budget is per evaluation: the next one starts afresh.
        assert_eq!(
            Expr::compile("state.n > 0 && lists.range(1000).all(x, x >= 0)")
                .unwrap()
                .eval(&vars)
                .unwrap(),
            json!(true)
        );
    }

    /// Reads are metered by size: a loop of comparisons, searches or `in`
    /// over large values stops early, where each alone is cheap.
    #[test]
    fn comparisons_and_searches_over_large_values_are_bounded_in_steps() {
        let big = "y".repeat(1 << 20);
        let state = json!({
            "a": big, "b": big, "list": vec![big.clone(); 4], "map": {"k": big},
            "pattern": "y+z",
        });
        let mut vars = Vars::new();
        vars.set("state", &state);
        // Each would read 10^5 × 1 MiB (100 GB) or more.
        for source in [
            "lists.range(100000).all(i, state.a == state.b)",
            "lists.range(100000).all(i, !(state.a != state.b))",
            "lists.range(100000).all(i, state.a <= state.b)",
            "lists.range(100000).all(i, state.a.contains(state.b))",
            "lists.range(100000).all(i, state.a.startsWith(state.b))",
            "lists.range(100000).all(i, state.a.indexOf(state.b) == 0)",
            "lists.range(100000).all(i, !state.a.matches(state.pattern))",
            "lists.range(100000).all(i, state.a in state.list)",
            "lists.range(100000).all(i, size(state.a) > 0)",
            "lists.range(100000).all(i, state.a.charAt(0) == 'y')",
            "lists.range(100000).all(i, state.a.substring(1, 2) == 'y')",
            "lists.range(100000).all(i, state.a.lastIndexOf(state.b) == 0)",
        ] {
            let result = Expr::compile(source).unwrap().eval(&vars);
            assert!(result.is_err(), "{source}: {result:?}");
            let message = budget_error(result);
            assert!(message.contains("bytes they read"), "{source}: {message}");
        }
        // A map's `in` is one lookup, and small operands cost nothing: these
        // stay within the budget however often they run.
        for source in [
            "lists.range(100000).all(i, 'k' in state.map)",
            "lists.range(100000).all(i, state.pattern == 'y+z')",
            "lists.range(300000).all(i, i >= 0 && state.pattern.contains('y'))",
        ] {
            let value = Expr::compile(source).unwrap().eval(&vars);
            assert_eq!(value.unwrap(), json!(true), "{source}");
        }
        // `distinct` compares every pair: 20000 elements are 2 * 10^8 pairs.
        let message = budget_error(
            Expr::compile("lists.range(20000).map(i, [i, state.pattern]).distinct().size() > 0")
                .unwrap()
                .eval(&vars),
        );
        assert!(message.contains("elements"), "{message}");
        let small = Expr::compile(
            "size(lists.range(1000).map(i, [i % 10, state.pattern]).distinct()) == 10",
        );
        assert_eq!(small.unwrap().eval(&vars).unwrap(), json!(true));
        // Within the budget a read is what it was.
        let source = "state.a == state.b && state.a.contains('yy') && state.a in state.list";
        let value = Expr::compile(source).unwrap().eval(&vars);
        assert_eq!(value.unwrap(), json!(true));
    }

    /// `indexOf` and `lastIndexOf` are the budget's own linear searches:
    /// they answer what the `strings` extension answers, errors included.
    #[test]
    fn the_budget_searches_answer_as_the_strings_extension() {
        let strings = [
            "",
            "a",
            "abcabc",
            "héllo wörld ö",
            "ööö",
            "aaaa",
            "日本語日本",
        ];
        let needles = ["", "a", "bc", "ö", "öö", "l", "日本", "x", "abcabcabc"];
        let mut cases = Vec::new();
        for s in strings {
            for n in needles {
                for f in ["indexOf", "lastIndexOf"] {
                    cases.push(format!("'{s}'.{f}('{n}')"));
                    for offset in [-1, 0, 1, 2, 3, 5, 20] {
                        cases.push(format!("'{s}'.{f}('{n}', {offset})"));
                    }
                }
            }
        }
        cases.push("'abc'.indexOf(1)".into());
        cases.push("1.indexOf('a')".into());
        cases.push("'abc'.lastIndexOf('a', 'b')".into());
        let context = Context::with_env(ENV.clone());
        for source in cases {
            let program = Program::compile(&source).unwrap();
            let reference = Cel::resolve(program.expression(), &context)
                .map_err(|e| e.to_string())
                .and_then(|v| cel_to_json(&v));
            let ours = Expr::compile(&source).and_then(|e| e.eval(&Vars::new()));
            match (&reference, &ours) {
                (Ok(a), Ok(b)) => assert_eq!(a, b, "{source}"),
                (Err(_), Err(_)) => {}
                _ => panic!("{source}: the extension gives {reference:?}, ours {ours:?}"),
            }
        }
    }

    #[test]
    fn an_error_cel_absorbs_still_fails_the_evaluation() {
        // For i = 0 the right-hand side goes over the budget; CEL's `exists`
        // would let i = 1 (true) absorb that error.
        let expr = Expr::compile(
            "state.n == 1 && lists.range(2).exists(i, i == 1 || \
             (lists.range(600000).all(y, y >= 0) && lists.range(600000).all(y, y >= 0)))",
        )
        .unwrap();
        let state = json!({"n": 1});
        let mut vars = Vars::new();
        vars.set("state", &state);
        budget_error(expr.eval(&vars));
    }

    #[test]
    fn values_built_at_run_time_are_bounded() {
        let state = json!({"s": "y".repeat(100_000)});
        let mut vars = Vars::new();
        vars.set("state", &state);
        for source in [
            "lists.range(1000).map(x, state.s).join()",
            "lists.range(1000).map(x, state.s + 'z').size() > 0",
            "state.s.replace('y', state.s).size()",
            "lists.range(1000).map(x, [state.s, x]).size()",
        ] {
            let message = budget_error(Expr::compile(source).unwrap().eval(&vars));
            assert!(message.contains("64 MiB"), "{source}: {message}");
        }
        // Within the budget, the same operations give what CEL gives.
        for (source, value) in [
            (
                "lists.range(3).map(x, state.s.substring(0, 2)).join('-')",
                json!("yy-yy-yy"),
            ),
            ("'banana'.replace('a', 'o')", json!("bonono")),
            ("'banana'.replace('a', 'o', 2)", json!("bonona")),
            ("'banana'.replace('an', '')", json!("ba")),
            ("'ab'.replace('', '-')", json!("-a-b-")),
            ("['a', 'b'].join()", json!("ab")),
            ("[].join(',')", json!("")),
            ("lists.range(1000).filter(x, x % 2 == 0).size()", json!(500)),
            ("state.s.size() + size([state.s])", json!(100_001)),
        ] {
            assert_eq!(
                Expr::compile(source).unwrap().eval(&vars).unwrap(),
                value,
                "{source}"
            );
        }
        let error = Expr::compile("[1].join()")
            .unwrap()
            .eval(&vars)
            .unwrap_err();
        assert!(error.to_string().contains("join"), "{error}");
        let error = Expr::compile("state.s.replace(1, 2)")
            .unwrap()
            .eval(&vars)
            .unwrap_err();
        assert!(error.to_string().contains("replace"), "{error}");
    }

    #[test]
    fn the_form_of_an_expression_is_bounded_at_compile_time() {
        let long = format!("'{}'", "x".repeat(MAX_SOURCE_BYTES));
        let message = budget_error(Expr::compile(&long));
        assert!(message.contains("bytes long"), "{message}");
        assert!(
            message.len() < 400,
            "the expression is shortened: {message}"
        );

        let nested = "[1].all(a, [1].all(b, [1].all(c, [1].all(d, [1].all(e, true)))))";
        let message = budget_error(Expr::compile(nested));
        assert!(message.contains("nests comprehensions"), "{message}");
        Expr::compile("[1].all(a, [1].all(b, [1].all(c, [1].all(d, true))))").unwrap();

        let deep = format!("1{}", " + 1".repeat(200));
        match Expr::compile(&deep) {
            // The parser's own recursion limit may come first.
            Err(ExprError::Budget { message, .. }) => {
                assert!(message.contains("levels deep"), "{message}")
            }
            Err(ExprError::Syntax { .. }) => {}
            other => panic!("an expression 200 levels deep: {other:?}"),
        }
    }
}
