//! What the recipes of the languages other than Rust share: the skill's
//! world read from its `wit/` folder, finding a program on `PATH`, and
//! running a toolchain with its stderr kept for the error.
//!
//! Must not: know any one language's files or flags.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::BuildError;

/// How many lines of a toolchain's stderr an error keeps.
const STDERR_TAIL_LINES: usize = 30;

/// The folder of a skill's WIT: its world in `world.wit`, the contract in
/// `deps/`.
pub const WIT_DIR: &str = "wit";

/// A skill's world, as its `wit/` folder declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct World {
    /// The world's name (`echo`).
    pub name: String,
    /// Its package's name without namespace (`echo-c` of `skillhost:echo-c`).
    pub package: String,
    /// Its package's version, if it has one.
    pub version: Option<String>,
    /// The world's doc comment, if it has one.
    pub docs: Option<String>,
    /// Whether the world exports `run` as an `async func`: the skill is
    /// then built for the component model's async ABI (WASI 0.3).
    pub async_run: bool,
}

/// Reads the world of the skill in `dir` from `dir/wit` (the one world of
/// its root package, or the one named `wanted`).
pub fn world(dir: &Path, wanted: Option<&str>) -> Result<World, BuildError> {
    let wit = dir.join(WIT_DIR);
    if !wit.is_dir() {
        return Err(BuildError::BadSkillFile {
            path: wit,
            message: "missing: a skill declares its world in wit/world.wit, with the contract \
                      copied to wit/deps/skillhost-skill/skill.wit (see wit/README.md)"
                .into(),
        });
    }
    let mut resolve = wit_parser::Resolve::default();
    let (package, _) = resolve
        .push_dir(&wit)
        .map_err(|e| BuildError::BadSkillFile {
            path: wit.clone(),
            message: format!("{e:#}"),
        })?;
    let id = resolve
        .select_world(&[package], wanted)
        .map_err(|e| BuildError::BadSkillFile {
            path: wit.clone(),
            message: format!("{e:#}; name the skill's one world there"),
        })?;
    let world = &resolve.worlds[id];
    let name = &resolve.packages[package].name;
    let async_run = world.exports.iter().any(|(key, item)| {
        matches!(
            (key, item),
            (wit_parser::WorldKey::Name(n), wit_parser::WorldItem::Function(f))
                if n == "run" && matches!(f.kind, wit_parser::FunctionKind::AsyncFreestanding)
        )
    });
    Ok(World {
        name: world.name.clone(),
        package: name.name.clone(),
        version: name.version.as_ref().map(|v| v.to_string()),
        docs: world.docs.contents.clone(),
        async_run,
    })
}

/// Where `scripts/install-guest-toolchains.sh` installs the toolchains that
/// are not system packages (the npm ones): `$SKILLHOST_TOOLCHAINS`, else
/// `$HOME/.cache/skillhost/toolchains`.
pub fn toolchains_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("SKILLHOST_TOOLCHAINS") {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/skillhost/toolchains"))
}

/// The first of `names` found as an executable file on `PATH`.
pub fn find_program(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in names {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join(name);
            if is_executable(&candidate) {
                return Some(candidate);
            }
        }
    }
    None
}

/// Whether `path` is a file this user may execute.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What `program --version`-style `args` print on stdout, trimmed; `None` if
/// it does not run or fails.
pub fn output_of(program: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Runs `cmd`, the toolchain of `package`; passes its stderr through unless
/// `quiet`, and keeps its last lines for the error if it fails.
pub fn run(mut cmd: Command, package: &str, quiet: bool) -> Result<(), BuildError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    tracing::debug!(command = ?cmd, "guest toolchain");
    let mut child = cmd.spawn().map_err(|source| BuildError::Spawn {
        program: program.clone(),
        source,
    })?;
    // Both streams go to one tail: the toolchains print their errors on
    // either.
    let tail = std::sync::Arc::new(std::sync::Mutex::new(VecDeque::new()));
    let pump = |stream: Box<dyn std::io::Read + Send>| {
        let tail = tail.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if !quiet {
                    eprintln!("{line}");
                }
                let mut tail = tail.lock().unwrap_or_else(|p| p.into_inner());
                if tail.len() == STDERR_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        })
    };
    let out = pump(Box::new(child.stdout.take().expect("stdout is piped")));
    let err = pump(Box::new(child.stderr.take().expect("stderr is piped")));
    let status = child.wait().map_err(|source| BuildError::Spawn {
        program: program.clone(),
        source,
    })?;
    let _ = out.join();
    let _ = err.join();
    if status.success() {
        return Ok(());
    }
    let tail = tail.lock().unwrap_or_else(|p| p.into_inner());
    Err(BuildError::ToolFailed {
        package: package.to_string(),
        program,
        status: status.to_string(),
        tail: Vec::from(tail.clone()).join("\n"),
    })
}

/// Runs `cmd` and returns what it printed on stdout; its stderr is the
/// error if it fails.
pub fn capture(mut cmd: Command, package: &str) -> Result<Vec<u8>, BuildError> {
    let program = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|source| BuildError::Spawn {
            program: program.clone(),
            source,
        })?;
    if out.status.success() {
        return Ok(out.stdout);
    }
    Err(BuildError::ToolFailed {
        package: package.to_string(),
        program,
        status: out.status.to_string(),
        tail: crate::tail(&String::from_utf8_lossy(&out.stderr), STDERR_TAIL_LINES),
    })
}

/// Creates `dir` (and its parents).
pub fn create_dir(dir: &Path) -> Result<(), BuildError> {
    std::fs::create_dir_all(dir).map_err(|source| BuildError::Io {
        path: dir.to_path_buf(),
        source,
    })
}

/// Writes `bytes` to `path`.
pub fn write(path: &Path, bytes: &[u8]) -> Result<(), BuildError> {
    std::fs::write(path, bytes).map_err(|source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads the text file at `path`.
pub fn read_text(path: &Path) -> Result<String, BuildError> {
    std::fs::read_to_string(path).map_err(|source| BuildError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// The files directly in `dir` whose names end with `.{extension}`, sorted
/// (so the toolchain sees them in the same order on every machine).
pub fn files_with_extension(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_file() && path.extension().is_some_and(|e| e == extension))
        .collect();
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_world_and_its_package_are_read_from_wit() {
        let tmp = tempfile::tempdir().unwrap();
        let err = world(tmp.path(), None).unwrap_err();
        assert!(err.to_string().contains("wit/world.wit"), "{err}");

        let wit = tmp.path().join("wit");
        std::fs::create_dir(&wit).unwrap();
        std::fs::write(
            wit.join("world.wit"),
            "package skillhost:echo-c@0.2.0;\n/// Repeats.\nworld echo { export run: func(); }\n",
        )
        .unwrap();
        let found = world(tmp.path(), None).unwrap();
        assert_eq!(found.name, "echo");
        assert_eq!(found.package, "echo-c");
        assert_eq!(found.version.as_deref(), Some("0.2.0"));
        assert_eq!(found.docs.as_deref(), Some("Repeats."));

        std::fs::write(wit.join("world.wit"), "package a:b;\nworld {").unwrap();
        let err = world(tmp.path(), None).unwrap_err();
        assert!(err.to_string().contains("wit"), "{err}");
    }

    #[test]
    fn a_failing_tool_reports_its_last_lines() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo one; echo two >&2; exit 3"]);
        let err = run(cmd, "demo", true).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("demo"), "{text}");
        assert!(text.contains("one") && text.contains("two"), "{text}");
        let err = run(Command::new("/nonexistent/tool"), "demo", true).unwrap_err();
        assert!(err.is_environment(), "{err}");
    }
}
