//! `host skill new`: a skill scaffolded in each language, into a directory
//! outside the repository, builds with `host skill build` (the toolchains
//! of `scripts/install-guest-toolchains.sh`), answers `host skill call`,
//! imports nothing of the contract but `log`, and its own unit test passes
//! with its language's usual runner. A missing toolchain fails the test with
//! the command that installs it. And what `skill new` refuses, it refuses
//! without writing anything.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use skillhost_tests::cli::{host, host_command, stderr};

/// Scaffolds `name` in `language` under `dir`, builds it into
/// `dir/<name>.wasm` and checks what the component says and does.
fn scaffold_build_and_call(dir: &Path, name: &str, language: &str) -> PathBuf {
    scaffold_build_and_call_abi(dir, name, language, false)
}

/// [`scaffold_build_and_call`], with `--async` when `async_run`.
fn scaffold_build_and_call_abi(dir: &Path, name: &str, language: &str, async_run: bool) -> PathBuf {
    let skill = dir.join(name);
    let skill_dir = skill.display().to_string();
    let mut args = vec![
        "skill", "new", name, "--lang", language, "--dir", &skill_dir,
    ];
    if async_run {
        args.push("--async");
    }
    let out = host(dir, &args, None);
    assert!(out.status.success(), "{}", stderr(&out));
    for file in [
        "README.md",
        "wit/world.wit",
        "wit/deps/skillhost-skill/skill.wit",
    ] {
        assert!(skill.join(file).is_file(), "{language}: no {file}");
    }
    if language == "rust" {
        // The same dependency versions as this repository: no network.
        std::fs::copy(
            skillhost_tests::repo_root().join("Cargo.lock"),
            skill.join("Cargo.lock"),
        )
        .unwrap();
    }

    let component = dir.join(format!("{name}.wasm"));
    let out = host(
        dir,
        &[
            "skill",
            "build",
            &skill.display().to_string(),
            "--out",
            &component.display().to_string(),
            "--target-dir",
            &skill_new_target_dir(language).display().to_string(),
            "--quiet",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "building the new {language} skill failed (exit {:?}); install its toolchain as the \
         error says (scripts/install-guest-toolchains.sh installs them all):\n{}",
        out.status.code(),
        stderr(&out)
    );
    let file = component.display().to_string();

    let out = host(dir, &["skill", "inspect", &file, "--json"], None);
    assert!(out.status.success(), "{}", stderr(&out));
    let inspect: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(inspect["name"], name, "{language}");
    assert_eq!(inspect["capabilities"], json!(["log"]), "{language}");
    let abi = if async_run { "async" } else { "sync" };
    assert_eq!(inspect["abi"], abi, "{language}");
    // Only what it uses of the contract, whatever the toolchain.
    let contract: Vec<&str> = inspect["imports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .filter(|i| i.starts_with("skillhost:"))
        .collect();
    assert_eq!(
        contract,
        ["skillhost:skill/log@0.1.0", "skillhost:skill/types@0.1.0"],
        "{language}"
    );

    let call = |input: &str| {
        let out = host(
            dir,
            &["skill", "call", &file, "--input", input, "--json"],
            None,
        );
        let report: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{language}: {e}: {}", stderr(&out)));
        (out.status.code(), report)
    };
    let (code, report) = call(r#"{"name": "Ada"}"#);
    assert_eq!(code, Some(0), "{language}: {report}");
    assert_eq!(report["output"], json!({"greeting": "Hello, Ada!"}));
    assert_eq!(
        report["logs"][0]["message"], "greeting Ada",
        "{language}: {report}"
    );
    let (code, report) = call(r#"{"name": ""}"#);
    assert_eq!(code, Some(1), "{language}: {report}");
    assert_eq!(report["error"]["code"], "invalid-input", "{language}");
    skill
}

/// The target directory the scaffolded skills of `language` build into:
/// Rust's first build compiles std for the target, so it is shared between
/// tests and runs.
fn skill_new_target_dir(language: &str) -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("skill-new-build")
        .join(language)
}

/// Runs `program args` in `dir`, which must succeed; a program that is not
/// installed fails naming `install`.
fn unit_test(dir: &Path, program: &str, args: &[&str], install: &str) -> String {
    let out = Command::new(program)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}` ({e}); install it: {install}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "`{program} {}` failed in {}:\n{stdout}\n{}",
        args.join(" "),
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout + &String::from_utf8_lossy(&out.stderr)
}

#[test]
fn a_new_rust_skill_builds_calls_and_passes_cargo_test() {
    let dir = tempfile::tempdir().unwrap();
    let skill = scaffold_build_and_call(dir.path(), "greet-rust", "rust");
    passes_cargo_test(&skill);
}

/// A Rust skill builds to the same bytes wherever it lives, and a copy at
/// another path that shares the first build's target directory compiles
/// only itself: nothing in the flags names the skill's path, so neither
/// std (built for the target) nor a dependency is compiled again. Without
/// this, each new skill and the reproducibility check's copy paid a whole
/// build of std and the SDK (about 35 s here).
#[test]
fn a_rust_skill_moved_elsewhere_builds_the_same_bytes_compiling_only_itself() {
    let dir = tempfile::tempdir().unwrap();
    let first = scaffold_build_and_call(dir.path(), "greet-moved", "rust");
    let moved = dir.path().join("elsewhere/greet-moved");
    skillhost_tests::copy_dir(&first, &moved);
    let component = dir.path().join("moved.wasm");
    let out = host(
        dir.path(),
        &[
            "skill",
            "build",
            &moved.display().to_string(),
            "--out",
            &component.display().to_string(),
            "--target-dir",
            &skill_new_target_dir("rust").display().to_string(),
        ],
        None,
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    let compiled: Vec<&str> = err
        .lines()
        .filter(|line| line.trim_start().starts_with("Compiling "))
        .collect();
    assert_eq!(compiled.len(), 1, "{err}");
    assert!(
        compiled[0].contains(&format!("greet-moved v0.1.0 ({})", moved.display())),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&component).unwrap(),
        std::fs::read(dir.path().join("greet-moved.wasm")).unwrap(),
        "the same source built at another path"
    );
}

/// `host skill new --lang rust --async`: an `async fn run` whose world
/// exports an `async func`, built for the async ABI (WASI 0.3), called on
/// the concurrent engine, and unit-tested natively with
/// `testing::block_on`.
#[test]
fn a_new_async_rust_skill_builds_calls_and_passes_cargo_test() {
    let dir = tempfile::tempdir().unwrap();
    let skill = scaffold_build_and_call_abi(dir.path(), "greet-async", "rust", true);
    let code = std::fs::read_to_string(skill.join("src/lib.rs")).unwrap();
    assert!(code.contains("async fn run(input: Input)"), "{code}");
    let world = std::fs::read_to_string(skill.join("wit/world.wit")).unwrap();
    assert!(world.contains("export run: async func("), "{world}");
    passes_cargo_test(&skill);

    // Its README's recipe for streaming a completion builds, and the
    // stream's native stand-in answers its unit test.
    let readme = std::fs::read_to_string(skill.join("README.md")).unwrap();
    assert!(
        readme.contains("skillhost_sdk::generate!(\"greet-async\", streaming);"),
        "{readme}"
    );
    assert!(
        skill
            .join("wit/deps/skillhost-skill/streaming.wit")
            .is_file()
    );
    std::fs::write(
        skill.join("wit/world.wit"),
        world.replace(
            "include skillhost:skill/base@0.1.0;",
            "include skillhost:skill/streaming@0.1.0;",
        ),
    )
    .unwrap();
    let streaming = code.replace(
        "skillhost_sdk::generate!(\"greet-async\");",
        "skillhost_sdk::generate!(\"greet-async\", streaming);",
    ) + r#"
/// What the README's recipe adds: a completion read delta by delta.
pub async fn streamed(prompt: &str) -> Result<(Vec<String>, String), SkillError> {
    let request = skillhost_sdk::llm::CompletionRequest {
        messages: vec![skillhost_sdk::llm::Message {
            role: skillhost_sdk::llm::Role::User,
            content: prompt.to_string(),
        }],
        max_tokens: None,
        temperature: None,
        json_schema: None,
    };
    let mut stream = skillhost_sdk::llm::complete_stream(&request)?;
    let mut deltas = Vec::new();
    while let Some(delta) = stream.next().await {
        deltas.push(delta);
    }
    Ok((deltas, stream.finish().await?.content))
}

#[cfg(test)]
mod streamed_tests {
    #[test]
    fn deltas_join_into_the_completion() {
        skillhost_sdk::testing::set_llm_handler(|_| {
            Ok(skillhost_sdk::llm::Completion {
                content: "Hello there, Ada".into(),
                model: "m".into(),
                input_tokens: 1,
                output_tokens: 3,
            })
        });
        let (deltas, content) =
            skillhost_sdk::testing::block_on(super::streamed("hi")).unwrap();
        assert_eq!(deltas, ["Hello ", "there, ", "Ada"]);
        assert_eq!(content, "Hello there, Ada");
    }
}
"#;
    assert_ne!(streaming, code, "the generate! line was not found");
    std::fs::write(skill.join("src/lib.rs"), streaming).unwrap();
    let component = dir.path().join("greet-stream.wasm");
    let out = host(
        dir.path(),
        &[
            "skill",
            "build",
            &skill.display().to_string(),
            "--out",
            &component.display().to_string(),
            "--target-dir",
            &Path::new(env!("CARGO_TARGET_TMPDIR"))
                .join("skill-new-build/rust")
                .display()
                .to_string(),
            "--quiet",
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    passes_cargo_test_with(&skill, "4 passed");
}

/// The scaffolded Rust skill's own unit tests pass natively.
fn passes_cargo_test(skill: &Path) {
    passes_cargo_test_with(skill, "3 passed");
}

/// The Rust skill's unit tests pass natively, `summary` saying how many.
fn passes_cargo_test_with(skill: &Path, summary: &str) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["test", "--offline", "--quiet"])
        .current_dir(skill)
        // Shared with the other out-of-tree crates' tests, so only the first
        // builds the SDK's dependencies.
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("out-of-tree-target"),
        )
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(summary), "{stdout}");
}

#[test]
fn a_new_python_skill_builds_calls_and_passes_unittest() {
    let dir = tempfile::tempdir().unwrap();
    let skill = scaffold_build_and_call(dir.path(), "greet-py", "python");
    let output = unit_test(
        &skill,
        "python3",
        &["-m", "unittest"],
        "apt-get install -y python3",
    );
    assert!(output.contains("Ran 2 tests"), "{output}");
}

#[test]
fn a_new_js_skill_builds_calls_and_passes_node_test() {
    let dir = tempfile::tempdir().unwrap();
    let skill = scaffold_build_and_call(dir.path(), "greet-js", "js");
    let output = unit_test(&skill, "node", &["--test"], "apt-get install -y nodejs");
    assert!(output.contains("# pass 2"), "{output}");
}

#[test]
fn a_new_c_skill_builds_calls_and_passes_its_test_main() {
    let dir = tempfile::tempdir().unwrap();
    let skill = scaffold_build_and_call(dir.path(), "greet-c", "c");
    std::fs::create_dir_all(skill.join("target")).unwrap();
    // The command its README gives.
    unit_test(
        &skill,
        "clang",
        &[
            "-Wall",
            "-Werror",
            "-I.",
            "-o",
            "target/greet_test",
            "test/greet_test.c",
            "greet.c",
        ],
        "apt-get install -y clang (or scripts/install-guest-toolchains.sh c)",
    );
    let output = unit_test(&skill, "target/greet_test", &[], "clang, above");
    assert_eq!(output, "ok   greets by name\nok   refuses an empty name\n");
}

#[test]
fn a_new_zig_skill_builds_calls_and_passes_zig_test() {
    let dir = tempfile::tempdir().unwrap();
    let skill = scaffold_build_and_call(dir.path(), "greet-zig", "zig");
    let output = unit_test(
        &skill,
        "python3",
        &["-m", "ziglang", "test", "greet.zig"],
        "pip install ziglang (or scripts/install-guest-toolchains.sh zig)",
    );
    assert!(output.contains("All 2 tests passed"), "{output}");
}

#[test]
fn skill_new_refuses_bad_input_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let taken = dir.path().join("taken");
    std::fs::create_dir(&taken).unwrap();
    std::fs::write(taken.join("notes.txt"), "mine").unwrap();
    let new = |name: &str, language: &str, target: &Path| {
        host(
            dir.path(),
            &[
                "skill",
                "new",
                name,
                "--lang",
                language,
                "--dir",
                &target.display().to_string(),
            ],
            None,
        )
    };

    let out = new("hello", "python", &taken);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("exists and is not empty"),
        "{}",
        stderr(&out)
    );
    let left: Vec<_> = std::fs::read_dir(&taken).unwrap().collect();
    assert_eq!(left.len(), 1);

    let fresh = dir.path().join("fresh");
    for bad in ["Hello", "hello_world", "9lives", "a--b", "record"] {
        let out = new(bad, "js", &fresh);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        assert!(
            stderr(&out).contains(&format!("`{bad}` is not a valid skill name")),
            "{}",
            stderr(&out)
        );
    }
    let out = new("hello", "go", &fresh);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown language `go`; choose one of: rust, python, js, c, zig"),
        "{}",
        stderr(&out)
    );
    assert!(!fresh.exists());

    // An empty directory is fine, and the default directory is ./NAME.
    let out = host_command(dir.path(), &["skill", "new", "hello", "--lang", "c"], None)
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(dir.path().join("hello/skill.c").is_file());
}
