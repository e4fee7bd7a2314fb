//! Markdown reduced to its prose: headings, quotes and list items keep their
//! text without their markers; emphasis and code marks are dropped, links
//! keep their text without their target, images their alt text; fenced code
//! blocks and rules are left out (code is not prose to summarise). Line by
//! line, with no lookahead: the same text always gives the same result.

/// `markdown`'s prose, paragraphs separated by a blank line.
pub fn to_text(markdown: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    let mut fence: Option<&str> = None;
    for line in markdown.lines() {
        let trimmed = line.trim();
        if let Some(marker) = fence {
            if trimmed.starts_with(marker) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") || trimmed.starts_with("~~~") {
            fence = Some(&trimmed[..3]);
            lines.push(String::new());
            continue;
        }
        if is_rule(trimmed) {
            lines.push(String::new());
            continue;
        }
        let (body, own_paragraph) = strip_block_marker(trimmed);
        let body = inline(body);
        if own_paragraph {
            lines.push(String::new());
            lines.push(body);
            lines.push(String::new());
        } else {
            lines.push(body);
        }
    }
    crate::paragraphs(lines.iter().map(|l| l.trim_end()))
}

/// `---`, `***` or `___` (three or more, spaces allowed).
fn is_rule(line: &str) -> bool {
    let marks: String = line.chars().filter(|c| !c.is_whitespace()).collect();
    marks.len() >= 3
        && ["-", "*", "_"]
            .iter()
            .any(|m| marks.chars().all(|c| c.to_string() == *m))
}

/// A line without its heading, quote or list marker, and whether it is a
/// paragraph of its own (a heading).
fn strip_block_marker(line: &str) -> (&str, bool) {
    let hashes = line.chars().take_while(|&c| c == '#').count();
    if (1..=6).contains(&hashes) && line[hashes..].starts_with(' ') {
        return (line[hashes..].trim().trim_end_matches('#').trim_end(), true);
    }
    let mut line = line;
    while let Some(rest) = line.strip_prefix('>') {
        line = rest.trim_start();
    }
    for marker in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(marker) {
            return (rest.trim_start(), false);
        }
    }
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    if (1..=9).contains(&digits) {
        let rest = &line[digits..];
        if let Some(rest) = rest.strip_prefix(". ").or_else(|| rest.strip_prefix(") ")) {
            return (rest.trim_start(), false);
        }
    }
    (line, false)
}

/// Inline markup removed: `[text](target)` and `![alt](target)` become
/// their text, `*`, `**`, `__` and backticks are dropped. A single `_` is
/// kept: it is more often part of a name than emphasis.
fn inline(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(c) = rest.chars().next() {
        if c == '!' && rest[1..].starts_with('[') {
            rest = &rest[1..];
            continue;
        }
        if c == '['
            && let Some(close) = rest.find("](")
            && let Some(end) = rest[close + 2..].find(')')
        {
            out.push_str(&inline(&rest[1..close]));
            rest = &rest[close + 2 + end + 1..];
            continue;
        }
        if c == '*' || c == '`' {
            rest = &rest[1..];
            continue;
        }
        if rest.starts_with("__") {
            rest = &rest[2..];
            continue;
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::to_text;

    #[test]
    fn keeps_the_prose_and_drops_the_markup() {
        let md = "# Rivers #\nA **river** flows;\nsee [the map](http://m).\n\n\
                  > Quoted `code`.\n\n- one\n2. two\n\n```rust\nfn x() {}\n```\n---\n\
                  ![A delta](d.png) and snake_case stay.";
        assert_eq!(
            to_text(md),
            "Rivers\n\nA river flows;\nsee the map.\n\nQuoted code.\n\none\ntwo\n\n\
             A delta and snake_case stay."
        );
    }
}
