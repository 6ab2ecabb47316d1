//! The gateway's shared state: the config-derived generation and the catalog.
//!
//! Both are read on the hot path through atomic snapshots (arc-swap), never a
//! lock. A reload swaps the whole generation at once; in-flight calls keep the
//! snapshot they started with.

mod generation;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::{ArcSwap, Guard};

use crate::approvals::Approvals;
use crate::catalog::poll::{CatalogStore, Refreshed};
use crate::config::{Config, ConfigError};
use crate::integrity::{Integrity, Keep, Modes};
use crate::metrics::Metrics;
use crate::otel::Span;
use crate::recent_calls::RecentCalls;
use crate::upstream::{Upstream, WatchBounds, WatchEnd};

pub use generation::{upstream_bearer, BuildError, Generation};

/// The state every part of the gateway shares.
pub struct Gateway {
    generation: ArcSwap<Generation>,
    /// The merged catalog and each upstream's last fetch.
    pub catalog: CatalogStore,
    /// Prometheus metrics, served on the admin listener.
    pub metrics: Metrics,
    /// The most recent calls, for the admin listener.
    pub recent_calls: RecentCalls,
    /// How many configs have been applied (1 = the one started with).
    generation_number: AtomicU64,
    /// The last reload's outcome, for /status.
    last_reload: std::sync::Mutex<Option<ReloadReport>>,
    /// Serialises reloads: the file watcher and SIGHUP may fire together.
    reloading: tokio::sync::Mutex<()>,
    /// Rung by a poller whose upstream's catalog changed, and by tool
    /// integrity when a decision changes what is served.
    catalog_changed: Arc<tokio::sync::Notify>,
    /// Tool definitions pinned, and the changes that wait for review.
    pub integrity: Arc<Integrity>,
    /// Calls held for a person's approval, and the decisions.
    pub approvals: Arc<Approvals>,
    /// The data plane's bound address (`public_url`'s default).
    listen: std::sync::OnceLock<std::net::SocketAddr>,
}

/// How the last reload went.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ReloadReport {
    /// Seconds since the Unix epoch.
    pub at: u64,
    /// Whether the new config was applied.
    pub ok: bool,
    /// Why not, with the key and line.
    pub error: Option<String>,
}

/// Why a reload was refused (the old config keeps serving).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file does not parse or validate.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// It validates but cannot be built (a secret `[auth]` needs, a JWKS).
    #[error(transparent)]
    Build(#[from] BuildError),
}

impl Gateway {
    /// A gateway for a config; no upstream is polled until
    /// [`Gateway::start_polling`]. Must run inside a tokio runtime.
    pub async fn new(config: Config) -> Result<Arc<Gateway>, BuildError> {
        Self::build(config, false).await
    }

    /// A gateway for `otc-gateway check`: it reads the pins a running
    /// gateway keeps and writes none.
    pub async fn for_check(config: Config) -> Result<Arc<Gateway>, BuildError> {
        Self::build(config, true).await
    }

    async fn build(config: Config, read_only: bool) -> Result<Arc<Gateway>, BuildError> {
        let generation = Generation::build(config, None).await?;
        let catalog_changed = Arc::new(tokio::sync::Notify::new());
        let (dir, redis) = (generation.config.state.dir.as_path(), generation.redis.clone());
        let keep = if read_only { Keep::ReadOnly(dir, redis) } else { Keep::State(dir, redis) };
        let integrity = Arc::new(Integrity::open(keep, catalog_changed.clone()).await?);
        let approvals = Arc::new(Approvals::open(dir, generation.redis.clone(), read_only).await?);
        let gateway = Arc::new(Gateway {
            generation: ArcSwap::from_pointee(generation),
            catalog: CatalogStore::default(),
            metrics: Metrics::new(),
            recent_calls: RecentCalls::default(),
            generation_number: AtomicU64::new(1),
            last_reload: std::sync::Mutex::new(None),
            reloading: tokio::sync::Mutex::new(()),
            catalog_changed,
            integrity,
            approvals,
            listen: std::sync::OnceLock::new(),
        });
        gateway.metrics.set_generation(1);
        gateway.publish(&gateway.generation());
        if !read_only {
            let every = gateway.generation().poll.interval;
            tokio::spawn(gateway.integrity.clone().sync(every));
        }
        // Idle until a poller rings; pollers start with `start_polling`.
        tokio::spawn(publish_changes(gateway.clone()));
        Ok(gateway)
    }

    /// Records the data plane's bound address, the default base of the
    /// links the gateway hands out.
    pub fn set_listen_addr(&self, addr: std::net::SocketAddr) {
        let _ = self.listen.set(addr);
    }

    /// The base of every link the gateway hands out: `[server] public_url`,
    /// else `http://` and the bound address (loopback for a wildcard one).
    pub fn public_url(&self, generation: &Generation) -> String {
        if let Some(url) = &generation.config.server.public_url {
            return url.0.clone();
        }
        let mut addr = self.listen.get().copied().unwrap_or_else(|| ([127, 0, 0, 1], 8080).into());
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        format!("http://{addr}")
    }

    /// The config generation: 1 at start, one more per applied reload.
    pub fn generation_number(&self) -> u64 {
        self.generation_number.load(Ordering::Acquire)
    }

    /// The last reload's outcome, if there was one.
    pub fn last_reload(&self) -> Option<ReloadReport> {
        self.last_reload.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Reloads the config file: parses and validates the whole file and
    /// builds the new generation before anything changes; then swaps it in at
    /// once. On any error the old config keeps serving. In-flight calls
    /// finish on the generation they started with.
    pub async fn reload(self: &Arc<Self>, path: &Path) -> Result<(), ReloadError> {
        let _one_at_a_time = self.reloading.lock().await;
        // A trace of its own under the `[tracing]` in force before it.
        let mut span = self.generation().tracer.as_ref().and_then(|t| t.start_root("config reload"));
        let outcome = self.apply(path).await;
        if let Some(span) = &mut span {
            span.set_bool("otc.reload.applied", outcome.is_ok());
            if outcome.is_err() {
                span.fail("reload_refused");
            }
        }
        let report = ReloadReport {
            at: std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            ok: outcome.is_ok(),
            error: outcome.as_ref().err().map(ToString::to_string),
        };
        *self.last_reload.lock().unwrap_or_else(|p| p.into_inner()) = Some(report);
        self.metrics.record_reload(outcome.is_ok());
        match &outcome {
            Ok(()) => tracing::info!(generation = self.generation_number(), "config reloaded"),
            Err(e) => tracing::error!(error = %e, "config reload refused; still serving the previous config"),
        }
        outcome
    }

    async fn apply(self: &Arc<Self>, path: &Path) -> Result<(), ReloadError> {
        let config = Config::load(path)?;
        let old = self.generation();
        for (key, old_value, new_value) in [
            ("server.listen", &old.config.server.listen, &config.server.listen),
            ("server.admin_listen", &old.config.server.admin_listen, &config.server.admin_listen),
        ] {
            if old_value != new_value {
                tracing::warn!(
                    key,
                    old = old_value,
                    new = new_value,
                    "a listen address cannot move without a restart; keeping the old one"
                );
            }
        }
        let generation = Generation::build(config, Some(&old)).await?;
        let removed: Vec<String> = old
            .upstreams
            .iter()
            .filter(|u| !generation.upstreams.iter().any(|n| n.name == u.name))
            .map(|u| u.name.to_string())
            .collect();
        // Instances not carried over (removed, or changed and built anew).
        let retired: Vec<Arc<Upstream>> =
            old.upstreams.iter().filter(|u| !generation.upstreams.iter().any(|n| Arc::ptr_eq(n, u))).cloned().collect();
        self.generation.store(Arc::new(generation));
        // Their pollers and change streams end now, not at their next turn.
        for upstream in &retired {
            upstream.retire();
        }
        let generation = self.generation_number.fetch_add(1, Ordering::AcqRel) + 1;
        self.metrics.set_generation(generation);
        for name in &removed {
            self.metrics.forget_upstream(name);
        }
        // Toolkit or version defaults may have changed: parse every catalog
        // again. Removed upstreams' tools leave the catalog now; every
        // upstream (new ones included) is polled at once.
        self.catalog.forget_validators();
        self.publish(&self.generation());
        self.start_polling();
        Ok(())
    }

    /// Merges the upstreams' catalogs and publishes the result, each tool
    /// held to its pin under the current `[catalog] pin` and `suspicious`.
    pub fn publish(&self, generation: &Generation) {
        let catalog = &generation.config.catalog;
        let modes = Modes { pin: catalog.pin, suspicious: catalog.suspicious };
        let servers = &generation.config.servers;
        self.catalog.publish(&generation.upstreams, Some((&self.integrity, modes)), servers);
        self.metrics.set_tool_changes_pending(self.integrity.pending());
    }

    /// The current generation: one atomic load.
    pub fn generation(&self) -> Guard<Arc<Generation>> {
        self.generation.load()
    }

    /// The current generation, owned: for holding across a call's awaits. A
    /// thread has only a few slots for cheap `Guard`s; with many calls in
    /// flight each holding one, further loads took arc-swap's slower helping
    /// path (benches/HISTORY.md, "Figures behind the code"). An `Arc` costs one
    /// uncontended increment.
    pub fn generation_owned(&self) -> Arc<Generation> {
        self.generation.load_full()
    }

    /// Starts one poller task per upstream of the current generation on the
    /// current tokio runtime, and for an upstream that announces tool list
    /// changes (MCP) one watcher of the announcements. Each first fetch
    /// happens at once. An upstream already tended (kept by a reload) keeps
    /// its tasks and is fetched at once.
    pub fn start_polling(self: &Arc<Self>) {
        for upstream in self.generation().upstreams.iter() {
            if upstream.start_tending() {
                tokio::spawn(poll_upstream(self.clone(), upstream.clone()));
                tokio::spawn(watch_upstream(self.clone(), upstream.clone()));
            } else {
                upstream.refresh_soon();
            }
        }
    }

    /// Fetches every upstream's catalog once, together, and publishes the
    /// merge: what `otc-gateway check` compares policy patterns against.
    /// Returns the upstreams whose catalog could not be fetched.
    pub async fn fetch_catalogs_once(self: &Arc<Self>) -> Vec<String> {
        let generation = self.generation.load_full();
        let mut fetches = tokio::task::JoinSet::new();
        for upstream in generation.upstreams.iter() {
            let (gateway, generation, upstream) = (self.clone(), generation.clone(), upstream.clone());
            fetches.spawn(async move { gateway.refresh_upstream(&generation, &upstream).await });
        }
        while fetches.join_next().await.is_some() {}
        self.publish(&generation);
        let statuses = self.catalog.statuses();
        generation
            .upstreams
            .iter()
            .filter(|u| !statuses.get(&*u.name).is_some_and(|status| status.up))
            .map(|u| u.name.to_string())
            .collect()
    }

    /// Fetches one upstream's catalog, with its bearer token. An unreadable
    /// bearer token is a failed fetch.
    /// A fetch is a trace of its own under `[tracing]` (at `sample_ratio`).
    async fn refresh_upstream(&self, generation: &Generation, upstream: &Upstream) -> Refreshed {
        let mut span = generation.tracer.as_ref().and_then(|t| t.start_root("catalog poll"));
        let fetch = async {
            match upstream_bearer(generation, upstream).await {
                Ok(bearer) => self.catalog.refresh(upstream, bearer, generation.poll).await,
                Err(e) => {
                    tracing::warn!(upstream = &*upstream.name, error = %e, "cannot read the upstream's bearer_token; catalog not fetched");
                    Refreshed::Failed
                }
            }
        };
        // A recorded poll's log lines carry its ids, as a request's do.
        let refreshed = crate::otel::Logged::new(std::pin::pin!(fetch), span.as_ref().map(Span::log_context)).await;
        if let Some(span) = &mut span {
            span.set("otc.upstream", &*upstream.name);
            span.set("otc.catalog.result", format!("{refreshed:?}").to_ascii_lowercase());
            if refreshed == Refreshed::Failed {
                span.fail("fetch_failed");
            }
        }
        refreshed
    }

    /// Whether `upstream` (this very instance) is still configured.
    fn is_current(&self, upstream: &Arc<Upstream>) -> bool {
        self.generation().upstreams.iter().any(|u| Arc::ptr_eq(u, upstream))
    }
}

/// Changes that arrive within this window of each other are merged once.
const PUBLISH_COALESCE: Duration = Duration::from_millis(20);

/// Publishes the merged catalog after upstream catalogs change. Changes that
/// arrive together (every upstream answering at start, say) are merged once,
/// not once per upstream: with 50 upstreams of 200 tools, merging (and
/// rendering GET /tools) per upstream was most of the time to a complete
/// catalog (benches/README.md).
async fn publish_changes(gateway: Arc<Gateway>) {
    loop {
        gateway.catalog_changed.notified().await;
        tokio::time::sleep(PUBLISH_COALESCE).await;
        let generation = gateway.generation();
        gateway.publish(&generation);
        crate::allocator::release_freed_memory();
        for pattern in generation.access.unmatched_patterns(&gateway.catalog.load()) {
            tracing::warn!(pattern, "a policy pattern matches no tool in the catalog");
        }
    }
}

/// The first retry after a failed catalog fetch; each next one waits twice
/// as long, up to `catalog.poll_interval`.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The least time between two fetches asked for by change announcements: a
/// server that announces changes in a loop is listed once a second, not once
/// per announcement.
const CHANGE_FETCH_GAP: Duration = Duration::from_secs(1);

/// Polls one upstream until it is no longer part of the generation: every
/// `poll_interval` while its fetches work, sooner after one fails (1 s, 2 s,
/// 4 s ... up to the interval), so that an upstream that starts after the
/// gateway, or comes back, is picked up within seconds even when the
/// interval is minutes; and at once when the upstream announces that its
/// tool list changed ([`watch_upstream`]).
async fn poll_upstream(gateway: Arc<Gateway>, upstream: Arc<Upstream>) {
    let (interval, jitter) = {
        let generation = gateway.generation();
        (generation.poll.interval, generation.poll.jitter)
    };
    let mut retry = FIRST_RETRY;
    let mut asked = false;
    loop {
        if !gateway.is_current(&upstream) {
            return;
        }
        let fetched_at = tokio::time::Instant::now();
        upstream.close_stale_connections();
        let refreshed = gateway.refresh_upstream(&gateway.generation(), &upstream).await;
        if !gateway.is_current(&upstream) {
            return;
        }
        if asked {
            tracing::debug!(
                upstream = &*upstream.name,
                ?refreshed,
                "catalog fetched as asked (a change announced, a stream opened, a reload)"
            );
        }
        if refreshed == Refreshed::Changed {
            gateway.catalog_changed.notify_one();
        }
        if let Some(status) = gateway.catalog.status(&upstream.name) {
            gateway.metrics.set_upstream(&upstream.name, status.up, status.tools);
        }
        let wait = if refreshed == Refreshed::Failed {
            let wait = retry.min(interval);
            retry = retry.saturating_mul(2);
            wait
        } else {
            retry = FIRST_RETRY;
            interval
        };
        // A uuid's random bits: no RNG crate just for this.
        let spread = jitter.mul_f64((uuid::Uuid::new_v4().as_u128() as u16) as f64 / f64::from(u16::MAX));
        asked = tokio::select! {
            () = tokio::time::sleep(wait + spread) => false,
            () = upstream.refresh_wanted() => {
                tokio::select! {
                    () = tokio::time::sleep_until(fetched_at + CHANGE_FETCH_GAP) => true,
                    () = upstream.retired() => return,
                }
            }
            () = upstream.retired() => return,
        };
    }
}

/// The longest pause between attempts to open an upstream's change stream.
const MAX_WATCH_PAUSE: Duration = Duration::from_secs(30);

/// How long a change stream may stay silent (keep-alive comments count)
/// before it is opened anew: a connection that died without a word is
/// noticed within this, while the poller keeps polling meanwhile.
const WATCH_IDLE: Duration = Duration::from_secs(300);

/// Watches one upstream's announcements that its tool list changed (an MCP
/// server's `list_changed` notifications) until it is no longer part of the
/// generation; each one has its poller fetch the catalog at once. A stream that
/// drops is opened again after 1 s, 2 s, 4 s ... up to 30 s, and then the
/// catalog is fetched once (changes may have been missed). Returns at once for
/// an upstream that makes no announcements. Calls never wait on it: the
/// stream has a connection of its own.
async fn watch_upstream(gateway: Arc<Gateway>, upstream: Arc<Upstream>) {
    if !upstream.may_announce_changes() {
        return;
    }
    let mut pause = FIRST_RETRY;
    let mut refresh_on_open = true;
    loop {
        if !gateway.is_current(&upstream) {
            return;
        }
        let (bearer, bounds) = {
            let generation = gateway.generation_owned();
            let bearer = upstream_bearer(&generation, &upstream).await;
            let bounds = WatchBounds {
                open_timeout: generation.poll.timeout,
                idle_timeout: WATCH_IDLE,
                max_event_bytes: generation.poll.max_bytes,
            };
            (bearer, bounds)
        };
        let watched = match bearer {
            Ok(bearer) => tokio::select! {
                watched = upstream.watch_tool_list(bearer, bounds, refresh_on_open) => watched,
                () = upstream.retired() => return,
            },
            // Logged by the poller, which fails the same way.
            Err(e) => Some(crate::upstream::Watched { opened: false, end: WatchEnd::Dropped(e.to_string()) }),
        };
        let Some(watched) = watched else { return };
        refresh_on_open = true;
        match watched.end {
            WatchEnd::Relinked => {}
            // Reopened at once, and nothing was missed: no fetch.
            WatchEnd::Quiet => refresh_on_open = false,
            WatchEnd::Dropped(reason) => {
                if watched.opened {
                    pause = FIRST_RETRY;
                    tracing::info!(
                        upstream = &*upstream.name,
                        reason,
                        "the tool list change stream closed; reopening it"
                    );
                } else {
                    tracing::debug!(
                        upstream = &*upstream.name,
                        reason,
                        ?pause,
                        "cannot open the tool list change stream"
                    );
                }
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = upstream.retired() => return,
                }
                pause = pause.saturating_mul(2).min(MAX_WATCH_PAUSE);
            }
        }
    }
}
