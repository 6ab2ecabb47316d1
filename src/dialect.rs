//! Normalising an upstream's catalog into canonical tool definitions.
//!
//! This is the only place that knows the dialects exist: `items`, `tools` or a
//! bare list; `input_schema` flat or wrapped in `parameters`; bare tool ids
//! (langchain-tool-server) completed from the upstream's config. Each
//! definition is checked on its own; a bad one is skipped with its reason and
//! does not take the rest of the catalog down.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use semver::Version;
use serde_json::{Map, Value};

use crate::resolve::{is_id_part, is_tool_key, parse_tool_version};
use crate::url_path::PathInput;
use crate::validate::{InputValidator, WHOLE_INPUT};
use crate::wire::{Input, RawJson, Requirements, ToolDefinition};

/// What the upstream's config supplies for definitions that lack it.
#[derive(Debug, Clone, Copy, Default)]
pub struct DialectDefaults<'a> {
    /// Toolkit for bare ids.
    pub toolkit: Option<&'a str>,
    /// Version for definitions without one.
    pub version: Option<&'a str>,
}

/// One checked tool, ready to be merged and called.
#[derive(Debug)]
pub struct CatalogTool {
    /// `Toolkit.Name`.
    pub key: String,
    /// The definition's version.
    pub version: Version,
    /// The canonical definition (canonical id, flat input_schema).
    pub definition: ToolDefinition,
    /// The id exactly as the upstream published it: what is forwarded.
    pub upstream_id: String,
    /// An MCP tool's `annotations` object exactly as the upstream listed it
    /// (`title`, `readOnlyHint`, `destructiveHint`, `idempotentHint`,
    /// `openWorldHint`, and any other member); `None` for OTC upstreams and
    /// for MCP tools without one.
    pub annotations: Option<Value>,
    /// The inputs an OpenAPI operation sends as path segments: each must
    /// stay in its segment ([`PathInput::refusal`]); empty for other tools.
    pub path_inputs: Vec<PathInput>,
    /// The compiled input_schema, once the tool has been called (`None`:
    /// it did not compile, which the catalog check makes unexpected).
    validator: OnceLock<Option<InputValidator>>,
    /// A digest of what clients are shown, once asked for (a catalog's
    /// tools are compared with their pins when it changes, not per call).
    digest: OnceLock<[u8; 32]>,
}

impl CatalogTool {
    fn new(key: String, version: Version, definition: ToolDefinition, upstream_id: String) -> CatalogTool {
        let (validator, digest) = (OnceLock::new(), OnceLock::new());
        let path_inputs = Vec::new();
        CatalogTool { key, version, definition, upstream_id, annotations: None, path_inputs, validator, digest }
    }

    /// Everything a client is shown of the tool, as one JSON object: the
    /// definition, and an MCP tool's `annotations` when it has them.
    pub fn shown(&self) -> Value {
        let mut shown = serde_json::to_value(&self.definition).unwrap_or_default();
        if let (Value::Object(fields), Some(annotations)) = (&mut shown, &self.annotations) {
            fields.insert("annotations".into(), annotations.clone());
        }
        shown
    }

    /// A SHA-256 of [`CatalogTool::shown`] (object keys sorted at every
    /// level, schemas included), computed once.
    pub fn digest(&self) -> [u8; 32] {
        *self.digest.get_or_init(|| {
            use sha2::Digest;
            sha2::Sha256::digest(self.shown().to_string().as_bytes()).into()
        })
    }

    /// A tool rebuilt from what clients were shown of it (a pinned
    /// definition kept across restarts).
    pub fn from_shown(mut shown: Value) -> Result<CatalogTool, String> {
        let annotations = shown.as_object_mut().and_then(|fields| fields.remove("annotations"));
        let definition: ToolDefinition = serde_json::from_value(shown).map_err(|e| e.to_string())?;
        let (key, version) = definition.id.split_once('@').ok_or("the id has no version")?;
        let version = parse_tool_version(version).ok_or("the id's version is not x.y.z")?;
        let mut tool = CatalogTool::new(key.to_owned(), version, definition.clone(), definition.id.clone());
        tool.annotations = annotations;
        Ok(tool)
    }

    /// This (pinned) definition as served in place of `current`: calls are
    /// still sent as `current`'s upstream plans them, so its path inputs
    /// are checked as `current`'s are.
    pub fn served_for(self: &Arc<Self>, current: &CatalogTool) -> Arc<CatalogTool> {
        if self.path_inputs == current.path_inputs {
            return self.clone();
        }
        let mut tool =
            CatalogTool::new(self.key.clone(), self.version.clone(), self.definition.clone(), self.upstream_id.clone());
        tool.annotations = self.annotations.clone();
        tool.path_inputs = current.path_inputs.clone();
        Arc::new(tool)
    }

    /// This tool as a virtual server shows it (`catalog/servers.rs`): under
    /// `key`, with `definition`, and called as this one is (same upstream
    /// id, annotations and path inputs).
    pub(crate) fn shown_as(&self, key: String, definition: ToolDefinition) -> CatalogTool {
        let mut tool = CatalogTool::new(key, self.version.clone(), definition, self.upstream_id.clone());
        tool.annotations = self.annotations.clone();
        tool.path_inputs = self.path_inputs.clone();
        tool
    }

    /// The toolkit: `key` up to its dot.
    pub fn toolkit(&self) -> &str {
        self.key.split_once('.').map_or(self.key.as_str(), |(toolkit, _)| toolkit)
    }

    /// Checks a call's input against the tool's `input_schema`; on failure,
    /// one message per parameter. The validator is compiled on the tool's
    /// first call and kept: compiled for every tool of a large catalog, most
    /// never called, they held much memory (benches/HISTORY.md, "Figures behind the code").
    pub fn check_input(&self, input: &Input) -> Result<(), BTreeMap<String, String>> {
        let validator =
            self.validator.get_or_init(|| InputValidator::compile(&self.definition.input_schema.to_value()).ok());
        let Some(validator) = validator else {
            return Err(BTreeMap::from([(
                WHOLE_INPUT.to_owned(),
                "the tool's input_schema does not compile".to_owned(),
            )]));
        };
        // Path inputs are checked on the `Value`.
        if self.path_inputs.is_empty() && input.members().is_some_and(|members| validator.accepts_quickly(members)) {
            return Ok(());
        }
        let input = input.value();
        let mut errors = validator.check(&input).err().unwrap_or_default();
        for path_input in &self.path_inputs {
            if let Some(why) = path_input.refusal(&input) {
                errors.entry(path_input.name.clone()).or_insert_with(|| why.to_owned());
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }
}

/// A definition that was left out, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Skipped {
    /// The id as published, or its position when it had none.
    pub what: String,
    /// Why it was left out.
    pub reason: String,
}

/// Why a whole catalog body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum CatalogShapeError {
    /// Not JSON.
    #[error("catalog is not JSON: {0}")]
    NotJson(String),
    /// JSON, but not a list of tools in any known shape.
    #[error("catalog is not a list of tools (expected `items`, `tools` or a JSON array)")]
    NotAList,
    /// An OpenAPI document that gives no tools at all (Swagger 2.0, not
    /// OpenAPI, no version to publish them with).
    #[error("{0}")]
    Document(String),
}

/// Reads a catalog body in any dialect and checks each definition.
pub fn normalise_catalog(
    body: &[u8],
    defaults: DialectDefaults<'_>,
) -> Result<(Vec<CatalogTool>, Vec<Skipped>), CatalogShapeError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| CatalogShapeError::NotJson(e.to_string()))?;
    let items = match value {
        Value::Array(items) => items,
        Value::Object(mut obj) => match obj.remove("items").or_else(|| obj.remove("tools")) {
            Some(Value::Array(items)) => items,
            _ => return Err(CatalogShapeError::NotAList),
        },
        _ => return Err(CatalogShapeError::NotAList),
    };
    let mut tools: Vec<CatalogTool> = Vec::with_capacity(items.len());
    let mut skipped = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let what = item.get("id").and_then(Value::as_str).map_or_else(|| format!("#{index}"), str::to_owned);
        match normalise_tool(item, defaults) {
            Ok(tool) if tools.iter().any(|t| t.definition.id == tool.definition.id) => skipped.push(Skipped {
                what,
                reason: format!("{} is listed twice; the first one is kept", tool.definition.id),
            }),
            Ok(tool) => tools.push(tool),
            Err(reason) => skipped.push(Skipped { what, reason }),
        }
    }
    Ok((tools, skipped))
}

/// Checks and normalises one definition (an OpenAPI operation's too).
pub(crate) fn normalise_tool(item: Value, defaults: DialectDefaults<'_>) -> Result<CatalogTool, String> {
    let Value::Object(mut obj) = item else {
        return Err("a definition must be a JSON object".into());
    };
    let upstream_id = take_string(&mut obj, "id")?.ok_or("missing `id`")?;
    let (key, id_version) = split_id(&upstream_id, defaults.toolkit)?;
    let version_text = take_string(&mut obj, "version")?;
    let version = match (version_text.as_deref(), id_version, defaults.version) {
        (Some(v), id_v, _) => {
            let parsed = parse_tool_version(v).ok_or_else(|| format!("version {v:?} is not x.y.z"))?;
            if id_v.as_ref().is_some_and(|iv| *iv != parsed) {
                return Err(format!("the id's version differs from `version` {v:?}"));
            }
            parsed
        }
        (None, Some(id_v), _) => id_v,
        (None, None, Some(v)) => {
            parse_tool_version(v).ok_or_else(|| format!("configured version {v:?} is not x.y.z"))?
        }
        (None, None, None) => return Err("no version: set `version` on the upstream in gateway.toml".into()),
    };
    let name = match take_string(&mut obj, "name")? {
        Some(name) => name,
        None => key.replace('.', "_"),
    };
    if name.is_empty() || name.len() > 64 || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    {
        return Err(format!("name {name:?} is not 1 to 64 of [A-Za-z0-9_-]"));
    }
    let description = take_string(&mut obj, "description")?.unwrap_or_default();
    let input_schema = flat_input_schema(obj.remove("input_schema"))?;
    // Compiled now only to turn away a schema that does not compile; the
    // validator a call uses is compiled on the tool's first call.
    InputValidator::compile(&input_schema).map_err(|e| e.to_string())?;
    let requirements = match obj.remove("requirements") {
        None | Some(Value::Null) => None,
        Some(r) => {
            Some(serde_json::from_value::<Requirements>(r).map_err(|e| format!("`requirements` is malformed: {e}"))?)
        }
    };
    let definition = ToolDefinition {
        id: format!("{key}@{version}"),
        name,
        description,
        version: version.to_string(),
        input_schema: RawJson::from_value(&input_schema),
        output_schema: obj.remove("output_schema").map_or_else(RawJson::null, |schema| RawJson::from_value(&schema)),
        requirements,
    };
    Ok(CatalogTool::new(key, version, definition, upstream_id))
}

/// Splits a published id into `Toolkit.Name` and its version, completing a
/// bare name with the configured toolkit.
fn split_id(id: &str, toolkit: Option<&str>) -> Result<(String, Option<Version>), String> {
    let (key, version) = match id.split_once('@') {
        Some((key, v)) => {
            let version = match parse_tool_version(v) {
                Some(version) => version,
                // Some servers publish `@1`; it means 1.0.0 as in a request.
                None if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) => {
                    Version::new(v.parse().map_err(|_| format!("id {id:?} has a bad version"))?, 0, 0)
                }
                None => return Err(format!("id {id:?} has a version that is not x.y.z")),
            };
            (key, Some(version))
        }
        None => (id, None),
    };
    if is_tool_key(key) {
        return Ok((key.to_owned(), version));
    }
    if is_id_part(key) {
        return match toolkit {
            Some(toolkit) => Ok((format!("{toolkit}.{key}"), version)),
            None => Err(format!("id {id:?} has no toolkit: set `toolkit` on the upstream in gateway.toml")),
        };
    }
    Err(format!("id {id:?} is not Toolkit.Name@x.y.z"))
}

/// `input_schema` flat, unwrapping the draft's `{"parameters": {...}}`.
fn flat_input_schema(schema: Option<Value>) -> Result<Value, String> {
    match schema {
        None | Some(Value::Null) => Ok(serde_json::json!({"type": "object"})),
        Some(Value::Object(mut obj)) => {
            let wrapped =
                obj.contains_key("parameters") && !obj.contains_key("type") && !obj.contains_key("properties");
            match (wrapped, obj.remove("parameters")) {
                (true, Some(Value::Object(inner))) => Ok(Value::Object(inner)),
                (true, Some(_)) => Err("`input_schema.parameters` is not an object".into()),
                (_, parameters) => {
                    if let Some(p) = parameters {
                        obj.insert("parameters".into(), p);
                    }
                    Ok(Value::Object(obj))
                }
            }
        }
        Some(_) => Err("`input_schema` is not an object".into()),
    }
}

fn take_string(obj: &mut Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match obj.remove(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(format!("`{field}` is not a string")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn add(id: &str, version: &str) -> Value {
        json!({"id": id, "name": "Calculator_Add", "description": "Adds", "version": version,
               "input_schema": {"parameters": {"type": "object", "properties": {"a": {"type": "number"}}}},
               "output_schema": {"type": "number"}})
    }

    fn read(body: Value, defaults: DialectDefaults<'_>) -> (Vec<CatalogTool>, Vec<Skipped>) {
        normalise_catalog(body.to_string().as_bytes(), defaults).expect("a catalog")
    }

    #[test]
    fn every_list_dialect_reads_the_same() {
        let one = add("Calculator.Add@1.0.0", "1.0.0");
        for body in [json!({"items": [one.clone()]}), json!({"tools": [one.clone()]}), json!([one.clone()])] {
            let (tools, skipped) = read(body, DialectDefaults::default());
            assert!(skipped.is_empty());
            assert_eq!(tools[0].definition.id, "Calculator.Add@1.0.0");
            assert_eq!(tools[0].definition.input_schema.to_value()["properties"]["a"]["type"], "number");
        }
    }

    #[test]
    fn bare_ids_take_toolkit_and_version_from_config() {
        let body = json!([{"id": "add", "name": "add", "description": "Adds",
                           "input_schema": {"type": "object"}}]);
        let (tools, _) = read(body, DialectDefaults { toolkit: Some("Math"), version: Some("2.1.0") });
        assert_eq!(tools[0].definition.id, "Math.add@2.1.0");
        assert_eq!(tools[0].upstream_id, "add");
        let body = json!([{"id": "add", "name": "add", "input_schema": {"type": "object"}}]);
        let (tools, skipped) = read(body, DialectDefaults::default());
        assert!(tools.is_empty());
        assert!(skipped[0].reason.contains("toolkit"), "{:?}", skipped);
    }

    #[test]
    fn bad_definitions_are_skipped_one_by_one() {
        let body = json!({"items": [
            add("Calculator.Add@1.0.0", "1.0.0"),
            add("Calculator.Add@1.0", "1.0"),
            add("Calc ulator.Add@1.0.0", "1.0.0"),
            {"id": "X.Y@1.0.0", "name": "X_Y", "version": "1.0.0", "input_schema": {"type": 5}},
            "not an object",
            add("Calculator.Add@2.0.0", "1.0.0"),
        ]});
        let (tools, skipped) = read(body, DialectDefaults::default());
        assert_eq!(tools.len(), 1);
        assert_eq!(skipped.len(), 5);
    }

    #[test]
    fn the_validator_compiled_on_the_first_call_is_kept_for_the_next() {
        let (tools, _) = read(json!([add("Calculator.Add@1.0.0", "1.0.0")]), DialectDefaults::default());
        let tool = &tools[0];
        assert!(tool.validator.get().is_none(), "nothing compiled until the tool is called");
        let errors = tool.check_input(&Input::from_value(json!({"a": "x"}))).expect_err("a string is not a number");
        assert!(errors.contains_key("a"), "{errors:?}");
        assert!(tool.validator.get().is_some_and(Option::is_some), "compiled once, and kept");
        assert!(tool.check_input(&Input::from_value(json!({"a": 1}))).is_ok());
        assert!(tool.check_input(&Input::from_value(json!({"a": []}))).is_err());
    }

    #[test]
    fn garbage_is_not_a_catalog() {
        assert!(normalise_catalog(b"<html>oops</html>", DialectDefaults::default()).is_err());
        assert!(normalise_catalog(br#"{"items": 5}"#, DialectDefaults::default()).is_err());
    }
}
