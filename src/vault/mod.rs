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
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::secret::SecretString;

pub use env::EnvSource;
pub use file::FileSource;
pub use kv2::{Kv2Key, Kv2Source};

/// The one template a reference may contain.
pub const USER_ID_TEMPLATE: &str = "{user_id}";

/// The longest user id substituted into a reference; longer ones are refused
/// so a hostile id cannot build huge paths or URLs.
const MAX_USER_ID_LEN: usize = 256;

/// Where a secret lives. Parse with [`SecretRef::parse`] or `str::parse`;
/// config structs can hold one directly (it deserializes from a string).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SecretRef {
    /// `env:NAME`: the environment variable `NAME`, as it was at start (see [`EnvSource`]).
    Env {
        /// The variable's name.
        name: String,
    },
    /// `file:/path`: the whole file, one trailing newline trimmed, read at
    /// resolve time (so rotated files are picked up).
    File {
        /// The file's path, as written (relative paths are relative to the
        /// gateway's working directory).
        path: String,
    },
    /// `vault:MOUNT/PATH#FIELD`: field `FIELD` of the KV v2 secret `PATH` in
    /// the secrets engine mounted at `MOUNT`.
    Vault {
        /// The KV v2 mount: the first path segment (e.g. `secret`).
        mount: String,
        /// The secret's path under the mount (e.g. `tools/twilio`).
        path: String,
        /// The key inside the secret's data (e.g. `api_key`).
        field: String,
    },
}

/// Why a string is not a valid secret reference. Messages never repeat text
/// that might be a pasted secret value (a string with no known scheme).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretRefError {
    /// The empty string.
    #[error("empty secret reference; expected env:NAME, file:/path or vault:MOUNT/PATH#FIELD")]
    Empty,
    /// No `scheme:` prefix. The string is not echoed: it may be a secret
    /// value pasted where a reference belongs.
    #[error("a secret reference must start with env:, file: or vault: (e.g. \"env:NAME\", \"file:/path\", \"vault:MOUNT/PATH#FIELD\"); literal secret values are not accepted")]
    NoScheme,
    /// A scheme other than `env`, `file` and `vault`.
    #[error("unknown secret reference scheme {0:?}; expected env:, file: or vault:")]
    UnknownScheme(String),
    /// Leading or trailing whitespace, almost always a copy-paste slip.
    #[error("secret reference {0:?} has leading or trailing whitespace")]
    Whitespace(String),
    /// `env:` with no name.
    #[error("secret reference \"env:\" has an empty variable name")]
    EmptyEnvName,
    /// An environment variable name that cannot exist.
    #[error("secret reference {0:?}: an environment variable name cannot contain '=' or NUL")]
    InvalidEnvName(String),
    /// `file:` with no path.
    #[error("secret reference \"file:\" has an empty path")]
    EmptyPath,
    /// A file path containing NUL.
    #[error("secret reference {0:?}: a file path cannot contain NUL")]
    InvalidPath(String),
    /// `vault:` without `#FIELD`.
    #[error("secret reference {0:?} has no #FIELD; expected vault:MOUNT/PATH#FIELD")]
    MissingField(String),
    /// `vault:...#` with nothing after the `#`, or a second `#`.
    #[error("secret reference {0:?} has an empty or invalid #FIELD; expected vault:MOUNT/PATH#FIELD")]
    InvalidField(String),
    /// `vault:` without both a mount and a path.
    #[error("secret reference {0:?} needs a mount and a path; expected vault:MOUNT/PATH#FIELD")]
    MissingPath(String),
    /// An empty, `.` or `..` segment, or a control character, in a vault path.
    #[error("secret reference {0:?} has an empty, '.' or '..' path segment or a control character")]
    InvalidSegment(String),
    /// A `{...}` template other than `{user_id}`.
    #[error("secret reference {reference:?} uses the template {template:?}; only {{user_id}} is supported")]
    UnknownTemplate {
        /// The whole reference.
        reference: String,
        /// The offending template.
        template: String,
    },
    /// A `{` with no `}` or a `}` with no `{`.
    #[error("secret reference {0:?} has an unbalanced '{{' or '}}'; the only template is {{user_id}}")]
    UnbalancedBrace(String),
}

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
/// `fetch` returns a `Send` future so resolution can run on any runtime
/// thread; the trait avoids `async-trait` boxing because it is only used
/// statically (the resolver holds each backend by type).
pub trait SecretSource: Send + Sync {
    /// What the backend needs to find one value, with `{user_id}` already
    /// substituted.
    type Key: ?Sized + Sync;

    /// Fetches one value.
    fn fetch(&self, key: &Self::Key) -> impl Future<Output = Result<SecretString, VaultError>> + Send;
}

impl SecretRef {
    /// Parses `env:NAME`, `file:/path` or `vault:MOUNT/PATH#FIELD`.
    pub fn parse(s: &str) -> Result<SecretRef, SecretRefError> {
        let trimmed = s.trim();
        if trimmed.is_empty() {
            return Err(SecretRefError::Empty);
        }
        if trimmed != s {
            // Echo only what is clearly a reference; anything else may be a
            // pasted secret value.
            return if ["env:", "file:", "vault:"].iter().any(|p| trimmed.starts_with(p)) {
                Err(SecretRefError::Whitespace(trimmed.to_owned()))
            } else {
                Err(SecretRefError::NoScheme)
            };
        }
        let Some((scheme, rest)) = s.split_once(':') else {
            return Err(SecretRefError::NoScheme);
        };
        // Only echo a scheme that looks like one: anything else may be a
        // secret value with a colon in it.
        let scheme_is_wordlike =
            !scheme.is_empty() && scheme.len() <= 10 && scheme.bytes().all(|b| b.is_ascii_lowercase());
        if !scheme_is_wordlike {
            return Err(SecretRefError::NoScheme);
        }
        let parsed = match scheme {
            "env" => {
                if rest.is_empty() {
                    return Err(SecretRefError::EmptyEnvName);
                }
                if rest.contains(['=', '\0']) {
                    return Err(SecretRefError::InvalidEnvName(s.to_owned()));
                }
                SecretRef::Env { name: rest.to_owned() }
            }
            "file" => {
                if rest.is_empty() {
                    return Err(SecretRefError::EmptyPath);
                }
                if rest.contains('\0') {
                    return Err(SecretRefError::InvalidPath(s.to_owned()));
                }
                SecretRef::File { path: rest.to_owned() }
            }
            "vault" => {
                let Some((full_path, field)) = rest.split_once('#') else {
                    return Err(SecretRefError::MissingField(s.to_owned()));
                };
                if field.is_empty() || field.contains('#') || field.chars().any(char::is_control) {
                    return Err(SecretRefError::InvalidField(s.to_owned()));
                }
                let Some((mount, path)) = full_path.split_once('/') else {
                    return Err(SecretRefError::MissingPath(s.to_owned()));
                };
                if mount.is_empty() || path.is_empty() {
                    return Err(SecretRefError::MissingPath(s.to_owned()));
                }
                // Reject what a URL would normalise away or what would let a
                // reference read outside the place it names.
                let bad_segment = full_path.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..")
                    || full_path.chars().any(char::is_control);
                if bad_segment {
                    return Err(SecretRefError::InvalidSegment(s.to_owned()));
                }
                SecretRef::Vault { mount: mount.to_owned(), path: path.to_owned(), field: field.to_owned() }
            }
            other => return Err(SecretRefError::UnknownScheme(other.to_owned())),
        };
        check_templates(s)?;
        Ok(parsed)
    }

    /// Whether the reference contains `{user_id}`, i.e. resolves differently
    /// per calling user.
    pub fn uses_user_id(&self) -> bool {
        match self {
            SecretRef::Env { name } => name.contains(USER_ID_TEMPLATE),
            SecretRef::File { path } => path.contains(USER_ID_TEMPLATE),
            SecretRef::Vault { mount, path, field } => {
                [mount, path, field].iter().any(|p| p.contains(USER_ID_TEMPLATE))
            }
        }
    }

    /// The scheme: `"env"`, `"file"` or `"vault"`.
    pub fn scheme(&self) -> &'static str {
        match self {
            SecretRef::Env { .. } => "env",
            SecretRef::File { .. } => "file",
            SecretRef::Vault { .. } => "vault",
        }
    }

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

/// Checks that every `{...}` in `s` is `{user_id}`.
fn check_templates(s: &str) -> Result<(), SecretRefError> {
    let mut rest = s;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err(SecretRefError::UnbalancedBrace(s.to_owned()));
        }
        let after = &rest[open..];
        let Some(close) = after.find('}') else {
            return Err(SecretRefError::UnbalancedBrace(s.to_owned()));
        };
        let template = &after[..=close];
        if template[1..].contains('{') {
            return Err(SecretRefError::UnbalancedBrace(s.to_owned()));
        }
        if template != USER_ID_TEMPLATE {
            return Err(SecretRefError::UnknownTemplate { reference: s.to_owned(), template: template.to_owned() });
        }
        rest = &after[close + 1..];
    }
    Ok(())
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

impl FromStr for SecretRef {
    type Err = SecretRefError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SecretRef::parse(s)
    }
}

impl fmt::Display for SecretRef {
    /// The reference as written in the config (never the value).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRef::Env { name } => write!(f, "env:{name}"),
            SecretRef::File { path } => write!(f, "file:{path}"),
            SecretRef::Vault { mount, path, field } => write!(f, "vault:{mount}/{path}#{field}"),
        }
    }
}

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        SecretRef::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl Serialize for SecretRef {
    /// Serializes as the reference string; references are not secret.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

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

/// Deserializes a humantime duration string (`"500ms"`, `"60s"`, `"5m"`).
pub(crate) fn deserialize_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let s = String::deserialize(d)?;
    humantime::parse_duration(&s).map_err(|e| serde::de::Error::custom(format!("invalid duration {s:?}: {e}")))
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

    /// The Vault backend's counters (all zero without a vault).
    pub fn stats(&self) -> VaultStats {
        self.vault.as_ref().map(Kv2Source::stats).unwrap_or_default()
    }
}

/// The pooled HTTP(S) client shared by the Vault backend and the JWKS
/// fetcher.
pub(crate) mod http_client {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use http_body_util::{BodyExt, Empty, Limited};
    use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::TokioExecutor;

    /// The client type: http and https, HTTP/1.1, pooled.
    pub(crate) type HttpClient = Client<HttpsConnector<HttpConnector>, Empty<Bytes>>;

    /// The largest response body read (Vault secrets and JWKS are small).
    pub(crate) const MAX_BODY: usize = 1 << 20;

    /// Builds the client. TLS trusts the system's roots when it has any
    /// (private CAs are common for Vault), else the bundled Mozilla roots.
    pub(crate) fn build(connect_timeout: Duration) -> Result<HttpClient, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = match HttpsConnectorBuilder::new().with_provider_and_native_roots(provider.clone()) {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "no usable system CA roots; using bundled roots");
                HttpsConnectorBuilder::new()
                    .with_provider_and_webpki_roots(provider)
                    .map_err(|e| format!("TLS setup failed: {e}"))?
            }
        };
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(connect_timeout));
        http.set_nodelay(true);
        let connector = builder.https_or_http().enable_http1().wrap_connector(http);
        Ok(Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build(connector))
    }

    /// GETs `uri` with `headers`, reading at most [`MAX_BODY`] bytes, the
    /// whole exchange bounded by `timeout`. Errors are short descriptions
    /// fit for logs (no header values).
    pub(crate) async fn get(
        client: &HttpClient,
        uri: http::Uri,
        headers: Vec<(http::HeaderName, http::HeaderValue)>,
        timeout: Duration,
    ) -> Result<(http::StatusCode, Bytes), String> {
        let mut req = http::Request::builder().method(http::Method::GET).uri(uri);
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let req = req
            .header(http::header::USER_AGENT, "otc-gateway")
            .body(Empty::<Bytes>::new())
            .map_err(|e| format!("bad request: {e}"))?;
        let exchange = async {
            let resp = client.request(req).await.map_err(|e| describe_client_error(&e))?;
            let status = resp.status();
            let body = Limited::new(resp.into_body(), MAX_BODY)
                .collect()
                .await
                .map_err(|e| format!("reading the body failed: {e}"))?
                .to_bytes();
            Ok((status, body))
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(r) => r,
            Err(_) => Err(format!("timed out after {}", humantime::format_duration(timeout))),
        }
    }

    fn describe_client_error(e: &hyper_util::client::legacy::Error) -> String {
        // The chain's innermost cause says "connection refused" etc.
        let mut msg = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(s) = source {
            msg = format!("{msg}: {s}");
            source = s.source();
        }
        msg
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
    fn parses_each_form() {
        assert_eq!(p("env:OPENAI_API_KEY"), SecretRef::Env { name: "OPENAI_API_KEY".into() });
        assert_eq!(p("file:/etc/otc/key"), SecretRef::File { path: "/etc/otc/key".into() });
        assert_eq!(p("file:rel/key.txt"), SecretRef::File { path: "rel/key.txt".into() });
        assert_eq!(
            p("vault:secret/tools/twilio#api_key"),
            SecretRef::Vault { mount: "secret".into(), path: "tools/twilio".into(), field: "api_key".into() }
        );
        assert_eq!(p("vault:kv/x#f"), SecretRef::Vault { mount: "kv".into(), path: "x".into(), field: "f".into() });
        let r: SecretRef = "env:A".parse().expect("parses");
        assert_eq!(r.scheme(), "env");
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "env:A_B",
            "file:/run/secrets/x",
            "vault:secret/oauth/google/{user_id}#access_token",
            "env:TOKEN_{user_id}",
        ] {
            assert_eq!(p(s).to_string(), s);
            assert_eq!(p(&p(s).to_string()), p(s));
        }
    }

    #[test]
    fn templates() {
        assert!(p("vault:secret/oauth/google/{user_id}#access_token").uses_user_id());
        assert!(p("env:TOKEN_{user_id}").uses_user_id());
        assert!(p("file:/tokens/{user_id}.txt").uses_user_id());
        assert!(p("vault:secret/x#{user_id}").uses_user_id());
        assert!(!p("vault:secret/x#f").uses_user_id());
        assert!(!p("env:X").uses_user_id());
    }

    #[test]
    fn parse_errors_are_clear() {
        let e = |s: &str| match SecretRef::parse(s) {
            Ok(r) => panic!("{s} parsed as {r:?}"),
            Err(e) => e,
        };
        assert_eq!(e(""), SecretRefError::Empty);
        assert_eq!(e("env:"), SecretRefError::EmptyEnvName);
        assert_eq!(e("file:"), SecretRefError::EmptyPath);
        assert!(matches!(e("env:A=B"), SecretRefError::InvalidEnvName(_)));
        assert!(matches!(e("vault:secret/x"), SecretRefError::MissingField(_)));
        assert!(e("vault:secret/x").to_string().contains("#FIELD"));
        assert!(matches!(e("vault:secret/x#"), SecretRefError::InvalidField(_)));
        assert!(matches!(e("vault:secret/x#a#b"), SecretRefError::InvalidField(_)));
        assert!(matches!(e("vault:secret#f"), SecretRefError::MissingPath(_)));
        assert!(matches!(e("vault:/x#f"), SecretRefError::MissingPath(_)));
        assert!(matches!(e("vault:secret/#f"), SecretRefError::MissingPath(_)));
        assert!(matches!(e("vault:secret/a//b#f"), SecretRefError::InvalidSegment(_)));
        assert!(matches!(e("vault:secret/../b#f"), SecretRefError::InvalidSegment(_)));
        assert!(matches!(e("vault:secret/a/.#f"), SecretRefError::InvalidSegment(_)));
        assert_eq!(e("aws:foo"), SecretRefError::UnknownScheme("aws".into()));
        assert!(e("aws:foo").to_string().contains("unknown secret reference scheme"));
        assert!(matches!(e(" env:A"), SecretRefError::Whitespace(_)));
        assert!(matches!(e(" sk_live_1 "), SecretRefError::NoScheme));
        assert_eq!(e("  "), SecretRefError::Empty);
        assert!(matches!(e("env:A "), SecretRefError::Whitespace(_)));
        match e("env:TOKEN_{tenant}") {
            SecretRefError::UnknownTemplate { template, .. } => assert_eq!(template, "{tenant}"),
            other => panic!("{other:?}"),
        }
        assert!(e("env:TOKEN_{tenant}").to_string().contains("only {user_id} is supported"));
        assert!(matches!(e("env:A{user_id"), SecretRefError::UnbalancedBrace(_)));
        assert!(matches!(e("env:A}"), SecretRefError::UnbalancedBrace(_)));
        assert!(matches!(e("env:A{{user_id}}"), SecretRefError::UnbalancedBrace(_)));
    }

    #[test]
    fn a_literal_secret_is_not_echoed() {
        for s in ["sk_live_abcdef123456", "Bearer abc:def", "ghp_xyz:1234567890abcdefghij"] {
            let msg = match SecretRef::parse(s) {
                Ok(r) => panic!("{s} parsed as {r:?}"),
                Err(e) => e.to_string(),
            };
            assert!(!msg.contains("abc"), "{msg}");
            assert!(!msg.contains("sk_live"), "{msg}");
            assert!(!msg.contains("xyz"), "{msg}");
        }
    }

    #[test]
    fn deserializes_from_toml_with_line_numbers() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct C {
            a: SecretRef,
            b: Option<SecretRef>,
        }
        let c: C = toml::from_str("a = \"env:X\"\nb = \"vault:secret/y#z\"\n").expect("valid");
        assert_eq!(c.a, SecretRef::Env { name: "X".into() });
        let err = toml::from_str::<C>("a = \"env:X\"\nb = \"vault:secret/y\"\n").expect_err("invalid").to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("#FIELD"), "{err}");
    }

    #[test]
    fn serializes_as_the_reference() {
        let r = p("vault:secret/a#b");
        assert_eq!(serde_json::to_string(&r).expect("ser"), "\"vault:secret/a#b\"");
    }

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
