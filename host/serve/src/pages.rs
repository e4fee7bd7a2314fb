//! The web run inspector: the runs list (`/`, live through `/api/events`,
//! with a form per known scenario generated from its `[input]` schema, and
//! each scenario that cannot run here with why), a scenario's page
//! (`/scenarios/{name}`: its graph, or why it cannot run here) and a run
//! page (`/runs/{id}`: its scenario's graph drawn here as SVG, nodes
//! coloured by status as the run moves, the step timeline, the state diff
//! of each step, its citations, its artifacts with a Markdown report
//! rendered (`markdown.rs`), and the answer form of a waiting run). Plain
//! HTML, CSS and JavaScript, each file embedded in the binary from
//! `assets/`, with no inline script, style or event handler (the pages'
//! policy allows none, `headers.rs`). The sign-in page (`assets/signin.html`)
//! is `access.rs`'s.
//!
//! Must not: load anything from elsewhere, or pass a run's own HTML
//! through (a report's raw HTML is shown as text, its links only `http`,
//! `https`, `mailto` or relative).

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;

use skillhost_store::{ArtifactRow, RunRow};

use crate::svg::xml;
use crate::{GraphView, Shared};

const RUNS_HTML: &str = include_str!("../assets/runs.html");
const RUN_HTML: &str = include_str!("../assets/run.html");
const SCENARIO_HTML: &str = include_str!("../assets/scenario.html");
const APP_CSS: &str = include_str!("../assets/app.css");
const APP_JS: &str = include_str!("../assets/app.js");

/// The largest Markdown artifact rendered into the run page; a larger one
/// is only linked.
const MAX_RENDERED_BYTES: u64 = 2 * 1024 * 1024;

pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/", get(|| async { Html(RUNS_HTML) }))
        .route("/runs/{id}", get(run_page))
        .route("/scenarios/{name}", get(scenario_page))
        .route(
            "/assets/app.css",
            get(|| asset("text/css; charset=utf-8", APP_CSS)),
        )
        .route(
            "/assets/app.js",
            get(|| asset("text/javascript; charset=utf-8", APP_JS)),
        )
}

async fn asset(media_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, media_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(crate) fn page_error(status: StatusCode, message: &str) -> Response {
    let body = format!(
        "<!doctype html><meta charset=utf-8><title>Skillhost</title>\
         <link rel=stylesheet href=\"/assets/app.css\"><main><p><a href=\"/\">← runs</a></p>\
         <h1>{}</h1><p class=error>{}</p></main>",
        status.as_u16(),
        xml(message)
    );
    (status, Html(body)).into_response()
}

async fn run_page(State(state): State<Shared>, Path(run_id): Path<String>) -> Response {
    let run = match state.store.run(&run_id).await {
        Ok(Some(run)) => run,
        Ok(None) => {
            return page_error(
                StatusCode::NOT_FOUND,
                &format!("no run `{run_id}` in this database"),
            );
        }
        Err(e) => return page_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let graph = match graph_of(&state, &run).await {
        Ok(view) => view.svg.clone(),
        Err(message) => format!("<p class=note>{}</p>", xml(&message)),
    };
    let artifacts = match state.store.artifacts(&run_id).await {
        Ok(artifacts) => artifacts,
        Err(e) => return page_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let mut reports = String::new();
    for artifact in &artifacts {
        reports.push_str(&artifact_html(&state, &run_id, artifact).await);
    }
    let trace = trace_html(&state, &run);
    let body = RUN_HTML
        .replace("{{run_id}}", &xml(&run.id))
        .replace("{{scenario}}", &xml(&run.scenario_name))
        .replace("{{trace}}", &trace)
        .replace("{{graph}}", &graph)
        .replace("{{artifacts}}", &reports);
    Html(body).into_response()
}

/// The run's trace: its id, and a link to the trace viewer when the host
/// configuration names one; nothing for a run that keeps no trace.
fn trace_html(state: &Shared, run: &RunRow) -> String {
    let Some((id, url)) = crate::api::trace_of(state, run) else {
        return String::new();
    };
    match url {
        Some(url) => format!(
            "<p class=\"trace\">trace <code>{id}</code> · <a href=\"{}\" rel=\"noopener \
             noreferrer\" target=\"_blank\">open in the trace viewer</a></p>",
            xml(&url)
        ),
        None => format!("<p class=\"trace\">trace <code>{id}</code></p>"),
    }
}

/// A scenario the server was given: its description, or why it cannot
/// run here, and its graph (drawn from its file when it did not load but
/// parses).
async fn scenario_page(State(state): State<Shared>, Path(name): Path<String>) -> Response {
    let (version, status, graph) = if let Some(loaded) = state.scenarios.get(&name) {
        let s = &loaded.scenario;
        (
            s.version.clone(),
            format!("<p>{}</p>", xml(&s.description)),
            crate::svg::graph_svg(s),
        )
    } else if let Some(unavailable) = state.unavailable.get(&name) {
        let path = unavailable.path.clone();
        let parsed = tokio::task::spawn_blocking(move || skillhost_scenario::parse_file(&path))
            .await
            .ok()
            .and_then(Result::ok);
        let status = format!(
            "<div class=\"unavailable\"><p class=error>This server cannot run it; fix it and \
             restart the server:</p><pre class=\"error reason\">{}</pre></div>",
            xml(&unavailable.reason)
        );
        match parsed {
            Some((s, _)) => (s.version.clone(), status, crate::svg::graph_svg(&s)),
            None => (
                String::new(),
                status,
                "<p class=note>Its file does not parse: no graph to draw.</p>".to_string(),
            ),
        }
    } else {
        return page_error(
            StatusCode::NOT_FOUND,
            &format!("this server was not given a scenario `{name}`"),
        );
    };
    let name = xml(&name);
    let version = xml(&version);
    let body = fill(
        SCENARIO_HTML,
        &[
            ("name", &name),
            ("version", &version),
            ("status", &status),
            ("graph", &graph),
        ],
    );
    Html(body).into_response()
}

/// `template` with each `{{key}}` replaced by its value, in one pass (so a
/// value that holds `{{…}}` stays as it is).
fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out =
        String::with_capacity(template.len() + values.iter().map(|v| v.1.len()).sum::<usize>());
    let mut rest = template;
    while let Some(at) = rest.find("{{") {
        out.push_str(&rest[..at]);
        let after = &rest[at + 2..];
        match after.find("}}").and_then(|end| {
            let key = &after[..end];
            values
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (end, *v))
        }) {
            Some((end, value)) => {
                out.push_str(value);
                rest = &after[end + 2..];
            }
            None => {
                out.push_str("{{");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The graph of the run's scenario, parsed from its file once per
/// digest of it.
async fn graph_of(state: &Shared, run: &RunRow) -> Result<Arc<GraphView>, String> {
    let key = (run.scenario_path.clone(), run.scenario_digest.clone());
    if let Some(view) = state.graphs.lock().unwrap().get(&key) {
        return Ok(view.clone());
    }
    let path = std::path::PathBuf::from(&run.scenario_path);
    let parsed = tokio::task::spawn_blocking(move || skillhost_scenario::parse_file(&path))
        .await
        .map_err(|e| format!("the graph could not be drawn: {e}"))?;
    let (scenario, _) = parsed.map_err(|report| {
        format!(
            "the graph of scenario `{}` cannot be drawn: its file {} does not parse now: {report}",
            run.scenario_name, run.scenario_path
        )
    })?;
    let mut svg = String::new();
    if scenario.digest != run.scenario_digest {
        svg.push_str(
            "<p class=note>The scenario file changed since this run started; the graph is \
             the file's as it is now.</p>",
        );
    }
    svg.push_str(&crate::svg::graph_svg(&scenario));
    let view = Arc::new(GraphView { svg });
    state.graphs.lock().unwrap().insert(key, view.clone());
    Ok(view)
}

/// One artifact on the run page: a link, and a Markdown one rendered.
async fn artifact_html(state: &Shared, run_id: &str, artifact: &ArtifactRow) -> String {
    let href = format!(
        "/api/runs/{}/artifacts/{}",
        xml(run_id),
        xml(&path_segment(&artifact.name))
    );
    let mut out = format!(
        "<section class=artifact data-artifact=\"{name}\"><h3><a href=\"{href}\">{name}</a> \
         <small>{media} · {size} bytes</small></h3>",
        name = xml(&artifact.name),
        media = xml(&artifact.media_type),
        size = artifact.size,
    );
    let markdown =
        artifact.media_type.starts_with("text/markdown") || artifact.name.ends_with(".md");
    if markdown && artifact.size <= MAX_RENDERED_BYTES {
        match state.store.artifact_bytes(&artifact.digest).await {
            Ok(Some(bytes)) => {
                out.push_str("<div class=report>");
                out.push_str(&crate::markdown::to_html(&String::from_utf8_lossy(&bytes)));
                out.push_str("</div>");
            }
            Ok(None) => out.push_str("<p class=error>its bytes are not in the store</p>"),
            Err(e) => {
                out.push_str(&format!("<p class=error>{}</p>", xml(&e.to_string())));
            }
        }
    }
    out.push_str("</section>");
    out
}

/// `text` as one URL path segment: unreserved bytes as they are, every
/// other byte percent-encoded (artifact links, and the routes an API error
/// names).
pub(crate) fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                out.push(b as char)
            }
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_is_filled_once() {
        assert_eq!(
            fill("<h1>{{a}}</h1>{{b}}{{c}}", &[("a", "{{b}}"), ("b", "x")]),
            "<h1>{{b}}</h1>x{{c}}"
        );
    }

    #[test]
    fn artifact_names_are_percent_encoded() {
        assert_eq!(path_segment("report.md"), "report.md");
        assert_eq!(path_segment("a b/c"), "a%20b%2Fc");
    }
}
