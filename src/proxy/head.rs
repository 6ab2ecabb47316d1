//! The framing checks every request head passes (RFC 9112), on pingora's
//! path: the lean reader serves only heads that pass them
//! trivially (one Content-Length, one Host, no Transfer-Encoding or
//! Expect); every other head goes to pingora's path, which runs
//! [`check_raw_head`] on the raw head it read: pingora itself drops a
//! Content-Length sent with Transfer-Encoding and merges equal duplicates,
//! which is exactly what must be seen to refuse them. What the head says
//! of its host and origin is handed to the front door (`front_door.rs`),
//! which applies the browser policy to every request alike.

use crate::error::RequestError;

/// The most header lines a request may have; more get 431.
pub(super) const MAX_HEADER_LINES: usize = 100;

/// What the checks need of a head, gathered in one pass over its lines.
#[derive(Debug, Default)]
pub(super) struct HeadFacts<'h> {
    /// Header lines.
    lines: usize,
    /// Content-Length values (a comma-separated list counts each one).
    content_lengths: usize,
    /// The `Transfer-Encoding` lines, and the first's value.
    transfer_encodings: usize,
    transfer_encoding: Option<&'h [u8]>,
    /// The `Host` lines, and the first's value.
    hosts: usize,
    host: Option<&'h [u8]>,
    /// The first `Origin`.
    origin: Option<&'h [u8]>,
    /// The first `Expect`.
    expect: Option<&'h [u8]>,
}

/// What a head's `Expect` asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Expect {
    /// Nothing.
    Nothing,
    /// `100-continue`: the client waits for `100 Continue` before its body.
    Continue,
}

impl<'h> HeadFacts<'h> {
    /// Notes one header line.
    pub(super) fn note(&mut self, name: &str, value: &'h [u8]) {
        self.lines += 1;
        if name.eq_ignore_ascii_case("host") {
            self.hosts += 1;
            self.host.get_or_insert(value);
        } else if name.eq_ignore_ascii_case("content-length") {
            self.content_lengths += 1 + value.iter().filter(|&&b| b == b',').count();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            self.transfer_encodings += 1;
            self.transfer_encoding.get_or_insert(value);
        } else if name.eq_ignore_ascii_case("origin") {
            self.origin.get_or_insert(value);
        } else if name.eq_ignore_ascii_case("expect") {
            self.expect.get_or_insert(value);
        }
    }

    /// The framing checks: a head whose length is in doubt is refused
    /// before anything is judged on it. `http11` is false for HTTP/1.0
    /// (which needs no `Host`).
    pub(super) fn check(&self, http11: bool) -> Result<Expect, RequestError> {
        if self.lines > MAX_HEADER_LINES {
            return Err(RequestError::TooManyHeaders { limit: MAX_HEADER_LINES });
        }
        if self.content_lengths > 0 && self.transfer_encodings > 0 {
            return Err(RequestError::AmbiguousFraming("both Content-Length and Transfer-Encoding"));
        }
        if self.content_lengths > 1 {
            return Err(RequestError::AmbiguousFraming("more than one Content-Length"));
        }
        match self.transfer_encoding {
            Some(coding) if self.transfer_encodings > 1 || !coding.trim_ascii().eq_ignore_ascii_case(b"chunked") => {
                return Err(RequestError::UnsupportedTransferEncoding)
            }
            _ => {}
        }
        if http11 && self.hosts != 1 {
            return Err(RequestError::HostHeader(if self.hosts == 0 { "missing" } else { "more than one" }));
        }
        match self.expect {
            None => Ok(Expect::Nothing),
            Some(value) if value.trim_ascii().eq_ignore_ascii_case(b"100-continue") => Ok(Expect::Continue),
            Some(_) => Err(RequestError::ExpectationFailed),
        }
    }
}

/// What a raw head that passed the framing checks says for the front door.
#[derive(Debug)]
pub(super) struct Framed<'h> {
    /// What its `Expect` asks.
    pub expect: Expect,
    /// Its host: an absolute-form target's authority, which is the
    /// request's host whatever `Host` says (RFC 9112 3.2.2; pingora keeps
    /// only the path of an HTTP/1.0 one), else the first `Host`.
    pub host: Option<&'h [u8]>,
    /// The first `Origin`.
    pub origin: Option<&'h [u8]>,
}

/// The checks on a raw head (pingora's path): its header lines parsed again
/// with httparse, with room for one line more than allowed so that too many
/// is seen. The rest of the request line is pingora's business; `http11` is
/// its version.
pub(super) fn check_raw_head(raw: &[u8], http11: bool) -> Result<Framed<'_>, RequestError> {
    let line_end = raw.iter().position(|&b| b == b'\n');
    let request_line = &raw[..line_end.unwrap_or(raw.len())];
    let lines = line_end.map_or(&raw[raw.len()..], |end| &raw[end + 1..]);
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADER_LINES + 1];
    match httparse::parse_headers(lines, &mut slots) {
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::TooManyHeaders { limit: MAX_HEADER_LINES }),
        // pingora read these lines; what httparse cannot is not checked, so refused.
        Ok(httparse::Status::Partial) | Err(_) => return Err(RequestError::MalformedHead("header lines".into())),
    }
    let mut facts = HeadFacts::default();
    for header in slots.iter().take_while(|h| !h.name.is_empty()) {
        facts.note(header.name, header.value);
    }
    let expect = facts.check(http11)?;
    let host = absolute_target_authority(request_line).or(facts.host);
    Ok(Framed { expect, host, origin: facts.origin })
}

/// The authority of a request line's absolute-form target
/// (`GET http://host:port/path HTTP/1.0`), if it has one.
fn absolute_target_authority(request_line: &[u8]) -> Option<&[u8]> {
    let mut parts = request_line.split(|&b| b == b' ').filter(|p| !p.is_empty());
    let target = parts.nth(1)?;
    let scheme_end = target.windows(3).position(|w| w == b"://")?;
    if !target[..scheme_end].iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')) {
        return None;
    }
    let rest = &target[scheme_end + 3..];
    let end = rest.iter().position(|b| matches!(b, b'/' | b'?' | b'#')).unwrap_or(rest.len());
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::browser::BrowserPolicy;
    use crate::config::Config;

    /// The framing checks, then the default browser policy as the front
    /// door applies it.
    fn check(head: &str) -> Result<Expect, RequestError> {
        let policy = BrowserPolicy::new(&Config::parse("", "test").expect("config"));
        let framed = check_raw_head(head.as_bytes(), !head.contains("HTTP/1.0"))?;
        policy.check_host(framed.host)?;
        policy.check_origin(framed.origin, false)?;
        Ok(framed.expect)
    }

    fn status(head: &str) -> u16 {
        check(head).map_or_else(|e| e.status(), |_| 200)
    }

    #[test]
    fn framing_refusals_have_their_statuses() {
        let ok = "POST /tools/call HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(status(ok), 200);
        for (head, expected) in [
            ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 67\r\nContent-Length: 67\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 67, 67\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nContent-Length: 2\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nHost: localhost\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n", 400),
            ("POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
            ("POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
            ("POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nExpect: 200-ok\r\n\r\n", 417),
            ("GET / HTTP/1.1\r\nHost: evil.example\r\n\r\n", 421),
            ("GET / HTTP/1.1\r\nHost: localhost\r\nOrigin: https://evil.example\r\n\r\n", 403),
        ] {
            assert_eq!(status(head), expected, "{head:?}");
        }
        assert_eq!(
            check("POST / HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\nExpect: 100-Continue\r\n\r\n").ok(),
            Some(Expect::Continue)
        );
        assert_eq!(status("GET / HTTP/1.0\r\n\r\n"), 200, "HTTP/1.0 needs no Host");
        // An absolute-form target's authority is the request's host.
        for (head, expected) in [
            ("GET http://evil.example/tools HTTP/1.0\r\n\r\n", 421),
            ("POST HTTP://evil.example:8080/tools/call HTTP/1.0\r\nContent-Length: 2\r\n\r\n", 421),
            ("GET http://evil.example?x HTTP/1.0\r\n\r\n", 421),
            ("GET http://user@localhost/tools HTTP/1.0\r\n\r\n", 421),
            ("GET http://localhost:8080/tools HTTP/1.0\r\n\r\n", 200),
            ("GET http://127.0.0.1/tools HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 200),
            ("GET /path/http://evil.example HTTP/1.0\r\n\r\n", 200),
        ] {
            assert_eq!(status(head), expected, "{head:?}");
        }
        assert_eq!(status("POST / HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding:  Chunked \r\n\r\n"), 200);
        let lines: String = (0..MAX_HEADER_LINES).map(|i| format!("X-{i}: y\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\nHost: localhost\r\n{lines}\r\n")), 431);
        let many: String = (0..400).map(|i| format!("X-{i}: y\r\n")).collect();
        assert_eq!(status(&format!("GET / HTTP/1.1\r\nHost: localhost\r\n{many}\r\n")), 431);
    }
}
