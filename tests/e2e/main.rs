//! End to end: the real `host` binary, as a user runs it, on real SQLite
//! files and real Postgres servers. One test binary, one module per area.

mod analytics;
mod approval;
mod approval_example;
mod authoring;
mod cache;
mod chat;
mod check;
mod cli_skill;
mod crash;
mod engine;
mod http;
mod kv;
mod layout;
mod llm;
mod mcp;
mod metrics;
mod polyglot;
mod ppt;
mod progress;
mod queue;
mod registry;
mod replay;
mod research;
mod research_llm;
mod router;
mod scripts;
mod serve;
mod skill_new;
mod subgraph;
mod subgraph_depth;
mod summary;
mod task;
mod terminal;
mod traces;
mod workers;
