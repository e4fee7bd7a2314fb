//! `ppt-slide`: the map step of the slide deck scenario, one outline
//! section per call. It words the section as a slide (title, bullets that
//! fit, notes for the rest) by the rules the world states. It sees one
//! section only and knows nothing of layout or files.

skillhost_sdk::generate!("ppt-slide");

use skillhost_sdk::log;

/// The longest slide title, in characters.
const MAX_TITLE_CHARS: usize = 80;

struct PptSlide;

impl Guest for PptSlide {
    skillhost_sdk::manifest! {
        name: "Slide content",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        if !(1..=10).contains(&input.max_bullets) {
            return Err(SkillError::invalid_input(format!(
                "max_bullets is {}; give 1 to 10, e.g. 5",
                input.max_bullets
            )));
        }
        if !(20..=400).contains(&input.max_chars) {
            return Err(SkillError::invalid_input(format!(
                "max_chars is {}; give 20 to 400, e.g. 120",
                input.max_chars
            )));
        }
        let section = input.section;
        if section.title.trim().is_empty() {
            return Err(SkillError::invalid_input(format!(
                "section {} has no title; every section becomes a slide with its title",
                input.index
            )));
        }
        let mut notes = Vec::new();
        let mut bullets = Vec::new();
        for (i, point) in section.points.iter().enumerate() {
            if i >= input.max_bullets as usize {
                notes.push(point.clone());
                continue;
            }
            let (bullet, cut) = shorten(point, input.max_chars as usize);
            if cut {
                notes.push(point.clone());
            }
            bullets.push(bullet);
        }
        let (title, _) = shorten(section.title.trim(), MAX_TITLE_CHARS);
        let number = input.index.saturating_add(2);
        log::info(format!(
            "ppt-slide: slide {number} `{title}`: {} bullet(s), {} note(s)",
            bullets.len(),
            notes.len()
        ));
        Ok(Output {
            number,
            title,
            bullets,
            notes: notes.join("\n"),
        })
    }
}

export!(PptSlide);

/// `text` in at most `max` characters: cut at the last space that leaves
/// room for `…`, else at `max - 1` characters. The flag says whether it was
/// cut.
fn shorten(text: &str, max: usize) -> (String, bool) {
    if text.chars().count() <= max {
        return (text.to_string(), false);
    }
    let keep: String = text.chars().take(max - 1).collect();
    let kept = match keep.rfind(' ') {
        Some(space) if space > 0 => keep[..space].trim_end(),
        _ => keep.as_str(),
    };
    (format!("{kept}…"), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_point_is_cut_at_a_space_and_kept_whole_in_the_notes() {
        assert_eq!(shorten("short", 20), ("short".to_string(), false));
        let (cut, was) = shorten("one two three four five six", 12);
        assert!(was);
        assert_eq!(cut, "one two…");
        assert!(cut.chars().count() <= 12);
        assert_eq!(shorten("abcdefghijklmnop", 5).0, "abcd…");
    }
}
