//! Read-only access to the directory the scenario grants (`fs = "DIR"`).
//! Paths are relative to that directory and use `/`; `..` and absolute paths
//! are refused with `invalid-path`.
//!
//! On native targets the root is the directory set with
//! [`crate::testing::set_fs_root`], with the host's path rules and error
//! codes (`not-found`, `invalid-path`, `is-a-directory`, `invalid-utf8`,
//! `capability-not-granted` when no root is set).

use crate::SkillError;
pub use crate::{DirEntry, EntryKind};

/// The whole content of a file.
pub fn read_file(path: &str) -> Result<Vec<u8>, SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::fs::read_file(path);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::fs_read_file(path);
}

/// The content of a UTF-8 text file.
pub fn read_text(path: &str) -> Result<String, SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::fs::read_text(path);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::fs_read_text(path);
}

/// The entries of a directory, sorted by name (`""` is the granted root).
pub fn list_dir(path: &str) -> Result<Vec<DirEntry>, SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::fs::list_dir(path);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::fs_list_dir(path);
}
