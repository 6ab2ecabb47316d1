//! An MCP upstream as the rest of the gateway sees it: a catalog fetch that
//! yields a body for the poller, and a call whose outcome comes back as an
//! [`UpstreamReply`], with the OTC error taxonomy kept:
//!
//! - no connection, or none opened (the probe or `initialize` failed): the
//!   tool was not called, so the call may go to another replica, and with none left it is
//!   a 400 "temporarily unavailable";
//! - no answer within `call_timeout` once sent: 200 `success: false`,
//!   `can_retry: true`;
//! - a JSON-RPC error or an unreadable answer: 200 `success: false`, the
//!   detail in `developer_message`; an HTTP error status is passed on as
//!   that status, for the re-wrap step to judge like an OTC upstream's;
//! - a 2026-07-28 `input_required` result (the server asks for user input)
//!   or error -32021 (a client capability it needs): passed back as a
//!   [`ClientAsk`] to a 2026-07-28 MCP client, which can answer; for anyone
//!   else 200 `success: false`, because the gateway cannot ask its caller.
//!
//! The client finds the server's era (2026-07-28, or a 2025-11-25 session)
//! itself; the watch of tool list announcements is here too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use serde_json::json;

use super::{
    FetchError, Fetched, ForwardError, HttpResponse, Native, Upstream, UpstreamCall, UpstreamReply, WatchBounds,
    Watched,
};
use crate::config::UpstreamConfig;
use crate::dialect::{CatalogShapeError, CatalogTool, Skipped};
use crate::mcp::client::{result_type, Exchange, McpClient, McpError, ToolListEvent, WatchSettings};
use crate::mcp::mapping::{self, MappingSettings};
use crate::mcp::v2026_07_28::{ClientAsk, MISSING_REQUIRED_CLIENT_CAPABILITY};
use crate::wire::{self, CallContext, UpstreamResult};

/// An MCP upstream's client, and whose token it is sent.
#[derive(Debug)]
pub(super) struct McpUpstream {
    /// The client for the upstream's MCP endpoint (its `url`).
    client: McpClient,
    /// The `[authorization]` provider whose per-user token is sent.
    user_token: Option<String>,
}

impl McpUpstream {
    /// The client for the MCP endpoint at `config.url`.
    pub(super) fn new(config: &UpstreamConfig) -> Result<McpUpstream, http::uri::InvalidUri> {
        Ok(McpUpstream {
            client: McpClient::new(config.url.get_ref().0.parse()?, config.connect_timeout.0),
            user_token: config.user_token.as_ref().map(|p| p.get_ref().clone()),
        })
    }

    /// Every page of `tools/list`, as one `{"tools": [...]}` body for the
    /// poller (which skips the parse when the bytes did not change).
    pub(super) async fn fetch_catalog(
        &self,
        upstream: &Upstream,
        authorization: Option<HeaderValue>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        let exchange = Exchange {
            timeout,
            max_bytes,
            authorization: authorization.as_ref(),
            circuit: Some(&upstream.circuit),
            passthrough: None,
            span: None,
        };
        let tools = self.client.list_tools(exchange).await.map_err(|e| match e {
            McpError::Connect(detail) => FetchError::Unreachable(detail),
            McpError::Timeout(_) => FetchError::Timeout(timeout),
            McpError::Status { status, .. } => FetchError::Status(status),
            McpError::TooLarge(limit) => FetchError::TooLarge(limit),
            McpError::Initialize(inner) if matches!(*inner, McpError::Connect(_)) => {
                FetchError::Unreachable(inner.to_string())
            }
            other => FetchError::Protocol(format!("MCP tools/list: {other}")),
        })?;
        let body = json!({ "tools": tools }).to_string();
        if body.len() > max_bytes {
            return Err(FetchError::TooLarge(max_bytes));
        }
        Ok(Fetched::Body { body: Bytes::from(body), etag: None })
    }

    /// Reads a body from [`McpUpstream::fetch_catalog`] into catalog tools.
    pub(super) fn read_catalog(
        &self,
        upstream: &Upstream,
        body: &[u8],
    ) -> Result<(Vec<CatalogTool>, Vec<Skipped>), CatalogShapeError> {
        let settings = MappingSettings {
            toolkit: upstream.toolkit.as_deref(),
            version: upstream.version.as_deref(),
            user_authorization: self.user_token.as_deref(),
        };
        mapping::normalise_mcp_catalog(body, settings)
    }

    /// The revision the server is spoken to in, once known.
    pub(super) fn protocol_version(&self) -> Option<String> {
        self.client.protocol_version()
    }

    /// Watches the server's tool list announcements (see
    /// [`Upstream::watch_tool_list`]).
    pub(super) async fn watch_tool_list(
        &self,
        upstream: &Upstream,
        authorization: Option<HeaderValue>,
        bounds: WatchBounds,
        refresh_on_open: bool,
    ) -> Watched {
        let opened = AtomicBool::new(false);
        let settings = WatchSettings {
            open_timeout: bounds.open_timeout,
            idle_timeout: bounds.idle_timeout,
            max_event_bytes: bounds.max_event_bytes,
            authorization: authorization.as_ref(),
        };
        let on_event = |event: ToolListEvent| match event {
            ToolListEvent::Opened => {
                opened.store(true, Ordering::Relaxed);
                if refresh_on_open {
                    upstream.refresh_soon();
                }
            }
            ToolListEvent::Changed => {
                tracing::debug!(upstream = &*upstream.name, "the MCP server says its tool list changed");
                upstream.refresh_soon();
            }
        };
        let end = self.client.watch_tool_list(settings, &on_event).await;
        Watched { opened: opened.load(Ordering::Relaxed), end }
    }

    /// `tools/call` of the MCP tool `call.tool` (its original MCP name).
    pub(super) async fn call(
        &self,
        upstream: &Upstream,
        call: UpstreamCall<'_>,
        authorization: Option<HeaderValue>,
        max_bytes: usize,
    ) -> Result<UpstreamReply, ForwardError> {
        // The calling user's token, injected into the context because every
        // tool of this upstream requires the provider.
        let authorization = match &self.user_token {
            Some(provider) => user_bearer(call.context, provider).or(authorization),
            None => authorization,
        };
        let exchange = Exchange {
            timeout: upstream.call_timeout,
            max_bytes,
            authorization: authorization.as_ref(),
            circuit: Some(&upstream.circuit),
            passthrough: call.passthrough,
            span: call.span,
        };
        match self.client.call_tool(call.tool, &call.input.value(), exchange).await {
            // A 2026-07-28 client that sent its capabilities can answer what
            // the server asks of it; anyone else gets a tool failure.
            Ok(result) if call.passthrough.is_some() && result_type(&result) == Some("input_required") => {
                Ok(asked(ClientAsk::Input(result)))
            }
            Ok(result) => {
                Ok(UpstreamReply::Native { mapped: mapping::call_result(&result), native: Native::McpResult(result) })
            }
            Err(McpError::Rpc(error))
                if call.passthrough.is_some() && error.code == MISSING_REQUIRED_CLIENT_CAPABILITY =>
            {
                let required = error.data.as_ref().and_then(|d| d.get("requiredCapabilities")).cloned();
                Ok(asked(ClientAsk::Capabilities(required.unwrap_or_else(|| json!({})))))
            }
            Err(McpError::Rpc(error)) => {
                Ok(UpstreamReply::Result(mapping::rpc_error(error.code, &error.message, error.data.as_ref())))
            }
            Err(e) => failure(upstream, e),
        }
    }
}

/// The server asks the client something first: passed on to a client that
/// can answer, a tool failure for any other.
fn asked(ask: ClientAsk) -> UpstreamReply {
    let mapped = UpstreamResult {
        duration: None,
        success: false,
        value: None,
        error: Some(wire::tool_error(
            "The tool server needs more from the client before it can answer",
            "a 2026-07-28 MCP server asked the client for input or a capability",
            false,
        )),
    };
    UpstreamReply::Native { mapped, native: Native::McpAsk(ask) }
}

/// `Bearer <token>` of `provider` from the call's context.
fn user_bearer(context: &CallContext, provider: &str) -> Option<HeaderValue> {
    let token = context.authorization.iter().find(|a| a.id == provider)?;
    let mut value = HeaderValue::try_from(format!("Bearer {}", token.token)).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// A failed exchange in the error taxonomy of the re-wrap step.
fn failure(upstream: &Upstream, error: McpError) -> Result<UpstreamReply, ForwardError> {
    let name = upstream.name.to_string();
    match error {
        McpError::Connect(detail) => Err(ForwardError::Connect { upstream: name, detail }),
        e @ McpError::Initialize(_) => Err(ForwardError::Connect { upstream: name, detail: e.to_string() }),
        McpError::Timeout(_) => Err(ForwardError::Timeout { upstream: name, timeout: upstream.call_timeout }),
        McpError::TooLarge(limit) => Err(ForwardError::TooLarge { upstream: name, limit }),
        McpError::Broken(detail) => Err(ForwardError::Broken { upstream: name, detail }),
        // Not JSON, so the re-wrap step never passes an MCP error body on as
        // an OTC 400/422 body; 502-504 stay retryable.
        McpError::Status { status, body } => Ok(UpstreamReply::Http(HttpResponse {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            is_json: false,
            body: Bytes::from(body),
        })),
        other => Ok(UpstreamReply::Result(UpstreamResult {
            duration: None,
            success: false,
            value: None,
            error: Some(wire::tool_error(
                "The tool server gave an answer the gateway could not read",
                &format!("upstream {name}: {other}"),
                false,
            )),
        })),
    }
}
