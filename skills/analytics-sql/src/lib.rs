//! `analytics-sql`: answers a `sql` sub-task from the granted database. The
//! statement is built from the sub-task's measure and grouping columns,
//! each checked against the table's columns by name (an identifier cannot
//! be a parameter), and the year is a bound parameter. The reviewer's
//! feedback changes the statement: `exclude-missing` adds `IS NOT NULL` on
//! the grouping columns, `drop-groupings` groups by fewer of them.

skillhost_sdk::generate!(
    "analytics-sql",
    with: { "skillhost:analytics/types@0.1.0": generate },
);

use skillhost::analytics::types::{Figure, Finding, Source, Task};
use skillhost_sdk::log;
use skillhost_sdk::sql::{self, Value};

struct AnalyticsSql;

impl Guest for AnalyticsSql {
    skillhost_sdk::manifest! {
        name: "Analytics SQL",
        capabilities: ["log", "sql"],
        retry: never,
        estimated_duration_ms: 5,
    }

    fn run(input: Input) -> Result<Finding, SkillError> {
        let task = input.task;
        let (statement, params) = statement(&task)?;
        let result = sql::query(&statement, &params)?;
        let groups = effective_groups(&task).len();
        let origin = origin(&statement, &params);
        let mut figures = Vec::with_capacity(result.rows.len());
        let mut missing_groups = 0;
        for row in &result.rows {
            // Columns: the groups, then `n`, then `value`.
            let keys: Vec<String> = row[..groups]
                .iter()
                .zip(&result.columns)
                .map(|(v, c)| format!("{c}={}", text(v)))
                .collect();
            if row[..groups].iter().any(|v| matches!(v, Value::Null)) {
                missing_groups += 1;
            }
            let what = if task.measure == "count" {
                "penguins".to_string()
            } else {
                format!("mean {}", task.measure)
            };
            figures.push(Figure {
                label: format!("{what} ({})", keys.join(", ")),
                value: text(&row[groups + 1]),
                support: match row[groups] {
                    Value::Integer(n) => u32::try_from(n).unwrap_or(u32::MAX),
                    _ => 0,
                },
                origin: origin.clone(),
                quote: String::new(),
            });
        }
        log::info(format!(
            "`{}` attempt {}: {} row(s), {missing_groups} with a missing group",
            task.id,
            task.attempt + 1,
            figures.len()
        ));
        Ok(Finding {
            task_id: task.id,
            source: Source::Sql,
            attempt: task.attempt,
            figures,
            missing_groups,
            passages: Vec::new(),
        })
    }
}

export!(AnalyticsSql);

const MEASURES: [&str; 4] = [
    "body_mass_g",
    "flipper_length_mm",
    "bill_length_mm",
    "bill_depth_mm",
];
const GROUPINGS: [&str; 4] = ["species", "island", "sex", "year"];

/// The grouping columns after the reviewer's `drop-groupings`; at least one.
fn effective_groups(task: &Task) -> &[String] {
    let keep = task
        .group_by
        .len()
        .saturating_sub(task.feedback.drop_groupings as usize)
        .max(1);
    &task.group_by[..keep.min(task.group_by.len())]
}

/// The statement and its parameters for `task`.
fn statement(task: &Task) -> Result<(String, Vec<Value>), SkillError> {
    if !matches!(task.source, Source::Sql) {
        return Err(SkillError::invalid_input(format!(
            "sub-task `{}` is not a `sql` sub-task",
            task.id
        )));
    }
    let groups = effective_groups(task);
    if groups.is_empty() {
        return Err(SkillError::invalid_input(format!(
            "sub-task `{}` groups by nothing; give `group-by` one of {}",
            task.id,
            GROUPINGS.join(", ")
        )));
    }
    if let Some(bad) = groups.iter().find(|g| !GROUPINGS.contains(&g.as_str())) {
        return Err(SkillError::invalid_input(format!(
            "sub-task `{}`: `{bad}` is not a grouping column; use {}",
            task.id,
            GROUPINGS.join(", ")
        )));
    }
    let value = if task.measure == "count" {
        "count(*)".to_string()
    } else if MEASURES.contains(&task.measure.as_str()) {
        format!("round(avg({}), 1)", task.measure)
    } else {
        return Err(SkillError::invalid_input(format!(
            "sub-task `{}`: `{}` is not a measure; use count or {}",
            task.id,
            task.measure,
            MEASURES.join(", ")
        )));
    };
    let columns = groups.join(", ");
    let mut conditions = Vec::new();
    if task.measure != "count" {
        conditions.push(format!("{} IS NOT NULL", task.measure));
    }
    if task.feedback.exclude_missing {
        conditions.extend(groups.iter().map(|g| format!("{g} IS NOT NULL")));
    }
    let mut params = Vec::new();
    if let Some(year) = task.year {
        conditions.push("year = ?1".into());
        params.push(Value::Integer(i64::from(year)));
    }
    let filter = if conditions.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conditions.join(" AND "))
    };
    Ok((
        format!(
            "SELECT {columns}, count(*) AS n, {value} AS value FROM penguins{filter} \
             GROUP BY {columns} ORDER BY {columns}"
        ),
        params,
    ))
}

/// The statement, with its parameters if it has any: a figure's origin.
fn origin(statement: &str, params: &[Value]) -> String {
    if params.is_empty() {
        format!("sql: {statement}")
    } else {
        let values: Vec<String> = params.iter().map(text).collect();
        format!("sql: {statement} [?1 = {}]", values.join(", "))
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::Null => "missing".into(),
        Value::Integer(i) => i.to_string(),
        Value::Real(r) => format!("{r}"),
        Value::Text(t) => t.clone(),
        Value::Blob(b) => format!("{} bytes", b.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost::analytics::types::Feedback;
    use skillhost_sdk::sql::QueryResult;

    fn task(measure: &str, group_by: &[&str], feedback: Feedback) -> Task {
        Task {
            id: "sql-1".into(),
            source: Source::Sql,
            topic: String::new(),
            measure: measure.into(),
            group_by: group_by.iter().map(|g| g.to_string()).collect(),
            year: None,
            terms: Vec::new(),
            relation: String::new(),
            feedback,
            attempt: 0,
        }
    }

    fn no_feedback() -> Feedback {
        Feedback {
            exclude_missing: false,
            drop_groupings: 0,
            any_term: false,
            notes: Vec::new(),
        }
    }

    #[test]
    fn feedback_changes_the_statement() {
        let plain = task("body_mass_g", &["species", "sex"], no_feedback());
        assert_eq!(
            statement(&plain).unwrap().0,
            "SELECT species, sex, count(*) AS n, round(avg(body_mass_g), 1) AS value FROM penguins \
             WHERE body_mass_g IS NOT NULL GROUP BY species, sex ORDER BY species, sex"
        );
        let mut feedback = no_feedback();
        feedback.exclude_missing = true;
        feedback.drop_groupings = 1;
        let mut fixed = task("count", &["species", "sex"], feedback);
        fixed.year = Some(2008);
        let (text, params) = statement(&fixed).unwrap();
        assert_eq!(
            text,
            "SELECT species, count(*) AS n, count(*) AS value FROM penguins \
             WHERE species IS NOT NULL AND year = ?1 GROUP BY species ORDER BY species"
        );
        assert!(matches!(params[..], [Value::Integer(2008)]));
    }

    #[test]
    fn names_are_checked_not_interpolated() {
        let bad = task(
            "body_mass_g; DROP TABLE penguins",
            &["species"],
            no_feedback(),
        );
        assert_eq!(statement(&bad).unwrap_err().code, "invalid-input");
        let bad = task("count", &["species) --"], no_feedback());
        assert_eq!(statement(&bad).unwrap_err().code, "invalid-input");
    }

    #[test]
    fn rows_become_figures_and_missing_groups_are_counted() {
        skillhost_sdk::testing::set_sql_handler(|_, _| {
            Ok(QueryResult {
                columns: vec!["species".into(), "sex".into(), "n".into(), "value".into()],
                rows: vec![
                    vec![
                        Value::Text("Adelie".into()),
                        Value::Null,
                        Value::Integer(6),
                        Value::Real(3540.0),
                    ],
                    vec![
                        Value::Text("Adelie".into()),
                        Value::Text("female".into()),
                        Value::Integer(73),
                        Value::Real(3368.8),
                    ],
                ],
            })
        });
        let finding = AnalyticsSql::run(Input {
            task: task("body_mass_g", &["species", "sex"], no_feedback()),
        })
        .unwrap();
        assert_eq!(finding.missing_groups, 1);
        assert_eq!(
            finding.figures[1].label,
            "mean body_mass_g (species=Adelie, sex=female)"
        );
        assert_eq!(finding.figures[1].value, "3368.8");
        assert_eq!(finding.figures[1].support, 73);
        assert!(
            finding.figures[1]
                .origin
                .starts_with("sql: SELECT species, sex")
        );
    }
}
