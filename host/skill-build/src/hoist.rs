//! Two core modules instantiated per call instead of three: move the main
//! module's memory into a module of its own.
//!
//! `wit-component` lowers an import whose arguments live in linear memory
//! (`log: func(level, message: string)` is one) with that memory, which the
//! main module defines. The lowering can only exist once the main module is
//! instantiated, and the main module needs it as an import, so the encoder
//! breaks the cycle with two more core instances: a shim whose functions call
//! through a table, instantiated first, and a fixup that fills the table once
//! the main module is up. Every call of a skill instantiates all three and
//! tears them down again; the shim and fixup were about 2 µs of the 14 µs a
//! fresh call of `echo` took (`host bench runtime`, core shared).
//!
//! When every such lowering needs only the memory (no `realloc`, which only
//! the main module can provide), the cycle is not real. This pass rewrites
//! the component so that a one-line module defines the memory (same limits),
//! the lowerings use it directly, and the main module imports it (module
//! `skillhost:memory`, name `memory`) instead of defining it. The shim module becomes
//! the memory module, the fixup goes. Data segments of the main module now
//! initialise an imported memory: wasmtime copies them in at instantiation
//! instead of mapping them copy-on-write, which for a skill's few kilobytes
//! of constants costs less than the instance it saves.
//!
//! Every index the rest of the component uses keeps its value, so all other
//! sections are copied byte for byte: a lowering takes the place of the shim
//! function it stood for, and the old lowering's index is filled by an alias
//! of the same function. A component of any other shape (lowerings that need
//! `realloc`, adapters, resources, nested components) is left as it was.

use std::collections::{HashMap, HashSet};

use wasm_encoder::reencode::{Reencode, ReencodeComponent, RoundtripReencoder};
use wasm_encoder::{
    Alias, CanonicalFunctionSection, Component, ComponentAliasSection, ExportKind, ExportSection,
    ImportSection, InstanceSection, MemorySection, ModuleArg, RawSection,
};
use wasmparser::{
    CanonicalFunction, CanonicalOption, Chunk, ComponentAlias, ComponentExternalKind, Encoding,
    ExternalKind, Instance, Parser, Payload, TypeRef,
};

/// The module name under which the main module imports its memory.
pub const MEMORY_MODULE: &str = "skillhost:memory";
/// The memory's name, in that module and in the memory module's exports.
const MEMORY_NAME: &str = "memory";

/// Rewrites `component` as described above. `Ok(None)` when it does not have
/// the shape this applies to; an error only for bytes that do not parse or a
/// result that does not validate (a bug here, not in the skill).
pub fn hoist_memory(component: &[u8]) -> Result<Option<Vec<u8>>, String> {
    let Some(items) = parse_items(component)? else {
        return Ok(None);
    };
    let Some(plan) = Plan::find(&items)? else {
        return Ok(None);
    };
    let bytes = plan.emit(&items).map_err(|e| e.to_string())?;
    wasmparser::Validator::new()
        .validate_all(&bytes)
        .map_err(|e| format!("the component with its memory moved does not validate: {e}"))?;
    Ok(Some(bytes))
}

/// A top-level item of a component, in order.
enum Item<'a> {
    /// A section this pass copies as it is (types, imports, exports, custom).
    Raw(u8, &'a [u8]),
    /// A core module's bytes.
    Module(&'a [u8]),
    Instance(Instance<'a>),
    Alias(ComponentAlias<'a>),
    Canon(CanonicalFunction),
}

/// What an item adds to an index space this pass renumbers or moves.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Def {
    None,
    Module(u32),
    CoreInstance(u32),
    CoreFunc(u32),
    CoreMemory(u32),
    CoreTable(u32),
    ComponentFunc(u32),
}

fn parse_items(component: &[u8]) -> Result<Option<Vec<Item<'_>>>, String> {
    let error = |e: wasmparser::BinaryReaderError| e.to_string();
    let mut items = Vec::new();
    for payload in top_level(component)? {
        match payload {
            Payload::Version { encoding, .. } => {
                if encoding != Encoding::Component {
                    return Ok(None);
                }
            }
            Payload::ModuleSection {
                unchecked_range, ..
            } => items.push(Item::Module(&component[unchecked_range])),
            Payload::InstanceSection(reader) => {
                for instance in reader {
                    items.push(Item::Instance(instance.map_err(error)?));
                }
            }
            Payload::ComponentAliasSection(reader) => {
                for alias in reader {
                    items.push(Item::Alias(alias.map_err(error)?));
                }
            }
            Payload::ComponentCanonicalSection(reader) => {
                for function in reader {
                    items.push(Item::Canon(function.map_err(error)?));
                }
            }
            // A nested component has index spaces of its own; not this shape.
            Payload::ComponentSection { .. } => return Ok(None),
            other => match other.as_section() {
                Some((id, range)) => items.push(Item::Raw(id, &component[range])),
                None => return Ok(None),
            },
        }
    }
    Ok(Some(items))
}

/// The top-level payloads of a component or core module, up to its end:
/// a nested module as its `ModuleSection` and the code section as its
/// `CodeSectionStart`, without what is inside them. A nested component
/// ends the list (nothing here looks past one).
fn top_level(wasm: &[u8]) -> Result<Vec<Payload<'_>>, String> {
    let mut parser = Parser::new(0);
    let mut offset = 0;
    let mut payloads = Vec::new();
    loop {
        let parsed = parser
            .parse(&wasm[offset..], true)
            .map_err(|e| e.to_string())?;
        let Chunk::Parsed { consumed, payload } = parsed else {
            return Err(format!("the wasm ends early, at byte {offset}"));
        };
        offset += consumed;
        match payload {
            Payload::ModuleSection {
                ref unchecked_range,
                ..
            } => offset = unchecked_range.end,
            Payload::CodeSectionStart { size, .. } => {
                parser.skip_section();
                offset += size as usize;
            }
            Payload::ComponentSection { .. } => {
                payloads.push(payload);
                return Ok(payloads);
            }
            Payload::End(_) => return Ok(payloads),
            _ => {}
        }
        payloads.push(payload);
    }
}

/// The definitions of `items`, with the index each gets; `None` when an item
/// defines a core module or core function in a way this pass does not track.
fn definitions(items: &[Item<'_>]) -> Option<Vec<Def>> {
    let (mut modules, mut instances, mut funcs, mut memories, mut tables, mut component_funcs) =
        (0, 0, 0, 0, 0, 0);
    let next = |counter: &mut u32| {
        *counter += 1;
        *counter - 1
    };
    items
        .iter()
        .map(|item| {
            Some(match item {
                Item::Raw(..) => Def::None,
                Item::Module(_) => Def::Module(next(&mut modules)),
                Item::Instance(_) => Def::CoreInstance(next(&mut instances)),
                Item::Alias(ComponentAlias::CoreInstanceExport { kind, .. }) => match kind {
                    ExternalKind::Func | ExternalKind::FuncExact => Def::CoreFunc(next(&mut funcs)),
                    ExternalKind::Memory => Def::CoreMemory(next(&mut memories)),
                    ExternalKind::Table => Def::CoreTable(next(&mut tables)),
                    ExternalKind::Global | ExternalKind::Tag => Def::None,
                },
                Item::Alias(ComponentAlias::InstanceExport { kind, .. }) => match kind {
                    ComponentExternalKind::Func => Def::ComponentFunc(next(&mut component_funcs)),
                    ComponentExternalKind::Module => return None,
                    _ => Def::None,
                },
                Item::Alias(ComponentAlias::Outer { .. }) => return None,
                Item::Canon(CanonicalFunction::Lift { .. }) => {
                    Def::ComponentFunc(next(&mut component_funcs))
                }
                Item::Canon(CanonicalFunction::Lower { .. }) => Def::CoreFunc(next(&mut funcs)),
                // Resource and async intrinsics: not a shape this pass knows.
                Item::Canon(_) => return None,
            })
        })
        .collect()
}

/// One lowering the shim stood in for.
struct Lowering {
    /// Position of the shim function's alias (where the lowering goes).
    shim_alias: usize,
    /// Position of the `canon lower` (where an alias keeps its index).
    lower: usize,
    /// The component function lowered, and where it is defined.
    func: u32,
    func_def: usize,
    options: Vec<CanonicalOption>,
    /// A core instance and export name that yield the shim function, for
    /// the alias that keeps the old lowering's index.
    stand_in: (u32, String),
}

/// Where everything is, once the shape is confirmed.
struct Plan {
    main_module: usize,
    shim_module: usize,
    /// Position and index of the fixup module.
    fixup_module: usize,
    fixup_index: u32,
    main_instance: usize,
    shim_instance: u32,
    /// Positions of items that go: the fixup's two instances, the main
    /// module's memory alias, the shim table's alias.
    dropped: HashSet<usize>,
    lowerings: Vec<Lowering>,
    /// Position of the first shim function's alias: the memory's alias and
    /// the moved aliases go before it.
    first: usize,
    /// Aliases of lowered component functions defined after the first
    /// shim function: emitted, in order, before it.
    moved: Vec<usize>,
    /// The main module with an imported memory, and the memory module.
    main_bytes: Vec<u8>,
    memory_bytes: Vec<u8>,
}

impl Plan {
    fn find(items: &[Item<'_>]) -> Result<Option<Plan>, String> {
        let Some(defs) = definitions(items) else {
            return Ok(None);
        };
        let position = |def: Def| defs.iter().position(|d| *d == def);
        let count = |pred: fn(&Def) -> bool| defs.iter().filter(|d| pred(d)).count();
        let instance = |index: u32| match position(Def::CoreInstance(index)) {
            Some(at) => match &items[at] {
                Item::Instance(instance) => Some((at, instance)),
                _ => None,
            },
            None => None,
        };

        // The fixup: the instance whose only argument, "", exports "$imports".
        let instances = count(|d| matches!(d, Def::CoreInstance(_))) as u32;
        if instances < 2 {
            return Ok(None);
        }
        let (fixup_args, fixup_instance) = (instances - 2, instances - 1);
        let Some((fixup_at, Instance::Instantiate { module_index, args })) =
            instance(fixup_instance)
        else {
            return Ok(None);
        };
        let fixup_module = *module_index;
        if args.len() != 1 || !args[0].name.is_empty() || args[0].index != fixup_args {
            return Ok(None);
        }
        let Some((args_at, Instance::FromExports(exports))) = instance(fixup_args) else {
            return Ok(None);
        };
        let mut table = None;
        let mut lowered = HashMap::new();
        for export in exports.iter() {
            match export.kind {
                ExternalKind::Table if export.name == "$imports" => table = Some(export.index),
                ExternalKind::Func => {
                    lowered.insert(export.name.to_string(), export.index);
                }
                _ => return Ok(None),
            }
        }
        let Some(table) = table else {
            return Ok(None);
        };
        if lowered.is_empty() || count(|d| matches!(d, Def::CoreTable(_))) != 1 {
            return Ok(None);
        }

        // The shim: the instance the table comes from, with no arguments.
        let Some(table_at) = position(Def::CoreTable(table)) else {
            return Ok(None);
        };
        let Item::Alias(ComponentAlias::CoreInstanceExport {
            instance_index: shim_instance,
            name: "$imports",
            ..
        }) = &items[table_at]
        else {
            return Ok(None);
        };
        let shim_instance = *shim_instance;
        let Some((_, Instance::Instantiate { module_index, args })) = instance(shim_instance)
        else {
            return Ok(None);
        };
        let shim_module = *module_index;
        if !args.is_empty() || shim_module == fixup_module {
            return Ok(None);
        }

        // The memory every lowering uses, and the main instance it is from.
        let Some(memory_at) = position(Def::CoreMemory(0)) else {
            return Ok(None);
        };
        if count(|d| matches!(d, Def::CoreMemory(_))) != 1 {
            return Ok(None);
        }
        let Item::Alias(ComponentAlias::CoreInstanceExport {
            instance_index: main_instance,
            name: memory_export,
            ..
        }) = &items[memory_at]
        else {
            return Ok(None);
        };
        let Some((main_instance_at, Instance::Instantiate { module_index, args })) =
            instance(*main_instance)
        else {
            return Ok(None);
        };
        let main_module = *module_index;
        if args.iter().any(|arg| arg.name == MEMORY_MODULE)
            || [shim_module, fixup_module].contains(&main_module)
        {
            return Ok(None);
        }

        // Each shim function: aliased once from the shim, and exported to
        // the fixup as a lowering that needs nothing but the memory.
        let mut lowerings = Vec::new();
        let mut seen = HashSet::new();
        for (at, item) in items.iter().enumerate() {
            let Item::Alias(ComponentAlias::CoreInstanceExport {
                kind,
                instance_index,
                name,
            }) = item
            else {
                continue;
            };
            if *instance_index != shim_instance || at == table_at {
                continue;
            }
            let (ExternalKind::Func, Some(&lowering), true) =
                (kind, lowered.get(*name), seen.insert(*name))
            else {
                return Ok(None);
            };
            let Def::CoreFunc(shim_func) = defs[at] else {
                return Ok(None);
            };
            let Some(lower_at) = position(Def::CoreFunc(lowering)) else {
                return Ok(None);
            };
            let Item::Canon(CanonicalFunction::Lower {
                func_index,
                options,
            }) = &items[lower_at]
            else {
                return Ok(None);
            };
            let memory_only = options.iter().all(|option| {
                matches!(
                    option,
                    CanonicalOption::Memory(0)
                        | CanonicalOption::UTF8
                        | CanonicalOption::UTF16
                        | CanonicalOption::CompactUTF16
                )
            });
            if !memory_only || lower_at < memory_at {
                return Ok(None);
            }
            let Some(func_def) = position(Def::ComponentFunc(*func_index)) else {
                return Ok(None);
            };
            // Another name for the shim function, from the instance that
            // passes it to the main module.
            let stand_in = items[..lower_at].iter().enumerate().find_map(|(i, item)| {
                let (Item::Instance(Instance::FromExports(exports)), Def::CoreInstance(index)) =
                    (item, defs[i])
                else {
                    return None;
                };
                exports
                    .iter()
                    .find(|e| e.kind == ExternalKind::Func && e.index == shim_func)
                    .filter(|_| index != fixup_args)
                    .map(|e| (index, e.name.to_string()))
            });
            let Some(stand_in) = stand_in else {
                return Ok(None);
            };
            lowerings.push(Lowering {
                shim_alias: at,
                lower: lower_at,
                func: *func_index,
                func_def,
                options: options.to_vec(),
                stand_in,
            });
        }
        if seen.len() != lowered.len() {
            return Ok(None);
        }
        let Some(first) = lowerings.iter().map(|l| l.shim_alias).min() else {
            return Ok(None);
        };

        // Nothing but the fixup may use the fixup's instances or module, or
        // the shim instance other than through its functions and table.
        for (at, item) in items.iter().enumerate() {
            match item {
                Item::Instance(Instance::Instantiate { module_index, args }) if at != fixup_at => {
                    let uses_fixup = *module_index == fixup_module;
                    let uses_shim = *module_index == shim_module
                        && defs[at] != Def::CoreInstance(shim_instance);
                    let bad_arg = args.iter().any(|arg| {
                        [shim_instance, fixup_args, fixup_instance].contains(&arg.index)
                    });
                    if uses_fixup || uses_shim || bad_arg {
                        return Ok(None);
                    }
                }
                Item::Alias(ComponentAlias::CoreInstanceExport { instance_index, .. })
                    if [fixup_args, fixup_instance].contains(instance_index) =>
                {
                    return Ok(None);
                }
                _ => {}
            }
        }

        // Component functions defined after the first shim function move up
        // to it: between the two, nothing else may define one (their indices
        // then stay), nor any component instance they could come from.
        let mut moved: Vec<usize> = lowerings
            .iter()
            .map(|l| l.func_def)
            .filter(|&at| at > first)
            .collect();
        moved.sort_unstable();
        moved.dedup();
        if let Some(&last) = moved.last() {
            for at in first..=last {
                let allowed = match (&items[at], defs[at]) {
                    (Item::Raw(id, _), _) => matches!(id, 0 | 3 | 7),
                    (Item::Alias(ComponentAlias::InstanceExport { kind, .. }), def) => {
                        *kind != ComponentExternalKind::Instance
                            && (!matches!(def, Def::ComponentFunc(_)) || moved.contains(&at))
                    }
                    (_, Def::ComponentFunc(_)) => false,
                    _ => true,
                };
                if !allowed {
                    return Ok(None);
                }
            }
            for &at in &moved {
                let Item::Alias(ComponentAlias::InstanceExport { .. }) = &items[at] else {
                    return Ok(None);
                };
            }
        }

        let (Some(main_at), Some(shim_at), Some(fixup_module_at)) = (
            position(Def::Module(main_module)),
            position(Def::Module(shim_module)),
            position(Def::Module(fixup_module)),
        ) else {
            return Ok(None);
        };
        let (Item::Module(main), Item::Module(_)) = (&items[main_at], &items[shim_at]) else {
            return Ok(None);
        };
        let Some((main_bytes, memory_bytes)) = import_memory(main, memory_export)? else {
            return Ok(None);
        };
        Ok(Some(Plan {
            main_module: main_at,
            shim_module: shim_at,
            fixup_module: fixup_module_at,
            fixup_index: fixup_module,
            main_instance: main_instance_at,
            shim_instance,
            dropped: [args_at, fixup_at, memory_at, table_at].into(),
            lowerings,
            first,
            moved,
            main_bytes,
            memory_bytes,
        }))
    }

    fn emit(&self, items: &[Item<'_>]) -> Result<Vec<u8>, wasm_encoder::reencode::Error> {
        // The fixup module goes, so modules after it move down one.
        let module_index = |index: u32| {
            if index > self.fixup_index {
                index - 1
            } else {
                index
            }
        };
        let mut out = Emitter::default();
        for (at, item) in items.iter().enumerate() {
            if self.dropped.contains(&at) || at == self.fixup_module || self.moved.contains(&at) {
                continue;
            }
            if at == self.first {
                out.alias(Alias::CoreInstanceExport {
                    instance: self.shim_instance,
                    kind: ExportKind::Memory,
                    name: MEMORY_NAME,
                });
                for &moved in &self.moved {
                    let Item::Alias(alias) = &items[moved] else {
                        unreachable!("Plan::find keeps only aliases in `moved`");
                    };
                    out.alias(RoundtripReencoder.component_alias(alias.clone())?);
                }
            }
            if let Some(lowering) = self.lowerings.iter().find(|l| l.shim_alias == at) {
                let options: Vec<_> = lowering
                    .options
                    .iter()
                    .map(|o| RoundtripReencoder.canonical_option(*o))
                    .collect::<Result<_, _>>()?;
                out.canon().lower(lowering.func, options);
                continue;
            }
            if let Some(lowering) = self.lowerings.iter().find(|l| l.lower == at) {
                out.alias(Alias::CoreInstanceExport {
                    instance: lowering.stand_in.0,
                    kind: ExportKind::Func,
                    name: &lowering.stand_in.1,
                });
                continue;
            }
            match item {
                Item::Raw(id, data) => out.raw(*id, data),
                Item::Module(bytes) => {
                    let bytes: &[u8] = if at == self.main_module {
                        &self.main_bytes
                    } else if at == self.shim_module {
                        &self.memory_bytes
                    } else {
                        bytes
                    };
                    out.raw(wasm_encoder::ComponentSectionId::CoreModule as u8, bytes);
                }
                Item::Instance(Instance::Instantiate {
                    module_index: index,
                    args,
                }) => {
                    let mut args: Vec<(&str, ModuleArg)> = args
                        .iter()
                        .map(|arg| (arg.name, ModuleArg::Instance(arg.index)))
                        .collect();
                    if at == self.main_instance {
                        args.push((MEMORY_MODULE, ModuleArg::Instance(self.shim_instance)));
                    }
                    out.instances().instantiate(module_index(*index), args);
                }
                Item::Instance(instance) => {
                    RoundtripReencoder.parse_instance(out.instances(), instance.clone())?;
                }
                Item::Alias(alias) => out.alias(RoundtripReencoder.component_alias(alias.clone())?),
                Item::Canon(function) => {
                    RoundtripReencoder.parse_component_canonical(out.canon(), function.clone())?;
                }
            }
        }
        Ok(out.finish())
    }
}

/// The main module with its one memory imported from [`MEMORY_MODULE`], and
/// a module that defines that memory and exports it; `None` when the module
/// imports a memory already, defines more or fewer than one, or does not
/// export it as `export`.
type Modules = (Vec<u8>, Vec<u8>);
fn import_memory(module: &[u8], export: &str) -> Result<Option<Modules>, String> {
    let sections = top_level(module)?;
    let mut memory = None;
    let mut exported = false;
    for section in &sections {
        match section {
            Payload::ImportSection(reader) => {
                for import in reader.clone().into_imports() {
                    if matches!(import.map_err(|e| e.to_string())?.ty, TypeRef::Memory(_)) {
                        return Ok(None);
                    }
                }
            }
            Payload::MemorySection(reader) => {
                if reader.count() != 1 {
                    return Ok(None);
                }
                memory = Some(
                    reader
                        .clone()
                        .into_iter()
                        .next()
                        .transpose()
                        .map_err(|e| e.to_string())?,
                );
            }
            Payload::ExportSection(reader) => {
                for item in reader.clone() {
                    let item = item.map_err(|e| e.to_string())?;
                    if item.name == export && item.kind == ExternalKind::Memory && item.index == 0 {
                        exported = true;
                    }
                }
            }
            _ => {}
        }
    }
    let (Some(Some(memory)), true) = (memory, exported) else {
        return Ok(None);
    };
    if memory.shared
        || !sections
            .iter()
            .any(|s| matches!(s, Payload::ImportSection(_)))
    {
        return Ok(None);
    }
    let memory = RoundtripReencoder
        .memory_type(memory)
        .map_err(|e| e.to_string())?;

    let mut main = wasm_encoder::Module::new();
    for section in &sections {
        match section {
            Payload::ImportSection(reader) => {
                let mut imports = ImportSection::new();
                RoundtripReencoder
                    .parse_import_section(&mut imports, reader.clone())
                    .map_err(|e| e.to_string())?;
                imports.import(MEMORY_MODULE, MEMORY_NAME, memory);
                main.section(&imports);
            }
            Payload::MemorySection(_) => {}
            other => {
                if let Some((id, range)) = other.as_section() {
                    main.section(&RawSection {
                        id,
                        data: &module[range],
                    });
                }
            }
        }
    }

    let mut memory_module = wasm_encoder::Module::new();
    let mut memories = MemorySection::new();
    memories.memory(memory);
    let mut exports = ExportSection::new();
    exports.export(MEMORY_NAME, ExportKind::Memory, 0);
    memory_module.section(&memories).section(&exports);
    Ok(Some((main.finish(), memory_module.finish())))
}

/// Builds a component item by item, starting a new section whenever the
/// kind of item changes.
#[derive(Default)]
struct Emitter {
    component: Component,
    pending: Pending,
}

#[derive(Default)]
enum Pending {
    #[default]
    None,
    Instances(InstanceSection),
    Aliases(ComponentAliasSection),
    Canon(CanonicalFunctionSection),
}

impl Emitter {
    fn flush(&mut self) {
        match std::mem::take(&mut self.pending) {
            Pending::None => {}
            Pending::Instances(s) => {
                self.component.section(&s);
            }
            Pending::Aliases(s) => {
                self.component.section(&s);
            }
            Pending::Canon(s) => {
                self.component.section(&s);
            }
        }
    }

    fn raw(&mut self, id: u8, data: &[u8]) {
        self.flush();
        self.component.section(&RawSection { id, data });
    }

    fn instances(&mut self) -> &mut InstanceSection {
        self.section(Pending::Instances, |p| match p {
            Pending::Instances(s) => Some(s),
            _ => None,
        })
    }

    fn alias(&mut self, alias: Alias<'_>) {
        self.section(Pending::Aliases, |p| match p {
            Pending::Aliases(s) => Some(s),
            _ => None,
        })
        .alias(alias);
    }

    fn canon(&mut self) -> &mut CanonicalFunctionSection {
        self.section(Pending::Canon, |p| match p {
            Pending::Canon(s) => Some(s),
            _ => None,
        })
    }

    /// The pending section of one kind (`open` wraps it, `get` finds it),
    /// after writing out a pending section of another kind.
    fn section<S: Default>(
        &mut self,
        open: fn(S) -> Pending,
        get: fn(&mut Pending) -> Option<&mut S>,
    ) -> &mut S {
        if get(&mut self.pending).is_none() {
            self.flush();
            self.pending = open(S::default());
        }
        get(&mut self.pending).expect("opened just above")
    }

    fn finish(mut self) -> Vec<u8> {
        self.flush();
        self.component.finish()
    }
}
