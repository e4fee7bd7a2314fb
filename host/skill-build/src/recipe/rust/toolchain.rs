//! Finding a Rust toolchain that can build a skill for Wasm, and the exact
//! `cargo build` command line for it.
//!
//! Two kinds of toolchain: rustup with the Wasm target installed, or
//! Debian's `rustc-web` building std from `rust-web-src` with `-Zbuild-std`,
//! which `scripts/install-wasm-toolchain.sh` installs where rustup cannot
//! download targets. Every flag that decides the output bytes is set here, and
//! nothing from the caller's environment (`RUSTFLAGS`, `CARGO_TARGET_DIR`…)
//! is allowed to change them.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::BuildError;

/// The script that installs a toolchain, named in errors.
pub const INSTALL_SCRIPT: &str = "scripts/install-wasm-toolchain.sh";

/// The cargo profile skills are built with. It is defined on the command
/// line (`--config`), so a skill needs nothing in its own `Cargo.toml`.
pub const PROFILE: &str = "skill";

/// Which toolchain to use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ToolchainChoice {
    /// rustup when it has the target installed, otherwise Debian's.
    #[default]
    Auto,
    Rustup,
    Debian,
}

/// A toolchain found on this machine, able to build for `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolchain {
    pub kind: ToolchainKind,
    /// The Rust target triple.
    pub target: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolchainKind {
    /// `cargo` from `PATH` (the rustup proxy), with the target's std
    /// installed by rustup.
    Rustup,
    /// `/usr/bin/cargo` and `/usr/bin/rustc` from Debian's `rustc-web`,
    /// building std from source (`rust-web-src`), linking with `linker`.
    Debian {
        cargo: PathBuf,
        rustc: PathBuf,
        rustdoc: PathBuf,
        linker: PathBuf,
        /// Where `wasi-libc` is, for `wasm32-wasip1`.
        wasi_libc: Option<PathBuf>,
    },
}

impl Toolchain {
    /// A one-line description for reports.
    pub fn describe(&self) -> String {
        match &self.kind {
            ToolchainKind::Rustup => format!("rustup ({})", self.target),
            ToolchainKind::Debian { linker, .. } => format!(
                "Debian rustc-web + build-std ({}, linker {})",
                self.target,
                linker.display()
            ),
        }
    }

    /// The `cargo` program of this toolchain.
    pub fn cargo(&self) -> Command {
        match &self.kind {
            ToolchainKind::Rustup => Command::new("cargo"),
            ToolchainKind::Debian {
                cargo,
                rustc,
                rustdoc,
                ..
            } => {
                let mut cmd = Command::new(cargo);
                // Otherwise rustup's compiler is picked up, which cannot use
                // Debian's std sources.
                cmd.env("RUSTC", rustc)
                    .env("RUSTDOC", rustdoc)
                    .env("RUSTC_BOOTSTRAP", "1");
                cmd
            }
        }
    }

    /// The full `cargo build` for the package whose manifest is `manifest`.
    ///
    /// `remaps` are `(from, to)` path prefixes rewritten in everything the
    /// compiler embeds (panic locations, debug info), so that the bytes do
    /// not depend on where `CARGO_HOME` is (the checkout's own sources are
    /// named relative to it: `super::remaps`).
    pub fn build_command(
        &self,
        manifest: &Path,
        target_dir: &Path,
        remaps: &[(PathBuf, String)],
    ) -> Command {
        let mut cmd = self.cargo();
        for var in [
            "RUSTFLAGS",
            "CARGO_ENCODED_RUSTFLAGS",
            "CARGO_BUILD_RUSTFLAGS",
            "CARGO_TARGET_DIR",
            "CARGO_BUILD_TARGET_DIR",
            "CARGO_BUILD_TARGET",
            "CARGO_INCREMENTAL",
        ] {
            cmd.env_remove(var);
        }
        for (key, _) in std::env::vars_os() {
            if let Some(key) = key.to_str()
                && (key.starts_with("CARGO_PROFILE_")
                    || (key.starts_with("CARGO_TARGET_") && key.ends_with("_RUSTFLAGS")))
            {
                cmd.env_remove(key);
            }
        }
        cmd.arg("build")
            .arg("--lib")
            .arg("--manifest-path")
            .arg(manifest)
            .arg("--target")
            .arg(self.target)
            .arg("--profile")
            .arg(PROFILE)
            .arg("--message-format=json-render-diagnostics");
        for setting in [
            "inherits=\"release\"",
            "opt-level=\"s\"",
            "debug=false",
            "strip=\"symbols\"",
            "lto=true",
            "codegen-units=1",
            "panic=\"abort\"",
            "incremental=false",
            "overflow-checks=false",
            "debug-assertions=false",
        ] {
            cmd.arg("--config")
                .arg(format!("profile.{PROFILE}.{setting}"));
        }
        cmd.env("CARGO_TARGET_DIR", target_dir);

        let mut rustflags: Vec<String> = remaps
            .iter()
            .map(|(from, to)| format!("--remap-path-prefix={}={to}", from.display()))
            .collect();
        // Rust's default wasm stack is 1 MiB, with the live frames at its top:
        // every fresh instance then faults in pages far from the data and heap,
        // and the pooling allocator resets them with madvise (TLB shootdowns).
        // A 128 KiB stack keeps a small skill's working set in the first few
        // pages, which the host keeps resident and resets with a memset.
        rustflags.push(format!("-Clink-arg=-zstack-size={SKILL_STACK_BYTES}"));
        if let ToolchainKind::Debian {
            linker, wasi_libc, ..
        } = &self.kind
        {
            cmd.arg("-Zbuild-std=std,panic_abort");
            cmd.env(
                format!(
                    "CARGO_TARGET_{}_LINKER",
                    self.target.to_uppercase().replace('-', "_")
                ),
                linker,
            );
            if let Some(libc) = wasi_libc {
                rustflags.push("-Clink-self-contained=no".to_string());
                rustflags.push(format!("-Lnative={}", libc.display()));
            }
        }
        // Encoded flags take precedence over every other source of flags and
        // survive paths with spaces; with `--target`, they do not reach build
        // scripts or proc macros.
        cmd.env("CARGO_ENCODED_RUSTFLAGS", rustflags.join("\u{1f}"));
        cmd
    }
}

/// The linear-memory stack of a skill built here.
pub const SKILL_STACK_BYTES: u32 = 128 << 10;

/// Finds a toolchain for a pure skill (`wasm32-unknown-unknown`) or, with
/// `wasi`, for one that uses WASI through the preview1 adapter
/// (`wasm32-wasip1`; `wasm32-wasip2` is accepted from rustup).
pub fn detect(choice: ToolchainChoice, wasi: bool, cwd: &Path) -> Result<Toolchain, BuildError> {
    let rustup_targets: &[&'static str] = if wasi {
        &["wasm32-wasip1", "wasm32-wasip2"]
    } else {
        &["wasm32-unknown-unknown"]
    };
    let debian_target = if wasi {
        "wasm32-wasip1"
    } else {
        "wasm32-unknown-unknown"
    };

    let mut tried = Vec::new();
    if matches!(choice, ToolchainChoice::Auto | ToolchainChoice::Rustup) {
        match rustup_installed_targets(cwd) {
            Ok(installed) => {
                if let Some(target) = rustup_targets
                    .iter()
                    .find(|t| installed.iter().any(|i| i == *t))
                {
                    return Ok(Toolchain {
                        kind: ToolchainKind::Rustup,
                        target,
                    });
                }
                tried.push(format!(
                    "rustup has no {} target installed",
                    rustup_targets.join(" or ")
                ));
            }
            Err(why) => tried.push(why),
        }
    }
    if matches!(choice, ToolchainChoice::Auto | ToolchainChoice::Debian) {
        match debian(wasi) {
            Ok(kind) => {
                return Ok(Toolchain {
                    kind,
                    target: debian_target,
                });
            }
            Err(why) => tried.push(why),
        }
    }
    Err(BuildError::NoToolchain {
        target: if wasi {
            "wasm32-wasip1".to_string()
        } else {
            "wasm32-unknown-unknown".to_string()
        },
        tried: tried.join("; "),
    })
}

fn rustup_installed_targets(cwd: &Path) -> Result<Vec<String>, String> {
    let output = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(cwd)
        .output()
        .map_err(|e| format!("rustup not usable ({e})"))?;
    if !output.status.success() {
        return Err(format!(
            "`rustup target list --installed` failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim().to_string())
        .collect())
}

fn debian(wasi: bool) -> Result<ToolchainKind, String> {
    let cargo = PathBuf::from("/usr/bin/cargo");
    let rustc = PathBuf::from("/usr/bin/rustc");
    let rustdoc = PathBuf::from("/usr/bin/rustdoc");
    for (path, package) in [
        (&rustc, "rustc-web"),
        (&cargo, "cargo-web"),
        (&rustdoc, "rustc-web"),
    ] {
        if !path.exists() {
            return Err(format!(
                "Debian toolchain incomplete: no {} (package {package})",
                path.display()
            ));
        }
    }
    let sysroot = Command::new(&rustc)
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("{} not usable ({e})", rustc.display()))?;
    let sysroot = PathBuf::from(String::from_utf8_lossy(&sysroot.stdout).trim());
    let library = sysroot.join("lib/rustlib/src/rust/library");
    if !library.join("std").is_dir() {
        return Err(format!(
            "Debian toolchain incomplete: no std sources at {} (package rust-web-src)",
            library.display()
        ));
    }
    let linker = find_wasm_ld().ok_or_else(|| {
        "Debian toolchain incomplete: no wasm-ld in PATH (package lld)".to_string()
    })?;
    let wasi_libc = if wasi {
        let dir = PathBuf::from("/usr/lib/wasm32-wasi");
        if !dir.join("libc.a").exists() {
            return Err(format!(
                "Debian toolchain incomplete: no {}/libc.a (package wasi-libc)",
                dir.display()
            ));
        }
        Some(dir)
    } else {
        None
    };
    Ok(ToolchainKind::Debian {
        cargo,
        rustc,
        rustdoc,
        linker,
        wasi_libc,
    })
}

/// `wasm-ld-NN` with the highest NN in `PATH`, else `wasm-ld`. A versioned
/// name is preferred because it names exactly what links the bytes.
fn find_wasm_ld() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let mut best: Option<(u32, PathBuf)> = None;
    for dir in std::env::split_paths(&path) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let version = if name == "wasm-ld" {
                0
            } else if let Some(v) = name.strip_prefix("wasm-ld-")
                && let Ok(v) = v.parse::<u32>()
            {
                v
            } else {
                continue;
            };
            if best.as_ref().is_none_or(|(b, _)| version > *b) {
                best = Some((version, entry.path()));
            }
        }
    }
    best.map(|(_, path)| path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_command_pins_every_output_deciding_flag() {
        let toolchain = Toolchain {
            kind: ToolchainKind::Debian {
                cargo: "/usr/bin/cargo".into(),
                rustc: "/usr/bin/rustc".into(),
                rustdoc: "/usr/bin/rustdoc".into(),
                linker: "/usr/bin/wasm-ld-14".into(),
                wasi_libc: None,
            },
            target: "wasm32-unknown-unknown",
        };
        let cmd = toolchain.build_command(
            Path::new("/w/skills/echo/Cargo.toml"),
            Path::new("/w/target/skill-build"),
            &[("/w".into(), ".".into())],
        );
        let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy()).collect();
        assert!(args.contains(&"-Zbuild-std=std,panic_abort".into()));
        assert!(args.contains(&"profile.skill.strip=\"symbols\"".into()));
        let env: std::collections::HashMap<_, _> = cmd
            .get_envs()
            .map(|(k, v)| (k.to_string_lossy(), v.map(|v| v.to_string_lossy())))
            .collect();
        let rustflags: Vec<&str> = env["CARGO_ENCODED_RUSTFLAGS"]
            .as_deref()
            .unwrap()
            .split('\u{1f}')
            .collect();
        assert_eq!(rustflags[0], "--remap-path-prefix=/w=.");
        assert!(
            rustflags.contains(&format!("-Clink-arg=-zstack-size={SKILL_STACK_BYTES}").as_str()),
            "{rustflags:?}"
        );
        assert_eq!(
            env["CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER"].as_deref(),
            Some("/usr/bin/wasm-ld-14")
        );
        assert_eq!(env["RUSTC_BOOTSTRAP"].as_deref(), Some("1"));
        assert_eq!(env["RUSTFLAGS"], None);
    }
}
