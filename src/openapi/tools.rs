//! Operations into tools: one tool per operation, named
//! `Toolkit.<OperationIdInPascalCase>@<version>`, whose input is the
//! operation's parameters and JSON body, and whose requirements are what
//! its security asks for. Each tool comes with its [`Operation`], the plan
//! `request.rs` builds a call's HTTP request from.
//!
//! An operation that cannot be a tool (a multipart body, an external
//! `$ref`, a security scheme the config does not map...) is skipped with
//! its reason; the others are served.

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use http::header::HeaderName;
use http::Method;
use serde_json::{json, Map, Value};

use super::document::{Document, DocumentError};
use super::plan::{Body, BodyShape, Location, Operation, Param, PathPart, Style};
use super::schema::{Budget, Resolver};
use super::security::{credentials, reserved_header};
use crate::config::{OperationPattern, SecurityMap};
use crate::dialect::{normalise_tool, CatalogTool, DialectDefaults, Skipped};
use crate::resolve::{is_id_part, parse_tool_version};
use crate::url_path::{has_dot_segment, PathInput};

/// Schema objects one input schema may expand to; past it, deeper
/// references are stubs (see `schema.rs`).
const INPUT_BUDGET: usize = 20_000;

/// The same for an output schema: it only informs, and large APIs' answers
/// are described in great depth (GitHub's repository object, inside each
/// issue, inside each...).
const OUTPUT_BUDGET: usize = 1_000;

/// Schema objects a whole document may expand to (GitHub's description
/// takes about 100,000): past it, the operations left are skipped, so a
/// document of many operations each referring to a large schema costs at
/// most this much time and memory.
const DOCUMENT_BUDGET: usize = 1_000_000;

/// Tools one document may give (GitHub's gives 1,223): a document of
/// millions of tiny operations is not a catalog.
const MAX_TOOLS: usize = 10_000;

/// The methods an operation may have, in the order tools are made.
const METHODS: &[(&str, Method)] = &[
    ("get", Method::GET),
    ("put", Method::PUT),
    ("post", Method::POST),
    ("delete", Method::DELETE),
    ("options", Method::OPTIONS),
    ("head", Method::HEAD),
    ("patch", Method::PATCH),
    ("trace", Method::TRACE),
];

/// What an OpenAPI upstream's config says about its tools.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ImportSettings<'a> {
    /// `toolkit`, else from `info.title`.
    pub(crate) toolkit: Option<&'a str>,
    /// `version`, else `info.version` when it is x.y.z.
    pub(crate) version: Option<&'a str>,
    /// `operations`: the ones that become tools (empty: all).
    pub(crate) operations: &'a [OperationPattern],
    /// `exclude`: the ones that do not, whatever `operations` says.
    pub(crate) exclude: &'a [OperationPattern],
    /// `security`: what each security scheme is given.
    pub(crate) security: &'a SecurityMap,
}

/// A document's tools, the operations they were left out, and each tool's
/// plan by its `upstream_id` (`METHOD /path`).
#[derive(Debug, Default)]
pub(crate) struct Imported {
    /// The tools, checked.
    pub(crate) tools: Vec<CatalogTool>,
    /// The operations that are not tools, and why.
    pub(crate) skipped: Vec<Skipped>,
    /// The plan of each tool's call, by the tool's `upstream_id`.
    pub(crate) operations: HashMap<String, Arc<Operation>>,
}

/// Reads a document into tools. Whole-document trouble (not OpenAPI 3, no
/// version to publish with) is an error; one operation's is a skip.
pub(crate) fn import(body: &[u8], settings: ImportSettings<'_>) -> Result<Imported, DocumentError> {
    let document = Document::parse(body)?;
    let toolkit = match settings.toolkit {
        Some(toolkit) => toolkit.to_owned(),
        None => Some(pascal(document.title()))
            .filter(|t| is_id_part(t))
            .ok_or_else(|| DocumentError::NoToolkit(document.title().chars().take(100).collect()))?,
    };
    let version = match settings.version {
        Some(version) => version.to_owned(),
        None => parse_tool_version(document.info_version())
            .map(|v| v.to_string())
            .ok_or_else(|| DocumentError::NoVersion(document.info_version().chars().take(100).collect()))?,
    };
    let allowance = Cell::new(DOCUMENT_BUDGET);
    let resolver = Resolver::new(&document.root, document.version).with_allowance(&allowance);
    let mut imported = Imported::default();
    let candidates = candidates(&document, &resolver, settings, &mut imported.skipped);
    let named = named(candidates, &mut imported.skipped);
    let total = named.len();
    for (done, (candidate, name)) in named.into_iter().enumerate() {
        let what = candidate.label();
        // One entry for all the operations past a bound, not one each.
        let past = if allowance.get() == 0 {
            Some(format!("the document's schemas expand to more than {DOCUMENT_BUDGET} schema objects in all"))
        } else if imported.tools.len() >= MAX_TOOLS {
            Some(format!("a document gives at most {MAX_TOOLS} tools"))
        } else {
            None
        };
        if let Some(why) = past {
            let reason = format!("{why}: this operation and the {} after it are not listed", total - done - 1);
            imported.skipped.push(Skipped { what, reason });
            break;
        }
        match tool(&document, &resolver, &candidate, settings.security) {
            Ok((definition, operation, annotations)) => {
                let mut definition = definition;
                definition["id"] = Value::String(format!("{toolkit}.{name}@{version}"));
                definition["name"] = Value::String(name.chars().take(64).collect());
                definition["version"] = Value::String(version.clone());
                match normalise_tool(definition, DialectDefaults::default()) {
                    Ok(mut tool) => {
                        tool.upstream_id.clone_from(&operation.label);
                        tool.annotations = Some(annotations);
                        tool.path_inputs = operation
                            .params
                            .iter()
                            .filter(|p| p.location == Location::Path)
                            .map(|p| PathInput { name: p.name.clone(), json: p.json, reserved: p.reserved })
                            .collect();
                        imported.operations.insert(operation.label.clone(), Arc::new(operation));
                        imported.tools.push(tool);
                    }
                    Err(reason) => imported.skipped.push(Skipped { what, reason }),
                }
            }
            Err(reason) => imported.skipped.push(Skipped { what, reason }),
        }
    }
    Ok(imported)
}

/// An operation of the document that the config's patterns let in.
struct Candidate<'d> {
    path: &'d str,
    method: &'static str,
    http_method: Method,
    operation: &'d Map<String, Value>,
    /// The path item's parameters, shared by its operations.
    shared_params: Option<&'d Value>,
}

impl Candidate<'_> {
    fn operation_id(&self) -> Option<&str> {
        self.operation.get("operationId").and_then(Value::as_str).filter(|id| !pascal(id).is_empty())
    }

    fn method_and_path(&self) -> String {
        format!("{} {}", self.method.to_ascii_uppercase(), self.path)
    }

    /// How a skipped operation is named in `/status`.
    fn label(&self) -> String {
        match self.operation.get("operationId").and_then(Value::as_str) {
            Some(id) => format!("{} ({})", self.method_and_path(), shown(id)),
            None => self.method_and_path(),
        }
    }
}

/// Every operation, in the document's order (paths sorted), that
/// `operations` lets in and `exclude` does not keep out.
fn candidates<'d>(
    document: &'d Document,
    resolver: &Resolver<'d>,
    settings: ImportSettings<'_>,
    skipped: &mut Vec<Skipped>,
) -> Vec<Candidate<'d>> {
    let mut found = Vec::new();
    let Some(paths) = document.paths() else { return found };
    for (path, item) in paths {
        // A path item may itself be a `$ref` (3.1).
        let item = match resolver.object(item) {
            Ok(Value::Object(item)) => item,
            Ok(_) => continue,
            Err(reason) => {
                skipped.push(Skipped { what: shown(path), reason });
                continue;
            }
        };
        for (method, http_method) in METHODS {
            let Some(Value::Object(operation)) = item.get(*method) else { continue };
            let candidate = Candidate {
                path,
                method,
                http_method: http_method.clone(),
                operation,
                shared_params: item.get("parameters"),
            };
            let id = candidate.operation.get("operationId").and_then(Value::as_str);
            let method_and_path = candidate.method_and_path();
            let included =
                settings.operations.is_empty() || settings.operations.iter().any(|p| p.matches(id, &method_and_path));
            if included && !settings.exclude.iter().any(|p| p.matches(id, &method_and_path)) {
                found.push(candidate);
            }
        }
    }
    found
}

/// Each candidate's tool name: its operationId in PascalCase, else the
/// method and the path's literal segments (`GET /books/{id}` →
/// `GetBooks`), made unique with the path's parameters (`GetBooksById`)
/// or a number. Operation ids claim their names first.
fn named<'d>(candidates: Vec<Candidate<'d>>, skipped: &mut Vec<Skipped>) -> Vec<(Candidate<'d>, String)> {
    let mut taken: BTreeMap<String, String> = BTreeMap::new();
    let mut named = Vec::with_capacity(candidates.len());
    let (with_id, without): (Vec<_>, Vec<_>) = candidates.into_iter().partition(|c| c.operation_id().is_some());
    for candidate in with_id {
        let name = pascal(candidate.operation_id().unwrap_or_default());
        if let Some(first) = taken.get(&name) {
            skipped.push(Skipped {
                what: candidate.label(),
                reason: format!("its tool name {name} is already taken by {first}; give it another operationId"),
            });
            continue;
        }
        taken.insert(name.clone(), candidate.label());
        named.push((candidate, name));
    }
    for candidate in without {
        let literal: String = candidate.path.split('/').filter(|s| !s.contains('{')).map(pascal).collect();
        let base = format!("{}{literal}", pascal(candidate.method));
        let params: String = candidate
            .path
            .split('/')
            .filter_map(|s| s.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
            .map(pascal)
            .collect::<Vec<_>>()
            .join("And");
        let mut name = base.clone();
        if taken.contains_key(&name) && !params.is_empty() {
            name = format!("{base}By{params}");
        }
        let mut n = 2;
        while taken.contains_key(&name) {
            name = format!("{base}{n}");
            n += 1;
        }
        taken.insert(name.clone(), candidate.label());
        named.push((candidate, name));
    }
    named
}

/// One operation's definition (without id, name and version), plan and
/// MCP annotations.
fn tool(
    document: &Document,
    resolver: &Resolver<'_>,
    candidate: &Candidate<'_>,
    security: &SecurityMap,
) -> Result<(Value, Operation, Value), String> {
    let op = candidate.operation;
    let path = path_template(candidate.path)?;
    let mut properties = Map::new();
    let mut required: Vec<Value> = Vec::new();
    let mut params: Vec<Param> = Vec::new();
    for (param, schema, is_required) in parameters(resolver, candidate)? {
        if properties.contains_key(&param.name) {
            return Err(format!(
                "two parameters are named {:?} (in different places); the tool's input cannot hold both",
                param.name
            ));
        }
        if is_required {
            required.push(Value::String(param.name.clone()));
        }
        properties.insert(param.name.clone(), schema);
        params.push(param);
    }
    for part in &path {
        if let PathPart::Param(name) = part {
            if !params.iter().any(|p| p.location == Location::Path && &p.name == name) {
                return Err(format!("the path parameter {{{name}}} is not declared"));
            }
        }
    }
    let mut additional = Some(Value::Bool(false));
    let body = match op.get("requestBody") {
        None => None,
        Some(body) => request_body(resolver, body, &mut properties, &mut required, &mut additional)?,
    };
    let mut input = Map::new();
    input.insert("type".into(), json!("object"));
    input.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        input.insert("required".into(), Value::Array(required));
    }
    if let Some(additional) = additional {
        input.insert("additionalProperties".into(), additional);
    }
    let (output_schema, accept) = success_answer(resolver, op)?;
    let (credentials, requirements) = credentials(document, resolver, op, security)?;
    let mut definition = json!({
        "description": description(op),
        "input_schema": Value::Object(input),
        "output_schema": output_schema,
    });
    if let Some(requirements) = requirements {
        definition["requirements"] = requirements;
    }
    let operation = Operation {
        label: candidate.method_and_path(),
        method: candidate.http_method.clone(),
        path,
        params,
        body,
        credentials,
        accept,
    };
    Ok((definition, operation, annotations(candidate)))
}

/// `summary` and `description`, one paragraph each.
fn description(op: &Map<String, Value>) -> String {
    let text = |key: &str| op.get(key).and_then(Value::as_str).map(str::trim).filter(|s| !s.is_empty());
    match (text("summary"), text("description")) {
        (Some(summary), Some(description)) if summary != description => format!("{summary}\n\n{description}"),
        (Some(one), _) | (None, Some(one)) => one.to_owned(),
        (None, None) => String::new(),
    }
}

/// What a model may assume about an operation, from its method (MCP's
/// tool annotations: GET reads, DELETE destroys, PUT and DELETE repeat
/// safely).
fn annotations(candidate: &Candidate<'_>) -> Value {
    let mut hints = Map::new();
    if let Some(summary) = candidate.operation.get("summary").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        hints.insert("title".into(), Value::String(summary.to_owned()));
    }
    let method = &candidate.http_method;
    let read_only = method == Method::GET || method == Method::HEAD || method == Method::OPTIONS;
    hints.insert("readOnlyHint".into(), Value::Bool(read_only));
    if !read_only {
        hints.insert("destructiveHint".into(), Value::Bool(method == Method::DELETE));
        hints.insert("idempotentHint".into(), Value::Bool(method == Method::PUT || method == Method::DELETE));
    }
    hints.insert("openWorldHint".into(), Value::Bool(true));
    Value::Object(hints)
}

/// The path template in pieces. What could change where a call goes is
/// refused: a template not starting with `/`, dot segments in any spelling
/// (`..`, `%2e%2e`, `..;`, `%2e%2e%2f` inside a segment: `url_path.rs`),
/// `?`, `#`, and characters a path cannot hold as they are.
fn path_template(template: &str) -> Result<Vec<PathPart>, String> {
    let refuse = |why: &str| Err(format!("the path {:?} {why}", shown(template)));
    if !template.starts_with('/') {
        return refuse("does not start with /");
    }
    if has_dot_segment(template) {
        return refuse(
            "has a . or .. segment once decoded (as written, percent-encoded or with `;`), which a proxy in front \
             of the API would resolve out of the upstream's url",
        );
    }
    let mut parts = Vec::new();
    let mut rest = template;
    while !rest.is_empty() {
        match rest.find('{') {
            Some(0) => {
                let Some(end) = rest.find('}') else { return refuse("has a { without }") };
                let name = &rest[1..end];
                if name.is_empty() || name.contains(['{', '/']) {
                    return refuse("has a malformed {parameter}");
                }
                parts.push(PathPart::Param(name.to_owned()));
                rest = &rest[end + 1..];
            }
            found => {
                let end = found.unwrap_or(rest.len());
                let literal = &rest[..end];
                let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/%".contains(&b);
                if !literal.bytes().all(allowed) || literal.contains('}') {
                    return refuse("has characters a path cannot hold as they are");
                }
                parts.push(PathPart::Literal(literal.to_owned()));
                rest = &rest[end..];
            }
        }
    }
    Ok(parts)
}

/// The operation's parameters (the path item's, overridden by the
/// operation's of the same name and place), each with its input schema and
/// whether it is required.
fn parameters(resolver: &Resolver<'_>, candidate: &Candidate<'_>) -> Result<Vec<(Param, Value, bool)>, String> {
    let mut listed: Vec<&Value> = Vec::new();
    for list in [candidate.shared_params, candidate.operation.get("parameters")].into_iter().flatten() {
        let Value::Array(items) = list else { return Err("`parameters` is not a list".into()) };
        for item in items {
            let item = resolver.object(item)?;
            let key = |p: &Value| (p.get("name").cloned(), p.get("in").cloned());
            listed.retain(|earlier| key(earlier) != key(item));
            listed.push(item);
        }
    }
    let mut params = Vec::new();
    for item in listed {
        if let Some(param) = parameter(resolver, item)? {
            params.push(param);
        }
    }
    Ok(params)
}

/// One parameter, or `None` for the headers OpenAPI says to ignore.
fn parameter(resolver: &Resolver<'_>, item: &Value) -> Result<Option<(Param, Value, bool)>, String> {
    let name =
        item.get("name").and_then(Value::as_str).filter(|n| !n.is_empty()).ok_or("a parameter without a name")?;
    let location = match item.get("in").and_then(Value::as_str) {
        Some("path") => Location::Path,
        Some("query") => Location::Query,
        Some("header") => Location::Header,
        Some("cookie") => Location::Cookie,
        other => return Err(format!("parameter {name:?}: `in` {other:?} is not path, query, header or cookie")),
    };
    if location == Location::Header {
        // OpenAPI says to ignore these three; the others frame or route the
        // request, which is the gateway's to write, never the input's.
        if ["accept", "content-type", "authorization"].contains(&name.to_ascii_lowercase().as_str())
            || reserved_header(name)
        {
            return Ok(None);
        }
        HeaderName::try_from(name).map_err(|_| format!("header parameter {name:?} is not a header name"))?;
    }
    let style = match (item.get("style").and_then(Value::as_str), location) {
        (None, Location::Path | Location::Header) | (Some("simple"), Location::Path | Location::Header) => {
            Style::Simple
        }
        (None, Location::Query | Location::Cookie) | (Some("form"), Location::Query | Location::Cookie) => Style::Form,
        (Some("label"), Location::Path) => Style::Label,
        (Some("matrix"), Location::Path) => Style::Matrix,
        (Some("spaceDelimited"), Location::Query) => Style::SpaceDelimited,
        (Some("pipeDelimited"), Location::Query) => Style::PipeDelimited,
        (Some("deepObject"), Location::Query) => Style::DeepObject,
        (Some(style), _) => return Err(format!("parameter {name:?}: style {style:?} is not supported there")),
    };
    let explode = item.get("explode").and_then(Value::as_bool).unwrap_or(style == Style::Form);
    // Reserved expansion is honoured in a path only (a query's value is
    // always encoded), and only for `/`.
    let reserved = location == Location::Path && item.get("allowReserved") == Some(&Value::Bool(true));
    let mut budget = Budget::new(INPUT_BUDGET);
    let (schema, json) = match (item.get("schema"), item.get("content")) {
        (Some(schema), _) => (resolver.for_requests().schema(schema, &mut budget)?, false),
        (None, Some(Value::Object(content))) => {
            let (media_type, media) = content.iter().next().ok_or(format!("parameter {name:?}: empty `content`"))?;
            if !is_json(media_type) {
                return Err(format!("parameter {name:?}: content {media_type:?} is not supported (JSON only)"));
            }
            let schema =
                media.get("schema").map_or(Ok(json!({})), |s| resolver.for_requests().schema(s, &mut budget))?;
            (schema, true)
        }
        _ => (json!({}), false),
    };
    let schema = describe(schema, item.get("description"), item.get("deprecated"));
    let is_required = location == Location::Path || item.get("required") == Some(&Value::Bool(true));
    let param = Param { name: name.to_owned(), location, style, explode, json, reserved: reserved && !json };
    Ok(Some((param, schema, is_required)))
}

/// A parameter's schema with the parameter's own description (and
/// deprecation), which say more than its schema's.
fn describe(schema: Value, description: Option<&Value>, deprecated: Option<&Value>) -> Value {
    let mut schema = match schema {
        Value::Object(fields) => fields,
        Value::Bool(true) => Map::new(),
        other => return other,
    };
    if let Some(text @ Value::String(_)) = description {
        schema.insert("description".into(), text.clone());
    }
    if deprecated == Some(&Value::Bool(true)) {
        schema.insert("deprecated".into(), Value::Bool(true));
    }
    Value::Object(schema)
}

/// The request body: a JSON object's properties join the parameters at the
/// top when no name collides (`Merged`), anything else is the input `body`.
/// A body the gateway cannot write (multipart, form) makes the operation a
/// skip when it is required, and is left out when it is not.
fn request_body(
    resolver: &Resolver<'_>,
    body: &Value,
    properties: &mut Map<String, Value>,
    required: &mut Vec<Value>,
    additional: &mut Option<Value>,
) -> Result<Option<Body>, String> {
    let body = resolver.object(body)?;
    let is_required = body.get("required") == Some(&Value::Bool(true));
    let Some(Value::Object(content)) = body.get("content") else { return Ok(None) };
    let chosen = content
        .iter()
        .find(|(media_type, _)| media_type.eq_ignore_ascii_case("application/json"))
        .or_else(|| content.iter().find(|(media_type, _)| is_json(media_type)))
        .map(|(m, v)| (m, v, true))
        .or_else(|| {
            content.iter().find(|(m, _)| m.to_ascii_lowercase().starts_with("text/")).map(|(m, v)| (m, v, false))
        });
    let Some((media_type, media, json)) = chosen else {
        let types: Vec<&str> = content.keys().map(String::as_str).collect();
        return if is_required {
            Err(format!(
                "its request body ({}) is not supported: only JSON and text bodies are",
                shown(&types.join(", "))
            ))
        } else {
            Ok(None)
        };
    };
    let mut budget = Budget::new(INPUT_BUDGET);
    let schema = match media.get("schema") {
        Some(schema) => resolver.for_requests().schema(schema, &mut budget)?,
        None if json => json!({}),
        None => json!({"type": "string"}),
    };
    let merged = json && mergeable(&schema, properties);
    let shape = if merged {
        let Value::Object(mut fields) = schema else { return Err("unreachable: a mergeable body is an object".into()) };
        if let Some(Value::Object(body_properties)) = fields.remove("properties") {
            properties.extend(body_properties);
        }
        if is_required {
            if let Some(Value::Array(names)) = fields.remove("required") {
                required.extend(names);
            }
        }
        // Inputs that are not parameters go into the body, so the body's
        // own rule for other properties is the input's.
        *additional = fields.remove("additionalProperties");
        BodyShape::Merged
    } else {
        if properties.contains_key("body") {
            return Err("a parameter is named `body`, which the request body's input needs".into());
        }
        let text = if json { schema } else { json!({"type": "string"}) };
        properties.insert("body".into(), describe(text, body.get("description"), None));
        if is_required {
            required.push(Value::String("body".into()));
        }
        BodyShape::Property
    };
    Ok(Some(Body { media_type: media_type.clone(), json, shape, required: is_required }))
}

/// Whether a body schema's properties can stand beside the parameters: an
/// object described by `properties` alone (and `required`,
/// `additionalProperties`, annotations), none named like a parameter.
fn mergeable(schema: &Value, parameters: &Map<String, Value>) -> bool {
    let Value::Object(fields) = schema else { return false };
    let Some(Value::Object(body_properties)) = fields.get("properties") else { return false };
    let simple = fields.iter().all(|(key, value)| match key.as_str() {
        "type" => value == "object",
        "properties" | "required" | "additionalProperties" | "title" | "description" | "examples" => true,
        _ => false,
    });
    simple && !body_properties.keys().any(|name| parameters.contains_key(name))
}

/// The first successful answer's JSON schema (`null` when it has none),
/// and the media types to accept.
fn success_answer(resolver: &Resolver<'_>, op: &Map<String, Value>) -> Result<(Value, Option<String>), String> {
    let Some(Value::Object(responses)) = op.get("responses") else { return Ok((Value::Null, None)) };
    let mut codes: Vec<&String> = responses.keys().filter(|code| code.starts_with('2')).collect();
    // Exact codes before `2XX`, lowest first.
    codes.sort_by_key(|code| (!code.bytes().all(|b| b.is_ascii_digit()), code.to_ascii_uppercase()));
    for code in codes {
        let response = resolver.object(&responses[code.as_str()])?;
        let Some(Value::Object(content)) = response.get("content") else { continue };
        let accept = (!content.is_empty()).then(|| content.keys().cloned().collect::<Vec<_>>().join(", "));
        let json = content.iter().find(|(media_type, _)| is_json(media_type));
        let schema = match json.and_then(|(_, media)| media.get("schema")) {
            Some(schema) => resolver.for_responses().schema(schema, &mut Budget::new(OUTPUT_BUDGET))?,
            None => Value::Null,
        };
        return Ok((schema, accept));
    }
    Ok((Value::Null, None))
}

/// Whether a media type is JSON: `application/json`, `…+json`, with or
/// without parameters.
pub(crate) fn is_json(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json") || essence == "text/json"
}

/// PascalCase: split at every character outside ASCII letters and digits,
/// each part's first letter upper-cased (`listBooks` → `ListBooks`,
/// `issues/create` → `IssuesCreate`).
pub(crate) fn pascal(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for part in text.split(|c: char| !c.is_ascii_alphanumeric()).filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            out.push_str(chars.as_str());
        }
    }
    out
}

/// Text from the document as shown in a reason: bounded, printable.
fn shown(text: &str) -> String {
    text.chars().take(200).map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::SecuritySource;
    use crate::openapi::plan::SchemeKind;
    use crate::wire::Input;
    use serde_json::json;

    fn settings<'a>(
        security: &'a SecurityMap,
        operations: &'a [OperationPattern],
        exclude: &'a [OperationPattern],
    ) -> ImportSettings<'a> {
        ImportSettings { toolkit: None, version: None, operations, exclude, security }
    }

    fn document(paths: Value) -> Value {
        json!({"openapi": "3.1.0", "info": {"title": "Library API", "version": "2.3.0"}, "paths": paths,
               "components": {"securitySchemes": {
                   "Key": {"type": "apiKey", "in": "header", "name": "X-Key"},
                   "OAuth": {"type": "oauth2", "flows": {}},
                   "Unmapped": {"type": "http", "scheme": "bearer"},
                   "Mtls": {"type": "mutualTLS"}}}})
    }

    fn import_doc(doc: &Value, security: &SecurityMap) -> Imported {
        import(doc.to_string().as_bytes(), settings(security, &[], &[])).expect("imports")
    }

    fn ids(imported: &Imported) -> Vec<String> {
        let mut ids: Vec<String> = imported.tools.iter().map(|t| t.definition.id.clone()).collect();
        ids.sort();
        ids
    }

    #[test]
    fn names_come_from_operation_ids_or_methods_and_paths() {
        assert_eq!(pascal("listBooks"), "ListBooks");
        assert_eq!(pascal("issues/create"), "IssuesCreate");
        assert_eq!(pascal("get_user-by.id"), "GetUserById");
        let ok = json!({"responses": {"200": {"description": "ok"}}});
        let doc = document(json!({
            "/books": {"get": ok.clone(), "post": {"operationId": "books/create", "responses": {}}},
            "/books/{id}": {"get": {"parameters": [{"name": "id", "in": "path", "required": true}], "responses": {}}},
            "/other": {"get": {"operationId": "books-create", "responses": {}}},
        }));
        let imported = import_doc(&doc, &SecurityMap::new());
        assert_eq!(
            ids(&imported),
            ["LibraryAPI.BooksCreate@2.3.0", "LibraryAPI.GetBooks@2.3.0", "LibraryAPI.GetBooksById@2.3.0"]
        );
        assert!(imported.skipped[0].reason.contains("already taken"), "{:?}", imported.skipped);
        let tool =
            imported.tools.iter().find(|t| t.definition.id.starts_with("LibraryAPI.GetBooksById")).expect("tool");
        assert_eq!(tool.upstream_id, "GET /books/{id}");
        assert!(imported.operations.contains_key("GET /books/{id}"));
    }

    #[test]
    fn bodies_merge_unless_a_name_collides() {
        let body = |schema: Value| json!({"required": true, "content": {"application/json": {"schema": schema}}});
        let object = json!({"type": "object", "properties": {"title": {"type": "string"}, "id": {"type": "integer"}},
                            "required": ["title"]});
        let id = json!([{"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}}]);
        let doc = document(json!({
            "/books": {"post": {"operationId": "create", "requestBody": body(object.clone()), "responses": {}}},
            "/books/{id}": {"put": {"operationId": "update", "parameters": id, "requestBody": body(object), "responses": {}}},
            "/bulk": {"post": {"operationId": "bulk", "requestBody": body(json!({"type": "array"})), "responses": {}}},
            "/upload": {"post": {"operationId": "upload", "requestBody": {"required": true, "content": {"multipart/form-data": {}}}, "responses": {}}},
        }));
        let imported = import_doc(&doc, &SecurityMap::new());
        let schema = |id: &str| {
            imported.tools.iter().find(|t| t.definition.id.contains(id)).expect(id).definition.input_schema.to_value()
        };
        assert_eq!(schema(".Create@")["required"], json!(["title"]));
        assert!(schema(".Create@").get("additionalProperties").is_none(), "other inputs go into the body");
        assert_eq!(schema(".Update@")["required"], json!(["id", "body"]));
        assert_eq!(schema(".Update@")["additionalProperties"], false);
        assert_eq!(schema(".Bulk@")["properties"]["body"]["type"], "array");
        assert_eq!(imported.operations["PUT /books/{id}"].body.as_ref().expect("body").shape, BodyShape::Property);
        let skipped = &imported.skipped;
        assert!(skipped.iter().any(|s| s.what.contains("POST /upload") && s.reason.contains("multipart/form-data")));
    }

    #[test]
    fn security_becomes_requirements_or_a_reason() {
        let secured = |security: Value| json!({"operationId": "op", "security": security, "responses": {}});
        let mut security = SecurityMap::new();
        security.insert("Key".into(), SecuritySource::Secret("LIB_KEY".into()));
        security.insert("OAuth".into(), SecuritySource::Authorization("github".into()));
        let doc = document(json!({
            "/a": {"get": secured(json!([{"Key": []}]))},
            "/b": {"get": secured(json!([{"Mtls": []}, {"OAuth": ["repo", "read:org"]}]))},
            "/c": {"get": secured(json!([{"Unmapped": []}]))},
            "/d": {"get": secured(json!([{"Unmapped": []}, {}]))},
            "/e": {"get": secured(json!([{"Mtls": []}]))},
        }));
        let doc = {
            let mut doc = doc;
            for (path, id) in [("/a", "a"), ("/b", "b"), ("/c", "c"), ("/d", "d"), ("/e", "e")] {
                doc["paths"][path]["get"]["operationId"] = json!(id);
            }
            doc
        };
        let imported = import_doc(&doc, &security);
        let requirements = |id: &str| {
            let tool =
                imported.tools.iter().find(|t| t.definition.id.starts_with(&format!("LibraryAPI.{id}@"))).expect(id);
            serde_json::to_value(&tool.definition.requirements).expect("json")
        };
        assert_eq!(requirements("A"), json!({"secrets": [{"id": "LIB_KEY"}]}));
        assert_eq!(
            requirements("B"),
            json!({"authorization": [{"id": "github", "oauth2": {"scopes": ["repo", "read:org"]}}]})
        );
        assert_eq!(requirements("D"), Value::Null, "{{}} lets it through unauthenticated");
        let reasons: Vec<&str> = imported.skipped.iter().map(|s| s.reason.as_str()).collect();
        assert!(reasons.iter().any(|r| r.contains("\"Unmapped\" is not mapped")), "{reasons:?}");
        assert!(reasons.iter().any(|r| r.contains("mutualTLS")), "{reasons:?}");
        assert_eq!(imported.operations["GET /b"].credentials[0].kind, SchemeKind::Bearer);
    }

    #[test]
    fn paths_that_could_go_elsewhere_are_skipped() {
        let op = json!({"responses": {}});
        let doc = document(json!({
            "/a/../admin": {"get": op.clone()}, "x": {"get": op.clone()}, "/q?x=1": {"get": op.clone()},
            "/%2e%2e/admin": {"get": op.clone()}, "/b/%2E%2e/admin": {"get": op.clone()},
            "/c/..;/admin": {"get": op.clone()}, "/d%2F..%2Fadmin": {"get": op.clone()},
            "/e/%252e%252e/admin": {"get": op.clone()},
            "/ok/{p}": {"get": {"parameters": [{"name": "p", "in": "path"}], "responses": {}}},
            "/.well-known/.../x": {"get": op.clone()},
        }));
        let imported = import_doc(&doc, &SecurityMap::new());
        assert_eq!(ids(&imported), ["LibraryAPI.GetOk@2.3.0", "LibraryAPI.GetWellKnownX@2.3.0"]);
        assert_eq!(imported.skipped.len(), 8, "{:?}", imported.skipped);
        let encoded = imported.skipped.iter().find(|s| s.what.contains("/%2e%2e/admin")).expect("skipped");
        assert!(encoded.reason.contains(". or .. segment once decoded"), "{encoded:?}");
        // The path parameter is checked at validation, before anything is sent.
        let ok = imported.tools.iter().find(|t| t.key == "LibraryAPI.GetOk").expect("GetOk");
        assert_eq!(ok.path_inputs, [PathInput { name: "p".into(), json: false, reserved: false }]);
        let refused = ok.check_input(&Input::from_value(json!({"p": "%2E%2e"}))).expect_err("a dot segment");
        assert!(refused["p"].contains(". or .."), "{refused:?}");
        assert!(ok.check_input(&Input::from_value(json!({"p": "..."}))).is_ok());
        assert!(ok.check_input(&Input::from_value(json!({"p": "a/b"}))).is_err(), "a / leaves the segment");
        // Declared reserved expansion: several segments, none climbing.
        let files = json!({"/files/{path}": {"get": {"operationId": "file", "responses": {}, "parameters": [
            {"name": "path", "in": "path", "required": true, "allowReserved": true, "schema": {"type": "string"}}]}}});
        let imported = import_doc(&document(files), &SecurityMap::new());
        let file = &imported.tools[0];
        assert!(file.path_inputs[0].reserved);
        assert!(file.check_input(&Input::from_value(json!({"path": "docs/a.md"}))).is_ok());
        assert!(file.check_input(&Input::from_value(json!({"path": "docs/%2e%2e/%2e%2e/admin"}))).is_err());
    }

    #[test]
    fn headers_that_frame_or_route_a_request_are_not_inputs() {
        let header = |name: &str| json!({"name": name, "in": "header", "schema": {"type": "string"}});
        let params = json!([header("Host"), header("Content-Length"), header("Transfer-Encoding"), header("X-Ok")]);
        let doc = document(json!({"/h": {"get": {"operationId": "h", "parameters": params, "responses": {}}}}));
        let imported = import_doc(&doc, &SecurityMap::new());
        let schema = imported.tools[0].definition.input_schema.to_value();
        let names: Vec<&String> = schema["properties"].as_object().expect("properties").keys().collect();
        assert_eq!(names, ["X-Ok"]);
        let mut doc = doc;
        doc["components"]["securitySchemes"]["Key"]["name"] = json!("Host");
        doc["paths"]["/h"]["get"]["security"] = json!([{"Key": []}]);
        let mut security = SecurityMap::new();
        security.insert("Key".into(), SecuritySource::Secret("K".into()));
        let imported = import_doc(&doc, &security);
        assert!(imported.skipped[0].reason.contains("writes itself"), "{:?}", imported.skipped);
    }

    #[test]
    fn patterns_select_operations_and_the_document_names_toolkit_and_version() {
        let op = |id: &str| json!({"operationId": id, "responses": {}});
        let doc = document(
            json!({"/books": {"get": op("listBooks"), "delete": op("purge")}, "/admin": {"get": op("admin")}}),
        );
        let body = doc.to_string();
        let only = [OperationPattern("*Books".into()), OperationPattern("DELETE *".into())];
        let except = [OperationPattern("DELETE /books".into())];
        let imported = import(body.as_bytes(), settings(&SecurityMap::new(), &only, &except)).expect("imports");
        assert_eq!(ids(&imported), ["LibraryAPI.ListBooks@2.3.0"]);
        let none = SecurityMap::new();
        let custom = ImportSettings { toolkit: Some("Lib"), version: Some("9.0.0"), ..settings(&none, &[], &[]) };
        assert!(ids(&import(body.as_bytes(), custom).expect("imports")).contains(&"Lib.Admin@9.0.0".to_owned()));
        let unversioned = body.replace("2.3.0", "2023-11-28");
        let e = import(unversioned.as_bytes(), settings(&SecurityMap::new(), &[], &[])).expect_err("no version");
        assert!(e.to_string().contains("set `version`"), "{e}");
        let untitled = body.replace("Library API", "!!!");
        let e = import(untitled.as_bytes(), settings(&SecurityMap::new(), &[], &[])).expect_err("no toolkit");
        assert!(e.to_string().contains("set `toolkit`"), "{e}");
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_document_gives_at_most_max_tools() {
        let paths: Map<String, Value> = (0..MAX_TOOLS + 5)
            .map(|i| (format!("/op{i:05}"), json!({"get": {"operationId": format!("op{i:05}"), "responses": {}}})))
            .collect();
        let doc = json!({"openapi": "3.1.0", "info": {"title": "Many", "version": "1.0.0"}, "paths": paths});
        let none = SecurityMap::new();
        let settings = ImportSettings { toolkit: None, version: None, operations: &[], exclude: &[], security: &none };
        let imported = import(doc.to_string().as_bytes(), settings).expect("imports");
        assert_eq!(imported.tools.len(), MAX_TOOLS);
        assert_eq!(imported.skipped.len(), 1, "one entry for the rest");
        assert!(imported.skipped[0].reason.contains("the 4 after it"), "{:?}", imported.skipped[0]);
    }

    #[test]
    fn a_document_of_many_large_operations_is_bounded_in_all() {
        // Each operation's body refers to a schema of 10^10 objects if
        // expanded: each is cut at its own budget, and their sum at the
        // document's.
        let mut schemas = Map::new();
        for level in 0..10 {
            let properties: Map<String, Value> = (0..10)
                .map(|i| (format!("p{i}"), json!({"$ref": format!("#/components/schemas/L{}", level + 1)})))
                .collect();
            schemas.insert(format!("L{level}"), json!({"type": "object", "properties": properties}));
        }
        schemas.insert("L10".into(), json!({"type": "string"}));
        let body =
            json!({"required": true, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/L0"}}}});
        let paths: Map<String, Value> = (0..100)
            .map(|i| {
                (
                    format!("/op{i:03}"),
                    json!({"post": {"operationId": format!("op{i:03}"), "requestBody": body, "responses": {}}}),
                )
            })
            .collect();
        let doc = json!({"openapi": "3.1.0", "info": {"title": "Wide", "version": "1.0.0"}, "paths": paths,
                         "components": {"schemas": schemas}});
        let started = std::time::Instant::now();
        let none = SecurityMap::new();
        let settings = ImportSettings { toolkit: None, version: None, operations: &[], exclude: &[], security: &none };
        let imported = import(doc.to_string().as_bytes(), settings).expect("imports");
        assert!(started.elapsed() < std::time::Duration::from_secs(60), "{:?}", started.elapsed());
        let listed = imported.tools.len();
        assert!(listed > 10 && listed < 100, "{listed} listed");
        assert_eq!(imported.skipped.len(), 1, "one entry for all: {:?}", imported.skipped);
        let reason = &imported.skipped[0].reason;
        assert!(reason.contains("more than 1000000 schema objects"), "{reason}");
        assert!(reason.contains(&format!("the {} after it", 100 - listed - 1)), "{reason}");
    }
}
