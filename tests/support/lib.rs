//! The helpers every crate's integration tests share: the repository's
//! paths and shipped skills, test components built from WAT and WIT with no
//! Wasm compiler (`fixtures/`), the real `host` binary run in a private
//! directory ([`cli`]), throwaway Postgres clusters ([`pg`]) and a real
//! PgBouncer in front of them ([`pgbouncer`]), a real HTTP
//! server ([`http_server`]), a real OCI registry and the registry clients
//! nobody here wrote ([`registry`]), a registry that answers hostilely and
//! a run of `host` measured for memory ([`hostile_registry`]), an OTLP
//! trace receiver decoding with the official definitions ([`otlp`]), and, behind
//! a run of `host` measured for memory ([`hostile_registry`]), a real
//! Prometheus server scraping what a test gives it ([`prometheus`]), and, behind
//! features, a test `Runtime` (`runtime`) and the store's fixtures
//! (`store`).
//!
//! Every helper builds or starts the real thing, with one exception named
//! as such: [`fake_llm_server`], a fake model provider (a real HTTP server
//! answering as one), because no hosted model is reachable from the tests.

pub mod cli;
pub mod fake_llm_server;
pub mod hostile_registry;
pub mod http_server;
pub mod otlp;
pub mod patroni;
pub mod pg;
pub mod pgbouncer;
pub mod prometheus;
pub mod registry;
#[cfg(feature = "store")]
pub mod store_fixtures;

use std::path::{Path, PathBuf};

use wit_component::{ComponentEncoder, StringEncoding, embed_component_metadata};
use wit_parser::Resolve;

/// The repository's root directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is inside the repository")
        .to_path_buf()
}

/// The compiled-component cache the tests share across test processes (a
/// skill compiles once for all of them, not once per test, which matters
/// under cargo-nextest's process per test): `$SKILLHOST_TEST_COMPONENT_CACHE`,
/// else `<target>/tmp/test-components`. Entries are written atomically and
/// checked against their digests on every load, so concurrent processes
/// share it safely. A test about the cache itself uses a private one.
pub fn shared_component_cache() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = match std::env::var_os("SKILLHOST_TEST_COMPONENT_CACHE") {
            Some(dir) => PathBuf::from(dir),
            None => test_profile_dir()
                .parent()
                .expect("a target directory")
                .join("tmp")
                .join("test-components"),
        };
        std::fs::create_dir_all(&dir).expect("create the shared component cache");
        dir
    })
}

/// Copies the directory tree `from` to `to` (created if missing).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The profile directory the running test binary was built into: it runs
/// as `<target>/<profile dir>/deps/<test>-<hash>`.
pub fn test_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    exe.parent()
        .and_then(Path::parent)
        .expect("a test binary lives in <target>/<profile>/deps")
        .to_path_buf()
}

/// A TCP port on 127.0.0.1 that was free a moment ago, for a server a
/// test starts in another process.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// Componentizes `fixtures/<name>.wat` against `fixtures/<name>.wit` and the
/// skill contract in `wit/`.
pub fn fixture_component(name: &str) -> Vec<u8> {
    fixture_component_with(name, |wat| wat)
}

/// [`fixture_component`] with the WAT text changed by `edit` first (a
/// variant of a fixture: another manifest, say).
pub fn fixture_component_with(name: &str, edit: impl FnOnce(String) -> String) -> Vec<u8> {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("support/fixtures");
    let mut resolve = Resolve::default();
    resolve
        .push_dir(repo_root().join("wit"))
        .expect("parse wit/");
    let wit = std::fs::read_to_string(fixtures.join(format!("{name}.wit"))).unwrap();
    let package = resolve
        .push_str(fixtures.join(format!("{name}.wit")), &wit)
        .expect("parse fixture WIT");
    let world = resolve
        .select_world(&[package], None)
        .expect("select world");
    let text = std::fs::read_to_string(fixtures.join(format!("{name}.wat"))).expect("read WAT");
    let mut module = wat::parse_str(edit(text)).expect("parse WAT");
    embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8).unwrap();
    ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .expect("componentize fixture")
}

/// `kv-probe` that, when the key it reads is not set, sets it (to the key)
/// and returns a retryable error: its first attempt on each key fails
/// after a kv write, the next one reads it and goes on as `kv-probe` does.
pub fn kv_retry_component() -> Vec<u8> {
    fixture_component_with("kv-probe", |wat| {
        let data = r#"  (data (i32.const 368) "(none)")           ;; 6 bytes"#;
        let call = r#"    (call $set (i32.const 352)"#;
        assert!(
            wat.contains(data) && wat.contains(call),
            "kv-probe.wat changed"
        );
        wat.replacen(
            data,
            &format!(
                "{data}\n  (data (i32.const 400) \"not-yet\")\n  \
                 (data (i32.const 416) \"first attempt\")"
            ),
            1,
        )
        .replacen(
            call,
            &format!(
                "    (if (i32.eqz (i32.load8_u (i32.const 2052)))
      (then
        (call $set (local.get $key) (local.get $key_len) (local.get $key) (local.get $key_len) (i32.const 2080))
        (if (i32.load8_u (i32.const 2080)) (then (return (i32.const 2080))))
        (i32.store8 (i32.const 2112) (i32.const 1))
        (i32.store (i32.const 2116) (i32.const 400)) (i32.store (i32.const 2120) (i32.const 7))
        (i32.store (i32.const 2124) (i32.const 416)) (i32.store (i32.const 2128) (i32.const 13))
        (i32.store8 (i32.const 2132) (i32.const 1))
        (return (i32.const 2112))))
{call}"
            ),
            1,
        )
    })
}

/// A runtime with its own, empty component cache.
#[cfg(feature = "runtime")]
pub fn runtime(cache: &Path) -> skillhost_runtime::Runtime {
    runtime_with_backends(cache, skillhost_runtime::Backends::default())
}

/// [`runtime`] whose capabilities reach `backends`.
#[cfg(feature = "runtime")]
pub fn runtime_with_backends(
    cache: &Path,
    backends: skillhost_runtime::Backends,
) -> skillhost_runtime::Runtime {
    skillhost_runtime::Runtime::new(skillhost_runtime::RuntimeConfig {
        cache_dir: Some(cache.to_path_buf()),
        pool: skillhost_runtime::PoolConfig {
            component_instances: 32,
            core_instances: 256,
            memories: 64,
            tables: 128,
        },
        backends,
    })
    .expect("runtime")
}

pub fn dist(name: &str) -> PathBuf {
    repo_root().join("skills/dist").join(format!("{name}.wasm"))
}

/// A component for `world` in `wit` (which may `use` the skill contract) whose
/// functions all trap: enough for everything that is checked at load time.
pub fn dummy_component(wit: &str) -> Vec<u8> {
    let mut resolve = Resolve::default();
    resolve
        .push_dir(repo_root().join("wit"))
        .expect("parse wit/");
    let package = resolve.push_str("test.wit", wit).expect("parse test WIT");
    let world = resolve
        .select_world(&[package], None)
        .expect("select world");
    let mut module =
        wit_component::dummy_module(&resolve, world, wit_parser::ManglingAndAbi::Standard32);
    embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8).unwrap();
    ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .expect("componentize dummy")
}

/// Checks that `examples/<example>/<variant>` is its `scenario.toml` with
/// exactly `changes` made (each `from` found once), after a header of
/// comment lines that ends where `scenario.toml` begins: a variant (the
/// same workflow with a model-backed skill, say) that cannot drift.
pub fn assert_variant_of_scenario(example: &str, variant: &str, changes: &[(&str, &str)]) {
    let dir = repo_root().join("examples").join(example);
    let mut want = std::fs::read_to_string(dir.join("scenario.toml")).unwrap();
    for (from, to) in changes {
        assert_eq!(want.matches(from).count(), 1, "{from:?} in scenario.toml");
        want = want.replace(from, to);
    }
    let first_line = want.lines().next().unwrap().to_string();
    let got = std::fs::read_to_string(dir.join(variant)).unwrap();
    let start = got
        .find(&format!("{first_line}\n"))
        .unwrap_or_else(|| panic!("examples/{example}/{variant} lacks {first_line:?}"));
    let (header, rest) = got.split_at(start);
    assert!(header.lines().all(|l| l.starts_with('#')), "{header}");
    assert!(
        rest == want,
        "examples/{example}/{variant} is not scenario.toml with only its changes; make it so again"
    );
}

/// Accepts connections on `listener` until `stop` is set, each served by
/// `serve` on a thread of its own: the loop every test server here runs
/// (the listener is made non-blocking so that `stop` is seen within 5 ms).
pub fn accept_until_stopped(
    listener: std::net::TcpListener,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    serve: impl Fn(std::net::TcpStream) + Send + Sync + 'static,
) -> std::thread::JoinHandle<()> {
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let serve = std::sync::Arc::new(serve);
    std::thread::spawn(move || {
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            match listener.accept() {
                Ok((stream, _)) => {
                    let serve = serve.clone();
                    std::thread::spawn(move || serve(stream));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                Err(_) => break,
            }
        }
    })
}

/// A process that runs `script` (`sh -c`) once this test process is gone:
/// it waits for its stdin, which closes when this process exits however it
/// exits, and then stops what `script` names. In a process group of its own,
/// so a Ctrl-C to the test run does not stop the cleanup. `what` names it in
/// a failure to start.
pub fn watchdog(script: &str, what: &str) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    std::process::Command::new("sh")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn the {what} watchdog: {e}"))
}
