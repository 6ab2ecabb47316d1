//! The OAuth endpoints under `/oauth/<provider>/`: where a challenge's links
//! lead, and where a user disconnects.
//!
//! | request | who | answer |
//! | --- | --- | --- |
//! | `GET /oauth/P/start/LINK` | the user's browser | 302 to the provider (once per link) |
//! | `GET /oauth/P/callback?code&state` | the provider, through the browser | a page: connected, or why not |
//! | `GET /oauth/P/check/CHECK` | the client that got the challenge (authenticated) | `{"status": ...}` |
//! | `DELETE /oauth/P` | the user's client (authenticated) | `{"disconnected": bool}` |
//!
//! The browser steps carry no credentials: a link is single-use,
//! unguessable, short-lived and bound to the caller it was issued to, and a
//! `state` is bound to its link.

use bytes::Bytes;

use crate::auth::{Caller, CallerKind};
use crate::error::RequestError;
use crate::gateway::{Gateway, Runtime};
use crate::oauth::FlowError;
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
            [provider, "start", link] if !link.is_empty() => (OAuthRequest::Start { provider, link }, "GET, HEAD"),
            [provider, "callback"] => (OAuthRequest::Callback { provider }, "GET, HEAD"),
            [provider, "check", check] if !check.is_empty() => (OAuthRequest::Check { provider, check }, "GET, HEAD"),
            [provider] => (OAuthRequest::Disconnect { provider }, "DELETE"),
            _ => return Err(not_found()),
        };
        let allowed = match request {
            OAuthRequest::Disconnect { .. } => method == http::Method::DELETE,
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
        matches!(self, OAuthRequest::Check { .. } | OAuthRequest::Disconnect { .. })
    }
}

/// Answers a browser step: opening a link, or the provider's callback with
/// the request's `query`.
pub(crate) async fn browser_step(
    gateway: &Gateway,
    runtime: &Runtime,
    request: &OAuthRequest<'_>,
    query: Option<&str>,
) -> Result<Reply, RequestError> {
    let oauth = &runtime.oauth;
    match *request {
        OAuthRequest::Start { provider, link } => {
            let public_url = gateway.public_url(runtime);
            Ok(Reply::redirect(oauth.open_link(provider, link, &public_url).await?))
        }
        OAuthRequest::Callback { provider } => {
            let mut state = None;
            let mut code = None;
            let mut error = None;
            for (key, value) in oauth2::url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
                match &*key {
                    "state" => state = Some(value.into_owned()),
                    "code" => code = Some(value.into_owned()),
                    "error" => error = Some(value.into_owned()),
                    _ => {}
                }
            }
            oauth.finish_flow(provider, state.as_deref(), code.as_deref(), error.as_deref(), &gateway.metrics).await?;
            Ok(Reply::page(
                200,
                "Connected",
                &format!("The tools that use {provider} can now be used. You may close this window."),
            ))
        }
        _ => Err(RequestError::NotFound(String::new())),
    }
}

/// Answers an authenticated caller's step: a challenge's status, or a
/// disconnect.
pub(crate) async fn caller_step(
    runtime: &Runtime,
    caller: &Caller,
    request: &OAuthRequest<'_>,
) -> Result<Reply, RequestError> {
    let oauth = &runtime.oauth;
    // Grants are per user: a caller the gateway did not authenticate has none.
    let user = caller.user_id.as_deref().filter(|_| caller.kind != CallerKind::Anonymous);
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
            let user = user.ok_or(RequestError::MissingRequirements(crate::error::MissingRequirements {
                user_id: true,
                ..Default::default()
            }))?;
            if !oauth.manages(provider) {
                return Err(FlowError::UnknownProvider(provider.to_owned()).into());
            }
            let had = oauth.disconnect(provider, user).await?;
            Ok(json(200, serde_json::json!({ "provider": provider, "disconnected": had })))
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
        assert_eq!(
            OAuthRequest::parse(&http::Method::DELETE, "/oauth/google").ok(),
            Some(OAuthRequest::Disconnect { provider: "google" })
        );
        for (method, path, status) in [
            (&get, "/oauth/google", 405),
            (&http::Method::POST, "/oauth/google/callback", 405),
            (&get, "/oauth/google/start/", 404),
            (&get, "/oauth/google/start/a/b", 404),
            (&get, "/oauth/", 404),
        ] {
            let e = OAuthRequest::parse(method, path).expect_err(path);
            assert_eq!(e.status(), status, "{path}");
        }
    }
}
