//! The catalog as MCP tools: the name table built once per catalog, pages
//! of `tools/list`, and the tool errors of calls that did not run (the
//! result of one that ran is written by `write.rs`).
//!
//! Every tool of the catalog is listed at its latest version, under the
//! MCP name the catalog gave it (`Toolkit_Name`; `catalog/mcp_names.rs`
//! says who holds a name two keys ask for). The list is sorted by name, so its order is the same on every request
//! while the catalog does not change.

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value};

use super::error::RpcError;
use super::search::{self, McpNames};
use super::McpHead;
use crate::catalog::{Catalog, CatalogTool};
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::policy::{AccessPolicy, Matching};
use crate::resolve::{ToolRef, VersionRequest};

/// The most tools in one `tools/list` page.
const PAGE_SIZE: usize = 500;

/// The `_meta` prefix of what the gateway adds.
pub(crate) const META: &str = "otc-gateway";

/// One tool as `tools/list` shows it.
#[derive(Debug)]
pub(crate) struct ListedTool {
    /// Its `Toolkit.Name`.
    pub key: String,
    /// The root catalog's `Toolkit.Name` it stands for (in a virtual
    /// server's view; else `key`): what policies judge.
    pub root: String,
    /// The MCP `Tool` object.
    pub tool: Value,
    /// A digest of `tool`: a caller's visible list changed when the digests
    /// of its tools did.
    digest: u64,
}

/// The MCP view of one catalog.
#[derive(Debug)]
pub(crate) struct ToolNames {
    generation: u64,
    /// MCP name to `Toolkit.Name`. foldhash, not SipHash: a call looks its
    /// tool up here.
    keys: HashMap<String, String, foldhash::fast::RandomState>,
    /// Sorted by MCP name.
    tools: Vec<ListedTool>,
    /// `Toolkit.Name` to its place in `tools` (for search mode).
    places: HashMap<String, usize>,
}

/// The name tables of the latest catalog seen and its virtual servers'
/// views, each built once.
#[derive(Debug, Default)]
pub(crate) struct NameCache {
    names: Mutex<Vec<Arc<ToolNames>>>,
}

impl NameCache {
    /// The name table of `catalog`.
    pub(crate) fn of(&self, catalog: &Catalog) -> Arc<ToolNames> {
        let mut cached = self.names.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(names) = cached.iter().find(|names| names.generation == catalog.generation()) {
            return names.clone();
        }
        // Tables of older catalogs (and their views) are not asked for again.
        cached.retain(|names| names.generation >= catalog.epoch());
        let names = Arc::new(ToolNames::build(catalog));
        cached.push(names.clone());
        names
    }
}

impl ToolNames {
    fn build(catalog: &Catalog) -> ToolNames {
        let mut by_name: BTreeMap<String, (String, String, Value)> = BTreeMap::new();
        for (name, key) in catalog.mcp_names() {
            let Ok(route) = catalog.lookup(&ToolRef { key, version: VersionRequest::Latest }) else { continue };
            let tool = mcp_tool(name, &route.tool);
            by_name.insert(name.clone(), (key.clone(), route.root().tool.key.clone(), tool));
        }
        let keys = by_name.iter().map(|(name, (key, _, _))| (name.clone(), key.clone())).collect();
        let tools: Vec<ListedTool> = by_name
            .into_values()
            .map(|(key, root, tool)| {
                let mut hasher = DefaultHasher::new();
                tool.to_string().hash(&mut hasher);
                ListedTool { key, root, tool, digest: hasher.finish() }
            })
            .collect();
        let places = tools.iter().enumerate().map(|(place, listed)| (listed.key.clone(), place)).collect();
        ToolNames { generation: catalog.generation(), keys, tools, places }
    }

    /// The `Toolkit.Name` an MCP name stands for.
    pub(crate) fn key(&self, name: &str) -> Option<&str> {
        self.keys.get(name).map(String::as_str)
    }

    /// The tools a caller with these matching policies may see, in order.
    pub(crate) fn visible<'a>(
        &'a self,
        access: &'a AccessPolicy,
        matching: Matching,
    ) -> impl Iterator<Item = &'a ListedTool> + 'a {
        self.tools.iter().filter(move |listed| access.allows(matching, &listed.root))
    }

    /// A digest of what a caller sees: equal while its list is unchanged.
    pub(crate) fn visible_digest(&self, access: &AccessPolicy, matching: Matching) -> u64 {
        let mut hasher = DefaultHasher::new();
        for listed in self.visible(access, matching) {
            listed.digest.hash(&mut hasher);
        }
        hasher.finish()
    }
}

impl McpNames for ToolNames {
    fn key_of(&self, name: &str) -> Option<&str> {
        self.key(name)
    }

    fn tool_of(&self, key: &str) -> Option<&Value> {
        self.places.get(key).map(|&place| &self.tools[place].tool)
    }

    fn root_of<'k>(&'k self, key: &'k str) -> &'k str {
        self.places.get(key).map_or(key, |&place| &self.tools[place].root)
    }
}

/// What the gateway tells MCP clients about itself.
const INSTRUCTIONS: &str = "Tools of the OTC gateway's merged catalog, each at its latest version. \
    tools/call also accepts an OTC tool id such as Toolkit.Name@1.0.0 for other versions.";

/// What the gateway tells a model about using it: a virtual server's
/// `instructions` when it has them; in search mode, to search first.
pub(crate) fn instructions(gateway: &Gateway, head: &McpHead) -> String {
    let own = head.server.as_ref().and_then(|view| view.as_server()?.config.instructions.as_deref());
    match (own, search::enabled(&gateway.generation())) {
        (Some(own), true) => format!("{own} {}", search::INSTRUCTIONS),
        (Some(own), false) => own.to_owned(),
        (None, true) => search::INSTRUCTIONS.to_owned(),
        (None, false) => INSTRUCTIONS.to_owned(),
    }
}

/// The catalog a request to an MCP endpoint is served from: its virtual
/// server's view (`/servers/<name>/mcp`), else the root (`/mcp`).
pub(crate) fn catalog_of(gateway: &Gateway, server: &Option<Arc<Catalog>>) -> Arc<Catalog> {
    server.clone().unwrap_or_else(|| gateway.catalog.load_owned())
}

/// The name of the virtual server a view is of.
pub(crate) fn server_name(server: &Option<Arc<Catalog>>) -> Option<String> {
    Some(server.as_ref()?.as_server()?.config.name().to_owned())
}

/// One page of the tools a caller may see, from `params.cursor`: `tools`
/// and, when more follow, `nextCursor`.
pub(crate) fn list_page(
    names: &ToolNames,
    access: &AccessPolicy,
    matching: Matching,
    params: &Map<String, Value>,
) -> Result<Map<String, Value>, RpcError> {
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) => {
            cursor.parse::<usize>().map_err(|_| RpcError::InvalidParams(format!("Invalid cursor {cursor:?}")))?
        }
        Some(_) => return Err(RpcError::InvalidParams("cursor must be a string".into())),
    };
    let mut visible = names.visible(access, matching).skip(start);
    let page: Vec<&Value> = visible.by_ref().take(PAGE_SIZE).map(|listed| &listed.tool).collect();
    let mut result = Map::new();
    result.insert("tools".into(), json!(page));
    if visible.next().is_some() {
        result.insert("nextCursor".into(), Value::String((start + PAGE_SIZE).to_string()));
    }
    Ok(result)
}

/// A catalog tool as an MCP `Tool`.
fn mcp_tool(name: &str, tool: &CatalogTool) -> Value {
    let definition = &tool.definition;
    let description =
        if definition.description.trim().is_empty() { definition.id.clone() } else { definition.description.clone() };
    let mut mcp = json!({
        "name": name,
        "title": tool.key,
        "description": description,
        "inputSchema": object_schema(&definition.input_schema.to_value()),
        "_meta": {format!("{META}/id"): definition.id, format!("{META}/version"): definition.version},
    });
    // Before 2026-07-28, output schemas described `structuredContent` as an
    // object: clients of both eras read the same list.
    let output_schema = definition.output_schema.to_value();
    if output_schema.get("type").and_then(Value::as_str) == Some("object") {
        mcp["outputSchema"] = output_schema;
    }
    // An MCP upstream's hints (`readOnlyHint`, `destructiveHint`, ...), as it
    // listed them.
    if let Some(annotations) = &tool.annotations {
        mcp["annotations"] = annotations.clone();
    }
    mcp
}

/// MCP requires `"type": "object"` at the top of an input schema.
fn object_schema(schema: &Value) -> Value {
    match schema {
        Value::Object(obj) if obj.get("type").and_then(Value::as_str) == Some("object") => schema.clone(),
        Value::Object(obj) if !obj.contains_key("type") => {
            let mut obj = obj.clone();
            obj.insert("type".into(), Value::String("object".into()));
            Value::Object(obj)
        }
        other => json!({"type": "object", "allOf": [other]}),
    }
}

/// The 422 of the OTC front as a tool error naming each bad parameter.
pub(crate) fn invalid_arguments(errors: &BTreeMap<String, String>) -> Map<String, Value> {
    let detail: Vec<String> = errors.iter().map(|(param, what)| format!("{param}: {what}")).collect();
    let mut answer = Map::new();
    answer.insert(
        "content".into(),
        json!([{"type": "text", "text": format!("Invalid arguments. {}", detail.join("; "))}]),
    );
    answer.insert("isError".into(), Value::Bool(true));
    answer.insert("_meta".into(), json!({format!("{META}/parameter_errors"): errors}));
    answer
}

/// Any other error of the call as a tool error, with the OTC front's body
/// (rendered in the one place errors are) in `_meta`.
pub(crate) fn error_result(error: &RequestError) -> Map<String, Value> {
    let body: Value = serde_json::from_slice(&error.to_reply().body).unwrap_or(Value::Null);
    let message = body.get("message").and_then(Value::as_str).unwrap_or("The call failed").to_owned();
    let mut answer = Map::new();
    answer.insert("content".into(), json!([{"type": "text", "text": message}]));
    answer.insert("isError".into(), Value::Bool(true));
    answer.insert("_meta".into(), json!({format!("{META}/error"): body}));
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_schemas_are_objects() {
        assert_eq!(object_schema(&json!({"properties": {}})), json!({"type": "object", "properties": {}}));
        assert_eq!(object_schema(&json!({"type": "object"})), json!({"type": "object"}));
        assert_eq!(object_schema(&json!(true)), json!({"type": "object", "allOf": [true]}));
    }

    #[test]
    fn invalid_arguments_name_each_parameter() {
        let invalid = invalid_arguments(&BTreeMap::from([("a".to_owned(), "is required".to_owned())]));
        assert!(invalid["content"][0]["text"].as_str().is_some_and(|t| t.contains("a: is required")));
    }
}
