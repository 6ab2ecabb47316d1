//! The `/mcp` endpoint: the merged catalog served to MCP clients over the
//! streamable HTTP transport (JSON responses, no SSE).
//!
//! - `initialize` negotiates 2025-11-25, 2025-06-18 or 2025-03-26 (the
//!   client's when supported, else the newest) and issues an
//!   `Mcp-Session-Id`. The front is stateless: any gateway replica serves
//!   any session, and requests without a session id are served too.
//! - `tools/list`: every tool of the catalog the caller may see, at its
//!   latest version, named `Toolkit_Name` (the OTC id and version in
//!   `_meta`). If two keys give the same name (`A_B.C` and `A.B_C`), the
//!   later in sort order keeps its dotted OTC key (`A.B_C`) as its name.
//! - `tools/call` takes such a name, or any OTC tool id (`Toolkit.Name`,
//!   `Toolkit.Name@1.0.0`, for versions other than the latest), and runs
//!   through [`crate::call::execute_call`] like `POST /tools/call`.
//! - Notifications and responses are answered 202 with no body.
//!
//! Errors: an unknown (or denied) tool and malformed params are JSON-RPC
//! error -32602; everything that goes wrong once the tool is known is a
//! tool result with `isError: true`, as MCP asks for errors a model may act
//! on: invalid arguments (the 422 of the OTC front) name each bad
//! parameter; the OTC error body is in `_meta["otc-gateway/error"]`.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::HeaderMap;
use serde_json::{json, Map, Value};

use crate::auth::Caller;
use crate::call::{execute_call, ParsedCall};
use crate::catalog::Catalog;
use crate::error::RequestError;
use crate::gateway::Gateway;
use crate::mcp::jsonrpc::{
    params_object, Message, OutgoingResponse, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR,
};
use crate::mcp::{is_supported_version, LATEST_PROTOCOL_VERSION, PROTOCOL_VERSION_HEADER, SESSION_HEADER};
use crate::mcp_search;
use crate::reply::Reply;
use crate::resolve::{ToolRef, VersionRequest};
use crate::wire::{CallContext, CallResult, ToolDefinition};

/// The most tools in one `tools/list` page.
const PAGE_SIZE: usize = 500;

/// The `_meta` prefix of what the gateway adds.
const META: &str = "otc-gateway";

/// The MCP endpoint's state: the tool name table, built once per catalog.
#[derive(Debug, Default)]
pub struct McpEndpoint {
    names: Mutex<Option<Arc<ToolNames>>>,
}

/// The MCP view of one catalog.
#[derive(Debug)]
struct ToolNames {
    generation: u64,
    /// MCP name to `Toolkit.Name`.
    keys: HashMap<String, String>,
    /// `(Toolkit.Name, MCP Tool)` sorted by MCP name.
    tools: Vec<(String, Value)>,
    /// `Toolkit.Name` to its place in `tools`.
    places: HashMap<String, usize>,
}

impl mcp_search::McpNames for ToolNames {
    fn key_of(&self, name: &str) -> Option<&str> {
        self.keys.get(name).map(String::as_str)
    }

    fn tool_of(&self, key: &str) -> Option<&Value> {
        self.places.get(key).map(|&place| &self.tools[place].1)
    }
}

impl McpEndpoint {
    /// Answers one POST to `/mcp` (the body read whole, the caller
    /// authenticated).
    pub async fn handle_post(&self, gateway: &Gateway, caller: &Caller, headers: &HeaderMap, body: &[u8]) -> Reply {
        if let Some(version) = headers.get(PROTOCOL_VERSION_HEADER) {
            if !version.to_str().is_ok_and(is_supported_version) {
                let message =
                    format!("Unsupported {PROTOCOL_VERSION_HEADER}: {}", String::from_utf8_lossy(version.as_bytes()));
                return reply(400, OutgoingResponse::error(Value::Null, INVALID_REQUEST, message).to_bytes());
            }
        }
        let max_depth = gateway.runtime().config.server.max_json_depth;
        if !crate::wire::nesting_within(body, max_depth) {
            let message = format!("JSON nested deeper than {max_depth} levels");
            return reply(400, OutgoingResponse::error(Value::Null, PARSE_ERROR, message).to_bytes());
        }
        let value: Value = match serde_json::from_slice(body) {
            Ok(value) => value,
            Err(e) => {
                return reply(
                    400,
                    OutgoingResponse::error(Value::Null, PARSE_ERROR, format!("Parse error: {e}")).to_bytes(),
                )
            }
        };
        let (id, method, params) = match Message::from_value(value) {
            Ok(Message::Request { id, method, params }) => (id, method, params),
            // Notifications (initialized, cancelled) and responses need no answer.
            Ok(_) => return reply(202, Bytes::new()),
            Err(e) => {
                return reply(400, OutgoingResponse::error(Value::Null, INVALID_REQUEST, e.to_string()).to_bytes())
            }
        };
        let traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_owned);
        let mut extra = Vec::new();
        let response = match method.as_str() {
            "initialize" => {
                let mut result = initialize(&params);
                if mcp_search::enabled(gateway) {
                    result["instructions"] = mcp_search::INSTRUCTIONS.into();
                }
                extra.push((SESSION_HEADER, uuid::Uuid::new_v4().to_string()));
                OutgoingResponse::result(id, result)
            }
            "ping" => OutgoingResponse::result(id, json!({})),
            "tools/list" if mcp_search::enabled(gateway) => OutgoingResponse::result(id, mcp_search::list()),
            "tools/call" if mcp_search::enabled(gateway) && mcp_search::is_meta_call(&params) => {
                let catalog = gateway.catalog.load();
                match mcp_search::call(gateway, &catalog, caller, &params, &*self.names(&catalog)) {
                    Ok(result) => OutgoingResponse::result(id, result),
                    Err(message) => OutgoingResponse::error(id, INVALID_PARAMS, message),
                }
            }
            "tools/list" => match self.list(gateway, caller, &params) {
                Ok(result) => OutgoingResponse::result(id, result),
                Err(message) => OutgoingResponse::error(id, INVALID_PARAMS, message),
            },
            "tools/call" => match self.call(gateway, caller, &params, traceparent).await {
                Ok(result) => OutgoingResponse::result(id, result),
                Err(message) => OutgoingResponse::error(id, INVALID_PARAMS, message),
            },
            other => OutgoingResponse::error(id, METHOD_NOT_FOUND, format!("Method not found: {other}")),
        };
        let mut answer = reply(200, response.to_bytes());
        answer.headers.extend(extra);
        answer
    }

    /// The name table of the current catalog.
    fn names(&self, catalog: &Catalog) -> Arc<ToolNames> {
        let mut cached = self.names.lock().unwrap_or_else(|p| p.into_inner());
        match cached.as_ref() {
            Some(names) if names.generation == catalog.generation() => names.clone(),
            _ => {
                let names = Arc::new(ToolNames::build(catalog));
                *cached = Some(names.clone());
                names
            }
        }
    }

    /// `tools/list`: the caller's tools, a page at a time.
    fn list(&self, gateway: &Gateway, caller: &Caller, params: &Value) -> Result<Value, String> {
        let params = params_object(params).ok_or("params must be an object")?;
        let start = match params.get("cursor") {
            None | Some(Value::Null) => 0,
            Some(Value::String(cursor)) => cursor.parse::<usize>().map_err(|_| format!("Invalid cursor {cursor:?}"))?,
            Some(_) => return Err("cursor must be a string".into()),
        };
        let names = self.names(&gateway.catalog.load());
        let runtime = gateway.runtime();
        let matching = runtime.access.matching(caller);
        let visible: Vec<&Value> =
            names.tools.iter().filter(|(key, _)| runtime.access.allows(matching, key)).map(|(_, tool)| tool).collect();
        let page: Vec<&Value> = visible.iter().skip(start).take(PAGE_SIZE).copied().collect();
        let mut result = json!({"tools": page});
        if start + PAGE_SIZE < visible.len() {
            result["nextCursor"] = Value::String((start + PAGE_SIZE).to_string());
        }
        Ok(result)
    }

    /// `tools/call`: the tool's result, or why the request itself is wrong.
    async fn call(
        &self,
        gateway: &Gateway,
        caller: &Caller,
        params: &Value,
        traceparent: Option<String>,
    ) -> Result<Value, String> {
        let params = params_object(params).ok_or("params must be an object")?;
        let Some(Value::String(name)) = params.get("name") else {
            return Err("tools/call needs a string `name`".into());
        };
        let input = match params.get("arguments") {
            None | Some(Value::Null) => Value::Object(Map::new()),
            Some(arguments @ Value::Object(_)) => arguments.clone(),
            Some(_) => return Err("`arguments` must be an object".into()),
        };
        let unknown = || format!("Unknown tool: {name}");
        let tool_id = match self.names(&gateway.catalog.load()).keys.get(name) {
            Some(key) => key.clone(),
            // Older versions, and tools of a newer catalog than the table.
            None if name.contains('.') => name.clone(),
            None => return Err(unknown()),
        };
        let call = ParsedCall {
            tool_id,
            call_id: uuid::Uuid::new_v4().to_string(),
            client_call_id: false,
            trace_id: None,
            input,
            context: CallContext::default(),
            traceparent,
        };
        match execute_call(gateway, gateway.runtime_owned(), caller, call).await {
            Ok(completed) => Ok(tool_result(&completed.result)),
            Err(RequestError::Lookup(_) | RequestError::Denied(_) | RequestError::InvalidToolId(_)) => Err(unknown()),
            Err(RequestError::InvalidInput(errors)) => Ok(invalid_arguments(&errors)),
            Err(e) => Ok(error_result(&e)),
        }
    }
}

impl ToolNames {
    fn build(catalog: &Catalog) -> ToolNames {
        let mut keys: Vec<&str> = catalog.keys();
        keys.sort_unstable();
        let mut by_name: BTreeMap<String, (String, Value)> = BTreeMap::new();
        for key in keys {
            let Ok(route) = catalog.lookup(&ToolRef { key, version: VersionRequest::Latest }) else { continue };
            let underscored = key.replace('.', "_");
            // The dotted key cannot collide: keys are unique.
            let name = if by_name.contains_key(&underscored) { key.to_owned() } else { underscored };
            let tool = mcp_tool(&name, &route.tool.definition);
            by_name.insert(name, (key.to_owned(), tool));
        }
        let keys = by_name.iter().map(|(name, (key, _))| (name.clone(), key.clone())).collect();
        let tools: Vec<(String, Value)> = by_name.into_values().collect();
        let places = tools.iter().enumerate().map(|(place, (key, _))| (key.clone(), place)).collect();
        ToolNames { generation: catalog.generation(), keys, tools, places }
    }
}

/// An OTC definition as an MCP `Tool`.
fn mcp_tool(name: &str, definition: &ToolDefinition) -> Value {
    let key = definition.id.split_once('@').map_or(definition.id.as_str(), |(key, _)| key);
    let description =
        if definition.description.trim().is_empty() { definition.id.clone() } else { definition.description.clone() };
    let mut tool = json!({
        "name": name,
        "title": key,
        "description": description,
        "inputSchema": object_schema(&definition.input_schema.to_value()),
        "_meta": {format!("{META}/id"): definition.id, format!("{META}/version"): definition.version},
    });
    // MCP output schemas describe `structuredContent`, always an object.
    let output_schema = definition.output_schema.to_value();
    if output_schema.get("type").and_then(Value::as_str) == Some("object") {
        tool["outputSchema"] = output_schema;
    }
    tool
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

/// `initialize`: the client's version when supported, else the newest.
fn initialize(params: &Value) -> Value {
    let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
    let version = if is_supported_version(asked) { asked } else { LATEST_PROTOCOL_VERSION };
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "otc-gateway", "title": "OTC gateway", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Tools of the OTC gateway's merged catalog, each at its latest version. \
            tools/call also accepts an OTC tool id such as Toolkit.Name@1.0.0 for other versions.",
    })
}

/// A finished call as a `CallToolResult`.
fn tool_result(result: &CallResult) -> Value {
    if result.success {
        let value = result.value.as_ref().map_or(Value::Null, crate::wire::RawJson::to_value);
        let text = match &value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let mut answer = json!({
            "content": [{"type": "text", "text": text}],
            "isError": false,
            "_meta": {format!("{META}/call_id"): result.call_id},
        });
        if value.is_object() {
            answer["structuredContent"] = value;
        }
        return answer;
    }
    let error = result.error.clone().unwrap_or(Value::Null);
    let message = error.get("message").and_then(Value::as_str).unwrap_or("The tool failed");
    let mut content = vec![json!({"type": "text", "text": message})];
    // OTC's extra words for the model.
    if let Some(Value::String(more)) = error.get("additional_prompt_content") {
        content.push(json!({"type": "text", "text": more}));
    }
    json!({
        "content": content,
        "isError": true,
        "_meta": {format!("{META}/call_id"): result.call_id, format!("{META}/error"): error},
    })
}

/// The 422 of the OTC front as a tool error naming each bad parameter.
fn invalid_arguments(errors: &BTreeMap<String, String>) -> Value {
    let detail: Vec<String> = errors.iter().map(|(param, what)| format!("{param}: {what}")).collect();
    json!({
        "content": [{"type": "text", "text": format!("Invalid arguments. {}", detail.join("; "))}],
        "isError": true,
        "_meta": {format!("{META}/parameter_errors"): errors},
    })
}

/// Any other error of the call as a tool error, with the OTC front's body
/// (rendered in the one place errors are) in `_meta`.
fn error_result(error: &RequestError) -> Value {
    let body: Value = serde_json::from_slice(&error.to_reply().body).unwrap_or(Value::Null);
    let message = body.get("message").and_then(Value::as_str).unwrap_or("The call failed").to_owned();
    json!({
        "content": [{"type": "text", "text": message}],
        "isError": true,
        "_meta": {format!("{META}/error"): body},
    })
}

fn reply(status: u16, body: Bytes) -> Reply {
    Reply::json(status, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_negotiated() {
        assert_eq!(initialize(&json!({"protocolVersion": "2025-06-18"}))["protocolVersion"], "2025-06-18");
        assert_eq!(initialize(&json!({"protocolVersion": "2024-11-05"}))["protocolVersion"], "2025-11-25");
        assert_eq!(initialize(&Value::Null)["protocolVersion"], "2025-11-25");
    }

    #[test]
    fn input_schemas_are_objects() {
        assert_eq!(object_schema(&json!({"properties": {}})), json!({"type": "object", "properties": {}}));
        assert_eq!(object_schema(&json!({"type": "object"})), json!({"type": "object"}));
        assert_eq!(object_schema(&json!(true)), json!({"type": "object", "allOf": [true]}));
    }

    #[test]
    fn results_become_tool_results() {
        let ok = CallResult {
            call_id: "c".into(),
            duration: 1.0,
            success: true,
            value: Some(json!({"t": 1}).into()),
            error: None,
        };
        let r = tool_result(&ok);
        assert_eq!(r["structuredContent"], json!({"t": 1}));
        assert_eq!(r["content"][0]["text"], "{\"t\":1}");
        assert_eq!(r["isError"], false);
        let failed = CallResult {
            call_id: "c".into(),
            duration: 1.0,
            success: false,
            value: None,
            error: Some(json!({"message": "boom", "additional_prompt_content": "try again"})),
        };
        let r = tool_result(&failed);
        assert_eq!(r["isError"], true);
        assert_eq!(r["content"][0]["text"], "boom");
        assert_eq!(r["content"][1]["text"], "try again");
        let invalid = invalid_arguments(&BTreeMap::from([("a".to_owned(), "is required".to_owned())]));
        assert!(invalid["content"][0]["text"].as_str().is_some_and(|t| t.contains("a: is required")));
    }
}
