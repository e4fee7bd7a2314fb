//! The slide deck workflow end to end through the real `host` binary: the
//! content of a granted folder analysed, outlined, worded a slide a section
//! (a map node), given a visual suggestion a slide (a map node, the C
//! skill), and exported as a `.pptx` artifact; the file opened by
//! python-pptx, an implementation nobody here wrote, and checked against
//! the outline; rendered by LibreOffice into one page a slide, none blank;
//! content with too few sections ending in the fail node; a kill at several
//! points then `host resume` giving the same file byte for byte.
//!
//! python-pptx (`python3 -m pip install python-pptx==1.0.2`), LibreOffice
//! (`apt-get install --no-install-recommends libreoffice-impress`) and
//! poppler (`apt-get install poppler-utils`) are installed by `.ci/run`; a
//! test whose tool is missing fails saying what to install.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use skillhost_tests::cli::{
    example_checks_and_readme_shows_its_graph, host_in_repo, json, killed_and_resumed_match,
    run_to_completion, shipped_skill_is_what_its_source_builds_to, stderr,
};
use skillhost_tests::fake_llm_server::{FakeLlmServer, FakeReply, ReceivedRequest};

const TALK: &str = r#"{"dir": "talk"}"#;
/// The level-2 headings of `inputs/talk`, in order: the outline's sections
/// and the slides' titles.
const SECTIONS: [&str; 5] = [
    "Why cycling matters",
    "What the numbers say",
    "Safe streets",
    "What a city can do first",
    "Next steps",
];
const PPTX_MEDIA_TYPE: &str =
    "application/vnd.openxmlformats-officedocument.presentationml.presentation";

/// `host` run from the repository's root, so `ppt` names the example.
fn host(dir: &Path, args: &[&str]) -> Output {
    host_in_repo(dir, args, None)
}

/// Runs the example on `talk` to completion, writing the deck to
/// `dir/deck.pptx`; returns the outcome and the file.
fn run_talk(dir: &Path) -> (Value, PathBuf) {
    let deck = dir.join("deck.pptx");
    (run_to_completion(dir, "ppt", TALK, &deck), deck)
}

/// Runs `program` with `args`, failing the test with `install` when the
/// program is missing and with its stderr when it fails.
fn tool(program: &str, args: &[&str], install: &str) -> Output {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run `{program}` ({e}); install it: {install}"));
    assert!(
        out.status.success(),
        "`{program} {}` failed; if a module or tool is missing, install it: {install}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// What python-pptx reads from the file: each slide's layout name, title,
/// body placeholder's paragraphs and every shape's text; and what Python's
/// zipfile sees of the container (names in order, dates).
const READ_DECK: &str = r#"
import json, sys, zipfile
import pptx
assert pptx.__version__ == "1.0.2", "python-pptx " + pptx.__version__ + ", the test expects 1.0.2"
from pptx import Presentation
deck = Presentation(sys.argv[1])
slides = []
for slide in deck.slides:
    body = [ph for ph in slide.placeholders if ph.placeholder_format.idx == 1]
    slides.append({
        "layout": slide.slide_layout.name,
        "title": slide.shapes.title.text,
        "body": [p.text for p in body[0].text_frame.paragraphs] if body else None,
        "texts": [s.text_frame.text for s in slide.shapes if s.has_text_frame],
    })
archive = zipfile.ZipFile(sys.argv[1])
print(json.dumps({
    "slides": slides,
    "width": deck.slide_width, "height": deck.slide_height,
    "title": deck.core_properties.title,
    "entries": [i.filename for i in archive.infolist()],
    "dates": sorted({str(i.date_time) for i in archive.infolist()}),
    "bad": archive.testzip(),
}))
"#;

fn read_deck(deck: &Path) -> Value {
    let out = tool(
        "python3",
        &["-c", READ_DECK, deck.to_str().unwrap()],
        "python3 -m pip install python-pptx==1.0.2",
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_deck_has_a_slide_per_section_that_python_pptx_reads_back() {
    let dir = tempfile::tempdir().unwrap();
    let (outcome, deck) = run_talk(dir.path());
    assert_eq!(outcome["status"], "completed");
    let state = &outcome["state"];
    assert_eq!(state["sources"], json!(["city-cycling.md"]));

    // The outline: the level-2 headings, in order; the intro left out.
    let outline = &state["outline"];
    assert_eq!(outline["title"], "Cycling in the City");
    let sections = outline["sections"].as_array().unwrap();
    let titles: Vec<&str> = sections
        .iter()
        .map(|s| s["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, SECTIONS);
    // A slide a section, numbered after the title slide; bullets are the
    // section's first five points, the sixth in the notes.
    let slides = state["slides"].as_array().unwrap();
    assert_eq!(slides.len(), sections.len());
    for (i, (slide, section)) in slides.iter().zip(sections).enumerate() {
        assert_eq!(slide["number"], json!(i + 2));
        assert_eq!(slide["title"], section["title"]);
        let points = section["points"].as_array().unwrap();
        let bullets = slide["bullets"].as_array().unwrap();
        assert_eq!(bullets[..], points[..points.len().min(5)], "{slide}");
    }
    assert_eq!(slides[3]["notes"], "Publish the counts every year");

    // The C skill's suggestions, by its rules: figures with years make a
    // line chart; two bullets or fewer, an image of the title.
    let layouts: Vec<(&str, &str)> = state["visuals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["layout"].as_str().unwrap(), v["chart"].as_str().unwrap()))
        .collect();
    assert_eq!(
        layouts,
        [
            ("title-and-content", ""),
            ("title-and-chart", "line"),
            ("title-and-image", ""),
            ("title-and-content", ""),
            ("title-and-image", ""),
        ]
    );
    assert_eq!(state["visuals"][2]["image"], "Safe streets");
    assert_eq!(outcome["summary"]["slides"], 6);

    // python-pptx reads the file: the title slide, then each slide's title
    // and bullets as the outline has them, and its suggestion in a text box.
    let read = read_deck(&deck);
    assert_eq!(read["bad"], Value::Null, "a zip entry fails its CRC");
    assert_eq!(
        (read["width"].clone(), read["height"].clone()),
        (json!(12192000), json!(6858000))
    );
    assert_eq!(read["title"], "Cycling in the City");
    let pages = read["slides"].as_array().unwrap();
    assert_eq!(pages.len(), slides.len() + 1);
    assert_eq!(pages[0]["layout"], "Title Slide");
    assert_eq!(pages[0]["title"], "Cycling in the City");
    assert_eq!(
        pages[0]["body"],
        json!(["5 sections, from city-cycling.md"])
    );
    for ((page, slide), visual) in pages[1..]
        .iter()
        .zip(slides)
        .zip(state["visuals"].as_array().unwrap())
    {
        assert_eq!(page["layout"], "Title and Content");
        assert_eq!(page["title"], slide["title"]);
        assert_eq!(page["body"], slide["bullets"]);
        assert_eq!(
            page["texts"].as_array().unwrap().last().unwrap(),
            &visual["suggestion"]
        );
    }
    // The container: fixed order, content types first, one date (1980).
    let entries = read["entries"].as_array().unwrap();
    assert_eq!(entries[0], "[Content_Types].xml");
    for part in [
        "_rels/.rels",
        "ppt/presentation.xml",
        "ppt/_rels/presentation.xml.rels",
        "ppt/slideMasters/slideMaster1.xml",
        "ppt/slideLayouts/slideLayout1.xml",
        "ppt/slideLayouts/slideLayout2.xml",
        "ppt/theme/theme1.xml",
        "ppt/slides/slide6.xml",
    ] {
        assert!(entries.contains(&json!(part)), "{part} in {entries:?}");
    }
    assert_eq!(read["dates"], json!(["(1980, 1, 1, 0, 0, 0)"]));
    assert_eq!(state["deck"]["parts"], read["entries"]);

    // The store keeps the bytes with their media type; `runs artifact`
    // writes the same file.
    let run_id = outcome["run_id"].as_str().unwrap();
    let shown = json(&host(dir.path(), &["runs", "show", run_id, "--json"]));
    let artifact = &shown["artifacts"][0];
    assert_eq!(artifact["name"], "deck.pptx");
    assert_eq!(artifact["media_type"], PPTX_MEDIA_TYPE);
    let again = dir.path().join("again.pptx");
    let out = host(
        dir.path(),
        &[
            "runs",
            "artifact",
            run_id,
            "deck.pptx",
            "--out",
            again.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(std::fs::read(&again).unwrap() == std::fs::read(&deck).unwrap());
}

/// A grey-scale PGM (`P5`, 8-bit) as its pixels.
fn pgm_pixels(bytes: &[u8]) -> Vec<u8> {
    // Header: magic, width, height, maxval, each after whitespace.
    let mut fields = 0;
    let mut i = 0;
    while fields < 4 {
        while bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        while !bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        fields += 1;
    }
    bytes[i + 1..].to_vec()
}

fn variance(pixels: &[u8]) -> f64 {
    let n = pixels.len() as f64;
    let mean = pixels.iter().map(|&p| p as f64).sum::<f64>() / n;
    pixels
        .iter()
        .map(|&p| (p as f64 - mean).powi(2))
        .sum::<f64>()
        / n
}

/// LibreOffice (headless) renders the deck to PDF, poppler each page to an
/// image: one page a slide, and none blank (its pixels vary). The PNGs
/// are kept under `target/tmp/ppt-render/` to look at.
#[test]
fn libreoffice_renders_one_page_a_slide_and_none_is_blank() {
    let dir = tempfile::tempdir().unwrap();
    let (outcome, deck) = run_talk(dir.path());
    let slides = outcome["state"]["deck"]["slides"].as_u64().unwrap() as usize;
    let profile = format!(
        "-env:UserInstallation=file://{}/lo-profile",
        dir.path().display()
    );
    tool(
        "soffice",
        &[
            &profile,
            "--headless",
            "--convert-to",
            "pdf",
            "--outdir",
            dir.path().to_str().unwrap(),
            deck.to_str().unwrap(),
        ],
        "apt-get install --no-install-recommends libreoffice-impress",
    );
    let pdf = dir.path().join("deck.pdf");
    assert!(pdf.is_file(), "LibreOffice wrote no PDF");

    let poppler = "apt-get install poppler-utils";
    let gray = dir.path().join("page");
    tool(
        "pdftoppm",
        &[
            "-r",
            "30",
            "-gray",
            pdf.to_str().unwrap(),
            gray.to_str().unwrap(),
        ],
        poppler,
    );
    let mut pages: Vec<PathBuf> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "pgm"))
        .collect();
    pages.sort();
    assert_eq!(pages.len(), slides, "{pages:?}");
    for page in &pages {
        let v = variance(&pgm_pixels(&std::fs::read(page).unwrap()));
        assert!(
            v > 50.0,
            "{} looks blank (pixel variance {v:.1})",
            page.display()
        );
    }

    let keep = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ppt-render");
    std::fs::create_dir_all(&keep).unwrap();
    tool(
        "pdftoppm",
        &[
            "-r",
            "50",
            "-png",
            pdf.to_str().unwrap(),
            keep.join("slide").to_str().unwrap(),
        ],
        poppler,
    );
}

#[test]
fn an_outline_of_fewer_than_three_sections_ends_in_the_fail_node() {
    let dir = tempfile::tempdir().unwrap();
    let out = host(
        dir.path(),
        &["run", "ppt", "--input", r#"{"dir": "thin"}"#, "--json"],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "failed");
    let failure = &outcome["failure"];
    assert_eq!(failure["node"], "outline", "{failure}");
    assert_eq!(failure["handler"], "deck_error", "{failure}");
    assert_eq!(failure["code"], "postcondition-failed", "{failure}");
    assert_eq!(
        failure["message"],
        "node `outline`: postcondition `at least three sections` failed: the outline has fewer \
         than 3 sections, too few for a deck; give the content at least three `## ` headings \
         (or, without headings, three paragraphs)"
    );
    assert_eq!(failure["suggestions"].as_array().unwrap().len(), 2);
    // Nothing past the outline ran; no file was made.
    assert_eq!(outcome["state"]["slides"], json!([]));
    assert_eq!(outcome["artifacts"], json!([]));
}

#[test]
fn content_given_as_text_needs_no_folder() {
    let dir = tempfile::tempdir().unwrap();
    let input = json!({
        "text": "# Plan\n\n## One\n- a\n\n## Two\n- b\n\n## Three\n- c\n",
        "title": "Given title",
    })
    .to_string();
    let deck = dir.path().join("deck.pptx");
    let out = host(
        dir.path(),
        &[
            "run",
            "ppt",
            "--input",
            &input,
            "--out",
            deck.to_str().unwrap(),
            "--json",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["state"]["sources"], json!(["input"]));
    assert_eq!(outcome["summary"]["title"], "Given title");
    assert_eq!(outcome["summary"]["sections"], 3);
    assert!(std::fs::read(&deck).unwrap().starts_with(b"PK\x03\x04"));
}

#[test]
fn killed_mid_run_and_resumed_gives_the_same_pptx() {
    let dir = tempfile::tempdir().unwrap();
    // After the outline, inside each map, and before the export's commit.
    killed_and_resumed_match(
        dir.path(),
        &["run", "ppt", "--input", TALK],
        &[
            "after-commit:outline",
            "map-item:slides:2",
            "map-item:visuals:3",
            "before-commit:export",
        ],
    );
}

#[test]
fn the_scenario_passes_the_checker_and_the_readme_shows_its_graph() {
    let dir = tempfile::tempdir().unwrap();
    example_checks_and_readme_shows_its_graph(dir.path(), "ppt");
}

/// The C skill on its own (`host skill call`): each of its rules, and its
/// refusals.
#[test]
fn the_visual_rules_pick_a_chart_an_image_or_a_layout() {
    let dir = tempfile::tempdir().unwrap();
    let visual = skillhost_tests::dist("ppt-visual");
    let call = |bullets: &[&str]| {
        let input = json!({ "number": 2, "title": "Topic", "bullets": bullets }).to_string();
        let out = host(
            dir.path(),
            &[
                "skill",
                "call",
                visual.to_str().unwrap(),
                "--input",
                &input,
                "--json",
            ],
        );
        json(&out)
    };
    for (bullets, layout, chart) in [
        (&["up 3%", "down 4%", "flat"][..], "title-and-chart", "pie"),
        (&["in 1999 a", "in 2005 b"][..], "title-and-chart", "line"),
        (&["12 vans", "3 cars"][..], "title-and-chart", "bar"),
        (&["12345 is no year", "7"][..], "title-and-chart", "bar"),
        (&["one"][..], "title-and-image", ""),
        (&["a", "b", "c", "d", "e", "f"][..], "two-column", ""),
        (&["a", "b", "c"][..], "title-and-content", ""),
    ] {
        let report = call(bullets);
        let output = &report["output"];
        assert_eq!(output["layout"], layout, "{bullets:?}: {report}");
        assert_eq!(output["chart"], chart, "{bullets:?}: {report}");
        assert_eq!(output["number"], 2);
    }
    assert_eq!(
        call(&["x"])["output"]["suggestion"],
        "Image: a picture of Topic"
    );

    let input = json!({ "number": 1, "title": "T", "bullets": [] }).to_string();
    let out = host(
        dir.path(),
        &[
            "skill",
            "call",
            visual.to_str().unwrap(),
            "--input",
            &input,
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let report = json(&out);
    assert_eq!(report["error"]["code"], "invalid-input");
    assert!(
        report["error"]["message"]
            .as_str()
            .unwrap()
            .contains("slide 1 is the title slide"),
        "{report}"
    );
}

/// The visual skill is C, shipped built in `skills/dist` so the example
/// runs without a C toolchain; built again from its source, it gives the
/// same bytes.
#[test]
fn the_shipped_c_visual_skill_is_what_its_source_builds_to() {
    let dir = tempfile::tempdir().unwrap();
    shipped_skill_is_what_its_source_builds_to(
        dir.path(),
        "ppt-visual",
        "scripts/install-guest-toolchains.sh c",
    );
}

/// `examples/ppt/llm.toml` is `scenario.toml` with exactly the outline
/// skill, its `llm` grant and the name changed, so the two never drift.
#[test]
fn the_llm_variant_is_the_scenario_with_only_the_outline_skill_changed() {
    skillhost_tests::assert_variant_of_scenario(
        "ppt",
        "llm.toml",
        &[
            ("name = \"ppt\"\n", "name = \"ppt-llm\"\n"),
            ("ppt-outline.wasm", "ppt-outline-llm.wasm"),
            (
                "a deck needs at least three\"\n",
                "a deck needs at least three\"\ncapabilities = { llm = { provider = \"local\", \
                 model = \"qwen2.5:7b-instruct\", max_tokens = 2048, temperature = 0 } }\n",
            ),
        ],
    );
}

/// The deterministic "model" of the LLM variant: from the content it is
/// sent (after `Content:\n`), a section for each `## ` heading with the
/// `- ` bullets under it, the first `sections` of them.
fn outliner(sections: usize) -> impl Fn(&ReceivedRequest) -> Option<FakeReply> + Send + Sync {
    move |request| {
        let content = request.last_message_after("Content:\n")?;
        let mut outline: Vec<Value> = Vec::new();
        for line in content.lines() {
            if let Some(title) = line.strip_prefix("## ") {
                outline.push(json!({ "title": title, "points": [] }));
            } else if let (Some(point), Some(last)) = (line.strip_prefix("- "), outline.last_mut())
            {
                last["points"].as_array_mut().unwrap().push(json!(point));
            }
        }
        outline.truncate(sections);
        let answer = json!({ "sections": outline });
        Some(FakeReply::openai_content(&answer.to_string()))
    }
}

/// Runs `examples/ppt/llm.toml` on `talk` with the `local` provider
/// pointing at `server`.
fn run_with_model(dir: &Path, server: &FakeLlmServer) -> Output {
    server.configure_user(dir);
    let deck = dir.join("deck.pptx");
    host(
        dir,
        &[
            "run",
            "examples/ppt/llm.toml",
            "--input",
            TALK,
            "--out",
            deck.to_str().unwrap(),
            "--json",
        ],
    )
}

#[test]
fn with_a_model_outlining_the_deck_its_sections_become_the_slides() {
    let server = FakeLlmServer::start_with(outliner(10));
    let dir = tempfile::tempdir().unwrap();
    let out = run_with_model(dir.path(), &server);
    assert!(out.status.success(), "{}", stderr(&out));
    let outcome = json(&out);
    assert_eq!(outcome["status"], "completed", "{outcome}");
    assert_eq!(server.request_count(), 1, "one completion for the outline");
    let request = server.requests()[0].json();
    assert!(
        request["response_format"]["json_schema"].is_object(),
        "the outline's schema is sent: {request}"
    );
    // The model's sections (the `## ` headings, with their bullets) are
    // the slides, in its order.
    let slides = outcome["state"]["slides"].as_array().unwrap();
    let titles: Vec<&str> = slides
        .iter()
        .map(|s| s["title"].as_str().unwrap())
        .collect();
    assert_eq!(titles, SECTIONS);
    assert_eq!(
        slides[0]["bullets"],
        json!([
            "Half of all car trips in many cities are shorter than five kilometres",
            "A bicycle lane carries several times more people than a car lane of the same width"
        ])
    );
    assert_eq!(slides[2]["bullets"], json!([]));
    let read = read_deck(&dir.path().join("deck.pptx"));
    assert_eq!(read["slides"].as_array().unwrap().len(), 6);
}

#[test]
fn a_model_outline_of_two_sections_ends_in_the_fail_node() {
    let server = FakeLlmServer::start_with(outliner(2));
    let dir = tempfile::tempdir().unwrap();
    let out = run_with_model(dir.path(), &server);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let failure = &json(&out)["failure"];
    assert_eq!(failure["node"], "outline", "{failure}");
    assert_eq!(failure["handler"], "deck_error", "{failure}");
    assert_eq!(failure["code"], "postcondition-failed", "{failure}");
    assert!(!dir.path().join("deck.pptx").exists());
}

/// `host serve` hands the stored deck out as bytes with its media type, the
/// same bytes `host run` wrote.
#[test]
fn host_serve_downloads_the_deck_with_its_media_type() {
    let dir = tempfile::tempdir().unwrap();
    let (outcome, deck) = run_talk(dir.path());
    let run_id = outcome["run_id"].as_str().unwrap();
    let addr = format!("127.0.0.1:{}", skillhost_tests::free_port());
    let mut serve =
        skillhost_tests::cli::host_command(dir.path(), &["serve", "--addr", &addr], None)
            .current_dir(skillhost_tests::repo_root())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start host serve");
    let url = format!("http://{addr}/api/runs/{run_id}/artifacts/deck.pptx");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let response = loop {
        match reqwest::blocking::get(&url) {
            Ok(response) => break response,
            Err(e) if std::time::Instant::now() > deadline => {
                let _ = serve.kill();
                panic!("host serve did not answer {url}: {e}");
            }
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(100)),
        }
    };
    let status = response.status().as_u16();
    let media_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    let bytes = response.bytes().unwrap();
    let _ = serve.kill();
    let _ = serve.wait();
    assert_eq!(status, 200);
    assert_eq!(media_type, PPTX_MEDIA_TYPE);
    assert!(bytes[..] == std::fs::read(&deck).unwrap()[..]);
}
