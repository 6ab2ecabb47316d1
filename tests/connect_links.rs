//! A connect link completes only in its own user's browser (`[login]`).
//!
//! One real OpenID provider (`oidc-provider` from npm) plays both parts:
//! the organisation's provider the gateway signs browsers in with
//! (`[login]`), and the third party whose grants the gateway keeps
//! (`[authorization.idp]`). Callers are JWT users alice and bob; each
//! person has a browser of their own (a cookie jar). The attacker is bob,
//! who hands alice links and URLs of his, or uses hers.

mod common;

use std::path::PathBuf;

use bytes::Bytes;
use common::oidc::{Browser, OidcProvider, Page};
use common::{echo, jwt, needing, send_with_headers, temp_file, wait_until, Gateway, GatewayConfig, Resp, ToolServer};
use serde_json::{json, Value};

const JWT_SECRET: &str = "connect-links-jwt-secret-0123456789abcdef";
const LOGIN_CLIENT: &str = "otc-gateway-login";
const LOGIN_SECRET: &str = "login-secret-5b1d";
const MAIL_CLIENT: &str = "otc-gateway-mail";
const MAIL_SECRET: &str = "mail-secret-c39e";

struct World {
    idp: OidcProvider,
    tools: ToolServer,
    gw: Gateway,
    /// The `iss` of the callers' JWTs, when `[auth]` names one.
    iss: Option<String>,
}

fn state_dir() -> PathBuf {
    let dir = temp_file("connect-links-state", "d", "");
    std::fs::remove_file(&dir).expect("a fresh name");
    dir
}

impl World {
    /// The gateway as most tests use it: the callers' JWTs (HS256, no
    /// issuer) name the same user ids as the provider's `sub`, which
    /// `[login]` says it takes (`[auth]` names no issuer to compare).
    async fn start() -> World {
        World::start_with("", "user_id_claim = \"sub\"", None).await
    }

    /// The gateway with `auth` lines added to `[auth]` and `login` lines to
    /// `[login]`; the callers' JWTs carry `iss` when given.
    async fn start_with(auth: &str, login: &str, iss: Option<&str>) -> World {
        let idp = OidcProvider::start(json!({"scopes": ["mail.read"]})).await;
        let tools = ToolServer::start(common::catalog(vec![needing(
            "Mail.Read",
            json!({"authorization": [{"id": "idp", "oauth2": {"scopes": ["mail.read"]}}]}),
        )]))
        .await;
        tools.on_call(echo);
        let config =
            GatewayConfig::new().upstream_with("mail", &tools.url(), "authorization = [\"idp\"]").raw(&format!(
                r#"
[auth]
mode = "jwt"
hs256_secret = "env:CL_JWT_SECRET"
{auth}

[login]
issuer = "{issuer}"
client_id = "{LOGIN_CLIENT}"
client_secret = "env:CL_LOGIN_SECRET"
{login}

[authorization.idp]
issuer = "{issuer}"
client_id = "{MAIL_CLIENT}"
client_secret = "env:CL_MAIL_SECRET"
scopes = ["openid"]

[state]
dir = "{dir}"
"#,
                issuer = idp.issuer(),
                dir = state_dir().display()
            ));
        let env = [("CL_JWT_SECRET", JWT_SECRET), ("CL_LOGIN_SECRET", LOGIN_SECRET), ("CL_MAIL_SECRET", MAIL_SECRET)];
        let gw = Gateway::start_with_env(&config.toml(), &env).await;
        idp.register_client(LOGIN_CLIENT, LOGIN_SECRET, &[format!("{}/oauth/login/callback", gw.url())]).await;
        idp.register_client(MAIL_CLIENT, MAIL_SECRET, &[format!("{}/oauth/idp/callback", gw.url())]).await;
        let w = World { idp, tools, gw, iss: iss.map(str::to_owned) };
        wait_until("Mail.Read is known", async || w.call("alice").await.text().contains("missing_requirements")).await;
        w
    }

    /// A caller's `Authorization`: a JWT naming `user`.
    fn bearer(&self, user: &str) -> String {
        let claims = jwt::claims(user, json!({ "iss": self.iss }));
        jwt::bearer(&jwt::hs256(&claims, JWT_SECRET.as_bytes()))
    }

    async fn call(&self, user: &str) -> Resp {
        let body = json!({"request": {"tool_id": "Mail.Read", "input": {}}}).to_string();
        let auth = self.bearer(user);
        let headers = [("content-type", "application/json"), ("authorization", auth.as_str())];
        send_with_headers(self.gw.addr, "POST", "/tools/call", Bytes::from(body), &headers).await
    }

    /// A challenged call as `user`: its link and check_url.
    async fn challenge(&self, user: &str) -> (String, String) {
        let resp = self.call(user).await;
        let body = resp.server_error(400);
        let challenge = &body["missing_requirements"]["authorization"][0];
        (challenge["url"].as_str().expect("url").to_owned(), challenge["check_url"].as_str().expect("check").to_owned())
    }

    async fn status(&self, user: &str, check_url: &str) -> String {
        let path = check_url.strip_prefix(&self.gw.url()).expect("under public_url");
        let auth = self.bearer(user);
        let resp = send_with_headers(self.gw.addr, "GET", path, Bytes::new(), &[("authorization", &auth)]).await;
        resp.json()["status"].as_str().unwrap_or_default().to_owned()
    }

    /// Code exchanges the provider answered so far (sign-ins and grants).
    async fn code_exchanges(&self) -> u64 {
        self.idp.stats().await["token_requests"]["authorization_code"].as_u64().expect("a count")
    }

    /// The token the tool server got on its last call.
    fn last_token(&self) -> Value {
        self.tools.last_request()["context"]["authorization"][0]["token"].clone()
    }

    fn is_mail_authorization(&self, url: &str) -> bool {
        url.starts_with(&self.idp.issuer()) && url.contains(&format!("client_id={MAIL_CLIENT}"))
    }

    fn is_sign_in_callback(&self, url: &str) -> bool {
        url.starts_with(&format!("{}/oauth/login/callback", self.gw.url()))
    }
}

fn refused(page: &Page, why: &str) {
    assert_eq!(page.status, 403, "{}: {}", page.url, page.body);
    assert!(page.body.contains(why), "{}", page.body);
}

#[tokio::test]
async fn a_link_completes_only_in_its_own_users_browser() {
    let w = World::start().await;
    let (bob_url, bob_check) = w.challenge("bob").await;
    let (alice_url, alice_check) = w.challenge("alice").await;

    // Bob sends his link to alice. Her browser signs in (as alice) and is
    // refused: nothing is stored, for bob or for her.
    let alice = Browser::new();
    refused(&alice.follow_as(&bob_url, "alice").await, "belongs to another user");
    assert_eq!(w.code_exchanges().await, 1, "alice's sign-in only: no grant was exchanged");
    assert_eq!(w.status("bob", &bob_check).await, "pending");
    w.call("bob").await.server_error(400);
    w.call("alice").await.server_error(400);

    // Bob uses alice's link in his own browser: refused the same way.
    let bob = Browser::new();
    refused(&bob.follow_as(&alice_url, "bob").await, "belongs to another user");
    assert_eq!(w.status("alice", &alice_check).await, "pending");

    // Neither opening used anything up: each completes their own.
    let page = alice.follow_as(&alice_url, "alice").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("can now be used"), "{}", page.body);
    assert_eq!(w.status("alice", &alice_check).await, "completed");
    w.call("alice").await.result();
    let alice_token = w.last_token();
    let page = bob.follow_as(&bob_url, "bob").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(w.status("bob", &bob_check).await, "completed");
    w.call("bob").await.result();
    assert_ne!(w.last_token(), alice_token, "each user has a grant of their own");
}

#[tokio::test]
async fn a_forwarded_authorization_request_stores_nothing() {
    let w = World::start().await;
    let (bob_url, bob_check) = w.challenge("bob").await;

    // Bob signs in and opens his own link, but stops at the provider and
    // sends the authorization request on to alice.
    let bob = Browser::new();
    let forwarded = bob.follow_as_until(&bob_url, "bob", |url| w.is_mail_authorization(url)).await;
    let forwarded = forwarded.expect_err("bob's browser reached the provider");
    let exchanges = w.code_exchanges().await;

    // Alice's browser, not signed in to the gateway: the callback refuses.
    let alice = Browser::new();
    refused(&alice.follow_as(&forwarded, "alice").await, "not signed in");
    // Alice's browser signed in as alice (her own link first): refused too.
    let (alice_url, _) = w.challenge("alice").await;
    alice.follow_as(&alice_url, "alice").await;
    let (_, again) = w.challenge("bob").await;
    let forwarded = bob.follow_as_until(&bob_url, "bob", |url| w.is_mail_authorization(url)).await;
    refused(&alice.follow_as(&forwarded.expect_err("at the provider"), "alice").await, "belongs to another user");
    assert_eq!(w.code_exchanges().await, exchanges + 2, "alice's sign-in and her own grant, nothing for bob");
    assert_eq!(w.status("bob", &bob_check).await, "pending");
    assert_eq!(w.status("bob", &again).await, "pending");
    w.call("bob").await.server_error(400);

    // Bob's own browser still completes his link.
    let page = bob.follow_as(&bob_url, "bob").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(w.status("bob", &bob_check).await, "completed");
}

#[tokio::test]
async fn a_sign_in_finishes_only_in_the_browser_that_started_it() {
    let w = World::start().await;
    let (bob_url, _) = w.challenge("bob").await;
    let (alice_url, alice_check) = w.challenge("alice").await;

    // Bob signs in, but stops before his sign-in's callback and hands it to
    // alice (so that her browser would be signed in as him).
    let bob = Browser::new();
    let callback = bob.follow_as_until(&bob_url, "bob", |url| w.is_sign_in_callback(url)).await;
    let callback = callback.expect_err("bob's sign-in came back");
    let alice = Browser::new();
    let page = alice.get_no_follow(&callback).await;
    refused(&page, "another browser");
    let gw_authority = w.gw.url().trim_start_matches("http://").to_owned();
    assert_eq!(alice.cookie(&gw_authority, "otc-session"), None, "alice's browser is not signed in as bob");
    // Alice's own link in her browser still asks her to sign in herself.
    let first = alice.get_no_follow(&alice_url).await;
    assert_eq!(first.status, 302);
    let location = first.headers.get("location").and_then(|v| v.to_str().ok()).expect("location");
    assert!(location.contains(&format!("client_id={LOGIN_CLIENT}")), "{location}");
    assert_eq!(w.status("alice", &alice_check).await, "pending");

    // In bob's own browser the same callback signs him in.
    let page = bob.get_no_follow(&callback).await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert!(bob.cookie(&gw_authority, "otc-session").is_some());
}

#[tokio::test]
async fn sessions_are_sealed_cookies_scoped_to_the_oauth_paths() {
    let w = World::start().await;
    let (alice_url, _) = w.challenge("alice").await;
    let alice = Browser::new();
    let callback = alice.follow_as_until(&alice_url, "alice", |url| w.is_sign_in_callback(url)).await;
    let signed_in = alice.get_no_follow(&callback.expect_err("signed in at the provider")).await;
    assert_eq!(signed_in.status, 302);
    let cookies: Vec<&str> = signed_in.headers.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()).collect();
    let session = cookies.iter().find(|c| c.starts_with("otc-session=")).expect("a session cookie");
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/oauth/", "Max-Age=43200"] {
        assert!(session.contains(attribute), "{attribute} missing: {session}");
    }
    assert!(!session.contains("alice"), "the user id is sealed: {session}");
    assert!(cookies.iter().any(|c| c.starts_with("otc-sign-in=;") && c.contains("Max-Age=0")), "{cookies:?}");

    // A forged or altered session is no session: sign in first.
    let gw_authority = w.gw.url().trim_start_matches("http://").to_owned();
    let value = alice.cookie(&gw_authority, "otc-session").expect("the session");
    let mut altered = value.clone().into_bytes();
    let last = altered.len() - 2;
    altered[last] = if altered[last] == b'A' { b'B' } else { b'A' };
    for forged in [String::from_utf8(altered).expect("ascii"), "bm90IGEgc2Vzc2lvbg".to_owned()] {
        let other = Browser::new();
        other.set_cookie(&gw_authority, "/oauth/", "otc-session", &forged);
        let page = other.get_no_follow(&alice_url).await;
        let location = page.headers.get("location").and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        assert!(location.contains(&format!("client_id={LOGIN_CLIENT}")), "{forged}: {location}");
    }
    // The real one goes straight to the provider.
    let page = alice.get_no_follow(&alice_url).await;
    let location = page.headers.get("location").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(w.is_mail_authorization(location), "{location}");
    // A HEAD (a link preview) answers without a flow or a sign-in.
    let path = alice_url.strip_prefix(&w.gw.url()).expect("path");
    let head = send_with_headers(w.gw.addr, "HEAD", path, Bytes::new(), &[]).await;
    assert_eq!(head.status, 200);
    assert!(head.header("set-cookie").is_none());
}

/// The CSRF token of the first disconnect form on a connections page.
fn csrf_of(page: &str) -> Option<String> {
    let at = page.find("name=\"csrf\" value=\"")? + "name=\"csrf\" value=\"".len();
    page[at..].split('"').next().map(str::to_owned)
}

/// `GET /oauth/`: each signed-in user sees their own connections and
/// disconnects with a POST carrying their page's CSRF token; nobody sees or
/// disconnects another's, and a GET changes nothing.
#[tokio::test]
async fn users_see_and_disconnect_only_their_own_connections() {
    let w = World::start().await;
    let gw_authority = w.gw.url().trim_start_matches("http://").to_owned();
    let connections = format!("{}/oauth/", w.gw.url());
    // Both connect through their own links, in their own browsers.
    let (alice_url, _) = w.challenge("alice").await;
    let alice = Browser::new();
    assert_eq!(alice.follow_as(&alice_url, "alice").await.status, 200);
    let (bob_url, _) = w.challenge("bob").await;
    let bob = Browser::new();
    assert_eq!(bob.follow_as(&bob_url, "bob").await.status, 200);
    w.call("alice").await.result();
    let alice_token = w.last_token();

    let alice_page = alice.follow_as(&connections, "alice").await;
    assert_eq!(alice_page.status, 200, "{}", alice_page.body);
    assert!(alice_page.body.contains("<b id=\"user\">alice</b>"), "{}", alice_page.body);
    assert!(alice_page.body.contains("<td>idp</td><td>connected</td>"), "{}", alice_page.body);
    assert!(alice_page.body.contains("mail.read"), "{}", alice_page.body);
    // When she connected: the grant's `connected_at`, recorded by the flow.
    let connected_at = alice_page.body.split("<td class=\"connected-at\">").nth(1).and_then(|r| r.split('<').next());
    let year = |t: &str| t.get(..4).and_then(|y| y.parse::<u32>().ok());
    assert!(
        connected_at.is_some_and(|t| t.ends_with(" UTC") && year(t).is_some_and(|y| y >= 2024)),
        "{}",
        alice_page.body
    );
    assert!(!alice_page.body.contains(alice_token.as_str().unwrap_or("no token")), "no token on the page");
    let csp = alice_page.headers.get("content-security-policy").and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(csp.contains("default-src 'none'"), "{csp}");
    let alice_csrf = csrf_of(&alice_page.body).expect("a disconnect form");

    // A browser not signed in is sent to sign in first.
    let stranger = Browser::new().get_no_follow(&connections).await;
    assert_eq!(stranger.status, 302);

    // Bob's page is his, with his own token.
    let bob_page = bob.follow_as(&connections, "bob").await;
    assert!(bob_page.body.contains("<b id=\"user\">bob</b>") && !bob_page.body.contains("alice"), "{}", bob_page.body);
    let bob_csrf = csrf_of(&bob_page.body).expect("bob's form");
    assert_ne!(bob_csrf, alice_csrf);

    let post = |session: Option<String>, form: String| {
        let addr = w.gw.addr;
        async move {
            let cookie = session.map(|s| format!("otc-session={s}")).unwrap_or_default();
            let headers = [("content-type", "application/x-www-form-urlencoded"), ("cookie", cookie.as_str())];
            send_with_headers(addr, "POST", "/oauth/", Bytes::from(form), &headers).await
        }
    };
    let alice_session = alice.cookie(&gw_authority, "otc-session");
    let bob_session = bob.cookie(&gw_authority, "otc-session");
    // Hostile: bob's session with alice's token, alice's session without a
    // token or with bob's, no session at all. None disconnects anyone.
    for (session, form) in [
        (bob_session.clone(), format!("provider=idp&csrf={alice_csrf}")),
        (alice_session.clone(), "provider=idp".to_owned()),
        (alice_session.clone(), format!("provider=idp&csrf={bob_csrf}")),
        (None, format!("provider=idp&csrf={alice_csrf}")),
    ] {
        let refused = post(session, form.clone()).await;
        assert_eq!(refused.status, 403, "{form}: {}", refused.text());
    }
    // A GET never disconnects.
    let got = send_with_headers(w.gw.addr, "GET", "/oauth/?provider=idp", Bytes::new(), &[]).await;
    assert_eq!(got.status, 302);
    w.call("alice").await.result();
    w.call("bob").await.result();

    // Alice's own form, in her browser: disconnected, back to her page.
    let done = post(alice_session.clone(), format!("provider=idp&csrf={alice_csrf}")).await;
    assert_eq!(done.status, 302, "{}", done.text());
    assert_eq!(done.header("location").as_deref(), Some(connections.as_str()));
    let after = alice.follow_as(&connections, "alice").await;
    assert!(after.body.contains("<td>idp</td><td>not connected</td>"), "{}", after.body);
    w.call("alice").await.server_error(400);
    w.call("bob").await.result();
    let bob_after = bob.follow_as(&connections, "bob").await;
    assert!(bob_after.body.contains("<td>idp</td><td>connected</td>"), "bob's grant untouched: {}", bob_after.body);
}

/// `[login]` at another issuer than `[auth]`'s: its `sub` is not a gateway
/// user id (the gateway refuses such a config unless `[login]` names the
/// claim that is, `tests/check_command.rs`). Here the callers' JWTs come
/// from their own issuer and name people by email, and `[login]` says its
/// ID tokens' `email` is that id. Bob, whose account at the login provider
/// has the `sub` `alice@example.test` (alice's gateway user id), is not
/// alice; alice, whose email it is, is.
#[tokio::test]
async fn a_login_provider_of_its_own_names_users_by_the_claim_written_out() {
    const CORP: &str = "https://tokens.corp.example";
    let w = World::start_with(
        &format!("issuer = \"{CORP}\""),
        "scopes = [\"openid\", \"email\"]\nuser_id_claim = \"email\"",
        Some(CORP),
    )
    .await;
    const ALICE: &str = "alice@example.test";
    let (url, check) = w.challenge(ALICE).await;

    // Bob signs in with the account whose `sub` is alice's user id: his
    // email is another, so his browser is not alice's.
    let bob = Browser::new();
    refused(&bob.follow_as(&url, ALICE).await, "belongs to another user");
    assert_eq!(w.status(ALICE, &check).await, "pending");
    w.call(ALICE).await.server_error(400);

    // Alice signs in as herself (`sub` "alice", email alice@example.test).
    let alice = Browser::new();
    let page = alice.follow_as(&url, "alice").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(w.status(ALICE, &check).await, "completed");
    w.call(ALICE).await.result();
    let connections = alice.follow_as(&format!("{}/oauth/", w.gw.url()), "alice").await;
    assert!(connections.body.contains(&format!("<b id=\"user\">{ALICE}</b>")), "{}", connections.body);
}
