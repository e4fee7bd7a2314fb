//! WASI through a real component (`wasi-probe`): the virtual clock's timers,
//! captured output past the log budget, exit codes and seeded randomness.
//! After every hostile call the same skill serves a normal one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use skillhost_runtime::{CallError, CallOptions, CallReport, Skill};

fn probe() -> (tempfile::TempDir, Arc<Skill>) {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let skill = runtime
        .load_bytes(
            skillhost_tests::fixture_component("wasi-probe"),
            "wasi-probe.wasm",
        )
        .expect("load wasi-probe");
    (cache, skill)
}

fn run(skill: &Skill, mode: &str, n: u64, options: &CallOptions) -> CallReport {
    skill.call(&json!({ "mode": mode, "n": n }), options)
}

fn value(report: CallReport) -> u64 {
    let out = report.into_result().expect("the call succeeds");
    out["value"].as_u64().unwrap()
}

fn random_bytes(skill: &Skill, seed: u8) -> Vec<u8> {
    use base64::Engine as _;
    let options = CallOptions {
        random_seed: [seed; 32],
        ..CallOptions::default()
    };
    let out = run(skill, "random", 64, &options).into_result().unwrap();
    // The bridge carries `list<u8>` as base64.
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(out["bytes"].as_str().expect("bytes as base64"))
        .unwrap();
    assert_eq!(bytes.len(), 64);
    bytes
}

/// A normal call after a hostile one.
fn still_serves(skill: &Skill) {
    let slept = value(run(skill, "sleep", 1_000, &CallOptions::default()));
    assert!(slept >= 1_000, "{slept}");
}

fn timeout_of(ms: u64) -> CallOptions {
    let mut options = CallOptions::default();
    options.limits.timeout = Duration::from_millis(ms);
    options
}

#[test]
fn a_long_sleep_returns_at_once_with_the_virtual_clock_moved() {
    let (_cache, skill) = probe();
    let twenty_s = 20_000_000_000;
    for mode in ["sleep", "sleep-until"] {
        let start = Instant::now();
        let slept = value(run(&skill, mode, twenty_s, &timeout_of(500)));
        assert!(start.elapsed() < Duration::from_millis(500), "{mode}");
        assert!(slept >= twenty_s, "{mode}: the clock moved {slept} ns");
        assert!(
            slept < twenty_s + 1_000_000,
            "{mode}: the clock moved {slept} ns"
        );
    }
    still_serves(&skill);
}

/// A sleep to the end of the virtual clock leaves it there: the reading
/// after it is the clock's last value, not one wrapped to its start (a
/// clock that ran backwards, and an overflow in the host).
#[test]
fn a_sleep_past_the_end_of_the_clock_leaves_it_at_its_end() {
    let (_cache, skill) = probe();
    let slept = value(run(&skill, "sleep", u64::MAX, &timeout_of(500)));
    // The first reading was one step in.
    assert_eq!(slept, u64::MAX - 1_000);
    still_serves(&skill);
}

#[test]
fn a_loop_of_sleeps_is_stopped_by_the_deadline() {
    let (_cache, skill) = probe();
    let start = Instant::now();
    let err = run(&skill, "sleep-forever", 1_000_000, &timeout_of(200))
        .into_result()
        .unwrap_err();
    assert_eq!(
        err,
        CallError::Timeout {
            skill: "wasi-probe".into(),
            limit_ms: 200
        }
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    still_serves(&skill);
}

#[test]
fn stdout_past_the_log_budget_is_dropped_and_counted_not_a_crash() {
    let (_cache, skill) = probe();
    let report = run(&skill, "print", 256 << 10, &CallOptions::default());
    let kept: usize = report.logs.iter().map(|l| l.message.len()).sum();
    assert!(kept <= 64 << 10, "{kept} bytes kept");
    assert!(kept >= 60 << 10, "{kept} bytes kept");
    assert!(report.logs_dropped >= 48, "{} dropped", report.logs_dropped);
    assert_eq!(report.into_result().unwrap()["value"], json!(256 << 10));
    still_serves(&skill);
}

#[test]
fn random_bytes_follow_the_seed() {
    let (_cache, skill) = probe();
    let first = random_bytes(&skill, 1);
    assert_eq!(first, random_bytes(&skill, 1), "the same seed replays");
    assert_ne!(first, random_bytes(&skill, 2), "another step, other bytes");
    // No short cycle: the 64 bytes are not a repeated 16- or 32-byte block.
    assert_ne!(first[..32], first[32..]);
    assert_ne!(first[..16], first[16..32]);
    still_serves(&skill);
}

#[test]
fn exit_is_a_named_error_with_its_code() {
    let (_cache, skill) = probe();
    let err = run(&skill, "exit", 3, &CallOptions::default())
        .into_result()
        .unwrap_err();
    assert_eq!(
        err,
        CallError::Exited {
            skill: "wasi-probe".into(),
            code: 3
        }
    );
    assert_eq!(err.kind(), "exited");
    assert!(err.to_string().contains("exited with code 3"), "{err}");
    still_serves(&skill);
}

#[test]
fn output_lines_reach_the_log_sanitised() {
    let (_cache, skill) = probe();
    let report = run(
        &skill,
        "w\x1b[2Jcleared\r[host] fake\u{202e}txt\nsecond line\n",
        0,
        &CallOptions::default(),
    );
    let lines: Vec<_> = report.logs.iter().map(|l| l.message.as_str()).collect();
    assert_eq!(
        lines,
        [
            "\\u{1b}[2Jcleared\\u{d}[host] fake\\u{202e}txt",
            "second line"
        ]
    );
    report.into_result().unwrap();
    still_serves(&skill);
}

#[test]
fn printed_lines_and_log_lines_keep_the_order_they_were_written_in() {
    use skillhost_runtime::LogLevel::{Info, Warn};
    let (_cache, skill) = probe();
    // stdout: a finished line and an unfinished one; then a `log` line; then
    // a line on stderr. The unfinished line joins the log when the call ends.
    let report = run(&skill, "lfirst\nunfinished", 0, &CallOptions::default());
    let lines: Vec<_> = report
        .logs
        .iter()
        .map(|l| (l.level, l.message.as_str()))
        .collect();
    assert_eq!(
        lines,
        [
            (Info, "first"),
            (Info, "between"),
            (Warn, "after"),
            (Info, "unfinished")
        ]
    );
    assert_eq!(report.logs_dropped, 0);
    report.into_result().unwrap();
    still_serves(&skill);
}

/// Loading a WASI skill on an async runtime's thread: its manifest prints and
/// sleeps, which block on tokio, and must not panic the host (the resume
/// path and the workers load scenarios inside a runtime).
#[test]
fn a_wasi_manifest_loads_on_an_async_runtime_thread() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let skill = tokio.block_on(async {
        runtime
            .load_bytes(
                skillhost_tests::fixture_component("wasi-probe"),
                "wasi-probe.wasm",
            )
            .expect("load wasi-probe inside a runtime")
    });
    assert_eq!(skill.name, "wasi-probe");
    assert!(skill.uses_wasi() && skill.needs_blocking_thread());
    still_serves(&skill);
}
