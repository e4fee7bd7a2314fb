//! The Office Open XML parts of a deck (ECMA-376, PresentationML): the
//! package's content types and relationships, the presentation, one slide
//! master with its theme and two layouts, and the slides. Everything fixed
//! is a constant; only the slides, the slide list and the titles vary.
//! The master and theme carry what PowerPoint and LibreOffice need to open
//! the file without repairing it (colour, font and format schemes; text
//! styles; the colour map).

/// 16:9, in EMU (914400 a inch).
const SLIDE_CX: u32 = 12_192_000;
const SLIDE_CY: u32 = 6_858_000;

const NS: &str = r#"xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main""#;
const HEAD: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n";
const REL: &str = "http://schemas.openxmlformats.org/officeDocument/2006/relationships";
const CT: &str = "application/vnd.openxmlformats-officedocument";

/// A slide of the file: the title slide (`bullets` empty, `subtitle` its
/// second line) or a content slide.
pub struct SlidePart<'a> {
    pub title: &'a str,
    pub subtitle: Option<&'a str>,
    pub bullets: &'a [String],
    pub suggestion: &'a str,
}

/// `text` escaped for XML character data and attributes; control
/// characters XML 1.0 cannot hold become spaces.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\t' | '\n' | '\r' => out.push(' '),
            c if (c as u32) < 0x20 || c == '\u{fffe}' || c == '\u{ffff}' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn relationships(rels: &[(String, &str)]) -> String {
    let mut out = format!(
        "{HEAD}<Relationships xmlns=\"http://schemas.openxmlformats.org/package/2006/relationships\">"
    );
    for (i, (kind, target)) in rels.iter().enumerate() {
        out.push_str(&format!(
            "<Relationship Id=\"rId{}\" Type=\"{kind}\" Target=\"{target}\"/>",
            i + 1
        ));
    }
    out.push_str("</Relationships>");
    out
}

pub fn content_types(slides: usize) -> String {
    let mut out = format!(
        "{HEAD}<Types xmlns=\"http://schemas.openxmlformats.org/package/2006/content-types\">\
         <Default Extension=\"rels\" ContentType=\"application/vnd.openxmlformats-package.relationships+xml\"/>\
         <Default Extension=\"xml\" ContentType=\"application/xml\"/>\
         <Override PartName=\"/ppt/presentation.xml\" ContentType=\"{CT}.presentationml.presentation.main+xml\"/>\
         <Override PartName=\"/ppt/slideMasters/slideMaster1.xml\" ContentType=\"{CT}.presentationml.slideMaster+xml\"/>\
         <Override PartName=\"/ppt/slideLayouts/slideLayout1.xml\" ContentType=\"{CT}.presentationml.slideLayout+xml\"/>\
         <Override PartName=\"/ppt/slideLayouts/slideLayout2.xml\" ContentType=\"{CT}.presentationml.slideLayout+xml\"/>\
         <Override PartName=\"/ppt/theme/theme1.xml\" ContentType=\"{CT}.theme+xml\"/>\
         <Override PartName=\"/ppt/presProps.xml\" ContentType=\"{CT}.presentationml.presProps+xml\"/>\
         <Override PartName=\"/ppt/viewProps.xml\" ContentType=\"{CT}.presentationml.viewProps+xml\"/>\
         <Override PartName=\"/ppt/tableStyles.xml\" ContentType=\"{CT}.presentationml.tableStyles+xml\"/>\
         <Override PartName=\"/docProps/core.xml\" ContentType=\"application/vnd.openxmlformats-package.core-properties+xml\"/>\
         <Override PartName=\"/docProps/app.xml\" ContentType=\"{CT}.extended-properties+xml\"/>"
    );
    for n in 1..=slides {
        out.push_str(&format!(
            "<Override PartName=\"/ppt/slides/slide{n}.xml\" ContentType=\"{CT}.presentationml.slide+xml\"/>"
        ));
    }
    out.push_str("</Types>");
    out
}

pub fn package_rels() -> String {
    relationships(&[
        (format!("{REL}/officeDocument"), "ppt/presentation.xml"),
        (
            "http://schemas.openxmlformats.org/package/2006/relationships/metadata/core-properties"
                .to_string(),
            "docProps/core.xml",
        ),
        (format!("{REL}/extended-properties"), "docProps/app.xml"),
    ])
}

pub fn core(title: &str) -> String {
    format!(
        "{HEAD}<cp:coreProperties xmlns:cp=\"http://schemas.openxmlformats.org/package/2006/metadata/core-properties\" \
         xmlns:dc=\"http://purl.org/dc/elements/1.1/\" xmlns:dcterms=\"http://purl.org/dc/terms/\" \
         xmlns:dcmitype=\"http://purl.org/dc/dcmitype/\" xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\">\
         <dc:title>{}</dc:title><dc:creator>skillhost</dc:creator></cp:coreProperties>",
        esc(title)
    )
}

pub fn app(slides: usize) -> String {
    format!(
        "{HEAD}<Properties xmlns=\"http://schemas.openxmlformats.org/officeDocument/2006/extended-properties\" \
         xmlns:vt=\"http://schemas.openxmlformats.org/officeDocument/2006/docPropsVTypes\">\
         <Application>skillhost ppt-export</Application><PresentationFormat>On-screen Show (16:9)</PresentationFormat>\
         <Slides>{slides}</Slides></Properties>"
    )
}

/// The presentation's relationships: master, the three property parts,
/// theme, then one a slide (`rId6` is slide 1).
pub fn presentation_rels(slides: usize) -> String {
    let names: Vec<String> = (1..=slides)
        .map(|n| format!("slides/slide{n}.xml"))
        .collect();
    let mut rels = vec![
        (
            format!("{REL}/slideMaster"),
            "slideMasters/slideMaster1.xml",
        ),
        (format!("{REL}/presProps"), "presProps.xml"),
        (format!("{REL}/viewProps"), "viewProps.xml"),
        (format!("{REL}/theme"), "theme/theme1.xml"),
        (format!("{REL}/tableStyles"), "tableStyles.xml"),
    ];
    rels.extend(names.iter().map(|n| (format!("{REL}/slide"), n.as_str())));
    relationships(&rels)
}

pub fn presentation(slides: usize) -> String {
    let mut ids = String::new();
    for n in 0..slides {
        ids.push_str(&format!(
            "<p:sldId id=\"{}\" r:id=\"rId{}\"/>",
            256 + n,
            6 + n
        ));
    }
    format!(
        "{HEAD}<p:presentation {NS} saveSubsetFonts=\"1\">\
         <p:sldMasterIdLst><p:sldMasterId id=\"2147483648\" r:id=\"rId1\"/></p:sldMasterIdLst>\
         <p:sldIdLst>{ids}</p:sldIdLst>\
         <p:sldSz cx=\"{SLIDE_CX}\" cy=\"{SLIDE_CY}\"/><p:notesSz cx=\"6858000\" cy=\"9144000\"/>\
         <p:defaultTextStyle><a:defPPr><a:defRPr lang=\"en-US\"/></a:defPPr></p:defaultTextStyle>\
         </p:presentation>"
    )
}

pub fn pres_props() -> String {
    format!("{HEAD}<p:presentationPr {NS}/>")
}

pub fn view_props() -> String {
    format!(
        "{HEAD}<p:viewPr {NS}><p:normalViewPr><p:restoredLeft sz=\"15620\"/><p:restoredTop sz=\"94660\"/></p:normalViewPr>\
         <p:gridSpacing cx=\"76200\" cy=\"76200\"/></p:viewPr>"
    )
}

pub fn table_styles() -> String {
    format!(
        "{HEAD}<a:tblStyleLst xmlns:a=\"http://schemas.openxmlformats.org/drawingml/2006/main\" \
         def=\"{{5C22544A-7EE6-4342-B048-85BDC9FD1C3A}}\"/>"
    )
}

const GROUP: &str = "<p:nvGrpSpPr><p:cNvPr id=\"1\" name=\"\"/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr>\
    <p:grpSpPr><a:xfrm><a:off x=\"0\" y=\"0\"/><a:ext cx=\"0\" cy=\"0\"/><a:chOff x=\"0\" y=\"0\"/>\
    <a:chExt cx=\"0\" cy=\"0\"/></a:xfrm></p:grpSpPr>";

/// A placeholder shape: `ph` its `<p:ph …/>`, `at` its position and size
/// (`None`: inherited from the layout), `body` its paragraphs.
fn placeholder(
    id: u32,
    name: &str,
    ph: &str,
    at: Option<(u32, u32, u32, u32)>,
    body: &str,
) -> String {
    styled_placeholder(id, name, ph, at, "<a:bodyPr/><a:lstStyle/>", body)
}

/// A placeholder with its own body properties and list style (`text`).
fn styled_placeholder(
    id: u32,
    name: &str,
    ph: &str,
    at: Option<(u32, u32, u32, u32)>,
    text: &str,
    body: &str,
) -> String {
    let sp_pr = match at {
        Some((x, y, cx, cy)) => format!(
            "<p:spPr><a:xfrm><a:off x=\"{x}\" y=\"{y}\"/><a:ext cx=\"{cx}\" cy=\"{cy}\"/></a:xfrm>\
             <a:prstGeom prst=\"rect\"><a:avLst/></a:prstGeom></p:spPr>"
        ),
        None => "<p:spPr/>".to_string(),
    };
    format!(
        "<p:sp><p:nvSpPr><p:cNvPr id=\"{id}\" name=\"{name}\"/><p:cNvSpPr><a:spLocks noGrp=\"1\"/></p:cNvSpPr>\
         <p:nvPr>{ph}</p:nvPr></p:nvSpPr>{sp_pr}<p:txBody>{text}{body}</p:txBody></p:sp>"
    )
}

/// One paragraph holding `text` as one run (an empty paragraph for "").
fn paragraph(text: &str) -> String {
    if text.is_empty() {
        return "<a:p><a:endParaRPr lang=\"en-US\"/></a:p>".to_string();
    }
    format!(
        "<a:p><a:r><a:rPr lang=\"en-US\" dirty=\"0\"/><a:t>{}</a:t></a:r></a:p>",
        esc(text)
    )
}

const TITLE_AT: (u32, u32, u32, u32) = (838_200, 365_125, 10_515_600, 1_325_563);
const BODY_AT: (u32, u32, u32, u32) = (838_200, 1_825_625, 10_515_600, 4_351_338);

pub fn master() -> String {
    let title = placeholder(
        2,
        "Title Placeholder 1",
        "<p:ph type=\"title\"/>",
        Some(TITLE_AT),
        &paragraph("Title"),
    );
    let body = placeholder(
        3,
        "Text Placeholder 2",
        "<p:ph type=\"body\" idx=\"1\"/>",
        Some(BODY_AT),
        &paragraph("Text"),
    );
    let level = |lvl: u32, mar: u32, size: u32| {
        format!(
            "<a:lvl{lvl}pPr marL=\"{mar}\" indent=\"-228600\" algn=\"l\" defTabSz=\"914400\" rtl=\"0\" eaLnBrk=\"1\" \
             latinLnBrk=\"0\" hangingPunct=\"1\"><a:lnSpc><a:spcPct val=\"90000\"/></a:lnSpc><a:spcBef>\
             <a:spcPts val=\"1000\"/></a:spcBef><a:buFont typeface=\"Arial\"/><a:buChar char=\"&#8226;\"/>\
             <a:defRPr sz=\"{size}\" kern=\"1200\"><a:solidFill><a:schemeClr val=\"tx1\"/></a:solidFill>\
             <a:latin typeface=\"+mn-lt\"/><a:ea typeface=\"+mn-ea\"/><a:cs typeface=\"+mn-cs\"/></a:defRPr></a:lvl{lvl}pPr>"
        )
    };
    format!(
        "{HEAD}<p:sldMaster {NS}><p:cSld><p:bg><p:bgRef idx=\"1001\"><a:schemeClr val=\"bg1\"/></p:bgRef></p:bg>\
         <p:spTree>{GROUP}{title}{body}</p:spTree></p:cSld>\
         <p:clrMap bg1=\"lt1\" tx1=\"dk1\" bg2=\"lt2\" tx2=\"dk2\" accent1=\"accent1\" accent2=\"accent2\" \
         accent3=\"accent3\" accent4=\"accent4\" accent5=\"accent5\" accent6=\"accent6\" hlink=\"hlink\" folHlink=\"folHlink\"/>\
         <p:sldLayoutIdLst><p:sldLayoutId id=\"2147483649\" r:id=\"rId1\"/><p:sldLayoutId id=\"2147483650\" r:id=\"rId2\"/></p:sldLayoutIdLst>\
         <p:txStyles><p:titleStyle><a:lvl1pPr algn=\"l\" defTabSz=\"914400\" rtl=\"0\" eaLnBrk=\"1\" latinLnBrk=\"0\" \
         hangingPunct=\"1\"><a:lnSpc><a:spcPct val=\"90000\"/></a:lnSpc><a:spcBef><a:spcPct val=\"0\"/></a:spcBef>\
         <a:buNone/><a:defRPr sz=\"4000\" kern=\"1200\"><a:solidFill><a:schemeClr val=\"tx2\"/></a:solidFill>\
         <a:latin typeface=\"+mj-lt\"/><a:ea typeface=\"+mj-ea\"/><a:cs typeface=\"+mj-cs\"/></a:defRPr></a:lvl1pPr></p:titleStyle>\
         <p:bodyStyle>{}{}</p:bodyStyle>\
         <p:otherStyle><a:defPPr><a:defRPr lang=\"en-US\"/></a:defPPr></p:otherStyle></p:txStyles></p:sldMaster>",
        level(1, 228_600, 2400),
        level(2, 685_800, 2000),
    )
}

pub fn master_rels() -> String {
    relationships(&[
        (
            format!("{REL}/slideLayout"),
            "../slideLayouts/slideLayout1.xml",
        ),
        (
            format!("{REL}/slideLayout"),
            "../slideLayouts/slideLayout2.xml",
        ),
        (format!("{REL}/theme"), "../theme/theme1.xml"),
    ])
}

/// Layout 1, the title slide; layout 2, title and content.
pub fn layout(n: u32) -> String {
    let (kind, name, shapes) = if n == 1 {
        (
            "title",
            "Title Slide",
            // Centred, the title larger and the subtitle without a bullet.
            styled_placeholder(
                2,
                "Title 1",
                "<p:ph type=\"ctrTitle\"/>",
                Some((1_524_000, 1_122_363, 9_144_000, 2_387_600)),
                "<a:bodyPr anchor=\"b\"/><a:lstStyle><a:lvl1pPr algn=\"ctr\"><a:defRPr sz=\"5400\"/></a:lvl1pPr></a:lstStyle>",
                &paragraph(""),
            ) + &styled_placeholder(
                3,
                "Subtitle 2",
                "<p:ph type=\"subTitle\" idx=\"1\"/>",
                Some((1_524_000, 3_602_038, 9_144_000, 1_655_762)),
                "<a:bodyPr/><a:lstStyle><a:lvl1pPr marL=\"0\" indent=\"0\" algn=\"ctr\"><a:buNone/><a:defRPr sz=\"2400\"/></a:lvl1pPr></a:lstStyle>",
                &paragraph(""),
            ),
        )
    } else {
        (
            "obj",
            "Title and Content",
            placeholder(2, "Title 1", "<p:ph type=\"title\"/>", None, &paragraph(""))
                + &placeholder(
                    3,
                    "Content Placeholder 2",
                    "<p:ph idx=\"1\"/>",
                    None,
                    &paragraph(""),
                ),
        )
    };
    format!(
        "{HEAD}<p:sldLayout {NS} type=\"{kind}\" preserve=\"1\"><p:cSld name=\"{name}\"><p:spTree>{GROUP}{shapes}</p:spTree></p:cSld>\
         <p:clrMapOvr><a:masterClrMapping/></p:clrMapOvr></p:sldLayout>"
    )
}

pub fn layout_rels() -> String {
    relationships(&[(
        format!("{REL}/slideMaster"),
        "../slideMasters/slideMaster1.xml",
    )])
}

pub fn slide(part: &SlidePart<'_>) -> String {
    let shapes = match part.subtitle {
        Some(subtitle) => {
            placeholder(
                2,
                "Title 1",
                "<p:ph type=\"ctrTitle\"/>",
                None,
                &paragraph(part.title),
            ) + &placeholder(
                3,
                "Subtitle 2",
                "<p:ph type=\"subTitle\" idx=\"1\"/>",
                None,
                &paragraph(subtitle),
            )
        }
        None => {
            let body: String = if part.bullets.is_empty() {
                paragraph("")
            } else {
                part.bullets.iter().map(|b| paragraph(b)).collect()
            };
            let mut shapes =
                placeholder(
                    2,
                    "Title 1",
                    "<p:ph type=\"title\"/>",
                    None,
                    &paragraph(part.title),
                ) + &placeholder(3, "Content Placeholder 2", "<p:ph idx=\"1\"/>", None, &body);
            if !part.suggestion.is_empty() {
                shapes.push_str(&format!(
                    "<p:sp><p:nvSpPr><p:cNvPr id=\"4\" name=\"Visual suggestion\"/><p:cNvSpPr txBox=\"1\"/><p:nvPr/></p:nvSpPr>\
                     <p:spPr><a:xfrm><a:off x=\"838200\" y=\"6245225\"/><a:ext cx=\"10515600\" cy=\"400110\"/></a:xfrm>\
                     <a:prstGeom prst=\"rect\"><a:avLst/></a:prstGeom><a:noFill/></p:spPr>\
                     <p:txBody><a:bodyPr wrap=\"square\" rtlCol=\"0\"><a:spAutoFit/></a:bodyPr><a:lstStyle/>\
                     <a:p><a:r><a:rPr lang=\"en-US\" sz=\"1400\" i=\"1\" dirty=\"0\"><a:solidFill><a:schemeClr val=\"accent1\"/>\
                     </a:solidFill></a:rPr><a:t>{}</a:t></a:r></a:p></p:txBody></p:sp>",
                    esc(part.suggestion)
                ));
            }
            shapes
        }
    };
    format!(
        "{HEAD}<p:sld {NS}><p:cSld><p:spTree>{GROUP}{shapes}</p:spTree></p:cSld>\
         <p:clrMapOvr><a:masterClrMapping/></p:clrMapOvr></p:sld>"
    )
}

pub fn slide_rels(title_slide: bool) -> String {
    let target = if title_slide {
        "../slideLayouts/slideLayout1.xml"
    } else {
        "../slideLayouts/slideLayout2.xml"
    };
    relationships(&[(format!("{REL}/slideLayout"), target)])
}

pub fn theme() -> String {
    let colour = |name: &str, rgb: &str| format!("<a:{name}><a:srgbClr val=\"{rgb}\"/></a:{name}>");
    let colours: String = [
        ("dk1", "000000"),
        ("lt1", "FFFFFF"),
        ("dk2", "1F2A44"),
        ("lt2", "E7E6E6"),
        ("accent1", "2F5597"),
        ("accent2", "ED7D31"),
        ("accent3", "A5A5A5"),
        ("accent4", "FFC000"),
        ("accent5", "5B9BD5"),
        ("accent6", "70AD47"),
        ("hlink", "0563C1"),
        ("folHlink", "954F72"),
    ]
    .iter()
    .map(|(n, c)| colour(n, c))
    .collect();
    let font = |kind: &str, face: &str| {
        format!(
            "<a:{kind}><a:latin typeface=\"{face}\"/><a:ea typeface=\"\"/><a:cs typeface=\"\"/></a:{kind}>"
        )
    };
    let solid = "<a:solidFill><a:schemeClr val=\"phClr\"/></a:solidFill>";
    let line = |w: u32| {
        format!(
            "<a:ln w=\"{w}\" cap=\"flat\" cmpd=\"sng\" algn=\"ctr\">{solid}<a:prstDash val=\"solid\"/><a:miter lim=\"800000\"/></a:ln>"
        )
    };
    format!(
        "{HEAD}<a:theme xmlns:a=\"http://schemas.openxmlformats.org/drawingml/2006/main\" name=\"Skillhost\">\
         <a:themeElements><a:clrScheme name=\"Skillhost\">{colours}</a:clrScheme>\
         <a:fontScheme name=\"Skillhost\">{}{}</a:fontScheme>\
         <a:fmtScheme name=\"Skillhost\"><a:fillStyleLst>{solid}{solid}{solid}</a:fillStyleLst>\
         <a:lnStyleLst>{}{}{}</a:lnStyleLst>\
         <a:effectStyleLst><a:effectStyle><a:effectLst/></a:effectStyle><a:effectStyle><a:effectLst/></a:effectStyle>\
         <a:effectStyle><a:effectLst/></a:effectStyle></a:effectStyleLst>\
         <a:bgFillStyleLst>{solid}{solid}{solid}</a:bgFillStyleLst></a:fmtScheme></a:themeElements>\
         <a:objectDefaults/><a:extraClrSchemeLst/></a:theme>",
        font("majorFont", "Arial"),
        font("minorFont", "Arial"),
        line(6350),
        line(12700),
        line(19050),
    )
}
