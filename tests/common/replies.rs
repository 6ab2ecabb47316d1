//! Upstream replies: what a tool server answers to POST /tools/call.

use super::*;

/// What a call handler returns: HTTP status and body text. A body starting
/// with `<` is served as text/html, anything else as application/json.
pub type Reply = (u16, String);

/// The request object the gateway forwarded (`body["request"]`).
pub fn forwarded(body: &Value) -> &Value {
    &body["request"]
}

/// Whether `seen`, the `call_id` an OTC upstream received, is the client's
/// `call_id` scoped to its caller as the gateway forwards it: 16 hex digits
/// of the caller's digest, a dot, then the id as sent.
pub fn is_scoped_call_id(seen: &Value, call_id: &str) -> bool {
    let Some((prefix, id)) = seen.as_str().and_then(|s| s.split_once('.')) else { return false };
    prefix.len() == 16 && prefix.bytes().all(|b| b.is_ascii_hexdigit()) && id == call_id
}

/// A successful OTC result carrying `value`, with the forwarded call_id and no duration.
pub fn success(req: &Value, value: Value) -> Reply {
    let body = json!({
        "$schema": "otc://1.0",
        "result": {"call_id": forwarded(req)["call_id"], "success": true, "value": value}
    });
    (200, body.to_string())
}

/// A tool execution error: 200 with `success: false` and `error`.
pub fn tool_error(req: &Value, error: Value) -> Reply {
    let body = json!({
        "$schema": "otc://1.0",
        "result": {"call_id": forwarded(req)["call_id"], "duration": 60, "success": false, "error": error}
    });
    (200, body.to_string())
}

/// Echoes the forwarded input back as the value.
pub fn echo(req: &Value) -> Reply {
    success(req, forwarded(req)["input"].clone())
}

/// Adds `a` and `b` (integers stay integers).
pub fn add(req: &Value) -> Reply {
    let input = &forwarded(req)["input"];
    match (input["a"].as_i64(), input["b"].as_i64()) {
        (Some(a), Some(b)) => success(req, json!(a + b)),
        _ => success(req, json!(input["a"].as_f64().unwrap_or(0.0) + input["b"].as_f64().unwrap_or(0.0))),
    }
}

/// An HTML error page, the way a crashed framework answers.
pub fn html_500(_req: &Value) -> Reply {
    (
        500,
        "<html><head><title>500 Internal Server Error</title></head><body><h1>Internal Server Error</h1></body></html>"
            .into(),
    )
}
