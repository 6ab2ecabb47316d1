//! Reading a `text/event-stream` body (the WHATWG event stream format), as
//! an MCP server may answer a POST.
//!
//! The parser is fed chunks as they arrive and hands back whole events, so
//! a response can be acted on before the server closes the stream. Events
//! without data (MCP servers send one first to "prime" reconnection) are
//! never handed back.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The `event:` field; `None` means the default type, `message`.
    pub event: Option<String>,
    /// The `data:` lines joined with newlines.
    pub data: String,
    /// The last `id:` seen on the stream so far.
    pub id: Option<String>,
}

/// An incremental event stream parser.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a line not yet ended.
    pending: Vec<u8>,
    /// How much of `pending` is known to hold no line end: a long line
    /// arriving in many chunks is scanned once, not again at every chunk.
    scanned: usize,
    data: String,
    has_data: bool,
    event: Option<String>,
    last_id: Option<String>,
}

impl SseParser {
    /// A parser at the start of a stream.
    pub fn new() -> SseParser {
        SseParser::default()
    }

    /// Feeds a chunk; returns the events it completed, in order.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<Event> {
        self.pending.extend_from_slice(chunk);
        let mut events = Vec::new();
        let mut start = 0;
        let mut i = self.scanned;
        while i < self.pending.len() {
            let end = match self.pending[i] {
                b'\n' => i + 1,
                // A CR at the very end may be the first half of a CRLF split
                // across chunks: wait for the next byte.
                b'\r' if i + 1 == self.pending.len() => break,
                b'\r' if self.pending[i + 1] == b'\n' => i + 2,
                b'\r' => i + 1,
                _ => {
                    i += 1;
                    continue;
                }
            };
            let line = String::from_utf8_lossy(&self.pending[start..i]).into_owned();
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
            start = end;
            i = end;
        }
        self.pending.drain(..start);
        // Up to a trailing CR (which waits for a possible LF) nothing left
        // ends a line.
        self.scanned = self.pending.len() - usize::from(self.pending.last() == Some(&b'\r'));
        events
    }

    /// Bytes held for the event not yet complete (its data so far and the
    /// line not yet ended): what a long-lived stream bounds.
    pub fn buffered(&self) -> usize {
        self.pending.len() + self.data.len()
    }

    fn line(&mut self, line: &str) -> Option<Event> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
                self.has_data = true;
            }
            "event" => self.event = Some(value.to_owned()),
            "id" if !value.contains('\0') => self.last_id = Some(value.to_owned()),
            // `retry` only matters to a client that reconnects; others are ignored.
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<Event> {
        let event = self.event.take();
        if !self.has_data {
            self.data.clear();
            return None;
        }
        self.has_data = false;
        let mut data = std::mem::take(&mut self.data);
        if data.ends_with('\n') {
            data.pop();
        }
        if data.is_empty() {
            // A priming event: an id and an empty data field.
            return None;
        }
        Some(Event { event, data, id: self.last_id.clone() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_and_line_endings() {
        let mut p = SseParser::new();
        assert!(p.push(b"id: 0\ndata:\n\n").is_empty(), "the priming event is skipped");
        assert!(p.push(b": a comment\r\nevent: message\r\ndata: {\"a\":").is_empty());
        assert!(p.push(b"1}\r").is_empty());
        let events = p.push(b"\n\r\n");
        assert_eq!(
            events,
            vec![Event { event: Some("message".into()), data: "{\"a\":1}".into(), id: Some("0".into()) }]
        );
        let events = p.push(b"data: one\ndata: two\n\ndata:x\r\r\n");
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].data, "one\ntwo");
        assert_eq!(events[0].event, None);
        assert_eq!(events[1].data, "x");
    }

    #[test]
    fn a_long_line_in_many_chunks_is_scanned_once() {
        let mut p = SseParser::new();
        assert!(p.push(b"data: ").is_empty());
        let chunk = [b'x'; 1000];
        for n in 1..=300 {
            assert!(p.push(&chunk).is_empty());
            assert_eq!(p.scanned, 6 + n * 1000, "only the new bytes are scanned");
        }
        let events = p.push(b"\r");
        assert!(events.is_empty(), "a CR may be half of a CRLF");
        assert!(p.buffered() > 300_000);
        let events = p.push(b"\n\n");
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.len(), 300_000);
        assert_eq!(p.scanned, 0);
        assert_eq!(p.buffered(), 0);
    }

    #[test]
    fn an_unfinished_event_is_not_dispatched() {
        let mut p = SseParser::new();
        assert!(p.push(b"data: half").is_empty());
        assert!(p.push(b"\n").is_empty());
    }

    mod properties {
        use proptest::prelude::*;

        use super::*;

        /// An event as a server would write it.
        #[derive(Debug, Clone)]
        struct Written {
            event: Option<String>,
            data: Vec<String>,
            id: Option<String>,
            comment: bool,
        }

        fn written() -> impl Strategy<Value = Written> {
            (
                prop::option::of("[a-z]{1,8}"),
                prop::collection::vec("[a-zA-Z0-9 {}\":,éß→]{0,12}", 0..4),
                prop::option::of("[a-z0-9]{0,6}"),
                any::<bool>(),
            )
                .prop_map(|(event, data, id, comment)| Written { event, data, id, comment })
        }

        /// Writes the events with one line ending, a final comment line
        /// ending the stream (a CR at the very end waits for a possible LF).
        fn stream(events: &[Written], ending: &str) -> Vec<u8> {
            let mut out = String::new();
            for written in events {
                if written.comment {
                    out.push_str(": keep-alive");
                    out.push_str(ending);
                    out.push_str("retry: 10");
                    out.push_str(ending);
                }
                if let Some(id) = &written.id {
                    out.push_str(&format!("id: {id}{ending}"));
                }
                if let Some(event) = &written.event {
                    out.push_str(&format!("event: {event}{ending}"));
                }
                for line in &written.data {
                    out.push_str(&format!("data: {line}{ending}"));
                }
                out.push_str(ending);
            }
            out.push_str(":\n");
            out.into_bytes()
        }

        /// The events a reader must hand back: those with data, each with the
        /// last id seen so far.
        fn expected(events: &[Written]) -> Vec<Event> {
            let mut last_id = None;
            let mut out = Vec::new();
            for written in events {
                if written.id.is_some() {
                    last_id.clone_from(&written.id);
                }
                let data = written.data.join("\n");
                if !written.data.is_empty() && !data.is_empty() {
                    out.push(Event { event: written.event.clone(), data, id: last_id.clone() });
                }
            }
            out
        }

        fn parse_in_pieces(bytes: &[u8], sizes: &[usize]) -> Vec<Event> {
            let mut parser = SseParser::new();
            let mut events = Vec::new();
            let mut rest = bytes;
            for &size in sizes.iter().cycle() {
                if rest.is_empty() {
                    break;
                }
                let (piece, tail) = rest.split_at(size.clamp(1, rest.len()));
                events.extend(parser.push(piece));
                rest = tail;
            }
            events
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

            /// Written events come back as written, whatever the line endings
            /// and however the bytes are split (inside a CRLF or a UTF-8
            /// character included).
            #[test]
            fn written_events_are_read_back_in_any_pieces(
                events in prop::collection::vec(written(), 0..6),
                ending in prop::sample::select(vec!["\n", "\r\n", "\r"]),
                sizes in prop::collection::vec(1usize..40, 1..8),
            ) {
                let bytes = stream(&events, ending);
                prop_assert_eq!(parse_in_pieces(&bytes, &sizes), expected(&events));
            }

            /// Any bytes give the same events however they are split, and
            /// nothing is held once the stream's lines have all ended.
            #[test]
            fn any_bytes_give_the_same_events_in_any_pieces(
                bytes in prop::collection::vec(prop::sample::select(b"data: x\r\n:ide\xC3\xA9vt".to_vec()), 0..200),
                sizes in prop::collection::vec(1usize..40, 1..8),
            ) {
                let whole = parse_in_pieces(&bytes, &[bytes.len().max(1)]);
                prop_assert_eq!(parse_in_pieces(&bytes, &sizes), whole);
                let mut parser = SseParser::new();
                parser.push(&bytes);
                parser.push(b"\n\n");
                prop_assert_eq!(parser.buffered(), 0);
            }
        }
    }
}
