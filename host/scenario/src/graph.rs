//! A scenario's graph as Mermaid (for Markdown) and Graphviz DOT: a shape per
//! node kind, an arrow per edge, branches labelled with their CEL guard.
//!
//! Shapes: skill = box, map = stacked box, gate = diamond, end = rounded
//! (stadium), fail = octagon, approval = parallelogram (its `on_timeout`
//! a dashed arrow labelled `timeout`). The `on_failure` handler gets a dashed arrow
//! from a `failure` marker, since any node may route there.

use std::fmt::Write as _;

use super::{Node, NodeBody, NodeKind, Route, Scenario};

/// The graph in Mermaid `flowchart` syntax.
pub fn to_mermaid(s: &Scenario) -> String {
    let mut out = String::from("flowchart TD\n");
    for node in &s.nodes {
        let label = mermaid_text(&node_label(node));
        let id = mermaid_id(&node.id);
        let shape = match node.kind() {
            NodeKind::Skill => format!("{id}[\"{label}\"]"),
            NodeKind::Map => format!("{id}[[\"{label}\"]]"),
            NodeKind::Gate => format!("{id}{{\"{label}\"}}"),
            NodeKind::Approval => format!("{id}[/\"{label}\"/]"),
            NodeKind::End => format!("{id}([\"{label}\"])"),
            NodeKind::Fail => format!("{id}{{{{\"{label}\"}}}}"),
        };
        let _ = writeln!(out, "    {shape}");
    }
    if !s.start.is_empty() {
        let _ = writeln!(out, "    start__((start)) --> {}", mermaid_id(&s.start));
    }
    for node in &s.nodes {
        let from = mermaid_id(&node.id);
        match &node.route {
            Route::End => {}
            Route::Next(to) => {
                let _ = writeln!(out, "    {from} --> {}", mermaid_id(to));
            }
            Route::Branches {
                branches,
                otherwise,
            } => {
                for (guard, to) in branches {
                    let _ = writeln!(
                        out,
                        "    {from} -->|\"{}\"| {}",
                        mermaid_text(&guard.source),
                        mermaid_id(to)
                    );
                }
                let _ = writeln!(out, "    {from} -->|else| {}", mermaid_id(otherwise));
            }
        }
        if let Some(to) = on_timeout(node) {
            let _ = writeln!(out, "    {from} -.->|timeout| {}", mermaid_id(to));
        }
    }
    if let Some(handler) = &s.on_failure {
        let _ = writeln!(
            out,
            "    failure__((on failure)) -.-> {}",
            mermaid_id(handler)
        );
    }
    out
}

/// The graph in Graphviz DOT.
pub fn to_dot(s: &Scenario) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_string(&s.name));
    out.push_str("    rankdir=TB;\n    node [fontname=\"Helvetica\", fontsize=11];\n");
    out.push_str("    edge [fontname=\"Helvetica\", fontsize=9];\n");
    for node in &s.nodes {
        let shape = match node.kind() {
            NodeKind::Skill => "shape=box",
            NodeKind::Map => "shape=box3d",
            NodeKind::Gate => "shape=diamond",
            NodeKind::Approval => "shape=parallelogram",
            NodeKind::End => "shape=box, style=rounded",
            NodeKind::Fail => "shape=octagon",
        };
        let _ = writeln!(
            out,
            "    {} [label={}, {shape}];",
            dot_string(&node.id),
            dot_string(&node_label(node))
        );
    }
    if !s.start.is_empty() {
        let _ = writeln!(
            out,
            "    \"start__\" [label=\"start\", shape=circle];\n    \"start__\" -> {};",
            dot_string(&s.start)
        );
    }
    for node in &s.nodes {
        let from = dot_string(&node.id);
        match &node.route {
            Route::End => {}
            Route::Next(to) => {
                let _ = writeln!(out, "    {from} -> {};", dot_string(to));
            }
            Route::Branches {
                branches,
                otherwise,
            } => {
                for (guard, to) in branches {
                    let _ = writeln!(
                        out,
                        "    {from} -> {} [label={}];",
                        dot_string(to),
                        dot_string(&guard.source)
                    );
                }
                let _ = writeln!(
                    out,
                    "    {from} -> {} [label=\"else\"];",
                    dot_string(otherwise)
                );
            }
        }
        if let Some(to) = on_timeout(node) {
            let _ = writeln!(
                out,
                "    {from} -> {} [label=\"timeout\", style=dashed];",
                dot_string(to)
            );
        }
    }
    if let Some(handler) = &s.on_failure {
        let _ = writeln!(
            out,
            "    \"failure__\" [label=\"on failure\", shape=circle];\n    \"failure__\" -> {} [style=dashed];",
            dot_string(handler)
        );
    }
    out.push_str("}\n");
    out
}

/// Where an approval node goes when nobody answered in time.
fn on_timeout(node: &Node) -> Option<&str> {
    match &node.body {
        NodeBody::Approval(approval) => approval
            .timeout
            .as_ref()
            .map(|timeout| timeout.on_timeout.as_str()),
        _ => None,
    }
}

/// `id` and what it runs: `paper_summarize (map: summarize)`.
fn node_label(node: &Node) -> String {
    match (node.kind(), node.skill()) {
        (NodeKind::Skill, Some(skill)) => format!("{}\n{skill}", node.id),
        (NodeKind::Map, Some(skill)) => format!("{}\nmap: {skill}", node.id),
        (NodeKind::Gate, _) => format!("{}\ngate", node.id),
        (NodeKind::Approval, _) => format!("{}\napproval", node.id),
        (NodeKind::End, _) => format!("{}\nend", node.id),
        (NodeKind::Fail, _) => format!("{}\nfail", node.id),
        _ => node.id.clone(),
    }
}

/// Mermaid ids are letters, digits and `_`; node ids may also hold `-`.
fn mermaid_id(id: &str) -> String {
    id.replace('-', "_h_")
}

/// Text inside a quoted Mermaid label: quotes and markup become entities,
/// line breaks `<br/>`.
fn mermaid_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("#quot;"),
            '<' => out.push_str("#lt;"),
            '>' => out.push_str("#gt;"),
            '|' => out.push_str("#124;"),
            '\n' => out.push_str("<br/>"),
            c => out.push(c),
        }
    }
    out
}

fn dot_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const SCENARIO: &str = r#"
[scenario]
name = "graph"
on_failure = "failed"

[state]
n = { type = "integer" }

[[node]]
id = "check"
kind = "gate"
writes = [{ field = "n", from = "state.n + 1" }]

[[node]]
id = "done"
kind = "end"

[[node]]
id = "failed"
kind = "fail"

[[edge]]
from = "check"
branches = [{ when = "state.n > 2 && \"x\" != 'y'", to = "done" }, { else = "failed" }]
"#;

    #[test]
    fn mermaid_shapes_and_labels() {
        let (s, _) = crate::parse_str(SCENARIO, Path::new("/tmp/graph.toml")).unwrap();
        let m = to_mermaid(&s);
        assert_eq!(
            m,
            "flowchart TD\n    \
             check{\"check<br/>gate\"}\n    \
             done([\"done<br/>end\"])\n    \
             failed{{\"failed<br/>fail\"}}\n    \
             start__((start)) --> check\n    \
             check -->|\"state.n #gt; 2 && #quot;x#quot; != 'y'\"| done\n    \
             check -->|else| failed\n    \
             failure__((on failure)) -.-> failed\n"
        );
    }

    #[test]
    fn dot_shapes_and_labels() {
        let (s, _) = crate::parse_str(SCENARIO, Path::new("/tmp/graph.toml")).unwrap();
        let d = to_dot(&s);
        assert!(d.starts_with("digraph \"graph\" {\n"), "{d}");
        assert!(
            d.contains("    \"check\" [label=\"check\\ngate\", shape=diamond];\n"),
            "{d}"
        );
        assert!(
            d.contains("    \"failed\" [label=\"failed\\nfail\", shape=octagon];\n"),
            "{d}"
        );
        assert!(
            d.contains("    \"check\" -> \"done\" [label=\"state.n > 2 && \\\"x\\\" != 'y'\"];\n"),
            "{d}"
        );
        assert!(
            d.contains("    \"check\" -> \"failed\" [label=\"else\"];\n"),
            "{d}"
        );
        assert!(d.ends_with("}\n"));
    }
}
