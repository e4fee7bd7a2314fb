//! The report's Markdown, from the accepted parse and aggregate results.
//! Its layout is what `task-verify` reads back: a `## ` heading per section,
//! and in "Totals by category" one table row per category,
//! `| category | rows | total |`.

use std::fmt::Write;

use crate::{CategoryTotal, StepResult, Task};

/// Thousandths as a decimal: at least one decimal, no trailing zero beyond
/// it (`400` is `0.4`, `-1500` is `-1.5`, `0` is `0.0`).
pub fn amount(milli: i64) -> String {
    let sign = if milli < 0 { "-" } else { "" };
    let abs = milli.unsigned_abs();
    let fraction = format!("{:03}", abs % 1000);
    let fraction = fraction.trim_end_matches('0');
    let fraction = if fraction.is_empty() { "0" } else { fraction };
    format!("{sign}{}.{fraction}", abs / 1000)
}

pub fn markdown(task: &Task, parsed: &StepResult, totals: &[CategoryTotal]) -> String {
    let mut files: Vec<&str> = parsed
        .rows
        .iter()
        .map(|r| r.file.as_str())
        .chain(parsed.rejected.iter().map(|r| r.file.as_str()))
        .collect();
    files.sort_unstable();
    files.dedup();
    let counted = parsed.rows.len();
    let rejected = parsed.rejected.len();
    let amount_column = &task.columns.amount;
    let all: i64 = totals
        .iter()
        .map(|t| t.total_milli)
        .fold(0, i64::saturating_add);

    let mut md = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(md, "# {}\n", task.goal);
    let _ = writeln!(
        md,
        "Task `{}`: the records of `{}`, totalled by `{}`.\n",
        task.id, task.data_dir, task.columns.category
    );
    let _ = writeln!(md, "## Summary\n");
    let _ = writeln!(md, "- Files read: {}", files.len());
    let _ = writeln!(md, "- Rows read: {}", counted + rejected);
    let _ = writeln!(md, "- Rows counted: {counted}");
    let _ = writeln!(md, "- Rows rejected: {rejected}");
    let _ = writeln!(md, "- Categories: {}", totals.len());
    let _ = writeln!(md, "- Total `{amount_column}`: {}\n", amount(all));

    let _ = writeln!(md, "## Totals by category\n");
    let _ = writeln!(
        md,
        "| {} | rows | total `{amount_column}` |",
        task.columns.category
    );
    let _ = writeln!(md, "| --- | ---: | ---: |");
    for total in totals {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            total.category,
            total.rows,
            amount(total.total_milli)
        );
    }
    let _ = writeln!(md, "| **all** | {counted} | {} |\n", amount(all));

    let _ = writeln!(md, "## Rejected rows\n");
    if parsed.rejected.is_empty() {
        let _ = writeln!(md, "None: every row was counted.");
    } else {
        let _ = writeln!(md, "| file | line | reason |");
        let _ = writeln!(md, "| --- | ---: | --- |");
        for row in &parsed.rejected {
            let _ = writeln!(md, "| {} | {} | {} |", row.file, row.line, row.reason);
        }
    }
    md
}
