//! The command line's one rule of layering, checked on its source: a
//! subcommand's module (`src/cli/<command>.rs`, and anything under
//! `src/cli/<command>/`) uses `cli/common/` and the library crates, never
//! another subcommand's module. What two commands share belongs in
//! `common/`; what one command does belongs in its own module.
//!
//! The check reads every file under `src/cli/` except `mod.rs` (the
//! dispatcher, which names every command), drops comments and string
//! literals, and resolves each path that starts with `super` or `crate`
//! (`super::run::X`, `super::{common, worker}`, `crate::cli::bench::Y`,
//! `super::super::runs` from a nested file, globs) against the file's own
//! module path. A path that lands in `cli::<other command>`, or a glob over
//! `cli` itself, is a violation. `common/` is checked too: it may name no
//! command at all.

use std::path::{Path, PathBuf};

/// The subcommand modules: every file and folder directly under `src/cli/`
/// except the dispatcher and the shared module.
fn command_names(cli: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(cli)
        .expect("read src/cli")
        .map(|entry| entry.expect("a directory entry").path())
        .filter_map(|path| {
            let name = path.file_stem()?.to_str()?.to_string();
            (path.is_dir() || path.extension().is_some_and(|e| e == "rs")).then_some(name)
        })
        .filter(|name| name != "mod" && name != "common")
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Every `.rs` file under `dir`, depth first.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read a source directory") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `source` with comments removed and the contents of string and character
/// literals blanked, so that only code is left to read paths from.
fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
            out.push(' ');
        } else if c == 'r' && matches!(next, Some('"') | Some('#')) && starts_raw_string(&chars, i)
        {
            // r"…" or r#"…"#: ends at a quote followed by as many hashes.
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            i += 2 + hashes;
            while i < chars.len() {
                if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&c| c == '#') {
                    i += 1 + hashes;
                    break;
                }
                i += 1;
            }
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            // An escaped character literal: '\n', '\'', '\u{..}'.
            i += 2;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            // A lifetime's quote, or any other character.
            out.push(c);
            i += 1;
        }
    }
    out
}

fn starts_raw_string(chars: &[char], i: usize) -> bool {
    let word_before = i > 0 && (chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
    !word_before && chars.get(i + 1 + hashes) == Some(&'"')
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Glob,
    Other,
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
            continue;
        }
        i += 1;
        match c {
            ':' if chars.get(i) == Some(&':') => {
                i += 1;
                out.push(Token::PathSep);
            }
            '{' => out.push(Token::Open),
            '}' => out.push(Token::Close),
            ',' => out.push(Token::Comma),
            '*' => out.push(Token::Glob),
            c if c.is_whitespace() => {}
            _ => out.push(Token::Other),
        }
    }
    out
}

/// The subcommand modules other than its own that the file at `module`
/// (its module path from the crate root, e.g. `["cli", "runs"]`) refers
/// to, and `cli::*` for a glob over the command line's modules.
fn foreign_references(source: &str, module: &[&str], commands: &[String]) -> Vec<String> {
    let own = module.get(1).copied().unwrap_or("");
    let tokens = tokens(&code_only(source));
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let starts_path = i == 0 || tokens[i - 1] != Token::PathSep;
        let base: Option<Vec<String>> = match &tokens[i] {
            Token::Ident(word) if starts_path && word == "crate" => Some(Vec::new()),
            Token::Ident(word) if starts_path && word == "super" => {
                Some(module.iter().map(|s| s.to_string()).collect())
            }
            _ => None,
        };
        match base {
            Some(base) => {
                i = resolve(&tokens, i, base, own, commands, &mut found);
            }
            None => i += 1,
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Follows the path that starts at `tokens[i]` from `path`, records what it
/// reaches in `found`, and returns the index after it.
fn resolve(
    tokens: &[Token],
    mut i: usize,
    mut path: Vec<String>,
    own: &str,
    commands: &[String],
    found: &mut Vec<String>,
) -> usize {
    loop {
        match tokens.get(i) {
            Some(Token::Ident(word)) if word == "super" => {
                path.pop();
            }
            Some(Token::Ident(word)) if word == "crate" => path.clear(),
            Some(Token::Ident(word)) if word == "self" => {}
            Some(Token::Ident(word)) => {
                path.push(word.clone());
                if path.len() == 2
                    && path[0] == "cli"
                    && path[1] != own
                    && commands.contains(&path[1])
                {
                    found.push(path[1].clone());
                }
            }
            Some(Token::Glob) => {
                if path == ["cli"] {
                    found.push("cli::*".to_string());
                }
                return i + 1;
            }
            Some(Token::Open) => {
                // A group: each item is a path from here.
                i += 1;
                loop {
                    match tokens.get(i) {
                        None => return i,
                        Some(Token::Close) => return i + 1,
                        Some(Token::Comma) => i += 1,
                        Some(_) => i = resolve(tokens, i, path.clone(), own, commands, found),
                    }
                }
            }
            _ => return i,
        }
        i += 1;
        if tokens.get(i) != Some(&Token::PathSep) {
            return i;
        }
        i += 1;
    }
}

#[test]
fn no_subcommand_module_refers_to_another() {
    let cli = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli");
    let commands = command_names(&cli);
    assert!(
        commands.len() > 5 && commands.contains(&"run".to_string()),
        "found the subcommand modules: {commands:?}"
    );
    let mut files = Vec::new();
    rust_files(&cli, &mut files);
    let mut violations = Vec::new();
    for file in files.iter().filter(|f| !f.ends_with("cli/mod.rs")) {
        let relative = file.strip_prefix(&cli).expect("under src/cli");
        let mut module = vec!["cli".to_string()];
        module.extend(
            relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned()),
        );
        let module: Vec<&str> = module.iter().map(String::as_str).collect();
        let source = std::fs::read_to_string(file).expect("read a source file");
        for other in foreign_references(&source, &module, &commands) {
            violations.push(format!(
                "src/cli/{} refers to the `{other}` subcommand module",
                relative.display()
            ));
        }
    }
    assert!(
        violations.is_empty(),
        "{}\nA subcommand uses cli/common/ and the library crates only: move what two \
         commands share to cli/common/, and what one command does to its own module.",
        violations.join("\n")
    );
}

/// The check itself: it finds each way of naming another command's module,
/// and nothing in comments, strings, the shared module or a command's own
/// submodules.
#[test]
fn the_check_finds_references_to_other_commands() {
    let commands: Vec<String> = ["bench", "run", "runs", "skill", "worker"]
        .map(String::from)
        .to_vec();
    let runs = ["cli", "runs"];
    let nested = ["cli", "skill", "build"];
    for (source, module, expected) in [
        ("use super::run::DatabaseArgs;", &runs[..], vec!["run"]),
        (
            "use super::{common::Failure, worker};",
            &runs,
            vec!["worker"],
        ),
        (
            "let n = crate::cli::bench::ENGINE_NODES;",
            &runs,
            vec!["bench"],
        ),
        ("use super::super::cli::run;", &runs, vec!["run"]),
        ("use super::super::runs::PruneArgs;", &nested, vec!["runs"]),
        (
            "use crate::cli::{common, skill::{x, y}};",
            &runs,
            vec!["skill"],
        ),
        ("use super::*;", &runs, vec!["cli::*"]),
        ("fn f() { super::worker::run(); }", &runs, vec!["worker"]),
        ("use super::common::{Failure, print_json};", &runs, vec![]),
        ("use super::runs::ListArgs;", &runs, vec![]),
        ("use super::Globals; mod build;", &nested, vec![]),
        ("// super::run::DatabaseArgs", &runs, vec![]),
        ("/* super::run */ let s = \"super::run::x\";", &runs, vec![]),
        (
            "let s = r#\"crate::cli::bench\"#; let c = '\"';",
            &runs,
            vec![],
        ),
        (
            "fn f<'a>(x: &'a str) { super::common::g(x) }",
            &runs,
            vec![],
        ),
    ] {
        assert_eq!(
            foreign_references(source, module, &commands),
            expected,
            "{source}"
        );
    }
}
