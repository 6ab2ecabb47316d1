//! A streamable HTTP client for one MCP upstream, of either era.
//!
//! **The era** is found once per upstream and kept (a [`Channel`]). The first
//! request probes with `server/discover` in MCP 2026-07-28:
//!
//! - a result naming 2026-07-28 makes the channel stateless: no session; every
//!   request carries `params._meta` (the protocol version, the gateway's
//!   client capabilities, which are none, and its client info) and the
//!   headers `MCP-Protocol-Version`, `Mcp-Method` and, on `tools/call`,
//!   `Mcp-Name` and the tool's `Mcp-Param-*` ([`super::param_headers`]);
//! - `UnsupportedProtocolVersion` (-32022) lists the versions the server
//!   speaks: the newest the gateway speaks with a handshake is asked for in
//!   `initialize`;
//! - anything else (a 4xx without a 2026-07-28 error, a result without a
//!   version the gateway speaks) is a server of 2025-11-25 or before:
//!   `initialize`, `notifications/initialized`, and every later request
//!   carries `Mcp-Session-Id` (when the server gave one) and
//!   `MCP-Protocol-Version`.
//!
//! When the kept link stops fitting, it is dropped, the server probed again
//! and the request sent once more (the server did not process it): 404 to a
//! session id (the session is gone), a modern request refused with -32022 or
//! with a 400, 404 or 405 that is no JSON-RPC answer to it (the server was
//! replaced, say by one of the other era), a 400 in a session.
//!
//! A reply is either one JSON object or an event stream. On a stream, empty
//! priming events are skipped, notifications are skipped until the response
//! with the request's id, and in a session `ping` requests are answered and
//! other server requests refused (the gateway offers no client
//! capabilities); 2026-07-28 servers send no requests.
//!
//! Every exchange is bounded by a deadline and a byte limit; connections come
//! from a hyper-util pool, as for OTC upstreams.
//!
//! Here: the client and its requests. `channel.rs`: the probe, `initialize`
//! and the channel kept; `transport.rs`: one HTTP exchange and its answer;
//! `changes.rs`: the stream that announces tool list changes.

mod changes;
mod channel;
mod transport;

use channel::{client_info, unsupported};
use transport::{credential, is_event_stream, read_limited, serialise, snippet, without_sent, Posted};

pub use changes::{ToolListEvent, WatchEnd, WatchSettings};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, ArcSwapOption};
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderMap, HeaderName, HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::jsonrpc::{ErrorObject, Message, OutgoingRequest, OutgoingResponse, METHOD_NOT_FOUND};
use super::param_headers::{self, ParamHeader};
use super::sse::{Event, SseParser};
use super::v2026_07_28::{
    encode_header_value, is_2026_07_28_revision, Passthrough, HEADER_MISMATCH, META_CLIENT_CAPABILITIES,
    META_CLIENT_INFO, META_PROTOCOL_VERSION, META_SERVER_INFO, METHOD_HEADER, MISSING_REQUIRED_CLIENT_CAPABILITY,
    NAME_HEADER, REVISION_2026_07_28, UNSUPPORTED_PROTOCOL_VERSION,
};
use super::{is_supported_version, PROTOCOL_VERSIONS, PROTOCOL_VERSION_HEADER, SESSION_HEADER};
use crate::circuit::Circuit;
use crate::http_client::error_chain;
use crate::scrub;

/// The most pages of `tools/list` read: a server whose cursors never end
/// must not keep a poller busy forever.
const MAX_PAGES: usize = 1000;

/// How long a best-effort message (a cancellation, a ping answer) may take.
const SIDE_MESSAGE_TIMEOUT: Duration = Duration::from_secs(2);

/// The most of an error answer's body read.
const ERROR_BODY_LIMIT: usize = 64 * 1024;

/// Why an MCP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// No connection could be made: nothing was sent.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The server's era could not be found, or no session opened
    /// (`server/discover`, `initialize`), so the request itself was never
    /// sent.
    #[error("opening the MCP connection failed: {0}")]
    Initialize(Box<McpError>),
    /// No complete answer before the deadline.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The connection broke, or the event stream ended, before the response.
    #[error("the connection broke: {0}")]
    Broken(String),
    /// An HTTP error status.
    #[error("answered HTTP {status}: {body}")]
    Status {
        /// The status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// An HTTP error status with a JSON-RPC error as its body (how a
    /// 2026-07-28 server refuses a request).
    #[error("answered HTTP {status} with JSON-RPC error {}: {}", .error.code, .error.message)]
    Refused {
        /// The status.
        status: u16,
        /// The id the error names (`null` when the server could not read it).
        id: Value,
        /// The error.
        error: ErrorObject,
    },
    /// Over the byte limit.
    #[error("answered with more than {0} bytes")]
    TooLarge(usize),
    /// Something that is not the JSON-RPC answer expected.
    #[error("{0}")]
    Protocol(String),
    /// The server answered with a JSON-RPC error.
    #[error("JSON-RPC error {}: {}", .0.code, .0.message)]
    Rpc(ErrorObject),
    /// 404 to a request carrying a session id: the session is gone.
    #[error("the MCP session expired (HTTP 404)")]
    SessionExpired,
    /// The server no longer answers in the era the gateway knew it by (it
    /// was replaced, or changed revisions); it did not process the request.
    #[error("{0}")]
    Stale(String),
}

/// What bounds one exchange, and what it carries.
#[derive(Debug, Clone, Copy)]
pub struct Exchange<'a> {
    /// The whole exchange (the probe and session setup included) must end
    /// within this.
    pub timeout: Duration,
    /// The largest answer accepted.
    pub max_bytes: usize,
    /// Sent as `Authorization`.
    pub authorization: Option<&'a HeaderValue>,
    /// Told of connection failures and successes.
    pub circuit: Option<&'a Circuit>,
    /// A 2026-07-28 client's capabilities and input responses, for a
    /// 2026-07-28 server (a 2025-11-25 session never sees them).
    pub passthrough: Option<&'a Passthrough>,
    /// The gateway's client span of the call, when it is recorded: sent as
    /// `traceparent`, and the parent of a discovery made for the call.
    pub span: Option<&'a crate::otel::Span>,
}

/// How the gateway talks to the server: what the probe found.
#[derive(Debug)]
enum Channel {
    /// MCP 2026-07-28: no session, the version on every request.
    R2026_07_28(Stateless),
    /// 2025-11-25 or before: an initialized session.
    R2025_11_25(Session),
}

/// A server of MCP 2026-07-28.
#[derive(Debug)]
struct Stateless {
    /// `MCP-Protocol-Version`, and `_meta`'s protocol version.
    version: HeaderValue,
    /// Its `server/discover` said `capabilities.tools.listChanged`.
    tools_list_changed: bool,
}

/// An open MCP session (2025-11-25 and before).
#[derive(Debug)]
struct Session {
    /// `Mcp-Session-Id`, when the server assigned one.
    id: Option<HeaderValue>,
    /// The negotiated revision, for `MCP-Protocol-Version`.
    protocol_version: HeaderValue,
    /// Its `initialize` result said `capabilities.tools.listChanged`.
    tools_list_changed: bool,
}

impl Session {
    /// The headers of every request in the session.
    fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(id) = &self.id {
            headers.insert(SESSION_HEADER, id.clone());
        }
        headers.insert(PROTOCOL_VERSION_HEADER, self.protocol_version.clone());
        headers
    }
}

/// A streamable HTTP client for one MCP endpoint.
pub struct McpClient {
    endpoint: Uri,
    http: Client<HttpConnector, Full<Bytes>>,
    /// How the server is spoken to: one atomic load on the hot path.
    link: ArcSwapOption<Channel>,
    /// Counts links made and dropped, for the change stream to wait on.
    relinked: tokio::sync::watch::Sender<u64>,
    /// Held across the probe and `initialize` so that concurrent first calls
    /// open one link, not one each.
    opening: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
    /// Each tool's `Mcp-Param-*` parameters, by MCP name, from the last
    /// `tools/list`.
    param_headers: ArcSwap<HashMap<String, Arc<[ParamHeader]>>>,
}

impl std::fmt::Debug for McpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpClient").field("endpoint", &self.endpoint).finish_non_exhaustive()
    }
}

impl McpClient {
    /// A client for the MCP endpoint at `endpoint` (the full URL, path
    /// included, e.g. `http://127.0.0.1:8000/mcp`).
    pub fn new(endpoint: Uri, connect_timeout: Duration) -> McpClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let http = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(256)
            .build(connector);
        McpClient {
            endpoint,
            http,
            link: ArcSwapOption::empty(),
            relinked: tokio::sync::watch::Sender::new(0),
            opening: tokio::sync::Mutex::new(()),
            next_id: AtomicU64::new(1),
            param_headers: ArcSwap::default(),
        }
    }

    /// The revision the server is spoken to in, once known.
    pub fn protocol_version(&self) -> Option<String> {
        let link = self.link.load();
        let version = match link.as_deref()? {
            Channel::R2026_07_28(stateless) => &stateless.version,
            Channel::R2025_11_25(session) => &session.protocol_version,
        };
        version.to_str().ok().map(str::to_owned)
    }

    /// `tools/list`, every page: the raw MCP `Tool` objects in server order.
    /// (A 2026-07-28 result's `ttlMs` is not read: the poller's interval
    /// and the change stream decide when to list again.)
    pub async fn list_tools(&self, exchange: Exchange<'_>) -> Result<Vec<Value>, McpError> {
        let deadline = Instant::now() + exchange.timeout;
        let mut tools = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let result = self.request("tools/list", &params, exchange, deadline).await?;
            if let Some(kind) = result_type(&result).filter(|kind| *kind != "complete") {
                return Err(McpError::Protocol(format!(
                    "tools/list answered with resultType {kind:?}; the gateway can only take a complete list"
                )));
            }
            match result.get("tools") {
                Some(Value::Array(page)) => tools.extend(page.iter().cloned()),
                _ => return Err(McpError::Protocol("the tools/list result has no `tools` array".into())),
            }
            match result.get("nextCursor") {
                Some(Value::String(next)) if !next.is_empty() => {
                    if cursor.as_deref() == Some(next.as_str()) {
                        return Err(McpError::Protocol("tools/list returned the same cursor twice".into()));
                    }
                    cursor = Some(next.clone());
                }
                _ => {
                    self.remember_param_headers(&tools);
                    return Ok(tools);
                }
            }
        }
        Err(McpError::Protocol(format!("tools/list has more than {MAX_PAGES} pages")))
    }

    /// `tools/call`: the raw `CallToolResult` (or a 2026-07-28
    /// `InputRequiredResult`: see `resultType`). A timeout after the request
    /// went out cancels it: `notifications/cancelled` in a session (best
    /// effort); in 2026-07-28 the connection is closed, which is the signal.
    pub async fn call_tool(&self, name: &str, arguments: &Value, exchange: Exchange<'_>) -> Result<Value, McpError> {
        let deadline = Instant::now() + exchange.timeout;
        let params = json!({"name": name, "arguments": arguments});
        self.request("tools/call", &params, exchange, deadline).await
    }

    /// Keeps the `Mcp-Param-*` declarations of the tools listed, for their calls.
    fn remember_param_headers(&self, tools: &[Value]) {
        let mut map = HashMap::new();
        for tool in tools {
            let (Some(name), Some(schema)) = (tool.get("name").and_then(Value::as_str), tool.get("inputSchema")) else {
                continue;
            };
            // A tool whose annotations are invalid is left out of the catalog
            // (mapping.rs), so it is never called.
            if let Ok(declared) = param_headers::declared(schema) {
                if !declared.is_empty() {
                    map.insert(name.to_owned(), Arc::from(declared));
                }
            }
        }
        self.param_headers.store(Arc::new(map));
    }

    /// Sends one request over the current link (opening one if needed) and
    /// waits for its response; returns its result.
    async fn request(
        &self,
        method: &str,
        params: &Value,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Value, McpError> {
        for attempt in 0..2 {
            let link = self.link(exchange, deadline).await.map_err(|e| McpError::Initialize(Box::new(e)))?;
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let outcome = match &*link {
                Channel::R2026_07_28(stateless) => {
                    self.request_2026_07_28(stateless, id, method, params, exchange, deadline).await
                }
                Channel::R2025_11_25(session) => {
                    self.session_request(session, id, method, params, exchange, deadline).await
                }
            };
            match outcome {
                Err(McpError::SessionExpired) if attempt == 0 => {
                    tracing::info!(endpoint = %self.endpoint, "MCP session expired; opening a new one");
                    self.forget(&link);
                }
                Err(McpError::Stale(reason)) if attempt == 0 => {
                    tracing::info!(endpoint = %self.endpoint, reason, "the MCP server no longer answers as it did; probing it again");
                    self.forget(&link);
                }
                Err(e @ (McpError::SessionExpired | McpError::Stale(_))) => {
                    return Err(McpError::Initialize(Box::new(McpError::Protocol(format!(
                        "refused again on a new connection: {e}"
                    )))))
                }
                Err(e @ McpError::Timeout(_)) => {
                    if let Channel::R2025_11_25(session) = &*link {
                        self.cancel(session, id, exchange.authorization);
                    }
                    return Err(e);
                }
                outcome => return outcome,
            }
        }
        Err(McpError::Protocol("unreachable: the retry loop ended".into()))
    }

    /// One request in a session.
    async fn session_request(
        &self,
        session: &Session,
        id: u64,
        method: &str,
        params: &Value,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Value, McpError> {
        let headers = session.headers();
        let body = serialise(&OutgoingRequest::request(id, method, Some(params)));
        let posted = match self.post(&headers, Some(&headers), body, Some(id), exchange, deadline).await {
            Ok(posted) => posted,
            // A session's errors come with 200; a 400 says the server no longer
            // knows the session's terms (a 2026-07-28 server in its place).
            Err(McpError::Refused { status: 400, error, .. }) => {
                return Err(McpError::Stale(format!("answered HTTP 400 in a session: {}", error.message)))
            }
            Err(McpError::Status { status: 400, body }) => {
                return Err(McpError::Stale(format!("answered HTTP 400 in a session: {body}")))
            }
            Err(McpError::Refused { status, error, .. }) => {
                return Err(McpError::Status {
                    status,
                    body: format!("JSON-RPC error {}: {}", error.code, error.message),
                })
            }
            Err(e) => return Err(e),
        };
        match posted.message {
            Some(Message::Response { result, .. }) => Ok(result),
            Some(Message::Error { error, .. }) => Err(McpError::Rpc(error)),
            _ => Err(McpError::Protocol(format!("no response to {method}"))),
        }
    }

    /// One 2026-07-28 request.
    async fn request_2026_07_28(
        &self,
        stateless: &Stateless,
        id: u64,
        method: &str,
        params: &Value,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Value, McpError> {
        let mut headers = headers_2026_07_28(&stateless.version, method);
        if method == "tools/call" {
            if let Some(name) = params.get("name").and_then(Value::as_str) {
                if let Ok(value) = HeaderValue::from_str(&encode_header_value(name)) {
                    headers.insert(NAME_HEADER, value);
                }
                if let Some(declared) = self.param_headers.load().get(name) {
                    let arguments = params.get("arguments").unwrap_or(&Value::Null);
                    headers.extend(param_headers::values(declared, arguments));
                }
            }
        }
        let params = with_meta(params, &stateless.version, exchange.passthrough);
        let body = serialise(&OutgoingRequest::request(id, method, Some(&params)));
        let posted = match self.post(&headers, None, body, Some(id), exchange, deadline).await {
            Ok(posted) => posted,
            Err(McpError::Refused { status, id: answered, error }) => {
                return Err(judge_refusal(status, &answered, id, error))
            }
            Err(McpError::Status { status: status @ (400 | 404 | 405), body }) => {
                return Err(McpError::Stale(format!("answered HTTP {status} without a JSON-RPC error: {body}")))
            }
            Err(e) => return Err(e),
        };
        match posted.message {
            Some(Message::Response { result, .. }) => Ok(result),
            Some(Message::Error { error, .. }) if error.code == UNSUPPORTED_PROTOCOL_VERSION => {
                Err(McpError::Stale(unsupported(&error)))
            }
            Some(Message::Error { error, .. }) => Err(McpError::Rpc(error)),
            _ => Err(McpError::Protocol(format!("no response to {method}"))),
        }
    }

    /// The JSON-RPC message an event carries: `None` for an event of
    /// another type, or data that is not JSON-RPC (skipped).
    fn event_message(&self, event: &Event) -> Option<Message> {
        if event.event.as_deref().is_some_and(|e| e != "message") {
            return None;
        }
        Message::from_slice(event.data.as_bytes())
            .inspect_err(|e| {
                tracing::debug!(endpoint = %self.endpoint, error = e, "skipping an event that is not JSON-RPC");
            })
            .ok()
    }
}

/// The headers of a 2026-07-28 request: its version and method.
fn headers_2026_07_28(version: &HeaderValue, method: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(PROTOCOL_VERSION_HEADER, version.clone());
    if let Ok(method) = HeaderValue::from_str(method) {
        headers.insert(HeaderName::from_static(METHOD_HEADER), method);
    }
    headers
}

/// `params` with the per-request `_meta` of 2026-07-28 added (keys already
/// in `params._meta` are kept, the protocol's own overwritten).
fn with_meta(params: &Value, version: &HeaderValue, passthrough: Option<&Passthrough>) -> Value {
    let mut params = match params {
        Value::Object(params) => params.clone(),
        _ => Map::new(),
    };
    if let Some(passthrough) = passthrough {
        if let Some(responses) = &passthrough.input_responses {
            params.insert("inputResponses".into(), responses.clone());
        }
        if let Some(state) = &passthrough.request_state {
            params.insert("requestState".into(), state.clone());
        }
    }
    let meta = params.entry("_meta").or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        let version = version.to_str().unwrap_or(REVISION_2026_07_28);
        meta.insert(META_PROTOCOL_VERSION.into(), Value::String(version.to_owned()));
        // The gateway answers no server requests for itself: no
        // capabilities but those of a 2026-07-28 client it calls for.
        let capabilities = passthrough.map_or_else(|| json!({}), |p| p.capabilities.clone());
        meta.insert(META_CLIENT_CAPABILITIES.into(), capabilities);
        meta.insert(META_CLIENT_INFO.into(), client_info());
    }
    Value::Object(params)
}

/// A 2026-07-28 server's refusal of request `id`: its own error, or a sign
/// that the server no longer speaks 2026-07-28 there.
fn judge_refusal(status: u16, answered: &Value, id: u64, error: ErrorObject) -> McpError {
    if error.code == UNSUPPORTED_PROTOCOL_VERSION {
        return McpError::Stale(unsupported(&error));
    }
    let code_2026_07_28 = matches!(error.code, HEADER_MISMATCH | MISSING_REQUIRED_CLIENT_CAPABILITY | METHOD_NOT_FOUND);
    if answered.as_u64() == Some(id) || (answered.is_null() && code_2026_07_28) {
        return McpError::Rpc(error);
    }
    McpError::Stale(format!(
        "answered HTTP {status} with a JSON-RPC error that is no answer of MCP {REVISION_2026_07_28} ({}: {})",
        error.code, error.message
    ))
}

/// An HTTP error answer: a JSON-RPC error in its body, or the status and
/// the body's start (without the credential `sent`).
fn refusal(status: StatusCode, body: &[u8], sent: Option<&str>) -> McpError {
    match Message::from_slice(body) {
        Ok(Message::Error { id, mut error }) => {
            without_sent(&mut error, sent);
            McpError::Refused { status: status.as_u16(), id, error }
        }
        _ => McpError::Status { status: status.as_u16(), body: snippet(body, sent) },
    }
}

/// A result's `resultType` (absent: a result of a server before 2026-07-28,
/// which is complete).
pub fn result_type(result: &Value) -> Option<&str> {
    result.get("resultType").and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_requests_carry_the_meta_and_keep_their_own() {
        let version = HeaderValue::from_static(REVISION_2026_07_28);
        let params = with_meta(&json!({"name": "x", "_meta": {"progressToken": 7}}), &version, None);
        let meta = &params["_meta"];
        assert_eq!(meta[META_PROTOCOL_VERSION], REVISION_2026_07_28);
        assert_eq!(meta[META_CLIENT_CAPABILITIES], json!({}));
        assert_eq!(meta[META_CLIENT_INFO]["name"], "otc-gateway");
        assert_eq!(meta["progressToken"], 7);
        assert_eq!(params["name"], "x");
        assert!(with_meta(&Value::Null, &version, None)["_meta"].is_object());
        let headers = headers_2026_07_28(&version, "tools/list");
        assert_eq!(headers.get("mcp-protocol-version").map(|v| v.as_bytes()), Some(&b"2026-07-28"[..]));
        assert_eq!(headers.get("mcp-method").map(|v| v.as_bytes()), Some(&b"tools/list"[..]));
    }

    #[test]
    fn refusals_are_the_servers_answer_or_a_stale_link() {
        let error = |code: i64| ErrorObject { code, message: "m".into(), data: None };
        assert!(matches!(judge_refusal(400, &json!(5), 5, error(-32602)), McpError::Rpc(_)));
        assert!(matches!(judge_refusal(404, &Value::Null, 5, error(METHOD_NOT_FOUND)), McpError::Rpc(_)));
        assert!(matches!(judge_refusal(400, &json!(5), 5, error(UNSUPPORTED_PROTOCOL_VERSION)), McpError::Stale(_)));
        // How a 2025-11-25 server refuses a request without its session.
        assert!(matches!(judge_refusal(400, &json!("server-error"), 5, error(-32600)), McpError::Stale(_)));
        assert!(matches!(refusal(StatusCode::BAD_REQUEST, b"<html>", None), McpError::Status { status: 400, .. }));
        let body = br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32020,"message":"no"}}"#;
        assert!(matches!(refusal(StatusCode::BAD_REQUEST, body, None), McpError::Refused { status: 400, .. }));
        // Its words never carry the token it was sent, in any spelling.
        let body = br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32001,"message":"tok\\/en-4b8e2d17?","data":{"t":"tok%2Fen-4b8e2d17"}}}"#;
        let McpError::Refused { error, .. } = refusal(StatusCode::UNAUTHORIZED, body, Some("tok/en-4b8e2d17")) else {
            panic!("a refusal");
        };
        assert_eq!((error.message.as_str(), error.data), ("[redacted]?", Some(json!({"t": "[redacted]"}))));
        // The token the exchange sent, echoed across the cut, escaped.
        let echo = format!("{}Bearer tok\\/en-4b8e2d17", "x".repeat(190));
        let McpError::Status { body, .. } = refusal(StatusCode::UNAUTHORIZED, echo.as_bytes(), Some("tok/en-4b8e2d17"))
        else {
            panic!("a status");
        };
        assert_eq!(body, format!("{}Bearer [re…", "x".repeat(190)));
    }
}
