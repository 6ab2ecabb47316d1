//! `otc-gateway demo`: the gateway with two small built-in tool servers on
//! loopback, so a newcomer sees it work in one command.
//!
//! The two servers speak different dialects on purpose: `calculator` the 1.0
//! form (`items`, flat `input_schema`), `clock` the older draft (`tools`,
//! `input_schema.parameters`). Both serve `Calculator.Add`, in versions 1.0.0
//! and 2.0.0, so version resolution across upstreams shows too.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::TcpListener;

/// A demo tool server: its catalog and how it answers a call.
struct ToolServer {
    catalog: Value,
    answer: fn(tool_id: &str, input: &Value) -> Result<Value, Value>,
}

/// Starts both demo servers on the current runtime; returns their addresses.
pub async fn start_demo_servers() -> std::io::Result<(SocketAddr, SocketAddr)> {
    let calculator = serve(ToolServer { catalog: calculator_catalog(), answer: calculator_answer }).await?;
    let clock = serve(ToolServer { catalog: clock_catalog(), answer: clock_answer }).await?;
    Ok((calculator, clock))
}

/// The demo's gateway.toml, pointing at the two servers.
pub fn demo_config(listen: &str, admin: &str, calculator: SocketAddr, clock: SocketAddr) -> String {
    format!(
        r#"[server]
listen = "{listen}"
admin_listen = "{admin}"

[catalog]
poll_interval = "2s"
request_timeout = "1s"

[[upstreams]]
name = "calculator"
url = "http://{calculator}"

[[upstreams]]
name = "clock"
url = "http://{clock}"
"#
    )
}

/// What the demo prints after the ready line.
pub fn demo_banner(listen: SocketAddr) -> String {
    let base = format!("http://{listen}");
    format!(
        r#"
The demo gateway fronts two example tool servers. Try:

  curl -s {base}/tools
  curl -s {base}/tools/call -H 'content-type: application/json' \
    -d '{{"request": {{"tool_id": "Calculator.Add@1.0.0", "input": {{"a": 10, "b": 5}}}}}}'
  curl -s {base}/tools/call -H 'content-type: application/json' \
    -d '{{"request": {{"tool_id": "Calculator.Add", "input": {{"a": 10, "b": 5}}}}}}'     # latest: 2.0.0
  curl -s {base}/tools/call -H 'content-type: application/json' \
    -d '{{"request": {{"tool_id": "Calculator.Add@1", "input": {{"a": 10, "b": "five"}}}}}}'  # 422
  curl -s {base}/tools/call -H 'content-type: application/json' \
    -d '{{"request": {{"tool_id": "Calculator.Divide", "input": {{"a": 1, "b": 0}}}}}}'    # tool error
  curl -s {base}/tools/call -H 'content-type: application/json' \
    -d '{{"request": {{"tool_id": "System.GetTimestamp"}}}}'

Press Ctrl-C to stop."#
    )
}

async fn serve(server: ToolServer) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let server = Arc::new(server);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let server = server.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request| {
                    let server = server.clone();
                    async move { Ok::<_, Infallible>(handle(&server, request).await) }
                });
                let _ =
                    hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Ok(addr)
}

async fn handle(server: &ToolServer, request: Request<Incoming>) -> Response<Full<Bytes>> {
    match (request.method().clone(), request.uri().path()) {
        (Method::GET, "/tools") => reply(StatusCode::OK, &server.catalog),
        (Method::POST, "/tools/call") => {
            let Ok(body) = request.into_body().collect().await else {
                return reply(StatusCode::BAD_REQUEST, &json!({"message": "unreadable body"}));
            };
            let call: Value = serde_json::from_slice(&body.to_bytes()).unwrap_or(Value::Null);
            let request = call.get("request").unwrap_or(&call);
            let tool_id = request.get("tool_id").and_then(Value::as_str).unwrap_or_default();
            let call_id = request.get("call_id").cloned().unwrap_or(Value::Null);
            let input = request.get("input").cloned().unwrap_or_else(|| json!({}));
            let result = match (server.answer)(tool_id, &input) {
                Ok(value) => json!({"call_id": call_id, "success": true, "value": value}),
                Err(error) => json!({"call_id": call_id, "success": false, "error": error}),
            };
            reply(StatusCode::OK, &json!({"$schema": "otc://1.0", "result": result}))
        }
        _ => reply(StatusCode::NOT_FOUND, &json!({"message": "not found"})),
    }
}

fn reply(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_string())));
    *response.status_mut() = status;
    response.headers_mut().insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/json"));
    response
}

fn number_pair() -> Value {
    json!({"type": "object",
           "properties": {"a": {"type": "number", "description": "The first number."},
                          "b": {"type": "number", "description": "The second number."}},
           "required": ["a", "b"]})
}

fn calculator_catalog() -> Value {
    json!({"$schema": "otc://1.0", "items": [
        {"id": "Calculator.Add@1.0.0", "name": "Calculator_Add", "version": "1.0.0",
         "description": "Adds two numbers together.", "input_schema": number_pair(),
         "output_schema": {"type": "number"}},
        {"id": "Calculator.Divide@1.0.0", "name": "Calculator_Divide", "version": "1.0.0",
         "description": "Divides a by b.", "input_schema": number_pair(),
         "output_schema": {"type": "number"}}
    ]})
}

/// `a + b`, kept an integer when both are.
fn sum(input: &Value) -> Value {
    let (a, b) = (&input["a"], &input["b"]);
    match (a.as_i64(), b.as_i64()) {
        (Some(a), Some(b)) => json!(a.saturating_add(b)),
        _ => json!(a.as_f64().unwrap_or(0.0) + b.as_f64().unwrap_or(0.0)),
    }
}

fn calculator_answer(tool_id: &str, input: &Value) -> Result<Value, Value> {
    let a = input.get("a").and_then(Value::as_f64).unwrap_or(0.0);
    let b = input.get("b").and_then(Value::as_f64).unwrap_or(0.0);
    match tool_id {
        "Calculator.Add@1.0.0" => Ok(sum(input)),
        "Calculator.Divide@1.0.0" if b == 0.0 => Err(json!({
            "message": "Cannot divide by zero",
            "developer_message": "b was 0",
            "can_retry": true,
            "additional_prompt_content": "Choose a b other than 0."})),
        "Calculator.Divide@1.0.0" => Ok(json!(a / b)),
        other => Err(json!({"message": format!("unknown tool {other}")})),
    }
}

fn clock_catalog() -> Value {
    json!({"tools": [
        {"id": "Calculator.Add@2.0.0", "name": "Calculator_Add", "version": "2.0.0",
         "description": "Adds two numbers and says how.",
         "input_schema": {"parameters": number_pair()},
         "output_schema": {"type": "object"}},
        {"id": "System.GetTimestamp@1.0.0", "name": "System_GetTimestamp", "version": "1.0.0",
         "description": "Returns the current time.",
         "input_schema": {"parameters": {"type": "object"}},
         "output_schema": {"type": "object"}}
    ]})
}

fn clock_answer(tool_id: &str, input: &Value) -> Result<Value, Value> {
    match tool_id {
        "Calculator.Add@2.0.0" => {
            let total = sum(input);
            Ok(json!({"sum": total, "explanation": format!("{} + {} = {total}", input["a"], input["b"])}))
        }
        "System.GetTimestamp@1.0.0" => {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
            Ok(json!({"unix_seconds": now}))
        }
        other => Err(json!({"message": format!("unknown tool {other}")})),
    }
}
