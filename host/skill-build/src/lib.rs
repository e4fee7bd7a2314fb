//! Building skills into components: `host skill build`.
//!
//! Owns the whole path from a skill's directory to a component file. The
//! guest language decides the first half: each language is a recipe
//! ([`recipe`]) that recognises its skills, reads their identity, finds a
//! toolchain and builds a core module or a component: Rust
//! ([`recipe::rust`]), JavaScript ([`recipe::js`]), Python
//! ([`recipe::python`]), Zig ([`recipe::zig`]) and C ([`recipe::c`]). The
//! second half is written once
//! here for every recipe: encode a core module into a component, hoist its
//! memory, check that it is a skill and add the standard wasm metadata
//! ([`componentize`](mod@componentize), [`hoist`]), write the doc comments
//! of the skill's `wit/` world into it ([`docs`]), write the file
//! atomically, and report.
//!
//! [`scaffold`] writes a new skill's directory from the templates of each
//! language (`host skill new`).
//!
//! It must not load or run components (that is `runtime`'s job).

pub mod componentize;
pub mod docs;
pub mod hoist;
pub mod recipe;
pub mod scaffold;

// The Rust recipe's modules, where they were before there were recipes.
pub use recipe::rust::{package, toolchain};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

pub use componentize::{ComponentMetadata, Componentized, componentize};
pub use package::Package;
pub use recipe::{Artifact, ArtifactKind, Language, Recipe};
pub use toolchain::{INSTALL_SCRIPT, Toolchain, ToolchainChoice, ToolchainKind};

/// What to build and how.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// The skill's directory (for Rust, the one holding its `Cargo.toml`).
    pub skill_dir: PathBuf,
    /// Where to write the component; default `<build dir>/<name>.wasm`
    /// (see `target_dir`).
    pub out: Option<PathBuf>,
    /// Rust: build for WASI (`wasm32-wasip1` + the preview1 reactor
    /// adapter), for skills whose std use needs stderr, clocks, random or
    /// env. Pure skills (`wasm32-unknown-unknown`) are smaller and import
    /// only what they use of the skill contract. Also on when the skill's
    /// Cargo.toml says `[package.metadata.skillhost] wasi = true`.
    pub wasi: bool,
    /// Rust: which toolchain builds the crate.
    pub toolchain: ToolchainChoice,
    /// The directory for the build's intermediate files (for Rust, cargo's
    /// target directory); default the recipe's (for Rust,
    /// `<cargo target dir>/skill-build`).
    pub target_dir: Option<PathBuf>,
    /// Do not pass the toolchain's progress through to stderr (it is still
    /// captured for the error if the build fails).
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
    /// The guest language, whose recipe built the skill.
    pub language: Language,
    /// The component file written.
    pub output: PathBuf,
    /// Size of the component, in bytes.
    pub size: u64,
    /// Lowercase hex SHA-256 of the component.
    pub sha256: String,
    pub target: String,
    pub toolchain: String,
    /// What the guest toolchain produced (for Rust, the core module cargo
    /// built; a component for recipes that make one), and its size.
    pub core_module: PathBuf,
    pub core_size: u64,
    pub imports: Vec<String>,
    pub exports: Vec<String>,
    /// Time spent in the guest toolchain's build (`cargo build` for Rust;
    /// the name is kept for the JSON report's readers), and in the whole
    /// build.
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
        "skill directory `{}` does not exist; pass the folder that holds the skill's {}, e.g. skills/echo",
        dir.display(), recipe::markers()
    )]
    SkillDirMissing { dir: PathBuf },
    #[error(
        "`{}` is a file, not a skill directory; pass the folder that holds the skill's {}",
        dir.display(), recipe::markers()
    )]
    NotADirectory { dir: PathBuf },
    /// No recipe claims the directory: it holds none of the files the
    /// recipes look for, all of which the message lists.
    #[error(
        "no {} in `{}`: a skill is {}; see sdk/README.md to create one",
        recipe::markers(), dir.display(), recipe::kinds()
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
    /// A file of a skill in a language other than Rust that cannot be
    /// used (a `pyproject.toml` without `[project]`, a WIT folder that does
    /// not parse).
    #[error("`{}`: {message}", path.display())]
    BadSkillFile { path: PathBuf, message: String },
    /// The guest toolchain of a language other than Rust is not installed.
    #[error("no {tool} on this machine to build {language} skills; install it: {install}")]
    MissingTool {
        language: Language,
        tool: &'static str,
        install: &'static str,
    },
    /// The guest toolchain of a language other than Rust failed.
    #[error(
        "`{program}` failed building `{package}` ({status}); fix what it reported (last lines below) and rebuild:\n{tail}"
    )]
    ToolFailed {
        package: String,
        program: String,
        status: String,
        tail: String,
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
            BuildError::NoToolchain { .. }
                | BuildError::Spawn { .. }
                | BuildError::MissingTool { .. }
        )
    }
}

/// Builds the skill in `opts.skill_dir` into a component file, with the
/// recipe of the first language that claims the directory.
pub fn build_skill(opts: &BuildOptions) -> Result<BuildReport, BuildError> {
    let started = Instant::now();
    let dir = &opts.skill_dir;
    if !dir.exists() {
        return Err(BuildError::SkillDirMissing { dir: dir.clone() });
    }
    if !dir.is_dir() {
        return Err(BuildError::NotADirectory { dir: dir.clone() });
    }
    match Language::detect(dir) {
        Some(Language::Rust) => build_with(&recipe::rust::Rust, opts, started),
        Some(Language::JavaScript) => build_with(&recipe::js::JavaScript, opts, started),
        Some(Language::Python) => build_with(&recipe::python::Python, opts, started),
        Some(Language::Zig) => build_with(&recipe::zig::Zig, opts, started),
        Some(Language::C) => build_with(&recipe::c::C, opts, started),
        None => Err(BuildError::NoManifest { dir: dir.clone() }),
    }
}

/// The steps every recipe goes through, and the tail they share: from what
/// the recipe built to the component file and the report.
fn build_with<R: Recipe>(
    recipe: &R,
    opts: &BuildOptions,
    started: Instant,
) -> Result<BuildReport, BuildError> {
    // Toolchains run in the skill's directory: every path they are given
    // is absolute.
    let skill = recipe.read(&absolute(&opts.skill_dir)?, opts)?;
    let identity = recipe.identity(&skill);
    let toolchain = recipe.toolchain(&skill, opts)?;
    let build_dir = match &opts.target_dir {
        Some(dir) => absolute(dir)?,
        None => absolute(&recipe.default_build_dir(&skill))?,
    };
    let out = match &opts.out {
        Some(out) => out.clone(),
        None => build_dir.join(format!("{}.wasm", identity.name)),
    };
    tracing::debug!(
        skill = %identity.name,
        language = %recipe.language(),
        toolchain = %recipe.describe(&toolchain),
        "building skill"
    );

    let compile_started = Instant::now();
    let artifact = recipe.build(&skill, &toolchain, &build_dir, opts.quiet)?;
    let compile_time = compile_started.elapsed();

    let built = read(&artifact.path)?;
    let mut component = componentize::from_artifact(
        artifact.kind,
        &built,
        &identity,
        &artifact.path.display().to_string(),
    )?;
    component.bytes = docs::add_wit_docs(
        component.bytes,
        &absolute(&opts.skill_dir)?.join(recipe::guest::WIT_DIR),
        &identity.name,
    )?;
    write_atomically(&out, &component.bytes)?;

    Ok(BuildReport {
        package: identity.name,
        version: identity.version,
        language: recipe.language(),
        output: out,
        size: component.bytes.len() as u64,
        sha256: hex::encode(Sha256::digest(&component.bytes)),
        target: recipe.target(&toolchain),
        toolchain: recipe.describe(&toolchain),
        core_module: artifact.path,
        core_size: built.len() as u64,
        imports: component.imports,
        exports: component.exports,
        cargo_time: compile_time,
        total_time: started.elapsed(),
    })
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
    fn a_directory_no_recipe_claims_lists_what_each_looks_for() {
        let tmp = tempfile::tempdir().unwrap();
        // C sources without a world, a Go module, and a `Cargo.toml` that
        // is a directory: nothing here is a skill.
        std::fs::write(tmp.path().join("skill.c"), "").unwrap();
        std::fs::write(tmp.path().join("go.mod"), "").unwrap();
        std::fs::create_dir(tmp.path().join("Cargo.toml")).unwrap();
        let err = build_skill(&BuildOptions::new(tmp.path())).unwrap_err();
        assert!(matches!(err, BuildError::NoManifest { .. }), "{err}");
        assert!(!err.is_environment());
        let message = err.to_string();
        assert!(
            message.contains(&tmp.path().display().to_string()),
            "{message}"
        );
        for language in Language::ALL {
            assert!(message.contains(language.marker()), "{language}: {message}");
            assert!(message.contains(language.kind()), "{language}: {message}");
        }
    }

    #[test]
    fn a_crate_is_built_as_rust_whatever_else_its_directory_holds() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join("package.json"), "{}").unwrap();
        std::fs::write(tmp.path().join("Cargo.toml"), "[package\n").unwrap();
        let err = build_skill(&BuildOptions::new(tmp.path())).unwrap_err();
        // Cargo's own complaint about the manifest: the Rust recipe read it.
        assert!(matches!(err, BuildError::CargoMetadata { .. }), "{err}");
        assert!(err.to_string().contains("Cargo.toml"), "{err}");
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
        assert_eq!(report.language, Language::Rust);
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
