//! `env:NAME`: secrets from the gateway's environment.

use std::future::Future;

use super::{SecretSource, VaultError};
use crate::secret::SecretString;

/// Reads environment variables at resolve time, so a variable set after
/// startup (or changed by a wrapper) is seen without a restart.
#[derive(Clone, Copy, Debug, Default)]
pub struct EnvSource;

impl EnvSource {
    /// Reads `name` now. A variable that is unset or not valid Unicode is
    /// [`VaultError::EnvMissing`]; an empty one is returned as is.
    pub fn read(&self, name: &str) -> Result<SecretString, VaultError> {
        std::env::var(name)
            .map(SecretString::from)
            .map_err(|_| VaultError::EnvMissing { name: name.to_owned() })
    }
}

impl SecretSource for EnvSource {
    type Key = str;

    fn fetch(&self, name: &str) -> impl Future<Output = Result<SecretString, VaultError>> + Send {
        let result = self.read(name);
        async move { result }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_a_real_variable() {
        std::env::set_var("OTC_TEST_ENV_SOURCE_A", "value-a");
        let v = EnvSource.fetch("OTC_TEST_ENV_SOURCE_A").await.expect("set");
        assert_eq!(v.expose(), "value-a");
    }

    #[tokio::test]
    async fn reads_at_resolve_time() {
        std::env::set_var("OTC_TEST_ENV_SOURCE_B", "one");
        assert_eq!(EnvSource.fetch("OTC_TEST_ENV_SOURCE_B").await.expect("set").expose(), "one");
        std::env::set_var("OTC_TEST_ENV_SOURCE_B", "two");
        assert_eq!(EnvSource.fetch("OTC_TEST_ENV_SOURCE_B").await.expect("set").expose(), "two");
    }

    #[tokio::test]
    async fn a_missing_variable_names_it() {
        let err = EnvSource.fetch("OTC_TEST_ENV_SOURCE_SURELY_UNSET").await.expect_err("unset");
        assert!(
            matches!(&err, VaultError::EnvMissing { name } if name == "OTC_TEST_ENV_SOURCE_SURELY_UNSET")
        );
        assert!(err.to_string().contains("OTC_TEST_ENV_SOURCE_SURELY_UNSET"));
    }

    #[tokio::test]
    async fn the_value_is_kept_whole() {
        // No trimming for env: the value is whatever was exported.
        std::env::set_var("OTC_TEST_ENV_SOURCE_C", " spaced\n");
        assert_eq!(
            EnvSource.fetch("OTC_TEST_ENV_SOURCE_C").await.expect("set").expose(),
            " spaced\n"
        );
    }
}
