//! `[authorization.<provider>]` and `[state]`: where each provider's per-user
//! token comes from, and where the gateway keeps what it must remember.
//!
//! A provider section takes one of two forms. Managed (`client_id` set): the
//! gateway is the OAuth client, runs the authorization code flow and keeps
//! and refreshes each user's grant. Read-only (`token` set): something else
//! keeps the tokens fresh and the gateway only reads them.

use std::path::PathBuf;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::duration::deserialize_duration;
use super::secret_ref::{SecretRef, USER_ID_TEMPLATE};

/// One `[authorization.<provider>]` section.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorizationProvider {
    /// Read-only form: the reference of the calling user's token;
    /// `{user_id}` is replaced by the authenticated caller's id.
    #[serde(default)]
    pub token: Option<Spanned<SecretRef>>,
    /// Read-only form: where a user without a token can authorize (sent back
    /// in `missing_requirements.authorization[].url`); may contain `{user_id}`.
    #[serde(default)]
    pub authorize_url: Option<String>,
    /// Managed form: the OpenID Connect issuer whose discovery document
    /// (`/.well-known/openid-configuration`) names the endpoints.
    #[serde(default)]
    pub issuer: Option<EndpointUrl>,
    /// Managed form without `issuer`: the authorization endpoint.
    #[serde(default)]
    pub authorize_endpoint: Option<EndpointUrl>,
    /// Managed form without `issuer`: the token endpoint.
    #[serde(default)]
    pub token_endpoint: Option<EndpointUrl>,
    /// Managed form, optional: the RFC 7009 revocation endpoint (from
    /// discovery when `issuer` is set and this is not).
    #[serde(default)]
    pub revocation_endpoint: Option<EndpointUrl>,
    /// Managed form: the gateway's client id at the provider.
    #[serde(default)]
    pub client_id: Option<String>,
    /// Managed form: the client secret, as a secret reference (sent with
    /// HTTP Basic authentication to the token and revocation endpoints).
    #[serde(default)]
    pub client_secret: Option<Spanned<SecretRef>>,
    /// Managed form: scopes always asked for; each tool's
    /// `requirements.authorization[].oauth2.scopes` are added.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// Managed form, optional: extra query parameters of the authorization
    /// request, e.g. Google's `{ access_type = "offline", prompt = "consent" }`
    /// (without which Google issues no refresh token). The flow's own
    /// parameters cannot be overridden.
    #[serde(default)]
    pub authorize_params: std::collections::BTreeMap<String, String>,
    /// Managed form, optional: `vault:MOUNT/PATH` with `{user_id}` in the
    /// path, where each user's grant is kept (KV v2, written with
    /// check-and-set). Default: the embedded store under `[state] dir`.
    #[serde(default)]
    pub store: Option<Spanned<GrantStoreRef>>,
    /// How long a challenge's link may be opened, and then how long the
    /// flow it starts may take (default 10 minutes).
    #[serde(default = "default_link_ttl", deserialize_with = "deserialize_duration")]
    pub link_ttl: Duration,
    /// A token expiring within this margin is refreshed before it is
    /// injected (default 60 seconds).
    #[serde(default = "default_refresh_margin", deserialize_with = "deserialize_duration")]
    pub refresh_margin: Duration,
    /// Managed form: how the gateway proves that the browser finishing a
    /// flow belongs to the user the link was made for. Default: `login`
    /// when `[login]` exists; otherwise it must be written out.
    #[serde(default)]
    pub user_verification: Option<Spanned<UserVerification>>,
    /// Managed form, with `user_verification = "verifier"`: where the
    /// browser goes after the provider's callback, with `?flow_id=…`; the
    /// application there confirms the flow as its signed-in user.
    #[serde(default)]
    pub verifier_url: Option<EndpointUrl>,
}

/// `[authorization.P] user_verification`: who vouches that the browser
/// finishing a connect flow is the link's user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UserVerification {
    /// The browser is signed in to the gateway through `[login]` as the
    /// link's user.
    Login,
    /// The user's application confirms the flow (`POST /oauth/confirm`)
    /// with the user's own gateway credentials.
    Verifier,
    /// Nobody: whoever opens the link connects their account to the link's
    /// user. Only for trusted single-user setups.
    None,
}

impl UserVerification {
    /// As written in gateway.toml.
    pub fn as_str(self) -> &'static str {
        match self {
            UserVerification::Login => "login",
            UserVerification::Verifier => "verifier",
            UserVerification::None => "none",
        }
    }
}

impl AuthorizationProvider {
    /// Whether the gateway runs the flow for this provider (`client_id` set).
    pub fn is_managed(&self) -> bool {
        self.client_id.is_some()
    }

    /// The rules that span this section's fields; `Err` names the key.
    pub(super) fn check(&self, provider: &str) -> Result<(), String> {
        let key = |k: &str| format!("authorization.{provider}.{k}");
        let managed_keys = [
            ("issuer", self.issuer.is_some()),
            ("authorize_endpoint", self.authorize_endpoint.is_some()),
            ("token_endpoint", self.token_endpoint.is_some()),
            ("revocation_endpoint", self.revocation_endpoint.is_some()),
            ("client_secret", self.client_secret.is_some()),
            ("scopes", !self.scopes.is_empty()),
            ("authorize_params", !self.authorize_params.is_empty()),
            ("store", self.store.is_some()),
            ("user_verification", self.user_verification.is_some()),
            ("verifier_url", self.verifier_url.is_some()),
        ];
        if !provider_name_ok(provider) {
            return Err(format!(
                "authorization.{provider}: a provider name is 1 to 64 of [A-Za-z0-9_-], and not login, confirm or logout (it is part of the /oauth/<provider>/ paths)"
            ));
        }
        match (&self.token, &self.client_id) {
            (Some(_), Some(_)) => Err(format!(
                "authorization.{provider}: set either `token` (read-only) or `client_id` (the gateway runs the OAuth flow), not both"
            )),
            (None, None) => Err(format!(
                "authorization.{provider}: set `client_id` (with `issuer` or `authorize_endpoint` and `token_endpoint`) or `token`"
            )),
            (Some(_), None) => match managed_keys.iter().find(|(_, set)| *set) {
                Some((name, _)) => Err(format!("{}: only with `client_id` (the managed form)", key(name))),
                None => Ok(()),
            },
            (None, Some(id)) => {
                if id.is_empty() {
                    return Err(format!("{}: must not be empty", key("client_id")));
                }
                if self.authorize_url.is_some() {
                    return Err(format!(
                        "{}: only in the read-only form; the managed form makes its own links",
                        key("authorize_url")
                    ));
                }
                if self.issuer.is_none() && (self.authorize_endpoint.is_none() || self.token_endpoint.is_none()) {
                    return Err(format!(
                        "authorization.{provider}: needs `issuer` (OpenID Connect discovery) or both `authorize_endpoint` and `token_endpoint`"
                    ));
                }
                if let Some(secret) = &self.client_secret {
                    if secret.get_ref().uses_user_id() {
                        return Err(format!("{}: cannot depend on {USER_ID_TEMPLATE}", key("client_secret")));
                    }
                }
                if let Some(scope) = self.scopes.iter().find(|s| !scope_ok(s)) {
                    return Err(format!("{}: {scope:?} is not a scope (RFC 6749 3.3)", key("scopes")));
                }
                const OWN: [&str; 7] =
                    ["response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method"];
                if let Some(name) = self.authorize_params.keys().find(|k| OWN.contains(&k.as_str())) {
                    return Err(format!("{}: {name:?} is set by the gateway itself", key("authorize_params")));
                }
                if self.link_ttl.is_zero() {
                    return Err(format!("{}: must be greater than zero", key("link_ttl")));
                }
                Ok(())
            }
        }
    }
}

fn default_link_ttl() -> Duration {
    Duration::from_secs(600)
}

fn default_refresh_margin() -> Duration {
    Duration::from_secs(60)
}

/// Names the `/oauth/` endpoints' own paths take (`/oauth/login/callback`,
/// `/oauth/confirm`), which no provider may have.
pub const RESERVED_PROVIDER_NAMES: [&str; 4] = ["login", "confirm", "logout", "approval"];

/// Whether `name` may name a provider: it appears in paths and metrics.
fn provider_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        && !RESERVED_PROVIDER_NAMES.contains(&name)
}

/// Whether `scope` is a scope token: printable ASCII without space, `"` or `\`.
pub fn scope_ok(scope: &str) -> bool {
    !scope.is_empty() && scope.bytes().all(|b| matches!(b, 0x21 | 0x23..=0x5B | 0x5D..=0x7E))
}

/// An endpoint URL of a provider: `http://` or `https://` with a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointUrl(pub String);

impl<'de> Deserialize<'de> for EndpointUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let uri: http::Uri = text.parse().map_err(|e| D::Error::custom(format!("invalid URL {text:?}: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(D::Error::custom(format!("{text:?} must be an http:// or https:// URL with a host")));
        }
        Ok(EndpointUrl(text.trim_end_matches('/').to_owned()))
    }
}

/// `store = "vault:MOUNT/PATH"`: the KV v2 secret holding one user's grant,
/// `{user_id}` in its path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantStoreRef {
    /// The KV v2 mount.
    pub mount: String,
    /// The path under the mount, with `{user_id}`.
    pub path: String,
}

impl std::fmt::Display for GrantStoreRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "vault:{}/{}", self.mount, self.path)
    }
}

impl<'de> Deserialize<'de> for GrantStoreRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let usage = || format!("store {text:?}: expected vault:MOUNT/PATH with {USER_ID_TEMPLATE} in PATH (no #FIELD)");
        let rest = text.strip_prefix("vault:").ok_or_else(|| D::Error::custom(usage()))?;
        let (mount, path) = rest.split_once('/').ok_or_else(|| D::Error::custom(usage()))?;
        if mount.is_empty() || path.is_empty() || path.contains('#') || !path.contains(USER_ID_TEMPLATE) {
            return Err(D::Error::custom(usage()));
        }
        Ok(GrantStoreRef { mount: mount.to_owned(), path: path.to_owned() })
    }
}

/// `[state]`: what the gateway remembers on disk, and the Redis replicas
/// share.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// The Redis a fleet of gateways shares: `redis://[:password@]host:port[/db]`,
    /// or a secret reference (`env:NAME`, `file:/path`) holding that URL.
    /// With it, rate-limit buckets live in Redis, and `[idempotency]` uses it
    /// when it names no store of its own. Absent: each gateway keeps its own.
    pub redis: Option<String>,
    /// The directory of the embedded grant store (`oauth-grants.redb`) and,
    /// without `encryption_key`, of its generated key (`oauth.key`).
    /// Created when missing; only used when a managed provider keeps its
    /// grants in the embedded store.
    pub dir: PathBuf,
    /// The AES-256-GCM key that seals grants at rest: a secret reference to
    /// 32 bytes written as 64 hex digits or base64. Default: a key generated
    /// once in `dir` (mode 0600).
    pub encryption_key: Option<SecretRef>,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig { redis: None, dir: PathBuf::from("state"), encryption_key: None }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(text: &str) -> Result<AuthorizationProvider, String> {
        let section: AuthorizationProvider = toml::from_str(text).map_err(|e| e.to_string())?;
        section.check("p").map(|()| section)
    }

    #[test]
    fn either_form_but_not_both() {
        assert!(section(r#"token = "env:T""#).is_ok());
        let managed = section(
            r#"issuer = "https://id.example"
               client_id = "c"
               client_secret = "env:S"
               scopes = ["openid", "mail.read"]
               store = "vault:secret/oauth/p/{user_id}""#,
        )
        .expect("managed");
        assert!(managed.is_managed());
        assert_eq!(managed.link_ttl, Duration::from_secs(600));
        assert_eq!(managed.refresh_margin, Duration::from_secs(60));
        assert!(section(
            r#"client_id = "c"
                          authorize_endpoint = "https://a.example/auth"
                          token_endpoint = "https://a.example/token""#
        )
        .is_ok());
        for bad in [
            "",
            r#"token = "env:T"
               client_id = "c""#,
            r#"token = "env:T"
               scopes = ["x"]"#,
            r#"client_id = "c""#,
            r#"client_id = "c"
               authorize_endpoint = "https://a.example/auth""#,
            r#"client_id = "c"
               issuer = "ftp://x""#,
            r#"client_id = "c"
               issuer = "https://x"
               scopes = ["has space"]"#,
            r#"client_id = "c"
               issuer = "https://x"
               store = "vault:secret/oauth/p""#,
            r#"client_id = "c"
               issuer = "https://x"
               client_secret = "env:S_{user_id}""#,
            r#"client_id = "c"
               issuer = "https://x"
               authorize_url = "https://x/start""#,
            r#"client_id = "c"
               issuer = "https://x"
               authorize_params = { state = "mine" }"#,
        ] {
            assert!(section(bad).is_err(), "accepted: {bad}");
        }
    }

    #[test]
    fn store_references() {
        let store: GrantStoreRef = toml::from_str::<toml::Value>(r#"s = "vault:kv/a/{user_id}/b""#)
            .expect("toml")
            .get("s")
            .cloned()
            .expect("s")
            .try_into()
            .expect("store");
        assert_eq!(store, GrantStoreRef { mount: "kv".into(), path: "a/{user_id}/b".into() });
        assert_eq!(store.to_string(), "vault:kv/a/{user_id}/b");
    }
}
