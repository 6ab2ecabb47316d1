//! `tools/call` requests, read without a `Value` tree for their envelope.
//!
//! Read as a `Value` first (`read_request`), a call's body became a map and
//! a string for every key and a heap string for every number's text, most
//! of it looked at once and dropped (benches/HISTORY.md, "Figures behind the
//! code"). [`read_tools_call`] reads the envelope and `params` into borrowed
//! fields (serde, with visitors that take objects only), and builds `Value`s
//! only of what the call keeps: its `arguments` (the validator and the
//! upstream body need one), `_meta` and `inputResponses`.
//!
//! Whatever it does not take as a plain `tools/call` (another method, a
//! notification, a member sent twice, an escaped `jsonrpc` or `method`, an
//! id that is neither a string nor a number, any error) is left to
//! `read_request`, so such a body is answered as before, errors included.
//! A call `read_request` read comes here as well ([`ToolsCall::from_value`]),
//! so both are served by the same code.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::mcp::jsonrpc::VERSION;

/// A `tools/call` request, whichever reader read it.
#[derive(Debug)]
pub(crate) struct ToolsCall<'b> {
    /// The request's id as its JSON text (a string or a number, as the
    /// client wrote it).
    pub id: Cow<'b, str>,
    /// Whether `params` was an object (or absent, or `null`).
    pub params_object: bool,
    /// `params._meta`.
    pub meta: Option<Value>,
    /// `params.name`, when it is a string.
    pub name: Option<Cow<'b, str>>,
    /// `params.arguments` as the tool's input (absent or `null` is `{}`);
    /// `None` when it is not an object.
    pub input: Option<Value>,
    /// Whether `params.inputResponses` says the user declined or cancelled
    /// what a previous answer asked.
    pub declined: bool,
}

impl ToolsCall<'static> {
    /// A call `read_request` read into a `Value`: the same parts, taken out
    /// of its params.
    pub(crate) fn from_value(id: &Value, params: Value) -> ToolsCall<'static> {
        let id = Cow::Owned(id.to_string());
        let mut params = match params {
            Value::Object(params) => params,
            Value::Null => Map::new(),
            _ => return ToolsCall { id, params_object: false, meta: None, name: None, input: None, declined: false },
        };
        let name = match params.remove("name") {
            Some(Value::String(name)) => Some(Cow::Owned(name)),
            _ => None,
        };
        ToolsCall {
            id,
            params_object: true,
            meta: params.remove("_meta"),
            name,
            input: arguments_input(params.remove("arguments")),
            declined: declined(params.get("inputResponses")),
        }
    }
}

/// The input `arguments` stand for: absent or `null` is `{}`; `None` when
/// they are not an object.
fn arguments_input(arguments: Option<Value>) -> Option<Value> {
    match arguments {
        None | Some(Value::Null) => Some(Value::Object(Map::new())),
        Some(arguments @ Value::Object(_)) => Some(arguments),
        Some(_) => None,
    }
}

/// Whether `inputResponses` (a retried call's answers to what the gateway
/// asked) says the user declined or cancelled: then the call ends as a tool
/// error instead of asking again.
pub(crate) fn declined(responses: Option<&Value>) -> bool {
    responses.and_then(Value::as_object).is_some_and(|responses| {
        responses.values().any(|r| matches!(r.get("action").and_then(Value::as_str), Some("decline" | "cancel")))
    })
}

/// A plain `tools/call` request read from `body` without a `Value` tree for
/// its envelope; `None` for anything else, which `read_request` reads.
pub(crate) fn read_tools_call(body: &[u8]) -> Option<ToolsCall<'_>> {
    let text = std::str::from_utf8(body).ok()?;
    let envelope: Envelope<'_> = serde_json::from_str(text).ok()?;
    if envelope.jsonrpc != Some(VERSION) || envelope.method != Some("tools/call") {
        return None;
    }
    let id = envelope.id?.get();
    // A string or a number; anything else (`null` included) is refused by
    // `read_request`.
    if !matches!(id.as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9')) {
        return None;
    }
    // Absent or `null` params are an empty object.
    let params = envelope.params.unwrap_or_default();
    Some(ToolsCall {
        id: Cow::Borrowed(id),
        params_object: true,
        meta: params.meta,
        name: params.name.map(|name| name.0),
        input: arguments_input(params.arguments),
        declined: declined(params.input_responses.as_ref()),
    })
}

/// The members of a request a call needs, borrowed from the body where
/// they can be.
#[derive(Default)]
struct Envelope<'b> {
    jsonrpc: Option<&'b str>,
    id: Option<&'b RawValue>,
    method: Option<&'b str>,
    params: Option<Params<'b>>,
}

/// The members of a call's `params`.
#[derive(Default)]
struct Params<'b> {
    name: Option<Text<'b>>,
    arguments: Option<Value>,
    meta: Option<Value>,
    input_responses: Option<Value>,
}

/// A string, borrowed from the body unless it has escapes.
#[derive(Deserialize)]
struct Text<'b>(#[serde(borrow)] Cow<'b, str>);

/// The envelope's members, by name.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Member {
    Jsonrpc,
    Id,
    Method,
    Params,
    #[serde(other)]
    Other,
}

/// The members of `params` a call reads, by name.
#[derive(Deserialize)]
#[serde(field_identifier)]
enum ParamsMember {
    #[serde(rename = "name")]
    Name,
    #[serde(rename = "arguments")]
    Arguments,
    #[serde(rename = "_meta")]
    Meta,
    #[serde(rename = "inputResponses")]
    InputResponses,
    #[serde(other)]
    Other,
}

/// Fills a member's slot. A member that comes again after a value other
/// than `null` is an error: `Value` keeps the last one, so such a body is
/// left to `read_request`. (After a `null`, the later value is the one both
/// keep.)
fn only<T, E: de::Error>(slot: &mut Option<T>, value: Option<T>) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::custom("a member sent twice"));
    }
    *slot = value;
    Ok(())
}

// Hand-written visitors, not serde's derive: a derived struct also takes a
// JSON array (its members in order), which must stay a refused request.

impl<'de> Deserialize<'de> for Envelope<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Envelope<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON-RPC request object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Envelope<'de>, A::Error> {
                let mut envelope = Envelope::default();
                while let Some(member) = map.next_key::<Member>()? {
                    match member {
                        Member::Jsonrpc => only(&mut envelope.jsonrpc, map.next_value()?)?,
                        // (A `null` id is kept: it is an invalid request, not a notification.)
                        Member::Id => only(&mut envelope.id, Some(map.next_value()?))?,
                        Member::Method => only(&mut envelope.method, map.next_value()?)?,
                        Member::Params => only(&mut envelope.params, map.next_value()?)?,
                        Member::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(envelope)
            }
        }
        deserializer.deserialize_map(Object)
    }
}

impl<'de> Deserialize<'de> for Params<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Params<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of params")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Params<'de>, A::Error> {
                let mut params = Params::default();
                while let Some(member) = map.next_key::<ParamsMember>()? {
                    match member {
                        ParamsMember::Name => only(&mut params.name, map.next_value()?)?,
                        ParamsMember::Arguments => only(&mut params.arguments, map.next_value()?)?,
                        ParamsMember::Meta => only(&mut params.meta, map.next_value()?)?,
                        ParamsMember::InputResponses => only(&mut params.input_responses, map.next_value()?)?,
                        ParamsMember::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(params)
            }
        }
        deserializer.deserialize_map(Object)
    }
}
