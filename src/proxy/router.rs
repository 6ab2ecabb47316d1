//! [`Router`]: answers one request that pingora's HTTP session has read, by
//! its path and method (`/health`, `/tools`, `/tools/search`, `/tools/call`,
//! `/mcp`), and writes the reply. The connection reader (`connection.rs`) hands it every
//! request it does not serve itself.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use pingora::apps::{HttpServerApp, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::ServerSession as Session;
use pingora::server::ShutdownWatch;
use pingora::ErrorType;
// pingora's coarse timer: no tokio timer entry (and driver wake-up) per request.
use pingora_timeout::fast_timeout::fast_timeout;

use super::head::{self, Expect};
use super::send;
use crate::auth::{resource, Caller, Target};
use crate::call::call_tool;
use crate::catalog::search::SearchRequest;
use crate::error::RequestError;
use crate::gateway::{Gateway, Runtime};
use crate::http1::header_line_size;
use crate::mcp_endpoint::{Listen, McpAnswer, McpEndpoint, McpHead};
use crate::oauth_endpoint::{self, BrowserRequest, OAuthRequest};
use crate::reply::Reply;
use crate::tool_search::{self, Front};

/// The largest `POST /oauth/confirm` body: `{"flow_id": "<43 characters>"}`.
const CONFIRM_BODY_LIMIT: usize = 4096;

/// The data plane's routes, as a pingora HTTP application.
pub struct Router {
    pub(super) gateway: Arc<Gateway>,
    pub(super) in_flight: Arc<AtomicUsize>,
    /// Requests whose body has arrived and that are being worked on: what
    /// `server.max_in_flight` bounds.
    pub(super) admitted: Arc<AtomicUsize>,
    mcp: McpEndpoint,
}

/// What a request is answered with.
enum Answer {
    /// One reply.
    Reply(Reply),
    /// An event stream, written until the client goes or the gateway stops.
    Stream(Listen),
}

/// Counts a request as in flight until dropped.
pub(super) struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// Counts one more; also returns how many are in flight with it.
    pub(super) fn enter(counter: &Arc<AtomicUsize>) -> (InFlight, usize) {
        let now = counter.fetch_add(1, Ordering::AcqRel) + 1;
        (InFlight(counter.clone()), now)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The route a path is served by, as the metrics label it: one of
/// [`crate::metrics::ROUTES`].
fn route_of(path: &str) -> &'static str {
    match path {
        "/health" => "/health",
        "/tools" => "/tools",
        "/tools/search" => "/tools/search",
        "/tools/call" | "/call" => "/tools/call",
        "/mcp" => "/mcp",
        _ if path.starts_with("/oauth/") => "/oauth",
        _ if path.starts_with(resource::WELL_KNOWN) => resource::WELL_KNOWN,
        _ => "other",
    }
}

impl Router {
    /// A front over the given gateway state; `in_flight` counts the
    /// requests being served, for graceful shutdown.
    pub fn new(gateway: Arc<Gateway>, in_flight: Arc<AtomicUsize>) -> Router {
        Router { gateway, in_flight, admitted: Arc::default(), mcp: Default::default() }
    }

    /// Checks the head, then dispatches on the route and method.
    async fn serve(&self, session: &mut Session, route: &'static str) -> Answer {
        let expect = match check_head(&self.gateway.runtime(), session, route) {
            Ok(expect) => expect,
            Err(e) => return Answer::Reply(e.to_reply()),
        };
        let method = session.req_header().method.clone();
        let result = match route {
            "/health" => match method {
                http::Method::GET | http::Method::HEAD => self.admit().map(|_in_flight| self.health()),
                _ => Err(RequestError::MethodNotAllowed { allow: "GET, HEAD" }),
            },
            "/tools" => match method {
                http::Method::GET | http::Method::HEAD => self.admit().and_then(|_in_flight| {
                    let runtime = self.gateway.runtime();
                    authenticate(&self.gateway, &runtime, session, Target::Otc).map(|caller| {
                        Reply::ok(
                            runtime.access.listing(&self.gateway.catalog.load(), runtime.access.matching(&caller)),
                        )
                    })
                }),
                _ => Err(RequestError::MethodNotAllowed { allow: "GET, HEAD" }),
            },
            "/tools/search" => match method {
                http::Method::GET | http::Method::HEAD => self.admit().and_then(|_in_flight| self.search(session)),
                _ => Err(RequestError::MethodNotAllowed { allow: "GET, HEAD" }),
            },
            "/tools/call" => match method {
                http::Method::POST => self.call(session, expect).await,
                _ => Err(RequestError::MethodNotAllowed { allow: "POST" }),
            },
            // (Boxed to keep its state out of every request's future.)
            "/mcp" => {
                return match Box::pin(self.mcp(session, expect)).await {
                    Ok(McpAnswer::Reply(reply)) => Answer::Reply(reply),
                    Ok(McpAnswer::Stream(listen)) => Answer::Stream(listen),
                    Err(e) => Answer::Reply(e.to_reply()),
                }
            }
            "/oauth" => Box::pin(self.oauth(session, expect)).await,
            resource::WELL_KNOWN => match method {
                http::Method::GET | http::Method::HEAD => {
                    self.admit().and_then(|_in_flight| self.resource_metadata(session.req_header().uri.path()))
                }
                _ => Err(RequestError::MethodNotAllowed { allow: "GET, HEAD" }),
            },
            _ => Err(RequestError::NotFound(session.req_header().uri.path().chars().take(200).collect())),
        };
        Answer::Reply(result.unwrap_or_else(|e| e.to_reply()))
    }

    /// Counts a request whose head and body have arrived as in flight, or
    /// refuses it over `server.max_in_flight`. Requests still arriving are
    /// not counted: a client that sends a head and stalls holds no slot
    /// (slow connections are bounded by `server.max_connections`).
    fn admit(&self) -> Result<InFlight, RequestError> {
        let (admitted, count) = InFlight::enter(&self.admitted);
        let limit = self.gateway.runtime().config.server.max_in_flight;
        if count > limit {
            return Err(RequestError::Overloaded(limit));
        }
        Ok(admitted)
    }

    fn health(&self) -> Reply {
        let tools = self.gateway.catalog.load().len();
        Reply::ok(Bytes::from(format!(r#"{{"$schema":"otc://1.0","status":"ok","tools":{tools}}}"#)))
    }

    /// `GET /tools/search`: credentials first, then the query, then the
    /// caller's tools that match it (`tool_search.rs`).
    fn search(&self, session: &Session) -> Result<Reply, RequestError> {
        let runtime = self.gateway.runtime();
        let caller = authenticate(&self.gateway, &runtime, session, Target::Otc)?;
        let request = SearchRequest::from_query_string(session.req_header().uri.query())?;
        let catalog = self.gateway.catalog.load();
        let found = tool_search::search_tools(&self.gateway, &runtime, &catalog, &caller, &request, Front::Otc);
        Ok(Reply::ok(tool_search::otc_body(&found)))
    }

    /// The MCP endpoint (`mcp_endpoint/`): credentials (its `Origin` and
    /// `Host` were checked with the head, as on every route), then one
    /// JSON-RPC message per POST, or (GET) a 2025-11-25 client's event
    /// stream.
    async fn mcp(&self, session: &mut Session, expect: Expect) -> Result<McpAnswer, RequestError> {
        // One runtime for the whole request, as on the gateway's own reader.
        let runtime = self.gateway.runtime_owned();
        let (limit, deadline) = (runtime.config.server.max_body_bytes, runtime.config.server.body_timeout.0);
        let caller = authenticate(&self.gateway, &runtime, session, Target::Mcp)?;
        match session.req_header().method {
            http::Method::POST => {}
            http::Method::GET => {
                let head = McpHead::from_headers(&session.req_header().headers);
                return Ok(self.mcp.handle_get(&self.gateway, &caller, &head));
            }
            // Sessions hold no state to end (DELETE).
            _ => return Err(RequestError::MethodNotAllowed { allow: "GET, POST" }),
        }
        let body = read_body_within(session, expect, limit, deadline).await?;
        // A stream holds no admission slot: it is bounded by `[mcp]
        // max_streams` instead.
        let _in_flight = self.admit()?;
        let head = McpHead::from_headers(&session.req_header().headers);
        Ok(self.run_mcp(runtime, &caller, &head, &body).await)
    }

    /// The OAuth endpoints (`oauth_endpoint.rs`): the browser steps of a
    /// challenge and of signing in, and a caller's status checks,
    /// confirmations and disconnects.
    async fn oauth(&self, session: &mut Session, expect: Expect) -> Result<Reply, RequestError> {
        let runtime = self.gateway.runtime_owned();
        let uri = session.req_header().uri.clone();
        let method = session.req_header().method.clone();
        let request = OAuthRequest::parse(&method, uri.path())?;
        if request.needs_caller() {
            let caller = authenticate(&self.gateway, &runtime, session, Target::Otc)?;
            let body = match request {
                OAuthRequest::Confirm => {
                    let deadline = runtime.config.server.body_timeout.0;
                    read_body_within(session, expect, CONFIRM_BODY_LIMIT, deadline).await?
                }
                _ => Bytes::new(),
            };
            let _in_flight = self.admit()?;
            oauth_endpoint::caller_step(&self.gateway, &runtime, &caller, &request, &body).await
        } else {
            let _in_flight = self.admit()?;
            let headers = &session.req_header().headers;
            let browser = BrowserRequest {
                method: &method,
                path: uri.path(),
                query: uri.query(),
                cookies: headers.get_all(http::header::COOKIE).iter().filter_map(|v| v.to_str().ok()).collect(),
            };
            oauth_endpoint::browser_step(&self.gateway, &runtime, &request, &browser).await
        }
    }

    async fn call(&self, session: &mut Session, expect: Expect) -> Result<Reply, RequestError> {
        // Credentials first: an unauthenticated client's body is not read.
        // One runtime for the whole request, as on the gateway's own reader.
        let runtime = self.gateway.runtime_owned();
        let caller = authenticate(&self.gateway, &runtime, session, Target::Otc)?;
        let (limit, deadline) = (runtime.config.server.max_body_bytes, runtime.config.server.body_timeout.0);
        let body = read_body_within(session, expect, limit, deadline).await?;
        let _in_flight = self.admit()?;
        let traceparent =
            session.req_header().headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
        self.run_call(runtime, &caller, &body, traceparent).await
    }

    /// Runs an authenticated caller's call body under `runtime`, continuing
    /// the client's `traceparent`: the part of a call both readers share.
    pub(super) async fn run_call(
        &self,
        runtime: Arc<Runtime>,
        caller: &Caller,
        body: &[u8],
        traceparent: Option<String>,
    ) -> Result<Reply, RequestError> {
        let (body, _completed) = call_tool(&self.gateway, runtime, caller, body, traceparent).await?;
        Ok(Reply::ok(body))
    }

    /// Answers an authenticated caller's POST to `/mcp` under `runtime`: the
    /// part of an MCP request both readers share.
    pub(super) async fn run_mcp(
        &self,
        runtime: Arc<Runtime>,
        caller: &Caller,
        head: &McpHead<'_>,
        body: &[u8],
    ) -> McpAnswer {
        self.mcp.handle_post(&self.gateway, runtime, caller, head, body).await
    }
}

/// Who is calling, from the request's credentials, for `target`.
fn authenticate(
    gateway: &Gateway,
    runtime: &Runtime,
    session: &Session,
    target: Target,
) -> Result<Caller, RequestError> {
    let authenticator = &runtime.authenticator;
    let public_url = || gateway.public_url(runtime);
    authenticator.authenticate(&session.req_header().headers, target, public_url).map_err(|error| {
        tracing::debug!(%error, "request refused: bad or missing credentials");
        let resource_metadata = authenticator.resource_metadata_url(|| gateway.public_url(runtime));
        RequestError::Unauthenticated { error, resource_metadata }
    })
}

impl Router {
    /// The protected resource metadata (RFC 9728), public: in `mode = "jwt"`
    /// only, at the paths [`resource::ProtectedResource::serves`].
    fn resource_metadata(&self, path: &str) -> Result<Reply, RequestError> {
        let runtime = self.gateway.runtime();
        let metadata = runtime
            .authenticator
            .protected_resource(|| self.gateway.public_url(&runtime))
            .filter(|r| r.serves(path))
            .ok_or_else(|| RequestError::NotFound(path.chars().take(200).collect()))?;
        let mut reply = Reply::ok(metadata.document());
        // Briefly: a reload may change it.
        reply.headers.push(("cache-control", "public, max-age=300".to_owned()));
        Ok(reply)
    }
}

/// Refuses oversized headers, then runs the checks every head passes
/// ([`head`]) on the raw head pingora read.
fn check_head(runtime: &Runtime, session: &Session, route: &'static str) -> Result<Expect, RequestError> {
    let max_header_bytes = runtime.config.server.max_header_bytes;
    let headers = &session.req_header().headers;
    let size: usize = headers.iter().map(|(name, value)| header_line_size(name.as_str(), value.as_bytes())).sum();
    if size > max_header_bytes {
        return Err(RequestError::HeadersTooLarge { limit: max_header_bytes });
    }
    let Session::H1(_) = session else { return Ok(Expect::Nothing) };
    let http11 = session.req_header().version == http::Version::HTTP_11;
    head::check_raw_head(&session.to_h1_raw(), http11, &runtime.browser, route == "/mcp")
}

/// Reads the body within `deadline`, first telling a client that waits
/// for it (`Expect: 100-continue`) to send it.
async fn read_body_within(
    session: &mut Session,
    expect: Expect,
    limit: usize,
    deadline: Duration,
) -> Result<Bytes, RequestError> {
    if expect == Expect::Continue && !body_over(session, limit) {
        let go_on = ResponseHeader::build(100, Some(0)).map_err(|e| RequestError::BodyUnreadable(e.to_string()))?;
        session
            .write_response_header(Box::new(go_on))
            .await
            .map_err(|e| RequestError::BodyUnreadable(e.to_string()))?;
    }
    fast_timeout(deadline, read_body(session, limit)).await.map_err(|_| RequestError::BodyTimeout(deadline))?
}

/// Whether the declared Content-Length is over `limit` (refused unread).
fn body_over(session: &Session, limit: usize) -> bool {
    declared_length(session).is_some_and(|n| n > limit as u64)
}

/// The request's Content-Length, when it has a readable one.
fn declared_length(session: &Session) -> Option<u64> {
    session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// Reads the whole request body, refusing more than `limit` bytes: by the
/// declared Content-Length before reading, or as the chunks arrive.
async fn read_body(session: &mut Session, limit: usize) -> Result<Bytes, RequestError> {
    let declared = declared_length(session);
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(RequestError::BodyTooLarge { limit });
    }
    let mut body = BytesMut::with_capacity(declared.map_or(0, |n| n as usize));
    while let Some(chunk) =
        session.read_request_body().await.map_err(|e| RequestError::BodyUnreadable(e.to_string()))?
    {
        if body.len() + chunk.len() > limit {
            return Err(RequestError::BodyTooLarge { limit });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

impl Router {
    /// One request, from its parsed head to its answer, and whether the
    /// request is still being served (until a stream ends).
    async fn answer(&self, session: &mut Session) -> (Answer, InFlight) {
        let route = route_of(session.req_header().uri.path());
        // Being served, for graceful shutdown: from its head to its reply.
        let (serving, _) = InFlight::enter(&self.in_flight);
        let answer = self.serve(session, route).await;
        let status = match &answer {
            Answer::Reply(reply) => reply.status,
            Answer::Stream(_) => 200,
        };
        self.gateway.metrics.record_http(route, status);
        (answer, serving)
    }
}

#[async_trait]
impl HttpServerApp for Router {
    /// Serves a connection that is pingora's alone (not a TCP socket, so
    /// never in practice: see `connection::take_socket`), one request at a time.
    async fn process_new_http(
        self: &Arc<Self>,
        session: Session,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        self.serve_one(session, shutdown).await.map(send::Reusable::into_reused)
    }
}

impl Router {
    /// One request on a pingora session, from reading its head to writing
    /// its reply; the connection comes back for the next one. The head is
    /// bounded by `server.header_timeout`: on the gateway's own reader's
    /// connections it is in the session's first bytes already.
    pub(super) async fn serve_one(
        self: &Arc<Self>,
        mut session: Session,
        shutdown: &ShutdownWatch,
    ) -> Option<send::Reusable> {
        send::allow_pipelining(&mut session);
        let header_timeout = self.gateway.runtime().config.server.header_timeout.0;
        // An idle keep-alive connection stops waiting when shutdown begins.
        let mut stopping = shutdown.clone();
        let head = tokio::select! {
            biased;
            head = fast_timeout(header_timeout, session.read_request()) => head,
            // (A closed watch never fires: pingora would be gone already.)
            Ok(()) = stopping.changed() => return None,
        };
        let head = match head {
            Ok(head) => head,
            Err(_) => {
                let reply = RequestError::HeadTimeout(header_timeout).to_reply();
                self.gateway.metrics.record_http("other", reply.status);
                if let Err(write_error) = send::write_through_pingora(&mut session, reply, false).await {
                    tracing::debug!(error = %write_error, "could not write an error response");
                }
                session.shutdown().await;
                return None;
            }
        };
        match head {
            Ok(true) => {}
            Ok(false) => return None,
            Err(e) => {
                // A head pingora could not parse gets a JSON 400, never an
                // empty page; a broken connection gets nothing.
                if matches!(e.etype(), ErrorType::InvalidHTTPHeader) {
                    // (Its reply closes the connection.)
                    let too_many =
                        e.root_cause().downcast_ref::<httparse::Error>() == Some(&httparse::Error::TooManyHeaders);
                    let error = if too_many {
                        RequestError::TooManyHeaders { limit: head::MAX_HEADER_LINES }
                    } else {
                        // The cause alone: pingora's message quotes the head's
                        // bytes, credentials included.
                        RequestError::MalformedHead(e.root_cause().to_string())
                    };
                    let reply = error.to_reply();
                    self.gateway.metrics.record_http("other", reply.status);
                    if let Err(write_error) = send::write_through_pingora(&mut session, reply, false).await {
                        tracing::debug!(error = %write_error, "could not write an error response");
                    }
                }
                session.shutdown().await;
                return None;
            }
        }
        // pingora decided keep-alive from the request (HTTP/1.0, `Connection:
        // close`); only a shutdown overrides it.
        if *shutdown.borrow() {
            session.set_keepalive(None);
        }
        let (answer, _serving) = self.answer(&mut session).await;
        match answer {
            Answer::Reply(reply) => {
                let head_only = session.req_header().method == http::Method::HEAD;
                send::send_reply(session, reply, head_only).await
            }
            Answer::Stream(listen) => send::send_stream(session, listen, shutdown).await,
        }
    }
}
