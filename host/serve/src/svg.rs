//! A scenario's graph drawn as SVG on the server, for the run page: the
//! same nodes, labels and edges as `host graph`'s Mermaid and DOT
//! (`skillhost_scenario::graph`), in a layered layout: a node's layer is
//! its distance from the start node, nodes of a layer side by side in file
//! order; an edge going down is a straight line, one going back up (a loop)
//! or sideways a curve on the right. A subgraph node is one box (its child
//! runs as a run of its own, with a page of its own).
//!
//! Each node is a `<g class="node" data-node="ID">` so the page colours it
//! by the status of its steps.
//!
//! Must not: need anything outside the binary to be seen (no fonts, no
//! scripts, no network).

use std::collections::{HashMap, VecDeque};
use std::fmt::Write;

use skillhost_scenario::graph::{node_label, on_timeout};
use skillhost_scenario::{Route, Scenario};

const BOX_W: i64 = 190;
const BOX_H: i64 = 50;
const GAP_X: i64 = 30;
const GAP_Y: i64 = 50;
const MARGIN: i64 = 20;

/// One edge: from, to, label, dashed.
type Edge<'a> = (&'a str, &'a str, Option<&'a str>, bool);

/// The graph of `s` as a standalone SVG document.
pub fn graph_svg(s: &Scenario) -> String {
    let mut edges: Vec<Edge<'_>> = Vec::new();
    for node in &s.nodes {
        match &node.route {
            Route::End => {}
            Route::Next(to) => edges.push((&node.id, to, None, false)),
            Route::Branches {
                branches,
                otherwise,
            } => {
                for (guard, to) in branches {
                    edges.push((&node.id, to, Some(guard.source.as_str()), false));
                }
                edges.push((&node.id, otherwise, Some("else"), false));
            }
        }
        if let Some(to) = on_timeout(node) {
            edges.push((&node.id, to, Some("timeout"), true));
        }
    }
    if let Some(handler) = &s.on_failure {
        edges.push(("", handler, Some("on failure"), true));
    }

    // Layers: breadth-first distance from the start; nodes the start does
    // not reach (a failure handler) go below the rest.
    let mut layer: HashMap<&str, usize> = HashMap::new();
    let mut queue = VecDeque::new();
    if s.nodes.iter().any(|n| n.id == s.start) {
        layer.insert(&s.start, 0);
        queue.push_back(s.start.as_str());
    }
    while let Some(id) = queue.pop_front() {
        let depth = layer[id];
        for (from, to, _, _) in &edges {
            if *from == id && !layer.contains_key(to) {
                layer.insert(to, depth + 1);
                queue.push_back(to);
            }
        }
    }
    let mut next_free = layer.values().max().map_or(0, |d| d + 1);
    for node in &s.nodes {
        if !layer.contains_key(node.id.as_str()) {
            layer.insert(&node.id, next_free);
            next_free += 1;
        }
    }
    let depth = layer.values().max().map_or(0, |d| d + 1);
    let mut rows: Vec<Vec<&str>> = vec![Vec::new(); depth];
    for node in &s.nodes {
        rows[layer[node.id.as_str()]].push(&node.id);
    }
    let widest = rows.iter().map(Vec::len).max().unwrap_or(1).max(1) as i64;
    let width = MARGIN * 2 + widest * BOX_W + (widest - 1) * GAP_X + 120;
    let height = MARGIN * 2 + depth as i64 * (BOX_H + GAP_Y);
    let mut place: HashMap<&str, (i64, i64)> = HashMap::new();
    for (r, row) in rows.iter().enumerate() {
        let row_width = row.len() as i64 * BOX_W + (row.len() as i64 - 1).max(0) * GAP_X;
        let left = MARGIN + ((widest * BOX_W + (widest - 1) * GAP_X) - row_width) / 2;
        for (i, id) in row.iter().enumerate() {
            let x = left + i as i64 * (BOX_W + GAP_X);
            let y = MARGIN + r as i64 * (BOX_H + GAP_Y);
            place.insert(id, (x, y));
        }
    }

    let mut out = String::with_capacity(1024 + s.nodes.len() * 400);
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"graph\" viewBox=\"0 0 {width} {height}\" \
         width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"graph of scenario {}\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" \
         markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0L10,5L0,10z\"/></marker></defs>",
        xml(&s.name)
    );
    out.push_str("<g class=\"edges\">");
    for (from, to, label, dashed) in &edges {
        let Some(&(tx, ty)) = place.get(to) else {
            continue;
        };
        let dash = if *dashed {
            " stroke-dasharray=\"5 4\""
        } else {
            ""
        };
        let (path, lx, ly) = match place.get(from) {
            None => {
                // The failure handler's entry: an arrow from above.
                let (x, y) = (tx + BOX_W / 2, ty);
                (
                    format!("M{x},{}L{x},{y}", y - GAP_Y / 2),
                    x + 4,
                    y - GAP_Y / 2,
                )
            }
            Some(&(fx, fy)) if fy < ty => {
                let (x1, y1, x2, y2) = (fx + BOX_W / 2, fy + BOX_H, tx + BOX_W / 2, ty);
                (
                    format!("M{x1},{y1}L{x2},{y2}"),
                    (x1 + x2) / 2 + 4,
                    (y1 + y2) / 2,
                )
            }
            Some(&(fx, fy)) => {
                // Back up (a loop) or sideways: around the right.
                let (x1, y1, x2, y2) = (fx + BOX_W, fy + BOX_H / 2, tx + BOX_W, ty + BOX_H / 2);
                let bulge = x1.max(x2) + 60;
                (
                    format!("M{x1},{y1}C{bulge},{y1} {bulge},{y2} {x2},{y2}"),
                    bulge - 10,
                    (y1 + y2) / 2,
                )
            }
        };
        let _ = write!(
            out,
            "<path class=\"edge\" d=\"{path}\" fill=\"none\" stroke=\"#667\" stroke-width=\"1.5\"{dash} marker-end=\"url(#arrow)\"/>"
        );
        if let Some(label) = label {
            let _ = write!(
                out,
                "<text class=\"edge-label\" x=\"{lx}\" y=\"{ly}\" font-size=\"11\">{}</text>",
                xml(&shorten(label, 28))
            );
        }
    }
    out.push_str("</g>");
    for node in &s.nodes {
        let (x, y) = place[node.id.as_str()];
        let label = node_label(node);
        let mut lines = label.lines();
        let title = lines.next().unwrap_or(&node.id);
        let what = lines.collect::<Vec<_>>().join(" ");
        let kind = node.kind().to_string();
        let _ = write!(
            out,
            "<g class=\"node kind-{kind}\" data-node=\"{id}\" data-status=\"pending\">\
             <title>{full}</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{BOX_W}\" height=\"{BOX_H}\" rx=\"{rx}\"/>\
             <text x=\"{tx}\" y=\"{ty1}\" text-anchor=\"middle\" font-weight=\"bold\" font-size=\"13\">{title}</text>\
             <text x=\"{tx}\" y=\"{ty2}\" text-anchor=\"middle\" font-size=\"11\">{what}</text></g>",
            id = xml(&node.id),
            full = xml(&label),
            rx = if matches!(kind.as_str(), "end" | "fail") {
                22
            } else {
                6
            },
            tx = x + BOX_W / 2,
            ty1 = y + 21,
            ty2 = y + 38,
            title = xml(&shorten(title, 26)),
            what = xml(&shorten(&what, 30)),
        );
    }
    out.push_str("</svg>");
    out
}

/// At most `max` characters, an ellipsis in place of the rest.
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Text for XML content and attribute values.
pub(crate) fn xml(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const LOOP: &str = r#"
[scenario]
name = "loop & <more>"

[state]
n = { type = "integer" }

[[node]]
id = "count"
kind = "gate"
max_visits = 5
writes = [{ field = "n", from = "state.n + 1" }]

[[node]]
id = "done"
kind = "end"

[[edge]]
from = "count"
branches = [{ when = "state.n < 3", to = "count" }, { else = "done" }]
"#;

    #[test]
    fn every_node_and_edge_is_drawn_and_text_escaped() {
        let (s, _) = skillhost_scenario::parse_str(LOOP, Path::new("/tmp/loop.toml")).unwrap();
        let svg = graph_svg(&s);
        assert!(
            svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""),
            "{svg}"
        );
        assert!(svg.contains("data-node=\"count\""), "{svg}");
        assert!(svg.contains("data-node=\"done\""), "{svg}");
        assert!(svg.contains("loop &amp; &lt;more&gt;"), "{svg}");
        // The loop back to `count` curves; the way down to `done` is straight.
        assert_eq!(svg.matches("class=\"edge\"").count(), 2, "{svg}");
        assert!(svg.contains("C"), "{svg}");
        assert!(svg.contains(">else<"), "{svg}");
        assert!(svg.ends_with("</svg>"));
    }
}
