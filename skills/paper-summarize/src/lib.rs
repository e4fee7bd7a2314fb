//! `paper-summarize`: a deterministic extractive summary of one paper (the
//! map step of the research scenario). The abstract is split into sentences
//! (abbreviations such as `e.g.` and `et al.` and decimals do not end one),
//! each sentence is classified by cue words, and every field of the summary
//! is filled with sentences copied verbatim from the abstract.

skillhost_sdk::generate!(
    "paper-summarize",
    with: { "skillhost:research/types@0.1.0": generate },
    additional_derives: [PartialEq],
);

pub mod sentences;
pub mod summary;

use skillhost_sdk::log;

struct PaperSummarize;

impl Guest for PaperSummarize {
    skillhost_sdk::manifest! {
        name: "Paper summarizer",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<PaperSummary, SkillError> {
        let paper = input.paper;
        let sentences = sentences::split(&paper.abstract_);
        if sentences.is_empty() {
            return Err(SkillError::invalid_input(format!(
                "paper `{}` has an empty abstract: there is nothing to summarise (discovery marks such papers invalid)",
                paper.id
            )));
        }
        let e = summary::extract(&sentences);
        let own = |v: Vec<&str>| v.into_iter().map(str::to_string).collect::<Vec<_>>();
        let out = PaperSummary {
            paper_id: paper.id.clone(),
            title: paper.title.clone(),
            main_contributions: own(e.contributions),
            methodology: e.methodology.to_string(),
            key_findings: own(e.findings),
            limitations: own(e.limitations),
        };
        log::info(format!(
            "{}: {} sentences -> {} contribution(s), {} finding(s), {} limitation(s)",
            paper.id,
            sentences.len(),
            out.main_contributions.len(),
            out.key_findings.len(),
            out.limitations.len()
        ));
        Ok(out)
    }
}

export!(PaperSummarize);

#[cfg(test)]
mod tests {
    use super::*;

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

    fn summarize(p: Paper) -> Result<PaperSummary, SkillError> {
        PaperSummarize::run(Input { paper: p })
    }

    fn sentences_of(s: &PaperSummary) -> Vec<&str> {
        s.main_contributions
            .iter()
            .chain([&s.methodology])
            .chain(&s.key_findings)
            .chain(&s.limitations)
            .map(String::as_str)
            .collect()
    }

    const ABSTRACT: &str = "Prior pipelines, such as the retrieve-then-read design of Lewis et al., assume that the top passages are relevant. \
        We propose CiteRAG, a lightweight framework for fact verification that constrains the generator to cite a passage (e.g. a Wikipedia paragraph) for every sentence. \
        Concretely, CiteRAG verifies each generated claim against its cited passage with an entailment model. \
        We evaluate on FEVER, KILT and HotpotQA. \
        Results show that CiteRAG improves answer faithfulness by 7.4 points over REALM on FEVER. \
        On KILT, it reduces the number of generated tokens by 31.5% while matching the F1 of REALM. \
        However, latency grows linearly with the number of retrieved passages.";

    #[test]
    fn summarises_with_verbatim_sentences() {
        let s = summarize(paper("rag-0001", ABSTRACT)).unwrap();
        assert_eq!(s.paper_id, "rag-0001");
        assert_eq!(s.title, "Title of rag-0001");
        assert_eq!(s.main_contributions.len(), 1);
        assert!(s.main_contributions[0].starts_with("We propose CiteRAG"));
        assert!(s.main_contributions[0].ends_with("for every sentence."));
        assert!(s.methodology.starts_with("Concretely,"));
        assert_eq!(s.key_findings.len(), 2);
        assert!(s.key_findings[0].starts_with("Results show"));
        assert_eq!(
            s.limitations,
            ["However, latency grows linearly with the number of retrieved passages."]
        );
        for sentence in sentences_of(&s) {
            assert!(ABSTRACT.contains(sentence), "not verbatim: {sentence:?}");
        }
    }

    #[test]
    fn is_deterministic() {
        let a = summarize(paper("x", ABSTRACT)).unwrap();
        let b = summarize(paper("x", ABSTRACT)).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn short_abstracts_still_fill_every_field() {
        let s = summarize(paper("x", "Graph networks are popular.")).unwrap();
        assert_eq!(s.main_contributions, ["Graph networks are popular."]);
        assert_eq!(s.methodology, "Graph networks are popular.");
        assert_eq!(s.key_findings, ["Graph networks are popular."]);
        assert_eq!(s.limitations, ["Graph networks are popular."]);
    }

    #[test]
    fn an_empty_abstract_is_invalid_input() {
        let e = summarize(paper("rag-0017", " \n")).unwrap_err();
        assert_eq!(e.code, "invalid-input");
        assert!(e.message.contains("rag-0017"), "{}", e.message);
    }

    #[test]
    fn summarises_every_paper_of_the_shipped_corpus_verbatim() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/research/corpus");
        let mut n = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
            for line in text.lines() {
                // The corpus is JSON; this crate has no JSON parser, so take
                // the abstract field by hand (it has no escaped quotes).
                let Some(start) = line.find("\"abstract\": \"") else {
                    continue;
                };
                let rest = &line[start + 13..];
                let abstract_ = &rest[..rest.find("\", \"").unwrap()];
                if abstract_.is_empty() {
                    continue;
                }
                let s = summarize(paper("p", abstract_)).unwrap();
                for sentence in sentences_of(&s) {
                    assert!(abstract_.contains(sentence), "{sentence:?}");
                }
                assert!(!s.key_findings.is_empty() && !s.limitations.is_empty());
                n += 1;
            }
        }
        assert!(n >= 220, "{n}");
    }
}
