//! The journal of one call: every host call whose answer comes from outside
//! the run, with its request and response, in the order the skill made them.
//!
//! A call runs in one of two modes ([`JournalMode`]). Recording (the default)
//! performs each journaled host call and appends a [`JournalRecord`]; it ends
//! up in `CallReport::journal`. Replaying answers each journaled host call
//! from the next recorded entry instead, never touching the backend. A replay
//! must ask exactly what was recorded, in the same order: a different
//! capability or request, a call past the last entry, or entries left over
//! when the call ends all fail the call with `CallError::JournalMismatch`,
//! which names the entry and what differed (entries left over by a call that
//! a limit cut short leave the limit's error as it is: the limit is the
//! cause). A diverging host call traps the
//! guest, so it never sees an answer that was not recorded for it.
//!
//! Which host calls are journaled is each capability's decision, stated in its
//! module (`HostCapability::JOURNALED`; `kv` journals all four of its
//! functions). Answers that are already
//! deterministic (WASI's fixed clocks and seeded randomness, `log`) or that
//! are part of the scenario itself (the `fs` directory) are not journaled.
//!
//! The journal is held in memory until the call ends, so every journaled
//! host call is charged to the call's [`HostCallBudget`]: what its request
//! and its answer take as the journal holds them ([`held_bytes`]: parsed
//! JSON, not its text). A call the budget has no room for is refused before
//! it is performed; an answer that turns out larger than the room left is
//! recorded as the `budget-exceeded` error the skill gets instead, so a
//! replay, which charges the recorded entries alike, answers the same.
//!
//! This module knows nothing of where journals are stored: the engine turns
//! records into the store's rows, and a replay is handed records by whoever
//! read them.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::capabilities::{Capability, GuestError};
use crate::limits::{AnswerRoom, BUDGET_EXCEEDED, HostCallBudget};

/// One journaled host call.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalRecord {
    /// The capability whose import was called; its name is the record's kind.
    pub capability: Capability,
    /// What was asked, as the capability describes it (for `kv`, `op` and
    /// the key or prefix, see `capabilities::kv`).
    pub request: Value,
    /// What came back: `{"ok": ...}` or `{"error": {code, message,
    /// retryable}}`, mirroring the import's `result`.
    pub response: Value,
}

/// Whether a call records its journaled host calls or replays them.
#[derive(Debug, Clone, Default)]
pub enum JournalMode {
    /// Perform journaled host calls and record them.
    #[default]
    Record,
    /// Answer journaled host calls from these records, in order, without
    /// touching any backend.
    Replay(Arc<[JournalRecord]>),
}

/// Where a replay left the journal it was given.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mismatch {
    pub capability: Capability,
    /// The 0-based index of the entry the replay disagreed with.
    pub entry: usize,
    pub difference: String,
    /// The call ended with this entry unused, rather than asking something
    /// else; a call cut short by a limit says so itself.
    pub left_unused: bool,
}

/// What [`Journal::open`] gave: the slot a recording fills later, or the
/// response a replay answers with.
#[derive(Debug)]
pub(crate) enum Opened {
    Slot(usize),
    Recorded(Value),
}

impl JournalValue for Value {
    fn to_journal(&self) -> Value {
        self.clone()
    }

    fn from_journal(value: &Value) -> Option<Self> {
        Some(value.clone())
    }
}

/// A value a journaled host call returns, as it is written in a record.
pub(crate) trait JournalValue: Sized {
    fn to_journal(&self) -> Value;
    fn from_journal(value: &Value) -> Option<Self>;
}

impl JournalValue for () {
    fn to_journal(&self) -> Value {
        Value::Null
    }

    fn from_journal(value: &Value) -> Option<Self> {
        value.is_null().then_some(())
    }
}

impl JournalValue for Vec<String> {
    fn to_journal(&self) -> Value {
        json!(self)
    }

    fn from_journal(value: &Value) -> Option<Self> {
        serde_json::from_value(value.clone()).ok()
    }
}

impl JournalValue for Option<Vec<u8>> {
    /// Bytes as base64, like the JSON bridge writes `list<u8>`.
    fn to_journal(&self) -> Value {
        use base64::Engine as _;
        match self {
            Some(bytes) => Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            None => Value::Null,
        }
    }

    fn from_journal(value: &Value) -> Option<Self> {
        use base64::Engine as _;
        match value {
            Value::Null => Some(None),
            Value::String(text) => base64::engine::general_purpose::STANDARD
                .decode(text)
                .ok()
                .map(Some),
            _ => None,
        }
    }
}

pub(crate) fn encode_result<T: JournalValue>(result: &Result<T, GuestError>) -> Value {
    match result {
        Ok(value) => json!({ "ok": value.to_journal() }),
        Err(error) => json!({ "error": {
            "code": error.code,
            "message": error.message,
            "retryable": error.retryable,
        }}),
    }
}

pub(crate) fn decode_result<T: JournalValue>(response: &Value) -> Option<Result<T, GuestError>> {
    let object = response.as_object()?;
    if let Some(ok) = object.get("ok") {
        return T::from_journal(ok).map(Ok);
    }
    let error = object.get("error")?.as_object()?;
    Some(Err(GuestError {
        code: error.get("code")?.as_str()?.to_string(),
        message: error.get("message")?.as_str()?.to_string(),
        retryable: error.get("retryable")?.as_bool()?,
    }))
}

/// One call's journal.
pub(crate) enum Journal {
    /// Empty until the first journaled host call: a call that makes none
    /// allocates nothing for its journal.
    Record(Vec<JournalRecord>),
    Replay {
        entries: Arc<[JournalRecord]>,
        /// The next entry to answer from.
        next: usize,
        mismatch: Option<Mismatch>,
    },
}

impl Journal {
    /// How many host calls it has recorded (or answered, in a replay).
    pub(crate) fn recorded(&self) -> usize {
        match self {
            Journal::Record(records) => records.len(),
            Journal::Replay { next, .. } => *next,
        }
    }

    pub(crate) fn new(mode: &JournalMode) -> Self {
        match mode {
            JournalMode::Record => Journal::Record(Vec::new()),
            JournalMode::Replay(entries) => Journal::Replay {
                entries: entries.clone(),
                next: 0,
                mismatch: None,
            },
        }
    }

    /// One journaled host call of `capability` asking `request`, charged to
    /// `budget` (with `written` bytes it carries besides, a `kv` value):
    /// `perform` answers it when recording, given the room its answer has,
    /// the next entry when replaying. The outer error is a trap: the replay
    /// diverged and the guest must stop here.
    pub(crate) fn call<T: JournalValue>(
        &mut self,
        capability: Capability,
        request: Value,
        written: u64,
        budget: &mut HostCallBudget,
        perform: impl FnOnce(AnswerRoom) -> Result<T, GuestError>,
    ) -> wasmtime::Result<Result<T, GuestError>> {
        debug_assert!(
            capability.journaled(),
            "`{capability}` journals a host call but does not say `JOURNALED`"
        );
        let asked = held_bytes(&request) + RECORD_BYTES;
        let room = match budget.admit(capability, asked + written) {
            Ok(room) => room,
            Err(refusal) => return Ok(Err(refusal)),
        };
        budget.charge(asked + written);
        match self {
            Journal::Record(records) => {
                let mut result = perform(room);
                if let Err(error) = &result
                    && error.code == BUDGET_EXCEEDED
                {
                    budget.refused(error.clone());
                }
                let mut response = encode_result(&result);
                let answer = held_bytes(&response);
                if answer > room.bytes {
                    // Held no longer than it takes to say it did not fit.
                    let refusal = budget.refused(room.refuse(capability, Some(answer)));
                    result = Err(refusal);
                    response = encode_result(&result);
                }
                budget.charge(held_bytes(&response));
                records.push(JournalRecord {
                    capability,
                    response,
                    request,
                });
                Ok(result)
            }
            Journal::Replay {
                entries,
                next,
                mismatch,
            } => match answer(entries, *next, capability, &request) {
                Ok(result) => {
                    budget.charge(held_bytes(&entries[*next].response));
                    if let Err(error) = &result
                        && error.code == BUDGET_EXCEEDED
                    {
                        budget.refused(error.clone());
                    }
                    *next += 1;
                    Ok(result)
                }
                Err(found) => {
                    let message = format!(
                        "replay diverged from the journal at entry {}: {}",
                        found.entry, found.difference
                    );
                    *mismatch = Some(found);
                    Err(wasmtime::Error::msg(message))
                }
            },
        }
    }

    /// Opens a journaled host call whose answer comes later (a streamed
    /// completion): charged like [`Journal::call`] for its request. When
    /// recording, its entry is reserved at once, in the order the skill
    /// asked, and filled by [`Journal::fill`] (which charges the answer)
    /// when the call ends; when replaying, the recorded response is handed
    /// back whole, and not charged: the caller charges it
    /// ([`Journal::charge_replayed`]) where the recording filled it, so
    /// the host calls in between meet the budget as they met it then. The
    /// outer error is a trap, as for [`Journal::call`].
    pub(crate) fn open(
        &mut self,
        capability: Capability,
        request: Value,
        budget: &mut HostCallBudget,
    ) -> wasmtime::Result<Result<Opened, GuestError>> {
        let asked = held_bytes(&request) + RECORD_BYTES;
        if let Err(refusal) = budget.admit(capability, asked) {
            return Ok(Err(refusal));
        }
        budget.charge(asked);
        match self {
            Journal::Record(records) => {
                records.push(JournalRecord {
                    capability,
                    request,
                    response: Value::Null,
                });
                Ok(Ok(Opened::Slot(records.len() - 1)))
            }
            Journal::Replay {
                entries,
                next,
                mismatch,
            } => match answer::<Value>(entries, *next, capability, &request) {
                Ok(_) => {
                    let response = entries[*next].response.clone();
                    *next += 1;
                    Ok(Ok(Opened::Recorded(response)))
                }
                Err(found) => {
                    let message = format!(
                        "replay diverged from the journal at entry {}: {}",
                        found.entry, found.difference
                    );
                    *mismatch = Some(found);
                    Err(wasmtime::Error::msg(message))
                }
            },
        }
    }

    /// Charges a replayed answer of [`Journal::open`] where the recording
    /// filled its entry: what it holds, as [`Journal::fill`] charged it.
    pub(crate) fn charge_replayed(response: &Value, budget: &mut HostCallBudget) {
        budget.charge(held_bytes(response));
    }

    /// Fills the entry [`Journal::open`] reserved at `slot` with what came
    /// back.
    pub(crate) fn fill(&mut self, slot: usize, response: Value, budget: &mut HostCallBudget) {
        if let Journal::Record(records) = self
            && let Some(record) = records.get_mut(slot)
        {
            budget.charge(held_bytes(&response));
            record.response = response;
        }
    }

    /// Ends the call: what it recorded (or replayed), and how a replay
    /// diverged, if it did. Entries a replay left unused are a divergence too.
    pub(crate) fn finish(self) -> (Vec<JournalRecord>, Option<Mismatch>) {
        match self {
            Journal::Record(records) => (records, None),
            Journal::Replay {
                entries,
                next,
                mismatch,
            } => {
                let mismatch = mismatch.or_else(|| {
                    entries.get(next).map(|unused| Mismatch {
                        capability: unused.capability,
                        entry: next,
                        left_unused: true,
                        difference: format!(
                            "the call ended after {next} of the journal's {} entries; entry {next} \
                             recorded `{}` {}",
                            entries.len(),
                            unused.capability,
                            unused.request
                        ),
                    })
                });
                (entries[..next].to_vec(), mismatch)
            }
        }
    }
}

/// The recorded answer at `index` to `capability`'s `request`, or how the
/// journal disagrees.
fn answer<T: JournalValue>(
    entries: &[JournalRecord],
    index: usize,
    capability: Capability,
    request: &Value,
) -> Result<Result<T, GuestError>, Mismatch> {
    let mismatch = |difference: String| Mismatch {
        capability,
        entry: index,
        difference,
        left_unused: false,
    };
    let Some(recorded) = entries.get(index) else {
        return Err(mismatch(format!(
            "the skill called `{capability}` {request} past the end of the journal ({} entries)",
            entries.len()
        )));
    };
    if recorded.capability != capability {
        return Err(mismatch(format!(
            "the skill called `{capability}` {request} where the journal recorded `{}` {}",
            recorded.capability, recorded.request
        )));
    }
    if recorded.request != *request {
        return Err(mismatch(format!(
            "the skill asked {} where the journal recorded {}",
            describe_difference(request, &recorded.request),
            recorded.request
        )));
    }
    decode_result(&recorded.response).ok_or_else(|| {
        mismatch(format!(
            "the recorded response {} is not an answer to {request}",
            recorded.response
        ))
    })
}

/// The fields of `found` that differ from `recorded`, when both are objects;
/// else all of `found`.
fn describe_difference(found: &Value, recorded: &Value) -> String {
    let (Value::Object(found), Value::Object(recorded)) = (found, recorded) else {
        return found.to_string();
    };
    let differing: Map<String, Value> = found
        .iter()
        .filter(|(key, value)| recorded.get(*key) != Some(*value))
        .map(|(key, value)| (key.clone(), value.clone()))
        .collect();
    let missing: Vec<&String> = recorded
        .keys()
        .filter(|key| !found.contains_key(*key))
        .collect();
    let mut text = Value::Object(differing).to_string();
    if !missing.is_empty() {
        text.push_str(&format!(" (without {missing:?})"));
    }
    text
}

/// What the host holds for one journal record besides its request and its
/// response: the record itself, and its slot in the journal.
pub(crate) const RECORD_BYTES: u64 = 128;

/// The bytes the host holds for `value` parsed (`serde_json::Value`, with
/// its `preserve_order` maps), estimated from above on a 64-bit host: a
/// value's 32-byte slot, a string's bytes, an array's slots, an object's
/// entries (its index table, each entry's hash, key and value) and every
/// allocation's bookkeeping. A one-entry object, `{"integer": 3}` as `sql`
/// journals a value, takes about 350 bytes for 13 of text: charging the
/// text alone would let a call hold twenty times its budget. Walked with a
/// stack of its own, however deep the value.
pub(crate) fn held_bytes(value: &Value) -> u64 {
    let mut total = VALUE_SLOT;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        total += match value {
            Value::Null | Value::Bool(_) | Value::Number(_) => 0,
            Value::String(text) => string_bytes(text.len()),
            Value::Array(items) => {
                pending.extend(items);
                array_bytes(items.len())
            }
            Value::Object(map) => {
                pending.extend(map.values());
                object_bytes(map.len()) + map.keys().map(|k| string_bytes(k.len())).sum::<u64>()
            }
        };
    }
    total
}

/// A `Value`'s own size.
const VALUE_SLOT: u64 = 32;
/// What an allocator keeps per allocation, and its rounding.
const ALLOCATION: u64 = 16;

/// A string of `len` bytes, held in its own allocation.
pub(crate) fn string_bytes(len: usize) -> u64 {
    if len == 0 { 0 } else { len as u64 + ALLOCATION }
}

/// An array's slots (its children's own bytes apart).
pub(crate) fn array_bytes(len: usize) -> u64 {
    if len == 0 {
        0
    } else {
        len as u64 * VALUE_SLOT + ALLOCATION
    }
}

/// An object's entries and index (its keys' and children's own bytes
/// apart): each entry a hash, a key and a value (64 bytes), each index slot
/// 9 bytes, both grown to at least three entries as `indexmap` grows them.
pub(crate) fn object_bytes(len: usize) -> u64 {
    if len == 0 {
        return 0;
    }
    let slots = len.max(3).next_power_of_two() as u64;
    slots * 64 + (slots + 1) * 9 + 16 + 2 * ALLOCATION
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;

    fn get(key: &str) -> Value {
        json!({ "op": "get", "key": key })
    }

    fn recorded(entries: Vec<JournalRecord>) -> Journal {
        Journal::new(&JournalMode::Replay(entries.into()))
    }

    impl Journal {
        /// [`Journal::call`] under a budget of its own, the default one.
        fn plain<T: JournalValue>(
            &mut self,
            capability: Capability,
            request: Value,
            perform: impl FnOnce() -> Result<T, GuestError>,
        ) -> wasmtime::Result<Result<T, GuestError>> {
            let mut budget = HostCallBudget::new(&Limits::default());
            self.call(capability, request, 0, &mut budget, |_| perform())
        }
    }

    #[test]
    fn recording_starts_without_an_allocation() {
        let Journal::Record(records) = Journal::new(&JournalMode::Record) else {
            panic!("record mode records");
        };
        assert_eq!(records.capacity(), 0);
    }

    #[test]
    fn a_recorded_call_replays_without_performing() {
        let mut journal = Journal::new(&JournalMode::Record);
        let answer: Option<Vec<u8>> = journal
            .plain(Capability::Kv, get("a"), || Ok(Some(b"1".to_vec())))
            .unwrap()
            .unwrap();
        assert_eq!(answer.as_deref(), Some(&b"1"[..]));
        let failed: Result<(), GuestError> = journal
            .plain(
                Capability::Kv,
                json!({ "op": "delete", "key": "a" }),
                || {
                    Err(GuestError {
                        code: "kv-unavailable".into(),
                        message: "down".into(),
                        retryable: true,
                    })
                },
            )
            .unwrap();
        assert!(failed.is_err());
        let (records, mismatch) = journal.finish();
        assert_eq!(mismatch, None);
        assert_eq!(records[0].response, json!({ "ok": "MQ==" }));
        assert_eq!(
            records[1].response,
            json!({ "error": { "code": "kv-unavailable", "message": "down", "retryable": true } })
        );

        let mut replay = recorded(records.clone());
        let answer: Option<Vec<u8>> = replay
            .plain(Capability::Kv, get("a"), || {
                panic!("a replay never performs")
            })
            .unwrap()
            .unwrap();
        assert_eq!(answer.as_deref(), Some(&b"1"[..]));
        let error = replay
            .plain::<()>(
                Capability::Kv,
                json!({ "op": "delete", "key": "a" }),
                || panic!("a replay never performs"),
            )
            .unwrap()
            .unwrap_err();
        assert_eq!(
            (error.code.as_str(), error.retryable),
            ("kv-unavailable", true)
        );
        assert_eq!(replay.finish(), (records, None));
    }

    #[test]
    fn every_divergence_is_named() {
        let entries = vec![JournalRecord {
            capability: Capability::Kv,
            request: get("a"),
            response: json!({ "ok": null }),
        }];
        let diverge = |capability: Capability, request: Value| {
            let mut replay = recorded(entries.clone());
            let trap = replay
                .plain::<Option<Vec<u8>>>(capability, request, || unreachable!())
                .unwrap_err();
            let (_, mismatch) = replay.finish();
            let mismatch = mismatch.expect("a mismatch");
            assert!(trap.to_string().contains(&mismatch.difference), "{trap}");
            mismatch
        };

        let other_key = diverge(Capability::Kv, get("b"));
        assert!(!other_key.left_unused);
        assert_eq!((other_key.capability, other_key.entry), (Capability::Kv, 0));
        assert_eq!(
            other_key.difference,
            r#"the skill asked {"key":"b"} where the journal recorded {"op":"get","key":"a"}"#
        );
        let other_capability = diverge(Capability::Http, get("a"));
        assert!(
            other_capability.difference.contains(
                "called `http` {\"op\":\"get\",\"key\":\"a\"} where the journal recorded `kv`"
            ),
            "{}",
            other_capability.difference
        );

        // One call too many.
        let mut replay = recorded(entries.clone());
        replay
            .plain::<Option<Vec<u8>>>(Capability::Kv, get("a"), || unreachable!())
            .unwrap()
            .unwrap();
        assert!(
            replay
                .plain::<Option<Vec<u8>>>(Capability::Kv, get("a"), || unreachable!())
                .is_err()
        );
        let (_, mismatch) = replay.finish();
        let mismatch = mismatch.unwrap();
        assert_eq!(mismatch.entry, 1);
        assert!(
            mismatch
                .difference
                .contains("past the end of the journal (1 entries)"),
            "{mismatch:?}"
        );

        // One call too few.
        let (used, mismatch) = recorded(entries.clone()).finish();
        assert!(used.is_empty());
        let mismatch = mismatch.unwrap();
        assert_eq!((mismatch.capability, mismatch.entry), (Capability::Kv, 0));
        assert!(
            mismatch
                .difference
                .contains("ended after 0 of the journal's 1"),
            "{mismatch:?}"
        );
        assert!(mismatch.left_unused);

        // A response that does not answer the request.
        let mut bad = entries.clone();
        bad[0].response = json!({ "ok": 5 });
        let mut replay = recorded(bad);
        assert!(
            replay
                .plain::<Option<Vec<u8>>>(Capability::Kv, get("a"), || unreachable!())
                .is_err()
        );
        assert!(
            replay
                .finish()
                .1
                .unwrap()
                .difference
                .contains("is not an answer")
        );
    }

    fn bytes(n: usize) -> Option<Vec<u8>> {
        Some(vec![7; n])
    }

    #[test]
    fn an_answer_past_the_budget_is_recorded_as_its_refusal_and_replayed_so() {
        let limits = Limits {
            host_call_bytes: Some(64 << 10),
            ..Limits::default()
        };
        let mut budget = HostCallBudget::new(&limits);
        let mut journal = Journal::new(&JournalMode::Record);
        let mut rooms = Vec::new();
        let mut ask = |journal: &mut Journal, budget: &mut HostCallBudget, n: usize| {
            journal
                .call(Capability::Kv, get("k"), 0, budget, |room| {
                    rooms.push(room.bytes);
                    Ok(bytes(n))
                })
                .unwrap()
        };
        // 30 KiB as base64 is 40 KiB held: the first fits, the second not.
        assert!(ask(&mut journal, &mut budget, 30 << 10).is_ok());
        let refused = ask(&mut journal, &mut budget, 30 << 10).unwrap_err();
        assert_eq!(refused.code, BUDGET_EXCEEDED);
        assert!(!refused.retryable);
        for says in [
            "`kv` answer would take",
            "65536 bytes for host calls",
            "host_call_mb",
        ] {
            assert!(refused.message.contains(says), "{}", refused.message);
        }
        // Small answers still fit in what is left.
        assert!(ask(&mut journal, &mut budget, 10).is_ok());
        assert!(rooms[1] < rooms[0], "{rooms:?}");
        assert_eq!(
            budget.refused.as_ref().map(|r| &r.message),
            Some(&refused.message)
        );
        let (records, _) = journal.finish();
        assert_eq!(records[1].response["error"]["code"], BUDGET_EXCEEDED);
        let held: u64 = records
            .iter()
            .map(|r| held_bytes(&r.request) + held_bytes(&r.response) + RECORD_BYTES)
            .sum();
        assert!(held <= 64 << 10, "{held}");

        // The replay, under the same limits, answers as the call was answered.
        let mut budget = HostCallBudget::new(&limits);
        let mut replay = recorded(records.clone());
        for expected in [true, false, true] {
            let answer = replay
                .call::<Option<Vec<u8>>>(
                    Capability::Kv,
                    get("k"),
                    0,
                    &mut budget,
                    |_| unreachable!(),
                )
                .unwrap();
            assert_eq!(answer.is_ok(), expected);
        }
        assert_eq!(replay.finish(), (records, None));
        assert_eq!(budget.refused.unwrap().code, BUDGET_EXCEEDED);
    }

    #[test]
    fn calls_past_the_count_and_requests_past_the_bytes_are_refused_unjournaled() {
        let limits = Limits {
            max_host_calls: 2,
            host_call_bytes: Some(4096),
            ..Limits::default()
        };
        let mut budget = HostCallBudget::new(&limits);
        let mut journal = Journal::new(&JournalMode::Record);
        let mut performed = 0;
        let mut ask = |journal: &mut Journal, budget: &mut HostCallBudget, written: u64| {
            journal
                .call(Capability::Kv, get("k"), written, budget, |_| {
                    performed += 1;
                    Ok(())
                })
                .unwrap()
        };
        // A write whose value does not fit is refused before it is made.
        let too_big = ask(&mut journal, &mut budget, 5000).unwrap_err();
        assert!(
            too_big.message.contains("request takes 5"),
            "{}",
            too_big.message
        );
        ask(&mut journal, &mut budget, 0).unwrap();
        ask(&mut journal, &mut budget, 0).unwrap();
        let third = ask(&mut journal, &mut budget, 0).unwrap_err();
        assert_eq!(third.code, BUDGET_EXCEEDED);
        assert!(
            third.message.contains("has made 2")
                && third.message.contains("`max_host_calls` (now 2"),
            "{}",
            third.message
        );
        assert_eq!(performed, 2);
        assert_eq!(journal.finish().0.len(), 2);
    }

    #[test]
    fn held_bytes_bounds_what_parsed_json_takes() {
        assert_eq!(held_bytes(&Value::Null), 32);
        assert_eq!(held_bytes(&json!("abc")), 32 + 3 + 16);
        // A SQL value as the journal holds it: far more than its text.
        let cell = json!({ "integer": 3 });
        assert!(held_bytes(&cell) > 300, "{}", held_bytes(&cell));
        // Deep nesting is walked without recursion.
        let mut deep = Value::Null;
        for _ in 0..100_000 {
            deep = Value::Array(vec![deep]);
        }
        assert!(held_bytes(&deep) > 100_000 * 48);
        // Dropping it recursively would overflow the stack; unwind it here.
        while let Value::Array(mut inner) = deep {
            deep = inner.pop().unwrap_or(Value::Null);
        }
    }
}
