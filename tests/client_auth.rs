//! Client authentication at the gateway, end to end through the real binary:
//! JWTs signed here (HS256 from a secret in the environment, RS256 / ES256
//! from a JWKS file) and API keys, over real sockets. A refused request is a
//! 401 with `WWW-Authenticate: Bearer...` and a JSON `message`, and never
//! reaches the tool server; an accepted one reaches it with the caller's
//! `context.user_id`.

mod common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use common::jwt::{self, bearer, es256, hs256, now, rs256, unsigned, EC_PEM, RSA_OTHER_PEM, RSA_PEM, RSA_PUBLIC_PEM};
use common::{echo, jwk, send_with_headers, temp_file, tool, Gateway, GatewayConfig, Resp, ToolServer};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

const HS_SECRET: &str = "client-auth-hs256-secret-5f0e1d2c3b4a59687766";
const ISSUER: &str = "https://auth.example.com";
const AUDIENCE: &str = "otc-gateway";

const ECHO: &str = "Calc.Echo@1.0.0";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// Good claims for alice; `extra` adds or (with null) removes claims.
fn claims(extra: Value) -> Value {
    jwt::merged(jwt::claims("alice", json!({"iss": ISSUER, "aud": AUDIENCE})), extra)
}

/// A good HS256 token with its header rewritten to `alg: none` (signature kept).
fn none_with_signature(claims: &Value) -> String {
    let good = hs256(claims, HS_SECRET.as_bytes());
    let mut parts = good.split('.');
    let (_, payload, signature) = (parts.next(), parts.next().unwrap(), parts.next().unwrap());
    format!("{}.{payload}.{signature}", URL_SAFE_NO_PAD.encode(r#"{"alg":"none","typ":"JWT"}"#))
}

/// A tool server echoing calls, serving `Calc.Echo@1.0.0`.
async fn echo_server() -> ToolServer {
    let server = ToolServer::start(common::catalog(vec![tool("Calc.Echo", "1.0.0", json!({"type": "object"}))])).await;
    server.on_call(echo);
    server
}

/// POST /tools/call to `Calc.Echo@1.0.0` with these headers, at `path`.
async fn call_at(gw: &Gateway, path: &str, headers: &[(&str, &str)], request_extra: Value) -> Resp {
    let mut request = json!({"tool_id": ECHO, "input": {"x": 1}});
    if let (Value::Object(r), Value::Object(e)) = (&mut request, request_extra) {
        r.extend(e);
    }
    let body = Bytes::from(json!({"$schema": "otc://1.0", "request": request}).to_string());
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send_with_headers(gw.addr, "POST", path, body, &all).await
}

async fn call(gw: &Gateway, headers: &[(&str, &str)]) -> Resp {
    call_at(gw, "/tools/call", headers, json!({})).await
}

async fn get_tools(gw: &Gateway, headers: &[(&str, &str)]) -> Resp {
    send_with_headers(gw.addr, "GET", "/tools", Bytes::new(), headers).await
}

/// Checks a refusal: 401, `WWW-Authenticate` starting with `Bearer`, a JSON
/// body with a non-empty `message`.
fn assert_401(resp: &Resp, what: &str) {
    assert_eq!(resp.status, 401, "{what}: expected 401, got {} {}", resp.status, resp.text());
    let challenge = resp.header("www-authenticate").unwrap_or_default();
    assert!(challenge.starts_with("Bearer"), "{what}: WWW-Authenticate must start with Bearer, got {challenge:?}");
    let body: Value = serde_json::from_slice(&resp.body)
        .unwrap_or_else(|e| panic!("{what}: the 401 body is not JSON ({e}): {}", resp.text()));
    assert!(body["message"].as_str().is_some_and(|m| !m.trim().is_empty()), "{what}: no message: {body}");
}

fn hs_config(server: &ToolServer, extra_auth: &str) -> GatewayConfig {
    GatewayConfig::new().upstream("tools", &server.url()).raw(&format!(
        "[auth]\nmode = \"jwt\"\nhs256_secret = \"env:CA_JWT_SECRET\"\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\n{extra_auth}"
    ))
}

// ---------------------------------------------------------------------------
// HS256
// ---------------------------------------------------------------------------

#[tokio::test]
async fn a_good_hs256_token_gets_through_with_its_sub_as_user_id() {
    let server = echo_server().await;
    let gw = hs_config(&server, "").start_with_env(&[("CA_JWT_SECRET", HS_SECRET)]).await;
    let good = hs256(&claims(json!({})), HS_SECRET.as_bytes());
    let auth = bearer(&good);
    gw.wait_listed(&[("authorization", auth.as_str())], ECHO).await;

    let result = call(&gw, &[("authorization", auth.as_str())]).await.result();
    assert_eq!(result["value"], json!({"x": 1}), "{result}");
    assert_eq!(server.call_count(), 1);
    assert_eq!(server.last_request()["context"]["user_id"], "alice");

    // An audience list containing the configured one is fine.
    let listed = bearer(&hs256(&claims(json!({"sub": "ann", "aud": ["other-api", AUDIENCE]})), HS_SECRET.as_bytes()));
    call(&gw, &[("authorization", listed.as_str())]).await.result();
    assert_eq!(server.last_request()["context"]["user_id"], "ann");
    assert_eq!(server.call_count(), 2);

    // The /call alias, and the scheme written in lower case (RFC 7235).
    call_at(&gw, "/call", &[("authorization", auth.as_str())], json!({})).await.result();
    let lower = format!("bearer {good}");
    call(&gw, &[("authorization", lower.as_str())]).await.result();
    assert_eq!(server.call_count(), 4);
}

#[tokio::test]
async fn bad_or_missing_hs256_credentials_are_401s_and_never_reach_the_tool() {
    let server = echo_server().await;
    let gw = hs_config(&server, "").start_with_env(&[("CA_JWT_SECRET", HS_SECRET)]).await;
    let good = bearer(&hs256(&claims(json!({})), HS_SECRET.as_bytes()));
    gw.wait_listed(&[("authorization", good.as_str())], ECHO).await;

    let expired = hs256(&claims(json!({"exp": now() - 3600, "iat": now() - 7200})), HS_SECRET.as_bytes());
    let wrong_key = hs256(&claims(json!({})), b"another-issuers-secret-0000000000000000");
    let wrong_aud = hs256(&claims(json!({"aud": "some-other-service"})), HS_SECRET.as_bytes());
    let no_aud = hs256(&claims(json!({"aud": null})), HS_SECRET.as_bytes());
    let wrong_iss = hs256(&claims(json!({"iss": "https://evil.example.com"})), HS_SECRET.as_bytes());
    let no_iss = hs256(&claims(json!({"iss": null})), HS_SECRET.as_bytes());
    let no_exp = hs256(&claims(json!({"exp": null})), HS_SECRET.as_bytes());
    let not_yet = hs256(&claims(json!({"nbf": now() + 3600})), HS_SECRET.as_bytes());
    let no_sub = hs256(&claims(json!({"sub": null})), HS_SECRET.as_bytes());
    let tampered = {
        // alice's good token with the payload swapped for one naming root.
        let good = hs256(&claims(json!({})), HS_SECRET.as_bytes());
        let parts: Vec<&str> = good.split('.').collect();
        let payload = URL_SAFE_NO_PAD.encode(claims(json!({"sub": "root"})).to_string());
        format!("{}.{payload}.{}", parts[0], parts[2])
    };
    let cases: Vec<(&str, Option<String>)> = vec![
        ("missing", None),
        ("expired", Some(bearer(&expired))),
        ("wrong key", Some(bearer(&wrong_key))),
        ("wrong audience", Some(bearer(&wrong_aud))),
        ("no audience while one is configured", Some(bearer(&no_aud))),
        ("wrong issuer", Some(bearer(&wrong_iss))),
        ("no issuer while one is configured", Some(bearer(&no_iss))),
        ("no exp", Some(bearer(&no_exp))),
        ("nbf in the future", Some(bearer(&not_yet))),
        ("no sub", Some(bearer(&no_sub))),
        ("tampered payload", Some(bearer(&tampered))),
        ("alg none", Some(bearer(&unsigned("none", &claims(json!({})))))),
        ("alg None", Some(bearer(&unsigned("None", &claims(json!({})))))),
        ("alg NONE", Some(bearer(&unsigned("NONE", &claims(json!({})))))),
        ("alg none with a signature", Some(bearer(&none_with_signature(&claims(json!({})))))),
        ("garbage", Some(bearer("garbage"))),
        ("three garbage segments", Some(bearer("abc.def.ghi"))),
        ("empty bearer", Some("Bearer ".to_owned())),
        ("another scheme", Some("Basic YWxpY2U6cGFzc3dvcmQ=".to_owned())),
        ("the secret itself as a bearer", Some(bearer(HS_SECRET))),
    ];
    for (what, header) in &cases {
        let headers: Vec<(&str, &str)> = header.iter().map(|h| ("authorization", h.as_str())).collect();
        assert_401(&call(&gw, &headers).await, &format!("POST /tools/call, {what}"));
        assert_401(&get_tools(&gw, &headers).await, &format!("GET /tools, {what}"));
    }
    assert_401(&call_at(&gw, "/call", &[], json!({})).await, "POST /call, missing");
    // Two Authorization headers, a bad one first or last: ambiguous, refused.
    let garbage = bearer("garbage");
    assert_401(
        &call(&gw, &[("authorization", garbage.as_str()), ("authorization", good.as_str())]).await,
        "bad, then good",
    );
    assert_401(
        &call(&gw, &[("authorization", good.as_str()), ("authorization", garbage.as_str())]).await,
        "good, then bad",
    );
    assert_eq!(server.call_count(), 0, "no refused request reached the tool server");
    // Only the catalog poller talked to the upstream.
    assert!(server.requests().iter().all(|r| r.method == "GET" && r.path == "/tools"), "{:#?}", server.requests());

    // The good token still works after all that.
    call(&gw, &[("authorization", good.as_str())]).await.result();
    assert_eq!(server.call_count(), 1);
}

#[tokio::test]
async fn health_stays_open_and_the_catalog_needs_a_token() {
    let server = echo_server().await;
    let gw = hs_config(&server, "").start_with_env(&[("CA_JWT_SECRET", HS_SECRET)]).await;

    let health = gw.get("/health").await;
    assert_eq!(health.status, 200, "GET /health needs no credentials: {}", health.text());
    let head = gw.request("HEAD", "/health", Bytes::new(), None).await;
    assert_eq!(head.status, 200, "HEAD /health neither");

    assert_401(&gw.get("/tools").await, "GET /tools without a token");
    let good = bearer(&hs256(&claims(json!({})), HS_SECRET.as_bytes()));
    gw.wait_listed(&[("authorization", good.as_str())], ECHO).await;
    assert_401(&gw.get("/tools").await, "GET /tools without a token, once the catalog is loaded");
    assert_eq!(server.call_count(), 0);
}

// ---------------------------------------------------------------------------
// API keys
// ---------------------------------------------------------------------------

#[tokio::test]
async fn api_keys_work_as_bearer_and_as_oxp_api_key_and_map_to_their_user_id() {
    let server = echo_server().await;
    let key_file = temp_file("apikey", "txt", "ak-billing-from-file-7c7c\n");
    let gw = hs_config(
        &server,
        &format!(
            "api_keys = [\n  {{ key = \"env:CA_REPORTS_KEY\", user_id = \"svc-reports\" }},\n  \
             {{ key = \"file:{}\", user_id = \"svc-billing\" }},\n]\n",
            key_file.display()
        ),
    )
    .start_with_env(&[("CA_JWT_SECRET", HS_SECRET), ("CA_REPORTS_KEY", "ak-reports-from-env-3b3b")])
    .await;
    gw.wait_listed(&[("oxp-api-key", "ak-reports-from-env-3b3b")], ECHO).await;

    let cases = [
        ("authorization", "Bearer ak-reports-from-env-3b3b", "svc-reports"),
        ("oxp-api-key", "ak-reports-from-env-3b3b", "svc-reports"),
        ("authorization", "Bearer ak-billing-from-file-7c7c", "svc-billing"),
        ("oxp-api-key", "ak-billing-from-file-7c7c", "svc-billing"),
    ];
    for (i, (header, value, user)) in cases.into_iter().enumerate() {
        // The client claims to be someone else: the key decides.
        let resp = call_at(&gw, "/tools/call", &[(header, value)], json!({"context": {"user_id": "root"}})).await;
        resp.result();
        assert_eq!(server.call_count(), i + 1);
        assert_eq!(server.last_request()["context"]["user_id"], user, "{header}: {value}");
        let listing = get_tools(&gw, &[(header, value)]).await;
        assert_eq!(listing.status, 200, "GET /tools with {header}: {}", listing.text());
    }

    let calls = server.call_count();
    for (header, value) in [
        ("authorization", "Bearer ak-reports-from-env-3b3c"),
        ("oxp-api-key", "ak-reports-from-env-3b3c"),
        ("oxp-api-key", "ak-reports-from-env-3b3"),
        ("oxp-api-key", ""),
        // A key is not a user id, and a user id is not a key.
        ("oxp-api-key", "svc-reports"),
    ] {
        assert_401(&call(&gw, &[(header, value)]).await, &format!("{header}: {value:?}"));
    }
    assert_eq!(server.call_count(), calls, "refused keys never reach the tool");
    let _ = std::fs::remove_file(key_file);
}

// ---------------------------------------------------------------------------
// RS256 / ES256 from a JWKS file
// ---------------------------------------------------------------------------

#[tokio::test]
async fn rs256_and_es256_tokens_are_checked_against_a_jwks_file() {
    let server = echo_server().await;
    let jwks = serde_json::to_string(&JwkSet {
        keys: vec![jwk(RSA_PEM, Algorithm::RS256, "rsa-1"), jwk(EC_PEM, Algorithm::ES256, "ec-1")],
    })
    .expect("jwks");
    let jwks_path = temp_file("jwks", "json", &jwks);
    let gw = GatewayConfig::new()
        .upstream("tools", &server.url())
        .raw(&format!(
            "[auth]\nmode = \"jwt\"\njwks = \"file:{}\"\nissuer = \"{ISSUER}\"\naudience = \"{AUDIENCE}\"\n",
            jwks_path.display()
        ))
        .start()
        .await;
    let good = bearer(&rs256(&claims(json!({"sub": "rita"})), RSA_PEM, Some("rsa-1")));
    gw.wait_listed(&[("authorization", good.as_str())], ECHO).await;

    call(&gw, &[("authorization", good.as_str())]).await.result();
    assert_eq!(server.last_request()["context"]["user_id"], "rita");
    let ec = bearer(&es256(&claims(json!({"sub": "eddie"})), "ec-1"));
    call(&gw, &[("authorization", ec.as_str())]).await.result();
    assert_eq!(server.last_request()["context"]["user_id"], "eddie");
    let calls = server.call_count();
    assert_eq!(calls, 2);

    // Algorithm confusion: HS256 "signed" with the RSA public key (PEM, as
    // an attacker would fetch it) or the JWK's modulus, naming the RSA kid.
    let n = match &jwk(RSA_PEM, Algorithm::RS256, "rsa-1").algorithm {
        jsonwebtoken::jwk::AlgorithmParameters::RSA(p) => p.n.clone(),
        _ => unreachable!("an RSA jwk"),
    };
    let confused = |secret: &[u8]| {
        let mut header = Header::new(Algorithm::HS256);
        header.kid = Some("rsa-1".into());
        jwt::sign(header, &claims(json!({})), &EncodingKey::from_secret(secret))
    };
    let cases = [
        ("signed by a key not in the JWKS", rs256(&claims(json!({})), RSA_OTHER_PEM, Some("rsa-1"))),
        ("unknown kid", rs256(&claims(json!({})), RSA_OTHER_PEM, Some("rsa-9"))),
        ("expired", rs256(&claims(json!({"exp": now() - 3600})), RSA_PEM, Some("rsa-1"))),
        ("wrong audience", rs256(&claims(json!({"aud": "other"})), RSA_PEM, Some("rsa-1"))),
        ("wrong issuer", rs256(&claims(json!({"iss": "https://evil.example.com"})), RSA_PEM, Some("rsa-1"))),
        ("ES256 naming the RSA key", es256(&claims(json!({})), "rsa-1")),
        ("HS256 with the public key PEM", confused(RSA_PUBLIC_PEM.as_bytes())),
        ("HS256 with the public key PEM, trimmed", confused(RSA_PUBLIC_PEM.trim().as_bytes())),
        ("HS256 with the modulus", confused(n.as_bytes())),
        ("HS256 with any secret", hs256(&claims(json!({})), HS_SECRET.as_bytes())),
        ("alg none", unsigned("none", &claims(json!({})))),
        ("garbage", "eyJhbGciOiJSUzI1NiJ9.garbage.garbage".to_owned()),
    ];
    for (what, token) in &cases {
        let auth = bearer(token);
        assert_401(&call(&gw, &[("authorization", auth.as_str())]).await, what);
    }
    assert_eq!(server.call_count(), calls, "no refused token reached the tool");
    let _ = std::fs::remove_file(jwks_path);
}

#[tokio::test]
async fn user_id_claim_names_the_claim_that_becomes_the_user_id() {
    let server = echo_server().await;
    let gw = hs_config(&server, "user_id_claim = \"email\"\n").start_with_env(&[("CA_JWT_SECRET", HS_SECRET)]).await;
    let good = bearer(&hs256(&claims(json!({"email": "alice@example.com"})), HS_SECRET.as_bytes()));
    gw.wait_listed(&[("authorization", good.as_str())], ECHO).await;
    call(&gw, &[("authorization", good.as_str())]).await.result();
    assert_eq!(server.last_request()["context"]["user_id"], "alice@example.com");

    // A token without the claim identifies nobody: refused.
    let no_email = bearer(&hs256(&claims(json!({})), HS_SECRET.as_bytes()));
    assert_401(&call(&gw, &[("authorization", no_email.as_str())]).await, "no email claim");
    assert_eq!(server.call_count(), 1);
}
