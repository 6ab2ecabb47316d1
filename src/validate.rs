//! Input validation against a tool's `input_schema`.
//!
//! A schema is compiled when the catalog changes, to turn away one that does
//! not compile; the validator calls use is compiled once, on the tool's first
//! call, and kept (`CatalogTool::check_input`).
//!
//! Most schemas only name their parameters, their types and which are
//! required. Such a schema is also kept as a [`QuickSchema`], which checks
//! an input by its members' kinds alone (`wire::Input::members`), without
//! building the input's `Value`: it says yes only where jsonschema would,
//! and leaves every other input to jsonschema, errors included.

use std::collections::BTreeMap;

use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::LocationSegment;
use serde_json::{Map, Value};

use crate::wire::Kind;

/// The key under which errors about the input as a whole are reported.
pub const WHOLE_INPUT: &str = "input";

/// A compiled `input_schema`.
pub struct InputValidator {
    validator: jsonschema::Validator,
    quick: Option<QuickSchema>,
}

impl std::fmt::Debug for InputValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InputValidator")
    }
}

/// Why a schema could not be compiled.
#[derive(Debug, thiserror::Error)]
#[error("input_schema does not compile: {0}")]
pub struct SchemaError(String);

impl InputValidator {
    /// Compiles a schema. External `$ref`s are not fetched: a tool server must
    /// not make the gateway open connections on its behalf.
    pub fn compile(schema: &Value) -> Result<InputValidator, SchemaError> {
        let validator = jsonschema::validator_for(schema).map_err(|e| SchemaError(e.to_string()))?;
        Ok(InputValidator { validator, quick: QuickSchema::of(schema) })
    }

    /// Whether an input with these members is valid by the quick check; a
    /// `false` means only that jsonschema has to tell.
    pub fn accepts_quickly<'a>(&self, members: impl IntoIterator<Item = (&'a str, Kind)>) -> bool {
        self.quick.as_ref().is_some_and(|quick| quick.accepts(members))
    }

    /// Checks an input; on failure returns one message per parameter, keyed by
    /// the parameter's name (a missing required one by its own name).
    pub fn check(&self, input: &Value) -> Result<(), BTreeMap<String, String>> {
        if self.validator.is_valid(input) {
            return Ok(());
        }
        let mut errors = BTreeMap::new();
        for error in self.validator.iter_errors(input) {
            let at_root = error.instance_path().as_str().is_empty();
            let (keys, message) = match (error.instance_path().iter().next(), error.kind()) {
                (Some(LocationSegment::Property(name)), _) => (vec![name.into_owned()], error.to_string()),
                (Some(LocationSegment::Index(i)), _) => (vec![i.to_string()], error.to_string()),
                (None, ValidationErrorKind::Required { property }) => {
                    let name = property.as_str().map_or_else(|| property.to_string(), str::to_owned);
                    (vec![name], "is required".to_owned())
                }
                // An unexpected parameter is named by its own name too.
                (None, ValidationErrorKind::AdditionalProperties { unexpected })
                | (None, ValidationErrorKind::UnevaluatedProperties { unexpected })
                    if at_root && !unexpected.is_empty() =>
                {
                    (unexpected.clone(), "is not a parameter of this tool".to_owned())
                }
                (None, _) => (vec![WHOLE_INPUT.to_owned()], error.to_string()),
            };
            // The first error per parameter is the one a person fixes first.
            for key in keys {
                errors.entry(key).or_insert_with(|| message.clone());
            }
        }
        Err(errors)
    }
}

/// A schema that says no more than `{"type": "object", "properties":
/// {name: {"type": ...}}, "required": [...], "additionalProperties": bool}`
/// (with `title`s and `description`s anywhere).
#[derive(Debug)]
struct QuickSchema {
    /// Each parameter's name and the kinds its `type` admits (any kind
    /// when it has none).
    properties: Vec<(String, Option<Vec<Kind>>)>,
    required: Vec<String>,
    /// `additionalProperties: false`.
    closed: bool,
}

/// Parameters (and required ones) a quick schema may name, and members an
/// input it checks may have: each member is looked up by a scan of them, so
/// past this (a tool server's long schema, a client's input of many keys)
/// jsonschema's own lookups are the cheaper.
const QUICK_MEMBERS: usize = 32;

/// Keywords that describe and never refuse.
const ANNOTATIONS: &[&str] = &["title", "description", "$comment", "examples", "default"];

impl QuickSchema {
    fn of(schema: &Value) -> Option<QuickSchema> {
        let fields = schema.as_object()?;
        let mut quick = QuickSchema { properties: Vec::new(), required: Vec::new(), closed: false };
        let mut typed = false;
        for (key, value) in fields {
            match key.as_str() {
                "type" => typed = value.as_str()? == "object",
                "properties" => {
                    for (name, property) in value.as_object()? {
                        quick.properties.push((name.clone(), property_kinds(property.as_object()?)?));
                    }
                }
                "required" => {
                    for name in value.as_array()? {
                        quick.required.push(name.as_str()?.to_owned());
                    }
                }
                "additionalProperties" => quick.closed = !value.as_bool()?,
                _ if ANNOTATIONS.contains(&key.as_str()) => {}
                _ => return None,
            }
        }
        let small = quick.properties.len() <= QUICK_MEMBERS && quick.required.len() <= QUICK_MEMBERS;
        (typed && small).then_some(quick)
    }

    /// Yes when every member is a parameter of an admitted kind (or the
    /// schema is open to others) and every required one is there. The
    /// members' names are distinct (`wire::Input`), so counting the
    /// required ones seen is enough.
    fn accepts<'a>(&self, members: impl IntoIterator<Item = (&'a str, Kind)>) -> bool {
        let mut required = 0;
        for (seen, (name, kind)) in members.into_iter().enumerate() {
            if seen == QUICK_MEMBERS {
                return false;
            }
            match self.properties.iter().find(|(p, _)| p == name) {
                Some((_, Some(kinds))) if !kinds.contains(&kind) => return false,
                Some(_) => {}
                None if self.closed => return false,
                None => {}
            }
            required += usize::from(self.required.iter().any(|r| r == name));
        }
        required == self.required.len()
    }
}

/// The kinds a parameter's schema admits: `None` for any, itself `None`
/// when the schema says more than a `type`.
#[allow(clippy::option_option)] // "any kind" and "not quick" are both needed
fn property_kinds(schema: &Map<String, Value>) -> Option<Option<Vec<Kind>>> {
    let mut kinds = None;
    for (key, value) in schema {
        match key.as_str() {
            "type" => {
                let names = match value {
                    Value::String(name) => vec![name.as_str()],
                    Value::Array(names) => names.iter().map(Value::as_str).collect::<Option<_>>()?,
                    _ => return None,
                };
                let mut admitted = Vec::new();
                for name in names {
                    admitted.extend_from_slice(match name {
                        "null" => &[Kind::Null][..],
                        "boolean" => &[Kind::Bool],
                        // `Kind::Number` is left to jsonschema: `1.0` is an integer to it.
                        "integer" => &[Kind::Integer],
                        "number" => &[Kind::Integer, Kind::Number],
                        "string" => &[Kind::String],
                        "array" => &[Kind::Array],
                        "object" => &[Kind::Object],
                        _ => return None,
                    });
                }
                kinds = Some(admitted);
            }
            _ if ANNOTATIONS.contains(&key.as_str()) => {}
            _ => return None,
        }
    }
    Some(kinds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn add_schema() -> Value {
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
               "required": ["a", "b"]})
    }

    #[test]
    fn errors_are_keyed_by_parameter() {
        let v = InputValidator::compile(&add_schema()).expect("compiles");
        assert!(v.check(&json!({"a": 1, "b": 2})).is_ok());
        let errors = v.check(&json!({"a": 10, "b": "infinity"})).expect_err("b is not a number");
        assert_eq!(errors.keys().collect::<Vec<_>>(), vec!["b"]);
        let errors = v.check(&json!({"a": 10})).expect_err("b is missing");
        assert_eq!(errors.get("b").map(String::as_str), Some("is required"));
        let strict = InputValidator::compile(&json!({"type": "object", "properties": {"a": {}},
                                                     "additionalProperties": false}))
        .expect("compiles");
        let errors = strict.check(&json!({"a": 1, "extra": 2})).expect_err("extra is unexpected");
        assert_eq!(errors.keys().collect::<Vec<_>>(), vec!["extra"]);
    }

    #[test]
    fn numbers_past_64_bits_are_compared_exactly() {
        let parse = |text: &str| serde_json::from_str::<Value>(text).expect("json");
        let schema = parse(r#"{"properties": {"i": {"type": "integer"}, "m": {"maximum": 98765432109876543210}}}"#);
        let v = InputValidator::compile(&schema).expect("compiles");
        for ok in [r#"{"i": 98765432109876543210}"#, r#"{"i": -1e30}"#] {
            assert!(v.check(&parse(ok)).is_ok(), "{ok}");
        }
        for ok in [r#"{"m": 98765432109876543210}"#, r#"{"m": -1e400}"#] {
            assert!(v.check(&parse(ok)).is_ok(), "{ok}");
        }
        for bad in [r#"{"i": 98765432109876543210.5}"#, r#"{"m": 98765432109876543211}"#, r#"{"m": 1e400}"#] {
            assert!(v.check(&parse(bad)).is_err(), "{bad}");
        }
        // An exponent far past any float is compared without being expanded.
        let started = std::time::Instant::now();
        assert!(v.check(&parse(r#"{"i": 1e999999999, "m": 1e-999999999}"#)).is_ok());
        assert!(v.check(&parse(r#"{"m": 1e999999999}"#)).is_err());
        // Nor are many digits costly, against any numeric keyword.
        let every = InputValidator::compile(&parse(
            r#"{"properties": {"n": {"type": "integer", "multipleOf": 7, "maximum": 1e30, "exclusiveMinimum": 0.5}}}"#,
        ))
        .expect("compiles");
        let digits = "9".repeat(200_000);
        assert!(every.check(&parse(&format!(r#"{{"n": {digits}}}"#))).is_err());
        assert!(every.check(&parse(&format!(r#"{{"n": 0.{digits}}}"#))).is_err());
        assert!(started.elapsed() < std::time::Duration::from_secs(1), "{:?}", started.elapsed());
    }

    #[test]
    fn a_schema_that_does_not_compile_is_refused() {
        assert!(InputValidator::compile(&json!({"type": "no-such-type"})).is_err());
    }

    fn members(input: &Value) -> Vec<(&str, Kind)> {
        input.as_object().expect("an object").iter().map(|(k, v)| (k.as_str(), Kind::of(v))).collect()
    }

    #[test]
    fn a_schema_of_names_and_types_is_checked_by_kinds() {
        let v = InputValidator::compile(&add_schema()).expect("compiles");
        assert!(v.quick.is_some());
        assert!(v.accepts_quickly(members(&json!({"a": 1, "b": 2}))));
        assert!(v.accepts_quickly(members(&json!({"a": 1, "b": 2.5, "c": "x"}))));
        for not_quickly in [json!({"a": 1}), json!({"a": 1, "b": "2"}), json!({"a": null, "b": 2})] {
            assert!(!v.accepts_quickly(members(&not_quickly)), "{not_quickly}");
        }
        let strict = InputValidator::compile(&json!({"type": "object", "title": "T", "properties": {
            "i": {"type": "integer", "description": "d"}, "s": {"type": ["string", "null"]}, "any": {}},
            "additionalProperties": false}))
        .expect("compiles");
        assert!(strict.accepts_quickly(members(&json!({"i": 1, "s": null, "any": [1]}))));
        // 1.0 is an integer to jsonschema: the quick check leaves it to it.
        assert!(!strict.accepts_quickly(members(&json!({"i": 1.0}))));
        assert!(strict.check(&json!({"i": 1.0})).is_ok());
        assert!(!strict.accepts_quickly(members(&json!({"extra": 1}))));
        // An input of many keys is left to jsonschema.
        let open = InputValidator::compile(&json!({"type": "object"})).expect("compiles");
        let many = |n: usize| (0..n).map(|i| (format!("k{i}"), json!(i))).collect::<Map<String, Value>>();
        assert!(open.accepts_quickly(members(&Value::Object(many(QUICK_MEMBERS)))));
        assert!(!open.accepts_quickly(members(&Value::Object(many(QUICK_MEMBERS + 1)))));
    }

    #[test]
    fn a_schema_that_says_more_is_left_to_jsonschema() {
        for schema in [
            json!({"properties": {"a": {"type": "number"}}}),
            json!({"type": "object", "properties": {"a": {"type": "number", "minimum": 0}}}),
            json!({"type": "object", "properties": {"a": {"type": "string", "enum": ["x"]}}}),
            json!({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string"}}}}),
            json!({"type": "object", "properties": {"a": true}}),
            json!({"type": "object", "additionalProperties": {"type": "string"}}),
            json!({"type": "object", "patternProperties": {"^x": {}}}),
            json!({"type": "object", "$defs": {"a": {}}, "properties": {"a": {"$ref": "#/$defs/a"}}}),
            json!({"$schema": "http://json-schema.org/draft-04/schema#", "type": "object"}),
            json!({"type": "object", "minProperties": 1}),
            json!({"type": ["object", "null"]}),
            json!({"type": "object", "properties": (0..=QUICK_MEMBERS).map(|i| (format!("p{i}"), json!({})))
                .collect::<Map<String, Value>>()}),
        ] {
            let v = InputValidator::compile(&schema).expect("compiles");
            assert!(v.quick.is_none(), "{schema}");
        }
    }

    /// Schemas of the quick shape and inputs, drawn at random.
    fn quick_shaped() -> impl proptest::strategy::Strategy<Value = (Value, Value)> {
        use proptest::prelude::*;
        let names = || prop::sample::select(vec!["a", "b", "c"]);
        let types = prop::sample::select(vec![
            json!("string"),
            json!("integer"),
            json!("number"),
            json!("boolean"),
            json!("null"),
            json!("array"),
            json!("object"),
            json!(["string", "integer"]),
        ]);
        let property = prop::option::of(types).prop_map(|t| t.map_or(json!({}), |t| json!({"type": t})));
        let schema = (
            prop::collection::btree_map(names(), property, 0..4),
            prop::collection::btree_set(names(), 0..3),
            prop::option::of(any::<bool>()),
        )
            .prop_map(|(properties, required, additional)| {
                let mut schema = json!({"type": "object", "properties": properties, "required": required});
                if let Some(additional) = additional {
                    schema["additionalProperties"] = json!(additional);
                }
                schema
            });
        let value = prop::sample::select(vec![
            json!(1),
            json!(-3),
            json!(2.5),
            json!(1.0),
            json!("s"),
            json!(true),
            json!(null),
            json!([]),
            json!({}),
        ]);
        (schema, prop::collection::btree_map(names(), value, 0..4).prop_map(|m| json!(m)))
    }

    proptest::proptest! {
        /// The quick check says yes only where jsonschema does.
        #[test]
        fn what_the_quick_check_accepts_jsonschema_accepts((schema, input) in quick_shaped()) {
            let v = InputValidator::compile(&schema).expect("compiles");
            proptest::prop_assert!(v.quick.is_some(), "{}", schema);
            if v.accepts_quickly(members(&input)) {
                proptest::prop_assert!(v.check(&input).is_ok(), "{} {}", schema, input);
            }
        }
    }
}
