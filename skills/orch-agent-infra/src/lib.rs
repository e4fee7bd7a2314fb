//! `orch-agent-infra`: the orchestrator's agent for services. It finds the
//! action's service in the inventory (`inventory.json` in the granted
//! directory) and works out the operations that carry the action out and
//! what they change: a restart or a deploy rolls the replicas in batches,
//! each at most the request's batch size and never more than the service's
//! `max_unavailable` down at once; a scale or a delete is one change.
//!
//! An action that cannot be carried out as asked is an execution with `ok`
//! false, `retryable` when a smaller batch could succeed: the agent does not
//! retry, the scenario's edges do. Deterministic: the same inventory and
//! input give the same execution.

skillhost_sdk::generate!(
    "orch-agent-infra",
    with: { "skillhost:orchestrator/types@0.1.0": generate },
);

#[cfg(test)]
mod tests;

use serde::Deserialize;
use skillhost_sdk::{fs, log};

/// The file the agent reads, relative to its `fs` grant.
pub(crate) const INVENTORY: &str = "inventory.json";

#[derive(Deserialize)]
struct Inventory {
    services: Vec<Service>,
}

#[derive(Deserialize)]
struct Service {
    name: String,
    environment: String,
    replicas: u32,
    max_unavailable: u32,
    version: String,
}

struct OrchAgentInfra;

impl Guest for OrchAgentInfra {
    skillhost_sdk::manifest! {
        name: "Orchestrator infra agent",
        capabilities: ["fs", "log"],
        retry: never,
        estimated_duration_ms: 2,
    }

    fn run(input: Input) -> Result<Execution, SkillError> {
        let action = &input.action;
        if action.verb == Verb::Refund {
            return Err(not_mine());
        }
        if input.batch_size == 0 {
            return Err(SkillError::invalid_input(
                "`batch_size` is 0; a rollout restarts at least one replica at a time",
            ));
        }
        let service = find(action)?;
        let mut execution = Execution {
            attempt: input.attempt,
            ok: true,
            retryable: false,
            error: String::new(),
            operations: Vec::new(),
            changes: Vec::new(),
        };
        let subject = format!("service {}", service.name);
        let change = |field: &str, before: String, after: String| Change {
            subject: subject.clone(),
            field: field.to_string(),
            before,
            after,
        };
        match action.verb {
            Verb::Restart | Verb::Deploy => {
                let version = action.version.clone().unwrap_or_default();
                if action.verb == Verb::Deploy && version == service.version {
                    refuse(
                        &mut execution,
                        false,
                        format!("service `{}` already runs version {version}", service.name),
                    );
                } else if let Err((retryable, error)) =
                    rollout(&service, input.batch_size, &mut execution.operations)
                {
                    refuse(&mut execution, retryable, error);
                } else if action.verb == Verb::Deploy {
                    execution
                        .changes
                        .push(change("version", service.version.clone(), version));
                } else {
                    execution.changes.push(change(
                        "replicas restarted",
                        format!("0 of {}", service.replicas),
                        format!("{0} of {0}", service.replicas),
                    ));
                }
            }
            Verb::Scale => {
                let wanted = action.replicas.unwrap_or(0);
                if wanted == 0 {
                    refuse(
                        &mut execution,
                        false,
                        format!(
                            "scaling service `{}` to 0 replicas stops it; ask to delete it instead",
                            service.name
                        ),
                    );
                } else if wanted == service.replicas {
                    refuse(
                        &mut execution,
                        false,
                        format!("service `{}` already has {wanted} replica(s)", service.name),
                    );
                } else {
                    execution.operations.push(format!(
                        "scale `{}` from {} to {wanted} replica(s)",
                        service.name, service.replicas
                    ));
                    execution.changes.push(change(
                        "replicas",
                        service.replicas.to_string(),
                        wanted.to_string(),
                    ));
                }
            }
            Verb::Delete => {
                execution.operations.push(format!(
                    "drain `{}`: stop routing traffic to its {} replica(s)",
                    service.name, service.replicas
                ));
                execution
                    .operations
                    .push(format!("delete `{}` and its replicas", service.name));
                execution.changes.push(change(
                    "replicas",
                    service.replicas.to_string(),
                    "0".into(),
                ));
                execution
                    .changes
                    .push(change("exists", "yes".into(), "no".into()));
            }
            Verb::Refund => return Err(not_mine()),
        }
        log::info(format!(
            "attempt {}: {} operation(s){}",
            input.attempt,
            execution.operations.len(),
            if execution.ok {
                String::new()
            } else {
                format!(", refused: {}", execution.error)
            }
        ));
        Ok(execution)
    }
}

export!(OrchAgentInfra);

/// Records why an execution cannot be carried out; nothing it planned stays.
fn refuse(execution: &mut Execution, retryable: bool, error: String) {
    execution.ok = false;
    execution.retryable = retryable;
    execution.error = error;
    execution.operations.clear();
    execution.changes.clear();
}

fn not_mine() -> SkillError {
    SkillError::invalid_input(
        "a refund is the finance agent's; the infra agent carries out deploy, restart, scale and delete",
    )
}

/// The action's service, in the action's environment.
fn find(action: &Action) -> Result<Service, SkillError> {
    let text = fs::read_text(INVENTORY)?;
    let inventory: Inventory = serde_json::from_str(&text).map_err(|e| {
        SkillError::new("invalid-data", format!("`{INVENTORY}` does not read: {e}"))
    })?;
    let names: Vec<&str> = inventory.services.iter().map(|s| s.name.as_str()).collect();
    let names = names.join(", ");
    let service = inventory
        .services
        .into_iter()
        .find(|s| s.name == action.target)
        .ok_or_else(|| {
            SkillError::invalid_input(format!(
                "no service `{}` in `{INVENTORY}`; it has: {names}",
                action.target
            ))
        })?;
    let env = action.environment.as_deref().unwrap_or("");
    if service.environment != env {
        return Err(SkillError::invalid_input(format!(
            "service `{}` runs in {}, not {env}",
            service.name, service.environment
        )));
    }
    Ok(service)
}

/// The rollout's batches: `Err((retryable, why))` when a batch would take
/// more replicas down than the service allows.
fn rollout(
    service: &Service,
    batch_size: u32,
    operations: &mut Vec<String>,
) -> Result<(), (bool, String)> {
    if service.replicas == 0 {
        return Err((false, format!("service `{}` has no replica", service.name)));
    }
    let batch = batch_size.min(service.replicas);
    if batch > service.max_unavailable {
        return Err((
            // A smaller batch fits when the service allows any replica down.
            service.max_unavailable >= 1,
            format!(
                "a batch of {batch} would take {batch} of the {} replica(s) of `{}` down at once; \
                 it allows {}",
                service.replicas, service.name, service.max_unavailable
            ),
        ));
    }
    let batches = service.replicas.div_ceil(batch);
    for b in 0..batches {
        let first = b * batch;
        let last = (first + batch).min(service.replicas);
        let replicas: Vec<String> = (first..last)
            .map(|i| format!("{}-{i}", service.name))
            .collect();
        operations.push(format!(
            "batch {}/{batches}: restart {}",
            b + 1,
            replicas.join(", ")
        ));
    }
    Ok(())
}
