//! The two eras of MCP the endpoint serves side by side, named by the
//! revision that began each. (Its own module: the envelope checks and the
//! errors both speak of it, and neither imports the other's.)

/// How a request speaks MCP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Era {
    /// 2025-11-25 and before (2025-06-18, 2025-03-26): `initialize`, then a
    /// session.
    R2025_11_25,
    /// 2026-07-28: no handshake; every request carries its version and the
    /// client's capabilities.
    R2026_07_28,
}
