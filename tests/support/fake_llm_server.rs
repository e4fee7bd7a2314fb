//! A **fake** model provider: a real HTTP/1.1 server on 127.0.0.1 that
//! answers both wire formats the `llm` capability speaks, deterministically.
//! No hosted model is reachable from the tests, so this is the one helper
//! here that stands in for something; everything between it and the skill
//! (the client, the wire formats, retries, the journal) is the real thing.
//!
//! Routes (one request per connection, `Connection: close`):
//!
//! - `POST /v1/chat/completions`: an OpenAI chat completion;
//! - `POST /v1/messages`: an Anthropic message.
//!
//! A request with `"stream": true` is answered with the same default reply
//! (or the whole answer a test scripted, when it is a completion) streamed
//! in its format's server-sent events, a word per delta (a forced tool's
//! input in pieces; OpenAI-compatible chunks and `data: [DONE]`; Anthropic's
//! `message_start` … `message_stop`); a script may stream with pauses, cut
//! the connection mid-stream, or never stop ([`FakeReply::Stream`],
//! [`FakeReply::Endless`]).
//!
//! Unless a test scripted otherwise, the answer is the **default reply**:
//! the requested model; as content, `echo: ` and the last message's text,
//! or, when structured output was asked for (OpenAI's `response_format`,
//! Anthropic's forced tool), the smallest JSON that fits the schema
//! ([`instance_of`]: every required property, strings `"fake"`, numbers 0,
//! the first `enum` value…); as usage, the words of every message in, and
//! the words of the content out.
//!
//! A test scripts answers with [`FakeLlmServer::push`]: each request takes
//! the next [`FakeReply`] (a status, headers and body, or silence), and the
//! default once the script is spent; a server started with
//! [`FakeLlmServer::start_with`] asks its responder before the default, for
//! answers that depend on the request. Every request is recorded
//! ([`FakeLlmServer::requests`]): its path, headers and body, so a test can
//! see the key a provider got, or that a replay sent nothing.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use serde_json::{Map, Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum FakeReply {
    /// This status, these headers and this body.
    Answer {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Read the request and never answer, until the server stops.
    Silent,
    /// A streamed answer (200, `text/event-stream`, no length): each piece
    /// written after its pause, then the connection closed. Whether the
    /// stream ends properly is up to the pieces (see
    /// [`FakeReply::openai_stream`], [`FakeReply::anthropic_stream`]).
    Stream { pieces: Vec<(Duration, String)> },
    /// A stream that never ends: `piece` written every `pause`, until the
    /// client goes away or the server stops.
    Endless { piece: String, pause: Duration },
    /// `reply`, once `until` is set (or after a minute, or when the server
    /// stops): for a test that must be watching before the first byte.
    Held {
        until: Arc<AtomicBool>,
        reply: Box<FakeReply>,
    },
}

impl FakeReply {
    /// `status` with a JSON `body`.
    pub fn json(status: u16, body: Value) -> FakeReply {
        FakeReply::Answer {
            status,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: body.to_string(),
        }
    }

    /// `status` with `body` as it is (a malformed answer, say).
    pub fn text(status: u16, body: &str) -> FakeReply {
        FakeReply::Answer {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }

    /// An error answer in the shape both formats share
    /// (`{"error": {"message": …}}`).
    pub fn error(status: u16, message: &str) -> FakeReply {
        FakeReply::json(
            status,
            json!({ "error": { "type": "error", "message": message } }),
        )
    }

    /// A well-formed OpenAI completion with this `content`.
    pub fn openai_content(content: &str) -> FakeReply {
        FakeReply::json(200, openai_answer("fake-model", content, 1))
    }

    /// A well-formed Anthropic message with this text.
    pub fn anthropic_text(text: &str) -> FakeReply {
        FakeReply::json(200, anthropic_text_answer("fake-model", text, 1))
    }

    /// An OpenAI-compatible `stream: true` answer of these deltas, a
    /// `pause` before each; with `end`, the usage chunk and `data: [DONE]`
    /// after them, else the connection is cut after the last delta.
    pub fn openai_stream(deltas: &[&str], pause: Duration, end: bool) -> FakeReply {
        FakeReply::Stream {
            pieces: openai_events("fake-model", deltas, 1, pause, end),
        }
    }

    /// An Anthropic event stream of these deltas, a `pause` before each;
    /// with `end`, `message_delta` and `message_stop` after them, else the
    /// connection is cut after the last delta.
    pub fn anthropic_stream(deltas: &[&str], pause: Duration, end: bool) -> FakeReply {
        FakeReply::Stream {
            pieces: anthropic_events("fake-model", deltas, 1, pause, end),
        }
    }

    /// An Anthropic event stream of a forced tool's input (structured
    /// output): a `tool_use` block of the tool `output` whose input comes
    /// as these `input_json_delta` pieces (`partial_json`), a `pause`
    /// before each; with `end`, `message_delta` and `message_stop` after
    /// them, else the connection is cut after the last piece.
    pub fn anthropic_tool_stream(pieces: &[&str], pause: Duration, end: bool) -> FakeReply {
        FakeReply::Stream {
            pieces: anthropic_events_of("fake-model", pieces, 1, None, pause, end, true),
        }
    }

    /// Adds a header to an answer.
    pub fn with_header(mut self, name: &str, value: &str) -> FakeReply {
        if let FakeReply::Answer { headers, .. } = &mut self {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }
}

/// A request the server read.
#[derive(Debug, Clone)]
pub struct ReceivedRequest {
    pub method: String,
    pub path: String,
    /// `(name, value)`, names as sent.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl ReceivedRequest {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON (`null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// What the chat request's last message says after `marker` (where a
    /// skill's prompt puts what it sends: `Abstract:\n`, `Text:\n`).
    pub fn last_message_after(&self, marker: &str) -> Option<String> {
        let body = self.json();
        let last = body["messages"].as_array()?.last()?["content"].as_str()?;
        let (_, after) = last.split_once(marker)?;
        Some(after.to_string())
    }
}

/// A test's own answer to each request the script does not answer: a
/// reply, or `None` for the default one.
pub type Responder = dyn Fn(&ReceivedRequest) -> Option<FakeReply> + Send + Sync;

#[derive(Default)]
struct Shared {
    script: VecDeque<FakeReply>,
    requests: Vec<ReceivedRequest>,
    responder: Option<Arc<Responder>>,
}

pub struct FakeLlmServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    shared: Arc<Mutex<Shared>>,
    thread: Option<JoinHandle<()>>,
}

impl FakeLlmServer {
    /// Starts a server on a free port of 127.0.0.1.
    pub fn start() -> FakeLlmServer {
        Self::start_with_shared(Shared::default())
    }

    /// Starts a server that answers every request the script does not with
    /// `responder`, falling back to the default reply where it gives none:
    /// for answers that depend on what was asked (a summary quoting the
    /// abstract it was sent), whatever order concurrent requests come in.
    pub fn start_with(
        responder: impl Fn(&ReceivedRequest) -> Option<FakeReply> + Send + Sync + 'static,
    ) -> FakeLlmServer {
        Self::start_with_shared(Shared {
            responder: Some(Arc::new(responder)),
            ..Shared::default()
        })
    }

    fn start_with_shared(shared: Shared) -> FakeLlmServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let shared = Arc::new(Mutex::new(shared));
        let thread = {
            let (stop, shared) = (stop.clone(), shared.clone());
            crate::accept_until_stopped(listener, stop.clone(), move |stream| {
                serve(stream, &stop, &shared)
            })
        };
        FakeLlmServer {
            addr,
            stop,
            shared,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`: an `anthropic` provider's `base_url`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`: an `openai` provider's `base_url`.
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// A host configuration whose provider `local` is this server, in the
    /// `openai` format.
    pub fn local_provider_config(&self) -> String {
        format!(
            "[llm.providers.local]\nkind = \"openai\"\nbase_url = \"{}\"\n",
            self.openai_base_url()
        )
    }

    /// Writes [`local_provider_config`](Self::local_provider_config) as the
    /// user's configuration of a `host` started by `cli::host_command(dir,
    /// …)` (whose configuration directory is `dir/xdg-config`).
    pub fn configure_user(&self, dir: &std::path::Path) {
        let config = dir.join("xdg-config/skillhost");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(config.join("config.toml"), self.local_provider_config()).unwrap();
    }

    /// Queues `reply` for the next request not yet answered by the script.
    pub fn push(&self, reply: FakeReply) {
        self.lock().script.push_back(reply);
    }

    /// Every request read so far, in order.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.lock().requests.clone()
    }

    /// How many requests were read.
    pub fn request_count(&self) -> usize {
        self.lock().requests.len()
    }

    /// Stops listening; the port refuses connections from then on, and a
    /// silent reply lets its connection go.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for FakeLlmServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(stream: TcpStream, stop: &AtomicBool, shared: &Mutex<Shared>) {
    stream.set_nonblocking(false).unwrap();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = match (parts.next(), parts.next()) {
        (Some(m), Some(p)) => (m.to_string(), p.to_string()),
        _ => return,
    };
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() {
            return;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            let (name, value) = (name.trim().to_string(), value.trim().to_string());
            if name.eq_ignore_ascii_case("content-length") {
                length = value.parse().unwrap_or(0);
            }
            headers.push((name, value));
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let request = ReceivedRequest {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    };
    let (scripted, responder) = {
        let mut shared = shared.lock().unwrap_or_else(|p| p.into_inner());
        shared.requests.push(request.clone());
        (shared.script.pop_front(), shared.responder.clone())
    };
    let scripted = scripted.or_else(|| responder.and_then(|answer| answer(&request)));
    let streamed = request.json().get("stream") == Some(&Value::Bool(true));
    let scripted = match scripted {
        Some(FakeReply::Held { until, reply }) => {
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while !until.load(Ordering::Relaxed)
                && !stop.load(Ordering::Relaxed)
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            Some(*reply)
        }
        other => other,
    };
    let scripted = match scripted {
        None if streamed => Some(default_stream(&request)),
        // A test's whole answer, to a skill that streams: streamed.
        Some(FakeReply::Answer {
            status: 200,
            headers,
            body,
        }) if streamed => Some(stream_of_answer(&request.path, &body).unwrap_or(
            FakeReply::Answer {
                status: 200,
                headers,
                body,
            },
        )),
        other => other,
    };
    let (status, extra, body) = match scripted {
        Some(FakeReply::Stream { pieces }) => {
            let mut out = stream;
            let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n";
            if out.write_all(head.as_bytes()).is_err() {
                return;
            }
            for (pause, piece) in pieces {
                std::thread::sleep(pause);
                if out
                    .write_all(piece.as_bytes())
                    .and_then(|()| out.flush())
                    .is_err()
                {
                    return;
                }
            }
            return;
        }
        Some(FakeReply::Endless { piece, pause }) => {
            let mut out = stream;
            let head =
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n";
            if out.write_all(head.as_bytes()).is_err() {
                return;
            }
            while !stop.load(Ordering::Relaxed) {
                if out.write_all(piece.as_bytes()).is_err() {
                    return;
                }
                std::thread::sleep(pause);
            }
            return;
        }
        // A hold within a hold is not held twice: it stays silent.
        Some(FakeReply::Silent | FakeReply::Held { .. }) => {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
            return;
        }
        Some(FakeReply::Answer {
            status,
            headers,
            body,
        }) => (status, headers, body),
        None => {
            let (status, body) = default_reply(&request);
            (
                status,
                vec![("Content-Type".into(), "application/json".into())],
                body.to_string(),
            )
        }
    };
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in extra {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut out = stream;
    let _ = out
        .write_all(head.as_bytes())
        .and_then(|()| out.write_all(body.as_bytes()));
}

/// The default, deterministic answer to `request`.
fn default_reply(request: &ReceivedRequest) -> (u16, Value) {
    let body = request.json();
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake-model");
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let text_of = |m: &Value| {
        m.get("content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let mut words_in: usize = messages.iter().map(|m| words(&text_of(m))).sum();
    if let Some(system) = body.get("system").and_then(Value::as_str) {
        words_in += words(system);
    }
    let echo = format!("echo: {}", messages.last().map(text_of).unwrap_or_default());
    match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/v1/chat/completions") => {
            let schema = body
                .get("response_format")
                .and_then(|f| f.get("json_schema"))
                .and_then(|s| s.get("schema"));
            let content = match schema {
                Some(schema) => instance_of(schema).to_string(),
                None => echo,
            };
            (200, openai_answer(model, &content, words_in))
        }
        ("POST", "/v1/messages") => {
            let tool = body
                .get("tools")
                .and_then(|t| t.get(0))
                .filter(|_| body.get("tool_choice").is_some());
            match tool {
                Some(tool) => {
                    let input = instance_of(tool.get("input_schema").unwrap_or(&Value::Null));
                    let name = tool.get("name").and_then(Value::as_str).unwrap_or("output");
                    let out = words(&input.to_string());
                    (
                        200,
                        json!({
                            "id": "msg_fake",
                            "type": "message",
                            "role": "assistant",
                            "model": model,
                            "content": [{
                                "type": "tool_use", "id": "toolu_fake", "name": name, "input": input,
                            }],
                            "stop_reason": "tool_use",
                            "usage": { "input_tokens": words_in, "output_tokens": out },
                        }),
                    )
                }
                None => (200, anthropic_text_answer(model, &echo, words_in)),
            }
        }
        _ => {
            let message = format!(
                "the fake provider has no route {} {}",
                request.method, request.path
            );
            (404, json!({ "error": { "message": message } }))
        }
    }
}

/// A whole successful answer (`body`, in the format of `path`'s route)
/// streamed as its format streams it, for a request that asked to stream:
/// the text a word (with the space after it) per delta, a forced tool's
/// input in pieces of 16 characters, the answer's model and usage. `None`
/// when the body is not such an answer (it is then sent as it is).
fn stream_of_answer(path: &str, body: &str) -> Option<FakeReply> {
    let answer: Value = serde_json::from_str(body).ok()?;
    let model = answer.get("model")?.as_str()?;
    let usage = answer.get("usage")?;
    let tokens = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0) as usize;
    let pieces = if path == "/v1/messages" {
        let blocks = answer.get("content")?.as_array()?;
        let tool = blocks
            .iter()
            .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"));
        let (text, is_tool) = match tool {
            Some(tool) => (tool.get("input")?.to_string(), true),
            None => (
                blocks
                    .iter()
                    .filter_map(|b| b.get("text").and_then(Value::as_str))
                    .collect::<String>(),
                false,
            ),
        };
        let deltas: Vec<String> = if is_tool {
            let chars: Vec<char> = text.chars().collect();
            chars.chunks(16).map(|c| c.iter().collect()).collect()
        } else {
            text.split_inclusive(' ').map(str::to_string).collect()
        };
        let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
        anthropic_events_of(
            model,
            &deltas,
            tokens("input_tokens"),
            Some(tokens("output_tokens")),
            Duration::ZERO,
            true,
            is_tool,
        )
    } else {
        let content = answer
            .get("choices")?
            .get(0)?
            .get("message")?
            .get("content")?
            .as_str()?;
        let deltas: Vec<&str> = content.split_inclusive(' ').collect();
        openai_events_of(
            model,
            &deltas,
            tokens("prompt_tokens"),
            Some(tokens("completion_tokens")),
            Duration::ZERO,
            true,
        )
    };
    Some(FakeReply::Stream { pieces })
}

/// The default streamed answer to `request` (`"stream": true`): the
/// default reply's echo, a word (with the space after it) per delta, in the
/// format of the route.
fn default_stream(request: &ReceivedRequest) -> FakeReply {
    let body = request.json();
    if body.get("response_format").is_some() || body.get("tool_choice").is_some() {
        let (status, answer) = default_reply(request);
        if let (200, Some(reply)) = (status, stream_of_answer(&request.path, &answer.to_string())) {
            return reply;
        }
    }
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("fake-model")
        .to_string();
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let text_of = |m: &Value| {
        m.get("content")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let words_in: usize = messages.iter().map(|m| words(&text_of(m))).sum();
    let echo = format!("echo: {}", messages.last().map(text_of).unwrap_or_default());
    let deltas: Vec<&str> = echo.split_inclusive(' ').collect();
    let pieces = if request.path == "/v1/messages" {
        anthropic_events(&model, &deltas, words_in, Duration::ZERO, true)
    } else {
        openai_events(&model, &deltas, words_in, Duration::ZERO, true)
    };
    FakeReply::Stream { pieces }
}

/// An OpenAI-compatible stream: a role chunk, a chunk per delta, and with
/// `end` the usage chunk and `[DONE]`.
fn openai_events(
    model: &str,
    deltas: &[&str],
    words_in: usize,
    pause: Duration,
    end: bool,
) -> Vec<(Duration, String)> {
    openai_events_of(model, deltas, words_in, None, pause, end)
}

/// [`openai_events`] with the output tokens given (else the words out).
fn openai_events_of(
    model: &str,
    deltas: &[&str],
    words_in: usize,
    words_out: Option<usize>,
    pause: Duration,
    end: bool,
) -> Vec<(Duration, String)> {
    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({ "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
                    "choices": [{ "index": 0, "delta": delta, "finish_reason": null }] })
        )
    };
    let mut pieces = vec![(
        Duration::ZERO,
        chunk(json!({ "role": "assistant", "content": "" })),
    )];
    for delta in deltas {
        pieces.push((pause, chunk(json!({ "content": delta }))));
    }
    if end {
        let out = words_out.unwrap_or_else(|| words(&deltas.concat()));
        pieces.push((
            Duration::ZERO,
            format!(
                "data: {}\n\ndata: [DONE]\n\n",
                json!({ "id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
                        "choices": [],
                        "usage": { "prompt_tokens": words_in, "completion_tokens": out,
                                   "total_tokens": words_in + out } })
            ),
        ));
    }
    pieces
}

/// An Anthropic event stream: `message_start`, a `ping`, a
/// `content_block_delta` per delta, and with `end` `message_delta` and
/// `message_stop`.
fn anthropic_events(
    model: &str,
    deltas: &[&str],
    words_in: usize,
    pause: Duration,
    end: bool,
) -> Vec<(Duration, String)> {
    anthropic_events_of(model, deltas, words_in, None, pause, end, false)
}

/// [`anthropic_events`] with the output tokens given (else the words out);
/// with `tool`, the deltas are the input of a `tool_use` block of the tool
/// `output` (`input_json_delta`s), as structured output streams.
fn anthropic_events_of(
    model: &str,
    deltas: &[&str],
    words_in: usize,
    words_out: Option<usize>,
    pause: Duration,
    end: bool,
    tool: bool,
) -> Vec<(Duration, String)> {
    let event = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let block = if tool {
        json!({ "type": "tool_use", "id": "toolu_fake", "name": "output", "input": {} })
    } else {
        json!({ "type": "text", "text": "" })
    };
    let delta = |text: &str| {
        if tool {
            json!({ "type": "input_json_delta", "partial_json": text })
        } else {
            json!({ "type": "text_delta", "text": text })
        }
    };
    let mut pieces = vec![(
        Duration::ZERO,
        event(
            "message_start",
            json!({ "type": "message_start", "message": { "id": "msg_fake", "type": "message",
                    "role": "assistant", "model": model, "content": [],
                    "usage": { "input_tokens": words_in, "output_tokens": 1 } } }),
        ) + &event(
            "content_block_start",
            json!({ "type": "content_block_start", "index": 0, "content_block": block }),
        ) + &event("ping", json!({ "type": "ping" })),
    )];
    for text in deltas {
        pieces.push((
            pause,
            event(
                "content_block_delta",
                json!({ "type": "content_block_delta", "index": 0, "delta": delta(text) }),
            ),
        ));
    }
    if end {
        let out = words_out.unwrap_or_else(|| words(&deltas.concat()));
        pieces.push((
            Duration::ZERO,
            event(
                "content_block_stop",
                json!({ "type": "content_block_stop", "index": 0 }),
            ) + &event(
                "message_delta",
                json!({ "type": "message_delta",
                        "delta": { "stop_reason": if tool { "tool_use" } else { "end_turn" } },
                        "usage": { "output_tokens": out } }),
            ) + &event("message_stop", json!({ "type": "message_stop" })),
        ));
    }
    pieces
}

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

fn openai_answer(model: &str, content: &str, words_in: usize) -> Value {
    json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": model,
        "choices": [{
            "index": 0,
            "message": { "role": "assistant", "content": content },
            "finish_reason": "stop",
        }],
        "usage": {
            "prompt_tokens": words_in,
            "completion_tokens": words(content),
            "total_tokens": words_in + words(content),
        },
    })
}

fn anthropic_text_answer(model: &str, text: &str, words_in: usize) -> Value {
    json!({
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{ "type": "text", "text": text }],
        "stop_reason": "end_turn",
        "usage": { "input_tokens": words_in, "output_tokens": words(text) },
    })
}

/// The smallest JSON that fits `schema`, for the schemas tests and skills
/// ask for: `const`, the first of `enum`, every required property of an
/// object, `minItems` items of an array, strings `"fake"` (padded to
/// `minLength`), numbers at `minimum` or 0, `false`, `null`.
pub fn instance_of(schema: &Value) -> Value {
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::String(ty)) => ty.as_str(),
        Some(Value::Array(types)) => types.first().and_then(Value::as_str).unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "null",
    };
    match ty {
        "object" => {
            let mut object = Map::new();
            let properties = schema.get("properties").and_then(Value::as_object);
            for name in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                let property = properties.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
                object.insert(name.to_string(), instance_of(property));
            }
            Value::Object(object)
        }
        "array" => {
            let n = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
            let item = instance_of(schema.get("items").unwrap_or(&Value::Null));
            Value::Array((0..n).map(|_| item.clone()).collect())
        }
        "string" => {
            let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
            let mut text = "fake".to_string();
            while text.chars().count() < min {
                text.push('e');
            }
            Value::String(text)
        }
        "integer" => json!(schema.get("minimum").and_then(Value::as_i64).unwrap_or(0)),
        "number" => json!(schema.get("minimum").and_then(Value::as_f64).unwrap_or(0.0)),
        "boolean" => Value::Bool(false),
        _ => Value::Null,
    }
}
