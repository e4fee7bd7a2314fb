//! `task-plan`: turns a task into its steps. Every task over CSV records has
//! the same three steps (parse, aggregate, write the report); what differs is
//! which of the task's acceptance criteria the verifier checks after which
//! step, so that a failure is caught at the step that caused it and the
//! retry redoes only that step. Pure: no host call.

skillhost_sdk::generate!(
    "task-plan",
    with: { "skillhost:task/types@0.1.0": generate },
);

use skillhost_sdk::log;

struct TaskPlan;

impl Guest for TaskPlan {
    skillhost_sdk::manifest! {
        name: "Task plan",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let task = &input.task;
        if input.files.iter().all(|f| f.rows == 0) {
            return Err(SkillError::invalid_input(format!(
                "task `{}`: the {} file(s) in `{}` have no data line; there is nothing to report on",
                task.id,
                input.files.len(),
                task.data_dir
            )));
        }
        let criteria = &task.criteria;
        for (name, list) in [
            ("required_categories", &criteria.required_categories),
            ("required_sections", &criteria.required_sections),
        ] {
            if list.iter().flatten().any(|s| s.trim().is_empty()) {
                return Err(SkillError::invalid_input(format!(
                    "task `{}`: `criteria.{name}` has an empty entry",
                    task.id
                )));
            }
        }
        let steps = plan(criteria);
        log::info(format!(
            "task `{}`: {} step(s), {} check(s)",
            task.id,
            steps.len(),
            steps.iter().map(|s| s.checks.len()).sum::<usize>()
        ));
        Ok(Output { steps })
    }
}

export!(TaskPlan);

/// The steps, each with its checks: the criteria the task sets that the
/// step's result decides, then the consistency checks every step gets.
fn plan(criteria: &Criteria) -> Vec<Step> {
    let on = |flag: Option<bool>| flag == Some(true);
    let mut parse = Vec::new();
    if on(criteria.row_counts_match) {
        parse.push("row-counts-match");
    }
    if on(criteria.amounts_well_formed) {
        parse.push("amounts-well-formed");
    }
    if on(criteria.no_negative_amounts) {
        parse.push("no-negative-amounts");
    }
    if criteria.max_rejected_rows.is_some() {
        parse.push("max-rejected-rows");
    }
    let mut aggregate = vec!["totals-match-rows"];
    if criteria.required_categories.is_some() {
        aggregate.push("required-categories");
    }
    let mut report = vec!["report-matches-totals"];
    if criteria.required_sections.is_some() {
        report.push("required-sections");
    }
    let step = |id: &str, kind, title: &str, checks: Vec<&str>| Step {
        id: id.to_string(),
        kind,
        title: title.to_string(),
        checks: checks.into_iter().map(String::from).collect(),
    };
    vec![
        step(
            "parse",
            StepKind::ParseRecords,
            "Read every row of every file into counted and rejected rows",
            parse,
        ),
        step(
            "aggregate",
            StepKind::Aggregate,
            "Total the counted rows' amounts per category",
            aggregate,
        ),
        step(
            "report",
            StepKind::WriteReport,
            "Write the report's sections",
            report,
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(criteria: Criteria) -> Task {
        Task {
            id: "t".into(),
            goal: "g".into(),
            data_dir: "data".into(),
            columns: Columns {
                category: "c".into(),
                amount: "a".into(),
            },
            criteria,
        }
    }

    fn none() -> Criteria {
        Criteria {
            required_categories: None,
            required_sections: None,
            no_negative_amounts: None,
            amounts_well_formed: None,
            row_counts_match: None,
            max_rejected_rows: None,
        }
    }

    fn files(rows: u32) -> Vec<DataFile> {
        vec![DataFile {
            path: "data/a.csv".into(),
            header: vec!["c".into(), "a".into()],
            rows,
        }]
    }

    fn checks(out: &Output) -> Vec<(&str, Vec<&str>)> {
        out.steps
            .iter()
            .map(|s| (s.id.as_str(), s.checks.iter().map(String::as_str).collect()))
            .collect()
    }

    #[test]
    fn every_criterion_lands_on_the_step_that_decides_it() {
        let criteria = Criteria {
            required_categories: Some(vec!["x".into()]),
            required_sections: Some(vec!["Summary".into()]),
            no_negative_amounts: Some(true),
            amounts_well_formed: Some(true),
            row_counts_match: Some(true),
            max_rejected_rows: Some(0),
        };
        let out = TaskPlan::run(Input {
            task: task(criteria),
            files: files(2),
        })
        .unwrap();
        assert_eq!(
            checks(&out),
            [
                (
                    "parse",
                    vec![
                        "row-counts-match",
                        "amounts-well-formed",
                        "no-negative-amounts",
                        "max-rejected-rows"
                    ]
                ),
                (
                    "aggregate",
                    vec!["totals-match-rows", "required-categories"]
                ),
                ("report", vec!["report-matches-totals", "required-sections"]),
            ]
        );
        assert_eq!(out.steps[1].kind, StepKind::Aggregate);
    }

    #[test]
    fn criteria_left_out_or_false_are_not_checked() {
        let mut criteria = none();
        criteria.no_negative_amounts = Some(false);
        let out = TaskPlan::run(Input {
            task: task(criteria),
            files: files(1),
        })
        .unwrap();
        assert_eq!(
            checks(&out),
            [
                ("parse", vec![]),
                ("aggregate", vec!["totals-match-rows"]),
                ("report", vec!["report-matches-totals"]),
            ]
        );
    }

    #[test]
    fn refuses_a_task_with_nothing_to_do() {
        let e = TaskPlan::run(Input {
            task: task(none()),
            files: files(0),
        })
        .unwrap_err();
        assert!(e.message.contains("no data line"), "{}", e.message);
        let mut criteria = none();
        criteria.required_sections = Some(vec![" ".into()]);
        let e = TaskPlan::run(Input {
            task: task(criteria),
            files: files(1),
        })
        .unwrap_err();
        assert!(
            e.message
                .contains("`criteria.required_sections` has an empty entry")
        );
    }
}
