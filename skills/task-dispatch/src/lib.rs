//! `task-dispatch`: performs one step of a task's plan: parse the CSV
//! records, total them per category, or write the report. It knows nothing
//! of the acceptance criteria: that is the verifier's part, which judges
//! each result and tells the next attempt what to change (the remediation).
//! Deterministic: the same files and input give the same result.

skillhost_sdk::generate!(
    "task-dispatch",
    with: { "skillhost:task/types@0.1.0": generate },
);

mod csv;
mod report;

use std::collections::BTreeMap;

use skillhost_sdk::{EntryKind, fs, log};

/// The error code for records that cannot be read as the task's.
const INVALID_DATA: &str = "invalid-data";

/// Remediation: a malformed amount rejects its row instead of being read
/// leniently.
const REJECT_MALFORMED: &str = "reject-malformed-amounts";
/// Remediation: a negative amount rejects its row.
const REJECT_NEGATIVE: &str = "reject-negative-amounts";

struct TaskDispatch;

impl Guest for TaskDispatch {
    skillhost_sdk::manifest! {
        name: "Task dispatch",
        capabilities: ["fs", "log"],
        retry: never,
        estimated_duration_ms: 20,
    }

    fn run(input: Input) -> Result<StepResult, SkillError> {
        let step = &input.step;
        let mut result = StepResult {
            step_id: step.id.clone(),
            kind: step.kind,
            attempt: input.attempt,
            applied: Vec::new(),
            rows: Vec::new(),
            rejected: Vec::new(),
            totals: Vec::new(),
            markdown: String::new(),
        };
        match step.kind {
            StepKind::ParseRecords => {
                let options = ParseOptions::from_remediation(&input.remediation)?;
                result.applied = input.remediation.clone();
                let (rows, rejected) = parse_records(&input.task, &options)?;
                log::info(format!(
                    "step `{}` attempt {}: {} row(s) counted, {} rejected{}",
                    step.id,
                    input.attempt,
                    rows.len(),
                    rejected.len(),
                    if result.applied.is_empty() {
                        String::new()
                    } else {
                        format!(" (applied: {})", result.applied.join(", "))
                    }
                ));
                result.rows = rows;
                result.rejected = rejected;
            }
            StepKind::Aggregate => {
                no_remediation(&input)?;
                let parsed = accepted(&input, StepKind::ParseRecords)?;
                result.totals = aggregate(&parsed.rows)?;
                log::info(format!(
                    "step `{}`: {} categor(y/ies) from {} row(s)",
                    step.id,
                    result.totals.len(),
                    parsed.rows.len()
                ));
            }
            StepKind::WriteReport => {
                no_remediation(&input)?;
                let parsed = accepted(&input, StepKind::ParseRecords)?;
                let totals = accepted(&input, StepKind::Aggregate)?;
                result.markdown = report::markdown(&input.task, parsed, &totals.totals);
            }
        }
        Ok(result)
    }
}

export!(TaskDispatch);

/// How `parse-records` treats amounts, from the remediation it was given.
#[derive(Debug, Default, PartialEq)]
struct ParseOptions {
    reject_malformed: bool,
    reject_negative: bool,
}

impl ParseOptions {
    fn from_remediation(remediation: &[String]) -> Result<Self, SkillError> {
        let mut options = ParseOptions::default();
        for directive in remediation {
            match directive.as_str() {
                REJECT_MALFORMED => options.reject_malformed = true,
                REJECT_NEGATIVE => options.reject_negative = true,
                other => {
                    return Err(SkillError::invalid_input(format!(
                        "unknown remediation `{other}`; step kind parse-records takes `{REJECT_MALFORMED}` and `{REJECT_NEGATIVE}`"
                    )));
                }
            }
        }
        Ok(options)
    }
}

fn no_remediation(input: &Input) -> Result<(), SkillError> {
    if input.remediation.is_empty() {
        Ok(())
    } else {
        Err(SkillError::invalid_input(format!(
            "step `{}` ({}) takes no remediation; got `{}`",
            input.step.id,
            kind_name(input.step.kind),
            input.remediation.join("`, `")
        )))
    }
}

/// The accepted result of the earlier step of `kind`.
fn accepted(input: &Input, kind: StepKind) -> Result<&StepResult, SkillError> {
    input.accepted.iter().rev().find(|r| r.kind == kind).ok_or_else(|| {
        SkillError::invalid_input(format!(
            "step `{}` needs the accepted result of a {} step, and there is none; plan that step before it",
            input.step.id,
            kind_name(kind)
        ))
    })
}

/// A step kind as the WIT names it.
fn kind_name(kind: StepKind) -> &'static str {
    match kind {
        StepKind::ParseRecords => "parse-records",
        StepKind::Aggregate => "aggregate",
        StepKind::WriteReport => "write-report",
    }
}

/// `dir/name`, with `""` meaning the granted directory itself.
fn join(dir: &str, name: &str) -> String {
    let dir = dir.trim_end_matches('/');
    if dir.is_empty() || dir == "." {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

/// Every data row of every `*.csv` file of the task's folder, counted or
/// rejected, files by name and rows in line order.
fn parse_records(
    task: &Task,
    options: &ParseOptions,
) -> Result<(Vec<ParsedRow>, Vec<RejectedRow>), SkillError> {
    let dir = &task.data_dir;
    let mut entries = fs::list_dir(dir).map_err(|e| {
        e.context(format!(
            "task-dispatch cannot list the task's folder `{dir}`"
        ))
    })?;
    entries.retain(|e| e.kind == EntryKind::File && e.name.ends_with(".csv"));
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rows = Vec::new();
    let mut rejected = Vec::new();
    for entry in &entries {
        let path = join(dir, &entry.name);
        let text = fs::read_text(&path)
            .map_err(|e| e.context(format!("task-dispatch cannot read `{path}`")))?;
        parse_file(
            &path,
            &text,
            &task.columns,
            options,
            &mut rows,
            &mut rejected,
        )?;
    }
    Ok((rows, rejected))
}

fn parse_file(
    path: &str,
    text: &str,
    columns: &Columns,
    options: &ParseOptions,
    rows: &mut Vec<ParsedRow>,
    rejected: &mut Vec<RejectedRow>,
) -> Result<(), SkillError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (u32::try_from(i + 1).unwrap_or(u32::MAX), l))
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((_, header)) = lines.next() else {
        return Err(SkillError::new(
            INVALID_DATA,
            format!("`{path}` is empty; a CSV file starts with a header line"),
        ));
    };
    let header = csv::fields(header);
    let column = |name: &str| {
        header.iter().position(|h| h.trim() == name).ok_or_else(|| {
            SkillError::new(
                INVALID_DATA,
                format!(
                    "`{path}` has no column `{name}`; its columns: {}",
                    header.join(", ")
                ),
            )
        })
    };
    let (category_at, amount_at) = (column(&columns.category)?, column(&columns.amount)?);
    for (line, text) in lines {
        let reject = |reason: String| RejectedRow {
            file: path.to_string(),
            line,
            reason,
        };
        let fields = csv::fields(text);
        if fields.len() != header.len() {
            rejected.push(reject(format!(
                "{} field(s), the header has {}",
                fields.len(),
                header.len()
            )));
            continue;
        }
        let category = fields[category_at].trim();
        if category.is_empty() {
            rejected.push(reject(format!("empty `{}`", columns.category)));
            continue;
        }
        let raw = fields[amount_at].trim();
        let amount = match csv::decimal_milli(raw) {
            Some(amount) => amount,
            None if options.reject_malformed => {
                rejected.push(reject(format!("malformed amount `{raw}`")));
                continue;
            }
            None => csv::lenient_milli(raw),
        };
        if amount < 0 && options.reject_negative {
            rejected.push(reject(format!("negative amount `{raw}`")));
            continue;
        }
        rows.push(ParsedRow {
            file: path.to_string(),
            line,
            category: category.to_string(),
            raw_amount: raw.to_string(),
            amount_milli: amount,
        });
    }
    Ok(())
}

/// The rows' totals per category, by category name.
fn aggregate(rows: &[ParsedRow]) -> Result<Vec<CategoryTotal>, SkillError> {
    let mut totals: BTreeMap<&str, (u32, i64)> = BTreeMap::new();
    for row in rows {
        let (count, total) = totals.entry(&row.category).or_default();
        *count = count.saturating_add(1);
        *total = total.checked_add(row.amount_milli).ok_or_else(|| {
            SkillError::new(
                INVALID_DATA,
                format!(
                    "the total of category `{}` is out of range at {}:{}",
                    row.category, row.file, row.line
                ),
            )
        })?;
    }
    Ok(totals
        .into_iter()
        .map(|(category, (rows, total_milli))| CategoryTotal {
            category: category.to_string(),
            rows,
            total_milli,
        })
        .collect())
}

#[cfg(test)]
mod tests;
