//! A call's input: a JSON object, kept as the client's text when the hand
//! reader (`scan.rs`) read it, built as a `Value` only when a step needs
//! one.
//!
//! Why: building the input's `Value`, checking it with jsonschema, writing
//! it out again for the upstream and dropping it was the largest piece of a
//! plain call's work left (benches/README.md, "The input kept as its text").
//! Most schemas only name their parameters' types; such a schema is
//! checked against the members' kinds (`validate.rs`, `QuickSchema`), and
//! the text goes upstream as the client wrote it. Everything else (a
//! schema that says more, an input a server adds to, an approval's
//! fingerprint, an MCP or OpenAPI upstream) asks for the `Value`, which is
//! then read from the text by serde_json, as it would have been.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use smallvec::SmallVec;

/// What a member's value is, as a schema's `type` tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool,
    /// A number written without fraction or exponent.
    Integer,
    /// Any other number.
    Number,
    /// A string.
    String,
    /// An array.
    Array,
    /// An object.
    Object,
}

impl Kind {
    /// The kind of a built value.
    pub fn of(value: &Value) -> Kind {
        match value {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Number(n) if n.is_i64() || n.is_u64() => Kind::Integer,
            Value::Number(_) => Kind::Number,
            Value::String(_) => Kind::String,
            Value::Array(_) => Kind::Array,
            Value::Object(_) => Kind::Object,
        }
    }
}

/// The top-level members of an input, each name with its value's kind.
pub enum Members<'a> {
    /// Of a text: the names' places in it.
    Text(&'a str, std::slice::Iter<'a, (u32, u32, Kind)>),
    /// Of a `Value`'s map.
    Value(serde_json::map::Iter<'a>),
}

impl<'a> Iterator for Members<'a> {
    type Item = (&'a str, Kind);

    fn next(&mut self) -> Option<(&'a str, Kind)> {
        match self {
            Members::Text(text, kinds) => {
                kinds.next().map(|&(start, end, kind)| (&text[start as usize..end as usize], kind))
            }
            Members::Value(map) => map.next().map(|(name, value)| (name.as_str(), Kind::of(value))),
        }
    }
}

/// A call's input, always a JSON object.
pub struct Input(Repr);

enum Repr {
    /// As the client wrote it, read by the hand reader. Boxed: a call's
    /// input is moved with the call several times, and this keeps it as
    /// small as a `Value`.
    Text(Box<Kept>),
    /// Read another way, or changed.
    Value(Value),
}

/// An input's text: strings without escapes, integers only, and no key
/// twice in any object (so every reader of it sees the members the gateway
/// checked); each top-level member's name (its place in `text`) and kind.
struct Kept {
    text: Box<str>,
    kinds: SmallVec<[(u32, u32, Kind); 4]>,
}

impl Input {
    /// An input read another way.
    pub fn from_value(value: Value) -> Input {
        Input(Repr::Value(value))
    }

    /// An input the hand reader read: `text` with the kinds of its members,
    /// each name given as its place in `text`.
    pub(super) fn from_text(text: &str, kinds: SmallVec<[(u32, u32, Kind); 4]>) -> Input {
        Input(Repr::Text(Box::new(Kept { text: text.into(), kinds })))
    }

    /// The input as a `Value`: read from the text (by serde_json, as it
    /// would have read it) when there is one.
    pub fn value(&self) -> Cow<'_, Value> {
        match &self.0 {
            Repr::Text(kept) => Cow::Owned(from_text(&kept.text)),
            Repr::Value(value) => Cow::Borrowed(value),
        }
    }

    /// The `Value`, to change: the text is let go, so the upstream gets
    /// what was changed.
    pub fn value_mut(&mut self) -> &mut Value {
        if let Repr::Text(kept) = &self.0 {
            self.0 = Repr::Value(from_text(&kept.text));
        }
        match &mut self.0 {
            Repr::Value(value) => value,
            Repr::Text(_) => unreachable!("replaced just above"),
        }
    }

    /// The members' names and kinds; `None` when the input is not an
    /// object (a `Value` read another way).
    pub fn members(&self) -> Option<Members<'_>> {
        match &self.0 {
            Repr::Text(kept) => Some(Members::Text(&kept.text, kept.kinds.iter())),
            Repr::Value(Value::Object(map)) => Some(Members::Value(map.iter())),
            Repr::Value(_) => None,
        }
    }

    /// Appends the input's JSON: the client's text when there is one.
    pub fn write(&self, out: &mut Vec<u8>) {
        match &self.0 {
            Repr::Text(kept) => out.extend_from_slice(kept.text.as_bytes()),
            Repr::Value(value) => super::write::write_json(out, value),
        }
    }
}

/// The hand reader wrote down only valid JSON objects (its tests check
/// it); were one not, the call would be refused as not an object, never
/// run with something else.
fn from_text(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_default()
}

impl std::fmt::Debug for Input {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value().fmt(f)
    }
}

/// `{}`: a call that sent no input.
impl Default for Input {
    fn default() -> Input {
        Input::from_value(Value::Object(Map::new()))
    }
}

/// Read by serde_json: an object.
impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Input, D::Error> {
        Map::<String, Value>::deserialize(deserializer).map(|map| Input::from_value(Value::Object(map)))
    }
}
