//! A call's HTTP request, built from its operation's plan and the validated
//! input: path parameters each percent-encoded as exactly one segment (a
//! value such as `a/b?c` never changes the path or the query; one that a
//! proxy would decode to a dot segment or a separator, `..` or `%2F`, was
//! refused by validation, `url_path.rs`, and a path that reads as one once
//! filled in is refused here), query parameters by their `style` and `explode`, headers,
//! cookies, a JSON or text body; and the credentials of the operation's
//! security, taken from what the gateway injected into the call's context.
//!
//! The context itself is not sent: the API gets only what its security
//! schemes say, where they say it.

use base64::Engine as _;
use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, ACCEPT, AUTHORIZATION, COOKIE};
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::{Map, Value};

use super::plan::{BodyShape, KeyLocation, Location, Operation, PathPart, SchemeKind, Style};
use crate::config::SecuritySource;
use crate::url_path::has_dot_segment;
use crate::wire::CallContext;

/// Everything but RFC 3986's unreserved characters is percent-encoded.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');

/// A call's request, but for the scheme and authority (the upstream's
/// `url`, which nothing here can change).
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The operation's path, its parameters filled in, and the query.
    pub(crate) path_and_query: String,
    /// Header parameters, credentials, `Accept`, `Cookie`.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    /// The body and its `Content-Type`.
    pub(crate) body: Option<(HeaderValue, Bytes)>,
    /// Whether a credential set `Authorization` (the upstream's own
    /// `bearer_token` then stays out).
    pub(crate) sets_authorization: bool,
    /// The credentials the request carries, as sent (a basic scheme's
    /// base64 too): what the answer's excerpt must not show.
    pub(crate) sent: Vec<String>,
}

/// Why a request could not be built from the input. Messages name
/// parameters and schemes, never a value.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BuildError {
    /// A path parameter with no value that can be a segment.
    #[error("the path parameter {0:?} is empty or missing")]
    EmptyPath(String),
    /// A value that a header cannot carry (a line break, say).
    #[error("the value of {0} cannot be sent in a header")]
    BadHeader(String),
    /// The text body is not a string.
    #[error("the input `body` must be a string for a {0} body")]
    TextBody(String),
    /// A credential the call should carry was not injected.
    #[error("the security scheme {0:?} has no value in the call's context")]
    MissingCredential(String),
    /// The path, its parameters filled in, reads as a dot segment (a value
    /// beside a literal: `..{p}` with `;`), which a proxy would resolve out
    /// of `url`'s path. Validation refuses the values alone.
    #[error("the path, filled in, would have a . or .. segment once decoded")]
    DotSegment,
}

/// Builds the request for one call.
pub(crate) fn prepare(
    operation: &Operation,
    input: &Map<String, Value>,
    context: &CallContext,
) -> Result<Prepared, BuildError> {
    let mut path = String::new();
    for part in &operation.path {
        match part {
            PathPart::Literal(text) => path.push_str(text),
            PathPart::Param(name) => {
                let param = operation.params.iter().find(|p| p.location == Location::Path && &p.name == name);
                let (style, explode, json, reserved) =
                    param.map_or((Style::Simple, false, false, false), |p| (p.style, p.explode, p.json, p.reserved));
                let value = input.get(name).filter(|v| !v.is_null());
                let segment = value.map(|v| path_value(name, v, style, explode, json, reserved)).unwrap_or_default();
                if segment.is_empty() {
                    return Err(BuildError::EmptyPath(name.clone()));
                }
                path.push_str(&segment);
            }
        }
    }
    if has_dot_segment(&path) {
        return Err(BuildError::DotSegment);
    }
    let mut query: Vec<String> = Vec::new();
    let mut headers: Vec<(HeaderName, HeaderValue)> = Vec::new();
    let mut cookies: Vec<String> = Vec::new();
    for param in &operation.params {
        let Some(value) = input.get(&param.name).filter(|v| !v.is_null()) else { continue };
        let value = &if param.json { Value::String(value.to_string()) } else { value.clone() };
        match param.location {
            Location::Path => {}
            Location::Query => query.extend(query_pairs(&param.name, value, param.style, param.explode)),
            Location::Header => {
                let text = simple(value, param.explode, &|s| s.to_owned());
                let name = HeaderName::try_from(param.name.as_str())
                    .map_err(|_| BuildError::BadHeader(format!("header {:?}", param.name)))?;
                let value = HeaderValue::try_from(text)
                    .map_err(|_| BuildError::BadHeader(format!("header {:?}", param.name)))?;
                headers.push((name, value));
            }
            Location::Cookie => {
                let text = match value {
                    Value::Array(_) | Value::Object(_) => simple(value, false, &encode),
                    _ => encode(&scalar(value)),
                };
                cookies.push(format!("{}={text}", encode(&param.name)));
            }
        }
    }
    let mut sets_authorization = false;
    let mut sent = Vec::new();
    for credential in &operation.credentials {
        let secret = match &credential.source {
            SecuritySource::Secret(id) => context.secrets.iter().find(|s| &s.id == id).map(|s| s.value.as_str()),
            SecuritySource::Authorization(provider) => {
                context.authorization.iter().find(|a| &a.id == provider).map(|a| a.token.as_str())
            }
        };
        let secret = secret.ok_or_else(|| BuildError::MissingCredential(credential.scheme.clone()))?;
        let bad = || BuildError::BadHeader(format!("the security scheme {:?}", credential.scheme));
        let header = |text: String| -> Result<HeaderValue, BuildError> {
            let mut value = HeaderValue::try_from(text).map_err(|_| bad())?;
            value.set_sensitive(true);
            Ok(value)
        };
        sent.push(secret.to_owned());
        match &credential.kind {
            SchemeKind::ApiKey { location: KeyLocation::Header, name } => {
                let name = HeaderName::try_from(name.as_str()).map_err(|_| bad())?;
                sets_authorization |= name == AUTHORIZATION;
                headers.push((name, header(secret.to_owned())?));
            }
            SchemeKind::ApiKey { location: KeyLocation::Query, name } => {
                query.push(format!("{}={}", encode(name), encode(secret)));
            }
            SchemeKind::ApiKey { location: KeyLocation::Cookie, name } => {
                cookies.push(format!("{}={}", encode(name), encode(secret)));
            }
            SchemeKind::Bearer => {
                sets_authorization = true;
                headers.push((AUTHORIZATION, header(format!("Bearer {secret}"))?));
            }
            SchemeKind::Basic => {
                sets_authorization = true;
                let encoded = base64::engine::general_purpose::STANDARD.encode(secret.as_bytes());
                headers.push((AUTHORIZATION, header(format!("Basic {encoded}"))?));
                sent.push(encoded);
            }
        }
    }
    if !cookies.is_empty() {
        let mut value =
            HeaderValue::try_from(cookies.join("; ")).map_err(|_| BuildError::BadHeader("Cookie".into()))?;
        // Cookies may carry an API key.
        value.set_sensitive(true);
        headers.push((COOKIE, value));
    }
    if let Some(accept) = operation.accept.as_deref().and_then(|a| HeaderValue::try_from(a).ok()) {
        headers.push((ACCEPT, accept));
    }
    let body = body(operation, input)?;
    let mut path_and_query = path;
    if !query.is_empty() {
        path_and_query.push('?');
        path_and_query.push_str(&query.join("&"));
    }
    Ok(Prepared { path_and_query, headers, body, sets_authorization, sent })
}

/// The body and its `Content-Type`, when the operation takes one and the
/// input has it (or it is required).
fn body(operation: &Operation, input: &Map<String, Value>) -> Result<Option<(HeaderValue, Bytes)>, BuildError> {
    let Some(body) = &operation.body else { return Ok(None) };
    let value = match body.shape {
        BodyShape::Merged => {
            let fields: Map<String, Value> = input
                .iter()
                .filter(|(name, _)| !operation.params.iter().any(|p| &p.name == *name))
                .map(|(name, value)| (name.clone(), value.clone()))
                .collect();
            if fields.is_empty() && !body.required {
                return Ok(None);
            }
            Value::Object(fields)
        }
        BodyShape::Property => match input.get("body") {
            Some(value) => value.clone(),
            None if body.required => Value::Null,
            None => return Ok(None),
        },
    };
    let bytes = if body.json {
        Bytes::from(value.to_string())
    } else {
        match value {
            Value::String(text) => Bytes::from(text),
            _ => return Err(BuildError::TextBody(body.media_type.clone())),
        }
    };
    let content_type = HeaderValue::try_from(body.media_type.as_str())
        .unwrap_or_else(|_| HeaderValue::from_static("application/octet-stream"));
    Ok(Some((content_type, bytes)))
}

/// A path parameter's segment, every character that could end the
/// segment or start a query percent-encoded. A value made of dots only
/// (`.`, `..`) is encoded too, so it is never a dot segment. With
/// `reserved` (`allowReserved`), `/` is sent as it is and each piece
/// between is encoded so.
fn path_value(name: &str, value: &Value, style: Style, explode: bool, json: bool, reserved: bool) -> String {
    let encode_piece = |text: &str| {
        if !text.is_empty() && text.bytes().all(|b| b == b'.') {
            "%2E".repeat(text.len())
        } else {
            encode(text)
        }
    };
    let encode_segment = |text: &str| {
        if reserved {
            text.split('/').map(encode_piece).collect::<Vec<_>>().join("/")
        } else {
            encode_piece(text)
        }
    };
    if json {
        return encode_segment(&value.to_string());
    }
    match style {
        Style::Label => {
            let separator = if explode { "." } else { "," };
            format!(".{}", join(value, explode, separator, "=", &encode_segment))
        }
        Style::Matrix => matrix(name, value, explode, &encode_segment),
        _ => simple(value, explode, &encode_segment),
    }
}

/// `simple` style: `a,b`; an object `k,v,k2,v2`, exploded `k=v,k2=v2`.
fn simple(value: &Value, explode: bool, encode: &dyn Fn(&str) -> String) -> String {
    join(value, explode, ",", "=", encode)
}

/// An array's or object's items joined (objects as key and value pairs),
/// a scalar as it is, each part encoded.
fn join(value: &Value, explode: bool, separator: &str, pair: &str, encode: &dyn Fn(&str) -> String) -> String {
    match value {
        Value::Array(items) => items.iter().map(|item| encode(&scalar(item))).collect::<Vec<_>>().join(separator),
        Value::Object(fields) => {
            let between = if explode { pair } else { "," };
            fields
                .iter()
                .map(|(k, v)| format!("{}{between}{}", encode(k), encode(&scalar(v))))
                .collect::<Vec<_>>()
                .join(if explode { separator } else { "," })
        }
        _ => encode(&scalar(value)),
    }
}

/// `matrix` style: `;name=a`, `;name=a,b` or `;name=a;name=b`.
fn matrix(name: &str, value: &Value, explode: bool, encode: &dyn Fn(&str) -> String) -> String {
    let name = self::encode(name);
    match value {
        Value::Array(items) if explode => items.iter().map(|i| format!(";{name}={}", encode(&scalar(i)))).collect(),
        Value::Object(fields) if explode => {
            fields.iter().map(|(k, v)| format!(";{}={}", encode(k), encode(&scalar(v)))).collect()
        }
        _ => format!(";{name}={}", join(value, false, ",", "=", encode)),
    }
}

/// A query parameter's `name=value` pairs, by its style.
fn query_pairs(name: &str, value: &Value, style: Style, explode: bool) -> Vec<String> {
    let key = encode(name);
    match (value, style) {
        (Value::Array(items), Style::Form) if explode => {
            items.iter().map(|item| format!("{key}={}", encode(&scalar(item)))).collect()
        }
        (Value::Array(items), Style::SpaceDelimited | Style::PipeDelimited) if !items.is_empty() => {
            let separator = if style == Style::SpaceDelimited { "%20" } else { "|" };
            vec![format!("{key}={}", items.iter().map(|i| encode(&scalar(i))).collect::<Vec<_>>().join(separator))]
        }
        (Value::Array(items), _) if items.is_empty() => Vec::new(),
        (Value::Object(fields), Style::DeepObject) => {
            fields.iter().map(|(k, v)| format!("{key}%5B{}%5D={}", encode(k), encode(&scalar(v)))).collect()
        }
        (Value::Object(fields), Style::Form) if explode => {
            fields.iter().map(|(k, v)| format!("{}={}", encode(k), encode(&scalar(v)))).collect()
        }
        _ => vec![format!("{key}={}", join(value, false, ",", "=", &encode))],
    }
}

/// A scalar as text: a string as it is, a number as written, `true`,
/// `false`, and anything nested as JSON text.
fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        nested => nested.to_string(),
    }
}

/// Percent-encodes everything but the unreserved characters.
fn encode(text: &str) -> String {
    utf8_percent_encode(text, COMPONENT).to_string()
}

#[cfg(test)]
mod tests {
    use super::super::plan::{Body, Credential, Param};
    use super::*;
    use http::Method;
    use serde_json::json;

    fn op(path: Vec<PathPart>, params: Vec<Param>) -> Operation {
        Operation {
            label: "GET /x".into(),
            method: Method::GET,
            path,
            params,
            body: None,
            credentials: Vec::new(),
            accept: None,
        }
    }

    fn param(name: &str, location: Location, style: Style, explode: bool) -> Param {
        Param { name: name.into(), location, style, explode, json: false, reserved: false }
    }

    fn input(value: Value) -> Map<String, Value> {
        value.as_object().cloned().expect("an object")
    }

    #[test]
    fn hostile_path_values_stay_one_segment() {
        let operation = op(
            vec![PathPart::Literal("/books/".into()), PathPart::Param("id".into()), PathPart::Literal("/cover".into())],
            vec![param("id", Location::Path, Style::Simple, false)],
        );
        for (value, expected) in [
            ("a?b", "/books/a%3Fb/cover"),
            ("%zz", "/books/%25zz/cover"),
            ("...", "/books/%2E%2E%2E/cover"),
            ("a#b c", "/books/a%23b%20c/cover"),
            ("ünï", "/books/%C3%BCn%C3%AF/cover"),
        ] {
            let built = prepare(&operation, &input(json!({"id": value})), &CallContext::default()).expect("built");
            assert_eq!(built.path_and_query, expected, "{value}");
        }
        // Validation refuses these; should one get here, it is not sent.
        for value in ["..", "%2e%2e", "..;"] {
            let e = prepare(&operation, &input(json!({"id": value})), &CallContext::default()).expect_err(value);
            assert!(matches!(e, BuildError::DotSegment), "{value}");
        }
        // A value beside a literal that makes a dot segment with it.
        let beside = op(
            vec![PathPart::Literal("/books/..".into()), PathPart::Param("id".into())],
            vec![param("id", Location::Path, Style::Simple, false)],
        );
        let e = prepare(&beside, &input(json!({"id": ";x"})), &CallContext::default()).expect_err("..;x");
        assert!(matches!(e, BuildError::DotSegment));
        for missing in [json!({}), json!({"id": ""}), json!({"id": null})] {
            let e = prepare(&operation, &input(missing), &CallContext::default()).expect_err("empty");
            assert!(matches!(e, BuildError::EmptyPath(_)));
        }
    }

    #[test]
    fn reserved_path_values_keep_their_slashes_and_nothing_else() {
        let mut path = param("path", Location::Path, Style::Simple, false);
        path.reserved = true;
        let operation = op(vec![PathPart::Literal("/files/".into()), PathPart::Param("path".into())], vec![path]);
        for (value, expected) in [
            ("docs/README.md", "/files/docs/README.md"),
            ("a b/c?d#e/%2F", "/files/a%20b/c%3Fd%23e/%252F"),
            ("a/.../b", "/files/a/%2E%2E%2E/b"),
        ] {
            let built = prepare(&operation, &input(json!({"path": value})), &CallContext::default()).expect("built");
            assert_eq!(built.path_and_query, expected, "{value}");
        }
        let e = prepare(&operation, &input(json!({"path": "a/../b"})), &CallContext::default()).expect_err("..");
        assert!(matches!(e, BuildError::DotSegment));
    }

    #[test]
    fn query_styles_follow_openapi() {
        let cases = [
            (param("tags", Location::Query, Style::Form, true), json!(["a b", "c&d"]), "tags=a%20b&tags=c%26d"),
            (param("tags", Location::Query, Style::Form, false), json!(["a", "b"]), "tags=a,b"),
            (param("tags", Location::Query, Style::SpaceDelimited, false), json!(["a", "b"]), "tags=a%20b"),
            (param("tags", Location::Query, Style::PipeDelimited, false), json!(["a", "b"]), "tags=a|b"),
            (param("f", Location::Query, Style::DeepObject, true), json!({"k": "v"}), "f%5Bk%5D=v"),
            (param("f", Location::Query, Style::Form, true), json!({"k": "v", "l": 2}), "k=v&l=2"),
            (
                param("n", Location::Query, Style::Form, true),
                json!(98765432109876543210u128.to_string()),
                "n=98765432109876543210",
            ),
            (param("q", Location::Query, Style::Form, true), json!("x=1&admin=true"), "q=x%3D1%26admin%3Dtrue"),
        ];
        for (p, value, expected) in cases {
            let name = p.name.clone();
            let operation = op(vec![PathPart::Literal("/x".into())], vec![p]);
            let built = prepare(&operation, &Map::from_iter([(name, value)]), &CallContext::default()).expect("built");
            assert_eq!(built.path_and_query, format!("/x?{expected}"));
        }
    }

    #[test]
    fn credentials_go_where_the_scheme_says() {
        let mut operation = op(vec![PathPart::Literal("/x".into())], Vec::new());
        let credential =
            |kind: SchemeKind| Credential { scheme: "S".into(), kind, source: SecuritySource::Secret("K".into()) };
        let context: CallContext =
            serde_json::from_value(json!({"secrets": [{"id": "K", "value": "user:pa ss"}]})).expect("context");
        operation.credentials =
            vec![credential(SchemeKind::ApiKey { location: KeyLocation::Query, name: "api_key".into() })];
        assert_eq!(prepare(&operation, &Map::new(), &context).expect("q").path_and_query, "/x?api_key=user%3Apa%20ss");
        operation.credentials = vec![credential(SchemeKind::Basic)];
        let built = prepare(&operation, &Map::new(), &context).expect("basic");
        assert_eq!(built.headers[0].1, "Basic dXNlcjpwYSBzcw==");
        assert!(built.sets_authorization && built.headers[0].1.is_sensitive());
        operation.credentials =
            vec![credential(SchemeKind::ApiKey { location: KeyLocation::Cookie, name: "sid".into() })];
        let built = prepare(&operation, &Map::new(), &context).expect("cookie");
        assert_eq!(built.headers[0], (COOKIE, HeaderValue::from_static("sid=user%3Apa%20ss")));
        let e = prepare(&operation, &Map::new(), &CallContext::default()).expect_err("missing");
        assert!(matches!(e, BuildError::MissingCredential(_)));
        // A line break never reaches a header, and the error does not show it.
        let context: CallContext =
            serde_json::from_value(json!({"secrets": [{"id": "K", "value": "a\r\nX-Evil: 1"}]})).expect("context");
        operation.credentials = vec![credential(SchemeKind::Bearer)];
        let e = prepare(&operation, &Map::new(), &context).expect_err("crlf").to_string();
        assert!(!e.contains("Evil"), "{e}");
    }

    #[test]
    fn json_parameters_and_text_bodies() {
        let mut json_param = param("filter", Location::Query, Style::Form, true);
        json_param.json = true;
        let mut operation = op(vec![PathPart::Literal("/x".into())], vec![json_param]);
        operation.body =
            Some(Body { media_type: "text/markdown".into(), json: false, shape: BodyShape::Property, required: true });
        let built =
            prepare(&operation, &input(json!({"filter": {"a": [1]}, "body": "# Title"})), &CallContext::default())
                .expect("built");
        assert_eq!(built.path_and_query, "/x?filter=%7B%22a%22%3A%5B1%5D%7D");
        let (content_type, bytes) = built.body.expect("a body");
        assert_eq!((content_type.to_str().expect("ascii"), &bytes[..]), ("text/markdown", &b"# Title"[..]));
        let e = prepare(&operation, &input(json!({"body": 5})), &CallContext::default()).expect_err("not text");
        assert!(matches!(e, BuildError::TextBody(_)));
    }

    #[test]
    fn merged_bodies_take_what_is_not_a_parameter() {
        let mut operation =
            op(vec![PathPart::Literal("/x".into())], vec![param("q", Location::Query, Style::Form, true)]);
        operation.body =
            Some(Body { media_type: "application/json".into(), json: true, shape: BodyShape::Merged, required: false });
        let built =
            prepare(&operation, &input(json!({"q": 1, "title": "t", "n": 2})), &CallContext::default()).expect("b");
        assert_eq!(built.path_and_query, "/x?q=1");
        let (content_type, bytes) = built.body.expect("a body");
        assert_eq!(content_type, "application/json");
        assert_eq!(serde_json::from_slice::<Value>(&bytes).expect("json"), json!({"title": "t", "n": 2}));
        assert!(prepare(&operation, &input(json!({"q": 1})), &CallContext::default()).expect("no body").body.is_none());
    }
}
