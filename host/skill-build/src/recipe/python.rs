//! The Python recipe: a skill is a directory with a `pyproject.toml` (its
//! identity, `[project]`), its world in `wit/`, and a module (`app.py`
//! unless `[tool.skillhost] module` says otherwise) that defines
//! `class WitWorld(wit_world.WitWorld)`. componentize-py builds it into a
//! component, with the Python SDK (`skillhost_sdk`, shipped inside this
//! crate and written next to the build) on the module path.
//!
//! componentize-py imports every interface of the world whether the code
//! uses it or not; what the skill may use is what its manifest declares
//! (the runtime denies the rest).
//!
//! Must not: encode, check or write the component (the shared tail does).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::guest::{self, World};
use super::{Artifact, ArtifactKind, Language, Recipe};
use crate::componentize::ComponentMetadata;
use crate::{BuildError, BuildOptions};

/// The file that makes a directory a Python skill.
const MANIFEST: &str = "pyproject.toml";

/// The componentize-py release the build is pinned to: its output depends
/// on its bundled CPython.
pub const COMPONENTIZE_PY_VERSION: &str = "0.25.1";

/// How to install it, named when it is missing.
pub const INSTALL: &str =
    "pip install componentize-py==0.25.1 (or scripts/install-guest-toolchains.sh python)";

/// The Python SDK, written next to every build and put on the module path.
const SDK: &str = include_str!("../../../../sdk/python/skillhost_sdk.py");

/// Builds Python skills with componentize-py.
#[derive(Debug, Clone, Copy, Default)]
pub struct Python;

/// A Python skill: its identity, its module and its world.
#[derive(Debug, Clone)]
pub struct PySkill {
    pub dir: PathBuf,
    pub identity: ComponentMetadata,
    /// The module that defines `WitWorld` (`app`).
    pub module: String,
    pub world: World,
}

/// componentize-py, found on this machine.
#[derive(Debug, Clone)]
pub struct PyToolchain {
    pub program: PathBuf,
    pub version: String,
}

#[derive(serde::Deserialize)]
struct PyProject {
    project: Option<Project>,
    #[serde(default)]
    tool: Tool,
}

#[derive(serde::Deserialize)]
struct Project {
    name: String,
    version: Option<String>,
    description: Option<String>,
    license: Option<License>,
    #[serde(default)]
    authors: Vec<Author>,
    #[serde(default)]
    urls: std::collections::BTreeMap<String, String>,
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum License {
    Expression(String),
    Table { text: String },
}

#[derive(serde::Deserialize)]
struct Author {
    name: Option<String>,
    email: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct Tool {
    #[serde(default)]
    skillhost: SkillhostTable,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SkillhostTable {
    module: Option<String>,
    world: Option<String>,
}

impl Recipe for Python {
    type Skill = PySkill;
    type Toolchain = PyToolchain;

    fn language(&self) -> Language {
        Language::Python
    }

    fn marker(&self) -> &'static str {
        MANIFEST
    }

    fn kind(&self) -> &'static str {
        "a Python module with its pyproject.toml"
    }

    fn read(&self, dir: &Path, _opts: &BuildOptions) -> Result<PySkill, BuildError> {
        let path = dir.join(MANIFEST);
        let bad = |message: String| BuildError::BadSkillFile {
            path: path.clone(),
            message,
        };
        let text = guest::read_text(&path)?;
        let file: PyProject = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let Some(project) = file.project else {
            return Err(bad(
                "no [project] table; give the skill's `name`, `version` and `description` there"
                    .into(),
            ));
        };
        let version = project.version.ok_or_else(|| {
            bad("[project] has no `version`; give one, e.g. version = \"0.1.0\"".into())
        })?;
        let module = file
            .tool
            .skillhost
            .module
            .unwrap_or_else(|| "app".to_string());
        let source = dir.join(format!("{}.py", module.replace('.', "/")));
        if !source.is_file() && !dir.join(&module).join("__init__.py").is_file() {
            return Err(bad(format!(
                "the skill's module `{module}` is not there ({} is missing); write it, or name \
                 another with [tool.skillhost] module = \"...\"",
                source.display()
            )));
        }
        let world = guest::world(dir, file.tool.skillhost.world.as_deref())?;
        let authors = project
            .authors
            .into_iter()
            .filter_map(|a| match (a.name, a.email) {
                (Some(name), Some(email)) => Some(format!("{name} <{email}>")),
                (Some(name), None) => Some(name),
                (None, Some(email)) => Some(email),
                (None, None) => None,
            })
            .collect();
        let url = |key: &str| {
            project
                .urls
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.clone())
        };
        Ok(PySkill {
            dir: dir.to_path_buf(),
            identity: ComponentMetadata {
                name: project.name,
                version,
                description: project.description,
                authors,
                license: project.license.map(|l| match l {
                    License::Expression(s) | License::Table { text: s } => s,
                }),
                repository: url("repository").or_else(|| url("source")),
                homepage: url("homepage"),
            },
            module,
            world,
        })
    }

    fn identity(&self, skill: &PySkill) -> ComponentMetadata {
        skill.identity.clone()
    }

    fn default_build_dir(&self, skill: &PySkill) -> PathBuf {
        skill.dir.join("target").join("skill-build")
    }

    fn toolchain(&self, _skill: &PySkill, _opts: &BuildOptions) -> Result<PyToolchain, BuildError> {
        let missing = BuildError::MissingTool {
            language: Language::Python,
            tool: "componentize-py",
            install: INSTALL,
        };
        let program = guest::find_program(&["componentize-py"]).ok_or(missing)?;
        let version = guest::output_of(&program, &["--version"]).unwrap_or_default();
        let version = version
            .strip_prefix("componentize-py ")
            .unwrap_or(&version)
            .to_string();
        if version != COMPONENTIZE_PY_VERSION {
            // Another release may build different bytes, or not at all.
            tracing::warn!(
                found = %version, pinned = COMPONENTIZE_PY_VERSION,
                "componentize-py is not the pinned release"
            );
        }
        Ok(PyToolchain { program, version })
    }

    fn target(&self, _toolchain: &PyToolchain) -> String {
        "wasm32-wasip2 (CPython)".into()
    }

    fn describe(&self, toolchain: &PyToolchain) -> String {
        format!(
            "componentize-py {} ({})",
            toolchain.version,
            toolchain.program.display()
        )
    }

    fn build(
        &self,
        skill: &PySkill,
        toolchain: &PyToolchain,
        build_dir: &Path,
        quiet: bool,
    ) -> Result<Artifact, BuildError> {
        let sdk = build_dir.join("python-sdk");
        guest::create_dir(&sdk)?;
        guest::write(&sdk.join("skillhost_sdk.py"), SDK.as_bytes())?;
        let out = build_dir.join(format!("{}.componentize-py.wasm", skill.identity.name));
        let mut cmd = Command::new(&toolchain.program);
        cmd.current_dir(&skill.dir)
            // What the build may read of the environment: nothing that
            // changes the bytes.
            .env("PYTHONHASHSEED", "0")
            .env("SOURCE_DATE_EPOCH", "0")
            .env_remove("PYTHONPATH")
            .arg("-d")
            .arg(guest::WIT_DIR)
            .arg("-w")
            .arg(&skill.world.name)
            .arg("componentize")
            .arg("-p")
            .arg(".")
            .arg("-p")
            .arg(&sdk)
            .arg(&skill.module)
            .arg("-o")
            .arg(&out);
        guest::run(cmd, &skill.identity.name, quiet)?;
        Ok(Artifact {
            path: out,
            kind: ArtifactKind::Component,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn skill_dir(pyproject: &str) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(MANIFEST), pyproject).unwrap();
        std::fs::write(tmp.path().join("app.py"), "").unwrap();
        std::fs::create_dir(tmp.path().join("wit")).unwrap();
        std::fs::write(
            tmp.path().join("wit/world.wit"),
            "package skillhost:demo@0.1.0;\nworld demo { export run: func(); }\n",
        )
        .unwrap();
        tmp
    }

    #[test]
    fn the_identity_comes_from_pyproject() {
        let tmp = skill_dir(
            r#"[project]
name = "demo"
version = "1.2.3"
description = "A demo"
license = "MIT"
authors = [{ name = "A", email = "a@example.org" }]
urls = { Repository = "https://example.org/demo" }
"#,
        );
        let skill = Python.read(tmp.path(), &BuildOptions::default()).unwrap();
        assert_eq!(skill.identity.name, "demo");
        assert_eq!(skill.identity.version, "1.2.3");
        assert_eq!(skill.identity.license.as_deref(), Some("MIT"));
        assert_eq!(skill.identity.authors, ["A <a@example.org>"]);
        assert_eq!(
            skill.identity.repository.as_deref(),
            Some("https://example.org/demo")
        );
        assert_eq!(skill.module, "app");
        assert_eq!(skill.world.name, "demo");
    }

    #[test]
    fn a_bad_pyproject_is_named_with_the_fix() {
        let tmp = skill_dir("[tool.other]\n");
        let err = Python
            .read(tmp.path(), &BuildOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("no [project] table"), "{err}");

        let tmp = skill_dir(
            "[project]\nname = \"x\"\nversion = \"1\"\n[tool.skillhost]\nmodule = \"main\"\n",
        );
        let err = Python
            .read(tmp.path(), &BuildOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("main.py"), "{err}");

        let tmp = skill_dir(
            "[project]\nname = \"x\"\nversion = \"1\"\n[tool.skillhost]\nmodul = \"x\"\n",
        );
        let err = Python
            .read(tmp.path(), &BuildOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("modul"), "{err}");
    }
}
