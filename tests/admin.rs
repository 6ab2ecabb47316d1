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
