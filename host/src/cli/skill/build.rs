//! `host skill build`: a skill's source directory (Rust, JavaScript, Python
//! or C) to a component file, with the toolchain this machine has (see
//! `scripts/install-wasm-toolchain.sh` and
//! `scripts/install-guest-toolchains.sh`). The component is then compiled
//! into the host's cache (unless `--no-cache`), so the first run that uses
//! it loads it in milliseconds instead of compiling it (seconds for Python
//! and JavaScript).

use std::path::PathBuf;

use skillhost_build::{BuildOptions, ToolchainChoice, build_skill};
use skillhost_runtime::LoadSource;
use skillhost_runtime::cache::FunctionCounts;

use super::super::common::{Failure, Globals};

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

/// What compiling the built component into the cache took, if it was.
#[derive(serde::Serialize)]
pub(super) struct Precompiled {
    /// `compiled`, or `cache` when an identical component was there already.
    pub(super) source: &'static str,
    pub(super) ms: u64,
    /// The functions reused from earlier compiles (any component's: a
    /// Python skill's CPython), compiled now, and refused (damaged, so
    /// compiled again).
    pub(super) functions: FunctionCounts,
}

impl Precompiled {
    /// `compiled in 1.2 s (12950 functions reused, 412 compiled)`, or
    /// `already compiled, loaded in 0.1 s`.
    pub(super) fn summary(&self) -> String {
        let seconds = self.ms as f64 / 1000.0;
        if self.source != "compiled" {
            return format!("already compiled, loaded in {seconds:.1} s");
        }
        let f = &self.functions;
        let mut text = format!(
            "compiled in {seconds:.1} s ({} functions reused, {} compiled",
            f.reused, f.compiled
        );
        if f.refused > 0 {
            text += &format!(", {} refused as damaged", f.refused);
        }
        text + ")"
    }
}

/// Compiles the component at `path` into the host's cache (a no-op with
/// `--no-cache`). A component the runtime refuses is reported as the
/// build's failure: no run could use it.
pub(super) fn precompile(
    path: &std::path::Path,
    globals: &Globals,
) -> Result<Option<Precompiled>, Failure> {
    if globals.no_cache {
        return Ok(None);
    }
    let runtime = globals.runtime(None)?;
    let skill = runtime.load_file(path).map_err(|e| {
        Failure::bad_input(format!(
            "built `{}`, but the host cannot load it: {e}",
            path.display()
        ))
    })?;
    Ok(Some(Precompiled {
        source: match skill.load_stats.source {
            LoadSource::Compiled => "compiled",
            LoadSource::Cache => "cache",
        },
        ms: skill.load_stats.elapsed.as_millis() as u64,
        functions: skill.load_stats.functions,
    }))
}

pub fn run(args: BuildArgs, globals: &Globals) -> Result<(), Failure> {
    let json = args.json;
    let report = build(args)?;
    let precompiled = precompile(&report.output, globals)?;
    if json {
        let mut value = serde_json::to_value(&report)
            .map_err(|e| Failure::environment(format!("encoding the build report: {e}")))?;
        value["precompiled"] = serde_json::to_value(&precompiled).unwrap_or_default();
        println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_default()
        );
        return Ok(());
    }
    print_report(&report);
    if let Some(p) = precompiled {
        println!(
            "  cache   {}: runs load it from the host's cache",
            p.summary()
        );
    }
    Ok(())
}

/// The build itself; a missing toolchain is the machine's problem (exit
/// 3), anything else the input's (2).
fn build(args: BuildArgs) -> Result<skillhost_build::BuildReport, Failure> {
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
    build_skill(&opts).map_err(|e| {
        if e.is_environment() {
            Failure::environment(format!("{:#}", anyhow::Error::from(e)))
        } else {
            Failure::bad_input(format!("{:#}", anyhow::Error::from(e)))
        }
    })
}

fn print_report(report: &skillhost_build::BuildReport) {
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
}
