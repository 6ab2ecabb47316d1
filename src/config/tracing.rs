//! `[tracing]`: spans exported over OTLP (docs/operations.md, "Traces").

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer};

use super::secret_ref::SecretRef;

/// The `[tracing]` section. Without it nothing is recorded or exported.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// The collector's OTLP/HTTP base URL, e.g. `http://collector:4318`;
    /// spans are posted (protobuf) to `<otlp_endpoint>/v1/traces`.
    #[serde(deserialize_with = "deserialize_endpoint")]
    pub otlp_endpoint: String,
    /// Headers sent with every export (a hosted backend's key), each value a
    /// secret reference (`env:`, `file:` or `vault:`, without `{user_id}`).
    #[serde(default, deserialize_with = "deserialize_headers")]
    pub headers: BTreeMap<String, SecretRef>,
    /// The share of new traces recorded, 0.0 to 1.0 (default 1.0). A request
    /// whose `traceparent` says whether its trace is sampled follows that.
    #[serde(default = "default_ratio", deserialize_with = "deserialize_ratio")]
    pub sample_ratio: f64,
    /// `service.name` of every span (default `otc-gateway`).
    #[serde(default = "default_service_name")]
    pub service_name: String,
}

fn default_ratio() -> f64 {
    1.0
}

fn default_service_name() -> String {
    "otc-gateway".to_owned()
}

fn deserialize_endpoint<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let text = String::deserialize(d)?;
    let uri: http::Uri = text.parse().map_err(|e| serde::de::Error::custom(format!("{text:?} is not a URL: {e}")))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none_or(str::is_empty) {
        return Err(serde::de::Error::custom(format!(
            "{text:?} must be an http:// or https:// URL with a host (OTLP over HTTP, e.g. http://collector:4318)"
        )));
    }
    if uri.query().is_some() || uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(serde::de::Error::custom(format!("{text:?} must have no query, user name or password")));
    }
    Ok(text.trim_end_matches('/').to_owned())
}

fn deserialize_ratio<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let ratio = f64::deserialize(d)?;
    if !(0.0..=1.0).contains(&ratio) {
        return Err(serde::de::Error::custom(format!("sample_ratio must be between 0.0 and 1.0, not {ratio}")));
    }
    Ok(ratio)
}

fn deserialize_headers<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, SecretRef>, D::Error> {
    let headers = BTreeMap::<String, SecretRef>::deserialize(d)?;
    for (name, reference) in &headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err(serde::de::Error::custom(format!("headers: {name:?} is not a header name")));
        }
        if reference.uses_user_id() {
            return Err(serde::de::Error::custom(format!(
                "headers.{name}: no {{user_id}} here (exports are nobody's)"
            )));
        }
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<TracingConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn defaults_and_checks() {
        let t = parse(r#"otlp_endpoint = "http://collector:4318/""#).expect("parses");
        assert_eq!(
            (t.otlp_endpoint.as_str(), t.sample_ratio, t.service_name.as_str()),
            ("http://collector:4318", 1.0, "otc-gateway")
        );
        assert!(parse(r#"otlp_endpoint = "collector:4318""#).is_err());
        assert!(parse("otlp_endpoint = \"http://c:4318\"\nsample_ratio = 1.5").is_err());
        assert!(parse("otlp_endpoint = \"http://c:4318\"\nheaders = { x-key = \"plain-secret\" }").is_err());
        assert!(parse("otlp_endpoint = \"http://c:4318\"\nheaders = { x-key = \"env:K_{user_id}\" }").is_err());
        assert!(parse("otlp_endpoint = \"http://c:4318\"\nsample = 1").is_err());
        let t = parse("otlp_endpoint = \"https://c\"\nheaders = { x-key = \"env:KEY\" }\nsample_ratio = 0")
            .expect("parses");
        assert_eq!(t.headers["x-key"], SecretRef::Env { name: "KEY".into() });
    }
}
