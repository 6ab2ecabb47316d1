//! Writers for the two bodies every call produces: the request sent upstream
//! and the result the client gets.
//!
//! Their envelopes are fixed, so the keys are written as literals and only
//! the values are escaped. Through serde's derive each key was escaped again
//! on every call, a noticeable share of a call's instructions
//! (benches/HISTORY.md, "Figures behind the code"). What is not fixed (the input, extra
//! context fields, a tool error) is still written by serde_json.

use serde::Serialize;
use serde_json::{Map, Value};

use super::scan::{is_special, special_bytes};
use super::{CallContext, CallResult, UpstreamCallRequest, SCHEMA};

/// Room for a typical call, so the buffer does not grow by doubling.
const TYPICAL_BODY: usize = 512;

/// `{"$schema":"otc://1.0","request":{...}}`: the body sent to an OTC
/// upstream, always the wrapped 1.0 form. Optional fields are left out when
/// empty, as the protocol's own serialisation would.
pub fn upstream_call_body(request: &UpstreamCallRequest<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(TYPICAL_BODY);
    out.extend_from_slice(br#"{"$schema":""#);
    out.extend_from_slice(SCHEMA.as_bytes());
    out.extend_from_slice(br#"","request":{"tool_id":"#);
    write_str(&mut out, request.tool_id);
    out.extend_from_slice(br#","call_id":"#);
    write_str(&mut out, request.call_id);
    if let Some(trace_id) = request.trace_id {
        out.extend_from_slice(br#","trace_id":"#);
        write_str(&mut out, trace_id);
    }
    out.extend_from_slice(br#","input":"#);
    request.input.write(&mut out);
    if !request.context.is_empty() {
        out.extend_from_slice(br#","context":"#);
        write_context(&mut out, request.context);
    }
    out.extend_from_slice(b"}}");
    out
}

/// `{"$schema":"otc://1.0","result":{...}}`: the only shape the gateway
/// answers a call with.
pub fn call_response_body(result: &CallResult) -> Vec<u8> {
    let value_len = result.value.as_ref().map_or(0, |v| v.get().len());
    let mut out = Vec::with_capacity(128 + result.call_id.len() + value_len);
    out.extend_from_slice(br#"{"$schema":""#);
    out.extend_from_slice(SCHEMA.as_bytes());
    out.extend_from_slice(br#"","result":{"call_id":"#);
    write_str(&mut out, &result.call_id);
    out.extend_from_slice(br#","duration":"#);
    write_json(&mut out, &result.duration);
    out.extend_from_slice(if result.success { br#","success":true"# } else { br#","success":false"# });
    if let Some(value) = &result.value {
        out.extend_from_slice(br#","value":"#);
        // Raw JSON text as the upstream wrote it: valid JSON by construction.
        out.extend_from_slice(value.get().as_bytes());
    }
    if let Some(error) = &result.error {
        out.extend_from_slice(br#","error":"#);
        write_json(&mut out, error);
    }
    out.extend_from_slice(b"}}");
    out
}

/// `context`: `authorization`, `secrets` and `user_id` when present, then
/// whatever else the client sent.
fn write_context(out: &mut Vec<u8>, context: &CallContext) {
    let mut first = true;
    let mut key = |out: &mut Vec<u8>, name: &[u8]| {
        out.extend_from_slice(if first { b"{\"" } else { b",\"" });
        out.extend_from_slice(name);
        out.extend_from_slice(b"\":");
        first = false;
    };
    if !context.authorization.is_empty() {
        key(out, b"authorization");
        write_list(out, &context.authorization, |out, t| write_entry(out, &t.id, b"token", &t.token, &t.extra));
    }
    if !context.secrets.is_empty() {
        key(out, b"secrets");
        write_list(out, &context.secrets, |out, s| write_entry(out, &s.id, b"value", &s.value, &s.extra));
    }
    if let Some(user_id) = &context.user_id {
        key(out, b"user_id");
        write_str(out, user_id);
    }
    for (name, value) in &context.extra {
        out.extend_from_slice(if first { b"{" } else { b"," });
        first = false;
        write_str(out, name);
        out.push(b':');
        write_json(out, value);
    }
    out.push(b'}');
}

/// `[a,b,...]`, each item written by `item`.
fn write_list<T>(out: &mut Vec<u8>, items: &[T], item: impl Fn(&mut Vec<u8>, &T)) {
    out.push(b'[');
    for (i, each) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        item(out, each);
    }
    out.push(b']');
}

/// One `authorization[]` or `secrets[]` entry: `{"id":..,"<field>":..,...}`.
fn write_entry(out: &mut Vec<u8>, id: &str, field: &[u8], value: &str, extra: &Map<String, Value>) {
    out.extend_from_slice(br#"{"id":"#);
    write_str(out, id);
    out.extend_from_slice(b",\"");
    out.extend_from_slice(field);
    out.extend_from_slice(b"\":");
    write_str(out, value);
    write_extra(out, extra);
}

/// The rest of an object whose fixed fields are written: `,"k":v...}`.
fn write_extra(out: &mut Vec<u8>, extra: &Map<String, Value>) {
    for (name, value) in extra {
        out.push(b',');
        write_str(out, name);
        out.push(b':');
        write_json(out, value);
    }
    out.push(b'}');
}

/// A JSON string. Most strings a call carries (ids, keys) need no escape:
/// those are copied whole; any other is left to serde_json, so escapes are
/// spelt as it spells them.
pub(crate) fn write_str(out: &mut Vec<u8>, text: &str) {
    if needs_escape(text.as_bytes()) {
        write_json(out, text);
    } else {
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

/// Whether `bytes` holds a control character, `"` or `\`: the bytes JSON
/// must escape. Eight bytes at a time: byte by byte it cost more
/// (benches/HISTORY.md, "Figures behind the code").
fn needs_escape(bytes: &[u8]) -> bool {
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut eight = [0u8; 8];
        eight.copy_from_slice(word);
        // Nonzero exactly when some byte is one of them.
        if special_bytes(u64::from_le_bytes(eight)) != 0 {
            return true;
        }
    }
    words.remainder().iter().any(|&b| is_special(b))
}

/// Any value through serde_json. Writing a `Value`, a number or a string
/// into a `Vec` cannot fail. A number in a `Value` is written as the text it
/// was read from (serde_json's `arbitrary_precision`): an input's
/// `98765432109876543210` reaches the upstream as those digits.
pub(crate) fn write_json<T: Serialize + ?Sized>(out: &mut Vec<u8>, value: &T) {
    let _ = serde_json::to_writer(out, value);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::wire::{AuthorizationToken, Input, RawJson, SecretValue};

    fn parsed(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).expect("the writer wrote JSON")
    }

    #[test]
    fn an_upstream_body_carries_the_call_and_only_the_context_it_has() {
        let input = json!({"a": 1, "text": "line\n\"quoted\" \\ \u{1}"});
        let bare = UpstreamCallRequest {
            tool_id: "Kit.Tool@1.0.0",
            call_id: "c-1",
            trace_id: None,
            input: &Input::from_value(input.clone()),
            context: &CallContext::default(),
        };
        assert_eq!(
            parsed(&upstream_call_body(&bare)),
            json!({"$schema": "otc://1.0", "request": {"tool_id": "Kit.Tool@1.0.0", "call_id": "c-1", "input": input}})
        );

        let mut extra = Map::new();
        extra.insert("scope\t\"x\"".into(), json!(["a", {"b": null}]));
        let context = CallContext {
            authorization: vec![AuthorizationToken {
                id: "google".into(),
                token: "tok\"en".into(),
                extra: extra.clone(),
            }],
            secrets: vec![
                SecretValue { id: "KEY".into(), value: "v\u{7}".into(), extra: Map::new() },
                SecretValue { id: "OTHER".into(), value: "é".into(), extra: Map::new() },
            ],
            user_id: Some("ann".into()),
            extra,
        };
        let full = UpstreamCallRequest { trace_id: Some("t\"1"), context: &context, ..bare };
        assert_eq!(
            parsed(&upstream_call_body(&full)),
            json!({"$schema": "otc://1.0", "request": {
            "tool_id": "Kit.Tool@1.0.0", "call_id": "c-1", "trace_id": "t\"1", "input": input,
            "context": {
                "authorization": [{"id": "google", "token": "tok\"en", "scope\t\"x\"": ["a", {"b": null}]}],
                "secrets": [{"id": "KEY", "value": "v\u{7}"}, {"id": "OTHER", "value": "é"}],
                "user_id": "ann",
                "scope\t\"x\"": ["a", {"b": null}],
            }}})
        );
    }

    #[test]
    fn a_context_with_only_extra_fields_is_an_object() {
        let mut extra = Map::new();
        extra.insert("locale".into(), json!("fr"));
        extra.insert("tz".into(), json!("UTC"));
        let context = CallContext { extra, ..CallContext::default() };
        let input = Input::default();
        let request =
            UpstreamCallRequest { tool_id: "K.T", call_id: "c", trace_id: None, input: &input, context: &context };
        assert_eq!(parsed(&upstream_call_body(&request))["request"]["context"], json!({"locale": "fr", "tz": "UTC"}));
    }

    #[test]
    fn a_result_is_written_as_serde_would_write_it() {
        let cases = [
            CallResult {
                call_id: "c\"1".into(),
                duration: 1.5,
                success: true,
                value: Some(json!({"x": [1, 2]}).into()),
                error: None,
            },
            CallResult { call_id: "c".into(), duration: 2.0, success: true, value: Some(RawJson::null()), error: None },
            CallResult {
                call_id: "c".into(),
                duration: 0.123,
                success: false,
                value: None,
                error: Some(json!({"message": "m\n", "can_retry": true})),
            },
        ];
        for result in cases {
            let written = call_response_body(&result);
            assert_eq!(parsed(&written), json!({"$schema": "otc://1.0", "result": result}));
            // Byte for byte what serde's derive wrote before these writers.
            let by_serde = serde_json::to_vec(&json!({"$schema": "otc://1.0", "result": result})).expect("json");
            assert_eq!(written.len(), by_serde.len(), "{}", String::from_utf8_lossy(&written));
        }
    }

    #[test]
    fn every_byte_json_must_escape_is_found_wherever_it_stands() {
        for len in 0..20 {
            let plain = "a".repeat(len);
            assert!(!needs_escape(plain.as_bytes()), "{plain:?}");
            for at in 0..len {
                for bad in (0u8..0x20).chain([b'"', b'\\']) {
                    let mut bytes = plain.clone().into_bytes();
                    bytes[at] = bad;
                    assert!(needs_escape(&bytes), "{bytes:?}");
                }
            }
        }
        // Bytes around the escaped ones, and UTF-8, need none.
        assert!(!needs_escape("  !#[]~\u{7f}é€😀 ".as_bytes()));
        assert!(!needs_escape(&[0x7f, 0x80, 0xff, 0x21, 0x23, 0x5b, 0x5d, 0x20, 0x7e, 0xc3, 0xa9, 0x41, 0x42]));
    }

    #[test]
    fn a_value_is_passed_through_as_the_upstream_wrote_it() {
        let value: RawJson =
            serde_json::from_str(r#"{"big": 123456789012345678901234567890, "s": "\u00e9"}"#).expect("raw");
        let result = CallResult { call_id: "c".into(), duration: 1.0, success: true, value: Some(value), error: None };
        let written = String::from_utf8(call_response_body(&result)).expect("utf-8");
        assert!(written.contains(r#""value":{"big": 123456789012345678901234567890, "s": "\u00e9"}"#), "{written}");
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// Whatever the strings hold (quotes, backslashes, control bytes,
        /// any Unicode), the bodies are JSON with exactly those values.
        #[test]
        fn any_strings_are_written_as_the_json_they_stand_for(
            tool_id in "\\PC{0,40}", call_id in ".{0,40}", trace_id in proptest::option::of("[\\x00-\\x7f]{0,20}"),
            secret in "[\\x00-\\x{10ffff}]{0,30}", key in "[\\x00-\\x7f]{0,12}", duration in proptest::num::f64::NORMAL,
        ) {
            let mut extra = Map::new();
            extra.insert(key.clone(), Value::String(secret.clone()));
            let context = CallContext {
                secrets: vec![SecretValue { id: key.clone(), value: secret.clone(), extra: Map::new() }],
                user_id: Some(call_id.clone()),
                extra,
                ..CallContext::default()
            };
            let input = json!({"s": secret});
            let request = UpstreamCallRequest {
                tool_id: &tool_id, call_id: &call_id, trace_id: trace_id.as_deref(),
                input: &Input::from_value(input.clone()), context: &context,
            };
            let mut expected = json!({"tool_id": tool_id, "call_id": call_id, "input": input, "context": {
                "secrets": [{"id": key, "value": secret}], "user_id": call_id,
            }});
            expected["context"][key.as_str()] = Value::String(secret.clone());
            if let Some(trace_id) = &trace_id {
                expected["trace_id"] = Value::String(trace_id.clone());
            }
            proptest::prop_assert_eq!(parsed(&upstream_call_body(&request)), json!({"$schema": "otc://1.0", "request": expected}));

            let result = CallResult { call_id: call_id.clone(), duration, success: true, value: Some(json!(secret).into()), error: None };
            // Byte for byte what serde writes (its maps keep these keys in this order).
            let by_serde = serde_json::to_vec(&json!({"$schema": "otc://1.0", "result": result})).expect("json");
            let written = call_response_body(&result);
            proptest::prop_assert_eq!(String::from_utf8_lossy(&written), String::from_utf8_lossy(&by_serde));
        }

        #[test]
        fn the_escape_check_agrees_with_a_byte_by_byte_one(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let slow = bytes.iter().any(|&b| b < 0x20 || b == b'"' || b == b'\\');
            proptest::prop_assert_eq!(needs_escape(&bytes), slow);
        }
    }
}
