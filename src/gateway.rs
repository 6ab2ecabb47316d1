//! The gateway's shared state: the config-derived runtime and the catalog.
//!
//! Both are read on the hot path through atomic snapshots (arc-swap), never a
//! lock. A reload swaps the whole runtime at once; in-flight calls keep the
//! snapshot they started with.

use std::sync::Arc;

use std::time::Duration;

use arc_swap::{ArcSwap, Guard};
use http::HeaderValue;

use crate::catalog::poll::{CatalogStore, PollSettings};
use crate::auth::{AuthError, Authenticator};
use crate::config::Config;
use crate::vault::{SecretResolver, VaultError};
use crate::upstream::Upstream;

/// Why a config could not be turned into a runtime.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The vault or a secret the config needs at start could not be read.
    #[error("secrets: {0}")]
    Vault(#[from] VaultError),
    /// `[auth]` could not be set up (its secrets, its JWKS).
    #[error("auth: {0}")]
    Auth(#[from] AuthError),
    /// An upstream URL that http cannot use.
    #[error("upstream {name}: {source}")]
    UpstreamUrl {
        /// The upstream's name.
        name: String,
        /// Why.
        source: http::uri::InvalidUri,
    },
}

/// Everything derived from one version of the config.
#[derive(Debug)]
pub struct Runtime {
    /// The config it was built from.
    pub config: Config,
    /// The upstreams, in config order.
    pub upstreams: Vec<Arc<Upstream>>,
    /// Catalog polling settings.
    pub poll: PollSettings,
    /// Reads secret references (env, file, vault).
    pub secrets: SecretResolver,
    /// Checks client credentials.
    pub authenticator: Authenticator,
}

impl Runtime {
    /// Builds a runtime from a validated config: resolves what `[auth]`
    /// needs and loads its keys, so it runs inside a tokio runtime.
    pub async fn build(config: Config) -> Result<Runtime, BuildError> {
        let vault_timeout = config.vault.as_ref().map_or(Duration::from_secs(2), |v| v.timeout);
        let secrets = SecretResolver::new(config.vault.clone(), vault_timeout)?;
        let authenticator = Authenticator::new(&config.auth, &secrets).await?;
        let upstreams = config
            .upstreams
            .iter()
            .enumerate()
            .map(|(order, u)| {
                Upstream::from_config(order, u).map(Arc::new).map_err(|source| BuildError::UpstreamUrl {
                    name: u.name.get_ref().0.clone(),
                    source,
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let poll = PollSettings {
            interval: config.catalog.poll_interval.0,
            timeout: config.catalog.request_timeout.0,
            max_bytes: config.catalog.max_catalog_bytes,
        };
        Ok(Runtime { config, upstreams, poll, secrets, authenticator })
    }
}

/// The state every part of the gateway shares.
pub struct Gateway {
    runtime: ArcSwap<Runtime>,
    /// The merged catalog and each upstream's last fetch.
    pub catalog: CatalogStore,
}

impl Gateway {
    /// A gateway for a config; nothing runs until [`Gateway::start_polling`].
    pub async fn new(config: Config) -> Result<Arc<Gateway>, BuildError> {
        let runtime = Runtime::build(config).await?;
        let gateway = Arc::new(Gateway { runtime: ArcSwap::from_pointee(runtime), catalog: CatalogStore::default() });
        gateway.catalog.publish(&gateway.runtime().upstreams);
        Ok(gateway)
    }

    /// The current runtime: one atomic load.
    pub fn runtime(&self) -> Guard<Arc<Runtime>> {
        self.runtime.load()
    }

    /// Starts one poller task per upstream of the current runtime on the
    /// current tokio runtime. Each first fetch happens at once.
    pub fn start_polling(self: &Arc<Self>) {
        for upstream in self.runtime().upstreams.iter() {
            tokio::spawn(poll_upstream(self.clone(), upstream.clone()));
        }
    }

    /// Whether `upstream` (this very instance) is still configured.
    fn is_current(&self, upstream: &Arc<Upstream>) -> bool {
        self.runtime().upstreams.iter().any(|u| Arc::ptr_eq(u, upstream))
    }
}

/// Polls one upstream until it is no longer part of the runtime.
async fn poll_upstream(gateway: Arc<Gateway>, upstream: Arc<Upstream>) {
    let settings = gateway.runtime().poll;
    let mut ticks = tokio::time::interval(settings.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if !gateway.is_current(&upstream) {
            return;
        }
        let bearer = match upstream_bearer(&gateway.runtime(), &upstream).await {
            Ok(bearer) => bearer,
            Err(e) => {
                tracing::warn!(upstream = upstream.name, error = %e, "cannot read the upstream's bearer_token; catalog not fetched");
                continue;
            }
        };
        if gateway.catalog.refresh(&upstream, bearer, settings).await && gateway.is_current(&upstream) {
            gateway.catalog.publish(&gateway.runtime().upstreams);
        }
    }
}

/// The `Authorization` header for an upstream with a `bearer_token`, read
/// from its secret reference (the resolver caches vault values).
pub async fn upstream_bearer(runtime: &Runtime, upstream: &Upstream) -> Result<Option<HeaderValue>, VaultError> {
    let Some(reference) = &upstream.bearer_token else { return Ok(None) };
    let token = runtime.secrets.resolve(reference, None).await?;
    let mut value = HeaderValue::try_from(format!("Bearer {}", token.expose()))
        .map_err(|_| VaultError::Config(format!("{reference} holds characters a header cannot carry")))?;
    value.set_sensitive(true);
    Ok(Some(value))
}
