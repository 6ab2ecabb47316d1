//! The integration-test harness: real tool servers on loopback, the real
//! `otc-gateway` binary in front of them, and a plain HTTP client to drive it.
//!
//! A test reads as a story:
//!
//! ```ignore
//! let calc = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
//! calc.on_call(add);
//! let gw = GatewayConfig::new().upstream("calc", &calc.url()).start().await;
//! gw.wait_for_tool("Calculator.Add@1.0.0").await;
//! let resp = gw.call("Calculator.Add@1.0.0", json!({"a": 1, "b": 2})).await;
//! ```
//!
//! Every test starts its own servers and its own gateway on port 0, so tests
//! are independent and may run in parallel.
//!
//! One file per part: `catalogs.rs` (tool definitions and catalogs),
//! `replies.rs` (what a tool server answers), `tool_server.rs` (a real OTC
//! tool server), `config.rs` (gateway.toml for a test), `gateway.rs` (the
//! real binary, started and driven), `http.rs` (a plain HTTP/1 client),
//! `openbao.rs` (a real Vault-API server, OpenBao's `bao server -dev`, for
//! every Vault test: secrets, tokens, policies, namespaces, its audit log,
//! sealed, frozen or killed on demand), `kv2.rs` (a stand-in answering as
//! Vault's KV v2 API does, only for the fault a real server cannot produce:
//! connections dropped without an answer), `oidc.rs` (a real OpenID Connect
//! provider, and a browser to click through it), `mcp_peer.rs` (the Python
//! SDK's MCP server as an upstream), `fleet.rs`
//! (redis-server and nginx, for replicas sharing state), `otlp.rs` (an
//! OTLP trace receiver on the official protobuf definitions), `jwt.rs` (tokens
//! signed here, and forged ones) and `wait.rs` (the one poll loop:
//! [`wait_until`] a condition holds, with a deadline and a message saying
//! what was awaited).

#![allow(dead_code)]

mod catalogs;
pub mod chromium;
mod config;
pub mod fleet;
mod gateway;
mod http;
pub mod jwt;
pub mod kv2;
pub mod mcp_peer;
pub mod oidc;
pub mod openbao;
pub mod otlp;
mod replies;
mod tool_server;
mod wait;

// Each test binary uses part of the harness.
#[allow(unused_imports)]
pub use {catalogs::*, config::*, gateway::*, http::*, replies::*, tool_server::*, wait::*};

use std::collections::HashMap;
use std::convert::Infallible;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{JoinHandle, JoinSet};

/// The Python with the MCP SDK and the test peers (`$OTC_TEST_PYTHON`, else
/// the project's `.venv`).
pub fn sdk_python() -> PathBuf {
    let path = std::env::var_os("OTC_TEST_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh (or `bash -c 'source scripts/lib.sh; need_python_peers'`), which installs the MCP SDK",
        path.display()
    );
    path
}

/// A script of tests/peers/ (the third-party peers the tests run).
pub fn peer_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers").join(name)
}

/// How long a gateway may take to print its listening line.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long `wait_for_*` keeps polling before the test fails.
pub const WAIT_TIMEOUT: Duration = Duration::from_secs(10);
/// The longest any single request to the gateway may take: a hang is a bug.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
