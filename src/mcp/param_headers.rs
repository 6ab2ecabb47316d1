//! `x-mcp-header`: tool parameters an MCP 2026-07-28 server wants mirrored
//! into `Mcp-Param-{name}` headers of `tools/call`, so that intermediaries
//! can route on them without reading the body.
//!
//! A client must mirror them (the server refuses a call whose headers do not
//! match its body, -32020), and must leave out a tool whose annotations break
//! the rules: a name that is an HTTP token, unique regardless of case, on a
//! `string`, `integer` or `boolean` property reached from the root through
//! `properties` alone.

use http::{HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::v2026_07_28::encode_header_value;

/// The annotation keyword.
pub const ANNOTATION: &str = "x-mcp-header";

/// The prefix of the headers it names: `Mcp-Param-{name}`.
pub const PARAM_HEADER_PREFIX: &str = "mcp-param-";

/// One mirrored parameter: where its value is in the arguments, and the
/// header it goes in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamHeader {
    /// The `properties` keys from the schema root to the parameter.
    pub path: Vec<String>,
    /// `mcp-param-<name>`.
    pub header: HeaderName,
}

/// Applicators whose value is one subschema, an array or a map of them:
/// every schema position under them is off the `properties` chain. `$ref`,
/// `const`, `enum`, `default` and `examples` are not entered (data, or a
/// reference that is never followed).
const SINGLE: &[&str] = &[
    "items",
    "contains",
    "unevaluatedItems",
    "additionalProperties",
    "propertyNames",
    "unevaluatedProperties",
    "not",
    "if",
    "then",
    "else",
    "contentSchema",
];
const LIST: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];
const MAP: &[&str] = &["patternProperties", "dependentSchemas", "$defs", "definitions"];

/// The headers an input schema declares, or why the tool must be left out.
/// A schema without annotations declares none.
pub fn declared(schema: &Value) -> Result<Vec<ParamHeader>, String> {
    let mut found: Vec<ParamHeader> = Vec::new();
    // An explicit stack, not recursion; a parsed schema is at most 128 levels
    // deep (serde_json's limit), which bounds each path.
    let mut stack: Vec<(Option<Vec<String>>, &Value)> = vec![(Some(Vec::new()), schema)];
    while let Some((path, node)) = stack.pop() {
        let Value::Object(node) = node else { continue };
        if let Some(name) = node.get(ANNOTATION) {
            found.push(annotation(path.as_deref(), name, node)?);
        }
        for (keyword, value) in node {
            let keyword = keyword.as_str();
            match value {
                Value::Object(properties) if keyword == "properties" => {
                    for (name, sub) in properties {
                        let sub_path = path.as_ref().map(|p| {
                            let mut p = p.clone();
                            p.push(name.clone());
                            p
                        });
                        stack.push((sub_path, sub));
                    }
                }
                _ if SINGLE.contains(&keyword) => stack.push((None, value)),
                Value::Array(list) if LIST.contains(&keyword) => {
                    stack.extend(list.iter().map(|sub| (None, sub)));
                }
                Value::Object(map) if MAP.contains(&keyword) => {
                    stack.extend(map.values().map(|sub| (None, sub)));
                }
                _ => {}
            }
        }
    }
    for (i, a) in found.iter().enumerate() {
        if let Some(b) = found[..i].iter().find(|b| b.header == a.header) {
            return Err(format!(
                "{ANNOTATION} on {:?} repeats the one on {:?} (header names ignore case)",
                a.path.join("."),
                b.path.join(".")
            ));
        }
    }
    Ok(found)
}

/// One annotation, checked.
fn annotation(path: Option<&[String]>, name: &Value, schema: &Map<String, Value>) -> Result<ParamHeader, String> {
    let path = match path {
        Some(path) if !path.is_empty() => path,
        _ => return Err(format!("{ANNOTATION} is on a schema not reached from the root through `properties` alone")),
    };
    let at = path.join(".");
    let Some(name) = name.as_str() else { return Err(format!("{ANNOTATION} on {at:?} is not a string")) };
    if name.is_empty() || !name.bytes().all(is_tchar) {
        return Err(format!("{ANNOTATION} {name:?} on {at:?} is not an HTTP header name"));
    }
    match schema.get("type").and_then(Value::as_str) {
        Some("string" | "integer" | "boolean") => {}
        _ => {
            return Err(format!("{ANNOTATION} on {at:?}: only string, integer and boolean parameters may be mirrored"))
        }
    }
    let header = HeaderName::from_bytes(format!("{PARAM_HEADER_PREFIX}{name}").as_bytes())
        .map_err(|_| format!("{ANNOTATION} {name:?} on {at:?} is not an HTTP header name"))?;
    Ok(ParamHeader { path: path.to_vec(), header })
}

/// RFC 9110 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The `Mcp-Param-*` headers of one call: each declared parameter present
/// in `arguments` with a string, number or boolean value; absent, `null` and
/// other values send no header.
pub fn values(declared: &[ParamHeader], arguments: &Value) -> Vec<(HeaderName, HeaderValue)> {
    let mut headers = Vec::new();
    for param in declared {
        let mut node = arguments;
        for key in &param.path {
            node = match node.get(key) {
                Some(next) => next,
                None => {
                    node = &Value::Null;
                    break;
                }
            };
        }
        let text = match node {
            Value::String(s) => s.clone(),
            // The number's own text (arbitrary_precision keeps it).
            Value::Number(n) => n.to_string(),
            Value::Bool(b) => b.to_string(),
            _ => continue,
        };
        if let Ok(value) = HeaderValue::from_str(&encode_header_value(&text)) {
            headers.push((param.header.clone(), value));
        }
    }
    headers
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn annotations_on_the_properties_chain_are_mirrored() {
        let schema = json!({"type": "object", "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "limit": {"type": "integer", "x-mcp-header": "Limit"},
            "dry": {"type": "boolean", "x-mcp-header": "Dry-Run"},
            "where": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
            "plain": {"type": "string"}
        }});
        let declared = declared(&schema).expect("valid");
        assert_eq!(declared.len(), 4);
        let sent = values(&declared, &json!({"region": "Zürich", "limit": 12, "dry": false, "where": {"zone": "b"}}));
        let sent: Vec<(String, String)> =
            sent.into_iter().map(|(k, v)| (k.to_string(), v.to_str().expect("ascii").to_owned())).collect();
        for expected in [
            ("mcp-param-region", "=?base64?WsO8cmljaA==?="),
            ("mcp-param-limit", "12"),
            ("mcp-param-dry-run", "false"),
            ("mcp-param-zone", "b"),
        ] {
            assert!(sent.contains(&(expected.0.into(), expected.1.into())), "{expected:?} in {sent:?}");
        }
        // Absent and null parameters send no header.
        assert!(values(&declared, &json!({"region": null, "where": "not an object"})).is_empty());
        assert!(super::declared(&json!({"type": "object"})).expect("none").is_empty());
    }

    #[test]
    fn annotations_that_break_the_rules_leave_the_tool_out() {
        for (schema, why) in [
            (json!({"properties": {"a": {"type": "number", "x-mcp-header": "A"}}}), "only string"),
            (json!({"properties": {"a": {"type": "string", "x-mcp-header": "A B"}}}), "not an HTTP header"),
            (json!({"properties": {"a": {"type": "string", "x-mcp-header": ""}}}), "not an HTTP header"),
            (json!({"properties": {"a": {"type": "string", "x-mcp-header": 7}}}), "not a string"),
            (
                json!({"properties": {"a": {"type": "string", "x-mcp-header": "X"},
                                   "b": {"type": "string", "x-mcp-header": "x"}}}),
                "repeats",
            ),
            (
                json!({"properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "A"}}}}),
                "not reached",
            ),
            (json!({"anyOf": [{"properties": {"a": {"type": "string", "x-mcp-header": "A"}}}]}), "not reached"),
            (json!({"type": "string", "x-mcp-header": "Root"}), "not reached"),
        ] {
            let error = declared(&schema).expect_err(&schema.to_string());
            assert!(error.contains(why), "{schema}: {error}");
        }
    }
}
