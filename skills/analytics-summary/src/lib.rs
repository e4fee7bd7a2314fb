//! `analytics-summary`: writes the answer from the accepted findings. One
//! sentence per figure, in the planner's order of sub-tasks, each carrying
//! its source and origin (the SQL statement, the graph edge, the passage);
//! a figure from a document cites its passage and quotes it, which the
//! scenario's citation check verifies. It adds no figure of its own. Pure:
//! no host call.

skillhost_sdk::generate!(
    "analytics-summary",
    with: { "skillhost:analytics/types@0.1.0": generate },
);

use skillhost::analytics::types::{Finding, Source};
use skillhost_sdk::log;

struct AnalyticsSummary;

impl Guest for AnalyticsSummary {
    skillhost_sdk::manifest! {
        name: "Analytics summary",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let title = format!("Answer: {}", input.question.trim());
        let mut markdown = format!("# {title}\n");
        let mut sentences = Vec::new();
        for task in &input.tasks {
            let finding = input
                .findings
                .iter()
                .find(|f| f.task_id == task.id)
                .ok_or_else(|| {
                    SkillError::invalid_input(format!(
                        "sub-task `{}` ({}) has no accepted finding",
                        task.id, task.topic
                    ))
                })?;
            markdown.push_str(&format!(
                "\n## {} (source: {})\n\n",
                task.topic,
                source_name(&finding.source)
            ));
            for sentence in figure_sentences(finding) {
                markdown.push_str(&format!(
                    "- {} Source: `{}`.\n",
                    sentence.text, sentence.origin
                ));
                sentences.push(sentence);
            }
        }
        log::info(format!("{} sentence(s)", sentences.len()));
        Ok(Output {
            title,
            sentences,
            markdown,
        })
    }
}

export!(AnalyticsSummary);

fn source_name(source: &Source) -> &'static str {
    match source {
        Source::Sql => "sql",
        Source::Documents => "documents",
        Source::Graph => "graph",
    }
}

fn figure_sentences(finding: &Finding) -> Vec<Sentence> {
    finding
        .figures
        .iter()
        .map(|figure| {
            let (text, cites, quotes) = match finding.source {
                Source::Sql => (
                    format!(
                        "{}: {} ({} penguins).",
                        figure.label, figure.value, figure.support
                    ),
                    Vec::new(),
                    Vec::new(),
                ),
                Source::Graph => (
                    format!("{}: {}.", figure.label, figure.value),
                    Vec::new(),
                    Vec::new(),
                ),
                Source::Documents => {
                    let id = figure.origin.trim_start_matches("documents: ").to_string();
                    (
                        format!("The documents say: \"{}\"", collapse(&figure.quote)),
                        vec![id],
                        vec![figure.quote.clone()],
                    )
                }
            };
            Sentence {
                text,
                source: finding.source,
                origin: figure.origin.clone(),
                cites,
                quotes,
            }
        })
        .collect()
}

/// The text on one line: runs of whitespace become one space.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost::analytics::types::{Feedback, Figure, Task};

    fn task(id: &str, source: Source) -> Task {
        Task {
            id: id.into(),
            source,
            topic: format!("topic of {id}"),
            measure: String::new(),
            group_by: Vec::new(),
            year: None,
            terms: Vec::new(),
            relation: String::new(),
            feedback: Feedback {
                exclude_missing: false,
                drop_groupings: 0,
                any_term: false,
                notes: Vec::new(),
            },
            attempt: 0,
        }
    }

    fn finding(id: &str, source: Source, origin: &str, quote: &str) -> Finding {
        Finding {
            task_id: id.into(),
            source,
            attempt: 0,
            figures: vec![Figure {
                label: "mean body_mass_g (species=Adelie)".into(),
                value: "3700.7".into(),
                support: 151,
                origin: origin.into(),
                quote: quote.into(),
            }],
            missing_groups: 0,
            passages: Vec::new(),
        }
    }

    #[test]
    fn every_figure_names_its_source() {
        let out = AnalyticsSummary::run(Input {
            question: "q?".into(),
            tasks: vec![
                task("sql-1", Source::Sql),
                task("documents-2", Source::Documents),
            ],
            findings: vec![
                finding(
                    "documents-2",
                    Source::Documents,
                    "documents: about.txt#3",
                    "Data are\navailable.",
                ),
                finding("sql-1", Source::Sql, "sql: SELECT 1", ""),
            ],
        })
        .unwrap();
        assert_eq!(
            out.sentences[0].text,
            "mean body_mass_g (species=Adelie): 3700.7 (151 penguins)."
        );
        assert_eq!(out.sentences[0].origin, "sql: SELECT 1");
        assert_eq!(out.sentences[1].cites, ["about.txt#3"]);
        assert_eq!(out.sentences[1].quotes, ["Data are\navailable."]);
        assert!(
            out.markdown.contains("Source: `sql: SELECT 1`."),
            "{}",
            out.markdown
        );
        let err = AnalyticsSummary::run(Input {
            question: "q?".into(),
            tasks: vec![task("graph-1", Source::Graph)],
            findings: Vec::new(),
        })
        .unwrap_err();
        assert!(err.message.contains("`graph-1`"));
    }
}
