//! `[mcp]`: the MCP endpoint at `/mcp`.

use serde::Deserialize;

use super::OriginPattern;

/// `[mcp]`: the MCP endpoint.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// The older name of `[server] allowed_origins`, still accepted: it
    /// applies to every data-plane route when that is not set.
    pub allowed_origins: Option<Vec<OriginPattern>>,
    /// The most event streams (`subscriptions/listen`, `GET /mcp`) open at
    /// once, in all.
    pub max_streams: usize,
    /// The most event streams one authenticated caller may hold open.
    pub max_streams_per_caller: usize,
    /// What `tools/list` gives MCP clients.
    pub tool_listing: ToolListing,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            allowed_origins: None,
            max_streams: 1000,
            max_streams_per_caller: 8,
            tool_listing: ToolListing::All,
        }
    }
}

/// `[mcp] tool_listing`: what `tools/list` on `/mcp` gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolListing {
    /// Every tool the caller may see (`"all"`).
    #[default]
    All,
    /// A few fixed meta-tools (`search_tools`, `describe_tool`) in place of
    /// the catalog; `tools/call` still takes every tool the caller may see
    /// (`"search"`).
    Search,
}
