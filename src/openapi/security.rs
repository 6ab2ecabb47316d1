//! An operation's security requirements as the credentials its calls carry
//! and the tool's requirements (secrets or authorization), by what the
//! upstream's `security` maps each scheme to.

use http::header::HeaderName;
use serde_json::{json, Map, Value};

use super::document::Document;
use super::plan::{Credential, KeyLocation, SchemeKind};
use super::schema::Resolver;
use crate::config::{SecurityMap, SecuritySource};

/// The credentials an operation's calls carry, and the requirements that
/// make the gateway inject them: the first of its security requirements
/// (`security`, else the document's) whose every scheme the config maps.
/// An operation whose requirements list `{}` needs nothing when none is
/// mapped; one whose schemes are not mapped is skipped, saying which.
pub(super) fn credentials(
    document: &Document,
    resolver: &Resolver<'_>,
    op: &Map<String, Value>,
    security: &SecurityMap,
) -> Result<(Vec<Credential>, Option<Value>), String> {
    let requirements = op.get("security").or_else(|| document.root.get("security"));
    let Some(requirements) = requirements else { return Ok((Vec::new(), None)) };
    let Value::Array(alternatives) = requirements else { return Err("`security` is not a list".into()) };
    if alternatives.is_empty() {
        return Ok((Vec::new(), None));
    }
    let mut anonymous = false;
    let mut unusable = Vec::new();
    for alternative in alternatives {
        let Value::Object(schemes) = alternative else { return Err("a security requirement is not an object".into()) };
        if schemes.is_empty() {
            anonymous = true;
            continue;
        }
        match alternative_credentials(document, resolver, schemes, security) {
            Ok(found) => return Ok(found),
            Err(why) => unusable.push(why),
        }
    }
    if anonymous {
        return Ok((Vec::new(), None));
    }
    Err(format!("its security cannot be met: {}", unusable.join("; or ")))
}

/// One security requirement (all of its schemes) as credentials and
/// requirements, or why it cannot be met.
fn alternative_credentials(
    document: &Document,
    resolver: &Resolver<'_>,
    schemes: &Map<String, Value>,
    security: &SecurityMap,
) -> Result<(Vec<Credential>, Option<Value>), String> {
    let mut credentials = Vec::new();
    let mut secrets: Vec<Value> = Vec::new();
    let mut providers: Vec<Value> = Vec::new();
    for (scheme, scopes) in schemes {
        let definition = document
            .security_schemes()
            .and_then(|all| all.get(scheme))
            .ok_or_else(|| format!("the security scheme {scheme:?} is not in components.securitySchemes"))?;
        let definition = resolver.object(definition)?;
        // A kind the gateway cannot present says so, mapped or not.
        let kind = scheme_kind(scheme, definition)?;
        let Some(source) = security.get(scheme) else {
            return Err(format!(
                "the security scheme {scheme:?} is not mapped (add {scheme} = {{ secret = \"…\" }} or {{ authorization = \"…\" }} to the upstream's `security`)"
            ));
        };
        let is_oauth = matches!(definition.get("type").and_then(Value::as_str), Some("oauth2" | "openIdConnect"));
        match source {
            SecuritySource::Secret(id) => {
                if !secrets.iter().any(|s| s["id"] == id.as_str()) {
                    secrets.push(json!({"id": id}));
                }
            }
            SecuritySource::Authorization(provider) => {
                let scopes: Vec<&Value> = scopes.as_array().into_iter().flatten().filter(|s| s.is_string()).collect();
                let mut requirement = json!({"id": provider});
                if is_oauth && !scopes.is_empty() {
                    requirement["oauth2"] = json!({"scopes": scopes});
                }
                match providers.iter_mut().find(|p| p["id"] == provider.as_str()) {
                    // The same provider for two schemes: the scopes of both.
                    Some(earlier) => {
                        if let (Some(Value::Array(have)), Some(Value::Array(more))) =
                            (earlier.pointer_mut("/oauth2/scopes"), requirement.pointer("/oauth2/scopes"))
                        {
                            for scope in more {
                                if !have.contains(scope) {
                                    have.push(scope.clone());
                                }
                            }
                        }
                    }
                    None => providers.push(requirement),
                }
            }
        }
        credentials.push(Credential { scheme: scheme.clone(), kind, source: source.clone() });
    }
    let mut requirements = Map::new();
    if !secrets.is_empty() {
        requirements.insert("secrets".into(), Value::Array(secrets));
    }
    if !providers.is_empty() {
        requirements.insert("authorization".into(), Value::Array(providers));
    }
    Ok((credentials, Some(Value::Object(requirements))))
}

/// How a security scheme presents its credential.
fn scheme_kind(scheme: &str, definition: &Value) -> Result<SchemeKind, String> {
    let text = |key: &str| definition.get(key).and_then(Value::as_str);
    match text("type") {
        Some("apiKey") => {
            let name = text("name").filter(|n| !n.is_empty()).ok_or(format!("apiKey scheme {scheme:?} has no name"))?;
            let location = match text("in") {
                Some("header") => {
                    HeaderName::try_from(name)
                        .map_err(|_| format!("apiKey scheme {scheme:?}: {name:?} is not a header name"))?;
                    if reserved_header(name) {
                        return Err(format!(
                            "apiKey scheme {scheme:?}: {name:?} is a header the gateway writes itself"
                        ));
                    }
                    KeyLocation::Header
                }
                Some("query") => KeyLocation::Query,
                Some("cookie") => KeyLocation::Cookie,
                other => {
                    return Err(format!("apiKey scheme {scheme:?}: `in` {other:?} is not header, query or cookie"))
                }
            };
            Ok(SchemeKind::ApiKey { location, name: name.to_owned() })
        }
        Some("http") => match text("scheme").map(str::to_ascii_lowercase).as_deref() {
            Some("bearer") => Ok(SchemeKind::Bearer),
            Some("basic") => Ok(SchemeKind::Basic),
            other => Err(format!("http scheme {scheme:?}: {other:?} is not supported (bearer and basic are)")),
        },
        Some("oauth2" | "openIdConnect") => Ok(SchemeKind::Bearer),
        other => Err(format!("security scheme {scheme:?} of type {other:?} is not supported")),
    }
}

/// Headers that frame or route a request (`Host`, `Content-Length`,
/// hop-by-hop headers, `Cookie`, which cookie parameters build): the
/// gateway writes them, a parameter or an API key never does.
pub(super) fn reserved_header(name: &str) -> bool {
    const RESERVED: &[&str] = &[
        "host",
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "proxy-authorization",
        "proxy-connection",
        "cookie",
        "expect",
    ];
    RESERVED.contains(&name.to_ascii_lowercase().as_str())
}
