//! JSON Schema validation: compile a schema once, validate many values, and
//! report every violation at a JSON path a person can read
//! (`$.papers[3].title`), not a JSON Pointer.
//!
//! Schemas without `$schema` are read as draft 2020-12, the dialect of every
//! schema Skillhost produces. No remote `$ref` is ever fetched.

use std::fmt;

use serde_json::Value;

/// How many violations one report lists; the rest are counted.
const MAX_LISTED: usize = 20;

/// A schema ready to validate values. Cheap to share between threads.
pub struct CompiledSchema {
    validator: jsonschema::Validator,
}

impl fmt::Debug for CompiledSchema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledSchema").finish_non_exhaustive()
    }
}

/// A schema that is not a valid JSON Schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON Schema at {path}: {message}")]
pub struct SchemaError {
    pub path: String,
    pub message: String,
}

/// One place where a value does not fit its schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// `$` for the value itself, `$.papers[3].title` inside it.
    pub path: String,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Every violation found in one value (at most [`MAX_LISTED`] listed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Violations {
    pub violations: Vec<Violation>,
    /// Violations beyond those listed.
    pub more: usize,
}

impl fmt::Display for Violations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, v) in self.violations.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{v}")?;
        }
        if self.more > 0 {
            write!(f, "; and {} more", self.more)?;
        }
        Ok(())
    }
}

impl CompiledSchema {
    pub fn compile(schema: &Value) -> Result<CompiledSchema, SchemaError> {
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .build(schema)
            .map_err(|e| SchemaError {
                path: json_path(schema, e.instance_path.as_str()),
                message: e.to_string(),
            })?;
        Ok(CompiledSchema { validator })
    }

    pub fn is_valid(&self, value: &Value) -> bool {
        self.validator.is_valid(value)
    }

    /// Every way `value` does not fit, each at its path.
    pub fn validate(&self, value: &Value) -> Result<(), Violations> {
        if self.validator.is_valid(value) {
            return Ok(());
        }
        let mut violations = Vec::new();
        let mut more = 0;
        for error in self.validator.iter_errors(value) {
            if violations.len() == MAX_LISTED {
                more += 1;
                continue;
            }
            violations.push(Violation {
                path: json_path(value, error.instance_path.as_str()),
                message: error.to_string(),
            });
        }
        Err(Violations { violations, more })
    }
}

/// Validates `value` against `schema` in one go; the error lists every
/// violation (or says the schema itself is invalid). Compiles the schema on
/// every call: for a schema used more than once, keep a [`CompiledSchema`].
pub fn validate(schema: &Value, value: &Value) -> Result<(), String> {
    let compiled = CompiledSchema::compile(schema).map_err(|e| e.to_string())?;
    compiled.validate(value).map_err(|v| v.to_string())
}

/// A JSON Pointer into `root` as a JSONPath-like string: `/papers/3/title`
/// is `$.papers[3].title` when `papers` is an array, and keys that are not
/// identifiers are quoted (`$["a b"]`).
pub fn json_path(root: &Value, pointer: &str) -> String {
    let mut out = String::from("$");
    let mut current = Some(root);
    if pointer.is_empty() {
        return out;
    }
    for raw in pointer.trim_start_matches('/').split('/') {
        let segment = raw.replace("~1", "/").replace("~0", "~");
        match current {
            Some(Value::Array(items)) if segment.parse::<usize>().is_ok() => {
                let index: usize = segment.parse().unwrap_or_default();
                out.push_str(&format!("[{index}]"));
                current = items.get(index);
            }
            other => {
                if is_plain_key(&segment) {
                    out.push('.');
                    out.push_str(&segment);
                } else {
                    out.push_str(&format!("[{}]", Value::String(segment.clone())));
                }
                current = other.and_then(|v| v.get(&segment));
            }
        }
    }
    out
}

fn is_plain_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn papers_schema() -> CompiledSchema {
        CompiledSchema::compile(&json!({
            "type": "object",
            "properties": {
                "papers": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": { "title": { "type": "string", "minLength": 1 } },
                        "required": ["title"]
                    }
                },
                "a b": { "type": "integer" }
            },
            "additionalProperties": false
        }))
        .unwrap()
    }

    #[test]
    fn valid_values_pass() {
        let schema = papers_schema();
        assert!(
            schema
                .validate(&json!({"papers": [{"title": "x"}]}))
                .is_ok()
        );
        assert!(schema.is_valid(&json!({})));
    }

    #[test]
    fn errors_name_json_paths() {
        let schema = papers_schema();
        let value = json!({
            "papers": [{"title": "a"}, {"title": "b"}, {"title": "c"}, {"title": ""}, {}],
            "a b": "seven"
        });
        let err = schema.validate(&value).unwrap_err();
        let paths: Vec<&str> = err.violations.iter().map(|v| v.path.as_str()).collect();
        assert!(paths.contains(&"$.papers[3].title"), "{paths:?}");
        assert!(paths.contains(&"$.papers[4]"), "{paths:?}");
        assert!(paths.contains(&"$[\"a b\"]"), "{paths:?}");
        assert!(err.to_string().contains("$.papers[3].title: "), "{err}");
    }

    #[test]
    fn object_keys_that_look_like_numbers_stay_keys() {
        let value = json!({"3": {"x": 1}});
        assert_eq!(json_path(&value, "/3/x"), "$[\"3\"].x");
        assert_eq!(json_path(&value, ""), "$");
        assert_eq!(json_path(&json!({"a/b": 1}), "/a~1b"), "$[\"a/b\"]");
    }

    #[test]
    fn bad_schemas_are_refused() {
        let err = CompiledSchema::compile(&json!({"type": "strnig"})).unwrap_err();
        assert!(
            err.to_string().starts_with("invalid JSON Schema at "),
            "{err}"
        );
    }

    #[test]
    fn long_reports_are_capped() {
        let schema =
            CompiledSchema::compile(&json!({"type": "array", "items": {"type": "string"}}))
                .unwrap();
        let err = schema
            .validate(&json!((0..30).collect::<Vec<_>>()))
            .unwrap_err();
        assert_eq!(err.violations.len(), MAX_LISTED);
        assert_eq!(err.more, 10);
        assert!(err.to_string().ends_with("; and 10 more"));
    }
}
