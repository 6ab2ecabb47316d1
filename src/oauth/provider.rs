//! One OAuth provider as the gateway's client sees it: its endpoints (from
//! OpenID Connect discovery or the config), the authorization request, and
//! the token endpoint's three uses (code, refresh, revoke), through the
//! `oauth2` crate over the gateway's own HTTP client.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU16, Ordering};
use std::time::Duration;

use base64::Engine as _;
use oauth2::basic::{
    BasicErrorResponse, BasicErrorResponseType, BasicRevocationErrorResponse, BasicTokenIntrospectionResponse,
    BasicTokenType,
};
use oauth2::{
    AuthUrl, AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointNotSet, EndpointSet, ExtraTokenFields,
    HttpRequest, HttpResponse, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RefreshToken, RequestTokenError,
    Scope, StandardRevocableToken, StandardTokenResponse, TokenResponse, TokenUrl,
};
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

use super::store::{now, Grant};
use super::OAuthError;
use crate::config::{scope_ok, AuthorizationProvider};
use crate::http_client::{self, HttpClient};
use crate::otel::Span;
use crate::secret::SecretString;
use crate::vault::SecretResolver;

/// The longest one request to a provider may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// A token endpoint's answer; an OpenID provider adds an `id_token`.
type TokenAnswer = StandardTokenResponse<IdTokenField, BasicTokenType>;

/// The client type before its endpoints are set.
type NewClient = oauth2::Client<
    BasicErrorResponse,
    TokenAnswer,
    BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
>;

/// The client type with the endpoints the gateway uses set.
type Client = oauth2::Client<
    BasicErrorResponse,
    TokenAnswer,
    BasicTokenIntrospectionResponse,
    StandardRevocableToken,
    BasicRevocationErrorResponse,
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointSet,
>;

/// The `id_token` of an OpenID Connect token answer (OIDC Core 3.1.3.3).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct IdTokenField {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id_token: Option<String>,
}

impl ExtraTokenFields for IdTokenField {}

/// A provider's endpoints.
#[derive(Debug, Clone)]
struct Endpoints {
    authorize: String,
    token: String,
    revocation: Option<String>,
    /// The signing keys of its ID tokens (discovery only).
    jwks: Option<String>,
}

/// The discovery document's fields the gateway reads.
#[derive(Deserialize)]
struct Discovery {
    authorization_endpoint: String,
    token_endpoint: String,
    #[serde(default)]
    revocation_endpoint: Option<String>,
    #[serde(default)]
    jwks_uri: Option<String>,
}

/// What a refresh came to.
#[derive(Debug)]
pub(super) enum Refreshed {
    /// A new grant.
    Grant(Grant),
    /// The provider refused the refresh token (`invalid_grant`): the grant
    /// is dead and the user must authorize again.
    Revoked,
}

/// One `[authorization.<provider>]` in the managed form.
#[derive(Debug)]
pub(super) struct Provider {
    pub(super) id: String,
    pub(super) config: AuthorizationProvider,
    endpoints: OnceCell<Endpoints>,
    http: ProviderHttp,
}

impl Provider {
    /// A provider; its endpoints are discovered on first use (so the gateway
    /// starts while the provider is unreachable).
    pub(super) fn new(id: &str, config: &AuthorizationProvider) -> Result<Provider, OAuthError> {
        let http = http_client::build(PROVIDER_TIMEOUT).map_err(OAuthError::Setup)?;
        Ok(Provider { id: id.to_owned(), config: config.clone(), endpoints: OnceCell::new(), http: ProviderHttp(http) })
    }

    /// The scopes always asked for.
    pub(super) fn configured_scopes(&self) -> impl Iterator<Item = &String> {
        self.config.scopes.iter()
    }

    async fn endpoints(&self) -> Result<&Endpoints, OAuthError> {
        self.endpoints
            .get_or_try_init(|| async {
                let configured = |e: &Option<crate::config::EndpointUrl>| e.as_ref().map(|u| u.0.clone());
                let (Some(authorize), Some(token)) =
                    (configured(&self.config.authorize_endpoint), configured(&self.config.token_endpoint))
                else {
                    return self.discover().await;
                };
                Ok(Endpoints { authorize, token, revocation: configured(&self.config.revocation_endpoint), jwks: None })
            })
            .await
    }

    /// OpenID Connect discovery at the issuer; configured endpoints win.
    async fn discover(&self) -> Result<Endpoints, OAuthError> {
        let issuer = self.config.issuer.as_ref().map(|u| u.0.clone()).unwrap_or_default();
        let url = format!("{issuer}/.well-known/openid-configuration");
        let failed = |why: String| OAuthError::Provider(format!("discovery at {url}: {why}"));
        let uri: http::Uri = url.parse().map_err(|e| failed(format!("{e}")))?;
        let (status, body) = http_client::get(&self.http.0, uri, Vec::new(), PROVIDER_TIMEOUT).await.map_err(failed)?;
        if !status.is_success() {
            return Err(failed(format!("HTTP {status}")));
        }
        let found: Discovery = serde_json::from_slice(&body).map_err(|e| failed(e.to_string()))?;
        let configured = |e: &Option<crate::config::EndpointUrl>| e.as_ref().map(|u| u.0.clone());
        Ok(Endpoints {
            authorize: configured(&self.config.authorize_endpoint).unwrap_or(found.authorization_endpoint),
            token: configured(&self.config.token_endpoint).unwrap_or(found.token_endpoint),
            revocation: configured(&self.config.revocation_endpoint).or(found.revocation_endpoint),
            jwks: found.jwks_uri,
        })
    }

    /// The `oauth2` client, with the client secret read now (so a rotated
    /// one is used).
    async fn client(&self, secrets: &SecretResolver, redirect_uri: Option<&str>) -> Result<Client, OAuthError> {
        let endpoints = self.endpoints().await?;
        let bad = |what: &str, e: oauth2::url::ParseError| OAuthError::Provider(format!("{what}: {e}"));
        let mut client = NewClient::new(ClientId::new(self.config.client_id.clone().unwrap_or_default()))
            .set_auth_uri(AuthUrl::new(endpoints.authorize.clone()).map_err(|e| bad("authorization endpoint", e))?)
            .set_token_uri(TokenUrl::new(endpoints.token.clone()).map_err(|e| bad("token endpoint", e))?);
        if let Some(redirect_uri) = redirect_uri {
            client =
                client.set_redirect_uri(RedirectUrl::new(redirect_uri.to_owned()).map_err(|e| bad("redirect URI", e))?);
        }
        if let Some(reference) = &self.config.client_secret {
            let secret = secrets
                .resolve(reference.get_ref(), None)
                .await
                .map_err(|e| OAuthError::Provider(format!("client_secret of authorization.{}: {e}", self.id)))?;
            client = client.set_client_secret(ClientSecret::new(secret.into_exposed()));
        }
        Ok(client)
    }

    /// Where to send the browser: the authorization request, with the PKCE
    /// S256 challenge of `verifier` (and an OpenID `nonce` when given).
    pub(super) async fn authorization_request(
        &self,
        secrets: &SecretResolver,
        redirect_uri: &str,
        scopes: &BTreeSet<String>,
        state: &str,
        verifier: &str,
        nonce: Option<&str>,
    ) -> Result<String, OAuthError> {
        let client = self.client(secrets, Some(redirect_uri)).await?;
        let challenge = PkceCodeChallenge::from_code_verifier_sha256(&PkceCodeVerifier::new(verifier.to_owned()));
        let state = state.to_owned();
        let mut request = client
            .authorize_url(|| CsrfToken::new(state))
            .add_scopes(scopes.iter().map(|s| Scope::new(s.clone())))
            .set_pkce_challenge(challenge);
        for (name, value) in &self.config.authorize_params {
            request = request.add_extra_param(name.clone(), value.clone());
        }
        if let Some(nonce) = nonce {
            request = request.add_extra_param("nonce", nonce.to_owned());
        }
        let (url, _) = request.url();
        Ok(url.to_string())
    }

    /// Exchanges an authorization code for a grant covering at least `asked`,
    /// and the account it is for when the answer carries an ID token.
    pub(super) async fn exchange(
        &self,
        secrets: &SecretResolver,
        redirect_uri: &str,
        code: &str,
        verifier: String,
        asked: &BTreeSet<String>,
    ) -> Result<(Grant, Option<Account>), OAuthError> {
        let answer = self.token_answer(secrets, redirect_uri, code, verifier).await?;
        let account = answer.extra_fields().id_token.as_deref().and_then(Account::of_id_token);
        Ok((grant_from(&answer, asked, None), account))
    }

    /// Exchanges a sign-in's authorization code for its ID token (the
    /// access token is not kept).
    pub(super) async fn exchange_id_token(
        &self,
        secrets: &SecretResolver,
        redirect_uri: &str,
        code: &str,
        verifier: String,
    ) -> Result<String, OAuthError> {
        let answer = self.token_answer(secrets, redirect_uri, code, verifier).await?;
        answer
            .extra_fields()
            .id_token
            .clone()
            .ok_or_else(|| OAuthError::Provider("the token endpoint sent no id_token".into()))
    }

    async fn token_answer(
        &self,
        secrets: &SecretResolver,
        redirect_uri: &str,
        code: &str,
        verifier: String,
    ) -> Result<TokenAnswer, OAuthError> {
        let client = self.client(secrets, Some(redirect_uri)).await?;
        client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .set_pkce_verifier(PkceCodeVerifier::new(verifier))
            .request_async(&self.http)
            .await
            .map_err(|e| OAuthError::Provider(format!("token endpoint: {}", describe(&e))))
    }

    /// The URL of the provider's ID token signing keys (discovery's
    /// `jwks_uri`).
    pub(super) async fn jwks_uri(&self) -> Result<String, OAuthError> {
        self.endpoints()
            .await?
            .jwks
            .clone()
            .ok_or_else(|| OAuthError::Provider("the discovery document names no jwks_uri".into()))
    }

    /// Refreshes `grant` with its refresh token. `span`, the refresh's
    /// client span when its call is recorded, gets the token endpoint and
    /// the status it answered (OpenTelemetry's HTTP client attributes).
    pub(super) async fn refresh(
        &self,
        secrets: &SecretResolver,
        grant: &Grant,
        span: Option<&mut Span>,
    ) -> Result<Refreshed, OAuthError> {
        let Some(refresh_token) = &grant.refresh_token else { return Ok(Refreshed::Revoked) };
        let client = self.client(secrets, None).await?;
        let token = RefreshToken::new(refresh_token.expose().to_owned());
        let http = Observed { http: &self.http, status: AtomicU16::new(0) };
        let answer = client.exchange_refresh_token(&token).request_async(&http).await;
        if let Some(span) = span {
            describe_token_request(span, client.token_uri().url(), http.status.load(Ordering::Relaxed));
        }
        match answer {
            Ok(answer) => Ok(Refreshed::Grant(grant_from(&answer, &grant.scopes, grant.refresh_token.clone()))),
            Err(RequestTokenError::ServerResponse(e)) if *e.error() == BasicErrorResponseType::InvalidGrant => {
                Ok(Refreshed::Revoked)
            }
            Err(e) => Err(OAuthError::Provider(format!("token endpoint (refresh): {}", describe(&e)))),
        }
    }

    /// Revokes the grant at the provider (RFC 7009), when it has a
    /// revocation endpoint: the refresh token, which takes its access
    /// tokens with it, else the access token. (Written here, not through the
    /// `oauth2` crate: it refuses any revocation URL but https, loopback
    /// included, and the request is one form POST.)
    pub(super) async fn revoke(&self, secrets: &SecretResolver, grant: &Grant) -> Result<bool, OAuthError> {
        let Some(url) = self.endpoints().await?.revocation.clone() else { return Ok(false) };
        let (token, hint) = match &grant.refresh_token {
            Some(refresh) => (refresh, "refresh_token"),
            None => (&grant.access_token, "access_token"),
        };
        let secret = match &self.config.client_secret {
            Some(reference) => Some(
                secrets
                    .resolve(reference.get_ref(), None)
                    .await
                    .map_err(|e| OAuthError::Provider(format!("client_secret of authorization.{}: {e}", self.id)))?,
            ),
            None => None,
        };
        let client_id = self.config.client_id.clone().unwrap_or_default();
        let (body, authorization) = revocation_request(&client_id, secret.as_ref(), token, hint)?;
        let mut headers =
            vec![(http::header::CONTENT_TYPE, http::HeaderValue::from_static("application/x-www-form-urlencoded"))];
        headers.extend(authorization.map(|value| (http::header::AUTHORIZATION, value)));
        let uri: http::Uri = url.parse().map_err(|e| OAuthError::Provider(format!("revocation endpoint: {e}")))?;
        let (status, _, _) = http_client::send(
            &self.http.0,
            http::Method::POST,
            uri,
            headers,
            bytes::Bytes::from(body),
            PROVIDER_TIMEOUT,
        )
        .await
        .map_err(|e| OAuthError::Provider(format!("revocation endpoint: {e}")))?;
        // RFC 7009 2.2: 200 whether or not the token was still valid.
        if !status.is_success() {
            return Err(OAuthError::Provider(format!("revocation endpoint answered HTTP {status}")));
        }
        Ok(true)
    }
}

/// An RFC 7009 request's form, and its `Authorization` header when the
/// client has a secret (client_secret_basic, each part form-encoded first,
/// RFC 6749 2.3.1).
fn revocation_request(
    client_id: &str,
    secret: Option<&SecretString>,
    token: &SecretString,
    hint: &str,
) -> Result<(String, Option<http::HeaderValue>), OAuthError> {
    let mut form = oauth2::url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("token", token.expose()).append_pair("token_type_hint", hint);
    let Some(secret) = secret else {
        form.append_pair("client_id", client_id);
        return Ok((form.finish(), None));
    };
    let encode = |s: &str| oauth2::url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>();
    let pair = format!("{}:{}", encode(client_id), encode(secret.expose()));
    let mut value =
        http::HeaderValue::from_str(&format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(pair)))
            .map_err(|_| OAuthError::Provider("the client credentials do not fit a header".into()))?;
    value.set_sensitive(true);
    Ok((form.finish(), Some(value)))
}

/// The `oauth2` crate's requests, over the gateway's HTTP client. (A named
/// type, not a closure: a closure's future is not `Send` for every lifetime
/// the crate asks of it.)
#[derive(Debug)]
struct ProviderHttp(HttpClient);

impl<'c> oauth2::AsyncHttpClient<'c> for ProviderHttp {
    type Error = OAuthError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, OAuthError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let headers = parts.headers.iter().map(|(n, v)| (n.clone(), v.clone())).collect();
            let (status, headers_back, body) =
                http_client::send(&self.0, parts.method, parts.uri, headers, body.into(), PROVIDER_TIMEOUT)
                    .await
                    .map_err(OAuthError::Provider)?;
            let mut response = http::Response::builder().status(status);
            if let Some(h) = response.headers_mut() {
                *h = headers_back;
            }
            response.body(body.to_vec()).map_err(|e| OAuthError::Provider(e.to_string()))
        })
    }
}

/// [`ProviderHttp`], keeping the status of the answer (for a span).
struct Observed<'h> {
    http: &'h ProviderHttp,
    /// The last answer's status; 0 before one came.
    status: AtomicU16,
}

impl<'c> oauth2::AsyncHttpClient<'c> for Observed<'_> {
    type Error = OAuthError;
    type Future = Pin<Box<dyn Future<Output = Result<HttpResponse, OAuthError>> + Send + 'c>>;

    fn call(&'c self, request: HttpRequest) -> Self::Future {
        Box::pin(async move {
            let answer = self.http.call(request).await;
            if let Ok(response) = &answer {
                self.status.store(response.status().as_u16(), Ordering::Relaxed);
            }
            answer
        })
    }
}

/// A request to the token endpoint `url`, answered with `status` (0: no
/// answer), in OpenTelemetry's HTTP client terms: the URL without its query,
/// fragment or credentials, never the form sent (it holds the tokens).
fn describe_token_request(span: &mut Span, url: &oauth2::url::Url, status: u16) {
    span.set("http.request.method", "POST");
    span.set("server.address", url.host_str().unwrap_or_default());
    if let Some(port) = url.port_or_known_default() {
        span.set_int("server.port", i64::from(port));
    }
    let mut full = url.clone();
    // Never fails on a URL with a host, which a token endpoint has.
    let _ = (full.set_username(""), full.set_password(None));
    full.set_query(None);
    full.set_fragment(None);
    span.set("url.full", full.as_str());
    if status != 0 {
        span.set_int("http.response.status_code", i64::from(status));
    }
    if status >= 400 {
        span.fail(status.to_string());
    }
}

/// The provider account a grant is for, as its ID token names it: what an
/// application shows its user before the grant is kept (never a token).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Account {
    /// The ID token's `sub`: the account's identifier at the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// The ID token's `email`, when the provider put one in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<String>,
}

impl Account {
    /// The account an ID token names. It came straight from the token
    /// endpoint over the gateway's own connection (OpenID Connect Core
    /// 3.1.3.7: TLS stands in for its signature), and it is only shown,
    /// never trusted for anything else; `None` when it names neither.
    fn of_id_token(id_token: &str) -> Option<Account> {
        let payload = id_token.split('.').nth(1)?;
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(payload.trim_end_matches('=')).ok()?;
        let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
        // Shown to a person: short, printable text only.
        let text = |name: &str| {
            claims
                .get(name)
                .and_then(serde_json::Value::as_str)
                .filter(|v| !v.is_empty() && v.len() <= 256 && !v.chars().any(char::is_control))
                .map(str::to_owned)
        };
        let account = Account { subject: text("sub"), email: text("email") };
        (account.subject.is_some() || account.email.is_some()).then_some(account)
    }
}

/// A token response as a grant. The scopes it covers: what the provider says
/// it granted plus what was asked (providers rename scopes as they grant
/// them, e.g. Google's `email`, so the answer alone would never cover the
/// asking and every call would challenge again).
fn grant_from(answer: &TokenAnswer, asked: &BTreeSet<String>, previous_refresh: Option<SecretString>) -> Grant {
    let mut scopes: BTreeSet<String> = asked.clone();
    if let Some(granted) = answer.scopes() {
        scopes.extend(granted.iter().map(|s| s.to_string()).filter(|s| scope_ok(s)));
    }
    Grant {
        access_token: SecretString::from(answer.access_token().secret().clone()),
        // A refresh answer without a new refresh token keeps the old one.
        refresh_token: answer.refresh_token().map(|t| SecretString::from(t.secret().clone())).or(previous_refresh),
        expires_at: answer.expires_in().map(|d| now().saturating_add(d.as_secs())),
        scopes,
        refreshing_until: None,
        connected_at: None,
        refreshed_at: None,
    }
}

/// A token-endpoint failure for logs and pages: the error code and
/// description the provider sent, never a token.
fn describe<E: std::error::Error, T: oauth2::ErrorResponse>(e: &RequestTokenError<E, T>) -> String {
    match e {
        RequestTokenError::ServerResponse(r) => r.to_string(),
        RequestTokenError::Request(e) => crate::http_client::error_chain(e),
        RequestTokenError::Parse(e, _) => format!("unreadable answer: {e}"),
        RequestTokenError::Other(e) => e.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_token(claims: serde_json::Value) -> String {
        let part = |v: &serde_json::Value| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string());
        format!("{}.{}.sig", part(&serde_json::json!({"alg": "RS256"})), part(&claims))
    }

    #[test]
    fn the_account_is_what_the_id_token_names_and_only_text() {
        let account = Account::of_id_token(&id_token(serde_json::json!({"sub": "42", "email": "a@example.com"})));
        assert_eq!(account, Some(Account { subject: Some("42".into()), email: Some("a@example.com".into()) }));
        let account = Account::of_id_token(&id_token(serde_json::json!({"sub": "42", "email": "a\u{1b}[31m"})));
        assert_eq!(account, Some(Account { subject: Some("42".into()), email: None }), "no control characters");
        assert_eq!(Account::of_id_token(&id_token(serde_json::json!({"sub": 42}))), None);
        assert_eq!(Account::of_id_token("not a token"), None);
        assert_eq!(Account::of_id_token("a.!!!.c"), None);
    }
}
