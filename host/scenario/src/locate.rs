//! Which table of a scenario file a line is in, read from the raw text, so
//! that a TOML error (which stops deserialisation, so no model exists) can
//! name the node, edge, skill or rule it is in.
//!
//! Lines above the error parsed, so they are scanned exactly (strings,
//! multi-line strings and arrays do not hold headers); below it the text may
//! be broken, so there the first line that looks like a header ends the
//! table.

/// A table of the scenario file, with what names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Table {
    /// A `[[node]]` (or one of its sub-tables): its header line and `id`.
    Node { header: usize, id: Option<String> },
    /// An `[[edge]]`: its header line and `from`.
    Edge { header: usize, from: Option<String> },
    /// A `[[rule]]`: its header line and `code`.
    Rule { header: usize, code: Option<String> },
    /// `[skills.<alias>]` (or a sub-table of it).
    Skill { alias: String },
}

impl Table {
    /// The node the table is, when it is a node whose id was found.
    pub fn node(&self) -> Option<&str> {
        match self {
            Table::Node { id, .. } => id.as_deref(),
            _ => None,
        }
    }

    /// What to put before a message about this table, when the node does not
    /// already name it: `[[edge]] from `a`: `, `the [[node]] table starting at
    /// line 7: `.
    pub fn prefix(&self) -> Option<String> {
        let at = |kind: &str, header: &usize| {
            format!("the [[{kind}]] table starting at line {header}: ")
        };
        match self {
            Table::Node { id: Some(_), .. } => None,
            Table::Node { header, id: None } => Some(at("node", header)),
            Table::Edge {
                from: Some(from), ..
            } => Some(format!("[[edge]] from `{from}`: ")),
            Table::Edge { header, from: None } => Some(at("edge", header)),
            Table::Rule {
                code: Some(code), ..
            } => Some(format!("[[rule]] `{code}`: ")),
            Table::Rule { header, code: None } => Some(at("rule", header)),
            Table::Skill { alias } => Some(format!("[skills.{alias}]: ")),
        }
    }
}

/// The table of `text` that holds `line` (1-based), if it is one of those
/// [`Table`] names.
pub(crate) fn table_at(text: &str, line: usize) -> Option<Table> {
    let lines: Vec<&str> = text.lines().collect();
    // An error at the very end (an unterminated multi-line string) is on
    // the line after the last.
    let line = line.min(lines.len());
    if line == 0 {
        return None;
    }
    let top = top_level_lines(text);
    // The nearest header at or above the line.
    let mut at = None;
    for n in (1..=line).rev() {
        let is_top = top.get(n - 1).copied().unwrap_or(false);
        match header(lines[n - 1]) {
            Some(h) if is_top => {
                at = Some((n, h));
                break;
            }
            // The error is on a line that looks like a header but is not
            // one (`[[node]`): it belongs to no table above it.
            None if n == line && is_top && lines[n - 1].trim_start().starts_with('[') => {
                return None;
            }
            _ => {}
        }
    }
    let (mut start, mut h) = at?;
    // A sub-table (`[node.input]`) belongs to the last `[[node]]` above it.
    if h.path.len() > 1 && matches!(h.path[0].as_str(), "node" | "edge" | "rule") {
        let parent = h.path[0].clone();
        loop {
            start -= 1;
            if start == 0 {
                return None;
            }
            if !top.get(start - 1).copied().unwrap_or(false) {
                continue;
            }
            if let Some(above) = header(lines[start - 1]) {
                if above.array && above.path == [parent.as_str()] {
                    h = above;
                    break;
                }
                if above.path.first() != Some(&parent) {
                    return None;
                }
            }
        }
    }
    let first = h.path.first()?.as_str();
    if first == "skills" {
        return h.path.get(1).map(|alias| Table::Skill {
            alias: alias.clone(),
        });
    }
    if !h.array || h.path.len() != 1 {
        return None;
    }
    let is_top = |i: usize| top.get(i).copied().unwrap_or(false);
    // The table's own keys: up to the next header.
    let key = |name: &str| {
        lines
            .iter()
            .enumerate()
            .skip(start)
            .take_while(|&(i, l)| {
                let is_header = header(l).is_some();
                !(is_header && (is_top(i) || i + 1 > line))
            })
            .find_map(|(i, l)| {
                if is_top(i) || i + 1 > line {
                    string_value(l, name)
                } else {
                    None
                }
            })
    };
    match first {
        "node" => Some(Table::Node {
            header: start,
            id: key("id"),
        }),
        "edge" => Some(Table::Edge {
            header: start,
            from: key("from"),
        }),
        "rule" => Some(Table::Rule {
            header: start,
            code: key("code"),
        }),
        _ => None,
    }
}

/// A table header: `[a.b]` or `[[a]]`.
#[derive(Debug)]
struct Header {
    array: bool,
    path: Vec<String>,
}

fn header(line: &str) -> Option<Header> {
    let t = line.trim();
    let t = match t.find('#') {
        // A `#` inside a quoted key is rare enough to ignore.
        Some(i) => t[..i].trim_end(),
        None => t,
    };
    let (array, inner) = if let Some(rest) = t.strip_prefix("[[") {
        (true, rest.strip_suffix("]]")?)
    } else {
        (false, t.strip_prefix('[')?.strip_suffix(']')?)
    };
    let mut path = Vec::new();
    for part in inner.split('.') {
        let part = part.trim();
        let part = part
            .strip_prefix('"')
            .and_then(|p| p.strip_suffix('"'))
            .or_else(|| part.strip_prefix('\'').and_then(|p| p.strip_suffix('\'')))
            .unwrap_or(part);
        let bare = part
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if part.is_empty() || !bare {
            return None;
        }
        path.push(part.to_string());
    }
    Some(Header { array, path })
}

/// `name = "value"` (or `'value'`) on this line: the value.
fn string_value(line: &str, name: &str) -> Option<String> {
    let rest = line.trim_start().strip_prefix(name)?.trim_start();
    let rest = rest.strip_prefix('=')?.trim_start();
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = &rest[1..];
    let end = value.find(quote)?;
    Some(value[..end].to_string())
}

/// For each line, whether it starts outside any string, array or inline
/// table (where a header can be).
fn top_level_lines(text: &str) -> Vec<bool> {
    #[derive(Clone, Copy, PartialEq)]
    enum S {
        Code,
        Comment,
        Basic,
        Literal,
        MultiBasic,
        MultiLiteral,
    }
    let bytes = text.as_bytes();
    let mut out = vec![true];
    let mut depth = 0i32;
    let mut s = S::Code;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'\n' {
            // A single-line string or comment ends with its line (an
            // unterminated string is the TOML error itself).
            if matches!(s, S::Comment | S::Basic | S::Literal) {
                s = S::Code;
            }
            out.push(s == S::Code && depth <= 0);
            i += 1;
            continue;
        }
        let rest = &bytes[i..];
        match s {
            S::Code => match b {
                b'#' => s = S::Comment,
                b'"' if rest.starts_with(b"\"\"\"") => {
                    s = S::MultiBasic;
                    i += 3;
                    continue;
                }
                b'"' => s = S::Basic,
                b'\'' if rest.starts_with(b"'''") => {
                    s = S::MultiLiteral;
                    i += 3;
                    continue;
                }
                b'\'' => s = S::Literal,
                b'[' | b'{' => depth += 1,
                b']' | b'}' => depth -= 1,
                _ => {}
            },
            S::Comment => {}
            // An escape skips the byte after the backslash, but never a line
            // break (a line-ending backslash in a multi-line string), which
            // must still be counted.
            S::Basic => match b {
                b'\\' if bytes.get(i + 1) != Some(&b'\n') => i += 1,
                b'"' => s = S::Code,
                _ => {}
            },
            S::Literal => {
                if b == b'\'' {
                    s = S::Code;
                }
            }
            S::MultiBasic => {
                if b == b'\\' && bytes.get(i + 1) != Some(&b'\n') {
                    i += 1;
                } else if rest.starts_with(b"\"\"\"") {
                    s = S::Code;
                    i += 3;
                    continue;
                }
            }
            S::MultiLiteral => {
                if rest.starts_with(b"'''") {
                    s = S::Code;
                    i += 3;
                    continue;
                }
            }
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"[scenario]
name = "x"

[skills.echo]
component = "echo.wasm"

[skills.echo.config]
greeting = "hi"

[[node]]
id = "say"
skill = "echo"
description = """
[[node]]
id = "not-a-node"
"""
writes = [
  ["not", "a", "header"],
  { field = "a", from = "b" },
]

[node.input]
message = "'hi'"

[[node]]
kind = "end"
id = 'done'

[[node]]
kind = "end"

[[edge]]
from = "say"
to = "done"

[[rule]]
when = "true"
code = "always"
"#;

    fn at(line: usize) -> Option<Table> {
        table_at(TEXT, line)
    }

    #[test]
    fn nodes_by_their_id() {
        let say = Some(Table::Node {
            header: 10,
            id: Some("say".into()),
        });
        for line in [10, 11, 13, 15, 19, 21, 23] {
            assert_eq!(at(line), say, "line {line}");
        }
        // The id comes after the line.
        assert_eq!(
            at(26),
            Some(Table::Node {
                header: 25,
                id: Some("done".into())
            })
        );
        let anonymous = at(30).unwrap();
        assert_eq!(
            anonymous,
            Table::Node {
                header: 29,
                id: None
            }
        );
        assert_eq!(
            anonymous.prefix().unwrap(),
            "the [[node]] table starting at line 29: "
        );
    }

    #[test]
    fn other_tables() {
        assert_eq!(at(1), None);
        assert_eq!(
            at(5),
            Some(Table::Skill {
                alias: "echo".into()
            })
        );
        assert_eq!(at(8).unwrap().prefix().unwrap(), "[skills.echo]: ");
        assert_eq!(at(33).unwrap().prefix().unwrap(), "[[edge]] from `say`: ");
        assert_eq!(at(37).unwrap().prefix().unwrap(), "[[rule]] `always`: ");
    }

    #[test]
    fn below_a_syntax_error_the_next_header_ends_the_table() {
        let text = "[[node]]\nid = \"a\n\n[[node]]\nid = \"b\"\n";
        assert_eq!(
            table_at(text, 2),
            Some(Table::Node {
                header: 1,
                id: None
            })
        );
        // A broken header is no table's.
        let text = "[[node]]\nid = \"a\"\n[[node]\nid = \"b\"\n";
        assert_eq!(table_at(text, 3), None);
    }

    /// A line-ending backslash in a multi-line string continues the string
    /// onto the next line; the line break is still a line (a fuzzer found
    /// that skipping it left fewer line flags than lines, and an index out
    /// of bounds).
    #[test]
    fn a_line_ending_backslash_is_still_a_line() {
        let text = "[[node]]\nid = \"a\"\nprompt = \"\"\"one \\\ntwo \\\nthree\"\"\"\n[[node]]\nid = \"b\"\nx = \n";
        assert_eq!(top_level_lines(text).len(), text.lines().count() + 1);
        assert_eq!(
            table_at(text, 8),
            Some(Table::Node {
                header: 6,
                id: Some("b".into())
            })
        );
        assert_eq!(
            table_at(text, 4),
            Some(Table::Node {
                header: 1,
                id: Some("a".into())
            })
        );
        // Every line of a text that ends inside such a string, too.
        let text = "[[node]]\nid = \"a\\\n\"\"\"\\\n\\\n";
        for line in 0..=text.lines().count() + 1 {
            let _ = table_at(text, line);
        }
    }
}
