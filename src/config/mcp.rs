//! `[mcp]`: the MCP endpoint at `/mcp`.

use serde::Deserialize;

use super::OriginPattern;

/// `[mcp]`: the MCP endpoint.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// The older name of `[server] allowed_origins`, still accepted: it
    /// applies to every data-plane route when that is not set.
    pub allowed_origins: Option<Vec<OriginPattern>>,
    /// What `tools/list` gives MCP clients.
    pub tool_listing: ToolListing,
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
