//! The citation check: every claim cites enough sources, every cited id is a
//! source, and every quote a claim carries is in the text of a source it
//! cites.
//!
//! Quotes are compared after normalising whitespace (every run of it is one
//! space, ends trimmed) and case, so a quote that re-flows a line still
//! matches, and a quote with one changed word does not. A quote must be
//! long enough to say something ([`QuoteRule`]: at least 15 characters and
//! 3 words by default, so `"a"` or `"."`, which any text holds, prove
//! nothing), and it must match whole words: it starts and ends at word
//! boundaries of the source (`"ransform"` is not in "Transformer"). For
//! every quote found, the check records where: the source id and the
//! character offsets (Unicode scalar values, end exclusive) of the match in
//! the source's original text, so an auditor can highlight it.

use std::collections::HashMap;
use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// What to check: the claims and sources, and which of their fields mean what.
#[derive(Debug, Clone, PartialEq)]
pub struct CitationInputs {
    pub claims: Vec<Value>,
    pub sources: Vec<Value>,
    /// Claim field holding the cited ids: a list, or a single id.
    pub cites: String,
    /// Source field holding its id.
    pub source_id: String,
    /// Claim field holding a quote or a list of quotes; empty: no quotes.
    pub quote: String,
    /// Source field holding the text quotes must come from.
    pub source_text: String,
    /// Distinct sources each claim must cite.
    pub min_per_claim: usize,
    /// How long a quote must be.
    pub quote_rule: QuoteRule,
}

/// How long a quote must be to count, after normalisation: at least
/// `min_chars` characters and `min_words` words (a word: a run of
/// non-space characters holding a letter or a digit). A scenario's
/// citation check may set either (`min_quote_chars`, `min_quote_words`),
/// to 1 at the least.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuoteRule {
    pub min_chars: usize,
    pub min_words: usize,
}

/// The default [`QuoteRule`]'s characters: a short clause ("28.4 BLEU on
/// WMT" is 16).
pub const DEFAULT_MIN_QUOTE_CHARS: usize = 15;
/// The default [`QuoteRule`]'s words.
pub const DEFAULT_MIN_QUOTE_WORDS: usize = 3;

impl Default for QuoteRule {
    fn default() -> Self {
        QuoteRule {
            min_chars: DEFAULT_MIN_QUOTE_CHARS,
            min_words: DEFAULT_MIN_QUOTE_WORDS,
        }
    }
}

impl QuoteRule {
    /// The characters and words of a normalised quote, when it is shorter
    /// than the rule allows.
    fn too_short(&self, normalized: &str) -> Option<(usize, usize)> {
        let chars = normalized.chars().count();
        let words = normalized
            .split(' ')
            .filter(|word| word.chars().any(char::is_alphanumeric))
            .count();
        (chars < self.min_chars || words < self.min_words).then_some((chars, words))
    }
}

impl CitationInputs {
    /// Inputs from evaluated `claims` and `sources`, which must be lists.
    // A problem is built only when a check fails, never on the way of one
    // that holds: its size costs nothing there.
    #[allow(clippy::result_large_err)]
    pub fn from_values(
        claims: Value,
        sources: Value,
        cites: &str,
        source_id: &str,
        quote: &str,
        source_text: &str,
        min_per_claim: usize,
    ) -> Result<CitationInputs, CitationError> {
        let list = |what: &'static str, value: Value| match value {
            Value::Array(items) => Ok(items),
            other => Err(CitationProblem::NotAList {
                what,
                found: kind(&other).to_string(),
            }),
        };
        let (claims, sources) = match (list("claims", claims), list("sources", sources)) {
            (Ok(c), Ok(s)) => (c, s),
            (c, s) => {
                let problems = [c.err(), s.err()].into_iter().flatten().collect();
                return Err(CitationError { problems });
            }
        };
        Ok(CitationInputs {
            claims,
            sources,
            cites: cites.to_string(),
            source_id: source_id.to_string(),
            quote: quote.to_string(),
            source_text: source_text.to_string(),
            min_per_claim,
            quote_rule: QuoteRule::default(),
        })
    }
}

/// A quote found in a cited source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VerifiedQuote {
    /// Index of the claim in the claims list.
    pub claim_index: usize,
    pub source_id: String,
    /// The quote as the claim gives it.
    pub quote: String,
    /// Character offsets of the match in the source's original text.
    pub start: usize,
    pub end: usize,
    /// The source's original text between `start` and `end`.
    pub matched: String,
}

/// Every problem found: the check does not stop at the first.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct CitationError {
    pub problems: Vec<CitationProblem>,
}

impl fmt::Display for CitationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "citation check failed ({n} problem{}): ",
            if n == 1 { "" } else { "s" }
        )?;
        for (i, problem) in self.problems.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{problem}")?;
        }
        Ok(())
    }
}

/// A claim, as errors name it: its index, and its id and text when it has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClaimRef {
    pub index: usize,
    pub id: Option<String>,
    pub text: Option<String>,
}

impl fmt::Display for ClaimRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "claim {}", self.index)?;
        match (&self.id, &self.text) {
            (Some(id), Some(text)) => write!(f, " ({id}: {})", quoted(text, 80)),
            (Some(id), None) => write!(f, " ({id})"),
            (None, Some(text)) => write!(f, " ({})", quoted(text, 80)),
            (None, None) => Ok(()),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CitationProblem {
    #[error("`{what}` must be a list, but it is {found}")]
    NotAList { what: &'static str, found: String },
    #[error("{claim} is {found}, not an object")]
    ClaimNotObject { claim: ClaimRef, found: String },
    #[error("source {index} has no `{field}` (a string or number id)")]
    SourceWithoutId { index: usize, field: String },
    #[error("{claim}: `{field}` must be a list of source ids, but it is {found}")]
    BadCites {
        claim: ClaimRef,
        field: String,
        found: String,
    },
    #[error(
        "{claim} cites {cited} source{}, but every claim must cite at least {min} (field `{field}`)",
        if *.cited == 1 { "" } else { "s" }
    )]
    Uncited {
        claim: ClaimRef,
        field: String,
        cited: usize,
        min: usize,
    },
    #[error("{claim} cites `{id}`, which is not among the {known} sources")]
    UnknownSource {
        claim: ClaimRef,
        id: String,
        known: usize,
    },
    #[error("{claim}: `{field}` must be a quote or a list of quotes, but it is {found}")]
    BadQuote {
        claim: ClaimRef,
        field: String,
        found: String,
    },
    #[error("{claim} has an empty quote")]
    EmptyQuote { claim: ClaimRef },
    #[error(
        "{claim} quotes {}, {chars} character{} and {words} word{}, shorter than a quote may be \
         (at least {min_chars} characters and {min_words} words: the check's \
         `min_quote_chars` and `min_quote_words`)",
        quoted(.quote, 120),
        if *.chars == 1 { "" } else { "s" },
        if *.words == 1 { "" } else { "s" }
    )]
    QuoteTooShort {
        claim: ClaimRef,
        quote: String,
        chars: usize,
        words: usize,
        min_chars: usize,
        min_words: usize,
    },
    #[error("cited source `{source_id}` has no text in `{field}` to find quotes in")]
    SourceWithoutText { source_id: String, field: String },
    #[error(
        "{claim} quotes {}, which is not in the text of the source{} it cites ({})",
        quoted(.quote, 120),
        if .cited.len() == 1 { "" } else { "s" },
        .cited.join(", ")
    )]
    QuoteNotFound {
        claim: ClaimRef,
        quote: String,
        cited: Vec<String>,
    },
    #[error(
        "{claim} quotes {}, which source `{source_id}` holds only as part of longer words \
         ({}); a quote starts and ends at word boundaries of its source",
        quoted(.quote, 120),
        quoted(.context, 120)
    )]
    QuoteSplitsWords {
        claim: ClaimRef,
        quote: String,
        source_id: String,
        /// The source's words around the first place it holds the quote.
        context: String,
    },
}

/// Checks `inputs`; on success, where every quote was found, claim by claim.
pub fn check_citations(inputs: &CitationInputs) -> Result<Vec<VerifiedQuote>, CitationError> {
    let mut problems = Vec::new();

    let mut by_id: HashMap<String, usize> = HashMap::new();
    for (index, source) in inputs.sources.iter().enumerate() {
        match source.get(&inputs.source_id).and_then(id_string) {
            Some(id) => {
                by_id.entry(id).or_insert(index);
            }
            None => problems.push(CitationProblem::SourceWithoutId {
                index,
                field: inputs.source_id.clone(),
            }),
        }
    }

    let mut normalized: HashMap<usize, Option<Normalized>> = HashMap::new();
    let mut reported_text = std::collections::BTreeSet::new();
    let mut verified = Vec::new();
    for (index, claim) in inputs.claims.iter().enumerate() {
        let claim_ref = claim_ref(index, claim);
        let Value::Object(fields) = claim else {
            problems.push(CitationProblem::ClaimNotObject {
                claim: claim_ref,
                found: kind(claim).to_string(),
            });
            continue;
        };

        // Cited ids, distinct, in order.
        let cited: Vec<String> = match fields.get(&inputs.cites) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let ids: Option<Vec<String>> = items.iter().map(id_string).collect();
                match ids {
                    Some(ids) => dedup(ids),
                    None => {
                        problems.push(CitationProblem::BadCites {
                            claim: claim_ref,
                            field: inputs.cites.clone(),
                            found: "a list with an item that is not a string or number".into(),
                        });
                        continue;
                    }
                }
            }
            Some(single) => match id_string(single) {
                Some(id) => vec![id],
                None => {
                    problems.push(CitationProblem::BadCites {
                        claim: claim_ref,
                        field: inputs.cites.clone(),
                        found: kind(single).to_string(),
                    });
                    continue;
                }
            },
        };
        if cited.len() < inputs.min_per_claim {
            problems.push(CitationProblem::Uncited {
                claim: claim_ref.clone(),
                field: inputs.cites.clone(),
                cited: cited.len(),
                min: inputs.min_per_claim,
            });
        }
        let mut known = Vec::new();
        for id in &cited {
            match by_id.get(id) {
                Some(&source) => known.push((id.clone(), source)),
                None => problems.push(CitationProblem::UnknownSource {
                    claim: claim_ref.clone(),
                    id: id.clone(),
                    known: inputs.sources.len(),
                }),
            }
        }

        if inputs.quote.is_empty() {
            continue;
        }
        let quotes: Vec<String> = match fields.get(&inputs.quote) {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(q)) => vec![q.clone()],
            Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
                .iter()
                .filter_map(|q| q.as_str().map(str::to_string))
                .collect(),
            Some(other) => {
                problems.push(CitationProblem::BadQuote {
                    claim: claim_ref,
                    field: inputs.quote.clone(),
                    found: kind(other).to_string(),
                });
                continue;
            }
        };
        if known.is_empty() {
            // Nothing to look in; the missing citation is already reported.
            continue;
        }
        for quote in quotes {
            let needle = normalize(&quote);
            if needle.text.is_empty() {
                problems.push(CitationProblem::EmptyQuote {
                    claim: claim_ref.clone(),
                });
                continue;
            }
            if let Some((chars, words)) = inputs.quote_rule.too_short(&needle.text) {
                problems.push(CitationProblem::QuoteTooShort {
                    claim: claim_ref.clone(),
                    quote,
                    chars,
                    words,
                    min_chars: inputs.quote_rule.min_chars,
                    min_words: inputs.quote_rule.min_words,
                });
                continue;
            }
            let mut found = None;
            // A cited source holding the quote only inside longer words.
            let mut inside_words = None;
            for (id, source) in &known {
                let haystack = normalized.entry(*source).or_insert_with(|| {
                    inputs.sources[*source]
                        .get(&inputs.source_text)
                        .and_then(Value::as_str)
                        .map(normalize)
                });
                let Some(haystack) = haystack else {
                    if reported_text.insert(*source) {
                        problems.push(CitationProblem::SourceWithoutText {
                            source_id: id.clone(),
                            field: inputs.source_text.clone(),
                        });
                    }
                    continue;
                };
                if let Some(at) = haystack.find_words(&needle.text) {
                    let start = haystack.origin[at];
                    let end = haystack.origin[at + needle.text.len() - 1] + 1;
                    found = Some((id.clone(), *source, start, end));
                    break;
                }
                if inside_words.is_none()
                    && let Some(at) = haystack.text.find(&needle.text)
                {
                    inside_words = Some((id.clone(), haystack.words_around(at, needle.text.len())));
                }
            }
            match (found, inside_words) {
                (Some((source_id, source, start, end)), _) => {
                    let text = inputs.sources[source]
                        .get(&inputs.source_text)
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    verified.push(VerifiedQuote {
                        claim_index: index,
                        source_id,
                        quote,
                        start,
                        end,
                        matched: text.chars().skip(start).take(end - start).collect(),
                    });
                }
                (None, Some((source_id, context))) => {
                    problems.push(CitationProblem::QuoteSplitsWords {
                        claim: claim_ref.clone(),
                        quote,
                        source_id,
                        context,
                    })
                }
                (None, None) => problems.push(CitationProblem::QuoteNotFound {
                    claim: claim_ref.clone(),
                    quote,
                    cited: known.iter().map(|(id, _)| id.clone()).collect(),
                }),
            }
        }
    }

    if problems.is_empty() {
        Ok(verified)
    } else {
        Err(CitationError { problems })
    }
}

/// Text with whitespace runs collapsed to one space, ends trimmed, and
/// lowercased; `origin[b]` is the index of the original character that
/// produced byte `b`.
struct Normalized {
    text: String,
    origin: Vec<usize>,
}

impl Normalized {
    /// Where `needle` first occurs in the text on word boundaries: neither
    /// its first character nor its last continues a word of the text (a
    /// letter or digit against a letter or digit).
    ///
    /// Every occurrence is a candidate, overlapping ones too, so the search
    /// is one Knuth–Morris–Pratt pass over the bytes (UTF-8 matches start on
    /// characters): linear in the text and the quote, whatever they repeat,
    /// where restarting a search after each occurrence that splits a word
    /// would compare the whole quote again at each.
    fn find_words(&self, needle: &str) -> Option<usize> {
        let word = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
        let (first, last) = (needle.chars().next(), needle.chars().next_back());
        let (text, pattern) = (self.text.as_bytes(), needle.as_bytes());
        if pattern.is_empty() || pattern.len() > text.len() {
            return None;
        }
        // fallback[i]: the longest proper prefix of pattern[..=i] that is
        // also its suffix.
        let mut fallback = vec![0usize; pattern.len()];
        let mut k = 0;
        for i in 1..pattern.len() {
            while k > 0 && pattern[i] != pattern[k] {
                k = fallback[k - 1];
            }
            if pattern[i] == pattern[k] {
                k += 1;
            }
            fallback[i] = k;
        }
        let mut matched = 0;
        for (i, &byte) in text.iter().enumerate() {
            while matched > 0 && byte != pattern[matched] {
                matched = fallback[matched - 1];
            }
            if byte == pattern[matched] {
                matched += 1;
            }
            if matched == pattern.len() {
                let end = i + 1;
                let at = end - pattern.len();
                let before = self.text[..at].chars().next_back();
                let after = self.text[end..].chars().next();
                let splits_a_word = (word(before) && word(first)) || (word(last) && word(after));
                if !splits_a_word {
                    return Some(at);
                }
                matched = fallback[matched - 1];
            }
        }
        None
    }

    /// The (normalised) text of bytes `at..at + len`, widened to the whole
    /// words it cuts into.
    fn words_around(&self, at: usize, len: usize) -> String {
        let word = |c: &char| c.is_alphanumeric();
        let start = self.text[..at]
            .char_indices()
            .rev()
            .take_while(|(_, c)| word(c))
            .last()
            .map_or(at, |(i, _)| i);
        let end = at + len;
        let end = end
            + self.text[end..]
                .chars()
                .take_while(word)
                .map(char::len_utf8)
                .sum::<usize>();
        self.text[start..end].to_string()
    }
}

fn normalize(original: &str) -> Normalized {
    let mut text = String::with_capacity(original.len());
    let mut origin = Vec::with_capacity(original.len());
    let mut space: Option<usize> = None;
    for (index, c) in original.chars().enumerate() {
        if c.is_whitespace() {
            space.get_or_insert(index);
            continue;
        }
        if let Some(at) = space.take()
            && !text.is_empty()
        {
            text.push(' ');
            origin.push(at);
        }
        for lower in c.to_lowercase() {
            text.push(lower);
            origin.extend(std::iter::repeat_n(index, lower.len_utf8()));
        }
    }
    Normalized { text, origin }
}

fn claim_ref(index: usize, claim: &Value) -> ClaimRef {
    let id = claim.get("id").and_then(id_string);
    let text = ["text", "claim", "statement", "title"]
        .iter()
        .find_map(|field| claim.get(*field).and_then(Value::as_str))
        .map(str::to_string);
    ClaimRef { index, id, text }
}

fn id_string(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

fn dedup(ids: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(ids.len());
    for id in ids {
        if !out.contains(&id) {
            out.push(id);
        }
    }
    out
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn quoted(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        format!("\"{text}\"")
    } else {
        let cut: String = text.chars().take(max - 1).collect();
        format!("\"{cut}…\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const ABSTRACT_1: &str = "We propose the Transformer, a model architecture\n  eschewing recurrence. \
                              It achieves 28.4 BLEU on WMT 2014.";
    const ABSTRACT_2: &str = "Ünïcode façade: BERT is   pre-trained on unlabeled text.";

    fn inputs(claims: Value) -> CitationInputs {
        CitationInputs::from_values(
            claims,
            json!([
                {"id": "p1", "abstract": ABSTRACT_1},
                {"id": "p2", "abstract": ABSTRACT_2},
                {"id": 7, "abstract": "Numeric ids work too."}
            ]),
            "supporting_paper_ids",
            "id",
            "evidence",
            "abstract",
            1,
        )
        .unwrap()
    }

    fn problems(claims: Value) -> Vec<CitationProblem> {
        check_citations(&inputs(claims)).unwrap_err().problems
    }

    #[test]
    fn uncited_claims_fail() {
        let p = problems(json!([
            {"id": "c1", "text": "Attention is enough.", "supporting_paper_ids": []},
            {"text": "No field at all."}
        ]));
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!(
            p[0].to_string(),
            "claim 0 (c1: \"Attention is enough.\") cites 0 sources, but every claim must cite \
             at least 1 (field `supporting_paper_ids`)"
        );
        assert!(matches!(&p[1], CitationProblem::Uncited { claim, .. } if claim.index == 1));
    }

    #[test]
    fn unknown_ids_fail() {
        let p = problems(json!([
            {"id": "c1", "supporting_paper_ids": ["p1", "p404"], "evidence": "28.4 BLEU on WMT"}
        ]));
        assert_eq!(
            p,
            vec![CitationProblem::UnknownSource {
                claim: ClaimRef {
                    index: 0,
                    id: Some("c1".into()),
                    text: None
                },
                id: "p404".into(),
                known: 3
            }]
        );
        assert_eq!(
            p[0].to_string(),
            "claim 0 (c1) cites `p404`, which is not among the 3 sources"
        );
    }

    #[test]
    fn fabricated_quotes_fail() {
        let p = problems(json!([
            {"text": "T wins", "supporting_paper_ids": ["p1", "p2"], "evidence": "achieves 35.0 BLEU"}
        ]));
        assert_eq!(p.len(), 1);
        assert_eq!(
            p[0].to_string(),
            "claim 0 (\"T wins\") quotes \"achieves 35.0 BLEU\", which is not in the text of the \
             sources it cites (p1, p2)"
        );
        // A quote from a source the claim does not cite does not count.
        let p = problems(json!([
            {"supporting_paper_ids": ["p2"], "evidence": "architecture eschewing recurrence"}
        ]));
        assert!(matches!(&p[0], CitationProblem::QuoteNotFound { cited, .. } if cited == &["p2"]));
    }

    #[test]
    fn whitespace_and_case_are_normalised() {
        let verified = check_citations(&inputs(json!([
            {"supporting_paper_ids": ["p1"], "evidence": "a MODEL architecture eschewing   recurrence."},
            {"supporting_paper_ids": "p2", "evidence": "  bert is pre-trained\ton UNLABELED text "}
        ])))
        .unwrap();
        assert_eq!(verified.len(), 2);
        assert_eq!(
            verified[0].matched,
            "a model architecture\n  eschewing recurrence."
        );
        assert_eq!(
            verified[1].matched,
            "BERT is   pre-trained on unlabeled text"
        );
    }

    #[test]
    fn offsets_are_characters_in_the_original_text() {
        let verified = check_citations(&inputs(json!([
            {"supporting_paper_ids": ["p2"], "evidence": "FAÇADE: bert is"},
            {"supporting_paper_ids": [7], "evidence": "Numeric ids work"}
        ])))
        .unwrap();
        let v = &verified[0];
        assert_eq!(v.source_id, "p2");
        // "Ünïcode " is 8 characters (10 bytes): offsets count characters.
        assert_eq!((v.start, v.end), (8, 23));
        let slice: String = ABSTRACT_2
            .chars()
            .skip(v.start)
            .take(v.end - v.start)
            .collect();
        assert_eq!(slice, "façade: BERT is");
        assert_eq!(verified[1].source_id, "7");
        assert_eq!((verified[1].start, verified[1].end), (0, 16));
    }

    #[test]
    fn quote_lists_check_every_quote() {
        let verified = check_citations(&inputs(json!([
            {"id": "c1", "supporting_paper_ids": ["p1", "p2"],
             "evidence": ["28.4 BLEU on WMT 2014", "pre-trained on unlabeled text"]}
        ])))
        .unwrap();
        assert_eq!(
            verified
                .iter()
                .map(|v| (v.source_id.as_str(), v.quote.as_str()))
                .collect::<Vec<_>>(),
            [
                ("p1", "28.4 BLEU on WMT 2014"),
                ("p2", "pre-trained on unlabeled text")
            ]
        );
        let p = problems(json!([
            {"id": "c1", "supporting_paper_ids": ["p1"],
             "evidence": ["28.4 BLEU on WMT", "a made up result", ""]}
        ]));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            matches!(&p[0], CitationProblem::QuoteNotFound { quote, .. } if quote == "a made up result")
        );
        assert!(matches!(&p[1], CitationProblem::EmptyQuote { .. }));
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let err = check_citations(&inputs(json!([
            {"id": "a", "supporting_paper_ids": []},
            {"id": "b", "supporting_paper_ids": ["nope"]},
            {"id": "c", "supporting_paper_ids": ["p1"], "evidence": "an invented finding"},
            "not an object",
            {"id": "d", "supporting_paper_ids": ["p1"], "evidence": 3}
        ])))
        .unwrap_err();
        assert_eq!(err.problems.len(), 5, "{err}");
        assert!(
            err.to_string()
                .starts_with("citation check failed (5 problems): claim 0 (a)")
        );
    }

    #[test]
    fn inputs_must_be_lists() {
        let err =
            CitationInputs::from_values(json!({}), json!("x"), "c", "id", "q", "t", 1).unwrap_err();
        assert_eq!(
            err.to_string(),
            "citation check failed (2 problems): `claims` must be a list, but it is an object; \
             `sources` must be a list, but it is a string"
        );
    }

    #[test]
    fn sources_without_text_are_named() {
        let inputs = CitationInputs::from_values(
            json!([{"cites": ["s"], "q": "a quote of the body"}]),
            json!([{"id": "s"}]),
            "cites",
            "id",
            "q",
            "body",
            1,
        )
        .unwrap();
        let p = check_citations(&inputs).unwrap_err().problems;
        assert_eq!(
            p[0].to_string(),
            "cited source `s` has no text in `body` to find quotes in"
        );
    }

    #[test]
    fn short_quotes_fail_whatever_they_match() {
        // Each of these is in p1's text, on word boundaries.
        for short in [
            "a",
            ".",
            "We",
            "28.4",
            "a model",
            "BLEU on WMT",
            "It achieves",
        ] {
            let p = problems(json!([{"supporting_paper_ids": ["p1"], "evidence": short}]));
            assert!(
                matches!(&p[..], [CitationProblem::QuoteTooShort { quote, .. }] if quote == short),
                "{short:?}: {p:?}"
            );
        }
        let p =
            problems(json!([{"id": "c1", "supporting_paper_ids": ["p1"], "evidence": " a\n "}]));
        assert_eq!(
            p[0].to_string(),
            "claim 0 (c1) quotes \" a\n \", 1 character and 1 word, shorter than a quote may be \
             (at least 15 characters and 3 words: the check's `min_quote_chars` and \
             `min_quote_words`)"
        );
        // Characters and words are counted after normalising: punctuation
        // alone is no word.
        let p =
            problems(json!([{"supporting_paper_ids": ["p1"], "evidence": "recurrence. It . ."}]));
        assert!(
            matches!(
                &p[0],
                CitationProblem::QuoteTooShort {
                    chars: 18,
                    words: 2,
                    ..
                }
            ),
            "{p:?}"
        );
        // Long enough on both counts passes.
        check_citations(&inputs(json!([
            {"supporting_paper_ids": ["p1"], "evidence": "28.4 BLEU on WMT"}
        ])))
        .unwrap();
    }

    #[test]
    fn the_quote_rule_is_the_checks_to_set() {
        let mut loose = inputs(json!([{"supporting_paper_ids": ["p1"], "evidence": "BLEU"}]));
        loose.quote_rule = QuoteRule {
            min_chars: 4,
            min_words: 1,
        };
        assert_eq!(check_citations(&loose).unwrap()[0].matched, "BLEU");
        let mut strict = inputs(json!([
            {"supporting_paper_ids": ["p1"], "evidence": "28.4 BLEU on WMT 2014"}
        ]));
        strict.quote_rule = QuoteRule {
            min_chars: 10,
            min_words: 6,
        };
        let p = check_citations(&strict).unwrap_err().problems;
        assert!(
            matches!(
                &p[0],
                CitationProblem::QuoteTooShort {
                    words: 5,
                    min_words: 6,
                    ..
                }
            ),
            "{p:?}"
        );
    }

    #[test]
    fn quotes_match_whole_words_only() {
        // In the text, but starting or ending inside a word of it.
        for (partial, around) in [
            ("ransformer, a model", "transformer, a model"),
            ("the Transformer, a mod", "the transformer, a model"),
            ("ropose the Transforme", "propose the transformer"),
            ("28.4 BLEU on WMT 201", "28.4 bleu on wmt 2014"),
            ("8.4 BLEU on WMT 2014", "28.4 bleu on wmt 2014"),
        ] {
            let p = problems(json!([{"supporting_paper_ids": ["p1"], "evidence": partial}]));
            match &p[..] {
                [
                    CitationProblem::QuoteSplitsWords {
                        source_id, context, ..
                    },
                ] => {
                    assert_eq!((source_id.as_str(), context.as_str()), ("p1", around));
                }
                other => panic!("{partial:?}: {other:?}"),
            }
        }
        let p = problems(json!([
            {"id": "c1", "supporting_paper_ids": ["p2", "p1"], "evidence": "ransformer, a model"}
        ]));
        assert_eq!(
            p[0].to_string(),
            "claim 0 (c1) quotes \"ransformer, a model\", which source `p1` holds only as part of \
             longer words (\"transformer, a model\"); a quote starts and ends at word boundaries \
             of its source"
        );
        // Punctuation at either end, and a later whole-word occurrence after
        // a partial one, are found.
        let text = "Retrained models win. (the trained models win.)";
        let inputs = CitationInputs::from_values(
            json!([
                {"cites": ["s"], "q": "trained models win."},
                {"cites": ["s"], "q": "(the trained models win.)"},
                {"cites": ["s"], "q": "the trained models"}
            ]),
            json!([{"id": "s", "text": text}]),
            "cites",
            "id",
            "q",
            "text",
            1,
        )
        .unwrap();
        let verified = check_citations(&inputs).unwrap();
        let at: Vec<(usize, usize)> = verified.iter().map(|v| (v.start, v.end)).collect();
        assert_eq!(at, [(27, 46), (22, 47), (23, 41)]);
    }

    /// A source and a quote that repeat themselves: every one of the
    /// source's 300,000 occurrences of the quote's start splits a word, and
    /// the search stays linear (restarted at each, it compared the 90 KB
    /// quote 300,000 times).
    #[test]
    fn repetitive_quotes_are_searched_in_linear_time() {
        let text = "ab ".repeat(300_000);
        let quote = format!("{}a", "ab ".repeat(30_000));
        let inputs = CitationInputs::from_values(
            json!([{"cites": ["s"], "q": quote}]),
            json!([{"id": "s", "text": text}]),
            "cites",
            "id",
            "q",
            "text",
            1,
        )
        .unwrap();
        let started = std::time::Instant::now();
        let p = check_citations(&inputs).unwrap_err().problems;
        assert!(
            matches!(&p[..], [CitationProblem::QuoteSplitsWords { .. }]),
            "{p:?}"
        );
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}
