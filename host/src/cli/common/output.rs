//! What the command line prints and writes: JSON, text a run or a
//! scenario wrote made safe for a terminal ([`shown`]), progress bars for
//! registry transfers, the run an idempotency key already holds, and a file
//! the user named (`--out`), written safely.

use std::fmt::Display;
use std::io::Write as _;
use std::path::Path;

use skillhost_store::History;

use super::{CliResult, Failure, fetch_run};

/// A progress bar on stderr for registry transfers, when it is a terminal.
pub fn progress() -> std::sync::Arc<dyn skillhost_oci::Progress> {
    use std::io::IsTerminal as _;
    if std::io::stderr().is_terminal() {
        std::sync::Arc::new(TerminalProgress(std::sync::Mutex::new(None)))
    } else {
        std::sync::Arc::new(skillhost_oci::Quiet)
    }
}

struct TerminalProgress(std::sync::Mutex<Option<indicatif::ProgressBar>>);

impl skillhost_oci::Progress for TerminalProgress {
    fn start(&self, what: &str, total: Option<u64>) {
        let bar = match total {
            Some(total) => indicatif::ProgressBar::new(total),
            None => indicatif::ProgressBar::new_spinner(),
        };
        bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        if let Ok(style) = indicatif::ProgressStyle::with_template(
            "{msg:>10} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec}",
        ) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(what.to_string());
        *self.0.lock().expect("progress bar") = Some(bar);
    }

    fn advance(&self, bytes: u64) {
        if let Some(bar) = &*self.0.lock().expect("progress bar") {
            bar.inc(bytes);
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.0.lock().expect("progress bar").take() {
            bar.finish_and_clear();
        }
    }
}

/// Reports that `run_id` already holds `key`, so nothing was started: its
/// id on stdout (as a new run's would be), or `{"run_id", "status",
/// "existing": true}` with `--json`, and a line on stderr saying so.
pub async fn report_existing_run(
    store: &History,
    run_id: &str,
    key: &str,
    json: bool,
) -> CliResult {
    let run = fetch_run(store, run_id).await?;
    if json {
        return print_json(&serde_json::json!({
            "run_id": run.id,
            "status": run.status.as_str(),
            "existing": true,
            "idempotency_key": key,
        }));
    }
    eprintln!(
        "run `{}` ({}) already holds idempotency key `{}`: nothing was started; see it with \
         `host runs show {}`",
        run.id,
        run.status,
        shown(key),
        run.id
    );
    println!("{}", run.id);
    Ok(())
}

/// Prints `value` as pretty JSON on stdout.
pub fn print_json(value: &impl serde::Serialize) -> CliResult {
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Failure::environment(format!("cannot encode JSON: {e}")))?;
    println!("{text}");
    Ok(())
}

/// `text` (a skill's output or error, a model's answer, anything a run or
/// a scenario wrote) as one line for a terminal or a log: every character
/// that could move the cursor, start an escape sequence, end the line or
/// reorder what follows is written as a visible `\u{..}` escape (`\u{1b}`
/// for ESC, `\u{d}` for a carriage return, `\u{a}` for a new line), so
/// nothing a run produced can clear the screen, hide text, plant a link or
/// forge a line of the host's own (`error: …`). Tabs stay. `--json` output
/// is never passed through here: it stays exact JSON.
pub fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    escape_for_terminal(text, false)
}

/// [`shown`] for text of several lines (a summary value, a state printed
/// as JSON, a failure with the checker's report): its new lines stay, and
/// every other such character is escaped.
pub fn shown_lines(text: &str) -> std::borrow::Cow<'_, str> {
    escape_for_terminal(text, true)
}

fn escape_for_terminal(text: &str, keep_newlines: bool) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        (c.is_control() && c != '\t' && !(keep_newlines && c == '\n'))
            || matches!(
                c,
                '\u{061c}'
                    | '\u{200e}'
                    | '\u{200f}'
                    | '\u{2028}'
                    | '\u{2029}'
                    | '\u{202a}'..='\u{202e}'
                    | '\u{2066}'..='\u{2069}'
            )
    };
    if !text.contains(unsafe_char) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut clean = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if unsafe_char(c) {
            clean.extend(c.escape_unicode());
        } else {
            clean.push(c);
        }
    }
    std::borrow::Cow::Owned(clean)
}

/// Checks, before any work, that `path` can take a new file: its directory
/// exists, and nothing is there yet unless `force` (a directory never).
pub fn check_output_path(path: &Path, force: bool) -> Result<(), Failure> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(Failure::bad_input(format!(
            "cannot write `{}`: its directory `{}` does not exist; create it first",
            path.display(),
            parent.display()
        )));
    }
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => Err(Failure::bad_input(format!(
            "`{}` is a directory; give the path of a file",
            path.display()
        ))),
        Ok(meta) if !force => Err(Failure::bad_input(format!(
            "`{}` already exists{}; pass --force to replace it{}",
            path.display(),
            if meta.is_symlink() {
                " (a symlink)"
            } else {
                ""
            },
            if meta.is_symlink() {
                " (the link is replaced, what it points to is left alone)"
            } else {
                ""
            }
        ))),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Failure::environment(format!(
            "cannot look at `{}`: {e}",
            path.display()
        ))),
    }
}

/// Writes `bytes` to `path` as a new file: checked as
/// [`check_output_path`] does, written to a temporary file in the same
/// directory, then renamed into place. A reader never sees half a file, and
/// a symlink at `path` is replaced (with `force`), never written through.
/// Without `force`, a file that appeared meanwhile is still not replaced.
pub fn write_output_file(path: &Path, bytes: &[u8], force: bool) -> Result<(), Failure> {
    check_output_path(path, force)?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let cannot =
        |e: &dyn Display| Failure::environment(format!("cannot write `{}`: {e}", path.display()));
    let mut file = tempfile::Builder::new()
        .prefix(".skillhost-out-")
        .tempfile_in(parent)
        .map_err(|e| cannot(&e))?;
    file.write_all(bytes).map_err(|e| cannot(&e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        // A temporary file is private; the artifact is an ordinary file.
        file.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| cannot(&e))?;
    }
    let persisted = if force {
        file.persist(path)
    } else {
        file.persist_noclobber(path)
    };
    persisted.map_err(|e| {
        if e.error.kind() == std::io::ErrorKind::AlreadyExists {
            Failure::bad_input(format!(
                "`{}` already exists; pass --force to replace it",
                path.display()
            ))
        } else {
            cannot(&e.error)
        }
    })?;
    Ok(())
}
