//! Running scenarios with the real `host` binary: `host run` and `host
//! resume` (exit codes, `--json`, `--events`, `--out`, `--durability`),
//! refused input and resumes, the databases the commands accept, the
//! history commands (`runs show`, `runs list`, `checkpoints`), `graph`, the
//! benchmarks, and `--help`. What the engine does with a run (every kind of
//! node, routing, retries, rules, constraints, resume) is tested on the
//! library, in `host/engine/tests/engine/`.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use skillhost_tests::cli::{host, host_command, stderr};

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    fn new() -> Host {
        Host {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn cmd(&self, args: &[&str]) -> Output {
        host(self.dir.path(), args, None)
    }

    fn run_json(&self, scenario: &str, input: Value) -> (i32, Value) {
        let input = input.to_string();
        let out = self.cmd(&["run", &scenario_path(scenario), "--input", &input, "--json"]);
        let code = out.status.code().unwrap_or(-1);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {stdout}\nstderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (code, value)
    }

    /// Runs `scenario` with `--events`: the exit code and every event, each
    /// stdout line parsed as JSON (a line that is not is a test failure).
    fn run_events(&self, scenario: &str, input: Value) -> (Option<i32>, Vec<Value>) {
        let out = self.cmd(&[
            "run",
            &scenario_path(scenario),
            "--input",
            &input.to_string(),
            "--events",
        ]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let events = stdout
            .lines()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{stdout}"))
            })
            .collect();
        (out.status.code(), events)
    }

    fn show(&self, run_id: &str) -> Value {
        let out = self.cmd(&["runs", "show", run_id, "--json"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn scenario_path(name: &str) -> String {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("e2e/engine")
        .join(format!("{name}.toml"));
    path.display().to_string()
}

#[test]
fn pipeline_runs_skill_map_gate_and_end() {
    let host = Host::new();
    let (code, out) = host.run_json(
        "pipeline",
        json!({ "message": "hi", "items": ["x", "y", "z", "w"] }),
    );
    assert_eq!(code, 0, "{out}");
    assert_eq!(out["status"], "completed");
    let state = &out["state"];
    assert_eq!(state["greeting"], json!({ "message": "hihi", "length": 4 }));
    // Map outputs keep input order, whatever order the items finished in.
    let echoes: Vec<&str> = state["echoes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert_eq!(echoes, ["x!", "y!y!", "z!z!z!", "w!w!w!w!"]);
    assert_eq!(state["lengths"], json!([4, 2, 4, 6, 8]));

    let shown = host.show(out["run_id"].as_str().unwrap());
    let nodes: Vec<&str> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["greet", "fan", "count"]);
    for step in shown["steps"].as_array().unwrap() {
        assert_eq!(step["status"], "ok");
    }
    assert!(shown["steps"][0]["input_hash"].is_string());
    assert!(shown["steps"][0]["fuel_consumed"].as_u64().unwrap() > 0);
    assert_eq!(shown["state"], out["state"]);

    let run_id = out["run_id"].as_str().unwrap();
    let out = host.cmd(&["checkpoints", run_id, "--json"]);
    let checkpoints: Value = serde_json::from_slice(&out.stdout).unwrap();
    let seqs: Vec<u64> = checkpoints
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [0, 1, 2, 3]);
    // Checkpoint 0 carries a version 1 hash (the store's), the steps' ones a
    // version 2 hash (the engine's); the table labels each with its version.
    let hashes: Vec<&str> = checkpoints
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["state_hash"].as_str().unwrap())
        .collect();
    assert_eq!(hashes[0].len(), 64, "{hashes:?}");
    assert!(
        hashes[1..].iter().all(|h| h.starts_with("f2:")),
        "{hashes:?}"
    );
    let table = String::from_utf8(host.cmd(&["checkpoints", run_id]).stdout).unwrap();
    let lines: Vec<&str> = table.lines().skip(1).collect();
    assert!(
        lines[0].ends_with(&format!("sha256:{}", &hashes[0][..16])),
        "{table}"
    );
    assert!(
        lines[1].ends_with(&format!("f2:{}", &hashes[1][3..19])),
        "{table}"
    );
}

#[test]
fn retryable_errors_are_retried_then_routed_to_the_failure_handler() {
    let host = Host::new();
    let (code, out) = host.run_json("failing", json!({ "mode": "retryable-error" }));
    assert_eq!(code, 1, "{out}");
    assert_eq!(out["status"], "failed");
    let failure = &out["failure"];
    assert_eq!(failure["node"], "flaky");
    assert_eq!(failure["handler"], "handler");
    assert_eq!(
        failure["message"],
        "flaky failed: requested-retryable-error"
    );
    assert_eq!(failure["suggestions"], json!(["try mode ok"]));
    assert_eq!(out["state"]["errors"][0]["attempt"], 3);

    let shown = host.show(out["run_id"].as_str().unwrap());
    let attempts: Vec<(u64, &str)> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["attempt"].as_u64().unwrap(),
                s["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(attempts, [(1, "failed"), (2, "failed"), (3, "failed")]);
    // Every attempt, the last included, records the time it took.
    for step in shown["steps"].as_array().unwrap() {
        assert!(step["duration_us"].as_u64().unwrap() > 0, "{step}");
    }
    assert_eq!(shown["status"], "failed");
}

#[test]
fn rule_outcomes_are_recorded_in_full() {
    let host = Host::new();
    // A warning keeps its suggestions, in the run's output and on its step.
    let (code, out) = host.run_json("rules", json!({ "message": "ab" }));
    assert_eq!(code, 0, "{out}");
    let expected = json!({
        "node": "one",
        "code": "SHORT_MESSAGE",
        "message": "the message is short",
        "suggestions": ["a longer message says more"],
    });
    assert_eq!(out["warnings"], json!([expected]));
    let shown = host.show(out["run_id"].as_str().unwrap());
    assert_eq!(
        shown["steps"][0]["detail"]["warnings"],
        json!([expected]),
        "{shown}"
    );
    let human = host.cmd(&["runs", "show", out["run_id"].as_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&human.stdout).contains(
            "warning: SHORT_MESSAGE: the message is short (try: a longer message says more)"
        ),
        "{}",
        String::from_utf8_lossy(&human.stdout)
    );

    // A fatal rule fails its node: the event stream says so, and the failed
    // step records how long the node took.
    let (code, events) = host.run_events("rules", json!({ "message": "abcd" }));
    assert_eq!(code, Some(1), "{events:?}");
    let of_two: Vec<&str> = events
        .iter()
        .filter(|e| e["node"] == "two" && e["event"] != "checkpoint_written")
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(of_two, ["node_started", "node_failed"], "{events:?}");
    let failed = events.iter().find(|e| e["event"] == "node_failed").unwrap();
    assert_eq!(failed["error"]["code"], "TOO_LONG");
    assert_eq!(failed["will_retry"], false);
    let run_id = events[0]["run_id"].as_str().unwrap();
    let shown = host.show(run_id);
    let step = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["node"] == "two")
        .unwrap();
    assert_eq!(step["status"], "failed", "{shown}");
    assert!(step["duration_us"].as_u64().unwrap() > 0, "{step}");
}

#[test]
fn input_that_does_not_fit_is_refused_and_nothing_is_written() {
    let host = Host::new();
    let out = host.cmd(&[
        "run",
        &scenario_path("pipeline"),
        "--input",
        r#"{"message": 3}"#,
    ]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("message"), "{err}");
    assert!(err.contains("see the [input] section of"), "{err}");
    let out = host.cmd(&["run", &scenario_path("pipeline"), "--input", "{not json"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("not valid JSON"), "{}", stderr(&out));
    // The input is checked before the database is opened: none was created.
    assert!(!host.dir.path().join("runs.db").exists());

    // Nor the default one, in a directory where nothing has run.
    let cwd = tempfile::tempdir().unwrap();
    let out = host_command(
        host.dir.path(),
        &["run", &scenario_path("pipeline"), "--input", "{}"],
        None,
    )
    .env_remove("SKILLHOST_DATABASE_URL")
    .current_dir(cwd.path())
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("message"), "{}", stderr(&out));
    assert!(!cwd.path().join(".skillhost").exists());

    // `host submit` refuses it the same way, before queueing anything.
    let out = host.cmd(&[
        "submit",
        &scenario_path("pipeline"),
        "--input",
        r#"{"message": 3}"#,
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!host.dir.path().join("runs.db").exists());
}

#[test]
fn bad_resumes_are_refused() {
    let host = Host::new();
    let (_, done) = host.run_json("loop", json!({}));
    let out = host.cmd(&["resume", "no-such-run"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("no-such-run"), "{}", stderr(&out));
    let id = done["run_id"].as_str().unwrap();
    let out = host.cmd(&["resume", id]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(err.contains("completed"), "{err}");
    // It says what to do instead.
    assert!(
        err.contains(&format!("`host run {}", scenario_path("loop"))),
        "{err}"
    );
    assert!(
        err.contains(&format!("`host runs show {id} --database sqlite://")),
        "{err}"
    );
}

#[test]
fn a_database_that_is_not_ours_is_refused_untouched() {
    let host = Host::new();
    let path = host.dir.path().join("other.db");
    std::fs::write(&path, b"this is not a database at all, just some bytes").unwrap();
    let before = std::fs::read(&path).unwrap();
    let url = format!("sqlite://{}", path.display());
    let out = host.cmd(&["run", &scenario_path("loop"), "--database", &url]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("other.db"), "{}", stderr(&out));
    assert_eq!(std::fs::read(&path).unwrap(), before);
}

/// `runs list`, `runs show`, `checkpoints` and `resume` read a database that
/// exists: one that does not is an error naming its path (exit 3, the
/// environment), and neither it nor its directories are created.
#[test]
fn reading_a_database_that_does_not_exist_creates_nothing() {
    let host = Host::new();
    let missing = host.dir.path().join("newdir/sub/x.db");
    let url = format!("sqlite://{}", missing.display());
    for args in [
        vec!["runs", "list"],
        vec!["runs", "list", "--json"],
        vec!["runs", "show", "some-run"],
        vec!["checkpoints", "some-run"],
        vec!["resume", "some-run"],
        vec!["runs", "prune", "--older-than", "1d"],
        vec!["runs", "retention"],
    ] {
        let out = host.cmd(&[&args[..], &["--database", &url]].concat());
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {err}");
        assert!(
            err.contains(&format!("no database at {}", missing.display())),
            "{args:?}: {err}"
        );
        assert!(err.contains("--database"), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
        assert!(
            !host.dir.path().join("newdir").exists(),
            "{args:?} created the database's directories"
        );
    }
    // The same for the database $SKILLHOST_DATABASE_URL names.
    let out = host.cmd(&["resume", "some-run"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("some-run"), "{}", stderr(&out));
    assert!(!host.dir.path().join("runs.db").exists());

    // With neither, `runs list` in a directory where nothing has run says so;
    // `runs show` is refused. Nothing is created either way.
    let cwd = tempfile::tempdir().unwrap();
    let in_cwd = |args: &[&str]| {
        host_command(host.dir.path(), args, None)
            .env_remove("SKILLHOST_DATABASE_URL")
            .current_dir(cwd.path())
            .output()
            .unwrap()
    };
    let out = in_cwd(&["runs", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("no runs yet"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let out = in_cwd(&["runs", "list", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        serde_json::from_slice::<Value>(&out.stdout).unwrap(),
        json!([])
    );
    let out = in_cwd(&["runs", "show", "some-run"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no database at .skillhost/skillhost.db"),
        "{}",
        stderr(&out)
    );
    assert!(!cwd.path().join(".skillhost").exists());
}

/// A database URL this build cannot use is a bad invocation (exit 2) whose
/// message names the scheme and the accepted ones, and never a password.
#[test]
fn an_unsupported_database_url_is_a_bad_invocation() {
    let host = Host::new();
    let url = "mysql://app:secret@localhost/runs";
    let run = scenario_path("loop");
    for args in [
        vec!["run", &run, "--database", url],
        vec!["runs", "list", "--database", url],
        vec!["resume", "some-run", "--database", url],
    ] {
        let out = host.cmd(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        for expected in ["`mysql://`", "sqlite://", "postgres://"] {
            assert!(err.contains(expected), "{args:?}: {err}");
        }
        assert!(!err.contains("secret"), "{args:?}: {err}");
    }
}

#[test]
fn without_durability_nothing_is_stored() {
    let host = Host::new();
    let out = host.cmd(&[
        "run",
        &scenario_path("loop"),
        "--durability",
        "none",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!host.dir.path().join("runs.db").exists());
}

#[test]
fn events_stream_as_ndjson() {
    let host = Host::new();
    let (code, events) = host.run_events("pipeline", json!({ "message": "e" }));
    assert_eq!(code, Some(0), "{events:?}");
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_started"));
    assert_eq!(kinds.last(), Some(&"run_finished"));
    assert_eq!(
        kinds.iter().filter(|k| **k == "map_item_finished").count(),
        3
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "checkpoint_written").count(),
        3
    );
}

/// With `--events` stdout is NDJSON and nothing else: the summary and the
/// files written go to stderr. Without it they are the command's output.
#[test]
fn events_keep_stdout_pure_ndjson() {
    let host = Host::new();
    let file = host.dir.path().join("echo.txt");
    let file_arg = file.display().to_string();
    let scenario = scenario_path("summary");
    let run = |extra: &[&str]| {
        let args = [
            &["run", &scenario, "--input", r#"{"message":"ab"}"#][..],
            &["--out", &file_arg],
            extra,
        ]
        .concat();
        host.cmd(&args)
    };
    let out = run(&["--events"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let events: Vec<Value> = stdout
        .lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}\n{stdout}"))
        })
        .collect();
    assert!(events.iter().all(|e| e["event"].is_string()), "{stdout}");
    assert_eq!(events.last().unwrap()["event"], "run_finished", "{stdout}");
    let err = stderr(&out);
    assert!(
        err.contains("echoed text:") && err.contains("abab"),
        "{err}"
    );
    assert!(err.contains(&format!("written: {file_arg}")), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "abab\n");

    // The file is there from the first run: replacing it takes --force.
    let out = run(&["--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("length:") && stdout.contains('4'),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("written: {file_arg}")), "{stdout}");

    // One stream or one object: not both on one stdout.
    let out = run(&["--events", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Every argument and option of the commands about scenarios and runs says
/// what it does in `--help`.
#[test]
fn every_option_has_help() {
    let host = Host::new();
    for command in [
        &["resume"][..],
        &["check"],
        &["graph"],
        &["runs", "list"],
        &["runs", "show"],
        &["runs", "artifact"],
        &["runs", "prune"],
        &["runs", "retention"],
        &["checkpoints"],
    ] {
        let out = host.cmd(&[command, &["--help"]].concat());
        assert!(out.status.success(), "{command:?}: {}", stderr(&out));
        let help = String::from_utf8(out.stdout).unwrap();
        for line in help.lines() {
            let line = line.trim();
            if !(line.starts_with('-') || line.starts_with('<')) {
                continue;
            }
            // `--flag <VALUE>  What it does`: the text follows two spaces.
            assert!(line.contains("  "), "{command:?}: `{line}` has no help");
        }
    }
}

#[test]
fn check_and_graph() {
    let host = Host::new();
    let out = host.cmd(&["check", &scenario_path("pipeline")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = host.cmd(&["graph", &scenario_path("pipeline"), "--format", "dot"]);
    let dot = String::from_utf8_lossy(&out.stdout);
    assert!(dot.contains("digraph"), "{dot}");
    assert!(dot.contains("broken"), "{dot}");
}

/// Benchmark options that cannot work are refused before anything runs,
/// each with one line naming the option and what to give instead.
#[test]
fn benchmarks_refuse_options_that_cannot_work() {
    let host = Host::new();
    let pg = "postgres://bench:secret@127.0.0.1:1/none";
    for (args, expected) in [
        (
            vec!["bench", "postgres", "--database", "sqlite://x.db"],
            "give a Postgres database",
        ),
        (
            vec!["bench", "postgres", "--database", pg, "--rounds", "0"],
            "--rounds",
        ),
        (
            vec!["bench", "postgres", "--database", pg, "--runs", "0"],
            "--runs",
        ),
        (
            vec![
                "bench",
                "postgres",
                "--database",
                pg,
                "--durability",
                "none",
            ],
            "keeps no database",
        ),
        (
            vec!["bench", "engine", "--memory-runs", "0"],
            "--memory-runs",
        ),
        (
            vec!["bench", "claims", "--database", "sqlite://x.db"],
            "give a Postgres database",
        ),
        (
            vec!["bench", "claims", "--database", pg, "--workers", "0"],
            "--workers",
        ),
    ] {
        let out = host.cmd(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
        assert!(!err.contains("secret"), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
}

/// The benchmarks run and print every figure they promise (their values are
/// timings, so only their presence and sign are checked here).
#[test]
fn benchmarks_print_their_figures() {
    let host = Host::new();
    let out = host.cmd(&[
        "bench",
        "engine",
        "--json",
        "--memory-runs",
        "3",
        "--sqlite-runs",
        "2",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let engine: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(engine["nodes"], 10);
    for key in [
        "per_node_us_memory",
        "per_node_us_sqlite",
        "call_us",
        "checkpoint_bytes_per_node",
        "full_state_bytes",
    ] {
        assert!(
            engine[key].as_f64().is_some_and(|v| v > 0.0),
            "{key}: {engine}"
        );
    }
    assert!(engine["engine_us_memory"].is_number(), "{engine}");
    // The profile the binary under test was built with: its directory's.
    let profile = match skillhost_tests::cli::host_bin()
        .parent()
        .and_then(|dir| dir.file_name())
        .and_then(|name| name.to_str())
    {
        Some("debug") => "dev",
        Some(other) => other,
        None => panic!("the host binary has no directory"),
    };
    assert_eq!(engine["build_profile"], profile, "{engine}");

    let out = host.cmd(&[
        "bench", "runtime", "--json", "--calls", "20", "--loads", "1",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let runtime: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "fresh_call_us",
        "compile_ms",
        "cached_load_ms",
        "cache_speedup",
    ] {
        assert!(
            runtime[key].as_f64().is_some_and(|v| v > 0.0),
            "{key}: {runtime}"
        );
    }
    assert_eq!(runtime["skill"], "echo");
    assert_eq!(runtime["build_profile"], profile, "{runtime}");

    let out = host.cmd(&["bench", "runtime", "--calls", "20", "--loads", "1"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = String::from_utf8_lossy(&out.stdout);
    assert!(
        first.starts_with(&format!("build profile: {profile} (")),
        "{first}"
    );
}

/// `--out` never replaces a file, or writes through a symlink, without
/// `--force`, and never creates a missing directory: each refusal names the
/// path and comes before the run starts.
#[test]
fn out_refuses_to_overwrite_or_follow_without_force() {
    let host = Host::new();
    let scenario = scenario_path("summary");
    let run = |out: &Path, extra: &[&str]| {
        let out = out.display().to_string();
        let args = [&["run", &scenario, "--out", &out][..], extra].concat();
        host.cmd(&args)
    };
    let existing = host.dir.path().join("existing.txt");
    std::fs::write(&existing, "keep me").unwrap();
    let out = run(&existing, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("existing.txt` already exists; pass --force"),
        "{err}"
    );
    assert!(!err.contains("running"), "refused before the run: {err}");
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "keep me");

    let out = run(&existing, &["--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&existing).unwrap(), "hihi\n");

    // A symlink at the destination: refused, then replaced, never followed.
    let victim = host.dir.path().join("victim.txt");
    std::fs::write(&victim, "secret").unwrap();
    let link = host.dir.path().join("link.txt");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let out = run(&link, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("(a symlink)"), "{}", stderr(&out));
    let out = run(&link, &["--force"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "secret");
    assert!(!std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert_eq!(std::fs::read_to_string(&link).unwrap(), "hihi\n");

    // A missing directory is named, not created.
    let nested = host.dir.path().join("no/such/dir/out.txt");
    let out = run(&nested, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("its directory")
            && stderr(&out).contains("no/such/dir` does not exist"),
        "{}",
        stderr(&out)
    );
    assert!(!host.dir.path().join("no").exists());
}

/// `host runs artifact` writes a stored artifact to stdout or a file: a run
/// killed after the node that made it committed, before anything reached
/// the disk, gets it back from the database.
#[test]
fn runs_artifact_recovers_an_artifact_from_the_store() {
    let host = Host::new();
    let scenario = scenario_path("summary");
    let out = host_command(
        host.dir.path(),
        &["run", &scenario, "--events"],
        Some("after-commit:say"),
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), None, "killed: {}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let started: Value = serde_json::from_str(stdout.lines().next().unwrap()).unwrap();
    let run = started["run_id"].as_str().unwrap();
    assert!(!host.dir.path().join(".skillhost/runs").join(run).exists());

    let out = host.cmd(&["runs", "artifact", run, "echo.txt"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(out.stdout, b"hihi\n");

    let file = host.dir.path().join("recovered.txt");
    let file_arg = file.display().to_string();
    let out = host.cmd(&["runs", "artifact", run, "echo.txt", "--out", &file_arg]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "hihi\n");
    let out = host.cmd(&["runs", "artifact", run, "echo.txt", "--out", &file_arg]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("pass --force"), "{}", stderr(&out));

    let out = host.cmd(&["runs", "artifact", run, "report.md"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("has no artifact `report.md`; it has `echo.txt`"),
        "{}",
        stderr(&out)
    );
    let out = host.cmd(&["runs", "artifact", "no-such-run", "echo.txt"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
