//! When both sides speak MCP, a tool's result reaches the client as the
//! server wrote it: every content type, `structuredContent`, `isError` and
//! the server's `_meta`, with only the gateway's own `_meta` added (and, for
//! a 2026-07-28 client, its `resultType`). OTC callers get OTC's mapping.
//! The server here is a small scripted one (2025-06-18), so that every
//! content type the spec names can be sent; `tests/mcp_bridge.rs` does the
//! same with the Python SDK's server.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use common::{send_with_headers, GatewayConfig};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

/// What the scripted server's tools answer: (tool, CallToolResult).
fn results() -> Vec<(&'static str, Value)> {
    vec![
        (
            "text",
            json!({"content": [{"type": "text", "text": "plain", "annotations": {"audience": ["user"], "priority": 0.5}}]}),
        ),
        ("image", json!({"content": [{"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}]})),
        ("audio", json!({"content": [{"type": "audio", "data": "UklGRg==", "mimeType": "audio/wav"}]})),
        (
            "resource_link",
            json!({"content": [{"type": "resource_link", "uri": "file:///tmp/report.pdf", "name": "report", "mimeType": "application/pdf"}]}),
        ),
        (
            "resource",
            json!({"content": [{"type": "resource", "resource": {"uri": "memo://1", "mimeType": "text/plain", "text": "the memo"}}]}),
        ),
        (
            "structured",
            json!({"content": [{"type": "text", "text": "{\"n\":1}"}], "structuredContent": {"n": 1, "list": [1, 2]}}),
        ),
        (
            "mixed",
            json!({"content": [{"type": "text", "text": "two"}, {"type": "image", "data": "AA==", "mimeType": "image/gif"}],
                         "_meta": {"example.com/trace": "t-1"}}),
        ),
        (
            "failed",
            json!({"content": [{"type": "text", "text": "quota exceeded"}], "isError": true, "_meta": {"example.com/code": 429}}),
        ),
    ]
}

async fn scripted() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            tokio::spawn(async move {
                let service = hyper::service::service_fn(answer);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

async fn answer(req: hyper::Request<hyper::body::Incoming>) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    let bytes = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let id = message["id"].clone();
    let result = match message["method"].as_str() {
        Some("initialize") => json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                                     "serverInfo": {"name": "scripted", "version": "1"}}),
        Some("tools/list") => {
            let tools: Vec<Value> = results()
                .iter()
                .map(|(name, _)| json!({"name": name, "description": name, "inputSchema": {"type": "object"}}))
                .collect();
            json!({ "tools": tools })
        }
        Some("tools/call") => {
            let name = message["params"]["name"].as_str().unwrap_or_default();
            results().into_iter().find(|(n, _)| *n == name).map(|(_, r)| r).unwrap_or(Value::Null)
        }
        // Notifications and server/discover: a legacy server knows neither.
        _ if id.is_null() => {
            return Ok(hyper::Response::builder().status(202).body(Full::new(Bytes::new())).expect("202"))
        }
        _ => {
            let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}});
            return Ok(json_response(body));
        }
    };
    Ok(json_response(json!({"jsonrpc": "2.0", "id": id, "result": result})))
}

fn json_response(body: Value) -> hyper::Response<Full<Bytes>> {
    hyper::Response::builder()
        .header("content-type", "application/json")
        .header("mcp-session-id", "scripted-1")
        .body(Full::new(Bytes::from(body.to_string())))
        .expect("response")
}

/// `tools/call` of `name` at `/mcp`, in 2025-11-25 or (with `modern`) 2026-07-28.
async fn mcp_call(addr: SocketAddr, name: &str, modern: bool) -> Value {
    let mut params = json!({"name": name, "arguments": {}});
    let mut headers = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    if modern {
        params["_meta"] = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                                 "io.modelcontextprotocol/clientCapabilities": {}});
        headers.extend([("mcp-protocol-version", "2026-07-28"), ("mcp-method", "tools/call"), ("mcp-name", name)]);
    } else {
        headers.push(("mcp-protocol-version", "2025-11-25"));
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}).to_string();
    let resp = send_with_headers(addr, "POST", "/mcp", Bytes::from(body), &headers).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()["result"].clone()
}

#[tokio::test]
async fn every_content_type_reaches_an_mcp_client_as_the_server_wrote_it() {
    let server = scripted().await;
    let gw = GatewayConfig::new()
        .raw(&format!(
            "[[upstreams]]\nname = \"scripted\"\nurl = \"http://{server}/mcp\"\nprotocol = \"mcp\"\ntoolkit = \"S\"\nversion = \"1.0.0\"\n"
        ))
        .start()
        .await;
    gw.wait_for_tool("S.failed@1.0.0").await;
    for (name, written) in results() {
        for modern in [false, true] {
            let mut got = mcp_call(gw.addr, &format!("S_{name}"), modern).await;
            // The gateway's own _meta beside the server's.
            let meta = got["_meta"].as_object_mut().expect("_meta");
            let call_id = meta.remove("otc-gateway/call_id").expect("the gateway's call id");
            assert!(call_id.is_string());
            if modern {
                assert_eq!(
                    meta.remove("io.modelcontextprotocol/serverInfo").expect("serverInfo")["name"],
                    "otc-gateway"
                );
                assert_eq!(got.as_object_mut().expect("object").remove("resultType"), Some(json!("complete")));
            }
            if got["_meta"].as_object().is_some_and(|m| m.is_empty()) && written.get("_meta").is_none() {
                got.as_object_mut().expect("object").remove("_meta");
            }
            assert_eq!(got, written, "{name}, modern = {modern}");
        }
    }
    // OTC callers get the mapping: a text value, an error, structured content.
    assert_eq!(gw.call("S.text@1.0.0", json!({})).await.result()["value"], "plain");
    assert_eq!(gw.call("S.structured@1.0.0", json!({})).await.result()["value"], json!({"n": 1, "list": [1, 2]}));
    let failed = gw.call("S.failed@1.0.0", json!({})).await.result();
    assert_eq!(failed["success"], false);
    assert_eq!(failed["error"]["message"], "quota exceeded");
}
