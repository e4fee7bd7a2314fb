//! `analytics-plan-llm`: splits a question into sub-tasks with a language
//! model through the host's `llm` capability, in place of the rule-based
//! `analytics-plan` (same input and output). It owns the prompt, the schema
//! of the answer and reading it, and checks every sub-task against what the
//! sources hold (the table's columns, the graph's relations): a model that
//! invents a column is refused here, with `invalid-output`, which the node
//! may retry. It assigns the ids and starts every sub-task without feedback.

skillhost_sdk::generate!(
    "analytics-plan-llm",
    with: { "skillhost:analytics/types@0.1.0": generate },
);

use serde_json::Value;
use skillhost::analytics::types::{Feedback, Source, Task};
use skillhost_sdk::llm::{self, CompletionRequest, Message, Role};
use skillhost_sdk::log;

/// The system message: what the sources hold and the answer's form.
pub const SYSTEM: &str = "You split a question about the Palmer penguins into sub-tasks, \
each answered from one source. Sources: `sql`, a table `penguins` with the measures \
body_mass_g, flipper_length_mm, bill_length_mm, bill_depth_mm (or `count`), grouped by any \
of species, island, sex, year, optionally for one year (2007, 2008, 2009); `graph`, the \
relations `lives-on` (species to island) and `sampled-in` (island to year), optionally \
from named species or islands; `documents`, text about the dataset's origin, licence, \
citation and studies, searched for terms. Answer with one JSON object {\"tasks\": [...]}, \
each task {\"source\", \"topic\", \"measure\", \"group_by\", \"year\", \"terms\", \
\"relation\"} (empty strings, lists or null where a field does not apply). Nothing else.";

/// The heading after which the user message holds the question.
pub const QUESTION_HEADING: &str = "Question:\n";

const MEASURES: [&str; 5] = [
    "count",
    "body_mass_g",
    "flipper_length_mm",
    "bill_length_mm",
    "bill_depth_mm",
];
const GROUPINGS: [&str; 4] = ["species", "island", "sex", "year"];
const RELATIONS: [&str; 2] = ["lives-on", "sampled-in"];
/// At most this many sub-tasks a question.
const MAX_TASKS: usize = 8;

struct AnalyticsPlanLlm;

impl Guest for AnalyticsPlanLlm {
    skillhost_sdk::manifest! {
        name: "Analytics plan (LLM)",
        capabilities: ["llm", "log"],
        // A model may answer off-schema once and fit it the next time.
        retry: { max_attempts: 2, initial_backoff_ms: 200 },
        estimated_duration_ms: 5000,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let question = input.question.trim();
        if question.is_empty() {
            return Err(SkillError::invalid_input("the question is empty"));
        }
        let request = CompletionRequest {
            messages: vec![
                Message {
                    role: Role::System,
                    content: SYSTEM.to_string(),
                },
                Message {
                    role: Role::User,
                    content: format!("{QUESTION_HEADING}{question}"),
                },
            ],
            max_tokens: None,
            temperature: None,
            json_schema: Some(schema()),
        };
        let completion = llm::complete(&request).map_err(|e| e.context("planning the question"))?;
        let tasks = parse(&completion.content).map_err(|problem| {
            SkillError::retryable(
                "invalid-output",
                format!("model `{}`'s plan: {problem}", completion.model),
            )
        })?;
        log::info(format!(
            "analytics-plan-llm: {} answered with {} input and {} output tokens, {} sub-task(s)",
            completion.model,
            completion.input_tokens,
            completion.output_tokens,
            tasks.len()
        ));
        Ok(Output { tasks })
    }
}

export!(AnalyticsPlanLlm);

/// The JSON Schema of the answer.
pub fn schema() -> String {
    let strings = serde_json::json!({ "type": "array", "items": { "type": "string" } });
    serde_json::json!({
        "type": "object",
        "properties": {
            "tasks": {
                "type": "array", "minItems": 1, "maxItems": MAX_TASKS,
                "items": {
                    "type": "object",
                    "properties": {
                        "source": { "enum": ["sql", "documents", "graph"] },
                        "topic": { "type": "string", "minLength": 1 },
                        "measure": { "type": "string" },
                        "group_by": strings,
                        "year": { "type": ["integer", "null"] },
                        "terms": strings,
                        "relation": { "type": "string" }
                    },
                    "required": ["source", "topic"],
                    "additionalProperties": false
                }
            }
        },
        "required": ["tasks"],
        "additionalProperties": false
    })
    .to_string()
}

fn strings(task: &Value, key: &str) -> Result<Vec<String>, String> {
    match task.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(|s| s.trim().to_string())
                    .ok_or_else(|| format!("`{key}` holds {i}, not a string"))
            })
            .collect(),
        Some(other) => Err(format!("`{key}` is {other}, not a list of strings")),
    }
}

fn text(task: &Value, key: &str) -> String {
    task.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// The sub-tasks of an answer, each checked, or what is wrong with it.
pub fn parse(content: &str) -> Result<Vec<Task>, String> {
    let start: String = content.chars().take(120).collect();
    let value: Value = serde_json::from_str(content.trim())
        .map_err(|e| format!("the answer is not JSON ({e}): {start:?}"))?;
    let tasks = value
        .get("tasks")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("the answer has no `tasks` list: {start:?}"))?;
    if tasks.is_empty() || tasks.len() > MAX_TASKS {
        return Err(format!(
            "the answer has {} sub-task(s); 1 to {MAX_TASKS} were asked for",
            tasks.len()
        ));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        let problem = |what: String| format!("sub-task {i}: {what}");
        let source = match text(t, "source").as_str() {
            "sql" => Source::Sql,
            "documents" => Source::Documents,
            "graph" => Source::Graph,
            other => {
                return Err(problem(format!(
                    "source `{other}` is none of sql, documents, graph"
                )));
            }
        };
        let topic = text(t, "topic");
        if topic.is_empty() {
            return Err(problem("has no topic".into()));
        }
        let mut task = Task {
            id: String::new(),
            source,
            topic,
            measure: String::new(),
            group_by: Vec::new(),
            year: None,
            terms: Vec::new(),
            relation: String::new(),
            feedback: Feedback {
                exclude_missing: false,
                drop_groupings: 0,
                any_term: false,
                notes: Vec::new(),
            },
            attempt: 0,
        };
        match source {
            Source::Sql => {
                task.measure = text(t, "measure");
                if !MEASURES.contains(&task.measure.as_str()) {
                    return Err(problem(format!(
                        "measure `{}` is not a column of the table; use {}",
                        task.measure,
                        MEASURES.join(", ")
                    )));
                }
                task.group_by = strings(t, "group_by").map_err(problem)?;
                if task.group_by.is_empty() {
                    task.group_by.push("species".into());
                }
                if let Some(bad) = task
                    .group_by
                    .iter()
                    .find(|g| !GROUPINGS.contains(&g.as_str()))
                {
                    return Err(problem(format!(
                        "`{bad}` is not a grouping column; use {}",
                        GROUPINGS.join(", ")
                    )));
                }
                task.year = match t.get("year") {
                    None | Some(Value::Null) => None,
                    Some(year) => match year.as_u64() {
                        Some(y @ 2007..=2009) => Some(y as u32),
                        _ => return Err(problem(format!("year {year} is not 2007, 2008 or 2009"))),
                    },
                };
            }
            Source::Graph => {
                task.relation = text(t, "relation");
                if !RELATIONS.contains(&task.relation.as_str()) {
                    return Err(problem(format!(
                        "relation `{}` is not in the graph; use {}",
                        task.relation,
                        RELATIONS.join(", ")
                    )));
                }
                task.terms = strings(t, "terms").map_err(problem)?;
            }
            Source::Documents => {
                task.terms = strings(t, "terms").map_err(problem)?;
                task.terms.retain(|term| !term.is_empty());
                if task.terms.is_empty() {
                    return Err(problem(
                        "a documents sub-task needs terms to search for".into(),
                    ));
                }
            }
        }
        let name = match source {
            Source::Sql => "sql",
            Source::Documents => "documents",
            Source::Graph => "graph",
        };
        task.id = format!("{name}-{}", i + 1);
        out.push(task);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost_sdk::llm::Completion;
    use skillhost_sdk::testing;

    fn answer(content: &'static str) {
        testing::set_llm_handler(move |request| {
            assert!(request.messages[1].content.starts_with(QUESTION_HEADING));
            assert!(request.json_schema.is_some());
            Ok(Completion {
                content: content.into(),
                model: "fake".into(),
                input_tokens: 1,
                output_tokens: 1,
            })
        });
    }

    #[test]
    fn a_plan_becomes_checked_sub_tasks() {
        answer(
            r#"{"tasks": [
                {"source": "sql", "topic": "mass", "measure": "body_mass_g", "group_by": ["species", "sex"], "year": null},
                {"source": "graph", "topic": "where", "relation": "lives-on", "terms": []},
                {"source": "documents", "topic": "who", "terms": ["collected"]}]}"#,
        );
        let out = AnalyticsPlanLlm::run(Input {
            question: "q".into(),
        })
        .unwrap();
        let ids: Vec<&str> = out.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["sql-1", "graph-2", "documents-3"]);
        assert_eq!(out.tasks[0].group_by, ["species", "sex"]);
        assert_eq!(out.tasks[1].relation, "lives-on");
    }

    #[test]
    fn an_invented_column_is_refused_naming_it() {
        answer(r#"{"tasks": [{"source": "sql", "topic": "t", "measure": "wingspan_cm"}]}"#);
        let err = AnalyticsPlanLlm::run(Input {
            question: "q".into(),
        })
        .unwrap_err();
        assert_eq!(err.code, "invalid-output");
        assert!(err.retryable);
        assert!(
            err.message.contains("`wingspan_cm` is not a column"),
            "{}",
            err.message
        );
        assert!(parse("not json").unwrap_err().contains("not JSON"));
        assert!(
            parse(r#"{"tasks": []}"#)
                .unwrap_err()
                .contains("0 sub-task(s)")
        );
    }
}
