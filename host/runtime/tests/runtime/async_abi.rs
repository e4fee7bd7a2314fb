//! Components that use the component model's async ABI (WASI 0.3) run beside
//! synchronous ones, each on its own engine, and every limit holds on the
//! async path as on the synchronous one: the deadline, fuel, memory, the
//! handles a store may hold, the output's size, the log. A skill that waits
//! on what nothing can complete is stopped and named.
//!
//! `echo-async` is `echo` built with wit-bindgen's async bindings (its world
//! exports `run` as an `async func`); `async-probe` misbehaves on the async
//! path as its input's `mode` says. Both are shipped in `skills/dist`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use skillhost_runtime::{Abi, CallError, CallOptions, LoadError, LoadSource, Runtime, Skill};

fn probe(runtime: &Runtime) -> Arc<Skill> {
    runtime
        .load_file(&skillhost_tests::dist("async-probe"))
        .expect("load async-probe")
}

fn call(
    skill: &Skill,
    mode: &str,
    count: u32,
    options: &CallOptions,
) -> skillhost_runtime::CallReport {
    skill.call(&json!({ "mode": mode, "count": count }), options)
}

fn options(f: impl FnOnce(&mut skillhost_runtime::Limits)) -> CallOptions {
    let mut options = CallOptions::default();
    f(&mut options.limits);
    options
}

/// After any failure the same skill must still answer, on a fresh instance.
fn still_serves(skill: &Skill) {
    let out = call(skill, "suspend", 2, &CallOptions::default())
        .into_result()
        .expect("the next call works");
    assert_eq!(out, json!({ "message": "ok", "resumed": 2 }));
}

#[test]
fn echo_async_answers_as_echo_does_on_the_concurrent_engine() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let sync = runtime
        .load_file(&skillhost_tests::dist("echo"))
        .expect("load echo");
    let r#async = runtime
        .load_file(&skillhost_tests::dist("echo-async"))
        .expect("load echo-async");
    assert_eq!(sync.abi(), Abi::Sync);
    assert_eq!(r#async.abi(), Abi::Async);
    let input = json!({ "message": "héllo ", "repeat": 3 });
    let a = sync.call(&input, &CallOptions::default());
    let b = r#async.call(&input, &CallOptions::default());
    assert_eq!(
        a.result.as_ref().unwrap(),
        b.result.as_ref().unwrap(),
        "the same output"
    );
    let lines = |r: &skillhost_runtime::CallReport| {
        r.logs.iter().map(|l| l.message.clone()).collect::<Vec<_>>()
    };
    assert_eq!(lines(&a), lines(&b));
    assert_eq!(
        b.result.unwrap(),
        json!({ "message": "héllo héllo héllo ", "length": 18 })
    );
    assert!(b.fuel_consumed > 0, "fuel is metered on the async path");
    // Its error path, through `task.return`, too.
    let err = r#async
        .call(
            &json!({ "message": "x".repeat(1024), "repeat": 2048 }),
            &CallOptions::default(),
        )
        .into_result()
        .unwrap_err();
    assert_eq!(err.code(), "invalid-input", "{err}");
    // Each engine caches in its own directory; both are current.
    let dirs = runtime.cache_dirs();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    assert_ne!(dirs[0], dirs[1]);
    for dir in &dirs {
        assert!(std::fs::read_dir(dir).unwrap().next().is_some(), "{dir:?}");
    }
    // A second runtime (a new process) loads it from that cache.
    let again = skillhost_tests::runtime(cache.path())
        .load_file(&skillhost_tests::dist("echo-async"))
        .expect("load echo-async again");
    assert_eq!(again.load_stats.source, LoadSource::Cache);
    assert_eq!(again.abi(), Abi::Async);
}

#[test]
fn a_suspended_task_is_resumed_until_it_returns() {
    let cache = tempfile::tempdir().unwrap();
    let skill = probe(&skillhost_tests::runtime(cache.path()));
    let out = call(&skill, "suspend", 50, &CallOptions::default())
        .into_result()
        .unwrap();
    assert_eq!(out, json!({ "message": "ok", "resumed": 50 }));
}

#[test]
fn waiting_on_what_nothing_can_complete_is_a_deadlock_named_at_once() {
    let cache = tempfile::tempdir().unwrap();
    let skill = probe(&skillhost_tests::runtime(cache.path()));
    let start = Instant::now();
    let err = call(&skill, "never-resolve", 0, &CallOptions::default())
        .into_result()
        .unwrap_err();
    assert_eq!(
        err,
        CallError::Deadlock {
            skill: "async-probe".into()
        }
    );
    assert_eq!(err.kind(), "deadlock");
    assert!(
        err.to_string().contains("nothing can ever complete"),
        "{err}"
    );
    // Not the 30 s deadline: the event loop knows at once.
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    still_serves(&skill);
}

#[test]
fn a_task_that_yields_forever_stops_at_the_deadline() {
    let cache = tempfile::tempdir().unwrap();
    let skill = probe(&skillhost_tests::runtime(cache.path()));
    let start = Instant::now();
    let err = call(
        &skill,
        "spin",
        0,
        &options(|l| l.timeout = Duration::from_millis(200)),
    )
    .into_result()
    .unwrap_err();
    assert_eq!(
        err,
        CallError::Timeout {
            skill: "async-probe".into(),
            limit_ms: 200
        }
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    still_serves(&skill);
}

#[test]
fn a_task_that_yields_forever_runs_out_of_fuel() {
    let cache = tempfile::tempdir().unwrap();
    let skill = probe(&skillhost_tests::runtime(cache.path()));
    let report = call(&skill, "spin", 0, &options(|l| l.fuel = Some(2_000_000)));
    assert!(
        report.fuel_consumed >= 2_000_000,
        "{}",
        report.fuel_consumed
    );
    assert_eq!(
        report.into_result().unwrap_err(),
        CallError::FuelExhausted {
            skill: "async-probe".into(),
            limit: 2_000_000
        }
    );
    still_serves(&skill);
}

#[test]
fn futures_created_without_end_stop_at_the_handle_limit_not_in_host_memory() {
    let cache = tempfile::tempdir().unwrap();
    let skill = probe(&skillhost_tests::runtime(cache.path()));
    let start = Instant::now();
    let err = call(&skill, "flood", 0, &CallOptions::default())
        .into_result()
        .unwrap_err();
    match &err {
        CallError::ResourceLimit {
            skill,
            limit_name,
            limit,
        } => {
            assert_eq!(skill, "async-probe");
            assert!(limit_name.contains("futures, streams"), "{limit_name}");
            assert_eq!(*limit, 100_000);
        }
        other => panic!("expected the handle limit, got {other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
    still_serves(&skill);
}

#[test]
fn memory_grown_across_suspensions_stops_at_the_memory_limit() {
    let cache = tempfile::tempdir().unwrap();
    let skill = probe(&skillhost_tests::runtime(cache.path()));
    let report = call(&skill, "grow", 0, &options(|l| l.memory_bytes = 16 << 20));
    assert!(
        report.memory_peak_bytes <= 16 << 20,
        "{}",
        report.memory_peak_bytes
    );
    match report.into_result().unwrap_err() {
        CallError::MemoryLimit {
            skill, limit_mib, ..
        } => {
            assert_eq!(skill, "async-probe");
            assert_eq!(limit_mib, 16);
        }
        other => panic!("expected the memory limit, got {other:?}"),
    }
    still_serves(&skill);
}

#[test]
fn an_output_over_the_limit_is_refused_on_the_async_path() {
    let cache = tempfile::tempdir().unwrap();
    let skill = probe(&skillhost_tests::runtime(cache.path()));
    let err = call(
        &skill,
        "big-output",
        5_000,
        &options(|l| l.max_output_bytes = 1_000),
    )
    .into_result()
    .unwrap_err();
    assert_eq!(err.kind(), "output-too-large", "{err}");
    still_serves(&skill);
}

#[test]
fn a_log_flood_is_capped_and_counted_on_the_async_path() {
    let cache = tempfile::tempdir().unwrap();
    let skill = probe(&skillhost_tests::runtime(cache.path()));
    let report = call(&skill, "chatty", 50_000, &CallOptions::default());
    let kept = report.logs.len() as u64;
    assert!(kept > 0 && kept < 50_000, "{kept}");
    assert_eq!(kept + report.logs_dropped, 50_000);
    assert_eq!(
        report.into_result().unwrap(),
        json!({ "message": "ok", "resumed": 0 })
    );
}

/// The host's capabilities answer an async skill as they answer a
/// synchronous one: granted, `kv` is set, read back across a suspension
/// and journaled; not granted, it is refused as `capability-denied`.
#[test]
fn a_granted_capability_answers_across_a_suspension_and_an_ungranted_one_is_denied() {
    let cache = tempfile::tempdir().unwrap();
    let skill = probe(&skillhost_tests::runtime(cache.path()));
    let mut grants = skillhost_runtime::Grants::default();
    grants.add("kv", "probe").expect("grant kv");
    let granted = CallOptions {
        grants: Arc::new(grants),
        ..CallOptions::default()
    };
    let report = call(&skill, "remember", 7, &granted);
    assert_eq!(report.journal.len(), 2, "a set and a get, journaled");
    assert_eq!(
        report.into_result().unwrap(),
        json!({ "message": "7", "resumed": 1 })
    );
    let err = call(&skill, "remember", 7, &CallOptions::default())
        .into_result()
        .unwrap_err();
    assert_eq!(err.kind(), "capability-denied", "{err}");
    still_serves(&skill);
}

#[test]
fn calls_on_both_engines_run_side_by_side_from_many_threads() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let sync = runtime.load_file(&skillhost_tests::dist("echo")).unwrap();
    let probe = probe(&runtime);
    std::thread::scope(|scope| {
        for i in 0..4u32 {
            let (sync, probe) = (&sync, &probe);
            scope.spawn(move || {
                for _ in 0..20 {
                    let out = call(probe, "suspend", i, &CallOptions::default())
                        .into_result()
                        .unwrap();
                    assert_eq!(out["resumed"], i);
                    let out = sync
                        .call(
                            &json!({ "message": "a", "repeat": i }),
                            &CallOptions::default(),
                        )
                        .into_result()
                        .unwrap();
                    assert_eq!(out["length"], i);
                }
            });
        }
    });
}

/// The component model's threads are refused before anything compiles,
/// naming the built-in; the async ABI alone is not.
#[test]
fn threads_are_refused_before_compiling_naming_the_built_in() {
    let bytes = wat::parse_str(
        r#"(component
             (core func $index (canon thread.index))
             (core module $m (func (export "run") (result i32) (i32.const 0)))
             (core instance $i (instantiate $m))
             (func (export "run") (result u32) (canon lift (core func $i "run"))))"#,
    )
    .expect("the WAT parses");
    let cache = tempfile::tempdir().unwrap();
    let err = skillhost_tests::runtime(cache.path())
        .load_bytes(bytes, "threads.wasm")
        .unwrap_err();
    match &err {
        LoadError::Threads { origin, what } => {
            assert_eq!(origin, "threads.wasm");
            assert_eq!(what, "the built-in `thread.index`");
        }
        other => panic!("expected threads to be refused, got {other:?}"),
    }
    assert!(err.to_string().contains("without threads"), "{err}");
}

/// `host bench async` compares one component of each ABI: given two of the
/// same, or the two swapped, it refuses and names the one that is not what
/// its place needs, and with both right it measures.
#[test]
fn the_abi_benchmark_needs_one_component_of_each_abi() {
    use skillhost_runtime::bench::{AbiBenchSettings, BenchError, echo_input, measure_abis};
    let echo = std::fs::read(skillhost_tests::dist("echo")).unwrap();
    let echo_async = std::fs::read(skillhost_tests::dist("echo-async")).unwrap();
    let settings = AbiBenchSettings {
        rounds: 1,
        calls: 10,
    };
    for (sync, r#async, wrong) in [
        (&echo, &echo, "has the synchronous (WASI 0.2) ABI"),
        (&echo_async, &echo_async, "has the async (WASI 0.3) ABI"),
        (&echo_async, &echo, "has the async (WASI 0.3) ABI"),
    ] {
        match measure_abis(sync.clone(), r#async.clone(), echo_input(), settings) {
            Err(BenchError::Input(message)) => assert!(
                message.contains(wrong) && message.contains("synchronous component first"),
                "{message}"
            ),
            other => panic!("expected a refusal naming {wrong}, got {other:?}"),
        }
    }
    let figures = measure_abis(echo, echo_async, echo_input(), settings).expect("one of each");
    assert!(figures.ratio() > 0.0, "{figures:?}");
}

fn wasi3(runtime: &Runtime) -> Arc<Skill> {
    runtime
        .load_file(&skillhost_tests::dist("wasi3-probe"))
        .expect("load wasi3-probe")
}

fn wasi3_input(times: u32, wait_ms: u64) -> serde_json::Value {
    json!({
        "print": "printed through wasi:cli/stdout@0.3.0",
        "times": times,
        "err": "and warned through stderr",
        "wait_ms": wait_ms,
        "random_bytes": 16,
    })
}

/// `wasi3-probe` imports WASI 0.3's own interfaces (`wasi:*@0.3.0`) and no
/// 0.2 ones. They answer as 0.2's do: stdout's and stderr's streams go to
/// the call's log, in order, at `info` and `warn`; the monotonic clock is
/// virtual (an hour's `wait-for` returns at once, within a deadline of ten
/// seconds, on a clock an hour later); the system clock is fixed; the
/// random bytes and the insecure seed follow the call's seed; there is no
/// environment, no argument and no stdin.
#[test]
fn a_wasi_03_component_gets_the_same_deterministic_wasi_as_a_02_one() {
    let cache = tempfile::tempdir().unwrap();
    let skill = wasi3(&skillhost_tests::runtime(cache.path()));
    assert_eq!(skill.abi(), Abi::Async);
    assert!(
        skill
            .imports
            .iter()
            .all(|i| !i.starts_with("wasi:") || i.ends_with("@0.3.0")),
        "{:?}",
        skill.imports
    );
    assert!(
        skill
            .imports
            .iter()
            .any(|i| i == "wasi:clocks/monotonic-clock@0.3.0"),
        "{:?}",
        skill.imports
    );
    let mut seeded = options(|limits| limits.timeout = Duration::from_secs(10));
    seeded.random_seed = [7; 32];
    let report = skill.call(&wasi3_input(3, 3_600_000), &seeded);
    let logs: Vec<(String, String)> = report
        .logs
        .iter()
        .map(|l| (format!("{:?}", l.level), l.message.clone()))
        .collect();
    let line = "printed through wasi:cli/stdout@0.3.0";
    assert_eq!(
        logs,
        [
            ("Info".to_string(), line.to_string()),
            ("Info".to_string(), line.to_string()),
            ("Info".to_string(), line.to_string()),
            ("Warn".to_string(), "and warned through stderr".to_string()),
        ]
    );
    let out = report.result.expect("the call works");
    // The wait plus the reading after it (one microsecond a reading).
    assert_eq!(out["waited_ns"], 3_600_000_001_000u64, "{out}");
    assert_eq!(out["system_seconds"], 946_684_800, "{out}");
    assert_eq!(out["printed"], 3 * (line.len() as u64 + 1), "{out}");
    for nothing in ["environment", "arguments", "stdin_bytes"] {
        assert_eq!(out[nothing], 0, "{nothing}: {out}");
    }
    assert_eq!(out["random"].as_str().unwrap().len(), 32, "{out}");

    let again = skill
        .call(&wasi3_input(3, 3_600_000), &seeded)
        .into_result()
        .unwrap();
    assert_eq!(again, out, "the same seed, the same call");
    let mut other = seeded.clone();
    other.random_seed = [8; 32];
    let other = skill
        .call(&wasi3_input(3, 3_600_000), &other)
        .into_result()
        .unwrap();
    assert_ne!(other["random"], out["random"]);
    assert_ne!(other["insecure_seed"], out["insecure_seed"]);
}

/// The longest wait there is leaves the virtual clock at its end: later
/// readings stay there instead of wrapping to its start (the probe fails
/// with `clock` if its clock ever runs backwards).
#[test]
fn a_wait_past_the_end_of_the_clock_saturates_it() {
    let cache = tempfile::tempdir().unwrap();
    let skill = wasi3(&skillhost_tests::runtime(cache.path()));
    let out = skill
        .call(&wasi3_input(0, u64::MAX), &CallOptions::default())
        .into_result()
        .expect("the clock never runs backwards");
    let waited = out["waited_ns"].as_u64().unwrap();
    assert!(waited > u64::MAX / 2, "{out}");
}

/// What a WASI 0.3 component prints through stdout's stream is held to the
/// log's budget like everything else: the call succeeds, the host keeps
/// what fits and counts the rest.
#[test]
fn a_wasi_03_stdout_flood_is_capped_and_counted() {
    let cache = tempfile::tempdir().unwrap();
    let skill = wasi3(&skillhost_tests::runtime(cache.path()));
    let report = skill.call(&wasi3_input(20_000, 0), &CallOptions::default());
    let kept = report.logs.len() as u64;
    assert!(kept > 0 && kept < 20_000, "{kept}");
    let kept_bytes: usize = report.logs.iter().map(|l| l.message.len()).sum();
    assert!(kept_bytes <= 64 << 10, "{kept_bytes} bytes kept");
    // Every stdout line kept or counted, and stderr's one line after them;
    // the line the budget cuts (64 KiB is not a whole number of 38-byte
    // lines) is kept in part and counted as dropped, as on WASI 0.2.
    assert_eq!(kept + report.logs_dropped, 20_002);
    let out = report.into_result().expect("printing never fails a call");
    assert_eq!(
        out["printed"],
        20_000 * ("printed through wasi:cli/stdout@0.3.0".len() as u64 + 1)
    );
}

/// `wasi:cli/exit@0.3.0` ends the call as 0.2's `exit` does: a named error
/// with its code, what the skill printed before it kept, and the next call
/// on a fresh instance.
#[test]
fn a_wasi_03_exit_is_a_named_error_with_its_code() {
    let cache = tempfile::tempdir().unwrap();
    let skill = wasi3(&skillhost_tests::runtime(cache.path()));
    let mut input = wasi3_input(1, 0);
    input["exit"] = json!(7);
    let report = skill.call(&input, &CallOptions::default());
    assert_eq!(
        report.logs.first().map(|l| l.message.as_str()),
        Some("printed through wasi:cli/stdout@0.3.0")
    );
    let err = report.into_result().unwrap_err();
    assert_eq!(
        err,
        CallError::Exited {
            skill: "wasi3-probe".into(),
            code: 7
        }
    );
    let out = skill
        .call(&wasi3_input(1, 0), &CallOptions::default())
        .into_result()
        .expect("the next call works");
    assert_eq!(out["system_seconds"], 946_684_800);
}
