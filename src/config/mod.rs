//! gateway.toml: load and validate.
//!
//! Validation happens while deserialising wherever one field is enough to
//! judge (durations, names, URLs, protocols), so the toml crate's error names
//! the line and shows the key. Rules that span fields (duplicate names) use
//! [`toml::Spanned`] to name the line themselves. Nothing is applied until the
//! whole file has passed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

mod approval;
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
mod server;
mod servers;
mod tracing;
mod upstream;
mod vault;

pub use approval::{ApprovalConfig, Approver};
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
pub use server::{listens_on_loopback, OriginPattern, ServerConfig};
pub use servers::{is_server_name, ServerName, ToolKey, VirtualServerConfig, MAX_SERVER_NAME};
pub use tracing::TracingConfig;
pub use upstream::{CatalogConfig, Protocol, Review, ToolVersion, Toolkit, UpstreamConfig, UpstreamName, UpstreamUrl};
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
    /// `[tracing]`: spans exported over OTLP; none without it.
    #[serde(default)]
    pub tracing: Option<TracingConfig>,
    /// `[[servers]]`: virtual servers, each a curated catalog at its own endpoint.
    #[serde(default)]
    pub servers: Vec<VirtualServerConfig>,
    /// `[[approval]]`: calls a person approves before they run.
    #[serde(default)]
    pub approval: Vec<ApprovalConfig>,
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
            .chain(self.server.admin_without_token())
            .collect()
    }

    /// Whether the gateway supplies secret `id` (`[secrets]`): what a
    /// client sends for it is dropped, what the gateway injects is scrubbed
    /// from answers, and an upstream receives it only when granted.
    pub fn supplies_secret(&self, id: &str) -> bool {
        self.secrets.contains_key(id)
    }

    /// The same for provider `id`'s tokens (`[authorization]`, managed or
    /// read from a reference).
    pub fn supplies_token(&self, id: &str) -> bool {
        self.authorization.contains_key(id)
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
            self.check_login_users(login, text)?;
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
        approval::check(&self.approval, self.login.is_some())?;
        if self.server.max_body_bytes == 0 {
            return Err("server.max_body_bytes must be greater than zero".into());
        }
        servers::check(&self.servers, text)?;
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

    /// A browser signed in with `[login]` acts as the user id its ID token
    /// names, and grants are kept by user id: that id must be the one
    /// `[auth]`'s tokens name for the same person. Taken from the same claim
    /// only when both sections name the same issuer; otherwise another
    /// provider's `sub` would become a gateway user id (another person's,
    /// when the two providers' ids meet), so `[login]` must say which claim
    /// carries the `[auth]` user id.
    fn check_login_users(&self, login: &Spanned<LoginConfig>, text: &str) -> Result<(), String> {
        let section = login.get_ref();
        let auth_issuer = self.auth.issuer.as_deref().map(|i| i.trim_end_matches('/'));
        if section.user_id_claim.is_some() || auth_issuer == Some(section.issuer.0.as_str()) {
            return Ok(());
        }
        let auth = match &self.auth.issuer {
            Some(issuer) => format!("[auth] issuer {issuer:?}"),
            None => "[auth] names no issuer".to_owned(),
        };
        Err(format!(
            "line {at}: login.issuer: {login:?} is not the issuer of the gateway's users ({auth}): a user id its ID tokens name could be another person's gateway user id. Add to [login] the claim that carries the [auth] user id:\n  \
             user_id_claim = \"{claim}\"\n\
             (naming the claim that holds the same value for the same person in both, e.g. \"email\"), or, if [auth]'s tokens come from {login:?} too, set issuer = {login:?} in [auth]",
            at = line_of(text, login.span().start),
            login = section.issuer.0,
            claim = self.auth.user_id_claim,
        ))
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

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

    #[test]
    fn a_login_issuer_not_the_auth_issuer_must_say_which_claim_is_the_user_id() {
        let login = "[login]\nissuer = \"https://login.example.com\"\nclient_id = \"gw\"\n";
        let auth = |issuer: &str| format!("[auth]\nmode = \"jwt\"\nhs256_secret = \"env:S\"\nissuer = \"{issuer}\"\n");
        // The same issuer: the same users, by the same claim.
        for same in ["https://login.example.com", "https://login.example.com/"] {
            Config::parse(&format!("{}{login}", auth(same)), "t").expect(same);
        }
        // Another issuer, or none: refused, naming [login]'s line and the line to add.
        for (text, line) in [(format!("{}\n{login}", auth("https://tokens.example.com")), 6), (format!("\n{login}"), 2)]
        {
            let e = err(&text);
            assert!(e.contains(&format!(": line {line}: login.issuer:")), "{e}");
            assert!(e.contains("login.issuer") && e.contains("user_id_claim = \"sub\""), "{e}");
            // Saying which claim carries the [auth] user id is enough.
            Config::parse(&format!("{text}user_id_claim = \"email\"\n"), "t").expect("with user_id_claim");
        }
        let e = err(&format!("[auth]\nuser_id_claim = \"oid\"\n{login}"));
        assert!(e.contains("line 3") && e.contains("user_id_claim = \"oid\"") && e.contains("names no issuer"), "{e}");
    }
}
