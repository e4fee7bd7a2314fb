//! `report-writer`: the research report as Markdown. Deterministic: the
//! same input gives the same bytes. Every claim's citations become numbered
//! references (`[1]`, `[2]`…) in the order they are first cited; quotes are
//! reproduced verbatim, each with the citation of the paper it comes from.

// The export glue wit-bindgen generates for `run` takes the input record
// flattened into 10 parameters.
#![allow(clippy::too_many_arguments)]

skillhost_sdk::generate!(
    "report-writer",
    with: { "skillhost:research/types@0.1.0": generate },
    additional_derives: [PartialEq],
);

use std::collections::BTreeMap;
use std::fmt::Write;

use skillhost_sdk::log;

/// The report's sections, in order (each a `##` heading).
pub const SECTIONS: [&str; 5] = [
    "Overview",
    "Findings",
    "Comparison",
    "Evidence",
    "References",
];

/// Authors listed before `et al.`.
const MAX_AUTHORS: usize = 3;

struct ReportWriter;

impl Guest for ReportWriter {
    skillhost_sdk::manifest! {
        name: "Report writer",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 2,
    }

    fn run(input: Input) -> Result<Report, SkillError> {
        let report = write_report(&input)?;
        log::info(format!(
            "report of {} bytes: {} claims, {} citations, {} references",
            report.markdown.len(),
            input.claims.len(),
            report.citation_count,
            report.reference_count
        ));
        Ok(report)
    }
}

export!(ReportWriter);

/// The numbered references: paper ids in citation order.
struct References<'a> {
    order: Vec<&'a Paper>,
    number: BTreeMap<&'a str, usize>,
}

impl<'a> References<'a> {
    fn add(&mut self, paper: &'a Paper) {
        if !self.number.contains_key(paper.id.as_str()) {
            self.order.push(paper);
            self.number.insert(&paper.id, self.order.len());
        }
    }

    fn cite(&self, id: &str) -> String {
        format!("[{}]", self.number[id])
    }
}

/// `text` fit for one Markdown table cell.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

/// `A`, `A and B`, `A, B and C`, `A, B, C et al.`.
fn authors(names: &[String]) -> String {
    let names: Vec<&str> = names
        .iter()
        .map(|n| n.trim())
        .filter(|n| !n.is_empty())
        .collect();
    match names.as_slice() {
        [] => "Unknown authors".to_string(),
        [one] => one.to_string(),
        list if list.len() <= MAX_AUTHORS => {
            let (last, init) = list.split_last().expect("not empty");
            format!("{} and {last}", init.join(", "))
        }
        list => format!("{} et al.", list[..MAX_AUTHORS].join(", ")),
    }
}

fn year(y: u32) -> String {
    if y == 0 {
        "n.d.".to_string()
    } else {
        y.to_string()
    }
}

fn title_of(paper: &Paper) -> &str {
    if paper.title.trim().is_empty() {
        &paper.id
    } else {
        paper.title.trim()
    }
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

/// The report for `input`.
pub fn write_report(input: &Input) -> Result<Report, SkillError> {
    let papers: BTreeMap<&str, &Paper> = input
        .papers
        .iter()
        .rev() // so the first paper with an id wins
        .map(|p| (p.id.as_str(), p))
        .collect();
    let lookup = |id: &str, what: String| {
        papers.get(id).copied().ok_or_else(|| {
            SkillError::invalid_input(format!(
                "{what} cites paper `{id}`, which is not among the {} papers given",
                input.papers.len()
            ))
        })
    };

    let mut refs = References {
        order: Vec::new(),
        number: BTreeMap::new(),
    };
    for claim in &input.claims {
        for id in &claim.supporting_paper_ids {
            refs.add(lookup(id, format!("claim {}", claim.id))?);
        }
    }
    for row in &input.matrix.rows {
        refs.add(lookup(
            &row.paper_id,
            format!("comparison row `{}`", row.title),
        )?);
    }

    let query = input.query.split_whitespace().collect::<Vec<_>>().join(" ");
    let title = if query.is_empty() {
        "Research report".to_string()
    } else {
        format!("Research report: {query}")
    };
    let mut md = String::new();
    let mut citations = 0u32;
    let _ = writeln!(md, "# {title}\n");

    // Overview.
    let _ = writeln!(md, "## {}\n", SECTIONS[0]);
    let years: Vec<u32> = refs
        .order
        .iter()
        .map(|p| p.year)
        .filter(|&y| y > 0)
        .collect();
    let span = match (years.iter().min(), years.iter().max()) {
        (Some(a), Some(b)) if a == b => format!(", published in {a}"),
        (Some(a), Some(b)) => format!(", published {a}\u{2013}{b}"),
        _ => String::new(),
    };
    let mut sources: Vec<String> = Vec::new();
    for p in &refs.order {
        let s = p.source.trim();
        if !s.is_empty() && !sources.iter().any(|x| x == s) {
            sources.push(s.to_string());
        }
    }
    let venues = if sources.is_empty() {
        String::new()
    } else {
        format!(" in {}", join_and(&sources))
    };
    let question = if query.is_empty() {
        String::new()
    } else {
        format!(" the question \u{201c}{query}\u{201d}")
    };
    let _ = writeln!(
        md,
        "This report examines{question} through {} papers{span}{venues}. \
         It states {} claims; each cites the papers that support it, and every quote under \
         Evidence is copied verbatim from the abstract of the paper it cites. The comparison \
         table sets the papers side by side on {}.\n",
        refs.order.len(),
        input.claims.len(),
        join_and(
            &input
                .matrix
                .dimensions
                .iter()
                .filter(|d| d.as_str() != "year")
                .cloned()
                .collect::<Vec<_>>()
        ),
    );

    // Findings.
    let _ = writeln!(md, "## {}\n", SECTIONS[1]);
    if input.claims.is_empty() {
        let _ = writeln!(md, "No claim could be supported by the papers found.\n");
    }
    for (i, claim) in input.claims.iter().enumerate() {
        let cites: Vec<String> = claim
            .supporting_paper_ids
            .iter()
            .map(|id| refs.cite(id))
            .collect();
        citations += cites.len() as u32;
        let _ = writeln!(
            md,
            "{}. **{}.** {} {}",
            i + 1,
            claim.id,
            claim.text.trim(),
            cites.join(", ")
        );
    }
    md.push('\n');

    // Comparison.
    let _ = writeln!(md, "## {}\n", SECTIONS[2]);
    let columns: Vec<&str> = input
        .matrix
        .dimensions
        .iter()
        .map(String::as_str)
        .filter(|d| matches!(*d, "method" | "data" | "results" | "limitations" | "year"))
        .collect();
    let mut header = vec!["Ref".to_string(), "Paper".to_string()];
    header.extend(columns.iter().map(|c| {
        let mut chars = c.chars();
        chars
            .next()
            .map(|f| f.to_uppercase().chain(chars).collect())
            .unwrap_or_default()
    }));
    let _ = writeln!(md, "| {} |", header.join(" | "));
    let _ = writeln!(md, "|{}", " --- |".repeat(header.len()));
    // Rows in reference order, so the table reads [1], [2], [3]…
    let mut rows: Vec<&ComparisonRow> = input.matrix.rows.iter().collect();
    rows.sort_by_key(|r| refs.number[r.paper_id.as_str()]);
    for row in rows {
        let mut cells = vec![refs.cite(&row.paper_id), cell(&row.title)];
        for c in &columns {
            cells.push(match *c {
                "method" => cell(&row.method),
                "data" => cell(&row.data),
                "results" => cell(&row.results),
                "limitations" => cell(&row.limitations),
                _ => year(row.year),
            });
        }
        let _ = writeln!(md, "| {} |", cells.join(" | "));
    }
    if input.matrix.rows.is_empty() {
        let _ = writeln!(md, "\nNo papers to compare.");
    }
    md.push('\n');

    // Evidence.
    let _ = writeln!(md, "## {}\n", SECTIONS[3]);
    for claim in &input.claims {
        let _ = writeln!(md, "### {}\n", claim.id);
        if claim.evidence.is_empty() {
            let _ = writeln!(md, "No quote given.\n");
        }
        for quote in &claim.evidence {
            // The cited paper whose abstract holds the quote; all of the
            // claim's citations if none does (the scenario's citation check
            // refuses such claims before they get here).
            let from: Vec<&String> = claim
                .supporting_paper_ids
                .iter()
                .filter(|id| papers[id.as_str()].abstract_.contains(quote.as_str()))
                .take(1)
                .collect();
            let from = if from.is_empty() {
                claim.supporting_paper_ids.iter().collect()
            } else {
                from
            };
            let cites: Vec<String> = from.iter().map(|id| refs.cite(id)).collect();
            citations += cites.len() as u32;
            let quote = quote.split_whitespace().collect::<Vec<_>>().join(" ");
            let _ = writeln!(md, "> {quote} {}\n", cites.join(", "));
        }
    }

    // References.
    let _ = writeln!(md, "## {}\n", SECTIONS[4]);
    for (i, p) in refs.order.iter().enumerate() {
        let mut entry = format!(
            "{}. {}. *{}*.",
            i + 1,
            authors(&p.authors).trim_end_matches('.'),
            title_of(p).trim_end_matches('.')
        );
        if !p.source.trim().is_empty() {
            let _ = write!(entry, " {},", p.source.trim());
        }
        let _ = write!(entry, " {}.", year(p.year));
        if !p.url.trim().is_empty() {
            let _ = write!(entry, " <{}>", p.url.trim());
        }
        let _ = writeln!(md, "{entry}");
    }

    Ok(Report {
        title,
        markdown: md,
        sections: SECTIONS.iter().map(|s| s.to_string()).collect(),
        citation_count: citations,
        reference_count: refs.order.len() as u32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paper(id: &str, year: u32, authors: &[&str], abstract_: &str) -> Paper {
        Paper {
            id: id.to_string(),
            title: format!("Title {id}"),
            authors: authors.iter().map(|a| a.to_string()).collect(),
            abstract_: abstract_.to_string(),
            url: format!("https://papers.example.org/{id}"),
            source: "NeurIPS".to_string(),
            published: format!("{year}-01-01"),
            year,
            topics: vec![],
            score: 1.0,
            valid: true,
            issues: vec![],
        }
    }

    fn row(id: &str, year: u32) -> ComparisonRow {
        ComparisonRow {
            paper_id: id.to_string(),
            title: format!("Title {id}"),
            year,
            method: format!("Method of {id} | with a pipe"),
            data: "not stated".to_string(),
            results: format!("Results of {id}."),
            limitations: "not stated".to_string(),
        }
    }

    fn claim(id: &str, cites: &[&str], evidence: &[&str]) -> Claim {
        Claim {
            id: id.to_string(),
            text: format!("Claim {id} text."),
            supporting_paper_ids: cites.iter().map(|s| s.to_string()).collect(),
            evidence: evidence.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn fixture() -> Input {
        Input {
            query: "graph  networks".to_string(),
            papers: vec![
                paper(
                    "a",
                    2019,
                    &["Ada Lovelace", "Alan Turing"],
                    "A finds X. A is fast.",
                ),
                paper("b", 2023, &["B1", "B2", "B3", "B4"], "B finds Y."),
                paper("c", 2021, &[], "C finds Z."),
            ],
            matrix: ComparisonMatrix {
                dimensions: ["method", "data", "results", "limitations", "year"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                rows: vec![row("a", 2019), row("b", 2023), row("c", 2021)],
            },
            claims: vec![
                claim("C1", &["b", "a"], &["B finds Y.", "A is fast."]),
                claim("C2", &["a"], &["A finds X."]),
            ],
        }
    }

    #[test]
    fn writes_every_section_with_numbered_citations() {
        let r = write_report(&fixture()).unwrap();
        let md = &r.markdown;
        assert_eq!(r.title, "Research report: graph networks");
        assert!(md.starts_with("# Research report: graph networks\n\n## Overview\n"));
        for s in SECTIONS {
            assert!(md.contains(&format!("\n## {s}\n")), "missing {s}");
        }
        assert_eq!(r.sections, SECTIONS);
        // b is cited first, so it is [1]; c only appears in the matrix.
        assert!(md.contains("1. **C1.** Claim C1 text. [1], [2]\n"), "{md}");
        assert!(md.contains("2. **C2.** Claim C2 text. [2]\n"), "{md}");
        assert!(md.contains("> B finds Y. [1]\n"), "{md}");
        assert!(md.contains("> A is fast. [2]\n"), "{md}");
        assert!(md.contains("### C2\n\n> A finds X. [2]\n"), "{md}");
        assert!(md.contains(
            "| Ref | Paper | Method | Data | Results | Limitations | Year |\n| --- | --- | --- | --- | --- | --- | --- |\n"
        ));
        assert!(md.contains("| [2] | Title a | Method of a \\| with a pipe | not stated | Results of a. | not stated | 2019 |"), "{md}");
        assert!(md.contains("| [3] | Title c |"), "{md}");
        // Rows in reference order, not matrix order.
        let row = |r: &str| md.find(&format!("| {r} | Title")).unwrap();
        assert!(row("[1]") < row("[2]") && row("[2]") < row("[3]"));
        assert!(
            md.contains(
                "1. B1, B2, B3 et al. *Title b*. NeurIPS, 2023. <https://papers.example.org/b>\n"
            ),
            "{md}"
        );
        assert!(md.contains("2. Ada Lovelace and Alan Turing. *Title a*. NeurIPS, 2019."));
        assert!(md.contains("3. Unknown authors. *Title c*."));
        assert!(
            md.contains("3 papers, published 2019\u{2013}2023 in NeurIPS"),
            "{md}"
        );
        // Findings: 3 citations; evidence: 3 quotes, one citation each.
        assert_eq!((r.citation_count, r.reference_count), (6, 3));
    }

    #[test]
    fn is_deterministic() {
        assert_eq!(
            write_report(&fixture()).unwrap(),
            write_report(&fixture()).unwrap()
        );
    }

    #[test]
    fn unknown_papers_are_errors_naming_the_claim() {
        let mut input = fixture();
        input.claims[1]
            .supporting_paper_ids
            .push("ghost".to_string());
        let e = write_report(&input).unwrap_err();
        assert_eq!(e.code, "invalid-input");
        assert!(
            e.message.contains("claim C2") && e.message.contains("`ghost`"),
            "{}",
            e.message
        );
        let mut input = fixture();
        input.matrix.rows[0].paper_id = "ghost".to_string();
        assert_eq!(write_report(&input).unwrap_err().code, "invalid-input");
    }

    #[test]
    fn handles_empty_inputs() {
        let r = write_report(&Input {
            query: "  ".to_string(),
            papers: vec![],
            matrix: ComparisonMatrix {
                dimensions: vec![],
                rows: vec![],
            },
            claims: vec![],
        })
        .unwrap();
        assert_eq!(r.title, "Research report");
        assert!(r.markdown.contains("No claim could be supported"));
        assert_eq!((r.citation_count, r.reference_count), (0, 0));
    }

    #[test]
    fn formats_authors() {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(authors(&s(&[])), "Unknown authors");
        assert_eq!(authors(&s(&["A"])), "A");
        assert_eq!(authors(&s(&["A", "B", "C"])), "A, B and C");
        assert_eq!(authors(&s(&["A", "B", "C", "D"])), "A, B, C et al.");
    }
}
