//! `[tracing]`: spans exported over OTLP/HTTP to a real receiver on loopback
//! (tests/peers/otlp_receiver.py, on the official `opentelemetry-proto`
//! definitions from PyPI), checked as a tree: the server span of a request,
//! its steps, and the client span whose context the upstream received.
//! Needs the test Python (`OTC_TEST_PYTHON`, else `.venv/bin/python`).

mod common;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::*;
use serde_json::{json, Value};

/// tests/peers/otlp_receiver.py on a loopback port, killed on drop.
struct Receiver {
    child: Child,
    addr: SocketAddr,
}

impl Receiver {
    /// `mode`: "ok", "fail" (503) or "hang" (never answers).
    fn start(mode: &str) -> Receiver {
        let addr = free_addr();
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/otlp_receiver.py");
        let mut child = Command::new(sdk_python())
            .arg(script)
            .arg(addr.port().to_string())
            .arg(mode)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start otlp_receiver.py");
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                child.try_wait().expect("wait").is_none(),
                "otlp_receiver.py exited (is opentelemetry-proto installed?)"
            );
            assert!(Instant::now() < deadline, "otlp_receiver.py did not listen within 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        Receiver { child, addr }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    async fn spans(&self) -> Vec<Value> {
        let resp = send(self.addr, "GET", "/spans", Bytes::new(), None).await;
        resp.expect_status(200);
        resp.json().as_array().cloned().unwrap_or_default()
    }

    /// The spans of `trace`, once `pred` holds for them.
    async fn wait_for(&self, trace: &str, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let spans: Vec<Value> = self.spans().await.into_iter().filter(|s| s["trace_id"] == trace).collect();
            if pred(&spans) {
                return spans;
            }
            assert!(Instant::now() < deadline, "{what}: not received within 20 s; trace {trace} has {spans:#?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Receiver {
    /// The spans of any trace for which `pred` holds, once there is one.
    async fn wait_for_any(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let spans: Vec<Value> = self.spans().await.into_iter().filter(&pred).collect();
            if !spans.is_empty() {
                return spans;
            }
            assert!(Instant::now() < deadline, "{what}: not received within 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const SERVER: i64 = 2;
const CLIENT: i64 = 3;
const STATUS_ERROR: i64 = 2;

fn named<'a>(spans: &'a [Value], name: &str) -> &'a Value {
    spans.iter().find(|s| s["name"] == name).unwrap_or_else(|| panic!("no span {name:?} in {spans:#?}"))
}

fn children<'a>(spans: &'a [Value], parent: &Value) -> Vec<&'a str> {
    let mut names: Vec<&str> =
        spans.iter().filter(|s| s["parent_span_id"] == parent["span_id"]).filter_map(|s| s["name"].as_str()).collect();
    names.sort_unstable();
    names
}

fn tracing_section(endpoint: &str, extra: &str) -> String {
    format!("[tracing]\notlp_endpoint = \"{endpoint}\"\n{extra}\n")
}

/// The trace and parent span ids of a `traceparent`.
fn ids(traceparent: &str) -> (String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(parts.len(), 4, "{traceparent}");
    (parts[1].to_owned(), parts[2].to_owned())
}

async fn call_with(gw: &Gateway, tool: &str, input: Value, headers: &[(&str, &str)]) -> Resp {
    let body = Bytes::from(json!({"request": {"tool_id": tool, "input": input}}).to_string());
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send_with_headers(gw.addr, "POST", "/tools/call", body, &all).await
}

async fn metric(gw: &Gateway, series: &str) -> f64 {
    let text = send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .map_or(0.0, |v| v.trim().parse().expect("a number"))
}

#[tokio::test]
async fn an_otc_call_is_a_tree_of_spans_and_the_upstream_gets_the_client_spans_context() {
    let receiver = Receiver::start("ok");
    let server = ToolServer::start(catalog(vec![tool("Calc.Echo", "1.0.0", any_object())])).await;
    server.on_call(echo);
    let gw = GatewayConfig::new()
        .upstream("calc", &server.url())
        .raw("[auth]\napi_keys = [{ key = \"env:TRACE_TEST_KEY\", user_id = \"alice\" }]\n")
        .raw(&tracing_section(
            &receiver.endpoint(),
            "service_name = \"gw-under-test\"\nheaders = { x-tenant-key = \"env:TRACE_TEST_HEADER\" }",
        ))
        .start_with_env(&[("TRACE_TEST_KEY", "key-alice-0123456789"), ("TRACE_TEST_HEADER", "tenant-secret-42")])
        .await;
    gw.wait_for_tool("Calc.Echo@1.0.0").await;

    let resp = call_with(
        &gw,
        "Calc.Echo",
        json!({"text": "input-never-in-a-span"}),
        &[("authorization", "Bearer key-alice-0123456789")],
    )
    .await;
    assert_eq!(resp.expect_status(200).result()["value"], json!({"text": "input-never-in-a-span"}));

    // The upstream received the gateway's client span as its parent.
    let call = server.requests().into_iter().rfind(|r| r.method == "POST").expect("a call");
    let (trace, parent) = ids(call.headers.get("traceparent").expect("a traceparent"));
    let spans = receiver.wait_for(&trace, "the call's spans", |s| s.len() >= 7).await;

    let root = named(&spans, "POST /tools/call");
    assert_eq!(root["kind"], SERVER);
    assert_eq!(root["parent_span_id"], "", "a request without traceparent starts a trace");
    assert_eq!(root["service"], "gw-under-test");
    assert_eq!(root["attributes"]["http.request.method"], "POST");
    assert_eq!(root["attributes"]["http.route"], "/tools/call");
    assert_eq!(root["attributes"]["http.response.status_code"], 200);
    assert_eq!(root["attributes"]["user.id"], "alice");
    assert_eq!(children(&spans, root), ["authenticate", "execute_tool Calc.Echo@1.0.0"]);

    let execute = named(&spans, "execute_tool Calc.Echo@1.0.0");
    assert_eq!(execute["attributes"]["gen_ai.operation.name"], "execute_tool");
    assert_eq!(execute["attributes"]["gen_ai.tool.name"], "Calc.Echo@1.0.0");
    assert_eq!(execute["attributes"]["otc.tool.version"], "1.0.0");
    assert_eq!(execute["attributes"]["otc.upstream"], "calc");
    assert_eq!(execute["attributes"]["otc.outcome"], "success");
    assert_eq!(children(&spans, execute), ["POST", "admit", "inject", "resolve", "validate"]);

    let upstream = named(&spans, "POST");
    assert_eq!(upstream["kind"], CLIENT);
    assert_eq!(upstream["span_id"], parent, "the upstream's traceparent names the client span");
    assert_eq!(upstream["attributes"]["http.response.status_code"], 200);
    assert_eq!(upstream["attributes"]["otc.upstream.protocol"], "otc");
    assert_eq!(upstream["attributes"]["otc.upstream.attempt"], 0);
    for span in &spans {
        assert_ne!(span["status_code"], STATUS_ERROR, "{span}");
        assert!(span["end"].as_u64() >= span["start"].as_u64(), "{span}");
        // The collector's header, from its secret reference.
        assert_eq!(span["headers"]["x-tenant-key"], "tenant-secret-42");
        let text = span["attributes"].to_string();
        for never in ["input-never-in-a-span", "key-alice-0123456789", "tenant-secret-42"] {
            assert!(!text.contains(never), "{never} in {span}");
        }
    }

    // The call's log line leads to its trace.
    let line = gw.wait_for_log(&["tool call", &trace]).await;
    assert!(line.contains(&format!("span_id=\"{}\"", execute["span_id"].as_str().unwrap_or_default())), "{line}");
    let status = send(gw.admin, "GET", "/status", Bytes::new(), None).await.json();
    assert_eq!(status["tracing"]["otlp_endpoint"], receiver.endpoint(), "{status}");
}

#[tokio::test]
async fn a_request_with_a_traceparent_continues_its_trace_and_its_sampled_flag_decides() {
    let receiver = Receiver::start("ok");
    let server = ToolServer::start(catalog(vec![tool("Calc.Echo", "1.0.0", any_object())])).await;
    server.on_call(echo);
    // Ratio 0: only a caller's sampled trace is recorded.
    let gw = GatewayConfig::new()
        .upstream("calc", &server.url())
        .raw(&tracing_section(&receiver.endpoint(), "sample_ratio = 0.0"))
        .start()
        .await;
    gw.wait_for_tool("Calc.Echo@1.0.0").await;

    let unsampled = "00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-00f067aa0ba902b7-00";
    call_with(&gw, "Calc.Echo", json!({}), &[("traceparent", unsampled)]).await.expect_status(200);
    let seen = server.requests().into_iter().rfind(|r| r.method == "POST").expect("a call");
    let forwarded = seen.headers.get("traceparent").expect("a traceparent").clone();
    assert!(forwarded.starts_with("00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-") && forwarded.ends_with("-00"), "{forwarded}");
    call_with(&gw, "Calc.Echo", json!({}), &[]).await.expect_status(200);

    let incoming = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    call_with(&gw, "Calc.Echo", json!({}), &[("traceparent", incoming)]).await.expect_status(200);
    let spans =
        receiver.wait_for("4bf92f3577b34da6a3ce929d0e0e4736", "the sampled call's spans", |s| s.len() >= 7).await;
    let root = named(&spans, "POST /tools/call");
    assert_eq!(root["parent_span_id"], "00f067aa0ba902b7", "the caller's span is the parent");
    let seen = server.requests().into_iter().rfind(|r| r.method == "POST").expect("a call");
    let (trace, parent) = ids(seen.headers.get("traceparent").expect("a traceparent"));
    assert_eq!(trace, "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(named(&spans, "POST")["span_id"], parent.as_str());

    // Spans are exported in order: the two unsampled calls, made first,
    // recorded nothing.
    let all = receiver.spans().await;
    assert!(all.iter().all(|s| s["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"), "{all:#?}");
}

#[tokio::test]
async fn a_failed_upstream_marks_the_client_span_and_the_tool_span() {
    let receiver = Receiver::start("ok");
    let server = ToolServer::start(catalog(vec![tool("Calc.Crash", "1.0.0", any_object())])).await;
    server.on_call(html_500);
    let gw = GatewayConfig::new()
        .upstream("calc", &server.url())
        .raw(&tracing_section(&receiver.endpoint(), ""))
        .start()
        .await;
    gw.wait_for_tool("Calc.Crash@1.0.0").await;

    let resp = call_with(&gw, "Calc.Crash", json!({}), &[]).await;
    assert_eq!(resp.expect_status(200).result()["success"], false);
    let seen = server.requests().into_iter().rfind(|r| r.method == "POST").expect("a call");
    let (trace, parent) = ids(seen.headers.get("traceparent").expect("a traceparent"));
    let spans = receiver.wait_for(&trace, "the failed call's spans", |s| s.len() >= 7).await;

    let upstream = named(&spans, "POST");
    assert_eq!(upstream["span_id"], parent.as_str());
    assert_eq!(upstream["attributes"]["http.response.status_code"], 500);
    assert_eq!(upstream["status_code"], STATUS_ERROR);
    let execute = named(&spans, "execute_tool Calc.Crash@1.0.0");
    assert_eq!(execute["attributes"]["otc.outcome"], "tool_error");
    assert_eq!(execute["attributes"]["error.type"], "tool_error");
    assert_eq!(execute["status_code"], STATUS_ERROR);
    // The tool's failure is an answer: the request itself succeeded.
    assert_ne!(named(&spans, "POST /tools/call")["status_code"], STATUS_ERROR);

    // A tool the catalog does not have: the resolve step failed, and
    // nothing went upstream.
    let server_calls = server.call_count();
    let sampled = "00-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-00f067aa0ba902b7-01";
    let resp = call_with(&gw, "Calc.Nope", json!({}), &[("traceparent", sampled)]).await;
    assert_eq!(resp.status, 400, "{}", resp.text());
    let spans =
        receiver.wait_for("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "the unknown tool's spans", |s| s.len() >= 4).await;
    assert_eq!(named(&spans, "resolve")["status_code"], STATUS_ERROR);
    assert_eq!(named(&spans, "execute_tool")["status_code"], STATUS_ERROR);
    assert_eq!(named(&spans, "POST /tools/call")["attributes"]["http.response.status_code"], 400);
    assert_eq!(server.call_count(), server_calls);
}

/// tests/peers/mcp_server.py (the official MCP SDK) on a loopback port.
struct McpPeer(Child);

impl Drop for McpPeer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn mcp_peer() -> (McpPeer, SocketAddr) {
    let addr = free_addr();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mcp_server.py");
    let mut child = Command::new(sdk_python())
        .arg(script)
        .arg(addr.port().to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mcp_server.py");
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(child.try_wait().expect("wait").is_none(), "mcp_server.py exited before listening");
        assert!(Instant::now() < deadline, "mcp_server.py did not listen within 30 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    (McpPeer(child), addr)
}

#[tokio::test]
async fn an_mcp_call_through_the_mcp_front_to_an_mcp_server_is_a_tree_of_spans() {
    let receiver = Receiver::start("ok");
    let (_peer, peer_addr) = mcp_peer();
    let gw = GatewayConfig::new()
        .raw(&format!(
            "[[upstreams]]\nname = \"py\"\nurl = \"http://{peer_addr}/mcp\"\nprotocol = \"mcp\"\ntoolkit = \"Py\"\nversion = \"1.0.0\"\ncall_timeout = \"5s\"\n"
        ))
        .raw(&tracing_section(&receiver.endpoint(), ""))
        .start()
        .await;
    gw.wait_for_tool("Py.add@1.0.0").await;

    let incoming = "00-cccccccccccccccccccccccccccccccc-00f067aa0ba902b7-01";
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "Py_add", "arguments": {"a": 2, "b": 40}}});
    let headers = [
        ("content-type", "application/json"),
        ("accept", "application/json, text/event-stream"),
        ("traceparent", incoming),
    ];
    let resp = send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(body.to_string()), &headers).await;
    let answer = resp.expect_status(200).json();
    assert_eq!(answer["result"]["isError"], false, "{answer}");

    let spans = receiver.wait_for("cccccccccccccccccccccccccccccccc", "the MCP call's spans", |s| s.len() >= 7).await;
    let root = named(&spans, "POST /mcp");
    assert_eq!((root["kind"].as_i64(), root["parent_span_id"].as_str()), (Some(SERVER), Some("00f067aa0ba902b7")));
    assert_eq!(children(&spans, root), ["authenticate", "execute_tool Py.add@1.0.0"]);
    let execute = named(&spans, "execute_tool Py.add@1.0.0");
    assert_eq!(execute["attributes"]["otc.upstream"], "py");
    assert_eq!(execute["attributes"]["otc.outcome"], "success");
    assert_eq!(children(&spans, execute), ["admit", "inject", "resolve", "tools/call add", "validate"]);
    let client = named(&spans, "tools/call add");
    assert_eq!(client["kind"], CLIENT);
    assert_eq!(client["attributes"]["mcp.method.name"], "tools/call");
    assert_eq!(client["attributes"]["gen_ai.tool.name"], "add");
    assert_eq!(client["attributes"]["otc.upstream.protocol"], "mcp");
    assert!(client["attributes"]["mcp.protocol.version"].is_string(), "{client}");
}

#[tokio::test]
async fn a_collector_that_is_down_or_hangs_costs_no_call() {
    let server = ToolServer::start(catalog(vec![tool("Calc.Echo", "1.0.0", any_object())])).await;
    server.on_call(echo);
    let hanging = Receiver::start("hang");
    for endpoint in [format!("http://{}", dead_addr()), hanging.endpoint()] {
        let gw =
            GatewayConfig::new().upstream("calc", &server.url()).raw(&tracing_section(&endpoint, "")).start().await;
        gw.wait_for_tool("Calc.Echo@1.0.0").await;
        for i in 0..40 {
            let resp = call_with(&gw, "Calc.Echo", json!({"i": i}), &[]).await;
            assert_eq!(resp.expect_status(200).result()["value"], json!({"i": i}), "{endpoint}");
        }
        // The spans were dropped, and counted, without a call noticing.
        let deadline = Instant::now() + Duration::from_secs(30);
        while metric(&gw, r#"otc_gateway_trace_spans_total{result="dropped"}"#).await == 0.0 {
            assert!(Instant::now() < deadline, "{endpoint}: no dropped spans counted");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let status = send(gw.admin, "GET", "/status", Bytes::new(), None).await.json();
        assert!(status["tracing"]["spans_dropped"].as_u64() > Some(0), "{status}");
        assert_eq!(status["tracing"]["spans_exported"], 0, "{status}");
        gw.wait_for_log(&["trace export failed"]).await;
    }
}

#[tokio::test]
async fn tracing_is_hot_reloaded_on_and_off() {
    let receiver = Receiver::start("ok");
    let server = ToolServer::start(catalog(vec![tool("Calc.Echo", "1.0.0", any_object())])).await;
    server.on_call(echo);
    let config = GatewayConfig::new().upstream("calc", &server.url());
    let gw = config.start().await;
    gw.wait_for_tool("Calc.Echo@1.0.0").await;
    let status = send(gw.admin, "GET", "/status", Bytes::new(), None).await.json();
    assert!(status.get("tracing").is_none(), "no [tracing], nothing said: {status}");

    gw.rewrite_config(&config.clone().raw(&tracing_section(&receiver.endpoint(), "")).toml());
    let deadline = Instant::now() + Duration::from_secs(20);
    while send(gw.admin, "GET", "/status", Bytes::new(), None).await.json().get("tracing").is_none() {
        assert!(Instant::now() < deadline, "the reload adding [tracing] was not applied");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    call_with(&gw, "Calc.Echo", json!({}), &[]).await.expect_status(200);
    let seen = server.requests().into_iter().rfind(|r| r.method == "POST").expect("a call");
    let (trace, _) = ids(seen.headers.get("traceparent").expect("a traceparent"));
    receiver.wait_for(&trace, "the spans after the reload", |s| s.len() >= 7).await;
    // Catalog polls are traces of their own.
    let polls = receiver.wait_for_any("a catalog poll's span", |s| s["name"] == "catalog poll").await;
    assert_eq!(polls[0]["attributes"]["otc.upstream"], "calc");
    assert_eq!(polls[0]["parent_span_id"], "");

    // Off again: nothing more is recorded.
    gw.rewrite_config(&config.toml());
    let deadline = Instant::now() + Duration::from_secs(20);
    while send(gw.admin, "GET", "/status", Bytes::new(), None).await.json().get("tracing").is_some() {
        assert!(Instant::now() < deadline, "the reload removing [tracing] was not applied");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The reload itself was a trace, under the section in force before it.
    let reloads = receiver.wait_for_any("the reload's span", |s| s["name"] == "config reload").await;
    assert_eq!(reloads[0]["attributes"]["otc.reload.applied"], true);
    let sampled = "00-dddddddddddddddddddddddddddddddd-00f067aa0ba902b7-01";
    call_with(&gw, "Calc.Echo", json!({}), &[("traceparent", sampled)]).await.expect_status(200);
    // An exporter sends within half a second; none is left to.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let late: Vec<Value> =
        receiver.spans().await.into_iter().filter(|s| s["trace_id"] == "dddddddddddddddddddddddddddddddd").collect();
    assert!(late.is_empty(), "no spans once [tracing] is gone: {late:#?}");
}
