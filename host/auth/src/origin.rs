//! Which names a server answers to, against DNS rebinding and requests
//! from other sites. A page on another site can make the browser send
//! requests to a server on loopback: under its own name after its DNS
//! answer turns into 127.0.0.1 (rebinding: the `Host` header then names
//! the attacker's site), or by addressing the server directly (the
//! `Origin` header then names the page's site). So the `Host` must be one
//! of the server's names, and an `Origin`, when there is one, one of its
//! pages'.
//!
//! The names: `localhost`, `127.0.0.1` and `[::1]` with the port the
//! server is bound to, the bound address itself (when it is not `0.0.0.0`
//! or `[::]`) with that port, and each name the operator gives with
//! `--allowed-host NAME[:PORT]` (without a port: with any port, or none,
//! as behind a proxy on 443).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::http::{HeaderMap, StatusCode, Uri, header};

use crate::Refusal;

/// A name the server answers to: a host, lowercase, and the port it must
/// come with (None: any).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    /// Whether `host` with `port` (the effective port) is this one.
    fn admits(&self, host: &str, port: u16) -> bool {
        self.host == host && self.port.is_none_or(|p| p == port)
    }

    fn shown(&self) -> String {
        match self.port {
            Some(port) => format!("{}:{port}", self.host),
            None => format!("{} (any port)", self.host),
        }
    }
}

/// The names a server answers to.
#[derive(Debug, Clone)]
pub struct AllowedHosts {
    names: Vec<Authority>,
}

impl AllowedHosts {
    /// The loopback names and the bound address with `bound`'s port, and
    /// the `configured` names (`--allowed-host`); refuses one that is not
    /// a host name or `host:port`, naming it.
    pub fn new(bound: SocketAddr, configured: &[String]) -> Result<Self, String> {
        let port = Some(bound.port());
        let mut names: Vec<Authority> = ["localhost", "127.0.0.1", "[::1]"]
            .into_iter()
            .map(|host| Authority {
                host: host.into(),
                port,
            })
            .collect();
        if !bound.ip().is_unspecified() {
            let host = match bound.ip() {
                IpAddr::V4(ip) => ip.to_string(),
                IpAddr::V6(ip) => format!("[{ip}]"),
            };
            if !names.iter().any(|n| n.host == host) {
                names.push(Authority { host, port });
            }
        }
        for name in configured {
            let authority = parse_authority(name.trim()).ok_or_else(|| {
                format!(
                    "--allowed-host `{}` is not a host name or HOST:PORT; give the name \
                     clients reach the server by, e.g. `inspector.example.com` or \
                     `192.168.1.5:7700`",
                    shown(name)
                )
            })?;
            if !names.contains(&authority) {
                names.push(authority);
            }
        }
        Ok(AllowedHosts { names })
    }

    /// The names, as `host:port` or `host`, for a library that takes such
    /// a list (rmcp's `allowed_hosts`).
    pub fn authorities(&self) -> Vec<String> {
        self.names
            .iter()
            .map(|n| match n.port {
                Some(port) => format!("{}:{port}", n.host),
                None => n.host.clone(),
            })
            .collect()
    }

    fn listed(&self) -> String {
        self.names
            .iter()
            .map(Authority::shown)
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn admits(&self, host: &str, port: u16) -> bool {
        self.names.iter().any(|n| n.admits(host, port))
    }

    /// Refuses a request whose `Host` (or absolute request target) is not
    /// one of the names.
    pub fn check_host(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), Refusal> {
        let mut hosts = headers.get_all(header::HOST).iter();
        let (Some(value), None) = (hosts.next(), hosts.next()) else {
            return Err(forbidden(
                "the request must have one Host header, naming this server".to_string(),
            ));
        };
        let text = value.to_str().unwrap_or("");
        self.check_authority(text)?;
        if let Some(target) = uri.authority() {
            self.check_authority(target.as_str())?;
        }
        Ok(())
    }

    fn check_authority(&self, text: &str) -> Result<(), Refusal> {
        let admitted =
            parse_authority(text).is_some_and(|a| self.admits(&a.host, a.port.unwrap_or(80)));
        if admitted {
            return Ok(());
        }
        Err(forbidden(format!(
            "Host `{}` is not a name this server answers to ({}): a page may have reached it \
             through a name of its own, as DNS rebinding does. Open the server as one of those, \
             or, for a name in front of it (a proxy, a LAN name), start it with \
             --allowed-host NAME",
            shown(text),
            self.listed()
        )))
    }

    /// Refuses a request whose `Origin`, when it has one, is not one of
    /// the names (by `http` or `https`): a page of another site, or an
    /// opaque origin (`null`: a sandboxed document, a local file, a
    /// redirect across sites).
    pub fn check_origin(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        let mut origins = headers.get_all(header::ORIGIN).iter();
        let Some(value) = origins.next() else {
            return Ok(());
        };
        let text = value.to_str().unwrap_or("");
        if origins.next().is_some() {
            return Err(forbidden(
                "the request has more than one Origin header".into(),
            ));
        }
        if text.trim().eq_ignore_ascii_case("null") {
            return Err(forbidden(
                "Origin `null` is refused: it is sent by a sandboxed document, a local file or \
                 a page redirected across sites, and this server answers only its own pages"
                    .into(),
            ));
        }
        let admitted = parse_origin(text).is_some_and(|(host, port)| self.admits(&host, port));
        if admitted {
            return Ok(());
        }
        Err(forbidden(format!(
            "Origin `{}` is not this server's: a page of another site sent this request, and \
             this server answers only its own pages (http:// or https:// with {}); a name in \
             front of it is allowed with --allowed-host NAME",
            shown(text),
            self.listed()
        )))
    }
}

fn forbidden(message: String) -> Refusal {
    Refusal::new(StatusCode::FORBIDDEN, message)
}

/// A value as an error shows it: escaped, and cut at 100 characters.
fn shown(text: &str) -> String {
    let mut out: String = text.chars().take(100).collect();
    if text.chars().count() > 100 {
        out.push('…');
    }
    out.escape_debug().to_string()
}

/// `HOST[:PORT]`, with HOST a DNS name, an IPv4 address or `[IPv6]`;
/// lowercase, without a trailing dot.
fn parse_authority(text: &str) -> Option<Authority> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip: Ipv6Addr = inside.parse().ok()?;
        let port = match after {
            "" => None,
            after => Some(parse_port(after.strip_prefix(':')?)?),
        };
        (format!("[{ip}]"), port)
    } else {
        let (host, port) = match text.split_once(':') {
            Some((host, port)) => (host, Some(parse_port(port)?)),
            None => (text, None),
        };
        let host = host.strip_suffix('.').unwrap_or(host);
        let name_like = !host.is_empty()
            && host.len() <= 253
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
        if !name_like {
            return None;
        }
        (host.to_ascii_lowercase(), port)
    };
    Some(Authority { host, port })
}

fn parse_port(text: &str) -> Option<u16> {
    if text.is_empty() || text.len() > 5 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// An origin's host and effective port: `http://HOST[:PORT]` or
/// `https://…`, nothing after.
fn parse_origin(text: &str) -> Option<(String, u16)> {
    let (scheme, rest) = text.split_once("://")?;
    let default = if scheme.eq_ignore_ascii_case("http") {
        80
    } else if scheme.eq_ignore_ascii_case("https") {
        443
    } else {
        return None;
    };
    let authority = parse_authority(rest)?;
    Some((authority.host, authority.port.unwrap_or(default)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn hosts(bound: &str, configured: &[&str]) -> AllowedHosts {
        let configured: Vec<String> = configured.iter().map(|s| s.to_string()).collect();
        AllowedHosts::new(bound.parse().unwrap(), &configured).unwrap()
    }

    fn with(name: header::HeaderName, value: &str) -> HeaderMap {
        let mut map = HeaderMap::new();
        map.insert(name, HeaderValue::from_str(value).unwrap());
        map
    }

    fn host_ok(allowed: &AllowedHosts, host: &str) -> bool {
        allowed
            .check_host(&with(header::HOST, host), &Uri::from_static("/"))
            .is_ok()
    }

    fn origin_ok(allowed: &AllowedHosts, origin: &str) -> bool {
        allowed.check_origin(&with(header::ORIGIN, origin)).is_ok()
    }

    #[test]
    fn loopback_names_with_the_bound_port_and_the_configured_ones() {
        let allowed = hosts(
            "127.0.0.1:7700",
            &["Inspector.Example.com", "lan.local:8080"],
        );
        for ok in [
            "127.0.0.1:7700",
            "localhost:7700",
            "LOCALHOST:7700",
            "[::1]:7700",
            "[0:0:0:0:0:0:0:1]:7700",
            "inspector.example.com",
            "inspector.example.com.",
            "inspector.example.com:443",
            "lan.local:8080",
        ] {
            assert!(host_ok(&allowed, ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:7700",
            "localhost",
            "localhost:7701",
            "127.0.0.1:80",
            "127.0.0.2:7700",
            "lan.local:8081",
            "lan.local",
            "localhost:7700@evil.example",
            "localhost.evil.example:7700",
            "",
            "[::1",
            "a:b:c",
        ] {
            assert!(!host_ok(&allowed, bad), "{bad}");
        }
        let refusal = allowed
            .check_host(&with(header::HOST, "evil.example"), &Uri::from_static("/"))
            .unwrap_err();
        assert_eq!(refusal.status, StatusCode::FORBIDDEN);
        assert!(
            refusal.message.contains("evil.example")
                && refusal.message.contains("--allowed-host")
                && refusal.message.contains("localhost:7700"),
            "{refusal:?}"
        );
        // No Host at all, or a request target naming another.
        assert!(
            allowed
                .check_host(&HeaderMap::new(), &Uri::from_static("/"))
                .is_err()
        );
        assert!(
            allowed
                .check_host(
                    &with(header::HOST, "127.0.0.1:7700"),
                    &Uri::from_static("http://evil.example/api/runs")
                )
                .is_err()
        );
    }

    #[test]
    fn the_bound_address_is_a_name_unless_it_is_any() {
        let lan = hosts("192.168.1.5:7700", &[]);
        assert!(host_ok(&lan, "192.168.1.5:7700"));
        let any = hosts("0.0.0.0:7700", &[]);
        assert!(!host_ok(&any, "0.0.0.0:7700"));
        assert!(host_ok(&any, "127.0.0.1:7700"));
        let v6 = hosts("[::1]:7700", &[]);
        assert!(host_ok(&v6, "[::1]:7700"));
    }

    #[test]
    fn origins_of_the_same_names_only() {
        let allowed = hosts("127.0.0.1:7700", &["inspector.example.com"]);
        for ok in [
            "http://127.0.0.1:7700",
            "http://localhost:7700",
            "https://inspector.example.com",
            "http://inspector.example.com:8443",
        ] {
            assert!(origin_ok(&allowed, ok), "{ok}");
        }
        for bad in [
            "null",
            "NULL",
            "http://evil.example",
            "http://127.0.0.1:7701",
            "http://127.0.0.1",
            "https://localhost",
            "file://",
            "ftp://127.0.0.1:7700",
            "http://127.0.0.1:7700/path",
            "127.0.0.1:7700",
            "http://localhost:7700.evil.example",
        ] {
            assert!(!origin_ok(&allowed, bad), "{bad}");
        }
        assert!(allowed.check_origin(&HeaderMap::new()).is_ok());
        let refusal = allowed
            .check_origin(&with(header::ORIGIN, "http://evil.example"))
            .unwrap_err();
        assert!(refusal.message.contains("another site"), "{refusal:?}");
    }

    #[test]
    fn a_configured_name_must_be_one() {
        let bound = "127.0.0.1:7700".parse().unwrap();
        for bad in ["", "http://x", "a b", "x:port", "x/y", "x:99999"] {
            let err = AllowedHosts::new(bound, &[bad.to_string()]).unwrap_err();
            assert!(err.starts_with("--allowed-host"), "{bad}: {err}");
        }
        let allowed = AllowedHosts::new(bound, &["x.example".into(), "[::2]:80".into()]).unwrap();
        assert_eq!(
            allowed.authorities(),
            [
                "localhost:7700",
                "127.0.0.1:7700",
                "[::1]:7700",
                "x.example",
                "[::2]:80"
            ]
        );
    }
}
