//! Injected values a tool sends back: a tool server that echoes the secret
//! or the user token it was given (in its value, its error, an error body,
//! any text of its that the gateway passes on) must not hand it to the
//! caller, who was never meant to hold it.
//!
//! A copy is found in every spelling one layer of JSON or URL encoding gives
//! it, each of its characters spelled its own way: as itself, as a JSON
//! escape (`\/`, `\"`, `\\`, `\n`..., `\uXXXX` in either case, a surrogate
//! pair beyond the BMP), as its UTF-8 bytes percent-encoded (either case),
//! or `+` for a space. JSON is read first and its strings, object keys and
//! numbers searched, so `SECRET-api\/7f3a` in a body and `SECRET-api%2F7f3a`
//! in a string are both found, and so is text that holds JSON (an MCP tool's
//! error content). Text cut to a length is scrubbed whole first
//! ([`excerpt`]): a copy straddling the cut leaves no prefix.
//!
//! Not found: a copy encoded twice over, hashed, split, reversed, partial,
//! or in another encoding (base64, HTML entities); a value shorter than
//! [`MIN_SCRUBBED_LEN`] (replacing every "42" in an answer would break it
//! for no protection). docs/security.md says so.

use std::ops::Range;

use serde_json::{Map, Value};
use smallvec::SmallVec;

use crate::wire::RawJson;

/// What replaces an echoed value.
pub const REDACTED: &str = "[redacted]";

/// Injected values shorter than this are not looked for.
pub const MIN_SCRUBBED_LEN: usize = 6;

/// The longest spelling of one character: a surrogate pair, or four
/// percent-encoded bytes (12 bytes); partial copies are kept this far ahead.
const WINDOW: usize = 16;

/// Whether a value is long enough to be looked for.
fn looked_for(secret: &&str) -> bool {
    secret.len() >= MIN_SCRUBBED_LEN
}

/// Replaces every copy of the `secrets` in `value`.
pub fn value(value: &mut Value, secrets: &[&str]) {
    if secrets.iter().any(looked_for) {
        walk(value, secrets);
    }
}

/// Replaces every copy of the `secrets` in a value kept as JSON text: read,
/// scrubbed and written again only when it held one.
pub fn raw_json(raw: &mut RawJson, secrets: &[&str]) {
    if !secrets.iter().any(looked_for) {
        return;
    }
    // Without a JSON escape, the text's strings are as they are written in
    // it: a search of the text finds every copy they hold (and perhaps one
    // across two strings, which reading it then rules out). Most answers
    // hold no escape and no copy; any other is read, and its strings
    // searched.
    let text = raw.get();
    if memchr::memchr(b'\\', text.as_bytes()).is_none() && copies(text, secrets).is_empty() {
        return;
    }
    let Ok(mut parsed) = serde_json::from_str::<Value>(text) else { return };
    if walk(&mut parsed, secrets) {
        *raw = RawJson::from_value(&parsed);
    }
}

/// Replaces every copy of the `secrets` in `text`; whether there was one.
pub fn text(text: &mut String, secrets: &[&str]) -> bool {
    let found = copies(text, secrets);
    if found.is_empty() {
        return false;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for copy in found {
        out.push_str(&text[at..copy.start]);
        out.push_str(REDACTED);
        at = copy.end;
    }
    out.push_str(&text[at..]);
    *text = out;
    true
}

/// An upstream's text as the gateway passes it on: scrubbed whole, then cut
/// to `max_chars` characters (`…` marks the cut), control characters but
/// line breaks as spaces. Every place that cuts upstream text goes through
/// here, so none cuts before it scrubs.
pub fn excerpt(body: &[u8], secrets: &[&str], max_chars: usize) -> String {
    let mut whole = String::from_utf8_lossy(body).into_owned();
    text(&mut whole, secrets);
    let mut chars = whole.chars();
    let mut out: String =
        chars.by_ref().take(max_chars).map(|c| if c.is_control() && c != '\n' { ' ' } else { c }).collect();
    if chars.next().is_some() {
        out.push('…');
    }
    out
}

/// The credential of an `Authorization` value (`Bearer t`: `t`; `Basic b`:
/// the base64, which is as good as the password), to look for in what the
/// server it was sent to answers.
pub fn credential(authorization: &str) -> &str {
    authorization.split_once(' ').map_or(authorization, |(_, credential)| credential.trim())
}

/// Scrubs in place; whether anything was replaced.
fn walk(value: &mut Value, secrets: &[&str]) -> bool {
    match value {
        Value::String(s) => text(s, secrets),
        Value::Number(n) => {
            let found = !copies(&n.to_string(), secrets).is_empty();
            if found {
                *value = Value::String(REDACTED.to_owned());
            }
            found
        }
        Value::Array(items) => items.iter_mut().fold(false, |any, item| walk(item, secrets) | any),
        Value::Object(map) => {
            let mut any = false;
            if map.keys().any(|k| !copies(k, secrets).is_empty()) {
                let old = std::mem::take(map);
                *map = old
                    .into_iter()
                    .map(|(mut k, v)| {
                        text(&mut k, secrets);
                        (k, v)
                    })
                    .collect::<Map<String, Value>>();
                any = true;
            }
            map.values_mut().fold(any, |any, item| walk(item, secrets) | any)
        }
        Value::Null | Value::Bool(_) => false,
    }
}

/// Where copies of the secrets are in `text`: byte ranges, in order, those
/// that overlap merged.
fn copies(text: &str, secrets: &[&str]) -> Vec<Range<usize>> {
    let mut found = Vec::new();
    let escapes = memchr::memchr2(b'\\', b'%', text.as_bytes()).is_some();
    let pluses = !escapes && memchr::memchr(b'+', text.as_bytes()).is_some();
    for secret in secrets.iter().copied().filter(looked_for) {
        if escapes || (pluses && secret.contains(' ')) {
            find_spelled(text, secret, &mut found);
        } else {
            find_verbatim(text, secret, &mut found);
        }
    }
    if found.len() < 2 {
        return found;
    }
    found.sort_unstable_by_key(|r| (r.start, r.end));
    let mut merged: Vec<Range<usize>> = Vec::with_capacity(found.len());
    for copy in found {
        match merged.last_mut() {
            Some(last) if copy.start < last.end => last.end = last.end.max(copy.end),
            _ => merged.push(copy),
        }
    }
    merged
}

/// Every verbatim copy, overlapping ones too (`abcabc` twice in
/// `abcabcabc` is one stretch to replace, not a copy and a tail).
fn find_verbatim(text: &str, secret: &str, found: &mut Vec<Range<usize>>) {
    // Most texts hold no copy: `contains` says so fastest (`find` builds a
    // searcher first; a third of the scrub's time on a plain answer).
    if !text.contains(secret) {
        return;
    }
    let step = secret.chars().next().map_or(1, char::len_utf8);
    let mut from = 0;
    while let Some(at) = text[from..].find(secret) {
        let start = from + at;
        found.push(start..start + secret.len());
        from = start + step;
    }
}

/// Every copy in any spelling. The text is read once, left to right, with
/// the partial copies alive at each position (how much of the secret they
/// matched, where they started), at most one per length matched (the
/// earliest), so the work is bounded by the text's length times the
/// secret's, whatever the input. A copy that starts with the secret's own
/// first character is followed by a plain comparison up to the first byte
/// that may start an escape, and a position where nothing is alive and no
/// copy can start is skipped by `memchr`: most texts cost little more than
/// a verbatim search.
fn find_spelled(text: &str, secret: &str, found: &mut Vec<Range<usize>>) {
    let bytes = text.as_bytes();
    let Some(first) = secret.chars().next() else { return };
    let mut first_byte = [0; 4];
    let first_byte = first.encode_utf8(&mut first_byte).as_bytes()[0];
    let plus_is_space = secret.contains(' ');
    let escapes = |b: u8| b == b'\\' || b == b'%' || (b == b'+' && plus_is_space);
    let mut pending: Pending = Default::default();
    let mut alive = 0usize;
    let mut p = 0;
    while p < bytes.len() {
        if alive == 0 {
            let next = if first == ' ' {
                bytes[p..].iter().position(|&b| b == first_byte || escapes(b))
            } else {
                memchr::memchr3(first_byte, b'\\', b'%', &bytes[p..])
            };
            match next {
                Some(skip) => p += skip,
                None => return,
            }
        }
        let boundary = text.is_char_boundary(p);
        // The secret's first character as itself: compared plainly as far
        // as the text has no escape, then left to the partial copies.
        if boundary && bytes[p] == first_byte && !escapes(first_byte) {
            let same = bytes[p..].iter().zip(secret.as_bytes()).take_while(|(a, b)| a == b && !escapes(**a)).count();
            let run = (0..=same).rev().find(|&n| secret.is_char_boundary(n)).unwrap_or(0);
            if run == secret.len() {
                found.push(p..p + run);
            } else if run > 0 && bytes.get(p + run).is_some_and(|&b| escapes(b)) {
                alive += usize::from(carry(&mut pending, p + run, run, p));
            }
        }
        let slot = p % WINDOW;
        let start_here = boundary && escapes(bytes[p]);
        if start_here || !pending[slot].is_empty() {
            let spellings = spellings(text, p);
            // A copy may start here with an escape, and those alive go on.
            let carried = pending[slot].len();
            for i in (0..carried).map(Some).chain(start_here.then_some(None)) {
                let (matched, start) = i.map_or((0, p), |i| pending[slot][i]);
                let Some(want) = secret[matched..].chars().next() else { continue };
                for &(c, len) in spellings.iter().flatten().filter(|(c, _)| *c == want) {
                    let matched = matched + c.len_utf8();
                    if matched == secret.len() {
                        found.push(start..p + len);
                    } else {
                        alive += usize::from(carry(&mut pending, p + len, matched, start));
                    }
                }
            }
            alive -= carried;
            pending[slot].clear();
        }
        p += 1;
    }
}

/// The partial copies that go on at each of the next positions (a ring of
/// [`WINDOW`]), each as how much of the secret it matched and where it
/// started; kept inline, as most positions hold one or none.
type Pending = [SmallVec<[(usize, usize); 4]>; WINDOW];

/// Keeps a partial copy going on at byte `at`: the earliest start for each
/// length matched. Whether it is a new one.
fn carry(pending: &mut Pending, at: usize, matched: usize, start: usize) -> bool {
    let next = &mut pending[at % WINDOW];
    match next.iter_mut().find(|(m, _)| *m == matched) {
        Some(kept) => {
            kept.1 = kept.1.min(start);
            false
        }
        None => {
            next.push((matched, start));
            true
        }
    }
}

/// The characters a spelling starting at byte `p` stands for, with its
/// length: the character itself, and what an escape there decodes to. An
/// array rather than a vector: this is the scan's inner loop.
#[inline]
fn spellings(text: &str, p: usize) -> [Option<(char, usize)>; 2] {
    let Some(c) = text.get(p..).and_then(|rest| rest.chars().next()) else { return [None, None] };
    let bytes = text.as_bytes();
    let escaped = match c {
        '\\' => json_escape(bytes, p),
        '%' => percent_escape(bytes, p),
        '+' => Some((' ', 1)),
        _ => None,
    };
    [Some((c, c.len_utf8())), escaped]
}

/// A JSON escape at `p` (which holds `\`): the character and its length.
fn json_escape(bytes: &[u8], p: usize) -> Option<(char, usize)> {
    let c = match *bytes.get(p + 1)? {
        b'"' => '"',
        b'\\' => '\\',
        b'/' => '/',
        b'b' => '\u{8}',
        b'f' => '\u{c}',
        b'n' => '\n',
        b'r' => '\r',
        b't' => '\t',
        b'u' => {
            let unit = hex(bytes, p + 2, 4)?;
            if !(0xD800..0xE000).contains(&unit) {
                return Some((char::from_u32(unit)?, 6));
            }
            // A surrogate pair spells one character beyond the BMP.
            let low = (bytes.get(p + 6..p + 8)? == b"\\u").then(|| hex(bytes, p + 8, 4)).flatten()?;
            if unit >= 0xDC00 || !(0xDC00..0xE000).contains(&low) {
                return None;
            }
            return Some((char::from_u32(0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00))?, 12));
        }
        _ => return None,
    };
    Some((c, 2))
}

/// A character percent-encoded at `p` (which holds `%`), each of its UTF-8
/// bytes as `%XX`: the character and its length.
fn percent_escape(bytes: &[u8], p: usize) -> Option<(char, usize)> {
    let lead = u8::try_from(hex(bytes, p + 1, 2)?).ok()?;
    let n = match lead {
        0x00..=0x7F => 1,
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => return None,
    };
    let mut utf8 = [lead, 0, 0, 0];
    for (i, byte) in utf8.iter_mut().enumerate().take(n).skip(1) {
        let at = p + 3 * i;
        if bytes.get(at) != Some(&b'%') {
            return None;
        }
        *byte = u8::try_from(hex(bytes, at + 1, 2)?).ok()?;
    }
    let c = std::str::from_utf8(&utf8[..n]).ok()?.chars().next()?;
    Some((c, 3 * n))
}

/// `digits` hex digits at `at`, either case.
fn hex(bytes: &[u8], at: usize, digits: usize) -> Option<u32> {
    bytes.get(at..at + digits)?.iter().try_fold(0u32, |n, &b| Some(n * 16 + char::from(b).to_digit(16)?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const SECRET: &str = "SECRET-api/7f3a";

    fn scrubbed(text: &str, secrets: &[&str]) -> String {
        let mut text = text.to_owned();
        super::text(&mut text, secrets);
        text
    }

    #[test]
    fn echoes_are_replaced_wherever_they_are() {
        let secret = "sk-live-0123456789";
        let mut v = json!({
            "echo": secret,
            "inside": format!("key={secret}; again {secret}"),
            "list": [1, {"deep": secret}],
            secret: "as a key",
            "fine": "nothing here",
        });
        value(&mut v, &[secret]);
        let text = v.to_string();
        assert!(!text.contains(secret), "{text}");
        assert_eq!(v["inside"], "key=[redacted]; again [redacted]");
        assert_eq!(v["fine"], "nothing here");
        assert_eq!(v["[redacted]"], "as a key");
    }

    #[test]
    fn every_one_layer_spelling_is_found() {
        for spelled in [
            r"SECRET-api\/7f3a",
            "SECRET-api%2F7f3a",
            "SECRET-api%2f7f3a",
            r"\u0053ECRET-api\u002F7f3a",
            r"\u0053\u0045\u0043\u0052\u0045\u0054\u002d\u0061\u0070\u0069\u002f\u0037\u0066\u0033\u0061",
            "%53%45%43%52%45%54%2D%61%70%69%2F%37%66%33%61",
            r"S%45C\u0052ET-api\/7f3a",
        ] {
            let text = format!("upstream said: {spelled}!");
            assert_eq!(scrubbed(&text, &[SECRET]), "upstream said: [redacted]!", "{spelled}");
        }
        // Characters a JSON encoder must escape, beyond the BMP, and spaces.
        let odd = "p\"q\\r é€😀 x\ty";
        for spelled in [
            r#"p\"q\\r \u00e9\u20AC\ud83d\ude00 x\ty"#,
            "p%22q%5Cr+%C3%A9%E2%82%AC%F0%9F%98%80+x%09y",
            r#"p"q\r é€😀%20x\u0009y"#,
        ] {
            assert_eq!(scrubbed(spelled, &[odd]), REDACTED, "{spelled}");
        }
        // What is not one layer, or not the secret, stays.
        for kept in ["SECRET-api%252F7f3a", r"SECRET-api\\/7f3a", "SECRET-api 7f3a", r"\ud83d\u0000"] {
            assert_eq!(scrubbed(kept, &[SECRET, "\u{1F600}zzzzz"]), kept);
        }
    }

    #[test]
    fn overlapping_copies_leave_no_tail() {
        assert_eq!(scrubbed("xabcabcabcx", &["abcabc"]), "x[redacted]x");
        assert_eq!(scrubbed(r"xabcabc\u0061bcx", &["abcabc"]), "x[redacted]x");
    }

    #[test]
    fn a_copy_straddling_the_cut_leaves_no_prefix() {
        let body = format!("{}{}", "x".repeat(195), r"SECRET-api\/7f3a and then more");
        let cut = excerpt(body.as_bytes(), &[SECRET], 200);
        assert_eq!(cut, format!("{}[reda…", "x".repeat(195)));
        assert!(!cut.contains("SECR"), "{cut}");
        assert_eq!(excerpt(b"short\r\nbody\x01", &[SECRET], 200), "short \nbody ");
        assert_eq!(excerpt(b"\xff\xfeok", &[SECRET], 200), "\u{FFFD}\u{FFFD}ok");
    }

    #[test]
    fn raw_values_are_scrubbed_after_unescaping_and_left_alone_otherwise() {
        let mut escaped = RawJson::from_value(&json!(null));
        let text = r#"{"k":"\u0073k-live-0123456789"}"#;
        escaped = serde_json::from_str(text).unwrap_or(escaped);
        raw_json(&mut escaped, &["sk-live-0123456789"]);
        assert_eq!(escaped.get(), r#"{"k":"[redacted]"}"#);
        let mut encoded: RawJson = serde_json::from_str(r#"{"u":"https://x/?k=SECRET-api%2F7f3a&n=1"}"#).expect("raw");
        raw_json(&mut encoded, &[SECRET]);
        assert_eq!(encoded.get(), r#"{"u":"https://x/?k=[redacted]&n=1"}"#);
        // JSON inside a string (an MCP tool's content), escaped inside it.
        let mut nested: RawJson = serde_json::from_str(r#"["{\"key\":\"SECRET-api\\/7f3a\"}"]"#).expect("raw");
        raw_json(&mut nested, &[SECRET]);
        assert_eq!(nested.get(), r#"["{\"key\":\"[redacted]\"}"]"#);
        let untouched_text = r#"{ "k" : "spelled  as  the tool wrote it, 100% \n" }"#;
        let mut untouched: RawJson = serde_json::from_str(untouched_text).expect("raw");
        raw_json(&mut untouched, &["sk-live-0123456789"]);
        assert_eq!(untouched.get(), untouched_text, "no echo: the text is kept as it came");
        let mut number: RawJson = serde_json::from_str("[12345678901234]").expect("raw");
        raw_json(&mut number, &["45678901"]);
        assert_eq!(number.get(), r#"["[redacted]"]"#);
    }

    #[test]
    fn short_values_are_not_looked_for() {
        let mut v = json!({"answer": "42 is 42"});
        value(&mut v, &["42"]);
        assert_eq!(v["answer"], "42 is 42");
    }

    #[test]
    fn credentials_are_read_from_authorization_values() {
        assert_eq!(credential("Bearer tok-123456"), "tok-123456");
        assert_eq!(credential("Basic dXNlcjpwYXNz"), "dXNlcjpwYXNz");
        assert_eq!(credential("tok-123456"), "tok-123456");
    }

    #[test]
    fn the_work_is_bounded_by_the_text_whatever_it_holds() {
        // Backslashes that each could start an escape, against a secret of
        // backslashes: backtracking would take forever, this reads once.
        let secret = "\\".repeat(40) + "x";
        let text = "\\".repeat(20_000) + "y";
        assert_eq!(scrubbed(&text, &[&secret]), text);
        let text = "\\\\".repeat(40) + "x";
        assert_eq!(scrubbed(&text, &[&secret]), REDACTED);
    }

    /// Each way one character may be written, one layer deep.
    fn spelled(c: char) -> Vec<String> {
        let mut ways = vec![c.to_string()];
        let mut units = [0u16; 2];
        let utf16: Vec<String> = c.encode_utf16(&mut units).iter().map(|u| format!("\\u{u:04x}")).collect();
        ways.push(utf16.concat());
        ways.push(utf16.concat().to_uppercase().replace("\\U", "\\u"));
        let mut utf8 = [0u8; 4];
        let bytes = c.encode_utf8(&mut utf8).as_bytes();
        ways.push(bytes.iter().map(|b| format!("%{b:02x}")).collect());
        ways.push(bytes.iter().map(|b| format!("%{b:02X}")).collect());
        match c {
            '"' | '\\' | '/' => ways.push(format!("\\{c}")),
            '\n' => ways.push("\\n".into()),
            ' ' => ways.push("+".into()),
            _ => {}
        }
        ways
    }

    /// Secrets of characters that need escaping, and some that do not.
    fn secret() -> impl Strategy<Value = String> {
        let alphabet =
            prop::sample::select(vec!['A', 'Q', 'Z', '7', '-', '/', '"', '\\', ' ', '%', '+', 'é', '€', '😀', '\n']);
        prop::collection::vec(alphabet, MIN_SCRUBBED_LEN..20).prop_map(|chars| chars.into_iter().collect())
    }

    /// Whether `text[from..to]` spells `secret`, tried every way: the
    /// reference the scan is checked against.
    fn spells(text: &str, from: usize, to: usize, secret: &str) -> bool {
        let Some(want) = secret.chars().next() else { return from == to };
        spellings(text, from)
            .into_iter()
            .flatten()
            .any(|(c, len)| c == want && from + len <= to && spells(text, from + len, to, &secret[c.len_utf8()..]))
    }

    proptest! {
        /// The scan finds exactly the stretches that spell the secret, as
        /// trying every start, end and reading finds them, on text made of
        /// what escapes are made of around a copy spelled any way.
        #[test]
        fn the_scan_agrees_with_trying_every_way(
            secret in prop::collection::vec(prop::sample::select(vec!['a', '/', '\\', '%', ' ', '+']), 6..8),
            choices in prop::collection::vec(0usize..8, 8),
            around in prop::collection::vec(prop::sample::select(vec![
                "a", "/", "\\", "%", " ", "+", "2", "f", "F", "5", "c", "u", "0", "\\u00", "%2", "%25", "\\/", "x",
            ]), 0..24),
            split in 0usize..24,
        ) {
            let secret: String = secret.into_iter().collect();
            let written: String =
                secret.chars().zip(&choices).map(|(c, n)| { let ways = spelled(c); ways[n % ways.len()].clone() }).collect();
            let split = split.min(around.len());
            let text = format!("{}{written}{}", around[..split].concat(), around[split..].concat());
            let mut expected: Vec<Range<usize>> = Vec::new();
            for from in 0..text.len() {
                for to in from + 1..=text.len() {
                    if spells(&text, from, to, &secret) {
                        match expected.last_mut() {
                            Some(last) if from < last.end => last.end = last.end.max(to),
                            _ => expected.push(from..to),
                        }
                    }
                }
            }
            prop_assert!(!expected.is_empty(), "the reference finds the copy: {:?} in {:?}", secret, text);
            prop_assert_eq!(copies(&text, &[&secret]), expected, "{:?} in {:?}", secret, text);
        }

        /// Any secret, each character spelled any one-layer way, between
        /// text that cannot be part of it, is replaced and nothing else is.
        #[test]
        fn any_spelling_mix_is_found(
            secret in secret(),
            choices in prop::collection::vec(0usize..8, 20),
            before in "[a-z_,:]{0,30}",
            after in "[a-z_,:]{0,30}",
        ) {
            let written: String =
                secret.chars().zip(choices.iter().cycle()).map(|(c, n)| { let ways = spelled(c); ways[n % ways.len()].clone() }).collect();
            let text = format!("{before}{written}{after}");
            prop_assert_eq!(scrubbed(&text, &[&secret]), format!("{before}{REDACTED}{after}"), "{:?} as {:?}", secret, written);
            let mut v = json!({"m": text, "n": [format!("{written}")]});
            value(&mut v, &[&secret]);
            prop_assert!(!v.to_string().contains(&secret));
            prop_assert_eq!(&v["n"][0], REDACTED);
        }

        /// Text that cannot hold the secret in any spelling is left as it is.
        #[test]
        fn text_without_a_copy_is_unchanged(
            secret in "[A-Y0-4]{5,15}",
            text in "[^Z5]{0,200}",
        ) {
            // `Z` cannot be written without a `Z` or a `5` (`%5A`, `\u005a`).
            let secret = format!("{secret}Z");
            prop_assert_eq!(scrubbed(&text, &[&secret]), text.clone());
            let printable: String = text.chars().map(|c| if c.is_control() && c != '\n' { ' ' } else { c }).collect();
            prop_assert_eq!(excerpt(text.as_bytes(), &[&secret], 1000), printable);
        }
    }
}
