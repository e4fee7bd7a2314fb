//! The scenario loader and static checker against real components: the
//! fixtures in `tests/scenarios/`, the shipped `echo` skill, and the
//! `adversary` test component (which imports `fs`).
//!
//! One test per class of checker error, each asserting the diagnostic's
//! code, line and node; the valid fixtures load, and every valid scenario
//! (fixtures and examples) fits `schemas/scenario.schema.json`.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};
use skillhost_runtime::{Capability, Runtime};
use skillhost_scenario::checks::schema::CompiledSchema;
use skillhost_scenario::{
    CheckReport, Diagnostic, FieldType, LoadedScenario, NodeBody, NodeKind, PostCheck, Reducer,
    Route, codes,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scenarios")
}

/// The fixtures copied next to a `components/` directory holding the skills
/// they reference, shared by every test of this file.
fn workspace() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        skillhost_tests::copy_dir(&fixtures(), dir.path());
        let components = dir.path().join("components");
        std::fs::create_dir_all(&components).unwrap();
        let echo = skillhost_tests::dist("echo");
        assert!(
            echo.is_file(),
            "{} is missing: build the shipped skills first",
            echo.display()
        );
        std::fs::copy(&echo, components.join("echo.wasm")).unwrap();
        std::fs::write(
            components.join("reader.wasm"),
            skillhost_tests::fixture_component("adversary"),
        )
        .unwrap();
        for fixture in ["kv-probe", "wasi-probe"] {
            std::fs::write(
                components.join(format!("{fixture}.wasm")),
                skillhost_tests::fixture_component(fixture),
            )
            .unwrap();
        }
        dir
    })
    .path()
}

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<(Runtime, tempfile::TempDir)> = OnceLock::new();
    &RUNTIME
        .get_or_init(|| {
            let cache = tempfile::tempdir().unwrap();
            (skillhost_tests::runtime(cache.path()), cache)
        })
        .0
}

fn load(relative: &str) -> Result<LoadedScenario, CheckReport> {
    skillhost_scenario::load(&workspace().join(relative), runtime())
}

fn load_ok(relative: &str) -> LoadedScenario {
    load(relative).unwrap_or_else(|report| panic!("{relative} does not load:\n{report}"))
}

/// Loads `invalid/<name>.toml` and asserts its first error.
fn expect_error(name: &str, code: &str, line: usize, node: Option<&str>) -> CheckReport {
    let relative = format!("invalid/{name}.toml");
    let report = match load(&relative) {
        Ok(_) => panic!("{relative} loaded, but it should fail with `{code}`"),
        Err(report) => report,
    };
    let first = report
        .errors
        .first()
        .unwrap_or_else(|| panic!("{relative}: an error report without errors"));
    assert_eq!(
        (first.code, first.line, first.node.as_deref()),
        (code, line, node),
        "{relative}: unexpected first error in:\n{report}"
    );
    assert!(
        first.file.ends_with(&relative),
        "diagnostics name the file: {}",
        first.file.display()
    );
    let shown = first.to_string();
    assert!(
        shown.contains(&format!("{relative}:{line}: ")),
        "`path:line:` in `{shown}`"
    );
    if let Some(node) = node {
        assert!(shown.contains(&format!("node `{node}`: ")), "{shown}");
    }
    report
}

/// Each diagnostic as (code, line, node), to compare whole lists.
fn found(diagnostics: &[Diagnostic]) -> Vec<(&'static str, usize, Option<&str>)> {
    diagnostics
        .iter()
        .map(|d| (d.code, d.line, d.node.as_deref()))
        .collect()
}

/// Asserts the report has exactly one error.
fn only_one(report: &CheckReport) {
    assert_eq!(report.errors.len(), 1, "expected one error:\n{report}");
}

// ---- one test per class of error -------------------------------------------

#[test]
fn toml_syntax_errors_have_a_line() {
    let report = expect_error("toml_syntax", codes::TOML, 13, None);
    only_one(&report);
    // The broken line is the node's `id`: the table is named by its header.
    assert!(
        report.errors[0]
            .message
            .starts_with("the [[node]] table starting at line 12: "),
        "{report}"
    );
}

#[test]
fn toml_syntax_errors_in_a_node_name_it() {
    // The node's `id` comes after the broken line.
    let report = expect_error("toml_in_node", codes::TOML, 10, Some("say"));
    only_one(&report);
}

#[test]
fn toml_errors_in_edges_rules_and_skills_name_the_table() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.toml");
    let head = "[scenario]\nname = \"s\"\n\n[[node]]\nid = \"a\"\nkind = \"end\"\n\n";
    for (table, expected) in [
        (
            "[[edge]]\nfrom = \"a\"\nto = \"b\" junk\n",
            (10, "[[edge]] from `a`: "),
        ),
        (
            "[[rule]]\nwhen = \"true\"\ncode = \"c\"\nseverity = \"bogus\"\nmessage = \"m\"\n",
            (11, "[[rule]] `c`: "),
        ),
        (
            "[skills.echo]\ncomponent = \"echo.wasm\"\ncomponent = \"again.wasm\"\n",
            (10, "[skills.echo]: "),
        ),
    ] {
        let report = skillhost_scenario::parse_str(&format!("{head}{table}"), &path).unwrap_err();
        only_one(&report);
        let d = &report.errors[0];
        assert_eq!(
            (d.code, d.line, d.node.as_deref()),
            (codes::TOML, expected.0, None)
        );
        assert!(d.message.starts_with(expected.1), "{report}");
    }
}

#[test]
fn unknown_keys_are_toml_errors_naming_the_node() {
    let report = expect_error("toml_unknown_key", codes::TOML, 11, Some("say"));
    assert!(report.errors[0].message.contains("timout_ms"), "{report}");
}

#[test]
fn duplicate_node_ids() {
    only_one(&expect_error(
        "duplicate_node",
        codes::DUPLICATE_NODE,
        12,
        Some("say"),
    ));
}

#[test]
fn edges_to_unknown_nodes() {
    let report = expect_error("unknown_node", codes::UNKNOWN_NODE, 18, Some("say"));
    assert!(report.errors[0].message.contains("`finish`"), "{report}");
}

#[test]
fn unknown_skill_aliases() {
    let report = expect_error("unknown_skill", codes::UNKNOWN_SKILL, 9, Some("say"));
    assert!(report.errors[0].message.contains("`echo2`"), "{report}");
    assert!(
        report.errors[0].message.contains("`echo`"),
        "lists the declared ones"
    );
}

#[test]
fn unknown_capabilities() {
    let report = expect_error(
        "unknown_capability",
        codes::UNKNOWN_CAPABILITY,
        11,
        Some("say"),
    );
    only_one(&report);
    assert!(report.errors[0].message.contains("`gpu`"), "{report}");
}

#[test]
fn grants_that_cannot_be_given() {
    let report = expect_error("bad_grant", codes::BAD_GRANT, 11, Some("say"));
    assert!(report.errors[0].message.contains("no-such-dir"), "{report}");
}

#[test]
fn missing_skill_components() {
    let report = expect_error("skill_load", codes::SKILL_LOAD, 5, None);
    only_one(&report);
    assert!(
        report.errors[0].message.contains("missing.wasm"),
        "{report}"
    );
}

#[test]
fn unreachable_nodes() {
    only_one(&expect_error(
        "unreachable",
        codes::UNREACHABLE,
        12,
        Some("orphan"),
    ));
}

#[test]
fn nodes_that_cannot_reach_an_end() {
    let report = expect_error("no_end", codes::NO_END, 14, Some("spin"));
    let nodes: Vec<_> = report.errors.iter().map(|d| d.node.as_deref()).collect();
    assert_eq!(nodes, [Some("spin"), Some("spin_more")], "{report}");
}

#[test]
fn cycles_without_a_bound() {
    let report = expect_error("unbounded_cycle", codes::UNBOUNDED_CYCLE, 10, Some("step"));
    only_one(&report);
    assert!(
        report.errors[0].message.contains("`step`, `again`"),
        "{report}"
    );
}

#[test]
fn branches_without_else() {
    only_one(&expect_error(
        "missing_else",
        codes::MISSING_ELSE,
        16,
        Some("say"),
    ));
}

#[test]
fn malformed_edges() {
    only_one(&expect_error(
        "invalid_edge",
        codes::INVALID_EDGE,
        16,
        Some("say"),
    ));
}

#[test]
fn more_than_one_edge_from_a_node() {
    only_one(&expect_error(
        "multiple_edges",
        codes::MULTIPLE_EDGES,
        20,
        Some("say"),
    ));
}

#[test]
fn end_nodes_with_outgoing_edges() {
    only_one(&expect_error(
        "terminal_has_edge",
        codes::TERMINAL_HAS_EDGE,
        20,
        Some("done"),
    ));
}

#[test]
fn nodes_without_an_outgoing_edge() {
    only_one(&expect_error(
        "missing_edge",
        codes::MISSING_EDGE,
        7,
        Some("say"),
    ));
}

#[test]
fn cel_syntax_errors() {
    let report = expect_error("cel_syntax", codes::CEL_SYNTAX, 10, Some("say"));
    only_one(&report);
    assert!(report.errors[0].message.contains("`'hi' +`"), "{report}");
}

#[test]
fn variables_not_available_where_used() {
    let report = expect_error("unknown_variable", codes::UNKNOWN_VARIABLE, 10, Some("say"));
    only_one(&report);
    assert!(report.errors[0].message.contains("`output`"), "{report}");
}

#[test]
fn undeclared_state_fields() {
    let report = expect_error("undeclared_state", codes::UNDECLARED_STATE, 13, Some("say"));
    only_one(&report);
    assert!(
        report.errors[0].message.contains("`state.sumary`"),
        "{report}"
    );
}

#[test]
fn undeclared_input_fields() {
    let report = expect_error("undeclared_input", codes::UNDECLARED_INPUT, 13, Some("say"));
    only_one(&report);
    assert!(
        report.errors[0].message.contains("`input.qeury`"),
        "{report}"
    );
}

#[test]
fn undeclared_config_keys() {
    let report = expect_error(
        "undeclared_config",
        codes::UNDECLARED_CONFIG,
        13,
        Some("say"),
    );
    only_one(&report);
    assert!(
        report.errors[0].message.contains("`config.greting`"),
        "{report}"
    );
}

#[test]
fn writes_into_the_errors_field() {
    only_one(&expect_error(
        "reserved_state",
        codes::RESERVED_STATE,
        11,
        Some("say"),
    ));
}

#[test]
fn input_mappings_missing_a_required_field() {
    let report = expect_error(
        "input_missing_field",
        codes::INPUT_MISSING_FIELD,
        7,
        Some("say"),
    );
    only_one(&report);
    assert!(report.errors[0].message.contains("`repeat`"), "{report}");
}

#[test]
fn input_mappings_with_unknown_fields() {
    let report = expect_error(
        "input_unknown_field",
        codes::INPUT_UNKNOWN_FIELD,
        10,
        Some("say"),
    );
    only_one(&report);
    assert!(report.errors[0].message.contains("`times`"), "{report}");
}

#[test]
fn imports_the_node_does_not_grant() {
    let report = expect_error(
        "capability_not_granted",
        codes::CAPABILITY_NOT_GRANTED,
        7,
        Some("read"),
    );
    only_one(&report);
    assert!(report.errors[0].message.contains("`fs`"), "{report}");
}

#[test]
fn skill_nodes_without_a_skill() {
    only_one(&expect_error(
        "missing_skill",
        codes::MISSING_SKILL,
        7,
        Some("say"),
    ));
}

#[test]
fn map_nodes_without_over() {
    only_one(&expect_error(
        "missing_over",
        codes::MISSING_OVER,
        7,
        Some("each"),
    ));
}

#[test]
fn reducers_that_do_not_fit_the_field() {
    let report = expect_error("reducer_type", codes::REDUCER_TYPE, 14, Some("say"));
    only_one(&report);
    assert!(report.errors[0].message.contains("`append`"), "{report}");
}

#[test]
fn inputs_that_do_not_fit_the_skills_wit_type() {
    let report = expect_error("input_type", codes::INPUT_TYPE, 13, Some("say"));
    only_one(&report);
    assert!(
        report.errors[0].message.starts_with(
            "input `repeat`: `'3'` gives \"3\", which skill `echo` cannot take as u32"
        ),
        "{report}"
    );
}

#[test]
fn writes_that_do_not_fit_the_declared_type() {
    let report = expect_error("write_type", codes::WRITE_TYPE, 14, Some("say"));
    only_one(&report);
    assert!(
        report.errors[0]
            .message
            .contains("`output.length` is an int, but state `echoed` is declared string"),
        "{report}"
    );
}

#[test]
fn fields_the_skills_output_does_not_have() {
    let report = expect_error("unknown_field", codes::UNKNOWN_FIELD, 14, Some("say"));
    only_one(&report);
    assert!(
        report.errors[0]
            .message
            .contains("`output` has no field `nosuch` (its fields: `message`, `length`)"),
        "{report}"
    );
}

#[test]
fn conditions_that_are_not_bools() {
    let report = expect_error("guard_type", codes::GUARD_TYPE, 22, Some("say"));
    only_one(&report);
    assert!(
        report.errors[0]
            .message
            .starts_with("branches[0]: `size(state.echoed)` is an int"),
        "{report}"
    );
}

#[test]
fn map_nodes_over_something_that_is_not_a_list() {
    let report = expect_error("over_type", codes::OVER_TYPE, 14, Some("say"));
    only_one(&report);
}

#[test]
fn operators_given_values_they_do_not_take() {
    let report = expect_error("operator_type", codes::OPERATOR_TYPE, 13, Some("say"));
    only_one(&report);
    assert!(
        report.errors[0]
            .message
            .contains("`+` on a string and an int fails"),
        "{report}"
    );
}

#[test]
fn defaults_of_the_wrong_type() {
    only_one(&expect_error(
        "type_mismatch",
        codes::TYPE_MISMATCH,
        5,
        None,
    ));
}

#[test]
fn fields_that_mean_nothing_on_the_kind() {
    only_one(&expect_error(
        "field_not_allowed",
        codes::FIELD_NOT_ALLOWED,
        15,
        Some("done"),
    ));
}

#[test]
fn out_of_range_values() {
    only_one(&expect_error(
        "invalid_value",
        codes::INVALID_VALUE,
        11,
        Some("say"),
    ));
}

#[test]
fn cache_ttls_that_are_no_duration_or_zero_and_a_cache_on_a_map_node() {
    let report = expect_error("bad_cache", codes::INVALID_VALUE, 15, Some("say"));
    assert_eq!(
        found(&report.errors),
        [
            (codes::INVALID_VALUE, 15, Some("say")),
            (codes::INVALID_VALUE, 21, Some("again")),
            (codes::FIELD_NOT_ALLOWED, 29, Some("fan")),
        ],
        "{report}"
    );
    let messages: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    assert!(
        messages[0].contains("`cache.ttl`: `an hour` is not a duration"),
        "{}",
        messages[0]
    );
    assert!(
        messages[1].contains("`cache.ttl` is zero"),
        "{}",
        messages[1]
    );
    assert!(
        messages[2].contains("`cache` has no meaning on a map node (only on: skill)"),
        "{}",
        messages[2]
    );
}

#[test]
fn invalid_extra_schemas() {
    let report = expect_error("bad_constraints", codes::INVALID_VALUE, 11, Some("say"));
    only_one(&report);
    let shown = report.errors[0].to_string();
    assert!(
        shown.contains("input_schema") && shown.contains("minLength"),
        "{shown}"
    );
}

#[test]
fn artifact_names_that_are_not_plain_file_names() {
    let report = expect_error("bad_artifact", codes::INVALID_VALUE, 11, Some("say"));
    only_one(&report);
    assert!(
        report.errors[0].to_string().contains("../escape.md"),
        "{report}"
    );
}

#[test]
fn artifact_encodings_other_than_utf8_and_base64() {
    let report = expect_error(
        "bad_artifact_encoding",
        codes::INVALID_VALUE,
        11,
        Some("say"),
    );
    only_one(&report);
    let shown = report.errors[0].to_string();
    assert!(
        shown.contains("encoding `hex`") && shown.contains("`base64`"),
        "{shown}"
    );
}

#[test]
fn artifact_media_types_that_are_not_media_types() {
    let report = expect_error("bad_media_type", codes::INVALID_VALUE, 12, Some("say"));
    assert_eq!(
        found(&report.errors),
        [
            (codes::INVALID_VALUE, 12, Some("say")),
            (codes::INVALID_VALUE, 13, Some("say")),
            (codes::INVALID_VALUE, 14, Some("say")),
            (codes::INVALID_VALUE, 15, Some("say")),
            (codes::INVALID_VALUE, 16, Some("say")),
        ],
        "{report}"
    );
    let messages: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
    for (message, artifact, why) in [
        (&messages[0], "a.md", "holds `\\\"`"),
        (&messages[1], "b.html", "control character \\u{d}"),
        (&messages[2], "c.txt", "must not be empty"),
        (&messages[3], "d.txt", "is not TYPE/SUBTYPE"),
        (&messages[4], "e.txt", "not NAME=VALUE"),
    ] {
        assert!(
            message.contains(&format!(
                "artifact `{artifact}`: media_type is not a media type"
            )) && message.contains(why)
                && message.contains("e.g. `text/markdown`"),
            "{message}"
        );
        // Shown escaped: no raw line break in a diagnostic.
        assert!(!message.contains(['\r', '\n']), "{message}");
    }
}

#[test]
fn llm_grants_of_providers_the_host_does_not_define() {
    let report = expect_error(
        "llm_provider_not_configured",
        codes::LLM_PROVIDER_NOT_CONFIGURED,
        11,
        Some("say"),
    );
    only_one(&report);
    let message = &report.errors[0].message;
    assert!(
        message.contains("provider `local` is not configured"),
        "{message}"
    );
    assert!(message.contains("[llm.providers.local]"), "{message}");
}

#[test]
fn bad_llm_grants() {
    let report = expect_error("bad_llm_grant", codes::BAD_GRANT, 11, Some("say"));
    only_one(&report);
    assert!(
        report.errors[0]
            .message
            .contains("`temperature` must be a number from 0 to 2"),
        "{report}"
    );
}

#[test]
fn a_token_budget_of_nothing() {
    let report = expect_error("zero_token_budget", codes::INVALID_VALUE, 3, None);
    only_one(&report);
    assert!(
        report.errors[0].message.contains("token_budget"),
        "{report}"
    );
}

/// A runtime whose host configuration is `config`, with `$LLM_TEST_KEY`
/// set when `key` is.
fn runtime_configured(config: &str, key: bool) -> (Runtime, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("skillhost.toml");
    std::fs::write(&file, config).unwrap();
    let env = |name: &str| match name {
        "LLM_TEST_KEY" if key => Some("sk-test".to_string()),
        _ => None,
    };
    let host = skillhost_runtime::HostConfig::load_with(dir.path(), &env).expect("config");
    let runtime = skillhost_tests::runtime_with_backends(
        &dir.path().join("cache"),
        skillhost_runtime::Backends {
            llm: host.llm,
            ..skillhost_runtime::Backends::default()
        },
    );
    (runtime, dir)
}

#[test]
fn llm_grants_load_with_the_providers_configured_and_their_keys_set() {
    let config = "[llm.providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\n\
                  [llm.providers.claude]\nkind = \"anthropic\"\napi_key_env = \"LLM_TEST_KEY\"\n";
    let path = workspace().join("valid/llm.toml");
    let (runtime, _dir) = runtime_configured(config, true);
    let loaded = skillhost_scenario::load(&path, &runtime)
        .unwrap_or_else(|report| panic!("valid/llm.toml does not load:\n{report}"));
    assert_eq!(loaded.scenario.token_budget, Some(20000));
    let grant = loaded
        .scenario
        .node("second")
        .unwrap()
        .call()
        .unwrap()
        .grants
        .llm
        .clone();
    assert_eq!(grant.unwrap().max_tokens, Some(512));

    // The key's variable unset: the check says which one, and where.
    let (runtime, unset) = runtime_configured(config, false);
    let report = skillhost_scenario::load(&path, &runtime).unwrap_err();
    assert_eq!(
        found(&report.errors),
        [(codes::LLM_API_KEY_MISSING, 32, Some("second"))],
        "{report}"
    );
    let message = &report.errors[0].message;
    assert!(message.contains("$LLM_TEST_KEY"), "{message}");
    let file = unset.path().join("skillhost.toml");
    assert!(
        message.contains(&format!("[llm.providers.claude] in {}", file.display())),
        "{message}"
    );

    // Only `claude` configured: `local` is named, with the file that was read.
    let (runtime, dir) =
        runtime_configured("[llm.providers.claude]\nkind = \"anthropic\"\n", false);
    let report = skillhost_scenario::load(&path, &runtime).unwrap_err();
    assert_eq!(
        found(&report.errors),
        [(codes::LLM_PROVIDER_NOT_CONFIGURED, 25, Some("first"))],
        "{report}"
    );
    let message = &report.errors[0].message;
    let file = dir.path().join("skillhost.toml");
    assert!(
        message.contains(&format!(
            "the host configuration is {}, and it defines `claude`",
            file.display()
        )),
        "{message}"
    );
}

#[test]
fn scenarios_without_nodes() {
    only_one(&expect_error("no_nodes", codes::NO_NODES, 1, None));
}

#[test]
fn unreadable_files() {
    let report = load("invalid/does_not_exist.toml").err().unwrap();
    only_one(&report);
    assert_eq!(report.errors[0].code, codes::IO);
    assert_eq!(report.errors[0].line, 0);
}

#[test]
fn every_problem_is_reported_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("many.toml");
    std::fs::write(
        &path,
        r#"
[scenario]
name = "many"

[[node]]
id = "a"
kind = "gate"
writes = [{ field = "nope", from = "input.x" }]

[[node]]
id = "b"
kind = "gate"
"#,
    )
    .unwrap();
    let report = skillhost_scenario::parse_file(&path).unwrap_err();
    let codes: Vec<_> = report.errors.iter().map(|d| d.code).collect();
    assert_eq!(
        codes,
        [
            codes::MISSING_EDGE,
            codes::UNDECLARED_INPUT,
            codes::UNDECLARED_STATE,
            codes::MISSING_EDGE,
        ],
        "{report}"
    );
}

/// An expression that does not compile hides nothing: the other guards of
/// its edge, and the field of its write, are still checked.
#[test]
fn cel_syntax_errors_hide_no_other_error() {
    let report = load("invalid/cel_syntax_hides_nothing.toml").unwrap_err();
    assert_eq!(
        found(&report.errors),
        [
            (codes::CEL_SYNTAX, 16, Some("say")),
            (codes::UNDECLARED_STATE, 16, Some("say")),
            (codes::CEL_SYNTAX, 30, Some("say")),
            (codes::UNDECLARED_STATE, 31, Some("say")),
        ],
        "{report}"
    );
    assert!(report.errors[1].message.contains("`lenght`"), "{report}");
    assert!(
        report.errors[3].message.contains("`state.cuont`"),
        "{report}"
    );
    assert!(report.warnings.is_empty(), "{report}");
}

/// An edge to an unknown node hides nothing: the cycle its valid targets
/// make, and its guards, are still checked.
#[test]
fn unknown_edge_targets_hide_no_other_error() {
    let report = load("invalid/unknown_node_hides_nothing.toml").unwrap_err();
    assert_eq!(
        found(&report.errors),
        [
            (codes::UNBOUNDED_CYCLE, 10, Some("step")),
            (codes::UNKNOWN_NODE, 30, Some("again")),
            (codes::UNDECLARED_STATE, 30, Some("again")),
        ],
        "{report}"
    );
    assert!(report.errors[1].message.contains("`finish`"), "{report}");
    assert!(report.errors[2].message.contains("`state.m`"), "{report}");
}

// ---- warnings ------------------------------------------------------------------

#[test]
fn unwritten_state_and_unused_skills_are_warnings() {
    let loaded = load_ok("valid/warnings.toml");
    assert_eq!(
        found(&loaded.warnings),
        [
            (codes::UNWRITTEN_STATE, 6, None),
            (codes::UNUSED_SKILL, 12, None)
        ]
    );
}

#[test]
fn a_cache_on_a_skill_that_imports_wasi_or_may_call_kv_is_a_warning() {
    let loaded = load_ok("valid/cached.toml");
    assert_eq!(
        found(&loaded.warnings),
        [
            (codes::CACHE_LIMITED, 27, Some("draw")),
            (codes::CACHE_LIMITED, 34, Some("read")),
        ]
    );
    assert!(
        loaded.warnings[0].message.contains("imports WASI"),
        "{:?}",
        loaded.warnings
    );
    assert!(
        loaded.warnings[1]
            .message
            .contains("may call kv: a call that does is never cached"),
        "{:?}",
        loaded.warnings
    );
    let ttl = |id: &str| match &loaded.scenario.node(id).unwrap().body {
        NodeBody::Skill(call) => call.cache.map(|c| c.ttl_ms),
        _ => None,
    };
    assert_eq!(ttl("say"), Some(3_600_000));
    assert_eq!(ttl("draw"), Some(1_800_000));
    assert_eq!(ttl("read"), Some(7 * 86_400_000));
}

// ---- valid scenarios -------------------------------------------------------------

#[test]
fn the_echo_scenario_loads() {
    let loaded = load_ok("valid/echo.toml");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let s = &*loaded.scenario;
    assert_eq!(s.name, "echo-twice");
    assert_eq!(s.start, "say");
    assert_eq!(s.on_failure.as_deref(), Some("failed"));
    assert_eq!(s.digest.len(), 64);
    assert!(s.path.is_absolute() && s.dir.is_absolute());
    assert_eq!(loaded.skills["echo"].name, "echo");
    assert_eq!(
        s.skills["echo"].component,
        skillhost_scenario::ComponentSource::File(workspace().join("components/echo.wasm"))
    );

    let say = s.node("say").unwrap();
    assert_eq!(say.kind(), NodeKind::Skill);
    assert_eq!(say.line, 24);
    let NodeBody::Skill(call) = &say.body else {
        panic!("{:?}", say.body)
    };
    assert_eq!(
        call.input
            .iter()
            .map(|(f, e)| (f.as_str(), e.source.as_str()))
            .collect::<Vec<_>>(),
        [
            ("message", "input.message + config.suffix"),
            ("repeat", "input.repeat")
        ]
    );
    assert_eq!(say.writes()[1].reducer, Reducer::Append);
    assert_eq!(call.retry.unwrap().max_attempts, 2);
    assert_eq!(call.timeout_ms, Some(1000));
    assert_eq!(say.config["suffix"], json!("!"));
    assert!(matches!(&say.route, Route::Next(next) if next == "check"));
    match &s.node("check").unwrap().route {
        Route::Branches {
            branches,
            otherwise,
        } => {
            assert_eq!(branches[0].0.source, "size(state.echoed) > 0");
            assert_eq!(branches[0].1, "done");
            assert_eq!(otherwise, "failed");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.rules[0].code, "too-many-echoes");

    assert_eq!(
        s.initial_state(),
        json!({"echoed": "", "lengths": [], "errors": []})
    );
    let mut input = json!({"message": "hi"});
    s.apply_input_defaults(&mut input);
    assert_eq!(input, json!({"message": "hi", "repeat": 2}));
    let schema = CompiledSchema::compile(&s.input_schema).unwrap();
    schema.validate(&input).unwrap();
    let err = schema
        .validate(&json!({"message": "", "extra": 1}))
        .unwrap_err();
    assert_eq!(err.violations.len(), 2, "{err}");
}

#[test]
fn the_map_and_loop_scenario_loads() {
    let loaded = load_ok("valid/map_loop.toml");
    assert!(loaded.warnings.is_empty(), "{:?}", loaded.warnings);
    let s = &*loaded.scenario;
    assert_eq!(s.start, "prepare");
    let read_all = s.node("read_all").unwrap();
    assert_eq!(read_all.kind(), NodeKind::Map);
    let NodeBody::Map(map) = &read_all.body else {
        panic!("{:?}", read_all.body)
    };
    assert_eq!(
        (map.over.source.as_str(), map.concurrency),
        ("state.items", 2)
    );
    // fs grants are made absolute against the scenario's directory.
    let data = workspace().join("valid/data");
    assert_eq!(map.call.capabilities["fs"], data.to_string_lossy());
    assert!(map.call.grants.is_granted(Capability::Fs));
    assert_eq!(
        map.call.grants.fs.as_ref().unwrap().root,
        data.canonicalize().unwrap()
    );
    // The skill's config defaults are under the scenario's [config].
    assert_eq!(read_all.config["label"], json!("reader"));
    assert_eq!(read_all.config["rounds"], json!(2));
    assert!(matches!(map.call.post[1], PostCheck::Citations(ref c) if c.min_per_claim == 1));
    assert_eq!(s.node("again").unwrap().max_visits(), Some(3));
    assert_eq!(s.state_field("last").unwrap().ty, FieldType::Object);
    assert_eq!(
        s.input_schema["properties"]["words"]["items"],
        json!({"type": "string"})
    );
}

#[test]
fn graphs_export_to_mermaid_and_dot() {
    let loaded = load_ok("valid/map_loop.toml");
    let mermaid = skillhost_scenario::to_mermaid(&loaded.scenario);
    assert!(mermaid.starts_with("flowchart TD\n"));
    assert!(
        mermaid.contains("    read_all[[\"read_all<br/>map: reader\"]]\n"),
        "{mermaid}"
    );
    assert!(
        mermaid.contains("    again -->|\"state.rounds #lt; config.rounds\"| read_all\n"),
        "{mermaid}"
    );
    assert!(mermaid.contains("    again -->|else| done\n"), "{mermaid}");
    let dot = skillhost_scenario::to_dot(&loaded.scenario);
    assert!(
        dot.contains("\"read_all\" [label=\"read_all\\nmap: reader\", shape=box3d];"),
        "{dot}"
    );
    assert!(
        dot.contains("\"again\" -> \"done\" [label=\"else\"];"),
        "{dot}"
    );
}

#[test]
fn names_resolve_to_files() {
    let path = workspace().join("valid/echo.toml");
    assert_eq!(
        skillhost_scenario::resolve(path.to_str().unwrap()).unwrap(),
        path
    );
    let err = skillhost_scenario::resolve("no-such-scenario").unwrap_err();
    assert!(
        err.contains("examples/no-such-scenario/scenario.toml"),
        "{err}"
    );
    assert!(err.contains("no-such-scenario.toml"), "{err}");
}

// ---- the published schema ---------------------------------------------------------

fn scenario_schema() -> CompiledSchema {
    let path = skillhost_tests::repo_root().join("schemas/scenario.schema.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    CompiledSchema::compile(&schema).unwrap()
}

/// Every valid scenario in the repository: the fixtures and the examples.
fn valid_scenarios() -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = std::fs::read_dir(fixtures().join("valid"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    if let Ok(examples) = std::fs::read_dir(skillhost_tests::repo_root().join("examples")) {
        for example in examples {
            let path = example.unwrap().path().join("scenario.toml");
            if path.is_file() {
                all.push(path);
            }
        }
    }
    all.sort();
    all
}

#[test]
fn valid_scenarios_parse_and_fit_the_published_schema() {
    let schema = scenario_schema();
    let all = valid_scenarios();
    assert!(all.len() >= 3, "{all:?}");
    for path in all {
        if let Err(report) = skillhost_scenario::parse_file(&path) {
            panic!("{} does not parse:\n{report}", path.display());
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let value: Value = toml::from_str(&text).unwrap();
        if let Err(violations) = schema.validate(&value) {
            panic!("{} does not fit the schema: {violations}", path.display());
        }
    }
}

#[test]
fn the_published_schema_refuses_what_the_loader_refuses() {
    let schema = scenario_schema();
    for name in ["toml_unknown_key", "invalid_edge", "no_nodes"] {
        let text =
            std::fs::read_to_string(fixtures().join(format!("invalid/{name}.toml"))).unwrap();
        let value: Value = toml::from_str(&text).unwrap();
        assert!(!schema.is_valid(&value), "{name} fits the schema");
    }
}

/// The object in `value` under the key `capabilities` that has
/// `properties`: the grants of a skill or map node.
fn capabilities_table(value: &mut Value) -> Option<&mut Value> {
    match value {
        Value::Object(object) => {
            if object
                .get("capabilities")
                .is_some_and(|c| c.get("properties").is_some())
            {
                return object.get_mut("capabilities");
            }
            object.values_mut().find_map(capabilities_table)
        }
        Value::Array(items) => items.iter_mut().find_map(capabilities_table),
        _ => None,
    }
}

/// The schema's `capabilities` table is each capability's own statement of
/// its grant (`Capability::grant_schema`), in the list's order: a capability
/// added to the host is in the published schema, or this fails. With
/// `SKILLHOST_WRITE_SCHEMA=1` it writes the table into the file instead.
#[test]
fn the_published_schema_grants_what_each_capability_declares() {
    let path = skillhost_tests::repo_root().join("schemas/scenario.schema.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut schema: Value = serde_json::from_str(&text).unwrap();
    let table = capabilities_table(&mut schema).expect("the schema's capabilities table");
    let declared = Capability::grants_schema();
    let published = table["properties"].as_object().unwrap();
    let same = published.keys().eq(declared.keys())
        && published.iter().zip(&declared).all(|(a, b)| a == b);
    if same {
        return;
    }
    if std::env::var_os("SKILLHOST_WRITE_SCHEMA").is_some() {
        table["properties"] = Value::Object(declared);
        let mut text = serde_json::to_string_pretty(&schema).unwrap();
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        return;
    }
    panic!(
        "{}: the capabilities table is not what the capabilities declare (their \
         `grant_schema` in host/runtime/src/capabilities/); run this test with \
         SKILLHOST_WRITE_SCHEMA=1 to write it.\npublished: {}\ndeclared: {}",
        path.display(),
        serde_json::to_string_pretty(published).unwrap(),
        serde_json::to_string_pretty(&declared).unwrap()
    );
}

/// Resolves every registry reference to the shipped `echo`, recording what
/// it was asked.
struct ToEcho(std::sync::Mutex<Vec<(String, String, Vec<PathBuf>)>>);

impl skillhost_scenario::ComponentResolver for ToEcho {
    fn resolve(
        &self,
        scenario: &skillhost_scenario::Scenario,
        alias: &str,
        reference: &str,
    ) -> Result<PathBuf, String> {
        self.0.lock().unwrap().push((
            alias.to_string(),
            reference.to_string(),
            scenario.trust_keys.clone(),
        ));
        Ok(workspace().join("components/echo.wasm"))
    }
}

#[test]
fn registry_components_are_resolved_by_the_caller() {
    let path = workspace().join("valid/registry.toml");
    let (scenario, _) = skillhost_scenario::parse_file(&path).unwrap();
    assert_eq!(
        scenario.skills["echo"].component,
        skillhost_scenario::ComponentSource::Registry(
            "oci://127.0.0.1:5000/skills/echo:0.1.0".into()
        )
    );
    let key = workspace().join("keys/publisher.pub");
    assert_eq!(scenario.trust_keys, vec![key.clone()]);

    let resolver = ToEcho(Default::default());
    let loaded = skillhost_scenario::load_with(&path, runtime(), &resolver).unwrap();
    assert_eq!(loaded.skills["echo"].name, "echo");
    assert_eq!(
        resolver.0.lock().unwrap().as_slice(),
        &[(
            "echo".to_string(),
            "oci://127.0.0.1:5000/skills/echo:0.1.0".to_string(),
            vec![key]
        )]
    );

    // Without a resolver, the reference is a load error naming the skill.
    let report = skillhost_scenario::load(&path, runtime()).unwrap_err();
    let text = report.to_string();
    assert!(
        text.contains("skill `echo` is a registry component"),
        "{text}"
    );
    assert_eq!(report.errors[0].code, codes::SKILL_LOAD);
}

// ---- the queue: flow control and schedules ---------------------------------

/// A scenario with one pass-through node, `[scenario]` extra keys and
/// `[[schedule]]` tables appended.
fn queued_scenario(header: &str, tables: &str) -> String {
    format!(
        "[scenario]\nname = \"q\"\n{header}\n\
         [input]\ncustomer = {{ type = \"string\" }}\nsize = {{ type = \"integer\", default = 1 }}\n\n\
         [[node]]\nid = \"done\"\nkind = \"end\"\n\n{tables}"
    )
}

fn parse_queued(header: &str, tables: &str) -> Result<skillhost_scenario::Scenario, CheckReport> {
    let path = fixtures().join("valid/queued.toml");
    skillhost_scenario::parse_str(&queued_scenario(header, tables), &path).map(|(s, _)| s)
}

#[test]
fn flow_control_keys_are_read_and_the_key_is_evaluated_over_the_input() {
    let scenario = parse_queued(
        "priority = -3\nconcurrency = 2\nconcurrency_key = \"input.customer\"",
        "",
    )
    .unwrap();
    assert_eq!(scenario.queue.priority, -3);
    assert_eq!(scenario.queue.concurrency, Some(2));
    let key = |input: Value| scenario.queue.key_for(&input).unwrap();
    assert_eq!(key(json!({"customer": "acme"})), Some("acme".into()));
    // Not a string: its canonical JSON, so equal values make equal keys.
    let scenario = parse_queued("concurrency_key = \"{'b': input.size, 'a': 1}\"", "").unwrap();
    assert_eq!(
        scenario.queue.key_for(&json!({"size": 5})).unwrap(),
        Some(r#"{"a":1,"b":5}"#.into())
    );
    // Without the keys: priority 0, no limit, no key.
    let plain = parse_queued("", "").unwrap();
    assert_eq!(plain.queue.priority, 0);
    assert_eq!(plain.queue.concurrency, None);
    assert_eq!(
        plain.queue.key_for(&json!({"customer": "x"})).unwrap(),
        None
    );
}

#[test]
fn zero_or_negative_concurrency_is_refused_with_what_to_write() {
    for bad in ["0", "-1"] {
        let report = parse_queued(&format!("concurrency = {bad}"), "").unwrap_err();
        only_one(&report);
        let d = &report.errors[0];
        assert_eq!((d.code, d.line), (codes::INVALID_VALUE, 3), "{report}");
        assert!(
            d.message
                .contains(&format!("`[scenario] concurrency` is {bad}"))
                && d.message.contains("from 1"),
            "{report}"
        );
    }
}

#[test]
fn a_concurrency_key_that_does_not_compile_or_reads_state_is_refused() {
    let report = parse_queued("concurrency_key = \"input.customer +\"", "").unwrap_err();
    only_one(&report);
    let d = &report.errors[0];
    assert_eq!((d.code, d.line), (codes::CEL_SYNTAX, 3), "{report}");
    assert!(
        d.message.contains("`[scenario] concurrency_key`"),
        "{report}"
    );

    let report = parse_queued("concurrency_key = \"state.x\"", "").unwrap_err();
    let d = &report.errors[0];
    assert_eq!(d.code, codes::UNKNOWN_VARIABLE, "{report}");
    assert!(d.message.contains("available: input"), "{report}");

    let report = parse_queued("concurrency_key = \"input.nope\"", "").unwrap_err();
    assert_eq!(report.errors[0].code, codes::UNDECLARED_INPUT, "{report}");
}

#[test]
fn schedules_are_read_with_their_names_and_due_ticks() {
    let scenario = parse_queued(
        "",
        "[[schedule]]\ncron = \"*/10 * * * *\"\ninput = { customer = \"acme\" }\n\n\
         [[schedule]]\nname = \"hourly\"\ncron = \"0 * * * *\"\ninput = { customer = \"b\", size = 2 }\n",
    )
    .unwrap();
    let names: Vec<&str> = scenario.schedules.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["1", "hourly"]);
    let every_ten = &scenario.schedules[0];
    assert_eq!(every_ten.input, json!({"customer": "acme"}));
    // 2026-01-01T00:00:00Z.
    let t0: i64 = 1_767_225_600_000;
    const TEN: i64 = 600_000;
    assert_eq!(every_ten.next_after(t0), Some(t0 + TEN));
    assert_eq!(every_ten.next_after(t0 + 1), Some(t0 + TEN));
    // Due: strictly after the last, up to and including now, newest `limit`.
    let due = every_ten.due_ticks(t0, t0 + 3 * TEN + TEN / 2, 10);
    assert_eq!(due.ticks, [t0 + TEN, t0 + 2 * TEN, t0 + 3 * TEN]);
    assert_eq!(due.skipped_newest, None);
    let due = every_ten.due_ticks(t0, t0 + 6 * TEN, 2);
    assert_eq!(due.ticks, [t0 + 5 * TEN, t0 + 6 * TEN]);
    assert_eq!(due.skipped_newest, Some(t0 + 4 * TEN));
    assert!(every_ten.due_ticks(t0, t0 + TEN - 1, 10).ticks.is_empty());
    // A long gap costs `limit` steps, not one per missed tick.
    let year = 365 * 86_400_000;
    let due = every_ten.due_ticks(t0, t0 + year, 3);
    assert_eq!(due.ticks.len(), 3);
    assert_eq!(due.ticks[2], t0 + year);
    let hourly = &scenario.schedules[1];
    assert_eq!(hourly.next_after(t0), Some(t0 + 3_600_000));
}

/// A schedule that can never fire, or that would fire more often than once
/// a minute, is refused by the checker, naming the schedule, its line and
/// when it fires; a rare date, a leap day or one tick a minute is not.
#[test]
fn a_cron_that_never_fires_or_fires_within_a_minute_is_refused() {
    let schedule = |cron: &str| {
        format!(
            "[[schedule]]\nname = \"nightly\"\ncron = \"{cron}\"\ninput = {{ customer = \"a\" }}\n"
        )
    };
    for never in [
        "0 0 31 2 *",
        "0 0 30 2 *",
        "0 0 31 4,6,9,11 *",
        "0 0 0 30 2 *",
        "* * 31 2 *",
    ] {
        let report = parse_queued("", &schedule(never)).unwrap_err();
        only_one(&report);
        let d = &report.errors[0];
        assert_eq!(
            (d.code, d.line),
            (codes::CRON_NEVER_FIRES, 14),
            "{never}: {report}"
        );
        assert!(
            d.message.starts_with(&format!(
                "[[schedule]] `nightly`: cron `{never}` never fires"
            )),
            "{report}"
        );
    }
    for (often, gap) in [
        ("* * * * * *", "1s"),
        ("*/10 * * * * *", "10s"),
        ("0,30 * * * * *", "30s"),
        ("0,59 0 * * * *", "59s"),
        ("0,1 * 3 * * *", "1s"),
        ("0,20,25 * * * * *", "20s"),
        ("1-2 0 12 29 2 *", "1s"),
    ] {
        let report = parse_queued("", &schedule(often)).unwrap_err();
        only_one(&report);
        let d = &report.errors[0];
        assert_eq!(
            (d.code, d.line),
            (codes::CRON_TOO_FREQUENT, 14),
            "{often}: {report}"
        );
        assert!(
            d.message.starts_with(&format!(
                "[[schedule]] `nightly`: cron `{often}` fires {gap} after a tick (at "
            )),
            "{report}"
        );
        assert!(d.message.contains("at most once every 1m"), "{report}");
        assert!(
            d.message.contains("SKILLHOST_MIN_SCHEDULE_INTERVAL"),
            "{report}"
        );
    }
    for fine in [
        "* * * * *",
        "30 * * * * *",
        "0 0 29 2 *",
        "0 0 1 1 *",
        "@yearly",
        "0 12 * * MON-FRI",
        "59 59 23 31 12 *",
    ] {
        let scenario =
            parse_queued("", &schedule(fine)).unwrap_or_else(|report| panic!("{fine}: {report}"));
        assert_eq!(scenario.schedules[0].cron, fine);
    }
}

#[test]
fn a_cron_that_does_not_parse_names_the_schedule_and_what_is_wrong() {
    for bad in ["61 * * * *", "* * *", "every hour", "* * * * * * 2030"] {
        let report = parse_queued(
            "",
            &format!("[[schedule]]\nname = \"nightly\"\ncron = \"{bad}\"\n"),
        )
        .unwrap_err();
        only_one(&report);
        let d = &report.errors[0];
        assert_eq!((d.code, d.line), (codes::BAD_CRON, 14), "{bad}: {report}");
        assert!(
            d.message.starts_with(&format!(
                "[[schedule]] `nightly`: cron `{bad}` does not parse: "
            )),
            "{report}"
        );
        assert!(d.message.contains("0 * * * *"), "{report}");
        assert!(d.to_string().contains("valid/queued.toml:14: "), "{d}");
    }
}

#[test]
fn a_schedule_input_must_fit_the_scenarios_input_and_names_are_unique() {
    let report = parse_queued(
        "",
        "[[schedule]]\ncron = \"0 * * * *\"\ninput = { size = 2 }\n",
    )
    .unwrap_err();
    only_one(&report);
    let d = &report.errors[0];
    assert_eq!((d.code, d.line), (codes::SCHEDULE_INPUT, 12), "{report}");
    assert!(d.message.contains("[[schedule]] `1`"), "{report}");
    assert!(d.message.contains("customer"), "{report}");

    let report = parse_queued(
        "",
        "[[schedule]]\nname = \"a\"\ncron = \"0 * * * *\"\ninput = { customer = \"x\" }\n\n\
         [[schedule]]\nname = \"a\"\ncron = \"5 * * * *\"\ninput = { customer = \"y\" }\n",
    )
    .unwrap_err();
    only_one(&report);
    assert!(
        report.errors[0]
            .message
            .contains("another schedule has this name")
    );

    // A key the table does not have (a time zone: schedules are UTC).
    let report = parse_queued(
        "",
        "[[schedule]]\ncron = \"0 * * * *\"\ntimezone = \"Europe/Paris\"\n",
    )
    .unwrap_err();
    assert_eq!(report.errors[0].code, codes::TOML, "{report}");
}

// ---- citation checks: the quote rule ---------------------------------------

/// A scenario whose skill node `cite` has one citation check, `post`.
fn cited(post: &str) -> Result<skillhost_scenario::Scenario, CheckReport> {
    let text = format!(
        "[scenario]\nname = \"cited\"\n\n\
         [skills.reader]\ncomponent = \"../components/reader.wasm\"\n\n\
         [[node]]\nid = \"cite\"\nskill = \"reader\"\ninput = {{ text = \"'x'\" }}\n\
         post = [{post}]\n\n\
         [[node]]\nid = \"done\"\nkind = \"end\"\n\n\
         [[edge]]\nfrom = \"cite\"\nto = \"done\"\n"
    );
    let path = workspace().join("valid/cited.toml");
    skillhost_scenario::parse_str(&text, &path).map(|(s, _)| s)
}

/// A citation check's quotes are held to `min_quote_chars` and
/// `min_quote_words` (15 and 3 when left out); each must be a whole number
/// from 1, and only a check with `quote` may set them.
#[test]
fn a_citation_checks_quote_rule_is_read_and_refused_when_it_means_nothing() {
    const BASE: &str = "kind = \"citations\", claims = \"output.claims\", cites = \"cites\", \
                        sources = \"[]\", quote = \"q\", source_text = \"text\"";
    let rule = |post: &str| {
        let scenario = cited(post).unwrap_or_else(|report| panic!("{post}: {report}"));
        match &scenario.node("cite").unwrap().body {
            NodeBody::Skill(call) => match &call.post[0] {
                PostCheck::Citations(spec) => {
                    (spec.quote_rule.min_chars, spec.quote_rule.min_words)
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(rule(&format!("{{ {BASE} }}")), (15, 3));
    assert_eq!(
        rule(&format!(
            "{{ {BASE}, min_quote_chars = 40, min_quote_words = 6 }}"
        )),
        (40, 6)
    );
    assert_eq!(rule(&format!("{{ {BASE}, min_quote_words = 1 }}")), (15, 1));

    for (bad, says) in [
        (
            "min_quote_chars = 0",
            "`min_quote_chars` is 0; a quote must be at least",
        ),
        (
            "min_quote_words = -2",
            "`min_quote_words` is -2; a quote must be at least",
        ),
    ] {
        let report = cited(&format!("{{ {BASE}, {bad} }}")).unwrap_err();
        only_one(&report);
        let d = &report.errors[0];
        assert_eq!(
            (d.code, d.line, d.node.as_deref()),
            (codes::INVALID_VALUE, 11, Some("cite"))
        );
        assert!(d.message.contains(says), "{report}");
    }
    let report = cited(
        "{ kind = \"citations\", claims = \"output.claims\", cites = \"cites\", sources = \"[]\", \
         min_quote_words = 5 }",
    )
    .unwrap_err();
    only_one(&report);
    let d = &report.errors[0];
    assert_eq!(
        (d.code, d.node.as_deref()),
        (codes::FIELD_NOT_ALLOWED, Some("cite"))
    );
    assert!(
        d.message.contains(
            "`min_quote_words` applies to quotes, and this citations check has no `quote` field"
        ),
        "{report}"
    );
}
