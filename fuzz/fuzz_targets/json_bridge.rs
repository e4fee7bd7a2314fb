//! Fuzz target: the JSON <-> WIT bridge (`skillhost_runtime::bridge`) on the
//! types of the shipped `kitchen-sink` skill, whose input has every kind of
//! WIT type. The first byte picks the type (the whole input record, or one of
//! its fields), the rest is JSON. What the bridge accepts must be written
//! back, read back as the same value, and written back as the same JSON: the
//! round trip the bridge documents. A panic is a finding; JSON the bridge
//! refuses is not.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use skillhost_runtime::bridge::{json_to_val, val_to_json};
use skillhost_runtime::{Runtime, RuntimeConfig};
use wasmtime::component::Type;

const KITCHEN_SINK: &[u8] = include_bytes!("../../skills/dist/kitchen-sink.wasm");

/// The types to fuzz, and the runtime that keeps them valid.
fn types() -> &'static (Runtime, Vec<Type>) {
    static TYPES: OnceLock<(Runtime, Vec<Type>)> = OnceLock::new();
    TYPES.get_or_init(|| {
        let runtime = Runtime::new(RuntimeConfig::default()).expect("a runtime");
        let skill = runtime
            .load_bytes(KITCHEN_SINK, "skills/dist/kitchen-sink.wasm")
            .expect("the shipped kitchen-sink skill loads");
        let mut types = vec![skill.input_type.clone()];
        if let Type::Record(record) = &skill.input_type {
            types.extend(record.fields().map(|field| field.ty));
        }
        (runtime, types)
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, json)) = data.split_first() else {
        return;
    };
    let types = &types().1;
    let ty = &types[usize::from(pick) % types.len()];
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(json) else {
        return;
    };
    let Ok(val) = json_to_val(ty, &json) else {
        return;
    };
    let written = val_to_json(ty, &val).expect("a value the bridge read can be written");
    let reread = json_to_val(ty, &written).expect("the bridge reads what it wrote");
    assert_eq!(val, reread, "read {json} as {val:?}, wrote {written}");
    let rewritten = val_to_json(ty, &reread).expect("a value the bridge read can be written");
    assert_eq!(written, rewritten, "writing is not stable for {json}");
});
