//! Skills in every supported language, through the real `host` binary:
//! `skills/echo-c`, `echo-zig`, `echo-js` and `echo-py`, and the async
//! (WASI 0.3) `echo-js-async` and `echo-py-async`, are built from source
//! with `host skill build` (the toolchains of
//! `scripts/install-guest-toolchains.sh`), then called with the same inputs
//! as the shipped Rust `echo`, and must answer exactly as it does: output,
//! error code and message, log lines, exit code, manifest; so must the
//! shipped Rust `echo-async`. A missing
//! toolchain fails the test with the command that installs it. Likewise
//! `skills/text-stats-py` against the Rust `text-stats`, through `fs`.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};
use skillhost_tests::cli::{host, stderr};

/// The echo skills of the other languages, by directory under `skills/`.
const ECHOES: [&str; 4] = ["echo-c", "echo-zig", "echo-js", "echo-py"];

/// The async (WASI 0.3) echo skills: the shipped Rust one, then those built
/// from `skills/`. A test of their own, so that the two Python builds run
/// side by side rather than one after the other.
const ASYNC_ECHOES: [&str; 3] = ["echo-async", "echo-js-async", "echo-py-async"];

/// Builds `skills/<name>` into `dir/<name>.wasm` and returns the file. The
/// toolchains' own caches (Zig's compiled wasi-libc and compiler-rt, 27 s
/// here) live in a build directory shared between runs.
fn build(dir: &Path, name: &str) -> String {
    let source = skillhost_tests::repo_root().join("skills").join(name);
    let out = dir.join(format!("{name}.wasm"));
    let result = host(
        dir,
        &[
            "skill",
            "build",
            &source.display().to_string(),
            "--out",
            &out.display().to_string(),
            "--target-dir",
            &Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join("polyglot-build")
                .join(name)
                .display()
                .to_string(),
            "--quiet",
        ],
        None,
    );
    assert!(
        result.status.success(),
        "building {name} failed (exit {:?}); install its toolchain as the error says \
         (scripts/install-guest-toolchains.sh installs them all):\n{}",
        result.status.code(),
        stderr(&result)
    );
    out.display().to_string()
}

/// `host skill call --json` of `component` with `input`: the exit code and
/// the report, with the skill's name replaced by `echo` so that the skills
/// of every language compare equal.
fn call(dir: &Path, component: &str, input: &Value) -> (Option<i32>, Value) {
    let input = input.to_string();
    let out: Output = host(
        dir,
        &["skill", "call", component, "--input", &input, "--json"],
        None,
    );
    if out.stdout.is_empty() {
        // Input that does not fit is refused before the call: one line.
        return (out.status.code(), json!({ "stderr": stderr(&out) }));
    }
    let report: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
    let name = report["skill"].as_str().unwrap_or_default().to_string();
    let text = report.to_string().replace(&format!("`{name}`"), "`echo`");
    let mut report: Value = serde_json::from_str(&text).unwrap();
    let object = report.as_object_mut().unwrap();
    // What differs by language and by run, not by behaviour.
    for key in ["skill", "fuel_consumed", "memory_peak_bytes", "duration_us"] {
        object.remove(key);
    }
    if let Some(error) = object.get_mut("error").and_then(Value::as_object_mut) {
        error.remove("skill");
    }
    (out.status.code(), report)
}

#[test]
fn the_echo_skill_of_every_language_behaves_exactly_like_the_rust_one() {
    behave_like_the_rust_echo(&ECHOES);
}

#[test]
fn the_async_echo_skills_behave_exactly_like_the_rust_one() {
    behave_like_the_rust_echo(&ASYNC_ECHOES);
}

/// Each of `names` (`echo-async` the shipped component, the others built
/// from `skills/`) answers every input exactly as the shipped Rust `echo`
/// does, with the same manifest, and says which ABI it uses.
fn behave_like_the_rust_echo(names: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let rust = skillhost_tests::dist("echo").display().to_string();
    let inputs = [
        json!({ "message": "héllo ", "repeat": 3 }),
        json!({ "message": "😀a", "repeat": 2 }),
        json!({ "message": "abc", "repeat": 0 }),
        json!({ "message": "", "repeat": 7 }),
        json!({ "message": "0123456789", "repeat": 200_000 }),
        json!({ "message": "x", "repeat": 4_294_967_295_u32 }),
        json!({ "message": "no repeat" }),
    ];
    let expected: Vec<_> = inputs.iter().map(|i| call(dir.path(), &rust, i)).collect();
    // The cases above cover success, the skill's error and refused input.
    assert_eq!(expected[0].0, Some(0));
    assert_eq!(
        expected[0].1["output"],
        json!({"message": "héllo héllo héllo ", "length": 18})
    );
    assert_eq!(expected[4].0, Some(1));
    assert_eq!(expected[4].1["error"]["code"], "invalid-input");
    assert_eq!(expected[6].0, Some(2));

    let manifest = |component: &str| {
        let out = host(dir.path(), &["skill", "inspect", component, "--json"], None);
        assert!(out.status.success(), "{}", stderr(&out));
        let value: Value = serde_json::from_slice(&out.stdout).unwrap();
        let abi = if value["name"].as_str().unwrap().ends_with("-async") {
            "async"
        } else {
            "sync"
        };
        assert_eq!(value["abi"], abi, "{component}");
        (
            value["capabilities"].clone(),
            value["retry"].clone(),
            value["estimated_duration_ms"].clone(),
            value["input_schema"].clone(),
            value["output_schema"].clone(),
        )
    };
    let rust_manifest = manifest(&rust);
    let shipped_async = skillhost_tests::dist("echo-async").display().to_string();
    for &name in names {
        let component = match name {
            "echo-async" => shipped_async.clone(),
            name => build(dir.path(), name),
        };
        assert_eq!(manifest(&component), rust_manifest, "{name}'s manifest");
        for (input, want) in inputs.iter().zip(&expected) {
            let got = call(dir.path(), &component, input);
            assert_eq!(&got, want, "{name} with input {input}");
        }
    }
}

/// `skills/text-stats-py`, a skill that reads files through `fs`, built from
/// source: its unit tests pass under `python3 -m unittest`, its component
/// imports no contract interface but `log` and `fs`, and it answers exactly
/// as the Rust `text-stats` does, errors included.
#[test]
fn text_stats_in_python_answers_exactly_like_the_rust_one() {
    let dir = tempfile::tempdir().unwrap();
    let source = skillhost_tests::repo_root().join("skills/text-stats-py");
    let unittest = std::process::Command::new("python3")
        .args(["-m", "unittest"])
        .current_dir(&source)
        // No bytecode left in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("python3 (apt-get install -y python3)");
    assert!(
        unittest.status.success(),
        "{}",
        String::from_utf8_lossy(&unittest.stderr)
    );

    let corpus = dir.path().join("corpus");
    std::fs::create_dir_all(corpus.join("sub")).unwrap();
    std::fs::write(corpus.join("poem.txt"), "one two\ntwo three three\n").unwrap();
    std::fs::write(
        corpus.join("prose.txt"),
        "The cat sat.\r\nThe dog didn't!\n\nÉte été ÉTÉ — 'quoted' x\nw1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w1",
    )
    .unwrap();
    std::fs::write(corpus.join("empty.txt"), "").unwrap();
    std::fs::write(corpus.join("binary.bin"), [0xc3, 0x28]).unwrap();

    let python = build(dir.path(), "text-stats-py");
    let out = host(dir.path(), &["skill", "inspect", &python, "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let inspected: Value = serde_json::from_slice(&out.stdout).unwrap();
    let contract: Vec<&str> = inspected["imports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|i| i.starts_with("skillhost:"))
        .collect();
    assert_eq!(
        contract,
        [
            "skillhost:skill/log@0.1.0",
            "skillhost:skill/types@0.1.0",
            "skillhost:skill/fs@0.1.0"
        ]
    );
    assert_eq!(inspected["capabilities"], json!(["log", "fs"]));

    let rust = skillhost_tests::dist("text-stats").display().to_string();
    let grant = format!("fs={}", corpus.display());
    let call = |component: &str, path: &str| {
        let input = json!({ "path": path }).to_string();
        let out = host(
            dir.path(),
            &[
                "skill", "call", component, "--input", &input, "--grant", &grant, "--json",
            ],
            None,
        );
        let mut report: Value =
            serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stderr(&out)));
        let name = report["skill"].as_str().unwrap_or_default().to_string();
        let text = report
            .to_string()
            .replace(&format!("`{name}`"), "`text-stats`");
        report = serde_json::from_str(&text).unwrap();
        let object = report.as_object_mut().unwrap();
        for key in ["skill", "fuel_consumed", "memory_peak_bytes", "duration_us"] {
            object.remove(key);
        }
        if let Some(error) = object.get_mut("error").and_then(Value::as_object_mut) {
            error.remove("skill");
        }
        (out.status.code(), report)
    };
    for path in [
        "poem.txt",
        "prose.txt",
        "empty.txt",
        "binary.bin",
        "missing.txt",
        "sub",
        "../escape.txt",
        "",
    ] {
        let want = call(&rust, path);
        assert_eq!(call(&python, path), want, "path {path:?}");
    }
    assert_eq!(call(&rust, "poem.txt").1["output"]["words"], 5);
}
