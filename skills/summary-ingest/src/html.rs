//! HTML reduced to text in one pass over the characters, with no DOM: tags
//! are dropped, the content of `script`, `style`, `head`, `noscript` and
//! `template` is left out, comments and declarations are skipped, entities
//! are decoded, runs of whitespace become one space (as a browser shows
//! them), every block element starts a new paragraph and `<br>` a new line.
//! Malformed markup is read as leniently as it comes: an unclosed tag ends
//! the text, an unknown entity is kept as written.

/// Elements whose content is not text to read.
const HIDDEN: &[&str] = &["script", "style", "head", "noscript", "template"];

/// Elements that start and end a paragraph.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "dd",
    "div",
    "dl",
    "dt",
    "figcaption",
    "figure",
    "footer",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "td",
    "th",
    "tr",
    "ul",
];

/// The text of `html`, paragraphs separated by a blank line.
pub fn to_text(html: &str) -> String {
    let mut out = Text::default();
    let mut rest = html;
    while let Some(lt) = rest.find('<') {
        out.push_text(&rest[..lt]);
        rest = &rest[lt..];
        if let Some(after) = rest.strip_prefix("<!--") {
            rest = after.find("-->").map_or("", |end| &after[end + 3..]);
            continue;
        }
        let Some(gt) = rest.find('>') else {
            rest = "";
            break;
        };
        let tag = &rest[1..gt];
        rest = &rest[gt + 1..];
        if tag.starts_with('!') || tag.starts_with('?') {
            continue;
        }
        let closing = tag.starts_with('/');
        let name: String = tag
            .trim_start_matches('/')
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect::<String>()
            .to_ascii_lowercase();
        if !closing && HIDDEN.contains(&name.as_str()) && !tag.ends_with('/') {
            // Skip to the matching close tag (these elements do not nest).
            let close = format!("</{name}");
            rest = find_ignore_case(rest, &close).map_or("", |at| {
                rest[at..].find('>').map_or("", |gt| &rest[at + gt + 1..])
            });
        } else if name == "br" {
            out.line_break();
        } else if BLOCKS.contains(&name.as_str()) {
            out.paragraph_break();
        }
    }
    out.push_text(rest);
    out.finish()
}

/// The byte offset of `needle` (ASCII) in `haystack`, ignoring ASCII case.
fn find_ignore_case(haystack: &str, needle: &str) -> Option<usize> {
    let (h, n) = (haystack.as_bytes(), needle.as_bytes());
    (0..h.len().saturating_sub(n.len() - 1)).find(|&i| h[i..i + n.len()].eq_ignore_ascii_case(n))
}

/// The text being built: finished paragraphs and the current one.
#[derive(Default)]
struct Text {
    paragraphs: Vec<String>,
    current: String,
    /// A space is owed before the next visible character.
    space: bool,
}

impl Text {
    fn push_text(&mut self, raw: &str) {
        let decoded = decode_entities(raw);
        for c in decoded.chars() {
            if c.is_whitespace() && c != '\u{a0}' {
                self.space = true;
            } else {
                if self.space && !self.current.is_empty() && !self.current.ends_with('\n') {
                    self.current.push(' ');
                }
                self.space = false;
                self.current.push(if c == '\u{a0}' { ' ' } else { c });
            }
        }
    }

    fn line_break(&mut self) {
        if !self.current.is_empty() && !self.current.ends_with('\n') {
            self.current.push('\n');
        }
        self.space = false;
    }

    fn paragraph_break(&mut self) {
        let paragraph = self.current.trim().to_string();
        if !paragraph.is_empty() {
            self.paragraphs.push(paragraph);
        }
        self.current.clear();
        self.space = false;
    }

    fn finish(mut self) -> String {
        self.paragraph_break();
        self.paragraphs.join("\n\n")
    }
}

/// `&amp;`, `&#39;`, `&#x2014;` and the common named entities decoded; any
/// other `&` kept as written.
fn decode_entities(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        rest = &rest[amp..];
        let decoded = rest[1..]
            .find(';')
            .filter(|&semi| semi <= 10)
            .and_then(|semi| entity(&rest[1..1 + semi]).map(|c| (c, semi + 2)));
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The character an entity's name (between `&` and `;`) stands for.
fn entity(name: &str) -> Option<char> {
    if let Some(number) = name.strip_prefix('#') {
        let code = match number.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => number.parse().ok()?,
        };
        return char::from_u32(code).filter(|c| *c != '\0');
    }
    Some(match name {
        "amp" => '&',
        "lt" => '<',
        "gt" => '>',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => '\u{a0}',
        "mdash" => '\u{2014}',
        "ndash" => '\u{2013}',
        "hellip" => '\u{2026}',
        "lsquo" => '\u{2018}',
        "rsquo" => '\u{2019}',
        "ldquo" => '\u{201c}',
        "rdquo" => '\u{201d}',
        "copy" => '\u{a9}',
        "deg" => '\u{b0}',
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::to_text;

    #[test]
    fn drops_tags_and_hidden_content_and_keeps_paragraphs() {
        let html = "<!DOCTYPE html><html><head><title>T</title><style>p{}</style></head>\
                    <body><h1>Deltas</h1><!-- note --><p>A  delta\n forms where a \
                    <em>river</em> meets the sea&nbsp;&mdash; 5&deg;C &amp; calm.<br>Next line.</p>\
                    <SCRIPT>var x = '<p>';</SCRIPT><ul><li>one &bogus; &#x41;&#66;</li></ul></body></html>";
        assert_eq!(
            to_text(html),
            "Deltas\n\nA delta forms where a river meets the sea \u{2014} 5\u{b0}C & calm.\n\
             Next line.\n\none &bogus; AB"
        );
    }
}
