//! Prometheus metrics, served in the text exposition format on the admin
//! listener (`GET /metrics`).
//!
//! [`Metrics`] owns its own [`prometheus::Registry`] (not the crate's global
//! default one), so each gateway, and each test, has its own counters.
//!
//! The names below are a contract: dashboards and alert rules rely on them.
//!
//! | name | type | labels |
//! | --- | --- | --- |
//! | `otc_gateway_http_requests_total` | counter | `route`, `status` |
//! | `otc_gateway_tool_calls_total` | counter | `tool`, `upstream`, `outcome` |
//! | `otc_gateway_tool_call_duration_seconds` | histogram | `tool`, `upstream` |
//! | `otc_gateway_upstream_up` | gauge | `upstream` |
//! | `otc_gateway_catalog_tools` | gauge | `upstream` |
//! | `otc_gateway_config_reloads_total` | counter | `result` |
//! | `otc_gateway_config_generation` | gauge | |
//! | `otc_gateway_tool_changes_pending` | gauge | |
//! | `otc_gateway_vault_requests_total` | counter | `backend`, `outcome` |
//! | `otc_gateway_vault_stale_served_total` | counter | `backend` |
//! | `otc_gateway_idempotency_total` | counter | `result` |
//! | `otc_gateway_oauth_challenges_total` | counter | `provider`, `event` |
//! | `otc_gateway_oauth_refreshes_total` | counter | `provider`, `outcome` |
//! | `otc_gateway_approvals_total` | counter | `rule`, `outcome` |
//! | `otc_gateway_rate_limit_store_unavailable_total` | counter | `decision` |
//! | `otc_gateway_tool_searches_total` | counter | `front` |
//! | `otc_gateway_tool_search_results_total` | counter | `front` |
//! | `otc_gateway_tool_search_duration_seconds` | histogram | `front` |
//! | `otc_gateway_trace_spans_total` | counter | `result` |
//!
//! Label values must come only from the config and the catalog (route names,
//! upstream names, resolved tool ids, backend kinds), never from a request,
//! so that the number of series stays bounded. [`Metrics::forget_upstream`]
//! drops every series of an upstream that left the config.
//!
//! # Cost on the hot path
//!
//! - [`Metrics::record_http`] with one of [`ROUTES`] and a status in
//!   100..=599: an index into a fixed table and one atomic add; the counter is
//!   created on the first use of that pair (so no zero series for pairs that
//!   never happen). Any other route goes through the label lookup below.
//! - [`Metrics::record_call`]: one read-locked hash lookup by upstream and
//!   tool (no allocation) in a cache of label handles, then one atomic add
//!   for the outcome counter and one histogram observation (two atomic adds
//!   and a linear scan of 15 bucket bounds). The first call of a tool on an
//!   upstream takes the write lock once to create its handles.
//! - The rest (gauges, reloads, vault) resolve their labels on each use: a
//!   hash of the label values and a read-locked map lookup inside the
//!   `prometheus` crate, about a hundred nanoseconds. They are not per call.

use std::collections::HashMap;
use std::sync::{OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// The `Content-Type` of [`Metrics::render`]'s output.
pub const CONTENT_TYPE: &str = prometheus::TEXT_FORMAT;

/// The routes whose `otc_gateway_http_requests_total` counters are cached:
/// the data plane's route labels. Others are counted too, more slowly.
pub const ROUTES: [&str; 12] = [
    "/health",
    "/tools",
    "/tools/search",
    "/tools/call",
    "/mcp",
    "/servers/{name}/tools",
    "/servers/{name}/tools/search",
    "/servers/{name}/tools/call",
    "/servers/{name}/mcp",
    "/oauth",
    "/.well-known/oauth-protected-resource",
    "other",
];

/// Bucket upper bounds of `otc_gateway_tool_call_duration_seconds`, in
/// seconds: 0.5 ms to 30 s, roughly 1-2.5-5 per decade.
pub const DURATION_BUCKETS: [f64; 15] =
    [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// Bucket upper bounds of `otc_gateway_tool_search_duration_seconds`, in
/// seconds: 50 µs to 100 ms.
pub const SEARCH_BUCKETS: [f64; 11] = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1];

/// The lowest and highest statuses that have a cached counter.
const STATUS_MIN: u16 = 100;
const STATUS_MAX: u16 = 599;
const STATUS_SLOTS: usize = (STATUS_MAX - STATUS_MIN + 1) as usize;

/// How a tool call ended, the `outcome` label of `otc_gateway_tool_calls_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CallOutcome {
    /// The tool ran and succeeded.
    Success,
    /// The tool ran (or was sent) and reported a failure.
    ToolError,
    /// The input did not match the tool's schema; the upstream was not called.
    ValidationError,
    /// The gateway or the upstream failed (unreachable, bad answer, timeout).
    ServerError,
    /// The caller was not allowed to call the tool.
    Denied,
}

impl CallOutcome {
    /// Every outcome, in the order of their cache slots.
    pub const ALL: [CallOutcome; 5] = [
        CallOutcome::Success,
        CallOutcome::ToolError,
        CallOutcome::ValidationError,
        CallOutcome::ServerError,
        CallOutcome::Denied,
    ];

    /// The label value: `success`, `tool_error`, `validation_error`,
    /// `server_error` or `denied`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallOutcome::Success => "success",
            CallOutcome::ToolError => "tool_error",
            CallOutcome::ValidationError => "validation_error",
            CallOutcome::ServerError => "server_error",
            CallOutcome::Denied => "denied",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for CallOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The cached label handles of one tool on one upstream.
struct CallSeries {
    duration: Histogram,
    /// One counter per [`CallOutcome`], created on first use.
    outcomes: [OnceLock<IntCounter>; 5],
}

/// Cached call handles: upstream name, then tool id.
/// Label handles by upstream, then tool (foldhash: the lookups are per call).
type CallCache = HashMap<String, HashMap<String, CallSeries, foldhash::fast::RandomState>, foldhash::fast::RandomState>;

/// The gateway's metrics and the registry that exports them.
pub struct Metrics {
    registry: Registry,
    http_requests: IntCounterVec,
    tool_calls: IntCounterVec,
    tool_call_duration: HistogramVec,
    upstream_up: IntGaugeVec,
    catalog_tools: IntGaugeVec,
    config_generation: IntGauge,
    tool_changes_pending: IntGauge,
    vault_requests: IntCounterVec,
    vault_stale_served: IntCounterVec,
    /// `http_requests` children for [`ROUTES`] × statuses 100..=599.
    http_cache: Vec<Vec<OnceLock<IntCounter>>>,
    reload_success: IntCounter,
    reload_error: IntCounter,
    calls: RwLock<CallCache>,
    /// `vault_requests` and `vault_stale_served` as the vault's own totals say.
    vault_synced: Synced,
    vault_stale_synced: Synced,
    /// `otc_gateway_idempotency_total`, synced from the store's own totals.
    idempotency: Synced,
    oauth_challenges: IntCounterVec,
    oauth_refreshes: IntCounterVec,
    approvals: IntCounterVec,
    /// `otc_gateway_rate_limit_store_unavailable_total`, from the shared
    /// buckets' totals.
    rate_limit_store: Synced,
    /// `otc_gateway_trace_spans_total`, from the exporter's totals.
    trace_spans: Synced,
    searches: IntCounterVec,
    search_results: IntCounterVec,
    search_duration: HistogramVec,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// A counter brought up to running totals another part keeps (a store's own
/// counts, read when `/metrics` is scraped): each sync adds what a total grew
/// by since the last one. A total lower than before means a new store (a
/// reload rebuilt it), which counts from zero again.
struct Synced {
    counter: IntCounterVec,
    /// The total last synced, by label values.
    last: std::sync::Mutex<HashMap<Vec<String>, u64>>,
}

impl Synced {
    fn new(counter: IntCounterVec) -> Synced {
        Synced { counter, last: Default::default() }
    }

    /// Brings the series of `labels` up to `total`.
    fn sync(&self, labels: &[&str], total: u64) {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let before = last.insert(labels.iter().map(|l| (*l).to_owned()).collect(), total).unwrap_or(0);
        let grown = if total >= before { total - before } else { total };
        self.counter.with_label_values(labels).inc_by(grown);
    }
}

/// Registers a collector. The definitions are fixed and their names
/// distinct, so this cannot fail at run time; the unit tests construct them.
fn register<C: prometheus::core::Collector + Clone + 'static>(registry: &Registry, collector: C) -> C {
    registry.register(Box::new(collector.clone())).expect("fixed metric definitions register");
    collector
}

fn counter_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    register(registry, IntCounterVec::new(Opts::new(name, help), labels).expect("fixed metric definition is valid"))
}

fn gauge_vec(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    register(registry, IntGaugeVec::new(Opts::new(name, help), labels).expect("fixed metric definition is valid"))
}

impl Metrics {
    /// All the metrics, registered in a new registry. Both
    /// `otc_gateway_config_reloads_total` series start at 0 so that alert
    /// rules on them have a series to read from the start.
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let http_requests = counter_vec(
            &registry,
            "otc_gateway_http_requests_total",
            "HTTP requests answered on the data plane, by route and status.",
            &["route", "status"],
        );
        let tool_calls = counter_vec(
            &registry,
            "otc_gateway_tool_calls_total",
            "Tool calls, by resolved tool id, upstream and outcome.",
            &["tool", "upstream", "outcome"],
        );
        let tool_call_duration = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "otc_gateway_tool_call_duration_seconds",
                    "Duration of tool calls as the gateway measured them, in seconds.",
                )
                .buckets(DURATION_BUCKETS.to_vec()),
                &["tool", "upstream"],
            )
            .expect("fixed metric definition is valid"),
        );
        let upstream_up = gauge_vec(
            &registry,
            "otc_gateway_upstream_up",
            "1 when the upstream's last catalog fetch worked, else 0.",
            &["upstream"],
        );
        let catalog_tools = gauge_vec(
            &registry,
            "otc_gateway_catalog_tools",
            "Tools in the upstream's last good catalog.",
            &["upstream"],
        );
        let config_reloads = counter_vec(
            &registry,
            "otc_gateway_config_reloads_total",
            "Config reloads, by result (success or error).",
            &["result"],
        );
        let config_generation = register(
            &registry,
            IntGauge::new(
                "otc_gateway_config_generation",
                "Generation of the config in force: 1 at start, +1 on each successful reload.",
            )
            .expect("fixed metric definition is valid"),
        );
        let tool_changes_pending = register(
            &registry,
            IntGauge::new(
                "otc_gateway_tool_changes_pending",
                "Tool definition changes (and flagged new tools) that wait for an operator's review.",
            )
            .expect("fixed metric definition is valid"),
        );
        let vault_requests = counter_vec(
            &registry,
            "otc_gateway_vault_requests_total",
            "Requests to secret backends, by backend and outcome.",
            &["backend", "outcome"],
        );
        let vault_stale_served = counter_vec(
            &registry,
            "otc_gateway_vault_stale_served_total",
            "Secrets served from a stale cache entry because the backend failed.",
            &["backend"],
        );
        let oauth_challenges = counter_vec(
            &registry,
            "otc_gateway_oauth_challenges_total",
            "Per-user OAuth challenges, by provider and event: issued (a call got a link), completed \
             (a grant was stored) or failed (refused, or the code could not be exchanged).",
            &["provider", "event"],
        );
        let approvals = counter_vec(
            &registry,
            "otc_gateway_approvals_total",
            "Calls held for approval, by [[approval]] rule and outcome: requested, approved, denied or expired.",
            &["rule", "outcome"],
        );
        let oauth_refreshes = counter_vec(
            &registry,
            "otc_gateway_oauth_refreshes_total",
            "Refreshes of per-user OAuth grants, by provider and outcome: ok, invalid_grant (the grant \
             was dropped) or error (the provider or store failed).",
            &["provider", "outcome"],
        );
        let rate_limit_store = counter_vec(
            &registry,
            "otc_gateway_rate_limit_store_unavailable_total",
            "Calls checked against shared rate limits while Redis could not answer, by decision: served \
             (uncounted, fail = \"open\") or refused (429, fail = \"closed\").",
            &["decision"],
        );
        let trace_spans = counter_vec(
            &registry,
            "otc_gateway_trace_spans_total",
            "Spans of [tracing], by result: exported (the collector took them) or dropped (the queue \
             was full, or the collector failed or did not answer in time; calls never wait for it).",
            &["result"],
        );
        let idempotency = counter_vec(
            &registry,
            "otc_gateway_idempotency_total",
            "Calls with a client call_id, by what the idempotency store decided: replayed, conflict, \
             in_progress, stored, or store_unavailable (the call ran without deduplication).",
            &["result"],
        );
        let searches = counter_vec(
            &registry,
            "otc_gateway_tool_searches_total",
            "Tool searches answered, by front: otc (GET /tools/search) or mcp (the search_tools tool).",
            &["front"],
        );
        let search_results = counter_vec(
            &registry,
            "otc_gateway_tool_search_results_total",
            "Tools returned by tool searches, by front.",
            &["front"],
        );
        let search_duration = register(
            &registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "otc_gateway_tool_search_duration_seconds",
                    "Time to rank the catalog for one tool search, in seconds.",
                )
                .buckets(SEARCH_BUCKETS.to_vec()),
                &["front"],
            )
            .expect("fixed metric definition is valid"),
        );
        let http_cache = ROUTES.iter().map(|_| (0..STATUS_SLOTS).map(|_| OnceLock::new()).collect()).collect();
        let reload_success = config_reloads.with_label_values(&["success"]);
        let reload_error = config_reloads.with_label_values(&["error"]);
        Metrics {
            registry,
            http_requests,
            tool_calls,
            tool_call_duration,
            upstream_up,
            catalog_tools,
            config_generation,
            tool_changes_pending,
            vault_requests: vault_requests.clone(),
            vault_stale_served: vault_stale_served.clone(),
            http_cache,
            reload_success,
            reload_error,
            calls: RwLock::new(CallCache::default()),
            vault_synced: Synced::new(vault_requests.clone()),
            vault_stale_synced: Synced::new(vault_stale_served.clone()),
            idempotency: Synced::new(idempotency),
            oauth_challenges,
            approvals,
            oauth_refreshes,
            rate_limit_store: Synced::new(rate_limit_store),
            trace_spans: Synced::new(trace_spans),
            searches,
            search_results,
            search_duration,
        }
    }

    /// The registry, to register more collectors alongside these.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// Every metric in the Prometheus text exposition format (version
    /// 0.0.4, see [`CONTENT_TYPE`]), for `GET /metrics`.
    pub fn render(&self) -> String {
        match TextEncoder::new().encode_to_string(&self.registry.gather()) {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(error = %e, "encoding metrics failed");
                String::new()
            }
        }
    }

    /// Counts one answered HTTP request on `route` with `status`.
    ///
    /// `route` must be a fixed label (one of [`ROUTES`] on the data plane),
    /// never a raw path. For [`ROUTES`] and statuses 100..=599 this is a
    /// table index and one atomic add after the first time.
    pub fn record_http(&self, route: &str, status: u16) {
        if let Some(r) = ROUTES.iter().position(|known| *known == route) {
            if (STATUS_MIN..=STATUS_MAX).contains(&status) {
                let slot = &self.http_cache[r][usize::from(status - STATUS_MIN)];
                slot.get_or_init(|| self.http_requests.with_label_values(&[ROUTES[r], status_str(status).as_str()]))
                    .inc();
                return;
            }
        }
        self.http_requests.with_label_values(&[route, status_str(status).as_str()]).inc();
    }

    /// Records one finished tool call: counts it under `outcome` and observes
    /// its duration (`seconds`, as the gateway measured it) in the histogram.
    ///
    /// `tool` is the resolved id (version included), `upstream` the config's
    /// name of the upstream that answered (for calls that reached none, such
    /// as validation errors, the one the tool resolved to).
    pub fn record_call(&self, tool: &str, upstream: &str, outcome: CallOutcome, seconds: f64) {
        {
            let calls = self.read_calls();
            if let Some(series) = calls.get(upstream).and_then(|tools| tools.get(tool)) {
                self.observe(series, tool, upstream, outcome, seconds);
                return;
            }
        }
        let mut calls = self.write_calls();
        let series =
            calls.entry(upstream.to_owned()).or_default().entry(tool.to_owned()).or_insert_with(|| CallSeries {
                duration: self.tool_call_duration.with_label_values(&[tool, upstream]),
                outcomes: Default::default(),
            });
        self.observe(series, tool, upstream, outcome, seconds);
    }

    /// Counts and observes under the cache's lock (read or write), so that
    /// [`Metrics::forget_upstream`] never races with the creation of a series.
    fn observe(&self, series: &CallSeries, tool: &str, upstream: &str, outcome: CallOutcome, seconds: f64) {
        series.outcomes[outcome.index()]
            .get_or_init(|| self.tool_calls.with_label_values(&[tool, upstream, outcome.as_str()]))
            .inc();
        if seconds.is_finite() && seconds >= 0.0 {
            series.duration.observe(seconds);
        }
    }

    /// Sets an upstream's `otc_gateway_upstream_up` (1 or 0) and
    /// `otc_gateway_catalog_tools` after a catalog fetch.
    pub fn set_upstream(&self, name: &str, up: bool, tools: usize) {
        self.upstream_up.with_label_values(&[name]).set(i64::from(up));
        self.catalog_tools.with_label_values(&[name]).set(i64::try_from(tools).unwrap_or(i64::MAX));
    }

    /// Removes every series labelled with this upstream (its gauges, and its
    /// tools' call counters and histograms), for an upstream that left the
    /// config, so that it no longer shows up (as down, or with stale counts).
    pub fn forget_upstream(&self, name: &str) {
        // Errors here only mean "no such series", which is fine.
        let _ = self.upstream_up.remove_label_values(&[name]);
        let _ = self.catalog_tools.remove_label_values(&[name]);
        let mut calls = self.write_calls();
        if let Some(tools) = calls.remove(name) {
            for (tool, series) in tools {
                let _ = self.tool_call_duration.remove_label_values(&[tool.as_str(), name]);
                for outcome in CallOutcome::ALL {
                    if series.outcomes[outcome.index()].get().is_some() {
                        let _ = self.tool_calls.remove_label_values(&[tool.as_str(), name, outcome.as_str()]);
                    }
                }
            }
        }
    }

    /// Counts a config reload: `ok` for `result="success"`, else `"error"`.
    pub fn record_reload(&self, ok: bool) {
        if ok {
            self.reload_success.inc();
        } else {
            self.reload_error.inc();
        }
    }

    /// Sets `otc_gateway_config_generation`.
    pub fn set_generation(&self, generation: u64) {
        self.config_generation.set(i64::try_from(generation).unwrap_or(i64::MAX));
    }

    /// How many tool definition changes wait for an operator.
    pub fn set_tool_changes_pending(&self, pending: usize) {
        self.tool_changes_pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
    }

    /// Counts a request to a secret backend (`backend` is its kind or
    /// configured name, `outcome` a fixed word such as `success`, `error`,
    /// `not_found`).
    pub fn record_vault(&self, backend: &str, outcome: &str) {
        self.vault_requests.with_label_values(&[backend, outcome]).inc();
    }

    /// Brings the vault counters up to the backend's running totals (read
    /// from its stats when /metrics is scraped). Totals that went down mean a
    /// new backend (the `[vault]` section changed): they count from zero.
    pub fn sync_vault_totals(&self, backend: &str, ok: u64, error: u64, stale: u64) {
        self.vault_synced.sync(&[backend, "ok"], ok);
        self.vault_synced.sync(&[backend, "error"], error);
        self.vault_stale_synced.sync(&[backend], stale);
    }

    /// Counts an OAuth challenge event (`issued`, `completed`, `failed`) of
    /// a configured provider.
    pub fn record_oauth_challenge(&self, provider: &str, event: &'static str) {
        self.oauth_challenges.with_label_values(&[provider, event]).inc();
    }

    /// Counts an approval request's event (`requested`, `approved`,
    /// `denied`, `expired`) under its configured rule.
    pub fn record_approval(&self, rule: &str, outcome: &'static str) {
        self.approvals.with_label_values(&[rule, outcome]).inc();
    }

    /// Counts a refresh of a configured provider's grant by outcome (`ok`,
    /// `invalid_grant`, `error`).
    pub fn record_oauth_refresh(&self, provider: &str, outcome: &'static str) {
        self.oauth_refreshes.with_label_values(&[provider, outcome]).inc();
    }

    /// Brings `otc_gateway_rate_limit_store_unavailable_total` up to the
    /// shared buckets' totals (a lower total: a new store, counting afresh).
    pub fn sync_rate_limit_store_failures(&self, served: u64, refused: u64) {
        self.rate_limit_store.sync(&["served"], served);
        self.rate_limit_store.sync(&["refused"], refused);
    }

    /// Brings `otc_gateway_trace_spans_total` up to the exporter's totals.
    pub fn sync_trace_totals(&self, exported: u64, dropped: u64) {
        self.trace_spans.sync(&["exported"], exported);
        self.trace_spans.sync(&["dropped"], dropped);
    }

    /// Brings `otc_gateway_idempotency_total` up to the store's totals
    /// (`(result, total)` pairs, see `IdempotencyStats::by_result`). A total
    /// lower than last time means the store was rebuilt by a reload: it
    /// counts from zero again.
    pub fn sync_idempotency_totals(&self, totals: &[(&'static str, u64)]) {
        for &(result, total) in totals {
            self.idempotency.sync(&[result], total);
        }
    }

    /// Counts one tool search on `front` (`otc` or `mcp`), the tools it
    /// returned and the time it took.
    pub fn record_search(&self, front: &'static str, results: usize, seconds: f64) {
        self.searches.with_label_values(&[front]).inc();
        self.search_results.with_label_values(&[front]).inc_by(results as u64);
        if seconds.is_finite() && seconds >= 0.0 {
            self.search_duration.with_label_values(&[front]).observe(seconds);
        }
    }

    /// Counts a secret served from a stale cache entry because its backend
    /// failed.
    pub fn record_vault_stale(&self, backend: &str) {
        self.vault_stale_served.with_label_values(&[backend]).inc();
    }

    /// The number of `otc_gateway_config_reloads_total` with this result, for
    /// /status and tests.
    pub fn reloads(&self, ok: bool) -> u64 {
        if ok {
            self.reload_success.get()
        } else {
            self.reload_error.get()
        }
    }

    fn read_calls(&self) -> RwLockReadGuard<'_, CallCache> {
        self.calls.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn write_calls(&self) -> RwLockWriteGuard<'_, CallCache> {
        self.calls.write().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A status as its label value.
fn status_str(status: u16) -> String {
    status.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line that starts with `series ` (exact name
    /// and labels as rendered), if any.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .map(|v| v.trim().parse().unwrap())
    }

    #[test]
    fn renders_every_name_with_help_and_type() {
        let m = Metrics::new();
        m.record_http("/tools", 200);
        m.record_call("Calculator.Add@1.0.0", "math", CallOutcome::Success, 0.002);
        m.set_upstream("math", true, 3);
        m.record_reload(true);
        m.set_generation(1);
        m.record_vault("kv2", "success");
        m.record_vault_stale("kv2");
        m.sync_idempotency_totals(&[("replayed", 1)]);
        m.record_search("otc", 3, 0.0002);
        m.sync_trace_totals(5, 2);
        let text = m.render();
        for (name, kind) in [
            ("otc_gateway_http_requests_total", "counter"),
            ("otc_gateway_tool_calls_total", "counter"),
            ("otc_gateway_tool_call_duration_seconds", "histogram"),
            ("otc_gateway_upstream_up", "gauge"),
            ("otc_gateway_catalog_tools", "gauge"),
            ("otc_gateway_config_reloads_total", "counter"),
            ("otc_gateway_config_generation", "gauge"),
            ("otc_gateway_tool_changes_pending", "gauge"),
            ("otc_gateway_vault_requests_total", "counter"),
            ("otc_gateway_vault_stale_served_total", "counter"),
            ("otc_gateway_idempotency_total", "counter"),
            ("otc_gateway_tool_searches_total", "counter"),
            ("otc_gateway_tool_search_results_total", "counter"),
            ("otc_gateway_tool_search_duration_seconds", "histogram"),
            ("otc_gateway_trace_spans_total", "counter"),
        ] {
            assert!(text.contains(&format!("# TYPE {name} {kind}\n")), "{name} {kind} missing in:\n{text}");
            assert!(text.contains(&format!("# HELP {name} ")), "{name} help missing");
        }
        assert_eq!(CONTENT_TYPE, "text/plain; version=0.0.4");
        assert_eq!(sample(&text, r#"otc_gateway_tool_search_results_total{front="otc"}"#), Some(3.0));
        assert_eq!(sample(&text, r#"otc_gateway_trace_spans_total{result="dropped"}"#), Some(2.0));
        assert_eq!(
            sample(&text, r#"otc_gateway_tool_search_duration_seconds_bucket{front="otc",le="0.00025"}"#),
            Some(1.0)
        );
    }

    #[test]
    fn http_requests_by_route_and_status() {
        let m = Metrics::new();
        for _ in 0..3 {
            m.record_http("/tools/call", 200);
        }
        m.record_http("/tools/call", 422);
        m.record_http("other", 404);
        m.record_http("/metrics", 200); // not cached, still counted
        m.record_http("/tools", 999); // out of the cached range, still counted
        let text = m.render();
        assert_eq!(sample(&text, r#"otc_gateway_http_requests_total{route="/tools/call",status="200"}"#), Some(3.0));
        assert_eq!(sample(&text, r#"otc_gateway_http_requests_total{route="/tools/call",status="422"}"#), Some(1.0));
        assert_eq!(sample(&text, r#"otc_gateway_http_requests_total{route="other",status="404"}"#), Some(1.0));
        assert_eq!(sample(&text, r#"otc_gateway_http_requests_total{route="/metrics",status="200"}"#), Some(1.0));
        assert_eq!(sample(&text, r#"otc_gateway_http_requests_total{route="/tools",status="999"}"#), Some(1.0));
        // Pairs never seen have no series.
        assert_eq!(sample(&text, r#"otc_gateway_http_requests_total{route="/health",status="200"}"#), None);
    }

    #[test]
    fn tool_calls_by_outcome_and_duration_histogram() {
        let m = Metrics::new();
        m.record_call("Calculator.Add@1.0.0", "math", CallOutcome::Success, 0.0004);
        m.record_call("Calculator.Add@1.0.0", "math", CallOutcome::Success, 0.2);
        m.record_call("Calculator.Add@1.0.0", "math", CallOutcome::ToolError, 2.0);
        m.record_call("Calculator.Add@1.0.0", "math", CallOutcome::ValidationError, 0.001);
        m.record_call("Calculator.Add@2.0.0", "math2", CallOutcome::ServerError, 40.0);
        m.record_call("Calculator.Add@2.0.0", "math2", CallOutcome::Denied, f64::NAN); // counted, not observed
        let text = m.render();
        let calls = |tool: &str, up: &str, outcome: &str| {
            sample(
                &text,
                &format!(r#"otc_gateway_tool_calls_total{{outcome="{outcome}",tool="{tool}",upstream="{up}"}}"#),
            )
        };
        assert_eq!(calls("Calculator.Add@1.0.0", "math", "success"), Some(2.0));
        assert_eq!(calls("Calculator.Add@1.0.0", "math", "tool_error"), Some(1.0));
        assert_eq!(calls("Calculator.Add@1.0.0", "math", "validation_error"), Some(1.0));
        assert_eq!(calls("Calculator.Add@2.0.0", "math2", "server_error"), Some(1.0));
        assert_eq!(calls("Calculator.Add@2.0.0", "math2", "denied"), Some(1.0));
        assert_eq!(calls("Calculator.Add@1.0.0", "math", "denied"), None);

        let bucket = |tool: &str, up: &str, le: &str| {
            sample(
                &text,
                &format!(r#"otc_gateway_tool_call_duration_seconds_bucket{{tool="{tool}",upstream="{up}",le="{le}"}}"#),
            )
        };
        let (t1, u1) = ("Calculator.Add@1.0.0", "math");
        assert_eq!(bucket(t1, u1, "0.0005"), Some(1.0));
        assert_eq!(bucket(t1, u1, "0.001"), Some(2.0));
        assert_eq!(bucket(t1, u1, "0.25"), Some(3.0));
        assert_eq!(bucket(t1, u1, "2.5"), Some(4.0));
        assert_eq!(bucket(t1, u1, "30"), Some(4.0));
        assert_eq!(bucket(t1, u1, "+Inf"), Some(4.0));
        assert_eq!(
            sample(
                &text,
                r#"otc_gateway_tool_call_duration_seconds_count{tool="Calculator.Add@1.0.0",upstream="math"}"#
            ),
            Some(4.0)
        );
        let sum =
            sample(&text, r#"otc_gateway_tool_call_duration_seconds_sum{tool="Calculator.Add@1.0.0",upstream="math"}"#)
                .unwrap();
        assert!((sum - 2.2014).abs() < 1e-9, "{sum}");
        let (t2, u2) = ("Calculator.Add@2.0.0", "math2");
        assert_eq!(bucket(t2, u2, "30"), Some(0.0));
        assert_eq!(bucket(t2, u2, "+Inf"), Some(1.0));
        // Every bucket is there, in order.
        let les: Vec<String> = text
            .lines()
            .filter(|l| l.starts_with(r#"otc_gateway_tool_call_duration_seconds_bucket{tool="Calculator.Add@1.0.0""#))
            .map(|l| l.split("le=\"").nth(1).unwrap().split('"').next().unwrap().to_owned())
            .collect();
        let mut expected: Vec<String> = DURATION_BUCKETS.iter().map(|b| b.to_string()).collect();
        expected.push("+Inf".into());
        assert_eq!(les, expected);
    }

    #[test]
    fn upstream_gauges_and_forgetting_an_upstream() {
        let m = Metrics::new();
        m.set_upstream("math", true, 3);
        m.set_upstream("sms", false, 0);
        m.record_call("Calculator.Add@1.0.0", "math", CallOutcome::Success, 0.01);
        m.record_call("Calculator.Add@1.0.0", "math", CallOutcome::ToolError, 0.01);
        m.record_call("Sms.Send@1.0.0", "sms", CallOutcome::ServerError, 0.01);
        let text = m.render();
        assert_eq!(sample(&text, r#"otc_gateway_upstream_up{upstream="math"}"#), Some(1.0));
        assert_eq!(sample(&text, r#"otc_gateway_upstream_up{upstream="sms"}"#), Some(0.0));
        assert_eq!(sample(&text, r#"otc_gateway_catalog_tools{upstream="math"}"#), Some(3.0));
        assert_eq!(sample(&text, r#"otc_gateway_catalog_tools{upstream="sms"}"#), Some(0.0));

        m.set_upstream("math", false, 3);
        m.forget_upstream("sms");
        m.forget_upstream("never-configured");
        let text = m.render();
        assert_eq!(sample(&text, r#"otc_gateway_upstream_up{upstream="math"}"#), Some(0.0));
        assert!(!text.contains(r#"upstream="sms""#), "sms lingers:\n{text}");
        assert_eq!(
            sample(
                &text,
                r#"otc_gateway_tool_calls_total{outcome="tool_error",tool="Calculator.Add@1.0.0",upstream="math"}"#
            ),
            Some(1.0)
        );

        // An upstream that comes back starts from zero.
        m.record_call("Sms.Send@1.0.0", "sms", CallOutcome::Success, 0.01);
        let text = m.render();
        assert_eq!(
            sample(&text, r#"otc_gateway_tool_calls_total{outcome="success",tool="Sms.Send@1.0.0",upstream="sms"}"#),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"otc_gateway_tool_calls_total{outcome="server_error",tool="Sms.Send@1.0.0",upstream="sms"}"#
            ),
            None
        );
        assert_eq!(
            sample(&text, r#"otc_gateway_tool_call_duration_seconds_count{tool="Sms.Send@1.0.0",upstream="sms"}"#),
            Some(1.0)
        );
    }

    #[test]
    fn reloads_generation_and_vault() {
        let m = Metrics::new();
        let text = m.render();
        // Both reload series exist from the start.
        assert_eq!(sample(&text, r#"otc_gateway_config_reloads_total{result="success"}"#), Some(0.0));
        assert_eq!(sample(&text, r#"otc_gateway_config_reloads_total{result="error"}"#), Some(0.0));
        assert_eq!(sample(&text, "otc_gateway_config_generation"), Some(0.0));

        m.record_reload(true);
        m.record_reload(false);
        m.record_reload(false);
        m.set_generation(7);
        m.record_vault("kv2", "success");
        m.record_vault("kv2", "success");
        m.record_vault("kv2", "error");
        m.record_vault("file", "not_found");
        m.record_vault_stale("kv2");
        let text = m.render();
        assert_eq!(sample(&text, r#"otc_gateway_config_reloads_total{result="success"}"#), Some(1.0));
        assert_eq!(sample(&text, r#"otc_gateway_config_reloads_total{result="error"}"#), Some(2.0));
        assert_eq!((m.reloads(true), m.reloads(false)), (1, 2));
        assert_eq!(sample(&text, "otc_gateway_config_generation"), Some(7.0));
        assert_eq!(sample(&text, r#"otc_gateway_vault_requests_total{backend="kv2",outcome="success"}"#), Some(2.0));
        assert_eq!(sample(&text, r#"otc_gateway_vault_requests_total{backend="kv2",outcome="error"}"#), Some(1.0));
        assert_eq!(sample(&text, r#"otc_gateway_vault_requests_total{backend="file",outcome="not_found"}"#), Some(1.0));
        assert_eq!(sample(&text, r#"otc_gateway_vault_stale_served_total{backend="kv2"}"#), Some(1.0));

        m.set_generation(u64::MAX);
        assert_eq!(sample(&m.render(), "otc_gateway_config_generation"), Some(i64::MAX as f64));
    }

    #[test]
    fn outcome_labels() {
        let words: Vec<&str> = CallOutcome::ALL.iter().map(|o| o.as_str()).collect();
        assert_eq!(words, ["success", "tool_error", "validation_error", "server_error", "denied"]);
        for (i, o) in CallOutcome::ALL.iter().enumerate() {
            assert_eq!(o.index(), i);
            assert_eq!(o.to_string(), o.as_str());
        }
    }

    #[test]
    fn registries_are_separate_and_concurrent_use_counts_everything() {
        let m = std::sync::Arc::new(Metrics::new());
        let other = Metrics::new();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let m = m.clone();
                std::thread::spawn(move || {
                    for i in 0..1000 {
                        let tool = format!("T.t{}@1.0.0", i % 3);
                        m.record_call(&tool, "up", CallOutcome::Success, 0.001);
                        m.record_http("/tools/call", 200);
                        if t == 0 && i % 100 == 0 {
                            m.forget_upstream("gone");
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let text = m.render();
        assert_eq!(sample(&text, r#"otc_gateway_http_requests_total{route="/tools/call",status="200"}"#), Some(4000.0));
        let total: f64 = (0..3)
            .map(|i| {
                sample(
                    &text,
                    &format!(r#"otc_gateway_tool_calls_total{{outcome="success",tool="T.t{i}@1.0.0",upstream="up"}}"#),
                )
                .unwrap()
            })
            .sum();
        assert_eq!(total, 4000.0);
        assert!(!other.render().contains("T.t0"));
    }
}
