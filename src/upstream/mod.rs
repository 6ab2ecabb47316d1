//! One tool server behind the gateway: its settings, and the one place that
//! knows whether it speaks OTC, MCP or OpenAPI.
//!
//! An [`Upstream`] is built from its config entry once (and kept across
//! reloads that leave it unchanged, with its circuit and pools). Everything
//! protocol-specific sits behind [`Protocol`]: [`otc`] (GET /tools, POST
//! /tools/call over the lean [`call_client`]), [`mcp`] (tools/list and
//! tools/call through the MCP client) and [`openapi`] (a REST API's OpenAPI
//! document, its operations called over HTTP). The catalog poller and the call
//! pipeline only see the three questions every upstream answers: fetch the
//! catalog, read it into tool definitions, run a call; and, for the upstreams
//! that announce tool list changes (MCP), a fourth: watch for them.

mod call_client;
mod fetch;
mod mcp;
mod openapi;
mod otc;
mod response_head;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use serde_json::Value;

use crate::circuit::Circuit;
use crate::config::{self, Grants, SecretRef, UpstreamConfig};
use crate::dialect::{CatalogShapeError, CatalogTool, Skipped};
use crate::mcp::v2026_07_28::{ClientAsk, Passthrough};
use crate::otel::Span;
use crate::trace::OutgoingTrace;
use crate::wire::{CallContext, Input, UpstreamResult};

pub use crate::mcp::client::WatchEnd;

/// A configured upstream, ready to be called.
#[derive(Debug)]
pub struct Upstream {
    /// Its unique name from the config; shared, not copied, by what records
    /// a call (the ring of recent calls), which keeps only the name, so a
    /// removed upstream's instance (its connections) goes with its last call.
    pub name: Arc<str>,
    /// Its position in the config: the tie-breaker between equal priorities.
    pub order: usize,
    /// The higher wins when two upstreams serve the same tool id.
    pub priority: i64,
    /// Toolkit for bare tool ids.
    pub toolkit: Option<String>,
    /// Version for definitions without one.
    pub version: Option<String>,
    /// How long a call may take once sent.
    pub call_timeout: Duration,
    /// Sent as `Authorization: Bearer` on every fetch and call.
    pub bearer_token: Option<SecretRef>,
    /// The `[secrets]` its tools may receive.
    pub secret_grants: Grants,
    /// The providers whose user tokens its tools may receive.
    pub authorization_grants: Grants,
    /// The toolkits reserved for it.
    pub reserved_toolkits: Vec<String>,
    /// Fails calls fast while the upstream refuses connections.
    pub circuit: Circuit,
    /// What it speaks, with that protocol's clients.
    protocol: Protocol,
    /// Rung when the upstream announces that its tool list changed (or a
    /// reload wants it fetched now): its poller fetches at once.
    refresh: tokio::sync::Notify,
    /// Whether a poller (and a watcher) already tends this instance.
    tended: AtomicBool,
    /// Set when a reload removes this instance: its tasks end.
    retired: tokio::sync::watch::Sender<bool>,
}

/// The protocol an upstream speaks, with its clients: the one place the
/// gateway tells OTC, MCP and OpenAPI upstreams apart.
#[derive(Debug)]
// One per upstream, inside its `Arc`: the OTC variant's size costs nothing,
// where boxing it would add a pointer hop to every call.
#[allow(clippy::large_enum_variant)]
enum Protocol {
    /// Open Tool Calling 1.0.
    Otc(otc::OtcUpstream),
    /// Model Context Protocol over streamable HTTP.
    Mcp(mcp::McpUpstream),
    /// A REST API described by an OpenAPI document.
    OpenApi(openapi::OpenApiUpstream),
}

/// Why a catalog could not be fetched.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// No connection, or it broke.
    #[error("cannot reach {0}")]
    Unreachable(String),
    /// No complete answer in time.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// An answer, but not a 200 or 304.
    #[error("answered HTTP {0}")]
    Status(u16),
    /// Larger than the configured maximum.
    #[error("catalog larger than {0} bytes")]
    TooLarge(usize),
    /// An answer, but not the one the protocol calls for (MCP: a JSON-RPC
    /// error, a failed initialize, a broken event stream).
    #[error("{0}")]
    Protocol(String),
}

/// What a catalog fetch found.
#[derive(Debug)]
pub enum Fetched {
    /// 304: the catalog is the one already held.
    NotModified,
    /// A new body, with its ETag when the upstream gave one.
    Body {
        /// The catalog bytes.
        body: Bytes,
        /// For If-None-Match next time.
        etag: Option<String>,
    },
}

/// Why a call could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// No connection could be made: nothing was sent, so another replica may
    /// take the call.
    #[error("cannot connect to {upstream}: {detail}")]
    Connect {
        /// The upstream's name.
        upstream: String,
        /// What the connector said.
        detail: String,
    },
    /// The call was sent but no answer came within `call_timeout`.
    #[error("{upstream} did not answer within {timeout:?}")]
    Timeout {
        /// The upstream's name.
        upstream: String,
        /// The configured call timeout.
        timeout: Duration,
    },
    /// The call was sent and the connection broke before a full answer.
    #[error("{upstream} broke the connection: {detail}")]
    Broken {
        /// The upstream's name.
        upstream: String,
        /// What hyper said.
        detail: String,
    },
    /// The answer was larger than the configured maximum.
    #[error("{upstream} answered with more than {limit} bytes")]
    TooLarge {
        /// The upstream's name.
        upstream: String,
        /// The limit.
        limit: usize,
    },
}

/// An upstream's HTTP response to a call, read in full.
#[derive(Debug)]
pub struct HttpResponse {
    /// Its status.
    pub status: StatusCode,
    /// Whether its `Content-Type` says JSON.
    pub is_json: bool,
    /// Its body, de-chunked.
    pub body: Bytes,
}

/// What an upstream answered to a call, for the pipeline's re-wrap step.
#[derive(Debug)]
pub enum UpstreamReply {
    /// An HTTP response whose body is still to be read: an OTC upstream's
    /// answer, or an MCP server's HTTP error.
    Http(HttpResponse),
    /// An outcome the upstream's protocol already decided, in OTC's shape
    /// (an MCP JSON-RPC error, an answer the gateway could not read).
    Result(UpstreamResult),
    /// An answer in the upstream's own protocol, for a caller that speaks
    /// it, with its mapping to OTC's shape for any other caller.
    Native {
        /// The answer in OTC's shape.
        mapped: UpstreamResult,
        /// The answer as the upstream gave it.
        native: Native,
    },
}

/// What an upstream call's client span says of its answer: the HTTP status,
/// and the kind of failure (never the upstream's words).
pub fn describe_reply(span: &mut Span, reply: &Result<UpstreamReply, ForwardError>) {
    match reply {
        Ok(UpstreamReply::Http(response)) => {
            let status = response.status.as_u16();
            span.set_int("http.response.status_code", i64::from(status));
            if status >= 400 {
                span.fail(status.to_string());
            }
        }
        Ok(UpstreamReply::Result(result) | UpstreamReply::Native { mapped: result, .. }) if !result.success => {
            span.set_bool("otc.tool.success", false);
        }
        Ok(_) => {}
        Err(ForwardError::Connect { .. }) => span.fail("connect"),
        Err(ForwardError::Timeout { .. }) => span.fail("timeout"),
        Err(ForwardError::Broken { .. }) => span.fail("broken"),
        Err(ForwardError::TooLarge { .. }) => span.fail("too_large"),
    }
}

/// An upstream's answer in its own protocol, handed as it is to a caller of
/// the same protocol (an MCP client of an MCP server) and mapped for any
/// other. The call pipeline only carries it (from `mcp/`, below it).
#[derive(Debug, Clone, PartialEq)]
pub enum Native {
    /// An MCP server's `CallToolResult`, as it wrote it.
    McpResult(Value),
    /// A 2026-07-28 MCP server asked the client something first; only for a
    /// call with a [`Passthrough`] (the client can answer).
    McpAsk(ClientAsk),
}

/// The bounds of one watch of an upstream's tool list announcements.
#[derive(Debug, Clone, Copy)]
pub struct WatchBounds {
    /// Connecting and opening the stream.
    pub open_timeout: Duration,
    /// The longest silence before the stream is opened anew.
    pub idle_timeout: Duration,
    /// The largest event.
    pub max_event_bytes: usize,
}

/// How one watch of an upstream's tool list announcements went.
#[derive(Debug)]
pub struct Watched {
    /// Whether the stream was open at some point.
    pub opened: bool,
    /// How the watch ended.
    pub end: WatchEnd,
}

/// One requirement a tool declares: a secret or a provider's user token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement<'r> {
    /// A `[secrets]` id.
    Secret(&'r str),
    /// An `[authorization.<provider>]`.
    Authorization(&'r str),
}

impl Requirement<'_> {
    /// The `[[upstreams]]` key that grants it.
    pub fn grant_key(&self) -> &'static str {
        match self {
            Requirement::Secret(_) => "secrets",
            Requirement::Authorization(_) => "authorization",
        }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        match self {
            Requirement::Secret(id) | Requirement::Authorization(id) => id,
        }
    }
}

/// One call as an upstream receives it.
#[derive(Debug, Clone, Copy)]
pub struct UpstreamCall<'a> {
    /// The tool's id as this upstream published it.
    pub tool: &'a str,
    /// The call id sent upstream.
    pub call_id: &'a str,
    /// The client's trace, continued.
    pub trace: OutgoingTrace<'a>,
    /// The validated input.
    pub input: &'a Input,
    /// The context after injection.
    pub context: &'a CallContext,
    /// What a 2026-07-28 MCP client sends on for a 2026-07-28 MCP server
    /// (capabilities, input responses); `None` for every other caller.
    pub passthrough: Option<&'a Passthrough>,
    /// The gateway's client span of this call, when it is recorded.
    pub span: Option<&'a Span>,
}

impl Upstream {
    /// Whether its tools carry versions of their own (OTC), so a new
    /// version is a new tool; an MCP server's and an OpenAPI document's
    /// tools are one tool per name, whatever version they are given.
    pub fn versions_its_tools(&self) -> bool {
        matches!(self.protocol, Protocol::Otc(_))
    }

    /// Builds an upstream from its config entry.
    pub fn from_config(order: usize, config: &UpstreamConfig) -> Result<Upstream, http::uri::InvalidUri> {
        let protocol = match config.protocol.get_ref() {
            config::Protocol::Otc => Protocol::Otc(otc::OtcUpstream::new(config)?),
            config::Protocol::Mcp => Protocol::Mcp(mcp::McpUpstream::new(config)?),
            config::Protocol::OpenApi => Protocol::OpenApi(openapi::OpenApiUpstream::new(config)?),
        };
        Ok(Upstream {
            name: config.name.get_ref().0.as_str().into(),
            order,
            priority: config.priority,
            toolkit: config.toolkit.as_ref().map(|t| t.0.clone()),
            version: config.version.as_ref().map(|v| v.0.clone()),
            call_timeout: config.call_timeout.0,
            bearer_token: config.bearer_token.as_ref().map(|t| t.get_ref().clone()),
            secret_grants: config.secret_grants(),
            authorization_grants: config.authorization_grants(),
            reserved_toolkits: config.toolkits.iter().map(|t| t.get_ref().0.clone()).collect(),
            circuit: Circuit::new(config.circuit_failures, config.circuit_cooldown.0),
            protocol,
            refresh: tokio::sync::Notify::new(),
            tended: AtomicBool::new(false),
            retired: tokio::sync::watch::Sender::new(false),
        })
    }

    /// Each of `requirements` that the gateway supplies (`config` has it in
    /// `[secrets]` or `[authorization]`) and this upstream was not granted:
    /// a tool never receives what its upstream was not granted.
    pub fn ungranted<'r>(
        &'r self,
        requirements: &'r crate::wire::Requirements,
        config: &'r config::Config,
    ) -> impl Iterator<Item = Requirement<'r>> + 'r {
        let secrets = requirements
            .secrets
            .iter()
            .filter(move |s| self.withholds_secret(&s.id, config))
            .map(|s| Requirement::Secret(&s.id));
        let providers = requirements
            .authorization
            .iter()
            .filter(move |a| self.withholds_provider(&a.id, config))
            .map(|a| Requirement::Authorization(&a.id));
        secrets.chain(providers)
    }

    /// Whether this upstream was granted all of `requirements` that the
    /// gateway supplies: none is [`Upstream::ungranted`]. Two plain loops
    /// over the same rule, not the chained iterator: inject asks it on every
    /// call that declares requirements.
    pub fn granted(&self, requirements: &crate::wire::Requirements, config: &config::Config) -> bool {
        !requirements.secrets.iter().any(|s| self.withholds_secret(&s.id, config))
            && !requirements.authorization.iter().any(|a| self.withholds_provider(&a.id, config))
    }

    /// The grant rule for a secret: the gateway supplies it (`[secrets]`)
    /// and this upstream was not granted it.
    fn withholds_secret(&self, id: &str, config: &config::Config) -> bool {
        !self.secret_grants.allows(id) && config.supplies_secret(id)
    }

    /// The grant rule for a provider's token: the gateway supplies it
    /// (`[authorization]`) and this upstream was not granted it.
    fn withholds_provider(&self, id: &str, config: &config::Config) -> bool {
        !self.authorization_grants.allows(id) && config.supplies_token(id)
    }

    /// Fetches the catalog as the upstream publishes it (OTC: GET /tools,
    /// with If-None-Match when an ETag is known; MCP: every page of
    /// tools/list), for [`Upstream::read_catalog`].
    pub async fn fetch_catalog(
        &self,
        authorization: Option<HeaderValue>,
        etag: Option<&str>,
        timeout: Duration,
        max_bytes: usize,
    ) -> Result<Fetched, FetchError> {
        match &self.protocol {
            Protocol::Otc(otc) => otc.fetch_catalog(self, authorization, etag, timeout, max_bytes).await,
            Protocol::Mcp(mcp) => mcp.fetch_catalog(self, authorization, timeout, max_bytes).await,
            Protocol::OpenApi(api) => api.fetch_catalog(self, authorization, etag, timeout, max_bytes).await,
        }
    }

    /// Reads a fetched catalog into canonical tool definitions.
    pub fn read_catalog(&self, body: &[u8]) -> Result<(Vec<CatalogTool>, Vec<Skipped>), CatalogShapeError> {
        match &self.protocol {
            Protocol::Otc(_) => otc::read_catalog(self, body),
            Protocol::Mcp(mcp) => mcp.read_catalog(self, body),
            Protocol::OpenApi(api) => api.read_catalog(self, body),
        }
    }

    /// Sends one call, bounded by `call_timeout`. A failure to connect is
    /// told apart from one after the request went out, because only the
    /// former may be retried elsewhere.
    pub async fn call(
        &self,
        call: UpstreamCall<'_>,
        authorization: Option<HeaderValue>,
        max_bytes: usize,
    ) -> Result<UpstreamReply, ForwardError> {
        match &self.protocol {
            Protocol::Otc(otc) => otc.call(self, call, authorization, max_bytes).await.map(UpstreamReply::Http),
            Protocol::Mcp(mcp) => mcp.call(self, call, authorization, max_bytes).await,
            Protocol::OpenApi(api) => api.call(self, call, authorization, max_bytes).await,
        }
    }

    /// The client span of a call to it (`attempt` 0 is the first target
    /// tried): named and described per its protocol's conventions (HTTP
    /// client, or MCP's `tools/call {tool}`).
    pub fn describe_call(&self, span: &mut Span, tool: &str, attempt: usize) {
        let protocol = match &self.protocol {
            Protocol::Otc(_) => {
                span.rename("POST");
                span.set("http.request.method", "POST");
                "otc"
            }
            Protocol::Mcp(mcp) => {
                span.rename(format!("tools/call {tool}"));
                span.set("mcp.method.name", "tools/call");
                span.set("gen_ai.tool.name", tool);
                if let Some(revision) = mcp.protocol_version() {
                    span.set("mcp.protocol.version", revision);
                }
                "mcp"
            }
            Protocol::OpenApi(_) => {
                // The operation's method is in its plan, not here: HTTP's
                // conventions name such a span `HTTP`.
                span.rename("HTTP");
                "openapi"
            }
        };
        span.set("otc.upstream", &*self.name);
        span.set("otc.upstream.protocol", protocol);
        // Another replica after one that could not be reached.
        span.set_int("otc.upstream.attempt", i64::try_from(attempt).unwrap_or(i64::MAX));
    }

    /// Whether the upstream may announce tool list changes (MCP), so that
    /// [`Upstream::watch_tool_list`] is worth running.
    pub fn may_announce_changes(&self) -> bool {
        matches!(self.protocol, Protocol::Mcp(_))
    }

    /// Watches the upstream's announcements that its tool list changed until
    /// the stream ends, asking for a catalog fetch ([`Upstream::refresh_soon`])
    /// at each, and when the stream opens if `refresh_on_open` (changes may
    /// have been missed while it was closed). `None` for an upstream that
    /// makes no announcements (OTC, OpenAPI).
    pub async fn watch_tool_list(
        &self,
        authorization: Option<HeaderValue>,
        bounds: WatchBounds,
        refresh_on_open: bool,
    ) -> Option<Watched> {
        match &self.protocol {
            Protocol::Otc(_) | Protocol::OpenApi(_) => None,
            Protocol::Mcp(mcp) => Some(mcp.watch_tool_list(self, authorization, bounds, refresh_on_open).await),
        }
    }

    /// The MCP revision the upstream is spoken to in, once known (`None` for
    /// OTC upstreams).
    pub fn mcp_protocol_version(&self) -> Option<String> {
        match &self.protocol {
            Protocol::Otc(_) | Protocol::OpenApi(_) => None,
            Protocol::Mcp(mcp) => mcp.protocol_version(),
        }
    }

    /// Claims this instance for one poller: true the first time only, so a
    /// reload that keeps the upstream does not start a second one.
    pub fn start_tending(&self) -> bool {
        !self.tended.swap(true, Ordering::AcqRel)
    }

    /// Asks the poller to fetch the catalog now rather than at its next turn.
    pub fn refresh_soon(&self) {
        self.refresh.notify_one();
    }

    /// Resolves when a fetch was asked for (a permit is kept when nobody waits).
    pub async fn refresh_wanted(&self) {
        self.refresh.notified().await;
    }

    /// Tells this instance's tasks to end: a reload removed or replaced it.
    pub fn retire(&self) {
        self.retired.send_replace(true);
        // Calls still running hold this instance a while yet: its idle
        // connections close now, not when the last of them ends.
        if let Protocol::Otc(otc) = &self.protocol {
            otc.close_idle_connections();
        }
    }

    /// Resolves once [`Upstream::retire`] was called.
    pub async fn retired(&self) {
        let mut retired = self.retired.subscribe();
        // The sender lives as long as `self`, so this only ends on `true`.
        let _ = retired.wait_for(|&r| r).await;
    }

    /// Closes the calls' idle connections that timed out or that the server
    /// closed; the catalog poller calls it, so they do not linger unused.
    pub fn close_stale_connections(&self) {
        if let Protocol::Otc(otc) = &self.protocol {
            otc.close_stale_connections();
        }
    }
}
