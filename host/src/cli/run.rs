//! `host run`, `host resume`, `host runs fork` and `host runs
//! answer|approve|reject`: running a scenario, from its start, from an
//! unfinished run's last checkpoint, from any checkpoint of a run with state
//! fields replaced, or on from the approval node a run waited at once it is
//! answered, and reporting the outcome (all of them print it the same way;
//! a run that stops to wait prints how to answer it).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::{Value, json};

use super::common::{
    CliResult, DatabaseArgs, Durability, Failure, Globals, IdempotencyArgs, InputLimitArgs,
    RegistryArgs, check_output_path, checked_input, engine_failure, fetch_run, load_run_scenario,
    load_scenario, print_json, read_run_input, report_existing_run, shown, shown_lines,
    store_error, tokio_runtime, write_output_file,
};
use skillhost_engine::queue::RunRequest;
use skillhost_engine::{
    Continued, Engine, Event, EventSink, NdjsonEvents, NoEvents, RunOutcome, RunService, Started,
};
use skillhost_scenario::LoadedScenario;
use skillhost_scenario::checks::artifact_name;
use skillhost_store::{RunStatus, Store};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// A scenario name (examples/NAME/scenario.toml, ./NAME.toml) or a file.
    pub scenario: String,
    /// The run input: inline JSON, or @FILE.
    #[arg(long, value_name = "JSON|@FILE", default_value = "{}")]
    pub input: String,
    #[command(flatten)]
    pub input_limit: InputLimitArgs,
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub idempotency: IdempotencyArgs,
    /// `normal` survives any kill of the process; `full` also fsyncs every
    /// checkpoint (survives power loss); `none` keeps no database.
    #[arg(long, value_enum, default_value_t = Durability::Normal)]
    pub durability: Durability,
    #[command(flatten)]
    pub outcome: OutcomeArgs,
}

/// How a command that runs a scenario (`run`, `resume`, `fork`, `runs
/// answer|approve|reject`) reports the outcome and where the artifacts go.
#[derive(Debug, Args)]
pub struct OutcomeArgs {
    /// Print the outcome as one JSON object.
    #[arg(long, conflicts_with = "events")]
    pub json: bool,
    /// Stream events as NDJSON on stdout (node started/finished/failed, checkpoint written); the summary goes to stderr.
    #[arg(long)]
    pub events: bool,
    /// Where to write the run's artifacts once it ends here, e.g. the research report (a directory when it has several, created if its parent exists); default .skillhost/runs/RUN_ID/. Its directory must exist; an existing file is refused without --force.
    #[arg(long, value_name = "PATH")]
    pub out: Option<PathBuf>,
    /// Replace files that already exist where --out writes (a symlink there is replaced, not followed).
    #[arg(long, requires = "out")]
    pub force: bool,
}

impl OutcomeArgs {
    /// Where the artifacts go, checked before anything runs.
    fn out(&self) -> Result<Out<'_>, Failure> {
        Out::checked(self.out.as_deref(), self.force)
    }

    fn report(&self) -> Report {
        match (self.json, self.events) {
            (true, _) => Report::Json,
            (false, true) => Report::Events,
            (false, false) => Report::Human,
        }
    }

    /// The event sink the run prints through: NDJSON on stdout with
    /// `--events`, progress on stderr otherwise: one live line on a
    /// terminal, a line per node when stderr is a file or a pipe.
    fn sink(&self) -> Arc<dyn EventSink> {
        if self.events {
            Arc::new(NdjsonEvents::new(std::io::stdout()))
        } else {
            let live = std::io::stderr().is_terminal().then(LiveLine::new);
            Arc::new(Progress {
                live,
                tokens: std::sync::Mutex::new(TokenTail::default()),
            })
        }
    }
}

#[derive(Debug, Args)]
pub struct ResumeArgs {
    /// The run id (see `host runs list`).
    pub run_id: String,
    /// Continue the run although its scenario file or components changed since it started (a deliberate upgrade of a run in flight); without it such a run is refused, naming what changed.
    #[arg(long)]
    pub allow_changed: bool,
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub outcome: OutcomeArgs,
}

#[derive(Debug, Args)]
pub struct AnswerArgs {
    /// The waiting run (see `host runs list --status waiting`).
    pub run_id: String,
    /// The answer: a JSON object of the approval node's `answer` fields, inline or @FILE.
    #[arg(long, value_name = "JSON|@FILE")]
    pub data: String,
    #[command(flatten)]
    pub input_limit: InputLimitArgs,
    #[command(flatten)]
    pub verdict: VerdictArgs,
}

/// What `host runs approve|reject` take, and `answer` too.
#[derive(Debug, Args)]
pub struct VerdictArgs {
    /// The waiting run (see `host runs list --status waiting`).
    #[arg(skip)]
    pub run_id: String,
    /// Who answers, recorded with the answer (default: $USER).
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// Only record the answer and queue the run for a worker; by default a run in a SQLite database is continued here, as `host resume` does.
    #[arg(long)]
    pub queue: bool,
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub outcome: OutcomeArgs,
}

/// `host runs approve|reject RUN`.
#[derive(Debug, Args)]
pub struct ShorthandArgs {
    /// The waiting run (see `host runs list --status waiting`).
    pub run_id: String,
    #[command(flatten)]
    pub verdict: VerdictArgs,
}

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The run to fork (see `host runs list`).
    pub run_id: String,
    /// The checkpoint to start from (see `host checkpoints RUN`).
    #[arg(long, value_name = "SEQ")]
    pub at: u64,
    /// Replace a top-level state field (declared in [state]) with a JSON value, e.g. --set 'draft="shorter"'. Repeatable.
    #[arg(long = "set", value_name = "FIELD=JSON")]
    pub set: Vec<String>,
    #[command(flatten)]
    pub db: DatabaseArgs,
    #[command(flatten)]
    pub registry: RegistryArgs,
    #[command(flatten)]
    pub outcome: OutcomeArgs,
}

/// Progress for people. On a terminal, one line redrawn in place (the node
/// running, the steps finished, the time elapsed), so a 500-step loop does
/// not print 500 lines; failures and warnings are printed above it. Else
/// one line per finished node, for logs. Every text a run or its scenario
/// wrote goes through [`shown`].
struct Progress {
    live: Option<LiveLine>,
    /// The end of the text a node's streamed completion has produced so
    /// far, shown on the live line as it comes.
    tokens: std::sync::Mutex<TokenTail>,
}

/// The last characters a node's streamed completion produced.
#[derive(Default)]
struct TokenTail {
    node: String,
    attempt: u32,
    text: String,
    /// Whether the text's start was cut.
    cut: bool,
}

/// How many characters of a streaming node's text the live line shows.
const TOKEN_TAIL_CHARS: usize = 60;

impl TokenTail {
    /// Adds `text` of `node`'s attempt `attempt` (another node's or
    /// attempt's starts the tail anew), and gives the live line's message.
    fn push(&mut self, node: &str, attempt: u32, text: &str) -> String {
        if self.node != node || self.attempt != attempt {
            self.node = node.to_string();
            self.attempt = attempt;
            self.text.clear();
            self.cut = false;
        }
        // Control characters (a newline among them) would break the line.
        self.text
            .extend(text.chars().map(|c| if c.is_control() { ' ' } else { c }));
        let count = self.text.chars().count();
        if count > TOKEN_TAIL_CHARS {
            let cut = self
                .text
                .char_indices()
                .nth(count - TOKEN_TAIL_CHARS)
                .map_or(0, |(i, _)| i);
            self.text.drain(..cut);
            self.cut = true;
        }
        let dots = if self.cut { "…" } else { "" };
        format!("· {} ▸ {dots}{}", shown(node), shown(&self.text))
    }
}

/// The live line: an `indicatif` spinner whose position is the step count.
struct LiveLine {
    bar: indicatif::ProgressBar,
}

impl LiveLine {
    fn new() -> LiveLine {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) =
            indicatif::ProgressStyle::with_template("{spinner} {elapsed_precise} step {pos} {msg}")
        {
            bar.set_style(style);
        }
        // Redraws the elapsed time while a long node runs.
        bar.enable_steady_tick(std::time::Duration::from_millis(100));
        LiveLine { bar }
    }
}

impl Drop for LiveLine {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
    }
}

impl Progress {
    /// A line above the live line, or on its own.
    fn line(&self, text: String) {
        match &self.live {
            Some(live) => live.bar.println(text),
            None => eprintln!("{text}"),
        }
    }
}

impl EventSink for Progress {
    fn emit(&self, event: &Event) {
        match event {
            Event::RunStarted {
                run_id,
                scenario,
                resumed,
            } => {
                let verb = if *resumed { "resuming" } else { "running" };
                self.line(format!("{verb} {} (run {run_id})", shown(scenario)));
            }
            Event::Token {
                node,
                attempt,
                text,
                ..
            } => {
                if let Some(live) = &self.live {
                    let mut tail = self.tokens.lock().unwrap_or_else(|p| p.into_inner());
                    live.bar.set_message(tail.push(node, *attempt, text));
                }
            }
            Event::TokensDiscarded { node, attempt, .. } => {
                if let Some(live) = &self.live {
                    live.bar.set_message(format!(
                        "· {} (attempt {attempt}'s text discarded)",
                        shown(node)
                    ));
                }
            }
            Event::NodeStarted { node, visit, .. } => {
                if let Some(live) = &self.live {
                    let visit = match *visit {
                        0 | 1 => String::new(),
                        n => format!(" (visit {n})"),
                    };
                    live.bar.set_message(format!("· {}{visit}", shown(node)));
                }
            }
            Event::NodeFinished {
                node,
                duration_us,
                logs_dropped,
                ..
            } => {
                let node = shown(node);
                match &self.live {
                    Some(live) => live.bar.inc(1),
                    None => eprintln!("  ok    {node:<24} {:>9.1} ms", *duration_us as f64 / 1e3),
                }
                if *logs_dropped > 0 {
                    self.line(format!(
                        "  warn  {node:<24} {logs_dropped} log line(s) dropped: the skill wrote \
                         past its call's log budget"
                    ));
                }
            }
            Event::NodeFailed {
                node,
                attempt,
                error,
                will_retry,
                ..
            } => {
                let message = error.get("message").and_then(Value::as_str).unwrap_or("");
                let what = if *will_retry { "retry" } else { "FAIL" };
                self.line(format!(
                    "  {what:<5} {:<24} attempt {attempt}: {}",
                    shown(node),
                    shown(message)
                ));
            }
            Event::MapItemFinished {
                node, index, total, ..
            } => {
                if let Some(live) = &self.live {
                    live.bar
                        .set_message(format!("· {} item {}/{total}", shown(node), index + 1));
                }
            }
            Event::RuleWarning {
                node,
                code,
                message,
                ..
            } => {
                self.line(format!(
                    "  warn  {:<24} {}: {}",
                    shown(node),
                    shown(code),
                    shown(message)
                ));
            }
            Event::RunWaiting { .. } | Event::RunFinished { .. } => {
                if let Some(live) = &self.live {
                    live.bar.finish_and_clear();
                }
            }
            _ => {}
        }
    }
}

pub fn run(args: RunArgs, globals: &Globals) -> CliResult {
    let input = read_run_input(&args.input, args.input_limit)?;
    let loaded = load_scenario(&args.scenario, globals, args.registry, args.outcome.json)?;
    let input = checked_input(&loaded, input)?;
    let idempotency = args.idempotency.key()?;
    if idempotency.is_some() && args.durability == Durability::None {
        return Err(Failure::bad_input(
            "--idempotency-key needs a database to remember the key in; leave out \
             `--durability none`",
        ));
    }
    let out = args.outcome.out()?;
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = match args.durability {
            Durability::None => None,
            durability => Some(args.db.open_with(durability).await?),
        };
        let engine = Engine::new(store, args.outcome.sink());
        let key = idempotency.as_ref().map(|k| k.key.clone());
        let request = RunRequest {
            idempotency,
            ..RunRequest::default()
        };
        let outcome = match engine
            .start_with(&loaded, input, request)
            .await
            .map_err(engine_failure)?
        {
            Started::Ran(outcome) => outcome,
            Started::Existing { run_id } => {
                let store = engine.store().expect("a key is refused without a store");
                let key = key.unwrap_or_default();
                return report_existing_run(store, &run_id, &key, args.outcome.json).await;
            }
        };
        let report = args.outcome.report();
        let database = match engine.store() {
            Some(store) => database_flag(&args.db, store),
            None => String::new(),
        };
        finish(engine.store(), &loaded, outcome, report, out, &database).await
    })
}

pub fn resume(args: ResumeArgs, globals: &Globals) -> CliResult {
    let out = args.outcome.out()?;
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = args.db.open_for_run(&args.run_id).await?;
        let run = fetch_run(&store, &args.run_id).await?;
        if run.status.is_finished() {
            let database = if args.db.is_default() {
                String::new()
            } else {
                format!(" --database {}", store.url_for_display())
            };
            return Err(Failure::bad_input(format!(
                "run `{id}` is {status}; only unfinished runs can be resumed. Start a new run \
                 with `host run {scenario}{database}`, or see this run's steps with \
                 `host runs show {id}{database}`",
                id = args.run_id,
                status = run.status.as_str(),
                scenario = run.scenario_path,
            )));
        }
        let loaded = load_run_scenario(&run, globals, args.registry, args.outcome.json)?;
        // One runner per run: refused, naming the holder and the expiry,
        // while a worker (or another face) holds it. A lease lost while
        // running shows as the refusal of the next write it fences.
        let service = RunService::new(store.clone(), args.outcome.sink());
        let outcome = match service
            .continue_run(&loaded, &args.run_id, "resume", args.allow_changed)
            .await
            .map_err(engine_failure)?
        {
            Continued::Ran(outcome) => outcome,
            Continued::HeldBy { message, .. } => return Err(Failure::bad_input(message)),
        };
        finish(
            Some(&store),
            &loaded,
            outcome,
            args.outcome.report(),
            out,
            &database_flag(&args.db, &store),
        )
        .await
    })
}

/// ` --database URL` when the database is not the default one, for the
/// commands a run's output suggests.
fn database_flag(db: &DatabaseArgs, store: &skillhost_store::Store) -> String {
    match db.is_default() {
        true => String::new(),
        false => format!(" --database {}", store.url_for_display()),
    }
}

pub fn answer(args: AnswerArgs, globals: &Globals) -> CliResult {
    let data = read_run_input(&args.data, args.input_limit)?;
    let verdict = VerdictArgs {
        run_id: args.run_id,
        ..args.verdict
    };
    answer_run(verdict, Answer::Data(data), globals)
}

/// `host runs approve` (`yes`) or `reject`: the answer's one boolean field.
pub fn verdict(args: ShorthandArgs, yes: bool, globals: &Globals) -> CliResult {
    let verdict = VerdictArgs {
        run_id: args.run_id,
        ..args.verdict
    };
    answer_run(verdict, Answer::Verdict(yes), globals)
}

enum Answer {
    Data(Value),
    /// The value of the answer's only field, a boolean.
    Verdict(bool),
}

/// Records the answer, then continues the run here (SQLite, without
/// `--queue`) or leaves it queued for a worker.
fn answer_run(args: VerdictArgs, answer: Answer, globals: &Globals) -> CliResult {
    let out = args.outcome.out()?;
    let by = args
        .by
        .clone()
        .or_else(|| std::env::var("USER").ok())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "cli".into());
    let run_id = args.run_id.as_str();
    tokio_runtime()?.block_on(async {
        let store = args.db.open_for_run(run_id).await?;
        let run = fetch_run(&store, run_id).await?;
        let database = database_flag(&args.db, &store);
        let data = match answer {
            Answer::Data(data) => data,
            Answer::Verdict(yes) => {
                let wait = store
                    .wait_at(run_id, run.last_seq)
                    .await
                    .map_err(store_error)?;
                let field = wait.as_ref().and_then(|w| {
                    skillhost_scenario::node::approval::boolean_field(&w.answer_schema)
                        .map(str::to_owned)
                });
                match (wait, field) {
                    (_, Some(field)) => json!({ field: yes }),
                    (Some(wait), None) => {
                        return Err(Failure::bad_input(format!(
                            "run `{run_id}` waits at node `{}` for an answer with {}, not one \
                             yes/no field; give it with `host runs answer {run_id} --data \
                             JSON{database}`",
                            wait.node_id,
                            skillhost_engine::describe_fields(&wait.answer_schema)
                        )));
                    }
                    // Not waiting: the engine says so.
                    (None, None) => json!({}),
                }
            }
        };
        // The answer reports no events: `--events` streams the run's.
        let answering = RunService::new(store.clone(), Arc::new(NoEvents));
        let answered = answering
            .answer(run_id, data, &by)
            .await
            .map_err(|e| match e {
                skillhost_engine::EngineError::Store(e) if e.is_conflict() => Failure::bad_input(e),
                e => engine_failure(e),
            })?;
        let recorded = format!(
            "run {run_id} answered at node `{}` by {}: {}",
            shown(&answered.node_id),
            shown(&by),
            shown(&answered.answer.to_string())
        );
        if args.queue || !answering.continues_answered_runs() {
            let next = format!(
                "run {run_id} is queued: a worker continues it from node `{}` (`host \
                 worker{database}`), or continue it here with `host resume {run_id}{database}`",
                shown(&answered.node_id)
            );
            if args.outcome.json {
                return print_json(&json!({
                    "run_id": run_id, "status": "queued", "node": answered.node_id,
                    "answer": answered.answer, "by": by,
                }));
            }
            println!("{recorded}");
            println!("{next}");
            return Ok(());
        }
        eprintln!("{recorded}");
        let loaded = load_run_scenario(&run, globals, args.registry, args.outcome.json)?;
        let service = RunService::new(store.clone(), args.outcome.sink());
        let outcome = match service
            .continue_run(&loaded, run_id, "answer", false)
            .await
            .map_err(engine_failure)?
        {
            Continued::Ran(outcome) => outcome,
            // A worker (or another face) took it between the answer and
            // here: it runs it.
            Continued::HeldBy { owner, .. } => {
                println!(
                    "run {run_id} is queued and `{}` took it; it continues there",
                    shown(&owner)
                );
                return Ok(());
            }
        };
        finish(
            Some(&store),
            &loaded,
            outcome,
            args.outcome.report(),
            out,
            &database,
        )
        .await
    })
}

pub fn fork(args: ForkArgs, globals: &Globals) -> CliResult {
    let set = args
        .set
        .iter()
        .map(|arg| parse_set(arg))
        .collect::<Result<Vec<_>, Failure>>()?;
    let out = args.outcome.out()?;
    let rt = tokio_runtime()?;
    rt.block_on(async {
        let store = args.db.open_for_run(&args.run_id).await?;
        let run = fetch_run(&store, &args.run_id).await?;
        let loaded = load_run_scenario(&run, globals, args.registry, args.outcome.json)?;
        let database = database_flag(&args.db, &store);
        let engine = Engine::new(Some(store), args.outcome.sink());
        let outcome = engine
            .fork(&loaded, &args.run_id, args.at, &set)
            .await
            .map_err(engine_failure)?;
        finish(
            engine.store(),
            &loaded,
            outcome,
            args.outcome.report(),
            out,
            &database,
        )
        .await
    })
}

/// One `--set FIELD=JSON`: the field, and its value parsed.
fn parse_set(arg: &str) -> Result<(String, Value), Failure> {
    let Some((field, json)) = arg.split_once('=') else {
        return Err(Failure::bad_input(format!(
            "--set {arg}: give a state field and a JSON value as FIELD=JSON, e.g. \
             --set 'count=3' or --set 'title=\"draft\"'"
        )));
    };
    let field = field.trim();
    if field.is_empty() {
        return Err(Failure::bad_input(format!(
            "--set {arg}: the field name before `=` is empty"
        )));
    }
    let value = serde_json::from_str(json).map_err(|e| {
        Failure::bad_input(format!(
            "--set {field}: `{json}` is not valid JSON ({e}); a string needs its quotes, e.g. \
             --set '{field}=\"text\"'"
        ))
    })?;
    Ok((field.to_string(), value))
}

/// How `host run` and `host resume` report the outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Report {
    /// Lines for people: the summary and the files written on stdout.
    Human,
    /// One JSON object on stdout (`--json`).
    Json,
    /// Stdout is the NDJSON event stream (`--events`) and nothing else: the
    /// lines for people go to stderr.
    Events,
}

/// Prints the outcome, writes the run's artifacts; a failed or cancelled
/// run is exit 1, one that waits for an answer exit 0 with how to give it.
/// `database`: the ` --database URL` the commands it suggests need.
async fn finish(
    store: Option<&Store>,
    loaded: &LoadedScenario,
    outcome: RunOutcome,
    report: Report,
    out: Out<'_>,
    database: &str,
) -> CliResult {
    let failed = matches!(outcome.status, RunStatus::Failed | RunStatus::Cancelled);
    let waiting = outcome.waiting.as_ref().map(|wait| {
        let answer = format!(
            "host runs answer {} --data '{}'{database}",
            outcome.run_id,
            example_answer(&wait.answer_schema)
        );
        let shorthand =
            skillhost_scenario::node::approval::boolean_field(&wait.answer_schema).map(|_| {
                format!(
                    "host runs approve {id}{database}  /  host runs reject {id}{database}",
                    id = outcome.run_id
                )
            });
        (wait, answer, shorthand)
    });
    let written = write_artifacts(store, &outcome, out).await?;
    let line = |text: String| {
        if report == Report::Events {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    };
    if report == Report::Json {
        print_json(&json!({
            "run_id": outcome.run_id,
            "scenario": loaded.scenario.name,
            "status": outcome.status.as_str(),
            "summary": outcome.summary,
            "artifacts": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
            "state": outcome.state,
            "failure": outcome.failure,
            "warnings": outcome.warnings,
            "nodes_run": outcome.nodes_run,
            "usage": outcome.tokens_used.to_json(),
            "waiting": waiting.as_ref().map(|(wait, answer, shorthand)| json!({
                "node": wait.node_id,
                "seq": wait.seq,
                "prompt": wait.prompt,
                "answer_schema": wait.answer_schema,
                "deadline_ms": wait.deadline_ms,
                "answer_command": answer,
                "shorthand": shorthand,
            })),
        }))?;
    } else {
        eprintln!(
            "run {} {} after {} node(s)",
            outcome.run_id,
            outcome.status.as_str(),
            outcome.nodes_run
        );
        let used = outcome.tokens_used;
        if !used.is_zero() {
            eprintln!(
                "llm: {} tokens ({} in, {} out) in {} completion(s)",
                used.total(),
                used.input_tokens,
                used.output_tokens,
                used.calls
            );
        }
        if let Some(report) = &outcome.failure {
            print_failure(outcome.status.as_str(), report);
        }
        if let Some((wait, answer, shorthand)) = &waiting {
            line(format!(
                "waiting at node `{}`: {}",
                shown(&wait.node_id),
                shown(&wait.prompt)
            ));
            line(format!(
                "the answer: {}",
                shown(&skillhost_engine::describe_fields(&wait.answer_schema))
            ));
            if let Some(deadline) = wait.deadline_ms {
                line(format!(
                    "it times out at {}, then takes the node's `on_timeout` route",
                    skillhost_store::format_ms(deadline)
                ));
            }
            line(format!("answer with: {}", shown(answer)));
            if let Some(shorthand) = shorthand {
                line(format!("         or: {}", shown(shorthand)));
            }
        }
        for (label, value) in &outcome.summary {
            line(summary_line(label, value));
        }
        for path in &written {
            line(format!("written: {}", shown(&path.display().to_string())));
        }
    }
    if failed {
        return Err(Failure::failed(""));
    }
    Ok(())
}

/// One `[summary]` entry as people read it: the label, then the value (a
/// string as it is, anything else as JSON). A value of several lines
/// keeps them, each indented under the first, so no line of it can pass
/// for one of the host's own.
fn summary_line(label: &str, value: &Value) -> String {
    const VALUE_COLUMN: usize = 23;
    let value = match value {
        Value::String(s) => shown_lines(s).into_owned(),
        other => shown(&other.to_string()).into_owned(),
    };
    let label = format!("{}:", shown(&label.replace('_', " ")));
    let indent = format!("\n{:VALUE_COLUMN$}", "");
    format!("{label:<22} {}", value.replace('\n', &indent))
}

/// An answer that fits `schema`, to show in the command that gives one:
/// each field's default, else a value of its type.
fn example_answer(schema: &Value) -> String {
    let mut example = serde_json::Map::new();
    if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
        for (name, field) in properties {
            let value = field.get("default").cloned().unwrap_or_else(|| {
                match field.get("type").and_then(Value::as_str) {
                    Some("boolean") => json!(true),
                    Some("string") => json!("…"),
                    Some("integer") | Some("number") => json!(0),
                    Some("array") => json!([]),
                    Some("object") => json!({}),
                    _ => Value::Null,
                }
            });
            example.insert(name.clone(), value);
        }
    }
    Value::Object(example).to_string()
}

/// Where `--out` sends a run's artifacts, checked before the run starts so
/// that a path that cannot take them fails fast.
#[derive(Clone, Copy)]
struct Out<'a> {
    path: Option<&'a Path>,
    force: bool,
}

impl<'a> Out<'a> {
    /// `--out` and `--force`: the directory `path` is in must exist, and an
    /// existing file there needs `force`. An existing directory is kept for a
    /// run with several artifacts.
    fn checked(path: Option<&'a Path>, force: bool) -> Result<Out<'a>, Failure> {
        if let Some(path) = path
            && !path.is_dir()
        {
            check_output_path(path, force)?;
        }
        Ok(Out { path, force })
    }
}

/// Writes every artifact of the run: to `out` when there is one artifact and
/// `out` is given, into the directory `out` when there are several (created
/// if missing, its parent must exist), else into `.skillhost/runs/<run
/// id>/`. Each file is written as `write_output_file` does: never over an
/// existing one without `--force`, never through a symlink. Artifacts made
/// before a resume come from the store.
async fn write_artifacts(
    store: Option<&Store>,
    outcome: &RunOutcome,
    out: Out<'_>,
) -> Result<Vec<PathBuf>, Failure> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    if let Some(store) = store {
        let rows = store
            .artifacts(&outcome.run_id)
            .await
            .map_err(|e| Failure::environment(e.to_string()))?;
        for row in rows {
            let bytes = store
                .artifact_bytes(&row.digest)
                .await
                .map_err(|e| Failure::environment(e.to_string()))?
                .ok_or_else(|| {
                    Failure::environment(format!(
                        "artifact `{}` of run `{}` has no stored bytes",
                        row.name, outcome.run_id
                    ))
                })?;
            files.push((row.name, bytes));
        }
    } else {
        for artifact in &outcome.artifacts {
            files.retain(|(name, _)| *name != artifact.name);
            files.push((artifact.name.clone(), artifact.bytes.clone()));
        }
    }
    let stored = store.is_some();
    let mut written = Vec::new();
    for (name, bytes) in &files {
        // A name the checker would refuse (a store written before it
        // checked names) is never turned into a path.
        if let Err(problem) = artifact_name::check(name) {
            return Err(Failure::environment(format!(
                "artifact of run `{}` not written: {problem}",
                outcome.run_id
            )));
        }
        let (path, force) = match out.path {
            Some(path) if files.len() == 1 => (path.to_path_buf(), out.force),
            Some(dir) => {
                if !dir.is_dir() {
                    std::fs::create_dir(dir).map_err(|e| {
                        Failure::environment(format!(
                            "cannot create the directory `{}` for the run's {} artifacts: {e}",
                            dir.display(),
                            files.len()
                        ))
                    })?;
                }
                (dir.join(name), out.force)
            }
            None => {
                let dir = Path::new(".skillhost/runs").join(&outcome.run_id);
                std::fs::create_dir_all(&dir).map_err(|e| {
                    Failure::environment(format!("cannot create `{}`: {e}", dir.display()))
                })?;
                // The host's own directory: its files are replaced (never
                // followed), as a resumed run may write them again.
                (dir.join(name), true)
            }
        };
        write_output_file(&path, bytes, force).map_err(|mut failure| {
            if stored {
                failure.message = format!(
                    "{}. The run's artifacts are kept in its database: write this one with \
                     `host runs artifact {} {name} --out PATH`",
                    failure.message, outcome.run_id
                );
            }
            failure
        })?;
        written.push(path);
    }
    Ok(written)
}

/// A failed or cancelled run's report on stderr, one line per part; what
/// the run wrote (its node ids, codes, messages, suggestions) through
/// [`shown`]. `status` is the run's (`failed`, `cancelled`); a report
/// without a node (a cancel, which stops between nodes) names none.
fn print_failure(status: &str, report: &Value) {
    let get = |k: &str| shown(report.get(k).and_then(Value::as_str).unwrap_or(""));
    match report.get("node").and_then(Value::as_str) {
        Some(node) if !node.is_empty() => eprintln!(
            "{status} at node `{}` [{}]: {}",
            shown(node),
            get("code"),
            get("message")
        ),
        _ => eprintln!("{status} [{}]: {}", get("code"), get("message")),
    }
    if let Some(errors) = report.get("errors").and_then(Value::as_array) {
        for error in errors {
            let get = |k: &str, or: &'static str| {
                shown(error.get(k).and_then(Value::as_str).unwrap_or(or)).into_owned()
            };
            eprintln!(
                "  error in `{}` [{}]: {}",
                get("node", "?"),
                get("code", "?"),
                get("message", "")
            );
        }
    }
    if let Some(partial) = report.get("partial_results").and_then(Value::as_object)
        && !partial.is_empty()
    {
        let fields: Vec<&str> = partial.keys().map(String::as_str).collect();
        eprintln!(
            "partial results kept in state: {}",
            shown(&fields.join(", "))
        );
    }
    if let Some(suggestions) = report.get("suggestions").and_then(Value::as_array)
        && !suggestions.is_empty()
    {
        eprintln!("suggestions:");
        for s in suggestions {
            eprintln!("  - {}", shown(s.as_str().unwrap_or("")));
        }
    }
}
