//! The `http` capability: outbound requests to the hosts a scenario grants.
//!
//! A node grants hosts, not URLs:
//!
//! ```toml
//! capabilities = { http = ["export.arxiv.org", "*.semanticscholar.org", "127.0.0.1:8080"] }
//! capabilities = { http = { hosts = ["api.example.org", "cdn.example.org"],
//!                           max_response_bytes = 1048576,
//!                           headers = { "https://api.example.org" = { Authorization = "env:EXAMPLE_TOKEN" } } } }
//! ```
//!
//! A pattern is an exact host name, `*.` and a domain (its subdomains, at any
//! depth, not the domain itself), or an IP address, each with an optional
//! `:PORT`; without one, only the scheme's default port (80, 443). What a call
//! may do:
//!
//! - **methods** GET, POST, PUT and DELETE, to `http` and `https` URLs whose
//!   host and port a pattern matches; anything else is refused before a byte
//!   leaves the host;
//! - **redirects** are followed by this module, not the client, at most
//!   [`MAX_REDIRECTS`] of them, each target checked against the grant like
//!   the first URL (`redirect-not-granted` otherwise); never from `https` to
//!   `http` (`insecure-redirect`), and never to a URL that holds a secret of
//!   the grant. A redirect to another origin (scheme, host and port) drops
//!   the skill's own credentials (`Authorization`, `Cookie`,
//!   `Proxy-Authorization`) for the rest of the chain, as curl, browsers and
//!   reqwest's own policy do;
//! - **addresses**: a granted *name* may only resolve to public addresses.
//!   One that resolves to a loopback, private, link-local, shared or
//!   unspecified address is refused (`address-not-allowed`), so a granted
//!   name cannot be pointed at the host's own network; to reach such an
//!   address, grant the address itself and use it in the URL. The check is
//!   in the client's resolver, so the address checked is the address
//!   connected to;
//! - **time**: a request never outlives the call's deadline: it gets what is
//!   left of it (less, if the skill asks for less with `timeout-ms`);
//! - **size**: a response body larger than the grant's `max_response_bytes`
//!   (default [`DEFAULT_MAX_RESPONSE_BYTES`]) is refused, read no further than
//!   one byte past the limit;
//! - **secrets**: a grant's `headers` take their values from the host's
//!   environment (`"env:NAME"`), read when the grant is parsed, and each is
//!   bound to one origin (scheme, host, port), written as the key of its
//!   table: `headers = { "https://api.example.org" = { Authorization =
//!   "env:TOKEN" } }`. A secret is added to a request, and replaces a header
//!   of the same name the skill set, only when that request goes to its
//!   origin: not to another granted host, not after a redirect that leaves
//!   the origin, never over `http` unless the origin says `http://`. The
//!   older form, `headers = { Authorization = "env:TOKEN" }`, is read as the
//!   `https` origin of the grant's one host when the grant names one exact
//!   host without a port, and refused otherwise, saying how to write it. A
//!   request that carries a secret asks for an unencoded body
//!   (`Accept-Encoding: identity`) and refuses an encoded one
//!   (`response-encoded`), and every answer is redacted before the skill
//!   sees it: each secret's value, and the credentials after its scheme
//!   (`Bearer …`), as sent, JSON-escaped or URL-encoded, is replaced by
//!   `[redacted env:NAME]` in the headers, the body and error messages. So a
//!   host that echoes the request hands the skill, the journal and the run's
//!   state no secret; one that transforms it otherwise (hashes, encrypts,
//!   re-encodes it) is trusted with it, as the grant says. Secrets appear
//!   nowhere else: not in the journal (which records the request as the
//!   skill made it), not in logs, events or `runs show`, not in the grant's
//!   `Debug`.
//!
//! Every `fetch` is journaled: the request as the skill made it (its body by
//! length and SHA-256) and the response (status, headers, body), or the
//! error. A replay answers from the journal and never reaches the network.
//! Statuses are answers, not errors: a 404 is `ok` with status 404.
//!
//! An async (WASI 0.3) skill may stream a body instead (`http-stream`,
//! [`stream`]): the same grant and every guarantee above, the size and the
//! redaction counted over the stream as it arrives, and a grant's
//! `max_streams` (default 4) bounding the bodies one call has in flight.
//!
//! The client ([`ReqwestHttp`], the default [`HttpBackend`]) is reqwest's
//! blocking client over rustls with the system's roots, built on first use.
//! It blocks its thread, so the engine calls a skill that imports `http` on a
//! blocking thread (see `Skill::needs_blocking_thread`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use wasmtime::component::Linker;

use super::bindings::skillhost::skill::http::{self as wit, Request, Response};
use super::{
    Backends, Capability, Effects, GrantError, Grantable, Grants, GuestError, HasHostCall,
    HostCall, HostCapability, guest_error, text_of,
};
use crate::call::{CallOptions, CallState};
use crate::journal::JournalValue;
use crate::limits::AnswerRoom;

/// `http-stream`: a response body streamed to an async (WASI 0.3) skill.
#[path = "http_stream.rs"]
pub mod stream;

/// The largest response body a grant allows unless it says otherwise.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 10 << 20;
/// The largest `max_response_bytes` a grant may set.
pub const MAX_RESPONSE_BYTES_LIMIT: u64 = 1 << 30;
/// Redirects one `fetch` follows before it gives up.
pub const MAX_REDIRECTS: usize = 10;
/// What the journal holds of a response besides its body, at most as far
/// as the body's limit is concerned: its status, headers and bookkeeping.
const ANSWER_OVERHEAD: u64 = 64 << 10;

const METHODS: [&str; 4] = ["GET", "POST", "PUT", "DELETE"];

/// The hosts a skill may reach, and what its requests carry.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpGrant {
    pub hosts: Vec<HostPattern>,
    pub max_response_bytes: u64,
    /// How many streamed bodies (`http-stream`) one call may have in
    /// flight at once; `None`: [`stream::DEFAULT_MAX_STREAMS`].
    pub max_streams: Option<u32>,
    headers: Vec<SecretHeader>,
}

/// A header whose value comes from the host's environment, sent only to the
/// origin it is bound to.
#[derive(Clone, PartialEq, Eq)]
struct SecretHeader {
    origin: url::Origin,
    name: String,
    variable: String,
    value: String,
}

impl fmt::Debug for HttpGrant {
    /// Names each secret header's origin and variable, never its value.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|h| {
                format!(
                    "{} {}: env:{}",
                    h.origin.ascii_serialization(),
                    h.name,
                    h.variable
                )
            })
            .collect();
        f.debug_struct("HttpGrant")
            .field("hosts", &self.hosts)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("max_streams", &self.max_streams)
            .field("headers", &headers)
            .finish()
    }
}

const PATTERN_HELP: &str = "a host pattern is a host name (`export.arxiv.org`), `*.` and a \
    domain (`*.semanticscholar.org`) or an IP address (`127.0.0.1`, `[::1]`), with an optional \
    `:PORT`; no scheme, path or user";

impl HttpGrant {
    /// Parses a grant: one pattern, patterns separated by commas, a JSON list
    /// of patterns, or a JSON object with `hosts` and optionally
    /// `max_response_bytes` and `headers` (the scenario's TOML array or table
    /// arrives as JSON).
    pub fn parse(value: &str) -> Result<Self, GrantError> {
        let error = |message: String| GrantError::new("http", message);
        let text = value.trim();
        let mut grant = HttpGrant {
            hosts: Vec::new(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            max_streams: None,
            headers: Vec::new(),
        };
        // A JSON list or table; `[` may also open an IPv6 pattern (`[::1]:80`).
        let json = match serde_json::from_str::<Value>(text) {
            Ok(json) if text.starts_with('[') || text.starts_with('{') => Some(json),
            Err(e) if text.starts_with('{') => {
                return Err(error(format!("the grant is not a table: {e}")));
            }
            _ => None,
        };
        let mut headers = None;
        let hosts: Vec<String> = if let Some(json) = json {
            match json {
                Value::Array(_) => host_list(&json).map_err(error)?,
                Value::Object(table) => {
                    let mut hosts = None;
                    for (key, value) in &table {
                        match key.as_str() {
                            "hosts" => hosts = Some(host_list(value).map_err(error)?),
                            "max_response_bytes" => {
                                grant.max_response_bytes = match value.as_u64() {
                                    Some(n) if (1..=MAX_RESPONSE_BYTES_LIMIT).contains(&n) => n,
                                    _ => {
                                        return Err(error(format!(
                                            "`max_response_bytes` must be a whole number of \
                                             bytes from 1 to {MAX_RESPONSE_BYTES_LIMIT}, not \
                                             {value}"
                                        )));
                                    }
                                }
                            }
                            "max_streams" => {
                                grant.max_streams = match value.as_u64() {
                                    Some(n)
                                        if (1..=u64::from(stream::MAX_STREAMS_LIMIT))
                                            .contains(&n) =>
                                    {
                                        Some(n as u32)
                                    }
                                    _ => {
                                        return Err(error(format!(
                                            "`max_streams` must be a whole number from 1 to \
                                             {}, not {value}",
                                            stream::MAX_STREAMS_LIMIT
                                        )));
                                    }
                                }
                            }
                            "headers" => headers = Some(value.clone()),
                            other => {
                                return Err(error(format!(
                                    "unknown key `{other}`; a grant table has `hosts`, \
                                     `max_response_bytes`, `max_streams` and `headers`"
                                )));
                            }
                        }
                    }
                    hosts.ok_or_else(|| {
                        error("the grant table needs `hosts`, a list of host patterns".into())
                    })?
                }
                other => {
                    return Err(error(format!(
                        "`{other}` is not a list or table of host patterns"
                    )));
                }
            }
        } else {
            text.split(',').map(|p| p.trim().to_string()).collect()
        };
        for pattern in hosts {
            grant
                .hosts
                .push(HostPattern::parse(&pattern).map_err(error)?);
        }
        if grant.hosts.is_empty() || grant.hosts.iter().all(|h| h.text.is_empty()) {
            return Err(error(format!("no host is granted; {PATTERN_HELP}")));
        }
        // The secrets last: each names an origin the hosts must allow.
        if let Some(headers) = headers {
            grant.headers = secret_headers(&headers, &grant).map_err(error)?;
        }
        Ok(grant)
    }

    /// The grant's secret headers bound to `url`'s origin.
    fn secrets_for<'a>(&'a self, url: &url::Url) -> impl Iterator<Item = &'a SecretHeader> {
        let origin = url.origin();
        self.headers.iter().filter(move |s| s.origin == origin)
    }

    /// Whether the grant sends headers whose values come from the host's
    /// environment.
    pub fn has_headers(&self) -> bool {
        !self.headers.is_empty()
    }

    /// Whether a request to `url` is allowed.
    pub fn allows(&self, url: &url::Url) -> bool {
        let Some(host) = url.host() else {
            return false;
        };
        let Some(port) = url.port_or_known_default() else {
            return false;
        };
        let default_port = match url.scheme() {
            "http" => 80,
            "https" => 443,
            _ => return false,
        };
        self.hosts
            .iter()
            .any(|p| p.matches(&host, port, default_port))
    }
}

fn host_list(value: &Value) -> Result<Vec<String>, String> {
    match value {
        Value::String(one) => Ok(vec![one.clone()]),
        Value::Array(items) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("`{item}` is not a host pattern; {PATTERN_HELP}"))
            })
            .collect(),
        other => Err(format!(
            "`hosts` must be a list of host patterns, not {other}"
        )),
    }
}

/// A grant's `headers`: a table of origins, each a table of header names to
/// `"env:VARIABLE"`; or, the older form, one table of header names, bound
/// to the grant's one host when that is unambiguous.
fn secret_headers(value: &Value, grant: &HttpGrant) -> Result<Vec<SecretHeader>, String> {
    let Value::Object(table) = value else {
        return Err(format!(
            "`headers` must be a table of origins, each a table of header names to \
             `\"env:VARIABLE\"` (`headers = {{ \"https://api.example.org\" = {{ Authorization \
             = \"env:TOKEN\" }} }}`), not {value}"
        ));
    };
    let by_origin = table.values().any(Value::is_object);
    if !by_origin {
        let Some((name, source)) = table.iter().next() else {
            return Ok(Vec::new());
        };
        let origin = sole_origin(grant, name, source)?;
        let mut headers = Vec::new();
        for (name, source) in table {
            add_secret(&mut headers, &origin, name, source)?;
        }
        return Ok(headers);
    }
    let mut headers = Vec::new();
    let mut origins: Vec<(url::Origin, &str)> = Vec::new();
    for (text, named) in table {
        let Value::Object(named) = named else {
            return Err(format!(
                "`headers` mixes origins and header names (`{text}`); write each header \
                 under the origin it is sent to: `headers = {{ \"https://api.example.org\" = \
                 {{ {text} = \"env:VARIABLE\" }} }}`"
            ));
        };
        let origin = secret_origin(text, grant)?;
        if let Some((_, first)) = origins.iter().find(|(o, _)| *o == origin) {
            return Err(format!(
                "`headers`: `{first}` and `{text}` are the same origin; write its headers once"
            ));
        }
        origins.push((origin.clone(), text));
        for (name, source) in named {
            add_secret(&mut headers, &origin, name, source)?;
        }
    }
    Ok(headers)
}

/// The origin the older form's headers are bound to: the `https` origin of
/// the grant's one exact host, if it has no port (a port leaves the scheme
/// open, several hosts or a wildcard the host).
fn sole_origin(grant: &HttpGrant, name: &str, source: &Value) -> Result<url::Origin, String> {
    let why = match grant.hosts.as_slice() {
        [only] if only.port.is_none() => {
            let host = match &only.host {
                HostMatch::Name(name) => Some(name.clone()),
                HostMatch::Ip(IpAddr::V4(v4)) => Some(v4.to_string()),
                HostMatch::Ip(IpAddr::V6(v6)) => Some(format!("[{v6}]")),
                HostMatch::Subdomains(_) => None,
            };
            if let Some(host) = host {
                let url = url::Url::parse(&format!("https://{host}"))
                    .map_err(|e| format!("`{host}` is not a host: {e}"))?;
                return Ok(url.origin());
            }
            "its host is a wildcard"
        }
        [_] => "its host has a port, which leaves the scheme open",
        _ => "it names several hosts",
    };
    let example = grant
        .hosts
        .iter()
        .find_map(|p| {
            let host = match &p.host {
                HostMatch::Name(name) => name.clone(),
                HostMatch::Ip(IpAddr::V4(v4)) => v4.to_string(),
                HostMatch::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
                HostMatch::Subdomains(_) => return None,
            };
            Some(match p.port {
                Some(port) => format!("https://{host}:{port}"),
                None => format!("https://{host}"),
            })
        })
        .unwrap_or_else(|| "https://api.example.org".to_string());
    let source = source.as_str().unwrap_or("env:VARIABLE");
    Err(format!(
        "`headers` must say which origin each secret is sent to, since {why}: write \
         `headers = {{ \"{example}\" = {{ {name} = \"{source}\" }} }}` (the scheme, host and \
         port the secret goes to; a secret is never sent to another origin, and over plain \
         HTTP only if its origin says `http://`)"
    ))
}

/// An origin a secret is bound to: `https://HOST` or `https://HOST:PORT`
/// (or `http://`), exact, and allowed by the grant's hosts.
fn secret_origin(text: &str, grant: &HttpGrant) -> Result<url::Origin, String> {
    let bad = |why: &str| {
        format!(
            "`headers`: `{text}` {why}; an origin is written `https://HOST` or \
             `https://HOST:PORT` (the scheme, host and port its secrets are sent to; \
             `http://` sends them in clear)"
        )
    };
    let url = url::Url::parse(text).map_err(|_| bad("is not an origin"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("is not an http or https origin"));
    }
    if !url.username().is_empty()
        || url.password().is_some()
        || url.path() != "/"
        || url.query().is_some()
        || url.fragment().is_some()
    {
        return Err(bad("has more than a scheme, host and port"));
    }
    if url.host_str().is_some_and(|h| h.contains('*')) {
        return Err(bad(
            "is a wildcard; a secret is bound to one host, so name each origin",
        ));
    }
    if !grant.allows(&url) {
        let granted: Vec<String> = grant.hosts.iter().map(ToString::to_string).collect();
        return Err(format!(
            "`headers`: the origin `{text}` is not among the granted hosts ({}); a secret is \
             only sent to a host the grant allows: add it to `hosts`, or fix the origin",
            granted.join(", ")
        ));
    }
    Ok(url.origin())
}

/// Reads one secret header (`NAME = "env:VARIABLE"`) bound to `origin`.
fn add_secret(
    headers: &mut Vec<SecretHeader>,
    origin: &url::Origin,
    name: &str,
    source: &Value,
) -> Result<(), String> {
    if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Err(format!("`{name}` is not a valid header name"));
    }
    let variable = source
        .as_str()
        .and_then(|s| s.strip_prefix("env:"))
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            format!(
                "header `{name}`: a value comes from the host's environment, written \
                 `\"env:VARIABLE\"`; a secret is never written in a scenario"
            )
        })?;
    let value = std::env::var(variable).map_err(|_| {
        format!(
            "header `{name}` takes its value from ${variable}, which is not set in the \
             host's environment; set it, or remove the header"
        )
    })?;
    if value.trim().is_empty() {
        return Err(format!(
            "header `{name}` takes its value from ${variable}, which is empty; set it, or \
             remove the header"
        ));
    }
    if reqwest::header::HeaderValue::from_str(&value).is_err() {
        return Err(format!(
            "header `{name}`: ${variable} holds characters a header value cannot have"
        ));
    }
    let name = name.to_ascii_lowercase();
    if headers
        .iter()
        .any(|h| h.origin == *origin && h.name == name)
    {
        return Err(format!(
            "header `{name}` is given twice for `{}`",
            origin.ascii_serialization()
        ));
    }
    headers.push(SecretHeader {
        origin: origin.clone(),
        name,
        variable: variable.to_string(),
        value,
    });
    Ok(())
}

/// One host pattern of a grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPattern {
    /// As written, for messages.
    text: String,
    host: HostMatch,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum HostMatch {
    Name(String),
    /// `*.domain`: the domain's subdomains, not the domain itself.
    Subdomains(String),
    Ip(IpAddr),
}

impl HostPattern {
    pub fn parse(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("`{text}`: {why}; {PATTERN_HELP}");
        if text.is_empty() {
            return Err(bad("an empty pattern"));
        }
        if text.contains("://") || text.contains(['/', '@', '?', '#']) {
            return Err(bad("not a host"));
        }
        // `[v6]` or `[v6]:port`; `host` or `host:port`.
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (inside, after) = rest.split_once(']').ok_or_else(|| bad("an unclosed `[`"))?;
            let port = match after {
                "" => None,
                _ => Some(
                    after
                        .strip_prefix(':')
                        .ok_or_else(|| bad("junk after `]`"))?,
                ),
            };
            let ip: Ipv6Addr = inside.parse().map_err(|_| bad("not an IPv6 address"))?;
            (HostMatch::Ip(IpAddr::V6(ip)), port)
        } else {
            let (host, port) = match text.rsplit_once(':') {
                Some((host, port)) if !host.contains(':') => (host, Some(port)),
                Some(_) => return Err(bad("an IPv6 address must be written in brackets")),
                None => (text, None),
            };
            let host = host.to_ascii_lowercase();
            let matcher = if let Ok(ip) = host.parse::<Ipv4Addr>() {
                HostMatch::Ip(IpAddr::V4(ip))
            } else if let Some(domain) = host.strip_prefix("*.") {
                check_name(domain).map_err(|why| bad(&why))?;
                if !domain.contains('.') {
                    return Err(bad(&format!(
                        "`*.{domain}` would grant every name under a top-level domain"
                    )));
                }
                HostMatch::Subdomains(domain.to_string())
            } else {
                check_name(&host).map_err(|why| bad(&why))?;
                HostMatch::Name(host)
            };
            (matcher, port)
        };
        let port = match port {
            None => None,
            Some(port) => match port.parse::<u16>() {
                Ok(p) if p > 0 => Some(p),
                _ => return Err(bad(&format!("`{port}` is not a port (1 to 65535)"))),
            },
        };
        Ok(HostPattern {
            text: text.to_string(),
            host,
            port,
        })
    }

    /// Whether every request this pattern allows is one `outer` allows
    /// too: the same host, or a name or subdomain pattern under `outer`'s
    /// `*.domain`, on the same port (a pattern without one allows the
    /// scheme's default port only, so it is within only another without
    /// one). What a ceiling on grants (`host mcp --compose-ceiling`) asks
    /// of each pattern a composed scenario grants.
    pub fn within(&self, outer: &HostPattern) -> bool {
        if self.port != outer.port {
            return false;
        }
        let under = |name: &str, domain: &str| {
            name.len() > domain.len() + 1
                && name.ends_with(domain)
                && name.as_bytes()[name.len() - domain.len() - 1] == b'.'
        };
        match (&self.host, &outer.host) {
            (HostMatch::Name(a), HostMatch::Name(b)) => a == b,
            (HostMatch::Ip(a), HostMatch::Ip(b)) => a == b,
            (HostMatch::Name(a), HostMatch::Subdomains(d)) => under(a, d),
            (HostMatch::Subdomains(a), HostMatch::Subdomains(d)) => a == d || under(a, d),
            _ => false,
        }
    }

    fn matches(&self, host: &url::Host<&str>, port: u16, default_port: u16) -> bool {
        if port != self.port.unwrap_or(default_port) {
            return false;
        }
        match (&self.host, host) {
            (HostMatch::Name(name), url::Host::Domain(d)) => d.eq_ignore_ascii_case(name),
            (HostMatch::Subdomains(domain), url::Host::Domain(d)) => {
                let d = d.to_ascii_lowercase();
                d.len() > domain.len() + 1
                    && d.ends_with(domain.as_str())
                    && d.as_bytes()[d.len() - domain.len() - 1] == b'.'
            }
            (HostMatch::Ip(ip), url::Host::Ipv4(v4)) => *ip == IpAddr::V4(*v4),
            (HostMatch::Ip(ip), url::Host::Ipv6(v6)) => *ip == IpAddr::V6(*v6),
            _ => false,
        }
    }
}

impl fmt::Display for HostPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// A DNS name: labels of letters, digits and `-`, not starting or ending
/// with `-`, 1 to 63 bytes each, 253 in all.
fn check_name(name: &str) -> Result<(), String> {
    let valid_label = |label: &str| {
        (1..=63).contains(&label.len())
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.is_empty() || name.len() > 253 || !name.split('.').all(valid_label) {
        return Err(format!("`{name}` is not a host name"));
    }
    Ok(())
}

/// Whether `ip` is an address a granted name may resolve to: not the host's
/// own (loopback, unspecified), not a private network's (RFC 1918, shared
/// 100.64/10, unique local fc00::/7), not link-local, broadcast or multicast.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                || a == 0
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && v4.octets()[2] == 0))
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

/// A request as the backend sends it: one hop, no redirects followed.
pub struct OutboundRequest<'a> {
    pub method: &'a str,
    pub url: &'a url::Url,
    pub headers: &'a [(String, String)],
    pub body: Option<&'a [u8]>,
    pub timeout: Duration,
    pub max_response_bytes: u64,
}

/// A response as the backend received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpFailure {
    /// The request ran out of time.
    #[error("the request timed out")]
    Timeout,
    /// The body was larger than the grant allows.
    #[error("the response body is larger than {limit} bytes")]
    TooLarge { limit: u64 },
    /// A granted name resolved to an address it may not reach.
    #[error("{0}")]
    AddressNotAllowed(String),
    /// No connection, a TLS failure, a broken response.
    #[error("{0}")]
    Failed(String),
}

/// A response whose body is still to be read: its status and headers, and
/// the body as it arrives (`http-stream`).
pub struct InboundStream {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// Reads the body as it arrives; fails as [`read_failure`] says (a
    /// timeout is the request's).
    pub body: Box<dyn std::io::Read + Send>,
}

/// Where `http` requests go. One per runtime ([`Backends::http`]); the
/// default is [`ReqwestHttp`].
pub trait HttpBackend: Send + Sync {
    /// Sends one request and reads its response, without following
    /// redirects.
    fn send(&self, request: &OutboundRequest<'_>) -> Result<InboundResponse, HttpFailure>;

    /// Sends one request and returns its response once its head has
    /// arrived, the body to be read as it arrives (within the request's
    /// timeout), without following redirects. By default, the whole
    /// response read by [`HttpBackend::send`], its body handed on at once.
    fn open(&self, request: &OutboundRequest<'_>) -> Result<InboundStream, HttpFailure> {
        let response = self.send(request)?;
        Ok(InboundStream {
            status: response.status,
            headers: response.headers,
            body: Box::new(std::io::Cursor::new(response.body)),
        })
    }
}

/// A failure to read a body: a timeout (the request's, through reqwest or
/// the socket), or the error.
pub fn read_failure(error: &std::io::Error) -> HttpFailure {
    match error
        .get_ref()
        .and_then(|e| e.downcast_ref::<reqwest::Error>())
    {
        Some(e) if e.is_timeout() => HttpFailure::Timeout,
        _ if error.kind() == std::io::ErrorKind::TimedOut => HttpFailure::Timeout,
        _ => HttpFailure::Failed(format!("reading the response: {error}")),
    }
}

/// reqwest's blocking client over rustls with the system's roots, built on
/// first use; redirects off (the capability follows them itself), no proxy
/// from the environment, and a resolver that refuses non-public addresses.
#[derive(Default)]
pub struct ReqwestHttp {
    client: OnceLock<Result<reqwest::blocking::Client, String>>,
}

impl ReqwestHttp {
    fn client(&self) -> Result<&reqwest::blocking::Client, HttpFailure> {
        self.client
            .get_or_init(|| {
                reqwest::blocking::Client::builder()
                    .redirect(reqwest::redirect::Policy::none())
                    .no_proxy()
                    .dns_resolver(Arc::new(PublicOnly))
                    .user_agent(concat!("skillhost/", env!("CARGO_PKG_VERSION")))
                    .build()
                    .map_err(|e| format!("cannot set up the HTTP client: {e}"))
            })
            .as_ref()
            .map_err(|e| HttpFailure::Failed(e.clone()))
    }
}

impl ReqwestHttp {
    /// Sends `request`: the response, its head read, its body not yet,
    /// refused if its `Content-Length` is past the limit.
    fn start(
        &self,
        request: &OutboundRequest<'_>,
    ) -> Result<(reqwest::blocking::Response, Vec<(String, String)>), HttpFailure> {
        let client = self.client()?;
        let method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|e| HttpFailure::Failed(format!("method: {e}")))?;
        let mut builder = client
            .request(method, request.url.clone())
            .timeout(request.timeout);
        for (name, value) in request.headers {
            builder = builder.header(name, value);
        }
        if let Some(body) = request.body {
            builder = builder.body(body.to_vec());
        }
        let response = builder.send().map_err(failure)?;
        let headers = response
            .headers()
            .iter()
            .map(|(name, value)| {
                (
                    name.as_str().to_string(),
                    String::from_utf8_lossy(value.as_bytes()).into_owned(),
                )
            })
            .collect();
        let limit = request.max_response_bytes;
        if response.content_length().is_some_and(|n| n > limit) {
            return Err(HttpFailure::TooLarge { limit });
        }
        Ok((response, headers))
    }
}

impl HttpBackend for ReqwestHttp {
    fn send(&self, request: &OutboundRequest<'_>) -> Result<InboundResponse, HttpFailure> {
        use std::io::Read as _;
        let (response, headers) = self.start(request)?;
        let status = response.status().as_u16();
        let limit = request.max_response_bytes;
        let mut body = Vec::new();
        response
            .take(limit.saturating_add(1))
            .read_to_end(&mut body)
            .map_err(|e| read_failure(&e))?;
        if body.len() as u64 > limit {
            return Err(HttpFailure::TooLarge { limit });
        }
        Ok(InboundResponse {
            status,
            headers,
            body,
        })
    }

    /// The body is reqwest's, read as it arrives within the request's
    /// timeout.
    fn open(&self, request: &OutboundRequest<'_>) -> Result<InboundStream, HttpFailure> {
        let (response, headers) = self.start(request)?;
        Ok(InboundStream {
            status: response.status().as_u16(),
            headers,
            body: Box::new(response),
        })
    }
}

/// A reqwest error as a failure: the resolver's refusal, a timeout, or the
/// error with its causes.
fn failure(error: reqwest::Error) -> HttpFailure {
    if error.is_timeout() {
        return HttpFailure::Timeout;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    let mut text = Vec::new();
    while let Some(e) = source {
        if let Some(refused) = e.downcast_ref::<NotPublic>() {
            return HttpFailure::AddressNotAllowed(refused.0.clone());
        }
        let line = e.to_string();
        if !text.contains(&line) {
            text.push(line);
        }
        source = e.source();
    }
    HttpFailure::Failed(text.join(": "))
}

/// The resolver's refusal of a name that resolves to a non-public address.
#[derive(Debug)]
struct NotPublic(String);

impl fmt::Display for NotPublic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotPublic {}

/// Resolves with the system's resolver, and refuses a name any of whose
/// addresses is not public ([`is_public`]).
struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let name = name.as_str().to_string();
        Box::pin(async move {
            let lookup = name.clone();
            let addrs: Vec<SocketAddr> =
                tokio::task::spawn_blocking(move || (lookup.as_str(), 0).to_socket_addrs())
                    .await
                    .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)??
                    .collect();
            if let Some(addr) = addrs.iter().find(|a| !is_public(a.ip())) {
                return Err(Box::new(NotPublic(format!(
                    "`{name}` resolves to {}, which is not a public address; a granted name \
                     may only reach public addresses (grant the address itself, and use it in \
                     the URL, to reach it)",
                    addr.ip()
                )))
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            let addrs: reqwest::dns::Addrs = Box::new(addrs.into_iter());
            Ok(addrs)
        })
    }
}

pub(crate) struct Http;

/// One call's `http`: the grant and the backend, or nothing when the call
/// has no `http` grant.
pub(crate) struct HttpCall {
    access: Option<(Arc<HttpGrant>, Arc<dyn HttpBackend>)>,
    /// The call's streamed bodies (`http-stream`), in the order asked;
    /// empty (and unallocated) for a call that streams none.
    streams: Vec<stream::OpenBody>,
}

impl HostCapability for Http {
    type Call = HttpCall;

    /// [`ReqwestHttp`] blocks its thread for the request.
    const BLOCKS: bool = true;
    const JOURNALED: bool = true;
    /// A request may change what it reaches, on the network.
    const EFFECTS: Effects = Effects {
        writes: true,
        destructive: false,
        open_world: true,
        varies: true,
    };
    const ASK_LESS: &'static str = "fetch less (a smaller page or range)";

    fn grant_schema() -> Value {
        json!({
            "description": "Hosts the skill may call: patterns comma-separated, a list of them, or a table with `hosts`, `max_response_bytes`, `max_streams` (streamed bodies one call may have in flight at once, default 4) and `headers` (secret headers per origin, `{ \"https://HOST\" = { NAME = \"env:VARIABLE\" } }`; `{ NAME = \"env:VARIABLE\" }` alone is the https origin of the grant's one host).",
            "oneOf": [
                {
                    "type": "string"
                },
                {
                    "type": "array",
                    "items": {
                        "type": "string"
                    }
                },
                {
                    "type": "object",
                    "additionalProperties": false,
                    "required": [
                        "hosts"
                    ],
                    "properties": {
                        "hosts": {
                            "type": "array",
                            "items": {
                                "type": "string"
                            }
                        },
                        "max_response_bytes": {
                            "type": "integer",
                            "minimum": 1
                        },
                        "max_streams": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": 64
                        },
                        "headers": {
                            "type": "object",
                            "additionalProperties": {
                                "oneOf": [
                                    {
                                        "type": "string",
                                        "pattern": "^env:"
                                    },
                                    {
                                        "type": "object",
                                        "additionalProperties": {
                                            "type": "string",
                                            "pattern": "^env:"
                                        }
                                    }
                                ]
                            }
                        }
                    }
                }
            ]
        })
    }

    /// The method and the URL (`GET URL`).
    fn describe_request(request: &Value) -> String {
        format!("{} {}", text_of(request, "method"), text_of(request, "url"))
    }

    /// The status and the body's size (`200, 26 bytes`; a streamed body's
    /// as handed to the skill).
    fn describe_answer(ok: &Value) -> String {
        use base64::Engine as _;
        let bytes = ok
            .get("body")
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .map(|b| b.len() as u64)
            .or_else(|| ok.get("body_bytes").and_then(Value::as_u64))
            .unwrap_or(0);
        format!(
            "{}, {bytes} bytes",
            ok.get("status").unwrap_or(&Value::Null)
        )
    }

    fn new_call(_options: &CallOptions, grants: &Grants, backends: &Backends) -> HttpCall {
        HttpCall {
            access: grants
                .http
                .as_ref()
                .map(|grant| (grant.clone(), backends.http.clone())),
            streams: Vec::new(),
        }
    }

    fn link(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        wit::add_to_linker::<CallState, HasHostCall<HttpCall>>(linker, |state| HostCall {
            cap: &mut state.capabilities.http,
            scope: &mut state.scope,
        })
    }
}

impl Http {
    /// Adds `http-stream` to `linker`: the concurrent engine's only.
    pub(crate) fn link_streaming(linker: &mut Linker<CallState>) -> wasmtime::Result<()> {
        super::bindings::skillhost::skill::http_stream::add_to_linker::<
            CallState,
            HasHostCall<HttpCall>,
        >(linker, |state| HostCall {
            cap: &mut state.capabilities.http,
            scope: &mut state.scope,
        })
    }
}

impl Grantable for Http {
    type Grant = HttpGrant;

    const EXAMPLE: &'static str = "[\"api.example.org\"]";
    const FLAG_VALUE: &'static str = "HOST[:PORT],… (or a JSON list or table of host patterns)";

    fn parse_grant(value: &str) -> Result<HttpGrant, GrantError> {
        HttpGrant::parse(value)
    }
}

impl JournalValue for Response {
    /// The body as base64, like the JSON bridge writes `list<u8>`.
    fn to_journal(&self) -> Value {
        use base64::Engine as _;
        json!({
            "status": self.status,
            "headers": self.headers,
            "body": base64::engine::general_purpose::STANDARD.encode(&self.body),
        })
    }

    fn from_journal(value: &Value) -> Option<Self> {
        use base64::Engine as _;
        let object = value.as_object()?;
        Some(Response {
            status: u16::try_from(object.get("status")?.as_u64()?).ok()?,
            headers: serde_json::from_value(object.get("headers")?.clone()).ok()?,
            body: base64::engine::general_purpose::STANDARD
                .decode(object.get("body")?.as_str()?)
                .ok()?,
        })
    }
}

/// What the journal records of a request: what the skill asked, its body by
/// length and digest. Never the grant's secret headers.
fn journal_request(request: &Request) -> Value {
    let mut record = Map::new();
    record.insert("method".into(), json!(request.method));
    record.insert("url".into(), json!(request.url));
    record.insert("headers".into(), json!(request.headers));
    if let Some(body) = &request.body {
        record.insert("body_bytes".into(), json!(body.len()));
        record.insert(
            "body_sha256".into(),
            json!(hex::encode(Sha256::digest(body))),
        );
    }
    if let Some(ms) = request.timeout_ms {
        record.insert("timeout_ms".into(), json!(ms));
    }
    Value::Object(record)
}

fn invalid(message: impl Into<String>) -> GuestError {
    guest_error("invalid-request", message)
}

impl HostCall<'_, HttpCall> {
    /// The request checked against the grant: its method and URL, or the
    /// error the guest gets before anything is journaled.
    fn check(&self, grant: &HttpGrant, request: &Request) -> Result<url::Url, GuestError> {
        if !METHODS.contains(&request.method.as_str()) {
            return Err(invalid(format!(
                "method `{}` is not one of {}",
                request.method,
                METHODS.join(", ")
            )));
        }
        let url = url::Url::parse(&request.url)
            .map_err(|e| invalid(format!("`{}` is not a URL: {e}", request.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "`{}`: only http and https URLs can be fetched",
                request.url
            )));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(invalid(
                "credentials in the URL are refused; a grant's `headers` carry secrets",
            ));
        }
        for (name, value) in &request.headers {
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err()
                || reqwest::header::HeaderValue::from_str(value).is_err()
            {
                return Err(invalid(format!("header `{name}` is not a valid header")));
            }
        }
        if !grant.allows(&url) {
            return Err(not_granted(grant, &url, self.scope.skill_name(), None));
        }
        Ok(url)
    }
}

fn not_granted(
    grant: &HttpGrant,
    url: &url::Url,
    skill: &str,
    from: Option<&url::Url>,
) -> GuestError {
    let target = match (url.host_str(), url.port_or_known_default()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        _ => url.to_string(),
    };
    let granted: Vec<String> = grant.hosts.iter().map(ToString::to_string).collect();
    match from {
        None => guest_error(
            "host-not-granted",
            format!(
                "`{target}` is not among the hosts granted to skill `{skill}` ({})",
                granted.join(", ")
            ),
        ),
        Some(from) => guest_error(
            "redirect-not-granted",
            format!(
                "`{from}` redirects to `{url}`, and `{target}` is not among the hosts granted \
                 to skill `{skill}` ({})",
                granted.join(", ")
            ),
        ),
    }
}

/// The skill's own credentials: dropped from a request once a redirect has
/// left the origin the skill asked for.
const CREDENTIAL_HEADERS: [&str; 4] = ["authorization", "cookie", "cookie2", "proxy-authorization"];

/// Sends `request` and follows its redirects within the grant, each hop
/// carrying the secrets of its own origin only; the answer (or error)
/// redacted of every secret of the grant. No body larger than the grant
/// allows or `room` can hold is read.
fn fetch(
    backend: &dyn HttpBackend,
    grant: &HttpGrant,
    skill: &str,
    request: &Request,
    first: url::Url,
    deadline: Instant,
    room: AnswerRoom,
) -> Result<Response, GuestError> {
    let redaction = Redaction::of(grant)?;
    // The journal holds the body as base64: four bytes for every three.
    let max_response_bytes = grant
        .max_response_bytes
        .min(room.bytes.saturating_sub(ANSWER_OVERHEAD) / 4 * 3);
    let bounds = Bounds {
        deadline,
        max_response_bytes,
        room: Some(room),
    };
    let answer = follow(
        grant,
        skill,
        request,
        first,
        &bounds,
        redaction.as_ref(),
        &mut |outbound| {
            backend.send(outbound).map(|r| Hop {
                status: r.status,
                headers: r.headers,
                body: r.body,
            })
        },
    )
    .map(|(hop, _)| Response {
        status: hop.status,
        headers: hop.headers,
        body: hop.body,
    });
    match (answer, &redaction) {
        (answer, None) => answer,
        (Ok(response), Some(redaction)) => Ok(redaction.response(response)),
        (Err(error), Some(redaction)) => Err(redaction.error(error)),
    }
}

/// What bounds one fetch, redirects included: when it must end, the
/// largest body it reads, and the room its answer had in the call's
/// host-call budget when it started (past which a body is the budget's
/// refusal, not `response-too-large`).
struct Bounds {
    deadline: Instant,
    max_response_bytes: u64,
    room: Option<AnswerRoom>,
}

/// One hop's response: its body read (`fetch`) or to be read (a stream).
struct Hop<B> {
    status: u16,
    headers: Vec<(String, String)>,
    body: B,
}

/// A hop's response with its body read whole, or to be read as it arrives.
type SendHop<'a, B> = dyn FnMut(&OutboundRequest<'_>) -> Result<Hop<B>, HttpFailure> + 'a;

/// Sends `request` by `send`, hop by hop, following its redirects within
/// the grant: the last hop's response and its URL.
fn follow<B>(
    grant: &HttpGrant,
    skill: &str,
    request: &Request,
    first: url::Url,
    bounds: &Bounds,
    redaction: Option<&Redaction>,
    send: &mut SendHop<'_, B>,
) -> Result<(Hop<B>, url::Url), GuestError> {
    let Bounds {
        deadline,
        max_response_bytes,
        room,
    } = bounds;
    let (deadline, max_response_bytes) = (*deadline, *max_response_bytes);
    let mut url = first;
    let mut method = request.method.clone();
    let mut body = request.body.clone();
    // The skill's credentials go to the origin it asked for, and no further.
    let mut credentials = true;
    for _ in 0..=MAX_REDIRECTS {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(timed_out(&url));
        }
        let secrets: Vec<&SecretHeader> = grant.secrets_for(&url).collect();
        let mut headers: Vec<(String, String)> = request
            .headers
            .iter()
            .filter(|(name, _)| {
                let replaced = secrets
                    .iter()
                    .any(|secret| secret.name.eq_ignore_ascii_case(name));
                let dropped = !credentials
                    && CREDENTIAL_HEADERS
                        .iter()
                        .any(|c| c.eq_ignore_ascii_case(name));
                // A body the host cannot read could hide an echoed secret.
                let encoding = !secrets.is_empty() && name.eq_ignore_ascii_case("accept-encoding");
                !(replaced || dropped || encoding)
            })
            .cloned()
            .collect();
        if !secrets.is_empty() {
            headers.push(("accept-encoding".into(), "identity".into()));
        }
        headers.extend(
            secrets
                .iter()
                .map(|secret| (secret.name.clone(), secret.value.clone())),
        );
        let outbound = OutboundRequest {
            method: &method,
            url: &url,
            headers: &headers,
            body: body.as_deref(),
            timeout: left,
            max_response_bytes,
        };
        let response = send(&outbound).map_err(|failure| match (failure, room) {
            (HttpFailure::TooLarge { limit }, Some(room)) if limit < grant.max_response_bytes => {
                room.refuse(Capability::Http, None)
            }
            (failure, _) => failed(failure, &method, &url),
        })?;
        let header = |wanted: &str| {
            response
                .headers
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(wanted))
                .map(|(_, value)| value.clone())
        };
        let location = header("location");
        let redirect = matches!(response.status, 301 | 302 | 303 | 307 | 308);
        let (true, Some(location)) = (redirect, location) else {
            if !secrets.is_empty()
                && let Some(encoding) = header("content-encoding")
                && !encoding.trim().eq_ignore_ascii_case("identity")
            {
                return Err(guest_error(
                    "response-encoded",
                    format!(
                        "the response from `{url}` is encoded (`Content-Encoding: {encoding}`) \
                         although the request, which carried a secret of the grant, asked for \
                         none; the host refuses a body it cannot check for the secret"
                    ),
                ));
            }
            return Ok((response, url));
        };
        let next = url.join(&location).map_err(|e| {
            guest_error(
                "request-failed",
                format!("`{url}` redirects to `{location}`, which is not a URL: {e}"),
            )
        })?;
        if redaction.is_some_and(|r| r.finds(&location) || r.finds(next.as_str())) {
            return Err(guest_error(
                "redirect-not-granted",
                format!(
                    "`{url}` redirects to a URL that holds a secret of the grant; the host \
                     never carries a secret in a URL"
                ),
            ));
        }
        if url.scheme() == "https" && next.scheme() == "http" {
            return Err(guest_error(
                "insecure-redirect",
                format!(
                    "`{url}` redirects to `{next}`, from https to http; the host never follows \
                     a redirect that would send the request in clear"
                ),
            ));
        }
        if !matches!(next.scheme(), "http" | "https") || !grant.allows(&next) {
            return Err(not_granted(grant, &next, skill, Some(&url)));
        }
        if next.origin() != url.origin() {
            credentials = false;
        }
        // As browsers do: 303, and 301/302 after a POST, become a GET.
        if response.status == 303 || (matches!(response.status, 301 | 302) && method == "POST") {
            method = "GET".into();
            body = None;
        }
        url = next;
    }
    Err(guest_error(
        "too-many-redirects",
        format!(
            "`{}` redirected more than {MAX_REDIRECTS} times",
            request.url
        ),
    ))
}

/// The shortest credentials after an auth scheme (`Bearer TOKEN`) redacted
/// on their own: shorter ones would match ordinary text.
const MIN_REDACTED_CREDENTIALS: usize = 8;

/// What an answer may not show the skill: each secret of the grant in the
/// forms a host that echoes a request sends it back in (as sent,
/// JSON-escaped, URL-encoded), its credentials after an auth scheme too,
/// each replaced by `[redacted env:VARIABLE]`.
struct Redaction {
    finder: aho_corasick::AhoCorasick,
    replacements: Vec<String>,
    /// The longest form's length in bytes: what a stream holds back
    /// (`stream`).
    longest: usize,
}

impl Redaction {
    /// The grant's redaction; none for a grant without secrets.
    fn of(grant: &HttpGrant) -> Result<Option<Redaction>, GuestError> {
        if grant.headers.is_empty() {
            return Ok(None);
        }
        let mut patterns: Vec<String> = Vec::new();
        let mut replacements = Vec::new();
        for secret in &grant.headers {
            let mut values = vec![secret.value.trim()];
            if let Some((_, credentials)) = secret.value.trim().split_once(' ') {
                let credentials = credentials.trim();
                if credentials.len() >= MIN_REDACTED_CREDENTIALS {
                    values.push(credentials);
                }
            }
            for value in values {
                for form in echoed_forms(value) {
                    if !form.is_empty() && !patterns.contains(&form) {
                        patterns.push(form);
                        replacements.push(format!("[redacted env:{}]", secret.variable));
                    }
                }
            }
        }
        let finder = aho_corasick::AhoCorasick::builder()
            .match_kind(aho_corasick::MatchKind::LeftmostLongest)
            .build(&patterns)
            .map_err(|e| {
                guest_error(
                    "request-failed",
                    format!("the host cannot prepare the redaction of the grant's secrets: {e}"),
                )
            })?;
        let longest = patterns.iter().map(String::len).max().unwrap_or(0);
        Ok(Some(Redaction {
            finder,
            replacements,
            longest,
        }))
    }

    fn finds(&self, text: &str) -> bool {
        self.finder.is_match(text)
    }

    fn text(&self, text: &str) -> String {
        if self.finds(text) {
            self.finder.replace_all(text, &self.replacements)
        } else {
            text.to_string()
        }
    }

    /// `error` with its message redacted (a failed request's message may
    /// quote what the server sent).
    fn error(&self, mut error: GuestError) -> GuestError {
        error.message = self.text(&error.message);
        error
    }

    fn response(&self, response: Response) -> Response {
        let body = if self.finder.is_match(&response.body) {
            self.finder
                .replace_all_bytes(&response.body, &self.replacements)
        } else {
            response.body
        };
        Response {
            status: response.status,
            headers: response
                .headers
                .into_iter()
                .map(|(name, value)| (self.text(&name), self.text(&value)))
                .collect(),
            body,
        }
    }
}

/// `value` as sent, JSON-escaped (with `/` escaped too, as some encoders
/// do), URL-encoded (space as `+` and as `%20`) and as a URL's query keeps
/// it.
fn echoed_forms(value: &str) -> Vec<String> {
    let json = serde_json::to_string(value).unwrap_or_default();
    let json = json
        .strip_prefix('"')
        .and_then(|j| j.strip_suffix('"'))
        .unwrap_or(value)
        .to_string();
    let form: String = url::form_urlencoded::byte_serialize(value.as_bytes()).collect();
    // As a URL's query keeps it (a redirect's target, say).
    let query = url::Url::parse(&format!("http://h/?{value}"))
        .ok()
        .and_then(|u| u.query().map(str::to_string));
    let mut forms = vec![
        value.to_string(),
        json.replace('/', "\\/"),
        json,
        form.replace('+', "%20"),
        form,
    ];
    forms.extend(query);
    forms
}

/// What the skill is told of a request that got no response, or of a body
/// cut short.
fn failed(failure: HttpFailure, method: &str, url: &url::Url) -> GuestError {
    match failure {
        HttpFailure::Timeout => timed_out(url),
        HttpFailure::TooLarge { limit } => guest_error(
            "response-too-large",
            format!(
                "the response from `{url}` is larger than the {limit} bytes the grant allows \
                 (`max_response_bytes`)"
            ),
        ),
        HttpFailure::AddressNotAllowed(why) => guest_error("address-not-allowed", why),
        HttpFailure::Failed(why) => GuestError {
            code: "request-failed".into(),
            message: format!("{method} `{url}`: {why}"),
            retryable: true,
        },
    }
}

fn timed_out(url: &url::Url) -> GuestError {
    GuestError {
        code: "timeout".into(),
        message: format!("the request to `{url}` did not finish before the call's deadline"),
        retryable: true,
    }
}

impl wit::Host for HostCall<'_, HttpCall> {
    fn fetch(&mut self, request: Request) -> wasmtime::Result<Result<Response, GuestError>> {
        let Some((grant, backend)) = self.cap.access.clone() else {
            return Ok(Err(self.deny(Capability::Http)));
        };
        let url = match self.check(&grant, &request) {
            Ok(url) => url,
            Err(e) => return Ok(Err(e)),
        };
        let mut deadline = self.scope.deadline();
        if let Some(ms) = request.timeout_ms {
            deadline = deadline.min(Instant::now() + Duration::from_millis(u64::from(ms)));
        }
        let skill = self.scope.skill_name().to_string();
        let record = journal_request(&request);
        self.scope.journaled(Capability::Http, record, 0, |room| {
            fetch(&*backend, &grant, &skill, &request, url, deadline, room)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::Grants;

    fn url(text: &str) -> url::Url {
        url::Url::parse(text).unwrap()
    }

    #[test]
    fn a_pattern_is_within_another_only_when_it_allows_no_more() {
        let p = |t: &str| HostPattern::parse(t).unwrap();
        for (inner, outer) in [
            ("api.example.org", "api.example.org"),
            ("api.example.org", "*.example.org"),
            ("a.b.example.org", "*.example.org"),
            ("*.b.example.org", "*.example.org"),
            ("*.example.org", "*.example.org"),
            ("api.example.org:8443", "api.example.org:8443"),
            ("127.0.0.1", "127.0.0.1"),
        ] {
            assert!(p(inner).within(&p(outer)), "{inner} within {outer}");
        }
        for (inner, outer) in [
            ("example.org", "*.example.org"),
            ("*.example.org", "api.example.org"),
            ("evil-example.org", "*.example.org"),
            ("api.example.org", "api.example.org:443"),
            ("api.example.org:80", "api.example.org:443"),
            ("api.example.org:8443", "api.example.org"),
            ("127.0.0.1:9000", "127.0.0.1"),
            ("127.0.0.2", "127.0.0.1"),
            ("*.org.example.com", "*.example.org"),
        ] {
            assert!(!p(inner).within(&p(outer)), "{inner} not within {outer}");
        }
    }

    #[test]
    fn patterns_match_hosts_and_ports() {
        let grant = HttpGrant::parse(
            r#"["export.arxiv.org", "*.semanticscholar.org", "127.0.0.1:8080", "[::1]:9000"]"#,
        )
        .unwrap();
        for allowed in [
            "https://export.arxiv.org/api",
            "http://export.arxiv.org/",
            "https://EXPORT.arxiv.org/",
            "https://api.semanticscholar.org/graph",
            "https://a.b.semanticscholar.org/",
            "http://127.0.0.1:8080/x",
            "http://[::1]:9000/",
        ] {
            assert!(grant.allows(&url(allowed)), "{allowed}");
        }
        for refused in [
            "https://export.arxiv.org:8443/",
            "https://arxiv.org/",
            "https://semanticscholar.org/",
            "https://evilsemanticscholar.org/",
            "https://semanticscholar.org.evil.com/",
            "http://127.0.0.1/",
            "http://127.0.0.1:8081/",
            "http://localhost:8080/",
            "ftp://export.arxiv.org/",
        ] {
            assert!(!grant.allows(&url(refused)), "{refused}");
        }
    }

    #[test]
    fn bad_grants_say_what_is_wrong() {
        for (value, says) in [
            ("", "an empty pattern"),
            ("https://example.org", "not a host"),
            ("example.org/path", "not a host"),
            ("*.com", "top-level domain"),
            ("*", "not a host name"),
            ("exa mple.org", "not a host name"),
            ("example.org:0", "not a port"),
            ("example.org:99999", "not a port"),
            ("::1", "brackets"),
            ("[::1", "unclosed"),
            ("[]:80", "not an IPv6 address"),
            ("[]", "no host is granted"),
            ("[1, 2]", "not a host pattern"),
            (
                r#"{"hosts": ["a.org"], "max_response_bytes": 0}"#,
                "max_response_bytes",
            ),
            (
                r#"{"hosts": ["a.org"], "proxy": "x"}"#,
                "unknown key `proxy`",
            ),
            (r#"{"max_response_bytes": 10}"#, "needs `hosts`"),
            (
                r#"{"hosts": ["a.org"], "headers": {"X-Key": "literal"}}"#,
                "env:VARIABLE",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"X-Key": "env:SKILLHOST_TEST_UNSET_VARIABLE"}}"#,
                "SKILLHOST_TEST_UNSET_VARIABLE, which is not set",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"bad header": "env:PATH"}}"#,
                "header name",
            ),
            ("[", "unclosed"),
            ("{", "not a table"),
        ] {
            let error = HttpGrant::parse(value).unwrap_err().to_string();
            assert!(error.contains(says), "{value}: {error}");
            assert!(error.starts_with("capability `http`"), "{error}");
        }
    }

    #[test]
    fn a_secret_header_never_shows_in_debug() {
        // SAFETY: tests in this binary do not read this variable elsewhere.
        unsafe { std::env::set_var("SKILLHOST_TEST_HTTP_SECRET", "s3cret-value") };
        let grant = HttpGrant::parse(
            r#"{"hosts": ["a.org"], "headers": {"Authorization": "env:SKILLHOST_TEST_HTTP_SECRET"}}"#,
        )
        .unwrap();
        let shown = format!("{grant:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("env:SKILLHOST_TEST_HTTP_SECRET"), "{shown}");
        let grants = Grants {
            http: Some(Arc::new(grant)),
            ..Grants::default()
        };
        assert!(!format!("{grants:?}").contains("s3cret"));
    }

    #[test]
    fn a_secret_is_bound_to_the_origin_its_table_names() {
        // SAFETY: tests in this binary do not read this variable elsewhere.
        unsafe { std::env::set_var("SKILLHOST_TEST_HTTP_BOUND", "Bearer bound-0ne") };
        let grant = HttpGrant::parse(
            r#"{"hosts": ["api.example.org", "127.0.0.1:8080"], "headers": {
                "https://api.example.org": {"Authorization": "env:SKILLHOST_TEST_HTTP_BOUND"},
                "http://127.0.0.1:8080": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}}"#,
        )
        .unwrap();
        let names = |u: &str| -> Vec<String> {
            grant.secrets_for(&url(u)).map(|s| s.name.clone()).collect()
        };
        assert_eq!(names("https://api.example.org/v1"), ["authorization"]);
        assert_eq!(names("https://API.example.org:443/"), ["authorization"]);
        assert!(names("http://api.example.org/v1").is_empty());
        assert_eq!(names("http://127.0.0.1:8080/"), ["x-key"]);
        assert!(names("https://127.0.0.1:8080/").is_empty());
        // The older form, for one exact host without a port: its https origin.
        let old = HttpGrant::parse(
            r#"{"hosts": ["api.example.org"], "headers": {"Authorization": "env:SKILLHOST_TEST_HTTP_BOUND"}}"#,
        )
        .unwrap();
        assert_eq!(old.secrets_for(&url("https://api.example.org/")).count(), 1);
        assert_eq!(old.secrets_for(&url("http://api.example.org/")).count(), 0);
        for (value, says) in [
            (
                r#"{"hosts": ["a.org:8443"], "headers": {"Authorization": "env:SKILLHOST_TEST_HTTP_BOUND"}}"#,
                r#"has a port, which leaves the scheme open: write `headers = { "https://a.org:8443" = { Authorization = "env:SKILLHOST_TEST_HTTP_BOUND" } }`"#,
            ),
            (
                r#"{"hosts": ["a.org", "b.org"], "headers": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}"#,
                "several hosts",
            ),
            (
                r#"{"hosts": ["*.a.org"], "headers": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}"#,
                "wildcard",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"https://b.org": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}}"#,
                "`https://b.org` is not among the granted hosts (a.org)",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"https://a.org:8443": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}}"#,
                "not among the granted hosts",
            ),
            (
                r#"{"hosts": ["*.a.org"], "headers": {"https://*.a.org": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}}"#,
                "wildcard",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"https://a.org/v1": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}}"#,
                "more than a scheme, host and port",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"ftp://a.org": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}}"#,
                "not an http or https origin",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"a.org": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}}"#,
                "is not an origin",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"https://a.org": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}, "X-Other": "env:SKILLHOST_TEST_HTTP_BOUND"}}"#,
                "mixes origins and header names",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"https://a.org": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}, "https://A.org:443/": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND"}}}"#,
                "are the same origin",
            ),
            (
                r#"{"hosts": ["a.org"], "headers": {"https://a.org": {"X-Key": "env:SKILLHOST_TEST_HTTP_BOUND", "x-key": "env:SKILLHOST_TEST_HTTP_BOUND"}}}"#,
                "given twice",
            ),
        ] {
            let error = HttpGrant::parse(value).unwrap_err().to_string();
            assert!(error.contains(says), "{value}: {error}");
            assert!(!error.contains("bound-0ne"), "{error}");
        }
    }

    /// A request as [`Scripted`] got it: its URL and headers.
    type Sent = (String, Vec<(String, String)>);

    /// A backend that answers from a script and records what it was sent.
    #[derive(Default)]
    struct Scripted {
        answers: std::sync::Mutex<Vec<InboundResponse>>,
        sent: std::sync::Mutex<Vec<Sent>>,
    }

    impl Scripted {
        fn new(mut answers: Vec<InboundResponse>) -> Scripted {
            answers.reverse();
            Scripted {
                answers: std::sync::Mutex::new(answers),
                ..Scripted::default()
            }
        }
    }

    impl HttpBackend for Scripted {
        fn send(&self, request: &OutboundRequest<'_>) -> Result<InboundResponse, HttpFailure> {
            self.sent
                .lock()
                .unwrap()
                .push((request.url.to_string(), request.headers.to_vec()));
            self.answers
                .lock()
                .unwrap()
                .pop()
                .ok_or_else(|| HttpFailure::Failed("no more answers".into()))
        }
    }

    fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> InboundResponse {
        InboundResponse {
            status,
            headers: headers
                .iter()
                .map(|(n, v)| (n.to_string(), v.to_string()))
                .collect(),
            body: body.as_bytes().to_vec(),
        }
    }

    fn get(url: &str) -> Request {
        Request {
            method: "GET".into(),
            url: url.into(),
            headers: vec![("Authorization".into(), "Basic c2tpbGw=".into())],
            body: None,
            timeout_ms: None,
        }
    }

    fn send(grant: &HttpGrant, backend: &Scripted, url: &str) -> Result<Response, GuestError> {
        let deadline = Instant::now() + Duration::from_secs(10);
        fetch(
            backend,
            grant,
            "probe",
            &get(url),
            ::url::Url::parse(url).unwrap(),
            deadline,
            crate::limits::HostCallBudget::new(&crate::Limits::default())
                .admit(Capability::Http, 0)
                .unwrap(),
        )
    }

    #[test]
    fn a_redirect_from_https_to_http_is_never_followed() {
        // SAFETY: tests in this binary do not read this variable elsewhere.
        unsafe { std::env::set_var("SKILLHOST_TEST_HTTP_DOWNGRADE", "Bearer d0wngrade-secret") };
        for grant in [
            r#"["a.example.org"]"#,
            r#"{"hosts": ["a.example.org"], "headers": {"https://a.example.org": {"Authorization": "env:SKILLHOST_TEST_HTTP_DOWNGRADE"}}}"#,
        ] {
            let grant = HttpGrant::parse(grant).unwrap();
            for location in ["http://a.example.org/in-clear", "http://a.example.org:443/"] {
                let backend = Scripted::new(vec![
                    answer(302, &[("Location", location)], ""),
                    answer(200, &[], "in clear"),
                ]);
                let error = send(&grant, &backend, "https://a.example.org/start").unwrap_err();
                assert_eq!(error.code, "insecure-redirect", "{}", error.message);
                assert!(
                    error.message.contains("from https to http"),
                    "{}",
                    error.message
                );
                assert_eq!(
                    backend.sent.lock().unwrap().len(),
                    1,
                    "only the first request"
                );
            }
        }
    }

    #[test]
    fn every_echoed_form_of_a_secret_is_redacted_and_errors_too() {
        // SAFETY: tests in this binary do not read this variable elsewhere.
        unsafe { std::env::set_var("SKILLHOST_TEST_HTTP_ECHO", r#"Bearer ab/cd+ef=="x"#) };
        let grant = HttpGrant::parse(
            r#"{"hosts": ["a.example.org", "b.example.org"], "headers": {"https://a.example.org": {"Authorization": "env:SKILLHOST_TEST_HTTP_ECHO"}}}"#,
        )
        .unwrap();
        let echoes = [
            r#"Bearer ab/cd+ef=="x"#,
            r#"ab/cd+ef=="x"#,
            r#"Bearer ab/cd+ef==\"x"#,
            r#"ab\/cd+ef==\"x"#,
            "Bearer+ab%2Fcd%2Bef%3D%3D%22x",
            "Bearer%20ab%2Fcd%2Bef%3D%3D%22x",
            "ab/cd+ef==%22x",
        ];
        let body = echoes.join(" | ");
        let backend = Scripted::new(vec![answer(
            200,
            &[("X-Echo", echoes[0]), ("Content-Type", "text/plain")],
            &body,
        )]);
        let response = send(&grant, &backend, "https://a.example.org/echo").unwrap();
        let body = String::from_utf8(response.body).unwrap();
        assert!(
            !body.contains("cd+ef") && !body.contains("cd%2Bef"),
            "{body}"
        );
        assert_eq!(
            body.matches("[redacted env:SKILLHOST_TEST_HTTP_ECHO]")
                .count(),
            echoes.len(),
            "{body}"
        );
        assert_eq!(
            response.headers[0],
            (
                "X-Echo".to_string(),
                "[redacted env:SKILLHOST_TEST_HTTP_ECHO]".to_string()
            )
        );
        assert_eq!(response.headers[1].1, "text/plain");
        // The secret went to its origin with `Accept-Encoding: identity`,
        // replacing the skill's own header of its name.
        let sent = backend.sent.lock().unwrap().clone();
        let headers = &sent[0].1;
        assert!(headers.contains(&("authorization".into(), r#"Bearer ab/cd+ef=="x"#.into())));
        assert!(
            !headers.iter().any(|(_, v)| v == "Basic c2tpbGw="),
            "{headers:?}"
        );
        assert!(headers.contains(&("accept-encoding".into(), "identity".into())));
        // An error message that would name it does not.
        let backend = Scripted::new(vec![answer(
            302,
            &[("Location", r#"https://b.example.org/?t=ab/cd+ef=="x"#)],
            "",
        )]);
        let error = send(&grant, &backend, "https://a.example.org/echo").unwrap_err();
        assert_eq!(error.code, "redirect-not-granted");
        assert!(
            error.message.contains("holds a secret"),
            "{}",
            error.message
        );
        assert!(!error.message.contains("cd+ef"), "{}", error.message);
        // Nor one that names it another way.
        let backend = Scripted::new(vec![answer(
            302,
            &[("Location", r#"https://c.example.org/?t=ab/cd+ef=="x"#)],
            "",
        )]);
        let error = send(&grant, &backend, "https://a.example.org/echo").unwrap_err();
        assert!(!error.message.contains("cd+ef"), "{}", error.message);
        // Another granted origin gets neither the secret nor the identity
        // encoding, and keeps the skill's header.
        let backend = Scripted::new(vec![answer(200, &[], "ok")]);
        send(&grant, &backend, "https://b.example.org/").unwrap();
        let sent = backend.sent.lock().unwrap().clone();
        assert_eq!(
            sent[0].1,
            [("Authorization".to_string(), "Basic c2tpbGw=".to_string())]
        );
    }

    #[test]
    fn private_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["1.1.1.1", "93.184.216.34", "2606:4700::1111"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }
}
