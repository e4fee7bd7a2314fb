//! `host runs list|show|artifact|export|prune|retention`: reading the
//! execution history, writing out a run's stored artifact or the whole run
//! as an audit file, and deleting the history of old finished runs.
//! (`host runs fork` runs a run, and lives with `host run` in `run.rs`.)

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use serde_json::{Value, json};

use super::common::{
    CliResult, DatabaseArgs, Failure, HostCommands, check_output_path, duration_arg, fetch_run,
    install_telemetry_here, open_failure, print_json, shown, shown_lines, store_error,
    tokio_runtime, trace_link, write_output_file,
};
use skillhost_engine::NoEvents;
use skillhost_engine::replay::{ReplayError, RunExport};
use skillhost_runtime::{TokenUsage, describe_journal_entry};
use skillhost_store::{
    Cancelled, History, JournalEntry, RunRow, RunStatus, StepRow, StoreError, format_ms,
    parse_duration,
};

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    db: DatabaseArgs,
    /// Only runs with this status (queued, running, waiting, completed, failed, cancelled).
    #[arg(long)]
    status: Option<String>,
    /// At most this many runs.
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// Print the runs as a JSON array.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The run to cancel (see `host runs list`).
    run_id: String,
    /// Who cancels it, recorded with the run (default: $USER).
    #[arg(long, value_name = "NAME")]
    by: Option<String>,
    #[command(flatten)]
    db: DatabaseArgs,
    /// Print the result as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The run id (see `host runs list`).
    run_id: String,
    #[command(flatten)]
    db: DatabaseArgs,
    /// Print the run, its steps, artifacts and state as one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
pub struct ArtifactArgs {
    /// The run id (see `host runs list`).
    run_id: String,
    /// The artifact's name (see `host runs show RUN`).
    name: String,
    #[command(flatten)]
    db: DatabaseArgs,
    /// Write it to this file instead of stdout. Its directory must exist; an existing file is refused without --force.
    #[arg(long, value_name = "PATH")]
    out: Option<PathBuf>,
    /// Replace a file that already exists at --out (a symlink there is replaced, not followed).
    #[arg(long, requires = "out")]
    force: bool,
}

#[derive(Debug, Args)]
pub struct ExportArgs {
    /// The run id (see `host runs list`).
    run_id: String,
    #[command(flatten)]
    db: DatabaseArgs,
    /// Write the export to this file instead of stdout. Its directory must exist; an existing file is refused without --force.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Replace a file that already exists at --out (a symlink there is replaced, not followed).
    #[arg(long, requires = "out")]
    force: bool,
    /// Also copy every component the run used into this directory as <sha256>.wasm (created if its parent exists), where `host replay --file --components DIR` finds them.
    #[arg(long, value_name = "DIR")]
    components: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct PruneArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Delete finished runs last updated longer ago than this (e.g. 7d, 12h),
    /// except scenarios with their own retention setting. Without it, only
    /// scenarios with a setting are pruned.
    #[arg(long, value_name = "DURATION", value_parser = duration_arg)]
    pub older_than: Option<Duration>,
    /// Print what was pruned as one JSON object.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct RetentionArgs {
    /// The scenario name (as in `host runs list`); none lists the settings.
    pub scenario: Option<String>,
    /// How long its finished runs are kept (e.g. 30d), or `off`.
    pub keep: Option<String>,
    #[command(flatten)]
    pub db: DatabaseArgs,
    /// Print the settings as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn list(args: ListArgs) -> CliResult {
    tokio_runtime()?.block_on(list_runs(args))
}

pub fn cancel(args: CancelArgs) -> CliResult {
    tokio_runtime()?.block_on(cancel_run(args))
}

/// A queued or waiting run ends now; a running one at its next node
/// boundary. A finished run is refused (exit 2), with nothing changed.
async fn cancel_run(args: CancelArgs) -> CliResult {
    // A queued or waiting run is ended here, and its trace with it.
    install_telemetry_here()?;
    let store = args.db.open_for_run(&args.run_id).await?;
    let by = who(args.by);
    let service = skillhost_engine::RunService::new(store, std::sync::Arc::new(NoEvents));
    let cancelled = service
        .cancel(&args.run_id, &by)
        .await
        .map_err(|e| match e {
            skillhost_engine::EngineError::Store(e) => store_error(e),
            e => Failure::bad_input(e.render(&HostCommands)),
        })?;
    let (status, text) = match cancelled {
        Cancelled::Now(was) => (
            "cancelled",
            format!(
                "run {} cancelled by {} (it was {was})",
                args.run_id,
                shown(&by)
            ),
        ),
        Cancelled::Requested => (
            "cancel-requested",
            format!(
                "run {} is running: it ends as cancelled at its next node boundary (asked by \
                 {}); `host runs show {}` shows when it did",
                args.run_id,
                shown(&by),
                args.run_id
            ),
        ),
    };
    if args.json {
        return print_json(&json!({"run_id": args.run_id, "result": status, "by": by}));
    }
    println!("{text}");
    Ok(())
}

/// Who acts: `--by`, else `$USER`, else `cli`.
fn who(by: Option<String>) -> String {
    by.or_else(|| std::env::var("USER").ok())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "cli".into())
}

pub fn show(args: ShowArgs) -> CliResult {
    tokio_runtime()?.block_on(show_run(args))
}

pub fn artifact(args: ArtifactArgs) -> CliResult {
    tokio_runtime()?.block_on(write_artifact(args))
}

pub fn export(args: ExportArgs) -> CliResult {
    tokio_runtime()?.block_on(export_run(args))
}

async fn list_runs(args: ListArgs) -> CliResult {
    let status = match &args.status {
        Some(s) => Some(s.parse::<RunStatus>().map_err(|_| {
            Failure::bad_input(format!(
                "unknown status `{s}`; use queued, running, waiting, completed, failed or cancelled"
            ))
        })?),
        None => None,
    };
    let store = match args.db.try_open_existing().await {
        // Nothing has been run here yet: no runs, and nothing is created.
        Err(StoreError::Missing { path, .. }) if args.db.is_default() => {
            if args.json {
                return print_json(&json!([]));
            }
            println!("no runs yet: there is no database at {path} (`host run` creates it)");
            return Ok(());
        }
        opened => opened.map_err(open_failure)?,
    };
    // Each row is read on its own: one that does not decode or no longer
    // matches its digest is reported, and the others are still listed.
    let (runs, unreadable): (Vec<_>, Vec<_>) = store
        .list_runs_each(status, args.limit)
        .await
        .map_err(store_error)?
        .into_iter()
        .partition(Result::is_ok);
    let runs: Vec<_> = runs.into_iter().filter_map(Result::ok).collect();
    let unreadable: Vec<_> = unreadable.into_iter().filter_map(Result::err).collect();
    for bad in &unreadable {
        eprintln!(
            "warning: run `{}` cannot be listed: {}",
            shown(bad.id.as_deref().unwrap_or("?")),
            shown(&bad.error.to_string())
        );
    }
    if args.json {
        let rows: Vec<Value> = runs
            .iter()
            .map(|r| {
                json!({
                    "id": r.id, "scenario": r.scenario_name, "status": r.status.as_str(),
                    "current_node": r.current_node, "last_seq": r.last_seq,
                    "created_at_ms": r.created_at_ms, "updated_at_ms": r.updated_at_ms,
                    "forked_from": forked_from(r),
                    "parent": parent_of(r),
                })
            })
            .chain(
                unreadable
                    .iter()
                    .map(|bad| json!({"id": bad.id, "error": bad.error.to_string()})),
            )
            .collect();
        return print_json(&rows);
    }
    if runs.is_empty() && unreadable.is_empty() {
        println!("no runs in {}", store.url_for_display());
        return Ok(());
    }
    println!(
        "{:<36}  {:<16} {:<10} {:>5}  node",
        "run", "scenario", "status", "seq"
    );
    for r in &runs {
        // A child run (a subgraph node's) is listed too, marked with its
        // parent: it is a run of its own, with its own history.
        let child = r.parent().map_or(String::new(), |p| {
            format!("  (child of {} at `{}`)", shown(&p.run_id), shown(&p.node))
        });
        println!(
            "{:<36}  {:<16} {:<10} {:>5}  {}{child}",
            shown(&r.id),
            shown(&r.scenario_name),
            r.status.as_str(),
            r.last_seq,
            shown(r.current_node.as_deref().unwrap_or_default())
        );
    }
    for bad in &unreadable {
        println!(
            "{:<36}  {:<16} {:<10} {:>5}  (see the warning above)",
            shown(bad.id.as_deref().unwrap_or("?")),
            "?",
            "unreadable",
            "?"
        );
    }
    Ok(())
}

/// Reads one artifact from the store: a run whose report never reached the
/// disk (killed after its last commit, or `--out` refused) gets it back.
async fn write_artifact(args: ArtifactArgs) -> CliResult {
    if let Some(out) = &args.out {
        check_output_path(out, args.force)?;
    }
    let store = args.db.open_for_run(&args.run_id).await?;
    fetch_run(&store, &args.run_id).await?;
    let rows = store.artifacts(&args.run_id).await.map_err(store_error)?;
    let Some(row) = rows.iter().find(|row| row.name == args.name) else {
        let names: Vec<String> = rows
            .iter()
            .map(|r| format!("`{}`", shown(&r.name)))
            .collect();
        return Err(Failure::bad_input(format!(
            "run `{}` has no artifact `{}`; {}",
            args.run_id,
            args.name,
            if names.is_empty() {
                "it has none".to_string()
            } else {
                format!("it has {}", names.join(", "))
            }
        )));
    };
    let bytes = store
        .artifact_bytes(&row.digest)
        .await
        .map_err(store_error)?
        .ok_or_else(|| {
            Failure::environment(format!(
                "artifact `{}` of run `{}` has no stored bytes (digest {})",
                row.name, args.run_id, row.digest
            ))
        })?;
    match &args.out {
        Some(out) => {
            write_output_file(out, &bytes, args.force)?;
            eprintln!("written: {}", out.display());
            Ok(())
        }
        None => {
            let shown = to_terminal(&args, &row.media_type, &bytes)?;
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(shown.as_ref().map_or(&bytes[..], String::as_bytes))
                .and_then(|()| stdout.flush())
                .map_err(|e| Failure::environment(format!("cannot write to stdout: {e}")))
        }
    }
}

/// What `host runs artifact` writes when stdout is a terminal: `None` for
/// the artifact's bytes as they are (stdout is a file or a pipe), else its
/// text with every control character but new lines and tabs escaped (a
/// run's artifact is what its skills wrote, and a terminal would obey the
/// escape sequences in it); an artifact that is not text is refused.
fn to_terminal(
    args: &ArtifactArgs,
    media_type: &str,
    bytes: &[u8],
) -> Result<Option<String>, Failure> {
    use std::io::IsTerminal as _;
    if !std::io::stdout().is_terminal() {
        return Ok(None);
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Err(Failure::bad_input(format!(
            "artifact `{}` of run `{}` is not text ({}, {} bytes), which a terminal cannot \
             show; write it with `--out PATH`, or redirect stdout to a file or a pipe",
            shown(&args.name),
            args.run_id,
            shown(media_type),
            bytes.len()
        )));
    };
    let safe = shown_lines(text);
    if let std::borrow::Cow::Owned(_) = safe {
        eprintln!(
            "note: artifact `{}` holds control characters, shown escaped here (`\\u{{1b}}`); \
             `--out PATH` or a pipe gets its exact bytes",
            shown(&args.name)
        );
    }
    Ok(Some(safe.into_owned()))
}

async fn show_run(args: ShowArgs) -> CliResult {
    let store = args.db.open_for_run(&args.run_id).await?;
    let run = fetch_run(&store, &args.run_id).await?;
    let steps = store.steps(&args.run_id).await.map_err(store_error)?;
    let artifacts = store.artifacts(&args.run_id).await.map_err(store_error)?;
    let journal = store.journal(&args.run_id).await.map_err(store_error)?;
    let state = store
        .latest_state(&args.run_id)
        .await
        .map_err(store_error)?
        .map(|c| c.state);
    let usage = skillhost_engine::tokens_used(&steps);
    let components = run.provenance.as_ref().map(|p| &p.components);
    let waits = store.waits(&args.run_id).await.map_err(store_error)?;
    let children = store.children(&args.run_id).await.map_err(store_error)?;
    let trace_id = run
        .provenance
        .as_ref()
        .and_then(|p| p.trace.as_deref())
        .and_then(skillhost_telemetry::trace_id_of);
    let trace_url = match &trace_id {
        Some(id) => trace_link(id)?,
        None => None,
    };
    if args.json {
        return print_json(&json!({
            "id": run.id,
            "scenario": run.scenario_name,
            "scenario_path": run.scenario_path,
            "scenario_digest": run.scenario_digest,
            "components": components,
            "trace_id": trace_id,
            "trace_url": trace_url,
            "forked_from": forked_from(&run),
            "parent": parent_of(&run),
            "children": children.iter().map(|c| json!({
                "id": c.id, "scenario": c.scenario_name, "status": c.status.as_str(),
                "node": c.parent().map(|p| &p.node), "visit": c.parent().map(|p| p.visit),
            })).collect::<Vec<_>>(),
            "status": run.status.as_str(),
            "input": run.input,
            "error": run.error,
            "last_seq": run.last_seq,
            "usage": usage.to_json(),
            "waits": waits.iter().map(|w| json!({
                "seq": w.seq, "node": w.node_id, "prompt": w.prompt,
                "answer_schema": w.answer_schema, "created_at_ms": w.created_at_ms,
                "deadline_ms": w.deadline_ms, "answer": w.answer,
                "answered_by": w.answered_by, "answered_at_ms": w.answered_at_ms,
            })).collect::<Vec<_>>(),
            "cancel_requested": run.cancel_requested_at_ms.map(|at| json!({
                "at_ms": at, "by": run.cancel_requested_by,
            })),
            "steps": steps.iter().map(|s| json!({
                "seq": s.seq, "node": s.node_id, "attempt": s.attempt, "status": s.status,
                "started_at_ms": s.started_at_ms, "duration_us": s.duration_us, "input_hash": s.input_hash, "output_hash": s.output_hash,
                "fuel_consumed": s.fuel_consumed, "memory_peak_bytes": s.memory_peak_bytes,
                "error": s.error, "detail": s.detail,
            })).collect::<Vec<_>>(),
            "journal": journal.iter().map(|j| json!({
                "seq": j.seq, "node": j.node_id, "item": j.item, "entry": j.entry,
                "kind": j.kind, "request": j.request, "response": j.response,
            })).collect::<Vec<_>>(),
            "artifacts": artifacts.iter().map(|a| json!({
                "name": a.name, "digest": a.digest, "media_type": a.media_type, "size": a.size,
            })).collect::<Vec<_>>(),
            "state": state,
        }));
    }
    // Everything below but the host's own words is what a run, its
    // scenario or its skills wrote: shown, never printed raw.
    println!("run       {}", shown(&run.id));
    println!(
        "scenario  {} ({})",
        shown(&run.scenario_name),
        shown(&run.scenario_path)
    );
    println!("status    {}", run.status.as_str());
    println!("input     {}", shown(&run.input.to_string()));
    if !usage.is_zero() {
        println!("llm       {}", usage_text(usage));
    }
    if let Some(id) = &trace_id {
        match &trace_url {
            Some(url) => println!("trace     {id} ({})", shown(url)),
            None => println!("trace     {id}"),
        }
    }
    if let Some(origin) = run.provenance.as_ref().and_then(|p| p.forked_from.as_ref()) {
        println!(
            "forked    from run {} at checkpoint {}",
            shown(&origin.run_id),
            origin.seq
        );
    }
    if let Some(at) = run.cancel_requested_at_ms {
        println!(
            "cancel    asked by {} at {}; the run ends at its next node boundary",
            shown(run.cancel_requested_by.as_deref().unwrap_or("someone")),
            format_ms(at)
        );
    }
    for wait in &waits {
        println!(
            "approval  node `{}` at checkpoint {}: {}",
            shown(&wait.node_id),
            wait.seq,
            shown(&wait.prompt)
        );
        match (&wait.answer, wait.deadline_ms) {
            (Some(answer), _) => println!(
                "          answered by {} at {}: {}",
                shown(wait.answered_by.as_deref().unwrap_or("?")),
                wait.answered_at_ms.map(format_ms).unwrap_or_default(),
                shown(&answer.to_string())
            ),
            (None, deadline) if run.status == RunStatus::Waiting && wait.seq == run.last_seq => {
                println!(
                    "          waiting since {}{}; answer with `host runs answer {} --data JSON` \
                     ({})",
                    format_ms(wait.created_at_ms),
                    deadline
                        .map(|d| format!(", times out at {}", format_ms(d)))
                        .unwrap_or_default(),
                    shown(&run.id),
                    shown(&skillhost_engine::describe_fields(&wait.answer_schema))
                )
            }
            (None, Some(deadline)) => {
                println!(
                    "          not answered; timed out at {}",
                    format_ms(deadline)
                )
            }
            (None, None) => println!("          not answered"),
        }
    }
    if let Some(parent) = run.parent() {
        let parent_run = shown(&parent.run_id);
        println!(
            "parent    run {parent_run} (node `{}`, visit {}): `host runs show {parent_run}`",
            shown(&parent.node),
            parent.visit
        );
    }
    if !children.is_empty() {
        println!("children");
        for child in &children {
            let (node, visit) = child
                .parent()
                .map_or(("?", 0), |p| (p.node.as_str(), p.visit));
            println!(
                "  {}  {:<16} {:<10} node `{}`, visit {visit}",
                shown(&child.id),
                shown(&child.scenario_name),
                child.status.as_str(),
                shown(node)
            );
        }
    }
    match components {
        Some(components) => {
            println!("components");
            for (alias, digest) in components {
                println!("  {:<22} sha256:{}", shown(alias), shown(digest));
            }
        }
        None => println!("components (not recorded: the run predates component digests)"),
    }
    println!(
        "\n{:>4}  {:<24} {:>3}  {:<6} {:>10}  {:>12}  error",
        "seq", "node", "try", "status", "ms", "fuel"
    );
    for s in &steps {
        let error = s
            .error
            .as_ref()
            .and_then(|e| e.get("message"))
            .and_then(Value::as_str)
            .unwrap_or("");
        println!(
            "{:>4}  {:<24} {:>3}  {:<6} {:>10.2}  {:>12}  {}",
            s.seq.map(|q| q.to_string()).unwrap_or_else(|| "-".into()),
            shown(&s.node_id),
            s.attempt,
            s.status.as_str(),
            s.duration_us as f64 / 1e3,
            s.fuel_consumed.map(|f| f.to_string()).unwrap_or_default(),
            shown(error)
        );
        for warning in step_warnings(s) {
            println!("{:>6}warning: {}", "", shown(&warning));
        }
        if let Some(seq) = s.seq {
            for entry in journal
                .iter()
                .filter(|j| j.seq == seq && j.node_id == s.node_id)
            {
                println!("{:>6}{}", "", shown(&journal_line(entry)));
            }
        }
        let child_run = s.detail.as_ref().and_then(|d| d.get("child_run_id"));
        if let Some(child) = child_run.and_then(Value::as_str) {
            let child = shown(child);
            println!("{:>6}child run: {child} (`host runs show {child}`)", "");
        }
        let step_usage = s.detail.as_ref().and_then(|d| d.get("usage"));
        if let Some(used) = step_usage.and_then(TokenUsage::from_json) {
            println!("{:>6}llm: {}", "", usage_text(used));
        }
        if let Some(cached) = s.detail.as_ref().and_then(|d| d.get("cached")) {
            println!(
                "{:>6}cached: the output of run {}, step {} (node `{}`); the skill was not called",
                "",
                shown(cached.get("run_id").and_then(Value::as_str).unwrap_or("?")),
                shown(&cached.get("seq").unwrap_or(&Value::Null).to_string()),
                shown(cached.get("node").and_then(Value::as_str).unwrap_or("?")),
            );
        }
        if let Some(why) = s
            .detail
            .as_ref()
            .and_then(|d| d.get("cache_refused"))
            .and_then(Value::as_str)
        {
            println!("{:>6}cache: an entry was not served: {}", "", shown(why));
        }
        let dropped = s.detail.as_ref().and_then(|d| d.get("logs_dropped"));
        if let Some(dropped) = dropped.and_then(Value::as_u64) {
            println!(
                "{:>6}logs: {dropped} line(s) dropped past the call's log budget",
                ""
            );
        }
    }
    if !artifacts.is_empty() {
        println!("\nartifacts");
        for a in &artifacts {
            println!(
                "  {} ({}, {} bytes) sha256:{}",
                shown(&a.name),
                shown(&a.media_type),
                a.size,
                shown(&a.digest)
            );
        }
    }
    if let Some(error) = &run.error {
        println!(
            "\nerror\n{}",
            shown_lines(&serde_json::to_string_pretty(error).unwrap_or_default())
        );
    }
    if let Some(state) = state {
        println!(
            "\nstate\n{}",
            shown_lines(&serde_json::to_string_pretty(&state).unwrap_or_default())
        );
    }
    Ok(())
}

/// Tokens as people read them: `19 tokens (8 in, 11 out) in 3
/// completion(s)`.
fn usage_text(usage: TokenUsage) -> String {
    format!(
        "{} tokens ({} in, {} out) in {} completion(s)",
        usage.total(),
        usage.input_tokens,
        usage.output_tokens,
        usage.calls
    )
}

/// Where a run was forked from, as `runs list --json` and `runs show --json`
/// print it (null for a run that was not).
fn forked_from(run: &RunRow) -> Value {
    match run.provenance.as_ref().and_then(|p| p.forked_from.as_ref()) {
        Some(origin) => json!({ "run_id": origin.run_id, "seq": origin.seq }),
        None => Value::Null,
    }
}

/// The run and subgraph node that started a child run, as `runs list
/// --json` and `runs show --json` print it (null for a run that is not a
/// child).
fn parent_of(run: &RunRow) -> Value {
    match run.parent() {
        Some(p) => json!({ "run_id": p.run_id, "node": p.node, "visit": p.visit }),
        None => Value::Null,
    }
}

/// Writes run `args.run_id` as an audit file (and its components with
/// `--components`): the library builds it, this prints it.
async fn export_run(args: ExportArgs) -> CliResult {
    if let Some(out) = &args.out {
        check_output_path(out, args.force)?;
    }
    if let Some(dir) = &args.components
        && !dir.is_dir()
    {
        std::fs::create_dir(dir).map_err(|e| {
            Failure::bad_input(format!(
                "cannot create the components directory `{}`: {e}; its parent must exist",
                dir.display()
            ))
        })?;
    }
    let store = args.db.open_for_run(&args.run_id).await?;
    fetch_run(&store, &args.run_id).await?;
    let export = RunExport::from_store(&store, &args.run_id)
        .await
        .map_err(replay_failure)?;
    for changed in export.changed_journal_entries() {
        eprintln!(
            "warning: {changed}; it is exported as stored, and a replay reports it as its \
             step's divergence"
        );
    }
    if let Some(dir) = &args.components {
        let written = export.write_components(dir).map_err(replay_failure)?;
        eprintln!("components: {} file(s) in {}", written.len(), dir.display());
    }
    let text = export.to_json();
    match &args.out {
        Some(out) => {
            write_output_file(out, format!("{text}\n").as_bytes(), args.force)?;
            eprintln!("written: {}", out.display());
            Ok(())
        }
        None => {
            println!("{text}");
            Ok(())
        }
    }
}

/// A run that cannot be exported or replayed: the environment (exit 3)
/// when a database or the history fails, else what was asked for (exit 2).
fn replay_failure(e: ReplayError) -> Failure {
    if e.is_environment() {
        Failure::environment(e.render(&HostCommands))
    } else {
        Failure::bad_input(e.render(&HostCommands))
    }
}

/// One journaled host call of a step, on one line: its kind, what was asked
/// and what came back (`http GET URL -> 200, 26 bytes`; `kv get KEY -> ok`;
/// `llm local/MODEL, 2 message(s) -> 5 in, 7 out tokens`; `sql SELECT … -> 6 row(s)`),
/// as each capability describes its entries.
fn journal_line(entry: &JournalEntry) -> String {
    let item = entry
        .item
        .map(|i| format!("item {i}: "))
        .unwrap_or_default();
    let call = describe_journal_entry(&entry.kind, &entry.request, &entry.response);
    format!("journal: {item}{} {call}", entry.kind)
}

/// The rule warnings a step recorded, one line each: code, message and
/// suggestions.
fn step_warnings(step: &StepRow) -> Vec<String> {
    let Some(Value::Array(warnings)) = step.detail.as_ref().and_then(|d| d.get("warnings")) else {
        return Vec::new();
    };
    warnings
        .iter()
        .map(|w| {
            let text = |key: &str| w.get(key).and_then(Value::as_str).unwrap_or("");
            let mut line = format!("{}: {}", text("code"), text("message"));
            if let Some(Value::Array(suggestions)) = w.get("suggestions") {
                let suggestions: Vec<&str> = suggestions.iter().filter_map(Value::as_str).collect();
                if !suggestions.is_empty() {
                    line.push_str(&format!(" (try: {})", suggestions.join("; ")));
                }
            }
            line
        })
        .collect()
}

pub fn prune(args: PruneArgs) -> CliResult {
    let rt = tokio_runtime()?;
    rt.block_on(async {
        // Pruning a database that does not exist would create one to prune.
        let store = args.db.open_existing().await?;
        let report = store
            .prune_runs(args.older_than)
            .await
            .map_err(store_error)?;
        if args.json {
            return print_json(&report);
        }
        println!(
            "pruned {} finished run(s), {} unreferenced artifact blob(s) and {} expired or \
             orphaned node cache row(s) from {}",
            report.runs.len(),
            report.blobs,
            report.cache_entries,
            store.url_for_display()
        );
        Ok(())
    })
}

pub fn retention(args: RetentionArgs) -> CliResult {
    let rt = tokio_runtime()?;
    rt.block_on(async {
        // Setting a retention may create the database it is kept in; listing
        // the settings reads one that must exist.
        let store = match (&args.scenario, &args.keep) {
            (Some(_), Some(_)) => args.db.open().await?,
            _ => args.db.open_existing().await?,
        };
        match (&args.scenario, &args.keep) {
            (Some(scenario), Some(keep)) => {
                let keep = match keep.as_str() {
                    "off" | "none" => None,
                    text => Some(parse_duration(text).map_err(Failure::bad_input)?),
                };
                store
                    .set_retention(scenario, keep)
                    .await
                    .map_err(store_error)?;
                list_retention(&store, args.json).await
            }
            (Some(_), None) => Err(Failure::bad_input(
                "give how long to keep the scenario's finished runs (e.g. 30d) or `off`",
            )),
            _ => list_retention(&store, args.json).await,
        }
    })
}

async fn list_retention(store: &History, json_out: bool) -> CliResult {
    let settings = store.retention().await.map_err(store_error)?;
    if json_out {
        return print_json(&settings);
    }
    if settings.is_empty() {
        println!("no per-scenario retention settings");
    }
    for setting in settings {
        let keep = Duration::from_millis(setting.keep_ms.max(0) as u64);
        println!(
            "{:<24} keep finished runs {}",
            shown(&setting.scenario_name),
            human(keep)
        );
    }
    Ok(())
}

fn human(d: Duration) -> String {
    let secs = d.as_secs();
    match secs {
        s if s % 86_400 == 0 && s > 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 && s > 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 && s > 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}
