//! The Model Context Protocol: its messages, and the client the gateway
//! talks to MCP upstreams with. A building block: the MCP upstream
//! (`upstream/mcp.rs`) and the `/mcp` endpoint (`mcp_endpoint/`) both use
//! it, and it uses neither.
//!
//! Both directions speak the streamable HTTP transport of MCP revisions
//! 2025-11-25 (accepting 2025-06-18 and 2025-03-26: "legacy", with an
//! `initialize` handshake) and 2026-07-28 ("modern": stateless, every request
//! self-describing). One module per job:
//!
//! - [`jsonrpc`]: the JSON-RPC 2.0 messages MCP is framed in;
//! - [`modern`]: what 2026-07-28 adds (`_meta` keys, error codes, headers);
//! - [`sse`]: reading a `text/event-stream` reply;
//! - [`client`]: a streamable HTTP client for an MCP upstream of either era
//!   (the `server/discover` probe, sessions or per-request `_meta`,
//!   tools/list, tools/call, and the stream that announces tool list
//!   changes);
//! - [`param_headers`]: the `x-mcp-header` annotations of a tool's input
//!   schema, mirrored into `Mcp-Param-*` headers;
//! - [`mapping`]: MCP tools and results to OTC definitions and results.

pub mod client;
pub mod jsonrpc;
pub mod mapping;
pub mod param_headers;
pub mod sse;
pub mod v2026_07_28;

/// The legacy MCP revisions the gateway speaks, newest first.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The revision the gateway asks for, and answers with when a client asks
/// for one it does not know.
pub const LATEST_PROTOCOL_VERSION: &str = PROTOCOL_VERSIONS[0];

/// The session header of the streamable HTTP transport.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// The protocol version header sent on every request after initialize.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// Whether `version` is a legacy revision the gateway speaks.
pub fn is_supported_version(version: &str) -> bool {
    PROTOCOL_VERSIONS.contains(&version)
}
