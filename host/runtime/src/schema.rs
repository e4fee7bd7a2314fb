//! What a skill component says it takes and returns: the WIT of its world,
//! and JSON Schemas (draft 2020-12) for the input and output of its `run`.
//!
//! This module owns reading a component's interface with `wit-component` and
//! turning WIT types into JSON Schema. The schemas describe exactly the JSON
//! that `runtime::bridge` accepts and produces (see its mapping table); when
//! a bridge rule changes, the matching rule here changes with it. It must not
//! instantiate components or validate values (that is `checks`' job).
//!
//! Choices the bridge does not dictate: every type is inlined (WIT types
//! cannot be recursive, so this terminates, and many consumers, LLM providers
//! among them, handle `$ref` poorly); a named type gets its WIT name as
//! `title`; doc comments become `description`, a field's own docs winning
//! over its type's docs. Components produced by `wit-component` alone do not
//! carry doc comments; those `host skill build` made carry them in the
//! `package-docs` custom section (`skillhost-build`'s `docs`), which the
//! decoder reads back, so their schemas have descriptions and their world
//! and `run` their docs ([`SkillInterface::docs`]). [`describe_world`] on a
//! parsed WIT source keeps them too.

use serde_json::{Map, Value as Json, json};
use wit_component::{DecodedWasm, WitPrinter};
use wit_parser::{
    Docs, Function, Resolve, Type as WitType, TypeDefKind, WorldId, WorldItem, WorldKey,
};

use super::bridge::{F32_LIMIT, snake_case};

/// The JSON Schema dialect of every schema this module produces.
pub const SCHEMA_DIALECT: &str = "https://json-schema.org/draft/2020-12/schema";

/// What a skill component takes and returns, read from the component itself.
#[derive(Debug, Clone, PartialEq)]
pub struct SkillInterface {
    /// WIT text of the component's world and of every package it refers to
    /// (those as nested `package ... { }` blocks).
    pub wit: String,
    /// JSON Schema of `run`'s parameter, as the bridge maps it.
    pub input_schema: Json,
    /// JSON Schema of the `ok` type of `run`'s result, as the bridge maps it.
    /// `{"type": "null"}` when `run` returns `result<_, skill-error>`.
    pub output_schema: Json,
    /// Name of the world. A component binary does not keep its source world's
    /// name, so for decoded components this is the decoder's name (`root`).
    pub world: String,
    /// What the skill says it does: the doc comments of its world and of
    /// its `run`, a blank line between them; `None` when it has neither
    /// (a component that kept no docs).
    pub docs: Option<String>,
}

/// Why a component's interface could not be described.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("cannot read the component's interface: {0}")]
    Decode(String),
    #[error(
        "this is an encoded WIT package, not a component; a skill is a component \
         whose world exports `run`"
    )]
    NotAComponent,
    #[error(
        "the component does not export a function named `run`; a skill's world must \
         `export run: func(input: T) -> result<U, skill-error>`"
    )]
    NoRun,
    #[error(
        "the component's `run` is `{signature}`, but {problem}; a skill's world must \
         `export run: func(input: T) -> result<U, skill-error>`"
    )]
    BadRunSignature { signature: String, problem: String },
    #[error("`run`'s {side} at {path}: {message}")]
    Unbridgeable {
        /// `input` or `output`.
        side: &'static str,
        path: String,
        message: String,
    },
    #[error("cannot print the component's WIT: {0}")]
    Print(String),
}

/// Reads a skill component's interface: its WIT, and the JSON Schemas of its
/// `run` input and output.
pub fn describe(component_bytes: &[u8]) -> Result<SkillInterface, SchemaError> {
    let decoded = wit_component::decode(component_bytes)
        .map_err(|e| SchemaError::Decode(format!("{e:#}")))?;
    match decoded {
        DecodedWasm::Component(resolve, world) => describe_world(&resolve, world),
        DecodedWasm::WitPackage(..) => Err(SchemaError::NotAComponent),
    }
}

/// [`describe`] for a world already in a [`Resolve`], e.g. parsed from WIT
/// source (which, unlike a component binary, keeps doc comments).
pub fn describe_world(resolve: &Resolve, world_id: WorldId) -> Result<SkillInterface, SchemaError> {
    let world = &resolve.worlds[world_id];
    let run = world
        .exports
        .iter()
        .find_map(|(key, item)| match (key, item) {
            (WorldKey::Name(name), WorldItem::Function(f)) if name == "run" => Some(f),
            _ => None,
        })
        .ok_or(SchemaError::NoRun)?;
    let (input, output) = run_types(resolve, run)?;
    let gen_ = Gen { resolve };
    let input_schema = document(gen_.schema(&input, "$").map_err(|e| e.on("input"))?);
    let output_schema = document(match output {
        Some(ty) => gen_.schema(&ty, "$").map_err(|e| e.on("output"))?,
        None => json!({"type": "null"}),
    });
    Ok(SkillInterface {
        wit: print_wit(resolve, world_id)?,
        input_schema,
        output_schema,
        world: world.name.clone(),
        docs: joined_docs(&[&world.docs, &run.docs]),
    })
}

/// The non-empty ones of `docs`, trimmed, a blank line between them.
fn joined_docs(docs: &[&Docs]) -> Option<String> {
    let parts: Vec<&str> = docs
        .iter()
        .filter_map(|d| d.contents.as_deref().map(str::trim))
        .filter(|text| !text.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

/// `run`'s parameter type and the `ok` type of its result, after checking
/// that it is `func(input: T) -> result<U, skill-error>`.
fn run_types(resolve: &Resolve, run: &Function) -> Result<(WitType, Option<WitType>), SchemaError> {
    let bad = |problem: String| SchemaError::BadRunSignature {
        signature: signature(resolve, run),
        problem,
    };
    let [param] = run.params.as_slice() else {
        return Err(bad(format!(
            "it takes {} parameters instead of exactly one",
            run.params.len()
        )));
    };
    let Some(result) = run.result else {
        return Err(bad("it returns nothing".to_owned()));
    };
    let result = match dealias(resolve, result) {
        WitType::Id(id) => match &resolve.types[id].kind {
            TypeDefKind::Result(r) => Some(r.clone()),
            _ => None,
        },
        _ => None,
    }
    .ok_or_else(|| bad("it does not return a `result`".to_owned()))?;
    // The rule the runtime loads components by (`skill::run_types`), which
    // sees shapes, not names: a record of the same fields is accepted there,
    // so it is here, and `host check` agrees with `host skill call`.
    let is_skill_error = result
        .err
        .is_some_and(|e| has_skill_error_shape(resolve, e));
    if !is_skill_error {
        return Err(bad(
            "its result's error type is not the `skill-error` record (code: string, message: \
             string, retryable: bool)"
                .to_owned(),
        ));
    }
    Ok((param.ty, result.ok))
}

/// Whether `ty` is a record of exactly `skill-error`'s fields, in its order.
fn has_skill_error_shape(resolve: &Resolve, ty: WitType) -> bool {
    let WitType::Id(id) = dealias(resolve, ty) else {
        return false;
    };
    let TypeDefKind::Record(record) = &resolve.types[id].kind else {
        return false;
    };
    let fields: Vec<(&str, WitType)> = record
        .fields
        .iter()
        .map(|f| (f.name.as_str(), dealias(resolve, f.ty)))
        .collect();
    fields
        == [
            ("code", WitType::String),
            ("message", WitType::String),
            ("retryable", WitType::Bool),
        ]
}

fn signature(resolve: &Resolve, run: &Function) -> String {
    let mut s = String::from("func(");
    for (i, param) in run.params.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        s.push_str(&param.name);
        s.push_str(": ");
        s.push_str(&type_name(resolve, &param.ty));
    }
    s.push(')');
    if let Some(result) = &run.result {
        s.push_str(" -> ");
        s.push_str(&type_name(resolve, result));
    }
    s
}

fn type_name(resolve: &Resolve, ty: &WitType) -> String {
    let mut printer = WitPrinter::default();
    match printer.print_type_name(resolve, ty) {
        Ok(()) => printer.output.to_string(),
        Err(_) => "?".to_owned(),
    }
}

/// The world's own package, followed by every other package in the resolve
/// as nested `package ... { }` blocks, so the text parses on its own.
fn print_wit(resolve: &Resolve, world_id: WorldId) -> Result<String, SchemaError> {
    let main = resolve.worlds[world_id]
        .package
        .ok_or_else(|| SchemaError::Print("the world belongs to no package".to_owned()))?;
    let nested: Vec<_> = resolve
        .topological_packages()
        .into_iter()
        .filter(|p| *p != main)
        .collect();
    let mut printer = WitPrinter::default();
    printer
        .print(resolve, main, &nested)
        .map_err(|e| SchemaError::Print(format!("{e:#}")))?;
    Ok(printer.output.to_string())
}

/// Follows `type a = b` aliases to the type they name.
fn dealias(resolve: &Resolve, mut ty: WitType) -> WitType {
    while let WitType::Id(id) = ty {
        match resolve.types[id].kind {
            TypeDefKind::Type(target) => ty = target,
            _ => break,
        }
    }
    ty
}

/// Puts `$schema` first in a top-level schema.
fn document(schema: Json) -> Json {
    let mut out = Map::new();
    out.insert("$schema".to_owned(), json!(SCHEMA_DIALECT));
    if let Json::Object(fields) = schema {
        out.extend(fields);
    }
    Json::Object(out)
}

fn docs(docs: &Docs) -> Option<String> {
    docs.contents
        .as_deref()
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(str::to_owned)
}

/// Sets the schema's `description` (after its `title`, before the rest),
/// replacing the one its type brought.
fn set_description(schema: Json, docs: String) -> Json {
    let Json::Object(mut fields) = schema else {
        return schema;
    };
    let mut out = Map::new();
    if let Some(title) = fields.shift_remove("title") {
        out.insert("title".to_owned(), title);
    }
    fields.shift_remove("description");
    out.insert("description".to_owned(), Json::String(docs));
    out.extend(fields);
    Json::Object(out)
}

/// `{"type": "object", "properties": {key: value}, "required": [key], ...}`:
/// the shape of a result side and of a variant case.
fn single_key(key: &str, value: Json) -> Json {
    json!({
        "type": "object",
        "properties": { key: value },
        "required": [key],
        "additionalProperties": false,
    })
}

/// Base64 as `base64::engine::general_purpose::STANDARD` decodes it: padded,
/// and the bits after the last full byte must be zero.
const BASE64_PATTERN: &str =
    "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";

/// A position inside a type that cannot cross the bridge.
struct Unbridgeable {
    path: String,
    message: String,
}

impl Unbridgeable {
    fn on(self, side: &'static str) -> SchemaError {
        SchemaError::Unbridgeable {
            side,
            path: self.path,
            message: self.message,
        }
    }
}

struct Gen<'a> {
    resolve: &'a Resolve,
}

impl Gen<'_> {
    /// The schema of `ty`, found at JSON path `path` (for errors).
    fn schema(&self, ty: &WitType, path: &str) -> Result<Json, Unbridgeable> {
        let int = |min: Json, max: Json| json!({"type": "integer", "minimum": min, "maximum": max});
        Ok(match ty {
            WitType::Bool => json!({"type": "boolean"}),
            WitType::U8 => int(json!(u8::MIN), json!(u8::MAX)),
            WitType::U16 => int(json!(u16::MIN), json!(u16::MAX)),
            WitType::U32 => int(json!(u32::MIN), json!(u32::MAX)),
            WitType::U64 => int(json!(u64::MIN), json!(u64::MAX)),
            WitType::S8 => int(json!(i8::MIN), json!(i8::MAX)),
            WitType::S16 => int(json!(i16::MIN), json!(i16::MAX)),
            WitType::S32 => int(json!(i32::MIN), json!(i32::MAX)),
            WitType::S64 => int(json!(i64::MIN), json!(i64::MAX)),
            WitType::F32 => json!({
                "type": "number",
                "exclusiveMinimum": -F32_LIMIT,
                "exclusiveMaximum": F32_LIMIT,
            }),
            WitType::F64 => json!({"type": "number"}),
            WitType::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
            WitType::String => json!({"type": "string"}),
            WitType::ErrorContext => return Err(not_data("an error-context", path)),
            WitType::Id(id) => {
                let def = &self.resolve.types[*id];
                let schema = self.kind(&def.kind, path)?;
                let mut named = Map::new();
                if let Some(name) = &def.name {
                    named.insert("title".to_owned(), Json::String(name.clone()));
                }
                if let Some(docs) = docs(&def.docs) {
                    named.insert("description".to_owned(), Json::String(docs));
                }
                // An alias's target keeps its own title and description.
                if let Json::Object(fields) = schema {
                    named.extend(fields);
                }
                Json::Object(named)
            }
        })
    }

    fn kind(&self, kind: &TypeDefKind, path: &str) -> Result<Json, Unbridgeable> {
        Ok(match kind {
            // An alias is its target, named and documented by the alias only
            // where the target is not itself.
            TypeDefKind::Type(target) => self.schema(target, path)?,
            TypeDefKind::Record(record) => {
                let mut properties = Map::new();
                let mut required = Vec::new();
                for field in &record.fields {
                    let key = snake_case(&field.name);
                    let mut schema = self.schema(&field.ty, &format!("{path}.{key}"))?;
                    if let Some(docs) = docs(&field.docs) {
                        schema = set_description(schema, docs);
                    }
                    if !self.is_option(&field.ty) {
                        required.push(Json::String(key.clone()));
                    }
                    properties.insert(key, schema);
                }
                json!({
                    "type": "object",
                    "properties": properties,
                    "required": required,
                    "additionalProperties": false,
                })
            }
            TypeDefKind::List(elem) => {
                if dealias(self.resolve, *elem) == WitType::U8 {
                    json!({
                        "anyOf": [
                            {"type": "string", "contentEncoding": "base64", "pattern": BASE64_PATTERN},
                            {"type": "array", "items": self.schema(&WitType::U8, path)?},
                        ]
                    })
                } else {
                    json!({"type": "array", "items": self.schema(elem, &format!("{path}[*]"))?})
                }
            }
            TypeDefKind::FixedLengthList(elem, n) => json!({
                "type": "array",
                "items": self.schema(elem, &format!("{path}[*]"))?,
                "minItems": n,
                "maxItems": n,
            }),
            TypeDefKind::Map(key, value) => {
                if dealias(self.resolve, *key) == WitType::String {
                    json!({
                        "type": "object",
                        "additionalProperties": self.schema(value, &format!("{path}[*]"))?,
                    })
                } else {
                    let pair = self.tuple(&[*key, *value], &format!("{path}[*]"))?;
                    json!({"type": "array", "items": pair})
                }
            }
            TypeDefKind::Tuple(tuple) => self.tuple(&tuple.types, path)?,
            TypeDefKind::Option(inner) => {
                let some = if self.is_option(inner) {
                    self.tuple(std::slice::from_ref(inner), path)?
                } else {
                    self.schema(inner, path)?
                };
                json!({"anyOf": [{"type": "null"}, some]})
            }
            TypeDefKind::Result(result) => {
                let side = |name: &str, ty: &Option<WitType>| -> Result<Json, Unbridgeable> {
                    let payload = match ty {
                        Some(ty) => self.schema(ty, &format!("{path}.{name}"))?,
                        None => json!({"type": "null"}),
                    };
                    Ok(single_key(name, payload))
                };
                json!({"oneOf": [side("ok", &result.ok)?, side("err", &result.err)?]})
            }
            TypeDefKind::Variant(variant) => {
                let mut alternatives = Vec::new();
                let mut bare = Vec::new();
                for case in &variant.cases {
                    let payload = match &case.ty {
                        Some(ty) => self.schema(ty, &format!("{path}.{}", case.name))?,
                        None => {
                            bare.push(Json::String(case.name.clone()));
                            json!({"type": "null"})
                        }
                    };
                    let mut alternative = single_key(&case.name, payload);
                    if let Some(docs) = docs(&case.docs) {
                        alternative = set_description(alternative, docs);
                    }
                    alternatives.push(alternative);
                }
                if !bare.is_empty() {
                    alternatives.push(json!({"type": "string", "enum": bare}));
                }
                json!({"oneOf": alternatives})
            }
            TypeDefKind::Enum(enum_) => {
                let names: Vec<_> = enum_.cases.iter().map(|c| c.name.clone()).collect();
                json!({"type": "string", "enum": names})
            }
            TypeDefKind::Flags(flags) => {
                let names: Vec<_> = flags.flags.iter().map(|f| f.name.clone()).collect();
                json!({
                    "type": "array",
                    "items": {"type": "string", "enum": names},
                    "uniqueItems": true,
                })
            }
            TypeDefKind::Resource | TypeDefKind::Handle(_) => {
                return Err(not_data("a resource handle", path));
            }
            TypeDefKind::Future(_) => return Err(not_data("a future", path)),
            TypeDefKind::Stream(_) => return Err(not_data("a stream", path)),
            TypeDefKind::Unknown => {
                return Err(Unbridgeable {
                    path: path.to_owned(),
                    message: "a type of unknown structure".to_owned(),
                });
            }
        })
    }

    fn tuple(&self, types: &[WitType], path: &str) -> Result<Json, Unbridgeable> {
        let items = types
            .iter()
            .enumerate()
            .map(|(i, ty)| self.schema(ty, &format!("{path}[{i}]")))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(json!({
            "type": "array",
            "prefixItems": items,
            "items": false,
            "minItems": types.len(),
            "maxItems": types.len(),
        }))
    }

    fn is_option(&self, ty: &WitType) -> bool {
        matches!(dealias(self.resolve, *ty), WitType::Id(id)
            if matches!(self.resolve.types[id].kind, TypeDefKind::Option(_)))
    }
}

fn not_data(what: &str, path: &str) -> Unbridgeable {
    Unbridgeable {
        path: path.to_owned(),
        message: format!(
            "{what} cannot be converted to or from JSON; skill I/O must be plain data \
             (records, lists, strings, numbers...), not resources, futures, streams \
             or error contexts"
        ),
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use wasmtime::component::types::ComponentItem;
    use wasmtime::component::{Component, Type};
    use wasmtime::{Engine, Result};
    use wit_component::{ComponentEncoder, StringEncoding};
    use wit_parser::abi::WasmType;
    use wit_parser::{ManglingAndAbi, Resolve, WasmExport, WasmExportKind, WorldId, WorldItem};

    /// The skill contract, so test worlds can
    /// `use skillhost:skill/types@0.1.0.{skill-error}`.
    const CONTRACT: &str = include_str!("../../../wit/skill.wit");

    /// `wit` (one package with one world) parsed next to the skill contract.
    pub(crate) fn test_resolve(wit: &str) -> (Resolve, WorldId) {
        let mut resolve = Resolve::new();
        resolve
            .push_str("skill.wit", CONTRACT)
            .expect("the skill contract parses");
        let pkg = resolve
            .push_str("test.wit", wit)
            .expect("the test WIT parses");
        let world = resolve
            .select_world(&[pkg], None)
            .expect("the test WIT has one world");
        (resolve, world)
    }

    /// A real component of the world in `wit` (which may use the skill
    /// contract), with a core module whose functions all trap: enough to
    /// read and compile, without any Wasm compiler.
    pub(crate) fn test_component(wit: &str) -> Vec<u8> {
        let (resolve, world) = test_resolve(wit);
        let mut module = dummy_module(&resolve, world);
        wit_component::embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8)
            .expect("embedding the component type");
        ComponentEncoder::default()
            .module(&module)
            .expect("the dummy module is accepted")
            .validate(true)
            .encode()
            .expect("the component encodes")
    }

    /// A core module for `world` whose exported functions all trap, like
    /// `wit_component::dummy_module` (behind a feature this crate does not
    /// enable), for worlds that export only free functions and import no
    /// functions.
    fn dummy_module(resolve: &Resolve, world: WorldId) -> Vec<u8> {
        let mangling = ManglingAndAbi::Standard32;
        let types = |kind: &str, tys: &[WasmType]| -> String {
            let names: Vec<&str> = tys
                .iter()
                .map(|ty| match ty {
                    WasmType::I64 | WasmType::PointerOrI64 => "i64",
                    WasmType::F32 => "f32",
                    WasmType::F64 => "f64",
                    WasmType::I32 | WasmType::Pointer | WasmType::Length => "i32",
                })
                .collect();
            if names.is_empty() {
                String::new()
            } else {
                format!(" ({kind} {})", names.join(" "))
            }
        };
        let mut wat = String::from("(module\n");
        for item in resolve.worlds[world].exports.values() {
            let WorldItem::Function(func) = item else {
                panic!("test worlds may only export free functions");
            };
            let sig = resolve.wasm_signature(mangling.export_variant(), func);
            let export = |kind| {
                resolve.wasm_export_name(
                    mangling,
                    WasmExport::Func {
                        interface: None,
                        func,
                        kind,
                    },
                )
            };
            wat.push_str(&format!(
                "(func (export {:?}){}{} unreachable)\n",
                export(WasmExportKind::Normal),
                types("param", &sig.params),
                types("result", &sig.results),
            ));
            wat.push_str(&format!(
                "(func (export {:?}){})\n",
                export(WasmExportKind::PostReturn),
                types("param", &sig.results),
            ));
        }
        let memory = resolve.wasm_export_name(mangling, WasmExport::Memory);
        let realloc = resolve.wasm_export_name(mangling, WasmExport::Realloc);
        let initialize = resolve.wasm_export_name(mangling, WasmExport::Initialize);
        wat.push_str(&format!(
            "(memory (export {memory:?}) 0)\n\
             (func (export {realloc:?}) (param i32 i32 i32 i32) (result i32) unreachable)\n\
             (func (export {initialize:?})))\n"
        ));
        wat::parse_str(&wat).expect("the dummy module assembles")
    }

    /// The parameter type and the result type of the component's `run`
    /// export, as wasmtime sees them.
    pub(crate) fn run_types(component: &[u8]) -> Result<(Type, Type)> {
        let engine = Engine::default();
        let component = Component::new(&engine, component)?;
        let ty = component.component_type();
        let run = ty
            .exports(&engine)
            .find(|(name, _)| *name == "run")
            .map(|(_, export)| export.ty);
        let Some(ComponentItem::ComponentFunc(func)) = run else {
            wasmtime::bail!("no `run` function export");
        };
        let param = func.params().next().map(|(_, ty)| ty);
        let result = func.results().next();
        match (param, result) {
            (Some(param), Some(result)) => Ok((param, result)),
            _ => wasmtime::bail!("`run` lacks a parameter or a result"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{test_component, test_resolve};
    use super::*;

    const SKILL: &str = r#"
        package test:docs;

        world docs {
            use skillhost:skill/types@0.1.0.{skill-error};

            /// When a paper came out.
            type date = string;

            /// A paper.
            record paper {
                /// The title, as printed.
                title: string,
                published-date: date,
                pages: option<u32>,
            }

            /// What to look for.
            record query {
                /// Search terms.
                terms: list<string>,
                papers: list<paper>,
            }

            record found {
                count: u32,
            }

            export run: func(input: query) -> result<found, skill-error>;
        }
    "#;

    fn error_of(wit: &str) -> SchemaError {
        describe(&test_component(wit)).expect_err("describe should fail")
    }

    #[test]
    fn describes_a_component() {
        let interface = describe(&test_component(SKILL)).unwrap();
        let input = &interface.input_schema;
        assert_eq!(input["$schema"], SCHEMA_DIALECT);
        assert_eq!(input["type"], "object");
        assert_eq!(input["title"], "query");
        assert_eq!(input["additionalProperties"], false);
        assert_eq!(input["required"], json!(["terms", "papers"]));
        let paper = &input["properties"]["papers"]["items"];
        assert_eq!(paper["title"], "paper");
        assert_eq!(paper["required"], json!(["title", "published_date"]));
        assert_eq!(
            paper["properties"]["pages"],
            json!({"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "maximum": 4294967295u32}]})
        );
        assert_eq!(
            paper["properties"]["published_date"],
            json!({"type": "string", "title": "date"})
        );
        assert_eq!(interface.output_schema["title"], "found");
        assert!(jsonschema::meta::is_valid(input));
        assert!(jsonschema::meta::is_valid(&interface.output_schema));

        // The WIT text names the skill's types and the contract, and parses.
        assert!(interface.wit.contains("record paper"), "{}", interface.wit);
        assert!(
            interface.wit.contains("published-date: date"),
            "{}",
            interface.wit
        );
        assert!(
            interface.wit.contains("package skillhost:skill@0.1.0"),
            "{}",
            interface.wit
        );
        let mut resolve = Resolve::new();
        resolve
            .push_str("printed.wit", &interface.wit)
            .unwrap_or_else(|e| panic!("{e:#}\n{}", interface.wit));
        assert!(!interface.world.is_empty());
    }

    #[test]
    fn docs_become_descriptions_when_the_wit_has_them() {
        let (resolve, world) = test_resolve(SKILL);
        let interface = describe_world(&resolve, world).unwrap();
        let input = &interface.input_schema;
        assert_eq!(input["description"], "What to look for.");
        assert_eq!(input["properties"]["terms"]["description"], "Search terms.");
        let paper = &input["properties"]["papers"]["items"];
        assert_eq!(paper["description"], "A paper.");
        assert_eq!(
            paper["properties"]["title"]["description"],
            "The title, as printed."
        );
        assert_eq!(
            paper["properties"]["published_date"]["description"],
            "When a paper came out."
        );
        assert_eq!(interface.world, "docs");
    }

    #[test]
    fn refuses_components_without_run() {
        let wit = r#"
            package test:norun;
            world norun {
                export other: func(x: u32) -> u32;
            }
        "#;
        assert_eq!(error_of(wit), SchemaError::NoRun);
    }

    #[test]
    fn refuses_run_with_the_wrong_signature() {
        let two_params = r#"
            package test:bad;
            world bad {
                use skillhost:skill/types@0.1.0.{skill-error};
                export run: func(a: u32, b: u32) -> result<u32, skill-error>;
            }
        "#;
        let err = error_of(two_params);
        assert!(
            matches!(&err, SchemaError::BadRunSignature { problem, .. } if problem.contains("2 parameters")),
            "{err}"
        );
        assert!(
            err.to_string()
                .contains("func(a: u32, b: u32) -> result<u32, skill-error>"),
            "{err}"
        );

        let plain_result = r#"
            package test:bad;
            world bad {
                export run: func(a: u32) -> u32;
            }
        "#;
        let err = error_of(plain_result);
        assert!(
            err.to_string().contains("does not return a `result`"),
            "{err}"
        );

        let string_error = r#"
            package test:bad;
            world bad {
                export run: func(a: u32) -> result<u32, string>;
            }
        "#;
        let err = error_of(string_error);
        assert!(
            err.to_string().contains("not the `skill-error` record"),
            "{err}"
        );
    }

    #[test]
    fn refuses_resources_in_io() {
        let wit = r#"
            package test:res;
            interface things {
                resource thing;
            }
            world res {
                use skillhost:skill/types@0.1.0.{skill-error};
                use things.{thing};
                record input { name: string, handle: list<own<thing>> }
                export run: func(input: input) -> result<u32, skill-error>;
            }
        "#;
        let err = error_of(wit);
        assert!(
            matches!(&err, SchemaError::Unbridgeable { side: "input", path, .. } if path == "$.handle[*]"),
            "{err:?}"
        );
        assert!(err.to_string().contains("plain data"), "{err}");
    }

    #[test]
    fn refuses_wit_packages() {
        let (resolve, world) = test_resolve(SKILL);
        let pkg = resolve.worlds[world].package.unwrap();
        let bytes = wit_component::encode(&resolve, pkg).unwrap();
        assert_eq!(describe(&bytes), Err(SchemaError::NotAComponent));
        assert!(matches!(describe(b"not wasm"), Err(SchemaError::Decode(_))));
    }
}
