//! The compose benchmark (`host bench compose`): how long a composed
//! scenario takes from the text a client sends to its first node, that is
//! every check (the checker's and the ceiling's), keeping its text, and a
//! durable run's start on SQLite, against the same scenario offered as a
//! tool (loaded at the server's start), measured in the same run.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use skillhost_engine::queue::RunRequest;
use skillhost_engine::{Event, EventSink, RunService};
use skillhost_runtime::{Grants, Limits, PoolConfig, Runtime, RuntimeConfig};
use skillhost_scenario::LoadedScenario;
use skillhost_scenario::compose::Ceiling;
use skillhost_store::Store;

use crate::SkillTool;
use crate::compose::{ComposeOffer, Composer, Prepared};

/// What the compose benchmark measured, in milliseconds (medians and 90th
/// percentiles over `runs`).
#[derive(Debug, Clone)]
pub struct ComposeFigures {
    pub runs: usize,
    /// The checks alone (a dry run): text in, verdict out.
    pub check_ms: f64,
    /// Text in, first node started: checks, keeping the text (written and
    /// synced, as it must be before the run that names it commits), the
    /// run's start.
    pub first_node_ms: f64,
    pub first_node_p90_ms: f64,
    /// The baseline: the same scenario offered as a tool, from the call to
    /// its first node.
    pub offered_first_node_ms: f64,
}

impl ComposeFigures {
    /// `first_node_ms` over the baseline's.
    pub fn ratio(&self) -> f64 {
        self.first_node_ms / self.offered_first_node_ms
    }

    pub fn to_json(&self) -> Value {
        json!({
            "runs": self.runs,
            "check_ms": self.check_ms,
            "first_node_ms": self.first_node_ms,
            "first_node_p90_ms": self.first_node_p90_ms,
            "offered_first_node_ms": self.offered_first_node_ms,
            "ratio": self.ratio(),
        })
    }
}

impl fmt::Display for ComposeFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "composed scenario, {} runs (three echo nodes, durable on SQLite):",
            self.runs
        )?;
        writeln!(f, "  checks alone (dry run){:8.2} ms median", self.check_ms)?;
        writeln!(
            f,
            "  text to first node    {:8.2} ms median, {:.2} ms p90",
            self.first_node_ms, self.first_node_p90_ms
        )?;
        writeln!(
            f,
            "  offered, to first node{:8.2} ms median (baseline)",
            self.offered_first_node_ms
        )?;
        write!(f, "  composed / offered    {:8.2}x", self.ratio())
    }
}

/// The composed scenario of run `i`: three echo nodes; its description
/// differs per run, so each is a new scenario, checked and kept anew.
fn scenario(i: usize) -> String {
    format!(
        r#"[scenario]
name = "composed-bench"
description = "run {i}"

[input]
message = {{ type = "string" }}

[state]
first = {{ type = "integer" }}
second = {{ type = "integer" }}
third = {{ type = "integer" }}

[skills.echo]
component = "echo"

[[node]]
id = "one"
skill = "echo"
input = {{ message = "input.message", repeat = "2" }}
writes = [{{ field = "first", from = "output.length" }}]
timeout_ms = 5000

[[node]]
id = "two"
skill = "echo"
input = {{ message = "input.message", repeat = "3" }}
writes = [{{ field = "second", from = "output.length" }}]
timeout_ms = 5000

[[node]]
id = "three"
skill = "echo"
input = {{ message = "input.message", repeat = "1" }}
writes = [{{ field = "third", from = "output.length" }}]
timeout_ms = 5000

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "one"
to = "two"

[[edge]]
from = "two"
to = "three"

[[edge]]
from = "three"
to = "done"
"#
    )
}

/// Records when the first node of a run started.
#[derive(Default)]
struct FirstNode(Mutex<Option<Instant>>);

impl EventSink for FirstNode {
    fn emit(&self, event: &Event) {
        if let Event::NodeStarted { .. } = event {
            let mut first = self.0.lock().unwrap_or_else(|e| e.into_inner());
            first.get_or_insert_with(Instant::now);
        }
    }
}

/// Times `runs` composed scenarios (after a tenth as many, at least 3,
/// untimed) and as many runs of the offered one, interleaved; `echo` is the
/// `echo` skill's component.
pub async fn compose(echo: &[u8], runs: usize) -> Result<ComposeFigures, String> {
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let echo_path = dir.path().join("echo.wasm");
    std::fs::write(&echo_path, echo).map_err(|e| format!("writing echo: {e}"))?;
    let runtime = Runtime::new(RuntimeConfig {
        cache_dir: Some(dir.path().join("cache")),
        pool: PoolConfig::default(),
        ..RuntimeConfig::default()
    })
    .map_err(|e| format!("{e:#}"))?;
    let skill = runtime.load_file(&echo_path).map_err(|e| e.to_string())?;
    let ceiling_path = dir.path().join("ceiling.toml");
    let ceiling = Ceiling::parse(
        "[skills]\nallow = [\"echo\"]\n\n[limits]\ntimeout_ms = 10000\nmax_nodes = 8\n",
        &ceiling_path,
    )?;
    let composer = Composer::new(
        ComposeOffer {
            ceiling,
            dir: dir.path().join("composed"),
            runtime: runtime.clone(),
        },
        &[],
        &[SkillTool {
            skill,
            grants: Arc::new(Grants::default()),
            limits: Limits::default(),
        }],
    );
    let offered_path = dir.path().join("offered.toml");
    std::fs::write(
        &offered_path,
        scenario(0).replace(
            "component = \"echo\"",
            &format!("component = \"{}\"", echo_path.display()),
        ),
    )
    .map_err(|e| format!("writing the offered scenario: {e}"))?;
    let offered = Arc::new(
        skillhost_scenario::load(&offered_path, &runtime).map_err(|report| report.to_string())?,
    );
    let url = format!("sqlite://{}", dir.path().join("runs.db").display());
    let store = Store::open(&url).await.map_err(|e| e.to_string())?;
    let input = json!({"message": "hello"});

    let warmup = (runs / 10).max(3);
    let (mut checks, mut composed, mut baseline) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..warmup + runs {
        let (check, first) = composed_run(&composer, &store, i, &input).await?;
        let offered_first = offered_run(&offered, &store, &input).await?;
        if i >= warmup {
            checks.push(check);
            composed.push(first);
            baseline.push(offered_first);
        }
    }
    drop(store);
    Ok(ComposeFigures {
        runs,
        check_ms: percentile(&mut checks, 0.5),
        first_node_ms: percentile(&mut composed, 0.5),
        first_node_p90_ms: percentile(&mut composed, 0.9),
        offered_first_node_ms: percentile(&mut baseline, 0.5),
    })
}

/// One composed run: (checks, text to first node).
async fn composed_run(
    composer: &Composer,
    store: &Store,
    i: usize,
    input: &Value,
) -> Result<(Duration, Duration), String> {
    // The checks alone: a dry run of another text, so that the timed call
    // below meets a scenario not kept yet.
    let dry = json!({"scenario": scenario(i + 1_000_000), "input": input, "dry_run": true});
    let started = Instant::now();
    if let Prepared::Answer(value, true) = composer.prepare(&dry) {
        return Err(format!("the benchmark's scenario was refused: {value}"));
    }
    let check = started.elapsed();
    let arguments = json!({"scenario": scenario(i + 1), "input": input});
    let started = Instant::now();
    let ready = match composer.prepare(&arguments) {
        Prepared::Run(ready) => ready,
        Prepared::Answer(value, _) => {
            return Err(format!("the benchmark's scenario was refused: {value}"));
        }
    };
    let first = run_to_end(store, &ready.loaded, ready.input).await?;
    Ok((check, first - started))
}

/// One run of the offered scenario: call to first node.
async fn offered_run(
    offered: &Arc<LoadedScenario>,
    store: &Store,
    input: &Value,
) -> Result<Duration, String> {
    let started = Instant::now();
    let first = run_to_end(store, offered, input.clone()).await?;
    Ok(first - started)
}

/// Runs `loaded` to its end; when its first node started.
async fn run_to_end(
    store: &Store,
    loaded: &LoadedScenario,
    input: Value,
) -> Result<Instant, String> {
    let sink = Arc::new(FirstNode::default());
    let service = RunService::new(store.clone(), sink.clone());
    service
        .start(loaded, input, RunRequest::default())
        .await
        .map_err(|e| e.to_string())?;
    let first = *sink.0.lock().unwrap_or_else(|e| e.into_inner());
    first.ok_or_else(|| "the run started no node".to_string())
}

/// The `q` quantile of `samples`, in milliseconds.
fn percentile(samples: &mut [Duration], q: f64) -> f64 {
    samples.sort();
    let index = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples
        .get(index)
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0)
}
