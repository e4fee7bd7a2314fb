//! `ppt-analyze`: the first step of the slide deck scenario. It reads the
//! source content (the `.md` and `.txt` files of a folder, through the `fs`
//! capability, or the input's text) and splits it into blocks: headings
//! with their level, paragraphs and bullets, without their Markdown markup.
//! It does not decide what becomes a section or a slide: that is the
//! outline's job.

skillhost_sdk::generate!("ppt-analyze");

use skillhost_sdk::{EntryKind, fs, log};

/// The error code for a source that cannot be read as text.
const INVALID_DATA: &str = "invalid-data";

/// Files larger than this are refused rather than read.
const MAX_FILE_BYTES: u64 = 1 << 20;

struct PptAnalyze;

impl Guest for PptAnalyze {
    skillhost_sdk::manifest! {
        name: "Slide deck content analysis",
        capabilities: ["fs", "log"],
        retry: never,
        estimated_duration_ms: 2,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let mut sources = Vec::new();
        let mut blocks = Vec::new();
        if !input.text.trim().is_empty() {
            sources.push("input".to_string());
            blocks = parse("input", &input.text);
        } else {
            let dir = input.dir.trim();
            if dir.is_empty() {
                return Err(SkillError::invalid_input(
                    "neither `text` nor `dir` is given; give the content as `text`, or a folder of \
                     .md or .txt files as `dir`",
                ));
            }
            let mut entries = fs::list_dir(dir)
                .map_err(|e| e.context(format!("ppt-analyze cannot list `{dir}`")))?;
            entries.sort_by(|a, b| a.name.cmp(&b.name));
            for entry in entries {
                let readable = entry.kind == EntryKind::File
                    && !entry.name.starts_with('.')
                    && (entry.name.ends_with(".md") || entry.name.ends_with(".txt"));
                if !readable {
                    continue;
                }
                let path = format!("{}/{}", dir.trim_end_matches('/'), entry.name);
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
                    .map_err(|e| e.context(format!("ppt-analyze cannot read `{path}`")))?;
                let text = String::from_utf8(bytes).map_err(|e| {
                    SkillError::new(
                        INVALID_DATA,
                        format!(
                            "`{path}` is not UTF-8 (at byte {}); save it as UTF-8",
                            e.utf8_error().valid_up_to()
                        ),
                    )
                })?;
                blocks.extend(parse(&entry.name, &text));
                sources.push(entry.name);
            }
        }
        if blocks.is_empty() {
            let what = if sources.is_empty() {
                format!("`{}` holds no .md or .txt file", input.dir.trim())
            } else {
                format!("{} holds no text", sources.join(", "))
            };
            return Err(SkillError::new(
                INVALID_DATA,
                format!("{what}; a deck needs source content"),
            ));
        }
        let title = blocks
            .iter()
            .find(|b| b.kind == "heading" && b.level == 1)
            .map(|b| b.text.clone())
            .or_else(|| {
                sources.first().filter(|s| *s != "input").map(|s| {
                    s.rsplit_once('.')
                        .map_or(s.as_str(), |(stem, _)| stem)
                        .to_string()
                })
            })
            .unwrap_or_else(|| "Untitled".to_string());
        let words = blocks
            .iter()
            .map(|b| b.text.split_whitespace().count())
            .sum::<usize>();
        let words = u32::try_from(words).unwrap_or(u32::MAX);
        log::info(format!(
            "ppt-analyze: {} source(s), {} block(s), {words} word(s)",
            sources.len(),
            blocks.len()
        ));
        Ok(Output {
            title,
            sources,
            blocks,
            words,
        })
    }
}

export!(PptAnalyze);

/// `text`'s blocks, in order.
fn parse(source: &str, text: &str) -> Vec<Block> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut blocks = Vec::new();
    let mut paragraph = String::new();
    let block = |kind: &str, level: u32, text: &str| Block {
        kind: kind.to_string(),
        level,
        text: plain(text),
        source: source.to_string(),
    };
    let flush = |paragraph: &mut String, blocks: &mut Vec<Block>| {
        if !paragraph.is_empty() {
            blocks.push(block("paragraph", 0, paragraph));
            paragraph.clear();
        }
    };
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            flush(&mut paragraph, &mut blocks);
        } else if let Some((level, heading)) = heading(line) {
            flush(&mut paragraph, &mut blocks);
            blocks.push(block("heading", level, heading));
        } else if let Some(item) = bullet(line) {
            flush(&mut paragraph, &mut blocks);
            blocks.push(block("bullet", 0, item));
        } else {
            if !paragraph.is_empty() {
                paragraph.push(' ');
            }
            paragraph.push_str(line);
        }
    }
    flush(&mut paragraph, &mut blocks);
    blocks.retain(|b| !b.text.is_empty());
    blocks
}

/// A Markdown heading's level and text: 1 to 6 `#` and a space.
fn heading(line: &str) -> Option<(u32, &str)> {
    let hashes = line.bytes().take_while(|&b| b == b'#').count();
    let rest = &line[hashes..];
    if (1..=6).contains(&hashes) && rest.starts_with(' ') {
        Some((hashes as u32, rest.trim().trim_end_matches('#').trim_end()))
    } else {
        None
    }
}

/// A list item's text: `- `, `* `, `+ ` or digits and `. `.
fn bullet(line: &str) -> Option<&str> {
    for mark in ["- ", "* ", "+ "] {
        if let Some(rest) = line.strip_prefix(mark) {
            return Some(rest.trim());
        }
    }
    let digits = line.bytes().take_while(u8::is_ascii_digit).count();
    if digits > 0 {
        return line[digits..].strip_prefix(". ").map(str::trim);
    }
    None
}

/// `text` without inline Markdown: emphasis marks, backticks, and links
/// reduced to their text.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let link = after.find("](").and_then(|close| {
            let url = &after[close + 2..];
            url.find(')').map(|end| (close, close + 2 + end + 1))
        });
        match link {
            Some((close, end)) => {
                out.push_str(&rest[..open]);
                out.push_str(&after[..close]);
                rest = &after[end..];
            }
            None => {
                out.push_str(&rest[..=open]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out.replace("**", "")
        .replace("__", "")
        .replace('`', "")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headings_bullets_and_paragraphs_lose_their_markup() {
        let blocks = parse(
            "a.md",
            "# Deck\n\nIntro line one\nline **two**.\n\n## Part\n- first `item`\n2. a [link](http://x) here\n",
        );
        let got: Vec<(&str, u32, &str)> = blocks
            .iter()
            .map(|b| (b.kind.as_str(), b.level, b.text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("heading", 1, "Deck"),
                ("paragraph", 0, "Intro line one line two."),
                ("heading", 2, "Part"),
                ("bullet", 0, "first item"),
                ("bullet", 0, "a link here"),
            ]
        );
    }

    #[test]
    fn a_hash_without_a_space_is_text() {
        let blocks = parse("a.md", "#hashtag\n");
        assert_eq!(blocks[0].kind, "paragraph");
    }
}
