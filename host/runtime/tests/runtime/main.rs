//! The runtime's integration tests: loading components (the cache, bad
//! components, the contract) and holding every limit against hostile ones.

mod limits;
mod load;
