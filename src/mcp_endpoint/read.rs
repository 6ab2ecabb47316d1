//! `tools/call` requests, read without a `Value` tree for their envelope.
//!
//! Read as a `Value` first (`read_request`), a call's body became a map and
//! a string for every key and a heap string for every number's text, most
//! of it looked at once and dropped (benches/HISTORY.md, "Figures behind the
//! code"). [`read_tools_call`] reads the envelope and `params` into borrowed
//! fields, and builds `Value`s only of what the call keeps: the client's
//! capabilities in `_meta`, and `inputResponses` and `requestState` (a
//! 2026-07-28 upstream may need them). The common shape is read by the OTC
//! call body's hand reader (`wire::Scanner`), its `arguments` kept as their
//! text as an OTC call's input is; the rest through serde, with visitors
//! that take objects only.
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

use super::envelope::Meta;
use crate::mcp::jsonrpc::VERSION;
use crate::mcp::v2026_07_28::{META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION};
use crate::wire::{self, Input, Scanner};

/// A `tools/call` request, whichever reader read it.
#[derive(Debug)]
pub(crate) struct ToolsCall<'b> {
    /// The request's id as its JSON text (a string or a number, as the
    /// client wrote it).
    pub id: Cow<'b, str>,
    /// Whether `params` was an object (or absent, or `null`).
    pub params_object: bool,
    /// What `params._meta` holds.
    pub meta: Meta<'b>,
    /// `params.name`, when it is a string.
    pub name: Option<Cow<'b, str>>,
    /// `params.arguments` as the tool's input (absent or `null` is `{}`);
    /// `None` when it is not an object.
    pub input: Option<Input>,
    /// `params.inputResponses`: a retried call's answers to what an
    /// earlier result asked.
    pub input_responses: Option<Value>,
    /// `params.requestState`: the state an earlier result asked to be sent
    /// back.
    pub request_state: Option<Value>,
}

impl ToolsCall<'static> {
    /// A call `read_request` read into a `Value`: the same parts, taken out
    /// of its params.
    pub(crate) fn from_value(id: &Value, params: Value) -> ToolsCall<'static> {
        let id = Cow::Owned(id.to_string());
        let mut params = match params {
            Value::Object(params) => params,
            Value::Null => Map::new(),
            _ => {
                return ToolsCall {
                    id,
                    params_object: false,
                    meta: Meta::default(),
                    name: None,
                    input: None,
                    input_responses: None,
                    request_state: None,
                }
            }
        };
        let name = match params.remove("name") {
            Some(Value::String(name)) => Some(Cow::Owned(name)),
            _ => None,
        };
        ToolsCall {
            id,
            params_object: true,
            meta: Meta::of_value(params.get("_meta")).into_owned(),
            name,
            input: arguments_value(params.remove("arguments")).map(Input::from_value),
            // `null` reads as absent, as the call reader reads it.
            input_responses: params.remove("inputResponses").filter(|v| !v.is_null()),
            request_state: params.remove("requestState").filter(|v| !v.is_null()),
        }
    }
}

/// The input `arguments` stand for: absent or `null` is `{}`; `None` when
/// they are not an object.
fn arguments_input(arguments: Option<&RawValue>) -> Option<Input> {
    match arguments {
        None => Some(Input::default()),
        Some(arguments) => wire::read_input(arguments.get()),
    }
}

/// [`arguments_input`] for a call read as a `Value`.
fn arguments_value(arguments: Option<Value>) -> Option<Value> {
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
    scan_tools_call(text).or_else(|| serde_tools_call(text))
}

/// The common shape read by the call body's hand reader (`wire::Scanner`):
/// plain strings, no member twice, `params` an object whose `name` is a
/// string, whose `arguments` are an object and which has neither
/// `inputResponses` nor `requestState`. Anything else is `None`, left to
/// [`serde_tools_call`]. Through serde the envelope cost either era's call
/// more, a 2026-07-28 one (its `_meta`) the most (benches/README.md, "The
/// MCP envelope read by hand", has the counts).
fn scan_tools_call(text: &str) -> Option<ToolsCall<'_>> {
    let mut scan = Scanner::new(text);
    let (mut version, mut id, mut method, mut params) = (None, None, None, None);
    scan.distinct_members(|scan, key| {
        match key {
            "jsonrpc" => version = Some(scan.string()?),
            "id" => id = Some(scan.raw(1)?),
            "method" => method = Some(scan.string()?),
            "params" => params = Some(scan_params(scan)?),
            _ => scan.skip(1)?,
        }
        Some(())
    })?;
    scan.end()?;
    if version != Some(VERSION) || method != Some("tools/call") {
        return None;
    }
    let id = id?;
    if !matches!(id.as_bytes().first(), Some(b'"' | b'-' | b'0'..=b'9')) {
        return None;
    }
    let (name, input, meta) = params.unwrap_or_default();
    Some(ToolsCall {
        id: Cow::Borrowed(id),
        params_object: true,
        meta: meta.unwrap_or_default(),
        name: name.map(Cow::Borrowed),
        input: Some(input.unwrap_or_default()),
        input_responses: None,
        request_state: None,
    })
}

/// `params` in the common shape: its name, its arguments and its `_meta`.
type ScannedParams<'a> = (Option<&'a str>, Option<Input>, Option<Meta<'a>>);

fn scan_params<'a>(scan: &mut Scanner<'a>) -> Option<ScannedParams<'a>> {
    let (mut name, mut input, mut meta) = (None, None, None);
    scan.distinct_members(|scan, key| {
        match key {
            "name" => name = Some(scan.string()?),
            "arguments" => input = Some(scan.input()?),
            "_meta" => meta = Some(scan_meta(scan)?),
            "inputResponses" | "requestState" => return None,
            _ => scan.skip(2)?,
        }
        Some(())
    })?;
    Some((name, input, meta))
}

/// `_meta` in the common shape: its version a plain string, the client's
/// capabilities an object (read as a map only when not empty).
fn scan_meta<'a>(scan: &mut Scanner<'a>) -> Option<Meta<'a>> {
    let (mut version, mut capabilities) = (None, None);
    scan.distinct_members(|scan, key| {
        match key {
            META_PROTOCOL_VERSION => version = Some(scan.string()?),
            META_CLIENT_CAPABILITIES => {
                let text = scan.raw(3)?;
                capabilities = Some(match text {
                    "{}" => Map::new(),
                    _ if text.starts_with('{') => serde_json::from_str(text).ok()?,
                    _ => return None,
                });
            }
            _ => scan.skip(3)?,
        }
        Some(())
    })?;
    Some(Meta {
        object: true,
        declares_version: version.is_some(),
        version: version.map(Cow::Borrowed),
        capabilities: capabilities.map(Cow::Owned),
    })
}

/// The same through serde, with borrowed fields: takes what the hand reader
/// leaves (escapes, `null`s, a retried call's members).
fn serde_tools_call(text: &str) -> Option<ToolsCall<'_>> {
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
        meta: params.meta.unwrap_or_default(),
        name: params.name.map(|name| name.0),
        input: arguments_input(params.arguments),
        input_responses: params.input_responses,
        request_state: params.request_state,
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
    /// Their text: read by `wire::read_input`.
    arguments: Option<&'b RawValue>,
    meta: Option<Meta<'b>>,
    input_responses: Option<Value>,
    request_state: Option<Value>,
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
    #[serde(rename = "requestState")]
    RequestState,
    #[serde(other)]
    Other,
}

/// The members of `_meta` the checks read, by name.
#[derive(Deserialize)]
#[serde(field_identifier)]
enum MetaMember {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion")]
    ProtocolVersion,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities")]
    ClientCapabilities,
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
                        ParamsMember::RequestState => only(&mut params.request_state, map.next_value()?)?,
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

/// `_meta` as a [`Meta`], without a `Value` tree for it: its version
/// borrowed, the client's capabilities read as a map (they go on to a
/// 2026-07-28 upstream). A version that is not a plain string, or
/// capabilities that are not an object, are errors the checks answer: such
/// a body is left to `read_request`.
impl<'de> Deserialize<'de> for Meta<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Meta<'de>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a `_meta` object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Meta<'de>, A::Error> {
                let (mut version, mut capabilities) = (None::<&str>, None::<Map<String, Value>>);
                while let Some(member) = map.next_key::<MetaMember>()? {
                    match member {
                        MetaMember::ProtocolVersion => only(&mut version, Some(map.next_value()?))?,
                        MetaMember::ClientCapabilities => only(&mut capabilities, Some(map.next_value()?))?,
                        MetaMember::Other => {
                            map.next_value::<IgnoredAny>()?;
                        }
                    }
                }
                Ok(Meta {
                    object: true,
                    declares_version: version.is_some(),
                    version: version.map(Cow::Borrowed),
                    capabilities: capabilities.map(Cow::Owned),
                })
            }
        }
        deserializer.deserialize_map(Object)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::mcp::jsonrpc::Message;

    /// A call as `read_request` reads it, through a `Value`.
    fn through_value(body: &str) -> Option<ToolsCall<'static>> {
        match Message::from_slice(body.as_bytes()) {
            Ok(Message::Request { id, method, params }) if method == "tools/call" => {
                Some(ToolsCall::from_value(&id, params))
            }
            _ => None,
        }
    }

    /// The parts the front reads, the id as the value it stands for.
    #[allow(clippy::type_complexity)] // a tuple to compare, in a test
    fn parts(
        call: &ToolsCall<'_>,
    ) -> (Value, bool, Meta<'static>, Option<String>, Option<Value>, Option<Value>, Option<Value>) {
        let id = serde_json::from_str(&call.id).expect("the id is JSON");
        (
            id,
            call.params_object,
            call.meta.clone().into_owned(),
            call.name.as_deref().map(str::to_owned),
            call.input.as_ref().map(|input| input.value().into_owned()),
            call.input_responses.clone(),
            call.request_state.clone(),
        )
    }

    /// Whatever the call reader takes, it reads as `read_request` does,
    /// and so does each of its two readers (by hand, through serde) that
    /// takes it.
    fn agrees(body: &str) -> bool {
        let Some(fast) = read_tools_call(body.as_bytes()) else { return false };
        let slow = through_value(body).unwrap_or_else(|| panic!("read as a call, not one by `Value`: {body}"));
        assert_eq!(parts(&fast), parts(&slow), "{body}");
        for call in [scan_tools_call(body), serde_tools_call(body)].iter().flatten() {
            assert_eq!(parts(call), parts(&slow), "{body}");
        }
        true
    }

    #[test]
    fn common_calls_are_read_by_hand() {
        let meta = format!(r#"{{"{VERSION_KEY}":"2026-07-28","{CAPABILITIES_KEY}":{{}}}}"#);
        for params in [
            r#"{"name":"Bench_Add","arguments":{"a":10,"b":5}}"#.to_owned(),
            format!(r#"{{"name":"Bench_Add","arguments":{{"a":10,"b":5}},"_meta":{meta}}}"#),
            format!(
                r#"{{"_meta":{{"progressToken":1,"{CAPABILITIES_KEY}":{{"elicitation":{{"url":{{}}}}}}}},"name":"x"}}"#
            ),
            r#"{"name":"x","other":[1,{"2":null}]}"#.to_owned(),
        ] {
            let body = format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{params}}}"#);
            assert!(scan_tools_call(&body).is_some(), "{body}");
            assert!(agrees(&body), "{body}");
        }
        let body = r#"{"jsonrpc":"2.0","id":"a","method":"tools/call"}"#;
        assert!(scan_tools_call(body).is_some() && agrees(body));
    }

    const VERSION_KEY: &str = "io.modelcontextprotocol/protocolVersion";
    const CAPABILITIES_KEY: &str = "io.modelcontextprotocol/clientCapabilities";

    #[test]
    fn plain_calls_are_read_as_the_value_reader_reads_them() {
        let modern = |capabilities: Value| json!({VERSION_KEY: "2026-07-28", CAPABILITIES_KEY: capabilities});
        for params in [
            json!({"name": "Calc_Add", "arguments": {"a": 10, "b": 123456789012345678901234567890u128}}),
            json!({"name": "Calc_Add", "arguments": null}),
            json!({"name": "Calc_Add"}),
            json!({"arguments": {"a": 1}}),
            json!({"name": "caf\u{e9} \"q\"", "arguments": {}}),
            json!({"name": "Calc_Add", "arguments": [1, 2]}),
            json!({"name": "Calc_Add", "arguments": "text"}),
            json!({"name": null, "arguments": {"x": {"y": [true, null]}}}),
            json!({"name": "Calc_Add", "_meta": modern(json!({}))}),
            json!({"name": "Calc_Add", "_meta": modern(json!({"elicitation": {"url": {}}, "sampling": {}}))}),
            json!({"name": "Calc_Add", "_meta": modern(json!({"elicitation": {"form": {}}}))}),
            json!({"name": "Calc_Add", "_meta": modern(json!({"elicitation": true}))}),
            json!({"name": "Calc_Add", "_meta": {"progressToken": 1}}),
            json!({"name": "Calc_Add", "_meta": {}}),
            json!({"name": "Calc_Add", "_meta": null}),
            json!({"name": "Calc_Add", "inputResponses": {"google": {"action": "decline"}}}),
            json!({"name": "Calc_Add", "inputResponses": {"google": {"action": "accept"}}, "other": [1, {"2": 3}]}),
            json!({"name": "Calc_Add", "requestState": "otc-gateway/authorize", "inputResponses": {}}),
            json!({"name": "Calc_Add", "requestState": {"opaque": [1]}}),
        ] {
            for id in ["7", "\"a\"", "12345678901234567890123", "-1.5e3", "\"\\u0041\""] {
                let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#);
                assert!(agrees(&body), "not read as a call: {body}");
            }
        }
        for body in [
            r#"{"method":"tools/call","jsonrpc":"2.0","id":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":null}"#,
            r#" { "jsonrpc" : "2.0" , "id" : 1 , "method" : "tools/call" , "params" : { "name" : "x" } } "#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":null,"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","params":null,"params":{"name":"x"},"id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","result":5,"error":{}}"#,
        ] {
            assert!(agrees(body), "not read as a call: {body}");
        }
    }

    #[test]
    fn anything_unusual_is_left_to_the_value_reader() {
        for body in [
            // Not a call, or not a request.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"tools/call"}]"#,
            r#"["2.0",1,"tools/call",{"name":"x"}]"#,
            // An id, version or method the reader does not take.
            r#"{"jsonrpc":"2.0","id":null,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":{},"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":true,"method":"tools/call"}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2\u002e0","id":1,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools\/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":5}"#,
            // A member sent twice.
            r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","name":"y"}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"arguments":{},"arguments":null}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"a","io.modelcontextprotocol/protocolVersion":"b"}}}"#,
            // Params, or parts of them, of another type.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":["x",{}]}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":5}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","_meta":[1]}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026\u002d07-28"}}}"#,
            // A `_meta` the checks refuse.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":5}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":null}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":"x"}}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":null}}}"#,
            // Not JSON, or not all of it.
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call""#,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"} {}"#,
            "",
        ] {
            assert!(read_tools_call(body.as_bytes()).is_none(), "{body}");
        }
        assert!(read_tools_call(
            b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"\xff\"}}"
        )
        .is_none());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 2048, ..Default::default() })]

        /// Bodies made of a call's members and others, in any order, some
        /// twice, some of other types: whatever the call reader takes, it
        /// reads as `read_request` does.
        #[test]
        fn any_call_body_is_read_as_the_value_reader_reads_it(
            core in (0usize..4, 0usize..6, 0usize..4),
            extras in proptest::collection::vec((0usize..8, 0usize..6), 0..3),
            params in proptest::collection::vec((0usize..6, 0usize..6), 0..6),
            meta in proptest::collection::vec((0usize..4, 0usize..6), 0..4),
            order in proptest::collection::vec(proptest::num::u8::ANY, 8),
        ) {
            const VALUES: [&str; 6] = ["null", "7", "\"tools/call\"", "{}", "[1]", "\"2.0\""];
            let member = |key: &str, value: &str| format!("{key:?}:{value}");
            let meta: Vec<String> = meta.iter().map(|&(k, v)| {
                let key = ["io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities", "x", "elicitation"][k];
                member(key, if k == 1 && v == 3 { r#"{"elicitation":{"url":{}}}"# } else { VALUES[v] })
            }).collect();
            let meta = format!("{{{}}}", meta.join(","));
            let params: Vec<String> = params.iter().map(|&(k, v)| {
                let key = ["name", "arguments", "_meta", "inputResponses", "requestState", "name"][k];
                member(key, match (k, v) {
                    (2, 2..=5) => meta.as_str(),
                    (1, 3) => r#"{"a":1.50,"b":"x"}"#,
                    (3, 3) => r#"{"p":{"action":"cancel"}}"#,
                    _ => VALUES[v],
                })
            }).collect();
            let params = format!("{{{}}}", params.join(","));
            // The members a call has (mostly as a call has them), then others.
            let (version, id, method) = core;
            let mut members = vec![
                member("jsonrpc", if version < 3 { "\"2.0\"" } else { "\"1.0\"" }),
                member("id", VALUES[id]),
                member("method", if method < 3 { "\"tools/call\"" } else { "\"tools/list\"" }),
                member("params", &params),
            ];
            for &(k, v) in &extras {
                let key = ["jsonrpc", "id", "method", "params", "result", "error", "extra", "params"][k];
                members.push(member(key, if k == 3 { params.as_str() } else { VALUES[v] }));
            }
            let mut ordered: Vec<(u8, String)> = order.iter().copied().zip(members).collect();
            ordered.sort_by_key(|(weight, _)| *weight);
            let body = format!("{{{}}}", ordered.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join(","));
            for fast in [scan_tools_call(&body), serde_tools_call(&body)].iter().flatten() {
                let slow = through_value(&body);
                proptest::prop_assert!(slow.is_some(), "read as a call, not one by `Value`: {}", body);
                proptest::prop_assert_eq!(parts(fast), parts(&slow.expect("a call")), "{}", body);
            }
        }
    }
}
