//! The sentences of a chunk and their scores. Sentences are byte ranges of
//! the chunk's text, so every key point is an exact substring of it; every
//! rule that adds to a score is named in the result.

/// A sentence that qualifies, its byte range in the text and its score.
pub struct Scored {
    pub start: usize,
    pub end: usize,
    pub score: i32,
    pub rules: Vec<String>,
}

/// Words too common to say what a sentence is about.
const STOP_WORDS: &[&str] = &[
    "about", "above", "after", "again", "also", "been", "before", "being", "both", "does", "down",
    "during", "each", "even", "from", "have", "having", "here", "into", "just", "more", "most",
    "much", "only", "other", "over", "same", "some", "such", "than", "that", "their", "them",
    "then", "there", "these", "they", "this", "those", "through", "under", "until", "very", "were",
    "what", "when", "where", "which", "while", "will", "with", "would", "your",
];

/// Phrases that mark a sentence as explaining or concluding.
const CUES: &[&str] = &[
    "because",
    "therefore",
    "as a result",
    "in short",
    "in summary",
    "most",
    "main",
    "key",
    "important",
    "must",
    "means",
];

/// Opening words that point back to an earlier sentence: such a sentence
/// reads badly out of its context.
const BACK_REFERENCES: &[&str] = &["it", "this", "these", "they", "that", "such"];

/// Words that end with a period without ending a sentence.
const ABBREVIATIONS: &[&str] = &["e.g", "i.e", "etc", "vs", "cf", "al", "approx", "no", "fig"];

/// Every qualifying sentence of `text`, scored, in text order.
pub fn score_sentences(text: &str) -> Vec<Scored> {
    let mut scored = Vec::new();
    for (para_start, para_end) in paragraphs(text) {
        for (index, (start, end)) in sentences(text, para_start, para_end)
            .into_iter()
            .enumerate()
        {
            if let Some(s) = score(&text[start..end], index == 0) {
                scored.push(Scored {
                    start,
                    end,
                    score: s.0,
                    rules: s.1,
                });
            }
        }
    }
    scored
}

/// Byte ranges of the paragraphs (separated by blank lines), trimmed.
fn paragraphs(text: &str) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut push = |from: usize, to: usize| {
        let part = &text[from..to];
        let lead = part.len() - part.trim_start().len();
        let trimmed = part.trim();
        if !trimmed.is_empty() {
            out.push((from + lead, from + lead + trimmed.len()));
        }
    };
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            push(start, offset);
            start = offset + line.len();
        }
        offset += line.len();
    }
    push(start, text.len());
    out
}

/// Byte ranges of the sentences of `text[from..to]`, trimmed. A sentence
/// ends at `.`, `!` or `?` (with any closing quote or bracket) before
/// whitespace, unless the period ends an abbreviation or the next word is
/// lowercase.
fn sentences(text: &str, from: usize, to: usize) -> Vec<(usize, usize)> {
    let part = &text[from..to];
    let mut out = Vec::new();
    let mut start = 0;
    let mut iter = part.char_indices().peekable();
    while let Some((i, c)) = iter.next() {
        if !matches!(c, '.' | '!' | '?') {
            continue;
        }
        let mut end = i + 1;
        while let Some(&(j, next)) = iter.peek() {
            if matches!(next, ')' | ']' | '"' | '\'' | '\u{201d}' | '\u{2019}' | '.') {
                end = j + next.len_utf8();
                iter.next();
            } else {
                break;
            }
        }
        let rest = &part[end..];
        if !rest.starts_with(char::is_whitespace) {
            continue;
        }
        let word = part[start..i]
            .rsplit(char::is_whitespace)
            .next()
            .unwrap_or("");
        if c == '.' && ABBREVIATIONS.contains(&word.trim_start_matches('(').to_lowercase().as_str())
        {
            continue;
        }
        if rest.trim_start().starts_with(char::is_lowercase) {
            continue;
        }
        push_trimmed(&mut out, part, from, start, end);
        start = end;
    }
    push_trimmed(&mut out, part, from, start, part.len());
    out
}

fn push_trimmed(out: &mut Vec<(usize, usize)>, part: &str, base: usize, start: usize, end: usize) {
    let slice = &part[start..end];
    let lead = slice.len() - slice.trim_start().len();
    let trimmed = slice.trim();
    if !trimmed.is_empty() {
        out.push((base + start + lead, base + start + lead + trimmed.len()));
    }
}

/// The score of one sentence and the rules that made it, or `None` when it
/// does not qualify (no final `.`, `!` or `?`; fewer than 6 or more than 60
/// words).
fn score(sentence: &str, leads_paragraph: bool) -> Option<(i32, Vec<String>)> {
    let last = sentence.trim_end_matches([')', ']', '"', '\'', '\u{201d}', '\u{2019}']);
    if !last.ends_with(['.', '!', '?']) {
        return None;
    }
    let words: Vec<&str> = sentence.split_whitespace().collect();
    if !(6..=60).contains(&words.len()) {
        return None;
    }
    let lower = sentence.to_lowercase();
    let mut rules = Vec::new();
    let mut total = 0;
    let mut add = |name: String, points: i32| {
        total += points;
        rules.push(format!("{name}:{points}"));
    };
    let mut content: Vec<String> = words
        .iter()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| {
            w.chars().count() >= 4
                && w.chars().all(char::is_alphabetic)
                && !STOP_WORDS.contains(&w.as_str())
        })
        .collect();
    content.sort();
    content.dedup();
    if !content.is_empty() {
        add("content-words".into(), content.len().min(10) as i32);
    }
    if leads_paragraph {
        add("leads-paragraph".into(), 3);
    }
    if sentence.chars().any(|c| c.is_ascii_digit()) {
        add("has-figure".into(), 2);
    }
    let padded = format!(
        " {} ",
        lower
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { ' ' })
            .collect::<String>()
    );
    if let Some(cue) = CUES.iter().find(|cue| padded.contains(&format!(" {cue} "))) {
        add(format!("cue:{cue}"), 2);
    }
    if last.ends_with('?') {
        add("question".into(), -4);
    }
    let first = words[0]
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase();
    if BACK_REFERENCES.contains(&first.as_str()) {
        add(format!("points-back:{first}"), -2);
    }
    Some((total, rules))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_paragraphs_then_sentences_as_exact_ranges() {
        let text =
            "Heading\n\n  First one here. Second e.g. this one!\nStill second? Yes.\n\n\nLast";
        let got: Vec<&str> = paragraphs(text)
            .into_iter()
            .flat_map(|(a, b)| sentences(text, a, b))
            .map(|(a, b)| &text[a..b])
            .collect();
        assert_eq!(
            got,
            [
                "Heading",
                "First one here.",
                "Second e.g. this one!",
                "Still second?",
                "Yes.",
                "Last"
            ]
        );
    }

    #[test]
    fn scores_by_the_named_rules() {
        let (points, rules) =
            score("It is the main river of 3 countries, flowing north.", false).unwrap();
        assert_eq!(
            rules,
            [
                "content-words:5",
                "has-figure:2",
                "cue:main:2",
                "points-back:it:-2"
            ]
        );
        assert_eq!(points, 7);
        assert!(score("Only five words here now.", true).is_none());
        assert!(score("A heading with no final punctuation mark", true).is_none());
    }
}
