//! `RequestError`: every way a request can fail, and the one place each
//! becomes a status and a body.
//!
//! Messages never reveal more than the caller may see: upstream names and
//! internal detail go to `developer_message`, secrets go nowhere.

use std::collections::BTreeMap;

use bytes::Bytes;
use serde_json::Value;

use crate::approvals::Refusal;
use crate::auth::AuthError;
use crate::browser::BrowserRefusal;
use crate::catalog::search::SearchError;
use crate::catalog::LookupError;
use crate::oauth::{FlowError, OAuthError};
use crate::otel::Span;
use crate::reply::Reply;
use crate::resolve::ToolIdError;
use crate::vault::VaultError;
use crate::wire::{ServerErrorBody, ValidationErrorBody, SCHEMA};

mod missing;

pub(crate) use missing::utc;
pub use missing::{ApprovalChallenge, AuthorizationChallenge, MissingRequirements, Ungranted};

/// Everything that ends a request with an error status.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// No such endpoint.
    #[error("no route for {0}")]
    NotFound(String),
    /// The endpoint exists but not for this method.
    #[error("method not allowed; allowed: {allow}")]
    MethodNotAllowed {
        /// The `Allow` header value.
        allow: &'static str,
    },
    /// The body exceeds `server.max_body_bytes`.
    #[error("request body over {limit} bytes")]
    BodyTooLarge {
        /// The limit.
        limit: usize,
    },
    /// The body could not be read off the connection.
    #[error("could not read the request body: {0}")]
    BodyUnreadable(String),
    /// The request head is not HTTP/1.x that parses.
    #[error("malformed request head: {0}")]
    MalformedHead(String),
    /// The request headers exceed `server.max_header_bytes`.
    #[error("request headers over {limit} bytes")]
    HeadersTooLarge {
        /// The limit.
        limit: usize,
    },
    /// Both Content-Length and Transfer-Encoding, or several Content-Lengths:
    /// the framing a request-smuggling attack relies on.
    #[error("ambiguous request framing: {0}")]
    AmbiguousFraming(&'static str),
    /// More header lines than the gateway reads.
    #[error("more than {limit} request header lines")]
    TooManyHeaders {
        /// The limit.
        limit: usize,
    },
    /// An HTTP/1.1 request without a `Host`, or with several (RFC 9112 3.2).
    #[error("bad Host header: {0}")]
    HostHeader(&'static str),
    /// A `Transfer-Encoding` other than `chunked` alone.
    #[error("unsupported Transfer-Encoding")]
    UnsupportedTransferEncoding,
    /// An `Expect` other than `100-continue`.
    #[error("unsupported Expect")]
    ExpectationFailed,
    /// The client did not send a whole request head within
    /// `server.header_timeout` of its first byte.
    #[error("request head not received within {0:?}")]
    HeadTimeout(std::time::Duration),
    /// A browser request from an `Origin` not in `allowed_origins`; `mcp`
    /// when it was for `/mcp`, which answers in JSON-RPC.
    #[error("Origin not allowed")]
    ForbiddenOrigin {
        /// Whether the route was `/mcp`.
        mcp: bool,
    },
    /// A `Host` this gateway does not answer (DNS rebinding protection).
    #[error("Host not served by this gateway; see server.allowed_hosts")]
    MisdirectedHost,
    /// The client did not send its body within `server.body_timeout`.
    #[error("request body not received within {0:?}")]
    BodyTimeout(std::time::Duration),
    /// JSON nested deeper than `server.max_json_depth`.
    #[error("JSON nested deeper than {0} levels")]
    TooDeep(usize),
    /// Not JSON, not UTF-8, or fields of the wrong type.
    #[error("malformed call: {0}")]
    MalformedCall(String),
    /// A `$schema` naming a version the gateway does not speak.
    #[error("unsupported $schema {0:?}")]
    UnsupportedSchema(String),
    /// No `tool_id`.
    #[error("no tool_id")]
    MissingToolId,
    /// A `tool_id` that is not `Toolkit.Name[@version]`.
    #[error(transparent)]
    InvalidToolId(#[from] ToolIdError),
    /// No such tool or version.
    #[error(transparent)]
    Lookup(#[from] LookupError),
    /// The input does not match the tool's `input_schema`.
    #[error("invalid input: {0:?}")]
    InvalidInput(BTreeMap<String, String>),
    /// No upstream serving the tool could be reached (or all are behind an
    /// open circuit); nothing was sent.
    #[error("tool server unavailable: {detail}")]
    Unavailable {
        /// Why each was skipped.
        detail: String,
        /// When an open circuit will let a probe through.
        retry_after: Option<std::time::Duration>,
    },
    /// Missing or bad client credentials (401 with `WWW-Authenticate`).
    #[error("unauthenticated: {error}")]
    Unauthenticated {
        /// Why.
        error: AuthError,
        /// The gateway's protected resource metadata URL (`mode = "jwt"`),
        /// which the challenge names so that clients find where to get a
        /// token (RFC 9728 section 5.1).
        resource_metadata: Option<std::sync::Arc<str>>,
    },
    /// The tool needs something neither the gateway nor the client supplied.
    #[error("missing requirements: {0:?}")]
    MissingRequirements(MissingRequirements),
    /// A secret or token the gateway manages could not be read right now.
    #[error("{requirement}: {source}")]
    RequirementUnavailable {
        /// What it was for, e.g. `secret TWILIO_API_KEY`.
        requirement: String,
        /// Why (never the value).
        source: VaultError,
    },
    /// A managed provider's grant could not be read or refreshed right now
    /// (the store or the provider failed).
    #[error("authorization {provider}: {source}")]
    AuthorizationUnavailable {
        /// The provider.
        provider: String,
        /// Why (never a token).
        source: OAuthError,
    },
    /// A browser step of the OAuth flow (a link, the callback) that cannot
    /// go on: answered with a page.
    #[error("OAuth flow: {0}")]
    OAuthFlow(#[from] FlowError),
    /// An application's `POST /oauth/confirm` that cannot go on: answered
    /// in JSON.
    #[error("confirmation: {0}")]
    Confirmation(FlowError),
    /// A tool the caller's policies do not allow. Answered exactly as an
    /// unknown tool: a caller never learns that it exists.
    #[error("tool {0} denied by policy")]
    Denied(String),
    /// Over a `[[rate_limit]]`.
    #[error("rate limit {limit} exceeded")]
    RateLimited {
        /// The limit's name.
        limit: String,
        /// How long until a call would be allowed.
        retry_after: std::time::Duration,
    },
    /// More requests in flight than `server.max_in_flight`.
    #[error("over {0} requests in flight")]
    Overloaded(usize),
    /// The `call_id` was already used for another tool or input.
    #[error("call_id reused for a different call")]
    CallIdReused,
    /// The first call with this `call_id` is still running.
    #[error("a call with this call_id is still running")]
    CallInProgress,
    /// A held call that will not run: denied, expired, or run already.
    #[error("approval: {0}")]
    ApprovalRefused(crate::approvals::Refusal),
    /// The approvals' journal could not be read or written.
    #[error("approvals unavailable: {0}")]
    ApprovalUnavailable(crate::approvals::ApprovalError),
    /// The caller has this many calls waiting for approval already.
    #[error("{0} calls wait for approval already")]
    ApprovalsWaiting(usize),
    /// A tool search whose query, limit or version is unusable.
    #[error("bad search: {0}")]
    Search(#[from] SearchError),
    /// The upstream itself refused the call before running the tool (its 400
    /// or 422), passed on with its status.
    #[error("tool server refused the call with HTTP {status}")]
    UpstreamRefused {
        /// 400 or 422.
        status: u16,
        /// The upstream's error body.
        body: Value,
    },
}

impl From<BrowserRefusal> for RequestError {
    fn from(refusal: BrowserRefusal) -> RequestError {
        match refusal {
            BrowserRefusal::ForbiddenOrigin { mcp } => RequestError::ForbiddenOrigin { mcp },
            BrowserRefusal::MisdirectedHost => RequestError::MisdirectedHost,
        }
    }
}

impl From<crate::approvals::ApprovalError> for RequestError {
    fn from(error: crate::approvals::ApprovalError) -> RequestError {
        match error {
            crate::approvals::ApprovalError::TooManyWaiting(n) => RequestError::ApprovalsWaiting(n),
            other => RequestError::ApprovalUnavailable(other),
        }
    }
}

/// Ends a step's span (`otel/`), failed when the step failed. Inlined, so
/// that with tracing off a step's result is not moved through a call (a
/// `RequestError` is large): what is left is one check.
#[inline(always)]
pub(crate) fn ended<T>(mut span: Option<Span>, step: Result<T, RequestError>) -> Result<T, RequestError> {
    if let (Some(span), Err(e)) = (&mut span, &step) {
        fail(span, e);
    }
    step
}

/// Marks a span failed with the error's kind: its variant's name, never
/// what a client or an upstream wrote.
#[inline(always)]
pub(crate) fn mark_failed(span: Option<&mut Span>, error: &RequestError) {
    if let Some(span) = span {
        fail(span, error);
    }
}

#[cold]
fn fail(span: &mut Span, error: &RequestError) {
    let kind = format!("{error:?}");
    span.fail(kind.split(['(', ' ', '{']).next().unwrap_or_default());
}

impl RequestError {
    /// The HTTP status for this error (docs/api.md, "What happens on each kind of error").
    pub fn status(&self) -> u16 {
        match self {
            RequestError::NotFound(_) => 404,
            RequestError::MethodNotAllowed { .. } => 405,
            RequestError::BodyTooLarge { .. } => 413,
            RequestError::HeadersTooLarge { .. } | RequestError::TooManyHeaders { .. } => 431,
            RequestError::BodyTimeout(_) | RequestError::HeadTimeout(_) => 408,
            RequestError::HostHeader(_) => 400,
            RequestError::UnsupportedTransferEncoding => 501,
            RequestError::ExpectationFailed => 417,
            RequestError::ForbiddenOrigin { .. } => 403,
            RequestError::MisdirectedHost => 421,
            RequestError::AmbiguousFraming(_) | RequestError::TooDeep(_) => 400,
            RequestError::InvalidInput(_) => 422,
            RequestError::UpstreamRefused { status, .. } => *status,
            RequestError::Unauthenticated { .. } => 401,
            RequestError::Overloaded(_) => 503,
            RequestError::RateLimited { .. } => 429,
            RequestError::Denied(_) => 400,
            RequestError::MissingRequirements(_) | RequestError::RequirementUnavailable { .. } => 400,
            RequestError::AuthorizationUnavailable { .. } | RequestError::ApprovalUnavailable(_) => 503,
            RequestError::ApprovalRefused(_) => 403,
            RequestError::ApprovalsWaiting(_) => 429,
            RequestError::OAuthFlow(e) | RequestError::Confirmation(e) => match e {
                FlowError::UnknownProvider(_) | FlowError::NoLogin => 404,
                FlowError::UnknownLink if matches!(self, RequestError::Confirmation(_)) => 404,
                FlowError::WrongUser
                | FlowError::SignInRequired
                | FlowError::OtherBrowser
                | FlowError::NotThisBrowser => 403,
                FlowError::Failed(_) => 502,
                _ => 400,
            },
            RequestError::BodyUnreadable(_)
            | RequestError::MalformedHead(_)
            | RequestError::MalformedCall(_)
            | RequestError::UnsupportedSchema(_)
            | RequestError::MissingToolId
            | RequestError::InvalidToolId(_)
            | RequestError::Lookup(_)
            | RequestError::Unavailable { .. }
            | RequestError::CallIdReused
            | RequestError::CallInProgress
            | RequestError::Search(_) => 400,
        }
    }

    /// The message a person (or a model) reads.
    fn message(&self) -> String {
        match self {
            RequestError::NotFound(_) => "There is nothing at this path".into(),
            RequestError::MethodNotAllowed { allow } => format!("This endpoint only accepts {allow}"),
            RequestError::BodyTooLarge { limit } => {
                format!("The request body is larger than the {limit} bytes allowed")
            }
            RequestError::BodyUnreadable(_) => "The request body could not be read".into(),
            RequestError::MalformedHead(_) => "The request is not well-formed HTTP/1.1".into(),
            RequestError::HeadersTooLarge { limit } => {
                format!("The request headers are larger than the {limit} bytes allowed")
            }
            RequestError::AmbiguousFraming(_) => "The request's length is ambiguous".into(),
            RequestError::TooManyHeaders { limit } => format!("The request has more than {limit} header lines"),
            RequestError::HostHeader(_) => "The request must carry exactly one Host header".into(),
            RequestError::UnsupportedTransferEncoding => "Only Transfer-Encoding: chunked is supported".into(),
            RequestError::ExpectationFailed => "Only Expect: 100-continue is supported".into(),
            RequestError::HeadTimeout(_) => "The request head took too long to arrive".into(),
            RequestError::ForbiddenOrigin { .. } => "Forbidden: this Origin may not use the gateway".into(),
            RequestError::MisdirectedHost => "This gateway does not serve that Host".into(),
            RequestError::BodyTimeout(_) => "The request body took too long to arrive".into(),
            RequestError::TooDeep(max) => format!("The request body is nested deeper than {max} levels"),
            RequestError::MalformedCall(_) => "The request body is not a valid tool call".into(),
            RequestError::UnsupportedSchema(s) => format!("OTC version {s:?} is not supported; use otc://1.0"),
            RequestError::MissingToolId => "The request has no tool_id".into(),
            RequestError::InvalidToolId(e) => format!("Invalid tool id: {e}"),
            RequestError::Lookup(LookupError::UnknownTool(key))
            | RequestError::Lookup(LookupError::UnknownVersion { key, .. })
            | RequestError::Denied(key) => format!("Tool '{key}' was not found"),
            RequestError::Lookup(LookupError::Held { tool, .. }) => {
                format!("Tool '{tool}' waits for an operator's review of its definition and cannot be called yet")
            }
            RequestError::RateLimited { retry_after, .. } => {
                format!("Too many calls; retry in {} s", retry_after.as_secs_f64().ceil().max(1.0))
            }
            RequestError::InvalidInput(_) => "Some input parameters are invalid".into(),
            RequestError::Unavailable { .. } => "The tool server is temporarily unavailable".into(),
            RequestError::UpstreamRefused { .. } => "The tool server refused the call".into(),
            RequestError::Overloaded(_) => "The gateway is at capacity; retry shortly".into(),
            RequestError::CallIdReused => {
                "This call_id was already used for a different call; use a new call_id".into()
            }
            RequestError::CallInProgress => "A call with this call_id is still running; retry later".into(),
            RequestError::ApprovalRefused(refusal) => match refusal {
                Refusal::Denied { by, at } => format!(
                    "This call was denied by {} at {}: it will not run (a denial is final for this call)",
                    Refusal::decider(by),
                    utc(*at)
                ),
                Refusal::Expired(at) => format!(
                    "Nobody approved this call before {}: it will not run (an expired approval is final for this call)",
                    utc(*at)
                ),
                Refusal::Ran => "This call was approved once and has run; its answer is no longer kept. A new call needs its own approval".into(),
            },
            RequestError::ApprovalUnavailable(_) => "Approvals are temporarily unavailable; retry shortly".into(),
            RequestError::ApprovalsWaiting(n) => format!(
                "{n} of your calls wait for approval already: another is held once one of them is decided or expires"
            ),
            RequestError::Search(e) => capitalised(&e.to_string()),
            RequestError::Unauthenticated { error, .. } => {
                format!("The gateway needs valid credentials: {}", error.public_message())
            }
            RequestError::MissingRequirements(missing) => missing.describe(),
            RequestError::RequirementUnavailable { requirement, .. } => {
                format!("The tool's {requirement} is temporarily unavailable")
            }
            RequestError::AuthorizationUnavailable { provider, .. } => {
                format!("Authorization with {provider} is temporarily unavailable; retry shortly")
            }
            RequestError::Confirmation(e) => match e {
                FlowError::UnknownLink => "No flow awaits confirmation under this flow_id".into(),
                FlowError::WrongUser => {
                    "This flow belongs to another user; nothing was stored and the flow has ended".into()
                }
                other => capitalised(&other.to_string()),
            },
            RequestError::OAuthFlow(e) => match e {
                FlowError::UnknownLink | FlowError::Expired | FlowError::Used => {
                    format!("{}. Call the tool again for a new link.", capitalised(&e.to_string()))
                }
                FlowError::WrongUser => "This link belongs to another user, so nothing was stored. Open it signed in as the user who asked for it, or ask for a new link.".into(),
                FlowError::SignInRequired => {
                    "This browser is not signed in to the gateway, so nothing was stored. Open the link again in the browser where you signed in.".into()
                }
                FlowError::OtherBrowser => {
                    "This sign-in was started in another browser. Open the link again in this browser.".into()
                }
                FlowError::NotThisBrowser => {
                    "This connection was started in another browser, so nothing was stored. Open the link again in the browser you finish in.".into()
                }
                FlowError::Refused(_) => {
                    "The provider did not grant access, so nothing was stored. Call the tool again to retry.".into()
                }
                FlowError::Failed(_) => {
                    "The provider's answer could not be used, so nothing was stored. Call the tool again to retry."
                        .into()
                }
                other => capitalised(&other.to_string()),
            },
        }
    }

    /// Extra detail for developers and logs; never shown to a model.
    fn developer_message(&self) -> Option<String> {
        match self {
            RequestError::NotFound(path) => {
                Some(format!("{path} is not served; the gateway serves GET /health, GET /tools, GET /tools/search, POST /tools/call, POST /call and POST /mcp"))
            }
            RequestError::MethodNotAllowed { allow } => Some(format!("send this path with {allow}; see the Allow header")),
            RequestError::InvalidInput(_) | RequestError::UpstreamRefused { .. } => None,
            RequestError::Unauthenticated { .. } => {
                Some("send Authorization: Bearer <JWT or API key>, or OXP-API-Key: <key>".into())
            }
            // Word for word what an unknown tool gets.
            RequestError::Denied(key) => Some(LookupError::UnknownTool(key.clone()).to_string()),
            RequestError::RateLimited { limit, .. } => Some(format!("over the rate limit {limit:?}")),
            RequestError::Unavailable { detail, retry_after: Some(wait) } => {
                Some(format!("{detail}; retry_after_ms={}", wait.as_millis().max(1)))
            }
            RequestError::MissingRequirements(missing) => Some(missing.developer_message()),
            RequestError::BodyTooLarge { .. } => Some("raise server.max_body_bytes to accept larger calls".into()),
            RequestError::UnsupportedSchema(_) => {
                Some("supported: otc://1.0, urn:oxp:1.0, the 1.0 spec URLs, or no $schema".into())
            }
            RequestError::MissingToolId => Some("send {\"request\": {\"tool_id\": \"Toolkit.Name@1.0.0\", ...}}".into()),
            RequestError::Search(_) => Some("send GET /tools/search?q=<words>[&limit=<1-100>][&version=<x.y.z>]".into()),
            other => Some(other.to_string()),
        }
    }

    /// The error as a response: the only place statuses and bodies are chosen.
    pub fn to_reply(&self) -> Reply {
        let status = self.status();
        let message = self.message();
        if let RequestError::OAuthFlow(e) = self {
            // A person at a browser reads it; the detail goes to the log.
            tracing::info!(error = %e, "an OAuth flow step ended without a grant");
            return Reply::page(status, "Authorization did not complete", &message);
        }
        let body = match self {
            // The MCP front's refusals are JSON-RPC errors; this one comes
            // before the body (and its id) is read.
            RequestError::ForbiddenOrigin { mcp: true } => serde_json::to_vec(&serde_json::json!({
                "jsonrpc": "2.0",
                "id": null,
                "error": {"code": -32000, "message": "Forbidden: this Origin may not use the MCP endpoint"},
            })),
            RequestError::InvalidInput(errors) => {
                serde_json::to_vec(&ValidationErrorBody { schema: SCHEMA, message: &message, parameter_errors: errors })
            }
            RequestError::UpstreamRefused { body, .. } => {
                let mut body = body.clone();
                if let Value::Object(obj) = &mut body {
                    obj.insert("$schema".into(), Value::String(SCHEMA.into()));
                    obj.entry("message").or_insert_with(|| Value::String(message.clone()));
                }
                serde_json::to_vec(&body)
            }
            _ => serde_json::to_vec(&ServerErrorBody {
                schema: SCHEMA,
                message: &message,
                developer_message: self.developer_message().as_deref(),
                missing_requirements: match self {
                    RequestError::MissingRequirements(missing) => Some(missing.to_json()),
                    _ => None,
                }
                .as_ref(),
            }),
        };
        let mut headers = Vec::new();
        match self {
            RequestError::MethodNotAllowed { allow } => headers.push(("allow", (*allow).to_owned())),
            RequestError::Unauthenticated { error, resource_metadata } => {
                headers.push(("www-authenticate", error.www_authenticate(resource_metadata.as_deref())));
            }
            RequestError::Overloaded(_) => headers.push(("retry-after", "1".to_owned())),
            RequestError::RateLimited { retry_after, .. } => {
                let seconds = retry_after.as_secs_f64().ceil().max(1.0);
                headers.push(("retry-after", format!("{seconds}")));
            }
            RequestError::AuthorizationUnavailable { .. } => headers.push(("retry-after", "5".to_owned())),
            _ => {}
        }
        Reply {
            status,
            headers,
            content_type: crate::reply::JSON,
            // Serialising these plain structs cannot fail.
            body: Bytes::from(body.unwrap_or_default()),
            // These are answered without reading the body, which may be large.
            close: matches!(
                self,
                RequestError::BodyTooLarge { .. }
                    | RequestError::BodyUnreadable(_)
                    | RequestError::MalformedHead(_)
                    | RequestError::Unauthenticated { .. }
                    | RequestError::HeadersTooLarge { .. }
                    | RequestError::AmbiguousFraming(_)
                    | RequestError::TooManyHeaders { .. }
                    | RequestError::HostHeader(_)
                    | RequestError::UnsupportedTransferEncoding
                    | RequestError::ExpectationFailed
                    | RequestError::HeadTimeout(_)
                    | RequestError::ForbiddenOrigin { .. }
                    | RequestError::MisdirectedHost
                    | RequestError::BodyTimeout(_)
                    | RequestError::Overloaded(_)
            ),
        }
    }
}

/// `text` with its first letter upper-case.
fn capitalised(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map(|c| c.to_uppercase().chain(chars).collect()).unwrap_or_default()
}
