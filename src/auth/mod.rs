//! Client authentication at the gateway: the `[auth]` section.
//!
//! Two kinds of credentials, both sent by clients:
//! - JWTs (`mode = "jwt"`), as `Authorization: Bearer <jwt>`, verified with
//!   HS256 from a secret reference and/or RS*/PS*/ES* from a JWKS (see
//!   [`jwt`]); the user id is the `user_id_claim` claim.
//! - API keys for service clients (`api_keys`), as `Authorization: Bearer
//!   <key>` or `OXP-API-Key: <key>`, each standing for a configured user id.
//!
//! `mode = "none"` (the default) lets everyone in: callers are anonymous
//! unless they present a configured API key, which still identifies them
//! (so per-user secrets work without JWTs). In that mode an unknown
//! `OXP-API-Key` is still refused (the client clearly meant to use a key)
//! while an unrecognised `Authorization` header is ignored.
//!
//! [`Authenticator::authenticate_credentials`] runs on every request (the
//! front door, `proxy/front_door.rs`, passes the credential header values
//! either reader found; [`Authenticator::authenticate`] takes a whole
//! `HeaderMap`): it is synchronous,
//! takes no lock (the JWKS sits behind an `ArcSwap`) and allocates little.
//! Turning an [`AuthError`] into `401` + `WWW-Authenticate` is the HTTP
//! layer's job; [`AuthError::public_message`] is what a client may see.
//!
//! In `mode = "jwt"` the gateway is an OAuth protected resource
//! ([`resource`]): its metadata tells MCP clients where to get a token, and
//! the request's [`AudienceRule`] decides what a JWT's `aud` must be: at `/mcp`
//! it must name the gateway's resource identifier, or `audience` when that
//! is set (MCP authorization, RFC 8707); on the OTC routes a token without
//! `aud` is accepted unless `audience` is set (the OTC contract), and a
//! token with one must name the gateway there too.
//!
//! User ids of API keys and of tokens are kept apart: a token whose user id
//! is an API key's user id is refused, so one never stands for the other
//! in grants and policies.

mod api_key;
pub mod jwt;
pub mod resource;

use std::sync::{Arc, OnceLock};

use http::HeaderMap;
use jsonwebtoken::DecodingKey;
use serde_json::Value;

use crate::config::{AuthConfig, AuthMode};
use crate::vault::{SecretResolver, VaultError};
use api_key::ApiKeys;
use jwt::{JwksSource, JwtSettings, JwtVerifier};
pub use resource::ProtectedResource;
use resource::ResourceSettings;

/// The header service clients may send their API key in.
pub const API_KEY_HEADER: http::HeaderName = http::HeaderName::from_static("oxp-api-key");

/// HS256 secrets shorter than this are accepted with a warning (RFC 7518
/// asks for at least the hash size).
const MIN_HS256_SECRET_BYTES: usize = 32;

/// The authenticated caller of one request. Only an authenticated caller
/// has a user: ask [`Caller::authenticated_user`].
#[derive(Clone, Debug, PartialEq)]
pub enum Caller {
    /// No credentials (only in mode `none`).
    Anonymous,
    /// A configured API key, and the user it was configured for.
    ApiKey {
        /// The key's `user_id`.
        user_id: String,
    },
    /// A verified JWT.
    Jwt {
        /// Its `[auth] user_id_claim`.
        user_id: String,
        /// Its claims (for policies).
        claims: Value,
    },
}

impl Caller {
    /// The user the gateway authenticated (by a JWT or an API key); `None`
    /// for an anonymous caller.
    pub fn authenticated_user(&self) -> Option<&str> {
        match self {
            Caller::Anonymous => None,
            Caller::ApiKey { user_id } | Caller::Jwt { user_id, .. } => Some(user_id),
        }
    }

    /// The verified JWT's claims; `Null` for API keys and anonymous callers.
    pub fn claims(&self) -> &Value {
        static NONE: Value = Value::Null;
        match self {
            Caller::Jwt { claims, .. } => claims,
            _ => &NONE,
        }
    }

    /// How the caller was identified: `anonymous`, `api_key` or `jwt`.
    pub fn kind(&self) -> &'static str {
        match self {
            Caller::Anonymous => "anonymous",
            Caller::ApiKey { .. } => "api_key",
            Caller::Jwt { .. } => "jwt",
        }
    }
}

/// Authentication failures (per request) and setup failures (at startup).
/// Messages never contain a token, a key or a secret value.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// No credentials, and the gateway requires them.
    #[error("no credentials presented")]
    Missing,
    /// Credentials that do not verify. The reason is for developer logs.
    #[error("invalid credentials: {0}")]
    Invalid(String),
    /// A JWT past its `exp` (beyond the leeway).
    #[error("token expired")]
    Expired,
    /// A JWT before its `nbf` (beyond the leeway).
    #[error("token not yet valid (nbf)")]
    NotYetValid,
    /// A valid JWT without the user id claim.
    #[error("token has no string claim {claim:?} to take the user id from")]
    MissingUserClaim {
        /// The configured `user_id_claim`.
        claim: String,
    },
    /// `[auth]` is inconsistent.
    #[error("invalid [auth] configuration: {0}")]
    Config(String),
    /// A secret reference of `[auth]` could not be resolved.
    #[error("[auth] {what}: {source}")]
    Secret {
        /// Which setting (`hs256_secret`, `api_keys[0].key`, ...).
        what: String,
        /// Why.
        #[source]
        source: VaultError,
    },
    /// The JWKS could not be loaded at startup.
    #[error("cannot load the JWKS from {location}: {reason}")]
    Jwks {
        /// The `jwks` setting.
        location: String,
        /// Why.
        reason: String,
    },
}

impl AuthError {
    /// What a client may be told (the body's `message`); the detail stays
    /// in [`Display`](std::fmt::Display), for logs.
    pub fn public_message(&self) -> &'static str {
        match self {
            AuthError::Missing => "missing credentials",
            AuthError::Expired => "expired credentials",
            AuthError::Invalid(_) | AuthError::NotYetValid | AuthError::MissingUserClaim { .. } => {
                "invalid credentials"
            }
            AuthError::Config(_) | AuthError::Secret { .. } | AuthError::Jwks { .. } => "authentication unavailable",
        }
    }

    /// The `WWW-Authenticate` value for the 401 (RFC 6750: no error code
    /// when no credentials were sent), naming the protected resource
    /// metadata when there is one (RFC 9728 section 5.1).
    pub fn www_authenticate(&self, resource_metadata: Option<&str>) -> String {
        let mut challenge = String::from(match self {
            AuthError::Missing => "Bearer",
            _ => "Bearer error=\"invalid_token\"",
        });
        if let Some(url) = resource_metadata {
            let separator = if matches!(self, AuthError::Missing) { " " } else { ", " };
            challenge.push_str(separator);
            challenge.push_str("resource_metadata=\"");
            // A quoted-string (RFC 9110 5.6.4); configured URLs have no `"` or `\`.
            for c in url.chars() {
                if matches!(c, '"' | '\\') {
                    challenge.push('\\');
                }
                challenge.push(c);
            }
            challenge.push('"');
        }
        challenge
    }
}

/// The resource a request is for: what its JWT's `aud` must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AudienceRule {
    /// `/mcp`: the gateway as a protected resource. `aud` must name its
    /// resource identifier, or `[auth] audience` when that is set (MCP
    /// authorization, RFC 8707): a token for another resource never works.
    Mcp,
    /// The OTC routes (`/tools`, `/tools/call`, a caller's `/oauth` steps):
    /// a token without `aud` is accepted unless `[auth] audience` is set
    /// (the contract's "checked when set"); one with `aud` must name
    /// `audience` or the resource identifier, as at `/mcp`.
    Otc,
}

/// Authenticates requests; build once at startup (or on reload) with
/// [`Authenticator::new`].
pub struct Authenticator {
    mode: AuthMode,
    api_keys: ApiKeys,
    jwt: Option<JwtVerifier>,
    /// `[auth] audience`.
    audience: Option<String>,
    /// What the protected resource is made from; `None` but in mode `jwt`.
    resource_settings: Option<ResourceSettings>,
    /// The protected resource, fixed on first use (it may depend on the
    /// bound address).
    resource: OnceLock<ProtectedResource>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("mode", &self.mode)
            .field("api_keys", &self.api_keys)
            .field("jwt", &self.jwt)
            .field("audience", &self.audience)
            .field("resource", &self.resource.get().map(ProtectedResource::resource))
            .finish()
    }
}

impl Authenticator {
    /// Resolves the secrets `[auth]` refers to, loads the JWKS and starts
    /// its refresh task (so it must run inside a Tokio runtime).
    pub async fn new(cfg: &AuthConfig, secrets: &SecretResolver) -> Result<Self, AuthError> {
        let mut keys = Vec::with_capacity(cfg.api_keys.len());
        for (i, k) in cfg.api_keys.iter().enumerate() {
            let what = format!("api_keys[{i}].key ({})", k.key);
            if k.key.uses_user_id() {
                return Err(AuthError::Config(format!("{what} cannot depend on {{user_id}}")));
            }
            let value = secrets.resolve(&k.key, None).await.map_err(|source| AuthError::Secret { what, source })?;
            keys.push((value, k.user_id.clone()));
        }
        let api_keys = ApiKeys::new(keys).map_err(AuthError::Config)?;

        let wants_jwt = cfg.hs256_secret.is_some() || cfg.jwks.is_some();
        let jwt = match cfg.mode {
            AuthMode::None => {
                if wants_jwt {
                    return Err(AuthError::Config(
                        "hs256_secret or jwks is set but mode is \"none\"; set mode = \"jwt\" to check tokens".into(),
                    ));
                }
                None
            }
            AuthMode::Jwt => {
                if !wants_jwt && api_keys.is_empty() {
                    return Err(AuthError::Config("mode = \"jwt\" needs hs256_secret, jwks or api_keys".into()));
                }
                if cfg.user_id_claim.is_empty() {
                    return Err(AuthError::Config("user_id_claim is empty".into()));
                }
                if wants_jwt {
                    Some(JwtVerifier::new(jwt_settings(cfg, secrets).await?).await?)
                } else {
                    None
                }
            }
        };
        let resource_settings = (cfg.mode == AuthMode::Jwt).then(|| ResourceSettings {
            resource: cfg.resource.as_ref().map(|r| r.get_ref().0.clone()),
            authorization_servers: cfg.authorization_servers(),
            scopes_supported: cfg.scopes_supported.as_ref().map(|s| s.get_ref().iter().map(|s| s.0.clone()).collect()),
        });
        if resource_settings.as_ref().is_some_and(|s| s.authorization_servers.is_empty()) {
            tracing::warn!(
                "[auth] names no authorization server (authorization_servers, or an http(s) issuer): \
                 MCP clients cannot discover where to get a token"
            );
        }
        Ok(Self {
            mode: cfg.mode,
            api_keys,
            jwt,
            audience: cfg.audience.clone(),
            resource_settings,
            resource: OnceLock::new(),
        })
    }

    /// The configured mode.
    pub fn mode(&self) -> AuthMode {
        self.mode
    }

    /// The gateway as a protected resource (mode `jwt` only): made on first
    /// use, its identifier defaulting to `public_url()` + `/mcp`.
    pub fn protected_resource(&self, public_url: impl FnOnce() -> String) -> Option<&ProtectedResource> {
        let settings = self.resource_settings.as_ref()?;
        Some(self.resource.get_or_init(|| ProtectedResource::new(settings, &public_url())))
    }

    /// The URL of the protected resource metadata, which a 401 names (mode
    /// `jwt` only; see [`Self::protected_resource`]).
    pub fn resource_metadata_url(&self, public_url: impl FnOnce() -> String) -> Option<Arc<str>> {
        self.protected_resource(public_url).map(|r| r.metadata_url().clone())
    }

    /// Identifies the caller of one request for `target` from its headers;
    /// `public_url` is the gateway's (see [`Self::protected_resource`]).
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        target: AudienceRule,
        public_url: impl FnOnce() -> String,
    ) -> Result<Caller, AuthError> {
        self.authenticate_credentials(Credentials::from_headers(headers)?, target, public_url)
    }

    /// Identifies the caller of one request for `target` from the
    /// credentials it carries; `public_url` is the gateway's (see
    /// [`Self::protected_resource`]).
    pub fn authenticate_credentials(
        &self,
        credentials: Credentials<'_>,
        target: AudienceRule,
        public_url: impl FnOnce() -> String,
    ) -> Result<Caller, AuthError> {
        if let Some(value) = credentials.api_key {
            let key = visible_ascii(value)
                .ok_or_else(|| AuthError::Invalid("OXP-API-Key is not visible ASCII".into()))?
                .trim();
            return match self.api_keys.lookup(key) {
                Some(user) => Ok(Caller::ApiKey { user_id: user.to_owned() }),
                None => Err(AuthError::Invalid("unknown API key".into())),
            };
        }
        let Some(value) = credentials.authorization else {
            return match self.mode {
                AuthMode::None => Ok(Caller::Anonymous),
                AuthMode::Jwt => Err(AuthError::Missing),
            };
        };
        let bearer = visible_ascii(value).and_then(bearer_token);
        let Some(token) = bearer else {
            return match self.mode {
                AuthMode::None => Ok(Caller::Anonymous),
                AuthMode::Jwt => Err(AuthError::Invalid("Authorization is not \"Bearer <token>\"".into())),
            };
        };
        if let Some(user) = self.api_keys.lookup(token) {
            return Ok(Caller::ApiKey { user_id: user.to_owned() });
        }
        match (&self.jwt, self.mode) {
            (Some(verifier), _) => {
                let v = verifier.verify(token)?;
                self.check_audience(&v.claims, target, public_url)?;
                self.check_user_namespace(&v.user_id)?;
                Ok(Caller::Jwt { user_id: v.user_id, claims: v.claims })
            }
            (None, AuthMode::Jwt) => Err(AuthError::Invalid("unknown API key".into())),
            (None, AuthMode::None) => Ok(Caller::Anonymous),
        }
    }
}

impl Authenticator {
    /// Refuses a user id from a token (or a browser's sign-in) that an API
    /// key stands for: grants and policies are keyed by user id, and a
    /// token naming `svc-reports` must not become the service client.
    pub fn check_user_namespace(&self, user_id: &str) -> Result<(), AuthError> {
        if self.api_keys.has_user(user_id) {
            return Err(AuthError::Invalid("the token's user id is an API key's user id".into()));
        }
        Ok(())
    }

    /// Whether verified `claims` are for the gateway, as `target` requires
    /// (see [`AudienceRule`]). The reasons name the check, never the audiences.
    fn check_audience(
        &self,
        claims: &Value,
        target: AudienceRule,
        public_url: impl FnOnce() -> String,
    ) -> Result<(), AuthError> {
        let Some(aud) = claims.get("aud").filter(|aud| !aud.is_null()) else {
            // The OTC contract: `aud` is required there only when
            // `audience` is set.
            if target == AudienceRule::Otc && self.audience.is_none() {
                return Ok(());
            }
            return Err(AuthError::Invalid("missing required claim \"aud\"".into()));
        };
        let resource = self.protected_resource(public_url);
        let ours = |aud: &str| self.audience.as_deref() == Some(aud) || resource.is_some_and(|r| r.is_named_by(aud));
        let wrong_type = || AuthError::Invalid("claim \"aud\" has the wrong type".into());
        // RFC 7519 4.1.3: one string, or an array of strings; a recipient
        // that none of them names must refuse the token.
        let named = match aud {
            Value::String(aud) => ours(aud),
            Value::Array(list) => {
                let mut named = false;
                for aud in list {
                    named |= ours(aud.as_str().ok_or_else(wrong_type)?);
                }
                named
            }
            _ => return Err(wrong_type()),
        };
        if named {
            Ok(())
        } else {
            Err(AuthError::Invalid("audience mismatch".into()))
        }
    }
}

/// What a request presents to identify its caller: the values of its
/// `OXP-API-Key` and `Authorization` headers. Read by either HTTP reader.
#[derive(Debug, Clone, Copy, Default)]
pub struct Credentials<'a> {
    /// The `OXP-API-Key` header's value.
    pub api_key: Option<&'a [u8]>,
    /// The `Authorization` header's value.
    pub authorization: Option<&'a [u8]>,
}

impl<'a> Credentials<'a> {
    /// The credentials in `headers`; each header may appear once.
    pub fn from_headers(headers: &'a HeaderMap) -> Result<Credentials<'a>, AuthError> {
        Ok(Credentials {
            api_key: single(headers, &API_KEY_HEADER)?.map(http::HeaderValue::as_bytes),
            authorization: single(headers, &http::header::AUTHORIZATION)?.map(http::HeaderValue::as_bytes),
        })
    }
}

/// A header value as text when it is all visible ASCII (and tabs), as
/// `HeaderValue::to_str` has it.
fn visible_ascii(value: &[u8]) -> Option<&str> {
    if value.iter().all(|&b| (0x20..0x7f).contains(&b) || b == b'\t') {
        std::str::from_utf8(value).ok()
    } else {
        None
    }
}

async fn jwt_settings(cfg: &AuthConfig, secrets: &SecretResolver) -> Result<JwtSettings, AuthError> {
    let hs256 = match &cfg.hs256_secret {
        None => None,
        Some(r) => {
            let what = format!("hs256_secret ({r})");
            if r.uses_user_id() {
                return Err(AuthError::Config(format!("{what} cannot depend on {{user_id}}")));
            }
            let secret =
                secrets.resolve(r, None).await.map_err(|source| AuthError::Secret { what: what.clone(), source })?;
            if secret.is_empty() {
                return Err(AuthError::Config(format!("{what} is empty")));
            }
            if secret.expose().len() < MIN_HS256_SECRET_BYTES {
                tracing::warn!(reference = %r, "hs256_secret is shorter than 32 bytes");
            }
            Some(DecodingKey::from_secret(secret.expose().as_bytes()))
        }
    };
    let jwks = match &cfg.jwks {
        None => None,
        Some(s) => {
            if cfg.jwks_refresh.is_zero() {
                return Err(AuthError::Config("jwks_refresh must be more than zero".into()));
            }
            Some((JwksSource::parse(s)?, cfg.jwks_refresh))
        }
    };
    Ok(JwtSettings {
        hs256,
        jwks,
        issuer: cfg.issuer.clone(),
        leeway: cfg.leeway,
        user_id_claim: cfg.user_id_claim.clone(),
    })
}

/// The header's one value; a repeated credential header is refused rather
/// than guessing which one counts.
fn single<'h>(headers: &'h HeaderMap, name: &http::HeaderName) -> Result<Option<&'h http::HeaderValue>, AuthError> {
    let mut values = headers.get_all(name).iter();
    let first = values.next();
    if values.next().is_some() {
        return Err(AuthError::Invalid(format!("more than one {name} header")));
    }
    Ok(first)
}

/// `Bearer <token>` (scheme case-insensitive, RFC 7235) → the token.
fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, rest) = value.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = rest.trim();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc  "), Some("abc"));
        assert_eq!(bearer_token("BEARER abc"), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
        assert_eq!(bearer_token("abc"), None);
    }

    #[test]
    fn public_messages_and_challenges() {
        assert_eq!(AuthError::Missing.public_message(), "missing credentials");
        assert_eq!(AuthError::Missing.www_authenticate(None), "Bearer");
        let invalid = AuthError::Invalid("bad signature".into());
        assert_eq!(invalid.public_message(), "invalid credentials");
        assert_eq!(invalid.www_authenticate(None), "Bearer error=\"invalid_token\"");
        let at = Some("https://gw.example.com/.well-known/oauth-protected-resource/mcp");
        assert_eq!(
            AuthError::Missing.www_authenticate(at),
            "Bearer resource_metadata=\"https://gw.example.com/.well-known/oauth-protected-resource/mcp\""
        );
        assert_eq!(
            invalid.www_authenticate(at),
            "Bearer error=\"invalid_token\", resource_metadata=\"https://gw.example.com/.well-known/oauth-protected-resource/mcp\""
        );
        assert_eq!(
            AuthError::Missing.www_authenticate(Some("http://a/\"x\\")),
            "Bearer resource_metadata=\"http://a/\\\"x\\\\\""
        );
        assert_eq!(AuthError::Expired.public_message(), "expired credentials");
        assert_eq!(AuthError::MissingUserClaim { claim: "sub".into() }.public_message(), "invalid credentials");
    }
}
