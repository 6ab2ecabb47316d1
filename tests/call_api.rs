//! The front call API: request shapes, `$schema`, ids carried through, the
//! canonical re-wrap, and the HTTP-level errors (404, 405, 400).

mod common;

use common::*;
use serde_json::{json, Value};

/// A calculator upstream that adds, and a gateway in front of it, ready.
async fn calculator_gateway() -> (ToolServer, Gateway) {
    let calc = calculator().await;
    let gw = GatewayConfig::new().upstream("calculator", &calc.url()).start().await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    (calc, gw)
}

#[tokio::test]
async fn health_answers_200() {
    let (_calc, gw) = calculator_gateway().await;
    gw.get("/health").await.expect_status(200);
}

#[tokio::test]
async fn the_spec_example_call_comes_back_canonically_wrapped() {
    let (calc, gw) = calculator_gateway().await;

    let resp = gw
        .post_json(
            "/tools/call",
            &json!({
                "$schema": "otc://1.0",
                "request": {
                    "call_id": "123e4567-e89b-12d3-a456-426614174000",
                    "tool_id": "Calculator.Add@1.0.0",
                    "input": {"a": 10, "b": 5}
                }
            }),
        )
        .await;

    assert!(
        resp.header("content-type").is_some_and(|ct| ct.starts_with("application/json")),
        "content-type must be JSON: {:?}",
        resp.headers
    );
    let result = resp.result();
    assert_eq!(result["call_id"], "123e4567-e89b-12d3-a456-426614174000");
    assert_eq!(result["success"], true);
    assert_eq!(result["value"], json!(15));
    assert!(result.get("error").is_none(), "a success carries no error: {result}");

    // What the upstream saw: a canonical wrapped request with the same ids.
    let calls = calc.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["$schema"], "otc://1.0", "the upstream call must be wrapped with $schema: {}", calls[0]);
    let forwarded = forwarded(&calls[0]);
    assert_eq!(forwarded["tool_id"], "Calculator.Add@1.0.0");
    assert!(common::is_scoped_call_id(&forwarded["call_id"], "123e4567-e89b-12d3-a456-426614174000"), "{forwarded}");
    assert_eq!(forwarded["input"], json!({"a": 10, "b": 5}));
}

#[tokio::test]
async fn post_call_is_an_alias_of_tools_call() {
    let (calc, gw) = calculator_gateway().await;

    let resp = gw
        .post_json("/call", &json!({"request": {"tool_id": "Calculator.Add@1.0.0", "input": {"a": 2, "b": 3}}}))
        .await;

    assert_eq!(resp.result()["value"], json!(5));
    assert_eq!(calc.call_count(), 1);
}

#[tokio::test]
async fn a_bare_request_object_is_accepted() {
    let (calc, gw) = calculator_gateway().await;

    let resp = gw
        .post_json(
            "/tools/call",
            &json!({"tool_id": "Calculator.Add@1.0.0", "call_id": "bare-1", "input": {"a": 1, "b": 1}}),
        )
        .await;

    let result = resp.result();
    assert_eq!(result["value"], json!(2));
    assert_eq!(result["call_id"], "bare-1");
    assert!(common::is_scoped_call_id(&calc.last_request()["call_id"], "bare-1"));
}

#[tokio::test]
async fn inputs_is_read_as_input_and_forwarded_as_input() {
    let (calc, gw) = calculator_gateway().await;

    let resp = gw
        .post_json("/tools/call", &json!({"request": {"tool_id": "Calculator.Add@1.0.0", "inputs": {"a": 4, "b": 4}}}))
        .await;

    assert_eq!(resp.result()["value"], json!(8));
    let forwarded = calc.last_request();
    assert_eq!(forwarded["input"], json!({"a": 4, "b": 4}));
    assert!(forwarded.get("inputs").is_none(), "the gateway forwards `input`, never `inputs`: {forwarded}");
}

#[tokio::test]
async fn every_accepted_schema_is_served_and_another_version_is_refused() {
    let (calc, gw) = calculator_gateway().await;
    let request = json!({"tool_id": "Calculator.Add@1.0.0", "input": {"a": 1, "b": 2}});

    for schema in [
        "otc://1.0",
        "urn:oxp:1.0",
        "https://github.com/ArcadeAI/OpenToolCalling/tree/main/specification/http/1.0/openapi.json",
    ] {
        let resp = gw.post_json("/tools/call", &json!({"$schema": schema, "request": request})).await;
        assert_eq!(resp.result()["value"], json!(3), "$schema {schema} must be accepted");
    }
    // No $schema means the latest version, which the gateway speaks.
    let resp = gw.post_json("/tools/call", &json!({"request": request})).await;
    assert_eq!(resp.result()["value"], json!(3));
    assert_eq!(calc.call_count(), 4);

    for schema in ["otc://2.0", "urn:oxp:2.0", "nonsense"] {
        let resp = gw.post_json("/tools/call", &json!({"$schema": schema, "request": request})).await;
        resp.server_error(400);
    }
    assert_eq!(calc.call_count(), 4, "an unsupported $schema must be refused before the tool is called");
}

#[tokio::test]
async fn a_missing_call_id_is_generated_and_forwarded() {
    let (calc, gw) = calculator_gateway().await;

    let first = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();
    let second = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();

    let id = first["call_id"].as_str().expect("a generated call_id is a string");
    assert!(!id.is_empty());
    assert_ne!(first["call_id"], second["call_id"], "each call gets its own call_id");
    let calls = calc.calls();
    assert_eq!(forwarded(&calls[0])["call_id"], first["call_id"], "the generated call_id is what the upstream saw");
    assert_eq!(forwarded(&calls[1])["call_id"], second["call_id"]);
}

#[tokio::test]
async fn trace_id_and_call_id_reach_the_upstream() {
    let (calc, gw) = calculator_gateway().await;

    let resp = gw
        .post_json(
            "/tools/call",
            &json!({"request": {
                "tool_id": "Calculator.Add@1.0.0", "call_id": "c-7", "trace_id": "trace-42",
                "input": {"a": 1, "b": 2}
            }}),
        )
        .await;

    resp.result();
    let forwarded = calc.last_request();
    assert_eq!(forwarded["trace_id"], "trace-42");
    assert!(common::is_scoped_call_id(&forwarded["call_id"], "c-7"), "{forwarded}");
}

#[tokio::test]
async fn duration_is_filled_in_when_the_upstream_gives_none_and_kept_when_it_does() {
    let (calc, gw) = calculator_gateway().await;

    // The `add` handler answers without a duration.
    let result = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();
    assert!(
        result["duration"].as_f64().is_some_and(|d| d >= 0.0),
        "duration must be filled in when the upstream gives none: {result}"
    );

    calc.on_call(|req| {
        let body = json!({"$schema": "otc://1.0", "result": {
            "call_id": forwarded(req)["call_id"], "duration": 1234, "success": true, "value": 3
        }});
        (200, body.to_string())
    });
    let result = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(result["duration"].as_f64(), Some(1234.0), "the upstream's own duration is kept: {result}");
}

#[tokio::test]
async fn the_client_gets_its_own_call_id_whatever_the_upstream_echoes() {
    let (calc, gw) = calculator_gateway().await;
    calc.on_call(|_| (200, json!({"call_id": "the-upstreams-own", "success": true, "value": 3}).to_string()));
    let resp = gw
        .post_json(
            "/tools/call",
            &json!({"request": {"tool_id": "Calculator.Add@1.0.0", "call_id": "mine-1", "input": {"a": 1, "b": 2}}}),
        )
        .await;
    assert_eq!(resp.result()["call_id"], "mine-1", "the result carries the call id the client sent");
    // A generated id too.
    let result = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(result["call_id"], calc.last_request()["call_id"]);
}

#[tokio::test]
async fn bare_and_older_upstream_results_are_rewrapped_canonically() {
    let (calc, gw) = calculator_gateway().await;

    // A bare result, no envelope, no $schema.
    calc.on_call(|req| (200, json!({"call_id": forwarded(req)["call_id"], "success": true, "value": 42}).to_string()));
    let result = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(result["success"], true);
    assert_eq!(result["value"], 42);

    // The older draft shape: output: {value}.
    calc.on_call(|req| {
        (200, json!({"call_id": forwarded(req)["call_id"], "success": true, "output": {"value": 7}}).to_string())
    });
    let result = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(result["success"], true);
    assert_eq!(result["value"], 7, "output.value must be re-wrapped as value: {result}");
    assert!(result.get("output").is_none(), "the canonical result has no `output`: {result}");

    // The older draft shape of a failure: output: {error}.
    calc.on_call(|req| {
        let error = json!({"message": "boom", "can_retry": false});
        (200, json!({"call_id": forwarded(req)["call_id"], "success": false, "output": {"error": error}}).to_string())
    });
    let result = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await.result();
    assert_eq!(result["success"], false);
    assert_eq!(result["error"]["message"], "boom", "output.error must be re-wrapped as error: {result}");
}

#[tokio::test]
async fn an_unknown_path_is_404_with_a_json_body() {
    let (_calc, gw) = calculator_gateway().await;

    for path in ["/nope", "/tools/call/extra", "/v2/tools"] {
        let resp = gw.get(path).await;
        resp.server_error(404);
    }
    let resp = gw.post_json("/tools/nope", &json!({})).await;
    resp.server_error(404);
}

#[tokio::test]
async fn a_wrong_method_is_405_with_allow() {
    let (calc, gw) = calculator_gateway().await;

    for (method, path) in [
        ("GET", "/tools/call"),
        ("GET", "/call"),
        ("PUT", "/tools/call"),
        ("POST", "/tools"),
        ("DELETE", "/tools"),
        ("POST", "/health"),
    ] {
        let resp = gw.request(method, path, "", None).await;
        resp.server_error(405);
        assert!(resp.header("allow").is_some(), "{method} {path}: a 405 must say what is allowed: {:?}", resp.headers);
    }
    assert_eq!(calc.call_count(), 0);
}

#[tokio::test]
async fn malformed_json_is_400_and_never_reaches_the_upstream() {
    let (calc, gw) = calculator_gateway().await;

    for body in [&b"{not json"[..], b"", b"[1, 2", b"{\"request\": {\"tool_id\": \"Calculator.Add@1.0.0\", }}"] {
        let resp = gw.post_raw("/tools/call", body.to_vec(), "application/json").await;
        resp.server_error(400);
    }
    assert_eq!(calc.call_count(), 0);
}

#[tokio::test]
async fn invalid_utf8_is_400() {
    let (calc, gw) = calculator_gateway().await;

    let mut body = br#"{"request": {"tool_id": "Calculator.Add@1.0.0", "input": {"a": 1, "b": 2, "c": ""#.to_vec();
    body.extend_from_slice(&[0xff, 0xfe, 0x80]);
    body.extend_from_slice(br#""}}}"#);
    let resp = gw.post_raw("/tools/call", body, "application/json").await;

    resp.server_error(400);
    assert_eq!(calc.call_count(), 0);
}

#[tokio::test]
async fn wrong_field_types_are_400() {
    let (calc, gw) = calculator_gateway().await;

    let bodies: Vec<Value> = vec![
        json!({"request": {"tool_id": 42, "input": {"a": 1, "b": 2}}}),
        json!({"request": {"tool_id": ["Calculator.Add@1.0.0"], "input": {"a": 1, "b": 2}}}),
        json!({"request": {"tool_id": "Calculator.Add@1.0.0", "call_id": {"x": 1}, "input": {"a": 1, "b": 2}}}),
        json!({"request": {"tool_id": "Calculator.Add@1.0.0", "trace_id": 7, "input": {"a": 1, "b": 2}}}),
        json!({"request": "Calculator.Add@1.0.0"}),
        json!({"$schema": 1, "request": {"tool_id": "Calculator.Add@1.0.0", "input": {"a": 1, "b": 2}}}),
        json!(["Calculator.Add@1.0.0"]),
        json!("Calculator.Add@1.0.0"),
    ];
    for body in bodies {
        let resp = gw.post_json("/tools/call", &body).await;
        assert_eq!(resp.status, 400, "{body} must be refused with 400, got {}: {}", resp.status, resp.text());
        resp.server_error(400);
    }
    assert_eq!(calc.call_count(), 0);
}

#[tokio::test]
async fn a_request_without_tool_id_is_400() {
    let (calc, gw) = calculator_gateway().await;

    let resp = gw.post_json("/tools/call", &json!({"request": {"input": {"a": 1, "b": 2}}})).await;

    resp.server_error(400);
    assert_eq!(calc.call_count(), 0);
}

#[tokio::test]
async fn the_catalog_is_served_canonically() {
    // The upstream speaks the older draft: `tools` and a parameters-wrapped schema.
    let mut add_v1 = tool("Calculator.Add", "1.0.0", json!({}));
    add_v1["input_schema"] = json!({"parameters": add_schema()});
    let calc = ToolServer::start(json!({"tools": [add_v1]})).await;
    let gw = GatewayConfig::new().upstream("calculator", &calc.url()).start().await;

    let listed = gw.wait_for_tool("Calculator.Add@1.0.0").await;

    assert_eq!(listed["input_schema"], add_schema(), "input_schema is always served flat: {listed}");
    assert_eq!(listed["name"], "Calculator_Add");
    assert_eq!(listed["version"], "1.0.0");
    assert_eq!(listed["description"], "Calculator.Add version 1.0.0");
    let body = gw.get("/tools").await.json();
    assert!(body.get("tools").is_none(), "the gateway lists under `items` only: {body}");
}
