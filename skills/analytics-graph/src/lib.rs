//! `analytics-graph`: answers a `graph` sub-task from the granted graph file
//! (`graph.json`). Every edge of the sub-task's relation whose start node is
//! named by the sub-task's terms (by name, case-insensitive; no terms: every
//! node) becomes a figure: `Adelie lives-on Biscoe`, its weight in penguins,
//! and the file and edge as its origin.

skillhost_sdk::generate!(
    "analytics-graph",
    with: { "skillhost:analytics/types@0.1.0": generate },
);

use serde::Deserialize;
use skillhost::analytics::types::{Figure, Finding, Source};
use skillhost_sdk::{fs, log};

struct AnalyticsGraph;

/// The graph file, in the granted directory.
const GRAPH_FILE: &str = "graph.json";

#[derive(Deserialize)]
struct Graph {
    nodes: Vec<Node>,
    edges: Vec<Edge>,
}

#[derive(Deserialize)]
struct Node {
    id: String,
    name: String,
}

#[derive(Deserialize)]
struct Edge {
    from: String,
    to: String,
    relation: String,
    penguins: u32,
}

impl Guest for AnalyticsGraph {
    skillhost_sdk::manifest! {
        name: "Analytics graph",
        capabilities: ["log", "fs"],
        retry: never,
        estimated_duration_ms: 5,
    }

    fn run(input: Input) -> Result<Finding, SkillError> {
        let task = input.task;
        if !matches!(task.source, Source::Graph) {
            return Err(SkillError::invalid_input(format!(
                "sub-task `{}` is not a `graph` sub-task",
                task.id
            )));
        }
        let text = fs::read_text(GRAPH_FILE)?;
        let graph: Graph = serde_json::from_str(&text).map_err(|e| {
            SkillError::new(
                "invalid-graph",
                format!("`{GRAPH_FILE}` is not a graph of nodes and edges: {e}"),
            )
        })?;
        let figures = edges(&graph, &task.relation, &task.terms)?;
        log::info(format!(
            "`{}` attempt {}: {} `{}` edge(s)",
            task.id,
            task.attempt + 1,
            figures.len(),
            task.relation
        ));
        Ok(Finding {
            task_id: task.id,
            source: Source::Graph,
            attempt: task.attempt,
            figures,
            missing_groups: 0,
            passages: Vec::new(),
        })
    }
}

export!(AnalyticsGraph);

fn edges(graph: &Graph, relation: &str, terms: &[String]) -> Result<Vec<Figure>, SkillError> {
    let name = |id: &str| -> Result<&str, SkillError> {
        graph
            .nodes
            .iter()
            .find(|n| n.id == id)
            .map(|n| n.name.as_str())
            .ok_or_else(|| {
                SkillError::new(
                    "invalid-graph",
                    format!(
                        "`{GRAPH_FILE}`: an edge names node `{id}`, which is not among its nodes"
                    ),
                )
            })
    };
    let mut figures = Vec::new();
    for edge in graph.edges.iter().filter(|e| e.relation == relation) {
        let from = name(&edge.from)?;
        if !terms.is_empty() && !terms.iter().any(|t| t.eq_ignore_ascii_case(from)) {
            continue;
        }
        let to = name(&edge.to)?;
        figures.push(Figure {
            label: format!("{from} {relation} {to}"),
            value: format!("{} penguins", edge.penguins),
            support: edge.penguins,
            origin: format!(
                "graph: {GRAPH_FILE}, edge {} -{relation}-> {}",
                edge.from, edge.to
            ),
            quote: String::new(),
        });
    }
    Ok(figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRAPH: &str = r#"{"nodes": [
        {"id": "species:Adelie", "kind": "species", "name": "Adelie"},
        {"id": "species:Gentoo", "kind": "species", "name": "Gentoo"},
        {"id": "island:Biscoe", "kind": "island", "name": "Biscoe"}],
      "edges": [
        {"from": "species:Adelie", "to": "island:Biscoe", "relation": "lives-on", "penguins": 44},
        {"from": "species:Gentoo", "to": "island:Biscoe", "relation": "lives-on", "penguins": 124},
        {"from": "species:Gentoo", "to": "island:Nowhere", "relation": "sampled-in", "penguins": 1}]}"#;

    #[test]
    fn edges_of_a_relation_from_the_named_nodes() {
        let graph: Graph = serde_json::from_str(GRAPH).unwrap();
        let all = edges(&graph, "lives-on", &[]).unwrap();
        assert_eq!(all.len(), 2);
        let gentoo = edges(&graph, "lives-on", &["gentoo".to_string()]).unwrap();
        assert_eq!(gentoo[0].label, "Gentoo lives-on Biscoe");
        assert_eq!(gentoo[0].value, "124 penguins");
        assert_eq!(
            gentoo[0].origin,
            "graph: graph.json, edge species:Gentoo -lives-on-> island:Biscoe"
        );
        let err = edges(&graph, "sampled-in", &[]).unwrap_err();
        assert_eq!(err.code, "invalid-graph");
        assert!(err.message.contains("island:Nowhere"));
    }
}
