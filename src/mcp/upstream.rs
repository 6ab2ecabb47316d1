//! An MCP upstream as the rest of the gateway sees it: a catalog fetch that
//! yields a body for the poller, and a call that yields a [`CallReply`] for
//! `call::rewrap_response`, with the OTC error taxonomy kept:
//!
//! - no connection, or no session (initialize failed): the tool was not
//!   called, so the call may go to another replica, and with none left it is
//!   a 400 "temporarily unavailable";
//! - no answer within `call_timeout` once sent: 200 `success: false`,
//!   `can_retry: true`;
//! - a JSON-RPC error, an HTTP error or an unreadable answer: 200
//!   `success: false`, the detail in `developer_message`.

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use serde_json::{json, Value};

use super::client::{Exchange, McpClient, McpError};
use super::mapping::{self, MappingSettings};
use crate::catalog::dialect::{CatalogShapeError, Skipped};
use crate::catalog::CatalogTool;
use crate::upstream::{CallReply, FetchError, Fetched, ForwardError, Upstream};
use crate::wire::CallContext;

/// Every page of `tools/list`, as one `{"tools": [...]}` body for the
/// poller (which skips the parse when the bytes did not change).
pub async fn fetch_catalog(
    upstream: &Upstream,
    client: &McpClient,
    authorization: Option<HeaderValue>,
    timeout: Duration,
    max_bytes: usize,
) -> Result<Fetched, FetchError> {
    let exchange =
        Exchange { timeout, max_bytes, authorization: authorization.as_ref(), circuit: Some(&upstream.circuit) };
    let tools = client.list_tools(exchange).await.map_err(|e| match e {
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

/// Reads a body from [`fetch_catalog`] into catalog tools.
pub fn normalise_catalog(
    upstream: &Upstream,
    body: &[u8],
) -> Result<(Vec<CatalogTool>, Vec<Skipped>), CatalogShapeError> {
    let settings = MappingSettings {
        toolkit: upstream.toolkit.as_deref(),
        version: upstream.version.as_deref(),
        user_authorization: upstream.user_token.as_deref(),
    };
    mapping::normalise_mcp_catalog(body, settings)
}

/// `tools/call` of the MCP tool `name` (its original MCP name), answered as
/// an OTC call result body.
pub async fn call(
    upstream: &Upstream,
    client: &McpClient,
    name: &str,
    input: &Value,
    context: &CallContext,
    authorization: Option<HeaderValue>,
    max_bytes: usize,
) -> Result<CallReply, ForwardError> {
    // The calling user's token, injected into the context because every
    // tool of this upstream requires the provider.
    let authorization = match &upstream.user_token {
        Some(provider) => user_bearer(context, provider).or(authorization),
        None => authorization,
    };
    let exchange = Exchange {
        timeout: upstream.call_timeout,
        max_bytes,
        authorization: authorization.as_ref(),
        circuit: Some(&upstream.circuit),
    };
    let outcome = match client.call_tool(name, input, exchange).await {
        Ok(result) => mapping::call_result(&result),
        Err(McpError::Rpc(error)) => mapping::rpc_error(error.code, &error.message, error.data.as_ref()),
        Err(e) => return failure(upstream, e),
    };
    Ok(CallReply { status: StatusCode::OK, is_json: true, body: Bytes::from(outcome.to_string()) })
}

/// `Bearer <token>` of `provider` from the call's context.
fn user_bearer(context: &CallContext, provider: &str) -> Option<HeaderValue> {
    let token = context.authorization.iter().find(|a| a.id == provider)?;
    let mut value = HeaderValue::try_from(format!("Bearer {}", token.token)).ok()?;
    value.set_sensitive(true);
    Some(value)
}

/// A failed exchange in the error taxonomy of `rewrap_response`.
fn failure(upstream: &Upstream, error: McpError) -> Result<CallReply, ForwardError> {
    let name = upstream.name.clone();
    match error {
        McpError::Connect(detail) => Err(ForwardError::Connect { upstream: name, detail }),
        e @ McpError::Initialize(_) => Err(ForwardError::Connect { upstream: name, detail: e.to_string() }),
        McpError::Timeout(_) => Err(ForwardError::Timeout { upstream: name, timeout: upstream.call_timeout }),
        McpError::TooLarge(limit) => Err(ForwardError::TooLarge { upstream: name, limit }),
        McpError::Broken(detail) => Err(ForwardError::Broken { upstream: name, detail }),
        // Not JSON, so `rewrap_response` never passes an MCP error body on as
        // an OTC 400/422 body; 502-504 stay retryable.
        McpError::Status { status, body } => Ok(CallReply {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY),
            is_json: false,
            body: Bytes::from(body),
        }),
        other => {
            let outcome = json!({"success": false, "error": crate::wire::tool_error(
                "The tool server gave an answer the gateway could not read",
                &format!("upstream {name}: {other}"),
                false,
            )});
            Ok(CallReply { status: StatusCode::OK, is_json: true, body: Bytes::from(outcome.to_string()) })
        }
    }
}
