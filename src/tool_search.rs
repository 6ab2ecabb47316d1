//! Tool search for one caller: what `GET /tools/search` and the MCP front's
//! `search_tools` share. The catalog's index ranks only the tools the
//! caller's policies let it see (`policy.rs`, `AccessPolicy::search_scope`),
//! so a search never reveals, ranks or counts any other.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde::Serialize;

use crate::auth::Caller;
use crate::catalog::search::SearchRequest;
use crate::catalog::{Catalog, Route};
use crate::gateway::{Gateway, Generation};

/// The front a search came through, the `front` label of the search metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Front {
    /// `GET /tools/search`.
    Otc,
    /// The `search_tools` tool of `/mcp`.
    Mcp,
}

impl Front {
    fn label(self) -> &'static str {
        match self {
            Front::Otc => "otc",
            Front::Mcp => "mcp",
        }
    }
}

/// The tools `caller` may see in `catalog` that best match `request`, best
/// first: each at its latest version, or at exactly the version asked for.
pub(crate) fn search_tools(
    gateway: &Gateway,
    generation: &Generation,
    catalog: &Catalog,
    caller: &Caller,
    request: &SearchRequest,
    front: Front,
) -> Vec<Arc<Route>> {
    let started = Instant::now();
    let scope = generation.access.search_scope(catalog, generation.access.matching(caller), request.version.as_ref());
    let found: Vec<Arc<Route>> = catalog
        .search_index()
        .search(&scope, &request.text, request.limit)
        .into_iter()
        .map(|hit| hit.doc.route.clone())
        .collect();
    gateway.metrics.record_search(front.label(), found.len(), started.elapsed().as_secs_f64());
    found
}

/// `{"$schema": "otc://1.0", "items": [ToolDefinition...]}` of the tools
/// found, in their order.
pub(crate) fn otc_body(found: &[Arc<Route>]) -> Bytes {
    #[derive(Serialize)]
    struct Found<'a> {
        #[serde(rename = "$schema")]
        schema: &'static str,
        items: Vec<&'a crate::wire::ToolDefinition>,
    }
    let items = found.iter().map(|route| &route.tool.definition).collect();
    // Serialising plain data into a Vec cannot fail.
    Bytes::from(serde_json::to_vec(&Found { schema: crate::wire::SCHEMA, items }).unwrap_or_default())
}
