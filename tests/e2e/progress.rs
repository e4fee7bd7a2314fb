//! `host run`'s progress on stderr: one line per finished node when stderr
//! is a file or a pipe (logs, CI), and one live line redrawn in place on a
//! terminal, here a real pseudo-terminal from util-linux's `script`.

use std::path::{Path, PathBuf};
use std::process::Command;

use skillhost_tests::cli::{host_bin, host_command, stderr};

const STEPS: usize = 200;

/// A gate that loops back `STEPS` times, then the end.
fn loop_scenario(dir: &Path) -> PathBuf {
    let path = dir.join("loop.toml");
    let text = format!(
        r#"[scenario]
name = "loop"

[state]
round = {{ type = "integer", default = 0 }}

[[node]]
id = "step"
kind = "gate"
max_visits = {STEPS}
writes = [{{ field = "round", from = "state.round + 1" }}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "step"
branches = [{{ when = "state.round < {STEPS}", to = "step" }}, {{ else = "done" }}]
"#
    );
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_line_per_node_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = loop_scenario(dir.path());
    let out = host_command(
        dir.path(),
        &["run", scenario.to_str().unwrap(), "--durability", "none"],
        None,
    )
    .output()
    .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let steps = err
        .lines()
        .filter(|l| l.starts_with("  ok    step "))
        .count();
    assert_eq!(steps, STEPS, "{err}");
    assert!(
        err.lines().any(|l| l.starts_with("running loop (run ")),
        "{err}"
    );
    assert!(!err.contains('\r') && !err.contains('\u{1b}'), "{err}");
}

#[test]
fn one_live_line_on_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = loop_scenario(dir.path());
    let shown = run_on_a_terminal(dir.path(), &scenario);
    assert!(shown.contains("running loop (run "), "{shown}");
    assert!(
        !shown.contains("  ok    step"),
        "a line per node on a terminal:\n{shown}"
    );
    assert!(shown.contains(" step "), "no live line:\n{shown}");
    let lines = shown.lines().count();
    assert!(lines < 30, "{lines} lines for {STEPS} steps:\n{shown}");
}

/// `host run SCENARIO --durability none` in `dir` on a pseudo-terminal
/// (util-linux's `script`), with the tests' environment; what the terminal
/// showed, stdout and stderr together. Fails the test if the run did.
pub(crate) fn run_on_a_terminal(dir: &std::path::Path, scenario: &std::path::Path) -> String {
    let host = host_command(dir, &[], None);
    let line = format!(
        "{} run {} --durability none",
        host_bin().display(),
        scenario.display()
    );
    let mut script = Command::new("script");
    script.args(["-qec", &line, "/dev/null"]);
    for (key, value) in host.get_envs() {
        match value {
            Some(value) => script.env(key, value),
            None => script.env_remove(key),
        };
    }
    let out = script
        .output()
        .expect("util-linux's `script` (apt-get install -y bsdutils)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}
