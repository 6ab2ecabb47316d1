//! `POST /mcp` on both of the gateway's readers, over real sockets. A plain
//! request (Content-Length, HTTP/1.1) is read by the lean reader
//! (`proxy/lean.rs`); the same request with `Expect: 100-continue`, or
//! with a chunked body, is handed to pingora's session (`proxy/pingora_path.rs`).
//! Every request here is sent all three ways and must get the same answer.
//! `subscriptions/listen`, whose answer is an event stream, is always
//! pingora's, and still streams.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{forwarded, success, tool_error, Gateway, GatewayConfig, ToolServer};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a request's body is framed.
#[derive(Debug, Clone, Copy)]
enum Framing {
    /// Content-Length: the lean reader.
    Plain,
    /// Content-Length after `100 Continue`: pingora's session.
    Expect,
    /// A chunked body: pingora's session.
    Chunked,
}

/// A response: status, headers (names lowercased), body.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }

    /// What must be the same whichever reader served it: the status, the
    /// body's content type, whether a session id came, and the body, with
    /// the gateway's random ids blanked.
    fn comparable(&self) -> (u16, Option<String>, bool, Value) {
        let mut body = if self.body.is_empty() { Value::Null } else { self.json() };
        if let Some(meta) = body.pointer_mut("/result/_meta").and_then(Value::as_object_mut) {
            if meta.contains_key("otc-gateway/call_id") {
                meta.insert("otc-gateway/call_id".into(), json!("…"));
            }
        }
        (self.status, self.headers.get("content-type").cloned(), self.headers.contains_key("mcp-session-id"), body)
    }
}

/// Reads one response head and its Content-Length body (after any `100
/// Continue`).
async fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut buf = Vec::new();
    loop {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        assert!(n > 0, "closed before an answer: {}", String::from_utf8_lossy(&buf));
        buf.extend_from_slice(&chunk[..n]);
        while buf.starts_with(b"HTTP/1.1 100") {
            match buf.windows(4).position(|w| w == b"\r\n\r\n") {
                Some(end) => drop(buf.drain(..end + 4)),
                None => break,
            }
        }
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|s| s.parse().ok()).expect("a status");
        let headers: BTreeMap<String, String> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let len: usize = headers.get("content-length").and_then(|v| v.parse().ok()).unwrap_or(0);
        while buf.len() < end + 4 + len {
            let n = stream.read(&mut chunk).await.expect("read");
            assert!(n > 0, "closed inside a body");
            buf.extend_from_slice(&chunk[..n]);
        }
        return Answer { status, headers, body: buf[end + 4..end + 4 + len].to_vec() };
    }
}

/// One POST /mcp on a fresh connection, framed as asked.
async fn post(gw: &Gateway, headers: &[(&str, &str)], body: &str, framing: Framing) -> Answer {
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let mut head = String::from(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n",
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match framing {
        Framing::Plain => head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len())),
        Framing::Expect => head.push_str(&format!("Expect: 100-continue\r\nContent-Length: {}\r\n\r\n", body.len())),
        Framing::Chunked => {
            // In two chunks.
            let (a, b) = body.split_at(body.len() / 2);
            head.push_str("Transfer-Encoding: chunked\r\n\r\n");
            for part in [a, b] {
                if !part.is_empty() {
                    head.push_str(&format!("{:x}\r\n{part}\r\n", part.len()));
                }
            }
            head.push_str("0\r\n\r\n");
        }
    }
    stream.write_all(head.as_bytes()).await.expect("write");
    if let Framing::Expect = framing {
        // The body once the gateway says go on (or answers at once).
        let mut interim = [0u8; 25];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.peek(&mut interim))
            .await
            .expect("an interim answer")
            .expect("peek");
        if interim[..n].starts_with(b"HTTP/1.1 100") {
            stream.write_all(body.as_bytes()).await.expect("body");
        }
    }
    read_answer(&mut stream).await
}

/// Sends the request all three ways; the answers must be the same. Returns
/// the one the lean reader gave.
async fn same_both_ways(gw: &Gateway, headers: &[(&str, &str)], body: &str) -> Answer {
    let lean = post(gw, headers, body, Framing::Plain).await;
    for framing in [Framing::Expect, Framing::Chunked] {
        let other = post(gw, headers, body, framing).await;
        assert_eq!(
            lean.comparable(),
            other.comparable(),
            "{framing:?} for {body}:\n{}\n{}",
            String::from_utf8_lossy(&lean.body),
            String::from_utf8_lossy(&other.body)
        );
    }
    lean
}

const MODERN: [(&str, &str); 3] =
    [("MCP-Protocol-Version", "2026-07-28"), ("Mcp-Method", "tools/call"), ("Mcp-Name", "Calculator_Add")];

fn call(id: &str, name: &str, arguments: Value, modern: bool) -> String {
    let mut params = json!({"name": name, "arguments": arguments});
    if modern {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {}
        });
    }
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{params}}}"#)
}

async fn gateway() -> (ToolServer, Gateway) {
    let tools = ToolServer::start(common::catalog(vec![
        common::tool("Calculator.Add", "1.0.0", common::add_schema()),
        common::tool("Echo.Value", "1.0.0", common::any_object()),
    ]))
    .await;
    tools.on_call(|req| {
        let input = &forwarded(req)["input"];
        if let Some(error) = input.get("fail") {
            return tool_error(req, error.clone());
        }
        if let Some(value) = input.get("value") {
            return success(req, value.clone());
        }
        common::add(req)
    });
    let gw = GatewayConfig::new().upstream("tools", &tools.url()).start().await;
    gw.wait_for_tool("Echo.Value@1.0.0").await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    (tools, gw)
}

#[tokio::test]
async fn an_mcp_call_is_answered_alike_by_both_readers() {
    let (tools, gw) = gateway().await;

    // Calls in both eras, the id's digits kept.
    for (id, modern) in [("7", false), ("\"call-1\"", false), ("12345678901234567890123", true), ("-0", true)] {
        let headers: &[(&str, &str)] = if modern { &MODERN } else { &[] };
        let answer = same_both_ways(&gw, headers, &call(id, "Calculator_Add", json!({"a": 1, "b": 2}), modern)).await;
        assert_eq!(answer.status, 200);
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        assert!(text.starts_with(&format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"#)), "{text}");
        let result = &answer.json()["result"];
        assert_eq!(result["content"][0]["text"], "3", "{text}");
        assert_eq!(result["isError"], false, "{text}");
        assert_eq!(result.get("resultType").is_some(), modern, "{text}");
        assert_eq!(result["_meta"].get("io.modelcontextprotocol/serverInfo").is_some(), modern, "{text}");
    }
    assert_eq!(tools.call_count(), 4 * 3);

    // Values of every kind, and tool errors.
    let echo = [("Mcp-Name", "Echo_Value"), MODERN[0], MODERN[1]];
    for value in [
        json!("text with \"quotes\" and é"),
        json!({"b": [1, 2.50, null], "a": 123456789012345678901234567890u128}),
        json!([{"x": 1}]),
        json!(null),
    ] {
        let answer = same_both_ways(&gw, &echo, &call("1", "Echo_Value", json!({"value": value}), true)).await;
        let result = &answer.json()["result"];
        assert_eq!(result["structuredContent"], if value.is_object() { value.clone() } else { Value::Null });
    }
    let failed = json!({"message": "it broke", "additional_prompt_content": "try b"});
    let answer = same_both_ways(&gw, &[], &call("2", "Echo_Value", json!({"fail": failed}), false)).await;
    let result = &answer.json()["result"];
    assert_eq!((&result["isError"], &result["content"][1]["text"]), (&json!(true), &json!("try b")));

    // What does not reach the tool: bad arguments, unknown tools.
    let answer = same_both_ways(&gw, &MODERN, &call("3", "Calculator_Add", json!({"a": "one"}), true)).await;
    assert_eq!(answer.json()["result"]["isError"], true);
    let answer = same_both_ways(&gw, &[], &call("4", "Nope_Nothing", json!({}), false)).await;
    assert_eq!(answer.json()["error"]["code"], -32602);
    assert_eq!(tools.call_count(), 4 * 3 + 5 * 3);
}

#[tokio::test]
async fn mcp_refusals_and_other_methods_are_answered_alike_by_both_readers() {
    let (_tools, gw) = gateway().await;
    let add = call("5", "Calculator_Add", json!({"a": 1, "b": 2}), true);
    // The headers a 2026-07-28 request must carry, each wrong in turn.
    for (headers, code) in [
        (vec![MODERN[0], MODERN[1]], -32020),
        (vec![MODERN[0], MODERN[2]], -32020),
        (vec![MODERN[0], MODERN[1], MODERN[2], ("Mcp-Method", "tools/call")], -32020),
        (vec![MODERN[0], MODERN[1], MODERN[2], ("MCP-Protocol-Version", "2026-07-28")], -32020),
        (vec![("MCP-Protocol-Version", "2026-07-29"), MODERN[1], MODERN[2]], -32020),
        (vec![MODERN[0], ("Mcp-Method", "TOOLS/CALL"), MODERN[2]], -32020),
        (vec![MODERN[0], MODERN[1], ("Mcp-Name", "=?base64?Q2FsY3VsYXRvcl9BZGQ=?=")], 0),
    ] {
        let answer = same_both_ways(&gw, &headers, &add).await;
        let body = answer.json();
        if code == 0 {
            assert_eq!(body["result"]["content"][0]["text"], "3", "{headers:?}: {body}");
        } else {
            assert_eq!((answer.status, &body["error"]["code"]), (400, &json!(code)), "{headers:?}: {body}");
        }
    }
    // A modern call without its `_meta`, a legacy one with an unknown version.
    let bare = call("6", "Calculator_Add", json!({"a": 1, "b": 2}), false);
    assert_eq!(same_both_ways(&gw, &MODERN, &bare).await.json()["error"]["code"], -32602);
    let answer = same_both_ways(&gw, &[("MCP-Protocol-Version", "1999-01-01")], &bare).await;
    assert_eq!(answer.status, 400);

    // Bodies the call reader leaves to the `Value` reader.
    for body in [
        // A member twice (the last counts), an escaped method, params out of order.
        r#"{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"Nope","name":"Calculator_Add","arguments":{"a":1,"b":2}}}"#,
        r#"{"jsonrpc":"2.0","id":9,"method":"tools\/call","params":{"arguments":{"a":1,"b":2},"name":"Calculator_Add"}}"#,
        r#"{"params":{"name":"Calculator_Add","arguments":null},"method":"tools/call","id":"x","jsonrpc":"2.0"}"#,
        r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":["Calculator_Add",{"a":1,"b":2}]}"#,
        r#"["2.0",11,"tools/call",{"name":"Calculator_Add","arguments":{"a":1,"b":2}}]"#,
        r#"{"jsonrpc":"2.0","id":null,"method":"tools/call","params":{"name":"Calculator_Add"}}"#,
        r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":5}}"#,
        r#"{"jsonrpc":"2.0","id":13,"method":"tools/call","params":{"name":"Calculator_Add","arguments":[1]}}"#,
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"Calculator_Add"}}"#,
        r#"{"jsonrpc":"1.0","id":14,"method":"tools/call"}"#,
        r#"{"jsonrpc":"2.0","id":15,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
        r#"{"jsonrpc":"2.0","id":16,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":17,"method":"ping"}"#,
        r#"{not json"#,
        "",
    ] {
        same_both_ways(&gw, &[], body).await;
    }
    // A browser's Origin the gateway does not answer.
    let answer = same_both_ways(&gw, &[("Origin", "http://evil.example.com")], &bare).await;
    assert_eq!(answer.status, 403);
}

#[tokio::test]
async fn subscriptions_listen_still_streams() {
    let (_tools, gw) = gateway().await;
    let listen = json!({"jsonrpc": "2.0", "id": "sub-1", "method": "subscriptions/listen", "params": {
        "notifications": {"toolsListChanged": true},
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}
    }})
    .to_string();
    let mut stream = TcpStream::connect(gw.addr).await.expect("connect");
    let request = format!(
        "POST /mcp HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n\
         MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: subscriptions/listen\r\nContent-Length: {}\r\n\r\n{listen}",
        listen.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut seen = Vec::new();
    while !String::from_utf8_lossy(&seen).contains("sub-1") {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk))
            .await
            .expect("the stream's first event within 10 s")
            .expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&seen).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 200"), "{text}");
    assert!(text.contains("content-type: text/event-stream"), "{text}");
    // And it stays open.
    let mut more = [0u8; 64];
    assert!(tokio::time::timeout(Duration::from_millis(300), stream.read(&mut more)).await.is_err(), "still open");
}
