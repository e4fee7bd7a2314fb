//! The crates follow the graph `docs/architecture.md` draws: each library
//! crate depends only on the crates before it, none on the binary or on the
//! test helpers, and the graph has no cycle. Read from `cargo metadata`, so
//! a dependency added to a manifest against the graph fails here.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use serde_json::Value;

/// What each crate of ours may use, for its library and its binary (normal
/// dependencies; build scripts have none). Dev-dependencies are not part of
/// the graph: tests may use anything, and the test helpers may use the
/// crates they help test.
const ALLOWED: &[(&str, &[&str])] = &[
    ("skillhost-model", &[]),
    ("skillhost-runtime", &[]),
    (
        "skillhost-scenario",
        &["skillhost-model", "skillhost-runtime"],
    ),
    ("skillhost-store", &["skillhost-model"]),
    ("skillhost-telemetry", &[]),
    (
        "skillhost-engine",
        &[
            "skillhost-model",
            "skillhost-runtime",
            "skillhost-scenario",
            "skillhost-store",
            "skillhost-telemetry",
        ],
    ),
    ("skillhost-build", &[]),
    ("skillhost-oci", &[]),
    ("skillhost-auth", &[]),
    (
        "skillhost-serve",
        &[
            "skillhost-auth",
            "skillhost-model",
            "skillhost-runtime",
            "skillhost-scenario",
            "skillhost-store",
            "skillhost-engine",
            "skillhost-telemetry",
        ],
    ),
    (
        "skillhost-mcp",
        &[
            "skillhost-auth",
            "skillhost-runtime",
            "skillhost-scenario",
            "skillhost-store",
            "skillhost-engine",
        ],
    ),
    (
        "skillhost",
        &[
            "skillhost-model",
            "skillhost-runtime",
            "skillhost-scenario",
            "skillhost-store",
            "skillhost-engine",
            "skillhost-build",
            "skillhost-oci",
            "skillhost-auth",
            "skillhost-serve",
            "skillhost-mcp",
            "skillhost-telemetry",
        ],
    ),
];

/// Every workspace package's normal dependencies on other workspace packages.
fn workspace_graph() -> BTreeMap<String, BTreeSet<String>> {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(skillhost_tests::repo_root())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: Value = serde_json::from_slice(&out.stdout).expect("cargo metadata's JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let ours: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().unwrap().to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_string())
                .filter(|name| ours.contains(name))
                .collect();
            (p["name"].as_str().unwrap().to_string(), deps)
        })
        .collect()
}

#[test]
fn each_crate_uses_only_the_crates_before_it() {
    let graph = workspace_graph();
    for (name, allowed) in ALLOWED {
        let deps = graph
            .get(*name)
            .unwrap_or_else(|| panic!("no workspace package `{name}`"));
        let extra: Vec<&String> = deps
            .iter()
            .filter(|d| !allowed.contains(&d.as_str()))
            .collect();
        assert!(
            extra.is_empty(),
            "`{name}` depends on {extra:?}, which the crate graph does not allow \
             (docs/architecture.md); allowed: {allowed:?}"
        );
    }
    // Nothing but tests depends on the test helpers.
    for (name, deps) in &graph {
        assert!(
            !deps.contains("skillhost-tests"),
            "`{name}` depends on the test helpers outside its dev-dependencies"
        );
    }
}

#[test]
fn the_crate_graph_has_no_cycle() {
    let graph = workspace_graph();
    // Kahn's algorithm: repeatedly take the crates whose dependencies are
    // all taken; whatever is left is on a cycle.
    let mut taken: BTreeSet<String> = BTreeSet::new();
    loop {
        let ready: Vec<String> = graph
            .iter()
            .filter(|(name, deps)| !taken.contains(*name) && deps.iter().all(|d| taken.contains(d)))
            .map(|(name, _)| name.clone())
            .collect();
        if ready.is_empty() {
            break;
        }
        taken.extend(ready);
    }
    let left: Vec<&String> = graph.keys().filter(|n| !taken.contains(*n)).collect();
    assert!(
        left.is_empty(),
        "these crates are on a dependency cycle: {left:?}"
    );
}
