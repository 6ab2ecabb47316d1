//! tests/peers/mcp_server.py, the official Python SDK's MCP server, as an
//! upstream: started on a loopback port in one MCP era or both, restarted,
//! told to add or redescribe a tool at run time (it then tells its
//! listening clients).

use super::*;

/// The MCP revisions tests/peers/mcp_server.py answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28 only: no `initialize`, no session.
    R2026_07_28,
    /// 2025-11-25 and before only: `initialize` and a session.
    R2025_11_25,
    /// Both, the SDK's default.
    Dual,
}

impl Era {
    pub fn arg(self) -> &'static str {
        match self {
            Era::R2026_07_28 => "modern",
            Era::R2025_11_25 => "legacy",
            Era::Dual => "dual",
        }
    }

    /// The revision the gateway should speak to such a server in.
    pub fn revision(self) -> &'static str {
        match self {
            Era::R2025_11_25 => "2025-11-25",
            Era::R2026_07_28 | Era::Dual => "2026-07-28",
        }
    }
}

/// tests/peers/mcp_server.py on a loopback port, killed on drop.
pub struct McpPeer {
    child: Option<Child>,
    /// Where it listens.
    pub addr: SocketAddr,
    json: bool,
    era: Era,
}

impl McpPeer {
    /// SSE replies (the SDK's default) or plain JSON replies; both eras.
    pub fn start(json: bool) -> McpPeer {
        McpPeer::start_in(Era::Dual, json)
    }

    /// A server of one era, or of both.
    pub fn start_in(era: Era, json: bool) -> McpPeer {
        let mut peer = McpPeer { child: None, addr: free_addr(), json, era };
        peer.restart();
        peer
    }

    /// Starts again on the same port as a server of `era`.
    pub fn restart_as(&mut self, era: Era) {
        self.era = era;
        self.restart();
    }

    /// Adds a tool at run time; the server tells its listening clients.
    pub async fn add_tool(&self, name: &str) {
        let body = Bytes::from(json!({"name": name}).to_string());
        let resp =
            send_with_headers(self.addr, "POST", "/test/add-tool", body, &[("content-type", "application/json")]).await;
        assert_eq!(resp.status, 200, "add-tool: {}", resp.text());
    }

    /// Gives one of its tools another description (a rug pull); the server
    /// tells its listening clients.
    pub async fn redescribe(&self, name: &str, description: &str) {
        self.redescribe_annotated(name, description, Value::Null).await;
    }

    /// As [`McpPeer::redescribe`], with MCP tool annotations
    /// (`{"destructiveHint": true}`).
    pub async fn redescribe_annotated(&self, name: &str, description: &str, annotations: Value) {
        let body = json!({"name": name, "description": description, "annotations": annotations});
        let body = Bytes::from(body.to_string());
        let headers = [("content-type", "application/json")];
        let resp = send_with_headers(self.addr, "POST", "/test/redescribe", body, &headers).await;
        assert_eq!(resp.status, 200, "redescribe: {}", resp.text());
    }

    /// The MCP endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts again on the same port: a new process that knows no session.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "restart() on a running peer");
        let mut cmd = Command::new(super::sdk_python());
        cmd.arg(peer_script("mcp_server.py")).arg(self.addr.port().to_string()).arg(self.era.arg());
        if self.json {
            cmd.arg("json");
        }
        let child =
            self.child.insert(cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start mcp_server.py"));
        let what = "mcp_server.py (is the `mcp` package installed?)";
        wait_listening(child, self.addr, what, Duration::from_secs(30), String::new);
    }
}

impl Drop for McpPeer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// An `[[upstreams]]` entry for an MCP server.
pub fn mcp_upstream(name: &str, url: &str, toolkit: &str, extra: &str) -> String {
    format!("[[upstreams]]\nname = \"{name}\"\nurl = \"{url}\"\nprotocol = \"mcp\"\ntoolkit = \"{toolkit}\"\nversion = \"1.0.0\"\n{extra}\n")
}

/// tests/peers/mcp_front_client.py (the official SDK's client) against the
/// MCP endpoint at `url` in `mode` (`legacy`, `auto`, `2026-07-28`): its
/// JSON report of what it listed, called and was asked.
pub async fn mcp_front_client(url: String, mode: &str, scenario: &Value) -> Value {
    let mut command = Command::new(super::sdk_python());
    command.arg(peer_script("mcp_front_client.py")).arg(url).arg(mode).arg(scenario.to_string());
    let output = tokio::task::spawn_blocking(move || command.output()).await.expect("join").expect("run the client");
    assert!(
        output.status.success(),
        "mcp_front_client.py ({mode}) failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("no JSON ({e}): {}", String::from_utf8_lossy(&output.stdout)))
}
