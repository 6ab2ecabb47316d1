//! What a caller sees when the tool server misbehaves: unreachable (400
//! "temporarily unavailable"), too slow (200, can_retry), a 5xx or non-JSON
//! answer (200, success false, detail for the developer), and a tool's own
//! error (passed through unchanged). Never a hang, never an HTML 502.

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;

#[tokio::test]
async fn an_unreachable_upstream_is_a_400_temporarily_unavailable() {
    let mut upstream = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    upstream.on_call(add);
    let gw = GatewayConfig::new().upstream("calculator", &upstream.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();

    upstream.stop().await;
    let started = Instant::now();
    let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;

    let body = resp.server_error(400);
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("temporarily unavailable"), "message: {message}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "a refused connection is reported at once, took {:?}",
        started.elapsed()
    );

    // It comes back on the same port: the gateway uses it again (no stale pooled connection).
    upstream.restart().await;
    let result = gw.call("Calculator.Add@1.0.0", json!({"a": 2, "b": 2})).await.result();
    assert_eq!(result["value"], 4);
}

#[tokio::test]
async fn a_slow_upstream_is_a_200_failure_that_can_be_retried() {
    let upstream = ToolServer::start(catalog(vec![tool("Slow.Tool", "1.0.0", any_object())])).await;
    let gw = GatewayConfig::new().upstream_with("slow", &upstream.url(), "call_timeout = \"300ms\"").start().await;
    gw.wait_for_tool("Slow.Tool@1.0.0").await;
    upstream.set_call_delay(Duration::from_secs(5));

    let started = Instant::now();
    let resp = gw
        .post_json("/tools/call", &json!({"request": {"tool_id": "Slow.Tool@1.0.0", "call_id": "slow-1", "input": {}}}))
        .await;
    let took = started.elapsed();

    let result = resp.result();
    assert_eq!(result["call_id"], "slow-1");
    assert_eq!(result["success"], false);
    assert_eq!(result["error"]["can_retry"], true, "a timeout can be retried: {result}");
    assert!(result["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{result}");
    assert!(result["duration"].is_number(), "{result}");
    assert!(took < Duration::from_secs(3), "call_timeout 300ms must end the call early, took {took:?}");
    assert_eq!(upstream.call_count(), 1, "the request was sent");
}

#[tokio::test]
async fn an_html_500_from_the_upstream_is_a_200_failure_with_detail() {
    let upstream = ToolServer::start(catalog(vec![tool("Crashy.Tool", "1.0.0", any_object())])).await;
    upstream.on_call(html_500);
    let gw = GatewayConfig::new().upstream("crashy", &upstream.url()).start().await;
    gw.wait_for_tool("Crashy.Tool@1.0.0").await;

    let resp = gw
        .post_json(
            "/tools/call",
            &json!({"request": {"tool_id": "Crashy.Tool@1.0.0", "call_id": "c-500", "input": {}}}),
        )
        .await;

    let result = resp.result();
    assert_eq!(result["call_id"], "c-500");
    assert_eq!(result["success"], false);
    assert!(result["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{result}");
    let detail =
        result["error"]["developer_message"].as_str().unwrap_or_else(|| panic!("developer_message missing: {result}"));
    assert!(detail.contains("500"), "the developer learns the upstream status: {detail}");
}

#[tokio::test]
async fn a_502_and_a_503_with_json_bodies_are_200_failures_too() {
    let upstream = ToolServer::start(catalog(vec![tool("Crashy.Tool", "1.0.0", any_object())])).await;
    let gw = GatewayConfig::new().upstream("crashy", &upstream.url()).start().await;
    gw.wait_for_tool("Crashy.Tool@1.0.0").await;

    for status in [502u16, 503] {
        upstream.on_call(move |_| (status, json!({"message": "overloaded"}).to_string()));
        let result = gw.call("Crashy.Tool@1.0.0", json!({})).await.result();
        assert_eq!(result["success"], false);
        let detail = result["error"]["developer_message"].as_str().unwrap_or_default();
        assert!(detail.contains(&status.to_string()), "HTTP {status} must be named: {result}");
    }
}

#[tokio::test]
async fn a_non_json_answer_is_a_200_failure_with_detail() {
    let upstream = ToolServer::start(catalog(vec![tool("Garbled.Tool", "1.0.0", any_object())])).await;
    upstream.on_call(|_| (200, "OK, done!".to_string()));
    let gw = GatewayConfig::new().upstream("garbled", &upstream.url()).start().await;
    gw.wait_for_tool("Garbled.Tool@1.0.0").await;

    let resp = gw.call("Garbled.Tool@1.0.0", json!({})).await;

    let result = resp.result();
    assert_eq!(result["success"], false);
    assert!(result["call_id"].as_str().is_some_and(|c| !c.is_empty()));
    assert!(
        result["error"]["developer_message"].as_str().is_some_and(|m| !m.is_empty()),
        "the developer learns what came back: {result}"
    );
}

#[tokio::test]
async fn a_tool_error_is_passed_through_unchanged() {
    let upstream = ToolServer::start(catalog(vec![tool("Doorbell.Ring", "0.1.0", any_object())])).await;
    let error = json!({
        "message": "Doorbell ID not found",
        "developer_message": "The doorbell with ID 'doorbell1' does not exist.",
        "can_retry": true,
        "additional_prompt_content": "ids: doorbell42,doorbell84",
        "retry_after_ms": 500
    });
    let reply = error.clone();
    upstream.on_call(move |req| tool_error(req, reply.clone()));
    let gw = GatewayConfig::new().upstream("doorbells", &upstream.url()).start().await;
    gw.wait_for_tool("Doorbell.Ring@0.1.0").await;

    let resp = gw
        .post_json(
            "/tools/call",
            &json!({"$schema": "otc://1.0", "request": {
                "call_id": "723e4567-e89b-12d3-a456-426614174006",
                "tool_id": "Doorbell.Ring@0.1.0",
                "input": {"doorbell_id": "doorbell1"}
            }}),
        )
        .await;

    let result = resp.result();
    assert_eq!(result["call_id"], "723e4567-e89b-12d3-a456-426614174006");
    assert_eq!(result["success"], false);
    assert_eq!(result["duration"].as_f64(), Some(60.0), "the tool's duration is kept: {result}");
    assert_eq!(result["error"], error, "the tool's error comes back exactly as the tool gave it");
    assert!(result.get("value").is_none(), "{result}");
}

#[tokio::test]
async fn one_faulty_upstream_does_not_disturb_another() {
    let mut broken = ToolServer::start(catalog(vec![tool("Broken.Tool", "1.0.0", any_object())])).await;
    let healthy = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    healthy.on_call(add);
    let gw = GatewayConfig::new().upstream("broken", &broken.url()).upstream("healthy", &healthy.url()).start().await;
    gw.wait_for_tools("both listed", |items| items.len() == 2).await;

    broken.stop().await;
    gw.call("Broken.Tool@1.0.0", json!({})).await.server_error(400);

    let result = gw.call("Calculator.Add@1.0.0", json!({"a": 5, "b": 5})).await.result();
    assert_eq!(result["value"], 10);
    gw.get("/health").await.expect_status(200);
}
