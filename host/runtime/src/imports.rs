//! What a component needs from the host, read from its bytes before it is
//! compiled: its top-level imports and whether it uses the component-model
//! async ABI.
//!
//! Compiling a component built by componentize-py or componentize-js takes
//! 10-30 s and up to a gigabyte of memory; a component the host cannot run
//! must be refused before that, in milliseconds, with the fix named. This
//! module walks the component's sections without validating or compiling
//! anything: the core modules inside it (nearly all of its bytes) are skipped
//! by their length, so the scan costs microseconds for a 20 MB component and
//! stays on the cached path too.
//!
//! It refuses only what it can name a fix for:
//! - an import of `wasi:http` (a default componentize-js build adds it for
//!   its `fetch` and `fetch-event` features), of a WASI 0.3 release other
//!   than the one linked (`0.3.0`, wasmtime-wasi's `p3`), of another WASI
//!   package than the ones wasmtime-wasi provides here, or of an interface
//!   of the skill contract that does not exist;
//! - the component model's cooperative or shared-everything threads
//!   (`thread.new-indirect`, `thread.spawn-ref`, ...), which no engine here
//!   runs.
//!
//! It also tells which [`Abi`] the component's calls use: the async one as
//! soon as any lift or lower is async or any async built-in appears
//! (`task.return`, `waitable-set.wait`, a stream or a future), or it imports
//! a WASI 0.3 interface (linked on the concurrent engine only); such a
//! component is compiled for, and called on, the concurrent engine.
//!
//! Anything else a component imports (a package of type-only interfaces, say)
//! is judged after compiling, from the component's types ([`crate::skill`]).
//! Must not: compile, validate, or read a core module's contents.

use crate::capabilities::{CONTRACT_PACKAGE, Capability};
use crate::engine::Abi;
use crate::error::LoadError;

/// The WASI 0.2 packages the host links (through wasmtime-wasi); any of
/// their interfaces the linker lacks is named when the component is linked.
const WASI_PACKAGES: [&str; 6] = ["cli", "clocks", "filesystem", "io", "random", "sockets"];

/// The WASI 0.3 release the host links (wasmtime-wasi's `p3`), for async
/// components, and its packages (0.3 has no `wasi:io`: streams and futures
/// are the component model's own).
const WASI_03_VERSION: &str = "0.3.0";
const WASI_03_PACKAGES: [&str; 5] = ["cli", "clocks", "filesystem", "random", "sockets"];

/// Checks, before compiling, that the component in `bytes` imports nothing
/// the host cannot provide and uses no threads; says which ABI its calls
/// use. `origin` names it in errors.
pub fn check(bytes: &[u8], origin: &str) -> Result<Abi, LoadError> {
    let scan = scan(bytes).map_err(|e| LoadError::Compile {
        origin: origin.to_string(),
        message: e,
    })?;
    if let Some(what) = scan.threads {
        return Err(LoadError::Threads {
            origin: origin.to_string(),
            what,
        });
    }
    for import in &scan.imports {
        if let Some(fix) = unprovided(import) {
            return Err(LoadError::Unprovided {
                origin: origin.to_string(),
                import: import.clone(),
                fix,
            });
        }
    }
    // WASI 0.3 is linked on the concurrent engine only; a component that
    // imports it with nothing but synchronous calls (`wasi:random` alone,
    // say) is called there too.
    let abi = if scan.imports.iter().any(|i| is_wasi_03(i)) {
        Abi::Async
    } else {
        scan.abi()
    };
    if abi == Abi::Sync
        && let Some(import) = scan.imports.iter().find(|i| is_streaming(i))
    {
        let instead = if import.contains("/http-stream@") {
            "`http.fetch`"
        } else {
            "`llm.complete`"
        };
        return Err(LoadError::Unprovided {
            origin: origin.to_string(),
            import: import.clone(),
            fix: format!(
                "its stream and future are for async (WASI 0.3) components only, and this \
                 one is synchronous (WASI 0.2): make the world's `run` an `async func` and \
                 build it again (Rust: the SDK's `async` feature, as `host skill new --lang \
                 rust --async` sets up), or use {instead}"
            ),
        });
    }
    Ok(abi)
}

/// What [`scan`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// The names of the outermost component's imports, in order.
    pub imports: Vec<String>,
    /// The first use of the async ABI, described (`an async lift`,
    /// `task.return`), if any.
    pub async_abi: Option<String>,
    /// The first use of the component model's threads, described
    /// (`the built-in \`thread.new-indirect\``), if any.
    pub threads: Option<String>,
}

impl Scan {
    /// The ABI the component's calls use.
    pub fn abi(&self) -> Abi {
        if self.async_abi.is_some() {
            Abi::Async
        } else {
            Abi::Sync
        }
    }
}

/// Walks the component's sections, nested components included, skipping
/// every core module by its length.
pub fn scan(bytes: &[u8]) -> Result<Scan, String> {
    use wasmparser::{Chunk, Parser, Payload};

    let mut found = Scan::default();
    let mut parser = Parser::new(0);
    let mut parents = Vec::new();
    let mut pos = 0usize;
    loop {
        let (payload, consumed) = match parser.parse(&bytes[pos..], true) {
            Ok(Chunk::Parsed { payload, consumed }) => (payload, consumed),
            Ok(Chunk::NeedMoreData(_)) => return Err(format!("it ends early, at byte {pos}")),
            Err(e) => return Err(e.to_string()),
        };
        pos += consumed;
        match payload {
            Payload::ModuleSection {
                unchecked_range, ..
            } => {
                // The parent has already counted the module's bytes; jump
                // over them instead of reading them.
                pos = unchecked_range.end.min(bytes.len());
            }
            Payload::ComponentSection { parser: nested, .. } => {
                parents.push(std::mem::replace(&mut parser, nested));
            }
            Payload::ComponentImportSection(reader) if parents.is_empty() => {
                for import in reader {
                    let import = import.map_err(|e| e.to_string())?;
                    found.imports.push(import.name.name.to_string());
                }
            }
            Payload::ComponentCanonicalSection(reader) if found.threads.is_none() => {
                for function in reader {
                    let function = function.map_err(|e| e.to_string())?;
                    match async_use(&function) {
                        Some(Use::Async(what)) => {
                            found.async_abi.get_or_insert(what);
                        }
                        Some(Use::Threads(what)) => {
                            found.threads = Some(what);
                            break;
                        }
                        None => {}
                    }
                }
            }
            Payload::End(_) => match parents.pop() {
                Some(parent) => parser = parent,
                None => return Ok(found),
            },
            _ => {}
        }
    }
}

/// What a canonical function asks of the engine beyond the synchronous ABI.
enum Use {
    /// The async ABI, described.
    Async(String),
    /// Threads, described.
    Threads(String),
}

/// How `function` uses the async ABI or threads, if it does.
fn async_use(function: &wasmparser::CanonicalFunction) -> Option<Use> {
    use wasmparser::{CanonicalFunction as F, CanonicalOption as O};
    let is_async = |options: &[O]| {
        options
            .iter()
            .any(|o| matches!(o, O::Async | O::Callback(_)))
    };
    let builtin = |other: &F| {
        // `TaskReturn { .. }` → `task.return`, as the WIT text format
        // names the built-ins.
        let debug = format!("{other:?}");
        let name = debug
            .split(|c: char| !c.is_ascii_alphanumeric())
            .next()
            .unwrap_or_default()
            .to_string();
        format!("the built-in `{}`", builtin_name(&name))
    };
    match function {
        F::Lift { options, .. } if is_async(options) => Some(Use::Async("an async lift".into())),
        F::Lower { options, .. } if is_async(options) => Some(Use::Async("an async lower".into())),
        F::Lift { .. }
        | F::Lower { .. }
        | F::ResourceNew { .. }
        | F::ResourceDrop { .. }
        | F::ResourceRep { .. } => None,
        // `thread.yield` is the async ABI's yield; every other `thread.*`
        // is a thread.
        F::ThreadSpawnRef { .. }
        | F::ThreadSpawnIndirect { .. }
        | F::ThreadAvailableParallelism
        | F::ThreadIndex
        | F::ThreadNewIndirect { .. }
        | F::ThreadResumeLater
        | F::ThreadSuspend { .. }
        | F::ThreadSuspendThenResume { .. }
        | F::ThreadYieldThenResume { .. } => Some(Use::Threads(builtin(function))),
        other => Some(Use::Async(builtin(other))),
    }
}

/// `TaskReturn` → `task.return`, `WaitableSetNew` → `waitable-set.new`.
fn builtin_name(variant: &str) -> String {
    let mut words = Vec::new();
    let mut word = String::new();
    for c in variant.chars() {
        if c.is_ascii_uppercase() && !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
        word.push(c.to_ascii_lowercase());
    }
    words.push(word);
    match words.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{}.{last}", rest.join("-")),
        None => String::new(),
    }
}

/// Whether `import` is an interface of WASI 0.3 (any 0.3 release).
pub(crate) fn is_wasi_03(import: &str) -> bool {
    import.starts_with("wasi:")
        && import
            .split_once('@')
            .is_some_and(|(_, version)| version.starts_with("0.3"))
}

/// Whether `import` is one of the contract's streaming interfaces, which
/// only the concurrent engine links.
fn is_streaming(import: &str) -> bool {
    crate::capabilities::contract_import(import).is_some_and(|(interface, _)| {
        interface == crate::capabilities::llm::STREAM_INTERFACE
            || interface == crate::capabilities::http::stream::STREAM_INTERFACE
    })
}

/// Why the host cannot provide `import`, with the fix; `None` if it can, or
/// if only the component's types can tell (judged after compiling).
fn unprovided(import: &str) -> Option<String> {
    let (package, rest) = import.split_once('/')?;
    let version = rest.split_once('@').map_or("", |(_, v)| v);
    if let Some(wasi) = package.strip_prefix("wasi:") {
        if version.starts_with("0.3") {
            if version != WASI_03_VERSION {
                return Some(format!(
                    "this host links WASI {WASI_03_VERSION} (and 0.2), not {version}: build \
                     against wasi:*@{WASI_03_VERSION}'s WIT, or against WASI 0.2"
                ));
            }
            if !WASI_03_PACKAGES.contains(&wasi) {
                return Some(format!(
                    "this host provides the WASI {WASI_03_VERSION} packages {} only; remove the \
                     import from the skill's world or disable the toolchain feature that adds it",
                    WASI_03_PACKAGES.map(|p| format!("wasi:{p}")).join(", ")
                ));
            }
            return None;
        }
        if wasi == "http" {
            return Some(
                "a default componentize-js build imports it for `fetch`: rebuild with \
                 `-d http fetch-event` (as `host skill build` does), and reach the web \
                 through skillhost:skill/http, which a scenario grants"
                    .into(),
            );
        }
        if !WASI_PACKAGES.contains(&wasi) {
            return Some(format!(
                "this host provides the WASI 0.2 packages {} only; remove the import from \
                 the skill's world or disable the toolchain feature that adds it",
                WASI_PACKAGES.map(|p| format!("wasi:{p}")).join(", ")
            ));
        }
        return None;
    }
    if package == CONTRACT_PACKAGE {
        let interface = rest.split_once('@').map_or(rest, |(i, _)| i);
        let known = interface == "types"
            || interface == crate::capabilities::llm::STREAM_INTERFACE
            || interface == crate::capabilities::http::stream::STREAM_INTERFACE
            || Capability::from_name(interface).is_some();
        if !known || !version.starts_with("0.1.") {
            return Some(format!(
                "the skill contract has skillhost:skill/{{types,{}}}@0.1; copy wit/skill.wit \
                 from this host into the skill's wit/deps and rebuild",
                Capability::ALL.map(Capability::name).join(",")
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn built_ins_are_named_as_in_wit() {
        assert_eq!(builtin_name("TaskReturn"), "task.return");
        assert_eq!(builtin_name("WaitableSetNew"), "waitable-set.new");
        assert_eq!(builtin_name("Yield"), "yield");
    }

    #[test]
    fn imports_the_host_provides_pass() {
        for import in [
            "wasi:cli/stdout@0.2.0",
            "wasi:io/streams@0.2.6",
            "wasi:sockets/tcp@0.2.3",
            "wasi:cli/stdout@0.3.0",
            "wasi:clocks/monotonic-clock@0.3.0",
            "wasi:random/random@0.3.0",
            "skillhost:skill/log@0.1.0",
            "skillhost:skill/types@0.1.0",
            "skillhost:research/types@0.1.0",
            "my:own/thing",
        ] {
            assert_eq!(unprovided(import), None, "{import}");
        }
    }

    #[test]
    fn imports_it_cannot_provide_name_the_fix() {
        let http = unprovided("wasi:http/types@0.2.3").unwrap();
        assert!(http.contains("-d http fetch-event"), "{http}");
        let rc = unprovided("wasi:cli/stdout@0.3.0-rc-2025-09-16").unwrap();
        assert!(
            rc.contains("links WASI 0.3.0") && rc.contains("not 0.3.0-rc"),
            "{rc}"
        );
        let io = unprovided("wasi:io/streams@0.3.0").unwrap();
        assert!(
            io.contains("WASI 0.3.0 packages") && io.contains("wasi:cli"),
            "{io}"
        );
        let http = unprovided("wasi:http/types@0.3.0").unwrap();
        assert!(http.contains("wasi:random"), "{http}");
        let other = unprovided("wasi:keyvalue/store@0.2.0-draft").unwrap();
        assert!(other.contains("wasi:clocks"), "{other}");
        let contract = unprovided("skillhost:skill/queue@0.1.0").unwrap();
        assert!(contract.contains("wit/skill.wit"), "{contract}");
        let future = unprovided("skillhost:skill/log@0.2.0").unwrap();
        assert!(future.contains("@0.1"), "{future}");
    }

    #[test]
    fn a_component_is_scanned_without_its_modules() {
        let wasm = wat::parse_str(
            r#"(component
                 (import "wasi:http/types@0.2.3" (instance))
                 (core module $m (func (export "f")))
                 (component $inner (import "inner-only" (instance)))
                 (import "skillhost:skill/log@0.1.0" (instance)))"#,
        )
        .unwrap();
        let found = scan(&wasm).unwrap();
        assert_eq!(
            found.imports,
            ["wasi:http/types@0.2.3", "skillhost:skill/log@0.1.0"]
        );
        assert_eq!(found.async_abi, None);
        let err = check(&wasm, "skill.wasm").unwrap_err().to_string();
        assert!(err.contains("skill.wasm"), "{err}");
        assert!(err.contains("wasi:http/types@0.2.3"), "{err}");
        assert!(err.contains("-d http fetch-event"), "{err}");
    }

    #[test]
    fn a_component_importing_wasi_03_is_called_on_the_concurrent_engine() {
        // Nothing async in it but the import: `wasi:random` has synchronous
        // functions, and WASI 0.3 is linked on the concurrent engine only.
        let wasm = wat::parse_str(r#"(component (import "wasi:random/random@0.3.0" (instance)))"#)
            .unwrap();
        assert_eq!(scan(&wasm).unwrap().async_abi, None);
        assert_eq!(check(&wasm, "skill.wasm").unwrap(), Abi::Async);
        let wasm = wat::parse_str(r#"(component (import "wasi:random/random@0.2.6" (instance)))"#)
            .unwrap();
        assert_eq!(check(&wasm, "skill.wasm").unwrap(), Abi::Sync);
    }

    #[test]
    fn truncated_bytes_are_an_error_not_a_panic() {
        let wasm = wat::parse_str("(component (core module (func (export \"f\"))))").unwrap();
        for len in 8..wasm.len() {
            let _ = scan(&wasm[..len]);
        }
        // A module's inside is not read (the compiler judges it), but the
        // component's own structure is.
        assert!(scan(&wasm[..4]).is_err());
        assert!(scan(&wasm[..7]).is_err());
    }
}
