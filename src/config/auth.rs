//! `[auth]`: how clients of the gateway authenticate.

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::duration::deserialize_duration;
use super::oauth::scope_ok;
use super::secret_ref::SecretRef;

/// Whether clients must authenticate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// Everyone may call; API keys, if presented, identify the caller.
    #[default]
    None,
    /// Every request needs a valid JWT or API key.
    Jwt,
}

/// One API key for a service client.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKeyConfig {
    /// Where the key is (a secret reference, without `{user_id}`).
    pub key: SecretRef,
    /// The user id a caller presenting this key gets.
    pub user_id: String,
}

/// The `[auth]` section.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// `"none"` (default): no authentication required; `"jwt"`: every
    /// request needs a valid JWT or API key.
    #[serde(default)]
    pub mode: AuthMode,
    /// Shared secret for HS256 tokens (a secret reference). HS256 is accepted
    /// only when this is set.
    #[serde(default)]
    pub hs256_secret: Option<SecretRef>,
    /// Public keys for RS256/RS384/RS512/PS256/PS384/PS512/ES256/ES384
    /// tokens: `"file:/path/jwks.json"` or an `http(s)://` URL, reloaded
    /// every `jwks_refresh` (and sooner when a token names an unknown key).
    #[serde(default)]
    pub jwks: Option<String>,
    /// How often the JWKS is reloaded (a duration string; default `"5m"`).
    #[serde(default = "default_jwks_refresh", deserialize_with = "deserialize_duration")]
    pub jwks_refresh: Duration,
    /// Required `iss` claim, checked when set.
    #[serde(default)]
    pub issuer: Option<String>,
    /// Required `aud` claim (one of the token's audiences), checked when set.
    #[serde(default)]
    pub audience: Option<String>,
    /// The claim whose (string) value is the caller's user id (default
    /// `"sub"`); a token without it is refused.
    #[serde(default = "default_user_id_claim")]
    pub user_id_claim: String,
    /// API keys for service clients, each with the user id it stands for.
    #[serde(default)]
    pub api_keys: Vec<ApiKeyConfig>,
    /// Clock skew tolerated on `exp` and `nbf` (a duration string; default
    /// `"30s"`).
    #[serde(default = "default_leeway", deserialize_with = "deserialize_duration")]
    pub leeway: Duration,
    /// The gateway's resource identifier as an OAuth protected resource
    /// (RFC 8707, RFC 9728): what a token for `/mcp` must name in `aud`.
    /// Default: `<server.public_url>/mcp`. Set it when clients reach the
    /// gateway at another URL (behind a proxy that rewrites paths).
    #[serde(default)]
    pub resource: Option<Spanned<HttpUrl>>,
    /// The authorization servers (issuer identifiers) the protected resource
    /// metadata names. Default: `[issuer]` when `issuer` is an http(s) URL.
    #[serde(default)]
    pub authorization_servers: Option<Spanned<Vec<HttpUrl>>>,
    /// Scopes the protected resource metadata advertises (advice to
    /// clients; the gateway checks none).
    #[serde(default)]
    pub scopes_supported: Option<Spanned<Vec<ScopeToken>>>,
}

impl AuthConfig {
    /// The authorization servers the metadata names: `authorization_servers`,
    /// else `issuer` when it is an http(s) URL (a token's `iss` need not be
    /// one; only a URL is an authorization server clients can discover).
    pub fn authorization_servers(&self) -> Vec<String> {
        match &self.authorization_servers {
            Some(list) => list.get_ref().iter().map(|u| u.0.clone()).collect(),
            None => self.issuer.iter().filter(|i| HttpUrl::check(i).is_ok()).cloned().collect(),
        }
    }

    /// The keys only `mode = "jwt"` uses, set while it is not: the name and
    /// where it is, for `Config::validate`.
    pub(super) fn resource_keys_without_jwt(&self) -> Option<(&'static str, usize)> {
        if self.mode == AuthMode::Jwt {
            return None;
        }
        let resource = self.resource.as_ref().map(|s| ("resource", s.span().start));
        let servers = self.authorization_servers.as_ref().map(|s| ("authorization_servers", s.span().start));
        let scopes = self.scopes_supported.as_ref().map(|s| ("scopes_supported", s.span().start));
        resource.or(servers).or(scopes)
    }
}

/// An absolute `http://` or `https://` URL with a host, and without
/// userinfo, query, fragment, white space, `"` or `\` (so it can be quoted in
/// a `WWW-Authenticate` parameter as it is). Kept as written: an issuer
/// identifier is compared character by character by clients.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpUrl(pub String);

impl HttpUrl {
    /// Why `text` is not such a URL, if it is not.
    pub(crate) fn check(text: &str) -> Result<(), String> {
        let uri: http::Uri = text.parse().map_err(|e| format!("{text:?} is not a URL: {e}"))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none_or(str::is_empty) {
            return Err(format!("{text:?} must be an http:// or https:// URL with a host"));
        }
        // (`http::Uri` drops a fragment silently and takes `"`.)
        if text.contains(['#', '"', '\\']) || uri.query().is_some() {
            return Err(format!("{text:?} must have no query or fragment"));
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(format!("{text:?} must have no user name or password"));
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        HttpUrl::check(&text).map_err(D::Error::custom)?;
        Ok(HttpUrl(text))
    }
}

/// An OAuth scope token (RFC 6749 section 3.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScopeToken(pub String);

impl<'de> Deserialize<'de> for ScopeToken {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if !scope_ok(&text) {
            return Err(D::Error::custom(format!("{text:?} is not a scope (RFC 6749 3.3)")));
        }
        Ok(ScopeToken(text))
    }
}

fn default_user_id_claim() -> String {
    "sub".to_owned()
}

fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

fn default_jwks_refresh() -> Duration {
    Duration::from_secs(300)
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::None,
            hs256_secret: None,
            jwks: None,
            jwks_refresh: default_jwks_refresh(),
            issuer: None,
            audience: None,
            user_id_claim: default_user_id_claim(),
            api_keys: Vec::new(),
            leeway: default_leeway(),
            resource: None,
            authorization_servers: None,
            scopes_supported: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_strictness() {
        let c: AuthConfig = toml::from_str("").expect("empty");
        assert_eq!(c.mode, AuthMode::None);
        assert_eq!(c.user_id_claim, "sub");
        assert_eq!(c.leeway, Duration::from_secs(30));
        assert_eq!(c.jwks_refresh, Duration::from_secs(300));
        assert!(c.api_keys.is_empty());

        let c: AuthConfig = toml::from_str(
            r#"
mode = "jwt"
hs256_secret = "env:GATEWAY_JWT_SECRET"
jwks = "https://issuer/.well-known/jwks.json"
issuer = "https://auth.example.com"
audience = "otc-gateway"
user_id_claim = "email"
leeway = "5s"
api_keys = [{ key = "env:SVC_REPORTS_KEY", user_id = "svc-reports" }]
"#,
        )
        .expect("contract example");
        assert_eq!(c.mode, AuthMode::Jwt);
        assert_eq!(c.hs256_secret, Some(SecretRef::Env { name: "GATEWAY_JWT_SECRET".into() }));
        assert_eq!(c.user_id_claim, "email");
        assert_eq!(c.leeway, Duration::from_secs(5));
        assert_eq!(c.api_keys[0].user_id, "svc-reports");

        for bad in [
            "mode = \"oauth\"",
            "secret = \"env:X\"",
            "api_keys = [{ key = \"env:X\", user = \"a\" }]",
            "hs256_secret = \"hunter2\"",
            "leeway = \"a while\"",
        ] {
            assert!(toml::from_str::<AuthConfig>(bad).is_err(), "{bad}");
        }
    }
}
