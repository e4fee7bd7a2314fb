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
//! module (`kv` journals all four of its functions). Answers that are already
//! deterministic (WASI's fixed clocks and seeded randomness, `log`) or that
//! are part of the scenario itself (the `fs` directory) are not journaled.
//!
//! This module knows nothing of where journals are stored: the engine turns
//! records into the store's rows, and a replay is handed records by whoever
//! read them.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::capabilities::{Capability, GuestError};

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

fn encode_result<T: JournalValue>(result: &Result<T, GuestError>) -> Value {
    match result {
        Ok(value) => json!({ "ok": value.to_journal() }),
        Err(error) => json!({ "error": {
            "code": error.code,
            "message": error.message,
            "retryable": error.retryable,
        }}),
    }
}

fn decode_result<T: JournalValue>(response: &Value) -> Option<Result<T, GuestError>> {
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

    /// One journaled host call of `capability` asking `request`: `perform`
    /// answers it when recording, the next entry when replaying. The outer
    /// error is a trap: the replay diverged and the guest must stop here.
    pub(crate) fn call<T: JournalValue>(
        &mut self,
        capability: Capability,
        request: Value,
        perform: impl FnOnce() -> Result<T, GuestError>,
    ) -> wasmtime::Result<Result<T, GuestError>> {
        match self {
            Journal::Record(records) => {
                let result = perform();
                records.push(JournalRecord {
                    capability,
                    response: encode_result(&result),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn get(key: &str) -> Value {
        json!({ "op": "get", "key": key })
    }

    fn recorded(entries: Vec<JournalRecord>) -> Journal {
        Journal::new(&JournalMode::Replay(entries.into()))
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
            .call(Capability::Kv, get("a"), || Ok(Some(b"1".to_vec())))
            .unwrap()
            .unwrap();
        assert_eq!(answer.as_deref(), Some(&b"1"[..]));
        let failed: Result<(), GuestError> = journal
            .call(
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
            .call(Capability::Kv, get("a"), || {
                panic!("a replay never performs")
            })
            .unwrap()
            .unwrap();
        assert_eq!(answer.as_deref(), Some(&b"1"[..]));
        let error = replay
            .call::<()>(
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
                .call::<Option<Vec<u8>>>(capability, request, || unreachable!())
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
            .call::<Option<Vec<u8>>>(Capability::Kv, get("a"), || unreachable!())
            .unwrap()
            .unwrap();
        assert!(
            replay
                .call::<Option<Vec<u8>>>(Capability::Kv, get("a"), || unreachable!())
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
                .call::<Option<Vec<u8>>>(Capability::Kv, get("a"), || unreachable!())
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
}
