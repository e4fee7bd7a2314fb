//! `task-summary`: the last step of the task workflow. It writes the final
//! report: the Markdown the plan's `write-report` step wrote and the
//! verifier passed, followed by the record of how each step was verified.
//! It adds nothing the history does not say, so a run resumed after a crash
//! writes the same bytes. Pure: no host call.

skillhost_sdk::generate!(
    "task-summary",
    with: { "skillhost:task/types@0.1.0": generate },
);

use std::fmt::Write;

use skillhost_sdk::log;

struct TaskSummary;

impl Guest for TaskSummary {
    skillhost_sdk::manifest! {
        name: "Task summary",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let task = &input.task;
        for step in &input.plan {
            if !input.accepted.iter().any(|r| r.step_id == step.id) {
                return Err(SkillError::invalid_input(format!(
                    "task `{}`: step `{}` has no accepted result; the summary is written once every step passed",
                    task.id, step.id
                )));
            }
            if !input
                .history
                .iter()
                .any(|v| v.step_id == step.id && v.passed)
            {
                return Err(SkillError::invalid_input(format!(
                    "task `{}`: step `{}` has no passing verdict; the summary is written once every step passed",
                    task.id, step.id
                )));
            }
        }
        let report = input
            .accepted
            .iter()
            .rev()
            .find(|r| r.kind == StepKind::WriteReport)
            .ok_or_else(|| {
                SkillError::invalid_input(format!(
                    "task `{}`: no step of the plan wrote the report (a write-report step)",
                    task.id
                ))
            })?;
        let attempts = u32::try_from(input.history.len()).unwrap_or(u32::MAX);
        let retries =
            u32::try_from(input.history.iter().filter(|v| !v.passed).count()).unwrap_or(u32::MAX);
        let mut markdown = report.markdown.trim_end().to_string();
        markdown.push_str("\n\n");
        markdown.push_str(&verification(&input));
        log::info(format!(
            "task `{}`: {} step(s) passed in {attempts} attempt(s), {retries} retried",
            task.id,
            input.plan.len()
        ));
        Ok(Output {
            markdown,
            attempts,
            retries,
        })
    }
}

export!(TaskSummary);

/// The "Verification" section: one table row per step, then the findings of
/// every failed attempt.
fn verification(input: &Input) -> String {
    let mut md = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(md, "## Verification\n");
    let _ = writeln!(md, "| step | checks | attempts | result |");
    let _ = writeln!(md, "| --- | --- | ---: | --- |");
    for step in &input.plan {
        let verdicts: Vec<&Verdict> = input
            .history
            .iter()
            .filter(|v| v.step_id == step.id)
            .collect();
        let applied = input
            .accepted
            .iter()
            .find(|r| r.step_id == step.id)
            .map(|r| r.applied.as_slice())
            .unwrap_or_default();
        let result = if applied.is_empty() {
            "passed".to_string()
        } else {
            format!("passed with remediation `{}`", applied.join("`, `"))
        };
        let checks = if step.checks.is_empty() {
            "none".to_string()
        } else {
            step.checks.join(", ")
        };
        let _ = writeln!(
            md,
            "| {} | {checks} | {} | {result} |",
            step.id,
            verdicts.len()
        );
    }
    let failed: Vec<&Verdict> = input.history.iter().filter(|v| !v.passed).collect();
    if failed.is_empty() {
        let _ = writeln!(md, "\nEvery step passed verification at its first attempt.");
    } else {
        let _ = writeln!(md, "\n### Findings of the attempts that failed\n");
        for verdict in failed {
            let _ = writeln!(
                md,
                "- `{}`, attempt {}:",
                verdict.step_id,
                verdict.attempt + 1
            );
            for finding in &verdict.findings {
                let _ = writeln!(md, "  - `{}`: {}", finding.check, finding.message);
            }
            if !verdict.remediation.is_empty() {
                let _ = writeln!(
                    md,
                    "  - next attempt applied: `{}`",
                    verdict.remediation.join("`, `")
                );
            }
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> Task {
        Task {
            id: "t".into(),
            goal: "g".into(),
            data_dir: "data".into(),
            columns: Columns {
                category: "c".into(),
                amount: "a".into(),
            },
            criteria: Criteria {
                required_categories: None,
                required_sections: None,
                no_negative_amounts: None,
                amounts_well_formed: None,
                row_counts_match: None,
                max_rejected_rows: None,
            },
        }
    }

    fn step(id: &str, kind: StepKind, checks: &[&str]) -> Step {
        Step {
            id: id.into(),
            kind,
            title: String::new(),
            checks: checks.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn result(id: &str, kind: StepKind, applied: &[&str], markdown: &str) -> StepResult {
        StepResult {
            step_id: id.into(),
            kind,
            attempt: 0,
            applied: applied.iter().map(|c| c.to_string()).collect(),
            rows: Vec::new(),
            rejected: Vec::new(),
            totals: Vec::new(),
            markdown: markdown.into(),
        }
    }

    fn verdict(id: &str, attempt: u32, findings: &[(&str, &str)], remediation: &[&str]) -> Verdict {
        Verdict {
            step_id: id.into(),
            attempt,
            passed: findings.is_empty(),
            findings: findings
                .iter()
                .map(|(check, message)| Finding {
                    check: check.to_string(),
                    message: message.to_string(),
                })
                .collect(),
            remediation: remediation.iter().map(|c| c.to_string()).collect(),
        }
    }

    fn input() -> Input {
        Input {
            task: task(),
            plan: vec![
                step("parse", StepKind::ParseRecords, &["no-negative-amounts"]),
                step("report", StepKind::WriteReport, &[]),
            ],
            accepted: vec![
                result(
                    "parse",
                    StepKind::ParseRecords,
                    &["reject-negative-amounts"],
                    "",
                ),
                result(
                    "report",
                    StepKind::WriteReport,
                    &[],
                    "# g\n\n## Summary\n\nok\n",
                ),
            ],
            history: vec![
                verdict(
                    "parse",
                    0,
                    &[(
                        "no-negative-amounts",
                        "1 counted row(s) have a negative amount: a.csv:2 -1.5",
                    )],
                    &["reject-negative-amounts"],
                ),
                verdict("parse", 1, &[], &[]),
                verdict("report", 0, &[], &[]),
            ],
        }
    }

    #[test]
    fn appends_how_each_step_was_verified() {
        let out = TaskSummary::run(input()).unwrap();
        assert_eq!((out.attempts, out.retries), (3, 1));
        assert_eq!(
            out.markdown,
            "# g\n\n## Summary\n\nok\n\n## Verification\n\n\
             | step | checks | attempts | result |\n| --- | --- | ---: | --- |\n\
             | parse | no-negative-amounts | 2 | passed with remediation `reject-negative-amounts` |\n\
             | report | none | 1 | passed |\n\n\
             ### Findings of the attempts that failed\n\n\
             - `parse`, attempt 1:\n  - `no-negative-amounts`: 1 counted row(s) have a negative amount: a.csv:2 -1.5\n  \
             - next attempt applied: `reject-negative-amounts`\n"
        );
    }

    #[test]
    fn refuses_a_task_whose_steps_did_not_all_pass() {
        let mut bad = input();
        bad.history.pop();
        let e = TaskSummary::run(bad).unwrap_err();
        assert!(
            e.message.contains("step `report` has no passing verdict"),
            "{}",
            e.message
        );
        let mut bad = input();
        bad.accepted.remove(0);
        let e = TaskSummary::run(bad).unwrap_err();
        assert!(
            e.message.contains("step `parse` has no accepted result"),
            "{}",
            e.message
        );
    }
}
