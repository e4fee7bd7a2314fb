//! The tools the server lists: one per scenario, one per skill, and those
//! that reach a run later by its id (`run_status`, `run_answer`,
//! `run_cancel`); their
//! names, descriptions, JSON Schemas and annotations. Pure: builds
//! definitions, runs nothing.

use std::sync::Arc;

use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};
use skillhost_scenario::{LoadedScenario, Scenario};

use crate::hints::Hints;
use crate::{McpError, SkillTool};

/// The tool that reads a run's status and result by its id.
pub const RUN_STATUS: &str = "run_status";
/// The tool that answers a run waiting at an approval node and continues it.
pub const RUN_ANSWER: &str = "run_answer";
/// The tool that cancels a run.
pub const RUN_CANCEL: &str = "run_cancel";

/// How a skill's JSON is carried in a tool's object arguments and results:
/// MCP wants both to be JSON objects, and a skill's `run` may take or
/// return any WIT type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wrap {
    /// The skill's value is an object: passed as it is.
    Bare,
    /// Anything else: under one property, `input` or `output`.
    Field(&'static str),
}

impl Wrap {
    fn of(schema: &Value, field: &'static str) -> Wrap {
        match schema.get("type").and_then(Value::as_str) {
            Some("object") => Wrap::Bare,
            _ => Wrap::Field(field),
        }
    }

    /// The tool's schema for the skill's `schema`.
    fn schema(self, schema: &Value) -> Value {
        match self {
            Wrap::Bare => schema.clone(),
            Wrap::Field(field) => json!({
                "type": "object",
                "properties": { field: schema },
                "required": [field],
                "additionalProperties": false,
            }),
        }
    }

    pub fn wrap(self, value: Value) -> Value {
        match self {
            Wrap::Bare => value,
            Wrap::Field(field) => json!({ field: value }),
        }
    }

    pub fn unwrap(self, mut value: Value) -> Value {
        match self {
            Wrap::Bare => value,
            Wrap::Field(field) => value
                .as_object_mut()
                .and_then(|o| o.remove(field))
                .unwrap_or(Value::Null),
        }
    }
}

/// One tool the server lists, and what a call of it runs.
pub enum Kind {
    Scenario(Arc<LoadedScenario>),
    /// `scenario_compose` (`compose.rs`): a scenario the client writes.
    Compose,
    Skill {
        index: usize,
        input: Wrap,
        output: Wrap,
    },
    RunStatus,
    RunAnswer,
    RunCancel,
}

pub struct Entry {
    pub tool: Tool,
    pub kind: Kind,
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}

/// A name MCP accepts (letters, digits, `_`, `-`, `.`; 1 to 128 of them).
fn check_name(name: &str, what: &str) -> Result<(), McpError> {
    let fine = !name.is_empty()
        && name.len() <= 128
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    match fine {
        true => Ok(()),
        false => Err(McpError::Tools(format!(
            "{what}: `{name}` is not a name MCP allows for a tool (1 to 128 of A-Z a-z 0-9 _ - .); \
             rename it"
        ))),
    }
}

/// What a scenario's runs may reach: the union of its nodes' grants, its
/// subgraphs' included.
fn scenario_hints(scenario: &Scenario) -> Hints {
    let own = scenario
        .nodes
        .iter()
        .filter_map(|node| node.call())
        .fold(Hints::default(), |hints, call| {
            hints.union(Hints::of(&call.grants))
        });
    scenario
        .subgraphs
        .values()
        .fold(own, |hints, child| hints.union(scenario_hints(child)))
}

/// The artifacts list every run result carries.
fn artifacts_schema() -> Value {
    json!({
        "type": "array",
        "description": "The run's artifacts, each readable as an MCP resource at its uri",
        "items": {
            "type": "object",
            "properties": {
                "uri": {"type": "string"},
                "name": {"type": "string"},
                "mime_type": {"type": "string"},
            },
            "required": ["uri", "name", "mime_type"],
        },
    })
}

/// The result of a run, as a scenario tool and `run_answer` return it.
pub fn run_result_schema(summary: Value) -> Value {
    json!({
        "type": "object",
        "properties": {
            "run_id": {"type": "string", "description": "The run's id: for run_status, run_answer and run_cancel"},
            "status": {"type": "string", "enum": ["completed", "waiting", "queued", "running"]},
            "summary": summary,
            "artifacts": artifacts_schema(),
            "waiting": {
                "type": "object",
                "description": "Where a waiting run waits: answer it with run_answer",
                "properties": {
                    "node": {"type": "string"},
                    "prompt": {"type": "string"},
                    "answer_schema": {"type": "object"},
                },
                "required": ["node", "prompt", "answer_schema"],
            },
        },
        "required": ["run_id", "status"],
    })
}

/// Every tool, in the order listed: scenarios, skills, then the run tools.
pub fn entries(
    scenarios: &[Arc<LoadedScenario>],
    skills: &[SkillTool],
) -> Result<Vec<Entry>, McpError> {
    let mut entries = Vec::new();
    for loaded in scenarios {
        let s = &*loaded.scenario;
        let what = format!("scenario `{}`", s.path.display());
        check_name(&s.name, &what)?;
        let mut description = s.description.clone();
        if !description.is_empty() {
            description.push_str(". ");
        }
        description.push_str(
            "Runs the scenario as a durable, checkpointed run; the result names the run id \
             (see run_status), and the run's artifacts are resources.",
        );
        let tool = Tool::new(s.name.clone(), description, object(s.input_schema.clone()))
            .with_raw_output_schema(object(run_result_schema(s.summary_schema())))
            .with_annotations(scenario_hints(s).annotations(&s.name));
        entries.push(Entry {
            tool,
            kind: Kind::Scenario(loaded.clone()),
        });
    }
    for (index, skill) in skills.iter().enumerate() {
        let s = &skill.skill;
        let what = format!("skill component `{}`", s.name);
        check_name(&s.manifest.id, &what)?;
        let interface = s
            .interface()
            .map_err(|e| McpError::Tools(format!("{what}: cannot read its WIT: {e}")))?;
        let input = Wrap::of(&interface.input_schema, "input");
        let output = Wrap::of(&interface.output_schema, "output");
        // The WIT's doc comments (world and `run`) say the most; a
        // component without them has its manifest's description.
        let description = match (&interface.docs, s.manifest.description.is_empty()) {
            (Some(docs), _) => docs.clone(),
            (None, true) => s.manifest.name.clone(),
            (None, false) => s.manifest.description.clone(),
        };
        let tool = Tool::new(
            s.manifest.id.clone(),
            description,
            object(input.schema(&interface.input_schema)),
        )
        .with_title(s.manifest.name.clone())
        .with_raw_output_schema(object(output.schema(&interface.output_schema)))
        .with_annotations(Hints::of(&skill.grants).annotations(&s.manifest.name));
        entries.push(Entry {
            tool,
            kind: Kind::Skill {
                index,
                input,
                output,
            },
        });
    }
    let run_id = json!({"type": "string", "description": "A run id a scenario tool returned"});
    let status = Tool::new(
        RUN_STATUS,
        "The status of a run a scenario tool started (or any run in this server's store): \
         queued, running, waiting (with what it asks), completed (with its summary), failed \
         or cancelled (with the node and error), and its artifacts.",
        object(json!({
            "type": "object",
            "properties": {"run_id": run_id},
            "required": ["run_id"],
            "additionalProperties": false,
        })),
    )
    .with_annotations(Hints::default().annotations("Run status"));
    let answer = Tool::new(
        RUN_ANSWER,
        "Answer a run waiting at an approval node (its `waiting.answer_schema` says what the \
         answer holds) and continue it; returns the run's result as its scenario tool does.",
        object(json!({
            "type": "object",
            "properties": {
                "run_id": run_id,
                "answer": {"type": "object", "description": "The approval node's answer fields"},
                "by": {"type": "string", "description": "Who answers, recorded with the answer"},
            },
            "required": ["run_id", "answer"],
            "additionalProperties": false,
        })),
    )
    .with_raw_output_schema(object(run_result_schema(json!({"type": "object"}))))
    .with_annotations(ToolHintsForAnswer::annotations(
        scenarios.iter().map(|l| scenario_hints(&l.scenario)),
    ));
    let cancel = Tool::new(
        RUN_CANCEL,
        "Cancel a run: a queued or waiting run at once, a running one at its next node \
         boundary; a finished run is refused.",
        object(json!({
            "type": "object",
            "properties": {
                "run_id": run_id,
                "by": {"type": "string", "description": "Who cancels, recorded with the run"},
            },
            "required": ["run_id"],
            "additionalProperties": false,
        })),
    )
    .with_annotations(
        Hints::default()
            .annotations("Cancel a run")
            .read_only(false)
            .idempotent(true)
            .destructive(true),
    );
    entries.push(Entry {
        tool: status,
        kind: Kind::RunStatus,
    });
    entries.push(Entry {
        tool: cancel,
        kind: Kind::RunCancel,
    });
    entries.push(Entry {
        tool: answer,
        kind: Kind::RunAnswer,
    });
    let mut seen = std::collections::BTreeSet::new();
    for entry in &entries {
        if !seen.insert(entry.tool.name.to_string()) {
            return Err(McpError::Tools(format!(
                "two tools are named `{}` (scenarios and skills are named by their `name` and \
                 manifest id; `{RUN_STATUS}`, `{RUN_ANSWER}` and `{RUN_CANCEL}` are the server's own): offer \
                 only one of them",
                entry.tool.name
            )));
        }
    }
    Ok(entries)
}

/// `run_answer` continues a run of any offered scenario, so it reaches what
/// any of them does, and it writes the answer.
struct ToolHintsForAnswer;

impl ToolHintsForAnswer {
    fn annotations(scenarios: impl Iterator<Item = Hints>) -> rmcp::model::ToolAnnotations {
        let reach = scenarios.fold(Hints::default(), Hints::union);
        reach
            .annotations("Answer a waiting run")
            .read_only(false)
            .idempotent(false)
            .destructive(false)
    }
}
