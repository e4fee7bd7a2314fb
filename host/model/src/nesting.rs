//! How deeply a JSON value may nest before the store refuses it.
//!
//! Every stored document (a run's input, a checkpoint's state and changes, a
//! node's output) is read back with serde_json, whose parser stops at 128
//! levels, and serialised, hashed and dropped by code that recurses once per
//! level. A value nested deeper than [`MAX_NESTING`] is therefore refused
//! when it is written, with [`TooDeep`] saying where and how to fix it,
//! so that no stored row can become unreadable and nothing recurses deep
//! enough to overflow a stack. [`nesting_depth`] walks a value without
//! recursion, so it is safe on a value of any depth.
//!
//! Must not: recurse over a value, or allocate in proportion to its depth
//! beyond one stack entry per open container.

use serde_json::Value;

use crate::state::StateChange;

/// The most arrays and objects a value written to the store may nest
/// (`{"a": [1]}` nests 2). A stored change wraps its value in 3 more levels
/// (`[{"op": "append", "items": [value]}]`), which stays under serde_json's
/// read limit of 128.
pub const MAX_NESTING: usize = 100;

/// A value nested deeper than [`MAX_NESTING`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} nests arrays and objects more than {limit} levels deep, more than the store keeps; \
     flatten it (e.g. keep a list of items rather than wrapping each in the previous one)"
)]
pub struct TooDeep {
    /// What the value is, e.g. "state field `notes`".
    pub what: String,
    pub limit: usize,
}

/// How many arrays and objects `value` nests (a scalar: 0), counting no
/// further than `limit + 1`: enough to tell whether it is over `limit`
/// without walking the rest of a hostile value.
pub fn nesting_depth_up_to(value: &Value, limit: usize) -> usize {
    // Each entry: an iterator over a container's children, at its depth.
    let mut deepest = 0;
    let mut stack: Vec<(Children<'_>, usize)> = Vec::new();
    if let Some(children) = Children::of(value) {
        stack.push((children, 1));
        deepest = 1;
    }
    while let Some((children, depth)) = stack.last_mut() {
        let depth = *depth;
        match children.next() {
            None => {
                stack.pop();
            }
            Some(child) => {
                if let Some(grandchildren) = Children::of(child) {
                    deepest = deepest.max(depth + 1);
                    if deepest > limit {
                        return deepest;
                    }
                    stack.push((grandchildren, depth + 1));
                }
            }
        }
    }
    deepest
}

/// How many arrays and objects `value` nests (a scalar: 0).
pub fn nesting_depth(value: &Value) -> usize {
    nesting_depth_up_to(value, usize::MAX - 1)
}

/// Refuses `value` if it nests more than [`MAX_NESTING`] levels; `what`
/// names it in the error.
pub fn check_nesting(value: &Value, what: impl FnOnce() -> String) -> Result<(), TooDeep> {
    if nesting_depth_up_to(value, MAX_NESTING) > MAX_NESTING {
        return Err(TooDeep {
            what: what(),
            limit: MAX_NESTING,
        });
    }
    Ok(())
}

/// Refuses a change whose value (or any appended item or merged value)
/// nests more than [`MAX_NESTING`] levels, naming its field.
pub fn check_change_nesting(change: &StateChange) -> Result<(), TooDeep> {
    let what = || format!("the value written to state field `{}`", change.field());
    match change {
        StateChange::Set { value, .. } => check_nesting(value, what),
        StateChange::Append { items, .. } => {
            items.iter().try_for_each(|item| check_nesting(item, what))
        }
        StateChange::Merge { value, .. } => value
            .values()
            .try_for_each(|item| check_nesting(item, what)),
    }
}

/// The children of an array or an object.
enum Children<'a> {
    Array(std::slice::Iter<'a, Value>),
    Object(serde_json::map::Values<'a>),
}

impl<'a> Children<'a> {
    fn of(value: &'a Value) -> Option<Children<'a>> {
        match value {
            Value::Array(items) => Some(Children::Array(items.iter())),
            Value::Object(fields) => Some(Children::Object(fields.values())),
            _ => None,
        }
    }
}

impl<'a> Iterator for Children<'a> {
    type Item = &'a Value;

    fn next(&mut self) -> Option<&'a Value> {
        match self {
            Children::Array(items) => items.next(),
            Children::Object(fields) => fields.next(),
        }
    }
}

/// A value nested `depth` levels (`[[[…]]]`), built without recursion; drop
/// it with [`drop_deep`]. For tests of the limit.
pub fn deep_array(depth: usize) -> Value {
    let mut value = Value::Null;
    for _ in 0..depth {
        value = Value::Array(vec![value]);
    }
    value
}

/// Drops a value of any depth without recursing (serde_json's own drop
/// recurses once per level).
pub fn drop_deep(value: Value) {
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        match value {
            Value::Array(items) => pending.extend(items),
            Value::Object(fields) => pending.extend(fields.into_iter().map(|(_, v)| v)),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn depth_counts_containers() {
        assert_eq!(nesting_depth(&json!(1)), 0);
        assert_eq!(nesting_depth(&json!([])), 1);
        assert_eq!(nesting_depth(&json!({"a": [1, {"b": []}]})), 4);
        assert_eq!(nesting_depth(&json!([1, [2], {"x": {"y": {"z": 0}}}])), 4);
    }

    #[test]
    fn a_very_deep_value_is_measured_and_refused_without_recursion() {
        let deep = deep_array(200_000);
        assert_eq!(nesting_depth(&deep), 200_000);
        assert_eq!(nesting_depth_up_to(&deep, 10), 11);
        let error = check_nesting(&deep, || "state field `x`".into()).unwrap_err();
        assert!(error.to_string().contains("state field `x`"), "{error}");
        assert!(error.to_string().contains("100 levels"), "{error}");
        drop_deep(deep);
        assert!(check_nesting(&deep_array(MAX_NESTING), String::new).is_ok());
        assert!(check_nesting(&deep_array(MAX_NESTING + 1), String::new).is_err());
    }
}
