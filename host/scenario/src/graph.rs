//! A scenario's graph as Mermaid (for Markdown) and Graphviz DOT: a shape per
//! node kind, an arrow per edge, branches labelled with their CEL guard.
//!
//! Shapes: skill = box, map = stacked box, gate = diamond, end = rounded
//! (stadium), fail = octagon, approval = parallelogram (its `on_timeout`
//! a dashed arrow labelled `timeout`), subgraph = a cluster (Mermaid
//! `subgraph`, DOT `cluster_…`) holding the child scenario's graph, its ids
//! prefixed with the node's (`NODE__id`). The `on_failure` handler gets a dashed arrow
//! from a `failure` marker, since any node may route there.

use std::fmt::Write as _;

use super::{Node, NodeBody, NodeKind, Route, Scenario};

/// The graph in Mermaid `flowchart` syntax.
pub fn to_mermaid(s: &Scenario) -> String {
    let mut out = String::from("flowchart TD\n");
    mermaid_body(s, "", "    ", &mut out);
    out
}

/// The nodes and edges of `s`, ids prefixed with `prefix` (a subgraph's
/// nodes are `NODE__id`, so two files may use the same ids), lines indented
/// by `indent`. A subgraph node is a Mermaid `subgraph` holding its child's
/// graph, and edges to and from it are the cluster's.
fn mermaid_body(s: &Scenario, prefix: &str, indent: &str, out: &mut String) {
    let id_of = |id: &str| mermaid_id(&format!("{prefix}{id}"));
    for node in &s.nodes {
        let label = mermaid_text(&node_label(node));
        let id = id_of(&node.id);
        let shape = match node.kind() {
            NodeKind::Skill => format!("{id}[\"{label}\"]"),
            NodeKind::Map => format!("{id}[[\"{label}\"]]"),
            NodeKind::Gate => format!("{id}{{\"{label}\"}}"),
            NodeKind::Approval => format!("{id}[/\"{label}\"/]"),
            NodeKind::End => format!("{id}([\"{label}\"])"),
            NodeKind::Fail => format!("{id}{{{{\"{label}\"}}}}"),
            NodeKind::Subgraph => {
                let _ = writeln!(out, "{indent}subgraph {id} [\"{label}\"]");
                match s.subgraphs.get(&node.id) {
                    Some(child) => {
                        let inner = format!("{indent}    ");
                        mermaid_body(child, &format!("{prefix}{}__", node.id), &inner, out);
                    }
                    None => {
                        let _ = writeln!(out, "{indent}    {id}__missing[\"(not loaded)\"]");
                    }
                }
                let _ = writeln!(out, "{indent}end");
                continue;
            }
        };
        let _ = writeln!(out, "{indent}{shape}");
    }
    if !s.start.is_empty() {
        let start = mermaid_id(&format!("{prefix}start__"));
        let _ = writeln!(out, "{indent}{start}((start)) --> {}", id_of(&s.start));
    }
    for node in &s.nodes {
        let from = id_of(&node.id);
        match &node.route {
            Route::End => {}
            Route::Next(to) => {
                let _ = writeln!(out, "{indent}{from} --> {}", id_of(to));
            }
            Route::Branches {
                branches,
                otherwise,
            } => {
                for (guard, to) in branches {
                    let _ = writeln!(
                        out,
                        "{indent}{from} -->|\"{}\"| {}",
                        mermaid_text(&guard.source),
                        id_of(to)
                    );
                }
                let _ = writeln!(out, "{indent}{from} -->|else| {}", id_of(otherwise));
            }
        }
        if let Some(to) = on_timeout(node) {
            let _ = writeln!(out, "{indent}{from} -.->|timeout| {}", id_of(to));
        }
    }
    if let Some(handler) = &s.on_failure {
        let failure = mermaid_id(&format!("{prefix}failure__"));
        let _ = writeln!(
            out,
            "{indent}{failure}((on failure)) -.-> {}",
            id_of(handler)
        );
    }
}

/// The graph in Graphviz DOT.
pub fn to_dot(s: &Scenario) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", dot_string(&s.name));
    out.push_str("    rankdir=TB;\n    node [fontname=\"Helvetica\", fontsize=11];\n");
    out.push_str("    edge [fontname=\"Helvetica\", fontsize=9];\n");
    if !s.subgraphs.is_empty() {
        // Edges may end at a cluster's border (`lhead`, `ltail`).
        out.push_str("    compound=true;\n");
    }
    dot_body(s, "", "    ", &mut out);
    out.push_str("}\n");
    out
}

/// Where an edge to or from node `id` of `s` attaches: the node itself, or
/// for a subgraph node, its child's start node inside the cluster, with
/// the attribute that clips the edge at the cluster's border.
fn dot_end(s: &Scenario, prefix: &str, id: &str) -> (String, Option<String>) {
    let mut prefix = prefix.to_string();
    let mut scenario = s;
    let mut id = id.to_string();
    let mut cluster = None;
    // A child whose start is a subgraph node too: go down to a real node,
    // clipping at the outermost cluster.
    while let Some(child) = scenario.subgraphs.get(&id) {
        if cluster.is_none() {
            cluster = Some(format!("cluster_{prefix}{id}"));
        }
        prefix = format!("{prefix}{id}__");
        scenario = child;
        id = child.start.clone();
    }
    (format!("{prefix}{id}"), cluster)
}

fn dot_body(s: &Scenario, prefix: &str, indent: &str, out: &mut String) {
    for node in &s.nodes {
        let id = format!("{prefix}{}", node.id);
        let shape = match node.kind() {
            NodeKind::Skill => "shape=box",
            NodeKind::Map => "shape=box3d",
            NodeKind::Gate => "shape=diamond",
            NodeKind::Approval => "shape=parallelogram",
            NodeKind::End => "shape=box, style=rounded",
            NodeKind::Fail => "shape=octagon",
            NodeKind::Subgraph => {
                let _ = writeln!(
                    out,
                    "{indent}subgraph {} {{\n{indent}    label={};\n{indent}    style=dashed;",
                    dot_string(&format!("cluster_{id}")),
                    dot_string(&node_label(node))
                );
                let inner = format!("{indent}    ");
                match s.subgraphs.get(&node.id) {
                    Some(child) => dot_body(child, &format!("{id}__"), &inner, out),
                    None => {
                        let _ = writeln!(
                            out,
                            "{inner}{} [label=\"(not loaded)\", shape=plaintext];",
                            dot_string(&id)
                        );
                    }
                }
                let _ = writeln!(out, "{indent}}}");
                continue;
            }
        };
        let _ = writeln!(
            out,
            "{indent}{} [label={}, {shape}];",
            dot_string(&id),
            dot_string(&node_label(node))
        );
    }
    let edge = |from: &str, to: &str, label: Option<&str>, dashed: bool, out: &mut String| {
        let (from, tail) = dot_end(s, prefix, from);
        let (to, head) = dot_end(s, prefix, to);
        let mut attributes = Vec::new();
        if let Some(label) = label {
            attributes.push(format!("label={}", dot_string(label)));
        }
        if dashed {
            attributes.push("style=dashed".to_owned());
        }
        if let Some(tail) = tail {
            attributes.push(format!("ltail={}", dot_string(&tail)));
        }
        if let Some(head) = head {
            attributes.push(format!("lhead={}", dot_string(&head)));
        }
        let attributes = if attributes.is_empty() {
            String::new()
        } else {
            format!(" [{}]", attributes.join(", "))
        };
        let _ = writeln!(
            out,
            "{indent}{} -> {}{attributes};",
            dot_string(&from),
            dot_string(&to)
        );
    };
    if !s.start.is_empty() {
        let start = format!("{prefix}start__");
        let (to, head) = dot_end(s, prefix, &s.start);
        let head = head.map_or(String::new(), |h| format!(" [lhead={}]", dot_string(&h)));
        let _ = writeln!(
            out,
            "{indent}{} [label=\"start\", shape=circle];\n{indent}{} -> {}{head};",
            dot_string(&start),
            dot_string(&start),
            dot_string(&to)
        );
    }
    for node in &s.nodes {
        match &node.route {
            Route::End => {}
            Route::Next(to) => edge(&node.id, to, None, false, out),
            Route::Branches {
                branches,
                otherwise,
            } => {
                for (guard, to) in branches {
                    edge(&node.id, to, Some(&guard.source), false, out);
                }
                edge(&node.id, otherwise, Some("else"), false, out);
            }
        }
        if let Some(to) = on_timeout(node) {
            edge(&node.id, to, Some("timeout"), true, out);
        }
    }
    if let Some(handler) = &s.on_failure {
        let failure = format!("{prefix}failure__");
        let (to, head) = dot_end(s, prefix, handler);
        let head = head.map_or(String::new(), |h| format!(", lhead={}", dot_string(&h)));
        let _ = writeln!(
            out,
            "{indent}{} [label=\"on failure\", shape=circle];\n{indent}{} -> {} [style=dashed{head}];",
            dot_string(&failure),
            dot_string(&failure),
            dot_string(&to)
        );
    }
}

/// Where an approval node goes when nobody answered in time.
pub fn on_timeout(node: &Node) -> Option<&str> {
    match &node.body {
        NodeBody::Approval(approval) => approval
            .timeout
            .as_ref()
            .map(|timeout| timeout.on_timeout.as_str()),
        _ => None,
    }
}

/// `id` and what it runs: `paper_summarize (map: summarize)`.
pub fn node_label(node: &Node) -> String {
    match (node.kind(), node.skill()) {
        (NodeKind::Skill, Some(skill)) => format!("{}\n{skill}", node.id),
        (NodeKind::Map, Some(skill)) => format!("{}\nmap: {skill}", node.id),
        (NodeKind::Gate, _) => format!("{}\ngate", node.id),
        (NodeKind::Approval, _) => format!("{}\napproval", node.id),
        (NodeKind::End, _) => format!("{}\nend", node.id),
        (NodeKind::Fail, _) => format!("{}\nfail", node.id),
        (NodeKind::Subgraph, _) => match node.subgraph() {
            Some(subgraph) => format!("{}\nsubgraph: {}", node.id, subgraph.written),
            None => node.id.clone(),
        },
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
