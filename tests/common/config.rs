//! gateway.toml: building a config for a test.

use super::*;

/// Builds a gateway.toml for tests: both listeners on port 0, catalog polled
/// every 200ms with a 1s fetch timeout.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    max_body_bytes: Option<usize>,
    server: Vec<String>,
    catalog: Vec<String>,
    upstreams: Vec<String>,
    extra: Vec<String>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl GatewayConfig {
    /// No upstreams yet.
    pub fn new() -> GatewayConfig {
        GatewayConfig {
            max_body_bytes: None,
            server: Vec::new(),
            catalog: Vec::new(),
            upstreams: Vec::new(),
            extra: Vec::new(),
        }
    }

    /// Sets `[server] max_body_bytes`.
    pub fn max_body_bytes(mut self, n: usize) -> Self {
        self.max_body_bytes = Some(n);
        self
    }

    /// Adds a key line to `[catalog]` (`pin = "record"`).
    pub fn catalog_line(mut self, line: &str) -> Self {
        self.catalog.push(line.to_owned());
        self
    }

    /// Adds a key line to `[server]` (`public_url = "…"`).
    pub fn server_line(mut self, line: &str) -> Self {
        self.server.push(line.to_owned());
        self
    }

    /// Adds an OTC upstream.
    pub fn upstream(self, name: &str, url: &str) -> Self {
        self.upstream_with(name, url, "")
    }

    /// Adds an OTC upstream with extra key lines (`priority = 5`, `call_timeout = "300ms"`, ...).
    pub fn upstream_with(mut self, name: &str, url: &str, extra: &str) -> Self {
        let mut s = format!("[[upstreams]]\nname = \"{name}\"\nurl = \"{url}\"\nprotocol = \"otc\"\n");
        for line in extra.lines().map(str::trim).filter(|l| !l.is_empty()) {
            s.push_str(line);
            s.push('\n');
        }
        self.upstreams.push(s);
        self
    }

    /// Appends raw TOML after the upstreams.
    pub fn raw(mut self, toml: &str) -> Self {
        self.extra.push(toml.to_owned());
        self
    }

    /// The TOML text.
    pub fn toml(&self) -> String {
        let mut s = String::from("[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n");
        if let Some(n) = self.max_body_bytes {
            s.push_str(&format!("max_body_bytes = {n}\n"));
        }
        for line in &self.server {
            s.push_str(line);
            s.push('\n');
        }
        s.push_str("\n[catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n");
        for line in &self.catalog {
            s.push_str(line);
            s.push('\n');
        }
        for u in &self.upstreams {
            s.push('\n');
            s.push_str(u);
        }
        for e in &self.extra {
            s.push('\n');
            s.push_str(e);
        }
        s
    }

    /// Starts a gateway with this config.
    pub async fn start(&self) -> Gateway {
        Gateway::start(&self.toml()).await
    }

    /// Starts a gateway with this config and extra environment variables.
    pub async fn start_with_env(&self, env: &[(&str, &str)]) -> Gateway {
        Gateway::start_with_env(&self.toml(), env).await
    }
}
