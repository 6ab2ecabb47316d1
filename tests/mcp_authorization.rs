//! MCP authorization at the gateway, end to end through the real binary: with
//! `[auth] mode = "jwt"` the gateway is an OAuth protected resource. Its
//! metadata (RFC 9728) is public at `/.well-known/oauth-protected-resource`
//! and `/.well-known/oauth-protected-resource/mcp`; every 401 names it in
//! `WWW-Authenticate: Bearer resource_metadata="…"`; and a JWT at `/mcp`
//! must name the gateway's resource (`<public_url>/mcp`, or `[auth]
//! resource`) or `[auth] audience` in `aud` (RFC 8707), while the OTC routes
//! check `aud` only when `audience` is set (the OTC contract).
//!
//! Tokens are HS256, signed here with the secret the gateway reads from its
//! environment; the tool server is a real one on loopback that echoes calls
//! and shows which user the gateway sent.

mod common;

use std::process::Command;

use bytes::Bytes;
use common::jwt::{self, bearer};
use common::{echo, send_with_headers, tool, Gateway, GatewayConfig, Resp, ToolServer};
use serde_json::{json, Value};

const SECRET: &str = "mcp-authorization-hs256-secret-0123456789abcdef";
const ISSUER: &str = "https://auth.example.com";
const ECHO: &str = "Calc.Echo@1.0.0";
/// `Calc.Echo`'s name at `/mcp`.
const ECHO_MCP: &str = "Calc_Echo";
const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A token for `sub`, from the configured issuer, with this `aud` (none when
/// `Value::Null`).
fn token(sub: &str, aud: Value) -> String {
    jwt::hs256(&jwt::claims(sub, json!({"iss": ISSUER, "aud": aud})), SECRET.as_bytes())
}

/// A tool server echoing calls, serving `Calc.Echo@1.0.0`.
async fn echo_server() -> ToolServer {
    let server = ToolServer::start(common::catalog(vec![tool("Calc.Echo", "1.0.0", json!({"type": "object"}))])).await;
    server.on_call(echo);
    server
}

/// A gateway in front of `server` with `[auth] mode = "jwt"`, the HS256
/// secret, the issuer, and `auth` (more `[auth]` keys).
async fn start(server: &ToolServer, server_lines: &[&str], auth: &str) -> Gateway {
    let mut config = GatewayConfig::new().upstream("tools", &server.url());
    for line in server_lines {
        config = config.server_line(line);
    }
    config
        .raw(&format!(
            "[auth]\nmode = \"jwt\"\nhs256_secret = \"env:MA_JWT_SECRET\"\nissuer = \"{ISSUER}\"\n\
             api_keys = [{{ key = \"env:MA_API_KEY\", user_id = \"svc-key\" }}]\n{auth}"
        ))
        .start_with_env(&[("MA_JWT_SECRET", SECRET), ("MA_API_KEY", "ak-mcp-authorization-0123456789")])
        .await
}

/// The API key configured by [`start`], as a header.
const API_KEY: (&str, &str) = ("oxp-api-key", "ak-mcp-authorization-0123456789");

/// The gateway's default resource: `http://<bound address>/mcp`.
fn resource(gw: &Gateway) -> String {
    format!("{}/mcp", gw.url())
}

/// Waits until the gateway lists `Calc.Echo` (its catalog poll is done).
async fn wait_listed(gw: &Gateway) {
    gw.wait_listed(&[API_KEY], ECHO).await;
}

/// `tools/call` of `Calc_Echo` at `/mcp` with these headers.
async fn mcp_call(gw: &Gateway, headers: &[(&str, &str)]) -> Resp {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": ECHO_MCP, "arguments": {"x": 1}}});
    let mut all = vec![("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    all.extend_from_slice(headers);
    send_with_headers(gw.addr, "POST", "/mcp", Bytes::from(body.to_string()), &all).await
}

/// `POST /tools/call` of `Calc.Echo@1.0.0` with these headers.
async fn otc_call(gw: &Gateway, headers: &[(&str, &str)]) -> Resp {
    let body = json!({"$schema": "otc://1.0", "request": {"tool_id": ECHO, "input": {"x": 1}}});
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body.to_string()), &all).await
}

/// Checks that an `/mcp` call went through to the tool as `user`.
fn assert_mcp_ok(resp: &Resp, server: &ToolServer, user: &str, what: &str) {
    assert_eq!(resp.status, 200, "{what}: {}", resp.text());
    let body = resp.json();
    assert_eq!(body["result"]["isError"], false, "{what}: {body}");
    assert_eq!(server.last_request()["context"]["user_id"], user, "{what}");
}

/// Checks an OTC call went through to the tool as `user`.
fn assert_otc_ok(resp: &Resp, server: &ToolServer, user: &str, what: &str) {
    assert_eq!(resp.status, 200, "{what}: {}", resp.text());
    assert_eq!(resp.json()["result"]["value"], json!({"x": 1}), "{what}");
    assert_eq!(server.last_request()["context"]["user_id"], user, "{what}");
}

/// A parsed `WWW-Authenticate: Bearer …` challenge: its parameters.
fn challenge(resp: &Resp) -> Vec<(String, String)> {
    let value = resp.header("www-authenticate").unwrap_or_else(|| panic!("no WWW-Authenticate: {}", resp.text()));
    let params = value.strip_prefix("Bearer").unwrap_or_else(|| panic!("not a Bearer challenge: {value:?}"));
    params
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (name, quoted) = p.split_once('=').unwrap_or_else(|| panic!("not name=value: {p:?} in {value:?}"));
            let unquoted = quoted.strip_prefix('"').and_then(|q| q.strip_suffix('"'));
            (name.to_owned(), unquoted.unwrap_or_else(|| panic!("unquoted {name} in {value:?}")).to_owned())
        })
        .collect()
}

fn param<'a>(params: &'a [(String, String)], name: &str) -> Option<&'a str> {
    params.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// A 401 whose challenge names `metadata_url` and carries
/// `error="invalid_token"` exactly when a token was sent (RFC 6750 3.1).
fn assert_challenged(resp: &Resp, metadata_url: &str, token_sent: bool, what: &str) {
    assert_eq!(resp.status, 401, "{what}: {}", resp.text());
    let params = challenge(resp);
    assert_eq!(param(&params, "resource_metadata"), Some(metadata_url), "{what}: {params:?}");
    let error = if token_sent { Some("invalid_token") } else { None };
    assert_eq!(param(&params, "error"), error, "{what}: {params:?}");
    assert!(resp.json()["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {}", resp.text());
}

/// GET `path` of the gateway: the metadata document, checked for what every
/// one has (JSON, briefly cacheable, the header bearer method).
async fn metadata_at(gw: &Gateway, path: &str) -> Value {
    let resp = gw.get(path).await;
    assert_eq!(resp.status, 200, "GET {path}: {}", resp.text());
    assert_eq!(resp.header("content-type").as_deref(), Some("application/json"), "GET {path}");
    assert_eq!(resp.header("cache-control").as_deref(), Some("public, max-age=300"), "GET {path}");
    let doc = resp.json();
    assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "GET {path}: {doc}");
    doc
}

/// The gateway-local path of a metadata URL it handed out.
fn local_path<'a>(gw: &Gateway, url: &'a str) -> &'a str {
    url.strip_prefix(&gw.url()).unwrap_or_else(|| panic!("{url} is not on the gateway {}", gw.url()))
}

// ---------------------------------------------------------------------------
// The metadata document
// ---------------------------------------------------------------------------

#[tokio::test]
async fn the_metadata_is_public_and_names_the_mcp_resource_and_the_issuer() {
    let server = echo_server().await;
    let gw = start(&server, &[], "").await;
    let expected = json!({
        "resource": resource(&gw),
        "authorization_servers": [ISSUER],
        "bearer_methods_supported": ["header"],
    });
    // Both the path-suffixed form for /mcp (RFC 9728 3.1) and the root form.
    for path in [format!("{WELL_KNOWN}/mcp"), WELL_KNOWN.to_owned()] {
        assert_eq!(metadata_at(&gw, &path).await, expected, "GET {path}");
        // No credentials needed, and bad ones do not matter.
        let with_garbage =
            send_with_headers(gw.addr, "GET", &path, Bytes::new(), &[("authorization", "Bearer garbage")]).await;
        assert_eq!(with_garbage.status, 200, "GET {path} with a bad token: {}", with_garbage.text());
        let head = gw.request("HEAD", &path, Bytes::new(), None).await;
        assert_eq!(head.status, 200, "HEAD {path}");
        assert!(head.body.is_empty(), "HEAD {path} has no body");
        let post = gw.post_json(&path, &json!({})).await;
        assert_eq!(post.status, 405, "POST {path}: {}", post.text());
        assert_eq!(post.header("allow").as_deref(), Some("GET, HEAD"));
    }
    for other in [format!("{WELL_KNOWN}/tools"), format!("{WELL_KNOWN}/"), format!("{WELL_KNOWN}/mcp/x")] {
        assert_eq!(gw.get(&other).await.status, 404, "GET {other}");
    }
    // The browser policy of every route: a foreign Origin is refused, a
    // local one served.
    let path = format!("{WELL_KNOWN}/mcp");
    let foreign = send_with_headers(gw.addr, "GET", &path, Bytes::new(), &[("origin", "https://evil.example")]).await;
    assert_eq!(foreign.status, 403, "{}", foreign.text());
    let local = send_with_headers(gw.addr, "GET", &path, Bytes::new(), &[("origin", "http://localhost:6274")]).await;
    assert_eq!(local.status, 200, "{}", local.text());
    assert_eq!(server.call_count(), 0);
}

#[tokio::test]
async fn public_url_and_the_auth_keys_shape_the_metadata_and_the_challenge() {
    let server = echo_server().await;
    // Behind a proxy: public_url alone moves the resource.
    let gw = start(&server, &["public_url = \"https://gw.example.com\""], "").await;
    assert_eq!(metadata_at(&gw, &format!("{WELL_KNOWN}/mcp")).await["resource"], "https://gw.example.com/mcp");
    let refused = mcp_call(&gw, &[]).await;
    assert_challenged(&refused, "https://gw.example.com/.well-known/oauth-protected-resource/mcp", false, "public_url");
    drop(gw);

    // `resource`, `authorization_servers` and `scopes_supported`, all set.
    let gw = start(
        &server,
        &[],
        "resource = \"https://tools.example.com/team/mcp/\"\n\
         authorization_servers = [\"https://login.example.com/tenant-1\", \"https://backup.example.com/\"]\n\
         scopes_supported = [\"tools:read\", \"tools:call\"]\n",
    )
    .await;
    let expected = json!({
        "resource": "https://tools.example.com/team/mcp",
        "authorization_servers": ["https://login.example.com/tenant-1", "https://backup.example.com/"],
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["tools:read", "tools:call"],
    });
    // Also at the path the resource's own well-known URL has, for a proxy
    // that passes /.well-known/ through unchanged.
    for path in [format!("{WELL_KNOWN}/team/mcp"), format!("{WELL_KNOWN}/mcp"), WELL_KNOWN.to_owned()] {
        assert_eq!(metadata_at(&gw, &path).await, expected, "GET {path}");
    }
    let metadata_url = "https://tools.example.com/.well-known/oauth-protected-resource/team/mcp";
    assert_challenged(&mcp_call(&gw, &[]).await, metadata_url, false, "configured resource, /mcp");
    assert_challenged(&otc_call(&gw, &[]).await, metadata_url, false, "configured resource, /tools/call");

    // A token for the configured resource works at /mcp; one for the
    // address the gateway happens to listen on does not.
    wait_listed(&gw).await;
    let for_configured = bearer(&token("alice", json!("https://tools.example.com/team/mcp")));
    assert_mcp_ok(&mcp_call(&gw, &[("authorization", &for_configured)]).await, &server, "alice", "configured aud");
    let for_bound = bearer(&token("alice", json!(resource(&gw))));
    assert_challenged(&mcp_call(&gw, &[("authorization", &for_bound)]).await, metadata_url, true, "bound address aud");
}

#[tokio::test]
async fn without_jwt_mode_there_is_no_metadata_and_no_resource_in_challenges() {
    let server = echo_server().await;
    let gw = GatewayConfig::new()
        .upstream("tools", &server.url())
        .raw("[auth]\napi_keys = [{ key = \"env:MA_API_KEY\", user_id = \"svc-key\" }]\n")
        .start_with_env(&[("MA_API_KEY", "ak-mcp-authorization-0123456789")])
        .await;
    for path in [WELL_KNOWN.to_owned(), format!("{WELL_KNOWN}/mcp")] {
        assert_eq!(gw.get(&path).await.status, 404, "GET {path}");
    }
    // Mode "none" refuses only an unknown OXP-API-Key; it has no resource.
    let refused = otc_call(&gw, &[("oxp-api-key", "not-a-key")]).await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    assert_eq!(refused.header("www-authenticate").as_deref(), Some("Bearer error=\"invalid_token\""));
}

// ---------------------------------------------------------------------------
// 401s and the audience
// ---------------------------------------------------------------------------

#[tokio::test]
async fn every_401_names_the_metadata_which_names_the_resource() {
    let server = echo_server().await;
    let gw = start(&server, &[], "").await;
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", gw.url());
    let garbage = bearer("garbage.token.here");
    let expired = {
        let claims = jwt::claims("alice", json!({"iss": ISSUER, "aud": resource(&gw), "exp": jwt::now() - 3600}));
        bearer(&jwt::hs256(&claims, SECRET.as_bytes()))
    };
    for (what, header) in [("no token", None), ("garbage", Some(&garbage)), ("expired", Some(&expired))] {
        let headers: Vec<(&str, &str)> = header.iter().map(|h| ("authorization", h.as_str())).collect();
        let sent = header.is_some();
        assert_challenged(&mcp_call(&gw, &headers).await, &metadata_url, sent, &format!("/mcp, {what}"));
        assert_challenged(&otc_call(&gw, &headers).await, &metadata_url, sent, &format!("/tools/call, {what}"));
        let listing = send_with_headers(gw.addr, "GET", "/tools", Bytes::new(), &headers).await;
        assert_challenged(&listing, &metadata_url, sent, &format!("GET /tools, {what}"));
        if let Some(header) = header {
            let token = header.trim_start_matches("Bearer ");
            for resp in [mcp_call(&gw, &headers).await, otc_call(&gw, &headers).await] {
                let shown = format!("{:?} {}", resp.headers, resp.text());
                assert!(!shown.contains(token), "{what}: the token is never echoed: {shown}");
            }
        }
    }
    // The URL it names is served by the gateway and names the resource a
    // client connecting to /mcp asked for (RFC 9728 3.3).
    let doc = metadata_at(&gw, local_path(&gw, &metadata_url)).await;
    assert_eq!(doc["resource"], resource(&gw));
    assert_eq!(server.call_count(), 0, "no refused request reached the tool");
}

#[tokio::test]
async fn mcp_accepts_only_tokens_for_its_resource() {
    let server = echo_server().await;
    let gw = start(&server, &[], "").await;
    wait_listed(&gw).await;
    let ours = resource(&gw);
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", gw.url());

    let accepted = [
        ("aud is the resource", json!(ours)),
        ("aud lists the resource", json!(["https://other.example.com/mcp", ours])),
        ("upper-case scheme and host", json!(ours.replace("http://", "HTTP://"))),
    ];
    for (what, aud) in accepted {
        let auth = bearer(&token("alice", aud));
        assert_mcp_ok(&mcp_call(&gw, &[("authorization", &auth)]).await, &server, "alice", what);
    }
    let calls = server.call_count();
    let other_port = format!("http://{}:{}/mcp", gw.addr.ip(), gw.addr.port().wrapping_add(1).max(1));
    let refused = [
        ("no aud", json!(null)),
        ("another gateway's resource", json!("https://other.example.com/mcp")),
        ("the same host on another port", json!(other_port)),
        ("the gateway's root, not its MCP endpoint", json!(gw.url())),
        ("another path", json!(format!("{}/tools", gw.url()))),
        ("an audience that is not configured", json!("otc-gateway")),
        ("an empty list", json!([])),
    ];
    for (what, aud) in refused {
        let auth = bearer(&token("mallory", aud));
        assert_challenged(&mcp_call(&gw, &[("authorization", &auth)]).await, &metadata_url, true, what);
    }
    assert_eq!(server.call_count(), calls, "no refused token reached the tool");
    // An API key is the gateway's own credential: it works at /mcp too.
    assert_mcp_ok(&mcp_call(&gw, &[API_KEY]).await, &server, "svc-key", "API key");
}

#[tokio::test]
async fn otc_routes_take_tokens_without_aud_when_audience_is_unset() {
    let server = echo_server().await;
    let gw = start(&server, &[], "").await;
    wait_listed(&gw).await;
    // The OTC contract: a token without `aud` is accepted on the OTC routes
    // unless `audience` is set; one with `aud` must name the gateway.
    for (what, aud) in [("no aud", json!(null)), ("aud is the resource", json!(resource(&gw)))] {
        let auth = bearer(&token("olga", aud));
        assert_otc_ok(&otc_call(&gw, &[("authorization", &auth)]).await, &server, "olga", what);
        let listing = send_with_headers(gw.addr, "GET", "/tools", Bytes::new(), &[("authorization", &auth)]).await;
        assert_eq!(listing.status, 200, "GET /tools, {what}: {}", listing.text());
    }
    // A token minted for another resource is not the gateway's, on any route.
    let calls_before = server.call_count();
    let elsewhere = bearer(&token("olga", json!("account")));
    assert_eq!(otc_call(&gw, &[("authorization", &elsewhere)]).await.status, 401);
    let listing = send_with_headers(gw.addr, "GET", "/tools", Bytes::new(), &[("authorization", &elsewhere)]).await;
    assert_eq!(listing.status, 401, "GET /tools: {}", listing.text());
    assert_eq!(mcp_call(&gw, &[("authorization", &elsewhere)]).await.status, 401);
    assert_eq!(server.call_count(), calls_before, "nothing reached the tool");
    // The same token without aud is refused at /mcp.
    let no_aud = bearer(&token("olga", json!(null)));
    assert_eq!(mcp_call(&gw, &[("authorization", &no_aud)]).await.status, 401);
}

#[tokio::test]
async fn with_audience_set_both_fronts_take_it_or_the_resource_and_nothing_else() {
    let server = echo_server().await;
    let gw = start(&server, &[], "audience = \"otc-gateway\"\n").await;
    wait_listed(&gw).await;
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", gw.url());
    for (what, aud) in [("the audience", json!("otc-gateway")), ("the resource", json!(resource(&gw)))] {
        let auth = bearer(&token("ann", aud));
        assert_otc_ok(&otc_call(&gw, &[("authorization", &auth)]).await, &server, "ann", &format!("OTC, {what}"));
        assert_mcp_ok(&mcp_call(&gw, &[("authorization", &auth)]).await, &server, "ann", &format!("/mcp, {what}"));
    }
    let calls = server.call_count();
    for (what, aud) in [("no aud", json!(null)), ("another audience", json!("some-other-api"))] {
        let auth = bearer(&token("ann", aud));
        let headers = [("authorization", auth.as_str())];
        assert_challenged(&otc_call(&gw, &headers).await, &metadata_url, true, &format!("OTC, {what}"));
        assert_challenged(&mcp_call(&gw, &headers).await, &metadata_url, true, &format!("/mcp, {what}"));
    }
    assert_eq!(server.call_count(), calls);
}

#[tokio::test]
async fn one_callers_token_for_resource_a_never_works_at_the_gateway_of_resource_b() {
    // One authorization server (same issuer and key) for two gateways, as
    // MCP deployments share one. Gateway B also sets `audience` to its own
    // resource, which makes the OTC routes as strict as /mcp.
    let (server_a, server_b) = (echo_server().await, echo_server().await);
    let (resource_a, resource_b) = ("https://a.example.com/mcp", "https://b.example.com/mcp");
    let gw_a = start(&server_a, &["public_url = \"https://a.example.com\""], "").await;
    let gw_b =
        start(&server_b, &["public_url = \"https://b.example.com\""], &format!("audience = \"{resource_b}\"\n")).await;
    wait_listed(&gw_a).await;
    wait_listed(&gw_b).await;
    let alice = bearer(&token("alice", json!(resource_a)));
    let bob = bearer(&token("bob", json!(resource_b)));

    assert_mcp_ok(&mcp_call(&gw_a, &[("authorization", &alice)]).await, &server_a, "alice", "alice at A");
    assert_mcp_ok(&mcp_call(&gw_b, &[("authorization", &bob)]).await, &server_b, "bob", "bob at B");
    assert_otc_ok(&otc_call(&gw_b, &[("authorization", &bob)]).await, &server_b, "bob", "bob at B, OTC");
    let (calls_a, calls_b) = (server_a.call_count(), server_b.call_count());

    let metadata_b = "https://b.example.com/.well-known/oauth-protected-resource/mcp";
    let alice_at_b = [("authorization", alice.as_str())];
    assert_challenged(&mcp_call(&gw_b, &alice_at_b).await, metadata_b, true, "alice's token at B's /mcp");
    assert_challenged(&otc_call(&gw_b, &alice_at_b).await, metadata_b, true, "alice's token at B's /tools/call");
    let listing = send_with_headers(gw_b.addr, "GET", "/tools", Bytes::new(), &alice_at_b).await;
    assert_challenged(&listing, metadata_b, true, "alice's token at B's GET /tools");
    let metadata_a = "https://a.example.com/.well-known/oauth-protected-resource/mcp";
    assert_challenged(&mcp_call(&gw_a, &[("authorization", &bob)]).await, metadata_a, true, "bob's token at A's /mcp");
    assert_eq!((server_a.call_count(), server_b.call_count()), (calls_a, calls_b), "nothing reached a tool");
}

// ---------------------------------------------------------------------------
// The official MCP Python SDK discovers the metadata from a 401
// ---------------------------------------------------------------------------

/// tests/peers/mcp_auth_client.py against `url`, its authorization server
/// on `as_port`; its JSON report. On a blocking thread: the tool server
/// shares the test's runtime.
async fn python_oauth_client(url: &str, as_port: u16) -> Value {
    let script = common::peer_script("mcp_auth_client.py");
    let mut command = Command::new(common::sdk_python());
    command.arg(script).arg(url).arg(as_port.to_string()).arg(ECHO_MCP).env("MA_JWT_SECRET", SECRET);
    let output =
        tokio::task::spawn_blocking(move || command.output()).await.expect("join").expect("run mcp_auth_client.py");
    assert!(output.status.success(), "mcp_auth_client.py failed: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!("mcp_auth_client.py printed no JSON ({e}): {}", String::from_utf8_lossy(&output.stdout))
    })
}

#[tokio::test]
async fn the_python_sdk_finds_the_authorization_server_from_the_401_and_gets_a_token_for_the_resource() {
    let server = echo_server().await;
    // The script runs the authorization server there; the gateway names it
    // (its issuer is the default authorization server).
    let as_port = common::free_addr().port();
    let issuer = format!("http://127.0.0.1:{as_port}");
    let gw = GatewayConfig::new()
        .upstream("tools", &server.url())
        .raw(&format!(
            "[auth]\nmode = \"jwt\"\nhs256_secret = \"env:MA_JWT_SECRET\"\nissuer = \"{issuer}\"\n\
             api_keys = [{{ key = \"env:MA_API_KEY\", user_id = \"svc-key\" }}]\n"
        ))
        .start_with_env(&[("MA_JWT_SECRET", SECRET), ("MA_API_KEY", API_KEY.1)])
        .await;
    wait_listed(&gw).await;

    let seen = python_oauth_client(&resource(&gw), as_port).await;
    assert_eq!(seen["call"]["isError"], false, "{seen}");
    assert!(seen["tools"].as_array().is_some_and(|t| t.contains(&json!(ECHO_MCP))), "{seen}");
    assert_eq!(server.last_request()["context"]["user_id"], "mcp-sdk-client", "the SDK's token identified it");

    // Its path: a 401 naming the metadata, the metadata from that URL, the
    // authorization server's metadata, a token, then /mcp again.
    let requests = seen["requests"].as_array().expect("requests");
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", gw.url());
    let first = &requests[0];
    assert_eq!((first["method"].as_str(), first["status"].as_u64()), (Some("POST"), Some(401)), "{seen}");
    let challenge = first["www_authenticate"].as_str().expect("a challenge");
    assert_eq!(challenge, format!("Bearer resource_metadata=\"{metadata_url}\""));
    assert_eq!(requests[1]["url"], metadata_url, "{seen}");
    assert_eq!(requests[1]["status"], 200, "{seen}");
    assert!(requests.iter().any(|r| r["url"] == format!("{issuer}/.well-known/oauth-authorization-server")), "{seen}");
    let token_requests = seen["token_requests"].as_array().expect("token requests");
    assert_eq!(token_requests.len(), 1, "{seen}");
    assert_eq!(token_requests[0]["resource"], resource(&gw), "RFC 8707: the token is asked for this resource");
    assert_eq!(token_requests[0]["grant_type"], "client_credentials");
    let after: Vec<&Value> = requests.iter().skip_while(|r| r["status"] != 401).skip(1).collect();
    assert!(
        after.iter().any(|r| r["url"] == resource(&gw) && r["status"] == 200),
        "/mcp answered once the token came: {seen}"
    );
}
