//! A request's sentence into an action. The grammar is small and stated in
//! the errors: a verb first, then keywords that introduce the details
//! (`in ENV`, `to N replicas`, `version V`; for a refund `AMOUNT CUR`,
//! `customer ID`, `invoice ID`), and the target is the first word left that
//! is not a filler (`the`, `service`, `of`, …). Matching is by words, never
//! by substrings, so `prod-reports` is a service name, not an environment.

use crate::{Action, Verb};

const EXAMPLES: &str = "e.g. \"Restart the search service in staging\", \
    \"Scale checkout to 8 replicas in production\", \
    \"Deploy version 1.9.0 of checkout in staging\", \
    \"Delete the legacy-reports service in production\", \
    \"Refund 1,250.00 EUR to customer C-1042 for invoice INV-2207\"";

/// Words that introduce nothing and are never a target.
const FILLERS: &[&str] = &["the", "service", "of", "to", "for", "in", "on", "a", "an"];

pub(crate) fn action(text: &str) -> Result<Action, String> {
    let words: Vec<&str> = text
        .split_whitespace()
        .map(|w| w.trim_end_matches(['.', ',', ';', ':', '!', '?']))
        .filter(|w| !w.is_empty())
        .collect();
    let Some(first) = words.first() else {
        return Err(format!(
            "the request's text is empty; write one sentence, {EXAMPLES}"
        ));
    };
    let said = first.to_lowercase();
    let verb = match said.as_str() {
        "deploy" => Verb::Deploy,
        "restart" => Verb::Restart,
        "scale" => Verb::Scale,
        "delete" | "remove" | "drop" | "destroy" | "decommission" | "purge" => Verb::Delete,
        "refund" => Verb::Refund,
        _ => {
            return Err(format!(
                "unknown verb `{first}`: the orchestrator knows deploy, restart, scale, \
                 delete (or remove, drop, destroy, decommission, purge) and refund; {EXAMPLES}"
            ));
        }
    };
    let mut words = Words::new(&words[1..]);
    let mut action = Action {
        verb,
        said,
        target: String::new(),
        environment: None,
        replicas: None,
        version: None,
        amount_cents: None,
        currency: None,
        customer: None,
    };
    if verb == Verb::Refund {
        refund(&mut words, &mut action)?;
    } else {
        service(&mut words, &mut action)?;
    }
    Ok(action)
}

/// The words after the verb, with those already read marked.
struct Words<'a> {
    words: &'a [&'a str],
    used: Vec<bool>,
}

impl<'a> Words<'a> {
    fn new(words: &'a [&'a str]) -> Self {
        Words {
            words,
            used: vec![false; words.len()],
        }
    }

    /// The word after the last `keyword` (any of them), marking both used.
    fn after(&mut self, keywords: &[&str]) -> Option<&'a str> {
        let at = self
            .words
            .iter()
            .rposition(|w| keywords.iter().any(|k| w.eq_ignore_ascii_case(k)))?;
        let value = self.words.get(at + 1)?;
        self.used[at] = true;
        self.used[at + 1] = true;
        Some(value)
    }

    /// The first word not used and not a filler.
    fn target(&self) -> Option<&'a str> {
        self.words
            .iter()
            .zip(&self.used)
            .find(|(w, used)| !**used && !FILLERS.iter().any(|f| w.eq_ignore_ascii_case(f)))
            .map(|(w, _)| *w)
    }
}

fn name(what: &str, word: &str) -> Result<String, String> {
    if word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        Ok(word.to_string())
    } else {
        Err(format!(
            "{what} `{word}` must be letters, digits, `-`, `_` and `.`; {EXAMPLES}"
        ))
    }
}

/// deploy, restart, scale, delete: a service and an environment.
fn service(words: &mut Words<'_>, action: &mut Action) -> Result<(), String> {
    let env = words.after(&["in", "on"]).ok_or_else(|| {
        format!(
            "`{}` needs an environment (`in production`, `in staging` or `in development`); {EXAMPLES}",
            action.said
        )
    })?;
    action.environment = Some(
        match env.to_lowercase().as_str() {
            "production" | "prod" => "production",
            "staging" | "stage" => "staging",
            "development" | "dev" => "development",
            _ => {
                return Err(format!(
                    "unknown environment `{env}`: production, staging or development"
                ));
            }
        }
        .to_string(),
    );
    match action.verb {
        Verb::Scale => {
            let at = words
                .words
                .iter()
                .position(|w| {
                    w.eq_ignore_ascii_case("replicas") || w.eq_ignore_ascii_case("replica")
                })
                .filter(|at| *at > 0)
                .ok_or_else(|| format!("`scale` needs `to N replicas`; {EXAMPLES}"))?;
            let count = words.words[at - 1];
            let replicas: u32 = count.parse().map_err(|_| {
                format!("`{count} replicas`: the replica count must be a whole number")
            })?;
            words.used[at - 1] = true;
            words.used[at] = true;
            action.replicas = Some(replicas);
        }
        Verb::Deploy => {
            let version = words
                .after(&["version"])
                .ok_or_else(|| format!("`deploy` needs `version V`; {EXAMPLES}"))?;
            action.version = Some(name("version", version)?);
        }
        _ => {}
    }
    let target = words
        .target()
        .ok_or_else(|| format!("`{}` needs a service; {EXAMPLES}", action.said))?;
    action.target = name("service", target)?;
    Ok(())
}

/// refund: an amount and currency, a customer and an invoice.
fn refund(words: &mut Words<'_>, action: &mut Action) -> Result<(), String> {
    let at = words
        .words
        .iter()
        .position(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .ok_or_else(|| format!("`refund` needs an amount and a currency; {EXAMPLES}"))?;
    let amount = words.words[at];
    action.amount_cents = Some(cents(amount)?);
    let currency = words
        .words
        .get(at + 1)
        .filter(|c| c.len() == 3 && c.chars().all(|c| c.is_ascii_uppercase()))
        .ok_or_else(|| {
            format!("the amount `{amount}` needs its currency after it, three capital letters such as `EUR`")
        })?;
    words.used[at] = true;
    words.used[at + 1] = true;
    action.currency = Some(currency.to_string());
    let customer = words
        .after(&["customer"])
        .ok_or_else(|| format!("`refund` needs `customer ID`; {EXAMPLES}"))?;
    action.customer = Some(name("customer", customer)?);
    let invoice = words
        .after(&["invoice"])
        .ok_or_else(|| format!("`refund` needs `invoice ID`; {EXAMPLES}"))?;
    action.target = name("invoice", invoice)?;
    Ok(())
}

/// `1,250.00` as 125000: digits with optional thousands commas and at most
/// two decimals.
pub(crate) fn cents(amount: &str) -> Result<u64, String> {
    let bad = || {
        format!("the amount `{amount}` must be digits with at most two decimals, e.g. `1,250.00`")
    };
    let (whole, frac) = amount.split_once('.').unwrap_or((amount, ""));
    let groups: Vec<&str> = whole.split(',').collect();
    let grouped_ok = groups.len() == 1
        || (!groups[0].is_empty()
            && groups[0].len() <= 3
            && groups[1..].iter().all(|g| g.len() == 3));
    if whole.is_empty()
        || !grouped_ok
        || frac.len() > 2
        || !groups
            .iter()
            .chain([&frac])
            .all(|g| g.chars().all(|c| c.is_ascii_digit()))
    {
        return Err(bad());
    }
    let units: u64 = groups.concat().parse().map_err(|_| bad())?;
    let frac: u64 = match frac.len() {
        0 => 0,
        1 => frac.parse::<u64>().map_err(|_| bad())? * 10,
        _ => frac.parse().map_err(|_| bad())?,
    };
    units
        .checked_mul(100)
        .and_then(|c| c.checked_add(frac))
        .ok_or_else(bad)
}
