//! `text-stats`: counts the lines, words and bytes of a UTF-8 text file read
//! through the `fs` capability, and lists its most frequent words.

skillhost_sdk::generate!("text-stats");

use std::collections::BTreeMap;

use skillhost_sdk::{fs, log};

const TOP_WORDS: usize = 10;

struct TextStats;

impl Guest for TextStats {
    skillhost_sdk::manifest! {
        name: "Text statistics",
        capabilities: ["log", "fs"],
        retry: never,
        estimated_duration_ms: 5,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        if input.path.trim().is_empty() {
            return Err(SkillError::invalid_input(
                "`path` is empty; give a file relative to the granted directory",
            ));
        }
        // The import's error codes (`not-found`, `invalid-utf8`…) are what a
        // scenario matches on: keep them, add only which file.
        let text = fs::read_text(&input.path)
            .map_err(|e| e.context(format!("text-stats cannot read `{}`", input.path)))?;
        let output = stats(&text);
        log::info(format!(
            "{}: {} lines, {} words, {} bytes",
            input.path, output.lines, output.words, output.bytes
        ));
        Ok(output)
    }
}

export!(TextStats);

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '\''
}

/// The statistics of `text`.
fn stats(text: &str) -> Output {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    let mut words = 0u32;
    for word in text
        .split(|c: char| !is_word_char(c))
        .map(|w| w.trim_matches('\''))
        .filter(|w| !w.is_empty())
    {
        words = words.saturating_add(1);
        *counts.entry(word.to_lowercase()).or_default() += 1;
    }
    let mut top: Vec<WordCount> = counts
        .into_iter()
        .map(|(word, count)| WordCount { word, count })
        .collect();
    top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.word.cmp(&b.word)));
    top.truncate(TOP_WORDS);
    Output {
        lines: u32::try_from(text.lines().count()).unwrap_or(u32::MAX),
        words,
        bytes: text.len() as u64,
        top_words: top,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost_sdk::testing;

    fn top(output: &Output) -> Vec<(&str, u32)> {
        output
            .top_words
            .iter()
            .map(|w| (w.word.as_str(), w.count))
            .collect()
    }

    #[test]
    fn counts_lines_words_and_bytes() {
        let s = stats("The cat sat.\nThe dog didn't!\n\nthe end");
        assert_eq!((s.lines, s.words, s.bytes), (4, 8, 37));
        assert_eq!(top(&s)[..2], [("the", 3), ("cat", 1)]);
        assert!(top(&s).contains(&("didn't", 1)));
    }

    #[test]
    fn handles_empty_and_unicode_text() {
        let s = stats("");
        assert_eq!((s.lines, s.words, s.bytes), (0, 0, 0));
        assert!(s.top_words.is_empty());
        let s = stats("Éte été ÉTÉ — 'quoted' x");
        assert_eq!(s.words, 5);
        assert_eq!(top(&s)[..3], [("été", 2), ("quoted", 1), ("x", 1)]);
    }

    #[test]
    fn keeps_the_ten_most_frequent_words() {
        let text: String = (0..15).map(|i| format!("w{i:02} ").repeat(i + 1)).collect();
        let s = stats(&text);
        assert_eq!(s.top_words.len(), 10);
        assert_eq!(top(&s)[0], ("w14", 15));
        assert_eq!(top(&s)[9], ("w05", 6));
    }

    fn corpus() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "text-stats-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("poem.txt"), "one two\ntwo three three\n").unwrap();
        std::fs::write(dir.join("binary.bin"), [0xc3, 0x28]).unwrap();
        dir
    }

    fn run(path: &str) -> Result<Output, SkillError> {
        TextStats::run(Input {
            path: path.to_string(),
        })
    }

    #[test]
    fn reads_the_file_through_fs() {
        let dir = corpus();
        testing::set_fs_root(&dir);
        let s = run("poem.txt").unwrap();
        assert_eq!((s.lines, s.words, s.bytes), (2, 5, 24));
        assert_eq!(top(&s), [("three", 2), ("two", 2), ("one", 1)]);
        assert_eq!(testing::take_logs().len(), 1);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn returns_the_fs_error_codes() {
        assert_eq!(run("poem.txt").unwrap_err().code, "capability-not-granted");
        let dir = corpus();
        testing::set_fs_root(&dir);
        let e = run("missing.txt").unwrap_err();
        assert_eq!(e.code, "not-found");
        assert!(e.message.contains("missing.txt"), "{}", e.message);
        assert_eq!(run("../poem.txt").unwrap_err().code, "invalid-path");
        assert_eq!(run("sub").unwrap_err().code, "is-a-directory");
        assert_eq!(run("binary.bin").unwrap_err().code, "invalid-utf8");
        assert_eq!(run("  ").unwrap_err().code, "invalid-input");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
