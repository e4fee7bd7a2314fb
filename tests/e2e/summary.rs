//! The summary workflow end to end through the real `host` binary:
//! ingestion of text, Markdown and HTML from a granted folder, chunking by
//! the C skill, key points per chunk (a map node), and a summary whose every
//! sentence cites its chunk, with every quote verified by the citation
//! check; a quote tampered on its way to the writer failing that check; a
//! folder with too little text ending in its fail node; a kill at several
//! points then `host resume` giving the same summary byte for byte; the
//! shipped C component being what its source builds to; and the LLM
//! variant (`llm.toml`) against the fake model provider, whose quotes the
//! citation check verifies or refuses.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};
use skillhost_tests::cli::{
    example_checks_and_readme_shows_its_graph, host_command, host_in_repo, json,
    killed_and_resumed_match, run_to_completion, shipped_skill_is_what_its_source_builds_to,
    stderr,
};
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply, ReceivedRequest};

const CORPUS: &str = r#"{"dir": "corpus"}"#;

/// `host` run from the repository's root, so `summary` names the example.
fn host(dir: &Path, args: &[&str]) -> Output {
    host_in_repo(dir, args, None)
}

/// `text`'s characters from `start` to `end` (Unicode scalar values, the
/// unit of the chunks' and the citation check's offsets).
fn chars(text: &str, start: &Value, end: &Value) -> String {
    let (start, end) = (
        start.as_u64().unwrap() as usize,
        end.as_u64().unwrap() as usize,
    );
    text.chars().skip(start).take(end - start).collect()
}

#[test]
fn the_summary_cites_a_chunk_for_every_sentence_and_every_quote_verifies() {
    let dir = tempfile::tempdir().unwrap();
    let summary = dir.path().join("summary.md");
    let outcome = run_to_completion(dir.path(), "summary", CORPUS, &summary);
    let state = &outcome["state"];

    // Ingestion: the three formats, by file name; the CSV file left out;
    // HTML reduced to its text (no tags, no script, entities decoded).
    let documents = state["documents"].as_array().unwrap();
    let sources: Vec<(&str, &str)> = documents
        .iter()
        .map(|d| (d["source"].as_str().unwrap(), d["format"].as_str().unwrap()))
        .collect();
    assert_eq!(
        sources,
        [
            ("rivers-and-deltas.md", "markdown"),
            ("water-cycle.txt", "text"),
            ("wetlands.html", "html")
        ]
    );
    assert_eq!(state["skipped"], json!(["measurements.csv"]));
    let html = documents[2]["text"].as_str().unwrap();
    assert!(
        html.starts_with("Why wetlands matter\n\nA wetland is land"),
        "{html}"
    );
    assert!(html.contains(
        "nitrogen & phosphorus before these reach rivers and the sea \u{2014} a service"
    ));
    for gone in ["<", "script text", "font-family", "The next paragraph"] {
        assert!(!html.contains(gone), "{gone:?} in {html}");
    }
    let markdown = documents[0]["text"].as_str().unwrap();
    assert!(
        markdown.starts_with("Rivers and deltas\n\nA river is"),
        "{markdown}"
    );
    assert!(
        !markdown.contains("**") && !markdown.contains("# "),
        "{markdown}"
    );

    // Chunking: every chunk is its document's text between its offsets.
    let chunks = state["chunks"].as_array().unwrap();
    assert!(chunks.len() >= documents.len(), "{chunks:?}");
    for chunk in chunks {
        let document = documents
            .iter()
            .find(|d| d["source"] == chunk["source"])
            .expect("a chunk names a document");
        assert_eq!(
            chars(
                document["text"].as_str().unwrap(),
                &chunk["start"],
                &chunk["end"]
            ),
            chunk["text"].as_str().unwrap(),
            "{}",
            chunk["id"]
        );
        assert!(chunk["text"].as_str().unwrap().chars().count() <= 800);
    }
    // One key-point result per chunk, each point a sentence of its chunk.
    let keypoints = state["keypoints"].as_array().unwrap();
    assert_eq!(keypoints.len(), chunks.len());
    for (result, chunk) in keypoints.iter().zip(chunks) {
        assert_eq!(result["chunk_id"], chunk["id"]);
        for point in result["points"].as_array().unwrap() {
            let text = chunk["text"].as_str().unwrap();
            assert_eq!(
                chars(text, &point["start"], &point["end"]),
                point["quote"].as_str().unwrap()
            );
            assert!(!point["rules"].as_array().unwrap().is_empty());
        }
    }

    // The summary: every sentence cites chunks that exist and quotes each.
    let ids: Vec<&Value> = chunks.iter().map(|c| &c["id"]).collect();
    let sentences = state["summary"]["sentences"].as_array().unwrap();
    assert_eq!(sentences.len(), 6);
    let mut quotes = 0;
    for sentence in sentences {
        let cited = sentence["chunk_ids"].as_array().unwrap();
        assert!(!cited.is_empty(), "uncited {sentence}");
        assert!(cited.iter().all(|id| ids.contains(&id)), "{sentence}");
        quotes += sentence["quotes"].as_array().unwrap().len();
    }
    // Every document is heard.
    for document in documents {
        let source = document["source"].as_str().unwrap();
        assert!(
            sentences
                .iter()
                .any(|s| s["chunk_ids"][0].as_str().unwrap().starts_with(source)),
            "no sentence from {source}"
        );
    }
    // Every quote was verified by the host, with offsets in the chunk.
    let citations = state["citations"].as_array().unwrap();
    assert_eq!(citations.len(), quotes);
    for c in citations {
        let chunk = chunks.iter().find(|k| k["id"] == c["source_id"]).unwrap();
        let matched = chars(chunk["text"].as_str().unwrap(), &c["start"], &c["end"]);
        assert_eq!(matched, c["matched"].as_str().unwrap());
        assert_eq!(matched, c["quote"].as_str().unwrap());
    }
    assert_eq!(outcome["summary"]["citations_verified"], json!(quotes));

    // The C skill's step is costed like the others in `runs show`.
    let run_id = outcome["run_id"].as_str().unwrap();
    let shown = json(&host(dir.path(), &["runs", "show", run_id, "--json"]));
    let chunk_step = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["node"] == "chunk")
        .unwrap();
    assert_eq!(chunk_step["status"], "ok");
    assert!(
        chunk_step["fuel_consumed"].as_u64().unwrap() > 0,
        "{chunk_step}"
    );
    assert_eq!(
        chunk_step["detail"]["logs"][0]["message"],
        "summary-chunk: 3 document(s), 6 chunk(s) of at most 800 characters"
    );

    // The artifact says each sentence with its numbered source.
    let written = std::fs::read_to_string(&summary).unwrap();
    assert!(written.starts_with("# Summary: corpus\n\n"), "{written}");
    for sentence in sentences {
        assert!(
            written.contains(sentence["text"].as_str().unwrap()),
            "{written}"
        );
    }
    assert!(
        written.contains("[1] `rivers-and-deltas.md#1`: `rivers-and-deltas.md`, characters 0-")
    );
    assert!(
        written.ends_with("\n6 quote(s), each verified verbatim against the chunk it cites.\n")
    );
}

#[test]
fn too_little_content_ends_in_its_fail_node_with_the_count() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(
        dir.path(),
        &[
            "run",
            "summary",
            "--input",
            r#"{"dir": "too-short"}"#,
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "failed");
    let failure = &outcome["failure"];
    assert_eq!(failure["node"], "enough_content", "{failure}");
    assert_eq!(failure["handler"], "too_little_content", "{failure}");
    assert_eq!(
        failure["message"],
        "`too-short` holds 23 character(s) of text in 1 document(s); at least 400 are needed to summarise"
    );
    assert_eq!(failure["suggestions"].as_array().unwrap().len(), 2);
    // Nothing was chunked or summarised.
    assert_eq!(outcome["state"]["chunks"], json!([]));
}

/// The summary scenario, copied to `dir` with its paths made absolute and
/// every key point's quote altered on its way to the writer (one word
/// changed), as a writer that misquotes would.
fn tampered_scenario(dir: &Path) -> PathBuf {
    let example = skillhost_tests::repo_root().join("examples/summary");
    let text = std::fs::read_to_string(example.join("scenario.toml")).unwrap();
    let dist = skillhost_tests::repo_root().join("skills/dist");
    let tampered = "state.keypoints.map(k, {'chunk_id': k.chunk_id, 'source': k.source, \
                    'points': k.points.map(p, {'chunk_id': p.chunk_id, 'quote': p.quote.replace('water', 'wine'), \
                    'start': p.start, 'end': p.end, 'score': p.score, 'rules': p.rules})})";
    let text = text
        .replace("../../skills/dist/", &format!("{}/", dist.display()))
        .replace(
            r#"fs = "inputs""#,
            &format!("fs = {:?}", example.join("inputs").display().to_string()),
        )
        .replace(
            r#"keypoints = "state.keypoints""#,
            &format!("keypoints = {tampered:?}"),
        );
    assert!(
        text.contains("'wine'"),
        "the scenario's input mapping changed"
    );
    let path = dir.join("summary-tampered.toml");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn a_quote_tampered_on_its_way_to_the_writer_fails_the_citation_check() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = tampered_scenario(dir.path());
    let out = host_command(
        dir.path(),
        &[
            "run",
            scenario.to_str().unwrap(),
            "--input",
            CORPUS,
            "--json",
        ],
        None,
    )
    // The copy grants the inputs by absolute path, which a scenario may
    // only do under a root the host allows.
    .env(
        "SKILLHOST_FS_ROOTS",
        skillhost_tests::repo_root().join("examples/summary"),
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "failed");
    let error = &outcome["state"]["errors"][0];
    assert_eq!(error["node"], "write_summary");
    assert_eq!(error["code"], "citation-check-failed");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("S1") && message.contains("wine"),
        "{message}"
    );
    // Nothing the writer produced reached the state.
    assert_eq!(outcome["state"]["citations"], json!([]));
    assert_eq!(outcome["state"]["summary"], json!({}));
}

#[test]
fn killed_mid_run_and_resumed_gives_the_same_summary() {
    let dir = tempfile::tempdir().unwrap();
    // After the C skill's step, inside the map over the chunks, and before
    // the summary's commit.
    killed_and_resumed_match(
        dir.path(),
        &["run", "summary", "--input", CORPUS],
        &[
            "after-commit:chunk",
            "map-item:key_points:3",
            "before-commit:write_summary",
        ],
    );
}

#[test]
fn the_scenario_passes_the_checker_and_the_readme_shows_its_graph() {
    let dir = tempfile::tempdir().unwrap();
    example_checks_and_readme_shows_its_graph(dir.path(), "summary");
}

/// The chunking skill is C, shipped built in `skills/dist` so the example
/// runs without a C toolchain; built again here from `skills/summary-chunk`,
/// it must give the same bytes.
#[test]
fn the_shipped_c_chunker_is_what_its_source_builds_to() {
    let dir = tempfile::tempdir().unwrap();
    shipped_skill_is_what_its_source_builds_to(
        dir.path(),
        "summary-chunk",
        "scripts/install-guest-toolchains.sh c",
    );
}

/// `examples/summary/llm.toml` is `scenario.toml` with exactly the key-point
/// skill, its `llm` grant and the name changed, so the two never drift.
#[test]
fn the_llm_variant_is_the_scenario_with_only_the_key_point_skill_changed() {
    skillhost_tests::assert_variant_of_scenario(
        "summary",
        "llm.toml",
        &[
            ("name = \"summary\"\n", "name = \"summary-llm\"\n"),
            ("summary-keypoints.wasm", "summary-keypoints-llm.wasm"),
            (
                "concurrency = 4\n",
                "concurrency = 4\ncapabilities = { llm = { provider = \"local\", \
                 model = \"qwen2.5:7b-instruct\", max_tokens = 512, temperature = 0 } }\n",
            ),
        ],
    );
}

/// The deterministic "model" of the LLM variant: for each chunk it is sent
/// (everything after `Text:\n` in the last message, as the skill's prompt
/// puts it), the point `quote` picks.
fn picker(
    quote: fn(&str) -> String,
) -> impl Fn(&ReceivedRequest) -> Option<FakeReply> + Send + Sync + 'static {
    move |request| {
        let text = request.last_message_after("Text:\n")?;
        let answer = json!({ "points": [{ "quote": quote(&text) }] });
        Some(FakeReply::openai_content(&answer.to_string()))
    }
}

/// Runs `examples/summary/llm.toml` on the corpus with the `local` provider
/// pointing at `server`.
fn run_with_model(dir: &Path, server: &FakeLlmServer) -> Output {
    server.configure_user(dir);
    let summary = dir.join("summary.md");
    host(
        dir,
        &[
            "run",
            "examples/summary/llm.toml",
            "--input",
            CORPUS,
            "--out",
            summary.to_str().unwrap(),
            "--json",
        ],
    )
}

#[test]
fn with_a_model_picking_the_key_points_every_quote_is_still_verified() {
    // The chunk's first sentence, verbatim.
    let server = FakeLlmServer::start_with(picker(|text| {
        let end = text.find(". ").map_or(text.len(), |at| at + 1);
        text[..end].to_string()
    }));
    let dir = tempfile::tempdir().unwrap();
    let out = run_with_model(dir.path(), &server);
    assert!(out.status.success(), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "completed", "{outcome}");
    let chunks = outcome["state"]["chunks"].as_array().unwrap().len();
    assert_eq!(server.request_count(), chunks, "one completion per chunk");
    assert_eq!(outcome["usage"]["calls"], json!(chunks));
    let keypoints = outcome["state"]["keypoints"].as_array().unwrap();
    assert!(
        keypoints
            .iter()
            .all(|k| k["points"][0]["rules"] == json!(["model-rank:2"]))
    );
    let sentences = outcome["state"]["summary"]["sentences"].as_array().unwrap();
    assert!(!sentences.is_empty());
    assert_eq!(
        outcome["state"]["citations"].as_array().unwrap().len(),
        sentences.len()
    );
}

#[test]
fn a_model_that_paraphrases_fails_the_citation_check() {
    let server = FakeLlmServer::start_with(picker(|_| {
        "Water is the most important substance on the whole planet.".to_string()
    }));
    let dir = tempfile::tempdir().unwrap();
    let out = run_with_model(dir.path(), &server);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let outcome = json(&out);
    let failure = &outcome["failure"];
    assert_eq!(failure["node"], "write_summary", "{failure}");
    assert_eq!(failure["code"], "citation-check-failed", "{failure}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("Water is the most important substance"),
        "{failure}"
    );
    assert!(!dir.path().join("summary.md").exists());
}
