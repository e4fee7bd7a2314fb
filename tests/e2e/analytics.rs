//! The analytics example end to end through the real `host` binary: a
//! question split by source, answered from the Palmer penguins database
//! (read-only `sql`), documents and graph, reviewed, and summarised with
//! every figure's source; the figures checked against the database itself.
//! Also: a sub-task the reviewer rejects until the loop's bound; `sql` not
//! granted, and grants of a missing or foreign file; the row and time
//! bounds and a refused statement through the `analytics-sql` skill; a kill
//! then `host resume` giving the same answer; a replay answering from the
//! journal after the database changed; and the committed data being what
//! its build script makes from the `palmerpenguins` package; and the
//! `llm.toml` variant against the fake model provider: the same answer from
//! the same plan, and an invented column refused before any query.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use skillhost_tests::cli::{
    host, host_in_repo, json, killed_and_resumed_match, run_to_completion, stderr,
};
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply};

const QUESTION: &str = "@examples/analytics/inputs/question.json";

fn example() -> PathBuf {
    skillhost_tests::repo_root().join("examples/analytics")
}

/// Rows of `statement` on the SQLite file `db`, every value as text (NULL
/// as `missing`), read through sqlx: not through the host.
fn rows(db: &Path, statement: &str) -> Vec<Vec<String>> {
    use sqlx::{Connection, Row, TypeInfo, ValueRef};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let url = format!("sqlite://{}?mode=ro", db.display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        let found = sqlx::query(statement).fetch_all(&mut conn).await.unwrap();
        found
            .iter()
            .map(|row| {
                (0..row.columns().len())
                    .map(|i| {
                        let raw = row.try_get_raw(i).unwrap();
                        if raw.is_null() {
                            return "missing".to_string();
                        }
                        match raw.type_info().name() {
                            "INTEGER" => row.get::<i64, _>(i).to_string(),
                            "REAL" => format!("{}", row.get::<f64, _>(i)),
                            _ => row.get::<String, _>(i),
                        }
                    })
                    .collect()
            })
            .collect()
    })
}

/// Runs SQL that writes on a new SQLite file `db`.
fn create_database(db: &Path, statements: &str) {
    use sqlx::Connection;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let url = format!("sqlite://{}?mode=rwc", db.display());
        let mut conn = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::raw_sql(statements).execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    });
}

/// A copy of the example in `dir` (its scenario, edited by `edit`, and its
/// data), with the components named by absolute path.
fn example_copy(dir: &Path, edit: impl Fn(String) -> String) -> PathBuf {
    let copy = dir.join("analytics");
    for sub in ["data/docs", "data/graph"] {
        std::fs::create_dir_all(copy.join(sub)).unwrap();
    }
    for file in [
        "data/penguins.db",
        "data/docs/about.txt",
        "data/docs/studies.txt",
        "data/graph/graph.json",
    ] {
        std::fs::copy(example().join(file), copy.join(file)).unwrap();
    }
    let dist = skillhost_tests::repo_root().join("skills/dist");
    let text = std::fs::read_to_string(example().join("scenario.toml"))
        .unwrap()
        .replace("../../skills/dist", dist.to_str().unwrap());
    let scenario = copy.join("scenario.toml");
    std::fs::write(&scenario, edit(text)).unwrap();
    scenario
}

/// The sql sub-task's figures of a finding, as `(label, value, support)`.
fn figures(finding: &Value) -> Vec<(String, String, u64)> {
    finding["figures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["label"].as_str().unwrap().to_string(),
                f["value"].as_str().unwrap().to_string(),
                f["support"].as_u64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn the_answer_gives_the_databases_figures_each_with_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let answer = dir.path().join("answer.md");
    let outcome = run_to_completion(dir.path(), "analytics", QUESTION, &answer);
    let state = &outcome["state"];

    // Split by source, in the question's order.
    let tasks: Vec<(&str, &str)> = state["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["id"].as_str().unwrap(), t["source"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tasks,
        [
            ("sql-1", "sql"),
            ("graph-2", "graph"),
            ("documents-3", "documents"),
            ("documents-4", "documents"),
        ]
    );

    // The reviewer sent the database's sub-task back once: six penguins
    // have no recorded sex, a group of their own. The feedback changed
    // the query: those rows are left out the second time.
    let verdicts: Vec<(&str, u64, bool)> = state["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["task_id"].as_str().unwrap(),
                v["attempt"].as_u64().unwrap(),
                v["accepted"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        verdicts,
        [
            ("sql-1", 0, false),
            ("documents-3", 0, true),
            ("documents-4", 0, true),
            ("graph-2", 0, true),
            ("sql-1", 1, true),
        ]
    );
    assert!(
        state["verdicts"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("2 group(s) have a missing grouping value"),
        "{}",
        state["verdicts"][0]
    );
    let results = state["results"].as_array().unwrap();
    let first = results.iter().find(|r| r["task_id"] == "sql-1").unwrap();
    assert_eq!(first["missing_groups"], 2);

    // The accepted figures are what the database says, computed here
    // without the host.
    let db = example().join("data/penguins.db");
    let expected: Vec<(String, String, u64)> = rows(
        &db,
        "SELECT species, sex, count(*), round(avg(body_mass_g), 1) FROM penguins \
         WHERE sex IS NOT NULL AND body_mass_g IS NOT NULL GROUP BY species, sex ORDER BY 1, 2",
    )
    .into_iter()
    .map(|r| {
        (
            format!("mean body_mass_g (species={}, sex={})", r[0], r[1]),
            r[3].clone(),
            r[2].parse().unwrap(),
        )
    })
    .collect();
    assert_eq!(expected.len(), 6);
    let accepted = state["accepted"].as_array().unwrap();
    let sql = accepted.iter().find(|f| f["task_id"] == "sql-1").unwrap();
    assert_eq!(figures(sql), expected);
    assert_eq!(expected[0].1, "3368.8", "Adelie females");
    let graph = accepted.iter().find(|f| f["task_id"] == "graph-2").unwrap();
    let expected_edges: Vec<(String, String, u64)> = rows(
        &db,
        "SELECT species, island, count(*) FROM penguins GROUP BY 1, 2 ORDER BY 1, 2",
    )
    .into_iter()
    .map(|r| {
        (
            format!("{} lives-on {}", r[0], r[1]),
            format!("{} penguins", r[2]),
            r[2].parse().unwrap(),
        )
    })
    .collect();
    assert_eq!(figures(graph), expected_edges);

    // Every sentence names its source; the documents' are quoted and the
    // citation check verified each quote against its passage.
    let sentences = state["answer"]["sentences"].as_array().unwrap();
    assert_eq!(sentences.len(), 6 + 5 + 2);
    for s in sentences {
        let origin = s["origin"].as_str().unwrap();
        let prefix = format!("{}: ", s["source"].as_str().unwrap());
        assert!(origin.starts_with(&prefix), "{s}");
    }
    let citations = state["citations"].as_array().unwrap();
    let cited: Vec<&str> = citations
        .iter()
        .map(|c| c["source_id"].as_str().unwrap())
        .collect();
    assert_eq!(cited, ["about.txt#3", "about.txt#5"]);
    assert!(
        citations[0]["matched"]
            .as_str()
            .unwrap()
            .contains("Data were collected and made available by Dr. Kristen Gorman")
    );

    let text = std::fs::read_to_string(&answer).unwrap();
    for (label, value, support) in &expected {
        let line = format!("- {label}: {value} ({support} penguins). Source: `sql: SELECT");
        assert!(text.contains(&line), "{line}\n{text}");
    }
    assert!(text.contains("sex IS NOT NULL"), "{text}");
    assert!(text.contains(
        "- Gentoo lives-on Biscoe: 124 penguins. Source: `graph: graph.json, edge species:Gentoo -lives-on-> island:Biscoe`."
    ));
    assert!(
        text.ends_with(
            "2 quote(s) from the documents, each verified verbatim against its passage.\n"
        )
    );
    assert_eq!(outcome["summary"]["sub_tasks"], 4);
    assert_eq!(outcome["summary"]["rejected"], 1);
    assert_eq!(outcome["summary"]["citations_verified"], 2);
}

#[test]
fn a_sub_task_rejected_every_round_fails_at_the_bound_saying_why() {
    let dir = tempfile::tempdir().unwrap();
    let out = host_in_repo(
        dir.path(),
        &[
            "run",
            "analytics",
            "--input",
            r#"{"question": "What is the body mass by species and sex?", "min_support": 100}"#,
            "--json",
        ],
        None,
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "failed");
    // Each round the feedback changed the query (missing sex left out, then
    // grouped by species alone); Chinstrap's 68 penguins stay under 100.
    let statements: Vec<String> = outcome["state"]["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["figures"][0]["origin"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(statements.len(), 3, "{statements:?}");
    assert!(!statements[0].contains("sex IS NOT NULL"));
    assert!(
        statements[1].contains("GROUP BY species, sex")
            && statements[1].contains("sex IS NOT NULL")
    );
    assert!(statements[2].contains("GROUP BY species ORDER BY species"));
    assert_eq!(outcome["failure"]["code"], "max-visits-exceeded");
    assert_eq!(outcome["failure"]["handler"], "analytics_error");
    let message = outcome["failure"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "the reviewer rejected `sql-1` (mean body_mass_g by species, sex) in each of 3 rounds; \
             last: `mean body_mass_g (species=Chinstrap)` rests on 68 row(s), fewer than 100; no \
             coarser grouping is left"
        ),
        "{message}\n{outcome}"
    );
}

#[test]
fn sql_must_be_granted_and_name_a_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();

    // The checker refuses a node that does not grant what its skill imports.
    let scenario = example_copy(dir.path(), |text| {
        text.replace("capabilities = { sql = \"data/penguins.db\" }\n", "")
    });
    let out = host(dir.path(), &["check", scenario.to_str().unwrap()], None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let error = String::from_utf8_lossy(&out.stdout).to_string() + &stderr(&out);
    assert!(error.contains("query_database"), "{error}");
    assert!(error.contains("`sql`"), "{error}");
    assert!(error.contains("sql = \"data/analytics.db\""), "{error}");

    // A missing file, and a file that is not SQLite: a grant error naming
    // `sql`, before any skill runs.
    for (grant, says) in [
        ("data/missing.db", "cannot use database `"),
        ("data/docs/about.txt", "is not a SQLite database"),
    ] {
        let scenario = example_copy(dir.path(), |text| {
            text.replace("sql = \"data/penguins.db\"", &format!("sql = \"{grant}\""))
        });
        let out = host(
            dir.path(),
            &[
                "run",
                scenario.to_str().unwrap(),
                "--input",
                r#"{"question": "How many penguins?"}"#,
            ],
            None,
        );
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let error = stderr(&out);
        assert!(
            error.contains("capability `sql`") && error.contains(says),
            "{error}"
        );
        assert!(!error.contains("running analytics"), "{error}");
    }

    // The skill itself, called without the grant, is denied.
    let out = host(
        dir.path(),
        &[
            "skill",
            "call",
            skillhost_tests::repo_root()
                .join("skills/dist/analytics-sql.wasm")
                .to_str()
                .unwrap(),
            "--input",
            &sql_task("count", &["species"]),
            "--json",
        ],
        None,
    );
    let report = json(&out);
    assert_eq!(report["error"]["code"], "capability-denied", "{report}");
    let message = report["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(
            "`capability-not-granted`: capability `sql` is not granted to skill `analytics-sql`"
        ) && message.contains("--grant sql=VALUE"),
        "{report}"
    );
}

/// The input of `analytics-sql` for a sub-task.
fn sql_task(measure: &str, group_by: &[&str]) -> String {
    json!({ "task": {
        "id": "sql-1", "source": "sql", "topic": "t", "measure": measure,
        "group_by": group_by, "year": null, "terms": [], "relation": "", "attempt": 0,
        "feedback": { "exclude_missing": false, "drop_groupings": 0, "any_term": false, "notes": [] },
    }})
    .to_string()
}

/// `analytics-sql` called on the database `db` with `sql` granted.
fn call_sql_skill(dir: &Path, db: &Path, extra: &[&str]) -> Value {
    let component = skillhost_tests::repo_root().join("skills/dist/analytics-sql.wasm");
    let grant = format!("sql={}", db.display());
    let input = sql_task("count", &["species"]);
    let mut args = vec![
        "skill",
        "call",
        component.to_str().unwrap(),
        "--grant",
        &grant,
        "--input",
        &input,
        "--json",
    ];
    args.extend(extra);
    json(&host(dir, &args, None))
}

#[test]
fn the_row_and_time_bounds_and_a_refused_statement_reach_the_skill() {
    let dir = tempfile::tempdir().unwrap();
    let view = |name: &str, body: &str| {
        let db = dir.path().join(name);
        create_database(
            &db,
            &format!(
                "CREATE VIEW penguins AS {body} SELECT 'species-' || i AS species, 'x' AS island, \
                 1.0 AS bill_length_mm, 1.0 AS bill_depth_mm, 1 AS flipper_length_mm, \
                 1 AS body_mass_g, NULL AS sex, 2007 AS year FROM n;"
            ),
        );
        db
    };

    // 1001 species: one row more than a query may return.
    let many = view(
        "many.db",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1001)",
    );
    let report = call_sql_skill(dir.path(), &many, &[]);
    assert_eq!(report["error"]["code"], "too-many-rows", "{report}");
    assert!(
        report["error"]["message"]
            .as_str()
            .unwrap()
            .contains("more than 1000 rows")
    );

    // A recursive view without an end: stopped at the call's deadline.
    let endless = view(
        "endless.db",
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n)",
    );
    let started = std::time::Instant::now();
    let report = call_sql_skill(dir.path(), &endless, &["--timeout-ms", "1500"]);
    assert_eq!(report["error"]["code"], "timeout", "{report}");
    assert!(
        report["error"]["message"]
            .as_str()
            .unwrap()
            .contains("did not finish within"),
        "{report}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));

    // A view that would load an extension: refused (by SQLite itself, which
    // allows `load_extension` in no view; the authorizer refuses it in a
    // statement).
    let db = dir.path().join("extension.db");
    create_database(
        &db,
        "CREATE VIEW penguins AS SELECT load_extension('libevil') AS species, 'x' AS island, \
         NULL AS sex, 2007 AS year;",
    );
    let report = call_sql_skill(dir.path(), &db, &[]);
    assert_eq!(report["error"]["code"], "not-allowed", "{report}");
    assert!(
        report["error"]["message"]
            .as_str()
            .unwrap()
            .contains("load_extension"),
        "{report}"
    );

    // The real database answers, unchanged by the calls.
    let report = call_sql_skill(dir.path(), &example().join("data/penguins.db"), &[]);
    let counts: Vec<(String, String, u64)> = figures(&report["output"]);
    assert_eq!(
        counts,
        [
            (
                "penguins (species=Adelie)".to_string(),
                "152".to_string(),
                152
            ),
            (
                "penguins (species=Chinstrap)".to_string(),
                "68".to_string(),
                68
            ),
            (
                "penguins (species=Gentoo)".to_string(),
                "124".to_string(),
                124
            ),
        ]
    );
}

#[test]
fn a_killed_run_resumes_to_the_same_answer() {
    let dir = tempfile::tempdir().unwrap();
    // Inside the database map, after the reviewer's first round, and before
    // the answer's commit.
    killed_and_resumed_match(
        dir.path(),
        &["run", "analytics", "--input", QUESTION],
        &[
            "map-item:query_database:0",
            "after-commit:review",
            "before-commit:summarize",
        ],
    );
}

#[test]
fn a_replay_answers_sql_from_the_journal_after_the_database_changed() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = example_copy(dir.path(), |text| text);
    let question = r#"{"question": "How many penguins per species?", "min_support": 1}"#;
    let out = host(
        dir.path(),
        &[
            "run",
            scenario.to_str().unwrap(),
            "--input",
            question,
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let run = json(&out);
    let id = run["run_id"].as_str().unwrap().to_string();
    let counted = figures(&run["state"]["accepted"][0]);
    assert_eq!(
        counted[0],
        ("penguins (species=Adelie)".into(), "152".into(), 152)
    );

    // The database now holds other penguins: a new run sees them, the
    // replay does not read the file at all.
    let db = scenario.parent().unwrap().join("data/penguins.db");
    std::fs::remove_file(&db).unwrap();
    create_database(
        &db,
        "CREATE TABLE penguins (id INTEGER PRIMARY KEY, species TEXT, island TEXT, \
         bill_length_mm REAL, bill_depth_mm REAL, flipper_length_mm INTEGER, body_mass_g INTEGER, \
         sex TEXT, year INTEGER); INSERT INTO penguins (species, island, year) VALUES ('Emperor', 'Ross', 2020);",
    );
    let out = host(dir.path(), &["replay", &id, "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let report = json(&out);
    assert_eq!(report["diverged_at"], Value::Null, "{report}");
    let served: u64 = report["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["node"] == "query_database")
        .map(|s| s["calls_served"].as_u64().unwrap())
        .sum();
    assert_eq!(served, 1, "{report}");

    let out = host(
        dir.path(),
        &[
            "run",
            scenario.to_str().unwrap(),
            "--input",
            question,
            "--json",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let counted = figures(&json(&out)["state"]["accepted"][0]);
    assert_eq!(
        counted,
        [("penguins (species=Emperor)".into(), "1".into(), 1)]
    );
}

#[test]
fn the_committed_data_is_what_the_build_script_makes() {
    let installed = Command::new("python3")
        .args(["-c", "import palmerpenguins"])
        .output()
        .is_ok_and(|o| o.status.success());
    // A test never skips: without the package the check cannot be made.
    assert!(
        installed,
        "the palmerpenguins package is not installed: python3 -m pip install \
         palmerpenguins==0.1.6 (.ci/run installs it)"
    );
    let dir = tempfile::tempdir().unwrap();
    let out: Output = Command::new("python3")
        .arg(example().join("data/build.py"))
        .args(["--out", dir.path().to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    for file in ["graph/graph.json", "docs/about.txt", "docs/studies.txt"] {
        assert_eq!(
            std::fs::read(dir.path().join(file)).unwrap(),
            std::fs::read(example().join("data").join(file)).unwrap(),
            "{file} differs from a rebuild"
        );
    }
    let all = "SELECT * FROM penguins ORDER BY id";
    let rebuilt = rows(&dir.path().join("penguins.db"), all);
    assert_eq!(rebuilt.len(), 344);
    assert_eq!(rebuilt, rows(&example().join("data/penguins.db"), all));
    let schema = "SELECT sql FROM sqlite_master ORDER BY name";
    assert_eq!(
        rows(&dir.path().join("penguins.db"), schema),
        rows(&example().join("data/penguins.db"), schema)
    );
}

/// `examples/analytics/llm.toml` is `scenario.toml` with exactly the
/// planner, its `llm` grant and the name changed, so the two never drift.
#[test]
fn the_llm_variant_is_the_scenario_with_only_the_planner_changed() {
    skillhost_tests::assert_variant_of_scenario(
        "analytics",
        "llm.toml",
        &[
            ("name = \"analytics\"\n", "name = \"analytics-llm\"\n"),
            ("analytics-plan.wasm", "analytics-plan-llm.wasm"),
            (
                "input = { question = \"input.question\" }\n",
                "capabilities = { llm = { provider = \"local\", model = \"qwen2.5:7b-instruct\", \
                 max_tokens = 1024, temperature = 0 } }\ninput = { question = \"input.question\" }\n",
            ),
        ],
    );
}

/// Runs `examples/analytics/llm.toml` on the example's question with the
/// `local` provider pointing at `server`, writing `answer.md` in `dir`.
fn run_with_model(dir: &Path, server: &FakeLlmServer) -> Output {
    server.configure_user(dir);
    let answer = dir.join("answer.md");
    host_in_repo(
        dir,
        &[
            "run",
            "examples/analytics/llm.toml",
            "--input",
            QUESTION,
            "--out",
            answer.to_str().unwrap(),
            "--json",
        ],
        None,
    )
}

#[test]
fn with_a_model_planning_the_same_sub_tasks_the_answer_is_the_same() {
    // The rule-based planner's plan for the example's question, as a model
    // would answer it.
    let plan = json!({ "tasks": [
        { "source": "sql", "topic": "mean body_mass_g by species, sex", "measure": "body_mass_g",
          "group_by": ["species", "sex"], "year": null },
        { "source": "graph", "topic": "islands each species lives on", "relation": "lives-on", "terms": [] },
        { "source": "documents", "topic": "what the documents say: collected", "terms": ["collected"] },
        { "source": "documents", "topic": "what the documents say: license, cc-0", "terms": ["license", "cc-0"] },
    ]});
    let server = FakeLlmServer::start_with(move |request| {
        request.last_message_after("Question:\n")?;
        Some(FakeReply::openai_content(&plan.to_string()))
    });
    let dir = tempfile::tempdir().unwrap();
    let out = run_with_model(dir.path(), &server);
    assert!(out.status.success(), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["usage"]["calls"], 1, "one completion: the plan");
    assert_eq!(server.request_count(), 1);

    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    let answer = rules.join("answer.md");
    let out = host_in_repo(
        &rules,
        &[
            "run",
            "analytics",
            "--input",
            QUESTION,
            "--out",
            answer.to_str().unwrap(),
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        std::fs::read(dir.path().join("answer.md")).unwrap() == std::fs::read(&answer).unwrap(),
        "the answers of the two planners differ"
    );
}

#[test]
fn a_model_that_invents_a_column_is_refused_before_any_query() {
    let server = FakeLlmServer::start_with(|_| {
        let plan = json!({ "tasks": [
            { "source": "sql", "topic": "wingspan", "measure": "wingspan_cm", "group_by": ["species"] },
        ]});
        Some(FakeReply::openai_content(&plan.to_string()))
    });
    let dir = tempfile::tempdir().unwrap();
    let out = run_with_model(dir.path(), &server);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let failure = &json(&out)["failure"];
    assert_eq!(failure["node"], "plan", "{failure}");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.contains("measure `wingspan_cm` is not a column of the table"),
        "{message}"
    );
    // Retried once (the skill's policy), then failed: no query ran.
    assert_eq!(server.request_count(), 2);
    assert!(
        json(&out)["state"]["results"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}
