//! `orch-record`: the orchestrator's last step. It writes the change record
//! of a request as Markdown, from what the run holds: the request, the
//! analysis and its risk reasons, every attempt of the agent, the person's
//! decision when one was needed, and the outcome the scenario reached. It
//! decides nothing: the outcome is given. Pure: no host call but `log`.

skillhost_sdk::generate!(
    "orch-record",
    with: { "skillhost:orchestrator/types@0.1.0": generate },
);

use std::fmt::Write;

use skillhost_sdk::log;

struct OrchRecord;

impl Guest for OrchRecord {
    skillhost_sdk::manifest! {
        name: "Orchestrator change record",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        let id = &input.request.id;
        let Some(last) = input.attempts.last().filter(|e| e.ok) else {
            return Err(SkillError::invalid_input(format!(
                "request `{id}`: a change record needs the attempt that succeeded last"
            )));
        };
        if !matches!(input.outcome.as_str(), "applied" | "declined") {
            return Err(SkillError::invalid_input(format!(
                "request `{id}`: the outcome `{}` is neither `applied` nor `declined`",
                input.outcome
            )));
        }
        if input.analysis.risky && input.decision.is_none() {
            return Err(SkillError::invalid_input(format!(
                "request `{id}`: the action is risky and no decision was given"
            )));
        }
        let markdown = record(&input, last);
        log::info(format!(
            "request `{id}`: {} ({} bytes)",
            input.outcome,
            markdown.len()
        ));
        Ok(Output { markdown })
    }
}

export!(OrchRecord);

fn record(input: &Input, last: &Execution) -> String {
    let (request, analysis) = (&input.request, &input.analysis);
    let mut md = String::new();
    // `write!` to a String cannot fail.
    let _ = writeln!(md, "# Change record {}\n", request.id);
    let _ = writeln!(
        md,
        "- Request: \"{}\", by {}",
        request.text.trim(),
        request.requested_by
    );
    let agent = match analysis.kind {
        AgentKind::Infra => "infra",
        AgentKind::Finance => "finance",
    };
    let _ = writeln!(md, "- Agent: {agent}");
    let _ = writeln!(md, "- Action: {}", analysis.summary);
    if analysis.risky {
        let _ = writeln!(md, "- Risk: {}", analysis.reasons.join("; "));
    } else {
        let _ = writeln!(md, "- Risk: none of the rules applies");
    }
    match &input.decision {
        None => {
            let _ = writeln!(md, "- Decision: not needed");
        }
        Some(d) => {
            let said = if d.approved { "approved" } else { "declined" };
            if d.comment.trim().is_empty() {
                let _ = writeln!(md, "- Decision: {said}");
            } else {
                let _ = writeln!(md, "- Decision: {said}: \"{}\"", d.comment.trim());
            }
        }
    }
    let _ = writeln!(md, "- Outcome: {}", input.outcome);

    if input.outcome == "applied" {
        let _ = writeln!(md, "\n## Operations\n");
    } else {
        let _ = writeln!(md, "\n## Operations (not carried out)\n");
    }
    for (i, op) in last.operations.iter().enumerate() {
        let _ = writeln!(md, "{}. {op}", i + 1);
    }
    let _ = writeln!(md, "\n## Changes\n");
    let _ = writeln!(md, "| subject | field | before | after |");
    let _ = writeln!(md, "| --- | --- | --- | --- |");
    for c in &last.changes {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} |",
            c.subject, c.field, c.before, c.after
        );
    }
    let _ = writeln!(md, "\n## Attempts\n");
    for e in &input.attempts {
        if e.ok {
            let _ = writeln!(
                md,
                "- attempt {}: {} operation(s)",
                e.attempt,
                e.operations.len()
            );
        } else {
            let _ = writeln!(md, "- attempt {}: refused: {}", e.attempt, e.error);
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skillhost::orchestrator::types::{Action, Verb};

    fn execution(attempt: u32, ok: bool) -> Execution {
        Execution {
            attempt,
            ok,
            retryable: !ok,
            error: if ok {
                String::new()
            } else {
                "too big a batch".into()
            },
            operations: if ok {
                vec!["batch 1/1: restart a-0".into()]
            } else {
                Vec::new()
            },
            changes: if ok {
                vec![Change {
                    subject: "service a".into(),
                    field: "replicas restarted".into(),
                    before: "0 of 1".into(),
                    after: "1 of 1".into(),
                }]
            } else {
                Vec::new()
            },
        }
    }

    fn input(risky: bool, decision: Option<Decision>, outcome: &str) -> Input {
        Input {
            request: Request {
                id: "CHG-1".into(),
                requested_by: "dana".into(),
                text: "Restart a in production".into(),
            },
            analysis: Analysis {
                kind: AgentKind::Infra,
                action: Action {
                    verb: Verb::Restart,
                    said: "restart".into(),
                    target: "a".into(),
                    environment: Some("production".into()),
                    replicas: None,
                    version: None,
                    amount_cents: None,
                    currency: None,
                    customer: None,
                },
                summary: "restart service `a` in production".into(),
                risky,
                reasons: if risky {
                    vec!["production environment".into()]
                } else {
                    Vec::new()
                },
            },
            attempts: vec![execution(0, false), execution(1, true)],
            decision,
            outcome: outcome.into(),
        }
    }

    #[test]
    fn the_record_says_what_was_asked_decided_and_done() {
        let decision = Decision {
            approved: false,
            comment: "not during the sale".into(),
        };
        let md = OrchRecord::run(input(true, Some(decision), "declined"))
            .unwrap()
            .markdown;
        assert_eq!(
            md,
            "# Change record CHG-1\n\n\
             - Request: \"Restart a in production\", by dana\n\
             - Agent: infra\n\
             - Action: restart service `a` in production\n\
             - Risk: production environment\n\
             - Decision: declined: \"not during the sale\"\n\
             - Outcome: declined\n\n\
             ## Operations (not carried out)\n\n\
             1. batch 1/1: restart a-0\n\n\
             ## Changes\n\n\
             | subject | field | before | after |\n\
             | --- | --- | --- | --- |\n\
             | service a | replicas restarted | 0 of 1 | 1 of 1 |\n\n\
             ## Attempts\n\n\
             - attempt 0: refused: too big a batch\n\
             - attempt 1: 1 operation(s)\n"
        );
        let md = OrchRecord::run(input(false, None, "applied"))
            .unwrap()
            .markdown;
        assert!(
            md.contains("- Decision: not needed\n- Outcome: applied\n\n## Operations\n"),
            "{md}"
        );
    }

    #[test]
    fn a_record_without_what_it_needs_is_refused() {
        let mut no_success = input(false, None, "applied");
        no_success.attempts.pop();
        for (input, expected) in [
            (no_success, "needs the attempt that succeeded last"),
            (input(false, None, "done"), "the outcome `done` is neither"),
            (
                input(true, None, "applied"),
                "risky and no decision was given",
            ),
        ] {
            let err = OrchRecord::run(input).unwrap_err();
            assert!(err.message.contains(expected), "{}", err.message);
        }
    }
}
