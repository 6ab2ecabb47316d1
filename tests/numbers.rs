//! Numbers cross the gateway digit for digit: inputs (to OTC and MCP
//! upstreams), tool results (through `POST /tools/call` and `/mcp`) and
//! JSON-RPC ids keep the text the client or the tool wrote, integers past 64
//! bits included; the call_id fingerprint tells such inputs apart; schema
//! validation still compares them as numbers, exactly.
//!
//! Bodies are written and read as text here: a `serde_json::Value` built
//! without `arbitrary_precision` would round the very numbers under test.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{catalog, send_with_headers, tool, Gateway, GatewayConfig, Resp, ToolServer};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

/// Past `u64::MAX` (18446744073709551615); as an f64 it is 9.876543210987654e19.
const BIG: &str = "98765432109876543210";

async fn echo_gateway(input_schema: Value) -> (ToolServer, Gateway) {
    let server = ToolServer::start(catalog(vec![tool("Num.Echo", "1.0.0", input_schema)])).await;
    let gw = GatewayConfig::new().upstream("nums", &server.url()).start().await;
    gw.wait_for_tool("Num.Echo@1.0.0").await;
    (server, gw)
}

/// POST /tools/call with `request` written as is.
async fn call_raw(gw: &Gateway, request: &str) -> Resp {
    gw.post_raw("/tools/call", format!(r#"{{"$schema":"otc://1.0","request":{request}}}"#), "application/json").await
}

/// POST /mcp with this exact body.
async fn mcp_raw(gw: &Gateway, body: &str) -> Resp {
    let headers = [("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(body.to_owned()), &headers).await
}

fn assert_has(text: &str, needle: &str, what: &str) {
    assert!(text.contains(needle), "{what}: {needle} is not in {text}");
}

#[tokio::test]
async fn inputs_reach_the_upstream_digit_for_digit() {
    let (server, gw) = echo_gateway(json!({"type": "object"})).await;
    // (name, as sent, as forwarded): every digit as sent; only an exponent is
    // spelt one way, `e` with its sign (serde_json's `arbitrary_precision`).
    let numbers = [
        ("big", BIG.to_owned(), BIG.to_owned()),
        ("negative", format!("-{BIG}"), format!("-{BIG}")),
        ("precise", "1.000000000000000000001".to_owned(), "1.000000000000000000001".to_owned()),
        ("minus_zero", "-0".to_owned(), "-0".to_owned()),
        ("exact", "2.50".to_owned(), "2.50".to_owned()),
        ("huge", "1e400".to_owned(), "1e+400".to_owned()),
        ("tiny", "1.5E-400".to_owned(), "1.5e-400".to_owned()),
        ("signed", "12345678901234567890.5e+3".to_owned(), "12345678901234567890.5e+3".to_owned()),
    ];
    let sent: Vec<String> = numbers.iter().map(|(name, text, _)| format!(r#""{name}":{text}"#)).collect();
    let fields: Vec<String> = numbers.iter().map(|(name, _, text)| format!(r#""{name}":{text}"#)).collect();
    let input = format!(r#"{{{},"list":[12345678901234567890123,0.1]}}"#, sent.join(","));
    let resp =
        call_raw(&gw, &format!(r#"{{"tool_id":"Num.Echo@1.0.0","input":{input},"context":{{"tenant":{BIG}}}}}"#)).await;
    resp.expect_status(200);
    let upstream = server.last_raw_call();
    for field in &fields {
        assert_has(&upstream, field, "the upstream's body");
        // The echo tool sends the input back: the client gets the same digits.
        assert_has(&resp.text(), field, "the call's result");
    }
    assert_has(&upstream, r#""list":[12345678901234567890123,0.1]"#, "the upstream's body");
    // Fields of `context` the gateway does not manage pass through too.
    assert_has(&upstream, &format!(r#""tenant":{BIG}"#), "the upstream's context");
}

#[tokio::test]
async fn a_result_with_big_numbers_comes_back_digit_for_digit_through_both_fronts() {
    let (server, gw) = echo_gateway(json!({"type": "object"})).await;
    let value = format!(r#"{{"n":{BIG},"precise":1.000000000000000000001}}"#);
    let answer = format!(r#"{{"$schema":"otc://1.0","result":{{"success":true,"value":{value}}}}}"#);
    server.on_call(move |_| (200, answer.clone()));

    let resp = call_raw(&gw, r#"{"tool_id":"Num.Echo@1.0.0","input":{}}"#).await;
    resp.expect_status(200);
    assert_has(&resp.text(), &format!(r#""value":{value}"#), "POST /tools/call");

    // /mcp: the value as structuredContent and as the text item, both as the tool wrote them.
    let resp =
        mcp_raw(&gw, r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"Num_Echo","arguments":{}}}"#)
            .await;
    resp.expect_status(200);
    let text = resp.text();
    assert_has(&text, &format!(r#""structuredContent":{value}"#), "/mcp structuredContent");
    assert_has(&text, &format!(r#"\"n\":{BIG}"#), "/mcp text content");
    assert_has(&text, r#"\"precise\":1.000000000000000000001"#, "/mcp text content");

    // A tool error's numbers too.
    let failed = format!(
        r#"{{"result":{{"success":false,"error":{{"message":"later","can_retry":true,"retry_after_ms":{BIG},"ratio":0.30000000000000000001}}}}}}"#
    );
    server.on_call(move |_| (200, failed.clone()));
    let resp = call_raw(&gw, r#"{"tool_id":"Num.Echo@1.0.0","input":{}}"#).await;
    resp.expect_status(200);
    assert_has(&resp.text(), &format!(r#""retry_after_ms":{BIG}"#), "a tool error");
    assert_has(&resp.text(), r#""ratio":0.30000000000000000001"#, "a tool error");
}

#[tokio::test]
async fn mcp_arguments_and_json_rpc_ids_keep_their_digits() {
    let (server, gw) = echo_gateway(json!({"type": "object"})).await;
    for id in ["12345678901234567890123", "-98765432109876543210", "1.000000000000000000001", "7"] {
        let body = format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"Num_Echo","arguments":{{"n":{BIG}}}}}}}"#
        );
        let resp = mcp_raw(&gw, &body).await;
        resp.expect_status(200);
        assert_has(&resp.text(), &format!(r#""id":{id}"#), "the JSON-RPC id");
        assert_has(&server.last_raw_call(), &format!(r#""input":{{"n":{BIG}}}"#), "the upstream's body");
        // An error response echoes the id too.
        let unknown = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"no/such"}}"#);
        assert_has(&mcp_raw(&gw, &unknown).await.text(), &format!(r#""id":{id}"#), "an error's JSON-RPC id");
    }
}

#[tokio::test]
async fn inputs_that_differ_in_the_last_digit_are_different_calls() {
    let (server, gw) = echo_gateway(json!({"type": "object"})).await;
    let request = |n: &str| format!(r#"{{"tool_id":"Num.Echo@1.0.0","call_id":"big-1","input":{{"n":{n}}}}}"#);
    let first = call_raw(&gw, &request(BIG)).await;
    first.expect_status(200);
    // The same call again: the first answer, the tool not called again.
    call_raw(&gw, &request(BIG)).await.expect_status(200);
    assert_eq!(server.call_count(), 1);
    // The last digit changed: another call, so the call_id is refused for it.
    let other = "98765432109876543211";
    call_raw(&gw, &request(other)).await.server_error(400);
    assert_eq!(server.call_count(), 1);
    // And a fresh call_id runs it, with its own digits.
    call_raw(&gw, &format!(r#"{{"tool_id":"Num.Echo@1.0.0","call_id":"big-2","input":{{"n":{other}}}}}"#))
        .await
        .expect_status(200);
    assert_eq!(server.call_count(), 2);
    assert_has(&server.last_raw_call(), &format!(r#""n":{other}"#), "the second call");
}

#[tokio::test]
async fn validation_compares_big_numbers_exactly() {
    // The schema's maximum is a big number too.
    let schema: Value = serde_json::from_str(&format!(
        r#"{{"type":"object","properties":{{"count":{{"type":"integer"}},"capped":{{"type":"number","maximum":{BIG}}}}}}}"#
    ))
    .expect("schema");
    let (server, gw) = echo_gateway(schema).await;
    let call = |field: &str, n: &str| format!(r#"{{"tool_id":"Num.Echo@1.0.0","input":{{"{field}":{n}}}}}"#);

    for accepted in [BIG, "123456789012345678901234567890", "-98765432109876543210", "1e+30", "5.0"] {
        call_raw(&gw, &call("count", accepted)).await.expect_status(200);
        assert_has(&server.last_raw_call(), &format!(r#""count":{accepted}"#), "an integer");
    }
    for refused in ["98765432109876543210.5", "1.000000000000000000001"] {
        let errors = call_raw(&gw, &call("count", refused)).await.parameter_errors();
        assert!(errors.contains_key("count"), "{refused} is not an integer: {errors:?}");
    }
    call_raw(&gw, &call("capped", BIG)).await.expect_status(200);
    call_raw(&gw, &call("capped", "98765432109876543209.999")).await.expect_status(200);
    // Not tested: a number with a fraction within a float's rounding of an integer maximum past
    // 2^53 (`98765432109876549999.5` here). jsonschema 0.60 compares that pair as two f64 and
    // accepts it; integers and decimal limits are compared exactly.
    for refused in ["98765432109876543211", "98765432109876543220", "98765432109876643210.5", "1e400"] {
        let errors = call_raw(&gw, &call("capped", refused)).await.parameter_errors();
        assert!(errors.contains_key("capped"), "{refused} is above the maximum: {errors:?}");
    }
    // Only the accepted calls reached the tool.
    assert_eq!(server.call_count(), 7);
}

// ---------------------------------------------------------------------------
// An MCP upstream that answers with big numbers, written as text
// ---------------------------------------------------------------------------

type Received = Arc<Mutex<Vec<String>>>;

async fn mcp_number_server() -> (SocketAddr, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let received: Received = Arc::default();
    let record = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let record = record.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| mcp_numbers(req, record.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, received)
}

async fn mcp_numbers(
    req: hyper::Request<hyper::body::Incoming>,
    received: Received,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let bytes = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    received.lock().expect("lock").push(text.clone());
    let message: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    // The id the gateway chose, echoed as it was written.
    let id = text.split(r#""id":"#).nth(1).and_then(|rest| rest.split([',', '}']).next()).unwrap_or("null").to_owned();
    let result = match message["method"].as_str() {
        Some("initialize") => {
            r#"{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"n","version":"1"}}"#
                .to_owned()
        }
        Some("tools/list") => r#"{"tools":[{"name":"big","inputSchema":{"type":"object"}}]}"#.to_owned(),
        Some("tools/call") => {
            format!(r#"{{"content":[],"structuredContent":{{"n":{BIG},"f":1.000000000000000000001}}}}"#)
        }
        _ => return Ok(hyper::Response::builder().status(202).body(Full::new(Bytes::new())).expect("response")),
    };
    let body = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#);
    Ok(hyper::Response::builder()
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .expect("response"))
}

#[tokio::test]
async fn an_mcp_upstream_gets_and_gives_big_numbers_digit_for_digit() {
    let (addr, received) = mcp_number_server().await;
    let gw = GatewayConfig::new()
        .raw(&format!(
            "[[upstreams]]\nname = \"mcp-numbers\"\nurl = \"http://{addr}/mcp\"\nprotocol = \"mcp\"\ntoolkit = \"N\"\nversion = \"1.0.0\"\n"
        ))
        .start()
        .await;
    gw.wait_for_tool("N.big@1.0.0").await;
    let resp = call_raw(&gw, &format!(r#"{{"tool_id":"N.big@1.0.0","input":{{"n":{BIG},"f":-0}}}}"#)).await;
    resp.expect_status(200);
    assert_has(&resp.text(), &format!(r#""n":{BIG}"#), "the MCP tool's value");
    assert_has(&resp.text(), r#""f":1.000000000000000000001"#, "the MCP tool's value");
    let sent = received.lock().expect("lock").iter().find(|m| m.contains("tools/call")).cloned().expect("a tools/call");
    assert_has(&sent, &format!(r#""n":{BIG}"#), "the MCP upstream's arguments");
    assert_has(&sent, r#""f":-0"#, "the MCP upstream's arguments");
}
