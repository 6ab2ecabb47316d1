//! [`PingoraPath`]: one request read by pingora's HTTP session (every
//! request the lean reader, `lean.rs`, does not read itself: other routes
//! and methods, chunked bodies, `Expect`, HTTP/1.0, event streams, heads it
//! refuses), checked for framing (`head.rs`), handed to the front door
//! (`front_door.rs`) and answered.

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

use super::front_door::{Answer, Counted, Endpoint, FrontDoor, Head, RequestBody};
use super::head::{self, Expect};
use super::send;
use crate::auth::Credentials;
use crate::error::RequestError;
use crate::http1::header_line_size;
use crate::mcp_endpoint::McpHead;

/// pingora's path into the data plane, as a pingora HTTP application.
pub struct PingoraPath {
    pub(super) door: Arc<FrontDoor>,
}

impl PingoraPath {
    /// pingora's path to `door`.
    pub fn new(door: Arc<FrontDoor>) -> PingoraPath {
        PingoraPath { door }
    }

    /// One request whose head pingora read: framing, then the front door.
    async fn answer(&self, session: &mut Session) -> Answer {
        let generation = self.door.gateway.generation_owned();
        let route = Endpoint::of(session.req_header().uri.path());
        let raw = session.to_h1_raw();
        let framed = match check_framing(&generation.config.server, session, &raw) {
            Ok(framed) => framed,
            Err(e) => {
                let reply = e.to_reply();
                self.door.gateway.metrics.record_http(route.label(), reply.status);
                return Answer::Reply(reply);
            }
        };
        // The head is the request's own copy: the body is read from the
        // session meanwhile. (Not the hot path: plain calls are the lean
        // reader's.)
        let request = session.req_header().clone();
        let headers = &request.headers;
        let head = Head {
            route,
            method: request.method.clone(),
            path: request.uri.path(),
            query: request.uri.query(),
            host: framed.host,
            origin: framed.origin,
            credentials: Credentials::from_headers(headers).ok(),
            traceparent: headers.get("traceparent").map(http::HeaderValue::as_bytes),
            mcp: if route.is_mcp() { McpHead::from_headers(headers) } else { McpHead::default() },
            headers: Some(headers),
        };
        let mut body = SessionBody { session, expect: framed.expect };
        self.door.serve(generation, &head, &mut body, &mut None).await
    }
}

/// Refuses oversized headers, then runs the framing checks on the raw head
/// pingora read.
fn check_framing<'r>(
    server: &crate::config::ServerConfig,
    session: &Session,
    raw: &'r Bytes,
) -> Result<head::Framed<'r>, RequestError> {
    let headers = &session.req_header().headers;
    let size: usize =
        headers.iter().map(|(name, value)| header_line_size(name.as_str().as_bytes(), value.as_bytes())).sum();
    if size > server.max_header_bytes {
        return Err(RequestError::HeadersTooLarge { limit: server.max_header_bytes });
    }
    let http11 = session.req_header().version == http::Version::HTTP_11;
    match session {
        Session::H1(_) => head::check_raw_head(raw, http11),
        // (Only HTTP/1 reaches the gateway.)
        _ => Ok(head::Framed { expect: Expect::Nothing, host: None, origin: None }),
    }
}

/// A body read from pingora's session.
struct SessionBody<'s> {
    session: &'s mut Session,
    expect: Expect,
}

impl RequestBody for SessionBody<'_> {
    /// Reads the body within `deadline`, first telling a client that waits
    /// for it (`Expect: 100-continue`) to send it.
    async fn read(&mut self, limit: usize, deadline: Duration) -> Result<Bytes, RequestError> {
        let session = &mut *self.session;
        if self.expect == Expect::Continue && declared_length(session).is_none_or(|n| n <= limit as u64) {
            let go_on = ResponseHeader::build(100, Some(0)).map_err(|e| RequestError::BodyUnreadable(e.to_string()))?;
            session
                .write_response_header(Box::new(go_on))
                .await
                .map_err(|e| RequestError::BodyUnreadable(e.to_string()))?;
        }
        fast_timeout(deadline, read_body(session, limit)).await.map_err(|_| RequestError::BodyTimeout(deadline))?
    }
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

#[async_trait]
impl HttpServerApp for PingoraPath {
    /// Serves a connection that is pingora's alone (not a TCP socket, so
    /// never in practice: see `lean::take_socket`), one request at a time.
    async fn process_new_http(
        self: &Arc<Self>,
        session: Session,
        shutdown: &ShutdownWatch,
    ) -> Option<ReusedHttpStream> {
        self.serve_one(session, shutdown).await.map(send::Reusable::into_reused)
    }
}

impl PingoraPath {
    /// One request on a pingora session, from reading its head to writing
    /// its reply; the connection comes back for the next one. The head is
    /// bounded by `server.header_timeout`: on the lean reader's connections
    /// it is in the session's first bytes already.
    pub(super) async fn serve_one(
        self: &Arc<Self>,
        mut session: Session,
        shutdown: &ShutdownWatch,
    ) -> Option<send::Reusable> {
        send::allow_pipelining(&mut session);
        let gateway = &self.door.gateway;
        let header_timeout = gateway.generation().config.server.header_timeout.0;
        // An idle keep-alive connection stops waiting when shutdown begins.
        let mut stopping = shutdown.clone();
        let head = tokio::select! {
            biased;
            head = fast_timeout(header_timeout, session.read_request()) => head,
            // (A closed watch never fires: pingora would be gone already.)
            Ok(()) = stopping.changed() => return None,
        };
        let refused = match head {
            Ok(Ok(true)) => None,
            Ok(Ok(false)) => return None,
            Err(_) => Some(RequestError::HeadTimeout(header_timeout)),
            // A head pingora could not parse gets a JSON 400, never an
            // empty page; a broken connection gets nothing.
            Ok(Err(e)) if matches!(e.etype(), ErrorType::InvalidHTTPHeader) => {
                let too_many =
                    e.root_cause().downcast_ref::<httparse::Error>() == Some(&httparse::Error::TooManyHeaders);
                Some(if too_many {
                    RequestError::TooManyHeaders { limit: head::MAX_HEADER_LINES }
                } else {
                    // The cause alone: pingora's message quotes the head's
                    // bytes, credentials included.
                    RequestError::MalformedHead(e.root_cause().to_string())
                })
            }
            Ok(Err(_)) => {
                session.shutdown().await;
                return None;
            }
        };
        if let Some(error) = refused {
            // (Its reply closes the connection.)
            let reply = error.to_reply();
            gateway.metrics.record_http("other", reply.status);
            if let Err(write_error) = send::write_through_pingora(&mut session, reply, false).await {
                tracing::debug!(error = %write_error, "could not write an error response");
            }
            session.shutdown().await;
            return None;
        }
        // pingora decided keep-alive from the request (HTTP/1.0, `Connection:
        // close`); only a shutdown overrides it.
        if *shutdown.borrow() {
            session.set_keepalive(None);
        }
        // Being served, for graceful shutdown: from its head to its reply.
        let (_serving, _) = Counted::enter(&self.door.serving);
        match self.answer(&mut session).await {
            Answer::Reply(reply) => {
                let head_only = session.req_header().method == http::Method::HEAD;
                send::send_reply(session, reply, head_only).await
            }
            Answer::Stream(listen) => send::send_stream(session, *listen, shutdown).await,
        }
    }
}
