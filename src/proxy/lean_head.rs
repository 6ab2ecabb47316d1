//! The lean reader's head parser: whether the bytes at the start of a
//! connection's buffer are the head of a plain call (`POST /tools/call` or
//! `POST /mcp`, or either of a virtual server's, HTTP/1.1, one
//! Content-Length, nothing unusual), and if so
//! where the few headers a call needs are. Pure: no I/O, no state.
//!
//! pingora's session spends a large share of a call's instructions reading
//! a request head (a `RequestHeader` with a case-preserving copy of every
//! header name) (benches/HISTORY.md, "Figures behind the code"). Such a
//! head is read here into only what the call needs: in one pass when it
//! has the common shape (`http1::HeaderLines`), else with httparse (a
//! property test checks that both read every head alike); any other head is
//! left to pingora's path, byte for byte.

use std::ops::Range;

use http::Method;

use super::front_door::{Endpoint, Head};
use crate::auth::{Credentials, API_KEY_HEADER};
use crate::http1::{decimal, header_line_size, HeaderLines};
use crate::mcp::v2026_07_28::{METHOD_HEADER, NAME_HEADER};
use crate::mcp::{PROTOCOL_VERSION_HEADER, SESSION_HEADER};
use crate::mcp_endpoint::McpHead;

/// The most header lines a call read here may have; more are pingora's.
const MAX_HEADERS: usize = 32;

/// Where the headers `/mcp` reads are in a head (the first of each).
#[derive(Debug, Default)]
#[cfg_attr(test, derive(PartialEq))]
pub(super) struct McpPositions {
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
/// connection's buffer.
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(super) struct CallHead {
    /// Which route it is for: [`Endpoint::Call`], [`Endpoint::Mcp`], or a
    /// virtual server's ([`Endpoint::ServerCall`], [`Endpoint::ServerMcp`]).
    pub route: Endpoint,
    /// Where its path is (`/tools/call`, `/call`, `/mcp`,
    /// `/servers/<name>/tools/call` or `/servers/<name>/mcp`).
    path: Range<usize>,
    /// The head's length in the buffer, blank line included.
    pub len: usize,
    /// The body's declared length.
    pub body_len: usize,
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
    /// The head as the front door reads it, from the head's own bytes
    /// (`buf[..len]`, split off the connection's buffer).
    pub(super) fn head<'b>(&self, buf: &'b [u8]) -> Head<'b> {
        let at = |range: &Option<Range<usize>>| range.clone().map(|range| &buf[range]);
        let mcp = match self.route {
            route if route.is_mcp() => McpHead {
                protocol_version: at(&self.mcp.protocol_version),
                method: at(&self.mcp.method),
                name: at(&self.mcp.name),
                session: at(&self.mcp.session),
                duplicated: self.mcp.duplicated,
                traceparent: None,
                server: None,
            },
            _ => McpHead::default(),
        };
        Head {
            route: self.route,
            method: Method::POST,
            // Checked to be one of the plain paths (ASCII) when parsed.
            path: std::str::from_utf8(&buf[self.path.clone()]).unwrap_or_default(),
            query: None,
            host: Some(&buf[self.host.clone()]),
            origin: at(&self.origin),
            credentials: Some(Credentials { api_key: at(&self.api_key), authorization: at(&self.authorization) }),
            traceparent: at(&self.traceparent),
            mcp,
            headers: None,
        }
    }
}

/// What the buffer holds.
// (Returned and matched at once: boxing the head would be an allocation
// per request.)
#[allow(clippy::large_enum_variant)]
#[cfg_attr(test, derive(Debug, PartialEq))]
pub(super) enum Parsed {
    /// A complete head of a plain call.
    Call(CallHead),
    /// Not all of a head yet.
    Partial,
    /// Anything else.
    Other,
}

/// Parses the head at the start of `buf` if it is a plain call's: `POST
/// /tools/call` (or `/call`) or `POST /mcp`, HTTP/1.1, one Content-Length
/// within `max_body`, no Transfer-Encoding, Expect, Upgrade or `Connection`
/// other than keep-alive, headers within `max_header_bytes`; for `/mcp`, no
/// `Mcp-Method: subscriptions/listen` (its answer is an event stream,
/// written through pingora's session).
pub(super) fn parse_call_head(buf: &[u8], max_header_bytes: usize, max_body: usize) -> Parsed {
    if buf.is_empty() {
        return Parsed::Partial;
    }
    // The common shape in one pass (`http1::HeaderLines`); any other head,
    // a partial one included, is httparse's.
    if let Some((route, path, start)) = plain_request_line(buf) {
        let mut lines = HeaderLines::new(buf, start, MAX_HEADERS);
        let parsed = read_lines(buf, route, path, &mut lines, max_header_bytes, max_body);
        if let Some(len) = lines.head_len() {
            return match parsed {
                Parsed::Call(head) => Parsed::Call(CallHead { len, ..head }),
                other => other,
            };
        }
    }
    parse_with_httparse(buf, max_header_bytes, max_body)
}

/// The root's plain paths, and their routes.
const ROOT_PATHS: [(&str, Endpoint); 3] =
    [("/tools/call", Endpoint::Call), ("/mcp", Endpoint::Mcp), ("/call", Endpoint::Call)];

/// The route of a plain call's path: `/tools/call`, `/call`, `/mcp`, and a
/// virtual server's `/servers/<name>/tools/call` and `/servers/<name>/mcp`
/// (the front door's `Endpoint::of` decides).
fn plain_route(path: &[u8]) -> Option<Endpoint> {
    match Endpoint::of(std::str::from_utf8(path).ok()?) {
        route @ (Endpoint::Call | Endpoint::Mcp | Endpoint::ServerCall | Endpoint::ServerMcp) => Some(route),
        _ => None,
    }
}

/// A plain call's request line as clients send it (`POST <path> HTTP/1.1`):
/// the route, where the path is and where the header lines start.
fn plain_request_line(buf: &[u8]) -> Option<(Endpoint, Range<usize>, usize)> {
    const POST: &[u8] = b"POST ";
    let rest = buf.strip_prefix(POST)?;
    // The root's three paths first, byte for byte: most calls, and cheaper
    // than reading the path as text for `Endpoint::of` (which cost the root's
    // call 2.3% more instructions, benches/README.md).
    for (path, route) in ROOT_PATHS {
        if let Some(after) = rest.strip_prefix(path.as_bytes()).and_then(|r| r.strip_prefix(b" HTTP/1.1\r\n")) {
            return Some((route, POST.len()..POST.len() + path.len(), buf.len() - after.len()));
        }
    }
    if !rest.starts_with(b"/servers/") {
        return None;
    }
    // A plain path is short: no need to look further for its end.
    let end = rest.iter().take(96).position(|&b| b == b' ')?;
    let after = rest[end..].strip_prefix(b" HTTP/1.1\r\n")?;
    let route = plain_route(&rest[..end])?;
    Some((route, POST.len()..POST.len() + end, buf.len() - after.len()))
}

/// Any head, by httparse.
fn parse_with_httparse(buf: &[u8], max_header_bytes: usize, max_body: usize) -> Parsed {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut slots);
    let len = match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Parsed::Partial,
        Err(_) => return Parsed::Other,
    };
    let Some((route, path)) = request.path.and_then(|path| {
        // httparse's path is a slice of `buf`: where it is.
        let start = path.as_ptr() as usize - buf.as_ptr() as usize;
        Some((plain_route(path.as_bytes())?, start..start + path.len()))
    }) else {
        return Parsed::Other;
    };
    if request.method != Some("POST") || request.version != Some(1) {
        return Parsed::Other;
    }
    // (httparse has refused control bytes in values, as `HeaderValue` does.)
    let lines = request.headers.iter().map(|header| (header.name.as_bytes(), header.value));
    match read_lines(buf, route, path, lines, max_header_bytes, max_body) {
        Parsed::Call(head) => Parsed::Call(CallHead { len, ..head }),
        other => other,
    }
}

/// A plain call's head from its header lines (`len` is set by the caller).
fn read_lines<'b>(
    buf: &'b [u8],
    route: Endpoint,
    path: Range<usize>,
    lines: impl Iterator<Item = (&'b [u8], &'b [u8])>,
    max_header_bytes: usize,
    max_body: usize,
) -> Parsed {
    let mut head = CallHead {
        route,
        path,
        len: 0,
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
    for (name, value) in lines {
        size += header_line_size(name, value);
        let slot = if name.eq_ignore_ascii_case(b"content-length") {
            let declared = decimal(value.trim_ascii());
            match (body_len, declared) {
                (None, Some(n)) if n <= max_body => body_len = Some(n),
                // Several, unreadable or too large: pingora's path refuses it
                // with the right status.
                _ => return Parsed::Other,
            }
            continue;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"upgrade")
            || (name.eq_ignore_ascii_case(b"connection") && !value.eq_ignore_ascii_case(b"keep-alive"))
        {
            return Parsed::Other;
        } else if name.eq_ignore_ascii_case(API_KEY_HEADER.as_str().as_bytes()) {
            &mut head.api_key
        } else if name.eq_ignore_ascii_case(b"authorization") {
            &mut head.authorization
        } else if name.eq_ignore_ascii_case(b"traceparent") {
            // A second one is ignored, as on pingora's path.
            head.traceparent.get_or_insert_with(|| at(value));
            continue;
        } else if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
            head.host = at(value);
            continue;
        } else if name.eq_ignore_ascii_case(b"origin") {
            &mut head.origin
        } else if route.is_mcp() && name.get(..4).is_some_and(|p| p.eq_ignore_ascii_case(b"mcp-")) {
            let mcp = &mut head.mcp;
            let mirrored = if name.eq_ignore_ascii_case(PROTOCOL_VERSION_HEADER.as_bytes()) {
                &mut mcp.protocol_version
            } else if name.eq_ignore_ascii_case(METHOD_HEADER.as_bytes()) {
                // Any line naming it, whatever else the head says.
                if value.trim_ascii().eq_ignore_ascii_case(b"subscriptions/listen") {
                    return Parsed::Other;
                }
                &mut mcp.method
            } else if name.eq_ignore_ascii_case(NAME_HEADER.as_bytes()) {
                &mut mcp.name
            } else {
                if name.eq_ignore_ascii_case(SESSION_HEADER.as_bytes()) {
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

#[cfg(test)]
mod tests {
    use super::*;

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

    /// What the front door reads of a head, field by field.
    impl CallHead {
        fn credentials<'b>(&self, buf: &'b [u8]) -> Credentials<'b> {
            self.head(buf).credentials.expect("credentials read here are never doubled")
        }

        fn traceparent(&self, buf: &[u8]) -> Option<String> {
            self.head(buf).traceparent.and_then(|v| std::str::from_utf8(v).ok()).map(str::to_owned)
        }

        fn mcp_head<'b>(&self, buf: &'b [u8], traceparent: Option<String>) -> McpHead<'b> {
            McpHead { traceparent, ..self.head(buf).mcp }
        }
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

    #[test]
    fn a_virtual_servers_call_is_read_here_by_either_parser() {
        for (head, route, path) in [
            (
                "POST /servers/support/tools/call HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n",
                Endpoint::ServerCall,
                "/servers/support/tools/call",
            ),
            (
                "POST /servers/a-b_2/mcp HTTP/1.1\r\nHost: h\r\nMcp-Method: tools/call\r\nContent-Length: 2\r\n\r\n",
                Endpoint::ServerMcp,
                "/servers/a-b_2/mcp",
            ),
            // httparse's: a header line of another shape.
            (
                "POST /servers/support/mcp HTTP/1.1\r\nHost:h\r\nMcp-Method:  tools/call\r\nContent-Length: 2\r\n\r\n",
                Endpoint::ServerMcp,
                "/servers/support/mcp",
            ),
        ] {
            let buf = format!("{head}{{}}");
            let Parsed::Call(call) = parse_call_head(buf.as_bytes(), 8192, 1024) else { panic!("{head:?}") };
            assert_eq!(call.route, route, "{head:?}");
            assert_eq!(call.head(buf.as_bytes()).path, path, "{head:?}");
            if route == Endpoint::ServerMcp {
                assert_eq!(call.mcp_head(buf.as_bytes(), None).method, Some(&b"tools/call"[..]), "{head:?}");
            }
        }
        for head in [
            "POST /servers/support/tools HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /servers/a.b/mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /servers//mcp HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /servers/a/mcp/ HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
            "POST /servers/a/mcp?x=1 HTTP/1.1\r\nContent-Length: 2\r\n\r\n",
        ] {
            assert!(matches!(parse(head), Parsed::Other), "{head:?}");
        }
    }

    /// `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`, `Mcp-Session-Id`
    /// and whether a mirrored one came twice.
    type McpFields = (Option<String>, Option<String>, Option<String>, Option<String>, bool);

    /// The `/mcp` headers a head read here carries, as the front sees them.
    fn mcp_fields(buf: &str) -> Option<McpFields> {
        let Parsed::Call(head) = parse_call_head(buf.as_bytes(), 8192, 1024) else { return None };
        assert_eq!(head.route, Endpoint::Mcp, "{buf:?}");
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
        assert_eq!((call.route, call.len, call.body_len), (Endpoint::Mcp, head.len(), 12));
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
        assert_eq!(call.route, Endpoint::Call);
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

    /// A header line of the kinds clients send, and some they do not.
    fn header_line() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let name = prop_oneof![
            Just(b"Host".to_vec()),
            Just(b"content-length".to_vec()),
            Just(b"Transfer-Encoding".to_vec()),
            Just(b"Authorization".to_vec()),
            Just(b"OXP-API-Key".to_vec()),
            Just(b"traceparent".to_vec()),
            Just(b"Origin".to_vec()),
            Just(b"Mcp-Method".to_vec()),
            Just(b"MCP-Protocol-Version".to_vec()),
            Just(b"mcp-name".to_vec()),
            Just(b"Mcp-Session-Id".to_vec()),
            Just(b"Connection".to_vec()),
            Just(b"Expect".to_vec()),
            proptest::collection::vec(prop_oneof![Just(b'X'), Just(b'-'), Just(b' '), Just(b'\xe9'), Just(b'@')], 0..4),
        ];
        let word = prop_oneof![
            Just(b"2".to_vec()),
            Just(b"localhost".to_vec()),
            Just(b"keep-alive".to_vec()),
            Just(b"close".to_vec()),
            Just(b"subscriptions/listen".to_vec()),
            Just(b"Bearer t".to_vec()),
        ];
        let odd = prop_oneof![Just(b'\r'), Just(b'\n'), Just(b'\0'), Just(b'\xff')];
        let tail = proptest::collection::vec(
            prop_oneof![8 => prop_oneof![Just(b'1'), Just(b' '), Just(b'\t'), Just(b'a')], 1 => odd],
            0..4,
        );
        let colon =
            prop_oneof![Just(b":".to_vec()), Just(b": ".to_vec()), Just(b":\t ".to_vec()), Just(b" :".to_vec())];
        let end = prop_oneof![Just(b"\r\n".to_vec()), Just(b"\n".to_vec())];
        (name, colon, proptest::option::of(word), tail, end)
            .prop_map(|(name, colon, word, tail, end)| [name, colon, word.unwrap_or_default(), tail, end].concat())
    }

    use proptest::strategy::Strategy as _;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, ..Default::default() })]

        /// The one-pass reading and httparse's agree on every head, whole or
        /// cut short.
        #[test]
        fn the_one_pass_reading_agrees_with_httparse(
            line in proptest::prop_oneof![
                proptest::strategy::Just(&b"POST /tools/call HTTP/1.1\r\n"[..]),
                proptest::strategy::Just(&b"POST /mcp HTTP/1.1\r\n"[..]),
                proptest::strategy::Just(&b"POST /call HTTP/1.1\r\n"[..]),
                proptest::strategy::Just(&b"POST /mcp HTTP/1.0\r\n"[..]),
            ],
            lines in proptest::collection::vec(header_line(), 0..5)
                .prop_map(|mut lines| {
                    // A Host and a Content-Length, so that many heads are calls.
                    lines.push(b"Host: localhost \t\r\n".to_vec());
                    lines.push(b"Content-Length: 2\r\n".to_vec());
                    lines
                })
                .prop_shuffle(),
            end in proptest::prop_oneof![proptest::strategy::Just(&b"\r\n"[..]), proptest::strategy::Just(&b"\n"[..])],
            cut in proptest::prelude::any::<proptest::sample::Index>(),
        ) {
            let head = [line, &lines.concat(), end, b"{}"].concat();
            for buf in [&head[..], &head[..cut.index(head.len() + 1)]] {
                proptest::prop_assert_eq!(parse_call_head(buf, 8192, 1024), parse_with_httparse(buf, 8192, 1024));
            }
        }

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
                proptest::prop_assert_eq!(call.route, Endpoint::Mcp);
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
