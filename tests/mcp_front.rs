//! The `/mcp` front in both eras of MCP: 2026-07-28 (stateless, every
//! request self-describing) beside 2025-11-25 (initialize, sessions), against
//! the official Python SDK's client and raw HTTP.
//!
//! - the SDK client lists and calls tools in both eras, and a list change
//!   upstream reaches a subscribed client;
//! - the 2026-07-28 envelope: `_meta`, the mirrored headers, the errors and
//!   their statuses, `server/discover`, caching hints;
//! - event streams (`subscriptions/listen`, `GET /mcp`) announce changes to
//!   the tools *each caller* may see, and are bounded per caller;
//! - an authorization the caller must give first is a URL-mode elicitation
//!   (an `input_required` result, or error -32042), else a tool error with
//!   the link.
//!
//! The Python client comes from the virtualenv `scripts/test.sh` makes
//! (`OTC_TEST_PYTHON`, else `.venv/bin/python`).

mod common;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use common::{send_with_headers, wait_until, wait_within, Gateway, GatewayConfig, Resp, ToolServer};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MODERN: &str = "2026-07-28";

/// tests/peers/mcp_front_client.py against the gateway: its JSON report.
async fn sdk_client(gw: &Gateway, mode: &str, scenario: &Value) -> Value {
    common::mcp_peer::mcp_front_client(format!("{}/mcp", gw.url()), mode, scenario).await
}

/// A 2026-07-28 request's params: `params` with the `_meta` every request carries.
fn modern_params(mut params: Value, capabilities: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    });
    params
}

/// POSTs one JSON-RPC message to /mcp with these headers.
async fn post(gw: &Gateway, body: &Value, headers: &[(&str, &str)]) -> Resp {
    let mut all = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(body.to_string()), &all).await
}

/// A well-formed 2026-07-28 request (headers mirroring the body), with
/// extra headers (credentials).
async fn modern(gw: &Gateway, id: u64, method: &str, params: Value, extra: &[(&str, &str)]) -> Resp {
    let params = modern_params(params, json!({}));
    let name = params.get("name").and_then(Value::as_str).map(str::to_owned);
    let mut headers = vec![("mcp-protocol-version", MODERN), ("mcp-method", method)];
    if let Some(name) = &name {
        headers.push(("mcp-name", name));
    }
    headers.extend_from_slice(extra);
    post(gw, &json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}), &headers).await
}

fn tool_names(result: &Value) -> Vec<String> {
    result["tools"].as_array().expect("tools").iter().map(|t| t["name"].as_str().expect("name").to_owned()).collect()
}

// ---------------------------------------------------------------------------
// An event stream read off a raw socket
// ---------------------------------------------------------------------------

/// An open `text/event-stream` response: its status and headers, then one
/// JSON-RPC message per `next`.
struct EventStream {
    socket: TcpStream,
    head: String,
    /// Bytes read past the head, still chunk-framed.
    raw: Vec<u8>,
    /// De-chunked bytes not yet cut into events.
    text: String,
    done: bool,
}

impl EventStream {
    /// Sends a request and reads its response head.
    async fn open(gw: &Gateway, method: &str, body: &str, headers: &[(&str, &str)]) -> EventStream {
        let mut socket = TcpStream::connect(gw.addr).await.expect("connect");
        let mut request = format!("{method} /mcp HTTP/1.1\r\nhost: {}\r\ncontent-length: {}\r\n", gw.addr, body.len());
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        socket.write_all(request.as_bytes()).await.expect("send");
        let mut raw = Vec::new();
        let head_end = loop {
            if let Some(at) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut buf = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut buf))
                .await
                .expect("a response head")
                .expect("read");
            assert!(n > 0, "closed before a head: {}", String::from_utf8_lossy(&raw));
            raw.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&raw[..head_end]).into_owned();
        raw.drain(..head_end);
        EventStream { socket, head, raw, text: String::new(), done: false }
    }

    fn status(&self) -> u16 {
        self.head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status")
    }

    /// A plain (Content-Length) response's body, as JSON.
    async fn body_json(&mut self) -> Value {
        let length: usize = self
            .head
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_owned()))
            .and_then(|v| v.parse().ok())
            .expect("a content-length");
        while self.raw.len() < length {
            let mut buf = [0u8; 4096];
            let n = self.socket.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed mid-body");
            self.raw.extend_from_slice(&buf[..n]);
        }
        serde_json::from_slice(&self.raw[..length]).expect("a JSON body")
    }

    /// Moves whole chunks from `raw` to `text`.
    fn dechunk(&mut self) {
        loop {
            let Some(line_end) = self.raw.windows(2).position(|w| w == b"\r\n") else { return };
            let size = usize::from_str_radix(std::str::from_utf8(&self.raw[..line_end]).expect("ascii").trim(), 16)
                .expect("a chunk size");
            if size == 0 {
                self.done = true;
                return;
            }
            if self.raw.len() < line_end + 2 + size + 2 {
                return;
            }
            let chunk = self.raw[line_end + 2..line_end + 2 + size].to_vec();
            self.text.push_str(&String::from_utf8(chunk).expect("utf-8"));
            self.raw.drain(..line_end + 2 + size + 2);
        }
    }

    /// The next JSON-RPC message on the stream (comments skipped); `None`
    /// when the stream ended.
    async fn next(&mut self) -> Option<Value> {
        loop {
            self.dechunk();
            while let Some(at) = self.text.find("\n\n") {
                let event: String = self.text.drain(..at + 2).collect();
                let data: String =
                    event.lines().filter_map(|l| l.strip_prefix("data:")).map(str::trim).collect::<Vec<_>>().join("");
                if !data.is_empty() {
                    return Some(serde_json::from_str(&data).expect("an event's data is JSON"));
                }
            }
            if self.done {
                return None;
            }
            let mut buf = [0u8; 4096];
            let n = tokio::time::timeout(Duration::from_secs(20), self.socket.read(&mut buf))
                .await
                .expect("an event within 20 s")
                .expect("read");
            if n == 0 {
                return None;
            }
            self.raw.extend_from_slice(&buf[..n]);
        }
    }

    /// Every message until the stream ends.
    async fn rest(&mut self) -> Vec<Value> {
        let mut all = Vec::new();
        while let Some(message) = self.next().await {
            all.push(message);
        }
        all
    }
}

/// Opens `subscriptions/listen` for tool list changes.
async fn listen(gw: &Gateway, id: u64, extra: &[(&str, &str)], filter: Value) -> EventStream {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen",
                      "params": modern_params(json!({"notifications": filter}), json!({}))});
    let mut headers = vec![
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "subscriptions/listen"),
    ];
    headers.extend_from_slice(extra);
    EventStream::open(gw, "POST", &body.to_string(), &headers).await
}

// ---------------------------------------------------------------------------
// The SDK client in both eras
// ---------------------------------------------------------------------------

fn calculator_catalog(extra: &[&str]) -> Value {
    let mut tools = vec![
        common::tool("Calculator.Add", "1.0.0", common::add_schema()),
        common::tool("Calculator.Add", "2.0.0", common::add_schema()),
    ];
    for key in extra {
        tools.push(common::tool(key, "1.0.0", common::any_object()));
    }
    common::catalog(tools)
}

#[tokio::test]
async fn the_python_sdk_client_lists_and_calls_tools_in_both_eras() {
    let calc = ToolServer::start(calculator_catalog(&["Weather.Now"])).await;
    calc.on_call(common::add);
    let gw = GatewayConfig::new().upstream("calc", &calc.url()).start().await;
    gw.wait_for_tool("Weather.Now@1.0.0").await;
    let calls = json!([
        {"name": "Calculator_Add", "arguments": {"a": 1, "b": 2}},
        {"name": "Calculator.Add@1.0.0", "arguments": {"a": 10, "b": 5}},
        {"name": "Calculator_Add", "arguments": {"a": "one"}},
        {"name": "Nope_Nothing", "arguments": {}},
    ]);
    let mut seen = Vec::new();
    for (mode, version) in [("legacy", "2025-11-25"), ("auto", MODERN), (MODERN, MODERN)] {
        let report = sdk_client(&gw, mode, &json!({"calls": calls})).await;
        assert_eq!(report["protocol_version"], version, "{mode}: {report}");
        if mode != MODERN {
            // (A pinned version skips server/discover, where the name comes from.)
            assert_eq!(report["server"], "otc-gateway", "{mode}: {report}");
        }
        let names: Vec<&str> =
            report["tools"].as_array().expect("tools").iter().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, ["Calculator_Add", "Weather_Now"], "{mode}: sorted, latest versions only");
        let results = report["calls"].as_array().expect("calls").clone();
        let text = |i: usize| results[i]["result"]["content"][0]["text"].clone();
        assert_eq!(text(0), "3", "{mode}: {}", results[0]);
        assert_eq!(text(1), "15", "{mode}: an older version by its OTC id: {}", results[1]);
        assert_eq!(results[2]["result"]["isError"], true, "{mode}: invalid arguments: {}", results[2]);
        assert_eq!(results[3]["error"]["code"], -32602, "{mode}: an unknown tool: {}", results[3]);
        seen.push(report["tools"].clone());
    }
    assert_eq!(seen[0], seen[1], "both eras list the same tools");
    assert_eq!(calc.call_count(), 6, "two good calls per era reach the tool server");
}

#[tokio::test]
async fn a_list_change_upstream_reaches_a_subscribed_client() {
    // The SDK's MCP server behind the gateway, and a catalog polled hourly:
    // a new tool can only arrive through the server's announcement.
    let server = AskingServer::start();
    let gw = Gateway::start(&format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n[catalog]\npoll_interval = \"1h\"\n\n\
         [[upstreams]]\nname = \"sdk\"\nurl = \"{}\"\nprotocol = \"mcp\"\ntoolkit = \"test\"\nversion = \"1.0.0\"\n",
        server.url
    ))
    .await;
    gw.wait_for_tool("test.ask_name@1.0.0").await;
    let ready = common::temp_file("listen-ready", "txt", "");
    std::fs::remove_file(&ready).expect("the client makes it");
    let scenario = json!({"listen": {"ready": ready, "timeout": 30}});
    let child = Command::new(common::sdk_python())
        .arg(common::peer_script("mcp_front_client.py"))
        .arg(format!("{}/mcp", gw.url()))
        .arg(MODERN)
        .arg(scenario.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run the client");
    wait_within(Duration::from_secs(30), "the client got its subscription acknowledged", async || ready.exists()).await;
    // The upstream adds a tool and announces it.
    let base = server.url.trim_end_matches("/mcp");
    let addr = base.trim_start_matches("http://").parse().expect("the upstream's address");
    let added = send_with_headers(
        addr,
        "POST",
        "/test/add-tool",
        Bytes::from(json!({"name": "fresh"}).to_string()),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!(added.status, 200, "{}", added.text());
    let output = tokio::task::spawn_blocking(move || child.wait_with_output()).await.expect("join").expect("output");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    assert_eq!(report["listen"]["honored"]["toolsListChanged"], true, "{report}");
    assert_eq!(report["listen"]["events"], json!(["ToolsListChanged"]), "{report}");
    let after: Vec<&str> =
        report["listen"]["tools_after"].as_array().expect("tools").iter().filter_map(Value::as_str).collect();
    assert!(after.contains(&"test_fresh"), "the new tool is listed at once: {report}");
    let _ = std::fs::remove_file(&ready);
}

// ---------------------------------------------------------------------------
// The 2026-07-28 envelope
// ---------------------------------------------------------------------------

#[tokio::test]
async fn modern_requests_carry_meta_and_headers_that_match_the_body() {
    let calc = ToolServer::start(calculator_catalog(&[])).await;
    calc.on_call(common::add);
    let gw = GatewayConfig::new().upstream("calc", &calc.url()).start().await;
    gw.wait_for_tool("Calculator.Add@2.0.0").await;

    // server/discover: versions, capabilities, identity, caching hints.
    let resp = modern(&gw, 1, "server/discover", json!({}), &[]).await;
    resp.expect_status(200);
    let result = resp.json()["result"].clone();
    assert_eq!(result["resultType"], "complete", "{result}");
    assert_eq!(result["supportedVersions"], json!([MODERN, "2025-11-25", "2025-06-18", "2025-03-26"]));
    assert_eq!(result["capabilities"]["tools"]["listChanged"], true);
    assert_eq!(result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "otc-gateway");
    assert!(result["ttlMs"].as_u64().is_some() && result["cacheScope"] == "public", "{result}");

    // tools/list and tools/call; a call's header may carry spaces around the name.
    let listed = modern(&gw, 2, "tools/list", json!({}), &[]).await.json()["result"].clone();
    assert_eq!(tool_names(&listed), ["Calculator_Add"]);
    assert_eq!((listed["resultType"].as_str(), listed["cacheScope"].as_str()), (Some("complete"), Some("public")));
    assert_eq!(listed["ttlMs"], 200, "fresh for one catalog poll (the harness polls every 200ms)");
    let params = modern_params(json!({"name": "Calculator_Add", "arguments": {"a": 2, "b": 3}}), json!({}));
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": params});
    let headers = [("mcp-protocol-version", MODERN), ("MCP-METHOD", "tools/call"), ("mcp-name", "  Calculator_Add ")];
    let result = post(&gw, &call, &headers).await.json()["result"].clone();
    assert_eq!(result["content"][0]["text"], "5", "{result}");
    assert_eq!(result["resultType"], "complete");
    let encoded = [
        ("mcp-protocol-version", MODERN),
        ("mcp-method", "tools/call"),
        ("mcp-name", "=?base64?Q2FsY3VsYXRvcl9BZGQ=?="),
    ];
    assert_eq!(post(&gw, &call, &encoded).await.json()["result"]["content"][0]["text"], "5", "a Base64 Mcp-Name");

    // What is refused, with its status and code; every error keeps the id.
    let list = |meta: Value| json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {"_meta": meta}});
    let good_meta = modern_params(json!({}), json!({}))["_meta"].clone();
    let mut no_caps = good_meta.clone();
    no_caps.as_object_mut().expect("meta").remove("io.modelcontextprotocol/clientCapabilities");
    let mut no_version = good_meta.clone();
    no_version.as_object_mut().expect("meta").remove("io.modelcontextprotocol/protocolVersion");
    let mut other_version = good_meta.clone();
    other_version["io.modelcontextprotocol/protocolVersion"] = json!("2099-01-01");
    let right = [("mcp-protocol-version", MODERN), ("mcp-method", "tools/list")];
    // (body, headers, status, code, why)
    type Case<'a> = (Value, Vec<(&'a str, &'a str)>, u16, i64, &'a str);
    let cases: Vec<Case> = vec![
        (
            json!({"jsonrpc": "2.0", "id": 9, "method": "tools/list", "params": {}}),
            right.to_vec(),
            400,
            -32602,
            "no _meta",
        ),
        (list(no_caps), right.to_vec(), 400, -32602, "no clientCapabilities"),
        (list(no_version), right.to_vec(), 400, -32602, "no protocolVersion in _meta"),
        (list(good_meta.clone()), vec![("mcp-method", "tools/list")], 400, -32020, "no version header"),
        (list(good_meta.clone()), vec![("mcp-protocol-version", MODERN)], 400, -32020, "no Mcp-Method"),
        (
            list(good_meta.clone()),
            vec![("mcp-protocol-version", MODERN), ("mcp-method", "prompts/list")],
            400,
            -32020,
            "another method",
        ),
        (
            list(good_meta.clone()),
            vec![("mcp-protocol-version", MODERN), ("mcp-method", "TOOLS/LIST")],
            400,
            -32020,
            "case differs",
        ),
        (list(other_version.clone()), right.to_vec(), 400, -32020, "header and _meta disagree"),
        (
            list(other_version),
            vec![("mcp-protocol-version", "2099-01-01"), ("mcp-method", "tools/list")],
            400,
            -32022,
            "unsupported",
        ),
        (
            call.clone(),
            vec![("mcp-protocol-version", MODERN), ("mcp-method", "tools/call")],
            400,
            -32020,
            "no Mcp-Name",
        ),
        (
            call.clone(),
            vec![("mcp-protocol-version", MODERN), ("mcp-method", "tools/call"), ("mcp-name", "Other")],
            400,
            -32020,
            "another name",
        ),
    ];
    for (body, headers, status, code, why) in cases {
        let resp = post(&gw, &body, &headers).await;
        assert_eq!(resp.status, status, "{why}: {}", resp.text());
        let answer = resp.json();
        assert_eq!(answer["error"]["code"], code, "{why}: {answer}");
        assert_eq!(answer["id"], body["id"], "{why}: the request's id comes back");
    }
    let unsupported = post(&gw, &list(json!({"io.modelcontextprotocol/protocolVersion": "2099-01-01", "io.modelcontextprotocol/clientCapabilities": {}})),
        &[("mcp-protocol-version", "2099-01-01"), ("mcp-method", "tools/list")]).await.json();
    assert_eq!(unsupported["error"]["data"]["requested"], "2099-01-01");
    assert_eq!(unsupported["error"]["data"]["supported"][0], MODERN);

    // Methods 2026-07-28 removed, and unknown ones: 404 with -32601.
    for method in ["initialize", "ping", "logging/setLevel", "resources/subscribe", "no/such"] {
        let resp = modern(&gw, 11, method, json!({}), &[]).await;
        assert_eq!(resp.status, 404, "{method}: {}", resp.text());
        assert_eq!(resp.json()["error"]["code"], -32601, "{method}");
    }
    // The gateway bridges tools only: empty prompt and resource lists, cacheable.
    for (method, field) in [
        ("prompts/list", "prompts"),
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
    ] {
        let result = modern(&gw, 12, method, json!({}), &[]).await.json()["result"].clone();
        assert_eq!(result[field], json!([]), "{method}: {result}");
        assert!(result["ttlMs"].is_u64() && result["cacheScope"] == "public", "{method}: {result}");
    }
    assert_eq!(calc.call_count(), 2, "no refused request reached the tool server");
}

#[tokio::test]
async fn a_list_that_depends_on_the_caller_is_private_and_the_same_every_time() {
    let calc = ToolServer::start(calculator_catalog(&["Mail.Send", "Mail.Read", "Admin.Wipe"])).await;
    let gw = GatewayConfig::new()
        .upstream("calc", &calc.url())
        .raw("[[policy]]\nname = \"all\"\nwhen = { any = true }\nallow = [\"*\"]\ndeny = [\"Admin.*\"]\n")
        .start()
        .await;
    gw.wait_for_tool("Mail.Send@1.0.0").await;
    let first = modern(&gw, 1, "tools/list", json!({}), &[]).await.json()["result"].clone();
    assert_eq!(first["cacheScope"], "private", "[[policy]] makes the list depend on the caller: {first}");
    assert_eq!(tool_names(&first), ["Calculator_Add", "Mail_Read", "Mail_Send"], "sorted, the denied tool left out");
    for id in 2..5 {
        let again = modern(&gw, id, "tools/list", json!({}), &[]).await.json()["result"].clone();
        assert_eq!(again["tools"], first["tools"], "the same list in the same order");
    }
}

// ---------------------------------------------------------------------------
// Event streams
// ---------------------------------------------------------------------------

/// API keys for two callers, alice and bob.
const KEYS: &str = "[auth]\napi_keys = [{ key = \"env:OTC_TEST_ALICE_KEY\", user_id = \"alice\" }, { key = \"env:OTC_TEST_BOB_KEY\", user_id = \"bob\" }]\n\n";

/// Alice and bob, at most two streams each, and a policy that lets each see
/// the calculator and a toolkit of their own.
fn two_callers() -> String {
    KEYS.to_owned()
        + "[mcp]\nmax_streams_per_caller = 2\n\n\
     [[policy]]\nname = \"calculator\"\nwhen = { any = true }\nallow = [\"Calculator.*\"]\n\n\
     [[policy]]\nname = \"alice\"\nwhen = { user_id = \"alice\" }\nallow = [\"Alice.*\"]\n\n\
     [[policy]]\nname = \"bob\"\nwhen = { user_id = \"bob\" }\nallow = [\"Bob.*\"]\n"
}

const ALICE: (&str, &str) = ("oxp-api-key", "alice-key");
const BOB: (&str, &str) = ("oxp-api-key", "bob-key");

async fn start_two_callers(calc: &ToolServer) -> Gateway {
    GatewayConfig::new()
        .upstream("calc", &calc.url())
        .raw(&two_callers())
        .start_with_env(&[("OTC_TEST_ALICE_KEY", "alice-key"), ("OTC_TEST_BOB_KEY", "bob-key")])
        .await
}

#[tokio::test]
async fn each_caller_hears_only_of_changes_to_the_tools_it_may_see() {
    let calc = ToolServer::start(calculator_catalog(&[])).await;
    let mut gw = start_two_callers(&calc).await;
    gw.wait_for_tool("Calculator.Add@2.0.0").await;

    let mut alice = listen(&gw, 41, &[ALICE], json!({"toolsListChanged": true})).await;
    assert_eq!(alice.status(), 200, "{}", alice.head);
    assert!(alice.head.to_ascii_lowercase().contains("content-type: text/event-stream"), "{}", alice.head);
    let ack = alice.next().await.expect("an acknowledgment");
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged", "{ack}");
    assert_eq!(ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 41);
    assert_eq!(ack["params"]["notifications"], json!({"toolsListChanged": true}));
    let mut bob = listen(&gw, 42, &[BOB], json!({"toolsListChanged": true})).await;
    bob.next().await.expect("an acknowledgment");
    // A stream that asked for prompt changes only hears nothing of tools.
    let mut prompts_only = listen(&gw, 43, &[BOB], json!({"promptsListChanged": true})).await;
    assert_eq!(prompts_only.next().await.expect("ack")["params"]["notifications"], json!({}));

    // A tool only bob may see: bob hears of it, alice does not.
    calc.set_catalog(calculator_catalog(&["Bob.Secret"]));
    let change = bob.next().await.expect("bob's notification");
    assert_eq!(change["method"], "notifications/tools/list_changed", "{change}");
    assert_eq!(change["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"], 42);
    // A change both see: both hear of it.
    calc.set_catalog(calculator_catalog(&["Bob.Secret", "Calculator.Mul"]));
    bob.next().await.expect("bob hears of the calculator");
    // Alice hears of it before the gateway is stopped: the stop must not
    // race her stream's notice.
    let heard = alice.next().await.expect("alice hears of the calculator");
    assert_eq!(heard["method"], "notifications/tools/list_changed", "{heard}");
    // Then the gateway stops: each stream ends with its result, and alice
    // heard of nothing else (bob's tool was none of hers).
    gw.signal("TERM");
    let rest = alice.rest().await;
    let methods: Vec<&str> = rest.iter().filter_map(|m| m["method"].as_str()).collect();
    assert!(methods.is_empty(), "alice heard of the calculator only: {heard} then {rest:?}");
    let last = rest.last().expect("a closing result");
    assert_eq!((&last["id"], &last["result"]["resultType"]), (&json!(41), &json!("complete")), "{last}");
    let prompts_rest = prompts_only.rest().await;
    assert!(prompts_rest.iter().all(|m| m.get("method").is_none()), "no tool notifications: {prompts_rest:?}");
    let _ = gw.wait_exit(Duration::from_secs(20)).await;
}

#[tokio::test]
async fn one_callers_streams_do_not_use_up_anothers() {
    let calc = ToolServer::start(calculator_catalog(&[])).await;
    let gw = start_two_callers(&calc).await;
    gw.wait_for_tool("Calculator.Add@2.0.0").await;
    let mut held = Vec::new();
    for id in 0..2 {
        let mut stream = listen(&gw, id, &[ALICE], json!({"toolsListChanged": true})).await;
        assert_eq!(stream.status(), 200);
        stream.next().await.expect("ack");
        held.push(stream);
    }
    let mut third = listen(&gw, 3, &[ALICE], json!({"toolsListChanged": true})).await;
    assert_eq!(third.status(), 429, "alice is at max_streams_per_caller: {}", third.head);
    assert_eq!(third.body_json().await["error"]["code"], -31001);
    let mut bob = listen(&gw, 4, &[BOB], json!({"toolsListChanged": true})).await;
    assert_eq!(bob.status(), 200, "bob is not blocked by alice's streams");
    drop(held);
    // Closed streams give their places back (the gateway sees the close).
    let _reopened = wait_until("alice's closed streams are given back", async || {
        let stream = listen(&gw, 5, &[ALICE], json!({"toolsListChanged": true})).await;
        if stream.status() == 200 {
            Ok(stream)
        } else {
            Err(format!("status {}", stream.status()))
        }
    })
    .await;
    bob.next().await.expect("bob's ack");
}

#[tokio::test]
async fn a_legacy_client_hears_of_changes_on_the_get_stream() {
    let calc = ToolServer::start(calculator_catalog(&[])).await;
    let gw = GatewayConfig::new().upstream("calc", &calc.url()).start().await;
    gw.wait_for_tool("Calculator.Add@2.0.0").await;
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let resp = post(&gw, &init, &[]).await;
    assert_eq!(resp.json()["result"]["capabilities"]["tools"]["listChanged"], true);
    let session = resp.header("mcp-session-id").expect("a session");
    let mut stream = EventStream::open(
        &gw,
        "GET",
        "",
        &[("accept", "text/event-stream"), ("mcp-session-id", &session), ("mcp-protocol-version", "2025-11-25")],
    )
    .await;
    assert_eq!(stream.status(), 200, "{}", stream.head);
    calc.set_catalog(calculator_catalog(&["Weather.Now"]));
    let change = stream.next().await.expect("a notification");
    assert_eq!(change, json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
}

// ---------------------------------------------------------------------------
// Authorization challenges
// ---------------------------------------------------------------------------

#[tokio::test]
async fn an_authorization_to_give_is_asked_for_as_a_url_elicitation() {
    let calc = ToolServer::start(common::catalog(vec![common::needing(
        "Mail.Inbox",
        json!({"authorization": [{"id": "mailbox"}]}),
    )]))
    .await;
    // (Reversed: a token sent back as it came is scrubbed, tests/upstream_grants.rs.)
    calc.on_call(|request| {
        let token = common::forwarded(request)["context"]["authorization"][0]["token"].as_str().unwrap_or_default();
        common::success(request, json!({"token_seen_reversed": token.chars().rev().collect::<String>()}))
    });
    let tokens = tempfile_dir();
    let gw = GatewayConfig::new()
        .upstream_with("calc", &calc.url(), "authorization = [\"mailbox\"]")
        .raw(&format!(
            "[authorization.mailbox]\ntoken = \"file:{}/{{user_id}}\"\nauthorize_url = \"https://auth.example.com/start?user={{user_id}}\"\n\n{}",
            tokens.display(),
            KEYS
        ))
        .start_with_env(&[("OTC_TEST_ALICE_KEY", "alice-key"), ("OTC_TEST_BOB_KEY", "bob-key")])
        .await;
    gw.wait_for_tool("Mail.Inbox@1.0.0").await;
    let headers = |key: &str| json!({"OXP-API-Key": key});

    // 2026-07-28, a client that takes URL elicitations: input_required; the
    // user finishes at the link (the token appears), the retry goes through.
    let alice_token = tokens.join("alice");
    let report = sdk_client(
        &gw,
        MODERN,
        &json!({"headers": headers("alice-key"), "calls": [{"name": "Mail_Inbox"}],
                "elicitation": {"write": alice_token, "text": "alice-token", "action": "accept"}}),
    )
    .await;
    let elicited = report["elicitations"].as_array().expect("elicitations");
    assert_eq!(elicited.len(), 1, "{report}");
    assert_eq!(elicited[0]["mode"], "url");
    assert_eq!(elicited[0]["url"], "https://auth.example.com/start?user=alice", "alice's own link");
    assert_eq!(
        report["calls"][0]["result"]["structuredContent"],
        json!({"token_seen_reversed": "nekot-ecila"}),
        "{report}"
    );

    // Bob's first call is his own: alice's grant is not his.
    let report = sdk_client(
        &gw,
        MODERN,
        &json!({"headers": headers("bob-key"), "calls": [{"name": "Mail_Inbox"}], "elicitation": {"action": "decline"}}),
    )
    .await;
    assert_eq!(report["elicitations"][0]["url"], "https://auth.example.com/start?user=bob", "{report}");
    let declined = &report["calls"][0]["result"];
    assert_eq!(declined["isError"], true, "a declined authorization ends the call: {report}");
    assert!(declined["content"][0]["text"].as_str().is_some_and(|t| t.contains("user=bob")), "{declined}");

    // A client without URL elicitation: a tool error carrying the link.
    let report =
        sdk_client(&gw, MODERN, &json!({"headers": headers("bob-key"), "calls": [{"name": "Mail_Inbox"}]})).await;
    let result = &report["calls"][0]["result"];
    assert_eq!(result["isError"], true, "{report}");
    assert!(result["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("https://auth.example.com/start?user=bob")));
    assert!(report["elicitations"].as_array().is_some_and(Vec::is_empty));

    // 2025-11-25, a client that declared URL elicitation: error -32042.
    let report = sdk_client(
        &gw,
        "legacy",
        &json!({"headers": headers("bob-key"), "calls": [{"name": "Mail_Inbox"}], "elicitation": {"action": "accept"}}),
    )
    .await;
    assert_eq!(report["calls"][0]["error"]["code"], -32042, "{report}");
    let raw = post(
        &gw,
        &json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "Mail_Inbox"}}),
        &[("oxp-api-key", "bob-key"), ("mcp-session-id", "0123456789abcdef0123456789abcdef.url")],
    )
    .await
    .json();
    let elicitation = &raw["error"]["data"]["elicitations"][0];
    assert_eq!(elicitation["url"], "https://auth.example.com/start?user=bob", "{raw}");
    assert!(elicitation["elicitationId"].is_string() && elicitation["mode"] == "url", "{raw}");
    // And one that did not: the tool error with the link, as before.
    let report =
        sdk_client(&gw, "legacy", &json!({"headers": headers("bob-key"), "calls": [{"name": "Mail_Inbox"}]})).await;
    assert_eq!(report["calls"][0]["result"]["isError"], true, "{report}");
    assert_eq!(calc.call_count(), 1, "only alice's authorized call reached the tool");
}

// ---------------------------------------------------------------------------
// A 2026-07-28 client and a 2026-07-28 server, through the gateway
// ---------------------------------------------------------------------------

/// tests/peers/conformance_server.py (the SDK server with tools that ask the
/// client for things) on a loopback port, killed on drop.
struct AskingServer {
    child: std::process::Child,
    url: String,
}

impl AskingServer {
    fn start() -> AskingServer {
        let addr = common::free_addr();
        let child = Command::new(common::sdk_python())
            .arg(common::peer_script("conformance_server.py"))
            .arg(addr.port().to_string())
            .stdout(Stdio::null())
            .spawn()
            .expect("start conformance_server.py");
        AskingServer { child, url: format!("http://{addr}/mcp") }
    }
}

impl Drop for AskingServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn a_modern_client_answers_what_a_modern_upstream_asks() {
    let server = AskingServer::start();
    let gw = GatewayConfig::new()
        .raw(&format!(
            "[[upstreams]]\nname = \"asking\"\nurl = \"{}\"\nprotocol = \"mcp\"\ntoolkit = \"test\"\nversion = \"1.0.0\"\n",
            server.url
        ))
        .start()
        .await;
    gw.wait_for_tool("test.ask_name@1.0.0").await;

    // 2026-07-28 on both sides: the server's form elicitation reaches the
    // client, whose answer reaches the server on the retry.
    let report = sdk_client(
        &gw,
        MODERN,
        &json!({"calls": [{"name": "test_ask_name"}, {"name": "test_missing_capability"}],
                "elicitation": {"action": "accept", "content": {"name": "Ada"}}}),
    )
    .await;
    assert_eq!(report["elicitations"][0]["message"], "What is your name?", "{report}");
    assert_eq!(report["calls"][0]["result"]["content"][0]["text"], "Hello, Ada", "{report}");
    assert_eq!(report["calls"][0]["result"]["isError"], false, "{report}");
    // The client declared no sampling: the server's -32021 comes back as it is.
    assert_eq!(report["calls"][1]["error"]["code"], -32021, "{report}");

    // A 2025-11-25 client, or an OTC caller, cannot be asked: a tool failure.
    let legacy = sdk_client(&gw, "legacy", &json!({"calls": [{"name": "test_ask_name"}], "elicitation": {}})).await;
    let result = &legacy["calls"][0]["result"];
    assert_eq!(result["isError"], true, "{legacy}");
    // (The gateway declared no capabilities for it: the server said it needs
    // form elicitation.)
    assert!(result["content"][0]["text"].as_str().is_some_and(|t| t.contains("elicitation")), "{legacy}");
    assert!(legacy["elicitations"].as_array().is_some_and(Vec::is_empty), "{legacy}");
    let otc = gw.call("test.ask_name", json!({})).await;
    otc.expect_status(200);
    assert_eq!(otc.result()["success"], false, "{}", otc.text());
}

/// A fresh directory under the system temp dir.
fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("otc-mcp-front-{}", uuid_like()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    dir
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}
