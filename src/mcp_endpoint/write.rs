//! The response to a `tools/call` whose tool ran, written straight from the
//! call's result.
//!
//! Built as a `Value` (the tool's value parsed again out of the text it came
//! in, a map for every object, the text content made by serialising the value
//! once more) and then serialised whole, a call's response cost a large share
//! of an MCP call (benches/HISTORY.md, "Figures behind the code"). Its
//! envelope is fixed, so it is written with literal keys, as `wire/write.rs`
//! writes the OTC result, and the tool's value is spliced in as the upstream
//! wrote it. Keys come in the order serde_json's sorted maps wrote them and
//! strings are escaped as serde_json escapes them, so the response is the
//! JSON it was; only the tool's value (in `structuredContent` and, for a
//! value that is not a string, in the text content) keeps the upstream's
//! spelling instead of serde_json's.

use super::era::Era;
use crate::wire::{write_json, write_str, CallResult};

/// `_meta`'s server identity in a 2026-07-28 result, with the comma after it
/// (the call id follows): what `add_server_info` adds.
const SERVER_INFO: &str = concat!(
    r#""io.modelcontextprotocol/serverInfo":{"name":"otc-gateway","title":"OTC gateway","version":""#,
    env!("CARGO_PKG_VERSION"),
    r#""},"#
);

/// The JSON-RPC response, in `era`, to the `tools/call` whose id is the JSON
/// text `id` and whose tool ran to `result` (succeeded or failed): a
/// `CallToolResult`.
pub(crate) fn call_response(id: &str, result: &CallResult, era: Era) -> Vec<u8> {
    // The value's text, as the upstream wrote it (absent reads as `null`).
    let value = result.value.as_ref().map_or("null", |v| v.get().trim_ascii());
    let mut out = Vec::with_capacity(256 + id.len() + result.call_id.len() + 2 * value.len());
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    out.extend_from_slice(id.as_bytes());
    out.extend_from_slice(br#","result":{"_meta":{"#);
    if era == Era::R2026_07_28 {
        out.extend_from_slice(SERVER_INFO.as_bytes());
    }
    out.extend_from_slice(br#""otc-gateway/call_id":"#);
    write_str(&mut out, &result.call_id);
    if result.success {
        out.extend_from_slice(br#"},"content":[{"text":"#);
        if value.starts_with('"') {
            // A string value is its own text: the same string, escaped as
            // the upstream escaped it.
            out.extend_from_slice(value.as_bytes());
        } else {
            write_str(&mut out, value);
        }
        out.extend_from_slice(br#","type":"text"}],"isError":false"#);
        if era == Era::R2026_07_28 {
            out.extend_from_slice(br#","resultType":"complete""#);
        }
        if value.starts_with('{') {
            out.extend_from_slice(br#","structuredContent":"#);
            out.extend_from_slice(value.as_bytes());
        }
    } else {
        let error = result.error.as_ref().unwrap_or(&serde_json::Value::Null);
        out.extend_from_slice(br#","otc-gateway/error":"#);
        write_json(&mut out, error);
        out.extend_from_slice(br#"},"content":[{"text":"#);
        write_str(&mut out, error.get("message").and_then(|m| m.as_str()).unwrap_or("The tool failed"));
        out.extend_from_slice(br#","type":"text"}"#);
        // OTC's extra words for the model.
        if let Some(serde_json::Value::String(more)) = error.get("additional_prompt_content") {
            out.extend_from_slice(br#",{"text":"#);
            write_str(&mut out, more);
            out.extend_from_slice(br#","type":"text"}"#);
        }
        out.extend_from_slice(br#"],"isError":true"#);
        if era == Era::R2026_07_28 {
            out.extend_from_slice(br#","resultType":"complete""#);
        }
    }
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Map, Value};

    use super::super::{complete, tools::META};
    use super::*;
    use crate::mcp::jsonrpc::OutgoingResponse;
    use crate::wire::RawJson;

    /// The result as the front built it before this writer: a `Value` tree,
    /// completed for 2026-07-28, serialised by serde_json.
    fn through_values(id: &Value, result: &CallResult, era: Era) -> Vec<u8> {
        let mut answer = tool_result(result);
        if era == Era::R2026_07_28 {
            answer = complete(answer);
        }
        OutgoingResponse::result(id.clone(), Value::Object(answer)).to_bytes().to_vec()
    }

    /// `tools::tool_result` as it was: a finished call as a `CallToolResult`.
    fn tool_result(result: &CallResult) -> Map<String, Value> {
        if result.success {
            let value = result.value.as_ref().map_or(Value::Null, RawJson::to_value);
            let text = match &value {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            let mut answer = Map::new();
            answer.insert("content".into(), json!([{"type": "text", "text": text}]));
            answer.insert("isError".into(), Value::Bool(false));
            answer.insert("_meta".into(), json!({format!("{META}/call_id"): result.call_id}));
            if value.is_object() {
                answer.insert("structuredContent".into(), value);
            }
            return answer;
        }
        let error = result.error.clone().unwrap_or(Value::Null);
        let message = error.get("message").and_then(Value::as_str).unwrap_or("The tool failed");
        let mut content = vec![json!({"type": "text", "text": message})];
        if let Some(Value::String(more)) = error.get("additional_prompt_content") {
            content.push(json!({"type": "text", "text": more}));
        }
        let mut answer = Map::new();
        answer.insert("content".into(), Value::Array(content));
        answer.insert("isError".into(), Value::Bool(true));
        answer
            .insert("_meta".into(), json!({format!("{META}/call_id"): result.call_id, format!("{META}/error"): error}));
        answer
    }

    fn succeeded(value: Option<&str>) -> CallResult {
        CallResult {
            call_id: "0b8e6f1e-5d0c-4c55-9a57-3c1c6a0e2f10".into(),
            duration: 1.0,
            success: true,
            value: value.map(|text| serde_json::from_str(text).expect("raw JSON")),
            error: None,
        }
    }

    fn failed(error: Option<Value>) -> CallResult {
        CallResult { call_id: "c\"1".into(), duration: 1.0, success: false, value: None, error }
    }

    /// Every case, in both eras and with ids of each kind: the same JSON as
    /// the `Value` path, and byte for byte the same when the upstream wrote
    /// its value as serde_json would.
    fn assert_same(result: &CallResult, compact: bool) {
        for era in [Era::R2025_11_25, Era::R2026_07_28] {
            for id in ["7", "\"req-1\"", "12345678901234567890123", "-0", "1.000000000000000000001", "\"\\\"q\\\"\""] {
                let id_value: Value = serde_json::from_str(id).expect("id");
                let written = call_response(id, result, era);
                let expected = through_values(&id_value, result, era);
                let (got, want): (Value, Value) = (
                    serde_json::from_slice(&written).expect("the writer wrote JSON"),
                    serde_json::from_slice(&expected).expect("serde wrote JSON"),
                );
                assert_eq!(got, want, "{era:?} {id}: {}", String::from_utf8_lossy(&written));
                if compact {
                    assert_eq!(String::from_utf8_lossy(&written), String::from_utf8_lossy(&expected), "{era:?} {id}");
                }
                // The id keeps its digits.
                let text = String::from_utf8_lossy(&written);
                assert!(text.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"#)), "{text}");
            }
        }
    }

    #[test]
    fn a_finished_call_is_written_as_the_value_path_wrote_it() {
        for value in [
            r#""fifteen""#,
            "15",
            "-2.5e-3",
            "123456789012345678901234567890",
            "true",
            "null",
            r#"{"a":1,"b":[true,null,"x"]}"#,
            r#"{"big":123456789012345678901234567890}"#,
            r#"[1,"two",{"three":3}]"#,
            r#""line\nbreak \"quoted\" back\\slash \u0001 tab\t é 😀""#,
            "{}",
            "[]",
            r#""""#,
        ] {
            assert_same(&succeeded(Some(value)), true);
        }
        assert_same(&succeeded(None), true);
    }

    #[test]
    fn a_value_keeps_the_upstreams_spelling() {
        // Whitespace, key order and escapes as the upstream wrote them: the
        // same JSON value in `structuredContent`, and its text as written.
        let spelt = r#"{ "b": 1, "a": "\u00e9", "n": 1.50 }"#;
        let written = call_response("1", &succeeded(Some(spelt)), Era::R2026_07_28);
        let got: Value = serde_json::from_slice(&written).expect("JSON");
        let same: Value = serde_json::from_str(r#"{"a":"é","b":1,"n":1.50}"#).expect("JSON");
        assert_eq!(got["result"]["structuredContent"], same);
        assert_eq!(got["result"]["content"][0]["text"], spelt);
        let text = String::from_utf8(written).expect("utf-8");
        assert!(text.contains(r#""structuredContent":{ "b": 1, "a": "\u00e9", "n": 1.50 }"#), "{text}");
        // A string value with escapes: its text is that string.
        assert_same(&succeeded(Some(r#""caf\u00e9 \/ \ud83d\ude00""#)), false);
    }

    #[test]
    fn a_tool_error_is_written_as_the_value_path_wrote_it() {
        for error in [
            Some(json!({"message": "boom", "developer_message": "stack\ttrace", "can_retry": true})),
            Some(json!({"message": "boom", "additional_prompt_content": "try again with \"b\""})),
            Some(json!({"message": 5, "additional_prompt_content": ["not", "text"]})),
            Some(json!({"developer_message": "no message", "n": 123456789012345678901234567890u128})),
            Some(json!("a bare string")),
            Some(Value::Null),
            None,
        ] {
            assert_same(&failed(error), true);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 256, ..Default::default() })]

        /// Whatever strings a result holds, the response is the JSON the
        /// `Value` path wrote, byte for byte.
        #[test]
        fn any_strings_are_written_as_the_value_path_wrote_them(
            call_id in ".{0,40}", text in "\\PC{0,40}", message in "[\\x00-\\x{10ffff}]{0,30}", key in "[\\x00-\\x7f]{0,12}",
        ) {
            let value = serde_json::to_string(&json!({key.clone(): text.clone()})).expect("json");
            let result = CallResult { call_id: call_id.clone(), ..succeeded(Some(&value)) };
            for era in [Era::R2025_11_25, Era::R2026_07_28] {
                let written = call_response("3", &result, era);
                proptest::prop_assert_eq!(written, through_values(&json!(3), &result, era));
                let as_string = CallResult { value: Some(RawJson::from(json!(text.clone()))), ..result.clone() };
                proptest::prop_assert_eq!(call_response("3", &as_string, era), through_values(&json!(3), &as_string, era));
                let error = CallResult {
                    call_id: call_id.clone(),
                    ..failed(Some(json!({"message": message.clone(), "additional_prompt_content": key.clone()})))
                };
                proptest::prop_assert_eq!(call_response("3", &error, era), through_values(&json!(3), &error, era));
            }
        }
    }
}
