//! Every JSON-RPC error `/mcp` answers with, and the one place each becomes
//! an HTTP status and a body ([`RpcError::reply`]).

use serde_json::{json, Value};

use super::era::Era;
use crate::mcp::jsonrpc::{
    ErrorObject, OutgoingResponse, INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
};
use crate::mcp::v2026_07_28::{
    HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, UNSUPPORTED_PROTOCOL_VERSION, URL_ELICITATION_REQUIRED,
};
use crate::reply::Reply;

/// Too many event streams open (the gateway's own code: outside the
/// JSON-RPC reserved range, as MCP asks of codes it does not define).
pub(crate) const TOO_MANY_STREAMS: i64 = -31001;

/// Why a request to `/mcp` gets a JSON-RPC error instead of a result.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum RpcError {
    /// The body is not JSON (or nested too deep).
    #[error("Parse error: {0}")]
    Parse(String),
    /// JSON that is not one JSON-RPC request or notification.
    #[error("Invalid request: {0}")]
    InvalidRequest(String),
    /// A modern request whose `_meta` lacks what every request must carry.
    #[error("Invalid params: {0}")]
    InvalidEnvelope(String),
    /// Parameters the method cannot take: an unknown tool, a bad cursor.
    #[error("{0}")]
    InvalidParams(String),
    /// A method the gateway does not serve (in this era).
    #[error("Method not found: {0}")]
    MethodNotFound(String),
    /// `MCP-Protocol-Version`, `Mcp-Method` or `Mcp-Name` missing, or not
    /// what the body says.
    #[error("Header mismatch: {0}")]
    HeaderMismatch(String),
    /// A protocol version the gateway does not speak.
    #[error("Unsupported protocol version: {requested}")]
    UnsupportedVersion {
        /// The version asked for.
        requested: String,
    },
    /// The request needs a client capability it did not declare.
    #[error("Missing required client capability")]
    MissingCapability {
        /// The capabilities needed, as a `ClientCapabilities` object.
        required: Value,
    },
    /// 2025-11-25: the caller must complete these URL-mode elicitations
    /// (an authorization flow) before the call can run.
    #[error("{message}")]
    UrlElicitationRequired {
        /// What the user is asked to do.
        message: String,
        /// The `ElicitRequestURLParams` objects, each with its `elicitationId`.
        elicitations: Vec<Value>,
    },
    /// The caller, or the gateway, has as many event streams open as it
    /// may.
    #[error("Too many open event streams: at most {limit}")]
    TooManyStreams {
        /// The limit reached.
        limit: usize,
    },
    /// An event stream asked for on a connection that cannot carry one.
    #[error("Internal error: no event stream can be served on this connection")]
    StreamUnavailable,
}

impl RpcError {
    /// The response to the request with this `id` (`Null` when it could not
    /// be read), in the request's era.
    pub(crate) fn reply(&self, id: Value, era: Era) -> Reply {
        let (status, code, data) = match self {
            RpcError::Parse(_) => (400, PARSE_ERROR, None),
            RpcError::InvalidRequest(_) => (400, INVALID_REQUEST, None),
            RpcError::InvalidEnvelope(_) => (400, INVALID_PARAMS, None),
            RpcError::InvalidParams(_) => (200, INVALID_PARAMS, None),
            // 2026-07-28 tells "no such method" from "no MCP here" by a 404
            // carrying a JSON-RPC error; before it, errors rode a 200.
            RpcError::MethodNotFound(_) => (if era == Era::R2026_07_28 { 404 } else { 200 }, METHOD_NOT_FOUND, None),
            RpcError::HeaderMismatch(_) => (400, HEADER_MISMATCH, None),
            RpcError::UnsupportedVersion { requested } => (
                400,
                UNSUPPORTED_PROTOCOL_VERSION,
                Some(json!({"supported": super::supported_versions(), "requested": requested})),
            ),
            RpcError::MissingCapability { required } => {
                (400, MISSING_REQUIRED_CLIENT_CAPABILITY, Some(json!({"requiredCapabilities": required})))
            }
            RpcError::UrlElicitationRequired { elicitations, .. } => {
                (200, URL_ELICITATION_REQUIRED, Some(json!({"elicitations": elicitations})))
            }
            RpcError::TooManyStreams { .. } => (429, TOO_MANY_STREAMS, None),
            RpcError::StreamUnavailable => (500, INTERNAL_ERROR, None),
        };
        let response = OutgoingResponse {
            error: Some(ErrorObject { code, message: self.to_string(), data }),
            ..OutgoingResponse::error(id, code, String::new())
        };
        Reply::json(status, response.to_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(error: &RpcError, era: Era) -> (u16, Value) {
        let reply = error.reply(json!(7), era);
        (reply.status, serde_json::from_slice(&reply.body).expect("json"))
    }

    #[test]
    fn each_error_has_its_status_and_code() {
        let (status, body) = parts(&RpcError::MethodNotFound("ping".into()), Era::R2026_07_28);
        assert_eq!((status, &body["error"]["code"], &body["id"]), (404, &json!(-32601), &json!(7)));
        let (status, _) = parts(&RpcError::MethodNotFound("x".into()), Era::R2025_11_25);
        assert_eq!(status, 200);
        let (status, body) = parts(&RpcError::UnsupportedVersion { requested: "v9".into() }, Era::R2026_07_28);
        assert_eq!(status, 400);
        assert_eq!(body["error"]["data"]["requested"], "v9");
        assert!(body["error"]["data"]["supported"].as_array().is_some_and(|v| v.contains(&json!("2026-07-28"))));
        let (status, body) =
            parts(&RpcError::MissingCapability { required: json!({"sampling": {}}) }, Era::R2026_07_28);
        assert_eq!((status, &body["error"]["code"]), (400, &json!(-32021)));
        assert_eq!(body["error"]["data"]["requiredCapabilities"], json!({"sampling": {}}));
        let (status, body) = parts(&RpcError::HeaderMismatch("x".into()), Era::R2026_07_28);
        assert_eq!((status, &body["error"]["code"]), (400, &json!(-32020)));
        let (status, body) = parts(&RpcError::InvalidEnvelope("x".into()), Era::R2026_07_28);
        assert_eq!((status, &body["error"]["code"]), (400, &json!(-32602)));
    }
}
