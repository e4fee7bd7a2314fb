//! Classifying the sentences of an abstract by cue words and picking the
//! summary's sentences.

/// What a sentence of an abstract does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Contribution,
    Methodology,
    Finding,
    Limitation,
    /// Background or anything without a cue.
    Other,
}

/// Cue phrases (matched on the lowercased sentence) and their weight. Strong
/// cues weigh 3, weak ones 1; a sentence takes the role with the highest
/// total.
const CONTRIBUTION: &[(&str, u32)] = &[
    ("we propose", 3),
    ("we introduce", 3),
    ("we present", 3),
    ("this paper", 3),
    ("in this work", 3),
    ("this work", 2),
    ("our main contribution", 3),
    ("our contribution", 3),
    ("we design", 3),
    ("we develop", 3),
    ("we describe", 3),
    ("we study", 2),
    ("and present", 3),
    ("we release", 3),
    ("we also release", 3),
    ("novel", 1),
];

const METHODOLOGY: &[(&str, u32)] = &[
    ("we use", 3),
    ("we train", 3),
    ("we evaluate", 3),
    ("we fine-tune", 3),
    ("we implement", 3),
    ("we build", 3),
    ("we apply", 3),
    ("we model", 3),
    ("we combine", 3),
    ("we adopt", 3),
    ("we formulate", 3),
    ("we collect", 3),
    ("we measure", 3),
    ("we compare", 3),
    ("we report results", 3),
    ("the approach uses", 3),
    ("our method", 3),
    ("our approach", 2),
    ("the method", 3),
    ("the system", 2),
    ("concretely", 3),
    ("to achieve this", 3),
    ("following the protocol", 3),
    ("is trained", 3),
    ("are trained", 3),
    ("method", 1),
    ("approach", 1),
    ("framework", 1),
    ("architecture", 1),
    ("pipeline", 1),
    ("algorithm", 1),
    ("dataset", 1),
    ("benchmark", 1),
    ("experiments", 1),
    ("evaluat", 1),
    ("uses", 1),
];

const FINDING: &[(&str, u32)] = &[
    ("results show", 3),
    ("result shows", 3),
    ("we find", 3),
    ("we found", 3),
    ("we observe", 3),
    ("outperform", 3),
    ("improves", 3),
    ("improved", 3),
    ("improvement", 3),
    ("achieves", 3),
    ("achieving", 3),
    ("reduces", 3),
    ("reduction", 3),
    ("increase", 3),
    ("speedup", 3),
    ("faster", 3),
    ("demonstrate", 3),
    ("reaches", 3),
    ("reaching", 3),
    ("raises", 3),
    ("rises", 3),
    ("gains", 3),
    ("surpass", 3),
    ("ablations show", 3),
    ("our experiments", 2),
    ("our analysis shows", 3),
    ("matches", 1),
    ("matching", 1),
    ("higher", 1),
    ("lower", 1),
    ("better", 1),
    ("%", 2),
];

const LIMITATION: &[(&str, u32)] = &[
    ("however", 3),
    ("limitation", 3),
    ("does not", 3),
    ("do not", 3),
    ("cannot", 3),
    ("can not", 3),
    ("future work", 3),
    ("remains unclear", 3),
    ("remains open", 3),
    ("unclear whether", 3),
    ("we leave", 3),
    ("is left", 3),
    ("fails to", 3),
    ("fail to", 3),
    ("not yet", 3),
    ("is limited", 3),
    ("are limited", 3),
    ("restricted to", 3),
    ("we only", 3),
    ("smaller on", 3),
    ("gains are smaller", 3),
    ("drawback", 3),
    ("caveat", 3),
    ("only evaluate", 3),
    ("is only", 2),
    ("are only", 2),
    ("limited", 1),
    ("unclear", 1),
    ("although", 1),
];

/// Whether `cue` occurs in `lower` at the start of a word (`gains` is not
/// found in `against`); cues may end mid-word (`outperform` matches
/// `outperforms`).
fn has_cue(lower: &str, cue: &str) -> bool {
    if !cue.starts_with(char::is_alphanumeric) {
        return lower.contains(cue);
    }
    lower.match_indices(cue).any(|(i, _)| {
        !lower[..i]
            .chars()
            .next_back()
            .is_some_and(char::is_alphanumeric)
    })
}

fn score(lower: &str, cues: &[(&str, u32)]) -> u32 {
    cues.iter()
        .filter(|(cue, _)| has_cue(lower, cue))
        .map(|(_, weight)| weight)
        .sum()
}

/// A sentence with its cue scores.
#[derive(Debug, Clone)]
pub struct Scored<'a> {
    pub text: &'a str,
    pub contribution: u32,
    pub methodology: u32,
    pub finding: u32,
    pub limitation: u32,
    pub role: Role,
}

/// Scores `sentence` on every role and picks the best one. Ties go to
/// limitation, then finding, contribution and methodology: the order in
/// which a misfiled sentence would mislead the least.
pub fn classify(sentence: &str) -> Scored<'_> {
    let lower = sentence.to_lowercase();
    let has_digit = sentence.chars().any(|c| c.is_ascii_digit());
    let s = Scored {
        text: sentence,
        contribution: score(&lower, CONTRIBUTION),
        methodology: score(&lower, METHODOLOGY),
        finding: score(&lower, FINDING) + u32::from(has_digit),
        limitation: score(&lower, LIMITATION),
        role: Role::Other,
    };
    let ranked = [
        (s.limitation, Role::Limitation),
        (s.finding, Role::Finding),
        (s.contribution, Role::Contribution),
        (s.methodology, Role::Methodology),
    ];
    let mut role = Role::Other;
    let mut best = 0;
    for (value, r) in ranked {
        if value > best {
            best = value;
            role = r;
        }
    }
    Scored { role, ..s }
}

/// At most this many sentences per list field.
pub const MAX_CONTRIBUTIONS: usize = 2;
pub const MAX_FINDINGS: usize = 3;
pub const MAX_LIMITATIONS: usize = 2;

/// The summary of an abstract already split into `sentences` (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extract<'a> {
    pub contributions: Vec<&'a str>,
    pub methodology: &'a str,
    pub findings: Vec<&'a str>,
    pub limitations: Vec<&'a str>,
}

/// Picks the summary's sentences. Sentences before the first contribution
/// are background (prior work's shortcomings are not this paper's
/// limitations). Every field is filled: when no sentence has the right cues,
/// a fallback sentence of the abstract is used (see the arms below).
pub fn extract<'a>(sentences: &[&'a str]) -> Extract<'a> {
    assert!(!sentences.is_empty(), "extract needs at least one sentence");
    let mut scored: Vec<Scored<'a>> = sentences.iter().map(|s| classify(s)).collect();
    if let Some(first) = scored.iter().position(|s| s.role == Role::Contribution) {
        for s in &mut scored[..first] {
            if matches!(s.role, Role::Limitation | Role::Finding | Role::Methodology) {
                s.role = Role::Other;
            }
        }
    }
    let with = |role: Role| -> Vec<&'a str> {
        scored
            .iter()
            .filter(|s| s.role == role)
            .map(|s| s.text)
            .collect()
    };

    let mut contributions = with(Role::Contribution);
    contributions.truncate(MAX_CONTRIBUTIONS);
    if contributions.is_empty() {
        // The first sentence that is neither a finding nor a limitation,
        // else the first.
        let first = scored
            .iter()
            .find(|s| !matches!(s.role, Role::Finding | Role::Limitation))
            .unwrap_or(&scored[0]);
        contributions.push(first.text);
    }

    // The first methodology sentence (usually the one right after the
    // contribution: how it works); else the sentence with the most
    // methodology cues among those not already used as contributions; else
    // the second sentence (the first when there is only one).
    let methodology = scored
        .iter()
        .find(|s| s.role == Role::Methodology)
        .or_else(|| {
            scored
                .iter()
                .filter(|s| s.methodology > 0 && !contributions.contains(&s.text))
                .min_by_key(|s| std::cmp::Reverse(s.methodology))
        })
        .map(|s| s.text)
        .unwrap_or(sentences[sentences.len().min(2) - 1]);

    let mut findings = with(Role::Finding);
    findings.truncate(MAX_FINDINGS);
    if findings.is_empty() {
        // Sentences with numbers; else the last sentence that is not a
        // limitation; else the last sentence.
        findings = scored
            .iter()
            .filter(|s| s.text.chars().any(|c| c.is_ascii_digit()))
            .map(|s| s.text)
            .take(MAX_FINDINGS)
            .collect();
        if findings.is_empty() {
            let last = scored
                .iter()
                .rev()
                .find(|s| s.role != Role::Limitation)
                .unwrap_or(&scored[scored.len() - 1]);
            findings.push(last.text);
        }
    }

    let mut limitations = with(Role::Limitation);
    limitations.truncate(MAX_LIMITATIONS);
    if limitations.is_empty() {
        // The last sentence not used elsewhere; else the last sentence.
        let used =
            |t: &&str| contributions.contains(t) || findings.contains(t) || *t == methodology;
        let last = sentences
            .iter()
            .rev()
            .find(|t| !used(t))
            .unwrap_or(&sentences[sentences.len() - 1]);
        limitations.push(last);
    }

    Extract {
        contributions,
        methodology,
        findings,
        limitations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cues_start_at_word_boundaries() {
        assert!(has_cue("it outperforms x", "outperform"));
        assert!(has_cue("gains are large", "gains"));
        assert!(!has_cue("checked against x", "gains"));
        assert!(has_cue("by 3%", "%"));
        assert_eq!(
            classify("Concretely, it verifies each claim against its passage.").role,
            Role::Methodology
        );
    }

    #[test]
    fn classifies_by_cue_words() {
        for (sentence, role) in [
            ("We propose FooNet, a method for bar.", Role::Contribution),
            ("This paper introduces a new benchmark.", Role::Contribution),
            (
                "We evaluate on NQ, TriviaQA and HotpotQA.",
                Role::Methodology,
            ),
            (
                "Concretely, FooNet mines hard negatives.",
                Role::Methodology,
            ),
            (
                "Results show that FooNet improves F1 by 3.2 points.",
                Role::Finding,
            ),
            (
                "FooNet outperforms BM25 on NQ, reaching 45.1%.",
                Role::Finding,
            ),
            ("However, the index must be rebuilt.", Role::Limitation),
            (
                "The method does not handle tables, and we leave them to future work.",
                Role::Limitation,
            ),
            (
                "We only evaluate English, so it remains unclear whether it generalises.",
                Role::Limitation,
            ),
            (
                "Gains are smaller on rare entities, which suggests a limit.",
                Role::Limitation,
            ),
            ("Language models hallucinate.", Role::Other),
        ] {
            assert_eq!(classify(sentence).role, role, "{sentence}");
        }
    }

    #[test]
    fn extracts_every_field_from_a_typical_abstract() {
        let sentences = [
            "Prior retrievers cannot find rare entities.",
            "We propose FooNet, which retrieves with a dual encoder.",
            "Concretely, FooNet mines hard negatives.",
            "We evaluate on NQ and TriviaQA.",
            "Results show that FooNet improves exact match by 4.1 points.",
            "It reduces latency by 30%.",
            "However, the index must be rebuilt when the corpus changes.",
        ];
        let e = extract(&sentences);
        assert_eq!(e.contributions, [sentences[1]]);
        assert_eq!(e.methodology, sentences[2]);
        assert_eq!(e.findings, [sentences[4], sentences[5]]);
        // The background sentence's "cannot" is not the paper's limitation.
        assert_eq!(e.limitations, [sentences[6]]);
    }

    #[test]
    fn falls_back_to_real_sentences() {
        let one = ["A single plain sentence."];
        let e = extract(&one);
        assert_eq!(e.contributions, one);
        assert_eq!(e.methodology, one[0]);
        assert_eq!(e.findings, one);
        assert_eq!(e.limitations, one);

        let plain = [
            "Graphs are everywhere.",
            "They have 12 kinds of nodes.",
            "Nobody knows why.",
        ];
        let e = extract(&plain);
        assert_eq!(e.contributions, [plain[0]]);
        assert_eq!(e.methodology, plain[1]);
        assert_eq!(e.findings, [plain[1]]);
        assert_eq!(e.limitations, [plain[2]]);
    }

    #[test]
    fn caps_list_lengths() {
        let sentences = [
            "We propose A.",
            "We introduce B.",
            "We present C.",
            "A improves X by 1%.",
            "B improves Y by 2%.",
            "C improves Z by 3%.",
            "A reduces W by 4%.",
            "However, one.",
            "However, two.",
            "However, three.",
        ];
        let e = extract(&sentences);
        assert_eq!(e.contributions.len(), MAX_CONTRIBUTIONS);
        assert_eq!(e.findings, sentences[3..6]);
        assert_eq!(e.limitations.len(), MAX_LIMITATIONS);
    }
}
