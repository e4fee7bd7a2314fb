//! `chat-file-read`: one UTF-8 text file of the granted directory, cut at a
//! number of characters.

skillhost_sdk::generate!("chat-file-read");

use skillhost_sdk::{fs, log};

struct ChatFileRead;

impl Guest for ChatFileRead {
    skillhost_sdk::manifest! {
        name: "File read",
        capabilities: ["fs", "log"],
        retry: never,
        estimated_duration_ms: 2,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let path = input.path.trim();
        if path.is_empty() {
            return Err(SkillError::invalid_input(
                "`path` is empty; give a file relative to the granted directory",
            ));
        }
        // The import's error codes (`not-found`, `invalid-path`…) are what a
        // scenario matches on: keep them, add only which file.
        let text = fs::read_text(path).map_err(|e| e.context(format!("reading `{path}`")))?;
        let bytes = text.len() as u64;
        let (text, truncated) = match input.max_chars {
            0 => (text, false),
            n => match text.char_indices().nth(n as usize) {
                Some((cut, _)) => (text[..cut].to_string(), true),
                None => (text, false),
            },
        };
        log::info(format!("read `{path}` ({bytes} bytes)"));
        Ok(Output {
            path: path.to_string(),
            text,
            truncated,
            bytes,
        })
    }
}

export!(ChatFileRead);

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost_sdk::testing;

    #[test]
    fn reads_cuts_and_keeps_the_error_codes() {
        let dir = std::env::temp_dir().join(format!("chat-file-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("note.md"), "héllo world").unwrap();
        let run = |path: &str, max_chars| {
            ChatFileRead::run(Input {
                path: path.into(),
                max_chars,
            })
        };
        assert_eq!(
            run("note.md", 0).unwrap_err().code,
            "capability-not-granted"
        );
        testing::set_fs_root(&dir);
        let all = run("note.md", 0).unwrap();
        assert_eq!(
            (all.text.as_str(), all.truncated, all.bytes),
            ("héllo world", false, 12)
        );
        let cut = run("note.md", 2).unwrap();
        assert_eq!((cut.text.as_str(), cut.truncated), ("hé", true));
        assert_eq!(run("missing.md", 0).unwrap_err().code, "not-found");
        assert_eq!(run("../note.md", 0).unwrap_err().code, "invalid-path");
        assert_eq!(run(" ", 0).unwrap_err().code, "invalid-input");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
