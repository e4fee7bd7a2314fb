//! `task-verify`: the acceptance check of the task workflow. It judges one
//! attempt at a step, check by check, and says what failed (findings, naming
//! files, lines and values) and what the next attempt should change (the
//! remediation). It recomputes what it checks from the inputs, and reads the
//! task's files itself for the row counts, rather than trusting the
//! dispatcher's own account. It never changes a result: a failed check is a
//! finding, and the scenario decides whether to retry.

skillhost_sdk::generate!(
    "task-verify",
    with: { "skillhost:task/types@0.1.0": generate },
);

mod checks;

use skillhost_sdk::log;

struct TaskVerify;

impl Guest for TaskVerify {
    skillhost_sdk::manifest! {
        name: "Task verifier",
        capabilities: ["fs", "log"],
        retry: never,
        estimated_duration_ms: 10,
    }

    fn run(input: Input) -> Result<Verdict, SkillError> {
        let step = &input.step;
        if input.result.step_id != step.id || input.result.kind != step.kind {
            return Err(SkillError::invalid_input(format!(
                "the result is step `{}`'s, not step `{}`'s: verify a step's own result",
                input.result.step_id, step.id
            )));
        }
        let mut findings = Vec::new();
        let mut directives: Vec<&str> = Vec::new();
        for check in &step.checks {
            let outcome = checks::run(check, &input)?;
            if let Some(message) = outcome.finding {
                findings.push(Finding {
                    check: check.clone(),
                    message,
                });
                directives.extend(outcome.remediation);
            }
        }
        let passed = findings.is_empty();
        let mut remediation = Vec::new();
        if !passed {
            for directive in input
                .result
                .applied
                .iter()
                .map(String::as_str)
                .chain(directives)
            {
                if !remediation.iter().any(|r: &String| r == directive) {
                    remediation.push(directive.to_string());
                }
            }
        }
        log::info(format!(
            "step `{}` attempt {}: {} ({} check(s), {} finding(s))",
            step.id,
            input.result.attempt,
            if passed { "passed" } else { "failed" },
            step.checks.len(),
            findings.len()
        ));
        Ok(Verdict {
            step_id: step.id.clone(),
            attempt: input.result.attempt,
            passed,
            findings,
            remediation,
        })
    }
}

export!(TaskVerify);

#[cfg(test)]
mod tests;
