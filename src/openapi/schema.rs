//! `$ref` resolution and schema normalisation: every schema a tool lists is
//! self-contained JSON Schema 2020-12, with nothing pointing into
//! `#/components` (clients and models read each schema on its own).
//!
//! - Only references inside the document (`#/…`) are followed; one to
//!   another file or URL is refused with its reason, never fetched.
//! - A reference to a schema already being expanded (a recursive schema) is
//!   not expanded again: it becomes a stub with the target's `type`, so a
//!   tree of comments nests once, not forever.
//! - Expansion is bounded in depth and in size: past either, what is left
//!   becomes such a stub. A document that references one schema many times
//!   over (each level doubling the tree) costs at most the budget.
//! - OpenAPI 3.0 schemas are turned into 2020-12: `nullable: true` adds
//!   `"null"` to `type` (or an `anyOf` with it), a boolean
//!   `exclusiveMinimum`/`exclusiveMaximum` becomes the number form,
//!   `example` becomes `examples`.
//! - What is not JSON Schema (`discriminator`, `xml`, `externalDocs`,
//!   `x-…` extensions, `$id`, `$schema`, `$comment`, `$defs` once inlined)
//!   is left out.

use std::cell::Cell;

use serde_json::{Map, Value};

use super::document::SpecVersion;

/// Schema levels expanded at most; deeper ones become stubs. Each level is
/// two levels of JSON (`properties`, then the name), and the JSON a tool
/// lists is read back with serde_json's limit of 128.
pub(crate) const MAX_DEPTH: usize = 24;

/// `$ref` chains between non-schema objects (a parameter referring to a
/// parameter...) followed at most.
const MAX_REF_CHAIN: usize = 16;

/// Resolves references against one document.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolver<'d> {
    root: &'d Value,
    version: SpecVersion,
    /// `readOnly` for what a client sends, `writeOnly` for what it gets:
    /// properties so marked are left out (and out of `required`), as
    /// OpenAPI says they do not apply there.
    omit: Option<&'static str>,
    /// What the whole document may still expand to, in schema objects:
    /// each schema's own budget is bounded, and so is their sum.
    allowance: Option<&'d Cell<usize>>,
}

/// How many schema objects one expansion may still produce. Past it,
/// references become stubs.
#[derive(Debug)]
pub(crate) struct Budget {
    left: usize,
    /// Whether a reference was left unexpanded for want of budget or depth.
    pub(crate) truncated: bool,
}

impl Budget {
    /// A budget of `nodes` schema objects.
    pub(crate) fn new(nodes: usize) -> Budget {
        Budget { left: nodes, truncated: false }
    }
}

/// The keywords whose value is one schema.
const SCHEMA_KEYWORDS: &[&str] = &[
    "not",
    "if",
    "then",
    "else",
    "items",
    "additionalProperties",
    "propertyNames",
    "contains",
    "unevaluatedItems",
    "unevaluatedProperties",
    "additionalItems",
    "contentSchema",
];

/// The keywords whose value is a list of schemas.
const SCHEMA_LIST_KEYWORDS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems"];

/// The keywords whose value maps names to schemas.
const SCHEMA_MAP_KEYWORDS: &[&str] = &["properties", "patternProperties", "dependentSchemas"];

/// The keywords kept as they are written (their values are data, never
/// schemas: a `$ref` inside an `enum` or `examples` is not followed).
const VALUE_KEYWORDS: &[&str] = &[
    "type",
    "enum",
    "const",
    "multipleOf",
    "maximum",
    "minimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxContains",
    "minContains",
    "maxProperties",
    "minProperties",
    "required",
    "dependentRequired",
    "format",
    "title",
    "description",
    "default",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentEncoding",
    "contentMediaType",
];

/// Keywords beside a 3.1 `$ref` that only annotate it: written into the
/// expanded target rather than wrapping it in an `allOf`.
const ANNOTATIONS: &[&str] = &["title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"];

impl<'d> Resolver<'d> {
    /// A resolver for the document `root`.
    pub(crate) fn new(root: &'d Value, version: SpecVersion) -> Resolver<'d> {
        Resolver { root, version, omit: None, allowance: None }
    }

    /// The same resolver, every expansion also taken from `allowance`.
    pub(crate) fn with_allowance(self, allowance: &'d Cell<usize>) -> Resolver<'d> {
        Resolver { allowance: Some(allowance), ..self }
    }

    /// The same resolver for what a client sends (parameters, bodies):
    /// `readOnly` properties are left out.
    pub(crate) fn for_requests(self) -> Resolver<'d> {
        Resolver { omit: Some("readOnly"), ..self }
    }

    /// The same resolver for what an API answers: `writeOnly` properties
    /// are left out.
    pub(crate) fn for_responses(self) -> Resolver<'d> {
        Resolver { omit: Some("writeOnly"), ..self }
    }

    /// The value a local reference (`#/components/schemas/Book`) points at.
    pub(crate) fn pointer(&self, reference: &str) -> Result<&'d Value, String> {
        let Some(fragment) = reference.strip_prefix('#') else {
            return Err(format!(
                "the $ref {:?} points outside the document; only references inside it (#/…) are followed",
                shown(reference)
            ));
        };
        // A URI fragment: percent-encoded, then a JSON pointer.
        let decoded = percent_encoding::percent_decode_str(fragment)
            .decode_utf8()
            .map_err(|_| format!("the $ref {:?} is not UTF-8", shown(reference)))?;
        if !decoded.is_empty() && !decoded.starts_with('/') {
            return Err(format!("the $ref {:?} is not a JSON pointer (#/…)", shown(reference)));
        }
        self.root.pointer(&decoded).ok_or_else(|| format!("the $ref {:?} points at nothing", shown(reference)))
    }

    /// A parameter, request body, response or security scheme, with its
    /// `$ref` (and the `$ref`s that one makes) followed.
    pub(crate) fn object(&self, value: &'d Value) -> Result<&'d Value, String> {
        let mut current = value;
        for _ in 0..MAX_REF_CHAIN {
            match current.get("$ref").and_then(Value::as_str) {
                Some(reference) => current = self.pointer(reference)?,
                None => return Ok(current),
            }
        }
        Err(format!("more than {MAX_REF_CHAIN} $refs in a row (a loop?)"))
    }

    /// A schema as self-contained JSON Schema 2020-12.
    pub(crate) fn schema(&self, schema: &Value, budget: &mut Budget) -> Result<Value, String> {
        if let Some(allowance) = self.allowance {
            budget.left = budget.left.min(allowance.get());
        }
        let before = budget.left;
        let mut expanding = Vec::new();
        let expanded = self.walk(schema, &mut expanding, 0, budget);
        if let Some(allowance) = self.allowance {
            allowance.set(allowance.get().saturating_sub(before - budget.left));
        }
        expanded
    }

    fn walk(
        &self,
        schema: &Value,
        expanding: &mut Vec<&'d Value>,
        depth: usize,
        budget: &mut Budget,
    ) -> Result<Value, String> {
        let fields = match schema {
            Value::Bool(_) => return Ok(schema.clone()),
            Value::Object(fields) => fields,
            _ => return Err("a schema is not an object".into()),
        };
        budget.left = budget.left.saturating_sub(1);
        if let Some(reference) = fields.get("$ref").and_then(Value::as_str) {
            return self.expand_ref(reference, fields, expanding, depth, budget);
        }
        if depth >= MAX_DEPTH || budget.left == 0 {
            budget.truncated = true;
            return Ok(stub(fields, "nested too deep or too large to list"));
        }
        let mut out = Map::new();
        let mut omitted: Vec<&str> = Vec::new();
        for (key, value) in fields {
            let key = key.as_str();
            if SCHEMA_KEYWORDS.contains(&key) {
                let converted = match (key, value) {
                    // Draft 4's tuple `items` is 2020-12's `prefixItems`.
                    ("items", Value::Array(items)) => {
                        out.insert("prefixItems".into(), self.walk_list(items, expanding, depth, budget)?);
                        continue;
                    }
                    _ => self.walk(value, expanding, depth + 1, budget)?,
                };
                out.insert(key.into(), converted);
            } else if SCHEMA_LIST_KEYWORDS.contains(&key) {
                let Value::Array(items) = value else { return Err(format!("`{key}` is not a list")) };
                out.insert(key.into(), self.walk_list(items, expanding, depth, budget)?);
            } else if SCHEMA_MAP_KEYWORDS.contains(&key) {
                let Value::Object(entries) = value else { return Err(format!("`{key}` is not an object")) };
                let mut converted = Map::new();
                for (name, schema) in entries {
                    let schema = self.walk(schema, expanding, depth + 1, budget)?;
                    if key == "properties" && self.omit.is_some_and(|omit| schema.get(omit) == Some(&Value::Bool(true)))
                    {
                        omitted.push(name.as_str());
                        continue;
                    }
                    converted.insert(name.clone(), schema);
                }
                out.insert(key.into(), Value::Object(converted));
            } else if key == "examples" {
                // Some documents write a reference to `components/examples`
                // where a value belongs: no value, so nothing to list.
                if let Value::Array(values) = value {
                    let values: Vec<Value> = values.iter().filter(|v| !is_reference(v)).cloned().collect();
                    if !values.is_empty() {
                        out.insert(key.into(), Value::Array(values));
                    }
                }
            } else if VALUE_KEYWORDS.contains(&key) {
                out.insert(key.into(), value.clone());
            } else if matches!(key, "exclusiveMinimum" | "exclusiveMaximum") {
                exclusive_bound(key, value, fields, &mut out);
            } else if key == "example" && !fields.contains_key("examples") && !is_reference(value) {
                out.insert("examples".into(), Value::Array(vec![value.clone()]));
            }
        }
        if let Some(Value::Array(required)) = out.get_mut("required") {
            required.retain(|name| !name.as_str().is_some_and(|name| omitted.contains(&name)));
        }
        // 3.0: `exclusiveMinimum: true` made `minimum` exclusive.
        for (exclusive, bound) in [("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")] {
            if out.get(exclusive).is_some_and(Value::is_number) && fields.get(exclusive) == Some(&Value::Bool(true)) {
                out.remove(bound);
            }
        }
        if self.version == SpecVersion::V30 && fields.get("nullable") == Some(&Value::Bool(true)) {
            return Ok(nullable(out));
        }
        Ok(Value::Object(out))
    }

    fn walk_list(
        &self,
        items: &[Value],
        expanding: &mut Vec<&'d Value>,
        depth: usize,
        budget: &mut Budget,
    ) -> Result<Value, String> {
        let converted =
            items.iter().map(|item| self.walk(item, expanding, depth + 1, budget)).collect::<Result<_, _>>()?;
        Ok(Value::Array(converted))
    }

    /// A `$ref` schema: its target expanded here, unless it is already being
    /// expanded (recursion) or the bounds are reached, then a stub.
    fn expand_ref(
        &self,
        reference: &str,
        fields: &Map<String, Value>,
        expanding: &mut Vec<&'d Value>,
        depth: usize,
        budget: &mut Budget,
    ) -> Result<Value, String> {
        let target = self.pointer(reference)?;
        let Value::Object(target_fields) = target else {
            return match target {
                Value::Bool(_) => Ok(target.clone()),
                _ => Err(format!("the $ref {:?} does not point at a schema", shown(reference))),
            };
        };
        let name = reference.rsplit('/').next().unwrap_or(reference);
        // A target already being expanded, above this point: recursion.
        let mut expanded = if expanding.iter().any(|t| std::ptr::eq(*t, target)) {
            stub(target_fields, &format!("{name}, recursively; see the enclosing {name}"))
        } else if depth >= MAX_DEPTH || budget.left == 0 {
            budget.truncated = true;
            stub(target_fields, &format!("{name}, not expanded here (nested too deep or too large to list)"))
        } else {
            expanding.push(target);
            let expanded = self.walk(target, expanding, depth, budget);
            expanding.pop();
            expanded?
        };
        // 3.0 ignores what stands beside a `$ref`; 3.1 applies it too.
        if self.version == SpecVersion::V31 {
            let siblings: Map<String, Value> =
                fields.iter().filter(|(k, _)| k.as_str() != "$ref").map(|(k, v)| (k.clone(), v.clone())).collect();
            if !siblings.is_empty() {
                let only_annotations = siblings.keys().all(|k| ANNOTATIONS.contains(&k.as_str()));
                let converted = self.walk(&Value::Object(siblings), expanding, depth, budget)?;
                expanded = match (only_annotations, expanded, converted) {
                    (true, Value::Object(mut target), Value::Object(annotations)) => {
                        target.extend(annotations);
                        Value::Object(target)
                    }
                    (_, target, Value::Object(mut rest)) => {
                        rest.insert("allOf".into(), Value::Array(vec![target]));
                        Value::Object(rest)
                    }
                    (_, target, _) => target,
                };
            }
        }
        Ok(expanded)
    }
}

/// `nullable: true` (3.0) in 2020-12 terms.
fn nullable(mut schema: Map<String, Value>) -> Value {
    let null = Value::String("null".into());
    if schema.is_empty() {
        return Value::Object(schema);
    }
    match schema.get_mut("type") {
        Some(Value::String(t)) => {
            let t = Value::String(std::mem::take(t));
            schema.insert("type".into(), Value::Array(vec![t, null.clone()]));
            if let Some(Value::Array(values)) = schema.get_mut("enum") {
                if !values.contains(&Value::Null) {
                    values.push(Value::Null);
                }
            }
            Value::Object(schema)
        }
        Some(Value::Array(types)) => {
            if !types.contains(&null) {
                types.push(null);
            }
            Value::Object(schema)
        }
        // No type (an `allOf` around a `$ref`, say): either it or null.
        _ => {
            let mut wrapper = Map::new();
            for annotation in ["title", "description", "default"] {
                if let Some(value) = schema.remove(annotation) {
                    wrapper.insert(annotation.into(), value);
                }
            }
            let null_schema = Value::Object(Map::from_iter([("type".into(), null)]));
            wrapper.insert("anyOf".into(), Value::Array(vec![Value::Object(schema), null_schema]));
            Value::Object(wrapper)
        }
    }
}

/// `exclusiveMinimum`/`exclusiveMaximum`: a number stays; 3.0's boolean
/// takes the bound's number (`true`) or goes (`false`).
fn exclusive_bound(key: &str, value: &Value, fields: &Map<String, Value>, out: &mut Map<String, Value>) {
    let bound = if key == "exclusiveMinimum" { "minimum" } else { "maximum" };
    match value {
        Value::Number(_) => {
            out.insert(key.into(), value.clone());
        }
        Value::Bool(true) => {
            if let Some(number @ Value::Number(_)) = fields.get(bound) {
                out.insert(key.into(), number.clone());
            }
        }
        _ => {}
    }
}

/// Whether an example is a `{"$ref": …}` rather than a value.
fn is_reference(value: &Value) -> bool {
    value.as_object().is_some_and(|fields| fields.contains_key("$ref"))
}

/// What stands in for a schema not expanded: its `type`, and why.
fn stub(target: &Map<String, Value>, why: &str) -> Value {
    let mut stub = Map::new();
    match target.get("type") {
        Some(t @ Value::String(_)) => {
            stub.insert("type".into(), t.clone());
        }
        Some(Value::Array(types)) if types.iter().all(Value::is_string) => {
            stub.insert("type".into(), Value::Array(types.clone()));
        }
        _ => {}
    }
    stub.insert("description".into(), Value::String(why.to_owned()));
    Value::Object(stub)
}

/// A reference as shown in a reason: bounded, printable.
fn shown(reference: &str) -> String {
    reference.chars().take(200).map(|c| if c.is_control() { '?' } else { c }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn resolve(root: &Value, version: SpecVersion, schema: &Value) -> Result<Value, String> {
        Resolver::new(root, version).schema(schema, &mut Budget::new(20_000))
    }

    #[test]
    fn openapi_3_0_schemas_become_2020_12() {
        let root = json!({});
        let v30 = |schema: Value| resolve(&root, SpecVersion::V30, &schema).expect("resolves");
        assert_eq!(v30(json!({"type": "string", "nullable": true})), json!({"type": ["string", "null"]}));
        assert_eq!(
            v30(json!({"type": "string", "enum": ["a"], "nullable": true})),
            json!({"type": ["string", "null"], "enum": ["a", null]})
        );
        assert_eq!(
            v30(json!({"allOf": [{"type": "integer"}], "nullable": true, "description": "d"})),
            json!({"description": "d", "anyOf": [{"allOf": [{"type": "integer"}]}, {"type": "null"}]})
        );
        assert_eq!(
            v30(
                json!({"type": "number", "minimum": 0, "exclusiveMinimum": true, "maximum": 9, "exclusiveMaximum": false})
            ),
            json!({"type": "number", "exclusiveMinimum": 0, "maximum": 9})
        );
        assert_eq!(
            v30(json!({"type": "string", "example": "x", "x-internal": 1, "xml": {}})),
            json!({"type": "string", "examples": ["x"]})
        );
        // 3.1: `nullable` means nothing, and is left out.
        assert_eq!(
            resolve(&root, SpecVersion::V31, &json!({"type": "string", "nullable": true})).expect("ok"),
            json!({"type": "string"})
        );
    }

    #[test]
    fn references_are_resolved_in_place() {
        let root = json!({"components": {"schemas": {
            "Book": {"type": "object", "properties": {"author": {"$ref": "#/components/schemas/Author"},
                                                       "tags": {"type": "array", "items": {"$ref": "#/components/schemas/a~1b"}}}},
            "Author": {"type": "object", "properties": {"name": {"type": "string"}}, "example": {"$ref": "#/components/examples/x"}},
            "a/b": {"type": "string", "enum": [{"$ref": "not followed"}]},
            "Node": {"type": "object", "properties": {"next": {"$ref": "#/components/schemas/Node"}, "v": {"type": "integer"}}},
        }}});
        let book = resolve(&root, SpecVersion::V31, &json!({"$ref": "#/components/schemas/Book"})).expect("book");
        assert_eq!(book["properties"]["author"]["properties"]["name"]["type"], "string");
        assert_eq!(book["properties"]["tags"]["items"]["enum"], json!([{"$ref": "not followed"}]), "data stays data");
        assert!(book["properties"]["author"].get("examples").is_none(), "a reference is no example");
        let node = resolve(&root, SpecVersion::V31, &json!({"$ref": "#/components/schemas/Node"})).expect("node");
        assert_eq!(node["properties"]["v"]["type"], "integer");
        let again = &node["properties"]["next"];
        assert_eq!(again["type"], "object");
        assert!(again.get("properties").is_none() && again["description"].as_str().expect("why").contains("recursive"));
        // 3.1: siblings of a $ref apply.
        let described =
            resolve(&root, SpecVersion::V31, &json!({"$ref": "#/components/schemas/Author", "description": "who"}))
                .expect("described");
        assert_eq!(described["description"], "who");
        let constrained =
            resolve(&root, SpecVersion::V31, &json!({"$ref": "#/components/schemas/Author", "required": ["name"]}))
                .expect("c");
        assert_eq!(constrained["required"], json!(["name"]));
        assert_eq!(constrained["allOf"][0]["type"], "object");
    }

    #[test]
    fn read_only_properties_are_not_inputs_and_write_only_ones_not_answers() {
        let root = json!({"components": {"schemas": {"Id": {"type": "integer", "readOnly": true}}}});
        let user = json!({"type": "object", "required": ["id", "name", "password"], "properties": {
            "id": {"$ref": "#/components/schemas/Id"}, "name": {"type": "string"},
            "password": {"type": "string", "writeOnly": true}}});
        let resolver = Resolver::new(&root, SpecVersion::V30);
        let sent = resolver.for_requests().schema(&user, &mut Budget::new(100)).expect("request");
        assert_eq!(sent["required"], json!(["name", "password"]));
        assert!(sent["properties"].get("id").is_none());
        let got = resolver.for_responses().schema(&user, &mut Budget::new(100)).expect("response");
        assert_eq!(got["required"], json!(["id", "name"]));
        assert!(got["properties"].get("password").is_none());
    }

    #[test]
    fn what_cannot_be_resolved_is_refused_with_a_reason() {
        let root = json!({"components": {"schemas": {"Loop": {"$ref": "#/components/schemas/Loop"}}}});
        for (schema, expected) in [
            (json!({"$ref": "other.yaml#/components/schemas/A"}), "outside the document"),
            (json!({"$ref": "https://evil.example/schema.json"}), "outside the document"),
            (json!({"$ref": "#/components/schemas/Missing"}), "points at nothing"),
            (json!({"properties": {"a": 5}}), "not an object"),
        ] {
            let e = resolve(&root, SpecVersion::V31, &schema).expect_err("refused");
            assert!(e.contains(expected), "{schema}: {e}");
        }
        // A reference to itself is a stub, not a loop.
        let looped = resolve(&root, SpecVersion::V31, &json!({"$ref": "#/components/schemas/Loop"})).expect("bounded");
        assert!(looped["description"].as_str().expect("why").contains("recursive"), "{looped}");
    }

    #[test]
    fn expansion_is_bounded_in_size_and_depth() {
        // Ten levels, each referring to the next ten times: 10^10 schemas
        // if expanded in full.
        let mut schemas = Map::new();
        for level in 0..10 {
            let properties: Map<String, Value> = (0..10)
                .map(|i| (format!("p{i}"), json!({"$ref": format!("#/components/schemas/L{}", level + 1)})))
                .collect();
            schemas.insert(format!("L{level}"), json!({"type": "object", "properties": properties}));
        }
        schemas.insert("L10".into(), json!({"type": "string"}));
        let root = json!({"components": {"schemas": schemas}});
        let started = std::time::Instant::now();
        let mut budget = Budget::new(5_000);
        let expanded = Resolver::new(&root, SpecVersion::V31)
            .schema(&json!({"$ref": "#/components/schemas/L0"}), &mut budget)
            .expect("bounded");
        assert!(budget.truncated);
        assert!(expanded.to_string().len() < 2_000_000, "{} bytes", expanded.to_string().len());
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Deep nesting: stubs past MAX_DEPTH, and the text stays readable
        // by serde_json's parser (128 levels).
        let mut deep = json!({"type": "string"});
        for _ in 0..200 {
            deep = json!({"type": "object", "properties": {"x": deep}});
        }
        let mut budget = Budget::new(20_000);
        let expanded = Resolver::new(&root, SpecVersion::V31).schema(&deep, &mut budget).expect("bounded");
        assert!(budget.truncated);
        let text = expanded.to_string();
        assert!(serde_json::from_str::<Value>(&text).is_ok(), "readable back");
    }
}
