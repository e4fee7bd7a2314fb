//! The Zig recipe: a skill is a directory with its world in `wit/` and Zig
//! sources (`*.zig`; the root is `skill.zig`, or the only one) beside it.
//! Its identity is its world's package, as for C.
//!
//! The world's C bindings are generated in-process (as for C,
//! [`super::c::bindings`]), translated to Zig with `zig translate-c` and
//! given to the skill as the module `bindings`; Zig compiles the skill and
//! the bindings' C file for `wasm32-wasi` with its own, newer wasi-libc
//! (which leaves no WASI imports in a skill that only formats strings), a
//! 128 KiB stack instead of Zig's 16 MiB default, and no debug info. Zig
//! comes from PyPI (`ziglang`) and runs as `python3 -m ziglang`.
//!
//! Must not: encode, check or write the component.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::c::{STACK_SIZE, WitSkill};
use super::guest;
use super::{Artifact, ArtifactKind, Language, Recipe};
use crate::componentize::ComponentMetadata;
use crate::{BuildError, BuildOptions};

/// How to install the toolchain, named when it is missing.
pub const INSTALL: &str =
    "pip install ziglang==0.17.1 (or scripts/install-guest-toolchains.sh zig)";

/// Builds Zig skills with the `ziglang` package's Zig.
#[derive(Debug, Clone, Copy, Default)]
pub struct Zig;

/// Zig, as `python3 -m ziglang`.
#[derive(Debug, Clone)]
pub struct ZigToolchain {
    pub python: PathBuf,
    pub version: String,
}

impl ZigToolchain {
    fn zig(&self) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.args(["-m", "ziglang"]);
        cmd
    }
}

impl Recipe for Zig {
    type Skill = WitSkill;
    type Toolchain = ZigToolchain;

    fn language(&self) -> Language {
        Language::Zig
    }

    fn marker(&self) -> &'static str {
        "*.zig"
    }

    fn kind(&self) -> &'static str {
        "Zig sources beside wit/world.wit"
    }

    fn claims(&self, dir: &Path) -> bool {
        super::c::claims_wit_skill(dir, "zig")
    }

    fn read(&self, dir: &Path, _opts: &BuildOptions) -> Result<WitSkill, BuildError> {
        let skill = super::c::read_wit_skill(dir, "zig")?;
        if skill.sources.len() > 1 && !dir.join("skill.zig").is_file() {
            return Err(BuildError::BadSkillFile {
                path: dir.to_path_buf(),
                message: "several .zig files and no skill.zig: name the root source skill.zig"
                    .into(),
            });
        }
        Ok(skill)
    }

    fn identity(&self, skill: &WitSkill) -> ComponentMetadata {
        skill.identity.clone()
    }

    fn default_build_dir(&self, skill: &WitSkill) -> PathBuf {
        skill.dir.join("target").join("skill-build")
    }

    fn toolchain(
        &self,
        _skill: &WitSkill,
        _opts: &BuildOptions,
    ) -> Result<ZigToolchain, BuildError> {
        let missing = || BuildError::MissingTool {
            language: Language::Zig,
            tool: "Zig (the ziglang Python package)",
            install: INSTALL,
        };
        let python = guest::find_program(&["python3", "python"]).ok_or_else(missing)?;
        let version =
            guest::output_of(&python, &["-m", "ziglang", "version"]).ok_or_else(missing)?;
        Ok(ZigToolchain { python, version })
    }

    fn target(&self, _toolchain: &ZigToolchain) -> String {
        "wasm32-wasi (reactor)".into()
    }

    fn describe(&self, toolchain: &ZigToolchain) -> String {
        format!("Zig {} (python3 -m ziglang)", toolchain.version)
    }

    fn build(
        &self,
        skill: &WitSkill,
        toolchain: &ZigToolchain,
        build_dir: &Path,
        quiet: bool,
    ) -> Result<Artifact, BuildError> {
        let generated = build_dir.join("bindings");
        let c_files = super::c::bindings(skill, &generated)?;
        let header = generated.join(format!("{}.h", skill.world.name.replace('-', "_")));
        let translated = generated.join("bindings.zig");
        let cache = build_dir.join("zig-cache");

        let mut translate = toolchain.zig();
        translate
            .current_dir(&skill.dir)
            .arg("translate-c")
            .arg(&header)
            .args(["-target", "wasm32-wasi", "-lc"])
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--global-cache-dir")
            .arg(&cache);
        let out = guest::capture(translate, &skill.identity.name)?;
        guest::write(&translated, &out)?;

        let root = if skill.sources.len() == 1 {
            skill.sources[0].clone()
        } else {
            skill.dir.join("skill.zig")
        };
        let core = build_dir.join(format!("{}.core.wasm", skill.identity.name));
        let mut cmd = toolchain.zig();
        cmd.current_dir(&skill.dir)
            .arg("build-exe")
            .args(["-target", "wasm32-wasi", "-fno-entry", "-rdynamic"])
            .args(["-O", "ReleaseSmall", "-fstrip", "-lc"])
            .arg("--stack")
            .arg(STACK_SIZE.to_string())
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--global-cache-dir")
            .arg(&cache)
            .args(["--dep", "bindings"])
            .arg(format!("-Mroot={}", root.display()))
            .arg("-I")
            .arg(&generated)
            .args(&c_files)
            .arg(format!("-Mbindings={}", translated.display()))
            .arg(format!("-femit-bin={}", core.display()));
        guest::run(cmd, &skill.identity.name, quiet)?;
        Ok(Artifact {
            path: core,
            kind: ArtifactKind::CoreModule,
        })
    }
}
