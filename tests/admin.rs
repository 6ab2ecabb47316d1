//! The admin listener: the data plane's Host and Origin policy applies to
//! it (a DNS-rebinding page reads neither `/status` nor `/metrics`), and
//! an absolute-form target naming another host than `Host` is 400 as on
//! the data plane; with `[server] admin_token` every route but `/health` and
//! `/metrics` needs it, and without one a listener on a non-loopback address
//! serves only those two, to a pod on the same network as to anyone.

mod common;

use std::net::{IpAddr, SocketAddr};

use bytes::Bytes;
use common::{send, send_with_headers, Gateway, GatewayConfig, Resp, ToolServer};
use serde_json::json;

const ADMIN_TOKEN: &str = "admin-token-canary-4f2e9b";

/// Every admin route that reads what the gateway knows, the console's page
/// and script included: (method, path, body).
const READS: [(&str, &str, &str); 9] = [
    ("GET", "/status", ""),
    ("GET", "/calls", ""),
    ("GET", "/tools", ""),
    ("GET", "/tools/search?q=add", ""),
    ("GET", "/explain?user_id=alice&tool=Calc.Add", ""),
    ("POST", "/explain", r#"{"user_id": "alice", "tool": "Calc.Add"}"#),
    ("GET", "/grants", ""),
    ("GET", "/", ""),
    ("GET", "/console/app.js", ""),
];

/// This machine's address on its network (not loopback): where a pod or a
/// host next to it reaches a listener bound to `0.0.0.0`.
fn network_address() -> IpAddr {
    // A UDP "connection" sends nothing: it only asks the kernel which
    // address a datagram to a remote host would leave from.
    let routed = std::net::UdpSocket::bind("0.0.0.0:0")
        .and_then(|socket| socket.connect("203.0.113.1:9").and_then(|()| socket.local_addr()))
        .map(|local| local.ip());
    if let Some(ip) = routed.as_ref().ok().filter(|ip| !ip.is_loopback() && !ip.is_unspecified()) {
        return *ip;
    }
    let listed = std::process::Command::new("hostname").arg("-I").output().map(|o| o.stdout).unwrap_or_default();
    String::from_utf8_lossy(&listed)
        .split_whitespace()
        .filter_map(|word| word.parse::<IpAddr>().ok())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .unwrap_or_else(|| panic!("this machine has no non-loopback address ({routed:?}): the test needs one"))
}

/// A gateway whose admin listener is bound to every interface, and that
/// listener's address as another host on the network reaches it.
async fn on_the_network(server: &ToolServer, server_lines: &str, env: &[(&str, &str)]) -> (Gateway, SocketAddr) {
    let mut config = GatewayConfig::new()
        .upstream("calc", &server.url())
        .raw("[auth]\napi_keys = [{ key = \"env:ADMIN_TEST_ALICE\", user_id = \"alice\" }]\n");
    for line in server_lines.lines() {
        config = config.server_line(line);
    }
    let toml = config.toml().replace("admin_listen = \"127.0.0.1:0\"", "admin_listen = \"0.0.0.0:0\"");
    let mut env = env.to_vec();
    env.push(("ADMIN_TEST_ALICE", "alice-key-31c"));
    let gw = Gateway::start_with_env(&toml, &env).await;
    // alice calls once: /calls and /explain would name her.
    gw.wait_listed(&[("oxp-api-key", "alice-key-31c")], "Calc.Add@1.0.0").await;
    let body = json!({"request": {"tool_id": "Calc.Add", "call_id": "alice-call", "input": {"a": 1, "b": 2}}});
    let headers = [("oxp-api-key", "alice-key-31c"), ("content-type", "application/json")];
    let called = send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body.to_string()), &headers).await;
    assert_eq!(called.status, 200, "{}", called.text());
    let reached = SocketAddr::new(network_address(), gw.admin.port());
    (gw, reached)
}

async fn request(addr: SocketAddr, (method, path, body): (&str, &str, &str), auth: Option<&str>) -> Resp {
    let mut headers = vec![("content-type", "application/json")];
    headers.extend(auth.map(|a| ("authorization", a)));
    send_with_headers(addr, method, path, Bytes::from(body.to_owned()), &headers).await
}

/// Without `admin_token`, an admin listener on a non-loopback address is
/// reached by every pod and host on its network, tool servers included:
/// it answers them `/health` and `/metrics` only, and says why and which
/// line to add; `/status` too.
#[tokio::test]
async fn a_neighbour_on_the_network_reads_only_health_and_metrics_without_an_admin_token() {
    let server = tools().await;
    let (gw, neighbour) = on_the_network(&server, "", &[]).await;
    assert!(!neighbour.ip().is_loopback(), "{neighbour}");
    assert_eq!(request(neighbour, ("GET", "/health", ""), None).await.status, 200);
    let metrics = request(neighbour, ("GET", "/metrics", ""), None).await;
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    assert!(metrics.text().contains("otc_gateway_tool_calls_total"), "{}", metrics.text());
    for read in READS {
        // A token changes nothing when the gateway has none to check it against.
        for auth in [None, Some("Bearer guessed-token")] {
            let refused = request(neighbour, read, auth).await;
            assert_eq!(refused.status, 403, "{read:?}: {}", refused.text());
            let message = refused.json()["message"].as_str().unwrap_or_default().to_owned();
            assert!(message.contains("only /health and /metrics"), "{read:?}: {message}");
            assert!(message.contains("add `admin_token = \"env:OTC_ADMIN_TOKEN\"` to [server]"), "{message}");
            for leak in ["alice", "Calc.Add@1.0.0", "generation"] {
                assert!(!refused.text().contains(leak), "{read:?} told {leak}: {}", refused.text());
            }
        }
    }
    let reload = request(neighbour, ("POST", "/reload", ""), Some("Bearer guessed-token")).await;
    assert_eq!(reload.status, 403, "{}", reload.text());
    let revoke = request(neighbour, ("DELETE", "/grants/idp/alice", ""), None).await;
    assert_eq!(revoke.status, 403, "{}", revoke.text());
    // Start-up said so too.
    assert!(gw.logs().contains("serves only /health and /metrics"), "{}", gw.logs());
}

/// With `admin_token`, every read needs it (the console's page and script
/// excepted, so that it can ask for it), wherever the request comes from;
/// probes and Prometheus still get `/health` and `/metrics` without it.
#[tokio::test]
async fn with_an_admin_token_every_read_needs_it() {
    let server = tools().await;
    let env = [("OTC_TEST_ADMIN_TOKEN", ADMIN_TOKEN)];
    let (gw, neighbour) = on_the_network(&server, "admin_token = \"env:OTC_TEST_ADMIN_TOKEN\"", &env).await;
    let right = format!("Bearer {ADMIN_TOKEN}");
    for addr in [neighbour, gw.admin] {
        assert_eq!(request(addr, ("GET", "/health", ""), None).await.status, 200);
        assert_eq!(request(addr, ("GET", "/metrics", ""), None).await.status, 200);
        for read in READS {
            let console = read.1 == "/" || read.1.starts_with("/console/");
            for auth in [None, Some("Bearer wrong-token"), Some("Basic YWRtaW4="), Some(ADMIN_TOKEN)] {
                let answer = request(addr, read, auth).await;
                if console {
                    assert_eq!(answer.status, 200, "{read:?} {auth:?}: the console loads to ask for the token");
                    continue;
                }
                assert_eq!(answer.status, 401, "{addr} {read:?} {auth:?}: {}", answer.text());
                assert_eq!(answer.header("www-authenticate").as_deref(), Some("Bearer"), "{read:?}");
                assert!(!answer.text().contains("alice"), "{read:?}: {}", answer.text());
            }
            let answer = request(addr, read, Some(&right)).await;
            assert_eq!(answer.status, 200, "{read:?}: {}", answer.text());
        }
    }
    let calls = request(neighbour, READS[1], Some(&right)).await.json();
    assert_eq!(calls["calls"][0]["caller"], "alice", "{calls}");
    let status = request(neighbour, READS[0], Some(&right)).await.json();
    assert_eq!(status["security_warnings"], json!([]), "a token, no warning: {status}");
    let reload = request(neighbour, ("POST", "/reload", ""), Some(&right)).await;
    assert_eq!(reload.status, 200, "{}", reload.text());
    for text in [gw.logs(), gw.stdout(), status.to_string(), calls.to_string()] {
        assert!(!text.contains(ADMIN_TOKEN), "the admin token leaked");
    }
}

/// An absolute-form target names a host itself: another one than `Host`
/// is refused with 400 on the admin listener as on the data plane (two
/// readers of a request must not disagree on its host), on raw sockets.
#[tokio::test]
async fn an_absolute_target_naming_another_host_than_host_is_400() {
    let server = tools().await;
    let gw = GatewayConfig::new().upstream("calc", &server.url()).start().await;
    let own = gw.admin.to_string();
    let status_of = |answer: &str| answer.split(' ').nth(1).unwrap_or_default().to_owned();
    let exchange = |addr: SocketAddr, head: String| async move {
        let (answer, _) = common::raw_exchange(addr, head.as_bytes(), std::time::Duration::from_secs(5)).await;
        answer
    };
    for (head, expected) in [
        (format!("GET http://evil.example/status HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n"), "400"),
        (
            format!(
                "GET http://localhost:{}/status HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n",
                gw.admin.port()
            ),
            "400",
        ),
        (format!("GET http://{own}/status HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n"), "400"),
        (format!("GET http://user@{own}/status HTTP/1.1\r\nHost: user@{own}\r\nConnection: close\r\n\r\n"), "400"),
        ("GET /status HTTP/1.1\r\nConnection: close\r\n\r\n".to_owned(), "400"),
        // Both foreign: the rebinding rule's 421.
        (
            "GET http://evil.example/status HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n".to_owned(),
            "421",
        ),
        ("GET http://evil.example/status HTTP/1.0\r\n\r\n".to_owned(), "421"),
        // The same host twice, or HTTP/1.0's target alone: served.
        (format!("GET http://{own}/status HTTP/1.1\r\nHost: {own}\r\nConnection: close\r\n\r\n"), "200"),
        (format!("GET http://{own}/status HTTP/1.0\r\n\r\n"), "200"),
    ] {
        let answer = exchange(gw.admin, head.clone()).await;
        assert_eq!(status_of(&answer), expected, "{head:?}: {answer}");
        if expected != "200" {
            assert!(!answer.contains("generation"), "nothing of /status: {answer}");
        }
    }
    // The data plane answers the mismatch the same way.
    let data = gw.addr.to_string();
    let head = format!("GET http://evil.example/tools HTTP/1.1\r\nHost: {data}\r\nConnection: close\r\n\r\n");
    assert_eq!(status_of(&exchange(gw.addr, head).await), "400");
}

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
    let with_token = [("authorization", "Bearer admin-token-canary-4f2e9b")];
    let status = send_with_headers(gw.admin, "GET", "/status", Bytes::new(), &with_token).await.json();
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
    // Wrong method: 405 naming the right one (to a caller with the token).
    assert_eq!(send_with_headers(gw.admin, "GET", "/reload", Bytes::new(), &with_token).await.status, 405);
    // The token is in no answer and no log line.
    let status = send_with_headers(gw.admin, "GET", "/status", Bytes::new(), &with_token).await.text();
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

/// An `admin_token` that resolves to nothing would be presented by nobody,
/// or guessed by anybody: the gateway does not start, and says which key.
#[test]
fn an_empty_admin_token_is_a_start_up_error() {
    let config = common::temp_file(
        "empty-admin-token",
        "toml",
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nadmin_token = \"env:EMPTY_ADMIN_TOKEN\"\n",
    );
    let mut child = std::process::Command::new(common::gateway_bin())
        .arg("--config")
        .arg(&config)
        .env("EMPTY_ADMIN_TOKEN", "")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start otc-gateway");
    let exited = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        common::wait_blocking(std::time::Duration::from_secs(20), "the gateway refuses to start", || {
            child.try_wait().ok().flatten().is_some()
        })
    }));
    if exited.is_err() {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("its output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(exited.is_ok() && !out.status.success(), "it started: {stderr}");
    assert!(stderr.contains("server.admin_token: env:EMPTY_ADMIN_TOKEN is empty"), "{stderr}");
}
