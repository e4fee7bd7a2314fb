//! The C recipe: a skill is a directory with its world in `wit/` and C
//! sources (`*.c`) beside it. Its identity is its world's package
//! (`package skillhost:echo-c@0.1.0` → `echo-c` 0.1.0) and the world's doc
//! comment.
//!
//! The bindings are generated here, in-process, with the `wit-bindgen-c`
//! crate (no `wit-bindgen` binary to install), into `<build dir>/bindings`:
//! `<world>.h`, `<world>.c` and `<world>_component_type.o`, with
//! `skillhost.h` (`sdk/c/skillhost.h`: the helpers C skills share, shipped
//! inside this crate) beside them. clang compiles
//! the skill against them for `wasm32-wasi` as a reactor, with a 128 KiB
//! stack and the source paths mapped to `.`, so the core module does not
//! depend on where the checkout is. The shared tail encodes it (with the
//! preview1 adapter only if wasi-libc left WASI imports in it).
//!
//! Zig's recipe ([`super::zig`]) builds with the same bindings.
//!
//! Must not: encode, check or write the component.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::guest::{self, World};
use super::{Artifact, ArtifactKind, Language, Recipe};
use crate::componentize::ComponentMetadata;
use crate::{BuildError, BuildOptions};

/// The helpers C skills share (`#include "skillhost.h"`), written next to
/// every build's bindings.
const SKILLHOST_H: &str = include_str!("../../../../sdk/c/skillhost.h");

/// How to install the toolchain, named when it is missing.
pub const INSTALL: &str = "apt-get install -y clang lld wasi-libc libclang-rt-dev-wasm32 (or scripts/install-guest-toolchains.sh c)";

/// The stack of a skill's instance: the linker's default (1 MiB for clang,
/// 16 MiB for Zig) is paid for by every fresh instance.
pub const STACK_SIZE: u32 = 128 << 10;

/// Builds C skills with clang and wasi-libc.
#[derive(Debug, Clone, Copy, Default)]
pub struct C;

/// A skill whose identity is its world's package: C's and Zig's.
#[derive(Debug, Clone)]
pub struct WitSkill {
    pub dir: PathBuf,
    pub identity: ComponentMetadata,
    pub world: World,
    /// The sources, sorted.
    pub sources: Vec<PathBuf>,
}

/// clang with the wasm32-wasi sysroot.
#[derive(Debug, Clone)]
pub struct Clang {
    pub program: PathBuf,
    pub version: String,
}

/// Reads a skill whose sources end with `.{extension}` and whose identity
/// is its world's package.
pub(crate) fn read_wit_skill(dir: &Path, extension: &str) -> Result<WitSkill, BuildError> {
    let world = guest::world(dir, None)?;
    let Some(version) = world.version.clone() else {
        return Err(BuildError::BadSkillFile {
            path: dir.join(guest::WIT_DIR),
            message: format!(
                "the world's package has no version, which is the skill's; write it, e.g. \
                 `package skillhost:{}@0.1.0;`",
                world.package
            ),
        });
    };
    Ok(WitSkill {
        dir: dir.to_path_buf(),
        identity: ComponentMetadata {
            name: world.package.clone(),
            version,
            description: world.docs.clone(),
            ..ComponentMetadata::default()
        },
        world,
        sources: guest::files_with_extension(dir, extension),
    })
}

/// Whether `dir` holds a world and at least one `.{extension}` file.
pub(crate) fn claims_wit_skill(dir: &Path, extension: &str) -> bool {
    dir.join(guest::WIT_DIR).is_dir() && !guest::files_with_extension(dir, extension).is_empty()
}

/// Generates the C bindings of `skill`'s world into `out`: `<world>.h`,
/// `<world>.c` and `<world>_component_type.o`, and writes `skillhost.h`
/// beside them. Returns the `.c` and `.o` files to compile with the skill.
pub(crate) fn bindings(skill: &WitSkill, out: &Path) -> Result<Vec<PathBuf>, BuildError> {
    use wit_bindgen_core::wit_parser::Resolve;
    let wit = skill.dir.join(guest::WIT_DIR);
    let bad = |message: String| BuildError::BadSkillFile {
        path: wit.clone(),
        message,
    };
    let mut resolve = Resolve::default();
    let (package, _) = resolve.push_dir(&wit).map_err(|e| bad(format!("{e:#}")))?;
    let world = resolve
        .select_world(&[package], Some(&skill.world.name))
        .map_err(|e| bad(format!("{e:#}")))?;
    let mut files = wit_bindgen_core::Files::default();
    wit_bindgen_c::Opts::default()
        .build()
        .generate(&mut resolve, world, &mut files)
        .map_err(|e| BuildError::Componentize {
            package: skill.identity.name.clone(),
            message: format!(
                "generating the C bindings of world `{}`: {e:#}",
                skill.world.name
            ),
        })?;
    guest::create_dir(out)?;
    let mut compile = Vec::new();
    for (name, contents) in files.iter() {
        let path = out.join(name);
        guest::write(&path, contents)?;
        if name.ends_with(".c") || name.ends_with(".o") {
            compile.push(path);
        }
    }
    guest::write(&out.join("skillhost.h"), SKILLHOST_H.as_bytes())?;
    compile.sort();
    Ok(compile)
}

impl Recipe for C {
    type Skill = WitSkill;
    type Toolchain = Clang;

    fn language(&self) -> Language {
        Language::C
    }

    fn marker(&self) -> &'static str {
        "*.c"
    }

    fn kind(&self) -> &'static str {
        "C sources beside wit/world.wit"
    }

    fn claims(&self, dir: &Path) -> bool {
        claims_wit_skill(dir, "c")
    }

    fn read(&self, dir: &Path, _opts: &BuildOptions) -> Result<WitSkill, BuildError> {
        read_wit_skill(dir, "c")
    }

    fn identity(&self, skill: &WitSkill) -> ComponentMetadata {
        skill.identity.clone()
    }

    fn default_build_dir(&self, skill: &WitSkill) -> PathBuf {
        skill.dir.join("target").join("skill-build")
    }

    fn toolchain(&self, _skill: &WitSkill, _opts: &BuildOptions) -> Result<Clang, BuildError> {
        let missing = || BuildError::MissingTool {
            language: Language::C,
            tool: "clang with the wasm32-wasi sysroot",
            install: INSTALL,
        };
        let program = guest::find_program(&[
            "clang", "clang-19", "clang-18", "clang-17", "clang-16", "clang-15", "clang-14",
        ])
        .ok_or_else(missing)?;
        // Debian's wasi-libc; clang finds it by the target's name.
        if !Path::new("/usr/lib/wasm32-wasi/libc.a").is_file()
            && !Path::new("/usr/share/wasi-sysroot").is_dir()
        {
            return Err(missing());
        }
        let version = guest::output_of(&program, &["--version"])
            .and_then(|v| v.lines().next().map(str::to_string))
            .unwrap_or_default();
        Ok(Clang { program, version })
    }

    fn target(&self, _toolchain: &Clang) -> String {
        "wasm32-wasi (reactor)".into()
    }

    fn describe(&self, toolchain: &Clang) -> String {
        toolchain.version.clone()
    }

    fn build(
        &self,
        skill: &WitSkill,
        toolchain: &Clang,
        build_dir: &Path,
        quiet: bool,
    ) -> Result<Artifact, BuildError> {
        let generated = build_dir.join("bindings");
        let bindings = bindings(skill, &generated)?;
        let out = build_dir.join(format!("{}.core.wasm", skill.identity.name));
        let mut cmd = Command::new(&toolchain.program);
        cmd.current_dir(&skill.dir)
            .env_remove("CFLAGS")
            .env_remove("LDFLAGS")
            .args(["--target=wasm32-wasi", "-mexec-model=reactor", "-O2"])
            .arg(format!("-Wl,-z,stack-size={STACK_SIZE}"))
            .arg("-Wl,--strip-debug")
            .arg(format!("-ffile-prefix-map={}=.", skill.dir.display()))
            .arg(format!(
                "-ffile-prefix-map={}=bindings",
                generated.display()
            ))
            .arg("-I")
            .arg(&generated)
            .arg("-o")
            .arg(&out);
        for source in &skill.sources {
            cmd.arg(source.strip_prefix(&skill.dir).unwrap_or(source));
        }
        cmd.args(&bindings);
        guest::run(cmd, &skill.identity.name, quiet)?;
        Ok(Artifact {
            path: out,
            kind: ArtifactKind::CoreModule,
        })
    }
}
