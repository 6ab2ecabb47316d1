//! Secrets and authorization end to end: what the tool server receives in
//! `context`, what a client gets when something is missing, and that no
//! secret ever shows up in the gateway's output. Vault is a real OpenBao
//! (`common::openbao`), which the outage tests seal.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::openbao::OpenBao;
use common::{echo, jwt, needing, send_with_headers, temp_file, tool, wait_until, Gateway, Resp, ToolServer};
use serde_json::{json, Value};

const JWT_SECRET: &str = "jwt-signing-secret-7f3a9c";

async fn tool_server(tools: Vec<Value>) -> ToolServer {
    let server = ToolServer::start(common::catalog(tools)).await;
    server.on_call(echo);
    server
}

fn config(upstream_url: &str, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"tools\"\nurl = \"{upstream_url}\"\nsecrets = [\"*\"]\nauthorization = [\"*\"]\n\n{extra}"
    )
}

/// A token for `sub`, for audience `otc-gateway`, with `extra` claims.
fn user_token(sub: &str, extra: Value) -> String {
    jwt::hs256(&jwt::claims(sub, jwt::merged(json!({"aud": "otc-gateway"}), extra)), JWT_SECRET.as_bytes())
}

async fn call_as(gw: &Gateway, token: Option<&str>, tool_id: &str, request_extra: Value) -> Resp {
    let mut request = json!({"tool_id": tool_id, "input": {}});
    if let (Value::Object(r), Value::Object(e)) = (&mut request, request_extra) {
        r.extend(e);
    }
    let body = Bytes::from(json!({"request": request}).to_string());
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = vec![("content-type", "application/json")];
    if let Some(auth) = auth.as_deref() {
        headers.push(("authorization", auth));
    }
    send_with_headers(gw.addr, "POST", "/tools/call", body, &headers).await
}

fn context_of(server: &ToolServer) -> Value {
    server.last_request()["context"].clone()
}

fn secret_value(context: &Value, id: &str) -> Option<String> {
    context["secrets"].as_array()?.iter().find(|s| s["id"] == id)?["value"].as_str().map(str::to_owned)
}

#[tokio::test]
async fn secrets_come_from_env_file_and_vault_and_replace_what_the_client_sent() {
    let server = tool_server(vec![
        needing("Sms.Send", json!({"secrets": [{"id": "TWILIO_API_KEY"}]})),
        needing("Mail.Send", json!({"secrets": [{"id": "SENDGRID_KEY"}]})),
        needing("Db.Query", json!({"secrets": [{"id": "DB_PASSWORD"}]})),
    ])
    .await;
    let vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": "twilio-from-vault-91ab"})).await;
    let vault_token = vault.gateway_token().await;
    let file = temp_file("sendgrid", "key", "sendgrid-from-file-55cd\n");
    let toml = config(
        &server.url(),
        &format!(
            "[vault]\naddress = \"{}\"\ntoken = \"env:TEST_VAULT_TOKEN\"\ncache_ttl = \"60s\"\n\n\
             [secrets]\nTWILIO_API_KEY = \"vault:secret/tools/twilio#api_key\"\n\
             SENDGRID_KEY = \"file:{}\"\nDB_PASSWORD = \"env:TEST_DB_PASSWORD\"\n",
            vault.url(),
            file.display()
        ),
    );
    let gw = Gateway::start_with_env(
        &toml,
        &[("TEST_VAULT_TOKEN", vault_token.as_str()), ("TEST_DB_PASSWORD", "db-from-env-77ef")],
    )
    .await;
    gw.wait_for_tool("Db.Query@1.0.0").await;

    let resp = call_as(
        &gw,
        None,
        "Sms.Send@1.0.0",
        json!({"context": {"secrets": [{"id": "TWILIO_API_KEY", "value": "client-forged"}]}}),
    )
    .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let context = context_of(&server);
    assert_eq!(secret_value(&context, "TWILIO_API_KEY").as_deref(), Some("twilio-from-vault-91ab"));
    assert_eq!(context["secrets"].as_array().map(Vec::len), Some(1), "the client's value is replaced, not added");

    call_as(&gw, None, "Mail.Send@1.0.0", json!({})).await.expect_status(200);
    assert_eq!(secret_value(&context_of(&server), "SENDGRID_KEY").as_deref(), Some("sendgrid-from-file-55cd"));
    call_as(&gw, None, "Db.Query@1.0.0", json!({})).await.expect_status(200);
    assert_eq!(secret_value(&context_of(&server), "DB_PASSWORD").as_deref(), Some("db-from-env-77ef"));

    // Within cache_ttl the vault is not asked again.
    let asked = vault.requests_by(&vault_token).await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    call_as(&gw, None, "Sms.Send@1.0.0", json!({})).await.expect_status(200);
    assert_eq!(vault.requests_by(&vault_token).await, asked, "a cached value costs no vault request");
}

#[tokio::test]
async fn a_vault_outage_serves_cached_values_and_fails_fast_for_values_never_fetched() {
    let server = tool_server(vec![
        needing("Sms.Send", json!({"secrets": [{"id": "TWILIO_API_KEY"}]})),
        needing("Maps.Find", json!({"secrets": [{"id": "MAPS_KEY"}]})),
    ])
    .await;
    let vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": "twilio-cached-3c"})).await;
    vault.put("secret/tools/maps", json!({"key": "maps-never-fetched-8d"})).await;
    let vault_token = vault.gateway_token().await;
    let toml = config(
        &server.url(),
        &format!(
            "[vault]\naddress = \"{}\"\ntoken = \"env:TEST_VAULT_TOKEN\"\ncache_ttl = \"100ms\"\ntimeout = \"500ms\"\n\n\
             [secrets]\nTWILIO_API_KEY = \"vault:secret/tools/twilio#api_key\"\nMAPS_KEY = \"vault:secret/tools/maps#key\"\n",
            vault.url()
        ),
    );
    let gw = Gateway::start_with_env(&toml, &[("TEST_VAULT_TOKEN", vault_token.as_str())]).await;
    gw.wait_for_tool("Maps.Find@1.0.0").await;
    call_as(&gw, None, "Sms.Send@1.0.0", json!({})).await.expect_status(200);

    vault.seal().await;
    tokio::time::sleep(Duration::from_millis(200)).await; // past cache_ttl
    call_as(&gw, None, "Sms.Send@1.0.0", json!({})).await.expect_status(200);
    assert_eq!(secret_value(&context_of(&server), "TWILIO_API_KEY").as_deref(), Some("twilio-cached-3c"));

    let calls_before = server.call_count();
    let started = Instant::now();
    let resp = call_as(&gw, None, "Maps.Find@1.0.0", json!({})).await;
    let body = resp.server_error(400);
    assert!(body["message"].as_str().unwrap().contains("MAPS_KEY"), "names the requirement: {body}");
    assert!(started.elapsed() < Duration::from_secs(5), "no hang");
    assert_eq!(server.call_count(), calls_before, "the tool is not called");

    let metrics = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    assert!(metrics.contains("otc_gateway_vault_stale_served_total{backend=\"vault\"}"), "{metrics}");
}

#[tokio::test]
async fn unmet_requirements_are_400s_that_name_them_and_never_reach_the_tool() {
    let server = tool_server(vec![
        needing("Sms.Send", json!({"secrets": [{"id": "UNCONFIGURED_KEY"}]})),
        needing("Who.Am", json!({"user_id": true})),
    ])
    .await;
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Who.Am@1.0.0").await;

    let body = call_as(&gw, None, "Sms.Send@1.0.0", json!({})).await.server_error(400);
    assert!(body["message"].as_str().unwrap().contains("UNCONFIGURED_KEY"), "{body}");
    assert_eq!(body["missing_requirements"]["secrets"][0]["id"], "UNCONFIGURED_KEY");
    let body = call_as(&gw, None, "Who.Am@1.0.0", json!({})).await.server_error(400);
    assert_eq!(body["missing_requirements"]["user_id"], json!(true), "{body}");
    assert_eq!(server.call_count(), 0);

    // What the gateway does not manage passes through from the client.
    let resp = call_as(
        &gw,
        None,
        "Sms.Send@1.0.0",
        json!({"context": {"secrets": [{"id": "UNCONFIGURED_KEY", "value": "client-own"}]}}),
    )
    .await;
    resp.expect_status(200);
    assert_eq!(secret_value(&context_of(&server), "UNCONFIGURED_KEY").as_deref(), Some("client-own"));
}

#[tokio::test]
async fn per_user_tokens_come_from_the_vault_for_the_authenticated_user_only() {
    let server =
        tool_server(vec![needing("Gmail.Read", json!({"authorization": [{"id": "google"}], "user_id": true}))]).await;
    let vault = OpenBao::start().await;
    vault.put("secret/oauth/google/alice", json!({"access_token": "ya29.alice-token-e4"})).await;
    let vault_token = vault.gateway_token().await;
    let toml = config(
        &server.url(),
        &format!(
            "[vault]\naddress = \"{}\"\ntoken = \"env:TEST_VAULT_TOKEN\"\n\n\
             [authorization.google]\ntoken = \"vault:secret/oauth/google/{{user_id}}#access_token\"\n\
             authorize_url = \"https://auth.example.com/google?user={{user_id}}\"\n\n\
             [auth]\nmode = \"jwt\"\nhs256_secret = \"env:TEST_JWT_SECRET\"\naudience = \"otc-gateway\"\n",
            vault.url()
        ),
    );
    let gw =
        Gateway::start_with_env(&toml, &[("TEST_VAULT_TOKEN", vault_token.as_str()), ("TEST_JWT_SECRET", JWT_SECRET)])
            .await;
    let alice = user_token("alice", json!({}));
    wait_until("Gmail.Read is callable", async || {
        call_as(&gw, Some(&alice), "Gmail.Read@1.0.0", json!({})).await.status == 200
    })
    .await;
    let resp = call_as(&gw, Some(&alice), "Gmail.Read@1.0.0", json!({"context": {"user_id": "mallory"}})).await;
    resp.expect_status(200);
    let context = context_of(&server);
    assert_eq!(context["user_id"], "alice", "the client cannot claim another user");
    assert_eq!(context["authorization"][0], json!({"id": "google", "token": "ya29.alice-token-e4"}));

    let calls = server.call_count();
    let body = call_as(&gw, Some(&user_token("bob", json!({}))), "Gmail.Read@1.0.0", json!({})).await.server_error(400);
    assert!(body["message"].as_str().unwrap().contains("google"), "{body}");
    assert_eq!(body["missing_requirements"]["authorization"][0]["id"], "google");
    assert_eq!(body["missing_requirements"]["authorization"][0]["url"], "https://auth.example.com/google?user=bob");
    assert_eq!(server.call_count(), calls, "bob's call never reaches the tool");
    let reads = vault.reads_by(&vault_token).await;
    assert!(
        reads.iter().all(|p| p == "secret/data/oauth/google/alice" || p == "secret/data/oauth/google/bob"),
        "{reads:?}"
    );
    assert!(!reads.iter().any(|p| p.ends_with("/mallory")), "a claimed user id is never looked up: {reads:?}");
}

#[tokio::test]
async fn jwt_mode_refuses_bad_credentials_with_401_and_keeps_health_open() {
    let server = tool_server(vec![tool("Calc.Echo", "1.0.0", json!({"type": "object"}))]).await;
    let toml = config(
        &server.url(),
        "[auth]\nmode = \"jwt\"\nhs256_secret = \"env:TEST_JWT_SECRET\"\nissuer = \"https://auth.example.com\"\naudience = \"otc-gateway\"\n\
         api_keys = [{ key = \"env:TEST_SVC_KEY\", user_id = \"svc-reports\" }]\n",
    );
    let gw =
        Gateway::start_with_env(&toml, &[("TEST_JWT_SECRET", JWT_SECRET), ("TEST_SVC_KEY", "svc-key-0a9b8c")]).await;
    assert_eq!(gw.get("/health").await.status, 200, "/health needs no credentials");
    assert_eq!(gw.get("/tools").await.status, 401, "/tools does");

    let good = user_token("carol", json!({"iss": "https://auth.example.com"}));
    wait_until("a good token gets through", async || {
        call_as(&gw, Some(&good), "Calc.Echo@1.0.0", json!({})).await.status == 200
    })
    .await;
    assert_eq!(context_of(&server)["user_id"], "carol");

    let carol = |extra: Value| {
        jwt::claims("carol", jwt::merged(json!({"iss": "https://auth.example.com", "aud": "otc-gateway"}), extra))
    };
    let expired = jwt::hs256(&carol(json!({"exp": jwt::now() - 3600})), JWT_SECRET.as_bytes());
    let wrong_key = jwt::hs256(&carol(json!({})), b"another-secret");
    let wrong_aud = user_token("carol", json!({"iss": "https://auth.example.com", "aud": "someone-else"}));
    let wrong_iss = user_token("carol", json!({"iss": "https://evil.example.com"}));
    let alg_none = jwt::unsigned("none", &carol(json!({"iss": null})));
    let calls = server.call_count();
    for (what, token) in [
        ("missing", None),
        ("expired", Some(expired.as_str())),
        ("wrong key", Some(wrong_key.as_str())),
        ("wrong audience", Some(wrong_aud.as_str())),
        ("wrong issuer", Some(wrong_iss.as_str())),
        ("alg none", Some(alg_none.as_str())),
        ("garbage", Some("not.a.jwt")),
    ] {
        let resp = call_as(&gw, token, "Calc.Echo@1.0.0", json!({})).await;
        assert_eq!(resp.status, 401, "{what}: {}", resp.text());
        assert!(resp.header("www-authenticate").is_some_and(|h| h.starts_with("Bearer")), "{what}");
        assert!(resp.json()["message"].is_string(), "{what}");
    }
    assert_eq!(server.call_count(), calls, "no refused call reaches the tool");

    // Service clients: an API key as Bearer or OXP-API-Key.
    call_as(&gw, Some("svc-key-0a9b8c"), "Calc.Echo@1.0.0", json!({})).await.expect_status(200);
    assert_eq!(context_of(&server)["user_id"], "svc-reports");
    let body = Bytes::from(json!({"request": {"tool_id": "Calc.Echo@1.0.0"}}).to_string());
    let resp = send_with_headers(gw.addr, "POST", "/tools/call", body, &[("oxp-api-key", "svc-key-0a9b8c")]).await;
    resp.expect_status(200);
}

#[tokio::test]
async fn upstream_bearer_tokens_go_on_fetches_and_calls_and_client_authorization_never_does() {
    let server = tool_server(vec![tool("Calc.Echo", "1.0.0", json!({"type": "object"}))]).await;
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"tools\"\nurl = \"{}\"\nbearer_token = \"env:TEST_UPSTREAM_TOKEN\"\n",
        server.url()
    );
    let gw = Gateway::start_with_env(&toml, &[("TEST_UPSTREAM_TOKEN", "upstream-token-5e6f")]).await;
    gw.wait_for_tool("Calc.Echo@1.0.0").await;
    let fetch = server.catalog_fetches().pop().expect("a catalog fetch");
    assert_eq!(fetch.headers.get("authorization").map(String::as_str), Some("Bearer upstream-token-5e6f"));
    call_as(&gw, Some("client-token-should-stay-here"), "Calc.Echo@1.0.0", json!({})).await.expect_status(200);
    let call = server.requests().into_iter().rfind(|r| r.method == "POST").expect("a call");
    assert_eq!(call.headers.get("authorization").map(String::as_str), Some("Bearer upstream-token-5e6f"));
    assert!(!format!("{:?}", server.requests()).contains("client-token-should-stay-here"));
}

#[tokio::test]
async fn no_secret_or_token_appears_in_logs_errors_status_or_metrics() {
    let server = tool_server(vec![
        needing("Sms.Send", json!({"secrets": [{"id": "TWILIO_API_KEY"}, {"id": "FILE_KEY"}, {"id": "ENV_KEY"}]})),
        needing("Gmail.Read", json!({"authorization": [{"id": "google"}]})),
    ])
    .await;
    let vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": "leak-canary-vault-1"})).await;
    vault.put("secret/oauth/google/dave", json!({"access_token": "leak-canary-oauth-2"})).await;
    let vault_token = vault.gateway_token().await;
    let file = temp_file("filekey", "key", "leak-canary-file-3\n");
    let toml = config(
        &server.url(),
        &format!(
            "[vault]\naddress = \"{}\"\ntoken = \"env:TEST_VAULT_TOKEN\"\n\n\
             [secrets]\nTWILIO_API_KEY = \"vault:secret/tools/twilio#api_key\"\nFILE_KEY = \"file:{}\"\nENV_KEY = \"env:TEST_ENV_KEY\"\n\n\
             [authorization.google]\ntoken = \"vault:secret/oauth/google/{{user_id}}#access_token\"\n\n\
             [auth]\nmode = \"jwt\"\nhs256_secret = \"env:TEST_JWT_SECRET\"\naudience = \"otc-gateway\"\n\
             api_keys = [{{ key = \"env:TEST_SVC_KEY\", user_id = \"svc\" }}]\n",
            vault.url(),
            file.display()
        ),
    );
    let env = [
        ("TEST_VAULT_TOKEN", vault_token.as_str()),
        ("TEST_ENV_KEY", "leak-canary-env-4"),
        ("TEST_JWT_SECRET", JWT_SECRET),
        ("TEST_SVC_KEY", "leak-canary-apikey-5"),
        ("RUST_LOG", "trace"),
    ];
    let gw = Gateway::start_with_env(&toml, &env).await;
    let dave = user_token("dave", json!({}));
    wait_until("Sms.Send is callable", async || {
        call_as(&gw, Some(&dave), "Sms.Send@1.0.0", json!({})).await.status == 200
    })
    .await;
    let mut bodies = Vec::new();
    bodies.push(call_as(&gw, Some(&dave), "Gmail.Read@1.0.0", json!({})).await.text());
    bodies.push(call_as(&gw, Some("leak-canary-apikey-5"), "Gmail.Read@1.0.0", json!({})).await.text());
    bodies.push(call_as(&gw, Some("leak-canary-bad-token-6"), "Sms.Send@1.0.0", json!({})).await.text());
    bodies.push(call_as(&gw, Some(&user_token("eve", json!({}))), "Gmail.Read@1.0.0", json!({})).await.text());
    vault.seal().await;
    bodies.push(call_as(&gw, Some(&user_token("frank", json!({}))), "Gmail.Read@1.0.0", json!({})).await.text());
    bodies.push(common::send(gw.admin, "GET", "/status", Bytes::new(), None).await.text());
    bodies.push(common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text());
    // The tool did get the values: the canaries are real.
    assert_eq!(
        secret_value(&server.calls().iter().map(common::forwarded).next().expect("a call")["context"], "ENV_KEY")
            .as_deref(),
        Some("leak-canary-env-4")
    );
    tokio::time::sleep(Duration::from_millis(300)).await; // let the log writer flush
    let logs = gw.logs();
    assert!(logs.contains("TRACE") || logs.contains("DEBUG"), "the gateway logged at trace level");
    for canary in ["leak-canary-", vault_token.as_str(), JWT_SECRET, dave.as_str()] {
        if let Some(line) = logs.lines().find(|l| l.contains(canary)) {
            panic!("{canary} leaked into the logs: {line}");
        }
        for body in &bodies {
            assert!(!body.contains(canary), "{canary} leaked into a response: {body}");
        }
    }
}
