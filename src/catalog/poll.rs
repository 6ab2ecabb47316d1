//! Polling upstream catalogs and publishing the merged result.
//!
//! Each upstream has one poller task. An upstream whose fetch fails or
//! returns garbage keeps its last good catalog; one that is down at start
//! joins when it comes up. An unchanged catalog (304, or the same bytes)
//! costs no re-parse.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use arc_swap::{ArcSwap, Guard};
use http::HeaderValue;
use serde::Serialize;

use super::{merge::merge, Catalog, CatalogTool};
use crate::config::VirtualServerConfig;
use crate::integrity::{Integrity, Modes};
use crate::upstream::{Fetched, Upstream};

/// The published catalog and what each upstream last gave.
pub struct CatalogStore {
    published: ArcSwap<Catalog>,
    upstreams: Mutex<BTreeMap<String, UpstreamCatalog>>,
    /// The generation of the catalog last published: what event streams
    /// wait on.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for CatalogStore {
    fn default() -> Self {
        CatalogStore {
            published: ArcSwap::default(),
            upstreams: Mutex::default(),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

/// One upstream's last good catalog and its fetch status.
#[derive(Default)]
struct UpstreamCatalog {
    tools: Arc<Vec<Arc<CatalogTool>>>,
    etag: Option<String>,
    body_hash: Option<u64>,
    status: UpstreamStatus,
}

/// How an upstream's catalog fetches are going, for /status and metrics.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UpstreamStatus {
    /// Whether its last catalog fetch worked.
    pub up: bool,
    /// When it was last fetched (seconds since the Unix epoch).
    pub last_fetch: Option<u64>,
    /// When a fetch last worked.
    pub last_success: Option<u64>,
    /// Why the last fetch failed, if it did.
    pub last_error: Option<String>,
    /// Tools in its last good catalog.
    pub tools: usize,
    /// Definitions left out of its last catalog, with the reasons.
    pub skipped: Vec<String>,
    /// For an MCP upstream, the revision it is spoken to in, once known
    /// (`2026-07-28`, or the one a `2025-11-25`-era session negotiated).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_protocol_version: Option<String>,
}

/// Catalog polling settings.
#[derive(Debug, Clone, Copy)]
pub struct PollSettings {
    /// Time between fetches.
    pub interval: Duration,
    /// The longest one fetch may take.
    pub timeout: Duration,
    /// The largest catalog accepted.
    pub max_bytes: usize,
    /// The most added, at random, to each wait between fetches.
    pub jitter: Duration,
}

impl CatalogStore {
    /// The current catalog: one atomic load, no lock.
    pub fn load(&self) -> Guard<Arc<Catalog>> {
        self.published.load()
    }

    /// The current catalog, owned: for holding across a call's awaits (see
    /// `Gateway::runtime_owned`).
    pub fn load_owned(&self) -> Arc<Catalog> {
        self.published.load_full()
    }

    /// Each upstream's status, by name.
    pub fn statuses(&self) -> BTreeMap<String, UpstreamStatus> {
        self.lock().iter().map(|(name, u)| (name.clone(), u.status.clone())).collect()
    }

    /// Rebuilds and publishes the merged catalog from the upstreams given
    /// (the current config's, in order), each served tool held to its pin
    /// (`review`). Entries of upstreams no longer configured are dropped,
    /// so their tools leave the catalog at once.
    pub fn publish(
        &self,
        upstreams: &[Arc<Upstream>],
        review: Option<(&Integrity, Modes)>,
        servers: &[VirtualServerConfig],
    ) {
        let mut state = self.lock();
        state.retain(|name, _| upstreams.iter().any(|u| *u.name == **name));
        let lists: Vec<_> =
            upstreams.iter().map(|u| (u.clone(), state.entry(u.name.to_string()).or_default().tools.clone())).collect();
        // Merge under the lock so two pollers cannot publish out of order.
        let before = self.published.load();
        let mut catalog = merge(&lists, &before, review);
        // Views of the catalog published with it (`servers.rs`).
        catalog.servers = super::servers::build(&catalog, servers, &before);
        let catalog = Arc::new(catalog);
        let generation = catalog.generation();
        self.published.store(catalog);
        self.changed.send_replace(generation);
    }

    /// Wakes at every publish (after a reload too, whose new policies may
    /// show a caller other tools).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Forgets every upstream's ETag and body hash so the next fetch is parsed
    /// again (after a reload that may change toolkit or version defaults).
    pub fn forget_validators(&self) {
        for entry in self.lock().values_mut() {
            entry.etag = None;
            entry.body_hash = None;
        }
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, UpstreamCatalog>> {
        // A poisoned lock only means a poller panicked mid-update; the map is
        // still usable.
        self.upstreams.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Fetches one upstream's catalog once and records the outcome in its
    /// status.
    pub async fn refresh(
        &self,
        upstream: &Upstream,
        authorization: Option<HeaderValue>,
        settings: PollSettings,
    ) -> Refreshed {
        let etag = self.lock().get(&*upstream.name).and_then(|u| u.etag.clone());
        let outcome =
            upstream.fetch_catalog(authorization, etag.as_deref(), settings.timeout, settings.max_bytes).await;
        let now = unix_now();
        let mut state = self.lock();
        let entry = state.entry(upstream.name.to_string()).or_default();
        entry.status.last_fetch = Some(now);
        entry.status.mcp_protocol_version = upstream.mcp_protocol_version();
        let failure = match outcome {
            Ok(Fetched::NotModified) => None,
            Ok(Fetched::Body { body, etag }) => {
                let hash = hash_of(&body);
                if entry.body_hash == Some(hash) {
                    entry.etag = etag;
                    None
                } else {
                    let normalised = upstream.read_catalog(&body);
                    match normalised {
                        Ok((tools, skipped)) => {
                            for s in &skipped {
                                tracing::warn!(
                                    upstream = &*upstream.name,
                                    tool = s.what,
                                    reason = s.reason,
                                    "tool definition skipped"
                                );
                            }
                            tracing::info!(upstream = &*upstream.name, tools = tools.len(), "catalog updated");
                            entry.status.skipped =
                                skipped.into_iter().map(|s| format!("{}: {}", s.what, s.reason)).collect();
                            entry.status.tools = tools.len();
                            entry.tools = Arc::new(tools.into_iter().map(Arc::new).collect());
                            entry.etag = etag;
                            entry.body_hash = Some(hash);
                            mark_up(&mut entry.status, now);
                            return Refreshed::Changed;
                        }
                        Err(e) => Some(e.to_string()),
                    }
                }
            }
            Err(e) => Some(e.to_string()),
        };
        match failure {
            None => {
                mark_up(&mut entry.status, now);
                Refreshed::Unchanged
            }
            Some(error) => {
                if entry.status.up || entry.status.last_error.as_deref() != Some(error.as_str()) {
                    tracing::warn!(
                        upstream = &*upstream.name,
                        error,
                        "catalog fetch failed; keeping the last good catalog"
                    );
                }
                entry.status.up = false;
                entry.status.last_error = Some(error);
                Refreshed::Failed
            }
        }
    }

    /// One upstream's status.
    pub fn status(&self, name: &str) -> Option<UpstreamStatus> {
        self.lock().get(name).map(|u| u.status.clone())
    }
}

/// What one catalog refresh came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refreshed {
    /// A new tool list: the merged catalog must be republished.
    Changed,
    /// Fetched, and the same as before (or 304).
    Unchanged,
    /// Not fetched, or not readable: the last good catalog stays.
    Failed,
}

fn mark_up(status: &mut UpstreamStatus, now: u64) {
    status.up = true;
    status.last_success = Some(now);
    status.last_error = None;
}

fn hash_of(body: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    body.hash(&mut hasher);
    hasher.finish()
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}
