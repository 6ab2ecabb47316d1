//! Input validation: inputs that do not match the tool's input_schema are a
//! 422 with `parameter_errors` keyed by parameter name, and the upstream is
//! never called.

mod common;

use common::*;
use serde_json::json;

fn booking_schema() -> serde_json::Value {
    json!({
        "type": "object",
        "properties": {
            "a": {"type": "number"},
            "b": {"type": "number"},
            "name": {"type": "string", "maxLength": 5},
            "opts": {"type": "object", "properties": {"n": {"type": "integer"}}}
        },
        "required": ["a", "b"]
    })
}

async fn booking() -> (ToolServer, Gateway) {
    let upstream = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", booking_schema())])).await;
    upstream.on_call(add);
    let gw = GatewayConfig::new().upstream("calculator", &upstream.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    (upstream, gw)
}

#[tokio::test]
async fn a_parameter_of_the_wrong_type_is_422_keyed_by_its_name() {
    let (upstream, gw) = booking().await;

    let resp = gw
        .post_json(
            "/tools/call",
            &json!({"$schema": "otc://1.0", "request": {"call_id": "v-1", "tool_id": "Calculator.Add@1.0.0", "input": {"a": 10, "b": "infinity"}}}),
        )
        .await;

    let errors = resp.parameter_errors();
    assert!(errors.contains_key("b"), "b is the bad parameter: {errors:?}");
    assert!(!errors.contains_key("a"), "a is fine: {errors:?}");
    assert!(errors["b"].as_str().is_some_and(|m| !m.is_empty()), "each error is a message: {errors:?}");
    assert_eq!(upstream.call_count(), 0, "invalid input never reaches the upstream");
}

#[tokio::test]
async fn a_missing_required_parameter_is_keyed_by_its_own_name() {
    let (upstream, gw) = booking().await;

    let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1})).await;

    let errors = resp.parameter_errors();
    assert!(errors.contains_key("b"), "the missing parameter is named, not the root: {errors:?}");
    assert!(!errors.contains_key(""), "no error keyed by the empty root path: {errors:?}");
    assert_eq!(upstream.call_count(), 0);
}

#[tokio::test]
async fn every_bad_parameter_is_named() {
    let (upstream, gw) = booking().await;

    let resp = gw.call("Calculator.Add@1.0.0", json!({"a": "x", "name": "far too long"})).await;

    let errors = resp.parameter_errors();
    for name in ["a", "b", "name"] {
        assert!(errors.contains_key(name), "{name} must be named: {errors:?}");
    }
    assert_eq!(upstream.call_count(), 0);
}

#[tokio::test]
async fn a_nested_error_is_keyed_by_the_top_level_parameter() {
    let (upstream, gw) = booking().await;

    let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2, "opts": {"n": "seven"}})).await;

    let errors = resp.parameter_errors();
    assert!(errors.contains_key("opts"), "opts holds the bad value: {errors:?}");
    assert_eq!(upstream.call_count(), 0);
}

#[tokio::test]
async fn an_input_that_is_not_an_object_is_refused_before_the_call() {
    let (upstream, gw) = booking().await;

    for input in [json!([1, 2]), json!("a=1"), json!(3)] {
        let resp = gw.call("Calculator.Add@1.0.0", input.clone()).await;
        assert!(
            resp.status == 400 || resp.status == 422,
            "input {input} must be refused, got {}: {}",
            resp.status,
            resp.text()
        );
    }
    assert_eq!(upstream.call_count(), 0);
}

#[tokio::test]
async fn an_extra_parameter_is_named_when_the_schema_forbids_it() {
    let strict = json!({
        "type": "object",
        "properties": {"a": {"type": "number"}},
        "required": ["a"],
        "additionalProperties": false
    });
    let upstream = ToolServer::start(catalog(vec![tool("Strict.Tool", "1.0.0", strict)])).await;
    let gw = GatewayConfig::new().upstream("strict", &upstream.url()).start().await;
    gw.wait_for_tool("Strict.Tool@1.0.0").await;

    let resp = gw.call("Strict.Tool@1.0.0", json!({"a": 1, "surprise": true})).await;

    let errors = resp.parameter_errors();
    assert!(errors.contains_key("surprise"), "the unexpected parameter is named: {errors:?}");
    assert_eq!(upstream.call_count(), 0);
}

#[tokio::test]
async fn valid_input_passes_and_reaches_the_upstream_unchanged() {
    let (upstream, gw) = booking().await;

    let input = json!({"a": 1.5, "b": 2, "name": "Ada", "opts": {"n": 3}});
    let result = gw.call("Calculator.Add@1.0.0", input.clone()).await.result();

    assert_eq!(result["value"], json!(3.5));
    assert_eq!(upstream.call_count(), 1);
    assert_eq!(upstream.last_request()["input"], input);
}

/// Under `[catalog] pin = "record"` a changed definition is served at once
/// (under the default "hold" it waits for review: tests/tool_integrity.rs).
#[tokio::test]
async fn a_changed_schema_is_validated_against_after_the_next_poll() {
    let upstream = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", booking_schema())])).await;
    upstream.on_call(add);
    let gw =
        GatewayConfig::new().catalog_line("pin = \"record\"").upstream("calculator", &upstream.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();

    // The same version now wants strings (a careless upstream, but the gateway
    // must follow the catalog it publishes when told to serve changes).
    let strings = json!({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"]});
    upstream.set_catalog(catalog(vec![tool("Calculator.Add", "1.0.0", strings.clone())]));
    gw.wait_for_tools("the new schema is published", |items| {
        find_tool(items, "Calculator.Add@1.0.0").is_some_and(|t| t["input_schema"] == strings)
    })
    .await;

    let errors = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.parameter_errors();
    assert!(errors.contains_key("a") && errors.contains_key("b"), "{errors:?}");
    gw.call("Calculator.Add@1.0.0", json!({"a": "1", "b": "2"})).await.result();
    assert_eq!(upstream.call_count(), 2);
}

#[tokio::test]
async fn validation_uses_the_resolved_version_schema() {
    let v1 = json!({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]});
    let v2 = json!({"type": "object", "properties": {"y": {"type": "string"}}, "required": ["y"]});
    let upstream =
        ToolServer::start(catalog(vec![tool("Shape.Tool", "1.0.0", v1), tool("Shape.Tool", "2.0.0", v2)])).await;
    let gw = GatewayConfig::new().upstream("shapes", &upstream.url()).start().await;
    gw.wait_for_tools("both versions", |items| items.len() == 2).await;

    gw.call("Shape.Tool@1", json!({"x": 1})).await.result();
    gw.call("Shape.Tool", json!({"y": "yes"})).await.result();
    let errors = gw.call("Shape.Tool", json!({"x": 1})).await.parameter_errors();
    assert!(errors.contains_key("y"), "latest is 2.0.0, which requires y: {errors:?}");
    let errors = gw.call("Shape.Tool@1.0.0", json!({"y": "yes"})).await.parameter_errors();
    assert!(errors.contains_key("x"), "1.0.0 requires x: {errors:?}");
    assert_eq!(upstream.call_count(), 2);
}

/// `{"type": "object", "properties": {"amount": {"type": "integer"}}, ...}`:
/// a schema the gateway checks by its members' kinds (`validate.rs`).
async fn amounts() -> (ToolServer, Gateway) {
    let schema = json!({"type": "object", "properties": {"amount": {"type": "integer"}, "note": {"type": "string"}},
                        "required": ["amount"]});
    let upstream = ToolServer::start(catalog(vec![tool("Bank.Pay", "1.0.0", schema)])).await;
    let gw = GatewayConfig::new().upstream("bank", &upstream.url()).start().await;
    gw.wait_for_tool("Bank.Pay@1.0.0").await;
    (upstream, gw)
}

async fn pay(gw: &Gateway, input: &str) -> Resp {
    let body = format!(r#"{{"$schema":"otc://1.0","request":{{"tool_id":"Bank.Pay@1.0.0","input":{input}}}}}"#);
    gw.post_raw("/tools/call", body, "application/json").await
}

async fn pay_over_mcp(gw: &Gateway, arguments: &str) -> Resp {
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"Bank_Pay","arguments":{arguments}}}}}"#
    );
    let headers = [("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    send_with_headers(gw.addr, "POST", "/mcp", bytes::Bytes::from(body), &headers).await
}

/// An input of the common shape goes upstream as the client wrote it, its
/// spacing and member order kept (checked by kinds, never rewritten).
#[tokio::test]
async fn a_plain_input_reaches_the_upstream_as_written() {
    let (upstream, gw) = amounts().await;
    pay(&gw, r#"{"note": "rent", "amount": 5}"#).await.expect_status(200);
    assert!(
        upstream.last_raw_call().contains(r#""input":{"note": "rent", "amount": 5}"#),
        "{}",
        upstream.last_raw_call()
    );
    pay_over_mcp(&gw, r#"{ "note": "tip","amount":7 }"#).await.expect_status(200);
    assert!(
        upstream.last_raw_call().contains(r#""input":{ "note": "tip","amount":7 }"#),
        "{}",
        upstream.last_raw_call()
    );
    // Checked all the same: a string amount never reaches the tool.
    let calls = upstream.call_count();
    let resp = pay(&gw, r#"{"amount": "5"}"#).await;
    resp.expect_status(422);
    assert!(resp.parameter_errors().contains_key("amount"));
    pay(&gw, r#"{"note": "no amount"}"#).await.expect_status(422);
    assert_eq!(upstream.call_count(), calls);
}

/// A hostile client sends a key twice, hoping the tool's parser keeps the
/// value the gateway did not check: the tool gets one `amount`, the one
/// validated, through both fronts and at any depth.
#[tokio::test]
async fn a_key_sent_twice_reaches_the_upstream_once_as_validated() {
    let (upstream, gw) = amounts().await;
    pay(&gw, r#"{"amount": "all of it", "amount": 5}"#).await.expect_status(200);
    let forwarded = upstream.last_raw_call();
    assert!(forwarded.contains(r#""input":{"amount":5}"#), "{forwarded}");
    assert!(!forwarded.contains("all of it"), "{forwarded}");
    // The other way round the checked value is the string: refused.
    pay(&gw, r#"{"amount": 5, "amount": "all of it"}"#).await.expect_status(422);
    pay_over_mcp(&gw, r#"{"amount": "all of it", "amount": 6}"#).await.expect_status(200);
    let forwarded = upstream.last_raw_call();
    assert!(forwarded.contains(r#""input":{"amount":6}"#) && !forwarded.contains("all of it"), "{forwarded}");
    // Nested: the object goes rewritten with its last member only.
    pay(&gw, r#"{"amount": 1, "note": "x", "extra": {"to": "alice", "to": "mallory"}}"#).await.expect_status(200);
    let forwarded = upstream.last_raw_call();
    assert!(forwarded.contains(r#""extra":{"to":"mallory"}"#) && !forwarded.contains("alice"), "{forwarded}");
}
