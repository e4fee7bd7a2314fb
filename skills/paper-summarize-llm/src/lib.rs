//! `paper-summarize-llm`: a summary of one paper written by a language model
//! through the host's `llm` capability (the map step of the `research-llm`
//! scenario). It owns the prompt, the schema of the answer and reading the
//! answer; it must not judge the quotes it returns: whether each is really in
//! the abstract is what the scenario's `citations` post-condition checks, so
//! that a model that invents a quote fails the run there, visibly.
//!
//! # The request
//!
//! One streamed completion (`llm::complete_stream`) per call, so the
//! answer reaches `host run`'s progress line, `--events`, the run page and
//! MCP clients as the model writes it; the answer read is the whole
//! completion, as the host checked it against the schema. With:
//!
//! - `messages`: two.
//!   1. `system`: [`prompt::SYSTEM`], the same for every paper. It asks for
//!      one JSON object with exactly the fields `main_contributions` (1 to 3
//!      statements, the model's words), `methodology` (a string, the model's
//!      words), `key_findings` (1 to 3 sentences copied from the abstract),
//!      `limitations` (0 to 3 sentences copied from the abstract) and
//!      `quotes` (1 to 5 passages copied from the abstract).
//!   2. `user`: the paper, as
//!      ```text
//!      Paper: <id>
//!      Title: <title>
//!
//!      Abstract:
//!      <abstract, exactly as the input has it, to the end of the message>
//!      ```
//!      A test double can take the abstract as everything after the first
//!      `Abstract:\n` ([`prompt::ABSTRACT_HEADING`]).
//! - `json-schema`: [`prompt::SCHEMA`], a JSON Schema (an object with those
//!   five fields required, no others, strings non-blank, the lists' bounds as
//!   above), so the host asks the provider for structured output and checks
//!   the answer against it.
//! - `max-tokens` and `temperature`: not set; the node's `llm` grant decides
//!   them.
//!
//! # The answer
//!
//! `content` must be that JSON object (whitespace around it is allowed,
//! nothing else). The output is the input paper's `id` and `title` plus the
//! five fields exactly as the model wrote them. Findings and limitations are
//! asked for verbatim because `claim-synthesis` quotes them as evidence (and
//! drops any it does not find in the abstract); `quotes` is what the
//! scenario's citation check verifies.
//!
//! # Errors
//!
//! - `invalid-input`: the abstract is empty (nothing to summarise).
//! - `invalid-output`, retryable: the answer is not JSON, or does not fit the
//!   schema (a field missing, unknown, of the wrong type, blank, or a list
//!   out of bounds); the message names every problem and shows the start of
//!   the answer.
//! - anything the completion ends with (`capability-not-granted`, the host's
//!   `invalid-output` when the answer failed its schema check, a provider's
//!   error…), with its code and `retryable` kept and the paper named.

skillhost_sdk::generate!(
    "paper-summarize-llm",
    streaming,
    with: { "skillhost:research/types@0.1.0": generate },
    additional_derives: [PartialEq],
);

pub mod answer;
pub mod prompt;

use skillhost_sdk::llm::{self, CompletionRequest, Message, Role};
use skillhost_sdk::log;

struct PaperSummarizeLlm;

impl Guest for PaperSummarizeLlm {
    skillhost_sdk::manifest! {
        name: "Paper summarizer (LLM)",
        capabilities: ["llm", "log"],
        // A model may answer off-schema once and fit it the next time.
        retry: { max_attempts: 3, initial_backoff_ms: 1000 },
        // About 300 tokens out of a 7B model on a GPU, or a hosted API.
        estimated_duration_ms: 10000,
    }

    async fn run(input: Input) -> Result<CitedSummary, SkillError> {
        let paper = input.paper;
        if paper.abstract_.trim().is_empty() {
            return Err(SkillError::invalid_input(format!(
                "paper `{}` has an empty abstract: there is nothing to summarise (discovery marks such papers invalid)",
                paper.id
            )));
        }
        let request = CompletionRequest {
            messages: vec![
                Message {
                    role: Role::System,
                    content: prompt::SYSTEM.to_string(),
                },
                Message {
                    role: Role::User,
                    content: prompt::user_message(&paper.id, &paper.title, &paper.abstract_),
                },
            ],
            max_tokens: None,
            temperature: None,
            json_schema: Some(prompt::SCHEMA.to_string()),
        };
        let context = |e: SkillError| e.context(format!("summarising paper `{}`", paper.id));
        let completion = llm::complete_stream(&request)
            .map_err(context)?
            .finish()
            .await
            .map_err(context)?;
        let answer = answer::parse(&completion.content).map_err(|problem| {
            SkillError::retryable(
                "invalid-output",
                format!(
                    "model `{}` summarising paper `{}`: {problem}",
                    completion.model, paper.id
                ),
            )
        })?;
        log::info(format!(
            "{}: {} answered with {} input and {} output tokens: {} contribution(s), {} finding(s), {} limitation(s), {} quote(s)",
            paper.id,
            completion.model,
            completion.input_tokens,
            completion.output_tokens,
            answer.main_contributions.len(),
            answer.key_findings.len(),
            answer.limitations.len(),
            answer.quotes.len()
        ));
        Ok(CitedSummary {
            paper_id: paper.id,
            title: paper.title,
            main_contributions: answer.main_contributions,
            methodology: answer.methodology,
            key_findings: answer.key_findings,
            limitations: answer.limitations,
            quotes: answer.quotes,
        })
    }
}

export!(PaperSummarizeLlm);

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost_sdk::llm::Completion;
    use skillhost_sdk::testing;
    use std::cell::RefCell;
    use std::rc::Rc;

    const ABSTRACT: &str = "We propose CiteRAG, a framework that cites a passage for every sentence. \
        Concretely, CiteRAG verifies each generated claim with an entailment model. \
        Results show that CiteRAG improves faithfulness by 7.4 points on FEVER. \
        However, latency grows with the number of passages.";

    fn paper(id: &str, abstract_: &str) -> Paper {
        Paper {
            id: id.to_string(),
            title: format!("Title of {id}"),
            authors: vec!["Ada Lovelace".to_string()],
            abstract_: abstract_.to_string(),
            url: format!("https://papers.example.org/{id}"),
            source: "arXiv".to_string(),
            published: "2021-05-06".to_string(),
            year: 2021,
            topics: vec![],
            score: 1.0,
            valid: true,
            issues: vec![],
        }
    }

    fn summarize(p: Paper) -> Result<CitedSummary, SkillError> {
        testing::block_on(PaperSummarizeLlm::run(Input { paper: p }))
    }

    fn completion(content: &str) -> Completion {
        Completion {
            content: content.to_string(),
            model: "test/model".into(),
            input_tokens: 120,
            output_tokens: 80,
        }
    }

    /// Answers every request with `content`, and keeps the requests.
    fn answer_with(content: &'static str) -> Rc<RefCell<Vec<CompletionRequest>>> {
        let seen = Rc::new(RefCell::new(Vec::new()));
        let log = Rc::clone(&seen);
        testing::set_llm_handler(move |request| {
            log.borrow_mut().push(request.clone());
            Ok(completion(content))
        });
        seen
    }

    const GOOD: &str = r#"{
        "main_contributions": ["A framework that makes generated text cite its sources."],
        "methodology": "Each claim is checked against its cited passage by an entailment model.",
        "key_findings": ["Results show that CiteRAG improves faithfulness by 7.4 points on FEVER."],
        "limitations": ["However, latency grows with the number of passages."],
        "quotes": ["We propose CiteRAG, a framework that cites a passage for every sentence.",
                   "Concretely, CiteRAG verifies each generated claim with an entailment model."]
    }"#;

    #[test]
    fn sends_the_prompt_the_paper_and_the_schema() {
        let seen = answer_with(GOOD);
        summarize(paper("rag-0001", ABSTRACT)).unwrap();
        let requests = seen.borrow();
        assert_eq!(requests.len(), 1);
        let request = &requests[0];
        assert_eq!(request.messages.len(), 2);
        assert_eq!(request.messages[0].role, Role::System);
        assert_eq!(request.messages[0].content, prompt::SYSTEM);
        assert_eq!(request.messages[1].role, Role::User);
        assert_eq!(
            request.messages[1].content,
            format!("Paper: rag-0001\nTitle: Title of rag-0001\n\nAbstract:\n{ABSTRACT}")
        );
        assert_eq!(request.json_schema.as_deref(), Some(prompt::SCHEMA));
        // The grant decides the limits.
        assert_eq!(request.max_tokens, None);
        assert_eq!(request.temperature, None);
    }

    #[test]
    fn returns_the_answer_with_the_papers_id_and_title() {
        answer_with(GOOD);
        let out = summarize(paper("rag-0001", ABSTRACT)).unwrap();
        assert_eq!(
            out,
            CitedSummary {
                paper_id: "rag-0001".into(),
                title: "Title of rag-0001".into(),
                main_contributions: vec![
                    "A framework that makes generated text cite its sources.".into()
                ],
                methodology:
                    "Each claim is checked against its cited passage by an entailment model.".into(),
                key_findings: vec![
                    "Results show that CiteRAG improves faithfulness by 7.4 points on FEVER."
                        .into()
                ],
                limitations: vec!["However, latency grows with the number of passages.".into()],
                quotes: vec![
                    "We propose CiteRAG, a framework that cites a passage for every sentence."
                        .into(),
                    "Concretely, CiteRAG verifies each generated claim with an entailment model."
                        .into()
                ],
            }
        );
        let logs = testing::take_logs();
        assert_eq!(logs.len(), 1, "{logs:?}");
        assert!(
            logs[0].1.contains(
                "rag-0001: test/model answered with 120 input and 80 output tokens: \
                 1 contribution(s), 1 finding(s), 1 limitation(s), 2 quote(s)"
            ),
            "{logs:?}"
        );
    }

    #[test]
    fn does_not_judge_the_quotes() {
        // Not in the abstract: the scenario's citation check fails it, not the skill.
        answer_with(
            r#"{"main_contributions":["c"],"methodology":"m","key_findings":["f"],
                "limitations":[],"quotes":["CiteRAG solves hallucination entirely."]}"#,
        );
        let out = summarize(paper("rag-0001", ABSTRACT)).unwrap();
        assert_eq!(out.quotes, ["CiteRAG solves hallucination entirely."]);
        assert!(out.limitations.is_empty());
    }

    #[test]
    fn an_answer_that_is_not_json_is_a_retryable_invalid_output() {
        answer_with("Here is a summary: CiteRAG cites passages.");
        let err = summarize(paper("rag-0001", ABSTRACT)).unwrap_err();
        assert_eq!(err.code, "invalid-output");
        assert!(err.retryable);
        assert!(
            err.message.starts_with(
                "model `test/model` summarising paper `rag-0001`: the answer is not JSON ("
            ),
            "{}",
            err.message
        );
        assert!(
            err.message
                .ends_with("\"Here is a summary: CiteRAG cites passages.\""),
            "{}",
            err.message
        );
    }

    #[test]
    fn an_answer_without_a_field_is_a_retryable_invalid_output() {
        answer_with(
            r#"{"main_contributions":["c"],"methodology":"m","key_findings":["f"],"limitations":[]}"#,
        );
        let err = summarize(paper("rag-0002", ABSTRACT)).unwrap_err();
        assert_eq!(err.code, "invalid-output");
        assert!(err.retryable);
        assert_eq!(
            err.message,
            "model `test/model` summarising paper `rag-0002`: the answer does not fit the \
             schema: it lacks field `quotes`"
        );
    }

    #[test]
    fn the_models_error_is_passed_through_with_the_paper_named() {
        for retryable in [true, false] {
            testing::set_llm_handler(move |_| {
                Err(SkillError {
                    code: "provider-unavailable".into(),
                    message: "connection refused by 127.0.0.1:11434".into(),
                    retryable,
                })
            });
            let err = summarize(paper("rag-0003", ABSTRACT)).unwrap_err();
            assert_eq!(err.code, "provider-unavailable");
            assert_eq!(err.retryable, retryable);
            assert_eq!(
                err.message,
                "summarising paper `rag-0003`: connection refused by 127.0.0.1:11434"
            );
        }
    }

    #[test]
    fn without_a_grant_the_call_is_refused() {
        let err = summarize(paper("rag-0004", ABSTRACT)).unwrap_err();
        assert_eq!(err.code, "capability-not-granted");
    }

    #[test]
    fn an_empty_abstract_is_invalid_input_without_asking_the_model() {
        let seen = answer_with(GOOD);
        let err = summarize(paper("rag-0017", " \n")).unwrap_err();
        assert_eq!(err.code, "invalid-input");
        assert!(!err.retryable);
        assert!(err.message.contains("rag-0017"), "{}", err.message);
        assert!(seen.borrow().is_empty());
    }
}
