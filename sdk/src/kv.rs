//! A key-value store scoped to the namespace the scenario grants
//! (`kv = "NAMESPACE"`). Keys are at most 1024 bytes, values at most 1 MiB.
//!
//! On native targets the store is a map private to the current thread (each
//! `#[test]` starts empty); see [`crate::testing::clear_kv`].

use crate::SkillError;

/// The value stored under `key`, if any.
pub fn get(key: &str) -> Result<Option<Vec<u8>>, SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::kv::get(key);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::kv_get(key);
}

/// Stores `value` under `key`, replacing what was there.
pub fn set(key: &str, value: &[u8]) -> Result<(), SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::kv::set(key, value);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::kv_set(key, value);
}

/// Removes `key`; removing a missing key is not an error.
pub fn delete(key: &str) -> Result<(), SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::kv::delete(key);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::kv_delete(key);
}

/// Keys that start with `prefix`, sorted.
pub fn list_keys(prefix: &str) -> Result<Vec<String>, SkillError> {
    #[cfg(target_arch = "wasm32")]
    return crate::bindings::skillhost::skill::kv::list_keys(prefix);
    #[cfg(not(target_arch = "wasm32"))]
    return crate::native::kv_list_keys(prefix);
}

/// The value under `key` as UTF-8 text; `invalid-utf8` if it is not.
pub fn get_text(key: &str) -> Result<Option<String>, SkillError> {
    match get(key)? {
        None => Ok(None),
        Some(bytes) => String::from_utf8(bytes).map(Some).map_err(|e| {
            SkillError::new(
                "invalid-utf8",
                format!(
                    "value of `{key}` is not UTF-8 text (at byte {})",
                    e.utf8_error().valid_up_to()
                ),
            )
        }),
    }
}

/// Stores `value` (UTF-8 text) under `key`.
pub fn set_text(key: &str, value: &str) -> Result<(), SkillError> {
    set(key, value.as_bytes())
}
