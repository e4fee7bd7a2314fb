//! The pull side of the OCI distribution API, spoken by the host itself
//! over reqwest so that nothing a registry answers is taken on trust:
//! oci-client reads a manifest, a token and an error body whole, and its
//! client follows redirects anywhere. Here:
//!
//! - **sizes**: a manifest is read to at most [`MAX_MANIFEST_BYTES`] (4 MiB,
//!   as containerd and Docker cap it), a token answer to [`MAX_TOKEN_BYTES`],
//!   an error body to [`MAX_ERROR_BYTES`], of which a short excerpt is kept;
//!   a `Content-Length` past the cap is refused before a byte of the body is
//!   read, and a body without one is cut one chunk past it. Blobs are
//!   streamed by the caller ([`Registry`](crate::Registry)), which holds them
//!   to their declared size and the component cap;
//! - **redirects** are followed here, at most [`MAX_REDIRECTS`], each
//!   target checked: the registry's own origin (scheme, host, port), or a
//!   host `[registries] redirects` lists for it in the host config (and
//!   the well-known blob hosts, [`KNOWN_BLOB_HOSTS`]), over HTTPS unless
//!   plain HTTP is allowed for it as for a registry; never from `https` to
//!   `http`. The registry's `Authorization` goes to its own origin only, so
//!   a CDN never sees the credentials;
//! - **credentials**: basic credentials are sent when the registry asks for
//!   them (`WWW-Authenticate: Basic`), or to the token service a
//!   `WWW-Authenticate: Bearer` challenge names (the registry token flow),
//!   which must be HTTPS unless the registry itself is reached over HTTP or
//!   the service is on loopback; a token is kept per repository scope for
//!   the client's life;
//! - **time**: connecting takes at most 10 s and a read that stalls 60 s
//!   fails; the whole pull is held to `[registries] pull_timeout_ms` by its
//!   caller ([`Resolver`](crate::Resolver)).
//!
//! Owns: the requests of a pull and the errors of their answers, each
//! naming the reference. Must not: store anything (the cache is the
//! caller's), or push (oci-client does, to a registry the user names).

use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use reqwest::header::{ACCEPT, AUTHORIZATION, LOCATION, WWW_AUTHENTICATE};
use reqwest::{Response, StatusCode, Url};

use crate::config::HostConfig;
pub use crate::config::{KNOWN_BLOB_HOSTS, MAX_MANIFEST_BYTES};
use crate::credentials::Credentials;
use crate::error::{OciError, Result};
use crate::reference::ComponentRef;

/// Redirects one request follows before it gives up.
pub const MAX_REDIRECTS: usize = 5;
/// The largest answer of a token service.
pub const MAX_TOKEN_BYTES: u64 = 1 << 20;
/// The most of an error answer read for its message.
pub const MAX_ERROR_BYTES: usize = 64 << 10;
/// The characters of an error answer an error message keeps.
const EXCERPT_CHARS: usize = 300;

/// A client of one registry's pull API.
pub(crate) struct Distribution {
    http: reqwest::Client,
    /// `HOST[:PORT]`, as the reference names it.
    registry: String,
    /// `SCHEME://HOST[:PORT]/`.
    base: Url,
    credentials: Credentials,
    config: HostConfig,
    /// Per repository scope, the `Authorization` its challenge was answered
    /// with.
    authorizations: Mutex<Vec<(String, String)>>,
}

impl Distribution {
    pub(crate) fn new(
        registry: &str,
        insecure: bool,
        credentials: Credentials,
        config: HostConfig,
    ) -> Result<Distribution> {
        let scheme = if insecure { "http" } else { "https" };
        let base =
            Url::parse(&format!("{scheme}://{registry}/")).map_err(|e| OciError::BadReference {
                input: registry.to_string(),
                reason: format!("its registry is not a host: {e}"),
            })?;
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_secs(60))
            .user_agent(concat!("skillhost/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| OciError::Machine(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Distribution {
            http,
            registry: registry.to_string(),
            base,
            credentials,
            config,
            authorizations: Mutex::new(Vec::new()),
        })
    }

    /// The manifest `reference` names (its digest, else its tag), accepted
    /// as `accept`: its bytes, at most [`MAX_MANIFEST_BYTES`], and the
    /// digest the registry says it has, if it says.
    pub(crate) async fn manifest(
        &self,
        reference: &ComponentRef,
        accept: &str,
    ) -> Result<(Vec<u8>, Option<String>)> {
        let target = reference
            .digest()
            .or(reference.tag())
            .expect("a parsed reference has a tag or a digest");
        let path = format!("v2/{}/manifests/{target}", reference.repository());
        let response = self.get(reference, &path, Some(accept)).await?;
        let response = self.ok(reference, response).await?;
        let digest = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = read_capped(
            reference,
            response,
            MAX_MANIFEST_BYTES,
            "manifest",
            "a manifest may be (the cap containerd and Docker keep)",
        )
        .await?;
        Ok((bytes, digest))
    }

    /// The blob `digest` of `reference`'s repository, its answer checked and
    /// ready to stream.
    pub(crate) async fn blob(&self, reference: &ComponentRef, digest: &str) -> Result<Response> {
        let path = format!("v2/{}/blobs/{digest}", reference.repository());
        let response = self.get(reference, &path, None).await?;
        self.ok(reference, response).await
    }

    /// GETs `path` of the registry, answering its challenge once.
    async fn get(
        &self,
        reference: &ComponentRef,
        path: &str,
        accept: Option<&str>,
    ) -> Result<Response> {
        let url = self.base.join(path).map_err(|e| OciError::BadReference {
            input: reference.to_string(),
            reason: format!("it does not make a URL: {e}"),
        })?;
        let scope = format!("repository:{}:pull", reference.repository());
        let mut answered = false;
        loop {
            let authorization = self.authorization(&scope);
            let response = self
                .follow(
                    reference,
                    url.clone(),
                    accept,
                    authorization.as_deref(),
                    &self.base,
                )
                .await?;
            if response.status() != StatusCode::UNAUTHORIZED || answered {
                return Ok(response);
            }
            let Some(challenge) = response
                .headers()
                .get(WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
            else {
                return Ok(response);
            };
            match self.answer(reference, &scope, &challenge).await? {
                Some(authorization) => {
                    let mut known = self.authorizations.lock().expect("authorizations");
                    known.retain(|(s, _)| *s != scope);
                    known.push((scope.clone(), authorization));
                }
                // Nothing to answer with: the 401 is the answer.
                None => return Ok(response),
            }
            answered = true;
        }
    }

    /// What a request for `scope` carries: its token, or the credentials
    /// given as a bearer token, else nothing until the registry asks.
    fn authorization(&self, scope: &str) -> Option<String> {
        let known = self.authorizations.lock().expect("authorizations");
        if let Some((_, authorization)) = known.iter().find(|(s, _)| s == scope) {
            return Some(authorization.clone());
        }
        match &self.credentials.auth {
            oci_client::secrets::RegistryAuth::Bearer(token) => Some(format!("Bearer {token}")),
            _ => None,
        }
    }

    /// `Basic …` of the credentials, if they are a user and password.
    fn basic(&self) -> Option<String> {
        match &self.credentials.auth {
            oci_client::secrets::RegistryAuth::Basic(user, password) => Some(format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
            )),
            _ => None,
        }
    }

    /// The `Authorization` that answers `challenge` for `scope`: the
    /// credentials for `Basic`, a token from the service a `Bearer`
    /// challenge names; none when there is nothing to answer with.
    async fn answer(
        &self,
        reference: &ComponentRef,
        scope: &str,
        challenge: &str,
    ) -> Result<Option<String>> {
        let (scheme, params) = parse_challenge(challenge);
        if scheme.eq_ignore_ascii_case("basic") {
            return Ok(self.basic());
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Ok(None);
        }
        let registry_error = |cause: String| OciError::Registry {
            reference: reference.to_string(),
            cause,
        };
        let realm = params
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("realm"))
            .map(|(_, v)| v.as_str())
            .ok_or_else(|| {
                registry_error(
                    "it asks for a bearer token without naming where to get one (no `realm`)"
                        .into(),
                )
            })?;
        let mut realm = Url::parse(realm).map_err(|e| {
            registry_error(format!("its token service `{realm}` is not a URL: {e}"))
        })?;
        let in_clear_allowed =
            self.base.scheme() == "http" || self.config.allows_http(&host_port(&realm));
        match realm.scheme() {
            "https" => {}
            "http" if in_clear_allowed => {}
            _ => {
                return Err(registry_error(format!(
                    "its token service `{}` is not HTTPS, and the credentials would go there \
                     in clear",
                    realm.origin().ascii_serialization()
                )));
            }
        }
        realm.set_fragment(None);
        {
            let mut query = realm.query_pairs_mut();
            query.append_pair("scope", scope);
            if let Some((_, service)) = params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("service"))
            {
                query.append_pair("service", service);
            }
        }
        let service = realm.origin().ascii_serialization();
        let basic = self.basic();
        let response = self
            .follow(reference, realm.clone(), None, basic.as_deref(), &realm)
            .await?;
        let status = response.status();
        if !status.is_success() {
            let (_, excerpt) = error_excerpt(response).await;
            let cause = format!("the token service {service} answered {status}{excerpt}");
            return Err(match status.as_u16() {
                401 | 403 => self.unauthorized(reference, cause),
                _ => registry_error(cause),
            });
        }
        let body = read_capped(
            reference,
            response,
            MAX_TOKEN_BYTES,
            "token answer",
            "a token answer may be",
        )
        .await?;
        #[derive(serde::Deserialize)]
        struct Token {
            token: Option<String>,
            access_token: Option<String>,
        }
        let token: Token = serde_json::from_slice(&body).map_err(|e| {
            registry_error(format!(
                "the token service {service} answered with no token: {e}"
            ))
        })?;
        let token = token
            .token
            .or(token.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                registry_error(format!(
                    "the token service {service} answered with no `token` or `access_token`"
                ))
            })?;
        Ok(Some(format!("Bearer {token}")))
    }

    /// Sends a GET of `url` and follows its redirects, each checked; the
    /// `Authorization` goes to `home`'s origin only.
    async fn follow(
        &self,
        reference: &ComponentRef,
        mut url: Url,
        accept: Option<&str>,
        authorization: Option<&str>,
        home: &Url,
    ) -> Result<Response> {
        for _ in 0..=MAX_REDIRECTS {
            let mut request = self.http.get(url.clone());
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            if let Some(authorization) = authorization
                && url.origin() == home.origin()
            {
                request = request.header(AUTHORIZATION, authorization);
            }
            let response = request
                .send()
                .await
                .map_err(|e| self.unreachable(reference, &e))?;
            if !response.status().is_redirection() {
                return Ok(response);
            }
            let Some(location) = response
                .headers()
                .get(LOCATION)
                .and_then(|v| v.to_str().ok())
            else {
                return Ok(response);
            };
            let next = url.join(location).map_err(|e| OciError::Redirect {
                reference: reference.to_string(),
                registry: self.registry.clone(),
                target: excerpt(location),
                reason: format!("it is not a URL ({e})"),
            })?;
            self.check_redirect(reference, &url, &next, home)?;
            url = next;
        }
        Err(OciError::Registry {
            reference: reference.to_string(),
            cause: format!("it redirected more than {MAX_REDIRECTS} times"),
        })
    }

    /// A redirect from `from` to `to` is followed only to `home`'s origin or
    /// a host listed for the registry, never from HTTPS to plain HTTP.
    fn check_redirect(
        &self,
        reference: &ComponentRef,
        from: &Url,
        to: &Url,
        home: &Url,
    ) -> Result<()> {
        let target = host_port(to);
        let refuse = |reason: String| {
            Err(OciError::Redirect {
                reference: reference.to_string(),
                registry: self.registry.clone(),
                target: to.origin().ascii_serialization(),
                reason,
            })
        };
        if !matches!(to.scheme(), "http" | "https") {
            return refuse("it is not an http or https URL".into());
        }
        if from.scheme() == "https" && to.scheme() == "http" {
            return refuse("it goes from HTTPS to plain HTTP".into());
        }
        if to.origin() == home.origin() {
            return Ok(());
        }
        if !self.config.redirect_allowed(&self.registry, &target) {
            let config = match &self.config.path {
                Some(path) => format!(" ({})", path.display()),
                None => String::new(),
            };
            return refuse(format!(
                "a registry's content is taken from its own origin and from the hosts listed \
                 for it under [registries] redirects in the host config{config} only. If \
                 `{target}` is where `{registry}` keeps its blobs, list it: `redirects = {{ \
                 \"{registry}\" = [\"{target}\"] }}`",
                registry = self.registry
            ));
        }
        if to.scheme() == "http" && !self.config.allows_http(&target) {
            return refuse(
                "it is plain HTTP, which is used only for loopback and the hosts listed under \
                 [registries] insecure"
                    .into(),
            );
        }
        Ok(())
    }

    /// An answer that is not a success as an error naming `reference`, with
    /// an excerpt of what the registry said.
    async fn ok(&self, reference: &ComponentRef, response: Response) -> Result<Response> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let (codes, excerpt) = error_excerpt(response).await;
        let cause = format!("HTTP {}{excerpt}", status.as_u16());
        let has = |wanted: &[&str]| codes.iter().any(|c| wanted.contains(&c.as_str()));
        let not_found = [
            "MANIFEST_UNKNOWN",
            "NAME_UNKNOWN",
            "BLOB_UNKNOWN",
            "NOT_FOUND",
        ];
        Err(
            if matches!(status.as_u16(), 401 | 403) || has(&["UNAUTHORIZED", "DENIED"]) {
                self.unauthorized(reference, cause)
            } else if status == StatusCode::NOT_FOUND || has(&not_found) {
                OciError::NotFound {
                    reference: reference.to_string(),
                    cause,
                }
            } else {
                OciError::Registry {
                    reference: reference.to_string(),
                    cause,
                }
            },
        )
    }

    fn unauthorized(&self, reference: &ComponentRef, cause: String) -> OciError {
        OciError::Unauthorized {
            reference: reference.to_string(),
            cause,
            credentials: self.credentials.source().to_string(),
        }
    }

    /// A request that got no answer: refused, timed out, TLS.
    pub(crate) fn unreachable(&self, reference: &ComponentRef, e: &reqwest::Error) -> OciError {
        let hint = if self.base.scheme() == "http" {
            String::new()
        } else {
            format!(
                " and serves HTTPS; a registry on another machine that speaks plain HTTP must \
                 be listed under [registries] insecure in the host config ({})",
                crate::config::default_config_path()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|| "$SKILLHOST_CONFIG".into())
            )
        };
        OciError::Unreachable {
            reference: reference.to_string(),
            registry: self.registry.clone(),
            cause: crate::registry::error_chain(e),
            hint,
        }
    }
}

/// `HOST[:PORT]` of `url`, the port only when it is not the scheme's default.
fn host_port(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    }
}

/// Reads `response`'s body, refusing one larger than `limit` bytes: by its
/// `Content-Length` before reading, else one chunk past the limit.
pub(crate) async fn read_capped(
    reference: &ComponentRef,
    mut response: Response,
    limit: u64,
    what: &str,
    rule: &str,
) -> Result<Vec<u8>> {
    let too_large = |found: String| OciError::TooLarge {
        reference: reference.to_string(),
        what: what.to_string(),
        found,
        limit,
        rule: rule.to_string(),
    };
    if let Some(length) = response.content_length()
        && length > limit
    {
        return Err(too_large(format!(
            "{length} bytes long, by its Content-Length"
        )));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| OciError::Registry {
        reference: reference.to_string(),
        cause: format!("the {what} broke off: {}", crate::registry::error_chain(&e)),
    })? {
        if body.len() as u64 + chunk.len() as u64 > limit {
            return Err(too_large("longer (the host read no further)".into()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error answer's codes (its OCI error envelope's, if it has one) and a
/// short excerpt of it (`": …"`, or empty), from at most
/// [`MAX_ERROR_BYTES`] of its body.
async fn error_excerpt(mut response: Response) -> (Vec<String>, String) {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    body.truncate(MAX_ERROR_BYTES);
    #[derive(serde::Deserialize)]
    struct Envelope {
        errors: Vec<Entry>,
    }
    #[derive(serde::Deserialize)]
    struct Entry {
        code: String,
        #[serde(default)]
        message: String,
    }
    if let Ok(envelope) = serde_json::from_slice::<Envelope>(&body) {
        let text = envelope
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.code, e.message))
            .collect::<Vec<_>>()
            .join("; ");
        let codes = envelope.errors.into_iter().map(|e| e.code).collect();
        return (codes, format!(": {}", excerpt(&text)));
    }
    let text = String::from_utf8_lossy(&body);
    let text = text.trim();
    if text.is_empty() {
        return (Vec::new(), String::new());
    }
    (Vec::new(), format!(": {}", excerpt(text)))
}

/// At most [`EXCERPT_CHARS`] of `text`, control characters as spaces, and
/// `…` when cut.
fn excerpt(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(EXCERPT_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(EXCERPT_CHARS).is_some() {
        out.push('…');
    }
    out
}

/// A `WWW-Authenticate` challenge: its scheme and its parameters
/// (`Bearer realm="…",service="…"`), quoted strings unquoted.
fn parse_challenge(header: &str) -> (String, Vec<(String, String)>) {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    let mut params = Vec::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars
            .by_ref()
            .take_while(|c| *c != '=')
            .collect::<String>()
            .trim()
            .to_string();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek().copied() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        params.push((key, value));
    }
    (scheme.to_string(), params)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_are_read_with_quoted_and_bare_values() {
        let (scheme, params) = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        );
        assert_eq!(scheme, "Bearer");
        assert_eq!(
            params,
            [
                (
                    "realm".to_string(),
                    "https://auth.example/token".to_string()
                ),
                ("service".to_string(), "registry.example".to_string()),
                ("scope".to_string(), "repository:a/b:pull,push".to_string()),
            ]
        );
        let (scheme, params) = parse_challenge(r#"Basic realm=registry, charset="UTF-8""#);
        assert_eq!(scheme, "Basic");
        assert_eq!(params[0], ("realm".into(), "registry".into()));
        assert_eq!(params[1], ("charset".into(), "UTF-8".into()));
        assert_eq!(parse_challenge("Basic"), ("Basic".to_string(), Vec::new()));
        let (_, params) = parse_challenge(r#"Bearer realm="a\"b""#);
        assert_eq!(params[0].1, "a\"b");
    }

    #[test]
    fn an_excerpt_is_short_and_printable() {
        let long = "x".repeat(10_000);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(excerpt("a\r\nb\u{1b}[31m"), "a  b [31m");
    }

    #[test]
    fn a_host_port_omits_the_default_port() {
        let url = |u: &str| Url::parse(u).unwrap();
        assert_eq!(host_port(&url("https://cdn.example/x")), "cdn.example");
        assert_eq!(host_port(&url("https://cdn.example:443/x")), "cdn.example");
        assert_eq!(host_port(&url("http://127.0.0.1:5000/")), "127.0.0.1:5000");
        assert_eq!(host_port(&url("http://[::1]:5000/")), "[::1]:5000");
    }
}
