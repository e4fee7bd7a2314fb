//! Guest languages: one recipe per language, behind one interface.
//!
//! A recipe owns everything about building a skill written in its language:
//! recognising its directory, reading its identity, finding a toolchain, and
//! running that toolchain to a core module or a finished component. It owns
//! nothing after that: encoding, hoisting, the skill check, the metadata, the
//! report and the write of the output are the shared tail in
//! [`build_skill`](crate::build_skill) and [`componentize`](mod@crate::componentize),
//! written once for every language.
//!
//! The interface is a trait, [`Recipe`], whose associated types let each
//! language keep its own typed state between the steps (Rust: the cargo
//! [`Package`](rust::package::Package) and the [`Toolchain`](rust::toolchain::Toolchain)
//! found for it). The list of recipes is an enum, [`Language`], in the order
//! they are tried: detection walks [`Language::ALL`] without trait objects,
//! and every `match` over it names each language, so the compiler points at
//! every place a new one must be handled.
//!
//! Adding a language (Python, JavaScript, C, Zig…) is:
//! - a module `recipe/<language>/` with a unit type implementing [`Recipe`]:
//!   [`claims`](Recipe::claims) a directory by the file that marks it
//!   (cheaply: look at files, run nothing), [`read`](Recipe::read) its
//!   identity and whatever the build needs, find a
//!   [`toolchain`](Recipe::toolchain) or fail with an environment error
//!   naming what is missing and how to install it, and
//!   [`build`](Recipe::build) an [`Artifact`] saying whether it is a core
//!   module (encoded by the tail) or a component (only hoisted where its
//!   shape allows, checked and given metadata by the tail);
//! - a variant of [`Language`], placed in [`Language::ALL`] by precedence
//!   (the first recipe that claims a directory builds it), and its arms in
//!   [`Language::claims`], [`Language::marker`], [`Language::kind`] and in
//!   `build_skill`'s dispatch.
//!
//! The recipes other than Rust's share [`guest`]: the world read from
//! `wit/`, finding a program, running a toolchain with its output kept for
//! the error. A missing toolchain of theirs is
//! [`BuildError::MissingTool`] with its install command;
//! [`BuildError::NoToolchain`] is Rust's, and [`BuildOptions`]' `wasi` and
//! `toolchain` are the Rust recipe's.

pub mod c;
pub mod guest;
pub mod js;
pub mod python;
pub mod rust;
pub mod zig;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::componentize::ComponentMetadata;
use crate::{BuildError, BuildOptions};

/// How to build skills of one guest language.
///
/// The steps run in this order: [`claims`](Recipe::claims),
/// [`read`](Recipe::read), [`toolchain`](Recipe::toolchain),
/// [`build`](Recipe::build). Every error is a [`BuildError`] whose message
/// names the file or program at fault and what to do.
pub trait Recipe {
    /// What the recipe reads from a skill's directory: its identity and
    /// whatever the build needs.
    type Skill;
    /// A toolchain found on this machine that can build a `Skill`.
    type Toolchain;

    /// The language this recipe builds.
    fn language(&self) -> Language;

    /// The file whose presence marks a skill of this language, as the error
    /// for a directory no recipe claims lists it (`Cargo.toml`).
    fn marker(&self) -> &'static str;

    /// What a skill of this language is, for the same error (`a Rust crate`).
    fn kind(&self) -> &'static str;

    /// Whether `dir`, an existing directory, is a skill of this language.
    /// Looks at files only; a claimed directory that turns out to be broken
    /// is for [`read`](Recipe::read) to report. By default: it holds the
    /// [`marker`](Recipe::marker) file.
    fn claims(&self, dir: &Path) -> bool {
        dir.join(self.marker()).is_file()
    }

    /// Reads the skill in `dir` (which this recipe claims).
    fn read(&self, dir: &Path, opts: &BuildOptions) -> Result<Self::Skill, BuildError>;

    /// The skill's identity: what its component will say about itself.
    fn identity(&self, skill: &Self::Skill) -> ComponentMetadata;

    /// Where the build's intermediate files go when the caller names no
    /// directory; the component is written there as `<name>.wasm` unless
    /// the caller names a file.
    fn default_build_dir(&self, skill: &Self::Skill) -> PathBuf;

    /// Finds a toolchain for `skill` on this machine, or fails with
    /// [`BuildError::NoToolchain`] (or another environment error) naming what
    /// is missing and how to install it.
    fn toolchain(
        &self,
        skill: &Self::Skill,
        opts: &BuildOptions,
    ) -> Result<Self::Toolchain, BuildError>;

    /// What `toolchain` builds for (a target triple, for reports).
    fn target(&self, toolchain: &Self::Toolchain) -> String;

    /// A one-line description of `toolchain`, for reports.
    fn describe(&self, toolchain: &Self::Toolchain) -> String;

    /// Builds `skill` with `toolchain`, keeping intermediate files under
    /// `build_dir`, and returns what the toolchain produced. `quiet`: do not
    /// pass the toolchain's progress through to stderr.
    fn build(
        &self,
        skill: &Self::Skill,
        toolchain: &Self::Toolchain,
        build_dir: &Path,
        quiet: bool,
    ) -> Result<Artifact, BuildError>;
}

/// What a recipe's toolchain produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub path: PathBuf,
    pub kind: ArtifactKind,
}

/// Whether the shared tail still has to encode the artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactKind {
    /// A core module with wit-bindgen's `component-type` section: encoded
    /// into a component here.
    CoreModule,
    /// A component already (componentize-py, componentize-js, rustup's
    /// `wasm32-wasip2`): only hoisted where its shape allows, checked, and
    /// given metadata.
    Component,
}

impl ArtifactKind {
    /// The kind of the wasm binary `bytes`, by its header.
    pub fn of(bytes: &[u8]) -> ArtifactKind {
        if wasmparser::Parser::is_component(bytes) {
            ArtifactKind::Component
        } else {
            ArtifactKind::CoreModule
        }
    }
}

impl fmt::Display for ArtifactKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ArtifactKind::CoreModule => "a core module",
            ArtifactKind::Component => "a component",
        })
    }
}

/// The guest languages skills can be written in, one per recipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Language {
    Rust,
    #[serde(rename = "javascript")]
    JavaScript,
    Python,
    Zig,
    C,
}

impl Language {
    /// Every language, in the order their recipes are tried: a directory
    /// with a manifest file (`Cargo.toml`, `package.json`, `pyproject.toml`)
    /// is that language's whatever else it holds; Zig and C are recognised
    /// by their sources beside `wit/`, Zig first (a Zig skill may hold C
    /// files too).
    pub const ALL: [Language; 5] = [
        Language::Rust,
        Language::JavaScript,
        Language::Python,
        Language::Zig,
        Language::C,
    ];

    /// The language of the skill in `dir`: the first whose recipe claims it.
    pub fn detect(dir: &Path) -> Option<Language> {
        Language::ALL.into_iter().find(|l| l.claims(dir))
    }

    /// Whether this language's recipe claims `dir`.
    pub fn claims(self, dir: &Path) -> bool {
        match self {
            Language::Rust => rust::Rust.claims(dir),
            Language::JavaScript => js::JavaScript.claims(dir),
            Language::Python => python::Python.claims(dir),
            Language::Zig => zig::Zig.claims(dir),
            Language::C => c::C.claims(dir),
        }
    }

    /// The file that marks a skill of this language.
    pub fn marker(self) -> &'static str {
        match self {
            Language::Rust => rust::Rust.marker(),
            Language::JavaScript => js::JavaScript.marker(),
            Language::Python => python::Python.marker(),
            Language::Zig => zig::Zig.marker(),
            Language::C => c::C.marker(),
        }
    }

    /// What a skill of this language is.
    pub fn kind(self) -> &'static str {
        match self {
            Language::Rust => rust::Rust.kind(),
            Language::JavaScript => js::JavaScript.kind(),
            Language::Python => python::Python.kind(),
            Language::Zig => zig::Zig.kind(),
            Language::C => c::C.kind(),
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Language::Rust => "Rust",
            Language::JavaScript => "JavaScript",
            Language::Python => "Python",
            Language::Zig => "Zig",
            Language::C => "C",
        })
    }
}

/// The files the recipes look for, for the error when none is found:
/// `Cargo.toml`, or `Cargo.toml or package.json`, or `a, b or c`.
pub(crate) fn markers() -> String {
    either(Language::ALL.map(Language::marker))
}

/// What a skill can be, for the same error: `a Rust crate`, or `a Rust
/// crate or …`.
pub(crate) fn kinds() -> String {
    either(Language::ALL.map(Language::kind))
}

fn either<const N: usize>(items: [&str; N]) -> String {
    match items.split_last() {
        None => String::new(),
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_with_a_cargo_toml_is_rust() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(Language::detect(tmp.path()), None);
        std::fs::write(tmp.path().join("Cargo.toml"), "").unwrap();
        assert_eq!(Language::detect(tmp.path()), Some(Language::Rust));
        // Other languages' files next to it do not make it anything else.
        std::fs::write(tmp.path().join("package.json"), "{}").unwrap();
        std::fs::write(tmp.path().join("pyproject.toml"), "").unwrap();
        assert_eq!(Language::detect(tmp.path()), Some(Language::Rust));
    }

    #[test]
    fn each_language_is_detected_by_its_files_in_precedence_order() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        // C sources alone are not a skill: they need the world beside them.
        std::fs::write(dir.join("skill.c"), "").unwrap();
        assert_eq!(Language::detect(dir), None);
        std::fs::create_dir(dir.join("wit")).unwrap();
        assert_eq!(Language::detect(dir), Some(Language::C));
        std::fs::write(dir.join("pyproject.toml"), "").unwrap();
        assert_eq!(Language::detect(dir), Some(Language::Python));
        std::fs::write(dir.join("package.json"), "{}").unwrap();
        assert_eq!(Language::detect(dir), Some(Language::JavaScript));
    }

    #[test]
    fn a_marker_that_is_not_a_file_claims_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::create_dir(tmp.path().join("Cargo.toml")).unwrap();
        assert_eq!(Language::detect(tmp.path()), None);
        // A manifest in a subdirectory is that directory's, not this one's.
        std::fs::create_dir(tmp.path().join("skill")).unwrap();
        std::fs::write(tmp.path().join("skill/Cargo.toml"), "").unwrap();
        assert_eq!(Language::detect(tmp.path()), None);
        assert_eq!(
            Language::detect(&tmp.path().join("skill")),
            Some(Language::Rust)
        );
    }

    #[test]
    fn every_language_is_listed_once_with_its_marker() {
        for (i, language) in Language::ALL.into_iter().enumerate() {
            assert!(!language.marker().is_empty(), "{language}");
            assert!(!language.kind().is_empty(), "{language}");
            assert!(markers().contains(language.marker()), "{}", markers());
            assert!(kinds().contains(language.kind()), "{}", kinds());
            assert!(!Language::ALL[..i].contains(&language), "{language} twice");
        }
    }

    #[test]
    fn lists_read_as_one_phrase() {
        assert_eq!(either::<0>([]), "");
        assert_eq!(either(["Cargo.toml"]), "Cargo.toml");
        assert_eq!(either(["a", "b"]), "a or b");
        assert_eq!(either(["a", "b", "c"]), "a, b or c");
    }

    #[test]
    fn artifact_kinds_are_read_from_the_header() {
        let core = wat::parse_str("(module)").unwrap();
        let component = wat::parse_str("(component)").unwrap();
        assert_eq!(ArtifactKind::of(&core), ArtifactKind::CoreModule);
        assert_eq!(ArtifactKind::of(&component), ArtifactKind::Component);
    }
}
