//! The tasks over stdio: a filter on the newline-delimited JSON-RPC
//! streams between the process's stdin/stdout and the SDK, which rmcp
//! serves over a pair of in-memory pipes instead of the real ones.
//!
//! Inbound, each line from the client is one message: a task request is
//! answered here, on a task of its own (`tasks/result` waits for its run
//! while other requests go on), and everything else is passed to the SDK
//! byte for byte (a line that is not JSON is answered with a parse error,
//! which the SDK would drop silently); an `initialize` or `tools/list`
//! request is remembered by id. Outbound, each line the SDK writes goes to stdout, the answer to a
//! remembered request with the tasks advertised. One writer owns stdout,
//! so the SDK's lines and this filter's never interleave.
//!
//! A `tasks/result` whose task has not ended writes what its run streams
//! (`stream.rs`: tokens as log messages, progress) before its result,
//! each a line, in order. A slow reader of stdout holds them up in
//! bounded queues (the tokens it cannot take are dropped and counted,
//! never buffered without bound).
//!
//! A `notifications/cancelled` naming a request answered here stops that
//! answer (none is sent, and its follower ends), as the SDK does for its
//! own.
//!
//! When the client closes stdin the SDK sees its input end and stops, the
//! answers still pending here are dropped (no one is left to read them),
//! and what was written reaches stdout before `serve` returns. Runs started
//! as tasks are in the store: a waiting or interrupted one is continued as
//! any other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::ServiceExt;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio::task::{AbortHandle, JoinSet};

use super::stream::{MESSAGES_QUEUED, stream_result};
use super::{
    Advert, INVALID_REQUEST, MAX_MESSAGE_BYTES, PARSE_ERROR, TaskRequest, answer, classify,
    envelope,
};
use crate::McpError;
use crate::handler::SkillhostMcp;

/// The in-memory pipes' buffers: the SDK and the filter pump both ends,
/// so this bounds memory, not message size.
const PIPE_BYTES: usize = 64 << 10;

/// Messages waiting for stdout at most.
const LINES_QUEUED: usize = 64;

/// Requests whose answers get the tasks advertised, by JSON-RPC id (as
/// JSON text, so `1` and `"1"` stay apart).
type Pending = Arc<Mutex<HashMap<String, Advert>>>;

/// Serves `server` over stdin/stdout until the client closes stdin.
pub(crate) async fn serve(server: SkillhostMcp) -> Result<(), McpError> {
    let (to_sdk, sdk_input) = tokio::io::duplex(PIPE_BYTES);
    let (sdk_output, from_sdk) = tokio::io::duplex(PIPE_BYTES);
    // Bounded, so a client that stops reading stdout holds the SDK and the
    // answers up (as the pipe itself would) instead of filling memory.
    let (lines, written) = mpsc::channel::<Vec<u8>>(LINES_QUEUED);
    let pending = Pending::default();
    let writer = tokio::spawn(write_lines(written, tokio::io::stdout()));
    let inbound = tokio::spawn(inbound(
        server.clone(),
        tokio::io::stdin(),
        to_sdk,
        lines.clone(),
        pending.clone(),
    ));
    let outbound = tokio::spawn(outbound(server.clone(), from_sdk, lines, pending));
    // The SDK answers `initialize` inside `serve`, so the pumps run first.
    let served = match server.serve((sdk_input, sdk_output)).await {
        Ok(running) => running
            .waiting()
            .await
            .map(|_| ())
            .map_err(|e| McpError::Stdio(e.to_string())),
        Err(e) => Err(McpError::Stdio(e.to_string())),
    };
    // The SDK has stopped and dropped its pipes: the outbound pump drains
    // what it wrote and ends. The inbound pump ends at the client's EOF (if
    // the SDK stopped first, on an error, stdin is not read any further).
    let _ = outbound.await;
    inbound.abort();
    let _ = inbound.await;
    let written = writer.await.unwrap_or(Ok(()));
    served?;
    written.map_err(|e| McpError::Stdio(format!("writing to stdout: {e}")))
}

/// Writes each line to `output` as it comes, until every sender is gone.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut lines: mpsc::Receiver<Vec<u8>>,
    mut output: W,
) -> std::io::Result<()> {
    while let Some(line) = lines.recv().await {
        output.write_all(&line).await?;
        output.flush().await?;
    }
    Ok(())
}

/// One message read from a stream.
enum Line {
    /// A whole line, its newline included (the last one may lack it).
    Message(Vec<u8>),
    /// A line over [`MAX_MESSAGE_BYTES`], skipped to its end.
    TooLong,
    End,
}

/// Reads the next line of `reader`, at most [`MAX_MESSAGE_BYTES`] kept.
async fn next_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> std::io::Result<Line> {
    let mut line = Vec::new();
    let read = (&mut *reader)
        .take(MAX_MESSAGE_BYTES as u64 + 1)
        .read_until(b'\n', &mut line)
        .await?;
    if read == 0 {
        return Ok(Line::End);
    }
    if line.len() > MAX_MESSAGE_BYTES && line.last() != Some(&b'\n') {
        // Skip the rest of the line without keeping it.
        loop {
            let buffer = reader.fill_buf().await?;
            if buffer.is_empty() {
                break;
            }
            match buffer.iter().position(|&b| b == b'\n') {
                Some(at) => {
                    reader.consume(at + 1);
                    break;
                }
                None => {
                    let all = buffer.len();
                    reader.consume(all);
                }
            }
        }
        return Ok(Line::TooLong);
    }
    Ok(Line::Message(line))
}

/// The response line to request `id`.
fn response_line(id: &Value, answer: super::Answer) -> Vec<u8> {
    let mut line = envelope(id, answer).to_string().into_bytes();
    line.push(b'\n');
    line
}

/// Sends the error response to request `id` (null: a message without one).
async fn refuse(lines: &mpsc::Sender<Vec<u8>>, id: &Value, code: i64, message: String) {
    let _ = lines.send(response_line(id, Err((code, message)))).await;
}

/// Client → SDK: answers the task requests, remembers the requests whose
/// answers advertise tasks, passes every line on.
async fn inbound<R, W>(
    server: SkillhostMcp,
    input: R,
    mut to_sdk: W,
    lines: mpsc::Sender<Vec<u8>>,
    pending: Pending,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut input = BufReader::new(input);
    // The answers being worked on; dropped (aborted) when the client leaves.
    let mut answers = JoinSet::new();
    // Their abort handles by request id, for `notifications/cancelled`.
    let mut in_flight: HashMap<String, AbortHandle> = HashMap::new();
    let mut initialized = false;
    loop {
        while answers.try_join_next().is_some() {}
        in_flight.retain(|_, answer| !answer.is_finished());
        let line = match next_line(&mut input).await {
            Ok(Line::Message(line)) => line,
            Ok(Line::TooLong) => {
                let message = format!(
                    "a message over {} MiB was skipped; send each JSON-RPC message on one \
                     line, under the limit",
                    MAX_MESSAGE_BYTES >> 20
                );
                refuse(&lines, &Value::Null, INVALID_REQUEST, message).await;
                continue;
            }
            Ok(Line::End) => break,
            Err(e) => {
                tracing::warn!("reading stdin: {e}");
                break;
            }
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let message: Value = match serde_json::from_slice(&line) {
            Ok(message) => message,
            Err(e) => {
                // The SDK would drop it without a word; JSON-RPC answers it.
                let message = format!(
                    "a line that is not JSON was skipped ({e}); send one JSON-RPC message a line"
                );
                refuse(&lines, &Value::Null, PARSE_ERROR, message).await;
                continue;
            }
        };
        if let Some((id, request)) = classify(&server, &message) {
            if !initialized {
                let message = "the session is not initialized: send initialize first";
                refuse(&lines, &id, INVALID_REQUEST, message.into()).await;
                continue;
            }
            let key = id.to_string();
            let server = server.clone();
            let lines = lines.clone();
            let handle = answers.spawn(async move {
                match request {
                    // What the run streams, then the result, one line each.
                    TaskRequest::Result(task_id) => {
                        let (out, mut messages) = mpsc::channel(MESSAGES_QUEUED);
                        let level = server.level();
                        let follow = async move {
                            stream_result(&server, &id, &task_id, level, &out).await;
                        };
                        let forward = async {
                            while let Some(message) = messages.recv().await {
                                let mut line = message.to_string().into_bytes();
                                line.push(b'\n');
                                if lines.send(line).await.is_err() {
                                    break;
                                }
                            }
                        };
                        tokio::join!(follow, forward);
                    }
                    request => {
                        let answer = answer(&server, request).await;
                        let _ = lines.send(response_line(&id, answer)).await;
                    }
                }
            });
            in_flight.insert(key, handle);
            continue;
        }
        // A request of ours the client gave up on (a `tasks/result` that
        // waits, most likely) is not answered; the SDK gets the
        // notification too, for its own requests.
        if message.get("method").and_then(Value::as_str) == Some("notifications/cancelled")
            && let Some(answer) = in_flight.remove(&message["params"]["requestId"].to_string())
        {
            answer.abort();
        }
        if let Some((advert, id)) = Advert::of(&message) {
            if matches!(advert, Advert::Capability) {
                initialized = true;
            }
            pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(id.to_string(), advert);
        }
        if to_sdk.write_all(&line).await.is_err() || to_sdk.flush().await.is_err() {
            // The SDK has stopped reading: the session is over.
            break;
        }
    }
    // Dropping `to_sdk` is the SDK's end of input.
}

/// SDK → client: each line to stdout, the tasks added to the answer of a
/// remembered request.
async fn outbound<R: AsyncRead + Unpin>(
    server: SkillhostMcp,
    from_sdk: R,
    lines: mpsc::Sender<Vec<u8>>,
    pending: Pending,
) {
    let mut from_sdk = BufReader::new(from_sdk);
    loop {
        // The SDK's lines are ours: read whole, however long (a tool's
        // result may be large).
        let mut line = Vec::new();
        match from_sdk.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = advertised(&server, &pending, line);
        if lines.send(line).await.is_err() {
            break;
        }
    }
}

/// `line` with the tasks advertised, if it answers a remembered request.
fn advertised(server: &SkillhostMcp, pending: &Pending, line: Vec<u8>) -> Vec<u8> {
    let mut pending = pending.lock().unwrap_or_else(|e| e.into_inner());
    if pending.is_empty() {
        return line;
    }
    let Ok(mut message) = serde_json::from_slice::<Value>(&line) else {
        return line;
    };
    let Some(id) = message
        .get("id")
        .filter(|_| message.get("method").is_none())
    else {
        return line;
    };
    let Some(advert) = pending.remove(&id.to_string()) else {
        return line;
    };
    let id = id.clone();
    if !advert.apply(server, &id, &mut message) {
        // An error answer: nothing to add.
        return line;
    }
    let mut line = message.to_string().into_bytes();
    line.push(b'\n');
    line
}
