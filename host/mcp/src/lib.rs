//! `host mcp`: a Model Context Protocol server (the official Rust SDK,
//! `rmcp`) over stdio or streamable HTTP that offers scenarios and skill
//! components as MCP tools.
//!
//! This crate owns the mapping between MCP and the host's library: which
//! tools exist and their schemas and annotations (`tools.rs`, the hints
//! from grants in `hints.rs`), what a call does (a scenario: a real
//! checkpointed run through the engine on the given store; a skill: one
//! call of a fresh instance with the command line's grants), how results
//! and failures are reported (`structuredContent` plus the same JSON as
//! text; `isError` naming the node or field), and the artifacts of the runs
//! it started as resources. A scenario it was given that cannot run here
//! is no tool: the server's instructions say why, and so does the error
//! of a call by its name. It must not parse command lines, open
//! databases or load scenarios itself (the `host` binary does, as for every
//! command), nor keep any state of a run outside the store: a run id it
//! hands out works with `host runs show` and `host runs answer` too.

pub mod bench;
mod compose;
mod follow;
mod handler;
mod hints;
mod tasks;
mod tools;

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::transport::streamable_http_server::{
    StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
};
use skillhost_auth::{AllowedHosts, Gate, Shape, TokenGuard};
use skillhost_runtime::{Grants, Limits, Skill};
use skillhost_scenario::LoadedScenario;
use skillhost_store::Store;

pub use compose::ComposeOffer;
pub use handler::SkillhostMcp;
pub use hints::Hints;

/// A skill offered as a tool, with what each of its calls is granted.
pub struct SkillTool {
    pub skill: Arc<Skill>,
    pub grants: Arc<Grants>,
    pub limits: Limits,
}

/// A scenario the server was given that cannot run on this host (it does
/// not load, or does not pass the checker here): no tool is offered for it;
/// the server's instructions name it with `reason`, and a call of its name
/// is refused with the reason.
#[derive(Debug, Clone)]
pub struct Unavailable {
    pub name: String,
    /// The loader's or checker's report.
    pub reason: String,
}

/// What the server offers: each scenario and each skill is one tool.
pub struct Offer {
    pub scenarios: Vec<Arc<LoadedScenario>>,
    /// The scenarios given that cannot run here: not offered, said why.
    pub unavailable: Vec<Unavailable>,
    pub skills: Vec<SkillTool>,
    /// How long the lease of a task's run lives without a renewal (None:
    /// the engine's default, 30 s): after its server died, a worker takes
    /// the run over once it expired (`--lease-ttl`).
    pub lease_ttl: Option<std::time::Duration>,
    /// Where runs are checkpointed (`--database`, else the default SQLite).
    pub store: Store,
    /// The compose tool and what bounds it (`--compose-ceiling`); `None`:
    /// no tool composes.
    pub compose: Option<ComposeOffer>,
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// Two tools would have the same name, or a name MCP does not allow.
    #[error("{0}")]
    Tools(String),
    #[error("the MCP session over stdio failed: {0}")]
    Stdio(String),
    /// A non-loopback address without a token, or an empty token.
    #[error("{0}")]
    Auth(String),
    #[error("cannot listen on {addr}: {message}")]
    Bind { addr: String, message: String },
    #[error("the MCP HTTP server failed: {0}")]
    Http(String),
}

/// Serves `offer` over stdin/stdout until the client closes the stream.
/// MCP tasks are answered in front of the SDK, as over HTTP (`tasks/`).
pub async fn serve_stdio(offer: Offer) -> Result<(), McpError> {
    tasks::serve_stdio(SkillhostMcp::new(offer)?).await
}

/// Where `host mcp --http` listens, and who may ask it.
pub struct HttpAccess {
    pub addr: SocketAddr,
    /// Required of every request, when set.
    pub token: Option<String>,
    /// Names besides the loopback ones clients reach the server by
    /// (`--allowed-host`): the `Host` and `Origin` it accepts.
    pub allowed_hosts: Vec<String>,
    /// No sessions (`--stateless`): every POST stands alone and may reach
    /// any of several servers on one store behind a round-robin proxy
    /// (`tasks/`; docs/mcp.md says what is lost).
    pub stateless: bool,
}

/// Serves `offer` as streamable HTTP at `http://ADDR/mcp` until `shutdown`
/// resolves; `bound` is told the address actually bound (port 0 picks one).
/// Every request passes `skillhost-auth`'s gate first: its `Host` one of
/// the server's names and its `Origin`, if any, one of theirs (the MCP
/// specification requires both of a server on loopback, against DNS
/// rebinding and other sites' pages), the token when there is one (else
/// 401), and a POST's body sent as `application/json` (else 415); every
/// refusal a JSON-RPC error. Without a token, a non-loopback `addr` is
/// refused ([`skillhost_auth::check_bind`]).
pub async fn serve_http(
    offer: Offer,
    access: HttpAccess,
    bound: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), McpError> {
    let HttpAccess {
        addr,
        token,
        allowed_hosts,
        stateless,
    } = access;
    skillhost_auth::check_bind("--http", addr, token.as_deref())
        .map_err(|e| McpError::Auth(e.to_string()))?;
    let server = SkillhostMcp::new(offer)?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| McpError::Bind {
            addr: addr.to_string(),
            message: e.to_string(),
        })?;
    let local = listener.local_addr().map_err(|e| McpError::Bind {
        addr: addr.to_string(),
        message: e.to_string(),
    })?;
    let hosts = AllowedHosts::new(local, &allowed_hosts).map_err(McpError::Auth)?;
    // The SDK checks `Host` too, behind the gate; it is given the same
    // names, so it never refuses what the gate let through.
    let mut config = StreamableHttpServerConfig::default().with_allowed_hosts(hosts.authorities());
    config.legacy_session_mode = !stateless;
    let gate = Gate::new(hosts, token.map(TokenGuard::new), Shape::JsonRpc);
    let tasks = tasks::HttpTasks {
        server: server.clone(),
        stateless,
    };
    let service: StreamableHttpService<SkillhostMcp, LocalSessionManager> =
        StreamableHttpService::new(move || Ok(server.for_session()), Default::default(), config);
    // Layers wrap what is above them: the gate first, then the task
    // requests are answered (and a body that is not JSON-RPC refused),
    // then the SDK's service has the rest.
    let router = axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(
            tasks,
            tasks::intercept,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(gate),
            skillhost_auth::guard,
        ));
    bound(local);
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|e| McpError::Http(e.to_string()))
}
