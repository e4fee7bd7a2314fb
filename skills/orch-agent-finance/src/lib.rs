//! `orch-agent-finance`: the orchestrator's agent for money. It finds the
//! refund's invoice in the inventory (`inventory.json` in the granted
//! directory), checks the customer and currency, and works out the ledger
//! postings and the invoice's new refunded amount. A refund over what is
//! left to refund is an execution with `ok` false: no retry can change it.
//! Deterministic: the same inventory and input give the same execution.

skillhost_sdk::generate!(
    "orch-agent-finance",
    with: { "skillhost:orchestrator/types@0.1.0": generate },
);

#[cfg(test)]
mod tests;

use serde::Deserialize;
use skillhost_sdk::{fs, log};

/// The file the agent reads, relative to its `fs` grant.
const INVENTORY: &str = "inventory.json";

#[derive(Deserialize)]
struct Inventory {
    invoices: Vec<Invoice>,
}

#[derive(Deserialize)]
struct Invoice {
    id: String,
    customer: String,
    currency: String,
    amount_cents: u64,
    refunded_cents: u64,
}

struct OrchAgentFinance;

impl Guest for OrchAgentFinance {
    skillhost_sdk::manifest! {
        name: "Orchestrator finance agent",
        capabilities: ["fs", "log"],
        retry: never,
        estimated_duration_ms: 2,
    }

    fn run(input: Input) -> Result<Execution, SkillError> {
        let action = &input.action;
        let (Verb::Refund, Some(cents), Some(currency), Some(customer)) = (
            action.verb,
            action.amount_cents,
            action.currency.as_deref(),
            action.customer.as_deref(),
        ) else {
            return Err(SkillError::invalid_input(
                "the finance agent carries out refunds with an amount, a currency and a customer; \
                 deploy, restart, scale and delete are the infra agent's",
            ));
        };
        let invoice = find(&action.target)?;
        if invoice.customer != customer || invoice.currency != currency {
            return Err(SkillError::invalid_input(format!(
                "invoice `{}` is customer `{}`'s, in {}; the request says customer `{customer}`, in {currency}",
                invoice.id, invoice.customer, invoice.currency
            )));
        }
        let left = invoice.amount_cents.saturating_sub(invoice.refunded_cents);
        let mut execution = Execution {
            attempt: input.attempt,
            ok: true,
            retryable: false,
            error: String::new(),
            operations: Vec::new(),
            changes: Vec::new(),
        };
        if cents > left {
            execution.ok = false;
            execution.error = format!(
                "a refund of {} {currency} is more than the {} {currency} left to refund on invoice `{}` \
                 ({} invoiced, {} refunded)",
                money(cents),
                money(left),
                invoice.id,
                money(invoice.amount_cents),
                money(invoice.refunded_cents)
            );
        } else {
            execution.operations = vec![
                format!("debit account `refunds` {} {currency}", money(cents)),
                format!("credit customer `{customer}` {} {currency}", money(cents)),
            ];
            execution.changes.push(Change {
                subject: format!("invoice {}", invoice.id),
                field: "refunded".into(),
                before: format!("{} {currency}", money(invoice.refunded_cents)),
                after: format!("{} {currency}", money(invoice.refunded_cents + cents)),
            });
        }
        log::info(format!(
            "attempt {}: {}",
            input.attempt,
            if execution.ok {
                format!("{} posting(s)", execution.operations.len())
            } else {
                format!("refused: {}", execution.error)
            }
        ));
        Ok(execution)
    }
}

export!(OrchAgentFinance);

fn find(id: &str) -> Result<Invoice, SkillError> {
    let text = fs::read_text(INVENTORY)?;
    let inventory: Inventory = serde_json::from_str(&text).map_err(|e| {
        SkillError::new("invalid-data", format!("`{INVENTORY}` does not read: {e}"))
    })?;
    let ids: Vec<&str> = inventory.invoices.iter().map(|i| i.id.as_str()).collect();
    let ids = ids.join(", ");
    inventory
        .invoices
        .into_iter()
        .find(|i| i.id == id)
        .ok_or_else(|| {
            SkillError::invalid_input(format!("no invoice `{id}` in `{INVENTORY}`; it has: {ids}"))
        })
}

/// Hundredths as `1,250.00`.
fn money(cents: u64) -> String {
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
