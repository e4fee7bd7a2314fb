//! What the kinds of node share around a call: the variables expressions
//! see, the input mapping, pre- and postconditions (citation checks
//! included), the extra input and output schemas, writes and artifacts.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::failure::FailureCode;
use crate::kinds::NodeFailure;
use crate::{RunContext, state};
use skillhost_runtime::Skill;
use skillhost_scenario::checks::citations::{CitationInputs, check_citations};
use skillhost_scenario::{
    ArtifactEncoding, ArtifactSpec, Condition, Node, PostCheck, SkillCall, Vars, Write,
};
use skillhost_store::{NewArtifact, RunState};

/// The variables every expression of a node sees.
pub(crate) fn base_vars(cx: &RunContext<'_>, node: &Node, state: &Arc<RunState>) -> Vars {
    let mut vars = Vars::new();
    vars.set_shared("input", cx.input.clone())
        .set_state("state", state.clone())
        .set_shared("config", node_config(cx, node));
    vars
}

/// The `config` a node's expressions see.
pub(crate) fn node_config(cx: &RunContext<'_>, node: &Node) -> Arc<Value> {
    cx.configs
        .nodes
        .get(&node.id)
        .cloned()
        .unwrap_or_else(|| Arc::new(Value::Object(node.config.clone())))
}

/// Checks `value` against the node's extra `input_schema` / `output_schema`.
pub(crate) fn check_constraints(
    node: &Node,
    side: &str,
    constraints: Option<&skillhost_scenario::checks::schema::CompiledSchema>,
    value: &Value,
) -> Result<(), NodeFailure> {
    let Some(schema) = constraints else {
        return Ok(());
    };
    let code = if side == "input" {
        FailureCode::InputConstraintFailed
    } else {
        FailureCode::OutputConstraintFailed
    };
    schema.validate(value).map_err(|violations| {
        NodeFailure::new(
            code,
            format!(
                "node `{}`: the skill's {side} does not satisfy `{side}_schema`: {violations}",
                node.id
            ),
        )
    })
}

/// Evaluates a node's input mapping into the input object of what it
/// calls (a skill, a child run).
pub(crate) fn map_input(
    node: &Node,
    mapping: &[(String, skillhost_scenario::Expr)],
    vars: &Vars,
) -> Result<Value, NodeFailure> {
    let mut input = Map::new();
    for (field, expr) in mapping {
        let value = expr.eval(vars).map_err(|e| {
            NodeFailure::new(
                FailureCode::InputMappingFailed,
                format!("node `{}`: input field `{field}`: {e}", node.id),
            )
        })?;
        input.insert(field.clone(), value);
    }
    Ok(Value::Object(input))
}

pub(crate) fn check_pre(node: &Node, pre: &[Condition], vars: &Vars) -> Result<(), NodeFailure> {
    for condition in pre {
        match condition.expr.eval_bool(vars) {
            Ok(true) => {}
            Ok(false) => {
                return Err(NodeFailure::new(
                    FailureCode::PreconditionFailed,
                    format!(
                        "node `{}`: precondition `{}` failed: {}",
                        node.id, condition.name, condition.message
                    ),
                ));
            }
            Err(e) => {
                return Err(NodeFailure::new(
                    FailureCode::PreconditionError,
                    format!("node `{}`: precondition `{}`: {e}", node.id, condition.name),
                ));
            }
        }
    }
    Ok(())
}

/// Runs the postconditions with `output` bound; returns the verified citations.
pub(crate) fn check_post(
    node: &Node,
    post: &[PostCheck],
    vars: &Vars,
) -> Result<Vec<Value>, NodeFailure> {
    let mut verified = Vec::new();
    for check in post {
        match check {
            PostCheck::Condition(condition) => match condition.expr.eval_bool(vars) {
                Ok(true) => {}
                Ok(false) => {
                    return Err(NodeFailure::new(
                        FailureCode::PostconditionFailed,
                        format!(
                            "node `{}`: postcondition `{}` failed: {}",
                            node.id, condition.name, condition.message
                        ),
                    ));
                }
                Err(e) => {
                    return Err(NodeFailure::new(
                        FailureCode::PostconditionError,
                        format!(
                            "node `{}`: postcondition `{}`: {e}",
                            node.id, condition.name
                        ),
                    ));
                }
            },
            PostCheck::Citations(spec) => {
                let eval_list = |expr: &skillhost_scenario::Expr,
                                 what: &str|
                 -> Result<Vec<Value>, NodeFailure> {
                    match expr.eval(vars) {
                        Ok(Value::Array(items)) => Ok(items),
                        Ok(other) => Err(NodeFailure::new(
                            FailureCode::CitationCheckError,
                            format!(
                                "node `{}`: citation check: `{}` ({what}) is {}, not a list",
                                node.id,
                                expr.source,
                                state::kind(&other)
                            ),
                        )),
                        Err(e) => Err(NodeFailure::new(
                            FailureCode::CitationCheckError,
                            format!("node `{}`: citation check: {what}: {e}", node.id),
                        )),
                    }
                };
                let inputs = CitationInputs {
                    claims: eval_list(&spec.claims, "claims")?,
                    sources: eval_list(&spec.sources, "sources")?,
                    cites: spec.cites.clone(),
                    source_id: spec.source_id.clone(),
                    quote: spec.quote.clone(),
                    source_text: spec.source_text.clone(),
                    min_per_claim: spec.min_per_claim,
                    quote_rule: spec.quote_rule,
                };
                let quotes = check_citations(&inputs).map_err(|e| {
                    let mut failure = NodeFailure::new(
                        FailureCode::CitationCheckFailed,
                        format!("node `{}`: {e}", node.id),
                    );
                    failure.detail = json!({ "check": "citations" });
                    failure
                })?;
                verified.extend(quotes.into_iter().map(|q| json!(q)));
            }
        }
    }
    Ok(verified)
}

/// Evaluates the node's artifacts (with `output` bound) into files.
pub(crate) fn artifacts(
    node: &Node,
    specs: &[ArtifactSpec],
    vars: &Vars,
) -> Result<Vec<NewArtifact>, NodeFailure> {
    specs
        .iter()
        .map(|spec| match spec.from.eval(vars) {
            Ok(Value::String(text)) => Ok(NewArtifact {
                name: spec.name.clone(),
                media_type: spec.media_type.clone(),
                bytes: artifact_bytes(node, spec, text)?,
            }),
            Ok(other) => Err(NodeFailure::new(
                FailureCode::ArtifactFailed,
                format!(
                    "node `{}`: artifact `{}` ({}) gave {}, not a string",
                    node.id,
                    spec.name,
                    spec.from.source,
                    state::kind(&other)
                ),
            )),
            Err(e) => Err(NodeFailure::new(
                FailureCode::ArtifactFailed,
                format!("node `{}`: artifact `{}`: {e}", node.id, spec.name),
            )),
        })
        .collect()
}

/// An artifact's string as the bytes its `encoding` says it is.
fn artifact_bytes(node: &Node, spec: &ArtifactSpec, text: String) -> Result<Vec<u8>, NodeFailure> {
    match spec.encoding {
        ArtifactEncoding::Utf8 => Ok(text.into_bytes()),
        ArtifactEncoding::Base64 => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text.as_bytes())
                .map_err(|e| {
                    NodeFailure::new(
                        FailureCode::ArtifactFailed,
                        format!(
                            "node `{}`: artifact `{}` ({}) is declared `encoding = \"base64\"` \
                             but its string is not base64 (standard alphabet, padded): {e}",
                            node.id, spec.name, spec.from.source
                        ),
                    )
                })
        }
    }
}

/// Turns the node's writes into state changes.
pub(crate) fn writes(
    cx: &RunContext<'_>,
    node: &Node,
    writes: &[Write],
    vars: &Vars,
    state: &RunState,
) -> Result<Vec<skillhost_store::StateChange>, NodeFailure> {
    let mut changes = Vec::with_capacity(writes.len());
    for write in writes {
        let value = write.from.eval(vars).map_err(|e| {
            NodeFailure::new(
                FailureCode::WriteFailed,
                format!("node `{}`: write to `{}`: {e}", node.id, write.field),
            )
        })?;
        let change = state::change_for(cx.scenario, state, &write.field, &write.reducer, value)
            .map_err(|e| {
                NodeFailure::new(FailureCode::WriteFailed, format!("node `{}`: {e}", node.id))
            })?;
        changes.push(change);
    }
    Ok(changes)
}

/// The loaded skill `call` runs.
pub(crate) fn skill_of(
    cx: &RunContext<'_>,
    node: &Node,
    call: &SkillCall,
) -> Result<Arc<Skill>, NodeFailure> {
    cx.loaded.skills.get(&call.skill).cloned().ok_or_else(|| {
        NodeFailure::new(
            FailureCode::UnknownSkill,
            format!("node `{}` has no loaded skill", node.id),
        )
    })
}
