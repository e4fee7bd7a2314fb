//! A real HTTP/1.1 server on 127.0.0.1 (or another loopback address, for a
//! second origin) for the `http` capability's tests: a listening socket, a
//! thread per connection, one request per connection (`Connection: close`).
//! Its routes:
//!
//! - `GET /hello`: 200, `text/plain`, [`HELLO`];
//! - `GET /headers`: 200, the request's header lines, one per line;
//! - `GET /headers.json`: 200, the request's headers as httpbin's `/headers`
//!   answers them, `{"headers": {"Name": "value", …}}`;
//! - `GET /headers.gz`: 200, the request's header lines gzipped (by the
//!   system's `gzip`), `Content-Encoding: gzip` whatever the request accepts,
//!   as httpbin's `/gzip` does;
//! - `GET /reflect`: 200, each request header sent back as a response
//!   header `X-Seen-NAME: value`;
//! - `POST|PUT|DELETE|GET /echo`: 200, the method, a newline, the body;
//! - `GET /status/N`: status N, empty body;
//! - `GET /redirect?to=URL` (or `&status=N`): a redirect (302 by default) to URL;
//! - `GET /redirect-with?to=URL&header=NAME`: a 302 to URL with the value of
//!   the request's header NAME appended, as a server that puts a token in a
//!   link does;
//! - `GET /big?bytes=N`: N bytes of `x` with a `Content-Length`;
//! - `GET /stream?bytes=N`: N bytes of `x` with no length, ended by closing;
//! - `GET /silent`: reads the request and never answers, until the server
//!   stops;
//! - `GET /slow?pieces=N&size=K&pause=MS`: a body with no length of N
//!   pieces of K bytes (the first all `a`, the next `b`, …), each written
//!   and flushed MS milliseconds after the one before;
//! - `GET /cut?bytes=N`: a `Content-Length` of 2N, then N bytes of `x`, then
//!   the connection closed;
//! - `GET /endless?pause=MS`: a body with no length, `tick\n` every MS
//!   milliseconds, until the server stops;
//! - `GET /drip?header=NAME&at=K&pause=MS&form=raw|json|url`: the value of
//!   the request's header NAME (as it came, JSON-escaped or URL-encoded)
//!   echoed in a body `before VALUE after` with no length, written in two
//!   pieces cut at byte K, MS milliseconds apart: a server that echoes a
//!   secret slowly, split across reads;
//! - `GET /gate?n=N&wait=MS`: holds its head until N requests to `/gate`
//!   have arrived (each waits at most MS, 5,000 by default), then answers
//!   200 with `gate N`; one that waited in vain answers 504 `gate: only K
//!   of N arrived`. A client that waits for each head before sending the
//!   next request never gets past it.
//!
//! [`HttpServer::requests`] counts the requests it read, so a test can tell
//! that a replay reached no server; [`HttpServer::last_headers`] is what the
//! last one carried, as the server saw it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The body of `/hello`.
pub const HELLO: &str = "hello from the test server";

pub struct HttpServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    requests: Arc<AtomicUsize>,
    last_headers: Arc<Mutex<Vec<String>>>,
    thread: Option<JoinHandle<()>>,
}

/// Requests waiting at (or past) `/gate`.
#[derive(Default)]
struct Gate {
    arrived: Mutex<usize>,
    changed: Condvar,
}

impl Gate {
    /// Counts this request in and waits, at most `wait`, for `n` in all:
    /// how many had arrived when it stopped waiting.
    fn pass(&self, n: usize, wait: Duration) -> usize {
        let mut arrived = self.arrived.lock().unwrap();
        *arrived += 1;
        self.changed.notify_all();
        let deadline = std::time::Instant::now() + wait;
        while *arrived < n {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            arrived = self.changed.wait_timeout(arrived, left).unwrap().0;
        }
        *arrived
    }
}

impl HttpServer {
    /// Starts a server on a free port of 127.0.0.1.
    pub fn start() -> HttpServer {
        HttpServer::start_on("127.0.0.1")
    }

    /// Starts a server on a free port of `ip`, a loopback address
    /// (`127.0.0.2` is another origin than `127.0.0.1`).
    pub fn start_on(ip: &str) -> HttpServer {
        let listener = TcpListener::bind((ip, 0)).unwrap_or_else(|e| panic!("bind {ip}: {e}"));
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let requests = Arc::new(AtomicUsize::new(0));
        let last_headers = Arc::new(Mutex::new(Vec::new()));
        let thread = {
            let (stop, requests, last) = (stop.clone(), requests.clone(), last_headers.clone());
            let gate = Arc::new(Gate::default());
            crate::accept_until_stopped(listener, stop.clone(), move |stream| {
                serve(stream, &stop, &requests, &last, &gate)
            })
        };
        HttpServer {
            addr,
            stop,
            requests,
            last_headers,
            thread: Some(thread),
        }
    }

    /// The header lines of the last request read.
    pub fn last_headers(&self) -> Vec<String> {
        self.last_headers.lock().unwrap().clone()
    }

    /// `IP:PORT`, as a grant names it.
    pub fn host_port(&self) -> String {
        self.addr.to_string()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://IP:PORT` followed by `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Requests read so far.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::Relaxed)
    }

    /// Stops listening; the port refuses connections from then on.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(
    stream: TcpStream,
    stop: &AtomicBool,
    requests: &AtomicUsize,
    last_headers: &Mutex<Vec<String>>,
    gate: &Gate,
) {
    stream.set_nonblocking(false).unwrap();
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, target) = match (parts.next(), parts.next()) {
        (Some(m), Some(t)) => (m.to_string(), t.to_string()),
        _ => return,
    };
    let mut headers = Vec::new();
    let mut length = 0usize;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).is_err() {
            return;
        }
        let header = header.trim_end().to_string();
        if header.is_empty() {
            break;
        }
        if let Some((name, value)) = header.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap_or(0);
        }
        headers.push(header);
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    *last_headers.lock().unwrap() = headers.clone();
    requests.fetch_add(1, Ordering::Relaxed);
    let (path, query) = target.split_once('?').unwrap_or((target.as_str(), ""));
    let param = |name: &str| {
        query.split('&').find_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            (key == name).then(|| value.to_string())
        })
    };
    let mut out = stream;
    let respond = |out: &mut TcpStream, status: u16, extra: &str, body: &[u8]| {
        let head = format!(
            "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n",
            body.len()
        );
        let _ = out
            .write_all(head.as_bytes())
            .and_then(|()| out.write_all(body));
    };
    match path {
        "/hello" => respond(
            &mut out,
            200,
            "Content-Type: text/plain\r\n",
            HELLO.as_bytes(),
        ),
        "/headers" => respond(&mut out, 200, "", headers.join("\n").as_bytes()),
        "/headers.json" => {
            let object: serde_json::Map<String, serde_json::Value> = headers
                .iter()
                .filter_map(|h| h.split_once(':'))
                .map(|(name, value)| (name.to_string(), value.trim().into()))
                .collect();
            let body = serde_json::json!({ "headers": object }).to_string();
            respond(
                &mut out,
                200,
                "Content-Type: application/json\r\n",
                body.as_bytes(),
            );
        }
        "/headers.gz" => {
            let body = gzip(headers.join("\n").as_bytes());
            respond(&mut out, 200, "Content-Encoding: gzip\r\n", &body);
        }
        "/reflect" => {
            let seen: String = headers
                .iter()
                .filter_map(|h| h.split_once(':'))
                .map(|(name, value)| format!("X-Seen-{name}: {}\r\n", value.trim()))
                .collect();
            respond(&mut out, 200, &seen, b"");
        }
        "/redirect-with" => {
            let to = param("to").unwrap_or_default();
            let name = param("header").unwrap_or_default();
            let value = headers
                .iter()
                .filter_map(|h| h.split_once(':'))
                .find(|(n, _)| n.eq_ignore_ascii_case(&name))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default();
            respond(&mut out, 302, &format!("Location: {to}{value}\r\n"), b"");
        }
        "/echo" => {
            let mut text = format!("{method}\n").into_bytes();
            text.extend_from_slice(&body);
            respond(&mut out, 200, "", &text);
        }
        "/redirect" => {
            let to = param("to").unwrap_or_default();
            let status = param("status").and_then(|s| s.parse().ok()).unwrap_or(302);
            respond(&mut out, status, &format!("Location: {to}\r\n"), b"");
        }
        "/big" => {
            let n = param("bytes").and_then(|s| s.parse().ok()).unwrap_or(0);
            respond(&mut out, 200, "", &vec![b'x'; n]);
        }
        "/stream" => {
            let n: usize = param("bytes").and_then(|s| s.parse().ok()).unwrap_or(0);
            let _ = out.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let chunk = vec![b'x'; 64 * 1024];
            let mut left = n;
            while left > 0 {
                let take = left.min(chunk.len());
                if out.write_all(&chunk[..take]).is_err() {
                    return;
                }
                left -= take;
            }
        }
        "/silent" => {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        "/slow" => {
            let number =
                |name: &str| -> usize { param(name).and_then(|s| s.parse().ok()).unwrap_or(0) };
            let (pieces, size) = (number("pieces"), number("size"));
            let pause = Duration::from_millis(number("pause") as u64);
            let _ = out.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let _ = out.flush();
            for i in 0..pieces {
                std::thread::sleep(pause);
                let piece = vec![b'a' + (i % 26) as u8; size];
                if out.write_all(&piece).and_then(|()| out.flush()).is_err() {
                    return;
                }
            }
        }
        "/cut" => {
            let n: usize = param("bytes").and_then(|s| s.parse().ok()).unwrap_or(0);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", 2 * n);
            let _ = out.write_all(head.as_bytes());
            let _ = out.write_all(&vec![b'x'; n]);
            let _ = out.flush();
            let _ = out.shutdown(std::net::Shutdown::Both);
        }
        "/endless" => {
            let pause = param("pause").and_then(|s| s.parse().ok()).unwrap_or(50);
            let _ = out.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            while !stop.load(Ordering::Relaxed) {
                if out.write_all(b"tick\n").and_then(|()| out.flush()).is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(pause));
            }
        }
        "/drip" => {
            let name = param("header").unwrap_or_default();
            let value = headers
                .iter()
                .filter_map(|h| h.split_once(':'))
                .find(|(n, _)| n.eq_ignore_ascii_case(&name))
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default();
            let value = match param("form").as_deref() {
                Some("json") => serde_json::to_string(&value)
                    .unwrap()
                    .trim_matches('"')
                    .to_string(),
                Some("url") => value
                    .bytes()
                    .map(|b| match b {
                        b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'*' | b'-' | b'.' | b'_' => {
                            (b as char).to_string()
                        }
                        _ => format!("%{b:02X}"),
                    })
                    .collect(),
                _ => value,
            };
            let body = format!("before {value} after").into_bytes();
            let at = param("at")
                .and_then(|s| s.parse().ok())
                .unwrap_or(0)
                .min(body.len());
            let pause = param("pause").and_then(|s| s.parse().ok()).unwrap_or(0);
            let _ = out.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let _ = out.write_all(&body[..at]).and_then(|()| out.flush());
            std::thread::sleep(Duration::from_millis(pause));
            let _ = out.write_all(&body[at..]).and_then(|()| out.flush());
        }
        "/gate" => {
            let n: usize = param("n").and_then(|s| s.parse().ok()).unwrap_or(1);
            let wait = param("wait").and_then(|s| s.parse().ok()).unwrap_or(5000);
            let arrived = gate.pass(n, Duration::from_millis(wait));
            if arrived >= n {
                respond(&mut out, 200, "", format!("gate {n}").as_bytes());
            } else {
                let body = format!("gate: only {arrived} of {n} arrived");
                respond(&mut out, 504, "", body.as_bytes());
            }
        }
        _ => {
            if let Some(status) = path.strip_prefix("/status/").and_then(|s| s.parse().ok()) {
                respond(&mut out, status, "", b"");
            } else {
                respond(&mut out, 404, "", b"no such route");
            }
        }
    }
}

/// `bytes` compressed by the system's `gzip`.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::process::{Command, Stdio};
    let mut child = Command::new("gzip")
        .arg("-c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run gzip");
    child.stdin.take().unwrap().write_all(bytes).unwrap();
    let out = child.wait_with_output().expect("gzip");
    assert!(out.status.success(), "gzip failed");
    out.stdout
}
