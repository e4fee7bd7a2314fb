//! `summary-ingest`: the first step of the summary scenario. It reads the
//! files directly in one directory (through the `fs` capability) and reduces
//! each to plain text: plain text as it is, Markdown without its markup,
//! HTML without its tags. The reduction is deterministic (the same bytes
//! always give the same text), so the chunks cut from it, and the quotes
//! checked against them, are the same in every run and replay. It does not
//! chunk, score or summarise.

skillhost_sdk::generate!("summary-ingest");

mod html;
mod markdown;

use skillhost_sdk::{EntryKind, fs, log};

/// The error code for a file that cannot be read as text.
const INVALID_DATA: &str = "invalid-data";

/// Files larger than this are refused rather than read.
const MAX_FILE_BYTES: u64 = 1 << 20;

struct SummaryIngest;

impl Guest for SummaryIngest {
    skillhost_sdk::manifest! {
        name: "Summary ingestion",
        capabilities: ["fs", "log"],
        retry: never,
        estimated_duration_ms: 5,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let dir = input.dir.trim();
        let mut entries = fs::list_dir(dir)
            .map_err(|e| e.context(format!("summary-ingest cannot list `{dir}`")))?;
        entries.sort_by(|a, b| a.name.cmp(&b.name));
        let mut documents = Vec::new();
        let mut skipped = Vec::new();
        for entry in entries {
            let format = match entry.kind {
                EntryKind::File if !entry.name.starts_with('.') => format_of(&entry.name),
                _ => None,
            };
            let Some(format) = format else {
                skipped.push(entry.name);
                continue;
            };
            let path = join(dir, &entry.name);
            if entry.size > MAX_FILE_BYTES {
                return Err(SkillError::new(
                    INVALID_DATA,
                    format!(
                        "`{path}` is {} bytes, more than {MAX_FILE_BYTES}; split it into smaller files",
                        entry.size
                    ),
                ));
            }
            let bytes = fs::read_file(&path)
                .map_err(|e| e.context(format!("summary-ingest cannot read `{path}`")))?;
            let raw = String::from_utf8(bytes).map_err(|e| {
                SkillError::new(
                    INVALID_DATA,
                    format!(
                        "`{path}` is not UTF-8 (at byte {}); save it as UTF-8",
                        e.utf8_error().valid_up_to()
                    ),
                )
            })?;
            let text = reduce(format, &raw);
            let chars = u32::try_from(text.chars().count()).unwrap_or(u32::MAX);
            documents.push(Document {
                source: entry.name,
                format: format.to_string(),
                text,
                chars,
            });
        }
        let chars = documents
            .iter()
            .map(|d| d.chars)
            .fold(0u32, u32::saturating_add);
        log::info(format!(
            "summary-ingest: {} document(s) in `{dir}`, {chars} character(s); {} left out",
            documents.len(),
            skipped.len()
        ));
        Ok(Output {
            documents,
            skipped,
            chars,
        })
    }
}

export!(SummaryIngest);

/// The format a file's extension names, if it is one this skill reads.
fn format_of(name: &str) -> Option<&'static str> {
    let (_, extension) = name.rsplit_once('.')?;
    match extension.to_ascii_lowercase().as_str() {
        "txt" | "text" => Some("text"),
        "md" | "markdown" => Some("markdown"),
        "html" | "htm" => Some("html"),
        _ => None,
    }
}

/// A file's text reduced to plain text, by format.
fn reduce(format: &str, raw: &str) -> String {
    let raw = raw.strip_prefix('\u{feff}').unwrap_or(raw);
    let raw = raw.replace("\r\n", "\n");
    match format {
        "markdown" => markdown::to_text(&raw),
        "html" => html::to_text(&raw),
        _ => paragraphs(raw.lines().map(str::trim_end)),
    }
}

/// Lines joined with `\n`, runs of blank lines made one, the whole trimmed.
pub(crate) fn paragraphs<'a>(lines: impl Iterator<Item = &'a str>) -> String {
    let mut text = String::new();
    let mut blank = false;
    for line in lines {
        if line.trim().is_empty() {
            blank = !text.is_empty();
            continue;
        }
        if !text.is_empty() {
            text.push_str(if blank { "\n\n" } else { "\n" });
        }
        blank = false;
        text.push_str(line);
    }
    text
}

/// `dir/name`, with `""` meaning the granted directory itself.
fn join(dir: &str, name: &str) -> String {
    let dir = dir.trim_end_matches('/');
    if dir.is_empty() || dir == "." {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost_sdk::testing;

    #[test]
    fn reads_text_markdown_and_html_and_skips_the_rest() {
        let dir = std::env::temp_dir().join(format!("summary-ingest-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("docs/sub")).unwrap();
        let files = [
            (
                "b.md",
                "# Title\n\nSome *emphasis* and a [link](http://x).\n",
            ),
            (
                "a.txt",
                "\u{feff}Line one.\r\nLine two.\r\n\r\n\r\nNext.  \n",
            ),
            ("c.html", "<p>Fish &amp; chips</p><script>x()</script>"),
            ("d.csv", "a,b\n"),
            (".hidden.txt", "no"),
        ];
        for (name, text) in files {
            std::fs::write(dir.join("docs").join(name), text).unwrap();
        }
        testing::set_fs_root(&dir);
        let out = SummaryIngest::run(Input { dir: "docs".into() }).unwrap();
        let got: Vec<(&str, &str, &str)> = out
            .documents
            .iter()
            .map(|d| (d.source.as_str(), d.format.as_str(), d.text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("a.txt", "text", "Line one.\nLine two.\n\nNext."),
                ("b.md", "markdown", "Title\n\nSome emphasis and a link."),
                ("c.html", "html", "Fish & chips"),
            ]
        );
        assert_eq!(out.skipped, [".hidden.txt", "d.csv", "sub"]);
        let chars: usize = got.iter().map(|(_, _, text)| text.chars().count()).sum();
        assert_eq!(out.chars as usize, chars);

        std::fs::write(dir.join("docs/e.txt"), [0xff, 0xfe]).unwrap();
        let e = SummaryIngest::run(Input { dir: "docs".into() }).unwrap_err();
        assert_eq!(e.code, INVALID_DATA);
        assert!(
            e.message.contains("`docs/e.txt` is not UTF-8"),
            "{}",
            e.message
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
