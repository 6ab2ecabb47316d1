//! `[vault]`: the HashiCorp Vault or OpenBao server `vault:` references are
//! read from.

use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::duration::deserialize_duration;
use super::secret_ref::{SecretRef, USER_ID_TEMPLATE};

/// The `[vault]` section: a HashiCorp Vault or OpenBao server with KV v2.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VaultConfig {
    /// Base URL of the server, e.g. `http://127.0.0.1:8200` (http or https;
    /// `/v1/...` is appended).
    pub address: String,
    /// The Vault token, itself a secret reference: `env:` or `file:` only
    /// (a `vault:` token would need a token to read it), without
    /// `{user_id}`. Re-read on every fetch so rotated tokens are picked up.
    #[serde(deserialize_with = "deserialize_token_ref")]
    pub token: SecretRef,
    /// How long a fetched secret is served without asking the vault again
    /// (a duration string such as `"60s"`; default 60s). Expired values are
    /// still served while the vault is unreachable.
    #[serde(default = "default_cache_ttl", deserialize_with = "deserialize_duration")]
    pub cache_ttl: Duration,
    /// Vault Enterprise / OpenBao namespace, sent as `X-Vault-Namespace`.
    #[serde(default)]
    pub namespace: Option<String>,
    /// The longest one request to the vault may take (default `"2s"`): a
    /// value never fetched is an error after this, never a hang.
    #[serde(default = "default_vault_timeout", deserialize_with = "deserialize_duration")]
    pub timeout: Duration,
}

fn default_vault_timeout() -> Duration {
    Duration::from_secs(2)
}

fn default_cache_ttl() -> Duration {
    Duration::from_secs(60)
}

impl VaultConfig {
    /// A config with the default cache TTL.
    pub fn new(address: impl Into<String>, token: SecretRef) -> Self {
        Self {
            address: address.into(),
            token,
            cache_ttl: default_cache_ttl(),
            namespace: None,
            timeout: default_vault_timeout(),
        }
    }
}

/// Checks that a reference may serve as the Vault token.
pub fn check_token_ref(r: &SecretRef) -> Result<(), String> {
    if matches!(r, SecretRef::Vault { .. }) {
        return Err(format!("the vault token must be an env: or file: reference, not {r}"));
    }
    if r.uses_user_id() {
        return Err(format!("the vault token reference {r} cannot depend on {USER_ID_TEMPLATE}"));
    }
    Ok(())
}

fn deserialize_token_ref<'de, D: Deserializer<'de>>(d: D) -> Result<SecretRef, D::Error> {
    let r = SecretRef::deserialize(d)?;
    check_token_ref(&r).map_err(serde::de::Error::custom)?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vault_config() {
        let c: VaultConfig =
            toml::from_str("address = \"http://127.0.0.1:8200\"\ntoken = \"env:VAULT_TOKEN\"\ncache_ttl = \"5m\"\n")
                .expect("valid");
        assert_eq!(c.cache_ttl, Duration::from_secs(300));
        assert_eq!(c.token, SecretRef::Env { name: "VAULT_TOKEN".into() });
        let c: VaultConfig = toml::from_str("address = \"http://v\"\ntoken = \"file:/t\"\n").expect("valid");
        assert_eq!(c.cache_ttl, Duration::from_secs(60));
        assert_eq!(c.namespace, None);

        let err = toml::from_str::<VaultConfig>("address = \"http://v\"\ntoken = \"vault:secret/t#token\"\n")
            .expect_err("vault: token refused")
            .to_string();
        assert!(err.contains("env: or file:"), "{err}");
        let err = toml::from_str::<VaultConfig>("address = \"http://v\"\ntoken = \"env:T_{user_id}\"\n")
            .expect_err("template refused")
            .to_string();
        assert!(err.contains("{user_id}"), "{err}");
        let err = toml::from_str::<VaultConfig>("address = \"http://v\"\ntoken = \"env:T\"\ncache_ttl = \"soon\"\n")
            .expect_err("bad duration")
            .to_string();
        assert!(err.contains("invalid duration"), "{err}");
        assert!(toml::from_str::<VaultConfig>("address = \"http://v\"\ntoken = \"env:T\"\nttl = \"1s\"\n").is_err());
    }
}
