//! `claim-synthesis`: claims across papers, each citing the papers that
//! support it, with evidence quoted verbatim from their abstracts.
//!
//! Deterministic and extractive: papers are grouped by the topics they
//! share, each group's claim is written from the key findings of its papers
//! (their direction and figures), and the evidence is those findings, whole
//! sentences that are checked to occur verbatim in the cited abstracts.
//! Papers no group covers get single-paper claims, and a last claim gathers
//! the limitations the authors state themselves.

skillhost_sdk::generate!(
    "claim-synthesis",
    with: { "skillhost:research/types@0.1.0": generate },
    additional_derives: [PartialEq],
);

pub mod synth;

use std::collections::{BTreeMap, BTreeSet};

use skillhost_sdk::log;
use synth::Source;

struct ClaimSynthesis;

impl Guest for ClaimSynthesis {
    skillhost_sdk::manifest! {
        name: "Claim synthesis",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 2,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let claims = claims(&input)?;
        log::info(format!(
            "{} claims citing {} distinct papers with {} quotes",
            claims.len(),
            claims
                .iter()
                .flat_map(|c| &c.supporting_paper_ids)
                .collect::<BTreeSet<_>>()
                .len(),
            claims.iter().map(|c| c.evidence.len()).sum::<usize>()
        ));
        Ok(Output { claims })
    }
}

export!(ClaimSynthesis);

/// The usable sources of `input`, in paper order: valid papers (first
/// occurrence of each id) with a summary whose sentences are in the
/// abstract.
fn sources(input: &Input) -> Vec<Source<'_>> {
    let summaries: BTreeMap<&str, &PaperSummary> = input
        .summaries
        .iter()
        .rev() // so the first summary of a paper wins
        .map(|s| (s.paper_id.as_str(), s))
        .collect();
    let mut seen = BTreeSet::new();
    input
        .papers
        .iter()
        .filter(|p| p.valid && seen.insert(p.id.as_str()))
        .filter_map(|p| {
            let s = summaries.get(p.id.as_str())?;
            Source::new(
                &p.id,
                &p.title,
                &p.abstract_,
                &p.topics,
                &s.key_findings,
                &s.limitations,
            )
        })
        .collect()
}

/// The claims for `input`, numbered `C1`, `C2`, ….
pub fn claims(input: &Input) -> Result<Vec<Claim>, SkillError> {
    let sources = sources(input);
    if sources.is_empty() {
        return Err(SkillError::invalid_input(format!(
            "none of the {} papers is valid with a summary whose findings are quoted verbatim from its abstract; nothing can be cited",
            input.papers.len()
        )));
    }
    Ok(synth::synthesize(&input.query, &sources)
        .into_iter()
        .enumerate()
        .map(|(i, d)| Claim {
            id: format!("C{}", i + 1),
            text: d.text,
            supporting_paper_ids: d.cites,
            evidence: d.evidence,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper(id: &str, topics: &[&str], sentences: &[&str]) -> Paper {
        Paper {
            id: id.to_string(),
            title: format!("Title {id}"),
            authors: vec![],
            abstract_: sentences.join(" "),
            url: format!("https://papers.example.org/{id}"),
            source: "arXiv".to_string(),
            published: "2022-01-01".to_string(),
            year: 2022,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            score: 1.0,
            valid: true,
            issues: vec![],
        }
    }

    fn summary(id: &str, findings: &[&str], limitations: &[&str]) -> PaperSummary {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        PaperSummary {
            paper_id: id.to_string(),
            title: format!("Title {id}"),
            main_contributions: vec![],
            methodology: String::new(),
            key_findings: own(findings),
            limitations: own(limitations),
        }
    }

    /// Papers `p1`..`p5`: p1-p3 share `rag`, p1-p2 also `dense`, p4 and p5
    /// are alone; each has a finding and a limitation.
    fn fixture() -> Input {
        let spec: [(&str, &[&str], &str, &str); 5] = [
            (
                "p1",
                &["rag", "dense"],
                "P1 improves exact match by 4.1 points.",
                "However, p1 is slow.",
            ),
            (
                "p2",
                &["rag", "dense"],
                "P2 reduces latency by 31.5%.",
                "We only evaluate English, so it remains unclear whether p2 generalises.",
            ),
            (
                "p3",
                &["rag"],
                "P3 outperforms BM25, reaching 61.2%.",
                "P3 does not handle tables, and we leave them to future work.",
            ),
            (
                "p4",
                &["graphs"],
                "P4 raises accuracy from 0.61 to 0.72.",
                "Gains are smaller on rare nodes.",
            ),
            (
                "p5",
                &["forecasting"],
                "P5 is 2.5x faster than ARIMA.",
                "Plain sentence without a cue.",
            ),
        ];
        let papers = spec
            .iter()
            .map(|(id, topics, f, l)| paper(id, topics, &["We propose it.", f, l]))
            .collect();
        let summaries = spec
            .iter()
            .map(|(id, _, f, l)| summary(id, &[f], &[l]))
            .collect();
        Input {
            query: "dense retrieval".to_string(),
            papers,
            summaries,
        }
    }

    fn run(input: Input) -> Result<Vec<Claim>, SkillError> {
        ClaimSynthesis::run(input).map(|o| o.claims)
    }

    /// The invariants the scenario's citation check enforces.
    fn assert_cited_and_verbatim(input: &Input, claims: &[Claim]) {
        for c in claims {
            assert!(!c.supporting_paper_ids.is_empty(), "{} cites nothing", c.id);
            assert!(!c.evidence.is_empty(), "{} has no evidence", c.id);
            for quote in &c.evidence {
                assert!(
                    c.supporting_paper_ids.iter().any(|id| {
                        input
                            .papers
                            .iter()
                            .any(|p| &p.id == id && p.abstract_.contains(quote.as_str()))
                    }),
                    "{}: {quote:?} is not in a cited abstract",
                    c.id
                );
            }
        }
    }

    #[test]
    fn groups_by_shared_topics_and_cites_verbatim() {
        let input = fixture();
        let claims = run(fixture()).unwrap();
        assert_cited_and_verbatim(&input, &claims);
        let ids: Vec<_> = claims.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["C1", "C2", "C3", "C4", "C5"]);
        let cites: Vec<Vec<&str>> = claims
            .iter()
            .map(|c| c.supporting_paper_ids.iter().map(String::as_str).collect())
            .collect();
        // rag (3 papers), dense (2), then p4 and p5 alone, then limitations
        // (p5's plain sentence states none).
        assert_eq!(
            cites,
            [
                vec!["p1", "p2", "p3"],
                vec!["p1", "p2"],
                vec!["p4"],
                vec!["p5"],
                vec!["p1", "p2", "p3", "p4"],
            ]
        );
        assert_eq!(
            claims[0].text,
            "Three papers on rag report both quality gains and lower costs than their baselines (e.g. against BM25), with reported figures such as 4.1 points, 31.5% and 61.2%."
        );
        assert!(
            claims[2]
                .text
                .starts_with("\u{201c}Title p4\u{201d} reports gains")
        );
        assert!(claims[2].text.contains("from 0.61 to 0.72"));
        assert!(
            claims[4].text.starts_with("Four papers"),
            "{}",
            claims[4].text
        );
        assert!(claims[4].text.contains("a narrow evaluation scope"));
    }

    #[test]
    fn query_words_break_ties_between_groups() {
        let mut input = fixture();
        // Make `graphs` a 2-paper group like `dense`.
        input.papers[4].topics.push("graphs".to_string());
        let claims = run(input.clone()).unwrap();
        assert_eq!(claims[1].supporting_paper_ids, ["p1", "p2"]);
        input.query = "graphs".to_string();
        let claims = run(input).unwrap();
        assert_eq!(claims[1].supporting_paper_ids, ["p4", "p5"]);
    }

    #[test]
    fn skips_invalid_and_unsummarised_papers_and_unverifiable_sentences() {
        let mut input = fixture();
        input.papers[0].valid = false;
        input.summaries.retain(|s| s.paper_id != "p2");
        input.summaries[0].key_findings = vec!["Not in the abstract.".to_string()];
        let claims = run(input.clone()).unwrap();
        assert_cited_and_verbatim(&input, &claims);
        let cited: BTreeSet<&str> = claims
            .iter()
            .flat_map(|c| c.supporting_paper_ids.iter().map(String::as_str))
            .collect();
        assert!(!cited.contains("p1") && !cited.contains("p2"), "{cited:?}");
        assert!(
            claims
                .iter()
                .all(|c| !c.evidence.iter().any(|e| e == "Not in the abstract."))
        );
    }

    #[test]
    fn few_papers_still_give_three_claims_when_possible() {
        let p = paper(
            "solo",
            &[],
            &[
                "X improves F1 by 2 points.",
                "X reduces cost by 10%.",
                "However, X is slow.",
            ],
        );
        let s = summary(
            "solo",
            &["X improves F1 by 2 points.", "X reduces cost by 10%."],
            &["However, X is slow."],
        );
        let input = Input {
            query: "x".to_string(),
            papers: vec![p],
            summaries: vec![s],
        };
        let claims = run(input.clone()).unwrap();
        assert_eq!(claims.len(), 3);
        assert_cited_and_verbatim(&input, &claims);
    }

    #[test]
    fn nothing_citable_is_an_error() {
        let mut input = fixture();
        input.summaries.clear();
        let e = run(input).unwrap_err();
        assert_eq!(e.code, "invalid-input");
        let e = run(Input {
            query: String::new(),
            papers: vec![],
            summaries: vec![],
        })
        .unwrap_err();
        assert_eq!(e.code, "invalid-input");
    }

    #[test]
    fn never_more_than_eight_claims_and_deterministic() {
        let mut papers = Vec::new();
        let mut summaries = Vec::new();
        for i in 0..20 {
            let id = format!("q{i:02}");
            let f = format!("Q{i} improves accuracy by {i}.5%.");
            papers.push(paper(&id, &[&format!("t{}", i % 7), "all"], &[&f]));
            summaries.push(summary(&id, &[&f], &[]));
        }
        let input = Input {
            query: "anything".to_string(),
            papers,
            summaries,
        };
        let a = run(input.clone()).unwrap();
        assert!(
            (synth::MIN_CLAIMS..=synth::MAX_CLAIMS).contains(&a.len()),
            "{}",
            a.len()
        );
        assert!(
            a.iter()
                .all(|c| c.supporting_paper_ids.len() <= synth::MAX_CITED)
        );
        assert_cited_and_verbatim(&input, &a);
        assert_eq!(a, run(input).unwrap());
    }
}
