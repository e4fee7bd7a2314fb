//! A registry that lies: a real HTTP/1.1 server on 127.0.0.1 that speaks
//! just enough of the OCI distribution API for a pull (`GET /v2/`, a
//! manifest, its blobs) and answers it the way a hostile or broken
//! registry would ([`Hostility`]): a manifest of hundreds of megabytes, a
//! layer larger than its manifest declares, one byte a second, a redirect
//! to another port, an error or a token answer that never ends. Honest, it
//! serves the shipped `echo` skill as a Wasm component artifact, so it is
//! also a redirect's target.
//!
//! What it sent and what it was asked is kept ([`HostileRegistry::requests`],
//! [`HostileRegistry::bytes_sent`]), so a test can tell that a blob was
//! never fetched or a redirect never followed. And [`run_measured`] runs
//! the real `host` binary and reports the most memory it ever held (its
//! `ru_maxrss`, from `wait4` on that one child), so a test bounds memory,
//! not time.
//!
//! No registry software is hostile on purpose; this is the one registry
//! written here, and it stands in for nothing a test could reach otherwise.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

/// How a [`HostileRegistry`] answers.
#[derive(Debug, Clone)]
pub enum Hostility {
    /// Honestly: the `echo` component, its config and manifest.
    None,
    /// A manifest of `bytes` bytes (JSON that never closes), with a
    /// `Content-Length` or, `length: false`, ended by closing.
    HugeManifest { bytes: u64, length: bool },
    /// A manifest whose layer declares `declared` bytes (and the
    /// component's digest), and a blob of `sent` bytes: the component, then
    /// filler.
    Layer { declared: u64, sent: u64 },
    /// Every answer's body one byte a second.
    Trickle,
    /// Blobs redirected (307) to the same path on `to`
    /// (`http://127.0.0.1:PORT`); it wants HTTP basic credentials, any.
    RedirectBlobs { to: String },
    /// Every manifest a 404 whose body is `bytes` bytes, ended by closing.
    HugeError { bytes: u64 },
    /// A bearer challenge naming its own `/token`, which answers `bytes`
    /// bytes, ended by closing.
    HugeToken { bytes: u64 },
}

/// The registry: see the module's documentation.
pub struct HostileRegistry {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<Seen>>>,
    sent: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

/// A request as the registry read it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// `GET /v2/…`.
    pub line: String,
    /// Its header lines.
    pub headers: Vec<String>,
}

impl Seen {
    /// Whether it carried `name`.
    pub fn has_header(&self, name: &str) -> bool {
        self.headers.iter().any(|h| {
            h.split_once(':')
                .is_some_and(|(n, _)| n.trim().eq_ignore_ascii_case(name))
        })
    }
}

/// The artifact an honest registry serves: the shipped `echo` component.
struct Artifact {
    component: Vec<u8>,
    config: Vec<u8>,
}

impl Artifact {
    fn echo() -> Artifact {
        Artifact {
            component: std::fs::read(crate::dist("echo")).expect("skills/dist/echo.wasm"),
            config: br#"{"architecture":"wasm","os":"wasip2"}"#.to_vec(),
        }
    }

    fn manifest(&self, declared: u64) -> Vec<u8> {
        serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {
                "mediaType": "application/vnd.wasm.config.v0+json",
                "digest": digest(&self.config),
                "size": self.config.len(),
            },
            "layers": [{
                "mediaType": "application/wasm",
                "digest": digest(&self.component),
                "size": declared,
            }],
        })
        .to_string()
        .into_bytes()
    }
}

/// `sha256:HEX` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl HostileRegistry {
    /// Starts one on a free port of 127.0.0.1.
    pub fn start(hostility: Hostility) -> HostileRegistry {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let sent = Arc::new(AtomicU64::new(0));
        let artifact = Arc::new(Artifact::echo());
        let thread = {
            let (stop, requests, sent) = (stop.clone(), requests.clone(), sent.clone());
            crate::accept_until_stopped(listener, stop.clone(), move |stream| {
                let context = Context {
                    hostility: hostility.clone(),
                    artifact: artifact.clone(),
                    addr,
                    stop: stop.clone(),
                    requests: requests.clone(),
                    sent: sent.clone(),
                };
                context.serve(stream)
            })
        };
        HostileRegistry {
            addr,
            stop,
            requests,
            sent,
            thread: Some(thread),
        }
    }

    /// `127.0.0.1:PORT`, as a reference names the registry.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    /// `http://127.0.0.1:PORT`.
    pub fn origin(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `oci://127.0.0.1:PORT/REPOSITORY:TAG`.
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://{}/{repository_and_tag}", self.addr)
    }

    /// The requests read so far.
    pub fn requests(&self) -> Vec<Seen> {
        self.requests.lock().unwrap().clone()
    }

    /// Bytes of bodies written so far (what a client could have read).
    pub fn bytes_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }
}

impl Drop for HostileRegistry {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What one connection's thread needs.
struct Context {
    hostility: Hostility,
    artifact: Arc<Artifact>,
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    requests: Arc<Mutex<Vec<Seen>>>,
    sent: Arc<AtomicU64>,
}

/// How a body is written.
enum Body<'a> {
    /// These bytes, with their `Content-Length`.
    Bytes(&'a [u8]),
    /// These bytes, then `filler` more, with a `Content-Length` of all.
    Padded(&'a [u8], u64),
    /// `prefix`, then filler to `total` bytes, with a `Content-Length`
    /// (`length`) or ended by closing.
    Endless {
        prefix: &'a [u8],
        total: u64,
        length: bool,
    },
    /// These bytes one a second.
    Trickle(&'a [u8]),
}

impl Context {
    fn serve(&self, stream: TcpStream) {
        stream.set_nonblocking(false).unwrap();
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        if reader.read_line(&mut line).is_err() {
            return;
        }
        let line = line.trim_end().to_string();
        let mut headers = Vec::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).is_err() {
                return;
            }
            let header = header.trim_end().to_string();
            if header.is_empty() {
                break;
            }
            headers.push(header);
        }
        let seen = Seen { line, headers };
        self.requests.lock().unwrap().push(seen.clone());
        let path = seen
            .line
            .split_whitespace()
            .nth(1)
            .unwrap_or("/")
            .split('?')
            .next()
            .unwrap_or("/")
            .to_string();
        let mut out = stream;
        let manifest_path = path.contains("/manifests/");
        let blob_digest = path.split("/blobs/").nth(1).map(str::to_string);
        let artifact = &self.artifact;
        match &self.hostility {
            Hostility::RedirectBlobs { .. } if !seen.has_header("authorization") => {
                self.respond(
                    &mut out,
                    401,
                    "WWW-Authenticate: Basic realm=\"hostile\"\r\n",
                    Body::Bytes(b""),
                );
            }
            Hostility::HugeToken { bytes } if path == "/token" => {
                self.respond(
                    &mut out,
                    200,
                    "Content-Type: application/json\r\n",
                    Body::Endless {
                        prefix: b"{\"token\": \"",
                        total: *bytes,
                        length: false,
                    },
                );
            }
            Hostility::HugeToken { .. } if path.starts_with("/v2/") => {
                let challenge = format!(
                    "WWW-Authenticate: Bearer realm=\"http://{}/token\",service=\"hostile\"\r\n",
                    self.addr
                );
                self.respond(&mut out, 401, &challenge, Body::Bytes(b""));
            }
            _ if path == "/v2/" || path == "/v2" => {
                self.respond(&mut out, 200, "", Body::Bytes(b"{}"));
            }
            Hostility::HugeManifest { bytes, length } if manifest_path => {
                self.respond(
                    &mut out,
                    200,
                    "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n",
                    Body::Endless {
                        prefix: b"{\"schemaVersion\": 2, \"annotations\": {\"a\": \"",
                        total: *bytes,
                        length: *length,
                    },
                );
            }
            Hostility::HugeError { bytes } if manifest_path => {
                self.respond(
                    &mut out,
                    404,
                    "Content-Type: text/plain\r\n",
                    Body::Endless {
                        prefix: b"not here: ",
                        total: *bytes,
                        length: false,
                    },
                );
            }
            Hostility::Trickle if manifest_path => {
                self.respond(
                    &mut out,
                    200,
                    "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n",
                    Body::Trickle(&artifact.manifest(artifact.component.len() as u64)),
                );
            }
            Hostility::Layer { declared, .. } if manifest_path => {
                self.respond(
                    &mut out,
                    200,
                    "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n",
                    Body::Bytes(&artifact.manifest(*declared)),
                );
            }
            _ if manifest_path => {
                self.respond(
                    &mut out,
                    200,
                    "Content-Type: application/vnd.oci.image.manifest.v1+json\r\n",
                    Body::Bytes(&artifact.manifest(artifact.component.len() as u64)),
                );
            }
            Hostility::RedirectBlobs { to } if blob_digest.is_some() => {
                let location = format!("Location: {to}{path}\r\n");
                self.respond(&mut out, 307, &location, Body::Bytes(b""));
            }
            _ => match blob_digest {
                Some(digest) => self.blob(&mut out, &digest),
                None => self.respond(&mut out, 404, "", Body::Bytes(b"no such route")),
            },
        }
    }

    /// The blob `digest`: the config or the component (past its declared
    /// size, for [`Hostility::Layer`]).
    fn blob(&self, out: &mut TcpStream, digest: &str) {
        let artifact = &self.artifact;
        if digest == self::digest(&artifact.config) {
            self.respond(out, 200, "", Body::Bytes(&artifact.config));
        } else if digest == self::digest(&artifact.component) {
            let body = &artifact.component;
            match self.hostility {
                Hostility::Layer { sent, .. } => {
                    let extra = sent.saturating_sub(body.len() as u64);
                    self.respond(out, 200, "", Body::Padded(body, extra));
                }
                _ => self.respond(out, 200, "", Body::Bytes(body)),
            }
        } else {
            self.respond(out, 404, "", Body::Bytes(b"{\"errors\": []}"));
        }
    }

    fn respond(&self, out: &mut TcpStream, status: u16, extra: &str, body: Body<'_>) {
        let length = match &body {
            Body::Bytes(bytes) | Body::Trickle(bytes) => Some(bytes.len() as u64),
            Body::Padded(bytes, filler) => Some(bytes.len() as u64 + filler),
            Body::Endless { total, length, .. } => length.then_some(*total),
        };
        let length = length
            .map(|n| format!("Content-Length: {n}\r\n"))
            .unwrap_or_default();
        let head = format!("HTTP/1.1 {status} X\r\n{length}Connection: close\r\n{extra}\r\n");
        if out.write_all(head.as_bytes()).is_err() {
            return;
        }
        let write = |out: &mut TcpStream, bytes: &[u8]| -> bool {
            if self.stop.load(Ordering::Relaxed) || out.write_all(bytes).is_err() {
                return false;
            }
            self.sent.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            true
        };
        let filler = |out: &mut TcpStream, mut left: u64| {
            let chunk = vec![b'x'; 64 * 1024];
            while left > 0 {
                let take = left.min(chunk.len() as u64) as usize;
                if !write(out, &chunk[..take]) {
                    return;
                }
                left -= take as u64;
            }
        };
        match body {
            Body::Bytes(bytes) => {
                write(out, bytes);
            }
            Body::Padded(bytes, extra) => {
                if write(out, bytes) {
                    filler(out, extra);
                }
            }
            Body::Endless { prefix, total, .. } => {
                if write(out, prefix) {
                    filler(out, total.saturating_sub(prefix.len() as u64));
                }
            }
            Body::Trickle(bytes) => {
                for byte in bytes {
                    if !write(out, std::slice::from_ref(byte)) {
                        return;
                    }
                    let _ = out.flush();
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
    }
}

/// A finished command, with the most memory it held.
pub struct Measured {
    pub output: Output,
    /// Its peak resident set, in bytes (`ru_maxrss`).
    pub max_rss: u64,
    pub took: Duration,
}

impl Measured {
    /// Standard output and error, for messages and searching.
    pub fn text(&self) -> String {
        format!(
            "{}{}",
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }
}

/// Runs `command` to its end, killed if it takes longer than `limit`, and
/// reads its peak memory from `wait4` on its own process id (so other
/// tests' children, which `RUSAGE_CHILDREN` would mix in, do not count).
pub fn run_measured(mut command: Command, limit: Duration) -> Measured {
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the command");
    let pid = child.id() as libc::pid_t;
    let read = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = read(Box::new(child.stdout.take().unwrap()));
    let stderr = read(Box::new(child.stderr.take().unwrap()));
    // The child is reaped below, by `wait4`; dropping `Child` neither waits
    // nor kills.
    drop(child);
    let done = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            while started.elapsed() < limit {
                if done.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if !done.load(Ordering::Relaxed) {
                // SAFETY: `pid` is our child, not yet reaped (`done` is set
                // only after `wait4` returns).
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        })
    };
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value; `wait4` fills it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child; the pointers are to locals.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    done.store(true, Ordering::Relaxed);
    assert_eq!(waited, pid, "wait4 failed");
    let _ = watchdog.join();
    let took = started.elapsed();
    use std::os::unix::process::ExitStatusExt as _;
    let output = Output {
        status: std::process::ExitStatus::from_raw(status),
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    assert!(
        took < limit,
        "the command ran past {limit:?} and was killed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Measured {
        output,
        max_rss: (usage.ru_maxrss as u64) * 1024,
        took,
    }
}
