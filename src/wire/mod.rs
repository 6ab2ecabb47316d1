//! The OTC 1.0 wire types, in one place, with serde.
//!
//! The gateway is strict in what it emits and lenient in what it accepts
//! (docs/api.md). Types here are the canonical forms; the lenient
//! readers (`CallBody`, [`normalise_tool_response`]) fold the older shapes into
//! them at the edge so nothing past this module knows those shapes existed.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

mod input;
mod scan;
mod write;

pub use input::{Input, Kind, Members};
pub(crate) use scan::Scanner;

pub use write::{call_response_body, upstream_call_body};
pub(crate) use write::{write_json, write_str};

/// The `$schema` value on every body the gateway emits.
pub const SCHEMA: &str = "otc://1.0";

/// A tool definition in its canonical form: `input_schema` flat, never wrapped
/// in `parameters`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDefinition {
    /// `Toolkit.Name@x.y.z`.
    pub id: String,
    /// `[A-Za-z0-9_-]{1,64}`.
    pub name: String,
    /// What the tool does, for a model to read.
    pub description: String,
    /// `x.y.z`.
    pub version: String,
    /// A JSON Schema for the call's `input` object. Kept as JSON text: ten
    /// thousand schemas as `Value` trees held more (benches/HISTORY.md, "Figures behind the code").
    pub input_schema: RawJson,
    /// A JSON Schema for the value, `null` for a tool without output.
    #[serde(default)]
    pub output_schema: RawJson,
    /// What the caller must supply in `context`; the gateway injects it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<Requirements>,
}

/// `requirements` of a tool definition (OTC 1.0, the tool definition's schema).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Requirements {
    /// Per-user authorization providers (OAuth 2.0 and alike).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authorization: Vec<AuthorizationRequirement>,
    /// Secrets the tool needs (API keys).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretRequirement>,
    /// Whether the tool needs the calling user's id.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub user_id: bool,
    /// Fields this version of the spec does not name, kept as they came.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One `requirements.authorization[]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuthorizationRequirement {
    /// The provider id, e.g. `google`.
    pub id: String,
    /// Provider details (`oauth2.scopes`), passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AuthorizationRequirement {
    /// The `oauth2.scopes` the tool asks for (entries that are not scope
    /// tokens are left out).
    pub fn scopes(&self) -> impl Iterator<Item = &str> {
        let scopes = self.extra.get("oauth2").and_then(|o| o.get("scopes")).and_then(Value::as_array);
        scopes.into_iter().flatten().filter_map(Value::as_str).filter(|s| crate::config::scope_ok(s))
    }
}

/// One `requirements.secrets[]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecretRequirement {
    /// The secret's id, e.g. `TWILIO_API_KEY`.
    pub id: String,
    /// Anything else the definition says about it, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The body of `POST /tools/call` as a client may send it: wrapped in
/// `request` or bare, with `input` or `inputs`. Unknown fields are ignored.
#[derive(Debug, Default, Deserialize)]
pub struct CallBody {
    /// The OTC version the client speaks; none means the latest.
    #[serde(rename = "$schema", default)]
    pub schema: Option<String>,
    /// The wrapped form: `{"$schema", "request": {...}}`.
    #[serde(default)]
    pub request: Option<Box<CallBody>>,
    /// `Toolkit.Name[@version]`.
    #[serde(default)]
    pub tool_id: Option<String>,
    /// The idempotency key; generated when missing.
    #[serde(default)]
    pub call_id: Option<String>,
    /// Passed to the upstream as it came.
    #[serde(default)]
    pub trace_id: Option<String>,
    /// The tool's input.
    #[serde(default)]
    pub input: Option<Input>,
    /// The older spelling of `input`.
    #[serde(default)]
    pub inputs: Option<Input>,
    /// Execution context; the gateway fills in what it manages.
    #[serde(default)]
    pub context: Option<CallContext>,
}

/// `context` of a call request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CallContext {
    /// Per-provider tokens.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authorization: Vec<AuthorizationToken>,
    /// Secret values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<SecretValue>,
    /// The calling user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
    /// Anything else the client put in `context`, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl CallContext {
    /// True when there is nothing to send.
    pub fn is_empty(&self) -> bool {
        self.authorization.is_empty() && self.secrets.is_empty() && self.user_id.is_none() && self.extra.is_empty()
    }
}

/// One `context.authorization[]` entry.
#[derive(Clone, Serialize, Deserialize)]
pub struct AuthorizationToken {
    /// The provider id.
    pub id: String,
    /// The token itself.
    pub token: String,
    /// Anything else, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One `context.secrets[]` entry.
#[derive(Clone, Serialize, Deserialize)]
pub struct SecretValue {
    /// The secret's id.
    pub id: String,
    /// The secret itself.
    pub value: String,
    /// Anything else, passed through.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

// Tokens and secret values must never reach a log line, even through `{:?}`.
impl std::fmt::Debug for AuthorizationToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthorizationToken").field("id", &self.id).field("token", &"***").finish()
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretValue").field("id", &self.id).field("value", &"***").finish()
    }
}

/// The `request` object sent upstream, written by [`upstream_call_body`].
#[derive(Debug, Clone, Copy)]
pub struct UpstreamCallRequest<'a> {
    /// The id as the upstream published it.
    pub tool_id: &'a str,
    /// The call id, generated by the gateway when the client sent none.
    pub call_id: &'a str,
    /// The client's trace id, when it sent one.
    pub trace_id: Option<&'a str>,
    /// The validated input (always an object).
    pub input: &'a Input,
    /// The context with everything the gateway manages filled in; left out
    /// when empty.
    pub context: &'a CallContext,
}

/// A call's outcome in canonical form (`CallToolResponse`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CallResult {
    /// The call id.
    pub call_id: String,
    /// Milliseconds the call took.
    pub duration: f64,
    /// Whether the tool succeeded.
    pub success: bool,
    /// The tool's value (present, maybe `null`, when it succeeded), as the
    /// upstream wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<RawJson>,
    /// The tool's error, passed through unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// A `ToolError` the gateway writes itself (timeouts, broken upstream answers).
pub fn tool_error(message: &str, developer_message: &str, can_retry: bool) -> Value {
    let mut error = Map::new();
    error.insert("message".into(), Value::String(message.into()));
    error.insert("developer_message".into(), Value::String(developer_message.into()));
    if can_retry {
        error.insert("can_retry".into(), Value::Bool(true));
    }
    Value::Object(error)
}

/// Why an upstream's call answer could not be read as a `CallToolResponse`.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum ResponseShapeError {
    /// Not JSON at all.
    #[error("the tool server's answer is not JSON: {0}")]
    NotJson(String),
    /// JSON, but none of the accepted shapes.
    #[error("the tool server's answer is not a call result: {0}")]
    NotAResult(&'static str),
}

/// Reads an upstream's answer in any accepted shape: wrapped in `result`,
/// bare, or the older `output: {value | error}`. The fields are borrowed as
/// raw JSON text: a tool's value passes through without being built into a
/// `Value` tree and written out again (which cost a noticeable share of a
/// call (benches/HISTORY.md, "Figures behind the code")).
pub fn normalise_tool_response(body: &[u8]) -> Result<UpstreamResult, ResponseShapeError> {
    match std::str::from_utf8(body).ok().and_then(scan::answer) {
        Some(fields) => finish_answer(fields),
        None => normalise_by_serde(body),
    }
}

/// [`normalise_tool_response`] by serde_json: every shape, and the errors
/// (`scan.rs` reads only the common ones).
fn normalise_by_serde(body: &[u8]) -> Result<UpstreamResult, ResponseShapeError> {
    let answer: ResultBody<'_> = parse_object(body)?;
    let mut fields = answer.result.unwrap_or(answer.bare);
    // The older shape: `output: {value}` or `output: {error}`.
    if let Some(output) = fields.output.filter(|o| o.get().starts_with('{')) {
        let output: OutputFields<'_> = parse_object(output.get().as_bytes())?;
        fields.value = output.value.or(fields.value);
        fields.error = output.error.or(fields.error);
    }
    finish_answer(scan::AnswerFields {
        value: fields.value.map(RawValue::get),
        error: fields.error.map(RawValue::get),
        success: fields.success.map(RawValue::get),
        duration: fields.duration.map(RawValue::get),
    })
}

/// An answer's fields, each as its JSON text, as a result.
fn finish_answer(fields: scan::AnswerFields<'_>) -> Result<UpstreamResult, ResponseShapeError> {
    let error = fields.error.filter(|e| *e != "null");
    let success = match fields.success {
        Some("true") => true,
        Some("false") => false,
        Some(_) => return Err(ResponseShapeError::NotAResult("`success` is not a boolean")),
        None => error.is_none(),
    };
    if !success && error.is_none() {
        return Err(ResponseShapeError::NotAResult("`success` is false but there is no `error`"));
    }
    Ok(UpstreamResult {
        // The text of a JSON value: a number parses alike as JSON and as a
        // Rust float; anything else is no duration, nor is a number past any
        // float (`1e400`, JSON but infinite as an f64).
        duration: fields.duration.and_then(|v| v.parse::<f64>().ok()).filter(|d| d.is_finite()),
        success,
        // Both readers found the text to be one JSON value.
        value: success.then(|| {
            fields.value.and_then(|v| RawValue::from_string(v.to_owned()).ok()).map_or_else(RawJson::null, RawJson)
        }),
        // Errors are rare, and small: they are read as a `Value`.
        error: error.and_then(|e| serde_json::from_str(e).ok()),
    })
}

/// An answer as read: its `result` object when it has one (the wrapped
/// shape), and the fields found beside it (the bare shape).
struct ResultBody<'a> {
    result: Option<ResultFields<'a>>,
    bare: ResultFields<'a>,
}

/// The fields of an answer (or of its `result`) that the gateway reads,
/// each as borrowed JSON text; a field that is JSON `null` is still `Some`.
/// Read in one pass, `result` included, and only from a JSON object. (The
/// upstream's `call_id` is not read: the client gets the gateway's.)
#[derive(Default)]
struct ResultFields<'a> {
    output: Option<&'a RawValue>,
    value: Option<&'a RawValue>,
    error: Option<&'a RawValue>,
    success: Option<&'a RawValue>,
    duration: Option<&'a RawValue>,
}

/// The keys [`ResultFields`] reads; any other is skipped.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "snake_case")]
enum ResultKey {
    Result,
    Output,
    Value,
    Error,
    Success,
    Duration,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for ResultBody<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(ResultVisitor { top: true })
    }
}

/// Reads an answer object; `top` says whether `result` is read (it is only
/// at the top level, as the wrapped shape has it).
struct ResultVisitor {
    top: bool,
}

impl<'de> serde::de::DeserializeSeed<'de> for ResultVisitor {
    type Value = ResultBody<'de>;

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for ResultVisitor {
    type Value = ResultBody<'de>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.top { "a JSON object" } else { "`result` to be a JSON object" })
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut result = None;
        let mut bare = ResultFields::default();
        while let Some(key) = map.next_key::<ResultKey>()? {
            // Later duplicates win, as in a JSON object read into a map.
            let slot = match key {
                ResultKey::Result if self.top => {
                    result = Some(map.next_value_seed(ResultVisitor { top: false })?.bare);
                    continue;
                }
                ResultKey::Result | ResultKey::Other => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    continue;
                }
                ResultKey::Output => &mut bare.output,
                ResultKey::Value => &mut bare.value,
                ResultKey::Error => &mut bare.error,
                ResultKey::Success => &mut bare.success,
                ResultKey::Duration => &mut bare.duration,
            };
            *slot = Some(map.next_value()?);
        }
        Ok(ResultBody { result, bare })
    }
}

/// The older shape's `output` object.
#[derive(Deserialize)]
struct OutputFields<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    value: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    error: Option<&'a RawValue>,
}

/// A field that is there, `null` included (`Option`'s own reading would
/// make `null` absent).
fn present<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(deserializer).map(Some)
}

/// Parses `text` as a JSON object into `T`, telling text that is not JSON
/// from JSON that is not an object.
fn parse_object<'a, T: Deserialize<'a>>(text: &'a [u8]) -> Result<T, ResponseShapeError> {
    if text.trim_ascii_start().first() != Some(&b'{') {
        return Err(match from_json::<serde::de::IgnoredAny>(text) {
            Ok(_) => ResponseShapeError::NotAResult("not an object"),
            Err(e) => ResponseShapeError::NotJson(e.to_string()),
        });
    }
    from_json(text).map_err(|e| ResponseShapeError::NotJson(e.to_string()))
}

/// A call's body: read by hand in the common shape (`scan.rs`), else by
/// serde_json, whose errors the client gets.
pub fn read_call_body(body: &[u8]) -> serde_json::Result<CallBody> {
    match std::str::from_utf8(body).ok().and_then(scan::call_body) {
        Some(call) => Ok(call),
        None => from_json(body),
    }
}

/// An input object's text (an MCP call's `arguments`): kept as its text in
/// the common shape (`scan.rs`), else read by serde_json; `None` when it is
/// not an object.
pub fn read_input(text: &str) -> Option<Input> {
    scan::input(text).or_else(|| match serde_json::from_str(text) {
        Ok(value @ Value::Object(_)) => Some(Input::from_value(value)),
        _ => None,
    })
}

/// Parses JSON bytes, checking once up front that they are UTF-8.
/// serde_json's reader for bytes checks every string on its own, keys
/// included, which costs more than one check of each whole
/// (benches/HISTORY.md, "Figures behind the code"). Text that is not UTF-8 is read by
/// that reader after all, for its error and position.
pub fn from_json<'a, T: Deserialize<'a>>(body: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(body) {
        Ok(text) => serde_json::from_str(text),
        Err(_) => serde_json::from_slice(body),
    }
}

/// An upstream's answer after [`normalise_tool_response`].
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamResult {
    /// The duration the upstream reported, if any.
    pub duration: Option<f64>,
    /// Whether the tool succeeded.
    pub success: bool,
    /// The value when it succeeded.
    pub value: Option<RawJson>,
    /// The error when it failed.
    pub error: Option<Value>,
}

/// A JSON value kept as its text. A tool's value is passed from the
/// upstream's answer to the client's as it came; equality compares the
/// values, not their spelling.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RawJson(Box<RawValue>);

impl RawJson {
    /// JSON `null`.
    pub fn null() -> RawJson {
        RawJson(RawValue::NULL.to_owned())
    }

    /// The JSON text of `value`.
    pub fn from_value(value: &Value) -> RawJson {
        // A `Value` always serialises.
        RawJson(serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned()))
    }

    /// The value, parsed.
    pub fn to_value(&self) -> Value {
        // The text was valid JSON when it was captured.
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }
}

impl PartialEq for RawJson {
    fn eq(&self, other: &RawJson) -> bool {
        self.get() == other.get() || self.to_value() == other.to_value()
    }
}

impl Default for RawJson {
    /// JSON `null`.
    fn default() -> RawJson {
        RawJson::null()
    }
}

impl From<Value> for RawJson {
    fn from(value: Value) -> RawJson {
        RawJson::from_value(&value)
    }
}

/// Body of a 400 (`ServerErrorResponse`).
#[derive(Serialize)]
pub struct ServerErrorBody<'a> {
    /// Always [`SCHEMA`].
    #[serde(rename = "$schema")]
    pub schema: &'static str,
    /// For a person.
    pub message: &'a str,
    /// The detail, for logs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub developer_message: Option<&'a str>,
    /// What the caller lacks (1.0 openapi `missing_requirements`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missing_requirements: Option<&'a Value>,
}

/// Body of a 422 (`ValidationErrorResponse`).
#[derive(Serialize)]
pub struct ValidationErrorBody<'a> {
    /// Always [`SCHEMA`].
    #[serde(rename = "$schema")]
    pub schema: &'static str,
    /// For a person.
    pub message: &'a str,
    /// Parameter name to what is wrong with it.
    pub parameter_errors: &'a std::collections::BTreeMap<String, String>,
}

/// Whether `body`'s JSON nesting stays within `max` levels. A byte scan
/// (strings skipped) that runs before the parser, so nesting far beyond any
/// real tool input is refused without recursing into it.
pub fn nesting_within(body: &[u8], max: usize) -> bool {
    // Deeper than `max` takes more than `max` opening brackets. Counting
    // them is a loop the compiler vectorises, and it settles most bodies.
    opening_brackets(body) <= max || nesting_scan_within(body, max)
}

/// How many `{` and `[` `body` holds, strings included. Counted in byte-wide
/// lanes, a chunk of at most 255 bytes at a time so that no lane overflows:
/// summed as a `usize` per byte, the count cost more (benches/HISTORY.md, "Figures behind the code").
fn opening_brackets(body: &[u8]) -> usize {
    body.chunks(255)
        .map(|chunk| usize::from(chunk.iter().fold(0u8, |n, &b| n + u8::from(b == b'{' || b == b'['))))
        .sum()
}

/// [`nesting_within`]'s scan, string by string. Bytes are classed by a
/// table: a `match` on each cost more (benches/HISTORY.md, "Figures behind the code").
fn nesting_scan_within(body: &[u8], max: usize) -> bool {
    const OTHER: u8 = 0;
    const QUOTE: u8 = 1;
    const OPEN: u8 = 2;
    const CLOSE: u8 = 3;
    static CLASS: [u8; 256] = {
        let mut class = [OTHER; 256];
        class[b'"' as usize] = QUOTE;
        class[b'[' as usize] = OPEN;
        class[b'{' as usize] = OPEN;
        class[b']' as usize] = CLOSE;
        class[b'}' as usize] = CLOSE;
        class
    };
    let mut depth = 0usize;
    let mut i = 0;
    while let Some(&b) = body.get(i) {
        match CLASS[usize::from(b)] {
            QUOTE => {
                // To the closing quote; an escape skips the byte after it.
                i += 1;
                loop {
                    match body.get(i) {
                        None => return true,
                        Some(b'"') => break,
                        Some(b'\\') => i += 2,
                        Some(_) => i += 1,
                    }
                }
            }
            OPEN => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            CLOSE => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    true
}

/// Whether a client's `$schema` names a version the gateway speaks.
pub fn is_supported_schema(schema: &str) -> bool {
    match schema {
        "otc://1.0" | "urn:oxp:1.0" | "urn:otc:1.0" => true,
        long => {
            // The long GitHub URLs of the 1.0 spec, e.g.
            // https://github.com/OpenToolCalling/specification/.../1.0/...
            (long.starts_with("https://github.com/") || long.starts_with("https://raw.githubusercontent.com/"))
                && long.split('/').any(|segment| segment == "1.0")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_that_is_not_utf8_is_refused_with_the_readers_position() {
        let mut body = br#"{"a": ""#.to_vec();
        body.extend_from_slice(&[0xff, 0xfe]);
        body.extend_from_slice(br#""}"#);
        let err = from_json::<Value>(&body).expect_err("not UTF-8");
        assert!(err.to_string().starts_with("invalid unicode code point at line 1 column 8"), "{err}");

        let text = r#"{"a": "né", "b": [1, 2.5, null]}"#;
        assert_eq!(
            from_json::<Value>(text.as_bytes()).expect("json"),
            serde_json::from_str::<Value>(text).expect("json")
        );
    }

    #[test]
    fn reads_wrapped_bare_and_output_shapes_alike() {
        let wrapped = json!({"$schema": "otc://1.0", "result": {"call_id": "c", "success": true, "value": 15}});
        let bare = json!({"call_id": "c", "success": true, "value": 15});
        let older = json!({"call_id": "c", "success": true, "output": {"value": 15}});
        let a = normalise_tool_response(wrapped.to_string().as_bytes()).expect("wrapped");
        let b = normalise_tool_response(bare.to_string().as_bytes()).expect("bare");
        let c = normalise_tool_response(older.to_string().as_bytes()).expect("older");
        assert_eq!(a, b);
        assert_eq!(b, c);
        assert_eq!(a.value, Some(json!(15).into()));
    }

    #[test]
    fn a_failed_call_keeps_its_error_whole() {
        let body = json!({"call_id": "c", "success": false,
            "error": {"message": "m", "can_retry": true, "retry_after_ms": 500, "x": 1}});
        let r = normalise_tool_response(body.to_string().as_bytes()).expect("error shape");
        assert!(!r.success);
        assert_eq!(r.error, Some(json!({"message": "m", "can_retry": true, "retry_after_ms": 500, "x": 1})));
        assert_eq!(r.value, None);
    }

    #[test]
    fn garbage_is_not_a_result() {
        assert!(matches!(normalise_tool_response(b"<html>"), Err(ResponseShapeError::NotJson(_))));
        assert!(matches!(normalise_tool_response(b"[1,2]"), Err(ResponseShapeError::NotAResult(_))));
        assert!(normalise_tool_response(br#"{"success": false}"#).is_err());
        assert!(normalise_tool_response(br#"{"result": null}"#).is_err(), "a null result is not a bare answer");
        assert!(normalise_tool_response(br#"{"result": [1]}"#).is_err());
        assert!(normalise_tool_response(br#"{"success": "yes", "value": 1}"#).is_err());
        assert!(normalise_tool_response(br#"{"value": 1"#).is_err());
    }

    #[test]
    fn a_value_passes_through_as_written() {
        let body = br#"{"result": {"success": true, "value": {"big": 123456789012345678901234567890, "s": "\u00e9", "n": null}}}"#;
        let r = normalise_tool_response(body).expect("a result");
        // No trip through f64 or a re-escaping: the client gets the upstream's text.
        assert_eq!(
            r.value.expect("a value").get(),
            r#"{"big": 123456789012345678901234567890, "s": "\u00e9", "n": null}"#
        );
        let result =
            CallResult { call_id: "c".into(), duration: 1.0, success: true, value: Some(RawJson::null()), error: None };
        let written: Value = serde_json::from_slice(&call_response_body(&result)).expect("json");
        assert_eq!(written["result"]["value"], Value::Null);
    }

    #[test]
    fn numbers_keep_their_text_through_the_flattened_fields_and_the_upstream_body() {
        // `#[serde(flatten)]` buffers a field before it is read: numbers must survive that too.
        let body = br#"{"request": {"tool_id": "K.T", "input": {"n": 98765432109876543210, "f": 1.000000000000000000001, "z": -0, "e": 1e400},
            "context": {"tenant": 12345678901234567890123, "ratio": 0.1, "secrets": [{"id": "S", "value": "v", "n": 98765432109876543211}]}}}"#;
        let call: CallBody = from_json(body).expect("a call");
        let request = call.request.expect("wrapped");
        let input = request.input.expect("input");
        let context = request.context.expect("context");
        assert_eq!(context.extra["tenant"].to_string(), "12345678901234567890123");
        assert_eq!(context.secrets[0].extra["n"].to_string(), "98765432109876543211");
        let written = upstream_call_body(&UpstreamCallRequest {
            tool_id: "K.T@1.0.0",
            call_id: "c",
            trace_id: None,
            input: &input,
            context: &context,
        });
        let written = String::from_utf8(written).expect("utf-8");
        for text in [
            r#""n":98765432109876543210"#,
            r#""f":1.000000000000000000001"#,
            r#""z":-0"#,
            // Only an exponent's spelling is settled: `e`, and its sign always written.
            r#""e":1e+400"#,
            r#""tenant":12345678901234567890123"#,
            r#""ratio":0.1"#,
            r#""n":98765432109876543211}"#,
        ] {
            assert!(written.contains(text), "{text} in {written}");
        }
        // A value read back and compared: equal by its digits.
        let a: RawJson = serde_json::from_str("98765432109876543210").expect("raw");
        let b: RawJson = serde_json::from_str("98765432109876543211").expect("raw");
        assert_ne!(a, b);
    }

    #[test]
    fn null_fields_read_as_their_absence_where_the_protocol_says_so() {
        // `value: null` is a success with a null value; `error: null` is no error.
        let r = normalise_tool_response(br#"{"success": true, "value": null, "error": null}"#).expect("a result");
        assert_eq!((r.success, r.value, r.error), (true, Some(RawJson::null()), None));
        // No `value` at all: still a null value.
        let r = normalise_tool_response(br#"{"call_id": "x", "duration": 2.5}"#).expect("a result");
        assert_eq!((r.duration, r.value), (Some(2.5), Some(RawJson::null())));
        // A duration that is not a number is no duration.
        for duration in [r#""2.5""#, "null", "true", "[1]", "{}", "1e400", "-1e400"] {
            let body = format!(r#"{{"success": true, "value": 1, "duration": {duration}}}"#);
            assert_eq!(normalise_tool_response(body.as_bytes()).expect("a result").duration, None, "{duration}");
        }
        let r = normalise_tool_response(br#"{"result": {"success": true, "duration": -1.5e2}}"#).expect("a result");
        assert_eq!(r.duration, Some(-150.0));
        // The older `output` wins over a bare field.
        let r = normalise_tool_response(br#"{"value": 1, "output": {"value": 2}}"#).expect("a result");
        assert_eq!(r.value, Some(json!(2).into()));
    }

    #[test]
    fn nesting_is_measured_outside_strings() {
        assert!(nesting_within(br#"{"a": [[1]]}"#, 3));
        assert!(!nesting_within(br#"{"a": [[1]]}"#, 2));
        assert!(nesting_within(br#"{"a": "[[[[[[\"[["}"#, 1));
        // An escaped backslash ends before the quote that closes the string.
        assert!(!nesting_within(br#"{"a": "x\\", "b": [[1]]}"#, 2));
        assert!(nesting_within(br#"{"a": "x\\\"[[[", "b": [1]}"#, 2));
        // A body cut inside a string or an escape is within any limit.
        assert!(nesting_within(br#"{"a": "[[["#, 1));
        assert!(nesting_within(br#"{"a": "\"#, 1));
        let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        assert!(!nesting_within(deep.as_bytes(), 64));
    }

    #[test]
    fn opening_brackets_are_counted_across_chunks() {
        let body: Vec<u8> = (0..2000).map(|i| [b'{', b'[', b'a', b'"', b']', b'}', b' '][i % 7]).collect();
        let expected = body.iter().filter(|&&b| b == b'{' || b == b'[').count();
        assert_eq!(opening_brackets(&body), expected);
        assert_eq!(opening_brackets(&[b'['; 255]), 255);
        assert_eq!(opening_brackets(&[b'{'; 256]), 256);
        assert_eq!(opening_brackets(b""), 0);
    }

    #[test]
    fn nesting_counts_levels_not_brackets() {
        // Four opening brackets, two levels: the count alone does not refuse it.
        assert!(nesting_within(br#"{"a": [1], "b": [2], "c": {"d": 3}}"#, 2));
        assert!(!nesting_within(br#"{"a": [1], "b": [2], "c": {"d": [3]}}"#, 2));
        assert!(nesting_within(b"[[[", 3));
        assert!(!nesting_within(b"[[[[", 3));
    }

    #[test]
    fn schema_versions() {
        assert!(is_supported_schema("otc://1.0"));
        assert!(is_supported_schema("urn:oxp:1.0"));
        assert!(is_supported_schema(
            "https://github.com/OpenToolCalling/specification/blob/main/specification/1.0/openapi.json"
        ));
        assert!(!is_supported_schema("otc://2.0"));
        assert!(!is_supported_schema("https://github.com/x/y/2.0/openapi.json"));
    }
}
