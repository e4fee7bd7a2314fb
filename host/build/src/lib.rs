//! Building skills into components: `host skill build`.
//!
//! Owns the whole path from a skill crate's directory to a component file:
//! finding a toolchain that can build for Wasm ([`toolchain`]), reading the
//! crate's identity ([`package`]), running `cargo build` with flags that make
//! the bytes reproducible (same source, same bytes, wherever the checkout
//! is), and encoding the core module into a component with the standard wasm
//! metadata ([`componentize`]).
//!
//! It must not load or run components (that is `runtime`'s job), and it never
//! shares a target directory with the host's own build: skills build into
//! `<target>/skill-build`, so the two never wait on each other's lock or
//! invalidate each other's artifacts.

pub mod componentize;
pub mod hoist;
pub mod recipe;

// The Rust recipe's modules, where they were before there were recipes.
pub use recipe::rust::{package, toolchain};

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

pub use componentize::{ComponentMetadata, Componentized, componentize};
pub use package::Package;
pub use toolchain::{INSTALL_SCRIPT, Toolchain, ToolchainChoice, ToolchainKind};

/// How many lines of cargo's stderr an error keeps.
const STDERR_TAIL_LINES: usize = 30;

/// What to build and how.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// The skill's directory (the one holding its `Cargo.toml`).
    pub skill_dir: PathBuf,
    /// Where to write the component; default
    /// `<cargo target dir>/skill-build/<name>.wasm`.
    pub out: Option<PathBuf>,
    /// Build for WASI (`wasm32-wasip1` + the preview1 reactor adapter), for
    /// skills whose std use needs stderr, clocks, random or env. Pure skills
    /// (`wasm32-unknown-unknown`) are smaller and import only what they use
    /// of the skill contract. Also on when the skill's Cargo.toml says
    /// `[package.metadata.skillhost] wasi = true`.
    pub wasi: bool,
    pub toolchain: ToolchainChoice,
    /// Cargo's target directory for skill builds; default
    /// `<cargo target dir>/skill-build`.
    pub target_dir: Option<PathBuf>,
    /// Do not pass cargo's progress through to stderr (it is still captured
    /// for the error if the build fails).
    pub quiet: bool,
}

impl BuildOptions {
    pub fn new(skill_dir: impl Into<PathBuf>) -> Self {
        BuildOptions {
            skill_dir: skill_dir.into(),
            ..BuildOptions::default()
        }
    }
}

/// What a build produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BuildReport {
    pub package: String,
    pub version: String,
    /// The component file written.
    pub output: PathBuf,
    /// Size of the component, in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the component.
    pub sha256: String,
    pub target: String,
    pub toolchain: String,
    /// The core module cargo produced, and its size.
    pub core_module: PathBuf,
    pub core_size: u64,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// Time spent in `cargo build`, and in the whole build.
    #[serde(serialize_with = "millis")]
    pub cargo_time: Duration,
    #[serde(serialize_with = "millis")]
    pub total_time: Duration,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_millis() as u64)
}

/// Why a build failed. Every message is one line naming the thing and the
/// fix.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "skill directory `{}` does not exist; pass the folder that holds the skill's Cargo.toml, e.g. skills/echo",
        dir.display()
    )]
    SkillDirMissing { dir: PathBuf },
    #[error(
        "`{}` is a file, not a skill directory; pass the folder that holds the skill's Cargo.toml",
        dir.display()
    )]
    NotADirectory { dir: PathBuf },
    #[error(
        "no Cargo.toml in `{}`: a skill is a Rust crate; see sdk/README.md to create one",
        dir.display()
    )]
    NoManifest { dir: PathBuf },
    #[error(
        "`cargo metadata` failed for `{}`; fix the manifest: {stderr_tail}",
        manifest.display()
    )]
    CargoMetadata {
        manifest: PathBuf,
        stderr_tail: String,
    },
    #[error(
        "`{}` has no [package] (a workspace root?); pass a skill's own directory, e.g. skills/echo",
        manifest.display()
    )]
    NoPackage { manifest: PathBuf },
    #[error(
        "`{package}` is not a cdylib; add `[lib] crate-type = [\"cdylib\", \"rlib\"]` to {}",
        manifest.display()
    )]
    NotCdylib { package: String, manifest: PathBuf },
    #[error("no Rust toolchain can build for {target} ({tried}); run {INSTALL_SCRIPT}")]
    NoToolchain { target: String, tried: String },
    #[error("cannot run {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cargo build of `{package}` failed ({status}); fix the errors cargo reported (last lines below) and rebuild:\n{stderr_tail}"
    )]
    CargoFailed {
        package: String,
        status: String,
        stderr_tail: String,
    },
    #[error(
        "cargo built `{package}` but reported no .wasm cdylib artifact; check `[lib] crate-type` in its Cargo.toml"
    )]
    NoArtifact { package: String },
    #[error("`{package}` is not a skill: {reason}")]
    NotASkill { package: String, reason: String },
    #[error("cannot make a component of `{package}`: {message}")]
    Componentize { package: String, message: String },
    #[error(
        "`{package}`: Cargo.toml `{field} = \"{value}\"` is not valid component metadata ({message}); fix it in the skill's Cargo.toml"
    )]
    InvalidMetadata {
        package: String,
        field: &'static str,
        value: String,
        message: String,
    },
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl BuildError {
    /// Whether the machine, not the skill or the invocation, is at fault (no
    /// toolchain, a program that cannot run): exit code 3 in the CLI.
    pub fn is_environment(&self) -> bool {
        matches!(
            self,
            BuildError::NoToolchain { .. } | BuildError::Spawn { .. }
        )
    }
}

/// Builds the skill in `opts.skill_dir` into a component file.
pub fn build_skill(opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let started = Instant::now();
    let dir = &opts.skill_dir;
    if !dir.exists() {
        return Err(BuildError::SkillDirMissing { dir: dir.clone() });
    }
    if !dir.is_dir() {
        return Err(BuildError::NotADirectory { dir: dir.clone() });
    }
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(BuildError::NoManifest { dir: dir.clone() });
    }

    let package = package::read(package::metadata_cargo(), &manifest)?;
    let toolchain = toolchain::detect(opts.toolchain, opts.wasi || package.wasi, dir)?;
    let target_dir = match &opts.target_dir {
        Some(dir) => absolute(dir)?,
        None => package.target_directory.join("skill-build"),
    };
    let out = match &opts.out {
        Some(out) => out.clone(),
        None => target_dir.join(format!("{}.wasm", package.name)),
    };
    tracing::debug!(skill = %package.name, toolchain = %toolchain.describe(), "building skill");

    let cargo_started = Instant::now();
    let core_module = cargo_build(&toolchain, &package, &target_dir, opts.quiet)?;
    let cargo_time = cargo_started.elapsed();

    let core = read(&core_module)?;
    let component = componentize(
        &core,
        &ComponentMetadata::from(&package),
        &core_module.display().to_string(),
    )?;
    write_atomically(&out, &component.bytes)?;

    Ok(BuildReport {
        package: package.name.clone(),
        version: package.version.clone(),
        output: out,
        size: component.bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&component.bytes)),
        target: toolchain.target.to_string(),
        toolchain: toolchain.describe(),
        core_module,
        core_size: core.len() as u64,
        imports: component.imports,
        exports: component.exports,
        cargo_time,
        total_time: started.elapsed(),
    })
}

/// The path prefixes rewritten in the compiled code: the workspace (and the
/// package, if it lives elsewhere) and `CARGO_HOME`, where registry sources
/// are. Each as given and canonical, since cargo passes whichever it was
/// given to rustc.
fn remaps(package: &Package) -> Vec<(PathBuf, String)> {
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
    add(&package.workspace_root, ".");
    if let Some(package_dir) = package.manifest_path.parent()
        && !package_dir.starts_with(&package.workspace_root)
    {
        add(package_dir, &format!("./{}", package.name));
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
    let mut cmd = toolchain.build_command(&package.manifest_path, target_dir, &remaps(package));
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

/// The last `lines` lines of `text`.
pub(crate) fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.trim_end().lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn absolute(path: &Path) -> Result<PathBuf, BuildError> {
    std::path::absolute(path).map_err(|source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn read(path: &Path) -> Result<Vec<u8>, BuildError> {
    std::fs::read(path).map_err(|source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Writes through a temporary file in the same directory, so a reader never
/// sees half a component. (Not `tempfile`: its files are mode 0600, and a
/// component is meant to be shared like any build output.)
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    let io = |source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent()
        && !dir.as_os_str().is_empty()
    {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, path));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_dir_and_manifest_are_named() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("nope");
        let err = build_skill(&BuildOptions::new(&missing)).unwrap_err();
        assert!(matches!(err, BuildError::SkillDirMissing { .. }), "{err}");
        assert!(err.to_string().contains("nope"), "{err}");

        let err = build_skill(&BuildOptions::new(tmp.path())).unwrap_err();
        assert!(matches!(err, BuildError::NoManifest { .. }), "{err}");
        assert!(err.to_string().contains("sdk/README.md"), "{err}");

        let file = tmp.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = build_skill(&BuildOptions::new(&file)).unwrap_err();
        assert!(matches!(err, BuildError::NotADirectory { .. }), "{err}");
    }

    #[test]
    fn a_crate_that_is_not_a_cdylib_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(
            tmp.path().join("Cargo.toml"),
            "[package]\nname = \"plain\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n[workspace]\n",
        )
        .unwrap();
        std::fs::create_dir(tmp.path().join("src")).unwrap();
        std::fs::write(tmp.path().join("src/lib.rs"), "").unwrap();
        let err = build_skill(&BuildOptions::new(tmp.path())).unwrap_err();
        assert!(matches!(err, BuildError::NotCdylib { .. }), "{err}");
        assert!(err.to_string().contains("crate-type"), "{err}");
    }

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
    fn tail_keeps_the_last_lines() {
        assert_eq!(tail("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }

    /// Builds the shipped `echo` skill for real with whatever toolchain this
    /// machine has (minutes on a cold target directory).
    #[test]
    #[ignore = "needs a Wasm toolchain; run with --ignored"]
    fn builds_the_echo_skill() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../skills/echo");
        let out = tempfile::tempdir().unwrap();
        let mut opts = BuildOptions::new(dir);
        opts.out = Some(out.path().join("echo.wasm"));
        opts.quiet = true;
        let report = build_skill(&opts).unwrap();
        assert_eq!(report.package, "echo");
        assert_eq!(report.exports, ["run", "manifest"]);
        assert!(
            report
                .imports
                .iter()
                .any(|i| i == "skillhost:skill/log@0.1.0")
        );
        let bytes = std::fs::read(&report.output).unwrap();
        assert_eq!(hex::encode(Sha256::digest(&bytes)), report.sha256);
    }
}
