//! What people do to runs from outside them: answer a run that waits at an
//! approval node, and cancel a run.
//!
//! An answer is checked against the shape the wait recorded (its JSON
//! Schema, with the fields' defaults filled in first) before anything is
//! written; the store records it, with who gave it and when, in the
//! transaction that queues the run again, and only while the run still
//! waits there (answering twice, or after the deadline, is refused there
//! too, whatever raced). Continuing the run is not done here: it is a
//! resume ([`Engine::resume`], or a worker's claim).
//!
//! Must not: run a node, or write an answer that does not fit.

use serde_json::{Map, Value, json};

use crate::{Engine, EngineError, Event, FailureCode};
use skillhost_scenario::checks::schema::CompiledSchema;
use skillhost_store::{Cancelled, RunStatus, format_ms};

/// An answer as recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct Answered {
    pub run_id: String,
    /// The approval node it answers.
    pub node_id: String,
    /// The checkpoint the run waited at, and continues from.
    pub seq: u64,
    /// The answer, defaults filled in.
    pub answer: Value,
    pub by: String,
}

impl Engine {
    /// Records `answer` by `by` for run `run_id`, which must be waiting at
    /// an approval node, and queues the run again: a worker, or
    /// [`Engine::resume`], continues it from the node's boundary with the
    /// answer. The answer must be a JSON object that fits the node's
    /// `answer` fields (their defaults are filled in first); one that does
    /// not is [`EngineError::InvalidAnswer`] and nothing is written.
    pub async fn answer(
        &self,
        run_id: &str,
        mut answer: Value,
        by: &str,
    ) -> Result<Answered, EngineError> {
        let store = self.store.as_ref().ok_or_else(|| EngineError::Internal {
            run: run_id.to_string(),
            message: "answering a run needs the database that holds it".into(),
        })?;
        let run = store
            .run(run_id)
            .await?
            .ok_or_else(|| EngineError::UnknownRun(run_id.to_string()))?;
        // Its last wait: the one it waits in, or the one answered last.
        let wait = store.waits(run_id).await?.pop();
        let wait = match (run.status, wait) {
            (RunStatus::Waiting, Some(wait)) if wait.seq == run.last_seq => wait,
            (status, Some(wait)) if wait.answer.is_some() => {
                return Err(EngineError::AlreadyAnswered {
                    id: run_id.to_string(),
                    node: wait.node_id,
                    by: wait.answered_by.unwrap_or_default(),
                    at: wait.answered_at_ms.map(format_ms).unwrap_or_default(),
                    status: status.as_str().to_string(),
                });
            }
            (status, _) => {
                return Err(EngineError::NotWaiting {
                    id: run_id.to_string(),
                    status: status.as_str().to_string(),
                });
            }
        };
        if let Some(deadline) = wait.deadline_ms
            && wait.is_due(crate::run::now_ms())
        {
            return Err(EngineError::WaitTimedOut {
                id: run_id.to_string(),
                node: wait.node_id,
                deadline: format_ms(deadline),
            });
        }
        let invalid = |message: String| EngineError::InvalidAnswer {
            id: run_id.to_string(),
            node: wait.node_id.clone(),
            message,
            fields: describe_fields(&wait.answer_schema),
        };
        apply_defaults(&wait.answer_schema, &mut answer);
        let schema = CompiledSchema::compile(&wait.answer_schema)
            .map_err(|e| invalid(format!("its recorded shape is not usable: {e}")))?;
        schema
            .validate(&answer)
            .map_err(|violations| invalid(violations.to_string()))?;
        skillhost_store::check_nesting(&answer, || "the answer".into())
            .map_err(|e| invalid(e.to_string()))?;
        skillhost_store::failpoint::hit(|| format!("before-answer:{}", wait.node_id));
        store
            .answer_wait(run_id, wait.seq, &answer, by)
            .await
            .map_err(EngineError::Store)?;
        skillhost_store::failpoint::hit(|| format!("after-answer:{}", wait.node_id));
        self.emit(|| Event::RunAnswered {
            run_id: run_id.to_string(),
            node: wait.node_id.clone(),
            seq: wait.seq,
            by: by.to_string(),
        });
        Ok(Answered {
            run_id: run_id.to_string(),
            node_id: wait.node_id,
            seq: wait.seq,
            answer,
            by: by.to_string(),
        })
    }

    /// Cancels run `run_id` on behalf of `by`: a queued or waiting run ends
    /// as `cancelled` now; a running one at its next node boundary, where
    /// its runner (this process or another, a worker included) finds its
    /// checkpoint refused. A finished run is
    /// [`EngineError::NothingToCancel`], with nothing changed. The run's
    /// unfinished child runs (subgraph nodes) are cancelled with it.
    pub async fn cancel(&self, run_id: &str, by: &str) -> Result<Cancelled, EngineError> {
        let store = self.store.as_ref().ok_or_else(|| EngineError::Internal {
            run: run_id.to_string(),
            message: "cancelling a run needs the database that holds it".into(),
        })?;
        let cancelled = self.cancel_one(store, run_id, by).await?;
        // A subgraph node's child run is part of its parent: cancelling the
        // parent cancels the children still going, at their next node
        // boundary (they run inside the parent's node), and so down their
        // own subgraphs. The child ending as cancelled fails the parent's
        // node, whose checkpoint the parent's own cancel request refuses.
        // The tree is walked with a list, not by recursion: its depth is
        // whatever the store holds.
        let mut seen = std::collections::HashSet::from([run_id.to_string()]);
        let mut below = store.children(run_id).await?;
        below.reverse();
        while let Some(child) = below.pop() {
            if child.status.is_finished() || !seen.insert(child.id.clone()) {
                continue;
            }
            match self.cancel_one(store, &child.id, by).await {
                Ok(_) => {
                    let mut grandchildren = store.children(&child.id).await?;
                    grandchildren.reverse();
                    below.extend(grandchildren);
                }
                // It finished in between: nothing left to cancel.
                Err(EngineError::NothingToCancel { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(cancelled)
    }

    /// [`Engine::cancel`] of one run, without its children.
    async fn cancel_one(
        &self,
        store: &skillhost_store::Store,
        run_id: &str,
        by: &str,
    ) -> Result<Cancelled, EngineError> {
        let run = store
            .run(run_id)
            .await?
            .ok_or_else(|| EngineError::UnknownRun(run_id.to_string()))?;
        if run.status.is_finished() {
            return Err(EngineError::NothingToCancel {
                id: run_id.to_string(),
                status: run.status.as_str().to_string(),
            });
        }
        let error = json!({
            "code": FailureCode::Cancelled,
            "message": format!(
                "cancelled by `{by}` while it was {} (at node `{}`, checkpoint {})",
                run.status,
                run.current_node.as_deref().unwrap_or("-"),
                run.last_seq
            ),
            "by": by,
            "node": run.current_node,
        });
        skillhost_store::failpoint::hit(|| "before-cancel".into());
        let cancelled = store.cancel_run(run_id, by, &error).await?;
        skillhost_store::failpoint::hit(|| "after-cancel".into());
        if let Cancelled::Now(_) = cancelled {
            // No process holds it to end its trace: this one does.
            crate::traced::run_ended_unheld(&run, None, Some(&error));
            self.emit(|| Event::RunFinished {
                run_id: run_id.to_string(),
                status: RunStatus::Cancelled.as_str().to_string(),
                duration_ms: 0,
            });
        }
        Ok(cancelled)
    }
}

/// Adds the default of every field of `schema` (an object schema's
/// `properties`) that `answer` lacks. Anything but an object is left for
/// validation to report.
fn apply_defaults(schema: &Value, answer: &mut Value) {
    let (Some(properties), Value::Object(answer)) =
        (schema.get("properties").and_then(Value::as_object), answer)
    else {
        return;
    };
    for (name, field) in properties {
        if let Some(default) = field.get("default")
            && !answer.contains_key(name)
        {
            answer.insert(name.clone(), default.clone());
        }
    }
}

/// The fields of an answer shape in words: "`approved` (boolean,
/// required), `comment` (string, default \"\")".
pub fn describe_fields(schema: &Value) -> String {
    let empty = Map::new();
    let properties = schema
        .get("properties")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let fields: Vec<String> = properties
        .iter()
        .map(|(name, field)| {
            let ty = field.get("type").and_then(Value::as_str).unwrap_or("any");
            let how = match field.get("default") {
                Some(default) => format!("default {default}"),
                None if required.contains(&name.as_str()) => "required".into(),
                None => "optional".into(),
            };
            format!("`{name}` ({ty}, {how})")
        })
        .collect();
    match fields.is_empty() {
        true => "no fields".into(),
        false => format!("the fields {}", fields.join(", ")),
    }
}
