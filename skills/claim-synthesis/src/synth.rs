//! The synthesis itself, on plain Rust types: grouping papers by topic,
//! writing claim texts from their findings, and choosing the evidence.

use std::collections::{BTreeMap, BTreeSet};

/// At most this many claims.
pub const MAX_CLAIMS: usize = 8;
/// At least this many claims, when the papers allow it.
pub const MIN_CLAIMS: usize = 3;
/// Claims shared by several papers, at most.
const MAX_GROUP_CLAIMS: usize = 5;
/// Single-paper claims are added until there are this many claims.
const SINGLE_CLAIMS_UP_TO: usize = 5;
/// A claim cites at most this many papers (one quote each).
pub const MAX_CITED: usize = 4;
/// Figures quoted in a claim's text, at most.
const MAX_FIGURES: usize = 3;

/// A paper usable as a source: valid, summarised, with sentences found
/// verbatim in its abstract.
#[derive(Debug, Clone)]
pub struct Source<'a> {
    pub id: &'a str,
    pub title: &'a str,
    pub abstract_: &'a str,
    /// Its topics, trimmed and lowercased, without duplicates, in order.
    pub topics: Vec<String>,
    /// Key findings found verbatim in the abstract.
    pub findings: Vec<&'a str>,
    /// Limitations found verbatim in the abstract that really state one.
    pub limitations: Vec<&'a str>,
}

impl<'a> Source<'a> {
    /// `None` when the abstract is empty or none of the summary's sentences
    /// is in it.
    pub fn new(
        id: &'a str,
        title: &'a str,
        abstract_: &'a str,
        topics: &'a [String],
        findings: &'a [String],
        limitations: &'a [String],
    ) -> Option<Self> {
        let verbatim = |v: &'a [String]| -> Vec<&'a str> {
            let mut out: Vec<&'a str> = Vec::new();
            for s in v {
                let s = s.as_str();
                if !s.trim().is_empty() && abstract_.contains(s) && !out.contains(&s) {
                    out.push(s);
                }
            }
            out
        };
        let findings = verbatim(findings);
        let limitations: Vec<&str> = verbatim(limitations)
            .into_iter()
            .filter(|s| !limitation_kinds(s).is_empty())
            .collect();
        if findings.is_empty() && limitations.is_empty() {
            return None;
        }
        let mut seen = BTreeSet::new();
        let topics = topics
            .iter()
            .map(|t| t.trim().to_lowercase())
            .filter(|t| !t.is_empty() && seen.insert(t.clone()))
            .collect();
        Some(Source {
            id,
            title,
            abstract_,
            topics,
            findings,
            limitations,
        })
    }

    fn name(&self) -> String {
        if self.title.trim().is_empty() {
            format!("Paper {}", self.id)
        } else {
            format!("\u{201c}{}\u{201d}", self.title.trim())
        }
    }
}

/// A claim before it gets its id.
#[derive(Debug, Clone, PartialEq)]
pub struct Draft {
    pub text: String,
    pub cites: Vec<String>,
    pub evidence: Vec<String>,
}

/// Lowercased words of at least 3 characters.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3)
        .map(str::to_lowercase)
        .collect()
}

/// `dense-retrieval` -> `dense retrieval`.
fn label_text(topic: &str) -> String {
    topic.replace(['-', '_'], " ")
}

/// How the texts write `topic`: `retrieval-augmented-generation` is
/// `retrieval-augmented generation` when an abstract spells it so
/// (`JIT compilation`, `over-smoothing`…); else [`label_text`].
fn label_as_written(topic: &str, texts: &[&str]) -> String {
    let words: Vec<&str> = topic.split(['-', '_']).filter(|w| !w.is_empty()).collect();
    if words.is_empty() || words.len() > 6 {
        return label_text(topic);
    }
    // Every way to join the words with a space or a hyphen, spaces first.
    // A spelling found mid-sentence wins; one found only at the start of a
    // sentence is used with its capital dropped (`Retrieval-augmented…`),
    // unless it is an acronym (`JIT…`).
    let mut at_start: Option<String> = None;
    let joins = 1usize << (words.len() - 1);
    for mask in 0..joins {
        let mut variant = words[0].to_lowercase();
        for (i, w) in words[1..].iter().enumerate() {
            variant.push(if mask & (1 << i) == 0 { ' ' } else { '-' });
            variant.push_str(&w.to_lowercase());
        }
        for text in texts {
            let lower = text.to_lowercase();
            if lower.len() != text.len() {
                continue; // offsets would not line up
            }
            for (i, _) in lower.match_indices(&variant) {
                let before = lower[..i].chars().next_back();
                let after = lower[i + variant.len()..].chars().next();
                if before.is_some_and(char::is_alphanumeric)
                    || after.is_some_and(char::is_alphanumeric)
                {
                    continue;
                }
                let found = &text[i..i + variant.len()];
                let prefix = lower[..i].trim_end();
                if !(prefix.is_empty() || prefix.ends_with(['.', '!', '?', ':'])) {
                    return found.to_string();
                }
                if at_start.is_none() {
                    let mut chars = found.chars();
                    let first = chars.next().unwrap_or(' ');
                    let acronym = chars.next().is_some_and(char::is_uppercase);
                    at_start = Some(if acronym {
                        found.to_string()
                    } else {
                        first.to_lowercase().chain(found.chars().skip(1)).collect()
                    });
                }
            }
        }
    }
    at_start.unwrap_or_else(|| label_text(topic))
}

fn has_cue(lower: &str, cue: &str) -> bool {
    lower.match_indices(cue).any(|(i, _)| {
        !lower[..i]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric)
    })
}

const GAIN_CUES: &[&str] = &[
    "improv",
    "outperform",
    "increase",
    "raise",
    "rise",
    "higher",
    "gain",
    "boost",
    "surpass",
    "above",
    "better",
];
const COST_CUES: &[&str] = &[
    "reduc", "faster", "speedup", "lower", "fewer", "cut", "saving", "cheaper",
];

/// The kinds of limitation a sentence states (empty if it states none).
pub fn limitation_kinds(sentence: &str) -> Vec<&'static str> {
    let lower = sentence.to_lowercase();
    let kinds: [(&str, &[&str]); 5] = [
        (
            "a narrow evaluation scope",
            &[
                "only evaluate",
                "we only",
                "limited to",
                "restricted to",
                "is limited",
                "are limited",
                "remains unclear",
                "unclear whether",
            ],
        ),
        (
            "cases the method does not handle",
            &[
                "does not", "do not", "cannot", "can not", "not yet", "fails to", "fail to",
            ],
        ),
        (
            "open problems left to future work",
            &["future work", "we leave"],
        ),
        (
            "smaller gains in hard cases",
            &["smaller on", "gains are smaller", "shrink"],
        ),
        (
            "other stated limitations",
            &["however", "limitation", "drawback", "caveat"],
        ),
    ];
    kinds
        .iter()
        .filter(|(_, cues)| cues.iter().any(|cue| has_cue(&lower, cue)))
        .map(|(kind, _)| *kind)
        .collect()
}

/// Whether `w` is a plain number: digits with optional `,` and `.` inside.
fn is_number(w: &str) -> bool {
    w.starts_with(|c: char| c.is_ascii_digit())
        && w.ends_with(|c: char| c.is_ascii_digit())
        && w.chars()
            .all(|c| c.is_ascii_digit() || c == '.' || c == ',')
}

/// The quantitative results in `sentence`: `12.5%`, `3.1x`, `4.2 points`,
/// `from 0.61 to 0.72`, in order.
pub fn figures(sentence: &str) -> Vec<String> {
    let words: Vec<&str> = sentence
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| matches!(c, '(' | ')' | ',' | ';' | ':' | '.')))
        .collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < words.len() {
        let w = words[i];
        if w == "from"
            && i + 3 < words.len()
            && is_number(words[i + 1].trim_end_matches('%'))
            && words[i + 2] == "to"
            && is_number(words[i + 3].trim_end_matches('%'))
        {
            out.push(format!("from {} to {}", words[i + 1], words[i + 3]));
            i += 4;
            continue;
        }
        if let Some(n) = w.strip_suffix(['%', 'x'])
            && is_number(n)
        {
            out.push(w.to_string());
        } else if is_number(w) && words.get(i + 1) == Some(&"points") {
            out.push(format!("{w} points"));
            i += 1;
        } else if is_number(w)
            && words.get(i + 1) == Some(&"percentage")
            && words.get(i + 2) == Some(&"points")
        {
            out.push(format!("{w} percentage points"));
            i += 2;
        }
        i += 1;
    }
    out
}

/// `Two`, `Three`… for the start of a sentence.
fn count_word(n: usize) -> String {
    const WORDS: [&str; 9] = [
        "Zero", "One", "Two", "Three", "Four", "Five", "Six", "Seven", "Eight",
    ];
    WORDS
        .get(n)
        .map_or_else(|| n.to_string(), |w| w.to_string())
}

/// `a`, `a and b`, `a, b and c`; `a; b and c` when an item has its own
/// `and`.
fn join_and(items: &[String]) -> String {
    let sep = if items.iter().any(|i| i.contains(" and ")) {
        "; "
    } else {
        ", "
    };
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [a, b] if sep == "; " => format!("{a}; {b}"),
        [init @ .., last] => format!("{} and {last}", init.join(sep)),
    }
}

/// What `evidence` says, as a clause: `reports gains over its baselines`…
fn direction(evidence: &[&str], plural: bool) -> &'static str {
    let lower: Vec<String> = evidence.iter().map(|s| s.to_lowercase()).collect();
    let any = |cues: &[&str]| lower.iter().any(|l| cues.iter().any(|c| has_cue(l, c)));
    match (any(GAIN_CUES), any(COST_CUES), plural) {
        (true, true, true) => "report both quality gains and lower costs than their baselines",
        (true, true, false) => "reports both quality gains and lower costs than its baselines",
        (true, false, true) => "consistently report gains over their baselines",
        (true, false, false) => "reports gains over its baselines",
        (false, true, true) => "report lower costs at comparable quality",
        (false, true, false) => "reports lower costs at comparable quality",
        (false, false, true) => "report measurable effects",
        (false, false, false) => "reports a measurable effect",
    }
}

/// `, with reported figures such as 4.1 points and 12%` (or nothing).
fn figures_clause(evidence: &[&str]) -> String {
    let mut seen = BTreeSet::new();
    let all: Vec<String> = evidence
        .iter()
        .flat_map(|s| figures(s))
        .filter(|f| seen.insert(f.clone()))
        .take(MAX_FIGURES)
        .collect();
    if all.is_empty() {
        String::new()
    } else {
        format!(", with reported figures such as {}", join_and(&all))
    }
}

/// How well `sentence` fits a claim about `topic`: shared words, plus cost
/// cues for the topics that are about cost.
fn relevance(sentence: &str, topic: &str) -> usize {
    let topic_words = words(&label_text(topic));
    let mut score = words(sentence).intersection(&topic_words).count();
    if ["efficiency", "scalability"].contains(&topic) {
        let lower = sentence.to_lowercase();
        if COST_CUES.iter().any(|c| has_cue(&lower, c)) {
            score += 2;
        }
    }
    score
}

/// Picks one of `sentences` for a new claim about `topic` (any topic when
/// `None`): the most relevant, preferring one no earlier claim quoted, then
/// the earliest.
fn pick<'a>(
    sentences: &[&'a str],
    used: &BTreeSet<&'a str>,
    topic: Option<&str>,
) -> Option<&'a str> {
    sentences
        .iter()
        .enumerate()
        .min_by_key(|(i, s)| {
            let rel = topic.map_or(0, |t| relevance(s, t));
            (std::cmp::Reverse(rel), used.contains(*s), *i)
        })
        .map(|(_, s)| *s)
}

/// The words after `marker` in `sentence` up to the first `,` `.` `;` or
/// ` on `/` while `/` and `, when they make a short name (at most 6 words,
/// with a capital letter: `REALM`, `the M4 competition data`).
fn name_after<'a>(sentence: &'a str, marker: &str) -> Vec<&'a str> {
    let mut out = Vec::new();
    for (i, _) in sentence.match_indices(marker) {
        if marker.starts_with(|c: char| c.is_alphabetic())
            && sentence[..i]
                .chars()
                .next_back()
                .is_some_and(char::is_alphanumeric)
        {
            continue;
        }
        let rest = &sentence[i + marker.len()..];
        let mut end = rest.len();
        for stop in [
            ",", ";", ". ", " on ", " while ", " and is ", " at ", " with ", " by ", " in ",
        ] {
            if let Some(j) = rest.find(stop) {
                end = end.min(j);
            }
        }
        let name = rest[..end].trim_end_matches('.').trim();
        let n_words = name.split_whitespace().count();
        let looks_like_a_name = name.chars().any(char::is_uppercase);
        if (1..=6).contains(&n_words) && looks_like_a_name {
            out.push(name);
        }
    }
    out
}

/// What the findings compare against: `outperforms X`, `over X`,
/// `compared with X`, `than X`.
pub fn baselines<'a>(sentences: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for s in sentences {
        for marker in [
            "outperforms ",
            "over ",
            "Compared with ",
            "compared with ",
            "than ",
        ] {
            for name in name_after(s, marker) {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// Where the findings were measured: `on X` (named data only).
pub fn benchmarks<'a>(sentences: &[&'a str]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for s in sentences {
        for marker in ["On ", "on "] {
            for name in name_after(s, marker) {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
    }
    out
}

/// ` (e.g. against A and B, on X and Y)`, either half, or nothing.
fn context_clause(evidence: &[&str]) -> String {
    let cap = |v: Vec<&str>| -> Vec<String> {
        v.into_iter()
            .take(MAX_FIGURES)
            .map(str::to_string)
            .collect()
    };
    let against = cap(baselines(evidence));
    let on = cap(benchmarks(evidence));
    match (against.is_empty(), on.is_empty()) {
        (true, true) => String::new(),
        (false, true) => format!(" (e.g. against {})", join_and(&against)),
        (true, false) => format!(" (e.g. on {})", join_and(&on)),
        (false, false) => format!(
            " (e.g. against {}, on {})",
            join_and(&against),
            join_and(&on)
        ),
    }
}

/// The claims for `sources` (in rank order, best first) and `query`.
pub fn synthesize(query: &str, sources: &[Source<'_>]) -> Vec<Draft> {
    let query_words = words(query);
    let mut claims: Vec<Draft> = Vec::new();
    let mut used: BTreeSet<&str> = BTreeSet::new();
    let mut cited: BTreeSet<&str> = BTreeSet::new();

    // 1. Topics shared by several papers with findings: largest groups
    //    first, then those closest to the query, then by name.
    let mut groups: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, s) in sources.iter().enumerate() {
        if s.findings.is_empty() {
            continue;
        }
        for topic in &s.topics {
            groups.entry(topic.as_str()).or_default().push(i);
        }
    }
    let mut groups: Vec<(&str, Vec<usize>)> =
        groups.into_iter().filter(|(_, m)| m.len() >= 2).collect();
    groups.sort_by_key(|(topic, members)| {
        let overlap = words(&label_text(topic)).intersection(&query_words).count();
        (
            std::cmp::Reverse(members.len()),
            std::cmp::Reverse(overlap),
            *topic,
        )
    });
    let mut seen_members: BTreeSet<Vec<usize>> = BTreeSet::new();
    for (topic, members) in groups {
        if claims.len() >= MAX_GROUP_CLAIMS {
            break;
        }
        let members: Vec<usize> = members.into_iter().take(MAX_CITED).collect();
        if !seen_members.insert(members.clone()) {
            continue;
        }
        let mut evidence = Vec::new();
        let mut cites = Vec::new();
        for &i in &members {
            if let Some(quote) = pick(&sources[i].findings, &used, Some(topic)) {
                evidence.push(quote);
                cites.push(sources[i].id);
            }
        }
        // Abstracts only: titles are in title case.
        let texts: Vec<&str> = sources.iter().map(|s| s.abstract_).collect();
        let text = format!(
            "{} papers on {} {}{}{}.",
            count_word(cites.len()),
            label_as_written(topic, &texts),
            direction(&evidence, true),
            context_clause(&evidence),
            figures_clause(&evidence),
        );
        claims.push(draft(text, &cites, &evidence, &mut used, &mut cited));
    }

    // 2. Single-paper claims for papers no claim cites yet, best first.
    for s in sources {
        if claims.len() >= SINGLE_CLAIMS_UP_TO {
            break;
        }
        if cited.contains(s.id) {
            continue;
        }
        if let Some(quote) = pick(&s.findings, &used, None) {
            claims.push(single(s, quote, &mut used, &mut cited));
        }
    }

    // 3. The limitations the papers state themselves.
    let limited: Vec<(&Source, &str)> = sources
        .iter()
        .filter_map(|s| s.limitations.first().map(|l| (s, *l)))
        .take(MAX_CITED)
        .collect();
    if !limited.is_empty() && claims.len() < MAX_CLAIMS {
        let quotes: Vec<&str> = limited.iter().map(|(_, l)| *l).collect();
        let mut kinds: Vec<String> = Vec::new();
        for q in &quotes {
            for kind in limitation_kinds(q) {
                if !kinds.iter().any(|k| k == kind) {
                    kinds.push(kind.to_string());
                }
            }
        }
        kinds.sort();
        let text = if limited.len() == 1 {
            format!(
                "{} states its own limitations: {}.",
                limited[0].0.name(),
                join_and(&kinds)
            )
        } else {
            format!(
                "{} papers state caveats to their own results: {}.",
                count_word(limited.len()),
                join_and(&kinds)
            )
        };
        let cites: Vec<&str> = limited.iter().map(|(s, _)| s.id).collect();
        claims.push(draft(text, &cites, &quotes, &mut used, &mut cited));
    }

    // 4. Too few claims (few papers): more findings of the cited papers.
    for s in sources {
        if claims.len() >= MIN_CLAIMS {
            break;
        }
        for quote in s.findings.clone() {
            if claims.len() >= MIN_CLAIMS {
                break;
            }
            if !used.contains(quote) {
                claims.push(single(s, quote, &mut used, &mut cited));
            }
        }
    }

    claims.truncate(MAX_CLAIMS);
    claims
}

fn single<'a>(
    s: &Source<'a>,
    quote: &'a str,
    used: &mut BTreeSet<&'a str>,
    cited: &mut BTreeSet<&'a str>,
) -> Draft {
    let text = format!(
        "{} {}{}{}.",
        s.name(),
        direction(&[quote], false),
        context_clause(&[quote]),
        figures_clause(&[quote])
    );
    draft(text, &[s.id], &[quote], used, cited)
}

fn draft<'a>(
    text: String,
    cites: &[&'a str],
    evidence: &[&'a str],
    used: &mut BTreeSet<&'a str>,
    cited: &mut BTreeSet<&'a str>,
) -> Draft {
    used.extend(evidence.iter().copied());
    cited.extend(cites.iter().copied());
    Draft {
        text,
        cites: cites.iter().map(|s| s.to_string()).collect(),
        evidence: evidence.iter().map(|s| s.to_string()).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_figures() {
        assert_eq!(
            figures("X improves F1 by 4.2 points and cuts cost by 31.5% (a 2.5x speedup)."),
            ["4.2 points", "31.5%", "2.5x"]
        );
        assert_eq!(
            figures("ROC-AUC rises from 0.72 to 0.77, and recall from 45.1% to 61.3%."),
            ["from 0.72 to 0.77", "from 45.1% to 61.3%"]
        );
        assert_eq!(
            figures("By 17 percentage points of recall."),
            ["17 percentage points"]
        );
        assert!(figures("In 2021, 64 layers and 4,812 discharges.").is_empty());
    }

    #[test]
    fn finds_baselines_and_benchmarks() {
        let findings = [
            "Results show that X improves F1 by 4.2 points over REALM on Natural Questions.",
            "X outperforms a BM25 retriever on TriviaQA, reaching 61.2%.",
            "Compared with GCN, our approach achieves a 2.6x reduction in memory at equal accuracy.",
            "It is 3.1x faster than the original RAG model.",
            "Across all benchmarks, X improves accuracy by 5.1% on average.",
            "The gains are largest on questions about rare entities, where F1 rises from 40% to 50%.",
        ];
        assert_eq!(
            baselines(&findings),
            ["REALM", "a BM25 retriever", "GCN", "the original RAG model"]
        );
        assert!(baselines(&["Horizons longer than 720 steps."]).is_empty());
        assert_eq!(benchmarks(&findings), ["Natural Questions", "TriviaQA"]);
        assert_eq!(
            context_clause(&findings[..2]),
            " (e.g. against REALM and a BM25 retriever, on Natural Questions and TriviaQA)"
        );
        assert_eq!(context_clause(&["Nothing named here."]), "");
    }

    #[test]
    fn picks_evidence_relevant_to_the_topic() {
        let findings = ["X improves F1 by 2 points.", "X reduces latency by 30%."];
        let used = BTreeSet::new();
        assert_eq!(pick(&findings, &used, None), Some(findings[0]));
        assert_eq!(
            pick(&findings, &used, Some("efficiency")),
            Some(findings[1])
        );
        let used: BTreeSet<&str> = [findings[0]].into();
        assert_eq!(
            pick(&findings, &used, Some("dense-retrieval")),
            Some(findings[1])
        );
        assert_eq!(pick(&[], &used, None), None);
    }

    #[test]
    fn classifies_limitations() {
        assert_eq!(
            limitation_kinds(
                "We only evaluate English, so it remains unclear whether it generalises."
            ),
            ["a narrow evaluation scope"]
        );
        assert_eq!(
            limitation_kinds(
                "The method does not handle tables, and we leave them to future work."
            ),
            [
                "cases the method does not handle",
                "open problems left to future work"
            ]
        );
        assert!(limitation_kinds("Results are great.").is_empty());
    }

    #[test]
    fn writes_directions_from_the_evidence() {
        assert_eq!(
            direction(&["X improves F1.", "Y reduces latency."], true),
            "report both quality gains and lower costs than their baselines"
        );
        assert_eq!(
            direction(&["X outperforms Y."], false),
            "reports gains over its baselines"
        );
        assert_eq!(
            direction(&["Nothing here."], true),
            "report measurable effects"
        );
        // Cues start words: "against" is not a gain.
        assert_eq!(
            direction(&["Checked against Y."], false),
            "reports a measurable effect"
        );
    }

    #[test]
    fn joins_lists() {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(join_and(&s(&[])), "");
        assert_eq!(join_and(&s(&["a"])), "a");
        assert_eq!(join_and(&s(&["a", "b", "c"])), "a, b and c");
        assert_eq!(join_and(&s(&["a", "b and c"])), "a; b and c");
        assert_eq!(join_and(&s(&["a", "b and c", "d"])), "a; b and c and d");
    }

    #[test]
    fn labels_are_written_as_the_papers_write_them() {
        let texts = [
            "We study JIT compilation.",
            "Retrieval-augmented generation works. So does Graph learning.",
            "JIT-Compiled code. We love graph learning.",
        ];
        assert_eq!(
            label_as_written("jit-compilation", &texts),
            "JIT compilation"
        );
        assert_eq!(
            label_as_written("retrieval-augmented-generation", &texts),
            "retrieval-augmented generation"
        );
        assert_eq!(label_as_written("jit-compiled", &texts), "JIT-Compiled");
        assert_eq!(label_as_written("graph-learning", &texts), "Graph learning");
        assert_eq!(
            label_as_written("dense-retrieval", &texts),
            "dense retrieval"
        );
        // Whole words only.
        assert_eq!(label_as_written("jit", &["unjitted"]), "jit");
    }
}
