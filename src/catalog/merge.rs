//! Merging the upstreams' tool lists into one [`Catalog`].
//!
//! For each canonical id: the highest `priority` wins; among equals, the first
//! upstream in config order wins, upstreams with an identical definition become
//! its replicas, and ones with a different definition are recorded (and
//! logged) as conflicts. A tool in a toolkit another upstream reserved
//! (`[[upstreams]] toolkits`) is not served at all, and is recorded.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::mcp_names::{underscored, McpNaming};
use super::{Catalog, CatalogTool, Conflict, RefusedTool, Route, SharedToolkit, Target, ToolMap};
use crate::integrity::{ChangeKind, HeldTool, Integrity, Modes, Offer, Verdict};
use crate::upstream::Upstream;

/// An upstream offering a tool.
type Candidate<'a> = (&'a Arc<Upstream>, &'a Arc<CatalogTool>);

/// One upstream and the tools its last catalog fetch found.
pub type UpstreamTools = (Arc<Upstream>, Arc<Vec<Arc<CatalogTool>>>);

/// Builds the merged catalog. `upstreams` must be in config order;
/// `before` is the catalog it replaces (the MCP names it gave are kept);
/// `review`, the pins each served definition is held to.
pub fn merge(upstreams: &[UpstreamTools], before: &Catalog, review: Option<(&Integrity, Modes)>) -> Catalog {
    let started = std::time::Instant::now();
    // A reserved toolkit is served by its upstream alone.
    let reserved: HashMap<&str, &str> =
        upstreams.iter().flat_map(|(u, _)| u.reserved_toolkits.iter().map(|t| (t.as_str(), &*u.name))).collect();
    let mut refused = Vec::new();
    let mut servers: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    // Candidates per canonical id, in config order.
    let mut candidates: HashMap<&str, Vec<Candidate<'_>>> = HashMap::new();
    for (upstream, tools) in upstreams {
        for tool in tools.iter() {
            let toolkit = tool.toolkit();
            if let Some(owner) = reserved.get(toolkit).filter(|owner| **owner != &*upstream.name) {
                refused.push(RefusedTool {
                    tool: tool.definition.id.clone(),
                    upstream: upstream.name.to_string(),
                    reason: format!("toolkit {toolkit} is reserved for upstream {owner}"),
                });
                continue;
            }
            servers.entry(toolkit).or_default().insert(&*upstream.name);
            candidates.entry(tool.definition.id.as_str()).or_default().push((upstream, tool));
        }
    }
    if !refused.is_empty() {
        tracing::warn!(tools = refused.len(), "tools in toolkits reserved for another upstream are not served");
    }
    let shared = servers
        .into_iter()
        .filter(|(_, by)| by.len() > 1)
        .map(|(toolkit, by)| SharedToolkit {
            toolkit: toolkit.to_owned(),
            upstreams: by.into_iter().map(str::to_owned).collect(),
        })
        .collect();
    let mut routes = ToolMap::default();
    let mut conflicts = Vec::new();
    for (&id, offers) in &candidates {
        let mut offers = offers.clone();
        // Stable sort: equal priorities keep config order.
        offers.sort_by_key(|(u, _)| std::cmp::Reverse(u.priority));
        let (winner_upstream, winner_tool) = offers[0];
        let mut targets =
            vec![Target { upstream: winner_upstream.clone(), upstream_id: winner_tool.upstream_id.clone() }];
        for (upstream, tool) in offers.iter().skip(1) {
            if upstream.priority != winner_upstream.priority {
                continue;
            }
            if tool.definition == winner_tool.definition {
                targets.push(Target { upstream: (*upstream).clone(), upstream_id: tool.upstream_id.clone() });
            } else {
                tracing::warn!(
                    tool = id,
                    winner = &*winner_upstream.name,
                    loser = &*upstream.name,
                    "two upstreams of equal priority serve different definitions; the first in config order wins"
                );
                conflicts.push(Conflict {
                    tool: id.to_owned(),
                    winner: winner_upstream.name.to_string(),
                    loser: upstream.name.to_string(),
                });
            }
        }
        routes
            .entry(winner_tool.key.clone())
            .or_default()
            .insert(winner_tool.version.clone(), Arc::new(Route::new(winner_tool.clone(), targets)));
    }
    let held = match review {
        Some((integrity, modes)) => hold_to_pins(&mut routes, &candidates, integrity, modes),
        None => Vec::new(),
    };
    conflicts.sort_by(|a, b| a.tool.cmp(&b.tool).then(a.loser.cmp(&b.loser)));
    refused.sort_by(|a, b| a.tool.cmp(&b.tool).then(a.upstream.cmp(&b.upstream)));
    let keys = routes.iter().filter(|(_, versions)| !versions.is_empty()).map(|(key, _)| key.as_str());
    let mcp = McpNaming::assign(keys, |toolkit| reserved.contains_key(toolkit), &before.mcp);
    let mut catalog = Catalog::new(routes, conflicts);
    catalog.mcp = mcp;
    catalog.held = held;
    catalog.refused = refused;
    catalog.shared_toolkits = shared;
    catalog.build_time = started.elapsed();
    catalog
}

/// Holds every route to its pin (`integrity/`): a changed definition is
/// replaced by the approved one, a flagged new tool leaves the catalog.
/// Returns what waits for review.
fn hold_to_pins(
    routes: &mut ToolMap,
    candidates: &HashMap<&str, Vec<Candidate<'_>>>,
    integrity: &Integrity,
    modes: Modes,
) -> Vec<HeldTool> {
    // Who serves each `Toolkit.Name`, and which key each MCP name stands
    // for: what a description may name without shadowing another's tool.
    // Built only when a definition is scanned (new or changed), not for
    // every publish.
    let references = std::cell::OnceCell::new();
    let references = || {
        references.get_or_init(|| {
            let mut served_by: HashMap<&str, BTreeSet<&str>> = HashMap::new();
            for offers in candidates.values() {
                for (upstream, tool) in offers {
                    served_by.entry(tool.key.as_str()).or_default().insert(&*upstream.name);
                }
            }
            let by_mcp_name: HashMap<String, &str> = served_by.keys().map(|key| (underscored(key), *key)).collect();
            (served_by, by_mcp_name)
        })
    };
    let foreign = |offer: &Offer<'_>, reference: &str| -> Option<String> {
        let (served_by, by_mcp_name) = references();
        let reference = reference.split_once('@').map_or(reference, |(key, _)| key);
        let key = match served_by.get_key_value(reference) {
            Some((key, _)) => *key,
            None => *by_mcp_name.get(reference)?,
        };
        let toolkit = key.split_once('.').map_or(key, |(toolkit, _)| toolkit);
        let theirs = toolkit != offer.tool.toolkit() && !served_by.get(key)?.contains(offer.upstream);
        theirs.then(|| key.to_owned())
    };
    let served: Vec<Arc<Route>> = routes.values().flat_map(|versions| versions.values().cloned()).collect();
    let offers: Vec<Offer<'_>> = served
        .iter()
        .map(|route| {
            let winner = &route.targets[0].upstream;
            Offer { tool: &route.tool, upstream: &winner.name, by_name: !winner.versions_its_tools() }
        })
        .collect();
    let verdicts = integrity.review(&offers, modes, &foreign);
    let mut held = Vec::new();
    for (route, verdict) in served.iter().zip(verdicts) {
        let (key, version) = (&route.tool.key, &route.tool.version);
        let upstream = || route.targets[0].upstream.name.to_string();
        match verdict {
            Verdict::Serve => continue,
            Verdict::Approved(pinned, change) => {
                held.push(HeldTool {
                    tool: route.tool.definition.id.clone(),
                    upstream: upstream(),
                    change,
                    kind: ChangeKind::Changed,
                });
                let versions = routes.entry(key.clone()).or_default();
                versions.remove(version);
                let pinned = pinned.served_for(&route.tool);
                versions.insert(pinned.version.clone(), Arc::new(Route::new(pinned, route.targets.clone())));
            }
            Verdict::Held(change) => {
                let tool = route.tool.definition.id.clone();
                held.push(HeldTool { tool, upstream: upstream(), change, kind: ChangeKind::New });
                if let Some(versions) = routes.get_mut(key) {
                    versions.remove(version);
                    if versions.is_empty() {
                        routes.remove(key);
                    }
                }
            }
        }
    }
    held.sort_by(|a, b| a.tool.cmp(&b.tool));
    held
}
