//! `web-fetch`: one GET through the host's `http` capability. The host
//! decides what is reachable (the scenario's grant), bounds the time and the
//! size, and journals the response; this skill turns it into text.

skillhost_sdk::generate!("web-fetch");

use skillhost_sdk::{http, log};

struct WebFetch;

impl Guest for WebFetch {
    skillhost_sdk::manifest! {
        name: "Web fetch",
        capabilities: ["http", "log"],
        retry: { max_attempts: 3, initial_backoff_ms: 200 },
        estimated_duration_ms: 500,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let scheme = input
            .url
            .split_once("://")
            .map(|(s, _)| s.to_ascii_lowercase());
        if !matches!(scheme.as_deref(), Some("http" | "https")) {
            return Err(SkillError::invalid_input(format!(
                "`{}` is not an http or https URL",
                input.url
            )));
        }
        let response = http::get(&input.url)?;
        let content_type = response
            .headers
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("content-type"))
            .map(|(_, value)| value.clone())
            .unwrap_or_default();
        let body = String::from_utf8_lossy(&response.body);
        let (text, truncated) = match input.max_chars {
            0 => (body.into_owned(), false),
            n => match body.char_indices().nth(n as usize) {
                Some((cut, _)) => (body[..cut].to_string(), true),
                None => (body.into_owned(), false),
            },
        };
        log::info(format!(
            "GET {}: {} ({} bytes)",
            input.url,
            response.status,
            response.body.len()
        ));
        Ok(Output {
            url: input.url,
            status: response.status,
            content_type,
            text,
            truncated,
        })
    }
}

export!(WebFetch);

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost_sdk::testing;

    fn input(url: &str, max_chars: u32) -> Input {
        Input {
            url: url.to_string(),
            max_chars,
        }
    }

    #[test]
    fn returns_status_type_and_text() {
        testing::set_http_handler(|request| {
            assert_eq!(request.method, "GET");
            Ok(http::Response {
                status: 200,
                headers: vec![("Content-Type".into(), "text/plain".into())],
                body: "héllo wörld".as_bytes().to_vec(),
            })
        });
        let out = WebFetch::run(input("https://example.org/a", 0)).unwrap();
        assert_eq!(out.status, 200);
        assert_eq!(out.content_type, "text/plain");
        assert_eq!(out.text, "héllo wörld");
        assert!(!out.truncated);
        let out = WebFetch::run(input("https://example.org/a", 4)).unwrap();
        assert_eq!((out.text.as_str(), out.truncated), ("héll", true));
    }

    #[test]
    fn a_404_is_an_answer() {
        testing::set_http_handler(|_| {
            Ok(http::Response {
                status: 404,
                headers: Vec::new(),
                body: Vec::new(),
            })
        });
        let out = WebFetch::run(input("http://example.org/missing", 0)).unwrap();
        assert_eq!((out.status, out.content_type.as_str()), (404, ""));
    }

    #[test]
    fn refuses_urls_that_are_not_http() {
        for url in ["file:///etc/passwd", "example.org", "ftp://example.org/"] {
            let err = WebFetch::run(input(url, 0)).unwrap_err();
            assert_eq!(err.code, "invalid-input", "{url}");
        }
    }

    #[test]
    fn the_host_error_is_the_skill_error() {
        testing::set_http_handler(|_| {
            Err(SkillError::new(
                "host-not-granted",
                "`a.org:443` is not granted",
            ))
        });
        let err = WebFetch::run(input("https://a.org/", 0)).unwrap_err();
        assert_eq!(err.code, "host-not-granted");
    }
}
