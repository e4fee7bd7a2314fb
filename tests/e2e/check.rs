//! `host check` and the checker's report from `host run`: the diagnostics
//! of the scenario checker as the command line prints them, one JSON object
//! per diagnostic with `--json`, one line each for people. The checker
//! itself is tested on the library, in `host/scenario/tests/`.

use std::path::PathBuf;

use serde_json::json;
use skillhost_tests::cli::{host, json, stderr};

/// The checker's fixtures this module uses, from
/// `host/scenario/tests/scenarios/`, copied with the layout they expect: a
/// `components/` directory next to `invalid/` and `valid/` holding the
/// skills they reference.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Workspace {
        let fixtures = skillhost_tests::repo_root().join("host/scenario/tests/scenarios");
        let dir = tempfile::tempdir().unwrap();
        for file in ["invalid/two_errors.toml", "valid/warnings.toml"] {
            let target = dir.path().join(file);
            std::fs::create_dir_all(target.parent().unwrap()).unwrap();
            std::fs::copy(fixtures.join(file), target).unwrap();
        }
        std::fs::create_dir(dir.path().join("components")).unwrap();
        std::fs::copy(
            skillhost_tests::dist("echo"),
            dir.path().join("components/echo.wasm"),
        )
        .unwrap();
        Workspace { dir }
    }

    fn join(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }
}

/// `host check --json`, and `host run --json` when the checker refuses the
/// scenario, print each diagnostic as an object.
#[test]
fn check_json_gives_each_diagnostic_as_an_object() {
    let dir = tempfile::tempdir().unwrap();
    let workspace = Workspace::new();
    let path = workspace.join("invalid/two_errors.toml");
    let file = path.display().to_string();
    let expected = json!({
        "ok": false,
        "errors": [
            {
                "code": "unknown-node",
                "severity": "error",
                "message": "`on_failure` names node `nowhere`, which is not declared",
                "file": file,
                "line": 3,
                "node": null,
            },
            {
                "code": "undeclared-state",
                "severity": "error",
                "message": "input.message: `state.nope` is not declared; declare it under \
                            [state] (declared: `unused`)",
                "file": file,
                "line": 14,
                "node": "say",
            },
        ],
        "warnings": [
            {
                "code": "unwritten-state",
                "severity": "warning",
                "message": "state `unused` is declared but no node writes it; it keeps its \
                            initial value",
                "file": file,
                "line": 6,
                "node": null,
            },
        ],
    });

    let out = host(dir.path(), &["check", "--json", &file], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(json(&out), expected);

    let out = host(dir.path(), &["run", "--json", &file], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(json(&out), expected);
    assert!(
        stderr(&out).contains("does not pass the checker"),
        "{}",
        stderr(&out)
    );

    // A scenario that passes has the same keys.
    let valid = workspace.join("valid/warnings.toml");
    let out = host(
        dir.path(),
        &["check", "--json", valid.to_str().unwrap()],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = json(&out);
    assert_eq!((&shown["ok"], &shown["errors"]), (&json!(true), &json!([])));
    let warnings: Vec<_> = shown["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| {
            (
                w["code"].as_str(),
                w["severity"].as_str(),
                w["line"].as_u64(),
            )
        })
        .collect();
    assert_eq!(
        warnings,
        [
            (Some("unwritten-state"), Some("warning"), Some(6)),
            (Some("unused-skill"), Some("warning"), Some(12)),
        ]
    );

    // For people: unchanged, one line per diagnostic on stderr.
    let out = host(dir.path(), &["check", &file], None);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{file}:3: `on_failure` names node `nowhere`"))
            && err.contains(&format!(
                "{file}:14: node `say`: input.message: `state.nope`"
            ))
            && err.contains(&format!("{file}:6: warning: state `unused`")),
        "{err}"
    );
}

/// `host check` types the flow of a scenario before any run: a string
/// mapped into the `u32` `repeat`, echo's `u32` `length` written into a
/// string field, and an output field echo does not have are each reported
/// with the node, the field, the expression and both types, and `host run`
/// refuses the scenario without running it.
#[test]
fn check_reports_type_mismatches_before_any_run() {
    let dir = tempfile::tempdir().unwrap();
    let echo = skillhost_tests::dist("echo");
    let path = dir.path().join("types.toml");
    std::fs::write(
        &path,
        format!(
            r#"[scenario]
name = "types"

[state]
echoed = {{ type = "string" }}
last = {{ type = "string" }}

[skills.echo]
component = "{}"

[[node]]
id = "say"
skill = "echo"
input = {{ message = "'hi'", repeat = "'3'" }}
writes = [
  {{ field = "echoed", from = "output.length" }},
  {{ field = "last", from = "output.nosuch" }},
]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "say"
to = "done"
"#,
            echo.display()
        ),
    )
    .unwrap();
    let file = path.display().to_string();

    let out = host(dir.path(), &["check", "--json", &file], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let report = json(&out);
    let errors: Vec<_> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["code"].as_str().unwrap(),
                e["line"].as_u64().unwrap(),
                e["node"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        errors,
        [
            ("input-type", 14, "say"),
            ("write-type", 16, "say"),
            ("unknown-field", 17, "say"),
        ],
        "{report}"
    );
    let messages: Vec<&str> = report["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["message"].as_str().unwrap())
        .collect();
    assert!(
        messages[0].starts_with(
            "input `repeat`: `'3'` gives \"3\", which skill `echo` cannot take as u32"
        ),
        "{messages:?}"
    );
    assert!(
        messages[1].starts_with(
            "writes[0]: `output.length` is an int, but state `echoed` is declared string"
        ),
        "{messages:?}"
    );
    assert!(
        messages[2].contains("`output` has no field `nosuch` (its fields: `message`, `length`)"),
        "{messages:?}"
    );

    // For people: one line each, `path:line: node `say`: …`.
    let out = host(dir.path(), &["check", &file], None);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{file}:14: node `say`: input `repeat`"))
            && err.contains(&format!("{file}:16: node `say`: writes[0]"))
            && err.contains(&format!("{file}:17: node `say`: writes[1]")),
        "{err}"
    );

    // `host run` refuses it before any node runs.
    let out = host(dir.path(), &["run", "--json", &file], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(json(&out)["errors"], report["errors"]);
}

/// A scenario in `dir/scenario/` whose one skill node has `extra` (TOML
/// lines) and the shipped `echo` skill; its branch guard is `guard`.
fn scenario_with(dir: &std::path::Path, extra: &str, guard: &str) -> PathBuf {
    let scenario = dir.join("scenario");
    std::fs::create_dir_all(&scenario).unwrap();
    let echo = skillhost_tests::dist("echo");
    let path = scenario.join("scenario.toml");
    std::fs::write(
        &path,
        format!(
            r#"[scenario]
name = "hostile"

[state]
said = {{ type = "string" }}

[skills.echo]
component = "{echo}"

[[node]]
id = "say"
skill = "echo"
input = {{ message = "'hi'", repeat = "1" }}
writes = [{{ field = "said", from = "output.message" }}]
{extra}

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "say"
branches = [{{ when = "{guard}", to = "done" }}, {{ else = "done" }}]
"#,
            echo = echo.display()
        ),
    )
    .unwrap();
    path
}

/// `host check --json` on `path` with `SKILLHOST_FS_ROOTS` set to `roots`.
fn check_with_roots(path: &std::path::Path, roots: Option<&str>) -> std::process::Output {
    let mut command = skillhost_tests::cli::host_command(
        path.parent().unwrap(),
        &["check", path.to_str().unwrap(), "--json"],
        None,
    );
    command.env_remove("SKILLHOST_FS_ROOTS");
    if let Some(roots) = roots {
        command.env("SKILLHOST_FS_ROOTS", roots);
    }
    command.output().unwrap()
}

/// An `fs` grant stays in the scenario's directory (after `..` and symlinks),
/// an absolute one under `SKILLHOST_FS_ROOTS`, and `/proc`, `/sys`, `/dev`
/// and `/` are never granted: `host check` says which rule a grant breaks.
#[test]
fn fs_grants_stay_in_the_scenario_directory_and_the_allowed_roots() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::create_dir_all(root.join("scenario/data")).unwrap();
    std::os::unix::fs::symlink("/etc", root.join("scenario/etc-link")).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("scenario/sibling")).unwrap();
    let outside = outside.display().to_string();

    let never = "/proc, /sys, /dev, which are never granted";
    let leaves = "outside the scenario's directory";
    for (grant, roots, rule) in [
        ("/", Some("/"), never),
        ("/proc/self", Some("/"), never),
        ("/proc/self/root", Some("/"), never),
        ("/dev", Some("/"), never),
        ("/sys/kernel", Some("/"), never),
        ("/tmp/../proc", Some("/"), never),
        ("../..", None, leaves),
        ("../../../../../../../../..", None, never),
        ("data/../..", None, leaves),
        ("etc-link", None, leaves),
        ("sibling", None, leaves),
        (outside.as_str(), None, "SKILLHOST_FS_ROOTS allows none"),
        (
            "/etc",
            Some(outside.as_str()),
            "is not under a root the host allows",
        ),
    ] {
        let path = scenario_with(
            dir.path(),
            &format!("capabilities = {{ fs = \"{grant}\" }}"),
            "true",
        );
        let out = check_with_roots(&path, roots);
        assert_eq!(out.status.code(), Some(2), "{grant}: {}", stderr(&out));
        let report = json(&out);
        let error = &report["errors"][0];
        assert_eq!(error["code"], "bad-grant", "{grant}: {report}");
        assert_eq!(error["node"], "say", "{grant}: {report}");
        let message = error["message"].as_str().unwrap();
        assert!(message.contains(rule), "{grant}: {message}");
    }

    for (grant, roots) in [
        ("data", None),
        ("./data/.", None),
        (outside.as_str(), Some(outside.as_str())),
    ] {
        let path = scenario_with(
            dir.path(),
            &format!("capabilities = {{ fs = \"{grant}\" }}"),
            "true",
        );
        let out = check_with_roots(&path, roots);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{grant}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
}

/// `host check` folds constant expressions when it loads a scenario: one
/// that would build gigabytes is stopped by the expression budget and
/// reported as `cel-budget`, naming the expression.
#[test]
fn check_stops_a_constant_that_would_build_gigabytes() {
    let dir = tempfile::tempdir().unwrap();
    let doubling = format!("size('a'{}) > 0", ".replace('a', 'aa')".repeat(40));
    let path = scenario_with(dir.path(), "", &doubling);
    let out = check_with_roots(&path, None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let report = json(&out);
    let error = &report["errors"][0];
    assert_eq!(error["code"], "cel-budget", "{report}");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("over the expression budget"), "{message}");
    assert!(message.contains("size('a'.replace"), "{message}");
}

/// A guard over the budget at run time fails the run with an error naming
/// the node and the expression; the process ends normally (exit 1) and the
/// failure is in the run's history.
#[test]
fn a_guard_over_the_budget_fails_the_run_naming_node_and_expression() {
    let dir = tempfile::tempdir().unwrap();
    let guard = "size(state.said) > 0 && lists.range(1000).exists(x, lists.range(1000000).exists(y, y < 0))";
    let path = scenario_with(dir.path(), "", guard);
    let out = host(dir.path(), &["run", path.to_str().unwrap(), "--json"], None);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "failed", "{outcome}");
    let message = outcome["failure"]["message"].as_str().unwrap();
    assert!(message.contains("node `say`"), "{message}");
    assert!(message.contains(guard), "{message}");
    assert!(message.contains("over the expression budget"), "{message}");
    let run = outcome["run_id"].as_str().unwrap();
    let shown = host(dir.path(), &["runs", "show", run, "--json"], None);
    assert!(shown.status.success(), "{}", stderr(&shown));
    assert_eq!(json(&shown)["status"], "failed");
}
