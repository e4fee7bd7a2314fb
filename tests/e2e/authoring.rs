//! Writing a skill outside this repository, as `sdk/README.md` tells an
//! author to: the crate's own Cargo.toml, the one contract file copied into
//! `wit/deps/`, and the SDK by path. Built and tested natively (no Wasm
//! toolchain), in a directory inside this workspace's tree, which is where
//! a missing `[workspace]` table bites.

use std::path::Path;
use std::process::Command;

const CARGO_TOML: &str = r#"[package]
name = "shout"
version = "0.1.0"
description = "Upper-cases a word"
edition = "2024"

[lib]
crate-type = ["cdylib", "rlib"]

[dependencies]
skillhost-sdk = { path = "SDK" }

[workspace]
"#;

const WORLD: &str = "package skillhost:shout@0.1.0;

world shout {
    include skillhost:skill/base@0.1.0;
    use skillhost:skill/types@0.1.0.{skill-error};

    record input { word: string }
    record output { shout: string }

    export run: func(input: input) -> result<output, skill-error>;
}
";

const LIB: &str = r#"skillhost_sdk::generate!("shout");

struct Shout;

impl Guest for Shout {
    skillhost_sdk::manifest! {
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        skillhost_sdk::log::info("shouting");
        Ok(Output { shout: input.word.to_uppercase() })
    }
}

export!(Shout);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shouts() {
        let out = Shout::run(Input { word: "hi".into() }).unwrap();
        assert_eq!(out.shout, "HI");
        assert_eq!(Shout::manifest().id, "shout");
    }
}
"#;

fn cargo(dir: &Path, args: &[&str]) -> std::process::Output {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    Command::new(cargo)
        .args(args)
        .current_dir(dir)
        // Shared between runs, so only the first builds the SDK's
        // dependencies.
        .env(
            "CARGO_TARGET_DIR",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("out-of-tree-target"),
        )
        .output()
        .unwrap()
}

#[test]
fn an_out_of_tree_skill_crate_builds_and_tests_as_documented() {
    let root = skillhost_tests::repo_root();
    // Inside the workspace's directory tree, not a member. Not under
    // CARGO_TARGET_TMPDIR: CI keeps its target directory outside the clone.
    let skill = tempfile::Builder::new()
        .prefix(".tmp-out-of-tree-")
        .tempdir_in(&root)
        .unwrap();
    let dir = skill.path();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("wit/deps/skillhost-skill")).unwrap();
    // The one file of the contract; nothing else of wit/ comes along.
    std::fs::copy(
        root.join("wit/skill.wit"),
        dir.join("wit/deps/skillhost-skill/skill.wit"),
    )
    .unwrap();
    std::fs::write(dir.join("wit/world.wit"), WORLD).unwrap();
    std::fs::write(dir.join("src/lib.rs"), LIB).unwrap();
    // The same dependency versions as this repository, and no network.
    std::fs::copy(root.join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();
    let manifest = CARGO_TOML.replace("SDK", &root.join("sdk").display().to_string());

    // Without `[workspace]`, cargo takes the crate for a member of the
    // enclosing workspace that forgot to list it.
    std::fs::write(
        dir.join("Cargo.toml"),
        manifest.replace("\n[workspace]\n", "\n"),
    )
    .unwrap();
    let without = cargo(dir, &["metadata", "--offline", "--format-version", "1"]);
    let stderr = String::from_utf8_lossy(&without.stderr);
    assert!(
        !without.status.success() && stderr.contains("believes it's in a workspace"),
        "{stderr}"
    );

    std::fs::write(dir.join("Cargo.toml"), &manifest).unwrap();
    let test = cargo(dir, &["test", "--offline", "--quiet"]);
    let stdout = String::from_utf8_lossy(&test.stdout);
    assert!(
        test.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&test.stderr)
    );
    assert!(stdout.contains("1 passed"), "{stdout}");
}

/// `host skill call` and `host check` load a component by one rule: a
/// component the first runs, the second accepts in a scenario. The fixture
/// declares its error type as its own record of `skill-error`'s shape,
/// which the runtime accepted and the checker used to refuse.
#[test]
fn skill_call_and_check_accept_the_same_component() {
    let dir = tempfile::tempdir().unwrap();
    let component = dir.path().join("own-error.wasm");
    std::fs::write(&component, skillhost_tests::fixture_component("own-error")).unwrap();
    let host = |args: &[&str]| {
        Command::new(skillhost_tests::cli::host_bin())
            .args(args)
            .current_dir(dir.path())
            .env(
                "SKILLHOST_CACHE_DIR",
                skillhost_tests::shared_component_cache(),
            )
            .output()
            .unwrap()
    };

    let call = host(&[
        "skill",
        "call",
        "own-error.wasm",
        "--input",
        r#"{"text": "hi"}"#,
    ]);
    assert!(
        call.status.success(),
        "{}",
        String::from_utf8_lossy(&call.stderr)
    );
    let output: serde_json::Value = serde_json::from_slice(&call.stdout).unwrap();
    assert_eq!(output, serde_json::json!({"text": "hi"}));

    std::fs::write(
        dir.path().join("scenario.toml"),
        r#"[scenario]
name = "own-error"
version = "0.1.0"
description = "Runs a skill whose error record is its own"

[input]
text = { type = "string" }

[state]
text = { type = "string" }

[skills.copy]
component = "own-error.wasm"

[[node]]
id = "copy"
skill = "copy"
input = { text = "input.text" }
writes = [{ field = "text", from = "output.text" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "copy"
to = "done"
"#,
    )
    .unwrap();
    let check = host(&["check", "scenario.toml"]);
    assert!(
        check.status.success(),
        "stdout: {}\nstderr: {}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
    let inspect = host(&["skill", "inspect", "own-error.wasm"]);
    assert!(
        inspect.status.success(),
        "{}",
        String::from_utf8_lossy(&inspect.stderr)
    );
}
