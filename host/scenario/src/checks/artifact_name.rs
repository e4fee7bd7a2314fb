//! What an artifact may be called: its name becomes a file name when a run's
//! artifacts are written out (`host run --out`, `host runs artifact`), so it
//! must be one on every filesystem the host writes to.

/// The longest artifact name, in bytes: the common file-name limit.
pub const MAX_ARTIFACT_NAME_BYTES: usize = 255;

/// Checks an artifact name. `Err` says what is wrong with it.
pub fn check(name: &str) -> Result<(), String> {
    let shown = name.escape_debug();
    if name.is_empty() {
        return Err("an artifact name must not be empty".into());
    }
    if name == "." || name == ".." {
        return Err(format!("`{name}` names a directory, not a file"));
    }
    if name.contains(['/', '\\']) {
        return Err(format!("`{shown}` holds a path separator"));
    }
    if let Some(c) = name.chars().find(|c| c.is_control()) {
        return Err(format!(
            "`{shown}` holds the control character {}",
            c.escape_unicode()
        ));
    }
    if name.len() > MAX_ARTIFACT_NAME_BYTES {
        return Err(format!(
            "`{}…` is {} bytes long; at most {MAX_ARTIFACT_NAME_BYTES}",
            name.chars().take(24).collect::<String>(),
            name.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_file_names_pass_and_others_say_why() {
        for ok in ["report.md", "a", ".hidden", "résumé.txt", &"x".repeat(255)] {
            assert_eq!(check(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("", "empty"),
            (".", "directory"),
            ("..", "directory"),
            ("a/b", "separator"),
            ("a\\b", "separator"),
            ("a\0b", "control character \\u{0}"),
            ("a\nb", "control character \\u{a}"),
            (&"x".repeat(300), "300 bytes long"),
        ] {
            let err = check(bad).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
