//! The engine's failure codes, as docs/scenarios.md lists them and as the
//! examples and the docs use them: a guard that compares a failure's `code`
//! with a name no failure has would never match, silently.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use skillhost_engine::FailureCode;
use skillhost_runtime::CallError;
use skillhost_tests::repo_root;

/// The codes of the table under `### Failure codes` in docs/scenarios.md.
fn documented_codes() -> Vec<String> {
    let path = repo_root().join("docs/scenarios.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let section = text
        .split("\n### Failure codes\n")
        .nth(1)
        .expect("docs/scenarios.md has a `### Failure codes` section");
    let section = section.split("\n#").next().unwrap();
    section
        .lines()
        .filter_map(|line| line.strip_prefix("| `"))
        .map(|row| row.split('`').next().unwrap().to_owned())
        .collect()
}

#[test]
fn the_docs_list_every_failure_code_once_in_the_enums_order() {
    let engine: Vec<&str> = FailureCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(documented_codes(), engine);
}

/// Every file under `dir` (recursively) whose name ends in one of `exts`.
fn files(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files(&path, exts, out);
        } else if exts
            .iter()
            .any(|ext| path.extension().is_some_and(|e| e == *ext))
        {
            out.push(path);
        }
    }
}

/// The quoted names a text compares a `code` with: `….code == 'x'`,
/// `….code != "x"`, `'x' == ….code`.
fn compared_codes(text: &str) -> Vec<String> {
    let quoted = |s: &str| -> Option<String> {
        let quote = s.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        let rest = &s[1..];
        let end = rest.find(quote)?;
        Some(rest[..end].to_owned())
    };
    let mut found = Vec::new();
    for (at, _) in text.match_indices(".code") {
        let after = text[at + ".code".len()..].trim_start();
        if let Some(rhs) = after
            .strip_prefix("==")
            .or_else(|| after.strip_prefix("!="))
            .and_then(|rest| quoted(rest.trim_start()))
        {
            found.push(rhs);
        }
    }
    for op in ["==", "!="] {
        for (at, _) in text.match_indices(op) {
            let after = text[at + op.len()..].trim_start();
            let operand_is_code = after
                .split(|c: char| c.is_whitespace() || c == ')' || c == '?' || c == '&')
                .next()
                .is_some_and(|operand| operand.ends_with(".code"));
            if !operand_is_code {
                continue;
            }
            let before = text[..at].trim_end();
            let Some(close) = before.chars().last().filter(|c| *c == '\'' || *c == '"') else {
                continue;
            };
            let inner = &before[..before.len() - 1];
            if let Some(open) = inner.rfind(close) {
                found.push(inner[open + 1..].to_owned());
            }
        }
    }
    found
}

/// The codes a scenario file defines itself (`code = "…"` of its rules and
/// fail nodes).
fn defined_codes(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("code"))
        .filter_map(|rest| rest.trim_start().strip_prefix('='))
        .filter_map(|value| value.trim().strip_prefix('"'))
        .filter_map(|value| value.split('"').next())
        .map(str::to_owned)
        .collect()
}

#[test]
fn examples_and_docs_compare_codes_only_with_codes_the_host_gives() {
    let root = repo_root();
    let mut paths = vec![root.join("README.md")];
    files(&root.join("examples"), &["toml", "md"], &mut paths);
    files(&root.join("docs"), &["md"], &mut paths);
    let known: BTreeSet<&str> = FailureCode::ALL
        .iter()
        .map(|c| c.as_str())
        .chain(CallError::KINDS.iter().copied())
        .collect();
    let mut compared = 0;
    let mut unknown = Vec::new();
    for path in &paths {
        let text = std::fs::read_to_string(path).unwrap();
        let own = defined_codes(&text);
        for code in compared_codes(&text) {
            compared += 1;
            if !known.contains(code.as_str()) && !own.contains(&code) {
                unknown.push(format!("{}: `{code}`", path.display()));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "codes no failure has (see docs/scenarios.md, \"Failure codes\"): {unknown:#?}"
    );
    // The examples do compare (analytics' fail message), and so does the
    // doc's own example: the scan is not looking at nothing.
    assert!(compared >= 3, "only {compared} comparisons found");
}

#[test]
fn the_scan_finds_comparisons_both_ways_round() {
    assert_eq!(
        compared_codes("state.errors[0].code == 'no-route' && 'x-y' != e.code"),
        ["no-route", "x-y"]
    );
    assert_eq!(
        compared_codes("e.code ==\n\"max-visits-exceeded\""),
        ["max-visits-exceeded"]
    );
    assert!(compared_codes("state.code_count == 'a'").is_empty());
}
