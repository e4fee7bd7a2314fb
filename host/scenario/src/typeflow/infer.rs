//! The type of a CEL expression, inferred from its syntax tree (macros
//! already expanded into comprehensions), and the type errors inside it:
//! a field a record does not have, an operator given values it does not
//! take. Anything this does not model (timestamps, unknown functions, ...)
//! is `dyn`, which is accepted everywhere.

use cel::common::ast::{EntryExpr, Expr as Ast, IdedExpr, LiteralValue, operators};

use super::ty::{Ty, with_article};
use crate::diagnostic::codes;

/// A type error inside an expression: its code and message, without the
/// expression's label (the caller adds it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Problem {
    pub code: &'static str,
    pub message: String,
}

/// The variables in scope, innermost last.
pub(crate) struct Scope {
    vars: Vec<(String, Ty)>,
}

impl Scope {
    pub fn new(vars: Vec<(String, Ty)>) -> Scope {
        Scope { vars }
    }

    fn get(&self, name: &str) -> Ty {
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map_or(Ty::Dyn, |(_, ty)| ty.clone())
    }
}

/// The type of `expr` with `scope` bound, and every type error in it.
pub(crate) fn infer(expr: &IdedExpr, scope: &mut Scope) -> (Ty, Vec<Problem>) {
    let mut cx = Infer {
        scope,
        problems: Vec::new(),
    };
    let ty = cx.expr(expr);
    (ty, cx.problems)
}

struct Infer<'s> {
    scope: &'s mut Scope,
    problems: Vec<Problem>,
}

impl Infer<'_> {
    fn problem(&mut self, code: &'static str, message: String) {
        let problem = Problem { code, message };
        if !self.problems.contains(&problem) {
            self.problems.push(problem);
        }
    }

    fn expr(&mut self, e: &IdedExpr) -> Ty {
        match &e.expr {
            Ast::Unspecified | Ast::Struct(_) => Ty::Dyn,
            Ast::Literal(literal) => match literal {
                LiteralValue::Boolean(_) => Ty::Bool,
                LiteralValue::Bytes(_) => Ty::Bytes,
                LiteralValue::Double(_) => Ty::Double,
                LiteralValue::Int(_) => Ty::Int,
                LiteralValue::Null => Ty::Null,
                LiteralValue::String(_) => Ty::String,
                LiteralValue::UInt(_) => Ty::Uint,
            },
            Ast::Ident(name) => self.scope.get(name),
            Ast::Select(select) => {
                let operand = self.expr(&select.operand);
                if select.test {
                    // `has(x.f)` is false for a missing field, not an error.
                    return Ty::Bool;
                }
                self.field(&operand, &select.operand, &select.field)
            }
            Ast::List(list) => {
                let mut item = Ty::Empty;
                for element in &list.elements {
                    let ty = self.expr(element);
                    item = item.join(ty);
                }
                Ty::List(Box::new(item))
            }
            Ast::Map(map) => {
                let mut fields = Vec::new();
                let mut all_keys_known = true;
                let mut values = Ty::Empty;
                for entry in &map.entries {
                    let (key, value) = match &entry.expr {
                        EntryExpr::MapEntry(entry) => (&entry.key, &entry.value),
                        EntryExpr::StructField(_) => return Ty::Dyn,
                    };
                    self.expr(key);
                    let ty = self.expr(value);
                    match &key.expr {
                        Ast::Literal(LiteralValue::String(k)) => {
                            fields.push((k.to_string(), ty.clone()))
                        }
                        _ => all_keys_known = false,
                    }
                    values = values.join(ty);
                }
                if all_keys_known {
                    Ty::Record {
                        fields,
                        closed: true,
                    }
                } else {
                    Ty::Map(Box::new(values))
                }
            }
            Ast::Call(call) => {
                let target = call.target.as_deref().map(|t| (self.expr(t), t));
                let args: Vec<Ty> = call.args.iter().map(|a| self.expr(a)).collect();
                self.call(&call.func_name, target, &args, &call.args)
            }
            Ast::Comprehension(c) => {
                let range = self.expr(&c.iter_range);
                let (first, second) = match range.some() {
                    Ty::List(item) => (Ty::Int, (**item).clone()),
                    Ty::Map(value) => (Ty::String, (**value).clone()),
                    Ty::Record { fields, .. } => (
                        Ty::String,
                        fields
                            .iter()
                            .map(|(_, t)| t.clone())
                            .fold(Ty::Empty, Ty::join),
                    ),
                    _ => (Ty::Dyn, Ty::Dyn),
                };
                let init = self.expr(&c.accu_init);
                let before = self.scope.vars.len();
                // One variable: a list's item or a map's key; two: index and
                // item, or key and value.
                match &c.iter_var2 {
                    None => {
                        let item = if matches!(range.some(), Ty::List(_)) {
                            second
                        } else {
                            first
                        };
                        self.bind(&c.iter_var, item);
                    }
                    Some(var2) => {
                        self.bind(&c.iter_var, first);
                        self.bind(var2, second);
                    }
                }
                self.bind(&c.accu_var, init.clone());
                self.expr(&c.loop_cond);
                let step = self.expr(&c.loop_step);
                // The accumulator after the loop: what it started as, or
                // what a step made of it (`[] + [f(x)]` for `map`).
                let accu = init.join(step);
                self.bind(&c.accu_var, accu);
                let result = self.expr(&c.result);
                self.scope.vars.truncate(before);
                result
            }
        }
    }

    fn bind(&mut self, name: &str, ty: Ty) {
        self.scope.vars.push((name.to_string(), ty));
    }

    /// `operand.field`.
    fn field(&mut self, ty: &Ty, operand: &IdedExpr, field: &str) -> Ty {
        match ty.some() {
            Ty::Dyn | Ty::Empty => Ty::Dyn,
            Ty::Map(value) => (**value).clone(),
            Ty::Record { fields, closed } => match fields.iter().find(|(k, _)| k == field) {
                Some((_, ty)) => ty.clone(),
                None if *closed => {
                    let keys: Vec<String> = fields.iter().map(|(k, _)| format!("`{k}`")).collect();
                    self.problem(
                        codes::UNKNOWN_FIELD,
                        format!(
                            "{} has no field `{field}` (its fields: {}); use one of those",
                            describe(operand),
                            if keys.is_empty() {
                                "none".to_string()
                            } else {
                                keys.join(", ")
                            }
                        ),
                    );
                    Ty::Dyn
                }
                None => Ty::Dyn,
            },
            Ty::Variant(cases) => match cases.iter().find(|(k, _)| k == field) {
                Some((_, ty)) => ty.clone(),
                None => {
                    let names: Vec<String> = cases.iter().map(|(k, _)| format!("`{k}`")).collect();
                    self.problem(
                        codes::UNKNOWN_FIELD,
                        format!(
                            "{} has no case `{field}` (its cases: {})",
                            describe(operand),
                            names.join(", ")
                        ),
                    );
                    Ty::Dyn
                }
            },
            other => {
                self.problem(
                    codes::UNKNOWN_FIELD,
                    format!(
                        "{} is {}, which has no fields, so `.{field}` fails",
                        describe(operand),
                        article(other)
                    ),
                );
                Ty::Dyn
            }
        }
    }

    fn call(
        &mut self,
        name: &str,
        target: Option<(Ty, &IdedExpr)>,
        args: &[Ty],
        arg_exprs: &[IdedExpr],
    ) -> Ty {
        let arg = |i: usize| args.get(i).cloned().unwrap_or(Ty::Dyn);
        match name {
            operators::CONDITIONAL => {
                self.needs_bool("the condition of `?:`", &arg(0), arg_exprs.first());
                arg(1).join(arg(2))
            }
            operators::LOGICAL_AND | operators::LOGICAL_OR => {
                let op = if name == operators::LOGICAL_AND {
                    "`&&`"
                } else {
                    "`||`"
                };
                for (ty, e) in args.iter().zip(arg_exprs) {
                    self.needs_bool(op, ty, Some(e));
                }
                Ty::Bool
            }
            operators::LOGICAL_NOT => {
                self.needs_bool("`!`", &arg(0), arg_exprs.first());
                Ty::Bool
            }
            operators::NOT_STRICTLY_FALSE
            | operators::EQUALS
            | operators::NOT_EQUALS
            | operators::IN => Ty::Bool,
            operators::LESS
            | operators::LESS_EQUALS
            | operators::GREATER
            | operators::GREATER_EQUALS => {
                let (l, r) = (arg(0), arg(1));
                if !l.is_unknown() && !r.is_unknown() && kind(&l) != kind(&r) {
                    self.problem(
                        codes::OPERATOR_TYPE,
                        format!(
                            "`{}` compares {} with {}, which fails; convert one side (`int()`, \
                         `double()`, `string()`)",
                            symbol(name),
                            article(l.some()),
                            article(r.some())
                        ),
                    );
                }
                Ty::Bool
            }
            operators::ADD
            | operators::SUBSTRACT
            | operators::MULTIPLY
            | operators::DIVIDE
            | operators::MODULO => self.arithmetic(name, arg(0), arg(1)),
            operators::NEGATE => {
                let ty = arg(0);
                if ty.is_unknown() || ty.is_numeric() {
                    ty.some().clone()
                } else {
                    self.problem(
                        codes::OPERATOR_TYPE,
                        format!("`-` negates numbers, not {}", article(ty.some())),
                    );
                    Ty::Dyn
                }
            }
            operators::INDEX => self.index(&arg(0), &arg(1), arg_exprs),
            "size" => {
                let of = target.as_ref().map_or(arg(0), |(t, _)| t.clone());
                match of.some() {
                    Ty::Bool | Ty::Int | Ty::Uint | Ty::Double | Ty::Number | Ty::Null => self
                        .problem(
                            codes::OPERATOR_TYPE,
                            format!(
                                "`size` takes a string, bytes, a list or a map, not {}",
                                article(of.some())
                            ),
                        ),
                    _ => {}
                }
                Ty::Int
            }
            "int" => Ty::Int,
            "uint" => Ty::Uint,
            "double" => Ty::Double,
            "string" => Ty::String,
            "bytes" => Ty::Bytes,
            "bool" => Ty::Bool,
            "contains" | "startsWith" | "endsWith" | "matches" => Ty::Bool,
            "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring" | "charAt"
            | "format" | "join" => Ty::String,
            "split" => Ty::List(Box::new(Ty::String)),
            "indexOf" | "lastIndexOf" => Ty::Int,
            "reverse" | "sort" | "distinct" | "slice" => match target {
                Some((ty, _)) if matches!(ty.some(), Ty::List(_) | Ty::String) => ty.some().clone(),
                _ => Ty::Dyn,
            },
            _ => Ty::Dyn,
        }
    }

    fn needs_bool(&mut self, what: &str, ty: &Ty, e: Option<&IdedExpr>) {
        if !ty.is_unknown() && *ty.some() != Ty::Bool {
            let operand = e.map_or_else(|| "the operand".to_string(), describe);
            self.problem(
                codes::OPERATOR_TYPE,
                format!(
                    "{what} needs a bool, but {operand} is {}; compare it (`== …`, `> 0`, \
                 `size(…) > 0`)",
                    article(ty.some())
                ),
            );
        }
    }

    fn arithmetic(&mut self, name: &str, l: Ty, r: Ty) -> Ty {
        if l.is_unknown() || r.is_unknown() {
            return Ty::Dyn;
        }
        let (a, b) = (l.some().clone(), r.some().clone());
        let add = name == operators::ADD;
        match (&a, &b) {
            (Ty::Int, Ty::Int) | (Ty::Uint, Ty::Uint) | (Ty::Double, Ty::Double) => a,
            (Ty::Number, t) | (t, Ty::Number) if t.is_numeric() => Ty::Number,
            (Ty::String, Ty::String) | (Ty::Bytes, Ty::Bytes) if add => a,
            (Ty::List(x), Ty::List(y)) if add => {
                Ty::List(Box::new((**x).clone().join((**y).clone())))
            }
            _ => {
                let hint = if a.is_numeric() && b.is_numeric() {
                    "CEL does not mix int, uint and double: convert one side with `int()` \
                     or `double()`"
                } else if add && (a == Ty::String || b == Ty::String) {
                    "convert the other side with `string()`"
                } else {
                    "give both sides the same type"
                };
                self.problem(
                    codes::OPERATOR_TYPE,
                    format!(
                        "`{}` on {} and {} fails; {hint}",
                        symbol(name),
                        article(&a),
                        article(&b)
                    ),
                );
                Ty::Dyn
            }
        }
    }

    /// `base[key]`.
    fn index(&mut self, base: &Ty, key: &Ty, exprs: &[IdedExpr]) -> Ty {
        match base.some() {
            Ty::List(item) => {
                if !key.is_unknown() && !key.is_numeric() {
                    self.problem(
                        codes::OPERATOR_TYPE,
                        format!(
                            "{} is a list: index it with an int, not {}",
                            exprs.first().map_or_else(|| "the value".into(), describe),
                            article(key.some())
                        ),
                    );
                }
                match **item {
                    Ty::Empty => Ty::Dyn,
                    ref other => other.clone(),
                }
            }
            Ty::Map(value) => (**value).clone(),
            Ty::Record { .. } | Ty::Variant(_) => match exprs.get(1).map(|e| &e.expr) {
                Some(Ast::Literal(LiteralValue::String(k))) => {
                    let operand = &exprs[0];
                    self.field(base, operand, k)
                }
                _ => Ty::Dyn,
            },
            Ty::Dyn | Ty::Empty => Ty::Dyn,
            other => {
                self.problem(
                    codes::OPERATOR_TYPE,
                    format!(
                        "{} is {}, which cannot be indexed",
                        exprs.first().map_or_else(|| "the value".into(), describe),
                        article(other)
                    ),
                );
                Ty::Dyn
            }
        }
    }
}

/// What can be compared with what: numbers among themselves, and otherwise
/// values of the same type.
fn kind(ty: &Ty) -> &'static str {
    match ty.some() {
        t if t.is_numeric() => "number",
        Ty::String => "string",
        Ty::Bytes => "bytes",
        Ty::Bool => "bool",
        Ty::Null => "null",
        Ty::List(_) => "list",
        _ => "map",
    }
}

fn symbol(op: &str) -> &str {
    op.trim_matches('_')
}

/// `an int`, `a string`, `a list(string)`.
pub(crate) fn article(ty: &Ty) -> String {
    with_article(&ty.to_string())
}

/// An operand as written, when it is a member path (`output.papers[0]`),
/// else "the value".
fn describe(e: &IdedExpr) -> String {
    fn path(e: &IdedExpr) -> Option<String> {
        match &e.expr {
            Ast::Ident(name) if !name.starts_with('@') => Some(name.clone()),
            Ast::Select(select) if !select.test => {
                Some(format!("{}.{}", path(&select.operand)?, select.field))
            }
            Ast::Call(call) if call.func_name == operators::INDEX && call.args.len() == 2 => {
                let key = match &call.args[1].expr {
                    Ast::Literal(LiteralValue::String(k)) => format!("'{}'", &**k),
                    Ast::Literal(LiteralValue::Int(i)) => i.inner().to_string(),
                    _ => path(&call.args[1])?,
                };
                Some(format!("{}[{key}]", path(&call.args[0])?))
            }
            _ => None,
        }
    }
    path(e).map_or_else(|| "the value".to_string(), |p| format!("`{p}`"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Expr;

    fn scope() -> Scope {
        Scope::new(vec![
            (
                "output".into(),
                Ty::Record {
                    fields: vec![
                        ("message".into(), Ty::String),
                        ("length".into(), Ty::Int),
                        (
                            "papers".into(),
                            Ty::List(Box::new(Ty::Record {
                                fields: vec![
                                    ("title".into(), Ty::String),
                                    ("score".into(), Ty::Double),
                                ],
                                closed: true,
                            })),
                        ),
                    ],
                    closed: true,
                },
            ),
            ("state".into(), Ty::Dyn),
        ])
    }

    fn ty_of(source: &str) -> (String, Vec<Problem>) {
        let expr = Expr::compile(source).unwrap();
        let (ty, problems) = infer(expr.ast(), &mut scope());
        (ty.to_string(), problems)
    }

    fn ty(source: &str) -> String {
        let (ty, problems) = ty_of(source);
        assert!(problems.is_empty(), "{source}: {problems:?}");
        ty
    }

    fn problem(source: &str) -> String {
        let (_, problems) = ty_of(source);
        assert_eq!(problems.len(), 1, "{source}: {problems:?}");
        problems[0].message.clone()
    }

    #[test]
    fn literals_operators_and_functions() {
        assert_eq!(ty("1"), "int");
        assert_eq!(ty("1u"), "uint");
        assert_eq!(ty("'a' + 'b'"), "string");
        assert_eq!(ty("1 + 2 * 3"), "int");
        assert_eq!(ty("1.5 / 2.0"), "double");
        assert_eq!(ty("1 < 2.5 && !false"), "bool");
        assert_eq!(ty("size('abc')"), "int");
        assert_eq!(ty("'a'.size()"), "int");
        assert_eq!(ty("string(3) + 'x'"), "string");
        assert_eq!(ty("'a,b'.split(',')"), "list(string)");
        assert_eq!(ty("true ? 1 : 2.0"), "number (int or double)");
        assert_eq!(ty("true ? 'a' : null"), "string or null");
        assert_eq!(ty("[1, 2]"), "list(int)");
        assert_eq!(ty("[]"), "list(dyn)");
        assert_eq!(ty("{'a': 1}"), "map { a: int }");
        assert_eq!(ty("'x' in ['x']"), "bool");
        assert_eq!(ty("math.greatest([1, 2])"), "dyn");
    }

    #[test]
    fn records_lists_and_macros() {
        assert_eq!(ty("output.length"), "int");
        assert_eq!(ty("output['message']"), "string");
        assert_eq!(ty("output.papers[0].score"), "double");
        assert_eq!(ty("output.papers.map(p, p.title)"), "list(string)");
        assert_eq!(
            ty("output.papers.filter(p, p.score > 0.5)"),
            "list(map { title: string, score: double })"
        );
        assert_eq!(ty("output.papers.all(p, p.title != '')"), "bool");
        assert_eq!(ty("output.papers.exists_one(p, p.score > 1.0)"), "bool");
        assert_eq!(ty("has(output.nosuch)"), "bool");
        assert_eq!(ty("state.anything.goes + 1"), "dyn");
    }

    #[test]
    fn type_errors_inside_expressions() {
        assert_eq!(
            problem("output.nosuch"),
            "`output` has no field `nosuch` (its fields: `message`, `length`, `papers`); use \
             one of those"
        );
        assert!(problem("output.papers.map(p, p.year)").contains("`p` has no field `year`"));
        assert!(
            problem("'n = ' + output.length").contains("convert the other side with `string()`")
        );
        assert!(problem("output.length * 1.5").contains("CEL does not mix int"));
        assert!(problem("output.message > 3").contains("compares a string with an int"));
        assert!(problem("output.length && true").contains("`&&` needs a bool"));
        assert!(problem("size(output.length)").contains("not an int"));
        assert!(problem("output.length.x").contains("which has no fields"));
        assert!(problem("output.papers['a']").contains("index it with an int"));
    }
}
