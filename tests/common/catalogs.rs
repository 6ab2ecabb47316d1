//! Tool definitions and catalogs.

use super::*;

/// A canonical tool definition: `tool("Calculator.Add", "1.0.0", schema)`
/// publishes id `Calculator.Add@1.0.0`, name `Calculator_Add`.
pub fn tool(key: &str, version: &str, input_schema: Value) -> Value {
    json!({
        "id": format!("{key}@{version}"),
        "name": key.replace('.', "_"),
        "description": format!("{key} version {version}"),
        "version": version,
        "input_schema": input_schema,
    })
}

/// The same as [`tool`] with another description (to tell definitions apart).
pub fn tool_described(key: &str, version: &str, input_schema: Value, description: &str) -> Value {
    let mut t = tool(key, version, input_schema);
    t["description"] = json!(description);
    t
}

/// `Toolkit.Name@1.0.0` taking any object and declaring `requirements`.
pub fn needing(key: &str, requirements: Value) -> Value {
    let mut t = tool(key, "1.0.0", json!({"type": "object"}));
    t["requirements"] = requirements;
    t
}

/// A JWK (the public half of a PEM private key) with a `kid`, for JWKS files.
pub fn jwk(pem: &str, alg: jsonwebtoken::Algorithm, kid: &str) -> jsonwebtoken::jwk::Jwk {
    let key = match alg {
        jsonwebtoken::Algorithm::ES256 => jsonwebtoken::EncodingKey::from_ec_pem(pem.as_bytes()),
        _ => jsonwebtoken::EncodingKey::from_rsa_pem(pem.as_bytes()),
    }
    .expect("key");
    let mut jwk = jsonwebtoken::jwk::Jwk::from_encoding_key(&key, alg).expect("jwk");
    jwk.common.key_id = Some(kid.to_owned());
    jwk
}

/// A catalog in the canonical dialect: `{"$schema": "otc://1.0", "items": [...]}`.
pub fn catalog(tools: Vec<Value>) -> Value {
    json!({"$schema": "otc://1.0", "items": tools})
}

/// `{a: number, b: number}`, both required.
pub fn add_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "a": {"type": "number", "description": "The first number."},
            "b": {"type": "number", "description": "The second number."}
        },
        "required": ["a", "b"]
    })
}

/// Any object.
pub fn any_object() -> Value {
    json!({"type": "object"})
}
