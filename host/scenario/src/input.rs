//! The run input: the `[input]` table's fields, the JSON Schema they make,
//! and their defaults.

use serde_json::{Map, Value, json};

use super::FieldType;
use super::file::InputFieldDecl;
use skillhost_runtime::schema::SCHEMA_DIALECT;

/// One field of the run input.
#[derive(Debug, Clone, PartialEq)]
pub struct InputField {
    pub name: String,
    pub ty: FieldType,
    /// Whether a run must give it; a field with a default never needs to.
    pub required: bool,
    pub default: Option<Value>,
    pub description: String,
    /// The field's JSON Schema, constraints included.
    pub schema: Value,
    pub line: usize,
}

impl InputField {
    pub(crate) fn from_decl(name: &str, decl: &InputFieldDecl, line: usize) -> InputField {
        let mut schema = Map::new();
        if let Some(ty) = json_type(decl.ty) {
            schema.insert("type".into(), ty.into());
        }
        if !decl.description.is_empty() {
            schema.insert("description".into(), decl.description.clone().into());
        }
        let constraints = [
            ("minLength", decl.min_length.map(Value::from)),
            ("maxLength", decl.max_length.map(Value::from)),
            ("minimum", decl.minimum.clone().map(Value::Number)),
            ("maximum", decl.maximum.clone().map(Value::Number)),
            ("pattern", decl.pattern.clone().map(Value::String)),
            ("enum", decl.allowed.clone().map(Value::Array)),
            (
                "items",
                decl.items
                    .and_then(json_type)
                    .map(|ty| json!({ "type": ty })),
            ),
            ("default", decl.default.clone()),
        ];
        for (key, value) in constraints {
            if let Some(value) = value {
                schema.insert(key.into(), value);
            }
        }
        InputField {
            name: name.to_string(),
            ty: decl.ty,
            required: decl.required && decl.default.is_none(),
            default: decl.default.clone(),
            description: decl.description.clone(),
            schema: Value::Object(schema),
            line,
        }
    }
}

/// The JSON Schema `type` of a field type; `None` for `any`.
pub(crate) fn json_type(ty: FieldType) -> Option<&'static str> {
    match ty {
        FieldType::Any => None,
        other => Some(other.name()),
    }
}

/// The run input's schema: an object of exactly these fields.
pub(crate) fn schema(fields: &[InputField]) -> Value {
    let properties: Map<String, Value> = fields
        .iter()
        .map(|f| (f.name.clone(), f.schema.clone()))
        .collect();
    let required: Vec<Value> = fields
        .iter()
        .filter(|f| f.required)
        .map(|f| Value::String(f.name.clone()))
        .collect();
    json!({
        "$schema": SCHEMA_DIALECT,
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

pub(crate) fn apply_defaults(fields: &[InputField], input: &mut Value) {
    let Value::Object(input) = input else {
        return;
    };
    for field in fields {
        if let Some(default) = &field.default
            && !input.contains_key(&field.name)
        {
            input.insert(field.name.clone(), default.clone());
        }
    }
}
