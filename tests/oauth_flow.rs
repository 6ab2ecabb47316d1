//! Per-user OAuth end to end: the real binary as the OAuth client of a real
//! OpenID Connect provider (`oidc-provider` from npm, on loopback), a
//! browser driven over real sockets, and a tool server recording what it
//! was given.
//!
//! Two callers throughout (alice and bob, by API key): whatever one of them
//! gets (a link, a status, a grant) the other can neither use nor read.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::oidc::{flow_id, return_to, Browser, OidcProvider, Page};
use common::openbao::OpenBao;
use common::{echo, needing, send_with_headers, temp_file, wait_within, Gateway, GatewayConfig, Resp, ToolServer};
use serde_json::{json, Value};

const ALICE: &str = "alice-key-6f1c0d";
const BOB: &str = "bob-key-93ab27";
const CLIENT_ID: &str = "otc-gateway-test";
const CLIENT_SECRET: &str = "client-secret-4e9d8a1b";
/// Access tokens of the refresh tests live this many seconds...
const SHORT_TTL: u64 = 5;
/// ...and are due for a refresh (1 s margin) after this long.
const SHORT_TTL_PASSED: Duration = Duration::from_millis(4500);

/// One test's world: the provider, a tool server with two tools needing
/// it, and a gateway.
struct World {
    idp: OidcProvider,
    tools: ToolServer,
    gw: Gateway,
    state_dir: PathBuf,
    extra: String,
}

/// `Mail.Read` needs `mail.read`, `Mail.Send` needs `mail.send`, both from
/// provider `idp`.
fn mail_tools() -> Vec<Value> {
    let needs = |scope: &str| json!({"authorization": [{"id": "idp", "oauth2": {"scopes": [scope]}}]});
    vec![needing("Mail.Read", needs("mail.read")), needing("Mail.Send", needs("mail.send"))]
}

fn state_dir() -> PathBuf {
    let dir = temp_file("oauth-state", "d", "");
    std::fs::remove_file(&dir).expect("a fresh name");
    dir
}

/// The gateway's config: the tool server, two API keys, the provider (with
/// `extra` lines in its section) and the state directory.
///
/// The callers are service clients (API keys), so whose browser finished a
/// flow is vouched for by their application: `user_verification =
/// "verifier"`, the verifier page being the tool server's (a 404 whose URL
/// carries the `flow_id`), and the test confirming as the application would
/// (`confirm`), then sending the browser to the `return_to` it was answered
/// (`come_back`). `tests/connect_links.rs` covers `[login]`.
fn config(tools: &ToolServer, idp: &OidcProvider, state_dir: &std::path::Path, extra: &str) -> GatewayConfig {
    GatewayConfig::new().upstream_with("mail", &tools.url(), "authorization = [\"idp\"]").raw(&format!(
        r#"
[auth]
api_keys = [{{ key = "env:OAUTH_ALICE_KEY", user_id = "alice" }}, {{ key = "env:OAUTH_BOB_KEY", user_id = "bob" }}]

[authorization.idp]
issuer = "{issuer}"
client_id = "{CLIENT_ID}"
client_secret = "env:OAUTH_CLIENT_SECRET"
scopes = ["openid"]
user_verification = "verifier"
verifier_url = "{verifier}"
{extra}

[state]
dir = "{dir}"
"#,
        issuer = idp.issuer(),
        verifier = verifier_url(tools),
        dir = state_dir.display()
    ))
}

/// The application page a flow back from the provider is sent to.
fn verifier_url(tools: &ToolServer) -> String {
    format!("{}/connect/verify", tools.url())
}

/// The application confirms a flow as the caller with `key`.
async fn confirm_at(gw: std::net::SocketAddr, key: &str, flow_id: &str) -> Resp {
    let body = json!({ "flow_id": flow_id }).to_string();
    let headers = [("content-type", "application/json"), ("oxp-api-key", key)];
    send_with_headers(gw, "POST", "/oauth/confirm", Bytes::from(body), &headers).await
}

const ENV: [(&str, &str); 3] =
    [("OAUTH_ALICE_KEY", ALICE), ("OAUTH_BOB_KEY", BOB), ("OAUTH_CLIENT_SECRET", CLIENT_SECRET)];

/// [`ENV`] and the gateway's vault token, for `token = "env:OAUTH_VAULT_TOKEN"`.
fn env_with_vault_token(token: &str) -> Vec<(&str, &str)> {
    let mut env = ENV.to_vec();
    env.push(("OAUTH_VAULT_TOKEN", token));
    env
}

async fn start_gateway(config: &GatewayConfig, idp: &OidcProvider) -> Gateway {
    let gw = Gateway::start_with_env(&config.toml(), &ENV).await;
    idp.register_client(CLIENT_ID, CLIENT_SECRET, &[format!("{}/oauth/idp/callback", gw.url())]).await;
    gw.wait_for_tool("Mail.Read@1.0.0").await;
    gw
}

impl World {
    /// A provider whose access tokens live `ttl` seconds; `extra` goes into
    /// `[authorization.idp]`.
    async fn start(ttl: u64, extra: &str) -> World {
        let idp = OidcProvider::start(json!({"access_token_ttl": ttl, "scopes": ["mail.read", "mail.send"]})).await;
        let tools = ToolServer::start(common::catalog(mail_tools())).await;
        tools.on_call(echo);
        let state_dir = state_dir();
        let gw = start_gateway(&config(&tools, &idp, &state_dir, extra), &idp).await;
        World { idp, tools, gw, state_dir, extra: extra.to_owned() }
    }

    /// `tool` called as the caller with `key` (none: anonymous).
    async fn call_as(&self, gw: &Gateway, key: Option<&str>, tool: &str) -> Resp {
        let body = json!({"request": {"tool_id": tool, "input": {}}}).to_string();
        let mut headers = vec![("content-type", "application/json")];
        if let Some(key) = key {
            headers.push(("oxp-api-key", key));
        }
        send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body), &headers).await
    }

    async fn call(&self, key: &str, tool: &str) -> Resp {
        self.call_as(&self.gw, Some(key), tool).await
    }

    /// A call answered with a challenge for `idp`: its `url` and `check_url`.
    async fn challenge(&self, key: &str, tool: &str) -> (String, String) {
        let calls_before = self.tools.call_count();
        let resp = self.call(key, tool).await;
        let body = resp.server_error(400);
        let challenges = body["missing_requirements"]["authorization"].as_array().cloned().unwrap_or_default();
        assert_eq!(challenges.len(), 1, "one challenge: {body}");
        assert_eq!(challenges[0]["id"], "idp", "{body}");
        let url = challenges[0]["url"].as_str().expect("url").to_owned();
        let check = challenges[0]["check_url"].as_str().expect("check_url").to_owned();
        let base = format!("{}/oauth/idp/", self.gw.url());
        assert!(url.starts_with(&format!("{base}start/")), "{url}");
        assert!(check.starts_with(&format!("{base}check/")), "{check}");
        assert!(body["message"].as_str().unwrap_or_default().contains(&url), "the message carries the link: {body}");
        assert_eq!(self.tools.call_count(), calls_before, "a challenged call never reaches the upstream");
        (url, check)
    }

    /// GETs a `check_url` as the caller with `key`.
    async fn check(&self, key: &str, check_url: &str) -> Resp {
        let path = check_url.strip_prefix(&self.gw.url()).expect("under public_url");
        send_with_headers(self.gw.addr, "GET", path, Bytes::new(), &[("oxp-api-key", key)]).await
    }

    async fn status(&self, key: &str, check_url: &str) -> String {
        let resp = self.check(key, check_url).await;
        resp.expect_status(200);
        resp.json()["status"].as_str().unwrap_or_default().to_owned()
    }

    /// Opens a link in a new browser, logs in at the provider as `user`
    /// and consents: that browser, at the verifier page the gateway's
    /// callback sent it to.
    async fn authorize(&self, url: &str, user: &str) -> AtVerifier {
        let browser = Browser::new();
        let page = browser.follow_as(url, user).await;
        assert!(page.url.starts_with(&format!("{}?flow_id=", verifier_url(&self.tools))), "ended at {}", page.url);
        AtVerifier { browser, page }
    }

    /// The application confirms the flow at the verifier as the caller
    /// with `key`.
    async fn confirm(&self, key: &str, at: &AtVerifier) -> Resp {
        confirm_at(self.gw.addr, key, &flow_id(&at.page)).await
    }

    /// The `idp` token the tool server got on its last call.
    fn last_token(&self) -> String {
        let call = self.tools.last_request();
        let context = &call["context"];
        let tokens = context["authorization"].as_array().cloned().unwrap_or_default();
        let token = tokens.iter().find(|t| t["id"] == "idp").unwrap_or_else(|| panic!("no idp token in {context}"));
        token["token"].as_str().expect("a string token").to_owned()
    }

    async fn metrics(&self) -> String {
        common::send(self.gw.admin, "GET", "/metrics", Bytes::new(), None).await.text()
    }

    async fn connect(&self, key: &str, user: &str, tool: &str) {
        let (url, check) = self.challenge(key, tool).await;
        let at = self.authorize(&url, user).await;
        assert_eq!(self.status(key, &check).await, "pending", "not before the application confirms");
        let confirmed = self.confirm(key, &at).await;
        assert_eq!(self.status(key, &check).await, "pending", "not before the browser is back");
        come_back(&at.browser, &confirmed).await;
        assert_eq!(self.status(key, &check).await, "completed");
    }
}

/// A browser that consented at the provider, at the verifier page the
/// gateway sent it to (it holds the flow's cookie).
struct AtVerifier {
    browser: Browser,
    page: Page,
}

/// The application sends `browser` to the `return_to` it was `confirmed`
/// with: the gateway's page saying the grant is kept.
async fn come_back(browser: &Browser, confirmed: &Resp) -> Page {
    let page = browser.get_no_follow(&return_to(confirmed)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("can now be used"), "{}", page.body);
    page
}

/// The value of a metric series, 0 when absent.
fn metric(text: &str, series: &str) -> u64 {
    text.lines().find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok())).unwrap_or(0)
}

#[tokio::test]
async fn the_whole_flow_from_challenge_to_injected_token() {
    let w = World::start(3600, "authorize_params = { prompt = \"consent\" }").await;
    let (url, check) = w.challenge(ALICE, "Mail.Read").await;
    assert_eq!(w.status(ALICE, &check).await, "pending");

    // The link sends the browser to the provider: code grant, PKCE S256, a
    // state, the callback, the configured and the tool's scopes.
    let browser = Browser::new();
    let redirect = browser.get_no_follow(&url).await;
    assert_eq!(redirect.status, 302, "{}", redirect.body);
    let location = redirect.headers.get("location").and_then(|v| v.to_str().ok()).expect("location").to_owned();
    let query: std::collections::HashMap<String, String> = location
        .split_once('?')
        .map(|(_, q)| q)
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), urlencoding_decode(v)))
        .collect();
    assert!(location.starts_with(&w.idp.issuer()), "{location}");
    assert_eq!(query["response_type"], "code");
    assert_eq!(query["code_challenge_method"], "S256");
    assert_eq!(query["client_id"], CLIENT_ID);
    assert_eq!(query["prompt"], "consent", "authorize_params are added");
    assert_eq!(query["redirect_uri"], format!("{}/oauth/idp/callback", w.gw.url()));
    assert!(query["state"].len() >= 32, "an unguessable state");
    let scopes: BTreeSet<&str> = query["scope"].split(' ').collect();
    assert_eq!(scopes, BTreeSet::from(["openid", "mail.read"]));
    // The flow is bound to this browser: a cookie only the gateway's
    // /oauth/ paths get, which no script reads.
    let set_cookie = redirect.headers.get("set-cookie").and_then(|v| v.to_str().ok()).expect("the flow's cookie");
    assert!(set_cookie.starts_with("otc-flow="), "{set_cookie}");
    for attribute in ["Path=/oauth/", "HttpOnly", "SameSite=Lax"] {
        assert!(set_cookie.contains(attribute), "{attribute} missing: {set_cookie}");
    }

    // The same link a second time, or a HEAD (a chat preview, a mail
    // scanner): nothing is used up, each GET is a flow of its own.
    let head =
        send_with_headers(w.gw.addr, "HEAD", url.strip_prefix(&w.gw.url()).expect("path"), Bytes::new(), &[]).await;
    assert_eq!(head.status, 200);
    let again = Browser::new().get_no_follow(&url).await;
    assert_eq!(again.status, 302, "{}", again.body);
    assert_ne!(again.headers.get("location"), redirect.headers.get("location"), "a new state and verifier");

    // Log in and consent at the provider; the callback hands the flow to
    // the application (the verifier URL carries the flow's id and nothing
    // that finishes it), which confirms it as alice and is told the account
    // and where to send her browser; back there, the grant is stored.
    let page = browser.follow_as(&location, "alice").await;
    assert_eq!(page.url, format!("{}?flow_id={}", verifier_url(&w.tools), flow_id(&page)));
    assert_eq!(w.status(ALICE, &check).await, "pending");
    assert_eq!(w.idp.stats().await["token_requests"]["authorization_code"], 0, "no code exchanged before");
    let at = AtVerifier { browser, page };
    let confirmed = w.confirm(ALICE, &at).await;
    let answer = confirmed.json();
    assert_eq!(answer["provider"], "idp", "{answer}");
    assert_eq!(answer["account"], json!({"subject": "alice"}), "the provider account being connected: {answer}");
    assert!(return_to(&confirmed).starts_with(&format!("{}/oauth/idp/return/", w.gw.url())), "{answer}");
    assert_eq!(w.idp.stats().await["token_requests"]["authorization_code"], 1, "exchanged once confirmed");
    assert_eq!(w.status(ALICE, &check).await, "pending", "not before the browser is back");
    assert!(grants_at(&list_grants(w.gw.admin, "").await, "idp").is_empty(), "nothing stored yet");
    let connected = come_back(&at.browser, &confirmed).await;
    assert!(connected.body.contains("(as alice)"), "{}", connected.body);
    assert_eq!(w.status(ALICE, &check).await, "completed");
    // Completed: the link is spent now, and so are the flow and its return.
    let spent = Browser::new().get_no_follow(&url).await;
    assert_eq!(spent.status, 400);
    assert!(spent.body.contains("already used"), "{}", spent.body);
    assert_eq!(w.confirm(ALICE, &at).await.status, 404, "a flow is confirmed once");
    let returned_again = at.browser.get_no_follow(&return_to(&confirmed)).await;
    assert_eq!(returned_again.status, 400, "{}", returned_again.body);

    // The next call carries alice's token.
    w.call(ALICE, "Mail.Read").await.result();
    let token = w.last_token();
    assert!(token.len() >= 20, "a real access token: {token:?}");
    assert_eq!(w.idp.stats().await["token_requests"]["authorization_code"], 1);

    // The callback replayed: nothing happens, a clear page.
    // (Its state was used: the callback with it is not valid any more.)
    let replay = Browser::new()
        .get_no_follow(&format!("{}/oauth/idp/callback?code=x&state={}", w.gw.url(), query["state"]))
        .await;
    assert_eq!(replay.status, 400, "{}", replay.body);
    assert!(replay.body.contains("not valid"), "{}", replay.body);
    assert_eq!(w.idp.stats().await["token_requests"]["authorization_code"], 1, "a replayed code is not exchanged");

    let metrics = w.metrics().await;
    assert_eq!(metric(&metrics, r#"otc_gateway_oauth_challenges_total{event="issued",provider="idp"}"#), 1);
    assert_eq!(metric(&metrics, r#"otc_gateway_oauth_challenges_total{event="completed",provider="idp"}"#), 1);
    // The token never shows in what the gateway says about itself.
    for text in [metrics, w.gw.logs(), w.gw.stdout()] {
        assert!(!text.contains(&token), "the token leaked");
    }
    let status = common::send(w.gw.admin, "GET", "/status", Bytes::new(), None).await.text();
    assert!(!status.contains(&token), "the token leaked into /status");
}

/// `%XX` and `+` decoded.
fn urlencoding_decode(text: &str) -> String {
    let bytes = text.replace('+', " ").into_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() + 1 {
            if let Ok(b) = u8::from_str_radix(std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap_or(""), 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn one_callers_link_status_and_grant_are_never_anothers() {
    let w = World::start(3600, "").await;
    let (alice_url, alice_check) = w.challenge(ALICE, "Mail.Read").await;
    let (_, bob_check) = w.challenge(BOB, "Mail.Read").await;

    // Bob cannot read alice's status, nor she his: as if never issued.
    w.check(BOB, &alice_check).await.expect_status(404);
    w.check(ALICE, &bob_check).await.expect_status(404);
    // Without credentials, no status at all.
    let path = alice_check.strip_prefix(&w.gw.url()).expect("path");
    assert_eq!(common::send(w.gw.addr, "GET", path, Bytes::new(), None).await.status, 404);

    // Alice's flow comes back. Unauthenticated, or not JSON: refused, and
    // the flow is untouched.
    let at = w.authorize(&alice_url, "alice").await;
    let anonymous = send_with_headers(
        w.gw.addr,
        "POST",
        "/oauth/confirm",
        Bytes::from(json!({"flow_id": flow_id(&at.page)}).to_string()),
        &[("content-type", "application/json")],
    )
    .await;
    assert_eq!(anonymous.status, 400, "{}", anonymous.text());
    let garbled =
        send_with_headers(w.gw.addr, "POST", "/oauth/confirm", Bytes::from_static(b"flow"), &[("oxp-api-key", ALICE)])
            .await;
    assert_eq!(garbled.status, 400, "{}", garbled.text());
    // Bob's application confirming it as bob is refused, and ends that
    // flow: alice's own application finds nothing left to confirm, nothing
    // was exchanged or stored, and her link is still open.
    let refused = w.confirm(BOB, &at).await;
    assert_eq!(refused.status, 403, "{}", refused.text());
    assert!(refused.text().contains("another user"), "{}", refused.text());
    assert!(!refused.text().contains("return_to"), "{}", refused.text());
    let ended = w.confirm(ALICE, &at).await;
    assert_eq!(ended.status, 404, "a refused confirmation ends the flow: {}", ended.text());
    assert_eq!(w.status(ALICE, &alice_check).await, "pending");
    w.challenge(BOB, "Mail.Read").await;
    assert_eq!(w.idp.stats().await["token_requests"]["authorization_code"], 0, "nothing exchanged for bob");
    assert!(grants_at(&list_grants(w.gw.admin, "").await, "idp").is_empty(), "nothing stored");
    // Alice opens her link again: a new flow, which she completes.
    let at = w.authorize(&alice_url, "alice").await;
    come_back(&at.browser, &w.confirm(ALICE, &at).await).await;
    assert_eq!(w.status(ALICE, &alice_check).await, "completed");
    assert_eq!(w.status(BOB, &bob_check).await, "pending");
    w.call(ALICE, "Mail.Read").await.result();
    let alice_token = w.last_token();
    w.challenge(BOB, "Mail.Read").await;

    // Bob disconnecting removes only his own (absent) grant.
    let resp = send_with_headers(w.gw.addr, "DELETE", "/oauth/idp", Bytes::new(), &[("oxp-api-key", BOB)]).await;
    resp.expect_status(200);
    assert_eq!(resp.json()["disconnected"], false);
    w.call(ALICE, "Mail.Read").await.result();
    assert_eq!(w.last_token(), alice_token);

    // An anonymous caller is never challenged for a per-user grant.
    let anonymous = w.call_as(&w.gw, None, "Mail.Read").await;
    let body = anonymous.server_error(400);
    assert_eq!(body["missing_requirements"]["user_id"], true, "{body}");
    assert!(body["missing_requirements"]["authorization"][0].get("url").is_none(), "{body}");
}

#[tokio::test]
async fn forged_and_refused_callbacks_store_nothing() {
    let w = World::start(3600, "").await;
    // A state the gateway never issued.
    let forged =
        Browser::new().get_no_follow(&format!("{}/oauth/idp/callback?code=abc&state=forged", w.gw.url())).await;
    assert_eq!(forged.status, 400);
    assert!(forged.body.contains("not valid"), "{}", forged.body);
    assert_eq!(forged.headers.get("content-type").and_then(|v| v.to_str().ok()), Some("text/html; charset=utf-8"));
    // No state at all.
    let bare = Browser::new().get_no_follow(&format!("{}/oauth/idp/callback?code=abc", w.gw.url())).await;
    assert_eq!(bare.status, 400);
    // A link that was never issued, and one of a provider not configured.
    let unknown = Browser::new().get_no_follow(&format!("{}/oauth/idp/start/nonesuch", w.gw.url())).await;
    assert_eq!(unknown.status, 400);
    let other = Browser::new().get_no_follow(&format!("{}/oauth/nope/start/x", w.gw.url())).await;
    assert_eq!(other.status, 404);

    // The provider sends the browser back with an error. In another
    // browser than the one that opened the link: refused, untouched. In
    // that one: nothing stored, and (that browser not being proven alice's)
    // the link stays open.
    let (url, check) = w.challenge(ALICE, "Mail.Read").await;
    let opener = Browser::new();
    let redirect = opener.get_no_follow(&url).await;
    let location = redirect.headers.get("location").and_then(|v| v.to_str().ok()).expect("location").to_owned();
    let state = location.split(['?', '&']).find_map(|kv| kv.strip_prefix("state=")).expect("state").to_owned();
    let refusal = format!("{}/oauth/idp/callback?error=access_denied&state={state}", w.gw.url());
    let elsewhere = Browser::new().get_no_follow(&refusal).await;
    assert_eq!(elsewhere.status, 403, "{}", elsewhere.body);
    assert!(elsewhere.body.contains("another browser"), "{}", elsewhere.body);
    let refused = opener.get_no_follow(&refusal).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("did not grant"), "{}", refused.body);
    assert_eq!(w.status(ALICE, &check).await, "pending");
    w.challenge(ALICE, "Mail.Read").await;
    assert_eq!(w.idp.stats().await["token_requests"]["authorization_code"], 0);
    // Alice can still finish the same link.
    let at = w.authorize(&url, "alice").await;
    come_back(&at.browser, &w.confirm(ALICE, &at).await).await;
    assert_eq!(w.status(ALICE, &check).await, "completed");
}

/// The flow is bound to the browser that opened the link (a cookie set
/// then, checked at the provider's callback): the provider's URL forwarded
/// to another browser, which consents there, finishes nothing, and spoils
/// nothing for the browser that opened it.
#[tokio::test]
async fn a_flow_comes_back_only_to_the_browser_that_opened_its_link() {
    let w = World::start(3600, "").await;
    let (url, check) = w.challenge(ALICE, "Mail.Read").await;
    let opener = Browser::new();
    let redirect = opener.get_no_follow(&url).await;
    let location = redirect.headers.get("location").and_then(|v| v.to_str().ok()).expect("location").to_owned();

    let forwarded = Browser::new();
    let page = forwarded.follow_as(&location, "bob").await;
    assert_eq!(page.status, 403, "{}", page.body);
    assert!(page.body.contains("started in another browser"), "{}", page.body);
    assert!(forwarded.visited_path("/oauth/idp/callback").is_some(), "it did reach the callback");
    assert!(!page.url.contains("flow_id"), "no flow for the application: {}", page.url);
    assert_eq!(w.status(ALICE, &check).await, "pending");

    // The browser that opened it takes the same authorization request on.
    let page = opener.follow_as(&location, "alice").await;
    let at = AtVerifier { browser: opener, page };
    let confirmed = w.confirm(ALICE, &at).await;
    assert_eq!(confirmed.json()["account"]["subject"], "alice", "{}", confirmed.text());
    come_back(&at.browser, &confirmed).await;
    assert_eq!(w.status(ALICE, &check).await, "completed");
}

/// The attack: bob gets alice's link (leaked), opens it in his browser and
/// consents with his own provider account, then has alice's application
/// confirm the flow (he sends her the verifier page's URL). Her application
/// is told whose account it is, and her browser, sent to `return_to`, is not
/// the one that consented: nothing is stored for her, and her own flow
/// still works.
#[tokio::test]
async fn a_leaked_link_consented_in_another_browser_connects_nothing() {
    let w = World::start(3600, "").await;
    let (url, check) = w.challenge(ALICE, "Mail.Read").await;

    let bobs = w.authorize(&url, "bob").await;
    let verifier_page = bobs.page.url.clone();
    let alices_browser = Browser::new();
    let at_alice = AtVerifier { page: alices_browser.get_no_follow(&verifier_page).await, browser: alices_browser };
    let confirmed = w.confirm(ALICE, &at_alice).await;
    let answer = confirmed.json();
    assert_eq!(answer["account"], json!({"subject": "bob"}), "the application sees whose account it is: {answer}");
    let back = at_alice.browser.get_no_follow(&return_to(&confirmed)).await;
    assert_eq!(back.status, 403, "{}", back.body);
    assert!(back.body.contains("another browser"), "{}", back.body);
    assert_eq!(w.status(ALICE, &check).await, "pending");
    assert!(grants_at(&list_grants(w.gw.admin, "").await, "idp").is_empty(), "nothing stored for alice");
    // Bob's own confirmation is refused (the flow is confirmed once, and not his).
    assert_eq!(w.confirm(BOB, &bobs).await.status, 404);

    // Alice's own flow, from the same link.
    let at = w.authorize(&url, "alice").await;
    let confirmed = w.confirm(ALICE, &at).await;
    assert_eq!(confirmed.json()["account"], json!({"subject": "alice"}), "{}", confirmed.text());
    come_back(&at.browser, &confirmed).await;
    assert_eq!(w.status(ALICE, &check).await, "completed");
    w.call(ALICE, "Mail.Read").await.result();
    w.challenge(BOB, "Mail.Read").await;
}

/// `return_to` finishes the flow only in the browser holding its cookie:
/// a browser without it, or with another flow's, gets 403 and uses
/// nothing up; the flow's own browser then finishes it, once.
#[tokio::test]
async fn return_to_opened_without_the_flows_cookie_does_nothing() {
    let w = World::start(3600, "").await;
    let (alice_url, alice_check) = w.challenge(ALICE, "Mail.Read").await;
    let (bob_url, _) = w.challenge(BOB, "Mail.Read").await;
    let alices = w.authorize(&alice_url, "alice").await;
    let bobs = w.authorize(&bob_url, "bob").await;
    let confirmed = w.confirm(ALICE, &alices).await;
    let back = return_to(&confirmed);

    for (who, browser) in [("a browser without cookies", &Browser::new()), ("bob's browser", &bobs.browser)] {
        let page = browser.get_no_follow(&back).await;
        assert_eq!(page.status, 403, "{who}: {}", page.body);
        assert_eq!(w.status(ALICE, &alice_check).await, "pending", "{who}");
    }
    // Through another provider's path, or with a value never made: nothing.
    let value = back.rsplit('/').next().expect("the value");
    let elsewhere = alices.browser.get_no_follow(&format!("{}/oauth/nope/return/{value}", w.gw.url())).await;
    assert_eq!(elsewhere.status, 404, "{}", elsewhere.body);
    let forged = alices.browser.get_no_follow(&format!("{}/oauth/idp/return/forged", w.gw.url())).await;
    assert_eq!(forged.status, 400, "{}", forged.body);
    // A HEAD (a link preview) changes nothing either.
    let path = back.strip_prefix(&w.gw.url()).expect("under public_url");
    assert_eq!(send_with_headers(w.gw.addr, "HEAD", path, Bytes::new(), &[]).await.status, 200);

    come_back(&alices.browser, &confirmed).await;
    assert_eq!(w.status(ALICE, &alice_check).await, "completed");
    let again = alices.browser.get_no_follow(&back).await;
    assert_eq!(again.status, 400, "{}", again.body);
    w.call(ALICE, "Mail.Read").await.result();
    w.challenge(BOB, "Mail.Read").await;
}

/// `POST /oauth/confirm` vouches for a browser with the user's own
/// credentials: as at `/mcp`, a JWT must name the gateway's resource in
/// `aud`. One without `aud`, or for another resource, is 401 and leaves
/// the flow for the right token.
#[tokio::test]
async fn a_confirmation_needs_a_token_issued_for_the_gateway() {
    const JWT_SECRET: &str = "oauth-flow-jwt-secret-0123456789abcdef";
    let idp = OidcProvider::start(json!({"scopes": ["mail.read", "mail.send"]})).await;
    let tools = ToolServer::start(common::catalog(mail_tools())).await;
    tools.on_call(echo);
    let config = config(&tools, &idp, &state_dir(), "")
        .toml()
        .replace("[auth]\n", "[auth]\nmode = \"jwt\"\nhs256_secret = \"env:OAUTH_JWT_SECRET\"\n");
    let mut env = ENV.to_vec();
    env.push(("OAUTH_JWT_SECRET", JWT_SECRET));
    let gw = Gateway::start_with_env(&config, &env).await;
    idp.register_client(CLIENT_ID, CLIENT_SECRET, &[format!("{}/oauth/idp/callback", gw.url())]).await;
    let w = World { idp, tools, gw, state_dir: state_dir(), extra: String::new() };
    let bearer = |aud: Value| {
        let claims = common::jwt::claims("carol", json!({ "aud": aud }));
        common::jwt::bearer(&common::jwt::hs256(&claims, JWT_SECRET.as_bytes()))
    };
    let resource = format!("{}/mcp", w.gw.url());
    let addr = w.gw.addr;
    let as_carol = |aud: Value| {
        let auth = bearer(aud);
        async move {
            let body = json!({"request": {"tool_id": "Mail.Read", "input": {}}}).to_string();
            let headers = [("content-type", "application/json"), ("authorization", auth.as_str())];
            send_with_headers(addr, "POST", "/tools/call", Bytes::from(body), &headers).await
        }
    };
    // (The OTC routes take a token without `aud`.)
    let challenged = wait_within(Duration::from_secs(20), "Mail.Read is known", async || {
        let resp = as_carol(Value::Null).await;
        if resp.text().contains("missing_requirements") {
            Ok(resp)
        } else {
            Err(resp.text())
        }
    })
    .await;
    let url = challenged.server_error(400)["missing_requirements"]["authorization"][0]["url"]
        .as_str()
        .expect("a link")
        .to_owned();
    let at = w.authorize(&url, "carol").await;
    let confirm = |aud: Value| {
        let auth = bearer(aud);
        let body = Bytes::from(json!({ "flow_id": flow_id(&at.page) }).to_string());
        async move {
            let headers = [("content-type", "application/json"), ("authorization", auth.as_str())];
            send_with_headers(addr, "POST", "/oauth/confirm", body, &headers).await
        }
    };
    for aud in [Value::Null, json!("https://other.example.com/mcp"), json!(["https://other.example.com/mcp"])] {
        let refused = confirm(aud.clone()).await;
        assert_eq!(refused.status, 401, "aud {aud}: {}", refused.text());
    }
    let confirmed = confirm(json!(resource)).await;
    come_back(&at.browser, &confirmed).await;
    as_carol(Value::Null).await.result();
}

#[tokio::test]
async fn links_are_made_under_the_configured_public_url() {
    let idp = OidcProvider::start(json!({})).await;
    let tools = ToolServer::start(common::catalog(mail_tools())).await;
    tools.on_call(echo);
    let config = config(&tools, &idp, &state_dir(), "")
        .server_line("public_url = \"https://tools.example.com/gw\"")
        .server_line("allowed_hosts = [\"*\"]");
    let gw = Gateway::start_with_env(&config.toml(), &ENV).await;
    gw.wait_for_tool("Mail.Read@1.0.0").await;
    let body = json!({"request": {"tool_id": "Mail.Read", "input": {}}}).to_string();
    let headers = [("content-type", "application/json"), ("oxp-api-key", ALICE)];
    let resp = send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body), &headers).await;
    let challenge = resp.server_error(400)["missing_requirements"]["authorization"][0].clone();
    let url = challenge["url"].as_str().expect("url");
    assert!(url.starts_with("https://tools.example.com/gw/oauth/idp/start/"), "{challenge}");
    assert!(challenge["check_url"]
        .as_str()
        .expect("check")
        .starts_with("https://tools.example.com/gw/oauth/idp/check/"));
    // The redirect URI sent to the provider is under it too.
    let path = url.strip_prefix("https://tools.example.com/gw").expect("under public_url");
    let redirect = Browser::new().get_no_follow(&format!("{}{path}", gw.url())).await;
    let location = redirect.headers.get("location").and_then(|v| v.to_str().ok()).expect("location").to_owned();
    assert!(
        location.contains("redirect_uri=https%3A%2F%2Ftools.example.com%2Fgw%2Foauth%2Fidp%2Fcallback"),
        "{location}"
    );
}

#[tokio::test]
async fn an_unopened_link_expires() {
    let w = World::start(3600, "link_ttl = \"1s\"").await;
    let (url, check) = w.challenge(ALICE, "Mail.Read").await;
    // On purpose: the 1 s link_ttl has to run out.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(w.status(ALICE, &check).await, "expired");
    let late = Browser::new().get_no_follow(&url).await;
    assert_eq!(late.status, 400);
    assert!(late.body.contains("expired"), "{}", late.body);
}

#[tokio::test]
async fn tokens_are_refreshed_once_however_many_calls_ask() {
    // Short-lived tokens, refreshed within one second of expiry.
    let w = World::start(SHORT_TTL, "refresh_margin = \"1s\"").await;
    w.connect(ALICE, "alice", "Mail.Read").await;
    w.call(ALICE, "Mail.Read").await.result();
    let first = w.last_token();
    // On purpose: the access token has to come due for a refresh.
    tokio::time::sleep(SHORT_TTL_PASSED).await;

    // Twenty calls at once, all due for a refresh: one refresh between them.
    for resp in call_many(&[w.gw.addr], ALICE, 20).await {
        resp.result();
    }
    let stats = w.idp.stats().await;
    assert_eq!(stats["token_requests"]["refresh_token"], 1, "{stats}");
    let second = w.last_token();
    assert_ne!(first, second, "the refreshed token is injected");
    let tokens: BTreeSet<String> = w
        .tools
        .calls()
        .iter()
        .skip(1)
        .filter_map(|c| common::forwarded(c)["context"]["authorization"][0]["token"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(tokens, BTreeSet::from([second.clone()]), "every call after the refresh got the new token");
    let metrics = w.metrics().await;
    assert_eq!(metric(&metrics, r#"otc_gateway_oauth_refreshes_total{outcome="ok",provider="idp"}"#), 1);

    // A refresh the provider refuses: the grant is dropped, a new challenge.
    // (On purpose: the refreshed token has to come due in turn.)
    tokio::time::sleep(SHORT_TTL_PASSED).await;
    w.idp.invalidate_refresh_tokens().await;
    w.challenge(ALICE, "Mail.Read").await;
    let metrics = w.metrics().await;
    assert_eq!(metric(&metrics, r#"otc_gateway_oauth_refreshes_total{outcome="invalid_grant",provider="idp"}"#), 1);
}

/// `n` calls of `Mail.Read` as the caller with `key` on each gateway at
/// once.
async fn call_many(gateways: &[std::net::SocketAddr], key: &'static str, n: usize) -> Vec<Resp> {
    let mut calls = Vec::new();
    for _ in 0..n {
        for &addr in gateways {
            let body = json!({"request": {"tool_id": "Mail.Read", "input": {}}}).to_string();
            calls.push(tokio::spawn(async move {
                let headers = [("content-type", "application/json"), ("oxp-api-key", key)];
                send_with_headers(addr, "POST", "/tools/call", Bytes::from(body), &headers).await
            }));
        }
    }
    let mut answers = Vec::new();
    for call in calls {
        answers.push(call.await.expect("a call task"));
    }
    answers
}

#[tokio::test]
async fn more_scopes_ask_again_for_the_union() {
    let w = World::start(3600, "").await;
    w.connect(ALICE, "alice", "Mail.Read").await;
    w.call(ALICE, "Mail.Read").await.result();
    let first = grant_of(&list_grants(w.gw.admin, "").await, "idp", "alice").expect("alice's grant");
    // (On purpose: into the next second, so a grant stamped again would
    // show it; grants are stamped in whole seconds.)
    tokio::time::sleep(Duration::from_millis(1100)).await;

    // Mail.Send needs mail.send: a new challenge, asking for everything.
    let (url, check) = w.challenge(ALICE, "Mail.Send").await;
    let browser = Browser::new();
    let redirect = browser.get_no_follow(&url).await;
    let location = redirect.headers.get("location").and_then(|v| v.to_str().ok()).expect("location").to_owned();
    let scope = location.split(['?', '&']).find_map(|kv| kv.strip_prefix("scope=")).expect("scope");
    let scopes: BTreeSet<String> = urlencoding_decode(scope).split(' ').map(str::to_owned).collect();
    assert_eq!(scopes, BTreeSet::from(["openid".into(), "mail.read".into(), "mail.send".into()]));
    let page = browser.follow_as(&location, "alice").await;
    let at = AtVerifier { browser, page };
    come_back(&at.browser, &w.confirm(ALICE, &at).await).await;
    assert_eq!(w.status(ALICE, &check).await, "completed");
    w.call(ALICE, "Mail.Send").await.result();
    w.call(ALICE, "Mail.Read").await.result();
    // The wider grant replaced the first; when alice first connected stays.
    let wider = grant_of(&list_grants(w.gw.admin, "").await, "idp", "alice").expect("alice's grant");
    assert_eq!(wider["connected_at"], first["connected_at"], "{first} then {wider}");
    assert_ne!(wider["expires_at"], first["expires_at"], "a new grant: {first} then {wider}");
    assert!(wider["scopes"].as_array().is_some_and(|s| s.contains(&json!("mail.send"))), "{wider}");
}

#[tokio::test]
async fn disconnect_forgets_and_revokes() {
    let w = World::start(3600, "").await;
    w.connect(ALICE, "alice", "Mail.Read").await;
    w.call(ALICE, "Mail.Read").await.result();
    let resp = send_with_headers(w.gw.addr, "DELETE", "/oauth/idp", Bytes::new(), &[("oxp-api-key", ALICE)]).await;
    resp.expect_status(200);
    assert_eq!(resp.json()["disconnected"], true);
    assert_eq!(w.idp.stats().await["revocations"], 1, "revoked at the provider (RFC 7009)");
    w.challenge(ALICE, "Mail.Read").await;
    // Unauthenticated or wrong method: refused.
    let anonymous = send_with_headers(w.gw.addr, "DELETE", "/oauth/idp", Bytes::new(), &[]).await;
    assert_eq!(anonymous.status, 400);
    let wrong = send_with_headers(w.gw.addr, "POST", "/oauth/idp", Bytes::new(), &[("oxp-api-key", ALICE)]).await;
    assert_eq!(wrong.status, 405);
}

/// `DELETE /grants/<provider>/<user_id>` on the admin listener: only with
/// the admin token (never a caller's credentials), one user's grant only;
/// `GET /explain` reports each grant without its token.
#[tokio::test]
async fn an_admin_revokes_one_users_grant_with_the_admin_token_only() {
    let idp = OidcProvider::start(json!({"access_token_ttl": 3600, "scopes": ["mail.read", "mail.send"]})).await;
    let tools = ToolServer::start(common::catalog(mail_tools())).await;
    tools.on_call(echo);
    let state_dir = state_dir();
    let gateway_config = config(&tools, &idp, &state_dir, "").server_line("admin_token = \"env:OAUTH_ADMIN_TOKEN\"");
    let mut env = ENV.to_vec();
    env.push(("OAUTH_ADMIN_TOKEN", ADMIN));
    let gw = Gateway::start_with_env(&gateway_config.toml(), &env).await;
    idp.register_client(CLIENT_ID, CLIENT_SECRET, &[format!("{}/oauth/idp/callback", gw.url())]).await;
    gw.wait_for_tool("Mail.Read@1.0.0").await;
    let w = World { idp, tools, gw, state_dir, extra: String::new() };
    w.connect(ALICE, "alice", "Mail.Read").await;
    w.connect(BOB, "bob", "Mail.Read").await;
    w.call(ALICE, "Mail.Read").await.result();
    let alice_token = w.last_token();

    let explain = |user: &'static str| {
        let admin = w.gw.admin;
        async move {
            let path = format!("/explain?user_id={user}&api_key=true&tool=Mail.Read");
            let resp = send_with_headers(admin, "GET", &path, Bytes::new(), &[ADMIN_AUTH]).await;
            assert_eq!(resp.status, 200, "{}", resp.text());
            resp.json()
        }
    };
    let idp_requirement = |explained: &Value| {
        let all = explained["requirements"].as_array().cloned().unwrap_or_default();
        all.into_iter().find(|r| r["kind"] == "authorization" && r["id"] == "idp").expect("the idp requirement")
    };
    // `GET /grants`: both users, their scopes and times, never a token.
    let listed = list_grants(w.gw.admin, "").await;
    let users: Vec<String> =
        grants_at(&listed, "idp").iter().filter_map(|g| g["user_id"].as_str().map(str::to_owned)).collect();
    assert_eq!(users, ["alice", "bob"], "{listed}");
    let alice_grant = grant_of(&listed, "idp", "alice").expect("alice's grant");
    assert!(alice_grant["scopes"].as_array().is_some_and(|s| s.contains(&json!("mail.read"))), "{listed}");
    let connected_at = alice_grant["connected_at"].as_u64().expect("connected_at recorded");
    assert!(connected_at.abs_diff(unix_now()) < 600, "{listed}");
    assert!(alice_grant["expires_at"].as_u64().is_some_and(|at| at > connected_at), "{listed}");
    assert_eq!(alice_grant["refreshed_at"], Value::Null, "never refreshed yet: {listed}");
    assert!(!listed.to_string().contains(&alice_token), "no token value in the listing");
    assert_eq!(list_grants(w.gw.admin, "?provider=idp").await, listed);
    let unknown = send_with_headers(w.gw.admin, "GET", "/grants?provider=nope", Bytes::new(), &[ADMIN_AUTH]).await;
    assert_eq!(unknown.status, 404, "{}", unknown.text());
    let bad = send_with_headers(w.gw.admin, "GET", "/grants?user=alice", Bytes::new(), &[ADMIN_AUTH]).await;
    assert_eq!(bad.status, 400, "{}", bad.text());
    // Only with the admin token: anyone else lists nothing.
    let anyone = common::send(w.gw.admin, "GET", "/grants", Bytes::new(), None).await;
    assert_eq!(anyone.status, 401, "{}", anyone.text());
    assert!(!anyone.text().contains("alice"), "{}", anyone.text());
    // Only on the admin listener: a caller on the data plane lists nothing.
    let from_data_plane = send_with_headers(w.gw.addr, "GET", "/grants", Bytes::new(), &[("oxp-api-key", ALICE)]).await;
    assert!(!from_data_plane.text().contains("bob"), "{}", from_data_plane.text());
    assert_ne!(from_data_plane.status, 200, "{}", from_data_plane.text());

    let before = explain("alice").await;
    assert_eq!(idp_requirement(&before)["met"], true, "{before}");
    assert!(idp_requirement(&before)["why"].as_str().unwrap_or_default().contains("mail.read"), "{before}");
    assert!(!before.to_string().contains(&alice_token), "no token value in an explanation");

    let revoke = |auth: Option<String>, path: &'static str| {
        let admin = w.gw.admin;
        async move {
            let headers: Vec<(&str, &str)> = auth.as_deref().map(|a| vec![("authorization", a)]).unwrap_or_default();
            send_with_headers(admin, "DELETE", path, Bytes::new(), &headers).await
        }
    };
    // Hostile callers: no token, a wrong one, a caller's API key, another scheme.
    for auth in [None, Some("Bearer wrong".to_owned()), Some(format!("Bearer {ALICE}")), Some("Basic YWRtaW4=".into())]
    {
        let refused = revoke(auth.clone(), "/grants/idp/alice").await;
        assert_eq!(refused.status, 401, "{auth:?}: {}", refused.text());
    }
    // A user's own credentials on the data plane cannot reach the admin API either.
    let data_plane =
        send_with_headers(w.gw.addr, "DELETE", "/grants/idp/bob", Bytes::new(), &[("oxp-api-key", ALICE)]).await;
    assert_ne!(data_plane.status, 200, "{}", data_plane.text());
    w.call(ALICE, "Mail.Read").await.result();
    assert_eq!(w.idp.stats().await["revocations"], 0, "nothing revoked by a refused request");

    let admin = Some(format!("Bearer {ADMIN}"));
    let revoked = revoke(admin.clone(), "/grants/idp/alice").await;
    assert_eq!(revoked.status, 200, "{}", revoked.text());
    assert_eq!(revoked.json(), json!({"provider": "idp", "user_id": "alice", "revoked": true}));
    assert_eq!(w.idp.stats().await["revocations"], 1, "revoked at the provider too");
    w.challenge(ALICE, "Mail.Read").await;
    w.call(BOB, "Mail.Read").await.result();
    assert_eq!(idp_requirement(&explain("alice").await)["met"], false);
    assert_eq!(idp_requirement(&explain("bob").await)["met"], true, "bob's grant untouched");
    let after = list_grants(w.gw.admin, "").await;
    assert!(grant_of(&after, "idp", "alice").is_none(), "a revoked grant is no longer listed: {after}");
    assert!(grant_of(&after, "idp", "bob").is_some(), "{after}");
    let again = revoke(admin.clone(), "/grants/idp/alice").await;
    assert_eq!(again.json()["revoked"], false, "{}", again.text());
    assert_eq!(revoke(admin.clone(), "/grants/nope/alice").await.status, 404);
    assert_eq!(revoke(admin, "/grants/idp").await.status, 404);
    for text in [w.gw.logs(), w.gw.stdout()] {
        assert!(!text.contains(ADMIN) && !text.contains(&alice_token), "a token reached the logs");
    }
}

/// The admin token of the gateway that has one (reads need it there;
/// the others, on loopback without one, ignore it).
const ADMIN: &str = "oauth-admin-token-7e21";
const ADMIN_AUTH: (&str, &str) = ("authorization", "Bearer oauth-admin-token-7e21");

/// `GET /grants{query}` on the admin listener.
async fn list_grants(admin: std::net::SocketAddr, query: &str) -> Value {
    let resp = send_with_headers(admin, "GET", &format!("/grants{query}"), Bytes::new(), &[ADMIN_AUTH]).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json()
}

/// The grants a `GET /grants` answer lists at `provider`.
fn grants_at(listed: &Value, provider: &str) -> Vec<Value> {
    let providers = listed["providers"].as_array().cloned().unwrap_or_default();
    let at =
        providers.into_iter().find(|p| p["provider"] == provider).unwrap_or_else(|| panic!("{provider}: {listed}"));
    assert!(at.get("error").is_none(), "{listed}");
    at["grants"].as_array().cloned().unwrap_or_default()
}

fn grant_of(listed: &Value, provider: &str, user: &str) -> Option<Value> {
    grants_at(listed, provider).into_iter().find(|g| g["user_id"] == user)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[tokio::test]
async fn grants_survive_a_restart_sealed_at_rest() {
    let w = World::start(3600, "").await;
    w.connect(ALICE, "alice", "Mail.Read").await;
    w.call(ALICE, "Mail.Read").await.result();
    let token = w.last_token();
    let World { idp, tools, gw, state_dir, extra } = w;
    drop(gw);

    // The store holds no token in the clear; the key file is the owner's alone.
    let db = std::fs::read(state_dir.join("oauth-grants.redb")).expect("the store file");
    assert!(!db.windows(token.len()).any(|w| w == token.as_bytes()), "the token is stored in the clear");
    let key = std::fs::metadata(state_dir.join("oauth.key")).expect("the generated key");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(key.permissions().mode() & 0o777, 0o600);

    let gw = start_gateway(&config(&tools, &idp, &state_dir, &extra), &idp).await;
    let w = World { idp, tools, gw, state_dir, extra };
    w.call(ALICE, "Mail.Read").await.result();
    assert_eq!(w.last_token(), token, "the grant was kept across the restart");
    w.challenge(BOB, "Mail.Read").await;
}

#[tokio::test]
async fn the_mcp_endpoint_answers_a_challenge_as_a_tool_error_with_the_link() {
    let w = World::start(3600, "").await;
    let call =
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "Mail_Read", "arguments": {}}});
    let resp = send_with_headers(
        w.gw.addr,
        "POST",
        "/mcp",
        Bytes::from(call.to_string()),
        &[
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-06-18"),
            ("oxp-api-key", ALICE),
        ],
    )
    .await;
    resp.expect_status(200);
    let body = resp.json();
    let result = &body["result"];
    assert_eq!(result["isError"], true, "{body}");
    let text = result["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("{}/oauth/idp/start/", w.gw.url())), "{text}");
    assert!(text.contains("idp"), "{text}");
}

// ---------------------------------------------------------------------------
// Grants in Vault KV v2, shared by two gateways
// ---------------------------------------------------------------------------

#[tokio::test]
async fn vault_kept_grants_are_shared_and_refreshed_once_across_replicas() {
    let vault = OpenBao::start().await;
    let vault_token = vault.gateway_token().await;
    let env = env_with_vault_token(&vault_token);
    let vault_section =
        format!("\n[vault]\naddress = \"{}\"\ntoken = \"env:OAUTH_VAULT_TOKEN\"\ncache_ttl = \"30s\"\n", vault.url());
    let idp = OidcProvider::start(json!({"access_token_ttl": SHORT_TTL, "scopes": ["mail.read", "mail.send"]})).await;
    let tools = ToolServer::start(common::catalog(mail_tools())).await;
    tools.on_call(echo);
    let extra = "refresh_margin = \"1s\"\nstore = \"vault:secret/oauth/idp/{user_id}\"";
    let config = config(&tools, &idp, &state_dir(), extra).raw(&vault_section);
    let one = Gateway::start_with_env(&config.toml(), &env).await;
    let two = Gateway::start_with_env(&config.toml(), &env).await;
    idp.register_client(
        CLIENT_ID,
        CLIENT_SECRET,
        &[format!("{}/oauth/idp/callback", one.url()), format!("{}/oauth/idp/callback", two.url())],
    )
    .await;
    one.wait_for_tool("Mail.Read@1.0.0").await;
    two.wait_for_tool("Mail.Read@1.0.0").await;
    let w = World { idp, tools, gw: one, state_dir: state_dir(), extra: String::new() };

    const ALICE_GRANT: &str = "secret/oauth/idp/alice";
    w.connect(ALICE, "alice", "Mail.Read").await;
    let stored = vault.latest(ALICE_GRANT).await.expect("the grant is in vault");
    for field in ["access_token", "refresh_token", "expires_at", "scope"] {
        assert!(stored.get(field).is_some(), "{field} missing from {stored}");
    }
    assert!(vault.latest("secret/oauth/idp/bob").await.is_none());
    assert_eq!(vault.metadata(ALICE_GRANT).await.expect("metadata")["current_version"], 1);
    // From now on the vault refuses any write to alice's grant that does not
    // carry the version it replaces: every write below is a check-and-set.
    vault.require_cas(ALICE_GRANT).await;
    // Listed from vault (a KV v2 LIST, then a read per user), by either replica.
    let listed = list_grants(two.admin, "").await;
    let alice_listed = grant_of(&listed, "idp", "alice").expect("alice is listed");
    assert_eq!(grants_at(&listed, "idp").len(), 1, "bob holds none: {listed}");
    let connected_at = alice_listed["connected_at"].as_u64().expect("connected_at is in the vault record");
    assert_eq!(stored["connected_at"], json!(connected_at), "{stored}");
    assert!(!listed.to_string().contains(stored["access_token"].as_str().unwrap_or("-")), "no token listed");

    // The other replica serves alice from the same grant.
    w.call_as(&two, Some(ALICE), "Mail.Read").await.result();
    assert_eq!(w.last_token(), stored["access_token"].as_str().expect("token"));
    // Calls read the grant through the vault cache: no request per call.
    let requests = vault.requests_by(&vault_token).await;
    for _ in 0..5 {
        w.call_as(&two, Some(ALICE), "Mail.Read").await.result();
    }
    assert_eq!(vault.requests_by(&vault_token).await, requests, "the grant is read through the [vault] cache");

    // Expired: ten calls on each replica at once, one refresh in all.
    // (On purpose: the access token has to come due.)
    tokio::time::sleep(SHORT_TTL_PASSED).await;
    for resp in call_many(&[w.gw.addr, two.addr], ALICE, 10).await {
        resp.result();
    }
    let stats = w.idp.stats().await;
    assert_eq!(stats["token_requests"]["refresh_token"], 1, "{stats}");
    let refreshed = vault.latest(ALICE_GRANT).await.expect("grant");
    assert_ne!(refreshed["access_token"], stored["access_token"]);
    assert!(refreshed.get("refreshing_until").is_none(), "the lease is given back: {refreshed}");
    // The history: the grant (1), the lease on it (2), the refreshed grant
    // (3). A replica that lost the race to the lease wrote nothing.
    let metadata = vault.metadata(ALICE_GRANT).await.expect("metadata");
    assert_eq!(metadata["current_version"], 3, "{metadata}");
    let leased = vault.version(ALICE_GRANT, 2).await.expect("version 2");
    assert_eq!(leased["access_token"], stored["access_token"], "{leased}");
    let until = leased["refreshing_until"].as_u64();
    assert!(until.is_some_and(|u| u > 0), "version 2 is the lease: {leased}");
    // The refresh is recorded; when alice connected is kept.
    let listed = list_grants(w.gw.admin, "").await;
    let alice_listed = grant_of(&listed, "idp", "alice").expect("alice is listed");
    assert_eq!(alice_listed["connected_at"], json!(connected_at), "{listed}");
    assert!(alice_listed["refreshed_at"].as_u64().is_some_and(|at| at >= connected_at), "{listed}");

    // Disconnecting removes it from vault, every version and the metadata
    // (the other replica's cached copy lives out its cache_ttl; the provider
    // revoked it already).
    let resp = send_with_headers(w.gw.addr, "DELETE", "/oauth/idp", Bytes::new(), &[("oxp-api-key", ALICE)]).await;
    assert_eq!(resp.json()["disconnected"], true);
    assert!(vault.latest(ALICE_GRANT).await.is_none());
    assert!(vault.metadata(ALICE_GRANT).await.is_none(), "no version is left to undelete");
    assert!(grants_at(&list_grants(w.gw.admin, "").await, "idp").is_empty(), "nothing listed after disconnect");
    w.challenge(ALICE, "Mail.Read").await;
}

// ---------------------------------------------------------------------------
// The demo's stand-in provider
// ---------------------------------------------------------------------------

/// A child process killed on drop.
struct Demo(std::process::Child);

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn the_demo_flow_can_be_clicked_through() {
    use std::io::BufRead;
    let mut child = std::process::Command::new(common::gateway_bin())
        .args(["demo", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("cannot start otc-gateway demo");
    let mut reader = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let _demo = Demo(child);
    let mut line = String::new();
    reader.read_line(&mut line).expect("the ready line");
    std::thread::spawn(move || std::io::copy(&mut reader, &mut std::io::sink()));
    let addr: std::net::SocketAddr = line
        .trim()
        .strip_prefix("otc-gateway listening on ")
        .and_then(|rest| rest.split(' ').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("unexpected ready line {line:?}"));
    let base = format!("http://{addr}");
    let call = || async {
        let body = json!({"request": {"tool_id": "Mail.ListInbox", "input": {}}}).to_string();
        let headers = [("content-type", "application/json"), ("oxp-api-key", "demo-alice-key")];
        send_with_headers(addr, "POST", "/tools/call", Bytes::from(body), &headers).await
    };
    // The catalog is polled: wait for the tool.
    let first = wait_within(Duration::from_secs(20), "the demo challenges the call", async || {
        let resp = call().await;
        if resp.status == 400 && resp.text().contains("missing_requirements") {
            Ok(resp)
        } else {
            Err(resp.text())
        }
    })
    .await;
    let url = first.json()["missing_requirements"]["authorization"][0]["url"].as_str().expect("url").to_owned();
    assert!(url.starts_with(&format!("{base}/oauth/demo-mail/start/")), "{url}");

    // The stand-in's consent page, then Allow.
    let browser = Browser::new();
    let consent = browser.follow_as(&url, "alice").await;
    assert_eq!(consent.status, 200, "{}", consent.body);
    let allow = consent.body.split("href=\"").find(|h| h.contains("allow=1")).expect("an Allow link");
    let allow = allow.split('"').next().expect("href").replace("&amp;", "&");
    let provider = consent.url.split('/').take(3).collect::<Vec<_>>().join("/");
    // The demo application, signed in as alice, confirms the flow.
    let page = browser.follow_as(&format!("{provider}{allow}"), "alice").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.url.starts_with(&format!("{provider}/app/connect/verify?flow_id=")), "{}", page.url);
    assert_eq!(call().await.status, 400, "nothing stored before the application confirms");
    assert!(page.body.contains("<button type=\"submit\">Confirm</button>"), "{}", page.body);
    // Its Confirm: the application confirms as alice and sends the same
    // browser back to the gateway, which keeps the grant.
    let confirmed =
        browser.post_form(&format!("{provider}/app/connect/confirm"), &format!("flow_id={}", flow_id(&page))).await;
    assert_eq!(confirmed.status, 303, "{}", confirmed.body);
    let location = confirmed.headers.get("location").and_then(|v| v.to_str().ok()).expect("location").to_owned();
    assert!(location.starts_with(&format!("{base}/oauth/demo-mail/return/")), "{location}");
    let connected = browser.follow_as(&location, "alice").await;
    assert_eq!(connected.status, 200, "{}", connected.body);
    assert!(connected.body.contains("can now be used"), "{}", connected.body);

    // The tool now runs, with a token the stand-in issued.
    let resp = call().await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert!(resp.text().contains("Lunch?"), "{}", resp.text());
}

// ---------------------------------------------------------------------------
// A fleet: challenges in Redis, grants in Vault
// ---------------------------------------------------------------------------

#[tokio::test]
async fn behind_a_balancer_a_link_and_its_callback_may_reach_different_replicas() {
    use common::fleet::{Nginx, Redis};
    let redis = Redis::start();
    let vault = OpenBao::start().await;
    let vault_token = vault.gateway_token().await;
    let env = env_with_vault_token(&vault_token);
    let idp = OidcProvider::start(json!({"scopes": ["mail.read", "mail.send"]})).await;
    let tools = ToolServer::start(common::catalog(mail_tools())).await;
    tools.on_call(echo);
    let config = config(&tools, &idp, &state_dir(), "store = \"vault:secret/oauth/idp/{user_id}\"")
        .raw(&format!("\n[vault]\naddress = \"{}\"\ntoken = \"env:OAUTH_VAULT_TOKEN\"\n", vault.url()));
    // `[state]` is in the config already (its dir): add redis to it.
    let with_redis =
        |config: &GatewayConfig| config.toml().replace("[state]\n", &format!("[state]\nredis = \"{}\"\n", redis.url()));
    let one = Gateway::start_with_env(&with_redis(&config), &env).await;
    let two = Gateway::start_with_env(&with_redis(&config), &env).await;
    one.wait_for_tool("Mail.Read@1.0.0").await;
    two.wait_for_tool("Mail.Read@1.0.0").await;
    // The balancer's address is the fleet's public_url, given by a reload
    // once nginx listens (choosing a port ahead could race the gateways' own).
    let nginx = Nginx::start(&[one.addr, two.addr]);
    let public_url = format!("http://{}", nginx.addr);
    let reloaded = with_redis(&config.server_line(&format!("public_url = \"{public_url}\"")));
    for gw in [&one, &two] {
        gw.rewrite_config(&reloaded);
        gw.signal("HUP");
    }
    for gw in [&one, &two] {
        wait_within(Duration::from_secs(20), "a replica reloaded", async || {
            let metrics = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
            metric(&metrics, "otc_gateway_config_generation") >= 2
        })
        .await;
    }
    idp.register_client(CLIENT_ID, CLIENT_SECRET, &[format!("{public_url}/oauth/idp/callback")]).await;

    let through = |key: &'static str| async move {
        let body = json!({"request": {"tool_id": "Mail.Read", "input": {}}}).to_string();
        let headers = [("content-type", "application/json"), ("oxp-api-key", key)];
        send_with_headers(nginx.addr, "POST", "/tools/call", Bytes::from(body), &headers).await
    };
    let challenged = through(ALICE).await;
    let challenge = challenged.server_error(400)["missing_requirements"]["authorization"][0].clone();
    let (url, check) = (challenge["url"].as_str().expect("url"), challenge["check_url"].as_str().expect("check"));
    assert!(url.starts_with(&format!("{public_url}/oauth/idp/start/")), "{url}");

    // Round robin: the link opens on one replica, the callback lands on the
    // other (requests alternate); the application's confirmation reaches
    // the first, and the browser comes back to the second (its cookie is
    // for the balancer's name, so it goes with it): the challenge completes
    // all the same.
    let browser = Browser::new();
    let page = browser.follow_as(url, "alice").await;
    assert!(page.url.starts_with(&verifier_url(&tools)), "{}", page.url);
    let confirmed = confirm_at(one.addr, ALICE, &flow_id(&page)).await;
    let cookie = browser.cookie(&nginx.addr.to_string(), "otc-flow").expect("the flow's cookie");
    browser.set_cookie(&two.addr.to_string(), "/oauth/", "otc-flow", &cookie);
    let back = return_to(&confirmed).replace(&public_url, &two.url());
    let connected = browser.get_no_follow(&back).await;
    assert_eq!(connected.status, 200, "{}", connected.body);
    for gw in [&one, &two] {
        let path = check.strip_prefix(&public_url).expect("under public_url");
        let resp = send_with_headers(gw.addr, "GET", path, Bytes::new(), &[("oxp-api-key", ALICE)]).await;
        assert_eq!(resp.json()["status"], "completed", "every replica knows the challenge ended");
        let resp = send_with_headers(gw.addr, "GET", path, Bytes::new(), &[("oxp-api-key", BOB)]).await;
        assert_eq!(resp.status, 404, "nor does bob, on any replica");
    }
    // Both replicas serve alice from the one grant in the vault.
    for _ in 0..4 {
        through(ALICE).await.result();
    }
    assert!(vault.latest("secret/oauth/idp/alice").await.is_some_and(|g| g["access_token"].is_string()));
    through(BOB).await.server_error(400);
    // A completed link is spent for the whole fleet.
    let again = Browser::new().get_no_follow(url).await;
    assert_eq!(again.status, 400, "{}", again.body);
}
