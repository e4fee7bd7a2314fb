//! The `research-llm` example's parts that need no model: its corpus, a copy
//! of one file of the research corpus that must not drift from it, and the
//! shipped `paper-summarize-llm` component through the real binary (its
//! manifest and schemas, and the calls that end before or at the model).

use std::path::Path;

use serde_json::{Value, json};

use skillhost_tests::cli::{host, json, stderr};

fn paper(abstract_: &str) -> String {
    json!({ "paper": {
        "id": "rag-0001", "title": "FuseFormer", "authors": ["José Costa"],
        "abstract": abstract_, "url": "https://papers.example.org/rag-0001",
        "source": "arXiv", "published": "2025-07-01", "year": 2025,
        "topics": ["retrieval-augmented-generation"], "score": 1.5,
        "valid": true, "issues": [],
    }})
    .to_string()
}

fn component() -> String {
    skillhost_tests::dist("paper-summarize-llm")
        .display()
        .to_string()
}

/// Calls the component with `input` and no grant; returns the `--json` report.
fn call(dir: &Path, input: &str) -> Value {
    let out = host(
        dir,
        &["skill", "call", &component(), "--input", input, "--json"],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    json(&out)
}

#[test]
fn the_corpus_is_the_research_corpus_file_unchanged() {
    let root = skillhost_tests::repo_root();
    let file = "retrieval-augmented-generation.jsonl";
    let copy = std::fs::read(root.join("examples/research-llm/corpus").join(file)).unwrap();
    let original = std::fs::read(root.join("examples/research/corpus").join(file)).unwrap();
    assert!(
        copy == original,
        "examples/research-llm/corpus/{file} differs from examples/research/corpus/{file}: copy it again"
    );
    let files = std::fs::read_dir(root.join("examples/research-llm/corpus"))
        .unwrap()
        .count();
    assert_eq!(files, 1, "the example's corpus is that one file");
}

#[test]
fn inspect_shows_the_llm_capability_retries_and_the_quotes() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(
        dir.path(),
        &["skill", "inspect", &component(), "--json"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let inspected = json(&out);
    assert_eq!(inspected["name"], "paper-summarize-llm");
    assert_eq!(inspected["declared_capabilities"], json!(["llm", "log"]));
    assert_eq!(inspected["retry"]["max_attempts"], 3);
    assert!(
        inspected["imports"]
            .as_array()
            .unwrap()
            .contains(&json!("skillhost:skill/llm@0.1.0"))
    );
    let output = &inspected["output_schema"]["properties"];
    for field in [
        "paper_id",
        "title",
        "main_contributions",
        "methodology",
        "key_findings",
        "limitations",
        "quotes",
    ] {
        assert!(output.get(field).is_some(), "no `{field}` in {output}");
    }
}

#[test]
fn without_a_grant_the_model_call_is_denied_and_names_the_paper() {
    let dir = tempfile::tempdir().unwrap();
    let report = call(dir.path(), &paper("We propose FuseFormer. It works."));
    let error = &report["error"];
    assert_eq!(error["code"], "capability-denied", "{report}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("summarising paper `rag-0001`"),
        "{message}"
    );
}

#[test]
fn an_empty_abstract_fails_before_the_model_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let report = call(dir.path(), &paper(" \n"));
    let error = &report["error"];
    assert_eq!(error["code"], "invalid-input", "{report}");
    assert_eq!(error["retryable"], false);
    assert!(
        error["message"].as_str().unwrap().contains("rag-0001"),
        "{report}"
    );
}
