//! The admin listener: the data plane's Host and Origin policy applies to
//! it (a DNS-rebinding page reads neither `/status` nor `/metrics`), and
//! its actions (`POST /reload`) need `[server] admin_token`.

mod common;

use bytes::Bytes;
use common::{send, send_with_headers, GatewayConfig, ToolServer};
use serde_json::json;

const ADMIN_TOKEN: &str = "admin-token-canary-4f2e9b";

async fn tools() -> ToolServer {
    let server =
        ToolServer::start(common::catalog(vec![common::tool("Calc.Add", "1.0.0", common::add_schema())])).await;
    server.on_call(common::add);
    server
}

#[tokio::test]
async fn a_rebinding_page_reads_nothing_from_the_admin_listener() {
    let server = tools().await;
    let gw = GatewayConfig::new().upstream("calc", &server.url()).start().await;
    for path in ["/status", "/metrics", "/health"] {
        assert_eq!(send(gw.admin, "GET", path, Bytes::new(), None).await.status, 200, "{path}");
        // The attacker's name resolving to 127.0.0.1: its Host is refused.
        let rebound = send_with_headers(gw.admin, "GET", path, Bytes::new(), &[("host", "evil.example:9464")]).await;
        assert_eq!(rebound.status, 421, "{path}: {}", rebound.text());
        // A cross-site fetch carries its Origin: refused.
        let foreign =
            send_with_headers(gw.admin, "GET", path, Bytes::new(), &[("origin", "https://evil.example")]).await;
        assert_eq!(foreign.status, 403, "{path}: {}", foreign.text());
        for refused in [&rebound, &foreign] {
            assert!(!refused.text().contains("generation"), "nothing of /status: {}", refused.text());
        }
        // A page of the admin listener's own origin is served.
        let own = format!("http://{}", gw.admin);
        let same = send_with_headers(gw.admin, "GET", path, Bytes::new(), &[("origin", own.as_str())]).await;
        assert_eq!(same.status, 200, "{path}");
    }
}

#[tokio::test]
async fn reload_needs_the_admin_token_and_there_is_none_by_default() {
    let server = tools().await;
    let config = GatewayConfig::new().upstream("calc", &server.url());
    let open = config.start().await;
    let refused = send(open.admin, "POST", "/reload", Bytes::new(), None).await;
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(refused.text().contains("admin_token"), "{}", refused.text());

    let gw = config
        .server_line("admin_token = \"env:OTC_TEST_ADMIN_TOKEN\"")
        .start_with_env(&[("OTC_TEST_ADMIN_TOKEN", ADMIN_TOKEN)])
        .await;
    let reload = |auth: Option<&'static str>| {
        let admin = gw.admin;
        async move {
            let headers: Vec<(&str, &str)> = auth.map(|a| vec![("authorization", a)]).unwrap_or_default();
            send_with_headers(admin, "POST", "/reload", Bytes::new(), &headers).await
        }
    };
    for (auth, what) in
        [(None, "no token"), (Some("Bearer wrong-token"), "a wrong token"), (Some("Basic YWRtaW4="), "another scheme")]
    {
        let resp = reload(auth).await;
        assert_eq!(resp.status, 401, "{what}: {}", resp.text());
        assert_eq!(resp.header("www-authenticate").as_deref(), Some("Bearer"), "{what}");
    }
    let status = send(gw.admin, "GET", "/status", Bytes::new(), None).await.json();
    assert_eq!(status["generation"], 1, "nothing was reloaded");

    // The right token reloads; a broken file is reported, the old config kept.
    let ok = reload(Some("Bearer admin-token-canary-4f2e9b")).await;
    assert_eq!(ok.status, 200, "{}", ok.text());
    assert_eq!(ok.json()["ok"], true);
    assert_eq!(ok.json()["generation"], 2);
    gw.rewrite_config("[server]\nlisten = \"127.0.0.1:0\"\nmax_body = 1\n");
    let broken = reload(Some("Bearer admin-token-canary-4f2e9b")).await;
    assert_eq!(broken.status, 422, "{}", broken.text());
    assert!(broken.json()["error"].as_str().unwrap_or_default().contains("max_body"), "{}", broken.text());
    assert_eq!(gw.call("Calc.Add@1.0.0", json!({"a": 1, "b": 2})).await.result()["value"], 3);
    // Wrong method: 405 naming the right one.
    assert_eq!(send(gw.admin, "GET", "/reload", Bytes::new(), None).await.status, 405);
    // The token is in no answer and no log line.
    let status = send(gw.admin, "GET", "/status", Bytes::new(), None).await.text();
    for text in [status, gw.logs(), gw.stdout()] {
        assert!(!text.contains(ADMIN_TOKEN), "the admin token leaked");
    }
}

/// `GET /calls`: the most recent calls, newest first, each with its caller,
/// tool, upstream, status and `call_id`; never an input, an output, a
/// secret or a credential.
#[tokio::test]
async fn recent_calls_say_who_called_what_and_nothing_they_carried() {
    const SECRET_VALUE: &str = "injected-secret-canary-0b7e";
    const INPUT: &str = "input-canary-5d1a";
    let server = ToolServer::start(common::catalog(vec![
        common::tool("Calc.Add", "1.0.0", common::add_schema()),
        common::needing("Echo.Say", json!({"secrets": [{"id": "API_KEY"}]})),
    ]))
    .await;
    server.on_call(common::echo);
    let gw = GatewayConfig::new()
        .upstream_with("tools", &server.url(), "secrets = [\"API_KEY\"]")
        .raw(
            "[auth]\napi_keys = [{ key = \"env:CALLS_ALICE\", user_id = \"alice\" }, \
             { key = \"env:CALLS_BOB\", user_id = \"bob\" }]\n\n[secrets]\nAPI_KEY = \"env:CALLS_SECRET\"\n",
        )
        .start_with_env(&[("CALLS_ALICE", "alice-key-1"), ("CALLS_BOB", "bob-key-2"), ("CALLS_SECRET", SECRET_VALUE)])
        .await;
    gw.wait_for_tool("Echo.Say@1.0.0").await;
    let call = |key: &'static str, body: serde_json::Value| {
        let addr = gw.addr;
        async move {
            let headers = [("oxp-api-key", key), ("content-type", "application/json")];
            send_with_headers(addr, "POST", "/tools/call", Bytes::from(body.to_string()), &headers).await
        }
    };
    let said = call(
        "alice-key-1",
        json!({"request": {"tool_id": "Echo.Say", "call_id": "alice-1", "input": {"text": INPUT}}}),
    )
    .await;
    assert_eq!(said.status, 200, "{}", said.text());
    assert!(said.text().contains(INPUT), "the echo came back: {}", said.text());
    let wrong =
        call("bob-key-2", json!({"request": {"tool_id": "Calc.Add", "call_id": "bob-1", "input": {"a": INPUT}}})).await;
    assert_eq!(wrong.status, 422, "{}", wrong.text());
    let anonymous = send_with_headers(
        gw.addr,
        "POST",
        "/tools/call",
        Bytes::from(json!({"request": {"tool_id": "Calc.Add", "input": {"a": 1, "b": 2}}}).to_string()),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!(anonymous.status, 200, "{}", anonymous.text());

    let listed = send(gw.admin, "GET", "/calls", Bytes::new(), None).await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    let body = listed.json();
    let calls = body["calls"].as_array().expect("calls");
    assert_eq!(calls.len(), 3, "{body}");
    assert_eq!(body["total"], 3);
    let (newest, bob, alice) = (&calls[0], &calls[1], &calls[2]);
    assert!(newest["caller"].is_null() && newest["outcome"] == "success", "anonymous, newest first: {newest}");
    assert_eq!((&bob["caller"], &bob["call_id"], &bob["status"]), (&json!("bob"), &json!("bob-1"), &json!(422)));
    assert_eq!(bob["outcome"], "validation_error");
    assert_eq!(alice["caller"], "alice");
    assert_eq!((&alice["tool"], &alice["upstream"]), (&json!("Echo.Say@1.0.0"), &json!("tools")));
    assert_eq!((&alice["status"], &alice["outcome"]), (&json!(200), &json!("success")));
    assert!(alice["duration_ms"].as_f64().is_some() && alice["at_ms"].as_u64().is_some(), "{alice}");
    let text = listed.text();
    for leak in [INPUT, SECRET_VALUE, "alice-key-1", "bob-key-2"] {
        assert!(!text.contains(leak), "{leak} is in /calls: {text}");
    }
    assert_eq!(
        send(gw.admin, "GET", "/calls?limit=1", Bytes::new(), None).await.json()["calls"].as_array().map(Vec::len),
        Some(1)
    );
    // Behind the admin listener's browser policy like the rest.
    let rebound = send_with_headers(gw.admin, "GET", "/calls", Bytes::new(), &[("host", "evil.example:9464")]).await;
    assert_eq!(rebound.status, 421);
    assert_eq!(send(gw.admin, "POST", "/calls", Bytes::new(), None).await.status, 405);
}
