//! otc-gateway: one URL in front of many Open Tool Calling (OTC 1.0 / OXP)
//! tool servers.
//!
//! The life of a call is in [`call`]; the data plane that carries it is in
//! [`proxy`]; the catalog it is resolved against is in [`catalog`].

pub(crate) mod admin;
pub mod admin_client;
pub mod allocator;
pub(crate) mod approval_endpoint;
pub(crate) mod approval_gate;
pub mod approvals;
pub mod auth;
pub(crate) mod browser;
pub mod call;
pub mod catalog;
pub(crate) mod circuit;
pub mod config;
pub(crate) mod console;
pub mod demo;
pub mod dialect;
pub(crate) mod error;
pub mod explain;
pub mod gateway;
pub(crate) mod http1;
pub(crate) mod http_client;
pub mod idempotency;
pub mod integrity;
pub(crate) mod journal;
pub(crate) mod mcp;
pub(crate) mod mcp_endpoint;
pub(crate) mod metrics;
pub(crate) mod oauth;
pub(crate) mod oauth_endpoint;
pub(crate) mod openapi;
pub(crate) mod otel;
pub(crate) mod policy;
pub(crate) mod proxy;
pub(crate) mod ratelimit;
pub(crate) mod recent_calls;
pub(crate) mod redis_client;
pub(crate) mod reload;
pub(crate) mod reply;
pub(crate) mod requirements;
pub mod resolve;
pub mod scrub;
pub(crate) mod secret;
pub mod server;
pub(crate) mod tool_search;
pub(crate) mod trace;
pub(crate) mod upstream;
pub mod url_path;
pub mod validate;
pub mod vault;
pub mod wire;
