//! The OAuth endpoints under `/oauth/`: where a challenge's links lead,
//! where browsers sign in, where a user's application confirms a flow, and
//! where a user disconnects.
//!
//! | request | who | answer |
//! | --- | --- | --- |
//! | `GET /oauth/P/start/LINK` | the user's browser | 302 to the provider, or to sign-in first; 403 page for another user |
//! | `GET /oauth/P/callback?code&state` | the provider, through the browser | a page (connected, or why not), or 302 to the verifier |
//! | `GET /oauth/login/callback?code&state` | `[login]`'s provider, through the browser | 302 back to the link, signed in |
//! | `POST /oauth/confirm` `{"flow_id"}` | the user's application, as the user (authenticated) | `{"status": "completed"}`, or 403 for another user |
//! | `GET /oauth/P/check/CHECK` | the client that got the challenge (authenticated) | `{"status": ...}` |
//! | `DELETE /oauth/P` | the user's client (authenticated) | `{"disconnected": bool}` |
//!
//! The browser steps carry no credentials but cookies: a session (`[login]`)
//! sealed by the gateway, and the binding of a sign-in to the browser that
//! started it. Both are `HttpOnly`, `SameSite=Lax`, and with an https
//! `public_url` `Secure` with the `__Host-` prefix (which requires `Path=/`);
//! over http they are scoped to the `/oauth/` paths. Who may finish a flow
//! is `oauth/flow.rs`'s business.

use bytes::Bytes;

use crate::auth::{Caller, CallerKind};
use crate::error::{MissingRequirements, RequestError};
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
}

impl<'p> OAuthRequest<'p> {
    /// The request a path and method stand for.
    pub(crate) fn parse(method: &http::Method, path: &'p str) -> Result<OAuthRequest<'p>, RequestError> {
        let not_found = || RequestError::NotFound(path.chars().take(200).collect());
        let rest = path.strip_prefix("/oauth/").ok_or_else(not_found)?;
        let parts: Vec<&str> = rest.split('/').collect();
        if parts.first().is_none_or(|provider| provider.is_empty()) {
            return Err(not_found());
        }
        let (request, allow) = match parts.as_slice() {
            // (`config::RESERVED_PROVIDER_NAMES` keeps providers off these.)
            ["login", "callback"] => (OAuthRequest::SignInCallback, "GET, HEAD"),
            ["confirm"] => (OAuthRequest::Confirm, "POST"),
            [provider, "start", link] if !link.is_empty() => (OAuthRequest::Start { provider, link }, "GET, HEAD"),
            [provider, "callback"] => (OAuthRequest::Callback { provider }, "GET, HEAD"),
            [provider, "check", check] if !check.is_empty() => (OAuthRequest::Check { provider, check }, "GET, HEAD"),
            [provider] => (OAuthRequest::Disconnect { provider }, "DELETE"),
            _ => return Err(not_found()),
        };
        let allowed = match request {
            OAuthRequest::Disconnect { .. } => method == http::Method::DELETE,
            OAuthRequest::Confirm => method == http::Method::POST,
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
        matches!(self, OAuthRequest::Check { .. } | OAuthRequest::Disconnect { .. } | OAuthRequest::Confirm)
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
}

/// The cookies' names and attributes, which depend on whether the gateway
/// is reached over https.
struct Cookies {
    secure: bool,
    /// The path they are scoped to (`/` with the `__Host-` prefix).
    path: String,
}

impl Cookies {
    fn of(public_url: &str) -> Cookies {
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
    fn set(&self, name: &str, value: &str, max_age: u64) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("{}={value}; Path={}; Max-Age={max_age}; HttpOnly; SameSite=Lax{secure}", self.name(name), self.path)
    }

    /// The value of cookie `name` in the request's `Cookie` headers.
    fn read<'r>(&self, request: &BrowserRequest<'r>, name: &str) -> Option<&'r str> {
        let full = self.name(name);
        request.cookies.iter().flat_map(|header| header.split(';')).find_map(|pair| {
            let (n, v) = pair.trim().split_once('=')?;
            (n == full).then_some(v)
        })
    }
}

/// The session cookie (`[login]`).
const SESSION: &str = "otc-session";
/// The cookie binding a sign-in to the browser that started it.
const SIGN_IN: &str = "otc-sign-in";
/// How long a sign-in's binding cookie lasts.
const SIGN_IN_MAX_AGE: u64 = 600;

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
            match oauth.open_link(provider, link, session_user.as_deref(), &public_url).await? {
                Opened::Provider(url) => Ok(Reply::redirect(url)),
                Opened::SignIn => {
                    let start = oauth.sign_in(browser.path, &public_url).await?;
                    let mut reply = Reply::redirect(start.redirect);
                    reply.headers.push(("set-cookie", cookies.set(SIGN_IN, &start.binding, SIGN_IN_MAX_AGE)));
                    Ok(reply)
                }
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
        _ => Err(RequestError::NotFound(String::new())),
    }
}

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
    let user = caller.user_id.as_deref().filter(|_| caller.kind != CallerKind::Anonymous);
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
            let provider = oauth.confirm(&flow_id, user, &gateway.metrics).await.map_err(RequestError::Confirmation)?;
            Ok(json(200, serde_json::json!({ "provider": provider, "status": "completed" })))
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
            OAuthRequest::parse(&http::Method::DELETE, "/oauth/google").ok(),
            Some(OAuthRequest::Disconnect { provider: "google" })
        );
        for (method, path, status) in [
            (&get, "/oauth/google", 405),
            (&get, "/oauth/confirm", 405),
            (&http::Method::POST, "/oauth/google/callback", 405),
            (&get, "/oauth/google/start/", 404),
            (&get, "/oauth/google/start/a/b", 404),
            (&get, "/oauth/", 404),
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
        };
        assert_eq!(http.read(&request, SESSION), Some("abc"));
        assert_eq!(https.read(&request, SESSION), None, "over https only the prefixed name counts");
    }
}
