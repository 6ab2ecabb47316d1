//! `[server]`: the listeners, request bounds, and the browser (Origin and
//! Host) policy's settings.

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::{Dur, EndpointUrl, SecretRef};

/// `[server]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The OTC front: GET /health, GET /tools, POST /tools/call and /call.
    /// Port 0 picks a free port; the chosen one is printed at start.
    pub listen: String,
    /// GET /metrics and GET /status. Port 0 picks a free port.
    pub admin_listen: String,
    /// Larger request bodies get 413.
    pub max_body_bytes: usize,
    /// Worker threads of the data plane; 0 means one per CPU.
    pub threads: usize,
    /// Larger request headers (all names and values together) get 431.
    pub max_header_bytes: usize,
    /// Deeper JSON nesting in a request body gets 400 (checked before parsing,
    /// so a hostile body cannot exhaust the stack).
    pub max_json_depth: usize,
    /// The longest a client may take to send a request body.
    pub body_timeout: Dur,
    /// The most requests served at once; more get 503 with `Retry-After`
    /// (a bound on the memory and upstream connections a burst can take).
    pub max_in_flight: usize,
    /// On SIGTERM: how long in-flight calls may take to finish before the
    /// gateway exits anyway. It stops accepting at once, and exits as soon
    /// as nothing is in flight.
    pub shutdown_timeout: Dur,
    /// The longest a client may take to send a whole request head, from its
    /// first byte (nginx's `client_header_timeout`); then 408 and close.
    pub header_timeout: Dur,
    /// The most client connections open at once. A connection over it
    /// closes the oldest one that is not running a request (idle, or
    /// still sending a head or a body), so slow clients cannot crowd out
    /// the ones that send whole requests.
    pub max_connections: usize,
    /// Browser origins any data-plane route serves (a request with another
    /// `Origin` gets 403; one without `Origin` is not from a browser and is
    /// served). `scheme://host` allows every port, `scheme://host:port`
    /// one, `"*"` any origin. Default: `[mcp] allowed_origins` when set,
    /// else localhost, 127.0.0.1 and `[::1]` over http and https.
    pub allowed_origins: Option<Vec<OriginPattern>>,
    /// `Host` names (or addresses) the data plane answers besides loopback
    /// ones, port ignored; `"*"` any. Default: on a loopback `listen`, only
    /// loopback names and addresses (a DNS-rebinding page's Host is refused
    /// with 421); on any other address, every Host.
    pub allowed_hosts: Option<Vec<String>>,
    /// The base of every link the gateway hands out (OAuth challenges and
    /// the callback it registers with providers), e.g.
    /// `https://tools.example.com`. Default: `http://<listen>` as bound.
    pub public_url: Option<EndpointUrl>,
    /// The bearer token admin actions (`POST /reload`) require, as a secret
    /// reference. Without it the admin listener is read-only.
    pub admin_token: Option<Spanned<SecretRef>>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            admin_listen: "127.0.0.1:9464".into(),
            max_body_bytes: 1024 * 1024,
            threads: 0,
            max_header_bytes: 32 * 1024,
            max_json_depth: 64,
            body_timeout: Dur(Duration::from_secs(30)),
            shutdown_timeout: Dur(Duration::from_secs(30)),
            max_in_flight: 10_000,
            header_timeout: Dur(Duration::from_secs(60)),
            max_connections: 20_000,
            allowed_origins: None,
            allowed_hosts: None,
            public_url: None,
            admin_token: None,
        }
    }
}

/// One `allowed_origins` entry: a browser origin, or `"*"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginPattern {
    /// `"*"`: any origin.
    Any,
    /// `scheme://host[:port]`; no port means any port.
    Origin {
        /// `http` or `https`.
        scheme: String,
        /// The host, lower-cased (IPv6 in brackets).
        host: String,
        /// The port, when only one is allowed.
        port: Option<u16>,
    },
}

impl OriginPattern {
    /// localhost, 127.0.0.1 and `[::1]`, any port, http and https.
    pub fn loopback() -> Vec<OriginPattern> {
        let local = ["localhost", "127.0.0.1", "[::1]"];
        ["http", "https"]
            .into_iter()
            .flat_map(|scheme| {
                local.map(|host| OriginPattern::Origin { scheme: scheme.into(), host: host.into(), port: None })
            })
            .collect()
    }

    /// `scheme://host[:port]` with nothing after it (a trailing `/`
    /// tolerated), as a browser sends it in `Origin`.
    pub fn parse(text: &str) -> Option<OriginPattern> {
        let uri: http::Uri = text.parse().ok()?;
        let scheme = uri.scheme_str()?.to_ascii_lowercase();
        if !matches!(scheme.as_str(), "http" | "https") || uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return None;
        }
        let host = uri.host()?.to_ascii_lowercase();
        Some(OriginPattern::Origin { scheme, host, port: uri.port_u16() })
    }

    /// Whether this pattern admits `origin` (a parsed `Origin` header).
    pub fn allows(&self, origin: &OriginPattern) -> bool {
        match (self, origin) {
            (OriginPattern::Any, _) => true,
            (OriginPattern::Origin { scheme, host, port }, OriginPattern::Origin { scheme: s, host: h, port: p }) => {
                scheme == s && host == h && (port.is_none() || port == p)
            }
            (OriginPattern::Origin { .. }, OriginPattern::Any) => false,
        }
    }
}

impl<'de> Deserialize<'de> for OriginPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text == "*" {
            return Ok(OriginPattern::Any);
        }
        OriginPattern::parse(&text).ok_or_else(|| {
            D::Error::custom(format!(
                "invalid origin {text:?}: write scheme://host or scheme://host:port (http or https), or \"*\""
            ))
        })
    }
}
