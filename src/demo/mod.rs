//! `otc-gateway demo`: the gateway with two small built-in tool servers on
//! loopback, so a newcomer sees it work in one command.
//!
//! The two servers speak different dialects on purpose: `calculator` the 1.0
//! form (`items`, flat `input_schema`), `clock` the older draft (`tools`,
//! `input_schema.parameters`). Both serve `Calculator.Add`, in versions 1.0.0
//! and 2.0.0, so version resolution across upstreams shows too.
//!
//! `calculator` also serves `Mail.ListInbox`, which needs the calling user's
//! authorization with `demo-mail`: a stand-in OAuth provider (`demo_provider.rs`)
//! on loopback, so the whole per-user flow can be clicked through.
//!
//! `notes` is a REST API with an OpenAPI document (`demo_notes.rs`), an
//! `openapi` upstream: its operations are tools, its API key injected.

mod demo_notes;
mod demo_provider;

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
    answer: fn(tool_id: &str, input: &Value, context: &Value) -> Result<Value, Value>,
}

/// The demo's servers on loopback.
#[derive(Debug, Clone, Copy)]
pub struct DemoServers {
    /// The `calculator` tool server (1.0 dialect).
    pub calculator: SocketAddr,
    /// The `clock` tool server (older dialect).
    pub clock: SocketAddr,
    /// The stand-in OAuth provider.
    pub provider: SocketAddr,
    /// The notes REST API (an OpenAPI upstream).
    pub notes: SocketAddr,
}

/// The demo user's API key (`OXP-API-Key`), in the environment variable
/// the demo config names.
pub const DEMO_USER_KEY: (&str, &str) = ("OTC_DEMO_ALICE_KEY", "demo-alice-key");
/// The gateway's client secret at the stand-in provider, likewise.
pub const DEMO_CLIENT_SECRET: (&str, &str) = ("OTC_DEMO_CLIENT_SECRET", demo_provider::CLIENT_SECRET);
/// The notes API's key, likewise.
pub const DEMO_NOTES_KEY: (&str, &str) = ("OTC_DEMO_NOTES_KEY", demo_notes::NOTES_KEY);

/// Starts the demo servers on the current tokio runtime.
pub async fn start_demo_servers() -> std::io::Result<DemoServers> {
    let calculator = serve(ToolServer { catalog: calculator_catalog(), answer: calculator_answer }).await?;
    let clock = serve(ToolServer { catalog: clock_catalog(), answer: clock_answer }).await?;
    let provider = demo_provider::serve().await?;
    let notes = demo_notes::serve().await?;
    Ok(DemoServers { calculator, clock, provider, notes })
}

/// The demo's gateway.toml, pointing at the servers; grants are kept under
/// `state_dir`.
pub fn demo_config(listen: &str, admin: &str, servers: DemoServers, state_dir: &std::path::Path) -> String {
    let DemoServers { calculator, clock, provider, notes } = servers;
    let (key_var, _) = DEMO_USER_KEY;
    let (notes_var, _) = DEMO_NOTES_KEY;
    let (secret_var, _) = DEMO_CLIENT_SECRET;
    let state_dir = state_dir.display().to_string().replace('\\', "/");
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
# Its Mail.ListInbox may receive the user's demo-mail token, and only it
# serves the Mail toolkit.
authorization = ["demo-mail"]
toolkits = ["Mail"]

[[upstreams]]
name = "clock"
url = "http://{clock}"

# A REST API with an OpenAPI document: each operation is a tool, and the
# gateway sends the API key its security scheme asks for.
[[upstreams]]
name = "notes"
protocol = "openapi"
url = "http://{notes}"
spec = "http://{notes}/openapi.json"
security = {{ NotesKey = {{ secret = "NOTES_API_KEY" }} }}
secrets = ["NOTES_API_KEY"]

[secrets]
NOTES_API_KEY = "env:{notes_var}"

# Anyone may call; the demo user is whoever sends this key.
[auth]
api_keys = [{{ key = "env:{key_var}", user_id = "alice" }}]

# The gateway is the OAuth client of the stand-in provider.
[authorization.demo-mail]
authorize_endpoint = "http://{provider}/authorize"
token_endpoint = "http://{provider}/token"
revocation_endpoint = "http://{provider}/revoke"
client_id = "{client_id}"
client_secret = "env:{secret_var}"
scopes = ["profile"]
# Whose browser finished the flow? The demo application, where alice is
# signed in, confirms it (POST /oauth/confirm, as alice) and sends the
# browser that consented back to the gateway.
user_verification = "verifier"
verifier_url = "http://{provider}/app/connect/verify"

[state]
dir = "{state_dir}"
"#,
        client_id = demo_provider::CLIENT_ID,
    )
}

/// What the demo prints after the ready line.
pub fn demo_banner(listen: SocketAddr) -> String {
    // The demo application confirms flows with the gateway listening here.
    demo_provider::set_gateway(listen);
    let base = format!("http://{listen}");
    format!(
        r#"
The demo gateway fronts two example tool servers and a REST API. Try:

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

A REST API with an OpenAPI document (notes) is an upstream too: each
operation is a tool, and the gateway adds the API key its document asks for:

  curl -s {base}/tools/call -H 'content-type: application/json' \
    -d '{{"request": {{"tool_id": "Notes.CreateNote", "input": {{"title": "Buy milk", "tags": ["home"]}}}}}}'
  curl -s {base}/tools/call -H 'content-type: application/json' \
    -d '{{"request": {{"tool_id": "Notes.ListNotes", "input": {{"tag": "home"}}}}}}'
  curl -s {base}/tools/call -H 'content-type: application/json' \
    -d '{{"request": {{"tool_id": "Notes.GetNote", "input": {{"note_id": 99}}}}}}'   # the API's 404: a tool error

Per-user OAuth: Mail.ListInbox needs alice's authorization with demo-mail.
The first call answers 400 with a link; open it in a browser, click Allow,
then Confirm in the demo application (it vouches for alice and sends the
same browser back to the gateway, which then keeps the grant), and call
again:

  curl -s {base}/tools/call -H 'content-type: application/json' -H 'OXP-API-Key: {key}' \
    -d '{{"request": {{"tool_id": "Mail.ListInbox"}}}}'
  curl -s -X DELETE {base}/oauth/demo-mail -H 'OXP-API-Key: {key}'      # disconnect

Press Ctrl-C to stop."#,
        key = DEMO_USER_KEY.1
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
            let context = request.get("context").cloned().unwrap_or(Value::Null);
            let result = match (server.answer)(tool_id, &input, &context) {
                Ok(value) => json!({"call_id": call_id, "success": true, "value": value}),
                Err(error) => json!({"call_id": call_id, "success": false, "error": error}),
            };
            reply(StatusCode::OK, &json!({"$schema": "otc://1.0", "result": result}))
        }
        _ => reply(StatusCode::NOT_FOUND, &json!({"message": "not found"})),
    }
}

pub(crate) fn reply(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
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
         "output_schema": {"type": "number"}},
        {"id": "Mail.ListInbox@1.0.0", "name": "Mail_ListInbox", "version": "1.0.0",
         "description": "Lists the calling user's (pretend) inbox.",
         "input_schema": {"type": "object"},
         "requirements": {"authorization": [{"id": "demo-mail", "oauth2": {"scopes": ["mail.read"]}}]}}
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

fn calculator_answer(tool_id: &str, input: &Value, context: &Value) -> Result<Value, Value> {
    if tool_id == "Mail.ListInbox@1.0.0" {
        let authorized = context["authorization"]
            .as_array()
            .is_some_and(|a| a.iter().any(|t| t["id"] == "demo-mail" && demo_provider::is_valid(t["token"].as_str())));
        if !authorized {
            return Err(json!({"message": "no valid demo-mail token in the context"}));
        }
    }
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
        // The gateway injected the user's token; a real tool would call the
        // mail API with it. (Never echo a token back.)
        "Mail.ListInbox@1.0.0" => Ok(json!({"messages": [
            {"from": "bob@example.com", "subject": "Lunch?"},
            {"from": "ci@example.com", "subject": "Build passed"}]})),
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

fn clock_answer(tool_id: &str, input: &Value, _context: &Value) -> Result<Value, Value> {
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
