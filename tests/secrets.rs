//! Secrets and authorization injected at call time, end to end through the
//! real binary: what a tool server receives in `context.secrets`,
//! `context.authorization` and `context.user_id` (read off the bodies the
//! [`ToolServer`] recorded), what a client gets when a requirement cannot be
//! met, which `Authorization` header reaches an upstream, and that no secret
//! or token ever shows up in the gateway's output.
//!
//! Secrets come from real environment variables of the gateway process, real
//! files, and a real OpenBao (`common::openbao`), which the outage tests
//! seal, freeze (SIGSTOP) and kill; the gateway reads it with a token of its
//! own (`GATEWAY_POLICY`), whose requests the vault's audit log shows. JWTs
//! are signed here.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::openbao::OpenBao;
use common::{
    echo, jwt, needing, send_with_headers, temp_file, tool, wait_until, Gateway, GatewayConfig, Resp, ToolServer,
};
use serde_json::{json, Value};

const JWT_SECRET: &str = "injection-tests-hs256-secret-a7c2e9f04b";

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

/// A tool server echoing calls, serving these tools.
async fn tool_server(tools: Vec<Value>) -> ToolServer {
    let server = ToolServer::start(common::catalog(tools)).await;
    server.on_call(echo);
    server
}

/// One upstream `tools` at `url` (call_timeout 20s), then `extra` TOML.
fn config(url: &str, extra: &str) -> GatewayConfig {
    // Granted everything: these tests are about what injection does.
    GatewayConfig::new()
        .upstream_with("tools", url, "call_timeout = \"20s\"\nsecrets = [\"*\"]\nauthorization = [\"*\"]")
        .raw(extra)
}

/// The `[vault]` section for `vault`, the token in `INJ_VAULT_TOKEN`.
fn vault_section(vault: &OpenBao, cache_ttl: &str, timeout: &str) -> String {
    format!(
        "[vault]\naddress = \"{}\"\ntoken = \"env:INJ_VAULT_TOKEN\"\ncache_ttl = \"{cache_ttl}\"\ntimeout = \"{timeout}\"\n",
        vault.url()
    )
}

/// A gateway whose `TWILIO_API_KEY` is read from `vault` with these
/// `cache_ttl` and `timeout`, with `token`.
async fn twilio_from_vault_as(
    server: &ToolServer,
    vault: &OpenBao,
    token: &str,
    cache_ttl: &str,
    timeout: &str,
) -> Gateway {
    config(
        &server.url(),
        &format!(
            "{}\n[secrets]\nTWILIO_API_KEY = \"vault:secret/tools/twilio#api_key\"\n",
            vault_section(vault, cache_ttl, timeout)
        ),
    )
    .start_with_env(&[("INJ_VAULT_TOKEN", token)])
    .await
}

/// The same with a gateway's token of its own, returned with the gateway.
async fn twilio_from_vault(server: &ToolServer, vault: &OpenBao, cache_ttl: &str, timeout: &str) -> (Gateway, String) {
    let token = vault.gateway_token().await;
    (twilio_from_vault_as(server, vault, &token, cache_ttl, timeout).await, token)
}

/// `otc_gateway_vault_stale_served_total` now.
async fn stale_served(gw: &Gateway) -> f64 {
    let metrics = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await;
    metrics.expect_status(200);
    metric_value(&metrics.text(), "otc_gateway_vault_stale_served_total", &[])
}

/// `[auth]` in jwt mode with the HS256 secret from the environment.
const JWT_AUTH: &str = "[auth]\nmode = \"jwt\"\nhs256_secret = \"env:INJ_JWT_SECRET\"\n";

fn user_token(sub: &str) -> String {
    jwt::hs256(&jwt::claims(sub, json!({})), JWT_SECRET.as_bytes())
}

/// POST /tools/call for `tool_id` with `{}` input, `request_extra` merged into
/// the request object (e.g. a `context`), and these extra headers.
async fn call_with(gw: &Gateway, headers: &[(&str, &str)], tool_id: &str, request_extra: Value) -> Resp {
    let mut request = json!({"tool_id": tool_id, "input": {}});
    if let (Value::Object(r), Value::Object(e)) = (&mut request, request_extra) {
        r.extend(e);
    }
    let body = Bytes::from(json!({"$schema": "otc://1.0", "request": request}).to_string());
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    send_with_headers(gw.addr, "POST", "/tools/call", body, &all).await
}

/// A call as the holder of `token` (`Authorization: Bearer <token>`).
async fn call_as(gw: &Gateway, token: &str, tool_id: &str, request_extra: Value) -> Resp {
    let auth = format!("Bearer {token}");
    call_with(gw, &[("authorization", auth.as_str())], tool_id, request_extra).await
}

/// A call without credentials.
async fn call_anon(gw: &Gateway, tool_id: &str, request_extra: Value) -> Resp {
    call_with(gw, &[], tool_id, request_extra).await
}

/// The `context` of the last call the tool server received.
fn last_context(server: &ToolServer) -> Value {
    server.last_request()["context"].clone()
}

/// Every `context.secrets[]` entry with this id.
fn secret_entries(context: &Value, id: &str) -> Vec<Value> {
    context["secrets"].as_array().map(|a| a.iter().filter(|s| s["id"] == id).cloned().collect()).unwrap_or_default()
}

/// The one `context.secrets[]` value for `id` (panics when absent or repeated).
fn secret_value(context: &Value, id: &str) -> String {
    let entries = secret_entries(context, id);
    assert_eq!(entries.len(), 1, "exactly one context.secrets entry for {id}: {context}");
    entries[0]["value"].as_str().unwrap_or_else(|| panic!("{id} has no string value: {context}")).to_owned()
}

/// The `context.authorization[]` entries for a provider.
fn authorization_entries(context: &Value, provider: &str) -> Vec<Value> {
    context["authorization"]
        .as_array()
        .map(|a| a.iter().filter(|s| s["id"] == provider).cloned().collect())
        .unwrap_or_default()
}

fn message(body: &Value) -> &str {
    body["message"].as_str().unwrap_or_default()
}

/// A counter's value in a Prometheus text page (summed over label sets that
/// contain every one of `labels`).
fn metric_value(page: &str, name: &str, labels: &[&str]) -> f64 {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .filter(|l| labels.iter().all(|lab| l.contains(lab)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

// ---------------------------------------------------------------------------
// context.secrets from env:, file: and vault:
// ---------------------------------------------------------------------------

const TWILIO: &str = "Twilio.SendSms@1.0.0";

fn twilio_tool() -> Value {
    needing("Twilio.SendSms", json!({"secrets": [{"id": "TWILIO_API_KEY"}]}))
}

#[tokio::test]
async fn a_secret_from_an_env_var_of_the_gateway_process_is_injected() {
    let server = tool_server(vec![twilio_tool()]).await;
    let gw = config(&server.url(), "[secrets]\nTWILIO_API_KEY = \"env:INJ_TWILIO_FROM_ENV\"\n")
        .start_with_env(&[("INJ_TWILIO_FROM_ENV", "AC-env-value-71f3")])
        .await;
    gw.wait_for_tool(TWILIO).await;

    let result = call_anon(&gw, TWILIO, json!({})).await.result();
    assert_eq!(result["success"], true, "{result}");
    assert_eq!(server.call_count(), 1);
    assert_eq!(secret_value(&last_context(&server), "TWILIO_API_KEY"), "AC-env-value-71f3");
}

#[tokio::test]
async fn a_secret_from_a_file_is_injected_with_its_trailing_newline_trimmed() {
    let server = tool_server(vec![twilio_tool(), needing("Crlf.Tool", json!({"secrets": [{"id": "CRLF_KEY"}]}))]).await;
    let file = temp_file("twilio", "key", "AC-file-value-88aa\n");
    let crlf = temp_file("crlf", "key", "crlf-value-19\r\n");
    let gw = config(
        &server.url(),
        &format!("[secrets]\nTWILIO_API_KEY = \"file:{}\"\nCRLF_KEY = \"file:{}\"\n", file.display(), crlf.display()),
    )
    .start()
    .await;
    gw.wait_for_tool("Crlf.Tool@1.0.0").await;

    call_anon(&gw, TWILIO, json!({})).await.result();
    assert_eq!(
        secret_value(&last_context(&server), "TWILIO_API_KEY"),
        "AC-file-value-88aa",
        "one trailing \\n trimmed"
    );
    call_anon(&gw, "Crlf.Tool@1.0.0", json!({})).await.result();
    assert_eq!(secret_value(&last_context(&server), "CRLF_KEY"), "crlf-value-19", "a trailing \\r\\n trimmed");
    let _ = std::fs::remove_file(file);
    let _ = std::fs::remove_file(crlf);
}

#[tokio::test]
async fn a_secret_from_vault_kv2_is_injected_and_cached_within_cache_ttl() {
    let server = tool_server(vec![twilio_tool()]).await;
    let vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": "AC-vault-value-5be0", "other": "not-this-one"})).await;
    let (gw, token) = twilio_from_vault(&server, &vault, "60s", "2s").await;
    gw.wait_for_tool(TWILIO).await;

    call_anon(&gw, TWILIO, json!({})).await.result();
    assert_eq!(secret_value(&last_context(&server), "TWILIO_API_KEY"), "AC-vault-value-5be0");
    let asked = vault.requests_by(&token).await;
    assert!(
        asked.iter().any(|r| r.operation == "read" && r.path == "secret/data/tools/twilio"),
        "read through the KV v2 data path: {asked:?}"
    );

    // A second call within cache_ttl does not ask the vault again, even
    // though the secret has a new version there.
    vault.put("secret/tools/twilio", json!({"api_key": "AC-vault-rotated-0000"})).await;
    call_anon(&gw, TWILIO, json!({})).await.result();
    assert_eq!(vault.requests_by(&token).await, asked, "a cached value costs no vault request");
    assert_eq!(secret_value(&last_context(&server), "TWILIO_API_KEY"), "AC-vault-value-5be0");
    assert_eq!(server.call_count(), 2);
}

#[tokio::test]
async fn after_cache_ttl_the_vault_is_asked_again() {
    let server = tool_server(vec![twilio_tool()]).await;
    let vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": "AC-before-rotation"})).await;
    let (gw, _) = twilio_from_vault(&server, &vault, "300ms", "2s").await;
    gw.wait_for_tool(TWILIO).await;
    call_anon(&gw, TWILIO, json!({})).await.result();
    assert_eq!(secret_value(&last_context(&server), "TWILIO_API_KEY"), "AC-before-rotation");

    vault.put("secret/tools/twilio", json!({"api_key": "AC-after-rotation"})).await;
    // On purpose: the 300 ms cache_ttl has to run out.
    tokio::time::sleep(Duration::from_millis(600)).await;
    call_anon(&gw, TWILIO, json!({})).await.result();
    assert_eq!(
        secret_value(&last_context(&server), "TWILIO_API_KEY"),
        "AC-after-rotation",
        "an expired value is re-read"
    );
}

#[tokio::test]
async fn while_the_vault_is_down_the_cached_value_keeps_being_served() {
    let server = tool_server(vec![twilio_tool()]).await;
    let mut vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": "AC-cached-through-outage"})).await;
    let (gw, _) = twilio_from_vault(&server, &vault, "200ms", "1s").await;
    gw.wait_for_tool(TWILIO).await;
    call_anon(&gw, TWILIO, json!({})).await.result();

    // Sealed (503), hung (stopped: requests never answered, so served after
    // at most `timeout`), then gone (killed: connections refused): each time
    // past cache_ttl, so the gateway does go back to the vault, and each
    // stale serve is counted (a value is served stale only after the vault
    // was asked and could not answer).
    for what in ["sealed", "hung", "gone"] {
        match what {
            "sealed" => vault.seal().await,
            "hung" => vault.freeze(),
            _ => vault.kill(),
        }
        // On purpose: past cache_ttl, so the value is stale.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let stale = stale_served(&gw).await;
        let started = Instant::now();
        let resp = call_anon(&gw, TWILIO, json!({})).await;
        assert_eq!(resp.status, 200, "vault {what}: the cached value is served: {}", resp.text());
        assert!(started.elapsed() < Duration::from_secs(5), "vault {what}: no hang ({:?})", started.elapsed());
        assert_eq!(secret_value(&last_context(&server), "TWILIO_API_KEY"), "AC-cached-through-outage", "vault {what}");
        assert_eq!(stale_served(&gw).await, stale + 1.0, "vault {what}: asked the vault again, served stale");
        match what {
            "sealed" => vault.unseal().await,
            "hung" => vault.thaw(),
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_value_never_fetched_while_the_vault_is_down_is_a_prompt_400_naming_the_requirement() {
    let server = tool_server(vec![twilio_tool()]).await;
    let mut vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": "AC-never-fetched"})).await;
    // The root token: it is the one token a restarted dev server still has.
    let root = vault.root_token().to_owned();
    let gw = twilio_from_vault_as(&server, &vault, &root, "60s", "1s").await;
    gw.wait_for_tool(TWILIO).await;

    // Sealed, hung, gone: each a 400 naming the secret, well under the 20 s
    // call timeout, and the tool is never called.
    for what in ["sealed", "hung", "gone"] {
        match what {
            "sealed" => vault.seal().await,
            "hung" => vault.freeze(),
            _ => vault.kill(),
        }
        let started = Instant::now();
        let resp = call_anon(&gw, TWILIO, json!({})).await;
        let elapsed = started.elapsed();
        let body = resp.server_error(400);
        assert!(message(&body).contains("TWILIO_API_KEY"), "vault {what}: the message names the requirement: {body}");
        assert!(elapsed < Duration::from_secs(5), "vault {what}: answered in {elapsed:?}, not a hang");
        assert!(!resp.text().contains("AC-never-fetched"));
        match what {
            "sealed" => vault.unseal().await,
            "hung" => vault.thaw(),
            _ => {}
        }
    }
    assert_eq!(server.call_count(), 0, "the tool is never called without its secret");

    // Once the vault is back (restarted: a dev server comes back empty, so
    // the secret is written again), the same call goes through.
    vault.restart().await;
    vault.put("secret/tools/twilio", json!({"api_key": "AC-never-fetched"})).await;
    call_anon(&gw, TWILIO, json!({})).await.result();
    assert_eq!(secret_value(&last_context(&server), "TWILIO_API_KEY"), "AC-never-fetched");
}

#[tokio::test]
async fn a_managed_secret_missing_from_the_vault_is_a_400_naming_it() {
    let server = tool_server(vec![twilio_tool()]).await;
    let vault = OpenBao::start().await;
    // The path exists but the field does not; then the path does not exist.
    vault.put("secret/tools/twilio", json!({"wrong_field": "x"})).await;
    let (gw, _) = twilio_from_vault(&server, &vault, "60s", "1s").await;
    gw.wait_for_tool(TWILIO).await;
    let body = call_anon(&gw, TWILIO, json!({})).await.server_error(400);
    assert!(message(&body).contains("TWILIO_API_KEY"), "missing field: {body}");
    vault.purge("secret/tools/twilio").await;
    let body = call_anon(&gw, TWILIO, json!({})).await.server_error(400);
    assert!(message(&body).contains("TWILIO_API_KEY"), "missing path: {body}");
    assert_eq!(server.call_count(), 0);
}

#[tokio::test]
async fn a_revoked_token_or_a_deleted_secret_is_not_papered_over_by_the_cache() {
    // docs/configuration.md: while the vault is unreachable a cached value is served past
    // its ttl, but "a 403 or 404 is never papered over".
    let server = tool_server(vec![twilio_tool(), needing("Maps.Find", json!({"secrets": [{"id": "MAPS_KEY"}]}))]).await;
    let vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": "AC-deleted-later"})).await;
    vault.put("secret/tools/maps", json!({"key": "maps-revoked-later"})).await;
    let token = vault.gateway_token().await;
    let gw = config(
        &server.url(),
        &format!(
            "{}\n[secrets]\nTWILIO_API_KEY = \"vault:secret/tools/twilio#api_key\"\nMAPS_KEY = \"vault:secret/tools/maps#key\"\n",
            vault_section(&vault, "200ms", "1s")
        ),
    )
    .start_with_env(&[("INJ_VAULT_TOKEN", token.as_str())])
    .await;
    gw.wait_for_tool("Maps.Find@1.0.0").await;
    call_anon(&gw, TWILIO, json!({})).await.result();
    call_anon(&gw, "Maps.Find@1.0.0", json!({})).await.result();
    let calls = server.call_count();

    // Deleted (404 with deletion_time), past cache_ttl (time passes on
    // purpose).
    vault.delete("secret/tools/twilio").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let resp = call_anon(&gw, TWILIO, json!({})).await;
    let body = resp.server_error(400);
    assert!(message(&body).contains("TWILIO_API_KEY"), "{body}");
    assert!(!resp.text().contains("AC-deleted-later"));

    // The gateway's vault token revoked (403), past cache_ttl.
    vault.revoke_token(&token).await;
    let resp = call_anon(&gw, "Maps.Find@1.0.0", json!({})).await;
    let body = resp.server_error(400);
    assert!(message(&body).contains("MAPS_KEY"), "{body}");
    assert!(!resp.text().contains("maps-revoked-later"));
    assert_eq!(server.call_count(), calls, "neither call reached the tool with a stale value");
}

#[tokio::test]
async fn a_rotated_vault_token_file_is_used_without_a_restart() {
    // docs/configuration.md: the token reference is "re-read on each request,
    // so rotation works".
    let server = tool_server(vec![twilio_tool()]).await;
    let vault = OpenBao::start().await;
    vault.put("secret/tools/twilio", json!({"api_key": "AC-before-rotation"})).await;
    let (old, new) = (vault.gateway_token().await, vault.gateway_token().await);
    let token_file = temp_file("vault-token", "txt", &format!("{old}\n"));
    let gw = config(
        &server.url(),
        &format!(
            "[vault]\naddress = \"{}\"\ntoken = \"file:{}\"\ncache_ttl = \"200ms\"\ntimeout = \"1s\"\n\n\
             [secrets]\nTWILIO_API_KEY = \"vault:secret/tools/twilio#api_key\"\n",
            vault.url(),
            token_file.display()
        ),
    )
    .start()
    .await;
    gw.wait_for_tool(TWILIO).await;
    call_anon(&gw, TWILIO, json!({})).await.result();
    assert_eq!(vault.reads_by(&old).await.len(), 1);

    // Rotated as an agent does it: the new token renamed into place, the
    // old one revoked.
    let next = temp_file("vault-token-next", "txt", &format!("{new}\n"));
    std::fs::rename(&next, &token_file).expect("rename");
    vault.revoke_token(&old).await;
    vault.put("secret/tools/twilio", json!({"api_key": "AC-after-rotation"})).await;
    tokio::time::sleep(Duration::from_millis(400)).await; // on purpose: past cache_ttl
    call_anon(&gw, TWILIO, json!({})).await.result();
    assert_eq!(secret_value(&last_context(&server), "TWILIO_API_KEY"), "AC-after-rotation");
    assert_eq!(vault.reads_by(&new).await.len(), 1, "the gateway read with the new token");
    assert_eq!(vault.reads_by(&old).await.len(), 1, "and not with the revoked one");
    let logs = gw.logs();
    assert!(!logs.contains(&old) && !logs.contains(&new), "no vault token in the gateway's log");
    let _ = std::fs::remove_file(token_file);
}

#[tokio::test]
async fn a_tool_gets_only_the_secrets_and_tokens_it_declares() {
    let server = tool_server(vec![
        needing("Sms.Send", json!({"secrets": [{"id": "SMS_KEY"}]})),
        tool("Plain.Tool", "1.0.0", json!({"type": "object"})),
        needing("Mail.Send", json!({"secrets": [{"id": "MAIL_KEY"}]})),
    ])
    .await;
    let vault = OpenBao::start().await;
    vault.put("secret/oauth/google/alice", json!({"access_token": "ya29.scoped-alice-token"})).await;
    let token = vault.gateway_token().await;
    let gw = config(
        &server.url(),
        &format!(
            "{}\n[secrets]\nSMS_KEY = \"env:INJ_SMS_KEY\"\nMAIL_KEY = \"env:INJ_MAIL_KEY\"\n\n\
             [authorization.google]\ntoken = \"vault:secret/oauth/google/{{user_id}}#access_token\"\n\n{JWT_AUTH}",
            vault_section(&vault, "60s", "1s")
        ),
    )
    .start_with_env(&[
        ("INJ_VAULT_TOKEN", token.as_str()),
        ("INJ_JWT_SECRET", JWT_SECRET),
        ("INJ_SMS_KEY", "sms-only-value"),
        ("INJ_MAIL_KEY", "mail-only-value"),
    ])
    .await;
    let alice = user_token("alice");
    let auth = format!("Bearer {alice}");
    gw.wait_listed(&[("authorization", auth.as_str())], "Mail.Send@1.0.0").await;

    call_as(&gw, &alice, "Sms.Send@1.0.0", json!({})).await.result();
    let context = last_context(&server);
    assert_eq!(secret_value(&context, "SMS_KEY"), "sms-only-value");
    let text = context.to_string();
    assert!(!text.contains("mail-only-value") && !text.contains("ya29."), "only what Sms.Send declares: {context}");

    call_as(&gw, &alice, "Plain.Tool@1.0.0", json!({})).await.result();
    let context = last_context(&server);
    let text = context.to_string();
    assert!(
        !text.contains("sms-only-value") && !text.contains("mail-only-value") && !text.contains("ya29."),
        "a tool without requirements gets no secret and no token: {context}"
    );
    assert_eq!(context["user_id"], "alice", "but it does learn who calls");
}

// ---------------------------------------------------------------------------
// Unmanaged ids, client-sent values
// ---------------------------------------------------------------------------

#[tokio::test]
async fn an_unconfigured_secret_not_sent_by_the_client_is_a_400_with_missing_requirements() {
    let server = tool_server(vec![needing("Stripe.Charge", json!({"secrets": [{"id": "STRIPE_SECRET_KEY"}]}))]).await;
    // Another id is managed: only STRIPE_SECRET_KEY is unmet.
    let gw = config(&server.url(), "[secrets]\nSOMETHING_ELSE = \"env:INJ_SOMETHING_ELSE\"\n")
        .start_with_env(&[("INJ_SOMETHING_ELSE", "irrelevant")])
        .await;
    gw.wait_for_tool("Stripe.Charge@1.0.0").await;

    let resp = call_anon(&gw, "Stripe.Charge@1.0.0", json!({})).await;
    let body = resp.server_error(400);
    assert!(message(&body).contains("STRIPE_SECRET_KEY"), "the message names the id: {body}");
    assert_eq!(body["missing_requirements"]["secrets"][0]["id"], "STRIPE_SECRET_KEY", "{body}");
    assert_eq!(body["missing_requirements"]["secrets"].as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(server.call_count(), 0, "the upstream is never called");

    // Sent by the client and not managed by the gateway: passes through as sent.
    let context = json!({"secrets": [{"id": "STRIPE_SECRET_KEY", "value": "sk_test_client_own_1"}]});
    call_anon(&gw, "Stripe.Charge@1.0.0", json!({"context": context})).await.result();
    assert_eq!(server.call_count(), 1);
    assert_eq!(secret_value(&last_context(&server), "STRIPE_SECRET_KEY"), "sk_test_client_own_1");
}

#[tokio::test]
async fn a_client_sent_secret_for_a_managed_id_is_replaced_by_the_gateways_value() {
    let server = tool_server(vec![needing(
        "Twilio.SendSms",
        json!({"secrets": [{"id": "TWILIO_API_KEY"}, {"id": "CLIENT_OWNED"}]}),
    )])
    .await;
    let gw = config(&server.url(), "[secrets]\nTWILIO_API_KEY = \"env:INJ_TWILIO_MANAGED\"\n")
        .start_with_env(&[("INJ_TWILIO_MANAGED", "AC-gateway-managed-42")])
        .await;
    gw.wait_for_tool(TWILIO).await;

    let context = json!({
        "secrets": [
            {"id": "TWILIO_API_KEY", "value": "AC-forged-by-client"},
            {"id": "TWILIO_API_KEY", "value": "AC-forged-twice"},
            {"id": "CLIENT_OWNED", "value": "client-owned-value"}
        ],
        "locale": "en-GB"
    });
    call_anon(&gw, TWILIO, json!({"context": context})).await.result();
    let context = last_context(&server);
    assert_eq!(secret_value(&context, "TWILIO_API_KEY"), "AC-gateway-managed-42", "{context}");
    assert_eq!(secret_value(&context, "CLIENT_OWNED"), "client-owned-value", "unmanaged ids pass through");
    assert!(!context.to_string().contains("forged"), "no forged value reaches the tool: {context}");
    assert_eq!(context["locale"], "en-GB", "other context fields pass through");
}

#[tokio::test]
async fn a_client_sent_user_id_is_replaced_by_the_authenticated_one() {
    let server = tool_server(vec![needing("Who.AmI", json!({"user_id": true}))]).await;
    let gw = config(&server.url(), JWT_AUTH).start_with_env(&[("INJ_JWT_SECRET", JWT_SECRET)]).await;
    let alice = user_token("alice");
    let auth = format!("Bearer {alice}");
    gw.wait_listed(&[("authorization", auth.as_str())], "Who.AmI@1.0.0").await;

    call_as(&gw, &alice, "Who.AmI@1.0.0", json!({"context": {"user_id": "mallory"}})).await.result();
    assert_eq!(last_context(&server)["user_id"], "alice", "the JWT's sub wins over the client's claim");
    call_as(&gw, &alice, "Who.AmI@1.0.0", json!({})).await.result();
    assert_eq!(last_context(&server)["user_id"], "alice", "and is filled in when the client sent none");
}

#[tokio::test]
async fn requirements_user_id_without_a_user_is_a_400() {
    let server = tool_server(vec![needing("Who.AmI", json!({"user_id": true}))]).await;
    let gw = config(&server.url(), "").start().await;
    gw.wait_for_tool("Who.AmI@1.0.0").await;

    let body = call_anon(&gw, "Who.AmI@1.0.0", json!({})).await.server_error(400);
    assert_eq!(body["missing_requirements"]["user_id"], json!(true), "{body}");
    assert!(message(&body).to_lowercase().contains("user"), "the message says what is missing: {body}");
    assert_eq!(server.call_count(), 0, "the upstream is never called");
}

// ---------------------------------------------------------------------------
// Per-user OAuth tokens
// ---------------------------------------------------------------------------

const GMAIL: &str = "Gmail.ListEmails@1.0.0";

fn oauth_config(server: &ToolServer, vault: &OpenBao, mode_jwt: bool) -> GatewayConfig {
    let auth = if mode_jwt { JWT_AUTH } else { "" };
    config(
        &server.url(),
        &format!(
            "{}\n[authorization.google]\ntoken = \"vault:secret/oauth/google/{{user_id}}#access_token\"\n\
             authorize_url = \"https://accounts.example.com/oauth/google/start?user={{user_id}}\"\n\n\
             [authorization.github]\ntoken = \"vault:secret/oauth/github/{{user_id}}#access_token\"\n\n{auth}",
            vault_section(vault, "60s", "1s")
        ),
    )
}

fn oauth_tools() -> Vec<Value> {
    vec![
        needing("Gmail.ListEmails", json!({"authorization": [{"id": "google"}]})),
        needing("Github.ListRepos", json!({"authorization": [{"id": "github"}]})),
    ]
}

#[tokio::test]
async fn a_per_user_oauth_token_is_injected_for_its_user_only() {
    let server = tool_server(oauth_tools()).await;
    let vault = OpenBao::start().await;
    vault.put("secret/oauth/google/alice", json!({"access_token": "ya29.alice-google-token-c0ffee"})).await;
    vault.put("secret/oauth/google/carol", json!({"access_token": "ya29.carol-google-token-d00d"})).await;
    let token = vault.gateway_token().await;
    let gw = oauth_config(&server, &vault, true)
        .start_with_env(&[("INJ_VAULT_TOKEN", token.as_str()), ("INJ_JWT_SECRET", JWT_SECRET)])
        .await;
    let (alice, bob) = (user_token("alice"), user_token("bob"));
    let alice_auth = format!("Bearer {alice}");
    gw.wait_listed(&[("authorization", alice_auth.as_str())], GMAIL).await;

    // alice: her own token, whatever she sends.
    let forged = json!({"authorization": [{"id": "google", "token": "ya29.forged-by-alice"}], "user_id": "carol"});
    call_as(&gw, &alice, GMAIL, json!({"context": forged})).await.result();
    let context = last_context(&server);
    let google = authorization_entries(&context, "google");
    assert_eq!(google, vec![json!({"id": "google", "token": "ya29.alice-google-token-c0ffee"})], "{context}");
    assert_eq!(context["user_id"], "alice");
    let reads = vault.reads_by(&token).await;
    assert!(reads.iter().any(|p| p == "secret/data/oauth/google/alice"), "{reads:?}");
    assert!(!reads.iter().any(|p| p.contains("carol")), "carol's token was never read: {reads:?}");

    // bob has no stored token: 400 naming google, with the authorize url for
    // him, and the tool is not called (also when he sends a token of his own).
    let calls = server.call_count();
    for extra in [json!({}), json!({"context": {"authorization": [{"id": "google", "token": "ya29.bobs-own"}]}})] {
        let resp = call_as(&gw, &bob, GMAIL, extra).await;
        let body = resp.server_error(400);
        assert!(message(&body).contains("google"), "the message names the provider: {body}");
        let challenge = &body["missing_requirements"]["authorization"][0];
        assert_eq!(challenge["id"], "google", "{body}");
        assert_eq!(challenge["url"], "https://accounts.example.com/oauth/google/start?user=bob", "{body}");
        assert!(!resp.text().contains("ya29."), "no token in the refusal: {body}");
    }
    assert_eq!(server.call_count(), calls, "bob's calls never reach the tool");

    // A provider without authorize_url: the challenge has an id and no url.
    let body = call_as(&gw, &bob, "Github.ListRepos@1.0.0", json!({})).await.server_error(400);
    let challenge = &body["missing_requirements"]["authorization"][0];
    assert_eq!(challenge["id"], "github", "{body}");
    assert!(challenge.get("url").is_none_or(Value::is_null), "no url without authorize_url: {body}");
    assert_eq!(server.call_count(), calls);
}

#[tokio::test]
async fn an_unconfigured_provider_is_a_400_unless_the_client_sends_its_token() {
    let server = tool_server(vec![needing("Slack.Post", json!({"authorization": [{"id": "slack"}]}))]).await;
    let gw = config(&server.url(), "").start().await;
    gw.wait_for_tool("Slack.Post@1.0.0").await;

    let body = call_anon(&gw, "Slack.Post@1.0.0", json!({})).await.server_error(400);
    assert!(message(&body).contains("slack"), "{body}");
    assert_eq!(body["missing_requirements"]["authorization"][0]["id"], "slack", "{body}");
    assert_eq!(server.call_count(), 0);

    let context = json!({"authorization": [{"id": "slack", "token": "xoxb-client-own"}]});
    call_anon(&gw, "Slack.Post@1.0.0", json!({"context": context})).await.result();
    assert_eq!(
        authorization_entries(&last_context(&server), "slack"),
        vec![json!({"id": "slack", "token": "xoxb-client-own"})],
        "an unmanaged provider's token passes through"
    );
}

#[tokio::test]
async fn an_anonymous_caller_never_gets_a_per_user_token() {
    let server = tool_server(oauth_tools()).await;
    let vault = OpenBao::start().await;
    vault.put("secret/oauth/google/alice", json!({"access_token": "ya29.alice-must-stay-home"})).await;
    let token = vault.gateway_token().await;
    // mode none: callers are anonymous; a client-sent user_id is not an identity.
    let gw = oauth_config(&server, &vault, false).start_with_env(&[("INJ_VAULT_TOKEN", token.as_str())]).await;
    gw.wait_for_tool(GMAIL).await;

    for extra in [json!({}), json!({"context": {"user_id": "alice"}})] {
        let resp = call_anon(&gw, GMAIL, extra.clone()).await;
        let body = resp.server_error(400);
        assert_eq!(body["missing_requirements"]["authorization"][0]["id"], "google", "{extra}: {body}");
        assert!(!resp.text().contains("alice-must-stay-home"), "{body}");
    }
    assert_eq!(server.call_count(), 0, "the tool is never called");
    let requests = vault.requests_by(&token).await;
    assert!(
        !requests.iter().any(|r| r.path.contains("/alice")),
        "an anonymous claim to be alice never reads her token: {requests:?}"
    );
}

#[tokio::test]
async fn a_user_id_cannot_walk_out_of_its_place_in_the_vault_path() {
    let server =
        tool_server(vec![twilio_tool(), needing("Gmail.ListEmails", json!({"authorization": [{"id": "google"}]}))])
            .await;
    let vault = OpenBao::start().await;
    vault
        .put("secret/tools/twilio", json!({"api_key": "AC-not-for-users", "access_token": "AC-not-for-users-either"}))
        .await;
    let token = vault.gateway_token().await;
    let gw = config(
        &server.url(),
        &format!(
            "{}\n[secrets]\nTWILIO_API_KEY = \"vault:secret/tools/twilio#api_key\"\n\n\
             [authorization.google]\ntoken = \"vault:secret/oauth/google/{{user_id}}#access_token\"\n\n{JWT_AUTH}",
            vault_section(&vault, "60s", "1s")
        ),
    )
    .start_with_env(&[("INJ_VAULT_TOKEN", token.as_str()), ("INJ_JWT_SECRET", JWT_SECRET)])
    .await;
    let ok = user_token("alice");
    let ok_auth = format!("Bearer {ok}");
    gw.wait_listed(&[("authorization", ok_auth.as_str())], GMAIL).await;

    for sub in [
        "../../tools/twilio",
        "..%2F..%2Ftools%2Ftwilio",
        "%2E%2E%2F%2E%2E%2Ftools%2Ftwilio",
        "x/../../../tools/twilio",
        "..\\..\\tools\\twilio",
        "..",
        "a#b",
    ] {
        let resp = call_as(&gw, &user_token(sub), GMAIL, json!({})).await;
        assert_eq!(resp.status, 400, "sub {sub:?}: {}", resp.text());
        assert!(!resp.text().contains("AC-not-for-users"), "sub {sub:?}: {}", resp.text());
    }
    assert_eq!(server.call_count(), 0, "no traversal attempt reaches the tool");
    // What the vault was asked, as it decoded the paths: each one segment
    // under oauth/google/ (an encoded `%2F` stays text in its segment), and
    // never twilio's secret.
    let requests = vault.requests_by(&token).await;
    for r in &requests {
        let user = r.path.strip_prefix("secret/data/oauth/google/").unwrap_or_else(|| panic!("{r:?}"));
        assert!(!user.is_empty() && !user.contains('/'), "{r:?}");
    }
    assert!(!requests.iter().any(|r| r.path == "secret/data/tools/twilio"), "{requests:?}");
}

#[tokio::test]
async fn user_ids_with_url_characters_find_exactly_their_own_token() {
    let server = tool_server(oauth_tools()).await;
    let vault = OpenBao::start().await;
    vault.put("secret/oauth/google/alice", json!({"access_token": "ya29.plain-alice"})).await;
    vault.put("secret/oauth/google/alice@example.com", json!({"access_token": "ya29.alice-at-example"})).await;
    vault.put("secret/oauth/google/Alice Smith", json!({"access_token": "ya29.alice-with-a-space"})).await;
    vault.put("secret/oauth/google/50%off", json!({"access_token": "ya29.fifty-percent"})).await;
    let token = vault.gateway_token().await;
    let gw = oauth_config(&server, &vault, true)
        .start_with_env(&[("INJ_VAULT_TOKEN", token.as_str()), ("INJ_JWT_SECRET", JWT_SECRET)])
        .await;
    let auth = format!("Bearer {}", user_token("alice"));
    gw.wait_listed(&[("authorization", auth.as_str())], GMAIL).await;

    for (sub, token) in [
        ("alice@example.com", "ya29.alice-at-example"),
        ("Alice Smith", "ya29.alice-with-a-space"),
        ("50%off", "ya29.fifty-percent"),
        ("alice", "ya29.plain-alice"),
    ] {
        call_as(&gw, &user_token(sub), GMAIL, json!({})).await.result();
        let context = last_context(&server);
        assert_eq!(
            authorization_entries(&context, "google"),
            vec![json!({"id": "google", "token": token})],
            "sub {sub:?}"
        );
        assert_eq!(context["user_id"], sub);
    }
    // Ids that would read alice's path if the user id were not encoded.
    let calls = server.call_count();
    for sub in ["alice?", "alice?x", "alice%3F", "alice;x", "%61lice"] {
        let resp = call_as(&gw, &user_token(sub), GMAIL, json!({})).await;
        assert_eq!(resp.status, 400, "sub {sub:?} has no token of its own: {}", resp.text());
        assert!(!resp.text().contains("ya29."), "{}", resp.text());
    }
    assert_eq!(server.call_count(), calls, "none of them reached the tool (with alice's token)");
}

// ---------------------------------------------------------------------------
// bearer_token on an upstream; the client's Authorization stays at the gateway
// ---------------------------------------------------------------------------

#[tokio::test]
async fn an_upstream_bearer_token_goes_on_every_catalog_fetch_and_call_instead_of_the_clients() {
    let server = tool_server(vec![tool("Calc.Echo", "1.0.0", json!({"type": "object"}))]).await;
    // mode none, with an API key configured so the client's OXP-API-Key is a valid one.
    let gw = GatewayConfig::new()
        .upstream_with("tools", &server.url(), "bearer_token = \"env:INJ_UPSTREAM_TOKEN\"")
        .raw("[auth]\napi_keys = [{ key = \"env:INJ_CLIENT_KEY\", user_id = \"svc-client\" }]\n")
        .start_with_env(&[("INJ_UPSTREAM_TOKEN", "upstream-bearer-9e8d7c"), ("INJ_CLIENT_KEY", "client-api-key-bb22")])
        .await;
    gw.wait_for_tool("Calc.Echo@1.0.0").await;
    // Let a few polls happen, so "every fetch" means more than one.
    server.wait_until("three catalog fetches", |s| s.catalog_fetches().len() >= 3).await;

    call_with(&gw, &[("authorization", "Bearer client-own-token-aa11")], "Calc.Echo@1.0.0", json!({})).await.result();
    call_with(&gw, &[("oxp-api-key", "client-api-key-bb22")], "Calc.Echo@1.0.0", json!({})).await.result();
    assert_eq!(last_context(&server)["user_id"], "svc-client");
    call_with(&gw, &[("authorization", "Bearer client-api-key-bb22")], "Calc.Echo@1.0.0", json!({})).await.result();
    call_anon(&gw, "Calc.Echo@1.0.0", json!({})).await.result();

    let requests = server.requests();
    assert!(requests.iter().any(|r| r.method == "POST"), "calls arrived: {requests:#?}");
    for r in &requests {
        assert_eq!(
            r.headers.get("authorization").map(String::as_str),
            Some("Bearer upstream-bearer-9e8d7c"),
            "{} {} carries the upstream's bearer_token: {:?}",
            r.method,
            r.path,
            r.headers
        );
    }
    let seen = format!("{requests:?}");
    assert!(!seen.contains("client-own-token-aa11"), "the client's Authorization never reaches the upstream");
    assert!(!seen.contains("client-api-key-bb22"), "nor its OXP-API-Key");
}

#[tokio::test]
async fn without_a_bearer_token_the_clients_authorization_is_not_forwarded_either() {
    let server = tool_server(vec![tool("Calc.Echo", "1.0.0", json!({"type": "object"}))]).await;
    let gw = GatewayConfig::new().upstream("tools", &server.url()).start().await;
    gw.wait_for_tool("Calc.Echo@1.0.0").await;
    call_with(&gw, &[("authorization", "Bearer client-own-token-cc33")], "Calc.Echo@1.0.0", json!({})).await.result();
    let call = server.requests().into_iter().rfind(|r| r.method == "POST").expect("the call arrived");
    assert_eq!(call.headers.get("authorization"), None, "no Authorization header at all: {:?}", call.headers);
    assert!(!format!("{:?}", server.requests()).contains("client-own-token-cc33"));
}

#[tokio::test]
async fn a_jwt_authenticated_clients_token_is_not_forwarded_and_a_vault_bearer_token_is() {
    let server = tool_server(vec![tool("Calc.Echo", "1.0.0", json!({"type": "object"}))]).await;
    let vault = OpenBao::start().await;
    vault.put("secret/upstreams/calc", json!({"token": "upstream-from-vault-3f3f"})).await;
    let token = vault.gateway_token().await;
    let gw = GatewayConfig::new()
        .upstream_with("tools", &server.url(), "bearer_token = \"vault:secret/upstreams/calc#token\"")
        .raw(&vault_section(&vault, "60s", "1s"))
        .raw(JWT_AUTH)
        .start_with_env(&[("INJ_VAULT_TOKEN", token.as_str()), ("INJ_JWT_SECRET", JWT_SECRET)])
        .await;
    let alice = user_token("alice");
    let auth = format!("Bearer {alice}");
    gw.wait_listed(&[("authorization", auth.as_str())], "Calc.Echo@1.0.0").await;
    call_as(&gw, &alice, "Calc.Echo@1.0.0", json!({})).await.result();

    let requests = server.requests();
    let fetch = requests.iter().find(|r| r.method == "GET").expect("a catalog fetch");
    assert_eq!(fetch.headers.get("authorization").map(String::as_str), Some("Bearer upstream-from-vault-3f3f"));
    let call = requests.iter().rfind(|r| r.method == "POST").expect("the call");
    assert_eq!(call.headers.get("authorization").map(String::as_str), Some("Bearer upstream-from-vault-3f3f"));
    assert!(!format!("{requests:?}").contains(&alice), "the client's JWT never reaches the upstream");
}

// ---------------------------------------------------------------------------
// End to end: several sources, auth modes and outages in one gateway
// ---------------------------------------------------------------------------

/// [`config`] as TOML text.
fn e2e_config(url: &str, extra: &str) -> String {
    config(url, extra).toml()
}

/// A token for `sub`, for audience `otc-gateway`, with `extra` claims.
fn token_with(sub: &str, extra: Value) -> String {
    jwt::hs256(&jwt::claims(sub, jwt::merged(json!({"aud": "otc-gateway"}), extra)), JWT_SECRET.as_bytes())
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
    let toml = e2e_config(
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

    let resp = call_anon(
        &gw,
        "Sms.Send@1.0.0",
        json!({"context": {"secrets": [{"id": "TWILIO_API_KEY", "value": "client-forged"}]}}),
    )
    .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let context = last_context(&server);
    assert_eq!(secret_value(&context, "TWILIO_API_KEY"), "twilio-from-vault-91ab");
    assert_eq!(context["secrets"].as_array().map(Vec::len), Some(1), "the client's value is replaced, not added");

    call_anon(&gw, "Mail.Send@1.0.0", json!({})).await.expect_status(200);
    assert_eq!(secret_value(&last_context(&server), "SENDGRID_KEY"), "sendgrid-from-file-55cd");
    call_anon(&gw, "Db.Query@1.0.0", json!({})).await.expect_status(200);
    assert_eq!(secret_value(&last_context(&server), "DB_PASSWORD"), "db-from-env-77ef");

    // Within cache_ttl the vault is not asked again.
    let asked = vault.requests_by(&vault_token).await;
    assert_eq!(asked.len(), 1, "{asked:?}");
    call_anon(&gw, "Sms.Send@1.0.0", json!({})).await.expect_status(200);
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
    let toml = e2e_config(
        &server.url(),
        &format!(
            "[vault]\naddress = \"{}\"\ntoken = \"env:TEST_VAULT_TOKEN\"\ncache_ttl = \"100ms\"\ntimeout = \"500ms\"\n\n\
             [secrets]\nTWILIO_API_KEY = \"vault:secret/tools/twilio#api_key\"\nMAPS_KEY = \"vault:secret/tools/maps#key\"\n",
            vault.url()
        ),
    );
    let gw = Gateway::start_with_env(&toml, &[("TEST_VAULT_TOKEN", vault_token.as_str())]).await;
    gw.wait_for_tool("Maps.Find@1.0.0").await;
    call_anon(&gw, "Sms.Send@1.0.0", json!({})).await.expect_status(200);

    vault.seal().await;
    tokio::time::sleep(Duration::from_millis(200)).await; // on purpose: past cache_ttl
    call_anon(&gw, "Sms.Send@1.0.0", json!({})).await.expect_status(200);
    assert_eq!(secret_value(&last_context(&server), "TWILIO_API_KEY"), "twilio-cached-3c");

    let calls_before = server.call_count();
    let started = Instant::now();
    let resp = call_anon(&gw, "Maps.Find@1.0.0", json!({})).await;
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
    let gw = Gateway::start(&e2e_config(&server.url(), "")).await;
    gw.wait_for_tool("Who.Am@1.0.0").await;

    let body = call_anon(&gw, "Sms.Send@1.0.0", json!({})).await.server_error(400);
    assert!(body["message"].as_str().unwrap().contains("UNCONFIGURED_KEY"), "{body}");
    assert_eq!(body["missing_requirements"]["secrets"][0]["id"], "UNCONFIGURED_KEY");
    let body = call_anon(&gw, "Who.Am@1.0.0", json!({})).await.server_error(400);
    assert_eq!(body["missing_requirements"]["user_id"], json!(true), "{body}");
    assert_eq!(server.call_count(), 0);

    // What the gateway does not manage passes through from the client.
    let resp = call_anon(
        &gw,
        "Sms.Send@1.0.0",
        json!({"context": {"secrets": [{"id": "UNCONFIGURED_KEY", "value": "client-own"}]}}),
    )
    .await;
    resp.expect_status(200);
    assert_eq!(secret_value(&last_context(&server), "UNCONFIGURED_KEY"), "client-own");
}

#[tokio::test]
async fn per_user_tokens_come_from_the_vault_for_the_authenticated_user_only() {
    let server =
        tool_server(vec![needing("Gmail.Read", json!({"authorization": [{"id": "google"}], "user_id": true}))]).await;
    let vault = OpenBao::start().await;
    vault.put("secret/oauth/google/alice", json!({"access_token": "ya29.alice-token-e4"})).await;
    let vault_token = vault.gateway_token().await;
    let toml = e2e_config(
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
    let alice = token_with("alice", json!({}));
    wait_until("Gmail.Read is callable", async || {
        call_as(&gw, &alice, "Gmail.Read@1.0.0", json!({})).await.status == 200
    })
    .await;
    let resp = call_as(&gw, &alice, "Gmail.Read@1.0.0", json!({"context": {"user_id": "mallory"}})).await;
    resp.expect_status(200);
    let context = last_context(&server);
    assert_eq!(context["user_id"], "alice", "the client cannot claim another user");
    assert_eq!(context["authorization"][0], json!({"id": "google", "token": "ya29.alice-token-e4"}));

    let calls = server.call_count();
    let body = call_as(&gw, &token_with("bob", json!({})), "Gmail.Read@1.0.0", json!({})).await.server_error(400);
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
    let toml = e2e_config(
        &server.url(),
        "[auth]\nmode = \"jwt\"\nhs256_secret = \"env:TEST_JWT_SECRET\"\nissuer = \"https://auth.example.com\"\naudience = \"otc-gateway\"\n\
         api_keys = [{ key = \"env:TEST_SVC_KEY\", user_id = \"svc-reports\" }]\n",
    );
    let gw =
        Gateway::start_with_env(&toml, &[("TEST_JWT_SECRET", JWT_SECRET), ("TEST_SVC_KEY", "svc-key-0a9b8c")]).await;
    assert_eq!(gw.get("/health").await.status, 200, "/health needs no credentials");
    assert_eq!(gw.get("/tools").await.status, 401, "/tools does");

    let good = token_with("carol", json!({"iss": "https://auth.example.com"}));
    wait_until("a good token gets through", async || {
        call_as(&gw, &good, "Calc.Echo@1.0.0", json!({})).await.status == 200
    })
    .await;
    assert_eq!(last_context(&server)["user_id"], "carol");

    let carol = |extra: Value| {
        jwt::claims("carol", jwt::merged(json!({"iss": "https://auth.example.com", "aud": "otc-gateway"}), extra))
    };
    let expired = jwt::hs256(&carol(json!({"exp": jwt::now() - 3600})), JWT_SECRET.as_bytes());
    let wrong_key = jwt::hs256(&carol(json!({})), b"another-secret");
    let wrong_aud = token_with("carol", json!({"iss": "https://auth.example.com", "aud": "someone-else"}));
    let wrong_iss = token_with("carol", json!({"iss": "https://evil.example.com"}));
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
        let resp = match token {
            Some(token) => call_as(&gw, token, "Calc.Echo@1.0.0", json!({})).await,
            None => call_anon(&gw, "Calc.Echo@1.0.0", json!({})).await,
        };
        assert_eq!(resp.status, 401, "{what}: {}", resp.text());
        assert!(resp.header("www-authenticate").is_some_and(|h| h.starts_with("Bearer")), "{what}");
        assert!(resp.json()["message"].is_string(), "{what}");
    }
    assert_eq!(server.call_count(), calls, "no refused call reaches the tool");

    // Service clients: an API key as Bearer or OXP-API-Key.
    call_as(&gw, "svc-key-0a9b8c", "Calc.Echo@1.0.0", json!({})).await.expect_status(200);
    assert_eq!(last_context(&server)["user_id"], "svc-reports");
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
    call_as(&gw, "client-token-should-stay-here", "Calc.Echo@1.0.0", json!({})).await.expect_status(200);
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
    let toml = e2e_config(
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
    let dave = token_with("dave", json!({}));
    wait_until("Sms.Send is callable", async || call_as(&gw, &dave, "Sms.Send@1.0.0", json!({})).await.status == 200)
        .await;
    let mut bodies = Vec::new();
    bodies.push(call_as(&gw, &dave, "Gmail.Read@1.0.0", json!({})).await.text());
    bodies.push(call_as(&gw, "leak-canary-apikey-5", "Gmail.Read@1.0.0", json!({})).await.text());
    bodies.push(call_as(&gw, "leak-canary-bad-token-6", "Sms.Send@1.0.0", json!({})).await.text());
    bodies.push(call_as(&gw, &token_with("eve", json!({})), "Gmail.Read@1.0.0", json!({})).await.text());
    vault.seal().await;
    bodies.push(call_as(&gw, &token_with("frank", json!({})), "Gmail.Read@1.0.0", json!({})).await.text());
    bodies.push(common::send(gw.admin, "GET", "/status", Bytes::new(), None).await.text());
    bodies.push(common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text());
    // The tool did get the values: the canaries are real.
    assert_eq!(
        secret_value(&server.calls().iter().map(common::forwarded).next().expect("a call")["context"], "ENV_KEY"),
        "leak-canary-env-4"
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
