//! `[catalog]` and `[[upstreams]]`: the tool servers, how each is reached and
//! polled, what it is granted, and the values their keys accept.

use std::fmt;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::{deserialize_duration, Dur, Grants, OperationPattern, SecretRef, SecurityMap, SpecLocation};

/// `[catalog]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CatalogConfig {
    /// How often each upstream's catalog is fetched.
    pub poll_interval: Dur,
    /// The longest one catalog fetch may take.
    pub request_timeout: Dur,
    /// The largest catalog body accepted from an upstream.
    pub max_catalog_bytes: usize,
    /// Up to this much is added to each wait between two fetches, at
    /// random, so that replicas started together do not poll in step.
    #[serde(deserialize_with = "deserialize_duration")]
    pub jitter: Duration,
    /// What happens when a tool's definition changes after clients saw it
    /// (docs/security.md, "Tool definitions are pinned").
    pub pin: Review,
    /// What happens to a definition the scan finds hidden instructions in.
    pub suspicious: Review,
}

impl Default for CatalogConfig {
    fn default() -> Self {
        CatalogConfig {
            poll_interval: Dur(Duration::from_secs(10)),
            request_timeout: Dur(Duration::from_secs(5)),
            max_catalog_bytes: 32 * 1024 * 1024,
            jitter: Duration::ZERO,
            pin: Review::Hold,
            suspicious: Review::Hold,
        }
    }
}

/// `[catalog] pin` and `suspicious`: what a changed (or flagged) tool
/// definition does before an operator has reviewed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Review {
    /// Clients keep what was approved (a flagged new tool is not served)
    /// until an operator approves the change.
    #[default]
    Hold,
    /// Served at once, and kept for review.
    Record,
    /// Nothing is pinned (or scanned).
    Off,
}

/// One `[[upstreams]]` entry. (Equality ignores where in the file it was.)
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// Unique, `[a-z0-9_-]+`; appears in metrics and /status.
    pub name: Spanned<UpstreamName>,
    /// Base URL. OTC: `/tools` and `/tools/call` are appended. MCP: the
    /// MCP endpoint itself (e.g. `http://127.0.0.1:8000/mcp`). OpenAPI: where
    /// every call goes (the operation's path appended), http or https.
    pub url: Spanned<UpstreamUrl>,
    /// `otc` (default), `mcp` or `openapi`.
    #[serde(default = "default_protocol")]
    pub protocol: Spanned<Protocol>,
    /// The higher wins when two upstreams serve the same tool id.
    #[serde(default)]
    pub priority: i64,
    /// The longest a tool call may take once sent.
    #[serde(default = "default_call_timeout")]
    pub call_timeout: Dur,
    /// The longest a connection to the upstream may take to open.
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout: Dur,
    /// Consecutive connection failures that open the upstream's circuit.
    #[serde(default = "default_circuit_failures")]
    pub circuit_failures: u32,
    /// How long an open circuit refuses calls before one probe is let through.
    #[serde(default = "default_circuit_cooldown")]
    pub circuit_cooldown: Dur,
    /// The toolkit for tools published with bare ids (no `Toolkit.` prefix).
    #[serde(default)]
    pub toolkit: Option<Toolkit>,
    /// The version for tools published without one.
    #[serde(default)]
    pub version: Option<ToolVersion>,
    /// Sent as `Authorization: Bearer <value>` on every catalog fetch and
    /// call to this upstream (a secret reference, without `{user_id}`).
    #[serde(default)]
    pub bearer_token: Option<Spanned<SecretRef>>,
    /// MCP only: an `[authorization.<provider>]` whose token for the calling
    /// user is sent as `Authorization: Bearer` on `tools/call` (instead of
    /// `bearer_token`); every tool of the upstream then requires it (and
    /// the upstream is granted it).
    #[serde(default)]
    pub user_token: Option<Spanned<String>>,
    /// The `[secrets]` ids this upstream's tools may receive (`["*"]`: all).
    /// None when absent: a tool declaring a secret its upstream was not
    /// granted cannot be called.
    #[serde(default)]
    pub secrets: Option<Spanned<Grants>>,
    /// The `[authorization.<provider>]`s whose user tokens this upstream's
    /// tools may receive (`["*"]`: all). None when absent.
    #[serde(default)]
    pub authorization: Option<Spanned<Grants>>,
    /// Toolkits reserved for this upstream: another upstream's tools in
    /// them are neither listed nor callable.
    #[serde(default)]
    pub toolkits: Vec<Spanned<Toolkit>>,
    /// OpenAPI only: where the document is (`https://…`, `file:/path`).
    #[serde(default)]
    pub spec: Option<Spanned<SpecLocation>>,
    /// OpenAPI only: the operations that become tools (all when absent).
    #[serde(default)]
    pub operations: Option<Spanned<Vec<OperationPattern>>>,
    /// OpenAPI only: operations left out, even when `operations` matches.
    #[serde(default)]
    pub exclude: Option<Spanned<Vec<OperationPattern>>>,
    /// OpenAPI only: what each security scheme of the document is given.
    #[serde(default)]
    pub security: Option<Spanned<SecurityMap>>,
}

impl UpstreamConfig {
    /// The secrets this upstream is granted.
    pub fn secret_grants(&self) -> Grants {
        self.secrets.as_ref().map(|g| g.get_ref().clone()).unwrap_or_default()
    }

    /// The providers this upstream is granted: `authorization`, and the
    /// `user_token` provider (sending it is what that key asks for).
    pub fn authorization_grants(&self) -> Grants {
        let mut grants = self.authorization.as_ref().map(|g| g.get_ref().clone()).unwrap_or_default();
        if let Some(provider) = &self.user_token {
            grants = match grants {
                Grants::Nothing => Grants::Only([provider.get_ref().clone()].into()),
                Grants::Only(mut ids) => {
                    ids.insert(provider.get_ref().clone());
                    Grants::Only(ids)
                }
                Grants::All => Grants::All,
            };
        }
        grants
    }
}

fn default_protocol() -> Spanned<Protocol> {
    Spanned::new(0..0, Protocol::Otc)
}

fn default_call_timeout() -> Dur {
    Dur(Duration::from_secs(30))
}

fn default_circuit_failures() -> u32 {
    5
}

fn default_circuit_cooldown() -> Dur {
    Dur(Duration::from_secs(5))
}

fn default_connect_timeout() -> Dur {
    Dur(Duration::from_secs(2))
}

/// The protocol an upstream speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// Open Tool Calling 1.0 (OXP): GET /tools, POST /tools/call.
    #[default]
    Otc,
    /// Model Context Protocol over streamable HTTP.
    Mcp,
    /// A REST API described by an OpenAPI 3.0 or 3.1 document.
    #[serde(rename = "openapi")]
    OpenApi,
}

/// An upstream name: `[a-z0-9_-]+`, so it is safe as a metrics label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamName(pub String);

impl<'de> Deserialize<'de> for UpstreamName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        let ok = !name.is_empty()
            && name.len() <= 64
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-');
        if !ok {
            return Err(D::Error::custom(format!("invalid upstream name {name:?}: use 1 to 64 of [a-z0-9_-]")));
        }
        Ok(UpstreamName(name))
    }
}

impl fmt::Display for UpstreamName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// An upstream's base URL: `http://host:port[/path]` (https only for
/// `openapi` upstreams, checked with the protocol), no trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl(pub String);

impl UpstreamUrl {
    /// Whether it is an `https://` URL.
    pub fn is_https(&self) -> bool {
        self.0.starts_with("https://")
    }
}

impl<'de> Deserialize<'de> for UpstreamUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let uri: http::Uri =
            text.parse().map_err(|e| D::Error::custom(format!("invalid upstream url {text:?}: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) {
            return Err(D::Error::custom(format!("upstream url {text:?} must start with http://")));
        }
        if uri.host().is_none() {
            return Err(D::Error::custom(format!("upstream url {text:?} has no host")));
        }
        if uri.query().is_some() {
            return Err(D::Error::custom(format!("upstream url {text:?} must not have a query")));
        }
        Ok(UpstreamUrl(text.trim_end_matches('/').to_owned()))
    }
}

/// A toolkit name, `[A-Za-z0-9_]+` as in tool ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Toolkit(pub String);

impl<'de> Deserialize<'de> for Toolkit {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(D::Error::custom(format!("invalid toolkit {text:?}: use [A-Za-z0-9_]+")));
        }
        Ok(Toolkit(text))
    }
}

/// A tool version, `x.y.z`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolVersion(pub String);

impl<'de> Deserialize<'de> for ToolVersion {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        // The catalog's tool-version grammar (`resolve::parse_tool_version`):
        // three fields of 1 to 18 decimal digits.
        let field = |f: &str| (1..=18).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit());
        if text.split('.').count() != 3 || !text.split('.').all(field) {
            return Err(D::Error::custom(format!("invalid version {text:?}: write x.y.z, e.g. \"1.0.0\"")));
        }
        Ok(ToolVersion(text))
    }
}
