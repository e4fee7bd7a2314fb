//! `analytics-plan`: splits a question into sub-tasks, each answered from
//! one source. Explicit rules on the question's words, no model: a
//! measurement or a count goes to the database (`sql`), where the species
//! live or when the islands were sampled to the graph, where the data came
//! from to the documents. Pure: no host call.

skillhost_sdk::generate!(
    "analytics-plan",
    with: { "skillhost:analytics/types@0.1.0": generate },
);

use skillhost::analytics::types::{Feedback, Source, Task};
use skillhost_sdk::log;

struct AnalyticsPlan;

impl Guest for AnalyticsPlan {
    skillhost_sdk::manifest! {
        name: "Analytics plan",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let tasks = plan(&input.question);
        if tasks.is_empty() {
            return Err(SkillError::invalid_input(format!(
                "the question `{}` asks nothing the sources answer: ask for a measurement \
                 (body mass, flipper length, bill length or depth) or a count by species, \
                 island, sex or year; where the species live or when the islands were \
                 sampled; or where the data come from (origin, licence, citation, studies)",
                input.question.trim()
            )));
        }
        log::info(format!("{} sub-task(s)", tasks.len()));
        Ok(Output { tasks })
    }
}

export!(AnalyticsPlan);

/// The measured columns, with the words that ask for them.
const MEASURES: [(&str, &[&str]); 4] = [
    ("body_mass_g", &["body mass", "mass", "weigh"]),
    ("flipper_length_mm", &["flipper"]),
    ("bill_length_mm", &["bill length", "culmen length"]),
    ("bill_depth_mm", &["bill depth", "culmen depth"]),
];

/// The grouping columns, with the words that ask for them.
const GROUPINGS: [(&str, &[&str]); 4] = [
    ("species", &["species", "by kind"]),
    ("island", &["island"]),
    ("sex", &["sex", "male", "female"]),
    ("year", &["year", "per study"]),
];

/// Words that ask where the data come from, and the terms a passage about
/// it holds.
const ORIGIN: [(&str, &[&str]); 5] = [
    ("collected", &["collected"]),
    ("licen", &["license", "cc-0"]),
    ("cite", &["gorman", "plos one"]),
    ("studies", &["study", "recorded"]),
    ("isotope", &["isotope", "missing"]),
];

fn has(text: &str, words: &[&str]) -> bool {
    words.iter().any(|w| text.contains(w))
}

fn task(id: String, source: Source, topic: String) -> Task {
    Task {
        id,
        source,
        topic,
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

fn plan(question: &str) -> Vec<Task> {
    let q = question.to_lowercase();
    let mut tasks = Vec::new();

    // The database: one sub-task per measure asked, or one count.
    let mut group_by: Vec<String> = GROUPINGS
        .iter()
        .filter(|(_, words)| has(&q, words))
        .map(|(column, _)| column.to_string())
        // A question that asks where the species live asks the graph,
        // not for a grouping by island.
        .filter(|c| c != "island" || !asks_where(&q))
        .collect();
    if group_by.is_empty() {
        group_by.push("species".into());
    }
    let year = ["2007", "2008", "2009"]
        .iter()
        .find(|y| q.contains(*y))
        .and_then(|y| y.parse().ok());
    let mut measures: Vec<&str> = MEASURES
        .iter()
        .filter(|(_, words)| has(&q, words))
        .map(|(column, _)| *column)
        .collect();
    if measures.is_empty() && has(&q, &["how many", "count", "number of"]) {
        measures.push("count");
    }
    for measure in measures {
        let id = format!("sql-{}", tasks.len() + 1);
        let what = if measure == "count" {
            "number of penguins".to_string()
        } else {
            format!("mean {measure}")
        };
        let mut t = task(
            id,
            Source::Sql,
            format!("{what} by {}", group_by.join(", ")),
        );
        t.measure = measure.into();
        t.group_by = group_by.clone();
        t.year = year;
        tasks.push(t);
    }

    // The graph: where the species live, when the islands were sampled.
    if asks_where(&q) {
        let species: Vec<String> = ["adelie", "chinstrap", "gentoo"]
            .iter()
            .filter(|s| q.contains(*s))
            .map(|s| capitalised(s))
            .collect();
        let id = format!("graph-{}", tasks.len() + 1);
        let mut t = task(id, Source::Graph, "islands each species lives on".into());
        t.relation = "lives-on".into();
        t.terms = species;
        tasks.push(t);
    }
    if has(&q, &["when", "which years", "sampled"]) {
        let id = format!("graph-{}", tasks.len() + 1);
        let mut t = task(id, Source::Graph, "years each island was sampled in".into());
        t.relation = "sampled-in".into();
        tasks.push(t);
    }

    // The documents: where the data come from.
    for (asked, terms) in ORIGIN {
        let asked = match asked {
            "collected" => has(
                &q,
                &["collected", "come from", "comes from", "origin", "who"],
            ),
            "cite" => has(&q, &["cite", "citation", "paper", "reference"]),
            other => q.contains(other),
        };
        if asked {
            let id = format!("documents-{}", tasks.len() + 1);
            let mut t = task(
                id,
                Source::Documents,
                format!("what the documents say: {}", terms.join(", ")),
            );
            t.terms = terms.iter().map(|t| t.to_string()).collect();
            tasks.push(t);
        }
    }
    tasks
}

fn asks_where(q: &str) -> bool {
    has(
        q,
        &["where", "which island", "live on", "lives on", "found on"],
    )
}

fn capitalised(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(tasks: &[Task]) -> Vec<String> {
        tasks
            .iter()
            .map(|t| {
                format!(
                    "{} {} [{}] {:?} {:?} {}",
                    t.id,
                    t.measure,
                    t.group_by.join(","),
                    t.year,
                    t.terms,
                    t.relation
                )
            })
            .collect()
    }

    #[test]
    fn a_question_splits_by_source() {
        let tasks = plan(
            "What is the body mass by species and sex, where does each species live, \
             and who collected the data?",
        );
        assert_eq!(
            summary(&tasks),
            [
                "sql-1 body_mass_g [species,sex] None [] ",
                "graph-2  [] None [] lives-on",
                "documents-3  [] None [\"collected\"] ",
            ]
        );
        assert!(matches!(tasks[0].source, Source::Sql));
        assert!(matches!(tasks[1].source, Source::Graph));
        assert!(matches!(tasks[2].source, Source::Documents));
    }

    #[test]
    fn counts_years_and_named_species() {
        let tasks =
            plan("How many penguins per island in 2008? Which island does the Gentoo live on?");
        assert_eq!(
            summary(&tasks),
            [
                "sql-1 count [species] Some(2008) [] ",
                "graph-2  [] None [\"Gentoo\"] lives-on",
            ]
        );
    }

    #[test]
    fn a_question_without_a_source_asks_nothing() {
        assert!(plan("what is the weather like").is_empty());
        let err = AnalyticsPlan::run(Input {
            question: "tell me a joke".into(),
        })
        .unwrap_err();
        assert_eq!(err.code, "invalid-input");
        assert!(err.message.contains("asks nothing the sources answer"));
    }
}
