//! Reading the corpus: every `*.jsonl` file of a directory, one JSON paper
//! per line (format: examples/research/CORPUS.md).

use std::collections::BTreeMap;

use serde::Deserialize;
use skillhost_sdk::{EntryKind, SkillError, fs};

/// The error code for a corpus that cannot be read as papers.
pub const INVALID_CORPUS: &str = "invalid-corpus";

/// One line of a corpus file. Only `id` is required; everything else may be
/// missing or `null` (a paper without a title, abstract or url is kept but
/// reported invalid). Unknown fields are ignored.
#[derive(Debug, Deserialize)]
struct Record {
    id: String,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    authors: Option<Vec<String>>,
    #[serde(default, rename = "abstract")]
    abstract_: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default)]
    published: Option<String>,
    #[serde(default)]
    year: Option<u32>,
    #[serde(default)]
    topics: Option<Vec<String>>,
}

/// A paper as read from the corpus, before scoring.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusPaper {
    pub id: String,
    pub title: String,
    pub authors: Vec<String>,
    pub abstract_: String,
    pub url: String,
    pub source: String,
    pub published: String,
    pub year: u32,
    pub topics: Vec<String>,
    /// What makes the paper invalid (`missing title`, …); empty when valid.
    pub issues: Vec<String>,
}

impl CorpusPaper {
    fn from_record(r: Record) -> Self {
        let title = r.title.unwrap_or_default();
        let abstract_ = r.abstract_.unwrap_or_default();
        let url = r.url.unwrap_or_default();
        let published = r.published.unwrap_or_default();
        let issues = [("title", &title), ("abstract", &abstract_), ("url", &url)]
            .into_iter()
            .filter(|(_, value)| value.trim().is_empty())
            .map(|(field, _)| format!("missing {field}"))
            .collect();
        let year = r.year.unwrap_or_else(|| year_of(&published));
        CorpusPaper {
            id: r.id,
            title,
            authors: r.authors.unwrap_or_default(),
            abstract_,
            url,
            source: r.source.unwrap_or_default(),
            published,
            year,
            topics: r.topics.unwrap_or_default(),
            issues,
        }
    }
}

/// The year of a `YYYY-MM-DD` (or `YYYY`) date; 0 when there is none.
fn year_of(date: &str) -> u32 {
    match date.get(..4) {
        Some(y) if y.bytes().all(|b| b.is_ascii_digit()) => y.parse().unwrap_or(0),
        _ => 0,
    }
}

fn invalid(message: String) -> SkillError {
    SkillError::new(INVALID_CORPUS, message)
}

/// Parses the text of one corpus file, `name` being its path for messages.
/// Blank lines are skipped; line numbers start at 1.
pub fn parse_file(name: &str, text: &str) -> Result<Vec<(usize, CorpusPaper)>, SkillError> {
    let mut papers = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(line).map_err(|e| {
            invalid(format!(
                "{name}:{line_no}: not a paper record ({e}); each line must be one JSON object with at least an \"id\" (see examples/research/CORPUS.md)"
            ))
        })?;
        if record.id.trim().is_empty() {
            return Err(invalid(format!("{name}:{line_no}: \"id\" is empty")));
        }
        papers.push((line_no, CorpusPaper::from_record(record)));
    }
    Ok(papers)
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

/// Every paper of the `*.jsonl` files directly in `dir`, files in name
/// order, papers in line order. Fails on a malformed line or a duplicate id,
/// naming the file and line.
pub fn load(dir: &str) -> Result<(Vec<CorpusPaper>, usize), SkillError> {
    let mut entries = fs::list_dir(dir).map_err(|e| {
        e.context(format!(
            "paper-discovery cannot list corpus directory `{dir}`"
        ))
    })?;
    entries.retain(|e| e.kind == EntryKind::File && e.name.ends_with(".jsonl"));
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    if entries.is_empty() {
        return Err(invalid(format!(
            "no *.jsonl file in corpus directory `{dir}` (relative to the granted directory); see examples/research/CORPUS.md"
        )));
    }
    let mut papers = Vec::new();
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    for entry in &entries {
        let path = join(dir, &entry.name);
        let text = fs::read_text(&path)
            .map_err(|e| e.context(format!("paper-discovery cannot read `{path}`")))?;
        for (line_no, paper) in parse_file(&path, &text)? {
            let here = format!("{path}:{line_no}");
            if let Some(first) = seen.insert(paper.id.clone(), here.clone()) {
                return Err(invalid(format!(
                    "{here}: duplicate id \"{}\" (first at {first}); ids must be unique across the corpus",
                    paper.id
                )));
            }
            papers.push(paper);
        }
    }
    Ok((papers, entries.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_and_partial_records() {
        let text = concat!(
            r#"{"id": "p1", "title": "T", "authors": ["A B"], "abstract": "Abs.", "url": "https://x/p1", "source": "arXiv", "published": "2021-03-04", "topics": ["t"], "extra": 1}"#,
            "\n\n",
            r#"{"id": "p2", "title": null, "abstract": "", "year": 1999}"#,
            "\n",
        );
        let papers = parse_file("c.jsonl", text).unwrap();
        assert_eq!(papers.len(), 2);
        let (line, p1) = &papers[0];
        assert_eq!(*line, 1);
        assert_eq!(p1.year, 2021);
        assert_eq!(p1.authors, ["A B"]);
        assert!(p1.issues.is_empty());
        let (line, p2) = &papers[1];
        assert_eq!(*line, 3);
        assert_eq!(p2.year, 1999);
        assert_eq!(p2.title, "");
        assert_eq!(
            p2.issues,
            ["missing title", "missing abstract", "missing url"]
        );
    }

    #[test]
    fn malformed_lines_name_the_file_and_line() {
        let e = parse_file("dir/c.jsonl", "{\"id\": \"a\"}\n{\"id\": \"b\",\n").unwrap_err();
        assert_eq!(e.code, INVALID_CORPUS);
        assert!(e.message.starts_with("dir/c.jsonl:2: "), "{}", e.message);
        let e = parse_file("c.jsonl", "{\"title\": \"no id\"}").unwrap_err();
        assert!(e.message.starts_with("c.jsonl:1: "), "{}", e.message);
        assert!(e.message.contains("id"), "{}", e.message);
        let e = parse_file("c.jsonl", "{\"id\": \" \"}").unwrap_err();
        assert!(e.message.contains("empty"), "{}", e.message);
        let e = parse_file("c.jsonl", "{\"id\": \"x\", \"year\": \"2020\"}").unwrap_err();
        assert!(e.message.starts_with("c.jsonl:1: "), "{}", e.message);
    }

    #[test]
    fn year_comes_from_the_date_when_absent() {
        assert_eq!(year_of("2019-01-02"), 2019);
        assert_eq!(year_of("2019"), 2019);
        assert_eq!(year_of(""), 0);
        assert_eq!(year_of("May 2019"), 0);
    }

    #[test]
    fn join_handles_the_root() {
        assert_eq!(join("", "a.jsonl"), "a.jsonl");
        assert_eq!(join(".", "a.jsonl"), "a.jsonl");
        assert_eq!(join("corpus/", "a.jsonl"), "corpus/a.jsonl");
    }
}
