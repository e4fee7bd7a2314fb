//! The main job, end to end through the real `host` binary: the research
//! scenario on the embedded default (SQLite), its failure handler, the
//! citation checks against a deliberately bad synthesis skill, and a kill and
//! resume that must reproduce the report byte for byte.

use std::path::{Path, PathBuf};

use serde_json::json;

use skillhost_tests::cli::{
    host_command, host_in_repo as host, json, killed_and_resumed_match, run_to_completion, stderr,
};
use skillhost_tests::repo_root;

const QUERY: &str = r#"{"query": "retrieval augmented generation"}"#;

#[test]
fn research_produces_a_fully_cited_report() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report.md");
    let outcome = run_to_completion(dir.path(), "research", QUERY, &report);
    let state = &outcome["state"];
    let papers = state["valid_papers"].as_array().unwrap();
    assert!(papers.len() >= 3);
    let ids: Vec<&str> = papers.iter().map(|p| p["id"].as_str().unwrap()).collect();

    // Every claim cites papers that were found and quotes them verbatim.
    let claims = state["claims"].as_array().unwrap();
    assert!(!claims.is_empty());
    let mut quotes = 0;
    for claim in claims {
        let cited = claim["supporting_paper_ids"].as_array().unwrap();
        assert!(!cited.is_empty(), "uncited claim {claim}");
        for id in cited {
            assert!(
                ids.contains(&id.as_str().unwrap()),
                "claim cites unknown {id}"
            );
        }
        quotes += claim["evidence"].as_array().unwrap().len();
    }
    // Every quote was verified, with offsets into the cited abstract.
    let citations = state["citations"].as_array().unwrap();
    assert_eq!(citations.len(), quotes);
    for c in citations {
        let source = papers
            .iter()
            .find(|p| p["id"] == c["source_id"])
            .expect("a verified quote names a source that was found");
        let abstract_text: Vec<char> = source["abstract"].as_str().unwrap().chars().collect();
        let (start, end) = (
            c["start"].as_u64().unwrap() as usize,
            c["end"].as_u64().unwrap() as usize,
        );
        let found: String = abstract_text[start..end].iter().collect();
        assert_eq!(found, c["matched"].as_str().unwrap());
    }
    assert_eq!(outcome["summary"]["citations_verified"], json!(quotes));

    // The report is written where asked, and stored as an artifact of the run.
    let markdown = std::fs::read_to_string(&report).unwrap();
    assert!(markdown.starts_with("# "), "{markdown}");
    assert!(markdown.contains("## References"), "{markdown}");
    assert!(markdown.contains("[1]"));
    let id = outcome["run_id"].as_str().unwrap();
    let shown = json(&host(dir.path(), &["runs", "show", id, "--json"], None));
    assert_eq!(shown["artifacts"][0]["name"], "report.md");
    assert_eq!(shown["artifacts"][0]["size"], json!(markdown.len()));
    let nodes: Vec<&str> = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node"].as_str().unwrap())
        .collect();
    assert_eq!(
        nodes,
        [
            "paper_discovery",
            "discovery_validation",
            "paper_summarize",
            "paper_compare",
            "claim_synthesis",
            "report_writer"
        ]
    );
    // The synthesis step keeps the verified quotes with their offsets.
    let synthesis = &shown["steps"][4];
    assert_eq!(
        synthesis["detail"]["verified_quotes"]
            .as_array()
            .unwrap()
            .len(),
        quotes
    );
}

#[test]
fn too_few_papers_end_in_the_failure_handler() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(
        dir.path(),
        &[
            "run",
            "research",
            "--input",
            r#"{"query": "zebrafish husbandry"}"#,
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("at least 3 are needed"), "{err}");
    assert!(err.contains("Broaden the query"), "{err}");
    assert!(err.contains("Use fewer specific terms"), "{err}");
    let runs = json(&host(dir.path(), &["runs", "list", "--json"], None));
    assert_eq!(runs[0]["status"], "failed");
    let shown = json(&host(
        dir.path(),
        &["runs", "show", runs[0]["id"].as_str().unwrap(), "--json"],
        None,
    ));
    assert_eq!(shown["error"]["node"], "discovery_validation");
    assert_eq!(shown["error"]["handler"], "failure_handler");
    assert_eq!(shown["error"]["suggestions"].as_array().unwrap().len(), 3);
}

/// The research scenario with `claim_synthesis` run by the bad-synthesis
/// fixture in `mode`.
fn bad_synthesis_scenario(dir: &Path, mode: &str) -> PathBuf {
    let research = repo_root().join("examples/research");
    let text = std::fs::read_to_string(research.join("scenario.toml")).unwrap();
    let dist = repo_root().join("skills/dist");
    let text = text
        .replace("../../skills/dist/", &format!("{}/", dist.display()))
        .replace(
            "claim-synthesis.wasm",
            "bad-synthesis.wasm",
        )
        .replace(
            r#"fs = "corpus""#,
            &format!("fs = {:?}", research.join("corpus").display().to_string()),
        )
        .replace(
            r#"input = { query = "input.query", papers = "state.valid_papers", summaries = "state.summaries" }"#,
            &format!(
                r#"input = {{ query = "input.query", papers = "state.valid_papers", summaries = "state.summaries", mode = "'{mode}'" }}"#
            ),
        );
    assert!(text.contains("bad-synthesis.wasm") && text.contains(mode));
    let path = dir.join(format!("research-{mode}.toml"));
    std::fs::write(&path, text).unwrap();
    path
}

fn synthesis_fails(mode: &str, expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let scenario = bad_synthesis_scenario(dir.path(), mode);
    // The copy grants the shipped corpus by its absolute path, which a
    // scenario may only do under a root the host allows.
    let out = host_command(
        dir.path(),
        &[
            "run",
            scenario.to_str().unwrap(),
            "--input",
            QUERY,
            "--json",
        ],
        None,
    )
    .current_dir(repo_root())
    .env("SKILLHOST_FS_ROOTS", repo_root().join("examples/research"))
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "failed");
    let error = &outcome["state"]["errors"][0];
    assert_eq!(error["node"], "claim_synthesis");
    assert_eq!(error["code"], "citation-check-failed");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("C1"),
        "the error names the claim: {message}"
    );
    assert!(message.contains(expect), "{message}");
    // Nothing the bad skill produced reached the state.
    assert_eq!(outcome["state"]["claims"], json!([]));
    assert!(outcome["failure"]["partial_results"]["summaries"].is_array());
}

#[test]
fn an_uncited_claim_fails_at_synthesis() {
    synthesis_fails("uncited", "cites");
}

#[test]
fn a_claim_citing_an_unknown_paper_fails_at_synthesis() {
    synthesis_fails("unknown-id", "P-DOES-NOT-EXIST");
}

#[test]
fn a_fabricated_quote_fails_at_synthesis() {
    synthesis_fails("fabricated-quote", "quote");
}

#[test]
fn killed_mid_run_and_resumed_gives_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    killed_and_resumed_match(
        dir.path(),
        &["run", "research", "--input", QUERY],
        &[
            "map-item:paper_summarize:2",
            "in-commit:claim_synthesis",
            "before-commit:report_writer",
        ],
    );
}
