//! The run state and the reducers that change it.
//!
//! A node never edits the state in place: its `writes` become
//! [`StateChange`]s, which are type-checked against the declared fields, applied
//! to the live state, and stored as the checkpoint's delta. The store rebuilds
//! states with the same [`apply`], so what is replayed is exactly what ran.

use std::sync::Arc;

use serde_json::Value;

pub(crate) use skillhost_model::state::kind;
use skillhost_scenario::{FieldType, Reducer, Scenario};
use skillhost_store::{RunState, StateChange};

/// Turns one write into a change, checking the declared type of the field.
pub fn change_for(
    scenario: &Scenario,
    state: &RunState,
    field: &str,
    reducer: &Reducer,
    value: Value,
) -> Result<StateChange, String> {
    let declared = scenario
        .state
        .iter()
        .find(|f| f.name == field)
        .map(|f| &f.ty);
    let ty = match (declared, field) {
        (Some(ty), _) => ty,
        (None, "errors") => &FieldType::Array,
        (None, _) => return Err(format!("state field `{field}` is not declared in [state]")),
    };
    match reducer {
        Reducer::Replace => {
            check_type(field, ty, &value)?;
            Ok(StateChange::Set {
                field: field.to_string(),
                value,
            })
        }
        Reducer::Append => {
            if !matches!(ty, FieldType::Array | FieldType::Any) {
                return Err(format!(
                    "cannot append to `{field}`: it is declared as {ty:?}, not an array"
                ));
            }
            if let Some(current) = state.get(field)
                && !current.is_array()
                && !current.is_null()
            {
                return Err(format!(
                    "cannot append to `{field}`: it currently holds {}",
                    kind(current)
                ));
            }
            let items = match value {
                Value::Array(items) => items,
                other => vec![other],
            };
            Ok(StateChange::Append {
                field: field.to_string(),
                items,
            })
        }
        Reducer::Merge => {
            if !matches!(ty, FieldType::Object | FieldType::Any) {
                return Err(format!(
                    "cannot merge into `{field}`: it is declared as {ty:?}, not an object"
                ));
            }
            match value {
                Value::Object(map) => Ok(StateChange::Merge {
                    field: field.to_string(),
                    value: map,
                }),
                other => Err(format!(
                    "cannot merge {} into `{field}`: merge takes an object",
                    kind(&other)
                )),
            }
        }
    }
}

/// What a field held before a node's changes, to put it back.
enum Prior {
    /// The old value, shared (`None`: the field was absent).
    Value(Option<Arc<Value>>),
    /// An array that was only appended to: its old length.
    Len(usize),
}

/// Undoes [`apply_with_undo`]: only the fields a node touched are kept, and an
/// appended array only by its length, so a node costs what it changed.
pub struct Undo {
    fields: Vec<(String, Prior)>,
}

/// Applies `changes` in place and returns how to undo them, so the engine
/// need not copy the whole state to evaluate rules on the state a node would
/// leave behind. A field that is replaced or merged into is kept by sharing
/// its old value, not by copying it.
pub fn apply_with_undo(state: &mut RunState, changes: &[StateChange]) -> Undo {
    let mut fields: Vec<(String, Prior)> = Vec::new();
    for change in changes {
        let field = change.field();
        if fields.iter().any(|(f, _)| f == field) {
            continue;
        }
        let only_appends = changes
            .iter()
            .filter(|c| c.field() == field)
            .all(|c| matches!(c, StateChange::Append { .. }));
        let prior = match state.get(field) {
            Some(Value::Array(items)) if only_appends => Prior::Len(items.len()),
            _ => Prior::Value(state.field(field).cloned()),
        };
        fields.push((field.to_string(), prior));
    }
    state.apply(changes);
    Undo { fields }
}

impl Undo {
    pub fn revert(self, state: &mut RunState) {
        for (field, prior) in self.fields {
            match prior {
                Prior::Value(Some(old)) => state.restore(&field, old),
                Prior::Value(None) => {
                    state.remove(&field);
                }
                Prior::Len(len) => {
                    if let Some(Value::Array(items)) = state.get_mut(&field) {
                        items.truncate(len);
                    }
                }
            }
        }
    }
}

fn check_type(field: &str, ty: &FieldType, value: &Value) -> Result<(), String> {
    if ty.accepts(value) {
        Ok(())
    } else {
        Err(format!(
            "state field `{field}` is declared as {ty:?} but the write produced {}",
            kind(value)
        ))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn undo_puts_back_every_field_a_node_touched() {
        let before = RunState::from_value(json!({"a": 1, "log": ["x"], "m": {"k": 1}}));
        let mut state = before.clone();
        let undo = apply_with_undo(
            &mut state,
            &[
                StateChange::Set {
                    field: "a".into(),
                    value: json!(2),
                },
                StateChange::Append {
                    field: "log".into(),
                    items: vec![json!("y")],
                },
                StateChange::Merge {
                    field: "m".into(),
                    value: json!({"j": 2}).as_object().unwrap().clone(),
                },
                StateChange::Set {
                    field: "new".into(),
                    value: json!(true),
                },
            ],
        );
        assert_eq!(
            state,
            json!({"a": 2, "log": ["x", "y"], "m": {"k": 1, "j": 2}, "new": true})
        );
        undo.revert(&mut state);
        assert_eq!(state, before);
        assert_eq!(
            serde_json::to_string(&state).unwrap(),
            serde_json::to_string(&before).unwrap()
        );
        // A replaced field comes back as the very value it was, not a copy.
        assert!(Arc::ptr_eq(
            state.field("a").unwrap(),
            before.field("a").unwrap()
        ));
    }
}
