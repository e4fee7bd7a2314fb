//! `paper-compare`: a comparison matrix of papers over method, data,
//! results, limitations and year. Cells are phrases copied from the papers'
//! extractive summaries (and, for the data they use, from their abstracts),
//! so the table never says more than the papers do.

skillhost_sdk::generate!(
    "paper-compare",
    with: { "skillhost:research/types@0.1.0": generate },
    additional_derives: [PartialEq],
);

// The same sentence splitter as `paper-summarize`, so that sentences taken
// from the abstract here are cut exactly as the summaries' are.
#[path = "../../paper-summarize/src/sentences.rs"]
mod sentences;

use std::collections::BTreeMap;

use skillhost_sdk::log;

/// The columns of the matrix, in order.
pub const DIMENSIONS: [&str; 5] = ["method", "data", "results", "limitations", "year"];
/// What a cell says when the paper says nothing about its dimension.
pub const NOT_STATED: &str = "not stated";
/// Cells longer than this many words are shortened.
pub const MAX_CELL_WORDS: usize = 40;
/// A shortened cell keeps at least this many words.
const MIN_CELL_WORDS: usize = 12;

/// Phrases (matched at the start of a word, lowercased) that mark a sentence
/// as describing the data a paper uses, with their weight.
const DATA_CUES: &[(&str, u32)] = &[
    ("dataset", 2),
    ("data set", 2),
    ("benchmark", 2),
    ("test set", 2),
    ("evaluate on", 2),
    ("evaluated on", 2),
    ("results on", 2),
    ("evaluation uses", 2),
    ("experiments use", 2),
    ("experiments cover", 2),
    ("public data", 2),
    ("corpus of", 2),
    ("collected from", 2),
    ("drawn from", 2),
    ("trained on", 2),
    ("traces", 2),
    ("suite", 1),
    ("corpus", 1),
    ("corpora", 1),
    ("data", 1),
    ("collection", 1),
];

/// Phrases that make a sentence a limitation rather than a data statement
/// (`we only evaluate on X` is about scope, not data).
const LIMITATION_CUES: &[&str] = &[
    "however",
    "limitation",
    "does not",
    "cannot",
    "future work",
    "we only",
    "remains unclear",
    "limited to",
];

struct PaperCompare;

impl Guest for PaperCompare {
    skillhost_sdk::manifest! {
        name: "Paper comparison",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 2,
    }

    fn run(input: Input) -> Result<ComparisonMatrix, SkillError> {
        if input.papers.is_empty() {
            return Err(SkillError::invalid_input("no papers to compare"));
        }
        let summaries: BTreeMap<&str, &PaperSummary> = input
            .summaries
            .iter()
            .rev() // so the first summary of a paper wins
            .map(|s| (s.paper_id.as_str(), s))
            .collect();
        let rows = input
            .papers
            .iter()
            .map(|paper| {
                let summary = summaries.get(paper.id.as_str()).ok_or_else(|| {
                    SkillError::invalid_input(format!(
                        "paper `{}` has no summary; summarise every paper before comparing",
                        paper.id
                    ))
                })?;
                Ok(row(paper, summary))
            })
            .collect::<Result<Vec<_>, SkillError>>()?;
        log::info(format!(
            "compared {} papers over {} dimensions ({} without a data statement)",
            rows.len(),
            DIMENSIONS.len(),
            rows.iter().filter(|r| r.data == NOT_STATED).count()
        ));
        Ok(ComparisonMatrix {
            dimensions: DIMENSIONS.iter().map(|d| d.to_string()).collect(),
            rows,
        })
    }
}

export!(PaperCompare);

fn row(paper: &Paper, summary: &PaperSummary) -> ComparisonRow {
    let first_or_not_stated = |v: &[String]| {
        v.iter()
            .find(|s| !s.trim().is_empty())
            .map(|s| shorten(s))
            .unwrap_or_else(|| NOT_STATED.to_string())
    };
    let method = if summary.methodology.trim().is_empty() {
        NOT_STATED.to_string()
    } else {
        shorten(&summary.methodology)
    };
    ComparisonRow {
        paper_id: paper.id.clone(),
        title: paper.title.clone(),
        year: paper.year,
        method,
        data: data_sentence(paper, summary)
            .map(shorten)
            .unwrap_or_else(|| NOT_STATED.to_string()),
        results: first_or_not_stated(&summary.key_findings),
        limitations: first_or_not_stated(&summary.limitations),
    }
}

/// Whether `cue` starts a word of `lower`.
fn has_cue(lower: &str, cue: &str) -> bool {
    lower.match_indices(cue).any(|(i, _)| {
        !lower[..i]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric)
    })
}

/// How strongly `sentence` describes the data a paper uses; 0 when it does
/// not, or when it states a limitation.
fn data_score(sentence: &str) -> u32 {
    let lower = sentence.to_lowercase();
    if LIMITATION_CUES.iter().any(|cue| has_cue(&lower, cue)) {
        return 0;
    }
    DATA_CUES
        .iter()
        .filter(|(cue, _)| has_cue(&lower, cue))
        .map(|(_, weight)| weight)
        .sum()
}

/// The sentence that best describes the data the paper uses (the earliest
/// among equals): from its abstract, or from its summary when the abstract
/// is empty.
fn data_sentence<'a>(paper: &'a Paper, summary: &'a PaperSummary) -> Option<&'a str> {
    let mut candidates = sentences::split(&paper.abstract_);
    if candidates.is_empty() {
        candidates = std::iter::once(summary.methodology.as_str())
            .chain(summary.main_contributions.iter().map(String::as_str))
            .chain(summary.key_findings.iter().map(String::as_str))
            .collect();
    }
    candidates
        .into_iter()
        .map(|s| (data_score(s), s))
        .filter(|(score, _)| *score > 0)
        .min_by_key(|(score, _)| std::cmp::Reverse(*score))
        .map(|(_, s)| s)
}

/// `text` unchanged when it has at most [`MAX_CELL_WORDS`] words; otherwise
/// its beginning up to the last clause boundary (`,` `;` `:`) that keeps at
/// least [`MIN_CELL_WORDS`] words (or simply its first words), then `…`.
/// Whitespace runs become single spaces, so cells fit a table.
pub fn shorten(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() <= MAX_CELL_WORDS {
        return words.join(" ");
    }
    let head = &words[..MAX_CELL_WORDS];
    let cut = (MIN_CELL_WORDS..=MAX_CELL_WORDS)
        .rev()
        .find(|&n| head[n - 1].ends_with([',', ';', ':']))
        .unwrap_or(MAX_CELL_WORDS);
    let kept = head[..cut].join(" ");
    format!("{}…", kept.trim_end_matches([',', ';', ':']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper(id: &str, year: u32, abstract_: &str) -> Paper {
        Paper {
            id: id.to_string(),
            title: format!("Title {id}"),
            authors: vec![],
            abstract_: abstract_.to_string(),
            url: String::new(),
            source: String::new(),
            published: String::new(),
            year,
            topics: vec![],
            score: 0.0,
            valid: true,
            issues: vec![],
        }
    }

    fn summary(id: &str, method: &str, findings: &[&str], limitations: &[&str]) -> PaperSummary {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        PaperSummary {
            paper_id: id.to_string(),
            title: format!("Title {id}"),
            main_contributions: vec!["We propose X.".to_string()],
            methodology: method.to_string(),
            key_findings: own(findings),
            limitations: own(limitations),
        }
    }

    #[test]
    fn builds_one_row_per_paper_in_input_order() {
        let papers = vec![
            paper(
                "b",
                2021,
                "We propose X. We evaluate on the FEVER benchmark. X improves F1 by 2 points.",
            ),
            paper("a", 2019, "We propose Y. Y is fast."),
        ];
        let summaries = vec![
            summary("a", "Y uses a cache.", &[], &[]),
            summary(
                "b",
                "Concretely, X mines negatives.",
                &["X improves F1 by 2 points."],
                &["However, X is slow."],
            ),
            summary("unrelated", "Z.", &[], &[]),
        ];
        let m = PaperCompare::run(Input { papers, summaries }).unwrap();
        assert_eq!(m.dimensions, DIMENSIONS);
        let ids: Vec<_> = m.rows.iter().map(|r| r.paper_id.as_str()).collect();
        assert_eq!(ids, ["b", "a"]);
        let b = &m.rows[0];
        assert_eq!(b.title, "Title b");
        assert_eq!(b.year, 2021);
        assert_eq!(b.method, "Concretely, X mines negatives.");
        assert_eq!(b.data, "We evaluate on the FEVER benchmark.");
        assert_eq!(b.results, "X improves F1 by 2 points.");
        assert_eq!(b.limitations, "However, X is slow.");
        let a = &m.rows[1];
        assert_eq!(
            (a.data.as_str(), a.results.as_str(), a.limitations.as_str()),
            (NOT_STATED, NOT_STATED, NOT_STATED)
        );
    }

    #[test]
    fn picks_the_strongest_data_sentence() {
        let p = paper(
            "p",
            2020,
            "We compress the whole corpus. We evaluate on the Weather dataset. \
             However, the benchmark data are small. Our evaluation uses HotpotQA.",
        );
        let s = summary("p", "We train a model.", &[], &[]);
        assert_eq!(
            data_sentence(&p, &s),
            Some("We evaluate on the Weather dataset.")
        );
        // Limitations are not data statements; "benchmark" must start a word.
        assert_eq!(data_score("However, the benchmark data are small."), 0);
        assert_eq!(data_score("We rebenchmarked nothing."), 0);
        assert!(data_score("Experiments cover 3 benchmarks.") > 0);
        assert!(data_score("Our evaluation uses HotpotQA.") > data_score("the whole corpus"));
        // Without an abstract, the summary's sentences are searched.
        let p = paper("p", 2020, "");
        let s = summary("p", "We train on the Traffic dataset.", &[], &[]);
        assert_eq!(
            data_sentence(&p, &s),
            Some("We train on the Traffic dataset.")
        );
    }

    #[test]
    fn a_paper_without_summary_is_an_error() {
        let e = PaperCompare::run(Input {
            papers: vec![paper("p", 2020, "A.")],
            summaries: vec![],
        })
        .unwrap_err();
        assert_eq!(e.code, "invalid-input");
        assert!(e.message.contains("`p`"), "{}", e.message);
        let e = PaperCompare::run(Input {
            papers: vec![],
            summaries: vec![],
        })
        .unwrap_err();
        assert_eq!(e.code, "invalid-input");
    }

    #[test]
    fn shortens_long_cells_at_clause_boundaries() {
        assert_eq!(shorten("Short  and\nsweet."), "Short and sweet.");
        let long = format!(
            "{}, {}.",
            "word ".repeat(20).trim(),
            "more ".repeat(30).trim()
        );
        let s = shorten(&long);
        assert_eq!(s, format!("{}…", "word ".repeat(20).trim()));
        let no_comma = "w ".repeat(50);
        assert_eq!(shorten(&no_comma), format!("{}…", "w ".repeat(40).trim()));
        // Every shortened cell is a verbatim prefix plus the ellipsis.
        let prefix = s.trim_end_matches('…');
        assert!(long.starts_with(prefix));
    }
}
