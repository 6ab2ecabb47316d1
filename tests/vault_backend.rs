//! The secret resolver against real environment variables, real files and
//! the fake KV v2 server (a real HTTP server on a real socket).

#[path = "common/kv2.rs"]
mod kv2;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use kv2::Kv2Server;
use otc_gateway::config::{SecretRef, VaultConfig};
use otc_gateway::vault::{SecretResolver, VaultError};
use serde_json::json;

const TOKEN: &str = "hvs.test-root-token-0123456789";

fn r(s: &str) -> SecretRef {
    SecretRef::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// A resolver for `server`, the token in a fresh env var.
fn resolver(server: &Kv2Server, env_name: &str, ttl: Duration, timeout: Duration) -> SecretResolver {
    std::env::set_var(env_name, TOKEN);
    let mut cfg = VaultConfig::new(server.url(), SecretRef::Env { name: env_name.to_owned() });
    cfg.cache_ttl = ttl;
    SecretResolver::new(Some(cfg), timeout).expect("resolver")
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("otc-vault-backend-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// No error message may carry the token or a secret value.
fn assert_clean(err: &VaultError, values: &[&str]) {
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(TOKEN), "{shown}");
    for v in values {
        assert!(!shown.contains(v), "{shown} contains {v}");
    }
}

#[tokio::test]
async fn reads_a_field_with_the_token_header() {
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/tools/twilio", json!({"api_key": "twilio-key-123", "sid": "AC1"}));
    let res = resolver(&server, "OTC_VB_TOKEN_GOOD", Duration::from_secs(60), Duration::from_secs(2));
    let v = res.resolve(&r("vault:secret/tools/twilio#api_key"), None).await.expect("read");
    assert_eq!(v.expose(), "twilio-key-123");
    assert_eq!(server.request_paths(), vec!["/v1/secret/data/tools/twilio".to_owned()]);
    let stats = res.stats();
    assert_eq!((stats.requests_ok, stats.requests_error), (1, 0));
}

#[tokio::test]
async fn a_bad_token_is_forbidden() {
    let server = Kv2Server::start("the-real-token").await;
    server.put("secret/tools/twilio", json!({"api_key": "twilio-key-123"}));
    let res = resolver(&server, "OTC_VB_TOKEN_BAD", Duration::from_secs(60), Duration::from_secs(2));
    let err = res.resolve(&r("vault:secret/tools/twilio#api_key"), None).await.expect_err("403");
    assert!(matches!(err, VaultError::Forbidden { .. }), "{err:?}");
    assert!(err.to_string().contains("vault:secret/tools/twilio#api_key"), "{err}");
    assert_clean(&err, &["twilio-key-123", "the-real-token"]);
    assert!(!err.is_transient());
    assert_eq!(res.stats().requests_error, 1);
}

#[tokio::test]
async fn a_missing_path_is_not_found() {
    let server = Kv2Server::start(TOKEN).await;
    let res = resolver(&server, "OTC_VB_TOKEN_404", Duration::from_secs(60), Duration::from_secs(2));
    let err = res.resolve(&r("vault:secret/nope#x"), None).await.expect_err("404");
    assert!(matches!(err, VaultError::NotFound { .. }), "{err:?}");
    // An unknown mount is a 404 too.
    let err = res.resolve(&r("vault:nomount/x#y"), None).await.expect_err("404");
    assert!(matches!(err, VaultError::NotFound { .. }), "{err:?}");
}

#[tokio::test]
async fn a_deleted_secret_is_not_found_and_not_served_stale() {
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/a", json!({"k": "v1"}));
    let res = resolver(&server, "OTC_VB_TOKEN_DEL", Duration::ZERO, Duration::from_secs(2));
    assert_eq!(res.resolve(&r("vault:secret/a#k"), None).await.expect("read").expose(), "v1");
    server.delete("secret/a");
    let err = res.resolve(&r("vault:secret/a#k"), None).await.expect_err("deleted");
    assert!(matches!(err, VaultError::NotFound { .. }), "{err:?}");
    // The cache entry was dropped: an outage now cannot resurrect it.
    server.set_down(true);
    let err = res.resolve(&r("vault:secret/a#k"), None).await.expect_err("down");
    assert!(matches!(err, VaultError::Unavailable { .. }), "{err:?}");
    assert_eq!(res.stats().stale_served, 0);
}

#[tokio::test]
async fn a_missing_field_is_named() {
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/tools/twilio", json!({"api_key": "k", "obj": {"a": 1}, "port": 8080}));
    let res = resolver(&server, "OTC_VB_TOKEN_FIELD", Duration::from_secs(60), Duration::from_secs(2));
    let err = res.resolve(&r("vault:secret/tools/twilio#token"), None).await.expect_err("field");
    match &err {
        VaultError::MissingField { field, .. } => assert_eq!(field, "token"),
        other => panic!("{other:?}"),
    }
    assert_clean(&err, &["\"k\""]);
    let err = res.resolve(&r("vault:secret/tools/twilio#obj"), None).await.expect_err("object");
    assert!(matches!(err, VaultError::FieldNotString { .. }), "{err:?}");
    // Numbers are stringified.
    let v = res.resolve(&r("vault:secret/tools/twilio#port"), None).await.expect("number");
    assert_eq!(v.expose(), "8080");
}

#[tokio::test]
async fn values_are_cached_for_the_ttl_and_fields_share_a_fetch() {
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/tools/twilio", json!({"api_key": "k1", "sid": "s1"}));
    let res = resolver(&server, "OTC_VB_TOKEN_CACHE", Duration::from_millis(300), Duration::from_secs(2));
    let api_key = r("vault:secret/tools/twilio#api_key");
    let sid = r("vault:secret/tools/twilio#sid");
    assert_eq!(res.resolve(&api_key, None).await.expect("1").expose(), "k1");
    assert_eq!(res.resolve(&api_key, None).await.expect("2").expose(), "k1");
    assert_eq!(res.resolve(&sid, None).await.expect("3").expose(), "s1");
    assert_eq!(server.request_count(), 1, "second and third reads come from the cache");
    assert_eq!(res.stats().cache_hits, 2);

    // A new version is seen once the TTL is over.
    server.put("secret/tools/twilio", json!({"api_key": "k2", "sid": "s2"}));
    assert_eq!(res.resolve(&api_key, None).await.expect("cached").expose(), "k1");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(res.resolve(&api_key, None).await.expect("refetched").expose(), "k2");
    assert_eq!(server.request_count(), 2);
}

#[tokio::test]
async fn a_cached_value_is_served_stale_while_the_vault_is_sealed() {
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/tools/twilio", json!({"api_key": "k1"}));
    let res = resolver(&server, "OTC_VB_TOKEN_STALE", Duration::from_millis(50), Duration::from_secs(2));
    let api_key = r("vault:secret/tools/twilio#api_key");
    assert_eq!(res.resolve(&api_key, None).await.expect("first").expose(), "k1");
    server.set_down(true);
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(res.resolve(&api_key, None).await.expect("stale").expose(), "k1");
    assert_eq!(res.resolve(&api_key, None).await.expect("stale again").expose(), "k1");
    let stats = res.stats();
    assert_eq!(stats.stale_served, 2);
    assert_eq!(stats.requests_ok, 1);
    assert_eq!(stats.requests_error, 2);
    assert_eq!(server.request_count(), 3, "an expired entry is always re-asked");

    // Back up: fresh values again, and no stale serving.
    server.put("secret/tools/twilio", json!({"api_key": "k2"}));
    server.set_down(false);
    assert_eq!(res.resolve(&api_key, None).await.expect("fresh").expose(), "k2");
    assert_eq!(res.stats().stale_served, 2);
}

#[tokio::test]
async fn a_cached_value_is_served_stale_while_the_vault_is_unreachable() {
    let mut server = Kv2Server::start(TOKEN).await;
    server.put("secret/x", json!({"f": "v"}));
    let res = resolver(&server, "OTC_VB_TOKEN_UNREACH", Duration::ZERO, Duration::from_secs(2));
    let f = r("vault:secret/x#f");
    assert_eq!(res.resolve(&f, None).await.expect("first").expose(), "v");
    server.set_unreachable(true);
    assert_eq!(res.resolve(&f, None).await.expect("dropped connection").expose(), "v");
    server.stop().await;
    assert_eq!(res.resolve(&f, None).await.expect("connection refused").expose(), "v");
    assert_eq!(res.stats().stale_served, 2);
}

#[tokio::test]
async fn never_fetched_and_sealed_is_unavailable_at_once() {
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/x", json!({"f": "v"}));
    server.set_down(true);
    let res = resolver(&server, "OTC_VB_TOKEN_SEALED", Duration::from_secs(60), Duration::from_secs(5));
    let started = Instant::now();
    let err = res.resolve(&r("vault:secret/x#f"), None).await.expect_err("sealed");
    assert!(started.elapsed() < Duration::from_secs(1));
    match &err {
        VaultError::Unavailable { reason, .. } => assert!(reason.contains("503"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(err.is_transient());
    assert_clean(&err, &["\"v\""]);
}

#[tokio::test]
async fn never_fetched_and_hung_is_bounded_by_the_timeout() {
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/x", json!({"f": "v"}));
    server.set_hang(true);
    let res = resolver(&server, "OTC_VB_TOKEN_HANG", Duration::from_secs(60), Duration::from_millis(300));
    let started = Instant::now();
    let err = res.resolve(&r("vault:secret/x#f"), None).await.expect_err("hung");
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(2), "{took:?}");
    match &err {
        VaultError::Unavailable { reason, .. } => assert!(reason.contains("timed out"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn never_fetched_and_refused_is_unavailable_at_once() {
    let mut server = Kv2Server::start(TOKEN).await;
    let res = resolver(&server, "OTC_VB_TOKEN_REFUSED", Duration::from_secs(60), Duration::from_secs(5));
    server.stop().await;
    let started = Instant::now();
    let err = res.resolve(&r("vault:secret/x#f"), None).await.expect_err("refused");
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(matches!(err, VaultError::Unavailable { .. }), "{err:?}");
}

#[tokio::test]
async fn per_user_paths_substitute_the_user_id() {
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/oauth/google/alice", json!({"access_token": "ya29.alice"}));
    server.put("secret/oauth/google/a b@c", json!({"access_token": "ya29.spaced"}));
    let res = resolver(&server, "OTC_VB_TOKEN_USER", Duration::from_secs(60), Duration::from_secs(2));
    let google = r("vault:secret/oauth/google/{user_id}#access_token");
    assert_eq!(res.resolve(&google, Some("alice")).await.expect("alice").expose(), "ya29.alice");
    assert_eq!(res.resolve(&google, Some("a b@c")).await.expect("encoded").expose(), "ya29.spaced");
    let err = res.resolve(&google, Some("bob")).await.expect_err("no token for bob");
    assert!(matches!(err, VaultError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("oauth/google/bob"), "{err}");
    let err = res.resolve(&google, None).await.expect_err("anonymous");
    assert!(matches!(err, VaultError::UserIdRequired { .. }), "{err:?}");

    let before = server.request_count();
    for hostile in ["../alice", "alice/../../x", "x#access_token", "..", "a\r\nX-Vault-Token: y"] {
        let err = res.resolve(&google, Some(hostile)).await.expect_err(hostile);
        assert!(matches!(err, VaultError::BadUserId { .. }), "{hostile}: {err:?}");
    }
    assert_eq!(server.request_count(), before, "a refused user id never reaches the vault");
}

#[tokio::test]
async fn the_token_can_come_from_a_file_and_is_reread() {
    let server = Kv2Server::start("token-one").await;
    server.put("secret/x", json!({"f": "v"}));
    let dir = temp_dir("token-file");
    let token_file = dir.join("vault-token");
    std::fs::write(&token_file, "token-one\n").expect("write");
    let mut cfg = VaultConfig::new(server.url(), SecretRef::File { path: token_file.display().to_string() });
    cfg.cache_ttl = Duration::ZERO;
    let res = SecretResolver::new(Some(cfg), Duration::from_secs(2)).expect("resolver");
    assert_eq!(res.resolve(&r("vault:secret/x#f"), None).await.expect("read").expose(), "v");

    // Rotation: the server now wants a new token, and the file has it.
    server.set_token("token-two");
    std::fs::write(&token_file, "token-two\n").expect("write");
    assert_eq!(res.resolve(&r("vault:secret/x#f"), None).await.expect("rotated").expose(), "v");

    // Revoked: 403 even with a cached value (an answer, not an outage).
    server.set_token("token-three");
    let err = res.resolve(&r("vault:secret/x#f"), None).await.expect_err("revoked");
    assert!(matches!(err, VaultError::Forbidden { .. }), "{err:?}");
    assert_clean(&err, &["token-one", "token-two", "token-three"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_missing_token_fails_at_startup() {
    let cfg = VaultConfig::new("http://127.0.0.1:8200", SecretRef::Env { name: "OTC_VB_TOKEN_NEVER_SET".into() });
    let err = SecretResolver::new(Some(cfg), Duration::from_secs(1)).expect_err("no token");
    assert!(matches!(err, VaultError::Token { .. }), "{err:?}");
    assert!(err.to_string().contains("OTC_VB_TOKEN_NEVER_SET"), "{err}");
}

#[tokio::test]
async fn env_and_file_references_through_the_resolver() {
    std::env::set_var("OTC_VB_OPENAI_API_KEY", "sk-test-env");
    let res = SecretResolver::new(None, Duration::from_secs(1)).expect("resolver");
    let v = res.resolve(&r("env:OTC_VB_OPENAI_API_KEY"), None).await.expect("env");
    assert_eq!(v.expose(), "sk-test-env");
    let err = res.resolve(&r("env:OTC_VB_UNSET_VAR"), None).await.expect_err("unset");
    assert!(matches!(err, VaultError::EnvMissing { .. }), "{err:?}");

    let dir = temp_dir("file-refs");
    let key = dir.join("api-key");
    std::fs::write(&key, "file-secret-value\n").expect("write");
    let v = res.resolve(&r(&format!("file:{}", key.display())), None).await.expect("file");
    assert_eq!(v.expose(), "file-secret-value");
    let err = res.resolve(&r(&format!("file:{}", dir.join("missing").display())), None).await.expect_err("missing");
    assert!(matches!(err, VaultError::FileUnreadable { kind: std::io::ErrorKind::NotFound, .. }));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_fake_answers_like_kv_v2() {
    // Guard the fake itself: the shapes the real server documents.
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/tools/twilio", json!({"api_key": "k"}));
    server.put("secret/tools/twilio", json!({"api_key": "k2"}));
    let get = |path: &str, token: Option<&str>| {
        let url = format!("{}{}", server.url(), path);
        let token = token.map(str::to_owned);
        async move { raw_get(&url, token.as_deref()).await }
    };
    let (status, body) = get("/v1/secret/data/tools/twilio", Some(TOKEN)).await;
    assert_eq!(status, 200);
    assert_eq!(body["data"]["data"], json!({"api_key": "k2"}));
    assert_eq!(body["data"]["metadata"]["version"], 2);
    assert_eq!(body["data"]["metadata"]["deletion_time"], "");
    assert_eq!(body["data"]["metadata"]["destroyed"], false);
    assert!(body["data"]["metadata"]["created_time"].as_str().is_some_and(|t| t.ends_with('Z')));
    for key in ["request_id", "lease_id", "renewable", "lease_duration", "wrap_info", "warnings", "auth"] {
        assert!(body.get(key).is_some(), "{key} missing");
    }
    let (status, body) = get("/v1/secret/data/tools/twilio?version=1", Some(TOKEN)).await;
    assert_eq!((status, &body["data"]["data"]["api_key"]), (200, &json!("k")));
    let (status, body) = get("/v1/secret/data/tools/twilio", None).await;
    assert_eq!((status, body), (403, json!({"errors": ["permission denied"]})));
    let (status, body) = get("/v1/secret/data/tools/twilio", Some("wrong")).await;
    assert_eq!((status, body), (403, json!({"errors": ["permission denied"]})));
    let (status, body) = get("/v1/secret/data/nope", Some(TOKEN)).await;
    assert_eq!((status, body), (404, json!({"errors": []})));
    server.delete("secret/tools/twilio");
    let (status, body) = get("/v1/secret/data/tools/twilio", Some(TOKEN)).await;
    assert_eq!(status, 404);
    assert_eq!(body["data"]["data"], json!(null));
    assert!(body["data"]["metadata"]["deletion_time"].as_str().is_some_and(|t| !t.is_empty()));
    server.set_down(true);
    let (status, body) = get("/v1/secret/data/tools/twilio", Some(TOKEN)).await;
    assert_eq!((status, body), (503, json!({"errors": ["Vault is sealed"]})));
}

/// A plain HTTP/1.1 GET over a fresh connection, for checking the fake.
async fn raw_get(url: &str, token: Option<&str>) -> (u16, serde_json::Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("http url");
    let (host, path) = rest.split_at(rest.find('/').expect("path"));
    let mut stream = tokio::net::TcpStream::connect(host).await.expect("connect");
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if let Some(t) = token {
        req.push_str(&format!("X-Vault-Token: {t}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8(buf).expect("utf8");
    let status: u16 = text[9..12].parse().expect("status");
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(serde_json::Value::Null))
}
