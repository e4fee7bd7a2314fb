//! What an artifact's media type may be: `type/subtype` with optional
//! `; name=value` parameters, each part made of the characters RFC 6838
//! and RFC 9110 allow (no space inside a name, no quote, no control
//! character, no `<` or `>`). `host serve` sends it as a `Content-Type`
//! header, so anything else could forge a header or break out of one.
//! The parsed form is what a server sends ([`MediaType::header`]); a type
//! stored before this check (an old run's) that does not parse is served
//! as `application/octet-stream`.

use std::fmt;

/// The longest media type, in bytes.
pub const MAX_MEDIA_TYPE_BYTES: usize = 255;

/// A media type that parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaType {
    /// `type/subtype`, lowercase.
    pub essence: String,
    /// The parameters in order: name lowercase, value as given (a quoted
    /// one without its quotes).
    pub params: Vec<(String, String)>,
}

impl MediaType {
    /// The top-level type: `text` of `text/html`.
    pub fn top(&self) -> &str {
        self.essence.split('/').next().unwrap_or("")
    }

    /// The header value: the essence and the parameters, each value a
    /// token or a quoted string.
    pub fn header(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for MediaType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.essence)?;
        for (name, value) in &self.params {
            if !value.is_empty() && value.bytes().all(is_tchar) {
                write!(f, "; {name}={value}")?;
            } else {
                write!(f, "; {name}=\"{value}\"")?;
            }
        }
        Ok(())
    }
}

/// Parses a media type. `Err` says what is wrong with it.
pub fn parse(text: &str) -> Result<MediaType, String> {
    let shown = || text.escape_debug().to_string();
    if text.trim().is_empty() {
        return Err("a media type must not be empty".into());
    }
    if text.len() > MAX_MEDIA_TYPE_BYTES {
        return Err(format!(
            "`{}…` is {} bytes long; at most {MAX_MEDIA_TYPE_BYTES}",
            text.chars().take(24).collect::<String>().escape_debug(),
            text.len()
        ));
    }
    if let Some(c) = text.chars().find(|c| c.is_control()) {
        return Err(format!(
            "`{}` holds the control character {}",
            shown(),
            c.escape_unicode()
        ));
    }
    if let Some(c) = text.chars().find(|c| !c.is_ascii()) {
        return Err(format!("`{}` holds `{c}`, which is not ASCII", shown()));
    }
    let mut parts = text.split(';');
    let essence = parts.next().unwrap_or("").trim();
    let Some((top, sub)) = essence.split_once('/') else {
        return Err(format!(
            "`{}` is not TYPE/SUBTYPE (it has no `/`)",
            essence.escape_debug()
        ));
    };
    for (what, name) in [("type", top), ("subtype", sub)] {
        restricted_name(name)
            .map_err(|why| format!("`{}`: the {what} `{}` {why}", shown(), name.escape_debug()))?;
    }
    let mut params = Vec::new();
    for param in parts {
        let param = param.trim();
        if param.is_empty() {
            continue;
        }
        let Some((name, value)) = param.split_once('=') else {
            return Err(format!(
                "`{}`: the parameter `{}` is not NAME=VALUE",
                shown(),
                param.escape_debug()
            ));
        };
        if name.is_empty() || !name.bytes().all(is_tchar) {
            return Err(format!(
                "`{}`: the parameter name `{}` may hold only letters, digits and \
                 !#$%&'*+-.^_`|~",
                shown(),
                name.escape_debug()
            ));
        }
        let value = if let Some(inner) = value.strip_prefix('"') {
            let Some(inner) = inner.strip_suffix('"') else {
                return Err(format!(
                    "`{}`: the value of `{name}` opens a quote it does not close",
                    shown()
                ));
            };
            if inner.contains(['"', '\\']) {
                return Err(format!(
                    "`{}`: the quoted value of `{name}` holds `\"` or `\\`",
                    shown()
                ));
            }
            inner.to_string()
        } else {
            if value.is_empty() || !value.bytes().all(is_tchar) {
                return Err(format!(
                    "`{}`: the value of `{name}`, `{}`, must be a token or a quoted string",
                    shown(),
                    value.escape_debug()
                ));
            }
            value.to_string()
        };
        params.push((name.to_ascii_lowercase(), value));
    }
    Ok(MediaType {
        essence: format!("{}/{}", top.to_ascii_lowercase(), sub.to_ascii_lowercase()),
        params,
    })
}

/// RFC 6838's restricted-name: a letter or digit, then up to 126 of
/// letters, digits and `!#$&-^_.+`.
fn restricted_name(name: &str) -> Result<(), String> {
    let bytes = name.as_bytes();
    match bytes.first() {
        None => return Err("is empty".into()),
        Some(b) if !b.is_ascii_alphanumeric() => {
            return Err("must start with a letter or a digit".into());
        }
        Some(_) => {}
    }
    if bytes.len() > 127 {
        return Err("is longer than 127 characters".into());
    }
    match name.chars().find(|&c| {
        !(c.is_ascii_alphanumeric()
            || matches!(c, '!' | '#' | '$' | '&' | '-' | '^' | '_' | '.' | '+'))
    }) {
        Some(c) => Err(format!(
            "holds `{}`; a media type's names hold only letters, digits and !#$&-^_.+",
            c.escape_debug()
        )),
        None => Ok(()),
    }
}

/// RFC 9110's `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_types_parse_and_print_as_headers() {
        for (given, header) in [
            ("text/markdown", "text/markdown"),
            ("Text/HTML", "text/html"),
            ("text/html; charset=utf-8", "text/html; charset=utf-8"),
            ("text/plain;Charset=\"utf-8\"", "text/plain; charset=utf-8"),
            ("image/svg+xml", "image/svg+xml"),
            (
                "application/vnd.openxmlformats-officedocument.presentationml.presentation",
                "application/vnd.openxmlformats-officedocument.presentationml.presentation",
            ),
            ("application/x-test", "application/x-test"),
            ("text/plain; a=\"b c\"", "text/plain; a=\"b c\""),
        ] {
            let parsed = parse(given).unwrap_or_else(|e| panic!("{given}: {e}"));
            assert_eq!(parsed.header(), header, "{given}");
        }
        assert_eq!(parse("image/svg+xml").unwrap().top(), "image");
    }

    #[test]
    fn anything_else_is_refused_saying_why() {
        for (bad, why) in [
            ("", "empty"),
            ("   ", "empty"),
            ("html", "no `/`"),
            ("text/", "subtype `` is empty"),
            ("/html", "type `` is empty"),
            ("text/markdown\"><script>alert(1)</script>", "holds `\\\"`"),
            ("text/html\r\nX-Injected: y", "control character \\u{d}"),
            ("text/html\nX: y", "control character \\u{a}"),
            ("text/html\0", "control character \\u{0}"),
            ("text/html x", "holds ` `"),
            ("text/<b>", "must start with a letter"),
            ("text/h<b>", "holds `<`"),
            ("text/html; charset", "not NAME=VALUE"),
            ("text/html; charset=\"utf-8", "does not close"),
            ("text/html; charset=a\"b", "token or a quoted string"),
            ("text/html; =x", "parameter name"),
            ("text/html; a=\"x\\\"\"", "holds `\"` or `\\`"),
            ("text/htmlé", "not ASCII"),
            ("text/a/b", "holds `/`"),
        ] {
            let err = parse(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        let long = format!("text/{}", "x".repeat(300));
        assert!(parse(&long).unwrap_err().contains("at most 255"));
    }
}
