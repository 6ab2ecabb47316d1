//! HTTP/1.1 reading helpers that both of the gateway's readers share: the
//! data plane's lean request reader (`proxy/lean.rs`, `proxy/lean_head.rs`)
//! and the upstream call client (`upstream/call_client.rs`,
//! `upstream/response_head.rs`).

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Decimal digits as a number, as Content-Length's grammar has them (no
/// sign): at most 19, so it never overflows. Written out because
/// `str::parse` took a leading `+` and cost more on every message
/// (benches/HISTORY.md, "Figures behind the code").
pub(crate) fn decimal(digits: &[u8]) -> Option<usize> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = digits.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0'));
    usize::try_from(n).ok()
}

/// The bytes one header line takes, as `max_header_bytes` counts them (name,
/// `": "`, value, CRLF).
pub(crate) fn header_line_size(name: &[u8], value: &[u8]) -> usize {
    name.len() + value.len() + 4
}

/// Reads into `buf`'s spare room, growing it by `grow` bytes when less than
/// 1 KiB is left; 0 at the end of the stream.
pub(crate) async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut BytesMut,
    grow: usize,
) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(grow);
    }
    stream.read_buf(buf).await
}

/// A head's header lines of the common shape, read in one pass: each a
/// token, `:`, optional blanks, then visible ASCII, blanks or tabs, ended by
/// CRLF, until a blank line. Yields each line's name and value (its leading
/// and trailing blanks left out, as httparse has them), at most `max_lines`.
///
/// Both readers' heads are nearly always of this shape, and httparse spends
/// several times as many instructions on them (benches/README.md, "Per-call
/// work after the front door"). Anything else (another byte, a bare LF, a
/// folded line, more lines, the end of the buffer first) ends the lines
/// with no [`HeaderLines::head_len`]: the caller then parses the head with
/// httparse, which reads or refuses it. So this reads a subset of what
/// httparse reads, and the callers' property tests check that they agree.
pub(crate) struct HeaderLines<'b> {
    buf: &'b [u8],
    at: usize,
    lines_left: usize,
    /// Past the blank line, once it was read.
    end: Option<usize>,
}

impl<'b> HeaderLines<'b> {
    /// The lines from `buf[start..]` (just past the start line's CRLF).
    pub(crate) fn new(buf: &'b [u8], start: usize, max_lines: usize) -> HeaderLines<'b> {
        HeaderLines { buf, at: start, lines_left: max_lines, end: None }
    }

    /// The head's length, blank line included, once every line was read;
    /// `None` when the head is not of the common shape (or not whole).
    pub(crate) fn head_len(&self) -> Option<usize> {
        self.end
    }

    fn line(&mut self) -> Option<(&'b [u8], &'b [u8])> {
        let buf = self.buf;
        let mut i = self.at;
        if buf.get(i..i + 2)? == b"\r\n" {
            self.end = Some(i + 2);
            return None;
        }
        self.lines_left = self.lines_left.checked_sub(1)?;
        let name_start = i;
        while is_token(*buf.get(i)?) {
            i += 1;
        }
        if i == name_start || buf[i] != b':' {
            return None;
        }
        let name = &buf[name_start..i];
        i += 1;
        while matches!(*buf.get(i)?, b' ' | b'\t') {
            i += 1;
        }
        let value_start = i;
        i = text_end(buf, i);
        if buf.get(i..i + 2)? != b"\r\n" {
            return None;
        }
        self.at = i + 2;
        Some((name, buf[value_start..i].trim_ascii_end()))
    }
}

impl<'b> Iterator for HeaderLines<'b> {
    type Item = (&'b [u8], &'b [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        if self.end.is_some() {
            return None;
        }
        let line = self.line();
        if line.is_none() {
            // Whatever ended the lines, nothing more is read.
            self.lines_left = 0;
            self.at = self.buf.len();
        }
        line
    }
}

/// A byte of a header value (or a reason phrase) in the common shape:
/// visible ASCII, a space or a tab (httparse also takes bytes above 0x7f).
pub(crate) fn is_text(b: u8) -> bool {
    b == b'\t' || (b' '..=b'~').contains(&b)
}

/// Whether `b` may be in a header name (RFC 9110 `tchar`).
pub(crate) fn is_token(b: u8) -> bool {
    TOKEN[usize::from(b)]
}

/// Whether each byte may be in a header name (RFC 9110 `tchar`): one
/// lookup per byte.
static TOKEN: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric()
            || matches!(
                c,
                b'!' | b'#' | b'$' | b'%' | b'&' | b'\'' | b'*' | b'+' | b'-' | b'.' | b'^' | b'_' | b'`' | b'|' | b'~'
            );
        b += 1;
    }
    table
};

/// Where the header text ([`is_text`]) that starts at `i` ends: eight bytes
/// at a time. A word with a byte that is a control byte, DEL or above 0x7f
/// sets that byte's high bit in `mask` (Bit Twiddling Hacks, "hasless" and
/// "haszero": a borrow may also flag a byte above a flagged one, never one
/// below), so its lowest flagged byte is the first such byte: the end,
/// unless it is a tab.
fn text_end(buf: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    while let Some(word) = buf.get(i..i + 8) {
        let w = u64::from_le_bytes(word.try_into().expect("eight bytes"));
        let below = w.wrapping_sub(ONES * 0x20) & !w;
        let del = (w ^ (ONES * 0x7f)).wrapping_sub(ONES) & !(w ^ (ONES * 0x7f));
        let mask = (below | del | w) & HIGH;
        if mask == 0 {
            i += 8;
            continue;
        }
        i += (mask.trailing_zeros() / 8) as usize;
        if buf[i] != b'\t' {
            return i;
        }
        i += 1;
    }
    while buf.get(i).is_some_and(|&b| is_text(b)) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The word-at-a-time scan stops where the byte-at-a-time one does.
        #[test]
        fn header_text_ends_where_a_byte_scan_ends(
            bytes in proptest::collection::vec(proptest::prop_oneof![
                8 => 0x20u8..0x7f,
                1 => proptest::prelude::any::<u8>(),
                1 => proptest::strategy::Just(b'\t'),
            ], 0..40),
            start in 0usize..8,
        ) {
            let start = start.min(bytes.len());
            let by_byte = bytes[start..].iter().position(|&b| !is_text(b)).map_or(bytes.len(), |n| start + n);
            proptest::prop_assert_eq!(text_end(&bytes, start), by_byte);
        }
    }

    #[test]
    fn tokens_are_rfc_9110s() {
        let tchars: Vec<u8> = (0..=255u8).filter(|&b| TOKEN[usize::from(b)]).collect();
        let expected: Vec<u8> =
            (0..=255u8).filter(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b)).collect();
        assert_eq!(tchars, expected);
    }
}
