//! `host submit`: queues a run for `host worker`s and prints its id. The
//! scenario is loaded and the input checked here, as `host run` does, so a
//! run that cannot start is refused before it is queued.

use clap::Args;
use serde_json::json;

use super::common::{
    CliResult, DatabaseArgs, Durability, Globals, InputLimitArgs, RegistryArgs, checked_input,
    load_scenario, print_json, read_run_input, store_error, tokio_runtime,
};
use skillhost_store::{NewRun, Provenance, new_run_id};

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// A scenario name (examples/NAME/scenario.toml, ./NAME.toml) or a file.
    pub scenario: String,
    /// The run input: inline JSON, or @FILE.
    #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
    pub input: String,
    /// The task this run works on: its current checkpoint is kept in the
    /// task's row (default: the run is its own task).
    #[arg(long, value_name = "ID")]
    pub task_id: Option<String>,
    #[command(flatten)]
    pub input_limit: InputLimitArgs,
    /// How registry (`oci://`) components are resolved; the run records the
    /// digest of each, and a worker refuses to run other code for it.
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Print `{"run_id": …}` instead of the bare id.
    #[arg(long)]
    pub json: bool,
}

pub fn submit(args: SubmitArgs, globals: &Globals) -> CliResult {
    let input = read_run_input(&args.input, args.input_limit)?;
    let loaded = load_scenario(&args.scenario, globals, args.registry, args.json)?;
    let input = checked_input(&loaded, input)?;
    let scenario = &*loaded.scenario;
    // Workers may run in another directory: store the absolute path.
    let path = std::fs::canonicalize(&scenario.path).unwrap_or_else(|_| scenario.path.clone());
    let run = NewRun {
        id: new_run_id(),
        scenario_name: scenario.name.clone(),
        scenario_path: path.display().to_string(),
        scenario_digest: scenario.digest.clone(),
        input,
        initial_state: loaded.initial_state.clone(),
        start_node: scenario.start.clone(),
        start_visits: Default::default(),
        provenance: Provenance {
            components: loaded.component_digests(),
            forked_from: None,
            parent: None,
        },
    };
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = args.db.open_with(Durability::Full).await?;
        store
            .enqueue_run_for_task(&run, args.task_id.as_deref())
            .await
            .map_err(store_error)?;
        store.close().await;
        if args.json {
            print_json(&json!({"run_id": run.id, "status": "queued", "task_id": args.task_id}))
        } else {
            println!("{}", run.id);
            Ok(())
        }
    })
}
