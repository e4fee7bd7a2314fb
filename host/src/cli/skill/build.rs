//! `host skill build`: a skill's source directory (Rust, JavaScript, Python
//! or C) to a component file, with the toolchain this machine has (see
//! `scripts/install-wasm-toolchain.sh` and
//! `scripts/install-guest-toolchains.sh`).

use std::path::PathBuf;

use anyhow::Context;

use skillhost_build::{BuildOptions, ToolchainChoice, build_skill};

#[derive(Debug, clap::Args)]
pub struct BuildArgs {
    /// The skill's directory (its Cargo.toml, package.json, pyproject.toml,
    /// or C sources beside wit/), e.g. skills/echo.
    pub skill_dir: PathBuf,
    /// Where to write the component [default: <build dir>/<name>.wasm; for
    /// Rust, <cargo target dir>/skill-build, else <skill>/target/skill-build].
    #[arg(long, short, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Build for WASI (wasm32-wasip1 + preview1 adapter), for skills that use
    /// std's stderr, clocks, random or env; pure skills are smaller.
    #[arg(long)]
    pub wasi: bool,
    /// Which Rust toolchain to build with.
    #[arg(long, value_enum, default_value_t = ToolchainArg::Auto)]
    pub toolchain: ToolchainArg,
    /// Cargo's target directory for skill builds [default: <cargo target dir>/skill-build].
    #[arg(long, value_name = "DIR")]
    pub target_dir: Option<PathBuf>,
    /// Do not show cargo's progress (its errors are still shown on failure).
    #[arg(long)]
    pub quiet: bool,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolchainArg {
    /// rustup when it has the Wasm target, else Debian's rustc-web.
    Auto,
    /// rustup's toolchain with the Wasm target installed.
    Rustup,
    /// Debian's rustc-web building std from rust-web-src.
    Debian,
}

pub fn run(args: BuildArgs) -> anyhow::Result<()> {
    let opts = BuildOptions {
        skill_dir: args.skill_dir,
        out: args.out,
        wasi: args.wasi,
        toolchain: match args.toolchain {
            ToolchainArg::Auto => ToolchainChoice::Auto,
            ToolchainArg::Rustup => ToolchainChoice::Rustup,
            ToolchainArg::Debian => ToolchainChoice::Debian,
        },
        target_dir: args.target_dir,
        quiet: args.quiet || args.json,
    };
    let report = build_skill(&opts)?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).context("encoding the build report")?
        );
        return Ok(());
    }
    println!(
        "built {} {} -> {}",
        report.package,
        report.version,
        report.output.display()
    );
    println!(
        "  size    {} bytes (core module {} bytes)",
        report.size, report.core_size
    );
    println!("  sha256  {}", report.sha256);
    println!("  target  {} via {}", report.target, report.toolchain);
    println!(
        "  imports {}",
        if report.imports.is_empty() {
            "none".to_string()
        } else {
            report.imports.join(", ")
        }
    );
    println!(
        "  time    {:.1} s ({} toolchain {:.1} s)",
        report.total_time.as_secs_f64(),
        report.language,
        report.cargo_time.as_secs_f64()
    );
    Ok(())
}
