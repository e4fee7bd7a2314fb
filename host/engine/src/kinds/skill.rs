//! A skill node: map the input, check it and the preconditions, call the
//! skill (with retries), check the output and the postconditions, turn the
//! result into writes and artifacts.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use super::{NodeFailure, NodeSuccess, Outcome};
use crate::RunContext;
use crate::cache::{self, Lookup};
use crate::call::{Attempts, CallPlan, call_node_skill, journal_entries, usage_detail};
use crate::failure::FailureCode;
use crate::node::{
    artifacts, base_vars, check_constraints, check_post, check_pre, map_input, skill_of, writes,
};
use crate::run::{empty_step, now_ms};
use skillhost_scenario::{Node, SkillCall};
use skillhost_store::{RunState, StepRow, state_hash};

pub(crate) async fn run(
    cx: &RunContext<'_>,
    node: &Node,
    call: &SkillCall,
    state: &Arc<RunState>,
    tokens_left: Option<u64>,
) -> Outcome {
    run_call(cx, node, call, state, tokens_left).await.into()
}

async fn run_call(
    cx: &RunContext<'_>,
    node: &Node,
    call: &SkillCall,
    state: &Arc<RunState>,
    tokens_left: Option<u64>,
) -> Result<NodeSuccess, (NodeFailure, Option<StepRow>)> {
    let skill = skill_of(cx, node, call).map_err(|f| (f, None))?;
    let mut vars = base_vars(cx, node, state);
    let input = map_input(node, &call.input, &vars).map_err(|f| (f, None))?;
    check_constraints(node, "input", call.input_constraints.as_deref(), &input)
        .map_err(|f| (f, None))?;
    check_pre(node, &call.pre, &vars).map_err(|f| (f, None))?;

    let durable = cx.keeps_records();
    let started_at_ms = now_ms();
    // A cached node first asks the store; a hit stands for the call. A node
    // without `cache` does not even build the lookup.
    let lookup = match call.cache {
        Some(_) => cache::lookup(cx, call, &skill, &input).await,
        None => Lookup::Off,
    };
    let attempts = match &lookup {
        Lookup::Hit(hit) => cache::attempts_of(hit),
        Lookup::Off | Lookup::Miss { .. } => {
            let plan = CallPlan::new(call, &skill, tokens_left, cx.kv.as_ref());
            call_node_skill(cx, &node.id, &skill, &plan, &input).await
        }
    };
    let usage = attempts.usage();
    let Attempts {
        mut report,
        attempt,
        failed,
        ..
    } = attempts;
    // The host calls were made whatever happens to the node now: a failure
    // commits them like a success, and counts their tokens.
    let journal = journal_entries(&node.id, None, std::mem::take(&mut report.journal));
    let failed_after_call = |mut f: NodeFailure, step: &StepRow| {
        f.attempt = attempt;
        f.journal = journal.clone();
        f.usage = usage;
        (f, Some(step.clone()))
    };
    cx.log.record_attempts(&failed).await.map_err(|e| {
        (
            NodeFailure::new(FailureCode::StoreError, e.to_string()),
            None,
        )
    })?;
    let mut step = empty_step(cx, node, attempt);
    step.started_at_ms = started_at_ms;
    step.fuel_consumed = Some(report.fuel_consumed);
    step.memory_peak_bytes = Some(report.memory_peak_bytes);
    if durable {
        step.input_hash = Some(state_hash(&input));
        // The last attempt's; the rows of the attempts before it hold theirs.
        step.detail = usage_detail(report.usage);
    }
    let output = match report.result {
        Ok(output) => output,
        Err(e) => {
            let mut failure = NodeFailure::coded(e.code().to_owned(), e.to_string());
            failure.detail =
                json!({ "kind": e.kind(), "skill": e.skill(), "retryable": e.retryable() });
            return Err(failed_after_call(failure, &step));
        }
    };
    if durable {
        step.output_hash = Some(state_hash(&output));
    }
    check_constraints(node, "output", call.output_constraints.as_deref(), &output)
        .map_err(|f| failed_after_call(f, &step))?;
    // Only a call that made no journaled host call is recorded: its output
    // is a function of the key. It is committed only if the node succeeds.
    let cache = match (&lookup, call.cache) {
        (Lookup::Miss { key, .. }, Some(spec)) if journal.is_empty() => {
            Some(cache::entry(key.clone(), &output, spec.ttl_ms))
        }
        _ => None,
    };
    vars.set_owned("output", output);
    let verified = check_post(node, &call.post, &vars).map_err(|f| failed_after_call(f, &step))?;
    // The step row's detail is only ever stored.
    let verified_quotes = (durable && !verified.is_empty()).then(|| Value::Array(verified.clone()));
    vars.set_owned("verified", Value::Array(verified));
    let changes = writes(cx, node, &call.writes, &vars, state).map_err(|mut f| {
        f.journal = journal.clone();
        f.usage = usage;
        (f, Some(step.clone()))
    })?;
    let files = artifacts(node, &call.artifacts, &vars).map_err(|mut f| {
        f.journal = journal.clone();
        f.usage = usage;
        (f, Some(step.clone()))
    })?;
    if durable {
        let mut detail = match step.detail.take() {
            Some(Value::Object(detail)) => detail,
            _ => Map::new(),
        };
        if let Some(verified) = verified_quotes {
            detail.insert("verified_quotes".into(), verified);
        }
        match &lookup {
            Lookup::Hit(hit) => {
                detail.insert("cached".into(), cache::hit_detail(hit));
            }
            Lookup::Miss {
                refused: Some(why), ..
            } => {
                detail.insert("cache_refused".into(), json!(why));
            }
            Lookup::Off | Lookup::Miss { .. } => {}
        }
        if !report.logs.is_empty() {
            detail.insert("logs".into(), json!(report.logs));
        }
        if report.logs_dropped > 0 {
            detail.insert("logs_dropped".into(), json!(report.logs_dropped));
        }
        if !detail.is_empty() {
            step.detail = Some(Value::Object(detail));
        }
    }
    Ok(NodeSuccess {
        changes,
        step,
        fuel_consumed: report.fuel_consumed,
        artifacts: files,
        journal,
        logs_dropped: report.logs_dropped,
        usage,
        cache,
        answer: None,
        route: None,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;
    use skillhost_runtime::{
        Backends, KvBackend, KvGrant, MemoryKv, PoolConfig, Runtime, RuntimeConfig,
    };
    use skillhost_store::{JournalEntry, RunStatus, Store};

    use crate::{Engine, NoEvents, RunOutcome};

    const SCENARIO: &str = r#"
[scenario]
name = "kv-journal"
version = "0.1.0"
description = "A skill node and a map node whose skill reads kv"

[input]
key = { type = "string" }

[state]
greeting = { type = "string" }
readings = { type = "array" }

[skills.probe]
component = "kv-probe.wasm"

[[node]]
id = "read_one"
skill = "probe"
capabilities = { kv = "shared" }
input = { key = "input.key" }
writes = [{ field = "greeting", from = "output.text" }]

[[node]]
id = "read_many"
kind = "map"
skill = "probe"
capabilities = { kv = "shared" }
over = "['a', 'b', 'c']"
concurrency = 3
input = { key = "item" }
writes = [{ field = "readings", from = "output.map(o, o.text)" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "read_one"
to = "read_many"

[[edge]]
from = "read_many"
to = "done"
"#;

    /// Runs `scenario` (next to the `kv-probe` component, whose kv holds
    /// `greeting`, `a` and `b` in namespace `shared`) with a SQLite store:
    /// the outcome and the run's journal rows.
    async fn run(scenario: &str, input: serde_json::Value) -> (RunOutcome, Vec<JournalEntry>) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("kv-probe.wasm"),
            skillhost_tests::fixture_component("kv-probe"),
        )
        .unwrap();
        let path = dir.path().join("kv-journal.toml");
        std::fs::write(&path, scenario).unwrap();

        let kv = MemoryKv::default();
        // The scenario's own namespace `shared`.
        let grant = KvGrant::parse("shared").unwrap().owned_by("kv-journal");
        for (key, value) in [("greeting", "hello"), ("a", "1"), ("b", "2")] {
            kv.set(
                &grant.namespace(),
                key,
                value.as_bytes().to_vec(),
                grant.quota(),
            )
            .unwrap();
        }
        let runtime = Runtime::new(RuntimeConfig {
            cache_dir: Some(dir.path().join("cache")),
            pool: PoolConfig {
                component_instances: 16,
                core_instances: 128,
                memories: 32,
                tables: 64,
            },
            backends: Backends {
                kv: Arc::new(kv),
                ..Backends::default()
            },
        })
        .unwrap();
        let loaded = skillhost_scenario::load(&path, &runtime).expect("scenario loads");
        let url = format!("sqlite://{}", dir.path().join("runs.db").display());
        let store = Store::open(&url).await.unwrap();
        let engine = Engine::new(Some(store), Arc::new(NoEvents)).with_runtime_kv();
        let outcome = engine.start(&loaded, input, None).await.unwrap();
        let journal = engine
            .store()
            .unwrap()
            .journal(&outcome.run_id)
            .await
            .unwrap();
        (outcome, journal)
    }

    #[tokio::test]
    async fn a_nodes_kv_calls_are_committed_to_the_journal_with_its_step() {
        let (outcome, journal) = run(SCENARIO, json!({ "key": "greeting" })).await;
        assert_eq!(
            outcome.status,
            RunStatus::Completed,
            "{:?}",
            outcome.failure
        );
        assert_eq!(outcome.state.get("greeting"), Some(&json!("hello")));
        assert_eq!(
            outcome.state.get("readings"),
            Some(&json!(["1", "2", "(none)"]))
        );
        let rows: Vec<(u64, &str, &str, String, &serde_json::Value)> = journal
            .iter()
            .map(|e| {
                let what = e.request["key"].as_str().unwrap_or_default();
                (
                    e.seq,
                    e.node_id.as_str(),
                    e.kind.as_str(),
                    format!("{} {what}", e.request["op"].as_str().unwrap()),
                    &e.response,
                )
            })
            .collect();
        let ok_null = json!({ "ok": null });
        assert_eq!(
            rows,
            [
                (
                    1,
                    "read_one",
                    "kv",
                    "get greeting".to_string(),
                    &json!({ "ok": "aGVsbG8=" })
                ),
                (1, "read_one", "kv", "set seen".to_string(), &ok_null),
                (
                    2,
                    "read_many",
                    "kv",
                    "get a".to_string(),
                    &json!({ "ok": "MQ==" })
                ),
                (2, "read_many", "kv", "set seen".to_string(), &ok_null),
                (
                    2,
                    "read_many",
                    "kv",
                    "get b".to_string(),
                    &json!({ "ok": "Mg==" })
                ),
                (2, "read_many", "kv", "set seen".to_string(), &ok_null),
                (
                    2,
                    "read_many",
                    "kv",
                    "get c".to_string(),
                    &json!({ "ok": null })
                ),
                (2, "read_many", "kv", "set seen".to_string(), &ok_null),
            ]
        );
        // Each write's request names the value it wrote, by length and digest.
        assert_eq!(journal[1].request["value_bytes"], json!("greeting".len()));
        assert_eq!(journal[7].request["value_bytes"], json!(1));
    }

    #[tokio::test]
    async fn a_node_that_fails_after_its_kv_calls_commits_them_with_the_failure() {
        let scenario = SCENARIO.replace(
            "writes = [{ field = \"greeting\", from = \"output.text\" }]",
            "post = [{ name = \"says hi\", when = \"output.text == 'hi'\", message = \"it did not say hi\" }]\n\
             writes = [{ field = \"greeting\", from = \"output.text\" }]",
        );
        assert_ne!(scenario, SCENARIO);
        let (outcome, journal) = run(&scenario, json!({ "key": "greeting" })).await;
        assert_eq!(outcome.status, RunStatus::Failed);
        let rows: Vec<(u64, &str, &serde_json::Value)> = journal
            .iter()
            .map(|e| (e.seq, e.node_id.as_str(), &e.request["op"]))
            .collect();
        assert_eq!(
            rows,
            [
                (1, "read_one", &json!("get")),
                (1, "read_one", &json!("set"))
            ]
        );
        assert_eq!(journal[0].response, json!({ "ok": "aGVsbG8=" }));
    }
}
