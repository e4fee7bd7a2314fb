//! The runtime's integration tests: loading components (the cache, bad
//! components, the contract), holding every limit against hostile ones, and
//! the capabilities' backends and journal through a real component.

mod async_abi;
mod budgets;
mod cache;
mod capabilities;
mod http;
mod http_stream;
mod limits;
mod llm;
mod llm_stream;
mod load;
mod wasi;
