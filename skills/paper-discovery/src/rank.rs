//! Tokenising and BM25 ranking.

use std::collections::{BTreeMap, BTreeSet};

/// BM25 term-frequency saturation.
pub const K1: f64 = 1.2;
/// BM25 length normalisation.
pub const B: f64 = 0.75;
/// How many times a title word counts, relative to an abstract word.
pub const TITLE_WEIGHT: u32 = 2;

/// Words too common to say anything about relevance.
const STOPWORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been",
    "between", "both", "but", "by", "can", "do", "does", "each", "for", "from", "had", "has",
    "have", "how", "if", "in", "into", "is", "it", "its", "more", "most", "new", "not", "of", "on",
    "or", "other", "our", "over", "should", "so", "such", "than", "that", "the", "their", "them",
    "then", "there", "these", "they", "this", "those", "through", "to", "under", "up", "use",
    "using", "via", "was", "we", "were", "what", "when", "where", "which", "while", "who", "why",
    "will", "with", "within", "without", "would",
];

/// The searchable words of `text`: lowercased, split on anything that is not
/// a letter or digit, stopwords and one-character words dropped, plurals
/// reduced to the singular.
pub fn tokenize(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .filter(|w| w.chars().count() > 1 && !STOPWORDS.contains(&w.as_str()))
        .map(|w| stem(&w))
        .collect()
}

/// A light stemmer: English plurals only (`networks` -> `network`,
/// `queries` -> `query`, `sandboxes` -> `sandbox`), so that a query matches
/// both forms without conflating different words.
pub fn stem(word: &str) -> String {
    let n = word.len();
    if n <= 3 || !word.is_ascii() {
        return word.to_string();
    }
    if let Some(base) = word.strip_suffix("ies")
        && n > 4
    {
        return format!("{base}y");
    }
    for suffix in ["sses", "xes", "ches", "shes", "zes"] {
        if word.ends_with(suffix) {
            return word[..n - 2].to_string();
        }
    }
    if word.ends_with('s')
        && !(word.ends_with("ss") || word.ends_with("us") || word.ends_with("is"))
    {
        return word[..n - 1].to_string();
    }
    word.to_string()
}

/// One document of the index: its weighted term frequencies and length.
struct Doc {
    tf: BTreeMap<String, u32>,
    len: u32,
}

/// A BM25 index over (title, abstract) pairs.
pub struct Index {
    docs: Vec<Doc>,
    df: BTreeMap<String, u32>,
    avg_len: f64,
}

impl Index {
    /// Indexes `docs` (title, abstract); the title's words count
    /// [`TITLE_WEIGHT`] times.
    pub fn new<'a>(docs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut df: BTreeMap<String, u32> = BTreeMap::new();
        let docs: Vec<Doc> = docs
            .into_iter()
            .map(|(title, abstract_)| {
                let mut tf: BTreeMap<String, u32> = BTreeMap::new();
                let mut len = 0u32;
                for (text, weight) in [(title, TITLE_WEIGHT), (abstract_, 1)] {
                    for token in tokenize(text) {
                        *tf.entry(token).or_default() += weight;
                        len += weight;
                    }
                }
                for term in tf.keys() {
                    *df.entry(term.clone()).or_default() += 1;
                }
                Doc { tf, len }
            })
            .collect();
        let total: u64 = docs.iter().map(|d| u64::from(d.len)).sum();
        let avg_len = if docs.is_empty() {
            0.0
        } else {
            total as f64 / docs.len() as f64
        };
        Index { docs, df, avg_len }
    }

    /// The BM25 score of every document for `query_terms` (each distinct
    /// term counted once), in document order.
    pub fn scores(&self, query_terms: &[String]) -> Vec<f64> {
        let terms: BTreeSet<&String> = query_terms.iter().collect();
        let n = self.docs.len() as f64;
        let idf: Vec<(&String, f64)> = terms
            .into_iter()
            .filter_map(|term| {
                let df = f64::from(*self.df.get(term)?);
                Some((term, (1.0 + (n - df + 0.5) / (df + 0.5)).ln()))
            })
            .collect();
        self.docs
            .iter()
            .map(|doc| {
                let norm = if self.avg_len > 0.0 {
                    K1 * (1.0 - B + B * f64::from(doc.len) / self.avg_len)
                } else {
                    K1
                };
                idf.iter()
                    .map(|(term, idf)| match doc.tf.get(*term) {
                        Some(&tf) => {
                            let tf = f64::from(tf);
                            idf * tf * (K1 + 1.0) / (tf + norm)
                        }
                        None => 0.0,
                    })
                    .sum()
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenize_lowercases_splits_and_drops_stopwords() {
        assert_eq!(
            tokenize("Retrieval-Augmented Generation for the QA of 2024!"),
            ["retrieval", "augmented", "generation", "qa", "2024"]
        );
        assert_eq!(tokenize("a I x = y"), Vec::<String>::new());
        assert_eq!(tokenize("Éte ÉTÉ"), ["éte", "été"]);
    }

    #[test]
    fn stem_reduces_plurals_only() {
        for (word, stemmed) in [
            ("networks", "network"),
            ("queries", "query"),
            ("sandboxes", "sandbox"),
            ("processes", "process"),
            ("patches", "patch"),
            ("process", "process"),
            ("corpus", "corpus"),
            ("analysis", "analysis"),
            ("gas", "gas"),
            ("retrieval", "retrieval"),
        ] {
            assert_eq!(stem(word), stemmed, "{word}");
        }
    }

    #[test]
    fn bm25_prefers_rarer_terms_titles_and_shorter_documents() {
        let index = Index::new([
            (
                "Graph networks",
                "We study graph networks on citation graphs.",
            ),
            (
                "Something else",
                "A long abstract that mentions graph once among many many other words here.",
            ),
            ("Plasma", "Tokamak plasma disruption forecasting."),
            ("Unrelated", "Nothing to see."),
        ]);
        let s = index.scores(&tokenize("graph networks"));
        assert!(s[0] > s[1] && s[1] > 0.0, "{s:?}");
        assert_eq!((s[2], s[3]), (0.0, 0.0));
        // The rare term outweighs the common one.
        let s = index.scores(&tokenize("tokamak graph"));
        assert!(s[2] > s[1], "{s:?}");
        // Repeated query terms count once; unknown terms add nothing.
        assert_eq!(
            index.scores(&tokenize("graph graph zebra")),
            index.scores(&tokenize("graph"))
        );
    }

    #[test]
    fn bm25_matches_the_formula() {
        let index = Index::new([("t", "alpha beta"), ("u", "beta gamma gamma")]);
        let s = index.scores(&tokenize("alpha"));
        // N = 2, df = 1; doc 0 has length 2, avg length 2.5, tf 1.
        let idf = (1.0f64 + (2.0 - 1.0 + 0.5) / (1.0 + 0.5)).ln();
        let expected = idf * 1.0 * (K1 + 1.0) / (1.0 + K1 * (1.0 - B + B * 2.0 / 2.5));
        assert!((s[0] - expected).abs() < 1e-12, "{} vs {expected}", s[0]);
        assert_eq!(s[1], 0.0);
    }

    #[test]
    fn an_empty_index_scores_nothing() {
        let index = Index::new(std::iter::empty());
        assert!(index.scores(&tokenize("anything")).is_empty());
    }
}
