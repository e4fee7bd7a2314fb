//! `ppt-outline`: the outline step of the slide deck scenario. It groups the
//! analysed blocks into sections (the world's doc comment states the rules)
//! and gives each its points. It does not judge whether the outline is
//! enough for a deck (the scenario's postcondition does) nor word slides.

// The generated export of a record this wide takes its fields flattened.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("ppt-outline");

use skillhost_sdk::log;

struct PptOutline;

impl Guest for PptOutline {
    skillhost_sdk::manifest! {
        name: "Slide deck outline",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        if !(1..=20).contains(&input.max_points) {
            return Err(SkillError::invalid_input(format!(
                "max_points is {}; give 1 to 20, e.g. 5",
                input.max_points
            )));
        }
        if !(1..=50).contains(&input.max_sections) {
            return Err(SkillError::invalid_input(format!(
                "max_sections is {}; give 1 to 50, e.g. 12",
                input.max_sections
            )));
        }
        let title = if input.title.trim().is_empty() {
            input.analysed_title.trim().to_string()
        } else {
            input.title.trim().to_string()
        };
        let mut sections = outline(&input.blocks, input.max_points as usize);
        sections.truncate(input.max_sections as usize);
        log::info(format!(
            "ppt-outline: `{title}`: {} section(s) from {} block(s)",
            sections.len(),
            input.blocks.len()
        ));
        Ok(Output { title, sections })
    }
}

export!(PptOutline);

/// The sections of `blocks`, each with at most `max_points` points.
fn outline(blocks: &[Block], max_points: usize) -> Vec<Section> {
    let level = blocks
        .iter()
        .filter(|b| b.kind == "heading" && b.level > 1)
        .map(|b| b.level)
        .min();
    let Some(level) = level else {
        // No heading to open sections at: one a paragraph.
        return blocks
            .iter()
            .filter(|b| b.kind == "paragraph")
            .map(|b| {
                let sentences = sentences(&b.text);
                let title = sentences.first().cloned().unwrap_or_default();
                let points = sentences.into_iter().skip(1).take(max_points).collect();
                Section { title, points }
            })
            .collect();
    };
    let mut sections: Vec<Section> = Vec::new();
    for block in blocks {
        if block.kind == "heading" && block.level <= level {
            if block.level == level {
                sections.push(Section {
                    title: block.text.clone(),
                    points: Vec::new(),
                });
            }
            continue;
        }
        let Some(section) = sections.last_mut() else {
            continue;
        };
        let points = match block.kind.as_str() {
            "paragraph" => sentences(&block.text),
            _ => vec![block.text.clone()],
        };
        section.points.extend(points);
        section.points.truncate(max_points);
    }
    sections
}

/// `text`'s sentences: each ends with `.`, `!` or `?` followed by a space, or
/// at the end of the text.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    let bytes = text.as_bytes();
    for i in 0..bytes.len() {
        if matches!(bytes[i], b'.' | b'!' | b'?') && bytes.get(i + 1) == Some(&b' ') {
            out.push(text[start..=i].trim().to_string());
            start = i + 1;
        }
    }
    let last = text[start..].trim();
    if !last.is_empty() {
        out.push(last.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(kind: &str, level: u32, text: &str) -> Block {
        Block {
            kind: kind.into(),
            level,
            text: text.into(),
            source: "a.md".into(),
        }
    }

    #[test]
    fn sections_open_at_level_two_and_take_bullets_sentences_and_subheadings() {
        let blocks = [
            block("heading", 1, "Deck"),
            block("paragraph", 0, "Left out."),
            block("heading", 2, "One"),
            block("paragraph", 0, "First point. Second point!"),
            block("heading", 3, "Deeper"),
            block("heading", 2, "Two"),
            block("bullet", 0, "a"),
            block("bullet", 0, "b"),
            block("bullet", 0, "c"),
        ];
        let got = outline(&blocks, 2);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].title, "One");
        assert_eq!(got[0].points, ["First point.", "Second point!"]);
        assert_eq!(got[1].points, ["a", "b"]);
    }

    #[test]
    fn without_subheadings_each_paragraph_is_a_section() {
        let blocks = [block("paragraph", 0, "Title here. Point one.")];
        let got = outline(&blocks, 5);
        assert_eq!(got[0].title, "Title here.");
        assert_eq!(got[0].points, ["Point one."]);
    }
}
