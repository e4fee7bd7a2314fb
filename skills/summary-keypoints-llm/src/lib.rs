//! `summary-keypoints-llm`: the key points of one chunk chosen by a language
//! model through the host's `llm` capability, in place of the rule-based
//! `summary-keypoints` (same input and output). It owns the prompt, the
//! schema of the answer and reading it; it does not judge the quotes: the
//! summary writer's node checks every quote against its chunk, so a model
//! that paraphrases or invents one fails the run there, visibly.

// The generated export of a record this wide takes its fields flattened.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("summary-keypoints-llm");

use serde_json::Value;
use skillhost_sdk::llm::{self, CompletionRequest, Message, Role};
use skillhost_sdk::log;

/// The system message, the same for every chunk.
pub const SYSTEM: &str = "You pick the key points of a passage for a summary. \
Answer with one JSON object {\"points\": [{\"quote\": \"...\"}]}: the passage's most \
important sentences, most important first, each copied exactly, character for character, \
from the passage (whole sentences, no changes, no ellipses). Nothing else.";

/// The heading after which the user message holds the chunk's text, to its end.
pub const TEXT_HEADING: &str = "Text:\n";

struct SummaryKeypointsLlm;

impl Guest for SummaryKeypointsLlm {
    skillhost_sdk::manifest! {
        name: "Summary key points (LLM)",
        capabilities: ["llm", "log"],
        // A model may answer off-schema once and fit it the next time.
        retry: { max_attempts: 3, initial_backoff_ms: 1000 },
        estimated_duration_ms: 5000,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let chunk = input.chunk;
        let max = input.max_points;
        if !(1..=10).contains(&max) {
            return Err(SkillError::invalid_input(format!(
                "max_points is {max}; give 1 to 10, e.g. 2"
            )));
        }
        if chunk.text.trim().is_empty() {
            return Err(SkillError::invalid_input(format!(
                "chunk `{}` is empty: there is nothing to pick from",
                chunk.id
            )));
        }
        let request = CompletionRequest {
            messages: vec![
                Message {
                    role: Role::System,
                    content: SYSTEM.to_string(),
                },
                Message {
                    role: Role::User,
                    content: format!(
                        "Chunk: {}\nAt most {max} points.\n\n{TEXT_HEADING}{}",
                        chunk.id, chunk.text
                    ),
                },
            ],
            max_tokens: None,
            temperature: None,
            json_schema: Some(schema(max)),
        };
        let completion = llm::complete(&request)
            .map_err(|e| e.context(format!("key points of chunk `{}`", chunk.id)))?;
        let quotes = parse(&completion.content, max).map_err(|problem| {
            SkillError::retryable(
                "invalid-output",
                format!(
                    "model `{}` on chunk `{}`: {problem}",
                    completion.model, chunk.id
                ),
            )
        })?;
        let points: Vec<KeyPoint> = quotes
            .into_iter()
            .enumerate()
            .map(|(rank, quote)| point(&chunk, quote, max as i32 - rank as i32))
            .collect();
        log::info(format!(
            "summary-keypoints-llm: chunk `{}`: {} answered with {} input and {} output tokens, {} point(s)",
            chunk.id,
            completion.model,
            completion.input_tokens,
            completion.output_tokens,
            points.len()
        ));
        Ok(Output {
            chunk_id: chunk.id,
            source: chunk.source,
            points,
        })
    }
}

export!(SummaryKeypointsLlm);

/// The JSON Schema of the answer: 1 to `max` non-blank quotes.
pub fn schema(max: u32) -> String {
    serde_json::json!({
        "type": "object",
        "properties": {
            "points": {
                "type": "array", "minItems": 1, "maxItems": max,
                "items": {
                    "type": "object",
                    "properties": { "quote": { "type": "string", "minLength": 1, "pattern": "\\S" } },
                    "required": ["quote"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["points"],
        "additionalProperties": false
    })
    .to_string()
}

/// The quotes of an answer, or what is wrong with it.
pub fn parse(content: &str, max: u32) -> Result<Vec<String>, String> {
    let start: String = content.chars().take(120).collect();
    let value: Value = serde_json::from_str(content.trim())
        .map_err(|e| format!("the answer is not JSON ({e}): {start:?}"))?;
    let points = value
        .get("points")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("the answer has no `points` list: {start:?}"))?;
    if points.is_empty() || points.len() > max as usize {
        return Err(format!(
            "the answer has {} point(s); 1 to {max} were asked for",
            points.len()
        ));
    }
    points
        .iter()
        .enumerate()
        .map(|(i, p)| {
            p.get("quote")
                .and_then(Value::as_str)
                .filter(|q| !q.trim().is_empty())
                .map(|q| q.trim().to_string())
                .ok_or_else(|| format!("point {i} has no non-blank `quote`: {p}"))
        })
        .collect()
}

/// A key point from the model's quote at `score`, located in the chunk if
/// the chunk holds it exactly.
fn point(chunk: &Chunk, quote: String, score: i32) -> KeyPoint {
    let mut rules = vec![format!("model-rank:{score}")];
    let (start, end) = match chunk.text.find(&quote) {
        Some(at) => {
            let start = chunk.text[..at].chars().count() as u32;
            (start, start + quote.chars().count() as u32)
        }
        None => {
            rules.push("not-in-chunk:0".to_string());
            (0, 0)
        }
    };
    KeyPoint {
        chunk_id: chunk.id.clone(),
        quote,
        start,
        end,
        score,
        rules,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost_sdk::llm::Completion;
    use skillhost_sdk::testing;

    fn input(max_points: u32) -> Input {
        Input {
            chunk: Chunk {
                id: "a.md#1".into(),
                source: "a.md".into(),
                start: 0,
                end: 40,
                text: "Rivers carry sediment. Déltas grow at the coast.".into(),
            },
            max_points,
        }
    }

    fn answer(content: &'static str) {
        testing::set_llm_handler(move |request| {
            assert_eq!(request.messages.len(), 2);
            assert!(
                request.messages[1]
                    .content
                    .ends_with("Déltas grow at the coast.")
            );
            Ok(Completion {
                content: content.into(),
                model: "test/model".into(),
                input_tokens: 10,
                output_tokens: 5,
            })
        });
    }

    #[test]
    fn returns_the_model_s_quotes_ranked_and_located() {
        answer(r#"{"points": [{"quote": "Déltas grow at the coast."}, {"quote": "Made up."}]}"#);
        let out = SummaryKeypointsLlm::run(input(2)).unwrap();
        let got: Vec<(&str, u32, u32, i32)> = out
            .points
            .iter()
            .map(|p| (p.quote.as_str(), p.start, p.end, p.score))
            .collect();
        assert_eq!(
            got,
            [
                ("Déltas grow at the coast.", 23, 48, 2),
                ("Made up.", 0, 0, 1)
            ]
        );
        assert_eq!(out.points[1].rules, ["model-rank:1", "not-in-chunk:0"]);
    }

    #[test]
    fn an_answer_off_the_schema_is_a_retryable_error() {
        answer(r#"{"points": []}"#);
        let e = SummaryKeypointsLlm::run(input(2)).unwrap_err();
        assert_eq!(e.code, "invalid-output");
        assert!(e.retryable);
        assert!(e.message.contains("0 point(s)"), "{}", e.message);
        assert!(parse("not json", 2).unwrap_err().contains("not JSON"));
        assert_eq!(
            SummaryKeypointsLlm::run(input(0)).unwrap_err().code,
            "invalid-input"
        );
    }
}
