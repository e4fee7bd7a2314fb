//! The doc comments of a skill's WIT source, written into its component.
//!
//! The component model's binary format has no place for doc comments, and
//! `wit-component` drops them when it encodes a module's world. The WIT
//! tooling's own answer is the `package-docs` custom section
//! ([`PackageMetadata`]), which `wit_component::decode` reads back into the
//! decoded world. This module writes that section at the top of a skill
//! component: the docs of its world, of its exported functions (`run`,
//! `manifest`) and of the types it imports (their fields and cases), copied
//! from the world in the skill's `wit/` folder by name onto the world the
//! component decodes to (`root:component/root`). Readers (`host skill
//! inspect`, `host mcp`'s tool descriptions, the JSON Schemas'
//! `description`s) get them from the decoded world like any other.
//!
//! Must not: change anything but that one custom section (the component's
//! code, types and other sections stay byte for byte), or write a section
//! the decoder would refuse: the result is decoded again before it is
//! returned. A component that already carries the section (a guest
//! toolchain wrote it) is left as it is.

use std::path::Path;

use wasm_encoder::{ComponentSection, CustomSection};
use wit_component::DecodedWasm;
use wit_parser::{Docs, PackageMetadata, Resolve, TypeDefKind, TypeId, WorldId, WorldItem};

use crate::BuildError;

/// [`add_docs`] from the skill's `wit/` folder: its root package's one
/// world. A folder that is missing, does not parse or holds several worlds
/// gives no docs (the recipe has already said what it built from), and the
/// component is returned as it is.
pub fn add_wit_docs(
    component: Vec<u8>,
    wit_dir: &Path,
    skill: &str,
) -> Result<Vec<u8>, BuildError> {
    if !wit_dir.is_dir() {
        return Ok(component);
    }
    let mut source = Resolve::default();
    let world = source
        .push_dir(wit_dir)
        .and_then(|(package, _)| source.select_world(&[package], None));
    match world {
        Ok(world) => add_docs(component, &source, world, skill),
        Err(e) => {
            tracing::debug!(skill, "no WIT docs for the component: {e:#}");
            Ok(component)
        }
    }
}

/// Writes the docs of `world` in `source` into `component` as a top-level
/// `package-docs` section; `skill` names it in errors.
pub fn add_docs(
    component: Vec<u8>,
    source: &Resolve,
    world: WorldId,
    skill: &str,
) -> Result<Vec<u8>, BuildError> {
    let failed = |message: String| BuildError::Componentize {
        package: skill.to_string(),
        message: format!("writing the WIT doc comments into the component: {message}"),
    };
    if has_package_docs(&component) {
        return Ok(component);
    }
    let DecodedWasm::Component(mut decoded, target) =
        wit_component::decode(&component).map_err(|e| failed(format!("{e:#}")))?
    else {
        return Err(failed("it is a WIT package, not a component".into()));
    };
    if !copy_docs(source, world, &mut decoded, target) {
        return Ok(component);
    }
    let package = decoded.worlds[target]
        .package
        .ok_or_else(|| failed("the decoded world has no package".into()))?;
    let data = PackageMetadata::extract(&decoded, package)
        .encode()
        .map_err(|e| failed(format!("{e:#}")))?;
    let mut out = component;
    CustomSection {
        name: PackageMetadata::SECTION_NAME.into(),
        data: data.into(),
    }
    .append_to_component(&mut out);
    // The decoder injects the section and refuses one that names what the
    // component lacks: check here, not at the first load.
    let world_docs = decoded.worlds[target].docs.contents.clone();
    match wit_component::decode(&out) {
        Ok(DecodedWasm::Component(again, id)) if again.worlds[id].docs.contents == world_docs => {
            Ok(out)
        }
        Ok(_) => Err(failed(
            "the decoded component does not show the docs written".into(),
        )),
        Err(e) => Err(failed(format!("{e:#}"))),
    }
}

/// Whether any module or component in `component` has a `package-docs`
/// section already (the decoder accepts one only).
fn has_package_docs(component: &[u8]) -> bool {
    wasmparser::Parser::new(0)
        .parse_all(component)
        .any(|payload| {
            matches!(payload, Ok(wasmparser::Payload::CustomSection(s))
                if s.name() == PackageMetadata::SECTION_NAME)
        })
}

/// Copies the docs of `from` in `source` onto `to` in `target`, by name:
/// the world's, its exported functions', and its imported types' (with
/// their fields and cases). True when there was any to copy.
fn copy_docs(source: &Resolve, from: WorldId, target: &mut Resolve, to: WorldId) -> bool {
    let mut any = false;
    let from_world = &source.worlds[from];
    let mut set = |docs: &mut Docs, contents: &Docs| {
        if contents.contents.is_some() {
            docs.contents = contents.contents.clone();
            any = true;
        }
    };
    set(&mut target.worlds[to].docs, &from_world.docs);
    let mut types: Vec<(TypeId, TypeId)> = Vec::new();
    let to_world = &mut target.worlds[to];
    for (key, item) in to_world.exports.iter_mut() {
        let name = source.name_world_key(key);
        if let WorldItem::Function(function) = item
            && let Some(WorldItem::Function(original)) = from_world
                .exports
                .iter()
                .find_map(|(k, i)| (source.name_world_key(k) == name).then_some(i))
        {
            set(&mut function.docs, &original.docs);
        }
    }
    // Types only as imports: the section can name no other (the decoder
    // looks a world's types up among its imports).
    for (key, item) in to_world.imports.iter() {
        let WorldItem::Type { id, .. } = item else {
            continue;
        };
        let name = source.name_world_key(key);
        let original = from_world
            .imports
            .iter()
            .chain(from_world.exports.iter())
            .find_map(|(k, i)| match i {
                WorldItem::Type { id, .. } if source.name_world_key(k) == name => Some(*id),
                _ => None,
            });
        if let Some(original) = original {
            types.push((*id, original));
        }
    }
    for (id, original) in types {
        let original = &source.types[original];
        let typedef = &mut target.types[id];
        set(&mut typedef.docs, &original.docs);
        match (&mut typedef.kind, &original.kind) {
            (TypeDefKind::Record(to), TypeDefKind::Record(from)) => {
                for field in &mut to.fields {
                    if let Some(f) = from.fields.iter().find(|f| f.name == field.name) {
                        set(&mut field.docs, &f.docs);
                    }
                }
            }
            (TypeDefKind::Variant(to), TypeDefKind::Variant(from)) => {
                for case in &mut to.cases {
                    if let Some(c) = from.cases.iter().find(|c| c.name == case.name) {
                        set(&mut case.docs, &c.docs);
                    }
                }
            }
            (TypeDefKind::Enum(to), TypeDefKind::Enum(from)) => {
                for case in &mut to.cases {
                    if let Some(c) = from.cases.iter().find(|c| c.name == case.name) {
                        set(&mut case.docs, &c.docs);
                    }
                }
            }
            (TypeDefKind::Flags(to), TypeDefKind::Flags(from)) => {
                for flag in &mut to.flags {
                    if let Some(f) = from.flags.iter().find(|f| f.name == flag.name) {
                        set(&mut flag.docs, &f.docs);
                    }
                }
            }
            _ => {}
        }
    }
    any
}
