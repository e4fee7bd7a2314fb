//! `host bench ttft`: how long after a provider sends a token a person sees
//! it. Each round runs the real `host run` (this binary, as a child
//! process) on a one-node scenario whose skill, the shipped
//! `llm-stream-probe`, reads a streamed completion; its provider is a
//! local server this benchmark runs, which answers in the OpenAI-compatible
//! `stream: true` format and notes the moment each delta has been written
//! to the socket. Two faces are measured, each in its own rounds:
//!
//! - **the progress line**: the child's stderr is a pseudo-terminal, so it
//!   draws its live line; a token is seen when its text is read from the
//!   terminal's other end;
//! - **`--events`**: the child's stdout is a pipe; a token is seen when its
//!   `token` event's line is read.
//!
//! Each delta carries a marker (`[t00]`, `[t01]`, …), so a delta is never
//! confused with another or with the text around it. The server waits
//! `--lead` before the first delta, so the process has started, loaded the
//! skill and drawn its line, and a token then competes with nothing but
//! the host's own path: the provider's socket, the SSE parser, the skill's
//! read, the engine's event, the face. One untimed round comes first (it
//! compiles the skill into the host's cache, if it is not there yet). The figures are
//! medians over rounds, in milliseconds; the first token's is the one the
//! goal is about (≤ 50 ms), the later tokens' shows the steady state.

use std::fmt;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{Value, json};

use super::super::common::{CliResult, Failure};

#[derive(Debug, Args)]
pub struct TtftBenchArgs {
    /// Timed rounds per face (each is one `host run`).
    #[arg(long, default_value_t = 10)]
    rounds: usize,
    /// Deltas the provider sends a round.
    #[arg(long, default_value_t = 8)]
    tokens: usize,
    /// How long the provider waits before its first delta, e.g. 300ms.
    #[arg(long, default_value = "300ms", value_parser = super::super::common::duration_arg)]
    lead: Duration,
    /// How long it waits between deltas.
    #[arg(long, default_value = "40ms", value_parser = super::super::common::duration_arg)]
    gap: Duration,
    /// The streaming skill [default: skills/dist/llm-stream-probe.wasm].
    #[arg(long, value_name = "WASM")]
    skill: Option<PathBuf>,
    /// Print JSON only.
    #[arg(long)]
    json: bool,
}

/// Which face a round watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Face {
    ProgressLine,
    Events,
}

impl Face {
    fn name(self) -> &'static str {
        match self {
            Face::ProgressLine => "progress_line",
            Face::Events => "events",
        }
    }
}

/// One face's latencies: the first token's of each round, and every later
/// token's, in milliseconds.
#[derive(Debug, Default)]
struct Latencies {
    first: Vec<f64>,
    later: Vec<f64>,
}

pub struct TtftFigures {
    rounds: usize,
    tokens: usize,
    faces: Vec<(Face, Latencies)>,
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

fn max(values: &[f64]) -> f64 {
    values.iter().copied().fold(f64::NAN, f64::max)
}

impl TtftFigures {
    pub fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        out.insert("rounds".into(), self.rounds.into());
        out.insert("tokens".into(), self.tokens.into());
        for (face, latency) in &self.faces {
            out.insert(
                face.name().into(),
                json!({
                    "first_token_ms_median": median(&latency.first),
                    "first_token_ms_max": max(&latency.first),
                    "later_tokens_ms_median": median(&latency.later),
                    "later_tokens_ms_max": max(&latency.later),
                }),
            );
        }
        Value::Object(out)
    }
}

impl fmt::Display for TtftFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "time from a delta written by the provider to a person seeing it \
             ({} rounds a face, {} deltas a round; medians, and the worst in brackets):",
            self.rounds, self.tokens
        )?;
        for (face, latency) in &self.faces {
            let label = match face {
                Face::ProgressLine => "progress line (a terminal)",
                Face::Events => "--events (a pipe)",
            };
            writeln!(
                f,
                "  {label:<28} first token {:>7.2} ms ({:.2})   later tokens {:>7.2} ms ({:.2})",
                median(&latency.first),
                max(&latency.first),
                median(&latency.later),
                max(&latency.later)
            )?;
        }
        write!(f, "goal: the first token on the progress line within 50 ms")
    }
}

fn run(args: TtftBenchArgs) -> Result<TtftFigures, Failure> {
    if args.rounds == 0 || args.tokens == 0 {
        return Err(Failure::bad_input(
            "--rounds and --tokens must be at least 1",
        ));
    }
    if args.tokens > 100 {
        return Err(Failure::bad_input(
            "--tokens is at most 100 (each delta's marker has two digits)",
        ));
    }
    let skill = match &args.skill {
        Some(path) => path.clone(),
        None => super::shipped_path("llm-stream-probe")?,
    };
    let skill = skill.canonicalize().map_err(|e| {
        Failure::bad_input(format!("cannot read component `{}`: {e}", skill.display()))
    })?;
    let host = std::env::current_exe()
        .map_err(|e| Failure::environment(format!("cannot find this binary: {e}")))?;
    let dir = tempfile::tempdir()
        .map_err(|e| Failure::environment(format!("cannot make a temporary directory: {e}")))?;
    let provider = Provider::start(args.lead, args.gap, args.tokens)?;
    let bench = Bench {
        host,
        dir: dir.path().to_path_buf(),
        provider,
        tokens: args.tokens,
    };
    bench.prepare(&skill)?;
    // Untimed: the skill is compiled into this benchmark's cache.
    bench.round(Face::Events, 0)?;
    let mut faces = Vec::new();
    for face in [Face::ProgressLine, Face::Events] {
        let mut latency = Latencies::default();
        for round in 1..=args.rounds {
            let seen = bench.round(face, round)?;
            latency.first.push(seen[0]);
            latency.later.extend_from_slice(&seen[1..]);
        }
        faces.push((face, latency));
    }
    Ok(TtftFigures {
        rounds: args.rounds,
        tokens: args.tokens,
        faces,
    })
}

struct Bench {
    host: PathBuf,
    dir: PathBuf,
    provider: Provider,
    tokens: usize,
}

impl Bench {
    /// Writes the scenario and the host's configuration (the provider
    /// `local`, this benchmark's server).
    fn prepare(&self, skill: &Path) -> Result<(), Failure> {
        let scenario = format!(
            "[scenario]\nname = \"ttft\"\n\n[state]\ntext = {{ type = \"string\" }}\n\n\
             [skills.writer]\ncomponent = {}\n\n\
             [[node]]\nid = \"write\"\nskill = \"writer\"\n\
             input = {{ prompt = \"'write it'\", streams = \"1\" }}\n\
             capabilities = {{ llm = \"local/m\" }}\n\
             writes = [{{ field = \"text\", from = \"output.text\" }}]\n\n\
             [[node]]\nid = \"done\"\nkind = \"end\"\n\n\
             [[edge]]\nfrom = \"write\"\nto = \"done\"\n",
            Value::from(skill.display().to_string())
        );
        let config = format!(
            "[llm.providers.local]\nkind = \"openai\"\nbase_url = \"http://{}/v1\"\n",
            self.provider.addr
        );
        let config_dir = self.dir.join("xdg-config/skillhost");
        std::fs::create_dir_all(&config_dir)
            .and_then(|()| std::fs::write(config_dir.join("config.toml"), config))
            .and_then(|()| std::fs::write(self.dir.join("ttft.toml"), scenario))
            .map_err(|e| {
                Failure::environment(format!("cannot write in `{}`: {e}", self.dir.display()))
            })
    }

    fn command(&self, round: usize) -> Command {
        let mut command = Command::new(&self.host);
        command
            .arg("run")
            .arg(self.dir.join("ttft.toml"))
            .current_dir(&self.dir)
            .env(
                "SKILLHOST_DATABASE_URL",
                format!(
                    "sqlite://{}",
                    self.dir.join(format!("runs-{round}.db")).display()
                ),
            )
            .env("XDG_CONFIG_HOME", self.dir.join("xdg-config"))
            .env_remove("SKILLHOST_CONFIG")
            .env_remove("SKILLHOST_FAILPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("SKILLHOST_TRACE_URL")
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null());
        command
    }

    /// One `host run`: the latency of each delta, in milliseconds, in the
    /// order sent.
    fn round(&self, face: Face, round: usize) -> Result<Vec<f64>, Failure> {
        // Asked before the child starts, so its request finds it.
        let sent = self.provider.next_round();
        let mut command = self.command(round);
        let (reader, child): (Box<dyn Read + Send>, Child) = match face {
            Face::Events => {
                command
                    .arg("--events")
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                let mut child = command.spawn().map_err(spawn_failure)?;
                let stdout = child.stdout.take().expect("piped");
                (Box::new(stdout), child)
            }
            Face::ProgressLine => {
                let (controller, terminal) = pseudo_terminal()?;
                command
                    .env("TERM", "xterm-256color")
                    .stdout(Stdio::null())
                    .stderr(Stdio::from(terminal));
                let child = command.spawn().map_err(spawn_failure)?;
                // `command` holds the terminal's child end: drop it, so a
                // read of the controller ends when the child exits.
                drop(command);
                (Box::new(std::fs::File::from(controller)), child)
            }
        };
        let markers: Vec<String> = (0..self.tokens).map(marker).collect();
        let watcher = {
            let markers = markers.clone();
            thread::spawn(move || watch(reader, face, &markers))
        };
        let output = child
            .wait_with_output()
            .map_err(|e| Failure::environment(format!("`host run` did not end: {e}")))?;
        let (seen, shown) = watcher
            .join()
            .map_err(|_| Failure::failed("the benchmark's reader panicked"))?;
        if !output.status.success() {
            return Err(Failure::failed(format!(
                "round {round}: `host run` failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr),
                shown
            )));
        }
        let sent = sent
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| Failure::failed(format!("round {round}: the provider was not asked")))?;
        if sent.len() != self.tokens {
            return Err(Failure::failed(format!(
                "round {round}: the provider sent {} of {} deltas",
                sent.len(),
                self.tokens
            )));
        }
        markers
            .iter()
            .zip(seen)
            .zip(sent)
            .map(|((marker, seen), sent)| match seen {
                Some(seen) => Ok(seen.saturating_duration_since(sent).as_secs_f64() * 1e3),
                None => Err(Failure::failed(format!(
                    "round {round}: `{marker}` never showed on the {}; it showed:\n{shown}",
                    face.name()
                ))),
            })
            .collect()
    }
}

fn spawn_failure(e: std::io::Error) -> Failure {
    Failure::environment(format!("cannot start `host run`: {e}"))
}

fn marker(index: usize) -> String {
    format!("[t{index:02}]")
}

/// Reads a face to its end, noting when each marker first showed. Gives
/// the moments, in the markers' order, and what was read (for errors).
fn watch(
    mut reader: Box<dyn Read + Send>,
    face: Face,
    markers: &[String],
) -> (Vec<Option<Instant>>, String) {
    let mut seen = vec![None; markers.len()];
    let mut text = String::new();
    match face {
        Face::Events => {
            for line in BufReader::new(reader).lines() {
                let Ok(line) = line else { break };
                let now = Instant::now();
                if let Ok(event) = serde_json::from_str::<Value>(&line)
                    && event["event"] == "token"
                    && let Some(delta) = event["text"].as_str()
                {
                    note(&mut seen, markers, delta, now);
                }
                text.push_str(&line);
                text.push('\n');
            }
        }
        Face::ProgressLine => {
            let mut buffer = [0u8; 4096];
            let mut bytes = Vec::new();
            loop {
                // A terminal whose child end is closed answers EIO: the end.
                let n = match reader.read(&mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                let now = Instant::now();
                // A marker may straddle two reads: search from a little
                // before the new bytes.
                let from = bytes.len().saturating_sub(8);
                bytes.extend_from_slice(&buffer[..n]);
                note(
                    &mut seen,
                    markers,
                    &String::from_utf8_lossy(&bytes[from..]),
                    now,
                );
            }
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    (seen, text)
}

fn note(seen: &mut [Option<Instant>], markers: &[String], text: &str, now: Instant) {
    for (slot, marker) in seen.iter_mut().zip(markers) {
        if slot.is_none() && text.contains(marker.as_str()) {
            *slot = Some(now);
        }
    }
}

/// A pseudo-terminal of 200 columns: the controller's end, and the end the
/// child writes to.
fn pseudo_terminal() -> Result<(OwnedFd, OwnedFd), Failure> {
    let mut controller = -1;
    let mut terminal = -1;
    let size = libc::winsize {
        ws_row: 50,
        ws_col: 200,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty writes two descriptors it opened into the two ints;
    // the name and terminal settings are not asked for (null), and `size`
    // outlives the call.
    let result = unsafe {
        libc::openpty(
            &mut controller,
            &mut terminal,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    if result != 0 {
        return Err(Failure::environment(format!(
            "cannot open a pseudo-terminal: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: both descriptors were just opened by openpty and are owned by
    // nothing else.
    Ok(unsafe {
        (
            OwnedFd::from_raw_fd(controller),
            OwnedFd::from_raw_fd(terminal),
        )
    })
}

/// The benchmark's provider: answers each request with `tokens` marked
/// deltas in the OpenAI-compatible stream format, and reports, for each
/// round, the moment each delta was written.
struct Provider {
    addr: std::net::SocketAddr,
    rounds: mpsc::Sender<mpsc::Sender<Vec<Instant>>>,
}

impl Provider {
    fn start(lead: Duration, gap: Duration, tokens: usize) -> Result<Provider, Failure> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr().map(|addr| (l, addr)))
            .map_err(|e| Failure::environment(format!("cannot listen on 127.0.0.1: {e}")));
        let (listener, addr) = listener?;
        let (rounds, next) = mpsc::channel::<mpsc::Sender<Vec<Instant>>>();
        thread::spawn(move || {
            for connection in listener.incoming() {
                let Ok(connection) = connection else { continue };
                // A request nobody waits for (none should come) is answered
                // all the same, its moments dropped.
                let report = next.try_recv().ok();
                let sent = answer(connection, lead, gap, tokens).unwrap_or_default();
                if let Some(report) = report {
                    let _ = report.send(sent);
                }
            }
        });
        Ok(Provider { addr, rounds })
    }

    /// Where the next request's moments will be sent.
    fn next_round(&self) -> mpsc::Receiver<Vec<Instant>> {
        let (report, sent) = mpsc::channel();
        let _ = self.rounds.send(report);
        sent
    }
}

/// Reads one request and streams the answer.
fn answer(
    connection: TcpStream,
    lead: Duration,
    gap: Duration,
    tokens: usize,
) -> std::io::Result<Vec<Instant>> {
    connection.set_nodelay(true)?;
    let mut reader = BufReader::new(connection.try_clone()?);
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(Vec::new());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let mut out = connection;
    out.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
          Connection: close\r\n\r\n",
    )?;
    let chunk = |delta: Value| {
        format!(
            "data: {}\n\n",
            json!({ "id": "ttft", "object": "chat.completion.chunk", "model": "ttft",
                    "choices": [{ "index": 0, "delta": delta, "finish_reason": null }] })
        )
    };
    out.write_all(chunk(json!({ "role": "assistant", "content": "" })).as_bytes())?;
    out.flush()?;
    thread::sleep(lead);
    let mut sent = Vec::with_capacity(tokens);
    for index in 0..tokens {
        if index > 0 {
            thread::sleep(gap);
        }
        out.write_all(chunk(json!({ "content": format!("{} ", marker(index)) })).as_bytes())?;
        out.flush()?;
        sent.push(Instant::now());
    }
    let usage = json!({ "id": "ttft", "object": "chat.completion.chunk", "model": "ttft",
                        "choices": [],
                        "usage": { "prompt_tokens": 2, "completion_tokens": tokens,
                                   "total_tokens": tokens + 2 } });
    out.write_all(format!("data: {usage}\n\ndata: [DONE]\n\n").as_bytes())?;
    out.flush()?;
    Ok(sent)
}

pub fn bench(args: TtftBenchArgs) -> CliResult {
    let as_json = args.json;
    let figures = run(args)?;
    super::print_figures(&figures, figures.to_json(), as_json)
}
