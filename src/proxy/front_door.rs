//! The front door: the one step every data-plane request passes, whichever
//! reader read it (the lean reader, `lean.rs`, or pingora's session,
//! `pingora_path.rs`). Readers only read bytes into a [`Head`] and offer the
//! body ([`RequestBody`]); here, in this order:
//!
//! 1. the browser policy (`Host`, then `Origin`: `browser.rs`), before any
//!    credential or body is read;
//! 2. the route and method;
//! 3. authentication, for the route's [`AudienceRule`];
//! 4. the body, within `max_body_bytes` and `body_timeout`;
//! 5. admission against `server.max_in_flight` (a request counts once its
//!    body has arrived);
//! 6. the route's handler (`call.rs`, `mcp_endpoint/`, `tool_search.rs`,
//!    `oauth_endpoint.rs`, ...);
//! 7. the request counted in the metrics, by route and status.
//!
//! A security rule of the data plane lives here once, for every route and
//! both readers.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method};

use crate::approval_endpoint;
use crate::auth::{resource, AudienceRule, AuthError, Caller, Credentials};
use crate::call::{execute_call, parse_call_request, render_result};
use crate::catalog::search::SearchRequest;
use crate::catalog::Catalog;
use crate::config::is_server_name;
use crate::error::RequestError;
use crate::gateway::{Gateway, Generation};
use crate::mcp_endpoint::{Listen, McpAnswer, McpEndpoint, McpHead};
use crate::oauth_endpoint::{self, BrowserRequest, OAuthRequest};
use crate::otel::{self, Kind, Span};
use crate::policy::server_view;
use crate::reply::Reply;
use crate::tool_search::{self, Front};

/// The largest `POST /oauth/confirm` body: `{"flow_id": "<43 characters>"}`.
const CONFIRM_BODY_LIMIT: usize = 4096;

/// The data plane's routes; `label` is how the metrics name them (one of
/// [`crate::metrics::ROUTES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Endpoint {
    /// `/health`.
    Health,
    /// `/tools`.
    Tools,
    /// `/tools/search`.
    Search,
    /// `/tools/call` and `/call`.
    Call,
    /// `/mcp`.
    Mcp,
    /// `/servers/<name>/tools`: a virtual server's listing (`catalog/servers.rs`).
    ServerTools,
    /// `/servers/<name>/tools/search`.
    ServerSearch,
    /// `/servers/<name>/tools/call`.
    ServerCall,
    /// `/servers/<name>/mcp`.
    ServerMcp,
    /// `/oauth/...`.
    OAuth,
    /// `/.well-known/oauth-protected-resource[...]`.
    ResourceMetadata,
    /// Anything else.
    Other,
}

impl Endpoint {
    /// The route a path is served by.
    pub(super) fn of(path: &str) -> Endpoint {
        match path {
            "/health" => Endpoint::Health,
            "/tools" => Endpoint::Tools,
            "/tools/search" => Endpoint::Search,
            "/tools/call" | "/call" => Endpoint::Call,
            "/mcp" => Endpoint::Mcp,
            _ if path.starts_with(SERVERS) => server_route(path),
            _ if path.starts_with("/oauth/") => Endpoint::OAuth,
            _ if path.starts_with(resource::WELL_KNOWN) => Endpoint::ResourceMetadata,
            _ => Endpoint::Other,
        }
    }

    /// The route as the metrics label it.
    pub(super) fn label(self) -> &'static str {
        match self {
            Endpoint::Health => "/health",
            Endpoint::Tools => "/tools",
            Endpoint::Search => "/tools/search",
            Endpoint::Call => "/tools/call",
            Endpoint::Mcp => "/mcp",
            Endpoint::ServerTools => "/servers/{name}/tools",
            Endpoint::ServerSearch => "/servers/{name}/tools/search",
            Endpoint::ServerCall => "/servers/{name}/tools/call",
            Endpoint::ServerMcp => "/servers/{name}/mcp",
            Endpoint::OAuth => "/oauth",
            Endpoint::ResourceMetadata => resource::WELL_KNOWN,
            Endpoint::Other => "other",
        }
    }

    /// Whether it is an MCP endpoint: `/mcp` or a virtual server's.
    pub(super) fn is_mcp(self) -> bool {
        matches!(self, Endpoint::Mcp | Endpoint::ServerMcp)
    }
}

/// Where virtual servers are served: `/servers/<name>/...`.
const SERVERS: &str = "/servers/";

/// A virtual server's route, from a path under [`SERVERS`].
fn server_route(path: &str) -> Endpoint {
    let Some((name, endpoint)) = path[SERVERS.len()..].split_once('/') else { return Endpoint::Other };
    match endpoint {
        _ if !is_server_name(name.as_bytes()) => Endpoint::Other,
        "tools" => Endpoint::ServerTools,
        "tools/search" => Endpoint::ServerSearch,
        "tools/call" => Endpoint::ServerCall,
        "mcp" => Endpoint::ServerMcp,
        _ => Endpoint::Other,
    }
}

/// A request's head as a reader hands it over: what the front door judges
/// and dispatches on, borrowed from the reader's buffer.
#[derive(Debug)]
pub(super) struct Head<'h> {
    /// The route of its path.
    pub route: Endpoint,
    /// Its method.
    pub method: Method,
    /// Its path.
    pub path: &'h str,
    /// Its query string.
    pub query: Option<&'h str>,
    /// Its host: an absolute-form target's authority (RFC 9112 3.2.2),
    /// else `Host` (none in HTTP/1.0 without one).
    pub host: Option<&'h [u8]>,
    /// Its `Origin`, when a browser sent one.
    pub origin: Option<&'h [u8]>,
    /// Its credentials; `None` when a credential header came twice.
    pub credentials: Option<Credentials<'h>>,
    /// Its W3C `traceparent`, continued upstream.
    pub traceparent: Option<&'h [u8]>,
    /// What `/mcp` reads of it.
    pub mcp: McpHead<'h>,
    /// Every header, when the reader parsed them all (pingora's session):
    /// what the browser steps of `/oauth/` read (cookies).
    pub headers: Option<&'h HeaderMap>,
}

/// Where a request's body comes from: each reader reads its own.
pub(super) trait RequestBody {
    /// The whole body, at most `limit` bytes, when it has already arrived
    /// (a small body mostly comes with its head): what `read` would return
    /// at once, without a future to poll. `None`: `read` it.
    fn ready(&mut self, _limit: usize) -> Option<Result<Bytes, RequestError>> {
        None
    }

    /// The whole body, at most `limit` bytes (413 otherwise), arriving
    /// within `deadline` (408 otherwise).
    fn read(
        &mut self,
        limit: usize,
        deadline: Duration,
    ) -> impl std::future::Future<Output = Result<Bytes, RequestError>> + Send;
}

/// The answer to a request.
pub(super) enum Answer {
    /// One reply.
    Reply(Reply),
    /// An event stream, written until the client goes or the gateway stops
    /// (only pingora's path writes one). Boxed, as in [`McpAnswer`].
    Stream(Box<Listen>),
}

impl Answer {
    fn status(&self) -> u16 {
        match self {
            Answer::Reply(reply) => reply.status,
            Answer::Stream(_) => 200,
        }
    }
}

/// The last `Host` the browser policy accepted on a connection, under
/// which generation: a client sends the same one with every request, and the
/// check parses it (benches/HISTORY.md, "Figures behind the code"). The
/// `Weak` keeps the generation's allocation, so its address cannot be reused
/// by another.
pub(super) type AcceptedHost = Option<(Weak<Generation>, Vec<u8>)>;

/// Counts a request until dropped: being served (for graceful shutdown) or
/// admitted (against `max_in_flight`).
pub(super) struct Counted(Arc<AtomicUsize>);

impl Counted {
    /// Counts one more; also returns how many are counted with it.
    pub(super) fn enter(counter: &Arc<AtomicUsize>) -> (Counted, usize) {
        let now = counter.fetch_add(1, Ordering::AcqRel) + 1;
        (Counted(counter.clone()), now)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The front door of the data plane.
pub struct FrontDoor {
    pub(super) gateway: Arc<Gateway>,
    /// Requests being served, from their head to their reply: what graceful
    /// shutdown waits for.
    pub(super) serving: Arc<AtomicUsize>,
    /// Requests whose body has arrived and that are being worked on: what
    /// `server.max_in_flight` bounds.
    admitted: Arc<AtomicUsize>,
    mcp: McpEndpoint,
}

impl FrontDoor {
    /// The front door of `gateway`; `serving` counts the requests being
    /// served, for graceful shutdown.
    pub fn new(gateway: Arc<Gateway>, serving: Arc<AtomicUsize>) -> FrontDoor {
        FrontDoor { gateway, serving, admitted: Arc::default(), mcp: McpEndpoint::default() }
    }

    /// Serves one request under `generation` (loaded once its head was in):
    /// the steps of the module doc, then the metrics. `accepted` is the
    /// connection's last accepted `Host`.
    pub(super) async fn serve<B: RequestBody>(
        &self,
        generation: Arc<Generation>,
        head: &Head<'_>,
        body: &mut B,
        accepted: &mut AcceptedHost,
    ) -> Answer {
        // A recorded request's server span (`otel/`); without `[tracing]`
        // this is the one check.
        let mut span = generation.tracer.as_ref().and_then(|t| t.start_request(head.traceparent, "HTTP"));
        if let Some(span) = &mut span {
            describe_request(span, head);
        }
        // A recorded request's log lines carry its ids.
        let context = span.as_ref().map(Span::log_context);
        let answered = {
            let answering = std::pin::pin!(self.answer(generation, head, body, accepted, span.as_mut()));
            otel::Logged::new(answering, context).await
        };
        let answer = match answered {
            Ok(answer) => answer,
            Err(e) => Answer::Reply(e.to_reply()),
        };
        self.gateway.metrics.record_http(head.route.label(), answer.status());
        if let Some(span) = &mut span {
            span.set_int("http.response.status_code", i64::from(answer.status()));
            if answer.status() >= 500 {
                span.fail(answer.status().to_string());
            }
        }
        answer
    }

    async fn answer<B: RequestBody>(
        &self,
        generation: Arc<Generation>,
        head: &Head<'_>,
        body: &mut B,
        accepted: &mut AcceptedHost,
        mut span: Option<&mut Span>,
    ) -> Result<Answer, RequestError> {
        check_browser(&generation, head, accepted)?;
        let reply = match (head.route, &head.method) {
            (Endpoint::Health, &Method::GET | &Method::HEAD) => {
                self.admit(&generation).map(|_admitted| self.health())?
            }
            (Endpoint::Tools | Endpoint::ServerTools, &Method::GET | &Method::HEAD) => {
                let caller = self.authenticate(&generation, head, AudienceRule::Otc, span.as_deref_mut())?;
                let catalog = self.catalog(head, &caller)?;
                let _admitted = self.admit(&generation)?;
                Reply::ok(generation.access.listing(&catalog, generation.access.matching(&caller)))
            }
            (Endpoint::Search | Endpoint::ServerSearch, &Method::GET | &Method::HEAD) => {
                let caller = self.authenticate(&generation, head, AudienceRule::Otc, span.as_deref_mut())?;
                let catalog = self.catalog(head, &caller)?;
                let _admitted = self.admit(&generation)?;
                let request = SearchRequest::from_query_string(head.query)?;
                let found =
                    tool_search::search_tools(&self.gateway, &generation, &catalog, &caller, &request, Front::Otc);
                Reply::ok(tool_search::otc_body(&found))
            }
            (Endpoint::Call | Endpoint::ServerCall, &Method::POST) => {
                // Credentials first: an unauthenticated client's body is not read.
                let caller = self.authenticate(&generation, head, AudienceRule::Otc, span.as_deref_mut())?;
                let server = self.server(head, &caller)?;
                let body = match body.ready(generation.config.server.max_body_bytes) {
                    Some(ready) => ready?,
                    None => read_body(&generation, body).await?,
                };
                let _admitted = self.admit(&generation)?;
                let mut call = parse_call_request(&generation, &body, traceparent(head, span.as_deref()))?;
                call.server = server;
                let completed = execute_call(&self.gateway, generation, &caller, call).await?;
                Reply::ok(render_result(&completed.result))
            }
            (Endpoint::Mcp | Endpoint::ServerMcp, _) => return self.mcp(generation, head, body, span).await,
            (Endpoint::OAuth, _) => self.oauth(generation, head, body).await?,
            (Endpoint::ResourceMetadata, &Method::GET | &Method::HEAD) => {
                let _admitted = self.admit(&generation)?;
                self.resource_metadata(&generation, head.path)?
            }
            (
                Endpoint::Health
                | Endpoint::Tools
                | Endpoint::Search
                | Endpoint::ServerTools
                | Endpoint::ServerSearch
                | Endpoint::ResourceMetadata,
                _,
            ) => return Err(RequestError::MethodNotAllowed { allow: "GET, HEAD" }),
            (Endpoint::Call | Endpoint::ServerCall, _) => return Err(RequestError::MethodNotAllowed { allow: "POST" }),
            (Endpoint::Other, _) => return Err(RequestError::NotFound(head.path.chars().take(200).collect())),
        };
        Ok(Answer::Reply(reply))
    }

    /// Counts a request whose head and body have arrived as admitted, or
    /// refuses it over `server.max_in_flight`. Requests still arriving are
    /// not counted: a client that sends a head and stalls holds no slot
    /// (slow connections are bounded by `server.max_connections`).
    fn admit(&self, generation: &Generation) -> Result<Counted, RequestError> {
        let (admitted, count) = Counted::enter(&self.admitted);
        let limit = generation.config.server.max_in_flight;
        if count > limit {
            return Err(RequestError::Overloaded(limit));
        }
        Ok(admitted)
    }

    /// Who is calling, from the request's credentials, for `target`; a
    /// recorded request's span gets the caller's user id.
    fn authenticate(
        &self,
        generation: &Generation,
        head: &Head<'_>,
        target: AudienceRule,
        span: Option<&mut Span>,
    ) -> Result<Caller, RequestError> {
        let mut step = otel::child(span.as_deref(), "authenticate", Kind::Internal);
        let authenticator = &generation.authenticator;
        let public_url = || self.gateway.public_url(generation);
        let authenticated = match head.credentials {
            Some(credentials) => authenticator.authenticate_credentials(credentials, target, public_url),
            None => Err(AuthError::Invalid("a credential header came more than once".into())),
        };
        match (&authenticated, span, &mut step) {
            (Ok(caller), Some(span), _) => {
                if let Some(user) = caller.authenticated_user() {
                    span.set("user.id", user);
                }
            }
            (Err(_), _, Some(step)) => step.fail("unauthenticated"),
            _ => {}
        }
        drop(step);
        authenticated.map_err(|error| {
            tracing::debug!(%error, "request refused: bad or missing credentials");
            let resource_metadata = authenticator.resource_metadata_url(|| self.gateway.public_url(generation));
            RequestError::Unauthenticated { error, resource_metadata }
        })
    }

    /// The virtual server a `/servers/<name>/...` request is for: its view,
    /// when the caller may use it (`policy::server_view`); a server that is
    /// not configured, or whose `when` the caller does not meet, is a path
    /// that does not exist (404). `None` for every other route.
    fn server(&self, head: &Head<'_>, caller: &Caller) -> Result<Option<Arc<Catalog>>, RequestError> {
        if !matches!(
            head.route,
            Endpoint::ServerTools | Endpoint::ServerSearch | Endpoint::ServerCall | Endpoint::ServerMcp
        ) {
            return Ok(None);
        }
        let name = head.path[SERVERS.len()..].split_once('/').map_or("", |(name, _)| name);
        match server_view(&self.gateway.catalog.load(), name, caller) {
            Some(view) => Ok(Some(view)),
            None => Err(RequestError::NotFound(head.path.chars().take(200).collect())),
        }
    }

    /// The catalog a request is served from: its server's view, else the root.
    fn catalog(&self, head: &Head<'_>, caller: &Caller) -> Result<Arc<Catalog>, RequestError> {
        Ok(self.server(head, caller)?.unwrap_or_else(|| self.gateway.catalog.load_owned()))
    }

    fn health(&self) -> Reply {
        let tools = self.gateway.catalog.load().len();
        Reply::ok(Bytes::from(format!(r#"{{"$schema":"otc://1.0","status":"ok","tools":{tools}}}"#)))
    }

    /// The MCP endpoint (`mcp_endpoint/`): credentials, then one JSON-RPC
    /// message per POST, or (GET) a 2025-11-25 client's event stream.
    async fn mcp<B: RequestBody>(
        &self,
        generation: Arc<Generation>,
        head: &Head<'_>,
        body: &mut B,
        mut span: Option<&mut Span>,
    ) -> Result<Answer, RequestError> {
        let caller = self.authenticate(&generation, head, AudienceRule::Mcp, span.as_deref_mut())?;
        let server = self.server(head, &caller)?;
        let mcp_head = McpHead { traceparent: traceparent(head, span.as_deref()), server, ..head.mcp.clone() };
        let answer = match head.method {
            Method::POST => {
                let body = match body.ready(generation.config.server.max_body_bytes) {
                    Some(ready) => ready?,
                    None => read_body(&generation, body).await?,
                };
                // A stream holds no admission slot: it is bounded by `[mcp]
                // max_streams` instead.
                let _admitted = self.admit(&generation)?;
                self.mcp.handle_post(&self.gateway, generation, &caller, &mcp_head, &body).await
            }
            Method::GET => self.mcp.handle_get(&self.gateway, &caller, &mcp_head),
            // Sessions hold no state to end (DELETE).
            _ => return Err(RequestError::MethodNotAllowed { allow: "GET, POST" }),
        };
        Ok(match answer {
            McpAnswer::Reply(reply) => Answer::Reply(reply),
            McpAnswer::Stream(listen) => Answer::Stream(listen),
        })
    }

    /// The OAuth endpoints (`oauth_endpoint.rs`): the browser steps of a
    /// challenge and of signing in, and a caller's status checks,
    /// confirmations and disconnects.
    async fn oauth<B: RequestBody>(
        &self,
        generation: Arc<Generation>,
        head: &Head<'_>,
        body: &mut B,
    ) -> Result<Reply, RequestError> {
        let request = OAuthRequest::parse(&head.method, head.path)?;
        if request.needs_caller() {
            let caller = self.authenticate(&generation, head, request.audience_rule(), None)?;
            let body = match request {
                OAuthRequest::Confirm => body.read(CONFIRM_BODY_LIMIT, generation.config.server.body_timeout.0).await?,
                _ => Bytes::new(),
            };
            let _admitted = self.admit(&generation)?;
            match request {
                OAuthRequest::ApprovalCheck { id } => approval_endpoint::check(&self.gateway, &caller, id).await,
                _ => oauth_endpoint::caller_step(&self.gateway, &generation, &caller, &request, &body).await,
            }
        } else {
            let form = match request {
                OAuthRequest::DisconnectForm | OAuthRequest::ApprovalForm { .. } => {
                    body.read(CONFIRM_BODY_LIMIT, generation.config.server.body_timeout.0).await?
                }
                _ => Bytes::new(),
            };
            let _admitted = self.admit(&generation)?;
            let cookies = head.headers.into_iter().flat_map(|h| h.get_all(http::header::COOKIE));
            let browser = BrowserRequest {
                method: &head.method,
                path: head.path,
                query: head.query,
                cookies: cookies.filter_map(|v| v.to_str().ok()).collect(),
                form: &form,
            };
            match request {
                OAuthRequest::ApprovalPage { .. } | OAuthRequest::ApprovalForm { .. } => {
                    approval_endpoint::browser_step(&self.gateway, &generation, &request, &browser).await
                }
                _ => oauth_endpoint::browser_step(&self.gateway, &generation, &request, &browser).await,
            }
        }
    }

    /// The protected resource metadata (RFC 9728), public: in `mode = "jwt"`
    /// only, at the paths [`resource::ProtectedResource::serves`].
    fn resource_metadata(&self, generation: &Generation, path: &str) -> Result<Reply, RequestError> {
        let metadata = generation
            .authenticator
            .protected_resource(|| self.gateway.public_url(generation))
            .filter(|r| r.serves(path))
            .ok_or_else(|| RequestError::NotFound(path.chars().take(200).collect()))?;
        let mut reply = Reply::ok(metadata.document());
        // Briefly: a reload may change it.
        reply.headers.push(("cache-control", "public, max-age=300".to_owned()));
        Ok(reply)
    }
}

/// The browser policy (`browser.rs`): `Host`, skipped when this connection's
/// last accepted one was the same under the same generation, then `Origin`.
fn check_browser(
    generation: &Arc<Generation>,
    head: &Head<'_>,
    accepted: &mut AcceptedHost,
) -> Result<(), RequestError> {
    let known = match (&*accepted, head.host) {
        (Some((under, seen)), Some(host)) => std::ptr::eq(under.as_ptr(), Arc::as_ptr(generation)) && seen == host,
        _ => false,
    };
    if !known {
        generation.browser.check_host(head.host)?;
        if let Some(host) = head.host {
            *accepted = Some((Arc::downgrade(generation), host.to_vec()));
        }
    }
    Ok(generation.browser.check_origin(head.origin, head.route.is_mcp())?)
}

/// The request's body within `server.max_body_bytes` and `body_timeout`.
async fn read_body<B: RequestBody>(generation: &Generation, body: &mut B) -> Result<Bytes, RequestError> {
    let server = &generation.config.server;
    body.read(server.max_body_bytes, server.body_timeout.0).await
}

/// The `traceparent` a call continues: the request's server span when it
/// is recorded, else the client's, when it is text.
fn traceparent(head: &Head<'_>, span: Option<&Span>) -> Option<String> {
    if let Some(span) = span {
        return std::str::from_utf8(span.traceparent().as_bytes()).ok().map(str::to_owned);
    }
    std::str::from_utf8(head.traceparent?).ok().filter(|v| v.is_ascii()).map(str::to_owned)
}

/// A server span's name and attributes (OpenTelemetry's HTTP server
/// conventions): the route, never the path (an `/oauth/` path holds a
/// link's id), nor a header's value but MCP's method name.
fn describe_request(span: &mut Span, head: &Head<'_>) {
    let route = head.route.label();
    // A method of the client's own making is `_OTHER`, as the conventions
    // say: span names stay few.
    let method = match head.method {
        Method::GET | Method::HEAD | Method::POST | Method::PUT | Method::DELETE | Method::OPTIONS | Method::PATCH => {
            head.method.as_str()
        }
        _ => "_OTHER",
    };
    span.rename(format!("{method} {route}"));
    span.set("http.request.method", method);
    span.set("http.route", route);
    span.set("url.scheme", "http");
    span.set("network.protocol.version", "1.1");
    if let Some(method) = head.mcp.method.and_then(|m| std::str::from_utf8(m).ok()) {
        span.set("mcp.method.name", method);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_and_their_labels() {
        for (path, label) in [
            ("/health", "/health"),
            ("/tools", "/tools"),
            ("/tools/search", "/tools/search"),
            ("/call", "/tools/call"),
            ("/tools/call", "/tools/call"),
            ("/mcp", "/mcp"),
            ("/oauth/google/start/x", "/oauth"),
            ("/.well-known/oauth-protected-resource/mcp", resource::WELL_KNOWN),
            ("/tools/call/x", "other"),
            ("/", "other"),
            ("/servers/support/tools", "/servers/{name}/tools"),
            ("/servers/support/tools/search", "/servers/{name}/tools/search"),
            ("/servers/support/tools/call", "/servers/{name}/tools/call"),
            ("/servers/sup-port_2/mcp", "/servers/{name}/mcp"),
            ("/servers/support/call", "other"),
            ("/servers/support", "other"),
            ("/servers//mcp", "other"),
            ("/servers/a.b/mcp", "other"),
            ("/servers/a/b/mcp", "other"),
            ("/servers/support/mcp/", "other"),
        ] {
            assert_eq!(Endpoint::of(path).label(), label, "{path}");
            assert!(crate::metrics::ROUTES.contains(&label), "{label} is a metrics route");
        }
    }
}
