//! `http-stream`: a response body streamed to an async (WASI 0.3) skill as
//! it arrives. Linked on the concurrent engine only (`capabilities::link`);
//! a synchronous component that imports it is refused at load
//! (`imports::check`).
//!
//! `fetch-stream` is `fetch` with the body left to come: the same grant,
//! request checks, redirects (followed here, each hop checked), addresses,
//! secret headers, `Accept-Encoding: identity` and `response-encoded` (the
//! same `follow`). It returns once the last hop's head has arrived: the
//! head (status and headers, redacted), a `stream<u8>` of the body and a
//! `future<result<_, skill-error>>` of its outcome. It is an `async func`,
//! a concurrent host function: the checks and the journal entry's
//! reservation happen when the skill calls it, in the order it calls; a
//! thread of the request's own then sends it and follows its redirects
//! while the skill's other tasks run (several requests may wait for their
//! heads at once), hands the head back, and reads the body into the call's
//! [`BodyState`], at most [`READ_AHEAD`] bytes ahead of the skill; the
//! host's stream producer hands the skill at most what its read asks for,
//! from the front of what is pending.
//!
//! What holds over the stream, as over `fetch`'s body:
//!
//! - **size**: the body's bytes are counted as they arrive; the skill is
//!   handed at most `max_response_bytes` of them, and the stream ends with
//!   `response-too-large` one byte past the limit (a `Content-Length` past
//!   it is refused before any). The limit is lower when the call's
//!   host-call budget has less room left when the body starts (as base64,
//!   as the journal keeps it): past that, the budget's refusal;
//! - **time**: the request, its body included, ends at the call's deadline
//!   (or the request's `timeout-ms`), however long the skill takes to read:
//!   the stream then ends with `timeout`. A connection cut mid-body ends it
//!   with `request-failed`;
//! - **secrets**: the body is redacted as `fetch`'s is, across chunks: the
//!   reader holds back the last bytes that could still begin a secret (in
//!   any of its echoed forms: one less than the longest form's length) until
//!   the next bytes tell, so a secret split over two reads, or over many, is
//!   never handed on in parts. A body that ends holds back nothing; one cut
//!   by an error drops what it held back. Error messages are redacted too.
//!
//! A body is in flight from its request's start (before its head) until
//! the skill has read its stream to the end (or dropped it) and its future
//! (or dropped it); a request whose call the skill dropped before its head
//! came stays in flight until the call ends. Bodies in flight are bounded
//! per call ([`DEFAULT_MAX_STREAMS`], or the grant's
//! `max_streams`: past it, `too-many-streams` at once). A stream dropped
//! before its end stops its reader at its next read, and the call's end
//! stops every reader.
//!
//! **The journal.** The entry is reserved in the order the skill asked
//! (the request as `fetch` records it, with `"stream": true`) and filled
//! when the call ends: `{"ok": {status, headers, body_bytes}, "chunks":
//! [base64, ...], "end": {"ok": null} | {"error": ...}}`, the chunks exactly
//! as the skill was handed them (after redaction), one per read; or
//! `{"error": ...}` when the request failed before a head came. A replay
//! serves the same head, chunks and outcome from the entry and never
//! reaches the network. A request the skill never got an answer to (it
//! dropped the call before the head came, or the call ended) is `{"error":
//! {"code": "cancelled", ...}, "abandoned": true}`; a replay leaves that
//! call waiting as the recording did, until the skill drops it or the
//! deadline passes (then `timeout`, as the request would have).

use std::collections::VecDeque;
use std::io::Read;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};
use tokio::sync::oneshot;
use wasmtime::StoreContextMut;
use wasmtime::component::{
    Accessor, Destination, FutureProducer, FutureReader, StreamProducer, StreamReader,
    StreamResult, VecBuffer,
};

use super::{
    ANSWER_OVERHEAD, Bounds, Hop, HttpCall, HttpFailure, Redaction, failed, follow, journal_request,
};
use crate::call::CallScope;
use crate::capabilities::bindings::skillhost::skill::http::Request;
use crate::capabilities::bindings::skillhost::skill::http_stream::{self as wit, ResponseHead};
use crate::capabilities::{Capability, GuestError, HasHostCall, HostCall, guest_error};
use crate::journal::{Journal, Opened, decode_result, encode_result};
use crate::limits::{AnswerRoom, BUDGET_EXCEEDED};

/// The interface of streamed bodies, as a component imports it.
pub const STREAM_INTERFACE: &str = "http-stream";
/// Bodies one call may have in flight at once unless its grant says
/// (`max_streams`).
pub const DEFAULT_MAX_STREAMS: u32 = 4;
/// The largest `max_streams` a grant may set.
pub const MAX_STREAMS_LIMIT: u32 = 64;
/// Marks a journal entry whose request never handed the skill a head (see
/// [`HttpCall::close_streams`]).
const ABANDONED: &str = "abandoned";
/// The most the reader asks of the connection at once.
const READ_SIZE: usize = 16 << 10;
/// The most a reader holds that the skill has not read: past it, the
/// reader waits for the skill (or the deadline).
pub const READ_AHEAD: usize = 1 << 20;

/// One streamed body, shared by the thread reading it, the stream and
/// future handed to the skill, and the call.
#[derive(Default)]
pub(crate) struct BodyState {
    inner: Mutex<Inner>,
    /// Signalled when the skill takes bytes, or the body is abandoned.
    space: Condvar,
}

#[derive(Default)]
struct Inner {
    /// Read (and redacted), not yet handed to the skill.
    pending: VecDeque<Vec<u8>>,
    pending_bytes: usize,
    /// Handed to the skill, one item per read: what the journal records.
    delivered: Vec<Vec<u8>>,
    delivered_bytes: u64,
    /// How the body ended: whole, or the error that cut it.
    end: Option<Result<(), GuestError>>,
    /// The skill read the stream to its end, or dropped it.
    stream_done: bool,
    /// The skill read the future, or dropped it.
    future_done: bool,
    stream_waker: Option<Waker>,
    future_waker: Option<Waker>,
    /// The skill dropped the stream or the call ended: the reader stops.
    cancelled: bool,
}

impl BodyState {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes of the body, once fewer than [`READ_AHEAD`] are pending;
    /// false once the body is abandoned or `deadline` has passed.
    fn push(&self, bytes: Vec<u8>, deadline: Instant) -> bool {
        let mut inner = self.lock();
        loop {
            if inner.cancelled {
                return false;
            }
            if inner.pending_bytes < READ_AHEAD {
                break;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            inner = match self.space.wait_timeout(inner, left) {
                Ok((inner, _)) => inner,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
        inner.pending_bytes += bytes.len();
        inner.pending.push_back(bytes);
        if let Some(waker) = inner.stream_waker.take() {
            waker.wake();
        }
        true
    }

    /// How the body ended; the first word stands.
    fn end(&self, end: Result<(), GuestError>) {
        let mut inner = self.lock();
        end_with(&mut inner, end);
    }

    fn cancelled(&self) -> bool {
        self.lock().cancelled
    }

    /// A body the skill will never read: its reader stops, and `end` is
    /// how it ended unless something came first. Unless `done`, it stays
    /// in flight for the rest of the call.
    fn abandon(&self, end: Result<(), GuestError>, done: bool) {
        let mut inner = self.lock();
        inner.cancelled = true;
        if done {
            inner.stream_done = true;
            inner.future_done = true;
        }
        end_with(&mut inner, end);
        self.space.notify_all();
    }

    fn in_flight(&self) -> bool {
        let inner = self.lock();
        !(inner.stream_done && inner.future_done)
    }
}

fn end_with(inner: &mut Inner, end: Result<(), GuestError>) {
    if inner.end.is_none() {
        inner.end = Some(end);
    }
    for waker in [inner.stream_waker.take(), inner.future_waker.take()]
        .into_iter()
        .flatten()
    {
        waker.wake();
    }
}

/// A streamed body of the call: its state, its head as the journal records
/// it, and the journal entry it fills when recording.
pub(crate) struct OpenBody {
    state: Arc<BodyState>,
    head: Value,
    slot: Option<usize>,
    /// A replayed body's recorded answer, charged to the budget when the
    /// call ends, where the recording filled its entry.
    replayed: Option<Value>,
}

impl HttpCall {
    /// Ends the call's streamed bodies: stops their readers, and fills
    /// their journal entries with what the skill was handed.
    pub(crate) fn close_streams(&mut self, scope: &mut CallScope) {
        for open in std::mem::take(&mut self.streams) {
            let (response, refusal) = {
                let mut inner = open.state.lock();
                inner.cancelled = true;
                open.state.space.notify_all();
                let end = inner.end.clone().unwrap_or_else(|| {
                    Err(GuestError {
                        code: "cancelled".into(),
                        message: "the call ended before the body did".into(),
                        retryable: true,
                    })
                });
                let mut head = open.head;
                // No head reached the skill: the call ended, or the skill
                // cancelled it, before one came. A replay answers with the
                // same error at once.
                if head.is_null() && open.replayed.is_none() {
                    let end = match inner.end.clone() {
                        Some(Err(error)) => error,
                        _ => GuestError {
                            code: "cancelled".into(),
                            message: "the call ended before the response's head came".into(),
                            retryable: true,
                        },
                    };
                    let mut response = encode_result::<()>(&Err(end));
                    response[ABANDONED] = Value::Bool(true);
                    (response, None)
                } else {
                    if let Some(object) = head.as_object_mut() {
                        object.insert("body_bytes".into(), json!(inner.delivered_bytes));
                    }
                    let chunks: Vec<String> = inner
                        .delivered
                        .iter()
                        .map(|c| base64::engine::general_purpose::STANDARD.encode(c))
                        .collect();
                    let refusal = match &end {
                        Err(error) if error.code == BUDGET_EXCEEDED => Some(error.clone()),
                        _ => None,
                    };
                    let response =
                        json!({ "ok": head, "chunks": chunks, "end": encode_result(&end) });
                    (response, refusal)
                }
            };
            if let Some(refusal) = refusal {
                scope.budget.refused(refusal);
            }
            if let Some(recorded) = &open.replayed {
                Journal::charge_replayed(recorded, &mut scope.budget);
            }
            if let Some(slot) = open.slot {
                scope.journal.fill(slot, response, &mut scope.budget);
            }
        }
    }
}

/// Redacts a body as it arrives: each secret of the grant in every form
/// [`Redaction`] knows, wherever the reads split it.
struct Held<'a> {
    redaction: &'a Redaction,
    /// Received, not yet handed on: never more than `keep` bytes between
    /// reads.
    bytes: Vec<u8>,
    /// One less than the longest form of a secret: what may still begin
    /// one.
    keep: usize,
}

impl<'a> Held<'a> {
    fn new(redaction: &'a Redaction) -> Held<'a> {
        Held {
            redaction,
            bytes: Vec::new(),
            keep: redaction.longest.saturating_sub(1),
        }
    }

    /// What of the body so far can be handed on, redacted: every byte
    /// except the last `keep`, unless a secret that starts before them
    /// covers them. A secret found here starts where every form of every
    /// secret fits in what was received, so it is the match a search of the
    /// whole body finds there (leftmost, longest).
    fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        self.bytes.extend_from_slice(chunk);
        let safe = self.bytes.len().saturating_sub(self.keep);
        let mut out = Vec::with_capacity(safe);
        let mut pos = 0;
        for found in self.redaction.finder.find_iter(&self.bytes) {
            if found.start() >= safe {
                break;
            }
            out.extend_from_slice(&self.bytes[pos..found.start()]);
            out.extend_from_slice(
                self.redaction.replacements[found.pattern().as_usize()].as_bytes(),
            );
            pos = found.end();
        }
        let to = pos.max(safe);
        out.extend_from_slice(&self.bytes[pos..to]);
        self.bytes.drain(..to);
        out
    }

    /// The rest, redacted, at the body's end.
    fn finish(&mut self) -> Vec<u8> {
        let rest = std::mem::take(&mut self.bytes);
        self.redaction
            .finder
            .replace_all_bytes(&rest, &self.redaction.replacements)
    }
}

/// What the reader thread needs besides the body.
struct Reading {
    state: Arc<BodyState>,
    redaction: Option<Arc<Redaction>>,
    limit: u64,
    room: Option<AnswerRoom>,
    deadline: Instant,
    method: String,
    url: url::Url,
}

/// Reads the body into `reading.state` until it ends, is cut, passes the
/// limit or the deadline, or is abandoned.
fn read_body(reading: Reading, mut body: Box<dyn Read + Send>) {
    let Reading {
        state,
        redaction,
        limit,
        room,
        deadline,
        method,
        url,
    } = reading;
    let mut held = redaction.as_deref().map(Held::new);
    let mut buf = vec![0u8; READ_SIZE];
    let mut read: u64 = 0;
    let end = loop {
        // One byte past the limit, and no further.
        let want = (limit + 1 - read).min(READ_SIZE as u64) as usize;
        match body.read(&mut buf[..want]) {
            Ok(0) => {
                let rest = held.as_mut().map(Held::finish).unwrap_or_default();
                if !rest.is_empty() && !state.push(rest, deadline) {
                    break abandoned(&state, &url);
                }
                break Ok(());
            }
            Ok(n) => {
                read += n as u64;
                let within = n - read.saturating_sub(limit) as usize;
                let bytes = &buf[..within];
                let out = match held.as_mut() {
                    Some(held) => held.feed(bytes),
                    None => bytes.to_vec(),
                };
                if !out.is_empty() && !state.push(out, deadline) {
                    break abandoned(&state, &url);
                }
                if read > limit {
                    break Err(match room {
                        Some(room) => room.refuse(Capability::Http, None),
                        None => failed(HttpFailure::TooLarge { limit }, &method, &url),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                let failure = match super::read_failure(&e) {
                    // The deadline, whichever side of the client noticed.
                    HttpFailure::Failed(_) if Instant::now() >= deadline => HttpFailure::Timeout,
                    failure => failure,
                };
                break Err(failed(failure, &method, &url));
            }
        }
    };
    let end = end.map_err(|error| match &redaction {
        Some(redaction) => redaction.error(error),
        None => error,
    });
    state.end(end);
}

/// Why a reader stopped handing bytes on: the skill dropped the stream, or
/// it waited for the skill past the deadline.
fn abandoned(state: &BodyState, url: &url::Url) -> Result<(), GuestError> {
    if state.cancelled() {
        Err(dropped())
    } else {
        Err(super::timed_out(url))
    }
}

fn dropped() -> GuestError {
    GuestError {
        code: "cancelled".into(),
        message: "the skill dropped the body's stream before its end".into(),
        retryable: false,
    }
}

/// The head and state a replay serves: the recorded head, chunks and end;
/// or the recorded error of a request that got no head.
fn replayed(response: &Value) -> Option<Result<(ResponseHead, BodyState), GuestError>> {
    if response.get("chunks").is_none() {
        return match decode_result::<Value>(response)? {
            Err(error) => Some(Err(error)),
            Ok(_) => None,
        };
    }
    let head = response.get("ok")?;
    let head = ResponseHead {
        status: u16::try_from(head.get("status")?.as_u64()?).ok()?,
        headers: serde_json::from_value(head.get("headers")?.clone()).ok()?,
    };
    let pending = response
        .get("chunks")?
        .as_array()?
        .iter()
        .map(|c| {
            base64::engine::general_purpose::STANDARD
                .decode(c.as_str()?)
                .ok()
        })
        .collect::<Option<VecDeque<Vec<u8>>>>()?;
    let end = decode_result::<()>(response.get("end")?)?;
    let pending_bytes = pending.iter().map(Vec::len).sum();
    Some(Ok((
        head,
        BodyState {
            inner: Mutex::new(Inner {
                pending,
                pending_bytes,
                end: Some(end),
                ..Inner::default()
            }),
            space: Condvar::new(),
        },
    )))
}

type Outcome = Result<(), GuestError>;
type Opening = Result<(ResponseHead, StreamReader<u8>, FutureReader<Outcome>), GuestError>;
type HeadAndBody = Result<(ResponseHead, Arc<BodyState>), GuestError>;

/// How a request's head comes: at once (refused, failed before sending, or
/// replayed), or later, from the thread that sends it.
enum Begun {
    Now(HeadAndBody),
    Sending {
        state: Arc<BodyState>,
        head: oneshot::Receiver<Result<ResponseHead, GuestError>>,
        /// For a replayed request whose head never came: dropped with the
        /// waiting call, it stops the thread that ends the wait at the
        /// deadline.
        hold: Option<mpsc::Sender<()>>,
    },
}

/// What the thread that sends a request needs: all of it owned, since the
/// skill runs on while the head is awaited.
struct Outbound {
    grant: Arc<super::HttpGrant>,
    backend: Arc<dyn super::HttpBackend>,
    skill: String,
    request: Request,
    first: url::Url,
    deadline: Instant,
    room: AnswerRoom,
    state: Arc<BodyState>,
}

impl HostCall<'_, HttpCall> {
    /// Checks one request and reserves its journal entry, in the order the
    /// skill started its requests; then sends it on a thread of its own,
    /// unless it is answered at once (refused, or replayed from the
    /// journal). The outer error traps (a replay diverged, the deadline
    /// passed).
    fn begin_body(&mut self, request: Request) -> wasmtime::Result<Begun> {
        let Some((grant, backend)) = self.cap.access.clone() else {
            return Ok(Begun::Now(Err(self.deny(Capability::Http))));
        };
        let first = match self.check(&grant, &request) {
            Ok(url) => url,
            Err(e) => return Ok(Begun::Now(Err(e))),
        };
        let bound = grant.max_streams.unwrap_or(DEFAULT_MAX_STREAMS);
        let in_flight = self
            .cap
            .streams
            .iter()
            .filter(|s| s.state.in_flight())
            .count();
        if in_flight >= bound as usize {
            return Ok(Begun::Now(Err(guest_error(
                "too-many-streams",
                format!(
                    "skill `{}` has {in_flight} streamed response bodies in flight, the most one \
                     call may (`max_streams` = {bound}); read a stream and its future to the end \
                     (or drop them) before starting another, or raise `max_streams` in the \
                     node's `http` grant (up to {MAX_STREAMS_LIMIT}). A request dropped before \
                     its head came counts until the call ends",
                    self.scope.skill_name()
                ),
            ))));
        }
        if Instant::now() >= self.scope.deadline() {
            return Err(wasmtime::Trap::Interrupt.into());
        }
        let mut deadline = self.scope.deadline();
        if let Some(ms) = request.timeout_ms {
            deadline = deadline.min(Instant::now() + Duration::from_millis(u64::from(ms)));
        }
        let mut record = journal_request(&request);
        if let Some(object) = record.as_object_mut() {
            object.insert("stream".into(), Value::Bool(true));
        }
        let scope = &mut *self.scope;
        let opened = match scope
            .journal
            .open(Capability::Http, record, &mut scope.budget)?
        {
            Ok(opened) => opened,
            Err(e) => return Ok(Begun::Now(Err(e))),
        };
        let slot = match opened {
            // The recorded skill never got this request's head: it dropped
            // the call first, or the call ended. The replay keeps it waiting
            // the same way, until the skill drops it (as it did) or, if it
            // never does, the deadline, where the request would have timed
            // out.
            Opened::Recorded(response) if response.get(ABANDONED) == Some(&Value::Bool(true)) => {
                Journal::charge_replayed(&response, &mut self.scope.budget);
                let state = Arc::new(BodyState::default());
                self.cap.streams.push(OpenBody {
                    state: state.clone(),
                    head: Value::Null,
                    slot: None,
                    replayed: None,
                });
                let (sender, head) = oneshot::channel();
                let (hold, held) = mpsc::channel::<()>();
                let wait = deadline.saturating_duration_since(Instant::now());
                let spawned = std::thread::Builder::new()
                    .name("skillhost-http-stream".into())
                    .spawn(move || {
                        if let Err(mpsc::RecvTimeoutError::Timeout) = held.recv_timeout(wait) {
                            let _ = sender.send(Err(super::timed_out(&first)));
                        }
                    });
                if let Err(e) = spawned {
                    return Err(wasmtime::Error::msg(format!(
                        "cannot start a thread to replay a request that got no head: {e}"
                    )));
                }
                return Ok(Begun::Sending {
                    state,
                    head,
                    hold: Some(hold),
                });
            }
            Opened::Recorded(response) => {
                return match replayed(&response) {
                    Some(Ok((head, state))) => {
                        let state = Arc::new(state);
                        self.cap.streams.push(OpenBody {
                            state: state.clone(),
                            head: Value::Null,
                            slot: None,
                            replayed: Some(response),
                        });
                        Ok(Begun::Now(Ok((head, state))))
                    }
                    // The recording filled a failed head's entry at once.
                    Some(Err(error)) => {
                        Journal::charge_replayed(&response, &mut self.scope.budget);
                        Ok(Begun::Now(Err(error)))
                    }
                    None => Err(wasmtime::Error::msg(format!(
                        "replay diverged from the journal: the recorded `http` entry {response} \
                         is not a streamed response"
                    ))),
                };
            }
            Opened::Slot(slot) => slot,
        };
        // The body is in flight from now on: it counts against the bound,
        // and the call's end fills its entry whatever became of it.
        let state = Arc::new(BodyState::default());
        self.cap.streams.push(OpenBody {
            state: state.clone(),
            head: Value::Null,
            slot: Some(slot),
            replayed: None,
        });
        let outbound = Outbound {
            grant,
            backend,
            skill: self.scope.skill_name().to_string(),
            request,
            first,
            deadline,
            // What the body may take of the host-call budget: the room
            // left now, as the journal holds it (base64).
            room: self.scope.budget.room(),
            state: state.clone(),
        };
        let (sender, head) = oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("skillhost-http-stream".into())
            .spawn(move || send(outbound, sender));
        if let Err(e) = spawned {
            let error = guest_error(
                "request-failed",
                format!("cannot start a thread to send the request: {e}"),
            );
            return Ok(Begun::Now(self.headed(&state, Err(error))));
        }
        Ok(Begun::Sending {
            state,
            head,
            hold: None,
        })
    }

    /// A sent request's head has come (or its error): the journal entry
    /// records the head, to be filled with the body when the call ends, or
    /// is filled with the error now.
    fn headed(
        &mut self,
        state: &Arc<BodyState>,
        head: Result<ResponseHead, GuestError>,
    ) -> HeadAndBody {
        let at = self
            .cap
            .streams
            .iter()
            .position(|open| Arc::ptr_eq(&open.state, state));
        match head {
            Ok(head) => {
                if let Some(at) = at {
                    self.cap.streams[at].head =
                        json!({ "status": head.status, "headers": head.headers });
                }
                Ok((head, state.clone()))
            }
            Err(error) => {
                state.abandon(Err(error.clone()), true);
                if let Some(OpenBody {
                    slot: Some(slot), ..
                }) = at.map(|at| self.cap.streams.remove(at))
                {
                    let scope = &mut *self.scope;
                    scope.journal.fill(
                        slot,
                        encode_result::<()>(&Err(error.clone())),
                        &mut scope.budget,
                    );
                }
                Err(error)
            }
        }
    }
}

/// Sends the request and follows its redirects to the last head, hands the
/// head to the skill's waiting call, then reads the body; on the thread
/// [`HostCall::begin_body`] started.
fn send(outbound: Outbound, sender: oneshot::Sender<Result<ResponseHead, GuestError>>) {
    match open_head(outbound) {
        Err(error) => {
            let _ = sender.send(Err(error));
        }
        Ok((head, reading, body)) => {
            // Nobody waits for it: the skill cancelled the call, or the call
            // ended. Dropping the body closes the connection.
            if sender.send(Ok(head)).is_err() || reading.state.cancelled() {
                return;
            }
            read_body(reading, body);
        }
    }
}

/// Sends the request and follows its redirects to the last head: the head
/// (redacted), what reading the body takes, and the body; or the error the
/// skill gets instead (redacted).
fn open_head(
    outbound: Outbound,
) -> Result<(ResponseHead, Reading, Box<dyn Read + Send>), GuestError> {
    let Outbound {
        grant,
        backend,
        skill,
        request,
        first,
        deadline,
        room,
        state,
    } = outbound;
    let redaction = Redaction::of(&grant)?.map(Arc::new);
    let limit = grant
        .max_response_bytes
        .min(room.bytes.saturating_sub(ANSWER_OVERHEAD) / 4 * 3);
    let bounds = Bounds {
        deadline,
        max_response_bytes: limit,
        room: Some(room),
    };
    let answer = follow(
        &grant,
        &skill,
        &request,
        first,
        &bounds,
        redaction.as_deref(),
        &mut |outbound| {
            backend.open(outbound).map(|r| Hop {
                status: r.status,
                headers: r.headers,
                body: r.body,
            })
        },
    );
    let (hop, url) = answer.map_err(|error| match &redaction {
        Some(redaction) => redaction.error(error),
        None => error,
    })?;
    let headers = match &redaction {
        None => hop.headers,
        Some(redaction) => hop
            .headers
            .into_iter()
            .map(|(name, value)| (redaction.text(&name), redaction.text(&value)))
            .collect(),
    };
    let head = ResponseHead {
        status: hop.status,
        headers,
    };
    let reading = Reading {
        state,
        redaction,
        limit,
        // Past a limit lower than the grant's, the budget's refusal.
        room: (limit < grant.max_response_bytes).then_some(room),
        deadline,
        method: request.method.clone(),
        url,
    };
    Ok((head, reading, hop.body))
}

/// A call of `fetch-stream` waiting for its head. Dropped before the head
/// came (the skill cancelled the call, or the call ended), the body is
/// abandoned: its thread stops once the head comes (or at the deadline),
/// and the journal records that the skill got no head. It stays in flight
/// for the rest of the call: the bound on bodies in flight also bounds the
/// threads a skill can leave waiting on heads by starting and dropping
/// requests, and it holds the same in a replay, where no thread waits.
struct AwaitingHead {
    state: Option<Arc<BodyState>>,
    /// See [`Begun::Sending`]: dropped with this.
    _hold: Option<mpsc::Sender<()>>,
}

impl Drop for AwaitingHead {
    fn drop(&mut self) {
        if let Some(state) = self.state.take() {
            state.abandon(
                Err(GuestError {
                    code: "cancelled".into(),
                    message: "the request was cancelled before its response's head came (the \
                          skill dropped its call, or the call ended)"
                        .into(),
                    retryable: false,
                }),
                false,
            );
        }
    }
}

impl wit::Host for HostCall<'_, HttpCall> {}

impl<T> wit::HostWithStore<T> for HasHostCall<HttpCall> {
    async fn fetch_stream(
        store: &Accessor<T, Self>,
        request: Request,
    ) -> wasmtime::Result<Opening> {
        let opened = match store.with(|mut access| access.get().begin_body(request))? {
            Begun::Now(opened) => opened,
            Begun::Sending { state, head, hold } => {
                let mut waiting = AwaitingHead {
                    state: Some(state.clone()),
                    _hold: hold,
                };
                // Every path of the sending thread sends before it drops
                // the sender, unless it panicked.
                let head = head.await.unwrap_or_else(|_| {
                    Err(guest_error(
                        "request-failed",
                        "the thread sending the request stopped without an answer",
                    ))
                });
                waiting.state = None;
                store.with(|mut access| access.get().headed(&state, head))
            }
        };
        let (head, state) = match opened {
            Ok(opened) => opened,
            Err(e) => return Ok(Err(e)),
        };
        store.with(|mut access| {
            let stream = StreamReader::new(
                &mut access,
                Body {
                    state: state.clone(),
                },
            )?;
            let future = FutureReader::new(&mut access, End { state })?;
            Ok(Ok((head, stream, future)))
        })
    }
}

/// The stream the skill reads: at most what each read asks for, from the
/// front of what is pending.
struct Body {
    state: Arc<BodyState>,
}

impl<D: 'static> StreamProducer<D> for Body {
    type Item = u8;
    type Buffer = VecBuffer<u8>;

    fn poll_produce<'a>(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut store: StoreContextMut<'a, D>,
        destination: Destination<'a, u8, VecBuffer<u8>>,
        finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        let this = self.get_mut();
        let mut inner = this.state.lock();
        let Some(front_len) = inner.pending.front().map(Vec::len) else {
            if inner.end.is_some() {
                inner.stream_done = true;
                return Poll::Ready(Ok(StreamResult::Dropped));
            }
            if finish {
                return Poll::Ready(Ok(StreamResult::Cancelled));
            }
            inner.stream_waker = Some(cx.waker().clone());
            return Poll::Pending;
        };
        let asked = destination.remaining(&mut store);
        // A zero-length read asks whether bytes are ready: they are.
        if asked == Some(0) {
            return Poll::Ready(Ok(StreamResult::Completed));
        }
        let n = asked.map_or(front_len, |asked| asked.min(front_len));
        let mut direct = destination.as_direct(store, n);
        let room = direct.remaining();
        let n = n.min(room.len());
        let piece = match inner.pending.front_mut() {
            Some(front) if n < front.len() => {
                let rest = front.split_off(n);
                std::mem::replace(front, rest)
            }
            _ => inner.pending.pop_front().unwrap_or_default(),
        };
        room[..n].copy_from_slice(&piece);
        direct.mark_written(n);
        inner.pending_bytes -= n;
        inner.delivered_bytes += n as u64;
        inner.delivered.push(piece);
        this.state.space.notify_all();
        Poll::Ready(Ok(StreamResult::Completed))
    }
}

impl Drop for Body {
    /// The skill read the stream to its end, or dropped it before: the
    /// rest is not wanted, so the reader stops at its next read and the
    /// future, if the skill still reads it, says the body was abandoned.
    fn drop(&mut self) {
        let mut inner = self.state.lock();
        inner.stream_done = true;
        inner.cancelled = true;
        end_with(&mut inner, Err(dropped()));
        self.state.space.notify_all();
    }
}

/// The future the skill reads: the body's outcome.
struct End {
    state: Arc<BodyState>,
}

impl<D> FutureProducer<D> for End {
    type Item = Outcome;

    fn poll_produce(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        _store: StoreContextMut<D>,
        finish: bool,
    ) -> Poll<wasmtime::Result<Option<Outcome>>> {
        let mut inner = self.state.lock();
        if let Some(end) = &inner.end {
            let end = end.clone();
            inner.future_done = true;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn redaction(secrets: &[(&str, &str)]) -> Redaction {
        let mut headers = serde_json::Map::new();
        for (variable, value) in secrets {
            // SAFETY: tests in this binary do not read these variables elsewhere.
            unsafe { std::env::set_var(variable, value) };
            headers.insert(format!("X-{variable}"), json!(format!("env:{variable}")));
        }
        let grant = super::super::HttpGrant::parse(
            &json!({ "hosts": ["a.example.org"], "headers": { "https://a.example.org": headers } })
                .to_string(),
        )
        .unwrap();
        Redaction::of(&grant).unwrap().unwrap()
    }

    /// `body` fed in pieces cut at `cuts`, as the reader hands it on.
    fn streamed(redaction: &Redaction, body: &[u8], cuts: &[usize]) -> Vec<u8> {
        let mut held = Held::new(redaction);
        let mut out = Vec::new();
        let mut at = 0;
        for &cut in cuts.iter().chain([&body.len()]) {
            out.extend(held.feed(&body[at..cut]));
            at = cut;
        }
        out.extend(held.finish());
        out
    }

    #[test]
    fn a_secret_split_anywhere_across_reads_is_redacted_as_a_whole_body_is() {
        let secret = "s3cret/value with space";
        let redaction = redaction(&[("SKILLHOST_TEST_HTTP_STREAM_SPLIT", secret)]);
        let json = serde_json::to_string(secret).unwrap();
        let form: String = url::form_urlencoded::byte_serialize(secret.as_bytes()).collect();
        for form in [secret.to_string(), json.trim_matches('"').to_string(), form] {
            let body = format!("before {form} middle {form}{form} after").into_bytes();
            let whole = redaction
                .finder
                .replace_all_bytes(&body, &redaction.replacements);
            assert!(!String::from_utf8_lossy(&whole).contains("s3cret"));
            // Every single cut, every pair of cuts, and a byte at a time.
            for a in 0..=body.len() {
                assert_eq!(streamed(&redaction, &body, &[a]), whole, "cut at {a}");
                for b in a..=body.len() {
                    assert_eq!(streamed(&redaction, &body, &[a, b]), whole, "{a}, {b}");
                }
            }
            let bytes: Vec<usize> = (1..body.len()).collect();
            assert_eq!(streamed(&redaction, &body, &bytes), whole);
        }
    }

    #[test]
    fn a_reader_waits_for_the_skill_past_its_read_ahead_until_the_deadline_or_a_drop() {
        // Past the read-ahead, a reader waits; at the deadline it gives up.
        let state = BodyState::default();
        let deadline = Instant::now() + Duration::from_millis(200);
        assert!(state.push(vec![0; READ_AHEAD], deadline));
        let started = Instant::now();
        assert!(!state.push(vec![0; 1], deadline));
        assert!(started.elapsed() >= Duration::from_millis(150));
        assert_eq!(state.lock().pending_bytes, READ_AHEAD);
        // A body the skill abandons wakes a waiting reader at once.
        let state = Arc::new(BodyState::default());
        let far = Instant::now() + Duration::from_secs(60);
        assert!(state.push(vec![0; READ_AHEAD], far));
        let waiting = {
            let state = state.clone();
            std::thread::spawn(move || state.push(vec![0; 1], far))
        };
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        drop(Body {
            state: state.clone(),
        });
        assert!(!waiting.join().unwrap());
        assert!(started.elapsed() < Duration::from_secs(5));
        let end = state.lock().end.clone();
        assert!(
            matches!(&end, Some(Err(e)) if e.code == "cancelled"),
            "{end:?}"
        );
    }

    #[test]
    fn the_reader_holds_back_no_more_than_could_begin_a_secret() {
        let redaction = redaction(&[("SKILLHOST_TEST_HTTP_STREAM_HOLD", "abcdefgh")]);
        let mut held = Held::new(&redaction);
        let longest = redaction.longest;
        let out = held.feed(&[b'x'; 100]);
        assert_eq!(out.len(), 100 - (longest - 1));
        assert_eq!(held.bytes.len(), longest - 1);
        // A body of plain text comes out whole at its end.
        let mut all = out;
        all.extend(held.finish());
        assert_eq!(all, vec![b'x'; 100]);
    }
}
