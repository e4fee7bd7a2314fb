//! Native stand-ins for the host imports, so a skill's logic runs under
//! `cargo test` without a Wasm runtime. They follow the host's rules and
//! error codes (see `host/runtime/src/capabilities/`); state is per thread,
//! so each `#[test]` starts from nothing.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};
use std::rc::Rc;

use crate::http::{Request, Response};
use crate::llm::{Completion, CompletionRequest};
use crate::sql::{QueryResult, Value};
use crate::{DirEntry, EntryKind, Level, SkillError};

const MAX_KEY_BYTES: usize = 1024;
const MAX_VALUE_BYTES: usize = 1 << 20;

pub(crate) type HttpHandler = Rc<dyn Fn(&Request) -> Result<Response, SkillError>>;
pub(crate) type LlmHandler = Rc<dyn Fn(&CompletionRequest) -> Result<Completion, SkillError>>;
pub(crate) type SqlHandler = Rc<dyn Fn(&str, &[Value]) -> Result<QueryResult, SkillError>>;

#[derive(Default)]
pub(crate) struct State {
    pub(crate) fs_root: Option<PathBuf>,
    pub(crate) kv: BTreeMap<String, Vec<u8>>,
    pub(crate) logs: Vec<(Level, String)>,
    pub(crate) http: Option<HttpHandler>,
    pub(crate) llm: Option<LlmHandler>,
    pub(crate) sql: Option<SqlHandler>,
}

thread_local! {
    static STATE: RefCell<State> = RefCell::new(State::default());
}

pub(crate) fn with<T>(f: impl FnOnce(&mut State) -> T) -> T {
    STATE.with(|state| f(&mut state.borrow_mut()))
}

fn not_granted(capability: &str, how: &str) -> SkillError {
    SkillError::new(
        "capability-not-granted",
        format!("capability `{capability}` is not available in this native test; {how}"),
    )
}

pub(crate) fn level_name(level: Level) -> &'static str {
    match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

pub(crate) fn log(level: Level, message: &str) {
    eprintln!("[{}] {message}", level_name(level));
    with(|state| state.logs.push((level, message.to_string())));
}

fn fs_root() -> Result<PathBuf, SkillError> {
    with(|state| state.fs_root.clone())
        .ok_or_else(|| not_granted("fs", "call skillhost_sdk::testing::set_fs_root(dir) first"))
}

/// The host's path rules: relative, `/`-separated, no `..`, and the
/// resolved path (symlinks followed) must stay inside the root.
fn resolve(path: &str) -> Result<PathBuf, SkillError> {
    let root = fs_root()?;
    let mut full = root.clone();
    for component in Path::new(path).components() {
        match component {
            Component::Normal(part) => full.push(part),
            Component::CurDir => {}
            Component::ParentDir => {
                return Err(SkillError::new(
                    "invalid-path",
                    format!(
                        "`{path}`: `..` is not allowed; paths are relative to the granted directory"
                    ),
                ));
            }
            Component::RootDir | Component::Prefix(_) => {
                return Err(SkillError::new(
                    "invalid-path",
                    format!(
                        "`{path}`: absolute paths are not allowed; paths are relative to the granted directory"
                    ),
                ));
            }
        }
    }
    let resolved = full.canonicalize().map_err(|e| io_error(path, e))?;
    if !resolved.starts_with(&root) {
        return Err(SkillError::new(
            "invalid-path",
            format!("`{path}` leads outside the granted directory"),
        ));
    }
    Ok(resolved)
}

fn io_error(path: &str, e: std::io::Error) -> SkillError {
    let code = match e.kind() {
        ErrorKind::NotFound => "not-found",
        ErrorKind::PermissionDenied => "permission-denied",
        _ => "io-error",
    };
    SkillError::new(code, format!("`{path}`: {e}"))
}

pub(crate) fn fs_read_file(path: &str) -> Result<Vec<u8>, SkillError> {
    let full = resolve(path)?;
    if full.is_dir() {
        return Err(SkillError::new(
            "is-a-directory",
            format!("`{path}` is a directory; use list-dir"),
        ));
    }
    std::fs::read(&full).map_err(|e| io_error(path, e))
}

pub(crate) fn fs_read_text(path: &str) -> Result<String, SkillError> {
    let bytes = fs_read_file(path)?;
    String::from_utf8(bytes).map_err(|e| {
        SkillError::new(
            "invalid-utf8",
            format!(
                "`{path}` is not UTF-8 text (at byte {}); use read-file",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

pub(crate) fn fs_list_dir(path: &str) -> Result<Vec<DirEntry>, SkillError> {
    let full = resolve(path)?;
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(&full).map_err(|e| io_error(path, e))? {
        let entry = entry.map_err(|e| io_error(path, e))?;
        let meta = entry.metadata().map_err(|e| io_error(path, e))?;
        entries.push(DirEntry {
            name: entry.file_name().to_string_lossy().into_owned(),
            kind: if meta.is_dir() {
                EntryKind::Directory
            } else {
                EntryKind::File
            },
            size: meta.len(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

fn check_key(key: &str) -> Result<(), SkillError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(SkillError::new(
            "invalid-key",
            format!("keys are at most {MAX_KEY_BYTES} bytes"),
        ));
    }
    Ok(())
}

pub(crate) fn kv_get(key: &str) -> Result<Option<Vec<u8>>, SkillError> {
    check_key(key)?;
    Ok(with(|state| state.kv.get(key).cloned()))
}

pub(crate) fn kv_set(key: &str, value: &[u8]) -> Result<(), SkillError> {
    check_key(key)?;
    if value.len() > MAX_VALUE_BYTES {
        return Err(SkillError::new(
            "too-large",
            format!("values are at most {MAX_VALUE_BYTES} bytes"),
        ));
    }
    with(|state| state.kv.insert(key.to_string(), value.to_vec()));
    Ok(())
}

pub(crate) fn kv_delete(key: &str) -> Result<(), SkillError> {
    check_key(key)?;
    with(|state| state.kv.remove(key));
    Ok(())
}

pub(crate) fn kv_list_keys(prefix: &str) -> Result<Vec<String>, SkillError> {
    check_key(prefix)?;
    Ok(with(|state| {
        state
            .kv
            .range(prefix.to_string()..)
            .take_while(|(key, _)| key.starts_with(prefix))
            .map(|(key, _)| key.clone())
            .collect()
    }))
}

pub(crate) fn http_fetch(request: &Request) -> Result<Response, SkillError> {
    // Cloned out so the handler may itself use the SDK (log, kv…).
    let handler = with(|state| state.http.clone()).ok_or_else(|| {
        not_granted(
            "http",
            "install a handler with skillhost_sdk::testing::set_http_handler",
        )
    })?;
    handler(request)
}

pub(crate) fn llm_complete(request: &CompletionRequest) -> Result<Completion, SkillError> {
    let handler = with(|state| state.llm.clone()).ok_or_else(|| {
        not_granted(
            "llm",
            "install a handler with skillhost_sdk::testing::set_llm_handler",
        )
    })?;
    handler(request)
}

/// A streamed completion's start: refused at once without a handler, as
/// the host refuses it without a grant; otherwise the handler's answer is
/// what the stream ends with.
#[cfg(feature = "async")]
pub(crate) fn llm_stream(
    request: &CompletionRequest,
) -> Result<Result<Completion, SkillError>, SkillError> {
    let handler = with(|state| state.llm.clone()).ok_or_else(|| {
        not_granted(
            "llm",
            "install a handler with skillhost_sdk::testing::set_llm_handler",
        )
    })?;
    Ok(handler(request))
}

pub(crate) fn sql_query(statement: &str, params: &[Value]) -> Result<QueryResult, SkillError> {
    let handler = with(|state| state.sql.clone()).ok_or_else(|| {
        not_granted(
            "sql",
            "install a handler with skillhost_sdk::testing::set_sql_handler",
        )
    })?;
    handler(statement, params)
}
