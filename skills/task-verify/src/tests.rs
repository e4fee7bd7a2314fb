use super::*;
use skillhost_sdk::testing;

fn task(criteria: Criteria) -> Task {
    Task {
        id: "t-1".into(),
        goal: "g".into(),
        data_dir: "data".into(),
        columns: Columns {
            category: "kind".into(),
            amount: "mm".into(),
        },
        criteria,
    }
}

fn criteria() -> Criteria {
    Criteria {
        required_categories: Some(vec!["rain".into(), "snow".into()]),
        required_sections: Some(vec!["Summary".into(), "Rejected rows".into()]),
        no_negative_amounts: Some(true),
        amounts_well_formed: Some(true),
        row_counts_match: Some(true),
        max_rejected_rows: None,
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

fn result(id: &str, kind: StepKind) -> StepResult {
    StepResult {
        step_id: id.into(),
        kind,
        attempt: 0,
        applied: Vec::new(),
        rows: Vec::new(),
        rejected: Vec::new(),
        totals: Vec::new(),
        markdown: String::new(),
    }
}

fn row(file: &str, line: u32, category: &str, raw: &str, milli: i64) -> ParsedRow {
    ParsedRow {
        file: file.into(),
        line,
        category: category.into(),
        raw_amount: raw.into(),
        amount_milli: milli,
    }
}

fn total(category: &str, rows: u32, milli: i64) -> CategoryTotal {
    CategoryTotal {
        category: category.into(),
        rows,
        total_milli: milli,
    }
}

fn folder() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "task-verify-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(
        dir.join("data/a.csv"),
        "kind,mm\nrain,0.5\n\nrain,\"0,4\"\nsun,-1.5\n",
    )
    .unwrap();
    dir
}

const PARSE_CHECKS: [&str; 4] = [
    "row-counts-match",
    "amounts-well-formed",
    "no-negative-amounts",
    "max-rejected-rows",
];

fn verify(
    criteria: Criteria,
    step: Step,
    result: StepResult,
    accepted: Vec<StepResult>,
) -> Result<Verdict, SkillError> {
    TaskVerify::run(Input {
        task: task(criteria),
        step,
        result,
        accepted,
    })
}

#[test]
fn a_lenient_parse_fails_with_findings_and_the_remediation() {
    let dir = folder();
    testing::set_fs_root(&dir);
    let mut parsed = result("parse", StepKind::ParseRecords);
    parsed.rows = vec![
        row("data/a.csv", 2, "rain", "0.5", 500),
        row("data/a.csv", 4, "rain", "0,4", 400),
        row("data/a.csv", 5, "sun", "-1.5", -1500),
    ];
    let v = verify(
        criteria(),
        step("parse", StepKind::ParseRecords, &PARSE_CHECKS),
        parsed.clone(),
        vec![],
    )
    .unwrap();
    assert!(!v.passed);
    let found: Vec<(&str, &str)> = v
        .findings
        .iter()
        .map(|f| (f.check.as_str(), f.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "amounts-well-formed",
                "1 counted row(s) have an amount that is not a decimal number as written: data/a.csv:4 `0,4` counted as 0.4"
            ),
            (
                "no-negative-amounts",
                "1 counted row(s) have a negative amount: data/a.csv:5 -1.5"
            ),
        ]
    );
    assert_eq!(
        v.remediation,
        ["reject-malformed-amounts", "reject-negative-amounts"]
    );

    // The remediated attempt passes; a stricter task still fails it, and
    // keeps the directives applied (no new one can help).
    let mut fixed = result("parse", StepKind::ParseRecords);
    fixed.attempt = 1;
    fixed.applied = v.remediation.clone();
    fixed.rows = vec![row("data/a.csv", 2, "rain", "0.5", 500)];
    fixed.rejected = [(4, "malformed amount `0,4`"), (5, "negative amount `-1.5`")]
        .into_iter()
        .map(|(line, reason)| RejectedRow {
            file: "data/a.csv".into(),
            line,
            reason: reason.into(),
        })
        .collect();
    let v = verify(
        criteria(),
        step("parse", StepKind::ParseRecords, &PARSE_CHECKS),
        fixed.clone(),
        vec![],
    )
    .unwrap();
    assert!(v.passed, "{:?}", v.findings);
    assert!(v.remediation.is_empty());
    let mut strict = criteria();
    strict.max_rejected_rows = Some(1);
    let v = verify(
        strict,
        step("parse", StepKind::ParseRecords, &PARSE_CHECKS),
        fixed,
        vec![],
    )
    .unwrap();
    assert_eq!(v.findings.len(), 1);
    assert_eq!(
        v.findings[0].message,
        "2 row(s) rejected, at most 1 allowed: data/a.csv:4 malformed amount `0,4`; data/a.csv:5 negative amount `-1.5`"
    );
    assert_eq!(
        v.remediation,
        ["reject-malformed-amounts", "reject-negative-amounts"]
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn row_counts_are_read_from_the_files() {
    let dir = folder();
    testing::set_fs_root(&dir);
    let mut parsed = result("parse", StepKind::ParseRecords);
    parsed.rows = vec![
        row("data/a.csv", 2, "rain", "0.5", 500),
        row("data/b.csv", 2, "rain", "1", 1000),
    ];
    let v = verify(
        criteria(),
        step("parse", StepKind::ParseRecords, &["row-counts-match"]),
        parsed,
        vec![],
    )
    .unwrap();
    assert_eq!(
        v.findings[0].message,
        "`data/a.csv` has 3 data line(s), but 1 were counted and 0 rejected; 1 row(s) counted and 0 rejected from `data/b.csv`, which is not a *.csv file of `data`"
    );
    assert!(v.remediation.is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn totals_are_recomputed_from_the_accepted_rows() {
    let mut parsed = result("parse", StepKind::ParseRecords);
    parsed.rows = vec![
        row("a.csv", 2, "rain", "0.5", 500),
        row("a.csv", 3, "rain", "0.25", 250),
        row("a.csv", 4, "sun", "0.0", 0),
    ];
    let checks = ["totals-match-rows", "required-categories"];
    let mut agg = result("aggregate", StepKind::Aggregate);
    agg.totals = vec![total("rain", 2, 750), total("sun", 1, 0)];
    let v = verify(
        criteria(),
        step("aggregate", StepKind::Aggregate, &checks),
        agg.clone(),
        vec![parsed.clone()],
    )
    .unwrap();
    assert_eq!(v.findings.len(), 1);
    assert_eq!(v.findings[0].check, "required-categories");
    assert_eq!(
        v.findings[0].message,
        "no counted row of required categor(y/ies) `snow`; the data has rain, sun"
    );

    agg.totals = vec![total("rain", 2, 700), total("fog", 1, 0)];
    let v = verify(
        criteria(),
        step("aggregate", StepKind::Aggregate, &["totals-match-rows"]),
        agg,
        vec![parsed],
    )
    .unwrap();
    assert_eq!(
        v.findings[0].message,
        "`rain`: 2 row(s) totalling 0.7 reported, the counted rows give 2 totalling 0.75; `fog` has no counted row; `sun` (1 counted row(s)) has no total"
    );
}

#[test]
fn the_report_is_read_back() {
    let mut agg = result("aggregate", StepKind::Aggregate);
    agg.totals = vec![total("rain", 2, 750), total("sun", 1, 0)];
    let checks = ["report-matches-totals", "required-sections"];
    let mut report = result("report", StepKind::WriteReport);
    report.markdown = "# g\n\n## Summary\n\n- x\n\n## Totals by category\n\n| kind | rows | total |\n| --- | ---: | ---: |\n| rain | 2 | 0.75 |\n| sun | 1 | 0.0 |\n| **all** | 3 | 0.75 |\n\n## Rejected rows\n\nNone.\n".into();
    let v = verify(
        criteria(),
        step("report", StepKind::WriteReport, &checks),
        report.clone(),
        vec![agg.clone()],
    )
    .unwrap();
    assert!(v.passed, "{:?}", v.findings);

    report.markdown = report
        .markdown
        .replace("| sun | 1 | 0.0 |", "| sun | 1 | 0.1 |")
        .replace("## Rejected rows", "## Rejects");
    let v = verify(
        criteria(),
        step("report", StepKind::WriteReport, &checks),
        report,
        vec![agg],
    )
    .unwrap();
    let messages: Vec<&str> = v.findings.iter().map(|f| f.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "the report's totals differ from the accepted ones: `sun` shows 1 row(s) totalling 0.1, the accepted totals say 1 totalling 0.0",
            "the report lacks the section(s) `## Rejected rows`",
        ]
    );
}

#[test]
fn refuses_what_it_cannot_judge() {
    let e = verify(
        criteria(),
        step("parse", StepKind::ParseRecords, &["looks-good"]),
        result("parse", StepKind::ParseRecords),
        vec![],
    )
    .unwrap_err();
    assert!(e.message.contains("check `looks-good`"), "{}", e.message);
    let e = verify(
        criteria(),
        step("parse", StepKind::ParseRecords, &[]),
        result("other", StepKind::ParseRecords),
        vec![],
    )
    .unwrap_err();
    assert!(e.message.contains("not step `parse`'s"), "{}", e.message);
    let e = verify(
        criteria(),
        step("a", StepKind::Aggregate, &["totals-match-rows"]),
        result("a", StepKind::Aggregate),
        vec![],
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("needs the accepted result of an earlier parse-records step"),
        "{}",
        e.message
    );
}

#[test]
fn reads_decimals_as_the_dispatcher_should() {
    use checks::decimal_milli;
    assert_eq!(decimal_milli("-0.5"), Some(-500));
    assert_eq!(decimal_milli("12"), Some(12_000));
    assert_eq!(decimal_milli("0.125"), Some(125));
    for bad in ["", "-", "1.", ".5", "1.2345", "0,4", "n/a", "3.2 mm"] {
        assert_eq!(decimal_milli(bad), None, "{bad}");
    }
}
