//! The Model Context Protocol: its messages, and the client the gateway
//! talks to MCP upstreams with. A building block: the MCP upstream
//! (`upstream/mcp.rs`) and the `/mcp` endpoint (`mcp_endpoint.rs`) both use
//! it, and it uses neither.
//!
//! Both directions speak the streamable HTTP transport. The `/mcp` front
//! speaks MCP revision 2025-11-25 (and accepts 2025-06-18 and 2025-03-26);
//! the client speaks 2026-07-28 to servers that do, and falls back to those
//! revisions' `initialize` handshake for servers that do not. One module per
//! job:
//!
//! - [`jsonrpc`]: the JSON-RPC 2.0 messages MCP is framed in;
//! - [`sse`]: reading a `text/event-stream` reply;
//! - [`client`]: a streamable HTTP client for an MCP upstream (the probe,
//!   sessions or per-request metadata, tools/list, tools/call, and the stream
//!   that announces tool list changes);
//! - [`param_headers`]: the `x-mcp-header` annotations of a tool's input
//!   schema, mirrored into `Mcp-Param-*` headers;
//! - [`mapping`]: MCP tools and results to OTC definitions and results.

use base64::Engine as _;

pub mod client;
pub mod jsonrpc;
pub mod mapping;
pub mod param_headers;
pub mod sse;

/// The MCP revisions with the `initialize` handshake the gateway speaks,
/// newest first.
pub const PROTOCOL_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The revision the gateway asks for, and answers with when a client asks
/// for one it does not know.
pub const LATEST_PROTOCOL_VERSION: &str = PROTOCOL_VERSIONS[0];

/// The session header of the streamable HTTP transport.
pub const SESSION_HEADER: &str = "mcp-session-id";

/// The protocol version header sent on every request after initialize.
pub const PROTOCOL_VERSION_HEADER: &str = "mcp-protocol-version";

/// Whether `version` is one the gateway speaks.
pub fn is_supported_version(version: &str) -> bool {
    PROTOCOL_VERSIONS.contains(&version)
}

// --- MCP 2026-07-28: no handshake, no session; every request says who and
// what it is in `params._meta` and in headers.

/// The stateless revision: no `initialize`, no session; version, client
/// capabilities and client info in every request's `params._meta`.
pub const MODERN_PROTOCOL_VERSION: &str = "2026-07-28";

/// `_meta` key: the request's protocol version (required).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities for the request (required).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's name and version (should be sent).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of a result: the server's name and version.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// Header mirroring the JSON-RPC `method` of every POST (2026-07-28).
pub const METHOD_HEADER: &str = "mcp-method";
/// Header mirroring `params.name` (`tools/call`, `prompts/get`) or
/// `params.uri` (`resources/read`), encoded by [`encode_header_value`].
pub const NAME_HEADER: &str = "mcp-name";
/// Prefix of the headers mirroring `x-mcp-header` tool parameters
/// ([`param_headers`]).
pub const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// A value as an `Mcp-Name` or `Mcp-Param-*` header: as is when it is plain
/// printable ASCII without leading or trailing whitespace, else (and when it
/// looks like the sentinel itself) `=?base64?<UTF-8 bytes, base64>?=`.
pub fn encode_header_value(value: &str) -> String {
    let plain = value.bytes().all(|b| (0x20..=0x7e).contains(&b))
        && value.trim_matches(|c: char| c.is_ascii_whitespace()) == value
        && !is_base64_sentinel(value);
    if plain {
        return value.to_owned();
    }
    format!("=?base64?{}?=", base64::engine::general_purpose::STANDARD.encode(value))
}

/// The value an [`encode_header_value`] header carries; `None` for a
/// sentinel whose payload is not canonical base64 of UTF-8, so a corrupt
/// header never matches a body value.
// For a server's check of `Mcp-Name` against the body (the `/mcp` front).
#[allow(dead_code)]
pub fn decode_header_value(header: &str) -> Option<String> {
    if !is_base64_sentinel(header) {
        return Some(header.to_owned());
    }
    let payload = &header["=?base64?".len()..header.len() - "?=".len()];
    let bytes = base64::engine::general_purpose::STANDARD.decode(payload).ok()?;
    // Canonical only: the encoder never sets the trailing bits.
    if base64::engine::general_purpose::STANDARD.encode(&bytes) != payload {
        return None;
    }
    String::from_utf8(bytes).ok()
}

fn is_base64_sentinel(value: &str) -> bool {
    value.len() >= "=?base64??=".len() && value.starts_with("=?base64?") && value.ends_with("?=")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_plain_or_base64_as_the_spec_shows() {
        // The examples of the streamable HTTP transport, 2026-07-28.
        for (value, header) in [
            ("us-west1", "us-west1"),
            ("Hello, 世界", "=?base64?SGVsbG8sIOS4lueVjA==?="),
            (" padded ", "=?base64?IHBhZGRlZCA=?="),
            ("line1\nline2", "=?base64?bGluZTEKbGluZTI=?="),
            ("=?base64?literal?=", "=?base64?PT9iYXNlNjQ/bGl0ZXJhbD89?="),
        ] {
            assert_eq!(encode_header_value(value), header, "{value:?}");
            assert_eq!(decode_header_value(header).as_deref(), Some(value), "{header}");
        }
        assert_eq!(encode_header_value("météo"), "=?base64?bcOpdMOpbw==?=");
        assert_eq!(decode_header_value("=?base64?not base64?="), None);
        assert_eq!(decode_header_value("=?base64?//8=?="), None, "not UTF-8");
        assert_eq!(decode_header_value("=?base64?bcOpdMOpbx==?="), None, "not canonical");
        assert_eq!(decode_header_value("=?base64?="), Some("=?base64?=".into()), "too short for a sentinel");
    }
}
