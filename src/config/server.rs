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
    /// The admin listener: `/health` and `/metrics` for anyone, the console
    /// and every other read with `admin_token` (open without one only on
    /// a loopback address), actions with `admin_token`. Port 0 picks a free
    /// port.
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
    /// The bearer token, as a secret reference, that every admin route but
    /// `/health` and `/metrics` requires. Without it there are no admin
    /// actions, and a non-loopback admin listener serves only `/health` and
    /// `/metrics`.
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

impl ServerConfig {
    /// What the admin listener withholds for want of `admin_token`, with the
    /// line that ends it: `None` with a token, or on a loopback address
    /// (where only this host's own users reach it, so reads stay open).
    pub fn admin_without_token(&self) -> Option<String> {
        if self.admin_token.is_some() || listens_on_loopback(&self.admin_listen) {
            return None;
        }
        Some(format!(
            "server.admin_listen = {:?} is not a loopback address and [server] has no admin_token: the admin \
             listener serves only /health and /metrics; add `admin_token = \"env:OTC_ADMIN_TOKEN\"` to [server] \
             (and set OTC_ADMIN_TOKEN to a long random value) to read the rest with it",
            self.admin_listen
        ))
    }
}

/// Whether a listen address is a loopback one (`127.0.0.0/8`, `[::1]`) or
/// `localhost`: only this host reaches it. Anything else, `0.0.0.0` and host
/// names included, is not.
pub fn listens_on_loopback(listen: &str) -> bool {
    match listen.parse::<std::net::SocketAddr>() {
        Ok(addr) => addr.ip().is_loopback(),
        Err(_) => listen.rsplit_once(':').is_some_and(|(host, _)| host.eq_ignore_ascii_case("localhost")),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn server(admin_listen: &str, token: bool) -> ServerConfig {
        let mut text = format!("admin_listen = {admin_listen:?}\n");
        if token {
            text.push_str("admin_token = \"env:OTC_ADMIN_TOKEN\"\n");
        }
        toml::from_str(&text).expect("a [server] section")
    }

    #[test]
    fn only_loopback_admin_listeners_serve_reads_without_a_token() {
        for loopback in ["127.0.0.1:9464", "127.0.0.2:0", "[::1]:9464", "localhost:9464", "LOCALHOST:1"] {
            assert!(listens_on_loopback(loopback), "{loopback}");
            assert_eq!(server(loopback, false).admin_without_token(), None, "{loopback}");
        }
        for open in ["0.0.0.0:9464", "[::]:9464", "192.0.2.2:9464", "gateway.internal:9464", "localhost.evil:1"] {
            assert!(!listens_on_loopback(open), "{open}");
            let warning = server(open, false).admin_without_token().expect("a warning");
            assert!(warning.contains(open) && warning.contains("only /health and /metrics"), "{warning}");
            assert!(warning.contains("add `admin_token = \"env:OTC_ADMIN_TOKEN\"` to [server]"), "{warning}");
            assert_eq!(server(open, true).admin_without_token(), None, "{open} with a token");
        }
    }
}
