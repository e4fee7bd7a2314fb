//! The JSON <-> component value bridge: the one documented mapping between the
//! JSON a scenario's state holds and the WIT-typed values a skill's `run`
//! takes and returns, driven by the component's own types (wasmtime's dynamic
//! [`Type`]/[`Val`] API).
//!
//! This module owns the mapping and its error messages, and nothing else: it
//! does not instantiate or call components, and it does not apply a scenario's
//! extra constraints (that is JSON Schema's job, see `checks`). The JSON
//! Schema that `runtime::schema` derives from WIT must accept exactly what
//! [`json_to_val`] accepts; a change to one rule is a change to both.
//!
//! # The mapping
//!
//! | WIT | JSON |
//! | --- | --- |
//! | `bool` | `true` / `false` |
//! | `s8`..`s64`, `u8`..`u64` | an integer in the type's range (`3.0` counts as an integer, `3.5` does not); 64-bit values are exact; beyond 2^53 only plain integer literals are accepted, since serde_json has already rounded the others |
//! | `f32`, `f64` | a number; on input an `f32` must round to a finite `f32` (magnitude below [`F32_LIMIT`]); written back as the shortest decimal that reads back the same; NaN and infinities cannot be written out |
//! | `char` | a string of exactly one Unicode scalar value |
//! | `string` | a string |
//! | `list<u8>` | a base64 string (standard alphabet, padded); on input an array of integers `0..=255` is accepted too |
//! | `list<T>` | an array |
//! | `list<T, N>` | an array of exactly `N` items |
//! | `record` | an object whose keys are the field names in snake_case (`published-date` -> `published_date`); unknown keys are refused; fields of type `option<T>` may be left out on input (= none) and are always written (`null` for none) |
//! | `option<T>` | `null` for none, the value itself for some |
//! | `option<option<T>>` | `null` for the outer none, `[x]` (a one-element array) for some(x), where `x` uses the inner option's rule; applies whenever an option's payload is itself an option, since `null` alone could not tell the levels apart |
//! | `result<T, E>` | `{"ok": v}` or `{"err": v}`; `v` is `null` for a side without a payload |
//! | `variant` | `{"case-name": payload}`, the case name exactly as in WIT; a case without a payload is written `{"case-name": null}` and read from that or from the bare string `"case-name"` |
//! | `enum` | the case name as a string |
//! | `flags` | an array of the set flags' names, no duplicates; written in declaration order |
//! | `tuple<A, B, ..>` | an array of exactly as many items |
//! | `map<string, V>` | an object |
//! | `map<K, V>`, other keys | an array of `[key, value]` pairs |
//!
//! Resources (`own`/`borrow`), futures, streams and `error-context` are not
//! data and are refused ([`check_bridgeable`]).
//!
//! Errors carry the JSON path of the offending value: `$` is the whole value,
//! `$.papers[3].title` a record field inside a list item, `$.outcome.ok` and
//! `$.shape.circle` the payloads of a result and of a variant case.

use std::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Map, Number, Value as Json};
use wasmtime::component::{Type, Val};

/// The smallest magnitude that rounds to an infinite f32 (2^128 - 2^103,
/// halfway between `f32::MAX` and 2^128): f32 inputs must stay below it.
pub const F32_LIMIT: f64 = 340_282_356_779_733_661_637_539_395_458_142_568_448.0;

/// A JSON value that does not fit a WIT type, or a component value that
/// cannot be written as JSON, with the JSON path where it happened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {message}")]
pub struct BridgeError {
    /// JSON path of the offending value, e.g. `$.papers[3].title`.
    pub path: String,
    /// What is wrong there, e.g. `expected a string, found number 3`.
    pub message: String,
}

/// WIT kebab-case name -> the snake_case JSON key used for record fields.
pub fn snake_case(kebab: &str) -> String {
    kebab.replace('-', "_")
}

/// Converts `json` into a value of type `ty`, following the module's mapping.
pub fn json_to_val(ty: &Type, json: &Json) -> Result<Val, BridgeError> {
    to_val(ty, json, &Path::Root)
}

/// Converts `val`, a value of type `ty`, into JSON, following the module's
/// mapping. Fails on NaN or infinite floats (JSON has no spelling for them),
/// on values that are not plain data, and on a value that does not match `ty`.
pub fn val_to_json(ty: &Type, val: &Val) -> Result<Json, BridgeError> {
    to_json(ty, val, &Path::Root)
}

/// Checks that every value of `ty` can cross the bridge: no resource handles,
/// futures, streams or error contexts anywhere inside it. The error names the
/// first offending position (`[*]` stands for any list item or map entry).
pub fn check_bridgeable(ty: &Type) -> Result<(), BridgeError> {
    check(ty, &Path::Root)
}

// ---------------------------------------------------------------------------
// Paths

/// A JSON path built on the stack while descending, rendered only on error.
enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
    /// Any item of a list or map (used by `check_bridgeable`).
    Any(&'a Path<'a>),
}

impl Path<'_> {
    fn key<'a>(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    fn index(&self, index: usize) -> Path<'_> {
        Path::Index(self, index)
    }

    fn error(&self, message: impl Into<String>) -> BridgeError {
        BridgeError {
            path: self.to_string(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => f.write_str("$"),
            Path::Key(parent, key) => {
                write!(f, "{parent}")?;
                let plain = !key.is_empty()
                    && key
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
                if plain {
                    write!(f, ".{key}")
                } else {
                    // Keys that came from user JSON may hold anything.
                    write!(f, "[{}]", Json::String((*key).to_owned()))
                }
            }
            Path::Index(parent, index) => write!(f, "{parent}[{index}]"),
            Path::Any(parent) => write!(f, "{parent}[*]"),
        }
    }
}

/// A short description of a JSON value for "found ..." in messages.
fn found(json: &Json) -> String {
    match json {
        Json::Null => "null".to_owned(),
        Json::Bool(b) => format!("boolean {b}"),
        Json::Number(n) => format!("number {n}"),
        Json::String(s) => {
            const MAX: usize = 40;
            if s.chars().count() > MAX {
                let head: String = s.chars().take(MAX).collect();
                format!("string {}…", Json::String(head))
            } else {
                format!("string {}", Json::String(s.clone()))
            }
        }
        Json::Array(items) => format!("an array of {} items", items.len()),
        Json::Object(_) => "an object".to_owned(),
    }
}

fn expected(path: &Path<'_>, what: &str, json: &Json) -> BridgeError {
    path.error(format!("expected {what}, found {}", found(json)))
}

/// What kind of type this is, for messages.
fn type_desc(ty: &Type) -> &'static str {
    match ty {
        Type::Bool => "bool",
        Type::S8 => "s8",
        Type::U8 => "u8",
        Type::S16 => "s16",
        Type::U16 => "u16",
        Type::S32 => "s32",
        Type::U32 => "u32",
        Type::S64 => "s64",
        Type::U64 => "u64",
        Type::Float32 => "f32",
        Type::Float64 => "f64",
        Type::Char => "char",
        Type::String => "string",
        Type::List(_) => "list",
        Type::Map(_) => "map",
        Type::Record(_) => "record",
        Type::Tuple(_) => "tuple",
        Type::Variant(_) => "variant",
        Type::Enum(_) => "enum",
        Type::Option(_) => "option",
        Type::Result(_) => "result",
        Type::Flags(_) => "flags",
        Type::Own(_) => "own resource handle",
        Type::Borrow(_) => "borrowed resource handle",
        Type::Future(_) => "future",
        Type::Stream(_) => "stream",
        Type::ErrorContext => "error-context",
        Type::FixedLengthList(_) => "fixed-length list",
    }
}

fn not_data(ty: &Type, path: &Path<'_>) -> BridgeError {
    path.error(format!(
        "a {} cannot be converted to or from JSON; skill I/O must be plain data \
         (records, lists, strings, numbers...), not resources, futures, streams \
         or error contexts",
        type_desc(ty)
    ))
}

// ---------------------------------------------------------------------------
// JSON -> Val

fn to_val(ty: &Type, json: &Json, path: &Path<'_>) -> Result<Val, BridgeError> {
    Ok(match ty {
        Type::Bool => match json {
            Json::Bool(b) => Val::Bool(*b),
            _ => return Err(expected(path, "a boolean", json)),
        },
        Type::S8 => Val::S8(int(json, path, "s8", i8::MIN.into(), i8::MAX.into())? as i8),
        Type::U8 => Val::U8(int(json, path, "u8", 0, u8::MAX.into())? as u8),
        Type::S16 => Val::S16(int(json, path, "s16", i16::MIN.into(), i16::MAX.into())? as i16),
        Type::U16 => Val::U16(int(json, path, "u16", 0, u16::MAX.into())? as u16),
        Type::S32 => Val::S32(int(json, path, "s32", i32::MIN.into(), i32::MAX.into())? as i32),
        Type::U32 => Val::U32(int(json, path, "u32", 0, u32::MAX.into())? as u32),
        Type::S64 => Val::S64(int(json, path, "s64", i64::MIN.into(), i64::MAX.into())? as i64),
        Type::U64 => Val::U64(int(json, path, "u64", 0, u64::MAX.into())? as u64),
        Type::Float32 => {
            let x = number(json, path)?;
            // Rounding to the nearest f32 must stay finite; f32::MAX itself is
            // written `3.4028235e38`, a little above it, so the bound is the
            // rounding midpoint, not f32::MAX.
            if x.abs() >= F32_LIMIT {
                return Err(path.error(format!(
                    "{x} is out of range for f32 (magnitude at most {:e})",
                    f32::MAX
                )));
            }
            Val::Float32(x as f32)
        }
        Type::Float64 => Val::Float64(number(json, path)?),
        Type::Char => {
            let s = json
                .as_str()
                .ok_or_else(|| expected(path, "a one-character string", json))?;
            let mut chars = s.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Val::Char(c),
                _ => {
                    return Err(path.error(format!(
                        "expected a string of exactly one character, found {} ({} characters)",
                        found(json),
                        s.chars().count()
                    )));
                }
            }
        }
        Type::String => match json {
            Json::String(s) => Val::String(s.clone()),
            _ => return Err(expected(path, "a string", json)),
        },
        Type::List(list) => {
            let elem = list.ty();
            if elem == Type::U8 {
                bytes_to_val(json, path)?
            } else {
                let items = json
                    .as_array()
                    .ok_or_else(|| expected(path, "an array", json))?;
                Val::List(items_to_vals(&elem, items, path)?)
            }
        }
        Type::FixedLengthList(list) => {
            let n = list.len() as usize;
            let items = json
                .as_array()
                .ok_or_else(|| expected(path, &format!("an array of {n} items"), json))?;
            if items.len() != n {
                return Err(path.error(format!(
                    "expected an array of exactly {n} items, found {}",
                    items.len()
                )));
            }
            Val::FixedLengthList(items_to_vals(&list.ty(), items, path)?)
        }
        Type::Map(map) => {
            let (key_ty, value_ty) = (map.key(), map.value());
            if key_ty == Type::String {
                let object = json
                    .as_object()
                    .ok_or_else(|| expected(path, "an object", json))?;
                let mut entries = Vec::with_capacity(object.len());
                for (key, value) in object {
                    let value = to_val(&value_ty, value, &path.key(key))?;
                    entries.push((Val::String(key.clone()), value));
                }
                Val::Map(entries)
            } else {
                let items = json
                    .as_array()
                    .ok_or_else(|| expected(path, "an array of [key, value] pairs", json))?;
                let mut entries = Vec::with_capacity(items.len());
                for (i, item) in items.iter().enumerate() {
                    let item_path = path.index(i);
                    match item.as_array().map(Vec::as_slice) {
                        Some([key, value]) => entries.push((
                            to_val(&key_ty, key, &item_path.index(0))?,
                            to_val(&value_ty, value, &item_path.index(1))?,
                        )),
                        _ => return Err(expected(&item_path, "a [key, value] pair", item)),
                    }
                }
                Val::Map(entries)
            }
        }
        Type::Record(record) => {
            let object = json
                .as_object()
                .ok_or_else(|| expected(path, "an object", json))?;
            let fields: Vec<_> = record
                .fields()
                .map(|f| (snake_case(f.name), f.name, f.ty))
                .collect();
            // Unknown keys first: a kebab-case key would otherwise surface as
            // a less helpful "missing required field".
            for key in object.keys() {
                if fields.iter().any(|(k, _, _)| k == key) {
                    continue;
                }
                let snake = snake_case(key);
                let message = if key.contains('-') && fields.iter().any(|(k, _, _)| *k == snake) {
                    format!(
                        "unknown field; did you mean `{snake}`? (record fields are \
                         snake_case in JSON)"
                    )
                } else {
                    let known: Vec<&str> = fields.iter().map(|(k, _, _)| k.as_str()).collect();
                    format!("unknown field; expected one of: {}", known.join(", "))
                };
                return Err(path.key(key).error(message));
            }
            let mut vals = Vec::with_capacity(fields.len());
            for (key, name, ty) in &fields {
                let field_path = path.key(key);
                let val = match object.get(key) {
                    Some(value) => to_val(ty, value, &field_path)?,
                    None if matches!(ty, Type::Option(_)) => Val::Option(None),
                    None => return Err(field_path.error("missing required field")),
                };
                vals.push(((*name).to_owned(), val));
            }
            Val::Record(vals)
        }
        Type::Tuple(tuple) => {
            let n = tuple.types().len();
            let items = json
                .as_array()
                .ok_or_else(|| expected(path, &format!("an array of {n} items"), json))?;
            if items.len() != n {
                return Err(path.error(format!(
                    "expected an array of exactly {n} items (a tuple), found {}",
                    items.len()
                )));
            }
            let vals = tuple
                .types()
                .zip(items)
                .enumerate()
                .map(|(i, (ty, item))| to_val(&ty, item, &path.index(i)))
                .collect::<Result<_, _>>()?;
            Val::Tuple(vals)
        }
        Type::Variant(variant) => {
            let cases: Vec<_> = variant.cases().map(|c| (c.name, c.ty)).collect();
            let names = || cases.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ");
            let (name, payload) = match json {
                Json::String(s) => (s.as_str(), None),
                Json::Object(object) if object.len() == 1 => {
                    let (k, v) = object.iter().next().expect("one entry");
                    (k.as_str(), Some(v))
                }
                _ => {
                    return Err(expected(
                        path,
                        &format!(
                            "an object with exactly one key, the variant case \
                             (one of: {}), or a case name without payload as a string",
                            names()
                        ),
                        json,
                    ));
                }
            };
            let Some((case_name, case_ty)) = cases.iter().find(|(n, _)| *n == name) else {
                return Err(path.error(format!(
                    "unknown variant case `{name}`; expected one of: {}",
                    names()
                )));
            };
            let case_path = path.key(name);
            let payload = match (case_ty, payload) {
                (Some(ty), Some(value)) => Some(Box::new(to_val(ty, value, &case_path)?)),
                (Some(_), None) => {
                    return Err(path.error(format!(
                        "variant case `{name}` has a payload; write it as {{\"{name}\": ...}}"
                    )));
                }
                (None, None | Some(Json::Null)) => None,
                (None, Some(other)) => {
                    return Err(expected(
                        &case_path,
                        "null (this case has no payload)",
                        other,
                    ));
                }
            };
            Val::Variant((*case_name).to_owned(), payload)
        }
        Type::Enum(enum_) => {
            let s = json
                .as_str()
                .ok_or_else(|| expected(path, "a string (an enum case)", json))?;
            if !enum_.names().any(|n| n == s) {
                let names: Vec<&str> = enum_.names().collect();
                return Err(path.error(format!(
                    "unknown enum case `{s}`; expected one of: {}",
                    names.join(", ")
                )));
            }
            Val::Enum(s.to_owned())
        }
        Type::Flags(flags) => {
            let items = json
                .as_array()
                .ok_or_else(|| expected(path, "an array of flag names", json))?;
            let names: Vec<&str> = flags.names().collect();
            let mut set = vec![false; names.len()];
            for (i, item) in items.iter().enumerate() {
                let item_path = path.index(i);
                let s = item
                    .as_str()
                    .ok_or_else(|| expected(&item_path, "a string (a flag name)", item))?;
                let Some(bit) = names.iter().position(|n| *n == s) else {
                    return Err(item_path.error(format!(
                        "unknown flag `{s}`; expected one of: {}",
                        names.join(", ")
                    )));
                };
                if std::mem::replace(&mut set[bit], true) {
                    return Err(item_path.error(format!("duplicate flag `{s}`")));
                }
            }
            // Declaration order, so equal sets give equal values.
            Val::Flags(
                names
                    .iter()
                    .zip(set)
                    .filter(|(_, on)| *on)
                    .map(|(n, _)| (*n).to_owned())
                    .collect(),
            )
        }
        Type::Option(option) => {
            let inner = option.ty();
            match json {
                Json::Null => Val::Option(None),
                _ if matches!(inner, Type::Option(_)) => match json.as_array().map(Vec::as_slice) {
                    Some([x]) => Val::Option(Some(Box::new(to_val(&inner, x, &path.index(0))?))),
                    _ => {
                        return Err(expected(
                            path,
                            "null or a one-element array (an option whose payload \
                             is itself an option)",
                            json,
                        ));
                    }
                },
                _ => Val::Option(Some(Box::new(to_val(&inner, json, path)?))),
            }
        }
        Type::Result(result) => {
            let object = json.as_object().filter(|o| o.len() == 1);
            let Some((side, value)) = object.and_then(|o| o.iter().next()) else {
                return Err(expected(
                    path,
                    "an object with exactly one key, `ok` or `err`",
                    json,
                ));
            };
            let side_ty = match side.as_str() {
                "ok" => result.ok(),
                "err" => result.err(),
                _ => {
                    return Err(path
                        .key(side)
                        .error("unknown key; a result is {\"ok\": ...} or {\"err\": ...}"));
                }
            };
            let side_path = path.key(side);
            let payload = match side_ty {
                Some(ty) => Some(Box::new(to_val(&ty, value, &side_path)?)),
                None if value.is_null() => None,
                None => {
                    return Err(expected(
                        &side_path,
                        &format!("null (this result has no `{side}` payload)"),
                        value,
                    ));
                }
            };
            Val::Result(if side == "ok" {
                Ok(payload)
            } else {
                Err(payload)
            })
        }
        Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return Err(not_data(ty, path));
        }
    })
}

fn items_to_vals(elem: &Type, items: &[Json], path: &Path<'_>) -> Result<Vec<Val>, BridgeError> {
    items
        .iter()
        .enumerate()
        .map(|(i, item)| to_val(elem, item, &path.index(i)))
        .collect()
}

fn bytes_to_val(json: &Json, path: &Path<'_>) -> Result<Val, BridgeError> {
    match json {
        Json::String(s) => {
            let bytes = BASE64
                .decode(s)
                .map_err(|e| path.error(format!("invalid base64 (standard, padded): {e}")))?;
            Ok(Val::List(bytes.into_iter().map(Val::U8).collect()))
        }
        Json::Array(items) => Ok(Val::List(items_to_vals(&Type::U8, items, path)?)),
        _ => Err(expected(
            path,
            "a base64 string (or an array of bytes)",
            json,
        )),
    }
}

/// An integer in `min..=max`; `kind` names the WIT type for messages.
fn int(
    json: &Json,
    path: &Path<'_>,
    kind: &str,
    min: i128,
    max: i128,
) -> Result<i128, BridgeError> {
    let Json::Number(n) = json else {
        return Err(expected(path, &format!("an integer ({kind})"), json));
    };
    let out_of_range = || path.error(format!("{n} is out of range for {kind} ({min}..={max})"));
    let value = if let Some(u) = n.as_u64() {
        i128::from(u)
    } else if let Some(i) = n.as_i64() {
        i128::from(i)
    } else {
        // serde_json keeps every plain integer literal within i64..=u64
        // exact, so this one was written with a fraction or an exponent, or
        // lies outside 64 bits; either way it is now an f64.
        let x = n.as_f64().unwrap_or(f64::NAN);
        if x.fract() != 0.0 || !x.is_finite() {
            return Err(expected(path, &format!("an integer ({kind})"), json));
        }
        // Saturating; an integral f64 below 2^127 converts exactly.
        let value = x as i128;
        if x.abs() >= 2f64.powi(53) {
            // Beyond 2^53 the f64 may be a rounded literal: -2^63 is what
            // anything just below i64::MIN rounds to, and in-range values
            // are only exact when written as plain integers.
            if value < min || value > max || x == -(2f64.powi(63)) {
                return Err(out_of_range());
            }
            return Err(path.error(format!(
                "{n} cannot be read exactly as {kind}; write it as a plain integer \
                 (no fraction or exponent)"
            )));
        }
        value
    };
    if value < min || value > max {
        return Err(out_of_range());
    }
    Ok(value)
}

fn number(json: &Json, path: &Path<'_>) -> Result<f64, BridgeError> {
    match json {
        Json::Number(n) => n.as_f64().ok_or_else(|| expected(path, "a number", json)),
        _ => Err(expected(path, "a number", json)),
    }
}

// ---------------------------------------------------------------------------
// Val -> JSON

fn mismatch(ty: &Type, val: &Val, path: &Path<'_>) -> BridgeError {
    path.error(format!(
        "the component value does not match its type (expected a {}, found {val:?})",
        type_desc(ty)
    ))
}

fn to_json(ty: &Type, val: &Val, path: &Path<'_>) -> Result<Json, BridgeError> {
    Ok(match (ty, val) {
        (Type::Bool, Val::Bool(b)) => Json::Bool(*b),
        (Type::S8, Val::S8(x)) => Json::from(*x),
        (Type::U8, Val::U8(x)) => Json::from(*x),
        (Type::S16, Val::S16(x)) => Json::from(*x),
        (Type::U16, Val::U16(x)) => Json::from(*x),
        (Type::S32, Val::S32(x)) => Json::from(*x),
        (Type::U32, Val::U32(x)) => Json::from(*x),
        (Type::S64, Val::S64(x)) => Json::from(*x),
        (Type::U64, Val::U64(x)) => Json::from(*x),
        (Type::Float32, Val::Float32(x)) => {
            // The shortest decimal that reads back as the same f32, so 0.1f32
            // is written `0.1`, not `0.10000000149011612`.
            let shortest: f64 = x.to_string().parse().unwrap_or(f64::from(*x));
            float(shortest, path)?
        }
        (Type::Float64, Val::Float64(x)) => float(*x, path)?,
        (Type::Char, Val::Char(c)) => Json::String(c.to_string()),
        (Type::String, Val::String(s)) => Json::String(s.clone()),
        (Type::List(list), Val::List(items)) => {
            let elem = list.ty();
            if elem == Type::U8 {
                let bytes = items
                    .iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Val::U8(b) => Ok(*b),
                        other => Err(mismatch(&Type::U8, other, &path.index(i))),
                    })
                    .collect::<Result<Vec<u8>, _>>()?;
                Json::String(BASE64.encode(bytes))
            } else {
                Json::Array(vals_to_items(&elem, items, path)?)
            }
        }
        (Type::FixedLengthList(list), Val::FixedLengthList(items)) => {
            Json::Array(vals_to_items(&list.ty(), items, path)?)
        }
        (Type::Map(map), Val::Map(entries)) => {
            let (key_ty, value_ty) = (map.key(), map.value());
            if key_ty == Type::String {
                let mut object = Map::with_capacity(entries.len());
                for (key, value) in entries {
                    let Val::String(key) = key else {
                        return Err(mismatch(&key_ty, key, path));
                    };
                    let value = to_json(&value_ty, value, &path.key(key))?;
                    object.insert(key.clone(), value);
                }
                Json::Object(object)
            } else {
                let mut pairs = Vec::with_capacity(entries.len());
                for (i, (key, value)) in entries.iter().enumerate() {
                    let item_path = path.index(i);
                    pairs.push(Json::Array(vec![
                        to_json(&key_ty, key, &item_path.index(0))?,
                        to_json(&value_ty, value, &item_path.index(1))?,
                    ]));
                }
                Json::Array(pairs)
            }
        }
        (Type::Record(record), Val::Record(values)) => {
            let mut object = Map::with_capacity(values.len());
            for field in record.fields() {
                let key = snake_case(field.name);
                let field_path = path.key(&key);
                let Some((_, value)) = values.iter().find(|(n, _)| n == field.name) else {
                    return Err(field_path.error("the component value lacks this field"));
                };
                let json = to_json(&field.ty, value, &field_path)?;
                object.insert(key, json);
            }
            Json::Object(object)
        }
        (Type::Tuple(tuple), Val::Tuple(values)) if tuple.types().len() == values.len() => {
            let items = tuple
                .types()
                .zip(values)
                .enumerate()
                .map(|(i, (ty, v))| to_json(&ty, v, &path.index(i)))
                .collect::<Result<_, _>>()?;
            Json::Array(items)
        }
        (Type::Variant(variant), Val::Variant(name, payload)) => {
            let Some(case) = variant.cases().find(|c| c.name == name) else {
                return Err(path.error(format!("the component value has unknown case `{name}`")));
            };
            let value = match (case.ty, payload) {
                (Some(ty), Some(payload)) => to_json(&ty, payload, &path.key(name))?,
                (None, None) => Json::Null,
                _ => return Err(mismatch(ty, val, path)),
            };
            let mut object = Map::with_capacity(1);
            object.insert(name.clone(), value);
            Json::Object(object)
        }
        (Type::Enum(_), Val::Enum(name)) => Json::String(name.clone()),
        (Type::Flags(flags), Val::Flags(set)) => Json::Array(
            flags
                .names()
                .filter(|n| set.iter().any(|s| s == n))
                .map(|n| Json::String(n.to_owned()))
                .collect(),
        ),
        (Type::Option(_), Val::Option(None)) => Json::Null,
        (Type::Option(option), Val::Option(Some(payload))) => {
            let inner = option.ty();
            if matches!(inner, Type::Option(_)) {
                Json::Array(vec![to_json(&inner, payload, &path.index(0))?])
            } else {
                to_json(&inner, payload, path)?
            }
        }
        (Type::Result(result), Val::Result(outcome)) => {
            let (side, side_ty, payload) = match outcome {
                Ok(payload) => ("ok", result.ok(), payload),
                Err(payload) => ("err", result.err(), payload),
            };
            let value = match (side_ty, payload) {
                (Some(side_ty), Some(payload)) => to_json(&side_ty, payload, &path.key(side))?,
                (None, None) => Json::Null,
                _ => return Err(mismatch(ty, val, path)),
            };
            let mut object = Map::with_capacity(1);
            object.insert(side.to_owned(), value);
            Json::Object(object)
        }
        (
            Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext,
            _,
        ) => {
            return Err(not_data(ty, path));
        }
        _ => return Err(mismatch(ty, val, path)),
    })
}

fn vals_to_items(elem: &Type, items: &[Val], path: &Path<'_>) -> Result<Vec<Json>, BridgeError> {
    items
        .iter()
        .enumerate()
        .map(|(i, v)| to_json(elem, v, &path.index(i)))
        .collect()
}

fn float(x: f64, path: &Path<'_>) -> Result<Json, BridgeError> {
    Number::from_f64(x).map(Json::Number).ok_or_else(|| {
        path.error(format!(
            "{x} cannot be represented in JSON (NaN and infinities have no JSON spelling)"
        ))
    })
}

// ---------------------------------------------------------------------------
// Bridgeability

fn check(ty: &Type, path: &Path<'_>) -> Result<(), BridgeError> {
    match ty {
        Type::Bool
        | Type::S8
        | Type::U8
        | Type::S16
        | Type::U16
        | Type::S32
        | Type::U32
        | Type::S64
        | Type::U64
        | Type::Float32
        | Type::Float64
        | Type::Char
        | Type::String
        | Type::Enum(_)
        | Type::Flags(_) => Ok(()),
        Type::List(list) => check(&list.ty(), &Path::Any(path)),
        Type::FixedLengthList(list) => check(&list.ty(), &Path::Any(path)),
        Type::Map(map) => {
            if map.key() == Type::String {
                check(&map.value(), &Path::Any(path))
            } else {
                let entry = Path::Any(path);
                check(&map.key(), &entry.index(0))?;
                check(&map.value(), &entry.index(1))
            }
        }
        Type::Record(record) => record.fields().try_for_each(|f| {
            let key = snake_case(f.name);
            check(&f.ty, &path.key(&key))
        }),
        Type::Tuple(tuple) => tuple
            .types()
            .enumerate()
            .try_for_each(|(i, ty)| check(&ty, &path.index(i))),
        Type::Variant(variant) => variant.cases().try_for_each(|c| match &c.ty {
            Some(ty) => check(ty, &path.key(c.name)),
            None => Ok(()),
        }),
        Type::Option(option) => {
            let inner = option.ty();
            if matches!(inner, Type::Option(_)) {
                check(&inner, &path.index(0))
            } else {
                check(&inner, path)
            }
        }
        Type::Result(result) => {
            if let Some(ok) = result.ok() {
                check(&ok, &path.key("ok"))?;
            }
            if let Some(err) = result.err() {
                check(&err, &path.key("err"))?;
            }
            Ok(())
        }
        Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            Err(not_data(ty, path))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use serde_json::json;

    use super::*;
    use crate::schema::testing::{run_types, test_component};
    use crate::schema::{self, SkillInterface};

    const KITCHEN_SINK: &str = r#"
        package test:sink;

        world sink {
            use skillhost:skill/types@0.1.0.{skill-error};

            /// When a paper came out, `YYYY-MM-DD`.
            type date = string;
            type byte = u8;

            enum color { red, green, dark-blue }

            flags perms { read, write, exec-all }

            variant shape {
                circle(f64),
                square(u32),
                empty,
                named-thing(string),
            }

            record point { x: s32, y: s32 }

            record paper {
                title: string,
                published-date: date,
                pages: option<u32>,
            }

            record inner { depth: u8, tags: list<string> }
            record outer { inner: inner, at: point }

            record sink-input {
                flag: bool,
                a-u8: u8,
                a-u16: u16,
                a-u32: u32,
                a-u64: u64,
                a-s8: s8,
                a-s16: s16,
                a-s32: s32,
                a-s64: s64,
                a-f32: f32,
                a-f64: f64,
                letter: char,
                text: string,
                bytes: list<u8>,
                raw: list<byte>,
                papers: list<paper>,
                maybe: option<u32>,
                maybe-maybe: option<option<string>>,
                outcome: result<point, string>,
                status: result<_, color>,
                shape: shape,
                color: color,
                perms: perms,
                pair: tuple<string, u8, bool>,
                nested: outer,
                date: date,
            }

            record sink-output { count: u32 }

            export run: func(input: sink-input) -> result<sink-output, skill-error>;
        }
    "#;

    struct Sink {
        input: Type,
        result: Type,
        interface: SkillInterface,
        validator: jsonschema::Validator,
    }

    static SINK: LazyLock<Sink> = LazyLock::new(|| {
        let component = test_component(KITCHEN_SINK);
        let (input, result) = run_types(&component).expect("run's types");
        let interface = schema::describe(&component).expect("describe");
        assert!(jsonschema::meta::is_valid(&interface.input_schema));
        let validator = jsonschema::validator_for(&interface.input_schema).expect("a valid schema");
        Sink {
            input,
            result,
            interface,
            validator,
        }
    });

    fn sample() -> Json {
        json!({
            "flag": true,
            "a_u8": 255,
            "a_u16": 65535,
            "a_u32": 4294967295u32,
            "a_u64": 18446744073709551615u64,
            "a_s8": -128,
            "a_s16": -32768,
            "a_s32": -2147483648i32,
            "a_s64": -9223372036854775808i64,
            "a_f32": 1.5,
            "a_f64": -0.1,
            "letter": "é",
            "text": "hello",
            "bytes": "AAEC/w==",
            "raw": "aGk=",
            "papers": [
                {"title": "A", "published_date": "2024-01-02", "pages": 12},
                {"title": "B", "published_date": "2024-03-04", "pages": null},
            ],
            "maybe": 7,
            "maybe_maybe": ["x"],
            "outcome": {"ok": {"x": 1, "y": -2}},
            "status": {"ok": null},
            "shape": {"circle": 2.5},
            "color": "dark-blue",
            "perms": ["read", "exec-all"],
            "pair": ["p", 3, false],
            "nested": {"inner": {"depth": 2, "tags": ["a", "b"]}, "at": {"x": 0, "y": 0}},
            "date": "2025-06-07",
        })
    }

    fn with(field: &str, value: Json) -> Json {
        let mut input = sample();
        input[field] = value;
        input
    }

    fn without(field: &str) -> Json {
        let mut input = sample();
        input.as_object_mut().unwrap().shift_remove(field);
        input
    }

    fn round_trip(input: &Json) -> Json {
        let val = json_to_val(&SINK.input, input).unwrap_or_else(|e| panic!("{e}\n{input}"));
        val_to_json(&SINK.input, &val).unwrap_or_else(|e| panic!("{e}\n{input}"))
    }

    fn assert_schema_accepts(input: &Json) {
        if let Err(e) = SINK.validator.validate(input) {
            panic!("the schema refuses what the bridge accepts: {e}\n{input}");
        }
    }

    /// Accepted by the bridge and the schema, and written back unchanged.
    fn assert_round_trips(input: &Json) {
        assert_eq!(&round_trip(input), input);
        assert_schema_accepts(input);
    }

    /// Refused by the bridge at `path` with a message containing `fragment`,
    /// and refused by the schema too.
    fn assert_refused(input: &Json, path: &str, fragment: &str) {
        let err = json_to_val(&SINK.input, input).expect_err(&format!("accepted {input}"));
        assert_eq!(err.path, path, "{err}");
        assert!(err.message.contains(fragment), "`{err}` lacks `{fragment}`");
        assert!(
            !SINK.validator.is_valid(input),
            "the schema accepts what the bridge refuses ({err})\n{input}"
        );
    }

    #[test]
    fn the_sample_round_trips() {
        assert_round_trips(&sample());
    }

    #[test]
    fn every_kind_round_trips() {
        let cases = [
            ("flag", json!(false)),
            ("a_u8", json!(0)),
            ("a_u16", json!(0)),
            ("a_u32", json!(0)),
            ("a_u64", json!(0)),
            ("a_s8", json!(127)),
            ("a_s16", json!(32767)),
            ("a_s32", json!(2147483647)),
            ("a_s64", json!(9223372036854775807i64)),
            ("a_f32", json!(0.1)),
            ("a_f32", json!(-3.4028235e38)),
            ("a_f32", json!(1e-45)),
            ("a_f64", json!(1e300)),
            ("a_f64", json!(-0.0)),
            ("letter", json!("😀")),
            ("letter", json!("a")),
            ("text", json!("")),
            ("text", json!("naïve \"quoted\"\n")),
            ("bytes", json!("")),
            ("bytes", json!("QQ==")),
            ("bytes", json!("QUI=")),
            ("bytes", json!("QUJD")),
            ("raw", json!("/+8=")),
            ("papers", json!([])),
            ("maybe", json!(null)),
            ("maybe", json!(0)),
            ("maybe_maybe", json!(null)),
            ("maybe_maybe", json!([null])),
            ("maybe_maybe", json!([""])),
            ("outcome", json!({"err": "boom"})),
            ("status", json!({"err": "red"})),
            ("shape", json!({"square": 4})),
            ("shape", json!({"empty": null})),
            ("shape", json!({"named-thing": "blob"})),
            ("color", json!("red")),
            ("perms", json!([])),
            ("perms", json!(["read", "write", "exec-all"])),
            ("pair", json!(["", 255, true])),
            (
                "nested",
                json!({"inner": {"depth": 0, "tags": []}, "at": {"x": -1, "y": 1}}),
            ),
            ("date", json!("")),
        ];
        for (field, value) in cases {
            assert_round_trips(&with(field, value));
        }
    }

    #[test]
    fn accepted_alternative_forms_are_normalised() {
        let cases = [
            // Input, and the field as it is written back.
            (without("maybe"), "maybe", json!(null)),
            (without("maybe_maybe"), "maybe_maybe", json!(null)),
            (
                with("shape", json!("empty")),
                "shape",
                json!({"empty": null}),
            ),
            (
                with("bytes", json!([0, 1, 2, 255])),
                "bytes",
                json!("AAEC/w=="),
            ),
            (with("raw", json!([])), "raw", json!("")),
            (
                with("perms", json!(["exec-all", "read"])),
                "perms",
                json!(["read", "exec-all"]),
            ),
            (with("a_u8", json!(3.0)), "a_u8", json!(3)),
            (with("a_s64", json!(-1e3)), "a_s64", json!(-1000)),
            (
                with("a_f32", json!(F32_LIMIT.next_down())),
                "a_f32",
                json!(3.4028235e38),
            ),
            (with("a_f32", json!(0.1f32)), "a_f32", json!(0.1)),
            // Floats stay floats, for expressions that tell 5 from 5.0.
            (with("a_f64", json!(5)), "a_f64", json!(5.0)),
        ];
        for (input, field, written) in cases {
            assert_schema_accepts(&input);
            let output = round_trip(&input);
            assert_eq!(output[field], written, "{input}");
        }
    }

    #[test]
    fn integer_boundaries() {
        let kinds: [(&str, &str, i128, i128); 8] = [
            ("a_u8", "u8", 0, u8::MAX.into()),
            ("a_u16", "u16", 0, u16::MAX.into()),
            ("a_u32", "u32", 0, u32::MAX.into()),
            ("a_u64", "u64", 0, u64::MAX.into()),
            ("a_s8", "s8", i8::MIN.into(), i8::MAX.into()),
            ("a_s16", "s16", i16::MIN.into(), i16::MAX.into()),
            ("a_s32", "s32", i32::MIN.into(), i32::MAX.into()),
            ("a_s64", "s64", i64::MIN.into(), i64::MAX.into()),
        ];
        for (field, kind, min, max) in kinds {
            // Parsed from text, as state is: literals beyond 64 bits included.
            let number = |n: i128| -> Json { serde_json::from_str(&n.to_string()).unwrap() };
            assert_round_trips(&with(field, number(min)));
            assert_round_trips(&with(field, number(max)));
            let path = format!("$.{field}");
            let range = format!("out of range for {kind} ({min}..={max})");
            assert_refused(&with(field, number(max + 1)), &path, &range);
            if min == i128::from(i64::MIN) {
                // -9223372036854775809 reaches us as the f64 -2^63, which the
                // schema (rightly, for the value it sees) takes for i64::MIN;
                // the bridge knows no plain literal in range becomes an f64.
                let err = json_to_val(&SINK.input, &with(field, number(min - 1))).unwrap_err();
                assert_eq!(err.path, path);
                assert!(err.message.contains(&range), "{err}");
            } else {
                assert_refused(&with(field, number(min - 1)), &path, &range);
            }
            assert_refused(
                &with(field, json!(1.5)),
                &path,
                &format!("expected an integer ({kind}), found number 1.5"),
            );
            assert_refused(&with(field, json!("1")), &path, "found string \"1\"");
        }
        let err = json_to_val(&SINK.input, &with("a_u8", json!(300))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "$.a_u8: 300 is out of range for u8 (0..=255)"
        );
        let err = json_to_val(&SINK.input, &with("a_u64", json!(1e19))).unwrap_err();
        assert!(err.message.contains("plain integer"), "{err}");
    }

    #[test]
    fn bad_values_are_refused_with_their_path() {
        let mut bad_paper = sample();
        bad_paper["papers"][1]["title"] = json!(3);
        let mut no_title = sample();
        no_title["papers"][1]
            .as_object_mut()
            .unwrap()
            .shift_remove("title");
        let mut kebab = sample();
        let date = kebab["papers"][0]
            .as_object_mut()
            .unwrap()
            .shift_remove("published_date")
            .unwrap();
        kebab["papers"][0]["published-date"] = date;
        let mut extra = sample();
        extra["surprise"] = json!(1);
        let mut nested = sample();
        nested["nested"]["inner"]["depth"] = json!(-1);

        let cases = [
            (
                bad_paper,
                "$.papers[1].title",
                "expected a string, found number 3",
            ),
            (no_title, "$.papers[1].title", "missing required field"),
            (without("flag"), "$.flag", "missing required field"),
            (
                kebab,
                "$.papers[0].published-date",
                "did you mean `published_date`?",
            ),
            (extra, "$.surprise", "unknown field"),
            (nested, "$.nested.inner.depth", "-1 is out of range for u8"),
            (with("flag", json!("true")), "$.flag", "expected a boolean"),
            (
                with("text", json!(null)),
                "$.text",
                "expected a string, found null",
            ),
            (
                with("papers", json!({})),
                "$.papers",
                "expected an array, found an object",
            ),
            (
                with("a_f32", json!(1e39)),
                "$.a_f32",
                "out of range for f32",
            ),
            (
                with("a_f32", json!(F32_LIMIT)),
                "$.a_f32",
                "out of range for f32",
            ),
            (
                with("a_f32", json!(-F32_LIMIT)),
                "$.a_f32",
                "out of range for f32",
            ),
            (with("a_f64", json!("1.0")), "$.a_f64", "expected a number"),
            (
                with("letter", json!("ab")),
                "$.letter",
                "exactly one character",
            ),
            (
                with("letter", json!("")),
                "$.letter",
                "exactly one character",
            ),
            (
                with("bytes", json!("not base64!")),
                "$.bytes",
                "invalid base64",
            ),
            (with("bytes", json!("QQ")), "$.bytes", "invalid base64"),
            (with("bytes", json!("QR==")), "$.bytes", "invalid base64"),
            (
                with("bytes", json!([1, 256])),
                "$.bytes[1]",
                "out of range for u8",
            ),
            (with("raw", json!(5)), "$.raw", "expected a base64 string"),
            (
                with("maybe", json!("7")),
                "$.maybe",
                "expected an integer (u32)",
            ),
            (
                with("maybe_maybe", json!("x")),
                "$.maybe_maybe",
                "one-element array",
            ),
            (
                with("maybe_maybe", json!(["x", "y"])),
                "$.maybe_maybe",
                "one-element array",
            ),
            (
                with("maybe_maybe", json!([1])),
                "$.maybe_maybe[0]",
                "expected a string",
            ),
            (
                with("outcome", json!({"ok": {"x": 1, "y": 2}, "err": "e"})),
                "$.outcome",
                "exactly one key",
            ),
            (
                with("outcome", json!({"fine": 1})),
                "$.outcome.fine",
                "unknown key",
            ),
            (
                with("outcome", json!({"ok": {"x": 1}})),
                "$.outcome.ok.y",
                "missing required field",
            ),
            (
                with("status", json!({"ok": 1})),
                "$.status.ok",
                "expected null",
            ),
            (
                with("status", json!({"err": "blue"})),
                "$.status.err",
                "unknown enum case `blue`",
            ),
            (
                with("shape", json!({"hexagon": 6})),
                "$.shape",
                "unknown variant case `hexagon`",
            ),
            (with("shape", json!("circle")), "$.shape", "has a payload"),
            (
                with("shape", json!({"empty": 1})),
                "$.shape.empty",
                "expected null",
            ),
            (
                with("shape", json!({"circle": "big"})),
                "$.shape.circle",
                "expected a number",
            ),
            (
                with("shape", json!({"circle": 1, "square": 2})),
                "$.shape",
                "exactly one key",
            ),
            (
                with("color", json!("blue")),
                "$.color",
                "unknown enum case `blue`; expected one of: red, green, dark-blue",
            ),
            (
                with("color", json!("dark_blue")),
                "$.color",
                "unknown enum case",
            ),
            (
                with("perms", json!(["read", "fly"])),
                "$.perms[1]",
                "unknown flag `fly`",
            ),
            (
                with("perms", json!(["read", "read"])),
                "$.perms[1]",
                "duplicate flag `read`",
            ),
            (
                with("perms", json!("read")),
                "$.perms",
                "expected an array of flag names",
            ),
            (with("pair", json!(["p", 3])), "$.pair", "exactly 3 items"),
            (
                with("pair", json!(["p", 3, false, 1])),
                "$.pair",
                "exactly 3 items",
            ),
            (
                with("pair", json!(["p", 3, "no"])),
                "$.pair[2]",
                "expected a boolean",
            ),
            (with("date", json!(20250607)), "$.date", "expected a string"),
        ];
        for (input, path, fragment) in cases {
            assert_refused(&input, path, fragment);
        }
        assert_refused(
            &json!([]),
            "$",
            "expected an object, found an array of 0 items",
        );
    }

    #[test]
    fn output_writes_every_option_field_and_refuses_nan() {
        let input = without("maybe");
        let val = json_to_val(&SINK.input, &input).unwrap();
        let output = val_to_json(&SINK.input, &val).unwrap();
        assert_eq!(output.as_object().unwrap().get("maybe"), Some(&Json::Null));

        let Val::Record(mut fields) = val else {
            panic!("a record")
        };
        let f64_field = fields.iter_mut().find(|(n, _)| n == "a-f64").unwrap();
        f64_field.1 = Val::Float64(f64::NAN);
        let err = val_to_json(&SINK.input, &Val::Record(fields.clone())).unwrap_err();
        assert_eq!(err.path, "$.a_f64");
        assert!(
            err.message.contains("cannot be represented in JSON"),
            "{err}"
        );
        let f32_field = fields.iter_mut().find(|(n, _)| n == "a-f32").unwrap();
        f32_field.1 = Val::Float32(f32::INFINITY);
        let err = val_to_json(&SINK.input, &Val::Record(fields)).unwrap_err();
        assert_eq!(err.path, "$.a_f32");
    }

    #[test]
    fn run_result_uses_the_result_rule() {
        let ok = json!({"ok": {"count": 3}});
        let val = json_to_val(&SINK.result, &ok).unwrap();
        assert_eq!(val_to_json(&SINK.result, &val).unwrap(), ok);
        let err = json!({"err": {"code": "not-found", "message": "no", "retryable": false}});
        let val = json_to_val(&SINK.result, &err).unwrap();
        assert_eq!(val_to_json(&SINK.result, &val).unwrap(), err);
        let output = jsonschema::validator_for(&SINK.interface.output_schema).unwrap();
        assert!(output.is_valid(&ok["ok"]));
        assert!(!output.is_valid(&json!({"count": -1})));
    }

    #[test]
    fn the_schema_matches_the_bridge_rules() {
        let props = &SINK.interface.input_schema["properties"];
        assert_eq!(props["bytes"]["anyOf"][0]["contentEncoding"], "base64");
        assert_eq!(props["raw"], props["bytes"]);
        assert_eq!(
            props["letter"],
            json!({"type": "string", "minLength": 1, "maxLength": 1})
        );
        assert_eq!(
            props["color"],
            json!({"type": "string", "enum": ["red", "green", "dark-blue"], "title": "color"})
        );
        assert_eq!(props["perms"]["uniqueItems"], true);
        assert_eq!(props["pair"]["items"], false);
        assert_eq!(props["pair"]["minItems"], 3);
        let required = SINK.interface.input_schema["required"].as_array().unwrap();
        assert!(!required.contains(&json!("maybe")));
        assert!(!required.contains(&json!("maybe_maybe")));
        assert!(required.contains(&json!("a_u8")));
    }

    #[test]
    fn check_bridgeable_names_the_resource() {
        let wit = r#"
            package test:res;
            interface things {
                resource thing;
            }
            world res {
                use skillhost:skill/types@0.1.0.{skill-error};
                use things.{thing};
                record holder { name: string, handle: own<thing> }
                record input { items: list<holder>, first: holder }
                export run: func(input: input) -> result<u32, skill-error>;
            }
        "#;
        let (input, result) = run_types(&test_component(wit)).unwrap();
        let err = check_bridgeable(&input).unwrap_err();
        assert_eq!(err.path, "$.items[*].handle");
        assert!(
            err.message.contains("skill I/O must be plain data"),
            "{err}"
        );
        assert!(check_bridgeable(&result).is_ok());
        assert!(check_bridgeable(&SINK.input).is_ok());
        assert!(check_bridgeable(&SINK.result).is_ok());
        let err = json_to_val(
            &input,
            &json!({"items": [], "first": {"name": "n", "handle": 1}}),
        )
        .unwrap_err();
        assert_eq!(err.path, "$.first.handle");
    }

    #[test]
    fn snake_case_keys() {
        assert_eq!(snake_case("published-date"), "published_date");
        assert_eq!(snake_case("title"), "title");
        assert_eq!(snake_case("a-b-c1"), "a_b_c1");
    }
}
