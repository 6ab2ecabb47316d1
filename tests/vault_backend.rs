//! The secret resolver against real environment variables, real files and a
//! real Vault-API server: OpenBao's `bao server -dev` (`common::openbao`),
//! which the tests seal, freeze (SIGSTOP: a hung vault) and kill.
//!
//! One test still uses the KV v2 stand-in (`common::kv2`): connections
//! dropped without an answer, a network fault no real server produces on
//! demand. The last test checks that the stand-in answers as OpenBao does.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::kv2::Kv2Server;
use common::openbao::OpenBao;
use otc_gateway::config::{SecretRef, VaultConfig};
use otc_gateway::vault::{SecretResolver, VaultError};
use serde_json::{json, Value};

fn r(s: &str) -> SecretRef {
    SecretRef::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
}

/// A resolver for the vault at `url` with `token`, put in a fresh env var.
fn resolver_for(url: &str, token: &str, env_name: &str, ttl: Duration, timeout: Duration) -> SecretResolver {
    std::env::set_var(env_name, token);
    let mut cfg = VaultConfig::new(url, SecretRef::Env { name: env_name.to_owned() });
    cfg.cache_ttl = ttl;
    SecretResolver::new(Some(cfg), timeout).expect("resolver")
}

/// A resolver for `bao` with a gateway's token ([`common::openbao::GATEWAY_POLICY`]);
/// the token too, to look for its requests in the audit log.
async fn resolver(bao: &OpenBao, env_name: &str, ttl: Duration, timeout: Duration) -> (SecretResolver, String) {
    let token = bao.gateway_token().await;
    (resolver_for(&bao.url(), &token, env_name, ttl, timeout), token)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("otc-vault-backend-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// No error message may carry a token or a secret value.
fn assert_clean(err: &VaultError, values: &[&str]) {
    let shown = format!("{err} {err:?}");
    for v in values {
        assert!(!shown.contains(v), "{shown} contains {v}");
    }
}

#[tokio::test]
async fn reads_a_field_with_the_token_header() {
    let bao = OpenBao::start().await;
    bao.put("secret/tools/twilio", json!({"api_key": "twilio-key-123", "sid": "AC1"})).await;
    let (res, token) = resolver(&bao, "OTC_VB_TOKEN_GOOD", Duration::from_secs(60), Duration::from_secs(2)).await;
    let v = res.resolve(&r("vault:secret/tools/twilio#api_key"), None).await.expect("read");
    assert_eq!(v.expose(), "twilio-key-123");
    assert_eq!(bao.reads_by(&token).await, vec!["secret/data/tools/twilio".to_owned()], "one read, with the token");
    let stats = res.stats();
    assert_eq!((stats.requests_ok, stats.requests_error), (1, 0));
}

#[tokio::test]
async fn a_bad_token_or_a_narrow_policy_is_forbidden() {
    let bao = OpenBao::start().await;
    bao.put("secret/tools/twilio", json!({"api_key": "twilio-key-123"})).await;
    let reference = r("vault:secret/tools/twilio#api_key");

    // A token the vault never issued.
    let res = resolver_for(
        &bao.url(),
        "s.not-a-token-this-vault-issued",
        "OTC_VB_TOKEN_BAD",
        Duration::from_secs(60),
        Duration::from_secs(2),
    );
    let err = res.resolve(&reference, None).await.expect_err("403");
    assert!(matches!(err, VaultError::Forbidden { .. }), "{err:?}");
    assert!(err.to_string().contains("vault:secret/tools/twilio#api_key"), "{err}");
    assert_clean(&err, &["twilio-key-123", "s.not-a-token", bao.root_token()]);
    assert!(!err.is_transient());
    assert_eq!(res.stats().requests_error, 1);

    // A real token whose policy covers another path only.
    bao.put_policy("maps-only", r#"path "secret/data/tools/maps" { capabilities = ["read"] }"#).await;
    let narrow = bao.create_token(&["maps-only"]).await;
    let res = resolver_for(&bao.url(), &narrow, "OTC_VB_TOKEN_NARROW", Duration::from_secs(60), Duration::from_secs(2));
    let err = res.resolve(&reference, None).await.expect_err("403");
    assert!(matches!(err, VaultError::Forbidden { .. }), "{err:?}");
    assert_clean(&err, &["twilio-key-123", &narrow]);
    assert_eq!(bao.reads_by(&narrow).await, vec!["secret/data/tools/twilio".to_owned()], "asked, and refused");
}

#[tokio::test]
async fn a_missing_path_is_not_found() {
    let bao = OpenBao::start().await;
    let res =
        resolver_for(&bao.url(), bao.root_token(), "OTC_VB_TOKEN_404", Duration::from_secs(60), Duration::from_secs(2));
    let err = res.resolve(&r("vault:secret/nope#x"), None).await.expect_err("404");
    assert!(matches!(err, VaultError::NotFound { .. }), "{err:?}");
    // An unknown mount is a 404 too ("no handler for route") for a token
    // that may read anything...
    let err = res.resolve(&r("vault:nomount/x#y"), None).await.expect_err("404");
    assert!(matches!(err, VaultError::NotFound { .. }), "{err:?}");
    // ...and a 403 for one whose policy does not reach it, as Vault answers.
    let (res, _) = resolver(&bao, "OTC_VB_TOKEN_404_POLICY", Duration::from_secs(60), Duration::from_secs(2)).await;
    let err = res.resolve(&r("vault:secret/nope#x"), None).await.expect_err("404");
    assert!(matches!(err, VaultError::NotFound { .. }), "{err:?}");
    let err = res.resolve(&r("vault:nomount/x#y"), None).await.expect_err("403");
    assert!(matches!(err, VaultError::Forbidden { .. }), "{err:?}");
}

#[tokio::test]
async fn a_deleted_secret_is_not_found_and_not_served_stale() {
    let bao = OpenBao::start().await;
    bao.put("secret/a", json!({"k": "v1"})).await;
    let (res, _) = resolver(&bao, "OTC_VB_TOKEN_DEL", Duration::ZERO, Duration::from_secs(2)).await;
    assert_eq!(res.resolve(&r("vault:secret/a#k"), None).await.expect("read").expose(), "v1");
    bao.delete("secret/a").await;
    let err = res.resolve(&r("vault:secret/a#k"), None).await.expect_err("deleted");
    assert!(matches!(err, VaultError::NotFound { .. }), "{err:?}");
    // The cache entry was dropped: an outage now cannot resurrect it.
    bao.seal().await;
    let err = res.resolve(&r("vault:secret/a#k"), None).await.expect_err("sealed");
    assert!(matches!(err, VaultError::Unavailable { .. }), "{err:?}");
    assert_eq!(res.stats().stale_served, 0);
}

#[tokio::test]
async fn a_missing_field_is_named() {
    let bao = OpenBao::start().await;
    bao.put("secret/tools/twilio", json!({"api_key": "k", "obj": {"a": 1}, "port": 8080})).await;
    let (res, _) = resolver(&bao, "OTC_VB_TOKEN_FIELD", Duration::from_secs(60), Duration::from_secs(2)).await;
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
    let bao = OpenBao::start().await;
    bao.put("secret/tools/twilio", json!({"api_key": "k1", "sid": "s1"})).await;
    let (res, token) = resolver(&bao, "OTC_VB_TOKEN_CACHE", Duration::from_millis(300), Duration::from_secs(2)).await;
    let api_key = r("vault:secret/tools/twilio#api_key");
    let sid = r("vault:secret/tools/twilio#sid");
    assert_eq!(res.resolve(&api_key, None).await.expect("1").expose(), "k1");
    assert_eq!(res.resolve(&api_key, None).await.expect("2").expose(), "k1");
    assert_eq!(res.resolve(&sid, None).await.expect("3").expose(), "s1");
    assert_eq!(bao.requests_by(&token).await.len(), 1, "second and third reads come from the cache");
    assert_eq!(res.stats().cache_hits, 2);

    // A new version is seen once the TTL is over.
    bao.put("secret/tools/twilio", json!({"api_key": "k2", "sid": "s2"})).await;
    assert_eq!(res.resolve(&api_key, None).await.expect("cached").expose(), "k1");
    // On purpose: the 300 ms cache TTL has to run out.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(res.resolve(&api_key, None).await.expect("refetched").expose(), "k2");
    assert_eq!(bao.requests_by(&token).await.len(), 2);
}

#[tokio::test]
async fn a_cached_value_is_served_stale_while_the_vault_is_sealed() {
    let bao = OpenBao::start().await;
    bao.put("secret/tools/twilio", json!({"api_key": "k1"})).await;
    let (res, token) = resolver(&bao, "OTC_VB_TOKEN_STALE", Duration::from_millis(50), Duration::from_secs(2)).await;
    let api_key = r("vault:secret/tools/twilio#api_key");
    assert_eq!(res.resolve(&api_key, None).await.expect("first").expose(), "k1");
    bao.seal().await;
    // On purpose: the 50 ms cache TTL has to run out.
    tokio::time::sleep(Duration::from_millis(80)).await;
    assert_eq!(res.resolve(&api_key, None).await.expect("stale").expose(), "k1");
    assert_eq!(res.resolve(&api_key, None).await.expect("stale again").expose(), "k1");
    let stats = res.stats();
    assert_eq!(stats.stale_served, 2);
    assert_eq!(stats.requests_ok, 1);
    // A sealed vault audits nothing: the resolver's own count says each
    // expired read asked it again (and got 503).
    assert_eq!(stats.requests_error, 2, "an expired entry is always re-asked");

    // Back up: fresh values again, and no stale serving.
    bao.unseal().await;
    bao.put("secret/tools/twilio", json!({"api_key": "k2"})).await;
    assert_eq!(res.resolve(&api_key, None).await.expect("fresh").expose(), "k2");
    assert_eq!(res.stats().stale_served, 2);
    assert_eq!(bao.requests_by(&token).await.len(), 2, "the first read and the one after unsealing");
}

#[tokio::test]
async fn a_cached_value_is_served_stale_while_the_vault_hangs_or_is_gone() {
    let mut bao = OpenBao::start().await;
    bao.put("secret/x", json!({"f": "v"})).await;
    let (res, _) = resolver(&bao, "OTC_VB_TOKEN_UNREACH", Duration::ZERO, Duration::from_millis(500)).await;
    let f = r("vault:secret/x#f");
    assert_eq!(res.resolve(&f, None).await.expect("first").expose(), "v");
    bao.freeze();
    assert_eq!(res.resolve(&f, None).await.expect("hung: after the timeout").expose(), "v");
    bao.thaw();
    bao.kill();
    assert_eq!(res.resolve(&f, None).await.expect("connection refused").expose(), "v");
    assert_eq!(res.stats().stale_served, 2, "{:?}", res.stats());
}

/// The stand-in: a vault whose connections are dropped without an answer
/// (a proxy or firewall resetting them). A real server does not do this on
/// demand.
#[tokio::test]
async fn a_cached_value_is_served_stale_while_connections_are_dropped() {
    const TOKEN: &str = "stand-in-token-0123456789";
    let server = Kv2Server::start(TOKEN).await;
    server.put("secret/x", json!({"f": "v"}));
    let res = resolver_for(&server.url(), TOKEN, "OTC_VB_TOKEN_DROPPED", Duration::ZERO, Duration::from_secs(2));
    let f = r("vault:secret/x#f");
    assert_eq!(res.resolve(&f, None).await.expect("first").expose(), "v");
    server.set_unreachable(true);
    assert_eq!(res.resolve(&f, None).await.expect("dropped connection").expose(), "v");
    assert_eq!(res.resolve(&f, None).await.expect("dropped again").expose(), "v");
    assert_eq!(res.stats().stale_served, 2);
    let before = server.request_count();
    server.set_unreachable(false);
    assert_eq!(res.resolve(&f, None).await.expect("back").expose(), "v");
    assert!(server.request_count() > before, "asked again once connections are answered");
    assert_eq!(res.stats().stale_served, 2);
}

#[tokio::test]
async fn never_fetched_and_sealed_is_unavailable_at_once() {
    let bao = OpenBao::start().await;
    bao.put("secret/x", json!({"f": "v"})).await;
    let (res, _) = resolver(&bao, "OTC_VB_TOKEN_SEALED", Duration::from_secs(60), Duration::from_secs(10)).await;
    bao.seal().await;
    let started = Instant::now();
    let err = res.resolve(&r("vault:secret/x#f"), None).await.expect_err("sealed");
    // A 503 is an answer: no waiting for the (10 s) timeout.
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    match &err {
        VaultError::Unavailable { reason, .. } => assert!(reason.contains("503"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(err.is_transient());
    assert_clean(&err, &["\"v\""]);
}

#[tokio::test]
async fn never_fetched_and_hung_is_bounded_by_the_timeout() {
    let bao = OpenBao::start().await;
    bao.put("secret/x", json!({"f": "v"})).await;
    let (res, _) = resolver(&bao, "OTC_VB_TOKEN_HANG", Duration::from_secs(60), Duration::from_millis(300)).await;
    bao.freeze();
    let started = Instant::now();
    let err = res.resolve(&r("vault:secret/x#f"), None).await.expect_err("hung");
    let took = started.elapsed();
    bao.thaw();
    assert!(took >= Duration::from_millis(250), "{took:?}");
    match &err {
        VaultError::Unavailable { reason, .. } => assert!(reason.contains("timed out"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // Thawed, the same read is answered.
    assert_eq!(res.resolve(&r("vault:secret/x#f"), None).await.expect("thawed").expose(), "v");
}

#[tokio::test]
async fn never_fetched_and_refused_is_unavailable_at_once() {
    let mut bao = OpenBao::start().await;
    let (res, _) = resolver(&bao, "OTC_VB_TOKEN_REFUSED", Duration::from_secs(60), Duration::from_secs(10)).await;
    bao.kill();
    let started = Instant::now();
    let err = res.resolve(&r("vault:secret/x#f"), None).await.expect_err("refused");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert!(matches!(err, VaultError::Unavailable { .. }), "{err:?}");
}

#[tokio::test]
async fn per_user_paths_substitute_the_user_id() {
    let bao = OpenBao::start().await;
    bao.put("secret/oauth/google/alice", json!({"access_token": "ya29.alice"})).await;
    bao.put("secret/oauth/google/a b@c", json!({"access_token": "ya29.spaced"})).await;
    let (res, token) = resolver(&bao, "OTC_VB_TOKEN_USER", Duration::from_secs(60), Duration::from_secs(2)).await;
    let google = r("vault:secret/oauth/google/{user_id}#access_token");
    assert_eq!(res.resolve(&google, Some("alice")).await.expect("alice").expose(), "ya29.alice");
    assert_eq!(res.resolve(&google, Some("a b@c")).await.expect("encoded").expose(), "ya29.spaced");
    let err = res.resolve(&google, Some("bob")).await.expect_err("no token for bob");
    assert!(matches!(err, VaultError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("oauth/google/bob"), "{err}");
    let err = res.resolve(&google, None).await.expect_err("anonymous");
    assert!(matches!(err, VaultError::UserIdRequired { .. }), "{err:?}");
    assert_eq!(
        bao.reads_by(&token).await,
        ["alice", "a b@c", "bob"].map(|u| format!("secret/data/oauth/google/{u}")),
        "each user's own path, decoded by the server as written"
    );

    let before = bao.requests_by(&token).await.len();
    for hostile in ["../alice", "alice/../../x", "x#access_token", "..", "a\r\nX-Vault-Token: y"] {
        let err = res.resolve(&google, Some(hostile)).await.expect_err(hostile);
        assert!(matches!(err, VaultError::BadUserId { .. }), "{hostile}: {err:?}");
    }
    assert_eq!(bao.requests_by(&token).await.len(), before, "a refused user id never reaches the vault");
}

#[tokio::test]
async fn the_token_can_come_from_a_file_and_is_reread() {
    let bao = OpenBao::start().await;
    bao.put("secret/x", json!({"f": "v"})).await;
    let (one, two) = (bao.gateway_token().await, bao.gateway_token().await);
    let dir = temp_dir("token-file");
    let token_file = dir.join("vault-token");
    std::fs::write(&token_file, format!("{one}\n")).expect("write");
    let mut cfg = VaultConfig::new(bao.url(), SecretRef::File { path: token_file.display().to_string() });
    cfg.cache_ttl = Duration::ZERO;
    let res = SecretResolver::new(Some(cfg), Duration::from_secs(2)).expect("resolver");
    assert_eq!(res.resolve(&r("vault:secret/x#f"), None).await.expect("read").expose(), "v");
    assert_eq!(bao.reads_by(&one).await.len(), 1);

    // Rotation: the first token is revoked and the file has the second.
    bao.revoke_token(&one).await;
    std::fs::write(&token_file, format!("{two}\n")).expect("write");
    assert_eq!(res.resolve(&r("vault:secret/x#f"), None).await.expect("rotated").expose(), "v");
    assert_eq!(bao.reads_by(&two).await.len(), 1, "the read after rotation used the new token");
    assert_eq!(bao.reads_by(&one).await.len(), 1, "and not the revoked one");

    // Revoked: 403 even with a cached value (an answer, not an outage).
    bao.revoke_token(&two).await;
    let err = res.resolve(&r("vault:secret/x#f"), None).await.expect_err("revoked");
    assert!(matches!(err, VaultError::Forbidden { .. }), "{err:?}");
    assert_clean(&err, &[&one, &two, "\"v\""]);
    assert_eq!(res.stats().stale_served, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_namespace_is_sent_as_x_vault_namespace() {
    let bao = OpenBao::start().await;
    bao.namespace_with_kv2("team-a").await;
    bao.put_in("team-a", "secret/tools/twilio", json!({"api_key": "from-team-a"})).await;
    bao.put("secret/tools/twilio", json!({"api_key": "from-the-root-namespace"})).await;
    let api_key = r("vault:secret/tools/twilio#api_key");

    std::env::set_var("OTC_VB_TOKEN_NS", bao.root_token());
    let mut cfg = VaultConfig::new(bao.url(), SecretRef::Env { name: "OTC_VB_TOKEN_NS".into() });
    cfg.namespace = Some("team-a".into());
    let res = SecretResolver::new(Some(cfg), Duration::from_secs(2)).expect("resolver");
    assert_eq!(res.resolve(&api_key, None).await.expect("in team-a").expose(), "from-team-a");

    let plain = resolver_for(
        &bao.url(),
        bao.root_token(),
        "OTC_VB_TOKEN_NO_NS",
        Duration::from_secs(60),
        Duration::from_secs(2),
    );
    assert_eq!(plain.resolve(&api_key, None).await.expect("root").expose(), "from-the-root-namespace");
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

/// What of an answer the stand-in must match: the status, and the body with
/// what differs per request (ids, times) replaced by whether it is set.
fn shape(status: u16, body: &Value) -> (u16, Value) {
    fn walk(v: &Value, key: &str) -> Value {
        match v {
            Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), walk(v, k))).collect()),
            Value::Array(items) => Value::Array(items.iter().map(|v| walk(v, key)).collect()),
            Value::String(s) if matches!(key, "request_id" | "created_time" | "updated_time" | "deletion_time") => {
                json!(if s.is_empty() { "" } else { "<set>" })
            }
            other => other.clone(),
        }
    }
    let mut body = walk(body, "");
    // Vault adds mount_type; OpenBao does not. The gateway reads neither.
    if let Value::Object(map) = &mut body {
        map.remove("mount_type");
    }
    (status, body)
}

/// The stand-in answers each request the gateway makes as OpenBao does:
/// the same requests to both, the same statuses and bodies.
#[tokio::test]
async fn the_stand_in_answers_as_openbao_does() {
    let bao = OpenBao::start().await;
    let fake = Kv2Server::start(bao.root_token()).await;
    let token = bao.root_token().to_owned();
    let requests: Vec<(&str, &str, &str, Option<Value>)> = vec![
        ("write v1", "POST", "secret/data/tools/twilio", Some(json!({"data": {"api_key": "k"}}))),
        ("write v2", "POST", "secret/data/tools/twilio", Some(json!({"data": {"api_key": "k2", "n": 1}}))),
        ("read", "GET", "secret/data/tools/twilio", None),
        ("read v1", "GET", "secret/data/tools/twilio?version=1", None),
        ("cas mismatch", "POST", "secret/data/tools/twilio", Some(json!({"data": {"a": "b"}, "options": {"cas": 1}}))),
        ("cas match", "POST", "secret/data/tools/twilio", Some(json!({"data": {"a": "c"}, "options": {"cas": 2}}))),
        ("encoded path", "POST", "secret/data/oauth/a%20b%40c%25d", Some(json!({"data": {"t": "x"}}))),
        ("read encoded", "GET", "secret/data/oauth/a%20b%40c%25d", None),
        ("cas 0, new", "POST", "secret/data/new", Some(json!({"data": {"a": "b"}, "options": {"cas": 0}}))),
        ("cas 0, exists", "POST", "secret/data/new", Some(json!({"data": {"a": "b"}, "options": {"cas": 0}}))),
        ("unknown path", "GET", "secret/data/nope", None),
        ("unknown mount", "GET", "nomount/data/x", None),
        ("soft delete", "DELETE", "secret/data/tools/twilio", None),
        ("read deleted", "GET", "secret/data/tools/twilio", None),
        ("destroy", "DELETE", "secret/metadata/new", None),
        ("read destroyed", "GET", "secret/data/new", None),
    ];
    for (what, method, path, body) in requests {
        let (real_status, real) = bao.api(method, path, body.clone()).await;
        let (fake_status, faked) = raw(&fake.url(), &token, method, path, body).await;
        assert_eq!(shape(fake_status, &faked), shape(real_status, &real), "{what}: {method} /v1/{path}");
    }
    // A missing or wrong token: 403 "permission denied" from both.
    for bad in ["", "wrong"] {
        let (status, real) = bao.try_api_as(bad, None, "GET", "secret/data/tools/twilio", None).await.expect("answer");
        let (fake_status, faked) = raw(&fake.url(), bad, "GET", "secret/data/tools/twilio", None).await;
        assert_eq!((fake_status, faked), (status, real.clone()), "token {bad:?}");
        assert_eq!(real, json!({"errors": ["permission denied"]}));
    }
    // Sealed: 503 "Vault is sealed" from both.
    bao.seal().await;
    fake.set_down(true);
    let (status, real) = bao.api("GET", "secret/data/tools/twilio", None).await;
    let (fake_status, faked) = raw(&fake.url(), &token, "GET", "secret/data/tools/twilio", None).await;
    assert_eq!((fake_status, faked), (status, real.clone()));
    assert_eq!((status, real), (503, json!({"errors": ["Vault is sealed"]})));
}

/// One HTTP/1.1 request to the stand-in over a fresh connection.
async fn raw(base: &str, token: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = base.strip_prefix("http://").expect("http url");
    let mut stream = tokio::net::TcpStream::connect(host).await.expect("connect");
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!("{method} /v1/{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
    if !token.is_empty() {
        req.push_str(&format!("X-Vault-Token: {token}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(req.as_bytes()).await.expect("write");
    let mut buf = Vec::new();
    stream.read_to_end(&mut buf).await.expect("read");
    let text = String::from_utf8(buf).expect("utf8");
    let status: u16 = text[9..12].parse().expect("status");
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}
