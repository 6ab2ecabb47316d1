//! Writing a reply to the client and handing the connection back to pingora.
//!
//! pingora's writer builds a `ResponseHeader` (a header map, Date and
//! Connection inserted into it, then serialised into a fresh buffer) and
//! finishes the session in a separate step, a large share of a call's
//! instructions (benches/HISTORY.md, "Figures behind the code"). Once a request has been read
//! to its end, nothing of pingora's session is needed any more: the
//! connection is taken back, the head formatted into one small buffer and
//! written with the body in one flush.
//!
//! HTTP/1.1 pipelining is on: bytes read past a request's end come back from
//! pingora and are parsed as the next request once this reply is written
//! (RFC 9112 §9.3.2, replies in request order).

use bytes::{Bytes, BytesMut};
use pingora::apps::{HttpPersistentSettings, ReusedHttpStream};
use pingora::http::ResponseHeader;
use pingora::protocols::http::date::get_cached_date;
use pingora::protocols::http::ServerSession as Session;
use pingora::protocols::Stream;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::mcp_endpoint::{keep_alive, Listen, KEEP_ALIVE_EVERY};
use crate::reply::Reply;

/// Lets pingora hand back the bytes a client pipelined behind a request.
pub fn allow_pipelining(session: &mut Session) {
    if let Session::H1(h1) = session {
        h1.set_pipelining_enabled(true);
    }
}

/// A connection after a reply, ready for its next request.
pub(super) struct Reusable {
    /// The connection.
    pub stream: Stream,
    /// Bytes the client sent past the request just answered.
    pub pipelined: Option<BytesMut>,
    /// What pingora keeps from one request to the next.
    persistent: HttpPersistentSettings,
}

impl Reusable {
    /// As pingora hands a connection back to its own server loop.
    pub fn into_reused(self) -> ReusedHttpStream {
        let Reusable { stream, pipelined, mut persistent } = self;
        if let Some(prefix) = pipelined {
            persistent.set_pipelined_prefix(prefix);
        }
        ReusedHttpStream::new(stream, Some(persistent))
    }
}

/// Writes `reply` (only its head when answering a HEAD) and returns the
/// connection for its next request, or `None` when it closes.
pub(super) async fn send_reply(mut session: Session, reply: Reply, head_only: bool) -> Option<Reusable> {
    if reply.close {
        // The rest of the request body is still on the wire: this connection
        // cannot carry another request.
        session.set_keepalive(None);
    }
    let body_done = match &mut session {
        Session::H1(h1) => h1.is_body_done(),
        _ => false,
    };
    let persistent = HttpPersistentSettings::for_session(&session);
    let h1 = match session {
        Session::H1(h1) if body_done => h1,
        // An unread body is pingora's to drain (or to close on) after the
        // reply; other session kinds are written its way too.
        // (Boxed: inline, its state would make every request's future, which
        // pingora boxes and copies, several KB larger.)
        other => return Box::pin(send_through_pingora(other, reply, head_only)).await,
    };
    let keep_alive = h1.will_keepalive();
    let (mut stream, pipelined) = if keep_alive {
        // The body is read and pipelining is on, so pingora hands the
        // connection back (with any pipelined bytes) rather than closing it.
        match h1.reuse().await {
            Ok(Some(reusable)) => reusable.into_parts(),
            Ok(None) => return None,
            Err(e) => {
                tracing::debug!(error = %e, "could not take the connection back from pingora");
                return None;
            }
        }
    } else {
        (h1.into_inner(), None)
    };
    if let Err(e) = write_reply(&mut stream, &reply, head_only, keep_alive).await {
        tracing::debug!(error = %e, "could not write the response");
        return None;
    }
    if !keep_alive {
        // (A client that already went away makes this fail: nothing to do.)
        let _ = stream.shutdown().await;
        return None;
    }
    Some(Reusable { stream, pipelined, persistent })
}

/// Writes the head and body to a bare socket, or into pingora's buffered
/// stream, whose flush then sends them. A body up to [`COPIED_BODY`] bytes
/// is copied behind the head and sent in one `send`: a `writev` of the two
/// cost the kernel more per reply (benches/HISTORY.md, "Figures behind the code").
pub(super) async fn write_reply<S: AsyncWrite + Unpin>(
    stream: &mut S,
    reply: &Reply,
    head_only: bool,
    keep_alive: bool,
) -> std::io::Result<()> {
    let mut head = reply_head(reply, keep_alive)?;
    let body: &[u8] = if head_only { &[] } else { &reply.body };
    if body.len() <= COPIED_BODY {
        head.extend_from_slice(body);
        stream.write_all(&head).await?;
    } else {
        stream.write_all(&head).await?;
        stream.write_all(body).await?;
    }
    stream.flush().await
}

/// The largest body sent in the same buffer as its head.
const COPIED_BODY: usize = 16 * 1024;

/// The status line and headers of `reply`. Content-Length is the body's
/// length even for a HEAD, as a GET would have it. (Appended piece by piece:
/// `write!` went through `core::fmt`, which cost more (benches/HISTORY.md, "Figures behind the code").)
fn reply_head(reply: &Reply, keep_alive: bool) -> std::io::Result<Vec<u8>> {
    let reason = http::StatusCode::from_u16(reply.status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
    let mut numbers = itoa::Buffer::new();
    let headers: usize = reply.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
    let mut head = Vec::with_capacity(160 + headers + reply.body.len().min(COPIED_BODY));
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(numbers.format(reply.status).as_bytes());
    head.push(b' ');
    head.extend_from_slice(reason.as_bytes());
    head.extend_from_slice(b"\r\ncontent-type: ");
    head.extend_from_slice(reply.content_type.as_bytes());
    head.extend_from_slice(b"\r\ncontent-length: ");
    head.extend_from_slice(numbers.format(reply.body.len()).as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in &reply.headers {
        // The gateway makes these values itself; one with a line break in it
        // would be a header injection, so it is refused, by `http`'s own
        // rule, as pingora did. (Only refusals and limits carry headers.)
        if http::HeaderValue::from_str(value).is_err() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("invalid value for header {name}"),
            ));
        }
        for piece in [name.as_bytes(), b": ", value.as_bytes(), b"\r\n"] {
            head.extend_from_slice(piece);
        }
    }
    head.extend_from_slice(b"date: ");
    head.extend_from_slice(get_cached_date().as_bytes());
    head.extend_from_slice(if keep_alive {
        b"\r\nconnection: keep-alive\r\n\r\n"
    } else {
        b"\r\nconnection: close\r\n\r\n"
    });
    Ok(head)
}

/// Writes an event stream (`text/event-stream`, chunked): its opening
/// event, then each notification as it comes, and a comment whenever it has
/// been quiet for [`KEEP_ALIVE_EVERY`]. It ends when the client goes (a
/// closed connection is seen at once, not at the next write), or, with the
/// stream's closing event, when shutdown begins. The connection closes
/// after it.
pub(super) async fn send_stream(
    mut session: Session,
    mut listen: Listen,
    shutdown: &pingora::server::ShutdownWatch,
) -> Option<Reusable> {
    if let Err(e) = write_stream(&mut session, &mut listen, shutdown).await {
        tracing::debug!(error = %e, "event stream ended");
    }
    session.shutdown().await;
    None
}

async fn write_stream(
    session: &mut Session,
    listen: &mut Listen,
    shutdown: &pingora::server::ShutdownWatch,
) -> pingora::Result<()> {
    let mut header = ResponseHeader::build_no_case(200, Some(4))?;
    header.insert_header(http::header::CONTENT_TYPE, "text/event-stream")?;
    header.insert_header(http::header::CACHE_CONTROL, "no-cache")?;
    // Tells nginx and alike not to hold events back in a buffer.
    header.insert_header("x-accel-buffering", "no")?;
    header.insert_header(http::header::TRANSFER_ENCODING, "chunked")?;
    session.set_keepalive(None);
    session.write_response_header(Box::new(header)).await?;
    // Something at once: a client waits for the first bytes.
    session.write_response_body(listen.opening().unwrap_or_else(keep_alive), false).await?;
    let mut stopping = shutdown.clone();
    loop {
        let next = tokio::select! {
            event = listen.next() => event,
            // Nothing is expected from the client: a read ends when it goes.
            _ = session.read_body_or_idle(true) => return Ok(()),
            () = tokio::time::sleep(KEEP_ALIVE_EVERY) => Some(keep_alive()),
            Ok(()) = stopping.changed() => None,
        };
        match next {
            Some(event) => session.write_response_body(event, false).await?,
            None => break,
        }
    }
    if let Some(last) = listen.closing() {
        session.write_response_body(last, false).await?;
    }
    session.write_response_body(Bytes::new(), true).await
}

/// pingora's own writer: a `ResponseHeader`, the body, then `finish`, which
/// drains an unread body or closes the connection.
async fn send_through_pingora(mut session: Session, reply: Reply, head_only: bool) -> Option<Reusable> {
    let persistent = HttpPersistentSettings::for_session(&session);
    if let Err(e) = write_through_pingora(&mut session, reply, head_only).await {
        tracing::debug!(error = %e, "could not write the response");
        return None;
    }
    let (stream, pipelined) = session.finish().await.ok().flatten()?.into_parts();
    Some(Reusable { stream, pipelined, persistent })
}

/// One header and one body chunk through pingora's session.
pub(super) async fn write_through_pingora(session: &mut Session, reply: Reply, head_only: bool) -> pingora::Result<()> {
    // No case map: it cost an extra map insert per header, and names are
    // case-insensitive anyway.
    let mut header = ResponseHeader::build_no_case(reply.status, Some(5 + reply.headers.len()))?;
    header.insert_header(http::header::CONTENT_TYPE, reply.content_type)?;
    header.insert_header(http::header::CONTENT_LENGTH, reply.body.len())?;
    for (name, value) in reply.headers {
        header.insert_header(name, value)?;
    }
    if reply.close {
        header.insert_header(http::header::CONNECTION, "close")?;
    }
    session.write_response_header(Box::new(header)).await?;
    // HEAD: pingora expects no body bytes; the empty end still flushes.
    let body = if head_only { Bytes::new() } else { reply.body };
    session.write_response_body(body, true).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(status: u16, headers: Vec<(&'static str, String)>, body: &'static str) -> Reply {
        Reply { headers, ..Reply::json(status, Bytes::from_static(body.as_bytes())) }
    }

    #[test]
    fn the_head_carries_status_length_headers_date_and_connection() {
        let head = reply_head(&reply(405, vec![("allow", "GET, HEAD".into())], "{}"), true).unwrap();
        let text = String::from_utf8(head).unwrap();
        assert!(text.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"), "{text}");
        assert!(text.contains("\r\ncontent-length: 2\r\n"), "{text}");
        assert!(text.contains("\r\nallow: GET, HEAD\r\n"), "{text}");
        assert!(text.contains("\r\ndate: "), "{text}");
        assert!(text.ends_with("\r\nconnection: keep-alive\r\n\r\n"), "{text}");
        let closing = String::from_utf8(reply_head(&reply(200, vec![], ""), false).unwrap()).unwrap();
        assert!(closing.ends_with("\r\nconnection: close\r\n\r\n"), "{closing}");
    }

    #[test]
    fn a_header_value_with_a_line_break_is_refused() {
        let injected = reply(401, vec![("www-authenticate", "Bearer\r\nset-cookie: x=1".into())], "{}");
        assert!(reply_head(&injected, true).is_err());
        assert!(
            reply_head(&reply(401, vec![("www-authenticate", "Bearer realm=\"otc\"\t".into())], "{}"), true).is_ok()
        );
    }
}
