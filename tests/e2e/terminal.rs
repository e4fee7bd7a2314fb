//! What a run's skills write never reaches the terminal raw: `host run`,
//! `host runs show` and `host skill call` print a skill's output and its
//! error messages with every escape sequence, carriage return, bell and
//! other control character written as a visible `\u{..}` escape, so a skill
//! can neither clear the screen, plant a hyperlink, nor forge a line of the
//! host's own (`error: …`, `run … completed`). `--json` stays exact JSON.
//! The skill is the `adversary` fixture: `e…` echoes its text (the `e`
//! included), `E…` fails with the rest of its text as the error's message.

use std::path::Path;

use serde_json::json;
use std::process::Output;

use skillhost_tests::cli::{json, stderr};

const SCENARIO: &str = r#"[scenario]
name = "terminal"

[input]
text = { type = "string" }

[state]
echoed = { type = "string", default = "" }

[skills.adversary]
component = "adversary.wasm"

[[node]]
id = "say"
skill = "adversary"
input = { text = "input.text" }
capabilities = { fs = "." }
writes = [{ field = "echoed", from = "output.text" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "say"
to = "done"

[summary]
echoed = "state.echoed"
"#;

/// A text that would, printed raw: clear the screen, plant a hyperlink,
/// ring the bell, move the cursor back to the line's start and write a
/// line of the host's own over it, then one more on a line of its own.
const HOSTILE: &str = "\u{1b}[2J\u{1b}]8;;https://evil.example/\u{7}click\u{1b}]8;;\u{7}\
                       \rerror: forged by the skill\n\u{1b}[1Aerror: forged again\u{9b}2K\
                       \u{202e}desrever";

fn host(dir: &Path, args: &[&str]) -> Output {
    skillhost_tests::cli::host(dir, args, None)
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn scenario(dir: &Path) -> String {
    std::fs::write(
        dir.join("adversary.wasm"),
        skillhost_tests::fixture_component("adversary"),
    )
    .unwrap();
    let path = dir.join("terminal.toml");
    std::fs::write(&path, SCENARIO).unwrap();
    path.display().to_string()
}

/// No character a terminal obeys (but new lines and tabs), and no line
/// that a skill wrote passing for one of the host's: every line the skill
/// tried to forge is absent, and the escapes that replaced its control
/// characters are visible.
fn assert_safe(what: &str, text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| {
            (c.is_control() && c != '\n' && c != '\t') || ('\u{202a}'..='\u{202e}').contains(&c)
        })
        .collect();
    assert!(raw.is_empty(), "{what} holds raw {raw:?}: {text:?}");
    for line in text.lines() {
        assert!(
            !line.trim_start().starts_with("error: forged"),
            "{what} holds a forged line {line:?}: {text:?}"
        );
    }
}

#[test]
fn host_run_shows_a_skills_output_and_errors_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let file = scenario(dir.path());

    // The skill's output, through the state into the summary.
    let input = json!({ "text": format!("e{HOSTILE}") }).to_string();
    let out = host(dir.path(), &["run", &file, "--input", &input]);
    assert!(out.status.success(), "{}", stderr(&out));
    let (printed, progress) = (stdout(&out), stderr(&out));
    assert_safe("host run's stdout", &printed);
    assert_safe("host run's stderr", &progress);
    assert!(
        printed.contains("\\u{1b}[2J\\u{1b}]8;;https://evil.example/\\u{7}click"),
        "{printed}"
    );
    assert!(
        printed.contains("\\u{d}error: forged by the skill"),
        "{printed}"
    );
    assert!(printed.contains("\\u{9b}2K\\u{202e}desrever"), "{printed}");
    // The new line the output holds stays, indented under the value.
    assert!(
        printed.contains("\n                       \\u{1b}[1Aerror: forged again"),
        "{printed}"
    );
    // `--json` is the output exactly, as JSON escapes it.
    let out = host(dir.path(), &["run", &file, "--input", &input, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["summary"]["echoed"], format!("e{HOSTILE}"));

    // `host runs show` of that run prints its state and input escaped.
    let run_id = outcome["run_id"].as_str().unwrap().to_string();
    let out = host(dir.path(), &["runs", "show", &run_id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_safe("host runs show", &stdout(&out));

    // The skill's error message: the progress line, the failure report
    // and the exit's `error:` line.
    let input = json!({ "text": format!("E{HOSTILE}") }).to_string();
    let out = host(dir.path(), &["run", &file, "--input", &input]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let (printed, progress) = (stdout(&out), stderr(&out));
    assert_safe("a failed run's stdout", &printed);
    assert_safe("a failed run's stderr", &progress);
    assert!(
        progress.contains("\\u{d}error: forged by the skill\\u{a}\\u{1b}[1Aerror: forged again"),
        "{progress}"
    );
    let run_id = progress
        .lines()
        .find_map(|l| l.strip_prefix("run ")?.split(' ').next())
        .unwrap()
        .to_string();
    let out = host(dir.path(), &["runs", "show", &run_id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_safe("host runs show of a failed run", &stdout(&out));
}

#[test]
fn host_skill_call_shows_a_skills_error_escaped() {
    let dir = tempfile::tempdir().unwrap();
    scenario(dir.path());
    let input = json!({ "text": format!("E{HOSTILE}") }).to_string();
    let out = host(
        dir.path(),
        &["skill", "call", "adversary.wasm", "--input", &input],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stderr(&out);
    assert_safe("host skill call's stderr", &text);
    assert!(
        text.contains("\\u{d}error: forged by the skill\\u{a}\\u{1b}[1Aerror: forged again"),
        "{text}"
    );
    // `--json` keeps the message exact.
    let out = host(
        dir.path(),
        &[
            "skill",
            "call",
            "adversary.wasm",
            "--input",
            &input,
            "--json",
        ],
    );
    let message = json(&out)["error"]["message"].as_str().unwrap().to_string();
    assert!(message.ends_with(HOSTILE), "{message:?}");
}
