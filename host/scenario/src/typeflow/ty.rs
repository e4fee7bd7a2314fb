//! The static type of a CEL value as the checker sees it, where each comes
//! from (WIT types as the bridge maps them to JSON and so to CEL, `[state]`
//! and `[input]` declarations, JSON constants), and whether a value of one
//! type fits where another is expected.
//!
//! Every rule here errs towards acceptance: a type that is not known for
//! sure is [`Ty::Dyn`], and `dyn` fits everywhere. A mismatch is reported
//! only when the run would fail for every value the type allows.

use std::fmt;

use serde_json::{Value, json};
use wasmtime::component::Type;

use crate::FieldType;
use skillhost_runtime::bridge::snake_case;

/// A CEL value's static type.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Ty {
    /// Not known before the run: fits everywhere, every operation on it is
    /// accepted.
    Dyn,
    /// The item of an empty list literal: whatever it is joined with.
    Empty,
    Null,
    Bool,
    Int,
    Uint,
    Double,
    /// An `int` or a `double`: a `number` field holds either.
    Number,
    String,
    Bytes,
    List(Box<Ty>),
    /// A map with string keys whose values have this type.
    Map(Box<Ty>),
    /// A map whose keys are known: a WIT record, a map literal, a JSON object.
    /// `closed`: those keys are all it has, so any other is an error. The
    /// `input`, `state` and `config` variables are open: their undeclared
    /// fields are reported by the reference check, not here.
    Record {
        fields: Vec<(String, Ty)>,
        closed: bool,
    },
    /// A WIT `option<T>`: `null` or a `T`.
    Option(Box<Ty>),
    /// A WIT `variant` or `result` as the bridge writes it: a map with one of
    /// these keys, holding the case's payload (`null` for none).
    Variant(Vec<(String, Ty)>),
}

impl Ty {
    /// The type itself, or what an option holds: operations on an option
    /// are accepted when they fit its `some` case (a `none` fails at run
    /// time, which the checker cannot rule out).
    pub fn some(&self) -> &Ty {
        match self {
            Ty::Option(inner) => inner.some(),
            other => other,
        }
    }

    pub fn is_unknown(&self) -> bool {
        matches!(self.some(), Ty::Dyn | Ty::Empty)
    }

    pub fn is_numeric(&self) -> bool {
        matches!(self.some(), Ty::Int | Ty::Uint | Ty::Double | Ty::Number)
    }

    /// The items of a list, or `None` when this is known not to be a list.
    pub fn items(&self) -> Option<Ty> {
        match self.some() {
            Ty::List(item) => Some(match **item {
                Ty::Empty => Ty::Dyn,
                ref other => other.clone(),
            }),
            Ty::Dyn | Ty::Empty => Some(Ty::Dyn),
            _ => None,
        }
    }

    /// A type both `self` and `other` fit: the type of `c ? a : b`.
    pub fn join(self, other: Ty) -> Ty {
        match (self, other) {
            (a, b) if a == b => a,
            (Ty::Empty, t) | (t, Ty::Empty) => t,
            (Ty::Dyn, _) | (_, Ty::Dyn) => Ty::Dyn,
            (Ty::Null, Ty::Option(t)) | (Ty::Option(t), Ty::Null) => Ty::Option(t),
            (Ty::Null, t) | (t, Ty::Null) => Ty::Option(Box::new(t)),
            (Ty::Option(a), b) | (b, Ty::Option(a)) => Ty::Option(Box::new(a.join(b))),
            (a, b) if a.is_numeric() && b.is_numeric() => Ty::Number,
            (Ty::List(a), Ty::List(b)) => Ty::List(Box::new(a.join(*b))),
            (Ty::Map(a), Ty::Map(b)) => Ty::Map(Box::new(a.join(*b))),
            _ => Ty::Dyn,
        }
    }

    /// What a `[state]` or `[input]` field of type `ty` holds when read.
    /// `items`: the declared item type of an array.
    pub fn of_field(ty: FieldType, items: Option<FieldType>) -> Ty {
        match ty {
            FieldType::String => Ty::String,
            FieldType::Integer => Ty::Int,
            FieldType::Number => Ty::Number,
            FieldType::Boolean => Ty::Bool,
            FieldType::Array => Ty::List(Box::new(
                items.map_or(Ty::Dyn, |items| Ty::of_field(items, None)),
            )),
            FieldType::Object => Ty::Map(Box::new(Ty::Dyn)),
            FieldType::Any => Ty::Dyn,
        }
    }

    /// The type of a JSON value as CEL sees it (see `expr`'s conversions).
    pub fn of_json(value: &Value) -> Ty {
        match value {
            Value::Null => Ty::Null,
            Value::Bool(_) => Ty::Bool,
            Value::Number(n) if n.is_i64() => Ty::Int,
            Value::Number(n) if n.is_u64() => Ty::Uint,
            Value::Number(_) => Ty::Double,
            Value::String(_) => Ty::String,
            Value::Array(items) => Ty::List(Box::new(
                items.iter().map(Ty::of_json).fold(Ty::Empty, Ty::join),
            )),
            Value::Object(fields) => Ty::Record {
                fields: fields
                    .iter()
                    .map(|(k, v)| (k.clone(), Ty::of_json(v)))
                    .collect(),
                closed: true,
            },
        }
    }

    /// What a skill's output of WIT type `ty` is once the bridge wrote it as
    /// JSON and CEL read that (the mapping table in `runtime::bridge`).
    pub fn of_wit(ty: &Type) -> Ty {
        match ty {
            Type::Bool => Ty::Bool,
            // Integers come out as JSON integers, which CEL reads as `int`
            // (a `u64` above `i64::MAX` as `uint`, which no check relies on).
            Type::S8
            | Type::U8
            | Type::S16
            | Type::U16
            | Type::S32
            | Type::U32
            | Type::S64
            | Type::U64 => Ty::Int,
            Type::Float32 | Type::Float64 => Ty::Double,
            Type::Char | Type::String | Type::Enum(_) => Ty::String,
            // `list<u8>` is written as a base64 string.
            Type::List(list) if list.ty() == Type::U8 => Ty::String,
            Type::List(list) => Ty::List(Box::new(Ty::of_wit(&list.ty()))),
            Type::FixedLengthList(list) => Ty::List(Box::new(Ty::of_wit(&list.ty()))),
            Type::Record(record) => Ty::Record {
                fields: record
                    .fields()
                    .map(|f| (snake_case(f.name), Ty::of_wit(&f.ty)))
                    .collect(),
                closed: true,
            },
            Type::Tuple(tuple) => Ty::List(Box::new(
                tuple
                    .types()
                    .map(|t| Ty::of_wit(&t))
                    .fold(Ty::Empty, Ty::join),
            )),
            Type::Variant(variant) => Ty::Variant(
                variant
                    .cases()
                    .map(|c| {
                        (
                            c.name.to_string(),
                            c.ty.map_or(Ty::Null, |t| Ty::of_wit(&t)),
                        )
                    })
                    .collect(),
            ),
            Type::Result(result) => Ty::Variant(vec![
                (
                    "ok".into(),
                    result.ok().map_or(Ty::Null, |t| Ty::of_wit(&t)),
                ),
                (
                    "err".into(),
                    result.err().map_or(Ty::Null, |t| Ty::of_wit(&t)),
                ),
            ]),
            // `option<option<T>>` writes `some` as a one-item list.
            Type::Option(option) => match option.ty() {
                Type::Option(_) => Ty::Option(Box::new(Ty::List(Box::new(Ty::Dyn)))),
                inner => Ty::Option(Box::new(Ty::of_wit(&inner))),
            },
            Type::Flags(_) => Ty::List(Box::new(Ty::String)),
            Type::Map(map) if map.key() == Type::String => {
                Ty::Map(Box::new(Ty::of_wit(&map.value())))
            }
            Type::Map(_) => Ty::List(Box::new(Ty::List(Box::new(Ty::Dyn)))),
            _ => Ty::Dyn,
        }
    }

    /// The JSON Schema (draft 2020-12) of the JSON a value of this type
    /// becomes. As loose as the type: `dyn` is `{}` (anything), a record's
    /// fields are described but none is required (an open record may lack
    /// them, and a closed one may hold `null` where the type was unsure).
    pub fn json_schema(&self) -> Value {
        match self {
            Ty::Dyn | Ty::Empty => json!({}),
            Ty::Null => json!({"type": "null"}),
            Ty::Bool => json!({"type": "boolean"}),
            Ty::Int | Ty::Uint => json!({"type": "integer"}),
            Ty::Double | Ty::Number => json!({"type": "number"}),
            Ty::String => json!({"type": "string"}),
            // CEL bytes reach JSON as whatever the conversion makes of them.
            Ty::Bytes => json!({}),
            Ty::List(item) => json!({"type": "array", "items": item.json_schema()}),
            Ty::Map(value) => {
                json!({"type": "object", "additionalProperties": value.json_schema()})
            }
            Ty::Record { fields, closed } => {
                let properties: serde_json::Map<String, Value> = fields
                    .iter()
                    .map(|(name, ty)| (name.clone(), ty.json_schema()))
                    .collect();
                let mut schema = json!({"type": "object", "properties": properties});
                if *closed {
                    schema["additionalProperties"] = json!(false);
                }
                schema
            }
            Ty::Option(inner) => json!({"anyOf": [inner.json_schema(), {"type": "null"}]}),
            Ty::Variant(cases) => json!({
                "oneOf": cases
                    .iter()
                    .map(|(case, ty)| json!({
                        "type": "object",
                        "properties": { case.as_str(): ty.json_schema() },
                        "required": [case],
                        "additionalProperties": false,
                    }))
                    .collect::<Vec<_>>()
            }),
        }
    }

    /// Whether a value of this type can be written into a state field of
    /// type `field` by `replace` (the engine's check on every write).
    pub fn fits_field(&self, field: FieldType) -> bool {
        if self.is_unknown() {
            return true;
        }
        match (self.some(), field) {
            (_, FieldType::Any) => true,
            (Ty::String | Ty::Bytes, FieldType::String) => true,
            (Ty::Int | Ty::Uint | Ty::Number, FieldType::Integer) => true,
            (t, FieldType::Number) => t.is_numeric(),
            (Ty::Bool, FieldType::Boolean) => true,
            (Ty::List(_), FieldType::Array) => true,
            (Ty::Map(_) | Ty::Record { .. } | Ty::Variant(_), FieldType::Object) => true,
            _ => false,
        }
    }

    /// Whether a value of this type is a map, as `merge` needs.
    pub fn is_map(&self) -> bool {
        self.is_unknown() || matches!(self.some(), Ty::Map(_) | Ty::Record { .. } | Ty::Variant(_))
    }
}

/// Where a value does not fit a WIT type, and why.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Misfit {
    /// JSON path inside the value, `$` for the value itself.
    pub path: String,
    /// What the value is there, as CEL names it.
    pub found: String,
    /// What the skill takes there, as WIT names it.
    pub expected: String,
    /// What kind of value would fit, for the hint.
    pub wanted: Wanted,
}

/// The kind of value a WIT type takes, for the hint of a misfit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wanted {
    Integer,
    Number,
    String,
    Bool,
    List,
    Map,
    /// A record given a map that lacks or adds keys.
    Fields,
}

/// Whether a value of type `ty` can be given where a skill takes WIT type
/// `target`: `Ok` unless every value of `ty` would be refused by the bridge.
pub(crate) fn fits_wit(ty: &Ty, target: &Type) -> Result<(), Misfit> {
    fits(ty, target, "$")
}

fn fits(ty: &Ty, target: &Type, path: &str) -> Result<(), Misfit> {
    let misfit = |wanted| {
        Err(Misfit {
            path: path.to_string(),
            found: ty.to_string(),
            expected: wit_name(target),
            wanted,
        })
    };
    if ty.is_unknown() {
        return Ok(());
    }
    match (ty, target) {
        (Ty::Null, Type::Option(_)) => Ok(()),
        // `option<option<T>>` takes `[x]` for some: not worth following.
        (_, Type::Option(option)) if matches!(option.ty(), Type::Option(_)) => Ok(()),
        (Ty::Option(inner), Type::Option(option)) => fits(inner, &option.ty(), path),
        (_, Type::Option(option)) => fits(ty, &option.ty(), path),
        // An option given where a value is needed: its `none` fails at run
        // time, its `some` may fit.
        (Ty::Option(inner), _) => fits(inner, target, path),
        (Ty::Bool, Type::Bool) => Ok(()),
        (_, Type::Bool) => misfit(Wanted::Bool),
        (Ty::Int | Ty::Uint | Ty::Number, t) if is_integer(t) => Ok(()),
        (_, t) if is_integer(t) => misfit(Wanted::Integer),
        (t, Type::Float32 | Type::Float64) if t.is_numeric() => Ok(()),
        (_, Type::Float32 | Type::Float64) => misfit(Wanted::Number),
        (Ty::String | Ty::Bytes, Type::Char | Type::String | Type::Enum(_)) => Ok(()),
        (_, Type::Char | Type::String | Type::Enum(_)) => misfit(Wanted::String),
        // `list<u8>`: base64 text, or a list of bytes.
        (Ty::String | Ty::Bytes, Type::List(list)) if list.ty() == Type::U8 => Ok(()),
        (Ty::List(item), Type::List(list)) => fits(item, &list.ty(), &format!("{path}[*]")),
        (Ty::List(item), Type::FixedLengthList(list)) => {
            fits(item, &list.ty(), &format!("{path}[*]"))
        }
        (Ty::List(_), Type::Tuple(_) | Type::Flags(_)) => Ok(()),
        (Ty::List(_), Type::Map(map)) if map.key() != Type::String => Ok(()),
        (_, Type::List(_) | Type::FixedLengthList(_) | Type::Tuple(_) | Type::Flags(_)) => {
            misfit(Wanted::List)
        }
        (Ty::Record { fields, closed }, Type::Record(record)) => {
            for (key, value) in fields {
                match record.fields().find(|f| snake_case(f.name) == *key) {
                    Some(field) => fits(value, &field.ty, &format!("{path}.{key}"))?,
                    None => return misfit(Wanted::Fields),
                }
            }
            let lacks_required = record.fields().any(|f| {
                !matches!(f.ty, Type::Option(_))
                    && !fields.iter().any(|(key, _)| *key == snake_case(f.name))
            });
            if *closed && lacks_required {
                return misfit(Wanted::Fields);
            }
            Ok(())
        }
        (Ty::Map(_), Type::Record(_)) => Ok(()),
        (Ty::Map(value), Type::Map(map)) if map.key() == Type::String => {
            fits(value, &map.value(), &format!("{path}[*]"))
        }
        (Ty::Record { fields, .. }, Type::Map(map)) if map.key() == Type::String => {
            for (key, value) in fields {
                fits(value, &map.value(), &format!("{path}.{key}"))?;
            }
            Ok(())
        }
        // A variant or result: a one-key map, or the bare name of a case
        // without payload. Which case is given is for the bridge to say.
        (Ty::Map(_) | Ty::Record { .. } | Ty::Variant(_), Type::Variant(_) | Type::Result(_)) => {
            Ok(())
        }
        (Ty::String, Type::Variant(_)) => Ok(()),
        (_, Type::Record(_) | Type::Map(_) | Type::Variant(_) | Type::Result(_)) => {
            misfit(Wanted::Map)
        }
        // Resources and the like never load: nothing to say here.
        _ => Ok(()),
    }
}

/// The kind of value a WIT type takes.
pub(crate) fn wanted(target: &Type) -> Wanted {
    match target {
        Type::Bool => Wanted::Bool,
        t if is_integer(t) => Wanted::Integer,
        Type::Float32 | Type::Float64 => Wanted::Number,
        Type::Char | Type::String | Type::Enum(_) => Wanted::String,
        Type::List(_) | Type::FixedLengthList(_) | Type::Tuple(_) | Type::Flags(_) => Wanted::List,
        Type::Option(option) => wanted(&option.ty()),
        _ => Wanted::Map,
    }
}

/// `an int`, `a string`, `null`: a type's name in a sentence.
pub(crate) fn with_article(name: &str) -> String {
    if name.starts_with("a ") || name.starts_with("null") {
        return name.to_string();
    }
    let vowel = name.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {name}", if vowel { "an" } else { "a" })
}

fn is_integer(ty: &Type) -> bool {
    matches!(
        ty,
        Type::S8 | Type::U8 | Type::S16 | Type::U16 | Type::S32 | Type::U32 | Type::S64 | Type::U64
    )
}

/// A WIT type as WIT spells it, records and variants with their first
/// fields or cases.
pub(crate) fn wit_name(ty: &Type) -> String {
    fn names(kind: &str, names: impl Iterator<Item = String>) -> String {
        let all: Vec<String> = names.collect();
        let shown: Vec<&str> = all.iter().take(4).map(String::as_str).collect();
        let more = if all.len() > shown.len() { ", …" } else { "" };
        format!("{kind} {{ {}{more} }}", shown.join(", "))
    }
    match ty {
        Type::Bool => "bool".into(),
        Type::S8 => "s8".into(),
        Type::U8 => "u8".into(),
        Type::S16 => "s16".into(),
        Type::U16 => "u16".into(),
        Type::S32 => "s32".into(),
        Type::U32 => "u32".into(),
        Type::S64 => "s64".into(),
        Type::U64 => "u64".into(),
        Type::Float32 => "f32".into(),
        Type::Float64 => "f64".into(),
        Type::Char => "char".into(),
        Type::String => "string".into(),
        Type::List(list) => format!("list<{}>", wit_name(&list.ty())),
        Type::FixedLengthList(list) => format!("list<{}, {}>", wit_name(&list.ty()), list.len()),
        Type::Map(map) => format!("map<{}, {}>", wit_name(&map.key()), wit_name(&map.value())),
        Type::Option(option) => format!("option<{}>", wit_name(&option.ty())),
        Type::Result(result) => format!(
            "result<{}, {}>",
            result.ok().map_or("_".into(), |t| wit_name(&t)),
            result.err().map_or("_".into(), |t| wit_name(&t))
        ),
        Type::Tuple(tuple) => format!(
            "tuple<{}>",
            tuple
                .types()
                .map(|t| wit_name(&t))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Type::Record(record) => names(
            "record",
            record
                .fields()
                .map(|f| format!("{}: {}", snake_case(f.name), wit_name(&f.ty))),
        ),
        Type::Variant(variant) => names("variant", variant.cases().map(|c| c.name.to_string())),
        Type::Enum(e) => names("enum", e.names().map(str::to_string)),
        Type::Flags(f) => names("flags", f.names().map(str::to_string)),
        _ => "a resource".into(),
    }
}

/// CEL's names: `int`, `list(string)`, `map(string, dyn)`; a map with known
/// keys shows its first keys.
impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ty::Dyn | Ty::Empty => f.write_str("dyn"),
            Ty::Null => f.write_str("null"),
            Ty::Bool => f.write_str("bool"),
            Ty::Int => f.write_str("int"),
            Ty::Uint => f.write_str("uint"),
            Ty::Double => f.write_str("double"),
            Ty::Number => f.write_str("number (int or double)"),
            Ty::String => f.write_str("string"),
            Ty::Bytes => f.write_str("bytes"),
            Ty::List(item) => write!(f, "list({item})"),
            Ty::Map(value) => write!(f, "map(string, {value})"),
            Ty::Record { fields, .. } => {
                f.write_str("map {")?;
                for (i, (key, ty)) in fields.iter().take(4).enumerate() {
                    let sep = if i == 0 { " " } else { ", " };
                    write!(f, "{sep}{key}: {ty}")?;
                }
                if fields.len() > 4 {
                    f.write_str(", …")?;
                }
                f.write_str(" }")
            }
            Ty::Option(inner) => write!(f, "{inner} or null"),
            Ty::Variant(cases) => {
                let names: Vec<&str> = cases.iter().map(|(n, _)| n.as_str()).collect();
                write!(f, "a variant ({})", names.join(" | "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn joins_keep_what_both_sides_share() {
        assert_eq!(Ty::Int.join(Ty::Int), Ty::Int);
        assert_eq!(Ty::Int.join(Ty::Double), Ty::Number);
        assert_eq!(Ty::Empty.join(Ty::String), Ty::String);
        assert_eq!(Ty::Null.join(Ty::String), Ty::Option(Box::new(Ty::String)));
        assert_eq!(Ty::String.join(Ty::Int), Ty::Dyn);
        assert_eq!(
            Ty::List(Box::new(Ty::Empty)).join(Ty::List(Box::new(Ty::Bool))),
            Ty::List(Box::new(Ty::Bool))
        );
    }

    #[test]
    fn json_constants_have_cel_types() {
        assert_eq!(Ty::of_json(&json!(3)), Ty::Int);
        assert_eq!(Ty::of_json(&json!(u64::MAX)), Ty::Uint);
        assert_eq!(Ty::of_json(&json!(0.5)), Ty::Double);
        assert_eq!(
            Ty::of_json(&json!([1, 2.5])),
            Ty::List(Box::new(Ty::Number))
        );
        assert_eq!(
            Ty::of_json(&json!({"a": "x"})).to_string(),
            "map { a: string }"
        );
    }

    #[test]
    fn writes_fit_declared_fields() {
        assert!(Ty::Int.fits_field(FieldType::Integer));
        assert!(Ty::Int.fits_field(FieldType::Number));
        assert!(!Ty::Double.fits_field(FieldType::Integer));
        assert!(!Ty::Int.fits_field(FieldType::String));
        assert!(!Ty::Null.fits_field(FieldType::String));
        assert!(Ty::Null.fits_field(FieldType::Any));
        assert!(Ty::Dyn.fits_field(FieldType::Boolean));
        assert!(Ty::Option(Box::new(Ty::String)).fits_field(FieldType::String));
        assert!(!Ty::List(Box::new(Ty::Int)).fits_field(FieldType::Object));
        assert!(Ty::Variant(vec![]).fits_field(FieldType::Object));
    }
}
