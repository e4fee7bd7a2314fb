//! Fuzz target: a scenario file's bytes through the checker `host check`
//! runs. Every input is parsed and checked without its skills
//! ([`skillhost_scenario::parse_str`]); one that passes is then written out
//! and loaded with its skills ([`skillhost_scenario::load`]), so the checks
//! against the components' types and manifests run too. The shipped
//! components are reachable as `../../skills/dist/<id>.wasm`, the path the
//! committed examples use. A panic, an abort or a stack overflow is a finding;
//! a scenario the checker refuses is not.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use skillhost_runtime::{Runtime, RuntimeConfig};

struct Workspace {
    /// Keeps the directory alive for the process.
    _root: tempfile::TempDir,
    /// `<root>/examples/fuzz/scenario.toml`.
    scenario: PathBuf,
    runtime: Runtime,
}

fn workspace() -> &'static Workspace {
    static WORKSPACE: OnceLock<Workspace> = OnceLock::new();
    WORKSPACE.get_or_init(|| {
        let root = tempfile::tempdir().expect("a temporary directory");
        let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../skills/dist");
        std::fs::create_dir_all(root.path().join("skills")).expect("skills/");
        std::os::unix::fs::symlink(
            dist.canonicalize().expect("skills/dist of this repository"),
            root.path().join("skills/dist"),
        )
        .expect("a link to skills/dist");
        let dir = root.path().join("examples/fuzz");
        std::fs::create_dir_all(&dir).expect("examples/fuzz/");
        let runtime = Runtime::new(RuntimeConfig::default()).expect("a runtime");
        Workspace {
            scenario: dir.join("scenario.toml"),
            _root: root,
            runtime,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let workspace = workspace();
    if skillhost_scenario::parse_str(text, &workspace.scenario).is_err() {
        return;
    }
    std::fs::write(&workspace.scenario, text).expect("writing the scenario");
    let _ = skillhost_scenario::load(&workspace.scenario, &workspace.runtime);
});
