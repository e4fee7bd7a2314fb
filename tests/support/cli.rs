//! Running the real `host` binary from a test: a private component cache,
//! registry cache, host config directory and SQLite database in the test's
//! directory, an optional failpoint, and the output read back as JSON.
//!
//! The binary belongs to another package (`skillhost`, in `host/`), so cargo
//! does not build it for these tests by itself: [`host_bin`] builds it once
//! per test process, with the profile and target directory the tests were
//! built with (a no-op when it is up to date), so a test never runs a stale
//! binary. `SKILLHOST_TEST_HOST_BIN` names another binary to test instead
//! (`scripts/test.sh` builds it once and sets it, since cargo-nextest runs
//! every test in a process of its own).
//!
//! Compiled components: every command shares one warm cache,
//! [`crate::shared_component_cache`], so a skill is compiled once for all the
//! tests, not once per test. Entries are written atomically and checked
//! against their digests on every load, so tests in parallel processes
//! share it safely. A test about the cache itself gives its commands a
//! private one (`.env("SKILLHOST_CACHE_DIR", …)` after [`host_command`]).

use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

/// The `host` binary under test, built on first use.
pub fn host_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        if let Some(bin) = std::env::var_os("SKILLHOST_TEST_HOST_BIN") {
            return PathBuf::from(bin);
        }
        let profile_dir = crate::test_profile_dir();
        let target = profile_dir.parent().expect("a target directory");
        let mut build = Command::new(env!("CARGO"));
        build
            // With the whole workspace and a test target selected, cargo
            // resolves the dependencies' features as `cargo test
            // --workspace` did, so this reuses what the tests were built
            // with; `-p skillhost` alone resolves them for the binary's
            // package and builds wasmtime and the rest a second time.
            .args([
                "build",
                "--quiet",
                "--workspace",
                "--bin",
                "host",
                "--test",
                "e2e",
            ])
            .env("CARGO_TARGET_DIR", target)
            .current_dir(crate::repo_root());
        match profile_dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => {}
            Some(profile) => {
                build.args(["--profile", profile]);
            }
        }
        let status = build.status().expect("run cargo to build the host binary");
        assert!(status.success(), "building the `host` binary failed");
        profile_dir.join("host")
    })
}

/// A `host` command whose database and registry cache live in `dir`, with
/// the [`crate::shared_component_cache`]. The failpoint
/// variable is always set or removed, so one in the test's own environment
/// never leaks in; so is the host's configuration: no `$SKILLHOST_CONFIG`,
/// and the user's configuration directory is `dir/xdg-config` (a test that
/// wants one writes `skillhost.toml` beside its scenario). It runs in
/// `dir` too, so what a run writes to its working directory (the artifacts
/// of a run without `--out`, in `.skillhost/runs/`) stays in the test's
/// directory; `current_dir` again to run it elsewhere.
pub fn host_command(dir: &Path, args: &[&str], failpoint: Option<&str>) -> Command {
    let mut cmd = Command::new(host_bin());
    cmd.args(args)
        .current_dir(dir)
        .env("SKILLHOST_CACHE_DIR", crate::shared_component_cache())
        .env("SKILLHOST_DATABASE_URL", sqlite_url(dir))
        // The host's configuration: none from the machine; the user's
        // configuration directory is the test's own.
        .env_remove("SKILLHOST_CONFIG")
        .env("XDG_CONFIG_HOME", dir.join("xdg-config"))
        // Registries: the test's own cache, and no credentials from the
        // machine's environment or Docker config.
        .env("SKILLHOST_REGISTRY_CACHE", dir.join("registry-cache"))
        .env("DOCKER_CONFIG", dir.join("docker"))
        .env_remove("SKILLHOST_REGISTRY_USERNAME")
        .env_remove("SKILLHOST_REGISTRY_PASSWORD");
    // No traces unless the test asks for them.
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_TRACES_EXPORTER",
        "OTEL_SDK_DISABLED",
        "SKILLHOST_TRACE_URL",
    ] {
        cmd.env_remove(var);
    }
    match failpoint {
        Some(point) => cmd.env("SKILLHOST_FAILPOINT", point),
        None => cmd.env_remove("SKILLHOST_FAILPOINT"),
    };
    cmd
}

/// The database [`host_command`] uses.
pub fn sqlite_url(dir: &Path) -> String {
    format!("sqlite://{}", dir.join("runs.db").display())
}

/// Runs [`host_command`] to completion.
pub fn host(dir: &Path, args: &[&str], failpoint: Option<&str>) -> Output {
    host_command(dir, args, failpoint)
        .output()
        .expect("run host")
}

/// [`host`] with a compiled-component cache of the test's own, `dir/cache`,
/// for a test about what the cache holds.
pub fn host_own_cache(dir: &Path, args: &[&str]) -> Output {
    host_command(dir, args, None)
        .env("SKILLHOST_CACHE_DIR", dir.join("cache"))
        .output()
        .expect("run host")
}

/// Standard output as JSON; panics with both streams when it is not.
pub fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// The events of `host run --events` on standard output, one JSON object a
/// line (a line that is not one is skipped).
pub fn events(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).expect("an event"))
        .collect()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Runs [`host_command`] from the repository's root, where the examples'
/// relative paths (`research`, `@examples/…/inputs/…`) resolve.
pub fn host_in_repo(dir: &Path, args: &[&str], failpoint: Option<&str>) -> Output {
    host_command(dir, args, failpoint)
        .current_dir(crate::repo_root())
        .output()
        .expect("run host")
}

/// `host run SCENARIO --input INPUT --out OUT --json` from the repository's
/// root (an example's name resolves there), which must exit 0 with the run
/// completed; returns the outcome it printed (`state`, `run_id`, …).
pub fn run_to_completion(dir: &Path, scenario: &str, input: &str, out: &Path) -> Value {
    let args = [
        "run",
        scenario,
        "--input",
        input,
        "--out",
        out.to_str().expect("a UTF-8 path"),
        "--json",
    ];
    let output = host_in_repo(dir, &args, None);
    assert!(
        output.status.success(),
        "host {args:?}: {}",
        stderr(&output)
    );
    let outcome = json(&output);
    assert_eq!(outcome["status"], "completed", "host {args:?}: {outcome}");
    outcome
}

/// Kills `host run ARGS… --events` at each failpoint (SIGKILL), resumes the
/// run with `host resume ID --out FILE`, and checks the file is byte for
/// byte the one an uninterrupted `host run ARGS… --out FILE` wrote. Returns
/// each failpoint with the id of the run killed there, for checks of its
/// history.
pub fn killed_and_resumed_match<'p>(
    dir: &Path,
    run: &[&str],
    points: &[&'p str],
) -> Vec<(&'p str, String)> {
    let first = dir.join("uninterrupted.out");
    let mut args = run.to_vec();
    args.extend(["--out", first.to_str().unwrap()]);
    let out = host_in_repo(dir, &args, None);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = std::fs::read(&first).unwrap();

    let mut killed = Vec::new();
    for &point in points {
        let mut args = run.to_vec();
        args.push("--events");
        let id = run_killed_at(dir, &crate::repo_root(), &args, point);
        let resumed = dir.join(format!("{}.out", point.replace(':', "-")));
        let out = host_in_repo(
            dir,
            &["resume", &id, "--out", resumed.to_str().unwrap()],
            None,
        );
        assert!(out.status.success(), "{point}: {}", stderr(&out));
        assert!(
            std::fs::read(&resumed).unwrap() == expected,
            "the output after a kill at `{point}` differs from the uninterrupted run's"
        );
        killed.push((point, id));
    }
    killed
}

/// Runs `host` with `args` (which must include `--events`) from `cwd` until
/// the failpoint `point` kills it with SIGKILL, and returns the id of the
/// run it started (the first event names it). Panics if the process was not
/// killed there: the failpoint was not reached.
pub fn run_killed_at(dir: &Path, cwd: &Path, args: &[&str], point: &str) -> String {
    use std::os::unix::process::ExitStatusExt;
    let out = host_command(dir, args, Some(point))
        .current_dir(cwd)
        .output()
        .expect("run host");
    assert_eq!(
        out.status.signal(),
        Some(9),
        "`{point}` did not kill the run: {}",
        stderr(&out)
    );
    let first = String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(str::to_string)
        .unwrap_or_default();
    let started: Value = serde_json::from_str(&first)
        .unwrap_or_else(|e| panic!("the first event is not JSON ({e}): {first:?}"));
    started["run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the first event names no run: {started}"))
        .to_string()
}

/// Checks that the example `name` (`examples/NAME/scenario.toml`) passes
/// `host check` without an error or warning, and that its README shows the
/// graph `host graph NAME --format mermaid` draws, so the two never drift.
pub fn example_checks_and_readme_shows_its_graph(dir: &Path, name: &str) {
    let out = host_in_repo(dir, &["check", name, "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["ok"], true);
    assert_eq!(report["errors"], serde_json::json!([]));
    assert_eq!(report["warnings"], serde_json::json!([]), "{report}");

    let out = host_in_repo(dir, &["graph", name, "--format", "mermaid"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let graph = String::from_utf8(out.stdout).unwrap();
    let readme = crate::repo_root().join(format!("examples/{name}/README.md"));
    let readme = std::fs::read_to_string(&readme).unwrap();
    assert!(
        readme.contains(&format!("```mermaid\n{graph}```")),
        "examples/{name}/README.md's graph is not `host graph {name} --format mermaid`:\n{graph}"
    );
}

/// Builds `skills/NAME` with `host skill build` into `dir` and checks it
/// gives the bytes of the shipped `skills/dist/NAME.wasm`; `toolchain` says
/// how to install what the build needs, shown when it fails.
pub fn shipped_skill_is_what_its_source_builds_to(dir: &Path, name: &str, toolchain: &str) {
    let root = crate::repo_root();
    let out_file = dir.join(format!("{name}.wasm"));
    let out = host_in_repo(
        dir,
        &[
            "skill",
            "build",
            root.join("skills").join(name).to_str().unwrap(),
            "--out",
            out_file.to_str().unwrap(),
            "--target-dir",
            dir.join("build").to_str().unwrap(),
            "--quiet",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "building skills/{name} failed; install its toolchain: {toolchain}:\n{}",
        stderr(&out)
    );
    assert!(
        std::fs::read(&out_file).unwrap() == std::fs::read(crate::dist(name)).unwrap(),
        "skills/dist/{name}.wasm is not what skills/{name} builds to; \
         run scripts/build-skills.sh {name} and commit skills/dist"
    );
}

/// A child process (a server, a worker) killed and reaped when dropped, so
/// a test that fails on the way leaves nothing running; the [`Child`]
/// otherwise, through `Deref`.
pub struct KilledOnDrop(Child);

impl KilledOnDrop {
    pub fn new(child: Child) -> KilledOnDrop {
        KilledOnDrop(child)
    }
}

impl Deref for KilledOnDrop {
    type Target = Child;

    fn deref(&self) -> &Child {
        &self.0
    }
}

impl DerefMut for KilledOnDrop {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until process `pid` has stopped itself (state `T` in
/// `/proc/PID/stat`, as a `stop@POINT` failpoint leaves it); panics after
/// 30 s naming `what`.
pub fn wait_until_stopped(pid: u32, what: &str) {
    let stat = format!("/proc/{pid}/stat");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(&stat).unwrap_or_default();
        // The state follows the command name, which is in parentheses.
        let state = text
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next());
        if state == Some('T') {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} did not stop itself: {text}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Sends `signal` to process `pid`; panics if it cannot.
pub fn send_signal(pid: u32, signal: i32) {
    // SAFETY: kill(2) on a child of this test, no memory involved.
    let rc = unsafe { libc::kill(pid as i32, signal) };
    assert_eq!(rc, 0, "kill -{signal} {pid}");
}
