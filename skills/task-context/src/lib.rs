//! `task-context`: the first step of the task workflow. It checks the task
//! and reads what the task works on: every `*.csv` file directly in the
//! task's folder (through the `fs` capability), each one's header and its
//! number of data lines. It reads no row's values: parsing them is a step of
//! the plan, verified like the others.

skillhost_sdk::generate!(
    "task-context",
    with: { "skillhost:task/types@0.1.0": generate },
);

use std::collections::BTreeSet;

use skillhost_sdk::{EntryKind, fs, log};

/// The error code for a folder whose files cannot be the task's records.
const INVALID_DATA: &str = "invalid-data";

struct TaskContext;

impl Guest for TaskContext {
    skillhost_sdk::manifest! {
        name: "Task context",
        capabilities: ["fs", "log"],
        retry: never,
        estimated_duration_ms: 5,
    }

    fn run(input: Input) -> Result<Output, SkillError> {
        check_task(&input)?;
        let files = read_files(&input.data_dir, &input.columns)?;
        let rows = files.iter().map(|f| f.rows).fold(0u32, u32::saturating_add);
        log::info(format!(
            "task `{}`: {} CSV file(s) in `{}`, {rows} data line(s)",
            input.task_id,
            files.len(),
            input.data_dir
        ));
        Ok(Output {
            task: Task {
                id: input.task_id,
                goal: input.goal.trim().to_string(),
                data_dir: input.data_dir,
                columns: input.columns,
                criteria: input.criteria,
            },
            files,
            rows,
        })
    }
}

export!(TaskContext);

fn check_task(input: &Input) -> Result<(), SkillError> {
    let id = &input.task_id;
    if id.is_empty()
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return Err(SkillError::invalid_input(format!(
            "task id {id:?} must be letters, digits, `.`, `_` and `-`, e.g. \"sales-2024\""
        )));
    }
    if input.goal.trim().is_empty() {
        return Err(SkillError::invalid_input(format!(
            "task `{id}`: `goal` is empty; say what the report is for"
        )));
    }
    let columns = &input.columns;
    for (name, value) in [("category", &columns.category), ("amount", &columns.amount)] {
        if value.trim().is_empty() {
            return Err(SkillError::invalid_input(format!(
                "task `{id}`: `columns.{name}` is empty; name the CSV column that holds the {name}"
            )));
        }
    }
    if columns.category == columns.amount {
        return Err(SkillError::invalid_input(format!(
            "task `{id}`: `columns.category` and `columns.amount` are both `{}`; they must be two columns",
            columns.category
        )));
    }
    if let Some(required) = &input.criteria.required_categories {
        let mut seen = BTreeSet::new();
        for category in required {
            if !seen.insert(category) {
                return Err(SkillError::invalid_input(format!(
                    "task `{id}`: `criteria.required_categories` names `{category}` twice"
                )));
            }
        }
    }
    Ok(())
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

/// Every `*.csv` file directly in `dir`, by name, with its header and data
/// lines; each must have the task's two columns.
fn read_files(dir: &str, columns: &Columns) -> Result<Vec<DataFile>, SkillError> {
    let mut entries = fs::list_dir(dir).map_err(|e| {
        e.context(format!(
            "task-context cannot list the task's folder `{dir}`"
        ))
    })?;
    entries.retain(|e| e.kind == EntryKind::File && e.name.ends_with(".csv"));
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    if entries.is_empty() {
        return Err(SkillError::new(
            INVALID_DATA,
            format!(
                "no *.csv file in `{dir}` (relative to the granted directory); put the task's records there"
            ),
        ));
    }
    entries
        .iter()
        .map(|entry| {
            let path = join(dir, &entry.name);
            let text = fs::read_text(&path)
                .map_err(|e| e.context(format!("task-context cannot read `{path}`")))?;
            data_file(path, &text, columns)
        })
        .collect()
}

/// The header and data lines of one file's text.
fn data_file(path: String, text: &str, columns: &Columns) -> Result<DataFile, SkillError> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Err(SkillError::new(
            INVALID_DATA,
            format!("`{path}` is empty; a CSV file starts with a header line"),
        ));
    };
    let header: Vec<String> = header_fields(header);
    for (name, column) in [("category", &columns.category), ("amount", &columns.amount)] {
        if !header.contains(column) {
            return Err(SkillError::new(
                INVALID_DATA,
                format!(
                    "`{path}` has no column `{column}` (the task's {name} column); its columns: {}",
                    header.join(", ")
                ),
            ));
        }
    }
    let rows = u32::try_from(lines.count()).unwrap_or(u32::MAX);
    Ok(DataFile { path, header, rows })
}

/// The column names of a header line: fields separated by `,`, each
/// optionally quoted with `"` (a quote inside doubled), trimmed. The same
/// reading as `task-dispatch`'s, so both find a column at the same place.
fn header_fields(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', true) => quoted = false,
            ('"', false) if field.is_empty() => quoted = true,
            (',', false) => fields.push(std::mem::take(&mut field)),
            _ => field.push(c),
        }
    }
    fields.push(field);
    fields.into_iter().map(|f| f.trim().to_string()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use skillhost_sdk::testing;

    fn input(dir: &str) -> Input {
        Input {
            task_id: "t-1".into(),
            goal: " Totals ".into(),
            data_dir: dir.into(),
            columns: Columns {
                category: "kind".into(),
                amount: "amount".into(),
            },
            criteria: Criteria {
                required_categories: Some(vec!["a".into()]),
                required_sections: None,
                no_negative_amounts: Some(true),
                amounts_well_formed: None,
                row_counts_match: None,
                max_rejected_rows: None,
            },
        }
    }

    fn folder(files: &[(&str, &str)]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "task-context-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data/sub")).unwrap();
        for (name, text) in files {
            std::fs::write(dir.join("data").join(name), text).unwrap();
        }
        dir
    }

    #[test]
    fn reads_headers_and_counts_data_lines() {
        let dir = folder(&[
            ("b.csv", "kind,amount\na,1\n\nb,2\n"),
            ("a.csv", "\"amount\", kind\n1,a\n"),
            ("notes.txt", "ignored"),
        ]);
        testing::set_fs_root(&dir);
        let out = TaskContext::run(input("data")).unwrap();
        assert_eq!(out.task.goal, "Totals");
        assert_eq!(out.rows, 3);
        let files: Vec<(&str, u32)> = out
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.rows))
            .collect();
        assert_eq!(files, [("data/a.csv", 1), ("data/b.csv", 2)]);
        assert_eq!(out.files[0].header, ["amount", "kind"]);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn refuses_a_folder_that_cannot_hold_the_records() {
        let dir = folder(&[("x.csv", "kind,value\na,1\n"), ("empty.csv", "")]);
        testing::set_fs_root(&dir);
        let e = TaskContext::run(input("data")).unwrap_err();
        assert_eq!(e.code, INVALID_DATA);
        assert!(
            e.message.contains("`data/empty.csv` is empty"),
            "{}",
            e.message
        );
        std::fs::remove_file(dir.join("data/empty.csv")).unwrap();
        let e = TaskContext::run(input("data")).unwrap_err();
        assert!(
            e.message.contains("no column `amount`") && e.message.contains("kind, value"),
            "{}",
            e.message
        );
        let e = TaskContext::run(input("data/sub")).unwrap_err();
        assert!(
            e.message.contains("no *.csv file in `data/sub`"),
            "{}",
            e.message
        );
        assert_eq!(
            TaskContext::run(input("nope")).unwrap_err().code,
            "not-found"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn refuses_a_bad_task() {
        let mut bad = input("data");
        bad.task_id = "a b".into();
        assert!(
            TaskContext::run(bad)
                .unwrap_err()
                .message
                .contains("task id")
        );
        let mut bad = input("data");
        bad.goal = " ".into();
        assert!(
            TaskContext::run(bad)
                .unwrap_err()
                .message
                .contains("`goal` is empty")
        );
        let mut bad = input("data");
        bad.columns.amount = "kind".into();
        assert!(
            TaskContext::run(bad)
                .unwrap_err()
                .message
                .contains("both `kind`")
        );
        let mut bad = input("data");
        bad.criteria.required_categories = Some(vec!["a".into(), "a".into()]);
        assert!(
            TaskContext::run(bad)
                .unwrap_err()
                .message
                .contains("names `a` twice")
        );
    }
}
