//! The store's integration tests: the suite that runs on both backends
//! (SQLite files and real Postgres servers), what a replay and an audit
//! read (`replay.rs`, on both too), the queue's flow control (`queue.rs`, on both), that a
//! refusal releases its locks before it returns (`refusals.rs`, on both), what only SQLite has,
//! and the store through two Postgres failovers under Patroni (`failover.rs`).

#[macro_use]
mod backends;
mod failover;
mod queue;
mod refusals;
mod replay;
mod sqlite;
mod waits;
