//! Reading an OpenAPI document: JSON or YAML into one JSON tree, and which
//! OpenAPI it is. Swagger 2.0 and anything else that is not OpenAPI 3.0 or
//! 3.1 is refused with a reason that says what to do.

use serde_json::{Map, Value};

/// Why a document cannot be imported at all (one operation's trouble is a
/// skipped tool instead, see `tools.rs`).
#[derive(Debug, thiserror::Error)]
pub(crate) enum DocumentError {
    /// Neither JSON nor YAML, or nested past what the parsers allow.
    #[error("the document is neither JSON nor YAML: {0}")]
    Unreadable(String),
    /// A Swagger 2.0 (OpenAPI 2) document.
    #[error(
        "Swagger 2.0 documents are not supported: only OpenAPI 3.0 and 3.1 are; convert it first (e.g. with swagger2openapi, or by re-exporting it as OpenAPI 3 from the API's framework)"
    )]
    Swagger2,
    /// An `openapi` version the gateway does not read.
    #[error("OpenAPI {0:?} is not supported: only 3.0.x and 3.1.x are")]
    UnsupportedVersion(String),
    /// No `openapi` field, or not an object at all.
    #[error("not an OpenAPI document: {0}")]
    NotOpenApi(&'static str),
    /// No toolkit to name the tools with.
    #[error("info.title {0:?} gives no toolkit name: set `toolkit` on the upstream in gateway.toml")]
    NoToolkit(String),
    /// No version to publish the tools with.
    #[error("info.version {0:?} is not x.y.z: set `version` on the upstream in gateway.toml")]
    NoVersion(String),
}

/// Which OpenAPI a document is: its schemas differ (3.0's `nullable` and
/// boolean `exclusiveMinimum`; 3.1's are JSON Schema 2020-12).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpecVersion {
    /// OpenAPI 3.0.x.
    V30,
    /// OpenAPI 3.1.x.
    V31,
}

/// A parsed document: its JSON tree and its OpenAPI version.
#[derive(Debug)]
pub(crate) struct Document {
    /// The whole document: `$ref`s are resolved against it.
    pub(crate) root: Value,
    /// 3.0 or 3.1.
    pub(crate) version: SpecVersion,
}

/// YAML nesting past this is refused (yaml_serde stops at 128 itself; JSON
/// at serde_json's 128).
const MAX_YAML_DEPTH: usize = 128;

impl Document {
    /// Parses a document: JSON when it starts with `{`, else YAML (a JSON
    /// document is also YAML, but the JSON parser is much faster).
    pub(crate) fn parse(body: &[u8]) -> Result<Document, DocumentError> {
        let text = body.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(body);
        let root: Value = if text.trim_ascii_start().first() == Some(&b'{') {
            crate::wire::from_json(text).map_err(|e| DocumentError::Unreadable(format!("JSON: {e}")))?
        } else {
            let yaml: yaml_serde::Value =
                yaml_serde::from_slice(text).map_err(|e| DocumentError::Unreadable(format!("YAML: {e}")))?;
            yaml_to_json(yaml, 0)?
        };
        let Value::Object(fields) = &root else { return Err(DocumentError::NotOpenApi("it is not an object")) };
        if fields.contains_key("swagger") {
            return Err(DocumentError::Swagger2);
        }
        let version = match fields.get("openapi") {
            Some(Value::String(v)) if v.starts_with("3.0.") || v == "3.0" => SpecVersion::V30,
            Some(Value::String(v)) if v.starts_with("3.1.") || v == "3.1" => SpecVersion::V31,
            Some(Value::String(v)) => return Err(DocumentError::UnsupportedVersion(v.chars().take(32).collect())),
            Some(_) => return Err(DocumentError::NotOpenApi("`openapi` is not a string")),
            None => return Err(DocumentError::NotOpenApi("it has no `openapi` field")),
        };
        Ok(Document { root, version })
    }

    /// `info.title`, or "".
    pub(crate) fn title(&self) -> &str {
        self.root.pointer("/info/title").and_then(Value::as_str).unwrap_or_default()
    }

    /// `info.version`, or "".
    pub(crate) fn info_version(&self) -> &str {
        self.root.pointer("/info/version").and_then(Value::as_str).unwrap_or_default()
    }

    /// `paths`, or nothing.
    pub(crate) fn paths(&self) -> Option<&Map<String, Value>> {
        self.root.get("paths").and_then(Value::as_object)
    }

    /// `components.securitySchemes`, or nothing.
    pub(crate) fn security_schemes(&self) -> Option<&Map<String, Value>> {
        self.root.pointer("/components/securitySchemes").and_then(Value::as_object)
    }
}

/// A YAML tree as JSON: keys that are not strings (`200:` in `responses`,
/// `true:`) become their text, as JSON needs; tagged values lose their tag.
fn yaml_to_json(yaml: yaml_serde::Value, depth: usize) -> Result<Value, DocumentError> {
    use yaml_serde::Value as Y;
    if depth > MAX_YAML_DEPTH {
        return Err(DocumentError::Unreadable(format!("YAML nested deeper than {MAX_YAML_DEPTH} levels")));
    }
    Ok(match yaml {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Number(n) => number(&n),
        Y::String(s) => Value::String(s),
        Y::Sequence(items) => {
            Value::Array(items.into_iter().map(|item| yaml_to_json(item, depth + 1)).collect::<Result<_, _>>()?)
        }
        Y::Mapping(entries) => {
            let mut map = Map::new();
            for (key, value) in entries {
                let key = match key {
                    Y::String(s) => s,
                    Y::Number(n) => n.to_string(),
                    Y::Bool(b) => b.to_string(),
                    Y::Null => "null".to_owned(),
                    _ => return Err(DocumentError::Unreadable("YAML: a mapping key that is not a scalar".into())),
                };
                map.insert(key, yaml_to_json(value, depth + 1)?);
            }
            Value::Object(map)
        }
        Y::Tagged(tagged) => yaml_to_json(tagged.value, depth + 1)?,
    })
}

/// A YAML number as a JSON number (`.inf` and `.nan`, which JSON has not,
/// as their text).
fn number(n: &yaml_serde::Number) -> Value {
    if let Some(i) = n.as_i64() {
        Value::from(i)
    } else if let Some(u) = n.as_u64() {
        Value::from(u)
    } else {
        n.as_f64()
            .and_then(|f| serde_json::Number::from_f64(f).map(Value::Number))
            .unwrap_or_else(|| Value::String(n.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_and_yaml_read_alike() {
        let json = br#"{"openapi": "3.1.0", "info": {"title": "Library", "version": "2.3.0"},
                        "paths": {"/books": {"get": {"responses": {"200": {"description": "ok"}}}}}}"#;
        let yaml = b"openapi: 3.1.0\ninfo:\n  title: Library\n  version: 2.3.0\npaths:\n  /books:\n    get:\n      responses:\n        200:\n          description: ok\n";
        let a = Document::parse(json).expect("json");
        let b = Document::parse(yaml).expect("yaml");
        assert_eq!(a.root, b.root, "integer keys become strings");
        assert_eq!(a.version, SpecVersion::V31);
        assert_eq!((b.title(), b.info_version()), ("Library", "2.3.0"));
        let v30 = Document::parse(b"openapi: \"3.0.3\"\ninfo: {title: x, version: '1'}\n").expect("3.0");
        assert_eq!(v30.version, SpecVersion::V30);
    }

    #[test]
    fn other_documents_are_refused_with_a_reason() {
        let e = Document::parse(br#"{"swagger": "2.0", "info": {}}"#).expect_err("swagger").to_string();
        assert!(e.contains("Swagger 2.0") && e.contains("OpenAPI 3"), "{e}");
        let e = Document::parse(b"swagger: '2.0'\n").expect_err("swagger yaml").to_string();
        assert!(e.contains("Swagger 2.0"), "{e}");
        assert!(matches!(Document::parse(br#"{"openapi": "4.0.0"}"#), Err(DocumentError::UnsupportedVersion(_))));
        assert!(matches!(Document::parse(b"[1, 2]"), Err(DocumentError::NotOpenApi(_))));
        assert!(matches!(
            Document::parse(b"<html>"),
            Err(DocumentError::Unreadable(_)) | Err(DocumentError::NotOpenApi(_))
        ));
        assert!(matches!(Document::parse(b"{not json"), Err(DocumentError::Unreadable(_))));
    }

    #[test]
    fn hostile_yaml_is_refused_not_expanded() {
        // A billion laughs: nine levels of nine aliases each.
        let mut yaml =
            String::from("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
        for (prev, next) in
            ["a", "b", "c", "d", "e", "f", "g", "h"].iter().zip(["b", "c", "d", "e", "f", "g", "h", "i"])
        {
            yaml.push_str(&format!(
                "{next}: &{next} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
            ));
        }
        let started = std::time::Instant::now();
        assert!(Document::parse(yaml.as_bytes()).is_err());
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        // Deep nesting: refused, no stack overflow.
        let deep = format!("{}1{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(Document::parse(deep.as_bytes()).is_err());
        let deep_json = format!("{{\"openapi\": {}1{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(Document::parse(deep_json.as_bytes()).is_err());
    }
}
