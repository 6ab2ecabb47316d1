//! Input validation against a tool's `input_schema`.
//!
//! A schema is compiled when the catalog changes, to turn away one that does
//! not compile; the validator calls use is compiled once, on the tool's first
//! call, and kept (`CatalogTool::check_input`).

use std::collections::BTreeMap;

use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::LocationSegment;
use serde_json::Value;

/// The key under which errors about the input as a whole are reported.
pub const WHOLE_INPUT: &str = "input";

/// A compiled `input_schema`.
pub struct InputValidator {
    validator: jsonschema::Validator,
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
        Ok(InputValidator { validator })
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
}
