//! The OAuth endpoints under `/oauth/`: where a challenge's links lead,
//! where browsers sign in, where a user's application confirms a flow, and
//! where a user disconnects.
//!
//! | request | who | answer |
//! | --- | --- | --- |
//! | `GET /oauth/P/start/LINK` | the user's browser | 302 to the provider, or to sign-in first; 403 page for another user |
//! | `GET /oauth/P/callback?code&state` | the provider, through the browser | a page (connected, or why not), or 302 to the verifier |
//! | `GET /oauth/login/callback?code&state` | `[login]`'s provider, through the browser | 302 back to the link, signed in |
//! | `POST /oauth/confirm` `{"flow_id"}` | the user's application, as the user (authenticated as at `/mcp`) | `{"status": "confirmed", "account", "return_to"}`, or 403 for another user (the flow ends) |
//! | `GET /oauth/P/return/VALUE` | the flow's browser, sent by the application | a page: connected, or 403 in another browser |
//! | `GET /oauth/P/check/CHECK` | the client that got the challenge (authenticated) | `{"status": ...}` |
//! | `DELETE /oauth/P` | the user's client (authenticated) | `{"disconnected": bool}` |
//! | `GET /oauth/` | a signed-in browser (`[login]`) | the user's own connections, each with a disconnect form |
//! | `POST /oauth/` `provider&csrf` | that page's form, in the same browser | 302 back to `/oauth/`, disconnected |
//!
//! The browser steps carry no credentials but cookies: a session (`[login]`)
//! sealed by the gateway, and the binding of a sign-in, or of a verifier's
//! flow, to the browser that started it. Both are `HttpOnly`, `SameSite=Lax`, and with an https
//! `public_url` `Secure` with the `__Host-` prefix (which requires `Path=/`);
//! over http they are scoped to the `/oauth/` paths. Who may finish a flow
//! is `oauth/flow.rs`'s business.

use bytes::Bytes;

use crate::auth::{AudienceRule, Caller};
use crate::error::{utc, MissingRequirements, RequestError};
use crate::gateway::{Gateway, Generation};
use crate::oauth::{Finished, FlowError, Opened};
use crate::reply::Reply;

/// One request under `/oauth/`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum OAuthRequest<'p> {
    /// `GET /oauth/P/start/LINK`.
    Start {
        /// The provider.
        provider: &'p str,
        /// The link id.
        link: &'p str,
    },
    /// `GET /oauth/P/callback`.
    Callback {
        /// The provider.
        provider: &'p str,
    },
    /// `GET /oauth/login/callback`: back from signing in.
    SignInCallback,
    /// `GET /oauth/P/return/VALUE`: a confirmed verifier flow's browser,
    /// back from the application.
    Return {
        /// The provider.
        provider: &'p str,
        /// The one-time value of `return_to`.
        value: &'p str,
    },
    /// `POST /oauth/confirm`.
    Confirm,
    /// `GET /oauth/P/check/CHECK`.
    Check {
        /// The provider.
        provider: &'p str,
        /// The check id.
        check: &'p str,
    },
    /// `DELETE /oauth/P`.
    Disconnect {
        /// The provider.
        provider: &'p str,
    },
    /// `GET /oauth/`: the signed-in user's connections.
    Connections,
    /// `POST /oauth/`: that page's disconnect form.
    DisconnectForm,
    /// `GET /oauth/approval/LINK`: a held call's page (`approval_endpoint.rs`).
    ApprovalPage {
        /// The link's secret part.
        link: &'p str,
    },
    /// `POST /oauth/approval/LINK`: that page's approve or deny form.
    ApprovalForm {
        /// The link's secret part.
        link: &'p str,
    },
    /// `GET /oauth/approval/check/ID`: a held call's state, for its caller.
    ApprovalCheck {
        /// The request's id.
        id: &'p str,
    },
}

impl<'p> OAuthRequest<'p> {
    /// The request a path and method stand for.
    pub(crate) fn parse(method: &http::Method, path: &'p str) -> Result<OAuthRequest<'p>, RequestError> {
        let not_found = || RequestError::NotFound(path.chars().take(200).collect());
        let rest = path.strip_prefix("/oauth/").ok_or_else(not_found)?;
        if rest.is_empty() {
            return match *method {
                http::Method::GET | http::Method::HEAD => Ok(OAuthRequest::Connections),
                http::Method::POST => Ok(OAuthRequest::DisconnectForm),
                _ => Err(RequestError::MethodNotAllowed { allow: "GET, HEAD, POST" }),
            };
        }
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.first().is_none_or(|provider| provider.is_empty()) {
            return Err(not_found());
        }
        let (request, allow) = match parts.as_slice() {
            // (`config::RESERVED_PROVIDER_NAMES` keeps providers off these.)
            ["login", "callback"] => (OAuthRequest::SignInCallback, "GET, HEAD"),
            ["approval", "check", id] if !id.is_empty() => (OAuthRequest::ApprovalCheck { id }, "GET, HEAD"),
            ["approval", link] if !link.is_empty() && *method == http::Method::POST => {
                (OAuthRequest::ApprovalForm { link }, "GET, HEAD, POST")
            }
            ["approval", link] if !link.is_empty() => (OAuthRequest::ApprovalPage { link }, "GET, HEAD, POST"),
            ["confirm"] => (OAuthRequest::Confirm, "POST"),
            [provider, "start", link] if !link.is_empty() => (OAuthRequest::Start { provider, link }, "GET, HEAD"),
            [provider, "callback"] => (OAuthRequest::Callback { provider }, "GET, HEAD"),
            [provider, "return", value] if !value.is_empty() => (OAuthRequest::Return { provider, value }, "GET, HEAD"),
            [provider, "check", check] if !check.is_empty() => (OAuthRequest::Check { provider, check }, "GET, HEAD"),
            [provider] => (OAuthRequest::Disconnect { provider }, "DELETE"),
            _ => return Err(not_found()),
        };
        let allowed = match request {
            OAuthRequest::Disconnect { .. } => method == http::Method::DELETE,
            OAuthRequest::Confirm | OAuthRequest::ApprovalForm { .. } => method == http::Method::POST,
            _ => method == http::Method::GET || method == http::Method::HEAD,
        };
        if !allowed {
            return Err(RequestError::MethodNotAllowed { allow });
        }
        Ok(request)
    }

    /// Whether the request needs the caller's credentials (the browser
    /// steps carry none).
    pub(crate) fn needs_caller(&self) -> bool {
        matches!(
            self,
            OAuthRequest::Check { .. }
                | OAuthRequest::Disconnect { .. }
                | OAuthRequest::Confirm
                | OAuthRequest::ApprovalCheck { .. }
        )
    }

    /// What a caller's JWT must be for: a confirmation vouches for a
    /// browser with the user's own credentials, so (as at `/mcp`) only a
    /// token issued for the gateway's resource may, never one a user handed
    /// another service that accepts tokens without `aud`.
    pub(crate) fn audience_rule(&self) -> AudienceRule {
        match self {
            OAuthRequest::Confirm => AudienceRule::Mcp,
            _ => AudienceRule::Otc,
        }
    }
}

/// What a browser step reads of its request.
pub(crate) struct BrowserRequest<'r> {
    /// The method (`HEAD` changes nothing).
    pub method: &'r http::Method,
    /// The path.
    pub path: &'r str,
    /// The query string.
    pub query: Option<&'r str>,
    /// The `Cookie` header values.
    pub cookies: Vec<&'r str>,
    /// A form's body (`POST /oauth/`); empty for every other step.
    pub form: &'r [u8],
}

/// The cookies' names and attributes, which depend on whether the gateway
/// is reached over https.
pub(crate) struct Cookies {
    secure: bool,
    /// The path they are scoped to (`/` with the `__Host-` prefix).
    path: String,
}

impl Cookies {
    pub(crate) fn of(public_url: &str) -> Cookies {
        let secure = public_url.starts_with("https://");
        let base_path = public_url.split_once("://").and_then(|(_, rest)| rest.find('/').map(|at| &rest[at..]));
        let path = if secure { "/".to_owned() } else { format!("{}/oauth/", base_path.unwrap_or("")) };
        Cookies { secure, path }
    }

    /// A cookie's full name: `__Host-` prefixed over https.
    fn name(&self, name: &str) -> String {
        if self.secure {
            format!("__Host-{name}")
        } else {
            name.to_owned()
        }
    }

    /// A `Set-Cookie` value; `max_age` 0 deletes it.
    pub(crate) fn set(&self, name: &str, value: &str, max_age: u64) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{}={value}; Path={}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}", self.name(name), self.path)
    }

    /// The value of cookie `name` in the request's `Cookie` headers.
    pub(crate) fn read<'r>(&self, request: &BrowserRequest<'r>, name: &str) -> Option<&'r str> {
        let full = self.name(name);
        request.cookies.iter().flat_map(|header| header.split(';')).find_map(|pair| {
            let (n, v) = pair.trim().split_once('=')?;
            (n == full).then_some(v)
        })
    }
}

/// The session cookie (`[login]`).
pub(crate) const SESSION: &str = "otc-session";
/// The cookie binding a sign-in to the browser that started it.
const SIGN_IN: &str = "otc-sign-in";
/// How long a sign-in's binding cookie lasts.
const SIGN_IN_MAX_AGE: u64 = 600;
/// The cookie binding a verifier's flows to the browser that opened their
/// links.
const FLOW: &str = "otc-flow";

/// A browser that must sign in (`[login]`) before `path`: sent to the
/// provider, with the cookie that binds the sign-in to it, and back to
/// `path` once signed in.
pub(crate) async fn sign_in_first(
    oauth: &crate::oauth::OAuth,
    cookies: &Cookies,
    path: &str,
    public_url: &str,
) -> Result<Reply, RequestError> {
    let start = oauth.sign_in(path, public_url).await?;
    let mut reply = Reply::redirect(start.redirect);
    reply.headers.push(("set-cookie", cookies.set(SIGN_IN, &start.binding, SIGN_IN_MAX_AGE)));
    Ok(reply)
}

/// Answers a browser step: opening a link, a provider's callback, or the
/// sign-in's callback.
pub(crate) async fn browser_step(
    gateway: &Gateway,
    generation: &Generation,
    request: &OAuthRequest<'_>,
    browser: &BrowserRequest<'_>,
) -> Result<Reply, RequestError> {
    let oauth = &generation.oauth;
    let public_url = gateway.public_url(generation);
    let cookies = Cookies::of(&public_url);
    let session_user = cookies.read(browser, SESSION).and_then(|value| oauth.session_user(value));
    let query = parse_query(browser.query);
    match *request {
        // A preview bot's or a mail scanner's HEAD changes nothing.
        _ if *browser.method == http::Method::HEAD => {
            Ok(Reply::page(200, "Connect", "Open this link in a web browser to continue."))
        }
        OAuthRequest::Start { provider, link } => {
            let held = cookies.read(browser, FLOW);
            match oauth.open_link(provider, link, session_user.as_deref(), held, &public_url).await? {
                Opened::Provider { url, binding } => {
                    let mut reply = Reply::redirect(url);
                    if let Some(binding) = binding {
                        let cookie = cookies.set(FLOW, &binding.value, binding.max_age.as_secs());
                        reply.headers.push(("set-cookie", cookie));
                    }
                    Ok(reply)
                }
                Opened::SignIn => sign_in_first(oauth, &cookies, browser.path, &public_url).await,
            }
        }
        OAuthRequest::SignInCallback => {
            let binding = cookies.read(browser, SIGN_IN);
            let authenticator = &generation.authenticator;
            let signed_in = oauth
                .signed_in(query.state(), query.code(), query.error(), binding, |user| {
                    authenticator.check_user_namespace(user).is_err()
                })
                .await?;
            let mut reply = Reply::redirect(format!("{public_url}{}", signed_in.return_to));
            reply.headers.push(("set-cookie", cookies.set(SESSION, &signed_in.session, signed_in.max_age.as_secs())));
            reply.headers.push(("set-cookie", cookies.set(SIGN_IN, "", 0)));
            Ok(reply)
        }
        OAuthRequest::Callback { provider } => {
            let finished = oauth
                .finish_flow(
                    provider,
                    query.state(),
                    query.code(),
                    query.error(),
                    session_user.as_deref(),
                    cookies.read(browser, FLOW),
                    &gateway.metrics,
                )
                .await?;
            match finished {
                Finished::Connected => Ok(Reply::page(
                    200,
                    "Connected",
                    &format!("The tools that use {provider} can now be used. You may close this window."),
                )),
                Finished::Confirm(verifier) => Ok(Reply::redirect(verifier)),
            }
        }
        OAuthRequest::Return { provider, value } => {
            let flow = cookies.read(browser, FLOW);
            let account = oauth.return_to_flow(provider, value, flow, &gateway.metrics).await?;
            let who = account.and_then(|a| a.email.or(a.subject)).map(|a| format!(" (as {a})")).unwrap_or_default();
            Ok(Reply::page(
                200,
                "Connected",
                &format!("The tools that use {provider} can now be used{who}. You may close this window."),
            ))
        }
        OAuthRequest::Connections => {
            let Some(user) = session_user else {
                return sign_in_first(oauth, &cookies, browser.path, &public_url).await;
            };
            let csrf = cookies.read(browser, SESSION).map(csrf_token).unwrap_or_default();
            Ok(connections_page(oauth, &user, &csrf, &public_url).await)
        }
        OAuthRequest::DisconnectForm => {
            let session = cookies.read(browser, SESSION);
            let (Some(user), Some(session)) = (session_user, session) else {
                return Ok(Reply::page(403, "Not signed in", "Sign in at /oauth/ first."));
            };
            let mut provider = None;
            let mut csrf = None;
            for (key, value) in form_urlencoded::parse(browser.form) {
                match &*key {
                    "provider" => provider = Some(value.into_owned()),
                    "csrf" => csrf = Some(value.into_owned()),
                    _ => {}
                }
            }
            let expected = csrf_token(session);
            let genuine =
                csrf.is_some_and(|c| bool::from(subtle::ConstantTimeEq::ct_eq(c.as_bytes(), expected.as_bytes())));
            let Some(provider) = provider.filter(|_| genuine) else {
                return Ok(Reply::page(
                    403,
                    "Refused",
                    "This form did not come from your connections page. Reload it and try again.",
                ));
            };
            if !oauth.manages(&provider) {
                return Err(FlowError::UnknownProvider(provider).into());
            }
            oauth.disconnect(&provider, &user).await?;
            Ok(Reply::redirect(format!("{public_url}/oauth/")))
        }
        _ => Err(RequestError::NotFound(String::new())),
    }
}

/// The CSRF token of the disconnect forms: a hash of the session cookie,
/// which only the signed-in browser holds (it is `HttpOnly`), so another
/// site can neither read nor make one.
pub(crate) fn csrf_token(session: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let digest = sha2::Sha256::new().chain_update(b"otc-gateway csrf\n").chain_update(session.as_bytes()).finalize();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(digest)
}

/// `GET /oauth/`: the user's connections at each managed provider (never a
/// token), each connected one with a disconnect form.
async fn connections_page(oauth: &crate::oauth::OAuth, user: &str, csrf: &str, public_url: &str) -> Reply {
    use crate::reply::html_escape;
    let mut rows = String::new();
    for provider in oauth.managed() {
        let standing = oauth.standing(provider, user, &std::collections::BTreeSet::new()).await;
        let (state, scopes, since, expiry, connected) = match standing {
            Ok(crate::oauth::GrantStanding { held: Some(g), .. }) => {
                let since = g.connected_at.map_or_else(|| "before this was recorded".to_owned(), utc);
                let mut expiry = g.expires_at.map(|at| format!("token expires {}", utc(at))).unwrap_or_default();
                if let Some(at) = g.refreshed_at {
                    expiry.push_str(&format!("; last refreshed {}", utc(at)));
                }
                ("connected", g.scopes.join(" "), since, expiry, true)
            }
            Ok(_) => ("not connected", String::new(), String::new(), String::new(), false),
            Err(_) => ("unknown (the grant store did not answer)", String::new(), String::new(), String::new(), false),
        };
        let button = if connected {
            format!(
                "<form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"provider\" value=\"{p}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button type=\"submit\">Disconnect</button></form>",
                action = html_escape(&format!("{public_url}/oauth/")),
                p = html_escape(provider),
                csrf = html_escape(csrf),
            )
        } else {
            String::new()
        };
        rows.push_str(&format!(
            "<tr class=\"provider\" data-provider=\"{p}\"><td>{p}</td><td>{state}</td><td>{scopes}</td>\
             <td class=\"connected-at\">{since}</td><td>{expiry}</td><td>{button}</td></tr>",
            p = html_escape(provider),
            scopes = html_escape(&scopes),
            since = html_escape(&since),
            expiry = html_escape(&expiry),
        ));
    }
    let mut reply = Reply::page(200, "Your connections", "");
    reply.body = Bytes::from(format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Your connections</title></head><body>\
         <h1>Your connections</h1><p>Signed in as <b id=\"user\">{user}</b>.</p>\
         <table><tr><th>provider</th><th>state</th><th>scopes</th><th>connected at</th><th>expiry</th><th></th></tr>{rows}</table></body></html>\n",
        user = html_escape(user),
    ));
    with_form(&mut reply);
    reply
}

/// A gateway page with a form: nothing loaded, the form posted only to the
/// gateway, never framed, no `Referer` (which holds a link's secret part)
/// sent to another site. `same-origin`, not `no-referrer`: under
/// `no-referrer` a browser posts the form with `Origin: null`, which the
/// Origin policy refuses.
pub(crate) fn with_form(reply: &mut Reply) {
    reply.headers.retain(|(name, _)| !matches!(*name, "content-security-policy" | "referrer-policy"));
    reply.headers.push(("content-security-policy", FORM_PAGE_CSP.to_owned()));
    reply.headers.push(("referrer-policy", "same-origin".to_owned()));
}

const FORM_PAGE_CSP: &str = "default-src 'none'; form-action 'self'; frame-ancestors 'none'";

/// A callback's query parameters.
struct Query {
    state: Option<String>,
    code: Option<String>,
    error: Option<String>,
}

impl Query {
    fn state(&self) -> Option<&str> {
        self.state.as_deref()
    }
    fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
    fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }
}

fn parse_query(query: Option<&str>) -> Query {
    let mut parsed = Query { state: None, code: None, error: None };
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*key {
            "state" => parsed.state = Some(value.into_owned()),
            "code" => parsed.code = Some(value.into_owned()),
            "error" => parsed.error = Some(value.into_owned()),
            _ => {}
        }
    }
    parsed
}

/// The body of `POST /oauth/confirm`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfirmBody {
    flow_id: String,
}

/// Answers an authenticated caller's step: a challenge's status, a
/// disconnect, or a flow's confirmation (with its `body`).
pub(crate) async fn caller_step(
    gateway: &Gateway,
    generation: &Generation,
    caller: &Caller,
    request: &OAuthRequest<'_>,
    body: &[u8],
) -> Result<Reply, RequestError> {
    let oauth = &generation.oauth;
    // Grants are per user: a caller the gateway did not authenticate has none.
    let user = caller.authenticated_user();
    let need_user = || RequestError::MissingRequirements(MissingRequirements { user_id: true, ..Default::default() });
    match *request {
        OAuthRequest::Check { provider, check } => {
            let status = match user {
                Some(user) => oauth.status(provider, check, user).await,
                None => None,
            };
            match status {
                Some(status) => Ok(json(200, serde_json::json!({ "status": status.as_str() }))),
                // Another caller's check id answers as one never issued.
                None => Err(RequestError::NotFound(format!("/oauth/{provider}/check/..."))),
            }
        }
        OAuthRequest::Disconnect { provider } => {
            let user = user.ok_or_else(need_user)?;
            if !oauth.manages(provider) {
                return Err(FlowError::UnknownProvider(provider.to_owned()).into());
            }
            let had = oauth.disconnect(provider, user).await?;
            Ok(json(200, serde_json::json!({ "provider": provider, "disconnected": had })))
        }
        OAuthRequest::Confirm => {
            let user = user.ok_or_else(need_user)?;
            let ConfirmBody { flow_id } = serde_json::from_slice(body)
                .map_err(|e| RequestError::MalformedCall(format!("send {{\"flow_id\": \"…\"}}: {e}")))?;
            let public_url = gateway.public_url(generation);
            let confirmed = oauth
                .confirm(&flow_id, user, &public_url, &gateway.metrics)
                .await
                .map_err(RequestError::Confirmation)?;
            Ok(json(
                200,
                serde_json::json!({
                    "provider": confirmed.provider,
                    "status": "confirmed",
                    "account": confirmed.account,
                    "return_to": confirmed.return_to,
                }),
            ))
        }
        _ => Err(RequestError::NotFound(String::new())),
    }
}

fn json(status: u16, body: serde_json::Value) -> Reply {
    Reply::json(status, Bytes::from(body.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_methods() {
        let get = http::Method::GET;
        assert_eq!(
            OAuthRequest::parse(&get, "/oauth/google/start/abc").ok(),
            Some(OAuthRequest::Start { provider: "google", link: "abc" })
        );
        assert_eq!(
            OAuthRequest::parse(&get, "/oauth/google/callback").ok(),
            Some(OAuthRequest::Callback { provider: "google" })
        );
        assert_eq!(OAuthRequest::parse(&get, "/oauth/login/callback").ok(), Some(OAuthRequest::SignInCallback));
        assert_eq!(OAuthRequest::parse(&http::Method::POST, "/oauth/confirm").ok(), Some(OAuthRequest::Confirm));
        assert_eq!(
            OAuthRequest::parse(&get, "/oauth/google/return/v").ok(),
            Some(OAuthRequest::Return { provider: "google", value: "v" })
        );
        assert_eq!(
            OAuthRequest::Confirm.audience_rule(),
            AudienceRule::Mcp,
            "a confirmation's JWT must be for the gateway"
        );
        assert_eq!(OAuthRequest::Check { provider: "p", check: "c" }.audience_rule(), AudienceRule::Otc);
        assert_eq!(OAuthRequest::parse(&get, "/oauth/").ok(), Some(OAuthRequest::Connections));
        assert_eq!(OAuthRequest::parse(&http::Method::POST, "/oauth/").ok(), Some(OAuthRequest::DisconnectForm));
        assert_eq!(
            OAuthRequest::parse(&http::Method::DELETE, "/oauth/google").ok(),
            Some(OAuthRequest::Disconnect { provider: "google" })
        );
        assert_eq!(OAuthRequest::parse(&get, "/oauth/approval/L").ok(), Some(OAuthRequest::ApprovalPage { link: "L" }));
        assert_eq!(
            OAuthRequest::parse(&http::Method::POST, "/oauth/approval/L").ok(),
            Some(OAuthRequest::ApprovalForm { link: "L" })
        );
        let check = OAuthRequest::parse(&get, "/oauth/approval/check/I").ok();
        assert!(check.as_ref().is_some_and(OAuthRequest::needs_caller), "a request's state is its caller's");
        assert!(!OAuthRequest::ApprovalForm { link: "L" }.needs_caller(), "a browser step carries no credentials");
        for (method, path, status) in [
            (&http::Method::PUT, "/oauth/approval/L", 405),
            (&http::Method::POST, "/oauth/approval/check/I", 405),
            (&get, "/oauth/approval/", 404),
            (&get, "/oauth/google", 405),
            (&get, "/oauth/confirm", 405),
            (&http::Method::POST, "/oauth/google/callback", 405),
            (&get, "/oauth/google/start/", 404),
            (&get, "/oauth/google/start/a/b", 404),
            (&get, "/oauth/google/return/", 404),
            (&http::Method::POST, "/oauth/google/return/v", 405),
            (&get, "/oauth//x", 404),
            (&http::Method::DELETE, "/oauth/", 405),
        ] {
            let e = OAuthRequest::parse(method, path).expect_err(path);
            assert_eq!(e.status(), status, "{path}");
        }
    }

    #[test]
    fn cookies_follow_the_public_url() {
        let https = Cookies::of("https://tools.example.com");
        assert_eq!(
            https.set(SESSION, "v", 60),
            "__Host-otc-session=v; Path=/; Max-Age=60; HttpOnly; SameSite=Lax; Secure"
        );
        let http = Cookies::of("http://127.0.0.1:8080");
        assert_eq!(http.set(SESSION, "v", 0), "otc-session=v; Path=/oauth/; Max-Age=0; HttpOnly; SameSite=Lax");
        assert_eq!(Cookies::of("http://gw.internal/team").path, "/team/oauth/");
        let request = BrowserRequest {
            method: &http::Method::GET,
            path: "/oauth/p/start/l",
            query: None,
            cookies: vec!["a=1; otc-session=abc", "otc-session-x=no"],
            form: b"",
        };
        assert_eq!(http.read(&request, SESSION), Some("abc"));
        assert_eq!(https.read(&request, SESSION), None, "over https only the prefixed name counts");
    }
}
