//! The OTC 1.0 wire types, in one place, with serde.
//!
//! The gateway is strict in what it emits and lenient in what it accepts
//! (shared/spec/README.md). Types here are the canonical forms; the lenient
//! readers (`CallBody`, [`normalise_tool_response`]) fold the older shapes into
//! them at the edge so nothing past this module knows those shapes existed.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

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
    /// A JSON Schema for the call's `input` object.
    pub input_schema: Value,
    /// A JSON Schema for the value, `null` for a tool without output.
    #[serde(default)]
    pub output_schema: Value,
    /// What the caller must supply in `context`; the gateway injects it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requirements: Option<Requirements>,
}

/// `requirements` of a tool definition (seed 001, section 4.1).
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
    pub input: Option<Map<String, Value>>,
    /// The older spelling of `input`.
    #[serde(default)]
    pub inputs: Option<Map<String, Value>>,
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
        self.authorization.is_empty()
            && self.secrets.is_empty()
            && self.user_id.is_none()
            && self.extra.is_empty()
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

/// The request the gateway sends upstream: always the wrapped 1.0 form.
#[derive(Serialize)]
pub struct UpstreamCallBody<'a> {
    /// Always [`SCHEMA`].
    #[serde(rename = "$schema")]
    pub schema: &'static str,
    /// The call itself.
    pub request: UpstreamCallRequest<'a>,
}

/// The `request` object sent upstream.
#[derive(Serialize)]
pub struct UpstreamCallRequest<'a> {
    /// The id as the upstream published it.
    pub tool_id: &'a str,
    /// The call id, generated by the gateway when the client sent none.
    pub call_id: &'a str,
    /// The client's trace id, when it sent one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<&'a str>,
    /// The validated input (always an object).
    pub input: &'a Value,
    /// The context with everything the gateway manages filled in.
    #[serde(skip_serializing_if = "CallContext::is_empty")]
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
    /// The tool's value (present, maybe `null`, when it succeeded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
    /// The tool's error, passed through unchanged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}

/// `{"$schema", "result": {...}}`, the only shape the gateway answers a call with.
#[derive(Serialize)]
pub struct CallResponseEnvelope<'a> {
    /// Always [`SCHEMA`].
    #[serde(rename = "$schema")]
    pub schema: &'static str,
    /// The outcome.
    pub result: &'a CallResult,
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
#[derive(Debug, thiserror::Error)]
pub enum ResponseShapeError {
    /// Not JSON at all.
    #[error("the tool server's answer is not JSON: {0}")]
    NotJson(String),
    /// JSON, but none of the accepted shapes.
    #[error("the tool server's answer is not a call result: {0}")]
    NotAResult(&'static str),
}

/// Reads an upstream's answer in any accepted shape: wrapped in `result`,
/// bare, or the older `output: {value | error}`.
pub fn normalise_tool_response(body: &[u8]) -> Result<UpstreamResult, ResponseShapeError> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| ResponseShapeError::NotJson(e.to_string()))?;
    let Value::Object(mut outer) = value else {
        return Err(ResponseShapeError::NotAResult("not an object"));
    };
    let mut obj = match outer.remove("result") {
        Some(Value::Object(inner)) => inner,
        Some(_) => return Err(ResponseShapeError::NotAResult("`result` is not an object")),
        None => outer,
    };
    // The older shape: `output: {value}` or `output: {error}`.
    if let Some(Value::Object(mut output)) = obj.remove("output") {
        if let Some(v) = output.remove("value") {
            obj.insert("value".into(), v);
        }
        if let Some(e) = output.remove("error") {
            obj.insert("error".into(), e);
        }
    }
    let error = match obj.remove("error") {
        Some(Value::Null) | None => None,
        Some(e) => Some(e),
    };
    let success = match obj.get("success") {
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ResponseShapeError::NotAResult("`success` is not a boolean")),
        None => error.is_none(),
    };
    if !success && error.is_none() {
        return Err(ResponseShapeError::NotAResult("`success` is false but there is no `error`"));
    }
    Ok(UpstreamResult {
        call_id: obj.remove("call_id").and_then(|v| v.as_str().map(str::to_owned)),
        duration: obj.get("duration").and_then(Value::as_f64),
        success,
        value: if success { Some(obj.remove("value").unwrap_or(Value::Null)) } else { None },
        error,
    })
}

/// An upstream's answer after [`normalise_tool_response`].
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamResult {
    /// The call id the upstream echoed, if any.
    pub call_id: Option<String>,
    /// The duration the upstream reported, if any.
    pub duration: Option<f64>,
    /// Whether the tool succeeded.
    pub success: bool,
    /// The value when it succeeded.
    pub value: Option<Value>,
    /// The error when it failed.
    pub error: Option<Value>,
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
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > max {
                    return false;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
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
    fn reads_wrapped_bare_and_output_shapes_alike() {
        let wrapped = json!({"$schema": "otc://1.0", "result": {"call_id": "c", "success": true, "value": 15}});
        let bare = json!({"call_id": "c", "success": true, "value": 15});
        let older = json!({"call_id": "c", "success": true, "output": {"value": 15}});
        let a = normalise_tool_response(wrapped.to_string().as_bytes()).expect("wrapped");
        let b = normalise_tool_response(bare.to_string().as_bytes()).expect("bare");
        let c = normalise_tool_response(older.to_string().as_bytes()).expect("older");
        assert_eq!(a, b);
        assert_eq!(b, c);
        assert_eq!(a.value, Some(json!(15)));
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
        assert!(normalise_tool_response(b"<html>").is_err());
        assert!(normalise_tool_response(b"[1,2]").is_err());
        assert!(normalise_tool_response(br#"{"success": false}"#).is_err());
    }

    #[test]
    fn nesting_is_measured_outside_strings() {
        assert!(nesting_within(br#"{"a": [[1]]}"#, 3));
        assert!(!nesting_within(br#"{"a": [[1]]}"#, 2));
        assert!(nesting_within(br#"{"a": "[[[[[[\"[["}"#, 1));
        let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        assert!(!nesting_within(deep.as_bytes(), 64));
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
