//! Controls for the native stand-ins of the host imports, for a skill's unit
//! tests (native targets only). All state is per thread: each `#[test]`
//! starts with no fs root, an empty kv store, no logs and no handlers.

use std::path::PathBuf;
use std::rc::Rc;

use crate::http::{Request, Response};
use crate::llm::{Completion, CompletionRequest};
use crate::native::with;
use crate::sql::{QueryResult, Value};
use crate::{Level, SkillError};

/// Grants `fs` on this thread: paths given to [`crate::fs`] resolve inside
/// `dir`, with the host's rules (relative, no `..`, no escape through
/// symlinks).
///
/// Panics if `dir` is not an existing directory, since that is a broken test.
pub fn set_fs_root(dir: impl Into<PathBuf>) {
    let dir = dir.into();
    let root = dir
        .canonicalize()
        .unwrap_or_else(|e| panic!("set_fs_root({}): {e}", dir.display()));
    assert!(
        root.is_dir(),
        "set_fs_root({}): not a directory",
        dir.display()
    );
    with(|state| state.fs_root = Some(root));
}

/// Revokes `fs` on this thread: [`crate::fs`] returns
/// `capability-not-granted` again.
pub fn clear_fs_root() {
    with(|state| state.fs_root = None);
}

/// Empties this thread's kv store.
pub fn clear_kv() {
    with(|state| state.kv.clear());
}

/// The lines logged on this thread since the last call, oldest first.
pub fn take_logs() -> Vec<(Level, String)> {
    with(|state| std::mem::take(&mut state.logs))
}

/// Answers [`crate::http::fetch`] on this thread with `handler`.
pub fn set_http_handler(handler: impl Fn(&Request) -> Result<Response, SkillError> + 'static) {
    with(|state| state.http = Some(Rc::new(handler)));
}

/// Answers [`crate::llm::complete`] on this thread with `handler`.
pub fn set_llm_handler(
    handler: impl Fn(&CompletionRequest) -> Result<Completion, SkillError> + 'static,
) {
    with(|state| state.llm = Some(Rc::new(handler)));
}

/// Answers [`crate::sql::query`] on this thread with `handler` (the
/// statement and its parameters).
pub fn set_sql_handler(
    handler: impl Fn(&str, &[Value]) -> Result<QueryResult, SkillError> + 'static,
) {
    with(|state| state.sql = Some(Rc::new(handler)));
}

/// Runs an async skill's `run` (a world whose `run` is an `async func`) to
/// completion in a native unit test. Natively the host's event loop is
/// not there to wait on: the SDK's imports answer at once, so the future
/// only needs polling until it is ready.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    let mut future = std::pin::pin!(future);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::yield_now();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EntryKind, fs, http, kv, llm, log};

    fn fixture() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "skillhost-sdk-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("a.txt"), "hello\n").unwrap();
        std::fs::write(dir.join("bin"), [0xff, 0xfe]).unwrap();
        std::fs::write(dir.join("sub/b.txt"), "b").unwrap();
        dir
    }

    #[test]
    fn fs_needs_a_root() {
        assert_eq!(
            fs::read_text("a.txt").unwrap_err().code,
            "capability-not-granted"
        );
    }

    #[test]
    fn fs_reads_inside_the_root_with_host_rules() {
        let dir = fixture();
        set_fs_root(&dir);
        assert_eq!(fs::read_text("a.txt").unwrap(), "hello\n");
        assert_eq!(fs::read_text("./sub/b.txt").unwrap(), "b");
        assert_eq!(fs::read_file("bin").unwrap(), [0xff, 0xfe]);
        assert_eq!(fs::read_text("bin").unwrap_err().code, "invalid-utf8");
        assert_eq!(fs::read_text("missing").unwrap_err().code, "not-found");
        assert_eq!(fs::read_text("sub").unwrap_err().code, "is-a-directory");
        assert_eq!(fs::read_text("../x").unwrap_err().code, "invalid-path");
        assert_eq!(
            fs::read_text("sub/../a.txt").unwrap_err().code,
            "invalid-path"
        );
        assert_eq!(
            fs::read_text("/etc/hostname").unwrap_err().code,
            "invalid-path"
        );
        let names: Vec<_> = fs::list_dir("")
            .unwrap()
            .into_iter()
            .map(|e| (e.name, e.kind == EntryKind::Directory))
            .collect();
        assert_eq!(
            names,
            [
                ("a.txt".to_string(), false),
                ("bin".to_string(), false),
                ("sub".to_string(), true)
            ]
        );
        clear_fs_root();
        assert_eq!(
            fs::read_text("a.txt").unwrap_err().code,
            "capability-not-granted"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn fs_refuses_symlinks_that_leave_the_root() {
        let dir = fixture();
        std::os::unix::fs::symlink("/etc", dir.join("escape")).unwrap();
        set_fs_root(&dir);
        assert_eq!(
            fs::read_text("escape/hostname").unwrap_err().code,
            "invalid-path"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn kv_is_a_sorted_map_per_thread() {
        kv::set("b", b"2").unwrap();
        kv::set_text("a", "1").unwrap();
        kv::set("c/x", b"3").unwrap();
        assert_eq!(kv::get("b").unwrap().as_deref(), Some(&b"2"[..]));
        assert_eq!(kv::get_text("a").unwrap().as_deref(), Some("1"));
        assert_eq!(kv::get("nope").unwrap(), None);
        assert_eq!(kv::list_keys("").unwrap(), ["a", "b", "c/x"]);
        assert_eq!(kv::list_keys("c/").unwrap(), ["c/x"]);
        kv::delete("b").unwrap();
        kv::delete("b").unwrap();
        assert_eq!(kv::list_keys("").unwrap(), ["a", "c/x"]);
        assert_eq!(kv::get(&"k".repeat(1025)).unwrap_err().code, "invalid-key");
        assert_eq!(
            kv::set("big", &vec![0; (1 << 20) + 1]).unwrap_err().code,
            "too-large"
        );
        clear_kv();
        assert!(kv::list_keys("").unwrap().is_empty());
        std::thread::spawn(|| assert!(kv::list_keys("").unwrap().is_empty()))
            .join()
            .unwrap();
    }

    #[test]
    fn logs_are_kept_for_the_test() {
        log::info("one");
        log::warn(format!("two {}", 2));
        assert_eq!(
            take_logs(),
            [
                (Level::Info, "one".to_string()),
                (Level::Warn, "two 2".to_string())
            ]
        );
        assert!(take_logs().is_empty());
    }

    #[test]
    fn http_and_llm_use_the_installed_handlers() {
        assert_eq!(
            http::get("https://example.org").unwrap_err().code,
            "capability-not-granted"
        );
        assert_eq!(
            llm::prompt("s", "u").unwrap_err().code,
            "capability-not-granted"
        );
        set_http_handler(|request| {
            Ok(Response {
                status: 200,
                headers: Vec::new(),
                body: request.url.clone().into_bytes(),
            })
        });
        assert_eq!(
            http::get("https://example.org").unwrap().body,
            b"https://example.org"
        );
        set_llm_handler(|request| {
            Ok(Completion {
                content: request.messages[1].content.to_uppercase(),
                model: "test/echo".into(),
                input_tokens: 1,
                output_tokens: 1,
            })
        });
        assert_eq!(llm::prompt("s", "hi").unwrap().content, "HI");
    }
}
