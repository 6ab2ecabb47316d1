//! Injected values a tool sends back: a tool server that echoes the secret
//! or the user token it was given (in its value, its error, or an error
//! body) must not hand it to the caller, who was never meant to hold it.
//!
//! Only verbatim copies are found, in strings, object keys and numbers
//! after JSON unescaping: an encoded, split, hashed or partial copy passes,
//! and so does a value shorter than [`MIN_SCRUBBED_LEN`] (replacing every
//! "42" in an answer would break it for no protection). docs/security.md
//! says so.

use serde_json::{Map, Value};

use crate::wire::RawJson;

/// What replaces an echoed value.
pub const REDACTED: &str = "[redacted]";

/// Injected values shorter than this are not looked for.
pub const MIN_SCRUBBED_LEN: usize = 6;

/// Whether a value is long enough to be looked for.
fn looked_for(secret: &&str) -> bool {
    secret.len() >= MIN_SCRUBBED_LEN
}

/// Replaces every copy of the `secrets` in `value`.
pub fn value(value: &mut Value, secrets: &[&str]) {
    if secrets.iter().any(looked_for) {
        walk(value, secrets);
    }
}

/// Replaces every copy of the `secrets` in a value kept as JSON text: read,
/// scrubbed and written again only when it held one.
pub fn raw_json(raw: &mut RawJson, secrets: &[&str]) {
    // Most answers hold no escape and no copy: a scan of the text says so.
    // A copy escaped in the text (`\u0041…`) is found once it is read.
    if !secrets.iter().any(looked_for) {
        return;
    }
    let text = raw.get();
    if !text.contains('\\') && !secrets.iter().copied().filter(looked_for).any(|s| text.contains(s)) {
        return;
    }
    let Ok(mut parsed) = serde_json::from_str::<Value>(text) else { return };
    if walk(&mut parsed, secrets) {
        *raw = RawJson::from_value(&parsed);
    }
}

/// Scrubs in place; whether anything was replaced.
fn walk(value: &mut Value, secrets: &[&str]) -> bool {
    match value {
        Value::String(text) => replace(text, secrets),
        Value::Number(n) => {
            let text = n.to_string();
            let found = secrets.iter().copied().filter(looked_for).any(|s| text.contains(s));
            if found {
                *value = Value::String(REDACTED.to_owned());
            }
            found
        }
        Value::Array(items) => items.iter_mut().fold(false, |any, item| walk(item, secrets) | any),
        Value::Object(map) => {
            let mut any = false;
            if map.keys().any(|k| secrets.iter().copied().filter(looked_for).any(|s| k.contains(s))) {
                let old = std::mem::take(map);
                *map = old
                    .into_iter()
                    .map(|(mut k, v)| {
                        replace(&mut k, secrets);
                        (k, v)
                    })
                    .collect::<Map<String, Value>>();
                any = true;
            }
            map.values_mut().fold(any, |any, item| walk(item, secrets) | any)
        }
        Value::Null | Value::Bool(_) => false,
    }
}

/// Replaces every copy of the secrets in `text`; whether there was one.
fn replace(text: &mut String, secrets: &[&str]) -> bool {
    let mut found = false;
    for secret in secrets.iter().copied().filter(looked_for) {
        if text.contains(secret) {
            *text = text.replace(secret, REDACTED);
            found = true;
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn echoes_are_replaced_wherever_they_are() {
        let secret = "sk-live-0123456789";
        let mut v = json!({
            "echo": secret,
            "inside": format!("key={secret}; again {secret}"),
            "list": [1, {"deep": secret}],
            secret: "as a key",
            "fine": "nothing here",
        });
        value(&mut v, &[secret]);
        let text = v.to_string();
        assert!(!text.contains(secret), "{text}");
        assert_eq!(v["inside"], "key=[redacted]; again [redacted]");
        assert_eq!(v["fine"], "nothing here");
        assert_eq!(v["[redacted]"], "as a key");
    }

    #[test]
    fn raw_values_are_scrubbed_after_unescaping_and_left_alone_otherwise() {
        let mut escaped = RawJson::from_value(&json!(null));
        let text = r#"{"k":"\u0073k-live-0123456789"}"#;
        escaped = serde_json::from_str(text).unwrap_or(escaped);
        raw_json(&mut escaped, &["sk-live-0123456789"]);
        assert_eq!(escaped.get(), r#"{"k":"[redacted]"}"#);
        let untouched_text = r#"{ "k" : "spelled  as  the tool wrote it" }"#;
        let mut untouched: RawJson = serde_json::from_str(untouched_text).expect("raw");
        raw_json(&mut untouched, &["sk-live-0123456789"]);
        assert_eq!(untouched.get(), untouched_text, "no echo: the text is kept as it came");
        let mut number: RawJson = serde_json::from_str("[12345678901234]").expect("raw");
        raw_json(&mut number, &["45678901"]);
        assert_eq!(number.get(), r#"["[redacted]"]"#);
    }

    #[test]
    fn short_values_are_not_looked_for() {
        let mut v = json!({"answer": "42 is 42"});
        value(&mut v, &["42"]);
        assert_eq!(v["answer"], "42 is 42");
    }
}
