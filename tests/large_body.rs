//! Large bodies: a few hundred KB go through to the upstream and back
//! intact; anything over `max_body_bytes` is a 413 that never reaches it.

mod common;

use common::*;
use serde_json::json;

fn text_schema() -> serde_json::Value {
    json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
}

/// `len` bytes or so of text with everything JSON has to escape in it.
fn awkward_text(len: usize) -> String {
    let pieces = [
        "plain words ",
        "\"quoted\" ",
        "back\\slash ",
        "new\nline ",
        "tab\t",
        "ünïcødé ",
        "🦀 ",
        "{\"not\": \"json\"} ",
        "\u{0001}",
    ];
    let mut s = String::with_capacity(len + 32);
    let mut i = 0usize;
    while s.len() < len {
        s.push_str(pieces[i % pieces.len()]);
        s.push_str(&i.to_string());
        i += 1;
    }
    s
}

#[tokio::test]
async fn a_300_kb_input_reaches_the_upstream_intact_and_comes_back_intact() {
    let upstream = ToolServer::start(catalog(vec![tool("Text.Echo", "1.0.0", text_schema())])).await;
    upstream.on_call(echo);
    let gw = GatewayConfig::new().upstream("text", &upstream.url()).start().await;
    gw.wait_for_tool("Text.Echo@1.0.0").await;
    let text = awkward_text(300 * 1024);

    let resp = gw.call("Text.Echo@1.0.0", json!({"text": text})).await;

    let result = resp.result();
    assert_eq!(upstream.call_count(), 1);
    let seen = upstream.last_request()["input"]["text"].as_str().expect("the upstream got a text").to_owned();
    assert_eq!(seen.len(), text.len(), "the upstream saw {} bytes of {}", seen.len(), text.len());
    assert!(seen == text, "the upstream saw exactly the input");
    assert!(result["value"]["text"].as_str() == Some(text.as_str()), "the answer came back intact");
}

#[tokio::test]
async fn a_body_over_max_body_bytes_is_413_and_never_reaches_the_upstream() {
    let upstream = ToolServer::start(catalog(vec![tool("Text.Echo", "1.0.0", text_schema())])).await;
    let gw = GatewayConfig::new().max_body_bytes(16 * 1024).upstream("text", &upstream.url()).start().await;
    gw.wait_for_tool("Text.Echo@1.0.0").await;

    // Just under the limit: fine.
    let small = gw.call("Text.Echo@1.0.0", json!({"text": "x".repeat(15 * 1024)})).await;
    small.result();
    assert_eq!(upstream.call_count(), 1);

    // Over it: 413 with a ServerErrorResponse body.
    let big = gw.call("Text.Echo@1.0.0", json!({"text": "x".repeat(40 * 1024)})).await;
    big.server_error(413);
    assert_eq!(upstream.call_count(), 1, "an oversized call is never forwarded");

    // The gateway still serves afterwards.
    gw.call("Text.Echo@1.0.0", json!({"text": "after"})).await.result();
    assert_eq!(upstream.call_count(), 2);
}

#[tokio::test]
async fn the_limit_applies_to_the_bare_call_path_too() {
    let upstream = ToolServer::start(catalog(vec![tool("Text.Echo", "1.0.0", text_schema())])).await;
    let gw = GatewayConfig::new().max_body_bytes(8 * 1024).upstream("text", &upstream.url()).start().await;
    gw.wait_for_tool("Text.Echo@1.0.0").await;

    let body = json!({"request": {"tool_id": "Text.Echo@1.0.0", "input": {"text": "y".repeat(20 * 1024)}}});
    let resp = gw.post_json("/call", &body).await;

    resp.server_error(413);
    assert_eq!(upstream.call_count(), 0);
}
