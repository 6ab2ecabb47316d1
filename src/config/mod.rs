//! gateway.toml: load and validate.
//!
//! Validation happens while deserialising wherever one field is enough to
//! judge (durations, names, URLs, protocols), so the toml crate's error names
//! the line and shows the key. Rules that span fields (duplicate names) use
//! [`toml::Spanned`] to name the line themselves. Nothing is applied until the
//! whole file has passed.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

mod auth;
mod duration;
mod grants;
mod idempotency;
mod login;
mod mcp;
mod oauth;
mod openapi;
mod policy;
mod secret_ref;
mod vault;

pub use auth::{ApiKeyConfig, AuthConfig, AuthMode, HttpUrl, ScopeToken};
pub use duration::{deserialize_duration, Dur};
pub use grants::Grants;
pub use idempotency::{redact, IdempotencyConfig};
pub use login::LoginConfig;
pub use mcp::{McpConfig, ToolListing};
pub use oauth::{
    scope_ok, AuthorizationProvider, EndpointUrl, GrantStoreRef, StateConfig, UserVerification, RESERVED_PROVIDER_NAMES,
};
pub use openapi::{OperationPattern, SecurityMap, SecuritySource, SpecLocation};
pub use policy::{FailMode, Per, PolicyConfig, Rate, RateLimitConfig, ToolPattern, When, MAX_POLICIES};
pub use secret_ref::{SecretRef, SecretRefError, USER_ID_TEMPLATE};
pub use vault::{check_token_ref, VaultConfig};

/// Why a config could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file was read but is not a valid config.
    #[error("{origin}: {message}")]
    Invalid {
        /// The file name (or "built-in demo config").
        origin: String,
        /// What is wrong, with the key and the line.
        message: String,
    },
}

/// The whole gateway.toml.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Listeners and request limits.
    #[serde(default)]
    pub server: ServerConfig,
    /// How upstream catalogs are polled.
    #[serde(default)]
    pub catalog: CatalogConfig,
    /// The tool servers behind the gateway, in priority-tie order.
    #[serde(default)]
    pub upstreams: Vec<UpstreamConfig>,
    /// `[vault]`: where `vault:` secret references are read (KV v2).
    #[serde(default)]
    pub vault: Option<VaultConfig>,
    /// `[secrets]`: secret id (as tools declare it in
    /// `requirements.secrets`) to the reference its value is read from.
    #[serde(default)]
    pub secrets: BTreeMap<String, Spanned<SecretRef>>,
    /// `[authorization.<provider>]`: each provider's per-user tokens, for
    /// tools declaring `requirements.authorization`: managed by the gateway
    /// (it runs the OAuth flow) or read from a reference.
    #[serde(default)]
    pub authorization: BTreeMap<String, AuthorizationProvider>,
    /// `[auth]`: how clients of the gateway authenticate.
    #[serde(default)]
    pub auth: AuthConfig,
    /// `[idempotency]`: repeated `call_id`s answered from the first call.
    #[serde(default)]
    pub idempotency: IdempotencyConfig,
    /// `[[policy]]`: who may see and call which tools.
    #[serde(default)]
    pub policy: Vec<PolicyConfig>,
    /// `[[rate_limit]]`: calls per caller or shared, per tool pattern.
    #[serde(default)]
    pub rate_limit: Vec<RateLimitConfig>,
    /// `[mcp]`: the MCP endpoint at `/mcp`.
    #[serde(default)]
    pub mcp: McpConfig,
    /// `[state]`: where the gateway keeps what it must remember (OAuth grants).
    #[serde(default)]
    pub state: StateConfig,
    /// `[login]`: browsers sign in to the gateway with the organisation's
    /// OpenID provider (connect links complete only for their own user).
    #[serde(default)]
    pub login: Option<Spanned<LoginConfig>>,
}

impl Config {
    /// The browser origins every data-plane route serves: `[server]
    /// allowed_origins`, else the older `[mcp] allowed_origins`, else
    /// loopback origins.
    pub fn allowed_origins(&self) -> Vec<OriginPattern> {
        self.server
            .allowed_origins
            .clone()
            .or_else(|| self.mcp.allowed_origins.clone())
            .unwrap_or_else(OriginPattern::loopback)
    }

    /// What this config does that weakens the gateway's defences, said at
    /// start, by `otc-gateway check` and in `/status`.
    pub fn security_warnings(&self) -> Vec<String> {
        self.authorization
            .keys()
            .filter(|p| self.user_verification(p) == Some(UserVerification::None))
            .map(|p| {
                format!(
                    "authorization.{p}: user_verification = \"none\": whoever opens a connect link connects their own account to the link's user"
                )
            })
            .collect()
    }

    /// How a managed provider's flows prove whose browser finishes them:
    /// `user_verification` as written, else `login` when `[login]` exists.
    /// `None` for a provider that is not managed, or a config that
    /// `validate` refuses.
    pub fn user_verification(&self, provider: &str) -> Option<UserVerification> {
        let section = self.authorization.get(provider).filter(|s| s.is_managed())?;
        match &section.user_verification {
            Some(written) => Some(*written.get_ref()),
            None => self.login.as_ref().map(|_| UserVerification::Login),
        }
    }
}

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The OTC front: GET /health, GET /tools, POST /tools/call and /call.
    /// Port 0 picks a free port; the chosen one is printed at start.
    pub listen: String,
    /// GET /metrics and GET /status. Port 0 picks a free port.
    pub admin_listen: String,
    /// Larger request bodies get 413.
    pub max_body_bytes: usize,
    /// Worker threads of the data plane; 0 means one per CPU.
    pub threads: usize,
    /// Larger request headers (all names and values together) get 431.
    pub max_header_bytes: usize,
    /// Deeper JSON nesting in a request body gets 400 (checked before parsing,
    /// so a hostile body cannot exhaust the stack).
    pub max_json_depth: usize,
    /// The longest a client may take to send a request body.
    pub body_timeout: Dur,
    /// The most requests served at once; more get 503 with `Retry-After`
    /// (a bound on the memory and upstream connections a burst can take).
    pub max_in_flight: usize,
    /// On SIGTERM: how long in-flight calls may take to finish before the
    /// gateway exits anyway. It stops accepting at once, and exits as soon
    /// as nothing is in flight.
    pub shutdown_timeout: Dur,
    /// The longest a client may take to send a whole request head, from its
    /// first byte (nginx's `client_header_timeout`); then 408 and close.
    pub header_timeout: Dur,
    /// The most client connections open at once. A connection over it
    /// closes the oldest one that is not running a request (idle, or
    /// still sending a head or a body), so slow clients cannot crowd out
    /// the ones that send whole requests.
    pub max_connections: usize,
    /// Browser origins any data-plane route serves (a request with another
    /// `Origin` gets 403; one without `Origin` is not from a browser and is
    /// served). `scheme://host` allows every port, `scheme://host:port`
    /// one, `"*"` any origin. Default: `[mcp] allowed_origins` when set,
    /// else localhost, 127.0.0.1 and `[::1]` over http and https.
    pub allowed_origins: Option<Vec<OriginPattern>>,
    /// `Host` names (or addresses) the data plane answers besides loopback
    /// ones, port ignored; `"*"` any. Default: on a loopback `listen`, only
    /// loopback names and addresses (a DNS-rebinding page's Host is refused
    /// with 421); on any other address, every Host.
    pub allowed_hosts: Option<Vec<String>>,
    /// The base of every link the gateway hands out (OAuth challenges and
    /// the callback it registers with providers), e.g.
    /// `https://tools.example.com`. Default: `http://<listen>` as bound.
    pub public_url: Option<EndpointUrl>,
    /// The bearer token admin actions (`POST /reload`) require, as a secret
    /// reference. Without it the admin listener is read-only.
    pub admin_token: Option<Spanned<SecretRef>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            admin_listen: "127.0.0.1:9464".into(),
            max_body_bytes: 1024 * 1024,
            threads: 0,
            max_header_bytes: 32 * 1024,
            max_json_depth: 64,
            body_timeout: Dur(Duration::from_secs(30)),
            shutdown_timeout: Dur(Duration::from_secs(30)),
            max_in_flight: 10_000,
            header_timeout: Dur(Duration::from_secs(60)),
            max_connections: 20_000,
            allowed_origins: None,
            allowed_hosts: None,
            public_url: None,
            admin_token: None,
        }
    }
}

/// `[catalog]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogConfig {
    /// How often each upstream's catalog is fetched.
    pub poll_interval: Dur,
    /// The longest one catalog fetch may take.
    pub request_timeout: Dur,
    /// The largest catalog body accepted from an upstream.
    pub max_catalog_bytes: usize,
    /// Up to this much is added to each wait between two fetches, at
    /// random, so that replicas started together do not poll in step.
    #[serde(deserialize_with = "deserialize_duration")]
    pub jitter: Duration,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            poll_interval: Dur(Duration::from_secs(10)),
            request_timeout: Dur(Duration::from_secs(5)),
            max_catalog_bytes: 32 * 1024 * 1024,
            jitter: Duration::ZERO,
        }
    }
}

/// One `[[upstreams]]` entry. (Equality ignores where in the file it was.)
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique, `[a-z0-9_-]+`; appears in metrics and /status.
    pub name: Spanned<UpstreamName>,
    /// Base URL. OTC: `/tools` and `/tools/call` are appended. MCP: the
    /// MCP endpoint itself (e.g. `http://127.0.0.1:8000/mcp`). OpenAPI: where
    /// every call goes (the operation's path appended), http or https.
    pub url: Spanned<UpstreamUrl>,
    /// `otc` (default), `mcp` or `openapi`.
    #[serde(default = "default_protocol")]
    pub protocol: Spanned<Protocol>,
    /// The higher wins when two upstreams serve the same tool id.
    #[serde(default)]
    pub priority: i64,
    /// The longest a tool call may take once sent.
    #[serde(default = "default_call_timeout")]
    pub call_timeout: Dur,
    /// The longest a connection to the upstream may take to open.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Dur,
    /// Consecutive connection failures that open the upstream's circuit.
    #[serde(default = "default_circuit_failures")]
    pub circuit_failures: u32,
    /// How long an open circuit refuses calls before one probe is let through.
    #[serde(default = "default_circuit_cooldown")]
    pub circuit_cooldown: Dur,
    /// The toolkit for tools published with bare ids (no `Toolkit.` prefix).
    #[serde(default)]
    pub toolkit: Option<Toolkit>,
    /// The version for tools published without one.
    #[serde(default)]
    pub version: Option<ToolVersion>,
    /// Sent as `Authorization: Bearer <value>` on every catalog fetch and
    /// call to this upstream (a secret reference, without `{user_id}`).
    #[serde(default)]
    pub bearer_token: Option<Spanned<SecretRef>>,
    /// MCP only: an `[authorization.<provider>]` whose token for the calling
    /// user is sent as `Authorization: Bearer` on `tools/call` (instead of
    /// `bearer_token`); every tool of the upstream then requires it (and
    /// the upstream is granted it).
    #[serde(default)]
    pub user_token: Option<Spanned<String>>,
    /// The `[secrets]` ids this upstream's tools may receive (`["*"]`: all).
    /// None when absent: a tool declaring a secret its upstream was not
    /// granted cannot be called.
    #[serde(default)]
    pub secrets: Option<Spanned<Grants>>,
    /// The `[authorization.<provider>]`s whose user tokens this upstream's
    /// tools may receive (`["*"]`: all). None when absent.
    #[serde(default)]
    pub authorization: Option<Spanned<Grants>>,
    /// Toolkits reserved for this upstream: another upstream's tools in
    /// them are neither listed nor callable.
    #[serde(default)]
    pub toolkits: Vec<Spanned<Toolkit>>,
    /// OpenAPI only: where the document is (`https://…`, `file:/path`).
    #[serde(default)]
    pub spec: Option<Spanned<SpecLocation>>,
    /// OpenAPI only: the operations that become tools (all when absent).
    #[serde(default)]
    pub operations: Option<Spanned<Vec<OperationPattern>>>,
    /// OpenAPI only: operations left out, even when `operations` matches.
    #[serde(default)]
    pub exclude: Option<Spanned<Vec<OperationPattern>>>,
    /// OpenAPI only: what each security scheme of the document is given.
    #[serde(default)]
    pub security: Option<Spanned<SecurityMap>>,
}

impl UpstreamConfig {
    /// The secrets this upstream is granted.
    pub fn secret_grants(&self) -> Grants {
        self.secrets.as_ref().map(|g| g.get_ref().clone()).unwrap_or_default()
    }

    /// The providers this upstream is granted: `authorization`, and the
    /// `user_token` provider (sending it is what that key asks for).
    pub fn authorization_grants(&self) -> Grants {
        let mut grants = self.authorization.as_ref().map(|g| g.get_ref().clone()).unwrap_or_default();
        if let Some(provider) = &self.user_token {
            grants = match grants {
                Grants::Nothing => Grants::Only([provider.get_ref().clone()].into()),
                Grants::Only(mut ids) => {
                    ids.insert(provider.get_ref().clone());
                    Grants::Only(ids)
                }
                Grants::All => Grants::All,
            };
        }
        grants
    }
}

fn default_protocol() -> Spanned<Protocol> {
    Spanned::new(0..0, Protocol::Otc)
}

fn default_call_timeout() -> Dur {
    Dur(Duration::from_secs(30))
}

fn default_circuit_failures() -> u32 {
    5
}

fn default_circuit_cooldown() -> Dur {
    Dur(Duration::from_secs(5))
}

fn default_connect_timeout() -> Dur {
    Dur(Duration::from_secs(2))
}

/// The protocol an upstream speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Open Tool Calling 1.0 (OXP): GET /tools, POST /tools/call.
    #[default]
    Otc,
    /// Model Context Protocol over streamable HTTP.
    Mcp,
    /// A REST API described by an OpenAPI 3.0 or 3.1 document.
    #[serde(rename = "openapi")]
    OpenApi,
}

/// An upstream name: `[a-z0-9_-]+`, so it is safe as a metrics label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamName(pub String);

impl<'de> Deserialize<'de> for UpstreamName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        let ok = !name.is_empty()
            && name.len() <= 64
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !ok {
            return Err(D::Error::custom(format!("invalid upstream name {name:?}: use 1 to 64 of [a-z0-9_-]")));
        }
        Ok(UpstreamName(name))
    }
}

impl fmt::Display for UpstreamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An upstream's base URL: `http://host:port[/path]` (https only for
/// `openapi` upstreams, checked with the protocol), no trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl(pub String);

impl UpstreamUrl {
    /// Whether it is an `https://` URL.
    pub fn is_https(&self) -> bool {
        self.0.starts_with("https://")
    }
}

impl<'de> Deserialize<'de> for UpstreamUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let uri: http::Uri =
            text.parse().map_err(|e| D::Error::custom(format!("invalid upstream url {text:?}: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(D::Error::custom(format!("upstream url {text:?} must start with http://")));
        }
        if uri.host().is_none() {
            return Err(D::Error::custom(format!("upstream url {text:?} has no host")));
        }
        if uri.query().is_some() {
            return Err(D::Error::custom(format!("upstream url {text:?} must not have a query")));
        }
        Ok(UpstreamUrl(text.trim_end_matches('/').to_owned()))
    }
}

/// A toolkit name, `[A-Za-z0-9_]+` as in tool ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolkit(pub String);

impl<'de> Deserialize<'de> for Toolkit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(D::Error::custom(format!("invalid toolkit {text:?}: use [A-Za-z0-9_]+")));
        }
        Ok(Toolkit(text))
    }
}

/// A tool version, `x.y.z`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolVersion(pub String);

impl<'de> Deserialize<'de> for ToolVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        // The catalog's tool-version grammar (`resolve::parse_tool_version`):
        // three fields of 1 to 18 decimal digits.
        let field = |f: &str| (1..=18).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit());
        if text.split('.').count() != 3 || !text.split('.').all(field) {
            return Err(D::Error::custom(format!("invalid version {text:?}: write x.y.z, e.g. \"1.0.0\"")));
        }
        Ok(ToolVersion(text))
    }
}

impl Config {
    /// Reads and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parses and validates config text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let invalid = |message: String| ConfigError::Invalid { origin: origin.to_owned(), message };
        let config: Config = toml::from_str(text).map_err(|e| invalid(e.to_string().trim_end().to_owned()))?;
        config.validate(text).map_err(invalid)?;
        Ok(config)
    }

    /// The rules that span fields.
    fn validate(&self, text: &str) -> Result<(), String> {
        let line = |span: std::ops::Range<usize>| line_of(text, span.start);
        if self.policy.len() > MAX_POLICIES {
            return Err(format!("policy: at most {} [[policy]] sections", MAX_POLICIES));
        }
        let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, upstream) in self.upstreams.iter().enumerate() {
            let name = upstream.name.get_ref().0.as_str();
            let at = line(upstream.name.span());
            if let Some(first) = seen.insert(name, at) {
                return Err(format!(
                    "line {at}: upstreams[{i}].name: duplicate upstream name {name:?} (first defined at line {first})"
                ));
            }
            // MCP tools have bare names: the id's toolkit and version come from here.
            if *upstream.protocol.get_ref() == Protocol::Mcp
                && (upstream.toolkit.is_none() || upstream.version.is_none())
            {
                return Err(format!(
                    "line {}: upstreams[{i}]: an \"mcp\" upstream needs `toolkit` and `version` (its tools are served as <toolkit>.<name>@<version>)",
                    line(upstream.protocol.span())
                ));
            }
            self.check_openapi_keys(i, upstream, text)?;
            if let Some(provider) = &upstream.user_token {
                if *upstream.protocol.get_ref() != Protocol::Mcp || !self.authorization.contains_key(provider.get_ref())
                {
                    return Err(format!(
                        "line {}: upstreams[{i}].user_token: only for \"mcp\" upstreams, naming an [authorization.<provider>] section",
                        line(provider.span())
                    ));
                }
            }
            if let Some(token) = &upstream.bearer_token {
                if token.get_ref().uses_user_id() {
                    return Err(format!(
                        "line {}: upstreams[{i}].bearer_token: an upstream's token cannot depend on {{user_id}}",
                        line(token.span())
                    ));
                }
                self.check_vault_ref(token, &format!("upstreams[{i}].bearer_token"), text)?;
            }
            if let Some(granted) = &upstream.secrets {
                if let Some(id) = granted.get_ref().named().find(|id| !self.secrets.contains_key(*id)) {
                    return Err(format!(
                        "line {}: upstreams[{i}].secrets: {id:?} is not in [secrets]",
                        line(granted.span())
                    ));
                }
            }
            if let Some(granted) = &upstream.authorization {
                if let Some(id) = granted.get_ref().named().find(|id| !self.authorization.contains_key(*id)) {
                    return Err(format!(
                        "line {}: upstreams[{i}].authorization: {id:?} is not an [authorization.<provider>] section",
                        line(granted.span())
                    ));
                }
            }
            for toolkit in &upstream.toolkits {
                let taken = self.upstreams[..i]
                    .iter()
                    .find(|other| other.toolkits.iter().any(|t| t.get_ref() == toolkit.get_ref()));
                if let Some(other) = taken {
                    return Err(format!(
                        "line {}: upstreams[{i}].toolkits: {:?} is already reserved by upstream {:?}",
                        line(toolkit.span()),
                        toolkit.get_ref().0,
                        other.name.get_ref().0
                    ));
                }
            }
        }
        for (id, reference) in &self.secrets {
            self.check_vault_ref(reference, &format!("secrets.{id}"), text)?;
        }
        if let Some(login) = &self.login {
            login.get_ref().check()?;
            if let Some(secret) = &login.get_ref().client_secret {
                self.check_vault_ref(secret, "login.client_secret", text)?;
            }
        }
        for (provider, section) in &self.authorization {
            section.check(provider)?;
            self.check_user_verification(provider, section, text)?;
            if let Some(token) = &section.token {
                self.check_vault_ref(token, &format!("authorization.{provider}.token"), text)?;
            }
            if let Some(secret) = &section.client_secret {
                self.check_vault_ref(secret, &format!("authorization.{provider}.client_secret"), text)?;
            }
            if let Some(store) = &section.store {
                if self.vault.is_none() {
                    return Err(format!(
                        "line {}: authorization.{provider}.store: {} needs a [vault] section (address and token)",
                        line_of(text, store.span().start),
                        store.get_ref()
                    ));
                }
            }
        }
        if let Some(redis) = &self.state.redis {
            match SecretRef::parse(redis) {
                Ok(reference) if !matches!(reference, SecretRef::Vault { .. }) && !reference.uses_user_id() => {}
                _ if redis.starts_with("redis://") && redis::Client::open(redis.as_str()).is_ok() => {}
                _ => {
                    return Err(format!(
                        "state.redis: {:?} must be a redis://[:password@]host:port[/db] URL, or an env: or file: reference holding one",
                        redact(redis)
                    ))
                }
            }
        }
        if let Some(store) = &self.idempotency.store {
            // Parsed here (no connection is made) so a typo fails the load;
            // shown without its password.
            if !store.starts_with("redis://") || redis::Client::open(store.as_str()).is_err() {
                let shown = redact(store);
                return Err(format!("idempotency.store: {shown:?} must be a redis://[:password@]host:port[/db] URL"));
            }
        }
        if let Some(token) = &self.server.admin_token {
            if token.get_ref().uses_user_id() {
                return Err(format!("line {}: server.admin_token: cannot depend on {{user_id}}", line(token.span())));
            }
            self.check_vault_ref(token, "server.admin_token", text)?;
        }
        if self.server.max_body_bytes == 0 {
            return Err("server.max_body_bytes must be greater than zero".into());
        }
        if let Some((key, at)) = self.auth.resource_keys_without_jwt() {
            return Err(format!(
                "line {}: auth.{key}: only with mode = \"jwt\" (it describes the gateway as an OAuth protected resource)",
                line_of(text, at)
            ));
        }
        Ok(())
    }
}

impl Config {
    /// A managed provider must say how the browser finishing its flow is
    /// proven to be the link's user: the error names the three choices.
    fn check_user_verification(
        &self,
        provider: &str,
        section: &AuthorizationProvider,
        text: &str,
    ) -> Result<(), String> {
        if !section.is_managed() {
            return Ok(());
        }
        let written = section.user_verification.as_ref();
        let at = written.map_or(0, |w| line_of(text, w.span().start));
        match (written.map(|w| *w.get_ref()), section.verifier_url.is_some()) {
            (Some(UserVerification::Login), _) if self.login.is_none() => {
                return Err(format!(
                    "line {at}: authorization.{provider}.user_verification: \"login\" needs a [login] section (issuer, client_id, client_secret of the organisation's OpenID provider)"
                ));
            }
            (Some(UserVerification::Verifier), false) => {
                return Err(format!(
                    "line {at}: authorization.{provider}.user_verification: \"verifier\" needs verifier_url, the application page that confirms the flow"
                ));
            }
            (Some(UserVerification::Login | UserVerification::None) | None, true) => {
                return Err(format!(
                    "authorization.{provider}.verifier_url: only with user_verification = \"verifier\""
                ));
            }
            _ => {}
        }
        if self.user_verification(provider).is_none() {
            return Err(format!(
                "authorization.{provider}: a connect link must complete only in its own user's browser; choose one:\n  \
                 - add a [login] section (issuer, client_id, client_secret): browsers sign in to the gateway;\n  \
                 - add `user_verification = \"verifier\"` and `verifier_url = \"https://app.example.com/connect/verify\"` to [authorization.{provider}]: your application confirms each flow;\n  \
                 - add `user_verification = \"none\"` to [authorization.{provider}]: anyone who opens a link connects their account to its user (trusted single-user setups only)"
            ));
        }
        Ok(())
    }

    /// A `vault:` reference needs a `[vault]` section to be read from.
    fn check_vault_ref(&self, reference: &Spanned<SecretRef>, key: &str, text: &str) -> Result<(), String> {
        if matches!(reference.get_ref(), SecretRef::Vault { .. }) && self.vault.is_none() {
            return Err(format!(
                "line {}: {key}: {} needs a [vault] section (address and token)",
                line_of(text, reference.span().start),
                reference.get_ref()
            ));
        }
        Ok(())
    }
}

/// The 1-based line of a byte offset.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// One `allowed_origins` entry: a browser origin, or `"*"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginPattern {
    /// `"*"`: any origin.
    Any,
    /// `scheme://host[:port]`; no port means any port.
    Origin {
        /// `http` or `https`.
        scheme: String,
        /// The host, lower-cased (IPv6 in brackets).
        host: String,
        /// The port, when only one is allowed.
        port: Option<u16>,
    },
}

impl OriginPattern {
    /// localhost, 127.0.0.1 and `[::1]`, any port, http and https.
    pub fn loopback() -> Vec<OriginPattern> {
        let local = ["localhost", "127.0.0.1", "[::1]"];
        ["http", "https"]
            .into_iter()
            .flat_map(|scheme| {
                local.map(|host| OriginPattern::Origin { scheme: scheme.into(), host: host.into(), port: None })
            })
            .collect()
    }

    /// `scheme://host[:port]` with nothing after it (a trailing `/`
    /// tolerated), as a browser sends it in `Origin`.
    pub fn parse(text: &str) -> Option<OriginPattern> {
        let uri: http::Uri = text.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "http" | "https") || uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return None;
        }
        let host = uri.host()?.to_ascii_lowercase();
        Some(OriginPattern::Origin { scheme, host, port: uri.port_u16() })
    }

    /// Whether this pattern admits `origin` (a parsed `Origin` header).
    pub fn allows(&self, origin: &OriginPattern) -> bool {
        match (self, origin) {
            (OriginPattern::Any, _) => true,
            (OriginPattern::Origin { scheme, host, port }, OriginPattern::Origin { scheme: s, host: h, port: p }) => {
                scheme == s && host == h && (port.is_none() || port == p)
            }
            (OriginPattern::Origin { .. }, OriginPattern::Any) => false,
        }
    }
}

impl<'de> Deserialize<'de> for OriginPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == "*" {
            return Ok(OriginPattern::Any);
        }
        OriginPattern::parse(&text).ok_or_else(|| {
            D::Error::custom(format!(
                "invalid origin {text:?}: write scheme://host or scheme://host:port (http or https), or \"*\""
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fleet_keys_parse_and_refuse_what_they_must() {
        let config = Config::parse(
            "[state]\nredis = \"env:REDIS_URL\"\n[catalog]\njitter = \"2s\"\n\
             [[rate_limit]]\nname = \"x\"\ntools = [\"A.*\"]\nper = \"global\"\nrate = \"1/s\"\nfail = \"closed\"\n",
            "test",
        )
        .expect("parses");
        assert_eq!(config.catalog.jitter, Duration::from_secs(2));
        assert_eq!(config.rate_limit[0].fail, FailMode::Closed);
        assert_eq!(Config::parse("", "test").expect("empty").catalog.jitter, Duration::ZERO);
        assert!(Config::parse("[state]\nredis = \"redis://:pw@127.0.0.1:6379/0\"\n", "test").is_ok());
        for bad in ["http://x", "vault:secret/r#url", "env:R_{user_id}", "redis//nope"] {
            let e = Config::parse(&format!("[state]\nredis = \"{bad}\"\n"), "test").expect_err(bad).to_string();
            assert!(e.contains("state.redis"), "{bad}: {e}");
        }
        // The password of a refused URL is not repeated.
        let e = Config::parse("[state]\nredis = \"rediss://:hunter2@x:1\"\n", "test").expect_err("rediss").to_string();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn a_configured_version_follows_the_catalogs_grammar() {
        #[derive(Deserialize)]
        struct Holder {
            #[allow(dead_code)]
            v: ToolVersion,
        }
        for text in [
            "1.0.0",
            "01.2.3",
            "0.0.0",
            "1.0",
            "1.0.0.0",
            "1.0.0-rc1",
            "",
            "a.b.c",
            "1..0",
            "123456789012345678.0.0",
            "1234567890123456789.0.0",
            " 1.0.0",
        ] {
            let configured = toml::from_str::<Holder>(&format!("v = {text:?}")).is_ok();
            let catalog = crate::resolve::parse_tool_version(text).is_some();
            assert_eq!(configured, catalog, "{text:?}");
        }
    }

    fn err(text: &str) -> String {
        match Config::parse(text, "gateway.toml") {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_minimal_config_gets_defaults() {
        let c =
            Config::parse("[[upstreams]]\nname = \"calc\"\nurl = \"http://127.0.0.1:9001/\"\n", "t").expect("valid");
        assert_eq!(c.upstreams[0].url.get_ref().0, "http://127.0.0.1:9001");
        assert_eq!(c.catalog.poll_interval.0, Duration::from_secs(10));
        assert_eq!(c.server.max_body_bytes, 1 << 20);
        assert_eq!(*c.upstreams[0].protocol.get_ref(), Protocol::Otc);
    }

    #[test]
    fn the_idempotency_section_has_defaults_and_checks_its_store() {
        let c = Config::parse("", "t").expect("valid");
        assert_eq!(c.idempotency.ttl.0, Duration::from_secs(600));
        assert_eq!((c.idempotency.max_entries, c.idempotency.max_bytes), (100_000, 64 << 20));
        assert_eq!(c.idempotency.store, None);
        let c = Config::parse("[idempotency]\nttl = \"30s\"\nstore = \"redis://cache:6379/2\"\n", "t").expect("valid");
        assert_eq!(c.idempotency.ttl.0, Duration::from_secs(30));
        let e = err("[idempotency]\nstore = \"http://:hunter2@cache:6379\"\n");
        assert!(e.contains("idempotency.store") && !e.contains("hunter2"), "{e}");
        let e = err("[idempotency]\nmax_entry = 5\n");
        assert!(e.contains("max_entry"), "{e}");
    }

    #[test]
    fn errors_name_the_key_and_the_line() {
        let e = err("[catalog]\npoll_interval = \"often\"\n");
        assert!(e.contains("line 2") && e.contains("poll_interval"), "{e}");
        let e = err("[[upstreams]]\nname = \"a\"\nurl = \"http://x\"\nprotocol = \"grpc\"\n");
        assert!(e.contains("line 4") && e.contains("grpc"), "{e}");
        let e =
            err("[[upstreams]]\nname = \"a\"\nurl = \"http://x\"\n[[upstreams]]\nname = \"a\"\nurl = \"http://y\"\n");
        assert!(e.contains("line 5") && e.contains("duplicate") && e.contains("upstreams[1].name"), "{e}");
        let e = err("[server]\nlisten = \"127.0.0.1:1\"\nmax_body = 5\n");
        assert!(e.contains("line 3") && e.contains("max_body"), "{e}");
        let e = err("[[upstreams]]\nname = \"Bad Name\"\nurl = \"http://x\"\n");
        assert!(e.contains("line 2") && e.contains("upstream name"), "{e}");
    }

    #[test]
    fn mcp_upstreams_need_toolkit_and_version() {
        let e = err("[[upstreams]]\nname = \"m\"\nurl = \"http://x/mcp\"\nprotocol = \"mcp\"\ntoolkit = \"K\"\n");
        assert!(e.contains("line 4") && e.contains("toolkit") && e.contains("version"), "{e}");
        let text = "[[upstreams]]\nname = \"m\"\nurl = \"http://x/mcp\"\nprotocol = \"mcp\"\ntoolkit = \"K\"\nversion = \"1.0.0\"\n";
        Config::parse(text, "t").expect("valid");
        let e = err(&format!("{text}user_token = \"google\"\n"));
        assert!(e.contains("line 7") && e.contains("user_token"), "{e}");
        let e = err("[mcp]\nallowed_origins = [\"example.com\"]\n");
        assert!(e.contains("line 2") && e.contains("origin"), "{e}");
    }
}
