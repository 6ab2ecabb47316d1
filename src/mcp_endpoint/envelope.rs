//! Which era a request is in, and the checks a modern (2026-07-28) request
//! must pass before its method runs: its `_meta`, then the headers that
//! mirror the body (`MCP-Protocol-Version`, `Mcp-Method`, `Mcp-Name`).
//!
//! A request is modern when its `_meta` names a protocol version or its
//! `MCP-Protocol-Version` header names a modern one; anything else is served
//! as before 2026-07-28 (`initialize`, sessions).

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::era::Era;
use super::error::RpcError;
use super::McpHead;
use crate::mcp::v2026_07_28::{
    decode_header_value, is_2026_07_28_revision, name_field, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION,
    REVISIONS_2026_07_28,
};
use crate::mcp::{PROTOCOL_VERSIONS, PROTOCOL_VERSION_HEADER};

/// What a modern request's `_meta` declares.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Envelope {
    /// Whether the client's capabilities for this request take URL-mode
    /// elicitations.
    url_elicitation: bool,
}

impl Envelope {
    /// Whether the client declared URL-mode elicitation.
    pub(crate) fn url_elicitation(&self) -> bool {
        self.url_elicitation
    }
}

/// What the era and the checks read of a request's `params._meta`: made
/// from a `Value` ([`Meta::of_value`]), or by the call reader without one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Meta<'m> {
    /// Whether `_meta` is an object.
    pub object: bool,
    /// Whether it has a protocol version member, of whatever type.
    pub declares_version: bool,
    /// That member, when it is a string.
    pub version: Option<Cow<'m, str>>,
    /// The client's capabilities, when an object.
    pub capabilities: Option<Cow<'m, Map<String, Value>>>,
}

impl<'m> Meta<'m> {
    /// What a `_meta` value (`None`: absent) holds.
    pub(crate) fn of_value(meta: Option<&'m Value>) -> Meta<'m> {
        let Some(meta) = meta.and_then(Value::as_object) else { return Meta::default() };
        let version = meta.get(META_PROTOCOL_VERSION);
        Meta {
            object: true,
            declares_version: version.is_some(),
            version: version.and_then(Value::as_str).map(Cow::Borrowed),
            capabilities: meta.get(META_CLIENT_CAPABILITIES).and_then(Value::as_object).map(Cow::Borrowed),
        }
    }

    /// The same, owning its text.
    pub(crate) fn into_owned(self) -> Meta<'static> {
        Meta {
            version: self.version.map(|v| Cow::Owned(v.into_owned())),
            capabilities: self.capabilities.map(|c| Cow::Owned(c.into_owned())),
            ..self
        }
    }
}

/// Whether client capabilities declare URL-mode elicitation.
fn url_elicitation(capabilities: &Map<String, Value>) -> bool {
    capabilities.get("elicitation").and_then(|e| e.get("url")).is_some_and(Value::is_object)
}

/// The request's `params._meta`, when there is one.
pub(crate) fn meta(params: &Value) -> Option<&Value> {
    params.get("_meta")
}

/// The era of a request with these headers and `params._meta`.
pub(crate) fn era_of(head: &McpHead<'_>, meta: &Meta<'_>) -> Era {
    let declares_version = meta.declares_version;
    let header_2026_07_28 = head.protocol_version.is_some_and(|v| is_one_of(v, &REVISIONS_2026_07_28));
    if declares_version || header_2026_07_28 {
        Era::R2026_07_28
    } else {
        Era::R2025_11_25
    }
}

/// A legacy request's `MCP-Protocol-Version`, when it sends one, must be a
/// revision the gateway speaks.
pub(crate) fn check_2025_11_25(head: &McpHead<'_>) -> Result<(), RpcError> {
    match head.protocol_version {
        None => Ok(()),
        Some(raw) if is_one_of(raw, &PROTOCOL_VERSIONS) => Ok(()),
        Some(raw) => Err(RpcError::UnsupportedVersion { requested: String::from_utf8_lossy(raw).trim().to_owned() }),
    }
}

/// Whether a header value, whitespace around it aside, is one of `versions`
/// (compared as bytes: a value that is not UTF-8 is none of them).
fn is_one_of(value: &[u8], versions: &[&str]) -> bool {
    let value = value.trim_ascii();
    versions.iter().any(|version| version.as_bytes() == value)
}

/// Checks a modern request in the order the spec's errors need: a
/// malformed `_meta` is -32602 whatever the headers say, a header that
/// disagrees with the body is -32020, and only a version both agree on can
/// be unsupported (-32022). `meta` is the request's `params._meta`, `name`
/// the body's value of the field `Mcp-Name` mirrors ([`name_field`]), when
/// it is a string.
pub(crate) fn check_2026_07_28(
    head: &McpHead<'_>,
    method: &str,
    meta: &Meta<'_>,
    name: Option<&str>,
) -> Result<Envelope, RpcError> {
    if !meta.object {
        return Err(RpcError::InvalidEnvelope("a 2026-07-28 request must carry `_meta` in its params".into()));
    }
    let Some(version) = meta.version.as_deref() else {
        return Err(RpcError::InvalidEnvelope(format!("`_meta` must name `{META_PROTOCOL_VERSION}` as a string")));
    };
    let Some(capabilities) = meta.capabilities.as_deref() else {
        return Err(RpcError::InvalidEnvelope(format!("`_meta` must carry `{META_CLIENT_CAPABILITIES}` as an object")));
    };
    if head.duplicated {
        return Err(RpcError::HeaderMismatch(
            "MCP-Protocol-Version, Mcp-Method and Mcp-Name may each come once".into(),
        ));
    }
    match head.protocol_version.map(<[u8]>::trim_ascii) {
        None => return Err(RpcError::HeaderMismatch(format!("no {PROTOCOL_VERSION_HEADER} header"))),
        Some(header) if header != version.as_bytes() => {
            return Err(RpcError::HeaderMismatch(format!(
                "{PROTOCOL_VERSION_HEADER} header {:?} does not match the body's {version:?}",
                String::from_utf8_lossy(header)
            )))
        }
        Some(_) => {}
    }
    if !is_2026_07_28_revision(version) {
        return Err(RpcError::UnsupportedVersion { requested: version.to_owned() });
    }
    match head.method.map(<[u8]>::trim_ascii) {
        None => return Err(RpcError::HeaderMismatch("no Mcp-Method header".into())),
        // Values are case-sensitive: `TOOLS/LIST` is not `tools/list`.
        Some(header) if header != method.as_bytes() => {
            return Err(RpcError::HeaderMismatch(format!(
                "Mcp-Method header {:?} does not match the body's method {method:?}",
                String::from_utf8_lossy(header)
            )))
        }
        Some(_) => {}
    }
    check_name(head, method, name)?;
    Ok(Envelope { url_elicitation: url_elicitation(capabilities) })
}

/// The body's value of the field `Mcp-Name` mirrors for `method`, when it
/// is a string.
pub(crate) fn body_name<'p>(method: &str, params: &'p Value) -> Option<&'p str> {
    name_field(method).and_then(|field| params.get(field)).and_then(Value::as_str)
}

/// `Mcp-Name` against `params.name` (or `params.uri`): present exactly when
/// the body has the value, and the same once decoded.
fn check_name(head: &McpHead<'_>, method: &str, body: Option<&str>) -> Result<(), RpcError> {
    match (head.name, body) {
        (None, None) => Ok(()),
        (None, Some(_)) => Err(RpcError::HeaderMismatch("no Mcp-Name header".into())),
        (Some(_), None) => Err(RpcError::HeaderMismatch(format!("Mcp-Name header with no name in a {method} body"))),
        // The name as it is, as clients mostly send it: nothing to decode.
        (Some(header), Some(body)) if header.trim_ascii() == body.as_bytes() && !body.starts_with("=?base64?") => {
            Ok(())
        }
        (Some(header), Some(body)) => match decode_header_value(header) {
            Some(decoded) if decoded == body => Ok(()),
            Some(decoded) => {
                Err(RpcError::HeaderMismatch(format!("Mcp-Name header {decoded:?} does not match the body's {body:?}")))
            }
            None => Err(RpcError::HeaderMismatch("Mcp-Name header is not valid UTF-8 or Base64".into())),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn head<'a>(version: Option<&'a str>, method: Option<&'a str>, name: Option<&'a str>) -> McpHead<'a> {
        McpHead {
            protocol_version: version.map(str::as_bytes),
            method: method.map(str::as_bytes),
            name: name.map(str::as_bytes),
            ..McpHead::default()
        }
    }

    fn params(version: &str) -> Value {
        json!({"name": "t", "_meta": {META_PROTOCOL_VERSION: version, META_CLIENT_CAPABILITIES: {}}})
    }

    /// `check_2026_07_28` on a request with these params.
    fn check(head: &McpHead<'_>, method: &str, params: &Value) -> Result<Envelope, RpcError> {
        check_2026_07_28(head, method, &Meta::of_value(meta(params)), body_name(method, params))
    }

    fn code(result: Result<Envelope, RpcError>) -> &'static str {
        match result {
            Ok(_) => "ok",
            Err(RpcError::InvalidEnvelope(_)) => "-32602",
            Err(RpcError::HeaderMismatch(_)) => "-32020",
            Err(RpcError::UnsupportedVersion { .. }) => "-32022",
            Err(_) => "other",
        }
    }

    #[test]
    fn the_era_follows_meta_or_a_modern_header() {
        let none = Meta::default();
        assert_eq!(era_of(&head(None, None, None), &none), Era::R2025_11_25);
        assert_eq!(era_of(&head(Some("2025-11-25"), None, None), &none), Era::R2025_11_25);
        assert_eq!(era_of(&head(Some("2026-07-28"), None, None), &none), Era::R2026_07_28);
        assert_eq!(era_of(&head(None, None, None), &Meta::of_value(meta(&params("v9")))), Era::R2026_07_28);
        let null_version = json!({"_meta": {META_PROTOCOL_VERSION: null}});
        assert_eq!(era_of(&head(None, None, None), &Meta::of_value(meta(&null_version))), Era::R2026_07_28);
    }

    #[test]
    fn header_versions_are_compared_whitespace_aside() {
        let ok_2025_11_25 =
            |v: &[u8]| check_2025_11_25(&McpHead { protocol_version: Some(v), ..McpHead::default() }).is_ok();
        assert!(ok_2025_11_25(b"2025-11-25") && ok_2025_11_25(b" 2025-06-18\t") && ok_2025_11_25(b"2025-03-26"));
        for refused in [&b"2026-07-28"[..], b"2025-11-2", b"2025-11-25x", b"\xff2025-11-25", b""] {
            assert!(!ok_2025_11_25(refused), "{refused:?}");
        }
        let era = |v: &'static str| era_of(&head(Some(v), None, None), &Meta::default());
        assert_eq!(era(" 2026-07-28 "), Era::R2026_07_28);
        assert_eq!(era("2026-07-28x"), Era::R2025_11_25);
    }

    #[test]
    fn modern_requests_are_checked_in_order() {
        let ok = head(Some("2026-07-28"), Some("tools/call"), Some(" t "));
        assert_eq!(code(check(&ok, "tools/call", &params("2026-07-28"))), "ok");
        assert_eq!(code(check(&ok, "tools/call", &json!({"name": "t"}))), "-32602");
        let no_caps = json!({"name": "t", "_meta": {META_PROTOCOL_VERSION: "2026-07-28"}});
        assert_eq!(code(check(&ok, "tools/call", &no_caps)), "-32602");
        let v9 = head(Some("v9"), Some("tools/call"), Some("t"));
        assert_eq!(code(check(&v9, "tools/call", &params("v9"))), "-32022");
        assert_eq!(code(check(&ok, "tools/call", &params("v9"))), "-32020", "header and body disagree");
        let cases = [
            (head(None, Some("tools/call"), Some("t")), "no version header"),
            (head(Some("2026-07-28"), None, Some("t")), "no method header"),
            (head(Some("2026-07-28"), Some("TOOLS/CALL"), Some("t")), "case differs"),
            (head(Some("2026-07-28"), Some("tools/call"), None), "no name header"),
            (head(Some("2026-07-28"), Some("tools/call"), Some("u")), "another name"),
        ];
        for (head, why) in cases {
            assert_eq!(code(check(&head, "tools/call", &params("2026-07-28"))), "-32020", "{why}");
        }
        let encoded = head(Some("2026-07-28"), Some("tools/call"), Some("=?base64?dA==?="));
        assert_eq!(code(check(&encoded, "tools/call", &params("2026-07-28"))), "ok");
        let listing = head(Some("2026-07-28"), Some("tools/list"), Some("t"));
        assert_eq!(code(check(&listing, "tools/list", &params("2026-07-28"))), "-32020", "a name on a list");
    }
}
