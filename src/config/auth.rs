//! `[auth]`: how clients of the gateway authenticate.

use std::time::Duration;

use serde::Deserialize;

use super::duration::deserialize_duration;
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
