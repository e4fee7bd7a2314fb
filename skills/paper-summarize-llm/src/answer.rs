//! Reading the model's answer: one JSON object with exactly the fields of
//! [`crate::prompt::SCHEMA`], within its limits. Whatever the schema refuses
//! is refused here too, so the skill behaves the same whether or not the
//! provider and the host enforced the schema first. The texts are kept as the
//! model wrote them: whether the quotes are really in the abstract is for the
//! scenario's citation check, not for this module.

use serde_json::{Map, Value};

use crate::prompt::{CONTRIBUTIONS, FINDINGS, LIMITATIONS, QUOTES};

/// The answer's fields, in the schema's `required` order.
pub const FIELDS: [&str; 5] = [
    "main_contributions",
    "methodology",
    "key_findings",
    "limitations",
    "quotes",
];

/// How much of a bad answer an error message shows.
const EXCERPT_CHARS: usize = 200;

/// The model's summary of a paper.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub main_contributions: Vec<String>,
    pub methodology: String,
    pub key_findings: Vec<String>,
    pub limitations: Vec<String>,
    pub quotes: Vec<String>,
}

/// Parses `content`. `Err` says everything that is wrong with it, for people
/// (the caller makes it an `invalid-output` error).
pub fn parse(content: &str) -> Result<Answer, String> {
    let value: Value = serde_json::from_str(content.trim())
        .map_err(|e| format!("the answer is not JSON ({e}): {}", excerpt(content)))?;
    let Value::Object(object) = value else {
        return Err(format!(
            "the answer is {}, not a JSON object: {}",
            kind(&value),
            excerpt(content)
        ));
    };

    let mut problems = Vec::new();
    let missing: Vec<&str> = FIELDS
        .iter()
        .copied()
        .filter(|f| !object.contains_key(*f))
        .collect();
    if !missing.is_empty() {
        problems.push(format!("it lacks {}", names(&missing)));
    }
    let mut unknown: Vec<&str> = object
        .keys()
        .map(String::as_str)
        .filter(|k| !FIELDS.contains(k))
        .collect();
    unknown.sort_unstable();
    if !unknown.is_empty() {
        problems.push(format!("it has unknown {}", names(&unknown)));
    }

    // In the schema's order, so the problems are listed in it too.
    let main_contributions = noted(
        &mut problems,
        strings(&object, "main_contributions", CONTRIBUTIONS),
    );
    let methodology = noted(&mut problems, string(&object, "methodology"));
    let key_findings = noted(&mut problems, strings(&object, "key_findings", FINDINGS));
    let limitations = noted(&mut problems, strings(&object, "limitations", LIMITATIONS));
    let quotes = noted(&mut problems, strings(&object, "quotes", QUOTES));

    match (
        main_contributions,
        methodology,
        key_findings,
        limitations,
        quotes,
    ) {
        (
            Some(main_contributions),
            Some(methodology),
            Some(key_findings),
            Some(limitations),
            Some(quotes),
        ) if problems.is_empty() => Ok(Answer {
            main_contributions,
            methodology,
            key_findings,
            limitations,
            quotes,
        }),
        _ => Err(format!(
            "the answer does not fit the schema: {}",
            problems.join("; ")
        )),
    }
}

/// The value of a field that passed its check; a problem it has is added
/// to `problems` (a missing field has none: it is reported with the others).
fn noted<T>(problems: &mut Vec<String>, checked: Result<T, Option<String>>) -> Option<T> {
    checked.map_err(|problem| problems.extend(problem)).ok()
}

/// The non-blank string in `field`. `Err(None)`: the field is missing
/// (reported once, with the others).
fn string(object: &Map<String, Value>, field: &str) -> Result<String, Option<String>> {
    match object.get(field) {
        None => Err(None),
        Some(Value::String(text)) if !text.trim().is_empty() => Ok(text.clone()),
        Some(Value::String(_)) => Err(Some(format!("`{field}` is empty"))),
        Some(other) => Err(Some(format!(
            "`{field}` must be a string, but it is {}",
            kind(other)
        ))),
    }
}

/// The list of strings in `field`, with `min` to `max` non-blank entries.
/// `Err(None)`: the field is missing (reported once, with the others).
fn strings(
    object: &Map<String, Value>,
    field: &str,
    (min, max): (usize, usize),
) -> Result<Vec<String>, Option<String>> {
    let items = match object.get(field) {
        None => return Err(None),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(Some(format!(
                "`{field}` must be a list of strings, but it is {}",
                kind(other)
            )));
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match item {
            Value::String(text) if !text.trim().is_empty() => out.push(text.clone()),
            Value::String(_) => return Err(Some(format!("`{field}[{i}]` is empty"))),
            other => {
                return Err(Some(format!(
                    "`{field}[{i}]` must be a string, but it is {}",
                    kind(other)
                )));
            }
        }
    }
    if out.len() < min || out.len() > max {
        return Err(Some(format!(
            "`{field}` has {} entr{}, but must have {min} to {max}",
            out.len(),
            if out.len() == 1 { "y" } else { "ies" }
        )));
    }
    Ok(out)
}

fn names(fields: &[&str]) -> String {
    let list = fields
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if fields.len() == 1 {
        format!("field {list}")
    } else {
        format!("fields {list}")
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

/// The start of `content`, quoted, for an error message.
fn excerpt(content: &str) -> String {
    let mut chars = content.chars();
    let head: String = chars.by_ref().take(EXCERPT_CHARS).collect();
    if chars.next().is_some() {
        format!("{head:?}…")
    } else {
        format!("{head:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{
        "main_contributions": ["A retriever that cites its passages."],
        "methodology": "It verifies each claim with an entailment model.",
        "key_findings": ["Results show a 7.4 point gain."],
        "limitations": [],
        "quotes": ["We propose CiteRAG.", "Concretely, CiteRAG verifies each claim."]
    }"#;

    #[test]
    fn reads_every_field_as_written() {
        let answer = parse(GOOD).unwrap();
        assert_eq!(
            answer,
            Answer {
                main_contributions: vec!["A retriever that cites its passages.".into()],
                methodology: "It verifies each claim with an entailment model.".into(),
                key_findings: vec!["Results show a 7.4 point gain.".into()],
                limitations: vec![],
                quotes: vec![
                    "We propose CiteRAG.".into(),
                    "Concretely, CiteRAG verifies each claim.".into()
                ],
            }
        );
    }

    #[test]
    fn keeps_texts_unchanged() {
        let answer = parse(
            r#"{"main_contributions":[" x "],"methodology":"m\n","key_findings":["f"],
                "limitations":["l"],"quotes":["  spaced  quote "]}"#,
        )
        .unwrap();
        assert_eq!(answer.main_contributions, [" x "]);
        assert_eq!(answer.methodology, "m\n");
        assert_eq!(answer.quotes, ["  spaced  quote "]);
    }

    #[test]
    fn text_that_is_not_json_is_named_with_an_excerpt() {
        let err = parse("Sure! Here is the summary: {\"quotes\": []}").unwrap_err();
        assert!(err.starts_with("the answer is not JSON ("), "{err}");
        assert!(
            err.ends_with("\"Sure! Here is the summary: {\\\"quotes\\\": []}\""),
            "{err}"
        );
        let long = "x".repeat(500);
        let err = parse(&long).unwrap_err();
        assert!(err.ends_with(&format!("\"{}\"…", "x".repeat(200))), "{err}");
        let err = parse("[1, 2]").unwrap_err();
        assert!(
            err.starts_with("the answer is a list, not a JSON object"),
            "{err}"
        );
    }

    #[test]
    fn names_every_missing_unknown_or_mistyped_field_at_once() {
        let err = parse(
            r#"{"main_contributions":"one","methodology":3,"key_findings":[],
                "summary":"x","paper_id":"p"}"#,
        )
        .unwrap_err();
        assert_eq!(
            err,
            "the answer does not fit the schema: it lacks fields `limitations`, `quotes`; \
             it has unknown fields `paper_id`, `summary`; \
             `main_contributions` must be a list of strings, but it is a string; \
             `methodology` must be a string, but it is a number; \
             `key_findings` has 0 entries, but must have 1 to 3"
        );
    }

    #[test]
    fn enforces_the_schema_limits() {
        let with = |field: &str, value: &str| {
            let mut object: Map<String, Value> = serde_json::from_str(GOOD).unwrap();
            object.insert(field.into(), serde_json::from_str(value).unwrap());
            parse(&Value::Object(object).to_string())
        };
        assert_eq!(
            with("quotes", "[]").unwrap_err(),
            "the answer does not fit the schema: `quotes` has 0 entries, but must have 1 to 5"
        );
        assert!(
            with("quotes", r#"["a","b","c","d","e","f"]"#)
                .unwrap_err()
                .contains("`quotes` has 6 entries, but must have 1 to 5")
        );
        assert!(
            with("limitations", r#"["a","b","c","d"]"#)
                .unwrap_err()
                .contains("`limitations` has 4 entries, but must have 0 to 3")
        );
        assert!(
            with("key_findings", r#"["ok", " "]"#)
                .unwrap_err()
                .contains("`key_findings[1]` is empty")
        );
        assert!(
            with("main_contributions", r#"["ok", null]"#)
                .unwrap_err()
                .contains("`main_contributions[1]` must be a string, but it is null")
        );
        assert!(
            with("methodology", r#""  ""#)
                .unwrap_err()
                .contains("`methodology` is empty")
        );
        assert!(with("limitations", r#"["a","b","c"]"#).is_ok());
    }
}
