//! W3C Trace Context: the `traceparent` header sent with every call upstream.
//!
//! A client's `traceparent` keeps its trace id and gets the gateway's span as
//! the new parent; without one, a client `trace_id` of 32 hex digits becomes
//! the trace id, else a random one is made.

/// A `traceparent` value: `00-<32 hex>-<16 hex>-<2 hex>`, always valid
/// header text. Kept as bytes: it goes straight into the request's head.
#[derive(Debug, Clone, Copy)]
pub struct Traceparent([u8; 55]);

impl Traceparent {
    /// The header value's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The `traceparent` for an upstream call. Built in place: it is made for
/// every call.
pub fn traceparent(incoming: Option<&str>, trace_id: Option<&str>) -> Traceparent {
    // One draw from the thread's generator for both ids (as two integers:
    // an array would be drawn a word per byte): the span's, and the trace's
    // when the call starts a trace.
    with_ids(incoming, trace_id, rand::random())
}

/// [`traceparent`] with the random bits drawn: an id made of them is never
/// zero (invalid).
fn with_ids(incoming: Option<&str>, trace_id: Option<&str>, (trace_bits, span_bits): (u128, u64)) -> Traceparent {
    let mut out = *b"00-00000000000000000000000000000000-0000000000000000-01";
    match incoming.and_then(parse) {
        Some((trace, flags)) => {
            out[3..35].copy_from_slice(trace.as_bytes());
            out[53..55].copy_from_slice(flags.as_bytes());
        }
        None => match trace_id.filter(|t| t.len() == 32 && is_lower_hex(t) && !is_zero(t)) {
            Some(trace) => out[3..35].copy_from_slice(trace.as_bytes()),
            None => write_hex(&mut out[3..35], &trace_bits.max(1).to_le_bytes()),
        },
    }
    write_hex(&mut out[36..52], &span_bits.max(1).to_le_bytes());
    Traceparent(out)
}

impl Traceparent {
    /// The header of a span the gateway records: its own ids, sampled.
    pub fn of_span(trace_id: &[u8; 16], span_id: &[u8; 8]) -> Traceparent {
        let mut out = *b"00-00000000000000000000000000000000-0000000000000000-01";
        write_hex(&mut out[3..35], trace_id);
        write_hex(&mut out[36..52], span_id);
        Traceparent(out)
    }
}

/// What a valid `traceparent` says: the trace, the parent span, and
/// whether the caller records the trace (the `sampled` flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanContext {
    /// The trace id.
    pub trace_id: [u8; 16],
    /// The parent span's id.
    pub span_id: [u8; 8],
    /// Flag 01: the trace is being recorded upstream of here.
    pub sampled: bool,
}

impl SpanContext {
    /// A valid `traceparent` header's context; `None` for anything else.
    pub fn parse(header: &str) -> Option<SpanContext> {
        let (trace, flags) = parse(header)?;
        let parent = &header.trim()[36..52];
        let mut context = SpanContext { trace_id: [0; 16], span_id: [0; 8], sampled: false };
        read_hex(trace, &mut context.trace_id)?;
        read_hex(parent, &mut context.span_id)?;
        let mut flag = [0u8; 1];
        read_hex(flags, &mut flag)?;
        context.sampled = flag[0] & 1 == 1;
        Some(context)
    }
}

fn read_hex(text: &str, out: &mut [u8]) -> Option<()> {
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(())
}

/// `00-<32 hex trace>-<16 hex parent>-<2 hex flags>`: the trace id and flags.
fn parse(header: &str) -> Option<(&str, &str)> {
    let mut parts = header.trim().split('-');
    let (version, trace, parent, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let valid = version.len() == 2
        && version != "ff"
        && is_lower_hex(version)
        && trace.len() == 32
        && is_lower_hex(trace)
        && !is_zero(trace)
        && parent.len() == 16
        && is_lower_hex(parent)
        && !is_zero(parent)
        && flags.len() == 2
        && is_lower_hex(flags);
    valid.then_some((trace, flags))
}

fn is_lower_hex(text: &str) -> bool {
    text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn is_zero(text: &str) -> bool {
    text.bytes().all(|b| b == b'0')
}

/// Lower-case hex of `bytes` into `out` (twice as long): one lookup per
/// byte, in a table of the 256 digit pairs.
fn write_hex(out: &mut [u8], bytes: &[u8]) {
    const PAIRS: [[u8; 2]; 256] = {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut pairs = [[0u8; 2]; 256];
        let mut i = 0;
        while i < 256 {
            pairs[i] = [HEX[i >> 4], HEX[i & 0xf]];
            i += 1;
        }
        pairs
    };
    for (pair, &b) in out.chunks_exact_mut(2).zip(bytes) {
        pair.copy_from_slice(&PAIRS[usize::from(b)]);
    }
}

/// What a call carries for tracing: the body's `trace_id` and the client's
/// `traceparent` header.
#[derive(Debug, Clone, Copy)]
pub struct OutgoingTrace<'a> {
    /// The client's `trace_id`, forwarded in the body.
    pub trace_id: Option<&'a str>,
    /// The client's `traceparent`, continued in the upstream's header.
    pub traceparent: Option<&'a str>,
    /// The gateway's client span of this call, when it is recorded: the
    /// upstream's header is then exactly this.
    pub span: Option<Traceparent>,
}

impl OutgoingTrace<'_> {
    /// The `traceparent` the upstream receives.
    pub fn header(&self) -> Traceparent {
        self.span.unwrap_or_else(|| traceparent(self.traceparent, self.trace_id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(v: &Traceparent) -> Vec<String> {
        assert!(http::HeaderValue::from_bytes(v.as_bytes()).is_ok(), "a valid header value");
        std::str::from_utf8(v.as_bytes()).expect("ascii").split('-').map(str::to_owned).collect()
    }

    #[test]
    fn no_id_made_is_zero() {
        let f = fields(&with_ids(None, None, (0, 0)));
        assert_eq!((f[1].as_str(), f[2].as_str()), ("01000000000000000000000000000000", "0100000000000000"));
        let kept = fields(&with_ids(None, Some("4bf92f3577b34da6a3ce929d0e0e4736"), (0, 0)));
        assert_eq!(kept[1], "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn a_client_traceparent_keeps_its_trace_and_gets_a_new_parent() {
        let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let f = fields(&traceparent(Some(incoming), Some("ignored")));
        assert_eq!(f[1], "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_ne!(f[2], "00f067aa0ba902b7");
        assert_eq!(f[2].len(), 16);
        assert_eq!(f[3], "01");
    }

    #[test]
    fn a_span_context_reads_back_from_its_header() {
        let header = Traceparent::of_span(&[0xab; 16], &[0x01; 8]);
        let text = std::str::from_utf8(header.as_bytes()).expect("ascii");
        assert_eq!(text, "00-abababababababababababababababab-0101010101010101-01");
        let context = SpanContext::parse(text).expect("valid");
        assert_eq!((context.trace_id, context.span_id, context.sampled), ([0xab; 16], [0x01; 8], true));
        let unsampled = SpanContext::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").expect("valid");
        assert!(!unsampled.sampled);
        assert!(SpanContext::parse("00-00000000000000000000000000000000-00f067aa0ba902b7-01").is_none());
    }

    #[test]
    fn a_hex_trace_id_becomes_the_trace_otherwise_one_is_made() {
        let f = fields(&traceparent(None, Some("4bf92f3577b34da6a3ce929d0e0e4736")));
        assert_eq!(f[1], "4bf92f3577b34da6a3ce929d0e0e4736");
        let f = fields(&traceparent(Some("garbage"), Some("trace_123")));
        assert_eq!((f[0].as_str(), f[1].len(), f[2].len()), ("00", 32, 16));
    }

    #[test]
    fn every_byte_is_written_as_its_two_digits() {
        let bytes: Vec<u8> = (0..=255).collect();
        let mut out = vec![0u8; 512];
        write_hex(&mut out, &bytes);
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(out, expected.as_bytes());
    }
}
