//! Property tests: tool id parsing, version resolution and dialect
//! normalisation hold for any input, and no input makes the request or
//! catalog parsers panic.

use otc_gateway::call::parse_call;
use otc_gateway::dialect::{normalise_catalog, DialectDefaults};
use otc_gateway::resolve::{parse_tool_id, VersionRequest};
use otc_gateway::wire::{nesting_within, normalise_tool_response};
use proptest::prelude::*;
use semver::Version;
use serde_json::json;

fn part() -> impl Strategy<Value = String> {
    "[A-Za-z0-9_]{1,20}"
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_well_formed_id_parses_back_to_its_parts(toolkit in part(), name in part(),
                                                     major in 0u64..1000, minor in 0u64..1000, patch in 0u64..1000) {
        let key = format!("{toolkit}.{name}");
        let exact_id = format!("{key}@{major}.{minor}.{patch}");
        let exact = parse_tool_id(&exact_id).expect("x.y.z parses");
        prop_assert_eq!(exact.key, key.as_str());
        prop_assert_eq!(exact.version, VersionRequest::Exact(Version::new(major, minor, patch)));
        let short_id = format!("{key}@{major}");
        let short = parse_tool_id(&short_id).expect("@x parses");
        prop_assert_eq!(short.version, VersionRequest::Exact(Version::new(major, 0, 0)));
        let latest = parse_tool_id(&key).expect("no version parses");
        prop_assert_eq!(latest.version, VersionRequest::Latest);
    }

    #[test]
    fn a_two_part_version_is_never_accepted(toolkit in part(), name in part(), a in 0u64..100, b in 0u64..100) {
        let id = format!("{}.{}@{}.{}", toolkit, name, a, b);
        prop_assert!(parse_tool_id(&id).is_err(), "{} parsed", id);
    }

    #[test]
    fn parsing_any_string_never_panics_and_accepts_only_the_pattern(id in "\\PC{0,80}") {
        if let Ok(parsed) = parse_tool_id(&id) {
            let (toolkit, name) = parsed.key.split_once('.').expect("a key has a dot");
            prop_assert!(!toolkit.is_empty() && toolkit.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
            prop_assert!(!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        }
    }

    #[test]
    fn the_latest_version_is_the_semver_maximum(versions in proptest::collection::btree_set((0u64..20, 0u64..20, 0u64..20), 1..8)) {
        // A catalog with several versions of one tool, published by one
        // upstream in the 1.0 dialect.
        let items: Vec<_> = versions.iter().map(|(a, b, c)| json!({
            "id": format!("T.Tool@{a}.{b}.{c}"), "name": "T_Tool", "description": "",
            "version": format!("{a}.{b}.{c}"), "input_schema": {"type": "object"}
        })).collect();
        let body = json!({"items": items}).to_string();
        let (tools, skipped) = normalise_catalog(body.as_bytes(), DialectDefaults::default()).expect("a catalog");
        prop_assert!(skipped.is_empty());
        let max = tools.iter().map(|t| t.version.clone()).max().expect("some");
        let (a, b, c) = versions.iter().max_by(|x, y| Version::new(x.0, x.1, x.2).cmp(&Version::new(y.0, y.1, y.2))).copied().expect("some");
        prop_assert_eq!(max, Version::new(a, b, c));
    }

    #[test]
    fn every_dialect_normalises_to_the_same_definition(name in part(), prop in "[a-z]{1,10}", wrapped in any::<bool>(), list_key in 0u8..3) {
        let schema = json!({"type": "object", "properties": {prop.clone(): {"type": "string"}}});
        let input_schema = if wrapped { json!({"parameters": schema.clone()}) } else { schema.clone() };
        let tool = json!({"id": format!("Kit.{name}@1.0.0"), "name": name, "description": "d",
                          "version": "1.0.0", "input_schema": input_schema});
        let body = match list_key {
            0 => json!({"items": [tool]}),
            1 => json!({"tools": [tool]}),
            _ => json!([tool]),
        };
        let (tools, _) = normalise_catalog(body.to_string().as_bytes(), DialectDefaults::default()).expect("a catalog");
        prop_assert_eq!(tools.len(), 1);
        prop_assert_eq!(tools[0].definition.input_schema.to_value(), schema);
        prop_assert_eq!(tools[0].definition.id.clone(), format!("Kit.{name}@1.0.0"));
    }

    #[test]
    fn no_request_body_makes_the_parser_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_call(&bytes);
        let _ = nesting_within(&bytes, 64);
    }

    #[test]
    fn no_json_request_shape_makes_the_parser_panic(value in arb_json()) {
        let body = value.to_string();
        let _ = parse_call(body.as_bytes());
        let wrapped = json!({"request": value}).to_string();
        let _ = parse_call(wrapped.as_bytes());
    }

    #[test]
    fn no_catalog_or_answer_makes_the_readers_panic(value in arb_json()) {
        let body = value.to_string();
        let _ = normalise_catalog(body.as_bytes(), DialectDefaults { toolkit: Some("K"), version: Some("1.0.0") });
        let _ = normalise_catalog(json!({"items": [value.clone()]}).to_string().as_bytes(), DialectDefaults::default());
        let _ = normalise_tool_response(body.as_bytes());
    }
}

/// Arbitrary JSON, biased towards the field names the parsers look at.
fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let key = prop_oneof![
        Just("tool_id".to_owned()),
        Just("input".to_owned()),
        Just("inputs".to_owned()),
        Just("request".to_owned()),
        Just("$schema".to_owned()),
        Just("context".to_owned()),
        Just("id".to_owned()),
        Just("version".to_owned()),
        Just("input_schema".to_owned()),
        Just("parameters".to_owned()),
        Just("items".to_owned()),
        Just("result".to_owned()),
        Just("success".to_owned()),
        Just("error".to_owned()),
        Just("requirements".to_owned()),
        "[a-z]{1,6}",
    ];
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        "\\PC{0,12}".prop_map(serde_json::Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, move |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::Array),
            proptest::collection::btree_map(key.clone(), inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}
