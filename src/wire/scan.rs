//! The JSON every call reads, in its common shapes, read without serde: a
//! call's body (`{"$schema", "request": {"tool_id", "input": {...}}}`) and
//! an upstream's answer (`{"$schema", "result": {..., "value"}}`).
//!
//! Why by hand: serde_json's reading of these two small bodies was about a
//! quarter of a call's user-space instructions (benches/README.md, "Per-call
//! instructions, the JSON read by hand"): each field identified through a
//! visitor, each raw value found by skipping it and matched against serde's
//! private token, each number's text read more than once under
//! `arbitrary_precision`.
//!
//! This reads a strict subset of JSON and says `None` to anything outside
//! it: a string with an escape or a control character, a number that is not
//! an integer in 64 bits (in an input), a member it does not know or sees
//! twice, `null` where a value is optional, the older `output` shape,
//! nesting past [`MAX_DEPTH`], anything that is not JSON. Then serde_json
//! reads the body as before, errors included, so the gateway answers
//! exactly as it did; the tests below check that both readers agree on
//! whatever this one accepts. (The same design as the HTTP/1 head's fast
//! path, `http1.rs`.)

use smallvec::SmallVec;

use super::input::{Input, Kind};
use super::CallBody;

/// Nesting this reader follows; deeper is left to serde_json (whose own
/// limit is 128).
const MAX_DEPTH: u32 = 64;

/// Members of one input object this reader keeps as text: each is compared
/// with the ones before it, so a larger object (a hostile body of many
/// thousand keys would cost their square) is left to serde_json's map.
const MAX_MEMBERS: usize = 32;

/// A call body in the common shape, or `None` for serde_json to read.
pub(super) fn call_body(text: &str) -> Option<CallBody> {
    let mut scan = Scanner::new(text);
    let body = scan.call_body(true)?;
    scan.end()?;
    Some(body)
}

/// An input object (an MCP call's `arguments`) in the common shape, kept
/// as its text, or `None` for serde_json to read.
pub(super) fn input(text: &str) -> Option<Input> {
    let mut scan = Scanner::new(text);
    let input = scan.input()?;
    scan.end()?;
    Some(input)
}

/// The fields of an answer the gateway reads, each as its JSON text: of
/// `result` when the answer has one, else of the answer itself.
#[derive(Default)]
pub(super) struct AnswerFields<'a> {
    pub(super) value: Option<&'a str>,
    pub(super) error: Option<&'a str>,
    pub(super) success: Option<&'a str>,
    pub(super) duration: Option<&'a str>,
}

/// An answer in the common shape, or `None` for serde_json to read.
pub(super) fn answer(text: &str) -> Option<AnswerFields<'_>> {
    let mut scan = Scanner::new(text);
    let (mut result, mut bare) = (None, AnswerFields::default());
    scan.members(|scan, key| {
        let slot = match key {
            // Later duplicates win, as serde's reading has it.
            "result" => {
                let mut fields = AnswerFields::default();
                scan.members(|scan, key| scan.answer_field(&mut fields, key, 2))?;
                result = Some(fields);
                return Some(());
            }
            _ => &mut bare,
        };
        scan.answer_field(slot, key, 1)
    })?;
    scan.end()?;
    Some(result.unwrap_or(bare))
}

/// A reader of the subset: each method takes one thing at the reader's
/// place and says `None` to anything else. The MCP front reads a
/// `tools/call` envelope with it too (`mcp_endpoint/read.rs`).
pub(crate) struct Scanner<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    pub(crate) fn new(text: &'a str) -> Scanner<'a> {
        Scanner { text, at: 0 }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn skip_whitespace(&mut self) {
        while matches!(self.bytes().get(self.at), Some(b' ' | b'\n' | b'\r' | b'\t')) {
            self.at += 1;
        }
    }

    /// The next byte past any whitespace, not taken.
    fn peek(&mut self) -> Option<u8> {
        self.skip_whitespace();
        self.bytes().get(self.at).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// Nothing but whitespace is left.
    pub(crate) fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }

    /// A string without escapes or control characters, its quotes taken.
    /// (`"` and `\` never occur inside a multi-byte UTF-8 sequence, so the
    /// slice ends on a character boundary.)
    pub(crate) fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let bytes = self.bytes();
        let mut at = start;
        // Eight bytes at a time to the first `"`, `\` or control character:
        // byte by byte cost more (benches/README.md, the same section).
        while let Some(word) = bytes.get(at..at + 8) {
            let mask = special_bytes(u64::from_le_bytes(word.try_into().ok()?));
            if mask != 0 {
                at += (mask.trailing_zeros() / 8) as usize;
                break;
            }
            at += 8;
        }
        while !is_special(*bytes.get(at)?) {
            at += 1;
        }
        if bytes[at] != b'"' {
            return None;
        }
        self.at = at + 1;
        Some(&self.text[start..at])
    }

    /// An object's members, each key given to `member`, which reads the
    /// value after the colon.
    fn members(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        self.list(b'{', b'}', |scan| {
            let key = scan.string()?;
            scan.eat(b':')?;
            member(scan, key)
        })
    }

    /// An array's elements, each read by `element`.
    fn elements(&mut self, element: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.list(b'[', b']', element)
    }

    /// `open`, items read by `item` and separated by commas, `close`.
    fn list(&mut self, open: u8, close: u8, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(open)?;
        if self.eat(close).is_some() {
            return Some(());
        }
        loop {
            item(self)?;
            match self.peek()? {
                b',' => self.at += 1,
                b if b == close => {
                    self.at += 1;
                    return Some(());
                }
                _ => return None,
            }
        }
    }

    /// A call body's members at one level: `top` is the outer object, the
    /// only one that may hold `request`.
    fn call_body(&mut self, top: bool) -> Option<CallBody> {
        let mut body = CallBody::default();
        self.members(|scan, key| {
            fn once<T>(slot: &mut Option<T>, value: T) -> Option<()> {
                slot.is_none().then(|| *slot = Some(value))
            }
            match key {
                "$schema" => once(&mut body.schema, scan.string()?.to_owned()),
                "tool_id" => once(&mut body.tool_id, scan.string()?.to_owned()),
                "call_id" => once(&mut body.call_id, scan.string()?.to_owned()),
                "trace_id" => once(&mut body.trace_id, scan.string()?.to_owned()),
                "input" => once(&mut body.input, scan.input()?),
                "inputs" => once(&mut body.inputs, scan.input()?),
                "request" if top => once(&mut body.request, Box::new(scan.call_body(false)?)),
                _ => None,
            }
        })?;
        Some(body)
    }

    /// One of an answer's members: the fields read kept as their text,
    /// any other member skipped. `output` (the older shape) is serde's.
    fn answer_field(&mut self, fields: &mut AnswerFields<'a>, key: &str, depth: u32) -> Option<()> {
        let slot = match key {
            "value" => &mut fields.value,
            "error" => &mut fields.error,
            "success" => &mut fields.success,
            "duration" => &mut fields.duration,
            "output" => return None,
            _ => return self.skip(depth),
        };
        *slot = Some(self.raw(depth)?);
        Some(())
    }

    /// A value's text, from its first byte to its last.
    pub(crate) fn raw(&mut self, depth: u32) -> Option<&'a str> {
        self.skip_whitespace();
        let start = self.at;
        self.skip(depth)?;
        Some(&self.text[start..self.at])
    }

    /// Past one value, checked as JSON.
    pub(crate) fn skip(&mut self, depth: u32) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' if depth < MAX_DEPTH => self.members(|scan, _| scan.skip(depth + 1)),
            b'[' if depth < MAX_DEPTH => self.elements(|scan| scan.skip(depth + 1)),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number().map(drop),
            _ => None,
        }
    }

    fn literal(&mut self, word: &str) -> Option<()> {
        let end = self.at + word.len();
        (self.bytes().get(self.at..end)? == word.as_bytes()).then(|| self.at = end)
    }

    /// A number as JSON writes one; whether it is an integer.
    fn number(&mut self) -> Option<bool> {
        let bytes = self.bytes();
        let digits = |at: &mut usize| {
            let start = *at;
            while bytes.get(*at).is_some_and(u8::is_ascii_digit) {
                *at += 1;
            }
            (*at > start).then_some(())
        };
        let mut at = self.at;
        if bytes.get(at) == Some(&b'-') {
            at += 1;
        }
        match bytes.get(at)? {
            b'0' => at += 1,
            b'1'..=b'9' => digits(&mut at)?,
            _ => return None,
        }
        let mut integer = true;
        if bytes.get(at) == Some(&b'.') {
            at += 1;
            digits(&mut at)?;
            integer = false;
        }
        if matches!(bytes.get(at), Some(b'e' | b'E')) {
            at += 1;
            if matches!(bytes.get(at), Some(b'+' | b'-')) {
                at += 1;
            }
            digits(&mut at)?;
            integer = false;
        }
        self.at = at;
        Some(integer)
    }

    /// An input object as its text, with its members' kinds: what
    /// `Input` keeps. `depth` 1 is the input's own.
    pub(crate) fn input(&mut self) -> Option<Input> {
        self.skip_whitespace();
        let start = self.at;
        let mut kinds = SmallVec::new();
        self.distinct_members(|scan, key| {
            // The name's place in the input's text.
            let at = key.as_ptr() as usize - scan.text.as_ptr() as usize - start;
            let kind = scan.plain(2)?;
            kinds.push((u32::try_from(at).ok()?, u32::try_from(at + key.len()).ok()?, kind));
            Some(())
        })?;
        Some(Input::from_text(&self.text[start..self.at], kinds))
    }

    /// An object's members, none named twice: a reader that keeps the first
    /// of two would see another input than the gateway checked. At most
    /// [`MAX_MEMBERS`].
    pub(crate) fn distinct_members(&mut self, mut member: impl FnMut(&mut Self, &'a str) -> Option<()>) -> Option<()> {
        let mut seen: SmallVec<[&'a str; 8]> = SmallVec::new();
        self.members(|scan, key| {
            if seen.len() == MAX_MEMBERS || seen.contains(&key) {
                return None;
            }
            seen.push(key);
            member(scan, key)
        })
    }

    /// Past a value of the subset an input's text is kept in (its objects'
    /// keys distinct, its numbers [`Scanner::integer`]s); its kind.
    fn plain(&mut self, depth: u32) -> Option<Kind> {
        if depth > MAX_DEPTH {
            return None;
        }
        Some(match self.peek()? {
            b'"' => self.string().map(|_| Kind::String)?,
            b'{' => self.distinct_members(|scan, _| scan.plain(depth + 1).map(drop)).map(|()| Kind::Object)?,
            b'[' => self.elements(|scan| scan.plain(depth + 1).map(drop)).map(|()| Kind::Array)?,
            b't' => self.literal("true").map(|()| Kind::Bool)?,
            b'f' => self.literal("false").map(|()| Kind::Bool)?,
            b'n' => self.literal("null").map(|()| Kind::Null)?,
            _ => self.integer().map(|()| Kind::Integer)?,
        })
    }

    /// An integer that fits 64 bits, which serde_json keeps as written and
    /// reads as one (`is_i64` or `is_u64`): no fraction or exponent
    /// (serde_json rewrites an exponent's spelling), and not `-0`, left to
    /// serde_json with the other rare spellings.
    fn integer(&mut self) -> Option<()> {
        let start = self.at;
        if !self.number()? {
            return None;
        }
        let text = &self.text[start..self.at];
        match text.strip_prefix('-') {
            Some("0") => None,
            // 18 digits always fit: only longer ones need reading.
            Some(digits) if digits.len() <= 18 => Some(()),
            None if text.len() <= 18 => Some(()),
            Some(_) => text.parse::<i64>().ok().map(drop),
            None => text.parse::<u64>().ok().map(drop),
        }
    }
}

/// `"`, `\` or a control character: where a plain string ends, and the
/// bytes a JSON string must escape (`write.rs`).
pub(super) fn is_special(b: u8) -> bool {
    b == b'"' || b == b'\\' || b < 0x20
}

/// The high bit of each byte of `word` (little-endian) that
/// [`is_special`], exact up to the first such byte (a borrow runs only
/// upwards, from a flagged byte), which is all [`Scanner::string`] reads;
/// nonzero exactly when some byte is.
pub(super) fn special_bytes(word: u64) -> u64 {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_le_bytes([0x80; 8]);
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGHS;
    below_space | zero(word ^ (ONES * u64::from(b'"'))) | zero(word ^ (ONES * u64::from(b'\\')))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::wire::{self, normalise_tool_response, ResponseShapeError, UpstreamResult};

    /// What serde_json reads a call body as, for comparing.
    fn by_serde(text: &str) -> Option<String> {
        serde_json::from_str::<CallBody>(text).ok().map(|b| format!("{b:?}"))
    }

    /// Whatever this reads, serde reads alike: the same fields, the same
    /// input (its `Value` is serde's reading of the text kept), the same
    /// kinds of its members, and no key twice in any of its objects.
    fn agrees_on_call(text: &str) -> bool {
        let Some(body) = call_body(text) else { return true };
        if by_serde(text) != Some(format!("{body:?}")) {
            return false;
        }
        let input = |mut body: CallBody| {
            let call = body.request.take().map_or(body, |inner| *inner);
            call.input.or(call.inputs)
        };
        let sorted_kinds = |input: &Input| {
            let mut kinds: Vec<(String, Kind)> =
                input.members().expect("an object").map(|(k, kind)| (k.to_owned(), kind)).collect();
            kinds.sort_by(|a, b| a.0.cmp(&b.0));
            kinds
        };
        let serde_body = serde_json::from_str::<CallBody>(text).expect("read by serde");
        match (input(body), input(serde_body)) {
            (Some(kept), Some(built)) => {
                let mut written = Vec::new();
                kept.write(&mut written);
                sorted_kinds(&kept) == sorted_kinds(&built) && serde_json::from_slice::<Distinct>(&written).is_ok()
            }
            (kept, built) => kept.is_none() && built.is_none(),
        }
    }

    /// JSON whose objects name no key twice, at any depth: read by serde
    /// without `Value` (whose map keeps the last of two), as an oracle
    /// apart from the reader under test.
    struct Distinct;

    impl<'de> serde::Deserialize<'de> for Distinct {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Distinct, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Distinct;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("JSON")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Distinct, A::Error> {
                    let mut seen = std::collections::HashSet::new();
                    while let Some(key) = map.next_key::<String>()? {
                        if !seen.insert(key) {
                            return Err(serde::de::Error::custom("a key twice"));
                        }
                        map.next_value::<Distinct>()?;
                    }
                    Ok(Distinct)
                }
                fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Distinct, A::Error> {
                    while seq.next_element::<Distinct>()?.is_some() {}
                    Ok(Distinct)
                }
                fn visit_bool<E>(self, _: bool) -> Result<Distinct, E> {
                    Ok(Distinct)
                }
                fn visit_str<E>(self, _: &str) -> Result<Distinct, E> {
                    Ok(Distinct)
                }
                fn visit_unit<E>(self) -> Result<Distinct, E> {
                    Ok(Distinct)
                }
                fn visit_u64<E>(self, _: u64) -> Result<Distinct, E> {
                    Ok(Distinct)
                }
                fn visit_i64<E>(self, _: i64) -> Result<Distinct, E> {
                    Ok(Distinct)
                }
            }
            deserializer.deserialize_any(Visit)
        }
    }

    #[test]
    fn common_call_bodies_are_read_as_serde_reads_them() {
        for text in [
            r#"{"$schema":"otc://1.0","request":{"tool_id":"Bench.Add@1.0.0","input":{"a":10,"b":5}}}"#,
            r#" { "tool_id" : "Calc.Add" , "call_id":"c-1", "trace_id":"t", "inputs": {"x": [1, -2, true, null, "é"]} } "#,
            r#"{"request":{"tool_id":"T.N","input":{"deep":{"a":{"b":[[],{}]}},"n":18446744073709551615,"m":-9223372036854775808}}}"#,
            r#"{}"#,
        ] {
            assert!(call_body(text).is_some(), "{text}");
            assert!(agrees_on_call(text), "{text}");
        }
    }

    #[test]
    fn anything_unusual_in_a_call_is_left_to_serde() {
        for text in [
            r#"{"tool_id":"T.N","tool_id":"T.M"}"#,
            r#"{"tool_\u0069d":"T.N"}"#,
            r#"{"tool_id":"T.\"N"}"#,
            r#"{"tool_id":null}"#,
            r#"{"tool_id":"T.N","context":{}}"#,
            r#"{"tool_id":"T.N","other":1}"#,
            r#"{"request":{"request":{}}}"#,
            r#"{"tool_id":"T.N","input":{"a":1,"a":2}}"#,
            r#"{"tool_id":"T.N","input":{"a":{"k":1,"k":1}}}"#,
            r#"{"tool_id":"T.N","input":{"a":[{},{"k":1,"k":2}]}}"#,
            r#"{"tool_id":"T.N","input":{"a":1.5}}"#,
            r#"{"tool_id":"T.N","input":{"a":-0}}"#,
            r#"{"tool_id":"T.N","input":{"a":18446744073709551616}}"#,
            r#"{"tool_id":"T.N","input":{"a":01}}"#,
            r#"{"tool_id":"T.N"} x"#,
            r#"{"tool_id":"T.N",}"#,
            r#"{"tool_id":"T.N","input":{"a":[1,]}}"#,
            r#"{"tool_id":"T.N","input":{"a":[1 2]}}"#,
            "{\"tool_id\":\"T.N\",\"input\":{\"a\":\"\u{1}\"}}",
            r#"{"tool_id":"T"#,
            "[]",
        ] {
            assert!(call_body(text).is_none(), "{text}");
        }
        let deep = format!(r#"{{"input":{{"a":{}1{}}}}}"#, "[".repeat(70), "]".repeat(70));
        assert!(call_body(&deep).is_none());
        // Many members, at the top or nested: serde_json's map, not a
        // comparison of each with all before it.
        let members = |n: usize| (0..n).map(|i| format!(r#""k{i}":{i}"#)).collect::<Vec<_>>().join(",");
        assert!(call_body(&format!(r#"{{"input":{{{}}}}}"#, members(MAX_MEMBERS))).is_some());
        assert!(call_body(&format!(r#"{{"input":{{{}}}}}"#, members(MAX_MEMBERS + 1))).is_none());
        assert!(call_body(&format!(r#"{{"input":{{"a":{{{}}}}}}}"#, members(MAX_MEMBERS + 1))).is_none());
    }

    /// An answer as read, its value as spelt (`RawJson`'s equality also
    /// takes the same value spelt otherwise).
    fn spelled(
        text: &str,
        read: fn(&[u8]) -> Result<UpstreamResult, ResponseShapeError>,
    ) -> Result<(UpstreamResult, Option<String>), ResponseShapeError> {
        read(text.as_bytes()).map(|r| {
            let spelling = r.value.as_ref().map(|v| v.get().to_owned());
            (r, spelling)
        })
    }

    #[test]
    fn common_answers_are_read_as_serde_reads_them() {
        for text in [
            r#"{"$schema":"otc://1.0","result":{"call_id":"bench","duration":0.05,"success":true,"value":15}}"#,
            r#"{"success":false,"error":{"message":"no","kind":["a",{"b":null}]}}"#,
            r#"{"value":"x","result":{"value":[1.5e3,-0,"é"],"result":7}}"#,
            r#" {"value" : { "k" : 1e-7 } , "duration": 1e400 } "#,
            r#"{"success":"yes"}"#,
        ] {
            let fields = answer(text);
            assert!(fields.is_some(), "{text}");
            assert_eq!(spelled(text, normalise_tool_response), spelled(text, wire::normalise_by_serde), "{text}");
        }
        for text in [
            r#"{"output":{"value":1}}"#,
            r#"{"value":"\\"}"#,
            r#"{"value":1,}"#,
            r#"{"value":[1,]}"#,
            r#"{"value":{"a":1,}}"#,
            r#"{"value":1e}"#,
            "[1]",
            r#"{"value":tru}"#,
        ] {
            assert!(answer(text).is_none(), "{text}");
        }
    }

    /// JSON-ish text: the pieces the readers meet, joined at random (most
    /// of it not JSON at all, which is the point).
    fn jsonish() -> impl Strategy<Value = String> {
        let piece = prop::sample::select(vec![
            "{",
            "}",
            "[",
            "]",
            ",",
            ":",
            " ",
            "\"",
            "\\",
            "\"a\"",
            "\"tool_id\"",
            "\"request\"",
            "\"input\"",
            "\"inputs\"",
            "\"$schema\"",
            "\"call_id\"",
            "\"result\"",
            "\"value\"",
            "\"error\"",
            "\"success\"",
            "\"duration\"",
            "\"output\"",
            "\"T.N\"",
            "0",
            "-0",
            "12",
            "-7",
            "1.5",
            "1e3",
            "99999999999999999999",
            "true",
            "false",
            "null",
            "é",
            "\u{1}",
        ]);
        prop::collection::vec(piece, 0..40).prop_map(|pieces| pieces.concat())
    }

    /// Bodies of the shapes themselves, with values drawn at random.
    fn call_shaped() -> impl Strategy<Value = String> {
        let value = prop::sample::select(vec![
            "1",
            "-1",
            "0",
            "-0",
            "2.5",
            "1e2",
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775809",
            "\"s\"",
            "\"\\n\"",
            "true",
            "null",
            "[]",
            "[1,[2]]",
            "{}",
            "{\"k\":{\"j\":null}}",
            "{\"k\":1,\"k\":2}",
            "[{\"j\":[],\"j\":0}]",
        ]);
        (prop::collection::vec((prop::sample::select(vec!["a", "b", "c"]), value), 0..5), any::<bool>()).prop_map(
            |(members, wrapped)| {
                let input: Vec<String> = members.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
                let request = format!(r#"{{"tool_id":"T.N","input":{{{}}}}}"#, input.join(","));
                if wrapped {
                    format!(r#"{{"$schema":"otc://1.0","request":{request}}}"#)
                } else {
                    request
                }
            },
        )
    }

    /// Answers of the common shapes, with members drawn at random.
    fn answer_shaped() -> impl Strategy<Value = String> {
        let member = prop::sample::select(vec![
            "\"value\":15",
            "\"value\":null",
            "\"value\":{\"a\":[1,\"é\"]}",
            "\"value\":\"\\u0041\"",
            "\"success\":true",
            "\"success\":false",
            "\"success\":1",
            "\"error\":null",
            "\"error\":{\"message\":\"m\"}",
            "\"duration\":0.05",
            "\"duration\":\"1\"",
            "\"call_id\":\"c\"",
            "\"$schema\":\"otc://1.0\"",
            "\"result\":{\"value\":2}",
            "\"result\":{}",
            "\"output\":{\"value\":3}",
        ]);
        (prop::collection::vec(member.clone(), 0..4), prop::collection::vec(member, 0..4), any::<bool>()).prop_map(
            |(outer, inner, wrapped)| {
                let mut outer = outer.join(",");
                if wrapped {
                    outer =
                        format!("{outer}{}\"result\":{{{}}}", if outer.is_empty() { "" } else { "," }, inner.join(","));
                }
                format!("{{{outer}}}")
            },
        )
    }

    proptest! {
        /// The word-at-a-time search stops where a byte-by-byte one does.
        #[test]
        fn a_string_ends_where_a_byte_scan_ends(bytes in prop::collection::vec(prop_oneof![
            8 => 0x20u8..0x7f,
            1 => any::<u8>(),
            1 => Just(b'"'),
            1 => Just(b'\\'),
        ], 0..40)) {
            let first = bytes.iter().position(|&b| is_special(b));
            let words = bytes.chunks_exact(8).enumerate().find_map(|(n, word)| {
                let mask = special_bytes(u64::from_le_bytes(word.try_into().expect("eight")));
                (mask != 0).then(|| n * 8 + (mask.trailing_zeros() / 8) as usize)
            });
            let whole_words = bytes.len() / 8 * 8;
            prop_assert_eq!(words, first.filter(|&i| i < whole_words));
        }

        #[test]
        fn any_call_body_this_reads_is_read_as_serde_reads_it(text in prop_oneof![jsonish(), call_shaped()]) {
            prop_assert!(agrees_on_call(&text), "{}", text);
        }

        #[test]
        fn any_answer_this_reads_is_read_as_serde_reads_it(text in prop_oneof![jsonish(), answer_shaped()]) {
            if answer(&text).is_some() {
                prop_assert_eq!(spelled(&text, normalise_tool_response), spelled(&text, wire::normalise_by_serde));
            }
        }
    }
}
