//! `host skill call` and `host skill inspect` through the real binary: the
//! happy path, and one clear error line with the documented exit code for each
//! kind of bad input.

use std::process::{Command, Output};

use serde_json::{Value, json};

fn host(args: &[&str]) -> Output {
    Command::new(skillhost_tests::cli::host_bin())
        .args(args)
        .env(
            "SKILLHOST_CACHE_DIR",
            skillhost_tests::shared_component_cache(),
        )
        .output()
        .expect("run host")
}

fn dist(name: &str) -> String {
    skillhost_tests::dist(name).display().to_string()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// One error line, naming `what`, with `code`.
fn fails_with(out: &Output, code: i32, what: &str) {
    assert_eq!(out.status.code(), Some(code), "{}", stderr(out));
    let err = stderr(out);
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error")).collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    assert!(errors[0].contains(what), "`{what}` not in: {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn call_prints_the_output() {
    let out = host(&[
        "skill",
        "call",
        &dist("echo"),
        "--input",
        r#"{"message": "ab", "repeat": 2}"#,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value, json!({ "message": "abab", "length": 4 }));
}

#[test]
fn call_with_json_reports_usage() {
    let out = host(&[
        "skill",
        "call",
        &dist("echo"),
        "--input",
        r#"{"message": "x", "repeat": 1}"#,
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["output"]["length"], 1);
    assert_eq!(value["error"], Value::Null);
    assert!(value["fuel_consumed"].as_u64().unwrap() > 0);
    assert_eq!(value["logs"][0]["level"], "info");
}

#[test]
fn input_that_does_not_fit_names_the_path() {
    let out = host(&[
        "skill",
        "call",
        &dist("echo"),
        "--input",
        r#"{"message": "x", "repeat": -1}"#,
    ]);
    fails_with(&out, 2, "$.repeat");
    let out = host(&[
        "skill",
        "call",
        &dist("echo"),
        "--input",
        r#"{"message": "x"}"#,
    ]);
    fails_with(&out, 2, "$.repeat");
    let out = host(&[
        "skill",
        "call",
        &dist("echo"),
        "--input",
        r#"{"message": "x", "repeat": 1, "extra": 1}"#,
    ]);
    fails_with(&out, 2, "extra");
    let out = host(&["skill", "call", &dist("echo"), "--input", "{nope"]);
    fails_with(&out, 2, "not valid JSON");
    let out = host(&[
        "skill",
        "call",
        &dist("echo"),
        "--input",
        "@/no/such/input.json",
    ]);
    fails_with(&out, 2, "/no/such/input.json");
}

#[test]
fn bad_files_are_named() {
    let out = host(&["skill", "call", "/no/such/skill.wasm", "--input", "{}"]);
    fails_with(&out, 2, "/no/such/skill.wasm");
    let out = host(&[
        "skill",
        "inspect",
        &skillhost_tests::repo_root()
            .join("Cargo.toml")
            .display()
            .to_string(),
    ]);
    fails_with(&out, 2, "not a WebAssembly file");
}

#[test]
fn bad_grants_and_limits_are_refused_before_the_call() {
    let input = r#"{"path": "x.txt"}"#;
    let out = host(&[
        "skill",
        "call",
        &dist("text-stats"),
        "--input",
        input,
        "--grant",
        "fs=/no/such/dir",
    ]);
    fails_with(&out, 2, "/no/such/dir");
    // The user's own command line may grant any directory but these: a
    // skill never reads the host's environment, devices or kernel state.
    for never in ["/proc/self", "/proc/self/root", "/dev", "/sys", "/"] {
        let grant = format!("fs={never}");
        let out = host(&[
            "skill",
            "call",
            &dist("text-stats"),
            "--input",
            input,
            "--grant",
            &grant,
        ]);
        fails_with(&out, 2, "which are never granted");
    }
    let out = host(&[
        "skill",
        "call",
        &dist("text-stats"),
        "--input",
        input,
        "--grant",
        "net=x",
    ]);
    fails_with(&out, 2, "unknown capability");
    let out = host(&[
        "skill",
        "call",
        &dist("echo"),
        "--input",
        r#"{"message": "x", "repeat": 1}"#,
        "--memory-mb",
        "100000",
    ]);
    fails_with(&out, 2, "memory limit");
}

#[test]
fn capabilities_are_denied_unless_granted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "one two two\nthree\n").unwrap();
    let input = r#"{"path": "notes.txt"}"#;
    let out = host(&["skill", "call", &dist("text-stats"), "--input", input]);
    fails_with(&out, 1, "capability-denied");
    let grant = format!("fs={}", dir.path().display());
    let out = host(&[
        "skill",
        "call",
        &dist("text-stats"),
        "--input",
        input,
        "--grant",
        &grant,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["lines"], 2);
    assert_eq!(value["words"], 4);
}

#[test]
fn inspect_json_has_the_contract_keys() {
    let out = host(&["skill", "inspect", &dist("paper-discovery"), "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "name",
        "version",
        "imports",
        "exports",
        "input_schema",
        "output_schema",
        "wit",
    ] {
        assert!(value.get(key).is_some(), "missing `{key}`");
    }
    assert_eq!(value["name"], "paper-discovery");
    assert!(
        value["capabilities"]
            .as_array()
            .unwrap()
            .contains(&json!("fs"))
    );
    assert_eq!(
        value["input_schema"]["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    assert!(value["input_schema"]["properties"]["query"].is_object());
    assert!(value["wit"].as_str().unwrap().contains("export run"));
}

/// Writes the test component `name` (see `tests/support/fixtures`) into `dir`.
fn fixture_file(dir: &std::path::Path, name: &str) -> String {
    let path = dir.join(format!("{name}.wasm"));
    std::fs::write(&path, skillhost_tests::fixture_component(name)).unwrap();
    path.display().to_string()
}

#[test]
fn dropped_log_lines_are_counted_in_human_output() {
    let dir = tempfile::tempdir().unwrap();
    let probe = fixture_file(dir.path(), "wasi-probe");
    let input = r#"{"mode": "print", "n": 262144}"#;
    let out = host(&["skill", "call", &probe, "--input", input]);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("log line(s) dropped: the call's log budget of 65536 bytes was spent"),
        "{err}"
    );
}

#[test]
fn a_manifest_that_spins_fails_inspect_with_a_manifest_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let slow = fixture_file(dir.path(), "slow-manifest");
    // It ran into the call timeout of 30 s and said "interrupt". How long
    // the process takes is not asserted: compiling the component in a debug
    // build on a busy machine can take longer than the limit itself; the
    // runtime's own test bounds the load.
    let out = host(&["skill", "inspect", &slow]);
    assert_ne!(out.status.code(), Some(0));
    let err = stderr(&out);
    assert!(err.contains("did not return within 1000 ms"), "{err}");
    assert!(!err.contains("interrupt"), "{err}");
}

/// A node whose WASI skill prints past its log budget says so in `host run`'s progress,
/// in its step's detail and in `host runs show`.
#[test]
fn a_run_says_which_node_dropped_log_lines() {
    use skillhost_tests::cli::{host as host_in, json as json_of, stderr as err_of};
    let dir = tempfile::tempdir().unwrap();
    fixture_file(dir.path(), "wasi-probe");
    std::fs::write(
        dir.path().join("chatty.toml"),
        r#"[scenario]
name = "chatty"
version = "0.1.0"
description = "A skill that prints more than its log budget"

[input]
n = { type = "integer" }

[state]
value = { type = "integer" }

[skills.probe]
component = "wasi-probe.wasm"

[[node]]
id = "print"
skill = "probe"
input = { mode = "'print'", n = "input.n" }
writes = [{ field = "value", from = "output.value" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "print"
to = "done"
"#,
    )
    .unwrap();
    let scenario = dir.path().join("chatty.toml").display().to_string();
    let run = host_in(
        dir.path(),
        &["run", &scenario, "--input", r#"{"n": 262144}"#, "--json"],
        None,
    );
    assert!(run.status.success(), "{}", err_of(&run));
    let progress = err_of(&run);
    let line = progress
        .lines()
        .find(|l| l.contains("log line(s) dropped"))
        .unwrap_or_else(|| panic!("no dropped-lines line: {progress}"));
    assert!(line.contains("print"), "{line}");
    let run_id = json_of(&run)["run_id"].as_str().unwrap().to_string();

    let shown = host_in(dir.path(), &["runs", "show", &run_id, "--json"], None);
    let steps = json_of(&shown)["steps"].clone();
    let dropped = steps[0]["detail"]["logs_dropped"].as_u64();
    // 256 KiB of 4 KiB lines against a 64 KiB budget: most were dropped.
    let dropped = dropped.expect("logs_dropped in the step's detail");
    assert!(dropped >= 48, "{dropped} dropped");
    let human = host_in(dir.path(), &["runs", "show", &run_id], None);
    let text = String::from_utf8_lossy(&human.stdout);
    let line = text.lines().find(|l| l.contains("logs:"));
    assert_eq!(
        line.map(str::trim),
        Some(format!("logs: {dropped} line(s) dropped past the call's log budget").as_str())
    );
}

/// `kv-probe` with a manifest that declares no capability, as a Python or
/// JavaScript toolchain makes it: the component imports `kv`, the skill
/// does not ask for it.
fn undeclared_kv_probe(dir: &std::path::Path) -> String {
    let path = dir.join("undeclared.wasm");
    let component = skillhost_tests::fixture_component_with("kv-probe", |wat| {
        wat.replace(
            "(i32.store (i32.const 1060) (i32.const 1))",
            "(i32.store (i32.const 1060) (i32.const 0))",
        )
    });
    std::fs::write(&path, component).unwrap();
    path.display().to_string()
}

#[test]
fn an_import_the_manifest_does_not_declare_is_shown_denied_and_needs_no_grant() {
    let dir = tempfile::tempdir().unwrap();
    let probe = undeclared_kv_probe(dir.path());

    let out = host(&["skill", "inspect", &probe, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["capabilities"], json!([]));
    assert_eq!(value["imported_capabilities"], json!(["kv"]));
    assert_eq!(value["denied_imports"], json!(["kv"]));
    let out = host(&["skill", "inspect", &probe]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("denied        kv (imported, not declared"),
        "{text}"
    );

    // `skill call` follows the same rule: a grant does not reach it.
    let input = r#"{"key": "greeting"}"#;
    let out = host(&[
        "skill", "call", &probe, "--input", input, "--grant", "kv=ns",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("[capability-denied]"),
        "{}",
        stderr(&out)
    );

    // The checker asks for no grant of what the manifest does not declare.
    let scenario = dir.path().join("probe.toml");
    std::fs::write(
        &scenario,
        r#"[scenario]
name = "probe"

[skills.probe]
component = "undeclared.wasm"

[[node]]
id = "read"
skill = "probe"
input = { key = "'greeting'" }

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "read"
to = "done"
"#,
    )
    .unwrap();
    let out = host(&["check", &scenario.display().to_string()]);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `--max-host-calls` and `--host-call-mb` bound a skill that loops host
/// calls (the `host-loop` fixture): the call fails with the budget named
/// and the flag to raise, and bad values are refused before it runs.
#[test]
fn skill_call_takes_the_host_call_budget() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("host-loop.wasm");
    std::fs::write(&path, skillhost_tests::fixture_component("host-loop")).unwrap();
    let component = path.display().to_string();
    let input = r#"{"op": "get", "arg": "k", "size": 0, "times": 1000, "keep_going": false}"#;
    let call = |extra: &[&str]| {
        let mut args = vec![
            "skill", "call", &component, "--input", input, "--grant", "kv=loop",
        ];
        args.extend(extra);
        host(&args)
    };
    let out = call(&["--max-host-calls", "7"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    for says in ["[host-call-budget]", "made 7", "`max_host_calls` (now 7"] {
        assert!(stderr(&out).contains(says), "{says}: {}", stderr(&out));
    }
    // Within the default budget the same loop runs to its end.
    let out = call(&[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let value: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(value["calls"], 1000, "{value}");

    for bad in [["--max-host-calls", "2000000"], ["--host-call-mb", "0"]] {
        let out = call(&bad);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {}", stderr(&out));
    }
}
