//! Secret references and the sources that resolve them.
//!
//! A secret reference names where a credential lives: `env:NAME`,
//! `file:/path` or `vault:MOUNT/PATH#FIELD` (HashiCorp Vault or OpenBao, KV
//! v2), any of which may contain `{user_id}`, replaced by the calling user's
//! id at resolve time. References are configuration, not secrets: they may be
//! logged and shown in errors. The values they resolve to are
//! [`SecretString`]s and never are.
//!
//! One trait, [`SecretSource`], describes a source of secrets; each backend
//! lives in its own module ([`env`], [`file`], [`kv2`]). [`SecretResolver`]
//! puts them together behind the one call the rest of the gateway makes.

pub mod env;
pub mod file;
pub mod kv2;

use std::borrow::Cow;
use std::future::Future;
use std::time::Duration;

use crate::config::{SecretRef, VaultConfig, USER_ID_TEMPLATE};
use crate::secret::SecretString;

pub use env::EnvSource;
pub use file::FileSource;
pub use kv2::{Kv2Key, Kv2Source};

/// The longest user id substituted into a reference; longer ones are refused
/// so a hostile id cannot build huge paths or URLs.
const MAX_USER_ID_LEN: usize = 256;

/// What went wrong resolving a secret. Messages name the reference (not
/// secret) and never contain a secret value or the Vault token.
#[derive(Debug, thiserror::Error)]
pub enum VaultError {
    /// A `vault:` reference but no `[vault]` section.
    #[error("{reference} needs a [vault] section, and none is configured")]
    NotConfigured {
        /// The reference.
        reference: String,
    },
    /// The environment variable is not set (or not valid Unicode).
    #[error("environment variable {name} is not set")]
    EnvMissing {
        /// The variable's name.
        name: String,
    },
    /// The file could not be read.
    #[error("cannot read secret file {path}: {kind}")]
    FileUnreadable {
        /// The file's path.
        path: String,
        /// Why, without the OS message (which is all we need).
        kind: std::io::ErrorKind,
    },
    /// The file is not UTF-8.
    #[error("secret file {path} is not valid UTF-8")]
    FileNotUtf8 {
        /// The file's path.
        path: String,
    },
    /// The vault could not be reached or answered with a server error, and
    /// no value was ever fetched for this reference.
    #[error("vault unavailable for {reference}: {reason}")]
    Unavailable {
        /// The reference.
        reference: String,
        /// Connection refused, timeout, HTTP 503, ...
        reason: String,
    },
    /// HTTP 403: the token may not read this path (or is invalid).
    #[error("vault denied access to {reference} (HTTP 403: bad token or policy)")]
    Forbidden {
        /// The reference.
        reference: String,
    },
    /// HTTP 404: no such secret (or its latest version is deleted).
    #[error("no secret at {reference} (HTTP 404)")]
    NotFound {
        /// The reference.
        reference: String,
    },
    /// The secret exists but has no such field.
    #[error("secret {reference} has no field {field:?}")]
    MissingField {
        /// The reference.
        reference: String,
        /// The field.
        field: String,
    },
    /// The field holds an object, an array or null rather than a string.
    #[error("field {field:?} of secret {reference} is not a string")]
    FieldNotString {
        /// The reference.
        reference: String,
        /// The field.
        field: String,
    },
    /// The reference contains `{user_id}` but the caller is anonymous.
    #[error("{reference} depends on the calling user, and the caller has no user id")]
    UserIdRequired {
        /// The reference.
        reference: String,
    },
    /// A user id that would escape its place in a path.
    #[error("user id refused for secret lookup: {reason}")]
    BadUserId {
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The Vault token reference itself could not be resolved.
    #[error("the vault token could not be read: {source}")]
    Token {
        /// The underlying failure (env or file).
        #[source]
        source: Box<VaultError>,
    },
    /// The `[vault]` section is unusable (address, token reference).
    #[error("invalid [vault] configuration: {0}")]
    Config(String),
}

impl VaultError {
    /// Whether the failure is transient (the source could not answer) rather
    /// than an authoritative "no". Callers map transient failures to
    /// "unavailable" and the rest to "unmet requirement".
    pub fn is_transient(&self) -> bool {
        matches!(self, VaultError::Unavailable { .. } | VaultError::Token { .. })
    }
}

/// A source of secrets: one implementation per backend.
///
/// `fetch` returns a `Send` future so resolution can run on any tokio runtime
/// thread; the trait avoids `async-trait` boxing because it is only used
/// statically (the resolver holds each backend by type).
pub trait SecretSource: Send + Sync {
    /// What the backend needs to find one value, with `{user_id}` already
    /// substituted.
    type Key: ?Sized + Sync;

    /// Fetches one value.
    fn fetch(&self, key: &Self::Key) -> impl Future<Output = Result<SecretString, VaultError>> + Send;
}

/// What the vault adds to a reference: filling in the caller's user id.
impl SecretRef {
    /// The reference with `{user_id}` replaced. The user id is validated
    /// first: it must not be able to climb out of its path segment or its
    /// field (`/`, `\`, `#`, `..`, `=`, control characters are refused).
    pub fn with_user_id(&self, user_id: Option<&str>) -> Result<Cow<'_, SecretRef>, VaultError> {
        if !self.uses_user_id() {
            return Ok(Cow::Borrowed(self));
        }
        let Some(user_id) = user_id else {
            return Err(VaultError::UserIdRequired { reference: self.to_string() });
        };
        validate_user_id(user_id)?;
        let sub = |s: &str| s.replace(USER_ID_TEMPLATE, user_id);
        Ok(Cow::Owned(match self {
            SecretRef::Env { name } => SecretRef::Env { name: sub(name) },
            SecretRef::File { path } => SecretRef::File { path: sub(path) },
            SecretRef::Vault { mount, path, field } => {
                SecretRef::Vault { mount: sub(mount), path: sub(path), field: sub(field) }
            }
        }))
    }
}

/// Refuses user ids that could change which secret a reference names:
/// path separators, the field separator, parent-directory steps, `=` (which
/// would end an environment variable name) and control characters.
fn validate_user_id(user_id: &str) -> Result<(), VaultError> {
    let reason = if user_id.is_empty() {
        "empty"
    } else if user_id.len() > MAX_USER_ID_LEN {
        "longer than 256 bytes"
    } else if user_id.contains(['/', '\\']) {
        "contains a path separator"
    } else if user_id.contains('#') {
        "contains '#'"
    } else if user_id.contains("..") {
        "contains '..'"
    } else if user_id.contains('=') {
        "contains '='"
    } else if user_id.contains(['{', '}']) {
        "contains a brace"
    } else if user_id.chars().any(char::is_control) {
        "contains a control character"
    } else if user_id == "." {
        "is '.'"
    } else {
        return Ok(());
    };
    Err(VaultError::BadUserId { reason })
}

/// Counters of the Vault backend, for the metrics module.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VaultStats {
    /// HTTP requests to the vault answered with a usable 200.
    pub requests_ok: u64,
    /// Requests that failed: unreachable, timeout, non-200, bad body.
    pub requests_error: u64,
    /// Values served from an expired cache entry because the vault could not
    /// answer.
    pub stale_served: u64,
    /// Values served from a fresh cache entry without a request.
    pub cache_hits: u64,
}

/// Resolves secret references: the one entry point the gateway uses.
#[derive(Debug)]
pub struct SecretResolver {
    env: EnvSource,
    file: FileSource,
    vault: Option<Kv2Source>,
}

impl SecretResolver {
    /// Builds the resolver. With a `[vault]` section, checks the address and
    /// that the token reference resolves now (fail fast at startup), and
    /// prepares a pooled HTTP client whose requests time out after
    /// `http_timeout`.
    pub fn new(vault: Option<VaultConfig>, http_timeout: Duration) -> Result<Self, VaultError> {
        let vault = match vault {
            Some(cfg) => Some(Kv2Source::new(cfg, http_timeout)?),
            None => None,
        };
        Ok(Self { env: EnvSource::snapshot(), file: FileSource, vault })
    }

    /// Whether a `[vault]` section is configured.
    pub fn has_vault(&self) -> bool {
        self.vault.is_some()
    }

    /// Resolves `r`, substituting `user_id` for `{user_id}`.
    pub async fn resolve(&self, r: &SecretRef, user_id: Option<&str>) -> Result<SecretString, VaultError> {
        let concrete = r.with_user_id(user_id)?;
        match &*concrete {
            SecretRef::Env { name } => self.env.fetch(name.as_str()).await,
            SecretRef::File { path } => self.file.fetch(std::path::Path::new(path)).await,
            SecretRef::Vault { mount, path, field } => {
                let Some(vault) = &self.vault else {
                    return Err(VaultError::NotConfigured { reference: r.to_string() });
                };
                vault.fetch(&Kv2Key { mount: mount.clone(), path: path.clone(), field: field.clone() }).await
            }
        }
    }

    /// The Vault backend, for the stores that write to it.
    pub(crate) fn vault(&self) -> Option<&Kv2Source> {
        self.vault.as_ref()
    }

    /// The Vault backend's counters (all zero without a vault).
    pub fn stats(&self) -> VaultStats {
        self.vault.as_ref().map(Kv2Source::stats).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> SecretRef {
        match SecretRef::parse(s) {
            Ok(r) => r,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn user_id_substitution() {
        let r = p("vault:secret/oauth/google/{user_id}#access_token");
        assert_eq!(*r.with_user_id(Some("alice")).expect("ok"), p("vault:secret/oauth/google/alice#access_token"));
        assert_eq!(
            r.with_user_id(Some("alice@example.com")).expect("ok").to_string(),
            "vault:secret/oauth/google/alice@example.com#access_token"
        );
        assert!(matches!(r.with_user_id(None), Err(VaultError::UserIdRequired { .. })));
        // No template: the user id is irrelevant, even a hostile one.
        let plain = p("env:X");
        assert_eq!(*plain.with_user_id(Some("../..")).expect("ok"), plain);
        assert_eq!(*plain.with_user_id(None).expect("ok"), plain);
    }

    #[test]
    fn traversal_is_refused() {
        let refs = [p("vault:secret/oauth/{user_id}#t"), p("file:/tokens/{user_id}.txt"), p("env:T_{user_id}")];
        for r in &refs {
            for bad in
                ["../admin", "..", "a/b", "a\\b", "x#other", "a\nb", "a\0b", "", ".", "a=b", "{user_id}", "\u{7f}"]
            {
                assert!(matches!(r.with_user_id(Some(bad)), Err(VaultError::BadUserId { .. })), "{r} accepted {bad:?}");
            }
            let long = "a".repeat(300);
            assert!(matches!(r.with_user_id(Some(&long)), Err(VaultError::BadUserId { .. })));
        }
        let msg = refs[0].with_user_id(Some("..admin")).expect_err("refused").to_string();
        assert!(msg.contains(".."), "{msg}");
    }

    #[tokio::test]
    async fn resolver_without_vault() {
        let resolver = SecretResolver::new(None, Duration::from_secs(1)).expect("resolver");
        assert!(!resolver.has_vault());
        let err = resolver.resolve(&p("vault:secret/x#y"), None).await.expect_err("no vault");
        assert!(matches!(err, VaultError::NotConfigured { .. }), "{err:?}");
        assert!(err.to_string().contains("vault:secret/x#y"));
        assert_eq!(resolver.stats(), VaultStats::default());
    }

    #[tokio::test]
    async fn resolver_env_and_file_with_user_id() {
        std::env::set_var("OTC_TEST_MOD_TOKEN_bob", "bob-token");
        let resolver = SecretResolver::new(None, Duration::from_secs(1)).expect("resolver");
        let v = resolver.resolve(&p("env:OTC_TEST_MOD_TOKEN_{user_id}"), Some("bob")).await.expect("env");
        assert_eq!(v.expose(), "bob-token");

        let dir = std::env::temp_dir().join(format!("otc-mod-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        std::fs::write(dir.join("carol.txt"), "carol-token\n").expect("write");
        let r = p(&format!("file:{}/{{user_id}}.txt", dir.display()));
        let v = resolver.resolve(&r, Some("carol")).await.expect("file");
        assert_eq!(v.expose(), "carol-token");
        let err = resolver.resolve(&r, Some("../etc/passwd")).await.expect_err("traversal");
        assert!(matches!(err, VaultError::BadUserId { .. }));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
