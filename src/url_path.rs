//! URL paths as whatever stands in front of an API may read them. A proxy
//! that normalises paths (nginx with a URI in `proxy_pass`, most
//! frameworks' routers) decodes `%2E%2E` to `..` and resolves it, so a
//! value sent as one path segment, or a document's path, that reads as a
//! dot segment or holds a separator climbs out of the upstream's `url`,
//! carrying its credentials. Refused here in every spelling:
//!
//! - as written, and percent-decoded again and again (a proxy decodes
//!   once, the server behind it once more: `%252e` is `.` two readers
//!   down), at most [`MAX_DECODES`] times;
//! - each reading with overlong UTF-8 forms (`%C0%AE`) read as the
//!   character they spell, as lenient decoders do, and the characters
//!   Unicode compatibility normalisation turns into `.`, `/`, `\`, `;`, `?`
//!   or `#` (fullwidth `．`, `／`...) read as those;
//! - `\` as a separator (IIS, and servers on Windows);
//! - a segment read up to its first `;` (Tomcat drops path parameters:
//!   `..;x` is `..`), `?`, `#` or NUL.
//!
//! `...` is a name, not a dot segment, and stays allowed. A value declared
//! `allowReserved` may hold `/` ([`segments_refusal`]): each of its
//! segments is held to the same rule.

use percent_encoding::percent_decode_str;
use serde_json::Value;

/// Readings past this many percent-decodings are refused outright: no
/// value is meant to be encoded that many times over.
pub const MAX_DECODES: usize = 8;

/// An input that an OpenAPI operation sends as (part of) one path segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathInput {
    /// The input property (the path parameter's name).
    pub name: String,
    /// Sent as its JSON text (a parameter with `content: application/json`)
    /// rather than its value's text.
    pub json: bool,
    /// Declared `allowReserved`: a `/` is sent as it is, so the value may
    /// span segments, none of which may be a dot segment.
    pub reserved: bool,
}

impl PathInput {
    /// Why the input's value could leave its segment, or `None`. A scalar
    /// is read as its text; an array's items and an object's keys and
    /// values (which the styles join) each on their own.
    pub fn refusal(&self, input: &Value) -> Option<&'static str> {
        let value = input.get(&self.name).filter(|v| !v.is_null())?;
        if self.json {
            return segment_refusal(&value.to_string());
        }
        let refusal = |text: &str| if self.reserved { segments_refusal(text) } else { segment_refusal(text) };
        match value {
            Value::Array(items) => items.iter().find_map(|item| refusal(&scalar(item))),
            Value::Object(fields) => fields.iter().find_map(|(k, v)| refusal(k).or_else(|| refusal(&scalar(v)))),
            other => refusal(&scalar(other)),
        }
    }
}

/// Why `text`, sent as one path segment, could leave it, or `None`.
pub fn segment_refusal(text: &str) -> Option<&'static str> {
    let mut refusal = None;
    let complete = readings(text, |reading| {
        if reading.contains(['/', '\\']) {
            refusal = Some("cannot hold / or \\ in a path, as written or percent-encoded");
        } else if is_dot_segment(reading) {
            refusal = Some("cannot be . or .. in a path, as written or percent-encoded");
        }
        refusal.is_none()
    });
    refusal.or((!complete).then_some("cannot be percent-encoded this many times over in a path"))
}

/// Why `text`, sent as segments separated by its `/` (reserved expansion),
/// could leave them, or `None`: a `\` or a dot segment in any reading.
pub fn segments_refusal(text: &str) -> Option<&'static str> {
    let mut refusal = None;
    let complete = readings(text, |reading| {
        if reading.contains('\\') {
            refusal = Some("cannot hold \\ in a path, as written or percent-encoded");
        } else if reading.split('/').any(is_dot_segment) {
            refusal = Some("cannot have a . or .. segment in a path, as written or percent-encoded");
        }
        refusal.is_none()
    });
    refusal.or((!complete).then_some("cannot be percent-encoded this many times over in a path"))
}

/// Whether a path has a dot segment in any spelling (or is encoded past
/// [`MAX_DECODES`]).
pub fn has_dot_segment(path: &str) -> bool {
    let mut found = false;
    let complete = readings(path, |reading| {
        found = reading.split(['/', '\\']).any(is_dot_segment);
        !found
    });
    found || !complete
}

/// Whether a segment is `.` or `..`, read up to its first `;`, `?`, `#`
/// or NUL.
fn is_dot_segment(segment: &str) -> bool {
    let head = segment.split([';', '?', '#', '\0']).next().unwrap_or_default();
    head == "." || head == ".."
}

/// Calls `each` with every reading of `text` until it returns `false`, or
/// the readings stop changing; `false` when they were still changing after
/// [`MAX_DECODES`] decodings.
fn readings(text: &str, mut each: impl FnMut(&str) -> bool) -> bool {
    let mut reading = compatible(text);
    for _ in 0..=MAX_DECODES {
        if !each(&reading) {
            return true;
        }
        if !reading.contains('%') {
            return true;
        }
        let decoded = compatible(&lenient_utf8(&percent_decode_str(&reading).collect::<Vec<u8>>()));
        if decoded == reading {
            return true;
        }
        reading = decoded;
    }
    false
}

/// `text` with the characters that Unicode compatibility normalisation
/// (NFKC) makes into path syntax replaced by what they become.
fn compatible(text: &str) -> String {
    if text.is_ascii() {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\u{FF0E}' | '\u{FE52}' | '\u{2024}' => out.push('.'),
            '\u{2025}' => out.push_str(".."),
            '\u{FF0F}' => out.push('/'),
            '\u{FF3C}' | '\u{FE68}' => out.push('\\'),
            '\u{FF1B}' | '\u{FE54}' | '\u{037E}' => out.push(';'),
            '\u{FF1F}' | '\u{FE56}' => out.push('?'),
            '\u{FF03}' | '\u{FE5F}' => out.push('#'),
            other => out.push(other),
        }
    }
    out
}

/// Bytes as text the way a lenient decoder reads them: overlong forms
/// (`C0 AE`) as the character they spell, anything else that is not UTF-8
/// as U+FFFD.
fn lenient_utf8(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let lead = bytes[i];
        let (n, mask) = match lead {
            0x00..=0x7F => (1, 0x7F),
            0xC0..=0xDF => (2, 0x1F),
            0xE0..=0xEF => (3, 0x0F),
            0xF0..=0xF7 => (4, 0x07),
            _ => (0, 0),
        };
        let sequence = bytes.get(i..i + n).filter(|s| n > 0 && s[1..].iter().all(|b| b & 0xC0 == 0x80));
        let decoded = sequence.and_then(|s| {
            let code = s[1..].iter().fold(u32::from(lead & mask), |code, b| (code << 6) | u32::from(b & 0x3F));
            char::from_u32(code)
        });
        match decoded {
            Some(c) => {
                out.push(c);
                i += n;
            }
            None => {
                out.push(char::REPLACEMENT_CHARACTER);
                i += 1;
            }
        }
    }
    out
}

/// A scalar's text as a path style writes it (nested values as JSON).
fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_spelling_of_a_dot_segment_or_a_separator_is_refused() {
        for value in [
            ".",
            "..",
            "%2e",
            "%2E%2e",
            ".%2e",
            "%2e.",
            "%252e%252e",
            "%25252E%25252E",
            "..;",
            "..;jsessionid=x",
            ".;",
            "..?x",
            "..#x",
            "..\0",
            "%2e%2e%3b",
            "%c0%ae%c0%ae",
            "%e0%80%ae.",
            "．．",
            "\u{2025}",
            "%EF%BC%8E.",
            "/",
            "../admin",
            "a/b",
            "\\",
            "..\\admin",
            "%2f",
            "%2F",
            "%5c",
            "%5C",
            "%252f",
            "a%c0%afb",
            "a／b",
            "%ef%bc%8f",
            "a＼b",
        ] {
            assert!(segment_refusal(value).is_some(), "{value:?} must be refused");
        }
        let deep = format!("%{}2e", "25".repeat(MAX_DECODES + 1));
        assert!(segment_refusal(&deep).unwrap_or_default().contains("many times"), "{deep}");
    }

    #[test]
    fn ordinary_values_pass() {
        for value in [
            "...", "....", ".hidden", "a.b", "a..b", "v1.2", "100%", "50%off", "%zz", "a;b", "a%20b", "é", "x..;",
            "%c3%a9",
        ] {
            assert_eq!(segment_refusal(value), None, "{value:?} must pass");
        }
    }

    #[test]
    fn paths_with_a_dot_segment_in_any_spelling() {
        for path in [
            "/../admin",
            "/%2e%2e/admin",
            "/a/%2E/b",
            "/a/..;/b",
            "/a%2F..%2Fb",
            "/a%5c..%5cb",
            "/a/%252e%252e/b",
            "/a/.",
            "/{id}/..",
        ] {
            assert!(has_dot_segment(path), "{path}");
        }
        for path in ["/books/{id}", "/a/.../b", "/a/..x/b", "/a/.well-known/b", "/files/%7Bid%7D", "/a;b/c"] {
            assert!(!has_dot_segment(path), "{path}");
        }
    }

    #[test]
    fn inputs_are_read_as_their_style_writes_them() {
        let simple = PathInput { name: "id".into(), json: false, reserved: false };
        assert!(simple.refusal(&json!({"id": ".."})).is_some());
        assert!(simple.refusal(&json!({"id": ["a", ".."]})).is_some(), "an item");
        assert!(simple.refusal(&json!({"id": {"a/b": "x"}})).is_some(), "a key");
        assert!(simple.refusal(&json!({"id": {"k": "%2e%2e"}})).is_some(), "a value");
        assert_eq!(simple.refusal(&json!({"id": 12})), None);
        assert_eq!(simple.refusal(&json!({"other": ".."})), None, "not this input");
        assert_eq!(simple.refusal(&json!({"id": null})), None);
        let as_json = PathInput { name: "f".into(), json: true, reserved: false };
        assert!(as_json.refusal(&json!({"f": {"a": "/../x"}})).is_some(), "the JSON text holds a /");
        assert_eq!(as_json.refusal(&json!({"f": {"a": ".."}})), None, "quoted: never a segment of its own");
        // allowReserved: several segments, none a dot segment.
        let reserved = PathInput { name: "path".into(), json: false, reserved: true };
        for fine in ["docs/README.md", "a/.../b", "src/.github/x"] {
            assert_eq!(reserved.refusal(&json!({ "path": fine })), None, "{fine}");
        }
        for climbing in ["../x", "a/../../b", "a/%2e%2e/b", "a%2F..%2Fb", "a/..;/b", "a\\b", "a/./b", "a/．．/b"] {
            assert!(reserved.refusal(&json!({ "path": climbing })).is_some(), "{climbing}");
        }
    }
}
