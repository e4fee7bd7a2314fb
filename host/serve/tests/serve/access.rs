//! Who may ask and what every answer tells the browser, in-process
//! through the router over a real SQLite store: the `Host` and `Origin` of
//! every route, JSON bodies, the token on reads as on writes with the
//! pages' sign-in cookie, the policy and `nosniff` on every answer, no
//! inline script or handler in any page, artifacts sandboxed or
//! downloaded by media type (an old run's unparseable one never echoed),
//! and a report's links of other schemes than `http`, `https` and
//! `mailto` shown as text, and `/metrics` behind the same gate. The real browser's view of the same is
//! `tests/e2e/serve.rs`.

use std::path::Path;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request};
use serde_json::{Value, json};
use tower::ServiceExt;

use skillhost_store::{Store, StoreOptions};
use skillhost_tests::store_fixtures::new_run;

use crate::HOST;

/// A store with one run of the approval scenario and its artifacts.
struct Fixture {
    _dir: tempfile::TempDir,
    store: Store,
    run: String,
    /// Kept, so the routers' event streams are not told to stop.
    stop: tokio::sync::watch::Sender<bool>,
}

impl Fixture {
    async fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("runs.db").display());
        let store = Store::open_with(&url, StoreOptions::default())
            .await
            .unwrap();
        let run = skillhost_store::new_run_id();
        let mut new = new_run(&run, json!({}));
        new.scenario_path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/e2e/engine/approval.toml")
            .canonicalize()
            .unwrap()
            .display()
            .to_string();
        store.create_run(&new).await.unwrap();
        for (name, media_type, bytes) in [
            (
                "page.html",
                "text/html",
                "<script>fetch('/api/runs')</script>",
            ),
            (
                "report.md",
                "text/markdown",
                "# Report\n\n[click](javascript:alert(1)) and [web](https://example.com)\n",
            ),
            // As a run stored before the checker refused such a type holds it.
            ("old.md", "text/markdown\"><script>alert(1)</script>", "old"),
            ("deck.pptx", "application/vnd.ms-powerpoint", "PK"),
        ] {
            store
                .put_artifact(&run, name, media_type, bytes.as_bytes())
                .await
                .unwrap();
        }
        Fixture {
            _dir: dir,
            store,
            run,
            stop: tokio::sync::watch::channel(false).0,
        }
    }

    fn router(&self, allowed: &[&str], token: Option<&str>) -> axum::Router {
        let shutdown = self.stop.subscribe();
        let allowed: Vec<String> = allowed.iter().map(|s| s.to_string()).collect();
        let gate = skillhost_serve::gate(HOST.parse().unwrap(), &allowed, token.map(String::from))
            .unwrap();
        skillhost_serve::router(self.store.clone(), Vec::new(), Vec::new(), gate, shutdown)
    }

    /// Every GET route, with this run where it takes one.
    fn get_routes(&self) -> Vec<String> {
        let run = &self.run;
        vec![
            "/".into(),
            format!("/runs/{run}"),
            "/runs/nope".into(),
            "/assets/app.js".into(),
            "/assets/app.css".into(),
            "/api/runs".into(),
            format!("/api/runs/{run}"),
            format!("/api/runs/{run}/checkpoints"),
            format!("/api/runs/{run}/checkpoints/0/state"),
            format!("/api/runs/{run}/diff?from=0&to=0"),
            format!("/api/runs/{run}/artifacts/page.html"),
            "/api/runs/nope".into(),
            "/api/scenarios".into(),
            "/api/openapi.json".into(),
            "/api/session".into(),
            "/api/nothing".into(),
        ]
    }
}

/// One request; the status, the headers and the body as text. The `Host`
/// is the server's unless `headers` gives one.
async fn send(
    app: &axum::Router,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, HeaderMap, String) {
    let mut request = Request::builder().method(method).uri(path);
    if !headers
        .iter()
        .any(|(name, _)| name.eq_ignore_ascii_case("host"))
    {
        request = request.header("host", HOST);
    }
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::from(body.to_string())).unwrap())
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .unwrap();
    (
        status,
        headers,
        String::from_utf8_lossy(&bytes).into_owned(),
    )
}

fn error_of(body: &str) -> String {
    let value: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    value["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error: {body}"))
        .to_string()
}

/// The attributes of every tag in `html`, lowercase.
fn attributes(html: &str) -> Vec<String> {
    let mut found = Vec::new();
    for tag in html.split('<').skip(1) {
        let tag = tag.split('>').next().unwrap_or("");
        for word in tag.split_whitespace().skip(1) {
            found.push(word.split('=').next().unwrap_or("").to_ascii_lowercase());
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_carries_the_policy_and_nosniff_and_no_page_inline_script() {
    let fixture = Fixture::new().await;
    let app = fixture.router(&[], None);
    for path in fixture.get_routes() {
        let (status, headers, body) = send(&app, Method::GET, &path, &[], "").await;
        assert!(
            status == 200 || status == 404,
            "GET {path}: {status} {body}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff", "GET {path}");
        let policy = headers["content-security-policy"].to_str().unwrap();
        if path.contains("/artifacts/") {
            assert!(policy.starts_with("sandbox;"), "GET {path}: {policy}");
        } else {
            for part in [
                "default-src 'none'",
                "script-src 'self'",
                "object-src 'none'",
                "base-uri 'none'",
                "frame-ancestors 'none'",
            ] {
                assert!(policy.contains(part), "GET {path}: {policy}");
            }
            assert!(!policy.contains("unsafe"), "GET {path}: {policy}");
        }
        // The server's own pages (an artifact's HTML is the run's, sandboxed).
        let page = !path.contains("/artifacts/");
        if page
            && headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/html")
        {
            for attribute in attributes(&body) {
                assert!(
                    !attribute.starts_with("on") && attribute != "style",
                    "GET {path}: an inline `{attribute}` in {body}"
                );
            }
            for script in body.split("<script").skip(1) {
                assert!(
                    script.starts_with(" src=\"/assets/app.js\"></script>"),
                    "GET {path}: an inline script in {body}"
                );
            }
        }
    }
    // A refusal carries them too.
    let (status, headers, _) = send(
        &app,
        Method::GET,
        "/api/runs",
        &[("host", "evil.example")],
        "",
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(headers.contains_key("content-security-policy"));
}

#[tokio::test(flavor = "multi_thread")]
async fn other_hosts_and_origins_are_refused_on_every_route() {
    let fixture = Fixture::new().await;
    let app = fixture.router(&["inspector.example.com"], None);
    let cancel = format!("/api/runs/{}/cancel", fixture.run);
    let mut routes: Vec<(Method, String)> = fixture
        .get_routes()
        .into_iter()
        .map(|path| (Method::GET, path))
        .collect();
    routes.push((Method::POST, cancel.clone()));
    routes.push((Method::POST, "/api/runs".into()));
    routes.push((Method::POST, "/api/session".into()));
    routes.push((Method::DELETE, "/api/session".into()));
    let json = ("content-type", "application/json");
    for (method, path) in &routes {
        for host in [
            "evil.example",
            "evil.example:7700",
            "127.0.0.1:7701",
            "localhost",
            "inspector.example.com.evil.example",
        ] {
            let (status, _, body) =
                send(&app, method.clone(), path, &[("host", host), json], "{}").await;
            assert_eq!(status, 403, "{method} {path} Host {host}: {body}");
            assert!(body.contains("--allowed-host"), "{method} {path}: {body}");
            if path.starts_with("/api/") {
                assert!(error_of(&body).contains(host), "{body}");
            }
        }
        for origin in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:7701",
            "http://localhost",
            "https://127.0.0.1:7700.evil.example",
        ] {
            let (status, _, body) = send(
                &app,
                method.clone(),
                path,
                &[("origin", origin), json],
                "{}",
            )
            .await;
            assert_eq!(status, 403, "{method} {path} Origin {origin}: {body}");
        }
    }
    // The server's own names, and the configured one, are answered.
    for host in [
        "127.0.0.1:7700",
        "localhost:7700",
        "[::1]:7700",
        "inspector.example.com",
    ] {
        let (status, _, body) = send(&app, Method::GET, "/api/runs", &[("host", host)], "").await;
        assert_eq!(status, 200, "Host {host}: {body}");
    }
    for origin in ["http://127.0.0.1:7700", "https://inspector.example.com"] {
        let (status, _, body) =
            send(&app, Method::GET, "/api/runs", &[("origin", origin)], "").await;
        assert_eq!(status, 200, "Origin {origin}: {body}");
    }
    // Nothing a refused request asked for was done.
    let run = fixture.store.run(&fixture.run).await.unwrap().unwrap();
    assert_eq!(run.status.as_str(), "running");
    let filter = skillhost_store::RunFilter {
        status: None,
        scenario: None,
        before: None,
        limit: 10,
    };
    assert_eq!(
        fixture.store.list_runs_page(&filter).await.unwrap().len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_body_that_is_not_sent_as_json_is_refused_unread() {
    let fixture = Fixture::new().await;
    let app = fixture.router(&[], None);
    let cancel = format!("/api/runs/{}/cancel", fixture.run);
    for content_type in [
        Some("text/plain"),
        Some("text/plain;charset=UTF-8"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        for path in [cancel.as_str(), "/api/runs", "/api/session"] {
            let headers: Vec<(&str, &str)> = content_type
                .map(|c| ("content-type", c))
                .into_iter()
                .collect();
            let (status, _, body) =
                send(&app, Method::POST, path, &headers, "{\"by\": \"x\"}").await;
            assert_eq!(status, 415, "{content_type:?} {path}: {body}");
            assert!(error_of(&body).contains("application/json"), "{body}");
        }
    }
    let run = fixture.store.run(&fixture.run).await.unwrap().unwrap();
    assert_eq!(run.status.as_str(), "running");
    let (status, _, body) = send(
        &app,
        Method::POST,
        &cancel,
        &[("content-type", "application/json; charset=utf-8")],
        "{}",
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_token_reads_need_it_too_and_the_pages_sign_in_with_a_cookie() {
    let fixture = Fixture::new().await;
    let app = fixture.router(&[], Some("s3cret-token"));
    let open = ["/", "/assets/app.js", "/assets/app.css", "/api/session"];
    for path in fixture.get_routes() {
        let (status, headers, body) = send(&app, Method::GET, &path, &[], "").await;
        if open.contains(&path.as_str()) {
            assert_eq!(status, 200, "GET {path}: {body}");
        } else if path.starts_with("/api/") {
            assert_eq!(status, 401, "GET {path}: {body}");
            assert_eq!(headers["www-authenticate"], "Bearer");
            assert!(error_of(&body).contains("Authorization: Bearer"), "{body}");
        } else {
            assert_eq!(status, 401, "GET {path}: {body}");
            assert!(body.contains("data-page=\"signin\""), "GET {path}: {body}");
            assert!(!body.contains("Run <code>"), "GET {path}: {body}");
        }
        assert!(!body.contains("s3cret"), "GET {path}: {body}");
    }
    let events = format!("/api/runs/{}/events", fixture.run);
    assert_eq!(send(&app, Method::GET, &events, &[], "").await.0, 401);
    assert_eq!(send(&app, Method::GET, "/api/events", &[], "").await.0, 401);
    // The bearer scheme, in any case.
    for authorization in [
        "Bearer s3cret-token",
        "bearer s3cret-token",
        "BEARER s3cret-token",
    ] {
        let (status, _, body) = send(
            &app,
            Method::GET,
            "/api/runs",
            &[("authorization", authorization)],
            "",
        )
        .await;
        assert_eq!(status, 200, "{authorization}: {body}");
    }
    let (status, _, _) = send(
        &app,
        Method::GET,
        "/api/runs",
        &[("authorization", "Bearer guess")],
        "",
    )
    .await;
    assert_eq!(status, 401);

    // Signing in: a wrong token is refused, the right one sets the cookie,
    // which holds no token and no script can read.
    let json = ("content-type", "application/json");
    let (_, _, session) = send(&app, Method::GET, "/api/session", &[], "").await;
    assert_eq!(
        serde_json::from_str::<Value>(&session).unwrap(),
        json!({"token_required": true, "signed_in": false})
    );
    let (status, headers, _) = send(
        &app,
        Method::POST,
        "/api/session",
        &[json],
        r#"{"token": "guess"}"#,
    )
    .await;
    assert_eq!(status, 401);
    assert!(!headers.contains_key("set-cookie"));
    let (status, headers, body) = send(
        &app,
        Method::POST,
        "/api/session",
        &[json],
        r#"{"token": "s3cret-token"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let set = headers["set-cookie"].to_str().unwrap().to_string();
    assert!(set.starts_with("skillhost-serve-7700="), "{set}");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains("s3cret"), "{set}");
    let cookie = set.split(';').next().unwrap().to_string();
    let signed = [("cookie", cookie.as_str())];
    for path in fixture.get_routes() {
        let (status, _, body) = send(&app, Method::GET, &path, &signed, "").await;
        assert!(
            status == 200 || status == 404,
            "GET {path}: {status} {body}"
        );
    }
    let (_, _, session) = send(&app, Method::GET, "/api/session", &signed, "").await;
    assert_eq!(
        serde_json::from_str::<Value>(&session).unwrap()["signed_in"],
        true
    );
    // A cookie from another token is no sign-in.
    let other = fixture.router(&[], Some("another-token"));
    let (status, _, body) = send(&other, Method::GET, "/api/runs", &signed, "").await;
    assert_eq!(status, 401);
    assert!(error_of(&body).contains("sign in again"), "{body}");
    // Signing out clears it.
    let (status, headers, _) = send(&app, Method::DELETE, "/api/session", &signed, "").await;
    assert_eq!(status, 200);
    assert!(
        headers["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn artifacts_are_sandboxed_or_downloaded_and_reports_lose_script_links() {
    let fixture = Fixture::new().await;
    let app = fixture.router(&[], None);
    let artifact = |name: &str| format!("/api/runs/{}/artifacts/{name}", fixture.run);
    let (status, headers, _) = send(&app, Method::GET, &artifact("page.html"), &[], "").await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/html");
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("inline;")
    );
    let policy = headers["content-security-policy"].to_str().unwrap();
    assert!(
        policy.starts_with("sandbox;") && policy.contains("default-src 'none'"),
        "{policy}"
    );
    assert!(!policy.contains("allow-scripts"), "{policy}");
    let (_, headers, _) = send(&app, Method::GET, &artifact("old.md"), &[], "").await;
    assert_eq!(headers["content-type"], "application/octet-stream");
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );
    let (_, headers, _) = send(&app, Method::GET, &artifact("deck.pptx"), &[], "").await;
    assert_eq!(headers["content-type"], "application/vnd.ms-powerpoint");
    assert!(
        headers["content-disposition"]
            .to_str()
            .unwrap()
            .starts_with("attachment;")
    );

    let (status, _, page) = send(
        &app,
        Method::GET,
        &format!("/runs/{}", fixture.run),
        &[],
        "",
    )
    .await;
    assert_eq!(status, 200);
    assert!(page.contains("<h1>Report</h1>"), "{page}");
    assert!(
        page.contains("<a href=\"https://example.com\">web</a>"),
        "{page}"
    );
    assert!(page.contains("link-removed"), "{page}");
    assert!(!page.to_ascii_lowercase().contains("javascript:"), "{page}");
    // The old artifact's media type is shown as text, escaped.
    assert!(!page.contains("\"><script>alert"), "{page}");
}

/// `/metrics` passes the same gate as every route (its `Host`, the token),
/// a refusal in the API's shape, and answers in the format the scraper
/// asks for, with the queue read from the store at the scrape.
#[tokio::test(flavor = "multi_thread")]
async fn metrics_are_behind_the_gate_and_in_the_format_asked_for() {
    let fixture = Fixture::new().await;
    let app = fixture.router(&[], None);
    let (status, headers, body) = send(&app, Method::GET, "/metrics", &[], "").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        headers["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(body.contains("\nskillhost_queue_depth 0\n"), "{body}");
    assert!(body.contains("\nskillhost_waits_open 0\n"), "{body}");
    assert!(
        body.contains("# TYPE skillhost_lease_takeovers_total counter"),
        "{body}"
    );
    // No run id is a label.
    assert!(!body.contains(&fixture.run), "{body}");

    // A queued run is in the next scrape.
    fixture
        .store
        .enqueue_run(&new_run(&skillhost_store::new_run_id(), json!({})))
        .await
        .unwrap();
    let openmetrics = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
    let (status, headers, body) = send(
        &app,
        Method::GET,
        "/metrics",
        &[("accept", openmetrics)],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        headers["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(body.contains("\nskillhost_queue_depth 1\n"), "{body}");
    assert!(body.ends_with("# EOF\n"), "{body}");

    // Another site's name is refused, as on every route.
    let (status, _, body) = send(
        &app,
        Method::GET,
        "/metrics",
        &[("host", "evil.example")],
        "",
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(!error_of(&body).is_empty());

    // With a token: refused without it, in the API's shape; answered with it.
    let guarded = fixture.router(&[], Some("s3cret-token"));
    for authorization in [None, Some("Bearer guess")] {
        let headers: Vec<(&str, &str)> = authorization
            .map(|value| ("authorization", value))
            .into_iter()
            .collect();
        let (status, answer, body) = send(&guarded, Method::GET, "/metrics", &headers, "").await;
        assert_eq!(status, 401, "{authorization:?}: {body}");
        assert_eq!(answer["www-authenticate"], "Bearer");
        assert!(error_of(&body).contains("Authorization: Bearer"), "{body}");
        assert!(!body.contains("skillhost_"), "{body}");
        assert!(!body.contains("s3cret"), "{body}");
    }
    let (status, _, body) = send(
        &guarded,
        Method::GET,
        "/metrics",
        &[("authorization", "Bearer s3cret-token")],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("skillhost_queue_depth 1"), "{body}");
}
