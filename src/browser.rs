//! One browser policy for every route, the admin listener's included:
//! which `Origin`s and which `Host`s the gateway answers.
//!
//! A web page the gateway's user visits can make their browser send a
//! request to the gateway: a "simple" cross-site POST (`Content-Type:
//! text/plain`) needs no preflight, and the upstream would receive the
//! secrets the gateway injects. Browsers always send `Origin` on such
//! requests, so a request whose `Origin` is not allowed is refused (403)
//! before its credentials or body are read; a request without `Origin` is
//! not from a browser and is served.
//!
//! DNS rebinding gets around `Origin`: the attacker's name resolves to
//! 127.0.0.1, and the page is then same-origin with the gateway. Its `Host`
//! is still the attacker's name, so a gateway listening on a loopback
//! address answers only loopback `Host`s (and `server.allowed_hosts`),
//! with 421 otherwise. A gateway on a public address is reached by names
//! nobody can list in advance and accepts any `Host` unless configured.

use std::net::IpAddr;

use crate::config::{listens_on_loopback, Config, OriginPattern};

/// Why the browser policy refused a request (the front maps it to 403 or
/// 421 in `error.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BrowserRefusal {
    /// An `Origin` not in `allowed_origins`; `mcp` when the route was
    /// `/mcp`, which answers in JSON-RPC.
    #[error("Origin not allowed")]
    ForbiddenOrigin {
        /// Whether the route was `/mcp`.
        mcp: bool,
    },
    /// A `Host` this gateway does not answer.
    #[error("Host not served by this gateway")]
    MisdirectedHost,
}

/// The compiled `allowed_origins` and `allowed_hosts` of one config.
#[derive(Debug, Clone)]
pub struct BrowserPolicy {
    origins: Vec<OriginPattern>,
    hosts: HostRule,
}

/// Which `Host` values are answered.
#[derive(Debug, Clone)]
enum HostRule {
    /// Every one.
    Any,
    /// Loopback names and addresses (when `loopback`) and these names,
    /// lower-cased, without port.
    Only { loopback: bool, names: Vec<String> },
}

impl BrowserPolicy {
    /// The policy `config` asks for (see `ServerConfig::allowed_origins`
    /// and `allowed_hosts`).
    pub fn new(config: &Config) -> BrowserPolicy {
        BrowserPolicy::for_listener(config, &config.server.listen)
    }

    /// The same policy for the admin listener: its `Host`s judged by
    /// `admin_listen` (a DNS-rebinding page must not read `/status`).
    pub fn for_admin(config: &Config) -> BrowserPolicy {
        BrowserPolicy::for_listener(config, &config.server.admin_listen)
    }

    fn for_listener(config: &Config, listen: &str) -> BrowserPolicy {
        let loopback = listens_on_loopback(listen);
        let hosts = match &config.server.allowed_hosts {
            Some(names) if names.iter().any(|n| n == "*") => HostRule::Any,
            Some(names) => HostRule::Only {
                loopback,
                names: names.iter().map(|n| host_name(n.as_bytes()).unwrap_or(n).to_ascii_lowercase()).collect(),
            },
            None if loopback => HostRule::Only { loopback, names: Vec::new() },
            None => HostRule::Any,
        };
        BrowserPolicy { origins: config.allowed_origins(), hosts }
    }

    /// Refuses an `Origin` header that is not allowed; `mcp` shapes the
    /// refusal as a JSON-RPC error for the `/mcp` route.
    pub fn check_origin(&self, origin: Option<&[u8]>, mcp: bool) -> Result<(), BrowserRefusal> {
        let Some(origin) = origin else { return Ok(()) };
        let parsed = std::str::from_utf8(origin).ok().and_then(OriginPattern::parse);
        let allowed = match &parsed {
            Some(origin) => self.origins.iter().any(|p| p.allows(origin)),
            // `Origin: null` (sandboxed pages, file: URLs) only under "*".
            None => self.origins.contains(&OriginPattern::Any),
        };
        if allowed {
            return Ok(());
        }
        tracing::info!(origin = %String::from_utf8_lossy(&origin[..origin.len().min(200)]), "request refused: Origin not allowed");
        Err(BrowserRefusal::ForbiddenOrigin { mcp })
    }

    /// Refuses a `Host` (or request-target authority) the gateway does not
    /// answer. A request without one (HTTP/1.0) has nothing to check.
    pub fn check_host(&self, host: Option<&[u8]>) -> Result<(), BrowserRefusal> {
        let (HostRule::Only { loopback, names }, Some(host)) = (&self.hosts, host) else { return Ok(()) };
        let Some(name) = host_name(host) else { return Err(BrowserRefusal::MisdirectedHost) };
        if (*loopback && is_loopback_name(name)) || names.iter().any(|n| n.eq_ignore_ascii_case(name)) {
            return Ok(());
        }
        tracing::info!(host = %String::from_utf8_lossy(&host[..host.len().min(200)]), "request refused: Host not served");
        Err(BrowserRefusal::MisdirectedHost)
    }
}

/// The host of a `Host` value, without its port: `name`, `1.2.3.4`, or
/// `[v6]` with its brackets. `None` when it is not text of that form.
fn host_name(value: &[u8]) -> Option<&str> {
    let value = std::str::from_utf8(value).ok()?.trim();
    let host = if value.starts_with('[') {
        &value[..value.find(']')? + 1]
    } else {
        match value.rsplit_once(':') {
            Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
            Some(_) => return None,
            None => value,
        }
    };
    (!host.is_empty()).then_some(host)
}

/// `localhost`, a name under `.localhost` (RFC 6761: never resolved by
/// DNS), or a loopback address. (Without allocating: it runs per call.)
fn is_loopback_name(host: &str) -> bool {
    let bytes = host.as_bytes();
    let suffix = b".localhost";
    if host.eq_ignore_ascii_case("localhost")
        || (bytes.len() > suffix.len() && bytes[bytes.len() - suffix.len()..].eq_ignore_ascii_case(suffix))
    {
        return true;
    }
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    bare.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(toml: &str) -> BrowserPolicy {
        BrowserPolicy::new(&Config::parse(toml, "test").expect("valid config"))
    }

    fn origin_ok(policy: &BrowserPolicy, origin: &str) -> bool {
        policy.check_origin(Some(origin.as_bytes()), false).is_ok()
    }

    #[test]
    fn only_allowed_origins_pass() {
        let default = policy("");
        assert!(default.check_origin(None, false).is_ok(), "no Origin: not a browser");
        for ok in ["http://localhost:3000", "http://127.0.0.1", "https://[::1]:8443", "http://LOCALHOST:1"] {
            assert!(origin_ok(&default, ok), "{ok}");
        }
        for bad in ["http://evil.example.com", "null", "http://localhost.evil.com", "ftp://localhost", "\u{ff}"] {
            assert!(!origin_ok(&default, bad), "{bad}");
        }
        let one_port = policy("[server]\nallowed_origins = [\"https://app.example.com:8443\"]\n");
        assert!(origin_ok(&one_port, "https://app.example.com:8443"));
        assert!(!origin_ok(&one_port, "https://app.example.com"));
        assert!(!origin_ok(&one_port, "http://localhost"));
        assert!(origin_ok(&policy("[server]\nallowed_origins = [\"*\"]\n"), "null"));
        // The older [mcp] key applies to every route when [server]'s is not set.
        let legacy = policy("[mcp]\nallowed_origins = [\"https://app.example.com\"]\n");
        assert!(origin_ok(&legacy, "https://app.example.com"));
        assert!(!origin_ok(&legacy, "http://localhost"));
        let both = policy(
            "[server]\nallowed_origins = [\"https://a.example\"]\n[mcp]\nallowed_origins = [\"https://b.example\"]\n",
        );
        assert!(origin_ok(&both, "https://a.example") && !origin_ok(&both, "https://b.example"), "[server] wins");
        for bad in ["app.example.com", "http://a.com/path"] {
            assert!(Config::parse(&format!("[server]\nallowed_origins = [\"{bad}\"]\n"), "test").is_err(), "{bad}");
        }
    }

    #[test]
    fn a_loopback_gateway_answers_loopback_hosts_only() {
        let local = policy("[server]\nlisten = \"127.0.0.1:8080\"\n");
        for ok in ["127.0.0.1:8080", "localhost", "LocalHost:1", "[::1]:8080", "127.1.2.3", "app.localhost:80"] {
            assert!(local.check_host(Some(ok.as_bytes())).is_ok(), "{ok}");
        }
        for bad in ["evil.example.com", "evil.example.com:8080", "localhost.evil.com", "10.0.0.1", "", "a:b", "[::1"] {
            assert!(matches!(local.check_host(Some(bad.as_bytes())), Err(BrowserRefusal::MisdirectedHost)), "{bad}");
        }
        assert!(local.check_host(None).is_ok(), "HTTP/1.0 without Host");
        let configured = policy("[server]\nlisten = \"127.0.0.1:8080\"\nallowed_hosts = [\"Tools.Internal\"]\n");
        assert!(configured.check_host(Some(b"tools.internal:8080")).is_ok());
        assert!(configured.check_host(Some(b"localhost")).is_ok(), "loopback names stay allowed");
        assert!(configured.check_host(Some(b"other.internal")).is_err());
        let public = policy("[server]\nlisten = \"0.0.0.0:8080\"\n");
        assert!(public.check_host(Some(b"anything.example")).is_ok());
        let restricted = policy("[server]\nlisten = \"0.0.0.0:8080\"\nallowed_hosts = [\"tools.example.com\"]\n");
        assert!(restricted.check_host(Some(b"tools.example.com")).is_ok());
        assert!(restricted.check_host(Some(b"127.0.0.1")).is_err());
        assert!(policy("[server]\nallowed_hosts = [\"*\"]\n").check_host(Some(b"x.example")).is_ok());
    }
}
