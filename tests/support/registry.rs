//! A real OCI registry for the registry tests: Debian's `docker-registry`
//! (the CNCF Distribution registry) on a free port of 127.0.0.1, with its
//! storage in a temporary directory, optionally behind an htpasswd file
//! (HTTP basic authentication, bcrypt, written with Apache's `htpasswd`) or
//! behind the registry token flow: a token server (Python, on 127.0.0.1)
//! that checks the same user and password and issues ES256 tokens the
//! registry verifies against the token server's certificate.
//!
//! Also the clients nobody here wrote, for interoperability: `skopeo`
//! (Debian) and the `oras` Python SDK (PyPI), with Python's `cryptography`
//! to check signatures. A test that needs a tool that is missing fails,
//! naming the command that installs it (the same `.ci/run` runs); none
//! skips.
//!
//! The registry is stopped when its [`TestRegistry`] is dropped, and by a
//! watchdog process if the test process dies first.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::free_port;

/// How `.ci/run` installs what these tests need (pinned there).
pub const INSTALL_HINT: &str = "apt-get install -y docker-registry skopeo apache2-utils && \
     python3 -m pip install oras==0.2.43 cryptography==48.0.0 (what .ci/run does)";

/// The user and password of a registry started with [`TestRegistry::with_auth`].
pub const USER: &str = "skill-publisher";
pub const PASSWORD: &str = "correct horse battery staple";

pub struct TestRegistry {
    dir: tempfile::TempDir,
    port: u16,
    child: Mutex<Option<Child>>,
    watchdog: Mutex<Option<Child>>,
    /// The token server of [`TestRegistry::with_token_auth`].
    token_server: Mutex<Option<Child>>,
}

/// How a test registry authenticates.
enum Auth {
    None,
    Htpasswd,
    Token,
}

/// The token server: `python3 -c TOKEN_SERVER CERT_FILE USER PASSWORD`.
/// Makes a P-256 key and a self-signed certificate (written to CERT_FILE
/// for the registry's `rootcertbundle`), listens on a free port of
/// 127.0.0.1 and prints it, and answers `GET /token?service=…&scope=…` with
/// basic credentials by a JWT (ES256, the certificate in `x5c`) granting
/// the scope's actions; wrong or no credentials get 401.
const TOKEN_SERVER: &str = r#"
import base64, datetime, http.server, json, sys, time, urllib.parse, uuid
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID
cert_file, user, password = sys.argv[1:4]
key = ec.generate_private_key(ec.SECP256R1())
name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "skillhost-test-token")])
now = datetime.datetime.now(datetime.timezone.utc)
cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
        .public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256()))
open(cert_file, "wb").write(cert.public_bytes(serialization.Encoding.PEM))
x5c = base64.b64encode(cert.public_bytes(serialization.Encoding.DER)).decode()
expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        url = urllib.parse.urlparse(self.path)
        query = urllib.parse.parse_qs(url.query)
        if url.path != "/token" or self.headers.get("Authorization") != expected:
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"details": "wrong credentials"}')
            return
        access = []
        for scope in query.get("scope", []):
            kind, repository, actions = scope.split(":")
            access.append({"type": kind, "name": repository, "actions": actions.split(",")})
        issued = int(time.time())
        header = {"alg": "ES256", "typ": "JWT", "x5c": [x5c]}
        claims = {"iss": "skillhost-test-issuer", "sub": user,
                  "aud": query.get("service", [""])[0], "exp": issued + 300,
                  "nbf": issued - 10, "iat": issued, "jti": str(uuid.uuid4()), "access": access}
        signing_input = b64(json.dumps(header).encode()) + "." + b64(json.dumps(claims).encode())
        r, s = decode_dss_signature(key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256())))
        token = signing_input + "." + b64(r.to_bytes(32, "big") + s.to_bytes(32, "big"))
        body = json.dumps({"token": token, "access_token": token, "expires_in": 300}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
# Exit when the test process goes (its end of our stdin closes).
import os, threading
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

impl TestRegistry {
    /// An anonymous registry.
    pub fn start() -> TestRegistry {
        TestRegistry::launch(Auth::None)
    }

    /// A registry that wants [`USER`] and [`PASSWORD`] (HTTP basic).
    pub fn with_auth() -> TestRegistry {
        TestRegistry::launch(Auth::Htpasswd)
    }

    /// A registry behind the token flow: it answers with a bearer
    /// challenge, and a token server that wants [`USER`] and [`PASSWORD`]
    /// issues the tokens.
    pub fn with_token_auth() -> TestRegistry {
        TestRegistry::launch(Auth::Token)
    }

    fn launch(auth: Auth) -> TestRegistry {
        require("docker-registry");
        let dir = tempfile::tempdir().expect("temporary directory");
        let port = free_port();
        let mut token_server = None;
        let auth_section = if let Auth::Token = auth {
            let cert = dir.path().join("token.crt");
            let (child, token_port) = start_token_server(&cert);
            token_server = Some(child);
            format!(
                "auth:\n  token:\n    realm: http://127.0.0.1:{token_port}/token\n    \
                 service: skillhost-test\n    issuer: skillhost-test-issuer\n    \
                 rootcertbundle: {}\n",
                cert.display()
            )
        } else if let Auth::Htpasswd = auth {
            let htpasswd = require("htpasswd");
            let out = Command::new(htpasswd)
                .args(["-Bbn", USER, PASSWORD])
                .output()
                .expect("run htpasswd");
            assert!(out.status.success(), "htpasswd failed");
            std::fs::write(dir.path().join("htpasswd"), &out.stdout).unwrap();
            format!(
                "auth:\n  htpasswd:\n    realm: skillhost-test\n    path: {}\n",
                dir.path().join("htpasswd").display()
            )
        } else {
            String::new()
        };
        let config = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: 127.0.0.1:{port}\n  secret: skillhost-test\n{auth_section}",
            dir.path().join("storage").display()
        );
        std::fs::write(dir.path().join("config.yml"), config).unwrap();
        let registry = TestRegistry {
            dir,
            port,
            child: Mutex::new(None),
            watchdog: Mutex::new(None),
            token_server: Mutex::new(token_server),
        };
        registry.start_again();
        registry
    }

    /// `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/REPOSITORY:TAG` (or `@DIGEST`).
    pub fn reference(&self, repository_and_tag: &str) -> String {
        format!("oci://{}/{repository_and_tag}", self.address())
    }

    /// Where the registry keeps blobs (`docker/registry/v2/blobs/…`).
    pub fn storage(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// The stored bytes of the blob `digest` (`sha256:HEX`), to damage it.
    pub fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
        self.storage()
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }

    /// Stops the registry (its storage is kept for [`start_again`]).
    ///
    /// [`start_again`]: TestRegistry::start_again
    pub fn stop(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(mut watchdog) = self.watchdog.lock().unwrap().take() {
            drop(watchdog.stdin.take());
            let _ = watchdog.wait();
        }
    }

    /// Starts the registry on the same port and storage, and waits until it
    /// answers.
    pub fn start_again(&self) {
        let log = std::fs::File::create(self.dir.path().join("registry.log")).unwrap();
        let child = Command::new(require("docker-registry"))
            .arg("serve")
            .arg(self.dir.path().join("config.yml"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start docker-registry");
        // If this process dies without dropping the registry, the
        // watchdog's stdin closes and it stops the registry.
        let watchdog = crate::watchdog(
            &format!("cat >/dev/null; kill {} 2>/dev/null", child.id()),
            "registry",
        );
        *self.child.lock().unwrap() = Some(child);
        *self.watchdog.lock().unwrap() = Some(watchdog);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = http_status(self.port, "/v2/")
                && (status == 200 || status == 401)
            {
                return;
            }
            if let Some(child) = self.child.lock().unwrap().as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                panic!(
                    "docker-registry exited ({status}): {}",
                    std::fs::read_to_string(self.dir.path().join("registry.log"))
                        .unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "docker-registry did not answer on {} within 30 s: {}",
            self.address(),
            std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
        );
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        self.stop();
        if let Some(mut server) = self.token_server.lock().unwrap().take() {
            let _ = server.kill();
            let _ = server.wait();
        }
    }
}

/// Starts [`TOKEN_SERVER`], writing its certificate to `cert`; returns it
/// and its port. It is killed on drop, and exits by itself when this
/// process dies (its stdin, a pipe from here, closes).
fn start_token_server(cert: &Path) -> (Child, u16) {
    use std::io::BufRead as _;
    let python = require("python3");
    let mut child = Command::new(python)
        .arg("-c")
        .arg(TOKEN_SERVER)
        .arg(cert)
        .args([USER, PASSWORD])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the token server");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("the token server's port");
    let port = line.trim().parse().unwrap_or_else(|_| {
        panic!(
            "the token server did not start (it needs python3 with cryptography; {INSTALL_HINT})"
        )
    });
    (child, port)
}

/// The status of `GET path` on 127.0.0.1:`port`, if it answers.
fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::Read as _;
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

/// The path of `tool` on `PATH`; panics naming how to install it.
pub fn require(tool: &str) -> PathBuf {
    which(tool).unwrap_or_else(|| panic!("`{tool}` is not installed; {INSTALL_HINT}"))
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

/// Runs `script` with Python, where `oras` and `cryptography` must be
/// importable (panics naming the install otherwise); returns its stdout.
/// `args` are its `sys.argv[1:]`.
pub fn python(script: &str, args: &[&str]) -> String {
    let python = require("python3");
    let check = Command::new(&python)
        .args(["-c", "import oras.client, cryptography"])
        .output()
        .expect("run python3");
    assert!(
        check.status.success(),
        "python3 cannot import oras and cryptography ({}); {INSTALL_HINT}",
        String::from_utf8_lossy(&check.stderr).trim()
    );
    let out = Command::new(&python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python script failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Runs `skopeo` with `args`; returns its stdout.
pub fn skopeo(args: &[&str]) -> String {
    let out = Command::new(require("skopeo"))
        .args(args)
        .output()
        .expect("run skopeo");
    assert!(
        out.status.success(),
        "skopeo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// Writes `bytes` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}
