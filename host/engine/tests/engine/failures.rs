//! A skill that fails: retries of retryable errors (each failed attempt a
//! step row of its own), the retry policy of the node or of the skill's
//! manifest, traps, and the limits and grants a node gives its call.

use serde_json::json;
use skillhost_engine::Event;

use crate::{completed, e2e_scenario, failed, load, run_both, scenario};

#[tokio::test]
async fn retryable_errors_are_retried_and_every_attempt_is_a_step() {
    let loaded = load(&e2e_scenario("failing"));
    let (ran, db) = run_both(&loaded, json!({ "mode": "retryable-error" })).await;
    failed(&ran);
    assert_eq!(ran.last_error()["attempt"], 3);
    assert_eq!(ran.last_error()["code"], "requested-retryable-error");
    assert_eq!(
        ran.failure()["message"],
        "flaky failed: requested-retryable-error"
    );

    let steps = db.steps(&ran.outcome.run_id).await;
    let attempts: Vec<(u32, &str, Option<u64>)> = steps
        .iter()
        .map(|s| (s.attempt, s.status.as_str(), s.seq))
        .collect();
    // The retried attempts have no checkpoint; the last one records the
    // failure that went to the handler.
    assert_eq!(
        attempts,
        [
            (1, "failed", None),
            (2, "failed", None),
            (3, "failed", Some(1))
        ]
    );
    for step in &steps {
        let error = step.error.as_ref().unwrap();
        assert_eq!(error["code"], "requested-retryable-error", "{step:?}");
        assert!(step.duration_us > 0, "{step:?}");
        assert!(step.fuel_consumed.unwrap() > 0, "{step:?}");
    }
    assert_eq!(steps[0].error.as_ref().unwrap()["retryable"], true);

    let failures: Vec<(u32, bool)> = ran
        .events
        .iter()
        .filter_map(|e| match e {
            Event::NodeFailed {
                attempt,
                will_retry,
                ..
            } => Some((*attempt, *will_retry)),
            _ => None,
        })
        .collect();
    assert_eq!(failures, [(1, true), (2, true), (3, false)]);
}

#[tokio::test]
async fn errors_that_are_not_retryable_fail_at_once_and_traps_are_reported() {
    let loaded = load(&e2e_scenario("failing"));
    let (ran, db) = run_both(&loaded, json!({ "mode": "error" })).await;
    failed(&ran);
    assert_eq!(ran.last_error()["attempt"], 1);
    assert_eq!(db.attempts(&ran.outcome.run_id).await.len(), 1);

    let (ran, _db) = run_both(&loaded, json!({ "mode": "panic" })).await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "trap");
    assert_eq!(error["attempt"], 1);
    assert_eq!(error["detail"]["kind"], "trap");
    assert_eq!(error["detail"]["retryable"], false);

    let (ran, _db) = run_both(&loaded, json!({ "mode": "ok" })).await;
    completed(&ran);
}

#[tokio::test]
async fn without_a_node_retry_the_manifest_policy_applies() {
    let loaded = load(&scenario("retry_policy"));
    // `fail` declares three attempts in its manifest.
    let (ran, db) = run_both(&loaded, json!({ "policy": "manifest" })).await;
    failed(&ran);
    assert_eq!(ran.last_error()["attempt"], 3);
    let attempts = db.attempts(&ran.outcome.run_id).await;
    assert_eq!(
        attempts
            .iter()
            .filter(|(n, _, _)| n == "by_manifest")
            .count(),
        3,
        "{attempts:?}"
    );

    // A node's own `retry` wins over the manifest's.
    let (ran, db) = run_both(&loaded, json!({ "policy": "once" })).await;
    failed(&ran);
    assert_eq!(ran.last_error()["attempt"], 1);
    let attempts = db.attempts(&ran.outcome.run_id).await;
    assert_eq!(
        attempts.iter().filter(|(n, _, _)| n == "once").count(),
        1,
        "{attempts:?}"
    );
}

/// A scenario running the `adversary` test component with a read-only
/// directory grant holding `data.txt`, and a timeout on its call.
struct Adversary {
    dir: tempfile::TempDir,
}

impl Adversary {
    fn new() -> Adversary {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("adversary.wasm"),
            skillhost_tests::fixture_component("adversary"),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("granted")).unwrap();
        std::fs::write(
            dir.path().join("granted/data.txt"),
            "read through the grant",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("adversary.toml"),
            r#"
[scenario]
name = "adversary"
version = "0.1.0"

[input]
text = { type = "string" }

[state]
text = { type = "string" }

[skills.adversary]
component = "adversary.wasm"

[[node]]
id = "call"
skill = "adversary"
input = { text = "input.text" }
capabilities = { fs = "granted" }
timeout_ms = 300
writes = [{ field = "text", from = "output.text" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "call"
to = "done"
"#,
        )
        .unwrap();
        Adversary { dir }
    }

    async fn run(&self, text: &str) -> (crate::Ran, crate::Db) {
        let loaded = load(&self.dir.path().join("adversary.toml"));
        run_both(&loaded, json!({ "text": text })).await
    }
}

#[tokio::test]
async fn a_node_grants_its_call_the_directory_it_names() {
    let adversary = Adversary::new();
    let (ran, _db) = adversary.run("f").await;
    completed(&ran);
    assert_eq!(ran.state()["text"], "read through the grant");
}

#[tokio::test]
async fn a_call_past_its_timeout_or_a_trap_fails_the_node() {
    let adversary = Adversary::new();
    let (ran, db) = adversary.run("loop").await;
    failed(&ran);
    let error = ran.last_error();
    assert_eq!(error["code"], "timeout", "{error}");
    assert_eq!(
        error["message"],
        "skill `adversary` exceeded its timeout of 300 ms"
    );
    assert_eq!(error["detail"]["skill"], "adversary");
    // The step records how long the call ran before it was stopped.
    let steps = db.steps(&ran.outcome.run_id).await;
    assert!(steps[0].duration_us >= 300_000, "{:?}", steps[0]);

    let (ran, _db) = adversary.run("trap").await;
    failed(&ran);
    assert_eq!(ran.last_error()["code"], "trap");
    assert_eq!(ran.state()["text"], "");
}
