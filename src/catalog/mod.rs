//! The merged catalog: every upstream's tools in one namespace.
//!
//! `dialect` reads what upstreams publish, `poll` fetches it on a timer, and
//! `merge` builds an immutable [`Catalog`] that is published with one atomic
//! swap, so a request sees one consistent catalog from start to end and the
//! hot path reads it without a lock.

mod mcp_names;
pub mod merge;
pub mod poll;
pub(crate) mod search;
pub mod servers;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use semver::Version;
use serde::Serialize;

use crate::otel::Span;
use crate::resolve::{ToolRef, VersionRequest};
use crate::upstream::Upstream;
use crate::wire::Input;

pub use crate::dialect::CatalogTool;
pub use mcp_names::McpNameConflict;
pub use servers::{Served, ServedTool, Server, ServerReport};

/// Every tool's versions by `Toolkit.Name`. foldhash, not SipHash: a call
/// looks its tool up here, and the keys come from upstreams' catalogs.
pub(crate) type ToolMap = HashMap<String, BTreeMap<Version, Arc<Route>>, foldhash::fast::RandomState>;

/// An immutable snapshot of the merged catalog.
#[derive(Debug, Default)]
pub struct Catalog {
    tools: ToolMap,
    /// Distinct for every catalog built, so caches can key on it.
    generation: u64,
    listing: Bytes,
    count: usize,
    conflicts: Vec<Conflict>,
    /// Tools not served because another upstream reserved their toolkit.
    refused: Vec<RefusedTool>,
    /// Toolkits whose tools come from more than one upstream.
    shared_toolkits: Vec<SharedToolkit>,
    /// Each tool's MCP name, and the clashes.
    mcp: mcp_names::McpNaming,
    /// Tools whose definition waits for an operator (`integrity/`).
    held: Vec<crate::integrity::HeldTool>,
    /// The tool search index of this catalog.
    search: search::SearchIndex,
    /// How long merging took, the listing and the search index included.
    build_time: std::time::Duration,
    /// The generation of the root catalog: this one's, or for a server's
    /// view the one it is a view of. What is cached of older ones is dropped.
    epoch: u64,
    /// Each virtual server's view of this catalog (`servers.rs`); none in a view.
    servers: BTreeMap<String, Arc<Catalog>>,
    /// In a server's view: the server.
    server: Option<Box<Server>>,
}

/// Where one tool version is served: the winning definition and the
/// upstreams (replicas) that serve it identically.
#[derive(Debug)]
pub struct Route {
    /// The winning definition, with its compiled validator.
    pub tool: Arc<CatalogTool>,
    /// The upstreams serving it, winner first, then replicas in config order.
    pub targets: Vec<Target>,
    /// In a virtual server's view of a tool the server changes: the root
    /// route it serves and the fixed arguments (`servers.rs`).
    pub served: Option<Box<Served>>,
    next: AtomicUsize,
}

/// One upstream that serves a route.
#[derive(Debug, Clone)]
pub struct Target {
    /// The upstream.
    pub upstream: Arc<Upstream>,
    /// The id as that upstream published it.
    pub upstream_id: String,
}

/// Two upstreams of equal priority serving different definitions under one id.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Conflict {
    /// The canonical tool id.
    pub tool: String,
    /// The upstream whose definition is served (first in config order).
    pub winner: String,
    /// The upstream whose definition is hidden.
    pub loser: String,
}

/// A tool an upstream published that is not served, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RefusedTool {
    /// The canonical tool id.
    pub tool: String,
    /// The upstream that published it.
    pub upstream: String,
    /// Why it is not served.
    pub reason: String,
}

/// A requirement a tool declares that its upstream was not granted.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UngrantedRequirement {
    /// The canonical tool id.
    pub tool: String,
    /// The upstream serving it.
    pub upstream: String,
    /// The `[[upstreams]]` key that would grant it: `secrets` or `authorization`.
    pub key: &'static str,
    /// The secret id or provider.
    pub id: String,
}

/// A toolkit served by several upstreams: one of them may be taking over
/// another's tools (`[[upstreams]] toolkits` reserves a toolkit).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SharedToolkit {
    /// The toolkit.
    pub toolkit: String,
    /// The upstreams serving tools in it.
    pub upstreams: Vec<String>,
}

/// Why a requested tool could not be found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// No upstream serves this `Toolkit.Name`.
    #[error("tool {0} is not in the catalog")]
    UnknownTool(String),
    /// The tool exists, but not in this version.
    #[error("{key} version {version} is not available (available: {available})")]
    UnknownVersion {
        /// `Toolkit.Name`.
        key: String,
        /// The version asked for.
        version: String,
        /// The versions there are.
        available: String,
    },
    /// The tool's definition waits for an operator's review.
    #[error("tool {tool} waits for an operator's review of its definition (change {change})")]
    Held {
        /// Its `Toolkit.Name`.
        key: String,
        /// The tool id.
        tool: String,
        /// The change to review.
        change: String,
    },
}

impl Catalog {
    /// Builds a catalog from its routes (see `merge`).
    fn new(tools: ToolMap, conflicts: Vec<Conflict>) -> Catalog {
        static GENERATIONS: AtomicU64 = AtomicU64::new(1);
        let count = tools.values().map(BTreeMap::len).sum();
        let listing = render_listing(&tools, |_| true);
        let generation = GENERATIONS.fetch_add(1, Ordering::Relaxed);
        let search = search::SearchIndex::build(&tools);
        Catalog {
            tools,
            generation,
            listing,
            count,
            conflicts,
            refused: Vec::new(),
            shared_toolkits: Vec::new(),
            mcp: Default::default(),
            held: Vec::new(),
            search,
            build_time: Default::default(),
            epoch: generation,
            servers: BTreeMap::new(),
            server: None,
        }
    }

    /// The generation of the root catalog: this one's, or for a server's
    /// view the one it is a view of. A cache keyed by generation may drop
    /// every entry older than this.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The view of the virtual server `name`, when it is configured.
    pub fn server(&self, name: &str) -> Option<&Arc<Catalog>> {
        self.servers.get(name)
    }

    /// Every virtual server's view, by name.
    pub fn servers(&self) -> impl Iterator<Item = &Arc<Catalog>> {
        self.servers.values()
    }

    /// In a server's view: the server it is a view of.
    pub fn as_server(&self) -> Option<&Server> {
        self.server.as_deref()
    }

    /// The tool search index, built with this catalog.
    pub(crate) fn search_index(&self) -> &search::SearchIndex {
        &self.search
    }

    /// How long building this catalog took: merging, the GET /tools body
    /// and the search index.
    pub fn build_time(&self) -> std::time::Duration {
        self.build_time
    }

    /// This catalog's generation: distinct for every catalog published.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A GET /tools body with only the tools whose `Toolkit.Name` passes
    /// `keep` (in a server's view, the root key a tool stands for).
    pub fn listing_where(&self, keep: impl Fn(&str) -> bool) -> Bytes {
        render_listing(&self.tools, keep)
    }

    /// Every `Toolkit.Name` in the catalog.
    pub fn keys(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }

    /// Each MCP name and the `Toolkit.Name` that holds it (`mcp_names.rs`
    /// says who holds a name two keys ask for): the one table behind the
    /// MCP front's `tools/list` and calls (`mcp_endpoint/tools.rs`) and
    /// explain. A key that lost its name to another is not in it.
    pub fn mcp_names(&self) -> &BTreeMap<String, String> {
        &self.mcp.names
    }

    /// Tools whose MCP names clash: one holds each name, the others are not
    /// served on MCP.
    pub fn mcp_name_conflicts(&self) -> &[McpNameConflict] {
        &self.mcp.conflicts
    }

    /// Tools whose definition waits for an operator: not served at all
    /// (`new`), or served at their pinned definition (`changed`).
    pub fn held(&self) -> &[crate::integrity::HeldTool] {
        &self.held
    }

    /// Resolves a parsed tool id to the route that serves it.
    pub fn lookup(&self, tool: &ToolRef<'_>) -> Result<&Arc<Route>, LookupError> {
        let Some(versions) = self.tools.get(tool.key) else {
            return Err(self.held_error(tool).unwrap_or_else(|| LookupError::UnknownTool(tool.key.to_owned())));
        };
        let found = match &tool.version {
            VersionRequest::Latest => versions.values().next_back(),
            VersionRequest::Exact(v) => versions.get(v),
        };
        found.ok_or_else(|| LookupError::UnknownVersion {
            key: tool.key.to_owned(),
            version: match &tool.version {
                VersionRequest::Exact(v) => v.to_string(),
                VersionRequest::Latest => "latest".into(),
            },
            available: versions.keys().map(Version::to_string).collect::<Vec<_>>().join(", "),
        })
    }

    /// The body of GET /tools, serialised once per catalog change.
    pub fn listing(&self) -> Bytes {
        self.listing.clone()
    }

    /// How many tool versions the catalog holds.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Conflicts found while merging.
    pub fn conflicts(&self) -> &[Conflict] {
        &self.conflicts
    }

    /// Tools not served because another upstream reserved their toolkit.
    pub fn refused(&self) -> &[RefusedTool] {
        &self.refused
    }

    /// Toolkits served by more than one upstream.
    pub fn shared_toolkits(&self) -> &[SharedToolkit] {
        &self.shared_toolkits
    }

    /// Every requirement a served tool declares that its upstream was not
    /// granted (calls to the tool are refused until the operator grants it
    /// or the tool stops asking), sorted.
    pub fn ungranted_requirements(&self, config: &crate::config::Config) -> Vec<UngrantedRequirement> {
        let mut found = Vec::new();
        for route in self.routes() {
            let Some(requirements) = &route.tool.definition.requirements else { continue };
            for target in &route.targets {
                for requirement in target.upstream.ungranted(requirements, config) {
                    found.push(UngrantedRequirement {
                        tool: route.tool.definition.id.clone(),
                        upstream: target.upstream.name.to_string(),
                        key: requirement.grant_key(),
                        id: requirement.id().to_owned(),
                    });
                }
            }
        }
        found.sort_by(|a, b| (&a.tool, &a.upstream, a.key, &a.id).cmp(&(&b.tool, &b.upstream, b.key, &b.id)));
        found
    }

    /// Every route (each tool version), in no particular order.
    pub fn routes(&self) -> impl Iterator<Item = &Arc<Route>> {
        self.tools.values().flat_map(BTreeMap::values)
    }
}

impl Catalog {
    /// A tool not served because it waits for review, as a lookup error.
    fn held_error(&self, tool: &ToolRef<'_>) -> Option<LookupError> {
        let held = self.held.iter().find(|held| {
            held.kind == crate::integrity::ChangeKind::New
                && held.tool.split_once('@').is_some_and(|(key, version)| {
                    key == tool.key
                        && match &tool.version {
                            VersionRequest::Latest => true,
                            VersionRequest::Exact(v) => v.to_string() == version,
                        }
                })
        })?;
        Some(LookupError::Held { key: tool.key.to_owned(), tool: held.tool.clone(), change: held.change.clone() })
    }
}

impl Route {
    /// The `execute_tool` span of a call resolved to it (GenAI's
    /// conventions for tool execution, and the gateway's `otc.*`).
    pub fn describe(&self, span: &mut Span) {
        let id = &self.tool.definition.id;
        span.rename(format!("execute_tool {id}"));
        span.set("gen_ai.operation.name", "execute_tool");
        span.set("gen_ai.tool.name", id.as_str());
        span.set("otc.tool.version", self.tool.version.to_string());
    }

    fn new(tool: Arc<CatalogTool>, targets: Vec<Target>) -> Route {
        Route { tool, targets, served: None, next: AtomicUsize::new(0) }
    }

    /// A virtual server's route of a tool it changes (`servers.rs`).
    fn served(tool: Arc<CatalogTool>, served: Served) -> Route {
        let targets = served.origin.targets.clone();
        Route { tool, targets, served: Some(Box::new(served)), next: AtomicUsize::new(0) }
    }

    /// The root catalog's route this one is: itself, unless it is a
    /// virtual server's route of a tool the server changes.
    pub fn root(&self) -> &Route {
        self.served.as_ref().map_or(self, |served| &served.origin)
    }

    /// Checks a call's input as this route's clients see the tool (the
    /// tool's `check_input`); in a server, a fixed argument the caller sent
    /// is refused and the fixed arguments are added once the input is valid.
    pub fn check_input(&self, input: &mut Input) -> Result<(), BTreeMap<String, String>> {
        if !self.tool.path_inputs.is_empty() {
            // An OpenAPI tool's input is read as a `Value` by the check of its
            // path inputs and by its upstream: read once, here.
            input.value_mut();
        }
        match &self.served {
            Some(served) => served.check_input(&self.tool, input),
            None => self.tool.check_input(input),
        }
    }

    /// The targets in the order to try them: replicas take turns being first,
    /// the rest follow for failover.
    pub fn targets_in_turn(&self) -> impl Iterator<Item = &Target> {
        let n = self.targets.len();
        let start = if n > 1 { self.next.fetch_add(1, Ordering::Relaxed) % n } else { 0 };
        (0..n).map(move |i| &self.targets[(start + i) % n])
    }
}

/// `{"$schema": "otc://1.0", "items": [...]}`, sorted by id for a stable listing.
fn render_listing(tools: &ToolMap, keep: impl Fn(&str) -> bool) -> Bytes {
    #[derive(Serialize)]
    struct Listing<'a> {
        #[serde(rename = "$schema")]
        schema: &'static str,
        items: Vec<&'a crate::wire::ToolDefinition>,
    }
    // A server's tool is judged by its root key.
    let kept =
        |versions: &BTreeMap<Version, Arc<Route>>| versions.values().next().is_some_and(|r| keep(&r.root().tool.key));
    let mut keys: Vec<&String> = tools.iter().filter(|(_, versions)| kept(versions)).map(|(key, _)| key).collect();
    keys.sort();
    let items = keys.into_iter().flat_map(|k| tools[k].values().map(|route| &route.tool.definition)).collect();
    // Serialising plain data into a Vec cannot fail.
    let body = serde_json::to_vec(&Listing { schema: crate::wire::SCHEMA, items }).unwrap_or_default();
    Bytes::from(body)
}
