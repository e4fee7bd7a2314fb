//! `host mcp --compose-ceiling`: scenarios the client writes, driven by the
//! official MCP SDKs (`mcp/compose.py`, Python over stdio; `mcp/compose.mjs`,
//! TypeScript over streamable HTTP through MCP tasks). A three-node
//! scenario composed from offered skills runs durably, is followed with
//! progress, and is then shown and replayed like any run; a composed
//! approval waits and is answered; the hostile corpus
//! (`compose/hostile/`, each case with the codes its refusal must hold in
//! `expect.toml`) is refused case by case before anything runs: no run row,
//! no kept scenario, no component compiled.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use skillhost_tests::cli::{host, host_bin, host_command, sqlite_url, stderr};
use skillhost_tests::repo_root;

use crate::mcp::HttpServer;

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The ceiling the tests set: echo and the research skills (not `fail`),
/// the research corpus, one HTTP host, one `kv` namespace, and limits.
fn write_ceiling(dir: &Path) -> PathBuf {
    let corpus = repo_root().join("examples/research/corpus");
    let file = dir.join("ceiling.toml");
    std::fs::write(
        &file,
        format!(
            r#"[skills]
allow = ["echo", "paper-discovery", "paper-summarize", "paper-compare"]

[grants]
fs = ["{}"]
http = ["api.example.org"]
kv = ["notes"]

[limits]
max_bytes = 65536
max_nodes = 8
max_visits = 5
timeout_ms = 10000
memory_mb = 512
max_concurrency = 8
"#,
            corpus.display()
        ),
    )
    .unwrap();
    file
}

/// `host mcp` over stdio for `compose.py`, with the ceiling, its kept
/// scenarios in `DIR/composed` and components cached in `cache`.
fn stdio_server(dir: &Path, offer: &[String], cache: &Path) -> Value {
    let mut args: Vec<String> = vec!["mcp".into()];
    args.extend(offer.iter().cloned());
    args.extend([
        "--compose-ceiling".into(),
        write_ceiling(dir).display().to_string(),
        "--compose-dir".into(),
        dir.join("composed").display().to_string(),
    ]);
    json!({
        "command": host_bin(),
        "args": args,
        "env": {
            "SKILLHOST_CACHE_DIR": cache,
            "SKILLHOST_DATABASE_URL": sqlite_url(dir),
            "SKILLHOST_FS_ROOTS": repo_root().join("examples"),
            "XDG_CONFIG_HOME": dir.join("xdg-config"),
            "SKILLHOST_REGISTRY_CACHE": dir.join("registry-cache"),
            "DOCKER_CONFIG": dir.join("docker"),
        },
        "cwd": repo_root(),
    })
}

/// Runs `compose.py` with `config`, returning what it printed.
fn python(dir: &Path, config: Value) -> Value {
    crate::mcp::python_client("compose.py", dir, config)
}

/// Three nodes from offered skills: discovery over the corpus, a summary
/// per paper (a map node), the comparison matrix.
fn three_nodes() -> String {
    let corpus = repo_root().join("examples/research/corpus");
    format!(
        r#"[scenario]
name = "composed-papers"
description = "Find papers, summarise each, compare them"

[input]
query = {{ type = "string" }}

[state]
papers = {{ type = "array" }}
summaries = {{ type = "array" }}
matrix = {{ type = "object" }}

[skills.find]
component = "paper-discovery"

[skills.summarize]
component = "paper-summarize"

[skills.compare]
component = "paper-compare"

[[node]]
id = "find"
skill = "find"
capabilities = {{ fs = "{}" }}
input = {{ query = "input.query", corpus_dir = "''", max_results = "4", min_score = "0.0" }}
writes = [{{ field = "papers", from = "output.papers.filter(p, p.valid)" }}]
timeout_ms = 10000

[[node]]
id = "summarize"
kind = "map"
skill = "summarize"
over = "state.papers"
concurrency = 2
input = {{ paper = "item" }}
writes = [{{ field = "summaries", from = "output" }}]
timeout_ms = 10000

[[node]]
id = "compare"
skill = "compare"
input = {{ papers = "state.papers", summaries = "state.summaries" }}
writes = [{{ field = "matrix", from = "output" }}]
timeout_ms = 10000

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "find"
to = "summarize"

[[edge]]
from = "summarize"
to = "compare"

[[edge]]
from = "compare"
to = "done"

[summary]
papers = "size(state.papers)"
"#,
        corpus.display()
    )
}

fn research_offer() -> Vec<String> {
    vec![
        "--scenario".into(),
        "examples/research/scenario.toml".into(),
        "--skill".into(),
        repo_root()
            .join("skills/dist/echo.wasm")
            .display()
            .to_string(),
    ]
}

/// The official Python SDK reads what it needs to compose (the schema, the
/// skills, the ceiling, the example, the prompt), checks a three-node
/// scenario as TOML and as JSON, and runs it followed by progress; the run
/// is then an ordinary run: `host runs show` names its kept scenario,
/// `host replay` reproduces it.
#[test]
fn python_sdk_composes_a_three_node_scenario_and_runs_it() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = three_nodes();
    let as_json: Value =
        serde_json::to_value(toml::from_str::<toml::Value>(&scenario).unwrap()).unwrap();
    let mut config = stdio_server(
        dir.path(),
        &research_offer(),
        skillhost_tests::shared_component_cache(),
    );
    config["exercise"] = json!("compose");
    config["scenario"] = json!(scenario);
    config["scenario_json"] = as_json;
    config["input"] = json!({"query": "retrieval augmented generation"});
    config["approval"] = task_cases()["approval"].clone();
    let out = python(dir.path(), config);

    let tools: Vec<&str> = out["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert!(tools.contains(&"scenario_compose"), "{tools:?}");
    assert_eq!(
        out["tool"]["input_schema"]["required"],
        json!(["scenario"]),
        "{}",
        out["tool"]
    );
    assert_eq!(out["tool"]["annotations"]["read_only_hint"], false);
    for uri in [
        "skillhost://compose/scenario-schema",
        "skillhost://compose/skills",
        "skillhost://compose/ceiling",
        "skillhost://compose/example",
    ] {
        assert!(
            out["resources"].as_array().unwrap().contains(&json!(uri)),
            "{uri}: {}",
            out["resources"]
        );
    }
    let read = &out["read"];
    let schema: Value = serde_json::from_str(
        read["skillhost://compose/scenario-schema"]["text"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert!(schema["properties"]["node"].is_object(), "{schema}");
    let skills: Value =
        serde_json::from_str(read["skillhost://compose/skills"]["text"].as_str().unwrap()).unwrap();
    let names: BTreeSet<&str> = skills["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    // The ceiling's allow list: offered research skills it does not name
    // (`claim-synthesis`, `report-writer`) are not listed.
    assert_eq!(
        names,
        BTreeSet::from([
            "echo",
            "paper-compare",
            "paper-discovery",
            "paper-summarize"
        ])
    );
    let discovery = skills["skills"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "paper-discovery")
        .unwrap();
    assert_eq!(discovery["capabilities"], json!(["log", "fs"]));
    assert!(discovery["input_schema"]["properties"]["query"].is_object());
    assert!(discovery["digest"].as_str().unwrap().starts_with("sha256:"));
    let ceiling: Value = serde_json::from_str(
        read["skillhost://compose/ceiling"]["text"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(ceiling["limits"]["max_nodes"], 8);
    assert_eq!(ceiling["name_prefix"], "composed-");
    let example = read["skillhost://compose/example"]["text"]
        .as_str()
        .unwrap();
    assert!(
        example.contains("[[edge]]") && example.contains("component = \"echo\""),
        "{example}"
    );
    assert_eq!(out["prompts"], json!(["compose_scenario"]));
    let prompt = out["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("review papers on a topic") && prompt.contains("paper-discovery"),
        "{prompt}"
    );

    // Checked as TOML and as JSON, without running.
    for key in ["dry_run", "dry_run_json"] {
        let checked = &out[key];
        assert_eq!(checked["is_error"], false, "{key}: {}", checked["text"]);
        assert_eq!(checked["structured"]["checked"], true, "{key}");
        assert_eq!(
            checked["structured"]["scenario_digest"]
                .as_str()
                .unwrap()
                .len(),
            64
        );
    }

    // Run, followed: a progress notification per finished node, in order.
    let run = &out["run"];
    assert_eq!(run["is_error"], false, "{}", run["text"]);
    assert_eq!(run["structured"]["status"], "completed");
    let papers = run["structured"]["summary"]["papers"].as_i64().unwrap();
    assert!((3..=4).contains(&papers), "{run}");
    let messages: Vec<&str> = out["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap())
        .collect();
    let at = |node: &str| {
        messages
            .iter()
            .position(|m| m.contains(&format!("`{node}`")))
            .unwrap_or_else(|| panic!("no progress for `{node}`: {messages:?}"))
    };
    assert!(at("find") < at("summarize") && at("summarize") < at("compare"));

    // An ordinary run: shown with its kept scenario, replayed.
    let run_id = run["structured"]["run_id"].as_str().unwrap();
    let shown = host(dir.path(), &["runs", "show", run_id, "--json"], None);
    assert!(shown.status.success(), "{}", stderr(&shown));
    let shown: Value = serde_json::from_str(&stdout(&shown)).unwrap();
    let kept = PathBuf::from(shown["scenario_path"].as_str().unwrap_or_else(|| {
        panic!("no scenario path in {shown}");
    }));
    assert_eq!(
        kept.parent().unwrap(),
        dir.path().join("composed").canonicalize().unwrap()
    );
    let text = std::fs::read_to_string(&kept).unwrap();
    assert_eq!(
        text.lines().count(),
        scenario.lines().count(),
        "the kept text keeps the client's lines"
    );
    assert!(
        text.contains(&format!(
            "component = \"{}\"",
            repo_root()
                .join("skills/dist/paper-discovery.wasm")
                .display()
        )),
        "{text}"
    );
    // A replay loads the kept scenario as any scenario file: with the
    // host's roots the server had.
    let with_roots = |args: &[&str]| {
        host_command(dir.path(), args, None)
            .env("SKILLHOST_FS_ROOTS", repo_root().join("examples"))
            .output()
            .unwrap()
    };
    let replayed = with_roots(&["replay", run_id]);
    assert!(replayed.status.success(), "{}", stderr(&replayed));
    assert!(
        stdout(&replayed).contains("as recorded"),
        "{}",
        stdout(&replayed)
    );

    // The run keeps its scenario's text: with the kept files gone (a
    // worker on another machine, a directory cleaned up), a composed run
    // waiting at its approval is answered and finished here, and both runs
    // replay, each file written back from its run.
    let waiting = &out["approval"];
    assert_eq!(waiting["structured"]["status"], "waiting", "{waiting}");
    let waiting_id = waiting["structured"]["run_id"].as_str().unwrap();
    std::fs::remove_dir_all(dir.path().join("composed")).unwrap();
    let approved = with_roots(&["runs", "approve", waiting_id, "--json"]);
    assert!(approved.status.success(), "{}", stderr(&approved));
    let approved: Value = serde_json::from_str(&stdout(&approved)).unwrap();
    assert_eq!(approved["status"], "completed", "{approved}");
    std::fs::remove_dir_all(dir.path().join("composed")).unwrap();
    for id in [run_id, waiting_id] {
        let replayed = with_roots(&["replay", id]);
        assert!(replayed.status.success(), "{id}: {}", stderr(&replayed));
    }
    assert_eq!(std::fs::read_to_string(&kept).unwrap(), text);
}

/// One hostile case: its file name, what it sends, the codes expected.
struct Case {
    name: String,
    scenario: Value,
    expect: Vec<String>,
}

/// The committed corpus, with `@REPO@` made the repository's path, and a
/// document over the ceiling's 64 KiB made here.
fn hostile_cases() -> Vec<Case> {
    let folder = repo_root().join("tests/e2e/compose/hostile");
    let expect: toml::Table =
        toml::from_str(&std::fs::read_to_string(folder.join("expect.toml")).unwrap()).unwrap();
    let repo = repo_root().display().to_string();
    let mut cases = Vec::new();
    for (name, entry) in &expect {
        let text = std::fs::read_to_string(folder.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .replace("@REPO@", &repo);
        let scenario = if name.ends_with(".json") {
            serde_json::from_str(&text).unwrap()
        } else {
            json!(text)
        };
        let expect = entry["expect"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        cases.push(Case {
            name: name.clone(),
            scenario,
            expect,
        });
    }
    let listed: BTreeSet<String> = std::fs::read_dir(&folder)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "expect.toml")
        .collect();
    let expected: BTreeSet<String> = expect.keys().cloned().collect();
    assert_eq!(
        listed, expected,
        "every case file has its entry in expect.toml"
    );
    cases.push(Case {
        name: "oversize".into(),
        scenario: json!(format!(
            "# {}\n[scenario]\nname = \"composed-big\"\n",
            "x".repeat(70_000)
        )),
        expect: vec!["compose-too-large".into()],
    });
    cases
}

/// Every case of the hostile corpus is refused with its codes, each error
/// naming its line where it has one, and nothing happens: no run row, no
/// kept scenario, no component compiled (a case names a component the
/// server never loaded, which loading it would have compiled).
#[test]
fn hostile_composed_scenarios_are_refused_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let cases = hostile_cases();
    assert!(cases.len() >= 40, "{} cases", cases.len());
    let offer: Vec<String> = vec![
        "--scenario".into(),
        "tests/e2e/engine/approval.toml".into(),
        "--skill".into(),
        repo_root()
            .join("skills/dist/echo.wasm")
            .display()
            .to_string(),
        "--skill".into(),
        repo_root()
            .join("skills/dist/fail.wasm")
            .display()
            .to_string(),
    ];
    let mut config = stdio_server(dir.path(), &offer, &cache);
    config["exercise"] = json!("hostile");
    config["cache_dir"] = json!(cache);
    config["cases"] = cases
        .iter()
        .map(|c| json!({"name": c.name, "scenario": c.scenario}))
        .collect();
    let out = python(dir.path(), config);
    let mut wrong = Vec::new();
    for case in &cases {
        let got = &out["cases"][&case.name];
        let codes: BTreeSet<&str> = got["structured"]["errors"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| e["code"].as_str().unwrap_or("?"))
            .collect();
        let refused =
            got["is_error"] == true && got["text"].as_str().unwrap_or("").contains("nothing ran");
        if !refused || case.expect.iter().any(|c| !codes.contains(c.as_str())) {
            wrong.push(format!(
                "{}: expected {:?}, got {codes:?} (refused: {refused}): {}",
                case.name, case.expect, got["text"]
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The cache held the offered components when the first case came, and
    // holds nothing more after the last.
    assert_eq!(
        out["cache_before"], out["cache_after"],
        "a refused scenario compiled a component"
    );
    assert!(!out["cache_before"].as_array().unwrap().is_empty());
    let runs = host(dir.path(), &["runs", "list", "--json"], None);
    assert!(runs.status.success(), "{}", stderr(&runs));
    let runs: Value = serde_json::from_str(&stdout(&runs)).unwrap();
    let rows = runs.as_array().or_else(|| runs["runs"].as_array()).unwrap();
    assert!(rows.is_empty(), "a refused scenario wrote a run: {runs}");
    let kept: Vec<_> = std::fs::read_dir(dir.path().join("composed"))
        .unwrap()
        .collect();
    assert!(kept.is_empty(), "a refused scenario was kept: {kept:?}");
}

/// Two echo calls and an end, composed; an approval composed; a scenario
/// the checker refuses.
fn task_cases() -> Value {
    let approval = std::fs::read_to_string(repo_root().join("tests/e2e/engine/approval.toml"))
        .unwrap()
        .replace("name = \"approval\"", "name = \"composed-approval\"")
        .replace("../../../skills/dist/echo.wasm", "echo")
        .replace("repeat = \"2\" }", "repeat = \"2\" }\ntimeout_ms = 5000")
        .replace("repeat = \"1\" }", "repeat = \"1\" }\ntimeout_ms = 5000");
    let three = r#"[scenario]
name = "composed-echoes"

[input]
message = { type = "string" }

[state]
first = { type = "integer" }
second = { type = "integer" }

[skills.echo]
component = "echo"

[[node]]
id = "one"
skill = "echo"
input = { message = "input.message", repeat = "2" }
writes = [{ field = "first", from = "output.length" }]
timeout_ms = 5000

[[node]]
id = "two"
skill = "echo"
input = { message = "input.message", repeat = "3" }
writes = [{ field = "second", from = "output.length" }]
timeout_ms = 5000

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "one"
to = "two"

[[edge]]
from = "two"
to = "done"

[summary]
total = "state.first + state.second"
"#;
    let refused = three.replace("component = \"echo\"", "component = \"fail\"");
    json!({"three": three, "approval": approval, "refused": refused})
}

/// The official TypeScript SDK over streamable HTTP: a composed scenario
/// as a task, followed to its result; a composed approval answered through
/// `run_answer` (the server loads the kept scenario again to continue it);
/// a refused one, plainly and as a task, creates no task.
#[test]
fn typescript_sdk_runs_composed_scenarios_as_tasks() {
    let dir = tempfile::tempdir().unwrap();
    let ceiling = dir.path().join("ceiling.toml");
    std::fs::write(
        &ceiling,
        "[skills]\nallow = [\"echo\"]\n\n[limits]\ntimeout_ms = 10000\n",
    )
    .unwrap();
    let server = HttpServer::start(
        dir.path(),
        &[
            "mcp".into(),
            "--skill".into(),
            repo_root()
                .join("skills/dist/echo.wasm")
                .display()
                .to_string(),
            "--skill".into(),
            repo_root()
                .join("skills/dist/fail.wasm")
                .display()
                .to_string(),
            "--compose-ceiling".into(),
            ceiling.display().to_string(),
            "--compose-dir".into(),
            dir.path().join("composed").display().to_string(),
        ],
    );
    let cases = dir.path().join("cases.json");
    std::fs::write(&cases, task_cases().to_string()).unwrap();
    let out = crate::mcp::node_client("compose.mjs", &[&server.url, cases.to_str().unwrap()]);
    drop(server);

    assert_eq!(out["task_support"], json!(["optional"]), "{out}");
    let stream = out["stream"].as_array().unwrap();
    assert_eq!(stream[0]["type"], "taskCreated", "{out}");
    let last = stream.last().unwrap();
    assert_eq!(last["type"], "result", "{out}");
    let result = &last["result"]["structuredContent"];
    assert_eq!(result["status"], "completed", "{out}");
    assert_eq!(result["summary"]["total"], 25, "{out}");
    assert_eq!(out["three_task"]["status"], "completed");
    assert_eq!(out["three_result"]["structuredContent"], *result);

    // The task's status message: its progress (the node before the
    // approval finished), then the question.
    assert_eq!(out["approval_waiting"]["status"], "input_required", "{out}");
    let message = out["approval_waiting"]["statusMessage"].as_str().unwrap();
    assert!(
        message.starts_with("1 node(s) finished; waiting at node `approve`: Run deploy"),
        "{message}"
    );
    assert_eq!(
        out["approval_answer"]["structuredContent"]["status"], "completed",
        "{out}"
    );
    assert_eq!(
        out["approval_result"]["structuredContent"]["summary"]["outcome"], "executed deploy",
        "{out}"
    );

    let refused = &out["refused"];
    assert_eq!(refused["isError"], true, "{out}");
    // The skill the ceiling does not allow is the one error: its alias is
    // not checked against a skill it may not use.
    let codes: Vec<&str> = refused["structuredContent"]["errors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["code"].as_str().unwrap())
        .collect();
    assert_eq!(codes, ["compose-skill"], "{out}");
    // Asked as a task, it is refused before a task exists: a JSON-RPC
    // error carrying the same list.
    let as_task = out["refused_as_task"].as_array().unwrap();
    assert!(
        as_task.iter().all(|m| m["type"] != "taskCreated"),
        "a refused scenario made a task: {out}"
    );
    let said = as_task.last().unwrap()["error"].as_str().unwrap();
    assert!(
        said.contains("-32602") && said.contains("refused") && said.contains("compose-skill"),
        "{said}"
    );
    assert_eq!(out["listed"].as_array().unwrap().len(), 2, "{out}");
}

/// The ceiling is checked at start: a path the host's roots do not allow,
/// an unknown key, a missing file, each exit 2 naming the file.
#[test]
fn a_bad_ceiling_stops_the_server_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let echo = repo_root().join("skills/dist/echo.wasm");
    let echo = echo.to_str().unwrap();
    let cases = [
        (
            "[grants]\nfs = [\"/usr/share\"]\n",
            "is not under a root SKILLHOST_FS_ROOTS allows",
        ),
        ("[limits]\nmax_nodez = 3\n", "unknown field `max_nodez`"),
        ("[limits]\ntimeout_ms = 0\n", "timeout_ms is 0"),
        ("[grants]\nllm = [\"qwen\"]\n", "is not `PROVIDER/MODEL`"),
        ("[grants]\nfs = [\"/proc\"]\n", "which are never granted"),
    ];
    for (text, says) in cases {
        let ceiling = dir.path().join("ceiling.toml");
        std::fs::write(&ceiling, text).unwrap();
        let out = host(
            dir.path(),
            &[
                "mcp",
                "--skill",
                echo,
                "--compose-ceiling",
                ceiling.to_str().unwrap(),
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(2), "{text}: {}", stderr(&out));
        let said = stderr(&out);
        assert!(
            said.contains(says) && said.contains("ceiling.toml"),
            "{text}: {said}"
        );
    }
    let out = host(
        dir.path(),
        &["mcp", "--skill", echo, "--compose-ceiling", "nosuch.toml"],
        None,
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("nosuch.toml"), "{}", stderr(&out));
}
