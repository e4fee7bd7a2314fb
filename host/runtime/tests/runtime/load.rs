//! Loading bad components: each is refused with one error that names the file
//! or skill and says what to do, and nothing panics. Plus a real call through
//! the `kitchen-sink` skill that round-trips every WIT type kind.

use std::sync::Arc;

use serde_json::json;
use skillhost_runtime::{CallOptions, LoadError};

fn load_err(bytes: Vec<u8>, origin: &str) -> LoadError {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    runtime.load_bytes(bytes, origin).unwrap_err()
}

#[test]
fn a_missing_file_is_named() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let err = runtime
        .load_file(std::path::Path::new("/no/such/skill.wasm"))
        .unwrap_err();
    assert!(matches!(err, LoadError::Read { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("/no/such/skill.wasm") && text.contains("host skill build"),
        "{text}"
    );
}

#[test]
fn a_file_that_is_not_wasm_is_refused() {
    let err = load_err(b"#!/bin/sh\necho hi\n".to_vec(), "script.wasm");
    assert!(matches!(err, LoadError::NotWasm { .. }), "{err:?}");
    assert!(err.to_string().contains("script.wasm"));
}

#[test]
fn a_core_module_is_refused_with_the_fix() {
    let core = wat::parse_str("(module (func (export \"run\")))").unwrap();
    let err = load_err(core, "core.wasm");
    assert!(matches!(err, LoadError::CoreModule { .. }), "{err:?}");
    assert!(err.to_string().contains("componentize"), "{err}");
}

#[test]
fn a_component_without_run_is_refused() {
    let bytes = skillhost_tests::dummy_component(
        "package test:norun@0.1.0;
         world norun { include skillhost:skill/base@0.1.0; }",
    );
    let err = load_err(bytes, "norun.wasm");
    match &err {
        LoadError::MissingExport { skill, export } => {
            assert_eq!(skill, "norun");
            assert_eq!(*export, "run");
        }
        other => panic!("expected a missing export, got {other:?}"),
    }
    assert!(err.to_string().contains("export run: func"), "{err}");
}

#[test]
fn a_run_with_the_wrong_shape_is_refused() {
    let bytes = skillhost_tests::dummy_component(
        "package test:shape@0.1.0;
         world shape {
             include skillhost:skill/base@0.1.0;
             export run: func(a: string, b: string) -> string;
         }",
    );
    let err = load_err(bytes, "shape.wasm");
    assert!(matches!(err, LoadError::BadRunSignature { .. }), "{err:?}");
}

/// `run`'s error type is checked by its shape, by the same rule when the
/// component is loaded (`host skill call`) and when its schema is derived
/// (`host check`, `host skill inspect`): a record of `skill-error`'s fields
/// passes both whatever its name, and one with a field of another type
/// passes neither.
#[test]
fn the_error_type_is_checked_by_shape_at_load_and_in_the_schema() {
    let world = |failure: &str| {
        skillhost_tests::dummy_component(&format!(
            "package test:errors@0.1.0;
             world errors {{
                 include skillhost:skill/base@0.1.0;
                 record failure {{ {failure} }}
                 record input {{ text: string }}
                 record output {{ text: string }}
                 export run: func(input: input) -> result<output, failure>;
             }}"
        ))
    };
    let same_shape = world("code: string, message: string, retryable: bool");
    assert!(skillhost_runtime::schema::describe(&same_shape).is_ok());
    // A dummy's functions trap, so loading it ends at its manifest: after
    // the signature was accepted.
    let err = load_err(same_shape, "errors.wasm");
    assert!(matches!(err, LoadError::Manifest { .. }), "{err:?}");

    let wrong_type = world("code: u32, message: string, retryable: bool");
    let err = skillhost_runtime::schema::describe(&wrong_type).unwrap_err();
    assert!(err.to_string().contains("code: string"), "{err}");
    let err = load_err(wrong_type, "errors.wasm");
    assert!(matches!(err, LoadError::BadRunSignature { .. }), "{err:?}");
    assert!(err.to_string().contains("code: string"), "{err}");
}

#[test]
fn resources_cannot_cross_the_skill_boundary() {
    let bytes = skillhost_tests::dummy_component(
        "package test:res@0.1.0;
         interface handles { resource handle; }
         world res {
             include skillhost:skill/base@0.1.0;
             use skillhost:skill/types@0.1.0.{skill-error};
             use handles.{handle};
             record input { h: own<handle> }
             record output { ok: bool }
             export run: func(input: input) -> result<output, skill-error>;
         }",
    );
    let err = load_err(bytes, "res.wasm");
    match &err {
        LoadError::Unbridgeable { skill, side, error } => {
            assert_eq!(skill, "res");
            assert_eq!(*side, "input");
            assert_eq!(error.path, "$.h");
        }
        other => panic!("expected the resource to be refused, got {other:?}"),
    }
}

#[test]
fn an_unknown_import_is_named_at_load() {
    let bytes = skillhost_tests::dummy_component(
        "package test:net@0.1.0;
         interface sockets { connect: func(host: string) -> bool; }
         world net {
             include skillhost:skill/base@0.1.0;
             use skillhost:skill/types@0.1.0.{skill-error};
             import sockets;
             record input { host: string }
             record output { ok: bool }
             export run: func(input: input) -> result<output, skill-error>;
         }",
    );
    let err = load_err(bytes, "net.wasm");
    match &err {
        LoadError::UnknownImport { skill, import } => {
            assert_eq!(skill, "net");
            assert_eq!(import, "test:net/sockets@0.1.0");
        }
        other => panic!("expected an unknown import, got {other:?}"),
    }
    assert!(err.to_string().contains("does not provide"), "{err}");
}

#[test]
fn an_import_the_host_cannot_provide_is_refused_before_compiling_with_the_fix() {
    let bytes = skillhost_tests::dummy_component(
        "package test:web@0.1.0;
         package wasi:http@0.2.3 { interface types { handle: func(url: string) -> u32; } }
         world web {
             include skillhost:skill/base@0.1.0;
             use skillhost:skill/types@0.1.0.{skill-error};
             import wasi:http/types@0.2.3;
             record input { url: string }
             export run: func(input: input) -> result<input, skill-error>;
         }",
    );
    let err = load_err(bytes, "web.wasm");
    match &err {
        LoadError::Unprovided { origin, import, .. } => {
            assert_eq!(origin, "web.wasm");
            assert_eq!(import, "wasi:http/types@0.2.3");
        }
        other => panic!("expected an unprovided import, got {other:?}"),
    }
    assert!(err.to_string().contains("-d http fetch-event"), "{err}");
}

#[test]
fn an_async_lift_is_compiled_for_the_concurrent_engine_and_checked_as_any_other() {
    // The async ABI is no longer refused up front (tests/runtime/async_abi.rs
    // calls real async components): this one compiles on the concurrent
    // engine and is then refused, as a synchronous one would be, for the
    // contract it lacks.
    let bytes = wat::parse_str(
        r#"(component
             (core module $m
               (func (export "run") (result i32) (i32.const 0))
               (func (export "callback") (param i32 i32 i32) (result i32) (i32.const 0)))
             (core instance $i (instantiate $m))
             (func (export "run") async (result u32)
               (canon lift (core func $i "run") async (callback (core func $i "callback")))))"#,
    )
    .expect("the WAT parses");
    let err = load_err(bytes, "qjs.wasm");
    match &err {
        LoadError::MissingExport { export, .. } => assert_eq!(*export, "manifest"),
        other => panic!("expected the missing manifest, got {other:?}"),
    }
}

#[test]
fn every_type_kind_round_trips_through_a_real_call() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let skill = runtime
        .load_file(&skillhost_tests::dist("kitchen-sink"))
        .expect("load kitchen-sink");
    let input = json!({
        "a_bool": true,
        "a_u8": 255, "a_u16": 65535, "a_u32": 4294967295u64, "a_u64": 18446744073709551615u64,
        "a_s8": -128, "a_s16": -32768, "a_s32": -2147483648i64, "a_s64": -9223372036854775808i64,
        "a_f32": 1.5, "a_f64": -0.25,
        "a_char": "ß",
        "a_string": "héllo\nworld",
        "bytes": "AAEC/w==",
        "points": [{ "x": 1, "y": -2 }, { "x": 3, "y": 4 }],
        "maybe": null,
        "maybe_maybe": [null],
        "outcome": { "err": 7 },
        "unit_ok": { "ok": null },
        "shape": { "polygon": [{ "x": 0, "y": 0 }, { "x": 1, "y": 1 }] },
        "other_shape": { "empty": null },
        "color": "blue",
        "permissions": ["read", "execute"],
        "pair": ["k", 42, false],
        "nested": { "label": "l", "at": { "x": 5, "y": 6 }, "tags": ["a", "b"] },
        "score": 0.75
    });
    let output = skill
        .call(&input, &CallOptions::default())
        .into_result()
        .expect("kitchen-sink echoes its input");
    assert_eq!(output, input);

    // The same call with an out-of-range field names the path.
    let mut bad = input.clone();
    bad["points"][1]["y"] = json!(3_000_000_000u64);
    let err = skill
        .call(&bad, &CallOptions::default())
        .into_result()
        .unwrap_err();
    assert_eq!(err.kind(), "invalid-input");
    assert!(err.to_string().contains("$.points[1].y"), "{err}");

    let arc: Arc<[u8]> = std::fs::read(skillhost_tests::dist("kitchen-sink"))
        .unwrap()
        .into();
    let again = runtime.load_bytes(arc, "again.wasm").unwrap();
    assert!(Arc::ptr_eq(&skill, &again), "the same bytes load once");
}

#[test]
fn a_second_load_comes_from_the_cache() {
    let cache = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(skillhost_tests::dist("echo")).unwrap();
    let first = skillhost_tests::runtime(cache.path())
        .load_bytes(bytes.clone(), "echo.wasm")
        .unwrap();
    assert_eq!(
        first.load_stats.source,
        skillhost_runtime::LoadSource::Compiled
    );
    // A new runtime (a new process, in effect) finds the compiled component.
    let second = skillhost_tests::runtime(cache.path())
        .load_bytes(bytes, "echo.wasm")
        .unwrap();
    assert_eq!(
        second.load_stats.source,
        skillhost_runtime::LoadSource::Cache
    );
}

#[test]
fn a_manifest_that_never_returns_is_a_manifest_timeout() {
    let cache = tempfile::tempdir().unwrap();
    let runtime = skillhost_tests::runtime(cache.path());
    let start = std::time::Instant::now();
    let err = runtime
        .load_bytes(
            skillhost_tests::fixture_component("slow-manifest"),
            "slow-manifest.wasm",
        )
        .unwrap_err();
    assert!(
        start.elapsed() < std::time::Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    match &err {
        LoadError::ManifestTimeout { skill, limit_ms } => {
            assert_eq!(skill, "slow-manifest");
            assert_eq!(*limit_ms, 1000);
        }
        other => panic!("expected a manifest timeout, got {other:?}"),
    }
    let message = err.to_string();
    assert!(
        message.contains("did not return within 1000 ms"),
        "{message}"
    );
    assert!(!message.contains("interrupt"), "{message}");
    // The runtime still loads and calls a well-behaved skill.
    let skill = runtime
        .load_bytes(
            skillhost_tests::fixture_component("adversary"),
            "adversary.wasm",
        )
        .unwrap();
    let out = skill
        .call(&json!({ "text": "echo" }), &CallOptions::default())
        .into_result()
        .unwrap();
    assert_eq!(out, json!({ "text": "echo" }));
}
