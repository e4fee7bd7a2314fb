//! The host-call budget through a real component that loops host calls
//! (the `host-loop` fixture): a call stops at `max_host_calls`, the bytes
//! its journal holds stay within `host_call_bytes` whatever the answers,
//! an `http` body is read no further than the budget's room, a refusal is
//! a `budget-exceeded` error the skill sees (and the call's error names the
//! budget when the skill then fails), and a replay under the same limits
//! answers exactly as the call was answered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use skillhost_runtime::{
    Backends, CallError, CallOptions, CallReport, Grants, JournalMode, JournalRecord, KvBackend,
    KvGrant, KvQuota, MemoryKv, Skill,
};
use skillhost_tests::http_server::HttpServer;

struct Looper {
    _cache: tempfile::TempDir,
    kv: Arc<MemoryKv>,
    skill: Arc<Skill>,
}

/// The `host-loop` skill in a runtime with a kv of its own.
fn looper() -> Looper {
    let cache = tempfile::tempdir().unwrap();
    let kv = Arc::new(MemoryKv::default());
    let runtime = skillhost_tests::runtime_with_backends(
        cache.path(),
        Backends {
            kv: kv.clone(),
            ..Backends::default()
        },
    );
    let skill = runtime
        .load_bytes(
            skillhost_tests::fixture_component("host-loop"),
            "host-loop.wasm",
        )
        .expect("load host-loop");
    Looper {
        _cache: cache,
        kv,
        skill,
    }
}

fn options(
    grants: &[(&str, &str)],
    limits: impl FnOnce(&mut skillhost_runtime::Limits),
) -> CallOptions {
    let mut granted = Grants::default();
    for (capability, value) in grants {
        granted.add(capability, value).expect("a valid grant");
    }
    let mut options = CallOptions {
        grants: Arc::new(granted),
        ..CallOptions::default()
    };
    limits(&mut options.limits);
    options
}

fn run(
    skill: &Skill,
    op: &str,
    arg: &str,
    size: u32,
    times: u32,
    options: &CallOptions,
) -> CallReport {
    skill.call(
        &json!({ "op": op, "arg": arg, "size": size, "times": times, "keep_going": false }),
        options,
    )
}

/// The bytes the journal's records take as JSON text: a floor under what
/// the host holds for them.
fn journal_text(journal: &[JournalRecord]) -> usize {
    journal
        .iter()
        .map(|r| r.request.to_string().len() + r.response.to_string().len())
        .sum()
}

/// The budget's refusal, as the call's error names it.
fn over_budget(report: &CallReport) -> String {
    match &report.result {
        Err(error @ CallError::HostCallBudget { budget, .. }) => {
            assert_eq!(error.kind(), "host-call-budget");
            assert!(!error.retryable());
            budget.clone()
        }
        other => panic!("expected the host-call budget's error, got {other:?}"),
    }
}

#[test]
fn a_call_stops_at_max_host_calls() {
    let looper = looper();
    let options = options(&[("kv", "loop")], |_| {});
    let report = run(&looper.skill, "set", "k", 1, 20_000, &options);
    let budget = over_budget(&report);
    for says in [
        "made 10000",
        "`max_host_calls` (now 10000",
        "this `kv` call is refused",
    ] {
        assert!(budget.contains(says), "{budget}");
    }
    assert_eq!(report.journal.len(), 10_000);
    let ns = KvGrant::parse("loop").unwrap().namespace();
    assert_eq!(looper.kv.list_keys(&ns, "", 100_000).unwrap().len(), 10_000);

    // The node's own count.
    let options = options_with_calls(25);
    let report = run(&looper.skill, "get", "k00000000", 0, 100, &options);
    assert!(over_budget(&report).contains("made 25"));
    assert_eq!(report.journal.len(), 25);
}

fn options_with_calls(calls: u32) -> CallOptions {
    options(&[("kv", "loop")], |l| l.max_host_calls = calls)
}

#[test]
fn kv_answers_stop_at_the_byte_budget_and_the_journal_stays_within_it() {
    let looper = looper();
    let value = vec![b'v'; 1 << 20];
    let quota = KvQuota {
        max_keys: 10,
        max_bytes: 4 << 20,
    };
    let ns = KvGrant::parse("big").unwrap().namespace();
    looper.kv.set(&ns, "value", value, quota).unwrap();
    let budget = 32 << 20;
    let limited = options(&[("kv", "big")], |l| l.host_call_bytes = Some(budget));
    let report = run(&looper.skill, "get", "value", 0, 600, &limited);
    let refusal = over_budget(&report);
    for says in [
        "`kv` answer would take",
        "33554432 bytes for host calls",
        "raise the node's `host_call_mb`",
    ] {
        assert!(refusal.contains(says), "{refusal}");
    }
    // 1 MiB as base64 is 1.4 MB held: about twenty fit.
    let answered = report
        .journal
        .iter()
        .filter(|r| r.response.get("ok").is_some())
        .count();
    assert!((18..=24).contains(&answered), "{answered}");
    assert!(journal_text(&report.journal) <= budget as usize);
    assert_eq!(
        report.journal.last().unwrap().response["error"]["code"],
        "budget-exceeded"
    );

    // By default the budget is the call's memory.
    let options = options(&[("kv", "big")], |l| l.memory_bytes = 16 << 20);
    let report = run(&looper.skill, "get", "value", 0, 600, &options);
    assert!(over_budget(&report).contains("by default as much as its `memory_mb`"));
    assert!(journal_text(&report.journal) <= 16 << 20);
}

#[test]
fn kv_writes_are_charged_the_bytes_they_carry() {
    let looper = looper();
    let options = options(
        &[("kv", r#"{"namespace": "w", "max_bytes": 1073741824}"#)],
        |l| l.host_call_bytes = Some(8 << 20),
    );
    // Writes of 1 MiB journal 100 bytes each, but carry a megabyte.
    let report = run(&looper.skill, "set", "k", 1 << 20, 100, &options);
    let refusal = over_budget(&report);
    assert!(refusal.contains("request takes"), "{refusal}");
    let written = report.journal.len();
    assert!((6..=8).contains(&written), "{written}");
}

#[test]
fn an_http_body_is_read_no_further_than_the_budget_has_room() {
    let server = HttpServer::start();
    let looper = looper();
    let grant = json!({ "hosts": [server.host_port()], "max_response_bytes": 1u64 << 30 });
    let options = options(&[("http", &grant.to_string())], |l| {
        l.host_call_bytes = Some(4 << 20)
    });
    // Three answers of a megabyte fit (1.4 MB each as base64); the fourth
    // does not.
    let report = run(
        &looper.skill,
        "fetch",
        &server.url("/big?bytes=1000000"),
        0,
        10,
        &options,
    );
    let refusal = over_budget(&report);
    assert!(refusal.contains("`http` answer"), "{refusal}");
    let statuses: Vec<_> = report
        .journal
        .iter()
        .map(|r| r.response.get("ok").map(|ok| ok["status"].clone()))
        .collect();
    assert_eq!(
        statuses,
        [Some(json!(200)), Some(json!(200)), Some(json!(200)), None]
    );
    assert!(journal_text(&report.journal) <= 4 << 20);

    // A 100 MB body, allowed by the grant, is refused once the budget's
    // room is read, not after the grant's gigabyte.
    let started = Instant::now();
    let report = run(
        &looper.skill,
        "fetch",
        &server.url("/stream?bytes=100000000"),
        0,
        1,
        &options,
    );
    let refusal = over_budget(&report);
    assert!(
        refusal.contains("more than") && refusal.contains("`http` answer"),
        "{refusal}"
    );
    assert_eq!(
        report.journal[0].response["error"]["code"],
        "budget-exceeded"
    );
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn sql_results_are_charged_as_the_journal_holds_them() {
    let looper = looper();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("n.db");
    database(&db);
    let options = options(&[("sql", db.to_str().unwrap())], |l| {
        l.host_call_bytes = Some(4 << 20)
    });
    // 1000 rows of 100 integers: 800 KB of values, under the 1 MiB cap of
    // one result, but 40 MB as the journal holds them.
    let columns: Vec<String> = (0..100).map(|c| format!("i + {c}")).collect();
    let statement = format!(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000) \
         SELECT {} FROM n",
        columns.join(", ")
    );
    let report = run(&looper.skill, "query", &statement, 0, 1, &options);
    let refusal = over_budget(&report);
    assert!(refusal.contains("`sql` answer"), "{refusal}");
    assert!(journal_text(&report.journal) <= 4 << 20);
}

/// A SQLite file with one table.
fn database(path: &std::path::Path) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute_batch("CREATE TABLE t (x)")
        .unwrap();
}

#[test]
fn a_replay_under_the_same_limits_answers_as_the_call_was_answered() {
    let looper = looper();
    let quota = KvQuota {
        max_keys: 10,
        max_bytes: 4 << 20,
    };
    let ns = KvGrant::parse("r").unwrap().namespace();
    looper
        .kv
        .set(&ns, "value", vec![1; 300_000], quota)
        .unwrap();
    for budget in [64 << 20, 1 << 20] {
        let recording = options(&[("kv", "r")], |l| l.host_call_bytes = Some(budget));
        let recorded = run(&looper.skill, "get", "value", 0, 5, &recording);
        // The value is gone: the replay answers from the journal alone.
        let mut replaying = recording.clone();
        replaying.journal = JournalMode::Replay(recorded.journal.clone().into());
        looper.kv.delete(&ns, "value").unwrap();
        let replayed = run(&looper.skill, "get", "value", 0, 5, &replaying);
        assert_eq!(replayed.journal, recorded.journal, "budget {budget}");
        assert_eq!(
            format!("{:?}", replayed.result),
            format!("{:?}", recorded.result),
            "budget {budget}"
        );
        looper
            .kv
            .set(&ns, "value", vec![1; 300_000], quota)
            .unwrap();
        if budget == 64 << 20 {
            assert_eq!(
                recorded.result.unwrap(),
                json!({ "calls": 5, "last_size": 300_000 })
            );
        } else {
            over_budget(&replayed);
        }
    }
}

#[test]
fn a_loop_of_quick_host_calls_stops_at_the_deadline() {
    let looper = looper();
    let options = options(&[("kv", "d")], |l| {
        l.timeout = Duration::from_millis(300);
        l.max_host_calls = 1_000_000;
        l.host_call_bytes = Some(4 << 30);
    });
    let started = Instant::now();
    let report = looper.skill.call(
        &json!({ "op": "get", "arg": "absent", "size": 0, "times": u32::MAX, "keep_going": true }),
        &options,
    );
    assert!(
        matches!(report.result, Err(CallError::Timeout { limit_ms: 300, .. })),
        "{:?}",
        report.result
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_skill_that_ignores_a_refusal_keeps_running_without_the_host_call() {
    let looper = looper();
    let options = options(&[("kv", "i")], |l| l.max_host_calls = 3);
    let report = looper.skill.call(
        &json!({ "op": "get", "arg": "absent", "size": 0, "times": 50, "keep_going": true }),
        &options,
    );
    // The skill went on; only three calls reached the host.
    assert_eq!(report.result.unwrap()["calls"], 50);
    assert_eq!(report.journal.len(), 3);
}
