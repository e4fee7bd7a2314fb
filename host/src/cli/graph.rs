//! `host graph`: a scenario's graph as Mermaid or DOT.

use clap::{Args, ValueEnum};

use super::common::{CliResult, Globals, RegistryArgs, load_scenario};
use skillhost_scenario as scenario;

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GraphFormat {
    Mermaid,
    Dot,
}

#[derive(Debug, Args)]
pub struct GraphArgs {
    /// The scenario file (or name).
    pub scenario: String,
    /// Mermaid (for Markdown) or DOT (for Graphviz).
    #[arg(long, value_enum, default_value_t = GraphFormat::Mermaid)]
    pub format: GraphFormat,
    #[command(flatten)]
    pub registry: RegistryArgs,
}

pub fn graph(args: GraphArgs, globals: &Globals) -> CliResult {
    let loaded = load_scenario(&args.scenario, globals, args.registry, false)?;
    let text = match args.format {
        GraphFormat::Mermaid => scenario::to_mermaid(&loaded.scenario),
        GraphFormat::Dot => scenario::to_dot(&loaded.scenario),
    };
    println!("{}", text.trim_end());
    Ok(())
}
