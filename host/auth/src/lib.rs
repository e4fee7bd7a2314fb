//! Who may talk to the host's HTTP servers (`host serve`,
//! `host mcp --http`), checked before any handler sees a request.
//!
//! - Where a server may listen (`bind.rs`): a server bound to a loopback
//!   address trusts its machine; any other address needs a token.
//! - Which names it answers to (`origin.rs`): the `Host` must be one of
//!   its names and an `Origin`, when present, one of its pages', against
//!   DNS rebinding and requests from other sites.
//! - The token (`token.rs`): with one set, every request carries it, as
//!   `Authorization: Bearer TOKEN` (the scheme in any case) or, from the
//!   inspector's pages, in an `HttpOnly`, `SameSite=Strict` sign-in cookie
//!   holding its digest; compared in constant time.
//! - A body says it is JSON (`gate.rs`), so no form or `text/plain`
//!   request of another site is read as one.
//!
//! `gate.rs` puts them in that order; `refusal.rs` is how each server says
//! no: `{"error": "…"}`, or for a JSON-RPC endpoint (MCP) a JSON-RPC error.
//!
//! Must not: let a server start on a non-loopback address without a
//! token, or say anything about the token in an error beyond that it is
//! missing or wrong.

mod bind;
mod gate;
mod origin;
mod refusal;
mod token;

pub use bind::{BindError, check_bind, read_token_file};
pub use gate::{Gate, guard, is_json};
pub use origin::AllowedHosts;
pub use refusal::{INVALID_REQUEST, Refusal, Shape, UNAUTHORIZED};
pub use token::{TokenGuard, bearer};
