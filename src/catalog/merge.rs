//! Merging the upstreams' tool lists into one [`Catalog`].
//!
//! For each canonical id: the highest `priority` wins; among equals, the first
//! upstream in config order wins, upstreams with an identical definition become
//! its replicas, and ones with a different definition are recorded (and
//! logged) as conflicts.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Catalog, CatalogTool, Conflict, Route, Target, ToolMap};
use crate::upstream::Upstream;

/// One upstream and the tools its last catalog fetch found.
pub type UpstreamTools = (Arc<Upstream>, Arc<Vec<Arc<CatalogTool>>>);

/// Builds the merged catalog. `upstreams` must be in config order.
pub fn merge(upstreams: &[UpstreamTools]) -> Catalog {
    let started = std::time::Instant::now();
    // Candidates per canonical id, in config order.
    type Candidate<'a> = (&'a Arc<Upstream>, &'a Arc<CatalogTool>);
    let mut candidates: HashMap<&str, Vec<Candidate<'_>>> = HashMap::new();
    for (upstream, tools) in upstreams {
        for tool in tools.iter() {
            candidates.entry(tool.definition.id.as_str()).or_default().push((upstream, tool));
        }
    }
    let mut routes = ToolMap::default();
    let mut conflicts = Vec::new();
    for (id, mut offers) in candidates {
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
                    winner = winner_upstream.name,
                    loser = upstream.name,
                    "two upstreams of equal priority serve different definitions; the first in config order wins"
                );
                conflicts.push(Conflict {
                    tool: id.to_owned(),
                    winner: winner_upstream.name.clone(),
                    loser: upstream.name.clone(),
                });
            }
        }
        routes
            .entry(winner_tool.key.clone())
            .or_default()
            .insert(winner_tool.version.clone(), Arc::new(Route::new(winner_tool.clone(), targets)));
    }
    conflicts.sort_by(|a, b| a.tool.cmp(&b.tool).then(a.loser.cmp(&b.loser)));
    let mut catalog = Catalog::new(routes, conflicts);
    catalog.build_time = started.elapsed();
    catalog
}
