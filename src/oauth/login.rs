//! `[login]`: the gateway signs browsers in with the organisation's OpenID
//! provider (authorization code with PKCE and a nonce), so that a connect
//! link completes only in a browser signed in as the link's user.
//!
//! A sign-in is bound to the browser that started it: a random value goes
//! into a cookie at the start and only its digest into the stored record,
//! so a sign-in callback URL opened in another browser (login CSRF: the
//! victim's browser signed in as the attacker) finds no match. The ID token
//! comes straight from the token endpoint; its signature is checked anyway
//! with the provider's published keys, with `iss`, `aud` (the client id),
//! `exp` and the `nonce`.
//!
//! A session is the user id and an expiry, sealed with the gateway's state
//! key (AES-256-GCM), in a cookie: nothing is kept server-side, and any
//! replica sharing `[state] encryption_key` reads it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::OnceCell;

use super::challenges::{Challenges, Kind};
use super::provider::Provider;
use super::seal::{digest, random_id, Sealer};
use super::store::now;
use super::{FlowError, OAuthError};
use crate::auth::jwt::{JwksSource, JwtSettings, JwtVerifier};
use crate::config::{AuthorizationProvider, Config, LoginConfig};
use crate::vault::SecretResolver;

/// How long a browser may take at the provider to sign in.
const SIGN_IN_TTL: Duration = Duration::from_secs(600);
/// What a session's sealed bytes are bound to.
const SESSION_CONTEXT: &[u8] = b"otc-gateway session v1";
/// How often the provider's signing keys are read again.
const JWKS_REFRESH: Duration = Duration::from_secs(300);

/// The path under `public_url` the provider sends signed-in browsers back to.
pub const CALLBACK_PATH: &str = "/oauth/login/callback";

/// A sign-in in progress, by its `state`.
#[derive(Serialize, Deserialize)]
struct SignIn {
    /// Where the browser goes once signed in (a path under `/oauth/`).
    return_to: String,
    /// The PKCE verifier.
    verifier: String,
    /// The OpenID nonce the ID token must carry.
    nonce: String,
    /// The digest of the browser's binding cookie.
    binding: String,
    /// The redirect URI sent (the token request repeats it).
    redirect_uri: String,
}

/// A signed-in browser's session, as sealed into its cookie.
#[derive(Serialize, Deserialize)]
struct Session {
    /// The user id.
    user: String,
    /// The issuer that signed the user in.
    issuer: String,
    /// When it ends, Unix seconds.
    expires: u64,
}

/// A finished sign-in: the session cookie's value, how long it lasts, and
/// where the browser goes next.
#[derive(Debug)]
pub struct SignedIn {
    /// The sealed session (base64url), the cookie's value.
    pub session: String,
    /// How long the cookie lasts.
    pub max_age: Duration,
    /// The path to go back to.
    pub return_to: String,
}

/// A sign-in's start: where to send the browser, and the value of the
/// cookie that binds the sign-in to it.
#[derive(Debug)]
pub struct SignInStart {
    /// The provider's authorization request.
    pub redirect: String,
    /// The binding cookie's value.
    pub binding: String,
}

/// The gateway's sign-in with `[login]`.
pub(super) struct Login {
    config: LoginConfig,
    provider: Provider,
    user_id_claim: String,
    leeway: Duration,
    verifier: OnceCell<JwtVerifier>,
    sealer: Arc<Sealer>,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login").field("issuer", &self.config.issuer.0).finish_non_exhaustive()
    }
}

impl Login {
    /// The sign-in `[login]` describes, its sessions sealed by `sealer`.
    pub(super) fn new(config: &Config, login: &LoginConfig, sealer: Arc<Sealer>) -> Result<Login, OAuthError> {
        // The sign-in is one more OAuth client, of the organisation's
        // provider: the same discovery, authorization request and token
        // endpoint as the managed providers'.
        let as_provider = AuthorizationProvider {
            token: None,
            authorize_url: None,
            issuer: Some(login.issuer.clone()),
            authorize_endpoint: None,
            token_endpoint: None,
            revocation_endpoint: None,
            client_id: Some(login.client_id.clone()),
            client_secret: login.client_secret.clone(),
            scopes: login.scopes_asked(),
            authorize_params: Default::default(),
            store: None,
            link_ttl: SIGN_IN_TTL,
            refresh_margin: Duration::ZERO,
            user_verification: None,
            verifier_url: None,
        };
        Ok(Login {
            config: login.clone(),
            provider: Provider::new("login", &as_provider)?,
            user_id_claim: login.user_id_claim.clone().unwrap_or_else(|| config.auth.user_id_claim.clone()),
            leeway: config.auth.leeway,
            verifier: OnceCell::new(),
            sealer,
        })
    }

    /// Whether this is the sign-in `login` describes (a reload keeps it).
    pub(super) fn is_for(&self, login: &LoginConfig) -> bool {
        self.config == *login
    }

    /// Starts a sign-in that comes back to `return_to`.
    pub(super) async fn start(
        &self,
        challenges: &Challenges<'_>,
        secrets: &SecretResolver,
        return_to: &str,
        public_url: &str,
    ) -> Result<SignInStart, FlowError> {
        let (state, verifier, nonce, binding) = (random_id(32)?, random_id(32)?, random_id(16)?, random_id(32)?);
        let redirect_uri = format!("{public_url}{CALLBACK_PATH}");
        let scopes: BTreeSet<String> = self.config.scopes_asked().into_iter().collect();
        let redirect = self
            .provider
            .authorization_request(secrets, &redirect_uri, &scopes, &state, &verifier, Some(&nonce))
            .await?;
        let record =
            SignIn { return_to: return_to.to_owned(), verifier, nonce, binding: digest(&binding), redirect_uri };
        challenges.put(Kind::SignIn, &state, &record, SIGN_IN_TTL).await?;
        Ok(SignInStart { redirect, binding })
    }

    /// The provider's callback: `binding` is the browser's binding cookie.
    /// `refused` says whether a user id belongs to an API key (those are
    /// never a browser's).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn finish(
        &self,
        challenges: &Challenges<'_>,
        secrets: &SecretResolver,
        state: Option<&str>,
        code: Option<&str>,
        error: Option<&str>,
        binding: Option<&str>,
        refused: impl Fn(&str) -> bool,
    ) -> Result<SignedIn, FlowError> {
        let state = state.ok_or(FlowError::BadCallback("state"))?;
        // Another browser's callback is refused without touching its record.
        let record: SignIn = challenges.get(Kind::SignIn, state).await?.ok_or(FlowError::UnknownLink)?;
        if binding.map(digest).as_deref() != Some(record.binding.as_str()) {
            return Err(FlowError::OtherBrowser);
        }
        let record: SignIn = challenges.take(Kind::SignIn, state).await?.ok_or(FlowError::UnknownLink)?;
        if let Some(error) = error {
            return Err(FlowError::Refused(error.chars().take(100).collect()));
        }
        let code = code.ok_or(FlowError::BadCallback("code"))?;
        let id_token =
            self.provider.exchange_id_token(secrets, &record.redirect_uri, code, record.verifier.clone()).await?;
        let user = self.verify(&id_token, &record.nonce).await?;
        if refused(&user) {
            return Err(FlowError::Failed(OAuthError::Provider(
                "the signed-in user id is an API key's user id, which no browser may be".into(),
            )));
        }
        let session = Session {
            user,
            issuer: self.config.issuer.0.clone(),
            expires: now().saturating_add(self.config.session_ttl.as_secs()),
        };
        let plain = serde_json::to_vec(&session).map_err(|e| OAuthError::Setup(e.to_string()))?;
        let sealed = self.sealer.seal(SESSION_CONTEXT, &plain)?;
        Ok(SignedIn {
            session: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed),
            max_age: self.config.session_ttl,
            return_to: record.return_to,
        })
    }

    /// The user a session cookie's value stands for, while it lasts.
    pub(super) fn session_user(&self, cookie: &str) -> Option<String> {
        let sealed = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(cookie.trim()).ok()?;
        let plain = self.sealer.open(SESSION_CONTEXT, &sealed)?;
        let session: Session = serde_json::from_slice(&plain).ok()?;
        (session.expires > now() && session.issuer == self.config.issuer.0).then_some(session.user)
    }

    /// The user id an ID token names, once its signature, issuer, audience,
    /// expiry and nonce are right.
    async fn verify(&self, id_token: &str, nonce: &str) -> Result<String, FlowError> {
        let verifier = self
            .verifier
            .get_or_try_init(|| async {
                let jwks = self.provider.jwks_uri().await?;
                let uri = jwks.parse().map_err(|e| OAuthError::Provider(format!("jwks_uri {jwks:?}: {e}")))?;
                let settings = JwtSettings {
                    hs256: None,
                    jwks: Some((JwksSource::Url(uri), JWKS_REFRESH)),
                    issuer: Some(self.config.issuer.0.clone()),
                    leeway: self.leeway,
                    user_id_claim: self.user_id_claim.clone(),
                };
                JwtVerifier::new(settings).await.map_err(|e| OAuthError::Provider(format!("ID token keys: {e}")))
            })
            .await?;
        let bad = |why: String| FlowError::Failed(OAuthError::Provider(format!("ID token: {why}")));
        let verified = verifier.verify(id_token).map_err(|e| bad(e.to_string()))?;
        let client_id = self.config.client_id.as_str();
        let audience_ok = match verified.claims.get("aud") {
            Some(Value::String(aud)) => aud == client_id,
            Some(Value::Array(list)) => {
                list.iter().any(|a| a.as_str() == Some(client_id))
                    && verified.claims.get("azp").is_none_or(|azp| azp.as_str() == Some(client_id))
            }
            _ => false,
        };
        if !audience_ok {
            return Err(bad("not issued to this gateway (aud)".into()));
        }
        if verified.claims.get("nonce").and_then(Value::as_str) != Some(nonce) {
            return Err(bad("nonce mismatch".into()));
        }
        Ok(verified.user_id)
    }
}
