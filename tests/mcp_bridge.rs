//! The MCP bridge, both ways, against real MCP peers: the official Python
//! SDK's server behind the gateway (`protocol = "mcp"`), speaking MCP
//! 2026-07-28 only, 2025-11-25 only, or both, and its client in front of
//! `/mcp`. Small scripted MCP servers on loopback cover what the SDK server
//! does not do on demand (paged tools/list, a `ping` and a notification
//! before the response, JSON-RPC errors, `input_required`, a hostile change
//! stream) and record what the gateway sent them.
//!
//! The Python peers come from the virtualenv `scripts/test.sh` makes
//! (`OTC_TEST_PYTHON`, else `.venv/bin/python`); without it these tests fail
//! saying so.

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::mcp_peer::{mcp_upstream, Era, McpPeer};
use common::{
    find_tool, peer_script, send_with_headers, wait_until, wait_within, Gateway, GatewayConfig, Resp, ToolServer,
};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

// ---------------------------------------------------------------------------
// The Python peers
// ---------------------------------------------------------------------------

/// Runs tests/peers/mcp_client.py against `url`; its JSON report. On a
/// blocking thread: in-process tool servers share the test's runtime.
async fn python_client(url: &str, calls: &Value) -> Value {
    let mut command = Command::new(common::sdk_python());
    command.arg(peer_script("mcp_client.py")).arg(url).arg(calls.to_string());
    let output = tokio::task::spawn_blocking(move || command.output()).await.expect("join").expect("run mcp_client.py");
    assert!(output.status.success(), "mcp_client.py failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("mcp_client.py printed no JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)))
}

// ---------------------------------------------------------------------------
// Raw requests to /mcp
// ---------------------------------------------------------------------------

async fn mcp_post(gw: &Gateway, body: &Value, headers: &[(&str, &str)]) -> Resp {
    let mut all = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(body.to_string()), &all).await
}

async fn rpc(gw: &Gateway, method: &str, params: Value) -> Value {
    let resp = mcp_post(gw, &json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}), &[]).await;
    resp.expect_status(200);
    let body = resp.json();
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert_eq!(body["id"], 7, "{body}");
    body
}

/// `len` bytes of text JSON has to escape, with multi-byte characters.
fn awkward_text(len: usize) -> String {
    let mut s = String::with_capacity(len + 16);
    let mut i = 0usize;
    while s.len() < len {
        s.push_str(["plain ", "\"quoted\" ", "back\\slash ", "new\nline ", "ünïcødé ", "🦀 "][i % 6]);
        i += 1;
    }
    s
}

// ---------------------------------------------------------------------------
// MCP servers behind the gateway
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_python_sdk_server_behind_the_gateway() {
    sdk_server_behind_the_gateway(Era::Dual).await;
}

#[tokio::test]
async fn the_python_sdk_server_of_2026_07_28_only_behind_the_gateway() {
    sdk_server_behind_the_gateway(Era::R2026_07_28).await;
}

#[tokio::test]
async fn the_python_sdk_server_of_2025_11_25_only_behind_the_gateway() {
    sdk_server_behind_the_gateway(Era::R2025_11_25).await;
}

/// Every call works in every era, and a server of both eras is spoken to in
/// 2026-07-28. The SDK server checks a 2026-07-28 request's `_meta`,
/// `MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name` and `Mcp-Param-*` against
/// its body and refuses a mismatch, so each call that works there is
/// evidence that they were right.
async fn sdk_server_behind_the_gateway(era: Era) {
    let peer = McpPeer::start_in(era, false);
    let gw = GatewayConfig::new()
        .raw(&mcp_upstream("py", &peer.url(), "Py", "call_timeout = \"5s\""))
        .start_with_env(&[("RUST_LOG", "info,otc_gateway::mcp=debug")])
        .await;

    // MCP tools under the configured toolkit and version; names sanitised.
    let add = gw.wait_for_tool("Py.add@1.0.0").await;
    assert_eq!(add["name"], "add");
    assert_eq!(add["description"], "Adds two integers.");
    assert_eq!(add["input_schema"]["properties"]["a"]["type"], "integer");
    assert_eq!(add["input_schema"]["required"], json!(["a", "b"]));
    let items = gw.tools().await;
    let length = find_tool(&items, "Py.text_length@1.0.0").expect("text-length is listed as text_length");
    assert_eq!(length["name"], "text-length");
    let weather = find_tool(&items, "Py.weather@1.0.0").expect("weather");
    assert_eq!(weather["output_schema"]["properties"]["temperature"]["type"], "number", "{weather}");

    // A plain result: the text content, read as JSON.
    let result = gw.call("Py.add@1.0.0", json!({"a": 2, "b": 40})).await.result();
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(result["value"], 42);
    assert!(result["call_id"].is_string() && result["duration"].is_number(), "{result}");
    // Structured output becomes the value.
    let result = gw.call("Py.weather", json!({"city": "Oslo"})).await.result();
    assert_eq!(result["value"], json!({"city": "Oslo", "temperature": 21.5, "conditions": "sunny"}));
    // The original MCP name goes upstream.
    let result = gw.call("Py.text_length", json!({"text": "hello"})).await.result();
    assert_eq!(result["value"], 5, "{result}");

    // A tool that raises is a tool failure (the SDK hides an unexpected
    // exception's text; a ToolError's text is the message).
    let failed = gw.call("Py.explode", json!({"reason": "boom"})).await.result();
    assert_eq!(failed["success"], false, "{failed}");
    assert!(failed["error"]["message"].as_str().is_some_and(|m| m.contains("explode")), "{failed}");
    let refused = gw.call("Py.refuse", json!({"reason": "not today"})).await.result();
    assert_eq!(refused["success"], false, "{refused}");
    assert!(refused["error"]["message"].as_str().is_some_and(|m| m.contains("refused: not today")), "{refused}");

    // Inputs are validated at the gateway; unknown tools are 400s.
    let errors = gw.call("Py.add", json!({"a": "two"})).await.parameter_errors();
    assert!(errors.contains_key("a") && errors.contains_key("b"), "{errors:?}");
    gw.call("Py.nothing", json!({})).await.server_error(400);

    // Log notifications on the SSE stream are skipped until the response
    // (a 2026-07-28 server sends none: the gateway asks for no log level).
    let result = gw.call("Py.chatty", json!({})).await.result();
    assert_eq!(result["value"], "chatted", "{result}");
    if era == Era::R2025_11_25 {
        gw.wait_for_log(&["skipping an MCP notification"]).await;
    }

    // The revision the call was made in.
    let result = gw.call("Py.revision", json!({})).await.result();
    assert_eq!(result["value"], era.revision(), "{result}");
    // A parameter the server wants as `Mcp-Param-Region` (in 2026-07-28 the
    // SDK refuses the call without it, -32020), plain and in base64.
    let result = gw.call("Py.query", json!({"region": "eu-west", "sql": "select 1"})).await.result();
    let value = result["value"].as_str().unwrap_or_default();
    assert!(value.starts_with("eu-west: select 1"), "{result}");
    if era != Era::R2025_11_25 {
        assert!(value.ends_with("(header eu-west)"), "{result}");
    }
    let result = gw.call("Py.query", json!({"region": "Zürich", "sql": "select 2"})).await.result();
    assert!(result["value"].as_str().is_some_and(|v| v.starts_with("Zürich: select 2")), "{result}");
    // A tool whose name is not ASCII: `Mcp-Name` in base64.
    let result = gw.call("Py.m_t_o", json!({"city": "Oslo"})).await.result();
    assert_eq!(result["value"], "sunny in Oslo", "{result}");

    let status: Value = send_with_headers(gw.admin, "GET", "/status", Bytes::new(), &[]).await.json();
    let upstream = &status["upstreams"][0];
    assert_eq!(upstream["up"], true, "{status}");
    assert_eq!(upstream["skipped"], json!([]), "{status}");
    assert_eq!(upstream["mcp_protocol_version"], era.revision(), "{status}");
    let logs = gw.logs();
    assert_eq!(logs.contains("MCP session opened"), era == Era::R2025_11_25, "{logs}");
}

#[tokio::test]
async fn bodies_over_64_kb_go_through_both_bridges() {
    let peer = McpPeer::start(false);
    let gw = GatewayConfig::new().raw(&mcp_upstream("py", &peer.url(), "Py", "")).start().await;
    gw.wait_for_tool("Py.echo@1.0.0").await;
    let text = awkward_text(200 * 1024);

    // OTC client → gateway → MCP server, and back.
    let result = gw.call("Py.echo", json!({"text": text})).await.result();
    assert!(result["value"].as_str() == Some(text.as_str()), "the text came back intact");
    let result = gw.call("Py.text_length", json!({"text": text})).await.result();
    assert_eq!(result["value"], text.chars().count());

    // MCP client → /mcp → MCP server, and back.
    let body = rpc(&gw, "tools/call", json!({"name": "Py_echo", "arguments": {"text": text}})).await;
    assert_eq!(body["result"]["isError"], false, "{}", &body.to_string()[..300]);
    assert!(body["result"]["content"][0]["text"].as_str() == Some(text.as_str()), "the text came back intact");
}

#[tokio::test]
async fn json_replies_a_restarted_server_and_a_server_that_is_down() {
    let mut peer = McpPeer::start_in(Era::R2025_11_25, true);
    let gw = GatewayConfig::new().raw(&mcp_upstream("py", &peer.url(), "Py", "circuit_failures = 100")).start().await;
    gw.wait_for_tool("Py.add@1.0.0").await;
    assert_eq!(gw.call("Py.add", json!({"a": 1, "b": 1})).await.result()["value"], 2);

    // Down. The first call may still take the connection pooled before the
    // server went and find it broken mid-call: a tool failure naming the
    // upstream (the tool may have run; docs/api.md says when `can_retry` is
    // set, and tests/resilience.rs checks it). Once that connection is gone
    // the gateway cannot connect: the tool was never called, so it is a 400
    // before the call.
    peer.stop();
    let mut down = gw.call("Py.add", json!({"a": 1, "b": 2})).await;
    if down.status == 200 {
        let result = down.result();
        assert_eq!(result["success"], false, "{result}");
        let developer = result["error"]["developer_message"].as_str().unwrap_or_default();
        assert!(developer.starts_with("py "), "{result}");
        down = gw.call("Py.add", json!({"a": 1, "b": 2})).await;
    }
    let body = down.server_error(400);
    assert_eq!(body["message"], "The tool server is temporarily unavailable", "{body}");

    // Back, as a new process that knows no session: the gateway's session id
    // gets a 404, and a new session is opened.
    peer.restart();
    let resp = wait_until("the restarted server is called", async || {
        let resp = gw.call("Py.add", json!({"a": 1, "b": 3})).await;
        if resp.status == 200 {
            Ok(resp)
        } else {
            Err(resp.text())
        }
    })
    .await;
    assert_eq!(resp.result()["value"], 4, "{}", resp.text());
    // A second session was opened: by the call that met the old one's 404
    // ("MCP session expired"), or before it, when a failed call or the tool
    // list watcher had already let the old one go (which wins is timing).
    wait_until("a new MCP session is opened", async || {
        let logs = gw.logs();
        if logs.matches("MCP session opened").count() >= 2 {
            Ok(())
        } else {
            Err(logs)
        }
    })
    .await;
}

#[tokio::test]
async fn a_call_that_outlives_call_timeout_is_a_retryable_tool_failure() {
    let peer = McpPeer::start(false);
    let gw = GatewayConfig::new().raw(&mcp_upstream("py", &peer.url(), "Py", "call_timeout = \"700ms\"")).start().await;
    gw.wait_for_tool("Py.slow@1.0.0").await;
    let started = Instant::now();
    let result = gw.call("Py.slow", json!({"seconds": 5})).await.result();
    assert!(started.elapsed() < Duration::from_secs(4), "the gateway waited {:?}", started.elapsed());
    assert_eq!(result["success"], false, "{result}");
    assert_eq!(result["error"]["can_retry"], true, "{result}");
    // The link is still good for the next call.
    assert_eq!(gw.call("Py.slow", json!({"seconds": 0})).await.result()["value"], "done");
}

/// Calls `Py.revision` until it answers 200, within `limit`; its value.
async fn revision_once_callable(gw: &Gateway, limit: Duration) -> Value {
    wait_within(limit, "Py.revision works", async || {
        let resp = gw.call("Py.revision", json!({})).await;
        if resp.status == 200 && resp.result()["success"] == true {
            Ok(resp.result()["value"].clone())
        } else {
            Err(resp.text())
        }
    })
    .await
}

#[tokio::test]
async fn a_server_replaced_by_one_of_the_other_era_is_probed_again() {
    let mut peer = McpPeer::start_in(Era::R2025_11_25, false);
    let gw = GatewayConfig::new().raw(&mcp_upstream("py", &peer.url(), "Py", "circuit_failures = 100")).start().await;
    gw.wait_for_tool("Py.revision@1.0.0").await;
    assert_eq!(revision_once_callable(&gw, Duration::from_secs(10)).await, "2025-11-25");

    // In its place, a 2026-07-28 server: it refuses the session's request
    // (400, no `_meta`), so the gateway probes again and speaks 2026-07-28.
    peer.stop();
    peer.restart_as(Era::R2026_07_28);
    assert_eq!(revision_once_callable(&gw, Duration::from_secs(20)).await, "2026-07-28");
    gw.wait_for_log(&["probing it again"]).await;

    // And back: a 2025-11-25 server refuses a 2026-07-28 request (400, not
    // an error of 2026-07-28), so the gateway opens a session again.
    peer.stop();
    peer.restart_as(Era::R2025_11_25);
    assert_eq!(revision_once_callable(&gw, Duration::from_secs(20)).await, "2025-11-25");
}

/// `[catalog]` with a poll interval no test waits out: only a change
/// announcement (or the reopening of its stream) explains a catalog change.
fn long_poll_config(upstreams: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [catalog]\npoll_interval = \"1h\"\nrequest_timeout = \"5s\"\nmax_catalog_bytes = 65536\n\n{upstreams}"
    )
}

/// Waits up to `limit` until `pred` holds for GET /tools.
async fn wait_for_catalog(gw: &Gateway, what: &str, limit: Duration, pred: impl Fn(&[Value]) -> bool) {
    wait_within(limit, what, async || {
        let items = gw.tools().await;
        if pred(&items) {
            Ok(())
        } else {
            Err(format!("{:?}", common::ids(&items)))
        }
    })
    .await
}

#[tokio::test]
async fn a_tool_list_change_of_a_2026_07_28_server_reaches_the_catalog_at_once() {
    tool_list_changes_reach_the_catalog_at_once(Era::R2026_07_28).await;
}

#[tokio::test]
async fn a_tool_list_change_of_a_2025_11_25_server_reaches_the_catalog_at_once() {
    tool_list_changes_reach_the_catalog_at_once(Era::R2025_11_25).await;
}

#[tokio::test]
async fn a_tool_list_change_of_a_dual_era_server_reaches_the_catalog_at_once() {
    tool_list_changes_reach_the_catalog_at_once(Era::Dual).await;
}

/// With an hour between polls, a tool added upstream is listed within
/// seconds: `subscriptions/listen` (2026-07-28) or the session's GET stream
/// (2025-11-25). A restarted server drops the stream; once it is reopened,
/// the catalog is fetched (the tool added before is gone from the new
/// process) and the next change arrives again.
async fn tool_list_changes_reach_the_catalog_at_once(era: Era) {
    let mut peer = McpPeer::start_in(era, false);
    let config = long_poll_config(&mcp_upstream("py", &peer.url(), "Py", ""));
    let log = "info,otc_gateway::mcp=debug,otc_gateway::gateway=debug";
    let gw = Gateway::start_with_env(&config, &[("RUST_LOG", log)]).await;
    gw.wait_for_tool("Py.add@1.0.0").await;
    // Once the stream is open and the fetch its opening asks for is done,
    // only a notification can bring the next tool.
    gw.wait_for_log(&["listening for tool list changes", "catalog fetched as asked"]).await;

    peer.add_tool("grown_1").await;
    gw.wait_for_tool("Py.grown_1@1.0.0").await;
    let result = gw.call("Py.grown_1", json!({})).await.result();
    assert_eq!(result["value"], "grown_1 was added at runtime", "{result}");

    peer.stop();
    peer.restart();
    let limit = Duration::from_secs(30);
    wait_for_catalog(&gw, "the restarted server's list is read", limit, |items| {
        find_tool(items, "Py.grown_1@1.0.0").is_none() && find_tool(items, "Py.add@1.0.0").is_some()
    })
    .await;
    peer.add_tool("grown_2").await;
    wait_for_catalog(&gw, "Py.grown_2 is listed", limit, |items| find_tool(items, "Py.grown_2@1.0.0").is_some()).await;
    gw.wait_for_log(&["the tool list change stream closed; reopening it"]).await;
}

#[tokio::test]
async fn an_sdk_servers_answer_reaches_an_mcp_client_as_the_server_wrote_it() {
    let peer = McpPeer::start(false);
    let gw = GatewayConfig::new().raw(&mcp_upstream("py", &peer.url(), "Py", "")).start().await;
    gw.wait_for_tool("Py.greet@1.0.0").await;
    // The SDK wraps a string answer in {"result": …} as structured output and
    // writes the string itself as the text: an MCP client gets exactly that.
    let answer = rpc(&gw, "tools/call", json!({"name": "Py_greet", "arguments": {"name": "ann"}})).await;
    let result = &answer["result"];
    assert_eq!(result["content"], json!([{"type": "text", "text": "hi ann"}]), "{answer}");
    assert_eq!(result["structuredContent"], json!({"result": "hi ann"}), "{answer}");
    assert_eq!(result["isError"], false, "{answer}");
    assert!(result["_meta"]["otc-gateway/call_id"].is_string(), "the gateway's own _meta: {answer}");
    // An OTC caller gets OTC's mapping of it.
    let value = gw.call("Py.greet@1.0.0", json!({"name": "ann"})).await.result()["value"].clone();
    assert_eq!(value, json!({"result": "hi ann"}));
    // A failure too, as written.
    let failed = rpc(&gw, "tools/call", json!({"name": "Py_explode", "arguments": {"reason": "boom"}})).await;
    assert_eq!(failed["result"]["isError"], true, "{failed}");
    // (The SDK writes its own words for an exception, not the reason.)
    assert_eq!(
        failed["result"]["content"],
        json!([{"type": "text", "text": "Error executing tool explode"}]),
        "{failed}"
    );
}

#[tokio::test]
async fn bearer_tokens_and_per_user_tokens_go_upstream_and_mcp_needs_credentials() {
    let peer = McpPeer::start(false);
    let config = GatewayConfig::new()
        .raw(&mcp_upstream("shared", &peer.url(), "Shared", "bearer_token = \"env:MB_UPSTREAM_TOKEN\""))
        .raw(&mcp_upstream("per-user", &peer.url(), "Mine", "user_token = \"google\""))
        .raw(
            "[authorization.google]\ntoken = \"env:MB_GOOGLE_{user_id}\"\n\n\
             [auth]\nmode = \"jwt\"\nhs256_secret = \"env:MB_JWT_SECRET\"\n\
             api_keys = [{ key = \"env:MB_API_KEY\", user_id = \"alice\" }]\n",
        );
    let gw = config
        .start_with_env(&[
            // Everything logged: the probe, the calls and the change stream
            // carry the tokens, and none may show.
            ("RUST_LOG", "trace"),
            ("MB_UPSTREAM_TOKEN", "upstream-secret"),
            ("MB_GOOGLE_alice", "alice-google-token"),
            ("MB_JWT_SECRET", "a-jwt-secret-that-is-long-enough-0123456789"),
            ("MB_API_KEY", "ak-alice-0123456789"),
        ])
        .await;
    let key = [("authorization", "Bearer ak-alice-0123456789")];
    let call = |tool: &'static str| {
        let body = json!({"request": {"tool_id": tool, "input": {}}}).to_string();
        send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body), &key)
    };
    wait_until("Mine.whoami is callable", async || call("Mine.whoami").await.status == 200).await;
    // Each upstream got its token; echoed back verbatim, neither reaches
    // the caller (a transformed copy does: docs/security.md says so).
    let reversed = |text: &str| text.chars().rev().collect::<String>();
    assert_eq!(call("Shared.whoami").await.result()["value"], "Bearer [redacted]");
    assert_eq!(call("Mine.whoami").await.result()["value"], "Bearer [redacted]");
    assert_eq!(call("Shared.whoami_reversed").await.result()["value"], reversed("Bearer upstream-secret"));
    assert_eq!(call("Mine.whoami_reversed").await.result()["value"], reversed("Bearer alice-google-token"));

    // /mcp takes the same credentials as the OTC front.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let refused = mcp_post(&gw, &init, &[]).await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    assert!(refused.header("www-authenticate").is_some_and(|v| v.starts_with("Bearer")));
    let listed = mcp_post(
        &gw,
        &json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "Mine_whoami"}}),
        &key,
    )
    .await;
    assert_eq!(listed.json()["result"]["content"][0]["text"], "Bearer [redacted]", "{}", listed.text());
    gw.wait_for_log(&["listening for tool list changes"]).await;
    let output = gw.output();
    for secret in ["upstream-secret", "alice-google-token"] {
        assert!(!output.contains(secret), "{secret} is in the gateway's output");
    }
}

#[tokio::test]
async fn a_server_repeating_its_token_in_any_spelling_hands_none_of_it_on() {
    let peer = McpPeer::start(false);
    let gw = GatewayConfig::new()
        .raw(&mcp_upstream("shared", &peer.url(), "Shared", "bearer_token = \"env:MB_UPSTREAM_TOKEN\""))
        .raw(&mcp_upstream("per-user", &peer.url(), "Mine", "user_token = \"google\""))
        .raw(
            "[authorization.google]\ntoken = \"env:MB_GOOGLE_{user_id}\"\n\n\
             [auth]\napi_keys = [{ key = \"env:MB_API_KEY\", user_id = \"alice\" }]\n",
        )
        .start_with_env(&[
            ("RUST_LOG", "trace"),
            // What encoders escape: a slash, a plus, a space, a quote.
            ("MB_UPSTREAM_TOKEN", "upstream/secret+42"),
            ("MB_GOOGLE_alice", "alice/google token\"7"),
            ("MB_API_KEY", "ak-alice-0123456789"),
        ])
        .await;
    let key = [("authorization", "Bearer ak-alice-0123456789")];
    let call = |tool: &str, how: &str| {
        let body = json!({"request": {"tool_id": tool, "input": {"how": how}}}).to_string();
        send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body), &key)
    };
    wait_until("Mine.leak_auth is callable", async || call("Mine.leak_auth", "json").await.status == 200).await;
    // The tool's error content, as the server wrote it, but the token.
    for (how, bearer) in [
        ("json", "Bearer "),
        ("url", "Bearer%20"),
        ("form", "Bearer+"),
        ("unicode", "\\u0042\\u0065\\u0061\\u0072\\u0065\\u0072\\u0020"),
    ] {
        let expected = format!("Error executing tool leak_auth: refused: the request carried {bearer}[redacted]");
        for (tool, name) in [("Shared.leak_auth", "Shared_leak_auth"), ("Mine.leak_auth", "Mine_leak_auth")] {
            let otc = call(tool, how).await.result();
            assert_eq!(otc["error"]["message"], expected.as_str(), "{tool} {how}: {otc}");
            let request = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                                 "params": {"name": name, "arguments": {"how": how}}});
            let mcp = mcp_post(&gw, &request, &key).await.json();
            assert_eq!(mcp["result"]["isError"], true, "{mcp}");
            assert_eq!(mcp["result"]["content"][0]["text"], expected.as_str(), "{name} {how}: {mcp}");
        }
    }
    let output = gw.output();
    for secret in ["upstream/secret", "upstream\\/secret", "upstream%2Fsecret", "alice/google", "alice\\/google"] {
        assert!(!output.contains(secret), "{secret} is in the gateway's output");
    }
}

// ---------------------------------------------------------------------------
// The MCP front
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_python_sdk_client_against_the_mcp_front() {
    let calc = ToolServer::start(common::catalog(vec![
        common::tool("Calculator.Add", "1.0.0", common::add_schema()),
        common::tool("Calculator.Add", "2.0.0", common::add_schema()),
    ]))
    .await;
    calc.on_call(common::add);
    let peer = McpPeer::start(false);
    let gw = GatewayConfig::new()
        .upstream("calc", &calc.url())
        .raw(&mcp_upstream("py", &peer.url(), "Py", ""))
        .start()
        .await;
    gw.wait_for_tool("Calculator.Add@2.0.0").await;
    gw.wait_for_tool("Py.weather@1.0.0").await;

    let calls = json!([
        {"name": "Calculator_Add", "arguments": {"a": 1, "b": 2}},
        {"name": "Calculator.Add@1.0.0", "arguments": {"a": 10, "b": 5}},
        {"name": "Py_weather", "arguments": {"city": "Lima"}},
        {"name": "Py_explode", "arguments": {"reason": "boom"}},
        {"name": "Calculator_Add", "arguments": {"a": "one"}},
        {"name": "Nope_Nothing", "arguments": {}},
    ]);
    let seen = python_client(&format!("{}/mcp", gw.url()), &calls).await;
    assert_eq!(seen["protocol_version"], "2025-11-25", "{seen}");
    assert_eq!(seen["server"], "otc-gateway", "{seen}");

    // OTC and MCP upstreams alike, each at its latest version.
    let tools = seen["tools"].as_array().expect("tools");
    let add = tools.iter().find(|t| t["name"] == "Calculator_Add").expect("Calculator_Add is listed");
    assert_eq!(add["_meta"]["otc-gateway/id"], "Calculator.Add@2.0.0", "{add}");
    assert_eq!(add["_meta"]["otc-gateway/version"], "2.0.0");
    assert_eq!(add["inputSchema"]["required"], json!(["a", "b"]));
    assert!(add["description"].as_str().is_some_and(|d| !d.is_empty()));
    let weather = tools.iter().find(|t| t["name"] == "Py_weather").expect("Py_weather is listed");
    assert_eq!(weather["outputSchema"]["type"], "object", "{weather}");
    assert_eq!(tools.iter().filter(|t| t["name"].as_str().is_some_and(|n| n.starts_with("Calculator"))).count(), 1);

    let results = seen["calls"].as_array().expect("calls");
    let text = |i: usize| results[i]["result"]["content"][0]["text"].clone();
    assert_eq!(text(0), "3", "{}", results[0]);
    assert_eq!(results[0]["result"]["isError"], false);
    assert_eq!(text(1), "15", "an older version by its OTC id: {}", results[1]);
    assert_eq!(
        results[2]["result"]["structuredContent"],
        json!({"city": "Lima", "temperature": 21.5, "conditions": "sunny"}),
        "MCP → OTC → MCP keeps structured output: {}",
        results[2]
    );
    assert_eq!(results[3]["result"]["isError"], true, "{}", results[3]);
    assert_eq!(results[4]["result"]["isError"], true, "invalid arguments are a tool error: {}", results[4]);
    assert!(text(4).as_str().is_some_and(|t| t.contains("a:") && t.contains("b:")), "{}", results[4]);
    assert_eq!(results[5]["error"]["code"], -32602, "an unknown tool is a JSON-RPC error: {}", results[5]);
    assert_eq!(calc.call_count(), 2, "invalid arguments never reach the tool");
}

#[tokio::test]
async fn the_mcp_front_follows_the_streamable_http_rules() {
    let gw = GatewayConfig::new().start().await;
    let init = |version: &str| {
        json!({"jsonrpc": "2.0", "id": "init-1", "method": "initialize",
               "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    };

    // initialize: the client's version when supported, else the newest; a session id.
    let resp = mcp_post(&gw, &init("2025-03-26"), &[]).await;
    resp.expect_status(200);
    assert!(resp.header("content-type").is_some_and(|c| c.starts_with("application/json")));
    let session = resp.header("mcp-session-id").expect("a session id");
    assert!(!session.is_empty() && session.bytes().all(|b| (0x21..=0x7e).contains(&b)), "{session}");
    let body = resp.json();
    assert_eq!(body["id"], "init-1");
    assert_eq!(body["result"]["protocolVersion"], "2025-03-26");
    // List changes are announced on the GET stream (tests/mcp_front.rs).
    assert_eq!(body["result"]["capabilities"]["tools"], json!({"listChanged": true}));
    assert_eq!(mcp_post(&gw, &init("2099-01-01"), &[]).await.json()["result"]["protocolVersion"], "2025-11-25");

    // Notifications and responses: 202, no body.
    for message in [
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 5, "result": {}}),
    ] {
        let resp =
            mcp_post(&gw, &message, &[("mcp-session-id", &session), ("mcp-protocol-version", "2025-03-26")]).await;
        assert_eq!(resp.status, 202, "{message}: {}", resp.text());
        assert!(resp.body.is_empty());
    }

    assert_eq!(rpc(&gw, "ping", json!({})).await["result"], json!({}));
    assert_eq!(rpc(&gw, "tools/list", json!({})).await["result"]["tools"], json!([]));
    assert_eq!(rpc(&gw, "resources/list", json!({})).await["error"]["code"], -32601);
    assert_eq!(rpc(&gw, "tools/call", json!({"name": "X_Y"})).await["error"]["code"], -32602);
    assert_eq!(rpc(&gw, "tools/call", json!({"arguments": {}})).await["error"]["code"], -32602);
    assert_eq!(rpc(&gw, "tools/list", json!({"cursor": "not-a-cursor"})).await["error"]["code"], -32602);

    // Malformed messages: 400 with a JSON-RPC error without an id.
    let resp = send_with_headers(gw.addr, "POST", "/mcp", Bytes::from_static(b"{not json"), &[]).await;
    assert_eq!(resp.status, 400);
    assert_eq!(resp.json()["error"]["code"], -32700);
    assert_eq!(resp.json()["id"], Value::Null);
    let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]);
    assert_eq!(mcp_post(&gw, &batch, &[]).await.json()["error"]["code"], -32600);
    let resp =
        mcp_post(&gw, &json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}), &[("mcp-protocol-version", "1999-01-01")])
            .await;
    assert_eq!(resp.status, 400, "an unsupported MCP-Protocol-Version: {}", resp.text());
    assert_eq!(resp.json()["error"]["code"], -32022, "the supported versions are named");
    assert_eq!(resp.json()["id"], 1);

    // GET opens the stream of list changes; there is no session state to end.
    let mut stream = tokio::net::TcpStream::connect(gw.addr).await.expect("connect");
    let get = format!("GET /mcp HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n", gw.addr);
    tokio::io::AsyncWriteExt::write_all(&mut stream, get.as_bytes()).await.expect("write");
    let (head, closed) = common::read_until_closed(&mut stream, Duration::from_millis(500)).await;
    assert!(!closed && head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: text/event-stream"), "{head}");
    let resp = send_with_headers(gw.addr, "DELETE", "/mcp", Bytes::new(), &[]).await;
    assert_eq!(resp.status, 405);
    assert_eq!(resp.header("allow").as_deref(), Some("GET, POST"));

    // DNS rebinding protection: only localhost origins by default.
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let resp = mcp_post(&gw, &ping, &[("origin", "http://evil.example.com")]).await;
    assert_eq!(resp.status, 403, "{}", resp.text());
    assert_eq!(resp.json()["jsonrpc"], "2.0");
    let port = gw.addr.port().to_string();
    for origin in [format!("http://localhost:{port}"), format!("http://127.0.0.1:{port}")] {
        assert_eq!(mcp_post(&gw, &ping, &[("origin", &origin)]).await.status, 200, "{origin}");
    }

    // The /mcp route is counted in the metrics.
    let metrics = send_with_headers(gw.admin, "GET", "/metrics", Bytes::new(), &[]).await.text();
    assert!(metrics.contains("route=\"/mcp\""), "{metrics}");
}

#[tokio::test]
async fn allowed_origins_and_policies_shape_the_mcp_front() {
    let calc = ToolServer::start(common::catalog(vec![
        common::tool("Calculator.Add", "1.0.0", common::add_schema()),
        common::tool("Secret.Thing", "1.0.0", common::any_object()),
    ]))
    .await;
    let gw = GatewayConfig::new()
        .upstream("calc", &calc.url())
        .raw("[mcp]\nallowed_origins = [\"https://app.example.com\"]\n\n[[policy]]\nname = \"all\"\nwhen = { any = true }\nallow = [\"Calculator.*\"]\n")
        .start()
        .await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    assert_eq!(mcp_post(&gw, &ping, &[("origin", "https://app.example.com")]).await.status, 200);
    assert_eq!(mcp_post(&gw, &ping, &[("origin", "http://localhost")]).await.status, 403);

    let names: Vec<Value> = rpc(&gw, "tools/list", json!({})).await["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .map(|t| t["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("Calculator_Add")], "a denied tool is not listed");
    assert_eq!(rpc(&gw, "tools/call", json!({"name": "Secret.Thing"})).await["error"]["code"], -32602);
}

// ---------------------------------------------------------------------------
// A scripted MCP server: pages, a ping and a notification before the answer
// ---------------------------------------------------------------------------

/// What the scripted server saw: each POST's headers and body.
type Seen = Arc<Mutex<Vec<(http::HeaderMap, Value)>>>;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// How a scripted server answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Script {
    /// A 2025-06-18 server that answers `server/discover` like any unknown
    /// message: 202 and no body.
    R2025_11_25,
    /// A server that answers `server/discover` with -32022, naming 2025-06-18.
    Versions,
    /// A 2026-07-28 server ([`scripted_modern`]).
    R2026_07_28,
}

async fn scripted_server(script: Script) -> (SocketAddr, Seen) {
    let (addr, seen, _) = scripted_server_with(script).await;
    (addr, seen)
}

async fn scripted_server_with(script: Script) -> (SocketAddr, Seen, Arc<Listeners>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen: Seen = Arc::default();
    let listeners: Arc<Listeners> = Arc::default();
    let (record, streams) = (seen.clone(), listeners.clone());
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let (record, streams) = (record.clone(), streams.clone());
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req| scripted(req, record.clone(), script, streams.clone()));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen, listeners)
}

async fn scripted(
    req: hyper::Request<hyper::body::Incoming>,
    seen: Seen,
    script: Script,
    listeners: Arc<Listeners>,
) -> Result<hyper::Response<Body>, Infallible> {
    let headers = req.headers().clone();
    let bytes = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    seen.lock().expect("lock").push((headers, message.clone()));
    if script == Script::R2026_07_28 {
        return Ok(scripted_modern(&message, &listeners));
    }
    let id = message["id"].clone();
    let json_reply = |result: Value| {
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string();
        hyper::Response::builder()
            .header("content-type", "application/json")
            .header("mcp-session-id", "scripted-session-1")
            .body(Full::new(Bytes::from(body)).boxed())
            .expect("response")
    };
    let tool = |name: &str| json!({"name": name, "description": name, "inputSchema": {"type": "object"}});
    let response = match message["method"].as_str() {
        Some("server/discover") if script == Script::Versions => {
            let body = json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32022, "message": "Unsupported protocol version",
                              "data": {"supported": ["2099-01-01", "2025-06-18"], "requested": "2026-07-28"}}});
            hyper::Response::builder()
                .status(400)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_string())).boxed())
                .expect("response")
        }
        Some("initialize") => json_reply(
            json!({"protocolVersion": "2025-06-18", "capabilities": {"tools": {}}, "serverInfo": {"name": "scripted", "version": "1"}}),
        ),
        Some("tools/list") => match message["params"]["cursor"].as_str() {
            None => json_reply(json!({"tools": [tool("first"), tool("dup.name")], "nextCursor": "page-2"})),
            Some("page-2") => {
                json_reply(json!({"tools": [tool("second"), tool("dup_name"), tool("broken"), tool("hang")]}))
            }
            Some(_) => json_reply(json!({"tools": []})),
        },
        Some("tools/call") if message["params"]["name"] == "hang" => {
            // On purpose: the tool that hangs.
            tokio::time::sleep(Duration::from_secs(5)).await;
            json_reply(json!({"content": []}))
        }
        Some("tools/call") if message["params"]["name"] == "broken" => {
            let body =
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32603, "message": "it broke"}}).to_string();
            hyper::Response::builder()
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body)).boxed())
                .expect("response")
        }
        Some("tools/call") => {
            // An SSE stream: a priming event, a notification, a ping request,
            // then the response.
            let events = [
                "id: ev-0\ndata:\n\n".to_owned(),
                format!(
                    "event: message\ndata: {}\n\n",
                    json!({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progress": 1}})
                ),
                format!("data: {}\r\n\r\n", json!({"jsonrpc": "2.0", "id": "server-ping-1", "method": "ping"})),
                format!(
                    "id: ev-3\ndata: {}\n\n",
                    json!({"jsonrpc": "2.0", "id": id, "result": {"content": [{"type": "text", "text": "{\"called\": true}"}]}})
                ),
            ];
            hyper::Response::builder()
                .header("content-type", "text/event-stream")
                .body(Full::new(Bytes::from(events.concat())).boxed())
                .expect("response")
        }
        _ => hyper::Response::builder().status(202).body(Full::new(Bytes::new()).boxed()).expect("response"),
    };
    Ok(response)
}

#[tokio::test]
async fn pages_pings_notifications_sessions_and_errors_of_a_scripted_server() {
    let (addr, seen) = scripted_server(Script::R2025_11_25).await;
    let gw = GatewayConfig::new()
        .raw(&mcp_upstream("scripted", &format!("http://{addr}/mcp"), "S", "call_timeout = \"1s\""))
        .start()
        .await;

    // Both pages, a collision skipped with its reason.
    gw.wait_for_tool("S.second@1.0.0").await;
    assert!(find_tool(&gw.tools().await, "S.first@1.0.0").is_some());
    let dup = find_tool(&gw.tools().await, "S.dup_name@1.0.0").cloned().expect("dup_name");
    assert_eq!(dup["name"], "dup_name", "the name that needed no change wins: {dup}");
    let status: Value = send_with_headers(gw.admin, "GET", "/status", Bytes::new(), &[]).await.json();
    let skipped = status["upstreams"][0]["skipped"].to_string();
    assert!(skipped.contains("dup.name") && skipped.contains("already taken"), "{status}");

    // SSE: priming event and notification skipped, ping answered, then the answer.
    let result = gw.call("S.first", json!({})).await.result();
    assert_eq!(result["value"], json!({"called": true}), "{result}");
    wait_until("the gateway answered the server's ping", async || {
        seen.lock().expect("lock").iter().any(|(_, m)| m["id"] == "server-ping-1" && m["result"] == json!({}))
    })
    .await;

    // A JSON-RPC error is a tool failure with the code for developers.
    let broken = gw.call("S.broken", json!({})).await.result();
    assert_eq!(broken["success"], false, "{broken}");
    assert!(broken["error"]["developer_message"].as_str().is_some_and(|m| m.contains("-32603")), "{broken}");
    assert!(broken["error"]["message"].as_str().is_some_and(|m| m.contains("it broke")), "{broken}");

    // A call that outlives call_timeout: retryable, and cancelled upstream.
    let hung = gw.call("S.hang", json!({})).await.result();
    assert_eq!(hung["error"]["can_retry"], true, "{hung}");
    let call_id = seen
        .lock()
        .expect("lock")
        .iter()
        .rev()
        .find(|(_, m)| m["params"]["name"] == "hang")
        .map(|(_, m)| m["id"].clone());
    let call_id = call_id.expect("the hanging call reached the server");
    wait_until("the timed-out request is cancelled", async || {
        seen.lock()
            .expect("lock")
            .iter()
            .any(|(_, m)| m["method"] == "notifications/cancelled" && m["params"]["requestId"] == call_id)
    })
    .await;

    // The probe first: a 2026-07-28 `server/discover`, answered 202 by a
    // server of 2025-06-18, so the gateway opens a session.
    let requests = seen.lock().expect("lock").clone();
    let (probe_headers, probe) = &requests[0];
    assert_eq!(probe["method"], "server/discover", "{probe}");
    assert_eq!(header(probe_headers, "mcp-protocol-version"), Some("2026-07-28"));
    assert_eq!(probe["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"], "2026-07-28", "{probe}");
    // Every request after initialize carried the session and the version.
    let (first_headers, first) = &requests[1];
    assert_eq!(first["method"], "initialize", "{first}");
    assert!(first_headers.get("mcp-session-id").is_none());
    assert!(first_headers.get("mcp-method").is_none(), "no 2026-07-28 headers in a session");
    assert_eq!(first["params"]["protocolVersion"], "2025-11-25");
    assert!(first["params"]["clientInfo"]["name"].is_string());
    assert_eq!(requests[2].1["method"], "notifications/initialized");
    assert!(requests.iter().filter(|(_, m)| m["method"] == "server/discover").count() == 1, "one probe");
    for (headers, message) in &requests[2..] {
        assert_eq!(
            headers.get("mcp-session-id").map(|v| v.to_str().unwrap_or("")),
            Some("scripted-session-1"),
            "{message}"
        );
        assert_eq!(
            headers.get("mcp-protocol-version").map(|v| v.to_str().unwrap_or("")),
            Some("2025-06-18"),
            "{message}"
        );
    }
}

fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).map(|v| v.to_str().unwrap_or("(not ASCII)"))
}

#[tokio::test]
async fn unsupported_protocol_version_names_the_revision_to_open_a_session_in() {
    let (addr, seen) = scripted_server(Script::Versions).await;
    let gw = GatewayConfig::new().raw(&mcp_upstream("scripted", &format!("http://{addr}/mcp"), "S", "")).start().await;
    gw.wait_for_tool("S.second@1.0.0").await;
    let requests = seen.lock().expect("lock").clone();
    let methods: Vec<&str> = requests.iter().filter_map(|(_, m)| m["method"].as_str()).collect();
    assert_eq!(methods[..3], ["server/discover", "initialize", "notifications/initialized"], "{methods:?}");
    assert_eq!(requests[1].1["params"]["protocolVersion"], "2025-06-18", "the newest both speak");
    let status: Value = send_with_headers(gw.admin, "GET", "/status", Bytes::new(), &[]).await.json();
    assert_eq!(status["upstreams"][0]["mcp_protocol_version"], "2025-06-18", "{status}");
}

// ---------------------------------------------------------------------------
// A scripted MCP 2026-07-28 server: what the gateway sends, and a change
// stream it can fill with anything
// ---------------------------------------------------------------------------

/// The scripted 2026-07-28 server's open `subscriptions/listen` streams,
/// and what its `tools/list` adds.
#[derive(Default)]
struct Listeners {
    /// Senders into the open streams' bodies.
    streams: Mutex<Vec<tokio::sync::mpsc::UnboundedSender<Bytes>>>,
    /// Streams whose body hyper still holds (the client has not gone).
    open: std::sync::atomic::AtomicUsize,
    /// `extra_1` ... `extra_N` are listed.
    extra_tools: std::sync::atomic::AtomicUsize,
}

impl Listeners {
    /// Sends `bytes` on every open stream.
    fn send(&self, bytes: &str) {
        for stream in self.streams.lock().expect("lock").iter() {
            let _ = stream.send(Bytes::from(bytes.to_owned()));
        }
    }

    fn open(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A `subscriptions/listen` response body: what the test sends, until the
/// client goes (hyper then drops it, and it counts itself closed).
struct ListenBody {
    rx: tokio::sync::mpsc::UnboundedReceiver<Bytes>,
    listeners: Arc<Listeners>,
}

impl hyper::body::Body for ListenBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        self.rx.poll_recv(cx).map(|chunk| chunk.map(|bytes| Ok(hyper::body::Frame::data(bytes))))
    }
}

impl Drop for ListenBody {
    fn drop(&mut self) {
        self.listeners.open.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `data:` of one SSE event with a JSON-RPC message.
fn sse_message(message: &Value) -> String {
    format!("event: message\ndata: {message}\n\n")
}

fn scripted_modern(message: &Value, listeners: &Arc<Listeners>) -> hyper::Response<Body> {
    let id = message["id"].clone();
    let reply = |status: u16, body: Value| {
        hyper::Response::builder()
            .status(status)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body.to_string())).boxed())
            .expect("response")
    };
    let result = |result: Value| reply(200, json!({"jsonrpc": "2.0", "id": id, "result": result}));
    let meta = &message["params"]["_meta"];
    if meta["io.modelcontextprotocol/protocolVersion"] != "2026-07-28" {
        return reply(
            400,
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": "params._meta is missing"}}),
        );
    }
    let tool = |name: &str| json!({"name": name, "description": name, "inputSchema": {"type": "object"}});
    match message["method"].as_str() {
        Some("server/discover") => result(json!({"resultType": "complete", "supportedVersions": ["2026-07-28"],
            "capabilities": {"tools": {"listChanged": true}}, "ttlMs": 0, "cacheScope": "public",
            "_meta": {"io.modelcontextprotocol/serverInfo": {"name": "scripted-2026", "version": "1"}}})),
        Some("tools/list") => {
            let mut tools = vec![
                json!({"name": "plain", "description": "plain", "inputSchema": {"type": "object"},
                       "annotations": {"readOnlyHint": true, "title": "Plain"}}),
                tool("météo"),
                tool("ask"),
                json!({"name": "routed", "description": "routed", "inputSchema": {"type": "object",
                       "properties": {"region": {"type": "string", "x-mcp-header": "Region"}, "sql": {"type": "string"}}}}),
                json!({"name": "bad", "description": "bad", "inputSchema": {"type": "object",
                       "properties": {"ratio": {"type": "number", "x-mcp-header": "Ratio"}}}}),
            ];
            let extra = listeners.extra_tools.load(std::sync::atomic::Ordering::SeqCst);
            tools.extend((1..=extra).map(|n| tool(&format!("extra_{n}"))));
            result(json!({"resultType": "complete", "tools": tools, "ttlMs": 60000, "cacheScope": "public"}))
        }
        Some("tools/call") if message["params"]["name"] == "ask" => result(json!({
            "resultType": "input_required",
            "inputRequests": {"login": {"method": "elicitation/create",
                "params": {"mode": "form", "message": "Your name?", "requestedSchema": {"type": "object"}}}},
            "requestState": "opaque"})),
        Some("tools/call") => {
            let name = message["params"]["name"].as_str().unwrap_or_default();
            result(json!({"resultType": "complete", "content": [{"type": "text", "text": format!("called {name}")}]}))
        }
        Some("subscriptions/listen") => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let ack = json!({"jsonrpc": "2.0", "method": "notifications/subscriptions/acknowledged",
                             "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": id},
                                        "notifications": {"toolsListChanged": true}}});
            let _ = tx.send(Bytes::from(sse_message(&ack)));
            listeners.streams.lock().expect("lock").push(tx);
            listeners.open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            hyper::Response::builder()
                .header("content-type", "text/event-stream")
                .body(ListenBody { rx, listeners: listeners.clone() }.boxed())
                .expect("response")
        }
        _ => reply(404, json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}})),
    }
}

#[tokio::test]
async fn a_2026_07_28_server_gets_its_metadata_and_headers_on_every_request() {
    let (addr, seen, _) = scripted_server_with(Script::R2026_07_28).await;
    let gw = GatewayConfig::new().raw(&mcp_upstream("scripted", &format!("http://{addr}/mcp"), "S", "")).start().await;
    gw.wait_for_tool("S.routed@1.0.0").await;

    let called = |result: Value, name: &str| assert_eq!(result["value"], format!("called {name}"), "{result}");
    called(gw.call("S.plain", json!({})).await.result(), "plain");
    called(gw.call("S.m_t_o", json!({})).await.result(), "météo");
    called(gw.call("S.routed", json!({"region": "eu-west", "sql": "select 1"})).await.result(), "routed");
    called(gw.call("S.routed", json!({"sql": "no region"})).await.result(), "routed");
    // The server asks for user input: the gateway cannot ask its caller.
    let asked = gw.call("S.ask", json!({})).await.result();
    assert_eq!(asked["success"], false, "{asked}");
    assert!(asked["error"]["message"].as_str().is_some_and(|m| m.contains("cannot ask")), "{asked}");
    assert!(asked["error"]["developer_message"].as_str().is_some_and(|m| m.contains("input_required")), "{asked}");

    // A tool whose x-mcp-header breaks the rules is left out, with the reason.
    let status: Value = send_with_headers(gw.admin, "GET", "/status", Bytes::new(), &[]).await.json();
    let upstream = &status["upstreams"][0];
    assert_eq!(upstream["mcp_protocol_version"], "2026-07-28", "{status}");
    assert!(upstream["skipped"].to_string().contains("bad: x-mcp-header"), "{status}");
    assert!(find_tool(&gw.tools().await, "S.bad@1.0.0").is_none());

    let requests = seen.lock().expect("lock").clone();
    assert!(!requests.iter().any(|(_, m)| m["method"] == "initialize"), "no handshake in 2026-07-28");
    for (headers, message) in &requests {
        let method = message["method"].as_str().expect("a request");
        assert_eq!(header(headers, "mcp-protocol-version"), Some("2026-07-28"), "{message}");
        assert_eq!(header(headers, "mcp-method"), Some(method), "{message}");
        assert!(headers.get("mcp-session-id").is_none(), "{message}");
        let meta = &message["params"]["_meta"];
        assert_eq!(meta["io.modelcontextprotocol/protocolVersion"], "2026-07-28", "{message}");
        assert_eq!(meta["io.modelcontextprotocol/clientCapabilities"], json!({}), "{message}");
        assert_eq!(meta["io.modelcontextprotocol/clientInfo"]["name"], "otc-gateway", "{message}");
        assert!(message["id"].is_number(), "{message}");
    }
    let call = |name: &str, nth: usize| {
        requests
            .iter()
            .filter(|(_, m)| m["method"] == "tools/call" && m["params"]["name"] == name)
            .nth(nth)
            .map(|(h, _)| h.clone())
            .unwrap_or_else(|| panic!("no tools/call of {name}"))
    };
    assert_eq!(header(&call("plain", 0), "mcp-name"), Some("plain"));
    assert_eq!(header(&call("météo", 0), "mcp-name"), Some("=?base64?bcOpdMOpbw==?="));
    assert_eq!(header(&call("routed", 0), "mcp-param-region"), Some("eu-west"));
    assert_eq!(header(&call("routed", 1), "mcp-param-region"), None, "no header for an absent parameter");
    let listen = requests.iter().find(|(_, m)| m["method"] == "subscriptions/listen").map(|(_, m)| m.clone());
    let listen = listen.expect("a subscriptions/listen request: the server announces list changes");
    assert_eq!(listen["params"]["notifications"], json!({"toolsListChanged": true}), "{listen}");
}

#[tokio::test]
async fn a_hostile_change_stream_is_bounded_and_a_reload_closes_it() {
    let (addr, seen, listeners) = scripted_server_with(Script::R2026_07_28).await;
    let upstream = mcp_upstream("scripted", &format!("http://{addr}/mcp"), "S", "");
    let log = "info,otc_gateway::mcp=debug,otc_gateway::gateway=debug";
    let gw = Gateway::start_with_env(&long_poll_config(&upstream), &[("RUST_LOG", log)]).await;
    gw.wait_for_tool("S.plain@1.0.0").await;
    gw.wait_for_log(&["listening for tool list changes", "catalog fetched as asked"]).await;
    let listens = || seen.lock().expect("lock").iter().filter(|(_, m)| m["method"] == "subscriptions/listen").count();
    let limit = Duration::from_secs(20);
    let extra = |n: usize| listeners.extra_tools.store(n, std::sync::atomic::Ordering::SeqCst);

    // Junk on the stream is skipped; the change after it is heard.
    extra(1);
    listeners.send(": a comment\n\nevent: other\ndata: {}\n\ndata: not json\n\ndata: [1, 2]\n\n");
    listeners.send(&sse_message(&json!({"jsonrpc": "2.0", "id": "server-1", "method": "ping"})));
    listeners.send(&sse_message(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed",
                                        "params": {"_meta": {"io.modelcontextprotocol/subscriptionId": 1}}})));
    gw.wait_for_tool("S.extra_1@1.0.0").await;
    assert_eq!(listens(), 1, "the stream outlived the junk");

    // An event larger than max_catalog_bytes (64 KiB here), never finished:
    // the gateway drops the stream, opens it again after a pause and fetches
    // the list (which changed meanwhile).
    extra(2);
    listeners.send(&format!("data: {}", "x".repeat(100 * 1024)));
    wait_for_catalog(&gw, "S.extra_2 is listed after the stream was reopened", limit, |items| {
        find_tool(items, "S.extra_2@1.0.0").is_some()
    })
    .await;
    assert!(listens() >= 2, "the stream was opened again");
    // A flood of announcements costs a fetch a second at most, not one each.
    let lists = || seen.lock().expect("lock").iter().filter(|(_, m)| m["method"] == "tools/list").count();
    let before = lists();
    for _ in 0..200 {
        listeners.send(&sse_message(&json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})));
    }
    called_while(&gw).await;
    // On purpose: fetches are limited per second, so they are counted
    // over time.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let fetched = lists() - before;
    assert!((1..50).contains(&fetched), "{fetched} fetches for 200 announcements");

    // A reload that removes the upstream closes its stream.
    wait_within(limit, "one stream is open", async || match listeners.open() {
        1 => Ok(()),
        open => Err(format!("{open} open streams")),
    })
    .await;
    gw.rewrite_config(&long_poll_config(""));
    gw.wait_for_tool_gone("S.plain@1.0.0").await;
    wait_within(limit, "the removed upstream's stream is closed", async || listeners.open() == 0).await;
    let opened = listens();
    // On purpose: an absence is seen only by letting time pass.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(listens(), opened, "nothing listens for the removed upstream");
}

/// Calls go through while the change stream is busy.
async fn called_while(gw: &Gateway) {
    for _ in 0..5 {
        let result = gw.call("S.plain", json!({})).await.result();
        assert_eq!(result["value"], "called plain", "{result}");
    }
}
