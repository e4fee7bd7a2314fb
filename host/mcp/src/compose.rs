//! `scenario_compose`: a scenario written by the client, checked before
//! anything runs, then run like any scenario tool (durably, as a task when
//! asked, followed with progress and logs). Only with `host mcp
//! --compose-ceiling FILE`: the operator's ceiling ([`Ceiling`]) bounds
//! what a composed scenario may use, on top of every check of a scenario
//! file (`skillhost_scenario::compose`). A refused scenario is an `isError`
//! result listing every error with its line, node and code; nothing is
//! written, no run row, no instance.
//!
//! What a client needs to write one is served beside the tool: the
//! scenario format's JSON Schema, the offered skills with their WIT-derived
//! schemas and docs, the ceiling, and a worked example, as resources
//! (`skillhost://compose/…`), and a prompt (`compose_scenario`) that
//! gathers them.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    GetPromptResult, JsonObject, Prompt, PromptArgument, PromptMessage, Resource, ResourceContents,
    Role, Tool,
};
use serde_json::{Value, json};
use skillhost_runtime::Runtime;
use skillhost_runtime::capabilities::Effects;
use skillhost_scenario::LoadedScenario;
use skillhost_scenario::compose::{self, Ceiling, NAME_PREFIX, Offered, Source};

use crate::SkillTool;
use crate::hints::Hints;
use crate::tools::run_result_schema;

/// The tool's name.
pub const TOOL: &str = "scenario_compose";
/// The prompt's name.
pub const PROMPT: &str = "compose_scenario";

const PREFIX: &str = "skillhost://compose/";
const SCHEMA_URI: &str = "skillhost://compose/scenario-schema";
const SKILLS_URI: &str = "skillhost://compose/skills";
const CEILING_URI: &str = "skillhost://compose/ceiling";
const EXAMPLE_URI: &str = "skillhost://compose/example";

/// The most composed scenarios kept loaded to continue their runs.
const RELOADED_KEPT: usize = 64;

/// The scenario format's JSON Schema, as `host check` and editors use it.
const SCENARIO_SCHEMA: &str = include_str!("../../../schemas/scenario.schema.json");

/// What `host mcp --compose-ceiling` gives the server.
pub struct ComposeOffer {
    pub ceiling: Ceiling,
    /// Where composed scenarios are kept, each under its SHA-256; the runs'
    /// scenario files.
    pub dir: PathBuf,
    /// The runtime the offered skills were loaded with: its `llm`
    /// providers are what a composed `llm` grant is checked against.
    pub runtime: Runtime,
}

/// The compose tool's state, shared by every session.
pub(crate) struct Composer {
    offered: Offered,
    ceiling: Ceiling,
    dir: PathBuf,
    runtime: Runtime,
    /// Composed scenarios loaded again to continue a run (`run_answer`),
    /// by kept file.
    reloaded: Mutex<HashMap<PathBuf, Arc<LoadedScenario>>>,
}

/// A composed scenario ready to run, and its input.
pub(crate) struct Ready {
    pub loaded: Arc<LoadedScenario>,
    pub input: Value,
    /// The kept text, which the run keeps too (`Provenance::scenario_text`).
    pub text: String,
}

/// What a call of the tool came to before any run: a scenario to run, or
/// the result to return (a refusal, or a dry run's verdict).
pub(crate) enum Prepared {
    Run(Ready),
    Answer(Value, bool),
}

impl Composer {
    pub(crate) fn new(
        offer: ComposeOffer,
        scenarios: &[Arc<LoadedScenario>],
        skills: &[SkillTool],
    ) -> Composer {
        let mut offered = Offered::default();
        for tool in skills {
            let skill = &tool.skill;
            let component = std::path::absolute(&skill.origin)
                .map_or_else(|_| skill.origin.clone(), |p| p.display().to_string());
            offered.add_skill(&skill.manifest.id, component, skill.clone());
        }
        for loaded in scenarios {
            offered.add_scenario(loaded);
        }
        Composer {
            offered,
            ceiling: offer.ceiling,
            dir: offer.dir,
            runtime: offer.runtime,
            reloaded: Mutex::new(HashMap::new()),
        }
    }

    /// The tool as `tools/list` shows it.
    pub(crate) fn tool(&self) -> Tool {
        let input = json!({
            "type": "object",
            "properties": {
                "scenario": {
                    "description": format!(
                        "The scenario: TOML text as a scenario file holds it, or the same \
                         structure as a JSON object. Its name starts with `{NAME_PREFIX}`; its \
                         skills name offered skills by name or `sha256:DIGEST` ({SKILLS_URI}); \
                         its grants stay within the ceiling ({CEILING_URI}); the format is \
                         {SCHEMA_URI}, an example {EXAMPLE_URI}. Anything else is refused \
                         with the reason, as a scenario that does not pass is."
                    ),
                },
                "input": {
                    "type": "object",
                    "description": "The run's input, as the scenario's [input] declares it",
                },
                "dry_run": {
                    "type": "boolean",
                    "description": "Only check the scenario and the input: nothing runs",
                },
            },
            "required": ["scenario"],
            "additionalProperties": false,
        });
        let mut output = run_result_schema(json!({"type": "object"}));
        output["properties"]["scenario_digest"] = json!({
            "type": "string",
            "description": "The composed scenario's SHA-256: the same text is the same scenario",
        });
        output["properties"]["checked"] = json!({
            "type": "boolean",
            "description": "A dry run's verdict: the scenario and input passed every check",
        });
        output["required"] = json!([]);
        let reach = self
            .offered
            .skills()
            .iter()
            .fold(Hints::default(), |hints, s| {
                hints.union(Hints(
                    s.skill
                        .capabilities
                        .iter()
                        .fold(Effects::NONE, |effects, c| effects.union(c.effects())),
                ))
            });
        Tool::new(
            TOOL,
            format!(
                "Compose a scenario from the offered skills and run it durably: the host \
                 checks its types, reachability, bounded cycles, fail routes and budgets, and \
                 the operator's ceiling on skills, grants and limits, before anything runs; a \
                 scenario that does not pass comes back with every error (line, node, code) \
                 and nothing runs. Read {SKILLS_URI} for the skills and their schemas, \
                 {CEILING_URI} for what is allowed, {EXAMPLE_URI} for a worked example."
            ),
            object(input),
        )
        .with_title("Compose and run a scenario")
        .with_raw_output_schema(object(output))
        .with_annotations(
            reach
                .annotations("Compose and run a scenario")
                .read_only(false),
        )
    }

    /// Checks a call's arguments: the scenario against everything, then
    /// the input against the scenario's `[input]`; keeps the scenario's
    /// text before it is run. Runs nothing.
    pub(crate) fn prepare(&self, arguments: &Value) -> Prepared {
        let source = match &arguments["scenario"] {
            Value::String(text) => Source::Toml(text.clone()),
            Value::Object(_) => Source::Json(arguments["scenario"].clone()),
            _ => {
                return refused(
                    "compose-format",
                    "`scenario` must be TOML text or a JSON object".into(),
                );
            }
        };
        let composed = match compose::compose(
            source,
            &self.offered,
            &self.ceiling,
            &self.dir,
            &self.runtime,
        ) {
            Ok(composed) => composed,
            Err(refusal) => return Prepared::Answer(compose::refusal_json(&refusal), true),
        };
        let scenario = &composed.loaded.scenario;
        let mut input = arguments.get("input").cloned().unwrap_or(json!({}));
        scenario.apply_input_defaults(&mut input);
        if let Err(problem) = scenario.validate_input(&input) {
            return refused(
                "invalid-input",
                format!("the input does not fit the scenario's [input]: {problem}"),
            );
        }
        let digest = scenario.digest.clone();
        if arguments["dry_run"].as_bool() == Some(true) {
            let warnings: Vec<Value> = composed
                .loaded
                .warnings
                .iter()
                .map(compose::diagnostic_json)
                .collect();
            return Prepared::Answer(
                json!({"checked": true, "scenario_digest": digest, "warnings": warnings}),
                false,
            );
        }
        if let Err(e) = skillhost_engine::keep_text(&composed.path, &composed.text) {
            return refused(
                "io",
                format!(
                    "the server cannot keep the scenario at `{}`: {e}; nothing ran",
                    composed.path.display()
                ),
            );
        }
        Prepared::Run(Ready {
            loaded: Arc::new(composed.loaded),
            input,
            text: composed.text,
        })
    }

    /// The composed scenario kept at `path` (a run's scenario file), loaded
    /// again to continue its run: `None` if `path` is not one of this
    /// server's composed scenarios.
    pub(crate) fn reload(&self, path: &str) -> Option<Result<Arc<LoadedScenario>, String>> {
        let path = Path::new(path);
        if path.parent() != Some(self.dir.as_path()) {
            return None;
        }
        if let Some(loaded) = self.lock().get(path) {
            return Some(Ok(loaded.clone()));
        }
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) => return Some(Err(format!("cannot read `{}`: {e}", path.display()))),
        };
        let loaded = match compose::compose(
            Source::Toml(text),
            &self.offered,
            &self.ceiling,
            &self.dir,
            &self.runtime,
        ) {
            Ok(composed) if composed.path == path => Arc::new(composed.loaded),
            Ok(_) => {
                return Some(Err(format!(
                    "`{}` does not hold the scenario its name says",
                    path.display()
                )));
            }
            Err(refusal) => {
                return Some(Err(format!("it no longer passes here: {}", refusal.report)));
            }
        };
        let mut reloaded = self.lock();
        // Bounded: clients compose without end, and a scenario dropped
        // here is only loaded again when its run is next answered.
        if reloaded.len() >= RELOADED_KEPT {
            reloaded.clear();
        }
        reloaded.insert(path.to_path_buf(), loaded.clone());
        Some(Ok(loaded))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Arc<LoadedScenario>>> {
        self.reloaded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The resources a client reads to write a scenario.
    pub(crate) fn resources(&self) -> Vec<Resource> {
        let json = "application/json";
        vec![
            Resource::new(SCHEMA_URI, "scenario-schema")
                .with_description("JSON Schema of a scenario (TOML tables as JSON)")
                .with_mime_type(json),
            Resource::new(SKILLS_URI, "compose-skills")
                .with_description(
                    "The skills a composed scenario may use: name, digest, what to write as \
                     its component, capabilities, WIT-derived input and output schemas, docs",
                )
                .with_mime_type(json),
            Resource::new(CEILING_URI, "compose-ceiling")
                .with_description("The most a composed scenario may use: skills, grants, limits")
                .with_mime_type(json),
            Resource::new(EXAMPLE_URI, "compose-example")
                .with_description("A worked example of a composed scenario and its call")
                .with_mime_type("text/markdown"),
        ]
    }

    /// `resources/read` of a compose resource; `None` if `uri` is none.
    pub(crate) fn read(&self, uri: &str) -> Option<ResourceContents> {
        if !uri.starts_with(PREFIX) {
            return None;
        }
        let text = match uri {
            SCHEMA_URI => SCENARIO_SCHEMA.to_string(),
            SKILLS_URI => pretty(&self.skills_json()),
            CEILING_URI => pretty(&self.ceiling.to_json()),
            EXAMPLE_URI => self.example(),
            _ => return None,
        };
        let mime = if uri == EXAMPLE_URI {
            "text/markdown"
        } else {
            "application/json"
        };
        Some(ResourceContents::text(text, uri).with_mime_type(mime))
    }

    fn skills_json(&self) -> Value {
        let allowed = |name: &str, digest: &str| {
            self.ceiling.skills.as_ref().is_none_or(|allow| {
                allow
                    .iter()
                    .any(|a| a == name || *a == format!("sha256:{digest}"))
            })
        };
        let skills: Vec<Value> = self
            .offered
            .skills()
            .iter()
            .filter(|s| allowed(&s.name, &s.skill.digest))
            .map(|s| {
                let skill = &s.skill;
                let (input, output, docs) = match skill.interface() {
                    Ok(i) => (
                        i.input_schema.clone(),
                        i.output_schema.clone(),
                        i.docs.clone(),
                    ),
                    Err(_) => (Value::Null, Value::Null, None),
                };
                json!({
                    "name": s.name,
                    "component": s.name,
                    "digest": format!("sha256:{}", skill.digest),
                    "description": docs.unwrap_or_else(|| skill.manifest.description.clone()),
                    "capabilities": skill
                        .capabilities
                        .iter()
                        .map(|c| c.name())
                        .collect::<Vec<_>>(),
                    "input_schema": input,
                    "output_schema": output,
                })
            })
            .collect();
        json!({ "skills": skills })
    }

    /// A worked example built from an offered skill that needs no grant
    /// (else the first): its required input fields come from the run's
    /// input, and its limits are within the ceiling's, so that it passes on
    /// this server as written when the ceiling allows that skill.
    fn example(&self) -> String {
        let skills = self.offered.skills();
        let pick = skills
            .iter()
            .find(|s| s.skill.capabilities.is_empty())
            .or(skills.first());
        let Some(skill) = pick else {
            return "This server offers no skill to compose.".to_string();
        };
        let name = &skill.name;
        let schema = skill
            .skill
            .interface()
            .map(|i| i.input_schema.clone())
            .unwrap_or(Value::Null);
        let required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut inputs = String::new();
        let mut mapping = Vec::new();
        let mut call_input = serde_json::Map::new();
        for field in required {
            let kind = schema["properties"][field]["type"]
                .as_str()
                .filter(|kind| {
                    matches!(*kind, "string" | "integer" | "number" | "boolean" | "array")
                })
                .unwrap_or("object");
            inputs.push_str(&format!("{field} = {{ type = \"{kind}\" }}\n"));
            mapping.push(format!("{field} = \"input.{field}\""));
            let sample = match kind {
                "string" => json!("hello"),
                "integer" | "number" => json!(1),
                "boolean" => json!(true),
                "array" => json!([]),
                _ => json!({}),
            };
            call_input.insert(field.to_string(), sample);
        }
        let limits = &self.ceiling.limits;
        let mut node_limits = format!(
            "timeout_ms = {}\n",
            limits.timeout_ms.unwrap_or(5000).min(5000)
        );
        if let Some(fuel) = limits.fuel {
            node_limits.push_str(&format!("fuel = {fuel}\n"));
        }
        if let Some(mb) = limits.memory_mb {
            node_limits.push_str(&format!("memory_mb = {}\n", mb.min(256)));
        }
        let scenario = format!(
            r#"[scenario]
name = "{NAME_PREFIX}example"
description = "Calls {name} once and keeps what it returns"

[input]
{inputs}
[state]
result = {{ type = "any" }}

[skills.step]
component = "{name}"

[[node]]
id = "call"
skill = "step"
input = {{ {mapping} }}
writes = [{{ field = "result", from = "output" }}]
{node_limits}
[[node]]
id = "done"
kind = "end"

[[edge]]
from = "call"
to = "done"
"#,
            mapping = mapping.join(", ")
        );
        let call = json!({
            "name": TOOL,
            "arguments": {"scenario": scenario, "input": call_input, "dry_run": true},
        });
        format!(
            r#"# Composing a scenario

A composed scenario is a scenario file (docs/scenarios.md; its JSON Schema is
{SCHEMA_URI}) whose skills are the ones this server offers, named by their
names or digests ({SKILLS_URI}). This one passes here as written:

```toml
{scenario}```

Every node but `end` and `fail` nodes has an outgoing `[[edge]]`; a node's
`input` maps each field of its skill's `input_schema` to a CEL expression
over `input`, `state` and `config`; `writes` put the skill's `output` into
`[state]`. The checker names every field that does not fit, with its line.
Check it without running (`dry_run`), then run it without:

```json
{call}
```

A run is durable (as a task when the call asks for one); its result names
its `run_id`, for `run_status`, `run_answer` and `run_cancel`.

Rules on top of the format: the name starts with `{NAME_PREFIX}`; every
grant (`capabilities`) and limit stays within {CEILING_URI}; no
`[[schedule]]` or `[trust]`; a subgraph node's `scenario` names an offered
scenario tool.
"#
        )
    }

    /// The prompt as `prompts/list` shows it.
    pub(crate) fn prompt() -> Prompt {
        Prompt::new(
            PROMPT,
            Some(
                "Write a scenario for a goal from this server's skills, and run it with \
                 scenario_compose",
            ),
            Some(vec![
                PromptArgument::new("goal")
                    .with_description("What the scenario should do")
                    .with_required(true),
            ]),
        )
    }

    /// `prompts/get` of the prompt, for `goal`.
    pub(crate) fn get_prompt(&self, goal: &str) -> GetPromptResult {
        let text = format!(
            "Write a Skillhost scenario that does this: {goal}\n\n\
             Use only these skills (name, capabilities, input and output JSON Schemas):\n{}\n\n\
             Stay within this ceiling:\n{}\n\n\
             {}\n\
             Then call `{TOOL}` with the scenario (first with `dry_run: true`); if it is \
             refused, fix each error at its line and call again.",
            pretty(&self.skills_json()),
            pretty(&self.ceiling.to_json()),
            self.example()
        );
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, text)])
            .with_description(format!("Compose a scenario: {goal}"))
    }
}

/// A refusal found here rather than by the checker: one error, no line.
fn refused(code: &str, message: String) -> Prepared {
    Prepared::Answer(
        json!({"ok": false, "errors": [{"code": code, "line": null, "node": null, "message": message}]}),
        true,
    )
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

fn object(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(JsonObject::new()),
    }
}
