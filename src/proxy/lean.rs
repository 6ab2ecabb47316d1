//! The lean reader: one client connection, its plain tool calls (OTC and
//! MCP) read here, everything else handed to pingora's session.
//!
//! The calls clients make most have a narrow shape: `POST /tools/call` or
//! `POST /mcp` over HTTP/1.1 with a Content-Length body. Their heads are
//! parsed by `lean_head.rs` into only what a call needs (pingora's session
//! spends a large share of a call's instructions reading a head:
//! benches/HISTORY.md, "Figures behind the code"), then served by the front
//! door (`front_door.rs`), as every request is.
//!
//! Anything else (other routes and methods, chunked bodies, `Expect`,
//! `Connection: close`, HTTP/1.0, a head httparse refuses, an MCP
//! `subscriptions/listen`, whose answer is an event stream written through
//! pingora's session) is handed to pingora untouched, one request at a
//! time: the bytes read so far become its session's first bytes, pingora's
//! path answers that one request (`PingoraPath::serve_one`), and the
//! connection comes back here with whatever the client sent past it. So
//! every head on a connection waits under this reader's keep-alive and
//! header deadline, and every connection counts against one bound
//! ([`OpenConnections`]). Nothing of a request is consumed until it is
//! known to be served here, so a hand-over never loses a byte.
//!
//! The reader works on the bare socket, taken out of pingora's `Stream` when
//! the connection is accepted ([`take_socket`]): that stream reads through a
//! buffer of its own (a copy of every byte) and reads the clock twice for
//! each read that waits, to time it. A hand-over wraps the socket in a new
//! `Stream`, and takes it out again (a duplicate descriptor) after the
//! reply.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
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

use super::front_door::{AcceptedHost, Answer, Counted, FrontDoor, RequestBody};
use super::lean_head::{parse_call_head, CallHead, Parsed};
use super::open_connections::{OpenConnections, Registered};
use super::pingora_path::PingoraPath;
use crate::error::RequestError;
use crate::http1;
use crate::mcp_endpoint::McpAnswer;
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

/// The data plane's pingora application: serves each connection, starting
/// with the lean reader.
pub struct DataPlane {
    pingora: Arc<PingoraPath>,
    open: Arc<OpenConnections>,
    /// The most client connections the process's open-file limit leaves
    /// room for: half of it, the other half for upstream connections and
    /// files. `server.max_connections` is capped at this.
    fd_room: usize,
}

impl DataPlane {
    /// The data plane in front of `door`, in a process that may have
    /// `open_files` descriptors (unknown: no cap but the config's).
    pub fn new(door: Arc<FrontDoor>, open_files: Option<u64>) -> DataPlane {
        let fd_room = open_files.map_or(usize::MAX, |n| usize::try_from(n / 2).unwrap_or(usize::MAX).max(1));
        let configured = door.gateway.generation().config.server.max_connections;
        if configured > fd_room {
            // (Info, not a warning: the default is above what many hosts allow.)
            tracing::info!(
                max_connections = configured,
                open_files_limit = open_files,
                "client connections capped at {fd_room}, half the open-file limit"
            );
        }
        DataPlane { pingora: Arc::new(PingoraPath::new(door)), open: Arc::default(), fd_room }
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
    /// The last `Host` the front door accepted on this connection.
    accepted_host: AcceptedHost,
}

impl Connection {
    fn new(stream: TcpStream) -> Connection {
        Connection {
            stream,
            buf: BytesMut::with_capacity(READ_BUF),
            idle: Box::pin(tokio::time::sleep(KEEP_ALIVE)),
            active: false,
            registered: None,
            accepted_host: None,
        }
    }

    /// It waits for a head again; `false` when shutdown began (it closes).
    /// Shutdown closes a connection waiting for a head (`open_connections`).
    fn wait_for_head(&self) -> bool {
        self.registered.as_ref().is_none_or(Registered::wait_for_head)
    }

    /// Its head is in: served to its end; `false` when shutdown closed it
    /// first.
    fn head_in(&self) -> bool {
        self.registered.as_ref().is_none_or(Registered::head_in)
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
                // Boxed, as the hand-over below.
                Box::pin(serve_through_pingora(&self.pingora, stream, BytesMut::new(), shutdown)).await;
                return None;
            }
        };
        // The socket lives on in its duplicate; pingora's wrapper, with
        // nothing read into it yet, is closed.
        drop(stream);
        let mut conn = Connection::new(socket);
        let max_connections = self.pingora.door.gateway.generation().config.server.max_connections.min(self.fd_room);
        conn.registered = Some(self.open.register(max_connections, conn.stream.as_raw_fd()));
        while conn.wait_for_head() {
            match self.serve_next(&mut conn, shutdown).await {
                Next::Served => {}
                Next::Close => return None,
                // Boxed: inline, pingora's session would be the largest state
                // of this loop, and every connection's future would be sized
                // for it (benches/README.md, "Code lines run, counted").
                Next::HandOver => conn = Box::pin(self.serve_one_through_pingora(conn, shutdown)).await?,
            }
        }
        None
    }

    /// Shutdown began and the listeners stopped: the connections waiting
    /// for a head close now.
    async fn cleanup(&self) {
        self.open.close_waiting();
    }
}

impl DataPlane {
    /// Hands one request to pingora's session, its bytes read so far first,
    /// and takes the connection back after the reply: every head on a
    /// connection is read here first, under one header deadline and one
    /// connection bound.
    async fn serve_one_through_pingora(&self, conn: Connection, shutdown: &ShutdownWatch) -> Option<Connection> {
        // Pingora's session serves it to its end (and answers a shutdown its
        // own way): the shutdown sweep must not cut it.
        if !conn.head_in() {
            return None;
        }
        let Connection { registered, stream, buf, idle, active, accepted_host } = conn;
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
        let back = self.pingora.serve_one(session, shutdown).await?;
        let stream = take_socket(&back.stream).ok()?;
        if let Some(registered) = &registered {
            registered.set_fd(stream.as_raw_fd());
            registered.set_busy(false);
        }
        // (The duplicate carries the connection on; this closes the original descriptor.)
        drop(back.stream);
        let buf = back.pipelined.unwrap_or_else(|| BytesMut::with_capacity(READ_BUF));
        Some(Connection { registered, stream, buf, idle, active, accepted_host })
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

impl DataPlane {
    /// Reads, serves and answers the connection's next request, unless it is
    /// not a plain call.
    async fn serve_next(&self, conn: &mut Connection, shutdown: &ShutdownWatch) -> Next {
        let door = &self.pingora.door;
        let (max_header_bytes, max_body, header_timeout) = {
            let server = &door.gateway.generation().config.server;
            (server.max_header_bytes, server.max_body_bytes, server.header_timeout.0)
        };
        let call = match read_call_head(conn, max_header_bytes, max_body, header_timeout).await {
            Ok(call) => call,
            Err(HeadWait::Done(next)) => return next,
            Err(HeadWait::TimedOut) => {
                let reply = RequestError::HeadTimeout(header_timeout).to_reply();
                door.gateway.metrics.record_http("other", reply.status);
                return write_reply(conn, &reply, false).await;
            }
        };
        // Past this point the request is served here; until it, nothing is
        // consumed, and pingora's path answers (and counts) what is refused.
        if *shutdown.borrow() {
            return Next::HandOver;
        }
        if !conn.head_in() {
            return Next::Close;
        }
        // Being served, for graceful shutdown: from its head to its reply.
        let (serving, _) = Counted::enter(&door.serving);
        // The generation the request is served under: loaded once its head is
        // in (not while the connection idled), and kept to its end.
        let generation = door.gateway.generation_owned();
        // The head is kept aside (no copy) while the body is read behind it.
        let bytes = conn.buf.split_to(call.len);
        let head = call.head(&bytes);
        let mut accepted = std::mem::take(&mut conn.accepted_host);
        let mut body = LeanBody { conn, len: call.body_len, gone: false };
        let answer = door.serve(generation, &head, &mut body, &mut accepted).await;
        let gone = body.gone;
        conn.accepted_host = accepted;
        conn.set_busy(false);
        drop(serving);
        if gone {
            // The client went away mid-body, or its connection was closed
            // to make room: nobody to answer.
            return Next::Close;
        }
        let reply = match answer {
            Answer::Reply(reply) => reply,
            // Heads asking for a stream are pingora's (`parse_call_head`):
            // none comes here. Were one to, it would get an error, not a hang.
            Answer::Stream(listen) => McpAnswer::Stream(listen).into_reply(),
        };
        let keep_alive = !reply.close && !*shutdown.borrow();
        write_reply(conn, &reply, keep_alive).await
    }
}

/// A plain call's body, `len` bytes behind its head on the connection.
struct LeanBody<'c> {
    conn: &'c mut Connection,
    len: usize,
    /// Whether the client went away before the body was whole.
    gone: bool,
}

impl RequestBody for LeanBody<'_> {
    /// The body, when the buffer holds it whole (its length was checked
    /// against the limit with the head).
    fn ready(&mut self, _limit: usize) -> Option<Result<Bytes, RequestError>> {
        if self.conn.buf.len() < self.len {
            return None;
        }
        self.conn.set_busy(true);
        Some(Ok(self.conn.buf.split_to(self.len).freeze()))
    }

    /// The body (its length was checked against the limit with the head).
    /// Once it is in, the connection runs a request: never closed for room.
    async fn read(&mut self, _limit: usize, deadline: Duration) -> Result<Bytes, RequestError> {
        match read_body_within(self.conn, self.len, deadline).await {
            Ok(Some(body)) => {
                self.conn.set_busy(true);
                Ok(body)
            }
            Ok(None) => {
                self.gone = true;
                Err(RequestError::BodyUnreadable("the client closed the connection".into()))
            }
            Err(_) => Err(RequestError::BodyTimeout(deadline)),
        }
    }
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
        // (When shutdown begins, the connection's socket is shut and the
        // read ends: a partial head goes unanswered, as on pingora's path.)
        let Connection { stream, buf, idle, active, .. } = conn;
        let read = tokio::select! {
            biased;
            read = read_more(stream, buf) => Some(read),
            () = idle.as_mut() => None,
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
async fn serve_through_pingora(pingora: &Arc<PingoraPath>, stream: Stream, read: BytesMut, shutdown: &ShutdownWatch) {
    let mut session = Session::new_http1(stream);
    session.set_keepalive(if *shutdown.borrow() { None } else { Some(KEEP_ALIVE.as_secs()) });
    if !read.is_empty() {
        session.set_pipelined_prefix(read);
    }
    let mut result = pingora.process_new_http(session, shutdown).await;
    while let Some((stream, settings)) = result.map(ReusedHttpStream::consume) {
        let mut session = Session::new_http1(stream);
        if let Some(settings) = settings {
            settings.apply_to_session(&mut session);
        }
        result = pingora.process_new_http(session, shutdown).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

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
    async fn connection() -> (Connection, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("address")).await.expect("connect");
        let (accepted, _) = listener.accept().await.expect("accept");
        (Connection::new(accepted), client)
    }

    /// The header deadline the timer tests use.
    const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn a_silent_connection_closes_after_the_keep_alive() {
        let (mut conn, _client) = connection().await;
        let started = Instant::now();
        assert!(matches!(
            read_call_head(&mut conn, 8192, 1024, HEADER_TIMEOUT).await,
            Err(HeadWait::Done(Next::Close))
        ));
        assert_eq!(started.elapsed(), KEEP_ALIVE);
    }

    #[tokio::test(start_paused = true)]
    async fn a_head_must_arrive_whole_within_the_header_timeout_of_its_first_byte() {
        let (mut conn, mut client) = connection().await;
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
        let (mut conn, mut client) = connection().await;
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
}
