//! A run's scenario file written back from the text its provenance keeps
//! (`Provenance::scenario_text`: a scenario composed over MCP, which is no
//! operator's file). The file is kept under its SHA-256; where it is
//! missing (a worker on another machine, a directory cleaned up), every
//! process that loads the run's scenario (a worker, a resume, an answer, a
//! fork, an export) writes it back first, so the run goes on wherever its
//! store is.

use std::path::Path;

use skillhost_store::RunRow;

/// Writes `run`'s scenario file from its provenance's text when the file is
/// missing; does nothing when it exists or the run keeps no text (the
/// loader then reports a missing file as it does for any). Only a file
/// named by its own SHA-256 is written, with exactly that text: a text that
/// does not match its file's name is refused, so no other file is ever
/// created or replaced.
pub fn restore_scenario_file(run: &RunRow) -> Result<(), String> {
    let text = run
        .provenance
        .as_ref()
        .and_then(|p| p.scenario_text.as_deref());
    restore(&run.id, Path::new(&run.scenario_path), text)
}

fn restore(id: &str, path: &Path, text: Option<&str>) -> Result<(), String> {
    let Some(text) = text else {
        return Ok(());
    };
    if path.exists() {
        return Ok(());
    }
    let digest = skillhost_runtime::cache::sha256_hex(text.as_bytes());
    if path.file_name().and_then(|n| n.to_str()) != Some(&format!("{digest}.toml")) {
        return Err(format!(
            "run `{id}`: its kept scenario text (SHA-256 {digest}) is not the file it names, \
             `{}`; the run cannot be loaded here",
            path.display()
        ));
    }
    keep_text(path, text).map_err(|e| {
        format!(
            "run `{id}`: cannot write its scenario back to `{}` from the text the run keeps: {e}",
            path.display()
        )
    })
}

/// Keeps `text` at `path` (a scenario named by its own SHA-256): nothing
/// when the file holds it already; else written to a temporary file of
/// its own, synced, and renamed into place, so that a reader never sees
/// half of it and two processes keeping the same text at once both
/// succeed.
pub fn keep_text(path: &Path, text: &str) -> std::io::Result<()> {
    if std::fs::read(path).is_ok_and(|bytes| bytes == text.as_bytes()) {
        return Ok(());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let mut temp = tempfile::Builder::new().prefix(".keep").tempfile_in(dir)?;
    std::io::Write::write_all(&mut temp, text.as_bytes())?;
    temp.as_file().sync_all()?;
    temp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_kept_file_is_written_back_and_only_under_its_own_digest() {
        let dir = tempfile::tempdir().unwrap();
        let text = "[scenario]\nname = \"composed-x\"\n";
        let digest = skillhost_runtime::cache::sha256_hex(text.as_bytes());
        let path = dir.path().join("kept").join(format!("{digest}.toml"));
        restore("r1", &path, Some(text)).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        // There already: left as it is.
        restore("r1", &path, Some(text)).unwrap();
        // A text that is not its file's: refused, nothing written.
        let other = dir.path().join("scenario.toml");
        let error = restore("r1", &other, Some(text)).unwrap_err();
        assert!(error.contains("is not the file it names"), "{error}");
        assert!(!other.exists());
        // No text kept: nothing to do, the loader reports the missing file.
        restore("r1", &dir.path().join("gone.toml"), None).unwrap();
    }
}
