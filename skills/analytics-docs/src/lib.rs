//! `analytics-docs`: answers a `documents` sub-task from the granted folder.
//! Each `.txt` file is cut into passages at blank lines; a passage matches
//! when it holds every term of the sub-task (case-insensitive), or any of
//! them after the reviewer's `any-term` feedback. Each match is a figure
//! quoting the passage verbatim, and the passage is returned whole, so the
//! host's citation check can verify a summary that quotes it.

skillhost_sdk::generate!(
    "analytics-docs",
    with: { "skillhost:analytics/types@0.1.0": generate },
);

use skillhost::analytics::types::{Figure, Finding, Passage, Source};
use skillhost_sdk::{EntryKind, fs, log};

struct AnalyticsDocs;

/// At most this many passages a finding quotes.
const MAX_PASSAGES: usize = 5;

impl Guest for AnalyticsDocs {
    skillhost_sdk::manifest! {
        name: "Analytics documents",
        capabilities: ["log", "fs"],
        retry: never,
        estimated_duration_ms: 5,
    }

    fn run(input: Input) -> Result<Finding, SkillError> {
        let task = input.task;
        if !matches!(task.source, Source::Documents) {
            return Err(SkillError::invalid_input(format!(
                "sub-task `{}` is not a `documents` sub-task",
                task.id
            )));
        }
        let terms: Vec<String> = task
            .terms
            .iter()
            .map(|t| t.trim().to_lowercase())
            .filter(|t| !t.is_empty())
            .collect();
        if terms.is_empty() {
            return Err(SkillError::invalid_input(format!(
                "sub-task `{}` has no terms to look for",
                task.id
            )));
        }
        let mut documents = Vec::new();
        for entry in fs::list_dir("")? {
            if matches!(entry.kind, EntryKind::File) && entry.name.ends_with(".txt") {
                documents.push((entry.name.clone(), fs::read_text(&entry.name)?));
            }
        }
        let found = matching(&documents, &terms, task.feedback.any_term);
        log::info(format!(
            "`{}` attempt {}: {} passage(s) in {} document(s) hold {} of {:?}",
            task.id,
            task.attempt + 1,
            found.len(),
            documents.len(),
            if task.feedback.any_term { "any" } else { "all" },
            terms
        ));
        let figures = found
            .iter()
            .map(|(passage, held)| Figure {
                label: format!("passage {}", passage.id),
                value: passage.text.clone(),
                support: *held,
                origin: format!("documents: {}", passage.id),
                quote: passage.text.clone(),
            })
            .collect();
        Ok(Finding {
            task_id: task.id,
            source: Source::Documents,
            attempt: task.attempt,
            figures,
            missing_groups: 0,
            passages: found.into_iter().map(|(p, _)| p).collect(),
        })
    }
}

export!(AnalyticsDocs);

/// The passages that hold all (or, with `any`, some) of `terms`, each with
/// how many of them it holds; most terms first, then in document order.
fn matching(documents: &[(String, String)], terms: &[String], any: bool) -> Vec<(Passage, u32)> {
    let mut found = Vec::new();
    for (name, text) in documents {
        for (index, paragraph) in text
            .split("\n\n")
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .enumerate()
        {
            let lower = paragraph.to_lowercase();
            let held = terms.iter().filter(|t| lower.contains(t.as_str())).count();
            if (any && held > 0) || held == terms.len() {
                found.push((
                    Passage {
                        id: format!("{name}#{}", index + 1),
                        document: name.clone(),
                        text: paragraph.to_string(),
                    },
                    held as u32,
                ));
            }
        }
    }
    // Stable: equal counts keep document order.
    found.sort_by_key(|(_, held)| std::cmp::Reverse(*held));
    found.truncate(MAX_PASSAGES);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs() -> Vec<(String, String)> {
        vec![
            (
                "a.txt".into(),
                "Title\n\nData were collected by the LTER.\n\nThe license is CC-0.".into(),
            ),
            ("b.txt".into(), "Study one recorded 110 penguins.".into()),
        ]
    }

    #[test]
    fn all_terms_then_any_term() {
        let terms = vec!["license".to_string(), "study".to_string()];
        assert!(matching(&docs(), &terms, false).is_empty());
        let any = matching(&docs(), &terms, true);
        let ids: Vec<&str> = any.iter().map(|(p, _)| p.id.as_str()).collect();
        assert_eq!(ids, ["a.txt#3", "b.txt#1"]);
        let collected = matching(&docs(), &["collected".to_string()], false);
        assert_eq!(collected[0].0.text, "Data were collected by the LTER.");
    }
}
