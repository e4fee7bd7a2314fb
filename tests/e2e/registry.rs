//! Skills in an OCI registry, end to end through the real `host` binary and
//! a real registry (Debian's `docker-registry` on 127.0.0.1): push, pull and
//! inspect; credentials; the research scenario with every skill pulled
//! from the registry, locked, run with the registry stopped and refused
//! under `--locked` once a tag moved; signatures and the trust policy; a
//! component `oras` pushed, run by `host`; and a registry that answers
//! hostilely (`hostile_registry`): endless manifests, errors and tokens, a
//! layer past its size or past the cap, one byte a second, a redirect to
//! another port, each refused with the host's memory bounded.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use skillhost_tests::cli::{host_command, json, stderr};
use skillhost_tests::hostile_registry::{HostileRegistry, Hostility, Measured, run_measured};
use skillhost_tests::registry::{PASSWORD, TestRegistry, USER, python, write_file};

const QUERY: &str = r#"{"query": "retrieval augmented generation"}"#;
const RESEARCH_SKILLS: &[&str] = &[
    "paper-discovery",
    "paper-summarize",
    "paper-compare",
    "claim-synthesis",
    "report-writer",
];

/// `host` with a component cache of the test's own: what a pull compiles
/// into it is listed under the reference it came from.
fn host(dir: &Path, args: &[&str]) -> Output {
    skillhost_tests::cli::host_own_cache(dir, args)
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        stderr(out)
    );
}

/// Exits with `code`, and says each of `needles` (on stderr, or on stdout
/// where `--json` puts the checker's diagnostics).
fn fails(out: &Output, code: i32, needles: &[&str]) {
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(out));
    assert_eq!(out.status.code(), Some(code), "stderr: {text}");
    for needle in needles {
        assert!(text.contains(needle), "`{needle}` not in: {text}");
    }
}

fn dist(name: &str) -> String {
    skillhost_tests::dist(name).display().to_string()
}

/// Pushes the shipped skill `skill` to `skills/<skill>:<tag>`; its digest.
fn push(dir: &Path, registry: &TestRegistry, skill: &str, tag: &str, extra: &[&str]) -> String {
    let (file, reference) = (
        dist(skill),
        registry.reference(&format!("skills/{skill}:{tag}")),
    );
    let mut args = vec!["skill", "push", file.as_str(), reference.as_str(), "--json"];
    args.extend_from_slice(extra);
    let out = host(dir, &args);
    ok(&out);
    json(&out)["digest"].as_str().unwrap().to_string()
}

/// The research example copied into `dir/research`, its skills named by
/// `component(skill)`.
fn research_scenario(dir: &Path, component: impl Fn(&str) -> String) -> PathBuf {
    let target = dir.join("research");
    skillhost_tests::copy_dir(
        &skillhost_tests::repo_root().join("examples/research"),
        &target,
    );
    let path = target.join("scenario.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for skill in RESEARCH_SKILLS {
        text = text.replace(
            &format!("\"../../skills/dist/{skill}.wasm\""),
            &format!("\"{}\"", component(skill)),
        );
    }
    std::fs::write(&path, text).unwrap();
    path
}

fn run_research(dir: &Path, scenario: &Path, report: &Path, extra: &[&str]) -> Output {
    let mut args = vec![
        "run",
        scenario.to_str().unwrap(),
        "--input",
        QUERY,
        "--out",
        report.to_str().unwrap(),
        "--force",
        "--json",
    ];
    args.extend_from_slice(extra);
    host(dir, &args)
}

#[test]
fn push_pull_and_inspect_a_component() {
    let registry = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let reference = registry.reference("skills/echo:0.1.0");
    // `publish` is `push`.
    let out = host(
        dir.path(),
        &[
            "skill",
            "publish",
            &dist("echo"),
            &reference,
            "--annotation",
            "org.example.team=search",
        ],
    );
    ok(&out);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let digest = stdout.lines().last().unwrap().to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{stdout}"
    );

    let file = dir.path().join("echo.wasm");
    let out = host(
        dir.path(),
        &[
            "skill",
            "pull",
            &reference,
            "--out",
            file.to_str().unwrap(),
            "--json",
        ],
    );
    ok(&out);
    let pulled = json(&out);
    assert_eq!(pulled["digest"], digest.as_str());
    // Compiled into the host's cache as it is pulled, and listed there as
    // the component of its reference.
    assert!(
        matches!(
            pulled["precompiled"]["source"].as_str(),
            Some("compiled" | "cache")
        ),
        "{pulled}"
    );
    let out = host(dir.path(), &["cache", "list", "--json"]);
    ok(&out);
    let listed = json(&out);
    let from_registry = listed["compiled"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["reference"]
                .as_str()
                .is_some_and(|r| r.ends_with("skills/echo:0.1.0"))
        })
        .count();
    assert_eq!(from_registry, 1, "{listed}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        std::fs::read(dist("echo")).unwrap()
    );
    // --out never replaces a file without --force.
    let out = host(
        dir.path(),
        &["skill", "pull", &reference, "--out", file.to_str().unwrap()],
    );
    fails(&out, 2, &["already exists", "--force"]);

    let out = host(dir.path(), &["skill", "inspect", &reference, "--json"]);
    ok(&out);
    let inspected = json(&out);
    assert_eq!(inspected["name"], "echo");
    assert_eq!(inspected["registry"]["manifest_digest"], digest.as_str());
    let annotations = &inspected["registry"]["annotations"];
    assert_eq!(annotations["org.example.team"], "search");
    assert_eq!(annotations["org.opencontainers.image.title"], "echo");
    assert_eq!(annotations["org.opencontainers.image.version"], "0.1.0");
    assert!(annotations["org.opencontainers.image.description"].is_string());

    // Bad input, each named, with the documented exit codes.
    let out = host(dir.path(), &["skill", "pull", "skills/echo:0.1.0"]);
    fails(
        &out,
        2,
        &["not a registry reference", "does not look like a registry"],
    );
    let out = host(
        dir.path(),
        &["skill", "pull", &registry.reference("skills/echo:9.9.9")],
    );
    fails(&out, 2, &["skills/echo:9.9.9", "not in the registry"]);
    let out = host(
        dir.path(),
        &["skill", "push", &dist("echo"), "127.0.0.1:9/skills/echo:1"],
    );
    fails(&out, 3, &["cannot reach the registry `127.0.0.1:9`"]);
    let not_a_skill = write_file(dir.path(), "notes.wasm", b"plain text");
    let out = host(
        dir.path(),
        &["skill", "push", not_a_skill.to_str().unwrap(), &reference],
    );
    fails(&out, 2, &["notes.wasm"]);
}

#[test]
fn credentials_come_from_stdin_the_environment_or_docker_config() {
    let registry = TestRegistry::with_auth();
    let dir = tempfile::tempdir().unwrap();
    let reference = registry.reference("skills/echo:1");

    // No credentials: refused, saying how to give some.
    let out = host(dir.path(), &["skill", "push", &dist("echo"), &reference]);
    fails(
        &out,
        2,
        &["refused access", "anonymous", "--password-stdin"],
    );

    // --username with --password-stdin.
    let mut child = host_command(
        dir.path(),
        &[
            "skill",
            "push",
            &dist("echo"),
            &reference,
            "--username",
            USER,
            "--password-stdin",
        ],
        None,
    )
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    writeln!(child.stdin.take().unwrap(), "{PASSWORD}").unwrap();
    ok(&child.wait_with_output().unwrap());

    // The environment.
    let out = host_command(dir.path(), &["skill", "pull", &reference], None)
        .env("SKILLHOST_REGISTRY_USERNAME", USER)
        .env("SKILLHOST_REGISTRY_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    ok(&out);
    let out = host_command(dir.path(), &["skill", "pull", &reference], None)
        .env("SKILLHOST_REGISTRY_USERNAME", USER)
        .env("SKILLHOST_REGISTRY_PASSWORD", "not the password")
        .output()
        .unwrap();
    fails(&out, 2, &["refused access", "SKILLHOST_REGISTRY_USERNAME"]);
    assert!(!stderr(&out).contains("not the password"));

    // Docker's config.
    use base64::Engine as _;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"));
    std::fs::create_dir_all(dir.path().join("docker")).unwrap();
    std::fs::write(
        dir.path().join("docker/config.json"),
        format!(
            r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#,
            registry.address()
        ),
    )
    .unwrap();
    ok(&host(dir.path(), &["skill", "inspect", &reference]));
}

#[test]
fn the_research_scenario_runs_from_the_registry_locked_and_offline() {
    let registry = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    for skill in RESEARCH_SKILLS {
        push(dir.path(), &registry, skill, "0.1.0", &[]);
    }
    let local = research_scenario(&dir.path().join("local"), |s| {
        format!("../../skills/dist/{s}.wasm")
    });
    // The local copy names the shipped components by absolute path.
    let text = std::fs::read_to_string(&local).unwrap().replace(
        "../../skills/dist/",
        &format!(
            "{}/",
            skillhost_tests::repo_root().join("skills/dist").display()
        ),
    );
    std::fs::write(&local, text).unwrap();
    let remote = research_scenario(dir.path(), |s| {
        registry.reference(&format!("skills/{s}:0.1.0"))
    });

    // Without a lock, --locked refuses; `host lock` writes one.
    let report = dir.path().join("report.md");
    let out = run_research(dir.path(), &remote, &report, &["--locked"]);
    fails(&out, 2, &["--locked", "host lock"]);
    let out = host(dir.path(), &["lock", remote.to_str().unwrap(), "--json"]);
    ok(&out);
    let lock = json(&out);
    assert_eq!(lock["components"].as_array().unwrap().len(), 5);
    let lock_file = dir.path().join("research/scenario.lock");
    assert!(lock_file.is_file());

    // The registry-backed run gives the local run's report.
    let out = run_research(dir.path(), &remote, &report, &["--locked"]);
    ok(&out);
    assert_eq!(json(&out)["status"], "completed");
    let local_report = dir.path().join("local-report.md");
    ok(&run_research(dir.path(), &local, &local_report, &[]));
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        std::fs::read_to_string(&local_report).unwrap()
    );

    // `host graph` resolves the same way.
    ok(&host(dir.path(), &["graph", remote.to_str().unwrap()]));

    // With the registry stopped, it runs from the lock and the cache.
    registry.stop();
    ok(&run_research(dir.path(), &remote, &report, &[]));
    ok(&run_research(dir.path(), &remote, &report, &["--offline"]));
    ok(&host(
        dir.path(),
        &["check", remote.to_str().unwrap(), "--offline"],
    ));
    // --locked must ask the registry about each tag: that is the environment.
    let out = run_research(dir.path(), &remote, &report, &["--locked"]);
    fails(&out, 3, &["cannot reach the registry"]);
    // Offline with another cache: nothing there.
    let out = host_command(
        dir.path(),
        &["check", remote.to_str().unwrap(), "--offline"],
        None,
    )
    .env("SKILLHOST_REGISTRY_CACHE", dir.path().join("empty-cache"))
    .output()
    .unwrap();
    fails(&out, 3, &["not in the registry cache", "--offline"]);

    // A tag moves: the lock keeps the old component, --locked refuses.
    registry.start_again();
    push(dir.path(), &registry, "bad-synthesis", "0.1.0", &[]);
    let out = host(
        dir.path(),
        &[
            "skill",
            "push",
            &dist("bad-synthesis"),
            &registry.reference("skills/claim-synthesis:0.1.0"),
        ],
    );
    ok(&out);
    ok(&run_research(dir.path(), &remote, &report, &[]));
    let out = run_research(dir.path(), &remote, &report, &["--locked"]);
    fails(
        &out,
        2,
        &["skill `synthesis`", "now resolves to", "host lock"],
    );
    // A lock that disagrees with what the scenario names.
    let text = std::fs::read_to_string(&lock_file).unwrap();
    std::fs::write(
        &lock_file,
        text.replace("skills/report-writer:0.1.0", "skills/report-writer:0.0.9"),
    )
    .unwrap();
    let out = run_research(dir.path(), &remote, &report, &["--locked"]);
    fails(&out, 2, &["skill `writer`", "the lock pins"]);
}

#[test]
fn a_worker_runs_registry_components_only_as_they_were_submitted() {
    let registry = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    for skill in RESEARCH_SKILLS {
        push(dir.path(), &registry, skill, "0.1.0", &[]);
    }
    let remote = research_scenario(dir.path(), |s| {
        registry.reference(&format!("skills/{s}:0.1.0"))
    });
    let scenario = remote.to_str().unwrap();
    let db = format!("sqlite://{}", dir.path().join("queue.db").display());
    let db = db.as_str();
    let submit = |dir: &Path| {
        let out = host(
            dir,
            &[
                "submit",
                scenario,
                "--input",
                QUERY,
                "--database",
                db,
                "--json",
            ],
        );
        ok(&out);
        json(&out)["run_id"].as_str().unwrap().to_string()
    };
    let drain = |dir: &Path| {
        ok(&host(
            dir,
            &[
                "worker",
                "--database",
                db,
                "--exit-when-idle",
                "--concurrency",
                "1",
            ],
        ))
    };
    let show = |dir: &Path, run: &str| {
        let out = host(dir, &["runs", "show", run, "--database", db, "--json"]);
        ok(&out);
        json(&out)
    };

    // A worker pulls what the run was submitted with and runs it to the
    // report a local run writes.
    let first = submit(dir.path());
    drain(dir.path());
    assert_eq!(show(dir.path(), &first)["status"], "completed");
    let report = dir.path().join("report.md");
    ok(&host(
        dir.path(),
        &[
            "runs",
            "artifact",
            &first,
            "report.md",
            "--database",
            db,
            "--out",
            report.to_str().unwrap(),
        ],
    ));
    let local = dir.path().join("local-report.md");
    let local_scenario = skillhost_tests::repo_root().join("examples/research/scenario.toml");
    ok(&run_research(dir.path(), &local_scenario, &local, &[]));
    assert_eq!(
        std::fs::read_to_string(&report).unwrap(),
        std::fs::read_to_string(&local).unwrap()
    );

    // The tag moves after a run was queued, to a build with the same
    // interface and other bytes (a custom section appended): the worker
    // resolves the new code, and the run is refused rather than switched.
    let second = submit(dir.path());
    let mut rebuilt = std::fs::read(dist("claim-synthesis")).unwrap();
    let name = b"rebuilt";
    let payload = b"another build";
    rebuilt.extend_from_slice(&[0, (1 + name.len() + payload.len()) as u8, name.len() as u8]);
    rebuilt.extend_from_slice(name);
    rebuilt.extend_from_slice(payload);
    let rebuilt_path = dir.path().join("claim-synthesis-rebuilt.wasm");
    std::fs::write(&rebuilt_path, rebuilt).unwrap();
    ok(&host(
        dir.path(),
        &[
            "skill",
            "push",
            rebuilt_path.to_str().unwrap(),
            &registry.reference("skills/claim-synthesis:0.1.0"),
        ],
    ));
    drain(dir.path());
    let shown = show(dir.path(), &second);
    assert_eq!(shown["status"], "failed", "{shown}");
    let error = shown["error"].to_string();
    assert!(
        error.contains("components-changed") && error.contains("synthesis"),
        "{error}"
    );
}

#[test]
fn a_killed_registry_run_resumes_offline_with_the_registry_gone() {
    use std::os::unix::process::ExitStatusExt as _;
    let registry = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    for skill in RESEARCH_SKILLS {
        push(dir.path(), &registry, skill, "0.1.0", &[]);
    }
    let remote = research_scenario(dir.path(), |s| {
        registry.reference(&format!("skills/{s}:0.1.0"))
    });
    ok(&host(dir.path(), &["lock", remote.to_str().unwrap()]));
    let out = host_command(
        dir.path(),
        &[
            "run",
            remote.to_str().unwrap(),
            "--input",
            QUERY,
            "--events",
        ],
        Some("after-commit:paper_summarize"),
    )
    .current_dir(dir.path())
    .output()
    .unwrap();
    assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
    let first: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    let run_id = first["run_id"].as_str().unwrap().to_string();

    registry.stop();
    let out = host(dir.path(), &["resume", &run_id, "--offline", "--json"]);
    ok(&out);
    assert_eq!(json(&out)["status"], "completed");
}

#[test]
fn the_trust_policy_refuses_unsigned_and_wrongly_signed_components() {
    let registry = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    ok(&host(
        dir.path(),
        &["skill", "keygen", "--out", "publisher"],
    ));
    ok(&host(dir.path(), &["skill", "keygen", "--out", "stranger"]));
    let out = host(dir.path(), &["skill", "keygen", "--out", "publisher"]);
    fails(&out, 2, &["already exists"]);

    push(
        dir.path(),
        &registry,
        "echo",
        "1",
        &["--sign", "publisher.key"],
    );
    push(dir.path(), &registry, "text-stats", "1", &[]);
    let scenario = write_file(
        dir.path(),
        "echo.toml",
        format!(
            r#"[scenario]
name = "signed-echo"
[input]
message = {{ type = "string" }}
[skills.echo]
component = "{}"
[trust]
keys = ["publisher.pub"]
[[node]]
id = "say"
skill = "echo"
input = {{ message = "input.message", repeat = "2" }}
[[node]]
id = "done"
kind = "end"
[[edge]]
from = "say"
to = "done"
"#,
            registry.reference("skills/echo:1")
        )
        .as_bytes(),
    );
    let path = scenario.to_str().unwrap();
    ok(&host(dir.path(), &["lock", path]));
    ok(&host(
        dir.path(),
        &[
            "run",
            path,
            "--input",
            r#"{"message": "hi"}"#,
            "--durability",
            "none",
        ],
    ));

    // The same scenario naming an unsigned component.
    let unsigned = registry.reference("skills/text-stats:1");
    let text = std::fs::read_to_string(&scenario).unwrap();
    std::fs::write(
        &scenario,
        text.replace(&registry.reference("skills/echo:1"), &unsigned),
    )
    .unwrap();
    let out = host(dir.path(), &["lock", path]);
    fails(&out, 2, &["skill `echo`", "not trusted", "not signed"]);

    // The host config trusts another key: pull refuses the publisher's.
    std::fs::create_dir_all(dir.path().join("xdg-config/skillhost")).unwrap();
    std::fs::write(
        dir.path().join("xdg-config/skillhost/config.toml"),
        format!(
            "[trust]\nkeys = [\"{}\"]\n",
            dir.path().join("stranger.pub").display()
        ),
    )
    .unwrap();
    let signed = registry.reference("skills/echo:1");
    let out = host(dir.path(), &["skill", "pull", &signed]);
    fails(
        &out,
        2,
        &[
            "not trusted",
            "key the policy does not list",
            "stranger.pub",
        ],
    );
    // Signed by the stranger too, it is accepted.
    ok(&host(
        dir.path(),
        &["skill", "sign", &signed, "--key", "stranger.key"],
    ));
    let out = host(dir.path(), &["skill", "pull", &signed, "--json"]);
    ok(&out);
    assert!(
        json(&out)["signed_by"]
            .as_str()
            .unwrap()
            .contains("stranger.pub")
    );
}

/// `oras` pushes a file as the one `application/wasm` layer of a Wasm
/// artifact.
const ORAS_PUSH: &str = r#"
import sys, oras.provider
target, layer, config = sys.argv[1:4]
registry = oras.provider.Registry(insecure=True)
registry.push(target=target, files=[f"{layer}:application/wasm"],
              manifest_config=f"{config}:application/vnd.wasm.config.v0+json",
              disable_path_validation=True)
"#;

#[test]
fn a_component_oras_pushed_is_pulled_and_run() {
    let registry = TestRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let config = write_file(
        dir.path(),
        "config.json",
        br#"{"created":"2026-01-01T00:00:00Z","architecture":"wasm","os":"wasip2","layerDigests":[]}"#,
    );
    let target = format!("{}/skills/echo:oras", registry.address());
    python(
        ORAS_PUSH,
        &[&target, &dist("echo"), config.to_str().unwrap()],
    );
    let scenario = write_file(
        dir.path(),
        "echo.toml",
        format!(
            r#"[scenario]
name = "oras-echo"
[skills.echo]
component = "oci://{target}"
[[node]]
id = "say"
skill = "echo"
input = {{ message = "'from oras'", repeat = "2" }}
[[node]]
id = "done"
kind = "end"
[[edge]]
from = "say"
to = "done"
"#
        )
        .as_bytes(),
    );
    let out = host(
        dir.path(),
        &[
            "run",
            scenario.to_str().unwrap(),
            "--durability",
            "none",
            "--json",
        ],
    );
    ok(&out);
    assert_eq!(json(&out)["status"], "completed");
}

/// Memory a `host` command may hold against a registry that offers
/// [`OFFERED`] bytes: well above what a pull needs (about 40 MB measured
/// for a debug build), well below what the registry sends.
const MEMORY_BOUND: u64 = 160 << 20;
/// What a hostile registry offers: more than the bound, so a client that
/// reads it whole passes the bound.
const OFFERED: u64 = 400 << 20;

/// `host ARGS` in `dir`, killed after two minutes, with its peak memory.
fn measured(dir: &Path, args: &[&str]) -> Measured {
    run_measured(host_command(dir, args, None), Duration::from_secs(120))
}

/// A scenario in `dir` whose one node runs the `echo` at `reference`.
fn echo_scenario(dir: &Path, reference: &str) -> PathBuf {
    let path = dir.join("echo.toml");
    std::fs::write(
        &path,
        format!(
            r#"[scenario]
name = "from-a-registry"

[state]
said = {{ type = "string" }}

[skills.echo]
component = "{reference}"

[[node]]
id = "say"
skill = "echo"
input = {{ message = "'hi'", repeat = "1" }}
writes = [{{ field = "said", from = "output.message" }}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "say"
to = "done"
"#
        ),
    )
    .unwrap();
    path
}

fn assert_bounded(run: &Measured, what: &str) {
    assert!(
        run.max_rss < MEMORY_BOUND,
        "{what}: the host held {} MiB (bound {} MiB): {}",
        run.max_rss >> 20,
        MEMORY_BOUND >> 20,
        run.text()
    );
    assert!(
        run.text().len() < 4096,
        "{what}: the error is not short: {} bytes",
        run.text().len()
    );
}

#[test]
fn a_registry_that_answers_without_end_does_not_grow_the_host() {
    for (hostility, code, says) in [
        (
            Hostility::HugeManifest {
                bytes: OFFERED,
                length: true,
            },
            3,
            "manifest is 419430400 bytes long",
        ),
        (
            Hostility::HugeManifest {
                bytes: OFFERED,
                length: false,
            },
            3,
            "manifest is longer",
        ),
        (
            Hostility::HugeError { bytes: OFFERED },
            2,
            "not in the registry (HTTP 404: not here: xxx",
        ),
        (
            Hostility::HugeToken { bytes: OFFERED },
            3,
            "token answer is longer",
        ),
    ] {
        let registry = HostileRegistry::start(hostility.clone());
        let dir = tempfile::tempdir().unwrap();
        let reference = registry.reference("skills/echo:1");
        let run = measured(dir.path(), &["skill", "pull", &reference]);
        let what = format!("{hostility:?}");
        assert_eq!(
            run.output.status.code(),
            Some(code),
            "{what}: {}",
            run.text()
        );
        assert!(run.text().contains(says), "{what}: {}", run.text());
        assert!(
            run.text().contains("skills/echo:1"),
            "{what}: {}",
            run.text()
        );
        assert_bounded(&run, &what);
        assert!(
            cache_holds_no_blob(dir.path()),
            "{what}: something was stored"
        );
    }

    // `host check` of a scenario naming one, too.
    let registry = HostileRegistry::start(Hostility::HugeManifest {
        bytes: OFFERED,
        length: false,
    });
    let dir = tempfile::tempdir().unwrap();
    let scenario = echo_scenario(dir.path(), &registry.reference("skills/echo:1"));
    let run = measured(dir.path(), &["check", scenario.to_str().unwrap()]);
    assert_ne!(run.output.status.code(), Some(0), "{}", run.text());
    assert!(run.text().contains("manifest is longer"), "{}", run.text());
    assert!(
        run.text().contains("skill `echo`") || run.text().contains("skills/echo:1"),
        "{}",
        run.text()
    );
    assert_bounded(&run, "host check");
}

/// The registry cache `host_command` gives a `host` run in `dir`.
fn blobs_dir(dir: &Path) -> PathBuf {
    dir.join("registry-cache/blobs/sha256")
}

/// Whether the registry cache under `dir` holds no file at all (no blob,
/// no partial download left behind).
fn cache_holds_no_blob(dir: &Path) -> bool {
    std::fs::read_dir(blobs_dir(dir)).map_or(true, |entries| entries.count() == 0)
}

/// Whether the registry cache under `dir` holds the shipped `echo`.
fn cache_holds_echo(dir: &Path) -> bool {
    let echo = std::fs::read(skillhost_tests::dist("echo")).unwrap();
    let digest = skillhost_tests::hostile_registry::digest(&echo);
    blobs_dir(dir)
        .join(digest.trim_start_matches("sha256:"))
        .exists()
}

#[test]
fn a_component_larger_than_the_cap_is_refused_before_a_byte_of_it() {
    let component = std::fs::read(skillhost_tests::dist("echo")).unwrap().len() as u64;
    // Declared at 1 GiB, past the default cap of 256 MiB: not fetched.
    let registry = HostileRegistry::start(Hostility::Layer {
        declared: 1 << 30,
        sent: 1 << 30,
    });
    let dir = tempfile::tempdir().unwrap();
    let run = measured(
        dir.path(),
        &["skill", "pull", &registry.reference("skills/echo:1")],
    );
    fails(
        &run.output,
        3,
        &[
            "skills/echo:1",
            "component is 1073741824 bytes, as its manifest declares",
            "268435456 bytes",
            "max_component_bytes",
        ],
    );
    let blobs: Vec<String> = registry
        .requests()
        .iter()
        .filter(|r| r.line.contains("/blobs/"))
        .map(|r| r.line.clone())
        .collect();
    assert!(blobs.is_empty(), "blobs were fetched: {blobs:?}");

    // Declared honestly but sent with 400 MiB more: cut at the declared
    // size, nothing stored.
    let registry = HostileRegistry::start(Hostility::Layer {
        declared: component,
        sent: component + OFFERED,
    });
    let run = measured(
        dir.path(),
        &["skill", "pull", &registry.reference("skills/echo:1")],
    );
    fails(
        &run.output,
        3,
        &[
            "skills/echo:1",
            &format!("more than {component} bytes"),
            "nothing was stored",
        ],
    );
    assert_bounded(&run, "a layer past its size");
    assert!(!cache_holds_echo(dir.path()), "the component was stored");
    assert!(
        registry.bytes_sent() < OFFERED / 4,
        "the host read {} bytes",
        registry.bytes_sent()
    );

    // The cap is the host config's: a lower one refuses the honest echo.
    let registry = HostileRegistry::start(Hostility::None);
    write_file(
        dir.path(),
        "skillhost.toml",
        b"[registries]\nmax_component_bytes = 1000\n",
    );
    let run = measured(
        dir.path(),
        &["skill", "pull", &registry.reference("skills/echo:1")],
    );
    fails(
        &run.output,
        3,
        &[
            "more than the 1000 bytes",
            "max_component_bytes",
            "skillhost.toml",
        ],
    );
    assert!(!cache_holds_echo(dir.path()), "the component was stored");
    std::fs::remove_file(dir.path().join("skillhost.toml")).unwrap();
    let run = measured(
        dir.path(),
        &["skill", "pull", &registry.reference("skills/echo:1")],
    );
    ok(&run.output);
    assert!(
        cache_holds_echo(dir.path()),
        "the honest pull stored nothing"
    );
}

#[test]
fn a_registry_that_sends_a_byte_a_second_is_cut_at_the_pull_deadline() {
    let registry = HostileRegistry::start(Hostility::Trickle);
    let dir = tempfile::tempdir().unwrap();
    let scenario = echo_scenario(dir.path(), &registry.reference("skills/echo:1"));
    write_file(
        dir.path(),
        "skillhost.toml",
        b"[registries]\npull_timeout_ms = 3000\n",
    );
    let run = measured(
        dir.path(),
        &[
            "run",
            scenario.to_str().unwrap(),
            "--input",
            "{}",
            "--durability",
            "none",
        ],
    );
    fails(
        &run.output,
        3,
        &[
            "pulling `",
            "skills/echo:1",
            "did not finish within 3 s",
            "pull_timeout_ms",
        ],
    );
    assert!(run.took < Duration::from_secs(30), "took {:?}", run.took);
    // A pull alone, the same.
    let run = measured(
        dir.path(),
        &["skill", "pull", &registry.reference("skills/echo:1")],
    );
    fails(&run.output, 3, &["did not finish within 3 s"]);
}

#[test]
fn a_registry_redirects_only_to_its_own_origin_or_a_listed_host() {
    let target = HostileRegistry::start(Hostility::None);
    let registry = HostileRegistry::start(Hostility::RedirectBlobs {
        to: target.origin(),
    });
    let dir = tempfile::tempdir().unwrap();
    let reference = registry.reference("skills/echo:1");
    let pull = |dir: &Path| {
        let mut command = host_command(dir, &["skill", "pull", &reference, "--json"], None);
        command
            .env("SKILLHOST_REGISTRY_USERNAME", "someone")
            .env("SKILLHOST_REGISTRY_PASSWORD", "pa55-for-the-registry");
        command.output().unwrap()
    };
    let out = pull(dir.path());
    fails(
        &out,
        3,
        &[
            &format!("redirected the pull of `{}", &reference["oci://".len()..]),
            &target.origin(),
            "[registries] redirects",
            &format!(
                "\"{}\" = [\"{}\"]",
                registry.host_port(),
                target.host_port()
            ),
        ],
    );
    assert!(target.requests().is_empty(), "the redirect was followed");

    // Listed for this registry, it is followed, without the credentials.
    write_file(
        dir.path(),
        "skillhost.toml",
        format!(
            "[registries]\nredirects = {{ \"{}\" = [\"{}\"] }}\n",
            registry.host_port(),
            target.host_port()
        )
        .as_bytes(),
    );
    let out = pull(dir.path());
    ok(&out);
    let seen = target.requests();
    assert!(seen.iter().any(|r| r.line.contains("/blobs/")), "{seen:?}");
    assert!(
        seen.iter().all(|r| !r.has_header("authorization")),
        "the registry's credentials reached another origin: {seen:?}"
    );
    assert!(
        registry
            .requests()
            .iter()
            .any(|r| r.has_header("authorization")),
        "the registry got its credentials"
    );
}
