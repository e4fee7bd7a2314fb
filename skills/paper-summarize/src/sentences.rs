//! Splitting an abstract into sentences, as slices of the original text (so
//! every sentence is an exact substring of it).

/// Words that end with a period without ending the sentence, lowercased and
/// without their final period.
const ABBREVIATIONS: &[&str] = &[
    "al", "approx", "ca", "cf", "dr", "e.g", "eq", "eqs", "etc", "fig", "figs", "i.e", "incl",
    "mr", "mrs", "ms", "no", "nos", "prof", "resp", "sec", "st", "viz", "vs", "w.r.t",
];

/// Closing characters that may follow a sentence's final punctuation.
fn is_closer(c: char) -> bool {
    matches!(c, ')' | ']' | '"' | '\'' | '\u{201d}' | '\u{2019}')
}

/// Opening characters that may precede a word (stripped before looking it
/// up in [`ABBREVIATIONS`]).
fn is_opener(c: char) -> bool {
    matches!(c, '(' | '[' | '"' | '\'' | '\u{201c}' | '\u{2018}')
}

/// Whether the period at the end of `before` (which excludes the period)
/// belongs to an abbreviation rather than ending a sentence. (Initials such
/// as `J.` are not recognised: a sentence ending with a one-letter name, as
/// in `we call it model B.`, is as likely in an abstract.)
fn ends_with_abbreviation(before: &str) -> bool {
    let word = before
        .rsplit(char::is_whitespace)
        .next()
        .unwrap_or("")
        .trim_start_matches(is_opener);
    ABBREVIATIONS.contains(&word.to_lowercase().as_str())
}

/// The sentences of `text`, trimmed, in order. A sentence ends at `.`, `!`
/// or `?` (plus any closing quote or bracket) followed by whitespace, unless
/// the period ends an abbreviation (`e.g.`, `et al.`, `vs.`…) or the next
/// word starts with a lowercase letter. Decimals (`3.5`) and
/// dotted names never end a sentence, as no whitespace follows their period.
pub fn split(text: &str) -> Vec<&str> {
    let mut sentences = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if !matches!(c, '.' | '!' | '?') {
            continue;
        }
        let mut end = i + c.len_utf8();
        while let Some(&(j, next)) = chars.peek() {
            if is_closer(next) || (next == '.' && c == '.') {
                end = j + next.len_utf8();
                chars.next();
            } else {
                break;
            }
        }
        let rest = &text[end..];
        match rest.chars().next() {
            None => break,
            Some(next) if !next.is_whitespace() => continue,
            Some(_) => {}
        }
        if c == '.' && ends_with_abbreviation(&text[start..i]) {
            continue;
        }
        if rest
            .trim_start()
            .chars()
            .next()
            .is_some_and(char::is_lowercase)
        {
            continue;
        }
        let sentence = text[start..end].trim();
        if !sentence.is_empty() {
            sentences.push(sentence);
        }
        start = end;
    }
    let last = text[start..].trim();
    if !last.is_empty() {
        sentences.push(last);
    }
    sentences
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_on_terminal_punctuation() {
        assert_eq!(
            split("One two. Three four! Five six? Seven"),
            ["One two.", "Three four!", "Five six?", "Seven"]
        );
        assert_eq!(split("  Padded.   Text.  "), ["Padded.", "Text."]);
        assert!(split("").is_empty());
        assert!(split("   ").is_empty());
    }

    #[test]
    fn keeps_abbreviations_and_decimals_inside_sentences() {
        let text = "We follow Lewis et al. (2020) and Kim et al. with changes. \
                    Results improve by 3.5% (e.g. on NQ), i.e. a lot. \
                    We compare Smith's method vs. ours. We call it model B. Version 2.0 ships.";
        assert_eq!(
            split(text),
            [
                "We follow Lewis et al. (2020) and Kim et al. with changes.",
                "Results improve by 3.5% (e.g. on NQ), i.e. a lot.",
                "We compare Smith's method vs. ours.",
                "We call it model B.",
                "Version 2.0 ships.",
            ]
        );
    }

    #[test]
    fn handles_closing_quotes_brackets_and_ellipses() {
        assert_eq!(
            split("He said \"stop.\" Then (it ended.) Wait... What?"),
            ["He said \"stop.\"", "Then (it ended.)", "Wait...", "What?"]
        );
        assert_eq!(split("Café é. Über alles."), ["Café é.", "Über alles."]);
    }

    #[test]
    fn every_sentence_is_a_substring_of_the_text() {
        let text = "A first sentence.\nA second one on a new line!  A third (with e.g. an aside).";
        for s in split(text) {
            assert!(text.contains(s), "{s:?}");
        }
        assert_eq!(split(text).len(), 3);
    }
}
