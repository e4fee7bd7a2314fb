//! `host submit`: queues a run for `host worker`s and prints its id. The
//! scenario is loaded and the input checked here, as `host run` does, so a
//! run that cannot start is refused before it is queued. The run carries
//! its scenario's flow control (`[scenario] priority`, `concurrency`,
//! `concurrency_key`), which the workers' claims obey; `--priority`
//! overrides the priority, and `--idempotency-key` queues nothing when a
//! run with that key was started within its TTL.

use clap::Args;
use serde_json::json;

use super::common::{
    CliResult, DatabaseArgs, Durability, Globals, IdempotencyArgs, InputLimitArgs, RegistryArgs,
    checked_input, engine_failure, load_scenario, print_json, read_run_input, report_existing_run,
    store_error, tokio_runtime,
};
use skillhost_engine::queue::{RunRequest, new_queued_run};
use skillhost_store::Admission;

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
    /// Workers claim queued runs of a higher priority first (default: the
    /// scenario's `[scenario] priority`, else 0; may be negative).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub priority: Option<i64>,
    #[command(flatten)]
    pub idempotency: IdempotencyArgs,
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
    let idempotency = args.idempotency.key()?;
    let loaded = load_scenario(&args.scenario, globals, args.registry, args.json)?;
    let input = checked_input(&loaded, input)?;
    let key = idempotency.as_ref().map(|k| k.key.clone());
    let request = RunRequest {
        task_id: args.task_id.clone(),
        priority: args.priority,
        idempotency,
        ..RunRequest::default()
    };
    let (run, options) = new_queued_run(&loaded, input, request).map_err(engine_failure)?;
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = args.db.open_with(Durability::Full).await?;
        let admission = store
            .enqueue_run_with(&run, &options)
            .await
            .map_err(store_error)?;
        let printed = match admission {
            Admission::Existing { run_id } => {
                report_existing_run(&store, &run_id, &key.unwrap_or_default(), args.json).await
            }
            Admission::Created if args.json => print_json(&json!({
                "run_id": run.id,
                "status": "queued",
                "task_id": args.task_id,
                "priority": options.priority,
            })),
            Admission::Created => {
                println!("{}", run.id);
                Ok(())
            }
        };
        store.close().await;
        printed
    })
}
