//! A run's state as the store sees it: a JSON object whose top-level fields
//! nodes write, the changes a node makes to it, and the hash that pins it.
//!
//! `apply` is the one definition of what a change does. The engine applies it
//! to the live state and the store applies it again when it rebuilds a state
//! from a snapshot plus deltas, so the two cannot drift; the state hash then
//! proves that they did not. Key order is preserved (serde_json's
//! `preserve_order`), so a rebuilt state serialises byte for byte like the live
//! one; the hash ignores key order.
//!
//! The store rebuilds states as plain JSON (`Value`); the engine holds a
//! run's live state as a [`RunState`], whose fields are shared until they are
//! written. Both are changed by the same [`apply`] and hashed by the same
//! code, so they cannot disagree on what a change does or what a state hashes
//! to.

use std::sync::Arc;

use indexmap::IndexMap;
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use smallvec::SmallVec;

/// One change a node makes to one top-level field of the state.
///
/// Serialised as `{"op":"set","field":…,"value":…}`,
/// `{"op":"append","field":…,"items":[…]}` or `{"op":"merge","field":…,"value":{…}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum StateChange {
    /// Replace the field's value.
    Set { field: String, value: Value },
    /// Append items to the field's array.
    Append { field: String, items: Vec<Value> },
    /// Insert or replace keys of the field's object (shallow).
    Merge {
        field: String,
        value: Map<String, Value>,
    },
}

impl StateChange {
    /// The top-level field this change writes.
    pub fn field(&self) -> &str {
        match self {
            StateChange::Set { field, .. }
            | StateChange::Append { field, .. }
            | StateChange::Merge { field, .. } => field,
        }
    }
}

/// A change that does not fit the value it is applied to (see [`try_apply`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot {op} state field `{field}`: it holds {found}, not {expected}")]
pub struct ApplyError {
    pub op: &'static str,
    pub field: String,
    pub expected: &'static str,
    pub found: &'static str,
}

/// Applies `changes` in order. Total: a missing or null field is an empty
/// array (append) or object (merge); a field of another type is replaced as if
/// it were missing, and a state that is not an object becomes one. The engine
/// type-checks writes before they get here, so those cases mean a bug
/// elsewhere; being total keeps replay identical to the live run whatever
/// happens, and [`try_apply`] is there for callers that want to refuse.
pub fn apply(state: &mut Value, changes: &[StateChange]) {
    if !state.is_object() {
        *state = Value::Object(Map::new());
    }
    let Value::Object(fields) = state else {
        unreachable!("made an object above")
    };
    apply_to(fields, changes);
}

/// The top-level fields of a state, as [`apply`] writes them and the hashes
/// read them: a JSON object's, or a [`RunState`]'s.
trait Fields {
    fn count(&self) -> usize;
    fn has(&self, key: &str) -> bool;
    fn entries(&self) -> impl Iterator<Item = (&String, &Value)>;
    /// The field's value, inserted as `null` when missing (at the end).
    fn slot(&mut self, field: &str) -> &mut Value;
    /// Sets the field, keeping its position when it exists.
    fn set(&mut self, field: &str, value: Value);

    /// In canonical order (keys sorted by UTF-8 bytes). Objects in a state
    /// are mostly small records: their keys are sorted on the stack.
    fn sorted(&self) -> SmallVec<[(&String, &Value); 16]> {
        let mut keys: SmallVec<[(&String, &Value); 16]> = self.entries().collect();
        keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
        keys
    }
}

impl Fields for Map<String, Value> {
    fn count(&self) -> usize {
        self.len()
    }

    fn has(&self, key: &str) -> bool {
        self.contains_key(key)
    }

    fn entries(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.iter()
    }

    fn slot(&mut self, field: &str) -> &mut Value {
        self.entry(field).or_insert(Value::Null)
    }

    fn set(&mut self, field: &str, value: Value) {
        self.insert(field.to_owned(), value);
    }
}

/// What each change does to the field it names: the one definition.
fn apply_to(fields: &mut impl Fields, changes: &[StateChange]) {
    for change in changes {
        match change {
            StateChange::Set { field, value } => fields.set(field, value.clone()),
            StateChange::Append { field, items } => {
                let slot = fields.slot(field);
                if !slot.is_array() {
                    *slot = Value::Array(Vec::with_capacity(items.len()));
                }
                if let Value::Array(array) = slot {
                    array.extend(items.iter().cloned());
                }
            }
            StateChange::Merge { field, value } => {
                let slot = fields.slot(field);
                if !slot.is_object() {
                    *slot = Value::Object(Map::new());
                }
                if let Value::Object(object) = slot {
                    for (key, item) in value {
                        object.insert(key.clone(), item.clone());
                    }
                }
            }
        }
    }
}

/// A run's live state: a JSON object held as its top-level fields, each
/// behind an `Arc`.
///
/// Every run of a scenario starts from the same initial state, and a node
/// writes a few fields of it. A field is therefore shared (with the
/// scenario's initial state, a checkpoint being committed, an expression's
/// variables) until something writes it, and only then copied: starting a
/// run copies no field, and a node copies only what it changes. It
/// serialises exactly as the object it stands for, keys in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunState {
    fields: IndexMap<String, Arc<Value>>,
}

impl RunState {
    /// The state a JSON value stands for: an object's fields; anything else
    /// is the empty state, as [`apply`] makes it.
    pub fn from_value(value: Value) -> RunState {
        let Value::Object(fields) = value else {
            return RunState::default();
        };
        RunState {
            fields: fields
                .into_iter()
                .map(|(key, value)| (key, Arc::new(value)))
                .collect(),
        }
    }

    /// The state as one JSON object (a copy of every field).
    pub fn to_value(&self) -> Value {
        Value::Object(
            self.fields
                .iter()
                .map(|(key, value)| (key.clone(), Value::clone(value)))
                .collect(),
        )
    }

    /// The state as one JSON object, copying only fields still shared.
    pub fn into_value(self) -> Value {
        Value::Object(
            self.fields
                .into_iter()
                .map(|(key, value)| (key, Arc::unwrap_or_clone(value)))
                .collect(),
        )
    }

    pub fn get(&self, field: &str) -> Option<&Value> {
        self.fields.get(field).map(|value| &**value)
    }

    /// The field, shared.
    pub fn field(&self, field: &str) -> Option<&Arc<Value>> {
        self.fields.get(field)
    }

    pub fn contains_key(&self, field: &str) -> bool {
        self.fields.contains_key(field)
    }

    pub fn len(&self) -> usize {
        self.fields.len()
    }

    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// The fields in order.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.fields.iter().map(|(key, value)| (key, &**value))
    }

    /// Puts a field back as it was (a shared value), keeping its position
    /// when it exists.
    pub fn restore(&mut self, field: &str, value: Arc<Value>) {
        match self.fields.get_mut(field) {
            Some(slot) => *slot = value,
            None => {
                self.fields.insert(field.to_owned(), value);
            }
        }
    }

    /// Removes a field, keeping the order of the others.
    pub fn remove(&mut self, field: &str) -> Option<Arc<Value>> {
        self.fields.shift_remove(field)
    }

    /// The field's value to change in place, copied first if it is shared.
    pub fn get_mut(&mut self, field: &str) -> Option<&mut Value> {
        self.fields.get_mut(field).map(Arc::make_mut)
    }

    /// Applies `changes` in order, exactly as [`apply`] does to the object.
    pub fn apply(&mut self, changes: &[StateChange]) {
        apply_to(self, changes);
    }
}

impl Fields for RunState {
    fn count(&self) -> usize {
        self.len()
    }

    fn has(&self, key: &str) -> bool {
        self.contains_key(key)
    }

    fn entries(&self) -> impl Iterator<Item = (&String, &Value)> {
        self.iter()
    }

    fn slot(&mut self, field: &str) -> &mut Value {
        if !self.fields.contains_key(field) {
            self.fields.insert(field.to_owned(), Arc::new(Value::Null));
        }
        Arc::make_mut(
            self.fields
                .get_mut(field)
                .expect("the field was inserted above"),
        )
    }

    fn set(&mut self, field: &str, value: Value) {
        self.restore(field, Arc::new(value));
    }
}

impl Serialize for RunState {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len()))?;
        for (key, value) in &self.fields {
            map.serialize_entry(key, &**value)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for RunState {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = Map::<String, Value>::deserialize(deserializer)?;
        Ok(RunState::from_value(Value::Object(fields)))
    }
}

impl PartialEq<Value> for RunState {
    fn eq(&self, other: &Value) -> bool {
        match other {
            Value::Object(fields) => {
                fields.len() == self.fields.len()
                    && fields
                        .iter()
                        .all(|(key, value)| self.get(key) == Some(value))
            }
            _ => false,
        }
    }
}

/// `state["field"]`: the field, or `null` when there is none, as indexing a
/// JSON object gives.
impl std::ops::Index<&str> for RunState {
    type Output = Value;

    fn index(&self, field: &str) -> &Value {
        static NULL: Value = Value::Null;
        self.get(field).unwrap_or(&NULL)
    }
}

/// Like [`apply`], but refuses (and changes nothing) when a change does not
/// fit: appending to a non-array, merging into a non-object, or a state that
/// is not an object.
pub fn try_apply(state: &mut Value, changes: &[StateChange]) -> Result<(), ApplyError> {
    let Value::Object(fields) = &*state else {
        return Err(ApplyError {
            op: "write",
            field: String::new(),
            expected: "an object",
            found: kind(state),
        });
    };
    for change in changes {
        let (op, expected, fits): (_, _, fn(&Value) -> bool) = match change {
            StateChange::Set { .. } => continue,
            StateChange::Append { .. } => ("append to", "an array", Value::is_array),
            StateChange::Merge { .. } => ("merge into", "an object", Value::is_object),
        };
        if let Some(current) = fields.get(change.field())
            && !current.is_null()
            && !fits(current)
        {
            return Err(ApplyError {
                op,
                field: change.field().to_owned(),
                expected,
                found: kind(current),
            });
        }
    }
    apply(state, changes);
    Ok(())
}

/// "a string", "an array", …: how errors describe a JSON value's kind.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The canonical JSON text of a value: object keys sorted (by their UTF-8
/// bytes) at every level, no whitespace, strings and numbers as serde_json
/// writes them. Two values are equal as JSON exactly when their canonical
/// texts are equal.
pub fn canonical_json(value: &Value) -> String {
    let mut out = Vec::with_capacity(256);
    write_canonical(value, &mut out);
    String::from_utf8(out).expect("JSON text is UTF-8")
}

/// Where canonical JSON goes: a buffer, or straight into a hash. Neither
/// can fail to take bytes.
trait Sink {
    fn push(&mut self, bytes: &[u8]);
}

impl Sink for Vec<u8> {
    #[inline]
    fn push(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }
}

/// Feeds a SHA-256 without holding the text: a state hash is taken at every
/// checkpoint, of a state that may be large. Canonical JSON arrives in many
/// tiny pieces (a comma, a key, a quote), so they are gathered into a buffer
/// and hashed many blocks at a time.
struct Hashing {
    sha: Sha256,
    buffer: Vec<u8>,
}

/// Bytes gathered before they are hashed.
const HASH_BUFFER: usize = 8 << 10;

impl Hashing {
    fn new() -> Self {
        Hashing {
            sha: Sha256::new(),
            buffer: Vec::with_capacity(HASH_BUFFER),
        }
    }

    fn digest(mut self) -> [u8; 32] {
        self.sha.update(&self.buffer);
        self.sha.finalize().into()
    }

    fn finish(self) -> String {
        hex::encode(self.digest())
    }
}

impl Sink for Hashing {
    #[inline]
    fn push(&mut self, bytes: &[u8]) {
        if self.buffer.len() + bytes.len() > HASH_BUFFER {
            self.sha.update(&self.buffer);
            self.buffer.clear();
            if bytes.len() > HASH_BUFFER {
                self.sha.update(bytes);
                return;
            }
        }
        self.buffer.extend_from_slice(bytes);
    }
}

/// serde_json writes through `io::Write`; this lends it a sink.
struct Writer<'a, S: Sink>(&'a mut S);

impl<S: Sink> std::io::Write for Writer<'_, S> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.push(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn write_canonical(value: &Value, out: &mut impl Sink) {
    match value {
        Value::Object(fields) => write_object(fields, out),
        Value::Array(items) => {
            out.push(b"[");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b",");
                }
                write_canonical(item, out);
            }
            out.push(b"]");
        }
        Value::String(text) => write_str(text, out),
        Value::Null => out.push(b"null"),
        Value::Bool(true) => out.push(b"true"),
        Value::Bool(false) => out.push(b"false"),
        Value::Number(_) => write_scalar(value, out),
    }
}

fn write_object(fields: &impl Fields, out: &mut impl Sink) {
    out.push(b"{");
    for (i, (key, item)) in fields.sorted().into_iter().enumerate() {
        if i > 0 {
            out.push(b",");
        }
        write_str(key, out);
        out.push(b":");
        write_canonical(item, out);
    }
    out.push(b"}");
}

/// A string as serde_json writes it. Most need no escaping at all (no
/// quote, backslash or control character), and are copied as they are.
#[inline]
fn write_str(text: &str, out: &mut impl Sink) {
    // A fold without early exit, so that the compiler checks 16 bytes at a time.
    let needs_escape = text.bytes().fold(false, |found, b| {
        found | (b < 0x20) | (b == b'"') | (b == b'\\')
    });
    if !needs_escape {
        out.push(b"\"");
        out.push(text.as_bytes());
        out.push(b"\"");
    } else {
        write_scalar(text, out);
    }
}

/// A number or an escaped string as serde_json writes it (its escaping is
/// the canonical one), without an intermediate `String`.
fn write_scalar<T: Serialize + ?Sized>(value: &T, out: &mut impl Sink) {
    serde_json::to_writer(Writer(out), value)
        .expect("a JSON scalar serialises to a sink that cannot fail");
}

/// SHA-256 (lowercase hex) of [`canonical_json`]. Usable for any JSON value:
/// the engine's input and output hashes use it, and it is the version 1
/// checkpoint hash (see [`FieldHashes`]).
pub fn state_hash(state: &Value) -> String {
    hex::encode(digest(state))
}

/// SHA-256 of a value's canonical JSON, as bytes.
fn digest(value: &Value) -> [u8; 32] {
    let mut hashing = Hashing::new();
    write_canonical(value, &mut hashing);
    hashing.digest()
}

/// What starts a version 2 checkpoint hash (see [`FieldHashes`]); a hash
/// without it is a version 1 hash, [`state_hash`] of the whole state.
pub const FIELD_HASH_PREFIX: &str = "f2:";

/// Version 2 checkpoint hashes of one run's successive states, re-hashing only
/// the fields that changed.
///
/// A version 2 hash is [`FIELD_HASH_PREFIX`] followed by the lowercase hex
/// SHA-256 of, for each top-level field of the state in key order (sorted by
/// UTF-8 bytes): the key as canonical JSON (a quoted string), then the 32
/// bytes of the SHA-256 of the field's value as canonical JSON. It pins the
/// state exactly as the version 1 hash does, but a field a step did not
/// write is not hashed again: a step that sets one small field of a large
/// state hashes that field. A state that is not an object (never a run's)
/// gets the version 1 hash.
#[derive(Debug, Clone, Default)]
pub struct FieldHashes {
    digests: std::collections::HashMap<String, [u8; 32]>,
}

impl FieldHashes {
    /// The version 2 hash of `state`, where `changes` are every change made
    /// to it since the last call (none on the first call).
    pub fn hash(&mut self, state: &Value, changes: &[StateChange]) -> String {
        let Value::Object(fields) = state else {
            return state_hash(state);
        };
        self.hash_fields(fields, changes)
    }

    /// [`hash`](Self::hash) of a live state.
    pub fn hash_state(&mut self, state: &RunState, changes: &[StateChange]) -> String {
        self.hash_fields(state, changes)
    }

    fn hash_fields(&mut self, fields: &impl Fields, changes: &[StateChange]) -> String {
        for change in changes {
            self.digests.remove(change.field());
        }
        if self.digests.len() > fields.count() {
            self.digests.retain(|key, _| fields.has(key));
        }
        let mut hashing = Hashing::new();
        for (key, value) in fields.sorted() {
            let digest = match self.digests.get(key.as_str()) {
                Some(digest) => *digest,
                None => *self.digests.entry(key.clone()).or_insert(digest(value)),
            };
            write_str(key, &mut hashing);
            hashing.push(&digest);
        }
        format!("{FIELD_HASH_PREFIX}{}", hashing.finish())
    }
}

/// A run's initial state with what checkpoint 0 stores of it (its JSON and
/// its hash) and the digest of each of its fields, worked out once: every
/// run of a scenario starts from the same state, so a scenario keeps one
/// and each run it starts shares it, fields and all.
#[derive(Debug)]
pub struct InitialState {
    state: RunState,
    json: String,
    hash: String,
    fields: FieldHashes,
}

impl InitialState {
    pub fn new(value: Value) -> InitialState {
        let json = serde_json::to_string(&value).expect("a JSON value serialises");
        let hash = state_hash(&value);
        // Hashing it once records the digest of every field.
        let mut fields = FieldHashes::default();
        fields.hash(&value, &[]);
        InitialState {
            state: RunState::from_value(value),
            json,
            hash,
            fields,
        }
    }

    /// The state, whose fields every run shares until it writes them.
    pub fn state(&self) -> &RunState {
        &self.state
    }

    /// The state as checkpoint 0 stores it.
    pub fn json(&self) -> &str {
        &self.json
    }

    /// Checkpoint 0's hash (version 1: [`state_hash`]).
    pub fn hash(&self) -> &str {
        &self.hash
    }

    /// The digest of every field, to hash the run's later states from.
    pub fn field_hashes(&self) -> FieldHashes {
        self.fields.clone()
    }
}

impl PartialEq for InitialState {
    fn eq(&self, other: &InitialState) -> bool {
        self.state == other.state
    }
}

/// The hash of `state` in the version of `stored` (a checkpoint's recorded
/// hash), to compare with it.
pub fn hash_like(state: &Value, stored: &str) -> String {
    if stored.starts_with(FIELD_HASH_PREFIX) {
        FieldHashes::default().hash(state, &[])
    } else {
        state_hash(state)
    }
}

/// [`hash_like`] of a live state.
pub fn state_hash_like(state: &RunState, stored: &str) -> String {
    if stored.starts_with(FIELD_HASH_PREFIX) {
        FieldHashes::default().hash_state(state, &[])
    } else {
        let mut hashing = Hashing::new();
        write_object(state, &mut hashing);
        hashing.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a = json!({"b": 1, "a": {"y": [1, {"d": null, "c": "x"}], "x": true}});
        assert_eq!(
            canonical_json(&a),
            r#"{"a":{"x":true,"y":[1,{"c":"x","d":null}]},"b":1}"#
        );
        let b: Value =
            serde_json::from_str(r#"{"a":{"y":[1,{"c":"x","d":null}],"x":true},"b":1}"#).unwrap();
        assert_eq!(state_hash(&a), state_hash(&b));
        assert_ne!(state_hash(&a), state_hash(&json!({"b": 1})));
    }

    #[test]
    fn state_hash_is_the_sha256_of_the_canonical_text() {
        let value = json!({
            "z": [1, -2.5, 1e300, null, true, "tab\tquote\"back\\slash"],
            "é": {"\u{1}": "control", "snow": "☃ \u{1F600}", "n": 18446744073709551615u64},
            "a": {}
        });
        let text = canonical_json(&value);
        assert_eq!(
            text,
            r#"{"a":{},"z":[1,-2.5,1e+300,null,true,"tab\tquote\"back\\slash"],"é":{"\u0001":"control","n":18446744073709551615,"snow":"☃ 😀"}}"#
        );
        assert_eq!(
            state_hash(&value),
            hex::encode(Sha256::digest(text.as_bytes()))
        );
        // Scalars are written as serde_json writes them (hashes already stored
        // in databases depend on it).
        for scalar in value["z"].as_array().unwrap() {
            assert_eq!(canonical_json(scalar), scalar.to_string());
        }
    }

    #[test]
    fn strings_are_escaped_exactly_as_serde_json_escapes_them() {
        let mut texts: Vec<String> = (0u32..=0x80)
            .filter_map(char::from_u32)
            .map(|c| format!("a{c}b"))
            .collect();
        texts.extend(["", "plain", "é☃😀", "\u{7f}", "\u{2028}", "q\"\\/"].map(String::from));
        for text in texts {
            let value = Value::String(text.clone());
            assert_eq!(canonical_json(&value), value.to_string(), "{text:?}");
            let keyed = json!({ text.clone(): text.clone() });
            assert_eq!(canonical_json(&keyed), keyed.to_string(), "{text:?}");
        }
    }

    #[test]
    fn large_states_hash_as_their_canonical_text() {
        // Longer than the hash's buffer in total, with single strings longer
        // than it too, and objects with more keys than are sorted on the stack.
        let mut record = serde_json::Map::new();
        for i in (0..40).rev() {
            record.insert(format!("key-{i:02}"), json!("v".repeat(i * 7)));
        }
        for size in [0, 1, 63, 64, 1000, 1023, 1024, 1025, 5000] {
            let value = json!({
                "records": vec![Value::Object(record.clone()); 5],
                "long": "x".repeat(size),
                "after": [size, "y".repeat(size / 3)],
            });
            let text = canonical_json(&value);
            assert_eq!(
                state_hash(&value),
                hex::encode(Sha256::digest(text.as_bytes())),
                "size {size}"
            );
            assert!(text.starts_with(r#"{"after":["#));
            assert!(text.contains(r#"{"key-00":"","key-01":"vvvvvvv","#));
        }
    }

    #[test]
    fn field_hashes_follow_changes_and_match_a_fresh_hash() {
        let mut state = json!({"b": [1, 2], "a": {"x": "y"}, "é": null});
        let mut hashes = FieldHashes::default();
        let first = hashes.hash(&state, &[]);
        assert!(first.starts_with(FIELD_HASH_PREFIX));
        assert_eq!(first, hash_like(&state, &first));
        // Per the definition: key, then the value's digest, in key order.
        let mut expected = Vec::new();
        for key in ["a", "b", "é"] {
            expected.extend_from_slice(canonical_json(&json!(key)).as_bytes());
            expected.extend_from_slice(&Sha256::digest(canonical_json(&state[key]).as_bytes()));
        }
        assert_eq!(
            first,
            format!(
                "{FIELD_HASH_PREFIX}{}",
                hex::encode(Sha256::digest(&expected))
            )
        );

        let steps = [
            vec![StateChange::Append {
                field: "b".into(),
                items: vec![json!(3)],
            }],
            vec![
                StateChange::Set {
                    field: "new".into(),
                    value: json!("field"),
                },
                StateChange::Merge {
                    field: "a".into(),
                    value: json!({"z": 1}).as_object().unwrap().clone(),
                },
            ],
            vec![],
        ];
        let mut seen = vec![first];
        for changes in steps {
            apply(&mut state, &changes);
            let hash = hashes.hash(&state, &changes);
            assert_eq!(hash, FieldHashes::default().hash(&state, &[]));
            assert_eq!(hash, hash_like(&state, &hash));
            seen.push(hash);
        }
        // A change is a different hash; no change is the same one.
        assert_ne!(seen[0], seen[1]);
        assert_ne!(seen[1], seen[2]);
        assert_eq!(seen[2], seen[3]);
        // Version 1 hashes still compare as version 1.
        let v1 = state_hash(&state);
        assert_eq!(hash_like(&state, &v1), v1);
        // Not an object: the version 1 hash.
        assert_eq!(hashes.hash(&json!([1]), &[]), state_hash(&json!([1])));
    }

    #[test]
    fn changes_serialise_with_an_op_tag() {
        let change = StateChange::Append {
            field: "log".into(),
            items: vec![json!("x")],
        };
        let text = serde_json::to_string(&change).unwrap();
        assert_eq!(text, r#"{"op":"append","field":"log","items":["x"]}"#);
        assert_eq!(serde_json::from_str::<StateChange>(&text).unwrap(), change);
    }

    #[test]
    fn apply_sets_appends_and_merges_in_place() {
        let mut state = json!({"a": 1, "log": ["x"], "m": {"k": 1}, "z": 0});
        apply(
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
                    value: json!({"j": 2, "k": 3}).as_object().unwrap().clone(),
                },
                StateChange::Append {
                    field: "new".into(),
                    items: vec![json!(1)],
                },
            ],
        );
        // Existing keys keep their position; new ones go last.
        assert_eq!(
            serde_json::to_string(&state).unwrap(),
            r#"{"a":2,"log":["x","y"],"m":{"k":3,"j":2},"z":0,"new":[1]}"#
        );
    }

    #[test]
    fn try_apply_refuses_a_change_that_does_not_fit() {
        let mut state = json!({"n": 1});
        let before = state.clone();
        let error = try_apply(
            &mut state,
            &[StateChange::Append {
                field: "n".into(),
                items: vec![json!(2)],
            }],
        )
        .unwrap_err();
        assert_eq!(error.found, "a number");
        assert_eq!(state, before);
        // The total version replaces it.
        apply(
            &mut state,
            &[StateChange::Append {
                field: "n".into(),
                items: vec![json!(2)],
            }],
        );
        assert_eq!(state, json!({"n": [2]}));
    }

    /// Changes of every kind, to a state with every kind of field.
    fn sample() -> (Value, Vec<Vec<StateChange>>) {
        let state = json!({"z": 1, "log": ["x"], "m": {"k": 1}, "s": "text", "n": null});
        let steps = vec![
            vec![
                StateChange::Set {
                    field: "z".into(),
                    value: json!(2),
                },
                StateChange::Append {
                    field: "log".into(),
                    items: vec![json!("y"), json!({"deep": [1]})],
                },
            ],
            vec![
                StateChange::Merge {
                    field: "m".into(),
                    value: json!({"j": 2, "k": 3}).as_object().unwrap().clone(),
                },
                StateChange::Append {
                    field: "new".into(),
                    items: vec![json!(1)],
                },
                // Replaced as if missing, as `apply` does.
                StateChange::Append {
                    field: "s".into(),
                    items: vec![json!(true)],
                },
            ],
            vec![StateChange::Merge {
                field: "n".into(),
                value: json!({"a": "b"}).as_object().unwrap().clone(),
            }],
        ];
        (state, steps)
    }

    #[test]
    fn a_run_state_changes_serialises_and_hashes_exactly_as_its_object() {
        let (mut value, steps) = sample();
        let mut state = RunState::from_value(value.clone());
        let (mut by_value, mut by_state) = (FieldHashes::default(), FieldHashes::default());
        for changes in std::iter::once(vec![]).chain(steps) {
            apply(&mut value, &changes);
            state.apply(&changes);
            assert_eq!(
                serde_json::to_string(&state).unwrap(),
                serde_json::to_string(&value).unwrap()
            );
            assert_eq!(state, value);
            assert_eq!(state.to_value(), value);
            assert_eq!(
                by_state.hash_state(&state, &changes),
                by_value.hash(&value, &changes)
            );
            let v1 = state_hash(&value);
            assert_eq!(state_hash_like(&state, &v1), v1);
            let v2 = FieldHashes::default().hash(&value, &[]);
            assert_eq!(state_hash_like(&state, &v2), v2);
        }
        assert_eq!(state["new"], json!([1]));
        assert_eq!(state["missing"], Value::Null);
        assert_eq!(state.clone().into_value(), value);
        let back: RunState = serde_json::from_str(&serde_json::to_string(&value).unwrap()).unwrap();
        assert_eq!(back, state);
        // Not an object: the empty state, as `apply` would make it.
        assert!(RunState::from_value(json!([1])).is_empty());
    }

    #[test]
    fn a_run_state_copies_only_the_fields_written() {
        let initial = InitialState::new(json!({"big": ["a", "b"], "last": ""}));
        let mut state = initial.state().clone();
        let shared = |state: &RunState, field| {
            Arc::ptr_eq(
                state.field(field).unwrap(),
                initial.state().field(field).unwrap(),
            )
        };
        assert!(shared(&state, "big") && shared(&state, "last"));
        state.apply(&[StateChange::Set {
            field: "last".into(),
            value: json!("x"),
        }]);
        assert!(shared(&state, "big") && !shared(&state, "last"));
        assert_eq!(initial.state()["last"], json!(""));
        state.apply(&[StateChange::Append {
            field: "big".into(),
            items: vec![json!("c")],
        }]);
        assert!(!shared(&state, "big"));
        assert_eq!(initial.state()["big"], json!(["a", "b"]));
        assert_eq!(state["big"], json!(["a", "b", "c"]));
    }
}
