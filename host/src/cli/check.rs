//! `host check`: a scenario through the static checker, without running it.

use clap::Args;
use serde_json::json;

use super::common::{CliResult, Failure, Globals, RegistryArgs, load_checked, print_json, shown};
use skillhost_scenario as scenario;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The scenario file (or name).
    pub scenario: String,
    /// Print the result (ok, errors, warnings) as one JSON object.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

pub fn check(args: CheckArgs, globals: &Globals) -> CliResult {
    let path = scenario::resolve(&args.scenario).map_err(Failure::bad_input)?;
    match load_checked(&path, globals, args.registry)? {
        Ok(loaded) => {
            if args.json {
                print_json(&json!({
                    "ok": true,
                    "scenario": loaded.scenario.name,
                    "nodes": loaded.scenario.nodes.len(),
                    "errors": [],
                    "warnings": loaded
                        .warnings
                        .iter()
                        .map(|w| w.to_json(scenario::Level::Warning))
                        .collect::<Vec<_>>(),
                }))?;
            } else {
                for warning in &loaded.warnings {
                    eprintln!("warning: {}", shown(&warning.to_string()));
                }
                println!(
                    "{}: ok ({} nodes, {} skills)",
                    path.display(),
                    loaded.scenario.nodes.len(),
                    loaded.skills.len()
                );
            }
            Ok(())
        }
        Err((report, environment)) => {
            // A registry that cannot be reached is the machine's problem.
            let code = if environment { 3 } else { 2 };
            if args.json {
                print_json(&report.to_json())?;
                return Err(Failure {
                    code,
                    message: String::new(),
                });
            }
            Err(Failure {
                code,
                message: report.to_string(),
            })
        }
    }
}
