//! A report's Markdown as HTML for the run page. A report is what a run's
//! skills wrote, so nothing in it may act on the inspector's origin: raw
//! HTML is shown as text, and a link or image is kept only when its URL is
//! `http`, `https`, `mailto` or relative. Any other scheme (`javascript:`,
//! `data:`, `vbscript:`, `file:` …) loses its link: its text stays, as
//! text. The URL is judged as a browser would read it, after Markdown's
//! own unescaping (entities such as `&#x61;` and backslash escapes are
//! already decoded by the parser) and with the tabs and line breaks a
//! browser drops and the leading controls and spaces it trims removed, so
//! `jav&#x09;ascript:` or ` javascript:` are the `javascript:` they spell.

use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd};

/// Markdown as HTML: raw HTML shown as text, links and images of other
/// schemes than `http`, `https` and `mailto` (and relative ones) removed.
pub(crate) fn to_html(text: &str) -> String {
    let options = Options::ENABLE_TABLES | Options::ENABLE_STRIKETHROUGH;
    // The links and images open around the current event: they nest (an
    // image in a link), and each end closes the innermost.
    let mut open: Vec<Opened> = Vec::new();
    let events = Parser::new_ext(text, options).filter_map(|event| {
        // Inside a kept image everything is its `alt` text: a removed
        // link there loses its tags and keeps its text, with no span.
        let in_image = open.contains(&Opened::Image);
        Some(match event {
            Event::Html(html) | Event::InlineHtml(html) => Event::Text(html),
            Event::Start(Tag::Link { ref dest_url, .. } | Tag::Image { ref dest_url, .. }) => {
                if safe_url(dest_url) {
                    let image = matches!(event, Event::Start(Tag::Image { .. }));
                    open.push(if image { Opened::Image } else { Opened::Link });
                    event
                } else {
                    open.push(Opened::Removed);
                    if in_image {
                        return None;
                    }
                    Event::InlineHtml(CowStr::Borrowed(REMOVED_OPEN))
                }
            }
            Event::End(TagEnd::Link | TagEnd::Image) => match open.pop() {
                Some(Opened::Removed) if open.contains(&Opened::Image) => return None,
                Some(Opened::Removed) => Event::InlineHtml(CowStr::Borrowed("</span>")),
                _ => event,
            },
            other => other,
        })
    });
    let mut out = String::with_capacity(text.len() * 3 / 2);
    pulldown_cmark::html::push_html(&mut out, events);
    out
}

/// A link or image the renderer is inside of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opened {
    Link,
    Image,
    /// One whose URL was refused: shown as its text.
    Removed,
}

/// What stands in for a removed link or image, around its text.
const REMOVED_OPEN: &str = "<span class=\"link-removed\" title=\"a link that is not http, \
                            https, mailto or relative, shown as text\">";

/// Whether a link's URL is `http:`, `https:`, `mailto:` or relative (no
/// scheme), as a browser parses it.
pub(crate) fn safe_url(url: &str) -> bool {
    // The URL parser removes every tab and line break, and trims C0
    // controls and spaces from both ends.
    let cleaned: String = url
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    let cleaned = cleaned.trim_matches(|c: char| c <= ' ');
    // A scheme is whatever comes before a `:` that no `/`, `?` or `#`
    // precedes; without one the URL is relative.
    match cleaned.find([':', '/', '?', '#']) {
        Some(at) if cleaned[at..].starts_with(':') => {
            let scheme = &cleaned[..at];
            ["http", "https", "mailto"]
                .iter()
                .any(|allowed| scheme.eq_ignore_ascii_case(allowed))
        }
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_renders_and_raw_html_stays_text() {
        let html = to_html("# Report\n\n*one* <script>alert(1)</script>\n");
        assert!(html.contains("<h1>Report</h1>"), "{html}");
        assert!(html.contains("<em>one</em>"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
    }

    #[test]
    fn only_web_mail_and_relative_urls_are_links() {
        for ok in [
            "https://example.com/a?b#c",
            "http://example.com",
            "HTTPS://example.com",
            "mailto:a@example.com",
            "report.md",
            "/runs/x",
            "../x",
            "#part",
            "?q=1",
            "//example.com/x",
            "a/b:c",
            "javascript%3Aalert(1)",
        ] {
            assert!(safe_url(ok), "{ok}");
        }
        for bad in [
            "javascript:alert(1)",
            "JavaScript:alert(1)",
            " javascript:alert(1)",
            "\u{1}javascript:alert(1)",
            "java\tscript:alert(1)",
            "java\nscript:alert(1)",
            "javascript\r:alert(1)",
            "vbscript:msgbox(1)",
            "data:text/html,<script>alert(1)</script>",
            "file:///etc/passwd",
            "blob:https://example.com/x",
            ":nothing",
            "java script:alert(1)",
            "\u{a0}javascript:alert(1)",
        ] {
            assert!(!safe_url(bad), "{bad:?}");
        }
    }

    #[test]
    fn links_of_other_schemes_lose_their_link_in_every_form() {
        for source in [
            "[x](javascript:alert(1))",
            "![x](javascript:alert(1))",
            "[x](JAVASCRIPT:alert(1))",
            "[x](jav&#x61;script:alert(1))",
            "[x](jav&#97;script:alert(1))",
            "[x](&#x6A;avascript:alert(1))",
            "[x](java&#x09;script:alert(1))",
            "[x](javascript&#58;alert(1))",
            "[x](javascript&colon;alert(1))",
            "[x](<java\tscript:alert(1)>)",
            "[x](<  javascript:alert(1)>)",
            "[x](\\javascript:alert(1))",
            "[x][r]\n\n[r]: javascript:alert(1)",
            "<javascript:alert(1)>",
            "[x](vbscript:msgbox(1))",
            "[x](data:text/html;base64,PHNjcmlwdD4=)",
            "![x](data:image/svg+xml;base64,PHN2Zz4=)",
            "[![x](javascript:alert(1))](javascript:alert(2))",
        ] {
            let html = to_html(source);
            assert!(!html.contains("href="), "{source:?}: {html}");
            assert!(!html.contains("src="), "{source:?}: {html}");
            assert!(html.contains("link-removed"), "{source:?}: {html}");
            let opens = html.matches("<span").count();
            assert_eq!(opens, html.matches("</span>").count(), "{source:?}: {html}");
        }
        let kept = to_html("[a](https://example.com) ![b](plot.png) [c](mailto:x@example.com)");
        assert!(
            kept.contains("<a href=\"https://example.com\">a</a>"),
            "{kept}"
        );
        assert!(kept.contains("<img src=\"plot.png\" alt=\"b\""), "{kept}");
        assert!(kept.contains("href=\"mailto:x@example.com\""), "{kept}");
        assert!(!kept.contains("link-removed"), "{kept}");
        // A safe image inside a removed link keeps its image; a removed one
        // inside a kept image is only alt text.
        let mixed = to_html("[![x](plot.png)](javascript:alert(1))");
        assert!(mixed.contains("<img src=\"plot.png\""), "{mixed}");
        assert!(!mixed.contains("href="), "{mixed}");
        let alt = to_html("![a ![b](javascript:alert(1)) c](plot.png)");
        assert!(alt.contains("<img src=\"plot.png\" alt=\"a b c\""), "{alt}");
    }
}
