//! One client connection: plain tool calls (OTC and MCP) read by the
//! gateway's own HTTP/1.1 reader, everything else handed to pingora's
//! session.
//!
//! pingora's session spends a large share of a call's instructions reading
//! a request head (a `RequestHeader` with a case-preserving copy of every
//! header name) (benches/HISTORY.md, "Figures behind the code"). The calls
//! clients make most have a narrow shape: `POST /tools/call` or `POST /mcp`
//! over HTTP/1.1 with a Content-Length body and valid credentials. Such a
//! request is parsed here with httparse into only what the call needs.
//!
//! Anything else (other routes and methods, chunked bodies, `Expect`,
//! `Connection: close`, HTTP/1.0, credentials that fail, a head httparse
//! refuses, an MCP `subscriptions/listen`, whose answer is an event stream
//! written through pingora's session) is handed to pingora untouched, one request at a time: the bytes
//! read so far become its session's first bytes, pingora answers that one
//! request (`Router::serve_one`), and the connection comes back here with
//! whatever the client sent past it. So every head on a connection waits
//! under this reader's keep-alive and header deadline, and every connection
//! counts against one bound ([`OpenConnections`]). Nothing of a request is
//! consumed until it is known to be served here, so a hand-over never loses
//! a byte.
//!
//! The reader works on the bare socket, taken out of pingora's `Stream` when
//! the connection is accepted ([`take_socket`]): that stream reads through a
//! buffer of its own (a copy of every byte) and reads the clock twice for
//! each read that waits, to time it. A hand-over wraps the socket in a new
//! `Stream`, and takes it out again (a duplicate descriptor) after the
//! reply.

use std::future::Future;
use std::ops::Range;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Buf, Bytes, BytesMut};
use pingora::apps::{HttpServerApp, ReusedHttpStream, ServerApp};
use pingora::protocols::http::ServerSession as Session;
use pingora::protocols::l4::stream::Stream as L4Stream;
use pingora::protocols::Stream;
use pingora::server::ShutdownWatch;
use pingora_timeout::fast_timeout::fast_timeout;
use pingora_timeout::Elapsed;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::open_connections::{OpenConnections, Registered};
use super::router::{InFlight, Router};
use crate::auth::{Credentials, Target, API_KEY_HEADER};
use crate::error::RequestError;
use crate::gateway::Runtime;
use crate::http1::{self, decimal, header_line_size};
use crate::mcp::modern::{METHOD_HEADER, NAME_HEADER};
use crate::mcp::{PROTOCOL_VERSION_HEADER, SESSION_HEADER};
use crate::mcp_endpoint::McpHead;
use crate::reply::Reply;

/// How long an idle connection waits for its next request, at least: here up
/// to twice that (see `Connection::idle`); pingora's keep-alive default,
/// which the handed-over connections keep exactly.
const KEEP_ALIVE: Duration = Duration::from_secs(60);
/// The read buffer a connection starts with; a call's head and a small body
/// fit in one read.
const READ_BUF: usize = 4 * 1024;
/// A head not complete within this many bytes is pingora's to read (and to
/// refuse as too large).
const MAX_LEAN_HEAD: usize = 16 * 1024;
/// The most header lines a call read here may have; more are pingora's.
const MAX_HEADERS: usize = 32;

/// The data plane's pingora application: serves each connection, starting
/// with the gateway's own reader.
pub struct DataPlane {
    router: Arc<Router>,
    open: Arc<OpenConnections>,
    /// The most client connections the process's open-file limit leaves
    /// room for: half of it, the other half for upstream connections and
    /// files. `server.max_connections` is capped at this.
    fd_room: usize,
}

impl DataPlane {
    /// A front over the gateway's HTTP application, in a process that may
    /// have `open_files` descriptors (unknown: no cap but the config's).
    pub fn new(router: Router, open_files: Option<u64>) -> DataPlane {
        let fd_room = open_files.map_or(usize::MAX, |n| usize::try_from(n / 2).unwrap_or(usize::MAX).max(1));
        let configured = router.gateway.runtime().config.server.max_connections;
        if configured > fd_room {
            // (Info, not a warning: the default is above what many hosts allow.)
            tracing::info!(
                max_connections = configured,
                open_files_limit = open_files,
                "client connections capped at {fd_room}, half the open-file limit"
            );
        }
        DataPlane { router: Arc::new(router), open: Arc::default(), fd_room }
    }
}

/// A connection and the bytes read from it but not yet served.
struct Connection {
    /// Its place among the open connections (`open_connections`). First:
    /// fields drop in order, and it must leave before the socket closes.
    registered: Option<Registered>,
    stream: TcpStream,
    buf: BytesMut,
    /// Ends a wait for a head once the client has sent nothing for
    /// `KEEP_ALIVE` to twice that. One timer for the connection's life:
    /// when it fires after bytes came in, it is moved `KEEP_ALIVE` later
    /// (one atomic operation) and the wait goes on. A timer per wait was a
    /// registration and a removal (benches/HISTORY.md, "Figures behind the code"), and
    /// moving it at each wait a clock read.
    idle: Pin<Box<Sleep>>,
    /// Whether bytes came in since `idle` was last set.
    active: bool,
    /// Ends a wait for a head when shutdown begins: one subscription for the
    /// connection's life, where one per wait took and released a waiter slot.
    stopping: Pin<Box<dyn Future<Output = ()> + Send>>,
    /// The last `Host` the browser policy accepted on this connection, and
    /// under which runtime: a client sends the same one with every request,
    /// and the check parses it (benches/HISTORY.md, "Figures behind the code"). The `Weak` keeps
    /// the runtime's allocation, so its address cannot be reused by another.
    accepted_host: Option<(Weak<Runtime>, Vec<u8>)>,
}

impl Connection {
    fn new(stream: TcpStream, shutdown: &ShutdownWatch) -> Connection {
        let mut shutdown = shutdown.clone();
        let stopping = async move {
            // A closed watch never fires: pingora would be gone already.
            if shutdown.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        Connection {
            stream,
            buf: BytesMut::with_capacity(READ_BUF),
            idle: Box::pin(tokio::time::sleep(KEEP_ALIVE)),
            active: false,
            stopping: Box::pin(stopping),
            registered: None,
            accepted_host: None,
        }
    }

    /// Marks it as running a request, which is never closed for room.
    fn set_busy(&self, busy: bool) {
        if let Some(registered) = &self.registered {
            registered.set_busy(busy);
        }
    }
}

/// What became of a request read here.
enum Next {
    /// Answered; the connection may carry another.
    Served,
    /// The connection is done (closed by the client, timed out, or closing).
    Close,
    /// Not a plain call: pingora takes the connection from here.
    HandOver,
}

#[async_trait]
impl ServerApp for DataPlane {
    async fn process_new(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        let socket = match take_socket(&stream) {
            Ok(socket) => socket,
            Err(e) => {
                tracing::debug!(error = %e, "the connection is served by pingora alone");
                serve_through_pingora(&self.router, stream, BytesMut::new(), shutdown).await;
                return None;
            }
        };
        // The socket lives on in its duplicate; pingora's wrapper, with
        // nothing read into it yet, is closed.
        drop(stream);
        let mut conn = Connection::new(socket, shutdown);
        let max_connections = self.router.gateway.runtime().config.server.max_connections.min(self.fd_room);
        conn.registered = Some(self.open.register(max_connections, conn.stream.as_raw_fd()));
        loop {
            match self.serve_next(&mut conn, shutdown).await {
                Next::Served => {}
                Next::Close => return None,
                Next::HandOver => conn = self.serve_one_through_pingora(conn, shutdown).await?,
            }
        }
    }
}

impl DataPlane {
    /// Hands one request to pingora's session, its bytes read so far first,
    /// and takes the connection back after the reply: every head on a
    /// connection is read here first, under one header deadline and one
    /// connection bound.
    async fn serve_one_through_pingora(&self, conn: Connection, shutdown: &ShutdownWatch) -> Option<Connection> {
        let Connection { registered, stream, buf, idle, active, stopping, accepted_host } = conn;
        let mut session = Session::new_http1(Box::new(L4Stream::from(stream)));
        session.set_keepalive(if *shutdown.borrow() { None } else { Some(KEEP_ALIVE.as_secs()) });
        if !buf.is_empty() {
            session.set_pipelined_prefix(buf);
        }
        if let Some(registered) = &registered {
            registered.set_busy(true);
        }
        // Busy until the socket is this connection's own again: an eviction
        // never touches a descriptor pingora's session may have closed.
        let back = self.router.serve_one(session, shutdown).await?;
        let stream = take_socket(&back.stream).ok()?;
        if let Some(registered) = &registered {
            registered.set_fd(stream.as_raw_fd());
            registered.set_busy(false);
        }
        // (The duplicate carries the connection on; this closes the original descriptor.)
        drop(back.stream);
        let buf = back.pipelined.unwrap_or_else(|| BytesMut::with_capacity(READ_BUF));
        Some(Connection { registered, stream, buf, idle, active, stopping, accepted_host })
    }
}

/// The TCP socket under pingora's freshly accepted `stream`, as a tokio
/// socket of its own: a duplicate of its descriptor, so that dropping
/// `stream` then leaves the connection open. Fails for anything that is not
/// a plain TCP socket (pingora's listener here accepts only those).
fn take_socket(stream: &Stream) -> std::io::Result<TcpStream> {
    let Some(stream) = stream.as_any().downcast_ref::<L4Stream>() else {
        return Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "not a plain socket"));
    };
    // SAFETY: the descriptor is `stream`'s, open for as long as it is borrowed.
    let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    let socket = std::net::TcpStream::from(fd.try_clone_to_owned()?);
    // A Unix socket has no IP address: this fails for it.
    socket.local_addr()?;
    socket.set_nonblocking(true)?;
    TcpStream::from_std(socket)
}

/// The routes the gateway's own reader serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeanRoute {
    /// `POST /tools/call` (or `/call`).
    Call,
    /// `POST /mcp`.
    Mcp,
}

impl LeanRoute {
    /// The route as the metrics label it.
    fn label(self) -> &'static str {
        match self {
            LeanRoute::Call => "/tools/call",
            LeanRoute::Mcp => "/mcp",
        }
    }
}

/// Where the headers `/mcp` reads are in a head (the first of each).
#[derive(Debug, Default)]
struct McpPositions {
    /// `MCP-Protocol-Version`.
    protocol_version: Option<Range<usize>>,
    /// `Mcp-Method`.
    method: Option<Range<usize>>,
    /// `Mcp-Name`.
    name: Option<Range<usize>>,
    /// `Mcp-Session-Id`.
    session: Option<Range<usize>>,
    /// Whether one of the three headers mirroring the body came twice.
    duplicated: bool,
}

/// A plain call's head, parsed: what serving it needs, as positions in the
/// connection's buffer (the head stays there until the call is admitted).
struct CallHead {
    /// Which route it is for.
    route: LeanRoute,
    /// The head's length in the buffer, blank line included.
    len: usize,
    /// The body's declared length.
    body_len: usize,
    /// Where the `OXP-API-Key` value is.
    api_key: Option<Range<usize>>,
    /// Where the `Authorization` value is.
    authorization: Option<Range<usize>>,
    /// Where the `traceparent` value is, continued upstream.
    traceparent: Option<Range<usize>>,
    /// Where the (one) `Host` value is.
    host: Range<usize>,
    /// Where the `Origin` value is, when a browser sent one.
    origin: Option<Range<usize>>,
    /// `/mcp`: where its own headers are.
    mcp: McpPositions,
}

impl CallHead {
    /// The credentials the head carries, read from the buffer it was parsed from.
    fn credentials<'b>(&self, buf: &'b [u8]) -> Credentials<'b> {
        Credentials {
            api_key: self.api_key.clone().map(|at| &buf[at]),
            authorization: self.authorization.clone().map(|at| &buf[at]),
        }
    }

    /// The client's `traceparent`, when it is text (httparse let no control
    /// bytes into the head's values).
    fn traceparent(&self, buf: &[u8]) -> Option<String> {
        let value = &buf[self.traceparent.clone()?];
        std::str::from_utf8(value).ok().filter(|v| v.is_ascii()).map(str::to_owned)
    }

    /// What `/mcp` reads of the head, from the head's bytes, with the
    /// client's `traceparent`.
    fn mcp_head<'b>(&self, head: &'b [u8], traceparent: Option<String>) -> McpHead<'b> {
        let at = |range: &Option<Range<usize>>| range.clone().map(|range| &head[range]);
        McpHead {
            protocol_version: at(&self.mcp.protocol_version),
            method: at(&self.mcp.method),
            name: at(&self.mcp.name),
            session: at(&self.mcp.session),
            duplicated: self.mcp.duplicated,
            traceparent,
        }
    }
}

/// What the buffer holds.
// (Returned and matched at once: boxing the head would be an allocation
// per request.)
#[allow(clippy::large_enum_variant)]
enum Parsed {
    /// A complete head of a plain call.
    Call(CallHead),
    /// Not all of a head yet.
    Partial,
    /// Anything else.
    Other,
}

impl DataPlane {
    /// Reads, serves and answers the connection's next request, unless it is
    /// not a plain call.
    async fn serve_next(&self, conn: &mut Connection, shutdown: &ShutdownWatch) -> Next {
        let gateway = &self.router.gateway;
        let (max_header_bytes, max_body, body_timeout, max_in_flight, header_timeout) = {
            let server = &gateway.runtime().config.server;
            (
                server.max_header_bytes,
                server.max_body_bytes,
                server.body_timeout.0,
                server.max_in_flight,
                server.header_timeout.0,
            )
        };
        let head = match read_call_head(conn, max_header_bytes, max_body, header_timeout).await {
            Ok(head) => head,
            Err(HeadWait::Done(next)) => return next,
            Err(HeadWait::TimedOut) => {
                let reply = RequestError::HeadTimeout(header_timeout).to_reply();
                gateway.metrics.record_http("other", reply.status);
                return write_reply(conn, &reply, false).await;
            }
        };
        // Past this point the request is served here; until it, nothing is
        // consumed, and pingora's path answers (and counts) what is refused.
        if *shutdown.borrow() {
            return Next::HandOver;
        }
        // Being served, for graceful shutdown: from its head to its reply.
        let serving = InFlight::enter(&self.router.in_flight);
        // The runtime the request is served under: loaded once its head is
        // in (not while the connection idled), and kept to its end.
        let runtime = gateway.runtime_owned();
        if let Err(refused) = check_browser(conn, &head, &runtime) {
            let reply = refused.to_reply();
            gateway.metrics.record_http(head.route.label(), reply.status);
            return write_reply(conn, &reply, false).await;
        }
        let public_url = || gateway.public_url(&runtime);
        let target = match head.route {
            LeanRoute::Call => Target::Otc,
            LeanRoute::Mcp => Target::Mcp,
        };
        let Ok(caller) =
            runtime.authenticator.authenticate_credentials(head.credentials(&conn.buf), target, public_url)
        else {
            return Next::HandOver;
        };
        let traceparent = head.traceparent(&conn.buf);
        // `/mcp` reads more of its head once the body is in: the head is
        // kept aside (no copy), where a call's is dropped.
        let mcp_head = match head.route {
            LeanRoute::Call => {
                conn.buf.advance(head.len);
                None
            }
            LeanRoute::Mcp => Some(conn.buf.split_to(head.len)),
        };
        let (reply, keep_alive) = match read_body_within(conn, head.body_len, body_timeout).await {
            Ok(Some(body)) => {
                // In flight from here: a request counts once it has arrived.
                let (in_flight, count) = InFlight::enter(&self.router.admitted);
                let served = if count > max_in_flight {
                    Err(RequestError::Overloaded(max_in_flight))
                } else {
                    conn.set_busy(true);
                    match &mcp_head {
                        None => self.router.run_call(runtime, &caller, &body, traceparent).await,
                        Some(bytes) => {
                            let mcp_head = head.mcp_head(bytes, traceparent);
                            // A stream is answered only to a request whose
                            // `Mcp-Method` header says `subscriptions/listen`
                            // (the front checks the header against the body
                            // before it dispatches), and such heads are
                            // pingora's (`parse_call_head`): none comes here.
                            // Were one to, it would get an error, not a hang.
                            Ok(self.router.run_mcp(runtime, &caller, &mcp_head, &body).await.into_reply())
                        }
                    }
                };
                drop(in_flight);
                conn.set_busy(false);
                let reply = served.unwrap_or_else(|e| e.to_reply());
                let keep_alive = !reply.close && !*shutdown.borrow();
                (reply, keep_alive)
            }
            // The client went away mid-body, or its connection was closed
            // to make room: nobody to answer.
            Ok(None) => return Next::Close,
            Err(_) => (RequestError::BodyTimeout(body_timeout).to_reply(), false),
        };
        gateway.metrics.record_http(head.route.label(), reply.status);
        drop(serving);
        write_reply(conn, &reply, keep_alive).await
    }
}

/// The browser checks of a call's head, the `Host` one skipped when this
/// connection's last accepted `Host` was the same under the same runtime.
fn check_browser(conn: &mut Connection, head: &CallHead, runtime: &Arc<Runtime>) -> Result<(), RequestError> {
    let host = &conn.buf[head.host.clone()];
    let known = conn.accepted_host.as_ref().is_some_and(|(seen_under, seen)| {
        std::ptr::eq(seen_under.as_ptr(), Arc::as_ptr(runtime)) && seen.as_slice() == host
    });
    if !known {
        runtime.browser.check_host(Some(host))?;
        conn.accepted_host = Some((Arc::downgrade(runtime), host.to_vec()));
    }
    let mcp = head.route == LeanRoute::Mcp;
    Ok(runtime.browser.check_origin(head.origin.clone().map(|at| &conn.buf[at]), mcp)?)
}

/// Why no plain call's head came.
enum HeadWait {
    /// Not a plain call's (hand over), or the connection is done.
    Done(Next),
    /// The head did not arrive whole within `server.header_timeout` of its
    /// first byte.
    TimedOut,
}

/// Waits for a complete head in the connection's buffer and parses it; `Err`
/// when it is not a plain call's, the connection is done, or the head is
/// too slow.
///
/// While no byte of a head is in, the keep-alive bounds the wait; from the
/// first byte, the header deadline does (the `idle` timer is moved to it,
/// and back once the head is in). A head that comes in one read, as most
/// do, never reads the clock for it.
async fn read_call_head(
    conn: &mut Connection,
    max_header_bytes: usize,
    max_body: usize,
    header_timeout: Duration,
) -> Result<CallHead, HeadWait> {
    let mut head_deadline = None;
    loop {
        let parsed = match parse_call_head(&conn.buf, max_header_bytes, max_body) {
            Parsed::Partial if conn.buf.len() >= MAX_LEAN_HEAD => Parsed::Other,
            parsed => parsed,
        };
        if head_deadline.is_some() && !matches!(parsed, Parsed::Partial) {
            // (pingora's path bounds the rest of a head handed over.) The
            // bytes so far are counted in this reset.
            conn.idle.as_mut().reset(Instant::now() + KEEP_ALIVE);
            conn.active = false;
        }
        match parsed {
            Parsed::Call(head) => return Ok(head),
            Parsed::Other => return Err(HeadWait::Done(Next::HandOver)),
            Parsed::Partial => {}
        }
        if head_deadline.is_none() && !conn.buf.is_empty() {
            let deadline = Instant::now() + header_timeout;
            conn.idle.as_mut().reset(deadline);
            head_deadline = Some(deadline);
        }
        let Connection { stream, buf, idle, active, stopping, .. } = conn;
        let read = tokio::select! {
            biased;
            read = read_more(stream, buf) => Some(read),
            () = idle.as_mut() => None,
            // Shutdown began: an idle connection closes at once, a partial
            // head goes unanswered (as on pingora's path).
            () = stopping.as_mut() => return Err(HeadWait::Done(Next::Close)),
        };
        let Some(read) = read else {
            if head_deadline.is_some() {
                return Err(HeadWait::TimedOut);
            }
            // Idle too long closes the connection, as shutdown does; a
            // client that sent something meanwhile gets more time.
            if !std::mem::take(active) {
                return Err(HeadWait::Done(Next::Close));
            }
            idle.as_mut().reset(Instant::now() + KEEP_ALIVE);
            continue;
        };
        match read {
            Ok(n) if n > 0 => *active = true,
            // Closed or broken: a partial head has nobody waiting for its answer.
            _ => return Err(HeadWait::Done(Next::Close)),
        }
    }
}

/// Parses the head at the start of `buf` if it is a plain call's: `POST
/// /tools/call` (or `/call`) or `POST /mcp`, HTTP/1.1, one Content-Length
/// within `max_body`, no Transfer-Encoding, Expect, Upgrade or `Connection`
/// other than keep-alive, headers within `max_header_bytes`; for `/mcp`, no
/// `Mcp-Method: subscriptions/listen` (its answer is an event stream,
/// written through pingora's session).
fn parse_call_head(buf: &[u8], max_header_bytes: usize, max_body: usize) -> Parsed {
    if buf.is_empty() {
        return Parsed::Partial;
    }
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let route = match request.path {
        Some("/tools/call" | "/call") => LeanRoute::Call,
        Some("/mcp") => LeanRoute::Mcp,
        _ => return Parsed::Other,
    };
    if request.method != Some("POST") || request.version != Some(1) {
        return Parsed::Other;
    }
    let mut head = CallHead {
        route,
        len,
        body_len: 0,
        api_key: None,
        authorization: None,
        traceparent: None,
        host: 0..0,
        origin: None,
        mcp: McpPositions::default(),
    };
    let mut body_len = None;
    let mut hosts = 0;
    let mut size = 0;
    let at = |value: &[u8]| {
        let start = value.as_ptr() as usize - buf.as_ptr() as usize;
        start..start + value.len()
    };
    for header in request.headers.iter() {
        // (httparse has refused control bytes in values, as `HeaderValue` does.)
        let (name, value) = (header.name, header.value);
        size += header_line_size(name, value);
        let slot = if name.eq_ignore_ascii_case("content-length") {
            let declared = decimal(value.trim_ascii());
            match (body_len, declared) {
                (None, Some(n)) if n <= max_body => body_len = Some(n),
                // Several, unreadable or too large: pingora's path refuses it
                // with the right status.
                _ => return Parsed::Other,
            }
            continue;
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            || name.eq_ignore_ascii_case("expect")
            || name.eq_ignore_ascii_case("upgrade")
            || (name.eq_ignore_ascii_case("connection") && !value.eq_ignore_ascii_case(b"keep-alive"))
        {
            return Parsed::Other;
        } else if name.eq_ignore_ascii_case(API_KEY_HEADER.as_str()) {
            &mut head.api_key
        } else if name.eq_ignore_ascii_case("authorization") {
            &mut head.authorization
        } else if name.eq_ignore_ascii_case("traceparent") {
            // A second one is ignored, as on pingora's path.
            head.traceparent.get_or_insert_with(|| at(value));
            continue;
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
            head.host = at(value);
            continue;
        } else if name.eq_ignore_ascii_case("origin") {
            &mut head.origin
        } else if route == LeanRoute::Mcp && name.as_bytes().get(..4).is_some_and(|p| p.eq_ignore_ascii_case(b"mcp-")) {
            let mcp = &mut head.mcp;
            let mirrored = if name.eq_ignore_ascii_case(PROTOCOL_VERSION_HEADER) {
                &mut mcp.protocol_version
            } else if name.eq_ignore_ascii_case(METHOD_HEADER) {
                // Any line naming it, whatever else the head says.
                if value.trim_ascii().eq_ignore_ascii_case(b"subscriptions/listen") {
                    return Parsed::Other;
                }
                &mut mcp.method
            } else if name.eq_ignore_ascii_case(NAME_HEADER) {
                &mut mcp.name
            } else {
                if name.eq_ignore_ascii_case(SESSION_HEADER) {
                    mcp.session.get_or_insert_with(|| at(value));
                }
                continue;
            };
            // The first counts, as pingora's `HeaderMap::get` has it; a
            // second is the front's to refuse.
            match mirrored {
                Some(_) => mcp.duplicated = true,
                None => *mirrored = Some(at(value)),
            }
            continue;
        } else {
            continue;
        };
        if slot.is_some() {
            // Credentials (or Origin) sent twice: pingora's path refuses them.
            return Parsed::Other;
        }
        *slot = Some(at(value));
    }
    // No Host or several: pingora's path refuses it (`head`).
    if size > max_header_bytes || hosts != 1 {
        return Parsed::Other;
    }
    match body_len {
        Some(body_len) => Parsed::Call(CallHead { body_len, ..head }),
        None => Parsed::Other,
    }
}

/// Reads more of the connection into its buffer; 0 when the client closed.
async fn read_more(stream: &mut TcpStream, buf: &mut BytesMut) -> std::io::Result<usize> {
    http1::read_more(stream, buf, READ_BUF).await
}

/// The body that follows a head, `len` bytes, within `timeout`; `Ok(None)`
/// when the connection ended first. Bytes past it stay in the buffer: a
/// pipelined request. A body that came with its head (most do) is taken
/// without a timer.
async fn read_body_within(conn: &mut Connection, len: usize, timeout: Duration) -> Result<Option<Bytes>, Elapsed> {
    if conn.buf.len() >= len {
        return Ok(Some(conn.buf.split_to(len).freeze()));
    }
    fast_timeout(timeout, read_body(&mut conn.stream, &mut conn.buf, len)).await
}

/// The body that follows a head, `len` bytes; `None` when the connection
/// ended first.
async fn read_body(stream: &mut TcpStream, buf: &mut BytesMut, len: usize) -> Option<Bytes> {
    buf.reserve(len - buf.len());
    while buf.len() < len {
        match read_more(stream, buf).await {
            Ok(n) if n > 0 => {}
            _ => return None,
        }
    }
    Some(buf.split_to(len).freeze())
}

/// Writes a reply; closes the connection unless it is kept alive.
async fn write_reply(conn: &mut Connection, reply: &Reply, keep_alive: bool) -> Next {
    if let Err(e) = super::send::write_reply(&mut conn.stream, reply, false, keep_alive).await {
        tracing::debug!(error = %e, "could not write the response");
        return Next::Close;
    }
    if keep_alive {
        return Next::Served;
    }
    // (A client that already went away makes this fail: nothing to do.)
    let _ = conn.stream.shutdown().await;
    Next::Close
}

/// Serves the rest of the connection through pingora's session, `read` (the
/// bytes read so far) first: pingora's own loop for HTTP/1 (its blanket
/// `ServerApp` for `HttpServerApp`s).
async fn serve_through_pingora(router: &Arc<Router>, stream: Stream, read: BytesMut, shutdown: &ShutdownWatch) {
    let mut session = Session::new_http1(stream);
    session.set_keepalive(if *shutdown.borrow() { None } else { Some(KEEP_ALIVE.as_secs()) });
    if !read.is_empty() {
        session.set_pipelined_prefix(read);
    }
    let mut result = router.process_new_http(session, shutdown).await;
    while let Some((stream, settings)) = result.map(ReusedHttpStream::consume) {
        let mut session = Session::new_http1(stream);
        if let Some(settings) = settings {
            settings.apply_to_session(&mut session);
        }
        result = router.process_new_http(session, shutdown).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// Parses `head` with a `Host` line added after its request line.
    fn parse(head: &str) -> Parsed {
        parse_call_head(with_host(head).as_bytes(), 8192, 1024)
    }

    fn with_host(head: &str) -> String {
        match head.split_once("\r\n") {
            Some((line, rest)) => format!("{line}\r\nHost: localhost\r\n{rest}"),
            None => head.to_owned(),
        }
    }

    fn is_call(parsed: &Parsed) -> bool {
        matches!(parsed, Parsed::Call(_))
    }

    #[tokio::test]
    async fn the_socket_taken_from_pingoras_stream_outlives_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("address")).await.expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        let stream: Stream = Box::new(L4Stream::from(accepted));
        let mut socket = take_socket(&stream).expect("a TCP socket is taken");
        drop(stream);
        // The connection is still open, both ways, on the taken socket.
        let mut four = [0u8; 4];
        client.write_all(b"ping").await.expect("client writes");
        socket.read_exact(&mut four).await.expect("the gateway reads");
        assert_eq!(&four, b"ping");
        socket.write_all(b"pong").await.expect("the gateway writes");
        client.read_exact(&mut four).await.expect("client reads");
        assert_eq!(&four, b"pong");
        // And it closes with it.
        drop(socket);
        assert_eq!(client.read(&mut four).await.expect("end of stream"), 0);
    }

    /// A connection on a fresh socket pair, and the client's end.
    async fn connection() -> (Connection, TcpStream, tokio::sync::watch::Sender<bool>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("address")).await.expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        let (shutdown, watch) = tokio::sync::watch::channel(false);
        (Connection::new(accepted, &watch), client, shutdown)
    }

    /// The header deadline the timer tests use.
    const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_closes_after_the_keep_alive() {
        let (mut conn, _client, _shutdown) = connection().await;
        let started = Instant::now();
        assert!(matches!(
            read_call_head(&mut conn, 8192, 1024, HEADER_TIMEOUT).await,
            Err(HeadWait::Done(Next::Close))
        ));
        assert_eq!(started.elapsed(), KEEP_ALIVE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_must_arrive_whole_within_the_header_timeout_of_its_first_byte() {
        let (mut conn, mut client, _shutdown) = connection().await;
        let started = Instant::now();
        let writer = tokio::spawn(async move {
            tokio::time::sleep(KEEP_ALIVE / 2).await;
            // One byte a second: each read is quick, the head never ends.
            for byte in b"POST /tools/call HTTP/1.1\r\nHost: localhost\r\nX-Slow: " {
                client.write_all(&[*byte]).await.expect("a byte");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            client
        });
        assert!(matches!(read_call_head(&mut conn, 8192, 1024, HEADER_TIMEOUT).await, Err(HeadWait::TimedOut)));
        // Timed from the head's first byte, whatever came after it.
        assert_eq!(started.elapsed(), KEEP_ALIVE / 2 + HEADER_TIMEOUT);
        drop(writer.await.expect("the writer"));
    }

    #[tokio::test(start_paused = true)]
    async fn after_a_slow_head_the_keep_alive_counts_again() {
        let (mut conn, mut client, _shutdown) = connection().await;
        client.write_all(b"POST /tools/call HTTP/1.1\r\n").await.expect("part of a head");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let writer = tokio::spawn(async move {
            tokio::time::sleep(HEADER_TIMEOUT / 2).await;
            client.write_all(b"Host: localhost\r\nContent-Length: 2\r\n\r\n{}").await.expect("the rest");
            client
        });
        let head = read_call_head(&mut conn, 8192, 1024, HEADER_TIMEOUT).await;
        assert!(matches!(head, Ok(CallHead { body_len: 2, .. })));
        conn.buf.clear();
        let served = Instant::now();
        assert!(matches!(
            read_call_head(&mut conn, 8192, 1024, HEADER_TIMEOUT).await,
            Err(HeadWait::Done(Next::Close))
        ));
        assert_eq!(served.elapsed(), KEEP_ALIVE, "an idle connection waits the keep-alive, not the header deadline");
        drop(writer.await.expect("the writer"));
    }

    #[tokio::test]
    async fn only_a_tcp_socket_is_taken() {
        let (duplex, _other_end) = tokio::io::duplex(64);
        assert!(take_socket(&(Box::new(duplex) as Stream)).is_err(), "not a pingora socket");
        let (unix, _peer) = tokio::net::UnixStream::pair().expect("a socket pair");
        assert!(take_socket(&(Box::new(L4Stream::from(unix)) as Stream)).is_err(), "a Unix socket");
    }

    #[test]
    fn a_plain_call_head_is_read_with_its_length_and_headers() {
        let head = "POST /tools/call HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer k\r\n\
                    traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\nContent-Length: 12\r\n\r\n";
        let buf = format!("{head}{{\"body\":\"x\"}}");
        let Parsed::Call(call) = parse_call_head(buf.as_bytes(), 8192, 1024) else {
            panic!("a plain call");
        };
        assert_eq!(call.len, head.len(), "the head ends after its blank line");
        assert_eq!(call.body_len, 12);
        let credentials = call.credentials(buf.as_bytes());
        assert_eq!(credentials.authorization, Some(&b"Bearer k"[..]));
        assert_eq!(credentials.api_key, None);
        assert_eq!(
            call.traceparent(buf.as_bytes()).as_deref(),
            Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
        );
        let twice =
            with_host("POST /call HTTP/1.1\r\ntraceparent: first\r\ntraceparent: second\r\nContent-Length: 0\r\n\r\n");
        let Parsed::Call(call) = parse_call_head(twice.as_bytes(), 8192, 1024) else { panic!("a plain call") };
        assert_eq!(call.traceparent(twice.as_bytes()).as_deref(), Some("first"), "the first traceparent counts");
        let keyed = with_host("POST /tools/call HTTP/1.1\r\nOXP-API-Key: k2\r\nContent-Length: 0\r\n\r\n");
        let Parsed::Call(call) = parse_call_head(keyed.as_bytes(), 8192, 1024) else { panic!("a plain call") };
        assert_eq!(call.credentials(keyed.as_bytes()).api_key, Some(&b"k2"[..]));
        assert!(
            matches!(parse_call_head(b"POST /call HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 8192, 1024), Parsed::Other),
            "no Host"
        );
        assert!(
            matches!(parse("POST /call HTTP/1.1\r\nHost: b\r\nContent-Length: 0\r\n\r\n"), Parsed::Other),
            "two Hosts"
        );
        assert!(is_call(&parse("POST /call HTTP/1.1\r\nContent-Length: 0\r\nConnection: Keep-Alive\r\n\r\n")));
        let Parsed::Call(call) = parse("POST /call HTTP/1.1\r\nContent-Length: 7 \r\n\r\n") else {
            panic!("a plain call")
        };
        assert_eq!(call.body_len, 7, "whitespace around the length is not part of it");
    }

    #[test]
    fn a_head_cut_short_waits_for_more() {
        assert!(matches!(parse(""), Parsed::Partial));
        assert!(matches!(parse("POST /tools/call HTTP/1.1\r\nContent-Len"), Parsed::Partial));
    }

    #[test]
    fn every_other_request_is_pingoras() {
        for head in [
            "GET /tools/call HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /tools HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /tools/call?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /tools/call HTTP/1.0\r\nContent-Length: 2\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2x\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: -0\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2048\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nUpgrade: h2c\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nBad Header: x\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nAuthorization: a\r\nauthorization: b\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nOXP-API-Key: a\r\nOXP-API-Key: a\r\n\r\n",
            "POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nX-Del: a\x7fb\r\n\r\n",
            "NOT HTTP\r\n\r\n",
        ] {
            assert!(matches!(parse(head), Parsed::Other), "{head:?}");
        }
        let padded = format!("POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\nX-Pad: {}\r\n\r\n", "a".repeat(9000));
        assert!(matches!(parse(&padded), Parsed::Other), "headers over max_header_bytes");
        let many: String = (0..MAX_HEADERS + 1).map(|i| format!("X-{i}: y\r\n")).collect();
        let crowded = format!("POST /tools/call HTTP/1.1\r\nContent-Length: 2\r\n{many}\r\n");
        assert!(matches!(parse(&crowded), Parsed::Other), "more header lines than the slots");
    }

    /// `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Session-Id`
    /// and whether a mirrored one came twice.
    type McpFields = (Option<String>, Option<String>, Option<String>, Option<String>, bool);

    /// The `/mcp` headers a head read here carries, as the front sees them.
    fn mcp_fields(buf: &str) -> Option<McpFields> {
        let Parsed::Call(head) = parse_call_head(buf.as_bytes(), 8192, 1024) else { return None };
        assert_eq!(head.route, LeanRoute::Mcp, "{buf:?}");
        let mcp = head.mcp_head(&buf.as_bytes()[..head.len], None);
        let text = |v: Option<&[u8]>| v.map(|v| String::from_utf8_lossy(v).into_owned());
        Some((text(mcp.protocol_version), text(mcp.method), text(mcp.name), text(mcp.session), mcp.duplicated))
    }

    #[test]
    fn an_mcp_head_is_read_with_the_headers_the_front_needs() {
        let head = "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n\
                    Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
                    Mcp-Method: tools/call\r\nmcp-name: =?base64?dA==?=\r\nMcp-Session-Id: s-1.url\r\n\
                    Authorization: Bearer k\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n\
                    Content-Length: 12\r\n\r\n";
        let buf = format!("{head}{{\"body\":\"x\"}}");
        let Parsed::Call(call) = parse_call_head(buf.as_bytes(), 8192, 1024) else { panic!("a plain MCP request") };
        assert_eq!((call.route, call.len, call.body_len), (LeanRoute::Mcp, head.len(), 12));
        assert_eq!(call.credentials(buf.as_bytes()).authorization, Some(&b"Bearer k"[..]));
        let traceparent = call.traceparent(buf.as_bytes());
        let mcp = call.mcp_head(&buf.as_bytes()[..call.len], traceparent);
        assert_eq!(mcp.protocol_version, Some(&b"2026-07-28"[..]));
        assert_eq!(mcp.method, Some(&b"tools/call"[..]));
        assert_eq!(mcp.name, Some(&b"=?base64?dA==?="[..]));
        assert_eq!(mcp.session, Some(&b"s-1.url"[..]));
        assert!(!mcp.duplicated);
        assert_eq!(mcp.traceparent.as_deref(), Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"));

        // A call's head carries no MCP headers, whatever it sent.
        let call = with_host("POST /tools/call HTTP/1.1\r\nMcp-Method: tools/call\r\nContent-Length: 0\r\n\r\n");
        let Parsed::Call(call) = parse_call_head(call.as_bytes(), 8192, 1024) else { panic!("a plain call") };
        assert_eq!(call.route, LeanRoute::Call);
        assert!(call.mcp.method.is_none());

        // A mirrored header sent twice: the first is read, and the front is
        // told (it refuses the request); a second session id is not.
        let twice = |lines: &str| {
            mcp_fields(&with_host(&format!("POST /mcp HTTP/1.1\r\n{lines}Content-Length: 0\r\n\r\n")))
                .expect("read here")
        };
        for lines in [
            "MCP-Protocol-Version: 2026-07-28\r\nmcp-protocol-version: 2025-11-25\r\n",
            "Mcp-Method: tools/call\r\nMCP-METHOD: tools/list\r\n",
            "Mcp-Name: a\r\nMcp-Name: a\r\n",
        ] {
            let (version, method, name, _, duplicated) = twice(lines);
            assert!(duplicated, "{lines:?}");
            assert!([version, method, name].contains(&Some(
                lines
                    .split("\r\n")
                    .next()
                    .and_then(|l| l.split_once(": "))
                    .map(|(_, v)| v.to_owned())
                    .expect("a value")
            )));
        }
        let (.., session, duplicated) = twice("Mcp-Session-Id: first\r\nMcp-Session-Id: second\r\n");
        assert_eq!((session.as_deref(), duplicated), (Some("first"), false));
        let (.., duplicated) = twice("Mcp-Other: x\r\nMcp-Other: y\r\nMcp-Name: a\r\n");
        assert!(!duplicated, "other Mcp- headers are not mirrored ones");
    }

    #[test]
    fn every_other_mcp_request_is_pingoras() {
        for head in [
            "GET /mcp HTTP/1.1\r\nAccept: text/event-stream\r\n\r\n",
            "DELETE /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
            "PUT /mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /mcp/ HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /mcp?session=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /MCP HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /mcp HTTP/1.0\r\nContent-Length: 2\r\n\r\n",
            "POST /mcp HTTP/1.1\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: 2048\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nAuthorization: a\r\nAuthorization: b\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nOrigin: a\r\nOrigin: b\r\n\r\n",
            // Its answer is an event stream, written through pingora's session.
            "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nMcp-Method: subscriptions/listen\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nmcp-method:  Subscriptions/Listen \t\r\n\r\n",
            "POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nMcp-Method: tools/call\r\nMcp-Method: subscriptions/listen\r\n\r\n",
        ] {
            assert!(matches!(parse(head), Parsed::Other), "{head:?}");
        }
        assert!(matches!(
            parse_call_head(b"POST /mcp HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 8192, 1024),
            Parsed::Other
        ));
        // The method is the header's whole value: anything else is read here
        // (and refused by the front when it does not match the body).
        for value in ["subscriptions/listen2", "subscriptions", "tools/call subscriptions/listen"] {
            let head = format!("POST /mcp HTTP/1.1\r\nContent-Length: 2\r\nMcp-Method: {value}\r\n\r\n");
            assert!(is_call(&parse(&head)), "{value}");
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// No bytes make the reader panic, and whatever it takes as a call
        /// is one: its head ends inside the buffer.
        #[test]
        fn any_bytes_are_read_without_a_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            if let Parsed::Call(call) = parse_call_head(&bytes, 8192, 1024) {
                proptest::prop_assert!(call.len <= bytes.len());
                let _ = (call.credentials(&bytes), call.traceparent(&bytes));
            }
        }

        /// No bytes after an `/mcp` request line make the reader panic; what
        /// it takes is an `/mcp` request whose head ends inside the buffer,
        /// and never one naming `subscriptions/listen`.
        #[test]
        fn any_mcp_head_is_read_without_a_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let mut buf = b"POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n".to_vec();
            buf.extend_from_slice(&bytes);
            if let Parsed::Call(call) = parse_call_head(&buf, 8192, 1024) {
                proptest::prop_assert!(call.len <= buf.len());
                proptest::prop_assert_eq!(call.route, LeanRoute::Mcp);
                let mcp = call.mcp_head(&buf[..call.len], call.traceparent(&buf));
                let listen = mcp.method.is_some_and(|m| m.trim_ascii().eq_ignore_ascii_case(b"subscriptions/listen"));
                proptest::prop_assert!(!listen);
            }
        }

        /// Among other headers in any order and case, the `/mcp` headers
        /// found are the first of each sent; `duplicated` says whether a
        /// mirrored one came twice; a `subscriptions/listen` is never read here.
        #[test]
        fn the_mcp_headers_found_are_the_ones_sent(
            lines in proptest::collection::vec((0usize..6, "[!-~]([ -~]{0,20}[!-~])?", proptest::bool::ANY), 0..10),
        ) {
            const NAMES: [&str; 6] = ["MCP-Protocol-Version", "Mcp-Method", "Mcp-Name", "Mcp-Session-Id", "X-Other", "Mcp-Other"];
            let mut text = String::from("POST /mcp HTTP/1.1\r\nHost: localhost\r\n");
            let mut firsts: [Option<String>; 6] = Default::default();
            let mut counts = [0usize; 6];
            let mut listen = false;
            for (which, value, upper) in &lines {
                // Sometimes the value that must go to pingora.
                let value = if value.len() % 7 == 0 && *which == 1 { "subscriptions/listen".to_owned() } else { value.clone() };
                let name = if *upper { NAMES[*which].to_ascii_uppercase() } else { NAMES[*which].to_ascii_lowercase() };
                text.push_str(&format!("{name}: {value}\r\n"));
                firsts[*which].get_or_insert(value.clone());
                counts[*which] += 1;
                listen |= *which == 1 && value.eq_ignore_ascii_case("subscriptions/listen");
            }
            text.push_str("Content-Length: 2\r\n\r\n{}");
            let found = mcp_fields(&text);
            if listen {
                proptest::prop_assert!(found.is_none(), "a listen read here: {:?}", text);
                return Ok(());
            }
            let Some((version, method, name, session, duplicated)) = found else {
                return Err(proptest::test_runner::TestCaseError::fail(format!("not read here: {text:?}")));
            };
            proptest::prop_assert_eq!([version, method, name, session], [firsts[0].clone(), firsts[1].clone(), firsts[2].clone(), firsts[3].clone()]);
            proptest::prop_assert_eq!(duplicated, counts[..3].iter().any(|&n| n > 1));
        }

        /// Among other headers in any order and case, the credentials and
        /// `traceparent` the reader finds are the ones sent.
        #[test]
        fn the_credentials_found_are_the_ones_sent(
            key in proptest::option::of("[!-~]([ -~]{0,30}[!-~])?"),
            authorization in proptest::option::of("[!-~]([ -~]{0,30}[!-~])?"),
            traceparent in proptest::option::of("[0-9a-f-]{1,55}"),
            others in proptest::collection::vec(("X-[A-Za-z0-9-]{1,10}", "[!-~]{0,20}"), 0..6),
            upper in proptest::bool::ANY,
        ) {
            let case = |name: &str| if upper { name.to_ascii_uppercase() } else { name.to_owned() };
            let mut lines: Vec<String> = others.iter().map(|(n, v)| format!("{n}: {v}")).collect();
            if let Some(key) = &key { lines.push(format!("{}: {key}", case("oxp-api-key"))); }
            if let Some(auth) = &authorization { lines.insert(0, format!("{}: {auth}", case("authorization"))); }
            if let Some(tp) = &traceparent { lines.push(format!("{}: {tp}", case("traceparent"))); }
            lines.push("Content-Length: 2".to_owned());
            lines.push("Host: localhost".to_owned());
            let head = format!("POST /tools/call HTTP/1.1\r\n{}\r\n\r\n{{}}", lines.join("\r\n"));
            let Parsed::Call(call) = parse_call_head(head.as_bytes(), 8192, 1024) else {
                return Err(proptest::test_runner::TestCaseError::fail(format!("not read as a call: {head:?}")));
            };
            let found = call.credentials(head.as_bytes());
            proptest::prop_assert_eq!(found.api_key, key.as_deref().map(str::as_bytes));
            proptest::prop_assert_eq!(found.authorization, authorization.as_deref().map(str::as_bytes));
            proptest::prop_assert_eq!(call.traceparent(head.as_bytes()), traceparent);
            proptest::prop_assert_eq!(&head[call.len..], "{}");
        }
    }
}
