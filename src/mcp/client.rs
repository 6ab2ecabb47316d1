//! A streamable HTTP client for one MCP upstream, of either era.
//!
//! **The era** is found once per upstream and kept (a [`Link`]). The first
//! request probes with `server/discover` in MCP 2026-07-28:
//!
//! - a result naming 2026-07-28 makes the link modern: no session; every
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
//! from a hyper-util pool, as for OTC upstreams. The stream that announces
//! tool list changes is in [`changes`].

mod changes;

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
use super::modern::{
    encode_header_value, is_modern_version, Passthrough, HEADER_MISMATCH, META_CLIENT_CAPABILITIES, META_CLIENT_INFO,
    META_PROTOCOL_VERSION, META_SERVER_INFO, METHOD_HEADER, MISSING_REQUIRED_CLIENT_CAPABILITY,
    MODERN_PROTOCOL_VERSION, NAME_HEADER, UNSUPPORTED_PROTOCOL_VERSION,
};
use super::param_headers::{self, ParamHeader};
use super::sse::{Event, SseParser};
use super::{is_supported_version, PROTOCOL_VERSIONS, PROTOCOL_VERSION_HEADER, SESSION_HEADER};
use crate::circuit::Circuit;
use crate::http_client::error_chain;

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
}

/// How the gateway talks to the server: what the probe found.
#[derive(Debug)]
enum Link {
    /// MCP 2026-07-28: no session, the version on every request.
    Modern(Modern),
    /// 2025-11-25 or before: an initialized session.
    Legacy(Session),
}

/// A server of MCP 2026-07-28.
#[derive(Debug)]
struct Modern {
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
    link: ArcSwapOption<Link>,
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

/// The answer to a POST: the message (none for a notification) and the
/// session id header.
struct Posted {
    message: Option<Message>,
    session_id: Option<HeaderValue>,
}

/// What `server/discover` found.
enum Discovered {
    /// A server of 2026-07-28.
    Modern(Modern),
    /// A server to open a session with, asking for `version`; `why` for the log.
    Legacy { version: &'static str, why: String },
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
            Link::Modern(modern) => &modern.version,
            Link::Legacy(session) => &session.protocol_version,
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
                Link::Modern(modern) => self.modern_request(modern, id, method, params, exchange, deadline).await,
                Link::Legacy(session) => self.session_request(session, id, method, params, exchange, deadline).await,
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
                    if let Link::Legacy(session) = &*link {
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
    async fn modern_request(
        &self,
        modern: &Modern,
        id: u64,
        method: &str,
        params: &Value,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Value, McpError> {
        let mut headers = modern_headers(&modern.version, method);
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
        let params = with_meta(params, &modern.version, exchange.passthrough);
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

    /// The current link, or a new one.
    async fn link(&self, exchange: Exchange<'_>, deadline: Instant) -> Result<Arc<Link>, McpError> {
        if let Some(link) = self.link.load_full() {
            return Ok(link);
        }
        let _opening = tokio::time::timeout_at(deadline, self.opening.lock())
            .await
            .map_err(|_| McpError::Timeout(exchange.timeout))?;
        // Another caller may have opened it while this one waited.
        if let Some(link) = self.link.load_full() {
            return Ok(link);
        }
        let link = Arc::new(self.open(exchange, deadline).await?);
        self.link.store(Some(link.clone()));
        self.relinked.send_modify(|n| *n += 1);
        Ok(link)
    }

    /// Drops `stale` if it is still the current link.
    fn forget(&self, stale: &Arc<Link>) {
        let current = self.link.load();
        if current.as_ref().is_some_and(|l| Arc::ptr_eq(l, stale)) {
            self.link.compare_and_swap(&*current, None);
            self.relinked.send_modify(|n| *n += 1);
        }
    }

    /// Finds the server's era: `server/discover`, and `initialize` when it
    /// is not a 2026-07-28 server.
    async fn open(&self, exchange: Exchange<'_>, deadline: Instant) -> Result<Link, McpError> {
        match self.discover(exchange, deadline).await? {
            Discovered::Modern(modern) => Ok(Link::Modern(modern)),
            Discovered::Legacy { version, why } => {
                tracing::debug!(endpoint = %self.endpoint, why, "not an MCP 2026-07-28 server; opening a session");
                Ok(Link::Legacy(self.initialize(version, exchange, deadline).await?))
            }
        }
    }

    /// The 2026-07-28 probe.
    async fn discover(&self, exchange: Exchange<'_>, deadline: Instant) -> Result<Discovered, McpError> {
        let version = HeaderValue::from_static(MODERN_PROTOCOL_VERSION);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = with_meta(&json!({}), &version, None);
        let body = serialise(&OutgoingRequest::request(id, "server/discover", Some(&params)));
        let headers = modern_headers(&version, "server/discover");
        let legacy = |why: String| Ok(Discovered::Legacy { version: PROTOCOL_VERSIONS[0], why });
        let error = match self.post(&headers, None, body, Some(id), exchange, deadline).await {
            Ok(Posted { message: Some(Message::Response { result, .. }), .. }) => {
                let supported = string_list(result.get("supportedVersions"));
                if !supported.iter().any(|v| is_modern_version(v)) {
                    return legacy(format!("server/discover names no revision the gateway speaks: {supported:?}"));
                }
                let server = result
                    .get("_meta")
                    .and_then(|m| m.get(META_SERVER_INFO))
                    .and_then(|s| s.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                tracing::info!(endpoint = %self.endpoint, server, protocol_version = MODERN_PROTOCOL_VERSION, "MCP server found");
                return Ok(Discovered::Modern(Modern { version, tools_list_changed: lists_tool_changes(&result) }));
            }
            Ok(Posted { message: Some(Message::Error { error, .. }), .. }) => error,
            Ok(Posted { .. }) => return legacy("no answer to server/discover".into()),
            Err(McpError::Refused { error, .. }) => error,
            Err(McpError::Status { status, body }) if (400..500).contains(&status) => {
                return legacy(format!("server/discover answered HTTP {status}: {body}"))
            }
            Err(McpError::Protocol(detail)) => return legacy(detail),
            Err(e) => return Err(e),
        };
        match error.code {
            UNSUPPORTED_PROTOCOL_VERSION => {
                let Some(supported) = error.data.as_ref().and_then(|d| d.get("supported")) else {
                    return legacy("server/discover: unsupported version, no list of supported ones".into());
                };
                let supported = string_list(Some(supported));
                match PROTOCOL_VERSIONS.iter().find(|v| supported.iter().any(|s| s == *v)) {
                    Some(version) => {
                        Ok(Discovered::Legacy { version, why: format!("the server speaks {}", supported.join(", ")) })
                    }
                    None => Err(McpError::Protocol(format!(
                        "the server speaks MCP {}; the gateway speaks {MODERN_PROTOCOL_VERSION}, {}",
                        supported.join(", "),
                        PROTOCOL_VERSIONS.join(", ")
                    ))),
                }
            }
            // A 2026-07-28 server that refuses the probe itself: no fallback
            // would fare better.
            HEADER_MISMATCH | MISSING_REQUIRED_CLIENT_CAPABILITY => Err(McpError::Rpc(error)),
            code => legacy(format!("server/discover refused with {code}: {}", error.message)),
        }
    }

    /// `initialize` asking for `version`, then `notifications/initialized`.
    async fn initialize(&self, version: &str, exchange: Exchange<'_>, deadline: Instant) -> Result<Session, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = json!({
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": client_info(),
        });
        let body = serialise(&OutgoingRequest::request(id, "initialize", Some(&params)));
        let bare = HeaderMap::new();
        let posted = self.post(&bare, Some(&bare), body, Some(id), exchange, deadline).await?;
        let result = match posted.message {
            Some(Message::Response { result, .. }) => result,
            Some(Message::Error { error, .. }) => return Err(McpError::Rpc(error)),
            _ => return Err(McpError::Protocol("no response to initialize".into())),
        };
        let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
        if !is_supported_version(version) {
            return Err(McpError::Protocol(format!(
                "the server speaks MCP {version:?}; the gateway speaks {MODERN_PROTOCOL_VERSION}, {}",
                PROTOCOL_VERSIONS.join(", ")
            )));
        }
        let protocol_version =
            HeaderValue::from_str(version).map_err(|_| McpError::Protocol("unusable protocol version".into()))?;
        let session =
            Session { id: posted.session_id, protocol_version, tools_list_changed: lists_tool_changes(&result) };
        let notification = serialise(&OutgoingRequest::notification("notifications/initialized", None));
        self.post(&session.headers(), None, notification, None, exchange, deadline).await?;
        let server = result.get("serverInfo").and_then(|s| s.get("name")).and_then(Value::as_str).unwrap_or("?");
        tracing::info!(endpoint = %self.endpoint, server, protocol_version = version, "MCP session opened");
        Ok(session)
    }

    /// One POST: a request (`expect` is its id) or a notification (`expect`
    /// is `None`; any 2xx will do). Server requests on a reply stream are
    /// answered with `answer_with`'s headers; with `None` (2026-07-28, where
    /// servers send none) they are skipped.
    async fn post(
        &self,
        headers: &HeaderMap,
        answer_with: Option<&HeaderMap>,
        body: Bytes,
        expect: Option<u64>,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Posted, McpError> {
        let request = self.build(headers, body, exchange.authorization)?;
        let response = match tokio::time::timeout_at(deadline, self.http.request(request)).await {
            Err(_) => return Err(McpError::Timeout(exchange.timeout)),
            Ok(Err(e)) if e.is_connect() => {
                if let Some(circuit) = exchange.circuit {
                    circuit.record_failure();
                }
                return Err(McpError::Connect(error_chain(&e)));
            }
            Ok(Err(e)) => return Err(McpError::Broken(error_chain(&e))),
            Ok(Ok(response)) => response,
        };
        if let Some(circuit) = exchange.circuit {
            circuit.record_success();
        }
        let status = response.status();
        let session_id = response.headers().get(SESSION_HEADER).cloned();
        let is_stream = is_event_stream(response.headers());
        if status == StatusCode::NOT_FOUND && headers.contains_key(SESSION_HEADER) {
            return Err(McpError::SessionExpired);
        }
        if !status.is_success() {
            let limit = ERROR_BODY_LIMIT.min(exchange.max_bytes);
            let body = read_limited(response.into_body(), limit, deadline, exchange.timeout).await.unwrap_or_default();
            return Err(refusal(status, &body));
        }
        let Some(expect) = expect else {
            // Notifications are answered 202 with no body; a body, if any,
            // is not read (the connection is simply not reused).
            return Ok(Posted { message: None, session_id });
        };
        if status == StatusCode::ACCEPTED {
            return Err(McpError::Protocol("answered 202 Accepted to a request".into()));
        }
        let message = if is_stream {
            self.read_stream(response.into_body(), answer_with, expect, exchange, deadline).await?
        } else {
            let body = read_limited(response.into_body(), exchange.max_bytes, deadline, exchange.timeout).await?;
            let message = Message::from_slice(&body)
                .map_err(|e| McpError::Protocol(format!("not a JSON-RPC message ({e}): {}", snippet(&body))))?;
            if !answers(&message, expect) {
                return Err(McpError::Protocol(format!("the answer is not the response to request {expect}")));
            }
            message
        };
        Ok(Posted { message: Some(message), session_id })
    }

    /// Reads an event stream until the response to request `expect`.
    async fn read_stream(
        &self,
        mut body: hyper::body::Incoming,
        answer_with: Option<&HeaderMap>,
        expect: u64,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Message, McpError> {
        let mut parser = SseParser::new();
        let mut received = 0usize;
        loop {
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => return Err(McpError::Timeout(exchange.timeout)),
                Ok(None) => return Err(McpError::Broken("the event stream ended before the response".into())),
                Ok(Some(Err(e))) => return Err(McpError::Broken(error_chain(&e))),
                Ok(Some(Ok(frame))) => frame,
            };
            let Ok(chunk) = frame.into_data() else { continue };
            received += chunk.len();
            if received > exchange.max_bytes {
                return Err(McpError::TooLarge(exchange.max_bytes));
            }
            for event in parser.push(&chunk) {
                let Some(message) = self.event_message(&event) else { continue };
                if answers(&message, expect) {
                    return Ok(message);
                }
                match message {
                    Message::Request { id, method, .. } => match answer_with {
                        Some(headers) => self.answer(headers, id, &method, exchange.authorization),
                        None => {
                            tracing::debug!(endpoint = %self.endpoint, method, "skipping a request from an MCP 2026-07-28 server")
                        }
                    },
                    Message::Notification { method, .. } => {
                        tracing::debug!(endpoint = %self.endpoint, method, "skipping an MCP notification");
                    }
                    _ => {}
                }
            }
        }
    }

    /// Answers a server's request in a session: `ping`, or a refusal (the
    /// gateway offers no client capabilities).
    fn answer(&self, headers: &HeaderMap, id: Value, method: &str, authorization: Option<&HeaderValue>) {
        let answer = if method == "ping" {
            OutgoingResponse::result(id, json!({}))
        } else {
            OutgoingResponse::error(id, METHOD_NOT_FOUND, format!("the gateway does not offer {method}"))
        };
        self.send_aside(headers, answer.to_bytes(), authorization);
    }

    /// Tells the server a timed-out request is abandoned (best effort).
    fn cancel(&self, session: &Session, id: u64, authorization: Option<&HeaderValue>) {
        let params = json!({"requestId": id, "reason": "the gateway's call_timeout elapsed"});
        let body = serialise(&OutgoingRequest::notification("notifications/cancelled", Some(&params)));
        self.send_aside(&session.headers(), body, authorization);
    }

    /// POSTs a message in the background without waiting for it.
    fn send_aside(&self, headers: &HeaderMap, body: Bytes, authorization: Option<&HeaderValue>) {
        let request = match self.build(headers, body, authorization) {
            Ok(request) => request,
            Err(e) => {
                tracing::debug!(error = %e, "cannot build a message to the MCP server");
                return;
            }
        };
        let http = self.http.clone();
        tokio::spawn(async move {
            if let Ok(Err(e)) = tokio::time::timeout(SIDE_MESSAGE_TIMEOUT, http.request(request)).await {
                tracing::debug!(error = %e, "a message to the MCP server was not delivered");
            }
        });
    }

    fn build(
        &self,
        headers: &HeaderMap,
        body: Bytes,
        authorization: Option<&HeaderValue>,
    ) -> Result<Request<Full<Bytes>>, McpError> {
        let mut request = Request::post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream");
        if let Some(map) = request.headers_mut() {
            map.extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
            if let Some(authorization) = authorization {
                map.insert(AUTHORIZATION, authorization.clone());
            }
        }
        request.body(Full::new(body)).map_err(|e| McpError::Protocol(e.to_string()))
    }
}

/// The headers of a 2026-07-28 request: its version and method.
fn modern_headers(version: &HeaderValue, method: &str) -> HeaderMap {
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
        let version = version.to_str().unwrap_or(MODERN_PROTOCOL_VERSION);
        meta.insert(META_PROTOCOL_VERSION.into(), Value::String(version.to_owned()));
        // The gateway answers no server requests for itself: no
        // capabilities but those of a 2026-07-28 client it calls for.
        let capabilities = passthrough.map_or_else(|| json!({}), |p| p.capabilities.clone());
        meta.insert(META_CLIENT_CAPABILITIES.into(), capabilities);
        meta.insert(META_CLIENT_INFO.into(), client_info());
    }
    Value::Object(params)
}

/// The gateway's name and version, as MCP's `Implementation`.
fn client_info() -> Value {
    json!({"name": "otc-gateway", "version": env!("CARGO_PKG_VERSION")})
}

/// A 2026-07-28 server's refusal of request `id`: its own error, or a sign
/// that the server no longer speaks 2026-07-28 there.
fn judge_refusal(status: u16, answered: &Value, id: u64, error: ErrorObject) -> McpError {
    if error.code == UNSUPPORTED_PROTOCOL_VERSION {
        return McpError::Stale(unsupported(&error));
    }
    let modern_code = matches!(error.code, HEADER_MISMATCH | MISSING_REQUIRED_CLIENT_CAPABILITY | METHOD_NOT_FOUND);
    if answered.as_u64() == Some(id) || (answered.is_null() && modern_code) {
        return McpError::Rpc(error);
    }
    McpError::Stale(format!(
        "answered HTTP {status} with a JSON-RPC error that is no answer of MCP {MODERN_PROTOCOL_VERSION} ({}: {})",
        error.code, error.message
    ))
}

/// An `UnsupportedProtocolVersion` error, for the log.
fn unsupported(error: &ErrorObject) -> String {
    let supported = string_list(error.data.as_ref().and_then(|d| d.get("supported")));
    format!("the server no longer speaks MCP {MODERN_PROTOCOL_VERSION} (it speaks {})", supported.join(", "))
}

/// An HTTP error answer: a JSON-RPC error in its body, or the status and
/// the body's start.
fn refusal(status: StatusCode, body: &[u8]) -> McpError {
    match Message::from_slice(body) {
        Ok(Message::Error { id, error }) => McpError::Refused { status: status.as_u16(), id, error },
        _ => McpError::Status { status: status.as_u16(), body: snippet(body) },
    }
}

/// A result's `resultType` (absent: a result of a server before 2026-07-28,
/// which is complete).
pub fn result_type(result: &Value) -> Option<&str> {
    result.get("resultType").and_then(Value::as_str)
}

/// Whether an `initialize` or `server/discover` result says the server
/// announces tool list changes.
fn lists_tool_changes(result: &Value) -> bool {
    result.pointer("/capabilities/tools/listChanged").and_then(Value::as_bool) == Some(true)
}

fn string_list(value: Option<&Value>) -> Vec<String> {
    match value {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).map(str::to_owned).collect(),
        _ => Vec::new(),
    }
}

fn is_event_stream(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("text/event-stream"))
}

/// Whether `message` is the response (or error) to request `id`.
fn answers(message: &Message, id: u64) -> bool {
    match message {
        Message::Response { id: got, .. } | Message::Error { id: got, .. } => got.as_u64() == Some(id),
        _ => false,
    }
}

fn serialise<T: serde::Serialize>(message: &T) -> Bytes {
    // Serialising plain data into a Vec cannot fail.
    Bytes::from(serde_json::to_vec(message).unwrap_or_default())
}

/// Reads a whole body of at most `limit` bytes before `deadline`.
async fn read_limited(
    body: hyper::body::Incoming,
    limit: usize,
    deadline: Instant,
    timeout: Duration,
) -> Result<Bytes, McpError> {
    let collect = http_body_util::Limited::new(body, limit).collect();
    match tokio::time::timeout_at(deadline, collect).await {
        Err(_) => Err(McpError::Timeout(timeout)),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(McpError::TooLarge(limit)),
        Ok(Err(e)) => Err(McpError::Broken(e.to_string())),
    }
}

/// The start of a body, printable, for an error message.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modern_requests_carry_the_meta_and_keep_their_own() {
        let version = HeaderValue::from_static(MODERN_PROTOCOL_VERSION);
        let params = with_meta(&json!({"name": "x", "_meta": {"progressToken": 7}}), &version, None);
        let meta = &params["_meta"];
        assert_eq!(meta[META_PROTOCOL_VERSION], MODERN_PROTOCOL_VERSION);
        assert_eq!(meta[META_CLIENT_CAPABILITIES], json!({}));
        assert_eq!(meta[META_CLIENT_INFO]["name"], "otc-gateway");
        assert_eq!(meta["progressToken"], 7);
        assert_eq!(params["name"], "x");
        assert!(with_meta(&Value::Null, &version, None)["_meta"].is_object());
        let headers = modern_headers(&version, "tools/list");
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
        assert!(matches!(refusal(StatusCode::BAD_REQUEST, b"<html>"), McpError::Status { status: 400, .. }));
        let body = br#"{"jsonrpc":"2.0","id":3,"error":{"code":-32020,"message":"no"}}"#;
        assert!(matches!(refusal(StatusCode::BAD_REQUEST, body), McpError::Refused { status: 400, .. }));
    }
}
