//! What the skill sends: the system prompt, the user message built from the
//! paper, and the JSON Schema of the answer. The bounds on the answer's lists
//! are the constants below, which the parser enforces; the schema and the
//! prompt are literals that state them too, and a unit test keeps the three
//! in step.

/// Bounds on the answer's lists: `(fewest, most)` entries.
pub const CONTRIBUTIONS: (usize, usize) = (1, 3);
pub const FINDINGS: (usize, usize) = (1, 3);
pub const LIMITATIONS: (usize, usize) = (0, 3);
pub const QUOTES: (usize, usize) = (1, 5);

/// The system message, the same for every paper.
pub const SYSTEM: &str = "\
You summarise one research paper, from its title and abstract, for a literature review. \
Answer with one JSON object and nothing else, with exactly these fields:
- \"main_contributions\": 1 to 3 short statements of what the paper contributes, in your own words.
- \"methodology\": one or two sentences on how the work was done, in your own words.
- \"key_findings\": 1 to 3 sentences of the abstract that report results, each copied word for word.
- \"limitations\": 0 to 3 sentences of the abstract that state limitations or open problems, each \
copied word for word; [] when the abstract states none.
- \"quotes\": 1 to 5 passages copied word for word from the abstract that support your \
contributions and methodology.
Copy sentences and quotes exactly as the abstract has them: do not fix, shorten, join or reword \
them, and do not change numbers. Every quote is checked against the abstract, and an answer with \
a quote that is not in it is rejected. Use only the title and the abstract.";

/// The JSON Schema the answer must fit, passed as the request's
/// `json-schema`. A literal, so the request (which the host journals) is the
/// same bytes in every build: `serde_json`'s key order depends on features
/// another crate of the workspace may turn on.
pub const SCHEMA: &str = concat!(
    r#"{"type":"object","#,
    r#""properties":{"#,
    r#""main_contributions":{"type":"array","items":{"type":"string","minLength":1},"minItems":1,"maxItems":3},"#,
    r#""methodology":{"type":"string","minLength":1},"#,
    r#""key_findings":{"type":"array","items":{"type":"string","minLength":1},"minItems":1,"maxItems":3},"#,
    r#""limitations":{"type":"array","items":{"type":"string","minLength":1},"minItems":0,"maxItems":3},"#,
    r#""quotes":{"type":"array","items":{"type":"string","minLength":1},"minItems":1,"maxItems":5}"#,
    r#"},"#,
    r#""required":["main_contributions","methodology","key_findings","limitations","quotes"],"#,
    r#""additionalProperties":false}"#,
);

/// The line after which the user message holds the abstract, verbatim, to
/// its end.
pub const ABSTRACT_HEADING: &str = "Abstract:\n";

/// The user message: the paper's id and title on one line each, a blank
/// line, [`ABSTRACT_HEADING`], then the abstract exactly as the corpus has
/// it.
pub fn user_message(id: &str, title: &str, abstract_: &str) -> String {
    format!("Paper: {id}\nTitle: {title}\n\n{ABSTRACT_HEADING}{abstract_}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn schema() -> Value {
        serde_json::from_str(SCHEMA).expect("the schema is JSON")
    }

    #[test]
    fn the_schema_lists_every_field_as_required_and_nothing_else() {
        let schema = schema();
        assert_eq!(schema["type"], "object");
        assert_eq!(schema["additionalProperties"], false);
        let required: Vec<&str> = schema["required"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(required, crate::answer::FIELDS);
        let properties = schema["properties"].as_object().unwrap();
        let mut names: Vec<&str> = properties.keys().map(String::as_str).collect();
        names.sort_unstable();
        let mut fields = crate::answer::FIELDS.to_vec();
        fields.sort_unstable();
        assert_eq!(names, fields);
        assert_eq!(properties["methodology"]["type"], "string");
    }

    #[test]
    fn the_schema_and_the_prompt_state_the_limits_the_parser_enforces() {
        let schema = schema();
        for (field, (min, max)) in [
            ("main_contributions", CONTRIBUTIONS),
            ("key_findings", FINDINGS),
            ("limitations", LIMITATIONS),
            ("quotes", QUOTES),
        ] {
            let property = &schema["properties"][field];
            assert_eq!(property["type"], "array", "{field}");
            assert_eq!(property["items"]["type"], "string", "{field}");
            assert_eq!(property["minItems"], min as u64, "{field}");
            assert_eq!(property["maxItems"], max as u64, "{field}");
            assert!(
                SYSTEM.contains(&format!("\"{field}\": {min} to {max} ")),
                "the prompt does not give {field}'s bounds {min} to {max}"
            );
        }
    }

    #[test]
    fn the_abstract_is_the_end_of_the_user_message_verbatim() {
        let abstract_ = "  First sentence.\nSecond: with Abstract:\n inside. ";
        let message = user_message("p-1", "A title", abstract_);
        assert_eq!(
            message,
            format!("Paper: p-1\nTitle: A title\n\nAbstract:\n{abstract_}")
        );
        let (_, rest) = message.split_once(ABSTRACT_HEADING).unwrap();
        assert_eq!(rest, abstract_);
    }
}
