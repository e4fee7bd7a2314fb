//! `host cache list|prune`: the compiled-component cache a call fills, as
//! listed (size, age, the component and the file it came from), and pruned:
//! by age, all, or as a dry run; never a file being written. Each test has
//! a cache of its own, not the one the other tests share.

use serde_json::Value;
use skillhost_tests::cli::{host_own_cache, stderr};

fn host(dir: &std::path::Path, args: &[&str], _: Option<&str>) -> std::process::Output {
    host_own_cache(dir, args)
}

fn cache(dir: &std::path::Path, args: &[&str]) -> Value {
    let mut all = vec!["cache"];
    all.extend_from_slice(args);
    all.push("--json");
    let out = host(dir, &all, None);
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn cache_lists_what_a_call_compiled_and_prunes_it() {
    let dir = tempfile::tempdir().unwrap();
    let echo = skillhost_tests::dist("echo");
    let out = host(
        dir.path(),
        &[
            "skill",
            "call",
            &echo.display().to_string(),
            "--input",
            r#"{"message": "hi", "repeat": 1}"#,
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));

    let listed = cache(dir.path(), &["list"]);
    let entries = listed["compiled"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{listed}");
    let entry = &entries[0];
    let out = host(
        dir.path(),
        &["skill", "inspect", &echo.display().to_string(), "--json"],
        None,
    );
    let inspected: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(entry["component"], inspected["digest"]);
    assert_eq!(entry["origin"], echo.display().to_string());
    assert_eq!(entry["kind"], "compiled");
    assert_eq!(entry["current"], true);
    assert!(entry["size"].as_u64().unwrap() > 10_000, "{entry}");
    assert_eq!(listed["registry"]["entries"], serde_json::json!([]));
    // The functions that compile produced, which later compiles reuse.
    let functions = &listed["functions"];
    let [pack] = functions["entries"].as_array().unwrap().as_slice() else {
        panic!("one pack of compiled functions: {listed}")
    };
    assert_eq!(pack["kind"], "functions");
    assert_eq!(pack["current"], true);
    assert!(pack["functions"].as_u64().unwrap() > 0, "{pack}");
    assert_eq!(functions["functions"], pack["functions"]);
    let both = entry["size"].as_u64().unwrap() + pack["size"].as_u64().unwrap();

    // A file being written beside it: never pruned, even with --all.
    let engine_dir = std::path::Path::new(entry["path"].as_str().unwrap())
        .parent()
        .unwrap()
        .to_path_buf();
    std::fs::write(engine_dir.join(".tmpWRITING"), b"half").unwrap();

    let kept = cache(dir.path(), &["prune"]);
    assert_eq!(kept["removed"], serde_json::json!([]), "{kept}");
    let dry = cache(dir.path(), &["prune", "--all", "--dry-run"]);
    let removed = dry["removed"].as_array().unwrap();
    assert_eq!(removed.len(), 2, "{dry}");
    let compiled = removed.iter().find(|e| e["cache"] == "compiled").unwrap();
    assert_eq!(compiled["component"], entry["component"]);
    let functions = removed.iter().find(|e| e["cache"] == "functions").unwrap();
    assert_eq!(functions["path"], pack["path"]);
    assert_eq!(
        cache(dir.path(), &["list"])["compiled"]["entries"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    let pruned = cache(dir.path(), &["prune", "--all"]);
    assert_eq!(pruned["removed"].as_array().unwrap().len(), 2, "{pruned}");
    assert_eq!(pruned["freed"], both);
    let left = cache(dir.path(), &["list"]);
    assert_eq!(
        left["functions"]["entries"],
        serde_json::json!([]),
        "{left}"
    );
    let left = left["compiled"]["entries"].as_array().unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["kind"], "partial");

    // The next call compiles it again.
    let out = host(
        dir.path(),
        &[
            "skill",
            "call",
            &echo.display().to_string(),
            "--input",
            r#"{"message": "hi", "repeat": 1}"#,
        ],
        None,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        cache(dir.path(), &["list"])["compiled"]["entries"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

/// `host skill build` compiles what it built into the host's cache: the
/// first call loads it from there.
#[test]
fn skill_build_compiles_into_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let out_file = dir.path().join("echo-c.wasm");
    let source = skillhost_tests::repo_root().join("skills/echo-c");
    let out = host(
        dir.path(),
        &[
            "skill",
            "build",
            &source.display().to_string(),
            "--out",
            &out_file.display().to_string(),
            "--target-dir",
            &dir.path().join("build").display().to_string(),
            "--json",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "install the C toolchain as the error says (scripts/install-guest-toolchains.sh c): {}",
        stderr(&out)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["precompiled"]["source"], "compiled", "{report}");
    let listed = cache(dir.path(), &["list"]);
    let entries = listed["compiled"]["entries"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{listed}");
    assert_eq!(entries[0]["origin"], out_file.display().to_string());
    assert_eq!(
        entries[0]["component"],
        format!("sha256:{}", report["sha256"].as_str().unwrap())
    );
}
