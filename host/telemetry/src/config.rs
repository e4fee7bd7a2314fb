//! Where traces go and how, from the standard OpenTelemetry variables and
//! `[telemetry]` in the host's configuration file, checked when the process
//! starts: an endpoint that is no URL or a protocol this build cannot speak
//! is an error naming the variable or the file's key, never a silent
//! fallback.
//!
//! A variable wins over the file (the operator's choice for one process
//! over the machine's). Traces are off unless an endpoint is named
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `otlp_endpoint`) or `OTEL_TRACES_EXPORTER=otlp` asks for the default
//! one; `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true` turns them
//! off whatever the file says.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// The OTLP endpoint an SDK sends to when told only to export.
const DEFAULT_ENDPOINT: &str = "http://localhost:4318";
const TRACES_PATH: &str = "v1/traces";

/// What the process exports.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// None: traces are off.
    pub traces: Option<TracesConfig>,
    /// `service.name` of what it exports.
    pub service_name: String,
    /// A trace viewer's URL with `{trace_id}` where the trace's id goes:
    /// `host runs show` and the run page link to it.
    pub trace_url: Option<String>,
}

/// Where and how spans are sent.
#[derive(Debug, Clone, PartialEq)]
pub struct TracesConfig {
    /// The full URL spans are posted to (`…/v1/traces`).
    pub endpoint: String,
    pub protocol: Protocol,
    pub headers: Vec<(String, String)>,
    /// How long one export may take.
    pub timeout: Duration,
    /// Spans waiting for export at most; past it a span is dropped and
    /// counted.
    pub max_queue: usize,
    /// How long a span waits for the next export at most.
    pub delay: Duration,
    /// Spans per export at most.
    pub max_batch: usize,
}

/// The OTLP transports. Only HTTP with protobuf bodies is built in; the
/// others are named so that asking for them says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    HttpProtobuf,
}

/// A configuration that cannot be used, naming where it came from.
#[derive(Debug, thiserror::Error)]
#[error("{source_name}: {message}")]
pub struct ConfigError {
    /// The variable, or `FILE: [telemetry] KEY`.
    pub source_name: String,
    pub message: String,
}

/// `[telemetry]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    otlp_endpoint: Option<String>,
    otlp_protocol: Option<String>,
    #[serde(default)]
    otlp_headers: BTreeMap<String, String>,
    otlp_timeout_ms: Option<u64>,
    service_name: Option<String>,
    trace_url: Option<String>,
}

#[derive(Debug, Deserialize)]
struct File {
    // Only `[telemetry]` is this module's; the other tables of the file
    // are the runtime's and the registry client's, which check them.
    #[serde(default)]
    telemetry: Section,
}

/// Where a value came from, for its error.
enum From<'a> {
    Env(&'a str),
    File(&'a Path, &'static str),
}

impl From<'_> {
    fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError {
            source_name: match self {
                From::Env(name) => name.to_string(),
                From::File(path, key) => format!("{}: [telemetry] {key}", path.display()),
            },
            message: message.into(),
        }
    }
}

impl TelemetryConfig {
    /// Nothing exported.
    pub fn off() -> TelemetryConfig {
        TelemetryConfig {
            traces: None,
            service_name: "skillhost".into(),
            trace_url: None,
        }
    }

    /// From the process's environment and the host configuration file at
    /// `file` (the one the host found, if any).
    pub fn load(file: Option<&Path>) -> Result<TelemetryConfig, ConfigError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let section = match file {
            Some(path) => read_section(path)?,
            None => (PathBuf::new(), Section::default()),
        };
        resolve(&section.1, &section.0, &env)
    }
}

fn read_section(path: &Path) -> Result<(PathBuf, Section), ConfigError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok((path.to_path_buf(), Section::default()));
        }
        Err(e) => {
            return Err(ConfigError {
                source_name: path.display().to_string(),
                message: format!("cannot read the host configuration: {e}"),
            });
        }
    };
    parse_section(&text, path).map(|section| (path.to_path_buf(), section))
}

fn parse_section(text: &str, path: &Path) -> Result<Section, ConfigError> {
    toml::from_str::<File>(text)
        .map(|file| file.telemetry)
        .map_err(|e| {
            let line = e.span().map(|span| {
                text.as_bytes()[..span.start.min(text.len())]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count()
                    + 1
            });
            ConfigError {
                source_name: match line {
                    Some(line) => format!("{}:{line}", path.display()),
                    None => path.display().to_string(),
                },
                message: format!(
                    "[telemetry]: {}. It takes otlp_endpoint, otlp_protocol (\"http/protobuf\"), \
                     otlp_headers = {{ NAME = \"VALUE\" }}, otlp_timeout_ms, service_name and \
                     trace_url (with {{trace_id}})",
                    e.message()
                ),
            }
        })
}

fn resolve(
    file: &Section,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<TelemetryConfig, ConfigError> {
    let service_name = match env("OTEL_SERVICE_NAME") {
        Some(name) => name,
        None => file
            .service_name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "skillhost".into()),
    };
    let trace_url = match (env("SKILLHOST_TRACE_URL"), &file.trace_url) {
        (Some(url), _) => Some(check_trace_url(&url, From::Env("SKILLHOST_TRACE_URL"))?),
        (None, Some(url)) => Some(check_trace_url(url, From::File(path, "trace_url"))?),
        (None, None) => None,
    };
    let mut config = TelemetryConfig {
        traces: None,
        service_name,
        trace_url,
    };

    let disabled = env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let asked = match env("OTEL_TRACES_EXPORTER").as_deref() {
        None => false,
        Some("otlp") => true,
        Some("none") => return Ok(config),
        Some(other) => {
            return Err(From::Env("OTEL_TRACES_EXPORTER").error(format!(
                "`{other}` is not an exporter this host has: say `otlp` (OTLP over HTTP) or \
                 `none`"
            )));
        }
    };
    if disabled {
        return Ok(config);
    }

    let endpoint = if let Some(url) = env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        check_url(&url, From::Env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))?
    } else if let Some(base) = env("OTEL_EXPORTER_OTLP_ENDPOINT") {
        traces_url(&check_url(&base, From::Env("OTEL_EXPORTER_OTLP_ENDPOINT"))?)
    } else if let Some(base) = &file.otlp_endpoint {
        traces_url(&check_url(base, From::File(path, "otlp_endpoint"))?)
    } else if asked {
        traces_url(DEFAULT_ENDPOINT)
    } else {
        return Ok(config);
    };

    let protocol = if let Some(p) = env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") {
        protocol(&p, From::Env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))?
    } else if let Some(p) = env("OTEL_EXPORTER_OTLP_PROTOCOL") {
        protocol(&p, From::Env("OTEL_EXPORTER_OTLP_PROTOCOL"))?
    } else if let Some(p) = &file.otlp_protocol {
        protocol(p, From::File(path, "otlp_protocol"))?
    } else {
        Protocol::HttpProtobuf
    };

    let mut headers = Vec::new();
    for (name, value) in &file.otlp_headers {
        check_header(name, value, &From::File(path, "otlp_headers"))?;
        headers.push((name.clone(), value.clone()));
    }
    for var in [
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    ] {
        if let Some(list) = env(var) {
            for (name, value) in parse_headers(&list, &From::Env(var))? {
                headers.retain(|(n, _)| !n.eq_ignore_ascii_case(&name));
                headers.push((name, value));
            }
        }
    }

    let timeout = if let Some(ms) = env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT") {
        millis(&ms, From::Env("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"))?
    } else if let Some(ms) = env("OTEL_EXPORTER_OTLP_TIMEOUT") {
        millis(&ms, From::Env("OTEL_EXPORTER_OTLP_TIMEOUT"))?
    } else {
        match file.otlp_timeout_ms {
            Some(0) => {
                return Err(From::File(path, "otlp_timeout_ms")
                    .error("must be a number of milliseconds above 0, e.g. 10000"));
            }
            Some(ms) => Duration::from_millis(ms),
            None => Duration::from_secs(10),
        }
    };
    let count = |var: &'static str, default: usize| -> Result<usize, ConfigError> {
        match env(var) {
            None => Ok(default),
            Some(text) => match text.trim().parse::<usize>() {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(From::Env(var).error(format!(
                    "`{text}` is not a whole number above 0 (the default is {default})"
                ))),
            },
        }
    };
    let max_queue = count("OTEL_BSP_MAX_QUEUE_SIZE", 2048)?;
    let max_batch = count("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512)?.min(max_queue);
    let delay = match env("OTEL_BSP_SCHEDULE_DELAY") {
        Some(ms) => millis(&ms, From::Env("OTEL_BSP_SCHEDULE_DELAY"))?,
        None => Duration::from_secs(5),
    };
    config.traces = Some(TracesConfig {
        endpoint,
        protocol,
        headers,
        timeout,
        max_queue,
        delay,
        max_batch,
    });
    Ok(config)
}

/// `url` if it is an absolute http(s) URL with a host.
fn check_url(url: &str, from: From<'_>) -> Result<String, ConfigError> {
    match url::Url::parse(url.trim()) {
        Ok(parsed)
            if matches!(parsed.scheme(), "http" | "https") && parsed.host_str().is_some() =>
        {
            Ok(parsed.to_string())
        }
        Ok(parsed) => Err(from.error(format!(
            "`{url}` is not an http:// or https:// URL with a host (scheme `{}`); OTLP over \
             HTTP takes e.g. http://localhost:4318",
            parsed.scheme()
        ))),
        Err(e) => Err(from.error(format!(
            "`{url}` is not a URL ({e}); OTLP over HTTP takes e.g. http://localhost:4318"
        ))),
    }
}

/// The traces path under a base endpoint, as the specification joins them.
fn traces_url(base: &str) -> String {
    if base.ends_with('/') {
        format!("{base}{TRACES_PATH}")
    } else {
        format!("{base}/{TRACES_PATH}")
    }
}

fn protocol(text: &str, from: From<'_>) -> Result<Protocol, ConfigError> {
    match text.trim() {
        "http/protobuf" => Ok(Protocol::HttpProtobuf),
        "grpc" | "http/json" => Err(from.error(format!(
            "`{text}` is an OTLP protocol this host is not built with: it sends \
             `http/protobuf` (point it at the collector's HTTP port, 4318 by default)"
        ))),
        other => Err(from.error(format!(
            "`{other}` is not an OTLP protocol: say `http/protobuf`"
        ))),
    }
}

fn millis(text: &str, from: From<'_>) -> Result<Duration, ConfigError> {
    match text.trim().parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(from.error(format!("`{text}` is not a number of milliseconds above 0"))),
    }
}

/// `NAME=VALUE,NAME=VALUE`, the values percent-decoded, as the
/// specification writes `OTEL_EXPORTER_OTLP_HEADERS`.
fn parse_headers(list: &str, from: &From<'_>) -> Result<Vec<(String, String)>, ConfigError> {
    let mut headers = Vec::new();
    for pair in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((name, value)) = pair.split_once('=') else {
            return Err(from.error(format!(
                "`{pair}` is not NAME=VALUE (the list is NAME=VALUE,NAME=VALUE)"
            )));
        };
        let value: String = url::form_urlencoded::parse(format!("v={value}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default();
        let name = name.trim().to_string();
        check_header(&name, value.trim(), from)?;
        headers.push((name, value.trim().to_string()));
    }
    Ok(headers)
}

fn check_header(name: &str, value: &str, from: &From<'_>) -> Result<(), ConfigError> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err(from.error(format!("`{name}` is not an HTTP header name")));
    }
    if !value
        .chars()
        .all(|c| c == ' ' || c == '\t' || c.is_ascii_graphic())
    {
        // The value may be a secret: it is not shown.
        return Err(from.error(format!(
            "the value of header `{name}` has characters an HTTP header cannot carry"
        )));
    }
    Ok(())
}

fn check_trace_url(template: &str, from: From<'_>) -> Result<String, ConfigError> {
    if !template.contains("{trace_id}") {
        return Err(from.error(format!(
            "`{template}` has no `{{trace_id}}` for the trace's id, e.g. \
             http://localhost:16686/trace/{{trace_id}}"
        )));
    }
    check_url(&template.replace("{trace_id}", "0"), from)?;
    Ok(template.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve_with(file: &str, vars: &[(&str, &str)]) -> Result<TelemetryConfig, ConfigError> {
        let path = Path::new("/etc/skillhost/config.toml");
        let section = parse_section(file, path)?;
        let vars: BTreeMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(&section, path, &|name| vars.get(name).cloned())
    }

    #[test]
    fn nothing_named_exports_nothing() {
        let config = resolve_with("", &[]).unwrap();
        assert_eq!(config.traces, None);
        assert_eq!(config.service_name, "skillhost");
    }

    #[test]
    fn the_variables_name_the_endpoint_and_win_over_the_file() {
        let file = "[telemetry]\notlp_endpoint = \"http://collector.lan:4318\"\n\
                    service_name = \"from-file\"\n";
        let traces = resolve_with(file, &[]).unwrap().traces.unwrap();
        assert_eq!(traces.endpoint, "http://collector.lan:4318/v1/traces");
        let config = resolve_with(
            file,
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:9999/base/"),
                ("OTEL_SERVICE_NAME", "worker-a"),
                (
                    "OTEL_EXPORTER_OTLP_HEADERS",
                    "x-tenant=a%20b,authorization=Bearer%20k",
                ),
            ],
        )
        .unwrap();
        let traces = config.traces.unwrap();
        assert_eq!(traces.endpoint, "http://127.0.0.1:9999/base/v1/traces");
        assert_eq!(config.service_name, "worker-a");
        assert_eq!(
            traces.headers,
            vec![
                ("x-tenant".to_string(), "a b".to_string()),
                ("authorization".to_string(), "Bearer k".to_string())
            ]
        );
        let signal = resolve_with(
            file,
            &[(
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "https://c.example/otlp",
            )],
        )
        .unwrap();
        assert_eq!(signal.traces.unwrap().endpoint, "https://c.example/otlp");
        let off = resolve_with(file, &[("OTEL_TRACES_EXPORTER", "none")]).unwrap();
        assert_eq!(off.traces, None);
        let default = resolve_with("", &[("OTEL_TRACES_EXPORTER", "otlp")]).unwrap();
        assert_eq!(
            default.traces.unwrap().endpoint,
            "http://localhost:4318/v1/traces"
        );
    }

    #[test]
    fn bad_configuration_is_an_error_naming_where_it_came_from() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: &[Case] = &[
            (
                "",
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "localhost:4318")],
                "OTEL_EXPORTER_OTLP_ENDPOINT: `localhost:4318` is not an http:// or https:// URL",
            ),
            (
                "",
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://[::1")],
                "OTEL_EXPORTER_OTLP_ENDPOINT: `http://[::1` is not a URL",
            ),
            (
                "[telemetry]\notlp_endpoint = \"ftp://x\"\n",
                &[],
                "/etc/skillhost/config.toml: [telemetry] otlp_endpoint: `ftp://x`",
            ),
            (
                "",
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
                    ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ],
                "OTEL_EXPORTER_OTLP_PROTOCOL: `grpc` is an OTLP protocol this host is not built with",
            ),
            (
                "[telemetry]\notlp_endpoint = \"http://x:1\"\notlp_protocol = \"thrift\"\n",
                &[],
                "[telemetry] otlp_protocol: `thrift` is not an OTLP protocol",
            ),
            (
                "",
                &[("OTEL_TRACES_EXPORTER", "jaeger")],
                "OTEL_TRACES_EXPORTER: `jaeger` is not an exporter",
            ),
            (
                "",
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
                    ("OTEL_EXPORTER_OTLP_HEADERS", "novalue"),
                ],
                "OTEL_EXPORTER_OTLP_HEADERS: `novalue` is not NAME=VALUE",
            ),
            (
                "",
                &[
                    ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
                    ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
                ],
                "OTEL_BSP_MAX_QUEUE_SIZE: `0` is not a whole number above 0",
            ),
            (
                "[telemetry]\ntrace_url = \"http://jaeger:16686/trace/\"\n",
                &[],
                "[telemetry] trace_url: `http://jaeger:16686/trace/` has no `{trace_id}`",
            ),
            (
                "[telemetry]\n\notlp_endpont = \"http://x\"\n",
                &[],
                "/etc/skillhost/config.toml:3: [telemetry]: unknown field `otlp_endpont`",
            ),
        ];
        for (file, vars, expected) in cases {
            let error = resolve_with(file, vars).unwrap_err().to_string();
            assert!(error.contains(expected), "{error}\n  expected: {expected}");
        }
    }

    #[test]
    fn a_header_value_is_never_shown() {
        let error = resolve_with(
            "",
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=secret%0Atoken"),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("authorization"), "{error}");
        assert!(!error.contains("secret"), "{error}");
    }
}
