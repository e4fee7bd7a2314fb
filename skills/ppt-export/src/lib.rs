//! `ppt-export`: the last step of the slide deck scenario. It writes the
//! slides and their visual suggestions as one PowerPoint file (`parts.rs`:
//! the Office Open XML parts; `zip.rs`: the container) and returns its
//! bytes, which the scenario stores as the run's `.pptx` artifact. Same
//! input, same bytes: no date, random id or map order reaches the file, so a
//! resumed run writes the file an uninterrupted one would. It decides no
//! content: titles, bullets and suggestions arrive made.

// The generated export of a record this wide takes its fields flattened.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!("ppt-export");

mod parts;
mod zip;

use parts::SlidePart;
use skillhost_sdk::log;

struct PptExport;

impl Guest for PptExport {
    skillhost_sdk::manifest! {
        name: "Slide deck export (.pptx)",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 5,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        check(&input)?;
        let mut slides = vec![SlidePart {
            title: &input.title,
            subtitle: Some(&input.subtitle),
            bullets: &[],
            suggestion: "",
        }];
        for (slide, visual) in input.slides.iter().zip(&input.visuals) {
            slides.push(SlidePart {
                title: &slide.title,
                subtitle: None,
                bullets: &slide.bullets,
                suggestion: &visual.suggestion,
            });
        }
        let (pptx, parts) = deck(&input.title, &slides).map_err(|_| {
            SkillError::invalid_input(
                "the deck would be larger than 4 GiB; give fewer or shorter slides",
            )
        })?;
        log::info(format!(
            "ppt-export: `{}`: {} slide(s), {} part(s), {} byte(s)",
            input.title,
            slides.len(),
            parts.len(),
            pptx.len()
        ));
        Ok(Output {
            pptx,
            slides: slides.len() as u32,
            parts,
        })
    }
}

export!(PptExport);

/// Refuses input the file cannot be made from.
fn check(input: &Input) -> Result<(), SkillError> {
    if input.slides.is_empty() {
        return Err(SkillError::invalid_input(
            "no slide to export; the outline gave no section",
        ));
    }
    if input.visuals.len() != input.slides.len() {
        return Err(SkillError::invalid_input(format!(
            "{} slide(s) but {} visual suggestion(s); give one suggestion a slide",
            input.slides.len(),
            input.visuals.len()
        )));
    }
    for (i, (slide, visual)) in input.slides.iter().zip(&input.visuals).enumerate() {
        let want = i as u32 + 2;
        if slide.number != want || visual.number != want {
            return Err(SkillError::invalid_input(format!(
                "slide {i} of the list is numbered {} and its suggestion {}; slides are numbered \
                 from 2 (after the title slide) in order, each with its own suggestion",
                slide.number, visual.number
            )));
        }
    }
    Ok(())
}

/// The `.pptx` of `slides` (the title slide first) and its entries' names.
fn deck(title: &str, slides: &[SlidePart<'_>]) -> Result<(Vec<u8>, Vec<String>), zip::TooLarge> {
    let n = slides.len();
    let mut zip = zip::Zip::default();
    zip.add("[Content_Types].xml", parts::content_types(n).as_bytes())?;
    zip.add("_rels/.rels", parts::package_rels().as_bytes())?;
    zip.add("docProps/core.xml", parts::core(title).as_bytes())?;
    zip.add("docProps/app.xml", parts::app(n).as_bytes())?;
    zip.add("ppt/presentation.xml", parts::presentation(n).as_bytes())?;
    zip.add(
        "ppt/_rels/presentation.xml.rels",
        parts::presentation_rels(n).as_bytes(),
    )?;
    zip.add("ppt/presProps.xml", parts::pres_props().as_bytes())?;
    zip.add("ppt/viewProps.xml", parts::view_props().as_bytes())?;
    zip.add("ppt/tableStyles.xml", parts::table_styles().as_bytes())?;
    zip.add("ppt/theme/theme1.xml", parts::theme().as_bytes())?;
    zip.add(
        "ppt/slideMasters/slideMaster1.xml",
        parts::master().as_bytes(),
    )?;
    zip.add(
        "ppt/slideMasters/_rels/slideMaster1.xml.rels",
        parts::master_rels().as_bytes(),
    )?;
    for layout in 1..=2 {
        zip.add(
            &format!("ppt/slideLayouts/slideLayout{layout}.xml"),
            parts::layout(layout).as_bytes(),
        )?;
        zip.add(
            &format!("ppt/slideLayouts/_rels/slideLayout{layout}.xml.rels"),
            parts::layout_rels().as_bytes(),
        )?;
    }
    for (i, slide) in slides.iter().enumerate() {
        let n = i + 1;
        zip.add(
            &format!("ppt/slides/slide{n}.xml"),
            parts::slide(slide).as_bytes(),
        )?;
        zip.add(
            &format!("ppt/slides/_rels/slide{n}.xml.rels"),
            parts::slide_rels(i == 0).as_bytes(),
        )?;
    }
    let names = zip.names();
    Ok((zip.finish()?, names))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(slides: usize) -> Input {
        Input {
            title: "A & B".into(),
            subtitle: "sub".into(),
            slides: (0..slides)
                .map(|i| Slide {
                    number: i as u32 + 2,
                    title: format!("S{i} <x>"),
                    bullets: vec!["one".into(), "two".into()],
                    notes: String::new(),
                })
                .collect(),
            visuals: (0..slides)
                .map(|i| Visual {
                    number: i as u32 + 2,
                    layout: "title-and-content".into(),
                    chart: String::new(),
                    image: String::new(),
                    suggestion: "a picture".into(),
                })
                .collect(),
        }
    }

    #[test]
    fn the_same_input_gives_the_same_bytes() {
        let a = PptExport::run(input(3)).unwrap();
        let b = PptExport::run(input(3)).unwrap();
        assert_eq!(a.pptx, b.pptx);
        assert_eq!(a.slides, 4);
        assert!(a.parts.contains(&"ppt/slides/slide4.xml".to_string()));
        assert_eq!(a.parts[0], "[Content_Types].xml");
    }

    #[test]
    fn slide_text_is_escaped() {
        let xml = parts::slide(&SlidePart {
            title: "a < b & c",
            subtitle: None,
            bullets: &["\"q\"".to_string()],
            suggestion: "",
        });
        assert!(xml.contains("<a:t>a &lt; b &amp; c</a:t>"), "{xml}");
        assert!(xml.contains("<a:t>&quot;q&quot;</a:t>"), "{xml}");
    }

    #[test]
    fn mismatched_visuals_and_numbers_are_refused() {
        let mut bad = input(2);
        bad.visuals.pop();
        assert!(
            PptExport::run(bad)
                .unwrap_err()
                .message
                .contains("1 visual")
        );
        let mut bad = input(2);
        bad.slides[1].number = 7;
        assert!(
            PptExport::run(bad)
                .unwrap_err()
                .message
                .contains("numbered 7")
        );
        assert!(PptExport::run(input(0)).is_err());
    }
}
