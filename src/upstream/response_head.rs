//! An upstream answer's head (RFC 9112): its status, how its body is
//! framed, whether it is JSON, and whether the connection may carry
//! another call.
//!
//! Every OTC call reads one, and tool servers send heads of one narrow
//! shape: `HTTP/1.1 200 OK` and a few `Name: value` lines of visible ASCII.
//! [`scan`] reads that shape in one pass over the bytes, where httparse
//! spends several times as many instructions on it (benches/README.md,
//! "Per-call work after the front door"). Anything else, a partial head
//! included, is httparse's to read or refuse: `scan` accepts a subset of
//! what httparse accepts, and a property test checks that the two agree on
//! every head `scan` reads.

use http::StatusCode;

use crate::http1::{decimal, is_text, HeaderLines};

/// An answer head that cannot be read: its own error, so that the client
/// that sends requests (`call_client.rs`, which calls this reader) is not
/// imported back here.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(super) struct HeadError(pub(super) String);

/// The most header lines an answer may have.
const MAX_HEADERS: usize = 64;

/// How an answer's body is delimited (RFC 9112, section 6.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// An answer's head, parsed.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Head {
    /// Its length in bytes, the blank line included.
    pub len: usize,
    pub status: StatusCode,
    pub is_json: bool,
    pub framing: Framing,
    pub keep_alive: bool,
}

/// What the header lines say, as they are read.
#[derive(Debug, Default, PartialEq, Eq)]
struct Facts {
    is_json: bool,
    length: Option<usize>,
    chunked: bool,
    transfer_encoded: bool,
    /// `Connection: close` was sent.
    close: bool,
    /// `Connection: keep-alive` was sent.
    keep_alive: bool,
}

impl Facts {
    /// Notes one header line; a `Content-Length` that is not one number is
    /// an error.
    fn note(&mut self, name: &[u8], value: &[u8]) -> Result<(), HeadError> {
        // Each name is compared only with the one read of its length, eight
        // bytes at a time (`is_named`): byte by byte, the four comparisons
        // were most of an answer head's cost.
        match name.len() {
            12 if is_named(name, b"content-type") => self.is_json = mentions_json(value),
            14 if is_named(name, b"content-length") => {
                let n = decimal(value.trim_ascii())
                    .ok_or_else(|| HeadError("the answer's content-length is not a number".to_owned()))?;
                if self.length.is_some_and(|l| l != n) {
                    return Err(HeadError("the answer has two different content-lengths".to_owned()));
                }
                self.length = Some(n);
            }
            17 if is_named(name, b"transfer-encoding") => {
                self.transfer_encoded = true;
                // Only a final `chunked` delimits the body; anything else runs
                // until the connection closes.
                self.chunked = value
                    .rsplit(|&b| b == b',')
                    .next()
                    .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"));
            }
            10 if is_named(name, b"connection") => {
                for token in value.split(|&b| b == b',').map(<[u8]>::trim_ascii) {
                    if token.eq_ignore_ascii_case(b"close") {
                        self.close = true;
                    } else if token.eq_ignore_ascii_case(b"keep-alive") {
                        self.keep_alive = true;
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }
}

/// Whether the header name `name` (token bytes) is `lower` (lower-case
/// letters and `-`, as long) in any case: eight bytes at a time, each
/// byte's 0x20 bit set. That lower-cases a letter and leaves `-` as it is,
/// and turns no other token byte into a letter or `-`.
fn is_named(name: &[u8], lower: &[u8]) -> bool {
    const CASE: u64 = 0x2020_2020_2020_2020;
    if name.len() != lower.len() {
        return false;
    }
    let (words, rest) = (name.chunks_exact(8), lower.chunks_exact(8));
    let (name_tail, lower_tail) = (words.remainder(), rest.remainder());
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("eight bytes"));
    words.zip(rest).all(|(n, l)| word(n) | CASE == word(l))
        && name_tail.iter().zip(lower_tail).all(|(&n, &l)| n | 0x20 == l)
}

/// Parses a complete head at the start of `buf`; `None` while it is partial.
pub(super) fn parse_head(buf: &[u8]) -> Result<Option<Head>, HeadError> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut facts = Facts::default();
    let (len, code, http11) = match scan(buf, &mut facts) {
        Some(line) => line,
        None => {
            facts = Facts::default();
            match parse_with_httparse(buf, &mut facts)? {
                Some(line) => line,
                None => return Ok(None),
            }
        }
    };
    head(len, code, http11, &facts).map(Some)
}

/// The head from its length, status line and facts.
fn head(len: usize, code: u16, http11: bool, facts: &Facts) -> Result<Head, HeadError> {
    let status = StatusCode::from_u16(code).map_err(|_| HeadError(format!("answer status {code} is not a status")))?;
    // HTTP/1.1 keeps the connection unless told to close; 1.0 closes it
    // unless told to keep it.
    let keep_alive = !facts.close && (http11 || facts.keep_alive);
    let framing = if status.is_informational() || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED
    {
        Framing::Length(0)
    } else if facts.transfer_encoded {
        if facts.chunked {
            Framing::Chunked
        } else {
            Framing::UntilClose
        }
    } else {
        facts.length.map_or(Framing::UntilClose, Framing::Length)
    };
    // An answer with both framings is one an intermediary could read
    // differently (RFC 9112 6.3): read as chunked, then closed, never reused.
    let ambiguous = facts.transfer_encoded && facts.length.is_some();
    Ok(Head {
        len,
        status,
        is_json: facts.is_json,
        framing,
        keep_alive: keep_alive && framing != Framing::UntilClose && !ambiguous,
    })
}

/// The common shape, in one pass: `HTTP/1.x NNN reason`, then at most
/// [`MAX_HEADERS`] lines of the common shape ([`HeaderLines`]). The head's
/// length, status code and whether it is HTTP/1.1; `None` for anything
/// else, a partial head, or a line `facts` refuses (httparse then reads it
/// again, and says why).
fn scan(buf: &[u8], facts: &mut Facts) -> Option<(usize, u16, bool)> {
    let http11 = match buf.get(..9)? {
        b"HTTP/1.1 " => true,
        b"HTTP/1.0 " => false,
        _ => return None,
    };
    let code = match *buf.get(9..12)? {
        [a @ b'0'..=b'9', b @ b'0'..=b'9', c @ b'0'..=b'9'] => {
            u16::from(a - b'0') * 100 + u16::from(b - b'0') * 10 + u16::from(c - b'0')
        }
        _ => return None,
    };
    let mut i = 12;
    if *buf.get(i)? == b' ' {
        i += 1;
        while is_text(*buf.get(i)?) {
            i += 1;
        }
    }
    let mut lines = HeaderLines::new(buf, crlf(buf, i)?, MAX_HEADERS);
    for (name, value) in &mut lines {
        facts.note(name, value).ok()?;
    }
    Some((lines.head_len()?, code, http11))
}

/// The position after the CRLF at `i`.
fn crlf(buf: &[u8], i: usize) -> Option<usize> {
    (buf.get(i..i + 2)? == b"\r\n").then_some(i + 2)
}

/// Any head httparse reads: the head's length, status code and whether it
/// is HTTP/1.1, its lines noted in `facts`; `None` while it is partial.
fn parse_with_httparse(buf: &[u8], facts: &mut Facts) -> Result<Option<(usize, u16, bool)>, HeadError> {
    // Uninitialised: zeroing 64 headers cost more than parsing five.
    let mut headers = [const { std::mem::MaybeUninit::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let len =
        match httparse::ParserConfig::default().parse_response_with_uninit_headers(&mut response, buf, &mut headers) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(HeadError(format!("unreadable answer head: {e}"))),
        };
    for header in response.headers.iter() {
        facts.note(header.name.as_bytes(), header.value)?;
    }
    Ok(Some((len, response.code.unwrap_or_default(), response.version == Some(1))))
}

/// Whether a `Content-Type` says JSON (`application/json`, `...+json`),
/// in any case.
pub(super) fn mentions_json(value: &[u8]) -> bool {
    value
        .iter()
        .enumerate()
        .any(|(i, &b)| b | 0x20 == b'j' && value.get(i..i + 4).is_some_and(|w| w.eq_ignore_ascii_case(b"json")))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// httparse's reading of a head, for comparison.
    fn by_httparse(buf: &[u8]) -> Option<Result<Head, String>> {
        let mut facts = Facts::default();
        match parse_with_httparse(buf, &mut facts) {
            Ok(Some((len, code, http11))) => Some(head(len, code, http11, &facts).map_err(|e| e.to_string())),
            Ok(None) => None,
            Err(e) => Some(Err(e.to_string())),
        }
    }

    /// `scan`'s reading, when it reads the head itself.
    fn by_scan(buf: &[u8]) -> Option<Result<Head, String>> {
        let mut facts = Facts::default();
        let (len, code, http11) = scan(buf, &mut facts)?;
        Some(head(len, code, http11, &facts).map_err(|e| e.to_string()))
    }

    #[test]
    fn the_heads_tool_servers_send_are_read_in_one_pass() {
        for head in [
            &b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Fri, 27 Nov 2026 21:00:00 GMT\r\nContent-Type: application/json\r\nContent-Length: 104\r\nConnection: keep-alive\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ndate: Fri, 27 Nov 2026 21:00:00 GMT\r\nserver: uvicorn\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}",
            b"HTTP/1.1 422 Unprocessable Entity\r\ncontent-type: application/problem+json\r\ntransfer-encoding: chunked\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n",
            b"HTTP/1.1 204\r\n\r\n",
        ] {
            let scanned = by_scan(head).expect("read in one pass");
            assert_eq!(Some(scanned), by_httparse(head), "{}", String::from_utf8_lossy(head));
        }
        let nginx = by_scan(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 104\r\n\r\n")
            .expect("read")
            .expect("a head");
        assert_eq!(
            (nginx.status, nginx.is_json, nginx.framing, nginx.keep_alive),
            (StatusCode::OK, true, Framing::Length(104), true)
        );
    }

    #[test]
    fn other_heads_are_left_to_httparse() {
        for head in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"[..],
            b"HTTP/1.1 200 OK\r\nX-Folded: a\r\n b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX-Bytes: caf\xc3\xa9\r\n\r\n",
            b"HTTP/1.1 200 OK\nContent-Length: 2\n\n",
            b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n",
            b"HTTP/2 200\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
        ] {
            assert!(by_scan(head).is_none(), "{}", String::from_utf8_lossy(head));
        }
        assert!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n").is_err());
        assert!(matches!(parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"), Ok(None)));
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: y\r\n")).collect();
        let many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert!(by_scan(many.as_bytes()).is_none());
        assert!(parse_head(many.as_bytes()).is_err(), "more lines than allowed are refused");
    }

    #[test]
    fn names_are_matched_in_any_case_and_only_exactly() {
        for lower in [&b"content-type"[..], b"content-length", b"transfer-encoding", b"connection"] {
            let upper = lower.to_ascii_uppercase();
            assert!(is_named(lower, lower) && is_named(&upper, lower), "{lower:?}");
            // Every token byte other than the right letter, in every place.
            for at in 0..lower.len() {
                for b in (0..=255u8).filter(|b| crate::http1::is_token(*b) && !b.eq_ignore_ascii_case(&lower[at])) {
                    let mut other = lower.to_vec();
                    other[at] = b;
                    assert!(!is_named(&other, lower), "{:?}", String::from_utf8_lossy(&other));
                }
            }
            assert!(!is_named(&lower[1..], lower));
        }
    }

    #[test]
    fn content_types_are_read_exactly() {
        for json in
            [&b"application/json"[..], b"Application/JSON; charset=utf-8", b"application/problem+json", b"text/jsonish"]
        {
            assert!(mentions_json(json), "{json:?}");
        }
        for other in [&b"text/html"[..], b"", b"application/jso", b"j", b"application/x-ndjso"] {
            assert!(!mentions_json(other), "{other:?}");
        }
    }

    /// A head line of the kinds tool servers send, and some they do not.
    fn line() -> impl Strategy<Value = Vec<u8>> {
        let name = prop_oneof![
            Just(b"Content-Length".to_vec()),
            Just(b"content-type".to_vec()),
            Just(b"Transfer-Encoding".to_vec()),
            Just(b"CONNECTION".to_vec()),
            proptest::collection::vec(prop_oneof![Just(b'X'), Just(b'-'), Just(b'!'), Just(b' '), Just(b'\xe9')], 0..4),
        ];
        let value = proptest::collection::vec(
            prop_oneof![
                Just(b'1'),
                Just(b'0'),
                Just(b','),
                Just(b' '),
                Just(b'\t'),
                Just(b'\r'),
                Just(b'\n'),
                Just(b'\0'),
                Just(b'\xff'),
                Just(b'x'),
            ],
            0..6,
        );
        let word = prop_oneof![
            Just(b"close".to_vec()),
            Just(b"keep-alive".to_vec()),
            Just(b"chunked".to_vec()),
            Just(b"application/json".to_vec()),
            Just(b"12".to_vec()),
        ];
        (
            name,
            proptest::option::of(word),
            value,
            prop_oneof![Just(b":".to_vec()), Just(b": ".to_vec()), Just(b" :".to_vec())],
        )
            .prop_map(|(name, word, value, colon)| {
                [name, colon, word.unwrap_or_default(), value, b"\r\n".to_vec()].concat()
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

        /// Whatever head `scan` reads, httparse reads the same.
        #[test]
        fn scan_agrees_with_httparse(
            version in prop_oneof![Just(&b"HTTP/1.1 "[..]), Just(&b"HTTP/1.0 "[..]), Just(&b"HTTP/1.1"[..])],
            code in prop_oneof![Just(b"200".to_vec()), Just(b"101".to_vec()), Just(b"304".to_vec()), Just(b"099".to_vec()), Just(b"2x0".to_vec())],
            reason in proptest::collection::vec(prop_oneof![Just(b'O'), Just(b' '), Just(b'\t'), Just(b'\x7f'), Just(b'\r')], 0..4),
            lines in proptest::collection::vec(line(), 0..6),
            end in prop_oneof![Just(&b"\r\n"[..]), Just(&b""[..]), Just(&b"\n"[..])],
            cut in any::<prop::sample::Index>(),
        ) {
            let head = [version, &code, &reason, b"\r\n", &lines.concat(), end].concat();
            for buf in [&head[..], &head[..cut.index(head.len() + 1)]] {
                if let Some(scanned) = by_scan(buf) {
                    prop_assert_eq!(Some(scanned), by_httparse(buf), "{:?}", String::from_utf8_lossy(buf));
                }
            }
        }
    }
}
