//! `[tracing]`: spans exported over OTLP/HTTP to a real receiver on loopback
//! (tests/peers/otlp_receiver.py, on the official `opentelemetry-proto`
//! definitions from PyPI), checked as a tree: the server span of a request,
//! its steps, and the client span whose context the upstream received.
//! Needs the test Python (`OTC_TEST_PYTHON`, else `.venv/bin/python`).

mod common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use bytes::Bytes;
use common::otlp::Receiver;
use common::*;
use serde_json::{json, Value};

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
    (mcp_peer_at(addr, &[]), addr)
}

/// tests/peers/mcp_server.py on `addr`, with its `flags`.
fn mcp_peer_at(addr: SocketAddr, flags: &[&str]) -> McpPeer {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers/mcp_server.py");
    let mut child = Command::new(sdk_python())
        .arg(script)
        .arg(addr.port().to_string())
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start mcp_server.py");
    wait_listening(&mut child, addr, "mcp_server.py", Duration::from_secs(30), String::new);
    McpPeer(child)
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
        wait_within(Duration::from_secs(30), &format!("{endpoint}: dropped spans are counted"), async || {
            metric(&gw, r#"otc_gateway_trace_spans_total{result="dropped"}"#).await > 0.0
        })
        .await;
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
    wait_within(Duration::from_secs(20), "the reload adding [tracing] is applied", async || {
        send(gw.admin, "GET", "/status", Bytes::new(), None).await.json().get("tracing").is_some()
    })
    .await;
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
    wait_within(Duration::from_secs(20), "the reload removing [tracing] is applied", async || {
        send(gw.admin, "GET", "/status", Bytes::new(), None).await.json().get("tracing").is_none()
    })
    .await;
    // The reload itself was a trace, under the section in force before it.
    let reloads = receiver.wait_for_any("the reload's span", |s| s["name"] == "config reload").await;
    assert_eq!(reloads[0]["attributes"]["otc.reload.applied"], true);
    let sampled = "00-dddddddddddddddddddddddddddddddd-00f067aa0ba902b7-01";
    call_with(&gw, "Calc.Echo", json!({}), &[("traceparent", sampled)]).await.expect_status(200);
    // An exporter sends within half a second; none is left to. (On
    // purpose: an absence is seen only by letting time pass.)
    tokio::time::sleep(Duration::from_secs(2)).await;
    let late: Vec<Value> =
        receiver.spans().await.into_iter().filter(|s| s["trace_id"] == "dddddddddddddddddddddddddddddddd").collect();
    assert!(late.is_empty(), "no spans once [tracing] is gone: {late:#?}");
}

const ALICE: &str = "trace-alice-key-5d2e91";
const CLIENT_SECRET: &str = "trace-client-secret-8c41f0";

/// Each line of the gateway's log holding every one of `needles`.
fn log_lines(gw: &Gateway, needles: &[&str]) -> Vec<String> {
    gw.logs().lines().filter(|l| needles.iter().all(|n| l.contains(n))).map(str::to_owned).collect()
}

/// The `idp` token the tool server got on its last call.
fn last_token(tools: &ToolServer) -> String {
    let context = tools.last_request()["context"].clone();
    let tokens = context["authorization"].as_array().cloned().unwrap_or_default();
    let token = tokens.iter().find(|t| t["id"] == "idp").unwrap_or_else(|| panic!("no idp token in {context}"));
    token["token"].as_str().expect("a string token").to_owned()
}

#[tokio::test]
async fn a_call_that_needs_a_refresh_has_the_refresh_at_the_provider_as_a_client_span() {
    use common::oidc::{Browser, OidcProvider};
    let receiver = Receiver::start("ok");
    // Access tokens live 5 s and are refreshed within 1 s of expiry.
    let idp = OidcProvider::start(json!({"access_token_ttl": 5, "scopes": ["mail.read"]})).await;
    let tools = ToolServer::start(catalog(vec![needing(
        "Mail.Read",
        json!({"authorization": [{"id": "idp", "oauth2": {"scopes": ["mail.read"]}}]}),
    )]))
    .await;
    tools.on_call(echo);
    let state_dir = temp_file("trace-oauth-state", "d", "");
    std::fs::remove_file(&state_dir).expect("a fresh name");
    let gw = GatewayConfig::new()
        .upstream_with("mail", &tools.url(), "authorization = [\"idp\"]")
        .raw(&format!(
            r#"
[auth]
api_keys = [{{ key = "env:TRACE_ALICE_KEY", user_id = "alice" }}]

[authorization.idp]
issuer = "{issuer}"
client_id = "trace-test"
client_secret = "env:TRACE_CLIENT_SECRET"
scopes = ["openid"]
refresh_margin = "1s"
user_verification = "verifier"
verifier_url = "{tools}/connect/verify"

[state]
dir = "{dir}"
"#,
            issuer = idp.issuer(),
            tools = tools.url(),
            dir = state_dir.display()
        ))
        .raw(&tracing_section(&receiver.endpoint(), ""))
        .start_with_env(&[("TRACE_ALICE_KEY", ALICE), ("TRACE_CLIENT_SECRET", CLIENT_SECRET)])
        .await;
    idp.register_client("trace-test", CLIENT_SECRET, &[format!("{}/oauth/idp/callback", gw.url())]).await;
    gw.wait_for_tool("Mail.Read@1.0.0").await;
    let alice = ("oxp-api-key", ALICE);

    // Alice connects: a challenge, the provider, the application confirms.
    let challenged = call_with(&gw, "Mail.Read", json!({}), &[alice]).await;
    let url = challenged.server_error(400)["missing_requirements"]["authorization"][0]["url"]
        .as_str()
        .expect("a link")
        .to_owned();
    let browser = Browser::new();
    let page = browser.follow_as(&url, "alice").await;
    let body = Bytes::from(json!({ "flow_id": common::oidc::flow_id(&page) }).to_string());
    let headers = [("content-type", "application/json"), alice];
    let confirmed = send_with_headers(gw.addr, "POST", "/oauth/confirm", body, &headers).await;
    browser.get_no_follow(&common::oidc::return_to(&confirmed)).await;
    call_with(&gw, "Mail.Read", json!({}), &[alice]).await.result();
    let first = last_token(&tools);

    // Due for a refresh: the call refreshes the grant at the provider first.
    // (On purpose: the access token has to come due.)
    tokio::time::sleep(Duration::from_millis(4500)).await;
    let refreshing = "00-eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee-00f067aa0ba902b7-01";
    call_with(&gw, "Mail.Read", json!({}), &[alice, ("traceparent", refreshing)]).await.result();
    let second = last_token(&tools);
    assert_ne!(first, second, "the refreshed token is injected");
    assert_eq!(idp.stats().await["token_requests"]["refresh_token"], 1);
    let has_refresh = |s: &[Value]| s.iter().any(|s| s["name"] == "oauth refresh") && s.len() >= 8;
    let spans = receiver.wait_for("eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", "the refreshing call's spans", has_refresh).await;
    let execute = named(&spans, "execute_tool Mail.Read@1.0.0");
    assert_eq!(execute["attributes"]["otc.outcome"], "success");
    let inject = named(&spans, "inject");
    assert_eq!(inject["parent_span_id"], execute["span_id"]);
    assert_eq!(children(&spans, inject), ["oauth refresh"], "the refresh is a step of injecting the token");
    let refresh = named(&spans, "oauth refresh");
    assert_eq!(refresh["kind"], CLIENT);
    assert_ne!(refresh["status_code"], STATUS_ERROR, "{refresh}");
    let attributes = &refresh["attributes"];
    let issuer = idp.issuer();
    let port: i64 = issuer.rsplit(':').next().and_then(|p| p.parse().ok()).expect("the issuer's port");
    assert_eq!(attributes["http.request.method"], "POST");
    assert_eq!(attributes["server.address"], "127.0.0.1");
    assert_eq!(attributes["server.port"], port);
    assert_eq!(attributes["http.response.status_code"], 200);
    let full = attributes["url.full"].as_str().expect("url.full");
    assert!(full.starts_with(&issuer) && !full.contains('?'), "the token endpoint, no query: {full}");
    assert_eq!(attributes["otc.oauth.provider"], "idp");
    assert_eq!(attributes["otc.oauth.grant_type"], "refresh_token");
    assert_eq!(attributes["otc.oauth.refresh.outcome"], "ok");
    let mut keys: Vec<&str> = attributes.as_object().expect("attributes").keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "http.request.method",
            "http.response.status_code",
            "otc.oauth.grant_type",
            "otc.oauth.provider",
            "otc.oauth.refresh.outcome",
            "server.address",
            "server.port",
            "url.full"
        ],
        "names and outcomes only"
    );
    let bounded = |s: &Value| (s["start"].as_u64(), s["end"].as_u64());
    let ((inject_start, inject_end), (start, end)) = (bounded(inject), bounded(refresh));
    assert!(inject_start <= start && end <= inject_end, "the refresh is inside the inject step: {spans:#?}");

    // The provider refuses the next refresh: the span says so, the call is
    // challenged, and the log line about it leads to the trace. (On
    // purpose: the refreshed token has to come due in turn.)
    tokio::time::sleep(Duration::from_millis(4500)).await;
    idp.invalidate_refresh_tokens().await;
    let refused = "00-ffffffffffffffffffffffffffffffff-00f067aa0ba902b7-01";
    let resp = call_with(&gw, "Mail.Read", json!({}), &[alice, ("traceparent", refused)]).await;
    assert!(resp.server_error(400)["missing_requirements"]["authorization"][0]["url"].is_string());
    let spans = receiver.wait_for("ffffffffffffffffffffffffffffffff", "the refused refresh's spans", has_refresh).await;
    let refresh = named(&spans, "oauth refresh");
    assert_eq!(refresh["status_code"], STATUS_ERROR);
    assert_eq!(refresh["attributes"]["error.type"], "invalid_grant");
    assert_eq!(refresh["attributes"]["http.response.status_code"], 400);
    assert_eq!(refresh["attributes"]["otc.oauth.refresh.outcome"], "invalid_grant");
    assert_eq!(named(&spans, "inject")["status_code"], STATUS_ERROR);
    gw.wait_for_log(&["the provider refused the refresh token", "ffffffffffffffffffffffffffffffff"]).await;
    let root = named(&spans, "POST /tools/call");
    let line = log_lines(&gw, &["the provider refused the refresh token"]).pop().expect("the line");
    assert!(line.contains("trace_id=\"ffffffffffffffffffffffffffffffff\""), "{line}");
    assert!(line.contains(&format!("span_id=\"{}\"", root["span_id"].as_str().unwrap_or_default())), "{line}");

    // No token, secret or key in any span the gateway sent.
    let all = Value::Array(receiver.spans().await).to_string();
    for never in [first.as_str(), second.as_str(), CLIENT_SECRET, ALICE] {
        assert!(!all.contains(never), "{never} in a span");
    }
    let _ = std::fs::remove_dir_all(&state_dir);
}

#[tokio::test]
async fn log_lines_of_a_recorded_request_carry_its_trace_and_span_ids() {
    let receiver = Receiver::start("ok");
    let mut server = ToolServer::start(catalog(vec![tool("Calc.Echo", "1.0.0", any_object())])).await;
    server.on_call(echo);
    // Ratio 0: only a caller's sampled trace is recorded.
    let gw = GatewayConfig::new()
        .upstream_with("calc", &server.url(), "circuit_failures = 100")
        .raw(&tracing_section(&receiver.endpoint(), "sample_ratio = 0.0"))
        .start()
        .await;
    gw.wait_for_tool("Calc.Echo@1.0.0").await;
    server.stop().await;

    // An unrecorded call: its warning is as without [tracing].
    let unsampled = "00-11111111111111111111111111111111-00f067aa0ba902b7-00";
    let resp = call_with(&gw, "Calc.Echo", json!({}), &[("traceparent", unsampled)]).await;
    resp.server_error(400);
    let line = gw.wait_for_log(&["upstream unreachable"]).await;
    let line = line.lines().find(|l| l.contains("upstream unreachable")).expect("the line");
    assert!(!line.contains("trace_id") && !line.contains("span_id"), "{line}");

    // A recorded one: the warning names its trace and its server span.
    let sampled = "00-22222222222222222222222222222222-00f067aa0ba902b7-01";
    let resp = call_with(&gw, "Calc.Echo", json!({}), &[("traceparent", sampled)]).await;
    resp.server_error(400);
    let spans = receiver
        .wait_for("22222222222222222222222222222222", "the failed call's spans", |s| {
            s.iter().any(|s| s["name"] == "POST /tools/call")
        })
        .await;
    let root = named(&spans, "POST /tools/call");
    assert_eq!(root["attributes"]["http.response.status_code"], 400);
    let upstream = named(&spans, "POST");
    assert_eq!(upstream["attributes"]["error.type"], "connect");
    let lines = log_lines(&gw, &["upstream unreachable", "22222222222222222222222222222222"]);
    assert_eq!(lines.len(), 1, "{}", gw.logs());
    assert!(lines[0].contains("trace_id=\"22222222222222222222222222222222\""), "{}", lines[0]);
    let span_id = format!("span_id=\"{}\"", root["span_id"].as_str().unwrap_or_default());
    assert!(lines[0].contains(&span_id), "{}", lines[0]);
    // So does the call's own line.
    let lines = log_lines(&gw, &["tool call", "22222222222222222222222222222222"]);
    assert!(lines.len() == 1 && lines[0].contains(&span_id), "{lines:?}");
    assert_eq!(log_lines(&gw, &["upstream unreachable"]).len(), 2);
}

#[tokio::test]
async fn an_mcp_upstream_probed_again_for_a_call_is_a_span_of_that_call() {
    let receiver = Receiver::start("ok");
    // A 2025-11-25 server (a session) that keeps no stream open to the
    // gateway, polled once an hour: after it restarts, only a call finds
    // that its session is gone, and probes it again. One worker thread: the
    // tool list watcher, woken when the call drops the session, would
    // otherwise race it to the probe from another.
    let addr = free_addr();
    let flags = ["legacy", "quiet"];
    let mut peer = mcp_peer_at(addr, &flags);
    let toml = GatewayConfig::new()
        .server_line("threads = 1")
        .raw(&format!(
            "[[upstreams]]\nname = \"py\"\nurl = \"http://{addr}/mcp\"\nprotocol = \"mcp\"\ntoolkit = \"Py\"\nversion = \"1.0.0\"\ncall_timeout = \"5s\"\n"
        ))
        .raw(&tracing_section(&receiver.endpoint(), "sample_ratio = 0.0"))
        .toml()
        .replace("poll_interval = \"200ms\"", "poll_interval = \"1h\"");
    let gw = Gateway::start(&toml).await;
    gw.wait_for_tool("Py.add@1.0.0").await;
    assert_eq!(call_with(&gw, "Py.add", json!({"a": 1, "b": 1}), &[]).await.result()["value"], 2);

    // A connection pooled before the restart may break under the first
    // call (a tool failure; the session is not judged then), and a slow
    // restart may fail a probe: calls until one is answered, each its own
    // trace (only they are recorded, at ratio 0). One of them found the
    // session gone and probed again; should the watcher have won that race
    // after all, the server is restarted again.
    let mut attempt = 0;
    let mut probes = Vec::new();
    for _restart in 0..3 {
        drop(peer);
        peer = mcp_peer_at(addr, &flags);
        let answered = wait_until("a call to the restarted server is answered", async || {
            attempt += 1;
            let trace = format!("{attempt:032x}");
            let traceparent = format!("00-{trace}-00f067aa0ba902b7-01");
            let resp = call_with(&gw, "Py.add", json!({"a": 1, "b": 2}), &[("traceparent", &traceparent)]).await;
            if resp.status == 200 && resp.result()["value"] == 3 {
                Ok(trace)
            } else {
                Err(resp.text())
            }
        })
        .await;
        // Its server span ends last: the earlier calls' spans are in by then.
        let root = |s: &[Value]| s.iter().any(|s| s["name"] == "POST /tools/call");
        receiver.wait_for(&answered, "the answered call's spans", root).await;
        probes = receiver.spans().await.into_iter().filter(|s| s["name"] == "mcp discover").collect();
        if !probes.is_empty() {
            break;
        }
    }
    assert!(!probes.is_empty(), "no call probed the restarted server, in three restarts");
    let trace = probes[0]["trace_id"].as_str().expect("a trace id").to_owned();
    let spans =
        receiver.wait_for(&trace, "the call's spans", |s| s.iter().any(|s| s["name"] == "tools/call add")).await;
    let client = named(&spans, "tools/call add");
    assert_eq!(client["kind"], CLIENT);
    assert_eq!(children(&spans, client), ["mcp discover"], "the probe is part of the upstream call");
    let discover = named(&spans, "mcp discover");
    assert_eq!(discover["kind"], CLIENT);
    assert_eq!(discover["attributes"]["mcp.method.name"], "server/discover");
    assert_eq!(discover["attributes"]["mcp.protocol.version"], "2025-11-25");
    assert_ne!(discover["status_code"], STATUS_ERROR, "{discover}");
    drop(peer);
}
