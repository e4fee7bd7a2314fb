//! The runtime against misbehaving components: every limit is a typed error
//! that names the skill and the limit, and the host keeps serving afterwards.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use skillhost_runtime::{CallError, CallOptions, Grants, Limits, Skill};

fn adversary() -> (tempfile::TempDir, Arc<Skill>) {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let skill = runtime
        .load_bytes(
            skillhost_tests::fixture_component("adversary"),
            "adversary.wasm",
        )
        .expect("load adversary");
    (cache, skill)
}

fn call(skill: &Skill, text: &str, options: &CallOptions) -> Result<serde_json::Value, CallError> {
    skill.call(&json!({ "text": text }), options).into_result()
}

fn limits(f: impl FnOnce(&mut Limits)) -> CallOptions {
    let mut options = CallOptions::default();
    f(&mut options.limits);
    options
}

/// After any failure the same skill must still answer.
fn still_serves(skill: &Skill) {
    let out = call(skill, "echo", &CallOptions::default()).expect("the next call works");
    assert_eq!(out, json!({ "text": "echo" }));
}

#[test]
fn manifest_and_echo() {
    let (_cache, skill) = adversary();
    assert_eq!(skill.name, "adversary");
    assert_eq!(skill.manifest.capabilities, vec!["fs".to_string()]);
    still_serves(&skill);
}

#[test]
fn infinite_loop_is_a_timeout() {
    let (_cache, skill) = adversary();
    let options = limits(|l| l.timeout = Duration::from_millis(50));
    let err = call(&skill, "loop", &options).unwrap_err();
    assert_eq!(
        err,
        CallError::Timeout {
            skill: "adversary".into(),
            limit_ms: 50
        }
    );
    assert_eq!(err.kind(), "timeout");
    assert!(err.to_string().contains("50 ms"), "{err}");
    still_serves(&skill);
}

#[test]
fn infinite_loop_with_fuel_runs_out_of_fuel() {
    let (_cache, skill) = adversary();
    let options = limits(|l| l.fuel = Some(1_000_000));
    let err = call(&skill, "loop", &options).unwrap_err();
    assert_eq!(
        err,
        CallError::FuelExhausted {
            skill: "adversary".into(),
            limit: 1_000_000
        }
    );
    still_serves(&skill);
}

#[test]
fn memory_grow_bomb_hits_the_memory_limit() {
    let (_cache, skill) = adversary();
    let options = limits(|l| l.memory_bytes = 8 << 20);
    let err = call(&skill, "grow", &options).unwrap_err();
    match &err {
        CallError::MemoryLimit {
            skill,
            limit_mib,
            requested_bytes,
        } => {
            assert_eq!(skill, "adversary");
            assert_eq!(*limit_mib, 8);
            assert!(*requested_bytes > 8 << 20);
        }
        other => panic!("expected a memory limit error, got {other:?}"),
    }
    assert!(err.to_string().contains("memory limit of 8 MiB"), "{err}");
    still_serves(&skill);
}

#[test]
fn invalid_utf8_output_is_invalid_output_and_the_next_call_works() {
    let (_cache, skill) = adversary();
    let err = call(&skill, "utf8", &CallOptions::default()).unwrap_err();
    assert_eq!(err.kind(), "invalid-output", "{err:?}");
    assert!(err.to_string().contains("adversary"), "{err}");
    assert!(err.to_string().to_lowercase().contains("utf-8"), "{err}");
    still_serves(&skill);
}

#[test]
fn trap_is_a_trap() {
    let (_cache, skill) = adversary();
    let err = call(&skill, "trap", &CallOptions::default()).unwrap_err();
    assert_eq!(err.kind(), "trap", "{err:?}");
    assert!(err.to_string().contains("unreachable"), "{err}");
    still_serves(&skill);
}

#[test]
fn oversized_output_is_refused() {
    let (_cache, skill) = adversary();
    let options = limits(|l| l.max_output_bytes = 1 << 20);
    let err = call(&skill, "oversized", &options).unwrap_err();
    match err {
        CallError::OutputTooLarge {
            limit_bytes,
            actual_bytes,
            ..
        } => {
            assert_eq!(limit_bytes, 1 << 20);
            assert!(actual_bytes > 2 << 20, "{actual_bytes}");
        }
        other => panic!("expected output-too-large, got {other:?}"),
    }
    still_serves(&skill);
}

#[test]
fn ungranted_import_is_denied() {
    let (_cache, skill) = adversary();
    let report = skill.call(&json!({ "text": "fs" }), &CallOptions::default());
    assert_eq!(report.denied, vec![skillhost_runtime::Capability::Fs]);
    let err = report.into_result().unwrap_err();
    match &err {
        CallError::CapabilityDenied {
            skill, capability, ..
        } => {
            assert_eq!(skill, "adversary");
            assert_eq!(capability, "fs");
        }
        other => panic!("expected capability-denied, got {other:?}"),
    }
    assert!(err.to_string().contains("--grant fs="), "{err}");
    still_serves(&skill);
}

#[test]
fn granted_import_reads_inside_the_root_only() {
    let (_cache, skill) = adversary();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("data.txt"), "hello from the corpus").unwrap();
    let mut grants = Grants::default();
    grants
        .add("fs", dir.path().to_str().unwrap())
        .expect("grant fs");
    let options = CallOptions {
        grants: Arc::new(grants),
        ..CallOptions::default()
    };
    let out = call(&skill, "fs", &options).expect("granted read");
    assert_eq!(out, json!({ "text": "hello from the corpus" }));

    // Without the file, the import's own error comes back as the skill's.
    std::fs::remove_file(dir.path().join("data.txt")).unwrap();
    let err = call(&skill, "fs", &options).unwrap_err();
    match err {
        CallError::Skill { code, .. } => assert_eq!(code, "not-found"),
        other => panic!("expected not-found, got {other:?}"),
    }
}

#[test]
fn bad_grants_are_refused_before_any_call() {
    let mut grants = Grants::default();
    let err = grants.add("fs", "/definitely/not/here").unwrap_err();
    assert!(err.to_string().contains("/definitely/not/here"), "{err}");
    let err = grants.add("net", "x").unwrap_err();
    assert!(err.to_string().contains("unknown capability"), "{err}");
    let err = grants.add("http", "https://example.org/").unwrap_err();
    assert!(err.to_string().contains("not a host"), "{err}");
    let err = grants.add("llm", "provider-without-model").unwrap_err();
    assert!(err.to_string().contains("PROVIDER/MODEL"), "{err}");
    let err = grants.add("kv", "bad namespace!").unwrap_err();
    assert!(err.to_string().contains("namespace"), "{err}");
}

#[test]
fn input_that_does_not_fit_names_the_path() {
    let (_cache, skill) = adversary();
    let err = skill
        .call(&json!({ "text": 3 }), &CallOptions::default())
        .into_result()
        .unwrap_err();
    assert_eq!(err.kind(), "invalid-input");
    assert!(err.to_string().contains("$.text"), "{err}");
}

#[test]
fn many_threads_share_one_skill() {
    let (_cache, skill) = adversary();
    std::thread::scope(|scope| {
        for i in 0..8 {
            let skill = &skill;
            scope.spawn(move || {
                for j in 0..50 {
                    let text = format!("echo {i}-{j}");
                    let out = call(skill, &text, &CallOptions::default()).unwrap();
                    assert_eq!(out, json!({ "text": text }));
                }
            });
        }
    });
}

fn granting_fs(dir: &std::path::Path) -> CallOptions {
    let mut grants = Grants::default();
    grants.add("fs", dir.to_str().unwrap()).expect("grant fs");
    CallOptions {
        grants: Arc::new(grants),
        ..CallOptions::default()
    }
}

fn skill_error_code(err: CallError) -> (String, String) {
    match err {
        CallError::Skill { code, message, .. } => (code, message),
        other => panic!("expected the import's error, got {other:?}"),
    }
}

#[test]
fn a_fifo_in_the_granted_directory_is_refused_not_waited_on() {
    let (_cache, skill) = adversary();
    let dir = tempfile::tempdir().unwrap();
    let fifo = std::ffi::CString::new(dir.path().join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: `fifo` is a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let options = granting_fs(dir.path());
    let start = std::time::Instant::now();
    let (code, message) = skill_error_code(call(&skill, "rpipe", &options).unwrap_err());
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(code, "not-a-regular-file");
    assert!(message.contains("`pipe` is a named pipe"), "{message}");
    still_serves(&skill);
}

/// A grant of `dir` as the read path sees it, past the grant parser: `/dev`
/// and `/proc` are never granted (`FsGrant::parse` refuses them), so these
/// tests check that the read path holds on its own, whatever the directory.
fn granting_fs_unchecked(dir: &std::path::Path) -> CallOptions {
    let grants = Grants {
        fs: Some(Arc::new(skillhost_runtime::capabilities::fs::FsGrant {
            root: dir.to_path_buf(),
        })),
        ..Grants::default()
    };
    CallOptions {
        grants: Arc::new(grants),
        ..CallOptions::default()
    }
}

#[test]
fn a_character_device_is_refused() {
    let (_cache, skill) = adversary();
    let options = granting_fs_unchecked(std::path::Path::new("/dev"));
    let (code, message) = skill_error_code(call(&skill, "rzero", &options).unwrap_err());
    assert_eq!(code, "not-a-regular-file");
    assert!(message.contains("character device"), "{message}");
    still_serves(&skill);
}

#[test]
fn a_proc_file_that_reports_no_length_is_read_bounded() {
    let (_cache, skill) = adversary();
    let mut options = granting_fs_unchecked(std::path::Path::new("/proc"));
    // `/proc` files report a length of 0 whatever they hold.
    let out = call(&skill, "rself/status", &options).expect("a small /proc file reads");
    assert!(out["text"].as_str().unwrap().contains("Pid:"), "{out}");
    // `kallsyms` runs to megabytes: the read stops at the memory limit.
    let kallsyms = std::fs::read("/proc/kallsyms").unwrap().len() as u64;
    let limit = 1 << 20;
    assert!(
        kallsyms > 2 * limit,
        "kallsyms is only {kallsyms} bytes here"
    );
    options.limits.memory_bytes = limit;
    let (code, message) = skill_error_code(call(&skill, "rkallsyms", &options).unwrap_err());
    assert_eq!(code, "too-large");
    assert!(
        message.contains("memory limit of 1048576 bytes"),
        "{message}"
    );
    still_serves(&skill);
}

#[test]
fn a_timeout_fires_on_time_not_when_the_ticks_add_up() {
    let (_cache, skill) = adversary();
    let options = limits(|l| l.timeout = Duration::from_millis(1000));
    let start = std::time::Instant::now();
    let err = call(&skill, "loop", &options).unwrap_err();
    let elapsed = start.elapsed();
    assert_eq!(err.kind(), "timeout");
    assert!(elapsed >= Duration::from_millis(1000), "{elapsed:?}");
    // Counting 1 ms ticks, which come late, stretched this by several
    // percent on a quiet machine and by half or more on a loaded one; the
    // clock stops it at the first tick past the deadline, which a loaded
    // machine may still delay by a scheduling slice or two.
    assert!(elapsed < Duration::from_millis(1400), "{elapsed:?}");
    still_serves(&skill);
}

#[test]
fn a_200_mib_output_is_output_too_large() {
    let (_cache, skill) = adversary();
    let err = call(&skill, "Oversized", &CallOptions::default()).unwrap_err();
    match &err {
        CallError::OutputTooLarge {
            limit_bytes,
            actual_bytes,
            ..
        } => {
            assert_eq!(*limit_bytes, 16 << 20);
            // Too large to lift at all: the bytes lifted when the host
            // stopped.
            assert!(*actual_bytes > 16 << 20, "{actual_bytes}");
        }
        other => panic!("expected output-too-large, got {other:?}"),
    }
    assert_eq!(err.kind(), "output-too-large");
    still_serves(&skill);
}

#[test]
fn table_memory_counts_against_the_memory_limit() {
    let (_cache, skill) = adversary();
    // A million funcref elements take 8 MB of host memory.
    call(&skill, "Table", &CallOptions::default()).expect("fits in 256 MiB");
    let options = limits(|l| l.memory_bytes = 4 << 20);
    let err = call(&skill, "Table", &options).unwrap_err();
    match &err {
        CallError::MemoryLimit {
            limit_mib,
            requested_bytes,
            ..
        } => {
            assert_eq!(*limit_mib, 4);
            assert!(*requested_bytes >= 8_000_000, "{requested_bytes}");
        }
        other => panic!("expected a memory limit error, got {other:?}"),
    }
    still_serves(&skill);
}

#[test]
fn a_panic_message_the_skill_logged_is_in_the_trap() {
    let (_cache, skill) = adversary();
    let err = call(&skill, "Panic", &CallOptions::default()).unwrap_err();
    assert_eq!(err.kind(), "trap", "{err:?}");
    let message = err.to_string();
    assert!(message.contains("unreachable"), "{message}");
    assert!(
        message.contains("the skill panicked at src/lib.rs:3:5: boom"),
        "{message}"
    );
    still_serves(&skill);
}
