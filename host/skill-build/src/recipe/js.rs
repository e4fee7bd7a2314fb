//! The JavaScript recipe: a skill is a directory with a `package.json` (its
//! identity; `main` is the skill's module, `skill.js` by default), its world
//! in `wit/`, and an ES module exporting `run` and `manifest`.
//!
//! Two engines, chosen with `"skillhost": {"engine": …}` in `package.json`:
//! - `quickjs` (the default): componentize-qjs, with `--sync` unless the
//!   world exports `run` as an `async func` (then its default, the
//!   component model's async ABI: a WASI 0.3 component, which the host
//!   calls on its concurrent engine). About 1.6 MB, compiled in under 2 s,
//!   ~100 k fuel a call; no `TextEncoder`.
//! - `starlingmonkey`: componentize-js (SpiderMonkey), always with
//!   `-d stdio random clocks http fetch-event`, so the component imports no
//!   `wasi:http`. About 12 MB, 15-20 s to compile, ~1.35 M fuel a call.
//!   Synchronous only: a world whose `run` is `async` is refused, naming
//!   the `quickjs` engine.
//!
//! Must not: encode, check or write the component (the shared tail does).

use std::path::{Path, PathBuf};
use std::process::Command;

use super::guest::{self, World};
use super::{Artifact, ArtifactKind, Language, Recipe};
use crate::componentize::ComponentMetadata;
use crate::{BuildError, BuildOptions};

/// The file that makes a directory a JavaScript skill.
const MANIFEST: &str = "package.json";

/// How to install the toolchains, named when they are missing.
pub const INSTALL: &str = "scripts/install-guest-toolchains.sh js (npm install --prefix ~/.cache/skillhost/toolchains/js @bytecodealliance/jco@1.35.0 @bytecodealliance/componentize-js@0.23.0)";

/// Builds JavaScript skills with componentize-qjs or componentize-js.
#[derive(Debug, Clone, Copy, Default)]
pub struct JavaScript;

/// The JavaScript engine a skill is built on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    QuickJs,
    StarlingMonkey,
}

impl Engine {
    fn program(self) -> &'static str {
        match self {
            Engine::QuickJs => "componentize-qjs",
            Engine::StarlingMonkey => "componentize-js",
        }
    }
}

/// A JavaScript skill: its identity, its module, engine and world.
#[derive(Debug, Clone)]
pub struct JsSkill {
    pub dir: PathBuf,
    pub identity: ComponentMetadata,
    /// The module exporting `run` and `manifest`, relative to `dir`.
    pub main: String,
    pub engine: Engine,
    pub world: World,
}

/// The engine's componentizer, found on this machine.
#[derive(Debug, Clone)]
pub struct JsToolchain {
    pub program: PathBuf,
    pub engine: Engine,
    /// Whether the skill is built for the async ABI (its `run` is `async`).
    pub async_abi: bool,
}

#[derive(serde::Deserialize)]
struct PackageJson {
    name: Option<String>,
    version: Option<String>,
    description: Option<String>,
    license: Option<String>,
    author: Option<serde_json::Value>,
    homepage: Option<String>,
    repository: Option<serde_json::Value>,
    main: Option<String>,
    #[serde(default)]
    skillhost: SkillhostTable,
}

#[derive(serde::Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SkillhostTable {
    engine: Option<Engine>,
    world: Option<String>,
}

impl Recipe for JavaScript {
    type Skill = JsSkill;
    type Toolchain = JsToolchain;

    fn language(&self) -> Language {
        Language::JavaScript
    }

    fn marker(&self) -> &'static str {
        MANIFEST
    }

    fn kind(&self) -> &'static str {
        "a JavaScript module with its package.json"
    }

    fn read(&self, dir: &Path, _opts: &BuildOptions) -> Result<JsSkill, BuildError> {
        let path = dir.join(MANIFEST);
        let bad = |message: String| BuildError::BadSkillFile {
            path: path.clone(),
            message,
        };
        let text = guest::read_text(&path)?;
        let file: PackageJson = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let name = file
            .name
            .ok_or_else(|| bad("no `name`; give the skill's, e.g. \"name\": \"echo-js\"".into()))?;
        let version = file
            .version
            .ok_or_else(|| bad("no `version`; give one, e.g. \"version\": \"0.1.0\"".into()))?;
        let main = file.main.unwrap_or_else(|| "skill.js".to_string());
        if !dir.join(&main).is_file() {
            return Err(bad(format!(
                "the skill's module `{main}` is not there; write it, or name another with \"main\""
            )));
        }
        let world = guest::world(dir, file.skillhost.world.as_deref())?;
        let text_of = |value: Option<serde_json::Value>, key: &str| match value {
            Some(serde_json::Value::String(s)) => Some(s),
            Some(serde_json::Value::Object(map)) => {
                map.get(key).and_then(|v| v.as_str()).map(str::to_string)
            }
            _ => None,
        };
        Ok(JsSkill {
            dir: dir.to_path_buf(),
            identity: ComponentMetadata {
                name,
                version,
                description: file.description,
                authors: text_of(file.author, "name").into_iter().collect(),
                license: file.license,
                repository: text_of(file.repository, "url"),
                homepage: file.homepage,
            },
            main,
            engine: file.skillhost.engine.unwrap_or(Engine::QuickJs),
            world,
        })
    }

    fn identity(&self, skill: &JsSkill) -> ComponentMetadata {
        skill.identity.clone()
    }

    fn default_build_dir(&self, skill: &JsSkill) -> PathBuf {
        skill.dir.join("target").join("skill-build")
    }

    fn toolchain(&self, skill: &JsSkill, _opts: &BuildOptions) -> Result<JsToolchain, BuildError> {
        if skill.world.async_run && skill.engine == Engine::StarlingMonkey {
            return Err(BuildError::BadSkillFile {
                path: skill.dir.join(MANIFEST),
                message: "the world exports `run` as an `async func`, and componentize-js \
                          (\"engine\": \"starlingmonkey\") builds synchronous components only: \
                          use \"engine\": \"quickjs\", or make `run` a plain `func`"
                    .into(),
            });
        }
        let name = skill.engine.program();
        let mut candidates = vec![skill.dir.join("node_modules/.bin").join(name)];
        if let Some(dir) = guest::toolchains_dir() {
            candidates.push(dir.join("js/node_modules/.bin").join(name));
        }
        let program = candidates
            .into_iter()
            .find(|p| guest::is_executable(p))
            .or_else(|| guest::find_program(&[name]))
            .ok_or(BuildError::MissingTool {
                language: Language::JavaScript,
                tool: name,
                install: INSTALL,
            })?;
        Ok(JsToolchain {
            program,
            engine: skill.engine,
            async_abi: skill.world.async_run,
        })
    }

    fn target(&self, toolchain: &JsToolchain) -> String {
        match toolchain.engine {
            Engine::QuickJs if toolchain.async_abi => "wasm32-wasip2 (QuickJS, async ABI)".into(),
            Engine::QuickJs => "wasm32-wasip2 (QuickJS, synchronous ABI)".into(),
            Engine::StarlingMonkey => "wasm32-wasip2 (StarlingMonkey)".into(),
        }
    }

    fn describe(&self, toolchain: &JsToolchain) -> String {
        toolchain.program.display().to_string()
    }

    fn build(
        &self,
        skill: &JsSkill,
        toolchain: &JsToolchain,
        build_dir: &Path,
        quiet: bool,
    ) -> Result<Artifact, BuildError> {
        guest::create_dir(build_dir)?;
        let out = build_dir.join(format!(
            "{}.{}.wasm",
            skill.identity.name,
            skill.engine.program()
        ));
        let mut cmd = Command::new(&toolchain.program);
        cmd.current_dir(&skill.dir).env("SOURCE_DATE_EPOCH", "0");
        match toolchain.engine {
            Engine::QuickJs => {
                cmd.arg("--wit")
                    .arg(guest::WIT_DIR)
                    .arg("--js")
                    .arg(&skill.main)
                    .arg("--world")
                    .arg(&skill.world.name)
                    // Relative imports (`./echo.js`) resolve in the skill.
                    .args(["--module-root", "."]);
                // componentize-qjs's default is the async ABI (WASI 0.3),
                // which a world asks for by exporting `run` as an `async
                // func`; any other world gets the synchronous ABI, whose
                // calls cost less.
                if !skill.world.async_run {
                    cmd.arg("--sync");
                }
                cmd.arg("-o").arg(&out);
            }
            Engine::StarlingMonkey => {
                cmd.arg(&skill.main)
                    .arg("--wit")
                    .arg(guest::WIT_DIR)
                    .arg("--world-name")
                    .arg(&skill.world.name)
                    // Without `http` and `fetch-event` it imports no
                    // `wasi:http`, which the host does not provide.
                    .args(["-d", "stdio", "random", "clocks", "http", "fetch-event"])
                    .arg("-o")
                    .arg(&out);
            }
        }
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

    fn skill_dir(package: &str) -> tempfile::TempDir {
        skill_dir_exporting(package, "func()")
    }

    /// A skill directory whose world exports `run: RUN`.
    fn skill_dir_exporting(package: &str, run: &str) -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(MANIFEST), package).unwrap();
        std::fs::write(tmp.path().join("skill.js"), "").unwrap();
        std::fs::create_dir(tmp.path().join("wit")).unwrap();
        std::fs::write(
            tmp.path().join("wit/world.wit"),
            format!("package skillhost:demo@0.1.0;\nworld demo {{ export run: {run}; }}\n"),
        )
        .unwrap();
        tmp
    }

    /// componentize-js (StarlingMonkey) builds synchronous components
    /// only: an async world is refused before any tool is looked for, with
    /// the file and both ways out; QuickJS takes it.
    #[test]
    fn starlingmonkey_refuses_an_async_world_with_the_fix() {
        let toolchain = |engine: &str| {
            let tmp = skill_dir_exporting(
                &format!(
                    r#"{{"name": "demo", "version": "1.0.0", "skillhost": {{"engine": "{engine}"}}}}"#
                ),
                "async func()",
            );
            let skill = JavaScript
                .read(tmp.path(), &BuildOptions::default())
                .unwrap();
            assert!(skill.world.async_run);
            JavaScript.toolchain(&skill, &BuildOptions::default())
        };
        let message = toolchain("starlingmonkey").unwrap_err().to_string();
        assert!(
            message.contains(MANIFEST)
                && message.contains("componentize-js")
                && message.contains("\"engine\": \"quickjs\"")
                && message.contains("plain `func`"),
            "{message}"
        );
        if let Err(err) = toolchain("quickjs") {
            // Only a missing componentize-qjs, never the async refusal.
            assert!(matches!(err, BuildError::MissingTool { .. }), "{err}");
        }
    }

    #[test]
    fn the_identity_and_engine_come_from_package_json() {
        let tmp = skill_dir(
            r#"{"name": "demo", "version": "1.0.0", "description": "A demo",
                "license": "MIT", "author": {"name": "A"}}"#,
        );
        let skill = JavaScript
            .read(tmp.path(), &BuildOptions::default())
            .unwrap();
        assert_eq!(skill.identity.name, "demo");
        assert_eq!(skill.identity.authors, ["A"]);
        assert_eq!(skill.engine, Engine::QuickJs);
        assert_eq!(skill.main, "skill.js");

        let tmp = skill_dir(
            r#"{"name": "demo", "version": "1.0.0", "skillhost": {"engine": "starlingmonkey"}}"#,
        );
        let skill = JavaScript
            .read(tmp.path(), &BuildOptions::default())
            .unwrap();
        assert_eq!(skill.engine, Engine::StarlingMonkey);
    }

    #[test]
    fn a_bad_package_json_is_named_with_the_fix() {
        let tmp = skill_dir(r#"{"version": "1.0.0"}"#);
        let err = JavaScript
            .read(tmp.path(), &BuildOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("no `name`"), "{err}");
        let tmp = skill_dir(r#"{"name": "x", "version": "1", "main": "gone.js"}"#);
        let err = JavaScript
            .read(tmp.path(), &BuildOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("gone.js"), "{err}");
        let tmp = skill_dir(r#"{"name": "x", "version": "1", "skillhost": {"engine": "v8"}}"#);
        let err = JavaScript
            .read(tmp.path(), &BuildOptions::default())
            .unwrap_err();
        assert!(err.to_string().contains("v8"), "{err}");
    }
}
