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
}
