//! What MCP revision 2026-07-28 ("modern": stateless, no `initialize`)
//! adds to the wire: the per-request `_meta` keys, the error codes it
//! defines, and the request headers that mirror body fields.

use base64::Engine;
use serde_json::Value;

/// The modern revisions the gateway speaks, newest first.
pub const REVISIONS_2026_07_28: [&str; 1] = ["2026-07-28"];

/// The modern revision the gateway asks for.
pub const REVISION_2026_07_28: &str = REVISIONS_2026_07_28[0];

/// `_meta` key: the revision a request is in (required).
pub const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities for this request (required).
pub const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the client's name and version (optional).
pub const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
/// `_meta` key of a result: the server's name and version.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// `_meta` key of a notification on a `subscriptions/listen` stream: the
/// JSON-RPC id of the request that opened it.
pub const META_SUBSCRIPTION_ID: &str = "io.modelcontextprotocol/subscriptionId";

/// The `Mcp-Method` request header: the body's `method`.
pub const METHOD_HEADER: &str = "mcp-method";
/// The `Mcp-Name` request header: the body's `params.name` (or `params.uri`).
pub const NAME_HEADER: &str = "mcp-name";

/// The request headers disagree with the body, or one is missing.
pub const HEADER_MISMATCH: i64 = -32020;
/// The request needs a client capability the request did not declare.
pub const MISSING_REQUIRED_CLIENT_CAPABILITY: i64 = -32021;
/// The request's protocol version is not one the server speaks.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
/// 2025-11-25 only: a URL-mode elicitation must be completed first.
pub const URL_ELICITATION_REQUIRED: i64 = -32042;

/// What a 2026-07-28 client's `tools/call` carries that is meant for the
/// tool's server, which the gateway passes on to a 2026-07-28 upstream: the
/// client's capabilities (the server may need one, such as sampling or
/// elicitation) and, on a retry, its answers to the server's input requests.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Passthrough {
    /// `io.modelcontextprotocol/clientCapabilities`.
    pub capabilities: Value,
    /// `inputResponses` of a retry.
    pub input_responses: Option<Value>,
    /// `requestState` of a retry, opaque to the gateway.
    pub request_state: Option<Value>,
}

/// What a 2026-07-28 server asked of the client instead of answering: only
/// a client that sent a [`Passthrough`] is asked.
#[derive(Debug, Clone, PartialEq)]
pub enum ClientAsk {
    /// An `InputRequiredResult` (elicitation, sampling, roots), whole: the
    /// client answers it and retries the call.
    Input(Value),
    /// Error -32021: the `requiredCapabilities` the client did not declare.
    Capabilities(Value),
}

/// Whether `version` is a modern revision the gateway speaks.
pub fn is_2026_07_28_revision(version: &str) -> bool {
    REVISIONS_2026_07_28.contains(&version)
}

/// The field a request's `Mcp-Name` header mirrors: `params.name` for
/// `tools/call` and `prompts/get`, `params.uri` for `resources/read`.
pub fn name_field(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// The prefix and suffix of a Base64-encoded header value.
const SENTINEL: (&str, &str) = ("=?base64?", "?=");

/// A header value as the value it mirrors: whitespace around it dropped
/// (RFC 9110 §5.5) and the Base64 sentinel form (`=?base64?...?=`)
/// decoded. `None` when it is not UTF-8 or the Base64 does not decode.
pub fn decode_header_value(raw: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(raw.trim_ascii()).ok()?;
    match text.strip_prefix(SENTINEL.0).and_then(|rest| rest.strip_suffix(SENTINEL.1)) {
        Some(encoded) => {
            let bytes = base64::engine::general_purpose::STANDARD.decode(encoded).ok()?;
            String::from_utf8(bytes).ok()
        }
        None => Some(text.to_owned()),
    }
}

/// A value as a header value: as it is when it is plain visible ASCII
/// (spaces inside allowed) that does not look like the sentinel, else in
/// the Base64 sentinel form.
pub fn encode_header_value(value: &str) -> String {
    let plain = !value.is_empty()
        && value.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
        && !value.starts_with(' ')
        && !value.ends_with(' ')
        && (!value.starts_with(SENTINEL.0) || !value.ends_with(SENTINEL.1));
    if plain {
        return value.to_owned();
    }
    let encoded = base64::engine::general_purpose::STANDARD.encode(value.as_bytes());
    format!("{}{encoded}{}", SENTINEL.0, SENTINEL.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_values_are_trimmed_and_decoded() {
        assert_eq!(decode_header_value(b"  get_weather \t").as_deref(), Some("get_weather"));
        assert_eq!(decode_header_value(b"=?base64?SGVsbG8sIOS4lueVjA==?=").as_deref(), Some("Hello, 世界"));
        assert_eq!(decode_header_value(b"=?base64?not base64!?="), None);
        assert_eq!(decode_header_value(b"\xff"), None);
    }

    #[test]
    fn values_round_trip_through_headers() {
        for value in ["get_weather", "Hello, 世界", " padded ", "line1\nline2", "=?base64?literal?=", ""] {
            let header = encode_header_value(value);
            assert!(header.bytes().all(|b| b.is_ascii_graphic() || b == b' '), "{header:?}");
            assert_eq!(decode_header_value(header.as_bytes()).as_deref(), Some(value), "{value:?}");
        }
        assert_eq!(encode_header_value("us-west1"), "us-west1");
        assert_eq!(encode_header_value(" padded "), "=?base64?IHBhZGRlZCA=?=");
    }
}
