//! `env:NAME`: secrets from the gateway's environment.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::{SecretSource, VaultError};
use crate::secret::SecretString;

/// Reads `env:` references from a snapshot of the gateway's environment,
/// taken when the source is made (with the secret resolver, at start).
///
/// A running process's environment cannot be changed from outside it (a
/// wrapper or an orchestrator sets it before the process starts), so the
/// snapshot holds what a read at each call would find, without what
/// `std::env::var` costs each time: a lock, a scan of the whole
/// environment and a copy, on every call
/// (benches/HISTORY.md, "Figures behind the code").
#[derive(Clone, Default)]
pub struct EnvSource {
    vars: Arc<HashMap<String, SecretString, foldhash::fast::RandomState>>,
}

impl EnvSource {
    /// The environment as it is now. Variables whose name or value is not
    /// valid Unicode are left out, as `std::env::var` refuses them.
    pub fn snapshot() -> EnvSource {
        let vars = std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, SecretString::from(value.into_string().ok()?))))
            .collect();
        EnvSource { vars: Arc::new(vars) }
    }

    /// `name`'s value in the snapshot. A variable that was unset (or not
    /// valid Unicode) is [`VaultError::EnvMissing`]; an empty one is
    /// returned as is.
    pub fn read(&self, name: &str) -> Result<SecretString, VaultError> {
        self.vars.get(name).cloned().ok_or_else(|| VaultError::EnvMissing { name: name.to_owned() })
    }
}

impl fmt::Debug for EnvSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A count only: the names are nobody's business, the values secrets.
        f.debug_struct("EnvSource").field("variables", &self.vars.len()).finish()
    }
}

impl SecretSource for EnvSource {
    type Key = str;

    fn fetch(&self, name: &str) -> impl Future<Output = Result<SecretString, VaultError>> + Send {
        let result = self.read(name);
        async move { result }
    }
}

/// Reads `name` from the environment now, for what is read once per vault
/// request rather than per call (the vault token). Errors as
/// [`EnvSource::read`].
pub fn read_now(name: &str) -> Result<SecretString, VaultError> {
    std::env::var(name).map(SecretString::from).map_err(|_| VaultError::EnvMissing { name: name.to_owned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn reads_a_real_variable() {
        std::env::set_var("OTC_TEST_ENV_SOURCE_A", "value-a");
        let v = EnvSource::snapshot().fetch("OTC_TEST_ENV_SOURCE_A").await.expect("set");
        assert_eq!(v.expose(), "value-a");
    }

    #[tokio::test]
    async fn a_snapshot_keeps_the_values_it_was_made_with() {
        std::env::set_var("OTC_TEST_ENV_SOURCE_B", "one");
        let first = EnvSource::snapshot();
        std::env::set_var("OTC_TEST_ENV_SOURCE_B", "two");
        assert_eq!(first.fetch("OTC_TEST_ENV_SOURCE_B").await.expect("set").expose(), "one");
        assert_eq!(EnvSource::snapshot().fetch("OTC_TEST_ENV_SOURCE_B").await.expect("set").expose(), "two");
        assert_eq!(read_now("OTC_TEST_ENV_SOURCE_B").expect("set").expose(), "two");
    }

    #[tokio::test]
    async fn a_missing_variable_names_it() {
        let err = EnvSource::snapshot().fetch("OTC_TEST_ENV_SOURCE_SURELY_UNSET").await.expect_err("unset");
        assert!(matches!(&err, VaultError::EnvMissing { name } if name == "OTC_TEST_ENV_SOURCE_SURELY_UNSET"));
        assert!(err.to_string().contains("OTC_TEST_ENV_SOURCE_SURELY_UNSET"));
        assert!(matches!(read_now("OTC_TEST_ENV_SOURCE_SURELY_UNSET"), Err(VaultError::EnvMissing { .. })));
    }

    #[tokio::test]
    async fn the_value_is_kept_whole() {
        // No trimming for env: the value is whatever was exported.
        std::env::set_var("OTC_TEST_ENV_SOURCE_C", " spaced\n");
        assert_eq!(EnvSource::snapshot().fetch("OTC_TEST_ENV_SOURCE_C").await.expect("set").expose(), " spaced\n");
    }

    #[test]
    fn debug_shows_no_name_or_value() {
        std::env::set_var("OTC_TEST_ENV_SOURCE_D", "s3cr3t-value");
        let shown = format!("{:?}", EnvSource::snapshot());
        assert!(!shown.contains("s3cr3t-value") && !shown.contains("OTC_TEST_ENV_SOURCE_D"), "{shown}");
    }
}
