//! Two `host mcp --http --stateless` servers on one Postgres store behind
//! Debian's `haproxy` (pinned in .ci/run), round robin per request, driven
//! by the official TypeScript SDK (`scale_out.mjs`), which records which
//! server answered each request (`X-Served-By`, set by the proxy): a task
//! created through one is followed, answered at its approval and read to
//! its result through the other; a task whose server is killed (SIGKILL,
//! stopped first at a failpoint after a node so it dies mid-run) is
//! finished by a `host worker` on the store once the dead server's lease
//! expired, and read to its result through the survivor. Hostile: a task
//! id no store knows, a waiting run of a scenario the servers do not offer.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

use skillhost_tests::cli::{KilledOnDrop, host_command, send_signal, stderr, wait_until_stopped};
use skillhost_tests::{free_port, repo_root};

use super::offer;

/// The node after whose checkpoint a server running the research task
/// stops itself, to be killed there.
const STOP_AFTER: &str = "stop@after-commit:paper_summarize";

/// One `host mcp --http 127.0.0.1:PORT --stateless` on `db`.
struct Server {
    process: KilledOnDrop,
    port: u16,
}

impl Server {
    fn start(dir: &Path, db: &str, proxy_port: u16) -> Server {
        let port = free_port();
        let mut args = offer();
        args.extend([
            "--database".into(),
            db.into(),
            "--http".into(),
            format!("127.0.0.1:{port}"),
            "--stateless".into(),
            "--lease-ttl".into(),
            "2s".into(),
            // Clients reach it through the proxy, by the proxy's address.
            "--allowed-host".into(),
            format!("127.0.0.1:{proxy_port}"),
        ]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let child = host_command(dir, &args, Some(STOP_AFTER))
            .current_dir(repo_root())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (process, _) = super::serving(child);
        Server { process, port }
    }
}

/// Debian's haproxy on 127.0.0.1:`port`, round robin over `servers` (named
/// `a`, `b`, …), each response naming its server in `X-Served-By`.
fn haproxy(dir: &Path, port: u16, servers: &[&Server]) -> KilledOnDrop {
    let mut config = format!(
        "global\n  maxconn 256\n\
         defaults\n  mode http\n  timeout connect 2s\n  timeout client 120s\n  \
         timeout server 120s\n  retries 3\n  option redispatch\n\
         frontend mcp\n  bind 127.0.0.1:{port}\n  default_backend servers\n\
         backend servers\n  balance roundrobin\n  \
         http-response set-header X-Served-By %s\n"
    );
    for (i, server) in servers.iter().enumerate() {
        let name = (b'a' + i as u8) as char;
        config.push_str(&format!(
            "  server {name} 127.0.0.1:{} check inter 200ms fall 1 rise 1\n",
            server.port
        ));
    }
    let file = dir.join("haproxy.cfg");
    std::fs::write(&file, config).unwrap();
    let child = Command::new("haproxy")
        .arg("-f")
        .arg(&file)
        .arg("-db")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("haproxy (apt-get install haproxy; see .ci/run)");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "haproxy is not listening on {port}"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    KilledOnDrop::new(child)
}

/// Runs `scale_out.mjs URL ARGS…`, returning what it printed.
fn client(url: &str, args: &[&str]) -> Value {
    let mut all = vec![url];
    all.extend_from_slice(args);
    super::node_client("scale_out.mjs", &all)
}

/// A waiting run of a scenario the servers do not offer (a copy of the
/// approval scenario under another name), in `db`; its id.
fn waiting_run_of_another_scenario(dir: &Path, db: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("tests/e2e/engine/approval.toml"))
        .unwrap()
        .replace("name = \"approval\"", "name = \"other-approval\"")
        .replace(
            "../../../skills/dist/echo.wasm",
            &repo_root()
                .join("skills/dist/echo.wasm")
                .display()
                .to_string(),
        );
    let file = dir.join("other.toml");
    std::fs::write(&file, text).unwrap();
    let out = host_command(
        dir,
        &["run", file.to_str().unwrap(), "--database", db, "--json"],
        None,
    )
    .output()
    .unwrap();
    let shown: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("host run --json: {e}: {}", stderr(&out)));
    assert_eq!(shown["status"], "waiting", "{shown}");
    shown["run_id"].as_str().unwrap().to_string()
}

/// The text of an error the client saw, or of an isError result.
fn said(seen: &Value) -> String {
    match seen.get("error") {
        Some(error) => error.as_str().unwrap_or_default().to_string(),
        None => seen["value"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_servers_behind_a_round_robin_proxy_share_tasks_and_a_worker_finishes_a_killed_ones() {
    let db = skillhost_tests::pg::fresh_database().await;
    tokio::task::spawn_blocking(move || {
        let dir = tempfile::tempdir().unwrap();
        let proxy_port = free_port();
        let a = Server::start(dir.path(), &db, proxy_port);
        let b = Server::start(dir.path(), &db, proxy_port);
        let _proxy = haproxy(dir.path(), proxy_port, &[&a, &b]);
        let url = format!("http://127.0.0.1:{proxy_port}/mcp");

        // A task created through one server, followed, answered and read
        // through the other.
        let out = client(&url, &["approval"]);
        assert_eq!(out["session"], Value::Null, "stateless: no session id");
        let creator = out["created"]["by"].as_str().unwrap().to_string();
        let id = out["created"]["id"].as_str().unwrap();
        let followed = out["followed"].as_array().unwrap();
        assert!(
            followed.iter().all(|f| f["by"] != creator.as_str()),
            "{followed:?}"
        );
        assert_eq!(
            followed.last().unwrap()["status"],
            "input_required",
            "{out}"
        );
        for step in ["answered", "task", "result"] {
            assert_ne!(out[step]["by"], creator.as_str(), "{step}: {out}");
            assert!(out[step].get("error").is_none(), "{step}: {out}");
        }
        let answered = &out["answered"]["value"]["structuredContent"];
        assert_eq!(answered["status"], "completed", "{out}");
        assert_eq!(out["task"]["value"]["status"], "completed", "{out}");
        let result = &out["result"]["value"];
        assert_eq!(result["structuredContent"]["run_id"], id, "{out}");
        assert_eq!(result["structuredContent"]["status"], "completed", "{out}");
        assert_eq!(
            result["structuredContent"]["summary"], answered["summary"],
            "the other server's result is the one the answer ended with: {out}"
        );
        assert_eq!(
            result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
            id
        );
        // A task id no store knows, asked of each server.
        assert_ne!(out["unknown"]["by"], out["unknown_other"]["by"], "{out}");
        for seen in [&out["unknown"], &out["unknown_other"]] {
            assert!(said(seen).contains("no task `no-such-task`"), "{seen}");
        }
        // A plain call through the proxy hears its progress (its one node
        // before the wait), without a session.
        assert!(out["set_level"].get("error").is_none(), "{out}");
        assert_eq!(
            out["plain"]["value"]["structuredContent"]["status"], "waiting",
            "{out}"
        );
        let progress = out["progress"].as_array().unwrap();
        assert_eq!(progress.len(), 1, "{out}");
        assert_eq!(progress[0]["progress"], 1, "{out}");
        assert!(
            progress[0]["message"]
                .as_str()
                .unwrap()
                .starts_with("node `prepare`"),
            "{out}"
        );

        // A task whose server is killed mid-run: a worker finishes it.
        let out = client(&url, &["start"]);
        let task = out["created"]["id"].as_str().unwrap().to_string();
        let (mut runner, survivor) = match out["created"]["by"].as_str() {
            Some("a") => (a, b),
            Some("b") => (b, a),
            other => panic!("served by {other:?}: {out}"),
        };
        let pid = runner.process.id();
        wait_until_stopped(pid, "the server running the task");
        send_signal(pid, libc::SIGKILL);
        let _ = runner.process.wait();
        let _worker = KilledOnDrop::new(
            host_command(
                dir.path(),
                &["worker", "--database", &db, "--lease-ttl", "2s"],
                None,
            )
            .current_dir(repo_root())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
        );
        let other = waiting_run_of_another_scenario(dir.path(), &db);
        let out = client(&url, &["result", &task, &other]);
        drop(survivor);

        let result = &out["result"]["value"];
        assert!(out["result"].get("error").is_none(), "{out}");
        assert_ne!(result["isError"], json!(true), "{out}");
        let done = &result["structuredContent"];
        assert_eq!(done["run_id"], task.as_str(), "{out}");
        assert_eq!(done["status"], "completed", "{out}");
        assert!(
            done["summary"]["papers_found"].as_u64().unwrap() > 0,
            "{out}"
        );
        assert!(done["summary"]["report_title"].is_string(), "{out}");
        assert!(!done["artifacts"].as_array().unwrap().is_empty(), "{out}");
        assert_eq!(out["result_again"]["value"]["structuredContent"], *done);
        assert!(
            said(&out["unknown_result"]).contains("no task `no-such-task`"),
            "{out}"
        );
        assert!(
            said(&out["unknown_cancel"]).contains("no task `no-such-task`"),
            "{out}"
        );
        // Another scenario's run: readable as a task, not answered here.
        assert_eq!(
            out["other_task"]["value"]["status"], "input_required",
            "{out}"
        );
        assert_eq!(out["other_answer"]["value"]["isError"], true, "{out}");
        assert!(
            said(&out["other_answer"]).contains("which this server does not offer"),
            "{out}"
        );
        assert_eq!(out["other_cancel"]["value"]["status"], "cancelled", "{out}");
        assert_eq!(out["other_result"]["value"]["isError"], true, "{out}");
        assert!(said(&out["other_result"]).contains("cancelled"), "{out}");

        // The run is the worker's: a checkpoint per node, none twice.
        let shown = host_command(
            dir.path(),
            &["runs", "show", &task, "--json", "--database", &db],
            None,
        )
        .output()
        .unwrap();
        assert!(shown.status.success(), "{}", stderr(&shown));
        let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
        assert_eq!(shown["status"], "completed", "{shown}");
        let steps = shown["steps"].as_array().unwrap();
        let seqs: Vec<u64> = steps.iter().map(|s| s["seq"].as_u64().unwrap()).collect();
        let last = shown["last_seq"].as_u64().unwrap();
        assert_eq!(seqs, (1..=last).collect::<Vec<_>>(), "{shown}");
        let mut nodes: Vec<&str> = steps.iter().map(|s| s["node"].as_str().unwrap()).collect();
        nodes.sort();
        nodes.dedup();
        assert_eq!(nodes.len(), steps.len(), "a node ran twice: {shown}");
    })
    .await
    .unwrap();
}

#[test]
fn stateless_is_for_http_and_a_lease_must_live_a_while() {
    let dir = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        let mut args = offer();
        args.extend(extra.iter().map(|a| a.to_string()));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        host_command(dir.path(), &args, None)
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["--stateless"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--http"), "{}", stderr(&out));
    let out = run(&["--http", "127.0.0.1:0", "--lease-ttl", "0s"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--lease-ttl 0"), "{}", stderr(&out));
}
