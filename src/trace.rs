//! W3C Trace Context: the `traceparent` header sent with every call upstream.
//!
//! A client's `traceparent` keeps its trace id and gets the gateway's span as
//! the new parent; without one, a client `trace_id` of 32 hex digits becomes
//! the trace id, else a random one is made.

use http::HeaderValue;

/// The `traceparent` for an upstream call.
pub fn traceparent(incoming: Option<&str>, trace_id: Option<&str>) -> HeaderValue {
    let (trace, flags) = match incoming.and_then(parse) {
        Some((trace, flags)) => (trace.to_owned(), flags.to_owned()),
        None => {
            let trace = trace_id
                .filter(|t| t.len() == 32 && is_lower_hex(t) && !is_zero(t))
                .map_or_else(|| random_hex(16), str::to_owned);
            (trace, "01".to_owned())
        }
    };
    let value = format!("00-{trace}-{}-{flags}", random_hex(8));
    // Only hex digits and dashes: always a valid header value.
    HeaderValue::try_from(value).unwrap_or_else(|_| HeaderValue::from_static("00-00000000000000000000000000000001-0000000000000001-01"))
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

fn random_hex(bytes: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let id = uuid::Uuid::new_v4();
    let mut out = String::with_capacity(bytes * 2);
    for b in id.as_bytes().iter().take(bytes) {
        out.push(HEX[usize::from(b >> 4)] as char);
        out.push(HEX[usize::from(b & 0xf)] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(v: &HeaderValue) -> Vec<String> {
        v.to_str().expect("ascii").split('-').map(str::to_owned).collect()
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
    fn a_hex_trace_id_becomes_the_trace_otherwise_one_is_made() {
        let f = fields(&traceparent(None, Some("4bf92f3577b34da6a3ce929d0e0e4736")));
        assert_eq!(f[1], "4bf92f3577b34da6a3ce929d0e0e4736");
        let f = fields(&traceparent(Some("garbage"), Some("trace_123")));
        assert_eq!((f[0].as_str(), f[1].len(), f[2].len()), ("00", 32, 16));
    }
}
