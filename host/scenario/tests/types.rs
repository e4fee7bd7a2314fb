//! The checker's static type flow against real components: the shipped
//! `echo` skill (input `{message: string, repeat: u32}`, output
//! `{message: string, length: u32}`) and `kitchen-sink` (every kind of WIT
//! type), and every shipped scenario, which must still check clean.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use skillhost_runtime::Runtime;
use skillhost_scenario::{CheckReport, Diagnostic, LoadedScenario, codes};

/// A directory holding the components the scenarios below name.
fn components() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        for name in ["echo", "kitchen-sink"] {
            let wasm = skillhost_tests::dist(name);
            assert!(
                wasm.is_file(),
                "{} is missing: build the shipped skills first",
                wasm.display()
            );
            std::fs::copy(&wasm, dir.path().join(format!("{name}.wasm"))).unwrap();
        }
        dir
    })
    .path()
}

fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| skillhost_tests::runtime(skillhost_tests::shared_component_cache()))
}

/// `body` (nodes, edges, rules) after a header declaring both skills.
fn scenario(declarations: &str, body: &str) -> String {
    let dir = components().display();
    format!(
        r#"[scenario]
name = "types"

{declarations}

[skills.echo]
component = "{dir}/echo.wasm"

[skills.sink]
component = "{dir}/kitchen-sink.wasm"

{body}
"#
    )
}

fn load(text: &str) -> Result<LoadedScenario, CheckReport> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("types.toml");
    std::fs::write(&path, text).unwrap();
    skillhost_scenario::load(&path, runtime())
}

/// The errors of a scenario that must not load, without the unused-skill
/// and unwritten-state warnings these small scenarios have.
fn errors(text: &str) -> Vec<Diagnostic> {
    match load(text) {
        Ok(_) => panic!("loaded, but it should not:\n{text}"),
        Err(report) => report.errors,
    }
}

fn assert_loads(text: &str) {
    if let Err(report) = load(text) {
        panic!("does not load:\n{report}\n\n{text}");
    }
}

fn codes_of(errors: &[Diagnostic]) -> Vec<(&'static str, usize, Option<&str>)> {
    errors
        .iter()
        .map(|d| (d.code, d.line, d.node.as_deref()))
        .collect()
}

const ECHO_DECLARATIONS: &str = r#"[input]
message = { type = "string" }
count = { type = "integer", default = 2 }
ratio = { type = "number", default = 0.5 }
anything = { type = "any", default = 1 }
words = { type = "array", items = "string", default = [] }

[config]
times = 2
label = "x"

[state]
echoed = { type = "string" }
length = { type = "integer" }
mean = { type = "number" }
seen = { type = "array" }
meta = { type = "object" }
flag = { type = "boolean" }"#;

/// A skill node running echo with `input`, then `writes`, then the end.
fn echo_node(input: &str, writes: &str) -> String {
    scenario(
        ECHO_DECLARATIONS,
        &format!(
            r#"[[node]]
id = "say"
skill = "echo"
input = {{ {input} }}
writes = [{writes}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "say"
to = "done""#
        ),
    )
}

/// The three failures `host check` used to leave to the run: a string
/// mapped into a `u32`, an int written into a string field, and an output
/// field the skill does not have. Each names the node, the field, the
/// expression, both types and what to do.
#[test]
fn the_three_run_time_type_failures_are_found_by_the_checker() {
    let text = echo_node(
        r#"message = "input.message", repeat = "'3'""#,
        r#"
  { field = "echoed", from = "output.length" },
  { field = "meta", from = "output.nosuch", reducer = "merge" },
"#,
    );
    let errors = errors(&text);
    // Lines: `input` is on 32, the writes on 34 and 35.
    assert_eq!(
        codes_of(&errors),
        [
            (codes::INPUT_TYPE, 32, Some("say")),
            (codes::WRITE_TYPE, 34, Some("say")),
            (codes::UNKNOWN_FIELD, 35, Some("say")),
        ],
        "{errors:#?}"
    );
    assert_eq!(
        errors[0].message,
        "input `repeat`: `'3'` gives \"3\", which skill `echo` cannot take as u32: expected \
         an integer (u32), found string \"3\"; give an integer: drop the quotes, or convert with `int(…)`"
    );
    assert_eq!(
        errors[1].message,
        "writes[0]: `output.length` is an int, but state `echoed` is declared string; convert \
         it with `string(…)`, or declare `echoed` with the type it holds"
    );
    assert_eq!(
        errors[2].message,
        "writes[1]: `output.nosuch`: `output` has no field `nosuch` (its fields: `message`, \
         `length`); use one of those"
    );
    let shown = errors[0].to_string();
    assert!(shown.contains(":32: node `say`: input `repeat`"), "{shown}");

    // The fixed scenario loads.
    assert_loads(&echo_node(
        r#"message = "input.message", repeat = "3""#,
        r#"{ field = "echoed", from = "string(output.length)" }, { field = "length", from = "output.length" }"#,
    ));
}

/// An `int` constant fits a `u32` when it is in range (checked by the bridge
/// itself, as at run time); an `int` expression fits (its range is the run's
/// to check); a `double` does not, nor does a string or a bool.
#[test]
fn numbers_flow_into_wit_integers_as_the_bridge_takes_them() {
    for ok in [
        "3",
        "0",
        "3.0",
        "input.count",
        "config.times",
        "input.count * 2 + 1",
        "int(input.ratio * 10.0)",
        "size(input.words)",
        "input.anything",
        "state.meta.n",
        "input.ratio",
    ] {
        assert_loads(&echo_node(
            &format!(r#"message = "input.message", repeat = "{ok}""#),
            "",
        ));
    }
    for (bad, says) in [
        ("-1", "cannot take as u32"),
        ("3.5", "cannot take as u32"),
        ("4294967296", "cannot take as u32"),
        (
            "double(input.count) * 2.0",
            "is a double, but skill `echo` takes u32 there",
        ),
        ("double(input.count)", "is a double"),
        ("input.message", "is a string"),
        ("input.count > 1", "is a bool"),
        ("input.words", "is a list(string)"),
    ] {
        let errors = errors(&echo_node(
            &format!(r#"message = "input.message", repeat = "{bad}""#),
            "",
        ));
        assert_eq!(
            codes_of(&errors),
            [(codes::INPUT_TYPE, 32, Some("say"))],
            "{bad}"
        );
        assert!(
            errors[0].message.contains(says),
            "{bad}: {}",
            errors[0].message
        );
        assert!(
            errors[0].message.contains("input `repeat`"),
            "{}",
            errors[0].message
        );
    }
}

/// Writes fit the declared type of their field; `append` takes anything,
/// `merge` a map; `any` and `dyn` are accepted.
#[test]
fn writes_fit_the_declared_state_types() {
    for ok in [
        r#"{ field = "echoed", from = "output.message" }"#,
        r#"{ field = "length", from = "output.length" }"#,
        r#"{ field = "mean", from = "output.length" }"#,
        r#"{ field = "mean", from = "input.ratio" }"#,
        r#"{ field = "seen", from = "output.length", reducer = "append" }"#,
        r#"{ field = "seen", from = "[output.message]" }"#,
        r#"{ field = "meta", from = "output" }"#,
        r#"{ field = "meta", from = "{'n': output.length}", reducer = "merge" }"#,
        r#"{ field = "flag", from = "output.length > 0" }"#,
        r#"{ field = "echoed", from = "input.anything" }"#,
        r#"{ field = "length", from = "state.meta.count" }"#,
    ] {
        assert_loads(&echo_node(r#"message = "input.message", repeat = "1""#, ok));
    }
    for (bad, says) in [
        (
            r#"{ field = "length", from = "double(input.count) / 2.0" }"#,
            "is a double, but state `length` is declared integer; convert it with `int(…)`",
        ),
        (
            r#"{ field = "echoed", from = "null" }"#,
            "is null, but state `echoed` is declared string",
        ),
        (
            r#"{ field = "seen", from = "output" }"#,
            "wrap it in a list",
        ),
        (
            r#"{ field = "flag", from = "output.message" }"#,
            "is a string, but state `flag` is declared boolean; compare it",
        ),
        (
            r#"{ field = "meta", from = "output.message", reducer = "merge" }"#,
            "reducer `merge` sets the keys of a map on `meta`",
        ),
    ] {
        let errors = errors(&echo_node(
            r#"message = "input.message", repeat = "1""#,
            bad,
        ));
        assert_eq!(
            codes_of(&errors),
            [(codes::WRITE_TYPE, 33, Some("say"))],
            "{bad}"
        );
        assert!(
            errors[0].message.contains(says),
            "{bad}: {}",
            errors[0].message
        );
    }
}

/// Conditions give bools, `over` gives a list, and operators get values
/// they take, in nodes, rules and the summary alike.
#[test]
fn guards_over_and_operators() {
    let text = scenario(
        ECHO_DECLARATIONS,
        r#"[[node]]
id = "each"
kind = "map"
skill = "echo"
over = "input.message"
input = { message = "item", repeat = "1" }
pre = [{ when = "size(input.message)" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "each"
branches = [{ when = "state.length", to = "done" }, { else = "done" }]

[[rule]]
when = "'yes'"
code = "r"
message = "m"

[summary]
label = "'n = ' + state.length"
"#,
    );
    let errors = errors(&text);
    assert_eq!(
        codes_of(&errors),
        [
            (codes::OVER_TYPE, 33, Some("each")),
            (codes::GUARD_TYPE, 35, Some("each")),
            (codes::GUARD_TYPE, 43, Some("each")),
            (codes::GUARD_TYPE, 46, None),
            (codes::OPERATOR_TYPE, 51, None),
        ],
        "{errors:#?}"
    );
    assert!(
        errors[1].message.starts_with(
            "pre[0]: `size(input.message)` is an int, but a condition must be true or false"
        ),
        "{}",
        errors[1].message
    );
    assert_eq!(
        errors[4].message,
        "summary `label`: `'n = ' + state.length`: `+` on a string and an int fails; convert \
         the other side with `string()`"
    );
}

/// A map node's `item` is an item of `over` and `index` an int; after the
/// calls, `output` is the list of outputs.
#[test]
fn map_nodes_type_item_index_and_their_outputs() {
    let map = |input: &str, writes: &str| {
        scenario(
            ECHO_DECLARATIONS,
            &format!(
                r#"[[node]]
id = "each"
kind = "map"
skill = "echo"
over = "input.words"
input = {{ {input} }}
writes = [{writes}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "each"
to = "done""#
            ),
        )
    };
    assert_loads(&map(
        r#"message = "item", repeat = "index""#,
        r#"{ field = "seen", from = "output.map(o, o.length)" }, { field = "length", from = "size(output)" }"#,
    ));
    // Over a list the checker cannot see into, `item` is dyn.
    assert_loads(&map(r#"message = "state.meta.x", repeat = "1""#, ""));

    let errors = errors(&map(
        r#"message = "index", repeat = "item""#,
        r#"{ field = "echoed", from = "output.message" }"#,
    ));
    assert_eq!(
        codes_of(&errors),
        [
            (codes::INPUT_TYPE, 34, Some("each")),
            (codes::INPUT_TYPE, 34, Some("each")),
            (codes::UNKNOWN_FIELD, 35, Some("each")),
        ],
        "{errors:#?}"
    );
    // The two input errors are on one line, in mapping order.
    let messages: Vec<&str> = errors.iter().map(|d| d.message.as_str()).collect();
    assert!(
        messages[0].contains("`index` is an int, but skill `echo` takes string"),
        "{messages:?}"
    );
    assert!(
        messages[1].contains("`item` is a string, but skill `echo` takes u32"),
        "{messages:?}"
    );
    assert!(
        messages[2].contains("`output.message`: `output` is a list"),
        "{messages:?}"
    );
}

/// Records, lists, options, variants, enums, flags and bytes, both as what a
/// skill takes and as what it gives.
#[test]
fn records_lists_options_and_variants() {
    // Every field of kitchen-sink's input, each from a value of its type.
    let fields = [
        ("a_bool", "true"),
        ("a_u8", "1"),
        ("a_u16", "1"),
        ("a_u32", "1"),
        ("a_u64", "1"),
        ("a_s8", "-1"),
        ("a_s16", "-1"),
        ("a_s32", "-1"),
        ("a_s64", "-1"),
        ("a_f32", "1.5"),
        ("a_f64", "1"),
        ("a_char", "'c'"),
        ("a_string", "input.message"),
        ("bytes", "b'abc'"),
        ("points", "[{'x': 1, 'y': 2}]"),
        ("maybe", "null"),
        ("maybe_maybe", "null"),
        ("outcome", "{'ok': 'fine'}"),
        ("unit_ok", "{'ok': null}"),
        ("shape", "{'circle': 1.0}"),
        ("other_shape", "'empty'"),
        ("color", "'red'"),
        ("permissions", "['read']"),
        ("pair", "['a', 1, true]"),
        (
            "nested",
            "{'label': input.message, 'at': {'x': 1, 'y': 2}, 'tags': input.words}",
        ),
        ("score", "input.ratio"),
    ];
    let sink = |replace: &[(&str, &str)], writes: &str| {
        let input: Vec<String> = fields
            .iter()
            .map(|(field, value)| {
                let value = replace
                    .iter()
                    .find(|(f, _)| f == field)
                    .map_or(*value, |(_, v)| *v);
                format!("{field} = \"{value}\"")
            })
            .collect();
        scenario(
            ECHO_DECLARATIONS,
            &format!(
                r#"[[node]]
id = "sink"
skill = "sink"
input = {{ {} }}
writes = [{writes}]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "sink"
to = "done""#,
                input.join(", ")
            ),
        )
    };
    assert_loads(&sink(&[], ""));
    assert_loads(&sink(
        &[
            ("maybe", "input.count"),
            ("points", "state.seen"),
            ("nested", "state.meta"),
        ],
        r#"
  { field = "mean", from = "output.a_f64 + output.score" },
  { field = "length", from = "output.maybe" },
  { field = "echoed", from = "output.bytes + output.color + output.nested.label" },
  { field = "seen", from = "output.permissions" },
  { field = "flag", from = "has(output.shape.circle) && output.points.all(p, p.x > 0)" },
  { field = "meta", from = "output.outcome" },
"#,
    ));

    for (replace, says) in [
        (
            ("maybe", "'3'"),
            "input `maybe`: `'3'` gives \"3\", which skill `sink` cannot take as option<u32>",
        ),
        (
            ("maybe", "input.message"),
            "input `maybe`: `input.message` is a string, but skill `sink` takes u32 there",
        ),
        (
            ("points", "[{'x': input.count}]"),
            "`[{'x': input.count}]` holds a map { x: int } at `$[*]`, but skill `sink` takes record { x: s32, y: s32 } there; give a map with exactly the record's fields",
        ),
        (
            ("points", "[{'x': 1, 'y': 2, 'z': input.count}]"),
            "holds a map { x: int, y: int, z: int } at `$[*]`",
        ),
        (
            (
                "nested",
                "{'label': input.count, 'at': {'x': 1, 'y': 2}, 'tags': []}",
            ),
            "holds an int at `$.label`, but skill `sink` takes string there",
        ),
        (("a_f32", "input.message"), "takes f32 there; give a number"),
        (
            ("color", "input.count"),
            "is an int, but skill `sink` takes enum { red, green, blue } there",
        ),
        (
            ("permissions", "input.message"),
            "takes flags { read, write, execute } there; give a list",
        ),
        (("shape", "input.count"), "give a map"),
        (("a_char", "input.words"), "give a string"),
    ] {
        let errors = errors(&sink(&[replace], ""));
        assert_eq!(
            codes_of(&errors),
            [(codes::INPUT_TYPE, 32, Some("sink"))],
            "{replace:?}: {errors:#?}"
        );
        assert!(
            errors[0].message.contains(says),
            "{replace:?}: {}",
            errors[0].message
        );
    }

    for (write, code, says) in [
        (
            r#"{ field = "length", from = "output.a_f64" }"#,
            codes::WRITE_TYPE,
            "`output.a_f64` is a double, but state `length` is declared integer",
        ),
        (
            r#"{ field = "mean", from = "output.shape.square" }"#,
            codes::UNKNOWN_FIELD,
            "`output.shape` has no case `square` (its cases: `circle`, `rectangle`, `polygon`, `empty`)",
        ),
        (
            r#"{ field = "mean", from = "output.nested.at.z" }"#,
            codes::UNKNOWN_FIELD,
            "`output.nested.at` has no field `z` (its fields: `x`, `y`)",
        ),
        (
            r#"{ field = "mean", from = "output.a_u32 * output.a_f64" }"#,
            codes::OPERATOR_TYPE,
            "`*` on an int and a double fails; CEL does not mix int, uint and double",
        ),
        (
            r#"{ field = "seen", from = "output.points.map(p, p.z)" }"#,
            codes::UNKNOWN_FIELD,
            "`p` has no field `z`",
        ),
    ] {
        let errors = errors(&sink(&[], write));
        assert_eq!(
            errors.iter().map(|d| d.code).collect::<Vec<_>>(),
            [code],
            "{write}: {errors:#?}"
        );
        assert!(
            errors[0].message.contains(says),
            "{write}: {}",
            errors[0].message
        );
    }
}

/// Without its skills (`parse_file`: drawing the graph, validating the
/// format), outputs are dyn, and what the declarations say is still checked.
#[test]
fn without_the_components_outputs_are_dyn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("types.toml");
    std::fs::write(
        &path,
        echo_node(
            r#"message = "input.message", repeat = "'3'""#,
            r#"{ field = "echoed", from = "output.nosuch" }, { field = "flag", from = "input.count" }"#,
        ),
    )
    .unwrap();
    let report = skillhost_scenario::parse_file(&path).unwrap_err();
    assert_eq!(
        codes_of(&report.errors),
        [(codes::WRITE_TYPE, 33, Some("say"))],
        "{report}"
    );
}

/// Every scenario the repository ships or runs in its tests still loads
/// against its real skills: no false positives.
#[test]
fn every_shipped_scenario_still_checks_clean() {
    let root = skillhost_tests::repo_root();
    let mut all: Vec<PathBuf> = vec![root.join("examples/research/scenario.toml")];
    let engine = root.join("host/engine/tests/engine/scenarios");
    for entry in std::fs::read_dir(&engine).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "toml") {
            all.push(path);
        }
    }
    assert!(all.len() >= 5, "{all:?}");
    for path in all {
        if let Err(report) = skillhost_scenario::load(&path, runtime()) {
            panic!("{} no longer checks clean:\n{report}", path.display());
        }
    }
}

/// An approval node: `body` is its keys after `id` and `kind`.
fn approval_node(body: &str) -> String {
    scenario(
        ECHO_DECLARATIONS,
        &format!(
            r#"[[node]]
id = "ask"
kind = "approval"
{body}

[[node]]
id = "done"
kind = "end"

[[node]]
id = "late"
kind = "end"

[[edge]]
from = "ask"
branches = [{{ when = "answer.ok", to = "done" }}, {{ else = "late" }}]"#
        ),
    )
}

/// The checker knows an approval's prompt is text, that its answer has the
/// declared fields with their types (in writes and in its edges' guards),
/// that `on_timeout` is a node and comes with `timeout_ms`, and that the
/// node has a prompt and an answer with at least one field.
#[test]
fn approval_nodes_are_checked_with_the_answer_typed() {
    let good = r#"prompt = "'go on with ' + input.message + '?'"
answer = { ok = { type = "boolean" }, note = { type = "string", default = "" } }
writes = [{ field = "flag", from = "answer.ok" }, { field = "echoed", from = "answer.note" }]
timeout_ms = 1000
on_timeout = "late""#;
    assert_loads(&approval_node(good));

    let cases: [(&str, &str, &str); 7] = [
        (
            r#"prompt = "size(input.message)"
answer = { ok = { type = "boolean" } }"#,
            codes::PROMPT_TYPE,
            "a prompt is text",
        ),
        (
            r#"prompt = "'p'"
answer = { ok = { type = "boolean" } }
writes = [{ field = "length", from = "answer.ok" }]"#,
            codes::WRITE_TYPE,
            "state `length` is declared integer",
        ),
        (
            r#"prompt = "'p'"
answer = { ok = { type = "boolean" } }
writes = [{ field = "flag", from = "answer.nosuch" }]"#,
            codes::UNKNOWN_FIELD,
            "nosuch",
        ),
        (
            r#"answer = { ok = { type = "boolean" } }"#,
            codes::MISSING_PROMPT,
            "needs `prompt`",
        ),
        (r#"prompt = "'p'""#, codes::MISSING_ANSWER, "needs `answer`"),
        (
            r#"prompt = "'p'"
answer = { ok = { type = "boolean" } }
timeout_ms = 1000
on_timeout = "nowhere""#,
            codes::UNKNOWN_NODE,
            "`nowhere`",
        ),
        (
            r#"prompt = "'p'"
answer = { ok = { type = "boolean" } }
timeout_ms = 1000"#,
            codes::INVALID_VALUE,
            "needs `on_timeout`",
        ),
    ];
    for (body, code, says) in cases {
        let errors = errors(&approval_node(body));
        let hit = errors
            .iter()
            .find(|d| d.code == code)
            .unwrap_or_else(|| panic!("no `{code}` for:\n{body}\nfound: {:?}", codes_of(&errors)));
        assert_eq!(hit.node.as_deref(), Some("ask"), "{hit}");
        assert!(hit.message.contains(says), "`{says}` in {hit}");
    }
}

/// An approval's `on_timeout` is drawn as a dashed edge.
#[test]
fn an_approval_and_its_timeout_are_drawn() {
    let text = approval_node(
        r#"prompt = "'p'"
answer = { ok = { type = "boolean" } }
timeout_ms = 1000
on_timeout = "late""#,
    );
    let loaded = load(&text).unwrap_or_else(|report| panic!("{report}"));
    let mermaid = skillhost_scenario::to_mermaid(&loaded.scenario);
    assert!(mermaid.contains(r#"ask[/"ask"#), "{mermaid}");
    assert!(mermaid.contains("ask -.->|timeout| late"), "{mermaid}");
    let dot = skillhost_scenario::to_dot(&loaded.scenario);
    assert!(
        dot.contains(r#""ask" -> "late" [label="timeout", style=dashed];"#),
        "{dot}"
    );
}

/// `[summary]`'s JSON Schema types each label as the checker infers its
/// expression, and the values a real run would produce fit it.
#[test]
fn summary_schema_types_each_label() {
    let text = scenario(
        ECHO_DECLARATIONS,
        r#"[[node]]
id = "say"
skill = "echo"
input = { message = "input.message", repeat = "1" }
writes = [{ field = "length", from = "output.length" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "say"
to = "done"

[summary]
text = "'n = ' + string(state.length)"
length = "state.length"
words = "input.words"
twice = "config.times * 2"
pair = "{'a': input.count, 'b': input.ratio > 0.1}"
anything = "input.anything"
"#,
    );
    let loaded = load(&text).unwrap_or_else(|report| panic!("{report}"));
    let schema = loaded.scenario.summary_schema();
    assert_eq!(
        schema,
        serde_json::json!({
            "type": "object",
            "properties": {
                "text": {"type": "string"},
                "length": {"type": "integer"},
                "words": {"type": "array", "items": {"type": "string"}},
                "twice": {"type": "integer"},
                "pair": {
                    "type": "object",
                    "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
                    "additionalProperties": false,
                },
                "anything": {},
            },
            "required": ["text", "length", "words", "twice", "pair", "anything"],
            "additionalProperties": false,
        })
    );
    let fits = serde_json::json!({
        "text": "n = 5", "length": 5, "words": ["a"], "twice": 4,
        "pair": {"a": 2, "b": true}, "anything": [1, {"x": null}],
    });
    let compiled = skillhost_scenario::checks::schema::CompiledSchema::compile(&schema).unwrap();
    assert!(compiled.validate(&fits).is_ok());
    let misfit = serde_json::json!({
        "text": "n = 5", "length": "5", "words": ["a"], "twice": 4,
        "pair": {"a": 2, "b": true}, "anything": null,
    });
    assert!(compiled.validate(&misfit).is_err());
}
