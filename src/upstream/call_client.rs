//! The calls' HTTP/1.1 client: the request written with one write, the
//! answer's head read by `response_head.rs`, and idle connections kept for
//! reuse.
//!
//! Calls went through hyper-util's pooled client, which drives every
//! connection from a task of its own: each call crossed two tasks and ran
//! hyper's general machinery, a large share of a call's instructions
//! (benches/HISTORY.md, "Figures behind the code"). A tool call is one POST with a JSON
//! body and one answer, so the call's own task writes it and reads the answer.
//!
//! Idle connections are pooled per data-plane thread. Each thread runs its
//! own runtime (`server.rs`), and a socket and its timer belong to the
//! runtime that made them: taken from a pool shared by all threads, they
//! would be driven by another thread's runtime. A thread's pool is locked
//! only by that thread, except when stale connections are swept.

use std::future::Future;
use std::pin::pin;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use http::StatusCode;
use thread_local::ThreadLocal;
use tokio::io::{AsyncRead, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::response_head::{parse_head, Framing, HeadError};
use super::HttpResponse;
use crate::http1;

/// How long a connection may stay idle before it is closed rather than
/// reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// The most idle connections kept per upstream and data-plane thread.
const MAX_IDLE: usize = 256;
/// The longest answer head read; past it the answer is refused.
const MAX_HEAD: usize = 64 * 1024;
/// The first read buffer for an answer (see `read_answer`).
const ANSWER_BUF: usize = 2 * 1024;

/// Why an exchange failed, told apart as the caller needs it: a connection
/// that could not be made (nothing was sent), or one that broke after.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    /// No connection could be made.
    #[error("{0}")]
    Connect(String),
    /// The request may have been sent; no complete, well-formed answer.
    #[error("{0}")]
    Broken(String),
    /// The answer's body is larger than the limit.
    #[error("answer larger than the limit")]
    TooLarge,
    /// No whole answer within the time the caller gave.
    #[error("no answer in time")]
    Timeout,
}

impl From<HeadError> for ExchangeError {
    fn from(e: HeadError) -> ExchangeError {
        ExchangeError::Broken(e.0)
    }
}

/// POSTs to one URL over kept-alive connections.
#[derive(Debug)]
pub struct CallClient {
    /// `host:port`, for connecting.
    address: String,
    /// Everything before the request's own headers: request line, `Host`,
    /// `Content-Type`, `Accept`.
    head_prefix: Vec<u8>,
    connect_timeout: Duration,
    /// Idle connections of each thread, the most recently used last.
    idle: ThreadLocal<Mutex<Vec<IdleConnection>>>,
}

#[derive(Debug)]
struct IdleConnection {
    stream: TcpStream,
    since: Instant,
    /// The timer that bounds each exchange on this connection, kept with it:
    /// moving a tokio timer later is one atomic operation, where a timer per
    /// call was a registration and a removal (benches/HISTORY.md, "Figures behind the code").
    timer: Pin<Box<Sleep>>,
}

impl CallClient {
    /// A client for POSTs to `path` on `authority` (`host[:port]`, port 80
    /// when none is given).
    pub fn new(authority: &str, path: &str, connect_timeout: Duration) -> CallClient {
        let address = if authority.rsplit_once(':').is_some_and(|(_, port)| !port.contains(']')) {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        let head_prefix = format!(
            "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\naccept: application/json\r\n"
        )
        .into_bytes();
        CallClient { address, head_prefix, connect_timeout, idle: ThreadLocal::new() }
    }

    /// POSTs `body` with `headers` and reads the whole answer, its body at
    /// most `max_body` bytes, all within `timeout` (connecting included).
    pub async fn post(
        &self,
        headers: &[(&str, &[u8])],
        body: &[u8],
        max_body: usize,
        timeout: Duration,
    ) -> Result<HttpResponse, ExchangeError> {
        let request = self.encode(headers, body);
        let now = Instant::now();
        let (stream, mut timer) = match self.take_idle(now) {
            Some(mut idle) => {
                idle.timer.as_mut().reset(now + timeout);
                (Some(idle.stream), idle.timer)
            }
            None => (None, Box::pin(tokio::time::sleep_until(now + timeout))),
        };
        let answered = tokio::select! {
            biased;
            answered = self.exchange(stream, &request, max_body) => answered?,
            () = timer.as_mut() => return Err(ExchangeError::Timeout),
        };
        let (answer, reusable) = answered;
        if let Some(stream) = reusable {
            // Idle since the exchange began: a little earlier than the truth,
            // so never kept past the server's own idle limit (and no clock read).
            self.put_idle(stream, timer, now);
        }
        Ok(answer)
    }

    /// Sends `request` on `stream` (a new connection when there is none or
    /// it fails at once) and reads the answer; the stream back when it may
    /// carry another request.
    async fn exchange(
        &self,
        stream: Option<TcpStream>,
        request: &[u8],
        max_body: usize,
    ) -> Result<(HttpResponse, Option<TcpStream>), ExchangeError> {
        let mut stream = match stream {
            Some(mut stream) => match stream.write_all(request).await {
                Ok(()) => stream,
                // A failed first write on a kept connection delivered nothing
                // (the server had closed it): a new connection may carry it.
                Err(_) => self.send_on_new_connection(request).await?,
            },
            None => self.send_on_new_connection(request).await?,
        };
        let (answer, reusable) = read_answer(&mut stream, max_body).await?;
        Ok((answer, reusable.then_some(stream)))
    }

    /// Closes every idle connection: the upstream was removed, and nothing
    /// will take them again.
    pub fn close_idle(&self) {
        for pool in self.idle.iter() {
            let idle = std::mem::take(&mut *lock(pool));
            drop(idle);
        }
    }

    /// Closes idle connections that have timed out or that the server
    /// closed, in every thread's pool.
    pub fn close_stale(&self) {
        let now = Instant::now();
        for pool in self.idle.iter() {
            let stale: Vec<IdleConnection> = {
                let mut idle = lock(pool);
                let (keep, stale) = std::mem::take(&mut *idle).into_iter().partition(|c| c.usable(now));
                *idle = keep;
                stale
            };
            drop(stale);
        }
    }

    fn encode(&self, headers: &[(&str, &[u8])], body: &[u8]) -> Vec<u8> {
        let extra: usize = headers.iter().map(|(name, value)| name.len() + value.len() + 4).sum();
        let mut request = Vec::with_capacity(self.head_prefix.len() + extra + 40 + body.len());
        request.extend_from_slice(&self.head_prefix);
        for (name, value) in headers {
            request.extend_from_slice(name.as_bytes());
            request.extend_from_slice(b": ");
            request.extend_from_slice(value);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"content-length: ");
        request.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        request.extend_from_slice(b"\r\n\r\n");
        request.extend_from_slice(body);
        request
    }

    async fn send_on_new_connection(&self, request: &[u8]) -> Result<TcpStream, ExchangeError> {
        let mut stream = self.connect().await?;
        stream.write_all(request).await.map_err(|e| ExchangeError::Broken(format!("sending the call: {e}")))?;
        Ok(stream)
    }

    async fn connect(&self) -> Result<TcpStream, ExchangeError> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(&self.address))
            .await
            .map_err(|_| ExchangeError::Connect(format!("no connection within {:?}", self.connect_timeout)))?
            .map_err(|e| ExchangeError::Connect(format!("connecting to {}: {e}", self.address)))?;
        // Requests are written whole; Nagle would only hold them back.
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }

    /// The most recently used idle connection that is still usable at `now`.
    fn take_idle(&self, now: Instant) -> Option<IdleConnection> {
        let mut idle = self.lock_idle();
        while let Some(connection) = idle.pop() {
            if connection.usable(now) {
                return Some(connection);
            }
        }
        None
    }

    fn put_idle(&self, stream: TcpStream, timer: Pin<Box<Sleep>>, since: Instant) {
        let mut idle = self.lock_idle();
        if idle.len() < MAX_IDLE {
            idle.push(IdleConnection { stream, since, timer });
        }
    }

    /// This thread's pool.
    fn lock_idle(&self) -> MutexGuard<'_, Vec<IdleConnection>> {
        lock(self.idle.get_or_default())
    }
}

fn lock(pool: &Mutex<Vec<IdleConnection>>) -> MutexGuard<'_, Vec<IdleConnection>> {
    // A panic elsewhere while holding the lock leaves a valid Vec.
    pool.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl IdleConnection {
    /// Not timed out, and the server has not closed it. The check reads the
    /// readiness tokio already holds for the socket (no system call): a
    /// server's FIN or RST marks it read-closed.
    fn usable(&self, now: Instant) -> bool {
        if now.saturating_duration_since(self.since) >= IDLE_TIMEOUT {
            return false;
        }
        let mut cx = Context::from_waker(Waker::noop());
        // Most idle connections are not readable (a short read cleared it):
        // `poll_read_ready` says so without the waiter list that `ready`'s
        // future joins and leaves, for about a third less (benches/README.md,
        // "Per-call work after the front door: the bound met"). Only a
        // readable one needs the details.
        if self.stream.poll_read_ready(&mut cx).is_pending() {
            return true;
        }
        match pin!(self.stream.ready(Interest::READABLE)).poll(&mut cx) {
            // Nothing has arrived since the last answer was read.
            Poll::Pending => true,
            // Readable is left over from the last answer; closed is not.
            Poll::Ready(Ok(ready)) => !ready.is_read_closed() && !ready.is_error(),
            Poll::Ready(Err(_)) => false,
        }
    }
}

/// Reads one answer (skipping interim 1xx ones); whether the connection may
/// carry another request.
async fn read_answer<S: AsyncRead + Unpin>(
    stream: &mut S,
    max_body: usize,
) -> Result<(HttpResponse, bool), ExchangeError> {
    // Room for a typical answer's head and body in one read; larger ones grow
    // it. (At 8 KB, only eight buffers shared a mimalloc page: pages emptied
    // and were purged and faulted in again under load, (benches/HISTORY.md, "Figures behind the code").)
    let mut buf = BytesMut::with_capacity(ANSWER_BUF);
    let head = loop {
        let head = loop {
            if let Some(head) = parse_head(&buf)? {
                break head;
            }
            if buf.len() >= MAX_HEAD {
                return Err(ExchangeError::Broken(format!("answer head larger than {MAX_HEAD} bytes")));
            }
            if read_more(stream, &mut buf).await? == 0 {
                return Err(ExchangeError::Broken(if buf.is_empty() {
                    "the connection closed before an answer".to_owned()
                } else {
                    "the connection closed in the middle of the answer's head".to_owned()
                }));
            }
        };
        buf.advance(head.len);
        if !head.status.is_informational() {
            break head;
        }
        if head.status == StatusCode::SWITCHING_PROTOCOLS {
            return Err(ExchangeError::Broken("the server switched protocols".to_owned()));
        }
    };
    let (body, clean) = match head.framing {
        Framing::Length(len) => read_length(stream, buf, len, max_body).await?,
        Framing::Chunked => read_chunked(stream, buf, max_body).await?,
        Framing::UntilClose => (read_until_close(stream, buf, max_body).await?, false),
    };
    let answer = HttpResponse { status: head.status, is_json: head.is_json, body };
    Ok((answer, head.keep_alive && clean))
}

/// Reads more of the answer; 0 at the end of the stream.
async fn read_more<S: AsyncRead + Unpin>(stream: &mut S, buf: &mut BytesMut) -> Result<usize, ExchangeError> {
    http1::read_more(stream, buf, 8 * 1024).await.map_err(|e| ExchangeError::Broken(format!("reading the answer: {e}")))
}

fn closed_early() -> ExchangeError {
    ExchangeError::Broken("the connection closed in the middle of the answer's body".to_owned())
}

/// A `content-length` body; whether nothing followed it.
async fn read_length<S: AsyncRead + Unpin>(
    stream: &mut S,
    mut buf: BytesMut,
    len: usize,
    max_body: usize,
) -> Result<(Bytes, bool), ExchangeError> {
    if len > max_body {
        return Err(ExchangeError::TooLarge);
    }
    if buf.capacity() < len {
        buf.reserve(len - buf.len());
    }
    while buf.len() < len {
        if read_more(stream, &mut buf).await? == 0 {
            return Err(closed_early());
        }
    }
    let clean = buf.len() == len;
    Ok((buf.split_to(len).freeze(), clean))
}

/// A chunked body, de-chunked; whether nothing followed it.
async fn read_chunked<S: AsyncRead + Unpin>(
    stream: &mut S,
    mut buf: BytesMut,
    max_body: usize,
) -> Result<(Bytes, bool), ExchangeError> {
    let mut body = BytesMut::new();
    loop {
        let (size_line, size) = loop {
            match httparse::parse_chunk_size(&buf) {
                Ok(httparse::Status::Complete((used, size))) => break (used, size),
                Ok(httparse::Status::Partial) if buf.len() < MAX_HEAD => {
                    if read_more(stream, &mut buf).await? == 0 {
                        return Err(closed_early());
                    }
                }
                _ => return Err(ExchangeError::Broken("the answer's chunked body is malformed".to_owned())),
            }
        };
        buf.advance(size_line);
        if size == 0 {
            break;
        }
        let size = usize::try_from(size).map_err(|_| ExchangeError::TooLarge)?;
        if size > max_body - body.len() {
            return Err(ExchangeError::TooLarge);
        }
        while buf.len() < size + 2 {
            if read_more(stream, &mut buf).await? == 0 {
                return Err(closed_early());
            }
        }
        if &buf[size..size + 2] != b"\r\n" {
            return Err(ExchangeError::Broken("the answer's chunked body is malformed".to_owned()));
        }
        body.extend_from_slice(&buf[..size]);
        buf.advance(size + 2);
    }
    // Trailer lines, if any, up to the blank line that ends the body.
    loop {
        match buf.windows(2).position(|w| w == b"\r\n") {
            Some(0) => {
                buf.advance(2);
                break;
            }
            Some(end) => buf.advance(end + 2),
            None if buf.len() < MAX_HEAD => {
                if read_more(stream, &mut buf).await? == 0 {
                    return Err(closed_early());
                }
            }
            None => return Err(ExchangeError::Broken("the answer's trailers are too large".to_owned())),
        }
    }
    Ok((body.freeze(), buf.is_empty()))
}

/// A body that runs until the server closes the connection.
async fn read_until_close<S: AsyncRead + Unpin>(
    stream: &mut S,
    mut buf: BytesMut,
    max_body: usize,
) -> Result<Bytes, ExchangeError> {
    loop {
        if buf.len() > max_body {
            return Err(ExchangeError::TooLarge);
        }
        if read_more(stream, &mut buf).await? == 0 {
            return Ok(buf.freeze());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncBufReadExt;
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    /// A server that answers each request on a connection with the next of
    /// `answers` (raw bytes), counting the connections it accepts. After the
    /// last answer it closes the connection.
    async fn raw_server(answers: Vec<&'static [u8]>) -> (String, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("addr").to_string();
        let (requests, received) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let answers = answers.clone();
                let requests = requests.clone();
                tokio::spawn(async move {
                    let mut stream = tokio::io::BufReader::new(stream);
                    for answer in answers {
                        let Some(request) = read_request(&mut stream).await else { return };
                        let _ = requests.send(request);
                        if stream.get_mut().write_all(answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (address, received)
    }

    async fn read_request(stream: &mut tokio::io::BufReader<TcpStream>) -> Option<Vec<u8>> {
        let mut head = Vec::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            if stream.read_line(&mut line).await.ok()? == 0 {
                return None;
            }
            if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = v.trim().parse().ok()?;
            }
            head.extend_from_slice(line.as_bytes());
            if line == "\r\n" {
                break;
            }
        }
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await.ok()?;
        head.extend_from_slice(&body);
        Some(head)
    }

    fn client(address: &str) -> CallClient {
        CallClient::new(address, "/base/tools/call", Duration::from_secs(2))
    }

    /// Longer than any exchange in these tests should take.
    const LONG: Duration = Duration::from_secs(10);

    /// A server with one connection at a time that answers its n-th request
    /// after `delays[n]`, with the body `n`.
    async fn slow_server(delays: Vec<Duration>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("addr").to_string();
        tokio::spawn(async move {
            let mut delays = delays.into_iter().enumerate();
            while let Ok((stream, _)) = listener.accept().await {
                let mut stream = tokio::io::BufReader::new(stream);
                while let Some(request) = read_request(&mut stream).await {
                    drop(request);
                    let Some((n, delay)) = delays.next() else { return };
                    tokio::time::sleep(delay).await;
                    let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\n{n}");
                    if stream.get_mut().write_all(answer.as_bytes()).await.is_err() {
                        break;
                    }
                }
            }
        });
        address
    }

    #[test]
    fn lengths_are_read_exactly() {
        use crate::http1::decimal;
        assert_eq!(decimal(b"0"), Some(0));
        assert_eq!(decimal(b"98"), Some(98));
        assert_eq!(decimal(b"9999999999999999999"), Some(9_999_999_999_999_999_999));
        for bad in [&b""[..], b"-1", b"+1", b"1 2", b"0x10", b"12a", b"99999999999999999999"] {
            assert_eq!(decimal(bad), None, "{bad:?}");
        }
    }

    #[tokio::test]
    async fn each_exchange_on_a_kept_connection_has_its_own_time_limit() {
        let ms = Duration::from_millis;
        let c = client(&slow_server(vec![ms(0), ms(300), ms(2000)]).await);
        let limit = ms(400);
        assert_eq!(&c.post(&[], b"", 64, limit).await.expect("first").body[..], b"0");
        // The connection's timer was set for the first exchange; the second
        // starts later and gets its own full limit.
        tokio::time::sleep(ms(250)).await;
        assert_eq!(&c.post(&[], b"", 64, limit).await.expect("second, 300 ms").body[..], b"1");
        let started = Instant::now();
        assert!(matches!(c.post(&[], b"", 64, limit).await, Err(ExchangeError::Timeout)));
        let waited = started.elapsed();
        assert!(waited >= limit && waited < ms(1500), "the limit ended the wait: {waited:?}");
    }

    #[tokio::test]
    async fn writes_one_well_formed_post_and_reads_a_sized_answer() {
        let (address, mut received) = raw_server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}",
        ])
        .await;
        let c = client(&address);
        let answer = c.post(&[("traceparent", b"00-abc-01")], b"{\"x\":2}", 1024, LONG).await.expect("answer");
        assert_eq!(answer.status, StatusCode::OK);
        assert!(answer.is_json);
        assert_eq!(&answer.body[..], b"{\"a\":1}");
        let request = String::from_utf8(received.recv().await.expect("request")).expect("utf8");
        assert!(request.starts_with("POST /base/tools/call HTTP/1.1\r\n"), "{request}");
        assert!(request.contains(&format!("host: {address}\r\n")), "{request}");
        assert!(request.contains("traceparent: 00-abc-01\r\n"), "{request}");
        assert!(request.contains("content-length: 7\r\n"), "{request}");
        assert!(request.ends_with("\r\n\r\n{\"x\":2}"), "{request}");
    }

    #[test]
    fn each_thread_reuses_only_the_connections_it_made() {
        let server =
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().expect("runtime");
        let (address, _received) = server.block_on(raw_server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2",
        ]));
        let c = client(&address);
        let post =
            |runtime: &tokio::runtime::Runtime| runtime.block_on(c.post(&[], b"", 64, LONG)).expect("answer").body;
        let runtime = || tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let here = runtime();
        assert_eq!(&post(&here)[..], b"1");
        // Another thread, with a runtime of its own, opens its own connection
        // (the one kept here would answer "2").
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(&post(&runtime())[..], b"1", "a connection of its own"));
        });
        // This thread's connection answers its next call.
        assert_eq!(&post(&here)[..], b"2");
    }

    #[tokio::test]
    async fn reuses_a_kept_alive_connection() {
        let (address, _received) = raw_server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n1",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n2",
        ])
        .await;
        let c = client(&address);
        assert_eq!(&c.post(&[], b"", 64, LONG).await.expect("first").body[..], b"1");
        // The same connection answers the second call: a new one would get "1".
        assert_eq!(&c.post(&[], b"", 64, LONG).await.expect("second").body[..], b"2");
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_while_idle_is_not_reused() {
        // Each connection gives one answer and is then closed by the server.
        let (address, _received) = raw_server(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]).await;
        let c = client(&address);
        for _ in 0..3 {
            c.post(&[], b"", 64, LONG).await.expect("answer");
            // Let the server's FIN arrive and be seen by the reactor.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        c.close_stale();
        assert!(c.lock_idle().is_empty(), "closed connections must leave the pool");
    }

    #[tokio::test]
    async fn decodes_a_chunked_answer_with_trailers_and_keeps_the_connection() {
        let (address, _received) = raw_server(vec![
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-T: 1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext",
        ])
        .await;
        let c = client(&address);
        assert_eq!(&c.post(&[], b"", 64, LONG).await.expect("chunked").body[..], b"Wikipedia");
        assert_eq!(&c.post(&[], b"", 64, LONG).await.expect("reused").body[..], b"next");
    }

    #[tokio::test]
    async fn an_answer_with_both_content_length_and_chunked_closes_its_connection() {
        let (address, _received) = raw_server(vec![
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nWiki\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nnext",
        ])
        .await;
        let c = client(&address);
        assert_eq!(&c.post(&[], b"", 64, LONG).await.expect("chunked wins").body[..], b"Wiki");
        assert!(c.lock_idle().is_empty(), "not returned to the pool");
    }

    #[tokio::test]
    async fn skips_an_interim_answer_and_reads_a_body_delimited_by_close() {
        let (address, _received) = raw_server(vec![
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\nupstream down",
        ])
        .await;
        let c = client(&address);
        let answer = c.post(&[], b"", 64, LONG).await.expect("answer");
        assert_eq!(answer.status, StatusCode::BAD_GATEWAY);
        assert!(!answer.is_json);
        assert_eq!(&answer.body[..], b"upstream down");
        assert!(c.lock_idle().is_empty(), "a closed connection is not kept");
    }

    #[tokio::test]
    async fn refuses_an_answer_over_the_limit_however_framed() {
        let (address, _r) = raw_server(vec![b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n"]).await;
        assert!(matches!(client(&address).post(&[], b"", 10, LONG).await, Err(ExchangeError::TooLarge)));
        let (address, _r) = raw_server(vec![b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n"]).await;
        assert!(matches!(client(&address).post(&[], b"", 10, LONG).await, Err(ExchangeError::TooLarge)));
        let (address, _r) = raw_server(vec![b"HTTP/1.1 200 OK\r\n\r\n0123456789abcdef"]).await;
        assert!(matches!(client(&address).post(&[], b"", 10, LONG).await, Err(ExchangeError::TooLarge)));
    }

    #[tokio::test]
    async fn a_garbled_or_cut_answer_is_broken_not_a_hang() {
        for answer in [
            &b"NOT HTTP AT ALL\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Le",
        ] {
            let (address, _r) = raw_server(vec![answer]).await;
            let result = client(&address).post(&[], b"", 64, LONG).await;
            assert!(
                matches!(result, Err(ExchangeError::Broken(_))),
                "{:?}: {result:?}",
                String::from_utf8_lossy(answer)
            );
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("addr").to_string();
        drop(listener);
        assert!(matches!(client(&address).post(&[], b"", 64, LONG).await, Err(ExchangeError::Connect(_))));
    }

    #[test]
    fn a_port_less_authority_connects_to_port_80() {
        assert_eq!(CallClient::new("tools.internal", "/", Duration::from_secs(1)).address, "tools.internal:80");
        assert_eq!(CallClient::new("[::1]", "/", Duration::from_secs(1)).address, "[::1]:80");
        assert_eq!(CallClient::new("[::1]:81", "/", Duration::from_secs(1)).address, "[::1]:81");
    }

    /// The answer reader's properties, over generated answers fed in pieces
    /// of every size (as TCP may deliver them).
    mod properties {
        use std::collections::VecDeque;

        use proptest::prelude::*;
        use tokio::io::ReadBuf;

        use super::*;

        /// A stream that hands out its pieces one read at a time, then ends.
        struct Pieces(VecDeque<Vec<u8>>);

        impl AsyncRead for Pieces {
            fn poll_read(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
                buf: &mut ReadBuf<'_>,
            ) -> Poll<std::io::Result<()>> {
                if let Some(mut piece) = self.0.pop_front() {
                    let n = piece.len().min(buf.remaining());
                    buf.put_slice(&piece[..n]);
                    if n < piece.len() {
                        self.0.push_front(piece.split_off(n));
                    }
                }
                Poll::Ready(Ok(()))
            }
        }

        fn pieces(bytes: &[u8], sizes: &[usize]) -> Pieces {
            let mut out = VecDeque::new();
            let mut rest = bytes;
            for &size in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (piece, tail) = rest.split_at(size.clamp(1, rest.len()));
                out.push_back(piece.to_vec());
                rest = tail;
            }
            Pieces(out)
        }

        fn read(bytes: &[u8], sizes: &[usize], max_body: usize) -> Result<(HttpResponse, bool), ExchangeError> {
            let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
            runtime.block_on(read_answer(&mut pieces(bytes, sizes), max_body))
        }

        /// One generated answer and what reading it must give.
        #[derive(Debug, Clone)]
        struct Answer {
            bytes: Vec<u8>,
            status: u16,
            body: Vec<u8>,
            is_json: bool,
            keep_alive: bool,
        }

        fn answer() -> impl Strategy<Value = Answer> {
            (
                any::<bool>(),
                prop::sample::select(vec![200u16, 201, 400, 404, 500, 502]),
                any::<bool>(),
                0usize..3,
                0usize..3,
                prop::collection::vec(any::<u8>(), 0..300),
                prop::option::of(prop::collection::vec(1usize..64, 1..8)),
                any::<bool>(),
            )
                .prop_map(|(interim, status, http11, content_type, connection, body, chunks, trailers)| {
                    let mut bytes = Vec::new();
                    if interim {
                        bytes.extend_from_slice(b"HTTP/1.1 100 Continue\r\n\r\n");
                    }
                    let version = if http11 { "1.1" } else { "1.0" };
                    bytes.extend_from_slice(format!("HTTP/{version} {status} X\r\n").as_bytes());
                    let content_type =
                        ["", "Content-Type: application/problem+JSON\r\n", "content-type: text/plain\r\n"]
                            [content_type];
                    bytes.extend_from_slice(content_type.as_bytes());
                    let connection = ["", "Connection: close\r\n", "connection: keep-alive\r\n"][connection];
                    bytes.extend_from_slice(connection.as_bytes());
                    match &chunks {
                        None => {
                            bytes.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
                            bytes.extend_from_slice(&body);
                        }
                        Some(sizes) => {
                            bytes.extend_from_slice(b"Transfer-Encoding: gzip, chunked\r\n\r\n");
                            let mut rest = &body[..];
                            for &size in sizes.iter().cycle() {
                                if rest.is_empty() {
                                    break;
                                }
                                let (chunk, tail) = rest.split_at(size.min(rest.len()));
                                bytes.extend_from_slice(format!("{:X};ext=1\r\n", chunk.len()).as_bytes());
                                bytes.extend_from_slice(chunk);
                                bytes.extend_from_slice(b"\r\n");
                                rest = tail;
                            }
                            bytes.extend_from_slice(b"0\r\n");
                            if trailers {
                                bytes.extend_from_slice(b"Checksum: abc\r\nMore: x\r\n");
                            }
                            bytes.extend_from_slice(b"\r\n");
                        }
                    }
                    let keep_alive = match connection {
                        "" => http11,
                        c if c.contains("close") => false,
                        _ => true,
                    };
                    Answer { bytes, status, body, is_json: content_type.contains("JSON"), keep_alive }
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            /// However the bytes arrive, the answer read is the answer sent.
            #[test]
            fn an_answer_read_in_any_pieces_is_the_answer_sent(
                answer in answer(),
                sizes in prop::collection::vec(1usize..80, 1..10),
            ) {
                let (read, reusable) = read(&answer.bytes, &sizes, 1024).expect("a well-formed answer");
                prop_assert_eq!(read.status.as_u16(), answer.status);
                prop_assert_eq!(&read.body[..], &answer.body[..]);
                prop_assert_eq!(read.is_json, answer.is_json);
                prop_assert_eq!(reusable, answer.keep_alive);
            }

            /// Bytes after the answer make its connection unusable.
            #[test]
            fn bytes_after_an_answer_close_its_connection(answer in answer(), extra in prop::collection::vec(any::<u8>(), 1..16)) {
                let mut bytes = answer.bytes.clone();
                bytes.extend_from_slice(&extra);
                let (read, reusable) = read(&bytes, &[4096], 1024).expect("a well-formed answer");
                prop_assert_eq!(&read.body[..], &answer.body[..]);
                prop_assert!(!reusable);
            }

            /// An answer cut short is an error, never a shorter body.
            #[test]
            fn an_answer_cut_short_is_an_error(answer in answer(), cut in any::<prop::sample::Index>()) {
                let cut = cut.index(answer.bytes.len());
                prop_assert!(read(&answer.bytes[..cut], &[7], 1024).is_err());
            }

            /// A body over the limit is refused however it is framed.
            #[test]
            fn a_body_over_the_limit_is_refused(answer in answer(), sizes in prop::collection::vec(1usize..80, 1..4)) {
                prop_assume!(!answer.body.is_empty());
                let result = read(&answer.bytes, &sizes, answer.body.len() - 1);
                prop_assert!(matches!(result, Err(ExchangeError::TooLarge)), "{:?}", result.map(|(a, _)| a.status));
            }

            /// Any bytes at all, in any pieces, end in an answer or an error:
            /// no panic and no hang.
            #[test]
            fn any_bytes_end_in_an_answer_or_an_error(
                answer in answer(),
                flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..6),
                sizes in prop::collection::vec(1usize..80, 1..6),
            ) {
                let mut bytes = answer.bytes;
                for (at, byte) in flips {
                    let at = at.index(bytes.len());
                    bytes[at] = byte;
                }
                let _ = read(&bytes, &sizes, 1024);
            }
        }
    }
}
