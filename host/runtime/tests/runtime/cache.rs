//! The compiled-component cache: an entry is used only for the component it
//! was compiled from and only while its compiled code is unchanged; any
//! other entry is recompiled and replaced, never deserialized.

use std::path::{Path, PathBuf};

use skillhost_runtime::LoadSource;

/// Every cache entry under `dir`.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == "cwasm") {
                found.push(path);
            }
        }
    }
    found
}

/// Loads `bytes` in a new runtime (a new process, in effect) on `cache`.
fn load_source(cache: &Path, bytes: &[u8]) -> LoadSource {
    skillhost_tests::runtime(cache)
        .load_bytes(bytes.to_vec(), "echo.wasm")
        .unwrap()
        .load_stats
        .source
}

#[test]
fn a_tampered_cache_entry_is_recompiled_and_replaced_not_executed() {
    let cache = tempfile::tempdir().unwrap();
    let echo = std::fs::read(skillhost_tests::dist("echo")).unwrap();
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    let [entry] = entries(cache.path()).try_into().unwrap();
    let written = std::fs::read(&entry).unwrap();

    // One flipped bit in the compiled code.
    let mut tampered = written.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 0x01;
    std::fs::write(&entry, &tampered).unwrap();
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    // Rewritten as it was, and used again.
    assert_eq!(std::fs::read(&entry).unwrap(), written);
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Cache);

    // Another component's entry under this one's name.
    let fail = std::fs::read(skillhost_tests::dist("fail")).unwrap();
    assert_eq!(load_source(cache.path(), &fail), LoadSource::Compiled);
    let fail_entry = entries(cache.path())
        .into_iter()
        .find(|path| *path != entry)
        .unwrap();
    std::fs::copy(&fail_entry, &entry).unwrap();
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    assert_eq!(std::fs::read(&entry).unwrap(), written);

    // An entry without a header (as an older host wrote them).
    let header_end = written.iter().position(|&b| b == b'\n').unwrap();
    std::fs::write(&entry, &written[header_end + 1..]).unwrap();
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    assert_eq!(std::fs::read(&entry).unwrap(), written);
}

/// `load_files`: the distinct files of a list compiled side by side, each
/// answer in the list's order, a file named twice loaded once, a failure
/// reported in its place; and a new process finds them all in the cache.
#[test]
fn load_files_compiles_distinct_files_in_parallel_and_answers_in_order() {
    let cache = tempfile::tempdir().unwrap();
    let echo = skillhost_tests::dist("echo");
    let fail = skillhost_tests::dist("fail");
    let stats = skillhost_tests::dist("text-stats");
    let missing = cache.path().join("missing.wasm");
    let paths = vec![
        echo.clone(),
        fail.clone(),
        missing.clone(),
        echo.clone(),
        stats.clone(),
    ];
    let runtime = skillhost_tests::runtime(cache.path());
    let loaded = runtime.load_files(&paths);
    assert_eq!(loaded.len(), 5);
    let name = |i: usize| loaded[i].as_ref().unwrap().name.clone();
    assert_eq!(name(0), "echo");
    assert_eq!(name(1), "fail");
    assert_eq!(name(3), "echo");
    assert_eq!(name(4), "text-stats");
    assert!(std::sync::Arc::ptr_eq(
        loaded[0].as_ref().unwrap(),
        loaded[3].as_ref().unwrap()
    ));
    let err = loaded[2].as_ref().err().unwrap().to_string();
    assert!(err.contains("missing.wasm"), "{err}");
    for i in [0, 1, 4] {
        assert_eq!(
            loaded[i].as_ref().unwrap().load_stats.source,
            LoadSource::Compiled
        );
    }
    assert_eq!(entries(cache.path()).len(), 3);

    let again = skillhost_tests::runtime(cache.path()).load_files(&[echo, fail, stats]);
    for skill in again {
        assert_eq!(skill.unwrap().load_stats.source, LoadSource::Cache);
    }
}
