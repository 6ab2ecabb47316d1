//! The `/mcp` front's search mode (`[mcp] tool_listing = "search"`):
//! `tools/list` gives two fixed meta-tools in place of the catalog, so an
//! agent's context holds two tool definitions rather than ten thousand:
//!
//! - `search_tools` (`query`, optional `limit`): the caller's tools that best
//!   match the query (`tool_search.rs`), each as its MCP name, description
//!   and input schema, in `structuredContent` and as JSON text;
//! - `describe_tool` (`name`): one tool the caller may see, as `tools/list`
//!   would list it (output schema, title and `_meta` included).
//!
//! `tools/call` still takes every tool the caller may use, by the MCP name
//! search gives: an agent searches, then calls. A tool the caller may not
//! see is never found, described or called, and asking for it gets what an
//! unknown tool gets.
//!
//! The MCP names come from the front's own name table ([`McpNames`]), so a
//! name found here is exactly the name `tools/call` accepts. A catalog tool
//! whose MCP name is a meta-tool's is reported (and called) by its OTC key.

use serde_json::{json, Map, Value};

use crate::auth::Caller;
use crate::catalog::search::{SearchError, SearchRequest, MAX_LIMIT};
use crate::catalog::Catalog;
use crate::config::ToolListing;
use crate::gateway::{Gateway, Generation};
use crate::tool_search::{search_tools, Front};

/// The meta-tool that searches the catalog.
pub(crate) const SEARCH_TOOLS: &str = "search_tools";
/// The meta-tool that describes one tool.
pub(crate) const DESCRIBE_TOOL: &str = "describe_tool";

/// `initialize`'s `instructions` in search mode.
pub(crate) const INSTRUCTIONS: &str = "This server fronts a large catalog of tools. tools/list shows only \
    search_tools and describe_tool: call search_tools with a few words saying what you want to do, then call \
    the tool you choose with tools/call, by the name search_tools gave and with arguments matching its \
    inputSchema.";

/// The MCP view of the catalog the front lists: its names and tools.
pub(crate) trait McpNames {
    /// The `Toolkit.Name` an MCP tool name stands for.
    fn key_of(&self, name: &str) -> Option<&str>;
    /// The MCP `Tool` the front lists for a `Toolkit.Name`, at its latest version.
    fn tool_of(&self, key: &str) -> Option<&Value>;
    /// The root catalog's `Toolkit.Name` a key of a virtual server's view
    /// stands for (policies judge it); `key` itself at the root.
    fn root_of<'k>(&'k self, key: &'k str) -> &'k str;
}

/// Whether `[mcp] tool_listing = "search"` is in force.
pub(crate) fn enabled(generation: &Generation) -> bool {
    generation.config.mcp.tool_listing == ToolListing::Search
}

/// Whether `name` is one of the meta-tools.
pub(crate) fn is_meta_tool(name: &str) -> bool {
    name == SEARCH_TOOLS || name == DESCRIBE_TOOL
}

/// The `tools/list` result in search mode: the meta-tools, one page.
pub(crate) fn list() -> Value {
    json!({"tools": [
        {
            "name": SEARCH_TOOLS,
            "title": "Search tools",
            "description": "Find the tools for a task among all the tools you may use. Give a few words saying \
                what you want to do (\"send a text message\", \"create a calendar event\"); the best matches come \
                first, each with the name to call it by and its inputSchema.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "What the tool should do, in a few words."},
                    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_LIMIT,
                              "description": "How many tools at most (default 10)."}
                },
                "required": ["query"]
            },
            "outputSchema": {
                "type": "object",
                "properties": {"tools": {"type": "array", "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "description": {"type": "string"},
                        "inputSchema": {"type": "object"}
                    },
                    "required": ["name", "description", "inputSchema"]
                }}},
                "required": ["tools"]
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        },
        {
            "name": DESCRIBE_TOOL,
            "title": "Describe a tool",
            "description": "The full definition of one tool, by the name search_tools gave: its description, \
                inputSchema and outputSchema.",
            "inputSchema": {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "The tool's name, as search_tools gave it."}},
                "required": ["name"]
            },
            "annotations": {"readOnlyHint": true, "openWorldHint": false}
        }
    ]})
}

/// A `tools/call` of a meta-tool, answered from `catalog` and the front's
/// `names` of it: the `CallToolResult`, or why the request itself is wrong
/// (a JSON-RPC error).
pub(crate) fn call(
    gateway: &Gateway,
    catalog: &Catalog,
    caller: &Caller,
    params: &Value,
    names: &dyn McpNames,
) -> Result<Value, String> {
    let arguments = match params.get("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(arguments)) => arguments.clone(),
        Some(_) => return Err("`arguments` must be an object".into()),
    };
    match params.get("name").and_then(Value::as_str) {
        Some(SEARCH_TOOLS) => Ok(search(gateway, catalog, caller, &arguments, names)),
        Some(DESCRIBE_TOOL) => Ok(describe(gateway, caller, &arguments, names)),
        _ => Err("not a meta-tool".into()),
    }
}

/// `search_tools`.
fn search(
    gateway: &Gateway,
    catalog: &Catalog,
    caller: &Caller,
    arguments: &Map<String, Value>,
    names: &dyn McpNames,
) -> Value {
    let query = match arguments.get("query") {
        Some(Value::String(query)) => query.as_str(),
        Some(_) => return invalid("query: must be a string"),
        None => return invalid("query: is required"),
    };
    let limit = match arguments.get("limit") {
        None | Some(Value::Null) => None,
        Some(Value::Number(n)) => match n.as_u64() {
            Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            None => return invalid(&format!("limit: {}", SearchError::BadLimit(n.to_string()))),
        },
        Some(_) => return invalid(&format!("limit: must be a whole number from 1 to {MAX_LIMIT}")),
    };
    let request = match SearchRequest::new(query, limit, None) {
        Ok(request) => request,
        Err(e) => return invalid(&e.to_string()),
    };
    let generation = gateway.generation();
    let found = search_tools(gateway, &generation, catalog, caller, &request, Front::Mcp);
    let tools: Vec<Value> = found
        .iter()
        .filter_map(|route| {
            let key = route.tool.key.as_str();
            let tool = names.tool_of(key)?;
            let name = tool.get("name").and_then(Value::as_str).unwrap_or(key);
            let name = if is_meta_tool(name) { key } else { name };
            Some(json!({
                "name": name,
                "description": tool.get("description").cloned().unwrap_or_default(),
                "inputSchema": tool.get("inputSchema").cloned().unwrap_or_else(|| json!({"type": "object"})),
            }))
        })
        .collect();
    structured(json!({"tools": tools}))
}

/// `describe_tool`.
fn describe(gateway: &Gateway, caller: &Caller, arguments: &Map<String, Value>, names: &dyn McpNames) -> Value {
    let name = match arguments.get("name") {
        Some(Value::String(name)) => name.as_str(),
        Some(_) => return invalid("name: must be a string"),
        None => return invalid("name: is required"),
    };
    // An MCP name, or the OTC key `tools/call` also takes.
    let key = names.key_of(name).unwrap_or(name);
    let generation = gateway.generation();
    let visible = generation.access.allows(generation.access.matching(caller), names.root_of(key));
    match names.tool_of(key).filter(|_| visible) {
        Some(tool) => {
            let mut tool = tool.clone();
            if is_meta_tool(tool["name"].as_str().unwrap_or_default()) {
                tool["name"] = Value::String(key.to_owned());
            }
            structured(tool)
        }
        // Word for word the same for a tool that does not exist.
        None => json!({
            "content": [{"type": "text", "text": format!("Unknown tool: {name}. Use {SEARCH_TOOLS} to find tools.")}],
            "isError": true,
        }),
    }
}

/// A result whose `structuredContent` is `value`, with its JSON as text.
fn structured(value: Value) -> Value {
    json!({
        "content": [{"type": "text", "text": value.to_string()}],
        "structuredContent": value,
        "isError": false,
    })
}

/// A meta-tool's arguments that will not do: a tool error the model can fix.
fn invalid(detail: &str) -> Value {
    json!({
        "content": [{"type": "text", "text": format!("Invalid arguments. {detail}")}],
        "isError": true,
    })
}
