//! The store's integration tests: the suite that runs on both backends
//! (SQLite files and real Postgres servers), what a replay and an audit
//! read (`replay.rs`, on both too), the queue's flow control (`queue.rs`, on both), that a
//! refusal releases its locks before it returns (`refusals.rs`, on both), and what only SQLite has.

#[macro_use]
mod backends;
mod queue;
mod refusals;
mod replay;
mod sqlite;
mod waits;
