use super::*;
use skillhost_sdk::testing;

fn task() -> Task {
    Task {
        id: "t-1".into(),
        goal: "Rain by kind".into(),
        data_dir: "data".into(),
        columns: Columns {
            category: "kind".into(),
            amount: "mm".into(),
        },
        criteria: Criteria {
            required_categories: None,
            required_sections: None,
            no_negative_amounts: None,
            amounts_well_formed: None,
            row_counts_match: None,
            max_rejected_rows: None,
        },
    }
}

fn step(id: &str, kind: StepKind) -> Step {
    Step {
        id: id.into(),
        kind,
        title: String::new(),
        checks: Vec::new(),
    }
}

fn folder() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "task-dispatch-test-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(
        dir.join("data/a.csv"),
        "day,mm,kind\n1,0.5,rain\n2,\"0,4\",rain\n\n3,n/a,sun\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("data/b.csv"),
        "kind,mm\nsun,-1.5\nfog\n,2\nfog,2.25\n",
    )
    .unwrap();
    dir
}

fn run(
    kind: StepKind,
    remediation: &[&str],
    accepted: Vec<StepResult>,
) -> Result<StepResult, SkillError> {
    TaskDispatch::run(Input {
        task: task(),
        step: step("s", kind),
        attempt: 1,
        remediation: remediation.iter().map(|s| s.to_string()).collect(),
        accepted,
    })
}

fn rows(r: &StepResult) -> Vec<(String, i64)> {
    r.rows
        .iter()
        .map(|r| (format!("{}:{}", r.file, r.line), r.amount_milli))
        .collect()
}

fn rejected(r: &StepResult) -> Vec<String> {
    r.rejected
        .iter()
        .map(|r| format!("{}:{} {}", r.file, r.line, r.reason))
        .collect()
}

#[test]
fn parse_reads_malformed_amounts_leniently_until_told_otherwise() {
    let dir = folder();
    testing::set_fs_root(&dir);
    let first = run(StepKind::ParseRecords, &[], vec![]).unwrap();
    let s = |a: &str, m| (a.to_string(), m);
    assert_eq!(
        rows(&first),
        [
            s("data/a.csv:2", 500),
            s("data/a.csv:3", 400),
            s("data/a.csv:5", 0),
            s("data/b.csv:2", -1500),
            s("data/b.csv:5", 2250)
        ]
    );
    assert_eq!(first.rows[1].raw_amount, "0,4");
    assert_eq!(
        rejected(&first),
        [
            "data/b.csv:3 1 field(s), the header has 2",
            "data/b.csv:4 empty `kind`"
        ]
    );
    assert!(first.applied.is_empty());

    let second = run(
        StepKind::ParseRecords,
        &[REJECT_MALFORMED, REJECT_NEGATIVE],
        vec![],
    )
    .unwrap();
    assert_eq!(
        rows(&second),
        [s("data/a.csv:2", 500), s("data/b.csv:5", 2250)]
    );
    assert_eq!(
        rejected(&second),
        [
            "data/a.csv:3 malformed amount `0,4`",
            "data/a.csv:5 malformed amount `n/a`",
            "data/b.csv:2 negative amount `-1.5`",
            "data/b.csv:3 1 field(s), the header has 2",
            "data/b.csv:4 empty `kind`",
        ]
    );
    assert_eq!(second.applied, [REJECT_MALFORMED, REJECT_NEGATIVE]);
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn aggregate_and_report_use_the_accepted_results() {
    let dir = folder();
    testing::set_fs_root(&dir);
    let parsed = run(StepKind::ParseRecords, &[REJECT_MALFORMED], vec![]).unwrap();
    let totals = run(StepKind::Aggregate, &[], vec![parsed.clone()]).unwrap();
    let got: Vec<(&str, u32, i64)> = totals
        .totals
        .iter()
        .map(|t| (t.category.as_str(), t.rows, t.total_milli))
        .collect();
    assert_eq!(got, [("fog", 1, 2250), ("rain", 1, 500), ("sun", 1, -1500)]);

    let report = run(StepKind::WriteReport, &[], vec![parsed, totals]).unwrap();
    let md = report.markdown;
    assert!(md.starts_with("# Rain by kind\n"), "{md}");
    for line in [
        "- Rows read: 7",
        "- Rows counted: 3",
        "- Total `mm`: 1.25",
        "| kind | rows | total `mm` |",
        "| fog | 1 | 2.25 |",
        "| sun | 1 | -1.5 |",
        "| **all** | 3 | 1.25 |",
        "## Rejected rows",
        "| data/a.csv | 3 | malformed amount `0,4` |",
    ] {
        assert!(md.contains(line), "missing {line:?} in\n{md}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn refuses_what_a_step_cannot_do() {
    let e = run(StepKind::Aggregate, &[], vec![]).unwrap_err();
    assert!(
        e.message
            .contains("needs the accepted result of a parse-records step"),
        "{}",
        e.message
    );
    let e = run(StepKind::ParseRecords, &["try-harder"], vec![]).unwrap_err();
    assert!(
        e.message.contains("unknown remediation `try-harder`"),
        "{}",
        e.message
    );
    let e = run(StepKind::Aggregate, &[REJECT_NEGATIVE], vec![]).unwrap_err();
    assert!(e.message.contains("takes no remediation"), "{}", e.message);
}

#[test]
fn formats_amounts() {
    assert_eq!(report::amount(400), "0.4");
    assert_eq!(report::amount(-1500), "-1.5");
    assert_eq!(report::amount(0), "0.0");
    assert_eq!(report::amount(1_234_125), "1234.125");
    assert_eq!(report::amount(i64::MIN), "-9223372036854775.808");
}
