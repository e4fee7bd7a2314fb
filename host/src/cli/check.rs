//! `host check`: a scenario through the static checker, without running it.

use clap::Args;
use serde_json::json;

use super::common::{CliResult, Failure, Globals, print_json, scenario_dir};
use skillhost_scenario as scenario;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The scenario file (or name).
    pub scenario: String,
    /// Print the result (ok, errors, warnings) as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn check(args: CheckArgs, globals: &Globals) -> CliResult {
    let path = scenario::resolve(&args.scenario).map_err(Failure::bad_input)?;
    let runtime = globals.runtime(Some(scenario_dir(&path)))?;
    match scenario::load(&path, &runtime) {
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
                    eprintln!("warning: {warning}");
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
        Err(report) => {
            if args.json {
                print_json(&report.to_json())?;
                return Err(Failure::bad_input(""));
            }
            Err(Failure::bad_input(format!("{report}")))
        }
    }
}
