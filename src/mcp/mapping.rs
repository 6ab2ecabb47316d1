//! MCP to OTC: tools into tool definitions, and tool results into call
//! results.
//!
//! An MCP tool `get-weather` of an upstream configured with toolkit
//! `Weather` and version `1.0.0` becomes `Weather.get_weather@1.0.0`: id
//! parts are `[A-Za-z0-9_]+`, so every other character becomes `_`. Two MCP
//! names that become the same id collide: a name that needed no change
//! wins, else the first listed; the other is skipped with a reason. The
//! original MCP name is kept as the tool's `upstream_id`, which is what
//! `tools/call` sends upstream, and its `annotations` as the tool's
//! `annotations`. A tool whose `x-mcp-header` annotations break the rules
//! is skipped (MCP 2026-07-28: a client must leave it out).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::client::result_type;
use super::param_headers;
use crate::dialect::{normalise_catalog, CatalogShapeError, CatalogTool, DialectDefaults, Skipped};
use crate::wire::{self, RawJson, UpstreamResult};

/// What an MCP upstream's config adds to its tools.
#[derive(Debug, Clone, Copy, Default)]
pub struct MappingSettings<'a> {
    /// The toolkit of every tool (required for MCP upstreams).
    pub toolkit: Option<&'a str>,
    /// The version of every tool (required for MCP upstreams).
    pub version: Option<&'a str>,
    /// An `[authorization.<provider>]` whose per-user token is sent upstream:
    /// each tool then requires it, so the gateway injects it (or answers 400
    /// with `missing_requirements` before calling).
    pub user_authorization: Option<&'a str>,
}

/// Reads an upstream's `{"tools": [...]}` (every page of `tools/list`) into
/// checked catalog tools, each with its original MCP name as `upstream_id`
/// and its `annotations` object as listed.
pub fn normalise_mcp_catalog(
    body: &[u8],
    settings: MappingSettings<'_>,
) -> Result<(Vec<CatalogTool>, Vec<Skipped>), CatalogShapeError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| CatalogShapeError::NotJson(e.to_string()))?;
    let Some(Value::Array(listed)) = value.get("tools") else { return Err(CatalogShapeError::NotAList) };
    let (definitions, originals, mut skipped) = definitions(listed, settings);
    let defaults = DialectDefaults { toolkit: settings.toolkit, version: settings.version };
    let body = json!({"items": definitions}).to_string();
    let (mut tools, more) = normalise_catalog(body.as_bytes(), defaults)?;
    for tool in &mut tools {
        if let Some(original) = originals.get(&tool.definition.id).map(|&index| &listed[index]) {
            if let Some(name) = original.get("name").and_then(Value::as_str) {
                tool.upstream_id = name.to_owned();
            }
            tool.annotations = original.get("annotations").filter(|a| a.is_object()).cloned();
        }
    }
    skipped.extend(more);
    Ok((tools, skipped))
}

/// MCP tools to OTC definition JSON, with the canonical id → position of the
/// MCP tool map and the tools left out.
fn definitions(tools: &[Value], settings: MappingSettings<'_>) -> (Vec<Value>, BTreeMap<String, usize>, Vec<Skipped>) {
    let mut skipped = Vec::new();
    let (Some(toolkit), Some(version)) = (settings.toolkit, settings.version) else {
        skipped.push(Skipped {
            what: "every tool".into(),
            reason: "an mcp upstream needs `toolkit` and `version` in gateway.toml".into(),
        });
        return (Vec::new(), BTreeMap::new(), skipped);
    };
    // Names that need no change claim their id first, so adding a tool
    // upstream never renames one that is already served.
    let mut named: Vec<(usize, &str, String)> = Vec::new();
    for (index, tool) in tools.iter().enumerate() {
        let name = match tool.get("name").and_then(Value::as_str) {
            Some(name) if !name.is_empty() => name,
            _ => {
                skipped.push(Skipped { what: format!("#{index}"), reason: "an MCP tool without a name".into() });
                continue;
            }
        };
        if let Err(reason) = tool.get("inputSchema").map_or(Ok(Vec::new()), param_headers::declared) {
            skipped.push(Skipped { what: name.to_owned(), reason });
            continue;
        }
        named.push((index, name, id_part(name)));
    }
    named.sort_by_key(|(index, name, part)| (part != name, *index));
    let mut originals: BTreeMap<String, usize> = BTreeMap::new();
    let mut definitions = Vec::new();
    for (index, name, part) in named {
        let id = format!("{toolkit}.{part}@{version}");
        if let Some(&first) = originals.get(&id) {
            let first = tools[first].get("name").and_then(Value::as_str).unwrap_or_default();
            skipped.push(Skipped {
                what: name.to_owned(),
                reason: format!("its id {id} is already taken by the MCP tool {first:?}; rename one of them upstream"),
            });
            continue;
        }
        originals.insert(id.clone(), index);
        definitions.push(definition(&tools[index], &id, name, version, settings.user_authorization));
    }
    (definitions, originals, skipped)
}

/// One MCP `Tool` as an OTC definition. `icons`, `execution` and `_meta`
/// have no OTC counterpart and are dropped (`annotations` ride beside the
/// definition, in `CatalogTool::annotations`).
fn definition(tool: &Value, id: &str, name: &str, version: &str, user_authorization: Option<&str>) -> Value {
    let text = |field: &str| tool.get(field).and_then(Value::as_str).filter(|s| !s.is_empty());
    let description = text("description").or_else(|| text("title")).unwrap_or_default();
    let mut definition = Map::new();
    definition.insert("id".into(), Value::String(id.to_owned()));
    definition.insert("name".into(), Value::String(otc_name(name)));
    definition.insert("description".into(), Value::String(description.to_owned()));
    definition.insert("version".into(), Value::String(version.to_owned()));
    if let Some(schema) = tool.get("inputSchema") {
        definition.insert("input_schema".into(), schema.clone());
    }
    if let Some(schema) = tool.get("outputSchema") {
        definition.insert("output_schema".into(), schema.clone());
    }
    if let Some(provider) = user_authorization {
        definition.insert("requirements".into(), json!({"authorization": [{"id": provider}]}));
    }
    Value::Object(definition)
}

/// An OTC id part: `[A-Za-z0-9_]+`, every other character as `_`.
pub fn id_part(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).collect()
}

/// An OTC `name`: `[A-Za-z0-9_-]{1,64}`.
fn otc_name(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' }).take(64).collect()
}

/// An MCP `CallToolResult` as an OTC outcome (`success` and `value`, or
/// `error`):
///
/// - `isError: true`: `success: false`, the text content as `error.message`;
/// - `structuredContent`: the `value`;
/// - else one text item: its text, parsed as JSON where it is JSON;
///   several items: an array of them (texts likewise, other items as MCP
///   sent them); none: `null`;
/// - a 2026-07-28 `resultType: "input_required"` (the server asks the client
///   for input: elicitation, sampling, roots): `success: false`, because the
///   gateway cannot put the questions to its caller; any `resultType` other
///   than `"complete"` likewise.
pub fn call_result(result: &Value) -> UpstreamResult {
    match result_type(result) {
        None | Some("complete") => {}
        Some("input_required") => {
            let asked: Vec<&str> = result
                .get("inputRequests")
                .and_then(Value::as_object)
                .map(|requests| requests.values().filter_map(|r| r.get("method").and_then(Value::as_str)).collect())
                .unwrap_or_default();
            return failed(wire::tool_error(
                "The tool needs more input from the user, which the gateway cannot ask for",
                &format!(
                    "the MCP server answered tools/call with resultType \"input_required\" (input requests: {}); \
                     the gateway does not answer input requests for its callers",
                    if asked.is_empty() { "none named".to_owned() } else { asked.join(", ") }
                ),
                false,
            ));
        }
        Some(other) => {
            return failed(wire::tool_error(
                "The tool server gave an answer the gateway could not read",
                &format!("the MCP server answered tools/call with resultType {other:?}"),
                false,
            ))
        }
    }
    let content = result.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
    if result.get("isError").and_then(Value::as_bool) == Some(true) {
        let texts: Vec<&str> = content.iter().filter_map(text_of).collect();
        let message = if texts.is_empty() { "The tool failed".to_owned() } else { texts.join("\n") };
        return failed(json!({"message": message}));
    }
    let value = match result.get("structuredContent") {
        Some(structured) if !structured.is_null() => structured.clone(),
        _ => match content {
            [] => Value::Null,
            [one] => content_value(one),
            many => Value::Array(many.iter().map(content_value).collect()),
        },
    };
    UpstreamResult { duration: None, success: true, value: Some(RawJson::from_value(&value)), error: None }
}

/// A JSON-RPC error to `tools/call` as an OTC outcome: the tool did not run.
pub fn rpc_error(code: i64, message: &str, data: Option<&Value>) -> UpstreamResult {
    let mut developer_message = format!("MCP JSON-RPC error {code}: {message}");
    if let Some(data) = data {
        developer_message.push_str(&format!("; data: {data}"));
    }
    failed(json!({
        "message": format!("The tool server refused the call: {message}"),
        "developer_message": developer_message,
    }))
}

/// A failed outcome with `error`.
fn failed(error: Value) -> UpstreamResult {
    UpstreamResult { duration: None, success: false, value: None, error: Some(error) }
}

fn text_of(item: &Value) -> Option<&str> {
    match item.get("type").and_then(Value::as_str) {
        Some("text") => item.get("text").and_then(Value::as_str),
        _ => None,
    }
}

fn content_value(item: &Value) -> Value {
    match text_of(item) {
        Some(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned())),
        None => item.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Input;

    fn settings() -> MappingSettings<'static> {
        MappingSettings { toolkit: Some("Kit"), version: Some("1.2.0"), user_authorization: None }
    }

    fn read(tools: Value, settings: MappingSettings<'_>) -> (Vec<CatalogTool>, Vec<Skipped>) {
        let body = json!({ "tools": tools }).to_string();
        normalise_mcp_catalog(body.as_bytes(), settings).expect("a catalog")
    }

    #[test]
    fn tools_become_definitions_under_the_configured_toolkit_and_version() {
        let (tools, skipped) = read(
            json!([{"name": "get-weather", "title": "Weather", "inputSchema": {"type": "object",
                    "properties": {"city": {"type": "string"}}, "required": ["city"]},
                    "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": true}},
                   {"name": "add", "description": "Adds", "inputSchema": {"type": "object"}}]),
            settings(),
        );
        assert!(skipped.is_empty(), "{skipped:?}");
        let weather = tools.iter().find(|t| t.key == "Kit.get_weather").expect("renamed");
        assert_eq!(weather.definition.id, "Kit.get_weather@1.2.0");
        assert_eq!(weather.definition.name, "get-weather");
        assert_eq!(weather.definition.description, "Weather");
        assert_eq!(weather.definition.output_schema, json!({"type": "object"}).into());
        assert_eq!(weather.upstream_id, "get-weather");
        assert_eq!(weather.annotations, Some(json!({"readOnlyHint": true})));
        assert!(weather.check_input(&Input::from_value(json!({}))).is_err());
        let add = tools.iter().find(|t| t.key == "Kit.add").expect("add");
        assert_eq!(add.upstream_id, "add");
        assert_eq!(add.definition.description, "Adds");
        assert_eq!(add.annotations, None);
    }

    #[test]
    fn annotations_pass_through_exactly_and_bad_header_annotations_skip_the_tool() {
        let annotations = json!({"title": "Wipe", "readOnlyHint": false, "destructiveHint": true,
                                 "idempotentHint": false, "openWorldHint": true, "x-vendor": {"n": 1.50}});
        let (tools, skipped) = read(
            json!([{"name": "wipe", "inputSchema": {"type": "object"}, "annotations": annotations},
                   {"name": "odd", "inputSchema": {"type": "object"}, "annotations": "not an object"},
                   {"name": "routed", "inputSchema": {"type": "object", "properties": {
                       "region": {"type": "string", "x-mcp-header": "Region"}}}},
                   {"name": "bad", "inputSchema": {"type": "object", "properties": {
                       "ratio": {"type": "number", "x-mcp-header": "Ratio"}}}}]),
            settings(),
        );
        let wipe = tools.iter().find(|t| t.upstream_id == "wipe").expect("wipe");
        assert_eq!(wipe.annotations.as_ref().map(Value::to_string), Some(annotations.to_string()));
        assert_eq!(tools.iter().find(|t| t.upstream_id == "odd").expect("odd").annotations, None);
        assert!(tools.iter().any(|t| t.upstream_id == "routed"));
        assert!(!tools.iter().any(|t| t.upstream_id == "bad"));
        assert_eq!(skipped.len(), 1, "{skipped:?}");
        assert!(skipped[0].what == "bad" && skipped[0].reason.contains("x-mcp-header"), "{skipped:?}");
    }

    #[test]
    fn collisions_keep_the_unchanged_name_and_skip_the_other() {
        let (tools, skipped) = read(
            json!([{"name": "a.b", "inputSchema": {"type": "object"}},
                   {"name": "a_b", "inputSchema": {"type": "object"}},
                   {"name": "", "inputSchema": {"type": "object"}}]),
            settings(),
        );
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0].upstream_id, "a_b");
        assert_eq!(skipped.len(), 2);
        assert!(skipped.iter().any(|s| s.what == "a.b" && s.reason.contains("a_b")), "{skipped:?}");
    }

    #[test]
    fn without_toolkit_and_version_nothing_is_served() {
        let (tools, skipped) = read(json!([{"name": "x"}]), MappingSettings::default());
        assert!(tools.is_empty());
        assert!(skipped[0].reason.contains("toolkit"));
    }

    #[test]
    fn a_user_authorization_becomes_a_requirement() {
        let settings = MappingSettings { user_authorization: Some("google"), ..settings() };
        let (tools, _) = read(json!([{"name": "x", "inputSchema": {"type": "object"}}]), settings);
        let requirements = tools[0].definition.requirements.as_ref().expect("requirements");
        assert_eq!(requirements.authorization[0].id, "google");
    }

    /// A result as the JSON an OTC upstream would have answered.
    fn shape(result: UpstreamResult) -> Value {
        match result.success {
            true => json!({"success": true, "value": result.value.map(|v| v.to_value())}),
            false => json!({"success": false, "error": result.error}),
        }
    }

    #[test]
    fn results_map_to_values_and_errors() {
        let structured = json!({"content": [{"type": "text", "text": "{\"t\": 1}"}], "structuredContent": {"t": 1}});
        assert_eq!(shape(call_result(&structured)), json!({"success": true, "value": {"t": 1}}));
        let number = json!({"content": [{"type": "text", "text": "42"}]});
        assert_eq!(shape(call_result(&number)), json!({"success": true, "value": 42}));
        let text = json!({"content": [{"type": "text", "text": "hello"}], "isError": false});
        assert_eq!(shape(call_result(&text)), json!({"success": true, "value": "hello"}));
        let image = json!({"type": "image", "data": "AA==", "mimeType": "image/png"});
        let many = json!({"content": [{"type": "text", "text": "[1]"}, image]});
        assert_eq!(shape(call_result(&many)), json!({"success": true, "value": [[1], image]}));
        assert_eq!(shape(call_result(&json!({"content": []}))), json!({"success": true, "value": null}));
        let failed = json!({"content": [{"type": "text", "text": "boom"}], "isError": true});
        assert_eq!(shape(call_result(&failed)), json!({"success": false, "error": {"message": "boom"}}));
        let asking = json!({"resultType": "input_required", "inputRequests": {
            "login": {"method": "elicitation/create", "params": {"message": "Who are you?"}}}, "requestState": "s"});
        let asking = shape(call_result(&asking));
        assert_eq!(asking["success"], false, "{asking}");
        assert!(asking["error"]["message"].as_str().is_some_and(|m| m.contains("cannot ask")), "{asking}");
        assert!(asking["error"]["developer_message"].as_str().is_some_and(|m| m.contains("elicitation/create")));
        let complete = json!({"resultType": "complete", "content": [{"type": "text", "text": "7"}]});
        assert_eq!(shape(call_result(&complete)), json!({"success": true, "value": 7}));
        assert_eq!(shape(call_result(&json!({"resultType": "task"})))["success"], false);
        let refused = shape(rpc_error(-32602, "Unknown tool", None));
        assert_eq!(refused["success"], false);
        assert!(refused["error"]["developer_message"].as_str().is_some_and(|m| m.contains("-32602")));
    }
}
