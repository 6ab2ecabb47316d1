//! HTTP/1.1 reading helpers that both of the gateway's readers share: the
//! data plane's lean request reader (`proxy/lean.rs`) and the upstream call
//! client (`upstream/call_client.rs`).

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
pub(crate) fn header_line_size(name: &str, value: &[u8]) -> usize {
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
