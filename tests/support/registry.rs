//! A real OCI registry for the registry tests: Debian's `docker-registry`
//! (the CNCF Distribution registry) on a free port of 127.0.0.1, with its
//! storage in a temporary directory, optionally behind an htpasswd file
//! (HTTP basic authentication, bcrypt, written with Apache's `htpasswd`).
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
use std::net::TcpListener;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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
}

impl TestRegistry {
    /// An anonymous registry.
    pub fn start() -> TestRegistry {
        TestRegistry::launch(false)
    }

    /// A registry that wants [`USER`] and [`PASSWORD`] (HTTP basic).
    pub fn with_auth() -> TestRegistry {
        TestRegistry::launch(true)
    }

    fn launch(auth: bool) -> TestRegistry {
        require("docker-registry");
        let dir = tempfile::tempdir().expect("temporary directory");
        let port = free_port();
        let auth_section = if auth {
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
        let watchdog = Command::new("sh")
            .args([
                "-c",
                &format!("cat >/dev/null; kill {} 2>/dev/null", child.id()),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .expect("spawn the registry watchdog");
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
    }
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

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Writes `bytes` to `dir/name` and returns the path.
pub fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}
