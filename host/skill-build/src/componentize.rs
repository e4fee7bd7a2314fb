//! From what a guest toolchain built to the skill component, the tail every
//! recipe shares: encode a core module with `wit-component` (adding the WASI
//! preview1 adapter when the module imports preview1), move a memory-only
//! import's memory into its own module where the shape allows it
//! ([`hoist`]), check that it is a skill (exports `run` and
//! `manifest`), and add the standard wasm metadata from the skill's identity.
//!
//! Pure functions of their input bytes, so the same module always gives the
//! same component. Nothing here knows which language the guest was written
//! in; that is the recipes' business ([`recipe`](super::recipe)).

use wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER;
use wasm_metadata::{
    AddMetadata, AddMetadataField, Authors, Description, Homepage, Licenses, Source, Version,
};
use wit_component::{ComponentEncoder, DecodedWasm};
use wit_parser::WorldItem;

use super::BuildError;
use super::hoist;
use super::recipe::ArtifactKind;

const PREVIEW1: &str = "wasi_snapshot_preview1";

/// A component and what it imports and exports.
#[derive(Debug, Clone)]
pub struct Componentized {
    pub bytes: Vec<u8>,
    /// Imported interfaces and functions, e.g. `skillhost:skill/log@0.1.0`.
    pub imports: Vec<String>,
    pub exports: Vec<String>,
}

/// What the component says about itself: the skill's identity, as its
/// recipe read it (for Rust, from the crate's `Cargo.toml`).
#[derive(Debug, Clone, Default)]
pub struct ComponentMetadata {
    pub name: String,
    pub version: String,
    pub description: Option<String>,
    pub authors: Vec<String>,
    pub license: Option<String>,
    pub repository: Option<String>,
    pub homepage: Option<String>,
}

/// Turns `wasm` (a core module with wit-bindgen's `component-type` section,
/// or a component already, as rustup's `wasm32-wasip2` produces) into a
/// skill component with metadata. `origin` names the input in errors.
pub fn componentize(
    wasm: &[u8],
    meta: &ComponentMetadata,
    origin: &str,
) -> Result<Componentized, BuildError> {
    let component = if wasmparser::Parser::is_component(wasm) {
        wasm.to_vec()
    } else {
        encode_core_module(wasm, &meta.name, origin)?
    };
    finish(component, meta)
}

/// The skill component from what a recipe built: `wasm`, which the recipe
/// says is `kind`. A core module is encoded first; a component goes straight
/// to [`finish`]. `origin` names the input in errors.
pub fn from_artifact(
    kind: ArtifactKind,
    wasm: &[u8],
    meta: &ComponentMetadata,
    origin: &str,
) -> Result<Componentized, BuildError> {
    let found = ArtifactKind::of(wasm);
    if found != kind {
        // A recipe that misjudges its toolchain's output would otherwise get
        // the encoder's (or the decoder's) confusing complaint.
        return Err(BuildError::Componentize {
            package: meta.name.clone(),
            message: format!("{origin} is {found}, but its recipe built {kind}"),
        });
    }
    let component = match kind {
        ArtifactKind::CoreModule => encode_core_module(wasm, &meta.name, origin)?,
        ArtifactKind::Component => wasm.to_vec(),
    };
    finish(component, meta)
}

/// Encodes a core module with wit-bindgen's `component-type` section into a
/// component, with the preview1 reactor adapter if it imports preview1.
/// `skill` and `origin` name the skill and the input in errors.
pub fn encode_core_module(wasm: &[u8], skill: &str, origin: &str) -> Result<Vec<u8>, BuildError> {
    let scan = scan_core(wasm).map_err(|e| BuildError::Componentize {
        package: skill.to_string(),
        message: format!("{origin} is not a valid core module: {e}"),
    })?;
    if !scan.has_component_type {
        return Err(BuildError::NotASkill {
            package: skill.to_string(),
            reason: format!(
                "{origin} has no wit-bindgen `component-type` section; call `skillhost_sdk::generate!(\"<world>\")` and `export!(…)` in src/lib.rs"
            ),
        });
    }
    let mut encoder = ComponentEncoder::default()
        .module(wasm)
        .and_then(|e| {
            let e = e.validate(true);
            if scan.imports_preview1 {
                e.adapter(PREVIEW1, WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER)
            } else {
                Ok(e)
            }
        })
        .map_err(|e| BuildError::Componentize {
            package: skill.to_string(),
            message: format!("{e:#}"),
        })?;
    encoder.encode().map_err(|e| BuildError::Componentize {
        package: skill.to_string(),
        message: format!("{e:#}"),
    })
}

/// Makes a component, encoded here or finished by a guest toolchain, the
/// skill component: its memory hoisted where the shape allows it (any other
/// shape is left as it is), its world checked to be a skill's, and `meta`
/// set as its wasm metadata.
pub fn finish(component: Vec<u8>, meta: &ComponentMetadata) -> Result<Componentized, BuildError> {
    let skill = &meta.name;
    // One core instance fewer per call where the shape allows it.
    let component = match hoist::hoist_memory(&component) {
        Ok(Some(hoisted)) => hoisted,
        Ok(None) => component,
        Err(e) => {
            return Err(BuildError::Componentize {
                package: skill.clone(),
                message: format!("moving the main module's memory into its own module: {e}"),
            });
        }
    };
    let (imports, exports) = check_skill_world(&component, skill)?;
    let bytes = add_metadata(&component, meta)?;
    Ok(Componentized {
        bytes,
        imports,
        exports,
    })
}

struct CoreScan {
    has_component_type: bool,
    imports_preview1: bool,
}

fn scan_core(wasm: &[u8]) -> Result<CoreScan, wasmparser::BinaryReaderError> {
    let mut scan = CoreScan {
        has_component_type: false,
        imports_preview1: false,
    };
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload? {
            wasmparser::Payload::CustomSection(section)
                if section.name().starts_with("component-type") =>
            {
                scan.has_component_type = true;
            }
            wasmparser::Payload::ImportSection(imports) => {
                for import in imports.into_imports() {
                    if import?.module == PREVIEW1 {
                        scan.imports_preview1 = true;
                    }
                }
            }
            _ => {}
        }
    }
    Ok(scan)
}

/// The world of `component` must export the functions `run` and `manifest`.
/// Returns the names of its imports and exports.
fn check_skill_world(
    component: &[u8],
    skill: &str,
) -> Result<(Vec<String>, Vec<String>), BuildError> {
    let decoded = wit_component::decode(component).map_err(|e| BuildError::Componentize {
        package: skill.to_string(),
        message: format!("the encoded component does not decode: {e:#}"),
    })?;
    let DecodedWasm::Component(resolve, world) = decoded else {
        return Err(BuildError::Componentize {
            package: skill.to_string(),
            message: "the encoder produced a WIT package, not a component".to_string(),
        });
    };
    let world = &resolve.worlds[world];
    let names = |items: &wit_parser::IndexMap<wit_parser::WorldKey, WorldItem>| -> Vec<String> {
        items
            .iter()
            .filter(|(_, item)| !matches!(item, WorldItem::Type { .. }))
            .map(|(key, _)| resolve.name_world_key(key))
            .collect()
    };
    let imports = names(&world.imports);
    let exports = names(&world.exports);
    for required in ["run", "manifest"] {
        let found = world.exports.iter().any(|(key, item)| {
            resolve.name_world_key(key) == required && matches!(item, WorldItem::Function(_))
        });
        if !found {
            return Err(BuildError::NotASkill {
                package: skill.to_string(),
                reason: format!(
                    "its world exports no `{required}` function (exports: {}); include skillhost:skill/base@0.1.0 and `export run: func(input: …) -> result<…, skill-error>` in its wit/world.wit",
                    if exports.is_empty() {
                        "none".to_string()
                    } else {
                        exports.join(", ")
                    }
                ),
            });
        }
    }
    Ok((imports, exports))
}

fn add_metadata(component: &[u8], meta: &ComponentMetadata) -> Result<Vec<u8>, BuildError> {
    let invalid =
        |field: &'static str, value: &str, e: anyhow::Error| BuildError::InvalidMetadata {
            package: meta.name.clone(),
            field,
            value: value.to_string(),
            message: format!("{e:#}"),
        };
    let mut add = AddMetadata::default();
    add.name = AddMetadataField::Set(meta.name.clone());
    add.version = AddMetadataField::Set(Version::new(meta.version.clone()));
    if let Some(description) = &meta.description {
        add.description = AddMetadataField::Set(Description::new(description.clone()));
    }
    if !meta.authors.is_empty() {
        add.authors = AddMetadataField::Set(Authors::new(meta.authors.join(", ")));
    }
    if let Some(license) = &meta.license {
        add.licenses = AddMetadataField::Set(
            Licenses::new(license).map_err(|e| invalid("license", license, e))?,
        );
    }
    if let Some(repository) = &meta.repository {
        add.source = AddMetadataField::Set(
            Source::new(repository).map_err(|e| invalid("repository", repository, e))?,
        );
    }
    if let Some(homepage) = &meta.homepage {
        add.homepage = AddMetadataField::Set(
            Homepage::new(homepage).map_err(|e| invalid("homepage", homepage, e))?,
        );
    }
    add.to_wasm(component)
        .map_err(|e| BuildError::Componentize {
            package: meta.name.clone(),
            message: format!("adding metadata: {e:#}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wit_component::{StringEncoding, embed_component_metadata};
    use wit_parser::Resolve;

    /// A skill world over the real contract, and a WAT module that
    /// implements it (an echo that imports `log`).
    fn fixture_module(world_wit: &str, wat: &str) -> Vec<u8> {
        let mut resolve = Resolve::default();
        let contract = concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit");
        resolve.push_dir(contract).expect("the contract parses");
        let pkg = resolve
            .push_str("skill.wit", world_wit)
            .expect("the test world parses");
        let world = resolve.select_world(&[pkg], None).unwrap();
        let mut module = wat::parse_str(wat).unwrap();
        embed_component_metadata(&mut module, &resolve, world, StringEncoding::UTF8).unwrap();
        module
    }

    const WORLD: &str = r#"
        package skillhost:fixture@0.1.0;
        world fixture {
            include skillhost:skill/base@0.1.0;
            use skillhost:skill/types@0.1.0.{skill-error};
            record input { text: string }
            export run: func(input: input) -> result<input, skill-error>;
        }
    "#;

    // `manifest` writes its record at 0 (id `fixture`, capability `log`,
    // one attempt) from the strings at 512; `run` logs its input's text
    // and returns `ok(input)`.
    const WAT: &str = r#"
        (module
          (import "skillhost:skill/log@0.1.0" "log" (func $log (param i32 i32 i32)))
          (memory (export "memory") 1)
          (global $heap (mut i32) (i32.const 2048))
          (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
            (local $p i32)
            (local.set $p (global.get $heap))
            (global.set $heap (i32.add (global.get $heap) (local.get 3)))
            (local.get $p))
          (data (i32.const 512) "fixture\00Fixture\001.2.3\00\00\00log")
          (func (export "manifest") (result i32)
            (i32.store (i32.const 0) (i32.const 512)) (i32.store (i32.const 4) (i32.const 7))
            (i32.store (i32.const 8) (i32.const 520)) (i32.store (i32.const 12) (i32.const 7))
            (i32.store (i32.const 16) (i32.const 528)) (i32.store (i32.const 20) (i32.const 5))
            (i32.store (i32.const 32) (i32.const 544)) (i32.store (i32.const 36) (i32.const 1))
            (i32.store (i32.const 40) (i32.const 1))
            (i32.store (i32.const 48) (i32.const 1))
            (i32.store (i32.const 544) (i32.const 536)) (i32.store (i32.const 548) (i32.const 3))
            (i32.const 0))
          (func (export "run") (param i32 i32) (result i32)
            (call $log (i32.const 2) (local.get 0) (local.get 1))
            (i32.store8 (i32.const 1024) (i32.const 0))
            (i32.store (i32.const 1028) (local.get 0))
            (i32.store (i32.const 1032) (local.get 1))
            (i32.const 1024))
        )
    "#;

    fn meta() -> ComponentMetadata {
        ComponentMetadata {
            name: "fixture".into(),
            version: "1.2.3".into(),
            description: Some("A test skill".into()),
            authors: vec!["A <a@example.org>".into(), "B".into()],
            license: Some("Apache-2.0".into()),
            repository: Some("https://example.org/repo".into()),
            homepage: None,
        }
    }

    #[test]
    fn componentizes_a_skill_and_adds_metadata() {
        let module = fixture_module(WORLD, WAT);
        let out = componentize(&module, &meta(), "fixture.wasm").unwrap();
        assert!(wasmparser::Parser::is_component(&out.bytes));
        // `types` holds only types; only the functions used are imported.
        assert_eq!(
            out.imports,
            ["skillhost:skill/log@0.1.0", "skillhost:skill/types@0.1.0"]
        );
        assert_eq!(out.exports, ["run", "manifest"]);

        let DecodedWasm::Component(resolve, world) = wit_component::decode(&out.bytes).unwrap()
        else {
            panic!("not a component");
        };
        assert!(
            resolve.worlds[world]
                .imports
                .keys()
                .all(|k| !resolve.name_world_key(k).starts_with("wasi:"))
        );

        let payload = wasm_metadata::Payload::from_binary(&out.bytes).unwrap();
        let m = payload.metadata();
        assert_eq!(m.name.as_deref(), Some("fixture"));
        assert_eq!(
            m.version.as_ref().map(|v| v.to_string()).as_deref(),
            Some("1.2.3")
        );
        assert_eq!(
            m.description.as_ref().map(|v| v.to_string()).as_deref(),
            Some("A test skill")
        );
        assert_eq!(
            m.authors.as_ref().map(|v| v.to_string()).as_deref(),
            Some("A <a@example.org>, B")
        );
        assert_eq!(
            m.licenses.as_ref().map(|v| v.to_string()).as_deref(),
            Some("Apache-2.0")
        );
        assert_eq!(
            m.source.as_ref().map(|v| v.to_string()).as_deref(),
            Some("https://example.org/repo")
        );
    }

    const DOCUMENTED: &str = r#"
        package skillhost:fixture@0.1.0;
        /// Returns its input: a fixture.
        world fixture {
            include skillhost:skill/base@0.1.0;
            use skillhost:skill/types@0.1.0.{skill-error};
            /// What to return.
            record input {
                /// The text, returned as it is.
                text: string,
            }
            /// Logs the text first.
            export run: func(input: input) -> result<input, skill-error>;
        }
    "#;

    #[test]
    fn the_wit_docs_survive_into_the_component() {
        let mut source = Resolve::default();
        source
            .push_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../wit"))
            .unwrap();
        let pkg = source.push_str("skill.wit", DOCUMENTED).unwrap();
        let world = source.select_world(&[pkg], None).unwrap();
        let mut module = wat::parse_str(WAT).unwrap();
        embed_component_metadata(&mut module, &source, world, StringEncoding::UTF8).unwrap();
        let plain = componentize(&module, &meta(), "fixture.wasm")
            .unwrap()
            .bytes;
        let documented = crate::docs::add_docs(plain.clone(), &source, world, "fixture").unwrap();

        // Only a custom section was added: what precedes it is unchanged.
        assert!(documented.starts_with(&plain));
        let DecodedWasm::Component(resolve, id) = wit_component::decode(&documented).unwrap()
        else {
            panic!("not a component");
        };
        let decoded = &resolve.worlds[id];
        assert_eq!(
            decoded.docs.contents.as_deref(),
            Some("Returns its input: a fixture.")
        );
        let run = decoded
            .exports
            .iter()
            .find_map(|(k, i)| match i {
                WorldItem::Function(f) if resolve.name_world_key(k) == "run" => Some(f),
                _ => None,
            })
            .unwrap();
        assert_eq!(run.docs.contents.as_deref(), Some("Logs the text first."));
        let interface = skillhost_runtime::schema::describe(&documented).unwrap();
        assert_eq!(
            interface.docs.as_deref(),
            Some("Returns its input: a fixture.\n\nLogs the text first.")
        );
        assert_eq!(interface.input_schema["description"], "What to return.");
        assert_eq!(
            interface.input_schema["properties"]["text"]["description"],
            "The text, returned as it is."
        );

        // Again: the section is there once, and the bytes are the same.
        let twice = crate::docs::add_docs(documented.clone(), &source, world, "fixture").unwrap();
        assert_eq!(twice, documented);
        // The component still runs.
        let report = call_fixture(documented, "hello");
        assert_eq!(report.result.unwrap(), serde_json::json!({"text": "hello"}));
    }

    /// The core modules of `component` and, for each core instance, the
    /// module it instantiates (`None` for one built from exports).
    fn core_layout(component: &[u8]) -> (Vec<Vec<u8>>, Vec<Option<u32>>) {
        let (mut modules, mut instances) = (Vec::new(), Vec::new());
        for payload in wasmparser::Parser::new(0).parse_all(component) {
            match payload.unwrap() {
                wasmparser::Payload::ModuleSection {
                    unchecked_range, ..
                } => modules.push(component[unchecked_range].to_vec()),
                wasmparser::Payload::InstanceSection(reader) => {
                    for instance in reader {
                        instances.push(match instance.unwrap() {
                            wasmparser::Instance::Instantiate { module_index, .. } => {
                                Some(module_index)
                            }
                            wasmparser::Instance::FromExports(_) => None,
                        });
                    }
                }
                _ => {}
            }
        }
        (modules, instances)
    }

    fn memory_imports(module: &[u8]) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for payload in wasmparser::Parser::new(0).parse_all(module) {
            if let wasmparser::Payload::ImportSection(reader) = payload.unwrap() {
                for import in reader.into_imports() {
                    let import = import.unwrap();
                    if matches!(import.ty, wasmparser::TypeRef::Memory(_)) {
                        found.push((import.module.to_string(), import.name.to_string()));
                    }
                }
            }
        }
        found
    }

    /// `module` as the encoder lays it out, before this build's rewrite.
    fn encoded(module: &[u8]) -> Vec<u8> {
        ComponentEncoder::default()
            .module(module)
            .unwrap()
            .validate(true)
            .encode()
            .unwrap()
    }

    fn call_fixture(component: Vec<u8>, text: &str) -> skillhost_runtime::CallReport {
        let runtime = skillhost_runtime::Runtime::new(skillhost_runtime::RuntimeConfig {
            cache_dir: None,
            ..Default::default()
        })
        .unwrap();
        let skill = runtime.load_bytes(component, "fixture").unwrap();
        skill.call(
            &serde_json::json!({ "text": text }),
            &skillhost_runtime::CallOptions::default(),
        )
    }

    #[test]
    fn a_memory_only_import_is_lowered_without_a_shim() {
        let module = fixture_module(WORLD, WAT);
        let out = componentize(&module, &meta(), "fixture.wasm").unwrap();
        // Two modules, the main one and the memory's; two instantiations
        // (the third instance passes `log` to the main module).
        let (modules, instances) = core_layout(&out.bytes);
        assert_eq!(modules.len(), 2);
        assert_eq!(instances, [Some(1), None, Some(0)]);
        assert_eq!(
            memory_imports(&modules[0]),
            [(hoist::MEMORY_MODULE.to_string(), "memory".to_string())]
        );
        assert!(memory_imports(&modules[1]).is_empty());

        // It behaves as the encoder's own layout does: the same output and
        // the same log line, and a second call of the same skill works.
        let plain = encoded(&module);
        assert_eq!(core_layout(&plain).0.len(), 3, "the encoder uses a shim");
        for text in ["héllo", "a longer line, to grow the heap"] {
            let ours = call_fixture(out.bytes.clone(), text);
            let theirs = call_fixture(plain.clone(), text);
            assert_eq!(
                ours.result.as_ref().unwrap(),
                &serde_json::json!({ "text": text })
            );
            assert_eq!(
                ours.result.as_ref().unwrap(),
                theirs.result.as_ref().unwrap()
            );
            assert_eq!(ours.logs.len(), 1);
            assert_eq!(ours.logs[0].message, text);
            assert_eq!(ours.logs[0].message, theirs.logs[0].message);
            assert_eq!(ours.logs[0].level, theirs.logs[0].level);
            assert_eq!(ours.memory_peak_bytes, theirs.memory_peak_bytes);
        }
        // Already hoisted: nothing more to do.
        assert!(hoist::hoist_memory(&out.bytes).unwrap().is_none());
    }

    #[test]
    fn the_shipped_skills_that_only_log_have_no_shim() {
        // A change of the encoder's layout would quietly bring the shim back
        // (and 2 µs per call with it): the committed components say.
        for (name, bytes) in [
            (
                "echo",
                &include_bytes!("../../../skills/dist/echo.wasm")[..],
            ),
            (
                "claim-synthesis",
                &include_bytes!("../../../skills/dist/claim-synthesis.wasm")[..],
            ),
        ] {
            let (modules, _) = core_layout(bytes);
            assert_eq!(modules.len(), 2, "{name}");
            assert_eq!(
                memory_imports(&modules[0]),
                [(hoist::MEMORY_MODULE.to_string(), "memory".to_string())],
                "{name}"
            );
        }
    }

    #[test]
    fn an_import_that_needs_realloc_keeps_the_encoders_layout() {
        // `read-text` returns a string, which the host writes into the
        // skill's memory through `cabi_realloc`: only the main module has it.
        let wat = WAT.replace(
            "(memory (export \"memory\") 1)",
            "(import \"skillhost:skill/fs@0.1.0\" \"read-text\" (func $read (param i32 i32 i32)))
             (memory (export \"memory\") 1)
             (func (export \"unused\") (call $read (i32.const 0) (i32.const 0) (i32.const 0)))",
        );
        let module = fixture_module(WORLD, &wat);
        let plain = encoded(&module);
        assert!(hoist::hoist_memory(&plain).unwrap().is_none());
        let out = componentize(&module, &meta(), "fixture.wasm").unwrap();
        assert_eq!(core_layout(&out.bytes).0.len(), 3);
        let report = call_fixture(out.bytes, "still works");
        assert_eq!(
            report.result.unwrap(),
            serde_json::json!({ "text": "still works" })
        );
    }

    #[test]
    fn components_without_a_shim_and_core_modules_are_left_alone() {
        // No import at all that needs the memory: no shim to remove.
        let quiet = WAT
            .replace(
                "(import \"skillhost:skill/log@0.1.0\" \"log\" (func $log (param i32 i32 i32)))",
                "",
            )
            .replace("(call $log (i32.const 2) (local.get 0) (local.get 1))", "");
        let module = fixture_module(WORLD, &quiet);
        let plain = encoded(&module);
        assert!(hoist::hoist_memory(&plain).unwrap().is_none());
        assert!(hoist::hoist_memory(&module).unwrap().is_none());
        assert!(hoist::hoist_memory(b"not wasm").is_err());
    }

    #[test]
    fn same_module_gives_same_bytes() {
        let module = fixture_module(WORLD, WAT);
        let a = componentize(&module, &meta(), "a").unwrap().bytes;
        let b = componentize(&module, &meta(), "b").unwrap().bytes;
        assert_eq!(a, b);
    }

    #[test]
    fn a_recipes_component_gets_the_same_tail_as_an_encoded_module() {
        let module = fixture_module(WORLD, WAT);
        let via_module = from_artifact(ArtifactKind::CoreModule, &module, &meta(), "m").unwrap();
        assert_eq!(
            via_module.bytes,
            componentize(&module, &meta(), "m").unwrap().bytes
        );
        // A toolchain that makes the component itself (here: the encoder,
        // outside this crate's tail) gets the hoist, check and metadata only.
        let via_component =
            from_artifact(ArtifactKind::Component, &encoded(&module), &meta(), "c").unwrap();
        assert_eq!(via_component.bytes, via_module.bytes);
        assert_eq!(via_component.exports, ["run", "manifest"]);
        let report = call_fixture(via_component.bytes, "hello");
        assert_eq!(
            report.result.unwrap(),
            serde_json::json!({ "text": "hello" })
        );
    }

    #[test]
    fn an_artifact_of_the_wrong_kind_is_named() {
        let module = fixture_module(WORLD, WAT);
        let err = from_artifact(ArtifactKind::Component, &module, &meta(), "out.wasm").unwrap_err();
        assert!(
            err.to_string()
                .contains("out.wasm is a core module, but its recipe built a component"),
            "{err}"
        );
        let component = encoded(&module);
        let err =
            from_artifact(ArtifactKind::CoreModule, &component, &meta(), "out.wasm").unwrap_err();
        assert!(
            err.to_string()
                .contains("out.wasm is a component, but its recipe built a core module"),
            "{err}"
        );
    }

    #[test]
    fn a_module_without_component_type_is_not_a_skill() {
        let module = wat::parse_str("(module (memory (export \"memory\") 1))").unwrap();
        let err = componentize(&module, &meta(), "plain.wasm").unwrap_err();
        assert!(matches!(err, BuildError::NotASkill { .. }), "{err}");
        assert!(err.to_string().contains("component-type"), "{err}");
    }

    #[test]
    fn a_world_without_run_is_not_a_skill() {
        let world = r#"
            package skillhost:norun@0.1.0;
            world norun { include skillhost:skill/base@0.1.0; }
        "#;
        let wat = r#"
            (module
              (memory (export "memory") 1)
              (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 0))
              (func (export "manifest") (result i32) (i32.const 0)))
        "#;
        let module = fixture_module(world, wat);
        let err = componentize(&module, &meta(), "norun.wasm").unwrap_err();
        assert!(err.to_string().contains("no `run` function"), "{err}");
    }

    #[test]
    fn an_invalid_license_is_reported_with_its_field() {
        let module = fixture_module(WORLD, WAT);
        let mut meta = meta();
        meta.license = Some("not a license!".into());
        let err = componentize(&module, &meta, "x").unwrap_err();
        assert!(
            matches!(
                err,
                BuildError::InvalidMetadata {
                    field: "license",
                    ..
                }
            ),
            "{err}"
        );
    }
}
