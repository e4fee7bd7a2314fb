//! A scenario's graph drawn as SVG on the server, for the run page and a
//! scenario's page: the same nodes, labels and edges as `host graph`'s
//! Mermaid and DOT (`skillhost_scenario::graph`), laid out in layers as
//! Graphviz's `dot` does (Sugiyama's method), written here in full:
//!
//! 1. Layers. Edges that close a cycle (found by a depth-first walk from
//!    the start node) and edges from what the start does not reach (the
//!    failure handler) back into what it does are drawn reversed; on the
//!    acyclic rest, a node's layer is its longest path from the start,
//!    and what the start does not reach goes below the rest (but the
//!    failure entry of a handler the start reaches goes just above it).
//! 2. Ranks. A layer is every other rank; between two layers lies a rank
//!    of edge points. An edge crossing ranks gets one point per rank it
//!    crosses, and a labelled edge carries its label on its first point
//!    (the one next to its source), a box as wide as the text: so labels
//!    are placed as nodes are, and none overlaps another or a node.
//! 3. Order. Within each rank, items are ordered by the mean position of
//!    their neighbours (barycentres), sweeping down and up; the order with
//!    the fewest crossings is kept.
//! 4. Coordinates. Each item is moved towards the mean of its neighbours'
//!    positions, keeping its rank's order and the gaps between boxes (a
//!    least-squares fit under order constraints, solved exactly by pooling
//!    adjacent violators), sweeping down and up.
//! 5. Edges. Each edge starts on its source's border (the bottom of the
//!    upper box, the top of the lower one for a reversed edge) and ends on
//!    its target's, through its points as smooth curves; an edge from a
//!    node to itself is a loop on its right, its label beside it; the
//!    failure handler's entry is a small `on failure` box above it.
//!
//! Each node is a `<g class="node" data-node="ID">` so the page colours it
//! by the status of its steps; each edge a `<path class="edge">` with
//! `data-from` (empty for the failure entry) and `data-to`, each label a
//! `<text class="edge-label">` whose box the layout reserved (monospace,
//! [`CHAR_W`] a character). A subgraph node is one box (its child runs as
//! a run of its own, with a page of its own).
//!
//! Must not: need anything outside the binary to be seen (no fonts, no
//! scripts, no network), nor take unbounded time or memory on a hostile
//! scenario: a graph that needs more than [`MAX_POINTS`] edge points is
//! not drawn (the picture says so and names `host graph`), and crossings
//! are counted only while that stays under [`MAX_CROSSING_PAIRS`].

use std::collections::HashMap;
use std::fmt::Write;

use skillhost_scenario::graph::{node_label, on_timeout};
use skillhost_scenario::{Route, Scenario};

const BOX_W: f64 = 190.0;
const BOX_H: f64 = 50.0;
/// The failure handler's entry box.
const ENTRY_W: f64 = 84.0;
const ENTRY_H: f64 = 22.0;
/// Between two boxes of a rank.
const GAP_X: f64 = 28.0;
/// Between two edge points of a rank (or a point and a box).
const GAP_POINT: f64 = 14.0;
/// Between two ranks.
const GAP_Y: f64 = 20.0;
const MARGIN: f64 = 20.0;
/// An edge label's font size, and the width the layout reserves for each
/// of its characters (a monospace font's is 0.6 of its size; more, so
/// that a wider fallback font still fits).
const LABEL_SIZE: f64 = 11.0;
pub(crate) const CHAR_W: f64 = 7.4;
/// The height reserved for a label's line.
const LABEL_H: f64 = 15.0;
/// The room between an edge and its label.
const LABEL_PAD: f64 = 5.0;
/// How far a loop from a node to itself reaches right of it, and how
/// much further each next one.
const LOOP_W: f64 = 34.0;
const LOOP_STEP: f64 = 18.0;
/// The most characters a label shows.
const LABEL_CHARS: usize = 28;
/// The most edge points a graph is laid out with (a scenario's edges
/// times the layers each crosses): a larger graph is not drawn here.
pub(crate) const MAX_POINTS: usize = 20_000;
/// The most pairs of segments between ranks whose crossings are counted
/// after each ordering sweep; over it, the last sweep's order is kept.
const MAX_CROSSING_PAIRS: usize = 4_000_000;
/// Sweeps of the ordering and of the coordinate fit.
const ORDER_SWEEPS: usize = 12;
const PLACE_SWEEPS: usize = 16;

/// One edge of the scenario: from (None: the failure entry), to, label,
/// dashed.
struct Edge {
    from: Option<usize>,
    to: usize,
    label: Option<String>,
    dashed: bool,
}

/// What an item of a rank is.
#[derive(Clone, Copy, PartialEq)]
enum What {
    /// A node of the scenario.
    Node,
    /// The failure handler's entry box.
    Entry,
    /// A point of an edge (with its label when it carries it).
    Point,
}

struct Item {
    what: What,
    rank: usize,
    /// Reach left and right of its anchor `x`, and its height.
    left: f64,
    right: f64,
    height: f64,
    x: f64,
    /// The items it is linked to in the rank above and the rank below.
    up: Vec<usize>,
    down: Vec<usize>,
}

/// A drawn edge: its points from source to target, and its label's box
/// (left, top, text) when it has one.
pub(crate) struct DrawnEdge {
    pub from: Option<usize>,
    pub to: usize,
    pub dashed: bool,
    /// The path: a move to the first point, then each next point reached
    /// by a cubic curve (its two control points first) or a line.
    pub start: (f64, f64),
    pub segments: Vec<Segment>,
    pub label: Option<(f64, f64, String)>,
}

pub(crate) enum Segment {
    Line((f64, f64)),
    Curve((f64, f64), (f64, f64), (f64, f64)),
}

impl Segment {
    #[cfg(test)]
    fn end(&self) -> (f64, f64) {
        match self {
            Segment::Line(p) | Segment::Curve(_, _, p) => *p,
        }
    }
}

/// A scenario's graph, laid out: boxes (left, top, width, height) for
/// each node and the failure entry, and the edges.
pub(crate) struct Layout {
    pub nodes: Vec<(f64, f64, f64, f64)>,
    pub entry: Option<(f64, f64, f64, f64)>,
    pub edges: Vec<DrawnEdge>,
    pub width: f64,
    pub height: f64,
}

#[cfg(test)]
impl Layout {
    /// The box of an edge end: a node's, or the entry's.
    pub fn box_of(&self, end: Option<usize>) -> Option<(f64, f64, f64, f64)> {
        match end {
            Some(i) => self.nodes.get(i).copied(),
            None => self.entry,
        }
    }
}

/// The width a label of `text` is given.
pub(crate) fn label_width(text: &str) -> f64 {
    text.chars().count() as f64 * CHAR_W
}

fn edges_of(s: &Scenario, index: &HashMap<&str, usize>) -> Vec<Edge> {
    let mut edges = Vec::new();
    let mut push = |from: usize, to: &str, label: Option<&str>, dashed: bool| {
        if let Some(&to) = index.get(to) {
            edges.push(Edge {
                from: Some(from),
                to,
                label: label.map(|l| shorten(l, LABEL_CHARS)),
                dashed,
            });
        }
    };
    for (i, node) in s.nodes.iter().enumerate() {
        match &node.route {
            Route::End => {}
            Route::Next(to) => push(i, to, None, false),
            Route::Branches {
                branches,
                otherwise,
            } => {
                for (guard, to) in branches {
                    push(i, to, Some(guard.source.as_str()), false);
                }
                push(i, otherwise, Some("else"), false);
            }
        }
        if let Some(to) = on_timeout(node) {
            push(i, to, Some("timeout"), true);
        }
    }
    if let Some(&to) = s.on_failure.as_deref().and_then(|h| index.get(h)) {
        edges.push(Edge {
            from: None,
            to,
            label: None,
            dashed: true,
        });
    }
    edges
}

/// Lays out the graph of `s`; None when it would take more than
/// [`MAX_POINTS`] edge points.
pub(crate) fn layout(s: &Scenario) -> Option<Layout> {
    let n = s.nodes.len();
    let index: HashMap<&str, usize> = s
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| (node.id.as_str(), i))
        .collect();
    let edges = edges_of(s, &index);
    // Graph vertices: the nodes, then the entry (index n) when there is one.
    let entry = edges.iter().any(|e| e.from.is_none());
    let vertices = n + usize::from(entry);
    let vertex = |end: Option<usize>| end.unwrap_or(n);
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); vertices];
    for (k, e) in edges.iter().enumerate() {
        if e.from != Some(e.to) {
            out[vertex(e.from)].push(k);
        }
    }

    // 1. What the start reaches; the edges that close cycles.
    let start = index.get(s.start.as_str()).copied();
    let mut reached = vec![false; vertices];
    if let Some(start) = start {
        let mut stack = vec![start];
        reached[start] = true;
        while let Some(v) = stack.pop() {
            for &k in &out[v] {
                let t = edges[k].to;
                if !reached[t] {
                    reached[t] = true;
                    stack.push(t);
                }
            }
        }
    }
    let mut reversed = vec![false; edges.len()];
    {
        // Iterative depth-first walks: from the start, then from the entry,
        // then from each node not yet walked, in file order.
        let mut state = vec![0u8; vertices]; // 0 new, 1 on the stack, 2 done
        let roots = start
            .into_iter()
            .chain(entry.then_some(n))
            .chain(0..n)
            .collect::<Vec<_>>();
        for root in roots {
            if state[root] != 0 {
                continue;
            }
            state[root] = 1;
            let mut stack: Vec<(usize, usize)> = vec![(root, 0)];
            while let Some(top) = stack.last_mut() {
                let v = top.0;
                if let Some(&k) = out[v].get(top.1) {
                    top.1 += 1;
                    let t = edges[k].to;
                    if !reached[v] && reached[t] {
                        // The entry keeps its way down: it is placed
                        // above its handler below.
                        reversed[k] = v != n;
                        continue;
                    }
                    match state[t] {
                        0 => {
                            state[t] = 1;
                            stack.push((t, 0));
                        }
                        1 => reversed[k] = true,
                        _ => {}
                    }
                } else {
                    state[v] = 2;
                    stack.pop();
                }
            }
        }
    }
    // Oriented edges (upper vertex, lower vertex) and longest-path layers:
    // what the start reaches first, then the rest below it.
    let oriented = |k: usize| -> (usize, usize) {
        let e = &edges[k];
        let (a, b) = (vertex(e.from), e.to);
        if reversed[k] { (b, a) } else { (a, b) }
    };
    let layered: Vec<usize> = (0..edges.len())
        .filter(|&k| edges[k].from != Some(edges[k].to))
        .collect();
    let longest = |only: &dyn Fn(usize) -> bool, floor: usize, layer: &mut Vec<usize>| {
        // Kahn's order over the oriented edges among `only`.
        let mut indegree = vec![0usize; vertices];
        let mut below: Vec<Vec<usize>> = vec![Vec::new(); vertices];
        for &k in &layered {
            let (a, b) = oriented(k);
            if only(a) && only(b) {
                indegree[b] += 1;
                below[a].push(b);
            }
        }
        let mut ready: Vec<usize> = (0..vertices)
            .filter(|&v| only(v) && indegree[v] == 0)
            .collect();
        for &v in &ready {
            layer[v] = floor;
        }
        while let Some(v) = ready.pop() {
            for &b in &below[v] {
                layer[b] = layer[b].max(layer[v] + 1);
                indegree[b] -= 1;
                if indegree[b] == 0 {
                    ready.push(b);
                }
            }
        }
    };
    let mut layer = vec![0usize; vertices];
    longest(&|v| reached[v], 0, &mut layer);
    // The failure entry goes just above a handler the start reaches (all
    // one layer down if that is the start itself).
    let handler = edges
        .iter()
        .find(|e| e.from.is_none())
        .map(|e| e.to)
        .filter(|&h| reached[h]);
    if let Some(h) = handler {
        if layer[h] == 0 {
            for v in 0..vertices {
                if reached[v] {
                    layer[v] += 1;
                }
            }
        }
        layer[n] = layer[h] - 1;
    }
    let floor = (0..vertices)
        .filter(|&v| reached[v])
        .map(|v| layer[v] + 1)
        .max()
        .unwrap_or(0);
    longest(
        &|v| !reached[v] && (handler.is_none() || v != n),
        floor,
        &mut layer,
    );

    // 2. Ranks: vertices on even ranks, edge points between.
    let points: usize = layered
        .iter()
        .map(|&k| {
            let (a, b) = oriented(k);
            2 * layer[b].saturating_sub(layer[a])
        })
        .sum();
    if points > MAX_POINTS {
        return None;
    }
    let ranks = 2 * layer.iter().copied().max().map_or(1, |l| l + 1) - 1;
    let mut items: Vec<Item> = Vec::new();
    let mut item_of_vertex = vec![0usize; vertices];
    // Loops from a node to itself: how many, and their labels' width.
    let mut loops: Vec<(usize, f64)> = vec![(0, 0.0); vertices];
    for e in &edges {
        if e.from == Some(e.to) {
            let entry = &mut loops[e.to];
            entry.0 += 1;
            entry.1 = entry
                .1
                .max(e.label.as_deref().map_or(0.0, label_width) + LABEL_PAD);
        }
    }
    for v in 0..vertices {
        let (what, w, h) = if v < n {
            (What::Node, BOX_W, BOX_H)
        } else {
            (What::Entry, ENTRY_W, ENTRY_H)
        };
        let extra = match loops[v] {
            (0, _) => 0.0,
            (count, label) => LOOP_W + LOOP_STEP * (count - 1) as f64 + label,
        };
        // Room for its loops' labels, one under the other.
        let h = h.max(loops[v].0 as f64 * LABEL_H);
        item_of_vertex[v] = items.len();
        items.push(Item {
            what,
            rank: 2 * layer[v],
            left: w / 2.0,
            right: w / 2.0 + extra,
            height: h,
            x: 0.0,
            up: Vec::new(),
            down: Vec::new(),
        });
    }
    // Each drawn edge's chain of items, from its upper end to its lower.
    let mut chains: Vec<Vec<usize>> = vec![Vec::new(); edges.len()];
    let mut label_item: Vec<Option<usize>> = vec![None; edges.len()];
    for &k in &layered {
        let (a, b) = oriented(k);
        let (ra, rb) = (2 * layer[a], 2 * layer[b]);
        let mut chain = vec![item_of_vertex[a]];
        // The label sits on the point next to the edge's source.
        let label_rank = if reversed[k] { rb - 1 } else { ra + 1 };
        for rank in ra + 1..rb {
            let label = edges[k]
                .label
                .as_deref()
                .filter(|_| rank == label_rank)
                .map(label_width);
            if label.is_some() {
                label_item[k] = Some(items.len());
            }
            chain.push(items.len());
            items.push(Item {
                what: What::Point,
                rank,
                left: 0.0,
                right: label.map_or(0.0, |w| w + LABEL_PAD),
                height: if label.is_some() { LABEL_H } else { 0.0 },
                x: 0.0,
                up: Vec::new(),
                down: Vec::new(),
            });
        }
        chain.push(item_of_vertex[b]);
        for pair in chain.windows(2) {
            items[pair[0]].down.push(pair[1]);
            items[pair[1]].up.push(pair[0]);
        }
        chains[k] = chain;
    }

    // 3. Order within ranks.
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); ranks];
    for (i, item) in items.iter().enumerate() {
        order[item.rank].push(i);
    }
    let mut pos = vec![0usize; items.len()];
    let set_pos = |order: &Vec<Vec<usize>>, pos: &mut Vec<usize>| {
        for rank in order {
            for (p, &i) in rank.iter().enumerate() {
                pos[i] = p;
            }
        }
    };
    set_pos(&order, &mut pos);
    let crossings = |pos: &Vec<usize>| -> usize {
        let mut count = 0;
        for rank in order_ranks(&items, ranks) {
            let mut segments: Vec<(usize, usize)> = Vec::new();
            for i in rank {
                for &d in &items[i].down {
                    segments.push((pos[i], pos[d]));
                }
            }
            for (x, a) in segments.iter().enumerate() {
                for b in &segments[x + 1..] {
                    if (a.0 < b.0 && a.1 > b.1) || (a.0 > b.0 && a.1 < b.1) {
                        count += 1;
                    }
                }
            }
        }
        count
    };
    // Counting is quadratic in a rank's segments: bounded on a large graph.
    let pairs: usize = order_ranks(&items, ranks)
        .iter()
        .map(|rank| rank.iter().map(|&i| items[i].down.len()).sum::<usize>())
        .map(|segments| segments * segments)
        .sum();
    let count_crossings = pairs <= MAX_CROSSING_PAIRS;
    let mut best = (
        if count_crossings { crossings(&pos) } else { 0 },
        order.clone(),
    );
    for sweep in 0..ORDER_SWEEPS {
        let down = sweep % 2 == 0;
        let seq: Vec<usize> = if down {
            (1..ranks).collect()
        } else {
            (0..ranks.saturating_sub(1)).rev().collect()
        };
        for r in seq {
            let mut keyed: Vec<(f64, usize, usize)> = order[r]
                .iter()
                .enumerate()
                .map(|(p, &i)| {
                    let near = if down { &items[i].up } else { &items[i].down };
                    let key = if near.is_empty() {
                        p as f64
                    } else {
                        near.iter().map(|&j| pos[j] as f64).sum::<f64>() / near.len() as f64
                    };
                    (key, p, i)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            order[r] = keyed.into_iter().map(|(_, _, i)| i).collect();
            for (p, &i) in order[r].iter().enumerate() {
                pos[i] = p;
            }
        }
        if !count_crossings {
            best.1.clone_from(&order);
            continue;
        }
        let count = crossings(&pos);
        if count < best.0 {
            best = (count, order.clone());
        }
    }
    let order = best.1;
    set_pos(&order, &mut pos);

    // 4. Coordinates: packed, then fitted to neighbours.
    let gap = |a: &Item, b: &Item| -> f64 {
        let boxed = |i: &Item| !matches!(i.what, What::Point);
        if boxed(a) && boxed(b) {
            GAP_X
        } else {
            GAP_POINT
        }
    };
    for rank in &order {
        let mut x = 0.0;
        for (p, &i) in rank.iter().enumerate() {
            if p > 0 {
                let prev = &items[rank[p - 1]];
                x += prev.right + gap(prev, &items[i]) + items[i].left;
            }
            items[i].x = x;
        }
    }
    for sweep in 0..PLACE_SWEEPS {
        let seq: Vec<usize> = if sweep % 2 == 0 {
            (0..ranks).collect()
        } else {
            (0..ranks).rev().collect()
        };
        for r in seq {
            let rank = &order[r];
            let desired: Vec<f64> = rank
                .iter()
                .map(|&i| {
                    let item = &items[i];
                    let near: Vec<f64> = item
                        .up
                        .iter()
                        .chain(&item.down)
                        .map(|&j| items[j].x)
                        .collect();
                    if near.is_empty() {
                        item.x
                    } else {
                        near.iter().sum::<f64>() / near.len() as f64
                    }
                })
                .collect();
            let minimum: Vec<f64> = (1..rank.len())
                .map(|p| {
                    let (a, b) = (&items[rank[p - 1]], &items[rank[p]]);
                    a.right + gap(a, b) + b.left
                })
                .collect();
            let placed = fit_in_order(&desired, &minimum);
            for (&i, x) in rank.iter().zip(placed) {
                items[i].x = x;
            }
        }
    }
    let left = items
        .iter()
        .map(|i| i.x - i.left)
        .fold(f64::INFINITY, f64::min);
    let shift = MARGIN - if left.is_finite() { left } else { 0.0 };
    for item in &mut items {
        item.x += shift;
    }
    let width = items.iter().map(|i| i.x + i.right).fold(0.0, f64::max) + MARGIN;

    // Rank tops and heights.
    let mut rank_h = vec![0.0f64; ranks];
    for item in &items {
        rank_h[item.rank] = rank_h[item.rank].max(item.height);
    }
    let mut rank_y = vec![0.0f64; ranks];
    let mut y = MARGIN;
    for r in 0..ranks {
        rank_y[r] = y;
        y += rank_h[r] + GAP_Y;
    }
    let height = y - GAP_Y + MARGIN;
    let box_of = |i: usize| -> (f64, f64, f64, f64) {
        let item = &items[i];
        let (w, h) = match item.what {
            What::Entry => (ENTRY_W, ENTRY_H),
            _ => (BOX_W, BOX_H),
        };
        let top = rank_y[item.rank] + (rank_h[item.rank] - h) / 2.0;
        (item.x - w / 2.0, top, w, h)
    };

    // 5. Edges. Ports: a box's edges leave its bottom and enter its top
    // spread along it, in the order of where they go.
    let mut bottom_port: HashMap<(usize, usize), f64> = HashMap::new();
    let mut top_port: HashMap<(usize, usize), f64> = HashMap::new();
    for &i in &item_of_vertex {
        let (bx, _, bw, _) = box_of(i);
        for (ports, next) in [
            (&mut bottom_port, &items[i].down),
            (&mut top_port, &items[i].up),
        ] {
            let mut ends: Vec<(f64, usize)> = next.iter().map(|&j| (items[j].x, j)).collect();
            ends.sort_by(|a, b| a.0.total_cmp(&b.0));
            let count = ends.len() as f64;
            let step = (bw * 0.8 / count).min(24.0);
            for (p, (_, j)) in ends.iter().enumerate() {
                let x = bx + bw / 2.0 + (p as f64 - (count - 1.0) / 2.0) * step;
                ports.insert((i, *j), x);
            }
        }
    }
    let mut drawn = Vec::with_capacity(edges.len());
    let mut loop_seen = vec![0usize; vertices];
    for (k, e) in edges.iter().enumerate() {
        if e.from == Some(e.to) {
            let i = item_of_vertex[e.to];
            let (bx, by, bw, bh) = box_of(i);
            let nth = loop_seen[e.to];
            loop_seen[e.to] += 1;
            let right = bx + bw;
            let reach = right + LOOP_W + LOOP_STEP * nth as f64;
            let (y1, y2) = (by + bh * 0.3, by + bh * 0.7);
            let label_x = right + LOOP_W + LOOP_STEP * (loops[e.to].0 - 1) as f64 + LABEL_PAD;
            let label = e.label.clone().map(|text| {
                let top = by + bh / 2.0 - LABEL_H / 2.0
                    + (nth as f64 - (loops[e.to].0 as f64 - 1.0) / 2.0) * LABEL_H;
                (label_x, top, text)
            });
            drawn.push(DrawnEdge {
                from: e.from,
                to: e.to,
                dashed: e.dashed,
                start: (right, y1),
                segments: vec![Segment::Curve(
                    (reach, y1 - 8.0),
                    (reach, y2 + 8.0),
                    (right, y2),
                )],
                label,
            });
            continue;
        }
        let chain = &chains[k];
        let mut points: Vec<(f64, f64)> = Vec::new();
        let (first, last) = (chain[0], chain[chain.len() - 1]);
        let (_, fy, _, fh) = box_of(first);
        points.push((bottom_port[&(first, chain[1])], fy + fh));
        for &i in &chain[1..chain.len() - 1] {
            let r = items[i].rank;
            let x = items[i].x;
            points.push((x, rank_y[r]));
            if rank_h[r] > 0.0 {
                points.push((x, rank_y[r] + rank_h[r]));
            }
        }
        let (_, ly, _, _) = box_of(last);
        points.push((top_port[&(last, chain[chain.len() - 2])], ly));
        let label = label_item[k].map(|i| {
            let r = items[i].rank;
            (
                items[i].x + LABEL_PAD,
                rank_y[r] + (rank_h[r] - LABEL_H) / 2.0,
                e.label.clone().unwrap_or_default(),
            )
        });
        if reversed[k] {
            points.reverse();
        }
        // Straight through a rank with height (vertical there), curved
        // between ranks with vertical tangents at both ends.
        let mut segments = Vec::with_capacity(points.len());
        for pair in points.windows(2) {
            let ((x1, y1), (x2, y2)) = (pair[0], pair[1]);
            if x1 == x2 {
                segments.push(Segment::Line((x2, y2)));
            } else {
                let ym = (y1 + y2) / 2.0;
                segments.push(Segment::Curve((x1, ym), (x2, ym), (x2, y2)));
            }
        }
        drawn.push(DrawnEdge {
            from: e.from,
            to: e.to,
            dashed: e.dashed,
            start: points[0],
            segments,
            label,
        });
    }
    let nodes = (0..n).map(|v| box_of(item_of_vertex[v])).collect();
    let entry = entry.then(|| box_of(item_of_vertex[n]));
    Some(Layout {
        nodes,
        entry,
        edges: drawn,
        width,
        height,
    })
}

/// The items of each rank, in no particular order.
fn order_ranks(items: &[Item], ranks: usize) -> Vec<Vec<usize>> {
    let mut out = vec![Vec::new(); ranks];
    for (i, item) in items.iter().enumerate() {
        out[item.rank].push(i);
    }
    out
}

/// The positions closest to `desired` (least squares) that keep their
/// order with at least `minimum[p]` between positions `p` and `p + 1`:
/// with the gaps taken out, a monotone fit, by pooling adjacent violators.
fn fit_in_order(desired: &[f64], minimum: &[f64]) -> Vec<f64> {
    let mut offset = Vec::with_capacity(desired.len());
    let mut at = 0.0;
    for p in 0..desired.len() {
        if p > 0 {
            at += minimum[p - 1];
        }
        offset.push(at);
    }
    // Blocks of (mean, count).
    let mut blocks: Vec<(f64, usize)> = Vec::new();
    for (d, o) in desired.iter().zip(&offset) {
        blocks.push((d - o, 1));
        while blocks.len() > 1 {
            let (m2, c2) = blocks[blocks.len() - 1];
            let (m1, c1) = blocks[blocks.len() - 2];
            if m1 <= m2 {
                break;
            }
            blocks.pop();
            let merged = (m1 * c1 as f64 + m2 * c2 as f64) / (c1 + c2) as f64;
            *blocks.last_mut().unwrap() = (merged, c1 + c2);
        }
    }
    let mut out = Vec::with_capacity(desired.len());
    for (mean, count) in blocks {
        for _ in 0..count {
            let p = out.len();
            out.push(mean + offset[p]);
        }
    }
    out
}

fn num(v: f64) -> String {
    let rounded = (v * 10.0).round() / 10.0;
    if rounded == rounded.trunc() {
        format!("{}", rounded as i64)
    } else {
        format!("{rounded:.1}")
    }
}

/// The graph of `s` as a standalone SVG document.
pub fn graph_svg(s: &Scenario) -> String {
    let Some(layout) = layout(s) else {
        return format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"graph too-large\" width=\"480\" \
             height=\"40\" role=\"img\" aria-label=\"graph of scenario {name}\"><text x=\"10\" \
             y=\"24\" font-size=\"13\">{} nodes: too large a graph to draw here; `host graph` \
             draws it as DOT</text></svg>",
            s.nodes.len(),
            name = xml(&s.name)
        );
    };
    let (width, height) = (num(layout.width), num(layout.height));
    let mut out = String::with_capacity(1024 + s.nodes.len() * 600);
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"graph\" viewBox=\"0 0 {width} {height}\" \
         width=\"{width}\" height=\"{height}\" role=\"img\" aria-label=\"graph of scenario {}\">\
         <defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" \
         markerHeight=\"7\" orient=\"auto-start-reverse\"><path d=\"M0,0L10,5L0,10z\"/></marker></defs>",
        xml(&s.name)
    );
    out.push_str("<g class=\"edges\">");
    for edge in &layout.edges {
        let mut d = format!("M{},{}", num(edge.start.0), num(edge.start.1));
        for segment in &edge.segments {
            match segment {
                Segment::Line((x, y)) => {
                    let _ = write!(d, "L{},{}", num(*x), num(*y));
                }
                Segment::Curve((x1, y1), (x2, y2), (x, y)) => {
                    let _ = write!(
                        d,
                        "C{},{} {},{} {},{}",
                        num(*x1),
                        num(*y1),
                        num(*x2),
                        num(*y2),
                        num(*x),
                        num(*y)
                    );
                }
            }
        }
        let dash = if edge.dashed {
            " stroke-dasharray=\"5 4\""
        } else {
            ""
        };
        let from = edge.from.map_or("", |i| s.nodes[i].id.as_str());
        let _ = write!(
            out,
            "<path class=\"edge\" data-from=\"{}\" data-to=\"{}\" d=\"{d}\" fill=\"none\" \
             stroke=\"#667\" stroke-width=\"1.5\"{dash} marker-end=\"url(#arrow)\"/>",
            xml(from),
            xml(&s.nodes[edge.to].id),
        );
        if let Some((x, top, text)) = &edge.label {
            let _ = write!(
                out,
                "<text class=\"edge-label\" x=\"{}\" y=\"{}\" font-size=\"{LABEL_SIZE}\" \
                 font-family=\"ui-monospace, 'DejaVu Sans Mono', monospace\">{}</text>",
                num(*x),
                num(top + LABEL_SIZE),
                xml(text)
            );
        }
    }
    out.push_str("</g>");
    if let Some((x, y, w, h)) = layout.entry {
        let _ = write!(
            out,
            "<g class=\"entry\"><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"{}\"/>\
             <text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"11\">on failure</text></g>",
            num(x),
            num(y),
            num(w),
            num(h),
            num(h / 2.0),
            num(x + w / 2.0),
            num(y + h / 2.0 + 4.0),
        );
    }
    for (node, &(x, y, w, h)) in s.nodes.iter().zip(&layout.nodes) {
        let label = node_label(node);
        let mut lines = label.lines();
        let title = lines.next().unwrap_or(&node.id);
        let what = lines.collect::<Vec<_>>().join(" ");
        let kind = node.kind().to_string();
        let _ = write!(
            out,
            "<g class=\"node kind-{kind}\" data-node=\"{id}\" data-status=\"pending\">\
             <title>{full}</title>\
             <rect x=\"{x}\" y=\"{y}\" width=\"{w}\" height=\"{h}\" rx=\"{rx}\"/>\
             <text x=\"{tx}\" y=\"{ty1}\" text-anchor=\"middle\" font-weight=\"bold\" font-size=\"13\">{title}</text>\
             <text x=\"{tx}\" y=\"{ty2}\" text-anchor=\"middle\" font-size=\"11\">{what}</text></g>",
            id = xml(&node.id),
            full = xml(&label),
            x = num(x),
            y = num(y),
            w = num(w),
            h = num(h),
            rx = if matches!(kind.as_str(), "end" | "fail") {
                22
            } else {
                6
            },
            tx = num(x + w / 2.0),
            ty1 = num(y + 21.0),
            ty2 = num(y + 38.0),
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

    /// What the browser test checks in Chromium, on the layout's own
    /// boxes: no two labels overlap, nor a label and a node, nor two
    /// nodes; every edge starts on its source's box and ends on its
    /// target's.
    fn check_layout(s: &Scenario) {
        let layout = layout(s).expect("a graph small enough to draw");
        let within = |(x, y): (f64, f64), (bx, by, bw, bh): (f64, f64, f64, f64)| {
            x >= bx - 0.5 && x <= bx + bw + 0.5 && y >= by - 0.5 && y <= by + bh + 0.5
        };
        let on_border = |p: (f64, f64), b: (f64, f64, f64, f64)| {
            let (x, y) = p;
            let (bx, by, bw, bh) = b;
            within(p, b)
                && ((x - bx).abs() < 0.5
                    || (x - bx - bw).abs() < 0.5
                    || (y - by).abs() < 0.5
                    || (y - by - bh).abs() < 0.5)
        };
        let overlap = |a: (f64, f64, f64, f64), b: (f64, f64, f64, f64)| {
            a.0 < b.0 + b.2 && b.0 < a.0 + a.2 && a.1 < b.1 + b.3 && b.1 < a.1 + a.3
        };
        let labels: Vec<(f64, f64, f64, f64)> = layout
            .edges
            .iter()
            .filter_map(|e| e.label.as_ref())
            .map(|(x, y, text)| (*x, *y, label_width(text), LABEL_H))
            .collect();
        let name = &s.name;
        for (i, a) in labels.iter().enumerate() {
            for b in &labels[i + 1..] {
                assert!(!overlap(*a, *b), "{name}: labels {a:?} and {b:?} overlap");
            }
            for (n, b) in layout.nodes.iter().enumerate() {
                assert!(
                    !overlap(*a, *b),
                    "{name}: label {a:?} overlaps node {}",
                    s.nodes[n].id
                );
            }
        }
        for (i, a) in layout.nodes.iter().enumerate() {
            for b in &layout.nodes[i + 1..] {
                assert!(!overlap(*a, *b), "{name}: nodes {a:?} and {b:?} overlap");
            }
        }
        for e in &layout.edges {
            let from = layout.box_of(e.from).unwrap();
            let to = layout.box_of(Some(e.to)).unwrap();
            let end = e.segments.last().unwrap().end();
            assert!(
                on_border(e.start, from),
                "{name}: an edge to {} starts at {:?}, off its source {from:?}",
                s.nodes[e.to].id,
                e.start
            );
            assert!(
                on_border(end, to),
                "{name}: an edge to {} ends at {end:?}, off {to:?}",
                s.nodes[e.to].id
            );
        }
        assert!(layout.width > 0.0 && layout.height > 0.0);
    }

    #[test]
    fn every_example_is_laid_out_without_overlaps_and_edges_from_their_nodes() {
        let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut seen = 0;
        for entry in std::fs::read_dir(&examples).unwrap() {
            let file = entry.unwrap().path().join("scenario.toml");
            if !file.is_file() {
                continue;
            }
            let (s, _) = skillhost_scenario::parse_file(&file)
                .unwrap_or_else(|report| panic!("{}: {report}", file.display()));
            check_layout(&s);
            for child in s.subgraphs.values() {
                check_layout(child);
            }
            seen += 1;
        }
        assert!(seen >= 9, "only {seen} examples");
    }

    /// Loops to itself (several, labelled), two branches to the same
    /// node, an edge back over several layers, a failure handler nothing
    /// routes to, and one that a node routes to as well.
    const TANGLED: &str = r#"
[scenario]
name = "tangled"
on_failure = "handler"

[state]
n = { type = "integer" }

[[node]]
id = "a"
kind = "gate"
max_visits = 9
writes = [{ field = "n", from = "state.n + 1" }]

[[node]]
id = "b"
kind = "gate"
max_visits = 9

[[node]]
id = "c"
kind = "gate"
max_visits = 9

[[node]]
id = "d"
kind = "gate"
max_visits = 9

[[node]]
id = "handler"
kind = "gate"

[[node]]
id = "done"
kind = "end"

[[node]]
id = "failed"
kind = "fail"
message = "'no'"

[[edge]]
from = "a"
branches = [
  { when = "state.n < 1", to = "a" },
  { when = "state.n < 2", to = "a" },
  { when = "state.n < 3", to = "b" },
  { when = "state.n < 4", to = "b" },
  { else = "c" },
]

[[edge]]
from = "b"
branches = [{ when = "state.n > 5", to = "handler" }, { else = "d" }]

[[edge]]
from = "c"
to = "d"

[[edge]]
from = "d"
branches = [{ when = "state.n < 8", to = "a" }, { when = "state.n < 9", to = "c" }, { else = "done" }]

[[edge]]
from = "handler"
branches = [{ when = "state.n > 7", to = "failed" }, { else = "done" }]
"#;

    #[test]
    fn loops_parallel_and_backward_edges_keep_labels_apart() {
        let (s, _) = skillhost_scenario::parse_str(TANGLED, Path::new("/tmp/tangled.toml"))
            .unwrap_or_else(|report| panic!("{report}"));
        check_layout(&s);
        let (s, _) = skillhost_scenario::parse_str(LOOP, Path::new("/tmp/loop.toml")).unwrap();
        check_layout(&s);
        let svg = graph_svg(&s);
        assert!(
            svg.contains("data-from=\"count\" data-to=\"count\""),
            "{svg}"
        );
        // The start as its own failure handler: its entry above it.
        let text = LOOP.replace("[state]", "on_failure = \"count\"\n\n[state]");
        let (s, _) = skillhost_scenario::parse_str(&text, Path::new("/tmp/loop.toml")).unwrap();
        check_layout(&s);
        let layout = layout(&s).unwrap();
        assert!(layout.entry.unwrap().1 < layout.nodes[0].1);
    }

    /// A long chain whose every node loops back to the start would take
    /// a point per layer for each loop: it is not drawn, and says so.
    #[test]
    fn a_graph_too_large_is_not_drawn() {
        let mut text =
            String::from("[scenario]\nname = \"long\"\n\n[state]\nn = { type = \"integer\" }\n");
        let count = 200;
        for i in 0..count {
            text.push_str(&format!(
                "\n[[node]]\nid = \"n{i}\"\nkind = \"gate\"\nmax_visits = 2\n"
            ));
        }
        text.push_str("\n[[node]]\nid = \"done\"\nkind = \"end\"\n");
        for i in 0..count {
            let next = if i + 1 < count {
                format!("n{}", i + 1)
            } else {
                "done".into()
            };
            text.push_str(&format!(
                "\n[[edge]]\nfrom = \"n{i}\"\nbranches = [{{ when = \"state.n > 1\", to = \"n0\" }}, {{ else = \"{next}\" }}]\n"
            ));
        }
        let (s, _) = skillhost_scenario::parse_str(&text, Path::new("/tmp/long.toml"))
            .unwrap_or_else(|report| panic!("{report}"));
        let started = std::time::Instant::now();
        assert!(layout(&s).is_none());
        let svg = graph_svg(&s);
        assert!(svg.contains("too large a graph to draw here"), "{svg}");
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn fitting_in_order_keeps_the_gaps() {
        let placed = fit_in_order(&[10.0, 10.0, 10.0], &[4.0, 4.0]);
        assert_eq!(placed, vec![6.0, 10.0, 14.0]);
        let placed = fit_in_order(&[0.0, 100.0], &[4.0]);
        assert_eq!(placed, vec![0.0, 100.0]);
    }
}
