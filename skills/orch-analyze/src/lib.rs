//! `orch-analyze`: the orchestrator's first step. It reads a request's one
//! sentence into an action (its verb, target and the details the verb
//! needs), picks the agent kind that carries it out, and judges whether the
//! action needs a person's approval. The risk rules are stated here, once,
//! and each one that fires is named in the analysis:
//!
//! 1. a destructive verb (`delete`, also written `remove`, `drop`,
//!    `destroy`, `decommission`, `purge`);
//! 2. a production environment (`production`, also written `prod`);
//! 3. an amount above the threshold the scenario passes in.
//!
//! It decides nothing else: which node runs next is the scenario's edges'
//! choice, made on this analysis. Pure: no host call but `log`.

skillhost_sdk::generate!(
    "orch-analyze",
    with: { "skillhost:orchestrator/types@0.1.0": generate },
);

mod parse;
#[cfg(test)]
mod tests;

use skillhost_sdk::log;

struct OrchAnalyze;

impl Guest for OrchAnalyze {
    skillhost_sdk::manifest! {
        name: "Orchestrator analysis",
        capabilities: ["log"],
        retry: never,
        estimated_duration_ms: 1,
    }

    fn run(input: Input) -> Result<Analysis, SkillError> {
        let request = &input.request;
        for (field, value) in [("id", &request.id), ("requested_by", &request.requested_by)] {
            if value.trim().is_empty() {
                return Err(SkillError::invalid_input(format!(
                    "the request's `{field}` is empty"
                )));
            }
        }
        let action = parse::action(&request.text)
            .map_err(|e| SkillError::invalid_input(format!("request `{}`: {e}", request.id)))?;
        let analysis = analyze(action, input.threshold_cents);
        log::info(format!(
            "request `{}`: {} ({:?} agent), {}",
            request.id,
            analysis.summary,
            analysis.kind,
            if analysis.risky {
                format!("risky: {}", analysis.reasons.join("; "))
            } else {
                "not risky".to_string()
            }
        ));
        Ok(analysis)
    }
}

export!(OrchAnalyze);

/// The agent kind, the summary and the risk rules that fire.
fn analyze(action: Action, threshold_cents: u64) -> Analysis {
    let kind = match action.verb {
        Verb::Deploy | Verb::Restart | Verb::Scale | Verb::Delete => AgentKind::Infra,
        Verb::Refund => AgentKind::Finance,
    };
    let mut reasons = Vec::new();
    if action.verb == Verb::Delete {
        reasons.push(format!("destructive verb `{}`", action.said));
    }
    if action.environment.as_deref() == Some("production") {
        reasons.push("production environment".to_string());
    }
    if let Some(cents) = action.amount_cents
        && cents > threshold_cents
    {
        let currency = action.currency.as_deref().unwrap_or("");
        reasons.push(format!(
            "amount {} {currency} over the threshold of {} {currency}",
            money(cents),
            money(threshold_cents)
        ));
    }
    Analysis {
        kind,
        summary: summary(&action),
        risky: !reasons.is_empty(),
        reasons,
        action,
    }
}

/// The action in a few words, for the approval's prompt and the record.
fn summary(action: &Action) -> String {
    let env = action.environment.as_deref().unwrap_or("");
    let target = &action.target;
    match action.verb {
        Verb::Deploy => format!(
            "deploy version {} of service `{target}` in {env}",
            action.version.as_deref().unwrap_or("")
        ),
        Verb::Restart => format!("restart service `{target}` in {env}"),
        Verb::Scale => format!(
            "scale service `{target}` to {} replica(s) in {env}",
            action.replicas.unwrap_or(0)
        ),
        Verb::Delete => format!("delete service `{target}` in {env}"),
        Verb::Refund => format!(
            "refund {} {} to customer `{}` for invoice `{target}`",
            money(action.amount_cents.unwrap_or(0)),
            action.currency.as_deref().unwrap_or(""),
            action.customer.as_deref().unwrap_or("")
        ),
    }
}

/// Hundredths as `1,250.00`.
pub(crate) fn money(cents: u64) -> String {
    let units = (cents / 100).to_string();
    let mut grouped = String::new();
    for (i, c) in units.chars().enumerate() {
        if i > 0 && (units.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(c);
    }
    format!("{grouped}.{:02}", cents % 100)
}
