//! Client authentication: JWTs signed here (HS256, RS256 and ES256 from a
//! JWKS file or URL) and API keys, through `Authenticator::authenticate`.

mod common;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use bytes::Bytes;
use common::jwk;
use common::jwt::{self, es256, hs256, now, rs256, EC_PEM, RSA_OTHER_PEM, RSA_PEM};
use common::wait_until;
use http::{HeaderMap, HeaderValue};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use otc_gateway::auth::{AudienceRule, AuthError, Authenticator, Caller};
use otc_gateway::config::{AuthConfig, AuthMode, SecretRef};
use otc_gateway::vault::SecretResolver;
use serde_json::{json, Value};

const HS_SECRET: &str = "test-hs256-secret-that-is-long-enough-0123456789";

fn resolver() -> SecretResolver {
    SecretResolver::new(None, Duration::from_secs(1)).expect("resolver")
}

fn env_ref(name: &str, value: &str) -> SecretRef {
    std::env::set_var(name, value);
    SecretRef::Env { name: name.to_owned() }
}

/// The gateway's public URL in these tests: its resource is this + `/mcp`.
const PUBLIC_URL: &str = "http://127.0.0.1:8080";
const RESOURCE: &str = "http://127.0.0.1:8080/mcp";

/// Authenticates for an OTC route (`/tools`, `/tools/call`).
fn otc(auth: &Authenticator, headers: &HeaderMap) -> Result<Caller, AuthError> {
    auth.authenticate(headers, AudienceRule::Otc, || PUBLIC_URL.to_owned())
}

/// Authenticates for `/mcp`.
fn mcp(auth: &Authenticator, headers: &HeaderMap) -> Result<Caller, AuthError> {
    auth.authenticate(headers, AudienceRule::Mcp, || PUBLIC_URL.to_owned())
}

fn bearer(token: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(http::header::AUTHORIZATION, HeaderValue::from_str(&format!("Bearer {token}")).expect("header"));
    h
}

fn api_key_header(key: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("OXP-API-Key", HeaderValue::from_str(key).expect("header"));
    h
}

/// Good claims for alice (in group `mail`); `extra` adds or (with null) removes claims.
fn claims(extra: Value) -> Value {
    let base = json!({"iss": "https://auth.example.com", "aud": "otc-gateway", "groups": ["mail"]});
    jwt::merged(jwt::claims("alice", base), extra)
}

fn jwks_json(keys: Vec<Jwk>) -> String {
    serde_json::to_string(&JwkSet { keys }).expect("jwks")
}

fn temp_file(name: &str, content: &str) -> String {
    let dir = std::env::temp_dir().join(format!("otc-auth-tests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let p = dir.join(name);
    std::fs::write(&p, content).expect("write");
    p.display().to_string()
}

async fn hs_auth(env_name: &str) -> Authenticator {
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        hs256_secret: Some(env_ref(env_name, HS_SECRET)),
        issuer: Some("https://auth.example.com".into()),
        audience: Some("otc-gateway".into()),
        ..AuthConfig::default()
    };
    Authenticator::new(&cfg, &resolver()).await.expect("authenticator")
}

/// The error for `token`, checking it never repeats the token.
fn rejected(auth: &Authenticator, token: &str) -> AuthError {
    let err = otc(auth, &bearer(token)).expect_err("must be rejected");
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(token), "{shown}");
    if let Some(sig) = token.rsplit('.').next().filter(|s| s.len() > 8) {
        assert!(!shown.contains(sig), "{shown}");
    }
    err
}

#[tokio::test]
async fn hs256_good_token() {
    let auth = hs_auth("OTC_AUTH_HS_GOOD").await;
    let caller = otc(&auth, &bearer(&hs256(&claims(json!({})), HS_SECRET.as_bytes()))).expect("valid");
    assert_eq!(caller.authenticated_user(), Some("alice"));
    assert_eq!(caller.kind(), "jwt");
    assert_eq!(caller.claims()["groups"], json!(["mail"]));
}

#[tokio::test]
async fn hs256_expired_token() {
    let auth = hs_auth("OTC_AUTH_HS_EXP").await;
    let token = hs256(&claims(json!({"exp": now() - 3600})), HS_SECRET.as_bytes());
    let err = rejected(&auth, &token);
    assert!(matches!(err, AuthError::Expired), "{err:?}");
    assert_eq!(err.public_message(), "expired credentials");
    // Within the leeway (30s) it still passes.
    let token = hs256(&claims(json!({"exp": now() - 5})), HS_SECRET.as_bytes());
    assert!(otc(&auth, &bearer(&token)).is_ok());
}

#[tokio::test]
async fn hs256_exp_is_required_and_nbf_checked() {
    let auth = hs_auth("OTC_AUTH_HS_NBF").await;
    let token = hs256(&claims(json!({"exp": null})), HS_SECRET.as_bytes());
    let err = rejected(&auth, &token);
    assert!(matches!(&err, AuthError::Invalid(r) if r.contains("exp")), "{err:?}");
    let token = hs256(&claims(json!({"nbf": now() + 3600})), HS_SECRET.as_bytes());
    assert!(matches!(rejected(&auth, &token), AuthError::NotYetValid));
    let token = hs256(&claims(json!({"nbf": now() - 10})), HS_SECRET.as_bytes());
    assert!(otc(&auth, &bearer(&token)).is_ok());
}

#[tokio::test]
async fn hs256_wrong_key() {
    let auth = hs_auth("OTC_AUTH_HS_WRONGKEY").await;
    let token = hs256(&claims(json!({})), b"another-secret-of-a-different-issuer-000000");
    let err = rejected(&auth, &token);
    assert!(matches!(&err, AuthError::Invalid(r) if r == "bad signature"), "{err:?}");
    assert_eq!(err.public_message(), "invalid credentials");
    assert_eq!(err.www_authenticate(None), "Bearer error=\"invalid_token\"");
}

#[tokio::test]
async fn hs256_wrong_audience_and_issuer() {
    let auth = hs_auth("OTC_AUTH_HS_AUDISS").await;
    let err = rejected(&auth, &hs256(&claims(json!({"aud": "someone-else"})), HS_SECRET.as_bytes()));
    assert!(matches!(&err, AuthError::Invalid(r) if r.contains("audience")), "{err:?}");
    let err = rejected(&auth, &hs256(&claims(json!({"aud": null})), HS_SECRET.as_bytes()));
    assert!(matches!(&err, AuthError::Invalid(_)), "{err:?}");
    let err = rejected(&auth, &hs256(&claims(json!({"iss": "https://evil.example"})), HS_SECRET.as_bytes()));
    assert!(matches!(&err, AuthError::Invalid(r) if r.contains("issuer")), "{err:?}");
    let err = rejected(&auth, &hs256(&claims(json!({"iss": null})), HS_SECRET.as_bytes()));
    assert!(matches!(&err, AuthError::Invalid(_)), "{err:?}");
    // An audience list containing ours is fine.
    let token = hs256(&claims(json!({"aud": ["other", "otc-gateway"]})), HS_SECRET.as_bytes());
    assert!(otc(&auth, &bearer(&token)).is_ok());
}

#[tokio::test]
async fn on_otc_routes_without_audience_a_token_needs_no_aud_but_one_it_has_must_name_the_gateway() {
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        hs256_secret: Some(env_ref("OTC_AUTH_HS_NOAUD", HS_SECRET)),
        ..AuthConfig::default()
    };
    let auth = Authenticator::new(&cfg, &resolver()).await.expect("authenticator");
    // `iss` is not checked when `issuer` is unset.
    for aud in [Value::Null, json!(RESOURCE), json!(["other", RESOURCE])] {
        let token = hs256(&claims(json!({"aud": aud, "iss": "anywhere"})), HS_SECRET.as_bytes());
        assert!(otc(&auth, &bearer(&token)).is_ok(), "{aud}");
    }
    // A token for another resource is not the gateway's, on any route.
    for aud in [json!("anyone"), json!(["other", "third"]), json!("https://other.example.com/mcp")] {
        let token = hs256(&claims(json!({"aud": aud})), HS_SECRET.as_bytes());
        let err = rejected(&auth, &token);
        assert!(matches!(&err, AuthError::Invalid(r) if r.contains("audience")), "{aud}: {err:?}");
        assert!(mcp(&auth, &bearer(&token)).is_err(), "{aud}");
    }
}

#[tokio::test]
async fn iss_is_one_string() {
    let auth = hs_auth("OTC_AUTH_HS_ISS").await;
    for iss in [json!(["https://auth.example.com"]), json!(["evil", "https://auth.example.com"]), json!(7)] {
        let err = rejected(&auth, &hs256(&claims(json!({"iss": iss})), HS_SECRET.as_bytes()));
        assert!(matches!(err, AuthError::Invalid(_)), "{iss}: {err:?}");
    }
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        hs256_secret: Some(env_ref("OTC_AUTH_HS_ISS_ANY", HS_SECRET)),
        ..AuthConfig::default()
    };
    let unchecked = Authenticator::new(&cfg, &resolver()).await.expect("authenticator");
    let token = hs256(&claims(json!({"iss": ["anything"], "aud": null})), HS_SECRET.as_bytes());
    assert!(otc(&unchecked, &bearer(&token)).is_err(), "an array is refused even when iss is not configured");
}

#[tokio::test]
async fn a_token_naming_an_api_keys_user_is_refused() {
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        hs256_secret: Some(env_ref("OTC_AUTH_NS_HS", HS_SECRET)),
        audience: Some("otc-gateway".into()),
        api_keys: toml::from_str::<AuthConfig>(
            "api_keys = [{ key = \"env:OTC_AUTH_NS_KEY\", user_id = \"svc-reports\" }]",
        )
        .expect("api_keys")
        .api_keys,
        ..AuthConfig::default()
    };
    std::env::set_var("OTC_AUTH_NS_KEY", "ns-key-0123456789");
    let auth = Authenticator::new(&cfg, &resolver()).await.expect("authenticator");
    // The key is the service client; a token claiming its user id is not.
    let caller = otc(&auth, &api_key_header("ns-key-0123456789")).expect("the key");
    assert_eq!(caller.authenticated_user(), Some("svc-reports"));
    let err = rejected(&auth, &hs256(&claims(json!({"sub": "svc-reports"})), HS_SECRET.as_bytes()));
    assert!(matches!(&err, AuthError::Invalid(r) if r.contains("API key")), "{err:?}");
    assert!(otc(&auth, &bearer(&hs256(&claims(json!({"sub": "alice"})), HS_SECRET.as_bytes()))).is_ok());
}

#[tokio::test]
async fn mcp_requires_an_aud_naming_the_resource_or_the_configured_audience() {
    let without = AuthConfig {
        mode: AuthMode::Jwt,
        hs256_secret: Some(env_ref("OTC_AUTH_HS_MCP", HS_SECRET)),
        ..AuthConfig::default()
    };
    let auth = Authenticator::new(&without, &resolver()).await.expect("authenticator");
    let token = |aud: Value| bearer(&hs256(&claims(json!({"aud": aud})), HS_SECRET.as_bytes()));
    assert_eq!(auth.protected_resource(|| PUBLIC_URL.to_owned()).expect("jwt mode").resource(), RESOURCE);
    for ok in [json!(RESOURCE), json!(["other", RESOURCE]), json!("HTTP://127.0.0.1:8080/mcp/")] {
        assert!(mcp(&auth, &token(ok.clone())).is_ok(), "{ok}");
    }
    for refused in [
        Value::Null,
        json!("otc-gateway"),
        json!("http://127.0.0.1:8081/mcp"),
        json!([]),
        json!(7),
        json!([RESOURCE, 7]),
    ] {
        let err = mcp(&auth, &token(refused.clone())).expect_err("refused at /mcp");
        assert!(matches!(err, AuthError::Invalid(_)), "{refused}: {err:?}");
    }

    // With `audience`, it is accepted besides the resource, on both fronts.
    let with = AuthConfig { audience: Some("otc-gateway".into()), ..without };
    let auth = Authenticator::new(&with, &resolver()).await.expect("authenticator");
    for aud in [json!("otc-gateway"), json!(RESOURCE)] {
        assert!(mcp(&auth, &token(aud.clone())).is_ok(), "/mcp, {aud}");
        assert!(otc(&auth, &token(aud.clone())).is_ok(), "OTC, {aud}");
    }
    for refused in [Value::Null, json!("someone-else")] {
        assert!(mcp(&auth, &token(refused.clone())).is_err(), "/mcp, {refused}");
        assert!(otc(&auth, &token(refused.clone())).is_err(), "OTC, {refused}");
    }
}

#[tokio::test]
async fn alg_none_is_refused() {
    let auth = hs_auth("OTC_AUTH_HS_NONE").await;
    for alg in ["none", "None", "NONE"] {
        let token = jwt::unsigned(alg, &claims(json!({})));
        let err = rejected(&auth, &token);
        assert!(matches!(err, AuthError::Invalid(_)), "{alg}: {err:?}");
    }
    // A valid HS256 token with its signature stripped.
    let good = hs256(&claims(json!({})), HS_SECRET.as_bytes());
    let stripped = format!("{}.", good.rsplit_once('.').expect("dots").0);
    assert!(matches!(rejected(&auth, &stripped), AuthError::Invalid(_)));
}

#[tokio::test]
async fn garbage_is_refused() {
    let auth = hs_auth("OTC_AUTH_HS_GARBAGE").await;
    let long = "a".repeat(20_000);
    for token in ["garbage", "a.b.c", "eyJhbGciOiJIUzI1NiJ9.bm90IGpzb24.c2ln", "...", long.as_str()] {
        let err = otc(&auth, &bearer(token)).expect_err(token);
        assert!(matches!(err, AuthError::Invalid(_)), "{token}: {err:?}");
    }
    // Other algorithms of the HMAC family are not on the list.
    let token =
        jwt::sign(Header::new(Algorithm::HS512), &claims(json!({})), &EncodingKey::from_secret(HS_SECRET.as_bytes()));
    assert!(matches!(rejected(&auth, &token), AuthError::Invalid(r) if r.contains("not accepted")));
}

#[tokio::test]
async fn a_token_without_the_user_claim_is_refused() {
    let auth = hs_auth("OTC_AUTH_HS_NOSUB").await;
    let err = rejected(&auth, &hs256(&claims(json!({"sub": null})), HS_SECRET.as_bytes()));
    assert!(matches!(&err, AuthError::MissingUserClaim { claim } if claim == "sub"), "{err:?}");
    let err = rejected(&auth, &hs256(&claims(json!({"sub": 42})), HS_SECRET.as_bytes()));
    assert!(matches!(err, AuthError::MissingUserClaim { .. }), "{err:?}");
    let err = rejected(&auth, &hs256(&claims(json!({"sub": ""})), HS_SECRET.as_bytes()));
    assert!(matches!(err, AuthError::MissingUserClaim { .. }), "{err:?}");
}

#[tokio::test]
async fn user_id_claim_is_configurable() {
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        hs256_secret: Some(env_ref("OTC_AUTH_HS_EMAIL", HS_SECRET)),
        user_id_claim: "email".into(),
        audience: Some("otc-gateway".into()),
        ..AuthConfig::default()
    };
    let auth = Authenticator::new(&cfg, &resolver()).await.expect("authenticator");
    let token = hs256(&claims(json!({"email": "alice@example.com"})), HS_SECRET.as_bytes());
    let caller = otc(&auth, &bearer(&token)).expect("valid");
    assert_eq!(caller.authenticated_user(), Some("alice@example.com"));
    assert!(matches!(
        rejected(&auth, &hs256(&claims(json!({})), HS_SECRET.as_bytes())),
        AuthError::MissingUserClaim { .. }
    ));
}

async fn jwks_file_auth(keys: Vec<Jwk>, name: &str) -> Authenticator {
    let path = temp_file(name, &jwks_json(keys));
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        jwks: Some(format!("file:{path}")),
        audience: Some("otc-gateway".into()),
        ..AuthConfig::default()
    };
    Authenticator::new(&cfg, &resolver()).await.expect("authenticator")
}

#[tokio::test]
async fn rs256_and_es256_from_a_jwks_file() {
    let auth = jwks_file_auth(
        vec![jwk(RSA_PEM, Algorithm::RS256, "rsa-1"), jwk(EC_PEM, Algorithm::ES256, "ec-1")],
        "jwks-basic.json",
    )
    .await;
    let caller = otc(&auth, &bearer(&rs256(&claims(json!({})), RSA_PEM, Some("rsa-1")))).expect("rs256");
    assert_eq!(caller.authenticated_user(), Some("alice"));
    let caller = otc(&auth, &bearer(&es256(&claims(json!({"sub": "bob"})), "ec-1"))).expect("es256");
    assert_eq!(caller.authenticated_user(), Some("bob"));
    // No kid: the RSA keys are tried.
    assert!(otc(&auth, &bearer(&rs256(&claims(json!({})), RSA_PEM, None))).is_ok());

    // Signed by a key not in the JWKS, under a known kid: bad signature.
    let err = rejected(&auth, &rs256(&claims(json!({})), RSA_OTHER_PEM, Some("rsa-1")));
    assert!(matches!(&err, AuthError::Invalid(r) if r == "bad signature"), "{err:?}");
    // Unknown kid.
    let err = rejected(&auth, &rs256(&claims(json!({})), RSA_OTHER_PEM, Some("rsa-9")));
    assert!(matches!(&err, AuthError::Invalid(r) if r.contains("rsa-9")), "{err:?}");
    // An ES256 token naming the RSA key: the key type does not fit.
    let err = rejected(&auth, &es256(&claims(json!({})), "rsa-1"));
    assert!(matches!(err, AuthError::Invalid(_)), "{err:?}");
    // Expired and wrong audience also apply to JWKS keys.
    let err = rejected(&auth, &rs256(&claims(json!({"exp": now() - 3600})), RSA_PEM, Some("rsa-1")));
    assert!(matches!(err, AuthError::Expired), "{err:?}");
    let err = rejected(&auth, &rs256(&claims(json!({"aud": "x"})), RSA_PEM, Some("rsa-1")));
    assert!(matches!(err, AuthError::Invalid(_)), "{err:?}");
}

#[tokio::test]
async fn hs256_is_refused_without_a_shared_secret() {
    // Key confusion: an HS256 token "signed" with the RSA public key's
    // modulus must not verify against the JWKS.
    let rsa = jwk(RSA_PEM, Algorithm::RS256, "rsa-1");
    let n = match &rsa.algorithm {
        jsonwebtoken::jwk::AlgorithmParameters::RSA(p) => p.n.clone(),
        _ => unreachable!(),
    };
    let auth = jwks_file_auth(vec![rsa], "jwks-confusion.json").await;
    let mut header = Header::new(Algorithm::HS256);
    header.kid = Some("rsa-1".into());
    let token = jwt::sign(header, &claims(json!({})), &EncodingKey::from_secret(n.as_bytes()));
    let err = rejected(&auth, &token);
    assert!(matches!(&err, AuthError::Invalid(r) if r.contains("HS256")), "{err:?}");
}

#[tokio::test]
async fn a_jwks_file_is_reloaded_on_an_unknown_kid() {
    let path = temp_file("jwks-rotate.json", &jwks_json(vec![jwk(RSA_PEM, Algorithm::RS256, "old")]));
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        jwks: Some(format!("file:{path}")),
        jwks_refresh: Duration::from_millis(200),
        audience: Some("otc-gateway".into()),
        ..AuthConfig::default()
    };
    let auth = Authenticator::new(&cfg, &resolver()).await.expect("authenticator");
    let token = rs256(&claims(json!({})), RSA_OTHER_PEM, Some("new"));
    assert!(otc(&auth, &bearer(&token)).is_err());
    std::fs::write(&path, jwks_json(vec![jwk(RSA_OTHER_PEM, Algorithm::RS256, "new")])).expect("rotate");
    wait_until("the rotated key is picked up", async || otc(&auth, &bearer(&token)).is_ok()).await;
    // The old key is gone.
    assert!(otc(&auth, &bearer(&rs256(&claims(json!({})), RSA_PEM, Some("old")))).is_err());
}

/// A tiny HTTP server serving a JWKS document that the test can replace.
struct JwksServer {
    url: String,
    body: Arc<Mutex<String>>,
    hits: Arc<Mutex<usize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn jwks_server(initial: String) -> JwksServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/.well-known/jwks.json", listener.local_addr().expect("addr"));
    let body = Arc::new(Mutex::new(initial));
    let hits = Arc::new(Mutex::new(0usize));
    let (b, h) = (body.clone(), hits.clone());
    let task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else { continue };
            let (b, h) = (b.clone(), h.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: http::Request<hyper::body::Incoming>| {
                    let (b, h) = (b.clone(), h.clone());
                    async move {
                        *h.lock().expect("lock") += 1;
                        let resp = if req.uri().path() == "/.well-known/jwks.json" {
                            http::Response::builder()
                                .header("content-type", "application/json")
                                .body(Full::new(Bytes::from(b.lock().expect("lock").clone())))
                        } else {
                            http::Response::builder().status(404).body(Full::new(Bytes::new()))
                        };
                        Ok::<_, Infallible>(resp.expect("response"))
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc).await;
            });
        }
    });
    JwksServer { url, body, hits, task }
}

#[tokio::test]
async fn a_jwks_url_is_fetched_and_refreshed() {
    let server = jwks_server(jwks_json(vec![jwk(EC_PEM, Algorithm::ES256, "ec-1")])).await;
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        jwks: Some(server.url.clone()),
        jwks_refresh: Duration::from_millis(200),
        audience: Some("otc-gateway".into()),
        ..AuthConfig::default()
    };
    let auth = Authenticator::new(&cfg, &resolver()).await.expect("authenticator");
    assert!(*server.hits.lock().expect("lock") >= 1);
    assert!(otc(&auth, &bearer(&es256(&claims(json!({})), "ec-1"))).is_ok());

    *server.body.lock().expect("lock") = jwks_json(vec![jwk(RSA_PEM, Algorithm::RS256, "rsa-2")]);
    let token = rs256(&claims(json!({})), RSA_PEM, Some("rsa-2"));
    wait_until("the refreshed JWKS is used", async || otc(&auth, &bearer(&token)).is_ok()).await;

    // A broken JWKS on refresh keeps the last good keys.
    *server.body.lock().expect("lock") = "oops".into();
    // Two fetches later the first that got "oops" has been read (refreshes
    // run one after another).
    let fetched = *server.hits.lock().expect("lock");
    wait_until("two refreshes fetch the broken JWKS", async || *server.hits.lock().expect("lock") >= fetched + 2).await;
    assert!(otc(&auth, &bearer(&token)).is_ok());
}

#[tokio::test]
async fn an_unreachable_jwks_fails_at_startup() {
    let cfg =
        AuthConfig { mode: AuthMode::Jwt, jwks: Some("http://127.0.0.1:1/jwks.json".into()), ..AuthConfig::default() };
    let err = Authenticator::new(&cfg, &resolver()).await.expect_err("unreachable");
    assert!(matches!(err, AuthError::Jwks { .. }), "{err:?}");
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        jwks: Some(format!("file:{}", temp_file("jwks-empty.json", "{\"keys\": []}"))),
        ..AuthConfig::default()
    };
    let err = Authenticator::new(&cfg, &resolver()).await.expect_err("no keys");
    assert!(err.to_string().contains("no usable"), "{err}");
}

async fn api_key_auth(mode: AuthMode, prefix: &str) -> Authenticator {
    let cfg: AuthConfig = toml::from_str(&format!(
        r#"
mode = "{}"
api_keys = [
  {{ key = "env:{prefix}_REPORTS", user_id = "svc-reports" }},
  {{ key = "env:{prefix}_BILLING", user_id = "svc-billing" }},
]
"#,
        if mode == AuthMode::Jwt { "jwt" } else { "none" }
    ))
    .expect("config");
    std::env::set_var(format!("{prefix}_REPORTS"), "rk_live_reports_0123456789");
    std::env::set_var(format!("{prefix}_BILLING"), "rk_live_billing_0123456789");
    Authenticator::new(&cfg, &resolver()).await.expect("authenticator")
}

#[tokio::test]
async fn api_keys_via_bearer_and_oxp_header() {
    let auth = api_key_auth(AuthMode::Jwt, "OTC_AUTH_KEYS_JWT").await;
    let c = otc(&auth, &bearer("rk_live_reports_0123456789")).expect("bearer");
    assert_eq!(c, Caller::ApiKey { user_id: "svc-reports".into() });
    assert_eq!(c.claims(), &Value::Null);
    let c = otc(&auth, &api_key_header("rk_live_billing_0123456789")).expect("header");
    assert_eq!(c.authenticated_user(), Some("svc-billing"));

    for wrong in ["rk_live_reports_012345678", "rk_live_reports_01234567890", "nope"] {
        let err = otc(&auth, &bearer(wrong)).expect_err(wrong);
        assert!(matches!(err, AuthError::Invalid(_)), "{err:?}");
        assert!(!err.to_string().contains(wrong));
        let err = otc(&auth, &api_key_header(wrong)).expect_err(wrong);
        assert!(matches!(err, AuthError::Invalid(_)), "{err:?}");
        assert!(!err.to_string().contains(wrong));
    }
    assert!(matches!(otc(&auth, &HeaderMap::new()), Err(AuthError::Missing)));
    let mut basic = HeaderMap::new();
    basic.insert(http::header::AUTHORIZATION, HeaderValue::from_static("Basic dXNlcjpwYXNz"));
    assert!(matches!(otc(&auth, &basic), Err(AuthError::Invalid(_))));
    let mut twice = bearer("rk_live_reports_0123456789");
    twice.append(http::header::AUTHORIZATION, HeaderValue::from_static("Bearer other"));
    assert!(matches!(otc(&auth, &twice), Err(AuthError::Invalid(_))));
}

#[tokio::test]
async fn mode_none_is_anonymous_but_api_keys_identify() {
    let auth = api_key_auth(AuthMode::None, "OTC_AUTH_KEYS_NONE").await;
    assert_eq!(auth.mode(), AuthMode::None);
    let c = otc(&auth, &HeaderMap::new()).expect("anonymous");
    assert_eq!(c, Caller::Anonymous);
    let c = otc(&auth, &bearer("whatever-this-is")).expect("ignored");
    assert_eq!(c, Caller::Anonymous);
    let c = otc(&auth, &bearer("rk_live_reports_0123456789")).expect("key");
    assert_eq!(c, Caller::ApiKey { user_id: "svc-reports".into() });
    // An explicit OXP-API-Key that is wrong is refused even here.
    assert!(matches!(otc(&auth, &api_key_header("wrong")), Err(AuthError::Invalid(_))));

    // The default config: everyone anonymous.
    let auth = Authenticator::new(&AuthConfig::default(), &resolver()).await.expect("default");
    assert_eq!(otc(&auth, &HeaderMap::new()).expect("anon"), Caller::Anonymous);
}

#[tokio::test]
async fn mixed_hs256_and_api_keys() {
    std::env::set_var("OTC_AUTH_MIXED_KEY", "mixed-service-key-123456");
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        hs256_secret: Some(env_ref("OTC_AUTH_MIXED_HS", HS_SECRET)),
        api_keys: toml::from_str::<AuthConfig>("api_keys = [{ key = \"env:OTC_AUTH_MIXED_KEY\", user_id = \"svc\" }]")
            .expect("keys")
            .api_keys,
        audience: Some("otc-gateway".into()),
        ..AuthConfig::default()
    };
    let auth = Authenticator::new(&cfg, &resolver()).await.expect("authenticator");
    assert_eq!(otc(&auth, &bearer("mixed-service-key-123456")).expect("key").kind(), "api_key");
    assert_eq!(otc(&auth, &bearer(&hs256(&claims(json!({})), HS_SECRET.as_bytes()))).expect("jwt").kind(), "jwt");
    assert!(matches!(otc(&auth, &bearer("not-a-key")), Err(AuthError::Invalid(_))));
}

#[tokio::test]
async fn configuration_errors() {
    let res = resolver();
    // JWT settings with mode none: a likely mistake.
    let cfg = AuthConfig { hs256_secret: Some(env_ref("OTC_AUTH_CFG_A", HS_SECRET)), ..AuthConfig::default() };
    assert!(matches!(Authenticator::new(&cfg, &res).await, Err(AuthError::Config(_))));
    // mode jwt with nothing to verify against.
    let cfg = AuthConfig { mode: AuthMode::Jwt, ..AuthConfig::default() };
    assert!(matches!(Authenticator::new(&cfg, &res).await, Err(AuthError::Config(_))));
    // A secret that cannot be resolved names the reference.
    let cfg = AuthConfig {
        mode: AuthMode::Jwt,
        hs256_secret: Some(SecretRef::Env { name: "OTC_AUTH_CFG_UNSET".into() }),
        ..AuthConfig::default()
    };
    let err = Authenticator::new(&cfg, &res).await.expect_err("unset");
    assert!(matches!(err, AuthError::Secret { .. }), "{err:?}");
    assert!(err.to_string().contains("OTC_AUTH_CFG_UNSET"), "{err}");
    // Per-user references make no sense for gateway-wide keys.
    let cfg: AuthConfig =
        toml::from_str("mode = \"jwt\"\napi_keys = [{ key = \"env:K_{user_id}\", user_id = \"a\" }]").expect("parses");
    assert!(matches!(Authenticator::new(&cfg, &res).await, Err(AuthError::Config(_))));
    // A bad jwks setting.
    let cfg = AuthConfig { mode: AuthMode::Jwt, jwks: Some("/etc/jwks.json".into()), ..AuthConfig::default() };
    assert!(matches!(Authenticator::new(&cfg, &res).await, Err(AuthError::Config(_))));
}

#[tokio::test]
async fn nothing_secret_in_debug_output() {
    let auth = api_key_auth(AuthMode::Jwt, "OTC_AUTH_DEBUG").await;
    let shown = format!("{auth:?}");
    assert!(!shown.contains("rk_live"), "{shown}");
    assert!(shown.contains("svc-reports"), "{shown}");
    let hs = hs_auth("OTC_AUTH_DEBUG_HS").await;
    let shown = format!("{hs:?} {hs:#?}");
    assert!(!shown.contains(HS_SECRET), "{shown}");
    assert!(!shown.contains("test-hs256"), "{shown}");
}

/// A properly signed HS256 token whose protected header is `header`, written
/// as is (so it may hold anything, `crit` included).
fn hs256_with_header(header: &str, claims: &Value) -> String {
    let message = format!("{}.{}", URL_SAFE_NO_PAD.encode(header), URL_SAFE_NO_PAD.encode(claims.to_string()));
    let key = EncodingKey::from_secret(HS_SECRET.as_bytes());
    let signature = jsonwebtoken::crypto::sign(message.as_bytes(), &key, Algorithm::HS256).expect("sign");
    format!("{message}.{signature}")
}

/// Headers naming critical extensions (RFC 7515 section 4.1.11), none of which
/// the gateway understands: every one is refused, the empty list, `null` and
/// malformed values and an escaped key included.
const CRIT_HEADERS: [&str; 7] = [
    r#"{"alg":"HS256","typ":"JWT","crit":["exp"],"exp":1}"#,
    r#"{"alg":"HS256","typ":"JWT","crit":["urn:x"],"urn:x":true}"#,
    r#"{"alg":"HS256","crit":[]}"#,
    r#"{"alg":"HS256","crit":null}"#,
    r#"{"alg":"HS256","crit":"exp"}"#,
    r#"{"alg":"HS256","crit":[1]}"#,
    r#"{"alg":"HS256","cr\u0069t":["urn:x"]}"#,
];

#[tokio::test]
async fn a_token_with_a_crit_header_is_refused() {
    let auth = hs_auth("OTC_AUTH_HS_CRIT").await;
    let good = claims(json!({}));
    // The same header without `crit`, signed the same way, is accepted.
    let plain = hs256_with_header(r#"{"alg":"HS256","typ":"JWT"}"#, &good);
    assert_eq!(otc(&auth, &bearer(&plain)).expect("valid").authenticated_user(), Some("alice"));
    for header in CRIT_HEADERS {
        let token = hs256_with_header(header, &good);
        let err = rejected(&auth, &token);
        assert!(matches!(&err, AuthError::Invalid(_)), "{header}: {err:?}");
        assert_eq!(err.public_message(), "invalid credentials", "{header}");
    }
}

#[tokio::test]
async fn a_token_with_a_crit_header_gets_401_at_the_gateway() {
    let echo = common::tool("Calc.Echo", "1.0.0", json!({"type": "object"}));
    let server = common::ToolServer::start(common::catalog(vec![echo])).await;
    let gw = common::GatewayConfig::new()
        .upstream("tools", &server.url())
        .raw("[auth]\nmode = \"jwt\"\nhs256_secret = \"env:AUTH_CRIT_SECRET\"\naudience = \"otc-gateway\"\n")
        .start_with_env(&[("AUTH_CRIT_SECRET", HS_SECRET)])
        .await;
    let call = Bytes::from_static(br#"{"request":{"tool_id":"Calc.Echo@1.0.0","input":{"x":1}}}"#);
    let send = |method: &'static str, path: &'static str, token: String| {
        let body = if method == "POST" { call.clone() } else { Bytes::new() };
        let addr = gw.addr;
        async move {
            let auth = format!("Bearer {token}");
            let headers = [("authorization", auth.as_str()), ("content-type", "application/json")];
            common::send_with_headers(addr, method, path, body, &headers).await
        }
    };
    let good = claims(json!({}));
    let plain = hs256_with_header(r#"{"alg":"HS256","typ":"JWT"}"#, &good);
    let auth = jwt::bearer(&plain);
    gw.wait_listed(&[("authorization", &auth)], "Calc.Echo@1.0.0").await;
    send("POST", "/tools/call", plain.clone()).await.expect_status(200);
    assert_eq!(server.call_count(), 1);
    for header in CRIT_HEADERS {
        let token = hs256_with_header(header, &good);
        for (method, path) in [("POST", "/tools/call"), ("GET", "/tools")] {
            let resp = send(method, path, token.clone()).await;
            assert_eq!(resp.status, 401, "{method} {path} with {header}: {}", resp.text());
            assert!(resp.header("www-authenticate").is_some_and(|c| c.starts_with("Bearer")), "{header}");
            let signature = token.rsplit('.').next().expect("a signature");
            assert!(!resp.text().contains(signature) && !resp.text().contains(&token), "{}", resp.text());
        }
    }
    assert_eq!(server.call_count(), 1, "a refused token never reaches the tool");
}

#[tokio::test]
async fn a_fractional_numeric_date_is_read_as_seconds() {
    // RFC 7519 allows a NumericDate that is not an integer.
    let auth = hs_auth("OTC_AUTH_HS_FRACTION").await;
    let later = format!("{}.5", now() + 600);
    let exp: Value = serde_json::from_str(&later).expect("a number");
    let token = hs256_with_header(r#"{"alg":"HS256"}"#, &claims(json!({ "exp": exp })));
    assert!(otc(&auth, &bearer(&token)).is_ok());
    let earlier = format!("{}.25", now() - 3600);
    let token =
        hs256(&claims(json!({"exp": serde_json::from_str::<Value>(&earlier).expect("n")})), HS_SECRET.as_bytes());
    assert!(matches!(rejected(&auth, &token), AuthError::Expired));
    let token = hs256(&claims(json!({"nbf": (now() + 3600) as f64 + 0.5})), HS_SECRET.as_bytes());
    assert!(matches!(rejected(&auth, &token), AuthError::NotYetValid));
    for bad in [json!("soon"), json!(-1), json!(true), json!(1e300)] {
        let token = hs256(&claims(json!({"exp": bad})), HS_SECRET.as_bytes());
        assert!(matches!(&rejected(&auth, &token), AuthError::Invalid(r) if r.contains("exp")), "{bad}");
    }
}
