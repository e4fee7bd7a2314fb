//! The checks, one function each. A check returns its finding (`None` when
//! it holds) and the remediation directives that would fix it, if any.

use std::collections::BTreeMap;
use std::fmt::Write;

use skillhost_sdk::{EntryKind, SkillError, fs};

use crate::{CategoryTotal, Input, ParsedRow, StepKind, StepResult};

/// How many rows a finding names before it says how many more there are.
const LISTED: usize = 5;

/// What one check found.
pub struct Outcome {
    pub finding: Option<String>,
    pub remediation: Option<&'static str>,
}

impl Outcome {
    fn holds() -> Self {
        Outcome {
            finding: None,
            remediation: None,
        }
    }

    fn finding(message: String) -> Self {
        Outcome {
            finding: Some(message),
            remediation: None,
        }
    }
}

/// Every check this verifier knows.
pub const CHECKS: [&str; 8] = [
    "row-counts-match",
    "amounts-well-formed",
    "no-negative-amounts",
    "max-rejected-rows",
    "totals-match-rows",
    "required-categories",
    "report-matches-totals",
    "required-sections",
];

pub fn run(check: &str, input: &Input) -> Result<Outcome, SkillError> {
    let result = &input.result;
    match check {
        "row-counts-match" => row_counts_match(input),
        "amounts-well-formed" => Ok(amounts_well_formed(&result.rows)),
        "no-negative-amounts" => Ok(no_negative_amounts(&result.rows)),
        "max-rejected-rows" => Ok(max_rejected_rows(input)),
        "totals-match-rows" => Ok(totals_match_rows(
            &accepted(input, StepKind::ParseRecords, check)?.rows,
            &result.totals,
        )),
        "required-categories" => Ok(required_categories(input)),
        "report-matches-totals" => Ok(report_matches_totals(
            &result.markdown,
            &accepted(input, StepKind::Aggregate, check)?.totals,
        )),
        "required-sections" => Ok(required_sections(input)),
        other => Err(SkillError::invalid_input(format!(
            "step `{}` asks for check `{other}`, which this verifier does not know; it knows {}",
            input.step.id,
            CHECKS.join(", ")
        ))),
    }
}

fn accepted<'a>(
    input: &'a Input,
    kind: StepKind,
    check: &str,
) -> Result<&'a StepResult, SkillError> {
    input.accepted.iter().rev().find(|r| r.kind == kind).ok_or_else(|| {
        SkillError::invalid_input(format!(
            "check `{check}` of step `{}` needs the accepted result of an earlier {} step, and there is none",
            input.step.id,
            match kind {
                StepKind::ParseRecords => "parse-records",
                StepKind::Aggregate => "aggregate",
                StepKind::WriteReport => "write-report",
            }
        ))
    })
}

/// `what` for the first rows, then how many more.
fn listed<T>(items: &[T], what: impl Fn(&T) -> String) -> String {
    let mut text: Vec<String> = items.iter().take(LISTED).map(what).collect();
    if items.len() > LISTED {
        text.push(format!("and {} more", items.len() - LISTED));
    }
    text.join("; ")
}

/// A decimal number as written (`-?DIGITS[.DIGITS]`, at most three
/// decimals) in thousandths; `None` for anything else.
pub fn decimal_milli(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let (whole, fraction) = match digits.split_once('.') {
        Some((w, f)) if !f.is_empty() && f.len() <= 3 => (w, f),
        Some(_) => return None,
        None => (digits, ""),
    };
    if whole.is_empty()
        || !(whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let padded = format!("{whole}{fraction:0<3}");
    let value: i64 = padded.parse().ok()?;
    Some(if digits.len() < text.len() {
        -value
    } else {
        value
    })
}

/// Thousandths as the report writes them (`400` is `0.4`, `0` is `0.0`).
pub fn amount(milli: i64) -> String {
    let sign = if milli < 0 { "-" } else { "" };
    let abs = milli.unsigned_abs();
    let fraction = format!("{:03}", abs % 1000);
    let fraction = fraction.trim_end_matches('0');
    format!(
        "{sign}{}.{}",
        abs / 1000,
        if fraction.is_empty() { "0" } else { fraction }
    )
}

fn row_counts_match(input: &Input) -> Result<Outcome, SkillError> {
    let dir = &input.task.data_dir;
    let mut entries = fs::list_dir(dir)
        .map_err(|e| e.context(format!("task-verify cannot list the task's folder `{dir}`")))?;
    entries.retain(|e| e.kind == EntryKind::File && e.name.ends_with(".csv"));
    let mut seen: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for row in &input.result.rows {
        seen.entry(row.file.clone()).or_default().0 += 1;
    }
    for row in &input.result.rejected {
        seen.entry(row.file.clone()).or_default().1 += 1;
    }
    let mut wrong = Vec::new();
    for entry in &entries {
        let path = match dir.trim_end_matches('/') {
            "" | "." => entry.name.clone(),
            dir => format!("{dir}/{}", entry.name),
        };
        let text = fs::read_text(&path)
            .map_err(|e| e.context(format!("task-verify cannot read `{path}`")))?;
        let lines = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
            .saturating_sub(1);
        let (counted, rejected) = seen.remove(&path).unwrap_or_default();
        if counted + rejected != lines {
            wrong.push(format!(
                "`{path}` has {lines} data line(s), but {counted} were counted and {rejected} rejected"
            ));
        }
    }
    for (path, (counted, rejected)) in seen {
        wrong.push(format!(
            "{counted} row(s) counted and {rejected} rejected from `{path}`, which is not a *.csv file of `{dir}`"
        ));
    }
    Ok(if wrong.is_empty() {
        Outcome::holds()
    } else {
        Outcome::finding(wrong.join("; "))
    })
}

fn amounts_well_formed(rows: &[ParsedRow]) -> Outcome {
    let bad: Vec<&ParsedRow> = rows
        .iter()
        .filter(|r| decimal_milli(&r.raw_amount) != Some(r.amount_milli))
        .collect();
    if bad.is_empty() {
        return Outcome::holds();
    }
    Outcome {
        finding: Some(format!(
            "{} counted row(s) have an amount that is not a decimal number as written: {}",
            bad.len(),
            listed(&bad, |r| format!(
                "{}:{} `{}` counted as {}",
                r.file,
                r.line,
                r.raw_amount,
                amount(r.amount_milli)
            ))
        )),
        remediation: Some("reject-malformed-amounts"),
    }
}

fn no_negative_amounts(rows: &[ParsedRow]) -> Outcome {
    let bad: Vec<&ParsedRow> = rows.iter().filter(|r| r.amount_milli < 0).collect();
    if bad.is_empty() {
        return Outcome::holds();
    }
    Outcome {
        finding: Some(format!(
            "{} counted row(s) have a negative amount: {}",
            bad.len(),
            listed(&bad, |r| format!(
                "{}:{} {}",
                r.file,
                r.line,
                amount(r.amount_milli)
            ))
        )),
        remediation: Some("reject-negative-amounts"),
    }
}

fn max_rejected_rows(input: &Input) -> Outcome {
    let rejected = &input.result.rejected;
    match input.task.criteria.max_rejected_rows {
        Some(max) if rejected.len() > max as usize => Outcome::finding(format!(
            "{} row(s) rejected, at most {max} allowed: {}",
            rejected.len(),
            listed(rejected, |r| format!("{}:{} {}", r.file, r.line, r.reason))
        )),
        _ => Outcome::holds(),
    }
}

fn totals_match_rows(rows: &[ParsedRow], totals: &[CategoryTotal]) -> Outcome {
    let mut expected: BTreeMap<&str, (u32, i128)> = BTreeMap::new();
    for row in rows {
        let (count, total) = expected.entry(&row.category).or_default();
        *count += 1;
        *total += i128::from(row.amount_milli);
    }
    let mut wrong = Vec::new();
    for total in totals {
        match expected.remove(total.category.as_str()) {
            Some((count, sum)) if count == total.rows && sum == i128::from(total.total_milli) => {}
            Some((count, sum)) => wrong.push(format!(
                "`{}`: {} row(s) totalling {} reported, the counted rows give {count} totalling {}",
                total.category,
                total.rows,
                amount(total.total_milli),
                i64::try_from(sum).map_or_else(|_| "an out-of-range sum".into(), amount)
            )),
            None => wrong.push(format!("`{}` has no counted row", total.category)),
        }
    }
    for (category, (count, _)) in expected {
        wrong.push(format!(
            "`{category}` ({count} counted row(s)) has no total"
        ));
    }
    if wrong.is_empty() {
        Outcome::holds()
    } else {
        Outcome::finding(wrong.join("; "))
    }
}

fn required_categories(input: &Input) -> Outcome {
    let missing: Vec<&String> = input
        .task
        .criteria
        .required_categories
        .iter()
        .flatten()
        .filter(|c| {
            !input
                .result
                .totals
                .iter()
                .any(|t| &t.category == *c && t.rows > 0)
        })
        .collect();
    if missing.is_empty() {
        return Outcome::holds();
    }
    let present: Vec<&str> = input
        .result
        .totals
        .iter()
        .map(|t| t.category.as_str())
        .collect();
    Outcome::finding(format!(
        "no counted row of required categor(y/ies) {}; the data has {}",
        listed(&missing, |c| format!("`{c}`")),
        if present.is_empty() {
            "none".to_string()
        } else {
            present.join(", ")
        }
    ))
}

/// The rows of the report's "Totals by category" table:
/// category, rows and total as written.
fn report_totals(markdown: &str) -> Option<Vec<(String, String, String)>> {
    let section = markdown
        .split("\n## ")
        .find(|s| s.starts_with("Totals by category\n"))?;
    Some(
        section
            .lines()
            .filter(|l| l.starts_with('|'))
            .skip(2) // the header and the alignment row
            .filter_map(|l| {
                let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
                match cells[..] {
                    [category, rows, total] if category != "**all**" => {
                        Some((category.to_string(), rows.to_string(), total.to_string()))
                    }
                    _ => None,
                }
            })
            .collect(),
    )
}

fn report_matches_totals(markdown: &str, totals: &[CategoryTotal]) -> Outcome {
    let Some(table) = report_totals(markdown) else {
        return Outcome::finding("the report has no \"Totals by category\" section".into());
    };
    let expected: Vec<(String, String, String)> = totals
        .iter()
        .map(|t| {
            (
                t.category.clone(),
                t.rows.to_string(),
                amount(t.total_milli),
            )
        })
        .collect();
    if table == expected {
        return Outcome::holds();
    }
    let mut wrong = String::new();
    for (category, rows, total) in &expected {
        match table.iter().find(|(c, _, _)| c == category) {
            None => {
                let _ = write!(wrong, "`{category}` is missing from the table; ");
            }
            Some((_, r, t)) if (r, t) != (rows, total) => {
                let _ = write!(
                    wrong,
                    "`{category}` shows {r} row(s) totalling {t}, the accepted totals say {rows} totalling {total}; "
                );
            }
            Some(_) => {}
        }
    }
    for (category, _, _) in &table {
        if !expected.iter().any(|(c, _, _)| c == category) {
            let _ = write!(
                wrong,
                "`{category}` is in the table but not in the accepted totals; "
            );
        }
    }
    if wrong.is_empty() {
        wrong.push_str("the table's rows are not in the accepted totals' order; ");
    }
    Outcome::finding(format!(
        "the report's totals differ from the accepted ones: {}",
        wrong.trim_end_matches("; ")
    ))
}

fn required_sections(input: &Input) -> Outcome {
    let markdown = &input.result.markdown;
    let missing: Vec<&String> = input
        .task
        .criteria
        .required_sections
        .iter()
        .flatten()
        .filter(|s| {
            !markdown
                .lines()
                .any(|l| l.strip_prefix("## ").map(str::trim) == Some(s.as_str()))
        })
        .collect();
    if missing.is_empty() {
        Outcome::holds()
    } else {
        Outcome::finding(format!(
            "the report lacks the section(s) {}",
            listed(&missing, |s| format!("`## {s}`"))
        ))
    }
}
