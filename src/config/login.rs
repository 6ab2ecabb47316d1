//! `[login]`: browsers sign in to the gateway with the organisation's
//! OpenID provider, so a connect link completes only in its own user's
//! browser.

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::duration::deserialize_duration;
use super::oauth::{scope_ok, EndpointUrl};
use super::secret_ref::{SecretRef, USER_ID_TEMPLATE};

/// The `[login]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoginConfig {
    /// The OpenID provider's issuer identifier: its discovery document
    /// names the endpoints and the signing keys, and ID tokens must carry
    /// exactly this `iss`.
    pub issuer: EndpointUrl,
    /// The gateway's client id there (ID tokens must name it in `aud`).
    pub client_id: String,
    /// The client secret, as a secret reference (optional: a public client
    /// with PKCE alone works too).
    #[serde(default)]
    pub client_secret: Option<Spanned<SecretRef>>,
    /// The scopes asked for at sign-in (default `["openid"]`; `openid` is
    /// always asked).
    #[serde(default = "default_scopes")]
    pub scopes: Vec<String>,
    /// The ID token claim whose string value is the user id. Default: `[auth]
    /// user_id_claim`, so a signed-in browser is the user a JWT names.
    #[serde(default)]
    pub user_id_claim: Option<String>,
    /// How long a sign-in lasts (default 12 hours).
    #[serde(default = "default_session_ttl", deserialize_with = "deserialize_duration")]
    pub session_ttl: Duration,
}

fn default_scopes() -> Vec<String> {
    vec!["openid".to_owned()]
}

fn default_session_ttl() -> Duration {
    Duration::from_secs(12 * 3600)
}

impl LoginConfig {
    /// The rules that span this section's fields; `Err` names the key.
    pub(super) fn check(&self) -> Result<(), String> {
        if self.client_id.is_empty() {
            return Err("login.client_id: must not be empty".into());
        }
        if let Some(scope) = self.scopes.iter().find(|s| !scope_ok(s)) {
            return Err(format!("login.scopes: {scope:?} is not a scope (RFC 6749 3.3)"));
        }
        if self.user_id_claim.as_deref() == Some("") {
            return Err("login.user_id_claim: must not be empty".into());
        }
        if self.session_ttl.is_zero() {
            return Err("login.session_ttl: must be greater than zero".into());
        }
        if self.client_secret.as_ref().is_some_and(|s| s.get_ref().uses_user_id()) {
            return Err(format!("login.client_secret: cannot depend on {USER_ID_TEMPLATE}"));
        }
        Ok(())
    }

    /// The scopes asked for: the configured ones, `openid` first and once.
    pub fn scopes_asked(&self) -> Vec<String> {
        let mut scopes = vec!["openid".to_owned()];
        scopes.extend(self.scopes.iter().filter(|s| *s != "openid").cloned());
        scopes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_checks() {
        let login: LoginConfig =
            toml::from_str("issuer = \"https://id.example.com\"\nclient_id = \"gw\"\n").expect("minimal");
        assert_eq!(login.scopes, ["openid"]);
        assert_eq!(login.session_ttl, Duration::from_secs(43_200));
        assert_eq!(login.user_id_claim, None);
        assert!(login.check().is_ok());
        let login: LoginConfig = toml::from_str(
            "issuer = \"https://id.example.com\"\nclient_id = \"gw\"\nscopes = [\"email\"]\nsession_ttl = \"1h\"\n",
        )
        .expect("full");
        assert_eq!(login.scopes_asked(), ["openid", "email"]);
        for bad in [
            "issuer = \"ftp://x\"\nclient_id = \"gw\"\n",
            "issuer = \"https://x\"\n",
            "issuer = \"https://x\"\nclient_id = \"gw\"\nextra = 1\n",
        ] {
            assert!(toml::from_str::<LoginConfig>(bad).is_err(), "{bad}");
        }
        for bad in [
            "issuer = \"https://x\"\nclient_id = \"\"\n",
            "issuer = \"https://x\"\nclient_id = \"gw\"\nscopes = [\"a b\"]\n",
            "issuer = \"https://x\"\nclient_id = \"gw\"\nsession_ttl = \"0s\"\n",
            "issuer = \"https://x\"\nclient_id = \"gw\"\nuser_id_claim = \"\"\n",
        ] {
            let login: LoginConfig = toml::from_str(bad).expect("parses");
            assert!(login.check().is_err(), "{bad}");
        }
    }
}
