//! The gateway as an OAuth 2.0 protected resource (`mode = "jwt"`): its
//! resource identifier (RFC 8707), the metadata document that tells clients
//! where to get a token for it (RFC 9728), and where that document is.
//!
//! The identifier is `[auth] resource`, else `<server.public_url>/mcp`: the
//! URL MCP clients connect to, which they send as the `resource` of their
//! token requests. `public_url` defaults to the address the data plane
//! bound, known only once it listens, so the resource of a generation is fixed
//! on first use ([`super::Authenticator::protected_resource`]).

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

/// The well-known path of protected resource metadata (RFC 9728 section 3).
pub const WELL_KNOWN: &str = "/.well-known/oauth-protected-resource";

/// The MCP endpoint's path, which the default resource identifier ends with.
const MCP_PATH: &str = "/mcp";

/// What `[auth]` says of the gateway as a protected resource.
#[derive(Debug, Clone, Default)]
pub(crate) struct ResourceSettings {
    /// `[auth] resource`, when set.
    pub resource: Option<String>,
    /// The issuer identifiers to advertise.
    pub authorization_servers: Vec<String>,
    /// `[auth] scopes_supported`, when set.
    pub scopes_supported: Option<Vec<String>>,
}

/// The gateway as a protected resource, under one generation's config.
#[derive(Debug)]
pub struct ProtectedResource {
    resource: String,
    metadata_url: Arc<str>,
    /// The path of `metadata_url`, served besides the two fixed ones.
    metadata_path: String,
    document: Bytes,
}

/// The RFC 9728 section 2 fields the gateway fills in.
#[derive(Serialize)]
struct Metadata<'a> {
    resource: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    authorization_servers: &'a [String],
    bearer_methods_supported: [&'static str; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    scopes_supported: Option<&'a [String]>,
}

impl ProtectedResource {
    /// The resource `settings` describe, its identifier defaulting to
    /// `<public_url>/mcp`.
    pub(crate) fn new(settings: &ResourceSettings, public_url: &str) -> ProtectedResource {
        // (RFC 8707 and MCP prefer the form without a trailing slash.)
        let resource = match &settings.resource {
            Some(configured) => configured.trim_end_matches('/').to_owned(),
            None => format!("{}{MCP_PATH}", public_url.trim_end_matches('/')),
        };
        let (origin, path) = split_origin(&resource);
        // RFC 9728 section 3.1: the well-known segment goes between the host
        // and the identifier's path.
        let metadata_path = format!("{WELL_KNOWN}{path}");
        let metadata_url = Arc::from(format!("{origin}{metadata_path}"));
        let document = serde_json::to_vec(&Metadata {
            resource: &resource,
            authorization_servers: &settings.authorization_servers,
            bearer_methods_supported: ["header"],
            scopes_supported: settings.scopes_supported.as_deref(),
        })
        // Serialising strings cannot fail.
        .unwrap_or_default();
        ProtectedResource { resource, metadata_url, metadata_path, document: Bytes::from(document) }
    }

    /// The resource identifier: what a token for it names in `aud`.
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// Where its metadata document is: named in every 401's challenge.
    pub fn metadata_url(&self) -> &Arc<str> {
        &self.metadata_url
    }

    /// The metadata document (JSON).
    pub fn document(&self) -> Bytes {
        self.document.clone()
    }

    /// Whether the gateway serves the metadata at `path`: the root form, the
    /// form for its `/mcp` endpoint, and the form for the resource
    /// identifier (the same, unless `[auth] resource` has another path).
    pub fn serves(&self, path: &str) -> bool {
        let Some(rest) = path.strip_prefix(WELL_KNOWN) else { return false };
        rest.is_empty() || rest == MCP_PATH || path == self.metadata_path
    }

    /// Whether `aud` (one audience of a token) names this resource. Scheme
    /// and host compare without case and one trailing slash is ignored (MCP
    /// asks servers to accept such variants of their canonical URI);
    /// anything else must be exactly the identifier.
    pub fn is_named_by(&self, aud: &str) -> bool {
        let (Some((scheme, rest)), Some((our_scheme, our_rest))) =
            (aud.split_once("://"), self.resource.split_once("://"))
        else {
            return false;
        };
        let ((host, path), (our_host, our_path)) = (split_path(rest), split_path(our_rest));
        let path = path.strip_suffix('/').unwrap_or(path);
        scheme.eq_ignore_ascii_case(our_scheme) && host.eq_ignore_ascii_case(our_host) && path == our_path
    }
}

/// `scheme://authority` and the path (with anything after it) of a URL.
fn split_origin(url: &str) -> (&str, &str) {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    let (_, path) = split_path(&url[after_scheme..]);
    url.split_at(url.len() - path.len())
}

/// The authority and the path (with anything after it) of what follows
/// `scheme://`.
fn split_path(rest: &str) -> (&str, &str) {
    rest.split_at(rest.find('/').unwrap_or(rest.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(resource: Option<&str>) -> ResourceSettings {
        ResourceSettings {
            resource: resource.map(str::to_owned),
            authorization_servers: vec!["https://auth.example.com".into()],
            scopes_supported: None,
        }
    }

    #[test]
    fn the_default_resource_is_the_mcp_endpoint_and_its_metadata_url_is_path_suffixed() {
        let r = ProtectedResource::new(&settings(None), "http://127.0.0.1:8080");
        assert_eq!(r.resource(), "http://127.0.0.1:8080/mcp");
        assert_eq!(&**r.metadata_url(), "http://127.0.0.1:8080/.well-known/oauth-protected-resource/mcp");
        let doc: serde_json::Value = serde_json::from_slice(&r.document()).expect("JSON");
        assert_eq!(
            doc,
            serde_json::json!({
                "resource": "http://127.0.0.1:8080/mcp",
                "authorization_servers": ["https://auth.example.com"],
                "bearer_methods_supported": ["header"],
            })
        );
        for path in [WELL_KNOWN, "/.well-known/oauth-protected-resource/mcp"] {
            assert!(r.serves(path), "{path}");
        }
        for path in ["/.well-known/oauth-protected-resource/", "/.well-known/oauth-protected-resourcex", "/mcp"] {
            assert!(!r.serves(path), "{path}");
        }
    }

    #[test]
    fn a_configured_resource_keeps_its_path_and_loses_a_trailing_slash() {
        let r = ProtectedResource::new(&settings(Some("https://tools.example.com/team/mcp/")), "http://127.0.0.1:1");
        assert_eq!(r.resource(), "https://tools.example.com/team/mcp");
        assert_eq!(&**r.metadata_url(), "https://tools.example.com/.well-known/oauth-protected-resource/team/mcp");
        assert!(r.serves("/.well-known/oauth-protected-resource/team/mcp"));
        assert!(r.serves("/.well-known/oauth-protected-resource/mcp"));
        let root = ProtectedResource::new(&settings(Some("https://tools.example.com")), "http://127.0.0.1:1");
        assert_eq!(&**root.metadata_url(), "https://tools.example.com/.well-known/oauth-protected-resource");
    }

    #[test]
    fn audiences_name_the_resource_up_to_case_of_scheme_and_host_and_a_trailing_slash() {
        let r = ProtectedResource::new(&settings(Some("https://tools.example.com/mcp")), "http://127.0.0.1:1");
        for ok in ["https://tools.example.com/mcp", "HTTPS://Tools.Example.com/mcp", "https://tools.example.com/mcp/"] {
            assert!(r.is_named_by(ok), "{ok}");
        }
        for other in [
            "https://tools.example.com/MCP",
            "https://tools.example.com/mcp2",
            "https://tools.example.com",
            "https://tools.example.com/mcp?x=1",
            "http://tools.example.com/mcp",
            "https://tools.example.com:8443/mcp",
            "https://evil.example.com/mcp",
            "tools.example.com/mcp",
            "otc-gateway",
            "",
        ] {
            assert!(!r.is_named_by(other), "{other}");
        }
    }
}
