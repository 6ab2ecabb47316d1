//! How the gateway comes to speak to an MCP server: the `server/discover`
//! probe, `initialize` and its session, the [`Channel`] kept and forgotten
//! (see the module doc of `client.rs` for when).

use super::*;

/// What `server/discover` found.
enum Discovered {
    /// A server of 2026-07-28.
    R2026_07_28(Stateless),
    /// A server to open a session with, asking for `version`; `why` for the log.
    R2025_11_25 { version: &'static str, why: String },
}

impl McpClient {
    /// The current link, or a new one.
    pub(super) async fn link(&self, exchange: Exchange<'_>, deadline: Instant) -> Result<Arc<Channel>, McpError> {
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
        // A discovery made for a recorded call is a step of its trace.
        let mut span = exchange.span.map(|s| s.child("mcp discover", crate::otel::Kind::Client));
        let opened = self.open(exchange, deadline).await;
        if let Some(span) = &mut span {
            span.set("mcp.method.name", "server/discover");
            match &opened {
                Ok(Channel::R2026_07_28(_)) => span.set("mcp.protocol.version", REVISION_2026_07_28),
                Ok(Channel::R2025_11_25(session)) => {
                    span.set("mcp.protocol.version", session.protocol_version.to_str().unwrap_or_default());
                }
                Err(_) => span.fail("discovery_failed"),
            }
        }
        let link = Arc::new(opened?);
        self.link.store(Some(link.clone()));
        self.relinked.send_modify(|n| *n += 1);
        Ok(link)
    }

    /// Drops `stale` if it is still the current link.
    pub(super) fn forget(&self, stale: &Arc<Channel>) {
        let current = self.link.load();
        if current.as_ref().is_some_and(|l| Arc::ptr_eq(l, stale)) {
            self.link.compare_and_swap(&*current, None);
            self.relinked.send_modify(|n| *n += 1);
        }
    }

    /// Finds the server's era: `server/discover`, and `initialize` when it
    /// is not a 2026-07-28 server.
    pub(super) async fn open(&self, exchange: Exchange<'_>, deadline: Instant) -> Result<Channel, McpError> {
        match self.discover(exchange, deadline).await? {
            Discovered::R2026_07_28(stateless) => Ok(Channel::R2026_07_28(stateless)),
            Discovered::R2025_11_25 { version, why } => {
                tracing::debug!(endpoint = %self.endpoint, why, "not an MCP 2026-07-28 server; opening a session");
                Ok(Channel::R2025_11_25(self.initialize(version, exchange, deadline).await?))
            }
        }
    }

    /// The 2026-07-28 probe.
    async fn discover(&self, exchange: Exchange<'_>, deadline: Instant) -> Result<Discovered, McpError> {
        let version = HeaderValue::from_static(REVISION_2026_07_28);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let params = with_meta(&json!({}), &version, None);
        let body = serialise(&OutgoingRequest::request(id, "server/discover", Some(&params)));
        let headers = headers_2026_07_28(&version, "server/discover");
        let legacy = |why: String| Ok(Discovered::R2025_11_25 { version: PROTOCOL_VERSIONS[0], why });
        let error = match self.post(&headers, None, body, Some(id), exchange, deadline).await {
            Ok(Posted { message: Some(Message::Response { result, .. }), .. }) => {
                let supported = string_list(result.get("supportedVersions"));
                if !supported.iter().any(|v| is_2026_07_28_revision(v)) {
                    return legacy(format!("server/discover names no revision the gateway speaks: {supported:?}"));
                }
                let server = result
                    .get("_meta")
                    .and_then(|m| m.get(META_SERVER_INFO))
                    .and_then(|s| s.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or("?");
                tracing::info!(endpoint = %self.endpoint, server, protocol_version = REVISION_2026_07_28, "MCP server found");
                return Ok(Discovered::R2026_07_28(Stateless {
                    version,
                    tools_list_changed: lists_tool_changes(&result),
                }));
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
                    Some(version) => Ok(Discovered::R2025_11_25 {
                        version,
                        why: format!("the server speaks {}", supported.join(", ")),
                    }),
                    None => Err(McpError::Protocol(format!(
                        "the server speaks MCP {}; the gateway speaks {REVISION_2026_07_28}, {}",
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
                "the server speaks MCP {version:?}; the gateway speaks {REVISION_2026_07_28}, {}",
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
}

/// The gateway's name and version, as MCP's `Implementation`.
pub(super) fn client_info() -> Value {
    json!({"name": "otc-gateway", "version": env!("CARGO_PKG_VERSION")})
}

/// An `UnsupportedProtocolVersion` error, for the log.
pub(super) fn unsupported(error: &ErrorObject) -> String {
    let supported = string_list(error.data.as_ref().and_then(|d| d.get("supported")));
    format!("the server no longer speaks MCP {REVISION_2026_07_28} (it speaks {})", supported.join(", "))
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
