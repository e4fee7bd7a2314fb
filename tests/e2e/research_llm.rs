//! The `research-llm` example: its corpus, a copy of one file of the research
//! corpus that must not drift from it; the shipped `paper-summarize-llm`
//! component through the real binary (its manifest and schemas, and the
//! calls that end before or at the model); and the whole scenario against
//! the fake model provider (`skillhost_tests::fake_llm_server`: no hosted
//! model is reachable here), once quoting the abstracts and once inventing
//! a quote, which the citation check must refuse.

use std::path::Path;

use serde_json::{Value, json};

use skillhost_tests::cli::{events, host, json, stderr};
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply, ReceivedRequest};

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

/// The deterministic "model" of the whole-scenario tests: for each summary
/// request, a JSON answer built from the abstract it was sent (everything
/// after `Abstract:` in the last message, as the skill's prompt puts it),
/// with `quote` picking what it claims the abstract says.
fn summariser(
    quote: fn(&str) -> String,
) -> impl Fn(&ReceivedRequest) -> Option<FakeReply> + Send + Sync + 'static {
    move |request| {
        let abstract_ = request.last_message_after("Abstract:\n")?;
        let first = first_sentence(&abstract_);
        let answer = json!({
            "main_contributions": [first],
            "methodology": "A method the fake model describes in its own words.",
            "key_findings": [first],
            "limitations": [],
            "quotes": [quote(&abstract_)],
        });
        Some(FakeReply::openai_content(&answer.to_string()))
    }
}

/// The abstract's first sentence, verbatim: up to its first `. `.
fn first_sentence(abstract_: &str) -> String {
    let text = abstract_.trim();
    match text.find(". ") {
        Some(end) => text[..=end].to_string(),
        None => text.to_string(),
    }
}

/// `examples/research-llm` with a host configuration in the user's
/// configuration directory that points `local` at `server`.
fn configure_local(dir: &Path, server: &FakeLlmServer) -> String {
    server.configure_user(dir);
    skillhost_tests::repo_root()
        .join("examples/research-llm/scenario.toml")
        .display()
        .to_string()
}

fn run_research(dir: &Path, scenario: &str) -> std::process::Output {
    run_research_with(dir, scenario, "--json")
}

/// `host run` of the scenario, writing `report.md`, with `output` (`--json`
/// or `--events`) choosing what goes to standard output.
fn run_research_with(dir: &Path, scenario: &str, output: &str) -> std::process::Output {
    host(
        dir,
        &[
            "run",
            scenario,
            "--input",
            r#"{"query": "retrieval augmented generation", "max_papers": 4}"#,
            "--out",
            &dir.join("report.md").display().to_string(),
            output,
        ],
        None,
    )
}

#[test]
fn the_scenario_runs_on_a_model_whose_quotes_are_in_the_abstracts() {
    let server = FakeLlmServer::start_with(summariser(first_sentence));
    let dir = tempfile::tempdir().unwrap();
    let scenario = configure_local(dir.path(), &server);

    let out = run_research(dir.path(), &scenario);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = json(&out);
    assert_eq!(summary["status"], "completed", "{summary}");
    // One completion per paper, each quote verified at its offsets.
    assert_eq!(server.request_count(), 4);
    let quotes = summary["state"]["summary_quotes"].as_array().unwrap();
    assert_eq!(quotes.len(), 4, "{summary}");
    assert_eq!(summary["usage"]["calls"], 4, "{summary}");
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    assert!(report.starts_with("# "), "{report}");

    // The usage is stored with the map step and shown per run.
    let run_id = summary["run_id"].as_str().unwrap();
    let shown = json(&host(dir.path(), &["runs", "show", run_id, "--json"], None));
    assert_eq!(shown["usage"]["calls"], 4, "{shown}");
    let journal = shown["journal"].as_array().unwrap();
    assert_eq!(journal.len(), 4);
    assert!(journal.iter().all(|entry| entry["kind"] == "llm"));
}

#[test]
fn a_quote_the_abstract_does_not_have_fails_the_summaries_by_the_citation_check() {
    let server = FakeLlmServer::start_with(summariser(|_| {
        "Our method outperforms every baseline by a wide margin.".to_string()
    }));
    let dir = tempfile::tempdir().unwrap();
    let scenario = configure_local(dir.path(), &server);

    let out = run_research(dir.path(), &scenario);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let summary = json(&out);
    assert_eq!(summary["status"], "failed", "{summary}");
    let failure = &summary["failure"];
    assert_eq!(failure["node"], "paper_summarize", "{failure}");
    assert_eq!(failure["code"], "citation-check-failed", "{failure}");
    assert!(
        failure["message"]
            .as_str()
            .unwrap()
            .contains("Our method outperforms every baseline"),
        "{failure}"
    );
    assert!(!dir.path().join("report.md").exists());
}

#[test]
fn the_run_replays_with_the_model_gone_and_no_provider_configured() {
    let mut server = FakeLlmServer::start_with(summariser(first_sentence));
    let dir = tempfile::tempdir().unwrap();
    let scenario = configure_local(dir.path(), &server);
    let out = run_research(dir.path(), &scenario);
    assert!(out.status.success(), "{}", stderr(&out));
    let run_id = json(&out)["run_id"].as_str().unwrap().to_string();
    let asked = server.request_count();
    assert_eq!(asked, 4);

    // No model to ask, and no configuration naming one: every completion
    // comes from the journal, and every step is what it was.
    server.stop();
    std::fs::remove_dir_all(dir.path().join("xdg-config")).unwrap();
    let replay = host(dir.path(), &["replay", &run_id, "--json"], None);
    assert!(replay.status.success(), "{}", stderr(&replay));
    let report = json(&replay);
    assert_eq!(report["diverged_at"], Value::Null, "{report}");
    let steps = report["steps"].as_array().unwrap();
    assert!(steps.iter().all(|s| s["status"] == "same"), "{report}");
    let served: u64 = steps
        .iter()
        .map(|s| s["calls_served"].as_u64().unwrap())
        .sum();
    assert_eq!(served, 4, "{report}");
    assert_eq!(server.request_count(), asked);
}

#[test]
fn a_run_killed_inside_the_summaries_counts_every_committed_completion_after_resume() {
    use std::os::unix::process::ExitStatusExt;
    let server = FakeLlmServer::start_with(summariser(first_sentence));
    let dir = tempfile::tempdir().unwrap();
    let scenario = configure_local(dir.path(), &server);
    let out = host(
        dir.path(),
        &[
            "run",
            &scenario,
            "--input",
            r#"{"query": "retrieval augmented generation", "max_papers": 4}"#,
            "--events",
        ],
        Some("map-item:paper_summarize:1"),
    );
    assert_eq!(out.status.signal(), Some(9), "{}", stderr(&out));
    let started: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().next().unwrap()).unwrap();
    let id = started["run_id"].as_str().unwrap();
    let asked_before = server.request_count();
    assert!(asked_before >= 1, "no completion before the kill");

    let out = host(
        dir.path(),
        &[
            "resume",
            id,
            "--out",
            &dir.path().join("report.md").display().to_string(),
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    // The items finished before the kill are reused, with their journal:
    // their completions count in the node's usage as the others do, four
    // in all, whatever was asked again.
    let shown = json(&host(dir.path(), &["runs", "show", id, "--json"], None));
    assert_eq!(shown["usage"]["calls"], 4, "{shown}");
    let step = shown["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["node"] == "paper_summarize" && s["status"] == "ok")
        .unwrap();
    assert_eq!(step["detail"]["usage"]["calls"], 4, "{step}");
    assert!(server.request_count() >= 4);
}

/// The summary JSON the deterministic "model" writes for `request`, as
/// [`summariser`] does with `first_sentence` quoted.
fn answer_for(request: &ReceivedRequest) -> Option<String> {
    let abstract_ = request.last_message_after("Abstract:\n")?;
    let first = first_sentence(&abstract_);
    Some(
        json!({
            "main_contributions": [first],
            "methodology": "A method the fake model describes in its own words.",
            "key_findings": [first],
            "limitations": [],
            "quotes": [first],
        })
        .to_string(),
    )
}

/// `text` in pieces of 24 characters: the deltas the fake model streams.
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    chars.chunks(24).map(|c| c.iter().collect()).collect()
}

/// A model that streams each summary in `anthropic`'s wire format or the
/// OpenAI-compatible one, 10 ms between pieces; with `cut`, the first
/// request whose abstract contains it is cut mid-JSON.
fn streaming_summariser(
    anthropic: bool,
    cut: Option<&'static str>,
) -> impl Fn(&ReceivedRequest) -> Option<FakeReply> + Send + Sync + 'static {
    let was_cut = std::sync::atomic::AtomicBool::new(false);
    move |request| {
        assert_eq!(request.json()["stream"], true, "the summariser streams");
        let answer = answer_for(request)?;
        let pieces = pieces(&answer);
        let mut pieces: Vec<&str> = pieces.iter().map(String::as_str).collect();
        let abstract_ = request.last_message_after("Abstract:\n")?;
        let end = match cut {
            Some(marker)
                if abstract_.contains(marker)
                    && !was_cut.swap(true, std::sync::atomic::Ordering::SeqCst) =>
            {
                pieces.truncate(pieces.len() / 2);
                false
            }
            _ => true,
        };
        let pause = std::time::Duration::from_millis(10);
        Some(if anthropic {
            FakeReply::anthropic_tool_stream(&pieces, pause, end)
        } else {
            FakeReply::openai_stream(&pieces, pause, end)
        })
    }
}

/// Points provider `local` at `server` in `anthropic`'s format or the
/// OpenAI-compatible one.
fn configure_format(dir: &Path, server: &FakeLlmServer, anthropic: bool) -> String {
    if anthropic {
        let config = dir.join("xdg-config/skillhost");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("config.toml"),
            format!(
                "[llm.providers.local]\nkind = \"anthropic\"\nbase_url = \"{}\"\n",
                server.base_url()
            ),
        )
        .unwrap();
        skillhost_tests::repo_root()
            .join("examples/research-llm/scenario.toml")
            .display()
            .to_string()
    } else {
        configure_local(dir, server)
    }
}

/// `host run --events` of the scenario, writing `report.md`: the events,
/// one a line.
fn run_with_events(dir: &Path, scenario: &str) -> Vec<Value> {
    let out = run_research_with(dir, scenario, "--events");
    assert!(out.status.success(), "{}", stderr(&out));
    events(&out.stdout)
}

/// The report of the run with the whole answers (no pauses, each streamed
/// by the fake a word per delta): what every streamed run must write.
fn reference_report() -> String {
    let server = FakeLlmServer::start_with(summariser(first_sentence));
    let dir = tempfile::tempdir().unwrap();
    let scenario = configure_local(dir.path(), &server);
    let out = run_research(dir.path(), &scenario);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::read_to_string(dir.path().join("report.md")).unwrap()
}

#[test]
fn the_summaries_stream_as_tokens_in_both_wire_formats_and_replay_without_a_provider() {
    let reference = reference_report();
    for anthropic in [false, true] {
        let format = if anthropic { "anthropic" } else { "openai" };
        let mut server = FakeLlmServer::start_with(streaming_summariser(anthropic, None));
        let dir = tempfile::tempdir().unwrap();
        let scenario = configure_format(dir.path(), &server, anthropic);
        let events = run_with_events(dir.path(), &scenario);
        let run_id = events[0]["run_id"].as_str().unwrap().to_string();

        // Every summary's text came as tokens, before the map node ended,
        // and each item's tokens join into the answer the model wrote.
        let finished = events
            .iter()
            .position(|e| e["event"] == "node_finished" && e["node"] == "paper_summarize")
            .expect("the map node finished");
        let tokens: Vec<(usize, &Value)> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| e["event"] == "token")
            .collect();
        assert!(!tokens.is_empty(), "{format}: no token events");
        assert!(
            tokens
                .iter()
                .all(|(i, e)| *i < finished && e["node"] == "paper_summarize"),
            "{format}: {events:?}"
        );
        let mut texts = std::collections::BTreeMap::<String, String>::new();
        for (_, e) in &tokens {
            *texts.entry(e["item"].to_string()).or_default() += e["text"].as_str().unwrap();
        }
        assert_eq!(texts.len(), 4, "{format}: one stream per paper: {texts:?}");
        let answers: std::collections::BTreeSet<String> =
            server.requests().iter().filter_map(answer_for).collect();
        for text in texts.values() {
            assert!(answers.contains(text), "{format}: {text} is no answer");
        }
        assert!(
            !events.iter().any(|e| e["event"] == "tokens_discarded"),
            "{format}"
        );

        // The report is what the whole answers make.
        let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert_eq!(report, reference, "{format}");

        // A replay needs no provider, nor its configuration.
        server.stop();
        std::fs::remove_dir_all(dir.path().join("xdg-config")).unwrap();
        let replay = host(dir.path(), &["replay", &run_id, "--json"], None);
        assert!(replay.status.success(), "{}", stderr(&replay));
        let replay = json(&replay);
        assert_eq!(replay["diverged_at"], Value::Null, "{format}: {replay}");
        let steps = replay["steps"].as_array().unwrap();
        assert!(steps.iter().all(|s| s["status"] == "same"), "{replay}");
    }
}

#[test]
fn a_summary_cut_mid_stream_is_retried_and_the_report_has_none_of_the_cut_text() {
    let reference = reference_report();
    for anthropic in [false, true] {
        let format = if anthropic { "anthropic" } else { "openai" };
        // The first summary asked for (whichever paper it is) is cut.
        let server = FakeLlmServer::start_with(streaming_summariser(anthropic, Some("")));
        let dir = tempfile::tempdir().unwrap();
        let scenario = configure_format(dir.path(), &server, anthropic);
        let events = run_with_events(dir.path(), &scenario);
        // One attempt was cut: its tokens were discarded before its retry.
        let discarded: Vec<&Value> = events
            .iter()
            .filter(|e| e["event"] == "tokens_discarded")
            .collect();
        assert_eq!(discarded.len(), 1, "{format}: {events:?}");
        let item = &discarded[0]["item"];
        let of_item = |attempt: u64| -> String {
            events
                .iter()
                .filter(|e| e["event"] == "token" && &e["item"] == item && e["attempt"] == attempt)
                .map(|e| e["text"].as_str().unwrap())
                .collect()
        };
        let (cut, retried) = (of_item(1), of_item(2));
        assert!(
            !cut.is_empty() && retried.starts_with(&cut),
            "{format}: {cut} / {retried}"
        );
        assert!(
            serde_json::from_str::<Value>(&cut).is_err(),
            "{format}: cut mid-JSON"
        );
        assert_eq!(
            server.request_count(),
            5,
            "{format}: four papers, one retried"
        );

        // The report is the whole answers' (the retry's text only).
        let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
        assert_eq!(report, reference, "{format}");
    }
}
