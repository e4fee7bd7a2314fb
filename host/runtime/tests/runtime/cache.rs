//! The compiled-component cache: an entry is used only for the component it
//! was compiled from and only while its compiled code is unchanged; any
//! other entry is recompiled and replaced, never deserialized. The same for
//! the compiled functions a compile reuses: a damaged one compiles again.

use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use skillhost_runtime::LoadSource;

/// Every file under `dir` whose name ends with `.extension`.
fn files(dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else if path.extension().is_some_and(|e| e == extension) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Every compiled component under `dir`.
fn entries(dir: &Path) -> Vec<PathBuf> {
    files(dir, "cwasm")
}

/// Loads `bytes` in a new runtime (a new process, in effect) on `cache`.
fn load(cache: &Path, bytes: &[u8]) -> skillhost_runtime::LoadStats {
    skillhost_tests::runtime(cache)
        .load_bytes(bytes.to_vec(), "echo.wasm")
        .unwrap()
        .load_stats
}

fn load_source(cache: &Path, bytes: &[u8]) -> LoadSource {
    load(cache, bytes).source
}

/// Flips one bit of `path` at `at` in place: same inode, same size, and
/// its modification time put back as it was.
fn flip_in_place(path: &Path, at: u64) {
    let before = std::fs::metadata(path).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x01], at).unwrap();
    file.set_modified(before.modified().unwrap()).unwrap();
}

/// Replaces `path` by a new file (another inode) holding `bytes`.
fn replace(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("replacing");
    std::fs::write(&tmp, bytes).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[test]
fn a_tampered_cache_entry_is_recompiled_and_replaced_not_executed() {
    let cache = tempfile::tempdir().unwrap();
    let echo = std::fs::read(skillhost_tests::dist("echo")).unwrap();
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    let [entry] = entries(cache.path()).try_into().unwrap();
    let meta = entry.with_extension("meta");
    let written = std::fs::read(&entry).unwrap();
    let written_meta = std::fs::read_to_string(&meta).unwrap();
    let len = written.len() as u64;

    // One flipped bit in the compiled code, first and last byte, in place.
    for at in [0, len / 2, len - 1] {
        flip_in_place(&entry, at);
        assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
        // Rewritten as it was, and used again.
        assert_eq!(std::fs::read(&entry).unwrap(), written);
        assert_eq!(load_source(cache.path(), &echo), LoadSource::Cache);
    }
    // The same, as a new file renamed over it.
    let mut tampered = written.clone();
    tampered[len as usize / 3] ^= 0x80;
    replace(&entry, &tampered);
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    assert_eq!(std::fs::read(&entry).unwrap(), written);

    // A flipped character in the recorded artifact digest, or in the
    // recorded component digest: refused either way.
    let digests = written_meta.lines().next().unwrap();
    for at in [digests.len() - 20, "skillhost-cwasm 2 ".len() + 3] {
        let mut text = written_meta.clone().into_bytes();
        text[at] = if text[at] == b'0' { b'1' } else { b'0' };
        replace(&meta, &text);
        assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
        assert_eq!(std::fs::read(&entry).unwrap(), written);
        assert_eq!(load_source(cache.path(), &echo), LoadSource::Cache);
    }

    // Another component's entry under this one's name: its artifact, or
    // its artifact with its meta.
    let fail = std::fs::read(skillhost_tests::dist("fail")).unwrap();
    assert_eq!(load_source(cache.path(), &fail), LoadSource::Compiled);
    let fail_entry = entries(cache.path())
        .into_iter()
        .find(|path| *path != entry)
        .unwrap();
    std::fs::copy(&fail_entry, &entry).unwrap();
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    assert_eq!(std::fs::read(&entry).unwrap(), written);
    std::fs::copy(&fail_entry, &entry).unwrap();
    std::fs::copy(fail_entry.with_extension("meta"), &meta).unwrap();
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    assert_eq!(std::fs::read(&entry).unwrap(), written);

    // An artifact without its meta (a writer that died in between, or an
    // older host's entry): compiled again, never trusted.
    std::fs::remove_file(&meta).unwrap();
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    assert_eq!(std::fs::read(&entry).unwrap(), written);
}

/// A verified artifact is not hashed again while its file stays the same
/// (device, inode, size, times); any write to it changes its change time,
/// which nobody can set back, so the next load hashes it again and refuses
/// it: an in-place edit that keeps the size and the modification time is
/// not executed, nor is a replacement.
#[test]
fn an_entry_checked_once_is_checked_again_after_any_write() {
    let cache = tempfile::tempdir().unwrap();
    let echo = std::fs::read(skillhost_tests::dist("echo")).unwrap();
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    let [entry] = entries(cache.path()).try_into().unwrap();
    let meta = entry.with_extension("meta");
    let written = std::fs::read(&entry).unwrap();
    let len = written.len() as u64;

    // Settled (its change time is old enough): the next hit records the
    // file's identity, the one after trusts it.
    std::thread::sleep(skillhost_runtime::cache::SETTLED + Duration::from_millis(100));
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Cache);
    let recorded = std::fs::read_to_string(&meta).unwrap();
    assert!(
        recorded
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("verified ")),
        "{recorded}"
    );
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Cache);

    // Written in place, same size and modification time: hashed again and
    // refused.
    flip_in_place(&entry, len / 2);
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    assert_eq!(std::fs::read(&entry).unwrap(), written);

    // Settle again, record, then replace with another file of the same size.
    std::thread::sleep(skillhost_runtime::cache::SETTLED + Duration::from_millis(100));
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Cache);
    let mut tampered = written.clone();
    tampered[len as usize - 1] ^= 0x01;
    replace(&entry, &tampered);
    assert_eq!(load_source(cache.path(), &echo), LoadSource::Compiled);
    assert_eq!(std::fs::read(&entry).unwrap(), written);
}

/// Flips the last byte of every function's code in the pack at `path`,
/// read from its index (`skillhost_runtime::cache::functions`: a 34-byte
/// header ending with the count, then 76 bytes per function: key, offset,
/// length, digest).
fn damage_every_function(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let count = u32::from_le_bytes(bytes[30..34].try_into().unwrap()) as usize;
    for i in 0..count {
        let e = &bytes[34 + i * 76..34 + (i + 1) * 76];
        let offset = u64::from_le_bytes(e[32..40].try_into().unwrap());
        let len = u32::from_le_bytes(e[40..44].try_into().unwrap());
        flip_in_place(path, offset + u64::from(len) - 1);
    }
    count
}

/// A compile reuses the functions an earlier compile left in the cache,
/// and refuses those whose bytes were damaged: it compiles them again, and
/// what it compiles is exactly what a compile without them makes.
#[test]
fn a_damaged_compiled_function_is_compiled_again_not_used() {
    let cache = tempfile::tempdir().unwrap();
    let echo = std::fs::read(skillhost_tests::dist("echo")).unwrap();
    let first = load(cache.path(), &echo);
    assert_eq!(first.source, LoadSource::Compiled);
    assert!(first.functions.compiled > 0, "{first:?}");
    let [entry] = entries(cache.path()).try_into().unwrap();
    let written = std::fs::read(&entry).unwrap();

    // Compiled again from the functions: most reused, the same artifact.
    std::fs::remove_file(&entry).unwrap();
    let second = load(cache.path(), &echo);
    assert_eq!(second.source, LoadSource::Compiled);
    assert_eq!(second.functions.refused, 0, "{second:?}");
    assert!(
        second.functions.reused * 2 > first.functions.compiled,
        "{second:?} after {first:?}"
    );
    assert_eq!(std::fs::read(&entry).unwrap(), written);

    // One flipped bit in every function of every pack: not one is used.
    for pack in files(cache.path(), "pack") {
        assert!(damage_every_function(&pack) > 0);
    }
    std::fs::remove_file(&entry).unwrap();
    let third = load(cache.path(), &echo);
    assert_eq!(third.functions.reused, 0, "{third:?}");
    assert!(third.functions.refused > 0, "{third:?}");
    assert_eq!(third.functions.compiled, first.functions.compiled);
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
