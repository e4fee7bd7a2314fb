//! `llm-stream`: a completion streamed to an async (WASI 0.3) skill as the
//! model generates it. Linked on the concurrent engine only
//! (`capabilities::link`); a synchronous component that imports it is
//! refused at load (`imports::check`).
//!
//! `complete-stream` checks the request as `complete` does (the grant, the
//! messages, `max-tokens`, the token budget, a `json-schema`) and the
//! per-call bound of streams in
//! flight ([`DEFAULT_MAX_STREAMS`], or the grant's `max_streams`: past it,
//! `too-many-streams` at once), reserves its journal entry in the order the
//! skill asked, and returns a `stream<string>` and a
//! `future<result<completion, skill-error>>` at once. A thread of its own
//! reads the provider's event stream (`providers::LlmProviders::stream`,
//! `sse.rs`) into the call's [`StreamState`]; the host's stream producer
//! hands the skill one delta per read, and the future the final completion
//! (or the error that ended the stream early) once the provider is done.
//!
//! **Structured output.** With a `json-schema`, the provider is asked for
//! it as `complete` asks (`response_format`, or Anthropic's forced tool,
//! whose `input_json_delta`s are the deltas) and the deltas are the JSON
//! text. The future's completion is then checked against the schema as
//! `complete` checks it, after the journal and on what it records: content
//! that does not fit is `invalid-output`, retryable, with the same message,
//! live and in a replay.
//!
//! A stream is in flight until the skill has read its stream to the end
//! (or dropped it) and its future (or dropped it): what the skill saw, so a
//! replay answers the bound the same way. A stream dropped before its end
//! stops its reader at the next delta (its future then says so), and the
//! call's end stops every reader: a skill cannot leave the host reading for
//! it.
//!
//! **The journal.** When the call ends, each streamed completion's entry
//! gets `{"ok": completion, "deltas": [...]}` (or `{"error": ...,
//! "deltas": [...]}`): the deltas exactly as the skill was handed them, one
//! item per read. A replay serves the same items from the entry and never
//! reaches the provider, so the skill's output is reproduced byte for byte.
//! The request carries `"stream": true`, so a replay of a streamed
//! completion never answers a `complete`, nor the reverse.
//!
//! **People.** Each delta the skill is handed goes to the call's
//! [`TokenSink`], if it has one (`CallOptions::tokens`): the engine turns
//! it into a `token` event of the node's attempt.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use serde_json::{Value, json};
use wasmtime::StoreContextMut;
use wasmtime::component::{
    Access, Destination, FutureProducer, FutureReader, StreamProducer, StreamReader, StreamResult,
};

use super::{LlmCall, Prepared};
use crate::capabilities::bindings::skillhost::skill::llm::{Completion, CompletionRequest};
use crate::capabilities::bindings::skillhost::skill::llm_stream as wit;
use crate::capabilities::{Capability, GuestError, HasHostCall, HostCall, guest_error};
use crate::journal::{Journal, Opened, decode_result, encode_result};

/// Streams one call may have in flight at once unless its grant says
/// (`max_streams`).
pub const DEFAULT_MAX_STREAMS: u32 = 4;
/// The largest `max_streams` a grant may set.
pub const MAX_STREAMS_LIMIT: u32 = 64;

/// One delta handed to the skill: which of the call's streamed completions
/// (0 for its first) and the text.
#[derive(Debug, Clone, Copy)]
pub struct TokenDelta<'a> {
    pub stream: u32,
    pub text: &'a str,
}

/// Where a call's deltas go as the skill is handed them
/// (`CallOptions::tokens`). Called on the thread that runs the call, so it
/// must be quick: hand the delta on, do not wait.
#[derive(Clone)]
pub struct TokenSink(Arc<dyn Fn(TokenDelta<'_>) + Send + Sync>);

impl TokenSink {
    pub fn new(sink: impl Fn(TokenDelta<'_>) + Send + Sync + 'static) -> TokenSink {
        TokenSink(Arc::new(sink))
    }
}

impl fmt::Debug for TokenSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TokenSink")
    }
}

/// One streamed completion, shared by the thread reading the provider,
/// the stream and future handed to the skill, and the call.
#[derive(Default)]
pub(crate) struct StreamState {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Read from the provider (or the journal), not yet handed out.
    pending: VecDeque<String>,
    /// Handed to the skill, in order: what the journal records.
    delivered: Vec<String>,
    /// The final completion or the error that ended the stream.
    end: Option<Result<Completion, GuestError>>,
    /// The skill read the stream to its end, or dropped it.
    stream_done: bool,
    /// The skill read the future, or dropped it.
    future_done: bool,
    stream_waker: Option<Waker>,
    future_waker: Option<Waker>,
    /// The call ended: the reading thread stops at its next delta.
    cancelled: bool,
    /// When `end` was set: the completion's span ends there.
    ended_at: Option<std::time::Instant>,
}

impl StreamState {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A delta from the provider; false once the call has ended.
    fn push(&self, text: String) -> bool {
        let mut inner = self.lock();
        if inner.cancelled {
            return false;
        }
        inner.pending.push_back(text);
        if let Some(waker) = inner.stream_waker.take() {
            waker.wake();
        }
        true
    }

    fn end(&self, end: Result<Completion, GuestError>) {
        let mut inner = self.lock();
        inner.end = Some(end);
        inner.ended_at = Some(std::time::Instant::now());
        for waker in [inner.stream_waker.take(), inner.future_waker.take()]
            .into_iter()
            .flatten()
        {
            waker.wake();
        }
    }

    fn in_flight(&self) -> bool {
        let inner = self.lock();
        !(inner.stream_done && inner.future_done)
    }
}

/// A streamed completion of the call: its state, and the journal entry it
/// fills when recording.
pub(crate) struct OpenStream {
    state: Arc<StreamState>,
    slot: Option<usize>,
    /// A replayed stream's recorded answer, charged to the budget when the
    /// call ends, where the recording filled its entry.
    replayed: Option<Value>,
    /// When the skill asked, for the call's timing of it.
    started: (std::time::SystemTime, std::time::Instant),
}

impl LlmCall {
    /// Ends the call's streamed completions: stops their readers, counts
    /// their tokens, and fills their journal entries with what the skill
    /// was handed.
    pub(crate) fn close_streams(&mut self, scope: &mut crate::call::CallScope) {
        for open in std::mem::take(&mut self.streams) {
            let (response, completion, ended_at) = {
                let mut inner = open.state.lock();
                inner.cancelled = true;
                let end = inner.end.clone().unwrap_or_else(|| {
                    Err(GuestError {
                        code: "cancelled".into(),
                        message: "the call ended before the stream did".into(),
                        retryable: true,
                    })
                });
                let mut response = encode_result(&end);
                if let Some(object) = response.as_object_mut() {
                    object.insert("deltas".into(), json!(inner.delivered));
                }
                (response, end.ok(), inner.ended_at)
            };
            if let Some(completion) = &completion {
                self.count(completion);
            }
            if let Some(recorded) = &open.replayed {
                Journal::charge_replayed(recorded, &mut scope.budget);
            }
            if let Some(slot) = open.slot {
                scope.journal.fill(slot, response, &mut scope.budget);
                let (started, opened) = open.started;
                let ended = ended_at.unwrap_or_else(std::time::Instant::now);
                scope.time_call(
                    Capability::Llm,
                    started,
                    ended.saturating_duration_since(opened),
                    Some(slot),
                );
            }
        }
    }
}

/// The state a replay serves: the recorded deltas, then the recorded end.
fn replayed(response: &Value) -> Option<StreamState> {
    let deltas = response.get("deltas")?.as_array()?;
    let pending = deltas
        .iter()
        .map(|d| d.as_str().map(str::to_string))
        .collect::<Option<VecDeque<String>>>()?;
    let end = decode_result::<Completion>(response)?;
    Some(StreamState {
        inner: Mutex::new(Inner {
            pending,
            end: Some(end),
            ..Inner::default()
        }),
    })
}

type Answer = Result<Completion, GuestError>;
/// A streamed completion opened: its state, its index in the call, and
/// the schema check of its answer, if it has one.
type OpenedStream = (Arc<StreamState>, u32, Option<OutputCheck>);
type Opening = Result<(StreamReader<String>, FutureReader<Answer>), GuestError>;

impl HostCall<'_, LlmCall> {
    /// Checks and opens one streamed completion: its state, or the error
    /// the skill gets at once. The outer error traps (a replay diverged,
    /// the deadline passed).
    fn open_stream(
        &mut self,
        request: CompletionRequest,
    ) -> wasmtime::Result<Result<OpenedStream, GuestError>> {
        let Some((grant, providers)) = self.cap.access.clone() else {
            return Ok(Err(self.deny(Capability::Llm)));
        };
        let prepared = match Prepared::new(&grant, request) {
            Ok(prepared) => Arc::new(prepared),
            Err(e) => return Ok(Err(e)),
        };
        if self.cap.tokens_left == Some(0) {
            return Ok(Err(guest_error(
                "token-budget-exceeded",
                format!(
                    "no tokens are left of the run's token budget, so this completion was \
                     refused before it reached provider `{}`",
                    grant.provider
                ),
            )));
        }
        let bound = grant.max_streams.unwrap_or(DEFAULT_MAX_STREAMS);
        let in_flight = self
            .cap
            .streams
            .iter()
            .filter(|s| s.state.in_flight())
            .count();
        if in_flight >= bound as usize {
            return Ok(Err(guest_error(
                "too-many-streams",
                format!(
                    "skill `{}` has {in_flight} streamed completion(s) in flight, the most one \
                     call may (`max_streams` = {bound}); read a stream and its future to the end \
                     (or drop them) before starting another, or raise `max_streams` in the \
                     node's `llm` grant (up to {MAX_STREAMS_LIMIT})",
                    self.scope.skill_name()
                ),
            )));
        }
        if std::time::Instant::now() >= self.scope.deadline() {
            return Err(wasmtime::Trap::Interrupt.into());
        }
        let check = prepared.schema.is_some().then(|| OutputCheck {
            prepared: prepared.clone(),
            provider: grant.provider.clone(),
        });
        let started = (std::time::SystemTime::now(), std::time::Instant::now());
        let mut record = prepared.journal_request(&grant);
        if let Some(object) = record.as_object_mut() {
            object.insert("stream".into(), Value::Bool(true));
        }
        let scope = &mut *self.scope;
        let opened = match scope
            .journal
            .open(Capability::Llm, record, &mut scope.budget)?
        {
            Ok(opened) => opened,
            Err(e) => return Ok(Err(e)),
        };
        let (state, slot, replayed_answer) = match opened {
            Opened::Recorded(response) => {
                let Some(state) = replayed(&response) else {
                    return Err(wasmtime::Error::msg(format!(
                        "replay diverged from the journal: the recorded `llm` entry {response} \
                         is not a streamed completion"
                    )));
                };
                (Arc::new(state), None, Some(response))
            }
            Opened::Slot(slot) => {
                let state = Arc::new(StreamState::default());
                let reader = state.clone();
                let deadline = self.scope.deadline();
                let spawned = std::thread::Builder::new()
                    .name("skillhost-llm-stream".into())
                    .spawn(move || {
                        let chat = prepared.chat(&grant);
                        let end = providers
                            .stream(&grant.provider, &chat, deadline, &mut |delta| {
                                reader.push(delta)
                            })
                            .map_err(GuestError::from);
                        reader.end(end);
                    });
                if let Err(e) = spawned {
                    state.end(Err(guest_error(
                        "provider-unavailable",
                        format!("cannot start a thread to read the stream: {e}"),
                    )));
                }
                (state, Some(slot), None)
            }
        };
        let index = self.cap.streams.len() as u32;
        self.cap.streams.push(OpenStream {
            state: state.clone(),
            slot,
            replayed: replayed_answer,
            started,
        });
        Ok(Ok((state, index, check)))
    }
}

/// The schema check of a structured completion's answer: `complete`'s
/// ([`Prepared::check_output`]), on the provider's (or the journal's)
/// completion, as the future hands it to the skill.
struct OutputCheck {
    prepared: Arc<Prepared>,
    provider: String,
}

impl OutputCheck {
    fn apply(&self, answer: Answer) -> Answer {
        let completion = answer?;
        self.prepared
            .check_output(&self.provider, &completion.content)?;
        Ok(completion)
    }
}

impl wit::Host for HostCall<'_, LlmCall> {}

impl<T> wit::HostWithStore<T> for HasHostCall<LlmCall> {
    fn complete_stream(
        mut host: Access<'_, T, Self>,
        request: CompletionRequest,
    ) -> wasmtime::Result<Opening> {
        let (state, index, check, sink) = {
            let mut call = host.get();
            match call.open_stream(request)? {
                Ok((state, index, check)) => (state, index, check, call.cap.sink.clone()),
                Err(e) => return Ok(Err(e)),
            }
        };
        let stream = StreamReader::new(
            &mut host,
            Deltas {
                state: state.clone(),
                sink,
                index,
            },
        )?;
        let future = FutureReader::new(&mut host, End { state, check })?;
        Ok(Ok((stream, future)))
    }
}

/// The stream the skill reads: one delta per read.
struct Deltas {
    state: Arc<StreamState>,
    sink: Option<TokenSink>,
    index: u32,
}

impl<D> StreamProducer<D> for Deltas {
    type Item = String;
    type Buffer = Option<String>;

    fn poll_produce<'a>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        store: StoreContextMut<'a, D>,
        mut destination: Destination<'a, String, Option<String>>,
        finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        let this = self.get_mut();
        let text = {
            let mut inner = this.state.lock();
            if inner.pending.is_empty() {
                if inner.end.is_some() {
                    inner.stream_done = true;
                    return Poll::Ready(Ok(StreamResult::Dropped));
                }
                if finish {
                    return Poll::Ready(Ok(StreamResult::Cancelled));
                }
                inner.stream_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            // A zero-length read asks whether a delta is ready: it is.
            if destination.remaining(store) == Some(0) {
                return Poll::Ready(Ok(StreamResult::Completed));
            }
            let Some(text) = inner.pending.pop_front() else {
                return Poll::Ready(Ok(StreamResult::Completed));
            };
            inner.delivered.push(text.clone());
            text
        };
        if let Some(sink) = &this.sink {
            (sink.0)(TokenDelta {
                stream: this.index,
                text: &text,
            });
        }
        destination.set_buffer(Some(text));
        Poll::Ready(Ok(StreamResult::Completed))
    }
}

impl Drop for Deltas {
    /// The skill read the stream to its end (the provider is done then), or
    /// dropped it before: the rest is not wanted, so the reading thread
    /// stops at its next delta and the future, if the skill still reads it,
    /// says the completion was abandoned.
    fn drop(&mut self) {
        let mut inner = self.state.lock();
        inner.stream_done = true;
        inner.cancelled = true;
    }
}

/// The future the skill reads: the final completion, or what ended the
/// stream early.
struct End {
    state: Arc<StreamState>,
    /// With a `json-schema`: the check the completion must pass.
    check: Option<OutputCheck>,
}

impl<D> FutureProducer<D> for End {
    type Item = Answer;

    fn poll_produce(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        _store: StoreContextMut<D>,
        finish: bool,
    ) -> Poll<wasmtime::Result<Option<Answer>>> {
        let mut inner = self.state.lock();
        if let Some(end) = &inner.end {
            let end = end.clone();
            inner.future_done = true;
            drop(inner);
            let end = match &self.check {
                Some(check) => check.apply(end),
                None => end,
            };
            return Poll::Ready(Ok(Some(end)));
        }
        if finish {
            return Poll::Ready(Ok(None));
        }
        inner.future_waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for End {
    fn drop(&mut self) {
        self.state.lock().future_done = true;
    }
}
