//! `examples/router` through the real binary: a request read by the C
//! skill `router-intent`'s keyword rules goes to exactly one workflow, run
//! as a child run whose artifact becomes the router's (`keep_artifacts`);
//! requests that match no workflow, are ambiguous or lack their argument
//! end at `no_match`; a crash inside the child or between the child's end
//! and the router's own checkpoint resumes to the same artifact.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use skillhost_tests::cli::{host_in_repo as host, json, killed_and_resumed_match, stderr};

const RESEARCH: &str = "find papers on retrieval augmented generation";

/// `host run router --input {"request": …} --json`, with `--out FILE` when
/// given (from the repository's root, so `router` is examples/router).
fn route(dir: &Path, request: &str, out: Option<&Path>) -> Output {
    let input = json!({ "request": request }).to_string();
    let mut args = vec!["run", "router", "--input", &input, "--json"];
    if let Some(out) = out {
        args.extend(["--out", out.to_str().unwrap()]);
    }
    host(dir, &args, None)
}

/// `host run SCENARIO --input INPUT --out FILE`: the file's bytes.
fn direct(dir: &Path, scenario: &str, input: &Value) -> Vec<u8> {
    let file = dir.join(format!("{scenario}-direct.out"));
    let input = input.to_string();
    let out = host(
        dir,
        &[
            "run",
            scenario,
            "--input",
            &input,
            "--out",
            file.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{scenario}: {}", stderr(&out));
    std::fs::read(file).unwrap()
}

/// Routes `request`, checks it went to `scenario` as one completed child
/// run, and returns the artifact it wrote and the run's outcome.
fn routed(dir: &Path, request: &str, scenario: &str) -> (Vec<u8>, Value) {
    let file = dir.join(format!("{scenario}-routed.out"));
    let out = route(dir, request, Some(&file));
    assert!(out.status.success(), "{request}: {}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "completed", "{outcome}");
    let summary = &outcome["summary"];
    assert_eq!(summary["scenario"], scenario, "{outcome}");
    let child = summary["child_run"].as_str().unwrap().to_string();

    // The child is a run of the workflow's own scenario, linked to the
    // router's node; nothing else ran.
    let show = host(dir, &["runs", "show", &child, "--json"], None);
    assert!(show.status.success(), "{}", stderr(&show));
    let child_run = json(&show);
    assert_eq!(child_run["scenario"], scenario, "{child_run}");
    assert_eq!(child_run["status"], "completed");
    let router_id = outcome["run_id"].as_str().unwrap();
    let show = host(dir, &["runs", "show", router_id, "--json"], None);
    let router = json(&show);
    let nodes: Vec<&str> = router["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["node"].as_str().unwrap())
        .collect();
    assert_eq!(nodes, ["parse_intent", "route", scenario], "{router}");
    (std::fs::read(file).unwrap(), outcome)
}

#[test]
fn a_research_request_runs_the_research_workflow_and_hands_its_report_over() {
    let dir = tempfile::tempdir().unwrap();
    let (report, outcome) = routed(dir.path(), RESEARCH, "research");
    let summary = &outcome["summary"];
    assert_eq!(summary["matched"], json!(["papers", "find"]));
    assert_eq!(summary["confidence"], 0.75);
    assert_eq!(summary["result"]["papers_found"], 8, "{summary}");
    assert_eq!(
        outcome["state"]["intent"]["query"],
        "retrieval augmented generation"
    );
    // The report is the one the research workflow writes by itself.
    let expected = direct(
        dir.path(),
        "research",
        &json!({ "query": "retrieval augmented generation" }),
    );
    assert!(
        report == expected,
        "the routed report differs from `host run research`'s"
    );
}

#[test]
fn summary_slides_and_chat_requests_reach_their_workflows() {
    let dir = tempfile::tempdir().unwrap();
    let (summary, outcome) = routed(dir.path(), "Summarise the corpus folder", "summary");
    assert_eq!(outcome["state"]["intent"]["folder"], "corpus");
    assert!(
        summary == direct(dir.path(), "summary", &json!({ "dir": "corpus" })),
        "the routed summary differs from `host run summary`'s"
    );

    let (deck, _) = routed(dir.path(), "make slides from the talk folder", "ppt");
    assert!(
        deck == direct(dir.path(), "ppt", &json!({ "dir": "talk" })),
        "the routed deck differs from `host run ppt`'s"
    );

    let (reply, outcome) = routed(dir.path(), "what is (2 + 3) * 4.5?", "chat");
    assert_eq!(
        String::from_utf8(reply).unwrap().trim(),
        "(2 + 3) * 4.5 = 22.5"
    );
    assert_eq!(outcome["summary"]["result"]["tool"], "calculate");
    assert_eq!(
        outcome["summary"]["matched"],
        json!(["arithmetic", "question"])
    );
}

#[test]
fn requests_no_workflow_takes_end_at_no_match_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    for (request, why) in [
        (
            "purple elephants dancing",
            "no workflow matches the request: none of the research, summary, slides or chat cues \
             is in it",
        ),
        (
            "summarise the research papers",
            "the request is ambiguous: research scored a confidence of 0.57, under the 0.6 needed",
        ),
        (
            "summarise it for me",
            "the summary request names no folder: say which, e.g. \"summarise the corpus folder\"",
        ),
        (
            "make slides about owls",
            "the slides request names no folder: say which, e.g. \"make slides from the talk folder\"",
        ),
        (
            "research it",
            "the research request names no topic of at least 3 characters: say what to research, \
             e.g. \"find papers on transformers\"",
        ),
    ] {
        let out = route(dir.path(), request, None);
        assert_eq!(out.status.code(), Some(1), "{request}: {}", stderr(&out));
        let outcome = json(&out);
        let failure = &outcome["failure"];
        assert_eq!(failure["handler"], "no_match", "{request}: {failure}");
        assert_eq!(failure["message"], why, "{request}");
        assert_eq!(failure["suggestions"].as_array().unwrap().len(), 4);
        // No workflow ran: no child run, no routed state.
        assert_eq!(outcome["state"]["routed"], json!({}), "{request}");
        let id = outcome["run_id"].as_str().unwrap();
        let show = json(&host(dir.path(), &["runs", "show", id, "--json"], None));
        assert_eq!(show["children"], json!([]), "{request}: {show}");
    }
}

/// Killed inside the research child (in its map, and before its last
/// commit) and between the child's end and the router's checkpoint of its
/// subgraph node (the child is then read back, its report from the
/// store): `host resume` of the router writes the same report.
#[test]
fn killed_in_or_after_the_child_and_resumed_gives_the_same_report() {
    let dir = tempfile::tempdir().unwrap();
    let input = json!({ "request": RESEARCH }).to_string();
    let killed = killed_and_resumed_match(
        dir.path(),
        &["run", "router", "--input", &input],
        &[
            "map-item:paper_summarize:2",
            "before-commit:report_writer",
            "before-commit:research",
        ],
    );
    for (point, id) in killed {
        let show = json(&host(dir.path(), &["runs", "show", &id, "--json"], None));
        assert_eq!(show["status"], "completed", "{point}: {show}");
        assert_eq!(
            show["children"].as_array().unwrap().len(),
            1,
            "{point}: one child run, resumed or read back, never started again: {show}"
        );
    }
}

#[test]
fn the_graph_holds_every_workflow_and_the_readme_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(dir.path(), &["check", "router", "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(json(&out)["warnings"], json!([]));

    let out = host(
        dir.path(),
        &["graph", "router", "--format", "mermaid"],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let graph = String::from_utf8(out.stdout).unwrap();
    for cluster in [
        "subgraph research [\"research<br/>subgraph: ../research/scenario.toml\"]",
        "subgraph summary [\"summary<br/>subgraph: ../summary/scenario.toml\"]",
        "subgraph ppt [\"ppt<br/>subgraph: ../ppt/scenario.toml\"]",
        "subgraph chat [\"chat<br/>subgraph: ../chat/scenario.toml\"]",
    ] {
        assert!(graph.contains(cluster), "{cluster} missing:\n{graph}");
    }
    // Each workflow's own nodes are inside its cluster.
    for node in [
        "research__claim_synthesis",
        "summary__key_points",
        "ppt__export",
        "chat__calculate",
    ] {
        assert!(graph.contains(node), "{node} missing:\n{graph}");
    }
    let readme =
        std::fs::read_to_string(skillhost_tests::repo_root().join("examples/router/README.md"))
            .unwrap();
    assert!(
        readme.contains(&format!("```mermaid\n{graph}```")),
        "examples/router/README.md's graph is not `host graph router --format mermaid`:\n{graph}"
    );

    let out = host(dir.path(), &["graph", "router", "--format", "dot"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let dot = String::from_utf8(out.stdout).unwrap();
    assert_eq!(dot.matches("subgraph \"cluster_").count(), 4, "{dot}");
}

/// `host skill call` of the shipped C skill: the rules, the arguments and
/// the refusals.
#[test]
fn the_c_intent_rules_score_extract_and_refuse() {
    let dir = tempfile::tempdir().unwrap();
    let component = skillhost_tests::dist("router-intent").display().to_string();
    let call = |request: &str| {
        let input = json!({ "request": request }).to_string();
        host(
            dir.path(),
            &["skill", "call", &component, "--input", &input, "--json"],
            None,
        )
    };
    let cases = [
        // request, scenario, confidence, scores, query, folder, topic
        (
            "research transformers",
            "research",
            0.67,
            json!([["research", 2]]),
            "transformers",
            "",
            "",
        ),
        (
            "Summarize the folder `notes/week-1`",
            "summary",
            0.67,
            json!([["summary", 2]]),
            "",
            "notes/week-1",
            "",
        ),
        (
            "summarise docs/corpus/",
            "summary",
            0.67,
            json!([["summary", 2]]),
            "",
            "docs/corpus",
            "",
        ),
        (
            "make a slide deck about the water cycle",
            "ppt",
            0.8,
            json!([["ppt", 4]]),
            "",
            "",
            "the water cycle",
        ),
        (
            "make slides from the talk folder",
            "ppt",
            0.75,
            json!([["ppt", 3]]),
            "",
            "talk",
            "",
        ),
        (
            "hello, read welcome.md",
            "chat",
            0.8,
            json!([["chat", 4]]),
            "",
            "",
            "",
        ),
        (
            "fetch https://example.com/ please",
            "chat",
            0.67,
            json!([["chat", 2]]),
            "",
            "",
            "",
        ),
        ("purple elephants", "none", 0.0, json!([]), "", "", ""),
    ];
    for (request, scenario, confidence, scores, query, folder, topic) in cases {
        let out = call(request);
        assert!(out.status.success(), "{request}: {}", stderr(&out));
        let output = json(&out);
        let output = &output["output"];
        assert_eq!(output["scenario"], scenario, "{request}: {output}");
        assert_eq!(output["confidence"], confidence, "{request}: {output}");
        assert_eq!(output["scores"], scores, "{request}: {output}");
        assert_eq!(output["query"], query, "{request}: {output}");
        assert_eq!(output["folder"], folder, "{request}: {output}");
        assert_eq!(output["topic"], topic, "{request}: {output}");
        assert_eq!(output["message"], request.trim(), "{request}");
    }

    for (request, message) in [
        (
            "   ".to_string(),
            "the request is empty: say what you want, e.g. \"find papers on transformers\"",
        ),
        (
            "é".repeat(10_001),
            "the request has 10001 characters, over the 10000 allowed",
        ),
    ] {
        let out = call(&request);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        let report = json(&out);
        assert_eq!(report["error"]["code"], "invalid-input", "{report}");
        let said = report["error"]["message"].as_str().unwrap();
        assert!(said.ends_with(&format!(": {message}")), "{said}");
    }
}
