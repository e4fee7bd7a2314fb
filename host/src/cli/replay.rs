//! `host replay RUN` and `host replay --file FILE`: re-executes a finished
//! run step by step from what it recorded (the library's
//! `skillhost_engine::replay`), with every host call answered from its
//! journal, and prints one line per step; exit 1 at the first divergence.
//! From a database, or from a file `host runs export` wrote, with no
//! database at all.

use std::path::{Path, PathBuf};

use clap::Args;

use super::common::{
    CliResult, DatabaseArgs, Failure, Globals, HostCommands, print_json, shown, tokio_runtime,
};
use skillhost_engine::replay::{
    ComponentSearch, ReplayError, ReplayReport, RunExport, StepStatus, StepVerdict, check_finished,
    load_exported, replay as replay_run,
};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The run id (see `host runs list`); or --file.
    #[arg(required_unless_present = "file", conflicts_with = "file")]
    pub run_id: Option<String>,
    /// Replay a run exported by `host runs export`, without any database.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// A directory holding the run's components as <sha256>.wasm (with --file, the file's own directory is searched first).
    #[arg(long, value_name = "DIR")]
    pub components: Option<PathBuf>,
    /// With --file: the directory the scenario's relative paths resolve against (default: the directory the run's scenario was in, if it exists, else the file's directory).
    #[arg(long, value_name = "DIR", requires = "file")]
    pub root: Option<PathBuf>,
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Print the replay as one JSON object.
    #[arg(long)]
    pub json: bool,
}

pub fn replay(args: ReplayArgs, globals: &Globals) -> CliResult {
    if let Some(dir) = &args.components
        && !dir.is_dir()
    {
        return Err(Failure::bad_input(format!(
            "--components `{}` is not a directory",
            dir.display()
        )));
    }
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let (export, root, mut search) = match (&args.file, &args.run_id) {
            (Some(file), _) => {
                let export = RunExport::read(file).map_err(failure)?;
                let beside = file
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
                    .to_path_buf();
                let recorded = Path::new(&export.scenario.path).parent();
                let root = match (&args.root, recorded) {
                    (Some(root), _) => root.clone(),
                    (None, Some(dir)) if dir.is_dir() => dir.to_path_buf(),
                    (None, _) => beside.clone(),
                };
                let search = ComponentSearch {
                    dirs: vec![beside],
                    ..ComponentSearch::default()
                };
                (export, Some(root), search)
            }
            (None, Some(run_id)) => {
                let store = args.db.open_for_run(run_id).await?;
                let export = RunExport::from_store(&store, run_id)
                    .await
                    .map_err(failure)?;
                store.close().await;
                (export, None, ComponentSearch::default())
            }
            (None, None) => unreachable!("clap requires a run id or --file"),
        };
        check_finished(&export).map_err(failure)?;
        search.dirs.extend(args.components.iter().cloned());
        // A component the run pulled from a registry is in the registry
        // cache under its digest.
        if let Ok(cache) = globals.registry_cache() {
            let blobs = cache.root().join("blobs").join("sha256");
            if blobs.is_dir() {
                search.blob_dirs.push(blobs);
            }
        }
        let runtime = globals.runtime(None)?;
        let loaded = load_exported(&export, &runtime, root.as_deref(), &search).map_err(failure)?;
        if !args.json {
            println!(
                "replaying run {} of {} ({} step(s)){}",
                shown(&export.run.id),
                shown(&export.scenario.name),
                export.checkpoints.len().saturating_sub(1),
                match &args.file {
                    Some(file) => format!(" from {}", file.display()),
                    None => String::new(),
                }
            );
            println!(
                "{:>4}  {:<24} {:<9} {:>6}  {:>10}",
                "seq", "node", "status", "calls", "ms"
            );
        }
        let json = args.json;
        let mut print = |verdict: &StepVerdict| {
            if !json {
                print_verdict(verdict);
            }
        };
        let report = replay_run(&export, &loaded, &mut print)
            .await
            .map_err(failure)?;
        if json {
            print_json(&report)?;
        } else {
            print_summary(&report);
        }
        match report.diverged_at {
            Some(seq) => Err(Failure::failed(format!(
                "run {} diverged from its record at step {seq}",
                report.run_id
            ))),
            None => Ok(()),
        }
    })
}

fn print_verdict(verdict: &StepVerdict) {
    println!(
        "{:>4}  {:<24} {:<9} {:>6}  {:>10.2}",
        verdict.seq,
        shown(&verdict.node),
        verdict.status.as_str(),
        verdict.calls_served,
        verdict.duration_us as f64 / 1e3
    );
    for difference in &verdict.differences {
        println!("{:>6}{}", "", shown(&difference.to_string()));
    }
}

fn print_summary(report: &ReplayReport) {
    let same = report
        .steps
        .iter()
        .filter(|s| s.status == StepStatus::Same)
        .count();
    match report.diverged_at {
        None => println!(
            "replayed {same} of {} step(s): every output, state hash and next node as recorded",
            report.last_seq
        ),
        Some(seq) => {
            let node = report.steps.last().map(|s| s.node.as_str()).unwrap_or("?");
            println!(
                "diverged at step {seq} (node `{}`) after {same} step(s) as recorded; the steps \
                 after it were not replayed",
                shown(node)
            );
        }
    }
}

/// A run that cannot be replayed: the environment (exit 3) when a database
/// or the stored history fails, else what was asked for (exit 2).
fn failure(e: ReplayError) -> Failure {
    if e.is_environment() {
        Failure::environment(e.render(&HostCommands))
    } else {
        Failure::bad_input(e.render(&HostCommands))
    }
}
