//! JSON-RPC 2.0, the framing of every MCP message.
//!
//! Outgoing messages are typed structs; incoming ones are classified from a
//! JSON object by hand, because serde cannot tell `"id": null` (an invalid
//! request) from a missing `id` (a notification).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `jsonrpc` member of every message.
pub const VERSION: &str = "2.0";

/// Invalid JSON was received.
pub const PARSE_ERROR: i64 = -32700;
/// The JSON is not a valid request object.
pub const INVALID_REQUEST: i64 = -32600;
/// The method does not exist or is not offered.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid method parameters (MCP: also an unknown tool).
pub const INVALID_PARAMS: i64 = -32602;
/// The server failed to answer a valid request.
pub const INTERNAL_ERROR: i64 = -32603;

/// A request or notification to send (a notification has no `id`).
#[derive(Debug, Serialize)]
pub struct OutgoingRequest<'a> {
    /// Always [`VERSION`].
    pub jsonrpc: &'static str,
    /// The request id; `None` makes this a notification.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// The method.
    pub method: &'a str,
    /// Its parameters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub params: Option<&'a Value>,
}

impl<'a> OutgoingRequest<'a> {
    /// A request expecting a response with this `id`.
    pub fn request(id: u64, method: &'a str, params: Option<&'a Value>) -> Self {
        OutgoingRequest { jsonrpc: VERSION, id: Some(id), method, params }
    }

    /// A notification (no response).
    pub fn notification(method: &'a str, params: Option<&'a Value>) -> Self {
        OutgoingRequest { jsonrpc: VERSION, id: None, method, params }
    }
}

/// A response to send: `result` or `error`, never both.
#[derive(Debug, Serialize)]
pub struct OutgoingResponse {
    /// Always [`VERSION`].
    pub jsonrpc: &'static str,
    /// The request's id, echoed; `null` when it could not be read.
    pub id: Value,
    /// The result of a successful request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    /// Why the request failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorObject>,
}

impl OutgoingResponse {
    /// A successful response.
    pub fn result(id: Value, result: Value) -> Self {
        OutgoingResponse { jsonrpc: VERSION, id, result: Some(result), error: None }
    }

    /// An error response.
    pub fn error(id: Value, code: i64, message: impl Into<String>) -> Self {
        OutgoingResponse {
            jsonrpc: VERSION,
            id,
            result: None,
            error: Some(ErrorObject { code, message: message.into(), data: None }),
        }
    }

    /// The response serialised.
    pub fn to_bytes(&self) -> bytes::Bytes {
        // Serialising plain data into a Vec cannot fail.
        bytes::Bytes::from(serde_json::to_vec(self).unwrap_or_default())
    }
}

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorObject {
    /// The error code.
    pub code: i64,
    /// A short description.
    pub message: String,
    /// Anything else the peer said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// One incoming message, classified.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: answer it with the same id.
    Request {
        /// Its id (a string or a number).
        id: Value,
        /// The method.
        method: String,
        /// Its parameters, `Null` when absent.
        params: Value,
    },
    /// A notification: no answer.
    Notification {
        /// The method.
        method: String,
        /// Its parameters, `Null` when absent.
        params: Value,
    },
    /// A successful response.
    Response {
        /// The id of the request it answers.
        id: Value,
        /// The result.
        result: Value,
    },
    /// An error response.
    Error {
        /// The id of the request it answers (`Null` when the peer could not
        /// read it).
        id: Value,
        /// What went wrong.
        error: ErrorObject,
    },
}

/// Why a JSON value is not a JSON-RPC message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    /// Not an object (a batch array included: MCP 2025-06-18 removed them).
    #[error("a JSON-RPC message must be one JSON object")]
    NotAnObject,
    /// `jsonrpc` is not "2.0".
    #[error("`jsonrpc` must be \"2.0\"")]
    WrongVersion,
    /// An id that is neither a string nor a number.
    #[error("`id` must be a string or a number")]
    BadId,
    /// A method that is not a string.
    #[error("`method` must be a string")]
    BadMethod,
    /// No method, no result, no error.
    #[error("the message is neither a request, a notification nor a response")]
    Unclassifiable,
    /// An `error` member that is not an error object.
    #[error("`error` must be an object with a numeric `code` and a `message`")]
    BadError,
}

impl Message {
    /// Classifies a parsed JSON value.
    pub fn from_value(value: Value) -> Result<Message, MessageError> {
        let Value::Object(mut obj) = value else { return Err(MessageError::NotAnObject) };
        if obj.get("jsonrpc").and_then(Value::as_str) != Some(VERSION) {
            return Err(MessageError::WrongVersion);
        }
        let id = obj.remove("id");
        if let Some(method) = obj.remove("method") {
            let Value::String(method) = method else { return Err(MessageError::BadMethod) };
            let params = obj.remove("params").unwrap_or(Value::Null);
            return match id {
                None => Ok(Message::Notification { method, params }),
                Some(id) if is_valid_id(&id) => Ok(Message::Request { id, method, params }),
                Some(_) => Err(MessageError::BadId),
            };
        }
        if let Some(error) = obj.remove("error") {
            let error: ErrorObject = serde_json::from_value(error).map_err(|_| MessageError::BadError)?;
            return Ok(Message::Error { id: id.unwrap_or(Value::Null), error });
        }
        match (id, obj.remove("result")) {
            (Some(id), Some(result)) if is_valid_id(&id) => Ok(Message::Response { id, result }),
            (Some(_), Some(_)) => Err(MessageError::BadId),
            _ => Err(MessageError::Unclassifiable),
        }
    }

    /// Reads one message from bytes.
    pub fn from_slice(bytes: &[u8]) -> Result<Message, String> {
        let value: Value = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        Message::from_value(value).map_err(|e| e.to_string())
    }
}

/// MCP ids are strings or numbers, never null.
fn is_valid_id(id: &Value) -> bool {
    matches!(id, Value::String(_) | Value::Number(_))
}

/// `params` as an object: absent or null params are an empty object.
pub fn params_object(params: &Value) -> Option<&Map<String, Value>> {
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    match params {
        Value::Object(obj) => Some(obj),
        Value::Null => Some(EMPTY.get_or_init(Map::new)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_are_classified() {
        let m = |v: Value| Message::from_value(v);
        assert!(matches!(m(json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})), Ok(Message::Request { .. })));
        assert!(matches!(
            m(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})),
            Ok(Message::Notification { .. })
        ));
        assert!(matches!(m(json!({"jsonrpc": "2.0", "id": "a", "result": {}})), Ok(Message::Response { .. })));
        assert!(matches!(
            m(json!({"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "no"}})),
            Ok(Message::Error { .. })
        ));
        assert_eq!(m(json!({"jsonrpc": "2.0", "id": null, "method": "ping"})), Err(MessageError::BadId));
        assert_eq!(m(json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}])), Err(MessageError::NotAnObject));
        assert_eq!(m(json!({"id": 1, "method": "ping"})), Err(MessageError::WrongVersion));
        assert_eq!(m(json!({"jsonrpc": "2.0", "id": 1})), Err(MessageError::Unclassifiable));
    }

    #[test]
    fn ids_keep_their_digits() {
        for id in ["12345678901234567890123", "-0", "1.000000000000000000001", "7"] {
            let text = format!(r#"{{"jsonrpc": "2.0", "id": {id}, "method": "ping"}}"#);
            let Ok(Message::Request { id: got, .. }) = Message::from_slice(text.as_bytes()) else { panic!("{text}") };
            let answer = OutgoingResponse::result(got, json!({})).to_bytes();
            let answer = std::str::from_utf8(&answer).expect("utf-8");
            assert!(answer.contains(&format!(r#""id":{id},"#)), "{answer}");
        }
    }

    #[test]
    fn outgoing_shapes() {
        let params = json!({"x": 1});
        let r = serde_json::to_value(OutgoingRequest::request(7, "tools/list", Some(&params))).expect("json");
        assert_eq!(r, json!({"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"x": 1}}));
        let n = serde_json::to_value(OutgoingRequest::notification("notifications/initialized", None)).expect("json");
        assert_eq!(n, json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        let e = serde_json::to_value(OutgoingResponse::error(Value::Null, PARSE_ERROR, "bad")).expect("json");
        assert_eq!(e, json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "bad"}}));
    }
}
