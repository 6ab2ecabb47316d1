//! MCP's own conformance suite (npm `@modelcontextprotocol/conformance`)
//! against this build, in both eras of MCP: `scripts/conformance.sh` runs
//! the server scenarios against `/mcp` (server-stateless, tools-list,
//! http-header-validation, caching and dns-rebinding-protection at MCP
//! 2026-07-28; server-initialize, server-session-lifecycle, ping, tools-list,
//! server-sse-multiple-streams and dns-rebinding-protection at 2025-11-25),
//! and the client scenarios against the gateway as an MCP client (tools_call
//! at 2026-07-28, initialize and tools_call at 2025-11-25).
//! The script installs the suite and Node 22 into `.conformance/` when they
//! are missing (scripts/test.sh does it first).

use std::path::PathBuf;
use std::process::Command;

#[test]
fn the_mcp_conformance_suite_passes() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new("bash")
        .arg(root.join("scripts/conformance.sh"))
        .env("OTC_GATEWAY_BIN", env!("CARGO_BIN_EXE_otc-gateway"))
        .current_dir(&root)
        .output()
        .expect("run scripts/conformance.sh");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "scripts/conformance.sh failed ({}):\n{stdout}\n{stderr}", output.status);
    assert!(stdout.contains("MCP conformance: all 14 scenarios passed"), "{stdout}\n{stderr}");
}
