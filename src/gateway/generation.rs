//! One generation of the gateway: everything built from one config
//! (upstreams, authentication, policies, limits, OAuth, tracing), swapped
//! whole on reload.

use std::sync::Arc;
use std::time::Duration;

use http::HeaderValue;

use crate::auth::{AuthError, Authenticator};
use crate::browser::BrowserPolicy;
use crate::catalog::poll::PollSettings;
use crate::config::{Config, IdempotencyConfig, SecretRef, TracingConfig, UpstreamConfig};
use crate::idempotency::{IdempotencyError, IdempotencyStore};
use crate::oauth::{OAuth, OAuthError};
use crate::otel::Tracer;
use crate::policy::AccessPolicy;
use crate::ratelimit::{RateLimits, SharedBuckets};
use crate::redis_client::SharedRedis;
use crate::secret::SecretString;
use crate::upstream::Upstream;
use crate::vault::{SecretResolver, VaultError};

/// Why a config could not be turned into a generation.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The vault or a secret the config needs at start could not be read.
    #[error("secrets: {0}")]
    Vault(#[from] VaultError),
    /// `[auth]` could not be set up (its secrets, its JWKS).
    #[error("auth: {0}")]
    Auth(#[from] AuthError),
    /// The idempotency store's URL is unusable (an unreachable Redis is not
    /// an error: calls then run without deduplication).
    #[error("idempotency: {0}")]
    Idempotency(#[from] IdempotencyError),
    /// `[state] redis` could not be read or used.
    #[error("state.redis: {0}")]
    SharedState(String),
    /// The OAuth grant store or its key could not be set up.
    #[error("oauth: {0}")]
    OAuth(#[from] OAuthError),
    /// `[server] admin_token` could not be read, or is empty.
    #[error("server.admin_token: {0}")]
    AdminToken(String),
    /// `[tracing]` could not be set up (its headers' secrets).
    #[error("tracing: {0}")]
    Tracing(String),
    /// A journal of the state directory (tool pins, approvals) could not
    /// be opened.
    #[error(transparent)]
    Journal(#[from] crate::journal::JournalError),
    /// An upstream URL that http cannot use.
    #[error("upstream {name}: {source}")]
    UpstreamUrl {
        /// The upstream's name.
        name: String,
        /// Why.
        source: http::uri::InvalidUri,
    },
}

/// One generation of the gateway: the state derived from one version of the
/// config (upstreams, authentication, policies, limits, OAuth, ...), built
/// whole and swapped whole on reload; a request keeps the one it started
/// under.
#[derive(Debug)]
pub struct Generation {
    /// The config it was built from.
    pub config: Config,
    /// The upstreams, in config order.
    pub upstreams: Vec<Arc<Upstream>>,
    /// Catalog polling settings.
    pub(crate) poll: PollSettings,
    /// Reads secret references (env, file, vault).
    pub(crate) secrets: Arc<SecretResolver>,
    /// Checks client credentials.
    pub(crate) authenticator: Authenticator,
    /// Answers repeated `call_id`s.
    pub(crate) idempotency: Arc<IdempotencyStore>,
    /// Who may see and call which tools.
    pub access: AccessPolicy,
    /// Calls per caller or shared.
    pub(crate) rate_limits: RateLimits,
    /// Which browser origins and hosts the data plane answers.
    pub(crate) browser: BrowserPolicy,
    /// The same for the admin listener.
    pub(crate) admin_browser: BrowserPolicy,
    /// `[server] admin_token`, read: what admin actions require.
    pub(crate) admin_token: Option<SecretString>,
    /// The managed OAuth providers, their grants and challenges.
    pub(crate) oauth: Arc<OAuth>,
    /// `[tracing]`: records and exports spans; `None` (the one check a
    /// call makes) without the section.
    pub(crate) tracer: Option<Arc<Tracer>>,
    /// `[idempotency]` as in force (its store filled in from `[state] redis`).
    idempotency_config: IdempotencyConfig,
    /// `[state] redis`: the one connection its stores share.
    pub(super) redis: Option<Arc<SharedRedis>>,
}

impl Generation {
    /// Builds a generation from a validated config: resolves what `[auth]`
    /// needs and loads its keys, so it runs inside a tokio runtime.
    pub async fn build(config: Config, previous: Option<&Generation>) -> Result<Generation, BuildError> {
        // The same [vault] keeps its resolver, and so its cache: values
        // fetched before a reload are still served while the vault is down.
        let secrets = match previous {
            Some(old) if old.config.vault == config.vault => old.secrets.clone(),
            _ => {
                let vault_timeout = config.vault.as_ref().map_or(Duration::from_secs(2), |v| v.timeout);
                Arc::new(SecretResolver::new(config.vault.clone(), vault_timeout)?)
            }
        };
        let authenticator = Authenticator::new(&config.auth, &secrets).await?;
        let shared_redis = shared_redis_url(&config, &secrets).await?;
        // One connection to `[state] redis` for every store in it, kept
        // across reloads that keep the same Redis.
        let redis = match &shared_redis {
            None => None,
            Some(url) => Some(match previous.and_then(|old| old.redis.clone()).filter(|r| r.is_for(url.expose())) {
                Some(kept) => kept,
                None => Arc::new(SharedRedis::connect(url.expose()).map_err(BuildError::SharedState)?),
            }),
        };
        // `[idempotency]` without a store of its own uses `[state] redis`.
        let mut idempotency_config = config.idempotency.clone();
        if idempotency_config.store.is_none() {
            idempotency_config.store = shared_redis.as_ref().map(|url| url.expose().to_owned());
        }
        // An unchanged [idempotency] keeps its entries across reloads.
        let idempotency = match previous {
            Some(old) if old.idempotency_config == idempotency_config => old.idempotency.clone(),
            _ => Arc::new(IdempotencyStore::build_sharing(&idempotency_config, redis.as_ref()).await?),
        };
        let shared_buckets = redis.as_ref().map(|redis| {
            previous.and_then(|old| old.rate_limits.shared_in(redis)).unwrap_or_else(|| {
                let shown = crate::config::redact(shared_redis.as_ref().map_or("", |u| u.expose()));
                Arc::new(SharedBuckets::new(redis.clone(), shown))
            })
        });
        let upstreams = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(order, u)| {
                // An unchanged upstream (same settings, same place) keeps its
                // circuit and its connection pools across a reload.
                if let Some(kept) = previous.and_then(|old| old.unchanged_upstream(order, u)) {
                    return Ok(kept);
                }
                Upstream::from_config(order, u)
                    .map(Arc::new)
                    .map_err(|source| BuildError::UpstreamUrl { name: u.name.get_ref().0.clone(), source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let poll = PollSettings {
            interval: config.catalog.poll_interval.0,
            timeout: config.catalog.request_timeout.0,
            max_bytes: config.catalog.max_catalog_bytes,
            jitter: config.catalog.jitter,
        };
        let access = AccessPolicy::new(config.policy.clone());
        let rate_limits = RateLimits::new(&config.rate_limit, previous.map(|old| &old.rate_limits), shared_buckets);
        let browser = BrowserPolicy::new(&config);
        let admin_browser = BrowserPolicy::for_admin(&config);
        let admin_token = match &config.server.admin_token {
            Some(reference) => {
                let token = secrets.resolve(reference.get_ref(), None).await;
                let token = token.map_err(|e| BuildError::AdminToken(e.to_string()))?;
                // An empty token would be presented by nobody (or guessed by anybody).
                if token.expose().trim().is_empty() {
                    return Err(BuildError::AdminToken(format!(
                        "{} is empty: set it to a long random value (openssl rand -hex 32)",
                        reference.get_ref()
                    )));
                }
                Some(token)
            }
            None => None,
        };
        // Links, flows and the open embedded store carry over a reload.
        let oauth =
            Arc::new(OAuth::build(&config, secrets.clone(), previous.map(|old| &*old.oauth), redis.as_ref()).await?);
        // An unchanged [tracing] keeps its exporter and queue.
        let tracer = match &config.tracing {
            None => None,
            Some(section) => match previous.and_then(|old| old.tracer.clone()).filter(|t| t.is_for(section)) {
                Some(kept) => Some(kept),
                None => Some(start_tracer(section, &secrets).await?),
            },
        };
        Ok(Generation {
            config,
            upstreams,
            poll,
            secrets,
            authenticator,
            idempotency,
            access,
            rate_limits,
            browser,
            admin_browser,
            admin_token,
            oauth,
            tracer,
            idempotency_config,
            redis,
        })
    }
}

/// A tracer for `[tracing]`, its headers read from their references.
async fn start_tracer(section: &TracingConfig, secrets: &SecretResolver) -> Result<Arc<Tracer>, BuildError> {
    let mut headers = Vec::new();
    for (name, reference) in &section.headers {
        let value =
            secrets.resolve(reference, None).await.map_err(|e| BuildError::Tracing(format!("headers.{name}: {e}")))?;
        let mut value = HeaderValue::from_str(value.expose())
            .map_err(|_| BuildError::Tracing(format!("headers.{name}: the value is not valid header text")))?;
        value.set_sensitive(true);
        let name = http::HeaderName::from_bytes(name.as_bytes()).map_err(|e| BuildError::Tracing(e.to_string()))?;
        headers.push((name, value));
    }
    Tracer::start(section.clone(), headers).map_err(BuildError::Tracing)
}

/// `[state] redis`: the URL as written, or read from its `env:` or `file:`
/// reference.
async fn shared_redis_url(config: &Config, secrets: &SecretResolver) -> Result<Option<SecretString>, BuildError> {
    let Some(text) = &config.state.redis else { return Ok(None) };
    if text.starts_with("redis://") {
        return Ok(Some(SecretString::from(text.as_str())));
    }
    let reference = SecretRef::parse(text).map_err(|e| BuildError::SharedState(e.to_string()))?;
    let url = secrets.resolve(&reference, None).await.map_err(|e| BuildError::SharedState(e.to_string()))?;
    Ok(Some(url))
}

impl Generation {
    /// This generation's upstream built from exactly `config` at `order`, if any.
    fn unchanged_upstream(&self, order: usize, config: &UpstreamConfig) -> Option<Arc<Upstream>> {
        let at = self.config.upstreams.iter().position(|old| old == config)?;
        (at == order).then(|| self.upstreams.get(at).cloned()).flatten()
    }
}

/// The `Authorization` header for an upstream with a `bearer_token`, read
/// from its secret reference (the resolver caches vault values).
pub async fn upstream_bearer(generation: &Generation, upstream: &Upstream) -> Result<Option<HeaderValue>, VaultError> {
    let Some(reference) = &upstream.bearer_token else { return Ok(None) };
    let token = generation.secrets.resolve(reference, None).await?;
    let mut value = HeaderValue::try_from(format!("Bearer {}", token.expose()))
        .map_err(|_| VaultError::Config(format!("{reference} holds characters a header cannot carry")))?;
    value.set_sensitive(true);
    Ok(Some(value))
}
