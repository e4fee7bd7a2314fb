//! What every answer tells the browser, and how an artifact is served.
//!
//! Every answer (page, asset, API, event stream, refusal) carries
//! `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`,
//! `X-Frame-Options: DENY`, `Cross-Origin-Resource-Policy: same-origin`,
//! `Cross-Origin-Opener-Policy: same-origin` and, unless it set its own,
//! [`PAGE_POLICY`]: scripts, styles, images and requests from the
//! server's own origin only, no inline script or style, no plugin, no
//! `<base>`, no framing. The pages hold no inline script or event handler
//! (`assets/`), so the policy costs them nothing.
//!
//! An artifact is what a run's skills wrote: its bytes must never run as
//! the inspector. It is served under [`ARTIFACT_POLICY`], whose `sandbox`
//! gives the document an origin of its own and runs no script at all
//! (GitHub's raw files and Jupyter's file handler do the same), with its
//! media type parsed (an unparseable one, possible in a run stored before
//! the checker looked, is `application/octet-stream`), shown in the
//! browser when it is text, an image, audio, video or JSON, and otherwise
//! sent as an attachment to download.
//!
//! Must not: let an answer go out without `nosniff` and a policy, or echo
//! a stored media type into a header unparsed.

use axum::http::{HeaderName, HeaderValue, header};
use axum::response::Response;

use skillhost_scenario::checks::media_type;

/// The policy of every page and API answer.
pub(crate) const PAGE_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; base-uri 'none'; \
     frame-ancestors 'none'; object-src 'none'";

/// The policy of an artifact: a sandbox without scripts, nothing loaded
/// but its own inline styles and `data:` images.
pub(crate) const ARTIFACT_POLICY: &str = "sandbox; default-src 'none'; style-src 'unsafe-inline'; \
     img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// The middleware (`axum::middleware::map_response`): the headers above
/// on every answer.
pub(crate) async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    let fixed: [(HeaderName, &'static str); 5] = [
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            HeaderName::from_static("cross-origin-resource-policy"),
            "same-origin",
        ),
        (
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ),
    ];
    for (name, value) in fixed {
        headers.insert(name, HeaderValue::from_static(value));
    }
    if !headers.contains_key(header::CONTENT_SECURITY_POLICY) {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(PAGE_POLICY),
        );
    }
    // Runs, states and artifacts are no one's to keep: a shared machine's
    // next user should not find them in the browser's cache.
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

/// How an artifact stored as `stored_type` named `name` is served: its
/// `Content-Type`, its `Content-Disposition` and its policy.
pub(crate) fn artifact_headers(stored_type: &str, name: &str) -> [(HeaderName, HeaderValue); 3] {
    let (content_type, inline) = match media_type::parse(stored_type) {
        Ok(parsed) => {
            let inline = matches!(parsed.top(), "text" | "image" | "audio" | "video")
                || parsed.essence == "application/json";
            (parsed.header(), inline)
        }
        Err(_) => ("application/octet-stream".to_string(), false),
    };
    let disposition = format!(
        "{}; filename=\"{}\"; filename*=UTF-8''{}",
        if inline { "inline" } else { "attachment" },
        ascii_file_name(name),
        percent_utf8(name)
    );
    [
        (
            header::CONTENT_TYPE,
            HeaderValue::from_str(&content_type)
                .unwrap_or(HeaderValue::from_static("application/octet-stream")),
        ),
        (
            header::CONTENT_DISPOSITION,
            HeaderValue::from_str(&disposition).unwrap_or(HeaderValue::from_static("attachment")),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(ARTIFACT_POLICY),
        ),
    ]
}

/// A file name for `filename=`: printable ASCII, no quote or backslash.
fn ascii_file_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// RFC 8187's `attr-char`s kept, every other byte percent-encoded.
fn percent_utf8(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(stored: &str, name: &str) -> (String, String) {
        let [(_, content_type), (_, disposition), (_, policy)] = artifact_headers(stored, name);
        assert_eq!(policy, ARTIFACT_POLICY);
        (
            content_type.to_str().unwrap().to_string(),
            disposition.to_str().unwrap().to_string(),
        )
    }

    #[test]
    fn artifacts_are_shown_sandboxed_or_downloaded_by_media_type() {
        for (stored, content_type, inline) in [
            ("text/markdown", "text/markdown", true),
            ("text/html", "text/html", true),
            ("image/svg+xml", "image/svg+xml", true),
            ("image/png", "image/png", true),
            ("application/json", "application/json", true),
            (
                "Text/Plain; Charset=utf-8",
                "text/plain; charset=utf-8",
                true,
            ),
            ("application/pdf", "application/pdf", false),
            ("application/xhtml+xml", "application/xhtml+xml", false),
            (
                "application/octet-stream",
                "application/octet-stream",
                false,
            ),
            // Stored before the checker refused them: never echoed.
            (
                "text/markdown\"><script>",
                "application/octet-stream",
                false,
            ),
            (
                "text/html\r\nX-Injected: y",
                "application/octet-stream",
                false,
            ),
            ("", "application/octet-stream", false),
            ("html", "application/octet-stream", false),
        ] {
            let (got, disposition) = served(stored, "a.bin");
            assert_eq!(got, content_type, "{stored:?}");
            assert_eq!(
                disposition.starts_with("inline;"),
                inline,
                "{stored:?}: {disposition}"
            );
        }
    }

    #[test]
    fn file_names_are_quoted_safely() {
        let (_, disposition) = served("text/plain", "ré\"sumé\\.txt");
        assert_eq!(
            disposition,
            "inline; filename=\"r__sum__.txt\"; filename*=UTF-8''r%C3%A9%22sum%C3%A9%5C.txt"
        );
    }
}
