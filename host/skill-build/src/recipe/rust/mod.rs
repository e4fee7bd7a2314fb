//! The Rust recipe: a skill is a crate (a directory with a `Cargo.toml`)
//! built with cargo into a core module.
//!
//! Finding a toolchain that can build for Wasm is [`toolchain`]'s, reading
//! the crate's identity with `cargo metadata` is [`package`]'s; this module
//! runs `cargo build` with flags that make the bytes reproducible (same
//! source, same bytes, wherever the checkout is) and finds the module cargo
//! reports. It never shares a target directory with the host's own build:
//! skills build into `<target>/skill-build`, so the two never wait on each
//! other's lock or invalidate each other's artifacts.
//!
//! It must not encode, check or write the component: that is the shared tail
//! every recipe uses.

pub mod package;
pub mod toolchain;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::Stdio;

use self::package::Package;
use self::toolchain::Toolchain;
use super::{Artifact, ArtifactKind, Language, Recipe};
use crate::componentize::ComponentMetadata;
use crate::{BuildError, BuildOptions};

/// How many lines of cargo's stderr an error keeps.
const STDERR_TAIL_LINES: usize = 30;

/// The manifest that makes a directory a Rust skill.
const MANIFEST: &str = "Cargo.toml";

/// Builds Rust skill crates with cargo.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rust;

impl Recipe for Rust {
    type Skill = Package;
    type Toolchain = Toolchain;

    fn language(&self) -> Language {
        Language::Rust
    }

    fn marker(&self) -> &'static str {
        MANIFEST
    }

    fn kind(&self) -> &'static str {
        "a Rust crate"
    }

    fn read(&self, dir: &Path, _opts: &BuildOptions) -> Result<Package, BuildError> {
        package::read(package::metadata_cargo(), &dir.join(MANIFEST))
    }

    fn identity(&self, package: &Package) -> ComponentMetadata {
        ComponentMetadata::from(package)
    }

    fn default_build_dir(&self, package: &Package) -> PathBuf {
        package.target_directory.join("skill-build")
    }

    fn toolchain(&self, package: &Package, opts: &BuildOptions) -> Result<Toolchain, BuildError> {
        toolchain::detect(opts.toolchain, opts.wasi || package.wasi, &opts.skill_dir)
    }

    fn target(&self, toolchain: &Toolchain) -> String {
        toolchain.target.to_string()
    }

    fn describe(&self, toolchain: &Toolchain) -> String {
        toolchain.describe()
    }

    fn build(
        &self,
        package: &Package,
        toolchain: &Toolchain,
        build_dir: &Path,
        quiet: bool,
    ) -> Result<Artifact, BuildError> {
        let path = cargo_build(toolchain, package, build_dir, quiet)?;
        // Every target links a core module but `wasm32-wasip2`, whose linker
        // makes a component; the header says which without a table of targets.
        let kind = ArtifactKind::of(&header(&path)?);
        Ok(Artifact { path, kind })
    }
}

/// The first bytes of the wasm file at `path`: enough to tell a core module
/// from a component.
fn header(path: &Path) -> Result<Vec<u8>, BuildError> {
    let mut header = Vec::with_capacity(8);
    std::fs::File::open(path)
        .and_then(|file| file.take(8).read_to_end(&mut header))
        .map_err(|source| BuildError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(header)
}

/// The path prefixes rewritten in the compiled code: `CARGO_HOME`, where
/// registry sources are, as given and canonical, since cargo passes
/// whichever it was given to rustc.
///
/// Not the workspace: cargo runs rustc in the workspace's root and names
/// its members' sources relative to it (`src/lib.rs`), so they embed no
/// path of the checkout (`scripts/check-skills-reproducible.sh` builds
/// every shipped skill from a copy elsewhere and compares the bytes). A
/// remap of it would put the skill's path in the flags, and cargo compiles
/// every dependency again, std included, for each new set of flags: each
/// new skill and each copy paid a whole build (about 35 s here) even in a
/// target directory that held them.
fn remaps() -> Vec<(PathBuf, String)> {
    let mut remaps = Vec::new();
    let mut add = |path: &Path, to: &str| {
        for form in [path.to_path_buf(), path.canonicalize().unwrap_or_default()] {
            if !form.as_os_str().is_empty() && !remaps.iter().any(|(p, _)| p == &form) {
                remaps.push((form, to.to_string()));
            }
        }
    };
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")));
    if let Some(cargo_home) = cargo_home {
        add(&cargo_home, "/cargo");
    }
    // rustc applies the last matching `--remap-path-prefix`: put the most
    // specific (longest) prefixes last.
    remaps.sort_by_key(|(path, _)| path.as_os_str().len());
    remaps
}

/// Runs cargo and returns the path of the core module it reported.
fn cargo_build(
    toolchain: &Toolchain,
    package: &Package,
    target_dir: &Path,
    quiet: bool,
) -> Result<PathBuf, BuildError> {
    let mut cmd = toolchain.build_command(&package.manifest_path, target_dir, &remaps());
    cmd.current_dir(&package.workspace_root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    tracing::debug!(command = ?cmd, "cargo build");
    let mut child = cmd.spawn().map_err(|source| BuildError::Spawn {
        program: format!("{:?}", cmd.get_program()),
        source,
    })?;

    let stderr = child.stderr.take().expect("stderr is piped");
    let stderr_thread = std::thread::spawn(move || {
        let mut tail = VecDeque::with_capacity(STDERR_TAIL_LINES);
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        while reader.read_until(b'\n', &mut line).unwrap_or(0) > 0 {
            let text = String::from_utf8_lossy(&line).trim_end().to_string();
            if !quiet {
                eprintln!("{text}");
            }
            // Progress lines would push the diagnostics out of the tail.
            let progress = [
                "Compiling ",
                "Blocking ",
                "Downloaded ",
                "Downloading ",
                "Locking ",
            ]
            .iter()
            .any(|p| text.trim_start().starts_with(p));
            if progress {
                line.clear();
                continue;
            }
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(text);
            line.clear();
        }
        tail
    });

    let mut artifact = None;
    let stdout = child.stdout.take().expect("stdout is piped");
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if let Some(path) = wasm_artifact(&line, &package.manifest_path) {
            artifact = Some(path);
        }
    }
    let status = child.wait().map_err(|source| BuildError::Spawn {
        program: format!("{:?}", cmd.get_program()),
        source,
    })?;
    let tail = stderr_thread.join().unwrap_or_default();
    if !status.success() {
        return Err(BuildError::CargoFailed {
            package: package.name.clone(),
            status: status.to_string(),
            stderr_tail: Vec::from(tail).join("\n"),
        });
    }
    artifact.ok_or_else(|| BuildError::NoArtifact {
        package: package.name.clone(),
    })
}

/// The `.wasm` file of a `compiler-artifact` message for the package at
/// `manifest`, if `line` is one.
fn wasm_artifact(line: &str, manifest: &Path) -> Option<PathBuf> {
    #[derive(serde::Deserialize)]
    struct Message {
        reason: String,
        #[serde(default)]
        manifest_path: Option<PathBuf>,
        #[serde(default)]
        filenames: Vec<PathBuf>,
    }
    let message: Message = serde_json::from_str(line).ok()?;
    if message.reason != "compiler-artifact" || message.manifest_path.as_deref() != Some(manifest) {
        return None;
    }
    message
        .filenames
        .into_iter()
        .find(|f| f.extension().is_some_and(|e| e == "wasm"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_messages_are_matched_by_manifest() {
        let line = r#"{"reason":"compiler-artifact","manifest_path":"/w/skills/echo/Cargo.toml","filenames":["/t/echo.wasm","/t/libecho.rlib"]}"#;
        assert_eq!(
            wasm_artifact(line, Path::new("/w/skills/echo/Cargo.toml")),
            Some(PathBuf::from("/t/echo.wasm"))
        );
        assert_eq!(wasm_artifact(line, Path::new("/w/sdk/Cargo.toml")), None);
        assert_eq!(wasm_artifact("not json", Path::new("/x")), None);
    }

    #[test]
    fn the_artifact_kind_is_read_from_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        let core = tmp.path().join("core.wasm");
        let component = tmp.path().join("component.wasm");
        std::fs::write(&core, wat::parse_str("(module)").unwrap()).unwrap();
        std::fs::write(&component, wat::parse_str("(component)").unwrap()).unwrap();
        assert_eq!(
            ArtifactKind::of(&header(&core).unwrap()),
            ArtifactKind::CoreModule
        );
        assert_eq!(
            ArtifactKind::of(&header(&component).unwrap()),
            ArtifactKind::Component
        );
        let err = header(&tmp.path().join("gone.wasm")).unwrap_err();
        assert!(err.to_string().contains("gone.wasm"), "{err}");
    }
}
