//! A streamable HTTP client for one MCP upstream.
//!
//! One session per upstream, opened lazily by the first request: POST
//! `initialize`, then `notifications/initialized`; every later request
//! carries `Mcp-Session-Id` (when the server gave one) and
//! `MCP-Protocol-Version`. A 404 to a request with a session id means the
//! server forgot the session: a new one is opened and the request sent once
//! more (the server did not process it).
//!
//! A reply is either one JSON object or an event stream. On a stream, empty
//! priming events are skipped, `ping` requests are answered, other server
//! requests are refused (the gateway offers no client capabilities), and
//! notifications are skipped until the response with the request's id.
//!
//! Every exchange is bounded by a deadline and a byte limit; connections come
//! from a hyper-util pool, as for OTC upstreams.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderValue, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::jsonrpc::{ErrorObject, Message, OutgoingRequest, OutgoingResponse, METHOD_NOT_FOUND};
use super::sse::SseParser;
use super::{is_supported_version, LATEST_PROTOCOL_VERSION, PROTOCOL_VERSION_HEADER, SESSION_HEADER};
use crate::circuit::Circuit;
use crate::http_client::error_chain;

/// The most pages of `tools/list` read: a server whose cursors never end
/// must not keep a poller busy forever.
const MAX_PAGES: usize = 1000;

/// How long a best-effort message (a cancellation, a ping answer) may take.
const SIDE_MESSAGE_TIMEOUT: Duration = Duration::from_secs(2);

/// Why an MCP exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// No connection could be made: nothing was sent.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// The session could not be opened, so the request itself was never sent.
    #[error("MCP initialize failed: {0}")]
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
}

impl McpError {}

/// What bounds one exchange, and what it carries.
#[derive(Debug, Clone, Copy)]
pub struct Exchange<'a> {
    /// The whole exchange (session setup included) must end within this.
    pub timeout: Duration,
    /// The largest answer accepted.
    pub max_bytes: usize,
    /// Sent as `Authorization`.
    pub authorization: Option<&'a HeaderValue>,
    /// Told of connection failures and successes.
    pub circuit: Option<&'a Circuit>,
}

/// An open MCP session.
#[derive(Debug)]
struct Session {
    /// `Mcp-Session-Id`, when the server assigned one.
    id: Option<HeaderValue>,
    /// The negotiated revision, for `MCP-Protocol-Version`.
    protocol_version: HeaderValue,
}

/// A streamable HTTP client for one MCP endpoint.
pub struct McpClient {
    endpoint: Uri,
    http: Client<HttpConnector, Full<Bytes>>,
    /// The open session: one atomic load on the hot path.
    session: ArcSwapOption<Session>,
    /// Held across `initialize` so that concurrent first calls open one
    /// session, not one each.
    opening: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
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
            session: ArcSwapOption::empty(),
            opening: tokio::sync::Mutex::new(()),
            next_id: AtomicU64::new(1),
        }
    }

    /// `tools/list`, every page: the raw MCP `Tool` objects in server order.
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
                _ => return Ok(tools),
            }
        }
        Err(McpError::Protocol(format!("tools/list has more than {MAX_PAGES} pages")))
    }

    /// `tools/call`: the raw `CallToolResult`. A timeout after the request
    /// went out sends `notifications/cancelled` (best effort).
    pub async fn call_tool(&self, name: &str, arguments: &Value, exchange: Exchange<'_>) -> Result<Value, McpError> {
        let deadline = Instant::now() + exchange.timeout;
        let params = json!({"name": name, "arguments": arguments});
        self.request("tools/call", &params, exchange, deadline).await
    }

    /// Sends one request in the current session (opening one if needed) and
    /// waits for its response; returns its result.
    async fn request(
        &self,
        method: &str,
        params: &Value,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Value, McpError> {
        for attempt in 0..2 {
            let session = self.session(exchange, deadline).await.map_err(|e| McpError::Initialize(Box::new(e)))?;
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let body = serialise(&OutgoingRequest::request(id, method, Some(params)));
            match self.post(Some(&session), body, Some(id), exchange, deadline).await {
                Err(McpError::SessionExpired) if attempt == 0 => {
                    tracing::info!(endpoint = %self.endpoint, "MCP session expired; opening a new one");
                    self.forget(&session);
                }
                Err(McpError::SessionExpired) => {
                    return Err(McpError::Initialize(Box::new(McpError::Protocol(
                        "a new session was refused with 404 too".into(),
                    ))))
                }
                Err(e @ McpError::Timeout(_)) => {
                    self.cancel(&session, id, exchange.authorization);
                    return Err(e);
                }
                Err(e) => return Err(e),
                Ok(posted) => {
                    return match posted.message {
                        Some(Message::Response { result, .. }) => Ok(result),
                        Some(Message::Error { error, .. }) => Err(McpError::Rpc(error)),
                        _ => Err(McpError::Protocol(format!("no response to {method}"))),
                    }
                }
            }
        }
        Err(McpError::Protocol("unreachable: the retry loop ended".into()))
    }

    /// The open session, or a new one.
    async fn session(&self, exchange: Exchange<'_>, deadline: Instant) -> Result<Arc<Session>, McpError> {
        if let Some(session) = self.session.load_full() {
            return Ok(session);
        }
        let _opening = tokio::time::timeout_at(deadline, self.opening.lock())
            .await
            .map_err(|_| McpError::Timeout(exchange.timeout))?;
        // Another caller may have opened it while this one waited.
        if let Some(session) = self.session.load_full() {
            return Ok(session);
        }
        let session = Arc::new(self.initialize(exchange, deadline).await?);
        self.session.store(Some(session.clone()));
        Ok(session)
    }

    /// Drops `stale` if it is still the current session.
    fn forget(&self, stale: &Arc<Session>) {
        let current = self.session.load();
        if current.as_ref().is_some_and(|s| Arc::ptr_eq(s, stale)) {
            self.session.compare_and_swap(&*current, None);
        }
    }

    /// `initialize`, then `notifications/initialized`.
    async fn initialize(&self, exchange: Exchange<'_>, deadline: Instant) -> Result<Session, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = json!({
            "protocolVersion": LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "otc-gateway", "version": env!("CARGO_PKG_VERSION")},
        });
        let body = serialise(&OutgoingRequest::request(id, "initialize", Some(&params)));
        let posted = self.post(None, body, Some(id), exchange, deadline).await?;
        let result = match posted.message {
            Some(Message::Response { result, .. }) => result,
            Some(Message::Error { error, .. }) => return Err(McpError::Rpc(error)),
            _ => return Err(McpError::Protocol("no response to initialize".into())),
        };
        let version = result.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
        if !is_supported_version(version) {
            return Err(McpError::Protocol(format!(
                "the server speaks MCP {version:?}; the gateway speaks {}",
                super::PROTOCOL_VERSIONS.join(", ")
            )));
        }
        let protocol_version =
            HeaderValue::from_str(version).map_err(|_| McpError::Protocol("unusable protocol version".into()))?;
        let session = Session { id: posted.session_id, protocol_version };
        let notification = serialise(&OutgoingRequest::notification("notifications/initialized", None));
        self.post(Some(&session), notification, None, exchange, deadline).await?;
        let server = result.get("serverInfo").and_then(|s| s.get("name")).and_then(Value::as_str).unwrap_or("?");
        tracing::info!(endpoint = %self.endpoint, server, protocol_version = version, "MCP session opened");
        Ok(session)
    }

    /// One POST: a request (`expect` is its id) or a notification or
    /// response (`expect` is `None`; any 2xx will do).
    async fn post(
        &self,
        session: Option<&Session>,
        body: Bytes,
        expect: Option<u64>,
        exchange: Exchange<'_>,
        deadline: Instant,
    ) -> Result<Posted, McpError> {
        let request = self.build(session, body, exchange.authorization)?;
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
        let is_stream = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|ct| ct.trim_start().to_ascii_lowercase().starts_with("text/event-stream"));
        if status == StatusCode::NOT_FOUND && session.is_some_and(|s| s.id.is_some()) {
            return Err(McpError::SessionExpired);
        }
        if !status.is_success() {
            let body = read_limited(response.into_body(), 4096, deadline, exchange.timeout).await.unwrap_or_default();
            return Err(McpError::Status { status: status.as_u16(), body: snippet(&body) });
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
            self.read_stream(response.into_body(), session, expect, exchange, deadline).await?
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
        session: Option<&Session>,
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
                if event.event.as_deref().is_some_and(|e| e != "message") {
                    continue;
                }
                let message = match Message::from_slice(event.data.as_bytes()) {
                    Ok(message) => message,
                    Err(e) => {
                        tracing::debug!(endpoint = %self.endpoint, error = e, "skipping an event that is not JSON-RPC");
                        continue;
                    }
                };
                if answers(&message, expect) {
                    return Ok(message);
                }
                match message {
                    Message::Request { id, method, .. } => {
                        let answer = if method == "ping" {
                            OutgoingResponse::result(id, json!({}))
                        } else {
                            OutgoingResponse::error(
                                id,
                                METHOD_NOT_FOUND,
                                format!("the gateway does not offer {method}"),
                            )
                        };
                        self.send_aside(session, answer.to_bytes(), exchange.authorization);
                    }
                    Message::Notification { method, .. } => {
                        tracing::debug!(endpoint = %self.endpoint, method, "skipping an MCP notification");
                    }
                    _ => {}
                }
            }
        }
    }

    /// Tells the server a timed-out request is abandoned (best effort).
    fn cancel(&self, session: &Session, id: u64, authorization: Option<&HeaderValue>) {
        let params = json!({"requestId": id, "reason": "the gateway's call_timeout elapsed"});
        let body = serialise(&OutgoingRequest::notification("notifications/cancelled", Some(&params)));
        self.send_aside(Some(session), body, authorization);
    }

    /// POSTs a message in the background without waiting for it.
    fn send_aside(&self, session: Option<&Session>, body: Bytes, authorization: Option<&HeaderValue>) {
        let request = match self.build(session, body, authorization) {
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
        session: Option<&Session>,
        body: Bytes,
        authorization: Option<&HeaderValue>,
    ) -> Result<Request<Full<Bytes>>, McpError> {
        let mut request = Request::post(self.endpoint.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "application/json, text/event-stream");
        if let Some(session) = session {
            if let Some(id) = &session.id {
                request = request.header(SESSION_HEADER, id.clone());
            }
            request = request.header(PROTOCOL_VERSION_HEADER, session.protocol_version.clone());
        }
        if let Some(authorization) = authorization {
            request = request.header(AUTHORIZATION, authorization.clone());
        }
        request.body(Full::new(body)).map_err(|e| McpError::Protocol(e.to_string()))
    }
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
