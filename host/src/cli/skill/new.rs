//! `host skill new NAME --lang LANG [--dir DIR] [--async]`: a new skill's directory
//! from the templates of `skillhost-build` (`scaffold`), ready for `host
//! skill build`.

use std::path::{Path, PathBuf};

use skillhost_build::scaffold::{self, ScaffoldOptions};

use super::super::common::{CliResult, Failure, print_json};

#[derive(Debug, clap::Args)]
pub struct NewArgs {
    /// The skill's id: kebab-case (`word-count`); its package, world and directory name.
    pub name: String,
    /// The language: rust, python, js, c or zig.
    #[arg(long, value_name = "LANG")]
    pub lang: String,
    /// The directory to create (absent or empty) [default: ./NAME].
    #[arg(long, value_name = "PATH")]
    pub dir: Option<PathBuf>,
    /// Rust: the Skillhost Rust SDK the skill depends on by path [default:
    /// the `sdk/` of the checkout this binary was built from].
    #[arg(long, value_name = "DIR")]
    pub sdk: Option<PathBuf>,
    /// An async skill (WASI 0.3): its world exports `run` as an `async
    /// func`, its code an `async fn run`, and the host calls it on its
    /// concurrent engine. Rust only.
    #[arg(long = "async")]
    pub async_run: bool,
    /// Print what was written as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: NewArgs) -> CliResult {
    let language = scaffold::language_named(&args.lang).map_err(Failure::bad_input)?;
    let rust_sdk = args
        .sdk
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../sdk"));
    let opts = ScaffoldOptions {
        dir: args.dir.unwrap_or_else(|| PathBuf::from(&args.name)),
        name: args.name,
        language,
        rust_sdk: Some(rust_sdk),
        async_run: args.async_run,
    };
    let report = scaffold::scaffold(&opts).map_err(|e| {
        if e.is_environment() {
            Failure::environment(e)
        } else {
            Failure::bad_input(e)
        }
    })?;
    if args.json {
        return print_json(&report);
    }
    println!("{report}");
    Ok(())
}
