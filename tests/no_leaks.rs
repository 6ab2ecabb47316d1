//! Nothing leaked: the real gateway runs at `RUST_LOG=trace` while it injects
//! secrets from env, file and vault, a per-user OAuth token and upstream
//! bearer tokens, refuses real-looking bad credentials, and fails to reach a
//! sealed, hung and token-rejecting vault (a real OpenBao, `common::openbao`).
//! Then none of the secret
//! values, the vault token, the JWT secret, the API keys or the clients'
//! tokens may appear in anything the gateway wrote (stdout and stderr), in any
//! response body it gave a client, in the admin `/status` and `/metrics`, or
//! (for the clients' credentials) in what the upstreams received.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::jwt::{self, hs256};
use common::openbao::OpenBao;
use common::otlp::Receiver;
use common::{echo, needing, send_with_headers, temp_file, tool, wait_until, Gateway, GatewayConfig, Resp, ToolServer};
use serde_json::{json, Value};

// The gateway's secrets.
const JWT_SECRET: &str = "leak-canary-jwt-hs256-secret-0b0b0b0b";
const VAULT_TWILIO: &str = "AC-leak-canary-vault-twilio-8f2a";
const FILE_KEY: &str = "leak-canary-file-key-51c9";
const ENV_KEY: &str = "leak-canary-env-key-0d3e";
const ALICE_OAUTH: &str = "ya29.leak-canary-alice-oauth-77b1";
const BEARER_ENV: &str = "leak-canary-upstream-bearer-env-2a2a";
const BEARER_VAULT: &str = "leak-canary-upstream-bearer-vault-4c4c";
const NEVER_FETCHED: &str = "leak-canary-never-fetched-9999";
const API_KEY_ENV: &str = "ak_live_leak-canary-env-key-1f1f";
const API_KEY_FILE: &str = "ak_live_leak-canary-file-key-2e2e";
// The clients' own bad credentials.
const WRONG_API_KEY: &str = "sk_live_leak-canary-wrong-key-3d3d";
const GARBAGE_TOKEN: &str = "ghp_leakcanarygarbagetoken5a5a5a5a5a5a";
const BASIC_CREDS: &str = "YWxpY2U6bGVhay1jYW5hcnktcGFzc3dvcmQ="; // alice:leak-canary-password

fn claims(sub: &str, exp: u64) -> Value {
    jwt::claims(sub, json!({"iss": "https://auth.example.com", "aud": "otc-gateway", "exp": exp}))
}

async fn call(gw: &Gateway, headers: &[(&str, &str)], tool_id: &str) -> Resp {
    let body =
        Bytes::from(json!({"$schema": "otc://1.0", "request": {"tool_id": tool_id, "input": {"n": 1}}}).to_string());
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send_with_headers(gw.addr, "POST", "/tools/call", body, &all).await
}

/// Every place a canary was found: `(where, canary, the surrounding text)`.
fn leaks(place: &str, text: &str, canaries: &[(String, String)]) -> Vec<String> {
    let mut found = Vec::new();
    for (name, canary) in canaries {
        if let Some(at) = text.find(canary.as_str()) {
            let start = text[..at].char_indices().rev().nth(120).map_or(0, |(i, _)| i);
            let end = (at + canary.len() + 120).min(text.len());
            let end = (end..=text.len()).find(|&i| text.is_char_boundary(i)).unwrap_or(text.len());
            found.push(format!("{name} leaked into {place}: …{}…", text[start..end].replace('\n', " ⏎ ")));
        }
    }
    found
}

#[tokio::test]
async fn no_secret_or_token_appears_in_output_responses_status_or_metrics() {
    // --- the upstreams, the vault, the files ------------------------------
    let tools = ToolServer::start(common::catalog(vec![
        needing("Sms.Send", json!({"secrets": [{"id": "TWILIO_API_KEY"}, {"id": "FILE_KEY"}, {"id": "ENV_KEY"}]})),
        needing("Gmail.Read", json!({"authorization": [{"id": "google"}], "user_id": true})),
        needing("Never.Fetched", json!({"secrets": [{"id": "NEVER_FETCHED"}]})),
    ]))
    .await;
    tools.on_call(echo);
    let mail = ToolServer::start(common::catalog(vec![tool("Mail.Send", "1.0.0", json!({"type": "object"}))])).await;
    mail.on_call(echo);

    let vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": VAULT_TWILIO})).await;
    vault.put("secret/tools/never", json!({"key": NEVER_FETCHED})).await;
    vault.put("secret/oauth/google/alice", json!({"access_token": ALICE_OAUTH})).await;
    vault.put("secret/upstreams/mail", json!({"token": BEARER_VAULT})).await;
    // The gateway's vault token: issued by the vault, so random.
    let vault_token = vault.gateway_token().await;
    let file_key = temp_file("leak-file-key", "txt", &format!("{FILE_KEY}\n"));
    let api_key_file = temp_file("leak-api-key", "txt", &format!("{API_KEY_FILE}\n"));

    let toml = GatewayConfig::new()
        .upstream_with(
            "tools",
            &tools.url(),
            "bearer_token = \"env:NL_UPSTREAM_TOKEN\"\nsecrets = [\"*\"]\nauthorization = [\"google\"]",
        )
        .upstream_with("mail", &mail.url(), "bearer_token = \"vault:secret/upstreams/mail#token\"")
        .raw(&format!(
            "[vault]\naddress = \"{}\"\ntoken = \"env:NL_VAULT_TOKEN\"\ncache_ttl = \"60s\"\ntimeout = \"1s\"\n\n\
             [secrets]\nTWILIO_API_KEY = \"vault:secret/tools/twilio#api_key\"\nFILE_KEY = \"file:{}\"\n\
             ENV_KEY = \"env:NL_ENV_KEY\"\nNEVER_FETCHED = \"vault:secret/tools/never#key\"\n\n\
             [authorization.google]\ntoken = \"vault:secret/oauth/google/{{user_id}}#access_token\"\n\
             authorize_url = \"https://auth.example.com/google/start?user={{user_id}}\"\n\n\
             [auth]\nmode = \"jwt\"\nhs256_secret = \"env:NL_JWT_SECRET\"\nissuer = \"https://auth.example.com\"\n\
             audience = \"otc-gateway\"\napi_keys = [\n  {{ key = \"env:NL_API_KEY\", user_id = \"svc-env\" }},\n  \
             {{ key = \"file:{}\", user_id = \"svc-file\" }},\n]\n",
            vault.url(),
            file_key.display(),
            api_key_file.display()
        ))
        .toml();
    let gw = Gateway::start_with_env(
        &toml,
        &[
            ("RUST_LOG", "trace"),
            ("NL_VAULT_TOKEN", vault_token.as_str()),
            ("NL_JWT_SECRET", JWT_SECRET),
            ("NL_ENV_KEY", ENV_KEY),
            ("NL_UPSTREAM_TOKEN", BEARER_ENV),
            ("NL_API_KEY", API_KEY_ENV),
        ],
    )
    .await;

    // --- the clients' tokens -----------------------------------------------
    let now = jwt::now();
    let alice = hs256(&claims("alice", now + 600), JWT_SECRET.as_bytes());
    let bob = hs256(&claims("bob", now + 600), JWT_SECRET.as_bytes());
    let expired = hs256(&claims("alice", now - 3600), JWT_SECRET.as_bytes());
    let wrong_key = hs256(&claims("alice", now + 600), b"leak-canary-attacker-secret-7e7e7e7e");
    let alg_none = jwt::unsigned("none", &claims("mallory-leak-canary", now + 600));
    let (alice_auth, bob_auth) = (format!("Bearer {alice}"), format!("Bearer {bob}"));

    // Wait until both catalogs are in (GET /tools needs a token).
    let listing = wait_until("both catalogs are loaded", async || {
        let resp = send_with_headers(gw.addr, "GET", "/tools", Bytes::new(), &[("authorization", &alice_auth)]).await;
        let text = resp.text();
        if resp.status == 200 && text.contains("Mail.Send@1.0.0") && text.contains("Never.Fetched@1.0.0") {
            Ok(text)
        } else {
            Err(format!("{} {text}", resp.status))
        }
    })
    .await;
    let mut bodies: Vec<(String, String)> = vec![("GET /tools".into(), listing)];

    let mut record = |what: &str, resp: Resp, status: u16| {
        assert_eq!(resp.status, status, "{what}: {}", resp.text());
        if status == 401 {
            assert!(resp.header("www-authenticate").is_some_and(|h| h.starts_with("Bearer")), "{what}");
        }
        let headers = format!("{:?}", resp.headers);
        bodies.push((format!("{what} (headers)"), headers));
        bodies.push((what.to_owned(), resp.text()));
    };

    // --- successful injections -------------------------------------------
    record("alice's Sms.Send", call(&gw, &[("authorization", &alice_auth)], "Sms.Send@1.0.0").await, 200);
    let ctx = tools.last_request()["context"].clone();
    let injected: Vec<&str> =
        ctx["secrets"].as_array().expect("secrets").iter().filter_map(|s| s["value"].as_str()).collect();
    for value in [VAULT_TWILIO, FILE_KEY, ENV_KEY] {
        assert!(injected.contains(&value), "the canaries are real: {value} was injected ({ctx})");
    }
    record("alice's Gmail.Read", call(&gw, &[("authorization", &alice_auth)], "Gmail.Read@1.0.0").await, 200);
    assert_eq!(tools.last_request()["context"]["authorization"][0]["token"], ALICE_OAUTH);
    let key_auth = format!("Bearer {API_KEY_ENV}");
    record(
        "Sms.Send with an API key as Bearer",
        call(&gw, &[("authorization", &key_auth)], "Sms.Send@1.0.0").await,
        200,
    );
    record("Mail.Send with OXP-API-Key", call(&gw, &[("oxp-api-key", API_KEY_FILE)], "Mail.Send@1.0.0").await, 200);
    let mail_call = mail.requests().into_iter().rfind(|r| r.method == "POST").expect("Mail.Send reached mail");
    assert_eq!(
        mail_call.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {BEARER_VAULT}").as_str())
    );
    let tools_call = tools.requests().into_iter().rfind(|r| r.method == "POST").expect("a call reached tools");
    assert_eq!(
        tools_call.headers.get("authorization").map(String::as_str),
        Some(format!("Bearer {BEARER_ENV}").as_str())
    );

    // --- refusals ----------------------------------------------------------
    record(
        "bob's Gmail.Read (no stored token)",
        call(&gw, &[("authorization", &bob_auth)], "Gmail.Read@1.0.0").await,
        400,
    );
    let bad: Vec<(&str, String, String)> = vec![
        ("expired JWT", "authorization".into(), format!("Bearer {expired}")),
        ("JWT signed with the wrong key", "authorization".into(), format!("Bearer {wrong_key}")),
        ("alg none JWT", "authorization".into(), format!("Bearer {alg_none}")),
        ("wrong API key as Bearer", "authorization".into(), format!("Bearer {WRONG_API_KEY}")),
        ("wrong OXP-API-Key", "oxp-api-key".into(), WRONG_API_KEY.to_owned()),
        ("garbage bearer", "authorization".into(), format!("Bearer {GARBAGE_TOKEN}")),
        ("Basic credentials", "authorization".into(), format!("Basic {BASIC_CREDS}")),
    ];
    for (what, header, value) in &bad {
        record(what, call(&gw, &[(header.as_str(), value.as_str())], "Sms.Send@1.0.0").await, 401);
        let resp =
            send_with_headers(gw.addr, "GET", "/tools", Bytes::new(), &[(header.as_str(), value.as_str())]).await;
        record(&format!("GET /tools, {what}"), resp, 401);
    }

    // --- a failing vault: sealed, hung, rejecting the token ----------------
    vault.seal().await;
    record(
        "Never.Fetched, vault sealed",
        call(&gw, &[("authorization", &alice_auth)], "Never.Fetched@1.0.0").await,
        400,
    );
    record(
        "Sms.Send, vault sealed (cached)",
        call(&gw, &[("authorization", &alice_auth)], "Sms.Send@1.0.0").await,
        200,
    );
    vault.unseal().await;
    vault.freeze();
    record("Never.Fetched, vault hung", call(&gw, &[("authorization", &alice_auth)], "Never.Fetched@1.0.0").await, 400);
    vault.thaw();
    vault.revoke_token(&vault_token).await;
    record(
        "Never.Fetched, vault token rejected",
        call(&gw, &[("authorization", &alice_auth)], "Never.Fetched@1.0.0").await,
        400,
    );
    let carol = format!("Bearer {}", hs256(&claims("carol", now + 600), JWT_SECRET.as_bytes()));
    let resp = call(&gw, &[("authorization", &carol)], "Gmail.Read@1.0.0").await;
    assert_eq!(resp.status, 400, "carol, vault token rejected: {}", resp.text());
    bodies.push(("carol's Gmail.Read, vault token rejected".into(), resp.text()));
    assert_eq!(tools.calls().iter().filter(|c| c["request"]["tool_id"] == "Never.Fetched@1.0.0").count(), 0);

    // --- admin ---------------------------------------------------------------
    let status = common::send(gw.admin, "GET", "/status", Bytes::new(), None).await;
    assert_eq!(status.status, 200, "/status: {}", status.text());
    bodies.push(("/status".into(), status.text()));
    let metrics = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await;
    if metrics.status == 404 {
        eprintln!("note: the admin listener has no /metrics yet (404)");
    } else {
        assert_eq!(metrics.status, 200, "/metrics: {}", metrics.text());
        assert!(metrics.text().contains("otc_gateway_"), "a real metrics page: {}", metrics.text());
    }
    bodies.push(("/metrics".into(), metrics.text()));
    bodies.push(("/health".into(), gw.get("/health").await.text()));

    // --- stop the gateway so every buffered log line is written ------------
    let mut gw = gw;
    gw.signal("TERM");
    let exited = gw.wait_exit(Duration::from_secs(15)).await;
    assert!(exited.is_some(), "the gateway did not exit on SIGTERM");
    gw.wait_stdout_closed().await;
    let stderr = gw.logs();
    let stdout = gw.stdout();
    assert!(stderr.contains("TRACE") || stderr.contains("DEBUG"), "the gateway logged at trace level:\n{stderr}");
    assert!(stderr.lines().count() > 50, "a trace-level run writes plenty: {} lines", stderr.lines().count());
    assert!(stdout.contains("otc-gateway listening on "), "stdout was captured: {stdout:?}");

    // --- the search ------------------------------------------------------------
    let mut canaries: Vec<(String, String)> = [
        ("the vault token", vault_token.as_str()),
        ("the JWT secret", JWT_SECRET),
        ("the vault secret", VAULT_TWILIO),
        ("the file secret", FILE_KEY),
        ("the env secret", ENV_KEY),
        ("alice's OAuth token", ALICE_OAUTH),
        ("the env bearer_token", BEARER_ENV),
        ("the vault bearer_token", BEARER_VAULT),
        ("the never-fetched secret", NEVER_FETCHED),
        ("the env API key", API_KEY_ENV),
        ("the file API key", API_KEY_FILE),
        ("a wrong API key", WRONG_API_KEY),
        ("a garbage bearer token", GARBAGE_TOKEN),
        ("Basic credentials", BASIC_CREDS),
        ("alice's JWT", alice.as_str()),
        ("bob's JWT", bob.as_str()),
        ("an expired JWT", expired.as_str()),
        ("a wrong-key JWT", wrong_key.as_str()),
        ("an alg-none JWT", alg_none.as_str()),
    ]
    .into_iter()
    .map(|(n, c)| (n.to_owned(), c.to_owned()))
    .collect();
    // A signature is as good as the token (header and payload are public).
    for (name, token) in
        [("alice's", &alice), ("bob's", &bob), ("the expired", &expired), ("the wrong-key", &wrong_key)]
    {
        let signature = token.rsplit('.').next().expect("a signature").to_owned();
        canaries.push((format!("{name} JWT signature"), signature));
    }

    let mut found = Vec::new();
    found.extend(leaks("the gateway's stderr", &stderr, &canaries));
    found.extend(leaks("the gateway's stdout", &stdout, &canaries));
    for (what, body) in &bodies {
        found.extend(leaks(&format!("the response to {what}"), body, &canaries));
    }
    // The upstreams get their own bearer_token and injected values, never a
    // client's credentials.
    let client_only: Vec<(String, String)> = canaries
        .iter()
        .filter(|(name, _)| {
            name.contains("JWT") || name.contains("API key") || name.contains("garbage") || name.contains("Basic")
        })
        .cloned()
        .collect();
    for server in [("tools", &tools), ("mail", &mail)] {
        let seen = format!("{:?}\n{}", server.1.requests(), Value::Array(server.1.calls()));
        found.extend(leaks(&format!("what upstream {} received", server.0), &seen, &client_only));
    }
    assert!(found.is_empty(), "{} leak(s):\n{}", found.len(), found.join("\n"));

    let _ = std::fs::remove_file(file_key);
    let _ = std::fs::remove_file(api_key_file);
}

/// The gateway as an OAuth client (`[authorization.P]` managed): at trace
/// level, through a whole flow against a real provider, a refresh, a refused
/// link, a forged callback and a disconnect, the access and refresh tokens,
/// the authorization code and the
/// client secret appear nowhere the gateway writes or answers (its spans,
/// every request recorded, included), and in no upstream but as the
/// injected token.
/// An MCP upstream's bearer token with what encoders escape (a slash, a
/// plus, a quote).
const MCP_BEARER: &str = "leak-canary/mcp-bearer+\"6b6b";

/// A stand-in MCP server that refuses every request with 401, repeating
/// the `Authorization` it was sent JSON-escaped, percent-encoded and
/// `\u`-escaped: at `/json` in a JSON-RPC error (its message and data), at
/// `/text` in a text body, across the 200th character, where the gateway
/// cuts one.
/// A stand-in because a real server (the Python SDK) cannot be made to
/// echo a credential in its protocol errors, which is the fault injected.
async fn echoing_mcp() -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    use http_body_util::{BodyExt, Full};
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let serve = async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let answer = service_fn(|request: hyper::Request<hyper::body::Incoming>| async move {
                    let path = request.uri().path().to_owned();
                    let sent = request.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
                    let json_escaped = sent.replace('\\', "\\\\").replace('"', "\\\"").replace('/', "\\/");
                    let encoded =
                        percent_encoding::utf8_percent_encode(sent, percent_encoding::NON_ALPHANUMERIC).to_string();
                    let unicode: String = sent.encode_utf16().map(|u| format!("\\u{u:04x}")).collect();
                    let body = request.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                    let id = serde_json::from_slice::<Value>(&body).ok().map_or(Value::Null, |v| v["id"].clone());
                    let text = if path == "/json" {
                        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32001,
                            "message": format!("not accepted: {json_escaped} {encoded}"),
                            "data": {"sent": unicode}}})
                        .to_string()
                    } else {
                        format!("{} not accepted: {json_escaped}", "x".repeat(165))
                    };
                    let response = hyper::Response::builder()
                        .status(401)
                        .header("content-type", if path == "/json" { "application/json" } else { "text/plain" })
                        .body(Full::new(Bytes::from(text)));
                    Ok::<_, std::convert::Infallible>(response.expect("a response"))
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), answer).await;
            });
        }
    };
    (addr, tokio::spawn(serve))
}

/// An MCP server that repeats the token it was sent in its refusals, in
/// any spelling, leaks it nowhere: not in the log at trace (the client's
/// fallbacks log the server's words), not in `/status` (`last_error`), not
/// in `/metrics`.
#[tokio::test]
async fn an_mcp_server_repeating_its_token_in_any_spelling_leaks_it_nowhere() {
    let (addr, server) = echoing_mcp().await;
    let toml = GatewayConfig::new()
        .raw(&format!(
            "[[upstreams]]\nname = \"as-json\"\nurl = \"http://{addr}/json\"\nprotocol = \"mcp\"\ntoolkit = \"J\"\n\
             version = \"1.0.0\"\nbearer_token = \"env:NL_MCP_BEARER\"\n\n\
             [[upstreams]]\nname = \"as-text\"\nurl = \"http://{addr}/text\"\nprotocol = \"mcp\"\ntoolkit = \"T\"\n\
             version = \"1.0.0\"\nbearer_token = \"env:NL_MCP_BEARER\"\n"
        ))
        .toml();
    let gw = Gateway::start_with_env(&toml, &[("RUST_LOG", "trace"), ("NL_MCP_BEARER", MCP_BEARER)]).await;
    for name in ["as-json", "as-text"] {
        let refused = async || gw.upstream_status(name).await["last_error"].is_string();
        wait_until(&format!("{name}'s refusal shows in /status"), refused).await;
    }
    let status_text = common::send(gw.admin, "GET", "/status", Bytes::new(), None).await.json();
    let mut texts = String::new();
    collect_strings(&status_text, &mut texts);
    let metrics = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    // The token as written, JSON-escaped, percent-encoded (either case)
    // and \u-escaped, whole or its start.
    let token = MCP_BEARER;
    let canaries: Vec<(String, String)> = [
        ("as written", token.to_owned()),
        ("its start", token[..15].to_owned()),
        ("JSON-escaped", "leak-canary\\/mcp".to_owned()),
        ("its start, JSON-escaped", "leak-canary\\/".to_owned()),
        ("its start, JSON-escaped, as a log line quotes it", "leak-canary\\\\/".to_owned()),
        ("percent-encoded", "leak%2Dcanary%2Fmcp".to_owned()),
        ("percent-encoded, lower case", "leak%2dcanary%2fmcp".to_owned()),
        ("\\u-escaped", "\\u006c\\u0065\\u0061\\u006b".to_owned()),
    ]
    .into_iter()
    .map(|(name, canary)| (name.to_owned(), canary))
    .collect();
    let mut found = leaks("the gateway's output", &gw.output(), &canaries);
    found.extend(leaks("/status", &texts, &canaries));
    found.extend(leaks("/metrics", &metrics, &canaries));
    assert!(found.is_empty(), "{}", found.join("\n"));
    assert!(texts.contains("[redacted]"), "the refusals are shown, scrubbed: {texts}");
    server.abort();
}

/// Every string in `value` (keys too), one a line, as written.
fn collect_strings(value: &Value, out: &mut String) {
    match value {
        Value::String(text) => {
            out.push_str(text);
            out.push('\n');
        }
        Value::Array(items) => items.iter().for_each(|item| collect_strings(item, out)),
        Value::Object(fields) => fields.iter().for_each(|(k, v)| {
            out.push_str(k);
            out.push('\n');
            collect_strings(v, out);
        }),
        _ => {}
    }
}

#[tokio::test]
async fn no_oauth_token_or_client_secret_appears_anywhere() {
    use common::oidc::{Browser, OidcProvider};
    const CLIENT_SECRET: &str = "leak-canary-oauth-client-secret-6a6a";
    const KEY: &str = "leak-canary-alice-api-key-7b7b";
    let vault = OpenBao::start().await;
    let vault_token = vault.gateway_token().await;
    let receiver = Receiver::start("ok");
    let idp = OidcProvider::start(json!({"access_token_ttl": 4, "scopes": ["mail.read"]})).await;
    let tools = ToolServer::start(common::catalog(vec![needing(
        "Mail.Read",
        json!({"authorization": [{"id": "idp", "oauth2": {"scopes": ["mail.read"]}}]}),
    )]))
    .await;
    tools.on_call(echo);
    let verifier = format!("{}/connect/verify", tools.url());
    let config = GatewayConfig::new().upstream_with("mail", &tools.url(), "authorization = [\"idp\"]").raw(&format!(
        r#"
[auth]
api_keys = [{{ key = "env:LEAK_ALICE_KEY", user_id = "alice" }}]

[vault]
address = "{vault}"
token = "env:LEAK_VAULT_TOKEN"

[authorization.idp]
issuer = "{issuer}"
client_id = "leak-test"
client_secret = "env:LEAK_CLIENT_SECRET"
refresh_margin = "1s"
store = "vault:secret/oauth/idp/{{user_id}}"
user_verification = "verifier"
verifier_url = "{verifier}"

[tracing]
otlp_endpoint = "{collector}"
"#,
        vault = vault.url(),
        issuer = idp.issuer(),
        collector = receiver.endpoint()
    ));
    let gw = Gateway::start_with_env(
        &config.toml(),
        &[
            ("RUST_LOG", "trace"),
            ("LEAK_ALICE_KEY", KEY),
            ("LEAK_VAULT_TOKEN", vault_token.as_str()),
            ("LEAK_CLIENT_SECRET", CLIENT_SECRET),
        ],
    )
    .await;
    idp.register_client("leak-test", CLIENT_SECRET, &[format!("{}/oauth/idp/callback", gw.url())]).await;
    gw.wait_for_tool("Mail.Read@1.0.0").await;
    let mut bodies: Vec<(String, String)> = Vec::new();
    let alice = [("oxp-api-key", KEY)];

    // A challenge, a forged callback, the flow, two calls across a refresh.
    let resp = call(&gw, &alice, "Mail.Read@1.0.0").await;
    assert_eq!(resp.status, 400, "{}", resp.text());
    bodies.push(("the challenged call".into(), resp.text()));
    let url = resp.json()["missing_requirements"]["authorization"][0]["url"].as_str().expect("url").to_owned();
    let forged = Browser::new().get_no_follow(&format!("{}/oauth/idp/callback?code=x&state=y", gw.url())).await;
    bodies.push(("a forged callback".into(), forged.body));
    let browser = Browser::new();
    let page = browser.follow_as(&url, "alice").await;
    let callback = browser.visited_path("/oauth/idp/callback").expect("the callback was visited");
    let code = callback.split(['?', '&']).find_map(|kv| kv.strip_prefix("code=")).expect("a code").to_owned();
    bodies.push(("the verifier's page".into(), page.body.clone()));
    let flow_id = page.url.split(['?', '&']).find_map(|kv| kv.strip_prefix("flow_id=")).expect("a flow_id");
    let body = Bytes::from(json!({ "flow_id": flow_id }).to_string());
    let confirmed = send_with_headers(gw.addr, "POST", "/oauth/confirm", body, &alice).await;
    let back = common::oidc::return_to(&confirmed);
    bodies.push(("the confirmation".into(), confirmed.text()));
    let elsewhere = Browser::new().get_no_follow(&back).await;
    assert_eq!(elsewhere.status, 403, "{}", elsewhere.body);
    bodies.push(("return_to in another browser".into(), elsewhere.body));
    let connected = browser.get_no_follow(&back).await;
    assert_eq!(connected.status, 200, "{}", connected.body);
    bodies.push(("return_to".into(), connected.body));
    let replayed = Browser::new().get_no_follow(&callback).await;
    bodies.push(("a replayed callback".into(), replayed.body));
    let first = vault.latest("secret/oauth/idp/alice").await.expect("the grant");
    let resp = call(&gw, &alice, "Mail.Read@1.0.0").await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    bodies.push(("a call".into(), resp.text()));
    // On purpose: time passes until the access token is due for a refresh.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let resp = call(&gw, &alice, "Mail.Read@1.0.0").await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    bodies.push(("a call after a refresh".into(), resp.text()));
    let second = vault.latest("secret/oauth/idp/alice").await.expect("the refreshed grant");
    assert_ne!(first["access_token"], second["access_token"], "a refresh happened");
    // Its span was exported (the spans are read for leaks below).
    receiver.wait_for_any("the refresh's span", |s| s["name"] == "oauth refresh").await;
    let resp = send_with_headers(gw.addr, "DELETE", "/oauth/idp", Bytes::new(), &alice).await;
    bodies.push(("the disconnect".into(), resp.text()));
    for path in ["/status", "/metrics"] {
        bodies.push((path.into(), common::send(gw.admin, "GET", path, Bytes::new(), None).await.text()));
    }

    let mut gw = gw;
    gw.signal("TERM");
    assert!(gw.wait_exit(Duration::from_secs(15)).await.is_some(), "the gateway did not exit on SIGTERM");
    gw.wait_stdout_closed().await;
    let (stderr, stdout) = (gw.logs(), gw.stdout());
    assert!(stderr.lines().count() > 50, "a trace-level run writes plenty");

    let text = |v: &Value, k: &str| v[k].as_str().expect(k).to_owned();
    let canaries: Vec<(String, String)> = vec![
        ("the client secret".into(), CLIENT_SECRET.into()),
        ("the first access token".into(), text(&first, "access_token")),
        ("the first refresh token".into(), text(&first, "refresh_token")),
        ("the refreshed access token".into(), text(&second, "access_token")),
        ("the authorization code".into(), code),
        ("alice's API key".into(), KEY.into()),
        ("the vault token".into(), vault_token.clone()),
    ];
    let mut found = Vec::new();
    // The link is the caller's to see (it is in the challenge), not the log's.
    let mut in_logs = canaries.clone();
    in_logs.push(("the challenge's link".into(), url.rsplit('/').next().expect("a link id").to_owned()));
    // So is return_to, which finishes the flow: the application's to see.
    in_logs.push(("the flow's return_to".into(), back.rsplit('/').next().expect("its value").to_owned()));
    in_logs.push(("the flow's id".into(), flow_id.to_owned()));
    let binding = browser.cookie(&gw.addr.to_string(), "otc-flow").expect("the flow's cookie");
    in_logs.push(("the flow's cookie".into(), binding));
    found.extend(leaks("the gateway's stderr", &stderr, &in_logs));
    found.extend(leaks("the gateway's stdout", &stdout, &in_logs));
    let spans = Value::Array(receiver.spans().await).to_string();
    found.extend(leaks("the spans exported", &spans, &in_logs));
    for (what, body) in &bodies {
        found.extend(leaks(&format!("the response to {what}"), body, &canaries));
    }
    let upstream_may_see: Vec<(String, String)> =
        canaries.iter().filter(|(name, _)| !name.contains("access token")).cloned().collect();
    let seen = format!("{:?}\n{}", tools.requests(), Value::Array(tools.calls()));
    found.extend(leaks("what the upstream received", &seen, &upstream_may_see));
    assert!(found.is_empty(), "{} leak(s):\n{}", found.len(), found.join("\n"));
}
