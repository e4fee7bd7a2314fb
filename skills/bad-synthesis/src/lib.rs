//! `bad-synthesis`: a test fixture that impersonates `claim-synthesis` and
//! emits one claim, broken in the way `mode` asks (`uncited`, `unknown-id`,
//! `fabricated-quote`) or correct for any other mode. Not used by the
//! shipped scenario; tests swap it in to check that the citation check
//! fails the node and names the claim.

// The export glue wit-bindgen generates for `run` takes the input record
// flattened into 8 parameters.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!(
    "bad-synthesis",
    with: { "skillhost:research/types@0.1.0": generate },
    additional_derives: [PartialEq],
);

use skillhost_sdk::log;

/// The id the `unknown-id` mode cites.
pub const UNKNOWN_ID: &str = "P-DOES-NOT-EXIST";

struct BadSynthesis;

impl Guest for BadSynthesis {
    skillhost_sdk::manifest! {
        name: "Bad synthesis (test fixture)",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let (paper, finding) = quotable(&input).ok_or_else(|| {
            SkillError::invalid_input(
                "no valid paper has a summary with a finding found verbatim in its abstract",
            )
        })?;
        let mut claim = Claim {
            id: "C1".to_string(),
            text: format!(
                "\u{201c}{}\u{201d} reports the finding quoted as evidence.",
                paper.title.trim()
            ),
            supporting_paper_ids: vec![paper.id.clone()],
            evidence: vec![finding.to_string()],
        };
        match input.mode.as_str() {
            "uncited" => claim.supporting_paper_ids.clear(),
            "unknown-id" => claim.supporting_paper_ids = vec![UNKNOWN_ID.to_string()],
            "fabricated-quote" => claim.evidence = vec![fabricate(finding, &paper.abstract_)],
            _ => {}
        }
        log::warn(format!(
            "bad-synthesis test fixture, mode {:?}: emitting claim C1 citing {:?}",
            input.mode, claim.supporting_paper_ids
        ));
        Ok(Output {
            claims: vec![claim],
        })
    }
}

export!(BadSynthesis);

/// The first valid paper with a key finding that is in its abstract.
fn quotable(input: &Input) -> Option<(&Paper, &str)> {
    input.papers.iter().filter(|p| p.valid).find_map(|p| {
        let summary = input.summaries.iter().find(|s| s.paper_id == p.id)?;
        let finding = summary
            .key_findings
            .iter()
            .find(|f| !f.trim().is_empty() && p.abstract_.contains(f.as_str()))?;
        Some((p, finding.as_str()))
    })
}

/// Lowercased, whitespace runs collapsed: how a citation check compares.
fn normalise(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// `quote` with the digits of its numbers shifted by one (`4.1%` -> `5.2%`): plausible,
/// but not in `abstract_` even after normalising whitespace and case (a
/// sentence is appended in the unlikely case it is).
fn fabricate(quote: &str, abstract_: &str) -> String {
    let mut shifted = String::with_capacity(quote.len());
    let mut in_word = false;
    for c in quote.chars() {
        shifted.push(match c.to_digit(10) {
            // Digits of numbers only: `F1` and `recall@20` stay as they are.
            Some(d) if !in_word => char::from_digit((d + 1) % 10, 10).unwrap_or(c),
            _ => c,
        });
        in_word = c.is_alphabetic() || c == '@' || (in_word && c.is_ascii_digit());
    }
    if normalise(abstract_).contains(&normalise(&shifted)) {
        format!("{shifted} This sentence was fabricated by the bad-synthesis fixture.")
    } else {
        shifted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ABSTRACT: &str =
        "We propose X. Results show that X improves F1 by 4.1 points. However, X is slow.";

    fn input(mode: &str) -> Input {
        Input {
            query: "x".to_string(),
            papers: vec![
                Paper {
                    id: "bad".to_string(),
                    title: "Invalid".to_string(),
                    authors: vec![],
                    abstract_: ABSTRACT.to_string(),
                    url: String::new(),
                    source: String::new(),
                    published: String::new(),
                    year: 0,
                    topics: vec![],
                    score: 2.0,
                    valid: false,
                    issues: vec!["missing url".to_string()],
                },
                Paper {
                    id: "p1".to_string(),
                    title: "Paper one".to_string(),
                    authors: vec![],
                    abstract_: ABSTRACT.to_string(),
                    url: "https://papers.example.org/p1".to_string(),
                    source: String::new(),
                    published: String::new(),
                    year: 2020,
                    topics: vec![],
                    score: 1.0,
                    valid: true,
                    issues: vec![],
                },
            ],
            summaries: ["bad", "p1"]
                .iter()
                .map(|id| PaperSummary {
                    paper_id: id.to_string(),
                    title: String::new(),
                    main_contributions: vec![],
                    methodology: String::new(),
                    key_findings: vec![
                        "Results show that X improves F1 by 4.1 points.".to_string(),
                    ],
                    limitations: vec![],
                })
                .collect(),
            mode: mode.to_string(),
        }
    }

    fn claim(mode: &str) -> Claim {
        let mut out = BadSynthesis::run(input(mode)).unwrap();
        assert_eq!(out.claims.len(), 1);
        out.claims.remove(0)
    }

    #[test]
    fn correct_by_default() {
        let c = claim("correct");
        assert_eq!(c.id, "C1");
        assert_eq!(c.supporting_paper_ids, ["p1"]);
        assert_eq!(
            c.evidence,
            ["Results show that X improves F1 by 4.1 points."]
        );
        assert!(ABSTRACT.contains(&c.evidence[0]));
        assert_eq!(claim(""), c);
    }

    #[test]
    fn each_mode_breaks_one_thing() {
        let c = claim("uncited");
        assert!(c.supporting_paper_ids.is_empty());
        assert!(ABSTRACT.contains(&c.evidence[0]));

        let c = claim("unknown-id");
        assert_eq!(c.supporting_paper_ids, [UNKNOWN_ID]);

        let c = claim("fabricated-quote");
        assert_eq!(c.supporting_paper_ids, ["p1"]);
        assert_eq!(
            c.evidence,
            ["Results show that X improves F1 by 5.2 points."]
        );
        assert!(!normalise(ABSTRACT).contains(&normalise(&c.evidence[0])));
    }

    #[test]
    fn fabrication_changes_numbers_only() {
        assert_eq!(
            fabricate("F1 and recall@20 reach 80.2% in 2021.", ""),
            "F1 and recall@20 reach 91.3% in 3132."
        );
    }

    #[test]
    fn fabricated_quotes_never_match() {
        let abstract_ = "No digits here. No digits here.";
        let f = fabricate("No digits here.", abstract_);
        assert!(!normalise(abstract_).contains(&normalise(&f)), "{f}");
    }

    #[test]
    fn nothing_quotable_is_an_error() {
        let mut i = input("uncited");
        i.summaries.clear();
        assert_eq!(BadSynthesis::run(i).unwrap_err().code, "invalid-input");
    }
}
