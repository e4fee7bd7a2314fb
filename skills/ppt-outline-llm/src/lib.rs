//! `ppt-outline-llm`: the deck's outline chosen by a language model through
//! the host's `llm` capability, in place of the rule-based `ppt-outline`
//! (same input and output). It owns the prompt, the schema of the answer
//! and reading it; it does not judge whether the outline is enough for a
//! deck: the scenario's postcondition does, for either skill.

// The generated export of a record this wide takes its fields flattened.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("ppt-outline-llm");

use serde_json::Value;
use skillhost_sdk::llm::{self, CompletionRequest, Message, Role};
use skillhost_sdk::log;

/// The system message, the same for every deck.
pub const SYSTEM: &str = "You outline a slide deck. Answer with one JSON object \
{\"sections\": [{\"title\": \"...\", \"points\": [\"...\"]}]}: the content's sections in \
order, each with a short title and its key points as short sentences taken from the \
content. Nothing else.";

/// The heading after which the user message holds the content, to its end.
pub const CONTENT_HEADING: &str = "Content:\n";

struct PptOutlineLlm;

impl Guest for PptOutlineLlm {
    skillhost_sdk::manifest! {
        name: "Slide deck outline (LLM)",
        capabilities: ["llm", "log"],
        // A model may answer off-schema once and fit it the next time.
        retry: { max_attempts: 3, initial_backoff_ms: 1000 },
        estimated_duration_ms: 5000,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let (max_sections, max_points) = (input.max_sections, input.max_points);
        if !(1..=20).contains(&max_points) {
            return Err(SkillError::invalid_input(format!(
                "max_points is {max_points}; give 1 to 20, e.g. 5"
            )));
        }
        if !(1..=50).contains(&max_sections) {
            return Err(SkillError::invalid_input(format!(
                "max_sections is {max_sections}; give 1 to 50, e.g. 12"
            )));
        }
        if input.blocks.is_empty() {
            return Err(SkillError::invalid_input(
                "no block to outline: the content analysis found no text",
            ));
        }
        let title = if input.title.trim().is_empty() {
            input.analysed_title.trim().to_string()
        } else {
            input.title.trim().to_string()
        };
        let request = CompletionRequest {
            messages: vec![
                Message {
                    role: Role::System,
                    content: SYSTEM.to_string(),
                },
                Message {
                    role: Role::User,
                    content: format!(
                        "Deck: {title}\nAt most {max_sections} sections of at most {max_points} points.\n\n\
                         {CONTENT_HEADING}{}",
                        markdown(&input.blocks)
                    ),
                },
            ],
            max_tokens: None,
            temperature: None,
            json_schema: Some(schema(max_sections, max_points)),
        };
        let completion = llm::complete(&request).map_err(|e| e.context("the deck's outline"))?;
        let sections = parse(&completion.content, max_sections, max_points).map_err(|problem| {
            SkillError::retryable(
                "invalid-output",
                format!("model `{}` outlining the deck: {problem}", completion.model),
            )
        })?;
        log::info(format!(
            "ppt-outline-llm: `{title}`: {} answered with {} input and {} output tokens, {} section(s)",
            completion.model,
            completion.input_tokens,
            completion.output_tokens,
            sections.len()
        ));
        Ok(Output { title, sections })
    }
}

export!(PptOutlineLlm);

/// The blocks as Markdown: headings with their `#`s, bullets with `- `,
/// paragraphs as they are, one a line.
pub fn markdown(blocks: &[Block]) -> String {
    let mut out = String::new();
    for block in blocks {
        match block.kind.as_str() {
            "heading" => {
                out.push_str(&"#".repeat(block.level.clamp(1, 6) as usize));
                out.push(' ');
            }
            "bullet" => out.push_str("- "),
            _ => {}
        }
        out.push_str(&block.text);
        out.push('\n');
    }
    out
}

/// The JSON Schema of the answer.
pub fn schema(max_sections: u32, max_points: u32) -> String {
    let text = serde_json::json!({ "type": "string", "minLength": 1, "pattern": "\\S" });
    serde_json::json!({
        "type": "object",
        "properties": {
            "sections": {
                "type": "array", "minItems": 1, "maxItems": max_sections,
                "items": {
                    "type": "object",
                    "properties": {
                        "title": text,
                        "points": { "type": "array", "maxItems": max_points, "items": text }
                    },
                    "required": ["title", "points"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["sections"],
        "additionalProperties": false
    })
    .to_string()
}

/// The sections of an answer, or what is wrong with it.
pub fn parse(content: &str, max_sections: u32, max_points: u32) -> Result<Vec<Section>, String> {
    let start: String = content.chars().take(120).collect();
    let value: Value = serde_json::from_str(content.trim())
        .map_err(|e| format!("the answer is not JSON ({e}): {start:?}"))?;
    let sections = value
        .get("sections")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("the answer has no `sections` list: {start:?}"))?;
    if sections.is_empty() || sections.len() > max_sections as usize {
        return Err(format!(
            "the answer has {} section(s); 1 to {max_sections} were asked for",
            sections.len()
        ));
    }
    sections
        .iter()
        .enumerate()
        .map(|(i, section)| {
            let title = section
                .get("title")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| format!("section {i} has no title"))?;
            let points = section
                .get("points")
                .and_then(Value::as_array)
                .ok_or_else(|| format!("section {i} has no `points` list"))?;
            if points.len() > max_points as usize {
                return Err(format!(
                    "section {i} has {} points; at most {max_points} were asked for",
                    points.len()
                ));
            }
            let points = points
                .iter()
                .map(|p| {
                    p.as_str()
                        .map(|p| p.trim().to_string())
                        .filter(|p| !p.is_empty())
                        .ok_or_else(|| format!("section {i} has a point that is not text"))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok(Section {
                title: title.to_string(),
                points,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_fitting_the_schema_is_read_and_others_are_refused() {
        let got = parse(
            r#"{"sections": [{"title": " A ", "points": ["x", "y"]}]}"#,
            3,
            5,
        )
        .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].title.as_str(), got[0].points.len()), ("A", 2));
        for (bad, why) in [
            ("not json", "not JSON"),
            (r#"{"sections": []}"#, "0 section(s)"),
            (r#"{"sections": [{"title": "", "points": []}]}"#, "no title"),
            (
                r#"{"sections": [{"title": "t", "points": [1]}]}"#,
                "not text",
            ),
            (
                r#"{"sections": [{"title": "t", "points": ["a","b","c","d","e","f"]}]}"#,
                "6 points",
            ),
        ] {
            let problem = parse(bad, 3, 5).unwrap_err();
            assert!(problem.contains(why), "{bad}: {problem}");
        }
    }

    #[test]
    fn blocks_become_markdown_again() {
        let block = |kind: &str, level, text: &str| Block {
            kind: kind.into(),
            level,
            text: text.into(),
            source: "a.md".into(),
        };
        let md = markdown(&[
            block("heading", 2, "H"),
            block("bullet", 0, "b"),
            block("paragraph", 0, "p"),
        ]);
        assert_eq!(md, "## H\n- b\np\n");
    }
}
